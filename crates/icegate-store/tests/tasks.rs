//! The task queue and its runner, on SQLite and PostgreSQL: claims under leases, fencing of a
//! worker that lost its lease, retries and attempts, cancellation, many workers never running
//! one task twice, a killed worker's task resumed from its checkpoint, and a recurring job —
//! all on an injected clock, so nothing waits for time to pass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use icegate_catalog::clock::{Clock, ManualClock};
use icegate_catalog::jobs::{Finish, Job, NewTask, Progress, Runner, TaskFilter, TaskRun, TaskState, TaskStore};
use icegate_catalog::store::prelude::*;
use icegate_catalog::{CatalogError, CatalogStore, NamespaceIdent, Properties, StorageRoot, WarehouseName};
use icegate_store::testing::TestDatabase;
use serde_json::{Value, json};

const LEASE: i64 = 60_000;

fn task(kind: &str, now: i64) -> NewTask {
    NewTask::new(kind, "a test", now)
}

async fn a_task_is_claimed_once_when_due_and_finished_by_its_owner(db: TestDatabase) {
    let store = &db.store;
    let now = 1_000_000;
    let later = NewTask { not_before_ms: now + 5_000, ..task("sweep", now) };
    let queued = store.enqueue(&later, now).await.unwrap().expect("queued");
    assert_eq!((queued.state, queued.attempts), (TaskState::Queued, 0));
    assert!(store.claim(&["sweep"], "w1", now, LEASE).await.unwrap().is_none(), "not due yet");
    assert!(store.claim(&["other"], "w1", now + 5_000, LEASE).await.unwrap().is_none(), "another kind");
    let claimed = store.claim(&["sweep"], "w1", now + 5_000, LEASE).await.unwrap().expect("due");
    assert_eq!((claimed.state, claimed.attempts, claimed.lease_owner.as_deref()), (TaskState::Running, 1, Some("w1")));
    assert_eq!(claimed.lease_expires_at_ms, Some(now + 5_000 + LEASE));
    assert!(store.claim(&["sweep"], "w2", now + 6_000, LEASE).await.unwrap().is_none(), "held by w1");
    let progress = Progress { done: 3, total: Some(10), bytes: 300 };
    assert!(store.heartbeat(&claimed.id, "w1", (now + 7_000, LEASE), progress, Some(&json!({"at": 3}))).await.unwrap());
    assert!(!store.finish(&claimed.id, "w2", &Finish::Done(json!({})), now + 8_000).await.unwrap(), "not w2's");
    assert!(store.finish(&claimed.id, "w1", &Finish::Done(json!({"ok": true})), now + 8_000).await.unwrap());
    let done = store.task(&claimed.id).await.unwrap().unwrap();
    assert_eq!((done.state, done.progress, done.checkpoint), (TaskState::Done, progress, Some(json!({"at": 3}))));
    assert_eq!(
        (done.result, done.finished_at_ms, done.reason.as_str()),
        (Some(json!({"ok": true})), Some(now + 8_000), "a test")
    );
}

async fn a_dedupe_key_holds_one_active_task(db: TestDatabase) {
    let store = &db.store;
    let now = 1_000_000;
    let keyed = NewTask { dedupe_key: Some("expire:t1".into()), ..task("expire", now) };
    let first = store.enqueue(&keyed, now).await.unwrap().expect("first");
    assert!(store.enqueue(&keyed, now).await.unwrap().is_none(), "queued already");
    store.claim(&["expire"], "w1", now, LEASE).await.unwrap().unwrap();
    assert!(store.enqueue(&keyed, now).await.unwrap().is_none(), "running");
    store.finish(&first.id, "w1", &Finish::Done(Value::Null), now).await.unwrap();
    assert!(store.enqueue(&keyed, now).await.unwrap().is_some(), "free again once done");
}

/// A keyed task queued with `rerun_if_running` while its key's task runs: that task runs once
/// more when it ends, at the earliest time asked for (and a queued one is not doubled).
async fn a_rerun_asked_for_while_running_is_queued_at_the_end(db: TestDatabase) {
    let store = &db.store;
    let now = 1_000_000;
    let keyed = NewTask { dedupe_key: Some("expire:t2".into()), rerun_if_running: true, ..task("expire", now) };
    let later = NewTask { not_before_ms: now + 60_000, ..keyed.clone() };
    let first = store.enqueue(&later, now).await.unwrap().expect("first");
    assert!(store.enqueue(&later, now).await.unwrap().is_none(), "queued already");
    assert!(store.claim(&["expire"], "w1", now, LEASE).await.unwrap().is_none(), "not due yet");
    // Asked for sooner: the queued one is due sooner.
    assert!(store.enqueue(&keyed, now).await.unwrap().is_none());
    assert_eq!(store.task(&first.id).await.unwrap().unwrap().not_before_ms, now);
    store.claim(&["expire"], "w1", now, LEASE).await.unwrap().unwrap();
    for due in [now + 5_000, now + 2_000, now + 9_000] {
        let again = NewTask { not_before_ms: due, ..keyed.clone() };
        assert!(store.enqueue(&again, now).await.unwrap().is_none(), "running");
    }
    assert!(store.finish(&first.id, "w1", &Finish::Done(Value::Null), now + 100).await.unwrap());
    let queued = store
        .list_tasks(&TaskFilter { state: Some(TaskState::Queued), kind: Some("expire".into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!((queued[0].not_before_ms, queued[0].dedupe_key.as_deref()), (now + 2_000, Some("expire:t2")));
    // Without the flag, a running task's key just refuses the new one.
    let plain = NewTask { dedupe_key: Some("plain:t3".into()), ..task("plain", now) };
    let third = store.enqueue(&plain, now).await.unwrap().unwrap();
    store.claim(&["plain"], "w1", now, LEASE).await.unwrap().unwrap();
    assert!(store.enqueue(&plain, now).await.unwrap().is_none());
    store.finish(&third.id, "w1", &Finish::Done(Value::Null), now + 100).await.unwrap();
    let filter = TaskFilter { kind: Some("plain".into()), state: Some(TaskState::Queued), ..Default::default() };
    assert!(store.list_tasks(&filter).await.unwrap().is_empty());
}

/// A worker that stops renewing (killed replica) loses the task to the next worker once its lease
/// has expired; from then on nothing it does counts.
async fn an_expired_lease_passes_the_task_on_and_fences_the_old_worker(db: TestDatabase) {
    let store = &db.store;
    let now = 1_000_000;
    let id = store.enqueue(&task("purge", now), now).await.unwrap().unwrap().id;
    store.claim(&["purge"], "old", now, LEASE).await.unwrap().unwrap();
    assert!(store.claim(&["purge"], "new", now + LEASE - 1, LEASE).await.unwrap().is_none(), "lease still held");
    let taken = store.claim(&["purge"], "new", now + LEASE + 1, LEASE).await.unwrap().expect("taken over");
    assert_eq!((taken.id.as_str(), taken.attempts), (id.as_str(), 2));
    let stale = (now + LEASE + 2, LEASE);
    assert!(!store.heartbeat(&id, "old", stale, Progress::default(), Some(&json!({"x": 1}))).await.unwrap());
    assert!(!store.finish(&id, "old", &Finish::Failed("late".into()), now + LEASE + 3).await.unwrap());
    assert!(store.finish(&id, "new", &Finish::Done(json!({})), now + LEASE + 4).await.unwrap());
    let done = store.task(&id).await.unwrap().unwrap();
    assert_eq!((done.state, done.checkpoint, done.last_error), (TaskState::Done, None, None));
}

async fn attempts_are_bounded_whether_a_run_fails_or_its_worker_dies(db: TestDatabase) {
    let store = &db.store;
    let now = 1_000_000;
    let id = store.enqueue(&NewTask { max_attempts: 2, ..task("sync", now) }, now).await.unwrap().unwrap().id;
    store.claim(&["sync"], "w", now, LEASE).await.unwrap().unwrap();
    let retry = Finish::Retry { error: "storage down".into(), not_before_ms: now + 30_000 };
    assert!(store.finish(&id, "w", &retry, now).await.unwrap());
    let queued = store.task(&id).await.unwrap().unwrap();
    assert_eq!((queued.state, queued.not_before_ms), (TaskState::Queued, now + 30_000));
    assert!(store.claim(&["sync"], "w", now + 29_999, LEASE).await.unwrap().is_none(), "backing off");
    store.claim(&["sync"], "w", now + 30_000, LEASE).await.unwrap().expect("second attempt");
    // Its worker dies on the last attempt: once the lease expires the task fails, saying why.
    assert!(store.claim(&["sync"], "w2", now + 30_000 + LEASE + 1, LEASE).await.unwrap().is_none());
    let failed = store.task(&id).await.unwrap().unwrap();
    assert_eq!(failed.state, TaskState::Failed);
    assert!(failed.last_error.as_deref().unwrap().contains("lease expired"), "{failed:?}");
    // A retry on the last attempt fails too.
    let id = store.enqueue(&NewTask { max_attempts: 1, ..task("sync", now) }, now).await.unwrap().unwrap().id;
    store.claim(&["sync"], "w", now, LEASE).await.unwrap().unwrap();
    store.finish(&id, "w", &retry, now).await.unwrap();
    assert_eq!(store.task(&id).await.unwrap().unwrap().state, TaskState::Failed);
}

async fn a_cancelled_task_stops_its_worker_and_is_not_claimed(db: TestDatabase) {
    let store = &db.store;
    let now = 1_000_000;
    let queued = store.enqueue(&task("orphans", now), now).await.unwrap().unwrap().id;
    let running = store.enqueue(&task("orphans", now), now).await.unwrap().unwrap().id;
    assert!(store.cancel(&queued, now).await.unwrap());
    let claimed = store.claim(&["orphans"], "w", now, LEASE).await.unwrap().unwrap();
    assert_eq!(claimed.id, running, "the cancelled one is skipped");
    assert!(store.cancel(&running, now + 1).await.unwrap());
    assert!(!store.heartbeat(&running, "w", (now + 2, LEASE), Progress::default(), None).await.unwrap());
    assert!(!store.finish(&running, "w", &Finish::Done(json!({})), now + 3).await.unwrap());
    assert!(!store.cancel(&running, now + 4).await.unwrap(), "ended already");
    let listed = store
        .list_tasks(&TaskFilter {
            state: Some(TaskState::Cancelled),
            kind: Some("orphans".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
}

/// Many workers claiming at once (on PostgreSQL each on its own connection, passing over rows
/// another is claiming) run every task exactly once.
async fn many_workers_never_claim_one_task_twice(db: TestDatabase) {
    let store = Arc::new(db.store.clone());
    let now = 1_000_000;
    let mut ids = Vec::new();
    for _ in 0..120 {
        ids.push(store.enqueue(&task("load", now), now).await.unwrap().unwrap().id);
    }
    let claims = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let (store, claims) = (store.clone(), claims.clone());
            tokio::spawn(async move {
                let owner = format!("w{w}");
                while let Some(task) = store.claim(&["load"], &owner, now, LEASE).await.unwrap() {
                    *claims.lock().unwrap().entry(task.id.clone()).or_default() += 1;
                    assert!(store.finish(&task.id, &owner, &Finish::Done(json!({})), now).await.unwrap());
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let claims = claims.lock().unwrap();
    assert_eq!(claims.len(), ids.len(), "every task ran");
    assert!(claims.values().all(|n| *n == 1), "one run each: {claims:?}");
}

/// A job over ten units that saves a checkpoint after each; `stall_at` makes it hang there (a
/// worker that dies without a word).
struct Units {
    seen: Arc<Mutex<Vec<i64>>>,
    stall_at: Option<i64>,
}

#[async_trait::async_trait]
impl Job for Units {
    fn kind(&self) -> &'static str {
        "units"
    }

    async fn run(&self, run: &TaskRun) -> icegate_catalog::Result<Value> {
        let start = run.checkpoint().and_then(|c| c["next"].as_i64()).unwrap_or(0);
        for unit in start..10 {
            if self.stall_at == Some(unit) {
                std::future::pending::<()>().await;
            }
            self.seen.lock().unwrap().push(unit);
            run.save(Progress { done: unit + 1, total: Some(10), bytes: 0 }, Some(&json!({"next": unit + 1}))).await?;
        }
        Ok(json!({"units": 10, "resumed-at": start}))
    }
}

async fn a_killed_worker_s_task_is_resumed_from_its_checkpoint(db: TestDatabase) {
    let store: Arc<dyn TaskStore> = Arc::new(db.store.clone());
    let clock = ManualClock::now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let id = store.enqueue(&task("units", clock.now_ms()), clock.now_ms()).await.unwrap().unwrap().id;
    let doomed = Runner::new(store.clone(), clock.clone())
        .with_job(Arc::new(Units { seen: seen.clone(), stall_at: Some(4) }))
        .with_lease(Duration::from_secs(60));
    // The first worker gets to unit 4 and is killed there (its future dropped, its lease left).
    let killed = tokio::time::timeout(Duration::from_millis(500), doomed.run_next()).await;
    assert!(killed.is_err(), "the first worker hung at unit 4");
    let stuck = store.task(&id).await.unwrap().unwrap();
    assert_eq!((stuck.state, stuck.progress.done), (TaskState::Running, 4));
    let next =
        Runner::new(store.clone(), clock.clone()).with_job(Arc::new(Units { seen: seen.clone(), stall_at: None }));
    assert!(!next.run_next().await.unwrap(), "nothing to claim while the lease holds");
    clock.advance(Duration::from_secs(61));
    assert!(next.run_next().await.unwrap());
    let done = store.task(&id).await.unwrap().unwrap();
    assert_eq!((done.state, done.attempts), (TaskState::Done, 2), "{done:?}");
    assert_eq!(done.result, Some(json!({"units": 10, "resumed-at": 4})));
    assert_eq!(*seen.lock().unwrap(), (0..10).collect::<Vec<_>>(), "each unit once");
}

struct Flaky;

#[async_trait::async_trait]
impl Job for Flaky {
    fn kind(&self) -> &'static str {
        "flaky"
    }

    async fn run(&self, run: &TaskRun) -> icegate_catalog::Result<Value> {
        match run.task().attempts {
            1 => Err(CatalogError::Unavailable("the store timed out".into())),
            _ => Err(CatalogError::bad_request("the table is gone")),
        }
    }
}

async fn an_unavailable_store_is_retried_later_and_other_errors_fail(db: TestDatabase) {
    let store: Arc<dyn TaskStore> = Arc::new(db.store.clone());
    let clock = ManualClock::now();
    let id = store.enqueue(&task("flaky", clock.now_ms()), clock.now_ms()).await.unwrap().unwrap().id;
    let runner = Runner::new(store.clone(), clock.clone()).with_job(Arc::new(Flaky));
    assert!(runner.run_next().await.unwrap());
    let queued = store.task(&id).await.unwrap().unwrap();
    assert_eq!(queued.state, TaskState::Queued);
    assert!(queued.not_before_ms > clock.now_ms(), "backs off");
    assert!(!runner.run_next().await.unwrap());
    clock.advance(Duration::from_secs(600));
    assert!(runner.run_next().await.unwrap());
    let failed = store.task(&id).await.unwrap().unwrap();
    assert_eq!((failed.state, failed.last_error.as_deref()), (TaskState::Failed, Some("the table is gone")));
}

/// The finished runs of a kind of task, oldest first (tasks are listed newest first).
async fn done_runs(tasks: &Arc<dyn TaskStore>, kind: &str) -> Vec<icegate_catalog::jobs::TaskRecord> {
    let filter = TaskFilter { kind: Some(kind.into()), state: Some(TaskState::Done), ..Default::default() };
    let mut runs = tasks.list_tasks(&filter).await.unwrap();
    runs.reverse();
    runs
}

/// The idempotency-key expiry, a recurring job: keys older than the lifetime go, younger ones
/// stay, and the next run is queued.
async fn idempotency_keys_expire_on_the_injected_clock(db: TestDatabase) {
    // The store stamps the key, and the job judges its age, by one injected clock.
    let clock = ManualClock::now();
    let store = Arc::new(db.store.clone().with_clock(clock.clone()));
    let wh = store
        .create_warehouse(
            &icegate_catalog::idempotency::WriteContext::NONE,
            &WarehouseName::parse("w").unwrap(),
            &StorageRoot::parse("file:///tmp/w").unwrap(),
            &icegate_catalog::storage::StorageProfile::File,
        )
        .await
        .unwrap()
        .id;
    let key = icegate_catalog::idempotency::IdempotencyKey { principal: "p".into(), key: "k".into() };
    let scope = icegate_catalog::idempotency::IdempotencyScope::new(key.clone(), "POST /v1/x".into(), "d".into());
    let write = icegate_catalog::idempotency::WriteContext::by_principal("p", Some(Arc::new(scope)));
    let ns = NamespaceIdent::from_levels(["a"]).unwrap();
    store.create_namespace(&write, &wh, &ns, &Properties::new()).await.unwrap();
    let catalog: Arc<dyn CatalogStore> = store.clone();
    let tasks: Arc<dyn TaskStore> = store.clone();
    let job = icegate_catalog::jobs::idempotency_expiry::IdempotencyKeyExpiry::new(catalog, Duration::from_secs(3600));
    let runner = Runner::new(tasks.clone(), clock.clone()).with_job(Arc::new(job)).every(
        icegate_catalog::jobs::idempotency_expiry::KIND,
        Duration::from_secs(300),
        "expiry",
    );
    runner.schedule().await.unwrap();
    runner.schedule().await.unwrap();
    assert!(runner.run_next().await.unwrap());
    assert!(store.idempotency_record(&key).await.unwrap().is_some(), "younger than its lifetime");
    assert!(!runner.run_next().await.unwrap(), "the next run waits 5 minutes; one was queued, not two");
    clock.advance(Duration::from_secs(3601));
    assert!(runner.run_next().await.unwrap());
    assert!(store.idempotency_record(&key).await.unwrap().is_none(), "past its lifetime");
    let runs = done_runs(&tasks, icegate_catalog::jobs::idempotency_expiry::KIND).await;
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1].result.as_ref().unwrap()["removed"], 1, "{:?}", runs[1]);
}

/// The location-hold expiry, a recurring job: a staged create's reservation goes once it has
/// expired, one that has not stays until it has, and each is removed once.
async fn expired_location_holds_are_removed_on_the_injected_clock(db: TestDatabase) {
    let clock = ManualClock::now();
    let store = Arc::new(db.store.clone().with_clock(clock.clone()));
    let write = icegate_catalog::idempotency::WriteContext::by_principal("p", None);
    let wh = store
        .create_warehouse(
            &write,
            &WarehouseName::parse("w").unwrap(),
            &StorageRoot::parse("file:///tmp/w").unwrap(),
            &icegate_catalog::storage::StorageProfile::File,
        )
        .await
        .unwrap()
        .id;
    let ns = NamespaceIdent::from_levels(["a"]).unwrap();
    store.create_namespace(&write, &wh, &ns, &Properties::new()).await.unwrap();
    let now = clock.now_ms();
    store.reserve_locations(&write, &wh, &ns, "soon", &["file:///tmp/w/a/soon".into()], now + 60_000).await.unwrap();
    store.reserve_locations(&write, &wh, &ns, "later", &["file:///tmp/w/a/later".into()], now + 400_000).await.unwrap();
    let catalog: Arc<dyn CatalogStore> = store.clone();
    let tasks: Arc<dyn TaskStore> = store.clone();
    let job = icegate_catalog::jobs::location_expiry::LocationHoldExpiry::new(catalog);
    let runner = Runner::new(tasks.clone(), clock.clone()).with_job(Arc::new(job)).every(
        icegate_catalog::jobs::location_expiry::KIND,
        Duration::from_secs(300),
        "expiry",
    );
    let removed = || async {
        let runs = done_runs(&tasks, icegate_catalog::jobs::location_expiry::KIND).await;
        runs.iter().map(|run| run.result.as_ref().unwrap()["removed"].as_i64().unwrap()).collect::<Vec<i64>>()
    };
    runner.schedule().await.unwrap();
    assert!(runner.run_next().await.unwrap());
    clock.advance(Duration::from_secs(301));
    assert!(runner.run_next().await.unwrap());
    clock.advance(Duration::from_secs(301));
    assert!(runner.run_next().await.unwrap());
    clock.advance(Duration::from_secs(301));
    assert!(runner.run_next().await.unwrap());
    // In order of time (tasks are listed newest first): nothing expired; "soon" (60 s); "later"
    // (400 s); nothing left.
    assert_eq!(removed().await, [0, 1, 1, 0], "each hold removed once, and only after it expired");
}

/// Ended tasks go once they are older than the retention; queued and running ones never.
async fn ended_tasks_are_removed_after_the_retention(db: TestDatabase) {
    let store = &db.store;
    let now = 1_000_000;
    let done = store.enqueue(&task("old", now), now).await.unwrap().unwrap();
    store.claim(&["old"], "w1", now, LEASE).await.unwrap().unwrap();
    store.finish(&done.id, "w1", &Finish::Done(Value::Null), now).await.unwrap();
    let cancelled = store.enqueue(&task("old", now), now).await.unwrap().unwrap();
    store.cancel(&cancelled.id, now).await.unwrap();
    let queued = store.enqueue(&task("waiting", now), now).await.unwrap().unwrap();
    let running = store.enqueue(&task("busy", now), now).await.unwrap().unwrap();
    store.claim(&["busy"], "w1", now, LEASE).await.unwrap().unwrap();
    let recent = store.enqueue(&task("old", now + 10), now + 10).await.unwrap().unwrap();
    store.cancel(&recent.id, now + 10).await.unwrap();
    let counts = store.task_counts().await.unwrap();
    assert_eq!(
        counts,
        vec![
            ("busy".to_owned(), TaskState::Running, 1),
            ("old".to_owned(), TaskState::Cancelled, 2),
            ("old".to_owned(), TaskState::Done, 1),
            ("waiting".to_owned(), TaskState::Queued, 1),
        ]
    );
    assert_eq!(store.remove_ended_tasks(now + 5, 1).await.unwrap(), 1, "bounded by the limit");
    assert_eq!(store.remove_ended_tasks(now + 5, 100).await.unwrap(), 1);
    assert_eq!(store.remove_ended_tasks(now + 5, 100).await.unwrap(), 0);
    for gone in [&done.id, &cancelled.id] {
        assert!(store.task(gone).await.unwrap().is_none());
    }
    for kept in [&queued.id, &running.id, &recent.id] {
        assert!(store.task(kept).await.unwrap().is_some());
    }
}

icegate_store::on_both_backends!(
    ended_tasks_are_removed_after_the_retention,
    a_task_is_claimed_once_when_due_and_finished_by_its_owner,
    a_dedupe_key_holds_one_active_task,
    a_rerun_asked_for_while_running_is_queued_at_the_end,
    an_expired_lease_passes_the_task_on_and_fences_the_old_worker,
    attempts_are_bounded_whether_a_run_fails_or_its_worker_dies,
    a_cancelled_task_stops_its_worker_and_is_not_claimed,
    many_workers_never_claim_one_task_twice,
    a_killed_worker_s_task_is_resumed_from_its_checkpoint,
    an_unavailable_store_is_retried_later_and_other_errors_fail,
    idempotency_keys_expire_on_the_injected_clock,
    expired_location_holds_are_removed_on_the_injected_clock,
);
