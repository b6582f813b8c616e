//! Dropped tables and views kept restorable (soft delete): what a drop keeps, undrop, the
//! purge's bookkeeping, and expiry. A deleted entry holds its locations with leases
//! (`location_leases.deleted_id`), so no other table, view or namespace is made where its files
//! still are: not while it may come back, and not while its purge has files to delete.

use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::ids::{TabularId, WarehouseId};
use icegate_catalog::store::{DeletedFilter, DeletedState, DeletedTabular, SoftDelete, Tabular, TabularKind};
use icegate_catalog::{CatalogError, NamespaceIdent};
use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::error::ErrorKind;
use sqlx::{AssertSqlSafe, Row};

use super::{already_exists, kind_from, tabular};
use crate::locations::{Own, check_namespace_dirs, check_overlap, id_of, lock_warehouse, record_locations};
use crate::{Backend, SqlStore, WriteTx, db_error, is_violation, taken_or_failed};

/// A lease that lasts until the purge ends it.
const UNTIL_PURGED: i64 = i64::MAX;

const COLUMNS: &str = "id, warehouse_id, namespace, name, kind, location, extra_locations, metadata_location, \
     dropped_at, dropped_by, restorable_until, purge_due, state, superseded";

/// A grant on a dropped table or view, as undrop puts it back.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct KeptGrant {
    id: String,
    role_id: String,
    privilege: String,
    securable_type: String,
    warehouse_id: Option<String>,
    expires_at: Option<i64>,
    created_at: i64,
}

/// The grants on table or view `id` (read before its row goes: they go with it).
pub(super) async fn grants_of(tx: &mut WriteTx, id: &str) -> Result<Vec<KeptGrant>, CatalogError> {
    let rows = sqlx::query(
        "SELECT id, role_id, privilege, securable_type, warehouse_id, expires_at, created_at FROM grants \
         WHERE tabular_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            Ok(KeptGrant {
                id: row.try_get("id")?,
                role_id: row.try_get("role_id")?,
                privilege: row.try_get("privilege")?,
                securable_type: row.try_get("securable_type")?,
                warehouse_id: row.try_get("warehouse_id")?,
                expires_at: row.try_get("expires_at")?,
                created_at: row.try_get("created_at")?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(db_error)
}

/// Keeps a dropped table or view (its row `row`, deleted in `tx`) as a deleted entry, and leases
/// its locations to it.
pub(super) async fn keep(
    tx: &mut WriteTx,
    write: &WriteContext,
    (warehouse_id, namespace, name, kind): (&str, &NamespaceIdent, &str, TabularKind),
    (row, dropped, extra, grants): (&AnyRow, &Tabular, &[String], &[KeptGrant]),
    keep: SoftDelete,
    (lease_until_ms, now_ms): (i64, i64),
) -> Result<(), CatalogError> {
    let metadata: String = row.try_get("metadata").map_err(db_error)?;
    let gzip: Option<Vec<u8>> = row.try_get("metadata_gzip").map_err(db_error)?;
    let created_at: i64 = row.try_get("created_at").map_err(db_error)?;
    let uuid = crate::locations::uuid_of(&dropped.metadata);
    sqlx::query(
        "INSERT INTO deleted_tabulars (id, warehouse_id, namespace, name, kind, uuid, location, extra_locations, \
         metadata_location, metadata, metadata_gzip, grants, created_at, dropped_at, dropped_by, restorable_until, \
         lease_until, purge_due, state) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, 'deleted')",
    )
    .bind(dropped.id.as_str())
    .bind(warehouse_id)
    .bind(namespace.encoded())
    .bind(name)
    .bind(kind.as_str())
    .bind(&uuid)
    .bind(&dropped.location)
    .bind(to_json(extra)?)
    .bind(&dropped.metadata_location)
    .bind(metadata)
    .bind(gzip)
    .bind(to_json(grants)?)
    .bind(created_at)
    .bind(now_ms)
    .bind(write.actor.describe())
    .bind(keep.restorable_until_ms)
    .bind(lease_until_ms)
    .bind(keep.purge_due_ms)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    let until = if keep.purge_due_ms.is_some() { UNTIL_PURGED } else { keep.restorable_until_ms.max(lease_until_ms) };
    for location in std::iter::once(&dropped.location).chain(extra) {
        sqlx::query(
            "INSERT INTO location_leases (warehouse_id, location, tabular_uuid, expires_at, principal, deleted_id) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(warehouse_id)
        .bind(location)
        .bind(&uuid)
        .bind(until)
        .bind(&write.principal)
        .bind(dropped.id.as_str())
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    }
    Ok(())
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<String, CatalogError> {
    serde_json::to_string(value).map_err(|e| CatalogError::Internal(e.into()))
}

/// A deleted entry kept for the same table or view (`uuid`) can no longer be undropped once its
/// metadata is registered again (as `as_what`) at its own locations: that table holds its files
/// now, and a pending purge of them is called off. Only the principal that dropped it can take
/// its locations (the overlap check's one exception), so only a registration at `locations`
/// overlapping the entry's supersedes it: the uuid alone, which any reader of the table has seen,
/// does not. Its leases last only while credentials vended for it may work.
pub(super) async fn supersede(
    tx: &mut WriteTx,
    warehouse_id: &str,
    (uuid, locations): (&str, &[&str]),
    as_what: &str,
    now_ms: i64,
) -> Result<(), CatalogError> {
    if uuid.is_empty() {
        return Ok(());
    }
    let rows = sqlx::query(
        "SELECT id, location, extra_locations FROM deleted_tabulars \
         WHERE warehouse_id = $1 AND uuid = $2 AND state = 'deleted' AND superseded IS NULL",
    )
    .bind(warehouse_id)
    .bind(uuid)
    .fetch_all(&mut **tx)
    .await
    .map_err(db_error)?;
    let overlaps = |a: &str, b: &str| {
        let inside = |x: &str, y: &str| x.strip_prefix(y).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        inside(a, b) || inside(b, a)
    };
    let why = format!("its metadata was registered again as {as_what}");
    for row in rows {
        let id: String = row.try_get("id").map_err(db_error)?;
        let location: String = row.try_get("location").map_err(db_error)?;
        let extra: Vec<String> =
            serde_json::from_str(&row.try_get::<String, _>("extra_locations").map_err(db_error)?).unwrap_or_default();
        let taken =
            std::iter::once(&location).chain(&extra).any(|held| locations.iter().any(|new| overlaps(new, held)));
        if !taken {
            continue;
        }
        sqlx::query("UPDATE deleted_tabulars SET superseded = $2, purge_due = NULL WHERE id = $1")
            .bind(&id)
            .bind(&why)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        sqlx::query(
            "UPDATE location_leases SET expires_at = \
             (SELECT lease_until FROM deleted_tabulars WHERE id = $1) WHERE deleted_id = $1",
        )
        .bind(&id)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
        sqlx::query("DELETE FROM location_leases WHERE deleted_id = $1 AND expires_at <= $2")
            .bind(&id)
            .bind(now_ms)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
    }
    Ok(())
}

fn from_row(row: &AnyRow) -> Result<DeletedTabular, CatalogError> {
    let get = |column: &str| -> Result<String, CatalogError> { row.try_get(column).map_err(db_error) };
    let get_i64 = |column: &str| -> Result<i64, CatalogError> { row.try_get(column).map_err(db_error) };
    let extra: Vec<String> = serde_json::from_str(&get("extra_locations")?)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("deleted entry's locations are not JSON: {e}")))?;
    Ok(DeletedTabular {
        id: TabularId::new(get("id")?),
        warehouse_id: WarehouseId::new(get("warehouse_id")?),
        namespace: NamespaceIdent::parse_encoded(&get("namespace")?)?,
        name: get("name")?,
        kind: kind_from(&get("kind")?)?,
        location: get("location")?,
        extra_locations: extra,
        metadata_location: get("metadata_location")?,
        dropped_at_ms: get_i64("dropped_at")?,
        dropped_by: get("dropped_by")?,
        restorable_until_ms: get_i64("restorable_until")?,
        purge_due_ms: row.try_get("purge_due").map_err(db_error)?,
        state: match get("state")?.as_str() {
            "purging" => DeletedState::Purging,
            _ => DeletedState::Deleted,
        },
        superseded: row.try_get("superseded").map_err(db_error)?,
    })
}

impl SqlStore {
    pub(super) async fn list_deleted_entries(
        &self,
        warehouse_id: &WarehouseId,
        filter: &DeletedFilter,
    ) -> Result<Vec<DeletedTabular>, CatalogError> {
        let (before_at, before_id) = filter.before.clone().unwrap_or((i64::MAX, String::new()));
        let (namespace, name) =
            filter.named.as_ref().map(|(ns, name)| (ns.encoded(), name.as_str())).unwrap_or_default();
        let sql = format!(
            "SELECT {COLUMNS} FROM deleted_tabulars WHERE warehouse_id = $1 \
             AND (dropped_at < $2 OR (dropped_at = $2 AND ($3 = '' OR id < $3))) \
             AND ($5 = '' OR (namespace = $5 AND name = $6)) \
             ORDER BY dropped_at DESC, id DESC LIMIT $4"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(warehouse_id.as_str())
            .bind(before_at)
            .bind(before_id)
            .bind(filter.limit.unwrap_or(1000))
            .bind(namespace)
            .bind(name)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(from_row).collect()
    }

    pub(super) async fn deleted_entry(&self, id: &TabularId) -> Result<Option<DeletedTabular>, CatalogError> {
        let sql = format!("SELECT {COLUMNS} FROM deleted_tabulars WHERE id = $1");
        let row =
            sqlx::query(AssertSqlSafe(sql)).bind(id.as_str()).fetch_optional(&self.pool).await.map_err(db_error)?;
        row.as_ref().map(from_row).transpose()
    }

    pub(super) async fn undrop(
        &self,
        write: &WriteContext,
        id: &TabularId,
        (namespace, name): (&NamespaceIdent, &str),
        now_ms: i64,
    ) -> Result<Tabular, CatalogError> {
        let mut tx = self.begin_write().await?;
        let lock = if self.backend == Backend::Postgres { " FOR UPDATE" } else { "" };
        let sql = format!(
            "SELECT {COLUMNS}, uuid, metadata, metadata_gzip, grants, created_at FROM deleted_tabulars WHERE id = $1{lock}"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| CatalogError::NotFound {
            kind: icegate_catalog::ObjectKind::Table,
            message: format!("no deleted table or view with id {id}"),
        })?;
        let entry = from_row(&row)?;
        if let Some(why) = entry.not_restorable(now_ms) {
            return Err(CatalogError::Conflict(format!(
                "{}.{} (dropped at {} ms) can no longer be undropped: {why}",
                entry.namespace, entry.name, entry.dropped_at_ms
            )));
        }
        let warehouse_id = entry.warehouse_id.as_str();
        lock_warehouse(self, &mut tx, warehouse_id).await?;
        let namespace_id = id_of(&mut *tx, warehouse_id, namespace)
            .await?
            .ok_or_else(|| CatalogError::no_such_namespace(namespace))?;
        let taken = sqlx::query("SELECT id FROM tabulars WHERE namespace_id = $1 AND name = $2")
            .bind(namespace_id.as_str())
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
        if taken.is_some() {
            return Err(already_exists(namespace, name));
        }
        // Its own leases go; every other claim on its locations counts.
        sqlx::query("DELETE FROM location_leases WHERE deleted_id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        for location in entry.locations() {
            check_overlap(&mut tx, warehouse_id, location, Own::default(), now_ms).await?;
            check_namespace_dirs(&mut tx, warehouse_id, namespace, location).await?;
        }
        let metadata: String = row.try_get("metadata").map_err(db_error)?;
        let gzip: Option<Vec<u8>> = row.try_get("metadata_gzip").map_err(db_error)?;
        let created_at: i64 = row.try_get("created_at").map_err(db_error)?;
        let inserted = sqlx::query(
            "INSERT INTO tabulars (id, warehouse_id, namespace_id, name, kind, location, metadata_location, metadata, \
             metadata_gzip, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(id.as_str())
        .bind(warehouse_id)
        .bind(namespace_id.as_str())
        .bind(name)
        .bind(entry.kind.as_str())
        .bind(&entry.location)
        .bind(&entry.metadata_location)
        .bind(&metadata)
        .bind(gzip.clone())
        .bind(created_at)
        .bind(now_ms)
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_violation(&e, ErrorKind::ForeignKeyViolation) => {
                return Err(CatalogError::no_such_namespace(namespace));
            }
            Err(e) => return Err(taken_or_failed(e, || already_exists(namespace, name))),
        }
        record_locations(&mut tx, warehouse_id, id.as_str(), &entry.extra_locations, now_ms).await?;
        // Its grants come back, but not those that expired meanwhile or whose role is gone.
        let grants: Vec<KeptGrant> = serde_json::from_str(&row.try_get::<String, _>("grants").map_err(db_error)?)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("deleted entry's grants are not JSON: {e}")))?;
        let mut restored = 0;
        for grant in &grants {
            if grant.expires_at.is_some_and(|at| at <= now_ms) {
                continue;
            }
            let done = sqlx::query(
                "INSERT INTO grants (id, role_id, privilege, securable_type, warehouse_id, namespace_id, tabular_id, \
                 expires_at, created_at) SELECT $1, $2, $3, $4, $5, NULL, $6, $7, $8 \
                 WHERE EXISTS (SELECT 1 FROM roles WHERE id = $2) ON CONFLICT DO NOTHING",
            )
            .bind(&grant.id)
            .bind(&grant.role_id)
            .bind(&grant.privilege)
            .bind(&grant.securable_type)
            .bind(grant.warehouse_id.as_deref())
            .bind(id.as_str())
            .bind(grant.expires_at)
            .bind(grant.created_at)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            restored += done.rows_affected();
        }
        sqlx::query("DELETE FROM deleted_tabulars WHERE id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let mut dropped_as = entry.namespace.levels().to_vec();
        dropped_as.push(entry.name.clone());
        let change = crate::audit::Change::tabular(
            warehouse_id,
            (namespace, name),
            (id.as_str(), entry.kind),
            serde_json::json!({ "undropped": true, "dropped-as": dropped_as, "grants-restored": restored,
                "metadata-location": entry.metadata_location }),
        );
        self.commit_write_changed(tx, write, &change, db_error).await?;
        tabular(id.as_str().to_owned(), entry.kind.as_str(), entry.location, entry.metadata_location, (metadata, gzip))
    }

    pub(super) async fn start_purge(&self, id: &TabularId) -> Result<Option<DeletedTabular>, CatalogError> {
        let mut tx = self.begin_write().await?;
        let lock = if self.backend == Backend::Postgres { " FOR UPDATE" } else { "" };
        let sql = format!("SELECT {COLUMNS} FROM deleted_tabulars WHERE id = $1{lock}");
        let row = sqlx::query(AssertSqlSafe(sql)).bind(id.as_str()).fetch_optional(&mut *tx).await.map_err(db_error)?;
        let Some(mut entry) = row.as_ref().map(from_row).transpose()? else { return Ok(None) };
        // Not yet due (a purge queued before an undrop and a second drop): not now; the sweep
        // queues it when it is.
        if entry.superseded.is_some() || entry.purge_due_ms.is_none_or(|due| due > self.now_ms()) {
            return Ok(None);
        }
        // A legal hold placed since the task looked: checked again under the row's lock.
        let held =
            crate::holds::covering(&mut *tx, entry.warehouse_id.as_str(), Some(&entry.namespace), Some(id.as_str()))
                .await?;
        if held.is_some() {
            return Ok(None);
        }
        if entry.state == DeletedState::Deleted {
            sqlx::query("UPDATE deleted_tabulars SET state = 'purging' WHERE id = $1")
                .bind(id.as_str())
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            // From now on not even the same table, registered again, may take its locations.
            sqlx::query("UPDATE location_leases SET tabular_uuid = '' WHERE deleted_id = $1")
                .bind(id.as_str())
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            entry.state = DeletedState::Purging;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(Some(entry))
    }

    pub(super) async fn end_purge(
        &self,
        write: &WriteContext,
        id: &TabularId,
        report: serde_json::Value,
    ) -> Result<(), CatalogError> {
        let mut tx = self.begin_write().await?;
        let sql = format!(
            "DELETE FROM deleted_tabulars WHERE id = $1 AND state = 'purging' RETURNING {COLUMNS}, lease_until"
        );
        let Some(row) =
            sqlx::query(AssertSqlSafe(sql)).bind(id.as_str()).fetch_optional(&mut *tx).await.map_err(db_error)?
        else {
            return Ok(());
        };
        let entry = from_row(&row)?;
        let lease_until: i64 = row.try_get("lease_until").map_err(db_error)?;
        // Credentials vended while it existed may still work: its locations stay leased that long.
        sqlx::query("UPDATE location_leases SET expires_at = $2 WHERE deleted_id = $1")
            .bind(id.as_str())
            .bind(lease_until)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let mut detail = report;
        detail["purged"] = true.into();
        let change = crate::audit::Change::tabular(
            entry.warehouse_id.as_str(),
            (&entry.namespace, &entry.name),
            (id.as_str(), entry.kind),
            detail,
        );
        self.commit_write_changed(tx, write, &change, db_error).await
    }

    pub(super) async fn expire_deleted_entries(&self, now_ms: i64, limit: i64) -> Result<u64, CatalogError> {
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM deleted_tabulars WHERE purge_due IS NULL AND restorable_until <= $1 \
             ORDER BY restorable_until LIMIT $2",
        )
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        let mut removed = 0;
        for id in ids {
            let mut tx = self.begin_write().await?;
            let done = sqlx::query(
                "DELETE FROM deleted_tabulars WHERE id = $1 AND purge_due IS NULL AND restorable_until <= $2",
            )
            .bind(&id)
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            // Its leases ran to the end of the hold (or of vended credentials, if later).
            sqlx::query("DELETE FROM location_leases WHERE deleted_id = $1 AND expires_at <= $2")
                .bind(&id)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            tx.commit().await.map_err(db_error)?;
            removed += done.rows_affected();
        }
        Ok(removed)
    }

    pub(super) async fn due_purges(&self, now_ms: i64, limit: i64) -> Result<Vec<DeletedTabular>, CatalogError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM deleted_tabulars WHERE purge_due IS NOT NULL AND purge_due <= $1 \
             AND superseded IS NULL ORDER BY purge_due LIMIT $2"
        );
        let rows =
            sqlx::query(AssertSqlSafe(sql)).bind(now_ms).bind(limit).fetch_all(&self.pool).await.map_err(db_error)?;
        rows.iter().map(from_row).collect()
    }
}
