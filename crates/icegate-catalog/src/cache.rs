//! The one policy of the catalog's small lookup caches: bounded in entries (quick_cache's
//! scan-resistant eviction, not "clear when full"), an optional time to live, and
//! invalidation that a concurrent reader cannot undo.
//!
//! A reader takes [`TtlCache::generation`] before it reads the source, and offers what it read
//! with that generation; an invalidation ([`TtlCache::clear`], [`TtlCache::retain`],
//! [`TtlCache::remove`]) bumps the generation, so an answer read before a change is never
//! stored after it. Hits take no lock beyond quick_cache's shard.
//!
//! Users and how each is invalidated:
//! - warehouses by `/v1` prefix (`Catalog::warehouse_for_prefix`): 30 s; a profile change or
//!   delete through this replica drops the warehouse at once, other replicas see it within the
//!   TTL (credentials they vend meanwhile are those of the old profile, which stays valid for
//!   the credential's lifetime anyway);
//! - a table's recorded locations by table id and metadata file (`Catalog::table_locations`):
//!   no TTL; a location set only changes with a commit, which writes a new metadata file (a new
//!   key), and a file registered again as another table has another id;
//! - authorization holdings and principal existence (`access::Authorizer`): the configured
//!   `auth.authorization_cache_ttl`, never past a grant's expiry; every change of principals,
//!   roles, memberships or grants through this replica clears it, other replicas see it
//!   within the TTL;
//! - identities of verified OIDC tokens by token digest (`icegate-api`'s `oidc`): until the
//!   token's `exp`; nothing to invalidate (a deleted principal is refused by the
//!   authorizer's principal check, which runs on every request).
//!
//! Two caches keep a policy of their own, for reasons a bounded map cannot serve: the store's
//! table heads (`icegate-store`'s `heads`: an id index kept consistent with the name map under
//! one lock, and every write forgets what it moved) and vended credentials
//! (`icegate-storage`'s `vending`: concurrent misses for one key share one STS call, and an
//! entry is reused for at most half the credential's validity).

use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use quick_cache::Equivalent;

/// A bounded cache of `V` by `K`, with an optional time to live.
pub struct TtlCache<K, V> {
    entries: quick_cache::sync::Cache<K, (V, Instant)>,
    ttl: Option<Duration>,
    /// Bumped by every invalidation; held while an offer is checked and stored, so that an
    /// invalidation cannot fall between the two.
    generation: Mutex<u64>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// At most `capacity` entries, each for at most `ttl` (`None`: until evicted or invalidated).
    pub fn new(capacity: usize, ttl: Option<Duration>) -> Self {
        Self { entries: quick_cache::sync::Cache::new(capacity.max(1)), ttl, generation: Mutex::new(0) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        // A counter cannot be left half-updated.
        self.generation.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The value, while fresh: read within the TTL, and `fresh` says it still holds.
    pub fn get<Q>(&self, key: &Q, fresh: impl FnOnce(&V) -> bool) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let (value, read_at) = self.entries.get(key)?;
        (self.ttl.is_none_or(|ttl| read_at.elapsed() < ttl) && fresh(&value)).then_some(value)
    }

    /// To take before reading the source of an entry, and to hand to [`Self::offer`].
    pub fn generation(&self) -> u64 {
        *self.lock()
    }

    /// Stores `value`, read at `read_at` (its TTL counts from then), unless an invalidation
    /// happened since `generation` was taken.
    pub fn offer(&self, generation: u64, key: K, value: V, read_at: Instant) {
        let current = self.lock();
        if *current == generation {
            self.entries.insert(key, (value, read_at));
        }
    }

    pub fn remove<Q>(&self, key: &Q)
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let mut generation = self.lock();
        *generation += 1;
        self.entries.remove(key);
    }

    /// Keeps only the entries `keep` accepts.
    pub fn retain(&self, keep: impl Fn(&K, &V) -> bool) {
        let mut generation = self.lock();
        *generation += 1;
        self.entries.retain(|key, (value, _)| keep(key, value));
    }

    pub fn clear(&self) {
        let mut generation = self.lock();
        *generation += 1;
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_read_before_an_invalidation_is_not_stored() {
        let cache: TtlCache<String, u32> = TtlCache::new(10, None);
        let generation = cache.generation();
        cache.clear();
        cache.offer(generation, "k".into(), 1, Instant::now());
        assert_eq!(cache.get("k", |_| true), None);
        cache.offer(cache.generation(), "k".into(), 2, Instant::now());
        assert_eq!(cache.get("k", |_| true), Some(2));
        let generation = cache.generation();
        cache.remove("other");
        cache.offer(generation, "k".into(), 3, Instant::now());
        assert_eq!(cache.get("k", |_| true), Some(2), "a removal invalidates concurrent offers too");
    }

    #[test]
    fn entries_expire_and_answer_only_while_fresh() {
        let cache: TtlCache<&str, u32> = TtlCache::new(10, Some(Duration::from_secs(60)));
        cache.offer(cache.generation(), "old", 1, Instant::now() - Duration::from_secs(61));
        cache.offer(cache.generation(), "new", 2, Instant::now());
        assert_eq!(cache.get("old", |_| true), None);
        assert_eq!(cache.get("new", |_| true), Some(2));
        assert_eq!(cache.get("new", |v| *v > 2), None);
        cache.retain(|key, _| *key != "new");
        assert_eq!(cache.get("new", |_| true), None);
    }

    #[test]
    fn the_bound_holds_without_starting_over() {
        let cache: TtlCache<u32, u32> = TtlCache::new(100, None);
        for i in 0..1_000 {
            cache.offer(cache.generation(), i, i, Instant::now());
        }
        assert!(cache.len() <= 110, "{} entries", cache.len());
        assert!(cache.len() >= 50, "eviction keeps most of the capacity: {}", cache.len());
    }
}
