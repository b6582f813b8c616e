//! Where clients can tell, icegate answers as the Iceberg reference implementation does: the
//! field ids of a new table, `float` defaults, requirement failures; and the newer spec's
//! unregisterTable.

use serde_json::{Value, json};

use crate::common::{TestApp, assert_error};
use crate::http_tests;

/// PyIceberg's nested schema: a map with struct keys and values among plain, list and struct
/// columns (`table_schema_nested_with_struct_key_map`), ids as a client sends them.
fn nested_schema() -> Value {
    let field = |id: i64, name: &str, required: bool, field_type: Value| json!({"id": id, "name": name, "required": required, "type": field_type});
    json!({"type": "struct", "schema-id": 0, "identifier-field-ids": [1], "fields": [
        field(1, "foo", true, json!("string")),
        field(2, "bar", true, json!("int")),
        field(4, "qux", true, json!({"type": "list", "element-id": 5, "element": "string", "element-required": true})),
        field(11, "location", true, json!({"type": "map", "key-id": 18, "value-id": 19, "value-required": true,
            "key": {"type": "struct", "fields": [field(21, "address", true, json!("string")), field(22, "city", true, json!("string"))]},
            "value": {"type": "struct", "fields": [field(13, "latitude", true, json!("float")), field(14, "longitude", true, json!("float"))]}})),
        field(15, "person", false, json!({"type": "struct", "fields": [field(16, "name", false, json!("string")), field(17, "age", true, json!("int"))]})),
    ]})
}

/// Every field's id by its full name, from a schema's JSON.
fn ids(schema: &Value) -> Vec<(String, i64)> {
    fn walk(value: &Value, at: &str, out: &mut Vec<(String, i64)>) {
        let path = |name: &str| if at.is_empty() { name.to_owned() } else { format!("{at}.{name}") };
        for field in value["fields"].as_array().into_iter().flatten() {
            let name = path(field["name"].as_str().unwrap());
            out.push((name.clone(), field["id"].as_i64().unwrap()));
            walk_type(&field["type"], &name, out);
        }
    }
    fn walk_type(value: &Value, at: &str, out: &mut Vec<(String, i64)>) {
        match value["type"].as_str() {
            Some("struct") => walk(value, at, out),
            Some("list") => {
                out.push((format!("{at}.element"), value["element-id"].as_i64().unwrap()));
                walk_type(&value["element"], &format!("{at}.element"), out);
            }
            Some("map") => {
                out.push((format!("{at}.key"), value["key-id"].as_i64().unwrap()));
                out.push((format!("{at}.value"), value["value-id"].as_i64().unwrap()));
                walk_type(&value["key"], &format!("{at}.key"), out);
                walk_type(&value["value"], &format!("{at}.value"), out);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(schema, "", &mut out);
    out.sort_by_key(|(_, id)| *id);
    out
}

async fn new_tables_are_numbered_as_the_reference_numbers_them(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let body = json!({"name": "t", "schema": nested_schema(),
        "partition-spec": {"spec-id": 0, "fields": [{"source-id": 2, "field-id": 1000, "name": "bar", "transform": "identity"}]},
        "write-order": {"order-id": 1, "fields": [{"source-id": 17, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}]}});
    let (status, created) = app.post("/v1/{prefix}/namespaces/db/tables", body).await;
    assert_eq!(status, 200, "{created}");
    // `TypeUtil.assignFreshIds`: each struct numbers its own fields, then what they hold, field by
    // field; a map its key and value, then inside the key, then inside the value.
    let expected: Vec<(String, i64)> = [
        "foo",
        "bar",
        "qux",
        "location",
        "person",
        "qux.element",
        "location.key",
        "location.value",
        "location.key.address",
        "location.key.city",
        "location.value.latitude",
        "location.value.longitude",
        "person.name",
        "person.age",
    ]
    .iter()
    .enumerate()
    .map(|(i, name)| ((*name).to_owned(), i as i64 + 1))
    .collect();
    let (_, loaded) = app.get("/v1/{prefix}/namespaces/db/tables/t").await;
    for metadata in [&created["metadata"], &loaded["metadata"]] {
        let schema = &metadata["schemas"][0];
        assert_eq!(ids(schema), expected, "{schema}");
        assert_eq!(schema["identifier-field-ids"], json!([1]));
        assert_eq!(metadata["last-column-id"], 14);
        assert_eq!(metadata["partition-specs"][0]["fields"][0]["source-id"], 2, "the spec follows its column");
        let order = metadata["sort-orders"].as_array().unwrap().iter().find(|o| o["order-id"] == 1).unwrap();
        assert_eq!(order["fields"][0]["source-id"], 14, "the sort order follows person.age");
    }
}

async fn a_staged_create_keeps_the_ids_its_client_staged(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let staged = nested_schema();
    let updates = json!([
        {"action": "assign-uuid", "uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1"},
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "add-schema", "schema": staged, "last-column-id": 22},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": format!("{}/db/staged", app.root())},
    ]);
    let (status, committed) = app
        .post(
            "/v1/{prefix}/namespaces/db/tables/staged",
            json!({"requirements": [{"type": "assert-create"}], "updates": updates}),
        )
        .await;
    assert_eq!(status, 200, "{committed}");
    let schemas = committed["metadata"]["schemas"].as_array().unwrap();
    assert_eq!(schemas.len(), 1, "the staged schema is the table's only one: {schemas:?}");
    assert_eq!(ids(&schemas[0]), ids(&staged), "the staged ids are kept");
}

async fn float_defaults_come_back_as_they_were_sent(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let (status, created) = app
        .post(
            "/v1/{prefix}/namespaces/db/tables",
            json!({"name": "t", "schema": {"type": "struct", "fields": []},
            "properties": {"format-version": "3"}}),
        )
        .await;
    assert_eq!(status, 200, "{created}");
    let field = json!({"id": 1, "name": "f", "required": true, "type": "float", "initial-default": 19.25, "write-default": 22.27});
    let add = json!({"requirements": [], "updates": [
        {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [field]}, "last-column-id": 1},
        {"action": "set-current-schema", "schema-id": -1}]});
    let (status, committed) = app.post("/v1/{prefix}/namespaces/db/tables/t", add).await;
    assert_eq!(status, 200, "{committed}");
    // The document as it goes over the wire, and as it is written to the metadata file.
    let text =
        app.client.get(app.url("/v1/{prefix}/namespaces/db/tables/t")).send().await.unwrap().text().await.unwrap();
    let location = committed["metadata-location"].as_str().unwrap();
    let file = std::fs::read_to_string(location.strip_prefix("file://").unwrap()).unwrap();
    for written in [&text, &file] {
        assert!(written.contains(r#""write-default":22.27"#), "{written}");
        assert!(written.contains(r#""initial-default":19.25"#), "{written}");
        assert!(!written.contains("22.270000"), "{written}");
    }
}

async fn failed_requirements_answer_in_the_references_words(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let (status, _) =
        app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": "t", "schema": nested_schema()})).await;
    assert_eq!(status, 200);
    let set = json!([{"action": "set-properties", "updates": {"k": "v"}}]);
    let cases = [
        (
            json!({"type": "assert-default-spec-id", "default-spec-id": 1}),
            "Requirement failed: default partition spec changed: expected id 1 != 0",
        ),
        (
            json!({"type": "assert-current-schema-id", "current-schema-id": 3}),
            "Requirement failed: current schema changed: expected id 3 != 0",
        ),
        (
            json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 5}),
            "Requirement failed: branch or tag main is missing, expected 5",
        ),
        (json!({"type": "assert-create"}), "Requirement failed: table already exists"),
    ];
    for (requirement, expected) in cases {
        let answer = app
            .post("/v1/{prefix}/namespaces/db/tables/t", json!({"requirements": [requirement], "updates": set}))
            .await;
        assert_eq!(assert_error(answer, 409, "CommitFailedException"), expected);
    }
}

async fn unregister_hands_the_table_over_and_leaves_its_files(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let (_, _) = app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": "t", "schema": nested_schema()})).await;
    let set = json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]});
    let (status, committed) = app.post("/v1/{prefix}/namespaces/db/tables/t", set.clone()).await;
    assert_eq!(status, 200);
    let last = committed["metadata-location"].as_str().unwrap().to_owned();

    let (status, unregistered) = app.post("/v1/{prefix}/namespaces/db/tables/t/unregister", json!({})).await;
    assert_eq!(status, 200, "{unregistered}");
    assert_eq!(unregistered["metadata-location"], last.as_str(), "the last commit is in the answer");
    assert_eq!(unregistered["metadata"]["properties"]["k"], "v");
    // Gone from the catalog: loads, commits and a second unregister find nothing.
    assert_eq!(app.head("/v1/{prefix}/namespaces/db/tables/t").await, 404);
    assert_error(app.post("/v1/{prefix}/namespaces/db/tables/t", set).await, 404, "NoSuchTableException");
    assert_error(
        app.post("/v1/{prefix}/namespaces/db/tables/t/unregister", json!({})).await,
        404,
        "NoSuchTableException",
    );
    // Its files stay where they were, and another catalog (here: this one) can register it.
    assert!(std::path::Path::new(last.strip_prefix("file://").unwrap()).exists(), "the metadata file stays");
    let (status, registered) =
        app.post("/v1/{prefix}/namespaces/db/register", json!({"name": "t", "metadata-location": last})).await;
    assert_eq!(status, 200, "{registered}");
    assert_eq!(registered["metadata"]["table-uuid"], unregistered["metadata"]["table-uuid"]);
    // Listed in `/v1/config`'s endpoints, so the Java client calls it.
    let (_, config) = app.get("/v1/config").await;
    let endpoints: Vec<&str> = config["endpoints"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(endpoints.contains(&"POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/unregister"), "{endpoints:?}");
}

/// A namespace separator other than the spec's default (`catalog.namespace_separator`), as
/// PyIceberg's integration suite expects: advertised url-encoded in `/v1/config`, accepted in
/// paths and `parent`, the unit separator still accepted, levels holding it refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_namespace_separator_is_advertised_and_accepted() {
    let app = TestApp::spawn_with_separator(icegate_store::testing::TestBackend::Sqlite, '.').await;
    let (_, config) = app.get("/v1/config").await;
    assert_eq!(config["overrides"]["namespace-separator"], "%2E");
    app.create_namespace(&["a"]).await;
    app.create_namespace(&["a", "b"]).await;
    assert_eq!(app.get("/v1/{prefix}/namespaces/a.b").await.0, 200);
    assert_eq!(app.get("/v1/{prefix}/namespaces/a%2Eb").await.0, 200);
    assert_eq!(app.get("/v1/{prefix}/namespaces/a%1Fb").await.0, 200, "the unit separator still works");
    let (_, listed) = app.get("/v1/{prefix}/namespaces?parent=a").await;
    assert_eq!(listed["namespaces"], json!([["a", "b"]]));
    let (status, created) =
        app.post("/v1/{prefix}/namespaces/a.b/tables", json!({"name": "t", "schema": nested_schema()})).await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(app.get("/v1/{prefix}/namespaces/a.b/tables/t").await.0, 200);
    let (_, tables) = app.get("/v1/{prefix}/namespaces/a%1Fb/tables").await;
    assert_eq!(tables["identifiers"], json!([{"namespace": ["a", "b"], "name": "t"}]));
    // A level holding the separator could not be told from two levels in a path: refused, and
    // PyIceberg's suites are told so (its own capability property).
    let (status, _) = app.post("/v1/{prefix}/namespaces", json!({"namespace": ["new.db"]})).await;
    assert_eq!(status, 400);
    assert_eq!(config["defaults"]["supports_dot_in_identifier"], "false");
    // Routes without a namespace in their path are as they were.
    assert_eq!(app.get("/management/v1/warehouses/default").await.0, 200);
    assert_eq!(app.get("/management/v1/whoami").await.0, 200);
    let (_, default) = TestApp::spawn(icegate_store::testing::TestBackend::Sqlite).await.get("/v1/config").await;
    assert_eq!(default["overrides"]["namespace-separator"], "%1F", "the spec's default, advertised");
}

http_tests!(
    new_tables_are_numbered_as_the_reference_numbers_them,
    a_staged_create_keeps_the_ids_its_client_staged,
    float_defaults_come_back_as_they_were_sent,
    failed_requirements_answer_in_the_references_words,
    unregister_hands_the_table_over_and_leaves_its_files,
);
