//! dropTable, and purge: exactly the locations the catalog recorded for the table.

use super::TableIdent;
use crate::access::Privilege;
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::service::Catalog;
use crate::storage::TableLocations;
use crate::store::TabularKind;

impl Catalog {
    /// dropTable; with `purge`, every file below the table's location goes too (and nothing
    /// outside it).
    pub async fn drop_table(
        &self,
        ctx: &RequestContext,
        prefix: &str,
        namespace: &str,
        name: &str,
        purge: bool,
    ) -> Result<()> {
        let table = TableIdent::parse(namespace, name)?;
        let (warehouse, _) = self
            .tabular_with(ctx, prefix, (&table.namespace, &table.name), TabularKind::Table, Privilege::Drop)
            .await?;
        // Credentials vended for the table while it existed may work this long: its locations
        // are leased that long.
        let lease = self.credentials_valid_until(&warehouse, 0);
        let dropped = self
            .store()
            .drop_tabular(&ctx.write(), &warehouse.id, &table.namespace, &table.name, TabularKind::Table, lease)
            .await?
            .ok_or_else(|| CatalogError::no_such_table(&table))?;
        // Grants follow objects: a table made anew under this name is another one.
        ctx.access_changed();
        if purge {
            // Exactly the locations the catalog recorded for the table (each checked to be the
            // table's alone when it was set), never paths read from its metadata or manifests:
            // files a table references elsewhere are not its own to delete.
            // The row is gone, so the table is dropped whatever happens next; a failed purge is
            // logged (with the location) for an operator to finish, not reported as a failed drop.
            let owned = std::iter::once(dropped.tabular.location.clone()).chain(dropped.extra_locations);
            for location in TableLocations::new(owned).as_slice() {
                match self.files().delete_prefix(&warehouse, location).await {
                    Ok(count) => tracing::info!(table = %table, %location, files = count, "purged table files"),
                    Err(err) => tracing::error!(table = %table, %location, error = ?err, "purge failed"),
                }
            }
        }
        Ok(())
    }
}
