//! Tables: create (and stage-create), load, commit, drop (and purge), rename, register, list.
//!
//! Metadata semantics come from the `iceberg` crate (`TableMetadataBuilder`,
//! `TableUpdate::apply`, `TableRequirement::check`). A commit writes the new metadata file first,
//! then compare-and-swaps the table row; the loser of a race deletes its file and, when its
//! requirements still hold against the winner's metadata, re-applies its updates (as the Java
//! reference server does) or else gets 409.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use iceberg::spec::{FormatVersion, Schema, SortOrder, TableMetadata, TableMetadataBuilder, UnboundPartitionSpec};
use iceberg::{TableRequirement, TableUpdate};
use sha2::{Digest, Sha256};

use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::{NamespaceIdent, validate_name};
use crate::metadata_cache::Cached;
use crate::pagination::{encode_token, page_request};
use crate::service::{Catalog, Listing};
use crate::storage::TableLocations;
use crate::store::{MetadataSwap, NewTabular, SwapOutcome, Tabular, TabularHead, TabularKind, Warehouse};

/// How often a commit that lost a race is re-applied on the new metadata before giving up
/// with 409.
const MAX_COMMIT_ATTEMPTS: usize = 16;
const PROPERTY_FORMAT_VERSION: &str = "format-version";
const PROPERTY_METADATA_PATH: &str = "write.metadata.path";
const PROPERTY_DATA_PATH: &str = "write.data.path";
const PROPERTY_DELETE_AFTER_COMMIT: &str = "write.metadata.delete-after-commit.enabled";

/// A table name within a namespace, validated for use in a storage path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableIdent {
    pub namespace: NamespaceIdent,
    pub name: String,
}

impl TableIdent {
    pub fn parse(namespace: &str, name: &str) -> Result<Self> {
        Self::new(NamespaceIdent::parse_encoded(namespace)?, name)
    }

    pub fn new(namespace: NamespaceIdent, name: &str) -> Result<Self> {
        validate_name("table", name)?;
        Ok(Self { namespace, name: name.to_owned() })
    }
}

impl std::fmt::Display for TableIdent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.namespace, self.name)
    }
}

/// A createTable request, already deserialised into `iceberg` types.
#[derive(Debug)]
pub struct CreateTable {
    pub name: String,
    pub location: Option<String>,
    pub schema: Schema,
    pub partition_spec: Option<UnboundPartitionSpec>,
    pub write_order: Option<SortOrder>,
    pub properties: HashMap<String, String>,
    pub stage_create: bool,
}

/// One table's requirements and updates in a commit.
#[derive(Debug, Clone)]
pub struct TableChange {
    pub table: TableIdent,
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
}

/// Which snapshots a loadTable response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnapshotMode {
    #[default]
    All,
    /// Only snapshots that a branch or tag references.
    Refs,
}

/// A table as the REST API returns it.
#[derive(Debug, Clone)]
pub struct TableResult {
    /// The table's id; `None` for a staged (not yet created) table.
    pub id: Option<String>,
    /// `None` for a staged (not yet created) table.
    pub metadata_location: Option<String>,
    /// The metadata JSON, verbatim as stored (no re-serialisation on the hot path).
    pub metadata_json: Arc<str>,
    pub etag: String,
    /// The warehouse the table lives in (for credential vending).
    pub warehouse: Warehouse,
}

impl TableResult {
    /// The table's locations, read from its metadata (base location, `write.data.path`,
    /// `write.metadata.path`). Every commit validated them against the warehouse.
    pub fn locations(&self) -> Result<TableLocations> {
        #[derive(serde::Deserialize)]
        struct Locations {
            location: String,
            #[serde(default)]
            properties: HashMap<String, String>,
        }
        let parsed: Locations = serde_json::from_str(&self.metadata_json)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored metadata lacks a location: {e}")))?;
        Ok(TableLocations::new(std::iter::once(parsed.location).chain(
            [PROPERTY_DATA_PATH, PROPERTY_METADATA_PATH].iter().filter_map(|k| parsed.properties.get(*k).cloned()),
        )))
    }
}

/// A storage failure before the swap: say that nothing changed, so the client may retry.
fn not_committed(err: CatalogError) -> CatalogError {
    match err {
        CatalogError::Unavailable(message) => {
            CatalogError::Unavailable(format!("{message}; nothing was committed, the request can be retried"))
        }
        other => other,
    }
}

/// The locations outside `base` that the metadata's write paths add (no validation).
fn extra_locations_of(base: &str, metadata: &TableMetadata) -> Vec<String> {
    let props = [PROPERTY_DATA_PATH, PROPERTY_METADATA_PATH].into_iter().filter_map(|k| metadata.properties().get(k));
    let all = TableLocations::new(std::iter::once(base.to_owned()).chain(props.cloned()));
    all.as_slice().iter().filter(|l| *l != base).cloned().collect()
}

/// A table's base location and the locations outside it that its properties make it write to,
/// each checked to lie inside the warehouse's storage root. (Overlaps with other tables are
/// checked by the store, atomically with the write.)
fn table_locations(warehouse: &Warehouse, metadata: &TableMetadata) -> Result<(String, Vec<String>)> {
    let root = warehouse.storage_root.as_str();
    let base = location_inside(root, metadata.location())?;
    for key in [PROPERTY_DATA_PATH, PROPERTY_METADATA_PATH] {
        if let Some(path) = metadata.properties().get(key) {
            location_inside(root, path).map_err(|_| {
                CatalogError::bad_request(format!("{key} {path} must lie inside the warehouse's storage root {root}"))
            })?;
        }
    }
    let extra = extra_locations_of(&base, metadata);
    Ok((base, extra))
}

fn etag(metadata_location: &str, mode: SnapshotMode) -> String {
    let mut hasher = Sha256::new();
    hasher.update(metadata_location.as_bytes());
    hasher.update(if mode == SnapshotMode::All { b"|all" } else { b"|ref" });
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Parses the stored metadata document of the table or view with id `id` (it was written by
/// us, so a failure is internal).
fn parse_stored(id: &str, document: &str) -> Result<TableMetadata> {
    serde_json::from_str(document)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored metadata of {id} is invalid: {e}")))
}

/// A metadata file's JSON: its bytes, or their gzip decompression, at most `max_bytes` of it
/// (a small compressed file can expand a thousandfold; reading stops at the limit).
pub(crate) fn metadata_file_json(location: &str, bytes: Vec<u8>, max_bytes: u64) -> Result<Vec<u8>> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut text)
        .map_err(|e| CatalogError::bad_request(format!("invalid metadata file {location}: {e}")))?;
    if text.len() as u64 > max_bytes {
        return Err(too_large(location, max_bytes));
    }
    Ok(text)
}

/// The error for a metadata document over `catalog.max_metadata_bytes`.
pub(crate) fn too_large(what: &str, max_bytes: u64) -> CatalogError {
    CatalogError::bad_request(format!(
        "metadata {what} is larger than {max_bytes} bytes, the catalog's limit (catalog.max_metadata_bytes)"
    ))
}

/// Parses a metadata file's bytes (plain or gzip-compressed JSON, bounded by `max_bytes`).
fn parse_metadata_file(location: &str, bytes: Vec<u8>, max_bytes: u64) -> Result<TableMetadata> {
    let json = metadata_file_json(location, bytes, max_bytes)?;
    serde_json::from_slice(&json)
        .map_err(|e| CatalogError::bad_request(format!("invalid table metadata file {location}: {e}")))
}

/// Whether a file name is one of a metadata file (the only kind a metadata clean-up deletes).
fn is_metadata_file(location: &str) -> bool {
    let name = location.rsplit('/').next().unwrap_or_default();
    name.ends_with(".metadata.json") || name.ends_with(".metadata.json.gz")
}

fn to_json(metadata: &TableMetadata) -> Result<String> {
    serde_json::to_string(metadata).map_err(|e| CatalogError::Internal(anyhow::anyhow!("serialising metadata: {e}")))
}

/// A location with its trailing slashes removed, checked to lie strictly inside `root`.
pub(crate) fn location_inside(root: &str, location: &str) -> Result<String> {
    let trimmed = location.trim_end_matches('/');
    let inside = trimmed.strip_prefix(root).is_some_and(|rest| rest.starts_with('/') && rest.len() > 1);
    let rest = trimmed.strip_prefix(root).unwrap_or("");
    if !inside
        || rest[1..].split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..")
        || trimmed.chars().any(char::is_control)
    {
        return Err(CatalogError::bad_request(format!(
            "location {location} must lie inside the warehouse's storage root {root}"
        )));
    }
    Ok(trimmed.to_owned())
}

/// `<metadata dir>/<NNNNN>-<uuid>.metadata.json` for the version after `previous` (or 0).
fn metadata_file_location(metadata: &TableMetadata, previous: Option<&str>) -> String {
    let dir = metadata
        .properties()
        .get(PROPERTY_METADATA_PATH)
        .map(|p| p.trim_end_matches('/').to_owned())
        .unwrap_or_else(|| format!("{}/metadata", metadata.location().trim_end_matches('/')));
    let version = match previous {
        None => 0,
        Some(previous) => {
            let file = previous.rsplit('/').next().unwrap_or("");
            let digits: String = file.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u64>().map_or(metadata.metadata_log().len() as u64, |v| v + 1)
        }
    };
    format!("{dir}/{version:05}-{}.metadata.json", uuid::Uuid::new_v4())
}

/// Drops snapshots no branch or tag references (the `snapshots=refs` representation).
fn referenced_snapshots_only(metadata_json: &str) -> Result<String> {
    let mut value: serde_json::Value = serde_json::from_str(metadata_json)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored metadata is invalid: {e}")))?;
    let mut keep: std::collections::HashSet<i64> = value["refs"]
        .as_object()
        .map(|refs| refs.values().filter_map(|r| r["snapshot-id"].as_i64()).collect())
        .unwrap_or_default();
    if let Some(current) = value["current-snapshot-id"].as_i64() {
        keep.insert(current);
    }
    if let Some(snapshots) = value.get_mut("snapshots").and_then(|s| s.as_array_mut()) {
        snapshots.retain(|s| s["snapshot-id"].as_i64().is_some_and(|id| keep.contains(&id)));
    }
    Ok(value.to_string())
}

impl Catalog {
    async fn load_row(&self, warehouse: &Warehouse, table: &TableIdent) -> Result<Option<Tabular>> {
        self.store().load_tabular(&warehouse.id, &table.namespace, &table.name, TabularKind::Table).await
    }

    fn default_location(warehouse: &Warehouse, table: &TableIdent) -> String {
        format!(
            "{}/{}/{}-{}",
            warehouse.storage_root.as_str(),
            table.namespace.levels().join("/"),
            table.name,
            uuid::Uuid::new_v4().simple()
        )
    }

    /// The directory of a namespace's tables and views: where their default locations go.
    pub(crate) fn namespace_dir(warehouse: &Warehouse, namespace: &NamespaceIdent) -> String {
        format!("{}/{}", warehouse.storage_root.as_str(), namespace.levels().join("/"))
    }

    /// A table's or view's locations lie strictly inside its namespace's directory, unless the
    /// caller administers the warehouse (adopting or registering tables where they already are
    /// is an operator's decision). Otherwise a principal with `create` in one namespace could
    /// claim another namespace's directory, where later tables are created by default, and hold
    /// credentials for their files; or block that namespace's creates.
    pub(crate) async fn check_placement(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        namespace: &NamespaceIdent,
        locations: &[String],
    ) -> Result<()> {
        let dir = Self::namespace_dir(warehouse, namespace);
        let inside =
            |l: &String| l.strip_prefix(dir.as_str()).is_some_and(|rest| rest.starts_with('/') && rest.len() > 1);
        let Some(outside) = locations.iter().find(|l| !inside(l)) else { return Ok(()) };
        let target = Target::Warehouse { warehouse_id: warehouse.id.clone() };
        match ctx.require(&target, Privilege::Admin, || CatalogError::Forbidden(String::new())).await {
            Ok(_) => Ok(()),
            Err(CatalogError::Forbidden(_) | CatalogError::NotFound { .. }) => Err(CatalogError::Forbidden(format!(
                "{outside} lies outside the directory of namespace {namespace} ({dir}); placing tables and views \
                 elsewhere in the warehouse needs admin on the warehouse"
            ))),
            Err(other) => Err(other),
        }
    }

    /// createTable, or stage-create when `request.stage_create`.
    pub async fn create_table(
        &self,
        ctx: &RequestContext,
        prefix: &str,
        namespace: &str,
        request: CreateTable,
    ) -> Result<TableResult> {
        let table = TableIdent::parse(namespace, &request.name)?;
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        if !self.store().namespace_exists(&warehouse.id, &table.namespace).await? {
            return Err(CatalogError::no_such_namespace(&table.namespace));
        }
        let location = match &request.location {
            Some(location) => location_inside(warehouse.storage_root.as_str(), location)?,
            None => Self::default_location(&warehouse, &table),
        };
        let mut properties = request.properties;
        let format_version = match properties.remove(PROPERTY_FORMAT_VERSION).as_deref() {
            None => FormatVersion::V2,
            Some("1") => FormatVersion::V1,
            Some("2") => FormatVersion::V2,
            Some("3") => FormatVersion::V3,
            Some(other) => return Err(CatalogError::bad_request(format!("unsupported format-version {other}"))),
        };
        let creation = iceberg::TableCreation::builder()
            .name(table.name.clone())
            .location(location.clone())
            .schema(request.schema)
            .partition_spec_opt(request.partition_spec)
            .sort_order_opt(request.write_order)
            .properties(properties)
            .format_version(format_version)
            .build();
        let metadata = TableMetadataBuilder::from_table_creation(creation)?.build()?.metadata;
        let metadata_json = to_json(&metadata)?;
        let (base, extra) = table_locations(&warehouse, &metadata)?;
        let all: Vec<String> = std::iter::once(base).chain(extra).collect();
        self.check_placement(ctx, &warehouse, &table.namespace, &all).await?;
        if request.stage_create {
            // Nothing is stored yet, but the client is handed credentials for the table's
            // locations: they must pass every rule a create does, before anything is vended.
            // The commit that creates the table checks them again, atomically with its insert.
            self.store().check_locations_free(&warehouse.id, &all, None).await?;
            let etag = etag(&format!("staged:{}", metadata.uuid()), SnapshotMode::All);
            return Ok(TableResult {
                id: None,
                metadata_location: None,
                metadata_json: metadata_json.into(),
                etag,
                warehouse,
            });
        }
        let catalog = self.clone();
        crate::idempotency::detached(async move {
            catalog.persist_new_table(&warehouse, &table, &metadata, metadata_json).await
        })
        .await?
    }

    /// Writes version 0 of a new table's metadata and inserts its row; the file goes again if
    /// the insert fails.
    async fn persist_new_table(
        &self,
        warehouse: &Warehouse,
        table: &TableIdent,
        metadata: &TableMetadata,
        metadata_json: String,
    ) -> Result<TableResult> {
        let (location, extra_locations) = table_locations(warehouse, metadata)?;
        self.check_size("document", metadata_json.len())?;
        // Before the file is written: no file lands in another table's directory.
        let all: Vec<String> = std::iter::once(location.clone()).chain(extra_locations.iter().cloned()).collect();
        self.store().check_locations_free(&warehouse.id, &all, None).await?;
        let metadata_location = metadata_file_location(metadata, None);
        if let Err(err) =
            self.files().write_new(warehouse, &metadata_location, metadata_json.clone().into_bytes()).await
        {
            self.delete_in_background(warehouse, vec![metadata_location]);
            return Err(not_committed(err));
        }
        let created = self
            .store()
            .create_tabular(&NewTabular {
                warehouse_id: &warehouse.id,
                namespace: &table.namespace,
                name: &table.name,
                kind: TabularKind::Table,
                location: &location,
                extra_locations: &extra_locations,
                metadata_location: &metadata_location,
                metadata: &metadata_json,
            })
            .await;
        let id = match created {
            Ok(id) => id,
            Err(err) => {
                self.delete_quietly(warehouse, &metadata_location).await;
                return Err(err);
            }
        };
        let etag = etag(&metadata_location, SnapshotMode::All);
        Ok(TableResult {
            id: Some(id),
            metadata_json: self.remember(&metadata_location, metadata_json),
            metadata_location: Some(metadata_location),
            etag,
            warehouse: warehouse.clone(),
        })
    }

    /// Removes files that no table references, without making the caller wait for storage.
    fn delete_in_background(&self, warehouse: &Warehouse, locations: Vec<String>) {
        let (catalog, warehouse) = (self.clone(), warehouse.clone());
        tokio::spawn(async move {
            for location in locations {
                catalog.delete_quietly(&warehouse, &location).await;
            }
        });
    }

    async fn delete_quietly(&self, warehouse: &Warehouse, location: &str) {
        if let Err(err) = self.files().delete(warehouse, location).await {
            tracing::warn!(%location, error = %err, "could not remove an unused metadata file");
        }
    }

    /// loadTable. Reads the database only: the metadata JSON is kept beside its location.
    pub async fn load_table(
        &self,
        prefix: &str,
        namespace: &str,
        name: &str,
        mode: SnapshotMode,
    ) -> Result<TableResult> {
        let table = TableIdent::parse(namespace, name)?;
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let (id, metadata_location, document) = if self.metadata_cache().mostly_misses() {
            // Loads spread over more tables than the cache holds (or no cache): one query for
            // the whole row beats a head query followed by a row query.
            let row = self.load_row(&warehouse, &table).await?.ok_or_else(|| CatalogError::no_such_table(&table))?;
            let cache = self.metadata_cache();
            cache.observe(&row.metadata_location);
            let document: Arc<str> = row.metadata.into();
            if cache.admit() {
                cache.insert(&row.metadata_location, &document, None);
            }
            (row.id, row.metadata_location, document)
        } else {
            self.load_document(&warehouse, &table).await?
        };
        let etag = etag(&metadata_location, mode);
        let metadata_json = match mode {
            SnapshotMode::All => document,
            SnapshotMode::Refs => referenced_snapshots_only(&document)?.into(),
        };
        Ok(TableResult { id: Some(id), metadata_location: Some(metadata_location), metadata_json, etag, warehouse })
    }

    /// The current metadata location and document: the head from the store, the document from
    /// the cache when it holds that file.
    async fn load_document(&self, warehouse: &Warehouse, table: &TableIdent) -> Result<(String, String, Arc<str>)> {
        let head = self
            .store()
            .load_tabular_head(&warehouse.id, &table.namespace, &table.name, TabularKind::Table)
            .await?
            .ok_or_else(|| CatalogError::no_such_table(table))?;
        Ok(match self.metadata_cache().get(&head.metadata_location) {
            Some(cached) => (head.id, head.metadata_location, cached.document),
            None => {
                // The row may have moved on since its head was read: what it holds now is
                // consistent, and current.
                let row = self.load_row(warehouse, table).await?.ok_or_else(|| CatalogError::no_such_table(table))?;
                let document = self.remember(&row.metadata_location, row.metadata);
                (row.id, row.metadata_location, document)
            }
        })
    }

    /// Keeps the document of a committed metadata file for later loads.
    fn remember(&self, metadata_location: &str, document: String) -> Arc<str> {
        let document: Arc<str> = document.into();
        self.metadata_cache().insert(metadata_location, &document, None);
        document
    }

    /// A table's current state, for a commit to build on: its head from the database and its
    /// parsed metadata, from memory when a commit or load has seen that metadata file already.
    async fn load_current(&self, warehouse: &Warehouse, table: &TableIdent) -> Result<Option<Current>> {
        let head =
            self.store().load_tabular_head(&warehouse.id, &table.namespace, &table.name, TabularKind::Table).await?;
        let Some(head) = head else { return Ok(None) };
        let (head, document) = match self.metadata_cache().get(&head.metadata_location) {
            Some(Cached { document, parsed: Some(metadata) }) => return Ok(Some(Current { head, document, metadata })),
            // A load cached the document: parse it rather than read the row again.
            Some(Cached { document, parsed: None }) => (head, document),
            None => {
                let Some(row) = self.load_row(warehouse, table).await? else { return Ok(None) };
                let head = TabularHead { id: row.id, location: row.location, metadata_location: row.metadata_location };
                (head, Arc::from(row.metadata))
            }
        };
        let metadata = Arc::new(parse_stored(&head.id, &document)?);
        self.metadata_cache().insert(&head.metadata_location, &document, Some(&metadata));
        Ok(Some(Current { head, document, metadata }))
    }

    pub async fn table_exists(&self, prefix: &str, namespace: &str, name: &str) -> Result<()> {
        let table = TableIdent::parse(namespace, name)?;
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        match self.store().load_tabular_head(&warehouse.id, &table.namespace, &table.name, TabularKind::Table).await? {
            Some(_) => Ok(()),
            None => Err(CatalogError::no_such_table(&table)),
        }
    }

    pub async fn list_tables(
        &self,
        prefix: &str,
        namespace: &str,
        page_token: Option<&str>,
        page_size: Option<i64>,
        visible_to: Option<&str>,
    ) -> Result<Listing<TableIdent>> {
        self.list_tabulars(prefix, namespace, TabularKind::Table, page_token, page_size, visible_to).await
    }

    /// The tables or views of a namespace, one page.
    pub(crate) async fn list_tabulars(
        &self,
        prefix: &str,
        namespace: &str,
        kind: TabularKind,
        page_token: Option<&str>,
        page_size: Option<i64>,
        visible_to: Option<&str>,
    ) -> Result<Listing<TableIdent>> {
        let namespace = NamespaceIdent::parse_encoded(namespace)?;
        let page = page_request(page_token, page_size)?;
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let page = self.store().list_tabulars(&warehouse.id, &namespace, kind, &page, visible_to).await?;
        Ok(Listing {
            items: page.items.into_iter().map(|name| TableIdent { namespace: namespace.clone(), name }).collect(),
            next_page_token: page.next_after.as_deref().map(encode_token),
        })
    }

    /// dropTable; with `purge`, every file below the table's location goes too (and nothing
    /// outside it).
    pub async fn drop_table(&self, prefix: &str, namespace: &str, name: &str, purge: bool) -> Result<()> {
        let table = TableIdent::parse(namespace, name)?;
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let dropped = self
            .store()
            .drop_tabular(&warehouse.id, &table.namespace, &table.name, TabularKind::Table)
            .await?
            .ok_or_else(|| CatalogError::no_such_table(&table))?;
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

    /// renameTable and renameView: moves a table or view, possibly to another namespace.
    ///
    /// Needs `drop` on it and `create` in the target namespace. Into another namespace, it also
    /// needs `read` on it (a move is a copy of what the mover can read), and the mover must
    /// already hold on it every privilege the target namespace would confer on it there: a move
    /// never widens the mover's own access (`drop` plus `admin` on one's own namespace would
    /// otherwise be full control of any table one may drop).
    pub async fn rename_tabular(
        &self,
        ctx: &RequestContext,
        prefix: &str,
        kind: TabularKind,
        from: TableIdent,
        to: TableIdent,
    ) -> Result<()> {
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let source = Target::Tabular {
            warehouse_id: warehouse.id.clone(),
            namespace: from.namespace.clone(),
            name: from.name.clone(),
            kind,
        };
        let missing = || match kind {
            TabularKind::Table => CatalogError::no_such_table(&from),
            TabularKind::View => CatalogError::no_such_view(&from),
        };
        let held = ctx.require(&source, Privilege::Drop, missing).await?;
        let target = Target::Namespace { warehouse_id: warehouse.id.clone(), namespace: to.namespace.clone() };
        let conferred =
            ctx.require(&target, Privilege::Create, || CatalogError::no_such_namespace(&to.namespace)).await?;
        if from.namespace != to.namespace {
            ctx.require(&source, Privilege::Read, missing).await?;
            if let (Some(held), Some(conferred)) = (held, conferred) {
                let mut widened: Vec<Privilege> = conferred
                    .direct
                    .iter()
                    .copied()
                    .filter(|p| !matches!(p, Privilege::Describe | Privilege::Create) && !held.has(*p))
                    .collect();
                widened.sort();
                if let Some(privilege) = widened.first() {
                    return Err(CatalogError::Forbidden(format!(
                        "moving {from} into {} would give you {privilege} on it, which you do not hold on it now",
                        to.namespace
                    )));
                }
            }
        }
        self.store().rename_tabular(&warehouse.id, kind, (&from.namespace, &from.name), (&to.namespace, &to.name)).await
    }

    /// registerTable: adopts an existing metadata file; with `overwrite`, repoints an existing
    /// table at it.
    pub async fn register_table(
        &self,
        ctx: &RequestContext,
        prefix: &str,
        namespace: &str,
        name: &str,
        metadata_location: &str,
        overwrite: bool,
    ) -> Result<TableResult> {
        let table = TableIdent::parse(namespace, name)?;
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let root = warehouse.storage_root.as_str();
        location_inside(root, metadata_location)?;
        // Where the caller may place the table, before anything is read with the server's
        // identity (what a file elsewhere holds, or whether it exists, is not the caller's to learn).
        self.check_placement(ctx, &warehouse, &table.namespace, &[metadata_location.to_owned()]).await?;
        let bytes = self.files().read(&warehouse, metadata_location, self.max_metadata_bytes()).await?;
        let metadata = parse_metadata_file(metadata_location, bytes, self.max_metadata_bytes())?;
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
        if overwrite && let Some(existing) = self.load_row(&warehouse, &table).await? {
            // Replacing a table's metadata is replacing the table: `write` and `drop` on it.
            let target = Target::Tabular {
                warehouse_id: warehouse.id.clone(),
                namespace: table.namespace.clone(),
                name: table.name.clone(),
                kind: TabularKind::Table,
            };
            for privilege in [Privilege::Write, Privilege::Drop] {
                ctx.require(&target, privilege, || {
                    CatalogError::AlreadyExists(format!("Table already exists: {table}"))
                })
                .await?;
            }
            let swap = MetadataSwap {
                id: existing.id.clone(),
                warehouse_id: warehouse.id.clone(),
                expected_metadata_location: existing.metadata_location.clone(),
                metadata_location: metadata_location.to_owned(),
                metadata: metadata_json.clone(),
                location: location.clone(),
                extra_locations,
                locations_changed: true,
            };
            return match self.store().swap_metadata(&[swap]).await? {
                SwapOutcome::Applied => Ok(TableResult {
                    id: Some(existing.id),
                    metadata_location: Some(metadata_location.to_owned()),
                    etag: etag(metadata_location, SnapshotMode::All),
                    metadata_json: self.remember(metadata_location, metadata_json),
                    warehouse,
                }),
                SwapOutcome::Conflict(_) => {
                    Err(CatalogError::CommitFailed(format!("{table} changed while it was being registered; retry")))
                }
            };
        }
        let id = self
            .store()
            .create_tabular(&NewTabular {
                warehouse_id: &warehouse.id,
                namespace: &table.namespace,
                name: &table.name,
                kind: TabularKind::Table,
                location: &location,
                extra_locations: &extra_locations,
                metadata_location,
                metadata: &metadata_json,
            })
            .await?;
        Ok(TableResult {
            id: Some(id),
            metadata_location: Some(metadata_location.to_owned()),
            etag: etag(metadata_location, SnapshotMode::All),
            metadata_json: self.remember(metadata_location, metadata_json),
            warehouse,
        })
    }

    /// updateTable: one table's commit. It runs to completion on its own task even if the
    /// request goes away, so no metadata file is left behind half way.
    pub async fn commit_table(&self, ctx: &RequestContext, prefix: &str, change: TableChange) -> Result<TableResult> {
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let (catalog, ctx) = (self.clone(), ctx.clone());
        let mut results =
            crate::idempotency::detached(async move { catalog.commit(&ctx, &warehouse, vec![change], false).await })
                .await??;
        Ok(results.remove(0))
    }

    /// commitTransaction: every table's changes, atomically.
    pub async fn commit_transaction(
        &self,
        ctx: &RequestContext,
        prefix: &str,
        changes: Vec<TableChange>,
    ) -> Result<()> {
        if changes.is_empty() {
            return Err(CatalogError::bad_request("a transaction needs at least one table change"));
        }
        let mut seen = std::collections::HashSet::new();
        for change in &changes {
            if !seen.insert((change.table.namespace.clone(), change.table.name.clone())) {
                return Err(CatalogError::bad_request(format!("{} appears twice in the transaction", change.table)));
            }
        }
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let (catalog, ctx) = (self.clone(), ctx.clone());
        crate::idempotency::detached(async move { catalog.commit(&ctx, &warehouse, changes, true).await })
            .await?
            .map(|_| ())
    }

    /// Commits `changes`. What it needs is decided here, on the tables it finds: `write` on
    /// each existing table, and `create` in the namespace when a change creates one.
    async fn commit(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        changes: Vec<TableChange>,
        transaction: bool,
    ) -> Result<Vec<TableResult>> {
        for attempt in 0..MAX_COMMIT_ATTEMPTS {
            let mut staged = Vec::with_capacity(changes.len());
            let mut creates = Vec::new();
            for change in &changes {
                let current = self.load_current(warehouse, &change.table).await?;
                let target = Target::Tabular {
                    warehouse_id: warehouse.id.clone(),
                    namespace: change.table.namespace.clone(),
                    name: change.table.name.clone(),
                    kind: TabularKind::Table,
                };
                if current.is_none() {
                    // A table the caller may not see is answered like a missing one, before
                    // anything else is said about it.
                    ctx.require(&target, Privilege::Describe, || CatalogError::no_such_table(&change.table)).await?;
                }
                match current {
                    None if change.requirements.contains(&TableRequirement::NotExist) => {
                        if transaction {
                            return Err(CatalogError::bad_request(
                                "creating a table (assert-create) inside commitTransaction is not supported; \
                                 commit the create on its own first",
                            ));
                        }
                        let namespace = &change.table.namespace;
                        let target =
                            Target::Namespace { warehouse_id: warehouse.id.clone(), namespace: namespace.clone() };
                        ctx.require(&target, Privilege::Create, || CatalogError::no_such_namespace(namespace)).await?;
                        creates.push(change);
                    }
                    None => return Err(CatalogError::no_such_table(&change.table)),
                    Some(current) => {
                        ctx.require(&target, Privilege::Write, || CatalogError::no_such_table(&change.table)).await?;
                        staged.push(self.stage_change(warehouse, change, current)?)
                    }
                }
            }
            if let Some(change) = creates.first() {
                return Ok(vec![self.create_from_updates(ctx, warehouse, change).await?]);
            }
            // Tables without updates write nothing (an empty update list is a no-op read).
            let writes: Vec<(&TableIdent, &MetadataSwap)> =
                staged.iter().filter_map(|s| s.swap.as_ref().map(|swap| (&s.table, swap))).collect();
            // A commit that moves a table's files is checked before its metadata file is
            // written (which could land in another table's directory); the swap checks again.
            for commit in staged.iter().filter(|s| !s.new_locations.is_empty()) {
                self.check_placement(ctx, warehouse, &commit.table.namespace, &commit.new_locations).await?;
            }
            for (_, swap) in writes.iter().filter(|(_, swap)| swap.locations_changed) {
                let all: Vec<String> =
                    std::iter::once(swap.location.clone()).chain(swap.extra_locations.iter().cloned()).collect();
                self.store().check_locations_free(&warehouse.id, &all, Some(&swap.id)).await?;
            }
            for (index, (_, swap)) in writes.iter().enumerate() {
                if let Err(err) =
                    self.files().write_new(warehouse, &swap.metadata_location, swap.metadata.clone().into_bytes()).await
                {
                    // The failed write itself may still land (a timed-out request the store
                    // completes later): its file goes too, in the background.
                    let unused: Vec<String> =
                        writes[..=index].iter().map(|(_, written)| written.metadata_location.clone()).collect();
                    self.delete_in_background(warehouse, unused);
                    return Err(not_committed(err));
                }
            }
            let swaps: Vec<MetadataSwap> = writes.iter().map(|(_, swap)| (*swap).clone()).collect();
            let outcome =
                if swaps.is_empty() { Ok(SwapOutcome::Applied) } else { self.store().swap_metadata(&swaps).await };
            match outcome {
                Ok(SwapOutcome::Applied) => {
                    for commit in &staged {
                        if let (Some(parsed), Some(location)) = (&commit.metadata, &commit.result.metadata_location) {
                            self.metadata_cache().insert(location, &commit.result.metadata_json, Some(parsed));
                        }
                        if let Some(swap) = &commit.swap {
                            self.metadata_cache().forget(&swap.expected_metadata_location);
                        }
                        self.expire_metadata_files(warehouse, commit).await;
                    }
                    return Ok(staged.into_iter().map(|s| s.result).collect());
                }
                Ok(SwapOutcome::Conflict(index)) => {
                    for swap in &swaps {
                        self.delete_quietly(warehouse, &swap.metadata_location).await;
                    }
                    tracing::debug!(attempt, table = %writes[index].0, "commit lost a race; re-checking");
                    // A short, growing pause spreads out writers that keep colliding.
                    tokio::time::sleep(Duration::from_millis((attempt as u64 + 1) * (attempt as u64 + 1))).await;
                }
                // Refused before anything changed (a location now overlaps another table's).
                Err(err @ (CatalogError::BadRequest(_) | CatalogError::NotFound { .. })) => {
                    self.delete_in_background(warehouse, swaps.iter().map(|s| s.metadata_location.clone()).collect());
                    return Err(err);
                }
                // The database failed during the swap: learn from the rows whether it applied.
                Err(err) => {
                    tracing::warn!(error = ?err, "metadata swap failed; checking whether it applied");
                    return match self.resolve_failed_swap(warehouse, &writes).await? {
                        true => Ok(staged.into_iter().map(|s| s.result).collect()),
                        false => Err(err),
                    };
                }
            }
        }
        Err(CatalogError::CommitFailed(format!(
            "gave up after {MAX_COMMIT_ATTEMPTS} attempts: the table is being changed concurrently; retry"
        )))
    }

    /// When the swap itself failed (the database went away mid-statement), find out whether it
    /// applied. Only if that cannot be known is the state unknown, and the new files are kept,
    /// because the table may already point at them.
    async fn resolve_failed_swap(
        &self,
        warehouse: &Warehouse,
        writes: &[(&TableIdent, &MetadataSwap)],
    ) -> Result<bool> {
        let mut applied = 0;
        for (table, swap) in writes {
            match self.load_row(warehouse, table).await {
                Ok(Some(row)) if row.metadata_location == swap.metadata_location => applied += 1,
                Ok(_) => {}
                Err(_) => {
                    return Err(CatalogError::CommitStateUnknown(
                        "the metadata store failed while committing; the commit may or may not have been applied. \
                         Reload the table before retrying."
                            .into(),
                    ));
                }
            }
        }
        match applied {
            0 => {
                for (_, swap) in writes {
                    self.delete_quietly(warehouse, &swap.metadata_location).await;
                }
                Ok(false)
            }
            n if n == writes.len() => Ok(true),
            // The swaps share one transaction, so this cannot happen; if it does, say so.
            _ => Err(CatalogError::CommitStateUnknown(
                "the commit outcome is unknown; reload the tables before retrying".into(),
            )),
        }
    }

    /// Checks requirements against the current metadata and applies the updates.
    fn stage_change(&self, warehouse: &Warehouse, change: &TableChange, current: Current) -> Result<StagedCommit> {
        let Current { head: row, document, metadata: base } = current;
        let old_extra_locations = extra_locations_of(&row.location, &base);
        for requirement in &change.requirements {
            requirement.check(Some(&base))?;
        }
        if change.updates.is_empty() {
            let etag = etag(&row.metadata_location, SnapshotMode::All);
            return Ok(StagedCommit {
                table: change.table.clone(),
                swap: None,
                metadata: None,
                new_locations: Vec::new(),
                result: TableResult {
                    id: Some(row.id),
                    metadata_location: Some(row.metadata_location),
                    metadata_json: document,
                    etag,
                    warehouse: warehouse.clone(),
                },
                expired: Vec::new(),
                delete_expired: false,
            });
        }
        // The cached metadata is shared: the builder works on a copy of it.
        let mut builder = TableMetadata::clone(&base).into_builder(Some(row.metadata_location.clone()));
        for update in change.updates.iter().cloned() {
            builder = update.apply(builder)?;
        }
        let built = builder.build()?;
        let metadata = built.metadata;
        let (location, extra_locations) = table_locations(warehouse, &metadata)?;
        let metadata_location = metadata_file_location(&metadata, Some(&row.metadata_location));
        let metadata_json = to_json(&metadata)?;
        self.check_size("document", metadata_json.len())?;
        let delete_expired =
            metadata.properties().get(PROPERTY_DELETE_AFTER_COMMIT).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let had = TableLocations::new(std::iter::once(row.location.clone()).chain(old_extra_locations.iter().cloned()));
        let new_locations: Vec<String> = std::iter::once(&location)
            .chain(&extra_locations)
            .filter(|l| !had.as_slice().contains(*l) && !had.contains(l))
            .cloned()
            .collect();
        Ok(StagedCommit {
            table: change.table.clone(),
            new_locations,
            swap: Some(MetadataSwap {
                id: row.id.clone(),
                warehouse_id: warehouse.id.clone(),
                expected_metadata_location: row.metadata_location,
                metadata_location: metadata_location.clone(),
                metadata: metadata_json.clone(),
                locations_changed: location != row.location || extra_locations != old_extra_locations,
                location,
                extra_locations,
            }),
            metadata: Some(Arc::new(metadata)),
            result: TableResult {
                id: Some(row.id),
                etag: etag(&metadata_location, SnapshotMode::All),
                metadata_location: Some(metadata_location),
                metadata_json: metadata_json.into(),
                warehouse: warehouse.clone(),
            },
            expired: built.expired_metadata_logs.into_iter().map(|log| log.metadata_file).collect(),
            delete_expired,
        })
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
            requirement.check(None)?;
        }
        let mut schema = None;
        let mut spec = None;
        let mut order = None;
        let mut location = None;
        let mut version = FormatVersion::V2;
        for update in &change.updates {
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
        let location = match location {
            Some(location) => location_inside(warehouse.storage_root.as_str(), &location)?,
            None => Self::default_location(warehouse, &change.table),
        };
        let mut builder = TableMetadataBuilder::new(
            schema,
            spec.unwrap_or_else(|| UnboundPartitionSpec::builder().build()),
            order.unwrap_or_else(SortOrder::unsorted_order),
            location.clone(),
            version,
            HashMap::new(),
        )?;
        for update in change.updates.iter().cloned() {
            builder = update.apply(builder)?;
        }
        let metadata = builder.build()?.metadata;
        let (base, extra) = table_locations(warehouse, &metadata)?;
        let all: Vec<String> = std::iter::once(base).chain(extra).collect();
        self.check_placement(ctx, warehouse, &change.table.namespace, &all).await?;
        let metadata_json = to_json(&metadata)?;
        self.persist_new_table(warehouse, &change.table, &metadata, metadata_json).await.map_err(|e| match e {
            CatalogError::AlreadyExists(_) => {
                CatalogError::CommitFailed(format!("{} was created concurrently (assert-create failed)", change.table))
            }
            other => other,
        })
    }

    /// After a successful commit: remove metadata files that fell out of the metadata log when
    /// `write.metadata.delete-after-commit.enabled` is set. The log is part of the table's
    /// document, which a registration or a client wrote: only metadata files inside the
    /// locations the catalog recorded for this table (and checked to be its alone) are deleted.
    async fn expire_metadata_files(&self, warehouse: &Warehouse, commit: &StagedCommit) {
        let (true, Some(swap)) = (commit.delete_expired, &commit.swap) else { return };
        let owned =
            TableLocations::new(std::iter::once(swap.location.clone()).chain(swap.extra_locations.iter().cloned()));
        for file in &commit.expired {
            if owned.contains(file) && is_metadata_file(file) {
                self.delete_quietly(warehouse, file).await;
            } else {
                tracing::warn!(table = %commit.table, %file, "not deleting an expired metadata file outside the table's locations");
            }
        }
    }
}

/// One table's commit, prepared but not yet swapped in.
struct StagedCommit {
    table: TableIdent,
    /// Locations the commit gives the table that it did not have (placement-checked).
    new_locations: Vec<String>,
    /// `None` when the change has no updates.
    swap: Option<MetadataSwap>,
    /// The new metadata, parsed (with `swap`).
    metadata: Option<Arc<TableMetadata>>,
    result: TableResult,
    expired: Vec<String>,
    delete_expired: bool,
}

/// A table's current state, as a commit reads it.
struct Current {
    head: TabularHead,
    document: Arc<str>,
    metadata: Arc<TableMetadata>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_must_lie_strictly_inside_the_root() {
        let root = "file:///wh";
        assert_eq!(location_inside(root, "file:///wh/ns/t/").unwrap(), "file:///wh/ns/t");
        for bad in [
            "file:///wh",
            "file:///wh/",
            "file:///wh2/t",
            "file:///other/t",
            "file:///wh/../etc",
            "file:///wh//t",
            "file:///wh/a/./b",
        ] {
            assert!(location_inside(root, bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn etags_differ_by_location_and_representation() {
        let a = etag("file:///wh/t/metadata/00001-x.metadata.json", SnapshotMode::All);
        assert_ne!(a, etag("file:///wh/t/metadata/00002-y.metadata.json", SnapshotMode::All));
        assert_ne!(a, etag("file:///wh/t/metadata/00001-x.metadata.json", SnapshotMode::Refs));
        assert!(a.starts_with('"') && a.ends_with('"'));
    }

    #[test]
    fn unreferenced_snapshots_are_dropped_for_the_refs_representation() {
        let json = r#"{"current-snapshot-id": 3, "refs": {"main": {"snapshot-id": 3, "type": "branch"}, "t": {"snapshot-id": 1, "type": "tag"}},
                       "snapshots": [{"snapshot-id": 1}, {"snapshot-id": 2}, {"snapshot-id": 3}]}"#;
        let filtered: serde_json::Value = serde_json::from_str(&referenced_snapshots_only(json).unwrap()).unwrap();
        let ids: Vec<i64> =
            filtered["snapshots"].as_array().unwrap().iter().map(|s| s["snapshot-id"].as_i64().unwrap()).collect();
        assert_eq!(ids, [1, 3]);
    }
}
