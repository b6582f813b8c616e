//! dropTable, and purge: exactly the locations the catalog recorded for the table; and
//! unregisterTable, which drops the table from the catalog and leaves every file where it is.

use super::TableIdent;
use super::Tables;
use crate::access::Privilege;
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::service::Catalog;
use crate::storage::TableLocations;
use crate::store::TabularKind;

/// What unregisterTable answers: the table's last metadata, as it was when it left.
#[derive(Debug)]
pub struct Unregistered {
    pub metadata_location: String,
    pub metadata: std::sync::Arc<str>,
}

impl Catalog {
    /// Deletes a table's row (for a drop or an unregister), answering what it was: the table
    /// the `decided` privileges were decided about (by id: a name can change meaning meanwhile),
    /// and no other.
    async fn remove_table(
        &self,
        ctx: &RequestContext,
        warehouse: &crate::store::Warehouse,
        table: &TableIdent,
        decided: &mut [(Privilege, crate::context::Allowed)],
        purge: Option<bool>,
    ) -> Result<crate::store::Dropped> {
        let (namespace, name) = (&table.namespace, table.name.as_str());
        let head = self.confirmed_head(ctx, &warehouse.id, (namespace, name), TabularKind::Table, decided).await?;
        // Credentials vended for the table while it existed may work this long: its locations
        // are leased that long.
        let lease = self.credentials_valid_until(warehouse, 0);
        // unregisterTable (`purge` None) leaves nothing behind to undrop: the files are another
        // catalog's now.
        let options = match purge {
            Some(purge) => self.drop_options(warehouse, namespace, purge, lease).await?,
            None => crate::store::DropOptions::final_drop(lease),
        };
        let dropped = self
            .store()
            .drop_tabular(
                &ctx.write(),
                &warehouse.id,
                (&table.namespace, &table.name),
                TabularKind::Table,
                options,
                Some(&head.id),
            )
            .await?
            .ok_or_else(|| CatalogError::no_such_table(table))?;
        // Grants follow objects: a table made anew under this name is another one.
        ctx.access_changed();
        Ok(dropped)
    }
}

impl Tables<'_> {
    /// unregisterTable: the table leaves the catalog, its data and metadata files stay where
    /// they are (for another catalog to register). Authorised like a drop, and as a load: the
    /// answer is the table's metadata, which `drop` alone does not let its holder read. The row
    /// is deleted in the same statement that reads its last metadata, so the answer holds every
    /// commit made before it, and every commit after it finds no table.
    pub async fn unregister(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        table: &TableIdent,
    ) -> Result<Unregistered> {
        let (warehouse, dropping) = self
            .tabular_with(ctx, prefix, (&table.namespace, &table.name), TabularKind::Table, Privilege::Drop)
            .await?;
        let target =
            crate::authorization::tabular_target(&warehouse, &table.namespace, &table.name, TabularKind::Table);
        let reading = ctx.require(&target, Privilege::Read, || CatalogError::no_such_table(table)).await?;
        let dropped = self
            .remove_table(ctx, &warehouse, table, &mut [(Privilege::Drop, dropping), (Privilege::Read, reading)], None)
            .await?;
        tracing::info!(table = %table, metadata_location = %dropped.tabular.metadata_location, "table unregistered");
        Ok(Unregistered {
            metadata_location: dropped.tabular.metadata_location,
            metadata: dropped.tabular.metadata.into(),
        })
    }

    /// dropTable: the table is gone from loads and listings at once, and its name free. Kept
    /// restorable for its hold period (see `lifecycle`); with `purge`, every file below its
    /// recorded locations (and nothing outside them) is deleted by a `purge` task once its purge
    /// delay has passed.
    pub async fn drop(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        table: &TableIdent,
        purge: bool,
    ) -> Result<()> {
        let (warehouse, dropping) = self
            .tabular_with(ctx, prefix, (&table.namespace, &table.name), TabularKind::Table, Privilege::Drop)
            .await?;
        let dropped =
            self.remove_table(ctx, &warehouse, table, &mut [(Privilege::Drop, dropping)], Some(purge)).await?;
        if !purge {
            return Ok(());
        }
        if let Some(due) = dropped.kept.and_then(|keep| keep.purge_due_ms) {
            // The drop has happened; a purge that could not be queued now is queued by the
            // lifecycle sweep (it finds every entry whose purge is due).
            let reason = "the table was dropped with purgeRequested";
            if let Err(err) = self.queue_purge(&warehouse, &dropped.tabular.id, due, reason).await {
                tracing::warn!(table = %table, error = %err, "could not queue the purge; the lifecycle sweep will");
            }
            return Ok(());
        }
        // An embedded catalog without a task queue purges inline. Exactly the locations the
        // catalog recorded for the table (each checked to be the table's alone when it was
        // set), never paths read from its metadata or manifests: files a table references
        // elsewhere are not its own to delete. The row is gone, so the table is dropped whatever
        // happens next; a failed purge is logged (with the location), not reported as a failed
        // drop.
        let owned = std::iter::once(dropped.tabular.location.clone()).chain(dropped.extra_locations);
        for location in TableLocations::new(owned).as_slice() {
            match crate::jobs::purge::purge_location(self.files().as_ref(), &warehouse, location).await {
                Ok((files, _)) => tracing::info!(table = %table, %location, files, "purged table files"),
                Err(err) => tracing::error!(table = %table, %location, error = ?err, "purge failed"),
            }
        }
        Ok(())
    }
}
