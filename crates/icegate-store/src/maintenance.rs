//! What maintenance reads of the catalog (the tables in a scope) and the orphan quarantine
//! (`quarantined_files`): files an orphan scan found unreferenced wait there for their
//! quarantine to end; restored ones stay for good. Quarantining, restoring and deleting are
//! changes recorded in the audit trail as the task (or the admin) that made them.

use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::jobs::{MaintainedTable, QuarantineFilter, QuarantineState, QuarantinedFile};
use icegate_catalog::store::TabularKind;
use icegate_catalog::{NamespaceIdent, Result};
use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use crate::{SqlStore, audit, db_error};

const TABLE_COLUMNS: &str = "t.id, t.warehouse_id, n.name AS namespace, t.name, t.created_at";
const FILE_COLUMNS: &str =
    "tabular_id, location, size, modified_at, quarantined_at, delete_after, task_id, state, restored_by";

fn table_from(row: &AnyRow) -> Result<MaintainedTable> {
    let namespace: String = row.try_get("namespace").map_err(db_error)?;
    Ok(MaintainedTable {
        warehouse_id: row.try_get("warehouse_id").map_err(db_error)?,
        id: row.try_get("id").map_err(db_error)?,
        namespace: NamespaceIdent::parse_encoded(&namespace)?,
        name: row.try_get("name").map_err(db_error)?,
        created_at_ms: row.try_get("created_at").map_err(db_error)?,
    })
}

fn file_from(row: &AnyRow) -> Result<QuarantinedFile> {
    let state: String = row.try_get("state").map_err(db_error)?;
    let size: i64 = row.try_get("size").map_err(db_error)?;
    Ok(QuarantinedFile {
        tabular_id: row.try_get("tabular_id").map_err(db_error)?,
        location: row.try_get("location").map_err(db_error)?,
        size: u64::try_from(size).unwrap_or(0),
        modified_ms: row.try_get("modified_at").map_err(db_error)?,
        quarantined_at_ms: row.try_get("quarantined_at").map_err(db_error)?,
        delete_after_ms: row.try_get("delete_after").map_err(db_error)?,
        task_id: row.try_get("task_id").map_err(db_error)?,
        state: QuarantineState::parse(&state)?,
        restored_by: row.try_get("restored_by").map_err(db_error)?,
    })
}

fn change(table: &MaintainedTable, detail: serde_json::Value) -> audit::Change {
    audit::Change::tabular(
        &table.warehouse_id,
        (&table.namespace, &table.name),
        (&table.id, TabularKind::Table),
        detail,
    )
}

impl SqlStore {
    pub(crate) async fn tables_in_scope(
        &self,
        warehouse_id: &str,
        namespace: Option<&NamespaceIdent>,
        after_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<MaintainedTable>> {
        // A namespace and those below it: its encoded name, or that name and the separator first.
        let (exact, below) = match namespace {
            Some(ns) => (ns.encoded(), format!("{}{}", ns.encoded(), icegate_catalog::ident::NAMESPACE_SEPARATOR)),
            None => (String::new(), String::new()),
        };
        let sql = format!(
            "SELECT {TABLE_COLUMNS} FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
             WHERE t.warehouse_id = $1 AND t.kind = 'table' AND t.id > $2 \
             AND ($3 = '' OR n.name = $3 OR substr(n.name, 1, length($4)) = $4) \
             ORDER BY t.id LIMIT $5"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(warehouse_id)
            .bind(after_id.unwrap_or(""))
            .bind(exact)
            .bind(below)
            .bind(limit.max(0))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(table_from).collect()
    }

    pub(crate) async fn table_in_scope(&self, id: &str) -> Result<Option<MaintainedTable>> {
        let sql = format!(
            "SELECT {TABLE_COLUMNS} FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
             WHERE t.id = $1 AND t.kind = 'table'"
        );
        let row = sqlx::query(AssertSqlSafe(sql)).bind(id).fetch_optional(&self.pool).await.map_err(db_error)?;
        row.as_ref().map(table_from).transpose()
    }

    pub(crate) async fn locations_owned_since(&self, id: &str) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT location, created_at AS since FROM tabulars WHERE id = $1 \
             UNION ALL SELECT location, recorded_at AS since FROM tabular_locations WHERE tabular_id = $1",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        // A location found twice (a base location moved back) counts from the later time.
        let mut since: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
        for row in &rows {
            let location: String = row.try_get("location").map_err(db_error)?;
            let at: i64 = row.try_get("since").map_err(db_error)?;
            let entry = since.entry(location).or_insert(at);
            *entry = (*entry).max(at);
        }
        Ok(since.into_iter().collect())
    }

    pub(crate) async fn add_quarantined(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        files: &[QuarantinedFile],
    ) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let mut added = 0;
        for file in files {
            added += sqlx::query(
                "INSERT INTO quarantined_files (tabular_id, location, warehouse_id, size, modified_at, quarantined_at, \
                 delete_after, task_id, state) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'quarantined') \
                 ON CONFLICT (tabular_id, location) DO NOTHING",
            )
            .bind(&table.id)
            .bind(&file.location)
            .bind(&table.warehouse_id)
            .bind(i64::try_from(file.size).unwrap_or(i64::MAX))
            .bind(file.modified_ms)
            .bind(file.quarantined_at_ms)
            .bind(file.delete_after_ms)
            .bind(&file.task_id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        }
        if added == 0 {
            return Ok(0);
        }
        let detail =
            json!({ "orphans-quarantined": added, "delete-after-ms": files.first().map(|f| f.delete_after_ms) });
        self.commit_write_changed(tx, write, &change(table, detail), db_error).await?;
        Ok(added)
    }

    pub(crate) async fn quarantined_files(&self, filter: &QuarantineFilter) -> Result<Vec<QuarantinedFile>> {
        let (after_table, after_location) = filter.after.clone().unwrap_or_default();
        let sql = format!(
            "SELECT {FILE_COLUMNS} FROM quarantined_files WHERE warehouse_id = $1 \
             AND ($2 = '' OR tabular_id = $2) AND ($3 = '' OR state = $3) AND ($4 < 0 OR delete_after <= $4) \
             AND (tabular_id > $5 OR (tabular_id = $5 AND location > $6)) \
             ORDER BY tabular_id, location LIMIT $7"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(&filter.warehouse_id)
            .bind(filter.tabular_id.clone().unwrap_or_default())
            .bind(filter.state.map(QuarantineState::as_str).unwrap_or(""))
            .bind(filter.due_by_ms.unwrap_or(-1))
            .bind(after_table)
            .bind(after_location)
            .bind(filter.limit.max(0))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(file_from).collect()
    }

    pub(crate) async fn restore_files(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        locations: Option<&[String]>,
    ) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let by = write.principal.clone();
        let mut restored = 0;
        match locations {
            None => {
                restored = sqlx::query(
                    "UPDATE quarantined_files SET state = 'restored', restored_by = $2 \
                     WHERE tabular_id = $1 AND state = 'quarantined'",
                )
                .bind(&table.id)
                .bind(&by)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?
                .rows_affected();
            }
            Some(locations) => {
                for location in locations {
                    restored += sqlx::query(
                        "UPDATE quarantined_files SET state = 'restored', restored_by = $3 \
                         WHERE tabular_id = $1 AND location = $2 AND state = 'quarantined'",
                    )
                    .bind(&table.id)
                    .bind(location)
                    .bind(&by)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .rows_affected();
                }
            }
        }
        let detail = json!({ "orphans-restored": restored, "locations": locations });
        self.commit_write_changed(tx, write, &change(table, detail), db_error).await?;
        Ok(restored)
    }

    pub(crate) async fn forget_files(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        locations: &[String],
        deleted: Option<u64>,
    ) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let mut forgotten = 0;
        for location in locations {
            forgotten += sqlx::query(
                "DELETE FROM quarantined_files WHERE tabular_id = $1 AND location = $2 AND state = 'quarantined'",
            )
            .bind(&table.id)
            .bind(location)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        }
        match deleted {
            // What was deleted is recorded, file by file, with the bytes.
            Some(bytes) => {
                let detail = json!({ "orphans-deleted": locations.len(), "bytes": bytes, "locations": locations });
                self.commit_write_changed(tx, write, &change(table, detail), db_error).await?;
            }
            None => {
                let detail = json!({ "orphans-released": forgotten, "locations": locations });
                self.commit_write_changed(tx, write, &change(table, detail), db_error).await?;
            }
        }
        Ok(forgotten)
    }

    pub(crate) async fn record_files_deleted(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        detail: serde_json::Value,
    ) -> Result<()> {
        // A record alone, in a transaction of its own (the files are gone already).
        let tx = self.begin_write().await?;
        self.commit_write_changed(tx, write, &change(table, detail), db_error).await
    }

    pub(crate) async fn forget_quarantine_of_gone_tables(&self, limit: i64) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM quarantined_files WHERE tabular_id IN (SELECT DISTINCT q.tabular_id FROM quarantined_files q \
             WHERE NOT EXISTS (SELECT 1 FROM tabulars t WHERE t.id = q.tabular_id) \
             AND NOT EXISTS (SELECT 1 FROM deleted_tabulars d WHERE d.id = q.tabular_id) LIMIT $1)",
        )
        .bind(limit.max(0))
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(done.rows_affected())
    }
}
