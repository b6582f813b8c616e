//! Table metadata documents (and, once a commit needed it, their parsed form) by metadata file
//! location, so loadTable and commits read a row's pointer from the database and not the
//! document behind it, and a commit does not parse the metadata it builds on again.
//!
//! A metadata file is never rewritten once committed (every commit writes a new, uniquely named
//! file), so an entry cannot go stale: the table's current location still comes from the
//! database on every load (replicas stay consistent), and only the immutable document behind it
//! is served from memory. Bounded by the bytes its entries hold, parsed forms included;
//! scan-resistant eviction.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use iceberg::spec::TableMetadata;

use crate::tables::Layout;

/// One metadata file's content: its document, and what commits and gzip answers derive from it
/// (each when something has made it). Made with [`Cached::new`], which weighs it once.
#[derive(Clone)]
pub struct Cached {
    /// The JSON document, as stored.
    pub document: Arc<str>,
    /// The document as gzip members (the form large documents are stored in, and the body of
    /// gzip answers).
    pub gzip: Option<Arc<[u8]>>,
    /// The document parsed, when a commit has needed it.
    pub parsed: Option<Arc<TableMetadata>>,
    /// How the next commit splices the document (with `parsed`: they come from the same write).
    pub layout: Option<Arc<Layout>>,
    /// What the parsed metadata and the layout hold (weighing them walks every snapshot, so
    /// it is done once, here, not whenever the cache weighs the entry).
    derived_bytes: usize,
}

impl Cached {
    pub fn new(
        document: Arc<str>,
        gzip: Option<Arc<[u8]>>,
        parsed: Option<Arc<TableMetadata>>,
        layout: Option<Arc<Layout>>,
    ) -> Self {
        // A layout keeps its snapshots' weight (summed as its chunks were written), so a commit
        // does not walk every snapshot of its table to weigh the new metadata.
        let parsed_bytes = match (&parsed, &layout) {
            (Some(parsed), Some(layout)) => layout.snapshot_bytes() + weight_but_snapshots(parsed),
            (Some(parsed), None) => parsed_weight(parsed),
            (None, _) => 0,
        };
        let derived_bytes = parsed_bytes + layout.as_ref().map_or(0, |l| l.weight());
        Self { document, gzip, parsed, layout, derived_bytes }
    }

    /// The bytes the entry holds: the document, its gzip form, the parsed metadata (an estimate
    /// from its contents, see [`parsed_weight`]) and the layout.
    fn weight(&self) -> usize {
        self.document.len() + self.gzip.as_ref().map_or(0, |g| g.len()) + self.derived_bytes
    }
}

/// An estimate of the heap bytes a parsed `TableMetadata` holds, from what it contains: each
/// snapshot (see [`snapshot_weight`]) and the rest ([`weight_but_snapshots`]).
/// `tests/cache_weights.rs` measures the real heap growth of parsing against it.
pub fn parsed_weight(metadata: &TableMetadata) -> usize {
    metadata.snapshots().map(|s| snapshot_weight(s)).sum::<usize>() + weight_but_snapshots(metadata)
}

/// A string to string map's heap bytes.
fn map_weight(entries: &std::collections::HashMap<String, String>) -> usize {
    // Per entry beyond its key and value: two string headers, control bytes, spare capacity.
    64 + entries.iter().map(|(k, v)| 2 * std::mem::size_of::<String>() + 16 + k.len() + v.len()).sum::<usize>()
}

/// One parsed snapshot's heap bytes: its struct, its `Arc` and map slot, its manifest list and
/// its summary map.
pub fn snapshot_weight(snapshot: &iceberg::spec::Snapshot) -> usize {
    std::mem::size_of::<iceberg::spec::Snapshot>()
        + 40
        + snapshot.manifest_list().len()
        + map_weight(&snapshot.summary().additional_properties)
}

/// What parsed metadata holds besides its snapshots: the logs, schemas (fields and the indexes
/// the crate builds over them), specs, sort orders, properties, refs and statistics. Walks no
/// snapshot, so a commit can weigh its metadata with the snapshots' weight kept by its layout.
pub fn weight_but_snapshots(metadata: &TableMetadata) -> usize {
    let history = std::mem::size_of_val(metadata.history());
    let log: usize =
        metadata.metadata_log().iter().map(|m| std::mem::size_of::<String>() + 8 + m.metadata_file.len()).sum();
    let schemas: usize = metadata
        .schemas_iter()
        .map(|schema| {
            // Per field: the field, its name in several indexes (by id, by name, lower-cased,
            // accessors); nested fields included.
            let fields = schema.field_id_to_name_map();
            1024 + fields.values().map(|name| 768 + 4 * name.len()).sum::<usize>()
        })
        .sum();
    let specs: usize = metadata.partition_specs_iter().map(|s| 256 + 128 * s.fields().len()).sum();
    let orders: usize = metadata.sort_orders_iter().map(|o| 128 + 64 * o.fields.len()).sum();
    2048 + history
        + log
        + schemas
        + specs
        + orders
        + map_weight(metadata.properties())
        + metadata.statistics_iter().count() * 256
}

#[derive(Clone)]
struct ByLength;

impl quick_cache::Weighter<String, Cached> for ByLength {
    fn weight(&self, key: &String, value: &Cached) -> u64 {
        (key.len() + value.weight() + 64) as u64
    }
}

/// A form derived from one metadata file's document, made once per file and kept beside it.
#[derive(Clone)]
pub enum Derived {
    /// The document with only the snapshots its refs reference (`snapshots=refs`).
    RefsOnly(Arc<str>),
    /// The document as one gzip member (a response to `Accept-Encoding: gzip`).
    Gzip(Arc<[u8]>),
}

impl Derived {
    fn len(&self) -> usize {
        match self {
            Self::RefsOnly(text) => text.len(),
            Self::Gzip(bytes) => bytes.len(),
        }
    }
}

/// Which form: the key of a derived entry beside its file's location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    RefsOnly,
    Gzip,
}

#[derive(Clone)]
struct DerivedByLength;

impl quick_cache::Weighter<(Form, String), Derived> for DerivedByLength {
    fn weight(&self, key: &(Form, String), value: &Derived) -> u64 {
        (key.1.len() + value.len() + 64) as u64
    }
}

pub struct MetadataCache {
    entries: Option<quick_cache::sync::Cache<String, Cached, ByLength>>,
    /// Derived forms, bounded by a quarter of the capacity (on top of it).
    derived: Option<quick_cache::sync::Cache<(Form, String), Derived, DerivedByLength>>,
    capacity_bytes: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Recent lookups and hits (halved every [`RECENT_WINDOW`] lookups): whether asking the
    /// cache first still pays.
    recent_lookups: AtomicU64,
    recent_hits: AtomicU64,
    /// Counts [`admit`](Self::admit) calls.
    admissions: AtomicU64,
}

/// Lookups after which the recent hit counts are halved.
const RECENT_WINDOW: u64 = 4096;

impl MetadataCache {
    /// A cache of at most `capacity_bytes` of documents; 0 turns caching off.
    pub fn new(capacity_bytes: u64) -> Self {
        // quick_cache sizes its tables from an item estimate: assume ~8 KB documents.
        let entries = (capacity_bytes > 0).then(|| {
            let estimated_items = (capacity_bytes / 8192).clamp(16, 1 << 20) as usize;
            quick_cache::sync::Cache::with_weighter(estimated_items, capacity_bytes, ByLength)
        });
        let derived = (capacity_bytes > 0).then(|| {
            let estimated_items = (capacity_bytes / 4 / 8192).clamp(16, 1 << 18) as usize;
            quick_cache::sync::Cache::with_weighter(estimated_items, capacity_bytes / 4, DerivedByLength)
        });
        Self {
            entries,
            derived,
            capacity_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            recent_lookups: AtomicU64::new(0),
            recent_hits: AtomicU64::new(0),
            admissions: AtomicU64::new(0),
        }
    }

    pub fn get(&self, metadata_location: &str) -> Option<Cached> {
        let found = self.entries.as_ref().and_then(|entries| entries.get(metadata_location));
        self.count(found.is_some());
        found
    }

    /// Counts a lookup that went around the cache as the cache would have answered it.
    pub fn observe(&self, metadata_location: &str) {
        let held = self.entries.as_ref().is_some_and(|entries| entries.peek(metadata_location).is_some());
        self.count(held);
    }

    fn count(&self, hit: bool) {
        (if hit { &self.hits } else { &self.misses }).fetch_add(1, Ordering::Relaxed);
        if hit {
            self.recent_hits.fetch_add(1, Ordering::Relaxed);
        }
        if self.recent_lookups.fetch_add(1, Ordering::Relaxed) + 1 >= RECENT_WINDOW {
            // Approximate under races, which is all a ratio needs.
            self.recent_lookups.store(RECENT_WINDOW / 2, Ordering::Relaxed);
            let hits = self.recent_hits.load(Ordering::Relaxed);
            self.recent_hits.store(hits / 2, Ordering::Relaxed);
        }
    }

    /// True while most recent lookups missed (a working set larger than the cache, such as
    /// loads spread evenly over a very large catalog): then a load should read the whole row at
    /// once instead of its head first and the document after a miss. Off or empty caches
    /// always say so.
    pub fn mostly_misses(&self) -> bool {
        let lookups = self.recent_lookups.load(Ordering::Relaxed);
        let hits = self.recent_hits.load(Ordering::Relaxed);
        self.entries.is_none() || (lookups >= 256 && hits * 2 < lookups)
    }

    /// Remembers the document of a committed metadata file (and what else is at hand). An
    /// entry may take an eighth of the capacity at most: without its parsed form and layout
    /// if they would not fit, not at all if the document alone would not.
    pub fn insert(&self, metadata_location: &str, mut entry: Cached) {
        let Some(entries) = &self.entries else { return };
        let limit = (self.capacity_bytes / 8) as usize;
        if entry.weight() > limit {
            entry.parsed = None;
            entry.layout = None;
            entry.derived_bytes = 0;
        }
        if entry.weight() > limit {
            entry.gzip = None;
        }
        if entry.weight() > limit {
            return;
        }
        entries.insert(metadata_location.to_owned(), entry);
    }

    /// Remembers a document alone (read from the store).
    pub fn insert_document(&self, metadata_location: &str, document: &Arc<str>, gzip: Option<Arc<[u8]>>) {
        self.insert(metadata_location, Cached::new(document.clone(), gzip, None, None));
    }

    /// Drops a superseded metadata file's entry: once a commit has moved its table on, nothing
    /// asks for it again, and it would only push out live entries.
    pub fn forget(&self, metadata_location: &str) {
        if let Some(entries) = &self.entries {
            entries.remove(metadata_location);
        }
        if let Some(derived) = &self.derived {
            // Compressed forms are keyed by representation too; they age out like any entry.
            derived.remove(&(Form::RefsOnly, metadata_location.to_owned()));
        }
    }

    /// `form` of the document of `metadata_location`: from memory when made before, else made
    /// by `make` (once per file while it stays cached; a file's document never changes, so
    /// neither does anything derived from it). Forms larger than an eighth of their part of the
    /// cache are made every time.
    fn derived<E>(
        &self,
        form: Form,
        metadata_location: &str,
        make: impl FnOnce() -> Result<Derived, E>,
    ) -> Result<Derived, E> {
        let Some(derived) = &self.derived else { return make() };
        let key = (form, metadata_location.to_owned());
        if let Some(found) = derived.get(&key) {
            return Ok(found);
        }
        let made = make()?;
        if (made.len() as u64) <= self.capacity_bytes / 4 / 8 {
            derived.insert(key, made.clone());
        }
        Ok(made)
    }

    /// While the cache mostly misses, whether to keep this document anyway: one in 16, so that
    /// tables loaded often still find their way in (and the hit ratio can recover) without
    /// paying an insert and an eviction on every load.
    pub fn admit(&self) -> bool {
        self.admissions.fetch_add(1, Ordering::Relaxed).is_multiple_of(16)
    }

    /// The document with only the snapshots its refs reference, made by `make` once per file.
    pub fn refs_only<E>(&self, metadata_location: &str, make: impl Fn() -> Result<String, E>) -> Result<Arc<str>, E> {
        match self.derived(Form::RefsOnly, metadata_location, || make().map(|refs| Derived::RefsOnly(refs.into())))? {
            Derived::RefsOnly(refs) => Ok(refs),
            // Entries are keyed by their form: not reached, but answered correctly all the same.
            Derived::Gzip(_) => make().map(Into::into),
        }
    }

    /// The document as a gzip member, made by `make` once per file.
    pub fn gzip(&self, metadata_location: &str, make: impl Fn() -> Vec<u8>) -> Arc<[u8]> {
        match self
            .derived(Form::Gzip, metadata_location, || Ok::<_, std::convert::Infallible>(Derived::Gzip(make().into())))
        {
            Ok(Derived::Gzip(bytes)) => bytes,
            _ => make().into(),
        }
    }

    /// Documents held and their total weight in bytes (derived forms included).
    pub fn usage(&self) -> (u64, u64) {
        let (documents, weight) =
            self.entries.as_ref().map_or((0, 0), |entries| (entries.len() as u64, entries.weight()));
        (documents, weight + self.derived.as_ref().map_or(0, |derived| derived.weight()))
    }

    /// Lookups answered from memory, and lookups that went to the database.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_that_mostly_misses_says_so_and_recovers() {
        let cache = MetadataCache::new(1 << 20);
        let document: Arc<str> = Arc::from("{}");
        assert!(!cache.mostly_misses(), "too few lookups to judge");
        for i in 0..1000 {
            assert!(cache.get(&format!("miss-{i}")).is_none());
        }
        assert!(cache.mostly_misses());
        cache.insert_document("hot", &document, None);
        for _ in 0..RECENT_WINDOW {
            cache.observe("hot");
        }
        assert!(!cache.mostly_misses(), "hits since then count more than the old misses");
        assert!(MetadataCache::new(0).mostly_misses(), "no cache: always read the row");
        let admitted = (0..160).filter(|_| cache.admit()).count();
        assert_eq!(admitted, 10, "one document in 16 is kept while the cache mostly misses");
    }

    #[test]
    fn keeps_documents_by_location_within_its_capacity() {
        let cache = MetadataCache::new(64 * 1024);
        let document: Arc<str> = Arc::from("x".repeat(1000));
        for i in 0..200 {
            cache.insert_document(&format!("file:///w/t/metadata/{i:05}.json"), &document, None);
        }
        let (held, weight) = cache.usage();
        assert!(weight <= 64 * 1024, "weight {weight} exceeds the capacity");
        assert!(held > 10 && held < 200, "held {held}");
        let last = cache.get("file:///w/t/metadata/00199.json").expect("the last insert is kept");
        assert_eq!(&*last.document, &*document);
        assert!(cache.get("file:///elsewhere.json").is_none());
        cache.forget("file:///w/t/metadata/00199.json");
        assert!(cache.get("file:///w/t/metadata/00199.json").is_none(), "a superseded file is forgotten");
        let (hits, misses) = cache.hits_and_misses();
        assert_eq!((hits, misses), (1, 2));
    }

    #[test]
    fn zero_capacity_caches_nothing_and_large_documents_are_skipped() {
        let off = MetadataCache::new(0);
        off.insert_document("a", &Arc::from("{}"), None);
        assert!(off.get("a").is_none());
        let small = MetadataCache::new(8 * 1024);
        small.insert_document("big", &Arc::from("y".repeat(2 * 1024)), None);
        assert!(small.get("big").is_none(), "a document over an eighth of the capacity is not kept");
    }
}
