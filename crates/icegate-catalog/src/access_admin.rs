//! The access-management service: principals, roles, memberships and grants, and `whoami`.
//!
//! Principals, roles and memberships are for server admins. A grant or revoke needs
//! `manage_grants` on the securable and the privilege itself there (a grantor hands on only
//! what it holds, for no longer than it holds it). Every change drops cached decisions at once.

use std::sync::Arc;

use crate::access::{
    AccessStore, Caller, GrantFilter, GrantRecord, PrincipalRecord, Privilege, RoleRecord, SecurableRef, SecurableType,
    Target,
};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::validate_name;
use crate::service::Catalog;
use crate::store::TabularKind;
use crate::tokens::{hash_secret, new_client_id, random_secret};

/// A principal's new credentials, shown once.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub principal: PrincipalRecord,
    pub client_secret: String,
}

/// What `whoami` says about the caller.
#[derive(Debug, Clone)]
pub struct WhoAmI {
    /// `None` when authentication is off.
    pub principal: Option<String>,
    pub roles: Vec<String>,
    pub server_privileges: Vec<Privilege>,
}

/// The longest grace period a rotated secret may have.
pub const MAX_SECRET_GRACE: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// The largest page of a grant listing.
pub const MAX_GRANTS_PAGE: usize = 1000;

#[derive(Clone)]
pub struct AccessAdmin {
    pub(crate) access: Arc<dyn AccessStore>,
    pub(crate) catalog: Catalog,
}

fn no_such(what: &str, name: &str) -> CatalogError {
    CatalogError::NotFound {
        kind: crate::error::ObjectKind::AccessControl,
        message: format!("{what} does not exist: {name}"),
    }
}

/// What a securable the caller may not see is answered with.
pub(crate) fn missing(securable: &SecurableRef) -> CatalogError {
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

impl AccessAdmin {
    pub fn new(access: Arc<dyn AccessStore>, catalog: Catalog) -> Self {
        Self { access, catalog }
    }

    async fn require_server_admin(&self, ctx: &RequestContext) -> Result<()> {
        ctx.require(&Target::Server, Privilege::Admin, || {
            CatalogError::Forbidden("requires admin on the server".into())
        })
        .await
        .map(|_| ())
    }

    pub async fn create_principal(&self, ctx: &RequestContext, name: &str) -> Result<Credentials> {
        self.require_server_admin(ctx).await?;
        validate_name("principal", name)?;
        // The audit trail names callers that are no principal so: no principal may be named so.
        if matches!(name, "anonymous" | "unauthenticated") || name.starts_with("system:") {
            return Err(CatalogError::bad_request(format!(
                "{name:?} is how the audit trail names a caller that is no principal; choose another name"
            )));
        }
        let (client_id, client_secret) = (new_client_id(), random_secret());
        let principal = self
            .access
            .create_principal(&ctx.write().unkeyed(), name, &client_id, &hash_secret(&client_secret)?)
            .await?;
        Ok(Credentials { principal, client_secret })
    }

    /// Every principal with its roles (two queries, whatever their number).
    pub async fn list_principals(&self, ctx: &RequestContext) -> Result<Vec<(PrincipalRecord, Vec<String>)>> {
        self.require_server_admin(ctx).await?;
        let principals = self.access.list_principals().await?;
        let mut roles: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
        for (role, principal) in self.access.memberships().await? {
            roles.entry(principal).or_default().push(role);
        }
        Ok(principals
            .into_iter()
            .map(|p| {
                let held = roles.remove(&p.name).unwrap_or_default();
                (p, held)
            })
            .collect())
    }

    pub async fn get_principal(&self, ctx: &RequestContext, name: &str) -> Result<(PrincipalRecord, Vec<String>)> {
        self.require_server_admin(ctx).await?;
        let principal = self.access.principal_by_name(name).await?.ok_or_else(|| no_such("Principal", name))?;
        let roles = self.access.principal_roles(&principal.id).await?;
        Ok((principal, roles))
    }

    pub async fn delete_principal(&self, ctx: &RequestContext, name: &str) -> Result<()> {
        self.require_server_admin(ctx).await?;
        self.access.delete_principal(&ctx.write().unkeyed(), name).await?;
        ctx.access_changed();
        Ok(())
    }

    /// A new secret for `name` (server admins, and the principal itself). With `grace`, the
    /// replaced secret, and the tokens issued under it, keep working that long (at most
    /// [`MAX_SECRET_GRACE`]); without, they end at once. Any earlier secret ends now either way.
    pub async fn rotate_secret(
        &self,
        ctx: &RequestContext,
        name: &str,
        grace: Option<std::time::Duration>,
    ) -> Result<Credentials> {
        // Its own secret: by id, not name (a token of a deleted principal of that name, still
        // accepted by a replica for a moment, must not reach its successor), and only with a
        // token of the current secret — else a leaked secret, during the grace period its owner
        // gave it, could replace the new one and keep itself alive.
        let own = match ctx.caller() {
            Caller::Principal { id, name: caller, .. } if caller == name => {
                self.access.principal_by_name(name).await?.filter(|p| &p.id == id)
            }
            _ => None,
        };
        let principal_id = match own {
            // Read now, not from a cache: a replica that has not seen a rotation yet would take
            // the replaced secret's token for a current one.
            Some(principal)
                if ctx.secret_version().is_some_and(|token| token != principal.secret_version)
                    && !ctx.is_server_admin().await? =>
            {
                return Err(CatalogError::Forbidden(
                    "this token was issued under the secret that was replaced; rotate with the current secret".into(),
                ));
            }
            Some(principal) => principal.id,
            None => {
                self.require_server_admin(ctx).await?;
                self.access.principal_by_name(name).await?.ok_or_else(|| no_such("Principal", name))?.id
            }
        };
        if let Some(grace) = grace
            && grace > MAX_SECRET_GRACE
        {
            return Err(CatalogError::bad_request(format!(
                "grace-period-seconds {} is longer than the longest grace period, {} seconds",
                grace.as_secs(),
                MAX_SECRET_GRACE.as_secs()
            )));
        }
        let until =
            grace.filter(|g| !g.is_zero()).map(|g| self.catalog.clock().now_ms().saturating_add(g.as_millis() as i64));
        let client_secret = random_secret();
        let principal = self
            .access
            .set_principal_secret(&ctx.write().unkeyed(), &principal_id, &hash_secret(&client_secret)?, until)
            .await?;
        ctx.access_changed();
        Ok(Credentials { principal, client_secret })
    }

    /// A role with its members' names.
    async fn with_members(&self, role: RoleRecord) -> Result<(RoleRecord, Vec<String>)> {
        let members = self.access.role_members(&role.name).await?;
        Ok((role, members))
    }

    pub async fn create_role(&self, ctx: &RequestContext, name: &str) -> Result<(RoleRecord, Vec<String>)> {
        self.require_server_admin(ctx).await?;
        validate_name("role", name)?;
        let role = self.access.create_role(&ctx.write().unkeyed(), name).await?;
        ctx.access_changed();
        self.with_members(role).await
    }

    /// Every role with its members (two queries, whatever their number).
    pub async fn list_roles(&self, ctx: &RequestContext) -> Result<Vec<(RoleRecord, Vec<String>)>> {
        self.require_server_admin(ctx).await?;
        let mut members: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
        for (role, principal) in self.access.memberships().await? {
            members.entry(role).or_default().push(principal);
        }
        Ok(self
            .access
            .list_roles()
            .await?
            .into_iter()
            .map(|role| {
                let held = members.remove(&role.name).unwrap_or_default();
                (role, held)
            })
            .collect())
    }

    pub async fn get_role(&self, ctx: &RequestContext, name: &str) -> Result<(RoleRecord, Vec<String>)> {
        self.require_server_admin(ctx).await?;
        let role = self.access.role_by_name(name).await?.ok_or_else(|| no_such("Role", name))?;
        self.with_members(role).await
    }

    pub async fn delete_role(&self, ctx: &RequestContext, name: &str) -> Result<()> {
        self.require_server_admin(ctx).await?;
        self.access.delete_role(&ctx.write().unkeyed(), name).await?;
        ctx.access_changed();
        Ok(())
    }

    pub async fn add_member(&self, ctx: &RequestContext, role: &str, principal: &str) -> Result<()> {
        self.require_server_admin(ctx).await?;
        self.access.add_role_member(&ctx.write().unkeyed(), role, principal).await?;
        ctx.access_changed();
        Ok(())
    }

    pub async fn remove_member(&self, ctx: &RequestContext, role: &str, principal: &str) -> Result<()> {
        self.require_server_admin(ctx).await?;
        self.access.remove_role_member(&ctx.write().unkeyed(), role, principal).await?;
        ctx.access_changed();
        Ok(())
    }

    /// The target a securable names, for deciding on it (a warehouse that does not exist is
    /// answered as one the caller may not see).
    pub(crate) async fn securable_target(&self, securable: &SecurableRef) -> Result<Target> {
        let Some(warehouse) = &securable.warehouse else { return Ok(Target::Server) };
        let warehouse_id = self.catalog.warehouse_id_of(warehouse).await?.ok_or_else(|| missing(securable))?;
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

    /// `manage_grants` on the securable (decided about the table or view its name means: its
    /// id is returned, and the grant is then made on that id, not on the name again).
    async fn authorize_managing(
        &self,
        ctx: &RequestContext,
        securable: &SecurableRef,
    ) -> Result<(crate::context::Allowed, Option<crate::ids::TabularId>)> {
        let target = self.securable_target(securable).await?;
        let allowed = ctx.require(&target, Privilege::ManageGrants, || missing(securable)).await?;
        let Target::Tabular { warehouse_id, namespace, name, kind } = &target else { return Ok((allowed, None)) };
        let mut decided = [(Privilege::ManageGrants, allowed)];
        let head = self.catalog.confirmed_head(ctx, warehouse_id, (namespace, name), *kind, &mut decided).await?;
        let [(_, allowed)] = decided;
        Ok((allowed, Some(head.id)))
    }

    /// `manage_grants` on the securable and `privilege` itself there. Returns when the
    /// grantor's own privileges there expire (`None`: never, or unrestricted), and the id of the
    /// table or view decided about. `audit` (on the server or a warehouse) and `review` are
    /// granted and revoked by server admins only: who reads the trail or reviews access is not
    /// decided by those it watches.
    async fn authorize_grant(
        &self,
        ctx: &RequestContext,
        securable: &SecurableRef,
        privilege: Privilege,
    ) -> Result<(Option<i64>, Option<crate::ids::TabularId>)> {
        if matches!(privilege, Privilege::Audit | Privilege::Review) {
            if privilege == Privilege::Audit
                && !matches!(
                    securable.kind,
                    crate::access::SecurableType::Server | crate::access::SecurableType::Warehouse
                )
            {
                return Err(CatalogError::bad_request("audit is granted on the server or on a warehouse"));
            }
            let target = self.securable_target(securable).await?;
            let allowed = ctx.require(&target, Privilege::Describe, || missing(securable)).await?;
            if !ctx.is_server_admin().await? {
                return Err(CatalogError::Forbidden(format!(
                    "granting or revoking {privilege} requires admin on the server"
                )));
            }
            let object = match &target {
                Target::Tabular { warehouse_id, namespace, name, kind } => {
                    let mut decided = [(Privilege::Describe, allowed)];
                    Some(
                        self.catalog
                            .confirmed_head(ctx, warehouse_id, (namespace, name), *kind, &mut decided)
                            .await?
                            .id,
                    )
                }
                _ => None,
            };
            return Ok((None, object));
        }
        let (allowed, object) = self.authorize_managing(ctx, securable).await?;
        let held = allowed.holdings();
        if let Some(held) = held
            && !held.has(privilege)
        {
            return Err(CatalogError::Forbidden(format!(
                "a grantor may grant or revoke only privileges it holds on the securable, and you do not hold {privilege} there"
            )));
        }
        Ok((held.and_then(|h| h.expires_at_ms), object))
    }

    /// Grants `privilege` on `securable` to `role`, until `expires_at_ms` if given (and never
    /// past the grantor's own expiry there).
    pub async fn grant(
        &self,
        ctx: &RequestContext,
        role: &str,
        privilege: Privilege,
        securable: &SecurableRef,
        expires_at_ms: Option<i64>,
    ) -> Result<GrantRecord> {
        securable.validate()?;
        if let Some(expires) = expires_at_ms
            && expires <= self.catalog.clock().now_ms()
        {
            // A grant that can never apply is a mistake (seconds given for milliseconds, say).
            return Err(CatalogError::bad_request(format!(
                "expires-at-ms {expires} is not in the future; it counts milliseconds since the Unix epoch"
            )));
        }
        let (limit, object) = self.authorize_grant(ctx, securable, privilege).await?;
        let expires_at_ms = match limit {
            Some(limit) => Some(expires_at_ms.map_or(limit, |asked| asked.min(limit))),
            None => expires_at_ms,
        };
        let record = self
            .access
            .grant(&ctx.write().unkeyed(), role, privilege, (securable, object.as_deref()), expires_at_ms)
            .await?;
        ctx.access_changed();
        Ok(record)
    }

    pub async fn revoke(
        &self,
        ctx: &RequestContext,
        role: &str,
        privilege: Privilege,
        securable: &SecurableRef,
    ) -> Result<()> {
        securable.validate()?;
        let (_, object) = self.authorize_grant(ctx, securable, privilege).await?;
        self.access.revoke(&ctx.write().unkeyed(), role, privilege, (securable, object.as_deref())).await?;
        ctx.access_changed();
        Ok(())
    }

    /// Grants, as `filter` selects them: every grant (server admins), or a principal's
    /// effective grants (server admins, and the principal itself), decided on the parameters
    /// that are then read. `principal` narrows to the grants of its roles, unexpired only.
    pub async fn list_grants(
        &self,
        ctx: &RequestContext,
        principal: Option<&str>,
        mut filter: GrantFilter,
    ) -> Result<Vec<GrantRecord>> {
        // Its own grants: by id, as for rotations.
        let own = match (principal, ctx.caller()) {
            (Some(p), Caller::Principal { id, name, .. }) if name == p => {
                self.access.principal_by_name(p).await?.filter(|record| &record.id == id)
            }
            _ => None,
        };
        // Listing its own grants decides nothing; anything else needs admin on the server.
        let needs_admin = own.is_none();
        if needs_admin && !ctx.is_server_admin().await? {
            return Err(CatalogError::Forbidden(
                if principal.is_some() {
                    "listing another principal's grants requires admin on the server"
                } else {
                    "listing grants requires admin on the server (a principal may list its own with ?principal=)"
                }
                .into(),
            ));
        }
        if let Some(principal) = principal {
            let record = match own {
                Some(record) => record,
                None => {
                    self.access.principal_by_name(principal).await?.ok_or_else(|| no_such("Principal", principal))?
                }
            };
            filter.principal_id = Some(record.id);
            filter.unexpired_at_ms = Some(self.catalog.clock().now_ms());
        }
        // Only admins learn whether a role exists; for a principal listing its own grants the
        // role is a filter like the others (no match: nothing listed).
        if needs_admin
            && let Some(role) = &filter.role
            && self.access.role_by_name(role).await?.is_none()
        {
            return Err(no_such("Role", role));
        }
        self.access.list_grants(&filter).await
    }

    /// Who can do what on a securable: for those who manage its grants.
    pub async fn grants_on(&self, ctx: &RequestContext, securable: &SecurableRef) -> Result<Vec<GrantRecord>> {
        securable.validate()?;
        let (_, object) = self.authorize_managing(ctx, securable).await?;
        self.access.grants_on((securable, object.as_deref()), self.catalog.clock().now_ms()).await
    }

    /// The caller, its roles and what it holds on the server (any authenticated caller).
    pub async fn whoami(&self, ctx: &RequestContext) -> Result<WhoAmI> {
        let Caller::Principal { id, name, .. } = ctx.caller() else {
            return Ok(WhoAmI { principal: None, roles: Vec::new(), server_privileges: Privilege::ALL.to_vec() });
        };
        let roles = self.access.principal_roles(id).await?;
        let holdings = self.access.holdings(id, &Target::Server, self.catalog.clock().now_ms()).await?;
        let mut server_privileges: Vec<Privilege> = holdings.direct.into_iter().collect();
        server_privileges.sort();
        Ok(WhoAmI { principal: Some(name.clone()), roles, server_privileges })
    }
}
