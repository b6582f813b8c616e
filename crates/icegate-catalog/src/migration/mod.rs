//! Catalog-to-catalog migration into icegate (issue 35): tables move from another catalog by
//! their metadata location, with a plan, a fence at the source, verification and rollback. No
//! data or metadata file is copied, written or deleted: a table's files stay where they are,
//! and only which catalog points at its current metadata changes.
//!
//! - **Plan.** The source is listed and every selected table checked against the target
//!   warehouse: its metadata file and table location must lie inside the warehouse's storage
//!   root (what icegate owns and may vend and delete in), and its name must be free. A dry run
//!   answers the plan and records nothing but the run; a run records each table (`planned`, or
//!   `skipped` with the conflict) and queues a `migration-run` task.
//! - **A table moves** through a persisted state machine, every step a compare-and-swap:
//!   `planned` → `fenced` (the source accepts no more commits: its pointer is swapped, with the
//!   writers' own compare-and-swap, to a location that never exists; a commit acknowledged at
//!   the source before that is what moves) → `registered` (icegate holds the table at that
//!   metadata file) → `verified` (icegate's table equals the source's, and a sample of its data
//!   files exists) → `retired` (the source's fenced entry removed, on request). A run killed
//!   half-way is taken up by the next worker where its tables are.
//! - **Rollback** hands each table back: icegate's entry is removed (atomically, with the
//!   metadata location it had then: a table that took commits at icegate hands its newest
//!   metadata back), and the source's pointer is swapped from the fence to that location. No
//!   file is touched either way.

mod plan;
mod rollback;
mod run;
pub mod source;
pub mod spec;
pub mod store;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::jobs::{NewTask, TaskStore};
use crate::storage::SecretCipher;
use crate::store::Warehouse;
use source::SourceCatalog;
use spec::{SourceRequest, SourceSpec};
use store::{Migration, MigrationTable, RunState};

pub use plan::PlannedTable;

crate::service::area!(
    /// Catalog-to-catalog migration: plans, runs, rollbacks.
    Migrations,
    migrations
);

/// The task kind that moves a run's tables.
pub const RUN_KIND: &str = "migration-run";
/// What a fenced metadata location ends with (before the table's id in the run): a location
/// that never exists, so every writer still pointed at the source fails there, naming it.
pub const FENCE_SUFFIX: &str = ".moved-to-icegate.";
/// The longest metadata location the SQL catalog's column holds (`VARCHAR(1000)`).
pub(crate) const MAX_SOURCE_LOCATION: usize = 1000;
/// Tables one run selects at most.
pub const MAX_TABLES: usize = 10_000;

/// Opens the catalogs migrations read from (the SQL catalog lives in the store crate, which
/// speaks its databases).
#[async_trait]
pub trait SourceConnector: Send + Sync {
    /// A connection to `spec`'s catalog, its secrets opened with `cipher`.
    async fn connect(&self, spec: &SourceSpec, cipher: &SecretCipher) -> Result<Arc<dyn SourceCatalog>>;
}

/// What a run moves: every table of the source, those of some namespaces (and below), some
/// tables, or those whose `namespace.table` name a regular expression matches.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Selection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<Vec<String>>>,
    /// Each a namespace's levels followed by the table's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<Vec<Vec<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<String>,
    /// Source namespace (levels joined with `.`) to target namespace; the longest mapped
    /// prefix of a namespace wins, the rest of its levels follow.
    #[serde(default, rename = "namespace-mapping", skip_serializing_if = "BTreeMap::is_empty")]
    pub namespace_mapping: BTreeMap<String, String>,
}

/// A migration as asked for.
#[derive(Debug, Clone)]
pub struct MigrationRequest {
    pub source: SourceRequest,
    pub target_warehouse: String,
    pub selection: Selection,
    pub dry_run: bool,
}

/// A run as `GET` shows it: the source without secrets, and its tables.
#[derive(Debug, Clone)]
pub struct MigrationView {
    pub migration: Migration,
    pub warehouse: String,
    pub tables: Vec<MigrationTable>,
    /// The task moving the tables (`None`: a dry run, or not queued).
    pub task_id: Option<String>,
}

impl Migration {
    /// The source as the run keeps it, shown without secrets.
    pub fn redacted_source(&self) -> Value {
        serde_json::from_value::<SourceSpec>(self.source.clone())
            .map(|spec| spec.redacted())
            .unwrap_or_else(|_| json!({ "type": self.source_kind }))
    }
}

impl Migrations<'_> {
    fn queue(&self) -> Result<&Arc<dyn TaskStore>> {
        self.task_store().ok_or_else(|| {
            CatalogError::bad_request("migration needs the task queue (run the catalog as a server: icegate serve)")
        })
    }

    fn connector(&self) -> Result<&Arc<dyn SourceConnector>> {
        self.source_connector().ok_or_else(|| CatalogError::bad_request("this server migrates from no catalog"))
    }

    /// Opens a run's source.
    pub(crate) async fn open(&self, migration: &Migration) -> Result<Arc<dyn SourceCatalog>> {
        let spec: SourceSpec = serde_json::from_value(migration.source.clone())
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored migration source: {e}")))?;
        self.connector()?.connect(&spec, self.cipher()).await
    }

    /// The warehouse with id `id`, when `ctx` administers it (404 otherwise, as for a run that
    /// does not exist).
    async fn administered_id(&self, ctx: &RequestContext, id: &str, migration: &str) -> Result<Warehouse> {
        let missing = || CatalogError::no_such_migration(migration);
        let warehouse = match self.warehouse_for_prefix(&WarehouseId::new(id.to_owned())).await {
            Ok(warehouse) => warehouse,
            Err(CatalogError::NotFound { .. }) => return Err(missing()),
            Err(other) => return Err(other),
        };
        ctx.require(&Target::Warehouse { warehouse_id: warehouse.id.clone() }, Privilege::Admin, missing).await?;
        Ok(warehouse)
    }

    /// Plans a migration (admins of the target warehouse; a source the server reaches on its
    /// own behalf needs admin on the server) and, unless it is a dry run, queues it.
    pub async fn create(&self, ctx: &RequestContext, request: MigrationRequest) -> Result<MigrationView> {
        let warehouse = self.administered(ctx, &request.target_warehouse).await?;
        let reasons = request.source.server_admin_reasons(self.allowed_endpoints());
        if !reasons.is_empty() {
            ctx.require(&Target::Server, Privilege::Admin, || {
                CatalogError::Forbidden(format!("this source needs admin on the server: {}", reasons.join("; ")))
            })
            .await?;
        }
        let queue = self.queue()?.clone();
        let kind = request.source.kind();
        let spec = request.source.seal(self.cipher())?;
        let source = self.connector()?.connect(&spec, self.cipher()).await?;
        let selected = plan::select(source.as_ref(), &request.selection).await?;
        let id = uuid::Uuid::now_v7().to_string();
        let planned = self.plan_tables(&warehouse, &selected, &request.selection).await?;
        let now = self.clock().now_ms();
        let moving = planned.iter().filter(|t| t.conflict.is_none()).count();
        let report = json!({
            "tables": planned.len(),
            "to-move": moving,
            "conflicts": planned.len() - moving,
            "namespaces": plan::namespaces_of(&planned),
            "plan": planned.iter().map(PlannedTable::report).collect::<Vec<_>>(),
        });
        let migration = Migration {
            id: id.clone(),
            target_warehouse_id: warehouse.id.as_str().to_owned(),
            source_kind: kind.to_owned(),
            source: serde_json::to_value(&spec).map_err(|e| CatalogError::Internal(e.into()))?,
            selection: serde_json::to_value(&request.selection).map_err(|e| CatalogError::Internal(e.into()))?,
            dry_run: request.dry_run,
            state: if request.dry_run { RunState::Completed } else { RunState::Planned },
            report,
            created_at_ms: now,
            created_by: ctx.write().principal,
            updated_at_ms: now,
        };
        // A dry run records the run and its plan, and no table (it holds no source object).
        let tables: Vec<MigrationTable> = if request.dry_run {
            Vec::new()
        } else {
            planned.iter().map(|t| t.record(&id, &spec.identity(), now)).collect()
        };
        queue.create_migration(&ctx.write(), &migration, &tables).await?;
        let task_id = if request.dry_run || moving == 0 { None } else { Some(self.queue_run(&warehouse, &id).await?) };
        if let Some(task) = &task_id {
            // The task's id is shown with the run (until the run's end report replaces it).
            let mut report = migration.report.clone();
            report["task-id"] = json!(task);
            queue
                .set_migration_state(&ctx.write(), &id, (RunState::Planned, RunState::Planned), Some(&report), now)
                .await?;
        }
        if !request.dry_run && moving == 0 {
            queue.set_migration_state(&ctx.write(), &id, (RunState::Planned, RunState::Completed), None, now).await?;
        }
        let migration = queue.migration(&id).await?.ok_or_else(|| CatalogError::no_such_migration(&id))?;
        Ok(MigrationView { migration, warehouse: warehouse.name.as_str().to_owned(), tables, task_id })
    }

    /// Queues (again) the task that moves a run's tables.
    async fn queue_run(&self, warehouse: &Warehouse, id: &str) -> Result<String> {
        let now = self.clock().now_ms();
        let task = NewTask {
            warehouse_id: Some(warehouse.id.as_str().to_owned()),
            dedupe_key: Some(format!("{RUN_KIND}:{id}")),
            params: json!({ "migration-id": id }),
            ..NewTask::new(RUN_KIND, &format!("migration {id} into warehouse {}", warehouse.name), now)
        };
        match self.queue()?.enqueue(&task, now).await? {
            Some(record) => Ok(record.id),
            None => Err(CatalogError::Conflict(format!("migration {id} is queued or running already"))),
        }
    }

    /// A run with its tables (admins of its warehouse).
    pub async fn get(&self, ctx: &RequestContext, id: &str) -> Result<MigrationView> {
        // Without a task queue there are no runs to show.
        let queue = self.task_store().ok_or_else(|| CatalogError::no_such_migration(id))?;
        let migration = queue.migration(id).await?.ok_or_else(|| CatalogError::no_such_migration(id))?;
        let warehouse = self.administered_id(ctx, &migration.target_warehouse_id, id).await?;
        let tables = queue.migration_tables(id).await?;
        let task_id = migration.report.get("task-id").and_then(Value::as_str).map(str::to_owned);
        Ok(MigrationView { migration, warehouse: warehouse.name.as_str().to_owned(), tables, task_id })
    }

    /// Runs, oldest first, a page after `after`: of `warehouse` (its admins), or of every
    /// warehouse (server admins).
    pub async fn list(
        &self,
        ctx: &RequestContext,
        warehouse: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<(Migration, String)>> {
        let limit = limit.clamp(1, 1000);
        let runs = match warehouse {
            Some(name) => {
                let warehouse = self.administered(ctx, name).await?;
                self.queue()?.migrations(Some(warehouse.id.as_str()), after, limit).await?
            }
            None => {
                ctx.require(&Target::Server, Privilege::Admin, || {
                    CatalogError::Forbidden(
                        "listing every warehouse's migrations needs admin on the server; name a warehouse".into(),
                    )
                })
                .await?;
                self.queue()?.migrations(None, after, limit).await?
            }
        };
        let mut named = Vec::with_capacity(runs.len());
        for run in runs {
            let name = match self.warehouse_for_prefix(&WarehouseId::new(run.target_warehouse_id.clone())).await {
                Ok(warehouse) => warehouse.name.as_str().to_owned(),
                Err(_) => String::new(),
            };
            named.push((run, name));
        }
        Ok(named)
    }
}

impl crate::error::CatalogError {
    /// A migration run that does not exist (or the caller may not see).
    pub fn no_such_migration(id: &str) -> Self {
        Self::NotFound { kind: crate::error::ObjectKind::Migration, message: format!("no migration {id}") }
    }
}
