//! Throwaway databases for tests (feature `testing`): a fresh SQLite file or a fresh PostgreSQL
//! database per test, migrated, and removed again when the test ends.
//!
//! PostgreSQL is found through `ICEGATE_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`, an account allowed to create databases). A test
//! that cannot reach it fails and says how to provide one; it never passes silently.

use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection};

use crate::{SqlStore, StoreOptions};

pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestBackend {
    Sqlite,
    Postgres,
}

/// A migrated store on a database that exists only for this test.
pub struct TestDatabase {
    pub store: SqlStore,
    pub url: String,
    cleanup: Cleanup,
}

enum Cleanup {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres { admin_url: String, name: String },
}

/// The PostgreSQL account tests use to create and drop their databases.
pub fn admin_url() -> String {
    std::env::var("ICEGATE_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned())
}

impl TestDatabase {
    pub async fn new(backend: TestBackend) -> Self {
        let db = Self::unmigrated(backend).await;
        db.store.migrate().await.expect("migrations apply to a fresh database");
        db
    }

    /// A fresh, empty database without the schema (for migration tests).
    pub async fn unmigrated(backend: TestBackend) -> Self {
        match backend {
            TestBackend::Sqlite => {
                let dir = tempfile::tempdir().expect("temporary directory");
                let url = format!("sqlite://{}?mode=rwc", dir.path().join("catalog.db").display());
                // As `icegate serve` runs it: the test owns its database, so heads stay in memory.
                let store = SqlStore::connect_owned(&options(&url)).expect("sqlite store");
                Self { store, url, cleanup: Cleanup::Sqlite(dir) }
            }
            TestBackend::Postgres => {
                let admin_url = admin_url();
                let name = format!("icegate_test_{}", uuid::Uuid::new_v4().simple());
                let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap_or_else(|e| {
                    panic!(
                        "cannot reach PostgreSQL at {admin_url}: {e}\n\
                         The store tests need a PostgreSQL server whose account may create \
                         databases. Start one (on this kind of machine: `pg_ctlcluster \
                         --skip-systemctl-redirect $(ls /etc/postgresql) main start`) or point \
                         ICEGATE_TEST_DATABASE_URL at one."
                    )
                });
                sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut admin)
                    .await
                    .expect("CREATE DATABASE");
                admin.close().await.ok();
                let url = database_url(&admin_url, &name);
                let store = SqlStore::connect_lazy(&options(&url)).expect("postgres store");
                Self { store, url, cleanup: Cleanup::Postgres { admin_url, name } }
            }
        }
    }
}

fn options(url: &str) -> StoreOptions {
    StoreOptions { url: url.to_owned(), max_connections: 8, acquire_timeout: Duration::from_secs(10) }
}

/// `admin_url` with its database name replaced by `name`.
pub fn database_url(admin_url: &str, name: &str) -> String {
    let (base, query) = admin_url.split_once('?').map_or((admin_url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Cleanup::Postgres { admin_url, name } = &self.cleanup {
            let (admin_url, name) = (admin_url.clone(), name.clone());
            // Drop runs outside any async context we could borrow; a short-lived runtime on its
            // own thread removes the database (FORCE ends the pool's remaining connections).
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
                rt.block_on(async {
                    let mut admin = sqlx::PgConnection::connect(&admin_url).await.ok()?;
                    sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                        .execute(&mut admin)
                        .await
                        .ok()
                })
            })
            .join();
        }
    }
}

/// The name of the PostgreSQL group commit function this version installs (see
/// `tabulars::swap`); its arguments: the fence token, the time, then one array per swap column
/// in the order metadata location, document, gzip, location, id, expected metadata location,
/// name, warehouse id, namespace (encoded); then each swap's audit record (NULL: none) as time,
/// operation, principal id, actor and record.
pub fn postgres_group_function() -> &'static str {
    &crate::tabulars::swap::POSTGRES_GROUP.name
}

/// Runs each named test body (an `async fn(TestDatabase)`) once on SQLite and once on
/// PostgreSQL, each on a database of its own: `mod sqlite` and `mod postgres` of tests.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::testing::TestDatabase::new($crate::testing::TestBackend::Sqlite).await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::testing::TestDatabase::new($crate::testing::TestBackend::Postgres).await).await
                }
            )*
        }
    };
}
