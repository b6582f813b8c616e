//! Management API: warehouses.

use serde_json::json;

use crate::common::{TestApp, assert_error};
use crate::http_tests;

async fn a_warehouse_is_created_listed_fetched_and_deleted(app: TestApp) {
    let (status, created) = app
        .post("/management/v1/warehouses", json!({"name": "lake", "storage-root": "file:///tmp/icegate-test/lake/"}))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["name"], "lake");
    assert_eq!(created["storage-root"], "file:///tmp/icegate-test/lake");
    let id = created["id"].as_str().unwrap();
    assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'), "prefix must be URL-safe: {id}");
    let (status, list) = app.get("/management/v1/warehouses").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = list["warehouses"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "lake"]);
    let (status, fetched) = app.get("/management/v1/warehouses/lake").await;
    assert_eq!(status, 200);
    assert_eq!(fetched, created);
    let (status, _) = app.delete("/management/v1/warehouses/lake").await;
    assert_eq!(status, 204);
    assert_error(app.get("/management/v1/warehouses/lake").await, 404, "NoSuchWarehouseException");
    assert_error(app.delete("/management/v1/warehouses/lake").await, 404, "NoSuchWarehouseException");
}

async fn warehouse_names_are_unique(app: TestApp) {
    let body = json!({"name": "dup", "storage-root": "file:///tmp/icegate-test/dup"});
    assert_eq!(app.post("/management/v1/warehouses", body.clone()).await.0, 201);
    assert_error(app.post("/management/v1/warehouses", body).await, 409, "AlreadyExistsException");
}

async fn a_warehouse_holding_namespaces_cannot_be_deleted(app: TestApp) {
    app.create_namespace(&["keep"]).await;
    assert_error(app.delete("/management/v1/warehouses/default").await, 409, "WarehouseNotEmptyException");
    assert_eq!(app.delete("/v1/{prefix}/namespaces/keep").await.0, 204);
    assert_eq!(app.delete("/management/v1/warehouses/default").await.0, 204);
    assert_error(app.get("/v1/{prefix}/namespaces").await, 404, "NoSuchWarehouseException");
}

async fn invalid_warehouses_are_rejected(app: TestApp) {
    for body in [
        json!({"name": "bad name", "storage-root": "file:///tmp/x"}),
        json!({"name": "", "storage-root": "file:///tmp/x"}),
        json!({"name": "ok", "storage-root": "relative/path"}),
        json!({"name": "ok", "storage-root": "file:///tmp/../etc"}),
        json!({"name": "ok", "storage-root": "s3://bucket/prefix"}),
        json!({"name": "ok"}),
        json!({"name": "ok", "storage-root": "file:///tmp/x", "unknown": 1}),
    ] {
        assert_error(app.post("/management/v1/warehouses", body).await, 400, "BadRequestException");
    }
    let (_, list) = app.get("/management/v1/warehouses").await;
    assert_eq!(list["warehouses"].as_array().unwrap().len(), 1);
}

http_tests!(
    a_warehouse_is_created_listed_fetched_and_deleted,
    warehouse_names_are_unique,
    a_warehouse_holding_namespaces_cannot_be_deleted,
    invalid_warehouses_are_rejected,
);
