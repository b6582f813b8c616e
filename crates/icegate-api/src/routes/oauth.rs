//! `POST /v1/oauth/tokens`: the OAuth2 client-credentials grant, answered the way PyIceberg,
//! the Java client (`credential=id:secret`) and DuckDB (`CLIENT_ID`/`CLIENT_SECRET`) expect.
//! Errors use the OAuth2 error format, not the Iceberg one.

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use icegate_catalog::actors::{Authentication, Caller};
use icegate_catalog::audit::AuditEvent;
use icegate_catalog::tokens::TokenError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;

/// The client-credentials token request (form-encoded).
#[derive(Debug, Deserialize, ToSchema)]
pub struct OAuthTokenRequest {
    pub grant_type: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub scope: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OAuthTokenResponse {
    pub access_token: String,
    pub token_type: String,
    pub expires_in: u64,
    pub issued_token_type: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OAuthError {
    pub error: String,
    pub error_description: Option<String>,
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    let mut response = (
        status,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(OAuthError { error: error.into(), error_description: Some(description.into()) }),
    )
        .into_response();
    crate::error::mark_iceberg_body(&mut response);
    response
}

/// 16 hex digits of SHA-256, as records name what must not be shown.
fn digest(value: &str) -> String {
    use sha2::Digest;
    let hash: [u8; 32] = sha2::Sha256::digest(value.as_bytes()).into();
    Authentication::token_digest(&hash)
}

/// Client id and secret from HTTP Basic authentication, if present.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ").or_else(|| value.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (id, secret) = text.split_once(':')?;
    Some((id.to_owned(), secret.to_owned()))
}

/// Get a token using an OAuth2 flow
#[utoipa::path(
    post,
    path = "/v1/oauth/tokens",
    tag = "OAuth2 API",
    operation_id = "getToken",
    request_body(content = OAuthTokenRequest, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "OAuth2 token response for client credentials", body = OAuthTokenResponse),
        (status = 400, description = "Bad request: an unsupported grant type or missing fields", body = OAuthError),
        (status = 401, description = "Invalid client credentials", body = OAuthError),
        (status = "5XX", description = "Too many slow secret checks at once (503): retry shortly", body = OAuthError),
    )
)]
pub async fn get_token(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<OAuthTokenRequest>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(request)) = form else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "expected an application/x-www-form-urlencoded body",
        );
    };
    match request.grant_type.as_deref() {
        Some("client_credentials") => {}
        Some(_) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "only client_credentials is supported",
            );
        }
        None => return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "grant_type is required"),
    }
    let credentials = match (request.client_id, request.client_secret) {
        (Some(id), Some(secret)) => Some((id, secret)),
        _ => basic_credentials(&headers),
    };
    let Some((client_id, client_secret)) = credentials else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "client_id and client_secret are required");
    };
    let request_id = crate::audit::request_id(&headers);
    // Recorded as presented, within the length a client id may have.
    let presented: String = client_id.chars().take(256).collect();
    match state.security.authenticator.issue_token(&client_id, &client_secret).await {
        Ok(token) => {
            let event = AuditEvent::TokenIssued {
                client_id: presented,
                expires_at_ms: token.expires_at_ms,
                token: match &token.principal {
                    Caller::Principal { via: Authentication::Icegate { token }, .. } => token.clone(),
                    _ => String::new(),
                },
            };
            let principal = token.principal.clone();
            let response = (
                [(header::CACHE_CONTROL, "no-store")],
                axum::Json(OAuthTokenResponse {
                    access_token: token.access_token,
                    token_type: "bearer".into(),
                    expires_in: token.expires_in,
                    issued_token_type: "urn:ietf:params:oauth:token-type:access_token".into(),
                }),
            )
                .into_response();
            crate::audit::record_token(&state, request_id, Ok((principal, event)), response).await
        }
        Err(TokenError::InvalidClient { known_client }) => {
            let response = oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "invalid client credentials");
            // A client id no principal has may be a secret sent in its place: recorded by its
            // digest only.
            let presented = if known_client { presented } else { format!("unknown:{}", digest(&client_id)) };
            let refused = Err((presented, "invalid client credentials".to_owned()));
            crate::audit::record_token(&state, request_id, refused, response).await
        }
        Err(TokenError::InvalidRequest(why)) => oauth_error(StatusCode::BAD_REQUEST, "invalid_request", &why),
        Err(TokenError::Busy) => {
            let mut response = oauth_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "too many token requests are being checked; retry shortly",
            );
            response.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
            response
        }
    }
}
