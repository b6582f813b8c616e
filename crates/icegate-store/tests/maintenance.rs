//! What maintenance reads and keeps in the store, on SQLite and PostgreSQL: the tables in a
//! scope (a namespace and those below it, never a namespace that merely shares its name's
//! prefix; views never), since when a table owns each of its locations, and the orphan
//! quarantine (idempotent quarantining, due filters, restore that sticks, forgetting, paging,
//! and the rows of tables the catalog no longer has).

use icegate_catalog::clock::{Clock, ManualClock};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::jobs::{MaintainedTable, QuarantineFilter, QuarantineState, QuarantinedFile, TaskStore};
use icegate_catalog::store::prelude::*;
use icegate_catalog::store::{DropOptions, NewTabular, TabularKind};
use icegate_catalog::{NamespaceIdent, Properties, StorageRoot, WarehouseName};
use icegate_store::testing::TestDatabase;

fn ns(levels: &[&str]) -> NamespaceIdent {
    NamespaceIdent::from_levels(levels.iter().copied()).unwrap()
}

async fn make(
    store: &icegate_store::SqlStore,
    wh: &icegate_catalog::WarehouseId,
    namespace: &[&str],
    name: &str,
    kind: TabularKind,
) -> String {
    let location = format!("file:///w/{}/{name}", namespace.join("/"));
    store
        .create_tabular(
            &WriteContext::by_principal("p", None),
            &NewTabular {
                warehouse_id: wh,
                namespace: &ns(namespace),
                name,
                kind,
                location: &location,
                extra_locations: &[format!("{location}-data")],
                metadata_location: &format!("{location}/metadata/00000-x.metadata.json"),
                metadata: "{\"table-uuid\": \"u\"}",
                metadata_gzip: None,
            },
        )
        .await
        .unwrap()
        .as_str()
        .to_owned()
}

fn file(table: &str, location: &str, delete_after: i64) -> QuarantinedFile {
    QuarantinedFile {
        tabular_id: table.to_owned(),
        location: location.to_owned(),
        size: 7,
        modified_ms: 1,
        quarantined_at_ms: 2,
        delete_after_ms: delete_after,
        task_id: "t".into(),
        state: QuarantineState::Quarantined,
        restored_by: None,
    }
}

async fn scopes_ownership_and_the_quarantine(db: TestDatabase) {
    let clock = ManualClock::now();
    let store = db.store.clone().with_clock(clock.clone());
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
    for namespace in [&["db"][..], &["db", "inner"], &["db2"]] {
        store.create_namespace(&write, &wh, &ns(namespace), &Properties::new()).await.unwrap();
    }
    let a = make(&store, &wh, &["db"], "a", TabularKind::Table).await;
    let b = make(&store, &wh, &["db", "inner"], "b", TabularKind::Table).await;
    let c = make(&store, &wh, &["db2"], "c", TabularKind::Table).await;
    make(&store, &wh, &["db"], "v", TabularKind::View).await;
    let tasks: &dyn TaskStore = &store;

    // Scopes: a namespace and those below it, never `db2`; views never; paged by id.
    let ids = |tables: Vec<MaintainedTable>| tables.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let mut all = vec![a.clone(), b.clone(), c.clone()];
    all.sort();
    assert_eq!(ids(tasks.maintained_tables(wh.as_str(), None, None, 10).await.unwrap()), all);
    let mut in_db = vec![a.clone(), b.clone()];
    in_db.sort();
    assert_eq!(ids(tasks.maintained_tables(wh.as_str(), Some(&ns(&["db"])), None, 10).await.unwrap()), in_db);
    assert_eq!(
        ids(tasks.maintained_tables(wh.as_str(), Some(&ns(&["db", "inner"])), None, 10).await.unwrap()),
        std::slice::from_ref(&b)
    );
    let first = tasks.maintained_tables(wh.as_str(), None, None, 2).await.unwrap();
    let rest = tasks.maintained_tables(wh.as_str(), None, Some(&first[1].id), 2).await.unwrap();
    assert_eq!(ids(first).into_iter().chain(ids(rest)).collect::<Vec<_>>(), all);
    let table = tasks.maintained_table(&a).await.unwrap().unwrap();
    assert_eq!((table.namespace.clone(), table.name.as_str()), (ns(&["db"]), "a"));

    // Ownership: the base location from the table's creation, the other from its recording.
    let owned = tasks.owned_since(&a).await.unwrap();
    assert_eq!(owned.len(), 2, "{owned:?}");
    assert!(owned.iter().all(|(_, at)| *at == table.created_at_ms), "{owned:?}");

    // The quarantine: idempotent, filtered by due time, restored for good, forgotten.
    let now = clock.now_ms();
    let files = [file(&a, "file:///w/db/a/data/x", now), file(&a, "file:///w/db/a/data/y", now + 1000)];
    assert_eq!(tasks.quarantine(&write, &table, &files).await.unwrap(), 2);
    assert_eq!(tasks.quarantine(&write, &table, &files).await.unwrap(), 0, "quarantined once");
    let filter = |due: Option<i64>| QuarantineFilter {
        warehouse_id: wh.as_str().to_owned(),
        tabular_id: Some(a.clone()),
        due_by_ms: due,
        limit: 10,
        ..QuarantineFilter::default()
    };
    assert_eq!(tasks.quarantined(&filter(Some(now))).await.unwrap().len(), 1);
    assert_eq!(tasks.quarantined(&filter(None)).await.unwrap(), files.to_vec());
    let page = QuarantineFilter { limit: 1, ..filter(None) };
    let first = tasks.quarantined(&page).await.unwrap();
    let after = Some((first[0].tabular_id.clone(), first[0].location.clone()));
    assert_eq!(tasks.quarantined(&QuarantineFilter { after, ..page }).await.unwrap(), files[1..].to_vec());
    let y = ["file:///w/db/a/data/y".to_owned()];
    assert_eq!(tasks.restore_quarantined(&write, &table, Some(&y)).await.unwrap(), 1);
    assert_eq!(tasks.quarantine(&write, &table, &files[1..]).await.unwrap(), 0, "restored stays restored");
    assert_eq!(
        tasks.forget_quarantined(&write, &table, &y, None).await.unwrap(),
        0,
        "a restored file is not forgotten"
    );
    let restored =
        tasks.quarantined(&QuarantineFilter { state: Some(QuarantineState::Restored), ..filter(None) }).await.unwrap();
    assert_eq!((restored.len(), restored[0].restored_by.as_deref()), (1, Some("p")));
    let x = ["file:///w/db/a/data/x".to_owned()];
    assert_eq!(tasks.forget_quarantined(&write, &table, &x, Some(7)).await.unwrap(), 1);
    assert_eq!(tasks.quarantined(&filter(None)).await.unwrap().len(), 1);

    // A table gone for good takes its quarantine with it (at the sweep); a live one keeps it.
    let c_table = tasks.maintained_table(&c).await.unwrap().unwrap();
    tasks.quarantine(&write, &c_table, &[file(&c, "file:///w/db2/c/z", now)]).await.unwrap();
    store
        .drop_tabular(&write, &wh, (&ns(&["db2"]), "c"), TabularKind::Table, DropOptions::final_drop(0), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tasks.forget_quarantine_of_gone(100).await.unwrap(), 1);
    assert_eq!(tasks.quarantined(&filter(None)).await.unwrap().len(), 1, "a's restored file stays");
}

icegate_store::on_both_backends!(scopes_ownership_and_the_quarantine);
