//! Purges of dropped tables and views: every file below the locations the catalog recorded for
//! it, and nothing else (never a path read from its metadata, manifests or any document a
//! client wrote). Deleted in batches of at most 1,000 files (one S3 `DeleteObjects` call each),
//! with the progress saved after each; a purge cut short (a killed replica) is claimed again and
//! goes on, and deleting what is already gone is no error, so a batch repeated does no harm.
//! An object under a legal hold is not purged: the purge is postponed (the lifecycle sweep
//! queues it again) and the entry is left as it was.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Job, JobMetrics, TaskRun};
use crate::files::FileIo;
use crate::ids::TabularId;
use crate::store::Warehouse;
use crate::{CatalogError, CatalogStore, Result};

pub use crate::lifecycle::PURGE_KIND as KIND;

/// Files deleted per batch (S3 `DeleteObjects` takes at most 1,000 keys).
pub const BATCH: usize = 1000;

pub struct PurgeJob {
    store: Arc<dyn CatalogStore>,
    files: Arc<dyn FileIo>,
    metrics: JobMetrics,
    batch: usize,
}

impl PurgeJob {
    pub fn new(store: Arc<dyn CatalogStore>, files: Arc<dyn FileIo>, metrics: JobMetrics) -> Self {
        Self { store, files, metrics, batch: BATCH }
    }

    /// Smaller batches (tests: a purge of a few files in several steps).
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }
}

/// Deletes every file below `location` (inside `warehouse`'s root); answers files and bytes.
pub async fn purge_location(files: &dyn FileIo, warehouse: &Warehouse, location: &str) -> Result<(u64, u64)> {
    inside_root(warehouse, location)?;
    let (mut count, mut bytes) = (0, 0);
    loop {
        let deleted = files.delete_some_below(warehouse, location, BATCH).await?;
        count += deleted.files;
        bytes += deleted.bytes;
        if deleted.complete {
            return Ok((count, bytes));
        }
    }
}

/// A recorded location is checked to lie inside the warehouse's root when it is recorded; a
/// purge checks again (the last line before deleting).
pub(crate) fn inside_root(warehouse: &Warehouse, location: &str) -> Result<()> {
    let root = warehouse.storage_root.as_str().trim_end_matches('/');
    let inside = location.strip_prefix(root).is_some_and(|rest| rest.starts_with('/') && rest.len() > 1);
    if !inside || location.split('/').any(|part| part == ".." || part == ".") {
        return Err(CatalogError::Internal(anyhow::anyhow!(
            "refusing to purge {location}: not a directory inside the warehouse's root {root}"
        )));
    }
    Ok(())
}

#[async_trait::async_trait]
impl Job for PurgeJob {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let id = run.task().params.get("deleted-id").and_then(Value::as_str).ok_or_else(|| {
            CatalogError::Internal(anyhow::anyhow!("purge task {} names no deleted-id", run.task().id))
        })?;
        let id = TabularId::new(id.to_owned());
        let Some(entry) = self.store.deleted_tabular(&id).await? else {
            return Ok(json!({ "skipped": "the entry is gone: undropped, or purged already" }));
        };
        if entry.superseded.is_some() {
            return Ok(json!({ "skipped": entry.superseded }));
        }
        // Held: nothing is deleted, the entry stays as it is; the sweep queues the purge again.
        if let Some(held) = self.store.legal_hold(&entry.warehouse_id, &entry.namespace, &id).await? {
            return Ok(json!({ "postponed": held.to_string() }));
        }
        let Some(entry) = self.store.begin_purge(&id).await? else {
            return Ok(json!({ "skipped": "the entry is gone, its purge not yet due, or no longer to be purged" }));
        };
        let warehouse = self
            .store
            .warehouse_by_id(&entry.warehouse_id)
            .await?
            .ok_or_else(|| CatalogError::no_such_warehouse(&entry.warehouse_id))?;
        let mut locations: Vec<&String> = entry.locations().collect();
        locations.sort();
        locations.dedup();
        for location in &locations {
            inside_root(&warehouse, location)?;
        }
        let start = run.checkpoint().and_then(|c| c.get("location")).and_then(Value::as_u64).unwrap_or(0) as usize;
        let mut progress = run.task().progress;
        for (index, location) in locations.iter().enumerate().skip(start) {
            loop {
                let deleted = self.files.delete_some_below(&warehouse, location, self.batch).await?;
                progress.done += i64::try_from(deleted.files).unwrap_or(i64::MAX);
                progress.bytes += i64::try_from(deleted.bytes).unwrap_or(i64::MAX);
                self.metrics.reclaimed(deleted.files, deleted.bytes);
                run.save(progress, Some(&json!({ "location": index }))).await?;
                if deleted.complete {
                    break;
                }
            }
        }
        let report = json!({ "files": progress.done, "bytes": progress.bytes, "locations": locations });
        self.store.finish_purge(&run.context().write(), &id, report.clone()).await?;
        Ok(report)
    }
}
