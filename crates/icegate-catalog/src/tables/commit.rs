//! Table commits (updateTable, commitTransaction) as a [`MetadataKind`] of the commit engine:
//! reading a table's current state (from the metadata cache when it holds it), deciding on the
//! tables found, checking requirements and applying updates with the `iceberg` crate, creating
//! a table through its `assert-create` commit, and what follows a commit (caches, metadata-log
//! clean-up).

use super::Tables;
use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{FormatVersion, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec};
use iceberg::{TableRequirement, TableUpdate};

use super::document::{self, Layout, refs_after, refs_of};
use super::metadata_files::{
    etag, extra_locations_of, is_metadata_file, location_inside, metadata_file_location, parse_stored, table_locations,
    to_json,
};
use super::{PROPERTY_DELETE_AFTER_COMMIT, SnapshotMode, TableChange, TableIdent, TableResult};
use crate::access::{Privilege, Target};
use crate::commit::{MAX_COMMIT_ATTEMPTS, MetadataKind, Staged, Staging};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::metadata_cache::Cached;
use crate::service::Catalog;
use crate::storage::TableLocations;
use crate::store::{MetadataSwap, TabularHead, TabularKind, Warehouse};

impl Catalog {
    /// A table's current state, for a commit to build on: its head from the database and its
    /// document, with its parsed metadata (and the layout of its document) when memory holds
    /// them; [`Self::parsed`] parses what it does not hold.
    async fn load_current(&self, warehouse: &Warehouse, table: &TableIdent) -> Result<Option<Current>> {
        let head =
            self.store().load_tabular_head(&warehouse.id, &table.namespace, &table.name, TabularKind::Table).await?;
        let Some(head) = head else { return Ok(None) };
        match self.metadata_cache().get(&head.metadata_location) {
            Some(Cached { document, gzip, parsed, layout, .. }) => {
                let layout = if parsed.is_some() { layout } else { None };
                Ok(Some(Current { head, document, gzip, metadata: parsed, layout }))
            }
            None => {
                let Some(row) = self.load_row(warehouse, table).await? else { return Ok(None) };
                let head = TabularHead { id: row.id, location: row.location, metadata_location: row.metadata_location };
                Ok(Some(Current {
                    head,
                    document: Arc::from(row.metadata),
                    gzip: row.gzip,
                    metadata: None,
                    layout: None,
                }))
            }
        }
    }

    /// The metadata of `current`, parsed when memory did not hold it (and then kept for the
    /// next commit or load).
    fn parsed(&self, current: &Current) -> Result<Arc<TableMetadata>> {
        if let Some(metadata) = &current.metadata {
            return Ok(metadata.clone());
        }
        let metadata = Arc::new(parse_stored(&current.head.id, &current.document)?);
        let entry = Cached::new(current.document.clone(), current.gzip.clone(), Some(metadata.clone()), None);
        self.metadata_cache().insert(&current.head.metadata_location, entry);
        Ok(metadata)
    }

    /// The commit of a staged create (`assert-create`): builds version 0 from the updates.
    /// The first added schema, spec and sort order seed the metadata so their ids match what
    /// the client staged (its data files may already reference them).
    async fn create_from_updates(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        change: &TableChange,
    ) -> Result<TableResult> {
        for requirement in &change.requirements {
            super::requirements::check(requirement, None, || None)?;
        }
        // Authorized to create: the updates are walked against the limits, room for what they
        // build is taken, and only then are they built.
        let limits = self.schema_limits();
        let (request_bytes, cost) = crate::schema_cost::total_cost(&change.updates, limits)?;
        let _room =
            self.reserve_room(ctx, crate::commit_budget::held_by(0, 0, request_bytes, cost.build_bytes())).await?;
        let updates = change.built_updates(limits)?;
        let mut schema = None;
        let mut spec = None;
        let mut order = None;
        let mut location = None;
        let mut version = FormatVersion::V2;
        for update in updates.iter().copied() {
            match update {
                TableUpdate::AddSchema { schema: s } if schema.is_none() => schema = Some(s.clone()),
                TableUpdate::AddSpec { spec: s } if spec.is_none() => spec = Some(s.clone()),
                TableUpdate::AddSortOrder { sort_order } if order.is_none() => order = Some(sort_order.clone()),
                TableUpdate::SetLocation { location: l } => location = Some(l.clone()),
                TableUpdate::UpgradeFormatVersion { format_version } => version = *format_version,
                _ => {}
            }
        }
        let schema = schema.ok_or_else(|| CatalogError::bad_request("creating a table needs an add-schema update"))?;
        // The staged ids stay (its data files may use them already), as the reference keeps them.
        let staged_ids = super::fresh_ids::ids_of(&schema);
        let location = match location {
            Some(location) => location_inside(warehouse.storage_root.as_str(), &location)?,
            None => Self::default_location(warehouse, &change.table)?,
        };
        let seed = TableMetadataBuilder::new(
            schema,
            spec.unwrap_or_else(|| UnboundPartitionSpec::builder().build()),
            order.unwrap_or_else(SortOrder::unsorted_order),
            location.clone(),
            version,
            HashMap::new(),
        )?
        .build()?
        .metadata;
        // The builder numbers its seed afresh: back to the staged ids, so that the staged
        // add-schema finds its schema there instead of adding a second one.
        let mut builder = super::fresh_ids::renumber(seed, &staged_ids)?.into_builder(None);
        for update in updates.into_iter().cloned() {
            builder = update.apply(builder)?;
        }
        let metadata = builder.build()?.metadata;
        let (base, extra) = table_locations(warehouse, &metadata)?;
        let all: Vec<String> = std::iter::once(base).chain(extra).collect();
        self.check_placement(ctx, warehouse, &change.table.namespace, &all).await?;
        let metadata_json = to_json(&metadata)?;
        self.persist_new_table(ctx, warehouse, &change.table, (&metadata, metadata_json), None).await.map_err(|e| {
            match e {
                // Created meanwhile: its assert-create fails as the reference's does.
                CatalogError::AlreadyExists(_) => {
                    CatalogError::CommitFailed("Requirement failed: table already exists".into())
                }
                other => other,
            }
        })
    }

    /// After a successful commit: remove metadata files that fell out of the metadata log when
    /// `write.metadata.delete-after-commit.enabled` is set. The log is part of the table's
    /// document, which a registration or a client wrote: only metadata files inside the
    /// locations the catalog recorded for this table (and checked to be its alone) are deleted.
    async fn expire_metadata_files(
        &self,
        warehouse: &Warehouse,
        table: &TableIdent,
        swap: &MetadataSwap,
        expired: &[String],
    ) {
        if expired.is_empty() {
            return;
        }
        // Nothing of a held table is deleted (its hold is checked now: one read, only for
        // commits that expire files).
        match self.store().legal_hold(&warehouse.id, &swap.namespace, &swap.id).await {
            Ok(None) => {}
            Ok(Some(_)) => {
                tracing::info!(%table, files = expired.len(), "not deleting expired metadata files of a table under legal hold");
                return;
            }
            Err(e) => {
                tracing::warn!(%table, error = %e, "not deleting expired metadata files: the legal hold check failed");
                return;
            }
        }
        let owned =
            TableLocations::new(std::iter::once(swap.location.clone()).chain(swap.extra_locations.iter().cloned()));
        for file in expired {
            if owned.contains(file) && is_metadata_file(file) {
                self.delete_quietly(warehouse, file).await;
            } else {
                tracing::warn!(%table, %file, "not deleting an expired metadata file outside the table's locations");
            }
        }
    }

    /// After a commit to a table whose properties ask for snapshot expiry, or that inherits a
    /// policy: the cheap check of whether something is (or when it will be) due, queueing the
    /// expiry for then. It reads the parsed metadata the commit has at hand (its document is
    /// parsed again only when no layout says what its refs are). Other tables pay nothing.
    async fn after_commit_expiry(
        &self,
        warehouse: &Warehouse,
        (table, swap): (&TableIdent, &MetadataSwap),
        (parsed, written): (&TableMetadata, &document::Written),
        inherited: &crate::maintenance::PolicyLevel,
    ) {
        let Some(queue) = self.task_store() else { return };
        let now = self.clock().now_ms();
        let due = match crate::maintenance::expiry_policy(parsed.properties(), inherited) {
            Ok(None) => Ok(None),
            Ok(Some(policy)) => match &written.layout {
                Some(layout) => {
                    Ok(crate::jobs::expire_snapshots::first_due_parsed(parsed, layout.refs(), &policy, now))
                }
                None => crate::jobs::expire_snapshots::Document::parse(&written.text)
                    .map(|document| crate::jobs::expire_snapshots::first_due(&document, &policy, now)),
            },
            Err(e) => Err(e),
        };
        match due {
            Ok(Some(due)) if self.expiry_already_queued(&swap.id, due.max(now), now) => {}
            Ok(Some(due)) => {
                let reason = ("the table's snapshot expiry policy made snapshots due", now);
                let queued = crate::jobs::expire_snapshots::queue_expiry(
                    queue.as_ref(),
                    (&warehouse.id, &swap.id),
                    table,
                    due.max(now),
                    reason,
                )
                .await;
                if let Err(e) = queued {
                    tracing::warn!(%table, error = %e, "could not queue the snapshot expiry");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(%table, error = %e, "the snapshot expiry policy could not be read"),
        }
    }

    /// Checks requirements against the current metadata and applies the updates.
    fn stage_change(&self, warehouse: &Warehouse, change: &TableChange, current: Current) -> Result<Staged<Extra>> {
        // Without parsed metadata memory held no layout either (`load_current`).
        let base = self.parsed(&current)?;
        let Current { head: row, document, gzip, layout, .. } = current;
        if change.base.as_ref().is_some_and(|base| *base != row.metadata_location) {
            return Err(CatalogError::CommitFailed(format!(
                "{} changed since this change was planned; planning again",
                change.table
            )));
        }
        let old_extra_locations = extra_locations_of(&row.location, &base);
        for requirement in &change.requirements {
            let refs = || match &layout {
                Some(layout) => Some(layout.refs().clone()),
                None => refs_of(&document, &base).ok(),
            };
            super::requirements::check(requirement, Some(&base), refs)?;
        }
        if change.updates.is_empty() {
            let etag = etag(&row.metadata_location, SnapshotMode::All);
            return Ok(Staged {
                ident: change.table.clone(),
                swap: None,
                new_locations: Vec::new(),
                extra: Extra {
                    written: None,
                    result: TableResult {
                        id: Some(row.id),
                        metadata_location: Some(row.metadata_location),
                        metadata_json: document,
                        gzip,
                        etag,
                        warehouse: warehouse.clone(),
                        access: None,
                    },
                    expired: Vec::new(),
                    delete_expired: None,
                    reserved: None,
                },
            });
        }
        // The cached metadata is shared: the builder works on a copy of it (its snapshots,
        // schemas and specs are shared, not copied). The updates were walked, and room taken
        // for what they build, before (`TableCommit::stage`).
        let mut builder = TableMetadata::clone(&base).into_builder(Some(row.metadata_location.clone()));
        for update in change.built_updates(self.schema_limits())?.into_iter().cloned() {
            // A table's uuid is what it is: taking another's would make it that table to
            // whatever keys on the uuid (a dropped table's kept entry, its purge).
            if let TableUpdate::AssignUuid { uuid } = &update
                && *uuid != base.uuid()
            {
                return Err(CatalogError::bad_request(format!(
                    "assign-uuid cannot change the table's uuid ({} to {uuid})",
                    base.uuid()
                )));
            }
            builder = update.apply(builder)?;
        }
        let built = builder.build()?;
        let metadata = built.metadata;
        let (location, extra_locations) = table_locations(warehouse, &metadata)?;
        let metadata_location = metadata_file_location(&metadata, Some(&row.metadata_location));
        let written = write_document(&metadata, &built.changes, (&document, &base, layout.as_deref()))?;
        self.check_size("document", written.text.len())?;
        // A schema added brings the document's schemas closer to their limits: the document
        // as written must pass them (or the table could no longer be committed to).
        if built.changes.iter().any(|change| matches!(change, TableUpdate::AddSchema { .. })) {
            self.document_cost("the table's new metadata", &written.text)?;
        }
        let delete_expired =
            metadata.properties().get(PROPERTY_DELETE_AFTER_COMMIT).map(|v| v.eq_ignore_ascii_case("true"));
        let had = TableLocations::new(std::iter::once(row.location.clone()).chain(old_extra_locations.iter().cloned()));
        let new_locations: Vec<String> = std::iter::once(&location)
            .chain(&extra_locations)
            .filter(|l| !had.as_slice().contains(*l) && !had.contains(l))
            .cloned()
            .collect();
        Ok(Staged {
            ident: change.table.clone(),
            new_locations,
            swap: Some(MetadataSwap {
                id: row.id.clone(),
                warehouse_id: warehouse.id.clone(),
                namespace: change.table.namespace.clone(),
                name: change.table.name.clone(),
                expected_metadata_location: row.metadata_location,
                metadata_location: metadata_location.clone(),
                metadata: written.text.clone(),
                metadata_gzip: (written.text.len() >= STORE_COMPRESSED_FROM).then(|| written.gzip.clone()),
                locations_changed: location != row.location || extra_locations != old_extra_locations,
                location,
                extra_locations,
            }),
            extra: Extra {
                result: TableResult {
                    id: Some(row.id),
                    etag: etag(&metadata_location, SnapshotMode::All),
                    metadata_location: Some(metadata_location),
                    metadata_json: written.text.clone(),
                    gzip: Some(written.gzip.clone()),
                    warehouse: warehouse.clone(),
                    access: None,
                },
                written: Some((written, Arc::new(metadata))),
                expired: built.expired_metadata_logs.into_iter().map(|log| log.metadata_file).collect(),
                delete_expired,
                reserved: None,
            },
        })
    }
}

/// Documents at least this large are stored compressed (their gzip form, made by the commit
/// anyway); smaller ones as text, which a load that misses the cache serves without inflating.
const STORE_COMPRESSED_FROM: usize = 16 * 1024;

/// Writes the document of `metadata`, built by `changes` on `base` (whose document is `old`,
/// spliced by `layout` when known): the refs follow the changes, and unchanged chunks of the
/// old document are reused.
fn write_document(
    metadata: &TableMetadata,
    changes: &[TableUpdate],
    (old, base, layout): (&str, &TableMetadata, Option<&Layout>),
) -> Result<document::Written> {
    let refs = match layout {
        Some(layout) => refs_after(layout.refs(), changes, metadata),
        None => refs_after(&refs_of(old, base)?, changes, metadata),
    };
    match refs {
        Some(refs) => {
            let written = document::write(metadata, refs, layout)?;
            tracing::trace!(bytes = written.text.len(), compressed = written.compressed_bytes, "document written");
            Ok(written)
        }
        None => {
            // Not expected: the replay covers every way the crate changes refs. Read them from
            // the crate's own serialisation rather than write a document that could differ.
            tracing::warn!("refs of a commit could not be replayed; writing its document in full");
            let refs = refs_of(&to_json(metadata)?, metadata)?;
            document::write(metadata, refs, None)
        }
    }
}

/// Table commits; `transaction` for commitTransaction (which cannot create tables).
pub(crate) struct TableCommit {
    transaction: bool,
}

/// What a table's commit keeps for after its swap.
pub(crate) struct Extra {
    /// The new document and metadata (with a swap), for the cache.
    written: Option<(document::Written, Arc<TableMetadata>)>,
    result: TableResult,
    /// Metadata files that fell out of the log, and whether the table says to delete them
    /// (`None`: it does not say; its namespace's or warehouse's policy decides).
    expired: Vec<String>,
    delete_expired: Option<bool>,
    /// The commit's room in the memory budget (on its first table), held until it is answered.
    reserved: Option<crate::commit_budget::Reserved>,
}

/// A table's current state, as a commit reads it.
struct Current {
    head: TabularHead,
    document: Arc<str>,
    gzip: Option<Arc<[u8]>>,
    /// `None` until parsed ([`Catalog::parsed`]): parsing waits for room in the commit budget.
    metadata: Option<Arc<TableMetadata>>,
    layout: Option<Arc<Layout>>,
}

/// The tables a commit changes, read and decided about; or the answer when it created one.
enum Found<'a> {
    Tables(Vec<(&'a TableChange, Current)>),
    Created(Box<TableResult>),
}

impl TableCommit {
    /// Decides on each change's table and reads it: first whether the caller may see it (a table
    /// it may not see is answered like a missing one, and nothing of it is read), then `write`
    /// on the table read (by id), or `create` in the namespace when the change creates one
    /// (which is then done here).
    async fn find<'a>(
        &self,
        catalog: &Catalog,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        changes: &'a [TableChange],
    ) -> Result<Found<'a>> {
        let mut found = Vec::with_capacity(changes.len());
        for change in changes {
            let target = Target::Tabular {
                warehouse_id: warehouse.id.clone(),
                namespace: change.table.namespace.clone(),
                name: change.table.name.clone(),
                kind: TabularKind::Table,
            };
            ctx.require(&target, Privilege::Describe, || CatalogError::no_such_table(&change.table)).await?;
            match catalog.load_current(warehouse, &change.table).await? {
                None => {
                    if !change.requirements.contains(&TableRequirement::NotExist) {
                        return Err(CatalogError::no_such_table(&change.table));
                    }
                    if self.transaction {
                        return Err(CatalogError::bad_request(
                            "creating a table (assert-create) inside commitTransaction is not supported; \
                             commit the create on its own first",
                        ));
                    }
                    let namespace = &change.table.namespace;
                    let target = Target::Namespace { warehouse_id: warehouse.id.clone(), namespace: namespace.clone() };
                    ctx.require(&target, Privilege::Create, || CatalogError::no_such_namespace(namespace)).await?;
                    // Only outside a transaction, so this is the commit's one change.
                    return Ok(Found::Created(Box::new(catalog.create_from_updates(ctx, warehouse, change).await?)));
                }
                Some(current) => {
                    // Decided about the table this commit changes (by id), not only its name.
                    let missing = || CatalogError::no_such_table(&change.table);
                    let renamed = || {
                        CatalogError::CommitFailed(format!("{} was renamed or replaced meanwhile; retry", change.table))
                    };
                    ctx.require_on(&target, Privilege::Write, &current.head.id, missing, renamed).await?;
                    found.push((change, current));
                }
            }
        }
        Ok(Found::Tables(found))
    }
}

impl MetadataKind for TableCommit {
    type Change = TableChange;
    type Extra = Extra;
    type Output = TableResult;

    /// Finds the tables and decides on them ([`TableCommit::find`]), takes room in the commit
    /// budget, then checks requirements and applies updates.
    async fn stage(
        &self,
        catalog: &Catalog,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        changes: &[TableChange],
    ) -> Result<Staging<Extra, TableResult>> {
        // Room for what the commit will hold, taken once for all its tables: a transaction
        // that waited for room while holding part of it could wait on another doing the same.
        // What is reserved is what the commit builds: its new documents (about twice the ones
        // it builds on), the parsed form of a document still to be parsed (about twice its text,
        // and what its schemas build), and the request's own updates (their bytes, and what
        // their schemas build). Nothing is built before the changes are authorized (`find`)
        // and their schemas walked against the limits.
        let limits = catalog.schema_limits();
        let mut waited = None;
        let (found, reserved) = loop {
            let found = match self.find(catalog, ctx, warehouse, changes).await? {
                Found::Tables(found) => found,
                Found::Created(result) => return Ok(Staging::Done(vec![*result])),
            };
            // The request's schemas together (a transaction's over all its tables).
            crate::schema_cost::total_cost(found.iter().flat_map(|(change, _)| change.updates.iter()), limits)?;
            let mut bytes = 0u64;
            for (change, current) in &found {
                let (request_bytes, cost) = crate::schema_cost::total_cost(&change.updates, limits)?;
                // A document still to be parsed: its parsed form (about its text), and what
                // parsing it takes (its schemas, and the parser's buffering of all of it).
                let parse = match current.metadata {
                    Some(_) => 0,
                    None => {
                        let what = "the table's stored metadata";
                        let document = catalog.document_cost_of(what, current.document.clone()).await?;
                        (current.document.len() as u64).saturating_add(document.build_bytes())
                    }
                };
                let held =
                    crate::commit_budget::held_by(current.document.len(), parse, request_bytes, cost.build_bytes());
                bytes = bytes.saturating_add(held);
            }
            match waited.take().or_else(|| catalog.try_reserve_room(ctx, bytes)) {
                Some(reserved) => break (found, reserved),
                None => {
                    // Waiting holds nothing of the tables: their documents may leave the cache
                    // meanwhile, and a queue of commits each keeping one alive would hold what
                    // the budget bounds. Once there is room, they are read again.
                    drop(found);
                    waited = Some(catalog.reserve_room(ctx, bytes).await?);
                }
            }
        };
        let mut staged = Vec::with_capacity(found.len());
        for (change, current) in found {
            staged.push(catalog.stage_change(warehouse, change, current)?);
        }
        if let Some(first) = staged.first_mut() {
            first.extra.reserved = Some(reserved);
        }
        Ok(Staging::Swap(staged))
    }

    async fn applied(&self, catalog: &Catalog, warehouse: &Warehouse, staged: Staged<Extra>) -> TableResult {
        let Staged { ident, swap, extra, .. } = staged;
        // What the table inherits (a policy of the warehouse, or of a namespace: cached), read
        // once, and only when the expiry check or the metadata files out of the log ask for it.
        let asks = catalog.task_store().is_some() || (extra.delete_expired.is_none() && !extra.expired.is_empty());
        let inherited = match swap.is_some() && asks {
            true => catalog.inherited_policy(warehouse, &ident.namespace).await.unwrap_or_default(),
            false => crate::maintenance::PolicyLevel::default(),
        };
        // The cheap check, for tables that ask for expiry themselves or inherit it.
        if let (Some((written, parsed)), Some(swap)) = (&extra.written, &swap)
            && catalog.task_store().is_some()
            && (inherited.expires()
                || parsed.properties().contains_key(crate::jobs::expire_snapshots::MAX_AGE_PROPERTY))
        {
            catalog.after_commit_expiry(warehouse, (&ident, swap), (parsed, written), &inherited).await;
        }
        if let (Some((written, parsed)), Some(location)) = (extra.written, &extra.result.metadata_location) {
            let entry = Cached::new(written.text, Some(written.gzip), Some(parsed), written.layout);
            catalog.metadata_cache().insert(location, entry);
        }
        if let Some(swap) = &swap {
            catalog.metadata_cache().forget(&swap.expected_metadata_location);
            let delete = extra.delete_expired.or(inherited.metadata_delete_after_commit).unwrap_or(false);
            if delete && !extra.expired.is_empty() {
                catalog.expire_metadata_files(warehouse, &ident, swap, &extra.expired).await;
            }
        }
        extra.result
    }

    fn gave_up(&self) -> CatalogError {
        CatalogError::CommitFailed(format!(
            "gave up after {MAX_COMMIT_ATTEMPTS} attempts: the table is being changed concurrently; retry"
        ))
    }
}

impl Tables<'_> {
    /// updateTable: one table's commit. It runs to completion on its own task even if the
    /// request goes away, so no metadata file is left behind half way.
    pub async fn commit(&self, ctx: &RequestContext, prefix: &WarehouseId, change: TableChange) -> Result<TableResult> {
        self.check_update_count(change.requirements.len(), change.updates.len())?;
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let mut results = self.run_commit(ctx, warehouse, TableCommit { transaction: false }, vec![change]).await?;
        Ok(results.remove(0))
    }

    /// commitTransaction: every table's changes, atomically.
    pub async fn commit_transaction(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        changes: Vec<TableChange>,
    ) -> Result<()> {
        let (warehouse, _) = self.warehouse_with(ctx, prefix, Privilege::Describe).await?;
        if changes.is_empty() {
            return Err(CatalogError::bad_request("a transaction needs at least one table change"));
        }
        let mut seen = std::collections::HashSet::new();
        for change in &changes {
            self.check_update_count(change.requirements.len(), change.updates.len())?;
            if !seen.insert((change.table.namespace.clone(), change.table.name.clone())) {
                return Err(CatalogError::bad_request(format!("{} appears twice in the transaction", change.table)));
            }
        }
        self.run_commit(ctx, warehouse, TableCommit { transaction: true }, changes).await.map(|_| ())
    }
}
