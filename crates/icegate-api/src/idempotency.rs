//! `Idempotency-Key` on mutating catalog requests (spec 1.11).
//!
//! The key is recorded by the store in the same transaction as the mutation, so a retry can
//! never apply a change twice. The final response (2xx, or a deterministic 4xx) is then stored
//! and replayed to every retry within the advertised lifetime; a retry that arrives while the
//! first request is still running waits for its answer. 5xx answers are not stored.
//!
//! A key belongs to the principal that sent it and to one request (method, path and body): a
//! key of the same value from another principal is another key, and a reuse with another body
//! is refused. Stored responses never hold storage credentials: they are vended again, for the
//! caller as it is then, when a response is replayed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use icegate_catalog::RequestContext;
use icegate_catalog::idempotency::{Finalized, IdempotencyKey, IdempotencyScope};
use sha2::{Digest, Sha256};

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
    /// A finished request with this key: its status and (credential-free) body.
    Done(u16, Option<String>),
}

fn unprocessable(message: String) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "UnprocessableEntityException", message)
}

/// Waits (up to `deadline`) for a prior request with this key to finish.
async fn prior(
    state: &AppState,
    key: &IdempotencyKey,
    request: &Fingerprint,
    deadline: Instant,
) -> Result<Prior, ApiError> {
    let store = state.catalog.idempotency_keys();
    loop {
        let Some(record) = store.idempotency_record(key).await? else { return Ok(Prior::None) };
        let lifetime_ms = (state.idempotency_lifetime + GRACE).as_millis() as i64;
        if state.catalog.clock().now_ms() - record.created_at_ms > lifetime_ms {
            store.delete_idempotency_key(key).await?;
            return Ok(Prior::None);
        }
        if record.operation != request.operation {
            return Err(unprocessable(format!(
                "Idempotency-Key {} was used for another operation ({}); use a new key",
                key.key, record.operation
            )));
        }
        if record.request_digest != request.digest {
            return Err(unprocessable(format!(
                "Idempotency-Key {} was used for a different request body; use a new key",
                key.key
            )));
        }
        if let Some(status) = record.status {
            return Ok(Prior::Done(status, record.body));
        }
        if Instant::now() >= deadline {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailableException",
                format!("the request with Idempotency-Key {} has not finished; retry later", key.key),
            ));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// What a key is bound to besides its principal: the operation and the exact request.
struct Fingerprint {
    /// `"<METHOD> <path>"`.
    operation: String,
    /// SHA-256 (hex) of method, path, query and body.
    digest: String,
}

impl Fingerprint {
    fn of(parts: &axum::http::request::Parts, body: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(parts.method.as_str().as_bytes());
        hasher.update(b"\n");
        hasher.update(parts.uri.path_and_query().map_or("", |p| p.as_str()).as_bytes());
        hasher.update(b"\n");
        hasher.update(body);
        let digest = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        Self { operation: format!("{} {}", parts.method, parts.uri.path()), digest }
    }
}

/// Keys of a response's `config` that hold credentials: never stored, vended again on replay.
fn is_credential_key(key: &str) -> bool {
    ["access-key-id", "secret-access-key", "session-token", "sas-token", "oauth2.token", ".token"]
        .iter()
        .any(|part| key.contains(part))
}

/// The response body as it may be stored: without storage credentials (in `config` and in
/// `storage-credentials`); `None` when the body cannot be read as a JSON object although it
/// may hold some (such an answer is not stored at all).
///
/// Only the top level is parsed: every other member (the metadata document, perhaps megabytes
/// of it, nested as deep as its schema) is kept as the text it is, so no parser limit on depth
/// can turn a credential-bearing answer into one stored as it is.
fn without_credentials(body: &str) -> Option<String> {
    // A body that names neither carries none (a commit's answer: its metadata is then stored
    // without being parsed).
    if !body.contains("\"storage-credentials\"") && !body.contains("\"config\"") {
        return Some(body.to_owned());
    }
    let Members(mut members) = serde_json::from_str(body).ok()?;
    members.retain(|(key, _)| key != "storage-credentials");
    for (key, value) in &mut members {
        if key == "config" {
            let mut config: serde_json::Map<String, serde_json::Value> = serde_json::from_str(value.get()).ok()?;
            config.retain(|key, _| !is_credential_key(key));
            *value = serde_json::value::RawValue::from_string(serde_json::to_string(&config).ok()?).ok()?;
        }
    }
    object_of(&members)
}

/// A JSON object's members in order, each value as its text.
pub(crate) struct Members(pub(crate) Vec<(String, Box<serde_json::value::RawValue>)>);

/// The object of these members, in order.
pub(crate) fn object_of(members: &[(String, Box<serde_json::value::RawValue>)]) -> Option<String> {
    let mut object = String::with_capacity(members.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>() + 2);
    object.push('{');
    for (key, value) in members {
        if object.len() > 1 {
            object.push(',');
        }
        object.push_str(&serde_json::to_string(key).ok()?);
        object.push(':');
        object.push_str(value.get());
    }
    object.push('}');
    Some(object)
}

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Members;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// A finished request's answer for a retry: the stored body, with storage credentials vended
/// afresh (for the caller as it is now) where the first answer carried them.
async fn answer(
    state: &AppState,
    ctx: &RequestContext,
    status: u16,
    body: Option<String>,
    parts: &axum::http::request::Parts,
    request_body: &[u8],
) -> Response {
    if status == 200
        && let Some(stored) = &body
        && let Some(revended) = crate::routes::tables::revend_replayed(state, ctx, parts, request_body, stored).await
    {
        return replay(status, Some(revended));
    }
    replay(status, body)
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
    // The key belongs to the caller (authenticated before this middleware): another principal
    // sending the same key neither sees nor blocks this one's answer. A replay answers the
    // principal with its own first answer (credentials are vended again only as it holds now).
    let Some(ctx) = request.extensions().get::<RequestContext>().cloned() else {
        return next.run(request).await; // not an authenticated route
    };
    let principal = ctx.caller().principal_id().map(|id| id.as_str().to_owned()).unwrap_or_default();
    let key = IdempotencyKey { principal, key: key.hyphenated().to_string() };
    // The key is bound to the request's content: its body is read here (bounded like any body).
    let (parts, body) = request.into_parts();
    let request_body = match axum::body::to_bytes(body, state.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return crate::body_memory::too_large(state.max_body_bytes, "server.max_body_bytes").into_response();
        }
    };
    let fingerprint = Fingerprint::of(&parts, &request_body);
    let deadline = Instant::now() + state.request_timeout.mul_f32(0.8);
    match prior(&state, &key, &fingerprint, deadline).await {
        Ok(Prior::Done(status, body)) => return answer(&state, &ctx, status, body, &parts, &request_body).await,
        Ok(Prior::None) => {}
        Err(err) => return err.into_response(),
    }

    // The key travels to the service in the request context (see `extract::Context`), and
    // from there into the mutation that records it.
    let scope = Arc::new(IdempotencyScope::new(key.clone(), fingerprint.operation.clone(), fingerprint.digest.clone()));
    let mut request = Request::from_parts(parts.clone(), Body::from(request_body.clone()));
    request.extensions_mut().insert(scope.clone());
    let response = next.run(request).await;
    if response.extensions().get::<KeyTaken>().is_some() {
        // A concurrent duplicate applied first: answer as it does.
        return match prior(&state, &key, &fingerprint, deadline).await {
            Ok(Prior::Done(status, body)) => answer(&state, &ctx, status, body, &parts, &request_body).await,
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
    // A refusal is about who asks, not about the request: it is not kept (a retry once the
    // caller holds the privilege runs), and a caller may not fill the key table with requests
    // it was not allowed to make. Nor is a failure decided before any service ran (a malformed
    // body): a retry fails the same way.
    let authorized = ctx.with_decisions(|d| !d.is_empty() && d.iter().all(|d| d.outcome.allowed()));
    if !status.is_success() && !authorized {
        return response;
    }
    // Finalise: keep the body (without credentials) to replay it.
    let (response_parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "ServiceFailureException", "").into_response();
        }
    };
    // Answers to requests with a key are sent as text; should one be compressed, it is kept
    // as the text it holds (or, not readable, not kept at all).
    let text = match response_parts.headers.get(header::CONTENT_ENCODING) {
        None => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Some(encoding) if encoding == "gzip" => {
            use std::io::Read;
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(&bytes[..]).read_to_string(&mut text).ok().map(|_| text)
        }
        Some(_) => None,
    };
    let Some(stored) = text.as_deref().and_then(without_credentials) else {
        // Never kept with the credentials it may hold: the change stands, and a retry with
        // this key waits for an answer that is not coming, then gets 503 until the key expires.
        tracing::error!(key = %key.key, "an answer that may hold credentials could not be read; not storing it");
        return Response::from_parts(response_parts, Body::from(bytes));
    };
    // A success whose request mutated nothing (a staged create, a commit without updates) is
    // not kept: a retry simply runs again, and gets fresh credentials if it asked for them.
    let keep_unreserved = !status.is_success();
    match state
        .catalog
        .idempotency_keys()
        .finalize_idempotency_key(&scope, status.as_u16(), &stored, keep_unreserved)
        .await
    {
        Ok(Finalized::Filled | Finalized::Inserted | Finalized::NothingRecorded) => {}
        // This request mutated nothing, and a concurrent duplicate owns the key (typically: it
        // created what this one then found existing). Answer as that one does.
        Ok(Finalized::Taken) => {
            return match prior(&state, &key, &fingerprint, deadline).await {
                Ok(Prior::Done(status, body)) => answer(&state, &ctx, status, body, &parts, &request_body).await,
                Ok(Prior::None) => Response::from_parts(response_parts, Body::from(bytes)),
                Err(err) => err.into_response(),
            };
        }
        // The mutation stands; a retry will wait for a finalisation that never comes and get 503.
        Err(err) => tracing::warn!(key = %key.key, error = %err, "could not store an idempotent response"),
    }
    Response::from_parts(response_parts, Body::from(bytes))
}

/// The background job that removes keys past their lifetime and the grace (registered with the
/// task runner, which runs it on one replica at a time).
pub fn expiry_job(
    store: std::sync::Arc<dyn icegate_catalog::CatalogStore>,
    lifetime: Duration,
) -> std::sync::Arc<dyn icegate_catalog::jobs::Job> {
    std::sync::Arc::new(icegate_catalog::jobs::idempotency_expiry::IdempotencyKeyExpiry::new(store, lifetime + GRACE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_answers_keep_no_credentials_however_deep_their_metadata() {
        // A document nested past the JSON parser's depth limit (128) stays as it is.
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let body = format!(
            r#"{{"metadata-location":"s3://b/t/m.json","metadata":{{"deep":{deep}}},"config":{{"s3.secret-access-key":"SECRET","s3.session-token":"TOKEN","client.region":"eu"}},"storage-credentials":[{{"prefix":"s3://b/t","config":{{"s3.secret-access-key":"SECRET"}}}}]}}"#
        );
        let stored = without_credentials(&body).unwrap();
        assert!(!stored.contains("SECRET") && !stored.contains("TOKEN"), "{stored}");
        assert!(stored.contains(&deep) && stored.contains(r#""client.region":"eu""#), "{stored}");
        assert!(stored.starts_with(r#"{"metadata-location":"s3://b/t/m.json","metadata":{"deep":"#));
        // What cannot be read as an object, yet may hold credentials, is not stored at all.
        assert_eq!(without_credentials(r#"{"config":{"s3.secret-access-key":"SECRET"}"#), None);
        // An answer that names neither is stored as it is, unparsed.
        assert_eq!(without_credentials(r#"{"metadata":[[[1]]]}"#).as_deref(), Some(r#"{"metadata":[[[1]]]}"#));
    }

    #[test]
    fn lifetimes_are_iso8601_durations() {
        assert_eq!(iso8601(Duration::from_secs(1800)), "PT30M");
        assert_eq!(iso8601(Duration::from_secs(86400)), "PT24H");
        assert_eq!(iso8601(Duration::from_secs(90)), "PT90S");
    }
}
