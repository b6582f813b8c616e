//! The metadata store: [`SqlStore`] implements `icegate_catalog::CatalogStore` on PostgreSQL
//! (production) and SQLite (the embedded default).
//!
//! Why runtime queries and not `sqlx::query!`: both backends run the *same* SQL through sqlx's
//! `Any` driver, so one implementation and one test suite cover both stores. The compile-time
//! macros check a query against one concrete database and cannot serve `Any`. Every query is
//! exercised on both backends by the store test suite (`tests/store.rs`). The migrations are
//! one folder per database, each in its own dialect (PostgreSQL `BIGINT`, SQLite `INTEGER`);
//! the queries keep to what both accept. On SQLite the hottest point reads also run in place on
//! plain `rusqlite` connections (`sqlite_reads`), with sqlx as their fallback.

mod access;
mod database;
mod heads;
mod namespaces;
mod sqlite_reads;
mod tabulars;
mod warehouses;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use async_trait::async_trait;
use icegate_catalog::idempotency::{Finalized, IdempotencyKey, IdempotencyRecord, IdempotencyScope, WriteContext};
use icegate_catalog::storage::StorageProfile;
use icegate_catalog::store::{
    Dropped, MetadataSwap, NewTabular, Page, PageRequest, PoolStats, PropertiesChange, SwapOutcome, Tabular,
    TabularHead, TabularKind, Warehouse,
};
use icegate_catalog::{CatalogError, CatalogStore, NamespaceIdent, Properties, StorageRoot, WarehouseName};
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::Migrator;
use sqlx::{Any, AnyPool, Executor, Transaction};

pub use database::{Backend, Database};

static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/postgres");
static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/sqlite");

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub url: String,
    pub max_connections: u32,
    /// How long a request waits for a free connection (or for the database to answer a new
    /// connection) before it fails with 503 instead of hanging.
    pub acquire_timeout: Duration,
}

/// The sqlx-backed store for both databases.
#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    /// Table heads in memory, only while this process alone writes the database.
    heads: Option<std::sync::Arc<heads::HeadCache>>,
    /// SQLite only: the hottest point reads, run in place instead of on sqlx's worker thread.
    reads: Option<std::sync::Arc<sqlite_reads::SqliteReads>>,
    /// The owner lock of a SQLite file this process serves (what makes `heads` safe).
    _owner: Option<std::sync::Arc<database::Owner>>,
}

impl SqlStore {
    /// Connects lazily: the pool opens connections on first use, so `icegate serve` starts (and
    /// answers `/health`, and `/ready` with 503) even while the database is still coming up.
    /// Shares the database with other processes (migrate, bootstrap, replicas on PostgreSQL).
    pub fn connect_lazy(options: &StoreOptions) -> anyhow::Result<Self> {
        Self::open(options, false)
    }

    /// As [`connect_lazy`](Self::connect_lazy), for the process that serves the database: a
    /// SQLite file is owned (a lock on `<database>.owner` refuses a second server on it, and is
    /// held as long as this store or a clone of it lives), which makes it safe to keep table and
    /// view heads in memory, so loads skip the database when nothing moved them. PostgreSQL and
    /// in-memory SQLite are shared as with `connect_lazy` (replicas see each other's commits).
    pub fn connect_owned(options: &StoreOptions) -> anyhow::Result<Self> {
        Self::open(options, true)
    }

    fn open(options: &StoreOptions, owned: bool) -> anyhow::Result<Self> {
        install_default_drivers();
        let database = Database::parse(&options.url)?;
        let backend = database.backend();
        database.prepare()?;
        if backend == Backend::Sqlite {
            sqlite_reads::configure_sqlite();
        }
        let owner = match database.sqlite_file() {
            Some(path) if owned => Some(std::sync::Arc::new(database::Owner::lock(path)?)),
            _ => None,
        };
        let pool = AnyPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // WAL lets readers proceed while one writer commits; foreign keys are
                        // what make "drop only when empty" safe (see the migrations).
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                        conn.execute("PRAGMA busy_timeout = 10000").await?;
                    }
                    Ok(())
                })
            })
            .connect_lazy(database.url())
            .context("invalid database URL")?;
        let reads = database.sqlite_file().map(|path| std::sync::Arc::new(sqlite_reads::SqliteReads::new(path)));
        let heads = owner.is_some().then(std::sync::Arc::default);
        Ok(Self { pool, backend, heads, reads, _owner: owner })
    }

    /// SQLite: how many reads ran in place on the request's thread, and how many were handed
    /// to the pool instead (see `sqlite_reads`). `None` on PostgreSQL or an in-memory database.
    pub fn in_place_reads(&self) -> Option<(u64, u64)> {
        self.reads.as_ref().map(|reads| reads.counts())
    }

    pub fn backend_kind(&self) -> Backend {
        self.backend
    }

    /// Applies pending migrations. On PostgreSQL sqlx holds an advisory lock while it migrates,
    /// so replicas starting together apply each migration exactly once; on SQLite the database
    /// file's write lock serialises them.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        let migrator = match self.backend {
            Backend::Postgres => &POSTGRES_MIGRATIONS,
            Backend::Sqlite => &SQLITE_MIGRATIONS,
        };
        migrator.run(&self.pool).await.context("running database migrations")?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Begins a transaction that will write. SQLite must take its write lock up front
    /// (`BEGIN IMMEDIATE`): a deferred transaction that reads and then writes can fail with
    /// SQLITE_BUSY at once when another writer got there first, instead of waiting its turn.
    async fn begin_write(&self) -> Result<Transaction<'static, Any>, CatalogError> {
        let tx = match self.backend {
            Backend::Postgres => self.pool.begin().await,
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
        };
        tx.map_err(db_error)
    }
}

impl SqlStore {
    /// Commits a write transaction, first recording the request's idempotency key in it (if the
    /// request carries one), with the request's reservation: the key and the mutation become
    /// visible together or not at all, and a concurrent duplicate fails on the key's primary
    /// key instead of applying twice.
    async fn commit_write(&self, mut tx: Transaction<'static, Any>, write: &WriteContext) -> Result<(), CatalogError> {
        if let Some(scope) = &write.idempotency {
            let inserted = sqlx::query(
                "INSERT INTO idempotency_keys (principal, key, operation, request_digest, reservation, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&scope.key.principal)
            .bind(&scope.key.key)
            .bind(&scope.operation)
            .bind(&scope.request_digest)
            .bind(&scope.reservation)
            .bind(now_ms())
            .execute(&mut *tx)
            .await;
            match inserted {
                Ok(_) => {}
                Err(e) if is_violation(&e, sqlx::error::ErrorKind::UniqueViolation) => {
                    let _ = tx.rollback().await;
                    return Err(CatalogError::IdempotencyKeyUsed);
                }
                Err(e) => return Err(db_error(e)),
            }
        }
        tx.commit().await.map_err(db_error)
    }
}

/// How many rows a keyset page fetches: one more than asked for tells whether another page exists.
fn fetch_count(page: &PageRequest) -> i64 {
    page.limit.map_or(i64::MAX, |l| i64::from(l) + 1)
}

/// Cuts the rows of a keyset page (up to `limit + 1` names) into the page and its continuation.
fn keyset_page(mut names: Vec<String>, page: &PageRequest) -> Page<String> {
    let next_after = match page.limit {
        Some(limit) if names.len() > limit as usize => {
            names.truncate(limit as usize);
            names.last().cloned()
        }
        _ => None,
    };
    Page { items: names, next_after }
}

/// Milliseconds since the Unix epoch, the store's timestamp format.
fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Maps a database error nobody expected. Connection-level failures become `Unavailable` (503,
/// retryable); the rest is internal and logged by the HTTP layer with an error id.
fn db_error(err: sqlx::Error) -> CatalogError {
    use sqlx::Error as E;
    let unavailable = match &err {
        E::PoolTimedOut | E::PoolClosed | E::Io(_) | E::Tls(_) | E::WorkerCrashed => true,
        // 08xxx: connection exceptions; 57P0x: the server is shutting down or restarting;
        // SQLITE_BUSY (5) after the busy timeout.
        E::Database(db) => db.code().is_some_and(|c| c.starts_with("08") || c.starts_with("57P0") || c == "5"),
        _ => false,
    };
    if unavailable {
        tracing::warn!(error = %err, "metadata store unavailable");
        CatalogError::Unavailable("the metadata store is unavailable; retry later".into())
    } else {
        CatalogError::Internal(anyhow::Error::new(err).context("metadata store query failed"))
    }
}

/// True when `err` is a violation of the kind asked for.
fn is_violation(err: &sqlx::Error, kind: sqlx::error::ErrorKind) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.kind() == kind)
}

/// The name of the violated constraint, where the database reports it (PostgreSQL does, SQLite
/// does not).
fn constraint(err: &sqlx::Error) -> Option<&str> {
    match err {
        sqlx::Error::Database(db) => db.constraint(),
        _ => None,
    }
}

#[async_trait]
impl CatalogStore for SqlStore {
    fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }

    fn pool_stats(&self) -> PoolStats {
        PoolStats {
            size: self.pool.size(),
            idle: self.pool.num_idle() as u32,
            max: self.pool.options().get_max_connections(),
        }
    }

    async fn ping(&self) -> Result<(), CatalogError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map_err(db_error)?;
        Ok(())
    }

    async fn create_warehouse(
        &self,
        name: &WarehouseName,
        root: &StorageRoot,
        profile: &StorageProfile,
    ) -> Result<Warehouse, CatalogError> {
        warehouses::create(self, name, root, profile).await
    }

    async fn update_storage_profile(
        &self,
        name: &WarehouseName,
        profile: &StorageProfile,
    ) -> Result<Warehouse, CatalogError> {
        warehouses::update_profile(self, name, profile).await
    }

    async fn ensure_warehouse(&self, name: &WarehouseName, root: &StorageRoot) -> Result<Warehouse, CatalogError> {
        warehouses::ensure(self, name, root).await
    }

    async fn list_warehouses(&self, visible_to: Option<&str>) -> Result<Vec<Warehouse>, CatalogError> {
        warehouses::list(self, visible_to).await
    }

    async fn warehouse_by_name(&self, name: &WarehouseName) -> Result<Option<Warehouse>, CatalogError> {
        warehouses::by_name(self, name).await
    }

    async fn warehouse_by_id(&self, id: &str) -> Result<Option<Warehouse>, CatalogError> {
        warehouses::by_id(self, id).await
    }

    async fn delete_warehouse(&self, name: &WarehouseName) -> Result<(), CatalogError> {
        warehouses::delete(self, name).await
    }

    async fn create_namespace(
        &self,
        write: &WriteContext,
        warehouse_id: &str,
        namespace: &NamespaceIdent,
        properties: &Properties,
    ) -> Result<(), CatalogError> {
        namespaces::create(self, write, warehouse_id, namespace, properties).await
    }

    async fn list_namespaces(
        &self,
        warehouse_id: &str,
        parent: Option<&NamespaceIdent>,
        page: &PageRequest,
        visible_to: Option<&str>,
    ) -> Result<Page<NamespaceIdent>, CatalogError> {
        namespaces::list(self, warehouse_id, parent, page, visible_to).await
    }

    async fn load_namespace(
        &self,
        warehouse_id: &str,
        namespace: &NamespaceIdent,
    ) -> Result<Option<Properties>, CatalogError> {
        namespaces::load(self, warehouse_id, namespace).await
    }

    async fn namespace_exists(&self, warehouse_id: &str, namespace: &NamespaceIdent) -> Result<bool, CatalogError> {
        Ok(namespaces::id_of(&self.pool, warehouse_id, namespace).await?.is_some())
    }

    async fn drop_namespace(
        &self,
        write: &WriteContext,
        warehouse_id: &str,
        namespace: &NamespaceIdent,
    ) -> Result<(), CatalogError> {
        namespaces::drop(self, write, warehouse_id, namespace).await
    }

    async fn update_namespace_properties(
        &self,
        write: &WriteContext,
        warehouse_id: &str,
        namespace: &NamespaceIdent,
        updates: &Properties,
        removals: &[String],
    ) -> Result<PropertiesChange, CatalogError> {
        namespaces::update_properties(self, write, warehouse_id, namespace, updates, removals).await
    }

    async fn idempotency_record(&self, key: &IdempotencyKey) -> Result<Option<IdempotencyRecord>, CatalogError> {
        let row = sqlx::query(
            "SELECT operation, request_digest, status, body, created_at FROM idempotency_keys \
             WHERE principal = $1 AND key = $2",
        )
        .bind(&key.principal)
        .bind(&key.key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        let Some(row) = row else { return Ok(None) };
        use sqlx::Row;
        let status: Option<i64> = row.try_get("status").map_err(db_error)?;
        Ok(Some(IdempotencyRecord {
            operation: row.try_get("operation").map_err(db_error)?,
            request_digest: row.try_get("request_digest").map_err(db_error)?,
            status: status.and_then(|s| u16::try_from(s).ok()),
            body: row.try_get("body").map_err(db_error)?,
            created_at_ms: row.try_get("created_at").map_err(db_error)?,
        }))
    }

    async fn finalize_idempotency_key(
        &self,
        scope: &IdempotencyScope,
        status: u16,
        body: &str,
        keep_unreserved: bool,
    ) -> Result<Finalized, CatalogError> {
        // The row this request's own mutation wrote, if it committed one.
        let filled = sqlx::query(
            "UPDATE idempotency_keys SET status = $1, body = $2 \
             WHERE principal = $3 AND key = $4 AND reservation = $5 AND status IS NULL",
        )
        .bind(i64::from(status))
        .bind(body)
        .bind(&scope.key.principal)
        .bind(&scope.key.key)
        .bind(&scope.reservation)
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        if filled.rows_affected() == 1 {
            return Ok(Finalized::Filled);
        }
        if !keep_unreserved {
            return Ok(Finalized::NothingRecorded);
        }
        // A request that mutated nothing: its answer is final only if no other request with
        // the key got there first.
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (principal, key, operation, request_digest, status, body, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (principal, key) DO NOTHING",
        )
        .bind(&scope.key.principal)
        .bind(&scope.key.key)
        .bind(&scope.operation)
        .bind(&scope.request_digest)
        .bind(i64::from(status))
        .bind(body)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(if inserted.rows_affected() == 1 { Finalized::Inserted } else { Finalized::Taken })
    }

    async fn delete_idempotency_key(&self, key: &IdempotencyKey) -> Result<(), CatalogError> {
        sqlx::query("DELETE FROM idempotency_keys WHERE principal = $1 AND key = $2")
            .bind(&key.principal)
            .bind(&key.key)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn delete_idempotency_keys_before(&self, before_ms: i64) -> Result<u64, CatalogError> {
        let done = sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1")
            .bind(before_ms)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(done.rows_affected())
    }

    async fn create_tabular(&self, write: &WriteContext, tabular: &NewTabular<'_>) -> Result<String, CatalogError> {
        tabulars::create(self, write, tabular).await
    }

    async fn load_tabular(
        &self,
        warehouse_id: &str,
        namespace: &NamespaceIdent,
        name: &str,
        kind: TabularKind,
    ) -> Result<Option<Tabular>, CatalogError> {
        tabulars::load(self, warehouse_id, namespace, name, kind).await
    }

    async fn load_tabular_head(
        &self,
        warehouse_id: &str,
        namespace: &NamespaceIdent,
        name: &str,
        kind: TabularKind,
    ) -> Result<Option<TabularHead>, CatalogError> {
        let Some(heads) = &self.heads else {
            return tabulars::load_head(self, warehouse_id, namespace, name, kind).await;
        };
        let key = heads::key(warehouse_id, namespace, name, kind);
        let generation = match heads.lookup(&key) {
            heads::Lookup::Hit(head) => return Ok(Some(head)),
            heads::Lookup::Miss(generation) => generation,
        };
        let head = tabulars::load_head(self, warehouse_id, namespace, name, kind).await?;
        if let Some(head) = &head {
            heads.offer(generation, key, head);
        }
        Ok(head)
    }

    async fn swap_metadata(&self, write: &WriteContext, swaps: &[MetadataSwap]) -> Result<SwapOutcome, CatalogError> {
        let Some(heads) = self.heads.clone() else { return tabulars::swap(self, write, swaps).await };
        let (store, write, swaps) = (self.clone(), write.clone(), swaps.to_vec());
        icegate_catalog::tasks::detached(async move {
            let outcome = tabulars::swap(&store, &write, &swaps).await;
            heads.forget_ids(swaps.iter().map(|swap| swap.id.as_str()));
            outcome
        })
        .await?
    }

    async fn drop_tabular(
        &self,
        write: &WriteContext,
        warehouse_id: &str,
        namespace: &NamespaceIdent,
        name: &str,
        kind: TabularKind,
    ) -> Result<Option<Dropped>, CatalogError> {
        let Some(heads) = self.heads.clone() else {
            return tabulars::drop(self, write, warehouse_id, namespace, name, kind).await;
        };
        let (store, write, warehouse_id, namespace, name) =
            (self.clone(), write.clone(), warehouse_id.to_owned(), namespace.clone(), name.to_owned());
        icegate_catalog::tasks::detached(async move {
            let dropped = tabulars::drop(&store, &write, &warehouse_id, &namespace, &name, kind).await;
            heads.forget_key(&heads::key(&warehouse_id, &namespace, &name, kind));
            dropped
        })
        .await?
    }

    async fn recorded_locations(&self, tabular_id: &str) -> Result<Vec<String>, CatalogError> {
        tabulars::recorded_locations(self, tabular_id).await
    }

    async fn check_locations_free(
        &self,
        warehouse_id: &str,
        tabular: (&NamespaceIdent, &str),
        locations: &[String],
        exclude_id: Option<&str>,
    ) -> Result<(), CatalogError> {
        tabulars::check_locations_free(self, warehouse_id, tabular, locations, exclude_id).await
    }

    async fn reserve_locations(
        &self,
        warehouse_id: &str,
        namespace: &NamespaceIdent,
        name: &str,
        locations: &[String],
        until_ms: i64,
    ) -> Result<(), CatalogError> {
        tabulars::reserve(self, warehouse_id, namespace, name, locations, until_ms).await
    }

    async fn rename_tabular(
        &self,
        write: &WriteContext,
        warehouse_id: &str,
        kind: TabularKind,
        from: (&NamespaceIdent, &str),
        to: (&NamespaceIdent, &str),
    ) -> Result<(), CatalogError> {
        let Some(heads) = self.heads.clone() else {
            return tabulars::rename(self, write, warehouse_id, kind, from, to).await;
        };
        let (store, write, warehouse_id) = (self.clone(), write.clone(), warehouse_id.to_owned());
        let (from, to) = ((from.0.clone(), from.1.to_owned()), (to.0.clone(), to.1.to_owned()));
        icegate_catalog::tasks::detached(async move {
            let renamed =
                tabulars::rename(&store, &write, &warehouse_id, kind, (&from.0, &from.1), (&to.0, &to.1)).await;
            heads.forget_key(&heads::key(&warehouse_id, &from.0, &from.1, kind));
            heads.forget_key(&heads::key(&warehouse_id, &to.0, &to.1, kind));
            renamed
        })
        .await?
    }

    async fn list_tabulars(
        &self,
        warehouse_id: &str,
        namespace: &NamespaceIdent,
        kind: TabularKind,
        page: &PageRequest,
        visible_to: Option<&str>,
    ) -> Result<Page<String>, CatalogError> {
        tabulars::list(self, warehouse_id, namespace, kind, page, visible_to).await
    }
}

#[cfg(feature = "testing")]
pub mod testing;
