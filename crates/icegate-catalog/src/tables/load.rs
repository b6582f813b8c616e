//! loadTable, tableExists and listTables, and the cache policy of loads: the head from the
//! store, the document from the metadata cache when it holds that file, the whole row in one
//! query while most lookups miss.

use std::sync::Arc;

use super::TableIdent;
use super::metadata_files::{etag, referenced_snapshots_only};
use super::{SnapshotMode, TableResult, Tables};
use crate::access::Privilege;
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::ids::{TabularId, WarehouseId};
use crate::pagination::{encode_token, page_request};
use crate::service::{Catalog, Listing};
use crate::store::{Tabular, TabularKind, Warehouse};

/// A load of a table the client may already hold (`If-None-Match`).
// Returned once per load and matched at once: boxing the table would cost an allocation on the
// hot path to save a move.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Loaded {
    Table(TableResult),
    /// The client's entity tag is current: answer 304 with it.
    NotModified {
        etag: String,
    },
}

/// Whether `If-None-Match` values (lists of entity tags, weak or strong, or `*`) match `etag`.
fn etag_matches(etag: &str, if_none_match: &[&str]) -> bool {
    if_none_match
        .iter()
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .any(|tag| tag == etag || tag == "*" || tag.strip_prefix("W/") == Some(etag))
}

impl Catalog {
    pub(crate) async fn load_row(&self, warehouse: &Warehouse, table: &TableIdent) -> Result<Option<Tabular>> {
        self.store().load_tabular(&warehouse.id, &table.namespace, &table.name, TabularKind::Table).await
    }

    /// The table as it is now. Reads the database only: the metadata JSON is kept beside its
    /// location.
    pub(crate) async fn current_table(
        &self,
        warehouse: Warehouse,
        table: &TableIdent,
        mode: SnapshotMode,
    ) -> Result<TableResult> {
        let (id, metadata_location, document, gzip) = if self.metadata_cache().mostly_misses() {
            // Loads spread over more tables than the cache holds (or no cache): one query for
            // the whole row beats a head query followed by a row query.
            let row = self.load_row(&warehouse, table).await?.ok_or_else(|| CatalogError::no_such_table(table))?;
            let cache = self.metadata_cache();
            cache.observe(&row.metadata_location);
            let document: Arc<str> = row.metadata.into();
            if cache.admit() {
                cache.insert_document(&row.metadata_location, &document, row.gzip.clone());
            }
            (row.id, row.metadata_location, document, row.gzip)
        } else {
            self.load_document(&warehouse, table).await?
        };
        let etag = etag(&metadata_location, mode);
        let (metadata_json, gzip) = match mode {
            SnapshotMode::All => (document, gzip),
            // Made once per metadata file, like the document itself: a refs load costs what a
            // full one does (a parse and re-render of a 0.8 MB document took longer than the
            // full load).
            SnapshotMode::Refs => {
                (self.metadata_cache().refs_only(&metadata_location, || referenced_snapshots_only(&document))?, None)
            }
        };
        Ok(TableResult {
            id: Some(id),
            metadata_location: Some(metadata_location),
            metadata_json,
            gzip,
            etag,
            warehouse,
            access: None,
        })
    }

    /// The current metadata location and document (and its gzip form, when known): the head
    /// from the store, the document from the cache when it holds that file.
    pub(crate) async fn load_document(
        &self,
        warehouse: &Warehouse,
        table: &TableIdent,
    ) -> Result<(TabularId, String, Arc<str>, Option<Arc<[u8]>>)> {
        let head = self
            .store()
            .load_tabular_head(&warehouse.id, &table.namespace, &table.name, TabularKind::Table)
            .await?
            .ok_or_else(|| CatalogError::no_such_table(table))?;
        Ok(match self.metadata_cache().get(&head.metadata_location) {
            Some(cached) => (head.id, head.metadata_location, cached.document, cached.gzip),
            None => {
                // The row may have moved on since its head was read: what it holds now is
                // consistent, and current.
                let row = self.load_row(warehouse, table).await?.ok_or_else(|| CatalogError::no_such_table(table))?;
                let document: Arc<str> = row.metadata.into();
                self.metadata_cache().insert_document(&row.metadata_location, &document, row.gzip.clone());
                (row.id, row.metadata_location, document, row.gzip)
            }
        })
    }

    /// Keeps the document of a committed metadata file for later loads.
    pub(crate) fn remember(&self, metadata_location: &str, document: String) -> Arc<str> {
        let document: Arc<str> = document.into();
        self.metadata_cache().insert_document(metadata_location, &document, None);
        document
    }

    /// That the table exists, for a caller holding `privilege` on it (one head lookup).
    async fn require_existing_table(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        table: &TableIdent,
        privilege: Privilege,
    ) -> Result<()> {
        let (warehouse, allowed) =
            self.tabular_with(ctx, prefix, (&table.namespace, &table.name), TabularKind::Table, privilege).await?;
        // The decision was about the table found (a name can change meaning meanwhile).
        let (namespace, name) = (&table.namespace, table.name.as_str());
        let decided = &mut [(privilege, allowed)];
        self.confirmed_head(ctx, &warehouse.id, (namespace, name), TabularKind::Table, decided).await?;
        Ok(())
    }

    /// The tables or views of a namespace the caller may describe, one page: all of them when
    /// it holds a privilege on the namespace, else those it holds something on.
    pub(crate) async fn list_tabulars(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: &NamespaceIdent,
        kind: TabularKind,
        (page_token, page_size): (Option<&str>, Option<i64>),
    ) -> Result<Listing<TableIdent>> {
        let page = page_request(page_token, page_size)?;
        let (warehouse, allowed) = self.namespace_with(ctx, prefix, namespace, Privilege::Describe).await?;
        let page = self.store().list_tabulars(&warehouse.id, namespace, kind, &page, allowed.visible_to()).await?;
        Ok(Listing {
            items: page.items.into_iter().map(|name| TableIdent { namespace: namespace.clone(), name }).collect(),
            next_page_token: page.next_after.as_deref().map(encode_token),
        })
    }
}

impl Tables<'_> {
    /// loadTable with the client's `If-None-Match` values: the table, or that it has not
    /// changed (decided on the ETag alone, before any body is built).
    pub async fn load_unless_current(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        table: &TableIdent,
        mode: SnapshotMode,
        if_none_match: &[&str],
    ) -> Result<Loaded> {
        let result = self.load(ctx, prefix, table, mode).await?;
        Ok(if etag_matches(&result.etag, if_none_match) {
            Loaded::NotModified { etag: result.etag }
        } else {
            Loaded::Table(result)
        })
    }

    /// loadTable, for a caller with `read` on the table; the result carries the access to its
    /// files the caller's privileges give.
    pub async fn load(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        table: &TableIdent,
        mode: SnapshotMode,
    ) -> Result<TableResult> {
        let (warehouse, allowed) = self
            .tabular_with(ctx, prefix, (&table.namespace, &table.name), TabularKind::Table, Privilege::Read)
            .await?;
        let target =
            crate::authorization::tabular_target(&warehouse, &table.namespace, &table.name, TabularKind::Table);
        let mut result = self.current_table(warehouse, table, mode).await?;
        // The decision was about the table read (a name can change meaning meanwhile).
        let object = result.id.clone().unwrap_or_default();
        let missing = || CatalogError::no_such_table(table);
        let changed = || CatalogError::Unavailable(format!("{table} was renamed or replaced while loading; retry"));
        let allowed = ctx.confirm(&target, Privilege::Read, allowed, &object, missing, changed).await?;
        result.access = allowed.file_grant();
        Ok(result)
    }

    pub async fn exists(&self, ctx: &RequestContext, prefix: &WarehouseId, table: &TableIdent) -> Result<()> {
        self.require_existing_table(ctx, prefix, table, Privilege::Describe).await
    }

    /// reportMetrics: accepted from a caller that may read the table, for a table that exists.
    pub async fn report_metrics(&self, ctx: &RequestContext, prefix: &WarehouseId, table: &TableIdent) -> Result<()> {
        self.require_existing_table(ctx, prefix, table, Privilege::Read).await
    }

    pub async fn list(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: &NamespaceIdent,
        page: (Option<&str>, Option<i64>),
    ) -> Result<Listing<TableIdent>> {
        self.list_tabulars(ctx, prefix, namespace, TabularKind::Table, page).await
    }
}

#[cfg(test)]
mod tests {
    use super::etag_matches;

    #[test]
    fn if_none_match_matches_strong_weak_listed_and_any() {
        let etag = "\"abc\"";
        assert!(etag_matches(etag, &["\"abc\""]));
        assert!(etag_matches(etag, &["W/\"abc\""]));
        assert!(etag_matches(etag, &["\"x\", \"abc\""]));
        assert!(etag_matches(etag, &["\"x\"", "*"]));
        assert!(!etag_matches(etag, &["\"abcd\"", "W/\"ab\""]));
        assert!(!etag_matches(etag, &[]));
    }
}
