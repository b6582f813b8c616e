//! `TestApp`: the real application on a real listener (port 0) over a fresh database.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use icegate_api::{HttpOptions, Metrics, Security};
use icegate_catalog::access::{AccessStore, Authorizer};
use icegate_catalog::tokens::{AuthSettings, Authenticator};
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
    pub access_db: Option<TestDatabase>,
    /// The `default` warehouse's directory (a `file://` root), removed with the app.
    pub warehouse_dir: Option<tempfile::TempDir>,
    _server: tokio::task::JoinHandle<()>,
}

tokio::task_local! {
    /// The namespace separator of the catalog a test server is built over (see
    /// [`TestApp::spawn_with_separator`]).
    static CATALOG_SEPARATOR: char;
}

/// The bootstrap admin's credentials in secured test servers.
pub const ADMIN_ID: &str = "admin-client";
pub const ADMIN_SECRET: &str = "admin-secret-0123456789";

/// The token signing key of test servers (tests forge tokens with other keys).
pub const TEST_SIGNING_KEY: &str = "test-signing-key-test-signing-key-0123456789";

pub fn default_options() -> HttpOptions {
    HttpOptions {
        request_timeout: Duration::from_secs(10),
        max_body_bytes: 64 * 1024,
        idempotency_key_lifetime: Duration::from_secs(1800),
        max_header_bytes: 16 * 1024,
        max_in_flight: 512,
        request_memory_bytes: 128 * 1024 * 1024,
    }
}

impl TestApp {
    /// A server on a fresh database of `backend`, with a `default` warehouse; no authentication.
    pub async fn spawn(backend: TestBackend) -> Self {
        Self::spawn_auth(backend, false, Vec::new()).await
    }

    /// The same, with authentication `required` and an `admin` principal (see [`ADMIN_ID`]).
    pub async fn spawn_secured(backend: TestBackend) -> Self {
        Self::spawn_secured_with_oidc(backend, Vec::new()).await
    }

    /// Secured, also accepting tokens of these OIDC issuers.
    pub async fn spawn_secured_with_oidc(backend: TestBackend, oidc: Vec<icegate_api::oidc::OidcIssuerConfig>) -> Self {
        let app = Self::spawn_auth(backend, true, oidc).await;
        let db = app._db.as_ref().unwrap();
        assert!(icegate_catalog::tokens::bootstrap_admin(&db.store, ADMIN_ID, ADMIN_SECRET).await.unwrap());
        app
    }

    async fn spawn_auth(backend: TestBackend, required: bool, oidc: Vec<icegate_api::oidc::OidcIssuerConfig>) -> Self {
        Self::spawn_with(backend, required, oidc, default_options()).await
    }

    /// No authentication, with these HTTP options.
    pub async fn spawn_with_options(backend: TestBackend, options: HttpOptions) -> Self {
        Self::spawn_with(backend, false, Vec::new(), options).await
    }

    /// No authentication, over a catalog whose namespace separator is `separator`.
    pub async fn spawn_with_separator(backend: TestBackend, separator: char) -> Self {
        CATALOG_SEPARATOR.scope(separator, Self::spawn_with(backend, false, Vec::new(), default_options())).await
    }

    async fn spawn_with(
        backend: TestBackend,
        required: bool,
        oidc: Vec<icegate_api::oidc::OidcIssuerConfig>,
        options: HttpOptions,
    ) -> Self {
        let db = TestDatabase::new(backend).await;
        let store: Arc<dyn CatalogStore> = Arc::new(db.store.clone());
        let name = WarehouseName::parse("default").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = StorageRoot::parse(&format!("file://{}", dir.path().display())).unwrap();
        let warehouse =
            store.ensure_warehouse(&icegate_catalog::idempotency::WriteContext::NONE, &name, &root).await.unwrap();
        let access: Arc<dyn AccessStore> = Arc::new(db.store.clone());
        let mut app = Self::serve_with(store, access, required, oidc, Some(name), options).await;
        app.prefix = warehouse.id.into_string();
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
        // Access control lives in its own database here, so that any catalog store can be used.
        let access_db = TestDatabase::new(TestBackend::Sqlite).await;
        let access: Arc<dyn AccessStore> = Arc::new(access_db.store.clone());
        let mut app = Self::serve_with(store, access, false, Vec::new(), default_warehouse, options).await;
        app.access_db = Some(access_db);
        app
    }

    /// A server whose access control uses `access`, with authentication `required` or not.
    pub async fn serve_with(
        store: Arc<dyn CatalogStore>,
        access: Arc<dyn AccessStore>,
        required: bool,
        oidc: Vec<icegate_api::oidc::OidcIssuerConfig>,
        default_warehouse: Option<WarehouseName>,
        options: HttpOptions,
    ) -> Self {
        let settings = AuthSettings {
            required,
            issuer: "icegate".into(),
            audience: "icegate".into(),
            token_lifetime: Duration::from_secs(3600),
            leeway: Duration::from_secs(5),
        };
        let authenticator = Authenticator::new(settings, access.clone(), Some(TEST_SIGNING_KEY.into())).await.unwrap();
        let security = Security {
            authenticator: Arc::new(authenticator),
            // A long-lived cache: every test then also shows that changes through the API take
            // effect at once (they invalidate it).
            authorizer: Arc::new(Authorizer::new(access.clone()).with_cache_ttl(Duration::from_secs(600))),
            oidc: None,
        };
        let security = Security {
            oidc: (!oidc.is_empty())
                .then(|| Arc::new(icegate_api::oidc::OidcVerifier::new(oidc, access, Duration::from_secs(5)))),
            ..security
        };
        // A commit budget of a few small commits: the tests that commit concurrently also go
        // through commits waiting for room (and reading their tables again once they have it).
        let separator = CATALOG_SEPARATOR.try_with(|s| *s).unwrap_or(icegate_api::UNIT_SEPARATOR);
        let catalog = Catalog::new(store, Arc::new(icegate_storage::ObjectStoreIo::new()), default_warehouse)
            .with_commit_memory(16 * 1024)
            .with_namespace_separator(separator);
        let app = icegate_api::app(catalog, security, Metrics::new(), &options);
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
            access_db: None,
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

/// Like `http_tests!`, on servers with authentication required and a bootstrap admin.
#[macro_export]
macro_rules! secured_http_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::TestApp::spawn_secured(icegate_store::testing::TestBackend::Sqlite).await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::TestApp::spawn_secured(icegate_store::testing::TestBackend::Postgres).await).await
                }
            )*
        }
    };
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
