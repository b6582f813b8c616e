//! The JDBC/SQL catalog as a migration source, on SQLite and PostgreSQL, in the schema PyIceberg
//! 0.12's `SqlCatalog` creates (`pyiceberg/catalog/sql.py`: `iceberg_tables` with
//! `iceberg_type`, `iceberg_namespace_properties`): namespaces with their properties (and their
//! parents, implicit there), tables and views; a fence that is the writers' own compare-and-swap
//! (a commit that landed first moves it, a fence repeated is recognised, a row gone is gone);
//! undoing it and retiring the entry, found by the fenced location alone.

use icegate_catalog::migration::source::{Fence, SourceCatalog};
use icegate_store::sources::SqlSource;
use icegate_store::testing::{TestBackend, TestDatabase};
use sqlx::any::AnyPoolOptions;

/// PyIceberg 0.12's DDL (SQLAlchemy's, as it creates it on both databases).
const SCHEMA: [&str; 2] = [
    "CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL, \
     table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), \
     iceberg_type VARCHAR(5), PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, namespace VARCHAR(255) NOT NULL, \
     property_key VARCHAR(255) NOT NULL, property_value VARCHAR(1000) NOT NULL, \
     PRIMARY KEY (catalog_name, namespace, property_key))",
];

/// The source's database: a SQLite file of its own, or a fresh PostgreSQL database; its sqlx
/// URL (to set it up) and its URI as a migration names it (SQLAlchemy's spelling).
async fn database(backend: TestBackend) -> (String, String, Option<TestDatabase>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    match backend {
        TestBackend::Sqlite => {
            let path = dir.path().join("catalog.db");
            (format!("sqlite://{}?mode=rwc", path.display()), format!("sqlite:///{}", path.display()), None, dir)
        }
        TestBackend::Postgres => {
            let db = TestDatabase::unmigrated(backend).await;
            let url = db.url.clone();
            let uri = url.replacen("postgres://", "postgresql+psycopg2://", 1);
            (url, uri, Some(db), dir)
        }
    }
}

async fn source_catalog(backend: TestBackend) {
    let (url, uri, _db, _dir) = database(backend).await;
    sqlx::any::install_default_drivers();
    let raw = AnyPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
    for ddl in SCHEMA {
        sqlx::query(ddl).execute(&raw).await.unwrap();
    }
    let m1 = "file:///w/sales/orders/metadata/00001-a.metadata.json";
    for (catalog, ns, name, location, kind) in [
        ("src", "sales.eu", "orders", m1, "TABLE"),
        ("src", "sales.eu", "recent", "file:///w/sales/recent/metadata/00000-v.metadata.json", "VIEW"),
        ("other", "sales.eu", "orders", "file:///elsewhere/x.metadata.json", "TABLE"),
    ] {
        sqlx::query(
            "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, iceberg_type) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(catalog)
        .bind(ns)
        .bind(name)
        .bind(location)
        .bind(kind)
        .execute(&raw)
        .await
        .unwrap();
    }
    for (ns, key, value) in [("hr", "exists", "true"), ("sales.eu", "owner", "ops")] {
        sqlx::query(
            "INSERT INTO iceberg_namespace_properties (catalog_name, namespace, property_key, property_value) \
             VALUES ('src', $1, $2, $3)",
        )
        .bind(ns)
        .bind(key)
        .bind(value)
        .execute(&raw)
        .await
        .unwrap();
    }
    let source = SqlSource::connect(&uri, "src").await.unwrap();

    let namespaces = source.namespaces().await.unwrap();
    let names: Vec<String> = namespaces.iter().map(|(levels, _)| levels.join(".")).collect();
    assert_eq!(names, ["hr", "sales", "sales.eu"], "parents are namespaces too");
    assert!(namespaces[0].1.is_empty(), "the catalog's own `exists` marker is no property");
    assert_eq!(namespaces[2].1.get("owner").map(String::as_str), Some("ops"));
    let tables = source.tables(&["sales".into(), "eu".into()]).await.unwrap();
    let shape: Vec<(&str, &str)> = tables.iter().map(|t| (t.name.as_str(), t.kind.as_str())).collect();
    assert_eq!(shape, [("orders", "table"), ("recent", "view")]);

    // A commit that landed after the plan moves the fence to the newer location.
    let eu = ["sales".to_owned(), "eu".to_owned()];
    let m2 = "file:///w/sales/orders/metadata/00002-b.metadata.json";
    sqlx::query("UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 WHERE catalog_name = 'src' AND table_name = 'orders'")
        .bind(m2)
        .bind(m1)
        .execute(&raw)
        .await
        .unwrap();
    let fenced = format!("{m2}.moved-to-icegate.t1");
    assert_eq!(source.fence(&eu, "orders", m1, &fenced).await.unwrap(), Fence::Moved { now: m2.into() });
    assert_eq!(source.fence(&eu, "orders", m2, &fenced).await.unwrap(), Fence::Fenced { previous: Some(m1.into()) });
    assert_eq!(source.fence(&eu, "orders", m2, &fenced).await.unwrap(), Fence::AlreadyFenced);
    assert_eq!(source.fence(&eu, "missing", m2, &fenced).await.unwrap(), Fence::Gone);
    // A writer's compare-and-swap against what it last read now changes nothing.
    let lost = sqlx::query("UPDATE iceberg_tables SET metadata_location = 'x' WHERE catalog_name = 'src' AND table_name = 'orders' AND metadata_location = $1")
        .bind(m2)
        .execute(&raw)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(lost, 0);
    // The other catalog's table of the same name is untouched.
    let other: String = sqlx::query_scalar("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = 'other'")
        .fetch_one(&raw)
        .await
        .unwrap();
    assert_eq!(other, "file:///elsewhere/x.metadata.json");

    // Undone, the table is where it was, with its previous location; found by the fence alone.
    assert!(source.unfence((&eu[..], "orders"), &fenced, m2, Some(m1)).await.unwrap());
    assert!(!source.unfence((&eu[..], "orders"), &fenced, m2, Some(m1)).await.unwrap(), "restored already");
    let back = source.tables(&eu).await.unwrap();
    assert_eq!(back[0].metadata_location.as_deref(), Some(m2));
    // Fenced again and retired: the entry is gone, the view and the other catalog stay.
    source.fence(&eu, "orders", m2, &fenced).await.unwrap();
    assert!(source.retire((&eu[..], "orders"), &fenced).await.unwrap());
    assert!(!source.retire((&eu[..], "orders"), &fenced).await.unwrap());
    let left: Vec<String> = source.tables(&eu).await.unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(left, ["recent"]);
    raw.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sql_catalog_on_sqlite() {
    source_catalog(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sql_catalog_on_postgres() {
    source_catalog(TestBackend::Postgres).await;
}
