//! What a migration keeps in the store, on SQLite and PostgreSQL: a run and its tables recorded
//! together, one live migration per source object (another run of it is refused until it ends),
//! each table's state moved by compare-and-swap (a stale step changes nothing), what a step
//! learned kept, and the run's own state and report.

use icegate_catalog::CatalogError;
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::jobs::TaskStore;
use icegate_catalog::migration::store::{Migration, MigrationTable, RunState, Step, TableState};
use icegate_catalog::store::prelude::*;
use icegate_catalog::{StorageRoot, WarehouseName};
use icegate_store::testing::TestDatabase;
use serde_json::json;

fn run(id: &str, warehouse_id: &str) -> Migration {
    Migration {
        id: id.into(),
        target_warehouse_id: warehouse_id.into(),
        source_kind: "sql".into(),
        source: json!({ "type": "sql", "uri": "sqlite:///src.db", "catalog-name": "src" }),
        selection: json!({ "namespaces": [["sales"]] }),
        dry_run: false,
        state: RunState::Planned,
        report: json!({}),
        created_at_ms: 1,
        created_by: "p".into(),
        updated_at_ms: 1,
    }
}

fn table(id: &str, migration: &str, name: &str) -> MigrationTable {
    MigrationTable {
        id: id.into(),
        migration_id: migration.into(),
        kind: "table".into(),
        source_key: format!("sql:sqlite:///src.db:src:sales.{name}"),
        source_namespace: vec!["sales".into()],
        source_name: name.into(),
        target_namespace: vec!["sales".into()],
        target_name: name.into(),
        state: TableState::Planned,
        planned_location: Some(format!("file:///w/sales/{name}/metadata/00001.metadata.json")),
        fenced_location: None,
        fence: None,
        tabular_id: None,
        handed_back: None,
        report: None,
        error: None,
        updated_at_ms: 1,
    }
}

async fn runs_tables_and_their_states(db: TestDatabase) {
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
    let tasks: &dyn TaskStore = &store;
    let first = run("m1", wh.as_str());
    let tables = [table("t1", "m1", "orders"), table("t2", "m1", "items")];
    tasks.create_migration(&write, &first, &tables).await.unwrap();
    assert_eq!(tasks.migration("m1").await.unwrap().as_ref(), Some(&first));
    assert_eq!(tasks.migration_tables("m1").await.unwrap(), tables.to_vec());

    // One live migration per source object: a second run of `orders` is refused, whole.
    let second = run("m2", wh.as_str());
    let refused = tasks.create_migration(&write, &second, &[table("t3", "m2", "orders")]).await;
    assert!(matches!(refused, Err(CatalogError::Conflict(_))), "{refused:?}");
    assert_eq!(tasks.migration("m2").await.unwrap(), None, "nothing of a refused run is kept");
    let twice = tasks.create_migration(&write, &second, &[table("t4", "m2", "a"), table("t5", "m2", "a")]).await;
    assert!(matches!(twice, Err(CatalogError::BadRequest(_))), "{twice:?}");
    let nowhere = tasks.create_migration(&write, &run("m9", "no-such-warehouse"), &[]).await;
    assert!(matches!(nowhere, Err(CatalogError::NotFound { .. })), "{nowhere:?}");

    // Steps are compare-and-swaps on the state they move from; what they learn is kept.
    let fenced = Step {
        fenced_location: Some("file:///w/sales/orders/metadata/00002.metadata.json".into()),
        fence: Some(json!({ "previous-metadata-location": null })),
        ..Step::default()
    };
    assert!(
        tasks.step_migration_table(&write, "t1", (TableState::Planned, TableState::Fenced), &fenced, 2).await.unwrap()
    );
    assert!(
        !tasks.step_migration_table(&write, "t1", (TableState::Planned, TableState::Fenced), &fenced, 3).await.unwrap(),
        "a stale step changes nothing"
    );
    let registered = Step { tabular_id: Some("tab-1".into()), ..Step::default() };
    assert!(
        tasks
            .step_migration_table(&write, "t1", (TableState::Fenced, TableState::Registered), &registered, 4)
            .await
            .unwrap()
    );
    let t1 = tasks.migration_tables("m1").await.unwrap().into_iter().find(|t| t.id == "t1").unwrap();
    assert_eq!((t1.state, t1.tabular_id.as_deref()), (TableState::Registered, Some("tab-1")));
    assert_eq!(t1.fenced_location, fenced.fenced_location, "an earlier step's finding stays");
    assert_eq!(t1.updated_at_ms, 4);

    // Ended (retired), the object may be migrated again.
    for (from, to) in [(TableState::Registered, TableState::Verified), (TableState::Verified, TableState::Retired)] {
        assert!(tasks.step_migration_table(&write, "t1", (from, to), &Step::default(), 5).await.unwrap());
    }
    tasks.create_migration(&write, &second, &[table("t3", "m2", "orders")]).await.unwrap();
    // A failed table retried while another run moves its object is refused.
    let failed = Step { error: Some("the source refused the fence".into()), ..Step::default() };
    assert!(
        tasks.step_migration_table(&write, "t3", (TableState::Planned, TableState::Failed), &failed, 6).await.unwrap()
    );
    let other = run("m3", wh.as_str());
    tasks.create_migration(&write, &other, &[table("t6", "m3", "orders")]).await.unwrap();
    let retry =
        tasks.step_migration_table(&write, "t3", (TableState::Failed, TableState::Planned), &Step::default(), 7).await;
    assert!(matches!(retry, Err(CatalogError::Conflict(_))), "{retry:?}");

    // The run's own state, with its report.
    let report = json!({ "tables": { "retired": 1 } });
    assert!(tasks.set_migration_state(&write, "m1", (RunState::Planned, RunState::Running), None, 8).await.unwrap());
    assert!(!tasks.set_migration_state(&write, "m1", (RunState::Planned, RunState::Running), None, 9).await.unwrap());
    assert!(
        tasks
            .set_migration_state(&write, "m1", (RunState::Running, RunState::Completed), Some(&report), 10)
            .await
            .unwrap()
    );
    let done = tasks.migration("m1").await.unwrap().unwrap();
    assert_eq!((done.state, done.report, done.updated_at_ms), (RunState::Completed, report, 10));
    let listed: Vec<String> =
        tasks.migrations(Some(wh.as_str()), None, 10).await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(listed, ["m1", "m2", "m3"]);
    let page: Vec<String> = tasks.migrations(None, Some("m1"), 1).await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(page, ["m2"]);
}

icegate_store::on_both_backends!(runs_tables_and_their_states);
