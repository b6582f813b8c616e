//! Principals, roles, memberships, grants and server settings; the authorization query.

use async_trait::async_trait;
use icegate_catalog::access::{
    AccessStore, GrantFilter, GrantRecord, Holdings, PrincipalRecord, Privilege, RoleRecord, SecretState, SecurableRef,
    SecurableType, Target,
};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::ident::NAMESPACE_SEPARATOR;
use icegate_catalog::ids::{PrincipalId, TabularId};
use icegate_catalog::store::TabularKind;
use icegate_catalog::{CatalogError, NamespaceIdent, Result};
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, FromRow, Row};

use crate::{SqlStore, db_error, taken_or_failed};

mod guard;
mod resolve;
mod reviews;
pub(crate) mod visible;

use guard::SERVER_ADMINS;

/// The encoded names of `namespace` and of each namespace above it (`a`, `a US b`, ...).
pub(crate) fn ancestors_of(namespace: &NamespaceIdent) -> Vec<String> {
    let levels = namespace.levels();
    (1..=levels.len()).map(|n| levels[..n].join(&NAMESPACE_SEPARATOR.to_string())).collect()
}

/// The byte range of names strictly below namespace `encoded`: `[encoded + US, encoded + ' ')`.
pub(crate) fn below_range(encoded: &str) -> (String, String) {
    (format!("{encoded}{NAMESPACE_SEPARATOR}"), format!("{encoded}\u{20}"))
}

/// A `principals` row (without the columns a record does not carry).
#[derive(sqlx::FromRow)]
struct PrincipalRow {
    id: String,
    name: String,
    client_id: Option<String>,
    secret_hash: Option<String>,
    secret_version: i64,
    display_name: Option<String>,
    created_at: i64,
    previous_secret_hash: Option<String>,
    previous_secret_until: Option<i64>,
}

/// The columns [`principal_from`] reads.
const PRINCIPAL_COLUMNS: &str = "id, name, client_id, secret_hash, secret_version, display_name, created_at, \
     previous_secret_hash, previous_secret_until";

fn principal_from(row: &AnyRow) -> Result<PrincipalRecord> {
    let row = PrincipalRow::from_row(row).map_err(db_error)?;
    Ok(PrincipalRecord {
        id: PrincipalId::new(row.id),
        name: row.name,
        client_id: row.client_id,
        secret_hash: row.secret_hash,
        secret_version: row.secret_version,
        display_name: row.display_name,
        created_at_ms: row.created_at,
        previous_secret_hash: row.previous_secret_hash,
        previous_secret_until_ms: row.previous_secret_until,
    })
}

#[derive(sqlx::FromRow)]
struct RoleRow {
    id: String,
    name: String,
    created_at: i64,
}

fn role_from(row: &AnyRow) -> Result<RoleRecord> {
    let row = RoleRow::from_row(row).map_err(db_error)?;
    Ok(RoleRecord { id: row.id, name: row.name, created_at_ms: row.created_at })
}

fn not_found(what: &str, name: &str) -> CatalogError {
    CatalogError::NotFound {
        kind: icegate_catalog::ObjectKind::AccessControl,
        message: format!("{what} does not exist: {name}"),
    }
}

/// Grants with the current names of what they are on, for display (a table or view by the
/// namespace it is in now).
const GRANT_SELECT: &str = "SELECT g.id, r.name AS role, g.privilege, g.securable_type, w.name AS warehouse, \
     COALESCE(tn.name, n.name) AS namespace, t.name AS tabular, g.expires_at FROM grants g \
     JOIN roles r ON r.id = g.role_id \
     LEFT JOIN warehouses w ON w.id = g.warehouse_id LEFT JOIN namespaces n ON n.id = g.namespace_id \
     LEFT JOIN tabulars t ON t.id = g.tabular_id LEFT JOIN namespaces tn ON tn.id = t.namespace_id";

/// A grant as [`GRANT_SELECT`] reads it (its securable: [`securable_of`]).
#[derive(sqlx::FromRow)]
struct GrantRow {
    id: String,
    role: String,
    privilege: String,
    expires_at: Option<i64>,
}

/// The securable a row names by its current names: columns `securable_type`, `warehouse`,
/// `namespace` (encoded) and `tabular` (what grants, access lines and legal holds select).
pub(crate) fn securable_of(row: &AnyRow) -> Result<SecurableRef> {
    let namespace: Option<String> = row.try_get("namespace").map_err(db_error)?;
    Ok(SecurableRef {
        kind: SecurableType::parse(&row.try_get::<String, _>("securable_type").map_err(db_error)?)?,
        warehouse: row.try_get("warehouse").map_err(db_error)?,
        namespace: namespace.map(|n| NamespaceIdent::parse_encoded(&n)).transpose()?,
        name: row.try_get("tabular").map_err(db_error)?,
    })
}

fn grant_from(row: &AnyRow) -> Result<GrantRecord> {
    let securable = securable_of(row)?;
    let row = GrantRow::from_row(row).map_err(db_error)?;
    Ok(GrantRecord {
        id: row.id,
        role: row.role,
        privilege: Privilege::parse(&row.privilege)?,
        securable,
        expires_at_ms: row.expires_at,
    })
}

impl SqlStore {
    /// The principal whose `column` (a unique one: `name`, `client_id`) is `value`.
    async fn principal_where(&self, column: &'static str, value: &str) -> Result<Option<PrincipalRecord>> {
        let row = sqlx::query(AssertSqlSafe(format!("SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE {column} = $1")))
            .bind(value)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.as_ref().map(principal_from).transpose()
    }
}

#[async_trait]
impl AccessStore for SqlStore {
    async fn init_setting(&self, write: &WriteContext, key: &str, value: &str) -> Result<String> {
        let mut tx = self.begin_write().await?;
        // ON CONFLICT DO NOTHING: replicas starting together agree on the first value stored.
        sqlx::query("INSERT INTO server_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING")
            .bind(key)
            .bind(value)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let row = sqlx::query("SELECT value FROM server_settings WHERE key = $1")
            .bind(key)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        let value = row.try_get("value").map_err(db_error)?;
        self.commit_write(tx, write).await?;
        Ok(value)
    }

    async fn create_principal(
        &self,
        write: &WriteContext,
        name: &str,
        client_id: &str,
        secret_hash: &str,
    ) -> Result<PrincipalRecord> {
        let mut tx = self.begin_write().await?;
        let record = PrincipalRecord {
            id: PrincipalId::new(uuid::Uuid::now_v7().to_string()),
            name: name.to_owned(),
            client_id: Some(client_id.to_owned()),
            secret_hash: Some(secret_hash.to_owned()),
            secret_version: 1,
            display_name: None,
            created_at_ms: self.now_ms(),
            previous_secret_hash: None,
            previous_secret_until_ms: None,
        };
        let inserted = sqlx::query(
            "INSERT INTO principals (id, name, client_id, secret_hash, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(record.id.as_str())
        .bind(name)
        .bind(client_id)
        .bind(secret_hash)
        .bind(record.created_at_ms)
        .execute(&mut *tx)
        .await;
        inserted.map_err(|e| {
            taken_or_failed(e, || CatalogError::AlreadyExists(format!("Principal already exists: {name}")))
        })?;
        let write = write
            .changing(serde_json::json!({ "principal": name, "principal-id": record.id.as_str(), "created": true }));
        self.commit_write(tx, &write).await?;
        Ok(record)
    }

    async fn principal_by_name(&self, name: &str) -> Result<Option<PrincipalRecord>> {
        self.principal_where("name", name).await
    }

    async fn principal_by_client_id(&self, client_id: &str) -> Result<Option<PrincipalRecord>> {
        self.principal_where("client_id", client_id).await
    }

    async fn principal_secret_state(&self, id: &PrincipalId) -> Result<Option<SecretState>> {
        let row = sqlx::query("SELECT secret_version, previous_secret_until FROM principals WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.map(|row| {
            Ok(SecretState {
                version: row.try_get("secret_version").map_err(db_error)?,
                previous_until_ms: row.try_get("previous_secret_until").map_err(db_error)?,
            })
        })
        .transpose()
    }

    async fn list_principals(&self) -> Result<Vec<PrincipalRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!("SELECT {PRINCIPAL_COLUMNS} FROM principals ORDER BY name")))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(principal_from).collect()
    }

    async fn delete_principal(&self, write: &WriteContext, name: &str) -> Result<()> {
        let (mut tx, before) = self.begin_admin_change().await?;
        let done = sqlx::query("DELETE FROM principals WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(not_found("Principal", name));
        }
        let write = &write.changing(serde_json::json!({ "principal": name, "deleted": true }));
        self.commit_admin_change(tx, write, before, || format!("deleting principal {name}")).await
    }

    async fn set_principal_secret(
        &self,
        write: &WriteContext,
        id: &PrincipalId,
        secret_hash: &str,
        previous_until_ms: Option<i64>,
    ) -> Result<PrincipalRecord> {
        let mut tx = self.begin_write().await?;
        // One statement: the hash and its version change together, so a token is never issued
        // for the new secret under the old version (or the other way round). The replaced hash
        // is kept only for a grace period; a rotation without one ends the previous secret too.
        let done = sqlx::query(
            "UPDATE principals SET previous_secret_hash = CASE WHEN $3 IS NULL THEN NULL ELSE secret_hash END, \
             previous_secret_until = $3, secret_hash = $1, secret_version = secret_version + 1 \
             WHERE id = $2 AND client_id IS NOT NULL",
        )
        .bind(secret_hash)
        .bind(id.as_str())
        .bind(previous_until_ms)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(not_found("Principal with client credentials", id));
        }
        let row = sqlx::query(AssertSqlSafe(format!("SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE id = $1")))
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| not_found("Principal", id))?;
        let principal = principal_from(&row)?;
        self.commit_write(tx, write).await?;
        Ok(principal)
    }

    async fn rehash_principal_secret(
        &self,
        write: &WriteContext,
        id: &PrincipalId,
        old_hash: &str,
        new_hash: &str,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        // Compare-and-set on the old hash: a rotation in between wins.
        let done = sqlx::query("UPDATE principals SET secret_hash = $1 WHERE id = $2 AND secret_hash = $3")
            .bind(new_hash)
            .bind(id.as_str())
            .bind(old_hash)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let replaced = done.rows_affected() == 1;
        self.commit_write(tx, write).await?;
        Ok(replaced)
    }

    async fn create_role(&self, write: &WriteContext, name: &str) -> Result<RoleRecord> {
        let mut tx = self.begin_write().await?;
        let record =
            RoleRecord { id: uuid::Uuid::now_v7().to_string(), name: name.to_owned(), created_at_ms: self.now_ms() };
        let inserted = sqlx::query("INSERT INTO roles (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(&record.id)
            .bind(name)
            .bind(record.created_at_ms)
            .execute(&mut *tx)
            .await;
        inserted
            .map_err(|e| taken_or_failed(e, || CatalogError::AlreadyExists(format!("Role already exists: {name}"))))?;
        self.commit_write(tx, &write.changing(serde_json::json!({ "role": name, "created": true }))).await?;
        Ok(record)
    }

    async fn role_by_name(&self, name: &str) -> Result<Option<RoleRecord>> {
        let row = sqlx::query("SELECT id, name, created_at FROM roles WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.as_ref().map(role_from).transpose()
    }

    async fn list_roles(&self) -> Result<Vec<RoleRecord>> {
        let rows = sqlx::query("SELECT id, name, created_at FROM roles ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(role_from).collect()
    }

    async fn delete_role(&self, write: &WriteContext, name: &str) -> Result<()> {
        let (mut tx, before) = self.begin_admin_change().await?;
        let done =
            sqlx::query("DELETE FROM roles WHERE name = $1").bind(name).execute(&mut *tx).await.map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(not_found("Role", name));
        }
        let write = &write.changing(serde_json::json!({ "role": name, "deleted": true }));
        self.commit_admin_change(tx, write, before, || format!("deleting role {name}")).await
    }

    async fn add_role_member(&self, write: &WriteContext, role: &str, principal: &str) -> Result<()> {
        let (role_id, principal_id) = (self.role_id(role).await?, self.principal_id(principal).await?);
        let mut tx = self.begin_write().await?;
        // Added by hand, a membership is manual, even one an issuer's claim made before: it
        // then stays when a later token lacks the claim, and confers grants on the server.
        sqlx::query(
            "INSERT INTO role_members (role_id, principal_id, source) VALUES ($1, $2, 'manual') \
             ON CONFLICT (role_id, principal_id) DO UPDATE SET source = 'manual'",
        )
        .bind(role_id)
        .bind(principal_id)
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            // Either was deleted since it was looked up.
            if crate::is_violation(&e, sqlx::error::ErrorKind::ForeignKeyViolation) {
                not_found("Role or principal", &format!("{principal} in {role}"))
            } else {
                db_error(e)
            }
        })?;
        let write = write.changing(serde_json::json!({ "role": role, "member-added": principal }));
        self.commit_write(tx, &write).await
    }

    async fn remove_role_member(&self, write: &WriteContext, role: &str, principal: &str) -> Result<()> {
        let (role_id, principal_id) = (self.role_id(role).await?, self.principal_id(principal).await?);
        let (mut tx, before) = self.begin_admin_change().await?;
        let done = sqlx::query("DELETE FROM role_members WHERE role_id = $1 AND principal_id = $2")
            .bind(role_id)
            .bind(principal_id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(not_found("Role membership", &format!("{principal} in {role}")));
        }
        let write = &write.changing(serde_json::json!({ "role": role, "member-removed": principal }));
        self.commit_admin_change(tx, write, before, || format!("removing {principal} from role {role}")).await
    }

    async fn memberships(&self) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT r.name AS role, p.name AS principal FROM role_members m \
             JOIN roles r ON r.id = m.role_id JOIN principals p ON p.id = m.principal_id ORDER BY r.name, p.name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|r| Ok((r.try_get("role").map_err(db_error)?, r.try_get("principal").map_err(db_error)?)))
            .collect()
    }

    async fn server_admins(&self) -> Result<Vec<String>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT DISTINCT p.name FROM principals p {SERVER_ADMINS} ORDER BY p.name"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| r.try_get("name").map_err(db_error)).collect()
    }

    async fn role_members(&self, role: &str) -> Result<Vec<String>> {
        let role_id = self.role_id(role).await?;
        let rows = sqlx::query(
            "SELECT p.name FROM role_members m JOIN principals p ON p.id = m.principal_id WHERE m.role_id = $1 ORDER BY p.name",
        )
        .bind(role_id)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| r.try_get("name").map_err(db_error)).collect()
    }

    async fn principal_roles(&self, principal_id: &PrincipalId) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT r.name FROM role_members m JOIN roles r ON r.id = m.role_id WHERE m.principal_id = $1 ORDER BY r.name",
        )
        .bind(principal_id.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(|r| r.try_get("name").map_err(db_error)).collect()
    }

    async fn provision_external_principal(
        &self,
        write: &WriteContext,
        (issuer, subject): (&str, &str),
        (name, display_name): (&str, Option<&str>),
        (claimed_roles, issued_at): (&[String], i64),
        admin_roles: &[String],
    ) -> Result<PrincipalRecord> {
        let select = format!("SELECT {PRINCIPAL_COLUMNS} FROM principals WHERE issuer = $1 AND subject = $2");
        if let Some(row) = sqlx::query(AssertSqlSafe(select.as_str()))
            .bind(issuer)
            .bind(subject)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
        {
            let mut principal = principal_from(&row)?;
            if principal.display_name.as_deref() != display_name {
                let mut tx = self.begin_write().await?;
                sqlx::query("UPDATE principals SET display_name = $1 WHERE id = $2")
                    .bind(display_name)
                    .bind(principal.id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?;
                self.commit_write(tx, write).await?;
                principal.display_name = display_name.map(str::to_owned);
            }
            return self.sync_claims(write, principal, (claimed_roles, issued_at), admin_roles).await;
        }
        for candidate in [name.to_owned(), format!("{name}@{issuer}")] {
            // ON CONFLICT DO NOTHING: a concurrent first request for the same identity, or a
            // name that is taken, inserts nothing; the read below decides.
            let mut tx = self.begin_write().await?;
            sqlx::query(
                "INSERT INTO principals (id, name, issuer, subject, display_name, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            )
            .bind(uuid::Uuid::now_v7().to_string())
            .bind(&candidate)
            .bind(issuer)
            .bind(subject)
            .bind(display_name)
            .bind(self.now_ms())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            self.commit_write(tx, write).await?;
            if let Some(row) = sqlx::query(AssertSqlSafe(select.as_str()))
                .bind(issuer)
                .bind(subject)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_error)?
            {
                return self.sync_claims(write, principal_from(&row)?, (claimed_roles, issued_at), admin_roles).await;
            }
        }
        Err(CatalogError::AlreadyExists(format!("no free principal name for {subject} of {issuer}")))
    }

    async fn grant(
        &self,
        write: &WriteContext,
        role: &str,
        privilege: Privilege,
        (securable, object): (&SecurableRef, Option<&str>),
        expires_at_ms: Option<i64>,
    ) -> Result<GrantRecord> {
        let role_id = self.role_id(role).await?;
        let resolved = self.resolve(securable, object).await?;
        let id = uuid::Uuid::now_v7().to_string();
        let mut tx = self.begin_write().await?;
        // An expired grant of the same privilege is gone for every purpose but the unique index:
        // it is removed, so granting again works (listings already hide it).
        sqlx::query(
            "DELETE FROM grants WHERE role_id = $1 AND privilege = $2 AND securable_type = $3 \
             AND COALESCE(warehouse_id, '') = $4 AND COALESCE(namespace_id, '') = $5 AND COALESCE(tabular_id, '') = $6 \
             AND expires_at IS NOT NULL AND expires_at <= $7",
        )
        .bind(&role_id)
        .bind(privilege.as_str())
        .bind(securable.kind.as_str())
        .bind(resolved.warehouse_id.clone().unwrap_or_default())
        .bind(resolved.namespace_id.clone().unwrap_or_default())
        .bind(resolved.tabular_id.clone().unwrap_or_default())
        .bind(self.now_ms())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        let inserted = sqlx::query(
            "INSERT INTO grants (id, role_id, privilege, securable_type, warehouse_id, namespace_id, tabular_id, expires_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&id)
        .bind(&role_id)
        .bind(privilege.as_str())
        .bind(securable.kind.as_str())
        .bind(resolved.warehouse_id)
        .bind(resolved.namespace_id)
        .bind(resolved.tabular_id)
        .bind(expires_at_ms)
        .bind(self.now_ms())
        .execute(&mut *tx)
        .await;
        inserted.map_err(|e| {
            // The role (or the object) was deleted since it was looked up: as if it never was.
            if crate::is_violation(&e, sqlx::error::ErrorKind::ForeignKeyViolation) {
                return not_found("Role or securable", role);
            }
            taken_or_failed(e, || {
                CatalogError::AlreadyExists(format!("{role} already holds {privilege} on that securable"))
            })
        })?;
        let write = write.changing(serde_json::json!({
            "granted": privilege.as_str(), "role": role, "securable": securable_json(securable),
            "grant-id": id, "expires-at-ms": expires_at_ms,
        }));
        self.commit_write(tx, &write).await?;
        Ok(GrantRecord { id, role: role.to_owned(), privilege, securable: securable.clone(), expires_at_ms })
    }

    async fn revoke(
        &self,
        write: &WriteContext,
        role: &str,
        privilege: Privilege,
        (securable, object): (&SecurableRef, Option<&str>),
    ) -> Result<()> {
        let role_id = self.role_id(role).await?;
        let resolved = self.resolve(securable, object).await?;
        let (mut tx, before) = self.begin_admin_change().await?;
        let done = sqlx::query(
            "DELETE FROM grants WHERE role_id = $1 AND privilege = $2 AND securable_type = $3 \
             AND COALESCE(warehouse_id, '') = $4 AND COALESCE(namespace_id, '') = $5 AND COALESCE(tabular_id, '') = $6",
        )
        .bind(role_id)
        .bind(privilege.as_str())
        .bind(securable.kind.as_str())
        .bind(resolved.warehouse_id.unwrap_or_default())
        .bind(resolved.namespace_id.unwrap_or_default())
        .bind(resolved.tabular_id.unwrap_or_default())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(not_found("Grant", &format!("{privilege} to {role}")));
        }
        let write = &write.changing(serde_json::json!({
            "revoked": privilege.as_str(), "role": role, "securable": securable_json(securable),
        }));
        self.commit_admin_change(tx, write, before, || format!("revoking {privilege} from role {role}")).await
    }

    async fn list_grants(&self, filter: &GrantFilter) -> Result<Vec<GrantRecord>> {
        // Every condition is a bind parameter; an absent one is `$n IS NULL`. A role that does
        // not exist matches nothing (the service tells admins it does not exist).
        let sql = format!(
            "{GRANT_SELECT} WHERE ($1 IS NULL OR g.role_id = (SELECT id FROM roles WHERE name = $1)) \
             AND ($2 IS NULL OR g.role_id IN (SELECT role_id FROM role_members WHERE principal_id = $2)) \
             AND ($3 IS NULL OR g.privilege = $3) AND ($4 IS NULL OR g.securable_type = $4) \
             AND ($5 IS NULL OR w.name = $5) AND ($6 IS NULL OR g.expires_at IS NULL OR g.expires_at > $6) \
             AND ($7 IS NULL OR g.id > $7) ORDER BY g.id LIMIT $8"
        );
        let limit = filter.limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(filter.role.clone())
            .bind(filter.principal_id.as_deref())
            .bind(filter.privilege.map(Privilege::as_str))
            .bind(filter.securable_type.map(SecurableType::as_str))
            .bind(filter.warehouse.clone())
            .bind(filter.unexpired_at_ms)
            .bind(filter.after_id.clone())
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(grant_from).collect()
    }

    async fn grants_on(
        &self,
        (securable, object): (&SecurableRef, Option<&str>),
        now: i64,
    ) -> Result<Vec<GrantRecord>> {
        let resolved = self.resolve(securable, object).await?;
        let ancestors = securable.namespace.as_ref().map(ancestors_of).unwrap_or_default();
        let placeholders: Vec<String> = (0..ancestors.len()).map(|i| format!("${}", i + 4)).collect();
        let namespace_clause = if ancestors.is_empty() {
            String::new()
        } else {
            format!(
                " OR (g.securable_type = 'namespace' AND g.namespace_id IN \
                 (SELECT id FROM namespaces WHERE warehouse_id = $2 AND name IN ({})))",
                placeholders.join(", ")
            )
        };
        // Built at run time for the variable number of ancestors; every value is a bind parameter.
        let sql = format!(
            "{GRANT_SELECT} WHERE (g.expires_at IS NULL OR g.expires_at > $1) AND (g.securable_type = 'server' \
             OR (g.securable_type = 'warehouse' AND g.warehouse_id = $2){namespace_clause} \
             OR (g.securable_type IN ('table', 'view') AND g.tabular_id = $3)) ORDER BY r.name, g.privilege"
        );
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(now)
            .bind(resolved.warehouse_id.unwrap_or_default())
            .bind(resolved.tabular_id.unwrap_or_default());
        for ancestor in &ancestors {
            query = query.bind(ancestor.as_str());
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_error)?;
        rows.iter().map(grant_from).collect()
    }

    async fn holdings(&self, principal_id: &PrincipalId, target: &Target, now: i64) -> Result<Holdings> {
        let (warehouse_id, namespace, tabular) = match target {
            Target::Server => (None, None, None),
            Target::Warehouse { warehouse_id } => (Some(warehouse_id.as_str()), None, None),
            Target::Namespace { warehouse_id, namespace } => (Some(warehouse_id.as_str()), Some(namespace), None),
            Target::Tabular { warehouse_id, namespace, name, kind } => {
                (Some(warehouse_id.as_str()), Some(namespace), Some((name.as_str(), *kind)))
            }
        };
        let ancestors = namespace.map(ancestors_of).unwrap_or_default();
        let (below_lo, below_hi) = namespace.map(|ns| below_range(&ns.encoded())).unwrap_or_default();
        // $1 principal, $2 now, $3 warehouse, $4 namespace (encoded), $5 tabular name, $6 kind,
        // $7/$8 the name range strictly below the namespace, $9.. the namespace and its ancestors.
        let placeholders: Vec<String> = (0..ancestors.len()).map(|i| format!("${}", i + 9)).collect();
        let in_ancestors = if ancestors.is_empty() { "NULL".to_owned() } else { placeholders.join(", ") };
        let (direct_scope, below_scope) = match (namespace, tabular) {
            (None, _) if warehouse_id.is_none() => ("g.securable_type = 'server'".to_owned(), "1 = 1".to_owned()),
            (None, _) => (
                "g.securable_type = 'server' OR (g.securable_type = 'warehouse' AND g.warehouse_id = $3)".to_owned(),
                "g.warehouse_id = $3".to_owned(),
            ),
            (Some(_), None) => (
                format!(
                    "g.securable_type = 'server' OR (g.securable_type = 'warehouse' AND g.warehouse_id = $3) \
                     OR (g.securable_type = 'namespace' AND g.namespace_id IN \
                         (SELECT id FROM namespaces WHERE warehouse_id = $3 AND name IN ({in_ancestors})))"
                ),
                "g.warehouse_id = $3 AND ((g.securable_type = 'namespace' AND g.namespace_id IN \
                     (SELECT id FROM namespaces WHERE warehouse_id = $3 AND name >= $7 AND name < $8)) \
                 OR (g.securable_type IN ('table', 'view') AND g.tabular_id IN \
                     (SELECT t.id FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
                      WHERE n.warehouse_id = $3 AND (n.name = $4 OR (n.name >= $7 AND n.name < $8)))))"
                    .to_owned(),
            ),
            (Some(_), Some(_)) => (
                format!(
                    "g.securable_type = 'server' OR (g.securable_type = 'warehouse' AND g.warehouse_id = $3) \
                     OR (g.securable_type = 'namespace' AND g.namespace_id IN \
                         (SELECT id FROM namespaces WHERE warehouse_id = $3 AND name IN ({in_ancestors}))) \
                     OR (g.securable_type = $6 AND g.tabular_id = (SELECT t.id FROM tabulars t \
                         JOIN namespaces n ON n.id = t.namespace_id \
                         WHERE n.warehouse_id = $3 AND n.name = $4 AND t.name = $5 AND t.kind = $6))"
                ),
                "1 = 0".to_owned(),
            ),
        };
        // For a table or view, the id its name means now, in a row of its own (`below` 2): the
        // decision is tied to that object (grants follow objects, names do not).
        let object = if tabular.is_some() {
            " UNION ALL SELECT t.id AS privilege, 2 AS below, NULL AS expires_at, NULL AS grant_id, NULL AS role, \
             NULL AS securable_type FROM tabulars t \
             JOIN namespaces n ON n.id = t.namespace_id \
             WHERE n.warehouse_id = $3 AND n.name = $4 AND t.name = $5 AND t.kind = $6"
        } else {
            ""
        };
        // One round trip: what applies to the target, whether anything below it is held, and
        // which object it names.
        let in_force = visible::grants_in_force(1, 2);
        let sql = format!(
            "SELECT g.privilege, 0 AS below, g.expires_at, g.id AS grant_id, \
                    (SELECT r.name FROM roles r WHERE r.id = g.role_id) AS role, g.securable_type \
             {in_force} AND ({direct_scope}) \
             UNION ALL \
             SELECT g.privilege, 1 AS below, g.expires_at, NULL, NULL, NULL {in_force} AND ({below_scope}){object}"
        );
        let (name, kind) =
            tabular.map(|(n, k)| (n, if k == TabularKind::View { "view" } else { "table" })).unwrap_or(("", ""));
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(principal_id.as_str())
            .bind(now)
            .bind(warehouse_id.unwrap_or(""))
            .bind(namespace.map(|n| n.encoded()).unwrap_or_default())
            .bind(name)
            .bind(kind)
            .bind(below_lo)
            .bind(below_hi);
        for ancestor in &ancestors {
            query = query.bind(ancestor.as_str());
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_error)?;
        let mut holdings = Holdings::default();
        for row in rows {
            let below: i32 = row
                .try_get::<i32, _>("below")
                .or_else(|_| row.try_get::<i64, _>("below").map(|v| v as i32))
                .map_err(db_error)?;
            if below == 2 {
                holdings.object = Some(TabularId::new(row.try_get::<String, _>("privilege").map_err(db_error)?));
                continue;
            }
            let privilege = Privilege::parse(&row.try_get::<String, _>("privilege").map_err(db_error)?)?;
            let expires: Option<i64> = row.try_get("expires_at").map_err(db_error)?;
            if let Some(expires) = expires {
                holdings.expires_at_ms = Some(holdings.expires_at_ms.map_or(expires, |e| e.min(expires)));
            }
            if below == 0 {
                holdings.direct.insert(privilege);
                holdings.grants.push(icegate_catalog::actors::HeldGrant {
                    id: row.try_get("grant_id").map_err(db_error)?,
                    role: row.try_get::<Option<String>, _>("role").map_err(db_error)?.unwrap_or_default(),
                    privilege,
                    securable_type: row.try_get("securable_type").map_err(db_error)?,
                    expires_at_ms: expires,
                });
            } else {
                holdings.below = true;
            }
        }
        Ok(holdings)
    }

    async fn grant_by_id(&self, id: &str) -> Result<Option<GrantRecord>> {
        self.find_grant(id).await
    }

    async fn record_grant_use(&self, uses: &[icegate_catalog::reviews::GrantUse]) -> Result<()> {
        self.store_grant_use(uses).await
    }

    async fn effective_access(
        &self,
        scope: &SecurableRef,
        now_ms: i64,
    ) -> Result<Vec<icegate_catalog::reviews::AccessLine>> {
        self.effective_lines(scope, now_ms).await
    }

    async fn create_review(&self, write: &WriteContext, review: &icegate_catalog::reviews::NewReview) -> Result<()> {
        self.insert_review(write, review).await
    }

    async fn review(&self, id: &str) -> Result<Option<icegate_catalog::reviews::ReviewRecord>> {
        self.read_review(id).await
    }

    async fn reviews(&self) -> Result<Vec<icegate_catalog::reviews::ReviewRecord>> {
        self.read_reviews().await
    }

    async fn review_lines(&self, id: &str) -> Result<Vec<icegate_catalog::reviews::ReviewLine>> {
        self.read_review_lines(id).await
    }

    async fn decide_review_line(
        &self,
        write: &WriteContext,
        id: &str,
        line: &icegate_catalog::reviews::ReviewLine,
        decision: icegate_catalog::reviews::ReviewDecision,
        by: (String, i64, Option<String>),
    ) -> Result<icegate_catalog::reviews::Revoked> {
        self.decide_line(write, id, line, decision, by).await
    }

    async fn place_hold(
        &self,
        write: &WriteContext,
        securable: &SecurableRef,
        reason: &str,
        placed_by: &str,
    ) -> Result<icegate_catalog::holds::HoldRecord> {
        self.insert_hold(write, securable, reason, placed_by).await
    }

    async fn hold(&self, id: &str) -> Result<Option<icegate_catalog::holds::HoldRecord>> {
        self.read_hold(id).await
    }

    async fn holds(&self, warehouse: Option<&str>) -> Result<Vec<icegate_catalog::holds::HoldRecord>> {
        self.read_holds(warehouse).await
    }

    async fn ask_hold_lift(
        &self,
        write: &WriteContext,
        id: &str,
        by: (&str, &str),
        replacing: Option<&str>,
    ) -> Result<bool> {
        self.ask_lift(write, id, by, replacing).await
    }

    async fn lift_hold(&self, write: &WriteContext, id: &str, approving: Option<&str>) -> Result<bool> {
        self.remove_hold(write, id, approving).await
    }

    async fn close_review(&self, write: &WriteContext, id: &str, by: &str, at_ms: i64) -> Result<()> {
        self.close_campaign(write, id, by, at_ms).await
    }
}

/// A securable as records name it: its type and the names of its parts.
fn securable_json(securable: &SecurableRef) -> serde_json::Value {
    serde_json::json!({
        "type": securable.kind.as_str(),
        "warehouse": securable.warehouse,
        "namespace": securable.namespace.as_ref().map(|n| n.levels().to_vec()),
        "name": securable.name,
    })
}
