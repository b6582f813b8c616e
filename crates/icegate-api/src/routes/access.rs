//! Management API: principals, roles, memberships, grants and `whoami`.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use icegate_catalog::access::{Caller, GrantRecord, Privilege, SecurableRef, SecurableType, Target};
use icegate_catalog::auth::{hash_secret, new_client_id, random_secret};
use icegate_catalog::ident::validate_name;
use icegate_catalog::store::TabularKind;
use icegate_catalog::{CatalogError, NamespaceIdent, RequestContext};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Path, Query};

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PrincipalResponse {
    pub name: String,
    pub client_id: Option<String>,
    pub created_at_ms: i64,
}

/// Returned once, when a principal is created or its secret rotated: the secret is not stored.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PrincipalCredentials {
    pub name: String,
    pub client_id: String,
    pub client_secret: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePrincipalRequest {
    pub name: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ListPrincipalsResponse {
    pub principals: Vec<PrincipalResponse>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RoleResponse {
    pub name: String,
    pub principals: Vec<String>,
    pub created_at_ms: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRoleRequest {
    pub name: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ListRolesResponse {
    pub roles: Vec<RoleResponse>,
}

/// A securable: `server`; `warehouse` (+ `warehouse`); `namespace` (+ `namespace` levels);
/// `table` or `view` (+ `name`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Securable {
    #[serde(rename = "type")]
    pub kind: String,
    pub warehouse: Option<String>,
    pub namespace: Option<Vec<String>>,
    pub name: Option<String>,
}

impl Securable {
    fn parse(&self) -> Result<SecurableRef, ApiError> {
        let securable = SecurableRef {
            kind: SecurableType::parse(&self.kind)?,
            warehouse: self.warehouse.clone(),
            namespace: self.namespace.clone().map(NamespaceIdent::from_levels).transpose()?,
            name: self.name.clone(),
        };
        securable.validate()?;
        Ok(securable)
    }

    fn from(securable: &SecurableRef) -> Self {
        Self {
            kind: securable.kind.as_str().to_owned(),
            warehouse: securable.warehouse.clone(),
            namespace: securable.namespace.as_ref().map(|n| n.levels().to_vec()),
            name: securable.name.clone(),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct GrantRequest {
    pub role: String,
    /// describe, read, write, create, drop, manage_grants or admin.
    pub privilege: String,
    pub securable: Securable,
    /// When the grant stops applying, milliseconds since the Unix epoch.
    pub expires_at_ms: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct GrantResponse {
    pub role: String,
    pub privilege: String,
    pub securable: Securable,
    pub expires_at_ms: Option<i64>,
}

impl From<GrantRecord> for GrantResponse {
    fn from(g: GrantRecord) -> Self {
        Self {
            role: g.role,
            privilege: g.privilege.as_str().to_owned(),
            securable: Securable::from(&g.securable),
            expires_at_ms: g.expires_at_ms,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ListGrantsResponse {
    pub grants: Vec<GrantResponse>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListGrantsQuery {
    /// The grants of this role.
    pub role: Option<String>,
    /// The effective grants of this principal (through its roles; unexpired only).
    pub principal: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GrantsOnQuery {
    /// server, warehouse, namespace, table or view.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub kind: String,
    pub warehouse: Option<String>,
    /// Levels separated by `%1F`.
    pub namespace: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WhoAmIResponse {
    /// The principal's name; `null` when authentication is off.
    pub principal: Option<String>,
    pub roles: Vec<String>,
    /// Privileges held on the server itself.
    pub server_privileges: Vec<String>,
    pub authentication: String,
}

fn access(state: &AppState) -> &std::sync::Arc<dyn icegate_catalog::access::AccessStore> {
    state.security.authenticator.access()
}

fn check_name(what: &str, name: &str) -> Result<(), ApiError> {
    validate_name(what, name)?;
    Ok(())
}

/// Create a principal with client credentials (the secret is shown once)
#[utoipa::path(post, path = "/management/v1/principals", tag = "Access control", operation_id = "createPrincipal",
    request_body = CreatePrincipalRequest,
    responses(
        (status = 201, description = "The principal and its credentials, shown once", body = PrincipalCredentials),
        (status = 400, description = "Invalid name", body = IcebergErrorResponse),
        (status = 409, description = "The name is taken", body = IcebergErrorResponse),
    ))]
pub async fn create_principal(
    State(state): State<AppState>,
    Json(request): Json<CreatePrincipalRequest>,
) -> Result<(StatusCode, Json<PrincipalCredentials>), ApiError> {
    check_name("principal", &request.name)?;
    let (client_id, secret) = (new_client_id(), random_secret());
    access(&state).create_principal(&request.name, &client_id, &hash_secret(&secret)?).await?;
    Ok((StatusCode::CREATED, Json(PrincipalCredentials { name: request.name, client_id, client_secret: secret })))
}

/// List principals
#[utoipa::path(get, path = "/management/v1/principals", tag = "Access control", operation_id = "listPrincipals",
    responses((status = 200, description = "Every principal", body = ListPrincipalsResponse)))]
pub async fn list_principals(State(state): State<AppState>) -> Result<Json<ListPrincipalsResponse>, ApiError> {
    let principals = access(&state).list_principals().await?;
    Ok(Json(ListPrincipalsResponse {
        principals: principals
            .into_iter()
            .map(|p| PrincipalResponse { name: p.name, client_id: p.client_id, created_at_ms: p.created_at_ms })
            .collect(),
    }))
}

/// Get a principal
#[utoipa::path(get, path = "/management/v1/principals/{name}", tag = "Access control", operation_id = "getPrincipal",
    params(("name" = String, Path, description = "Principal name")),
    responses(
        (status = 200, description = "The principal", body = PrincipalResponse),
        (status = 404, description = "No such principal", body = IcebergErrorResponse),
    ))]
pub async fn get_principal(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<PrincipalResponse>, ApiError> {
    let p = access(&state).principal_by_name(&name).await?.ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, "NotFoundException", format!("Principal does not exist: {name}"))
    })?;
    Ok(Json(PrincipalResponse { name: p.name, client_id: p.client_id, created_at_ms: p.created_at_ms }))
}

/// Delete a principal
#[utoipa::path(delete, path = "/management/v1/principals/{name}", tag = "Access control", operation_id = "deletePrincipal",
    params(("name" = String, Path, description = "Principal name")),
    responses(
        (status = 204, description = "Deleted; its tokens stop working at once"),
        (status = 404, description = "No such principal", body = IcebergErrorResponse),
    ))]
pub async fn delete_principal(State(state): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    access(&state).delete_principal(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Rotate a principal's client secret (the new secret is shown once)
#[utoipa::path(post, path = "/management/v1/principals/{name}/rotate-secret", tag = "Access control", operation_id = "rotatePrincipalSecret",
    params(("name" = String, Path, description = "Principal name")),
    responses(
        (status = 200, description = "The new credentials, shown once", body = PrincipalCredentials),
        (status = 404, description = "No such principal", body = IcebergErrorResponse),
    ))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<PrincipalCredentials>, ApiError> {
    let secret = random_secret();
    let p = access(&state).set_principal_secret(&name, &hash_secret(&secret)?).await?;
    Ok(Json(PrincipalCredentials { name: p.name, client_id: p.client_id.unwrap_or_default(), client_secret: secret }))
}

async fn role_response(state: &AppState, role: icegate_catalog::access::RoleRecord) -> Result<RoleResponse, ApiError> {
    let principals = access(state).role_members(&role.name).await?;
    Ok(RoleResponse { name: role.name, principals, created_at_ms: role.created_at_ms })
}

/// Create a role
#[utoipa::path(post, path = "/management/v1/roles", tag = "Access control", operation_id = "createRole",
    request_body = CreateRoleRequest,
    responses(
        (status = 201, description = "The role", body = RoleResponse),
        (status = 400, description = "Invalid name", body = IcebergErrorResponse),
        (status = 409, description = "The name is taken", body = IcebergErrorResponse),
    ))]
pub async fn create_role(
    State(state): State<AppState>,
    Json(request): Json<CreateRoleRequest>,
) -> Result<(StatusCode, Json<RoleResponse>), ApiError> {
    check_name("role", &request.name)?;
    let role = access(&state).create_role(&request.name).await?;
    Ok((StatusCode::CREATED, Json(role_response(&state, role).await?)))
}

/// List roles
#[utoipa::path(get, path = "/management/v1/roles", tag = "Access control", operation_id = "listRoles",
    responses((status = 200, description = "Every role with its members", body = ListRolesResponse)))]
pub async fn list_roles(State(state): State<AppState>) -> Result<Json<ListRolesResponse>, ApiError> {
    let mut roles = Vec::new();
    for role in access(&state).list_roles().await? {
        roles.push(role_response(&state, role).await?);
    }
    Ok(Json(ListRolesResponse { roles }))
}

/// Get a role
#[utoipa::path(get, path = "/management/v1/roles/{role}", tag = "Access control", operation_id = "getRole",
    params(("role" = String, Path, description = "Role name")),
    responses(
        (status = 200, description = "The role", body = RoleResponse),
        (status = 404, description = "No such role", body = IcebergErrorResponse),
    ))]
pub async fn get_role(State(state): State<AppState>, Path(role): Path<String>) -> Result<Json<RoleResponse>, ApiError> {
    let record = access(&state).role_by_name(&role).await?.ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, "NotFoundException", format!("Role does not exist: {role}"))
    })?;
    Ok(Json(role_response(&state, record).await?))
}

/// Delete a role (and its grants)
#[utoipa::path(delete, path = "/management/v1/roles/{role}", tag = "Access control", operation_id = "deleteRole",
    params(("role" = String, Path, description = "Role name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such role", body = IcebergErrorResponse),
    ))]
pub async fn delete_role(State(state): State<AppState>, Path(role): Path<String>) -> Result<StatusCode, ApiError> {
    access(&state).delete_role(&role).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Add a principal to a role
#[utoipa::path(put, path = "/management/v1/roles/{role}/principals/{principal}", tag = "Access control", operation_id = "addRoleMember",
    params(("role" = String, Path, description = "Role name"), ("principal" = String, Path, description = "Principal name")),
    responses(
        (status = 204, description = "The principal holds the role"),
        (status = 404, description = "No such role or principal", body = IcebergErrorResponse),
    ))]
pub async fn add_member(
    State(state): State<AppState>,
    Path((role, principal)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    access(&state).add_role_member(&role, &principal).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Remove a principal from a role
#[utoipa::path(delete, path = "/management/v1/roles/{role}/principals/{principal}", tag = "Access control", operation_id = "removeRoleMember",
    params(("role" = String, Path, description = "Role name"), ("principal" = String, Path, description = "Principal name")),
    responses(
        (status = 204, description = "Removed"),
        (status = 404, description = "No such membership", body = IcebergErrorResponse),
    ))]
pub async fn remove_member(
    State(state): State<AppState>,
    Path((role, principal)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    access(&state).remove_role_member(&role, &principal).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Grant a privilege to a role on a securable
#[utoipa::path(post, path = "/management/v1/grants", tag = "Access control", operation_id = "grant",
    request_body = GrantRequest,
    responses(
        (status = 201, description = "The grant", body = GrantResponse),
        (status = 400, description = "Invalid privilege or securable", body = IcebergErrorResponse),
        (status = 403, description = "Without manage_grants and the privilege itself on the securable", body = IcebergErrorResponse),
        (status = 404, description = "No such role or securable", body = IcebergErrorResponse),
        (status = 409, description = "The role holds that grant already", body = IcebergErrorResponse),
    ))]
pub async fn grant(
    State(state): State<AppState>,
    Context(ctx): Context,
    Json(request): Json<GrantRequest>,
) -> Result<(StatusCode, Json<GrantResponse>), ApiError> {
    let privilege = Privilege::parse(&request.privilege)?;
    let securable = request.securable.parse()?;
    if let Some(expires) = request.expires_at_ms
        && expires <= now_ms()
    {
        // A grant that can never apply is a mistake (seconds given for milliseconds, say).
        return Err(ApiError::bad_request(format!(
            "expires-at-ms {expires} is not in the future; it counts milliseconds since the Unix epoch"
        )));
    }
    // A grantor whose own privileges there expire cannot hand them on for longer.
    let expires_at_ms = match authorize_grant(&state, &ctx, &securable, privilege).await? {
        Some(limit) => Some(request.expires_at_ms.map_or(limit, |asked| asked.min(limit))),
        None => request.expires_at_ms,
    };
    let record = access(&state).grant(&request.role, privilege, &securable, expires_at_ms).await?;
    Ok((StatusCode::CREATED, Json(record.into())))
}

/// The authorization target of a securable, by name (ids resolved by the store).
async fn securable_target(state: &AppState, securable: &SecurableRef) -> Result<Target, ApiError> {
    let Some(warehouse) = &securable.warehouse else { return Ok(Target::Server) };
    let warehouse_id = state.catalog.get_warehouse(warehouse).await?.id;
    Ok(match (&securable.namespace, &securable.name) {
        (None, _) => Target::Warehouse { warehouse_id },
        (Some(namespace), None) => Target::Namespace { warehouse_id, namespace: namespace.clone() },
        (Some(namespace), Some(name)) => Target::Tabular {
            warehouse_id,
            namespace: namespace.clone(),
            name: name.clone(),
            kind: if securable.kind == SecurableType::View { TabularKind::View } else { TabularKind::Table },
        },
    })
}

/// The answer for a securable the caller may not see: exactly the one for a missing securable,
/// so that whether it exists is not learned from it.
fn missing(securable: &SecurableRef) -> CatalogError {
    let namespace = securable.namespace.as_ref().map(ToString::to_string).unwrap_or_default();
    let name = securable.name.clone().unwrap_or_default();
    match securable.kind {
        SecurableType::Server => CatalogError::Forbidden("requires manage_grants on the server".into()),
        SecurableType::Warehouse => CatalogError::no_such_warehouse(securable.warehouse.as_deref().unwrap_or("")),
        SecurableType::Namespace => CatalogError::no_such_namespace(namespace),
        SecurableType::Table => CatalogError::no_such_table(format!("{namespace}.{name}")),
        SecurableType::View => CatalogError::no_such_view(format!("{namespace}.{name}")),
    }
}

/// Granting or revoking `privilege` on `securable` needs `manage_grants` there and the
/// privilege itself: a grantor hands on (or takes back) only what it holds, so `manage_grants`
/// on a namespace cannot make anyone, itself included, its admin. Decided on the securable and
/// privilege the handler parsed, the ones the store then acts on. Returns when the grantor's
/// holdings there expire (the earliest expiry among the grants they come from), if they do.
async fn authorize_grant(
    state: &AppState,
    ctx: &RequestContext,
    securable: &SecurableRef,
    privilege: Privilege,
) -> Result<Option<i64>, ApiError> {
    let target = match securable_target(state, securable).await {
        Err(_) if securable.kind != SecurableType::Server => return Err(missing(securable).into()),
        other => other?,
    };
    let held = ctx.require(&target, Privilege::ManageGrants, || missing(securable)).await?;
    if let Some(held) = &held
        && !held.has(privilege)
    {
        return Err(CatalogError::Forbidden(format!(
            "a grantor may grant or revoke only privileges it holds on the securable, and you do not hold {privilege} there"
        ))
        .into());
    }
    Ok(held.and_then(|h| h.expires_at_ms))
}

/// Revoke a privilege from a role on a securable (effective immediately)
#[utoipa::path(delete, path = "/management/v1/grants", tag = "Access control", operation_id = "revoke",
    request_body = GrantRequest,
    responses(
        (status = 204, description = "Revoked"),
        (status = 400, description = "Invalid privilege or securable", body = IcebergErrorResponse),
        (status = 403, description = "Without manage_grants and the privilege itself on the securable", body = IcebergErrorResponse),
        (status = 404, description = "No such grant", body = IcebergErrorResponse),
    ))]
pub async fn revoke(
    State(state): State<AppState>,
    Context(ctx): Context,
    Json(request): Json<GrantRequest>,
) -> Result<StatusCode, ApiError> {
    let privilege = Privilege::parse(&request.privilege)?;
    let securable = request.securable.parse()?;
    authorize_grant(&state, &ctx, &securable, privilege).await?;
    access(&state).revoke(&request.role, privilege, &securable).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// List the grants of a role, or a principal's effective grants
#[utoipa::path(get, path = "/management/v1/grants", tag = "Access control", operation_id = "listGrants",
    params(ListGrantsQuery),
    responses(
        (status = 200, description = "The grants", body = ListGrantsResponse),
        (status = 400, description = "Neither role nor principal given", body = IcebergErrorResponse),
        (status = 404, description = "No such role or principal", body = IcebergErrorResponse),
    ))]
pub async fn list_grants(
    State(state): State<AppState>,
    Context(ctx): Context,
    Query(query): Query<ListGrantsQuery>,
) -> Result<Json<ListGrantsResponse>, ApiError> {
    // Decided on the one parameter that is then read: a role's grants need server admin, a
    // principal's its own name or server admin.
    let own = |principal: &str| matches!(ctx.caller(), Caller::Principal { name, .. } if name == principal);
    let admin = || ctx.require(&Target::Server, Privilege::Admin, || CatalogError::Forbidden(String::new()));
    let need_admin = |what: &str| CatalogError::Forbidden(format!("listing {what} requires admin on the server"));
    let grants = match (&query.role, &query.principal) {
        (Some(_), Some(_)) => return Err(ApiError::bad_request("pass ?role=NAME or ?principal=NAME, not both")),
        (Some(role), None) => {
            admin().await.map_err(|_| need_admin("a role's grants"))?;
            access(&state).list_grants(Some(role), None, None).await?
        }
        (None, Some(principal)) => {
            if !own(principal) {
                admin().await.map_err(|_| need_admin("another principal's grants"))?;
            }
            let record = access(&state).principal_by_name(principal).await?.ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "NotFoundException",
                    format!("Principal does not exist: {principal}"),
                )
            })?;
            access(&state).list_grants(None, Some(&record.id), Some(now_ms())).await?
        }
        (None, None) => return Err(ApiError::bad_request("pass ?role=NAME or ?principal=NAME")),
    };
    Ok(Json(ListGrantsResponse { grants: grants.into_iter().map(Into::into).collect() }))
}

/// Who can do what here: every unexpired grant that applies to a securable, including those
/// inherited from its containers (the basis of access reviews)
#[utoipa::path(get, path = "/management/v1/grants/on", tag = "Access control", operation_id = "grantsOnSecurable",
    params(GrantsOnQuery),
    responses(
        (status = 200, description = "The grants that apply", body = ListGrantsResponse),
        (status = 400, description = "Invalid securable", body = IcebergErrorResponse),
        (status = 404, description = "No such securable", body = IcebergErrorResponse),
    ))]
pub async fn grants_on(
    State(state): State<AppState>,
    Context(ctx): Context,
    Query(query): Query<GrantsOnQuery>,
) -> Result<Json<ListGrantsResponse>, ApiError> {
    let securable = Securable {
        kind: query.kind,
        warehouse: query.warehouse,
        namespace: query.namespace.map(|n| n.split('\u{1f}').map(str::to_owned).collect()),
        name: query.name,
    }
    .parse()?;
    // Who can do what on a securable is for those who manage its grants.
    let target = match securable_target(&state, &securable).await {
        Err(_) if securable.kind != SecurableType::Server => return Err(missing(&securable).into()),
        other => other?,
    };
    ctx.require(&target, Privilege::ManageGrants, || missing(&securable)).await?;
    let grants = access(&state).grants_on(&securable, now_ms()).await?;
    Ok(Json(ListGrantsResponse { grants: grants.into_iter().map(Into::into).collect() }))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The caller's principal, roles and server-level privileges
#[utoipa::path(get, path = "/management/v1/whoami", tag = "Access control", operation_id = "whoami",
    responses((status = 200, description = "Who is calling", body = WhoAmIResponse)))]
pub async fn whoami(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<WhoAmIResponse>, ApiError> {
    let Some(Extension(Caller::Principal { id, name })) = caller else {
        return Ok(Json(WhoAmIResponse {
            principal: None,
            roles: Vec::new(),
            server_privileges: Privilege::ALL.iter().map(|p| p.as_str().to_owned()).collect(),
            authentication: "none".into(),
        }));
    };
    let roles = access(&state).principal_roles(&id).await?;
    let holdings = access(&state).holdings(&id, &icegate_catalog::access::Target::Server, now_ms()).await?;
    let mut server_privileges: Vec<String> = holdings.direct.iter().map(|p| p.as_str().to_owned()).collect();
    server_privileges.sort();
    Ok(Json(WhoAmIResponse { principal: Some(name), roles, server_privileges, authentication: "required".into() }))
}
