//! Adopting existing Parquet datasets as Iceberg tables in place: the files stay where they
//! are, read-only; the catalog lists the source, reads only the files' footers, writes
//! manifests that reference them and commits one append per run through the ordinary commit
//! path (atomic, audited, visible to every engine at once).
//!
//! - **Sources.** A dataset is adopted from a registered source location of the warehouse (or
//!   from inside its storage root, which registers the dataset's prefix as one). A source never
//!   overlaps a table's location, both ways (the store's overlap checks include sources), so
//!   nothing that deletes a table's files (purge, expiry, orphan clean-up, metadata clean-up:
//!   all confined to the table's own recorded locations) can reach a source file, and new
//!   writes go to the table's own location.
//! - **A run** lists the source, leaves out hidden files (`_SUCCESS`, `.crc`, `_temporary/`),
//!   compares what it finds with what the table holds (its current snapshot's manifests are the
//!   truth: a run that crashed after its commit adds nothing twice), reads the footers of new
//!   files, unifies their schemas over the table's, takes partition values from paths, writes
//!   manifests and commits. Files that are not Parquet, corrupt, changed in place or whose
//!   path and content disagree are skipped and named in the report; they never fail the run.
//! - **Re-syncs** are the same run on the existing table; `continuous` adoptions re-sync on a
//!   schedule through the task queue, as the system, with the reason recorded.

pub mod footer;
pub mod hive;
pub mod manifests;
pub mod schema;
pub mod store;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, Datum, Literal, Operation, PartitionSpec, PrimitiveLiteral,
    PrimitiveType, Schema, Snapshot, SnapshotReference, SnapshotRetention, Struct, Summary, TableMetadata, Transform,
    Type, UnboundPartitionSpec,
};
use iceberg::{TableRequirement, TableUpdate};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::files::ListedFile;
use crate::ident::{NamespaceIdent, StorageRoot};
use crate::jobs::NewTask;
use crate::schema_cost::Pending;
use crate::store::Warehouse;
use crate::tables::{SnapshotMode, TableChange, TableIdent};
use store::{AdoptedFile, Adoption, AdoptionMode, AdoptionRun, SourceLocation};

crate::service::area!(
    /// Adoption of Parquet datasets in place: source locations, adoptions, runs.
    Adoptions,
    adoptions
);

/// The task kind of an adoption run (a large first run, and every scheduled re-sync).
pub const SYNC_KIND: &str = "adoption-sync";
/// The table property naming the adoption that made a table.
pub const PROPERTY_ADOPTION: &str = "icegate.adoption.id";
/// The table property naming the source prefix a table's adopted files lie in.
pub const PROPERTY_SOURCE: &str = "icegate.adoption.source";
const NAME_MAPPING: &str = "schema.name-mapping.default";
/// How many commits a run tries when writers keep committing to the table meanwhile.
const MAX_COMMIT_TRIES: usize = 5;
/// Files named in a report at most, per list (the counts are always whole).
const MAX_NAMED: usize = 1_000;

/// The server's bounds on adoption (`adoption.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdoptionDefaults {
    /// Files a run lists at most: a source holding more is refused, not half adopted.
    pub max_files: usize,
    /// The largest Parquet footer read (bytes); a file with a larger one is skipped.
    pub max_footer_bytes: u64,
    /// Footers read at once.
    pub concurrency: usize,
    /// A first run with more new files than this is queued as a task (`202`).
    pub inline_files: usize,
    /// How often a continuous adoption re-syncs, unless it says.
    pub sync_interval: Duration,
    /// The floor under every sync interval.
    pub min_sync_interval: Duration,
}

impl Default for AdoptionDefaults {
    fn default() -> Self {
        Self {
            max_files: 100_000,
            max_footer_bytes: 16 * 1024 * 1024,
            concurrency: 16,
            inline_files: 2_000,
            sync_interval: Duration::from_secs(3600),
            min_sync_interval: Duration::from_secs(60),
        }
    }
}

/// How a dataset's files are partitioned.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Partitioning {
    /// Unpartitioned.
    None,
    /// `key=value` directories: identity partitions on those keys.
    Hive,
    /// Partition fields on the files' own columns; each file's value comes from its column
    /// bounds (the transform of its lower and upper bound must agree).
    Spec { fields: Vec<SpecField> },
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SpecField {
    /// The column.
    pub source: String,
    /// `identity`, `year`, `month`, `day`, `hour`, `bucket[N]`, `truncate[W]`, `void`.
    pub transform: String,
    /// The partition field's name (default: the column's for identity, `<column>_<transform>`).
    #[serde(default)]
    pub name: Option<String>,
}

/// What an adoption keeps besides its source and table (stored as its `settings`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Settings {
    pub partitioning: Partitioning,
    /// How often a continuous adoption re-syncs (ms).
    pub sync_interval_ms: i64,
    /// Files gone from the source are removed from the table (a delete snapshot); otherwise
    /// they are only reported.
    #[serde(default)]
    pub remove_missing: bool,
}

/// An adoption as asked for.
#[derive(Debug, Clone)]
pub struct AdoptRequest {
    pub source: String,
    pub namespace: NamespaceIdent,
    pub name: String,
    /// The table's own location (default: its namespace's directory); never inside the source.
    pub location: Option<String>,
    pub partitioning: Partitioning,
    pub mode: AdoptionMode,
    pub dry_run: bool,
    pub properties: HashMap<String, String>,
    pub sync_interval: Option<Duration>,
    pub remove_missing: bool,
}

/// What a run (or a request that queued one) answers.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The run's report.
    Done(Value),
    /// Queued: the adoption's id and the task running it.
    Queued { adoption_id: String, task_id: String },
}

/// An adoption and its latest runs, as `GET` shows it.
#[derive(Debug, Clone)]
pub struct AdoptionView {
    pub adoption: Adoption,
    pub runs: Vec<AdoptionRun>,
}

/// One run's plan: which table, from where, how.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct RunSpec {
    adoption_id: String,
    source: String,
    /// The registered source location (or storage root) `source` lies in.
    root: String,
    namespace: Vec<String>,
    name: String,
    location: Option<String>,
    settings: Settings,
    mode: String,
    properties: HashMap<String, String>,
    /// The table's id once the first run made it (`None`: this run creates it).
    tabular_id: Option<String>,
    created_by: String,
}

impl RunSpec {
    /// The adoption as the store keeps it (its table's id empty until its first run commits).
    fn record(&self, warehouse: &Warehouse, now_ms: i64) -> Result<Adoption> {
        Ok(Adoption {
            id: self.adoption_id.clone(),
            warehouse_id: warehouse.id.as_str().to_owned(),
            tabular_id: self.tabular_id.clone().unwrap_or_default(),
            namespace: NamespaceIdent::from_levels(self.namespace.clone())?,
            name: self.name.clone(),
            source: self.source.clone(),
            settings: json!({ "settings": self.settings, "root": self.root }),
            mode: AdoptionMode::parse(&self.mode)?,
            created_at_ms: now_ms,
            created_by: self.created_by.clone(),
        })
    }

    pub(crate) fn adoption_id(&self) -> &str {
        &self.adoption_id
    }

    /// The run that creates the table.
    pub(crate) fn is_first_run(&self) -> bool {
        self.tabular_id.is_none()
    }
}

/// A file found new in the source, with what its footer and path said.
struct Candidate {
    listed: ListedFile,
    footer: footer::Footer,
    path_values: hive::PathValues,
}

/// The normal form of a source location: a storage URL without a trailing slash.
fn normal_location(location: &str) -> Result<String> {
    StorageRoot::parse(location).map(|root| root.as_str().to_owned()).map_err(|_| {
        CatalogError::bad_request(format!(
            "invalid source location {location:?}: a file:///absolute/path or s3://bucket/prefix without empty, \
             `.` or `..` segments"
        ))
    })
}

/// Whether `inner` is `outer` or lies below it, in whole path segments.
fn within(outer: &str, inner: &str) -> bool {
    inner == outer || inner.strip_prefix(outer).is_some_and(|rest| rest.starts_with('/'))
}

fn bucket_of(location: &str) -> Option<&str> {
    location.strip_prefix("s3://").map(|rest| rest.split('/').next().unwrap_or(rest))
}

/// Hidden by the Hadoop convention: a segment starting with `_` or `.` (`_SUCCESS`,
/// `_temporary/`, `.part-0.crc`). Such files are never data.
fn hidden(relative: &str) -> bool {
    relative.split('/').any(|segment| segment.starts_with('_') || segment.starts_with('.'))
}

fn named<T: serde::Serialize>(items: &[T]) -> Value {
    json!(items.iter().take(MAX_NAMED).collect::<Vec<_>>())
}

impl Adoptions<'_> {
    fn queue(&self) -> Result<&Arc<dyn crate::jobs::TaskStore>> {
        self.task_store().ok_or_else(|| {
            CatalogError::bad_request("adoption needs the task queue (run the catalog as a server: icegate serve)")
        })
    }

    /// Checks `location` as a source of `warehouse` (before anything is read): the warehouse's
    /// scheme (S3: its bucket, which its credentials reach), not containing its storage root; a
    /// `file://` source outside the storage root needs a server admin (it opens the server's file
    /// system). Other warehouses' storage is the store's check, made as it records the source.
    async fn check_source(&self, ctx: &RequestContext, warehouse: &Warehouse, location: &str) -> Result<()> {
        let root = warehouse.storage_root.as_str();
        let (scheme, wh_scheme) = (location.split("://").next(), root.split("://").next());
        if scheme != wh_scheme {
            return Err(CatalogError::bad_request(format!(
                "source location {location} is not in the warehouse's storage ({root}): sources use its scheme"
            )));
        }
        if location.starts_with("s3://") {
            if bucket_of(location) != bucket_of(root) {
                return Err(CatalogError::bad_request(format!(
                    "source location {location} is in another bucket than the warehouse's storage root {root} \
                     (the warehouse's credentials, vending and signing reach its bucket only)"
                )));
            }
            if !location.trim_start_matches("s3://").contains('/') {
                return Err(CatalogError::bad_request(
                    "a source location is a prefix inside a bucket, not a whole bucket",
                ));
            }
        }
        if within(location, root) {
            return Err(CatalogError::bad_request(format!(
                "source location {location} contains the warehouse's storage root {root}"
            )));
        }
        if location.starts_with("file://") && !within(root, location) {
            ctx.require(&Target::Server, Privilege::Admin, || {
                CatalogError::Forbidden(
                    "a file:// source location outside the warehouse's storage root needs admin on the server".into(),
                )
            })
            .await?;
        }
        Ok(())
    }

    /// Fails when `location` equals, lies inside or contains another warehouse's storage root.
    async fn check_other_warehouses(&self, warehouse: &Warehouse, location: &str) -> Result<()> {
        for other in self.store().list_warehouses(None).await? {
            let theirs = other.storage_root.as_str();
            if other.id != warehouse.id && (within(theirs, location) || within(location, theirs)) {
                return Err(CatalogError::Forbidden(format!(
                    "{location} overlaps the storage of another warehouse: it is not adopted"
                )));
            }
        }
        Ok(())
    }

    /// Registers a read-only source location (admins of the warehouse; `file://` outside its
    /// storage root: server admins).
    pub async fn add_source(&self, ctx: &RequestContext, warehouse: &str, location: &str) -> Result<SourceLocation> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let location = normal_location(location)?;
        self.check_source(ctx, &warehouse, &location).await?;
        let now = self.clock().now_ms();
        self.queue()?.add_source_location(&ctx.write(), warehouse.id.as_str(), &location, now).await
    }

    pub async fn sources(&self, ctx: &RequestContext, warehouse: &str) -> Result<Vec<SourceLocation>> {
        let warehouse = self.administered(ctx, warehouse).await?;
        self.queue()?.source_locations(warehouse.id.as_str()).await
    }

    /// Removes a source location (not while an adoption reads from it).
    pub async fn remove_source(&self, ctx: &RequestContext, warehouse: &str, location: &str) -> Result<()> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let location = normal_location(location)?;
        if !self.queue()?.remove_source_location(&ctx.write(), warehouse.id.as_str(), &location).await? {
            return Err(CatalogError::no_such_adoption(format!("no source location {location} in this warehouse")));
        }
        Ok(())
    }

    /// The registered source location (or the storage root) `source` lies in.
    async fn root_of(&self, warehouse: &Warehouse, source: &str) -> Result<Option<String>> {
        let sources = self.queue()?.source_locations(warehouse.id.as_str()).await?;
        Ok(sources.into_iter().map(|s| s.location).filter(|s| within(s, source)).min_by_key(String::len))
    }

    /// Adopts a dataset (admins of the warehouse): a dry run answers the report and creates
    /// nothing; a run creates the table with its first snapshot, or, for a source with more
    /// new files than `adoption.inline_files`, queues the run and answers its task.
    pub async fn adopt(&self, ctx: &RequestContext, warehouse: &str, request: AdoptRequest) -> Result<Outcome> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let queue = self.queue()?.clone();
        let source = normal_location(&request.source)?;
        let table = TableIdent::new(request.namespace.clone(), &request.name)?;
        let root = match self.root_of(&warehouse, &source).await? {
            // A source inside the storage root is read from the root down, each directory
            // opened without following a link: a link planted there reaches nothing outside.
            Some(root) if within(warehouse.storage_root.as_str(), &root) => warehouse.storage_root.as_str().to_owned(),
            Some(root) => root,
            None if within(warehouse.storage_root.as_str(), &source) && source != warehouse.storage_root.as_str() => {
                // Inside the storage root: registered as a source first (the store refuses it if
                // it overlaps a table), so no table is placed over it later.
                if !request.dry_run {
                    queue
                        .add_source_location(&ctx.write(), warehouse.id.as_str(), &source, self.clock().now_ms())
                        .await?;
                }
                warehouse.storage_root.as_str().to_owned()
            }
            None => {
                return Err(CatalogError::Forbidden(format!(
                    "{source} lies in no source location of this warehouse (register one: POST \
                     /management/v1/warehouses/{}/source-locations)",
                    warehouse.name
                )));
            }
        };
        if !self.store().namespace_exists(&warehouse.id, &table.namespace).await? {
            return Err(CatalogError::no_such_namespace(&table.namespace));
        }
        let location = request
            .location
            .as_deref()
            .map(|l| crate::tables::location_inside(warehouse.storage_root.as_str(), l))
            .transpose()?;
        let interval = request.sync_interval.unwrap_or(self.adoption_defaults().sync_interval);
        if interval < self.adoption_defaults().min_sync_interval {
            return Err(CatalogError::bad_request(format!(
                "sync-interval {} is below the server's floor of {} (adoption.min_sync_interval)",
                humantime_serde::re::humantime::format_duration(interval),
                humantime_serde::re::humantime::format_duration(self.adoption_defaults().min_sync_interval)
            )));
        }
        for key in request.properties.keys() {
            if key == NAME_MAPPING || key.starts_with("icegate.") {
                return Err(CatalogError::bad_request(format!("property {key} is adoption's own")));
            }
        }
        let spec = RunSpec {
            adoption_id: uuid::Uuid::now_v7().to_string(),
            source,
            root,
            namespace: table.namespace.levels().to_vec(),
            name: table.name.clone(),
            location,
            settings: Settings {
                partitioning: request.partitioning,
                sync_interval_ms: i64::try_from(interval.as_millis()).unwrap_or(i64::MAX),
                remove_missing: request.remove_missing,
            },
            mode: request.mode.as_str().to_owned(),
            properties: request.properties,
            tabular_id: None,
            created_by: ctx.write().principal,
        };
        // The table must not exist (checked again, atomically, by the commit that creates it).
        if self.tables().load(ctx, &warehouse.id, &table, SnapshotMode::Refs).await.is_ok() {
            return Err(CatalogError::AlreadyExists(format!("Table already exists: {table}")));
        }
        if request.dry_run {
            return Ok(Outcome::Done(self.run(ctx, &warehouse, &spec, true).await?.report));
        }
        let listed =
            self.files().list_source(&warehouse, &spec.root, &spec.source, self.adoption_defaults().max_files).await?;
        if listed.files.len() > self.adoption_defaults().inline_files {
            queue.create_adoption(&ctx.write(), &spec.record(&warehouse, self.clock().now_ms())?).await?;
            let task =
                self.queue_run(&warehouse, &spec, self.clock().now_ms(), "a large first adoption run", false).await?;
            return Ok(Outcome::Queued { adoption_id: spec.adoption_id, task_id: task });
        }
        Ok(Outcome::Done(self.run_and_record(ctx, &warehouse, spec).await?))
    }

    /// Queues a run of `spec` due at `due_ms`. `next`: the next scheduled re-sync, queued from
    /// within the run before it (a scheduled run holds that key while it runs, and runs once
    /// more, then); otherwise a run already queued or running refuses this one.
    async fn queue_run(
        &self,
        warehouse: &Warehouse,
        spec: &RunSpec,
        due_ms: i64,
        why: &str,
        next: bool,
    ) -> Result<String> {
        let queue = self.queue()?;
        let reason = format!("{why}: adoption {} of {}", spec.adoption_id, spec.source);
        let params = serde_json::to_value(spec).map_err(|e| CatalogError::Internal(e.into()))?;
        let task = NewTask {
            warehouse_id: Some(warehouse.id.as_str().to_owned()),
            tabular_id: spec.tabular_id.clone(),
            // One run asked for, and one scheduled, at a time (a scheduled run that is running
            // runs once more, at the next one's time).
            dedupe_key: Some(format!("{SYNC_KIND}{}:{}", if next { "-next" } else { "" }, spec.adoption_id)),
            params,
            not_before_ms: due_ms,
            rerun_if_running: next,
            ..NewTask::new(SYNC_KIND, &reason, due_ms)
        };
        match queue.enqueue(&task, self.clock().now_ms()).await? {
            Some(record) => Ok(record.id),
            // Held by a run queued or running: it keeps the turn (a running one runs once more).
            None if next => Ok(String::new()),
            None => Err(CatalogError::Conflict(format!(
                "a run of adoption {} is queued or running already",
                spec.adoption_id
            ))),
        }
    }

    /// Re-syncs an adoption now (admins of its warehouse) and answers the run's report.
    pub async fn sync(&self, ctx: &RequestContext, warehouse: &str, id: &str) -> Result<Value> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let adoption = self.adoption_in(&warehouse, id).await?;
        self.run_and_record(ctx, &warehouse, Self::spec_of(&adoption)?).await
    }

    /// An adoption and its latest runs (admins of its warehouse).
    pub async fn get(&self, ctx: &RequestContext, warehouse: &str, id: &str) -> Result<AdoptionView> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let adoption = self.adoption_in(&warehouse, id).await?;
        let runs = self.queue()?.adoption_runs(&adoption.id, 10).await?;
        Ok(AdoptionView { adoption, runs })
    }

    /// A warehouse's adoptions (admins of it), a page after `after`.
    pub async fn list(
        &self,
        ctx: &RequestContext,
        warehouse: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Adoption>> {
        let warehouse = self.administered(ctx, warehouse).await?;
        self.queue()?.adoptions(warehouse.id.as_str(), after, limit.clamp(1, 1000)).await
    }

    async fn adoption_in(&self, warehouse: &Warehouse, id: &str) -> Result<Adoption> {
        match self.queue()?.adoption(id).await? {
            Some(adoption) if adoption.warehouse_id == warehouse.id.as_str() => Ok(adoption),
            _ => Err(CatalogError::no_such_adoption(format!("no adoption {id} in warehouse {}", warehouse.name))),
        }
    }

    /// The run plan of a stored adoption (`None`: no such adoption).
    pub(crate) async fn stored_spec(&self, id: &str) -> Result<Option<RunSpec>> {
        self.queue()?.adoption(id).await?.as_ref().map(Self::spec_of).transpose()
    }

    fn spec_of(adoption: &Adoption) -> Result<RunSpec> {
        let settings: Settings = serde_json::from_value(adoption.settings["settings"].clone())
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored adoption settings: {e}")))?;
        Ok(RunSpec {
            adoption_id: adoption.id.clone(),
            source: adoption.source.clone(),
            root: adoption.settings["root"].as_str().unwrap_or(&adoption.source).to_owned(),
            namespace: adoption.namespace.levels().to_vec(),
            name: adoption.name.clone(),
            location: None,
            settings,
            mode: adoption.mode.as_str().to_owned(),
            properties: HashMap::new(),
            // Empty while its first run has not committed (pending).
            tabular_id: Some(adoption.tabular_id.clone()).filter(|id| !id.is_empty()),
            created_by: adoption.created_by.clone(),
        })
    }

    /// Runs `spec` and records it: the adoption (on its first run), the run's report and the
    /// files it added; a continuous adoption's next sync is queued.
    pub(crate) async fn run_and_record(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        spec: RunSpec,
    ) -> Result<Value> {
        let queue = self.queue()?.clone();
        let started = self.clock().now_ms();
        let timer = std::time::Instant::now();
        let mut adoption = spec.record(warehouse, started)?;
        // The adoption is recorded before its first commit: from then on its source location
        // cannot be removed (and a table placed over it) while the table references its files.
        let first = spec.tabular_id.is_none();
        if first && queue.adoption(&adoption.id).await?.is_none() {
            queue.create_adoption(&ctx.write(), &adoption).await?;
        }
        let mut done = match self.run(ctx, warehouse, &spec, false).await {
            Ok(done) => done,
            Err(err) => {
                if first && !matches!(err, CatalogError::CommitStateUnknown(_)) {
                    self.forget_if_tableless(ctx, warehouse, &adoption).await;
                }
                return Err(err);
            }
        };
        done.report["elapsed-ms"] = json!(u64::try_from(timer.elapsed().as_millis()).unwrap_or(u64::MAX));
        if let Some(id) = &done.tabular_id {
            adoption.tabular_id = id.clone();
        }
        let run = AdoptionRun {
            id: uuid::Uuid::now_v7().to_string(),
            adoption_id: adoption.id.clone(),
            started_at_ms: started,
            finished_at_ms: self.clock().now_ms(),
            snapshot_id: done.snapshot_id,
            report: done.report.clone(),
        };
        queue.record_adoption_run(&ctx.write(), &adoption, &run, &done.added, &done.removed).await?;
        if adoption.mode == AdoptionMode::Continuous && !done.table_gone {
            let next = RunSpec { tabular_id: Some(adoption.tabular_id.clone()), ..spec };
            let due = self.clock().now_ms().saturating_add(next.settings.sync_interval_ms);
            // A sync already queued keeps its turn (due no later than this); this run's own
            // task, still running, runs once more then.
            self.queue_run(warehouse, &next, due, "the continuous adoption's scheduled re-sync", true).await?;
        }
        let mut report = done.report;
        report["id"] = json!(adoption.id);
        report["run-id"] = json!(run.id);
        Ok(report)
    }

    /// Forgets the pending record of a first run that failed, unless its table exists after
    /// all (made by an earlier attempt: the next attempt takes it up).
    async fn forget_if_tableless(&self, ctx: &RequestContext, warehouse: &Warehouse, adoption: &Adoption) {
        let Ok(table) = TableIdent::new(adoption.namespace.clone(), &adoption.name) else { return };
        match self.tables().load(ctx, &warehouse.id, &table, SnapshotMode::Refs).await {
            Err(CatalogError::NotFound { .. }) => {}
            Ok(loaded) if !made_by(&loaded.metadata_json, &adoption.id) => {}
            _ => return,
        }
        if let Ok(queue) = self.queue()
            && let Err(e) = queue.forget_pending_adoption(&ctx.write(), &adoption.id).await
        {
            tracing::warn!(adoption = %adoption.id, error = %e, "could not forget a failed adoption's record");
        }
    }

    /// One run: inventory, footers, schema, partitions, manifests, commit (unless `dry_run`).
    async fn run(&self, ctx: &RequestContext, warehouse: &Warehouse, spec: &RunSpec, dry_run: bool) -> Result<RunDone> {
        let table = TableIdent::new(NamespaceIdent::from_levels(spec.namespace.clone())?, &spec.name)?;
        // Checked at every run, not only at registration: no file of another warehouse is ever
        // adopted (and so read through this one's credentials), whenever that one was made.
        self.check_other_warehouses(warehouse, &spec.source).await?;
        for _ in 0..MAX_COMMIT_TRIES {
            let existing =
                match (&spec.tabular_id, self.tables().load(ctx, &warehouse.id, &table, SnapshotMode::All).await) {
                    (Some(id), Ok(loaded)) if loaded.id.as_ref().map(|i| i.as_str()) == Some(id.as_str()) => {
                        Some(loaded)
                    }
                    (Some(_), Ok(_) | Err(CatalogError::NotFound { .. })) => {
                        return Ok(RunDone::gone(format!("table {table} is gone (dropped or replaced)")));
                    }
                    (None, Err(CatalogError::NotFound { .. })) => None,
                    // A first run that committed and was cut short before it was recorded (a worker
                    // killed): its table, made by this adoption, is taken up where it was.
                    (None, Ok(loaded)) if made_by(&loaded.metadata_json, &spec.adoption_id) && !dry_run => Some(loaded),
                    (None, Ok(_)) => return Err(CatalogError::AlreadyExists(format!("Table already exists: {table}"))),
                    (_, Err(other)) => return Err(other),
                };
            let tabular_id = existing.as_ref().and_then(|l| l.id.as_ref()).map(|id| id.as_str().to_owned());
            let metadata: Option<TableMetadata> = existing
                .as_ref()
                .map(|l| serde_json::from_str(&l.metadata_json))
                .transpose()
                .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored metadata of {table}: {e}")))?;
            // 1. The source against the table (its manifests say what it holds).
            let inventory = self.inventory(warehouse, spec, metadata.as_ref()).await?;
            let Inventory { present, hidden: hidden_count, new_files, changed, missing, carried, live } = inventory;
            let prefix = format!("{}/", spec.source);
            let mut skipped: Vec<Value> = Vec::new();
            // 2. Paths: partition values, the keys every file must name.
            let (keys, with_values) = path_values(spec, metadata.as_ref(), new_files, &mut skipped)?;
            // 3. Footers, a bounded number at once.
            let mut candidates = self.read_footers(warehouse, spec, with_values, &mut skipped).await?;
            // 4. The schema over the table's.
            let fields: Vec<(&str, &[arrow_schema::Field])> =
                candidates.iter().map(|c| (c.listed.location.as_str(), c.footer.fields.as_slice())).collect();
            let unified = schema::unify(metadata.as_ref().map(|m| m.current_schema().as_ref()), &fields, &keys)?;
            let refused: HashSet<String> = unified.refused.iter().map(|(p, _)| p.clone()).collect();
            for (path, reason) in &unified.refused {
                skipped.push(json!({ "path": path, "reason": reason }));
            }
            candidates.retain(|c| !refused.contains(&c.listed.location));
            let table_schema = Arc::new(unified.schema.clone());
            // 5. The partition spec: the table's, or made from the request.
            let spec_unbound = match &metadata {
                Some(m) => m.default_partition_spec().as_ref().clone().into_unbound(),
                None => partition_spec(&spec.settings.partitioning, &keys, &table_schema)?,
            };
            let bound = spec_unbound
                .clone()
                .bind(table_schema.clone())
                .map_err(|e| CatalogError::bad_request(format!("the partition spec does not fit the schema: {e}")))?;
            // 6. Data files.
            let mut data_files = Vec::with_capacity(candidates.len());
            let mut added: Vec<AdoptedFile> = Vec::with_capacity(candidates.len());
            let mut rows_by_partition: BTreeMap<String, (Value, u64, u64)> = BTreeMap::new();
            let (mut rows, mut bytes) = (0u64, 0u64);
            for candidate in &candidates {
                let partition = match partition_of(&spec.settings.partitioning, &bound, &table_schema, candidate) {
                    Ok(p) => p,
                    Err(why) => {
                        skipped.push(json!({ "path": candidate.listed.location, "reason": why }));
                        continue;
                    }
                };
                let file = data_file(&table_schema, &bound, candidate, partition.clone())?;
                let key = manifests::partition_key(&partition);
                let shown = partition_json(&bound, &partition);
                let entry = rows_by_partition.entry(key).or_insert((shown, 0, 0));
                entry.1 += 1;
                entry.2 += candidate.footer.record_count;
                rows += candidate.footer.record_count;
                bytes += candidate.listed.size;
                added.push(AdoptedFile {
                    location: candidate.listed.location.clone(),
                    size: candidate.listed.size,
                    etag: candidate.listed.etag.clone(),
                    modified_ms: candidate.listed.modified_ms,
                    snapshot_id: 0,
                });
                data_files.push(file);
            }
            skipped.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
            let mut report = json!({
                "source": spec.source,
                "table": { "namespace": spec.namespace, "name": spec.name },
                "dry-run": dry_run,
                "files-listed": present + hidden_count,
                "files-hidden": hidden_count,
                "files-already-adopted": live.keys().filter(|p| p.starts_with(&prefix)).count() - missing.len(),
                "files-added": data_files.len(),
                "rows-added": rows,
                "bytes-added": bytes,
                "files-skipped-count": skipped.len(),
                "files-skipped": named(&skipped),
                "files-changed-count": changed.len(),
                "files-changed": named(&changed),
                "files-missing-count": missing.len(),
                "files-missing": named(&missing),
                "schema": {
                    "changed": unified.changed,
                    "columns": unified.decisions,
                },
                "partitioning": spec.settings.partitioning,
                "partitions": rows_by_partition
                    .values()
                    .map(|(p, files, rows)| json!({ "partition": p, "files": files, "rows": rows }))
                    .collect::<Vec<_>>(),
            });
            let removing = spec.settings.remove_missing && !missing.is_empty() && metadata.is_some();
            report["files-removed-count"] = json!(if removing { missing.len() } else { 0 });
            if dry_run || (data_files.is_empty() && metadata.is_some() && !unified.changed && !removing) {
                report["snapshot-id"] = Value::Null;
                return Ok(RunDone {
                    report,
                    snapshot_id: None,
                    tabular_id,
                    added: Vec::new(),
                    removed: Vec::new(),
                    table_gone: false,
                });
            }
            // 7. Manifests and the commit.
            let snapshot_id = new_snapshot_id(metadata.as_ref());
            let location = match (&metadata, &spec.location) {
                (Some(m), _) => m.location().to_owned(),
                (None, Some(location)) => location.clone(),
                (None, None) => crate::Catalog::default_location(warehouse, &table)?,
            };
            let metadata_dir = metadata
                .as_ref()
                .and_then(|m| m.properties().get("write.metadata.path").cloned())
                .unwrap_or_else(|| format!("{location}/metadata"));
            let parent = metadata.as_ref().and_then(|m| m.current_snapshot()).map(|s| s.snapshot_id());
            let sequence_number = metadata.as_ref().map_or(1, |m| m.next_sequence_number());
            // Files gone from the source, when asked: their manifests rewritten with them deleted.
            let mut carried = carried;
            let mut rewritten_locations = Vec::new();
            let mut removed_files: Vec<String> = Vec::new();
            let (mut removed_records, mut removed_bytes) = (0u64, 0u64);
            if removing && let Some(m) = &metadata {
                let gone: HashSet<String> = missing.iter().cloned().collect();
                let affected: HashSet<&str> =
                    missing.iter().filter_map(|p| live.get(p)).map(|f| f.manifest.as_str()).collect();
                for slot in carried.iter_mut() {
                    if !affected.contains(slot.manifest_path.as_str()) {
                        continue;
                    }
                    let spec_of = m.partition_spec_by_id(slot.partition_spec_id).ok_or_else(|| {
                        CatalogError::Internal(anyhow::anyhow!("a manifest of an unknown partition spec"))
                    })?;
                    let schema_of = m.current_schema().clone();
                    let done = manifests::rewrite_without(
                        self.files().as_ref(),
                        warehouse,
                        (&metadata_dir, snapshot_id),
                        (schema_of, spec_of.as_ref()),
                        slot,
                        &gone,
                        self.max_metadata_bytes(),
                    );
                    let done = match done.await {
                        Ok(done) => done,
                        Err(e) => {
                            self.delete_written(warehouse, &rewritten_locations).await;
                            return Err(e);
                        }
                    };
                    rewritten_locations.push(done.location.clone());
                    removed_files.extend(done.removed);
                    removed_records += done.records;
                    removed_bytes += done.bytes;
                    *slot = done.manifest;
                }
                removed_files.sort();
                report["files-removed"] = named(&removed_files);
                report["rows-removed"] = json!(removed_records);
            }
            let written = if data_files.is_empty() && removed_files.is_empty() {
                None
            } else {
                let what = manifests::SnapshotFiles {
                    metadata_dir: &metadata_dir,
                    snapshot_id,
                    parent_snapshot_id: parent,
                    sequence_number,
                    schema: table_schema.clone(),
                    spec: &bound,
                    carried,
                };
                match manifests::write(self.files().as_ref(), warehouse, what, data_files).await {
                    Ok(mut written) => {
                        written.locations.extend(rewritten_locations);
                        Some(written)
                    }
                    Err(e) => {
                        self.delete_written(warehouse, &rewritten_locations).await;
                        return Err(e);
                    }
                }
            };
            // Verified: the records per partition the written manifests hold are the footers'.
            if let Some(written) = &written {
                let footers: BTreeMap<String, u64> =
                    rows_by_partition.iter().map(|(k, (_, _, r))| (k.clone(), *r)).collect();
                if footers != written.records_by_partition {
                    self.delete_written(warehouse, &written.locations).await;
                    return Err(CatalogError::Internal(anyhow::anyhow!(
                        "the manifests written hold other row counts than the footers read; nothing committed"
                    )));
                }
                report["verified"] = json!({ "rows-per-partition-match-footers": true });
            }
            let mut updates: Vec<Pending<TableUpdate>> = Vec::new();
            let mut requirements = Vec::new();
            let mut properties: HashMap<String, String> = HashMap::new();
            if unified.changed {
                updates.push(Pending::built(TableUpdate::AddSchema { schema: unified.schema.clone() }));
                updates.push(Pending::built(TableUpdate::SetCurrentSchema { schema_id: -1 }));
                properties.insert(NAME_MAPPING.into(), schema::name_mapping(&unified.schema).to_string());
            }
            match &metadata {
                None => {
                    requirements.push(TableRequirement::NotExist);
                    updates.push(Pending::built(TableUpdate::SetLocation { location: location.clone() }));
                    updates.push(Pending::built(TableUpdate::AddSpec { spec: spec_unbound.clone() }));
                    updates.push(Pending::built(TableUpdate::SetDefaultSpec { spec_id: -1 }));
                    properties.extend(spec.properties.clone());
                    properties.insert(PROPERTY_ADOPTION.into(), spec.adoption_id.clone());
                    properties.insert(PROPERTY_SOURCE.into(), spec.source.clone());
                }
                Some(m) => {
                    requirements
                        .push(TableRequirement::RefSnapshotIdMatch { r#ref: "main".into(), snapshot_id: parent });
                    requirements
                        .push(TableRequirement::CurrentSchemaIdMatch { current_schema_id: m.current_schema_id() });
                }
            }
            if !properties.is_empty() {
                updates.push(Pending::built(TableUpdate::SetProperties { updates: properties }));
            }
            if let Some(written) = &written {
                let snapshot = snapshot(SnapshotParts {
                    id: snapshot_id,
                    parent,
                    sequence_number,
                    at_ms: self.clock().now_ms(),
                    manifest_list: &written.manifest_list,
                    schema_id: unified.schema.schema_id(),
                    added: (added.len() as u64, rows, bytes),
                    removed: (removed_files.len() as u64, removed_records, removed_bytes),
                    before: metadata.as_ref().and_then(|m| m.current_snapshot()).map(|s| s.summary().clone()),
                    adoption: &spec.adoption_id,
                });
                updates.push(Pending::built(TableUpdate::AddSnapshot { snapshot }));
                updates.push(Pending::built(TableUpdate::SetSnapshotRef {
                    ref_name: "main".into(),
                    reference: SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
                }));
            }
            let change = TableChange {
                table: table.clone(),
                requirements,
                updates,
                base: existing.as_ref().and_then(|l| l.metadata_location.clone()),
            };
            match self.tables().commit(ctx, &warehouse.id, change).await {
                Ok(result) => {
                    let committed = written.as_ref().map(|_| snapshot_id);
                    for file in &mut added {
                        file.snapshot_id = snapshot_id;
                    }
                    report["snapshot-id"] = json!(committed);
                    return Ok(RunDone {
                        report,
                        snapshot_id: committed,
                        tabular_id: result.id.map(|id| id.as_str().to_owned()),
                        added,
                        removed: removed_files,
                        table_gone: false,
                    });
                }
                Err(err) => {
                    if let Some(written) = &written {
                        self.delete_written(warehouse, &written.locations).await;
                    }
                    match err {
                        // A writer committed meanwhile: plan again on what it made.
                        CatalogError::CommitFailed(_) if metadata.is_some() => continue,
                        CatalogError::CommitFailed(why) if why.contains("already exists") => {
                            return Err(CatalogError::AlreadyExists(format!("Table already exists: {table}")));
                        }
                        other => return Err(other),
                    }
                }
            }
        }
        Err(CatalogError::Unavailable(format!("{table} kept changing while the adoption committed; retry later")))
    }

    /// Deletes the manifests a run wrote for a commit that did not happen (by exact name: the
    /// run's own new files, never anything else).
    async fn delete_written(&self, warehouse: &Warehouse, locations: &[String]) {
        for location in locations {
            self.delete_quietly(warehouse, location).await;
        }
    }
}

/// The source against the table: what is new, changed in place, gone.
struct Inventory {
    /// Files listed (not hidden).
    present: usize,
    hidden: usize,
    new_files: Vec<ListedFile>,
    changed: Vec<Value>,
    missing: Vec<String>,
    /// The table's current manifests, and the live data files they hold.
    carried: Vec<iceberg::spec::ManifestFile>,
    live: HashMap<String, manifests::LiveFile>,
}

/// Whether a file the table holds changed since it was adopted: its size (the manifest's), or
/// its ETag (S3) or modification time (local) as adoption recorded them.
fn changed_since(held: &manifests::LiveFile, was: Option<&AdoptedFile>, now: &ListedFile) -> bool {
    held.size != now.size
        || was.is_some_and(|w| {
            (!w.etag.is_empty() && !now.etag.is_empty() && w.etag != now.etag)
                || (w.etag.is_empty() && w.modified_ms != now.modified_ms)
        })
}

impl Adoptions<'_> {
    async fn inventory(
        &self,
        warehouse: &Warehouse,
        spec: &RunSpec,
        metadata: Option<&TableMetadata>,
    ) -> Result<Inventory> {
        let max_files = self.adoption_defaults().max_files;
        let listing = self.files().list_source(warehouse, &spec.root, &spec.source, max_files).await?;
        if !listing.complete {
            return Err(CatalogError::bad_request(format!(
                "{} holds more than {max_files} files (adoption.max_files): adopt it in parts (one prefix each)",
                spec.source
            )));
        }
        let prefix = format!("{}/", spec.source);
        let mut hidden_count = 0usize;
        let mut present: Vec<ListedFile> = Vec::new();
        for file in listing.files {
            let Some(relative) = file.location.strip_prefix(&prefix) else { continue };
            if hidden(relative) {
                hidden_count += 1;
            } else {
                present.push(file);
            }
        }
        present.sort_by(|a, b| a.location.cmp(&b.location));
        let (carried, live) = match metadata.and_then(|m| m.current_snapshot()) {
            Some(snapshot) => {
                let list = snapshot.manifest_list();
                manifests::current(self.files().as_ref(), warehouse, list, self.max_metadata_bytes()).await?
            }
            None => (Vec::new(), HashMap::new()),
        };
        let recorded: HashMap<String, AdoptedFile> = match &spec.tabular_id {
            Some(_) => {
                let files = self.queue()?.adopted_files(&spec.adoption_id).await?;
                files.into_iter().map(|f| (f.location.clone(), f)).collect()
            }
            None => HashMap::new(),
        };
        let mut changed = Vec::new();
        let mut new_files = Vec::new();
        for file in &present {
            match live.get(&file.location) {
                None => new_files.push(file.clone()),
                Some(held) if changed_since(held, recorded.get(&file.location), file) => changed.push(json!({
                    "path": file.location,
                    "reason": format!(
                        "changed in place since it was adopted (size {} then, {} now{}); the table still references \
                         it and readers may fail: restore the file, or remove it from the table",
                        held.size,
                        file.size,
                        if held.size == file.size { ", ETag or mtime differ" } else { "" }
                    ),
                })),
                Some(_) => {}
            }
        }
        let present_set: HashSet<&str> = present.iter().map(|f| f.location.as_str()).collect();
        let mut missing: Vec<String> =
            live.keys().filter(|p| p.starts_with(&prefix) && !present_set.contains(p.as_str())).cloned().collect();
        missing.sort();
        Ok(Inventory { present: present.len(), hidden: hidden_count, new_files, changed, missing, carried, live })
    }

    /// The footers of `files`, read a bounded number at once; the files that cannot be
    /// adopted go to `skipped` with the reason.
    async fn read_footers(
        &self,
        warehouse: &Warehouse,
        spec: &RunSpec,
        files: Vec<(ListedFile, hive::PathValues)>,
        skipped: &mut Vec<Value>,
    ) -> Result<Vec<Candidate>> {
        let defaults = self.adoption_defaults();
        let io = self.files().clone();
        let read: Vec<(ListedFile, hive::PathValues, FooterRead)> = futures::stream::iter(files)
            .map(|(file, values)| {
                let (io, root, wh) = (io.clone(), spec.root.clone(), warehouse.clone());
                async move {
                    let footer = footer::read(io.as_ref(), &wh, &root, &file, defaults.max_footer_bytes).await;
                    (file, values, footer)
                }
            })
            .buffer_unordered(defaults.concurrency.max(1))
            .collect()
            .await;
        let mut candidates = Vec::with_capacity(read.len());
        for (listed, path_values, footer) in read {
            match footer? {
                Ok(footer) if footer.has_field_ids => skipped.push(json!({
                    "path": listed.location,
                    "reason": "written with Iceberg field ids (an Iceberg table's file): register that table's \
                               metadata instead of adopting its files",
                })),
                Ok(footer) => candidates.push(Candidate { listed, footer, path_values }),
                Err(skip) => skipped.push(json!({ "path": listed.location, "reason": skip.0 })),
            }
        }
        candidates.sort_by(|a, b| a.listed.location.cmp(&b.listed.location));
        Ok(candidates)
    }
}

/// What reading one footer gave: the footer, a reason to skip the file, or a storage failure.
type FooterRead = Result<std::result::Result<footer::Footer, footer::Skip>>;

/// The partition values of each new file's path (Hive), and the keys every file must name: the
/// table's identity partitions, or (a new table) the first file's. Files whose paths do not
/// fit go to `skipped`.
#[allow(clippy::type_complexity)]
fn path_values(
    spec: &RunSpec,
    metadata: Option<&TableMetadata>,
    files: Vec<ListedFile>,
    skipped: &mut Vec<Value>,
) -> Result<(Vec<(String, hive::ColumnType)>, Vec<(ListedFile, hive::PathValues)>)> {
    if spec.settings.partitioning != Partitioning::Hive {
        return Ok((Vec::new(), files.into_iter().map(|f| (f, Vec::new())).collect()));
    }
    let prefix_len = spec.source.len() + 1;
    let mut with_values = Vec::with_capacity(files.len());
    for file in files {
        match hive::path_values(&file.location[prefix_len..]) {
            Err(why) => skipped.push(json!({ "path": file.location, "reason": why.0 })),
            Ok(values) => with_values.push((file, values)),
        }
    }
    let keys: Vec<(String, hive::ColumnType)> = if let Some(metadata) = metadata {
        let schema = metadata.current_schema();
        let kind = |source_id: i32| match schema.field_by_id(source_id).map(|c| c.field_type.as_ref()) {
            Some(Type::Primitive(PrimitiveType::Date)) => hive::ColumnType::Date,
            Some(Type::Primitive(PrimitiveType::Long | PrimitiveType::Int)) => hive::ColumnType::Long,
            _ => hive::ColumnType::String,
        };
        metadata.default_partition_spec().fields().iter().map(|f| (f.name.clone(), kind(f.source_id))).collect()
    } else {
        match with_values.first() {
            None => Vec::new(),
            Some((_, first)) => {
                let names: Vec<&String> = first.iter().map(|(k, _)| k).collect();
                let same: Vec<(&str, &hive::PathValues)> = with_values
                    .iter()
                    .filter(|(_, v)| v.iter().map(|(k, _)| k).eq(names.iter().copied()))
                    .map(|(f, v)| (f.location.as_str(), v))
                    .collect();
                hive::partitioning(same).map_err(|e| CatalogError::bad_request(e.0))?
            }
        }
    };
    let names: Vec<&String> = keys.iter().map(|(k, _)| k).collect();
    with_values.retain(|(file, values)| {
        let theirs: Vec<&String> = values.iter().map(|(k, _)| k).collect();
        if theirs == names {
            return true;
        }
        skipped.push(json!({
            "path": file.location,
            "reason": format!("partition keys {theirs:?} differ from the table's {names:?}"),
        }));
        false
    });
    Ok((keys, with_values))
}

/// What a run did.
pub(crate) struct RunDone {
    report: Value,
    snapshot_id: Option<i64>,
    tabular_id: Option<String>,
    added: Vec<AdoptedFile>,
    removed: Vec<String>,
    table_gone: bool,
}

impl RunDone {
    fn gone(why: String) -> Self {
        Self {
            report: json!({ "skipped": why, "files-added": 0 }),
            snapshot_id: None,
            tabular_id: None,
            added: Vec::new(),
            removed: Vec::new(),
            table_gone: true,
        }
    }
}

/// Whether a table's metadata names `adoption` as the adoption that made it.
fn made_by(metadata_json: &str, adoption: &str) -> bool {
    #[derive(Deserialize)]
    struct Properties {
        #[serde(default)]
        properties: HashMap<String, String>,
    }
    serde_json::from_str::<Properties>(metadata_json)
        .is_ok_and(|m| m.properties.get(PROPERTY_ADOPTION).is_some_and(|id| id == adoption))
}

/// A snapshot id no snapshot of the table has (positive, random).
fn new_snapshot_id(metadata: Option<&TableMetadata>) -> i64 {
    loop {
        let id = (uuid::Uuid::new_v4().as_u64_pair().0 & (i64::MAX as u64)) as i64;
        if id != 0 && metadata.is_none_or(|m| m.snapshot_by_id(id).is_none()) {
            return id;
        }
    }
}

struct SnapshotParts<'a> {
    id: i64,
    parent: Option<i64>,
    sequence_number: i64,
    at_ms: i64,
    manifest_list: &'a str,
    schema_id: i32,
    /// Files, records, bytes.
    added: (u64, u64, u64),
    removed: (u64, u64, u64),
    before: Option<Summary>,
    adoption: &'a str,
}

fn snapshot(parts: SnapshotParts<'_>) -> Snapshot {
    let (files, records, bytes) = parts.added;
    let (gone_files, gone_records, gone_bytes) = parts.removed;
    let total = |key: &str, added: u64, removed: u64| -> Option<String> {
        match &parts.before {
            None => Some(added.to_string()),
            Some(before) => before
                .additional_properties
                .get(key)?
                .parse::<u64>()
                .ok()
                .map(|t| (t + added).saturating_sub(removed).to_string()),
        }
    };
    let mut summary = HashMap::from([("icegate.adoption.id".to_owned(), parts.adoption.to_owned())]);
    if files > 0 {
        summary.insert("added-data-files".to_owned(), files.to_string());
        summary.insert("added-records".to_owned(), records.to_string());
        summary.insert("added-files-size".to_owned(), bytes.to_string());
    }
    if gone_files > 0 {
        summary.insert("deleted-data-files".to_owned(), gone_files.to_string());
        summary.insert("deleted-records".to_owned(), gone_records.to_string());
        summary.insert("removed-files-size".to_owned(), gone_bytes.to_string());
    }
    for (key, added, removed) in [
        ("total-data-files", files, gone_files),
        ("total-records", records, gone_records),
        ("total-files-size", bytes, gone_bytes),
    ] {
        if let Some(value) = total(key, added, removed) {
            summary.insert(key.to_owned(), value);
        }
    }
    let operation = match (files > 0, gone_files > 0) {
        (_, false) => Operation::Append,
        (false, true) => Operation::Delete,
        (true, true) => Operation::Overwrite,
    };
    for key in ["total-delete-files", "total-position-deletes", "total-equality-deletes"] {
        let value = parts.before.as_ref().map_or(Some("0".to_owned()), |b| b.additional_properties.get(key).cloned());
        if let Some(value) = value {
            summary.insert(key.to_owned(), value);
        }
    }
    Snapshot::builder()
        .with_snapshot_id(parts.id)
        .with_parent_snapshot_id(parts.parent)
        .with_sequence_number(parts.sequence_number)
        .with_timestamp_ms(parts.at_ms)
        .with_manifest_list(parts.manifest_list)
        .with_summary(Summary { operation, additional_properties: summary })
        .with_schema_id(parts.schema_id)
        .build()
}

fn parse_transform(text: &str) -> Result<Transform> {
    text.parse::<Transform>().map_err(|e| CatalogError::bad_request(format!("unknown transform {text:?}: {e}")))
}

/// The partition spec a new table gets.
fn partition_spec(
    partitioning: &Partitioning,
    keys: &[(String, hive::ColumnType)],
    schema: &Schema,
) -> Result<UnboundPartitionSpec> {
    let mut builder = UnboundPartitionSpec::builder().with_spec_id(0);
    let column = |name: &str| {
        schema
            .field_by_name(name)
            .map(|f| f.id)
            .ok_or_else(|| CatalogError::bad_request(format!("partition source {name:?} is no column of the files")))
    };
    match partitioning {
        Partitioning::None => {}
        Partitioning::Hive => {
            for (name, _) in keys {
                builder = builder
                    .add_partition_field(column(name)?, name.clone(), Transform::Identity)
                    .map_err(|e| CatalogError::bad_request(format!("partition field {name}: {e}")))?;
            }
        }
        Partitioning::Spec { fields } => {
            for field in fields {
                let transform = parse_transform(&field.transform)?;
                let name = field.name.clone().unwrap_or_else(|| match transform {
                    Transform::Identity => field.source.clone(),
                    _ => format!("{}_{}", field.source, field.transform.split('[').next().unwrap_or("part")),
                });
                builder = builder
                    .add_partition_field(column(&field.source)?, name.clone(), transform)
                    .map_err(|e| CatalogError::bad_request(format!("partition field {name}: {e}")))?;
            }
        }
    }
    Ok(builder.build())
}

/// A path's partition value as a datum of its column's type (`Ok(None)`: null).
fn path_datum(field_type: &Type, value: Option<&str>) -> std::result::Result<Option<Datum>, String> {
    let Some(value) = value else { return Ok(None) };
    let datum = match field_type {
        Type::Primitive(PrimitiveType::Date) => hive::date_days(value).map(Datum::date),
        Type::Primitive(PrimitiveType::Long) => value.parse::<i64>().ok().map(Datum::long),
        Type::Primitive(PrimitiveType::Int) => value.parse::<i32>().ok().map(Datum::int),
        Type::Primitive(PrimitiveType::String) => Some(Datum::string(value)),
        other => return Err(format!("a partition value from a path cannot be of type {other}")),
    };
    datum.map(Some).ok_or_else(|| format!("{value:?} is not a {field_type}"))
}

/// A datum of a file's own type as a datum of the table's type (int → long, float → double,
/// otherwise the same).
fn widened(datum: &Datum, to: &PrimitiveType) -> Option<Datum> {
    match (datum.literal(), to) {
        (PrimitiveLiteral::Int(v), PrimitiveType::Long) if datum.data_type() == &PrimitiveType::Int => {
            Some(Datum::long(*v))
        }
        (PrimitiveLiteral::Float(v), PrimitiveType::Double) => Some(Datum::double(v.0 as f64)),
        _ if datum.data_type() == to => Some(datum.clone()),
        _ => None,
    }
}

/// The file's partition tuple: from its path (Hive; checked against the column's bounds when
/// the file has that column) or from its column bounds (spec).
fn partition_of(
    partitioning: &Partitioning,
    spec: &PartitionSpec,
    schema: &Schema,
    candidate: &Candidate,
) -> std::result::Result<Struct, String> {
    let mut values = Vec::with_capacity(spec.fields().len());
    for field in spec.fields() {
        let column = schema.field_by_id(field.source_id).ok_or("a partition source column is gone")?;
        let stats = candidate.footer.columns.get(&column.name);
        let Type::Primitive(primitive) = column.field_type.as_ref() else {
            return Err(format!("partition source {} is not a primitive column", column.name));
        };
        let bounds = stats.and_then(|s| {
            let lower = s.lower.as_ref().and_then(|d| widened(d, primitive))?;
            let upper = s.upper.as_ref().and_then(|d| widened(d, primitive))?;
            Some((lower, upper, s.nulls, s.values))
        });
        let value = match partitioning {
            Partitioning::Hive => {
                let from_path = candidate
                    .path_values
                    .iter()
                    .find(|(k, _)| *k == field.name)
                    .map(|(_, v)| v.as_deref())
                    .unwrap_or(None);
                let datum = path_datum(&column.field_type, from_path)
                    .map_err(|why| format!("partition {}: {why}", field.name))?;
                // A file that holds the column must agree with its path.
                if candidate.footer.fields.iter().any(|f| f.name() == &column.name) {
                    match (&datum, &bounds, stats) {
                        (Some(expected), Some((lower, upper, _, _)), _) if lower != expected || upper != expected => {
                            return Err(format!(
                                "its path says {}={} but its column {} holds {lower}..{upper}",
                                field.name,
                                from_path.unwrap_or_default(),
                                column.name
                            ));
                        }
                        (None, _, Some(s)) if s.nulls.is_some_and(|n| n != s.values) => {
                            return Err(format!(
                                "its path says {} is null but its column {} holds values",
                                field.name, column.name
                            ));
                        }
                        _ => {}
                    }
                }
                datum.map(|d| Literal::Primitive(d.literal().clone()))
            }
            Partitioning::Spec { .. } => {
                let Some((lower, upper, nulls, count)) = bounds else {
                    return Err(format!("no exact bounds for column {}: its partition is unknown", column.name));
                };
                if nulls.is_some_and(|n| n > 0) && nulls != Some(count) {
                    return Err(format!("column {} mixes nulls and values: more than one partition", column.name));
                }
                let transform = iceberg::transform::create_transform_function(&field.transform)
                    .map_err(|e| format!("transform {}: {e}", field.transform))?;
                let low = transform.transform_literal(&lower).map_err(|e| e.to_string())?;
                let high = transform.transform_literal(&upper).map_err(|e| e.to_string())?;
                if low != high {
                    return Err(format!(
                        "its column {} spans several {} partitions ({lower}..{upper})",
                        column.name, field.transform
                    ));
                }
                low.map(|d| Literal::Primitive(d.literal().clone()))
            }
            Partitioning::None => None,
        };
        values.push(value);
    }
    Ok(Struct::from_iter(values))
}

fn partition_json(spec: &PartitionSpec, partition: &Struct) -> Value {
    let mut out = serde_json::Map::new();
    for (field, value) in spec.fields().iter().zip(partition.iter()) {
        let shown = match value {
            None => Value::Null,
            Some(Literal::Primitive(PrimitiveLiteral::String(s))) => json!(s),
            Some(Literal::Primitive(PrimitiveLiteral::Long(v))) => json!(v),
            Some(Literal::Primitive(PrimitiveLiteral::Int(v))) => match field.transform {
                Transform::Identity | Transform::Day => {
                    // Dates (identity on a date, or day) as text.
                    let date = Datum::date(*v).to_string();
                    json!(date)
                }
                _ => json!(v),
            },
            Some(other) => json!(format!("{other:?}")),
        };
        out.insert(field.name.clone(), shown);
    }
    Value::Object(out)
}

/// The manifest entry of one file: its size and records, and per top-level column (by the
/// table's field id) its size, value and null counts and bounds, in the table's types.
fn data_file(
    schema: &Schema,
    spec: &PartitionSpec,
    candidate: &Candidate,
    partition: Struct,
) -> Result<iceberg::spec::DataFile> {
    let mut sizes = HashMap::new();
    let mut values = HashMap::new();
    let mut nulls = HashMap::new();
    let mut lower = HashMap::new();
    let mut upper = HashMap::new();
    for (name, stats) in &candidate.footer.columns {
        let Some(field) = schema.field_by_name(name) else { continue };
        let Type::Primitive(primitive) = field.field_type.as_ref() else { continue };
        sizes.insert(field.id, stats.size);
        values.insert(field.id, stats.values);
        if let Some(n) = stats.nulls {
            nulls.insert(field.id, n);
        }
        if let Some(d) = stats.lower.as_ref().and_then(|d| widened(d, primitive)) {
            lower.insert(field.id, d);
        }
        if let Some(d) = stats.upper.as_ref().and_then(|d| widened(d, primitive)) {
            upper.insert(field.id, d);
        }
    }
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(candidate.listed.location.clone())
        .file_format(DataFileFormat::Parquet)
        .partition(partition)
        .partition_spec_id(spec.spec_id())
        .record_count(candidate.footer.record_count)
        .file_size_in_bytes(candidate.listed.size)
        .column_sizes(sizes)
        .value_counts(values)
        .null_value_counts(nulls)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .split_offsets(Some(candidate.footer.split_offsets.clone()))
        .build()
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("a data file entry: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_files_follow_the_hadoop_convention() {
        for hidden_path in ["_SUCCESS", "_temporary/0/part.parquet", "dt=1/.part-0.parquet.crc", "dt=1/_committed_1"] {
            assert!(hidden(hidden_path), "{hidden_path}");
        }
        for data in ["part-0.parquet", "dt=2026-11-01/region=eu/part-0", "a_b/c.parquet"] {
            assert!(!hidden(data), "{data}");
        }
    }

    #[test]
    fn within_is_by_whole_segments() {
        assert!(within("s3://b/raw", "s3://b/raw"));
        assert!(within("s3://b/raw", "s3://b/raw/events"));
        assert!(!within("s3://b/raw", "s3://b/raw-2/events"));
        assert!(!within("s3://b/raw/events", "s3://b/raw"));
        assert_eq!(normal_location("s3://lake/raw/").unwrap(), "s3://lake/raw");
        for bad in ["s3://lake/raw/../x", "file://relative", "file:///a//b", "gs://lake/x", "s3://lake/raw/./x"] {
            assert!(normal_location(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_file_changed_in_place_is_told_by_size_etag_or_mtime() {
        let held = manifests::LiveFile { size: 10, records: 1, manifest: "m".into() };
        let listed = |size, etag: &str, modified_ms| ListedFile {
            location: "s3://b/raw/f".into(),
            size,
            modified_ms,
            etag: etag.into(),
        };
        let was = |etag: &str, modified_ms| AdoptedFile {
            location: "s3://b/raw/f".into(),
            size: 10,
            etag: etag.into(),
            modified_ms,
            snapshot_id: 1,
        };
        assert!(!changed_since(&held, Some(&was("e1", 5)), &listed(10, "e1", 9)), "S3: the ETag decides");
        assert!(changed_since(&held, Some(&was("e1", 5)), &listed(10, "e2", 5)));
        assert!(changed_since(&held, None, &listed(11, "", 5)), "the manifest's size, without a record");
        assert!(!changed_since(&held, Some(&was("", 5)), &listed(10, "", 5)));
        assert!(changed_since(&held, Some(&was("", 5)), &listed(10, "", 6)), "local: the mtime decides");
    }

    #[test]
    fn a_snapshot_summarises_what_it_added_and_removed() {
        let before = Summary {
            operation: Operation::Append,
            additional_properties: HashMap::from([
                ("total-data-files".to_owned(), "10".to_owned()),
                ("total-records".to_owned(), "100".to_owned()),
                ("total-files-size".to_owned(), "1000".to_owned()),
            ]),
        };
        let parts = |added, removed| SnapshotParts {
            id: 2,
            parent: Some(1),
            sequence_number: 2,
            at_ms: 0,
            manifest_list: "s3://b/wh/t/metadata/snap.avro",
            schema_id: 0,
            added,
            removed,
            before: Some(before.clone()),
            adoption: "a",
        };
        let append = snapshot(parts((2, 20, 200), (0, 0, 0)));
        assert_eq!(append.summary().operation, Operation::Append);
        assert_eq!(append.summary().additional_properties["total-records"], "120");
        let delete = snapshot(parts((0, 0, 0), (1, 10, 100)));
        assert_eq!(delete.summary().operation, Operation::Delete);
        assert_eq!(delete.summary().additional_properties["total-data-files"], "9");
        assert_eq!(delete.summary().additional_properties["deleted-records"], "10");
        assert_eq!(snapshot(parts((1, 1, 1), (1, 1, 1))).summary().operation, Operation::Overwrite);
    }
}
