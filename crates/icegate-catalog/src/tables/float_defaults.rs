//! `float` default values written as the Iceberg reference writes them.
//!
//! A `float` column's `initial-default` and `write-default` are single-precision. The `iceberg`
//! crate widens them to double when it writes JSON, so 22.27 comes out as 22.270000457763672;
//! the reference's `SingleValueParser` writes the shortest text that reads back as the same
//! float (22.27), and clients compare what they read with what they sent. Schemas that have
//! such defaults are rewritten here (through their JSON form); others are left alone.

use iceberg::spec::{PrimitiveType, Schema, Type};
use serde_json::Value;

/// Whether `schema` has a `float` field with a default (at any depth).
pub(crate) fn has_float_default(schema: &Schema) -> bool {
    schema.field_id_to_name_map().keys().filter_map(|id| schema.field_by_id(*id)).any(|field| {
        matches!(*field.field_type, Type::Primitive(PrimitiveType::Float))
            && (field.initial_default.is_some() || field.write_default.is_some())
    })
}

/// Rewrites the defaults of every `float` field in a schema's (or struct type's) JSON.
pub(crate) fn fix_float_defaults(value: &mut Value) {
    let Some(object) = value.as_object_mut() else { return };
    if object.get("type").and_then(Value::as_str) == Some("float") {
        for key in ["initial-default", "write-default"] {
            if let Some(default) = object.get_mut(key) {
                shortest_float(default);
            }
        }
    }
    for field in object.get_mut("fields").and_then(Value::as_array_mut).into_iter().flatten() {
        fix_float_defaults(field);
    }
    for key in ["type", "element", "key", "value"] {
        if let Some(nested) = object.get_mut(key).filter(|v| v.is_object()) {
            fix_float_defaults(nested);
        }
    }
}

/// A number that holds a single-precision value, as the shortest decimal that reads back as
/// that value (what Java's `Float.toString` gives, in Rust's notation).
fn shortest_float(value: &mut Value) {
    if let Some(wide) = value.as_f64() {
        let single = wide as f32;
        if single.is_finite()
            && let Ok(shortest) = single.to_string().parse::<f64>()
            && let Some(number) = serde_json::Number::from_f64(shortest)
        {
            *value = Value::Number(number);
        }
    }
}

/// Fixes the float defaults of every schema of a metadata document's JSON (`schemas`).
pub(crate) fn fix_document(document: &mut Value) {
    for schema in document.get_mut("schemas").and_then(Value::as_array_mut).into_iter().flatten() {
        fix_float_defaults(schema);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_defaults_are_written_as_the_shortest_text_of_the_float() {
        let schema: Schema = serde_json::from_value(serde_json::json!({
            "type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "f", "required": true, "type": "float", "initial-default": 19.25, "write-default": 22.27},
                {"id": 2, "name": "d", "required": false, "type": "double", "write-default": 22.27},
                {"id": 3, "name": "s", "required": false, "type": {"type": "struct", "fields": [
                    {"id": 4, "name": "g", "required": true, "type": "float", "initial-default": 0.1, "write-default": 3.4028235e38}
                ]}}
            ]
        }))
        .unwrap();
        assert!(has_float_default(&schema));
        let mut written = serde_json::to_value(&schema).unwrap();
        assert_eq!(written["fields"][0]["write-default"].to_string(), "22.270000457763672", "what the crate writes");
        fix_float_defaults(&mut written);
        let text = written.to_string();
        for expected in [r#""write-default":22.27"#, r#""initial-default":19.25"#, r#""initial-default":0.1"#] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
        assert_eq!(written["fields"][1]["write-default"], 22.27, "doubles were right already");
        let read: Schema = serde_json::from_value(written).unwrap();
        assert_eq!(read, schema, "the same values read back");
    }
}
