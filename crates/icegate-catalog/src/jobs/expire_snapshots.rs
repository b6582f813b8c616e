//! Snapshot expiry run by the catalog, for tables whose properties ask for it
//! (`history.expire.max-snapshot-age-ms`, with `history.expire.min-snapshots-to-keep` and
//! `history.expire.max-ref-age-ms`, and the per-ref overrides Iceberg defines).
//!
//! The expiry is an ordinary commit: `remove-snapshots` (and `remove-snapshot-ref` for refs past
//! their age) guarded by `assert-ref-snapshot-id` on every branch, so a writer that commits
//! meanwhile wins and the expiry is planned again on the new state; a writer is never failed by
//! maintenance. The files it then deletes are those reachable from the metadata before the
//! commit and not from the table's metadata now (manifest lists, manifests and the files their
//! entries name, statistics files), read with the `iceberg` crate, and only those inside the
//! locations the catalog recorded for the table: a file the table references elsewhere is not
//! its own. Nothing is expired for a table with `gc.enabled=false` or under a legal hold.
//! Resumable: once the commit is made, the metadata locations before and after it are saved,
//! and the deletion (idempotent) is recomputed from them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use iceberg::spec::{FormatVersion, Manifest, ManifestList};
use iceberg::{TableRequirement, TableUpdate};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Job, JobMetrics, NewTask, TaskRun, TaskStore};
use crate::error::{CatalogError, Result};
use crate::ids::{TabularId, WarehouseId};
use crate::schema_cost::Pending;
use crate::service::Catalog;
use crate::storage::TableLocations;
use crate::store::Warehouse;
use crate::tables::{SnapshotMode, TableChange, TableIdent};

pub const KIND: &str = "expire-snapshots";
pub const MAX_AGE_PROPERTY: &str = "history.expire.max-snapshot-age-ms";
pub const MIN_KEEP_PROPERTY: &str = "history.expire.min-snapshots-to-keep";
pub const MAX_REF_AGE_PROPERTY: &str = "history.expire.max-ref-age-ms";
pub const GC_ENABLED_PROPERTY: &str = "gc.enabled";
/// The largest manifest list or manifest read.
const MAX_MANIFEST_BYTES: u64 = 256 << 20;
/// Files deleted per call (one S3 `DeleteObjects`).
const BATCH: usize = 1000;
/// Plans tried against concurrent writers before the task is retried later.
const MAX_COMMIT_TRIES: usize = 5;

/// A table's expiry policy, from its properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiryPolicy {
    pub max_snapshot_age_ms: i64,
    pub min_snapshots_to_keep: usize,
    pub max_ref_age_ms: Option<i64>,
}

fn positive(properties: &HashMap<String, String>, key: &str) -> Result<Option<i64>> {
    properties
        .get(key)
        .map(|v| match v.trim().parse::<i64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(CatalogError::bad_request(format!("{key} must be a positive integer, not {v:?}"))),
        })
        .transpose()
}

/// A table's expiry policy: each of its own properties, else what it inherits from its
/// namespaces and warehouse (`inherited`); `None` when neither sets a max snapshot age, or the
/// table forbids deleting files (`gc.enabled=false`).
pub fn expiry_policy(
    properties: &HashMap<String, String>,
    inherited: &crate::maintenance::PolicyLevel,
) -> Result<Option<ExpiryPolicy>> {
    if !gc_enabled(properties) {
        return Ok(None);
    }
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let max_age = positive(properties, MAX_AGE_PROPERTY)?.or(inherited.expire_max_age.map(ms));
    let Some(max_age) = max_age else { return Ok(None) };
    let min_keep = positive(properties, MIN_KEEP_PROPERTY)?.or(inherited.expire_min_keep.map(i64::from)).unwrap_or(1);
    Ok(Some(ExpiryPolicy {
        max_snapshot_age_ms: max_age,
        min_snapshots_to_keep: usize::try_from(min_keep).unwrap_or(usize::MAX),
        max_ref_age_ms: positive(properties, MAX_REF_AGE_PROPERTY)?.or(inherited.expire_max_ref_age.map(ms)),
    }))
}

/// Whether the table lets the catalog delete its files (`gc.enabled`, true unless `false`).
pub fn gc_enabled(properties: &HashMap<String, String>) -> bool {
    !properties.get(GC_ENABLED_PROPERTY).is_some_and(|v| v.eq_ignore_ascii_case("false"))
}

/// What expiry reads of a metadata document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Document {
    #[serde(default)]
    current_snapshot_id: Option<i64>,
    #[serde(default)]
    snapshots: Vec<SnapshotEntry>,
    #[serde(default)]
    refs: HashMap<String, RefEntry>,
    #[serde(default)]
    pub properties: HashMap<String, String>,
    #[serde(default)]
    statistics: Vec<StatisticsEntry>,
    #[serde(default)]
    partition_statistics: Vec<StatisticsEntry>,
    #[serde(default = "v2")]
    format_version: u8,
    #[serde(default)]
    metadata_log: Vec<MetadataLogEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct MetadataLogEntry {
    metadata_file: String,
}

fn v2() -> u8 {
    2
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct SnapshotEntry {
    snapshot_id: i64,
    #[serde(default)]
    parent_snapshot_id: Option<i64>,
    timestamp_ms: i64,
    #[serde(default)]
    manifest_list: Option<String>,
    /// Format v1 without a manifest list: the manifests themselves.
    #[serde(default)]
    manifests: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RefEntry {
    snapshot_id: i64,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    min_snapshots_to_keep: Option<i64>,
    #[serde(default)]
    max_snapshot_age_ms: Option<i64>,
    #[serde(default)]
    max_ref_age_ms: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct StatisticsEntry {
    statistics_path: String,
}

impl Document {
    pub fn parse(text: &str) -> Result<Self> {
        serde_json::from_str(text)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("table metadata unreadable for expiry: {e}")))
    }

    /// The metadata files its metadata log lists.
    pub fn metadata_log_files(&self) -> impl Iterator<Item = &str> {
        self.metadata_log.iter().map(|entry| entry.metadata_file.as_str())
    }

    /// The refs, with `main` at the current snapshot when the document has none (format v1).
    fn refs(&self) -> Vec<(String, &RefEntry)> {
        self.refs.iter().map(|(name, r)| (name.clone(), r)).collect()
    }

    fn main_from_current(&self) -> Option<RefEntry> {
        match self.current_snapshot_id {
            Some(id) if id >= 0 && self.refs.is_empty() => Some(RefEntry {
                snapshot_id: id,
                kind: "branch".into(),
                min_snapshots_to_keep: None,
                max_snapshot_age_ms: None,
                max_ref_age_ms: None,
            }),
            _ => None,
        }
    }
}

/// What one expiry removes, and the branches it asserts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpiryPlan {
    pub remove_snapshots: Vec<i64>,
    pub remove_refs: Vec<String>,
    /// Every ref's snapshot at planning: asserted, so a writer moving one meanwhile wins.
    pub asserted: Vec<(String, i64)>,
    /// When the next snapshot becomes due (for the next run), if one will.
    pub next_due_ms: Option<i64>,
}

/// Plans an expiry as Iceberg's `ExpireSnapshots` does: refs (but `main`) older than their max
/// ref age go; each kept branch keeps its newest `min-snapshots-to-keep` ancestors and every
/// ancestor younger than its max snapshot age; a tag keeps its snapshot; a snapshot no ref
/// reaches is kept while younger than the max age.
pub fn plan(document: &Document, policy: &ExpiryPolicy, now_ms: i64) -> ExpiryPlan {
    let by_id: HashMap<i64, &SnapshotEntry> = document.snapshots.iter().map(|s| (s.snapshot_id, s)).collect();
    let synthesized = document.main_from_current();
    let mut refs = document.refs();
    if let Some(main) = &synthesized {
        refs.push(("main".into(), main));
    }
    refs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut plan = ExpiryPlan::default();
    let mut retained: HashSet<i64> = HashSet::new();
    let mut reachable: HashSet<i64> = HashSet::new();
    let mut next_due: Option<i64> = None;
    let mut due = |at: i64| next_due = Some(next_due.map_or(at, |d: i64| d.min(at)));
    for (name, entry) in &refs {
        if synthesized.is_none() {
            plan.asserted.push((name.clone(), entry.snapshot_id));
        }
        let Some(head) = by_id.get(&entry.snapshot_id) else { continue };
        if name != "main" {
            let max_ref_age = entry.max_ref_age_ms.or(policy.max_ref_age_ms);
            if let Some(max) = max_ref_age {
                if now_ms.saturating_sub(head.timestamp_ms) > max {
                    plan.remove_refs.push(name.clone());
                    continue;
                }
                due(head.timestamp_ms.saturating_add(max).saturating_add(1));
            }
        }
        if entry.kind == "tag" {
            retained.insert(head.snapshot_id);
            reachable.insert(head.snapshot_id);
            continue;
        }
        let min_keep = entry.min_snapshots_to_keep.map_or(policy.min_snapshots_to_keep, |n| n.max(1) as usize);
        let max_age = entry.max_snapshot_age_ms.unwrap_or(policy.max_snapshot_age_ms);
        let mut kept = 0usize;
        let mut keeping = true;
        let mut current = Some(*head);
        let mut seen = HashSet::new();
        while let Some(snapshot) = current {
            if !seen.insert(snapshot.snapshot_id) {
                break;
            }
            // Past this branch's keep window, an ancestor another branch reached has every
            // ancestor of its own reached too: the walk ends (each snapshot is walked past its
            // keep windows once, not once per branch).
            if !keeping && !reachable.insert(snapshot.snapshot_id) {
                break;
            }
            reachable.insert(snapshot.snapshot_id);
            if keeping && (kept < min_keep.max(1) || snapshot.timestamp_ms >= now_ms.saturating_sub(max_age)) {
                retained.insert(snapshot.snapshot_id);
                kept += 1;
                if kept > min_keep {
                    due(snapshot.timestamp_ms.saturating_add(max_age).saturating_add(1));
                }
            } else {
                keeping = false;
            }
            current = snapshot.parent_snapshot_id.and_then(|p| by_id.get(&p).copied());
        }
    }
    for snapshot in &document.snapshots {
        if !reachable.contains(&snapshot.snapshot_id)
            && snapshot.timestamp_ms >= now_ms.saturating_sub(policy.max_snapshot_age_ms)
        {
            retained.insert(snapshot.snapshot_id);
            due(snapshot.timestamp_ms.saturating_add(policy.max_snapshot_age_ms).saturating_add(1));
        }
    }
    plan.remove_snapshots =
        document.snapshots.iter().map(|s| s.snapshot_id).filter(|id| !retained.contains(id)).collect();
    plan.remove_snapshots.sort_unstable();
    plan.next_due_ms = next_due;
    plan
}

/// When a table's next expiry is due (after a commit: the cheap check), `None` when nothing
/// will be.
pub fn next_due(document: &Document, policy: &ExpiryPolicy, now_ms: i64) -> Option<i64> {
    let plan = plan(document, policy, now_ms);
    if !plan.remove_snapshots.is_empty() || !plan.remove_refs.is_empty() {
        return Some(now_ms);
    }
    plan.next_due_ms
}

/// The after-commit check, cheap (one pass over the snapshots, no plan): when the oldest
/// snapshot reaches the policy's age, if the table holds more snapshots than it keeps by count.
/// The expiry task plans; an early run finds nothing and queues itself for when something is due.
pub fn first_due(document: &Document, policy: &ExpiryPolicy, now_ms: i64) -> Option<i64> {
    let refs_age = document.refs.values().any(|r| r.max_ref_age_ms.is_some());
    let timestamps = document.snapshots.iter().map(|s| s.timestamp_ms);
    due_after(timestamps, refs_age, policy, now_ms)
}

/// When the oldest of `timestamps` reaches the policy's age (not before `now_ms`), if there are
/// more snapshots than the policy keeps by count or refs that may age out.
fn due_after(
    timestamps: impl ExactSizeIterator<Item = i64>,
    refs_age: bool,
    policy: &ExpiryPolicy,
    now_ms: i64,
) -> Option<i64> {
    if timestamps.len() <= policy.min_snapshots_to_keep && !refs_age && policy.max_ref_age_ms.is_none() {
        return None;
    }
    let oldest = timestamps.min();
    oldest.map(|ts| ts.saturating_add(policy.max_snapshot_age_ms).saturating_add(1).max(now_ms))
}

/// [`first_due`] on the parsed metadata a commit has at hand (no second parse of its document):
/// `refs` with their retention (a max ref age makes refs expire).
pub fn first_due_parsed(
    metadata: &iceberg::spec::TableMetadata,
    refs: &HashMap<String, iceberg::spec::SnapshotReference>,
    policy: &ExpiryPolicy,
    now_ms: i64,
) -> Option<i64> {
    use iceberg::spec::SnapshotRetention;
    let refs_age = refs.values().any(|r| match &r.retention {
        SnapshotRetention::Branch { max_ref_age_ms, .. } | SnapshotRetention::Tag { max_ref_age_ms } => {
            max_ref_age_ms.is_some()
        }
    });
    due_after(metadata.snapshots().map(|s| s.timestamp_ms()), refs_age, policy, now_ms)
}

/// What an expiry deletes of the files the removed snapshots reached (`then`) and the table
/// still reaches (`still`): those inside its recorded locations, never a metadata file (the
/// metadata log's to expire); and how many it keeps because they lie elsewhere.
fn deletable(then: &HashSet<String>, still: &HashSet<String>, owned: &TableLocations) -> (Vec<String>, usize) {
    let gone = then.difference(still);
    let mut doomed: Vec<String> =
        gone.clone().filter(|f| owned.contains(f) && !f.ends_with(".metadata.json")).cloned().collect();
    doomed.sort();
    (doomed, gone.filter(|f| !owned.contains(f)).count())
}

/// The dry run of table `table`'s expiry under `policy`: what would be removed now, and the
/// files that would go with it (read, never deleted).
pub async fn dry_run(
    catalog: &Catalog,
    warehouse: &Warehouse,
    table: &crate::jobs::MaintainedTable,
    document: &Document,
    policy: &ExpiryPolicy,
) -> Result<Value> {
    let planned = plan(document, policy, catalog.clock().now_ms());
    let removed: HashSet<i64> = planned.remove_snapshots.iter().copied().collect();
    let retained: HashSet<i64> =
        document.snapshots.iter().map(|s| s.snapshot_id).filter(|id| !removed.contains(id)).collect();
    let mut budget = MAX_RUN_ENTRIES;
    let (then, sizes) = reachable(catalog, warehouse, document, Some(&removed), &mut budget).await?;
    let (still, _) = reachable(catalog, warehouse, document, Some(&retained), &mut budget).await?;
    let owned = TableLocations::new(catalog.store().recorded_locations(&TabularId::new(table.id.clone())).await?);
    let (doomed, foreign) = deletable(&then, &still, &owned);
    Ok(json!({
        "snapshots": planned.remove_snapshots.len(),
        "refs": planned.remove_refs,
        "files": doomed.len(),
        "bytes": doomed.iter().filter_map(|f| sizes.get(f)).sum::<u64>(),
        "kept-foreign-files": foreign,
        "next-due-ms": planned.next_due_ms,
    }))
}

/// Queues the expiry of table `id` (named `table` now), due at `due_ms`; once per table while one
/// is queued or running.
pub async fn queue_expiry(
    queue: &dyn TaskStore,
    (warehouse_id, id): (&WarehouseId, &TabularId),
    table: &TableIdent,
    due_ms: i64,
    (reason, now_ms): (&str, i64),
) -> Result<()> {
    let task = NewTask {
        // A commit while an expiry runs may make more due: that expiry runs once more.
        rerun_if_running: true,
        ..NewTask::for_table(
            KIND,
            reason,
            (warehouse_id.as_str(), id.as_str()),
            (&table.namespace, &table.name),
            due_ms,
        )
    };
    queue.enqueue(&task, now_ms).await?;
    Ok(())
}

/// The most entries one manifest (or manifest list) may hold for expiry to read it, and what its
/// blocks may inflate to: a manifest is parsed whole, and a small file of highly compressible
/// entries would otherwise take the server's memory.
const MAX_MANIFEST_ENTRIES: u64 = 200_000;
const MAX_INFLATED_BYTES: u64 = 256 << 20;
/// The most entries one expiry reads in all.
const MAX_RUN_ENTRIES: u64 = 5_000_000;

fn avro_error(location: &str, why: &str) -> CatalogError {
    CatalogError::bad_request(format!("{location} is not an Avro file expiry reads: {why}"))
}

/// Reads an Avro object container's block headers without decoding its records: how many
/// records it holds, checking the count and what its blocks inflate to (null or deflate codec;
/// inflated into a counter, never into memory) against the bounds before it is parsed.
pub fn avro_records(location: &str, bytes: &[u8]) -> Result<u64> {
    avro_records_within(location, bytes, (MAX_MANIFEST_ENTRIES, MAX_INFLATED_BYTES))
}

fn avro_records_within(location: &str, bytes: &[u8], (max_records, max_inflated): (u64, u64)) -> Result<u64> {
    use std::io::Read;
    struct Cursor<'a>(&'a [u8]);
    impl<'a> Cursor<'a> {
        fn long(&mut self) -> Option<i64> {
            let mut value: u64 = 0;
            for shift in (0..64).step_by(7) {
                let (&byte, rest) = self.0.split_first()?;
                self.0 = rest;
                value |= u64::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
                }
            }
            None
        }
        fn take(&mut self, n: i64) -> Option<&'a [u8]> {
            let n = usize::try_from(n).ok()?;
            if n > self.0.len() {
                return None;
            }
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Some(head)
        }
    }
    let truncated = || avro_error(location, "truncated");
    let mut cursor = Cursor(bytes.strip_prefix(b"Obj\x01").ok_or_else(|| avro_error(location, "no Avro header"))?);
    let mut codec = b"null".to_vec();
    loop {
        let mut count = cursor.long().ok_or_else(truncated)?;
        if count == 0 {
            break;
        }
        if count < 0 {
            count = count.checked_neg().ok_or_else(truncated)?;
            cursor.long().ok_or_else(truncated)?;
        }
        for _ in 0..count {
            let key_len = cursor.long().ok_or_else(truncated)?;
            let key = cursor.take(key_len).ok_or_else(truncated)?.to_vec();
            let value_len = cursor.long().ok_or_else(truncated)?;
            let value = cursor.take(value_len).ok_or_else(truncated)?;
            if key == b"avro.codec" {
                codec = value.to_vec();
            }
        }
    }
    cursor.take(16).ok_or_else(truncated)?;
    let (mut records, mut inflated) = (0u64, 0u64);
    while !cursor.0.is_empty() {
        let count = cursor.long().ok_or_else(truncated)?;
        let size = cursor.long().ok_or_else(truncated)?;
        let block = cursor.take(size).ok_or_else(truncated)?;
        cursor.take(16).ok_or_else(truncated)?;
        records = records.saturating_add(u64::try_from(count).map_err(|_| truncated())?);
        inflated = inflated.saturating_add(match codec.as_slice() {
            b"null" => block.len() as u64,
            b"deflate" => {
                let limit = max_inflated.saturating_sub(inflated).saturating_add(1);
                let mut decoder = flate2::read::DeflateDecoder::new(block).take(limit);
                std::io::copy(&mut decoder, &mut std::io::sink()).map_err(|e| avro_error(location, &e.to_string()))?
            }
            other => {
                let codec = String::from_utf8_lossy(other);
                return Err(avro_error(location, &format!("codec {codec} (expiry reads null and deflate)")));
            }
        });
        if records > max_records || inflated > max_inflated {
            return Err(avro_error(
                location,
                &format!("more than {max_records} entries or {max_inflated} bytes inflated"),
            ));
        }
    }
    Ok(records)
}

/// Every file a metadata document reaches: manifest lists, manifests, the files their entries
/// name (live or not), statistics files. Reads through `catalog`'s storage, bounded.
pub(crate) async fn reachable(
    catalog: &Catalog,
    warehouse: &Warehouse,
    document: &Document,
    only_snapshots: Option<&HashSet<i64>>,
    budget: &mut u64,
) -> Result<(HashSet<String>, HashMap<String, u64>)> {
    let too_many = |at: &str| {
        CatalogError::bad_request(format!("expiry reads at most {MAX_RUN_ENTRIES} manifest entries in a run ({at})"))
    };
    let mut files: HashSet<String> = HashSet::new();
    let mut sizes: HashMap<String, u64> = HashMap::new();
    let mut manifests: Vec<String> = Vec::new();
    let version = if document.format_version == 1 { FormatVersion::V1 } else { FormatVersion::V2 };
    for snapshot in &document.snapshots {
        if only_snapshots.is_some_and(|only| !only.contains(&snapshot.snapshot_id)) {
            continue;
        }
        manifests.extend(snapshot.manifests.iter().cloned());
        let Some(list) = &snapshot.manifest_list else { continue };
        if !files.insert(list.clone()) {
            continue;
        }
        let bytes = catalog.files().read(warehouse, list, MAX_MANIFEST_BYTES).await?;
        *budget = budget.checked_sub(avro_records(list, &bytes)?).ok_or_else(|| too_many(list))?;
        let parsed = ManifestList::parse_with_version(&bytes, version)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("manifest list {list} unreadable: {e}")))?;
        for manifest in parsed.entries() {
            sizes.insert(manifest.manifest_path.clone(), u64::try_from(manifest.manifest_length).unwrap_or(0));
            manifests.push(manifest.manifest_path.clone());
        }
    }
    for manifest in manifests {
        if !files.insert(manifest.clone()) {
            continue;
        }
        let bytes = catalog.files().read(warehouse, &manifest, MAX_MANIFEST_BYTES).await?;
        *budget = budget.checked_sub(avro_records(&manifest, &bytes)?).ok_or_else(|| too_many(&manifest))?;
        let parsed = Manifest::parse_avro(&bytes)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("manifest {manifest} unreadable: {e}")))?;
        for entry in parsed.entries() {
            sizes.insert(entry.file_path().to_owned(), entry.data_file().file_size_in_bytes());
            files.insert(entry.file_path().to_owned());
        }
    }
    for statistics in document.statistics.iter().chain(&document.partition_statistics) {
        files.insert(statistics.statistics_path.clone());
    }
    Ok((files, sizes))
}

pub struct ExpireSnapshots {
    catalog: Arc<Catalog>,
    metrics: JobMetrics,
}

impl ExpireSnapshots {
    pub fn new(catalog: Arc<Catalog>, metrics: JobMetrics) -> Self {
        Self { catalog, metrics }
    }

    /// Plans and commits an expiry, again on the new state when a writer wins; answers the
    /// metadata locations before and after it, and what it removed (`None`: nothing to expire).
    async fn commit(
        &self,
        run: &TaskRun,
        table: &TableIdent,
        id: &TabularId,
    ) -> Result<Option<(String, String, Value)>> {
        let ctx = run.context();
        let warehouse_id = WarehouseId::new(run.task().warehouse_id.clone().unwrap_or_default());
        for _ in 0..MAX_COMMIT_TRIES {
            let loaded = self.catalog.tables().load(&ctx, &warehouse_id, table, SnapshotMode::All).await?;
            if loaded.id.as_ref() != Some(id) {
                return Ok(None);
            }
            let before = loaded.metadata_location.clone().unwrap_or_default();
            let document = Document::parse(&loaded.metadata_json)?;
            let inherited = self.catalog.inherited_policy(&loaded.warehouse, &table.namespace).await?;
            let Some(policy) = expiry_policy(&document.properties, &inherited)? else {
                return Ok(None);
            };
            let plan = plan(&document, &policy, run.now_ms());
            if plan.remove_snapshots.is_empty() && plan.remove_refs.is_empty() {
                if let (Some(queue), Some(due)) = (self.catalog.task_store(), plan.next_due_ms) {
                    let reason = ("snapshots kept for their age become due", run.now_ms());
                    queue_expiry(queue.as_ref(), (&warehouse_id, id), table, due, reason).await?;
                }
                return Ok(None);
            }
            let requirements = plan
                .asserted
                .iter()
                .map(|(name, snapshot)| TableRequirement::RefSnapshotIdMatch {
                    r#ref: name.clone(),
                    snapshot_id: Some(*snapshot),
                })
                .collect();
            let mut updates: Vec<Pending<TableUpdate>> = plan
                .remove_refs
                .iter()
                .map(|name| Pending::built(TableUpdate::RemoveSnapshotRef { ref_name: name.clone() }))
                .collect();
            if !plan.remove_snapshots.is_empty() {
                updates
                    .push(Pending::built(TableUpdate::RemoveSnapshots { snapshot_ids: plan.remove_snapshots.clone() }));
            }
            let change = TableChange { table: table.clone(), requirements, updates, base: Some(before.clone()) };
            match self.catalog.tables().commit(&ctx, &warehouse_id, change).await {
                Ok(after) => {
                    let removed = json!({ "snapshots": plan.remove_snapshots, "refs": plan.remove_refs });
                    return Ok(Some((before, after.metadata_location.unwrap_or_default(), removed)));
                }
                // A writer committed meanwhile: plan again on what it made.
                Err(CatalogError::CommitFailed(_)) => continue,
                Err(other) => return Err(other),
            }
        }
        Err(CatalogError::Unavailable(format!(
            "{table} kept changing while its snapshots were expired; retrying later"
        )))
    }
}

#[async_trait::async_trait]
impl Job for ExpireSnapshots {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let started = std::time::Instant::now();
        let params = &run.task().params;
        let levels: Vec<String> = serde_json::from_value(params["namespace"].clone())
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("expiry task without a namespace: {e}")))?;
        let name = params["name"].as_str().unwrap_or_default();
        let table = TableIdent::new(crate::NamespaceIdent::from_levels(levels)?, name)?;
        let id = TabularId::new(run.task().tabular_id.clone().unwrap_or_default());
        let warehouse_id = WarehouseId::new(run.task().warehouse_id.clone().unwrap_or_default());
        let warehouse = self.catalog.warehouse_for_prefix(&warehouse_id).await?;
        // A held table loses no file: nothing is expired while the hold stands.
        if let Some(held) = self.catalog.store().legal_hold(&warehouse.id, &table.namespace, &id).await? {
            return Ok(json!({ "postponed": held.to_string() }));
        }
        let (before, after, removed) = match run.checkpoint() {
            Some(saved) => (
                saved["before"].as_str().unwrap_or_default().to_owned(),
                saved["after"].as_str().unwrap_or_default().to_owned(),
                saved["removed"].clone(),
            ),
            None => match self.commit(run, &table, &id).await? {
                Some(done) => done,
                None => return Ok(json!({ "expired-snapshots": 0, "files": 0 })),
            },
        };
        run.save(run.task().progress, Some(&json!({ "before": before, "after": after, "removed": removed }))).await?;
        // What the metadata before the commit reached and the table's metadata now does not.
        let before_text = self.catalog.files().read(&warehouse, &before, self.catalog.max_metadata_bytes()).await?;
        let before_text = crate::tables::metadata_file_json(&before, before_text, self.catalog.max_metadata_bytes())?;
        let before_doc = Document::parse(&String::from_utf8_lossy(&before_text))?;
        let now = self.catalog.tables().load(&run.context(), &warehouse_id, &table, SnapshotMode::All).await;
        let now_doc = match &now {
            Ok(result) if result.id.as_ref() == Some(&id) => Document::parse(&result.metadata_json)?,
            // Dropped or replaced meanwhile: its files are its purge's business now.
            _ => return Ok(json!({ "removed": removed, "files": 0, "skipped": "the table is gone" })),
        };
        let removed_ids: HashSet<i64> = removed["snapshots"]
            .as_array()
            .map(|ids| ids.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        let mut budget = MAX_RUN_ENTRIES;
        let (then, sizes) = reachable(&self.catalog, &warehouse, &before_doc, Some(&removed_ids), &mut budget).await?;
        let (still, _) = reachable(&self.catalog, &warehouse, &now_doc, None, &mut budget).await?;
        let owned = TableLocations::new(self.catalog.store().recorded_locations(&id).await?);
        // The metadata files before and after the commit are never a manifest's to delete.
        let (mut doomed, foreign) = deletable(&then, &still, &owned);
        doomed.retain(|f| *f != before && *f != after);
        let mut progress = run.task().progress;
        progress.total = Some(i64::try_from(doomed.len()).unwrap_or(i64::MAX));
        progress.done = 0;
        progress.bytes = 0;
        for batch in doomed.chunks(BATCH) {
            // A legal hold placed while this runs stops it before its next batch.
            if let Some(held) = self.catalog.store().legal_hold(&warehouse.id, &table.namespace, &id).await? {
                return Ok(json!({ "postponed": held.to_string(), "removed": removed, "files": progress.done }));
            }
            self.catalog.files().delete_many(&warehouse, batch).await?;
            let bytes: u64 = batch.iter().filter_map(|f| sizes.get(f)).sum();
            // Each batch is in the audit trail, as the system doing this task, file by file.
            if let Some(queue) = self.catalog.task_store() {
                let audited = crate::jobs::MaintainedTable {
                    warehouse_id: warehouse.id.as_str().to_owned(),
                    id: id.as_str().to_owned(),
                    namespace: table.namespace.clone(),
                    name: table.name.clone(),
                    created_at_ms: 0,
                };
                let detail = json!({ "expired-files-deleted": batch.len(), "bytes": bytes, "locations": batch });
                queue.record_deleted(&run.context().write(), &audited, detail).await?;
            }
            progress.done += i64::try_from(batch.len()).unwrap_or(i64::MAX);
            progress.bytes += i64::try_from(bytes).unwrap_or(i64::MAX);
            self.metrics.reclaimed(batch.len() as u64, bytes);
            run.save(progress, None).await?;
        }
        // What becomes due later (snapshots kept only for their age): the next run, then.
        let inherited = self.catalog.inherited_policy(&warehouse, &table.namespace).await?;
        let policy = expiry_policy(&now_doc.properties, &inherited)?;
        let due = policy.and_then(|policy| next_due(&now_doc, &policy, run.now_ms()));
        if let (Some(queue), Some(due)) = (self.catalog.task_store(), due) {
            let reason = ("snapshots kept for their age become due", run.now_ms());
            queue_expiry(queue.as_ref(), (&warehouse.id, &id), &table, due, reason).await?;
        }
        Ok(json!({
            "expired-snapshots": removed_ids.len(),
            "removed": removed,
            "files": doomed.len(),
            "bytes": progress.bytes,
            "kept-foreign-files": foreign,
            "metadata-before": before,
            "metadata-after": after,
            "elapsed-ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(snapshots: &[(i64, Option<i64>, i64)], refs: &str, properties: &str) -> Document {
        let snapshots: Vec<Value> = snapshots
            .iter()
            .map(|(id, parent, ts)| json!({"snapshot-id": id, "parent-snapshot-id": parent, "timestamp-ms": ts, "manifest-list": format!("s3://b/t/metadata/snap-{id}.avro")}))
            .collect();
        let text = format!(
            r#"{{"format-version": 2, "current-snapshot-id": 5, "snapshots": {}, "refs": {refs}, "properties": {properties}}}"#,
            serde_json::to_string(&snapshots).unwrap()
        );
        Document::parse(&text).unwrap()
    }

    const DAY: i64 = 86_400_000;

    #[test]
    fn old_snapshots_go_but_the_newest_are_kept() {
        // A chain 1 <- 2 <- 3 <- 4 <- 5 (main), one a day.
        let chain = [
            (1, None, DAY),
            (2, Some(1), 2 * DAY),
            (3, Some(2), 3 * DAY),
            (4, Some(3), 4 * DAY),
            (5, Some(4), 5 * DAY),
        ];
        let refs = r#"{"main": {"snapshot-id": 5, "type": "branch"}}"#;
        let doc = document(&chain, refs, r#"{"history.expire.max-snapshot-age-ms": "1000"}"#);
        let policy = expiry_policy(&doc.properties, &Default::default()).unwrap().unwrap();
        let plan = plan(&doc, &policy, 10 * DAY);
        assert_eq!(plan.remove_snapshots, [1, 2, 3, 4], "only the newest (min-snapshots-to-keep 1)");
        assert_eq!(plan.asserted, [("main".to_owned(), 5)]);
        // Kept: the two newest by count; ages inside two and a half days.
        let doc = document(
            &chain,
            refs,
            r#"{"history.expire.max-snapshot-age-ms": "216000000", "history.expire.min-snapshots-to-keep": "2"}"#,
        );
        let policy = expiry_policy(&doc.properties, &Default::default()).unwrap().unwrap();
        assert_eq!(plan_ids(&doc, &policy, 10 * DAY), [1, 2, 3]);
        assert_eq!(plan_ids(&doc, &policy, 5 * DAY), [1, 2], "3 is 2 days old, inside the age");
    }

    fn plan_ids(doc: &Document, policy: &ExpiryPolicy, now: i64) -> Vec<i64> {
        plan(doc, policy, now).remove_snapshots
    }

    #[test]
    fn tags_branches_and_unreferenced_snapshots() {
        // main: 1 <- 2 <- 5; branch dev: 1 <- 3; tag v1 on 4 (4's parent 1); 6 unreferenced, young.
        let snaps = [
            (1, None, DAY),
            (2, Some(1), 2 * DAY),
            (3, Some(1), 3 * DAY),
            (4, Some(1), 4 * DAY),
            (5, Some(2), 5 * DAY),
            (6, None, 10 * DAY),
        ];
        let refs = r#"{"main": {"snapshot-id": 5, "type": "branch"}, "dev": {"snapshot-id": 3, "type": "branch"},
                       "v1": {"snapshot-id": 4, "type": "tag", "max-ref-age-ms": 864000000}}"#;
        let doc = document(&snaps, refs, r#"{"history.expire.max-snapshot-age-ms": "1000"}"#);
        let policy = expiry_policy(&doc.properties, &Default::default()).unwrap().unwrap();
        let planned = plan(&doc, &policy, 10 * DAY);
        assert_eq!(planned.remove_snapshots, [1, 2], "dev keeps 3, v1 keeps 4, main keeps 5, 6 is young");
        assert!(planned.remove_refs.is_empty());
        // The tag outlives its max ref age 10 days after it was made: it goes, and so does 4.
        let planned = plan(&doc, &policy, 15 * DAY);
        assert_eq!(planned.remove_refs, ["v1"]);
        assert_eq!(planned.remove_snapshots, [1, 2, 4, 6]);
    }

    #[test]
    fn extreme_ages_neither_overflow_nor_expire_anything_young() {
        let chain = [(1, None, DAY), (2, Some(1), 2 * DAY), (5, Some(2), 3 * DAY)];
        let refs = &format!(
            r#"{{"main": {{"snapshot-id": 5, "type": "branch"}}, "t": {{"snapshot-id": 1, "type": "tag", "max-ref-age-ms": {}}}}}"#,
            i64::MAX
        );
        let doc = document(&chain, refs, &format!(r#"{{"history.expire.max-snapshot-age-ms": "{}"}}"#, i64::MAX));
        let policy = expiry_policy(&doc.properties, &Default::default()).unwrap().unwrap();
        let planned = plan(&doc, &policy, 10 * DAY);
        assert!(planned.remove_snapshots.is_empty() && planned.remove_refs.is_empty(), "{planned:?}");
        assert_eq!(planned.next_due_ms, Some(i64::MAX));
        assert_eq!(first_due(&doc, &policy, 10 * DAY), Some(i64::MAX));
    }

    #[test]
    fn many_branches_over_one_long_chain_are_planned_alike() {
        // 500 chained snapshots, a branch at each: only what the max age keeps, once.
        let chain: Vec<(i64, Option<i64>, i64)> = (1..=500).map(|i| (i, (i > 1).then(|| i - 1), i * 1000)).collect();
        let refs: serde_json::Map<String, Value> = (1..=500)
            .map(|i| {
                (if i == 500 { "main".into() } else { format!("b{i}") }, json!({"snapshot-id": i, "type": "branch"}))
            })
            .collect();
        let doc =
            document(&chain, &Value::Object(refs).to_string(), r#"{"history.expire.max-snapshot-age-ms": "1000"}"#);
        let policy = expiry_policy(&doc.properties, &Default::default()).unwrap().unwrap();
        assert!(plan(&doc, &policy, 10_000_000).remove_snapshots.is_empty(), "every snapshot is a branch's head");
    }

    #[test]
    fn an_avro_file_that_inflates_past_the_bound_is_refused_unread() {
        use std::io::Write;
        // A container with one deflate block of 3 MiB of zeros (a few KiB compressed), read
        // with a bound of 2 MiB.
        let mut deflated = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..3 {
            deflated.write_all(&zeros).unwrap();
        }
        let block = deflated.finish().unwrap();
        let long = |v: i64| {
            let mut z = ((v << 1) ^ (v >> 63)) as u64;
            let mut out = Vec::new();
            loop {
                let byte = (z & 0x7f) as u8;
                z >>= 7;
                if z == 0 {
                    out.push(byte);
                    return out;
                }
                out.push(byte | 0x80);
            }
        };
        let mut file = b"Obj\x01".to_vec();
        file.extend(long(1));
        file.extend(long(10));
        file.extend(b"avro.codec");
        file.extend(long(7));
        file.extend(b"deflate");
        file.extend(long(0));
        file.extend([7u8; 16]);
        file.extend(long(3));
        file.extend(long(block.len() as i64));
        file.extend(&block);
        file.extend([7u8; 16]);
        let refused = avro_records_within("file:///w/t/metadata/m.avro", &file, (1000, 2 << 20));
        assert!(matches!(&refused, Err(CatalogError::BadRequest(why)) if why.contains("inflated")), "{refused:?}");
        // Too many records, small: refused too; a few: counted.
        let mut small = file[..file.len() - block.len() - 16 - long(block.len() as i64).len() - long(3).len()].to_vec();
        let tiny = {
            let mut d = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
            d.write_all(b"abc").unwrap();
            d.finish().unwrap()
        };
        assert_eq!(avro_records_within("m.avro", &file, (1000, 4 << 20)).unwrap(), 3, "within a larger bound");
        for (count, ok) in [(3, true), (MAX_MANIFEST_ENTRIES as i64 + 1, false)] {
            let mut f = small.clone();
            f.extend(long(count));
            f.extend(long(tiny.len() as i64));
            f.extend(&tiny);
            f.extend([7u8; 16]);
            assert_eq!(avro_records("m.avro", &f).is_ok(), ok, "{count}");
        }
        small.extend([1u8]);
        assert!(avro_records("m.avro", &small).is_err(), "truncated");
        assert!(avro_records("m.avro", b"not avro").is_err());
    }

    #[test]
    fn no_policy_no_expiry_and_gc_disabled_wins() {
        let empty = HashMap::new();
        assert_eq!(expiry_policy(&empty, &Default::default()).unwrap(), None);
        let mut properties = HashMap::from([(MAX_AGE_PROPERTY.to_owned(), "1000".to_owned())]);
        assert!(expiry_policy(&properties, &Default::default()).unwrap().is_some());
        properties.insert(GC_ENABLED_PROPERTY.into(), "false".into());
        assert_eq!(expiry_policy(&properties, &Default::default()).unwrap(), None);
        let bad = HashMap::from([(MAX_AGE_PROPERTY.to_owned(), "-5".to_owned())]);
        assert!(expiry_policy(&bad, &Default::default()).is_err());
    }
}
