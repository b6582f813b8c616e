//! Authentication and authorization of every request, in one place.
//!
//! Each route has a rule in [`rule`]; a route without one is refused (deny by default), and a
//! test checks that every documented route has a rule. The rule names the privilege and the
//! securable it applies to, resolved from the path or the query (and, for namespace creation,
//! the body's namespace). Where what is needed depends on values in the body or on what the
//! operation finds (commits, transactions, renames, registrations, grants, storage profiles),
//! the rule only makes the route's object visible to the caller, and the service or handler
//! decides with the values it parsed and acts on, through the request context.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use icegate_catalog::access::{Authorizer, Caller, Privilege, Target, Visibility};
use icegate_catalog::auth::Authenticator;
use icegate_catalog::storage::AccessLevel;
use icegate_catalog::store::TabularKind;
use icegate_catalog::{CatalogError, NamespaceIdent};
use serde_json::Value;

use crate::AppState;
use crate::error::ApiError;

/// Authentication and authorization services shared by every request.
#[derive(Clone)]
pub struct Security {
    pub authenticator: Arc<Authenticator>,
    pub authorizer: Arc<Authorizer>,
    /// Tokens of external OIDC issuers, when any are configured.
    pub oidc: Option<Arc<crate::oidc::OidcVerifier>>,
}

impl Security {
    /// The caller behind an `Authorization` header: an external OIDC token, or one of icegate's.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, CatalogError> {
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
                return result;
            }
        }
        self.authenticator.authenticate(authorization)
    }
}

/// The access to a table's files that the caller's privileges give (`write` -> read-write,
/// otherwise read), set by the table rules for credential vending and signing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageAccess(pub AccessLevel);

/// The storage access level of a request on an existing table: what the guard found, read-write
/// for an unrestricted caller (`auth.mode = none`), and read otherwise (least privilege).
pub fn storage_access(
    caller: Option<&axum::Extension<Caller>>,
    access: Option<&axum::Extension<StorageAccess>>,
) -> AccessLevel {
    match (access, caller) {
        (Some(axum::Extension(StorageAccess(level))), _) => *level,
        (None, None | Some(axum::Extension(Caller::Unrestricted))) => AccessLevel::ReadWrite,
        (None, Some(_)) => AccessLevel::Read,
    }
}

/// What a route requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// No authentication (health, readiness, metrics, the token endpoint).
    Public,
    /// Any authenticated caller (whoami; listings filtered to what the caller can see).
    Authenticated,
    Server(Privilege),
    /// On the warehouse of `{prefix}`, of `?warehouse=` (config), or of `{name}` (management).
    Warehouse(Privilege),
    /// On `{namespace}`.
    Namespace(Privilege),
    /// Describe the `?parent=` namespace (or the warehouse) and list what is visible in it.
    ListNamespaces,
    /// Create inside the parent of the body's `namespace` (or in the warehouse).
    CreateNamespace,
    /// On `{table}` or `{view}`.
    Tabular(TabularKind, Privilege),
    /// Any authenticated caller; the handler decides with the values it parsed (grants: manage
    /// grants and hold the privilege on the securable; listings: server admin or oneself).
    InHandler,
}

/// The rule of each route (method and route template).
pub fn rule(method: &Method, route: &str) -> Option<Rule> {
    use Privilege as P;
    use Rule as R;
    let table = TabularKind::Table;
    let view = TabularKind::View;
    let m = method.as_str();
    Some(match (m, route) {
        (_, "/health" | "/ready" | "/metrics" | "/v1/oauth/tokens") => R::Public,
        ("GET", "/v1/config") => R::Warehouse(P::Describe),
        ("GET", "/v1/{prefix}/namespaces") => R::ListNamespaces,
        ("POST", "/v1/{prefix}/namespaces") => R::CreateNamespace,
        ("GET" | "HEAD", "/v1/{prefix}/namespaces/{namespace}") => R::Namespace(P::Describe),
        ("DELETE", "/v1/{prefix}/namespaces/{namespace}") => R::Namespace(P::Drop),
        ("POST", "/v1/{prefix}/namespaces/{namespace}/properties") => R::Namespace(P::Write),
        ("GET", "/v1/{prefix}/namespaces/{namespace}/tables" | "/v1/{prefix}/namespaces/{namespace}/views") => {
            R::Namespace(P::Describe)
        }
        (
            "POST",
            "/v1/{prefix}/namespaces/{namespace}/tables"
            | "/v1/{prefix}/namespaces/{namespace}/register"
            | "/v1/{prefix}/namespaces/{namespace}/views"
            | "/v1/{prefix}/namespaces/{namespace}/register-view",
        ) => R::Namespace(P::Create),
        ("GET", "/v1/{prefix}/namespaces/{namespace}/tables/{table}") => R::Tabular(table, P::Read),
        ("HEAD", "/v1/{prefix}/namespaces/{namespace}/tables/{table}") => R::Tabular(table, P::Describe),
        // The commit decides: `write` on an existing table, `create` in the namespace for a
        // commit that creates one (assert-create). The route only needs the table visible.
        ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}") => R::Tabular(table, P::Describe),
        ("DELETE", "/v1/{prefix}/namespaces/{namespace}/tables/{table}") => R::Tabular(table, P::Drop),
        ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics") => R::Tabular(table, P::Read),
        // Credentials and signatures are scoped to the caller's level (read or read-write).
        ("GET", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials") => R::Tabular(table, P::Read),
        ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/sign") => R::Tabular(table, P::Read),
        // The rename decides, on the identifiers it parsed: `drop` on the source, `create` in the
        // target namespace, and for a move between namespaces `read` and no wider access.
        ("POST", "/v1/{prefix}/tables/rename" | "/v1/{prefix}/views/rename") => R::Warehouse(P::Describe),
        // The transaction decides: `write` on every table it changes, on the identifiers it parsed.
        ("POST", "/v1/{prefix}/transactions/commit") => R::Warehouse(P::Describe),
        ("GET", "/v1/{prefix}/namespaces/{namespace}/views/{view}") => R::Tabular(view, P::Read),
        ("HEAD", "/v1/{prefix}/namespaces/{namespace}/views/{view}") => R::Tabular(view, P::Describe),
        ("POST", "/v1/{prefix}/namespaces/{namespace}/views/{view}") => R::Tabular(view, P::Write),
        ("DELETE", "/v1/{prefix}/namespaces/{namespace}/views/{view}") => R::Tabular(view, P::Drop),
        ("POST", "/management/v1/warehouses") => R::Server(P::Admin),
        ("GET", "/management/v1/warehouses" | "/management/v1/whoami") => R::Authenticated,
        ("GET", "/management/v1/warehouses/{name}") => R::Warehouse(P::Describe),
        ("DELETE", "/management/v1/warehouses/{name}") => R::Warehouse(P::Admin),
        ("PUT", "/management/v1/warehouses/{name}/storage-profile") => R::Warehouse(P::Admin),
        (
            _,
            "/management/v1/principals"
            | "/management/v1/principals/{name}"
            | "/management/v1/principals/{name}/rotate-secret"
            | "/management/v1/roles"
            | "/management/v1/roles/{role}"
            | "/management/v1/roles/{role}/principals/{principal}",
        ) => R::Server(P::Admin),
        // Decided by the handler on the securable, privilege or parameter it parsed.
        ("POST" | "DELETE", "/management/v1/grants")
        | ("GET", "/management/v1/grants" | "/management/v1/grants/on") => R::InHandler,
        _ => return None,
    })
}

/// The tables and views a list handler shows (absent when authorization is off).
pub fn visibility(request_visibility: Option<axum::Extension<Visibility>>) -> Option<String> {
    request_visibility.and_then(|axum::Extension(v)| v.principal().map(str::to_owned))
}

fn namespace_target(warehouse_id: &str, namespace: NamespaceIdent) -> Target {
    Target::Namespace { warehouse_id: warehouse_id.to_owned(), namespace }
}

/// A namespace named by its levels in a JSON body.
fn body_namespace(value: &Value) -> Result<NamespaceIdent, CatalogError> {
    let levels: Vec<String> = serde_json::from_value(value.clone())
        .map_err(|_| CatalogError::bad_request("namespace must be an array of strings"))?;
    NamespaceIdent::from_levels(levels)
}

/// Middleware over every route.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    // Any change to principals, roles, memberships or grants (every mutating management route
    // but warehouses'), and any change of which object a name means (drops and renames: grants
    // follow objects, decisions are cached by name), drops cached authorization decisions.
    let path = request.uri().path();
    let method = request.method();
    let changes_access = (method != Method::GET
        && method != Method::HEAD
        && path.starts_with("/management/v1/")
        && !path.starts_with("/management/v1/warehouses"))
        || (path.starts_with("/v1/") && (method == Method::DELETE || path.ends_with("/rename")));
    let response = match check(&state, request).await {
        Ok(request) => next.run(request).await,
        Err(err) => return ApiError::from(err).into_response(),
    };
    if changes_access {
        state.security.authorizer.invalidate();
    }
    response
}

async fn check(state: &AppState, request: Request) -> Result<Request, CatalogError> {
    let Some(route) = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()) else {
        return Ok(request); // unknown route: the fallback answers 404
    };
    let method = request.method().clone();
    // axum answers HEAD with the GET handler where no HEAD handler exists: same rule.
    let found =
        rule(&method, &route).or_else(|| (method == Method::HEAD).then(|| rule(&Method::GET, &route)).flatten());
    let Some(rule) = found else {
        if state.operations.contains(&(method.to_string(), route.clone())) {
            // A real operation without a rule is a bug: fail closed.
            tracing::error!(%method, %route, "route without an authorization rule");
            return Err(CatalogError::Forbidden("no authorization rule for this route".into()));
        }
        return Ok(request); // a method the route does not serve: the router answers 405
    };
    if rule == Rule::Public {
        return Ok(request);
    }
    let security = &state.security;
    let authorization = request.headers().get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let caller = security.authenticate(authorization).await?;
    if let Caller::Principal { id, .. } = &caller
        && !security.authorizer.principal_active(id).await?
    {
        tracing::info!(principal = %id, "request not authenticated: the principal was deleted");
        return Err(CatalogError::NotAuthorized("Not authorized: a valid bearer token is required".into()));
    }
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(caller.clone());
    if caller == Caller::Unrestricted {
        return Ok(Request::from_parts(parts, body));
    }
    let params: HashMap<String, String> =
        axum::extract::Path::<HashMap<String, String>>::from_request_parts(&mut parts, &())
            .await
            .map(|p| p.0)
            .unwrap_or_default();
    let query: HashMap<String, String> =
        axum::extract::Query::<HashMap<String, String>>::try_from_uri(&parts.uri).map(|q| q.0).unwrap_or_default();
    // Bodies are read only for the rules that need them (small JSON documents).
    let needs_body = matches!(rule, Rule::CreateNamespace);
    let (body, json) = if needs_body {
        let bytes = axum::body::to_bytes(body, state.max_body_bytes)
            .await
            .map_err(|_| CatalogError::bad_request("request body too large or unreadable"))?;
        let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (Body::from(bytes), json)
    } else {
        (body, Value::Null)
    };

    let authorizer = &security.authorizer;
    let warehouse = || async {
        if let Some(prefix) = params.get("prefix") {
            state.catalog.warehouse_for_prefix(prefix).await
        } else if let Some(name) = params.get("name") {
            state.catalog.get_warehouse(name).await
        } else {
            state.catalog.config_warehouse(query.get("warehouse").map(String::as_str)).await
        }
    };
    // A warehouse the caller may not see is answered with what the client asked for, exactly as
    // an unknown one is (a /v1 prefix is an opaque id: the name is not the client's to learn).
    let asked = |wh: &icegate_catalog::store::Warehouse| {
        params
            .get("prefix")
            .or_else(|| params.get("name"))
            .or_else(|| query.get("warehouse"))
            .cloned()
            .unwrap_or_else(|| wh.name.to_string())
    };
    let namespace_param = || NamespaceIdent::parse_encoded(params.get("namespace").map(String::as_str).unwrap_or(""));
    let visibility = match rule {
        Rule::Public => Visibility::All,
        Rule::Authenticated => match &caller {
            Caller::Principal { id, .. } => {
                // Listings under this rule filter to what the caller holds unless it holds server-wide.
                authorizer
                    .check(&caller, &Target::Server, Privilege::Describe, || CatalogError::Forbidden(String::new()))
                    .await
                    .unwrap_or_else(|_| Visibility::HeldBy(id.clone()))
            }
            Caller::Unrestricted => Visibility::All,
        },
        Rule::Server(privilege) => {
            authorizer
                .check(&caller, &Target::Server, privilege, || {
                    CatalogError::Forbidden(format!("requires {privilege} on the server"))
                })
                .await?
        }
        Rule::Warehouse(privilege) => {
            let wh = warehouse().await?;
            let name = asked(&wh);
            authorizer
                .check(&caller, &Target::Warehouse { warehouse_id: wh.id }, privilege, || {
                    CatalogError::no_such_warehouse(name)
                })
                .await?
        }
        Rule::ListNamespaces => {
            let wh = warehouse().await?;
            match query.get("parent").filter(|p| !p.is_empty()) {
                Some(parent) => {
                    let parent = NamespaceIdent::parse_encoded(parent)?;
                    let missing = CatalogError::no_such_namespace(&parent);
                    authorizer
                        .check(&caller, &namespace_target(&wh.id, parent), Privilege::Describe, || missing)
                        .await?
                }
                None => {
                    let name = asked(&wh);
                    authorizer
                        .check(&caller, &Target::Warehouse { warehouse_id: wh.id }, Privilege::Describe, || {
                            CatalogError::no_such_warehouse(name)
                        })
                        .await?
                }
            }
        }
        Rule::CreateNamespace => {
            let wh = warehouse().await?;
            let namespace = body_namespace(&json["namespace"])?;
            match namespace.parent() {
                Some(parent) => {
                    let missing = CatalogError::no_such_namespace(&parent);
                    authorizer.check(&caller, &namespace_target(&wh.id, parent), Privilege::Create, || missing).await?
                }
                None => {
                    let name = asked(&wh);
                    authorizer
                        .check(&caller, &Target::Warehouse { warehouse_id: wh.id }, Privilege::Create, || {
                            CatalogError::no_such_warehouse(name)
                        })
                        .await?
                }
            }
        }
        Rule::Namespace(privilege) => {
            let wh = warehouse().await?;
            let namespace = namespace_param()?;
            let missing = CatalogError::no_such_namespace(&namespace);
            authorizer.check(&caller, &namespace_target(&wh.id, namespace), privilege, || missing).await?
        }
        Rule::Tabular(kind, privilege) => {
            let wh = warehouse().await?;
            let namespace = namespace_param()?;
            let key = if kind == TabularKind::View { "view" } else { "table" };
            let name = params.get(key).cloned().unwrap_or_default();
            let missing = if kind == TabularKind::View {
                CatalogError::no_such_view(format!("{namespace}.{name}"))
            } else {
                CatalogError::no_such_table(format!("{namespace}.{name}"))
            };
            let target = Target::Tabular { warehouse_id: wh.id, namespace, name, kind };
            let (visibility, holdings) = authorizer.check_holdings(&caller, &target, privilege, || missing).await?;
            if let Some(holdings) = holdings {
                let level = if holdings.has(Privilege::Write) { AccessLevel::ReadWrite } else { AccessLevel::Read };
                parts.extensions.insert(StorageAccess(level));
            }
            visibility
        }
        Rule::InHandler => Visibility::All,
    };
    parts.extensions.insert(visibility);
    Ok(Request::from_parts(parts, body))
}
