//! A memory budget for request bodies while they are parsed and handled.
//!
//! A JSON body becomes more than its bytes once parsed: a property map of many short entries,
//! a list of numbers, a tagged enum that the parser buffers first, take ten to forty times the
//! text. A principal holding nothing can send such bodies to any endpoint, and they are parsed
//! before any service decides anything; a few in parallel would take gigabytes. So a body over
//! [`SMALL_BODY_BYTES`] first takes room in this budget (`server.request_memory_bytes`), at
//! [`PARSED_PER_BODY_BYTE`] bytes per byte, held until the request is answered: past the
//! budget, requests with large bodies wait their turn (and answer 503 when they waited as long
//! as a request may run), and one larger than the whole budget runs alone. Small bodies (every
//! request clients send in the ordinary course, but a wide table's create) never wait.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::error::ApiError;

/// Bodies up to this size never wait for the budget: with `server.max_in_flight_requests` of
/// them at once they take a few tens of MB at worst.
pub const SMALL_BODY_BYTES: usize = 16 * 1024;

/// What a body may take once parsed, per byte of it (a 32-byte node for every two-byte token
/// at worst, with the maps and vectors that hold them).
pub const PARSED_PER_BODY_BYTE: u64 = 24;

/// The budget (see the module documentation).
#[derive(Clone)]
pub struct BodyMemory {
    /// KiB of room, and the whole of it; `None`: no budget.
    kib: Option<(Arc<Semaphore>, u32)>,
    max_body_bytes: usize,
    /// How long a body may wait for room.
    wait: Duration,
}

impl BodyMemory {
    /// `bytes` of budget (0: none); bodies over `max_body_bytes` are refused; a body waits for
    /// room at most `wait`.
    pub fn new(bytes: u64, max_body_bytes: usize, wait: Duration) -> Self {
        let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).min(Semaphore::MAX_PERMITS as u32);
        Self { kib: (kib > 0).then(|| (Arc::new(Semaphore::new(kib as usize)), kib)), max_body_bytes, wait }
    }
}

/// The 413 of a body over `server.max_body_bytes`.
pub fn too_large(max_body_bytes: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLargeException",
        format!("the request body is larger than {max_body_bytes} bytes, the limit (server.max_body_bytes)"),
    )
}

/// Middleware over authenticated routes: takes room for a large body before it is read into
/// anything else, and holds it until the answer.
pub async fn reserve(State(memory): State<BodyMemory>, request: Request, next: Next) -> Response {
    let Some((permits, total)) = &memory.kib else { return next.run(request).await };
    if matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(request).await;
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length <= SMALL_BODY_BYTES) {
        return next.run(request).await;
    }
    // Read as bytes (bounded): their length, not a header, decides the room taken.
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, memory.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => return too_large(memory.max_body_bytes).into_response(),
    };
    let _room = if bytes.len() > SMALL_BODY_BYTES {
        let wanted = (bytes.len() as u64).saturating_mul(PARSED_PER_BODY_BYTE) / 1024;
        let kib = u32::try_from(wanted).unwrap_or(u32::MAX).clamp(1, *total);
        match tokio::time::timeout(memory.wait, permits.clone().acquire_many_owned(kib)).await {
            Ok(Ok(permit)) => Some(permit),
            _ => {
                tracing::debug!(path = %parts.uri.path(), bytes = bytes.len(), "large body waited too long for room");
                let mut response = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailableException",
                    "too many large request bodies are being handled (server.request_memory_bytes); retry shortly",
                )
                .into_response();
                response.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
                return response;
            }
        }
    } else {
        None
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn large_bodies_take_turns_and_small_ones_never_wait() {
        // Room for one 64 KiB body (1.5 MiB parsed), not two.
        let memory = BodyMemory::new(2 * 1024 * 1024, 1 << 20, Duration::from_millis(200));
        let (permits, _) = memory.kib.clone().unwrap();
        let held = permits.clone().acquire_many_owned(1536).await.unwrap();
        let app = axum::Router::new()
            .route("/", axum::routing::post(|body: axum::body::Bytes| async move { body.len().to_string() }))
            .layer(axum::middleware::from_fn_with_state(memory, reserve));
        let send = |size: usize| {
            let app = app.clone();
            async move {
                use tower::ServiceExt;
                let request = Request::post("/").body(Body::from(vec![b' '; size])).unwrap();
                app.oneshot(request).await.unwrap()
            }
        };
        assert_eq!(send(64 * 1024).await.status(), StatusCode::SERVICE_UNAVAILABLE, "no room: it waited, then 503");
        assert_eq!(send(1024).await.status(), StatusCode::OK, "a small body does not wait");
        drop(held);
        assert_eq!(send(64 * 1024).await.status(), StatusCode::OK);
        assert_eq!(send((1 << 20) + 1).await.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
