//! Moving one table: fence at the source, register at icegate, verify. Each step is recorded
//! with a compare-and-swap on the table's state before the next begins, and each is safe to
//! repeat: a run killed between a step's effect and its record finds the effect (the source
//! fenced by this very fence, icegate holding the table at the fenced metadata file) and
//! records it.

use std::collections::BTreeSet;
use std::sync::Arc;

use iceberg::spec::{ManifestContentType, ManifestList, TableMetadata};
use serde_json::{Value, json};

use super::source::{Fence, SourceCatalog};
use super::store::{MigrationTable, Step, TableState};
use super::{FENCE_SUFFIX, Migrations};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::store::{DropOptions, TabularKind, Warehouse};
use crate::tables::{SnapshotMode, TableIdent, location_inside, metadata_file_json};

/// Data files whose existence and size a verification checks (spread over the manifests).
const SAMPLED_FILES: usize = 16;
/// How often a fence follows commits that keep moving the table at the source.
const FENCE_TRIES: usize = 5;

/// What of a table's error is kept.
const MAX_ERROR_BYTES: usize = 2048;

/// Whether a metadata location a source answers may move: inside the target warehouse's
/// storage root, with no empty, `.` or `..` segment and no trailing `/`, and short enough to
/// fence.
pub(super) fn acceptable(root: &str, location: &str) -> std::result::Result<(), String> {
    location_inside(root, location).map_err(|e| e.to_string())?;
    let rest = location.strip_prefix(root).unwrap_or_default();
    if location.ends_with('/') || rest.trim_start_matches('/').split('/').any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(format!("{location} has an empty, `.` or `..` segment"));
    }
    if location.len() > super::MAX_SOURCE_LOCATION - 64 {
        return Err(format!("{location} is too long to fence"));
    }
    Ok(())
}

/// The fenced location of `metadata_location` for table `id`.
pub(super) fn fenced_location(metadata_location: &str, id: &str) -> String {
    format!("{metadata_location}{FENCE_SUFFIX}{id}")
}

impl Migrations<'_> {
    pub(super) fn table_ident(table: &MigrationTable) -> Result<TableIdent> {
        TableIdent::new(NamespaceIdent::from_levels(table.target_namespace.clone())?, &table.target_name)
    }

    /// The table as stored now (after a step another worker or a rollback took).
    pub(super) async fn reread(&self, table: &MigrationTable) -> Result<MigrationTable> {
        let tables = self.queue()?.migration_tables(&table.migration_id).await?;
        tables.into_iter().find(|t| t.id == table.id).ok_or_else(|| CatalogError::no_such_migration(&table.id))
    }

    async fn step(
        &self,
        ctx: &RequestContext,
        table: &MigrationTable,
        to: TableState,
        step: &Step,
    ) -> Result<Option<MigrationTable>> {
        let now = self.clock().now_ms();
        if self.queue()?.step_migration_table(&ctx.write(), &table.id, (table.state, to), step, now).await? {
            Ok(Some(self.reread(table).await?))
        } else {
            Ok(None)
        }
    }

    /// Moves `table` as far as it goes (to `verified`, `failed`, or a state another hand put it
    /// in); answers where it ended.
    /// A step that cannot succeed (anything but an unavailable source, store or storage, which
    /// the task retries) fails the table with why, and the run goes on with the next; `stop`
    /// is asked between steps.
    pub(crate) async fn advance(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        source: &Arc<dyn SourceCatalog>,
        mut table: MigrationTable,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<MigrationTable> {
        loop {
            if stop() {
                return Err(CatalogError::Unavailable("the task is stopping; the run resumes where it is".into()));
            }
            let step = match table.state {
                TableState::Planned => self.fence(ctx, warehouse, source.as_ref(), &table).await,
                TableState::Fenced => self.register(ctx, warehouse, source.as_ref(), &table).await,
                TableState::Registered => self.verify_step(ctx, warehouse, &table).await,
                _ => return Ok(table),
            };
            let next = match step {
                Ok(next) => next,
                Err(e @ CatalogError::Unavailable(_)) => return Err(e),
                Err(e) => {
                    let fenced = if table.state == TableState::Planned {
                        ""
                    } else {
                        " (the source stays fenced: roll the table back to give it back)"
                    };
                    self.fail(ctx, &table, format!("{e}{fenced}")).await?
                }
            };
            table = match next {
                Some(next) => next,
                None => self.reread(&table).await?,
            };
        }
    }

    async fn fail(&self, ctx: &RequestContext, table: &MigrationTable, why: String) -> Result<Option<MigrationTable>> {
        // What a source said is part of it: kept short.
        let why: String = if why.len() > MAX_ERROR_BYTES {
            format!("{}...", why.chars().take(MAX_ERROR_BYTES).collect::<String>())
        } else {
            why
        };
        tracing::warn!(table = %table.source_name, %why, "a migrated table failed");
        self.step(ctx, table, TableState::Failed, &Step { error: Some(why), ..Step::default() }).await
    }

    /// planned → fenced: the source's pointer swapped from where the table is now (the newest
    /// commit acknowledged there) to a location no writer can commit past.
    async fn fence(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        source: &dyn SourceCatalog,
        table: &MigrationTable,
    ) -> Result<Option<MigrationTable>> {
        let ours = format!("{FENCE_SUFFIX}{}", table.id);
        let found = source.table(&table.source_namespace, &table.source_name).await?;
        // Not listed: gone, or released by this very fence before a kill (a source that
        // releases tables answers the repeated release as it answered the first).
        let Some(mut current) = found.and_then(|t| t.metadata_location).or_else(|| table.planned_location.clone())
        else {
            return self.fail(ctx, table, "the table is gone from the source".into()).await;
        };
        let root = warehouse.storage_root.as_str();
        let mut previous = None;
        let mut tries = 0;
        let expected = loop {
            // Fenced by this very fence before (a run resumed after it fenced).
            if let Some(expected) = current.strip_suffix(&ours) {
                previous = Some(expected.to_owned());
                break expected.to_owned();
            }
            if let Err(why) = acceptable(root, &current) {
                return self
                    .fail(ctx, table, format!("the source's metadata location cannot move ({why}): not fenced"))
                    .await;
            }
            match source
                .fence(&table.source_namespace, &table.source_name, &current, &(current.clone() + &ours))
                .await?
            {
                Fence::Fenced { previous: before } => {
                    previous = before;
                    break current;
                }
                Fence::AlreadyFenced => break current,
                Fence::Moved { now } if tries < FENCE_TRIES => {
                    tries += 1;
                    current = now;
                }
                Fence::Moved { .. } => {
                    return Err(CatalogError::Unavailable(format!(
                        "{} kept taking commits at the source while it was fenced; the run tries again",
                        table.source_name
                    )));
                }
                Fence::Gone => return self.fail(ctx, table, "the table is gone from the source".into()).await,
                Fence::Released { at } => {
                    if let Err(why) = acceptable(root, &at) {
                        // Given back at once: icegate would not hold it there.
                        let named = (&table.source_namespace[..], table.source_name.as_str());
                        source.unfence(named, &fenced_location(&at, &table.id), &at, None).await?;
                        return self
                            .fail(
                                ctx,
                                table,
                                format!(
                                    "the source released it at {at}, which cannot move ({why}); the table was \
                                     registered at the source again"
                                ),
                            )
                            .await;
                    }
                    break at;
                }
            }
        };
        let fenced = fenced_location(&expected, &table.id);
        let step = Step {
            fenced_location: Some(expected.clone()),
            fence: Some(json!({
                "fenced": fenced,
                "previous": previous,
                "moved-since-plan": table.planned_location.as_deref() != Some(expected.as_str()),
            })),
            ..Step::default()
        };
        let stepped = self.step(ctx, table, TableState::Fenced, &step).await?;
        if stepped.is_none() {
            // Another hand (a rollback) took the table meanwhile: the source is as it was.
            let named = (&table.source_namespace[..], table.source_name.as_str());
            source.unfence(named, &fenced, &expected, previous.as_deref()).await?;
        }
        Ok(stepped)
    }

    /// The target namespace, with its parents, made where missing (with the source's properties).
    async fn ensure_namespace(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        table: &MigrationTable,
    ) -> Result<()> {
        let levels = &table.target_namespace;
        for end in 1..=levels.len() {
            let namespace = NamespaceIdent::from_levels(levels[..end].to_vec())?;
            if self.store().namespace_exists(&warehouse.id, &namespace).await? {
                continue;
            }
            let properties: crate::store::Properties = if end == levels.len() {
                table
                    .report
                    .as_ref()
                    .and_then(|r| r.get("namespace-properties"))
                    .and_then(|p| serde_json::from_value::<crate::store::Properties>(p.clone()).ok())
                    .unwrap_or_default()
                    .into_iter()
                    // Policy is the administrators' to set here, never a source's.
                    .filter(|(key, _)| !crate::lifecycle::is_policy_key(key))
                    .collect()
            } else {
                Default::default()
            };
            match self.namespaces().create(ctx, &warehouse.id, namespace, properties).await {
                Ok(_) | Err(CatalogError::AlreadyExists(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// fenced → registered: icegate holds the table at the metadata file the fence froze. A
    /// registration icegate refuses restores the source (the table fails, nothing lost).
    async fn register(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        source: &dyn SourceCatalog,
        table: &MigrationTable,
    ) -> Result<Option<MigrationTable>> {
        let Some(location) = table.fenced_location.clone() else {
            return self.fail(ctx, table, "fenced without a location".into()).await;
        };
        let ident = Self::table_ident(table)?;
        let registered = match self.ensure_namespace(ctx, warehouse, table).await {
            Ok(()) => self.tables().register(ctx, &warehouse.id, &ident, &location, false).await.map(|r| r.id),
            Err(e) => Err(e),
        };
        let id = match registered {
            Ok(id) => id,
            // Registered by this run before it was killed: the same table at the same file.
            Err(CatalogError::AlreadyExists(why)) => {
                let head =
                    self.store().load_tabular_head(&warehouse.id, &ident.namespace, &ident.name, TabularKind::Table);
                match head.await? {
                    Some(head) if head.metadata_location == location => Some(head.id),
                    _ => return self.refuse(ctx, source, table, &location, why).await,
                }
            }
            Err(e @ CatalogError::Unavailable(_)) => return Err(e),
            Err(e) => return self.refuse(ctx, source, table, &location, e.to_string()).await,
        };
        let step = Step { tabular_id: id.as_ref().map(|id| id.as_str().to_owned()), ..Step::default() };
        let stepped = self.step(ctx, table, TableState::Registered, &step).await?;
        if stepped.is_none()
            && let Some(id) = &id
        {
            // A rollback restored the source meanwhile: icegate lets the table go again.
            self.store()
                .drop_tabular(
                    &ctx.write(),
                    &warehouse.id,
                    (&ident.namespace, &ident.name),
                    TabularKind::Table,
                    DropOptions::final_drop(0),
                    Some(id),
                )
                .await?;
        }
        Ok(stepped)
    }

    /// A registration icegate refused: the source is restored and the table fails with why.
    async fn refuse(
        &self,
        ctx: &RequestContext,
        source: &dyn SourceCatalog,
        table: &MigrationTable,
        location: &str,
        why: String,
    ) -> Result<Option<MigrationTable>> {
        let previous = table.fence.as_ref().and_then(|f| f["previous"].as_str()).map(str::to_owned);
        let named = (&table.source_namespace[..], table.source_name.as_str());
        source.unfence(named, &fenced_location(location, &table.id), location, previous.as_deref()).await?;
        self.fail(ctx, table, format!("icegate refused the registration ({why}); the source was restored")).await
    }

    /// registered → verified (or failed, with the report saying what differs).
    async fn verify_step(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        table: &MigrationTable,
    ) -> Result<Option<MigrationTable>> {
        let report = self.verify(ctx, warehouse, table).await?;
        let failed: Vec<String> = report["checks"]
            .as_object()
            .map(|checks| {
                checks.iter().filter(|(_, c)| c["ok"] == json!(false)).map(|(name, _)| name.clone()).collect()
            })
            .unwrap_or_default();
        if failed.is_empty() {
            self.step(ctx, table, TableState::Verified, &Step { report: Some(report), ..Step::default() }).await
        } else {
            let error = format!(
                "verification failed: {} (the source stays fenced; roll the table back, or fix and retry)",
                failed.join(", ")
            );
            let step = Step { report: Some(report), error: Some(error), ..Step::default() };
            self.step(ctx, table, TableState::Failed, &step).await
        }
    }

    /// Reads the metadata file at `location` (inside the storage root), bounded.
    async fn metadata_at(&self, warehouse: &Warehouse, location: &str) -> Result<TableMetadata> {
        location_inside(warehouse.storage_root.as_str(), location)?;
        let bytes = self.files().read(warehouse, location, self.max_metadata_bytes()).await?;
        let json = metadata_file_json(location, bytes, self.max_metadata_bytes())?;
        serde_json::from_slice(&json)
            .map_err(|e| CatalogError::bad_request(format!("invalid table metadata file {location}: {e}")))
    }

    /// icegate's table against the source's (the metadata file the source pointed at when it
    /// was fenced), and a sample of its data files in storage.
    pub(crate) async fn verify(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        table: &MigrationTable,
    ) -> Result<Value> {
        let location = table.fenced_location.clone().unwrap_or_default();
        let ident = Self::table_ident(table)?;
        let source = self.metadata_at(warehouse, &location).await?;
        let loaded = self.tables().load(ctx, &warehouse.id, &ident, SnapshotMode::All).await?;
        let ours: TableMetadata = serde_json::from_str(&loaded.metadata_json)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored metadata of {ident}: {e}")))?;
        let mut checks = serde_json::Map::new();
        let mut check = |name: &str, ok: bool, detail: Value| {
            checks.insert(name.to_owned(), json!({ "ok": ok, "detail": detail }));
        };
        let moved_on = loaded.metadata_location.as_deref() != Some(location.as_str());
        check(
            "metadata-location",
            !moved_on || ours.metadata_log().iter().any(|entry| entry.metadata_file == location),
            json!({ "source": location, "icegate": loaded.metadata_location, "commits-at-icegate": moved_on }),
        );
        check("table-uuid", ours.uuid() == source.uuid(), json!(source.uuid().to_string()));
        let source_snapshots: BTreeSet<i64> = source.snapshots().map(|s| s.snapshot_id()).collect();
        let our_snapshots: BTreeSet<i64> = ours.snapshots().map(|s| s.snapshot_id()).collect();
        check(
            "snapshots",
            source_snapshots.is_subset(&our_snapshots),
            json!({ "source": source_snapshots.len(), "icegate": our_snapshots.len() }),
        );
        // Once icegate took commits, the table rightly differs from the source's last state.
        if !moved_on {
            check(
                "current-snapshot-id",
                ours.current_snapshot_id() == source.current_snapshot_id(),
                json!(source.current_snapshot_id()),
            );
            check("schema", ours.current_schema() == source.current_schema(), json!(source.current_schema_id()));
            check(
                "partition-spec",
                ours.default_partition_spec() == source.default_partition_spec(),
                json!(source.default_partition_spec_id()),
            );
            check(
                "sort-order",
                ours.default_sort_order() == source.default_sort_order(),
                json!(source.default_sort_order_id()),
            );
            check("properties", ours.properties() == source.properties(), json!(source.properties().len()));
            check("location", ours.location() == source.location(), json!(source.location()));
        }
        let (sampled, missing) = self.sample_files(warehouse, &source).await?;
        check("data-files", missing.is_empty(), json!({ "checked": sampled, "missing": missing }));
        Ok(json!({ "checks": checks, "verified-at": self.clock().now_ms() }))
    }

    /// Checks up to [`SAMPLED_FILES`] data files of the current snapshot (spread over its data
    /// manifests) for existence and size; answers how many were checked and what is wrong.
    async fn sample_files(&self, warehouse: &Warehouse, metadata: &TableMetadata) -> Result<(usize, Vec<String>)> {
        let Some(snapshot) = metadata.current_snapshot() else { return Ok((0, Vec::new())) };
        let root = warehouse.storage_root.as_str();
        let max = self.max_metadata_bytes();
        let list_location = snapshot.manifest_list();
        if location_inside(root, list_location).is_err() {
            return Ok((0, vec![format!("{list_location}: outside the storage root")]));
        }
        let bytes = self.files().read(warehouse, list_location, max).await?;
        // Counted and its inflated size bounded before anything is parsed (a small file can
        // inflate a thousandfold).
        crate::jobs::expire_snapshots::avro_records(list_location, &bytes)?;
        let list = ManifestList::parse_with_version(&bytes, metadata.format_version())
            .map_err(|e| CatalogError::bad_request(format!("the manifest list {list_location} does not parse: {e}")))?;
        let manifests: Vec<_> =
            list.entries().iter().filter(|m| m.content == ManifestContentType::Data).cloned().collect();
        let per_manifest = SAMPLED_FILES.div_ceil(manifests.len().max(1)).max(1);
        let (mut sampled, mut problems) = (0usize, Vec::new());
        for manifest in manifests.iter().take(SAMPLED_FILES) {
            if location_inside(root, &manifest.manifest_path).is_err() {
                problems.push(format!("{}: outside the storage root", manifest.manifest_path));
                continue;
            }
            let bytes = self.files().read(warehouse, &manifest.manifest_path, max).await?;
            crate::jobs::expire_snapshots::avro_records(&manifest.manifest_path, &bytes)?;
            let parsed = iceberg::spec::Manifest::parse_avro(&bytes).map_err(|e| {
                CatalogError::bad_request(format!("the manifest {} does not parse: {e}", manifest.manifest_path))
            })?;
            let live = parsed.entries().iter().filter(|e| e.is_alive()).take(per_manifest);
            for entry in live {
                let file = entry.data_file();
                sampled += 1;
                if location_inside(root, file.file_path()).is_err() {
                    problems.push(format!("{}: outside the storage root", file.file_path()));
                    continue;
                }
                match self.files().size_of(warehouse, file.file_path()).await? {
                    Some(size) if size == file.file_size_in_bytes() => {}
                    Some(size) => problems.push(format!(
                        "{}: {size} bytes in storage, {} in its manifest",
                        file.file_path(),
                        file.file_size_in_bytes()
                    )),
                    None => problems.push(format!("{}: missing", file.file_path())),
                }
            }
        }
        Ok((sampled, problems))
    }
}
