//! `Idempotency-Key` on mutating catalog requests (spec 1.11).
//!
//! The key is recorded by the store in the same transaction as the mutation, so a retry can
//! never apply a change twice. The final response (2xx, or a deterministic 4xx) is then stored
//! and replayed to every retry within the advertised lifetime; a retry that arrives while the
//! first request is still running waits for its answer. 5xx answers are not stored.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use icegate_catalog::idempotency::{self, IdempotencyScope};

use crate::AppState;
use crate::error::ApiError;

pub const HEADER: &str = "idempotency-key";
/// Marks a replayed response.
pub const REPLAYED_HEADER: &str = "idempotency-replayed";
/// Keys are honoured a little past the advertised lifetime, for clock skew and slow retries.
const GRACE: Duration = Duration::from_secs(300);
/// Set on the response of a request that lost the race for its key to a concurrent duplicate.
#[derive(Clone, Copy)]
pub(crate) struct KeyTaken;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// `PT30M`-style ISO-8601 duration for `/v1/config`.
pub fn iso8601(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs.is_multiple_of(3600) {
        format!("PT{}H", secs / 3600)
    } else if secs.is_multiple_of(60) {
        format!("PT{}M", secs / 60)
    } else {
        format!("PT{secs}S")
    }
}

fn guarded(request: &Request) -> bool {
    let path = request.uri().path();
    (request.method() == Method::POST || request.method() == Method::DELETE)
        && path.starts_with("/v1/")
        && !path.ends_with("/metrics")
        && path != "/v1/oauth/tokens"
}

fn replay(status: u16, body: Option<String>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut response = match body.filter(|b| !b.is_empty()) {
        Some(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        None => status.into_response(),
    };
    response.headers_mut().insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    if status.is_client_error() {
        crate::error::mark_iceberg_body(&mut response);
    }
    response
}

enum Prior {
    None,
    Replay(Response),
}

/// Waits (up to `deadline`) for a prior request with this key to finish, then replays it.
async fn prior(state: &AppState, key: &str, operation: &str, deadline: Instant) -> Result<Prior, ApiError> {
    let store = state.catalog.store();
    loop {
        let Some(record) = store.idempotency_record(key).await? else { return Ok(Prior::None) };
        let lifetime_ms = (state.idempotency_lifetime + GRACE).as_millis() as i64;
        if now_ms() - record.created_at_ms > lifetime_ms {
            store.delete_idempotency_key(key).await?;
            return Ok(Prior::None);
        }
        if record.operation != operation {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "UnprocessableEntityException",
                format!("Idempotency-Key {key} was used for another operation ({}); use a new key", record.operation),
            ));
        }
        if let Some(status) = record.status {
            return Ok(Prior::Replay(replay(status, record.body)));
        }
        if Instant::now() >= deadline {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailableException",
                format!("the request with Idempotency-Key {key} has not finished; retry later"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Middleware over every route.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if !guarded(&request) {
        return next.run(request).await;
    }
    let Some(value) = request.headers().get(HEADER) else {
        return next.run(request).await;
    };
    let Some(key) = value.to_str().ok().and_then(|v| uuid::Uuid::parse_str(v.trim()).ok()) else {
        return ApiError::bad_request("Idempotency-Key must be a UUID (UUIDv7 recommended)").into_response();
    };
    let key = key.hyphenated().to_string();
    let operation = format!("{} {}", request.method(), request.uri().path());
    let deadline = Instant::now() + state.request_timeout.mul_f32(0.8);
    match prior(&state, &key, &operation, deadline).await {
        Ok(Prior::Replay(response)) => return response,
        Ok(Prior::None) => {}
        Err(err) => return err.into_response(),
    }

    let scope = IdempotencyScope::new(key.clone(), operation.clone());
    let response = idempotency::scoped(scope.clone(), next.run(request)).await;
    if response.extensions().get::<KeyTaken>().is_some() {
        // A concurrent duplicate applied first: answer as it does.
        return match prior(&state, &key, &operation, deadline).await {
            Ok(Prior::Replay(response)) => response,
            Ok(Prior::None) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailableException", "retry").into_response()
            }
            Err(err) => err.into_response(),
        };
    }
    let status = response.status();
    if status.is_server_error() || !(status.is_success() || status.is_client_error()) {
        return response;
    }
    // Finalise: keep the body to replay it.
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "ServiceFailureException", "").into_response();
        }
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    match state
        .catalog
        .store()
        .finalize_idempotency_key(&key, &operation, status.as_u16(), &text, scope.recorded())
        .await
    {
        Ok(true) => {}
        // This request mutated nothing, and a concurrent duplicate owns the key (typically: it
        // created what this one then found existing). Answer as that one does.
        Ok(false) if !scope.recorded() => {
            return match prior(&state, &key, &operation, deadline).await {
                Ok(Prior::Replay(response)) => response,
                Ok(Prior::None) => Response::from_parts(parts, Body::from(bytes)),
                Err(err) => err.into_response(),
            };
        }
        Ok(false) => tracing::warn!(%key, "idempotency key was finalised twice"),
        // The mutation stands; a retry will wait for a finalisation that never comes and get 503.
        Err(err) => tracing::warn!(%key, error = %err, "could not store an idempotent response"),
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// Removes expired keys every few minutes (any replica may do it; the delete is idempotent).
pub fn spawn_expiry(store: std::sync::Arc<dyn icegate_catalog::CatalogStore>, lifetime: Duration) {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_secs(300));
        loop {
            interval.tick().await;
            let before = now_ms() - (lifetime + GRACE).as_millis() as i64;
            match store.delete_idempotency_keys_before(before).await {
                Ok(0) => {}
                Ok(count) => tracing::debug!(count, "expired idempotency keys removed"),
                Err(err) => tracing::warn!(error = %err, "could not remove expired idempotency keys"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_are_iso8601_durations() {
        assert_eq!(iso8601(Duration::from_secs(1800)), "PT30M");
        assert_eq!(iso8601(Duration::from_secs(86400)), "PT24H");
        assert_eq!(iso8601(Duration::from_secs(90)), "PT90S");
    }
}
