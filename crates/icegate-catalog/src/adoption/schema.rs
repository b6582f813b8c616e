//! One table schema for the files of a dataset: the union of their top-level columns, widened
//! where Iceberg allows (int → long, float → double), over the table's own schema when the
//! table exists (its field ids stay; new columns get new ids). A file whose column has another
//! type than the same column elsewhere, or a type Iceberg format 2 cannot hold, is refused and
//! named; the rest are adopted.
//!
//! Every adopted column is optional (a file may lack it). Files carry no Iceberg field ids, so
//! the table gets a name mapping (`schema.name-mapping.default`) by which every engine finds
//! columns by name.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema as ArrowSchema, TimeUnit};
use iceberg::spec::{NestedFieldRef, Schema, Type};
use serde_json::{Value, json};

use super::hive::ColumnType;
use crate::{CatalogError, Result};

const FIELD_ID: &str = "PARQUET:field_id";

/// A column as adoption decided it.
#[derive(Debug, Clone)]
struct Column {
    field: Field,
    /// The file it was first seen in (`None`: the table's, or a path's partition key).
    origin: Option<String>,
    /// In the table's schema already.
    existing: bool,
    widened_from: Option<String>,
}

/// The unified schema, the decisions behind it, and the files refused.
#[derive(Debug)]
pub struct Unified {
    pub schema: Schema,
    /// Whether it differs from the table's schema (a new schema to add).
    pub changed: bool,
    /// Per column: its name, type and why (`from-file`, `from-path`, `widened-from`).
    pub decisions: Vec<Value>,
    /// Files refused: path and reason.
    pub refused: Vec<(String, String)>,
}

/// `data_type` with nested fields' metadata dropped and every nested field nullable: what two
/// files must agree on for a column to be the same.
fn normal(data_type: &DataType) -> DataType {
    let field = |f: &Field| Arc::new(Field::new(f.name(), normal(f.data_type()), true));
    match data_type {
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(|f| field(f)).collect()),
        DataType::List(item) | DataType::LargeList(item) => {
            DataType::List(Arc::new(Field::new("element", normal(item.data_type()), true)))
        }
        DataType::Map(entries, sorted) => DataType::Map(field(entries), *sorted),
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::Int8 | DataType::Int16 => DataType::Int32,
        other => other.clone(),
    }
}

/// Why Iceberg format 2 cannot hold a column of this type (`None`: it can).
fn unsupported(data_type: &DataType) -> Option<String> {
    match data_type {
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            Some("nanosecond timestamps (Parquet INT96 or TIMESTAMP(NANOS)) need Iceberg format 3; not adopted".into())
        }
        DataType::Struct(fields) => fields.iter().find_map(|f| unsupported(f.data_type())),
        DataType::List(item) | DataType::LargeList(item) => unsupported(item.data_type()),
        DataType::Map(entries, _) => unsupported(entries.data_type()),
        other => {
            let mut probe = Field::new("probe", other.clone(), true);
            let mut next = 1;
            assign_ids(&mut probe, &mut next);
            iceberg::arrow::arrow_schema_to_schema(&ArrowSchema::new(vec![probe]))
                .err()
                .map(|e| format!("type {other} has no Iceberg form ({e})"))
        }
    }
}

/// Gives `field` and every field nested in it an id (in its Parquet metadata), from `next`.
fn assign_ids(field: &mut Field, next: &mut i32) {
    let id = *next;
    *next += 1;
    let data_type = match field.data_type() {
        DataType::Struct(fields) => DataType::Struct(renumber(fields, next)),
        DataType::List(item) | DataType::LargeList(item) => {
            let mut item = item.as_ref().clone();
            assign_ids(&mut item, next);
            DataType::List(Arc::new(item))
        }
        DataType::Map(entries, sorted) => {
            let mut entries = entries.as_ref().clone();
            // The entries struct itself carries no id; its key and value do.
            if let DataType::Struct(kv) = entries.data_type() {
                entries = entries.clone().with_data_type(DataType::Struct(renumber(kv, next)));
            }
            DataType::Map(Arc::new(entries), *sorted)
        }
        other => other.clone(),
    };
    *field =
        field.clone().with_data_type(data_type).with_metadata(HashMap::from([(FIELD_ID.to_owned(), id.to_string())]));
}

fn renumber(fields: &Fields, next: &mut i32) -> Fields {
    fields
        .iter()
        .map(|f| {
            let mut f = f.as_ref().clone();
            assign_ids(&mut f, next);
            Arc::new(f)
        })
        .collect()
}

fn hive_type(kind: ColumnType) -> DataType {
    match kind {
        ColumnType::Date => DataType::Date32,
        ColumnType::Long => DataType::Int64,
        ColumnType::String => DataType::Utf8,
    }
}

/// The unified schema of `files` (path, top-level columns), with the partition columns taken
/// from paths (`partition_columns`), over `base` (the table's current schema, when it exists).
pub fn unify(
    base: Option<&Schema>,
    files: &[(&str, &[Field])],
    partition_columns: &[(String, ColumnType)],
) -> Result<Unified> {
    let mut columns: Vec<Column> = Vec::new();
    if let Some(base) = base {
        let arrow = iceberg::arrow::schema_to_arrow_schema(base)?;
        for field in arrow.fields() {
            columns.push(Column { field: field.as_ref().clone(), origin: None, existing: true, widened_from: None });
        }
    }
    let mut refused = Vec::new();
    let mut unsupported_types: HashMap<String, Option<String>> = HashMap::new();
    'files: for (path, fields) in files {
        // Checked whole before any column of the file counts: a refused file adds nothing.
        let mut plan: Vec<(Option<usize>, &Field, bool)> = Vec::with_capacity(fields.len());
        for field in fields.iter() {
            let key = format!("{}", normal(field.data_type()));
            let why = unsupported_types.entry(key).or_insert_with(|| unsupported(field.data_type()));
            if let Some(why) = why {
                refused.push((path.to_string(), format!("column {:?}: {why}", field.name())));
                continue 'files;
            }
            let Some(at) = columns.iter().position(|c| c.field.name() == field.name()) else {
                plan.push((None, field, false));
                continue;
            };
            let (have, theirs) = (normal(columns[at].field.data_type()), normal(field.data_type()));
            match (&have, &theirs) {
                _ if have == theirs => plan.push((Some(at), field, false)),
                (DataType::Int64, DataType::Int32) | (DataType::Float64, DataType::Float32) => {
                    plan.push((Some(at), field, false));
                }
                (DataType::Int32, DataType::Int64) | (DataType::Float32, DataType::Float64) => {
                    plan.push((Some(at), field, true));
                }
                _ => {
                    let other = columns[at].origin.as_deref().map_or("the table's schema".to_owned(), |o| o.to_owned());
                    refused.push((
                        path.to_string(),
                        format!("column {:?} is {theirs} here but {have} in {other}", field.name()),
                    ));
                    continue 'files;
                }
            }
        }
        for (at, field, widen) in plan {
            match at {
                None => columns.push(Column {
                    field: Field::new(field.name(), field.data_type().clone(), true),
                    origin: Some(path.to_string()),
                    existing: false,
                    widened_from: None,
                }),
                Some(at) if widen => {
                    let column = &mut columns[at];
                    column.widened_from = Some(
                        iceberg::arrow::arrow_type_to_type(column.field.data_type())
                            .map_or_else(|_| format!("{}", column.field.data_type()), |t| t.to_string()),
                    );
                    column.field = column.field.clone().with_data_type(field.data_type().clone());
                }
                Some(_) => {}
            }
        }
    }
    for (name, kind) in partition_columns {
        match columns.iter().find(|c| c.field.name() == name) {
            None => columns.push(Column {
                field: Field::new(name, hive_type(*kind), true),
                origin: None,
                existing: false,
                widened_from: None,
            }),
            Some(column) => {
                let usable = matches!(
                    normal(column.field.data_type()),
                    DataType::Int32 | DataType::Int64 | DataType::Utf8 | DataType::Date32
                );
                if !usable {
                    return Err(CatalogError::bad_request(format!(
                        "partition key {name:?} names a column of type {}: only int, long, string and date columns \
                         can be partition values read from paths",
                        column.field.data_type()
                    )));
                }
            }
        }
    }
    // Ids: the table's stay; new columns (and everything nested in them) get the next ones.
    let mut next = base.map_or(1, |b| b.highest_field_id() + 1);
    let mut arrow_fields = Vec::with_capacity(columns.len());
    let mut decisions = Vec::with_capacity(columns.len());
    let mut changed = base.is_none();
    for column in &columns {
        let mut field = column.field.clone();
        if !column.existing {
            assign_ids(&mut field, &mut next);
            changed = true;
        } else if column.widened_from.is_some() {
            changed = true;
        }
        let mut decision = json!({ "name": field.name(), "type": format!("{}", field.data_type()) });
        match (&column.origin, column.existing) {
            (_, true) => decision["from"] = json!("table"),
            (Some(file), false) => {
                decision["from"] = json!("file");
                decision["first-seen-in"] = json!(file);
            }
            (None, false) => decision["from"] = json!("path"),
        }
        if let Some(from) = &column.widened_from {
            decision["widened-from"] = json!(from);
        }
        decisions.push(decision);
        arrow_fields.push(field);
    }
    let converted = iceberg::arrow::arrow_schema_to_schema(&ArrowSchema::new(arrow_fields))?;
    // Shown as the Iceberg types they became.
    for (decision, field) in decisions.iter_mut().zip(converted.as_struct().fields()) {
        decision["type"] = json!(field.field_type.to_string());
    }
    let schema_id = base.map_or(0, |b| if changed { b.schema_id() + 1 } else { b.schema_id() });
    let schema = Schema::builder()
        .with_schema_id(schema_id)
        .with_fields(converted.as_struct().fields().iter().cloned())
        .build()?;
    Ok(Unified { schema, changed, decisions, refused })
}

/// The name mapping of `schema` (`schema.name-mapping.default`): each field's id by its name,
/// nested fields too (list `element`, map `key` and `value`).
pub fn name_mapping(schema: &Schema) -> Value {
    fn fields(fields: &[NestedFieldRef]) -> Vec<Value> {
        fields.iter().map(|f| mapped(f.id, &f.name, &f.field_type)).collect()
    }
    fn mapped(id: i32, name: &str, field_type: &Type) -> Value {
        let mut entry = json!({ "field-id": id, "names": [name] });
        let nested = match field_type {
            Type::Struct(s) => fields(s.fields()),
            Type::List(l) => vec![mapped(l.element_field.id, "element", &l.element_field.field_type)],
            Type::Map(m) => vec![
                mapped(m.key_field.id, "key", &m.key_field.field_type),
                mapped(m.value_field.id, "value", &m.value_field.field_type),
            ],
            Type::Primitive(_) => Vec::new(),
        };
        if !nested.is_empty() {
            entry["fields"] = json!(nested);
        }
        entry
    }
    json!(fields(schema.as_struct().fields()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str, t: DataType) -> Field {
        Field::new(name, t, true)
    }

    #[test]
    fn columns_are_united_widened_and_conflicts_named() {
        let a = [f("id", DataType::Int32), f("v", DataType::Float32)];
        let b = [f("id", DataType::Int64), f("v", DataType::Float32), f("extra", DataType::Utf8)];
        let c = [f("id", DataType::Utf8)];
        let files: Vec<(&str, &[Field])> = vec![("a", &a), ("b", &b), ("c", &c)];
        let unified = unify(None, &files, &[("dt".into(), ColumnType::Date)]).unwrap();
        let names: Vec<String> = unified.schema.as_struct().fields().iter().map(|f| f.name.clone()).collect();
        assert_eq!(names, ["id", "v", "extra", "dt"]);
        assert_eq!(unified.schema.as_struct().fields()[0].field_type.to_string(), "long");
        assert_eq!(unified.refused.len(), 1);
        assert!(unified.refused[0].0 == "c" && unified.refused[0].1.contains("\"id\""), "{:?}", unified.refused);
        assert_eq!(unified.decisions[0]["widened-from"], "int");
        assert!(unified.schema.as_struct().fields().iter().all(|f| !f.required));
        // Over the table's schema: its ids stay, a new column takes the next.
        let d = [f("id", DataType::Int64), f("later", DataType::Boolean)];
        let again = unify(Some(&unified.schema), &[("d", &d)], &[]).unwrap();
        assert!(again.changed);
        assert_eq!(again.schema.field_by_name("id").unwrap().id, unified.schema.field_by_name("id").unwrap().id);
        assert_eq!(again.schema.field_by_name("later").unwrap().id, unified.schema.highest_field_id() + 1);
        let same = unify(Some(&again.schema), &[("e", &a)], &[]).unwrap();
        assert!(!same.changed && same.refused.is_empty());
    }

    #[test]
    fn nanosecond_timestamps_are_refused_by_file() {
        let a = [f("ts", DataType::Timestamp(TimeUnit::Nanosecond, None))];
        let unified = unify(None, &[("a", &a)], &[]).unwrap();
        assert!(unified.refused[0].1.contains("format 3"));
    }

    #[test]
    fn the_name_mapping_names_nested_fields() {
        let item = Arc::new(Field::new("item", DataType::Int32, true));
        let a = [f("xs", DataType::List(item))];
        let unified = unify(None, &[("a", &a)], &[]).unwrap();
        let mapping = name_mapping(&unified.schema);
        assert_eq!(mapping[0]["names"][0], "xs");
        assert_eq!(mapping[0]["fields"][0]["names"][0], "element");
    }
}
