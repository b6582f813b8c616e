//! Background work: a task queue in the metadata store, and the runner that works it off.
//!
//! A job is one module implementing [`Job`] (its `kind`, and `run` for one task), registered with
//! the [`Runner`] that `icegate serve` starts beside the server (with [`Runner::every`] when it
//! recurs). The runner claims due tasks under a lease it renews while the job runs; a replica
//! that dies leaves its lease to expire, and the task is claimed again (an attempt) by whichever
//! worker is next, resuming from the job's last [`TaskRun::save`]. Every change a worker makes is
//! fenced by its lease, so a worker that lost it changes nothing. Jobs read time from the injected
//! [`Clock`](crate::clock::Clock), so their tests move a clock instead of waiting.

pub mod adopt;
pub mod expire_snapshots;
pub mod idempotency_expiry;
pub mod lifecycle_sweep;
pub mod location_expiry;
pub mod maintenance_sweep;
pub mod migrate;
pub mod operators;
pub mod orphans;
pub mod purge;
mod store;
pub mod task_expiry;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::clock::SharedClock;
use crate::{CatalogError, RequestContext, Result};

pub use store::{
    Finish, MaintainedTable, NewTask, Progress, QuarantineFilter, QuarantineState, QuarantinedFile, TaskFilter,
    TaskRecord, TaskState, TaskStore,
};

/// What the background work did, for the metrics endpoint: task failures by kind, and the files
/// and bytes purges reclaimed. Clones share the counters.
#[derive(Clone, Default)]
pub struct JobMetrics {
    failures: prometheus_client::metrics::family::Family<FailureLabels, prometheus_client::metrics::counter::Counter>,
    reclaimed_files: prometheus_client::metrics::counter::Counter,
    reclaimed_bytes: prometheus_client::metrics::counter::Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct FailureLabels {
    kind: String,
}

impl JobMetrics {
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "task_failures",
            "Task runs that failed (retried later or failed for good), by kind",
            self.failures.clone(),
        );
        registry.register("reclaimed_files", "Files deleted by purges and clean-ups", self.reclaimed_files.clone());
        registry.register("reclaimed_bytes", "Bytes deleted by purges and clean-ups", self.reclaimed_bytes.clone());
    }

    pub fn failed(&self, kind: &str) {
        self.failures.get_or_create(&FailureLabels { kind: kind.to_owned() }).inc();
    }

    pub fn reclaimed(&self, files: u64, bytes: u64) {
        self.reclaimed_files.inc_by(files);
        self.reclaimed_bytes.inc_by(bytes);
    }

    /// The failures counted for `kind` so far.
    pub fn failures(&self, kind: &str) -> u64 {
        self.failures.get_or_create(&FailureLabels { kind: kind.to_owned() }).get()
    }

    /// Files and bytes reclaimed so far.
    pub fn reclaimed_so_far(&self) -> (u64, u64) {
        (self.reclaimed_files.get(), self.reclaimed_bytes.get())
    }
}

/// One kind of background work.
#[async_trait::async_trait]
pub trait Job: Send + Sync + 'static {
    /// The name tasks of this job are queued under.
    fn kind(&self) -> &'static str;
    /// Does (or resumes, from [`TaskRun::checkpoint`]) one task. Its steps must be idempotent:
    /// a task re-run after a crash repeats the steps after its last checkpoint. `Ok` ends the
    /// task as done with that result; an [`Unavailable`](CatalogError::Unavailable) error is
    /// retried later (backing off), any other fails it.
    async fn run(&self, run: &TaskRun) -> Result<Value>;
}

/// One claimed task, as its job sees it.
pub struct TaskRun {
    record: TaskRecord,
    store: Arc<dyn TaskStore>,
    clock: SharedClock,
    owner: String,
    lease_ms: i64,
    progress: Mutex<Progress>,
    stop: watch::Receiver<bool>,
}

impl TaskRun {
    pub fn task(&self) -> &TaskRecord {
        &self.record
    }

    /// What the last run of this task saved, to resume from.
    pub fn checkpoint(&self) -> Option<&Value> {
        self.record.checkpoint.as_ref()
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The context the job acts in: the system's, doing this job.
    pub fn context(&self) -> RequestContext {
        RequestContext::system(&self.record.kind, Some(&self.record.id))
    }

    /// Whether the job should stop: the server is shutting down, the task was cancelled, or its
    /// lease went to another worker.
    pub fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Records progress and, when given, where a resumed run would start; renews the lease.
    /// An error when the job must stop (see [`stopping`](Self::stopping)): return it.
    pub async fn save(&self, progress: Progress, checkpoint: Option<&Value>) -> Result<()> {
        if let Ok(mut current) = self.progress.lock() {
            *current = progress;
        }
        let kept = self
            .store
            .heartbeat(&self.record.id, &self.owner, (self.clock.now_ms(), self.lease_ms), progress, checkpoint)
            .await?;
        if !kept || self.stopping() {
            return Err(stopped(&self.record));
        }
        Ok(())
    }
}

fn stopped(task: &TaskRecord) -> CatalogError {
    CatalogError::Conflict(format!("task {} ({}) was stopped: cancelled, shut down or taken over", task.id, task.kind))
}

/// A job that recurs: after each run (and at start-up, if none is queued) the next is queued
/// `every` later; replicas share it (one queued at a time).
#[derive(Debug, Clone)]
struct Schedule {
    every: Duration,
    reason: &'static str,
}

/// Claims due tasks of its jobs and runs them, a few at a time.
pub struct Runner {
    store: Arc<dyn TaskStore>,
    clock: SharedClock,
    jobs: HashMap<&'static str, Arc<dyn Job>>,
    schedules: HashMap<&'static str, Schedule>,
    owner: String,
    lease: Duration,
    poll: Duration,
    concurrency: usize,
    metrics: JobMetrics,
}

impl Runner {
    pub fn new(store: Arc<dyn TaskStore>, clock: SharedClock) -> Self {
        Self {
            store,
            clock,
            jobs: HashMap::new(),
            schedules: HashMap::new(),
            owner: format!("worker-{}", uuid::Uuid::now_v7().simple()),
            lease: Duration::from_secs(60),
            poll: Duration::from_secs(1),
            concurrency: 2,
            metrics: JobMetrics::default(),
        }
    }

    /// Counts failed runs into `metrics`.
    pub fn with_metrics(mut self, metrics: JobMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn with_job(mut self, job: Arc<dyn Job>) -> Self {
        self.jobs.insert(job.kind(), job);
        self
    }

    /// Runs `kind` (a registered job) every `every`, for `reason`.
    pub fn every(mut self, kind: &'static str, every: Duration, reason: &'static str) -> Self {
        self.schedules.insert(kind, Schedule { every, reason });
        self
    }

    /// How long a claim lasts without a heartbeat (renewed at a third of it while a job runs).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    pub fn with_poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// Queues each recurring job that has no task queued or running.
    pub async fn schedule(&self) -> Result<()> {
        let now = self.clock.now_ms();
        for (kind, schedule) in &self.schedules {
            self.store.enqueue(&scheduled(kind, schedule, now), now).await?;
        }
        Ok(())
    }

    /// Claims one due task and runs it to its end; whether there was one. (Tests drive the
    /// runner with this; `spawn` runs the same steps in a loop.)
    pub async fn run_next(&self) -> Result<bool> {
        let (_stop, watch) = watch::channel(false);
        match self.claim().await? {
            Some(task) => {
                self.run(task, watch).await;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn claim(&self) -> Result<Option<TaskRecord>> {
        let kinds: Vec<&str> = self.jobs.keys().copied().collect();
        self.store.claim(&kinds, &self.owner, self.clock.now_ms(), self.lease_ms()).await
    }

    /// Runs one claimed task: heartbeats while its job runs, then records how it ended.
    async fn run(&self, task: TaskRecord, shutdown: watch::Receiver<bool>) {
        let Some(job) = self.jobs.get(task.kind.as_str()).cloned() else { return };
        let (stop_tx, stop) = watch::channel(false);
        let run = Arc::new(TaskRun {
            progress: Mutex::new(task.progress),
            record: task,
            store: self.store.clone(),
            clock: self.clock.clone(),
            owner: self.owner.clone(),
            lease_ms: self.lease_ms(),
            stop,
        });
        // Aborted with this future, too: a run that is dropped (its runtime shutting down) renews
        // nothing, and its lease expires.
        let heartbeat = AbortOnDrop(tokio::spawn(heartbeats(run.clone(), self.lease / 3, shutdown, stop_tx)));
        tracing::info!(task = %run.record.id, kind = %run.record.kind, attempt = run.record.attempts,
            reason = %run.record.reason, "task started");
        let outcome = job.run(&run).await;
        drop(heartbeat);
        let now = self.clock.now_ms();
        let finish = match outcome {
            Ok(result) => Finish::Done(result),
            // Stopped (shutdown, cancel, lease lost): a shutdown leaves the lease to expire, so
            // another worker resumes the task from its checkpoint; the rest changed nothing.
            Err(_) if run.stopping() => {
                tracing::info!(task = %run.record.id, kind = %run.record.kind, "task stopped before its end");
                return;
            }
            Err(CatalogError::Unavailable(why)) => {
                let backoff = 30_000_i64.saturating_mul(1 << run.record.attempts.clamp(0, 5));
                Finish::Retry { error: why, not_before_ms: now.saturating_add(backoff.min(600_000)) }
            }
            Err(err) => Finish::Failed(err.to_string()),
        };
        match self.store.finish(&run.record.id, &self.owner, &finish, now).await {
            Ok(true) => {
                match &finish {
                    Finish::Done(_) => tracing::info!(task = %run.record.id, kind = %run.record.kind, "task done"),
                    Finish::Failed(error) | Finish::Retry { error, .. } => {
                        self.metrics.failed(&run.record.kind);
                        tracing::warn!(task = %run.record.id, kind = %run.record.kind, %error, "task failed")
                    }
                }
                if let Some(schedule) = self.schedules.get(run.record.kind.as_str()) {
                    let next = scheduled(&run.record.kind, schedule, now.saturating_add(ms(schedule.every)));
                    if let Err(err) = self.store.enqueue(&next, now).await {
                        tracing::warn!(kind = %run.record.kind, error = %err, "could not queue the next run");
                    }
                }
            }
            Ok(false) => tracing::info!(task = %run.record.id, "task was taken over; its end is not recorded"),
            Err(err) => tracing::warn!(task = %run.record.id, error = %err, "could not record the task's end"),
        }
    }

    /// Works the queue until `shutdown` turns true: claims due tasks (up to the concurrency),
    /// polls when there are none, and on shutdown tells running jobs to stop and waits for them.
    pub fn spawn(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            if let Err(err) = self.schedule().await {
                tracing::warn!(error = %err, "could not queue recurring jobs");
            }
            let mut running = tokio::task::JoinSet::new();
            let mut scheduled_at = std::time::Instant::now();
            loop {
                if *shutdown.borrow() {
                    break;
                }
                // A recurring task whose last run failed for good queues no successor: look
                // again now and then.
                if scheduled_at.elapsed() > Duration::from_secs(60) {
                    scheduled_at = std::time::Instant::now();
                    if let Err(err) = self.schedule().await {
                        tracing::warn!(error = %err, "could not queue recurring jobs");
                    }
                }
                while running.len() < self.concurrency {
                    match self.claim().await {
                        Ok(Some(task)) => {
                            let (runner, watch) = (self.clone(), shutdown.clone());
                            running.spawn(async move { runner.run(task, watch).await });
                        }
                        Ok(None) => break,
                        Err(err) => {
                            tracing::warn!(error = %err, "could not claim a task");
                            break;
                        }
                    }
                }
                tokio::select! {
                    _ = shutdown.changed() => {}
                    Some(_) = running.join_next(), if !running.is_empty() => {}
                    () = tokio::time::sleep(self.poll) => {}
                }
            }
            while running.join_next().await.is_some() {}
        })
    }
}

/// Renews the lease every `every` while the job runs; stops the job when the lease is lost, the
/// task cancelled or the server shutting down.
async fn heartbeats(
    run: Arc<TaskRun>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
) {
    loop {
        if *shutdown.borrow() {
            let _ = stop.send(true);
            return;
        }
        tokio::select! {
            _ = shutdown.changed() => continue,
            () = tokio::time::sleep(every) => {}
        }
        let progress = run.progress.lock().map(|p| *p).unwrap_or_default();
        match run.store.heartbeat(&run.record.id, &run.owner, (run.clock.now_ms(), run.lease_ms), progress, None).await
        {
            Ok(true) => {}
            Ok(false) => {
                let _ = stop.send(true);
                return;
            }
            Err(err) => tracing::warn!(task = %run.record.id, error = %err, "heartbeat failed"),
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn scheduled(kind: &str, schedule: &Schedule, not_before_ms: i64) -> NewTask {
    NewTask {
        dedupe_key: Some(format!("schedule:{kind}")),
        not_before_ms,
        ..NewTask::new(kind, schedule.reason, not_before_ms)
    }
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
