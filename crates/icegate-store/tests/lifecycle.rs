//! Soft delete, undrop and purges in the store, on SQLite and PostgreSQL: a kept entry frees the
//! name at once but keeps its locations from other tables; undrop restores the same table (same
//! id, locations, metadata) under its name or a new one, and refuses a taken name, an ended
//! hold or an entry whose metadata was registered again; the sweep forgets entries past their
//! hold; and a purge killed half-way is resumed by the next worker and deletes every file of the
//! table's own directory and none of its neighbour's — all on an injected clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use icegate_catalog::clock::{Clock, ManualClock};
use icegate_catalog::files::{Deleted, FileIo};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::jobs::{JobMetrics, Runner, TaskState, TaskStore};
use icegate_catalog::store::prelude::*;
use icegate_catalog::store::{DeletedFilter, DropOptions, NewTabular, SoftDelete, TabularKind, Warehouse};
use icegate_catalog::{
    CatalogError, CatalogStore, NamespaceIdent, Properties, StorageRoot, WarehouseId, WarehouseName,
};
use icegate_store::testing::TestDatabase;

const DAY: i64 = 86_400_000;

fn ns(name: &str) -> NamespaceIdent {
    NamespaceIdent::from_levels([name]).unwrap()
}

fn document(uuid: &str) -> String {
    format!("{{\"table-uuid\": \"{uuid}\"}}")
}

async fn warehouse(store: &dyn CatalogStore, root: &str) -> Warehouse {
    let write = WriteContext::by_principal("p", None);
    let wh = store
        .create_warehouse(
            &write,
            &WarehouseName::parse("w").unwrap(),
            &StorageRoot::parse(root).unwrap(),
            &icegate_catalog::storage::StorageProfile::File,
        )
        .await
        .unwrap();
    store.create_namespace(&write, &wh.id, &ns("db"), &Properties::new()).await.unwrap();
    wh
}

async fn create(
    store: &dyn CatalogStore,
    wh: &WarehouseId,
    name: &str,
    location: &str,
    uuid: &str,
) -> Result<icegate_catalog::TabularId, CatalogError> {
    create_as(store, "p", wh, (name, location), uuid).await
}

/// Creates table `db.<name>` at `location` with metadata of `uuid`, as `principal`.
async fn create_as(
    store: &dyn CatalogStore,
    principal: &str,
    wh: &WarehouseId,
    (name, location): (&str, &str),
    uuid: &str,
) -> Result<icegate_catalog::TabularId, CatalogError> {
    store
        .create_tabular(
            &WriteContext::by_principal(principal, None),
            &NewTabular {
                warehouse_id: wh,
                namespace: &ns("db"),
                name,
                kind: TabularKind::Table,
                location,
                extra_locations: &[],
                metadata_location: &format!("{location}/metadata/00000-x.metadata.json"),
                metadata: &document(uuid),
                metadata_gzip: None,
            },
        )
        .await
}

fn keep(until: i64, purge: Option<i64>) -> DropOptions {
    DropOptions { lease_until_ms: 0, keep: Some(SoftDelete { restorable_until_ms: until, purge_due_ms: purge }) }
}

/// A store on a manual clock, with warehouse `w` (at `file:///w`) and table `db.t` at
/// `file:///w/db/t-1` (uuid `u1`).
async fn with_table(
    db: &TestDatabase,
) -> (Arc<ManualClock>, icegate_store::SqlStore, WarehouseId, icegate_catalog::TabularId) {
    let clock = ManualClock::now();
    let store = db.store.clone().with_clock(clock.clone());
    let wh = warehouse(&store, "file:///w").await.id;
    let id = create(&store, &wh, "t", "file:///w/db/t-1", "u1").await.unwrap();
    (clock, store, wh, id)
}

async fn drop_kept(store: &dyn CatalogStore, wh: &WarehouseId, name: &str, options: DropOptions) {
    let write = WriteContext::by_principal("p", None);
    store.drop_tabular(&write, wh, (&ns("db"), name), TabularKind::Table, options, None).await.unwrap().unwrap();
}

async fn a_kept_entry_frees_its_name_holds_its_location_and_is_undropped(db: TestDatabase) {
    let (clock, store, wh, id) = with_table(&db).await;
    let store: &dyn CatalogStore = &store;
    let now = clock.now_ms();
    drop_kept(store, &wh, "t", keep(now + 7 * DAY, None)).await;
    assert!(store.load_tabular(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().is_none());
    let listed = store.list_deleted(&wh, &DeletedFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), listed[0].name.as_str(), listed[0].dropped_by.as_str()),
        (id.as_str(), "t", "p")
    );
    assert_eq!(listed[0].not_restorable(now), None);
    let named = |name: &str| DeletedFilter { named: Some((ns("db"), name.to_owned())), ..DeletedFilter::default() };
    assert_eq!(store.list_deleted(&wh, &named("t")).await.unwrap(), listed, "by its name");
    assert!(store.list_deleted(&wh, &named("u")).await.unwrap().is_empty(), "not by another");

    // Its name is free; its location is not (its files are still there), not even inside it.
    let other = create(store, &wh, "t", "file:///w/db/t-2", "u2").await.unwrap();
    for location in ["file:///w/db/t-1", "file:///w/db/t-1/data"] {
        let taken = create(store, &wh, "x", location, "u3").await;
        assert!(matches!(taken, Err(CatalogError::BadRequest(_))), "{location}: {taken:?}");
    }
    // Undrop into the taken name: refused, nothing changed.
    let write = WriteContext::by_principal("admin", None);
    let refused = store.undrop_tabular(&write, &id, (&ns("db"), "t"), now).await;
    assert!(matches!(refused, Err(CatalogError::AlreadyExists(_))), "{refused:?}");
    assert_eq!(store.list_deleted(&wh, &DeletedFilter::default()).await.unwrap().len(), 1);
    let missing = store.undrop_tabular(&write, &id, (&ns("nope"), "t"), now).await;
    assert!(matches!(missing, Err(CatalogError::NotFound { .. })), "{missing:?}");
    // Under a new name: the same table, and its location is its own again.
    let restored = store.undrop_tabular(&write, &id, (&ns("db"), "t_old"), now).await.unwrap();
    assert_eq!((restored.id.as_str(), restored.location.as_str()), (id.as_str(), "file:///w/db/t-1"));
    assert_eq!(restored.metadata, document("u1"));
    let loaded = store.load_tabular(&wh, &ns("db"), "t_old", TabularKind::Table).await.unwrap().unwrap();
    assert_eq!(loaded.id, id);
    assert_ne!(other, id);
    assert!(store.list_deleted(&wh, &DeletedFilter::default()).await.unwrap().is_empty());
    let again = store.undrop_tabular(&write, &id, (&ns("db"), "t_old2"), now).await;
    assert!(matches!(again, Err(CatalogError::NotFound { .. })), "undropped once: {again:?}");
}

async fn an_entry_past_its_hold_is_not_undropped_and_the_sweep_forgets_it(db: TestDatabase) {
    let (clock, store, wh, id) = with_table(&db).await;
    let store: &dyn CatalogStore = &store;
    drop_kept(store, &wh, "t", keep(clock.now_ms() + DAY, None)).await;
    clock.advance(Duration::from_millis(DAY as u64 + 1));
    let now = clock.now_ms();
    let write = WriteContext::by_principal("admin", None);
    let late = store.undrop_tabular(&write, &id, (&ns("db"), "t"), now).await;
    assert!(matches!(&late, Err(CatalogError::Conflict(why)) if why.contains("hold period has ended")), "{late:?}");
    assert_eq!(store.expire_deleted(now - 1000, 100).await.unwrap(), 0, "not before its hold ended");
    assert_eq!(store.expire_deleted(now, 100).await.unwrap(), 1);
    assert_eq!(store.expire_deleted(now, 100).await.unwrap(), 0);
    assert!(store.deleted_tabular(&id).await.unwrap().is_none());
    // Its location is free once the hold is over.
    create(store, &wh, "x", "file:///w/db/t-1", "u9").await.unwrap();
}

async fn registering_the_dropped_metadata_again_supersedes_the_entry(db: TestDatabase) {
    let (clock, store, wh, id) = with_table(&db).await;
    let store: &dyn CatalogStore = &store;
    let now = clock.now_ms();
    drop_kept(store, &wh, "t", keep(now + DAY, Some(now + DAY))).await;
    // Another principal may not take the location of a table it did not drop...
    let stranger = create_as(store, "q", &wh, ("mine", "file:///w/db/t-1"), "u1").await;
    assert!(matches!(stranger, Err(CatalogError::BadRequest(_))), "{stranger:?}");
    // Nor does the uuid alone, elsewhere, call off its purge or its undrop.
    create(store, &wh, "impostor", "file:///w/db/elsewhere", "u1").await.unwrap();
    let entry = store.deleted_tabular(&id).await.unwrap().unwrap();
    assert_eq!((entry.superseded.as_deref(), entry.purge_due_ms), (None, Some(now + DAY)), "{entry:?}");
    // ...the one that dropped it may register the same table (its uuid) again, where it was.
    create(store, &wh, "adopted", "file:///w/db/t-1", "u1").await.unwrap();
    let entry = store.deleted_tabular(&id).await.unwrap().unwrap();
    assert!(entry.superseded.as_deref().unwrap().contains("db.adopted"), "{entry:?}");
    assert_eq!(entry.purge_due_ms, None, "its purge is called off: the files are the new table's");
    let refused = store.undrop_tabular(&WriteContext::NONE, &id, (&ns("db"), "t"), now).await;
    assert!(matches!(refused, Err(CatalogError::Conflict(_))), "{refused:?}");
    assert!(store.begin_purge(&id).await.unwrap().is_none());
    assert!(store.purges_due(now + 2 * DAY, 10).await.unwrap().is_empty());
}

/// Files through the real local storage, stalling (a worker that dies without a word) when the
/// `stall_at`-th batch is asked for.
struct Stalling {
    inner: icegate_storage::ObjectStoreIo,
    calls: AtomicUsize,
    stall_at: Option<usize>,
}

#[async_trait::async_trait]
impl FileIo for Stalling {
    async fn write_new(&self, w: &Warehouse, location: &str, bytes: bytes::Bytes) -> icegate_catalog::Result<()> {
        self.inner.write_new(w, location, bytes).await
    }
    async fn read(&self, w: &Warehouse, location: &str, max: u64) -> icegate_catalog::Result<Vec<u8>> {
        self.inner.read(w, location, max).await
    }
    async fn delete(&self, w: &Warehouse, location: &str) -> icegate_catalog::Result<()> {
        self.inner.delete(w, location).await
    }
    async fn list_below(
        &self,
        w: &Warehouse,
        prefix: &str,
        max: usize,
    ) -> icegate_catalog::Result<icegate_catalog::files::Listing> {
        self.inner.list_below(w, prefix, max).await
    }
    async fn delete_some_below(&self, w: &Warehouse, prefix: &str, max: usize) -> icegate_catalog::Result<Deleted> {
        if Some(self.calls.fetch_add(1, Ordering::SeqCst) + 1) == self.stall_at {
            std::future::pending::<()>().await;
        }
        self.inner.delete_some_below(w, prefix, max).await
    }
}

async fn a_purge_killed_half_way_is_resumed_and_deletes_only_the_tables_files(db: TestDatabase) {
    let dir = tempfile::tempdir().unwrap();
    let root = format!("file://{}", dir.path().display());
    let clock = ManualClock::now();
    let store = Arc::new(db.store.clone().with_clock(clock.clone()));
    let wh = warehouse(store.as_ref(), &root).await;
    let location = format!("{root}/db/t-1");
    let id = create(store.as_ref(), &wh.id, "t", &location, "u1").await.unwrap();
    for (path, bytes) in (0..7).map(|i| (format!("data/part-{i}.parquet"), vec![7u8; 10 + i])) {
        let file = dir.path().join("db/t-1").join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, bytes).unwrap();
    }
    let neighbour = dir.path().join("db/t-10/data/keep.parquet");
    std::fs::create_dir_all(neighbour.parent().unwrap()).unwrap();
    std::fs::write(&neighbour, b"neighbour").unwrap();

    let now = clock.now_ms();
    drop_kept(store.as_ref(), &wh.id, "t", keep(now, Some(now))).await;
    let tasks: Arc<dyn TaskStore> = store.clone();
    icegate_catalog::lifecycle::queue_purge(tasks.as_ref(), &wh.id, &id, now, ("a test", now)).await.unwrap();
    let catalog: Arc<dyn CatalogStore> = store.clone();
    let metrics = JobMetrics::default();
    let stalling =
        Stalling { inner: icegate_storage::ObjectStoreIo::new(), calls: AtomicUsize::new(0), stall_at: Some(3) };
    let job =
        icegate_catalog::jobs::purge::PurgeJob::new(catalog.clone(), Arc::new(stalling), metrics.clone()).with_batch(2);
    let doomed = Runner::new(tasks.clone(), clock.clone()).with_job(Arc::new(job)).with_lease(Duration::from_secs(60));
    // Two batches of two, then the worker hangs in the third and is killed.
    let killed = tokio::time::timeout(Duration::from_millis(500), doomed.run_next()).await;
    assert!(killed.is_err(), "the first worker hung in its third batch");
    let stuck = tasks.list_tasks(&Default::default()).await.unwrap().remove(0);
    assert_eq!((stuck.state, stuck.progress.done), (TaskState::Running, 4), "{stuck:?}");
    assert_eq!(std::fs::read_dir(dir.path().join("db/t-1/data")).unwrap().count(), 3);
    // Meanwhile it is being purged: not restorable, and its location still held.
    let entry = store.deleted_tabular(&id).await.unwrap().unwrap();
    assert_eq!(entry.not_restorable(now).as_deref(), Some("its purge has started"));
    assert!(create(store.as_ref(), &wh.id, "x", &location, "u1").await.is_err(), "not even the same table");

    let job = icegate_catalog::jobs::purge::PurgeJob::new(
        catalog,
        Arc::new(icegate_storage::ObjectStoreIo::new()),
        metrics.clone(),
    )
    .with_batch(2);
    let next = Runner::new(tasks.clone(), clock.clone()).with_job(Arc::new(job));
    assert!(!next.run_next().await.unwrap(), "nothing to claim while the lease holds");
    clock.advance(Duration::from_secs(61));
    assert!(next.run_next().await.unwrap());
    let done = tasks.task(&stuck.id).await.unwrap().unwrap();
    assert_eq!((done.state, done.attempts), (TaskState::Done, 2), "{done:?}");
    let bytes: i64 = (0..7).map(|i| 10 + i).sum();
    assert_eq!((done.result.as_ref().unwrap()["files"].as_i64(), done.progress.bytes), (Some(7), bytes));
    assert!(!dir.path().join("db/t-1").exists(), "the table's directory is gone");
    assert_eq!(std::fs::read(&neighbour).unwrap(), b"neighbour", "the neighbour's file stays");
    assert!(store.deleted_tabular(&id).await.unwrap().is_none(), "a purged entry goes");
    assert_eq!(metrics.reclaimed_so_far(), (7, bytes as u64), "each file counted once, across both runs");
    // Its location is free again (no credentials were vended: no lease).
    create(store.as_ref(), &wh.id, "x", &location, "u2").await.unwrap();
}

icegate_store::on_both_backends!(
    a_kept_entry_frees_its_name_holds_its_location_and_is_undropped,
    an_entry_past_its_hold_is_not_undropped_and_the_sweep_forgets_it,
    registering_the_dropped_metadata_again_supersedes_the_entry,
    a_purge_killed_half_way_is_resumed_and_deletes_only_the_tables_files,
);
