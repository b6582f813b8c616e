//! Tables and views in the store: locations that never overlap, compare-and-swap commits,
//! compressed documents, renames and drops, and the heads kept in memory.

use super::*;

pub(crate) async fn table(
    store: &dyn CatalogStore,
    wh: &icegate_catalog::WarehouseId,
    name: &str,
    location: &str,
) -> Result<icegate_catalog::TabularId, CatalogError> {
    table_with(store, wh, name, location, &[]).await
}

pub(crate) async fn table_with(
    store: &dyn CatalogStore,
    wh: &icegate_catalog::WarehouseId,
    name: &str,
    location: &str,
    extra_locations: &[String],
) -> Result<icegate_catalog::TabularId, CatalogError> {
    store
        .create_tabular(
            &WriteContext::NONE,
            &NewTabular {
                warehouse_id: wh,
                namespace: &ns("db"),
                name,
                kind: TabularKind::Table,
                location,
                extra_locations,
                metadata_location: &format!("{location}/metadata/00000-x.metadata.json"),
                metadata: "{}",
                metadata_gzip: None,
            },
        )
        .await
}

/// A swap that keeps the table at `file:///w/db/<table>`.
pub(crate) fn swap(
    id: &str,
    wh: &icegate_catalog::WarehouseId,
    table: &str,
    expected: &str,
    new: &str,
) -> MetadataSwap {
    MetadataSwap {
        id: id.into(),
        warehouse_id: wh.clone(),
        namespace: ns("db"),
        name: table.to_owned(),
        expected_metadata_location: expected.to_owned(),
        metadata_location: new.to_owned(),
        metadata: format!("{{\"v\": \"{new}\"}}").into(),
        metadata_gzip: None,
        location: format!("file:///w/db/{table}"),
        extra_locations: Vec::new(),
        locations_changed: false,
    }
}

pub(crate) async fn extra_locations_take_part_in_the_overlap_check(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let data = vec!["file:///w/shared/a-data".to_owned()];
    let a = table_with(store, &wh, "a", "file:///w/db/a", &data).await.unwrap();
    // Another table may not put its base or its data path into a's data path, or around it.
    for (name, base, extra) in [
        ("b1", "file:///w/shared/a-data/b", vec![]),
        ("b2", "file:///w/db/b2", vec!["file:///w/shared/a-data/x".to_owned()]),
        ("b3", "file:///w/db/b3", vec!["file:///w/shared".to_owned()]),
    ] {
        let err = table_with(store, &wh, name, base, &extra).await.unwrap_err();
        assert!(matches!(err, CatalogError::BadRequest(_)), "{name}: {err:?}");
    }
    let b = table_with(store, &wh, "b", "file:///w/db/b", &["file:///w/shared/b-data".to_owned()]).await.unwrap();
    // A commit that moves b's data path into a's is refused and changes nothing.
    let v0 = "file:///w/db/b/metadata/00000-x.metadata.json";
    let mut moving = swap(&b, &wh, "b", v0, "v1");
    moving.extra_locations = vec!["file:///w/shared/a-data/stolen".to_owned()];
    moving.locations_changed = true;
    let err = store.swap_metadata(&WriteContext::NONE, &[moving]).await.unwrap_err();
    assert!(matches!(err, CatalogError::BadRequest(_)), "{err:?}");
    // Moving its data path and its base elsewhere does not free the old ones: b's current
    // snapshot may still have files there, so they stay b's (checked, purged, vended) while b
    // exists.
    let mut moving = swap(&b, &wh, "b", v0, "v1");
    moving.extra_locations = vec!["file:///w/shared/b-data-2".to_owned()];
    moving.location = "file:///w/db/b-moved".to_owned();
    moving.locations_changed = true;
    assert_eq!(store.swap_metadata(&WriteContext::NONE, &[moving]).await.unwrap(), SwapOutcome::Applied);
    for (name, base, extra) in
        [("c1", "file:///w/db/c1", vec!["file:///w/shared/b-data".to_owned()]), ("c2", "file:///w/db/b", vec![])]
    {
        let err = table_with(store, &wh, name, base, &extra).await.unwrap_err();
        assert!(matches!(err, CatalogError::BadRequest(_)), "{name}: {err:?}");
    }
    let recorded: BTreeSet<String> = store.recorded_locations(&b).await.unwrap().into_iter().collect();
    let expected = ["file:///w/db/b", "file:///w/db/b-moved", "file:///w/shared/b-data", "file:///w/shared/b-data-2"];
    assert_eq!(recorded, expected.iter().map(|l| l.to_string()).collect());
    let dropped = store
        .drop_tabular(&WriteContext::NONE, &wh, (&ns("db"), "b"), TabularKind::Table, DropOptions::final_drop(0), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dropped.extra_locations.len(), 3, "{dropped:?}");
    table_with(store, &wh, "c", "file:///w/db/c", &["file:///w/shared/b-data".to_owned()]).await.unwrap();
    // Dropping a table releases its extra locations, and says which they were (for a purge).
    let dropped = store
        .drop_tabular(&WriteContext::NONE, &wh, (&ns("db"), "a"), TabularKind::Table, DropOptions::final_drop(0), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dropped.extra_locations, ["file:///w/shared/a-data"]);
    let _ = a;
    table_with(store, &wh, "d", "file:///w/shared/a-data", &[]).await.unwrap();
}

pub(crate) async fn a_storage_profile_update_bumps_the_version(db: TestDatabase) {
    let store = &db.store;
    let name = WarehouseName::parse("lake").unwrap();
    let created = store
        .create_warehouse(
            &icegate_catalog::idempotency::WriteContext::NONE,
            &name,
            &StorageRoot::parse("file:///tmp/lake").unwrap(),
            &StorageProfile::File,
        )
        .await
        .unwrap();
    assert_eq!(created.profile_version, 1);
    let updated = store
        .update_storage_profile(&icegate_catalog::idempotency::WriteContext::NONE, &name, &StorageProfile::File)
        .await
        .unwrap();
    assert_eq!(updated.profile_version, 2);
    assert_eq!(store.warehouse_by_id(&created.id).await.unwrap().unwrap(), updated);
    let missing = WarehouseName::parse("nope").unwrap();
    assert!(matches!(
        store
            .update_storage_profile(&icegate_catalog::idempotency::WriteContext::NONE, &missing, &StorageProfile::File)
            .await,
        Err(CatalogError::NotFound { .. })
    ));
}

pub(crate) async fn table_locations_may_not_overlap(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    table(store, &wh, "a", "file:///w/db/a").await.unwrap();
    for (name, location) in
        [("same", "file:///w/db/a"), ("inside", "file:///w/db/a/deeper"), ("around", "file:///w/db")]
    {
        let err = table(store, &wh, name, location).await.unwrap_err();
        assert!(matches!(err, CatalogError::BadRequest(_)), "{name}: {err:?}");
    }
    // Prefix-sharing siblings are separate directories.
    table(store, &wh, "a2", "file:///w/db/a2").await.unwrap();
    table(store, &wh, "a_b", "file:///w/db/a_b").await.unwrap();
    let err = table(store, &wh, "a", "file:///w/db/elsewhere").await.unwrap_err();
    assert!(matches!(err, CatalogError::AlreadyExists(_)), "{err:?}");
    let page = store.list_tabulars(&wh, &ns("db"), TabularKind::Table, &ALL, None).await.unwrap();
    assert_eq!(page.items, ["a", "a2", "a_b"]);
}

pub(crate) async fn a_swap_applies_only_against_the_expected_location(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let id = table(store, &wh, "t", "file:///w/db/t").await.unwrap();
    let v0 = "file:///w/db/t/metadata/00000-x.metadata.json";
    assert_eq!(
        store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", v0, "v1")]).await.unwrap(),
        SwapOutcome::Applied
    );
    // A stale expectation loses and changes nothing.
    assert_eq!(
        store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", v0, "v2")]).await.unwrap(),
        SwapOutcome::Conflict(0)
    );
    let row = store.load_tabular(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
    assert_eq!(row.metadata_location, "v1");
    assert_eq!(row.metadata, "{\"v\": \"v1\"}");
    assert!(store.load_tabular(&wh, &ns("db"), "t", TabularKind::View).await.unwrap().is_none());
    // Renamed meanwhile: a swap addressed to the old name conflicts, to the new one applies.
    store
        .rename_tabular(&WriteContext::NONE, &wh, TabularKind::Table, (&ns("db"), "t"), (&ns("db"), "u"), None)
        .await
        .unwrap();
    assert_eq!(
        store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", "v1", "v2")]).await.unwrap(),
        SwapOutcome::Conflict(0)
    );
    assert_eq!(
        store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "u", "v1", "v2")]).await.unwrap(),
        SwapOutcome::Applied
    );
}

pub(crate) async fn a_document_stored_compressed_reads_back_as_its_text(db: TestDatabase) {
    use std::io::Write;
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let id = table(store, &wh, "t", "file:///w/db/t").await.unwrap();
    let v0 = "file:///w/db/t/metadata/00000-x.metadata.json";
    let text = format!(r#"{{"table-uuid": "u1", "snapshots": [{}]}}"#, "{\"snapshot-id\": 1},".repeat(2000) + "{}");
    // Two gzip members, as a commit writes them.
    let mut gzip = Vec::new();
    for part in [&text[..100], &text[100..]] {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(part.as_bytes()).unwrap();
        gzip.extend(encoder.finish().unwrap());
    }
    let mut compressed = swap(&id, &wh, "t", v0, "v1");
    compressed.metadata = text.as_str().into();
    compressed.metadata_gzip = Some(gzip.clone().into());
    assert_eq!(store.swap_metadata(&WriteContext::NONE, &[compressed]).await.unwrap(), SwapOutcome::Applied);
    let row = store.load_tabular(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
    assert_eq!(row.metadata, text, "the stored members inflate to the document");
    assert_eq!(row.gzip.as_deref(), Some(&gzip[..]), "the gzip form comes back as stored");
    // A later plain document replaces the compressed one.
    assert_eq!(
        store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", "v1", "v2")]).await.unwrap(),
        SwapOutcome::Applied
    );
    let row = store.load_tabular(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
    assert_eq!((row.metadata.as_str(), row.gzip), ("{\"v\": \"v2\"}", None));
    // A drop answers with the document, whichever way it was stored.
    let mut again = swap(&id, &wh, "t", "v2", "v3");
    again.metadata = text.as_str().into();
    again.metadata_gzip = Some(gzip.into());
    store.swap_metadata(&WriteContext::NONE, &[again]).await.unwrap();
    let dropped = store
        .drop_tabular(&WriteContext::NONE, &wh, (&ns("db"), "t"), TabularKind::Table, DropOptions::final_drop(0), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dropped.tabular.metadata, text);
}

pub(crate) async fn concurrent_swaps_apply_once_each(db: TestDatabase) {
    let store = Arc::new(db.store.clone());
    let wh = warehouse(&*store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let mut ids = Vec::new();
    for t in 0..8 {
        ids.push(table(&*store, &wh, &format!("t{t}"), &format!("file:///w/db/t{t}")).await.unwrap());
    }
    // Eight tables, each moved along five versions by its own writer, all at once (on SQLite
    // they share transactions), and six writers racing for the same version of t0's successor.
    let mut tasks = tokio::task::JoinSet::new();
    for (t, id) in ids.iter().enumerate().skip(1) {
        let (store, id, wh) = (store.clone(), id.clone(), wh.clone());
        tasks.spawn(async move {
            let mut expected = format!("file:///w/db/t{t}/metadata/00000-x.metadata.json");
            for v in 1..=5 {
                let next = format!("t{t}-v{v}");
                let moved = swap(&id, &wh, &format!("t{t}"), &expected, &next);
                let outcome = store.swap_metadata(&WriteContext::NONE, &[moved]).await.unwrap();
                assert_eq!(outcome, SwapOutcome::Applied, "t{t} v{v}");
                expected = next;
            }
            0
        });
    }
    for racer in 0..6 {
        let (store, id, wh) = (store.clone(), ids[0].clone(), wh.clone());
        tasks.spawn(async move {
            let expected = "file:///w/db/t0/metadata/00000-x.metadata.json";
            let moved = swap(&id, &wh, "t0", expected, &format!("racer-{racer}"));
            let outcome = store.swap_metadata(&WriteContext::NONE, &[moved]).await.unwrap();
            usize::from(outcome == SwapOutcome::Applied)
        });
    }
    let winners: usize = tasks.join_all().await.into_iter().sum();
    assert_eq!(winners, 1, "exactly one racer moves t0");
    for t in 1..8 {
        let row = store.load_tabular(&wh, &ns("db"), &format!("t{t}"), TabularKind::Table).await.unwrap().unwrap();
        assert_eq!(row.metadata_location, format!("t{t}-v5"));
    }
    let t0 = store.load_tabular(&wh, &ns("db"), "t0", TabularKind::Table).await.unwrap().unwrap();
    assert!(t0.metadata_location.starts_with("racer-"), "{}", t0.metadata_location);
    // Every group ran on the committer's own connection, none through the pool, and none was
    // aborted.
    let (own, pooled) = store.group_commits().unwrap();
    assert!(own >= 1 && pooled == 0, "own {own}, pooled {pooled}");
    assert_eq!(store.swaps_run_alone(), 0);
}

pub(crate) async fn a_multi_table_swap_is_all_or_nothing(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let a = table(store, &wh, "a", "file:///w/db/a").await.unwrap();
    let b = table(store, &wh, "b", "file:///w/db/b").await.unwrap();
    let a0 = "file:///w/db/a/metadata/00000-x.metadata.json";
    let b0 = "file:///w/db/b/metadata/00000-x.metadata.json";
    let outcome = store
        .swap_metadata(&WriteContext::NONE, &[swap(&a, &wh, "a", a0, "a1"), swap(&b, &wh, "b", "stale", "b1")])
        .await
        .unwrap();
    assert_eq!(outcome, SwapOutcome::Conflict(1));
    let row = store.load_tabular(&wh, &ns("db"), "a", TabularKind::Table).await.unwrap().unwrap();
    assert_eq!(row.metadata_location, a0, "a was rolled back with b");
    let outcome = store
        .swap_metadata(&WriteContext::NONE, &[swap(&a, &wh, "a", a0, "a1"), swap(&b, &wh, "b", b0, "b1")])
        .await
        .unwrap();
    assert_eq!(outcome, SwapOutcome::Applied);
}

pub(crate) async fn tabulars_are_renamed_and_dropped(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    store.create_namespace(&WriteContext::NONE, &wh, &ns("other"), &Properties::new()).await.unwrap();
    table(store, &wh, "t", "file:///w/db/t").await.unwrap();
    table(store, &wh, "u", "file:///w/db/u").await.unwrap();
    let err = store
        .rename_tabular(&WriteContext::NONE, &wh, TabularKind::Table, (&ns("db"), "t"), (&ns("db"), "u"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogError::AlreadyExists(_)), "{err:?}");
    store
        .rename_tabular(&WriteContext::NONE, &wh, TabularKind::Table, (&ns("db"), "t"), (&ns("other"), "moved"), None)
        .await
        .unwrap();
    assert!(store.load_tabular(&wh, &ns("other"), "moved", TabularKind::Table).await.unwrap().is_some());
    let err = store.drop_namespace(&WriteContext::NONE, &wh, &ns("other")).await.unwrap_err();
    assert!(matches!(err, CatalogError::NamespaceNotEmpty(_)), "{err:?}");
    let dropped = store
        .drop_tabular(
            &WriteContext::NONE,
            &wh,
            (&ns("other"), "moved"),
            TabularKind::Table,
            DropOptions::final_drop(0),
            None,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dropped.tabular.location, "file:///w/db/t");
    assert!(dropped.extra_locations.is_empty());
    assert!(
        store
            .drop_tabular(
                &WriteContext::NONE,
                &wh,
                (&ns("other"), "moved"),
                TabularKind::Table,
                DropOptions::final_drop(0),
                None
            )
            .await
            .unwrap()
            .is_none()
    );
    store.drop_namespace(&WriteContext::NONE, &wh, &ns("other")).await.unwrap();
}

/// Heads (kept in memory on SQLite) follow every write: swaps, renames, drops, re-creates.
pub(crate) async fn heads_follow_every_write(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let head = |name: &'static str| {
        let wh = wh.clone();
        async move { store.load_tabular_head(&wh, &ns("db"), name, TabularKind::Table).await.unwrap() }
    };
    let id = table(store, &wh, "t", "file:///w/db/t").await.unwrap();
    let v0 = "file:///w/db/t/metadata/00000-x.metadata.json";
    for _ in 0..2 {
        assert_eq!(head("t").await.unwrap().metadata_location, v0);
    }
    store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", v0, "v1")]).await.unwrap();
    assert_eq!(head("t").await.unwrap().metadata_location, "v1");
    assert_eq!(
        store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", v0, "v2")]).await.unwrap(),
        SwapOutcome::Conflict(0)
    );
    assert_eq!(head("t").await.unwrap().metadata_location, "v1");
    store
        .rename_tabular(&WriteContext::NONE, &wh, TabularKind::Table, (&ns("db"), "t"), (&ns("db"), "u"), None)
        .await
        .unwrap();
    assert!(head("t").await.is_none());
    assert_eq!(head("u").await.unwrap().id, id);
    store
        .drop_tabular(&WriteContext::NONE, &wh, (&ns("db"), "u"), TabularKind::Table, DropOptions::final_drop(0), None)
        .await
        .unwrap()
        .unwrap();
    assert!(head("u").await.is_none());
    let again = table(store, &wh, "u", "file:///w/db/u2").await.unwrap();
    assert_eq!(head("u").await.unwrap().id, again, "a re-created table is the new one");
}

/// On SQLite, loads read their row in place (not through sqlx's connection thread) and see
/// every committed write at once.
pub(crate) async fn sqlite_loads_read_in_place(db: TestDatabase) {
    let store = &db.store;
    if store.backend_kind() != icegate_store::Backend::Sqlite {
        assert_eq!(store.in_place_reads(), None, "PostgreSQL reads go through the pool");
        return;
    }
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let id = table(store, &wh, "t", "file:///w/db/t").await.unwrap();
    let before = store.in_place_reads().expect("a database file is read in place");
    let v0 = "file:///w/db/t/metadata/00000-x.metadata.json";
    let row = store.load_tabular(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
    assert_eq!((row.id.as_str(), row.metadata_location.as_str()), (id.as_str(), v0));
    store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", v0, "v1")]).await.unwrap();
    let row = store.load_tabular(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
    assert_eq!(row.metadata_location, "v1");
    assert!(store.load_tabular(&wh, &ns("db"), "missing", TabularKind::Table).await.unwrap().is_none());
    assert!(store.load_tabular(&wh, &ns("db"), "t", TabularKind::View).await.unwrap().is_none());
    let after = store.in_place_reads().unwrap();
    assert_eq!((after.0 - before.0, after.1 - before.1), (4, 0), "four reads, all in place");
}

/// Writers that take their expected location from the head, while readers load heads all the
/// time: every swap lands exactly once, and the head ends where the row is.
pub(crate) async fn heads_stay_current_under_concurrent_swaps(db: TestDatabase) {
    let store = db.store.clone();
    let wh = warehouse(&store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let id = table(&store, &wh, "t", "file:///w/db/t").await.unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (store, wh, done) = (store.clone(), wh.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                store.load_tabular_head(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
                // A hit answers without awaiting anything: let the writers run.
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut writers = Vec::new();
    for writer in 0..4 {
        let (store, wh, id) = (store.clone(), wh.clone(), id.clone());
        writers.push(tokio::spawn(async move {
            let mut attempts = 0;
            for n in 0..25 {
                loop {
                    attempts += 1;
                    assert!(attempts < 5_000, "writer {writer} keeps losing: a stale head?");
                    let head = store.load_tabular_head(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
                    let next = format!("w{writer}-{n}");
                    let outcome = store
                        .swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", &head.metadata_location, &next)])
                        .await
                        .unwrap();
                    if outcome == SwapOutcome::Applied {
                        break;
                    }
                }
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.await.unwrap();
    }
    let row = store.load_tabular(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
    let head = store.load_tabular_head(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
    assert_eq!(head.metadata_location, row.metadata_location);
    assert!(row.metadata_location.ends_with("-24"), "the last swap is the last of a writer: {}", row.metadata_location);
}
