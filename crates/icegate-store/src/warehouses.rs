//! Warehouse rows.

use async_trait::async_trait;
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::ids::{PrincipalId, WarehouseId};
use icegate_catalog::storage::StorageProfile;
use icegate_catalog::store::{Warehouse, WarehouseStore};
use icegate_catalog::{CatalogError, StorageRoot, WarehouseName};
use sqlx::any::AnyRow;
use sqlx::error::ErrorKind;
use sqlx::{FromRow, Row};

use crate::{SqlStore, db_error, is_violation, taken_or_failed};

/// A `SELECT` of every warehouse column, followed by `$tail` (a string literal).
macro_rules! select_warehouses {
    ($tail:literal) => {
        concat!(
            "SELECT id, name, storage_root, storage_profile, profile_version, settings, created_at, updated_at \
             FROM warehouses",
            $tail
        )
    };
}

/// A `warehouses` row as stored.
#[derive(sqlx::FromRow)]
struct WarehouseRow {
    id: String,
    name: String,
    storage_root: String,
    storage_profile: String,
    profile_version: i64,
    settings: String,
    created_at: i64,
    updated_at: i64,
}

fn from_row(row: &AnyRow) -> Result<Warehouse, CatalogError> {
    let row = WarehouseRow::from_row(row).map_err(db_error)?;
    let corrupt = |e: CatalogError| CatalogError::Internal(anyhow::anyhow!("invalid warehouse row: {e}"));
    Ok(Warehouse {
        id: WarehouseId::new(row.id),
        name: WarehouseName::parse(&row.name).map_err(corrupt)?,
        storage_root: StorageRoot::parse(&row.storage_root).map_err(corrupt)?,
        storage_profile: serde_json::from_str(&row.storage_profile)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("invalid storage profile in a warehouse row: {e}")))?,
        profile_version: row.profile_version,
        settings: serde_json::from_str(&row.settings)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("invalid settings in a warehouse row: {e}")))?,
        created_at_ms: row.created_at,
        updated_at_ms: row.updated_at,
    })
}

fn profile_json(profile: &StorageProfile) -> Result<String, CatalogError> {
    serde_json::to_string(profile).map_err(|e| CatalogError::Internal(anyhow::anyhow!("serialising a profile: {e}")))
}

/// The root itself and every ancestor directory of it, up to the bucket (`s3://b`) or the top
/// directory (`file:///x`).
fn root_and_ancestors(root: &str) -> Vec<String> {
    let mut candidates = vec![root.to_owned()];
    let mut current = root;
    while let Some((parent, _)) = current.rsplit_once('/') {
        if parent.ends_with('/') || parent.is_empty() {
            break;
        }
        candidates.push(parent.to_owned());
        current = parent;
    }
    candidates
}

/// Fails when `root` equals, lies inside or contains another warehouse's storage root. Table
/// locations are checked for overlaps within their warehouse only, so two warehouses sharing
/// storage would let a table in one reach the files (and credentials) of a table in the other.
async fn check_root_free(
    conn: &mut sqlx::AnyConnection,
    name: &WarehouseName,
    root: &StorageRoot,
) -> Result<(), CatalogError> {
    if let Some(other) = overlapping(conn, (Storage::Roots, ("", name.as_str())), root.as_str()).await? {
        return Err(CatalogError::bad_request(format!(
            "storage root {root} overlaps the storage root of warehouse {other}: warehouses may not share storage"
        )));
    }
    // Nor another warehouse's source locations (its adopted tables' credentials read them).
    if let Some(other) = overlapping(conn, (Storage::Sources, ("", name.as_str())), root.as_str()).await? {
        return Err(CatalogError::bad_request(format!(
            "storage root {root} overlaps a source location of warehouse {other}: warehouses may not share storage"
        )));
    }
    Ok(())
}

/// What [`overlapping`] looks at: warehouses' storage roots, or their source locations.
#[derive(Clone, Copy)]
enum Storage {
    Roots,
    Sources,
}

/// The name of a warehouse other than the one with id or name `except` (either may be empty)
/// whose storage root (or one of whose source locations) equals, lies inside or contains
/// `location`.
async fn overlapping(
    conn: &mut sqlx::AnyConnection,
    (storage, (except_id, except_name)): (Storage, (&str, &str)),
    location: &str,
) -> Result<Option<String>, CatalogError> {
    let (from, column) = match storage {
        Storage::Roots => ("warehouses w", "w.storage_root"),
        Storage::Sources => ("source_locations s JOIN warehouses w ON w.id = s.warehouse_id", "s.location"),
    };
    let candidates = root_and_ancestors(location);
    // Every value is a bind parameter; descendants are the byte range ("<x>/", "<x>0").
    let placeholders: Vec<String> = (0..candidates.len()).map(|i| format!("${}", i + 4)).collect();
    let others = "w.id <> $1 AND w.name <> $2";
    let sql = format!(
        "SELECT w.name AS name FROM {from} WHERE {others} AND {column} IN ({}) \
         UNION ALL SELECT w.name AS name FROM {from} WHERE {others} AND {column} > $3 || '/' AND {column} < $3 || '0' \
         LIMIT 1",
        placeholders.join(", ")
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(except_id).bind(except_name).bind(location);
    for candidate in &candidates {
        query = query.bind(candidate.as_str());
    }
    match query.fetch_optional(&mut *conn).await.map_err(db_error)? {
        Some(row) => Ok(Some(row.try_get("name").map_err(db_error)?)),
        None => Ok(None),
    }
}

/// Fails when `location`, a source location of warehouse `warehouse_id`, equals, lies inside or
/// contains another warehouse's storage root (under the lock warehouse creation takes, which
/// checks the other way round).
pub(crate) async fn check_source_free(
    store: &SqlStore,
    tx: &mut crate::WriteTx,
    warehouse_id: &str,
    location: &str,
) -> Result<(), CatalogError> {
    lock_roots(store, tx).await?;
    if let Some(other) = overlapping(&mut *tx, (Storage::Roots, (warehouse_id, "")), location).await? {
        return Err(CatalogError::Forbidden(format!(
            "source location {location} overlaps the storage of warehouse {other}"
        )));
    }
    Ok(())
}

/// Serialises warehouse creation, so two concurrent creates cannot both pass the root check.
/// PostgreSQL: a transaction-scoped advisory lock (released at commit or rollback). SQLite: the
/// transaction already holds the database's write lock (BEGIN IMMEDIATE).
async fn lock_roots(store: &SqlStore, tx: &mut crate::WriteTx) -> Result<(), CatalogError> {
    if store.backend == crate::Backend::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock(7598805577148362612)").execute(&mut **tx).await.map_err(db_error)?;
    }
    Ok(())
}

#[async_trait]
impl WarehouseStore for SqlStore {
    async fn create_warehouse(
        &self,
        write: &WriteContext,
        name: &WarehouseName,
        root: &StorageRoot,
        profile: &StorageProfile,
    ) -> Result<Warehouse, CatalogError> {
        let now = self.now_ms();
        let id = uuid::Uuid::new_v4().to_string();
        let mut tx = self.begin_write().await?;
        lock_roots(self, &mut tx).await?;
        check_root_free(&mut tx, name, root).await?;
        let result = sqlx::query(
            "INSERT INTO warehouses (id, name, storage_root, storage_profile, profile_version, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 1, $5, $5)",
        )
        .bind(&id)
        .bind(name.as_str())
        .bind(root.as_str())
        .bind(profile_json(profile)?)
        .bind(now)
        .execute(&mut *tx)
        .await;
        result.map_err(|e| {
            taken_or_failed(e, || CatalogError::AlreadyExists(format!("Warehouse already exists: {name}")))
        })?;
        let write = write.changing(serde_json::json!({
            "warehouse": name.as_str(), "warehouse-id": id, "storage-root": root.as_str(), "created": true,
        }));
        self.commit_write(tx, &write).await?;
        Ok(Warehouse {
            id: WarehouseId::new(id),
            name: name.clone(),
            storage_root: root.clone(),
            storage_profile: profile.clone(),
            profile_version: 1,
            settings: Default::default(),
            created_at_ms: now,
            updated_at_ms: now,
        })
    }

    async fn update_storage_profile(
        &self,
        write: &WriteContext,
        name: &WarehouseName,
        profile: &StorageProfile,
    ) -> Result<Warehouse, CatalogError> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "UPDATE warehouses SET storage_profile = $1, profile_version = profile_version + 1, updated_at = $2 \
             WHERE name = $3 \
             RETURNING id, name, storage_root, storage_profile, profile_version, settings, created_at, updated_at",
        )
        .bind(profile_json(profile)?)
        .bind(self.now_ms())
        .bind(name.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let updated = row.as_ref().map(from_row).transpose()?.ok_or_else(|| CatalogError::no_such_warehouse(name))?;
        let write = write.changing(serde_json::json!({
            "warehouse": name.as_str(), "profile-version": updated.profile_version,
        }));
        self.commit_write(tx, &write).await?;
        Ok(updated)
    }

    async fn update_warehouse_settings(
        &self,
        write: &WriteContext,
        name: &WarehouseName,
        settings: &icegate_catalog::store::WarehouseSettings,
    ) -> Result<Warehouse, CatalogError> {
        let document = serde_json::to_string(settings)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("serialising settings: {e}")))?;
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "UPDATE warehouses SET settings = $1, updated_at = $2 WHERE name = $3 \
             RETURNING id, name, storage_root, storage_profile, profile_version, settings, created_at, updated_at",
        )
        .bind(document)
        .bind(self.now_ms())
        .bind(name.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let updated = row.as_ref().map(from_row).transpose()?.ok_or_else(|| CatalogError::no_such_warehouse(name))?;
        let write = write.changing(serde_json::json!({ "warehouse": name.as_str(), "settings": settings }));
        self.commit_write(tx, &write).await?;
        Ok(updated)
    }

    async fn ensure_warehouse(
        &self,
        write: &WriteContext,
        name: &WarehouseName,
        root: &StorageRoot,
    ) -> Result<Warehouse, CatalogError> {
        if let Some(existing) = self.warehouse_by_name(name).await? {
            return Ok(existing);
        }
        let mut tx = self.begin_write().await?;
        lock_roots(self, &mut tx).await?;
        check_root_free(&mut tx, name, root).await?;
        // ON CONFLICT DO NOTHING: replicas starting at once each try, exactly one row results.
        let inserted = sqlx::query(
            "INSERT INTO warehouses (id, name, storage_root, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $4) ON CONFLICT (name) DO NOTHING",
        )
        .bind(uuid::Uuid::new_v4().to_string())
        .bind(name.as_str())
        .bind(root.as_str())
        .bind(self.now_ms())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if inserted.rows_affected() == 0 {
            // Another replica made it first: nothing changed here, nothing to record.
            tx.rollback().await.map_err(db_error)?;
        } else {
            let change =
                serde_json::json!({ "warehouse": name.as_str(), "storage-root": root.as_str(), "created": true });
            self.commit_write(tx, &write.changing(change)).await?;
        }
        self.warehouse_by_name(name).await?.ok_or_else(|| CatalogError::no_such_warehouse(name))
    }

    async fn list_warehouses(&self, visible_to: Option<&PrincipalId>) -> Result<Vec<Warehouse>, CatalogError> {
        let rows = match visible_to {
            None => sqlx::query(select_warehouses!(" ORDER BY name")).fetch_all(&self.pool).await,
            // Only warehouses the principal holds something in (a grant on the warehouse or below).
            Some(principal) => {
                let visible = &*crate::access::visible::WAREHOUSE;
                sqlx::query(sqlx::AssertSqlSafe(format!("{} WHERE {visible} ORDER BY name", select_warehouses!(""))))
                    .bind(principal.as_str())
                    .bind(self.now_ms())
                    .fetch_all(&self.pool)
                    .await
            }
        }
        .map_err(db_error)?;
        rows.iter().map(from_row).collect()
    }

    async fn warehouse_by_name(&self, name: &WarehouseName) -> Result<Option<Warehouse>, CatalogError> {
        let row = sqlx::query(select_warehouses!(" WHERE name = $1"))
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.as_ref().map(from_row).transpose()
    }

    async fn warehouse_by_id(&self, id: &WarehouseId) -> Result<Option<Warehouse>, CatalogError> {
        let row = sqlx::query(select_warehouses!(" WHERE id = $1"))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.as_ref().map(from_row).transpose()
    }

    async fn delete_warehouse(&self, write: &WriteContext, name: &WarehouseName) -> Result<(), CatalogError> {
        let mut tx = self.begin_write().await?;
        let id = sqlx::query("SELECT id FROM warehouses WHERE name = $1")
            .bind(name.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
        if let Some(row) = id {
            let id: String = row.try_get("id").map_err(db_error)?;
            if let Some(held) = crate::holds::covering(&mut *tx, &id, None, None).await? {
                return Err(held);
            }
        }
        // The namespaces foreign key refuses the delete while any namespace remains, atomically.
        match sqlx::query("DELETE FROM warehouses WHERE name = $1").bind(name.as_str()).execute(&mut *tx).await {
            Ok(done) if done.rows_affected() == 0 => return Err(CatalogError::no_such_warehouse(name)),
            Ok(_) => {}
            Err(e) if is_violation(&e, ErrorKind::ForeignKeyViolation) => {
                return Err(CatalogError::WarehouseNotEmpty(format!(
                    "Warehouse {name} still holds namespaces; drop them first"
                )));
            }
            Err(e) => return Err(db_error(e)),
        }
        self.commit_write(tx, write).await
    }
}
