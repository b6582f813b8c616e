//! Extractors that reject in the Iceberg error format instead of axum's plain text.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// `axum::Json`, but a malformed body, a missing field, a wrong type or a missing JSON content
/// type is a 400 `BadRequestException` (the spec's answer) and an oversized body a 413, each with
/// an Iceberg error body.
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::JsonDataError(e) => ApiError::bad_request(format!("Invalid request body: {}", e.body_text())),
        JsonRejection::JsonSyntaxError(e) => ApiError::bad_request(format!("Malformed JSON: {}", e.body_text())),
        // The spec answers malformed requests with 400 and defines no 415, so clients can map it.
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::bad_request("Expected a JSON request body with `Content-Type: application/json`")
        }
        other => {
            let status = other.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    status,
                    "RequestEntityTooLargeException",
                    "the request body is larger than the limit (server.max_body_bytes)",
                )
            } else {
                ApiError::new(status, "BadRequestException", other.body_text())
            }
        }
    }
}

/// `axum::extract::Query` with a 400 `BadRequestException` for unparsable parameters.
pub struct Query<T>(pub T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Self(q.0))
            .map_err(|e: QueryRejection| ApiError::bad_request(format!("Invalid query parameters: {}", e.body_text())))
    }
}

/// `axum::extract::Path` with a 400 `BadRequestException` for undecodable segments.
pub struct Path<T>(pub T);

impl<T> FromRequestParts<crate::AppState> for Path<T>
where
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &crate::AppState) -> Result<Self, Self::Rejection> {
        let invalid = |e: PathRejection| ApiError::bad_request(format!("Invalid path: {}", e.body_text()));
        let separator = state.catalog.namespace_separator();
        let has_namespace = separator != crate::UNIT_SEPARATOR
            && axum::extract::RawPathParams::from_request_parts(parts, state)
                .await
                .is_ok_and(|params| params.iter().any(|(name, _)| name == "namespace"));
        if !has_namespace {
            return axum::extract::Path::<T>::from_request_parts(parts, state)
                .await
                .map(|p| Self(p.0))
                .map_err(invalid);
        }
        // A configured separator joins the `namespace` segment's levels (see
        // `Catalog::namespace_param`); the services read them joined by the unit separator.
        let mut params =
            axum::extract::Path::<std::collections::BTreeMap<String, String>>::from_request_parts(parts, state)
                .await
                .map_err(invalid)?
                .0;
        if let Some(namespace) = params.get_mut("namespace") {
            *namespace = state.catalog.namespace_param(namespace).into_owned();
        }
        let value = serde_json::to_value(params).map_err(|e| ApiError::bad_request(format!("Invalid path: {e}")))?;
        serde_json::from_value(value).map(Self).map_err(|e| ApiError::bad_request(format!("Invalid path: {e}")))
    }
}

/// The request's context, as the guard made it (see [`crate::authn`]), with the request's
/// idempotency key. Every handler but the public routes' takes one, and hands it to the one
/// service method it calls; a handler reached without one (a route the guard did not pass) is a
/// wiring bug, and the request is refused before anything runs.
pub struct Context(pub icegate_catalog::RequestContext);

impl<S: Send + Sync> FromRequestParts<S> for Context {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let ctx = parts.extensions.get::<icegate_catalog::RequestContext>().cloned().ok_or_else(|| {
            tracing::error!(path = %parts.uri.path(), "a request reached a handler without a request context");
            ApiError::new(StatusCode::FORBIDDEN, "ForbiddenException", "no authorization for this request")
        })?;
        let idempotency =
            parts.extensions.get::<std::sync::Arc<icegate_catalog::idempotency::IdempotencyScope>>().cloned();
        Ok(Self(ctx.with_idempotency(idempotency)))
    }
}

/// A request body that may be left out (empty or only whitespace: `T::default()`).
pub fn optional_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, crate::error::ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| crate::error::ApiError::bad_request(format!("Invalid request body: {e}")))
}
