//! One store test suite, run against SQLite and PostgreSQL: each test body below is
//! instantiated once per backend by `store_tests!`, on a database of its own.

use icegate_catalog::store::prelude::*;
use std::collections::BTreeSet;
use std::sync::Arc;

use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::storage::StorageProfile;
use icegate_catalog::store::{
    DropOptions, MetadataSwap, NewTabular, PageRequest, PropertiesChange, SwapOutcome, TabularKind,
};
use icegate_catalog::{CatalogError, CatalogStore, NamespaceIdent, ObjectKind, Properties, StorageRoot, WarehouseName};
use icegate_store::testing::{TestBackend, TestDatabase};

fn ns(path: &str) -> NamespaceIdent {
    NamespaceIdent::from_levels(path.split('.')).unwrap()
}

fn props(pairs: &[(&str, &str)]) -> Properties {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

async fn warehouse(store: &dyn CatalogStore, name: &str) -> icegate_catalog::WarehouseId {
    store
        .create_warehouse(
            &icegate_catalog::idempotency::WriteContext::NONE,
            &WarehouseName::parse(name).unwrap(),
            &StorageRoot::parse(&format!("file:///tmp/{name}")).unwrap(),
            &StorageProfile::File,
        )
        .await
        .unwrap()
        .id
}

const ALL: PageRequest = PageRequest { after: None, limit: None };

async fn warehouse_names_are_unique(db: TestDatabase) {
    let store = &db.store;
    let name = WarehouseName::parse("lake").unwrap();
    let root = StorageRoot::parse("file:///tmp/lake").unwrap();
    let created = store
        .create_warehouse(&icegate_catalog::idempotency::WriteContext::NONE, &name, &root, &StorageProfile::File)
        .await
        .unwrap();
    let err = store
        .create_warehouse(&icegate_catalog::idempotency::WriteContext::NONE, &name, &root, &StorageProfile::File)
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogError::AlreadyExists(_)), "{err:?}");
    assert_eq!(store.warehouse_by_name(&name).await.unwrap().unwrap(), created);
    assert_eq!(store.warehouse_by_id(&created.id).await.unwrap().unwrap(), created);
    assert_eq!(store.list_warehouses(None).await.unwrap(), vec![created]);
}

async fn ensure_warehouse_creates_once_and_keeps_the_first_root(db: TestDatabase) {
    let store = &db.store;
    let name = WarehouseName::parse("default").unwrap();
    let first = store
        .ensure_warehouse(
            &icegate_catalog::idempotency::WriteContext::NONE,
            &name,
            &StorageRoot::parse("file:///a").unwrap(),
        )
        .await
        .unwrap();
    let second = store
        .ensure_warehouse(
            &icegate_catalog::idempotency::WriteContext::NONE,
            &name,
            &StorageRoot::parse("file:///b").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(second.storage_root.as_str(), "file:///a");
}

async fn warehouse_roots_may_not_overlap(db: TestDatabase) {
    let store = &db.store;
    let create = |name: &str, root: &str| {
        let (name, root) = (WarehouseName::parse(name).unwrap(), StorageRoot::parse(root).unwrap());
        async move {
            store
                .create_warehouse(
                    &icegate_catalog::idempotency::WriteContext::NONE,
                    &name,
                    &root,
                    &StorageProfile::File,
                )
                .await
        }
    };
    create("first", "file:///lake/wh").await.unwrap();
    for (name, root) in [("same", "file:///lake/wh"), ("inside", "file:///lake/wh/t"), ("around", "file:///lake")] {
        let err = create(name, root).await.unwrap_err();
        assert!(matches!(err, CatalogError::BadRequest(_)), "{root}: {err:?}");
        assert!(store.warehouse_by_name(&WarehouseName::parse(name).unwrap()).await.unwrap().is_none());
    }
    // Siblings, even with a common name prefix, and other schemes are separate storage.
    create("sibling", "file:///lake/wh2").await.unwrap();
    create("s3", "s3://lake/wh").await.unwrap();
    let err = store
        .ensure_warehouse(
            &icegate_catalog::idempotency::WriteContext::NONE,
            &WarehouseName::parse("default").unwrap(),
            &StorageRoot::parse("file:///lake/wh/d").unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogError::BadRequest(_)), "{err:?}");
}

async fn deleting_a_warehouse_is_refused_while_it_holds_namespaces(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w1").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a"), &Properties::new()).await.unwrap();
    let name = WarehouseName::parse("w1").unwrap();
    let err = store.delete_warehouse(&icegate_catalog::idempotency::WriteContext::NONE, &name).await.unwrap_err();
    assert!(matches!(err, CatalogError::WarehouseNotEmpty(_)), "{err:?}");
    store.drop_namespace(&WriteContext::NONE, &wh, &ns("a")).await.unwrap();
    store.delete_warehouse(&icegate_catalog::idempotency::WriteContext::NONE, &name).await.unwrap();
    assert!(store.warehouse_by_name(&name).await.unwrap().is_none());
    let err = store.delete_warehouse(&icegate_catalog::idempotency::WriteContext::NONE, &name).await.unwrap_err();
    assert!(matches!(err, CatalogError::NotFound { kind: ObjectKind::Warehouse, .. }), "{err:?}");
}

async fn a_namespace_keeps_its_properties(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    let p = props(&[("owner", "data-eng"), ("location", "file:///x"), ("empty", "")]);
    store.create_namespace(&WriteContext::NONE, &wh, &ns("sales"), &p).await.unwrap();
    assert_eq!(store.load_namespace(&wh, &ns("sales")).await.unwrap(), Some(p));
    store.create_namespace(&WriteContext::NONE, &wh, &ns("bare"), &Properties::new()).await.unwrap();
    assert_eq!(store.load_namespace(&wh, &ns("bare")).await.unwrap(), Some(Properties::new()));
    assert_eq!(store.load_namespace(&wh, &ns("nope")).await.unwrap(), None);
    assert!(store.namespace_exists(&wh, &ns("sales")).await.unwrap());
    assert!(!store.namespace_exists(&wh, &ns("nope")).await.unwrap());
}

async fn creating_an_existing_namespace_conflicts(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a"), &props(&[("k", "1")])).await.unwrap();
    let err = store.create_namespace(&WriteContext::NONE, &wh, &ns("a"), &props(&[("k", "2")])).await.unwrap_err();
    assert!(matches!(err, CatalogError::AlreadyExists(_)), "{err:?}");
    // The failed attempt changed nothing.
    assert_eq!(store.load_namespace(&wh, &ns("a")).await.unwrap(), Some(props(&[("k", "1")])));
}

async fn a_child_namespace_needs_an_existing_parent(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    let err = store.create_namespace(&WriteContext::NONE, &wh, &ns("a.b"), &Properties::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::NotFound { kind: ObjectKind::Namespace, .. }), "{err:?}");
    assert!(!store.namespace_exists(&wh, &ns("a.b")).await.unwrap());
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a"), &Properties::new()).await.unwrap();
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a.b"), &Properties::new()).await.unwrap();
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a.b.c"), &Properties::new()).await.unwrap();
    assert!(store.namespace_exists(&wh, &ns("a.b.c")).await.unwrap());
}

async fn a_namespace_with_children_cannot_be_dropped(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a"), &props(&[("k", "v")])).await.unwrap();
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a.b"), &Properties::new()).await.unwrap();
    let err = store.drop_namespace(&WriteContext::NONE, &wh, &ns("a")).await.unwrap_err();
    assert!(matches!(err, CatalogError::NamespaceNotEmpty(_)), "{err:?}");
    assert_eq!(store.load_namespace(&wh, &ns("a")).await.unwrap(), Some(props(&[("k", "v")])));
    store.drop_namespace(&WriteContext::NONE, &wh, &ns("a.b")).await.unwrap();
    store.drop_namespace(&WriteContext::NONE, &wh, &ns("a")).await.unwrap();
    assert_eq!(store.load_namespace(&wh, &ns("a")).await.unwrap(), None);
    let err = store.drop_namespace(&WriteContext::NONE, &wh, &ns("a")).await.unwrap_err();
    assert!(matches!(err, CatalogError::NotFound { kind: ObjectKind::Namespace, .. }), "{err:?}");
    // Re-creating a dropped namespace starts with no properties.
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a"), &Properties::new()).await.unwrap();
    assert_eq!(store.load_namespace(&wh, &ns("a")).await.unwrap(), Some(Properties::new()));
}

async fn listings_return_direct_children_in_byte_order(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    for path in ["b", "a", "B", "a.z", "a.y", "a.y.deep", "ab", "é"] {
        store.create_namespace(&WriteContext::NONE, &wh, &ns(path), &Properties::new()).await.unwrap();
    }
    let top = store.list_namespaces(&wh, None, &ALL, None).await.unwrap();
    assert_eq!(top.items, vec![ns("B"), ns("a"), ns("ab"), ns("b"), ns("é")]);
    assert_eq!(top.next_after, None);
    let children = store.list_namespaces(&wh, Some(&ns("a")), &ALL, None).await.unwrap();
    assert_eq!(children.items, vec![ns("a.y"), ns("a.z")]);
    let none = store.list_namespaces(&wh, Some(&ns("a.z")), &ALL, None).await.unwrap();
    assert!(none.items.is_empty());
    let err = store.list_namespaces(&wh, Some(&ns("missing")), &ALL, None).await.unwrap_err();
    assert!(matches!(err, CatalogError::NotFound { kind: ObjectKind::Namespace, .. }), "{err:?}");
}

async fn pagination_visits_every_namespace_exactly_once(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    let names: BTreeSet<String> = (0..23).map(|i| format!("ns{i:02}")).collect();
    for n in &names {
        store.create_namespace(&WriteContext::NONE, &wh, &ns(n), &Properties::new()).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = store
            .list_namespaces(&wh, None, &PageRequest { after: after.clone(), limit: Some(5) }, None)
            .await
            .unwrap();
        assert!(page.items.len() <= 5);
        seen.extend(page.items.iter().map(|n| n.encoded()));
        pages += 1;
        if pages == 2 {
            // A namespace created behind the cursor does not disturb the rest of the walk.
            store.create_namespace(&WriteContext::NONE, &wh, &ns("ns00a"), &Properties::new()).await.unwrap();
        }
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 5);
    assert_eq!(seen, names.into_iter().collect::<Vec<_>>());
}

async fn the_last_full_page_has_no_next_token(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    for n in ["a", "b", "c", "d"] {
        store.create_namespace(&WriteContext::NONE, &wh, &ns(n), &Properties::new()).await.unwrap();
    }
    let first = store.list_namespaces(&wh, None, &PageRequest { after: None, limit: Some(2) }, None).await.unwrap();
    assert_eq!(first.next_after.as_deref(), Some("b"));
    let last =
        store.list_namespaces(&wh, None, &PageRequest { after: first.next_after, limit: Some(2) }, None).await.unwrap();
    assert_eq!(last.items, vec![ns("c"), ns("d")]);
    assert_eq!(last.next_after, None);
}

async fn namespaces_are_isolated_per_warehouse(db: TestDatabase) {
    let store = &db.store;
    let w1 = warehouse(store, "w1").await;
    let w2 = warehouse(store, "w2").await;
    store.create_namespace(&WriteContext::NONE, &w1, &ns("shared"), &props(&[("w", "1")])).await.unwrap();
    store.create_namespace(&WriteContext::NONE, &w2, &ns("shared"), &props(&[("w", "2")])).await.unwrap();
    store.create_namespace(&WriteContext::NONE, &w2, &ns("only2"), &Properties::new()).await.unwrap();
    assert_eq!(store.list_namespaces(&w1, None, &ALL, None).await.unwrap().items, vec![ns("shared")]);
    assert_eq!(store.load_namespace(&w2, &ns("shared")).await.unwrap(), Some(props(&[("w", "2")])));
    assert!(!store.namespace_exists(&w1, &ns("only2")).await.unwrap());
}

async fn property_updates_report_updated_removed_and_missing(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    store
        .create_namespace(&WriteContext::NONE, &wh, &ns("a"), &props(&[("keep", "1"), ("drop", "2"), ("change", "3")]))
        .await
        .unwrap();
    let change = store
        .update_namespace_properties(
            &WriteContext::NONE,
            &wh,
            &ns("a"),
            &props(&[("change", "33"), ("new", "4")]),
            &["drop".to_string(), "ghost".to_string()],
        )
        .await
        .unwrap();
    assert_eq!(
        change,
        PropertiesChange {
            updated: vec!["change".into(), "new".into()],
            removed: vec!["drop".into()],
            missing: vec!["ghost".into()],
        }
    );
    assert_eq!(
        store.load_namespace(&wh, &ns("a")).await.unwrap(),
        Some(props(&[("keep", "1"), ("change", "33"), ("new", "4")]))
    );
    let err = store
        .update_namespace_properties(&WriteContext::NONE, &wh, &ns("missing"), &Properties::new(), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogError::NotFound { kind: ObjectKind::Namespace, .. }), "{err:?}");
}

async fn many_properties_are_written_in_chunks(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w").await;
    let many: Properties = (0..1203).map(|i| (format!("k{i:04}"), format!("v{i}"))).collect();
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a"), &many).await.unwrap();
    assert_eq!(store.load_namespace(&wh, &ns("a")).await.unwrap().unwrap().len(), 1203);
    let removals: Vec<String> = many.keys().take(700).cloned().collect();
    let change = store
        .update_namespace_properties(&WriteContext::NONE, &wh, &ns("a"), &Properties::new(), &removals)
        .await
        .unwrap();
    assert_eq!(change.removed.len(), 700);
    assert_eq!(store.load_namespace(&wh, &ns("a")).await.unwrap().unwrap().len(), 503);
}

async fn concurrent_creates_of_one_namespace_have_exactly_one_winner(db: TestDatabase) {
    let store: Arc<dyn CatalogStore> = Arc::new(db.store.clone());
    let wh = warehouse(store.as_ref(), "w").await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (store, wh) = (store.clone(), wh.clone());
            tokio::spawn(async move {
                store.create_namespace(&WriteContext::NONE, &wh, &ns("race"), &props(&[("by", &i.to_string())])).await
            })
        })
        .collect();
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => wins += 1,
            Err(CatalogError::AlreadyExists(_)) => {}
            Err(other) => panic!("unexpected error: {other:?}"),
        }
    }
    assert_eq!(wins, 1);
    assert_eq!(store.load_namespace(&wh, &ns("race")).await.unwrap().unwrap().len(), 1);
}

async fn concurrent_updates_of_different_keys_are_all_kept(db: TestDatabase) {
    let store: Arc<dyn CatalogStore> = Arc::new(db.store.clone());
    let wh = warehouse(store.as_ref(), "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a"), &Properties::new()).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (store, wh) = (store.clone(), wh.clone());
            tokio::spawn(async move {
                store
                    .update_namespace_properties(
                        &WriteContext::NONE,
                        &wh,
                        &ns("a"),
                        &props(&[(&format!("k{i}"), "v")]),
                        &[],
                    )
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(store.load_namespace(&wh, &ns("a")).await.unwrap().unwrap().len(), 16);
}

fn keyed(principal: &str, key: &str) -> WriteContext {
    let key = icegate_catalog::idempotency::IdempotencyKey { principal: principal.into(), key: key.into() };
    let scope = icegate_catalog::idempotency::IdempotencyScope::new(key, "POST /v1/x".into(), "digest".into());
    WriteContext::by_principal(principal, Some(Arc::new(scope)))
}

async fn an_idempotency_key_is_recorded_with_its_mutation_and_answered_only_by_its_request(db: TestDatabase) {
    use icegate_catalog::idempotency::Finalized;
    let store = &db.store;
    let wh = warehouse(store, "w1").await;
    let first = keyed("p1", "k1");
    store.create_namespace(&first, &wh, &ns("a"), &Properties::new()).await.unwrap();
    let scope = first.idempotency.as_deref().unwrap();
    let recorded = store.idempotency_record(&scope.key).await.unwrap().expect("recorded with the namespace");
    assert_eq!(recorded.status, None, "not final until the request answers");
    // A duplicate with the same key cannot apply again, and cannot fill in the first's row.
    let duplicate = keyed("p1", "k1");
    let err = store.create_namespace(&duplicate, &wh, &ns("b"), &Properties::new()).await.unwrap_err();
    assert!(matches!(err, CatalogError::IdempotencyKeyUsed), "{err:?}");
    assert!(!store.namespace_exists(&wh, &ns("b")).await.unwrap(), "the duplicate's change did not apply");
    let dup = duplicate.idempotency.as_deref().unwrap();
    assert_eq!(store.finalize_idempotency_key(dup, 409, "{}", true).await.unwrap(), Finalized::Taken);
    assert_eq!(store.finalize_idempotency_key(dup, 200, "{}", false).await.unwrap(), Finalized::NothingRecorded);
    // The first request fills in exactly its own row.
    assert_eq!(store.finalize_idempotency_key(scope, 200, "{\"ok\":1}", false).await.unwrap(), Finalized::Filled);
    let done = store.idempotency_record(&scope.key).await.unwrap().unwrap();
    assert_eq!((done.status, done.body.as_deref()), (Some(200), Some("{\"ok\":1}")));
    // A change that does not commit records nothing: its key stays free.
    let failed = keyed("p1", "k2");
    store.create_namespace(&failed, &wh, &ns("a"), &Properties::new()).await.unwrap_err();
    let failed = failed.idempotency.as_deref().unwrap();
    assert!(store.idempotency_record(&failed.key).await.unwrap().is_none());
    assert_eq!(store.finalize_idempotency_key(failed, 409, "{}", true).await.unwrap(), Finalized::Inserted);
    // Another principal's key of the same value is another key.
    store.create_namespace(&keyed("p2", "k1"), &wh, &ns("c"), &Properties::new()).await.unwrap();
}

async fn staged_reservations_and_dropped_leases_keep_locations_while_credentials_work(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w1").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let (a, b) = (WriteContext::by_principal("a", None), WriteContext::by_principal("b", None));
    let until =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 + 3_600_000;
    let staged = "file:///tmp/w1/db/staged".to_owned();
    let refused = |r: Result<(), CatalogError>| assert!(matches!(r, Err(CatalogError::BadRequest(_))), "{r:?}");
    store.reserve_locations(&a, &wh, &ns("db"), "t", std::slice::from_ref(&staged), until).await.unwrap();
    // Nobody else reserves, checks free or places a namespace there; its stager may (again).
    refused(store.reserve_locations(&b, &wh, &ns("db"), "t", std::slice::from_ref(&staged), until).await);
    refused(store.check_locations_free(&b, &wh, (&ns("db"), "t"), &[format!("{staged}/x")], None).await);
    let child = NamespaceIdent::from_levels(["db", "staged"]).unwrap();
    refused(store.create_namespace(&WriteContext::NONE, &wh, &child, &Properties::new()).await);
    store.reserve_locations(&a, &wh, &ns("db"), "t", std::slice::from_ref(&staged), until).await.unwrap();
    store.check_locations_free(&a, &wh, (&ns("db"), "t"), std::slice::from_ref(&staged), None).await.unwrap();
    let db_ns = ns("db");
    let row = |name: &'static str, uuid: &'static str| NewTabular {
        warehouse_id: &wh,
        namespace: &db_ns,
        name,
        kind: TabularKind::Table,
        location: &staged,
        extra_locations: &[],
        metadata_location: "file:///tmp/w1/db/staged/metadata/00000-x.metadata.json",
        metadata: uuid,
        metadata_gzip: None,
    };
    refused(store.create_tabular(&b, &row("t", r#"{"table-uuid": "u1"}"#)).await.map(|_| ()));
    store.create_tabular(&a, &row("t", r#"{"table-uuid": "u1"}"#)).await.unwrap();
    // Dropped with a lease: kept from other tables and namespaces, and from the same table
    // registered again by anyone but the principal that dropped it.
    store
        .drop_tabular(&a, &wh, (&ns("db"), "t"), TabularKind::Table, DropOptions::final_drop(until), None)
        .await
        .unwrap()
        .unwrap();
    refused(store.create_tabular(&a, &row("other", r#"{"table-uuid": "u2"}"#)).await.map(|_| ()));
    refused(store.create_namespace(&WriteContext::NONE, &wh, &child, &Properties::new()).await);
    refused(store.create_tabular(&b, &row("again", r#"{"table-uuid": "u1"}"#)).await.map(|_| ()));
    store.create_tabular(&a, &row("again", r#"{"table-uuid": "u1"}"#)).await.unwrap();
    // Leases do not hold a namespace: once its tables are gone it is dropped.
    store
        .drop_tabular(
            &WriteContext::NONE,
            &wh,
            (&ns("db"), "again"),
            TabularKind::Table,
            DropOptions::final_drop(until),
            None,
        )
        .await
        .unwrap()
        .unwrap();
    store.drop_namespace(&WriteContext::NONE, &wh, &ns("db")).await.unwrap();
}

async fn a_dropped_namespace_leaves_its_staged_locations_reserved(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w1").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let stager = WriteContext::by_principal("a", None);
    let until =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 + 3_600_000;
    let staged = "file:///tmp/w1/db/staged".to_owned();
    store.reserve_locations(&stager, &wh, &ns("db"), "t", std::slice::from_ref(&staged), until).await.unwrap();
    // A staged create does not keep its (empty) namespace...
    store.drop_namespace(&WriteContext::NONE, &wh, &ns("db")).await.unwrap();
    // ...but its location stays out of reach until the credentials vended for it expire: for a
    // namespace made anew under the same name, for its children, and for the stager too.
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let refused = |r: Result<(), CatalogError>| assert!(matches!(r, Err(CatalogError::BadRequest(_))), "{r:?}");
    let child = NamespaceIdent::from_levels(["db", "staged"]).unwrap();
    refused(store.create_namespace(&WriteContext::NONE, &wh, &child, &Properties::new()).await);
    for who in [&stager, &WriteContext::by_principal("b", None)] {
        refused(store.check_locations_free(who, &wh, (&ns("db"), "t"), std::slice::from_ref(&staged), None).await);
        refused(store.reserve_locations(who, &wh, &ns("db"), "t", std::slice::from_ref(&staged), until).await);
    }
    // Elsewhere in the new namespace, tables go as usual.
    store
        .check_locations_free(&stager, &wh, (&ns("db"), "t"), &["file:///tmp/w1/db/other".to_owned()], None)
        .await
        .unwrap();
}

async fn migrations_are_idempotent(db: TestDatabase) {
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.ping().await.unwrap();
}

icegate_store::on_both_backends!(
    warehouse_names_are_unique,
    ensure_warehouse_creates_once_and_keeps_the_first_root,
    warehouse_roots_may_not_overlap,
    deleting_a_warehouse_is_refused_while_it_holds_namespaces,
    a_namespace_keeps_its_properties,
    creating_an_existing_namespace_conflicts,
    a_child_namespace_needs_an_existing_parent,
    a_namespace_with_children_cannot_be_dropped,
    listings_return_direct_children_in_byte_order,
    pagination_visits_every_namespace_exactly_once,
    the_last_full_page_has_no_next_token,
    namespaces_are_isolated_per_warehouse,
    property_updates_report_updated_removed_and_missing,
    many_properties_are_written_in_chunks,
    concurrent_creates_of_one_namespace_have_exactly_one_winner,
    concurrent_updates_of_different_keys_are_all_kept,
    migrations_are_idempotent,
    table_locations_may_not_overlap,
    extra_locations_take_part_in_the_overlap_check,
    a_storage_profile_update_bumps_the_version,
    a_swap_applies_only_against_the_expected_location,
    a_document_stored_compressed_reads_back_as_its_text,
    concurrent_swaps_apply_once_each,
    a_multi_table_swap_is_all_or_nothing,
    tabulars_are_renamed_and_dropped,
    heads_follow_every_write,
    heads_stay_current_under_concurrent_swaps,
    sqlite_loads_read_in_place,
    an_idempotency_key_is_recorded_with_its_mutation_and_answered_only_by_its_request,
    staged_reservations_and_dropped_leases_keep_locations_while_credentials_work,
    a_dropped_namespace_leaves_its_staged_locations_reserved,
);

/// An in-memory SQLite database has no file for the group committer to open: its swaps are
/// committed in groups through the pool, with the same outcomes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_sqlite_commits_groups_through_the_pool() {
    let options = icegate_store::StoreOptions {
        url: "sqlite::memory:".to_owned(),
        max_connections: 1,
        acquire_timeout: std::time::Duration::from_secs(10),
    };
    let store = icegate_store::SqlStore::connect_owned(&options).unwrap();
    store.migrate().await.unwrap();
    let wh = warehouse(&store, "w").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let id = table(&store, &wh, "t", "file:///w/db/t").await.unwrap();
    let v0 = "file:///w/db/t/metadata/00000-x.metadata.json";
    let applied = store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", v0, "v1")]).await.unwrap();
    assert_eq!(applied, SwapOutcome::Applied);
    let stale = store.swap_metadata(&WriteContext::NONE, &[swap(&id, &wh, "t", v0, "v2")]).await.unwrap();
    assert_eq!(stale, SwapOutcome::Conflict(0));
    let row = store.load_tabular(&wh, &ns("db"), "t", TabularKind::Table).await.unwrap().unwrap();
    assert_eq!(row.metadata_location, "v1");
    assert_eq!(store.group_commits(), Some((0, 2)));
}

/// Replicas starting together against an empty PostgreSQL database must not race: every one
/// of them finishes, and the schema is applied exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_migrating_a_fresh_postgres_database_at_once_all_succeed() {
    let db = TestDatabase::unmigrated(TestBackend::Postgres).await;
    let replicas: Vec<_> = (0..4)
        .map(|_| {
            let options = icegate_store::StoreOptions {
                url: db.url.clone(),
                max_connections: 2,
                acquire_timeout: std::time::Duration::from_secs(30),
            };
            tokio::spawn(async move {
                let store = icegate_store::SqlStore::connect_lazy(&options).unwrap();
                let result = store.migrate().await;
                store.close().await;
                result
            })
        })
        .collect();
    for replica in replicas {
        replica.await.unwrap().expect("every replica's migration succeeds");
    }
    let wh = warehouse(&db.store, "after-race").await;
    assert!(!wh.is_empty());
}

// PostgreSQL's group commit and lock order.
#[path = "store/postgres_groups.rs"]
mod postgres_groups;
#[path = "store/tabulars.rs"]
mod tabulars;
#[allow(clippy::wildcard_imports)]
use tabulars::*;
