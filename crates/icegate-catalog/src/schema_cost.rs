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

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

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
}

impl Default for SchemaLimits {
    fn default() -> Self {
        Self { max_fields: 100_000, max_depth: 32, max_name_bytes: 1024, max_full_name_bytes: 32 * 1024 * 1024 }
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
}

/// Memory building a schema takes at its peak per field beyond its names (the field, its
/// entries in the id, name and accessor indexes, and those indexes' growth), and per byte of
/// full name (the name indexes, lower-cased and short names); `tests/cache_weights.rs` holds
/// the estimate between one and three times the peak the allocator sees.
const BYTES_PER_FIELD: u64 = 1400;
const COPIES_PER_FULL_NAME: u64 = 6;

impl SchemaCost {
    /// About what building these schemas allocates.
    pub fn build_bytes(&self) -> u64 {
        self.fields
            .saturating_mul(BYTES_PER_FIELD)
            .saturating_add(self.full_name_bytes.saturating_mul(COPIES_PER_FULL_NAME))
    }

    fn add(&mut self, other: SchemaCost) {
        self.fields = self.fields.saturating_add(other.fields);
        self.full_name_bytes = self.full_name_bytes.saturating_add(other.full_name_bytes);
        self.depth = self.depth.max(other.depth);
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

fn walk(json: &str, limits: &SchemaLimits, shape: Shape) -> Result<SchemaCost, SchemaRefused> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let walker = Walker { limits, total: std::cell::Cell::new(SchemaCost::default()) };
    let result = match shape {
        Shape::Schema => TypeSeed { walker: &walker, depth: 0, top: true }.deserialize(&mut deserializer).map(|c| {
            walker.count_schema(c);
        }),
        Shape::Document | Shape::Member => {
            ObjectSeed { walker: &walker, document: matches!(shape, Shape::Document) }.deserialize(&mut deserializer)
        }
    };
    match result {
        Ok(()) => {
            let total = walker.total.get();
            if total.full_name_bytes > limits.max_full_name_bytes {
                return Err(SchemaRefused(format!(
                    "the schemas' full field names add up to {} bytes; the limit is {} \
                     (catalog.schema_limits.max_full_name_bytes)",
                    total.full_name_bytes, limits.max_full_name_bytes
                )));
            }
            Ok(total)
        }
        Err(err) => Err(refusal(err)),
    }
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

struct Walker<'a> {
    limits: &'a SchemaLimits,
    total: std::cell::Cell<SchemaCost>,
}

impl Walker<'_> {
    fn count_schema(&self, cost: Sub) {
        let mut total = self.total.get();
        total.add(SchemaCost { fields: cost.fields, full_name_bytes: cost.names, depth: cost.depth });
        self.total.set(total);
    }

    fn check<E: de::Error>(&self, sub: &Sub) -> Result<(), E> {
        if sub.fields > self.limits.max_fields {
            return Err(limit(format!(
                "a schema has more than {} fields (catalog.schema_limits.max_fields)",
                self.limits.max_fields
            )));
        }
        if sub.names > self.limits.max_full_name_bytes {
            return Err(limit(format!(
                "a schema's full field names add up to more than {} bytes \
                 (catalog.schema_limits.max_full_name_bytes)",
                self.limits.max_full_name_bytes
            )));
        }
        Ok(())
    }
}

/// What a type holds below the field that has it: its fields, the bytes of their full names
/// relative to that field (without its own name and the dot after it), and its depth.
#[derive(Debug, Clone, Copy, Default)]
struct Sub {
    fields: u64,
    names: u64,
    depth: u32,
}

impl Sub {
    /// Adds a field named with `name_bytes` whose type holds `inner`.
    fn add_field(&mut self, name_bytes: u64, inner: Sub) {
        self.fields = self.fields.saturating_add(1).saturating_add(inner.fields);
        // The field's own name, and each field below it prefixed with `name.`.
        let below = name_bytes.saturating_add(1).saturating_mul(inner.fields).saturating_add(inner.names);
        self.names = self.names.saturating_add(name_bytes).saturating_add(below);
        self.depth = self.depth.max(inner.depth.saturating_add(1));
    }
}

/// A type: a primitive's name, or a struct, list or map object. `top`: the schema itself
/// (a struct with `schema-id` and the like).
struct TypeSeed<'w, 'a> {
    walker: &'w Walker<'a>,
    depth: u32,
    top: bool,
}

impl<'de> DeserializeSeed<'de> for TypeSeed<'_, '_> {
    type Value = Sub;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Sub, D::Error> {
        if self.depth > self.walker.limits.max_depth {
            return Err(limit(format!(
                "a schema is nested deeper than {} levels (catalog.schema_limits.max_depth)",
                self.walker.limits.max_depth
            )));
        }
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TypeSeed<'_, '_> {
    type Value = Sub;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a type: a primitive type's name, or a struct, list or map")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Sub, E> {
        if self.top {
            return Err(E::custom("a schema must be a struct object"));
        }
        Ok(Sub::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sub, A::Error> {
        let mut sub = Sub::default();
        while let Some(key) = map.next_key::<Member>()? {
            let child = TypeSeed { walker: self.walker, depth: self.depth + 1, top: false };
            match key {
                Member::Fields => {
                    let fields = map.next_value_seed(FieldsSeed { walker: self.walker, depth: self.depth + 1 })?;
                    sub = add(sub, fields);
                }
                Member::Element => sub.add_field("element".len() as u64, map.next_value_seed(child)?),
                Member::Key => sub.add_field("key".len() as u64, map.next_value_seed(child)?),
                Member::Value => sub.add_field("value".len() as u64, map.next_value_seed(child)?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            self.walker.check(&sub)?;
        }
        Ok(sub)
    }
}

fn add(mut a: Sub, b: Sub) -> Sub {
    a.fields = a.fields.saturating_add(b.fields);
    a.names = a.names.saturating_add(b.names);
    a.depth = a.depth.max(b.depth);
    a
}

/// A struct's `fields`.
struct FieldsSeed<'w, 'a> {
    walker: &'w Walker<'a>,
    depth: u32,
}

impl<'de> DeserializeSeed<'de> for FieldsSeed<'_, '_> {
    type Value = Sub;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Sub, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for FieldsSeed<'_, '_> {
    type Value = Sub;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of fields")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Sub, A::Error> {
        let mut sub = Sub::default();
        while let Some((name_bytes, inner)) =
            seq.next_element_seed(FieldSeed { walker: self.walker, depth: self.depth })?
        {
            sub.add_field(name_bytes, inner);
            self.walker.check(&sub)?;
        }
        Ok(sub)
    }
}

/// One field: its name's length and what its type holds.
struct FieldSeed<'w, 'a> {
    walker: &'w Walker<'a>,
    depth: u32,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_, '_> {
    type Value = (u64, Sub);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(u64, Sub), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_, '_> {
    type Value = (u64, Sub);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(u64, Sub), A::Error> {
        let (mut name_bytes, mut inner) = (0, Sub::default());
        while let Some(key) = map.next_key::<Member>()? {
            match key {
                Member::Name => {
                    name_bytes = map.next_value::<Length>()?.0;
                    if name_bytes > self.walker.limits.max_name_bytes {
                        return Err(limit(format!(
                            "a field name is {name_bytes} bytes; the limit is {} \
                             (catalog.schema_limits.max_name_bytes)",
                            self.walker.limits.max_name_bytes
                        )));
                    }
                }
                Member::Type => {
                    inner = map.next_value_seed(TypeSeed { walker: self.walker, depth: self.depth, top: false })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((name_bytes, inner))
    }
}

/// A document (`schemas` and `schema`) or an object with a `schema` member.
struct ObjectSeed<'w, 'a> {
    walker: &'w Walker<'a>,
    document: bool,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    /// Anything but an object holds no schema (and is for the typed parse to refuse).
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Member>()? {
            let schema = || TypeSeed { walker: self.walker, depth: 0, top: true };
            match key {
                Member::Schema => {
                    // A v1 document's `schema`, or a request's; `null` holds none.
                    if let Some(cost) = map.next_value_seed(OptionalSeed(schema()))? {
                        self.walker.count_schema(cost);
                    }
                }
                Member::Schemas if self.document => {
                    map.next_value_seed(SchemasSeed { walker: self.walker })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The members the walk looks at, read without copying the others' names.
enum Member {
    Fields,
    Element,
    Key,
    Value,
    Name,
    Type,
    Schema,
    Schemas,
    Other,
}

impl<'de> serde::Deserialize<'de> for Member {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Member;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }

            fn visit_str<E: de::Error>(self, key: &str) -> Result<Member, E> {
                Ok(match key {
                    "fields" => Member::Fields,
                    "element" => Member::Element,
                    "key" => Member::Key,
                    "value" => Member::Value,
                    "name" => Member::Name,
                    "type" => Member::Type,
                    "schema" => Member::Schema,
                    "schemas" => Member::Schemas,
                    _ => Member::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A string's length in bytes (the string itself is not kept).
struct Length(u64);

impl<'de> serde::Deserialize<'de> for Length {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LengthVisitor;
        impl Visitor<'_> for LengthVisitor {
            type Value = Length;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Length, E> {
                Ok(Length(value.len() as u64))
            }
        }
        deserializer.deserialize_str(LengthVisitor)
    }
}

/// A value that may be `null`.
struct OptionalSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for OptionalSeed<S> {
    type Value = Option<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for OptionalSeed<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a schema or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(deserializer).map(Some)
    }
}

/// A document's `schemas`.
struct SchemasSeed<'w, 'a> {
    walker: &'w Walker<'a>,
}

impl<'de> DeserializeSeed<'de> for SchemasSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for SchemasSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of schemas")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(cost) = seq.next_element_seed(TypeSeed { walker: self.walker, depth: 0, top: true })? {
            self.walker.count_schema(cost);
            let total = self.walker.total.get();
            if total.full_name_bytes > self.walker.limits.max_full_name_bytes {
                return Err(limit(format!(
                    "the schemas' full field names add up to more than {} bytes \
                     (catalog.schema_limits.max_full_name_bytes)",
                    self.walker.limits.max_full_name_bytes
                )));
            }
        }
        Ok(())
    }
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
        let walked = if self.what == "schema" { of_schema(json, limits) } else { of_member(json, limits) };
        let cost = walked.map_err(|refused| crate::CatalogError::bad_request(format!("{}: {refused}", self.what)))?;
        Ok(*self.cost.get_or_init(|| cost))
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
    if cost.full_name_bytes > limits.max_full_name_bytes {
        return Err(crate::CatalogError::bad_request(format!(
            "the request's schemas' full field names add up to {} bytes; the limit is {} \
             (catalog.schema_limits.max_full_name_bytes)",
            cost.full_name_bytes, limits.max_full_name_bytes
        )));
    }
    Ok((bytes, cost))
}

#[cfg(test)]
mod tests {
    use iceberg::spec::Schema;
    use serde_json::json;

    use super::*;

    fn field(id: i32, name: &str, r#type: serde_json::Value) -> serde_json::Value {
        json!({"id": id, "name": name, "required": false, "type": r#type})
    }

    /// The full names the `iceberg` crate indexes, summed: what the walk predicts.
    fn built_names(schema: &serde_json::Value) -> (u64, u64) {
        let built: Schema = serde_json::from_value(schema.clone()).unwrap();
        let mut fields = 0;
        let mut bytes = 0;
        for id in 0..=built.highest_field_id() {
            if let Some(name) = built.name_by_field_id(id) {
                fields += 1;
                bytes += name.len() as u64;
            }
        }
        (fields, bytes)
    }

    #[test]
    fn the_walk_counts_what_the_build_indexes() {
        let schema = json!({
            "type": "struct", "schema-id": 3,
            "fields": [
                field(1, "id", json!("long")),
                field(2, "point", json!({"type": "struct", "fields": [
                    field(3, "x", json!("double")),
                    field(4, "tags", json!({"type": "list", "element-id": 5, "element-required": false,
                        "element": {"type": "struct", "fields": [field(6, "k", json!("string"))]}})),
                ]})),
                field(7, "attributes", json!({"type": "map", "key-id": 8, "key": "string", "value-id": 9,
                    "value-required": false, "value": {"type": "list", "element-id": 10, "element": "int",
                    "element-required": true}})),
            ]
        });
        let cost = of_schema(&schema.to_string(), &SchemaLimits::default()).unwrap();
        let (fields, bytes) = built_names(&schema);
        assert_eq!((cost.fields, cost.full_name_bytes), (fields, bytes));
        assert_eq!(cost.fields, 10);
        // point > tags > element > k
        assert_eq!(cost.depth, 4);
    }

    #[test]
    fn a_long_parent_name_over_many_children_is_refused_before_building() {
        let children: Vec<_> = (0..2_000).map(|i| field(i + 2, &format!("c{i}"), json!("int"))).collect();
        let parent = "p".repeat(1000);
        let schema =
            json!({"type": "struct", "fields": [field(1, &parent, json!({"type": "struct", "fields": children}))]});
        let limits = SchemaLimits { max_full_name_bytes: 1_000_000, ..SchemaLimits::default() };
        let refused = of_schema(&schema.to_string(), &limits).unwrap_err();
        assert!(refused.0.contains("max_full_name_bytes"), "{refused}");
        // Within the limit, the prediction is exact.
        let cost = of_schema(&schema.to_string(), &SchemaLimits::default()).unwrap();
        assert_eq!((cost.fields, cost.full_name_bytes), built_names(&schema));
    }

    #[test]
    fn names_depth_and_field_counts_are_bounded() {
        let limits = SchemaLimits { max_fields: 10, max_depth: 3, max_name_bytes: 8, max_full_name_bytes: 1 << 20 };
        let long_name = json!({"type": "struct", "fields": [field(1, "abcdefghi", json!("int"))]});
        assert!(of_schema(&long_name.to_string(), &limits).unwrap_err().0.contains("max_name_bytes"));
        let many: Vec<_> = (0..11).map(|i| field(i + 1, &format!("f{i}"), json!("int"))).collect();
        let wide = json!({"type": "struct", "fields": many});
        assert!(of_schema(&wide.to_string(), &limits).unwrap_err().0.contains("max_fields"));
        let mut deep = json!("int");
        for i in 0..4 {
            deep = json!({"type": "list", "element-id": 100 + i, "element-required": true, "element": deep});
        }
        let deep = json!({"type": "struct", "fields": [field(1, "d", deep)]});
        assert!(of_schema(&deep.to_string(), &limits).unwrap_err().0.contains("max_depth"));
    }

    #[test]
    fn nesting_past_the_json_parsers_limit_is_refused_as_too_deep() {
        let mut deep = json!("int").to_string();
        for i in 0..200 {
            deep = format!(r#"{{"type":"list","element-id":{i},"element-required":true,"element":{deep}}}"#);
        }
        let schema = format!(r#"{{"type":"struct","fields":[{{"id":1,"name":"d","required":false,"type":{deep}}}]}}"#);
        let refused = of_schema(&schema, &SchemaLimits::default()).unwrap_err();
        assert!(refused.0.contains("max_depth"), "{refused}");
    }

    #[test]
    fn documents_count_every_schema_and_members_their_schema() {
        let one = json!({"type": "struct", "schema-id": 0, "fields": [field(1, "a", json!("int"))]});
        let two = json!({"type": "struct", "schema-id": 1, "fields": [field(1, "a", json!("int")), field(2, "bb", json!("int"))]});
        let document =
            json!({"format-version": 2, "schemas": [one, two], "snapshots": [{"summary": {"operation": "append"}}]});
        let cost = of_document(&document.to_string(), &SchemaLimits::default()).unwrap();
        assert_eq!((cost.fields, cost.full_name_bytes), (3, 4));
        let v1 = json!({"format-version": 1, "schema": one});
        assert_eq!(of_document(&v1.to_string(), &SchemaLimits::default()).unwrap().fields, 1);
        let update = json!({"action": "add-schema", "schema": two, "last-column-id": 2});
        assert_eq!(of_member(&update.to_string(), &SchemaLimits::default()).unwrap().fields, 2);
        let other = json!({"action": "set-properties", "updates": {"schema": "not one"}});
        assert_eq!(of_member(&other.to_string(), &SchemaLimits::default()).unwrap(), SchemaCost::default());
        // Many schemas within each one's limits still add up against the document's.
        let limits = SchemaLimits { max_full_name_bytes: 3, ..SchemaLimits::default() };
        assert!(of_document(&document.to_string(), &limits).unwrap_err().0.contains("max_full_name_bytes"));
    }
}
