//! A memory budget shared fairly: room is taken in KiB from one pool, in arrival order, and a
//! large share (a quarter of the pool or more) is one at a time per principal.
//!
//! Used for what commits build (`catalog.commit_memory_bytes`, see `crate::commit`) and for
//! request bodies while they are parsed (`server.request_memory_bytes`, icegate-api's
//! `body_memory`). Without the per-principal turn, one principal sending costly requests from
//! many connections would fill the queue ahead of everyone else; with it, the others wait for
//! at most one of its large requests at a time. A share larger than the whole pool takes all of
//! it (it runs alone rather than never).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

/// The pool (see the module documentation). Cloning shares it.
#[derive(Clone, Default)]
pub struct FairBudget {
    /// The pool, in KiB, and its size; `None`: unbounded.
    kib: Option<(Arc<Semaphore>, u32)>,
    /// A turn per principal with a large share held or waiting.
    lanes: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

/// Room taken from a [`FairBudget`], given back when dropped.
pub struct Room {
    _permit: Option<OwnedSemaphorePermit>,
    _lane: Option<Lane>,
}

/// A principal's turn for a large share, held until dropped.
pub struct Lane {
    guard: Option<OwnedMutexGuard<()>>,
    who: String,
    lanes: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl Drop for Lane {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        // Nobody else holds or waits for this principal's turn: forget it.
        if lanes.get(&self.who).is_some_and(|lane| Arc::strong_count(lane) == 1) {
            lanes.remove(&self.who);
        }
    }
}

/// The pool is closed (the process is shutting down).
#[derive(Debug, Clone, Copy)]
pub struct Closed;

impl FairBudget {
    /// A pool of `bytes` (0: unbounded; nothing ever waits).
    pub fn new(bytes: u64) -> Self {
        let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).min(Semaphore::MAX_PERMITS as u32);
        Self { kib: (kib > 0).then(|| (Arc::new(Semaphore::new(kib as usize)), kib)), lanes: Arc::default() }
    }

    /// KiB for `bytes`, at least one and at most the whole pool.
    fn kib(bytes: u64, total: u32) -> u32 {
        u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).clamp(1, total)
    }

    /// Whether `bytes` is a large share (taken in the principal's turn).
    pub fn is_large(&self, bytes: u64) -> bool {
        self.kib.as_ref().is_some_and(|(_, total)| Self::kib(bytes, *total) >= (*total / 4).max(1))
    }

    fn lane_of(&self, who: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        lanes.entry(who.to_owned()).or_default().clone()
    }

    /// Waits for `who`'s turn for a large share (to hold while reading what decides how much
    /// room to take, then [`Self::reserve_in`]).
    pub async fn lane(&self, who: &str) -> Lane {
        Lane { guard: Some(self.lane_of(who).lock_owned().await), who: who.to_owned(), lanes: self.lanes.clone() }
    }

    /// Room for `bytes` for the principal `who`, if there is some now and nobody is waiting.
    pub fn try_reserve(&self, who: &str, bytes: u64) -> Option<Room> {
        let Some((permits, total)) = &self.kib else { return Some(Room { _permit: None, _lane: None }) };
        let kib = Self::kib(bytes, *total);
        let lane = if self.is_large(bytes) {
            let guard = self.lane_of(who).try_lock_owned().ok()?;
            Some(Lane { guard: Some(guard), who: who.to_owned(), lanes: self.lanes.clone() })
        } else {
            None
        };
        let permit = permits.clone().try_acquire_many_owned(kib).ok()?;
        Some(Room { _permit: Some(permit), _lane: lane })
    }

    /// Waits for room for `bytes` for the principal `who` (in its turn, for a large share).
    pub async fn reserve(&self, who: &str, bytes: u64) -> Result<Room, Closed> {
        if self.kib.is_none() {
            return Ok(Room { _permit: None, _lane: None });
        }
        let lane = if self.is_large(bytes) { Some(self.lane(who).await) } else { None };
        self.take(bytes, lane).await
    }

    /// Waits for room for `bytes` in a turn already held.
    pub async fn reserve_in(&self, lane: Lane, bytes: u64) -> Result<Room, Closed> {
        self.take(bytes, Some(lane)).await
    }

    async fn take(&self, bytes: u64, lane: Option<Lane>) -> Result<Room, Closed> {
        let Some((permits, total)) = &self.kib else { return Ok(Room { _permit: None, _lane: lane }) };
        let permit = permits.clone().acquire_many_owned(Self::kib(bytes, *total)).await.map_err(|_| Closed)?;
        Ok(Room { _permit: Some(permit), _lane: lane })
    }

    /// KiB free now (tests).
    pub fn available_kib(&self) -> usize {
        self.kib.as_ref().map_or(usize::MAX, |(permits, _)| permits.available_permits())
    }

    /// Principals with a turn held or waited for (tests).
    pub fn lanes_in_use(&self) -> usize {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_principal_holds_one_large_share_at_a_time_and_others_go_between() {
        let budget = FairBudget::new(4 * 1024 * 1024);
        let large = 2 * 1024 * 1024; // half the pool: a large share
        let first = budget.reserve("mallory", large).await.unwrap();
        // Mallory's second large share waits for her first, although there is room.
        let second = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve("mallory", large).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        assert!(!second.is_finished(), "a principal held two large shares at once");
        assert!(budget.try_reserve("mallory", large).is_none());
        // Someone else's large share goes ahead meanwhile.
        let other = budget.try_reserve("alice", large).expect("alice waited behind mallory's queue");
        drop(other);
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), second).await.unwrap().unwrap().unwrap();
        // Small shares never take a turn.
        let small = budget.reserve("mallory", 1024).await.unwrap();
        let small_too = budget.try_reserve("mallory", 1024).unwrap();
        assert_eq!(budget.lanes_in_use(), 0, "turns are forgotten once unused");
        drop((small, small_too));
        // A turn taken first, then room in it.
        let lane = budget.lane("mallory").await;
        assert!(budget.try_reserve("mallory", large).is_none(), "the turn is held");
        let room = budget.reserve_in(lane, 8 * 1024 * 1024).await.unwrap();
        assert_eq!(budget.available_kib(), 0, "more than the pool takes all of it");
        drop(room);
        assert_eq!(budget.available_kib(), 4096);
    }
}
