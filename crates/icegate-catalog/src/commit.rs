//! The commit engine of tables and views: write the new metadata file, then compare-and-swap
//! the row; on a lost race delete the file and stage again on the winner's metadata.
//!
//! What differs between tables and views — reading the current state, deciding who may
//! commit, checking requirements, applying updates, what to do once committed — is a
//! [`MetadataKind`]. Everything else is here, once:
//! - a commit runs on its own task, so a cancelled request cannot stop it between writing its
//!   file and swapping it in;
//! - locations a commit gives the table or view are placement-checked before its file is
//!   written (the file could land in another table's directory), and the swap checks overlap
//!   again, atomically;
//! - a failed file write says that nothing was committed, and the file goes in the background
//!   (the write may still land);
//! - a lost race deletes the losing files and retries with a short, growing pause, up to
//!   [`MAX_COMMIT_ATTEMPTS`];
//! - a swap refused before anything changed deletes the files and answers the refusal;
//! - a swap that failed in the database is resolved by reading the rows back, by id: applied
//!   (answered as committed), not applied (files deleted, the error answered), or unknowable
//!   (`CommitStateUnknown`, files kept: the row may point at them); a store that answers
//!   `CommitStateUnknown` itself is not read back (the database may still apply the swap: the
//!   store answers any other error only once the failed statement can change nothing more).
//!
//! Commits in flight share a memory budget ([`crate::commit_budget::CommitBudget`], `catalog.commit_memory_bytes`):
//! a commit of a table with a large document holds its new document, its compressed form and
//! the buffers that made them until it is answered, so a burst of such commits waits for room
//! rather than grow the process without bound.

use std::future::Future;
use std::time::Duration;

use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::service::Catalog;
use crate::store::{MetadataSwap, SwapOutcome, Warehouse};
use crate::tables::TableIdent;

/// How often a commit that lost a race is staged again on the new metadata before giving up
/// with 409.
pub(crate) const MAX_COMMIT_ATTEMPTS: usize = 16;

/// One table's or view's commit, prepared but not yet swapped in.
pub(crate) struct Staged<E> {
    pub ident: TableIdent,
    /// Locations the commit gives it that it did not have (placement-checked before writing).
    pub new_locations: Vec<String>,
    /// `None` when nothing changes (a commit without updates).
    pub swap: Option<MetadataSwap>,
    /// What the kind needs once the swap applied.
    pub extra: E,
}

/// What staging decided.
pub(crate) enum Staging<E, R> {
    /// Swap these in, together.
    Swap(Vec<Staged<E>>),
    /// Answered without a swap (a table created by its `assert-create` commit).
    Done(Vec<R>),
}

/// What a commit of one kind of metadata does that the engine does not.
pub(crate) trait MetadataKind: Send + Sync + 'static {
    type Change: Send + Sync + 'static;
    type Extra: Send + Sync;
    type Output: Send + 'static;

    /// Reads each change's current state, decides whether the caller may make it, checks its
    /// requirements and applies its updates.
    fn stage(
        &self,
        catalog: &Catalog,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        changes: &[Self::Change],
    ) -> impl Future<Output = Result<Staging<Self::Extra, Self::Output>>> + Send;

    /// After the swap applied (or was found to have applied): caches, clean-up, the answer.
    fn applied(
        &self,
        catalog: &Catalog,
        warehouse: &Warehouse,
        staged: Staged<Self::Extra>,
    ) -> impl Future<Output = Self::Output> + Send;

    /// The 409 after [`MAX_COMMIT_ATTEMPTS`] lost races.
    fn gave_up(&self) -> CatalogError;
}

/// A storage failure before the swap: say that nothing changed, so the client may retry.
pub(crate) fn not_committed(err: CatalogError) -> CatalogError {
    match err {
        CatalogError::Unavailable(message) => {
            CatalogError::Unavailable(format!("{message}; nothing was committed, the request can be retried"))
        }
        other => other,
    }
}

impl Catalog {
    /// Commits `changes`, atomically, on a task of its own.
    pub(crate) async fn run_commit<K: MetadataKind>(
        &self,
        ctx: &RequestContext,
        warehouse: Warehouse,
        kind: K,
        changes: Vec<K::Change>,
    ) -> Result<Vec<K::Output>> {
        let (catalog, ctx) = (self.clone(), ctx.clone());
        crate::detach::run_to_completion(
            async move { catalog.commit_attempts(&ctx, &warehouse, &kind, &changes).await },
        )
        .await?
    }

    async fn commit_attempts<K: MetadataKind>(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        kind: &K,
        changes: &[K::Change],
    ) -> Result<Vec<K::Output>> {
        for attempt in 0..MAX_COMMIT_ATTEMPTS {
            let staged = match kind.stage(self, ctx, warehouse, changes).await? {
                Staging::Done(outputs) => return Ok(outputs),
                Staging::Swap(staged) => staged,
            };
            for commit in staged.iter().filter(|s| !s.new_locations.is_empty()) {
                let ident = &commit.ident;
                self.check_placement(ctx, warehouse, &ident.namespace, &commit.new_locations).await?;
                let id = commit.swap.as_ref().map(|swap| &swap.id);
                let tabular = (&ident.namespace, ident.name.as_str());
                self.store()
                    .check_locations_free(&ctx.write(), &warehouse.id, tabular, &commit.new_locations, id)
                    .await?;
            }
            let swaps: Vec<&MetadataSwap> = staged.iter().filter_map(|s| s.swap.as_ref()).collect();
            for (index, swap) in swaps.iter().enumerate() {
                if let Err(err) = self
                    .files()
                    .write_new(warehouse, &swap.metadata_location, crate::files::shared_bytes(&swap.metadata))
                    .await
                {
                    // The failed write itself may still land (a timed-out request the store
                    // completes later): its file goes too, in the background.
                    let unused = swaps[..=index].iter().map(|s| s.metadata_location.clone()).collect();
                    self.delete_in_background(warehouse, unused);
                    return Err(not_committed(err));
                }
            }
            let written: Vec<String> = swaps.iter().map(|s| s.metadata_location.clone()).collect();
            let owned: Vec<MetadataSwap> = swaps.iter().map(|s| (*s).clone()).collect();
            let outcome = if owned.is_empty() {
                Ok(SwapOutcome::Applied)
            } else {
                self.store().swap_metadata(&ctx.write(), &owned).await
            };
            match outcome {
                Ok(SwapOutcome::Applied) => return Ok(self.all_applied(kind, warehouse, staged).await),
                Ok(SwapOutcome::Conflict(index)) => {
                    for location in &written {
                        self.delete_quietly(warehouse, location).await;
                    }
                    let lost = staged.iter().filter(|s| s.swap.is_some()).nth(index).map(|s| s.ident.to_string());
                    tracing::debug!(attempt, what = ?lost, "commit lost a race; staging again");
                    // A short, growing pause spreads out writers that keep colliding.
                    let pause = (attempt as u64 + 1) * (attempt as u64 + 1);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                // Refused before anything changed (a location now overlaps another's).
                Err(err @ (CatalogError::BadRequest(_) | CatalogError::NotFound { .. })) => {
                    self.delete_in_background(warehouse, written);
                    return Err(err);
                }
                // The store itself cannot tell (it gave up waiting for the database, which may
                // still apply the swap): reading the rows now could race that, so the files stay.
                Err(err @ CatalogError::CommitStateUnknown(_)) => return Err(err),
                // The database failed during the swap: learn from the rows whether it applied.
                Err(err) => {
                    tracing::warn!(error = ?err, "metadata swap failed; checking whether it applied");
                    return match self.resolve_failed_swap::<K>(warehouse, &staged).await? {
                        true => Ok(self.all_applied(kind, warehouse, staged).await),
                        false => Err(err),
                    };
                }
            }
        }
        Err(kind.gave_up())
    }

    async fn all_applied<K: MetadataKind>(
        &self,
        kind: &K,
        warehouse: &Warehouse,
        staged: Vec<Staged<K::Extra>>,
    ) -> Vec<K::Output> {
        let mut outputs = Vec::with_capacity(staged.len());
        for commit in staged {
            outputs.push(kind.applied(self, warehouse, commit).await);
        }
        outputs
    }

    /// When the swap itself failed (the database went away mid-statement), find out whether it
    /// applied, from the rows by id (a table renamed since is still the one swapped). The store
    /// answers such errors only once the failed statement can no longer change anything (it
    /// answers `CommitStateUnknown` itself otherwise), so the rows read now are final. A row at
    /// its new location applied; a row still at its expected location did not (it never moves
    /// back to a file it left); anything else (the row gone, or at a third location: applied
    /// and committed over, or not applied and committed over by another) cannot be told apart,
    /// and the files are kept, as for every unknown outcome, because the rows may point at them.
    async fn resolve_failed_swap<K: MetadataKind>(
        &self,
        warehouse: &Warehouse,
        staged: &[Staged<K::Extra>],
    ) -> Result<bool> {
        let unknown = || CatalogError::commit_state_unknown("the metadata store failed");
        let swapped: Vec<&MetadataSwap> = staged.iter().filter_map(|s| s.swap.as_ref()).collect();
        let (mut applied, mut not_applied) = (0, 0);
        for swap in &swapped {
            match self.store().metadata_location_of(&swap.id).await {
                Ok(Some(now)) if now == swap.metadata_location => applied += 1,
                Ok(Some(now)) if now == swap.expected_metadata_location => not_applied += 1,
                Ok(_) | Err(_) => return Err(unknown()),
            }
        }
        match (applied, not_applied) {
            (0, _) => {
                for swap in &swapped {
                    self.delete_quietly(warehouse, &swap.metadata_location).await;
                }
                Ok(false)
            }
            (_, 0) => Ok(true),
            // The swaps share one transaction, so this cannot happen; if it does, say so.
            _ => Err(unknown()),
        }
    }

    /// Removes files that nothing references, without making the caller wait for storage.
    pub(crate) fn delete_in_background(&self, warehouse: &Warehouse, locations: Vec<String>) {
        let (catalog, warehouse) = (self.clone(), warehouse.clone());
        tokio::spawn(async move {
            for location in locations {
                catalog.delete_quietly(&warehouse, &location).await;
            }
        });
    }

    pub(crate) async fn delete_quietly(&self, warehouse: &Warehouse, location: &str) {
        if let Err(err) = self.files().delete(warehouse, location).await {
            tracing::warn!(%location, error = %err, "could not remove an unused metadata file");
        }
    }
}
