//! The task queue (`icegate_catalog::jobs::TaskStore`): claims are single statements, so two
//! workers never hold one task: PostgreSQL picks the row with `FOR UPDATE SKIP LOCKED` (a row
//! another worker is claiming is passed over, not waited for); SQLite runs one write at a time.
//! Every change a worker makes names its lease (`lease_owner`), so a worker whose task was
//! claimed again after its lease expired changes nothing.

use async_trait::async_trait;
use icegate_catalog::NamespaceIdent;
use icegate_catalog::adoption::store::{AdoptedFile, Adoption, AdoptionRun, SourceLocation};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::jobs::{
    Finish, MaintainedTable, NewTask, Progress, QuarantineFilter, QuarantinedFile, TaskFilter, TaskRecord, TaskState,
    TaskStore,
};
use icegate_catalog::migration::store::{Migration, MigrationTable, RunState, Step, TableState};
use icegate_catalog::{CatalogError, Result};
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use crate::{Backend, SqlStore, db_error};

const COLUMNS: &str = "id, kind, warehouse_id, tabular_id, dedupe_key, state, attempts, max_attempts, not_before, \
     lease_owner, lease_expires_at, heartbeat_at, progress_done, progress_total, progress_bytes, checkpoint, params, \
     result, last_error, reason, created_at, updated_at, finished_at";

fn json_column(row: &AnyRow, column: &str) -> Result<Option<Value>> {
    let text: Option<String> = row.try_get(column).map_err(db_error)?;
    text.map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("task column {column} is not JSON: {e}")))
}

fn task_from(row: &AnyRow) -> Result<TaskRecord> {
    let get_i64 = |column: &str| -> Result<i64> { row.try_get(column).map_err(db_error) };
    let get_opt_i64 = |column: &str| -> Result<Option<i64>> { row.try_get(column).map_err(db_error) };
    let get_opt = |column: &str| -> Result<Option<String>> { row.try_get(column).map_err(db_error) };
    let state: String = row.try_get("state").map_err(db_error)?;
    Ok(TaskRecord {
        id: row.try_get("id").map_err(db_error)?,
        kind: row.try_get("kind").map_err(db_error)?,
        warehouse_id: get_opt("warehouse_id")?,
        tabular_id: get_opt("tabular_id")?,
        dedupe_key: get_opt("dedupe_key")?,
        state: TaskState::parse(&state)?,
        attempts: i32::try_from(get_i64("attempts")?).unwrap_or(i32::MAX),
        max_attempts: i32::try_from(get_i64("max_attempts")?).unwrap_or(i32::MAX),
        not_before_ms: get_i64("not_before")?,
        lease_owner: get_opt("lease_owner")?,
        lease_expires_at_ms: get_opt_i64("lease_expires_at")?,
        heartbeat_at_ms: get_opt_i64("heartbeat_at")?,
        progress: Progress {
            done: get_i64("progress_done")?,
            total: get_opt_i64("progress_total")?,
            bytes: get_i64("progress_bytes")?,
        },
        checkpoint: json_column(row, "checkpoint")?,
        params: json_column(row, "params")?.unwrap_or(Value::Null),
        result: json_column(row, "result")?,
        last_error: get_opt("last_error")?,
        reason: row.try_get("reason").map_err(db_error)?,
        created_at_ms: get_i64("created_at")?,
        updated_at_ms: get_i64("updated_at")?,
        finished_at_ms: get_opt_i64("finished_at")?,
    })
}

/// Whether the kind list is one that can be put into SQL as literals (kinds are the runner's
/// own constants; anything else is refused rather than quoted).
fn kinds_sql(kinds: &[&str]) -> Result<String> {
    if let Some(bad) =
        kinds.iter().find(|k| k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    {
        return Err(CatalogError::Internal(anyhow::anyhow!("invalid task kind {bad:?}")));
    }
    Ok(kinds.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", "))
}

#[async_trait]
impl TaskStore for SqlStore {
    async fn enqueue(&self, task: &NewTask, now_ms: i64) -> Result<Option<TaskRecord>> {
        let sql = format!(
            "INSERT INTO tasks (id, kind, warehouse_id, tabular_id, dedupe_key, state, attempts, max_attempts, \
             not_before, params, reason, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, 'queued', 0, $6, $7, $8, $9, $10, $10) \
             ON CONFLICT DO NOTHING RETURNING {COLUMNS}"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(uuid::Uuid::now_v7().to_string())
            .bind(&task.kind)
            .bind(task.warehouse_id.clone())
            .bind(task.tabular_id.clone())
            .bind(task.dedupe_key.clone())
            .bind(i64::from(task.max_attempts.max(1)))
            .bind(task.not_before_ms)
            .bind(task.params.to_string())
            .bind(&task.reason)
            .bind(now_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        if row.is_none()
            && task.rerun_if_running
            && let Some(key) = &task.dedupe_key
        {
            // Running: one more run when it ends. Queued: due no later than this one asks.
            sqlx::query(
                "UPDATE tasks SET \
                 rerun_at = CASE WHEN state = 'running' AND (rerun_at IS NULL OR rerun_at > $2) THEN $2 ELSE rerun_at END, \
                 not_before = CASE WHEN state = 'queued' AND not_before > $2 THEN $2 ELSE not_before END \
                 WHERE dedupe_key = $1 AND state IN ('queued', 'running')",
            )
            .bind(key)
            .bind(task.not_before_ms)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        }
        row.as_ref().map(task_from).transpose()
    }

    async fn claim(&self, kinds: &[&str], owner: &str, now_ms: i64, lease_ms: i64) -> Result<Option<TaskRecord>> {
        if kinds.is_empty() {
            return Ok(None);
        }
        let kinds = kinds_sql(kinds)?;
        // Idle workers only read: nothing due, nothing written. (On SQLite a write, even one
        // that changes no row, takes the database's write lock, which the commits' group
        // committer then waits for: polling with writes made commits slower.)
        let due = sqlx::query(AssertSqlSafe(format!(
            "SELECT 1 AS due FROM tasks WHERE kind IN ({kinds}) \
             AND ((state = 'queued' AND not_before <= $1) OR (state = 'running' AND lease_expires_at < $1)) LIMIT 1"
        )))
        .bind(now_ms)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        if due.is_none() {
            return Ok(None);
        }
        // This process's writers take turns (SQLite), rather than meet in the busy handler.
        let _turn = self.write_turn().await;
        // A task whose worker went away on its last attempt fails rather than run again.
        sqlx::query(AssertSqlSafe(format!(
            "UPDATE tasks SET state = 'failed', lease_owner = NULL, updated_at = $1, finished_at = $1, \
             last_error = COALESCE(last_error || '; ', '') || 'its worker stopped (lease expired) on its last attempt' \
             WHERE state = 'running' AND lease_expires_at < $1 AND attempts >= max_attempts AND kind IN ({kinds})"
        )))
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        let lock = if self.backend == Backend::Postgres { "FOR UPDATE SKIP LOCKED" } else { "" };
        let sql = format!(
            "UPDATE tasks SET state = 'running', attempts = attempts + 1, lease_owner = $1, \
             lease_expires_at = $2 + $3, heartbeat_at = $2, updated_at = $2 \
             WHERE id = (SELECT id FROM tasks WHERE kind IN ({kinds}) AND attempts < max_attempts \
               AND ((state = 'queued' AND not_before <= $2) OR (state = 'running' AND lease_expires_at < $2)) \
               ORDER BY not_before, id LIMIT 1 {lock}) \
             RETURNING {COLUMNS}"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(owner)
            .bind(now_ms)
            .bind(lease_ms)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.as_ref().map(task_from).transpose()
    }

    async fn heartbeat(
        &self,
        id: &str,
        owner: &str,
        (now_ms, lease_ms): (i64, i64),
        progress: Progress,
        checkpoint: Option<&Value>,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE tasks SET lease_expires_at = $3 + $4, heartbeat_at = $3, updated_at = $3, progress_done = $5, \
             progress_total = $6, progress_bytes = $7, checkpoint = COALESCE($8, checkpoint) \
             WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
        )
        .bind(id)
        .bind(owner)
        .bind(now_ms)
        .bind(lease_ms)
        .bind(progress.done)
        .bind(progress.total)
        .bind(progress.bytes)
        .bind(checkpoint.map(Value::to_string))
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn finish(&self, id: &str, owner: &str, outcome: &Finish, now_ms: i64) -> Result<bool> {
        let query = match outcome {
            Finish::Done(result) => sqlx::query(
                "UPDATE tasks SET state = 'done', result = $3, lease_owner = NULL, updated_at = $4, finished_at = $4 \
                 WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
            )
            .bind(id)
            .bind(owner)
            .bind(result.to_string())
            .bind(now_ms),
            Finish::Failed(error) => sqlx::query(
                "UPDATE tasks SET state = 'failed', last_error = $3, lease_owner = NULL, updated_at = $4, \
                 finished_at = $4 WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
            )
            .bind(id)
            .bind(owner)
            .bind(error.clone())
            .bind(now_ms),
            Finish::Retry { error, not_before_ms } => sqlx::query(
                "UPDATE tasks SET state = CASE WHEN attempts < max_attempts THEN 'queued' ELSE 'failed' END, \
                 finished_at = CASE WHEN attempts < max_attempts THEN NULL ELSE $4 END, \
                 not_before = $5, last_error = $3, lease_owner = NULL, updated_at = $4 \
                 WHERE id = $1 AND lease_owner = $2 AND state = 'running'",
            )
            .bind(id)
            .bind(owner)
            .bind(error.clone())
            .bind(now_ms)
            .bind(*not_before_ms),
        };
        let mut tx = self.begin_write().await?;
        let done = query.execute(&mut *tx).await.map_err(db_error)?;
        if done.rows_affected() == 1 && !matches!(outcome, Finish::Retry { .. }) {
            // The rerun asked for while it ran (see `enqueue`).
            sqlx::query(
                "INSERT INTO tasks (id, kind, warehouse_id, tabular_id, dedupe_key, state, attempts, max_attempts, \
                 not_before, params, reason, created_at, updated_at) \
                 SELECT $2, kind, warehouse_id, tabular_id, dedupe_key, 'queued', 0, max_attempts, rerun_at, params, \
                 reason, $3, $3 FROM tasks WHERE id = $1 AND rerun_at IS NOT NULL ON CONFLICT DO NOTHING",
            )
            .bind(id)
            .bind(uuid::Uuid::now_v7().to_string())
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn cancel(&self, id: &str, now_ms: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE tasks SET state = 'cancelled', updated_at = $2, finished_at = $2 \
             WHERE id = $1 AND state IN ('queued', 'running')",
        )
        .bind(id)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn task(&self, id: &str) -> Result<Option<TaskRecord>> {
        let row = sqlx::query(AssertSqlSafe(format!("SELECT {COLUMNS} FROM tasks WHERE id = $1")))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.as_ref().map(task_from).transpose()
    }

    async fn remove_ended_tasks(&self, before_ms: i64, limit: i64) -> Result<u64> {
        let removed = sqlx::query(
            "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks \
             WHERE state IN ('done', 'failed', 'cancelled') AND finished_at < $1 ORDER BY id LIMIT $2)",
        )
        .bind(before_ms)
        .bind(limit)
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(removed.rows_affected())
    }

    async fn task_counts(&self) -> Result<Vec<(String, TaskState, i64)>> {
        let rows =
            sqlx::query("SELECT kind, state, COUNT(*) AS n FROM tasks GROUP BY kind, state ORDER BY kind, state")
                .fetch_all(&self.pool)
                .await
                .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                let kind: String = row.try_get("kind").map_err(db_error)?;
                let state: String = row.try_get("state").map_err(db_error)?;
                let n: i64 = row.try_get("n").map_err(db_error)?;
                Ok((kind, TaskState::parse(&state)?, n))
            })
            .collect()
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM tasks WHERE ($1 IS NULL OR kind = $1) AND ($2 IS NULL OR state = $2) \
             AND ($3 IS NULL OR warehouse_id = $3) AND ($5 IS NULL OR id < $5) ORDER BY id DESC LIMIT $4"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(filter.kind.clone())
            .bind(filter.state.map(TaskState::as_str))
            .bind(filter.warehouse_id.clone())
            .bind(filter.limit.unwrap_or(1000))
            .bind(filter.before_id.clone())
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(task_from).collect()
    }

    async fn maintained_tables(
        &self,
        warehouse_id: &str,
        namespace: Option<&NamespaceIdent>,
        after_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<MaintainedTable>> {
        self.tables_in_scope(warehouse_id, namespace, after_id, limit).await
    }

    async fn maintained_table(&self, id: &str) -> Result<Option<MaintainedTable>> {
        self.table_in_scope(id).await
    }

    async fn owned_since(&self, id: &str) -> Result<Vec<(String, i64)>> {
        self.locations_owned_since(id).await
    }

    async fn quarantine(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        files: &[QuarantinedFile],
    ) -> Result<u64> {
        self.add_quarantined(write, table, files).await
    }

    async fn quarantined(&self, filter: &QuarantineFilter) -> Result<Vec<QuarantinedFile>> {
        self.quarantined_files(filter).await
    }

    async fn restore_quarantined(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        locations: Option<&[String]>,
    ) -> Result<u64> {
        self.restore_files(write, table, locations).await
    }

    async fn forget_quarantined(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        locations: &[String],
        deleted: Option<u64>,
    ) -> Result<u64> {
        self.forget_files(write, table, locations, deleted).await
    }

    async fn record_deleted(&self, write: &WriteContext, table: &MaintainedTable, detail: Value) -> Result<()> {
        self.record_files_deleted(write, table, detail).await
    }

    async fn forget_quarantine_of_gone(&self, limit: i64) -> Result<u64> {
        self.forget_quarantine_of_gone_tables(limit).await
    }

    async fn add_source_location(
        &self,
        write: &WriteContext,
        warehouse_id: &str,
        location: &str,
        now_ms: i64,
    ) -> Result<SourceLocation> {
        self.insert_source_location(write, warehouse_id, location, now_ms).await
    }

    async fn source_locations(&self, warehouse_id: &str) -> Result<Vec<SourceLocation>> {
        self.list_source_locations(warehouse_id).await
    }

    async fn remove_source_location(&self, write: &WriteContext, warehouse_id: &str, location: &str) -> Result<bool> {
        self.delete_source_location(write, warehouse_id, location).await
    }

    async fn create_adoption(&self, write: &WriteContext, adoption: &Adoption) -> Result<()> {
        self.insert_adoption(write, adoption).await
    }

    async fn forget_pending_adoption(&self, write: &WriteContext, id: &str) -> Result<()> {
        self.delete_pending_adoption(write, id).await
    }

    async fn adoption(&self, id: &str) -> Result<Option<Adoption>> {
        self.find_adoption(id).await
    }

    async fn adoptions(&self, warehouse_id: &str, after_id: Option<&str>, limit: i64) -> Result<Vec<Adoption>> {
        self.list_adoptions(warehouse_id, after_id, limit).await
    }

    async fn adopted_files(&self, adoption_id: &str) -> Result<Vec<AdoptedFile>> {
        self.list_adopted_files(adoption_id).await
    }

    async fn record_adoption_run(
        &self,
        write: &WriteContext,
        adoption: &Adoption,
        run: &AdoptionRun,
        added: &[AdoptedFile],
        removed: &[String],
    ) -> Result<()> {
        self.insert_adoption_run(write, adoption, run, added, removed).await
    }

    async fn adoption_sources(&self, tabular_id: &str) -> Result<Vec<String>> {
        self.sources_of_table(tabular_id).await
    }

    async fn create_migration(
        &self,
        write: &WriteContext,
        migration: &Migration,
        tables: &[MigrationTable],
    ) -> Result<()> {
        self.insert_migration(write, migration, tables).await
    }

    async fn migration(&self, id: &str) -> Result<Option<Migration>> {
        self.find_migration(id).await
    }

    async fn migrations(
        &self,
        warehouse_id: Option<&str>,
        after_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Migration>> {
        self.list_migrations(warehouse_id, after_id, limit).await
    }

    async fn migration_tables(&self, migration_id: &str) -> Result<Vec<MigrationTable>> {
        self.list_migration_tables(migration_id).await
    }

    async fn step_migration_table(
        &self,
        write: &WriteContext,
        id: &str,
        states: (TableState, TableState),
        step: &Step,
        now_ms: i64,
    ) -> Result<bool> {
        self.update_migration_table(write, id, states, step, now_ms).await
    }

    async fn set_migration_state(
        &self,
        write: &WriteContext,
        id: &str,
        states: (RunState, RunState),
        report: Option<&Value>,
        now_ms: i64,
    ) -> Result<bool> {
        self.update_migration_state(write, id, states, report, now_ms).await
    }

    async fn adoption_runs(&self, adoption_id: &str, limit: i64) -> Result<Vec<AdoptionRun>> {
        self.list_adoption_runs(adoption_id, limit).await
    }
}
