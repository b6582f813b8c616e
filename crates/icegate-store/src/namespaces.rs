//! Namespace rows and their properties.

use async_trait::async_trait;
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::ids::{PrincipalId, WarehouseId};
use icegate_catalog::store::{NamespaceStore, Page, PageRequest, PropertiesChange};
use icegate_catalog::{CatalogError, NamespaceIdent, Properties};
use sqlx::error::ErrorKind;
use sqlx::{AssertSqlSafe, Row};

use crate::{SqlStore, constraint, db_error, fetch_count, is_violation, keyset_page, taken_or_failed};

/// Rows per multi-row INSERT: far below SQLite's and PostgreSQL's bind-parameter limits.
use crate::locations::id_of;

const PROPERTY_CHUNK: usize = 500;

/// Inserts or replaces properties of one namespace, a few hundred per statement.
async fn upsert_properties(
    tx: &mut crate::WriteTx,
    namespace_id: &str,
    properties: &Properties,
) -> Result<(), CatalogError> {
    let entries: Vec<(&String, &String)> = properties.iter().collect();
    for chunk in entries.chunks(PROPERTY_CHUNK) {
        // Built at run time because the number of rows varies; every value is a bind parameter.
        let mut sql = String::from("INSERT INTO namespace_properties (namespace_id, key, value) VALUES ");
        for i in 0..chunk.len() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("($1, ${}, ${})", 2 * i + 2, 2 * i + 3));
        }
        sql.push_str(" ON CONFLICT (namespace_id, key) DO UPDATE SET value = excluded.value");
        let mut query = sqlx::query(AssertSqlSafe(sql)).bind(namespace_id);
        for (key, value) in chunk {
            query = query.bind(key.as_str()).bind(value.as_str());
        }
        query.execute(&mut **tx).await.map_err(|e| {
            if is_violation(&e, ErrorKind::ForeignKeyViolation) {
                // The namespace was dropped concurrently.
                CatalogError::no_such_namespace(namespace_id)
            } else {
                db_error(e)
            }
        })?;
    }
    Ok(())
}

#[async_trait]
impl NamespaceStore for SqlStore {
    async fn create_namespace(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        properties: &Properties,
    ) -> Result<(), CatalogError> {
        let mut tx = self.begin_write().await?;
        // The namespace's directory (where its tables go by default) must not be, or lie inside,
        // a table's, view's or staged create's location (every create in it would overlap):
        // checked under the warehouse's lock, which creates and moves of tables take for the
        // same check (see `tabulars::check_namespace_dirs`).
        crate::locations::lock_warehouse(self, &mut tx, warehouse_id).await?;
        let root = crate::locations::storage_root(&mut tx, warehouse_id)
            .await?
            .ok_or_else(|| CatalogError::no_such_warehouse(warehouse_id))?;
        let dir = format!("{root}/{}", namespace.levels().join("/"));
        crate::locations::check_overlap(
            &mut tx,
            warehouse_id,
            &dir,
            crate::locations::Own { holders_only: true, ..Default::default() },
            self.now_ms(),
        )
        .await
        .map_err(|_| {
            CatalogError::bad_request(format!(
                "the directory of namespace {namespace} ({dir}) is or lies inside the location of a table or view"
            ))
        })?;
        let parent_id = match namespace.parent() {
            Some(parent) => Some(
                id_of(&mut *tx, warehouse_id, &parent)
                    .await?
                    .ok_or_else(|| CatalogError::no_such_namespace(&parent))?,
            ),
            None => None,
        };
        let id = uuid::Uuid::now_v7().to_string();
        let now = self.now_ms();
        let inserted = sqlx::query(
            "INSERT INTO namespaces (id, warehouse_id, parent_id, name, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $5)",
        )
        .bind(&id)
        .bind(warehouse_id.as_str())
        .bind(parent_id.as_deref())
        .bind(namespace.encoded())
        .bind(now)
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            // The parent (PostgreSQL only: SQLite's write lock rules the race out) or the warehouse
            // was deleted between our read and this insert.
            Err(e) if is_violation(&e, ErrorKind::ForeignKeyViolation) => {
                return Err(match (constraint(&e), namespace.parent()) {
                    (Some("namespaces_parent_fk"), Some(parent)) => CatalogError::no_such_namespace(parent),
                    _ => CatalogError::no_such_warehouse(warehouse_id),
                });
            }
            Err(e) => {
                return Err(taken_or_failed(e, || {
                    CatalogError::AlreadyExists(format!("Namespace already exists: {namespace}"))
                }));
            }
        }
        upsert_properties(&mut tx, &id, properties).await?;
        let change = crate::audit::Change::namespace(
            warehouse_id.as_str(),
            namespace,
            serde_json::json!({ "namespace-id": id, "created": true }),
        );
        self.commit_write_changed(tx, write, &change, db_error).await
    }

    async fn list_namespaces(
        &self,
        warehouse_id: &WarehouseId,
        parent: Option<&NamespaceIdent>,
        page: &PageRequest,
        visible_to: Option<&PrincipalId>,
    ) -> Result<Page<NamespaceIdent>, CatalogError> {
        let fetch = fetch_count(page);
        let after = page.after.clone().unwrap_or_default();
        let (scope, scope_value) = match parent {
            Some(parent) => (
                "n.parent_id = $1",
                id_of(&self.pool, warehouse_id, parent)
                    .await?
                    .ok_or_else(|| CatalogError::no_such_namespace(parent))?
                    .into_string(),
            ),
            None => ("n.warehouse_id = $1 AND n.parent_id IS NULL", warehouse_id.as_str().to_owned()),
        };
        // Only namespaces the principal holds something on or inside (`access::visible`).
        let visible =
            if visible_to.is_some() { format!(" AND {}", *crate::access::visible::NAMESPACE) } else { String::new() };
        // Assembled from constant fragments only; every value is a bind parameter.
        let sql =
            format!("SELECT n.name FROM namespaces n WHERE {scope} AND n.name > $2{visible} ORDER BY n.name LIMIT $3");
        let mut query = sqlx::query(AssertSqlSafe(sql)).bind(scope_value).bind(after).bind(fetch);
        if let Some(principal) = visible_to {
            query = query.bind(principal.as_str()).bind(self.now_ms()).bind("\u{1f}").bind("\u{20}");
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_error)?;
        let names: Vec<String> = rows.iter().map(|r| r.try_get("name")).collect::<Result<_, _>>().map_err(db_error)?;
        let Page { items, next_after } = keyset_page(names, page);
        let items = items
            .iter()
            .map(|n| NamespaceIdent::parse_encoded(n))
            .collect::<Result<_, _>>()
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("invalid namespace row: {e}")))?;
        Ok(Page { items, next_after })
    }

    async fn load_namespace(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
    ) -> Result<Option<Properties>, CatalogError> {
        // One round trip: the namespace row, joined with its properties if it has any.
        let rows = sqlx::query(
            "SELECT p.key, p.value FROM namespaces n \
             LEFT JOIN namespace_properties p ON p.namespace_id = n.id \
             WHERE n.warehouse_id = $1 AND n.name = $2",
        )
        .bind(warehouse_id.as_str())
        .bind(namespace.encoded())
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut properties = Properties::new();
        for row in rows {
            let key: Option<String> = row.try_get("key").map_err(db_error)?;
            let value: Option<String> = row.try_get("value").map_err(db_error)?;
            if let (Some(key), Some(value)) = (key, value) {
                properties.insert(key, value);
            }
        }
        Ok(Some(properties))
    }

    async fn namespace_exists(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
    ) -> Result<bool, CatalogError> {
        Ok(id_of(&self.pool, warehouse_id, namespace).await?.is_some())
    }

    async fn drop_namespace(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
    ) -> Result<(), CatalogError> {
        // The foreign keys of child namespaces, tables and views refuse the delete while anything
        // remains inside, atomically; properties go with the row (ON DELETE CASCADE).
        let mut tx = self.begin_write().await?;
        // Under the warehouse's lock, which staging takes too: a reservation made while the
        // namespace is being dropped would otherwise be deleted below without becoming a lease.
        crate::locations::lock_warehouse(self, &mut tx, warehouse_id).await?;
        if let Some(held) = crate::holds::covering(&mut *tx, warehouse_id.as_str(), Some(namespace), None).await? {
            return Err(held);
        }
        // Staged creates in it hold reservations: an unexpired one becomes a lease of the
        // warehouse (as a dropped table's locations do), so its location stays out of reach of
        // every table, view and namespace until the credentials vended for it expire, and no
        // longer keeps the namespace (which is empty, as the client sees it). The lease names no
        // table: no table registered later is let in by it. Expired reservations just go.
        let in_namespace = "namespace_id IN (SELECT id FROM namespaces WHERE warehouse_id = $1 AND name = $2)";
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO location_leases (warehouse_id, location, tabular_uuid, expires_at) \
             SELECT warehouse_id, location, 'staged:' || namespace_id, expires_at FROM location_reservations \
             WHERE expires_at > $3 AND {in_namespace}"
        )))
        .bind(warehouse_id.as_str())
        .bind(namespace.encoded())
        .bind(self.now_ms())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        sqlx::query(AssertSqlSafe(format!("DELETE FROM location_reservations WHERE {in_namespace}")))
            .bind(warehouse_id.as_str())
            .bind(namespace.encoded())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let result = sqlx::query("DELETE FROM namespaces WHERE warehouse_id = $1 AND name = $2")
            .bind(warehouse_id.as_str())
            .bind(namespace.encoded())
            .execute(&mut *tx)
            .await;
        match result {
            Ok(done) if done.rows_affected() == 0 => Err(CatalogError::no_such_namespace(namespace)),
            Ok(_) => {
                let change = crate::audit::Change::namespace(
                    warehouse_id.as_str(),
                    namespace,
                    serde_json::json!({ "dropped": true }),
                );
                self.commit_write_changed(tx, write, &change, db_error).await
            }
            Err(e) if is_violation(&e, ErrorKind::ForeignKeyViolation) => {
                Err(CatalogError::NamespaceNotEmpty(format!("Namespace {namespace} is not empty")))
            }
            Err(e) => Err(db_error(e)),
        }
    }

    async fn update_namespace_properties(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        updates: &Properties,
        removals: &[String],
    ) -> Result<PropertiesChange, CatalogError> {
        let mut tx = self.begin_write().await?;
        // No row lock: each key is its own row, so concurrent updates of different keys cannot
        // overwrite each other, and a concurrent drop makes the upsert fail its foreign key.
        let id = id_of(&mut *tx, warehouse_id, namespace)
            .await?
            .ok_or_else(|| CatalogError::no_such_namespace(namespace))?;
        let mut removed = Vec::new();
        for chunk in removals.chunks(PROPERTY_CHUNK) {
            // Built at run time because the number of keys varies; every key is a bind parameter.
            let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 2)).collect();
            let sql = format!(
                "DELETE FROM namespace_properties WHERE namespace_id = $1 AND key IN ({}) RETURNING key",
                placeholders.join(", ")
            );
            let mut query = sqlx::query(AssertSqlSafe(sql)).bind(id.as_str());
            for key in chunk {
                query = query.bind(key.as_str());
            }
            for row in query.fetch_all(&mut *tx).await.map_err(db_error)? {
                removed.push(row.try_get::<String, _>("key").map_err(db_error)?);
            }
        }
        upsert_properties(&mut tx, &id, updates).await.map_err(|e| match e {
            CatalogError::NotFound { .. } => CatalogError::no_such_namespace(namespace),
            other => other,
        })?;
        self.commit_write(tx, write).await?;
        removed.sort_unstable();
        let missing = removals.iter().filter(|k| removed.binary_search(k).is_err()).cloned().collect();
        Ok(PropertiesChange { updated: updates.keys().cloned().collect(), removed, missing })
    }
}
