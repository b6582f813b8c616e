//! Field ids of a new table as the Iceberg reference implementation gives them.
//!
//! A createTable request's ids are not kept: the server numbers the schema afresh, as Java's
//! `TypeUtil.assignFreshIds` does. Its order is not a plain depth-first walk: a struct numbers
//! all of its own fields first, then, field by field, what is nested inside them; a list numbers
//! its element, then what is inside the element; a map numbers its key and its value, then what
//! is inside the key, then what is inside the value. Clients predict the ids the server gives
//! (PyIceberg and Java compare them when they evolve a schema), so `iceberg`'s own reassignment,
//! which numbers inside a map's key before its value, is corrected to this order afterwards.
//!
//! A staged create (`assert-create`) keeps the ids its client staged (its data files may already
//! use them), as the reference server does.
//!
//! Fields are matched by their full names (`a.b`, `l.element`, `m.key`, `m.value.x`), which a
//! renumbering keeps; the renumbered metadata is rewritten in its JSON form (schemas, identifier
//! fields, partition and sort sources, the last column id) and read back, so the `iceberg` crate
//! checks the result like any document.

use std::collections::HashMap;

use iceberg::spec::{Schema, StructType, TableMetadata, Type};
use serde_json::Value;

use crate::error::{CatalogError, Result};

/// Full names of `schema`'s fields and the ids the reference gives them, counting from 1.
pub(crate) fn reference_ids(schema: &Schema) -> HashMap<String, i32> {
    let mut ids = HashMap::new();
    let mut next = 0;
    number_struct(schema.as_struct(), "", &mut next, &mut ids);
    ids
}

/// Full names of `schema`'s fields and the ids it has.
pub(crate) fn ids_of(schema: &Schema) -> HashMap<String, i32> {
    schema.field_id_to_name_map().iter().map(|(id, name)| (name.clone(), *id)).collect()
}

fn path(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_owned() } else { format!("{prefix}.{name}") }
}

fn number_struct(fields: &StructType, prefix: &str, next: &mut i32, ids: &mut HashMap<String, i32>) {
    for field in fields.fields() {
        *next += 1;
        ids.insert(path(prefix, &field.name), *next);
    }
    for field in fields.fields() {
        number_type(&field.field_type, &path(prefix, &field.name), next, ids);
    }
}

fn number_type(field_type: &Type, at: &str, next: &mut i32, ids: &mut HashMap<String, i32>) {
    match field_type {
        Type::Struct(fields) => number_struct(fields, at, next, ids),
        Type::List(list) => {
            *next += 1;
            ids.insert(path(at, "element"), *next);
            number_type(&list.element_field.field_type, &path(at, "element"), next, ids);
        }
        Type::Map(map) => {
            for part in ["key", "value"] {
                *next += 1;
                ids.insert(path(at, part), *next);
            }
            number_type(&map.key_field.field_type, &path(at, "key"), next, ids);
            number_type(&map.value_field.field_type, &path(at, "value"), next, ids);
        }
        Type::Primitive(_) => {}
    }
}

/// `metadata` (of a new table: one schema) with its fields numbered as `wanted` says, by full
/// name; unchanged when they already are.
pub(crate) fn renumber(metadata: TableMetadata, wanted: &HashMap<String, i32>) -> Result<TableMetadata> {
    let current = ids_of(metadata.current_schema());
    let mapping: HashMap<i64, i64> = current
        .iter()
        .filter_map(|(name, id)| wanted.get(name).map(|want| (i64::from(*id), i64::from(*want))))
        .collect();
    if mapping.len() != current.len() {
        return Err(CatalogError::Internal(anyhow::anyhow!("renumbering a new table's schema lost a field")));
    }
    if mapping.iter().all(|(from, to)| from == to) {
        return Ok(metadata);
    }
    let invalid = |e: serde_json::Error| CatalogError::Internal(anyhow::anyhow!("renumbering a new table: {e}"));
    let mut document = serde_json::to_value(&metadata).map_err(invalid)?;
    let map = |value: &mut Value| {
        if let Some(id) = value.as_i64().and_then(|id| mapping.get(&id)) {
            *value = Value::from(*id);
        }
    };
    for schema in document["schemas"].as_array_mut().into_iter().flatten() {
        renumber_type(schema, &map);
        for id in schema["identifier-field-ids"].as_array_mut().into_iter().flatten() {
            map(id);
        }
    }
    for key in ["partition-specs", "sort-orders"] {
        for spec in document[key].as_array_mut().into_iter().flatten() {
            for field in spec["fields"].as_array_mut().into_iter().flatten() {
                if let Some(source) = field.get_mut("source-id") {
                    map(source);
                }
                for source in field.get_mut("source-ids").and_then(Value::as_array_mut).into_iter().flatten() {
                    map(source);
                }
            }
        }
    }
    // The highest id (a schema renumbered from 1 uses 1..=n).
    let highest = mapping.values().copied().max().unwrap_or(0);
    let last = document["last-column-id"].as_i64().unwrap_or(0);
    document["last-column-id"] = Value::from(last.max(highest));
    serde_json::from_value(document).map_err(invalid)
}

/// Maps every field id of a schema's JSON type: fields' `id`, lists' `element-id`, maps'
/// `key-id` and `value-id`, at every depth.
fn renumber_type(value: &mut Value, map: &impl Fn(&mut Value)) {
    let Some(object) = value.as_object_mut() else { return };
    for key in ["id", "element-id", "key-id", "value-id"] {
        if let Some(id) = object.get_mut(key) {
            map(id);
        }
    }
    for key in ["fields"] {
        for field in object.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten() {
            renumber_type(field, map);
        }
    }
    for key in ["type", "element", "key", "value"] {
        if let Some(nested) = object.get_mut(key).filter(|v| v.is_object()) {
            renumber_type(nested, map);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(fields: Value) -> Schema {
        serde_json::from_value(serde_json::json!({"type": "struct", "schema-id": 0, "fields": fields})).unwrap()
    }

    fn field(id: i32, name: &str, field_type: Value) -> Value {
        serde_json::json!({"id": id, "name": name, "required": false, "type": field_type})
    }

    /// Each case: a schema (its ids are ignored) and the ids the reference gives, by full name,
    /// worked out by `TypeUtil.assignFreshIds`'s rules.
    #[test]
    fn ids_follow_the_reference_order_for_every_nesting() {
        let point = |a: i32| serde_json::json!({"type": "struct", "fields": [field(a, "lat", "float".into()), field(a + 1, "long", "float".into())]});
        let address = serde_json::json!({"type": "struct", "fields": [
            field(90, "address", "string".into()), field(91, "city", "string".into()),
            field(92, "state", "string".into()), field(93, "zip", "int".into())]});
        let cases: Vec<(Value, Vec<(&str, i32)>)> = vec![
            // PyIceberg's map with struct keys: the map's key and value ids come before the
            // fields inside them.
            (
                serde_json::json!([
                    field(
                        50,
                        "location",
                        serde_json::json!({"type": "map", "key-id": 51, "key": address, "value-id": 52, "value": point(53), "value-required": false})
                    ),
                    field(60, "person", "string".into()),
                ]),
                vec![
                    ("location", 1),
                    ("person", 2),
                    ("location.key", 3),
                    ("location.value", 4),
                    ("location.key.address", 5),
                    ("location.key.city", 6),
                    ("location.key.state", 7),
                    ("location.key.zip", 8),
                    ("location.value.lat", 9),
                    ("location.value.long", 10),
                ],
            ),
            // A struct in a list in a map: each level numbers itself before what it holds.
            (
                serde_json::json!([
                    field(1, "a", "long".into()),
                    field(
                        2,
                        "m",
                        serde_json::json!({"type": "map", "key-id": 3, "key": "string", "value-id": 4, "value-required": false,
                        "value": {"type": "list", "element-id": 5, "element-required": false, "element": point(6)}})
                    ),
                    field(
                        8,
                        "s",
                        serde_json::json!({"type": "struct", "fields": [field(9, "x", "int".into()),
                        field(10, "l", serde_json::json!({"type": "list", "element-id": 11, "element-required": true, "element": "int"}))]})
                    ),
                    field(12, "z", "int".into()),
                ]),
                vec![
                    ("a", 1),
                    ("m", 2),
                    ("s", 3),
                    ("z", 4),
                    ("m.key", 5),
                    ("m.value", 6),
                    ("m.value.element", 7),
                    ("m.value.element.lat", 8),
                    ("m.value.element.long", 9),
                    ("s.x", 10),
                    ("s.l", 11),
                    ("s.l.element", 12),
                ],
            ),
            // Nested structs: siblings first, then each one's fields in order.
            (
                serde_json::json!([
                    field(7, "p", point(1)),
                    field(3, "q", serde_json::json!({"type": "struct", "fields": [field(4, "r", point(5))]})),
                ]),
                vec![("p", 1), ("q", 2), ("p.lat", 3), ("p.long", 4), ("q.r", 5), ("q.r.lat", 6), ("q.r.long", 7)],
            ),
        ];
        for (fields, expected) in cases {
            let ids = reference_ids(&schema(fields));
            let expected: HashMap<String, i32> = expected.into_iter().map(|(n, i)| (n.to_owned(), i)).collect();
            assert_eq!(ids, expected);
        }
    }
}
