//! `migration-run` tasks: move a migration run's tables (fence, register, verify), one table
//! after another, as the system with the task's reason. Each table's state is recorded after
//! each step, so a run killed half-way is taken up by the next worker where its tables are;
//! the run ends `completed` when every table moved (or was skipped by the plan), `failed`
//! when one could not (its report and error say why; the others moved).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Job, Progress, TaskRun};
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::migration::RUN_KIND;
use crate::migration::store::{RunState, TableState};
use crate::service::Catalog;

pub struct MigrationRun {
    catalog: Arc<Catalog>,
}

impl MigrationRun {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self { catalog }
    }
}

#[async_trait::async_trait]
impl Job for MigrationRun {
    fn kind(&self) -> &'static str {
        RUN_KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let id = run.task().params["migration-id"].as_str().unwrap_or_default().to_owned();
        let queue = self.catalog.task_store().ok_or_else(|| CatalogError::bad_request("no task queue"))?;
        let Some(migration) = queue.migration(&id).await? else {
            return Ok(json!({ "skipped": "the migration is gone" }));
        };
        let ctx = run.context();
        match migration.state {
            RunState::Planned => {
                let moved = (RunState::Planned, RunState::Running);
                // The run names its task (what a rollback asks whether the run still moves).
                let mut report = migration.report.clone();
                report["task-id"] = json!(run.task().id);
                if !queue.set_migration_state(&ctx.write(), &id, moved, Some(&report), run.now_ms()).await? {
                    return Ok(json!({ "skipped": "the migration was rolled back before it ran" }));
                }
            }
            RunState::Running => {}
            other => return Ok(json!({ "skipped": format!("the migration is {}", other.as_str()) })),
        }
        let warehouse =
            self.catalog.warehouse_for_prefix(&WarehouseId::new(migration.target_warehouse_id.clone())).await?;
        let migrations = self.catalog.migrations();
        let source = migrations.open(&migration).await?;
        let tables = queue.migration_tables(&id).await?;
        let total = i64::try_from(tables.len()).unwrap_or(i64::MAX);
        let mut states = std::collections::BTreeMap::<&'static str, usize>::new();
        for (index, table) in tables.into_iter().enumerate() {
            if run.stopping() {
                return Err(CatalogError::Unavailable("the task is stopping; the run resumes where it is".into()));
            }
            let ended = migrations.advance(&ctx, &warehouse, &source, table, &|| run.stopping()).await?;
            *states.entry(ended.state.as_str()).or_default() += 1;
            let done = i64::try_from(index + 1).unwrap_or(i64::MAX);
            run.save(Progress { done, total: Some(total), bytes: 0 }, None).await?;
        }
        let failed = states.get(TableState::Failed.as_str()).copied().unwrap_or(0);
        let end = if failed == 0 { RunState::Completed } else { RunState::Failed };
        let mut report = migration.report.clone();
        report["task-id"] = json!(run.task().id);
        report["result"] = json!(states);
        report["ended-at"] = json!(run.now_ms());
        queue.set_migration_state(&ctx.write(), &id, (RunState::Running, end), Some(&report), run.now_ms()).await?;
        Ok(json!({ "migration": id, "state": end.as_str(), "tables": states }))
    }
}
