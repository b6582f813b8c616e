//! What a securable names, and the memberships an issuer's claims set.

use icegate_catalog::access::{AccessStore, PrincipalRecord, SecurableRef, SecurableType};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::{CatalogError, Result};
use sqlx::Row;

use super::not_found;
use crate::{SqlStore, db_error};

/// The ids a securable names, resolved inside one statement's view of the catalog.
pub(crate) struct Resolved {
    pub(crate) warehouse_id: Option<String>,
    pub(crate) namespace_id: Option<String>,
    pub(crate) tabular_id: Option<String>,
}

impl SqlStore {
    /// The ids `securable` names; for a table or view, `object` (its id, decided about) when
    /// given, checked to be one of that warehouse and kind, instead of its name.
    pub(crate) async fn resolve(&self, securable: &SecurableRef, object: Option<&str>) -> Result<Resolved> {
        securable.validate()?;
        let mut resolved = Resolved { warehouse_id: None, namespace_id: None, tabular_id: None };
        let Some(warehouse) = &securable.warehouse else { return Ok(resolved) };
        let row = sqlx::query("SELECT id FROM warehouses WHERE name = $1")
            .bind(warehouse)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or_else(|| CatalogError::no_such_warehouse(warehouse))?;
        let warehouse_id: String = row.try_get("id").map_err(db_error)?;
        if let Some(namespace) = &securable.namespace {
            let namespace_id = crate::locations::id_of(&self.pool, &warehouse_id, namespace)
                .await?
                .ok_or_else(|| CatalogError::no_such_namespace(namespace))?;
            if let Some(name) = &securable.name {
                let kind = if securable.kind == SecurableType::View { "view" } else { "table" };
                let query = match object {
                    Some(id) => sqlx::query(
                        "SELECT t.id FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
                         WHERE t.id = $1 AND n.warehouse_id = $2 AND t.kind = $3",
                    )
                    .bind(id)
                    .bind(&warehouse_id),
                    None => sqlx::query("SELECT id FROM tabulars WHERE namespace_id = $1 AND name = $2 AND kind = $3")
                        .bind(namespace_id.as_str())
                        .bind(name),
                };
                let row = query.bind(kind).fetch_optional(&self.pool).await.map_err(db_error)?.ok_or_else(|| {
                    if kind == "view" {
                        CatalogError::no_such_view(format!("{namespace}.{name}"))
                    } else {
                        CatalogError::no_such_table(format!("{namespace}.{name}"))
                    }
                })?;
                // A grant on a table or view names it by id alone: it follows the object
                // through renames, also into another namespace.
                resolved.tabular_id = Some(row.try_get("id").map_err(db_error)?);
            } else {
                resolved.namespace_id = Some(namespace_id.into_string());
            }
        }
        resolved.warehouse_id = Some(warehouse_id);
        Ok(resolved)
    }

    pub(super) async fn role_id(&self, role: &str) -> Result<String> {
        Ok(self.role_by_name(role).await?.ok_or_else(|| not_found("Role", role))?.id)
    }

    pub(super) async fn principal_id(&self, principal: &str) -> Result<String> {
        Ok(self.principal_by_name(principal).await?.ok_or_else(|| not_found("Principal", principal))?.id.into_string())
    }
}

impl SqlStore {
    /// Sets the claim memberships of `principal` to the existing roles named in `claimed`, unless
    /// claims of a token issued later than `issued_at` set them already. A
    /// membership from a claim confers a role's grants on the server itself only when the role
    /// is one of the issuer's `admin_roles` (source `claim-admin`): otherwise anyone who can put
    /// `admin` in a group claim at the identity provider would be the catalog's administrator.
    pub(super) async fn sync_claims(
        &self,
        write: &WriteContext,
        principal: PrincipalRecord,
        (claimed, issued_at): (&[String], i64),
        admin_roles: &[String],
    ) -> Result<PrincipalRecord> {
        let mut tx = self.begin_write().await?;
        // Claims of a token issued before the ones that last set the memberships do not set
        // them back (a replica that sees an old token after a newer one was seen elsewhere).
        let newer = sqlx::query(
            "UPDATE principals SET claims_issued_at = $1 WHERE id = $2 \
             AND (claims_issued_at IS NULL OR claims_issued_at <= $1)",
        )
        .bind(issued_at)
        .bind(principal.id.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if newer.rows_affected() == 0 {
            self.commit_write(tx, write).await?;
            return Ok(principal);
        }
        sqlx::query("DELETE FROM role_members WHERE principal_id = $1 AND source IN ('claim', 'claim-admin')")
            .bind(principal.id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        for role in claimed {
            // Roles that do not exist are ignored: claims never create roles.
            let source = if admin_roles.contains(role) { "claim-admin" } else { "claim" };
            sqlx::query(
                "INSERT INTO role_members (role_id, principal_id, source) SELECT id, $1, $3 FROM roles WHERE name = $2 \
                 ON CONFLICT DO NOTHING",
            )
            .bind(principal.id.as_str())
            .bind(role)
            .bind(source)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        self.commit_write(tx, write).await?;
        Ok(principal)
    }
}
