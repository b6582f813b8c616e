//! `GET /v1/config`.

use icegate_catalog::CatalogStore;
use serde_json::json;

use crate::common::{TestApp, assert_error};
use crate::http_tests;

async fn config_gives_the_default_warehouse_prefix_and_every_endpoint(app: TestApp) {
    let (status, body) = app.get("/v1/config").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["overrides"]["prefix"], app.prefix.as_str());
    assert!(body["defaults"].is_object());
    let documented = icegate_api::openapi::documents().endpoints();
    let advertised: Vec<String> = serde_json::from_value(body["endpoints"].clone()).unwrap();
    assert_eq!(advertised, documented);
    for expected in [
        "GET /v1/{prefix}/namespaces",
        "POST /v1/{prefix}/namespaces",
        "GET /v1/{prefix}/namespaces/{namespace}",
        "HEAD /v1/{prefix}/namespaces/{namespace}",
        "DELETE /v1/{prefix}/namespaces/{namespace}",
        "POST /v1/{prefix}/namespaces/{namespace}/properties",
    ] {
        assert!(advertised.iter().any(|e| e == expected), "{expected} missing from {advertised:?}");
    }
}

async fn config_selects_a_warehouse_by_name(app: TestApp) {
    let (status, created) = app
        .post("/management/v1/warehouses", json!({"name": "second", "storage-root": "file:///tmp/icegate-test/second"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let (status, body) = app.get("/v1/config?warehouse=second").await;
    assert_eq!(status, 200);
    assert_eq!(body["overrides"]["prefix"], created["id"]);
    assert_ne!(body["overrides"]["prefix"], app.prefix.as_str());
    // The prefix really routes to that warehouse.
    let second = format!("/v1/{}/namespaces", created["id"].as_str().unwrap());
    let (status, _) = app.post(&second, json!({"namespace": ["only_in_second"]})).await;
    assert_eq!(status, 200);
    let (_, default_list) = app.get("/v1/{prefix}/namespaces").await;
    assert_eq!(default_list["namespaces"], json!([]));
}

async fn config_for_an_unknown_warehouse_is_404(app: TestApp) {
    assert_error(app.get("/v1/config?warehouse=nope").await, 404, "NoSuchWarehouseException");
    assert_error(app.get("/v1/config?warehouse=bad%20name").await, 400, "BadRequestException");
}

http_tests!(
    config_gives_the_default_warehouse_prefix_and_every_endpoint,
    config_selects_a_warehouse_by_name,
    config_for_an_unknown_warehouse_is_404,
);

#[tokio::test]
async fn config_without_warehouse_and_without_default_is_400() {
    let db = icegate_store::testing::TestDatabase::new(icegate_store::testing::TestBackend::Sqlite).await;
    let store: std::sync::Arc<dyn CatalogStore> = std::sync::Arc::new(db.store.clone());
    let app = TestApp::serve(store, None, crate::common::default_options()).await;
    let message = assert_error(app.get("/v1/config").await, 400, "BadRequestException");
    assert!(message.contains("warehouse"), "{message}");
}
