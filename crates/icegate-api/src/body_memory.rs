//! Request bodies: read within a time bound, and parsed within a memory budget.
//!
//! A JSON body becomes more than its bytes once parsed: a property map of many short entries,
//! a list of numbers, a tagged enum that the parser buffers first, take ten to forty times the
//! text. A principal holding nothing can send such bodies to any endpoint, and they are parsed
//! before any service decides anything; a few in parallel would take gigabytes. So a body over
//! [`SMALL_BODY_BYTES`] first takes room in this budget (`server.request_memory_bytes`), at
//! [`PARSED_PER_BODY_BYTE`] bytes per byte of its declared length, before a byte of it is read,
//! and holds it until the request is answered. Past the budget, requests with large bodies wait
//! their turn, and a principal's large shares are one at a time (`icegate_catalog::budget`), so
//! one principal's flood of large bodies delays the others by one of its requests at most; one
//! larger than the whole budget runs alone. Small bodies (what clients send in the ordinary
//! course, but a wide table's create) never wait. A body without a declared length is counted
//! at the largest a body may be.
//!
//! Every body is read here, whole, within `server.request_timeout` (503 past it): a client
//! that sends its body slowly cannot hold a request slot for longer, whatever reads it later
//! (the idempotency guard, the handler). The token endpoint, open to anyone, takes bodies of at
//! most [`TOKEN_BODY_BYTES`].

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use icegate_catalog::budget::FairBudget;

use crate::error::ApiError;

/// Bodies up to this size never wait for the budget: with `server.max_in_flight_requests` of
/// them at once they take a few tens of MB at worst.
pub const SMALL_BODY_BYTES: usize = 16 * 1024;

/// What a body may take once parsed, per byte of it (a 32-byte node for every two-byte token
/// at worst, with the maps and vectors that hold them).
pub const PARSED_PER_BODY_BYTE: u64 = 24;

/// The largest body of a token request (a client id and a secret, form-encoded).
pub const TOKEN_BODY_BYTES: usize = 16 * 1024;

/// The budget (see the module documentation).
#[derive(Clone)]
pub struct BodyMemory {
    budget: FairBudget,
    max_body_bytes: usize,
    /// How long a body may take to arrive, and wait for room.
    wait: Duration,
}

impl BodyMemory {
    /// `bytes` of budget (0: none); bodies over `max_body_bytes` are refused; a body is read
    /// and given room within `wait`.
    pub fn new(bytes: u64, max_body_bytes: usize, wait: Duration) -> Self {
        Self { budget: FairBudget::new(bytes), max_body_bytes, wait }
    }
}

/// The 413 of a body over `server.max_body_bytes` (or the token endpoint's own limit).
pub fn too_large(max_body_bytes: usize, key: &str) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLargeException",
        format!("the request body is larger than {max_body_bytes} bytes, the limit ({key})"),
    )
}

fn too_slow(wait: Duration) -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailableException",
        format!(
            "the request body did not arrive, or find room among other large bodies \
             (server.request_memory_bytes), within {} s; retry shortly",
            wait.as_secs()
        ),
    )
    .into_response();
    response.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    response
}

/// Middleware over every route, after authentication: takes room for a large body, then reads
/// the body within the time bound, and holds the room until the answer.
pub async fn reserve(State(memory): State<BodyMemory>, request: Request, next: Next) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(request).await;
    }
    let (limit, key) = if request.uri().path() == "/v1/oauth/tokens" {
        (TOKEN_BODY_BYTES, "of the token endpoint")
    } else {
        (memory.max_body_bytes, "server.max_body_bytes")
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return too_large(limit, key).into_response();
    }
    // Whose share: the authenticated principal's (the token endpoint's callers share one).
    let who = match request.extensions().get::<icegate_catalog::RequestContext>().map(|ctx| ctx.caller()) {
        Some(icegate_catalog::access::Caller::Principal { id, .. }) => id.as_str().to_owned(),
        _ => String::new(),
    };
    let (parts, body) = request.into_parts();
    let read = async {
        let counted = declared.unwrap_or(limit);
        let room = if counted > SMALL_BODY_BYTES {
            let wanted = (counted as u64).saturating_mul(PARSED_PER_BODY_BYTE);
            Some(memory.budget.reserve(&who, wanted).await.map_err(|_| None)?)
        } else {
            None
        };
        let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| Some(too_large(limit, key)))?;
        Ok::<_, Option<ApiError>>((room, bytes))
    };
    let (_room, bytes) = match tokio::time::timeout(memory.wait, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(Some(error))) => return error.into_response(),
        Ok(Err(None)) | Err(_) => {
            tracing::debug!(path = %parts.uri.path(), "a request body was too slow to arrive or find room");
            return too_slow(memory.wait);
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(memory: BodyMemory) -> axum::Router {
        axum::Router::new()
            .route("/", axum::routing::post(|body: axum::body::Bytes| async move { body.len().to_string() }))
            .route(
                "/v1/oauth/tokens",
                axum::routing::post(|body: axum::body::Bytes| async move { body.len().to_string() }),
            )
            .layer(axum::middleware::from_fn_with_state(memory, reserve))
    }

    async fn send(app: &axum::Router, path: &str, body: Body, length: Option<usize>) -> StatusCode {
        use tower::ServiceExt;
        let mut request = Request::post(path);
        if let Some(length) = length {
            request = request.header(header::CONTENT_LENGTH, length);
        }
        app.clone().oneshot(request.body(body).unwrap()).await.unwrap().status()
    }

    #[tokio::test]
    async fn large_bodies_take_turns_and_small_ones_never_wait() {
        // Room for one 64 KiB body (1.5 MiB parsed), not two.
        let memory = BodyMemory::new(2 * 1024 * 1024, 1 << 20, Duration::from_millis(200));
        let held = memory.budget.reserve("someone", 1536 * 1024).await.unwrap();
        let app = app(memory);
        let sized = |size: usize| (Body::from(vec![b' '; size]), Some(size));
        let (body, length) = sized(64 * 1024);
        assert_eq!(send(&app, "/", body, length).await, StatusCode::SERVICE_UNAVAILABLE, "no room: 503");
        let (body, length) = sized(1024);
        assert_eq!(send(&app, "/", body, length).await, StatusCode::OK, "a small body does not wait");
        drop(held);
        let (body, length) = sized(64 * 1024);
        assert_eq!(send(&app, "/", body, length).await, StatusCode::OK);
        let (body, length) = sized((1 << 20) + 1);
        assert_eq!(send(&app, "/", body, length).await, StatusCode::PAYLOAD_TOO_LARGE, "refused unread");
        // The token endpoint takes small bodies only.
        let (body, length) = sized(TOKEN_BODY_BYTES + 1);
        assert_eq!(send(&app, "/v1/oauth/tokens", body, length).await, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_is_answered_503() {
        let app = app(BodyMemory::new(0, 1 << 20, Duration::from_millis(200)));
        // A body that never ends (its sender keeps it open).
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(1);
        sender.send(Ok(axum::body::Bytes::from_static(b"{"))).await.unwrap();
        let stream = tokio_stream_of(receiver);
        let started = std::time::Instant::now();
        assert_eq!(send(&app, "/", Body::from_stream(stream), Some(100)).await, StatusCode::SERVICE_UNAVAILABLE);
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(sender);
    }

    fn tokio_stream_of(
        mut receiver: tokio::sync::mpsc::Receiver<Result<axum::body::Bytes, std::io::Error>>,
    ) -> impl futures::Stream<Item = Result<axum::body::Bytes, std::io::Error>> {
        futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
    }
}
