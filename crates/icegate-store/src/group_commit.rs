//! Group commit of metadata swaps: single-table commits that arrive while the database is busy
//! committing are swapped together in the next transaction, so they share one transaction and
//! one log sync.
//!
//! SQLite has one writer, and every transaction ends with a sync of its WAL (`synchronous =
//! FULL`: an acknowledged commit survives a power loss). One sync per commit bounds commits per
//! second by the disk's sync latency, which rises with whatever else the disk is writing (each
//! commit also writes a metadata file). PostgreSQL syncs its WAL for concurrent commits
//! together, but each commit was still a transaction of its own, with its round trips and its
//! backend's work, on cores it may share with the catalog (docs/benchmarks.md, "Fifth pass").
//!
//! A committer task takes every swap queued while the previous group committed and runs each
//! one's compare-and-swap (`tabulars::SWAP_SQL`) in one transaction; each swap still applies
//! only against its own expected metadata location, so a group is exactly as if its swaps ran
//! one after another (two of the same table: the second conflicts and its commit is staged again
//! on the first, as with any lost race). A group's swaps are independent commits: none waits
//! for another's outcome, and the engine answers each on its own.
//!
//! The group runs on a connection of the committer's own:
//! - SQLite: the database file, in one call on the blocking pool. Through sqlx each statement of
//!   the group (`BEGIN`, every `UPDATE`, `COMMIT`) is a round trip to the connection's worker
//!   thread (perf put that channel at 6% of a small commit's samples, and the thread wake-ups
//!   around such hand-offs at about 20%). The committer takes the same turn among this
//!   process's writers as any write transaction ([`SqlStore::write_turn`]).
//! - PostgreSQL: the store's URL (one connection more than the pool's), where the group is one
//!   statement, `icegate_swap_metadata` (migrations/postgres): one round trip and one implicit
//!   transaction, where `BEGIN`, an `UPDATE` per swap and `COMMIT` took two more round trips
//!   than it has swaps.
//!
//! If that connection does not open, the group runs through the pool (so does every group of an
//! in-memory SQLite database, which has no file to open); after a failure it is closed (which
//! rolls back what the failure left open) and opened afresh for the next group. If a group
//! fails, every swap of it gets the error; the commit engine then reads the rows back to learn
//! what applied.
//!
//! On PostgreSQL a group holds several rows' locks at once, so it takes them in the one order
//! every multi-row write of table and view rows takes them: by id, ascending
//! (`tabulars::lock_order`); two such writers never wait for each other in a cycle. It waits at
//! most 200 ms for a row another transaction holds (a drop, a rename, a multi-table commit,
//! another replica's group, an operator's session): the function's `lock_timeout`, and
//! [`POSTGRES_GROUP_BEGIN`]'s on the pool. So one busy table cannot hold up, for longer, the
//! commits of every other table queued behind it. When the server aborts a group on its own
//! accord — that lock timeout, a deadlock it detected, a serialization failure — nothing of it
//! applied (the server said so), and each of its swaps runs again alone, concurrently, off the
//! committer. No other failure is retried: a failure that leaves the outcome unknown (the
//! connection lost during the statement or at `COMMIT`) must reach the commit engine, which
//! reads the rows back. A swap retried after its group had in fact applied would conflict with
//! itself, and the engine would delete the metadata file the row now points at.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use icegate_catalog::CatalogError;
use icegate_catalog::store::{MetadataSwap, SwapOutcome};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};

use crate::tabulars::{SWAP_SQL, bind_swap, lock_order, swap_values};
use crate::{Backend, SqlStore, db_error, now_ms, store_unavailable};

/// At most this many swaps share a transaction.
const MAX_GROUP: usize = 64;

/// How a PostgreSQL group begins: in READ COMMITTED whatever the server's default (an `UPDATE`
/// that waited for a row then checks its expected location against the row as committed, and
/// cannot fail to serialize), waiting at most this long for any one row's lock before the server
/// aborts it and its swaps run alone (see the module documentation). Commits hold a row for
/// milliseconds; a wait this long means something else holds it.
pub(crate) const POSTGRES_GROUP_BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '200ms'";

type Reply = oneshot::Sender<Result<SwapOutcome, CatalogError>>;

/// The queue of swaps waiting for the committer (started with the first swap).
pub(crate) struct GroupCommit {
    queue: std::sync::OnceLock<mpsc::UnboundedSender<(MetadataSwap, Reply)>>,
    /// What the committer's own connection connects to (`None`: an in-memory database).
    own: Option<Own>,
    counts: Arc<Counts>,
}

/// The database the committer's own connection connects to.
#[derive(Clone)]
pub(crate) enum Own {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL server: its URL, and how long a connection may take to open.
    Postgres(String, Duration),
}

/// Groups committed on the committer's own connection, through the pool, and groups the
/// server aborted whose swaps then ran alone.
#[derive(Default)]
struct Counts {
    own: AtomicU64,
    pooled: AtomicU64,
    alone: AtomicU64,
}

/// How a group's transaction failed.
enum Failed {
    /// The server aborted it and said so (PostgreSQL: the group's lock timeout, a deadlock, a
    /// serialization failure): nothing of it applied, and its swaps may run again alone.
    Aborted(sqlx::Error),
    /// Anything else: whether it applied may be unknown.
    Other(CatalogError),
}

impl Failed {
    fn from_sqlx(err: sqlx::Error) -> Self {
        // 55P03: lock_not_available (the lock timeout); 40P01: deadlock_detected; 40001:
        // serialization_failure. The server rolled the transaction back in each case.
        let aborted = matches!(&err, sqlx::Error::Database(db)
            if db.code().is_some_and(|code| matches!(code.as_ref(), "55P03" | "40P01" | "40001")));
        if aborted { Self::Aborted(err) } else { Self::Other(db_error(err)) }
    }
}

impl GroupCommit {
    pub(crate) fn new(own: Option<Own>) -> Self {
        Self { queue: std::sync::OnceLock::new(), own, counts: Arc::default() }
    }

    /// Groups committed so far on the committer's own connection, and through the pool.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.counts.own.load(Ordering::Relaxed), self.counts.pooled.load(Ordering::Relaxed))
    }

    /// Groups the server aborted, whose swaps then ran alone.
    pub(crate) fn aborted(&self) -> u64 {
        self.counts.alone.load(Ordering::Relaxed)
    }

    /// Swaps `swap` in with the next group and answers how it ended.
    pub(crate) async fn swap(&self, store: &SqlStore, swap: MetadataSwap) -> Result<SwapOutcome, CatalogError> {
        let queue = self.queue.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            // The committer holds a store without this queue, so it ends when the last store
            // holding the queue is dropped.
            let writer = self.own.clone().map(|own| match own {
                Own::Sqlite(file) => Writer::Sqlite { file, connection: None },
                Own::Postgres(url, timeout) => Writer::Postgres { url, timeout, connection: None },
            });
            tokio::spawn(committer(store.without_group(), writer, self.counts.clone(), receiver));
            sender
        });
        let (reply, answer) = oneshot::channel();
        queue
            .send((swap, reply))
            .map_err(|_| CatalogError::Unavailable("the metadata store is shutting down; retry".into()))?;
        answer.await.map_err(|_| CatalogError::Unavailable("the metadata store is shutting down; retry".into()))?
    }
}

async fn committer(
    store: SqlStore,
    mut writer: Option<Writer>,
    counts: Arc<Counts>,
    mut queue: mpsc::UnboundedReceiver<(MetadataSwap, Reply)>,
) {
    while let Some(first) = queue.recv().await {
        let turn = store.write_turn().await;
        // Everything that queued up meanwhile goes in the same transaction.
        let mut swaps = vec![first.0];
        let mut replies = vec![first.1];
        while swaps.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok((swap, reply)) => {
                    swaps.push(swap);
                    replies.push(reply);
                }
                Err(_) => break,
            }
        }
        let swaps = Arc::new(swaps);
        let own = match writer.as_mut() {
            Some(writer) => writer.commit(swaps.clone()).await,
            None => None,
        };
        let outcomes = match own {
            Some(outcomes) => {
                counts.own.fetch_add(1, Ordering::Relaxed);
                outcomes
            }
            None => {
                counts.pooled.fetch_add(1, Ordering::Relaxed);
                commit_group(&store, &swaps).await
            }
        };
        drop(turn);
        match outcomes {
            Ok(outcomes) => {
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(Failed::Aborted(err)) => {
                counts.alone.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %err, swaps = swaps.len(), "the server aborted a group of swaps; running them alone");
                let swaps = Arc::try_unwrap(swaps).unwrap_or_else(|shared| (*shared).clone());
                for (swap, reply) in swaps.into_iter().zip(replies) {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let _ = reply.send(swap_alone(&store, &swap).await);
                    });
                }
            }
            Err(Failed::Other(err)) => {
                for reply in replies {
                    let _ = reply.send(Err(copy_error(&err)));
                }
            }
        }
    }
}

/// One swap in a transaction of its own (a single autocommit statement).
async fn swap_alone(store: &SqlStore, swap: &MetadataSwap) -> Result<SwapOutcome, CatalogError> {
    let done = bind_swap(swap, now_ms()).execute(&store.pool).await.map_err(db_error)?;
    Ok(if done.rows_affected() == 1 { SwapOutcome::Applied } else { SwapOutcome::Conflict(0) })
}

/// The committer's own connection, opened on first use.
enum Writer {
    Sqlite { file: PathBuf, connection: Option<Connection> },
    Postgres { url: String, timeout: Duration, connection: Option<sqlx::PgConnection> },
}

impl Writer {
    /// Runs the group's swaps on the committer's own connection. `None` when the connection
    /// does not open: the group is the pool's to run.
    async fn commit(&mut self, swaps: Arc<Vec<MetadataSwap>>) -> Option<Result<Vec<SwapOutcome>, Failed>> {
        match self {
            Self::Sqlite { file, connection } => commit_sqlite(file, connection, swaps).await,
            Self::Postgres { url, timeout, connection } => commit_postgres(url, *timeout, connection, &swaps).await,
        }
    }
}

/// The group in one transaction on the blocking pool.
async fn commit_sqlite(
    file: &Path,
    slot: &mut Option<Connection>,
    swaps: Arc<Vec<MetadataSwap>>,
) -> Option<Result<Vec<SwapOutcome>, Failed>> {
    let (file, connection) = (file.to_owned(), slot.take());
    let ran = tokio::task::spawn_blocking(move || {
        let mut connection = match connection {
            Some(connection) => connection,
            None => open(&file)?,
        };
        let outcomes = run_group(&mut connection, &swaps, now_ms());
        Ok::<_, rusqlite::Error>((connection, outcomes))
    })
    .await;
    match ran {
        Ok(Ok((connection, Ok(outcomes)))) => {
            *slot = Some(connection);
            Some(Ok(outcomes))
        }
        // Dropping the connection rolls back whatever the failure left open.
        Ok(Ok((_, Err(err)))) => Some(Err(Failed::Other(sqlite_error(err)))),
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "the group committer's SQLite connection does not open; committing through the pool");
            None
        }
        Err(err) => Some(Err(Failed::Other(CatalogError::Internal(anyhow::anyhow!(
            "committing a group of metadata swaps: {err}"
        ))))),
    }
}

/// The group in one statement: `icegate_swap_metadata` (migrations/postgres), which runs the
/// swaps in [`lock_order`] and answers which applied.
async fn commit_postgres(
    url: &str,
    timeout: Duration,
    slot: &mut Option<sqlx::PgConnection>,
    swaps: &[MetadataSwap],
) -> Option<Result<Vec<SwapOutcome>, Failed>> {
    use sqlx::Connection as _;
    let mut connection = match slot.take() {
        Some(connection) => connection,
        None => match tokio::time::timeout(timeout, sqlx::PgConnection::connect(url)).await {
            Ok(Ok(connection)) => connection,
            failed => {
                let error = match failed {
                    Ok(Err(err)) => err.to_string(),
                    _ => "timed out".to_owned(),
                };
                tracing::warn!(%error, "the group committer's PostgreSQL connection does not open; committing through the pool");
                return None;
            }
        },
    };
    let order = lock_order(swaps.iter());
    let column =
        |value: for<'a> fn(&'a MetadataSwap) -> &'a str| order.iter().map(|&i| value(&swaps[i])).collect::<Vec<_>>();
    let namespaces: Vec<String> = order.iter().map(|&i| swaps[i].namespace.encoded()).collect();
    let gzips: Vec<Option<&[u8]>> = order.iter().map(|&i| swaps[i].metadata_gzip.as_deref()).collect();
    let applied =
        sqlx::query_scalar::<_, Vec<bool>>("SELECT icegate_swap_metadata($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")
            .bind(column(|s| &s.id))
            .bind(column(|s| &s.expected_metadata_location))
            .bind(column(|s| &s.name))
            .bind(column(|s| &s.warehouse_id))
            .bind(namespaces)
            .bind(column(|s| &s.metadata_location))
            // A document stored compressed leaves the text column empty (as `swap_values`).
            .bind(column(|s| if s.metadata_gzip.is_some() { "" } else { &s.metadata }))
            .bind(gzips)
            .bind(column(|s| &s.location))
            .bind(now_ms())
            .fetch_one(&mut connection)
            .await;
    match applied {
        Ok(applied) if applied.len() == swaps.len() => {
            *slot = Some(connection);
            let mut outcomes = vec![SwapOutcome::Applied; swaps.len()];
            for (&index, applied) in order.iter().zip(applied) {
                if !applied {
                    outcomes[index] = SwapOutcome::Conflict(0);
                }
            }
            Some(Ok(outcomes))
        }
        Ok(applied) => Some(Err(Failed::Other(CatalogError::Internal(anyhow::anyhow!(
            "the group commit answered {} outcomes for {} swaps",
            applied.len(),
            swaps.len()
        ))))),
        Err(err) => {
            let failed = Failed::from_sqlx(err);
            // A statement the server aborted leaves the connection as it was; anything else
            // may not have (it is closed, and opened afresh for the next group).
            if matches!(failed, Failed::Aborted(_)) {
                *slot = Some(connection);
            } else {
                drop(connection);
            }
            Some(Err(failed))
        }
    }
}

/// As the pool's connections are (`SqlStore::open`), and with every commit's WAL synced before
/// it is acknowledged, as sqlx's default `synchronous = FULL` does for theirs.
fn open(file: &Path) -> rusqlite::Result<Connection> {
    // No CREATE: the pool created and migrated the database before any swap.
    let connection =
        Connection::open_with_flags(file, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    connection.busy_timeout(Duration::from_secs(10))?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.pragma_update(None, "foreign_keys", true)?;
    Ok(connection)
}

/// [`commit_group`] on the committer's connection.
fn run_group(connection: &mut Connection, swaps: &[MetadataSwap], now: i64) -> rusqlite::Result<Vec<SwapOutcome>> {
    let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut outcomes = Vec::with_capacity(swaps.len());
    {
        let mut statement = tx.prepare_cached(SWAP_SQL)?;
        for swap in swaps {
            let changed = statement.execute(swap_values(swap, now))?;
            outcomes.push(if changed == 1 { SwapOutcome::Applied } else { SwapOutcome::Conflict(0) });
        }
    }
    tx.commit()?;
    Ok(outcomes)
}

/// As `db_error` for sqlx's: busy after the timeout is unavailable, the rest internal.
fn sqlite_error(err: rusqlite::Error) -> CatalogError {
    let busy = matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    if busy {
        store_unavailable(&err)
    } else {
        CatalogError::Internal(anyhow::Error::new(err).context("committing a group of metadata swaps failed"))
    }
}

/// Runs every swap's compare-and-swap in one transaction: each applies or conflicts on its own.
/// Rows are taken in [`lock_order`], outcomes answered in the group's order.
async fn commit_group(store: &SqlStore, swaps: &[MetadataSwap]) -> Result<Vec<SwapOutcome>, Failed> {
    let begin = match store.backend {
        Backend::Sqlite => "BEGIN IMMEDIATE",
        Backend::Postgres => POSTGRES_GROUP_BEGIN,
    };
    let mut tx = store.pool.begin_with(begin).await.map_err(Failed::from_sqlx)?;
    let now = now_ms();
    let mut outcomes = vec![SwapOutcome::Applied; swaps.len()];
    for index in lock_order(swaps.iter()) {
        let done = bind_swap(&swaps[index], now).execute(&mut *tx).await;
        // Dropping the transaction rolls it back (before the connection is used again).
        let done = done.map_err(Failed::from_sqlx)?;
        if done.rows_affected() != 1 {
            outcomes[index] = SwapOutcome::Conflict(0);
        }
    }
    tx.commit().await.map_err(Failed::from_sqlx)?;
    Ok(outcomes)
}

/// The same error for each swap of a failed group (errors are not `Clone`).
fn copy_error(err: &CatalogError) -> CatalogError {
    match err {
        CatalogError::Unavailable(message) => CatalogError::Unavailable(message.clone()),
        other => CatalogError::Internal(anyhow::anyhow!("committing a group of metadata swaps failed: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database error with the SQLSTATE `code`, as the server sends it.
    #[derive(Debug)]
    struct Server(&'static str);

    impl std::fmt::Display for Server {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "server error {}", self.0)
        }
    }

    impl std::error::Error for Server {}

    impl sqlx::error::DatabaseError for Server {
        fn message(&self) -> &str {
            "server error"
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn aborted(err: sqlx::Error) -> bool {
        matches!(Failed::from_sqlx(err), Failed::Aborted(_))
    }

    /// Only what the server says it rolled back runs again alone; a lost connection (the
    /// `COMMIT` may have applied), a shutdown or any other failure goes to the commit engine.
    #[test]
    fn only_groups_the_server_aborted_run_again() {
        for code in ["55P03", "40P01", "40001"] {
            assert!(aborted(sqlx::Error::Database(Box::new(Server(code)))), "{code}");
        }
        for code in ["08006", "57P01", "57014", "23505", "5", "XX000"] {
            assert!(!aborted(sqlx::Error::Database(Box::new(Server(code)))), "{code}");
        }
        assert!(!aborted(sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset))));
        assert!(!aborted(sqlx::Error::PoolTimedOut));
    }
}
