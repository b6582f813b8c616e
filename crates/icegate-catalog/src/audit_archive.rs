//! The audit trail outside the database: checkpoints and retention's archive in object storage
//! (`audit.checkpoint.location`).
//!
//! A checkpoint (`checkpoints/<seq>.json`: a record's sequence number, its hash and time) pins
//! the chain at that record: whoever rewrites the table afterwards, hashes and all, cannot make
//! the record at that number hash the same. Checkpoints are written on a schedule (the
//! `audit-checkpoint` job) and before every retention cut; put the location in a bucket with S3
//! Object Lock and a default retention, so they cannot be replaced either.
//!
//! Retention (`audit.retention`): records older than it are exported first (`records/<first>-
//! <last>.jsonl.gz`, the lines of `icegate audit export`), checkpointed, and only then removed
//! from the database, in batches; the database keeps where its chain now starts (the base).
//! `icegate audit verify` checks the archive from the first record to the base, the base against
//! its checkpoint, the database from the base to the head, and every checkpoint against the
//! record it names.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::audit::{AuditFilter, ChainEnds, GENESIS, export_line, link};
use crate::error::{CatalogError, Result};
use crate::jobs::{Job, Progress, TaskRun};
use crate::store::CatalogStore;

/// Where checkpoints and archived records are kept.
#[async_trait::async_trait]
pub trait ArchiveStore: Send + Sync + 'static {
    /// Writes `name` (relative to the location) with `bytes`, replacing nothing it must keep:
    /// the same name is written only with the same content.
    async fn put(&self, name: &str, bytes: Bytes) -> Result<()>;
    /// Reads `name`, at most `max_bytes` of it (more is an error).
    async fn get(&self, name: &str, max_bytes: u64) -> Result<Bytes>;
    /// The names below `prefix` (relative to the location).
    async fn list(&self, prefix: &str) -> Result<Vec<String>>;
    /// The location, for messages.
    fn describe(&self) -> String;
}

/// A checkpoint: record `seq` had hash `hash` (and time `at_ms`) when it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Checkpoint {
    pub seq: i64,
    pub hash: String,
    pub at_ms: i64,
    pub written_at_ms: i64,
}

/// A checkpoint file is small; an archive segment holds at most [`BATCH`] records.
const MAX_CHECKPOINT_BYTES: u64 = 64 * 1024;
const MAX_SEGMENT_BYTES: u64 = 1 << 30;
/// Records exported and removed per retention step.
pub const BATCH: i64 = 10_000;

pub fn checkpoint_name(seq: i64) -> String {
    format!("checkpoints/{seq:020}.json")
}

fn segment_name(first: i64, last: i64) -> String {
    format!("records/{first:020}-{last:020}.jsonl.gz")
}

/// The sequence numbers a name of `checkpoint_name` or `segment_name` holds.
fn numbers(name: &str, prefix: &str, suffix: &str) -> Option<Vec<i64>> {
    let name = name.rsplit_once(prefix).map_or(name, |(_, rest)| rest);
    let name = name.strip_suffix(suffix)?;
    name.split('-').map(|n| n.parse().ok()).collect()
}

async fn checkpoints(archive: &dyn ArchiveStore) -> Result<BTreeMap<i64, String>> {
    let mut found = BTreeMap::new();
    for name in archive.list("checkpoints/").await? {
        if numbers(&name, "checkpoints/", ".json").is_some_and(|n| n.len() == 1) {
            found.insert(numbers(&name, "checkpoints/", ".json").unwrap_or_default()[0], name);
        }
    }
    Ok(found)
}

/// Checkpoints the head, and with `retention` exports, checkpoints and removes the records
/// older than it. Recurs; one replica runs each pass; every step can be repeated after a crash
/// (an export and a checkpoint are written again with the same content; a cut that committed is
/// not made twice).
pub struct AuditCheckpointJob {
    store: Arc<dyn CatalogStore>,
    archive: Arc<dyn ArchiveStore>,
    retention: Option<Duration>,
}

pub const KIND: &str = "audit-checkpoint";

impl AuditCheckpointJob {
    pub fn new(store: Arc<dyn CatalogStore>, archive: Arc<dyn ArchiveStore>, retention: Option<Duration>) -> Self {
        Self { store, archive, retention }
    }

    async fn checkpoint(&self, seq: i64, now_ms: i64) -> Result<Checkpoint> {
        let record = self
            .store
            .audit_records(&AuditFilter { after_seq: Some(seq - 1), until_seq: Some(seq), ..AuditFilter::default() }, 1)
            .await?
            .pop()
            .ok_or_else(|| CatalogError::Conflict(format!("audit record {seq} is not in the store to checkpoint")))?;
        let checkpoint = Checkpoint { seq, hash: record.hash, at_ms: record.at_ms, written_at_ms: now_ms };
        let bytes = serde_json::to_vec(&checkpoint).map_err(|e| CatalogError::Internal(e.into()))?;
        self.archive.put(&checkpoint_name(seq), Bytes::from(bytes)).await?;
        Ok(checkpoint)
    }

    /// Exports records `(after, through]` as one gzipped JSON Lines segment, checking each link
    /// from `previous` (a broken chain is not archived and cut: it is evidence).
    async fn export(&self, after: i64, through: i64, previous: &str) -> Result<()> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut filter = AuditFilter { after_seq: Some(after), until_seq: Some(through), ..AuditFilter::default() };
        let (mut expected, mut previous) = (after + 1, previous.to_owned());
        loop {
            let page = self.store.audit_records(&filter, crate::audit::MAX_PAGE).await?;
            let Some(last) = page.last() else { break };
            filter.after_seq = Some(last.seq);
            for record in &page {
                if record.seq != expected || record.hash != link(&previous, &record.record) {
                    return Err(CatalogError::Conflict(format!(
                        "the audit chain breaks at record {expected}: not archived or removed (run `icegate audit verify`)"
                    )));
                }
                writeln!(encoder, "{}", export_line(record)).map_err(|e| CatalogError::Internal(e.into()))?;
                expected += 1;
                previous = record.hash.clone();
            }
        }
        if expected != through + 1 {
            return Err(CatalogError::Conflict(format!("audit record {expected} is missing: not archived or removed")));
        }
        let bytes = encoder.finish().map_err(|e| CatalogError::Internal(e.into()))?;
        self.archive.put(&segment_name(after + 1, through), Bytes::from(bytes)).await
    }
}

#[async_trait::async_trait]
impl Job for AuditCheckpointJob {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let now = run.now_ms();
        let ChainEnds { head, .. } = self.store.audit_ends().await?;
        let latest = checkpoints(self.archive.as_ref()).await?.keys().next_back().copied().unwrap_or(0);
        let checkpointed = if head.0 > latest { Some(self.checkpoint(head.0, now).await?.seq) } else { None };
        let mut removed = 0;
        if let Some(retention) = self.retention {
            let cutoff = now - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
            while let Some(old) = self.store.audit_seq_before(cutoff).await? {
                let ChainEnds { base, .. } = self.store.audit_ends().await?;
                if old <= base.0 {
                    break;
                }
                let through = old.min(base.0 + BATCH);
                self.export(base.0, through, &base.1).await?;
                self.checkpoint(through, now).await?;
                self.store.cut_audit(&run.context().write(), through).await?;
                removed += through - base.0;
                run.save(Progress { done: removed, total: None, bytes: 0 }, None).await?;
            }
        }
        Ok(json!({ "checkpointed": checkpointed, "removed": removed }))
    }
}

/// What checking the archive found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveCheck {
    pub archived: u64,
    pub checkpoints: usize,
    /// The first problem: the record it is at, and what.
    pub broken: Option<(i64, String)>,
}

/// Checks the archive and the checkpoints against the chain in the store (`ends`; `hash_at`: the
/// hash the store has for a record between its base and head): the archive from the first
/// record to the base, a checkpoint vouching for the base, and every checkpoint against the
/// record it names. A rewrite of the whole table shows as a checkpoint whose record hashes
/// otherwise, or a base no checkpoint vouches for.
pub async fn verify(
    archive: &dyn ArchiveStore,
    ends: &ChainEnds,
    hash_at: impl AsyncFn(i64) -> Result<Option<String>>,
) -> Result<ArchiveCheck> {
    let points = checkpoints(archive).await?;
    let mut pinned: BTreeMap<i64, Checkpoint> = BTreeMap::new();
    for (seq, name) in &points {
        let bytes = archive.get(name, MAX_CHECKPOINT_BYTES).await?;
        let checkpoint: Checkpoint = serde_json::from_slice(&bytes).map_err(|e| {
            CatalogError::Conflict(format!("checkpoint {name} in {} is not a checkpoint: {e}", archive.describe()))
        })?;
        if checkpoint.seq != *seq {
            return Ok(broken(0, 0, points.len(), *seq, format!("checkpoint {name} names record {}", checkpoint.seq)));
        }
        pinned.insert(*seq, checkpoint);
    }
    // The archive: contiguous from the first record, each link in turn, up to the base.
    let mut segments: Vec<(i64, i64, String)> = archive
        .list("records/")
        .await?
        .into_iter()
        .filter_map(|name| match numbers(&name, "records/", ".jsonl.gz")?.as_slice() {
            [first, last] => Some((*first, *last, name)),
            _ => None,
        })
        .collect();
    segments.sort();
    let (mut expected, mut previous, mut archived) = (1_i64, GENESIS.to_owned(), 0_u64);
    for (first, last, name) in &segments {
        if *first != expected {
            return Ok(broken(archived, 0, points.len(), expected, format!("archived record {expected} is missing")));
        }
        let bytes = archive.get(name, MAX_SEGMENT_BYTES).await?;
        // Bounded decompression: a segment holds at most BATCH records.
        let decoder = flate2::read::GzDecoder::new(bytes.as_ref()).take(MAX_SEGMENT_BYTES * 8);
        for line in std::io::BufReader::new(decoder).lines() {
            let line =
                line.map_err(|e| CatalogError::Conflict(format!("archive segment {name} is unreadable: {e}")))?;
            let parsed: Value = serde_json::from_str(&line).map_err(|e| {
                CatalogError::Conflict(format!("archive segment {name} holds a line that is not JSON: {e}"))
            })?;
            let (seq, hash, text) = (parsed["seq"].as_i64(), parsed["hash"].as_str(), parsed["text"].as_str());
            let (Some(seq), Some(hash), Some(text)) = (seq, hash, text) else {
                return Ok(broken(
                    archived,
                    0,
                    points.len(),
                    expected,
                    format!("archive segment {name}: a line is not a record"),
                ));
            };
            if seq != expected {
                return Ok(broken(
                    archived,
                    0,
                    points.len(),
                    expected,
                    format!("archived record {expected} is missing"),
                ));
            }
            if hash != link(&previous, text) {
                let why = format!("archived record {seq} does not link to the one before it");
                return Ok(broken(archived, 0, points.len(), seq, why));
            }
            if let Some(point) = pinned.get(&seq)
                && point.hash != hash
            {
                return Ok(broken(
                    archived,
                    0,
                    points.len(),
                    seq,
                    format!("archived record {seq} is not the one checkpointed"),
                ));
            }
            archived += 1;
            expected += 1;
            previous = hash.to_owned();
        }
        if expected != last + 1 {
            return Ok(broken(archived, 0, points.len(), expected, format!("archive segment {name} ends early")));
        }
    }
    let (base, head) = (&ends.base, &ends.head);
    if expected - 1 != base.0 || previous != base.1 {
        let why = if base.0 == 0 {
            format!("the archive holds records through {}, but the database's chain starts at record 1", expected - 1)
        } else {
            format!(
                "the database's chain starts after record {}, which the archive (through record {}) does not end with",
                base.0,
                expected - 1
            )
        };
        return Ok(broken(archived, 0, points.len(), base.0, why));
    }
    if base.0 > 0 && pinned.get(&base.0).is_none_or(|p| p.hash != base.1) {
        let why = format!("no checkpoint vouches for record {}, where the database's chain starts", base.0);
        return Ok(broken(archived, 0, points.len(), base.0, why));
    }
    for (seq, point) in pinned.range(base.0 + 1..) {
        if *seq > head.0 {
            let why = format!(
                "a checkpoint names record {seq}, but the chain ends at record {}: records were removed",
                head.0
            );
            return Ok(broken(archived, 0, points.len(), *seq, why));
        }
        if hash_at(*seq).await?.as_deref() != Some(point.hash.as_str()) {
            let why = format!("record {seq} is not the one checkpointed (the trail was rewritten)");
            return Ok(broken(archived, 0, points.len(), *seq, why));
        }
    }
    Ok(ArchiveCheck { archived, checkpoints: points.len(), broken: None })
}

fn broken(archived: u64, _: u64, checkpoints: usize, seq: i64, why: String) -> ArchiveCheck {
    ArchiveCheck { archived, checkpoints, broken: Some((seq, why)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_number_and_parse_back() {
        assert_eq!(checkpoint_name(42), "checkpoints/00000000000000000042.json");
        assert_eq!(numbers(&checkpoint_name(42), "checkpoints/", ".json"), Some(vec![42]));
        assert_eq!(numbers(&segment_name(1, 10_000), "records/", ".jsonl.gz"), Some(vec![1, 10_000]));
        assert_eq!(numbers("checkpoints/x.json", "checkpoints/", ".json"), None);
        assert!(checkpoint_name(9) < checkpoint_name(10));
    }
}
