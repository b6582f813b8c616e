//! `TestApp`: the real application on a real listener (port 0) over a fresh database.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use icegate_api::{HttpOptions, Metrics};
use icegate_catalog::{Catalog, CatalogStore, StorageRoot, WarehouseName};
use icegate_store::testing::{TestBackend, TestDatabase};
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    /// The `default` warehouse's prefix.
    pub prefix: String,
    pub _db: Option<TestDatabase>,
    /// The `default` warehouse's directory (a `file://` root), removed with the app.
    pub warehouse_dir: Option<tempfile::TempDir>,
    _server: tokio::task::JoinHandle<()>,
}

pub fn default_options() -> HttpOptions {
    HttpOptions {
        request_timeout: Duration::from_secs(10),
        max_body_bytes: 64 * 1024,
        idempotency_key_lifetime: Duration::from_secs(1800),
    }
}

impl TestApp {
    /// A server on a fresh database of `backend`, with a `default` warehouse.
    pub async fn spawn(backend: TestBackend) -> Self {
        let db = TestDatabase::new(backend).await;
        let store: Arc<dyn CatalogStore> = Arc::new(db.store.clone());
        let name = WarehouseName::parse("default").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = StorageRoot::parse(&format!("file://{}", dir.path().display())).unwrap();
        let warehouse = store.ensure_warehouse(&name, &root).await.unwrap();
        let mut app = Self::serve(store, Some(name), default_options()).await;
        app.prefix = warehouse.id;
        app._db = Some(db);
        app.warehouse_dir = Some(dir);
        app
    }

    /// A server over any store (for the HTTP layer's own failure paths).
    pub async fn serve(
        store: Arc<dyn CatalogStore>,
        default_warehouse: Option<WarehouseName>,
        options: HttpOptions,
    ) -> Self {
        let catalog = Catalog::new(store, Arc::new(icegate_storage::ObjectStoreIo::new()), default_warehouse);
        let app = icegate_api::app(catalog, Metrics::new(), &options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base,
            client: reqwest::Client::new(),
            prefix: String::new(),
            _db: None,
            warehouse_dir: None,
            _server: server,
        }
    }

    /// The default warehouse's root as a `file://` URL.
    pub fn root(&self) -> String {
        format!("file://{}", self.warehouse_dir.as_ref().expect("spawned app").path().display())
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path.replace("{prefix}", &self.prefix))
    }

    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self.client.request(method, self.url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        (status, value)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::DELETE, path, None).await
    }

    pub async fn head(&self, path: &str) -> StatusCode {
        self.client.head(self.url(path)).send().await.unwrap().status()
    }

    pub async fn create_namespace(&self, levels: &[&str]) {
        let (status, body) = self.post("/v1/{prefix}/namespaces", serde_json::json!({ "namespace": levels })).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

/// Asserts an Iceberg error body with this status and exception type; returns the message.
#[track_caller]
pub fn assert_error(actual: (StatusCode, Value), status: u16, r#type: &str) -> String {
    let (code, body) = actual;
    assert_eq!(code.as_u16(), status, "unexpected status, body: {body}");
    let error = &body["error"];
    assert_eq!(error["type"], r#type, "body: {body}");
    assert_eq!(error["code"], status, "body: {body}");
    let message = error["message"].as_str().unwrap_or_else(|| panic!("no message in {body}"));
    assert!(!message.is_empty(), "empty message in {body}");
    message.to_owned()
}

/// Runs each listed async test body `fn(TestApp)` once on SQLite and once on PostgreSQL.
#[macro_export]
macro_rules! http_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::TestApp::spawn(icegate_store::testing::TestBackend::Sqlite).await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::TestApp::spawn(icegate_store::testing::TestBackend::Postgres).await).await
                }
            )*
        }
    };
}
