//! The walk against what the `iceberg` crate builds, and the limits.

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
    let limits = SchemaLimits { max_fields: 10, max_depth: 3, max_name_bytes: 8, ..SchemaLimits::default() };
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
    // Another update holds no schema; the parser still buffers all of it (7 nodes).
    let other = json!({"action": "set-properties", "updates": {"schema": "not one"}});
    let cost = of_member(&other.to_string(), &SchemaLimits::default()).unwrap();
    assert_eq!((cost.fields, cost.full_name_bytes, cost.copied_bytes), (0, 0, 7 * 40));
    // Many schemas within each one's limits still add up against the document's.
    let limits = SchemaLimits { max_full_name_bytes: 3, ..SchemaLimits::default() };
    assert!(of_document(&document.to_string(), &limits).unwrap_err().0.contains("max_full_name_bytes"));
}
