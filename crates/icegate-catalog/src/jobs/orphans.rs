//! Orphan clean-up in two phases (`remove-orphans` tasks, one table each).
//!
//! A scan lists the files below the locations the catalog recorded for the table (never a
//! sibling prefix: listings match whole path segments) and subtracts everything the table's
//! live metadata references: the current metadata file and every file of its metadata log,
//! every snapshot's manifest list, manifests and the data and delete files their entries name
//! (live or not), statistics and partition statistics files. What is left and older than the
//! policy's `older-than` is **quarantined**: recorded, not deleted. Once a file's quarantine
//! has passed, a later run scans again and deletes it only if the table's metadata (read again
//! just before each batch when it changed) still does not reference it and the file is the one
//! quarantined (same size and last-modified time); otherwise it is released. An admin can
//! restore a quarantined file until then (it stays for good).
//!
//! Never candidates: files younger than `older-than` (a commit in flight may be writing them),
//! files older than the time the table came to own the location they lie in (its creation for
//! the location it was made at, the commit that recorded any other): they were not written for
//! it — a dropped table's files at a reused location, a folder a commit pointed
//! `write.data.path` at, a registered table's history; links and other non-regular files, `version-hint.text`, and
//! any file whose name a referenced file also has (the same file reached through another
//! scheme or spelling: the scan does not guess, it keeps it). Locations are compared after
//! normalising scheme aliases (`s3a`, `s3n` → `s3`; `file:/x` → `file:///x`) and
//! percent-decoding, which can only make more files count as referenced. Nothing is done for a
//! table with `gc.enabled=false` or under a legal hold.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Value, json};

use super::expire_snapshots::{Document, reachable};
use super::{Job, JobMetrics, MaintainedTable, QuarantineFilter, QuarantineState, QuarantinedFile, TaskRun};
use crate::error::{CatalogError, Result};
use crate::files::ListedFile;
use crate::ids::{TabularId, WarehouseId};
use crate::maintenance::OrphanPolicy;
use crate::service::Catalog;
use crate::storage::TableLocations;
use crate::store::Warehouse;
use crate::tables::{SnapshotMode, TableIdent};

pub const KIND: &str = "remove-orphans";
/// The most files one scan lists below a table's locations.
const MAX_LISTED: usize = 2_000_000;
/// Files quarantined, checked or deleted per batch (one S3 `DeleteObjects`).
const BATCH: usize = 1000;
/// The most manifest entries one scan reads.
const MAX_ENTRIES: u64 = 5_000_000;

/// A location in the form scans compare: scheme aliases folded (`s3a`, `s3n` → `s3`),
/// `file:/x` and `file:///x` alike, percent-escapes decoded.
pub fn canonical(location: &str) -> String {
    let decoded = percent_encoding::percent_decode_str(location.trim()).decode_utf8_lossy().into_owned();
    let Some((scheme, rest)) = decoded.split_once(':') else { return decoded };
    let scheme = scheme.to_ascii_lowercase();
    match scheme.as_str() {
        "s3a" | "s3n" | "s3" => format!("s3:{rest}"),
        "file" => format!("file:///{}", rest.trim_start_matches('/')),
        _ => format!("{scheme}:{rest}"),
    }
}

fn basename(location: &str) -> &str {
    location.rsplit('/').next().unwrap_or(location)
}

/// What one scan found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every file listed, by canonical location.
    pub listed: HashMap<String, ListedFile>,
    pub referenced_count: usize,
    referenced: HashSet<String>,
    referenced_names: HashSet<String>,
    /// Unreferenced files old enough to quarantine (those quarantined or restored already
    /// included).
    pub candidates: Vec<ListedFile>,
    /// Unreferenced files kept because a referenced file has the same name.
    pub ambiguous: usize,
    pub metadata_location: String,
}

impl Scan {
    /// Whether a quarantined file may be deleted now: it is still there, unchanged, and
    /// nothing references it (or a file of its name).
    fn still_orphaned(&self, file: &QuarantinedFile) -> Option<&ListedFile> {
        let key = canonical(&file.location);
        let listed = self.listed.get(&key)?;
        let unchanged = listed.size == file.size && listed.modified_ms == file.modified_ms;
        let referenced = self.referenced.contains(&key) || self.referenced_names.contains(basename(&key));
        (unchanged && !referenced).then_some(listed)
    }
}

/// Scans table `table` (its current metadata `document`, at `metadata_location`) under
/// `policy` at `now_ms`: lists its recorded locations and subtracts what its metadata
/// references. Reads only: storage listings, manifest lists and manifests.
pub async fn scan(
    catalog: &Catalog,
    warehouse: &Warehouse,
    table: &MaintainedTable,
    metadata_location: Option<&str>,
    document: &Document,
    (policy, now_ms): (OrphanPolicy, i64),
) -> Result<Scan> {
    let queue = catalog.task_store().ok_or_else(|| CatalogError::Internal(anyhow::anyhow!("no task queue")))?;
    let since: HashMap<String, i64> = queue
        .owned_since(&table.id)
        .await?
        .into_iter()
        .map(|(location, at)| (location.trim_end_matches('/').to_owned(), at))
        .collect();
    let owned = TableLocations::new(since.keys().cloned());
    let mut scan = Scan { metadata_location: metadata_location.unwrap_or_default().to_owned(), ..Scan::default() };
    // Per listed file: since when its table owns the location it was found under.
    let mut owned_from: HashMap<String, i64> = HashMap::new();
    for location in owned.as_slice() {
        crate::jobs::purge::inside_root(warehouse, location)?;
        let from = since.get(location).copied().unwrap_or(i64::MAX).max(table.created_at_ms);
        let listing = catalog.files().list_below(warehouse, location, MAX_LISTED - scan.listed.len()).await?;
        if !listing.complete {
            return Err(CatalogError::bad_request(format!(
                "{location} holds more than {MAX_LISTED} files: more than one orphan scan reads"
            )));
        }
        for file in listing.files {
            let key = canonical(&file.location);
            owned_from.insert(key.clone(), from);
            scan.listed.insert(key, file);
        }
    }
    let mut budget = MAX_ENTRIES;
    let (files, _) = reachable(catalog, warehouse, document, None, &mut budget).await?;
    let referenced =
        files.iter().map(String::as_str).chain(document.metadata_log_files()).chain(metadata_location).map(canonical);
    scan.referenced = referenced.collect();
    scan.referenced_names = scan.referenced.iter().map(|r| basename(r).to_owned()).collect();
    scan.referenced_count = scan.referenced.len();
    let young_from = now_ms.saturating_sub(i64::try_from(policy.older_than.as_millis()).unwrap_or(i64::MAX));
    let mut candidates = Vec::new();
    for (key, file) in &scan.listed {
        // Older than the table's ownership of the location it lies in: not written for it. Object
        // stores report whole seconds (S3's LastModified): ownership counts from its second.
        let born = owned_from.get(key).copied().map_or(i64::MAX, |at| at - at.rem_euclid(1000));
        if scan.referenced.contains(key) || file.modified_ms > young_from || file.modified_ms < born {
            continue;
        }
        let name = basename(key);
        if name == "version-hint.text" {
            continue;
        }
        if scan.referenced_names.contains(name) {
            scan.ambiguous += 1;
            continue;
        }
        candidates.push(file.clone());
    }
    candidates.sort_by(|a, b| a.location.cmp(&b.location));
    scan.candidates = candidates;
    Ok(scan)
}

pub struct RemoveOrphans {
    catalog: Arc<Catalog>,
    metrics: JobMetrics,
}

impl RemoveOrphans {
    pub fn new(catalog: Arc<Catalog>, metrics: JobMetrics) -> Self {
        Self { catalog, metrics }
    }

    /// The table's current metadata (location and document) as the catalog serves it, `None`
    /// when the table `table.id` is no longer at that name.
    async fn current(
        &self,
        run: &TaskRun,
        warehouse: &Warehouse,
        table: &MaintainedTable,
    ) -> Result<Option<(String, Document)>> {
        let ident = TableIdent::new(table.namespace.clone(), &table.name)?;
        match self.catalog.tables().load(&run.context(), &warehouse.id, &ident, SnapshotMode::All).await {
            Ok(loaded) if loaded.id.as_ref().map(TabularId::as_str) == Some(table.id.as_str()) => {
                Ok(Some((loaded.metadata_location.unwrap_or_default(), Document::parse(&loaded.metadata_json)?)))
            }
            Ok(_) | Err(CatalogError::NotFound { .. }) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// Every quarantine row of the table (state `state`, due by `due_by`), all pages.
    async fn rows(
        &self,
        table: &MaintainedTable,
        state: Option<QuarantineState>,
        due_by: Option<i64>,
    ) -> Result<Vec<QuarantinedFile>> {
        let queue =
            self.catalog.task_store().ok_or_else(|| CatalogError::Internal(anyhow::anyhow!("no task queue")))?;
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let filter = QuarantineFilter {
                warehouse_id: table.warehouse_id.clone(),
                tabular_id: Some(table.id.clone()),
                state,
                due_by_ms: due_by,
                after: after.clone(),
                limit: BATCH as i64,
            };
            let page = queue.quarantined(&filter).await?;
            let full = page.len() == BATCH;
            after = page.last().map(|f| (f.tabular_id.clone(), f.location.clone()));
            all.extend(page);
            if !full {
                return Ok(all);
            }
        }
    }
}

#[async_trait::async_trait]
impl Job for RemoveOrphans {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let started = std::time::Instant::now();
        let queue = self
            .catalog
            .task_store()
            .cloned()
            .ok_or_else(|| CatalogError::Internal(anyhow::anyhow!("no task queue")))?;
        let id = run.task().tabular_id.clone().unwrap_or_default();
        let Some(table) = queue.maintained_table(&id).await? else {
            return Ok(json!({ "skipped": "the table is gone" }));
        };
        let warehouse = self.catalog.warehouse_for_prefix(&WarehouseId::new(table.warehouse_id.clone())).await?;
        let tabular_id = TabularId::new(table.id.clone());
        let held = || async { self.catalog.store().legal_hold(&warehouse.id, &table.namespace, &tabular_id).await };
        if let Some(held) = held().await? {
            return Ok(json!({ "postponed": held.to_string() }));
        }
        let Some((metadata_location, document)) = self.current(run, &warehouse, &table).await? else {
            return Ok(json!({ "skipped": "the table is gone" }));
        };
        if !super::expire_snapshots::gc_enabled(&document.properties) {
            return Ok(json!({ "skipped": "the table says gc.enabled=false" }));
        }
        let inherited = self.catalog.inherited_policy(&warehouse, &table.namespace).await?;
        let policy = self.catalog.orphan_defaults().policy(&inherited);
        let now = run.now_ms();
        let mut scan =
            scan(&self.catalog, &warehouse, &table, Some(&metadata_location), &document, (policy, now)).await?;
        let write = run.context().write();
        let mut progress = run.task().progress;
        progress.done = 0;
        progress.bytes = 0;

        // Phase two: files whose quarantine has passed, checked against the metadata again.
        let due = self.rows(&table, Some(QuarantineState::Quarantined), Some(now)).await?;
        let (mut deleted, mut deleted_bytes, mut released) = (0u64, 0u64, 0u64);
        // What phase two handled is not quarantined again by this run's phase one.
        let handled: HashSet<String> = due.iter().map(|f| f.location.clone()).collect();
        for batch in due.chunks(BATCH) {
            // A commit since the scan may reference what it had not: scan again first.
            let current = self.catalog.store().metadata_location_of(&tabular_id).await?;
            if current.as_deref() != Some(scan.metadata_location.as_str()) {
                let Some((location, document)) = self.current(run, &warehouse, &table).await? else {
                    return Ok(
                        json!({ "skipped": "the table went while its orphans were removed", "deleted": deleted }),
                    );
                };
                scan = self::scan(&self.catalog, &warehouse, &table, Some(&location), &document, (policy, now)).await?;
            }
            let mut doomed = Vec::new();
            let mut kept = Vec::new();
            let mut bytes = 0;
            for file in batch {
                match scan.still_orphaned(file) {
                    Some(listed) => {
                        bytes += listed.size;
                        doomed.push(listed.location.clone());
                    }
                    None => kept.push(file.location.clone()),
                }
            }
            if let Some(held) = held().await? {
                return Ok(json!({ "postponed": held.to_string(), "deleted": deleted }));
            }
            if !doomed.is_empty() {
                self.catalog.files().delete_many(&warehouse, &doomed).await?;
                queue.forget_quarantined(&write, &table, &doomed, Some(bytes)).await?;
                deleted += doomed.len() as u64;
                deleted_bytes += bytes;
                self.metrics.reclaimed(doomed.len() as u64, bytes);
            }
            if !kept.is_empty() {
                released += queue.forget_quarantined(&write, &table, &kept, None).await?;
            }
            progress.done += i64::try_from(batch.len()).unwrap_or(i64::MAX);
            progress.bytes = i64::try_from(deleted_bytes).unwrap_or(i64::MAX);
            run.save(progress, None).await?;
        }

        // Phase one: new candidates are quarantined (those quarantined or restored already stay
        // as they are).
        let mut known: HashSet<String> = self.rows(&table, None, None).await?.into_iter().map(|f| f.location).collect();
        known.extend(handled);
        let delete_after = now.saturating_add(i64::try_from(policy.quarantine.as_millis()).unwrap_or(i64::MAX));
        let fresh: Vec<QuarantinedFile> = scan
            .candidates
            .iter()
            .filter(|f| !known.contains(&f.location))
            .map(|f| QuarantinedFile {
                tabular_id: table.id.clone(),
                location: f.location.clone(),
                size: f.size,
                modified_ms: f.modified_ms,
                quarantined_at_ms: now,
                delete_after_ms: delete_after,
                task_id: run.task().id.clone(),
                state: QuarantineState::Quarantined,
                restored_by: None,
            })
            .collect();
        let mut quarantined = 0;
        for batch in fresh.chunks(BATCH) {
            quarantined += queue.quarantine(&write, &table, batch).await?;
            progress.done += i64::try_from(batch.len()).unwrap_or(i64::MAX);
            run.save(progress, None).await?;
        }

        // The next run: when the earliest quarantine ends, or at the policy's interval.
        let waiting = self.rows(&table, Some(QuarantineState::Quarantined), None).await?;
        let next_delete = waiting.iter().map(|f| f.delete_after_ms).min();
        let next_interval =
            policy.interval.map(|i| now.saturating_add(i64::try_from(i.as_millis()).unwrap_or(i64::MAX)));
        let next = match (next_delete, next_interval) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(due) = next {
            let reason = "quarantined orphan files become due, or the orphan policy's interval passes";
            let task = super::NewTask {
                rerun_if_running: true,
                ..crate::maintenance::table_task(KIND, reason, (&warehouse.id, &table), due.max(now))
            };
            queue.enqueue(&task, now).await?;
        }
        Ok(json!({
            "listed": scan.listed.len(),
            "referenced": scan.referenced_count,
            "candidates": scan.candidates.len(),
            "skipped-ambiguous": scan.ambiguous,
            "quarantined": quarantined,
            "deleted": deleted,
            "deleted-bytes": deleted_bytes,
            "released": released,
            "waiting": waiting.len(),
            "next-run-ms": next,
            "elapsed-ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_location_compare_alike() {
        assert_eq!(canonical("s3a://b/t/data/x.parquet"), canonical("s3://b/t/data/x.parquet"));
        assert_eq!(canonical("file:/w/t/a.parquet"), canonical("file:///w/t/a.parquet"));
        assert_eq!(canonical("s3://b/t/data/a%20b.parquet"), canonical("s3://b/t/data/a b.parquet"));
        assert_ne!(canonical("s3://b/t/data/x.parquet"), canonical("s3://b/t2/data/x.parquet"));
        assert_eq!(basename("s3://b/t/data/x.parquet"), "x.parquet");
    }
}
