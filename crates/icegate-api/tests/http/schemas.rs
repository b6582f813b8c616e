//! Schemas are built only once a request is authorized, and only within the schema limits
//! (`catalog.schema_limits`): whatever sends them (a create, a commit's `add-schema`, a view, a
//! registered metadata file), a schema past a limit is a 400 that names it, and nothing is
//! stored. Wide real tables stay well inside them.

use icegate_store::testing::TestBackend;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::auth::{call, principal, token};
use crate::common::{ADMIN_ID, ADMIN_SECRET, TestApp, assert_error, default_options};

fn field(id: usize, name: &str, r#type: Value) -> Value {
    json!({"id": id, "name": name, "required": false, "type": r#type})
}

fn struct_of(fields: Vec<Value>) -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": fields})
}

/// A field whose name is past `max_name_bytes` (1 KiB).
fn long_name() -> Value {
    struct_of(vec![field(1, &"n".repeat(2000), json!("long"))])
}

/// Lists nested past `max_depth` (32) — and, at 123, past what the stored document and its
/// answer could hold under a JSON parser's 128 levels.
fn deep(levels: usize) -> Value {
    let mut r#type = json!("long");
    for level in 0..levels {
        r#type = json!({"type": "list", "element-id": 1000 + level, "element-required": false, "element": r#type});
    }
    struct_of(vec![field(1, "deep", r#type)])
}

/// A schema of `columns` long columns.
fn wide(columns: usize) -> Value {
    struct_of((1..=columns).map(|i| field(i, &format!("column_{i:05}"), json!("long"))).collect())
}

async fn a_stranger_is_refused_before_its_schema_is_read(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    assert_eq!(
        call(&app, &admin, Method::POST, "/v1/{prefix}/namespaces", Some(json!({"namespace": ["db"]}))).await.0,
        200
    );
    let stranger = principal(&app, &admin, "stranger", &[]).await;
    for schema in [long_name(), deep(123)] {
        let body = json!({"name": "t", "schema": schema});
        // The answer is about who asks, not about the schema: it was never looked at.
        for path in ["/v1/{prefix}/namespaces/db/tables", "/v1/nowhere/namespaces/nothing/tables"] {
            let (status, answer) = call(&app, &stranger, Method::POST, path, Some(body.clone())).await;
            assert!(status == 403 || status == 404, "{path}: {status} {answer}");
            assert!(!answer.to_string().contains("schema"), "{answer}");
        }
        let view = json!({"name": "v", "schema": body["schema"], "view-version": view_version()});
        let (status, answer) =
            call(&app, &stranger, Method::POST, "/v1/{prefix}/namespaces/db/views", Some(view)).await;
        assert!(status == 403 || status == 404, "{status} {answer}");
    }
    // The same requests from a principal who may create are read, and refused for their schema.
    let creator = principal(
        &app,
        &admin,
        "creator",
        &[("create", json!({"type": "namespace", "warehouse": "default", "namespace": ["db"]}))],
    )
    .await;
    let (status, answer) = call(
        &app,
        &creator,
        Method::POST,
        "/v1/{prefix}/namespaces/db/tables",
        Some(json!({"name": "t", "schema": long_name()})),
    )
    .await;
    let message = assert_error((status, answer), 400, "BadRequestException");
    assert!(message.contains("catalog.schema_limits.max_name_bytes"), "{message}");
    assert_eq!(call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces/db/tables/t", None).await.0, 404);
}

fn view_version() -> Value {
    json!({"version-id": 1, "schema-id": 0, "timestamp-ms": 1_700_000_000_000_i64, "summary": {},
           "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
           "default-namespace": ["db"]})
}

async fn schemas_past_the_limits_are_refused_and_nothing_is_stored(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let tables = "/v1/{prefix}/namespaces/db/tables";
    for (schema, limit) in [(long_name(), "max_name_bytes"), (deep(40), "max_depth"), (deep(123), "max_depth")] {
        // With an idempotency key too: nothing is kept for a refused request either.
        let response = app
            .client
            .post(app.url(tables))
            .header("idempotency-key", uuid::Uuid::now_v7().to_string())
            .json(&json!({"name": "t", "schema": schema.clone()}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let message = assert_error((status, response.json().await.unwrap()), 400, "BadRequestException");
        assert!(message.contains(limit), "{message}");
        let staged = json!({"name": "t", "schema": schema.clone(), "stage-create": true});
        assert_error(app.post(tables, staged).await, 400, "BadRequestException");
        let view = json!({"name": "v", "schema": schema.clone(), "view-version": view_version()});
        assert_error(app.post("/v1/{prefix}/namespaces/db/views", view).await, 400, "BadRequestException");
    }
    assert_eq!(app.get("/v1/{prefix}/namespaces/db/tables").await.1["identifiers"], json!([]));
    assert_eq!(app.get("/v1/{prefix}/namespaces/db/views").await.1["identifiers"], json!([]));

    // An add-schema past a limit, in a commit to an existing table or view, changes nothing.
    let (status, table) = app.post(tables, json!({"name": "t", "schema": wide(3)})).await;
    assert_eq!(status, 200, "{table}");
    let add = |schema: Value| json!({"requirements": [], "updates": [{"action": "add-schema", "schema": schema}]});
    let message = assert_error(app.post(&format!("{tables}/t"), add(deep(33))).await, 400, "BadRequestException");
    assert!(message.contains("max_depth"), "{message}");
    let (_, after) = app.get(&format!("{tables}/t")).await;
    assert_eq!(after["metadata-location"], table["metadata-location"]);
    let commit = json!({"table-changes": [{"identifier": {"namespace": ["db"], "name": "t"}, "requirements": [],
        "updates": [{"action": "add-schema", "schema": long_name()}]}]});
    assert_error(app.post("/v1/{prefix}/transactions/commit", commit).await, 400, "BadRequestException");
    let view = json!({"name": "v", "schema": wide(2), "view-version": view_version()});
    let (status, created) = app.post("/v1/{prefix}/namespaces/db/views", view).await;
    assert_eq!(status, 200, "{created}");
    let replace =
        json!({"requirements": [], "updates": [{"action": "add-schema", "schema": deep(40), "last-column-id": 2000}]});
    let message =
        assert_error(app.post("/v1/{prefix}/namespaces/db/views/v", replace).await, 400, "BadRequestException");
    assert!(message.contains("max_depth"), "{message}");
    let (_, view_after) = app.get("/v1/{prefix}/namespaces/db/views/v").await;
    assert_eq!(view_after["metadata-location"], created["metadata-location"]);
    // At the limit (32 levels), a schema is accepted and loads back.
    let (status, body) = app.post(&format!("{tables}/t"), add(deep(31))).await;
    assert_eq!(status, 200, "{body}");
    let (status, refs) = app.get(&format!("{tables}/t?snapshots=refs")).await;
    assert_eq!(status, 200, "{refs}");
}

async fn a_registered_metadata_file_past_the_limits_is_refused(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let (status, table) = app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": "t", "schema": wide(2)})).await;
    assert_eq!(status, 200, "{table}");
    // A file the table's own directory holds (a writer with credentials could put it there).
    let mut document = table["metadata"].clone();
    document["schemas"] = json!([long_name()]);
    document["current-schema-id"] = json!(0);
    let location = format!("{}/metadata/99999-crafted.metadata.json", table["metadata"]["location"].as_str().unwrap());
    std::fs::write(location.strip_prefix("file://").unwrap(), document.to_string()).unwrap();
    let register = json!({"name": "crafted", "metadata-location": location});
    let message =
        assert_error(app.post("/v1/{prefix}/namespaces/db/register", register).await, 400, "BadRequestException");
    assert!(message.contains("max_name_bytes") && message.contains("metadata file"), "{message}");
    assert_eq!(app.get("/v1/{prefix}/namespaces/db/tables/crafted").await.0, StatusCode::NOT_FOUND);
}

async fn a_wide_table_creates_commits_and_loads(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let tables = "/v1/{prefix}/namespaces/db/tables";
    let (status, created) = app.post(tables, json!({"name": "wide", "schema": wide(2000)})).await;
    assert_eq!(status, 200, "{created}");
    let mut evolved = wide(2001);
    evolved["schema-id"] = json!(1);
    let update = json!({"requirements": [{"type": "assert-current-schema-id", "current-schema-id": 0}],
        "updates": [{"action": "add-schema", "schema": evolved}, {"action": "set-current-schema", "schema-id": -1}]});
    let (status, committed) = app.post(&format!("{tables}/wide"), update).await;
    assert_eq!(status, 200, "{committed}");
    let (status, loaded) = app.get(&format!("{tables}/wide")).await;
    assert_eq!(status, 200);
    let schemas = loaded["metadata"]["schemas"].as_array().unwrap();
    assert_eq!(schemas.len(), 2);
    assert_eq!(schemas[1]["fields"].as_array().unwrap().len(), 2001);
}

/// A struct field named with `name_bytes` bytes over `children` columns: full names of about
/// `name_bytes * children` bytes from a body of a few bytes more than `40 * children`.
fn long_parent(id: usize, name_bytes: usize, children: usize) -> Value {
    let fields: Vec<Value> = (0..children).map(|i| field(id + 1 + i, &format!("c{i}"), json!("int"))).collect();
    field(id, &format!("{id}{}", "p".repeat(name_bytes)), json!({"type": "struct", "fields": fields}))
}

async fn what_a_parser_would_copy_counts_against_the_limits(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let tables = "/v1/{prefix}/namespaces/db/tables";
    // A chain of 31 structs whose innermost carries a member the crate ignores: a few hundred
    // KB of zeros, which its parser buffers again at every level (hundreds of MB).
    let mut inner = json!({"type": "struct", "fields": [field(1, "leaf", json!("int"))], "x-pad": vec![0; 400_000]});
    for level in 0..31 {
        inner = json!({"type": "struct", "fields": [field(100 + level, &format!("l{level}"), inner)]});
    }
    let schema = json!({"type": "struct", "schema-id": 0, "fields": inner["fields"]});
    let message =
        assert_error(app.post(tables, json!({"name": "padded", "schema": schema})).await, 400, "BadRequestException");
    assert!(message.contains("catalog.schema_limits.max_build_bytes"), "{message}");
    // Without the padding the same schema is fine.
    let (status, body) = app.post(tables, json!({"name": "t", "schema": wide(3)})).await;
    assert_eq!(status, 200, "{body}");

    // Schemas each within the limits add up across a transaction's tables (8 MiB of full names).
    for name in ["t1", "t2", "t3"] {
        assert_eq!(app.post(tables, json!({"name": name, "schema": wide(1)})).await.0, 200);
    }
    let change = |name: &str| {
        let schema = json!({"type": "struct", "schema-id": 1, "fields": [field(1, "column_00001", json!("long")), long_parent(2, 1000, 3000)]});
        json!({"identifier": {"namespace": ["db"], "name": name}, "requirements": [],
               "updates": [{"action": "add-schema", "schema": schema}]})
    };
    let one = json!({"table-changes": [change("t1")]});
    assert_eq!(app.post("/v1/{prefix}/transactions/commit", one).await.0, 204);
    let three = json!({"table-changes": [change("t2"), change("t3"), change("t")]});
    let message = assert_error(app.post("/v1/{prefix}/transactions/commit", three).await, 400, "BadRequestException");
    assert!(message.contains("max_full_name_bytes"), "{message}");

    // A table's schemas add up across commits: a commit whose document would pass the limit
    // is refused, and the table stays committable.
    let add = |id: i32| {
        // Another schema each time (the crate reuses a schema equal to one the table has).
        let parent = long_parent(10_000 * id as usize, 1000, 3000);
        let schema =
            json!({"type": "struct", "schema-id": id, "fields": [field(1, "column_00001", json!("long")), parent]});
        json!({"requirements": [], "updates": [{"action": "add-schema", "schema": schema}]})
    };
    assert_eq!(app.post(&format!("{tables}/t1"), add(2)).await.0, 200, "6 MB of full names");
    let message = assert_error(app.post(&format!("{tables}/t1"), add(3)).await, 400, "BadRequestException");
    assert!(message.contains("new metadata") && message.contains("max_full_name_bytes"), "{message}");
    let property = json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]});
    assert_eq!(app.post(&format!("{tables}/t1"), property).await.0, 200);

    // A change carries at most catalog.max_updates_per_commit updates (10,000).
    let updates: Vec<Value> = (0..10_001).map(|_| json!({"action": "remove-properties", "removals": []})).collect();
    let message = assert_error(
        app.post(&format!("{tables}/t1"), json!({"requirements": [], "updates": updates})).await,
        400,
        "BadRequestException",
    );
    assert!(message.contains("catalog.max_updates_per_commit"), "{message}");
}

/// Bodies large enough for a wide schema.
async fn spawn(backend: TestBackend) -> TestApp {
    TestApp::spawn_with_options(backend, icegate_api::HttpOptions { max_body_bytes: 2 << 20, ..default_options() })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_parser_would_copy_counts_against_the_limits_on_sqlite() {
    what_a_parser_would_copy_counts_against_the_limits(spawn(TestBackend::Sqlite).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_parser_would_copy_counts_against_the_limits_on_postgres() {
    what_a_parser_would_copy_counts_against_the_limits(spawn(TestBackend::Postgres).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_refused_before_its_schema_is_read_on_sqlite() {
    a_stranger_is_refused_before_its_schema_is_read(TestApp::spawn_secured(TestBackend::Sqlite).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_refused_before_its_schema_is_read_on_postgres() {
    a_stranger_is_refused_before_its_schema_is_read(TestApp::spawn_secured(TestBackend::Postgres).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_past_the_limits_are_refused_on_sqlite() {
    schemas_past_the_limits_are_refused_and_nothing_is_stored(spawn(TestBackend::Sqlite).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_past_the_limits_are_refused_on_postgres() {
    schemas_past_the_limits_are_refused_and_nothing_is_stored(spawn(TestBackend::Postgres).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_metadata_file_past_the_limits_is_refused_on_sqlite() {
    a_registered_metadata_file_past_the_limits_is_refused(spawn(TestBackend::Sqlite).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_table_creates_commits_and_loads_on_sqlite() {
    a_wide_table_creates_commits_and_loads(spawn(TestBackend::Sqlite).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_table_creates_commits_and_loads_on_postgres() {
    a_wide_table_creates_commits_and_loads(spawn(TestBackend::Postgres).await).await;
}
