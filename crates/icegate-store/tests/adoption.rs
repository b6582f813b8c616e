//! What adoption keeps in the store, on SQLite and PostgreSQL: source locations (registered
//! once, never over a table's or view's location, and no table or view placed over one
//! afterwards, both ways), adoptions, the files each run added (upserted, forgotten when
//! removed from the table), the runs' reports newest first, and a source location that cannot
//! be removed while an adoption reads from it.

use icegate_catalog::CatalogError;
use icegate_catalog::adoption::store::{AdoptedFile, Adoption, AdoptionMode, AdoptionRun};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::jobs::TaskStore;
use icegate_catalog::store::prelude::*;
use icegate_catalog::store::{DropOptions, NewTabular, TabularKind};
use icegate_catalog::{NamespaceIdent, Properties, StorageRoot, WarehouseName};
use icegate_store::testing::TestDatabase;
use serde_json::json;

fn ns(levels: &[&str]) -> NamespaceIdent {
    NamespaceIdent::from_levels(levels.iter().copied()).unwrap()
}

fn create<'a>(
    wh: &'a icegate_catalog::WarehouseId,
    namespace: &'a NamespaceIdent,
    name: &'a str,
    location: &'a str,
    extra: &'a [String],
    metadata_location: &'a str,
) -> NewTabular<'a> {
    NewTabular {
        warehouse_id: wh,
        namespace,
        name,
        kind: TabularKind::Table,
        location,
        extra_locations: extra,
        metadata_location,
        metadata: "{\"table-uuid\": \"u\"}",
        metadata_gzip: None,
    }
}

fn file(location: &str, size: u64, snapshot: i64) -> AdoptedFile {
    AdoptedFile { location: location.into(), size, etag: String::new(), modified_ms: 5, snapshot_id: snapshot }
}

async fn sources_adoptions_and_runs(db: TestDatabase) {
    let store = db.store.clone();
    let write = WriteContext::by_principal("p", None);
    let wh = store
        .create_warehouse(
            &write,
            &WarehouseName::parse("w").unwrap(),
            &StorageRoot::parse("file:///w").unwrap(),
            &icegate_catalog::storage::StorageProfile::File,
        )
        .await
        .unwrap()
        .id;
    let db_ns = ns(&["db"]);
    store.create_namespace(&write, &wh, &db_ns, &Properties::new()).await.unwrap();
    let table = store
        .create_tabular(&write, &create(&wh, &db_ns, "t", "file:///w/db/t", &[], "file:///w/db/t/metadata/0.json"))
        .await
        .unwrap();
    let tasks: &dyn TaskStore = &store;

    // A source over, inside or around a table's location is refused; a sibling is not.
    for over in ["file:///w/db/t", "file:///w/db/t/data", "file:///w/db", "file:///w"] {
        let refused = tasks.add_source_location(&write, wh.as_str(), over, 1).await;
        assert!(matches!(refused, Err(CatalogError::BadRequest(_))), "{over}: {refused:?}");
    }
    let added = tasks.add_source_location(&write, wh.as_str(), "file:///w/landing", 1).await.unwrap();
    assert_eq!((added.location.as_str(), added.created_by.as_str()), ("file:///w/landing", "p"));
    let again = tasks.add_source_location(&write, wh.as_str(), "file:///w/landing", 2).await;
    assert!(matches!(again, Err(CatalogError::AlreadyExists(_))), "{again:?}");
    tasks.add_source_location(&write, wh.as_str(), "file:///lake/events", 3).await.unwrap();
    let listed: Vec<String> =
        tasks.source_locations(wh.as_str()).await.unwrap().into_iter().map(|s| s.location).collect();
    assert_eq!(listed, ["file:///lake/events", "file:///w/landing"]);

    // No table is placed over, inside or around a source; nor does one point its writes there.
    for (name, location) in [("a", "file:///w/landing"), ("b", "file:///w/landing/x"), ("c", "file:///lake")] {
        let meta = format!("{location}/metadata/0.json");
        let refused = store.create_tabular(&write, &create(&wh, &db_ns, name, location, &[], &meta)).await;
        assert!(matches!(refused, Err(CatalogError::BadRequest(_))), "{location}: {refused:?}");
    }
    let extra = ["file:///w/landing/data".to_owned()];
    let refused = store
        .create_tabular(&write, &create(&wh, &db_ns, "d", "file:///w/db/d", &extra, "file:///w/db/d/metadata/0.json"))
        .await;
    assert!(matches!(refused, Err(CatalogError::BadRequest(_))), "{refused:?}");
    // A sibling sharing the name's prefix is not inside it.
    store
        .create_tabular(
            &write,
            &create(&wh, &db_ns, "e", "file:///w/landing-2", &[], "file:///w/landing-2/metadata/0.json"),
        )
        .await
        .unwrap();

    // An adoption, its files and runs.
    let adoption = Adoption {
        id: "01a24000-0000-7000-8000-000000000001".into(),
        warehouse_id: wh.as_str().into(),
        tabular_id: table.as_str().into(),
        namespace: db_ns.clone(),
        name: "t".into(),
        source: "file:///lake/events/2026".into(),
        settings: json!({ "settings": { "partitioning": { "type": "hive" } }, "root": "file:///lake/events" }),
        mode: AdoptionMode::Continuous,
        created_at_ms: 10,
        created_by: "p".into(),
    };
    tasks.create_adoption(&write, &adoption).await.unwrap();
    assert_eq!(tasks.adoption(&adoption.id).await.unwrap().as_ref(), Some(&adoption));
    assert_eq!(tasks.adoptions(wh.as_str(), None, 10).await.unwrap(), std::slice::from_ref(&adoption));
    assert!(tasks.adoptions(wh.as_str(), Some(&adoption.id), 10).await.unwrap().is_empty());
    let run = |id: &str, at: i64, snapshot: Option<i64>| AdoptionRun {
        id: id.into(),
        adoption_id: adoption.id.clone(),
        started_at_ms: at,
        finished_at_ms: at + 1,
        snapshot_id: snapshot,
        report: json!({ "files-added": at }),
    };
    let (a, b, c) = ("file:///lake/events/2026/a", "file:///lake/events/2026/b", "file:///lake/events/2026/c");
    tasks
        .record_adoption_run(&write, &adoption, &run("r1", 100, Some(1)), &[file(a, 1, 1), file(b, 2, 1)], &[])
        .await
        .unwrap();
    // A later run: a file re-recorded (upserted), one added, one removed from the table.
    tasks
        .record_adoption_run(&write, &adoption, &run("r2", 200, Some(2)), &[file(b, 3, 2), file(c, 4, 2)], &[a.into()])
        .await
        .unwrap();
    assert_eq!(tasks.adopted_files(&adoption.id).await.unwrap(), [file(b, 3, 2), file(c, 4, 2)]);
    let runs = tasks.adoption_runs(&adoption.id, 10).await.unwrap();
    assert_eq!(runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["r2", "r1"]);
    assert_eq!(runs[1].report, json!({ "files-added": 100 }));
    assert_eq!(tasks.adoption_runs(&adoption.id, 1).await.unwrap().len(), 1);

    // A pending adoption (its first run not yet committed) holds its source too; recording its
    // first run names its table; a failed one is forgotten, a made one never.
    let pending = Adoption {
        id: "01a24000-0000-7000-8000-000000000002".into(),
        tabular_id: String::new(),
        source: "file:///w/landing/feed".into(),
        ..adoption.clone()
    };
    tasks.create_adoption(&write, &pending).await.unwrap();
    let held = tasks.remove_source_location(&write, wh.as_str(), "file:///w/landing").await;
    assert!(matches!(held, Err(CatalogError::Conflict(_))), "{held:?}");
    tasks.forget_pending_adoption(&write, &pending.id).await.unwrap();
    assert_eq!(tasks.adoption(&pending.id).await.unwrap(), None);
    tasks.create_adoption(&write, &pending).await.unwrap();
    let made = Adoption { tabular_id: table.as_str().into(), ..pending.clone() };
    tasks.record_adoption_run(&write, &made, &run("r3", 300, Some(3)), &[], &[]).await.unwrap();
    tasks.forget_pending_adoption(&write, &pending.id).await.unwrap();
    assert_eq!(tasks.adoption(&pending.id).await.unwrap().unwrap().tabular_id, table.as_str());
    let sources = tasks.adoption_sources(table.as_str()).await.unwrap();
    assert_eq!(sources, ["file:///lake/events/2026", "file:///w/landing/feed"]);

    // The source location an adoption reads from stays; an unused one goes.
    let in_use = tasks.remove_source_location(&write, wh.as_str(), "file:///lake/events").await;
    assert!(matches!(in_use, Err(CatalogError::Conflict(ref m)) if m.contains(&adoption.id)), "{in_use:?}");
    tasks.add_source_location(&write, wh.as_str(), "file:///w/spare", 4).await.unwrap();
    assert!(tasks.remove_source_location(&write, wh.as_str(), "file:///w/spare").await.unwrap());
    assert!(!tasks.remove_source_location(&write, wh.as_str(), "file:///w/spare").await.unwrap());
    // Once the adopted table is dropped for good, its source location can go.
    store
        .drop_tabular(&write, &wh, (&db_ns, "t"), TabularKind::Table, DropOptions::final_drop(0), None)
        .await
        .unwrap()
        .unwrap();
    assert!(tasks.remove_source_location(&write, wh.as_str(), "file:///lake/events").await.unwrap());
    // Gone, it no longer keeps tables out.
    store
        .create_tabular(&write, &create(&wh, &db_ns, "f", "file:///w/spare", &[], "file:///w/spare/metadata/0.json"))
        .await
        .unwrap();
}

icegate_store::on_both_backends!(sources_adoptions_and_runs);
