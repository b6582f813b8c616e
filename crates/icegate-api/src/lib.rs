//! icegate's HTTP surface: the Iceberg REST catalog (`/v1`), the management API
//! (`/management/v1`), operational endpoints, the error format and the OpenAPI documents.
//!
//! Routes and their OpenAPI operations are registered together (`utoipa_axum::routes!`), and the
//! `endpoints` list of `/v1/config` is read off the same document, so what is served, what is
//! documented and what is advertised cannot drift apart.

pub mod audit;
pub mod authn;
pub mod body_memory;
pub mod console;
pub mod error;
pub mod extract;
pub mod idempotency;
pub mod metrics;
pub mod models;
pub mod oidc;
pub mod openapi;
pub mod routes;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, StatusCode};
use icegate_catalog::Catalog;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};

pub use authn::Security;
pub use metrics::Metrics;

/// The header that carries the request id, in both directions.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Everything a handler needs. axum clones the state for every extractor and middleware of
/// every request, so it is one `Arc`: a struct of a dozen `Arc`s and strings cost a tenth of a
/// loadTable's cycles in clones and drops, and the shared reference counts bounced between cores.
#[derive(Clone)]
pub struct AppState(Arc<AppStateInner>);

impl std::ops::Deref for AppState {
    type Target = AppStateInner;

    fn deref(&self) -> &AppStateInner {
        &self.0
    }
}

pub struct AppStateInner {
    pub catalog: Catalog,
    pub metrics: Arc<Metrics>,
    /// `"VERB /v1/{prefix}/..."` for every implemented catalog endpoint.
    pub endpoints: Arc<Vec<String>>,
    /// How long an `Idempotency-Key` is honoured (advertised in `/v1/config`).
    pub idempotency_lifetime: Duration,
    pub request_timeout: Duration,
    pub max_body_bytes: usize,
    pub security: authn::Security,
    /// Principals, roles, memberships and grants.
    pub access: icegate_catalog::access_admin::AccessAdmin,
    /// The methods of every documented route: a method a route does not serve is answered 405
    /// without authenticating.
    /// The documented operations by route: the verbs served, each with its operation id.
    pub operations: Arc<Operations>,
    /// The bound on records of callers that did not authenticate (see [`audit::StrangerRecords`]).
    pub strangers: audit::StrangerRecords,
}

/// Limits applied to every request.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// A request still running after this answers 503 `ServiceUnavailableException`.
    pub request_timeout: Duration,
    /// Larger request bodies answer 413.
    pub max_body_bytes: usize,
    /// How long an `Idempotency-Key` is honoured.
    pub idempotency_key_lifetime: Duration,
    /// Requests whose headers add up to more answer 431.
    pub max_header_bytes: usize,
    /// Requests handled at once; beyond it a request is answered at once with 503 and
    /// `Retry-After` instead of queueing (0: no bound). Health, readiness and metrics are exempt.
    pub max_in_flight: usize,
    /// `server.request_memory_bytes`: memory large request bodies may take while they are
    /// parsed and handled (see [`body_memory`]; 0: no bound).
    pub request_memory_bytes: u64,
}

/// The spec's default namespace separator.
pub use icegate_catalog::service::UNIT_SEPARATOR;

/// The complete application over `catalog` (configured by the caller, once: the binary builds
/// it, so a server and a worker construct identical catalogs): every route, with request ids,
/// tracing, metrics, limits and the Iceberg error format applied to all of them.
pub fn app(catalog: Catalog, security: authn::Security, metrics: Arc<Metrics>, options: &HttpOptions) -> Router {
    let (router, documents) = openapi::routes();
    // The console opens directly when the API answers anyone; its cookies are `Secure` when
    // clients reach the server over https.
    let console_open = !security.authenticator.required();
    let console_issuers = security.oidc.as_ref().map(|oidc| oidc.console_issuers()).unwrap_or_default();
    let public_url = catalog.public_url().map(str::to_owned);
    let secure_cookies = catalog.public_url().is_some_and(|url| url.starts_with("https://"));
    // One bound on requests in flight, for the API's and the console's.
    let in_flight = InFlight::new(options.max_in_flight);
    let console_metrics = metrics.clone();
    let access =
        icegate_catalog::access_admin::AccessAdmin::new(security.authenticator.access().clone(), catalog.clone());
    let state = AppState(Arc::new(AppStateInner {
        catalog,
        access,
        metrics: metrics.clone(),
        endpoints: Arc::new(documents.endpoints()),
        idempotency_lifetime: options.idempotency_key_lifetime,
        request_timeout: options.request_timeout,
        max_body_bytes: options.max_body_bytes,
        security,
        operations: Arc::new(methods_by_route(&documents)),
        strangers: audit::StrangerRecords::default(),
    }));
    let request_id = HeaderName::from_static(REQUEST_ID_HEADER);
    let trace = TraceLayer::new_for_http()
        .make_span_with(|request: &Request| {
            let request_id = request.headers().get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("-");
            tracing::info_span!("request", method = %request.method(), path = %request.uri().path(), request_id)
        })
        .on_response(DefaultOnResponse::new().level(tracing::Level::INFO));
    // Each `layer` call wraps everything before it, so the first is innermost: limits apply
    // closest to the handlers, the Iceberg error rewrite sees every response last.
    // The documents this server implements, fetchable by clients and operators (no secrets in
    // them, so public like the probes).
    let yaml = |text: String| {
        let body = axum::body::Bytes::from(text);
        axum::routing::get(move || {
            let body = body.clone();
            async move { ([(axum::http::header::CONTENT_TYPE, "application/yaml")], body) }
        })
    };
    let api = router
        .route("/openapi/catalog.yaml", yaml(documents.iceberg_rest_yaml()))
        .route("/openapi/management.yaml", yaml(documents.management_yaml()))
        .fallback(error::no_such_route)
        .with_state(state.clone())
        // The tower-http limit also covers bodies without a Content-Length; axum's own default
        // (2 MiB) would otherwise apply a second, different limit.
        .layer(RequestBodyLimitLayer::new(options.max_body_bytes))
        .layer(DefaultBodyLimit::disable())
        .layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, options.request_timeout))
        .layer(axum::middleware::from_fn_with_state(state.clone(), idempotency::guard))
        // Every body is read here, within the request timeout, after room for a large one is
        // taken; then the idempotency guard and the handler read it from memory. After
        // authentication: strangers are refused before their bodies are read at all.
        .layer(axum::middleware::from_fn_with_state(
            body_memory::BodyMemory::new(options.request_memory_bytes, options.max_body_bytes, options.request_timeout),
            body_memory::reserve,
        ))
        // Authentication before idempotency: a key belongs to the caller that sent it.
        .layer(axum::middleware::from_fn_with_state(state, authn::guard))
        // Shed before authenticating (cheap), inside the metrics so shed requests are counted.
        .layer(axum::middleware::from_fn_with_state(in_flight.clone(), shed_load))
        .layer(axum::middleware::from_fn_with_state(metrics, metrics::track))
        .layer(trace)
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .layer(axum::middleware::from_fn_with_state(options.max_header_bytes, limit_headers))
        .layer(axum::middleware::from_fn(error::iceberg_error_bodies));
    // The console's pages, behind the protections of the API's own requests: a small body
    // limit (its forms are a few fields), the request timeout, the same bound on requests in
    // flight, the metrics, the request log and ids, the header limit. Each page's API calls go
    // through the API's whole stack (authentication, authorization, audit).
    let console_request_id = HeaderName::from_static(REQUEST_ID_HEADER);
    console::Console::new(api.clone(), secure_cookies, console_open)
        .with_oidc(console_issuers, public_url)
        .pages()
        .layer(axum::middleware::from_fn(console::each_request))
        .layer(RequestBodyLimitLayer::new(console::MAX_FORM_BYTES))
        .layer(DefaultBodyLimit::max(console::MAX_FORM_BYTES))
        .layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, options.request_timeout))
        .layer(axum::middleware::from_fn_with_state(in_flight, shed_load))
        .layer(axum::middleware::from_fn_with_state(console_metrics, metrics::track))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::new(console_request_id.clone()))
        .layer(SetRequestIdLayer::new(console_request_id, MakeRequestUuid))
        .layer(axum::middleware::from_fn_with_state(options.max_header_bytes, limit_headers))
        .fallback_service(api)
}

/// The documented operations by route: each verb the route serves, with its operation id
/// (`""` for an operation documented without one).
pub type Operations = std::collections::HashMap<String, Vec<(axum::http::Method, Arc<str>)>>;

fn methods_by_route(documents: &openapi::Documents) -> Operations {
    let ids = documents.operation_ids();
    let mut routes = Operations::new();
    for (method, route) in documents.operations() {
        let id: Arc<str> = ids.get(&(method.clone(), route.clone())).map_or("", String::as_str).into();
        if let Ok(method) = method.parse() {
            routes.entry(route).or_default().push((method, id));
        }
    }
    routes
}

/// The bound on requests in flight (`None`: unbounded).
#[derive(Clone)]
struct InFlight(Option<Arc<tokio::sync::Semaphore>>);

impl InFlight {
    fn new(max: usize) -> Self {
        Self((max > 0).then(|| Arc::new(tokio::sync::Semaphore::new(max))))
    }
}

/// Load shedding: past capacity, queued requests only add latency until every request times
/// out (an open-loop run on PostgreSQL fell from 3,000 to 2,000 answers/s with seconds of
/// latency). A request over the bound is answered at once with 503 and `Retry-After` (Iceberg's
/// Java client retries it), so the admitted ones keep their latency. Probes and metrics are
/// exempt. Shed requests are counted by the request metrics and logged at debug only: a warning
/// per request would add work exactly when there is too much of it.
async fn shed_load(
    axum::extract::State(in_flight): axum::extract::State<InFlight>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let exempt = matches!(request.uri().path(), "/health" | "/ready" | "/metrics");
    let _permit = match in_flight.0 {
        Some(semaphore) if !exempt => match semaphore.try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                tracing::debug!(path = %request.uri().path(), "request shed: too many in flight");
                let mut response = error::error_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailableException",
                    "the catalog is at its limit of requests in flight (server.max_in_flight_requests); retry shortly"
                        .into(),
                );
                response
                    .headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
                return response;
            }
        },
        _ => None,
    };
    next.run(request).await
}

/// Middleware: 431 (in the Iceberg error format) for requests with oversized headers. hyper
/// refuses far larger heads by itself; this sets the limit clients actually meet.
async fn limit_headers(
    axum::extract::State(limit): axum::extract::State<usize>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let size: usize = request.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
    if size > limit {
        use axum::response::IntoResponse;
        return error::ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "RequestHeaderFieldsTooLargeException",
            format!("request headers are {size} bytes; the limit is {limit}"),
        )
        .into_response();
    }
    next.run(request).await
}
