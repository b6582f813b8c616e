//! Maintenance policies and what runs them.
//!
//! A policy is inherited warehouse → namespace → table: a warehouse setting, overridden by the
//! nearest namespace property of the same name, overridden (for expiry) by the table's own
//! Iceberg properties (`history.expire.*`, `gc.enabled`). Expiry runs after commits (the cheap
//! check) and from the maintenance sweep for tables under an inherited policy; orphan removal
//! runs at a namespace's or warehouse's `lifecycle.orphan.interval`, or when an operator asks
//! (`POST /management/v1/warehouses/{wh}/maintenance/run`). The dry run (`.../plan`) says what
//! each would remove, per table, without changing anything.

use std::time::Duration;

use serde_json::{Value, json};

use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::ids::{TabularId, WarehouseId};
use crate::jobs::expire_snapshots::{self, Document, ExpiryPolicy};
use crate::jobs::{MaintainedTable, NewTask, QuarantineFilter, QuarantinedFile, orphans};
use crate::lifecycle::parse_period;
use crate::service::Catalog;
use crate::store::{Warehouse, WarehouseSettings};
use crate::tables::{SnapshotMode, TableIdent};

/// Defaults for tables whose `history.expire.max-snapshot-age-ms` is not set.
pub const EXPIRE_MAX_AGE: &str = "lifecycle.expire.max-snapshot-age";
pub const EXPIRE_MIN_KEEP: &str = "lifecycle.expire.min-snapshots-to-keep";
pub const EXPIRE_MAX_REF_AGE: &str = "lifecycle.expire.max-ref-age";
/// Orphan removal: how old an unreferenced file must be to be quarantined, how long it stays
/// quarantined, and how often the catalog looks (unset: only when asked).
pub const ORPHAN_OLDER_THAN: &str = "lifecycle.orphan.older-than";
pub const ORPHAN_QUARANTINE: &str = "lifecycle.orphan.quarantine";
pub const ORPHAN_INTERVAL: &str = "lifecycle.orphan.interval";
/// Metadata files that fall out of a table's metadata log are deleted after its commits, for
/// tables that do not set `write.metadata.delete-after-commit.enabled` themselves.
pub const METADATA_DELETE_AFTER_COMMIT: &str = "lifecycle.metadata.delete-after-commit";

const DURATION_KEYS: [&str; 5] =
    [EXPIRE_MAX_AGE, EXPIRE_MAX_REF_AGE, ORPHAN_OLDER_THAN, ORPHAN_QUARANTINE, ORPHAN_INTERVAL];

/// The policy one level sets (a namespace's properties, a warehouse's settings); `None`: not
/// set there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyLevel {
    pub expire_max_age: Option<Duration>,
    pub expire_min_keep: Option<u32>,
    pub expire_max_ref_age: Option<Duration>,
    pub orphan_older_than: Option<Duration>,
    pub orphan_quarantine: Option<Duration>,
    pub orphan_interval: Option<Duration>,
    pub metadata_delete_after_commit: Option<bool>,
}

/// Whether `key` is a maintenance policy key.
pub fn is_policy_key(key: &str) -> bool {
    DURATION_KEYS.contains(&key) || key == EXPIRE_MIN_KEEP || key == METADATA_DELETE_AFTER_COMMIT
}

fn boolean(key: &str, value: &str) -> Result<bool> {
    match value.trim() {
        v if v.eq_ignore_ascii_case("true") => Ok(true),
        v if v.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(CatalogError::bad_request(format!("{key} must be true or false, not {value:?}"))),
    }
}

fn positive_count(key: &str, value: &str) -> Result<u32> {
    match value.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(CatalogError::bad_request(format!("{key} must be a positive integer, not {value:?}"))),
    }
}

fn positive_period(key: &str, value: &str) -> Result<Duration> {
    let period = parse_period(key, value)?;
    if period.is_zero() && key != ORPHAN_QUARANTINE {
        return Err(CatalogError::bad_request(format!("{key} must be longer than 0s")));
    }
    Ok(period)
}

impl PolicyLevel {
    /// The policy keys among `properties` (a namespace's), checked.
    pub fn from_properties<'a>(properties: impl IntoIterator<Item = (&'a String, &'a String)>) -> Result<Self> {
        let mut level = Self::default();
        for (key, value) in properties {
            match key.as_str() {
                EXPIRE_MAX_AGE => level.expire_max_age = Some(positive_period(key, value)?),
                EXPIRE_MIN_KEEP => level.expire_min_keep = Some(positive_count(key, value)?),
                EXPIRE_MAX_REF_AGE => level.expire_max_ref_age = Some(positive_period(key, value)?),
                ORPHAN_OLDER_THAN => level.orphan_older_than = Some(positive_period(key, value)?),
                ORPHAN_QUARANTINE => level.orphan_quarantine = Some(positive_period(key, value)?),
                ORPHAN_INTERVAL => level.orphan_interval = Some(positive_period(key, value)?),
                METADATA_DELETE_AFTER_COMMIT => level.metadata_delete_after_commit = Some(boolean(key, value)?),
                _ => {}
            }
        }
        Ok(level)
    }

    /// A warehouse's settings as a policy level.
    pub fn of_warehouse(settings: &WarehouseSettings) -> Self {
        Self {
            expire_max_age: settings.expire_max_snapshot_age,
            expire_min_keep: settings.expire_min_snapshots_to_keep,
            expire_max_ref_age: settings.expire_max_ref_age,
            orphan_older_than: settings.orphan_older_than,
            orphan_quarantine: settings.orphan_quarantine,
            orphan_interval: settings.orphan_interval,
            metadata_delete_after_commit: settings.metadata_delete_after_commit,
        }
    }

    /// This level over `parent`: what this one sets wins.
    pub fn over(self, parent: &Self) -> Self {
        Self {
            expire_max_age: self.expire_max_age.or(parent.expire_max_age),
            expire_min_keep: self.expire_min_keep.or(parent.expire_min_keep),
            expire_max_ref_age: self.expire_max_ref_age.or(parent.expire_max_ref_age),
            orphan_older_than: self.orphan_older_than.or(parent.orphan_older_than),
            orphan_quarantine: self.orphan_quarantine.or(parent.orphan_quarantine),
            orphan_interval: self.orphan_interval.or(parent.orphan_interval),
            metadata_delete_after_commit: self.metadata_delete_after_commit.or(parent.metadata_delete_after_commit),
        }
    }

    /// Whether a table under this level is expired without properties of its own.
    pub fn expires(&self) -> bool {
        self.expire_max_age.is_some()
    }
}

/// Checks a warehouse's settings' policy values (what a namespace property would be refused for).
pub fn check_settings(settings: &WarehouseSettings) -> Result<()> {
    let zero = |key: &str, value: Option<Duration>| match value {
        Some(v) if v.is_zero() => Err(CatalogError::bad_request(format!("{key} must be longer than 0s"))),
        Some(v) if v > crate::lifecycle::MAX_PERIOD => {
            Err(CatalogError::bad_request(format!("{key} is at most 3650 days")))
        }
        _ => Ok(()),
    };
    zero(EXPIRE_MAX_AGE, settings.expire_max_snapshot_age)?;
    zero(EXPIRE_MAX_REF_AGE, settings.expire_max_ref_age)?;
    zero(ORPHAN_OLDER_THAN, settings.orphan_older_than)?;
    zero(ORPHAN_INTERVAL, settings.orphan_interval)?;
    if settings.expire_min_snapshots_to_keep == Some(0) {
        return Err(CatalogError::bad_request(format!("{EXPIRE_MIN_KEEP} must be a positive integer")));
    }
    if settings.orphan_quarantine.is_some_and(|q| q > crate::lifecycle::MAX_PERIOD) {
        return Err(CatalogError::bad_request(format!("{ORPHAN_QUARANTINE} is at most 3650 days")));
    }
    Ok(())
}

pub use crate::jobs::expire_snapshots::expiry_policy;

/// How orphan removal treats a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrphanPolicy {
    pub older_than: Duration,
    pub quarantine: Duration,
    pub interval: Option<Duration>,
}

/// The server's defaults for orphan removal (configuration `lifecycle.orphan.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrphanDefaults {
    pub older_than: Duration,
    pub quarantine: Duration,
    /// No policy may make `older-than` shorter than this (a file younger may belong to a commit
    /// still being written).
    pub min_older_than: Duration,
    /// Nor the quarantine shorter than this (the window to restore a file), nor the interval
    /// (each run lists the table's storage and reads its manifests).
    pub min_quarantine: Duration,
    pub min_interval: Duration,
}

impl Default for OrphanDefaults {
    fn default() -> Self {
        Self {
            older_than: Duration::from_secs(86_400),
            quarantine: Duration::from_secs(7 * 86_400),
            min_older_than: Duration::from_secs(3_600),
            min_quarantine: Duration::from_secs(3_600),
            min_interval: Duration::from_secs(3_600),
        }
    }
}

impl OrphanDefaults {
    pub fn policy(&self, level: &PolicyLevel) -> OrphanPolicy {
        OrphanPolicy {
            older_than: level.orphan_older_than.unwrap_or(self.older_than).max(self.min_older_than),
            quarantine: level.orphan_quarantine.unwrap_or(self.quarantine).max(self.min_quarantine),
            interval: level.orphan_interval.map(|i| i.max(self.min_interval)),
        }
    }
}

impl Catalog {
    /// What a table in `namespace` of `warehouse` inherits: the nearest namespace's properties
    /// up the tree over the warehouse's settings. The namespaces' part is cached for 30 s (a
    /// change through this replica clears it at once).
    pub async fn inherited_policy(&self, warehouse: &Warehouse, namespace: &NamespaceIdent) -> Result<PolicyLevel> {
        let key = (warehouse.id.clone(), namespace.clone());
        let namespaces = match self.namespace_policies().get(&key, |_| true) {
            Some(level) => level,
            None => {
                let (generation, read_at) = (self.namespace_policies().generation(), std::time::Instant::now());
                let mut level = PolicyLevel::default();
                let mut current = Some(namespace.clone());
                while let Some(at) = current {
                    if let Some(properties) = self.store().load_namespace(&warehouse.id, &at).await? {
                        // A value stored before a key was checked is ignored, not fatal.
                        let own = PolicyLevel::from_properties(properties.iter()).unwrap_or_default();
                        level = level.over(&own);
                    }
                    current = at.parent();
                }
                self.namespace_policies().offer(generation, key, level.clone(), read_at);
                level
            }
        };
        Ok(namespaces.over(&PolicyLevel::of_warehouse(&warehouse.settings)))
    }
}

crate::service::area!(
    /// Maintenance run by operators: dry runs, runs, the orphan quarantine.
    Maintenance,
    maintenance
);

/// Which tables a plan or a run covers, and what it does.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub namespace: Option<NamespaceIdent>,
    /// One table (with `namespace`).
    pub table: Option<String>,
    pub expire_snapshots: bool,
    pub remove_orphans: bool,
    /// Tables after this id (the previous page's last).
    pub after: Option<String>,
    pub limit: i64,
}

/// One page of a plan or a run.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub tables: Vec<Value>,
    pub next_after: Option<String>,
}

impl Maintenance<'_> {
    async fn in_scope(&self, warehouse: &Warehouse, scope: &Scope) -> Result<(Vec<MaintainedTable>, Option<String>)> {
        let queue = self.queue()?;
        if let Some(name) = &scope.table {
            let namespace = scope
                .namespace
                .clone()
                .ok_or_else(|| CatalogError::bad_request("a table is named with its namespace"))?;
            let id = self.table_id(warehouse, namespace.clone(), name).await?;
            let gone = || CatalogError::no_such_table(format!("{namespace}.{name}"));
            let found = queue.maintained_table(&id).await?.ok_or_else(gone)?;
            return Ok((vec![found], None));
        }
        let limit = scope.limit.clamp(1, 100);
        let tables = queue
            .maintained_tables(warehouse.id.as_str(), scope.namespace.as_ref(), scope.after.as_deref(), limit)
            .await?;
        let next = (tables.len() as i64 == limit).then(|| tables.last().map(|t| t.id.clone())).flatten();
        Ok((tables, next))
    }

    fn queue(&self) -> Result<&std::sync::Arc<dyn crate::jobs::TaskStore>> {
        self.task_store().ok_or_else(|| {
            CatalogError::bad_request("maintenance needs the task queue (run the catalog as a server: icegate serve)")
        })
    }

    /// The dry run: per table, what expiry and orphan removal would remove now (warehouse
    /// admins). Nothing changes; storage is listed and manifests read.
    pub async fn plan(&self, ctx: &RequestContext, warehouse: &str, scope: Scope) -> Result<Outcome> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let (tables, next_after) = self.in_scope(&warehouse, &scope).await?;
        let mut out = Vec::with_capacity(tables.len());
        let system = RequestContext::system("maintenance-plan", None);
        for table in tables {
            let ident = TableIdent::new(table.namespace.clone(), &table.name)?;
            let loaded = match self.catalog.tables().load(&system, &warehouse.id, &ident, SnapshotMode::All).await {
                Ok(loaded) if loaded.id.as_ref().map(TabularId::as_str) == Some(table.id.as_str()) => loaded,
                _ => continue, // dropped or replaced since it was listed
            };
            let document = Document::parse(&loaded.metadata_json)?;
            let inherited = self.inherited_policy(&warehouse, &table.namespace).await?;
            let mut entry = json!({ "id": table.id, "namespace": table.namespace.levels(), "name": table.name });
            if scope.expire_snapshots {
                entry["expire-snapshots"] = match expiry_policy(&document.properties, &inherited)? {
                    None => json!({ "policy": null }),
                    Some(policy) => {
                        let report = expire_snapshots::dry_run(self, &warehouse, &table, &document, &policy).await?;
                        json!({ "policy": policy_json(&policy), "would-remove": report })
                    }
                };
            }
            if scope.remove_orphans {
                let policy = self.orphan_defaults().policy(&inherited);
                let now = self.clock().now_ms();
                let scan = orphans::scan(
                    self,
                    &warehouse,
                    &table,
                    loaded.metadata_location.as_deref(),
                    &document,
                    (policy, now),
                )
                .await?;
                entry["remove-orphans"] = json!({
                    "older-than": humantime_serde::re::humantime::format_duration(policy.older_than).to_string(),
                    "quarantine": humantime_serde::re::humantime::format_duration(policy.quarantine).to_string(),
                    "listed": scan.listed.len(),
                    "referenced": scan.referenced_count,
                    "would-quarantine": scan.candidates.len(),
                    "would-quarantine-bytes": scan.candidates.iter().map(|f| f.size).sum::<u64>(),
                    "skipped-ambiguous": scan.ambiguous,
                });
            }
            out.push(entry);
        }
        Ok(Outcome { tables: out, next_after })
    }

    /// Queues the expiry and orphan removal of the tables in scope, due now (warehouse admins);
    /// answers the tasks (a table whose task of that kind is queued or running already keeps
    /// that one).
    pub async fn run(&self, ctx: &RequestContext, warehouse: &str, scope: Scope) -> Result<Outcome> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let (tables, next_after) = self.in_scope(&warehouse, &scope).await?;
        let queue = self.queue()?.clone();
        let now = self.clock().now_ms();
        let by = ctx.write().principal;
        let reason = format!("asked for by {}", if by.is_empty() { "an operator".to_owned() } else { by });
        let mut out = Vec::with_capacity(tables.len());
        for table in tables {
            let mut entry = json!({ "id": table.id, "namespace": table.namespace.levels(), "name": table.name });
            let kinds = [(scope.expire_snapshots, expire_snapshots::KIND), (scope.remove_orphans, orphans::KIND)];
            for (wanted, kind) in kinds {
                if !wanted {
                    continue;
                }
                let task = NewTask {
                    // One queued for later is made due now; a running one runs once more.
                    rerun_if_running: true,
                    ..table_task(kind, &reason, (&warehouse.id, &table), now)
                };
                entry[kind] = match queue.enqueue(&task, now).await? {
                    Some(task) => json!({ "task-id": task.id, "queued": true }),
                    None => {
                        let existing = self.existing_task(queue.as_ref(), &warehouse, kind, &table.id).await?;
                        json!({ "task-id": existing, "queued": false,
                                "why": "a task of this kind was queued or running for it: it runs now (once more)" })
                    }
                };
            }
            out.push(entry);
        }
        Ok(Outcome { tables: out, next_after })
    }

    /// The quarantine of a warehouse (warehouse admins): files waiting for deletion, and
    /// restored ones.
    pub async fn quarantine(
        &self,
        ctx: &RequestContext,
        warehouse: &str,
        table: Option<(NamespaceIdent, String)>,
        after: Option<(String, String)>,
        limit: i64,
    ) -> Result<Vec<QuarantinedFile>> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let tabular_id = match table {
            Some((namespace, name)) => Some(self.table_id(&warehouse, namespace, &name).await?),
            None => None,
        };
        let filter = QuarantineFilter {
            warehouse_id: warehouse.id.as_str().to_owned(),
            tabular_id,
            after,
            limit: limit.clamp(1, 1000),
            ..QuarantineFilter::default()
        };
        self.queue()?.quarantined(&filter).await
    }

    /// Restores quarantined files of one table (all, or those at `locations`): they are kept
    /// for good (warehouse admins); how many.
    pub async fn restore(
        &self,
        ctx: &RequestContext,
        warehouse: &str,
        (namespace, name): (NamespaceIdent, String),
        locations: Option<Vec<String>>,
    ) -> Result<u64> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let id = self.table_id(&warehouse, namespace, &name).await?;
        let queue = self.queue()?;
        let table = queue.maintained_table(&id).await?.ok_or_else(|| CatalogError::bad_request("the table is gone"))?;
        queue.restore_quarantined(&ctx.write(), &table, locations.as_deref()).await
    }

    /// The queued or running task of `kind` for table `id`, if one is found.
    async fn existing_task(
        &self,
        queue: &dyn crate::jobs::TaskStore,
        warehouse: &Warehouse,
        kind: &str,
        id: &str,
    ) -> Result<Option<String>> {
        for state in [crate::jobs::TaskState::Queued, crate::jobs::TaskState::Running] {
            let filter = crate::jobs::TaskFilter {
                kind: Some(kind.to_owned()),
                state: Some(state),
                warehouse_id: Some(warehouse.id.as_str().to_owned()),
                limit: Some(1000),
                ..Default::default()
            };
            if let Some(task) =
                queue.list_tasks(&filter).await?.into_iter().find(|t| t.tabular_id.as_deref() == Some(id))
            {
                return Ok(Some(task.id));
            }
        }
        Ok(None)
    }

    async fn table_id(&self, warehouse: &Warehouse, namespace: NamespaceIdent, name: &str) -> Result<String> {
        let table = TableIdent::new(namespace, name)?;
        let head = self
            .store()
            .load_tabular_head(&warehouse.id, &table.namespace, &table.name, crate::store::TabularKind::Table)
            .await?
            .ok_or_else(|| CatalogError::no_such_table(&table))?;
        Ok(head.id.as_str().to_owned())
    }
}

fn policy_json(policy: &ExpiryPolicy) -> Value {
    json!({
        "max-snapshot-age-ms": policy.max_snapshot_age_ms,
        "min-snapshots-to-keep": policy.min_snapshots_to_keep,
        "max-ref-age-ms": policy.max_ref_age_ms,
    })
}

/// Queues table `table`'s task of `kind` due at `due_ms` unless one is queued or running.
pub async fn queue_for(
    queue: &dyn crate::jobs::TaskStore,
    warehouse_id: &WarehouseId,
    table: &MaintainedTable,
    kind: &str,
    (due_ms, reason, now_ms): (i64, &str, i64),
) -> Result<bool> {
    let task = table_task(kind, reason, (warehouse_id, table), due_ms);
    Ok(queue.enqueue(&task, now_ms).await?.is_some())
}

/// Table `table`'s task of `kind`, due at `due_ms`.
pub fn table_task(
    kind: &str,
    reason: &str,
    (warehouse_id, table): (&WarehouseId, &MaintainedTable),
    due_ms: i64,
) -> NewTask {
    NewTask::for_table(kind, reason, (warehouse_id.as_str(), &table.id), (&table.namespace, &table.name), due_ms)
}
