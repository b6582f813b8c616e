//! What building a schema will cost, measured on its JSON before the `iceberg` crate builds it.
//!
//! Building an `iceberg::spec::Schema` indexes every field by its full dotted name (several
//! maps of them), so what it allocates grows with the *sum of the full names*, not with the
//! JSON: one struct field with a 16 KiB name and 20,000 one-letter children is a 1.3 MB request
//! whose schema holds about a gigabyte of names. Every schema the catalog builds — in a request
//! body, a registered metadata file, a stored document, a view — is first walked here, without
//! building anything (constant memory per level of nesting), and refused when it passes the
//! limits ([`SchemaLimits`], `catalog.schema_limits`); the walk also says how much memory the
//! build will take, which commits reserve in the commit budget before building.
//!
//! The walk counts what the build's index counts: every struct field, and the `element` of a
//! list and the `key` and `value` of a map as fields of their own (`a.element`, `m.key`).

use std::fmt;

use serde::de;

/// Bounds on what one schema, or the schemas of one document or request together, may cost
/// (`catalog.schema_limits`). The defaults are far past what real tables use: wide tables have
/// thousands of columns whose names are tens of bytes, nested a few levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaLimits {
    /// Fields of one schema, nested ones included.
    pub max_fields: u64,
    /// Levels of nesting (a struct, list or map inside a field is one more level).
    pub max_depth: u32,
    /// Bytes of one field's name.
    pub max_name_bytes: u64,
    /// Bytes of every field's full dotted name (`a.b.c`), summed over every schema of one
    /// document or request.
    pub max_full_name_bytes: u64,
    /// What building every schema of one document or request may take, by the walk's
    /// estimate ([`SchemaCost::build_bytes`]).
    pub max_build_bytes: u64,
}

impl Default for SchemaLimits {
    fn default() -> Self {
        Self {
            max_fields: 100_000,
            max_depth: 32,
            max_name_bytes: 1024,
            max_full_name_bytes: 8 * 1024 * 1024,
            max_build_bytes: 512 * 1024 * 1024,
        }
    }
}

/// What the schemas walked add up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchemaCost {
    /// Fields, nested ones included, over every schema walked.
    pub fields: u64,
    /// Bytes of the fields' full dotted names, summed.
    pub full_name_bytes: u64,
    /// The deepest nesting seen.
    pub depth: u32,
    /// What the parser that builds them allocates to buffer their text (see
    /// `Walker::walk_type`).
    pub copied_bytes: u64,
}

/// Memory building a schema takes at its peak, beside buffering its text (`copied_bytes`): per
/// field (the field, its entries in the id and accessor indexes) and per byte of full name (the
/// name indexes, lower-cased and short names). `tests/cache_weights.rs` holds the estimate
/// between one and three times the peak the allocator sees, for flat, wide, deep and padded
/// schemas.
const BYTES_PER_FIELD: u64 = 200;
const COPIES_PER_FULL_NAME: u64 = 5;

impl SchemaCost {
    /// About what building these schemas allocates.
    pub fn build_bytes(&self) -> u64 {
        self.fields
            .saturating_mul(BYTES_PER_FIELD)
            .saturating_add(self.full_name_bytes.saturating_mul(COPIES_PER_FULL_NAME))
            .saturating_add(self.copied_bytes)
    }

    fn add(&mut self, other: SchemaCost) {
        self.fields = self.fields.saturating_add(other.fields);
        self.full_name_bytes = self.full_name_bytes.saturating_add(other.full_name_bytes);
        self.depth = self.depth.max(other.depth);
        self.copied_bytes = self.copied_bytes.saturating_add(other.copied_bytes);
    }
}

/// Why a schema was refused (or could not be read), as a client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaRefused(pub String);

impl fmt::Display for SchemaRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Walks one schema object (a request's `schema`, an `add-schema` update's).
pub fn of_schema(json: &str, limits: &SchemaLimits) -> Result<SchemaCost, SchemaRefused> {
    walk(json, limits, Shape::Schema)
}

/// Walks every schema of a table or view metadata document (`schemas`, and a v1 `schema`).
pub fn of_document(json: &str, limits: &SchemaLimits) -> Result<SchemaCost, SchemaRefused> {
    walk(json, limits, Shape::Document)
}

/// Walks the `schema` member of an object that may have one (a createTable or createView
/// request, a table or view update).
pub fn of_member(json: &str, limits: &SchemaLimits) -> Result<SchemaCost, SchemaRefused> {
    walk(json, limits, Shape::Member)
}

#[derive(Clone, Copy)]
enum Shape {
    Schema,
    Document,
    Member,
}

/// How many more times the parser buffers a whole schema's text, beside the buffering of each
/// nested type (`SchemaEnum` is an untagged enum, and its struct is flattened).
const SCHEMA_COPIES: u64 = 2;
/// How many times the parser buffers a whole metadata document (its version is an untagged
/// enum, and its members are flattened).
const DOCUMENT_COPIES: u64 = 2;
/// How many times a request's update is buffered (an internally tagged enum).
const MEMBER_COPIES: u64 = 1;

/// The limits on what the schemas of one document or request cost together.
fn check_total(total: &SchemaCost, limits: &SchemaLimits) -> Result<(), String> {
    if total.full_name_bytes > limits.max_full_name_bytes {
        return Err(format!(
            "the schemas' full field names add up to {} bytes; the limit is {} \
             (catalog.schema_limits.max_full_name_bytes)",
            total.full_name_bytes, limits.max_full_name_bytes
        ));
    }
    if total.build_bytes() > limits.max_build_bytes {
        return Err(format!(
            "building it would take about {} MiB; the limit is {} MiB (catalog.schema_limits.max_build_bytes)",
            total.build_bytes() >> 20,
            limits.max_build_bytes >> 20
        ));
    }
    Ok(())
}

/// A limit's message as it is (serde_json appends a position to custom errors).
fn refusal(err: serde_json::Error) -> SchemaRefused {
    let text = err.to_string();
    match text.find(LIMIT_MARK) {
        Some(start) => {
            let rest = &text[start + LIMIT_MARK.len()..];
            SchemaRefused(rest.split(" at line ").next().unwrap_or(rest).to_owned())
        }
        None if err.is_syntax() || err.is_eof() => SchemaRefused(format!("malformed JSON: {text}")),
        // Not a limit: the schema's shape is wrong, which the build will say in its own words.
        None => SchemaRefused(format!("invalid schema: {text}")),
    }
}

const LIMIT_MARK: &str = "\u{1}limit:";

fn limit<E: de::Error>(message: String) -> E {
    E::custom(format!("{LIMIT_MARK}{message}"))
}

/// A part of a request that may build schemas (a createTable's `schema`, one of a commit's
/// updates), kept as the JSON it came as until the request is authorized: it is walked
/// ([`Pending::cost`]) and built ([`Pending::build`]) only then, once, however often a commit is
/// staged again.
pub struct Pending<T> {
    json: Option<Box<serde_json::value::RawValue>>,
    what: &'static str,
    cost: std::sync::OnceLock<SchemaCost>,
    built: std::sync::OnceLock<T>,
}

impl<T> fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.json.as_ref().map_or(0, |json| json.get().len());
        f.debug_struct("Pending").field("what", &self.what).field("bytes", &bytes).finish()
    }
}

impl<T: serde::de::DeserializeOwned> Pending<T> {
    /// `json` as a request sent it; `what` names it in errors ("schema", "update").
    pub fn new(json: Box<serde_json::value::RawValue>, what: &'static str) -> Self {
        Self { json: Some(json), what, cost: std::sync::OnceLock::new(), built: std::sync::OnceLock::new() }
    }

    /// A value the catalog made itself (nothing to walk or build).
    pub fn built(value: T) -> Self {
        let built = std::sync::OnceLock::new();
        let _ = built.set(value);
        let cost = std::sync::OnceLock::new();
        let _ = cost.set(SchemaCost::default());
        Self { json: None, what: "value", cost, built }
    }

    /// Bytes of the JSON it came as (0 when the catalog made it).
    pub fn json_bytes(&self) -> usize {
        self.json.as_ref().map_or(0, |json| json.get().len())
    }

    /// What its schemas cost (walked once), refused past `limits`.
    pub fn cost(&self, limits: &SchemaLimits) -> crate::Result<SchemaCost> {
        if let Some(cost) = self.cost.get() {
            return Ok(*cost);
        }
        let json = self.json.as_ref().map_or("null", |json| json.get());
        let refused = |refused: SchemaRefused| crate::CatalogError::bad_request(format!("{}: {refused}", self.what));
        let cost = if self.what == "schema" {
            of_schema(json, limits).map_err(refused)?
        } else {
            // An update is an internally tagged enum: the parser buffers all of it first (the
            // walk counts that, as `MEMBER_COPIES`).
            of_member(json, limits).map_err(refused)?
        };
        Ok(*self.cost.get_or_init(|| cost))
    }

    /// The value, built once its cost passed `limits`, taken out (no copy is left behind).
    pub fn into_built(self, limits: &SchemaLimits) -> crate::Result<T> {
        self.build(limits)?;
        Ok(self.built.into_inner().expect("built above"))
    }

    /// The value, built once its cost passed `limits`.
    pub fn build(&self, limits: &SchemaLimits) -> crate::Result<&T> {
        if let Some(built) = self.built.get() {
            return Ok(built);
        }
        self.cost(limits)?;
        let json = self.json.as_ref().map_or("null", |json| json.get());
        let value = serde_json::from_str(json)
            .map_err(|e| crate::CatalogError::bad_request(format!("invalid {}: {e}", self.what)))?;
        Ok(self.built.get_or_init(|| value))
    }
}

/// What every pending part of a request costs together: bytes of JSON and what its schemas
/// build, refused when any one passes `limits` (and the schemas together past
/// `max_full_name_bytes`).
pub fn total_cost<'a, T: serde::de::DeserializeOwned + 'a>(
    parts: impl IntoIterator<Item = &'a Pending<T>>,
    limits: &SchemaLimits,
) -> crate::Result<(usize, SchemaCost)> {
    let (mut bytes, mut cost) = (0usize, SchemaCost::default());
    for part in parts {
        bytes = bytes.saturating_add(part.json_bytes());
        cost.add(part.cost(limits)?);
    }
    check_total(&cost, limits).map_err(|why| crate::CatalogError::bad_request(format!("the request: {why}")))?;
    Ok((bytes, cost))
}

mod seeds;
#[cfg(test)]
mod tests;

use seeds::walk;
