//! What every route shares: the error format for responses no handler produced, request ids,
//! limits, timeouts, readiness and metrics.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use icegate_api::HttpOptions;
use icegate_catalog::{CatalogError, CatalogStore, Properties, Result, WarehouseName};
use icegate_store::faults::{FaultStore, Faults};
use icegate_store::testing::{TestBackend, TestDatabase};
use icegate_store::{SqlStore, StoreOptions};
use reqwest::Method;
use serde_json::json;

use crate::common::{TestApp, assert_error, default_options};

#[tokio::test]
async fn unknown_routes_and_wrong_methods_get_iceberg_errors() {
    let app = TestApp::spawn(TestBackend::Sqlite).await;
    assert_error(app.get("/v2/whatever").await, 404, "NotFoundException");
    assert_error(app.get("/v1/{prefix}/namespaces/a/b/c/d").await, 404, "NotFoundException");
    let response = app.client.put(app.url("/v1/{prefix}/namespaces")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert!(response.headers().get("allow").is_some(), "the Allow header is kept");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "MethodNotAllowedException");
    assert_error(app.call(Method::PATCH, "/management/v1/warehouses", None).await, 405, "MethodNotAllowedException");
}

#[tokio::test]
async fn hostile_bodies_and_names_get_4xx_and_change_nothing() {
    let app = TestApp::spawn(TestBackend::Sqlite).await;
    let url = app.url("/v1/{prefix}/namespaces");
    let send = |body: Vec<u8>| {
        let request = app.client.post(&url).header("content-type", "application/json").body(body);
        async move {
            let response = request.send().await.unwrap();
            (response.status(), response.json::<serde_json::Value>().await.unwrap())
        }
    };
    // Nesting far beyond serde_json's recursion limit, invalid UTF-8, a huge number.
    let deep = format!("{{\"namespace\": {}\"a\"{}}}", "[".repeat(5000), "]".repeat(5000));
    assert_error(send(deep.into_bytes()).await, 400, "BadRequestException");
    assert_error(send(b"{\"namespace\": [\"\xff\xfe\"]}".to_vec()).await, 400, "BadRequestException");
    assert_error(send(b"{\"namespace\": 1e999999}".to_vec()).await, 400, "BadRequestException");
    // SQL metacharacters are just characters.
    for name in ["'; DROP TABLE namespaces; --", "a%b_c", "x\" OR 1=1"] {
        let (status, body) = app.post("/v1/{prefix}/namespaces", json!({"namespace": [name]})).await;
        assert_eq!(status, 200, "{body}");
    }
    let (_, list) = app.get("/v1/{prefix}/namespaces").await;
    assert_eq!(list["namespaces"].as_array().unwrap().len(), 3);
    // Names with encoded separators or NULs in a path; huge and negative page sizes.
    assert_error(app.get("/v1/{prefix}/namespaces/a%00b").await, 400, "BadRequestException");
    assert_error(app.get("/v1/{prefix}/namespaces?pageToken=&pageSize=-1").await, 400, "BadRequestException");
    let (status, _) = app.get("/v1/{prefix}/namespaces?pageToken=&pageSize=99999999999").await;
    assert_eq!(status, 200, "clamped, not an error");
    assert_error(
        app.get("/v1/{prefix}/namespaces?pageToken=&pageSize=999999999999999999999").await,
        400,
        "BadRequestException",
    );
}

#[tokio::test]
async fn oversized_headers_are_431_with_an_iceberg_body() {
    let app = TestApp::spawn(TestBackend::Sqlite).await;
    let response =
        app.client.get(app.url("/v1/config")).header("x-padding", "p".repeat(32 * 1024)).send().await.unwrap();
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap();
    assert_error((status, body), 431, "RequestHeaderFieldsTooLargeException");
    assert_eq!(app.get("/v1/config").await.0, 200);
}

#[tokio::test]
async fn an_oversized_body_is_413() {
    let app = TestApp::spawn(TestBackend::Sqlite).await;
    let huge: Properties = (0..4000).map(|i| (format!("key{i}"), "v".repeat(20))).collect();
    let body = json!({"namespace": ["big"], "properties": huge});
    assert_error(app.post("/v1/{prefix}/namespaces", body).await, 413, "RequestEntityTooLargeException");
    assert_eq!(app.head("/v1/{prefix}/namespaces/big").await, 404);
}

#[tokio::test]
async fn every_response_carries_a_request_id_and_keeps_the_clients() {
    let app = TestApp::spawn(TestBackend::Sqlite).await;
    let generated = app.client.get(app.url("/health")).send().await.unwrap();
    let id = generated.headers().get("x-request-id").expect("x-request-id header").to_str().unwrap().to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let echoed = app.client.get(app.url("/nope")).header("x-request-id", "client-chosen-42").send().await.unwrap();
    assert_eq!(echoed.headers()["x-request-id"], "client-chosen-42");
}

#[tokio::test]
async fn health_ready_and_metrics_answer() {
    let app = TestApp::spawn(TestBackend::Sqlite).await;
    assert_eq!(app.get("/health").await, (reqwest::StatusCode::OK, json!({"status": "ok"})));
    assert_eq!(app.get("/ready").await, (reqwest::StatusCode::OK, json!({"status": "ready"})));
    app.create_namespace(&["m"]).await;
    let _ = app.get("/v1/{prefix}/namespaces/missing").await;
    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text"));
    let text = response.text().await.unwrap();
    for expected in [
        r#"icegate_http_requests_total{method="POST",route="/v1/{prefix}/namespaces",status="200"} 1"#,
        r#"icegate_http_requests_total{method="GET",route="/v1/{prefix}/namespaces/{namespace}",status="404"} 1"#,
        r#"icegate_http_request_duration_seconds_count{method="POST",route="/v1/{prefix}/namespaces",status="200"} 1"#,
        r#"icegate_db_pool_connections{state="idle"}"#,
        r#"icegate_db_pool_max_connections 8"#,
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
}

/// PostgreSQL that is not there: nothing listens on port 1.
#[tokio::test]
async fn an_unreachable_database_fails_fast_with_503() {
    let store = SqlStore::connect_lazy(&StoreOptions {
        url: "postgres://postgres@127.0.0.1:1/none".into(),
        max_connections: 2,
        acquire_timeout: Duration::from_millis(500),
    })
    .unwrap();
    let app = TestApp::serve(Arc::new(store), Some(WarehouseName::parse("default").unwrap()), default_options()).await;
    assert_eq!(app.get("/health").await.0, 200);
    let started = std::time::Instant::now();
    assert_error(app.get("/ready").await, 503, "ServiceUnavailableException");
    assert_error(app.get("/v1/config").await, 503, "ServiceUnavailableException");
    assert_error(app.get("/v1/some-prefix/namespaces").await, 503, "ServiceUnavailableException");
    // Each call gave up after the pool's acquire timeout, well before the request timeout.
    assert!(started.elapsed() < Duration::from_secs(8), "took {:?}", started.elapsed());
}

/// Every store call fails in a way a real database cannot be made to on demand: an internal
/// error carrying a secret, or a call that never finishes.
struct Broken {
    hang: bool,
}

#[async_trait]
impl Faults for Broken {
    async fn before(&self, _call: &'static str) -> Result<()> {
        if self.hang {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Err(CatalogError::Internal(anyhow::anyhow!("connection string postgres://admin:hunter2@db/secret broke")))
    }
}

/// A server over a store whose every call fails (the database behind it is kept with it).
async fn broken(hang: bool, options: HttpOptions) -> (TestApp, TestDatabase) {
    let db = TestDatabase::new(TestBackend::Sqlite).await;
    let store: Arc<dyn CatalogStore> = Arc::new(FaultStore::new(db.store.clone(), Broken { hang }));
    (TestApp::serve(store, None, options).await, db)
}

#[tokio::test]
async fn internal_errors_send_an_error_id_and_no_internals() {
    let (app, _db) = broken(false, default_options()).await;
    let message = assert_error(app.get("/management/v1/warehouses").await, 500, "ServiceFailureException");
    assert!(message.contains("error id: "), "{message}");
    for secret in ["hunter2", "postgres://", "connection string"] {
        assert!(!message.contains(secret), "leaked {secret:?}: {message}");
    }
}

/// Past `max_in_flight` requests, more are answered at once with 503 + Retry-After (probes
/// still answer), and requests are admitted again as soon as the running ones end.
#[tokio::test]
async fn requests_beyond_the_in_flight_bound_are_shed() {
    let options = HttpOptions { request_timeout: Duration::from_millis(1500), max_in_flight: 2, ..default_options() };
    let (app, _db) = broken(true, options).await;
    let app = Arc::new(app);
    let mut hanging = Vec::new();
    for _ in 0..2 {
        let app = app.clone();
        hanging.push(tokio::spawn(async move { app.get("/management/v1/warehouses").await.0 }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let response = app.client.get(app.url("/v1/config")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: serde_json::Value = response.json().await.unwrap();
    let message = assert_error((reqwest::StatusCode::SERVICE_UNAVAILABLE, body), 503, "ServiceUnavailableException");
    assert!(message.contains("max_in_flight_requests"), "{message}");
    assert!(started.elapsed() < Duration::from_millis(500), "shed at once, not queued");
    assert_eq!(app.get("/health").await.0, 200, "probes are exempt");
    for request in hanging {
        assert_eq!(request.await.unwrap(), 503, "the hanging requests end at the timeout");
    }
    // Admitted again: an unknown route answers 404, not 503.
    assert_error(app.get("/v1/nothing-here").await, 404, "NotFoundException");
}

#[tokio::test]
async fn a_request_past_the_timeout_is_503() {
    let options = HttpOptions { request_timeout: Duration::from_millis(300), ..default_options() };
    let (app, _db) = broken(true, options).await;
    let started = std::time::Instant::now();
    assert_error(app.get("/management/v1/warehouses").await, 503, "ServiceUnavailableException");
    assert!(started.elapsed() < Duration::from_secs(5));
}
