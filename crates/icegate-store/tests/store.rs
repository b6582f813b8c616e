//! One store test suite, run against SQLite and PostgreSQL: each test body below is
//! instantiated once per backend by `store_tests!`, on a database of its own.

use icegate_catalog::store::prelude::*;
use std::collections::BTreeSet;
use std::sync::Arc;

use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::storage::StorageProfile;
use icegate_catalog::store::{MetadataSwap, NewTabular, PageRequest, PropertiesChange, SwapOutcome, TabularKind};
use icegate_catalog::{CatalogError, CatalogStore, NamespaceIdent, ObjectKind, Properties, StorageRoot, WarehouseName};
use icegate_store::testing::{TestBackend, TestDatabase};

fn ns(path: &str) -> NamespaceIdent {
    NamespaceIdent::from_levels(path.split('.')).unwrap()
}

fn props(pairs: &[(&str, &str)]) -> Properties {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

async fn warehouse(store: &dyn CatalogStore, name: &str) -> String {
    store
        .create_warehouse(
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
    let created = store.create_warehouse(&name, &root, &StorageProfile::File).await.unwrap();
    let err = store.create_warehouse(&name, &root, &StorageProfile::File).await.unwrap_err();
    assert!(matches!(err, CatalogError::AlreadyExists(_)), "{err:?}");
    assert_eq!(store.warehouse_by_name(&name).await.unwrap().unwrap(), created);
    assert_eq!(store.warehouse_by_id(&created.id).await.unwrap().unwrap(), created);
    assert_eq!(store.list_warehouses(None).await.unwrap(), vec![created]);
}

async fn ensure_warehouse_creates_once_and_keeps_the_first_root(db: TestDatabase) {
    let store = &db.store;
    let name = WarehouseName::parse("default").unwrap();
    let first = store.ensure_warehouse(&name, &StorageRoot::parse("file:///a").unwrap()).await.unwrap();
    let second = store.ensure_warehouse(&name, &StorageRoot::parse("file:///b").unwrap()).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(second.storage_root.as_str(), "file:///a");
}

async fn warehouse_roots_may_not_overlap(db: TestDatabase) {
    let store = &db.store;
    let create = |name: &str, root: &str| {
        let (name, root) = (WarehouseName::parse(name).unwrap(), StorageRoot::parse(root).unwrap());
        async move { store.create_warehouse(&name, &root, &StorageProfile::File).await }
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
        .ensure_warehouse(&WarehouseName::parse("default").unwrap(), &StorageRoot::parse("file:///lake/wh/d").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, CatalogError::BadRequest(_)), "{err:?}");
}

async fn deleting_a_warehouse_is_refused_while_it_holds_namespaces(db: TestDatabase) {
    let store = &db.store;
    let wh = warehouse(store, "w1").await;
    store.create_namespace(&WriteContext::NONE, &wh, &ns("a"), &Properties::new()).await.unwrap();
    let name = WarehouseName::parse("w1").unwrap();
    let err = store.delete_warehouse(&name).await.unwrap_err();
    assert!(matches!(err, CatalogError::WarehouseNotEmpty(_)), "{err:?}");
    store.drop_namespace(&WriteContext::NONE, &wh, &ns("a")).await.unwrap();
    store.delete_warehouse(&name).await.unwrap();
    assert!(store.warehouse_by_name(&name).await.unwrap().is_none());
    let err = store.delete_warehouse(&name).await.unwrap_err();
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
    store.drop_tabular(&a, &wh, (&ns("db"), "t"), TabularKind::Table, until, None).await.unwrap().unwrap();
    refused(store.create_tabular(&a, &row("other", r#"{"table-uuid": "u2"}"#)).await.map(|_| ()));
    refused(store.create_namespace(&WriteContext::NONE, &wh, &child, &Properties::new()).await);
    refused(store.create_tabular(&b, &row("again", r#"{"table-uuid": "u1"}"#)).await.map(|_| ()));
    store.create_tabular(&a, &row("again", r#"{"table-uuid": "u1"}"#)).await.unwrap();
    // Leases do not hold a namespace: once its tables are gone it is dropped.
    store
        .drop_tabular(&WriteContext::NONE, &wh, (&ns("db"), "again"), TabularKind::Table, until, None)
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

async fn table(store: &dyn CatalogStore, wh: &str, name: &str, location: &str) -> Result<String, CatalogError> {
    table_with(store, wh, name, location, &[]).await
}

async fn table_with(
    store: &dyn CatalogStore,
    wh: &str,
    name: &str,
    location: &str,
    extra_locations: &[String],
) -> Result<String, CatalogError> {
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
fn swap(id: &str, wh: &str, table: &str, expected: &str, new: &str) -> MetadataSwap {
    MetadataSwap {
        id: id.to_owned(),
        warehouse_id: wh.to_owned(),
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

async fn extra_locations_take_part_in_the_overlap_check(db: TestDatabase) {
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
        .drop_tabular(&WriteContext::NONE, &wh, (&ns("db"), "b"), TabularKind::Table, 0, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dropped.extra_locations.len(), 3, "{dropped:?}");
    table_with(store, &wh, "c", "file:///w/db/c", &["file:///w/shared/b-data".to_owned()]).await.unwrap();
    // Dropping a table releases its extra locations, and says which they were (for a purge).
    let dropped = store
        .drop_tabular(&WriteContext::NONE, &wh, (&ns("db"), "a"), TabularKind::Table, 0, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dropped.extra_locations, ["file:///w/shared/a-data"]);
    let _ = a;
    table_with(store, &wh, "d", "file:///w/shared/a-data", &[]).await.unwrap();
}

async fn a_storage_profile_update_bumps_the_version(db: TestDatabase) {
    let store = &db.store;
    let name = WarehouseName::parse("lake").unwrap();
    let created = store
        .create_warehouse(&name, &StorageRoot::parse("file:///tmp/lake").unwrap(), &StorageProfile::File)
        .await
        .unwrap();
    assert_eq!(created.profile_version, 1);
    let updated = store.update_storage_profile(&name, &StorageProfile::File).await.unwrap();
    assert_eq!(updated.profile_version, 2);
    assert_eq!(store.warehouse_by_id(&created.id).await.unwrap().unwrap(), updated);
    let missing = WarehouseName::parse("nope").unwrap();
    assert!(matches!(
        store.update_storage_profile(&missing, &StorageProfile::File).await,
        Err(CatalogError::NotFound { .. })
    ));
}

async fn table_locations_may_not_overlap(db: TestDatabase) {
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

async fn a_swap_applies_only_against_the_expected_location(db: TestDatabase) {
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

async fn a_document_stored_compressed_reads_back_as_its_text(db: TestDatabase) {
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
        .drop_tabular(&WriteContext::NONE, &wh, (&ns("db"), "t"), TabularKind::Table, 0, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dropped.tabular.metadata, text);
}

async fn concurrent_swaps_apply_once_each(db: TestDatabase) {
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

async fn a_multi_table_swap_is_all_or_nothing(db: TestDatabase) {
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

async fn tabulars_are_renamed_and_dropped(db: TestDatabase) {
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
        .drop_tabular(&WriteContext::NONE, &wh, (&ns("other"), "moved"), TabularKind::Table, 0, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dropped.tabular.location, "file:///w/db/t");
    assert!(dropped.extra_locations.is_empty());
    assert!(
        store
            .drop_tabular(&WriteContext::NONE, &wh, (&ns("other"), "moved"), TabularKind::Table, 0, None)
            .await
            .unwrap()
            .is_none()
    );
    store.drop_namespace(&WriteContext::NONE, &wh, &ns("other")).await.unwrap();
}

/// Heads (kept in memory on SQLite) follow every write: swaps, renames, drops, re-creates.
async fn heads_follow_every_write(db: TestDatabase) {
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
    store.drop_tabular(&WriteContext::NONE, &wh, (&ns("db"), "u"), TabularKind::Table, 0, None).await.unwrap().unwrap();
    assert!(head("u").await.is_none());
    let again = table(store, &wh, "u", "file:///w/db/u2").await.unwrap();
    assert_eq!(head("u").await.unwrap().id, again, "a re-created table is the new one");
}

/// On SQLite, loads read their row in place (not through sqlx's connection thread) and see
/// every committed write at once.
async fn sqlite_loads_read_in_place(db: TestDatabase) {
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
async fn heads_stay_current_under_concurrent_swaps(db: TestDatabase) {
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

async fn migrations_are_idempotent(db: TestDatabase) {
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.ping().await.unwrap();
}

macro_rules! store_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::TestDatabase::new(super::TestBackend::Sqlite).await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::TestDatabase::new(super::TestBackend::Postgres).await).await
                }
            )*
        }
    };
}

store_tests!(
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
