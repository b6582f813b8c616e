//! Legal holds: placing, listing and lifting them, and the check every drop, purge, move out of
//! a namespace and warehouse deletion makes in its own transaction.
//!
//! A hold on a warehouse covers everything in it, on a namespace everything in it and below it,
//! on a table or view that object (by id: it follows renames). Placing a hold and a drop of what
//! it covers are ordered by the database: a hold on a table references its row, which a drop
//! locks and deletes (the reference then fails, or the drop sees the hold); a hold on a container
//! that commits after a drop read no hold is ordered after the drop, as if placed a moment later.

use icegate_catalog::access::SecurableRef;
use icegate_catalog::holds::HoldRecord;
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::ident::NAMESPACE_SEPARATOR;
use icegate_catalog::{CatalogError, NamespaceIdent, Result};
use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};

use crate::{SqlStore, db_error, is_violation};

/// The first hold (by when it was placed) that covers a table or view (`tabular_id`), a
/// namespace (`namespace`, with the tabular's namespace for a table), or anything in the
/// warehouse (neither given): the reason the change is refused.
pub(crate) async fn covering<'e, E>(
    executor: E,
    warehouse_id: &str,
    namespace: Option<&NamespaceIdent>,
    tabular_id: Option<&str>,
) -> Result<Option<CatalogError>>
where
    E: Executor<'e, Database = Any>,
{
    let everything = namespace.is_none() && tabular_id.is_none();
    let row = sqlx::query(
        "SELECT h.securable_type FROM legal_holds h \
         LEFT JOIN namespaces hn ON hn.id = h.namespace_id \
         WHERE h.warehouse_id = $1 AND ($6 = 1 OR h.securable_type = 'warehouse' \
           OR ($3 <> '' AND h.tabular_id = $3) \
           OR (h.securable_type = 'namespace' AND $2 <> '' \
               AND (hn.name = $2 OR ($2 >= hn.name || $4 AND $2 < hn.name || $5)))) \
         ORDER BY h.placed_at, h.id LIMIT 1",
    )
    .bind(warehouse_id)
    .bind(namespace.map(NamespaceIdent::encoded).unwrap_or_default())
    .bind(tabular_id.unwrap_or_default())
    .bind(NAMESPACE_SEPARATOR.to_string())
    .bind(" ")
    .bind(i32::from(everything))
    .fetch_optional(executor)
    .await
    .map_err(db_error)?;
    let Some(row) = row else { return Ok(None) };
    // Which hold, and why, is for those who may list holds (GET /management/v1/legal-holds): a
    // principal refused here may hold no more than a grant on a table below it.
    let kind: String = row.try_get("securable_type").map_err(db_error)?;
    let on = if tabular_id.is_some() && matches!(kind.as_str(), "table" | "view") { "it" } else { "a container of it" };
    Ok(Some(CatalogError::Conflict(format!(
        "a legal hold on {on} stands: nothing held is dropped, replaced, purged, moved out of its namespace or \
         has files deleted until the hold is lifted"
    ))))
}

const HOLD_SELECT: &str = "SELECT h.id, h.securable_type, w.name AS warehouse, COALESCE(tn.name, n.name) AS namespace, \
     t.name AS tabular, h.reason, h.placed_by, h.placed_at, h.lift_requested_by, h.lift_requested_by_id, h.lift_requested_at \
     FROM legal_holds h JOIN warehouses w ON w.id = h.warehouse_id \
     LEFT JOIN namespaces n ON n.id = h.namespace_id LEFT JOIN tabulars t ON t.id = h.tabular_id \
     LEFT JOIN namespaces tn ON tn.id = t.namespace_id";

fn hold_from(row: &AnyRow) -> Result<HoldRecord> {
    Ok(HoldRecord {
        id: row.try_get("id").map_err(db_error)?,
        securable: crate::access::securable_of(row)?,
        reason: row.try_get("reason").map_err(db_error)?,
        placed_by: row.try_get("placed_by").map_err(db_error)?,
        placed_at_ms: row.try_get("placed_at").map_err(db_error)?,
        lift_requested_by: row.try_get("lift_requested_by").map_err(db_error)?,
        lift_requested_by_id: row.try_get("lift_requested_by_id").map_err(db_error)?,
        lift_requested_at_ms: row.try_get("lift_requested_at").map_err(db_error)?,
    })
}

impl SqlStore {
    pub(crate) async fn insert_hold(
        &self,
        write: &WriteContext,
        securable: &SecurableRef,
        reason: &str,
        placed_by: &str,
    ) -> Result<HoldRecord> {
        let resolved = self.resolve_securable(securable).await?;
        let id = uuid::Uuid::now_v7().to_string();
        let mut tx = self.begin_write().await?;
        let inserted = sqlx::query(
            "INSERT INTO legal_holds (id, securable_type, warehouse_id, namespace_id, tabular_id, reason, placed_by, placed_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&id)
        .bind(securable.kind.as_str())
        .bind(resolved.0)
        .bind(resolved.1)
        .bind(resolved.2)
        .bind(reason)
        .bind(placed_by)
        .bind(self.now_ms())
        .execute(&mut *tx)
        .await;
        if let Err(e) = inserted {
            // What it was to hold was dropped since it was looked up.
            if is_violation(&e, sqlx::error::ErrorKind::ForeignKeyViolation) {
                return Err(CatalogError::NotFound {
                    kind: icegate_catalog::ObjectKind::AccessControl,
                    message: "the object to hold no longer exists".into(),
                });
            }
            return Err(db_error(e));
        }
        let write = write.changing(serde_json::json!({
            "legal-hold": id, "placed": true, "securable": icegate_catalog::reviews::Named::from(securable),
            "reason": reason,
        }));
        self.commit_write(tx, &write).await?;
        self.read_hold(&id).await?.ok_or_else(|| CatalogError::Conflict(format!("legal hold {id} was lifted already")))
    }

    /// The ids a held securable names: warehouse, namespace, table or view.
    async fn resolve_securable(&self, securable: &SecurableRef) -> Result<(String, Option<String>, Option<String>)> {
        let resolved = self.resolve(securable, None).await?;
        Ok((resolved.warehouse_id.unwrap_or_default(), resolved.namespace_id, resolved.tabular_id))
    }

    pub(crate) async fn read_hold(&self, id: &str) -> Result<Option<HoldRecord>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!("{HOLD_SELECT} WHERE h.id = $1")))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.as_ref().map(hold_from).transpose()
    }

    pub(crate) async fn read_holds(&self, warehouse: Option<&str>) -> Result<Vec<HoldRecord>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{HOLD_SELECT} WHERE ($1 IS NULL OR w.name = $1) ORDER BY h.placed_at, h.id"
        )))
        .bind(warehouse.map(str::to_owned))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(hold_from).collect()
    }

    /// Asks for the hold to be lifted (the first of two admins): only when nobody asked yet.
    pub(crate) async fn ask_lift(
        &self,
        write: &WriteContext,
        id: &str,
        (by_id, by): (&str, &str),
        replacing: Option<&str>,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let asked = sqlx::query(
            "UPDATE legal_holds SET lift_requested_by = $1, lift_requested_by_id = $2, lift_requested_at = $3 \
             WHERE id = $4 AND (lift_requested_by_id IS NULL OR lift_requested_by_id = $5)",
        )
        .bind(by)
        .bind(by_id)
        .bind(self.now_ms())
        .bind(id)
        .bind(replacing.map(str::to_owned))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if asked.rows_affected() == 0 {
            let _ = tx.rollback().await;
            return Ok(false);
        }
        let write =
            write.changing(serde_json::json!({ "legal-hold": id, "lift-requested": true, "replacing": replacing }));
        self.commit_write(tx, &write).await?;
        Ok(true)
    }

    /// Lifts the hold; with `approving`, only if that admin asked for it (and nobody changed
    /// the request since).
    pub(crate) async fn remove_hold(&self, write: &WriteContext, id: &str, approving: Option<&str>) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let removed =
            sqlx::query("DELETE FROM legal_holds WHERE id = $1 AND ($2 IS NULL OR lift_requested_by_id = $2)")
                .bind(id)
                .bind(approving.map(str::to_owned))
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        if removed.rows_affected() == 0 {
            let _ = tx.rollback().await;
            return Ok(false);
        }
        let write = write.changing(serde_json::json!({
            "legal-hold": id, "lifted": true, "requested-by-id": approving,
        }));
        self.commit_write(tx, &write).await?;
        Ok(true)
    }
}
