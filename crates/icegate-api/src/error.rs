//! Every error a client sees, in the Iceberg error format, decided in one place.
//!
//! Handlers return [`ApiError`]; its `IntoResponse` picks the status and the exact Iceberg
//! exception type clients dispatch on. Responses that never pass through a handler (unknown
//! routes, wrong methods, body limits, timeouts) are rewritten into the same format by
//! [`iceberg_error_bodies`], so no non-2xx response leaves the server in any other shape.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use icegate_catalog::{CatalogError, ObjectKind};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error response (`IcebergErrorResponse` in the spec).
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct IcebergErrorResponse {
    pub error: ErrorModel,
}

/// JSON error payload returned in a response with further details on the error.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorModel {
    /// Human-readable error message.
    pub message: String,
    /// Internal type definition of the error.
    #[serde(rename = "type")]
    pub r#type: String,
    /// HTTP response code.
    #[schema(minimum = 400, maximum = 600)]
    pub code: u16,
}

/// Marks a response whose body is already an Iceberg error, so the rewriting middleware
/// leaves it alone.
#[derive(Clone, Copy)]
struct IcebergBody;

/// An error on its way to the client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    r#type: &'static str,
    message: String,
    /// For 5xx: logged with the error id, never sent.
    cause: Option<anyhow::Error>,
}

impl ApiError {
    pub fn new(status: StatusCode, r#type: &'static str, message: impl Into<String>) -> Self {
        Self { status, r#type, message: message.into(), cause: None }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequestException", message)
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<CatalogError> for ApiError {
    fn from(err: CatalogError) -> Self {
        use CatalogError as E;
        match err {
            E::BadRequest(m) => Self::bad_request(m),
            E::NotFound { kind, message } => {
                let r#type = match kind {
                    ObjectKind::Warehouse => "NoSuchWarehouseException",
                    ObjectKind::Namespace => "NoSuchNamespaceException",
                    ObjectKind::Table => "NoSuchTableException",
                    ObjectKind::View => "NoSuchViewException",
                    ObjectKind::AccessControl | ObjectKind::Adoption | ObjectKind::Migration => "NotFoundException",
                };
                Self::new(StatusCode::NOT_FOUND, r#type, message)
            }
            E::AlreadyExists(m) => Self::new(StatusCode::CONFLICT, "AlreadyExistsException", m),
            E::NotAuthorized(m) => Self::new(StatusCode::UNAUTHORIZED, "NotAuthorizedException", m),
            E::Forbidden(m) => Self::new(StatusCode::FORBIDDEN, "ForbiddenException", m),
            E::NamespaceNotEmpty(m) => Self::new(StatusCode::CONFLICT, "NamespaceNotEmptyException", m),
            E::WarehouseNotEmpty(m) => Self::new(StatusCode::CONFLICT, "WarehouseNotEmptyException", m),
            E::Conflict(m) => Self::new(StatusCode::CONFLICT, "ConflictException", m),
            E::Unprocessable(m) => Self::new(StatusCode::UNPROCESSABLE_ENTITY, "UnprocessableEntityException", m),
            E::CommitFailed(m) => Self::new(StatusCode::CONFLICT, "CommitFailedException", m),
            E::CommitStateUnknown(m) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "CommitStateUnknownException", m),
            E::Unsupported(m) => Self::new(StatusCode::NOT_ACCEPTABLE, "UnsupportedOperationException", m),
            E::IdempotencyKeyUsed => Self {
                status: StatusCode::CONFLICT,
                r#type: "IdempotencyKeyConflictException",
                message: "A request with this Idempotency-Key was applied already".into(),
                cause: None,
            },
            E::Unavailable(m) => Self::new(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailableException", m),
            E::Internal(cause) => Self {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                r#type: "ServiceFailureException",
                message: String::new(),
                cause: Some(cause),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = if self.status.is_server_error() {
            // Clients get an id to quote; operators find the cause under the same id.
            let error_id = uuid::Uuid::new_v4();
            match &self.cause {
                Some(cause) => {
                    tracing::error!(%error_id, status = self.status.as_u16(), error = ?cause, "request failed")
                }
                None => {
                    tracing::warn!(%error_id, status = self.status.as_u16(), message = %self.message, "request failed")
                }
            }
            let summary = if self.cause.is_some() { "Internal server error" } else { self.message.as_str() };
            format!("{summary} (error id: {error_id})")
        } else {
            tracing::debug!(status = self.status.as_u16(), r#type = self.r#type, message = %self.message, "request refused");
            self.message
        };
        let key_taken = self.r#type == "IdempotencyKeyConflictException";
        let mut response = error_response(self.status, self.r#type, message);
        if key_taken {
            response.extensions_mut().insert(crate::idempotency::KeyTaken);
        }
        response
    }
}

pub(crate) fn error_response(status: StatusCode, r#type: &str, message: String) -> Response {
    let body = IcebergErrorResponse { error: ErrorModel { message, r#type: r#type.to_owned(), code: status.as_u16() } };
    let mut response = (status, axum::Json(body)).into_response();
    response.extensions_mut().insert(IcebergBody);
    with_challenge(&mut response);
    response
}

/// A 401 says how to authenticate (RFC 9110 §11.6.1): a bearer token from `/v1/oauth/tokens`.
fn with_challenge(response: &mut Response) {
    if response.status() == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .entry(header::WWW_AUTHENTICATE)
            .or_insert(header::HeaderValue::from_static("Bearer realm=\"icegate\""));
    }
}

/// Marks `response` as already carrying an Iceberg error body (a replayed one).
pub(crate) fn mark_iceberg_body(response: &mut Response) {
    response.extensions_mut().insert(IcebergBody);
}

/// The Iceberg exception type for a status produced outside our handlers.
fn type_for_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "BadRequestException",
        401 => "NotAuthorizedException",
        403 => "ForbiddenException",
        404 => "NotFoundException",
        405 => "MethodNotAllowedException",
        406 => "UnsupportedOperationException",
        408 => "RequestTimeoutException",
        409 => "ConflictException",
        413 => "RequestEntityTooLargeException",
        415 => "UnsupportedMediaTypeException",
        422 => "UnprocessableEntityException",
        431 => "RequestHeaderFieldsTooLargeException",
        503 => "ServiceUnavailableException",
        s if s >= 500 => "ServiceFailureException",
        _ => "BadRequestException",
    }
}

/// Middleware (outermost): rewrites any error response that is not yet an Iceberg error body.
/// 4xx keep the framework's short explanation as the message; 5xx never echo anything.
pub async fn iceberg_error_bodies(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || response.extensions().get::<IcebergBody>().is_some() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let message = if status.is_client_error() {
        let text = axum::body::to_bytes(body, 4096).await.ok().and_then(|b| String::from_utf8(b.to_vec()).ok());
        match text.filter(|t| !t.trim().is_empty()) {
            Some(t) => t.trim().to_owned(),
            None => status.canonical_reason().unwrap_or("request failed").to_owned(),
        }
    } else if status == StatusCode::SERVICE_UNAVAILABLE {
        "The request did not complete in time or the service is overloaded; retry later".to_owned()
    } else {
        status.canonical_reason().unwrap_or("request failed").to_owned()
    };
    if status.is_server_error() {
        tracing::warn!(status = status.as_u16(), "request failed outside a handler");
    }
    let mut rewritten = ApiError::new(status, type_for_status(status), message).into_response_plain();
    // Keep headers such as `Allow` on 405 or the request id.
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            rewritten.headers_mut().insert(name.clone(), value.clone());
        }
    }
    rewritten
}

impl ApiError {
    /// The response without logging (the caller logged already).
    fn into_response_plain(self) -> Response {
        error_response(self.status, self.r#type, self.message)
    }
}

/// Answer for requests to routes that do not exist.
pub async fn no_such_route(request: Request<Body>) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NotFoundException",
        format!("No route for {} {}", request.method(), request.uri().path()),
    )
}
