//! What a migration keeps (migration 25): runs and their tables' state machines. Creating a run
//! and every change of state are changes recorded in the audit trail (as the warehouse's); a
//! change of state is a compare-and-swap on the state it moves from.

use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::migration::store::{Migration, MigrationTable, RunState, Step, TableState};
use icegate_catalog::{CatalogError, Result};
use serde_json::{Value, json};
use sqlx::any::AnyRow;
use sqlx::error::ErrorKind;
use sqlx::{AssertSqlSafe, Row};

use crate::{SqlStore, audit, db_error, is_violation};

const RUN_COLUMNS: &str = "id, target_warehouse_id, source_kind, source, selection, dry_run, state, report, \
                           created_at, created_by, updated_at";
const TABLE_COLUMNS: &str = "id, migration_id, kind, source_key, source_namespace, source_name, target_namespace, \
                             target_name, state, planned_location, fenced_location, fence, tabular_id, handed_back, \
                             report, error, updated_at";

fn parse_json(text: &str, what: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored migration {what}: {e}")))
}

fn levels(text: &str) -> Result<Vec<String>> {
    serde_json::from_str(text).map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored namespace: {e}")))
}

fn run_from(row: &AnyRow) -> Result<Migration> {
    let text = |name: &str| -> Result<String> { row.try_get(name).map_err(db_error) };
    let dry_run: i64 = row.try_get("dry_run").map_err(db_error)?;
    Ok(Migration {
        id: text("id")?,
        target_warehouse_id: text("target_warehouse_id")?,
        source_kind: text("source_kind")?,
        source: parse_json(&text("source")?, "source")?,
        selection: parse_json(&text("selection")?, "selection")?,
        dry_run: dry_run != 0,
        state: RunState::parse(&text("state")?)?,
        report: parse_json(&text("report")?, "report")?,
        created_at_ms: row.try_get("created_at").map_err(db_error)?,
        created_by: text("created_by")?,
        updated_at_ms: row.try_get("updated_at").map_err(db_error)?,
    })
}

fn table_from(row: &AnyRow) -> Result<MigrationTable> {
    let text = |name: &str| -> Result<String> { row.try_get(name).map_err(db_error) };
    let maybe = |name: &str| -> Result<Option<String>> { row.try_get(name).map_err(db_error) };
    Ok(MigrationTable {
        id: text("id")?,
        migration_id: text("migration_id")?,
        kind: text("kind")?,
        source_key: text("source_key")?,
        source_namespace: levels(&text("source_namespace")?)?,
        source_name: text("source_name")?,
        target_namespace: levels(&text("target_namespace")?)?,
        target_name: text("target_name")?,
        state: TableState::parse(&text("state")?)?,
        planned_location: maybe("planned_location")?,
        fenced_location: maybe("fenced_location")?,
        fence: maybe("fence")?.map(|f| parse_json(&f, "fence")).transpose()?,
        tabular_id: maybe("tabular_id")?,
        handed_back: maybe("handed_back")?,
        report: maybe("report")?.map(|r| parse_json(&r, "report")).transpose()?,
        error: maybe("error")?,
        updated_at_ms: row.try_get("updated_at").map_err(db_error)?,
    })
}

impl SqlStore {
    pub(crate) async fn insert_migration(
        &self,
        write: &WriteContext,
        migration: &Migration,
        tables: &[MigrationTable],
    ) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = tables.iter().find(|t| !seen.insert((&t.source_namespace, &t.source_name))) {
            return Err(CatalogError::bad_request(format!(
                "{}.{} is selected twice",
                twice.source_namespace.join("."),
                twice.source_name
            )));
        }
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO migrations (id, target_warehouse_id, source_kind, source, selection, dry_run, state, report, \
             created_at, created_by, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(&migration.id)
        .bind(&migration.target_warehouse_id)
        .bind(&migration.source_kind)
        .bind(migration.source.to_string())
        .bind(migration.selection.to_string())
        .bind(i64::from(migration.dry_run))
        .bind(migration.state.as_str())
        .bind(migration.report.to_string())
        .bind(migration.created_at_ms)
        .bind(&migration.created_by)
        .bind(migration.updated_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_violation(&e, ErrorKind::ForeignKeyViolation) {
                CatalogError::no_such_warehouse(&migration.target_warehouse_id)
            } else {
                db_error(e)
            }
        })?;
        for table in tables {
            let inserted = sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO migration_tables ({TABLE_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
            )))
            .bind(&table.id)
            .bind(&migration.id)
            .bind(&table.kind)
            .bind(&table.source_key)
            .bind(json!(table.source_namespace).to_string())
            .bind(&table.source_name)
            .bind(json!(table.target_namespace).to_string())
            .bind(&table.target_name)
            .bind(table.state.as_str())
            .bind(table.planned_location.as_deref())
            .bind(table.fenced_location.as_deref())
            .bind(table.fence.as_ref().map(Value::to_string))
            .bind(table.tabular_id.as_deref())
            .bind(table.handed_back.as_deref())
            .bind(table.report.as_ref().map(Value::to_string))
            .bind(table.error.as_deref())
            .bind(table.updated_at_ms)
            .execute(&mut *tx)
            .await;
            match inserted {
                Ok(_) => {}
                // Each object is once in a run (checked above): the one live migration per source
                // object is what refused it.
                Err(e) if is_violation(&e, ErrorKind::UniqueViolation) => {
                    return Err(CatalogError::Conflict(format!(
                        "{}.{} is in a migration that has not ended",
                        table.source_namespace.join("."),
                        table.source_name
                    )));
                }
                Err(e) => return Err(db_error(e)),
            }
        }
        let detail = json!({
            "migration-created": migration.id,
            "source-kind": migration.source_kind,
            "tables": tables.len(),
            "dry-run": migration.dry_run,
        });
        let change = audit::Change::warehouse(&migration.target_warehouse_id, detail);
        self.commit_write_changed(tx, write, &change, db_error).await
    }

    pub(crate) async fn find_migration(&self, id: &str) -> Result<Option<Migration>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM migrations WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql)).bind(id).fetch_optional(&self.pool).await.map_err(db_error)?;
        row.as_ref().map(run_from).transpose()
    }

    pub(crate) async fn list_migrations(
        &self,
        warehouse_id: Option<&str>,
        after_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Migration>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM migrations WHERE ($1 = '' OR target_warehouse_id = $1) AND id > $2 \
             ORDER BY id LIMIT $3"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(warehouse_id.unwrap_or(""))
            .bind(after_id.unwrap_or(""))
            .bind(limit.max(0))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(run_from).collect()
    }

    pub(crate) async fn list_migration_tables(&self, migration_id: &str) -> Result<Vec<MigrationTable>> {
        let sql = format!("SELECT {TABLE_COLUMNS} FROM migration_tables WHERE migration_id = $1 ORDER BY id");
        let rows = sqlx::query(AssertSqlSafe(sql)).bind(migration_id).fetch_all(&self.pool).await.map_err(db_error)?;
        rows.iter().map(table_from).collect()
    }

    pub(crate) async fn update_migration_table(
        &self,
        write: &WriteContext,
        id: &str,
        (from, to): (TableState, TableState),
        step: &Step,
        now_ms: i64,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "SELECT m.target_warehouse_id, t.migration_id, t.source_namespace, t.source_name \
             FROM migration_tables t JOIN migrations m ON m.id = t.migration_id WHERE t.id = $1 AND t.state = $2",
        )
        .bind(id)
        .bind(from.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let Some(row) = row else { return Ok(false) };
        let updated = sqlx::query(
            "UPDATE migration_tables SET state = $1, fenced_location = COALESCE($2, fenced_location), \
             fence = COALESCE($3, fence), tabular_id = COALESCE($4, tabular_id), \
             handed_back = COALESCE($5, handed_back), report = COALESCE($6, report), error = $7, updated_at = $8 \
             WHERE id = $9 AND state = $10",
        )
        .bind(to.as_str())
        .bind(step.fenced_location.as_deref())
        .bind(step.fence.as_ref().map(Value::to_string))
        .bind(step.tabular_id.as_deref())
        .bind(step.handed_back.as_deref())
        .bind(step.report.as_ref().map(Value::to_string))
        .bind(step.error.as_deref())
        .bind(now_ms)
        .bind(id)
        .bind(from.as_str())
        .execute(&mut *tx)
        .await;
        let updated = match updated {
            Ok(done) => done.rows_affected(),
            // Back to live (a retry of a failed table) while another run moves the same object.
            Err(e) if is_violation(&e, ErrorKind::UniqueViolation) => {
                return Err(CatalogError::Conflict(
                    "this table's source object is in another migration that has not ended".into(),
                ));
            }
            Err(e) => return Err(db_error(e)),
        };
        if updated == 0 {
            return Ok(false);
        }
        let warehouse_id: String = row.try_get("target_warehouse_id").map_err(db_error)?;
        let migration_id: String = row.try_get("migration_id").map_err(db_error)?;
        let namespace: String = row.try_get("source_namespace").map_err(db_error)?;
        let name: String = row.try_get("source_name").map_err(db_error)?;
        let detail = json!({
            "migration": migration_id,
            "migration-table": id,
            "source": { "namespace": levels(&namespace)?, "name": name },
            "from": from.as_str(),
            "to": to.as_str(),
            "fenced-location": step.fenced_location,
            "tabular-id": step.tabular_id,
            "handed-back": step.handed_back,
            "error": step.error,
        });
        self.commit_write_changed(tx, write, &audit::Change::warehouse(&warehouse_id, detail), db_error).await?;
        Ok(true)
    }

    pub(crate) async fn update_migration_state(
        &self,
        write: &WriteContext,
        id: &str,
        (from, to): (RunState, RunState),
        report: Option<&Value>,
        now_ms: i64,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let warehouse: Option<String> =
            sqlx::query_scalar("SELECT target_warehouse_id FROM migrations WHERE id = $1 AND state = $2")
                .bind(id)
                .bind(from.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        let Some(warehouse_id) = warehouse else { return Ok(false) };
        sqlx::query(
            "UPDATE migrations SET state = $1, report = COALESCE($2, report), updated_at = $3 \
             WHERE id = $4 AND state = $5",
        )
        .bind(to.as_str())
        .bind(report.map(Value::to_string))
        .bind(now_ms)
        .bind(id)
        .bind(from.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        let detail = json!({ "migration": id, "from": from.as_str(), "to": to.as_str() });
        self.commit_write_changed(tx, write, &audit::Change::warehouse(&warehouse_id, detail), db_error).await?;
        Ok(true)
    }
}
