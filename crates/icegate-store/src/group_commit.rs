//! Group commit of SQLite metadata swaps: single-table commits that arrive while the database
//! is busy committing are swapped together in the next transaction, so they share one WAL sync.
//!
//! SQLite has one writer, and every transaction ends with a sync of its WAL (`synchronous =
//! FULL`: an acknowledged commit survives a power loss). One sync per commit bounds commits per
//! second by the disk's sync latency, which rises with whatever else the disk is writing (each
//! commit also writes a metadata file). Here a committer task takes every swap queued while
//! the previous group committed, runs each one's compare-and-swap `UPDATE` in one transaction
//! and syncs once; each swap still applies only against its own expected metadata location, so
//! a group is exactly as if its swaps ran one after another (two of the same table: the second
//! conflicts and its commit is staged again on the first, as with any lost race).
//!
//! The committer takes the same turn among this process's writers as any write transaction
//! ([`SqlStore::write_turn`]). If the transaction fails, every swap of the group gets the error;
//! the commit engine then reads the rows back to learn what applied.
//!
//! On a database file the group runs on a connection of the committer's own, in one call on
//! the blocking pool: through sqlx each statement of the group (`BEGIN`, every `UPDATE`,
//! `COMMIT`) is a round trip to the connection's worker thread (perf put that channel at 6% of
//! a small commit's samples, and the thread wake-ups around such hand-offs at about 20%). If
//! that connection does not open, the group runs through sqlx; after any failure it is closed,
//! which rolls back, and opened afresh for the next group. An in-memory database has no file to
//! open: its groups run through sqlx.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use icegate_catalog::CatalogError;
use icegate_catalog::store::{MetadataSwap, SwapOutcome};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};

use crate::tabulars::{SWAP_SQL, swap_values};
use crate::{SqlStore, db_error, now_ms, store_unavailable};

/// At most this many swaps share a transaction.
const MAX_GROUP: usize = 64;

type Reply = oneshot::Sender<Result<SwapOutcome, CatalogError>>;

/// The queue of swaps waiting for the committer (started with the first swap).
pub(crate) struct GroupCommit {
    queue: std::sync::OnceLock<mpsc::UnboundedSender<(MetadataSwap, Reply)>>,
    /// The database file, for the committer's own connection (`None`: in memory).
    file: Option<PathBuf>,
    counts: Arc<Counts>,
}

/// Groups committed on the committer's own connection, and through the pool.
#[derive(Default)]
struct Counts {
    own: AtomicU64,
    pooled: AtomicU64,
}

impl GroupCommit {
    pub(crate) fn new(file: Option<&Path>) -> Self {
        Self { queue: std::sync::OnceLock::new(), file: file.map(Path::to_owned), counts: Arc::default() }
    }

    /// Groups committed so far on the committer's own connection, and through the pool.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.counts.own.load(Ordering::Relaxed), self.counts.pooled.load(Ordering::Relaxed))
    }

    /// Swaps `swap` in with the next group and answers how it ended.
    pub(crate) async fn swap(&self, store: &SqlStore, swap: MetadataSwap) -> Result<SwapOutcome, CatalogError> {
        let queue = self.queue.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            // The committer holds a store without this queue, so it ends when the last store
            // holding the queue is dropped.
            let writer = self.file.clone().map(|file| Writer { file, connection: None });
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
            Err(err) => {
                for reply in replies {
                    let _ = reply.send(Err(copy_error(&err)));
                }
            }
        }
    }
}

/// The committer's own connection to the database file, opened on first use.
struct Writer {
    file: PathBuf,
    connection: Option<Connection>,
}

impl Writer {
    /// Runs the group's swaps in one transaction on the blocking pool. `None` when the
    /// connection does not open: the group is the pool's to run.
    async fn commit(&mut self, swaps: Arc<Vec<MetadataSwap>>) -> Option<Result<Vec<SwapOutcome>, CatalogError>> {
        let (file, connection) = (self.file.clone(), self.connection.take());
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
                self.connection = Some(connection);
                Some(Ok(outcomes))
            }
            // Dropping the connection rolls back whatever the failure left open.
            Ok(Ok((_, Err(err)))) => Some(Err(sqlite_error(err))),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "the group committer's SQLite connection does not open; committing through the pool");
                None
            }
            Err(err) => {
                Some(Err(CatalogError::Internal(anyhow::anyhow!("committing a group of metadata swaps: {err}"))))
            }
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
async fn commit_group(store: &SqlStore, swaps: &[MetadataSwap]) -> Result<Vec<SwapOutcome>, CatalogError> {
    let mut tx = store.pool.begin_with("BEGIN IMMEDIATE").await.map_err(db_error)?;
    let now = now_ms();
    let mut outcomes = Vec::with_capacity(swaps.len());
    for swap in swaps {
        let done = crate::tabulars::bind_swap(swap, now).execute(&mut *tx).await.map_err(db_error)?;
        outcomes.push(if done.rows_affected() == 1 { SwapOutcome::Applied } else { SwapOutcome::Conflict(0) });
    }
    tx.commit().await.map_err(db_error)?;
    Ok(outcomes)
}

/// The same error for each swap of a failed group (errors are not `Clone`).
fn copy_error(err: &CatalogError) -> CatalogError {
    match err {
        CatalogError::Unavailable(message) => CatalogError::Unavailable(message.clone()),
        other => CatalogError::Internal(anyhow::anyhow!("committing a group of metadata swaps failed: {other}")),
    }
}
