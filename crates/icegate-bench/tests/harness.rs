//! The harness runs a tiny version of every workload end to end against a real icegate, and its
//! correctness check (no lost commits) holds. Speed is not asserted here: that is what the
//! harness is for (see docs/benchmarks.md).

use icegate_bench::LoadKind;
use std::sync::Arc;
use std::time::Duration;

use icegate_api::{HttpOptions, Metrics, Security};
use icegate_bench::{Target, Tree};
use icegate_catalog::access::{AccessStore, Authorizer};
use icegate_catalog::tokens::{AuthSettings, Authenticator};
use icegate_catalog::{Catalog, CatalogStore, StorageRoot, WarehouseName};
use icegate_store::testing::{TestBackend, TestDatabase};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_workload_runs_and_no_commit_is_lost() {
    let db = TestDatabase::new(TestBackend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn CatalogStore> = Arc::new(db.store.clone());
    let access: Arc<dyn AccessStore> = Arc::new(db.store.clone());
    let name = WarehouseName::parse("default").unwrap();
    store
        .ensure_warehouse(
            &icegate_catalog::idempotency::WriteContext::NONE,
            &name,
            &StorageRoot::parse(&format!("file://{}", dir.path().display())).unwrap(),
        )
        .await
        .unwrap();
    let settings = AuthSettings {
        required: false,
        issuer: "icegate".into(),
        audience: "icegate".into(),
        token_lifetime: Duration::from_secs(60),
        leeway: Duration::from_secs(5),
    };
    let authenticator = Authenticator::new(settings, access.clone(), Some("k".repeat(40))).await.unwrap();
    let security =
        Security { authenticator: Arc::new(authenticator), authorizer: Arc::new(Authorizer::new(access)), oidc: None };
    let catalog = Catalog::new(store, Arc::new(icegate_storage::ObjectStoreIo::new()), Some(name));
    let options = HttpOptions {
        request_timeout: Duration::from_secs(10),
        max_body_bytes: 1 << 20,
        idempotency_key_lifetime: Duration::from_secs(600),
        max_header_bytes: 1 << 16,
        max_in_flight: 512,
        request_memory_bytes: 128 * 1024 * 1024,
    };
    let app = icegate_api::app(catalog, security, Metrics::new(), &options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let target = Target::connect(&uri, "default", None).await.unwrap();
    let tree = Tree {
        width: 2,
        depth: 2,
        tables_per_leaf: 2,
        columns: 10,
        properties: 10,
        snapshots: 3,
        create_connections: 4,
        snapshots_per_commit: 2,
    };
    let second = Duration::from_millis(700);
    let mut reports = vec![icegate_bench::create_tree(&target, &tree).await.unwrap()];
    assert_eq!(reports[0].requests, 2 + 4 + 8 + 8 * 2, "6 namespaces, 8 tables, 3 snapshots each in 2 commits");
    let (_, loaded) = target.call(reqwest::Method::GET, &tree.tables()[0], None).await.unwrap();
    assert_eq!(loaded["metadata"]["snapshots"].as_array().unwrap().len(), 3, "every snapshot was committed");
    assert_eq!(loaded["metadata"]["current-snapshot-id"], 1_000_002);
    reports.push(icegate_bench::http_floor(&target, 4, second).await);
    reports.push(icegate_bench::read(&target, &tree, 4, second).await);
    for kind in [LoadKind::Plain, LoadKind::Gzip, LoadKind::Refs] {
        reports.push(icegate_bench::load_table(&target, &tree, 4, second, kind, 0).await);
    }
    reports.push(icegate_bench::list_tables(&target, &tree, 4, second).await);
    // Tables keep 5 snapshots: the 3 of create-tree, then each append beyond 5 removes the oldest.
    let commit = icegate_bench::commit(&target, &tree, 4, second, 5).await.unwrap();
    let appends = commit.extra["appends"].as_u64().unwrap();
    assert!(appends >= 8, "each of 4 writers appended more than twice: {:?}", commit.extra);
    let mut current = Vec::new();
    for table in &tree.tables()[..4] {
        let (_, loaded) = target.call(reqwest::Method::GET, table, None).await.unwrap();
        let snapshots = loaded["metadata"]["snapshots"].as_array().unwrap();
        assert!(snapshots.len() <= 5, "the oldest snapshots were removed: {} left", snapshots.len());
        let newest = snapshots.iter().map(|s| s["snapshot-id"].as_i64().unwrap()).max().unwrap();
        assert_eq!(loaded["metadata"]["current-snapshot-id"], newest, "main is the last append");
        current.push(newest);
    }
    assert!(current.iter().all(|id| *id > 1_000_002), "every table has an append of this run: {current:?}");
    reports.push(commit);
    let load = icegate_bench::MixedLoad { rate: 200.0, write_percent: 20, max_in_flight: 64 };
    let mixed = icegate_bench::mixed(&target, &tree, &load, second).await;
    assert!(mixed.extra["writes"].as_u64().unwrap() > 0, "mixed sent commits: {:?}", mixed.extra);
    assert!(mixed.requests >= 100, "200 req/s for 0.7 s arrive about 140 times, not {}", mixed.requests);
    reports.push(mixed);
    let hot = icegate_bench::commit_hot(&target, &tree.tables()[0], 4, second).await.unwrap();
    reports.push(hot.clone());
    for report in &reports[1..] {
        assert!(report.requests > 0, "{} sent nothing", report.workload);
        let unexpected: usize = report.errors.iter().filter(|(status, _)| **status != 409).map(|(_, n)| n).sum();
        assert_eq!(unexpected, 0, "{}: {:?}", report.workload, report.errors);
        assert!(report.p99_ms >= report.p50_ms);
    }
    assert!(hot.extra["acknowledged"].as_u64().unwrap() > 0);
    assert_eq!(hot.extra["lost"], 0, "acknowledged commits were lost");
    let table = icegate_bench::markdown(&reports);
    assert!(table.contains("| commit-hot |") && table.contains("vs http-floor"));
}
