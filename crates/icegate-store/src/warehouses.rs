//! Warehouse rows.

use icegate_catalog::storage::StorageProfile;
use icegate_catalog::store::Warehouse;
use icegate_catalog::{CatalogError, StorageRoot, WarehouseName};
use sqlx::Row;
use sqlx::any::AnyRow;
use sqlx::error::ErrorKind;

use crate::{SqlStore, db_error, is_violation, now_ms};

/// A `SELECT` of every warehouse column, followed by `$tail` (a string literal).
macro_rules! select_warehouses {
    ($tail:literal) => {
        concat!(
            "SELECT id, name, storage_root, storage_profile, profile_version, created_at, updated_at FROM warehouses",
            $tail
        )
    };
}

fn from_row(row: &AnyRow) -> Result<Warehouse, CatalogError> {
    let corrupt = |e: CatalogError| CatalogError::Internal(anyhow::anyhow!("invalid warehouse row: {e}"));
    Ok(Warehouse {
        id: row.try_get("id").map_err(db_error)?,
        name: WarehouseName::parse(&row.try_get::<String, _>("name").map_err(db_error)?).map_err(corrupt)?,
        storage_root: StorageRoot::parse(&row.try_get::<String, _>("storage_root").map_err(db_error)?)
            .map_err(corrupt)?,
        storage_profile: serde_json::from_str(&row.try_get::<String, _>("storage_profile").map_err(db_error)?)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("invalid storage profile in a warehouse row: {e}")))?,
        profile_version: row.try_get("profile_version").map_err(db_error)?,
        created_at_ms: row.try_get("created_at").map_err(db_error)?,
        updated_at_ms: row.try_get("updated_at").map_err(db_error)?,
    })
}

fn profile_json(profile: &StorageProfile) -> Result<String, CatalogError> {
    serde_json::to_string(profile).map_err(|e| CatalogError::Internal(anyhow::anyhow!("serialising a profile: {e}")))
}

pub(crate) async fn create(
    store: &SqlStore,
    name: &WarehouseName,
    root: &StorageRoot,
    profile: &StorageProfile,
) -> Result<Warehouse, CatalogError> {
    let now = now_ms();
    let id = uuid::Uuid::new_v4().to_string();
    let result = sqlx::query(
        "INSERT INTO warehouses (id, name, storage_root, storage_profile, profile_version, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 1, $5, $5)",
    )
    .bind(&id)
    .bind(name.as_str())
    .bind(root.as_str())
    .bind(profile_json(profile)?)
    .bind(now)
    .execute(&store.pool)
    .await;
    match result {
        Ok(_) => Ok(Warehouse {
            id,
            name: name.clone(),
            storage_root: root.clone(),
            storage_profile: profile.clone(),
            profile_version: 1,
            created_at_ms: now,
            updated_at_ms: now,
        }),
        Err(e) if is_violation(&e, ErrorKind::UniqueViolation) => {
            Err(CatalogError::AlreadyExists(format!("Warehouse already exists: {name}")))
        }
        Err(e) => Err(db_error(e)),
    }
}

pub(crate) async fn ensure(
    store: &SqlStore,
    name: &WarehouseName,
    root: &StorageRoot,
) -> Result<Warehouse, CatalogError> {
    // ON CONFLICT DO NOTHING: replicas starting at once each try, exactly one row results.
    sqlx::query(
        "INSERT INTO warehouses (id, name, storage_root, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $4) ON CONFLICT (name) DO NOTHING",
    )
    .bind(uuid::Uuid::new_v4().to_string())
    .bind(name.as_str())
    .bind(root.as_str())
    .bind(now_ms())
    .execute(&store.pool)
    .await
    .map_err(db_error)?;
    by_name(store, name).await?.ok_or_else(|| CatalogError::no_such_warehouse(name))
}

pub(crate) async fn update_profile(
    store: &SqlStore,
    name: &WarehouseName,
    profile: &StorageProfile,
) -> Result<Warehouse, CatalogError> {
    let row = sqlx::query(
        "UPDATE warehouses SET storage_profile = $1, profile_version = profile_version + 1, updated_at = $2 \
         WHERE name = $3 \
         RETURNING id, name, storage_root, storage_profile, profile_version, created_at, updated_at",
    )
    .bind(profile_json(profile)?)
    .bind(now_ms())
    .bind(name.as_str())
    .fetch_optional(&store.pool)
    .await
    .map_err(db_error)?;
    row.as_ref().map(from_row).transpose()?.ok_or_else(|| CatalogError::no_such_warehouse(name))
}

pub(crate) async fn list(store: &SqlStore, visible_to: Option<&str>) -> Result<Vec<Warehouse>, CatalogError> {
    let rows = match visible_to {
        None => sqlx::query(select_warehouses!(" ORDER BY name")).fetch_all(&store.pool).await,
        // Only warehouses the principal holds something in (a grant on the warehouse or below).
        Some(principal) => {
            sqlx::query(select_warehouses!(
                " WHERE EXISTS (SELECT 1 FROM grants g JOIN role_members m ON m.role_id = g.role_id \
              WHERE m.principal_id = $1 AND (g.expires_at IS NULL OR g.expires_at > $2) \
              AND g.warehouse_id = warehouses.id) ORDER BY name"
            ))
            .bind(principal)
            .bind(now_ms())
            .fetch_all(&store.pool)
            .await
        }
    }
    .map_err(db_error)?;
    rows.iter().map(from_row).collect()
}

pub(crate) async fn by_name(store: &SqlStore, name: &WarehouseName) -> Result<Option<Warehouse>, CatalogError> {
    let row = sqlx::query(select_warehouses!(" WHERE name = $1"))
        .bind(name.as_str())
        .fetch_optional(&store.pool)
        .await
        .map_err(db_error)?;
    row.as_ref().map(from_row).transpose()
}

pub(crate) async fn by_id(store: &SqlStore, id: &str) -> Result<Option<Warehouse>, CatalogError> {
    let row = sqlx::query(select_warehouses!(" WHERE id = $1"))
        .bind(id)
        .fetch_optional(&store.pool)
        .await
        .map_err(db_error)?;
    row.as_ref().map(from_row).transpose()
}

pub(crate) async fn delete(store: &SqlStore, name: &WarehouseName) -> Result<(), CatalogError> {
    // The namespaces foreign key refuses the delete while any namespace remains, atomically.
    match sqlx::query("DELETE FROM warehouses WHERE name = $1").bind(name.as_str()).execute(&store.pool).await {
        Ok(done) if done.rows_affected() == 0 => Err(CatalogError::no_such_warehouse(name)),
        Ok(_) => Ok(()),
        Err(e) if is_violation(&e, ErrorKind::ForeignKeyViolation) => {
            Err(CatalogError::WarehouseNotEmpty(format!("Warehouse {name} still holds namespaces; drop them first")))
        }
        Err(e) => Err(db_error(e)),
    }
}
