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

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

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

fn walk(json: &str, limits: &SchemaLimits, shape: Shape) -> Result<SchemaCost, SchemaRefused> {
    let walker = Walker { limits, total: std::cell::Cell::new(SchemaCost::default()) };
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let result = match shape {
        Shape::Schema => walker.schema(&mut deserializer).map(|_| ()),
        Shape::Document | Shape::Member => {
            let document = matches!(shape, Shape::Document);
            ObjectSeed { walker: &walker, document }.deserialize(&mut deserializer).map(|buffered| {
                // A document is buffered whole, and its parsed form holds about its text.
                let copied = match document {
                    true => buffered.bytes().saturating_mul(DOCUMENT_COPIES).saturating_add(json.len() as u64),
                    false => buffered.bytes().saturating_mul(MEMBER_COPIES),
                };
                walker.count(SchemaCost { copied_bytes: copied, ..SchemaCost::default() });
            })
        }
    }
    .and_then(|()| deserializer.end());
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

/// What a parser that buffers a value as a tree (serde's `Content`, as untagged enums and
/// flattened structs do) allocates for it: a node for every value and member name, and the
/// strings it must copy (those with escapes; the others are borrowed from the text).
#[derive(Debug, Clone, Copy, Default)]
struct Buffered {
    nodes: u64,
    owned: u64,
}

/// A buffered node (serde's `Content` is 32 bytes), with its share of the vectors and maps
/// that hold them.
const NODE_BYTES: u64 = 40;

impl Buffered {
    fn node(owned: u64) -> Self {
        Self { nodes: 1, owned }
    }

    fn add(&mut self, other: Buffered) {
        self.nodes = self.nodes.saturating_add(other.nodes);
        self.owned = self.owned.saturating_add(other.owned);
    }

    fn bytes(self) -> u64 {
        self.nodes.saturating_mul(NODE_BYTES).saturating_add(self.owned)
    }
}

/// Counts what buffering any value takes (a member the walk does not otherwise read).
struct Count;

impl<'de> DeserializeSeed<'de> for Count {
    type Value = Buffered;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Buffered, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count {
    type Value = Buffered;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Buffered, E> {
        Ok(Buffered::node(value.len() as u64))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Buffered, A::Error> {
        let mut buffered = Buffered::node(0);
        while let Some(element) = seq.next_element_seed(Count)? {
            buffered.add(element);
        }
        Ok(buffered)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Buffered, A::Error> {
        let mut buffered = Buffered::node(0);
        while let Some(key) = map.next_key_seed(Count)? {
            buffered.add(key);
            buffered.add(map.next_value_seed(Count)?);
        }
        Ok(buffered)
    }
}

struct Walker<'a> {
    limits: &'a SchemaLimits,
    total: std::cell::Cell<SchemaCost>,
}

impl Walker<'_> {
    fn count(&self, cost: SchemaCost) {
        let mut total = self.total.get();
        total.add(cost);
        self.total.set(total);
    }

    /// Walks one schema (the value `deserializer` holds) and counts it; what buffering its text
    /// takes, for the document or request it is in.
    fn schema<'de, D: Deserializer<'de>>(&self, deserializer: D) -> Result<Buffered, D::Error> {
        let sub = TypeSeed { walker: self, depth: 0, top: true }.deserialize(deserializer)?;
        let copied = sub.copied.saturating_add(sub.buffered.bytes().saturating_mul(SCHEMA_COPIES));
        self.count(SchemaCost {
            fields: sub.fields,
            full_name_bytes: sub.names,
            depth: sub.depth,
            copied_bytes: copied,
        });
        check_total(&self.total.get(), self.limits).map_err(limit)?;
        Ok(sub.buffered)
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
        if sub.copied > self.limits.max_build_bytes {
            return Err(limit(format!(
                "building a schema would take more than {} MiB (catalog.schema_limits.max_build_bytes)",
                self.limits.max_build_bytes >> 20
            )));
        }
        Ok(())
    }
}

/// What a type holds below the field that has it: its fields, the bytes of their full names
/// relative to that field (without its own name and the dot after it), its depth, what
/// buffering its text takes, and what the parser buffers for it and the types nested in it.
///
/// The `iceberg` crate parses types through an untagged enum, which buffers a type's whole
/// text (as a tree of values) and buffers it again at every level below: each node is held
/// once per type around it, whatever it is (members the crate ignores too). So a type adds
/// its whole text's buffering to what was copied for the types within it.
#[derive(Debug, Clone, Copy, Default)]
struct Sub {
    fields: u64,
    names: u64,
    depth: u32,
    buffered: Buffered,
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
        self.buffered.add(inner.buffered);
        self.copied = self.copied.saturating_add(inner.copied);
    }

    /// Adds what a struct's `fields` hold.
    fn add(&mut self, other: Sub) {
        self.fields = self.fields.saturating_add(other.fields);
        self.names = self.names.saturating_add(other.names);
        self.depth = self.depth.max(other.depth);
        self.buffered.add(other.buffered);
        self.copied = self.copied.saturating_add(other.copied);
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
        let (walker, top) = (self.walker, self.top);
        let mut sub = deserializer.deserialize_any(self)?;
        // This level buffers the type's whole text once more.
        sub.copied = sub.copied.saturating_add(sub.buffered.bytes());
        if !top {
            walker.check(&sub)?;
        }
        Ok(sub)
    }
}

impl<'de> Visitor<'de> for TypeSeed<'_, '_> {
    type Value = Sub;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a type: a primitive type's name, or a struct, list or map")
    }

    fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Sub, E> {
        self.primitive(0)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Sub, E> {
        self.primitive(value.len() as u64)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sub, A::Error> {
        let mut sub = Sub { buffered: Buffered::node(0), ..Sub::default() };
        let below = self.depth + 1;
        let child = || TypeSeed { walker: self.walker, depth: below, top: false };
        while let Some((key, owned)) = map.next_key::<Keyed>()?.map(|k| (k.member, k.owned)) {
            sub.buffered.add(Buffered::node(owned));
            match key {
                Member::Fields => {
                    let fields = map.next_value_seed(FieldsSeed { walker: self.walker, depth: below })?;
                    sub.add(fields);
                }
                Member::Element => sub.add_field("element".len() as u64, map.next_value_seed(child())?),
                Member::Key => sub.add_field("key".len() as u64, map.next_value_seed(child())?),
                Member::Value => sub.add_field("value".len() as u64, map.next_value_seed(child())?),
                _ => sub.buffered.add(map.next_value_seed(Count)?),
            }
            self.walker.check(&sub)?;
        }
        Ok(sub)
    }
}

impl TypeSeed<'_, '_> {
    fn primitive<E: de::Error>(self, owned: u64) -> Result<Sub, E> {
        if self.top {
            return Err(E::custom("a schema must be a struct object"));
        }
        Ok(Sub { buffered: Buffered::node(owned), ..Sub::default() })
    }
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
        let mut sub = Sub { buffered: Buffered::node(0), ..Sub::default() };
        while let Some((name_bytes, inner, own)) =
            seq.next_element_seed(FieldSeed { walker: self.walker, depth: self.depth })?
        {
            sub.add_field(name_bytes, inner);
            sub.buffered.add(own);
            self.walker.check(&sub)?;
        }
        Ok(sub)
    }
}

/// One field: its name's length, what its type holds, and what buffering the rest of the
/// field object takes.
struct FieldSeed<'w, 'a> {
    walker: &'w Walker<'a>,
    depth: u32,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_, '_> {
    type Value = (u64, Sub, Buffered);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_, '_> {
    type Value = (u64, Sub, Buffered);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut name_bytes, mut inner, mut own) = (0, Sub::default(), Buffered::node(0));
        while let Some((key, owned)) = map.next_key::<Keyed>()?.map(|k| (k.member, k.owned)) {
            own.add(Buffered::node(owned));
            match key {
                Member::Name => {
                    let name = map.next_value::<Length>()?;
                    name_bytes = name.bytes;
                    own.add(Buffered::node(name.owned));
                    if name_bytes > self.walker.limits.max_name_bytes {
                        return Err(limit(format!(
                            "a field name is {name_bytes} bytes; the limit is {} \
                             (catalog.schema_limits.max_name_bytes)",
                            self.walker.limits.max_name_bytes
                        )));
                    }
                }
                Member::Type => {
                    inner.add(map.next_value_seed(TypeSeed { walker: self.walker, depth: self.depth, top: false })?);
                }
                _ => own.add(map.next_value_seed(Count)?),
            }
        }
        Ok((name_bytes, inner, own))
    }
}

/// A document (`schemas` and `schema`) or an object with a `schema` member; what buffering all
/// of it takes.
struct ObjectSeed<'w, 'a> {
    walker: &'w Walker<'a>,
    document: bool,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = Buffered;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Buffered, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = Buffered;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    /// Anything but an object holds no schema (and is for the typed parse to refuse).
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Buffered, A::Error> {
        Count.visit_seq(seq)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Buffered, E> {
        Count.visit_str(value)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Buffered, E> {
        Ok(Buffered::node(0))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Buffered, A::Error> {
        let mut buffered = Buffered::node(0);
        while let Some((key, owned)) = map.next_key::<Keyed>()?.map(|k| (k.member, k.owned)) {
            buffered.add(Buffered::node(owned));
            match key {
                // A v1 document's `schema`, or a request's; `null` holds none.
                Member::Schema => {
                    if let Some(schema) = map.next_value_seed(OptionalSchema(self.walker))? {
                        buffered.add(schema);
                    } else {
                        buffered.add(Buffered::node(0));
                    }
                }
                Member::Schemas if self.document => {
                    buffered.add(map.next_value_seed(SchemasSeed { walker: self.walker })?)
                }
                _ => buffered.add(map.next_value_seed(Count)?),
            }
        }
        Ok(buffered)
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

/// A member name, and the bytes the parser copies for it (names with escapes).
struct Keyed {
    member: Member,
    owned: u64,
}

impl<'de> serde::Deserialize<'de> for Keyed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl KeyVisitor {
            fn keyed(key: &str, owned: u64) -> Keyed {
                let member = match key {
                    "fields" => Member::Fields,
                    "element" => Member::Element,
                    "key" => Member::Key,
                    "value" => Member::Value,
                    "name" => Member::Name,
                    "type" => Member::Type,
                    "schema" => Member::Schema,
                    "schemas" => Member::Schemas,
                    _ => Member::Other,
                };
                Keyed { member, owned }
            }
        }
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Keyed;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }

            fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Keyed, E> {
                Ok(Self::keyed(key, 0))
            }

            fn visit_str<E: de::Error>(self, key: &str) -> Result<Keyed, E> {
                Ok(Self::keyed(key, key.len() as u64))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A string's length in bytes, and what the parser copies of it (the string is not kept).
struct Length {
    bytes: u64,
    owned: u64,
}

impl<'de> serde::Deserialize<'de> for Length {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LengthVisitor;
        impl<'de> Visitor<'de> for LengthVisitor {
            type Value = Length;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Length, E> {
                Ok(Length { bytes: value.len() as u64, owned: 0 })
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Length, E> {
                Ok(Length { bytes: value.len() as u64, owned: value.len() as u64 })
            }
        }
        deserializer.deserialize_str(LengthVisitor)
    }
}

/// A schema, or `null`.
struct OptionalSchema<'w, 'a>(&'w Walker<'a>);

impl<'de> DeserializeSeed<'de> for OptionalSchema<'_, '_> {
    type Value = Option<Buffered>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for OptionalSchema<'_, '_> {
    type Value = Option<Buffered>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a schema or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.0.schema(deserializer).map(Some)
    }
}

/// A document's `schemas`.
struct SchemasSeed<'w, 'a> {
    walker: &'w Walker<'a>,
}

impl<'de> DeserializeSeed<'de> for SchemasSeed<'_, '_> {
    type Value = Buffered;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Buffered, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for SchemasSeed<'_, '_> {
    type Value = Buffered;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of schemas")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Buffered, A::Error> {
        let mut buffered = Buffered::node(0);
        while let Some(schema) = seq.next_element_seed(SchemaSeed(self.walker))? {
            buffered.add(schema);
        }
        Ok(buffered)
    }
}

/// One schema of a document's `schemas`.
struct SchemaSeed<'w, 'a>(&'w Walker<'a>);

impl<'de> DeserializeSeed<'de> for SchemaSeed<'_, '_> {
    type Value = Buffered;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Buffered, D::Error> {
        self.0.schema(deserializer)
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

#[cfg(test)]
mod tests;
