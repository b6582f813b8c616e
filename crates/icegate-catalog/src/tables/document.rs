//! Table metadata documents written in parts, so that what a commit costs follows the size of
//! its change, not the size of the table's history.
//!
//! A document is written as `{head,"snapshot-log":[…],"metadata-log":[…],"snapshots":[…]}`. The
//! head (identity, schemas, partition specs, sort orders, properties, refs, statistics) is
//! written afresh by every commit. The three arrays, the parts that grow with a table's
//! history, are cut into chunks of about [`CHUNK_BYTES`]; a chunk whose items are all still
//! there, unchanged and in the same order, keeps its text and its gzip member from the
//! document before. A commit that appends a snapshot (and expires the oldest) writes and
//! compresses one or two chunks of each array, and copies the rest.
//!
//! The gzip form is every part compressed as a gzip member of its own, the members
//! concatenated: RFC 1952 makes a gzip stream a series of members, which every client reads as
//! one (urllib3, Java's `GZIPInputStream`, `flate2`'s `MultiGzDecoder`). It is the copy the store
//! keeps and the body of `Accept-Encoding: gzip` answers, made once per commit from the members
//! that changed.
//!
//! The text written here parses to exactly the `TableMetadata` the `iceberg` crate's own
//! serialiser gives (format versions 2 and 3; version 1 documents are written by the crate, in
//! one part); the tests check this over long random histories. Snapshots keep the order of the
//! document they came from, new ones after it in sequence-number order (readers do not depend
//! on the order). The crate does not expose a table's refs, so they are carried beside the
//! document: replayed from the builder's recorded changes and checked against the metadata,
//! or read from the stored text when nothing was carried.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;
use std::sync::Arc;

use iceberg::TableUpdate;
use iceberg::spec::{
    EncryptedKey, FormatVersion, MAIN_BRANCH, MetadataLog, PartitionSpec, PartitionStatisticsFile, Schema, SnapshotLog,
    SnapshotRef, SnapshotReference, SnapshotRetention, SortOrder, StatisticsFile, Summary, TableMetadata,
};
use serde::Serialize;

use crate::error::{CatalogError, Result};

/// About how much text a chunk of an array holds before the next one starts.
const CHUNK_BYTES: usize = 16 * 1024;

/// How hard a commit compresses the gzip members it writes: zlib-rs's fastest level that still
/// searches for matches (`deflate_fast`). Its members are a little larger than the default
/// level's, and compressing at the default level was a large share of a small table's commit
/// (docs/benchmarks.md has the measurements).
const LEVEL: flate2::Compression = flate2::Compression::new(2);

/// A table's refs by name (what `TableMetadata` keeps but does not expose).
pub(crate) type Refs = HashMap<String, SnapshotReference>;

/// A written document: its text, its gzip form, and how it divides into reusable parts.
#[derive(Clone)]
pub(crate) struct Written {
    pub text: Arc<str>,
    pub gzip: Arc<[u8]>,
    /// How the next commit may splice this one (`None` when the crate wrote it).
    pub layout: Option<Arc<Layout>>,
    /// How much of the text this write compressed; the rest was spliced in as it was.
    pub compressed_bytes: usize,
}

/// Where a document's chunks are, in its text and in its gzip form, with the items each holds;
/// and the refs of the metadata it was written from.
pub struct Layout {
    text: Arc<str>,
    gzip: Arc<[u8]>,
    refs: Refs,
    snapshots: Vec<Chunk<SnapshotRef>>,
    snapshot_log: Vec<Chunk<SnapshotLog>>,
    metadata_log: Vec<Chunk<MetadataLog>>,
}

impl Layout {
    /// The heap bytes of the parsed snapshots it was written from (see
    /// [`snapshot_weight`](crate::metadata_cache::snapshot_weight)), summed per chunk as each
    /// was made.
    pub fn snapshot_bytes(&self) -> usize {
        self.snapshots.iter().map(|c| c.parsed_bytes).sum()
    }

    /// The refs of the metadata this document was written from.
    pub fn refs(&self) -> &Refs {
        &self.refs
    }

    /// Memory held by the layout beyond the document and gzip form it shares (item keys and
    /// ranges; the snapshots themselves belong to the parsed metadata).
    pub fn weight(&self) -> usize {
        fn chunks<K>(chunks: &[Chunk<K>], per_item: usize) -> usize {
            chunks.iter().map(|c| 64 + c.items.len() * (per_item + 8)).sum()
        }
        let logs: usize =
            self.metadata_log.iter().flat_map(|c| c.items.iter()).map(|(m, _)| m.metadata_file.len()).sum();
        let refs: usize = self.refs.keys().map(|k| k.len() + 64).sum();
        256 + refs
            + logs
            + chunks(&self.snapshots, std::mem::size_of::<SnapshotRef>())
            + chunks(&self.snapshot_log, std::mem::size_of::<SnapshotLog>())
            + chunks(&self.metadata_log, std::mem::size_of::<MetadataLog>())
    }
}

/// A run of an array's items: its text (starting with the array's `[` when it is the first
/// chunk, with `,` otherwise) and its gzip member.
struct Chunk<K> {
    text: Range<usize>,
    gzip: Range<usize>,
    /// Each item and the end of its text, relative to the chunk's start.
    items: Arc<[(K, usize)]>,
    /// What the items hold once parsed (snapshots only; the logs are weighed from the metadata).
    parsed_bytes: usize,
}

impl<K: Item> Chunk<K> {
    fn new(text: Range<usize>, gzip: Range<usize>, items: Vec<(K, usize)>) -> Self {
        let parsed_bytes = items.iter().map(|(item, _)| item.parsed_bytes()).sum();
        Self { text, gzip, items: items.into(), parsed_bytes }
    }

    fn first(&self, text: &str) -> bool {
        text.as_bytes()[self.text.start] == b'['
    }
}

/// An item of one of the arrays: how it is matched against the document before and written.
trait Item: Clone {
    /// A hash of its identity (matches are confirmed with [`same`](Item::same)).
    fn id(&self) -> u64;
    /// Its heap bytes once parsed, where the layout keeps them (see [`Layout::snapshot_bytes`]).
    fn parsed_bytes(&self) -> usize {
        0
    }
    fn same(&self, other: &Self) -> bool;
    fn write(&self, version: FormatVersion, out: &mut Vec<u8>) -> Result<()>;
}

impl Item for SnapshotRef {
    fn id(&self) -> u64 {
        self.snapshot_id() as u64
    }

    fn parsed_bytes(&self) -> usize {
        crate::metadata_cache::snapshot_weight(self)
    }

    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(self, other) || **self == **other
    }

    fn write(&self, version: FormatVersion, out: &mut Vec<u8>) -> Result<()> {
        let v3 = version == FormatVersion::V3;
        let item = SnapshotOut {
            snapshot_id: self.snapshot_id(),
            parent_snapshot_id: self.parent_snapshot_id(),
            sequence_number: self.sequence_number(),
            timestamp_ms: self.timestamp_ms(),
            manifest_list: self.manifest_list(),
            summary: self.summary(),
            schema_id: self.schema_id(),
            first_row_id: self.first_row_id().filter(|_| v3),
            added_rows: self.added_rows_count().filter(|_| v3 && self.first_row_id().is_some()),
            key_id: self.encryption_key_id().filter(|_| v3),
        };
        json_into(&item, out)
    }
}

impl Item for SnapshotLog {
    fn id(&self) -> u64 {
        (self.snapshot_id as u64).rotate_left(17) ^ self.timestamp_ms as u64
    }

    fn same(&self, other: &Self) -> bool {
        self == other
    }

    fn write(&self, _: FormatVersion, out: &mut Vec<u8>) -> Result<()> {
        json_into(self, out)
    }
}

impl Item for MetadataLog {
    fn id(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.metadata_file.hash(&mut hasher);
        hasher.finish() ^ self.timestamp_ms as u64
    }

    fn same(&self, other: &Self) -> bool {
        self == other
    }

    fn write(&self, _: FormatVersion, out: &mut Vec<u8>) -> Result<()> {
        json_into(self, out)
    }
}

/// A snapshot as the crate's `SnapshotV2`/`SnapshotV3` serialise it.
#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct SnapshotOut<'a> {
    snapshot_id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_snapshot_id: Option<i64>,
    sequence_number: i64,
    timestamp_ms: i64,
    manifest_list: &'a str,
    summary: &'a Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema_id: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_row_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    added_rows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_id: Option<&'a str>,
}

/// A schema as the crate writes it, or (with `float` defaults) as the reference writes it
/// (see `float_defaults`).
#[derive(Serialize)]
#[serde(untagged)]
enum SchemaOut<'a> {
    Crate(&'a Schema),
    Fixed(serde_json::Value),
}

impl<'a> SchemaOut<'a> {
    fn of(schema: &'a Schema) -> Result<Self> {
        if !super::float_defaults::has_float_default(schema) {
            return Ok(Self::Crate(schema));
        }
        let mut value = serde_json::to_value(schema)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("serialising a schema: {e}")))?;
        super::float_defaults::fix_float_defaults(&mut value);
        Ok(Self::Fixed(value))
    }
}

/// Everything but the three arrays, as the crate's `TableMetadataV2`/`V3` serialise it.
#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct Head<'a> {
    format_version: u8,
    table_uuid: uuid::Uuid,
    location: &'a str,
    last_sequence_number: i64,
    last_updated_ms: i64,
    last_column_id: i32,
    schemas: Vec<SchemaOut<'a>>,
    current_schema_id: i32,
    partition_specs: Vec<&'a PartitionSpec>,
    default_spec_id: i32,
    last_partition_id: i32,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    properties: &'a HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_snapshot_id: Option<i64>,
    sort_orders: Vec<&'a SortOrder>,
    default_sort_order_id: i64,
    refs: &'a Refs,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statistics: Vec<&'a StatisticsFile>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    partition_statistics: Vec<&'a PartitionStatisticsFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_row_id: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    encryption_keys: Vec<&'a EncryptedKey>,
}

fn json_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<()> {
    serde_json::to_writer(out, value).map_err(|e| CatalogError::Internal(anyhow::anyhow!("serialising metadata: {e}")))
}

/// The text and gzip form being built, and the start of the text not yet compressed.
struct Builder {
    text: Vec<u8>,
    gzip: Vec<u8>,
    pending_from: usize,
    level: flate2::Compression,
    compressed: usize,
}

impl Builder {
    /// Compresses the text written since the last member as a member of its own.
    fn seal(&mut self) -> Range<usize> {
        let start = self.gzip.len();
        if self.pending_from < self.text.len() {
            gzip_member(&self.text[self.pending_from..], self.level, &mut self.gzip);
            self.compressed += self.text.len() - self.pending_from;
            self.pending_from = self.text.len();
        }
        start..self.gzip.len()
    }

    /// Appends text and its member, as they were in the document before.
    fn reuse(&mut self, text: &str, member: &[u8]) {
        self.seal();
        self.text.extend_from_slice(text.as_bytes());
        self.gzip.extend_from_slice(member);
        self.pending_from = self.text.len();
    }
}

/// Text shorter than this (the punctuation between arrays) goes into its member as it is: a
/// compressor's set-up costs more than the bytes it would save.
const STORED_BELOW: usize = 256;

thread_local! {
    /// A raw deflate compressor per thread and level, reset between members: setting one up
    /// allocates and clears a few hundred kilobytes of tables, which cost more than compressing
    /// a chunk of a few kilobytes.
    static COMPRESSOR: std::cell::RefCell<Option<(u32, flate2::Compress)>> = const { std::cell::RefCell::new(None) };
}

/// Appends `data` to `out` as one gzip member (RFC 1952): a header, the raw deflate stream,
/// then the CRC-32 and length of `data`.
fn gzip_member(data: &[u8], level: flate2::Compression, out: &mut Vec<u8>) {
    // Magic, deflate, no flags, no modification time, no extra flags, unknown system.
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    let body = out.len();
    let deflated = data.len() >= STORED_BELOW
        && COMPRESSOR.with_borrow_mut(|slot| {
            let compressor = match slot {
                Some((kept, compressor)) if *kept == level.level() => compressor,
                _ => &mut slot.insert((level.level(), flate2::Compress::new(level, false))).1,
            };
            compressor.reset();
            out.reserve(data.len() / 4 + 64);
            let mut input = data;
            loop {
                let before = compressor.total_in();
                match compressor.compress_vec(input, out, flate2::FlushCompress::Finish) {
                    Ok(flate2::Status::StreamEnd) => return true,
                    // Progress, or a full buffer to grow.
                    Ok(_) => out.reserve(out.capacity().max(4096)),
                    Err(_) => return false,
                }
                input = &input[(compressor.total_in() - before) as usize..];
            }
        });
    if !deflated {
        out.truncate(body);
        stored_blocks(data, out);
    }
    let mut crc = flate2::Crc::new();
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
}

/// `data` as deflate stored blocks (BTYPE 00: uncompressed), the last one final.
fn stored_blocks(data: &[u8], out: &mut Vec<u8>) {
    let mut blocks = data.chunks(u16::MAX as usize).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
}

/// Writes `metadata` as a document, splicing in the unchanged chunks of `previous` (the layout
/// of the document it was built on). `refs` are its refs (see [`refs_after`]).
pub(crate) fn write(metadata: &TableMetadata, refs: Refs, previous: Option<&Layout>) -> Result<Written> {
    let version = metadata.format_version();
    if version == FormatVersion::V1 {
        return write_whole(metadata);
    }
    let head = Head {
        format_version: if version == FormatVersion::V3 { 3 } else { 2 },
        table_uuid: metadata.uuid(),
        location: metadata.location(),
        last_sequence_number: metadata.last_sequence_number(),
        last_updated_ms: metadata.last_updated_ms(),
        last_column_id: metadata.last_column_id(),
        schemas: sorted(metadata.schemas_iter().map(AsRef::as_ref), |s| i64::from(s.schema_id()))
            .into_iter()
            .map(SchemaOut::of)
            .collect::<Result<_>>()?,
        current_schema_id: metadata.current_schema_id(),
        partition_specs: sorted(metadata.partition_specs_iter().map(AsRef::as_ref), |s| i64::from(s.spec_id())),
        default_spec_id: metadata.default_partition_spec_id(),
        last_partition_id: metadata.last_partition_id(),
        properties: metadata.properties(),
        current_snapshot_id: metadata.current_snapshot_id(),
        sort_orders: sorted(metadata.sort_orders_iter().map(AsRef::as_ref), |s| s.order_id),
        default_sort_order_id: metadata.default_sort_order_id(),
        refs: &refs,
        statistics: sorted(metadata.statistics_iter(), |s| s.snapshot_id),
        partition_statistics: sorted(metadata.partition_statistics_iter(), |s| s.snapshot_id),
        next_row_id: (version == FormatVersion::V3).then(|| metadata.next_row_id()),
        encryption_keys: metadata.encryption_keys_iter().collect(),
    };
    let mut out = Builder {
        text: Vec::with_capacity(previous.map_or(4096, |p| p.text.len() + 4096)),
        gzip: Vec::with_capacity(previous.map_or(1024, |p| p.gzip.len() + 1024)),
        pending_from: 0,
        level: LEVEL,
        compressed: 0,
    };
    json_into(&head, &mut out.text)?;
    out.text.pop(); // the head's closing brace: the arrays follow
    let old_text = previous.map_or("", |p| &*p.text);
    let old_gzip = previous.map_or(&[][..], |p| &*p.gzip);

    let snapshots = snapshot_order(metadata, previous.map(|p| p.snapshots.as_slice()));
    let snapshot_log = array(
        &mut out,
        "snapshot-log",
        metadata.history(),
        version,
        previous.map(|p| &p.snapshot_log[..]),
        (old_text, old_gzip),
    )?;
    let metadata_log = array(
        &mut out,
        "metadata-log",
        metadata.metadata_log(),
        version,
        previous.map(|p| &p.metadata_log[..]),
        (old_text, old_gzip),
    )?;
    let snapshots =
        array(&mut out, "snapshots", &snapshots, version, previous.map(|p| &p.snapshots[..]), (old_text, old_gzip))?;
    out.text.push(b'}');
    out.seal();
    let compressed_bytes = out.compressed;

    let text: Arc<str> = String::from_utf8(out.text)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("metadata text is not UTF-8: {e}")))?
        .into();
    let gzip: Arc<[u8]> = out.gzip.into();
    let layout = Layout { text: text.clone(), gzip: gzip.clone(), refs, snapshots, snapshot_log, metadata_log };
    Ok(Written { text, gzip, layout: Some(Arc::new(layout)), compressed_bytes })
}

/// A version 1 document, written by the crate, in one part.
fn write_whole(metadata: &TableMetadata) -> Result<Written> {
    let text = serde_json::to_string(metadata)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("serialising metadata: {e}")))?;
    let mut out = Builder { text: text.into_bytes(), gzip: Vec::new(), pending_from: 0, level: LEVEL, compressed: 0 };
    out.seal();
    let compressed_bytes = out.compressed;
    let text = String::from_utf8(out.text).map_err(|e| CatalogError::Internal(anyhow::anyhow!("{e}")))?;
    Ok(Written { text: text.into(), gzip: out.gzip.into(), layout: None, compressed_bytes })
}

fn sorted<'a, T: ?Sized>(items: impl Iterator<Item = &'a T>, key: impl Fn(&T) -> i64) -> Vec<&'a T> {
    let mut items: Vec<&T> = items.collect();
    items.sort_by_key(|item| key(item));
    items
}

/// The snapshots in the order they are written: those of the document before in its order,
/// then the others by sequence number, timestamp and id.
fn snapshot_order(metadata: &TableMetadata, previous: Option<&[Chunk<SnapshotRef>]>) -> Vec<SnapshotRef> {
    let mut order = Vec::with_capacity(metadata.snapshots().len());
    let mut placed: FastMap<()> = FastMap::with_capacity_and_hasher(metadata.snapshots().len(), Default::default());
    for (old, _) in previous.into_iter().flatten().flat_map(|chunk| chunk.items.iter()) {
        if let Some(now) = metadata.snapshot_by_id(old.snapshot_id())
            && placed.insert(now.snapshot_id() as u64, ()).is_none()
        {
            order.push(now.clone());
        }
    }
    let mut new: Vec<&SnapshotRef> =
        metadata.snapshots().filter(|s| !placed.contains_key(&(s.snapshot_id() as u64))).collect();
    new.sort_by_key(|s| (s.sequence_number(), s.timestamp_ms(), s.snapshot_id()));
    order.extend(new.into_iter().cloned());
    order
}

/// Writes `,"name":[items]` (nothing for no items), reusing the chunks of `previous` that hold
/// the same items in the same order.
fn array<K: Item>(
    out: &mut Builder,
    name: &str,
    items: &[K],
    version: FormatVersion,
    previous: Option<&[Chunk<K>]>,
    (old_text, old_gzip): (&str, &[u8]),
) -> Result<Vec<Chunk<K>>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let previous = previous.unwrap_or(&[]);
    // Which chunk of the document before each item starts.
    let starts: FastMap<usize> = previous.iter().enumerate().map(|(c, chunk)| (chunk.items[0].0.id(), c)).collect();
    let mut texts = Texts { previous, old_text, cursor: (0, 0), index: None };
    out.text.extend_from_slice(b",\"");
    out.text.extend_from_slice(name.as_bytes());
    out.text.extend_from_slice(b"\":");

    let mut chunks: Vec<Chunk<K>> = Vec::new();
    // The chunk being written: where its text starts, and its items.
    let mut current: Option<(usize, Vec<(K, usize)>)> = None;
    let mut i = 0;
    while i < items.len() {
        let first = chunks.is_empty() && current.is_none();
        let reusable = starts.get(&items[i].id()).map(|&c| (c, &previous[c])).filter(|(c, chunk)| {
            let last = *c + 1 == previous.len();
            let size = chunk.text.len();
            // A chunk still growing at the end is written again with what follows it, so
            // chunks reach their size instead of splitting into many small ones.
            let big_enough = if last { size >= CHUNK_BYTES } else { size >= CHUNK_BYTES / 4 };
            big_enough
                && chunk.first(old_text) == first
                && chunk.items.len() <= items.len() - i
                && chunk.items.iter().zip(&items[i..]).all(|((old, _), new)| old.same(new))
        });
        if let Some((c, chunk)) = reusable {
            if let Some((start, chunk_items)) = current.take() {
                let gzip = out.seal();
                chunks.push(Chunk::new(start..out.text.len(), gzip, chunk_items));
            }
            out.reuse(&old_text[chunk.text.clone()], &old_gzip[chunk.gzip.clone()]);
            texts.cursor = (c + 1, 0);
            let end = out.text.len();
            let start = end - chunk.text.len();
            let gzip_end = out.gzip.len();
            chunks.push(Chunk {
                text: start..end,
                gzip: gzip_end - chunk.gzip.len()..gzip_end,
                items: chunk.items.clone(),
                parsed_bytes: chunk.parsed_bytes,
            });
            i += chunk.items.len();
            continue;
        }
        if current.is_none() {
            // A chunk's text starts a member of its own; the array's opening (or the previous
            // array's end) goes with what came before.
            out.seal();
            current = Some((out.text.len(), Vec::new()));
        }
        let (start, chunk_items) = current.as_mut().expect("a chunk is being written");
        out.text.push(if first { b'[' } else { b',' });
        let item = &items[i];
        match texts.find(item) {
            Some(text) => out.text.extend_from_slice(text.as_bytes()),
            None => item.write(version, &mut out.text)?,
        }
        let relative_end = out.text.len() - *start;
        chunk_items.push((item.clone(), relative_end));
        i += 1;
        if relative_end >= CHUNK_BYTES {
            let (start, chunk_items) = current.take().expect("a chunk is being written");
            let gzip = out.seal();
            chunks.push(Chunk::new(start..out.text.len(), gzip, chunk_items));
        }
    }
    if let Some((start, chunk_items)) = current.take() {
        let gzip = out.seal();
        chunks.push(Chunk::new(start..out.text.len(), gzip, chunk_items));
    }
    out.text.push(b']');
    Ok(chunks)
}

/// Maps keyed by item ids, which are hashes already (or snapshot ids): a multiply-shift mix
/// is all they need, instead of SipHash.
type FastMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<MixHasher>>;

#[derive(Default)]
struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.write_u64(u64::from(*byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0 ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
}

/// Finds the text an item had in the document before: near where the previous item was found
/// (appends and expiry keep the order, skipping a few), else through an index of every item,
/// made the first time it is needed.
struct Texts<'a, K> {
    previous: &'a [Chunk<K>],
    old_text: &'a str,
    /// The position after the last item found.
    cursor: (usize, usize),
    index: Option<FastMap<(usize, usize)>>,
}

impl<'a, K: Item> Texts<'a, K> {
    fn find(&mut self, item: &K) -> Option<&'a str> {
        let mut position = self.cursor;
        for _ in 0..8 {
            let Some(chunk) = self.previous.get(position.0) else { break };
            match chunk.items.get(position.1) {
                Some((old, _)) if old.same(item) => return Some(self.text_at(position)),
                Some(_) => position.1 += 1,
                None => position = (position.0 + 1, 0),
            }
        }
        let previous = self.previous;
        let index = self.index.get_or_insert_with(|| {
            let mut index = FastMap::default();
            for (c, chunk) in previous.iter().enumerate() {
                for (k, (old, _)) in chunk.items.iter().enumerate() {
                    index.insert(old.id(), (c, k));
                }
            }
            index
        });
        let &(c, k) = index.get(&item.id())?;
        previous[c].items[k].0.same(item).then(|| self.text_at((c, k)))
    }

    /// The text of the item at `(chunk, index)`, and the cursor moved past it.
    fn text_at(&mut self, (c, k): (usize, usize)) -> &'a str {
        self.cursor = (c, k + 1);
        let chunk = &self.previous[c];
        let begin = if k == 0 { 1 } else { chunk.items[k - 1].1 + 1 };
        &self.old_text[chunk.text.start + begin..chunk.text.start + chunk.items[k].1]
    }
}

/// The refs of metadata built on a document whose refs were `base`: the builder's recorded
/// `changes` replayed as the builder applies them, then checked against the metadata. `None`
/// when the check fails (the document is then written with refs read back from the crate's
/// own serialisation).
pub(crate) fn refs_after(base: &Refs, changes: &[TableUpdate], metadata: &TableMetadata) -> Option<Refs> {
    let mut refs = base.clone();
    let mut named: Vec<&str> = Vec::new();
    for change in changes {
        match change {
            TableUpdate::SetSnapshotRef { ref_name, reference } => {
                refs.insert(ref_name.clone(), reference.clone());
                named.push(ref_name);
            }
            TableUpdate::RemoveSnapshotRef { ref_name } => {
                refs.remove(ref_name);
                named.push(ref_name);
            }
            TableUpdate::RemoveSnapshots { snapshot_ids } => {
                refs.retain(|_, r| !snapshot_ids.contains(&r.snapshot_id));
            }
            _ => {}
        }
    }
    with_main(&mut refs, metadata);
    let resolves =
        refs.iter().all(|(name, r)| metadata.snapshot_for_ref(name).map(|s| s.snapshot_id()) == Some(r.snapshot_id));
    let gone =
        named.iter().filter(|name| !refs.contains_key(**name)).all(|name| metadata.snapshot_for_ref(name).is_none());
    (resolves && gone && base.keys().all(|name| refs.contains_key(name) || metadata.snapshot_for_ref(name).is_none()))
        .then_some(refs)
}

/// What the crate adds when it normalises metadata: a `main` branch at the current snapshot.
fn with_main(refs: &mut Refs, metadata: &TableMetadata) {
    if let Some(current) = metadata.current_snapshot_id()
        && !refs.contains_key(MAIN_BRANCH)
    {
        let retention =
            SnapshotRetention::Branch { min_snapshots_to_keep: None, max_snapshot_age_ms: None, max_ref_age_ms: None };
        refs.insert(MAIN_BRANCH.to_owned(), SnapshotReference::new(current, retention));
    }
}

/// The refs of stored document `text`, which parses to `metadata` (as the crate reads them).
pub(crate) fn refs_of(text: &str, metadata: &TableMetadata) -> Result<Refs> {
    #[derive(serde::Deserialize)]
    struct RefsOnly {
        #[serde(default)]
        refs: Option<Refs>,
    }
    let parsed: RefsOnly = serde_json::from_str(text)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored metadata has invalid refs: {e}")))?;
    // Version 1 documents have no refs: the crate makes `main` from the current snapshot.
    let mut refs =
        if metadata.format_version() == FormatVersion::V1 { Refs::new() } else { parsed.refs.unwrap_or_default() };
    with_main(&mut refs, metadata);
    Ok(refs)
}

#[cfg(test)]
mod tests;
