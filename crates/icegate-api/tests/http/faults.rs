//! Commit failure paths a real database cannot be made to take on demand: the swap fails after
//! (or before) it applied, the database is gone when the commit asks what happened, a swap
//! loses a race. The store is a real SQLite store with faults injected into the swap (`Injected`);
//! tables and views go through the same paths and get the same answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use async_trait::async_trait;
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::store::{MetadataSwap, NewTabular, SwapOutcome, TabularKind, TabularStore, WarehouseStore};
use icegate_catalog::{CatalogError, Result, StorageRoot, WarehouseName};
use icegate_store::SqlStore;
use icegate_store::faults::{FaultStore, Faults};
use icegate_store::testing::{TestBackend, TestDatabase};
use serde_json::{Value, json};

use crate::common::{TestApp, default_options};

/// What the next swap does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Fault {
    None,
    /// The swap applies, then the store reports an error (the connection died on COMMIT's reply).
    FailAfterApplying,
    /// The store reports an error and nothing applied.
    FailBeforeApplying,
    /// The store reports an error, and every read after it fails too (the database is gone).
    FailAndGoAway,
    /// The swap reports a lost race without applying (another writer got there first).
    ConflictOnce,
    /// The swap applies, the table or view is renamed (to `<name>_moved`), then the store
    /// reports an error.
    FailAfterApplyingThenRenamed,
    /// The swap applies, another commit swaps the row on, then the store reports an error.
    FailAfterApplyingThenCommittedOver,
    /// Creating a table or view fails without an answer (the row may yet be created).
    CreateStateUnknown,
}

/// The faults a test arms: what the next swap (or create) does, and whether the database is gone.
struct Injected {
    fault: AtomicU8,
    gone: AtomicBool,
    /// The operation each create and swap was written for, in order.
    written: std::sync::Mutex<Vec<String>>,
}

impl Injected {
    fn arm(&self, fault: Fault) {
        self.fault.store(fault as u8, Ordering::SeqCst);
    }

    fn take(&self) -> Fault {
        match self.fault.swap(Fault::None as u8, Ordering::SeqCst) {
            1 => Fault::FailAfterApplying,
            2 => Fault::FailBeforeApplying,
            3 => Fault::FailAndGoAway,
            4 => Fault::ConflictOnce,
            5 => Fault::FailAfterApplyingThenRenamed,
            6 => Fault::FailAfterApplyingThenCommittedOver,
            7 => Fault::CreateStateUnknown,
            _ => Fault::None,
        }
    }
}

fn broken() -> CatalogError {
    CatalogError::Internal(anyhow::anyhow!("connection reset while committing"))
}

#[async_trait]
impl Faults for Injected {
    /// Once the database is gone, the reads a commit makes to learn what happened fail too.
    async fn before(&self, call: &'static str) -> Result<()> {
        let read = matches!(call, "load_tabular" | "load_tabular_head" | "metadata_location_of");
        if read && self.gone.load(Ordering::SeqCst) {
            return Err(CatalogError::Unavailable("the metadata store went away".into()));
        }
        Ok(())
    }

    async fn create_tabular(
        &self,
        store: &SqlStore,
        x: &WriteContext,
        t: &NewTabular<'_>,
    ) -> Result<icegate_catalog::TabularId> {
        self.written.lock().unwrap().push(x.operation.as_deref().unwrap_or("-").to_owned());
        if self.take() == Fault::CreateStateUnknown {
            return Err(CatalogError::CommitStateUnknown("the connection failed during COMMIT".into()));
        }
        store.create_tabular(x, t).await
    }

    async fn swap_metadata(&self, store: &SqlStore, x: &WriteContext, swaps: &[MetadataSwap]) -> Result<SwapOutcome> {
        self.written.lock().unwrap().push(x.operation.as_deref().unwrap_or("-").to_owned());
        match self.take() {
            Fault::None => store.swap_metadata(x, swaps).await,
            Fault::FailAfterApplying => {
                assert_eq!(store.swap_metadata(x, swaps).await?, SwapOutcome::Applied);
                Err(broken())
            }
            Fault::FailBeforeApplying => Err(broken()),
            Fault::FailAndGoAway => {
                self.gone.store(true, Ordering::SeqCst);
                Err(broken())
            }
            Fault::ConflictOnce => Ok(SwapOutcome::Conflict(0)),
            Fault::CreateStateUnknown => unreachable!("armed for a create"),
            Fault::FailAfterApplyingThenRenamed => {
                assert_eq!(store.swap_metadata(x, swaps).await?, SwapOutcome::Applied);
                let swap = &swaps[0];
                let moved = format!("{}_moved", swap.name);
                let (from, to) = ((&swap.namespace, swap.name.as_str()), (&swap.namespace, moved.as_str()));
                let mut renamed = false;
                for kind in [TabularKind::Table, TabularKind::View] {
                    renamed |=
                        store.rename_tabular(x, &swap.warehouse_id, kind, from, to, Some(&swap.id)).await.is_ok();
                }
                assert!(renamed);
                Err(broken())
            }
            Fault::FailAfterApplyingThenCommittedOver => {
                assert_eq!(store.swap_metadata(x, swaps).await?, SwapOutcome::Applied);
                let mut next = swaps[0].clone();
                next.expected_metadata_location = next.metadata_location.clone();
                next.metadata_location = next.metadata_location.replace(".metadata.json", "-next.metadata.json");
                assert_eq!(store.swap_metadata(x, &[next]).await?, SwapOutcome::Applied);
                Err(broken())
            }
        }
    }
}

type FaultyStore = FaultStore<Injected>;

/// A server over a faulty SQLite store with a namespace `db`, a table `t` and a view `v`.
struct Lab {
    app: TestApp,
    store: Arc<FaultyStore>,
    _db: TestDatabase,
    _dir: tempfile::TempDir,
}

const SCHEMA: &str =
    r#"{"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": false}]}"#;

impl Lab {
    async fn new() -> Self {
        let db = TestDatabase::new(TestBackend::Sqlite).await;
        let faults = Injected { fault: AtomicU8::new(0), gone: AtomicBool::new(false), written: Default::default() };
        let store = Arc::new(FaultStore::new(db.store.clone(), faults));
        let dir = tempfile::tempdir().unwrap();
        let name = WarehouseName::parse("default").unwrap();
        let root = StorageRoot::parse(&format!("file://{}", dir.path().display())).unwrap();
        let warehouse =
            store.ensure_warehouse(&icegate_catalog::idempotency::WriteContext::NONE, &name, &root).await.unwrap();
        let mut app = TestApp::serve(store.clone(), Some(name), default_options()).await;
        app.prefix = warehouse.id.into_string();
        app.create_namespace(&["db"]).await;
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        let (status, body) =
            app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": "t", "schema": schema})).await;
        assert_eq!(status, 200, "{body}");
        let view = json!({
            "name": "v",
            "schema": schema,
            "view-version": {
                "version-id": 1, "schema-id": 0, "timestamp-ms": 1, "summary": {},
                "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
                "default-namespace": ["db"],
            },
            "properties": {},
        });
        let (status, body) = app.post("/v1/{prefix}/namespaces/db/views", view).await;
        assert_eq!(status, 200, "{body}");
        Self { app, store, _db: db, _dir: dir }
    }

    fn path(kind: TabularKind) -> &'static str {
        match kind {
            TabularKind::Table => "/v1/{prefix}/namespaces/db/tables/t",
            TabularKind::View => "/v1/{prefix}/namespaces/db/views/v",
        }
    }

    /// Commits a property `key` to the table or the view.
    async fn commit(&self, kind: TabularKind, key: &str) -> (reqwest::StatusCode, Value) {
        let updates = json!([{"action": "set-properties", "updates": {key: "x"}}]);
        self.app.post(Self::path(kind), json!({"requirements": [], "updates": updates})).await
    }

    async fn load(&self, kind: TabularKind) -> Value {
        let (status, body) = self.app.get(Self::path(kind)).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The metadata files in the table's or view's directory.
    fn metadata_files(&self, loaded: &Value) -> Vec<String> {
        let location = loaded["metadata"]["location"].as_str().unwrap().strip_prefix("file://").unwrap().to_owned();
        let mut files: Vec<String> = std::fs::read_dir(format!("{location}/metadata"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".metadata.json"))
            .collect();
        files.sort();
        files
    }
}

const KINDS: [TabularKind; 2] = [TabularKind::Table, TabularKind::View];

/// Each write carries the operation its request asked for, by its OpenAPI operation id (what the
/// audit trail records as the action).
#[tokio::test]
async fn each_write_carries_the_operation_asked_for() {
    let lab = Lab::new().await;
    assert_eq!(lab.commit(TabularKind::Table, "a").await.0, 200);
    assert_eq!(lab.commit(TabularKind::View, "b").await.0, 200);
    let written = lab.store.faults().written.lock().unwrap().clone();
    assert_eq!(written, ["createTable", "createView", "updateTable", "replaceView"]);
}

#[tokio::test]
async fn a_swap_that_failed_after_applying_is_answered_as_committed() {
    let lab = Lab::new().await;
    for kind in KINDS {
        lab.store.faults.arm(Fault::FailAfterApplying);
        let (status, body) = lab.commit(kind, "after").await;
        assert_eq!(status, 200, "{kind:?}: {body}");
        let loaded = lab.load(kind).await;
        assert_eq!(loaded["metadata"]["properties"]["after"], "x", "{kind:?}");
        assert_eq!(loaded["metadata-location"], body["metadata-location"], "{kind:?}: the answer is the table");
        assert_eq!(lab.metadata_files(&loaded).len(), 2, "{kind:?}: both versions' files are kept");
    }
}

/// The swap applied and the table or view was renamed before the commit asked what became of
/// it: the rows are read back by id, so it is answered as committed and its file is kept (read
/// by name, it would have seemed not to apply, and its file would have been deleted from under
/// the renamed table).
#[tokio::test]
async fn a_swap_that_failed_after_applying_is_found_by_id_after_a_rename() {
    for kind in KINDS {
        let lab = Lab::new().await;
        lab.store.faults.arm(Fault::FailAfterApplyingThenRenamed);
        let (status, body) = lab.commit(kind, "renamed").await;
        assert_eq!(status, 200, "{kind:?}: {body}");
        let moved = format!("{}_moved", Lab::path(kind));
        let (status, loaded) = lab.app.get(&moved).await;
        assert_eq!(status, 200, "{kind:?}: {loaded}");
        assert_eq!(loaded["metadata-location"], body["metadata-location"], "{kind:?}");
        assert_eq!(lab.metadata_files(&loaded).len(), 2, "{kind:?}: the file the row points at is kept");
    }
}

/// The swap applied and another commit swapped the row on before the commit asked: the row is
/// at neither the commit's location nor the one it expected, which cannot tell "applied, then
/// committed over" from "another commit won": the state is unknown, and the file is kept (the
/// later metadata may build on it).
#[tokio::test]
async fn a_swap_that_failed_and_whose_row_moved_on_is_unknown_and_keeps_its_file() {
    for kind in KINDS {
        let lab = Lab::new().await;
        let before = lab.load(kind).await;
        lab.store.faults.arm(Fault::FailAfterApplyingThenCommittedOver);
        let (status, body) = lab.commit(kind, "over").await;
        assert_eq!(status, 500, "{kind:?}: {body}");
        assert_eq!(body["error"]["type"], "CommitStateUnknownException", "{kind:?}: {body}");
        assert_eq!(lab.metadata_files(&before).len(), 2, "{kind:?}: the file is kept");
    }
}

/// A create whose `COMMIT` failed without an answer may yet create the row, pointing at the
/// metadata file it wrote: the file is kept.
#[tokio::test]
async fn a_create_whose_outcome_is_unknown_keeps_its_metadata_file() {
    let lab = Lab::new().await;
    lab.store.faults.arm(Fault::CreateStateUnknown);
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let (status, body) =
        lab.app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": "u", "schema": schema})).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["type"], "CommitStateUnknownException", "{body}");
    let t = lab.load(TabularKind::Table).await;
    // Beside t's directory.
    let t = std::path::PathBuf::from(t["metadata"]["location"].as_str().unwrap().strip_prefix("file://").unwrap());
    let files: Vec<_> = std::fs::read_dir(t.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|dir| dir.file_name().unwrap().to_string_lossy().starts_with('u'))
        .flat_map(|dir| std::fs::read_dir(dir.join("metadata")).unwrap())
        .collect();
    assert_eq!(files.len(), 1, "the file the row may yet point at is kept");
}

#[tokio::test]
async fn a_swap_that_failed_before_applying_changes_nothing_and_leaves_no_file() {
    let lab = Lab::new().await;
    for kind in KINDS {
        let before = lab.load(kind).await;
        lab.store.faults.arm(Fault::FailBeforeApplying);
        let (status, body) = lab.commit(kind, "lost").await;
        assert_eq!(status, 500, "{kind:?}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("error id"), "{kind:?}: {body}");
        assert!(!body.to_string().contains("connection reset"), "{kind:?}: the cause is not sent: {body}");
        let after = lab.load(kind).await;
        assert_eq!(after["metadata-location"], before["metadata-location"], "{kind:?}");
        assert!(after["metadata"]["properties"].get("lost").is_none(), "{kind:?}");
        assert_eq!(lab.metadata_files(&after), lab.metadata_files(&before), "{kind:?}: the unused file is deleted");
    }
}

#[tokio::test]
async fn a_commit_whose_outcome_cannot_be_learned_says_the_state_is_unknown_and_keeps_its_file() {
    for kind in KINDS {
        let lab = Lab::new().await;
        let before = lab.load(kind).await;
        lab.store.faults.arm(Fault::FailAndGoAway);
        let (status, body) = lab.commit(kind, "unknown").await;
        assert_eq!(status, 500, "{kind:?}: {body}");
        assert_eq!(body["error"]["type"], "CommitStateUnknownException", "{kind:?}: {body}");
        lab.store.faults.gone.store(false, Ordering::SeqCst);
        // Nothing applied here, but the server could not know: the new file may be the table's.
        let after = lab.load(kind).await;
        assert_eq!(after["metadata-location"], before["metadata-location"], "{kind:?}");
        assert_eq!(lab.metadata_files(&after).len(), 2, "{kind:?}: the file the table may point at is kept");
    }
}

#[tokio::test]
async fn a_swap_that_lost_a_race_is_retried_and_its_file_removed() {
    let lab = Lab::new().await;
    for kind in KINDS {
        lab.store.faults.arm(Fault::ConflictOnce);
        let (status, body) = lab.commit(kind, "retried").await;
        assert_eq!(status, 200, "{kind:?}: {body}");
        let loaded = lab.load(kind).await;
        assert_eq!(loaded["metadata"]["properties"]["retried"], "x", "{kind:?}");
        assert_eq!(loaded["metadata-location"], body["metadata-location"], "{kind:?}");
        assert_eq!(lab.metadata_files(&loaded).len(), 2, "{kind:?}: the losing attempt's file is gone");
    }
}

#[tokio::test]
async fn concurrent_view_replaces_lose_nothing() {
    let lab = Arc::new(Lab::new().await);
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let lab = lab.clone();
            tokio::spawn(async move { (i, lab.commit(TabularKind::View, &format!("writer-{i}")).await) })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for task in tasks {
        let (i, (status, body)) = task.await.unwrap();
        match status.as_u16() {
            200 => acknowledged.push(i),
            409 => assert_eq!(body["error"]["type"], "CommitFailedException"),
            other => panic!("writer {i} got {other}: {body}"),
        }
    }
    let loaded = lab.load(TabularKind::View).await;
    for i in &acknowledged {
        assert_eq!(loaded["metadata"]["properties"][format!("writer-{i}")], "x", "acknowledged replace {i} is missing");
    }
    assert!(acknowledged.len() >= 8, "only {} of 16 replaces succeeded", acknowledged.len());
    // One file per applied version (the create and each acknowledged replace): losers cleaned up.
    assert_eq!(lab.metadata_files(&loaded).len(), 1 + acknowledged.len());
}
