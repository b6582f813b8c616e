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

use icegate_catalog::CatalogError;
use icegate_catalog::store::{MetadataSwap, SwapOutcome};
use tokio::sync::{mpsc, oneshot};

use crate::{SqlStore, db_error, now_ms};

/// At most this many swaps share a transaction.
const MAX_GROUP: usize = 64;

type Reply = oneshot::Sender<Result<SwapOutcome, CatalogError>>;

/// The queue of swaps waiting for the committer (started with the first swap).
#[derive(Default)]
pub(crate) struct GroupCommit {
    queue: std::sync::OnceLock<mpsc::UnboundedSender<(MetadataSwap, Reply)>>,
}

impl GroupCommit {
    /// Swaps `swap` in with the next group and answers how it ended.
    pub(crate) async fn swap(&self, store: &SqlStore, swap: MetadataSwap) -> Result<SwapOutcome, CatalogError> {
        let queue = self.queue.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            // The committer holds a store without this queue, so it ends when the last store
            // holding the queue is dropped.
            tokio::spawn(committer(store.without_group(), receiver));
            sender
        });
        let (reply, answer) = oneshot::channel();
        queue
            .send((swap, reply))
            .map_err(|_| CatalogError::Unavailable("the metadata store is shutting down; retry".into()))?;
        answer.await.map_err(|_| CatalogError::Unavailable("the metadata store is shutting down; retry".into()))?
    }
}

async fn committer(store: SqlStore, mut queue: mpsc::UnboundedReceiver<(MetadataSwap, Reply)>) {
    while let Some(first) = queue.recv().await {
        let turn = store.write_turn().await;
        // Everything that queued up meanwhile goes in the same transaction.
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let swaps: Vec<&MetadataSwap> = group.iter().map(|(swap, _)| swap).collect();
        let outcomes = commit_group(&store, &swaps).await;
        drop(turn);
        match outcomes {
            Ok(outcomes) => {
                for ((_, reply), outcome) in group.into_iter().zip(outcomes) {
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(err) => {
                for (_, reply) in group {
                    let _ = reply.send(Err(copy_error(&err)));
                }
            }
        }
    }
}

/// Runs every swap's compare-and-swap in one transaction: each applies or conflicts on its own.
async fn commit_group(store: &SqlStore, swaps: &[&MetadataSwap]) -> Result<Vec<SwapOutcome>, CatalogError> {
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
