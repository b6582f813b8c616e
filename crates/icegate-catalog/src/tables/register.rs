//! registerTable: adopting a metadata file that lies inside the table's own location, and
//! with `overwrite` repointing an existing table at it.

use super::Tables;
use super::metadata_files::{etag, location_inside, metadata_file_json, parse_metadata_file, table_locations, to_json};
use super::{SnapshotMode, TableIdent, TableResult};
use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::storage::TableLocations;
use crate::store::{MetadataSwap, SwapOutcome, TabularKind};

impl Tables<'_> {
    /// registerTable: adopts an existing metadata file; with `overwrite`, repoints an existing
    /// table at it.
    pub async fn register(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        table: &TableIdent,
        metadata_location: &str,
        overwrite: bool,
    ) -> Result<TableResult> {
        let (warehouse, allowed) = self.namespace_with(ctx, prefix, &table.namespace, Privilege::Create).await?;
        let root = warehouse.storage_root.as_str();
        location_inside(root, metadata_location)?;
        // Where the caller may place the table, before anything is read with the server's
        // identity (what a file elsewhere holds, or whether it exists, is not the caller's to learn).
        self.check_placement(ctx, &warehouse, &table.namespace, &[metadata_location.to_owned()]).await?;
        // The file is read and inflated (up to catalog.max_metadata_bytes) in the caller's turn
        // for a large share of the commit budget: one registration at a time per principal.
        // Then it is walked against the limits, and room for what parsing it takes is taken,
        // before it is parsed.
        let turn = self.room_turn(ctx).await;
        let bytes = self.files().read(&warehouse, metadata_location, self.max_metadata_bytes()).await?;
        let json = metadata_file_json(metadata_location, bytes, self.max_metadata_bytes())?;
        let text: std::sync::Arc<str> = String::from_utf8(json)
            .map_err(|_| CatalogError::bad_request(format!("metadata file {metadata_location} is not UTF-8 JSON")))?
            .into();
        let cost = self.document_cost_of(&format!("metadata file {metadata_location}"), text.clone()).await?;
        let held = crate::commit_budget::held_by(text.len(), cost.build_bytes(), 0, 0);
        let _room = self.reserve_room_in(turn, held).await?;
        let metadata = parse_metadata_file(metadata_location, text.as_bytes())?;
        let (location, extra_locations) = table_locations(&warehouse, &metadata)?;
        // The metadata file must be the table's own: a registration cannot make the catalog
        // point at (and later clean up) a file in another table's directory.
        let owned = TableLocations::new(std::iter::once(location.clone()).chain(extra_locations.iter().cloned()));
        if !owned.contains(metadata_location) {
            return Err(CatalogError::bad_request(format!(
                "metadata file {metadata_location} must lie inside the table's location {location} \
                 (or its write.metadata.path)"
            )));
        }
        let all: Vec<String> = std::iter::once(location.clone()).chain(extra_locations.iter().cloned()).collect();
        self.check_placement(ctx, &warehouse, &table.namespace, &all).await?;
        let metadata_json = to_json(&metadata)?;
        self.check_size("document", metadata_json.len())?;
        if overwrite && let Some(existing) = self.load_row(&warehouse, table).await? {
            // Replacing a table's metadata is replacing the table: `write` and `drop` on it.
            let target = Target::Tabular {
                warehouse_id: warehouse.id.clone(),
                namespace: table.namespace.clone(),
                name: table.name.clone(),
                kind: TabularKind::Table,
            };
            // Decided about the table replaced (by id), not only its name.
            for privilege in [Privilege::Write, Privilege::Drop] {
                let exists = || CatalogError::AlreadyExists(format!("Table already exists: {table}"));
                let changed =
                    || CatalogError::CommitFailed(format!("{table} changed while it was being registered; retry"));
                ctx.require_on(&target, privilege, &existing.id, exists, changed).await?;
            }
            // Replacing a held table is not allowed any more than dropping it.
            if let Some(held) = self.store().legal_hold(&warehouse.id, &table.namespace, &existing.id).await? {
                return Err(held);
            }
            let swap = MetadataSwap {
                id: existing.id.clone(),
                warehouse_id: warehouse.id.clone(),
                namespace: table.namespace.clone(),
                name: table.name.clone(),
                expected_metadata_location: existing.metadata_location.clone(),
                metadata_location: metadata_location.to_owned(),
                metadata: metadata_json.as_str().into(),
                metadata_gzip: None,
                location: location.clone(),
                extra_locations,
                locations_changed: true,
            };
            return match self.store().swap_metadata(&ctx.write(), &[swap]).await? {
                SwapOutcome::Applied => Ok(TableResult {
                    id: Some(existing.id),
                    metadata_location: Some(metadata_location.to_owned()),
                    etag: etag(metadata_location, SnapshotMode::All),
                    gzip: None,
                    metadata_json: self.remember(metadata_location, metadata_json),
                    warehouse,
                    access: allowed.file_grant(),
                }),
                SwapOutcome::Conflict(_) => {
                    Err(CatalogError::CommitFailed(format!("{table} changed while it was being registered; retry")))
                }
            };
        }
        let id = self
            .store()
            .create_tabular(
                &ctx.write(),
                &table.new_row(
                    TabularKind::Table,
                    &warehouse,
                    &location,
                    &extra_locations,
                    metadata_location,
                    &metadata_json,
                ),
            )
            .await?;
        Ok(TableResult {
            id: Some(id),
            metadata_location: Some(metadata_location.to_owned()),
            etag: etag(metadata_location, SnapshotMode::All),
            gzip: None,
            metadata_json: self.remember(metadata_location, metadata_json),
            warehouse,
            access: allowed.file_grant(),
        })
    }
}
