//! Management API: principals, roles, memberships, grants and `whoami`.

use axum::extract::State;
use axum::http::StatusCode;
use icegate_catalog::NamespaceIdent;
use icegate_catalog::access::{GrantRecord, Privilege, SecurableRef, SecurableType};
use icegate_catalog::access_admin::Credentials;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Path, Query};

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PrincipalResponse {
    /// The id authorization log lines and tokens (`sub`) name the principal by.
    pub id: String,
    pub name: String,
    /// What an external identity provider calls the principal (its `preferred_username`),
    /// which its user may be able to change: the name is what grants and memberships use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    pub client_id: Option<String>,
    /// 1 for its first client secret, one more at every rotation; tokens issued under an
    /// earlier one are refused.
    pub secret_version: i64,
    /// Until when (ms since the Unix epoch) the secret replaced at the last rotation still
    /// works; absent when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at_ms: Option<i64>,
    /// The roles it holds.
    pub roles: Vec<String>,
    pub created_at_ms: i64,
}

/// Optional body of a rotation.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RotateSecretRequest {
    /// How long the replaced secret, and the tokens issued under it, keep working (at most
    /// 604800, a week); absent or 0: they stop at once.
    pub grace_period_seconds: Option<u64>,
}

/// Returned once, when a principal is created or its secret rotated: the secret is not stored.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct PrincipalCredentials {
    pub name: String,
    pub client_id: String,
    pub client_secret: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePrincipalRequest {
    pub name: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
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

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRoleRequest {
    pub name: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ListRolesResponse {
    pub roles: Vec<RoleResponse>,
}

/// A namespace in a request: its levels as an array (`["sales", "emea"]`, the form answers
/// use), or one string whose levels are joined by the unit separator (`%1F`, as in Iceberg REST
/// paths) or, when no level contains one, by `.` (`"sales.emea"`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum NamespaceParam {
    Levels(Vec<String>),
    Joined(String),
}

impl NamespaceParam {
    pub(crate) fn levels(self) -> Vec<String> {
        match self {
            Self::Levels(levels) => levels,
            Self::Joined(joined) => split_namespace(&joined),
        }
    }
}

/// A namespace given as one string: levels joined by the unit separator (one trailing separator
/// is dropped, so that `a.b%1F` names the one level `a.b`), else by `.`.
pub fn split_namespace(joined: &str) -> Vec<String> {
    const US: char = icegate_catalog::ident::NAMESPACE_SEPARATOR;
    if joined.contains(US) {
        joined.strip_suffix(US).unwrap_or(joined).split(US).map(str::to_owned).collect()
    } else {
        joined.split('.').map(str::to_owned).collect()
    }
}

/// A securable: `server`; `warehouse` (+ `warehouse`); `namespace` (+ `namespace`);
/// `table` or `view` (+ `name`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Securable {
    #[serde(rename = "type")]
    pub kind: String,
    pub warehouse: Option<String>,
    /// Its levels as an array, or one string: levels joined by `%1F` (the unit separator) or `.`.
    pub namespace: Option<NamespaceParam>,
    pub name: Option<String>,
}

impl Securable {
    pub(crate) fn parse(&self) -> Result<SecurableRef, ApiError> {
        let namespace = self.namespace.clone().map(NamespaceParam::levels).map(NamespaceIdent::from_levels).transpose();
        let namespace = namespace.map_err(|e| ApiError::bad_request(format!("securable.namespace: {e}")))?;
        let securable = SecurableRef {
            kind: SecurableType::parse(&self.kind)
                .map_err(|e| ApiError::bad_request(format!("securable.type: {e}")))?,
            warehouse: self.warehouse.clone(),
            namespace,
            name: self.name.clone(),
        };
        securable.validate().map_err(|e| ApiError::bad_request(format!("securable: {e}")))?;
        Ok(securable)
    }

    pub(crate) fn from(securable: &SecurableRef) -> Self {
        Self {
            kind: securable.kind.as_str().to_owned(),
            warehouse: securable.warehouse.clone(),
            namespace: securable.namespace.as_ref().map(|n| NamespaceParam::Levels(n.levels().to_vec())),
            name: securable.name.clone(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct GrantRequest {
    pub role: String,
    /// describe, read, write, create, drop, manage_grants, admin, audit (server admins grant it,
    /// on the server or a warehouse) or review (server admins grant it).
    pub privilege: String,
    pub securable: Securable,
    /// When the grant stops applying, milliseconds since the Unix epoch.
    pub expires_at_ms: Option<i64>,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
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

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ListGrantsResponse {
    pub grants: Vec<GrantResponse>,
    /// Present when more grants follow: pass it as `pageToken`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListGrantsQuery {
    /// The grants of this role.
    pub role: Option<String>,
    /// The effective grants of this principal (through its roles; unexpired only).
    pub principal: Option<String>,
    /// Only grants of this privilege.
    pub privilege: Option<String>,
    /// Only grants on securables of this type (server, warehouse, namespace, table, view).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub kind: Option<String>,
    /// Only grants in (or on) this warehouse.
    pub warehouse: Option<String>,
    /// Where the page starts: the `next-page-token` of the previous page; empty for the first.
    #[serde(rename = "pageToken")]
    #[param(rename = "pageToken")]
    pub page_token: Option<String>,
    /// The most grants a page holds (1-1000); with it or `pageToken`, the answer is paginated.
    #[serde(rename = "pageSize")]
    #[param(rename = "pageSize")]
    pub page_size: Option<usize>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GrantsOnQuery {
    /// server, warehouse, namespace, table or view.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub kind: String,
    pub warehouse: Option<String>,
    /// Levels joined by `%1F` (the unit separator) or, when no level contains one, by `.`.
    pub namespace: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct WhoAmIResponse {
    /// The principal's name; `null` when authentication is off.
    pub principal: Option<String>,
    pub roles: Vec<String>,
    /// Privileges held on the server itself.
    pub server_privileges: Vec<String>,
    pub authentication: String,
}

fn principal_response((p, roles): (icegate_catalog::access::PrincipalRecord, Vec<String>)) -> PrincipalResponse {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    PrincipalResponse {
        id: p.id.into_string(),
        name: p.name,
        display_name: p.display_name,
        client_id: p.client_id,
        secret_version: p.secret_version,
        previous_secret_expires_at_ms: p.previous_secret_until_ms.filter(|until| *until > now),
        roles,
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

/// Rotate a principal's client secret (the new secret is shown once); server admins, and the
/// principal itself. The body is optional: `{"grace-period-seconds": N}` keeps the replaced
/// secret, and tokens issued under it, working for N seconds.
#[utoipa::path(post, path = "/management/v1/principals/{name}/rotate-secret", tag = "Access control", operation_id = "rotatePrincipalSecret",
    params(("name" = String, Path, description = "Principal name")),
    request_body(content = Option<RotateSecretRequest>, description = "Optional: the replaced secret's grace period"),
    responses(
        (status = 200, description = "The new credentials, shown once", body = PrincipalCredentials),
        (status = 400, description = "Invalid grace period", body = IcebergErrorResponse),
        (status = 404, description = "No such principal", body = IcebergErrorResponse),
    ))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<PrincipalCredentials>, ApiError> {
    let request: RotateSecretRequest = crate::extract::optional_body(&body)?;
    let grace = request.grace_period_seconds.map(std::time::Duration::from_secs);
    Ok(Json(credentials(state.access.rotate_secret(&ctx, &name, grace).await?)))
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

/// List grants: every grant (server admins), narrowed by role, principal (its effective grants;
/// the principal itself may list its own), privilege, securable type or warehouse; paginated
/// with `pageToken`/`pageSize`
#[utoipa::path(get, path = "/management/v1/grants", tag = "Access control", operation_id = "listGrants",
    params(ListGrantsQuery),
    responses(
        (status = 200, description = "The grants, in a stable order", body = ListGrantsResponse),
        (status = 400, description = "An invalid parameter (named in the message)", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the server (and not the principal listed)", body = IcebergErrorResponse),
        (status = 404, description = "No such role or principal", body = IcebergErrorResponse),
    ))]
pub async fn list_grants(
    State(state): State<AppState>,
    Context(ctx): Context,
    Query(query): Query<ListGrantsQuery>,
) -> Result<Json<ListGrantsResponse>, ApiError> {
    // PostgreSQL refuses NUL in text: such a value matches nothing anyway, so it is refused here.
    for (parameter, value) in [
        ("role", &query.role),
        ("principal", &query.principal),
        ("warehouse", &query.warehouse),
        ("pageToken", &query.page_token),
    ] {
        if value.as_deref().is_some_and(|v| v.contains('\0')) {
            return Err(ApiError::bad_request(format!("{parameter}: must not contain NUL")));
        }
    }
    let privilege = query
        .privilege
        .as_deref()
        .map(Privilege::parse)
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("privilege: {e}")))?;
    let securable_type = query
        .kind
        .as_deref()
        .map(SecurableType::parse)
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("type: {e}")))?;
    let paginated = query.page_token.is_some() || query.page_size.is_some();
    let page_size = query.page_size.unwrap_or(icegate_catalog::access_admin::MAX_GRANTS_PAGE);
    if !(1..=icegate_catalog::access_admin::MAX_GRANTS_PAGE).contains(&page_size) {
        return Err(ApiError::bad_request(format!(
            "pageSize must be between 1 and {}",
            icegate_catalog::access_admin::MAX_GRANTS_PAGE
        )));
    }
    let after_id = match query.page_token.as_deref() {
        None | Some("") => None,
        Some(token) => Some(decode_page_token(token)?),
    };
    let filter = icegate_catalog::access::GrantFilter {
        role: query.role,
        privilege,
        securable_type,
        warehouse: query.warehouse,
        after_id,
        // One more than the page, to know whether another follows.
        limit: paginated.then_some(page_size + 1),
        ..Default::default()
    };
    let mut grants = state.access.list_grants(&ctx, query.principal.as_deref(), filter).await?;
    let mut next_page_token = None;
    if paginated && grants.len() > page_size {
        grants.truncate(page_size);
        next_page_token = grants.last().map(|g| encode_page_token(&g.id));
    }
    Ok(Json(ListGrantsResponse { grants: grants.into_iter().map(Into::into).collect(), next_page_token }))
}

/// A grant listing's page token: the last grant id seen, base64url.
fn encode_page_token(id: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id)
}

fn decode_page_token(token: &str) -> Result<String, ApiError> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|id| !id.contains('\0'))
        .ok_or_else(|| ApiError::bad_request("pageToken: not a page token this server handed out"))
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
        namespace: query.namespace.map(NamespaceParam::Joined),
        name: query.name,
    }
    .parse()?;
    let grants = state.access.grants_on(&ctx, &securable).await?;
    Ok(Json(ListGrantsResponse { grants: grants.into_iter().map(Into::into).collect(), next_page_token: None }))
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
