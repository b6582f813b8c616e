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
mod adoption;
pub mod audit;
mod database;
mod group_commit;
mod heads;
mod holds;
mod idempotency;
mod locations;
mod maintenance;
mod migration;
mod namespaces;
pub mod sources;
mod sqlite_reads;
mod tabulars;
mod tasks;
mod warehouses;

use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::store::{Page, PageRequest, PoolStats};
use icegate_catalog::{CatalogError, CatalogStore};
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::migrate::Migrator;
use sqlx::{Any, AnyPool, Executor, Transaction};

pub use database::{Backend, Database};

static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/postgres");
static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../../migrations/sqlite");
/// Serialises installing the group commit function (`SqlStore::migrate`).
const GROUP_FUNCTION_LOCK: i64 = 7_598_805_577_148_362_614;

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
    /// SQLite only: the turn of this process's write transactions (see [`SqlStore::begin_write`]).
    writers: Option<std::sync::Arc<tokio::sync::Mutex<()>>>,
    /// Single-table metadata swaps committed in groups (see `group_commit`).
    group: Option<std::sync::Arc<group_commit::GroupCommit>>,
    /// Records of requests that are not changes, appended in groups (see `audit::Recorder`).
    recorder: std::sync::Arc<audit::Recorder>,
    /// The database the URL named, for messages and a direct connection attempt.
    database: std::sync::Arc<(Database, std::time::Duration)>,
    /// The time rows are stamped with and expiries are judged by.
    clock: icegate_catalog::clock::SharedClock,
}

/// A write transaction, holding its turn among this process's SQLite writers until it commits
/// or rolls back. Statements run on it as on the transaction's connection (`&mut *tx`).
pub(crate) struct WriteTx {
    tx: Transaction<'static, Any>,
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl std::ops::Deref for WriteTx {
    type Target = sqlx::AnyConnection;

    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

impl WriteTx {
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }

    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        self.tx.rollback().await
    }
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
        let writers = (backend == Backend::Sqlite).then(std::sync::Arc::default);
        let own = match (backend, database.sqlite_file()) {
            (Backend::Postgres, _) => {
                Some(group_commit::Own::Postgres(database.url().to_owned(), options.acquire_timeout))
            }
            (Backend::Sqlite, Some(file)) => Some(group_commit::Own::Sqlite(file.to_owned())),
            (Backend::Sqlite, None) => None,
        };
        let group = Some(std::sync::Arc::new(group_commit::GroupCommit::new(own)));
        let database = std::sync::Arc::new((database, options.acquire_timeout));
        let clock = icegate_catalog::clock::system();
        let recorder = std::sync::Arc::default();
        Ok(Self { pool, backend, heads, reads, _owner: owner, writers, group, recorder, database, clock })
    }

    /// SQLite: how many reads ran in place on the request's thread, and how many were handed
    /// to the pool instead (see `sqlite_reads`). `None` on PostgreSQL or an in-memory database.
    pub fn in_place_reads(&self) -> Option<(u64, u64)> {
        self.reads.as_ref().map(|reads| reads.counts())
    }

    /// How many groups of metadata swaps were committed on the group committer's own SQLite
    /// connection, and how many through the pool (see `group_commit`).
    pub fn group_commits(&self) -> Option<(u64, u64)> {
        self.group.as_ref().map(|group| group.counts())
    }

    /// How many single-table metadata swaps ran alone rather than in their group (PostgreSQL:
    /// another transaction held their row, or the server aborted their group; see
    /// `group_commit`).
    pub fn swaps_run_alone(&self) -> u64 {
        self.group.as_ref().map_or(0, |group| group.alone())
    }

    pub fn backend_kind(&self) -> Backend {
        self.backend
    }

    /// The same store on another clock (tests: hold periods and expiries without waiting).
    #[must_use]
    pub fn with_clock(mut self, clock: icegate_catalog::clock::SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Now, by the store's clock (ms since the epoch).
    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Connects once, or says why not: which database (host, port, name, user) and the cause
    /// (the pool reports only that it timed out, so a direct attempt is made to learn why).
    pub async fn check_connection(&self) -> anyhow::Result<()> {
        let Err(err) = self.pool.acquire().await else {
            return Ok(());
        };
        let (database, timeout) = &*self.database;
        let cause = match (&err, self.backend) {
            (sqlx::Error::PoolTimedOut, Backend::Postgres) => {
                use sqlx::Connection;
                match tokio::time::timeout(*timeout, sqlx::postgres::PgConnection::connect(database.url())).await {
                    Ok(Err(direct)) => direct.to_string(),
                    Ok(Ok(connection)) => {
                        let _ = connection.close().await;
                        format!("{err} (a direct connection succeeded: is database.max_connections too low?)")
                    }
                    Err(_) => format!("no answer within {} s", timeout.as_secs_f32()),
                }
            }
            _ => err.to_string(),
        };
        anyhow::bail!("cannot connect to {}: {cause}", database.describe())
    }

    /// Applies pending migrations. On PostgreSQL sqlx holds an advisory lock while it migrates,
    /// so replicas starting together apply each migration exactly once; on SQLite the database
    /// file's write lock serialises them.
    /// On PostgreSQL it then installs the group commit's function, generated from the swap's
    /// statements (`tabulars::swap`), under a name of its own definition (servers of this
    /// version find it, those of others find theirs) and with its search path pinned to the
    /// tables' schema.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        let migrator = match self.backend {
            Backend::Postgres => &POSTGRES_MIGRATIONS,
            Backend::Sqlite => &SQLITE_MIGRATIONS,
        };
        migrator.run(&self.pool).await.context("running database migrations")?;
        if self.backend == Backend::Postgres {
            let group = &*tabulars::swap::POSTGRES_GROUP;
            let mut tx = self.pool.begin().await.context("installing the group commit function")?;
            // Replicas starting together would otherwise replace it at once (and one fail).
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT pg_advisory_xact_lock({GROUP_FUNCTION_LOCK})")))
                .execute(&mut *tx)
                .await
                .context("installing the group commit function")?;
            // Pinned to the schema the migrations made the tables in (see `GroupFunction`).
            let schema: String =
                sqlx::query_scalar("SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'tabulars'::regclass")
                    .fetch_one(&mut *tx)
                    .await
                    .context("finding the schema of the catalog's tables")?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(group.create_in(&schema)))
                .execute(&mut *tx)
                .await
                .context("installing the group commit function")?;
            tx.commit().await.context("installing the group commit function")?;
        }
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Begins a transaction that will write. SQLite must take its write lock up front
    /// (`BEGIN IMMEDIATE`): a deferred transaction that reads and then writes can fail with
    /// SQLITE_BUSY at once when another writer got there first, instead of waiting its turn.
    ///
    /// SQLite has one writer at a time, so this process's write transactions take turns first,
    /// in arrival order (a fair async mutex), before taking a connection: they queue here
    /// instead of in SQLite's busy handler, which sleeps between retries (1, 2, 5, 10, ... ms)
    /// and can let a writer wait on after the lock was free, and they hold no pooled connection
    /// while they wait. (Measured at 16 writers on 100-snapshot tables, the commit p99 stayed
    /// where it was, ~330 ms: that tail is the queue itself; docs/benchmarks.md.) Writers of
    /// other processes (`icegate migrate`, a second tool) still meet the busy handler.
    async fn begin_write(&self) -> Result<WriteTx, CatalogError> {
        let turn = self.write_turn().await;
        // PostgreSQL: read committed whatever the server's default: every write ends by taking
        // the audit chain's head row (see `audit`), which under repeatable read would fail to
        // serialize whenever another write moved it since the transaction's snapshot.
        let tx = match self.backend {
            Backend::Postgres => self.pool.begin_with("BEGIN ISOLATION LEVEL READ COMMITTED").await,
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
        };
        Ok(WriteTx { tx: tx.map_err(db_error)?, _turn: turn })
    }
}

impl SqlStore {
    /// The same store without its group-commit queue (what the committer itself holds).
    pub(crate) fn without_group(&self) -> Self {
        Self { group: None, ..self.clone() }
    }

    /// SQLite: this process's turn to write (see [`begin_write`](Self::begin_write)), held until
    /// dropped; `None` on PostgreSQL, whose row locks order writers.
    pub(crate) async fn write_turn(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        match &self.writers {
            Some(writers) => Some(writers.clone().lock_owned().await),
            None => None,
        }
    }

    /// Commits a write transaction, first recording the request's idempotency key in it (if the
    /// request carries one), with the request's reservation: the key and the mutation become
    /// visible together or not at all, and a concurrent duplicate fails on the key's primary
    /// key instead of applying twice. Then the change's audit record (see `audit`).
    pub(crate) async fn commit_write(&self, tx: WriteTx, write: &WriteContext) -> Result<(), CatalogError> {
        self.commit_write_or(tx, write, db_error).await
    }

    /// [`commit_write`](Self::commit_write) of a change whose record names what it made
    /// (`change`: the object and what happened to it).
    pub(crate) async fn commit_write_changed(
        &self,
        tx: WriteTx,
        write: &WriteContext,
        change: &audit::Change,
        failed: fn(sqlx::Error) -> CatalogError,
    ) -> Result<(), CatalogError> {
        self.commit_write_with(tx, write, Some(change), failed).await
    }

    /// [`commit_write`](Self::commit_write), with `failed` saying what a failed `COMMIT` means.
    async fn commit_write_or(
        &self,
        tx: WriteTx,
        write: &WriteContext,
        failed: fn(sqlx::Error) -> CatalogError,
    ) -> Result<(), CatalogError> {
        self.commit_write_with(tx, write, None, failed).await
    }

    async fn commit_write_with(
        &self,
        mut tx: WriteTx,
        write: &WriteContext,
        change: Option<&audit::Change>,
        failed: fn(sqlx::Error) -> CatalogError,
    ) -> Result<(), CatalogError> {
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
            .bind(self.now_ms())
            .execute(&mut *tx)
            .await;
            if let Err(e) = inserted {
                let _ = tx.rollback().await;
                return Err(taken_or_failed(e, || CatalogError::IdempotencyKeyUsed));
            }
        }
        // The change's record, last: nothing is applied without it (see `audit`).
        let entry = match change {
            Some(change) => audit::entry_changed(write, self.now_ms(), change),
            None => audit::entry(write, self.now_ms()),
        };
        if let Some(entry) = entry
            && let Err(err) = audit::append(&mut tx, self.backend, &[&entry]).await
        {
            let _ = tx.rollback().await;
            return Err(err);
        }
        tx.commit().await.map_err(failed)
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
        store_unavailable(&err)
    } else {
        CatalogError::Internal(anyhow::Error::new(err).context("metadata store query failed"))
    }
}

/// Whether a failed statement may still change the database: the database may have received it
/// and, having lost its client, go on to commit it later (an I/O, TLS or protocol failure, or
/// the server ending the session before it answered: severity FATAL, SQLSTATE 08xxx or
/// 57P0x). A statement the server answered with an error (it rolled it back and answered) or
/// that never left (no connection was to be had) is settled. Only an autocommit statement or a
/// `COMMIT` can commit: a transaction whose connection failed before its `COMMIT` never will.
fn may_still_apply(err: &sqlx::Error) -> bool {
    use sqlx::Error as E;
    match err {
        // Never sent: no connection was to be had, or the statement could not be encoded.
        E::PoolTimedOut | E::PoolClosed | E::Configuration(_) | E::Encode(_) => false,
        E::Database(db) => ends_session(db.as_ref()),
        // Anything else may have come after the statement left (a reply that did not decode,
        // a lost connection): not known to be settled.
        _ => true,
    }
}

/// A database error that ended the session rather than answer a statement (PostgreSQL).
fn ends_session(db: &dyn sqlx::error::DatabaseError) -> bool {
    use sqlx::postgres::{PgDatabaseError, PgSeverity};
    let fatal = db
        .try_downcast_ref::<PgDatabaseError>()
        .is_some_and(|pg| matches!(pg.severity(), PgSeverity::Fatal | PgSeverity::Panic));
    fatal || db.code().is_some_and(|code| code.starts_with("08") || code.starts_with("57P0"))
}

/// A PostgreSQL statement the server answered with an error (severity ERROR): it rolled the
/// statement back, and its transaction with it; nothing of it applied.
fn refused_by_postgres(err: &sqlx::Error) -> bool {
    use sqlx::postgres::PgDatabaseError;
    matches!(err, sqlx::Error::Database(db)
        if db.try_downcast_ref::<PgDatabaseError>().is_some() && !ends_session(db.as_ref()))
}

/// The failure of a statement that could commit a row pointing at a new metadata file (an
/// autocommit swap, or the `COMMIT` of a swap or of a new table or view): when it may still
/// apply, `CommitStateUnknown`, which the catalog answers as is, keeping the new files, rather
/// than read the rows (or delete the file) while the database could still change them;
/// otherwise as [`db_error`] (and the commit engine reads the rows back).
fn swap_error(err: sqlx::Error) -> CatalogError {
    if may_still_apply(&err) {
        tracing::error!(error = %err, "a metadata swap's statement failed and may still apply");
        CatalogError::commit_state_unknown("the metadata store's connection failed")
    } else {
        db_error(err)
    }
}

/// The database cannot be reached (or stayed busy): logged in full, answered as retryable.
fn store_unavailable(err: &dyn std::fmt::Display) -> CatalogError {
    tracing::warn!(error = %err, "metadata store unavailable");
    CatalogError::Unavailable("the metadata store is unavailable; retry later".into())
}

/// True when `err` is a violation of the kind asked for.
fn is_violation(err: &sqlx::Error, kind: sqlx::error::ErrorKind) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.kind() == kind)
}

/// A failed write: a unique-key violation is what `taken` says (a name or key in use, usually a
/// 409), anything else a database failure.
fn taken_or_failed(err: sqlx::Error, taken: impl FnOnce() -> CatalogError) -> CatalogError {
    if is_violation(&err, sqlx::error::ErrorKind::UniqueViolation) { taken() } else { db_error(err) }
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
}

#[cfg(feature = "testing")]
pub mod faults;
#[cfg(feature = "testing")]
pub mod testing;
