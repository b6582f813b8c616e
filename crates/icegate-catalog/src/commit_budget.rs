//! The commit budget: the memory commits in flight may hold at once
//! (`catalog.commit_memory_bytes`), over the fair budget of [`crate::budget`], and what a
//! commit is counted to hold (see `crate::commit`).

use crate::error::{CatalogError, Result};

/// What a commit holds while in flight, per byte of the document it changes: the new document,
/// its gzip form and layout, and the buffers they were written through.
const HELD_PER_DOCUMENT_BYTE: u64 = 2;

/// What a request's own JSON becomes while it is applied, per byte: its typed form, and what
/// it adds to the new document, its gzip form and buffers.
const HELD_PER_REQUEST_BYTE: u64 = 4;

/// Schemas a commit or create holds built at once, at worst: its own, and the metadata
/// builder's rebuild of it (a create renumbers a table's fields by building it again).
const SCHEMA_BUILDS_HELD: u64 = 2;

/// What the commit budget reserves for a change that builds on documents of `document_bytes`
/// (`parse_bytes` more for those still to be parsed: their parsed form) with a request of
/// `request_bytes` whose schemas build `schema_bytes` (see [`crate::schema_cost`]): what the
/// commit will build, not only what it read.
pub(crate) fn held_by(document_bytes: usize, parse_bytes: u64, request_bytes: usize, schema_bytes: u64) -> u64 {
    (document_bytes as u64)
        .saturating_mul(HELD_PER_DOCUMENT_BYTE)
        .saturating_add(parse_bytes)
        .saturating_add((request_bytes as u64).saturating_mul(HELD_PER_REQUEST_BYTE))
        .saturating_add(schema_bytes.saturating_mul(SCHEMA_BUILDS_HELD))
}

/// The memory that commits in flight may hold at once (see the module documentation and
/// [`crate::budget`]): commits past it wait their turn, in order; one larger than the whole
/// budget runs alone; a large share is one at a time per principal.
#[derive(Clone)]
pub(crate) struct CommitBudget(crate::budget::FairBudget);

/// Room in the [`CommitBudget`], given back when dropped.
pub(crate) type Reserved = crate::budget::Room;

fn shutting_down(_: crate::budget::Closed) -> CatalogError {
    CatalogError::Unavailable("the catalog is shutting down; retry".into())
}

impl CommitBudget {
    /// `bytes` of budget; 0 for none (commits never wait).
    pub(crate) fn new(bytes: u64) -> Self {
        Self(crate::budget::FairBudget::new(bytes))
    }

    /// Room for `held` bytes (see [`held_by`]) for the principal `who`, if there is some now and
    /// no commit is waiting for it.
    pub(crate) fn try_reserve(&self, who: &str, held: u64) -> Option<Reserved> {
        self.0.try_reserve(who, held)
    }

    /// Waits for room for `held` bytes (see [`held_by`]) for the principal `who`.
    pub(crate) async fn reserve(&self, who: &str, held: u64) -> Result<Reserved> {
        self.0.reserve(who, held).await.map_err(shutting_down)
    }

    /// Waits for the principal `who`'s turn for a large share: held while reading what decides
    /// how much room to take (a registered file), then [`Self::reserve_in`].
    pub(crate) async fn lane(&self, who: &str) -> crate::budget::Lane {
        self.0.lane(who).await
    }

    /// Waits for room for `held` bytes in a turn already held.
    pub(crate) async fn reserve_in(&self, lane: crate::budget::Lane, held: u64) -> Result<Reserved> {
        self.0.reserve_in(lane, held).await.map_err(shutting_down)
    }

    /// KiB free now (tests).
    #[cfg(test)]
    fn available(&self) -> usize {
        self.0.available_kib()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn commits_past_the_budget_wait_for_room() {
        let budget = CommitBudget::new(4 * 1024 * 1024); // 4 MiB: 4096 KiB
        let first = budget.reserve("a", held_by(1024 * 1024, 0, 0, 0)).await.unwrap(); // holds 2 MiB
        let second = budget.reserve("b", 2 * 1024 * 1024).await.unwrap();
        assert_eq!(budget.available(), 0);
        let third = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve("c", 10).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "a commit past the budget went ahead");
        assert!(budget.try_reserve("d", 10).is_none(), "a commit went ahead of one waiting");
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), third).await.unwrap().unwrap().unwrap();
        drop(second);
        assert_eq!(budget.available(), 4096);
        // Larger than the whole budget: runs alone rather than never.
        let huge = budget.reserve("a", held_by(0, 0, 16 * 1024 * 1024, 0)).await.unwrap();
        assert_eq!(budget.available(), 0);
        assert!(budget.try_reserve("b", 10).is_none());
        drop(huge);
        // No budget: never waits.
        let unbounded = CommitBudget::new(0);
        assert!(unbounded.try_reserve("a", u64::MAX).is_some());
        let _a = unbounded.reserve("a", u64::MAX).await.unwrap();
        let _b = unbounded.reserve("a", u64::MAX).await.unwrap();
    }
}
