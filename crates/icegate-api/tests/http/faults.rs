//! Commit failure paths a real database cannot be made to take on demand: the swap fails after
//! (or before) it applied, the database is gone when the commit asks what happened, a swap
//! loses a race. `FaultyStore` is a real SQLite store with faults injected into the swap;
//! tables and views go through the same paths and get the same answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use async_trait::async_trait;
use icegate_catalog::idempotency::{Finalized, IdempotencyKey, IdempotencyRecord, IdempotencyScope, WriteContext};
use icegate_catalog::storage::StorageProfile;
use icegate_catalog::store::{
    Dropped, IdempotencyStore, MetadataSwap, NamespaceStore, NewTabular, Page, PageRequest, PoolStats,
    PropertiesChange, SwapOutcome, Tabular, TabularHead, TabularKind, TabularStore, Warehouse, WarehouseStore,
};
use icegate_catalog::{CatalogError, CatalogStore, NamespaceIdent, Properties, Result, StorageRoot, WarehouseName};
use icegate_store::SqlStore;
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

struct FaultyStore {
    inner: SqlStore,
    fault: AtomicU8,
    gone: AtomicBool,
}

impl FaultyStore {
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

    fn reachable(&self) -> Result<()> {
        if self.gone.load(Ordering::SeqCst) {
            return Err(CatalogError::Unavailable("the metadata store went away".into()));
        }
        Ok(())
    }
}

fn broken() -> CatalogError {
    CatalogError::Internal(anyhow::anyhow!("connection reset while committing"))
}

#[async_trait]
impl CatalogStore for FaultyStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn pool_stats(&self) -> PoolStats {
        self.inner.pool_stats()
    }
    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
}

#[async_trait]
impl WarehouseStore for FaultyStore {
    async fn create_warehouse(&self, n: &WarehouseName, r: &StorageRoot, p: &StorageProfile) -> Result<Warehouse> {
        self.inner.create_warehouse(n, r, p).await
    }
    async fn update_storage_profile(&self, n: &WarehouseName, p: &StorageProfile) -> Result<Warehouse> {
        self.inner.update_storage_profile(n, p).await
    }
    async fn ensure_warehouse(&self, n: &WarehouseName, r: &StorageRoot) -> Result<Warehouse> {
        self.inner.ensure_warehouse(n, r).await
    }
    async fn list_warehouses(&self, v: Option<&str>) -> Result<Vec<Warehouse>> {
        self.inner.list_warehouses(v).await
    }
    async fn warehouse_by_name(&self, n: &WarehouseName) -> Result<Option<Warehouse>> {
        self.inner.warehouse_by_name(n).await
    }
    async fn warehouse_by_id(&self, id: &str) -> Result<Option<Warehouse>> {
        self.inner.warehouse_by_id(id).await
    }
    async fn delete_warehouse(&self, n: &WarehouseName) -> Result<()> {
        self.inner.delete_warehouse(n).await
    }
}

#[async_trait]
impl NamespaceStore for FaultyStore {
    async fn create_namespace(&self, x: &WriteContext, w: &str, ns: &NamespaceIdent, p: &Properties) -> Result<()> {
        self.inner.create_namespace(x, w, ns, p).await
    }
    async fn list_namespaces(
        &self,
        w: &str,
        parent: Option<&NamespaceIdent>,
        page: &PageRequest,
        v: Option<&str>,
    ) -> Result<Page<NamespaceIdent>> {
        self.inner.list_namespaces(w, parent, page, v).await
    }
    async fn load_namespace(&self, w: &str, ns: &NamespaceIdent) -> Result<Option<Properties>> {
        self.inner.load_namespace(w, ns).await
    }
    async fn namespace_exists(&self, w: &str, ns: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(w, ns).await
    }
    async fn drop_namespace(&self, x: &WriteContext, w: &str, ns: &NamespaceIdent) -> Result<()> {
        self.inner.drop_namespace(x, w, ns).await
    }
    async fn update_namespace_properties(
        &self,
        x: &WriteContext,
        w: &str,
        ns: &NamespaceIdent,
        updates: &Properties,
        removals: &[String],
    ) -> Result<PropertiesChange> {
        self.inner.update_namespace_properties(x, w, ns, updates, removals).await
    }
}

#[async_trait]
impl IdempotencyStore for FaultyStore {
    async fn idempotency_record(&self, key: &IdempotencyKey) -> Result<Option<IdempotencyRecord>> {
        self.inner.idempotency_record(key).await
    }
    async fn finalize_idempotency_key(
        &self,
        scope: &IdempotencyScope,
        status: u16,
        body: &str,
        keep_unreserved: bool,
    ) -> Result<Finalized> {
        self.inner.finalize_idempotency_key(scope, status, body, keep_unreserved).await
    }
    async fn delete_idempotency_key(&self, key: &IdempotencyKey) -> Result<()> {
        self.inner.delete_idempotency_key(key).await
    }
    async fn delete_idempotency_keys_before(&self, before_ms: i64) -> Result<u64> {
        self.inner.delete_idempotency_keys_before(before_ms).await
    }
}

#[async_trait]
impl TabularStore for FaultyStore {
    async fn create_tabular(&self, x: &WriteContext, t: &NewTabular<'_>) -> Result<String> {
        if self.take() == Fault::CreateStateUnknown {
            return Err(CatalogError::CommitStateUnknown("the connection failed during COMMIT".into()));
        }
        self.inner.create_tabular(x, t).await
    }
    async fn load_tabular(&self, w: &str, ns: &NamespaceIdent, n: &str, k: TabularKind) -> Result<Option<Tabular>> {
        self.reachable()?;
        self.inner.load_tabular(w, ns, n, k).await
    }
    async fn load_tabular_head(
        &self,
        w: &str,
        ns: &NamespaceIdent,
        n: &str,
        k: TabularKind,
    ) -> Result<Option<TabularHead>> {
        self.reachable()?;
        self.inner.load_tabular_head(w, ns, n, k).await
    }
    async fn swap_metadata(&self, x: &WriteContext, swaps: &[MetadataSwap]) -> Result<SwapOutcome> {
        match self.take() {
            Fault::None => self.inner.swap_metadata(x, swaps).await,
            Fault::FailAfterApplying => {
                assert_eq!(self.inner.swap_metadata(x, swaps).await?, SwapOutcome::Applied);
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
                assert_eq!(self.inner.swap_metadata(x, swaps).await?, SwapOutcome::Applied);
                let swap = &swaps[0];
                let moved = format!("{}_moved", swap.name);
                let (from, to) = ((&swap.namespace, swap.name.as_str()), (&swap.namespace, moved.as_str()));
                let mut renamed = false;
                for kind in [TabularKind::Table, TabularKind::View] {
                    renamed |=
                        self.inner.rename_tabular(x, &swap.warehouse_id, kind, from, to, Some(&swap.id)).await.is_ok();
                }
                assert!(renamed);
                Err(broken())
            }
            Fault::FailAfterApplyingThenCommittedOver => {
                assert_eq!(self.inner.swap_metadata(x, swaps).await?, SwapOutcome::Applied);
                let mut next = swaps[0].clone();
                next.expected_metadata_location = next.metadata_location.clone();
                next.metadata_location = next.metadata_location.replace(".metadata.json", "-next.metadata.json");
                assert_eq!(self.inner.swap_metadata(x, &[next]).await?, SwapOutcome::Applied);
                Err(broken())
            }
        }
    }
    async fn drop_tabular(
        &self,
        x: &WriteContext,
        w: &str,
        tabular: (&NamespaceIdent, &str),
        k: TabularKind,
        lease: i64,
        expected: Option<&str>,
    ) -> Result<Option<Dropped>> {
        self.inner.drop_tabular(x, w, tabular, k, lease, expected).await
    }
    async fn metadata_location_of(&self, id: &str) -> Result<Option<String>> {
        self.reachable()?;
        self.inner.metadata_location_of(id).await
    }
    async fn recorded_locations(&self, id: &str) -> Result<Vec<String>> {
        self.inner.recorded_locations(id).await
    }
    async fn check_locations_free(
        &self,
        x: &WriteContext,
        w: &str,
        t: (&NamespaceIdent, &str),
        locations: &[String],
        exclude: Option<&str>,
    ) -> Result<()> {
        self.inner.check_locations_free(x, w, t, locations, exclude).await
    }
    async fn reserve_locations(
        &self,
        x: &WriteContext,
        w: &str,
        ns: &NamespaceIdent,
        n: &str,
        locations: &[String],
        until: i64,
    ) -> Result<()> {
        self.inner.reserve_locations(x, w, ns, n, locations, until).await
    }
    async fn rename_tabular(
        &self,
        x: &WriteContext,
        w: &str,
        k: TabularKind,
        from: (&NamespaceIdent, &str),
        to: (&NamespaceIdent, &str),
        expected: Option<&str>,
    ) -> Result<()> {
        self.inner.rename_tabular(x, w, k, from, to, expected).await
    }
    async fn list_tabulars(
        &self,
        w: &str,
        ns: &NamespaceIdent,
        k: TabularKind,
        page: &PageRequest,
        v: Option<&str>,
    ) -> Result<Page<String>> {
        self.inner.list_tabulars(w, ns, k, page, v).await
    }
}

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
        let store =
            Arc::new(FaultyStore { inner: db.store.clone(), fault: AtomicU8::new(0), gone: AtomicBool::new(false) });
        let dir = tempfile::tempdir().unwrap();
        let name = WarehouseName::parse("default").unwrap();
        let root = StorageRoot::parse(&format!("file://{}", dir.path().display())).unwrap();
        let warehouse = store.ensure_warehouse(&name, &root).await.unwrap();
        let mut app = TestApp::serve(store.clone(), Some(name), default_options()).await;
        app.prefix = warehouse.id;
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

#[tokio::test]
async fn a_swap_that_failed_after_applying_is_answered_as_committed() {
    let lab = Lab::new().await;
    for kind in KINDS {
        lab.store.arm(Fault::FailAfterApplying);
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
        lab.store.arm(Fault::FailAfterApplyingThenRenamed);
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
        lab.store.arm(Fault::FailAfterApplyingThenCommittedOver);
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
    lab.store.arm(Fault::CreateStateUnknown);
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
        lab.store.arm(Fault::FailBeforeApplying);
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
        lab.store.arm(Fault::FailAndGoAway);
        let (status, body) = lab.commit(kind, "unknown").await;
        assert_eq!(status, 500, "{kind:?}: {body}");
        assert_eq!(body["error"]["type"], "CommitStateUnknownException", "{kind:?}: {body}");
        lab.store.gone.store(false, Ordering::SeqCst);
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
        lab.store.arm(Fault::ConflictOnce);
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
