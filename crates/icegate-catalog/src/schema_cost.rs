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

fn walk(json: &str, limits: &SchemaLimits, shape: Shape) -> Result<SchemaCost, SchemaRefused> {
    let walker = Walker { limits, total: std::cell::Cell::new(SchemaCost::default()) };
    let result = match shape {
        Shape::Schema => walker.schema(json),
        Shape::Document | Shape::Member => {
            let mut deserializer = serde_json::Deserializer::from_str(json);
            ObjectSeed { walker: &walker, document: matches!(shape, Shape::Document) }
                .deserialize(&mut deserializer)
                .and_then(|()| deserializer.end())
        }
    };
    match result {
        Ok(()) => {
            let total = walker.total.get();
            check_total(&total, limits).map_err(SchemaRefused)?;
            Ok(total)
        }
        Err(err) => Err(refusal(err)),
    }
}

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
            "building the schemas would take about {} MiB; the limit is {} MiB \
             (catalog.schema_limits.max_build_bytes)",
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

/// How many more times a whole schema's text is buffered by the parser that builds it, beside
/// the buffering of each nested type (`SchemaEnum` is untagged, and its struct is flattened).
const SCHEMA_COPIES: u64 = 2;

/// What a parser that buffers `json` as a tree of values (serde's `Content`, as untagged enums
/// and flattened structs do) allocates: a node for every value and member name, and the
/// strings it must copy (those with escapes; the others are borrowed from the text).
fn buffered_bytes(json: &str) -> Result<u64, serde_json::Error> {
    /// A buffered node (serde's `Content` is 32 bytes), a map entry's pair of them, and the
    /// vectors that hold them.
    const NODE_BYTES: u64 = 40;
    struct Count<'c>(&'c std::cell::Cell<(u64, u64)>);
    impl Count<'_> {
        fn node(&self, copied: u64) {
            let (nodes, bytes) = self.0.get();
            self.0.set((nodes.saturating_add(1), bytes.saturating_add(copied)));
        }
    }
    impl<'de> DeserializeSeed<'de> for Count<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
            deserializer.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Count<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
            self.node(0);
            Ok(())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
            self.node(0);
            Ok(())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
            self.node(0);
            Ok(())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
            self.node(0);
            Ok(())
        }
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            self.node(0);
            Ok(())
        }
        fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<(), E> {
            self.node(0);
            Ok(())
        }
        fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
            self.node(value.len() as u64);
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            self.node(0);
            while seq.next_element_seed(Count(self.0))?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            self.node(0);
            while map.next_key_seed(Count(self.0))?.is_some() {
                map.next_value_seed(Count(self.0))?;
            }
            Ok(())
        }
    }
    let counted = std::cell::Cell::new((0, 0));
    Count(&counted).deserialize(&mut serde_json::Deserializer::from_str(json))?;
    let (nodes, copied) = counted.get();
    Ok(nodes.saturating_mul(NODE_BYTES).saturating_add(copied))
}

struct Walker<'a> {
    limits: &'a SchemaLimits,
    total: std::cell::Cell<SchemaCost>,
}

impl Walker<'_> {
    /// Walks one schema given as its text, and counts it.
    fn schema(&self, json: &str) -> Result<(), serde_json::Error> {
        let mut sub = self.walk_type(json, 0, true)?;
        sub.copied = sub.copied.saturating_add(buffered_bytes(json)?.saturating_mul(SCHEMA_COPIES));
        let mut total = self.total.get();
        total.add(SchemaCost {
            fields: sub.fields,
            full_name_bytes: sub.names,
            depth: sub.depth,
            copied_bytes: sub.copied,
        });
        self.total.set(total);
        check_total(&total, self.limits).map_err(limit)
    }

    /// Walks a type given as its text (a struct, list or map object, or a primitive's name) at
    /// nesting level `depth`. The `iceberg` crate parses types through an untagged enum, which
    /// buffers a type's whole text (as a tree of values) and buffers it again at every level
    /// below: each byte is held once per level above it. So a type's text counts as copied
    /// once more, whatever it holds (members the crate ignores too).
    fn walk_type(&self, json: &str, depth: u32, top: bool) -> Result<Sub, serde_json::Error> {
        if depth > self.limits.max_depth {
            return Err(limit(format!(
                "a schema is nested deeper than {} levels (catalog.schema_limits.max_depth)",
                self.limits.max_depth
            )));
        }
        let mut deserializer = serde_json::Deserializer::from_str(json);
        let mut sub = TypeSeed { walker: self, depth, top }.deserialize(&mut deserializer)?;
        sub.copied = sub.copied.saturating_add(buffered_bytes(json)?);
        Ok(sub)
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
/// relative to that field (without its own name and the dot after it), its depth, and the
/// bytes the parser buffers for its nested types (see [`Walker::walk_type`]).
#[derive(Debug, Clone, Copy, Default)]
struct Sub {
    fields: u64,
    names: u64,
    depth: u32,
    copied: u64,
}

impl Sub {
    /// Adds a field named with `name_bytes` whose type holds `inner`.
    fn add_field(&mut self, name_bytes: u64, inner: Sub) {
        self.fields = self.fields.saturating_add(1).saturating_add(inner.fields);
        // The field's own name, and each field below it prefixed with `name.`.
        let below = name_bytes.saturating_add(1).saturating_mul(inner.fields).saturating_add(inner.names);
        self.names = self.names.saturating_add(name_bytes).saturating_add(below);
        self.depth = self.depth.max(inner.depth.saturating_add(1));
        self.copied = self.copied.saturating_add(inner.copied);
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
        deserializer.deserialize_any(self)
    }
}

/// The next value of `map` as its text, walked as a type at `depth`.
fn nested_type<'de, A: MapAccess<'de>>(walker: &Walker<'_>, map: &mut A, depth: u32) -> Result<Sub, A::Error> {
    let raw: &'de serde_json::value::RawValue = map.next_value()?;
    walker.walk_type(raw.get(), depth, false).map_err(<A::Error as de::Error>::custom)
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
        let below = self.depth + 1;
        while let Some(key) = map.next_key::<Member>()? {
            match key {
                Member::Fields => {
                    let fields = map.next_value_seed(FieldsSeed { walker: self.walker, depth: below })?;
                    sub = add(sub, fields);
                }
                Member::Element => sub.add_field("element".len() as u64, nested_type(self.walker, &mut map, below)?),
                Member::Key => sub.add_field("key".len() as u64, nested_type(self.walker, &mut map, below)?),
                Member::Value => sub.add_field("value".len() as u64, nested_type(self.walker, &mut map, below)?),
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
    a.copied = a.copied.saturating_add(b.copied);
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
                Member::Type => inner = add(inner, nested_type(self.walker, &mut map, self.depth)?),
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
            match key {
                Member::Schema => {
                    // A v1 document's `schema`, or a request's; `null` holds none.
                    let raw: Option<&'de serde_json::value::RawValue> = map.next_value()?;
                    if let Some(raw) = raw.filter(|raw| raw.get() != "null") {
                        self.walker.schema(raw.get()).map_err(<A::Error as de::Error>::custom)?;
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
        while let Some(raw) = seq.next_element::<&'de serde_json::value::RawValue>()? {
            self.walker.schema(raw.get()).map_err(<A::Error as de::Error>::custom)?;
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
        let refused = |refused: SchemaRefused| crate::CatalogError::bad_request(format!("{}: {refused}", self.what));
        let cost = if self.what == "schema" {
            of_schema(json, limits).map_err(refused)?
        } else {
            // An update is an internally tagged enum: the parser buffers all of it first.
            let mut cost = of_member(json, limits).map_err(refused)?;
            let buffered = buffered_bytes(json).map_err(|e| refused(refusal(e)))?;
            cost.copied_bytes = cost.copied_bytes.saturating_add(buffered);
            cost
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

#[cfg(test)]
mod tests;
