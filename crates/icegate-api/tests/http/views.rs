//! View endpoints.

use serde_json::{Value, json};

use crate::common::{TestApp, assert_error};
use crate::http_tests;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn view_body(name: &str, sql: &str) -> Value {
    json!({
        "name": name,
        "schema": {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "n", "required": false, "type": "long"}]},
        "view-version": {"version-id": 1, "schema-id": 0, "timestamp-ms": now_ms(), "summary": {"engine-name": "test"},
            "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}], "default-namespace": ["db"]},
        "properties": {"comment": "first"},
    })
}

async fn a_view_is_created_loaded_replaced_and_dropped(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let (status, created) = app.post("/v1/{prefix}/namespaces/db/views", view_body("v", "SELECT 1 AS n")).await;
    assert_eq!(status, 200, "{created}");
    let location = created["metadata-location"].as_str().unwrap();
    assert!(location.contains("/metadata/00000-"), "{location}");
    assert!(std::path::Path::new(location.strip_prefix("file://").unwrap()).is_file());
    assert_eq!(created["metadata"]["properties"]["comment"], "first");
    assert_eq!(created["metadata"]["current-version-id"], 1);
    let (status, loaded) = app.get("/v1/{prefix}/namespaces/db/views/v").await;
    assert_eq!(status, 200);
    assert_eq!(loaded["metadata"], created["metadata"]);
    assert_eq!(app.head("/v1/{prefix}/namespaces/db/views/v").await, 204);
    let (_, list) = app.get("/v1/{prefix}/namespaces/db/views").await;
    assert_eq!(list["identifiers"], json!([{"namespace": ["db"], "name": "v"}]));

    let uuid = created["metadata"]["view-uuid"].clone();
    let replace = json!({
        "requirements": [{"type": "assert-view-uuid", "uuid": uuid}],
        "updates": [
            {"action": "add-view-version", "view-version": {"version-id": 2, "schema-id": 0, "timestamp-ms": now_ms(),
                "summary": {"engine-name": "test"}, "representations": [{"type": "sql", "sql": "SELECT 2 AS n", "dialect": "spark"}],
                "default-namespace": ["db"]}},
            {"action": "set-current-view-version", "view-version-id": -1},
            {"action": "set-properties", "updates": {"comment": "second"}},
        ],
    });
    let (status, replaced) = app.post("/v1/{prefix}/namespaces/db/views/v", replace).await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["metadata"]["current-version-id"], 2);
    assert_eq!(replaced["metadata"]["properties"]["comment"], "second");
    assert!(replaced["metadata-location"].as_str().unwrap().contains("/metadata/00001-"));
    let wrong = json!({"requirements": [{"type": "assert-view-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}],
                       "updates": [{"action": "set-properties", "updates": {"x": "y"}}]});
    assert_error(app.post("/v1/{prefix}/namespaces/db/views/v", wrong).await, 409, "CommitFailedException");
    assert_error(
        app.post(
            "/v1/{prefix}/namespaces/db/views/v",
            json!({"updates": [{"action": "set-current-view-version", "view-version-id": 9}]}),
        )
        .await,
        400,
        "BadRequestException",
    );
    assert_eq!(app.delete("/v1/{prefix}/namespaces/db/views/v").await.0, 204);
    assert_error(app.get("/v1/{prefix}/namespaces/db/views/v").await, 404, "NoSuchViewException");
    assert_error(app.delete("/v1/{prefix}/namespaces/db/views/v").await, 404, "NoSuchViewException");
    assert_eq!(app.head("/v1/{prefix}/namespaces/db/views/v").await, 404);
}

async fn tables_and_views_share_one_name_space(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let (status, _) = app.post("/v1/{prefix}/namespaces/db/views", view_body("same", "SELECT 1 AS n")).await;
    assert_eq!(status, 200);
    let table = json!({"name": "same", "schema": {"type": "struct", "fields": []}});
    assert_error(app.post("/v1/{prefix}/namespaces/db/tables", table).await, 409, "AlreadyExistsException");
    let table = json!({"name": "tbl", "schema": {"type": "struct", "fields": []}});
    assert_eq!(app.post("/v1/{prefix}/namespaces/db/tables", table).await.0, 200);
    assert_error(
        app.post("/v1/{prefix}/namespaces/db/views", view_body("tbl", "SELECT 1")).await,
        409,
        "AlreadyExistsException",
    );
    // A view is not a table and the other way round.
    assert_error(app.get("/v1/{prefix}/namespaces/db/tables/same").await, 404, "NoSuchTableException");
    assert_error(app.get("/v1/{prefix}/namespaces/db/views/tbl").await, 404, "NoSuchViewException");
    let (_, tables) = app.get("/v1/{prefix}/namespaces/db/tables").await;
    assert_eq!(tables["identifiers"], json!([{"namespace": ["db"], "name": "tbl"}]));
    assert_error(app.delete("/v1/{prefix}/namespaces/db").await, 409, "NamespaceNotEmptyException");
}

async fn views_are_renamed_and_registered(app: TestApp) {
    app.create_namespace(&["db"]).await;
    app.create_namespace(&["other"]).await;
    let (_, created) = app.post("/v1/{prefix}/namespaces/db/views", view_body("v", "SELECT 1 AS n")).await;
    let rename =
        json!({"source": {"namespace": ["db"], "name": "v"}, "destination": {"namespace": ["other"], "name": "w"}});
    assert_eq!(app.post("/v1/{prefix}/views/rename", rename.clone()).await.0, 204);
    assert_error(app.post("/v1/{prefix}/views/rename", rename).await, 404, "NoSuchViewException");
    let (status, moved) = app.get("/v1/{prefix}/namespaces/other/views/w").await;
    assert_eq!(status, 200);
    assert_eq!(moved["metadata-location"], created["metadata-location"]);
    // Dropped views keep their files, so their metadata can be registered again.
    assert_eq!(app.delete("/v1/{prefix}/namespaces/other/views/w").await.0, 204);
    let register = json!({"name": "back", "metadata-location": created["metadata-location"]});
    let (status, registered) = app.post("/v1/{prefix}/namespaces/db/register-view", register.clone()).await;
    assert_eq!(status, 200, "{registered}");
    assert_eq!(registered["metadata"]["view-uuid"], created["metadata"]["view-uuid"]);
    assert_error(app.post("/v1/{prefix}/namespaces/db/register-view", register).await, 409, "AlreadyExistsException");
    assert_error(
        app.post(
            "/v1/{prefix}/namespaces/db/register-view",
            json!({"name": "x", "metadata-location": "file:///etc/hosts"}),
        )
        .await,
        400,
        "BadRequestException",
    );
}

async fn invalid_views_are_rejected(app: TestApp) {
    app.create_namespace(&["db"]).await;
    assert_error(
        app.post("/v1/{prefix}/namespaces/db/views", view_body("a/b", "SELECT 1")).await,
        400,
        "BadRequestException",
    );
    assert_error(app.post("/v1/{prefix}/namespaces/db/views", json!({"name": "v"})).await, 400, "BadRequestException");
    assert_error(
        app.post("/v1/{prefix}/namespaces/ghost/views", view_body("v", "SELECT 1")).await,
        404,
        "NoSuchNamespaceException",
    );
    let mut outside = view_body("v", "SELECT 1");
    outside["location"] = json!("file:///tmp/not-the-warehouse");
    assert_error(app.post("/v1/{prefix}/namespaces/db/views", outside).await, 400, "BadRequestException");
}

http_tests!(
    a_view_is_created_loaded_replaced_and_dropped,
    tables_and_views_share_one_name_space,
    views_are_renamed_and_registered,
    invalid_views_are_rejected,
);
