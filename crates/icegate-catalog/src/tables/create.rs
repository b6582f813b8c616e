//! createTable and stage-create: version 0 of a table's metadata, its file and its row.

use super::Tables;
use crate::ident::NamespaceIdent;
use iceberg::spec::{FormatVersion, TableMetadata, TableMetadataBuilder};

use super::metadata_files::{etag, location_inside, metadata_file_location, table_locations, to_json};
use super::{CreateTable, PROPERTY_FORMAT_VERSION, SnapshotMode, TableIdent, TableResult};
use crate::access::Privilege;
use crate::commit::not_committed;
use crate::context::FileGrant;
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::service::Catalog;
use crate::store::{TabularKind, Warehouse};

/// How long a staged create's locations stay reserved when the warehouse vends no credentials
/// (a file warehouse): long enough for its client to write the table's first files and commit.
const STAGED_WITHOUT_CREDENTIALS_SECONDS: u64 = 900;

impl Catalog {
    /// Writes version 0 of a new table's metadata and inserts its row; the file goes again if
    /// the insert fails. The result carries `grant`, the access to its files the creator's
    /// decision gave.
    pub(crate) async fn persist_new_table(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        table: &TableIdent,
        (metadata, metadata_json): (&TableMetadata, String),
        grant: Option<FileGrant>,
    ) -> Result<TableResult> {
        let (location, extra_locations) = table_locations(warehouse, metadata)?;
        self.check_size("document", metadata_json.len())?;
        // Before the file is written: no file lands in another table's directory.
        let all: Vec<String> = std::iter::once(location.clone()).chain(extra_locations.iter().cloned()).collect();
        self.store()
            .check_locations_free(&ctx.write(), &warehouse.id, (&table.namespace, &table.name), &all, None)
            .await?;
        let metadata_location = metadata_file_location(metadata, None);
        if let Err(err) =
            self.files().write_new(warehouse, &metadata_location, bytes::Bytes::from(metadata_json.clone())).await
        {
            self.delete_in_background(warehouse, vec![metadata_location]);
            return Err(not_committed(err));
        }
        let created = self
            .store()
            .create_tabular(
                &ctx.write(),
                &table.new_row(
                    TabularKind::Table,
                    warehouse,
                    &location,
                    &extra_locations,
                    &metadata_location,
                    &metadata_json,
                ),
            )
            .await;
        let id = match created {
            Ok(id) => id,
            // The row may yet be created, pointing at the file: it stays.
            Err(err @ CatalogError::CommitStateUnknown(_)) => return Err(err),
            Err(err) => {
                self.delete_quietly(warehouse, &metadata_location).await;
                return Err(err);
            }
        };
        let etag = etag(&metadata_location, SnapshotMode::All);
        Ok(TableResult {
            id: Some(id),
            gzip: None,
            metadata_json: self.remember(&metadata_location, metadata_json),
            metadata_location: Some(metadata_location),
            etag,
            warehouse: warehouse.clone(),
            access: grant,
        })
    }
}

impl Tables<'_> {
    /// createTable, or stage-create when `request.stage_create`.
    pub async fn create(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: &NamespaceIdent,
        request: CreateTable,
    ) -> Result<TableResult> {
        let table = TableIdent::new(namespace.clone(), &request.name)?;
        let (warehouse, allowed) = self.namespace_with(ctx, prefix, &table.namespace, Privilege::Create).await?;
        if !self.store().namespace_exists(&warehouse.id, &table.namespace).await? {
            return Err(CatalogError::no_such_namespace(&table.namespace));
        }
        let location = match &request.location {
            Some(location) => location_inside(warehouse.storage_root.as_str(), location)?,
            None => Catalog::default_location(&warehouse, &table)?,
        };
        let mut properties = request.properties;
        let format_version = match properties.remove(PROPERTY_FORMAT_VERSION).as_deref() {
            None => FormatVersion::V2,
            Some("1") => FormatVersion::V1,
            Some("2") => FormatVersion::V2,
            Some("3") => FormatVersion::V3,
            Some(other) => return Err(CatalogError::bad_request(format!("unsupported format-version {other}"))),
        };
        // Authorized: the schema is walked against the limits, room for what it builds is
        // taken in the commit budget, and only then is it built.
        let limits = self.schema_limits();
        let cost = request.schema.cost(limits)?;
        let property_bytes: usize = properties.iter().map(|(k, v)| k.len() + v.len()).sum();
        let request_bytes = request.schema.json_bytes() + property_bytes;
        let _room =
            self.reserve_room(ctx, crate::commit_budget::held_by(0, 0, request_bytes, cost.build_bytes())).await?;
        let schema = request.schema.into_built(limits)?;
        // Numbered afresh as the reference numbers a new table (see `fresh_ids`).
        let fresh_ids = super::fresh_ids::reference_ids(&schema);
        let creation = iceberg::TableCreation::builder()
            .name(table.name.clone())
            .location(location.clone())
            .schema(schema)
            .partition_spec_opt(request.partition_spec)
            .sort_order_opt(request.write_order)
            .properties(properties)
            .format_version(format_version)
            .build();
        let metadata = TableMetadataBuilder::from_table_creation(creation)?.build()?.metadata;
        let metadata = super::fresh_ids::renumber(metadata, &fresh_ids)?;
        let metadata_json = to_json(&metadata)?;
        let (base, extra) = table_locations(&warehouse, &metadata)?;
        let all: Vec<String> = std::iter::once(base).chain(extra).collect();
        self.check_placement(ctx, &warehouse, &table.namespace, &all).await?;
        if request.stage_create {
            // A table or view of that name exists: the staged create could never commit (and
            // must not reserve locations under its name).
            for kind in [TabularKind::Table, TabularKind::View] {
                let found = self.store().load_tabular_head(&warehouse.id, &table.namespace, &table.name, kind).await?;
                if found.is_some() {
                    return Err(CatalogError::AlreadyExists(format!("Table already exists: {table}")));
                }
            }
            // Nothing is stored yet, but the client is handed credentials for the table's
            // locations: they must pass every rule a create does, before anything is vended.
            // The commit that creates the table checks them again, atomically with its insert.
            let until = self.credentials_valid_until(&warehouse, STAGED_WITHOUT_CREDENTIALS_SECONDS);
            self.store()
                .reserve_locations(&ctx.write(), &warehouse.id, &table.namespace, &table.name, &all, until)
                .await?;
            let etag = etag(&format!("staged:{}", metadata.uuid()), SnapshotMode::All);
            return Ok(TableResult {
                id: None,
                metadata_location: None,
                metadata_json: metadata_json.into(),
                gzip: None,
                etag,
                warehouse,
                access: allowed.file_grant(),
            });
        }
        let (catalog, ctx, grant) = (self.catalog.clone(), ctx.clone(), allowed.file_grant());
        crate::detach::run_to_completion(async move {
            catalog.persist_new_table(&ctx, &warehouse, &table, (&metadata, metadata_json), grant).await
        })
        .await?
    }
}
