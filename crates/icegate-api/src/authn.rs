//! Authentication of every request (not authorization: the services decide), and the request
//! context it yields.
//!
//! The HTTP layer authenticates; it does not authorize. [`guard`] turns the bearer token into a
//! caller and puts a [`RequestContext`] on the request; each handler hands that context to one
//! service method, which decides on the values it parsed and acts on (see
//! `icegate_catalog::context`). A handler cannot reach a service without it: the services take a
//! context, and the [`crate::extract::Context`] extractor refuses a request the guard did not
//! pass. Only [`PUBLIC_ROUTES`] go without one.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use icegate_catalog::access::{Authorizer, Caller};
use icegate_catalog::tokens::{Authenticator, TokenCaller};
use icegate_catalog::{CatalogError, RequestContext};

use crate::AppState;
use crate::error::ApiError;

/// The routes that need no authentication: probes, metrics and the token endpoint.
pub const PUBLIC_ROUTES: [&str; 6] =
    ["/health", "/ready", "/metrics", "/v1/oauth/tokens", "/openapi/catalog.yaml", "/openapi/management.yaml"];

/// Authentication and authorization services shared by every request.
#[derive(Clone)]
pub struct Security {
    pub authenticator: Arc<Authenticator>,
    pub authorizer: Arc<Authorizer>,
    /// Tokens of external OIDC issuers, when any are configured.
    pub oidc: Option<Arc<crate::oidc::OidcVerifier>>,
}

impl Security {
    /// The caller behind an `Authorization` header: an external OIDC token, or one of icegate's
    /// (with the secret version it was issued under).
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<TokenCaller, CatalogError> {
        if self.authenticator.required()
            && let Some(oidc) = &self.oidc
            && let Some(token) =
                authorization.and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
        {
            let before = oidc.provisioned();
            if let Some(result) = oidc.verify(token.trim()).await {
                // A token seen for the first time syncs its roles claim onto memberships.
                if oidc.provisioned() != before {
                    self.authorizer.invalidate();
                }
                return result.map(|caller| TokenCaller { caller, secret_version: None });
            }
        }
        self.authenticator.authenticate(authorization)
    }
}

/// Middleware over every route: authenticates the caller of every route but the public ones,
/// and puts the request's context on it. After the response, the context's decisions are
/// logged (target `icegate::authz`: refusals at info, the rest at debug).
pub async fn guard(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let Some(route) = request.extensions().get::<MatchedPath>().cloned() else {
        return next.run(request).await; // unknown route: the fallback answers 404
    };
    if PUBLIC_ROUTES.contains(&route.as_str()) {
        return next.run(request).await;
    }
    let method = request.method().clone();
    // axum answers HEAD with the GET handler where no HEAD handler exists.
    let operation = state.operations.get(route.as_str()).and_then(|methods| {
        let served = |wanted: &Method| methods.iter().find(|(m, _)| m == wanted).map(|(_, id)| id.clone());
        served(&method).or_else(|| if method == Method::HEAD { served(&Method::GET) } else { None })
    });
    let Some(operation) = operation else {
        return next.run(request).await; // a method the route does not serve: the router answers 405
    };
    let authorization = request.headers().get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let request_id = crate::audit::request_id(request.headers());
    let ctx = match authenticate(&state.security, authorization).await {
        Ok((caller, secret_version)) => RequestContext::new(caller, state.security.authorizer.clone())
            .with_secret_version(secret_version)
            .with_request_id(request_id)
            .with_operation(operation),
        Err(err) => {
            let reason = err.to_string();
            let response = ApiError::from(err).into_response();
            let asked = (&*operation, request_id, authorization);
            return crate::audit::record_unauthenticated(&state, asked, reason, response).await;
        }
    };
    request.extensions_mut().insert(ctx.clone());
    let response = next.run(request).await;
    log_decisions(&ctx, &method, route.as_str(), &response);
    crate::audit::record_request(&state, &ctx, &method, response).await
}

/// The caller, and the secret version its token was issued under (icegate-issued tokens).
async fn authenticate(security: &Security, authorization: Option<&str>) -> Result<(Caller, Option<i64>), CatalogError> {
    let TokenCaller { caller, secret_version } = security.authenticate(authorization).await?;
    if let Caller::Principal { id, name, .. } = &caller
        && !security.authorizer.principal_active(id, secret_version).await?
    {
        tracing::info!(principal = %name, principal_id = %id, "request not authenticated: the principal was deleted or its secret rotated");
        return Err(CatalogError::NotAuthorized("Not authorized: a valid bearer token is required".into()));
    }
    Ok((caller, secret_version))
}

/// One line per request with what was decided. A principal's request answered with success
/// without any decision would be an operation that forgot to authorize: logged as an error.
fn log_decisions(ctx: &RequestContext, method: &Method, route: &str, response: &Response) {
    let Caller::Principal { id, name, .. } = ctx.caller() else { return };
    let status = response.status().as_u16();
    let operation = ctx.operation().unwrap_or_default();
    ctx.with_decisions(|decisions| {
        let listed = || decisions.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        if decisions.is_empty() {
            if response.status().is_success() && !UNDECIDED_ROUTES.contains(&(method.as_str(), route)) {
                tracing::error!(target: "icegate::authz", principal = %name, principal_id = %id, operation, %method, route, status,
                    "a request succeeded without an authorization decision");
            }
        } else if decisions.iter().any(|d| !d.outcome.allowed()) {
            tracing::info!(target: "icegate::authz", principal = %name, principal_id = %id, operation, %method, route, status, decisions = %listed(), "authorization");
        } else if tracing::enabled!(target: "icegate::authz", tracing::Level::DEBUG) {
            tracing::debug!(target: "icegate::authz", principal = %name, principal_id = %id, operation, %method, route, status, decisions = %listed(), "authorization");
        }
    });
}

/// Authenticated operations that decide nothing when a principal acts on itself: `whoami`, the
/// listing of its own grants, and the rotation of its own secret (each compares the caller's id
/// with the principal's).
const UNDECIDED_ROUTES: [(&str, &str); 3] = [
    ("GET", "/management/v1/whoami"),
    ("GET", "/management/v1/grants"),
    ("POST", "/management/v1/principals/{name}/rotate-secret"),
];

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use icegate_catalog::access::{AccessStore, Authorizer};
    use icegate_catalog::tokens::{AuthSettings, Authenticator};
    use icegate_catalog::{Catalog, CatalogStore};
    use icegate_store::testing::{TestBackend, TestDatabase};
    use tower::ServiceExt;

    use super::{PUBLIC_ROUTES, Security};
    use crate::{AppState, AppStateInner, Metrics};

    /// Deny by default, structurally: the routes alone, without the guard that puts a request
    /// context on each request, serve nothing but the public routes. Every other operation is
    /// refused by its handler before any service runs (a handler that reached a service without
    /// a context would answer something else: 404 for the missing objects, 200 for listings).
    #[tokio::test]
    async fn no_operation_reaches_a_service_without_a_request_context() {
        let db = TestDatabase::new(TestBackend::Sqlite).await;
        let store: Arc<dyn CatalogStore> = Arc::new(db.store.clone());
        let access: Arc<dyn AccessStore> = Arc::new(db.store.clone());
        let settings = AuthSettings {
            required: false,
            issuer: "icegate".into(),
            audience: "icegate".into(),
            token_lifetime: std::time::Duration::from_secs(60),
            leeway: std::time::Duration::from_secs(5),
        };
        let authenticator = Authenticator::new(settings, access.clone(), Some("k".repeat(32))).await.unwrap();
        let security = Security {
            authenticator: Arc::new(authenticator),
            authorizer: Arc::new(Authorizer::new(access.clone())),
            oidc: None,
        };
        let catalog = Catalog::new(store.clone(), Arc::new(icegate_storage::ObjectStoreIo::new()), None);
        let (router, documents) = crate::openapi::routes();
        let state = AppState(Arc::new(AppStateInner {
            access: icegate_catalog::access_admin::AccessAdmin::new(access, catalog.clone()),
            catalog,
            metrics: Metrics::new(),
            endpoints: Arc::new(Vec::new()),
            idempotency_lifetime: std::time::Duration::from_secs(60),
            request_timeout: std::time::Duration::from_secs(10),
            max_body_bytes: 1 << 20,
            security,
            operations: Arc::new(crate::methods_by_route(&documents)),
            strangers: crate::audit::StrangerRecords::default(),
        }));
        let router = router.with_state(state).layer(axum::middleware::from_fn(crate::error::iceberg_error_bodies));
        let mut checked = 0;
        for (method, route) in documents.operations() {
            if PUBLIC_ROUTES.contains(&route.as_str()) {
                continue;
            }
            let path = route
                .replace("{prefix}", "wh")
                .replace("{namespace}", "db")
                .replace("{table}", "t")
                .replace("{view}", "v")
                .replace("{name}", "default")
                .replace("{role}", "r")
                .replace("{principal}", "p");
            let request = Request::builder()
                .method(method.parse::<Method>().unwrap())
                .uri(format!("{path}?type=server&role=r&warehouse=default"))
                .header("content-type", "application/json")
                .body(Body::from("{}"))
                .unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{method} {route} without a request context");
            checked += 1;
            if method == "HEAD" {
                continue; // the status alone
            }
            let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body)
                .unwrap_or_else(|_| panic!("{method} {route}: {}", String::from_utf8_lossy(&body)));
            assert_eq!(body["error"]["type"], "ForbiddenException", "{method} {route}: {body}");
        }
        assert!(checked >= 40, "only {checked} operations were checked");
        assert!(store.list_warehouses(None).await.unwrap().is_empty());
    }
}
