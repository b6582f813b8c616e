//! Table and view heads (id, base location, current metadata file) by name, kept in memory for
//! a database that this process alone writes: SQLite under `icegate serve`, which holds an
//! exclusive lock on the database for the purpose (`database::Owner`, taken by
//! `SqlStore::connect_owned`). PostgreSQL stores never use it: replicas share the database, so
//! every load reads the row.
//!
//! Every write that moves or removes a head forgets it once the write is over (committed or
//! not), and a reader only stores what it read if no such write ended meanwhile (a generation
//! count under the same lock), so a head read before a commit can never be stored after it.

use std::collections::HashMap;
use std::sync::Mutex;

use icegate_catalog::store::{TabularHead, TabularKind};
use icegate_catalog::{NamespaceIdent, TabularId};

/// Heads kept at most; beyond it the map starts over (a catalog with more tables than this
/// keeps the recently loaded ones). An entry, with its key and the id index, takes several
/// hundred bytes: 20,000 of them about 12 MB.
const MAX_HEADS: usize = 20_000;

#[derive(Default)]
pub(crate) struct HeadCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Counts the writes that ended; a reader compares it before and after its read.
    generation: u64,
    by_name: HashMap<String, TabularHead>,
    names_by_id: HashMap<TabularId, String>,
}

/// The key of a table or view: warehouse, encoded namespace, name and kind, joined by NUL
/// (which none of them may contain).
pub(crate) fn key(warehouse_id: &str, namespace: &NamespaceIdent, name: &str, kind: TabularKind) -> String {
    let namespace = namespace.encoded();
    let mut key = String::with_capacity(warehouse_id.len() + namespace.len() + name.len() + 8);
    for part in [warehouse_id, namespace.as_str(), name, kind.as_str()] {
        key.push_str(part);
        key.push('\0');
    }
    key
}

/// The outcome of a lookup: the head, or the generation to hand back to [`HeadCache::offer`].
pub(crate) enum Lookup {
    Hit(TabularHead),
    Miss(u64),
}

impl HeadCache {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves nothing half-done worth keeping: start over.
        self.state.lock().unwrap_or_else(|poisoned| {
            let mut state = poisoned.into_inner();
            state.by_name.clear();
            state.names_by_id.clear();
            state.generation += 1;
            state
        })
    }

    pub(crate) fn lookup(&self, key: &str) -> Lookup {
        let state = self.state();
        match state.by_name.get(key) {
            Some(head) => Lookup::Hit(head.clone()),
            None => Lookup::Miss(state.generation),
        }
    }

    /// Stores a head read from the database since [`lookup`](Self::lookup) returned
    /// `generation`, unless a write ended in between.
    pub(crate) fn offer(&self, generation: u64, key: String, head: &TabularHead) {
        let mut state = self.state();
        if state.generation != generation {
            return;
        }
        if state.by_name.len() >= MAX_HEADS {
            state.by_name.clear();
            state.names_by_id.clear();
        }
        state.names_by_id.insert(head.id.clone(), key.clone());
        state.by_name.insert(key, head.clone());
    }

    /// After a write that changed or removed these tables or views (by id), whatever its outcome.
    pub(crate) fn forget_ids<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let mut state = self.state();
        state.generation += 1;
        for id in ids {
            if let Some(key) = state.names_by_id.remove(id) {
                state.by_name.remove(&key);
            }
        }
    }

    /// After a write that removed or renamed the table or view under `key`, whatever its outcome.
    pub(crate) fn forget_key(&self, key: &str) {
        let mut state = self.state();
        state.generation += 1;
        if let Some(head) = state.by_name.remove(key) {
            state.names_by_id.remove(&head.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(id: &str, file: &str) -> TabularHead {
        TabularHead { id: id.into(), location: "file:///w/t".into(), metadata_location: file.into() }
    }

    #[test]
    fn a_read_that_overlaps_a_write_is_not_stored() {
        let cache = HeadCache::default();
        let Lookup::Miss(generation) = cache.lookup("k") else { panic!("empty cache hit") };
        // A commit ends while the reader is reading the old row.
        cache.forget_ids(["t1"]);
        cache.offer(generation, "k".into(), &head("t1", "v1.json"));
        assert!(matches!(cache.lookup("k"), Lookup::Miss(_)), "a head read before a commit was stored after it");
    }

    #[test]
    fn writes_forget_heads_by_id_and_by_name() {
        let cache = HeadCache::default();
        for (key, id) in [("a", "t1"), ("b", "t2")] {
            let Lookup::Miss(generation) = cache.lookup(key) else { panic!() };
            cache.offer(generation, key.into(), &head(id, "v1.json"));
        }
        assert!(matches!(cache.lookup("a"), Lookup::Hit(h) if h.id == "t1"));
        cache.forget_ids(["t1"]);
        assert!(matches!(cache.lookup("a"), Lookup::Miss(_)));
        assert!(matches!(cache.lookup("b"), Lookup::Hit(_)), "other tables stay");
        cache.forget_key("b");
        assert!(matches!(cache.lookup("b"), Lookup::Miss(_)));
    }

    #[test]
    fn keys_keep_their_parts_apart() {
        let ns = |s: &str| NamespaceIdent::from_levels([s]).unwrap();
        let table = key("w", &ns("a"), "b", TabularKind::Table);
        assert_ne!(table, key("w", &ns("a"), "b", TabularKind::View));
        assert_ne!(key("w", &ns("ab"), "c", TabularKind::Table), key("w", &ns("a"), "bc", TabularKind::Table));
    }
}
