//! Recording requests in the audit trail: every request that is not a change applied with its
//! record (the store writes those in the change's transaction) is recorded here once its answer
//! is ready and before it is sent: reads, credential vends, signatures, refusals, failed
//! changes and tokens. If the record cannot be written, the answer is 503 instead, so nothing is
//! handed out unrecorded.

use std::sync::Mutex;
use std::time::Instant;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use icegate_catalog::RequestContext;
use icegate_catalog::actors::Authentication;
use icegate_catalog::audit::{Answered, AuditEvent, RequestRecord};
use icegate_catalog::idempotency::WriteContext;
use sha2::{Digest, Sha256};

use crate::AppState;

/// Reads recorded whatever a warehouse's `audit.record-reads` says.
const ALWAYS_RECORDED: [&str; 5] =
    ["searchAudit", "effectiveAccess", "listAccessReviews", "getAccessReview", "diffAccessReviews"];
use crate::error::ApiError;

/// The longest request id a record keeps (a client may send any `x-request-id`; the records of
/// strangers' requests must not grow with it).
const MAX_REQUEST_ID_BYTES: usize = 128;

/// The request's id as records keep it: its first [`MAX_REQUEST_ID_BYTES`] bytes.
pub(crate) fn request_id(headers: &axum::http::HeaderMap) -> Option<&str> {
    let id = headers.get(crate::REQUEST_ID_HEADER)?.to_str().ok()?;
    let mut end = id.len().min(MAX_REQUEST_ID_BYTES);
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    Some(&id[..end])
}

/// How a request ended, for its record: allowed when it succeeded (whatever a probe such as a
/// listing's filter found on the way), refused when authentication or a decision refused it
/// (a 404 answered for a target the caller may not see included), failed otherwise.
fn answered(ctx: &RequestContext, status: StatusCode) -> Answered {
    if status.is_success() || status.is_redirection() {
        return Answered::Allowed;
    }
    let refused = ctx.with_decisions(|decisions| decisions.iter().any(|d| !d.outcome.allowed()));
    if refused || matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        Answered::Refused
    } else {
        Answered::Failed
    }
}

/// Records the request `ctx` was answered with `response` unless it is a change applied with
/// its record; answers 503 instead when the record cannot be written.
pub(crate) async fn record_request(
    state: &AppState,
    ctx: &RequestContext,
    method: &Method,
    response: Response,
) -> Response {
    let (status, handed_out) = (response.status(), ctx.handed_out());
    if status.is_success() && ctx.wrote() && !handed_out {
        return response; // a change, recorded in its own transaction
    }
    let answered = answered(ctx, status);
    // A search of the trail, and a review of who can do what, is recorded whatever the
    // warehouse's setting: reading them is what auditors and reviewers answer for.
    let read = (method == Method::GET || method == Method::HEAD)
        && answered != Answered::Refused
        && !handed_out
        && !ctx.operation().is_some_and(|op| ALWAYS_RECORDED.contains(&op));
    let audit = state.catalog.audit();
    if read && !audit.records_reads(ctx).await {
        return response;
    }
    answer_once_recorded(state, audit.record(ctx, true, status.as_u16(), answered), response).await
}

/// `response` once `recording` is durable, or as [`unrecorded`] says when it is not. The
/// recording is given the request timeout to finish (the guard runs outside the timeout layer):
/// a store that does not answer fails the record instead of holding the request forever. A
/// record that times out may still be appended later: the trail then says a little more than
/// was handed out, never less.
async fn answer_once_recorded(
    state: &AppState,
    recording: impl std::future::Future<Output = icegate_catalog::Result<()>>,
    response: Response,
) -> Response {
    let recorded = match tokio::time::timeout(state.request_timeout, recording).await {
        Ok(result) => result,
        Err(_) => Err(icegate_catalog::CatalogError::Unavailable("the audit trail did not answer in time".into())),
    };
    match recorded {
        Ok(()) => response,
        Err(err) => unrecorded(&err, response),
    }
}

/// The answer to a request whose record could not be written: 503 instead of a success (nothing
/// is handed out unrecorded); a refusal or an error is answered as it was (it hands nothing out,
/// and says more than a 503 would).
fn unrecorded(err: &icegate_catalog::CatalogError, response: Response) -> Response {
    if !(response.status().is_success() || response.status().is_redirection()) {
        tracing::error!(error = %err, status = %response.status(), "the audit record of a refused or failed request could not be written");
        return response;
    }
    tracing::error!(error = %err, "the audit record of a request could not be written: answered 503");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailableException",
        "the audit trail cannot be written; retry shortly",
    )
    .into_response()
}

/// Records of callers that did not authenticate, a burst at most per second: each costs its
/// sender one request, so past the burst a flood is counted, not written (the next record
/// written says how many were left out before it).
pub struct StrangerRecords {
    window: Mutex<(Instant, u32, u64)>,
}

/// Records of unauthenticated requests written per second at most.
const STRANGER_RECORDS_PER_SECOND: u32 = 20;

impl Default for StrangerRecords {
    fn default() -> Self {
        Self { window: Mutex::new((Instant::now(), 0, 0)) }
    }
}

impl StrangerRecords {
    /// `Some(records left out before this one)` when this one is to be written.
    fn admit(&self) -> Option<u64> {
        let mut window = self.window.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (started, written, left_out) = &mut *window;
        if started.elapsed().as_secs() >= 1 {
            *started = Instant::now();
            *written = 0;
        }
        if *written >= STRANGER_RECORDS_PER_SECOND {
            *left_out += 1;
            return None;
        }
        *written += 1;
        Some(std::mem::take(left_out))
    }
}

/// The digest records name a presented bearer token by.
fn token_digest(authorization: Option<&str>) -> Option<String> {
    let token = authorization?.strip_prefix("Bearer ").or_else(|| authorization?.strip_prefix("bearer "))?.trim();
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    Some(Authentication::token_digest(&digest))
}

/// Records a request refused because its caller did not authenticate (throttled, see
/// [`StrangerRecords`]), then answers `response`.
pub(crate) async fn record_unauthenticated(
    state: &AppState,
    (operation, request_id, authorization): (&str, Option<&str>, Option<&str>),
    reason: String,
    response: Response,
) -> Response {
    let Some(suppressed_before) = state.strangers.admit() else { return response };
    let event = AuditEvent::Unauthenticated { token: token_digest(authorization), reason, suppressed_before };
    let write = WriteContext {
        operation: Some(operation.into()),
        request_id: request_id.map(Into::into),
        events: vec![event],
        ..WriteContext::NONE
    };
    let record = RequestRecord {
        write,
        authenticated: false,
        status: Some(response.status().as_u16()),
        answered: Answered::Refused,
    };
    answer_once_recorded(state, state.catalog.audit().record_as(record), response).await
}

/// Records a token issued (`Ok`: to whom, and the event) or refused (`Err`: the client id
/// presented and why; throttled like other unauthenticated requests); answers `response` once
/// the record is durable, 503 otherwise.
pub(crate) async fn record_token(
    state: &AppState,
    request_id: Option<&str>,
    outcome: Result<(icegate_catalog::actors::Caller, AuditEvent), (String, String)>,
    response: Response,
) -> Response {
    let (issued, event) = match outcome {
        Ok((caller, event)) => (Some(caller), event),
        Err((client_id, reason)) => {
            let Some(suppressed_before) = state.strangers.admit() else { return response };
            (None, AuditEvent::TokenRefused { client_id, reason, suppressed_before })
        }
    };
    let authenticated = issued.is_some();
    let write = WriteContext {
        principal: issued.as_ref().and_then(|c| c.principal_id()).map(|id| id.as_str().to_owned()).unwrap_or_default(),
        actor: issued.unwrap_or(icegate_catalog::actors::Caller::Anonymous),
        operation: Some("getToken".into()),
        request_id: request_id.map(Into::into),
        events: vec![event],
        ..WriteContext::NONE
    };
    let answered = if authenticated { Answered::Allowed } else { Answered::Refused };
    let record = RequestRecord { write, authenticated, status: Some(response.status().as_u16()), answered };
    answer_once_recorded(state, state.catalog.audit().record_as(record), response).await
}
