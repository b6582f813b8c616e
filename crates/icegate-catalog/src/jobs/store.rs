//! What the task queue keeps: one row per task, claimed under a lease.

use serde_json::Value;

use crate::Result;
use crate::adoption::store::{AdoptedFile, Adoption, AdoptionRun, SourceLocation};
use crate::idempotency::WriteContext;
use crate::ident::NamespaceIdent;
use crate::migration::store::{Migration, MigrationTable, RunState, Step, TableState};

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for `not_before` and a worker.
    Queued,
    /// A worker holds its lease (or held it: a lease that expired is claimed again).
    Running,
    Done,
    /// Ran out of attempts, or failed in a way no retry fixes.
    Failed,
    Cancelled,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(value: &str) -> Result<Self> {
        Ok(match value {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "done" => Self::Done,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            other => {
                return Err(crate::CatalogError::bad_request(format!(
                    "unknown task state {other:?} (queued, running, done, failed, cancelled)"
                )));
            }
        })
    }
}

/// A task to queue.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// The job that runs it (`Job::kind`).
    pub kind: String,
    pub warehouse_id: Option<String>,
    pub tabular_id: Option<String>,
    /// At most one queued or running task has a given key: queueing another answers `None`.
    pub dedupe_key: Option<String>,
    /// What the job needs, as it defines it.
    pub params: Value,
    /// Not claimed before this time (ms since the epoch).
    pub not_before_ms: i64,
    /// Claims before the task fails (a lease that expires counts as an attempt).
    pub max_attempts: i32,
    /// Why the system does this work: recorded with it (and, once it exists, in the audit trail).
    pub reason: String,
    /// When the key is held by a running task: that task runs once more when it ends (due at
    /// `not_before_ms`), so what made this one necessary is not missed; by a queued one: it is
    /// due no later than `not_before_ms`.
    pub rerun_if_running: bool,
}

impl NewTask {
    /// A task of `kind` due now, tried up to three times.
    pub fn new(kind: &str, reason: &str, now_ms: i64) -> Self {
        Self {
            kind: kind.to_owned(),
            warehouse_id: None,
            tabular_id: None,
            dedupe_key: None,
            params: Value::Object(Default::default()),
            not_before_ms: now_ms,
            max_attempts: 3,
            reason: reason.to_owned(),
            rerun_if_running: false,
        }
    }
}

impl NewTask {
    /// A task of `kind` about one table or view, due at `due_ms`: one at a time per table
    /// (its key is the kind and the table's id).
    pub fn for_tabular(kind: &str, reason: &str, (warehouse_id, tabular_id): (&str, &str), due_ms: i64) -> Self {
        Self {
            warehouse_id: Some(warehouse_id.to_owned()),
            tabular_id: Some(tabular_id.to_owned()),
            dedupe_key: Some(format!("{kind}:{tabular_id}")),
            ..Self::new(kind, reason, due_ms)
        }
    }
}

impl NewTask {
    /// A task of `kind` about table `tabular_id`, named `namespace.name` when it is queued (the
    /// job checks that the name still means that table): tried up to five times.
    pub fn for_table(
        kind: &str,
        reason: &str,
        (warehouse_id, tabular_id): (&str, &str),
        (namespace, name): (&NamespaceIdent, &str),
        due_ms: i64,
    ) -> Self {
        Self {
            params: serde_json::json!({ "namespace": namespace.levels(), "name": name }),
            max_attempts: 5,
            ..Self::for_tabular(kind, reason, (warehouse_id, tabular_id), due_ms)
        }
    }
}

/// How far a task got, in units the job chooses (files, tables, keys) and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub done: i64,
    pub total: Option<i64>,
    pub bytes: i64,
}

/// A stored task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    pub id: String,
    pub kind: String,
    pub warehouse_id: Option<String>,
    pub tabular_id: Option<String>,
    pub dedupe_key: Option<String>,
    pub state: TaskState,
    pub attempts: i32,
    pub max_attempts: i32,
    pub not_before_ms: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    pub heartbeat_at_ms: Option<i64>,
    pub progress: Progress,
    /// Where a resumed run starts: what the job last checkpointed.
    pub checkpoint: Option<Value>,
    pub params: Value,
    pub result: Option<Value>,
    pub last_error: Option<String>,
    pub reason: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub enum Finish {
    Done(Value),
    /// Failed for good (or out of attempts).
    Failed(String),
    /// Failed this time; queued again for `not_before_ms` if attempts remain, else failed.
    Retry {
        error: String,
        not_before_ms: i64,
    },
}

/// Which tasks a listing shows (every field narrows it).
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub kind: Option<String>,
    pub state: Option<TaskState>,
    pub warehouse_id: Option<String>,
    /// Tasks older than this one (by id: ids grow with time), for the next page.
    pub before_id: Option<String>,
    pub limit: Option<i64>,
}

/// A table maintenance works on: its id, where it is, and when the catalog made it (files older
/// than that were not written for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintainedTable {
    pub warehouse_id: String,
    pub id: String,
    pub namespace: NamespaceIdent,
    pub name: String,
    pub created_at_ms: i64,
}

/// Whether a quarantined file waits for its deletion or was restored (kept for good).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuarantineState {
    Quarantined,
    Restored,
}

impl QuarantineState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Quarantined => "quarantined",
            Self::Restored => "restored",
        }
    }

    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "quarantined" => Ok(Self::Quarantined),
            "restored" => Ok(Self::Restored),
            other => Err(crate::CatalogError::bad_request(format!(
                "unknown quarantine state {other:?} (quarantined, restored)"
            ))),
        }
    }
}

/// A file an orphan scan found unreferenced, as the quarantine keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedFile {
    pub tabular_id: String,
    pub location: String,
    pub size: u64,
    /// Its last-modified time when it was quarantined.
    pub modified_ms: i64,
    pub quarantined_at_ms: i64,
    /// Not deleted before then.
    pub delete_after_ms: i64,
    pub task_id: String,
    pub state: QuarantineState,
    pub restored_by: Option<String>,
}

/// Which quarantined files a listing shows.
#[derive(Debug, Clone, Default)]
pub struct QuarantineFilter {
    pub warehouse_id: String,
    pub tabular_id: Option<String>,
    pub state: Option<QuarantineState>,
    /// Only those whose quarantine ends at or before this time.
    pub due_by_ms: Option<i64>,
    /// After this (tabular id, location), for the next page.
    pub after: Option<(String, String)>,
    pub limit: i64,
}

/// Persistence of the task queue. Every change that a worker makes is fenced by its lease: once
/// another worker claimed the task (the lease had expired), the first one's heartbeats and
/// finish change nothing and answer `false`.
#[async_trait::async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Queues a task; `None` when its `dedupe_key` is held by a queued or running task (a running
    /// one then runs once more when it ends, if the task says `rerun_if_running`).
    async fn enqueue(&self, task: &NewTask, now_ms: i64) -> Result<Option<TaskRecord>>;
    /// Claims the next due task of one of `kinds` for `owner` until `now_ms + lease_ms`: a queued
    /// one whose time has come, or a running one whose lease expired (its worker is gone). Each
    /// claim is an attempt; a task whose lease expired on its last attempt fails instead.
    /// Two workers never hold one task at once (PostgreSQL: `FOR UPDATE SKIP LOCKED`).
    async fn claim(&self, kinds: &[&str], owner: &str, now_ms: i64, lease_ms: i64) -> Result<Option<TaskRecord>>;
    /// Extends the lease and records progress (and the checkpoint, when given). `false` when the
    /// lease is no longer `owner`'s or the task was cancelled: the worker must stop.
    async fn heartbeat(
        &self,
        id: &str,
        owner: &str,
        (now_ms, lease_ms): (i64, i64),
        progress: Progress,
        checkpoint: Option<&Value>,
    ) -> Result<bool>;
    /// Ends the run; `false` when the lease was no longer `owner`'s (nothing changed). A run that
    /// ends done or failed and was asked for a rerun queues it.
    async fn finish(&self, id: &str, owner: &str, outcome: &Finish, now_ms: i64) -> Result<bool>;
    /// Cancels a queued or running task (a running one stops at its next heartbeat); `false`
    /// when it had ended already.
    async fn cancel(&self, id: &str, now_ms: i64) -> Result<bool>;
    async fn task(&self, id: &str) -> Result<Option<TaskRecord>>;
    /// Tasks, newest first.
    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>>;
    /// Removes up to `limit` tasks that ended (done, failed, cancelled) before `before_ms`;
    /// how many. Queued and running tasks are never touched.
    async fn remove_ended_tasks(&self, before_ms: i64, limit: i64) -> Result<u64>;
    /// How many tasks there are of each kind in each state.
    async fn task_counts(&self) -> Result<Vec<(String, TaskState, i64)>>;

    // Maintenance: the tables it runs on, and the orphan quarantine.

    /// Tables (not views) of a warehouse, in `namespace` and the namespaces below it when given,
    /// by id after `after_id`, at most `limit`.
    async fn maintained_tables(
        &self,
        warehouse_id: &str,
        namespace: Option<&NamespaceIdent>,
        after_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<MaintainedTable>>;
    /// One table by id, `None` when it is no longer a table of the catalog.
    async fn maintained_table(&self, id: &str) -> Result<Option<MaintainedTable>>;
    /// Every location recorded for a table, with since when the table owns it: its base
    /// location from its creation (or from when it moved there), every other location from
    /// when it was first recorded.
    async fn owned_since(&self, id: &str) -> Result<Vec<(String, i64)>>;
    /// Quarantines files of `table` (those quarantined or restored already stay as they are),
    /// recorded as `write`'s change; how many were added.
    async fn quarantine(&self, write: &WriteContext, table: &MaintainedTable, files: &[QuarantinedFile])
    -> Result<u64>;
    async fn quarantined(&self, filter: &QuarantineFilter) -> Result<Vec<QuarantinedFile>>;
    /// Restores quarantined files of `table` (all of them, or those at `locations`): they are
    /// never deleted, nor quarantined again; how many, recorded as `write`'s change.
    async fn restore_quarantined(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        locations: Option<&[String]>,
    ) -> Result<u64>;
    /// Forgets quarantined files of `table` at `locations` (not restored ones): deleted by the
    /// task (`deleted`: recorded as `write`'s change, with the locations), or found referenced,
    /// changed or gone; how many.
    async fn forget_quarantined(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        locations: &[String],
        deleted: Option<u64>,
    ) -> Result<u64>;
    /// Records in the audit trail, as `write`'s change to `table`, files a task deleted that no
    /// quarantine row stood for (an expiry's batch): `detail` says which and why.
    async fn record_deleted(
        &self,
        write: &WriteContext,
        table: &MaintainedTable,
        detail: serde_json::Value,
    ) -> Result<()>;
    /// Forgets the quarantine of tables the catalog no longer has (dropped and not restorable);
    /// how many files.
    async fn forget_quarantine_of_gone(&self, limit: i64) -> Result<u64>;

    /// Registers a read-only source location of a warehouse; fails (400) when it equals, lies
    /// inside or contains a table's or view's location (or a reservation or lease of one), and
    /// (409) when it is registered already.
    async fn add_source_location(
        &self,
        write: &WriteContext,
        warehouse_id: &str,
        location: &str,
        now_ms: i64,
    ) -> Result<SourceLocation>;
    async fn source_locations(&self, warehouse_id: &str) -> Result<Vec<SourceLocation>>;
    /// Removes a source location; fails (409) while an adoption reads from inside it.
    async fn remove_source_location(&self, write: &WriteContext, warehouse_id: &str, location: &str) -> Result<bool>;
    /// Records an adoption; before its first run commits its `tabular_id` is empty (pending).
    async fn create_adoption(&self, write: &WriteContext, adoption: &Adoption) -> Result<()>;
    /// Forgets a pending adoption (its first run failed before it made a table).
    async fn forget_pending_adoption(&self, write: &WriteContext, id: &str) -> Result<()>;
    async fn adoption(&self, id: &str) -> Result<Option<Adoption>>;
    /// A warehouse's adoptions, by id, after `after_id`.
    async fn adoptions(&self, warehouse_id: &str, after_id: Option<&str>, limit: i64) -> Result<Vec<Adoption>>;
    /// The files adoption added (as they were then).
    async fn adopted_files(&self, adoption_id: &str) -> Result<Vec<AdoptedFile>>;
    /// Records a run: its report, the files it added (and forgets those it removed from the
    /// table), and a pending adoption's table (`adoption.tabular_id`), in one transaction
    /// recorded in the audit trail.
    async fn record_adoption_run(
        &self,
        write: &WriteContext,
        adoption: &Adoption,
        run: &AdoptionRun,
        added: &[AdoptedFile],
        removed: &[String],
    ) -> Result<()>;
    /// The sources of the adoptions whose table is `tabular_id` (read-only locations of its files).
    async fn adoption_sources(&self, tabular_id: &str) -> Result<Vec<String>>;
    /// Records a migration run and its tables in one transaction; fails (409) when one of its
    /// tables' source objects is in a live migration already.
    async fn create_migration(
        &self,
        write: &WriteContext,
        migration: &Migration,
        tables: &[MigrationTable],
    ) -> Result<()>;
    async fn migration(&self, id: &str) -> Result<Option<Migration>>;
    /// Runs by id (newest last), after `after_id`; only `warehouse_id`'s when given.
    async fn migrations(
        &self,
        warehouse_id: Option<&str>,
        after_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Migration>>;
    async fn migration_tables(&self, migration_id: &str) -> Result<Vec<MigrationTable>>;
    /// Moves a table from `from` to `to` with what the step learned; `false` when it was no
    /// longer in `from` (another worker, or a rollback, moved it).
    async fn step_migration_table(
        &self,
        write: &WriteContext,
        id: &str,
        (from, to): (TableState, TableState),
        step: &Step,
        now_ms: i64,
    ) -> Result<bool>;
    /// Moves a run from `from` to `to` (with its report, when given); `false` when it was not in
    /// `from`.
    async fn set_migration_state(
        &self,
        write: &WriteContext,
        id: &str,
        (from, to): (RunState, RunState),
        report: Option<&Value>,
        now_ms: i64,
    ) -> Result<bool>;
    /// The latest runs of an adoption, newest first.
    async fn adoption_runs(&self, adoption_id: &str, limit: i64) -> Result<Vec<AdoptionRun>>;
}
