//! The walk itself: serde seeds that visit a schema's JSON (or a document's, or an update's)
//! without building it, counting what the build would index and what the parser would buffer.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use std::fmt;

use super::{
    DOCUMENT_COPIES, MEMBER_COPIES, SCHEMA_COPIES, SchemaCost, SchemaLimits, SchemaRefused, Shape, check_total, limit,
    refusal,
};

/// Walks `json` as `shape`, counting against `limits`.
pub(super) fn walk(json: &str, limits: &SchemaLimits, shape: Shape) -> Result<SchemaCost, SchemaRefused> {
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
