//! Management API: principals, roles, memberships, grants and `whoami`.

use axum::extract::State;
use axum::http::StatusCode;
use icegate_catalog::NamespaceIdent;
use icegate_catalog::access::{GrantRecord, Privilege, SecurableRef, SecurableType};
use icegate_catalog::management::Credentials;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Path, Query};

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PrincipalResponse {
    pub name: String,
    /// What an external identity provider calls the principal (its `preferred_username`),
    /// which its user may be able to change: the name is what grants and memberships use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    pub client_id: Option<String>,
    /// 1 for its first client secret, one more at every rotation; tokens issued under an
    /// earlier one are refused.
    pub secret_version: i64,
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

fn principal_response(p: icegate_catalog::access::PrincipalRecord) -> PrincipalResponse {
    PrincipalResponse {
        name: p.name,
        display_name: p.display_name,
        client_id: p.client_id,
        secret_version: p.secret_version,
        created_at_ms: p.created_at_ms,
    }
}

fn credentials(c: Credentials) -> PrincipalCredentials {
    PrincipalCredentials {
        name: c.principal.name,
        client_id: c.principal.client_id.unwrap_or_default(),
        client_secret: c.client_secret,
    }
}

fn role_response((role, principals): (icegate_catalog::access::RoleRecord, Vec<String>)) -> RoleResponse {
    RoleResponse { name: role.name, principals, created_at_ms: role.created_at_ms }
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
    Context(ctx): Context,
    Json(request): Json<CreatePrincipalRequest>,
) -> Result<(StatusCode, Json<PrincipalCredentials>), ApiError> {
    let created = state.access.create_principal(&ctx, &request.name).await?;
    Ok((StatusCode::CREATED, Json(credentials(created))))
}

/// List principals
#[utoipa::path(get, path = "/management/v1/principals", tag = "Access control", operation_id = "listPrincipals",
    responses((status = 200, description = "Every principal", body = ListPrincipalsResponse)))]
pub async fn list_principals(
    State(state): State<AppState>,
    Context(ctx): Context,
) -> Result<Json<ListPrincipalsResponse>, ApiError> {
    let principals = state.access.list_principals(&ctx).await?;
    Ok(Json(ListPrincipalsResponse { principals: principals.into_iter().map(principal_response).collect() }))
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
    Context(ctx): Context,
    Path(name): Path<String>,
) -> Result<Json<PrincipalResponse>, ApiError> {
    Ok(Json(principal_response(state.access.get_principal(&ctx, &name).await?)))
}

/// Delete a principal
#[utoipa::path(delete, path = "/management/v1/principals/{name}", tag = "Access control", operation_id = "deletePrincipal",
    params(("name" = String, Path, description = "Principal name")),
    responses(
        (status = 204, description = "Deleted; its tokens stop working at once"),
        (status = 404, description = "No such principal", body = IcebergErrorResponse),
    ))]
pub async fn delete_principal(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.access.delete_principal(&ctx, &name).await?;
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
    Context(ctx): Context,
    Path(name): Path<String>,
) -> Result<Json<PrincipalCredentials>, ApiError> {
    Ok(Json(credentials(state.access.rotate_secret(&ctx, &name).await?)))
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
    Context(ctx): Context,
    Json(request): Json<CreateRoleRequest>,
) -> Result<(StatusCode, Json<RoleResponse>), ApiError> {
    Ok((StatusCode::CREATED, Json(role_response(state.access.create_role(&ctx, &request.name).await?))))
}

/// List roles
#[utoipa::path(get, path = "/management/v1/roles", tag = "Access control", operation_id = "listRoles",
    responses((status = 200, description = "Every role with its members", body = ListRolesResponse)))]
pub async fn list_roles(
    State(state): State<AppState>,
    Context(ctx): Context,
) -> Result<Json<ListRolesResponse>, ApiError> {
    let roles = state.access.list_roles(&ctx).await?;
    Ok(Json(ListRolesResponse { roles: roles.into_iter().map(role_response).collect() }))
}

/// Get a role
#[utoipa::path(get, path = "/management/v1/roles/{role}", tag = "Access control", operation_id = "getRole",
    params(("role" = String, Path, description = "Role name")),
    responses(
        (status = 200, description = "The role", body = RoleResponse),
        (status = 404, description = "No such role", body = IcebergErrorResponse),
    ))]
pub async fn get_role(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(role): Path<String>,
) -> Result<Json<RoleResponse>, ApiError> {
    Ok(Json(role_response(state.access.get_role(&ctx, &role).await?)))
}

/// Delete a role (and its grants)
#[utoipa::path(delete, path = "/management/v1/roles/{role}", tag = "Access control", operation_id = "deleteRole",
    params(("role" = String, Path, description = "Role name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such role", body = IcebergErrorResponse),
    ))]
pub async fn delete_role(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(role): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.access.delete_role(&ctx, &role).await?;
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
    Context(ctx): Context,
    Path((role, principal)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state.access.add_member(&ctx, &role, &principal).await?;
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
    Context(ctx): Context,
    Path((role, principal)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state.access.remove_member(&ctx, &role, &principal).await?;
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
    let record = state.access.grant(&ctx, &request.role, privilege, &securable, request.expires_at_ms).await?;
    Ok((StatusCode::CREATED, Json(record.into())))
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
    state.access.revoke(&ctx, &request.role, privilege, &securable).await?;
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
    let grants = state.access.list_grants(&ctx, query.role.as_deref(), query.principal.as_deref()).await?;
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
    let grants = state.access.grants_on(&ctx, &securable).await?;
    Ok(Json(ListGrantsResponse { grants: grants.into_iter().map(Into::into).collect() }))
}

/// The caller's principal, roles and server-level privileges
#[utoipa::path(get, path = "/management/v1/whoami", tag = "Access control", operation_id = "whoami",
    responses((status = 200, description = "Who is calling", body = WhoAmIResponse)))]
pub async fn whoami(State(state): State<AppState>, Context(ctx): Context) -> Result<Json<WhoAmIResponse>, ApiError> {
    let who = state.access.whoami(&ctx).await?;
    let authentication = if who.principal.is_some() { "required" } else { "none" };
    Ok(Json(WhoAmIResponse {
        principal: who.principal,
        roles: who.roles,
        server_privileges: who.server_privileges.iter().map(|p| p.as_str().to_owned()).collect(),
        authentication: authentication.into(),
    }))
}
