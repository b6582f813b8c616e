//! Rollback (the source takes its tables back) and retirement (the source's fenced entries go
//! for good). Neither touches a data or metadata file.
//!
//! A table icegate holds is handed back in three recorded steps: icegate's entry is removed
//! (atomically, with the metadata location it had then, so a commit at icegate either made it
//! before and is handed back, or fails), that location is recorded as `handed_back`, and the
//! source's pointer is swapped from the fence to it. A rollback interrupted between them is
//! repeated from the record.

use serde_json::json;

use super::run::fenced_location;
use super::store::{MigrationTable, RunState, Step, TableState};
use super::{MigrationView, Migrations};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ids::TabularId;
use crate::store::{DropOptions, TabularKind};

impl Migrations<'_> {
    /// Rolls back a run's tables (`only`: those of these target names, `namespace.table`), as
    /// admins of its warehouse; not while the run is moving them. Answers the run afterwards;
    /// a table that cannot go back fails the request only when it was named.
    pub async fn rollback(
        &self,
        ctx: &RequestContext,
        id: &str,
        only: Option<&[Vec<String>]>,
    ) -> Result<MigrationView> {
        let view = self.get(ctx, id).await?;
        let run = &view.migration;
        if run.dry_run {
            return Err(CatalogError::Conflict(format!("migration {id} is a dry run: nothing to roll back")));
        }
        let queue = self.queue()?.clone();
        let now = self.clock().now_ms();
        let state = self.settle(ctx, run).await?;
        match state {
            RunState::Running => {
                return Err(CatalogError::Conflict(format!(
                    "migration {id} is running: cancel its task, or wait until it ends, then roll back"
                )));
            }
            // Not started: nothing happened at the source or here.
            RunState::Planned if only.is_none() => {
                if queue
                    .set_migration_state(&ctx.write(), id, (RunState::Planned, RunState::RolledBack), None, now)
                    .await?
                {
                    for table in view.tables.iter().filter(|t| t.state == TableState::Planned) {
                        let stepped = (TableState::Planned, TableState::RolledBack);
                        queue.step_migration_table(&ctx.write(), &table.id, stepped, &Step::default(), now).await?;
                    }
                    return self.get(ctx, id).await;
                }
                return Err(CatalogError::Conflict(format!("migration {id} started meanwhile: try again")));
            }
            RunState::Planned => {
                return Err(CatalogError::Conflict(format!("migration {id} has not run: roll back all of it")));
            }
            RunState::RolledBack if only.is_none() => return Ok(view),
            _ => {}
        }
        let warehouse =
            self.warehouse_for_prefix(&crate::ids::WarehouseId::new(run.target_warehouse_id.clone())).await?;
        let source = self.open(run).await?;
        let named = |t: &MigrationTable| {
            only.is_none_or(|names| {
                names
                    .iter()
                    .any(|n| n.len() >= 2 && n[..n.len() - 1] == *t.target_namespace && n[n.len() - 1] == t.target_name)
            })
        };
        if let Some(names) = only {
            for name in names {
                if !view.tables.iter().any(|t| named(t) && name.last() == Some(&t.target_name)) {
                    return Err(CatalogError::bad_request(format!(
                        "{} is not a table of migration {id}",
                        name.join(".")
                    )));
                }
            }
        }
        let mut refused = Vec::new();
        for table in view.tables.iter().filter(|t| named(t)) {
            if let Err(e) = self.hand_back(ctx, &warehouse, source.as_ref(), table.clone()).await {
                refused.push(format!("{}: {e}", table.target_name));
            }
        }
        if only.is_some() && !refused.is_empty() {
            return Err(CatalogError::Conflict(format!("not rolled back: {}", refused.join("; "))));
        }
        let tables = queue.migration_tables(id).await?;
        if only.is_none() && tables.iter().all(|t| !t.state.is_live() && t.state != TableState::Retired) {
            // The run's report as it is now (a run settled as failed says why).
            let previous = queue.migration(id).await?.map_or_else(|| run.report.clone(), |m| m.report);
            let report = json!({ "rolled-back-at": now, "previous": previous, "refused": refused });
            queue.set_migration_state(&ctx.write(), id, (state, RunState::RolledBack), Some(&report), now).await?;
        }
        if !refused.is_empty() {
            return Err(CatalogError::Conflict(format!("not rolled back: {}", refused.join("; "))));
        }
        self.get(ctx, id).await
    }

    /// The run's state, a `running` run whose task ended without ending it (failed for good,
    /// cancelled, removed) recorded as `failed` first: its tables move no more.
    async fn settle(&self, ctx: &RequestContext, run: &super::store::Migration) -> Result<RunState> {
        if run.state != RunState::Running {
            return Ok(run.state);
        }
        let queue = self.queue()?;
        let task = match run.report.get("task-id").and_then(serde_json::Value::as_str) {
            Some(task) => queue.task(task).await?,
            None => None,
        };
        if let Some(task) = &task
            && matches!(task.state, crate::jobs::TaskState::Queued | crate::jobs::TaskState::Running)
        {
            return Ok(RunState::Running);
        }
        let mut report = run.report.clone();
        report["ended"] = json!(format!(
            "its task ended before the run did ({})",
            task.as_ref().map_or("gone", |t| t.state.as_str())
        ));
        let now = self.clock().now_ms();
        if queue
            .set_migration_state(&ctx.write(), &run.id, (RunState::Running, RunState::Failed), Some(&report), now)
            .await?
        {
            Ok(RunState::Failed)
        } else {
            Ok(queue.migration(&run.id).await?.map_or(RunState::Failed, |m| m.state))
        }
    }

    /// Gives one table back to the source (see the module's documentation).
    async fn hand_back(
        &self,
        ctx: &RequestContext,
        warehouse: &crate::store::Warehouse,
        source: &dyn super::source::SourceCatalog,
        table: MigrationTable,
    ) -> Result<()> {
        let now = self.clock().now_ms();
        let queue = self.queue()?;
        let previous = table.fence.as_ref().and_then(|f| f["previous"].as_str()).map(str::to_owned);
        match table.state {
            TableState::Planned => {
                let step = (TableState::Planned, TableState::RolledBack);
                queue.step_migration_table(&ctx.write(), &table.id, step, &Step::default(), now).await?;
                self.undo_stray_fence(source, &table).await
            }
            // A fence that landed with no worker left to record it (a server killed while the
            // fence waited on a lock at the source): undone by a rollback repeated.
            TableState::RolledBack if table.fenced_location.is_none() => self.undo_stray_fence(source, &table).await,
            TableState::Fenced => {
                let location = table.fenced_location.clone().unwrap_or_default();
                let named = (&table.source_namespace[..], table.source_name.as_str());
                source.unfence(named, &fenced_location(&location, &table.id), &location, previous.as_deref()).await?;
                let step = Step { handed_back: Some(location), ..Step::default() };
                queue
                    .step_migration_table(
                        &ctx.write(),
                        &table.id,
                        (TableState::Fenced, TableState::RolledBack),
                        &step,
                        now,
                    )
                    .await?;
                Ok(())
            }
            TableState::Registered | TableState::Verified | TableState::Failed => {
                let Some(location) = table.fenced_location.clone() else {
                    // Failed before it was fenced: the source never changed.
                    return Ok(());
                };
                let back = match &table.handed_back {
                    Some(back) => back.clone(),
                    None => match self.release(ctx, warehouse, &table).await? {
                        Some(back) => {
                            // Recorded before the source changes: a rollback interrupted now
                            // is repeated with it.
                            let step = Step { handed_back: Some(back.clone()), ..Step::default() };
                            let same = (table.state, table.state);
                            if !queue.step_migration_table(&ctx.write(), &table.id, same, &step, now).await? {
                                return Err(CatalogError::Conflict("it changed meanwhile: try again".into()));
                            }
                            back
                        }
                        // Not at icegate (a failed registration): the source as the fence found it.
                        None => location.clone(),
                    },
                };
                // The source's previous location: what the fence found before it, when the
                // table comes back as it went; the file it went with, when icegate moved it on.
                let before = if back == location { previous } else { Some(location.clone()) };
                let named = (&table.source_namespace[..], table.source_name.as_str());
                source.unfence(named, &fenced_location(&location, &table.id), &back, before.as_deref()).await?;
                let step = Step { handed_back: Some(back), ..Step::default() };
                let moved = (table.state, TableState::RolledBack);
                queue.step_migration_table(&ctx.write(), &table.id, moved, &step, now).await?;
                Ok(())
            }
            TableState::Retired => Err(CatalogError::Conflict(
                "retired: the source's entry is gone; register the table at the source from its metadata".into(),
            )),
            TableState::RolledBack | TableState::Skipped => Ok(()),
        }
    }

    /// Undoes this table's fence if the source holds it though the run never recorded it.
    async fn undo_stray_fence(&self, source: &dyn super::source::SourceCatalog, table: &MigrationTable) -> Result<()> {
        let suffix = format!("{}{}", super::FENCE_SUFFIX, table.id);
        let found = source.table(&table.source_namespace, &table.source_name).await?;
        if let Some(fenced) = found.and_then(|t| t.metadata_location)
            && let Some(back) = fenced.strip_suffix(&suffix)
        {
            let named = (&table.source_namespace[..], table.source_name.as_str());
            source.unfence(named, &fenced, back, None).await?;
        }
        Ok(())
    }

    /// Removes icegate's entry for `table`, atomically with the metadata location it had then
    /// (`None`: icegate never held it). A held table, or one dropped at icegate, is refused.
    async fn release(
        &self,
        ctx: &RequestContext,
        warehouse: &crate::store::Warehouse,
        table: &MigrationTable,
    ) -> Result<Option<String>> {
        let Some(id) = table.tabular_id.as_deref().map(|id| TabularId::new(id.to_owned())) else { return Ok(None) };
        let ident = Self::table_ident(table)?;
        if let Some(held) = self.store().legal_hold(&warehouse.id, &ident.namespace, &id).await? {
            return Err(held);
        }
        let dropped = self
            .store()
            .drop_tabular(
                &ctx.write(),
                &warehouse.id,
                (&ident.namespace, &ident.name),
                TabularKind::Table,
                DropOptions::final_drop(0),
                Some(&id),
            )
            .await?;
        match dropped {
            Some(dropped) => Ok(Some(dropped.tabular.metadata_location)),
            None => Err(CatalogError::Conflict(format!(
                "{ident} is no longer the table the migration registered at icegate (dropped or replaced): undrop \
                 it, or hand it back by hand"
            ))),
        }
    }

    /// Retires a run's verified tables at the source (admins of its warehouse): their fenced
    /// entries are removed for good. Do this once every client uses icegate.
    pub async fn retire(&self, ctx: &RequestContext, id: &str) -> Result<MigrationView> {
        let view = self.get(ctx, id).await?;
        if self.settle(ctx, &view.migration).await? == RunState::Running {
            return Err(CatalogError::Conflict(format!("migration {id} is running: retire it once it ends")));
        }
        let source = self.open(&view.migration).await?;
        let queue = self.queue()?;
        for table in view.tables.iter().filter(|t| t.state == TableState::Verified) {
            let location = table.fenced_location.clone().unwrap_or_default();
            let named = (&table.source_namespace[..], table.source_name.as_str());
            source.retire(named, &fenced_location(&location, &table.id)).await?;
            let step = (TableState::Verified, TableState::Retired);
            queue.step_migration_table(&ctx.write(), &table.id, step, &Step::default(), self.clock().now_ms()).await?;
        }
        self.get(ctx, id).await
    }
}
