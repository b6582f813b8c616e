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
    /// Writes `name` (relative to the location) with `bytes` (callers read first what may be
    /// there: nothing they write replaces what differs).
    async fn put(&self, name: &str, bytes: Bytes) -> Result<()>;
    /// Reads `name`, at most `max_bytes` of it (more is an error).
    async fn get(&self, name: &str, max_bytes: u64) -> Result<Bytes>;
    /// [`get`](Self::get), or `None` when there is no such object.
    async fn get_if_exists(&self, name: &str, max_bytes: u64) -> Result<Option<Bytes>>;
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

/// The checkpoint `name` is, if it is exactly a name [`checkpoint_name`] gives (any other object,
/// `78.json` or `checkpoints/x/...` beside the real ones, is no checkpoint and cannot stand for
/// one).
fn checkpoint_seq(name: &str) -> Option<i64> {
    let seq: i64 = name.strip_prefix("checkpoints/")?.strip_suffix(".json")?.parse().ok()?;
    (seq > 0 && checkpoint_name(seq) == name).then_some(seq)
}

/// The records the archive segment `name` holds, if it is exactly a name [`segment_name`] gives.
fn segment_range(name: &str) -> Option<(i64, i64)> {
    let (first, last) = name.strip_prefix("records/")?.strip_suffix(".jsonl.gz")?.split_once('-')?;
    let (first, last): (i64, i64) = (first.parse().ok()?, last.parse().ok()?);
    (first > 0 && last >= first && segment_name(first, last) == name).then_some((first, last))
}

/// The checkpoints at the location, by the record each names; objects under `checkpoints/` that
/// are not checkpoints are returned apart (`verify` reports them: nothing is put there but
/// checkpoints).
async fn checkpoints(archive: &dyn ArchiveStore) -> Result<(BTreeMap<i64, String>, Vec<String>)> {
    let (mut found, mut strays) = (BTreeMap::new(), Vec::new());
    for name in archive.list("checkpoints/").await? {
        match checkpoint_seq(&name) {
            Some(seq) => {
                found.insert(seq, name);
            }
            None => strays.push(name),
        }
    }
    Ok((found, strays))
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

    /// Checkpoints record `seq`, unless a checkpoint of it stands already (which must then name
    /// the same hash: a different one is not overwritten, and nothing is cut).
    async fn checkpoint(&self, seq: i64, now_ms: i64) -> Result<bool> {
        let record = self
            .store
            .audit_records(&AuditFilter { after_seq: Some(seq - 1), until_seq: Some(seq), ..AuditFilter::default() }, 1)
            .await?
            .pop()
            .ok_or_else(|| CatalogError::Conflict(format!("audit record {seq} is not in the store to checkpoint")))?;
        let name = checkpoint_name(seq);
        if let Some(bytes) = self.archive.get_if_exists(&name, MAX_CHECKPOINT_BYTES).await? {
            let standing: Option<Checkpoint> = serde_json::from_slice(&bytes).ok();
            return match standing {
                Some(standing) if standing.seq == seq && standing.hash == record.hash => Ok(false),
                _ => Err(CatalogError::Conflict(format!(
                    "{name} at {} is not a checkpoint of record {seq} as the store has it: nothing is cut (run \
                     `icegate audit verify`)",
                    self.archive.describe()
                ))),
            };
        }
        let checkpoint = Checkpoint { seq, hash: record.hash, at_ms: record.at_ms, written_at_ms: now_ms };
        let bytes = serde_json::to_vec(&checkpoint).map_err(|e| CatalogError::Internal(e.into()))?;
        self.archive.put(&name, Bytes::from(bytes)).await?;
        Ok(true)
    }

    /// Exports records `(after, through]` as one gzipped JSON Lines segment, checking each link
    /// from `previous` (a broken chain is not archived and cut: it is evidence). A segment of
    /// that name already there must hold exactly these records.
    async fn export(&self, after: i64, through: i64, previous: &str) -> Result<()> {
        let mut text = Vec::new();
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
                writeln!(text, "{}", export_line(record)).map_err(|e| CatalogError::Internal(e.into()))?;
                expected += 1;
                previous = record.hash.clone();
            }
        }
        if expected != through + 1 {
            return Err(CatalogError::Conflict(format!("audit record {expected} is missing: not archived or removed")));
        }
        let name = segment_name(after + 1, through);
        if let Some(standing) = self.archive.get_if_exists(&name, MAX_SEGMENT_BYTES).await? {
            // The same records (compressed by whatever wrote them), and nothing more.
            let mut held = Vec::new();
            let limit = text.len() as u64 + 1;
            let read = flate2::read::GzDecoder::new(standing.as_ref()).take(limit).read_to_end(&mut held);
            if read.is_ok() && held == text {
                return Ok(());
            }
            return Err(CatalogError::Conflict(format!(
                "{name} at {} does not hold the records it names: nothing is cut (run `icegate audit verify`)",
                self.archive.describe()
            )));
        }
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(&text).map_err(|e| CatalogError::Internal(e.into()))?;
        let bytes = encoder.finish().map_err(|e| CatalogError::Internal(e.into()))?;
        self.archive.put(&name, Bytes::from(bytes)).await
    }

    /// Checkpoints the chain's head now, unless it is checkpointed already (at shutdown, and on
    /// the schedule). Whether a checkpoint was written.
    pub async fn checkpoint_head(&self, now_ms: i64) -> Result<Option<i64>> {
        let ChainEnds { head, .. } = self.store.audit_ends().await?;
        if head.0 == 0 {
            return Ok(None);
        }
        Ok(self.checkpoint(head.0, now_ms).await?.then_some(head.0))
    }
}

#[async_trait::async_trait]
impl Job for AuditCheckpointJob {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let now = run.now_ms();
        let checkpointed = self.checkpoint_head(now).await?;
        let mut removed = 0;
        if let Some(retention) = self.retention {
            let cutoff = now - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
            while let Some(old) = self.store.audit_seq_before(cutoff).await? {
                let ChainEnds { base, .. } = self.store.audit_ends().await?;
                if old <= base.0 {
                    break;
                }
                // A segment from the base on that a run cut short left (exported, not cut):
                // resumed through its end, so segments never overlap.
                let started = self
                    .archive
                    .list("records/")
                    .await?
                    .iter()
                    .filter_map(|name| segment_range(name))
                    .filter(|(first, last)| *first == base.0 + 1 && *last <= old)
                    .map(|(_, last)| last)
                    .max();
                let through = started.unwrap_or_else(|| old.min(base.0 + BATCH));
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

/// The longest line an archive segment may hold (a record is bounded by its request's size).
const MAX_LINE_BYTES: u64 = 64 << 20;

/// Checks the archive and the checkpoints against the chain in the store (`ends`; `hash_at`: the
/// hash the store has for a record between its base and head): the archive from the first
/// record to the base, a checkpoint vouching for the base, and every checkpoint against the
/// record it names. A rewrite of the whole table shows as a checkpoint whose record hashes
/// otherwise, or a base no checkpoint vouches for. Objects at the location that are neither
/// (another name under `checkpoints/` or `records/`) are reported: nothing else is put there.
pub async fn verify(
    archive: &dyn ArchiveStore,
    ends: &ChainEnds,
    hash_at: impl AsyncFn(i64) -> Result<Option<String>>,
) -> Result<ArchiveCheck> {
    let (points, strays) = checkpoints(archive).await?;
    let count = points.len();
    let fail =
        |archived: u64, seq: i64, why: String| ArchiveCheck { archived, checkpoints: count, broken: Some((seq, why)) };
    if let Some(stray) = strays.first() {
        return Ok(fail(0, 0, format!("{stray} at {} is no checkpoint icegate wrote", archive.describe())));
    }
    let mut pinned: BTreeMap<i64, Checkpoint> = BTreeMap::new();
    for (seq, name) in &points {
        let bytes = archive.get(name, MAX_CHECKPOINT_BYTES).await?;
        match serde_json::from_slice::<Checkpoint>(&bytes) {
            Ok(checkpoint) if checkpoint.seq == *seq => {
                pinned.insert(*seq, checkpoint);
            }
            _ => return Ok(fail(0, *seq, format!("{name} is not a checkpoint of record {seq}"))),
        }
    }
    // The archive: segments from record 1, contiguous, each link in turn, up to the base. Runs
    // cut short may have left segments that start where another does: each must agree, and the
    // walk goes on from the longest.
    let mut segments: BTreeMap<i64, Vec<(i64, String)>> = BTreeMap::new();
    for name in archive.list("records/").await? {
        match segment_range(&name) {
            Some((first, last)) => segments.entry(first).or_default().push((last, name)),
            None => {
                return Ok(fail(0, 0, format!("{name} at {} is no archive segment icegate wrote", archive.describe())));
            }
        }
    }
    let (mut expected, mut previous, mut archived) = (1_i64, GENESIS.to_owned(), 0_u64);
    while let Some(starting) = segments.remove(&expected) {
        let mut longest: Option<(i64, String)> = None;
        for (last, name) in &starting {
            match walk_segment(archive, name, (expected, &previous), &pinned).await? {
                Err((seq, why)) => return Ok(fail(archived, seq, why)),
                Ok((end, _)) if end != *last => {
                    return Ok(fail(archived, expected, format!("{name} does not hold the records its name says")));
                }
                Ok((end, hash)) => {
                    if longest.as_ref().is_none_or(|(l, _)| end > *l) {
                        longest = Some((end, hash));
                    }
                }
            }
        }
        let Some((end, hash)) = longest else { break };
        archived = u64::try_from(end).unwrap_or(0);
        expected = end + 1;
        previous = hash;
    }
    if let Some((first, _)) = segments.first_key_value() {
        return Ok(fail(archived, *first, format!("archive segments start at record {first}, which none ends before")));
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
        return Ok(fail(archived, base.0, why));
    }
    if base.0 > 0 && pinned.get(&base.0).is_none_or(|p| p.hash != base.1) {
        let why = format!("no checkpoint vouches for record {}, where the database's chain starts", base.0);
        return Ok(fail(archived, base.0, why));
    }
    for (seq, point) in pinned.range(base.0 + 1..) {
        if *seq > head.0 {
            let why = format!(
                "a checkpoint names record {seq}, but the chain ends at record {}: records were removed",
                head.0
            );
            return Ok(fail(archived, *seq, why));
        }
        if hash_at(*seq).await?.as_deref() != Some(point.hash.as_str()) {
            let why = format!("record {seq} is not the one checkpointed (the trail was rewritten)");
            return Ok(fail(archived, *seq, why));
        }
    }
    Ok(ArchiveCheck { archived, checkpoints: count, broken: None })
}

/// Walks one segment from record `expected` after `previous`: the last record and its hash, or
/// where and why it breaks. Reads at most [`MAX_LINE_BYTES`] a line, [`BATCH`] lines.
async fn walk_segment(
    archive: &dyn ArchiveStore,
    name: &str,
    (mut expected, previous): (i64, &str),
    pinned: &BTreeMap<i64, Checkpoint>,
) -> Result<std::result::Result<(i64, String), (i64, String)>> {
    let bytes = archive.get(name, MAX_SEGMENT_BYTES).await?;
    let mut reader = std::io::BufReader::new(flate2::read::GzDecoder::new(bytes.as_ref()));
    let mut previous = previous.to_owned();
    let mut line = Vec::new();
    for _ in 0..=BATCH {
        line.clear();
        let read = (&mut reader).take(MAX_LINE_BYTES + 1).read_until(b'\n', &mut line);
        let read = match read {
            Ok(0) => return Ok(Ok((expected - 1, previous))),
            Ok(n) => n,
            Err(e) => return Ok(Err((expected, format!("{name} is unreadable: {e}")))),
        };
        if read as u64 > MAX_LINE_BYTES {
            return Ok(Err((expected, format!("{name} holds a line longer than {MAX_LINE_BYTES} bytes"))));
        }
        let Ok(parsed) = serde_json::from_slice::<Value>(&line) else {
            return Ok(Err((expected, format!("{name} holds a line that is not JSON"))));
        };
        let (seq, hash, text) = (parsed["seq"].as_i64(), parsed["hash"].as_str(), parsed["text"].as_str());
        let (Some(seq), Some(hash), Some(text)) = (seq, hash, text) else {
            return Ok(Err((expected, format!("{name}: a line is not a record"))));
        };
        if seq != expected {
            return Ok(Err((expected, format!("archived record {expected} is missing"))));
        }
        if hash != link(&previous, text) {
            return Ok(Err((seq, format!("archived record {seq} does not link to the one before it"))));
        }
        if pinned.get(&seq).is_some_and(|point| point.hash != hash) {
            return Ok(Err((seq, format!("archived record {seq} is not the one checkpointed"))));
        }
        expected += 1;
        previous = hash.to_owned();
    }
    Ok(Err((expected, format!("{name} holds more than {BATCH} records"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_icegate_writes_are_checkpoints_and_segments() {
        assert_eq!(checkpoint_name(42), "checkpoints/00000000000000000042.json");
        assert_eq!(checkpoint_seq(&checkpoint_name(42)), Some(42));
        for alias in [
            "checkpoints/42.json",
            "checkpoints/+0000000000000000042.json",
            "checkpoints/000000000000000000042.json",
            "checkpoints/zz/checkpoints/00000000000000000042.json",
            "checkpoints/-0000000000000000042.json",
        ] {
            assert_eq!(checkpoint_seq(alias), None, "{alias}");
        }
        assert_eq!(segment_range(&segment_name(1, 10_000)), Some((1, 10_000)));
        assert_eq!(segment_range("records/1-7.jsonl.gz"), None);
        assert_eq!(segment_range(&segment_name(9, 3)), None);
        assert!(checkpoint_name(9) < checkpoint_name(10));
    }
}
