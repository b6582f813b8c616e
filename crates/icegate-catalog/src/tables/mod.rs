//! Tables: create (and stage-create), load, commit, drop (and purge), rename, register, list.
//!
//! Metadata semantics come from the `iceberg` crate (`TableMetadataBuilder`,
//! `TableUpdate::apply`, `TableRequirement::check`). A commit writes the new metadata file first,
//! then compare-and-swaps the table row (the engine in `crate::commit`, shared with views);
//! the loser of a race deletes its file and, when its requirements still hold against the
//! winner's metadata, re-applies its updates (as the Java reference server does) or else gets
//! 409.
//!
//! - `create`: createTable and stage-create, and where tables go (`placement`);
//! - `load`: loadTable (and `If-None-Match`), exists, list, and the metadata cache policy of loads;
//! - `storage_access`: vended credentials, signing configuration and remote signing for clients;
//! - `commit`: updateTable and commitTransaction (also the create of an `assert-create` commit);
//! - `register`, `drop`, `rename`: the rest of a table's life;
//! - `metadata_files`: metadata file names, bounded reads, documents, ETags.

mod commit;
mod create;
mod document;
mod drop;
mod float_defaults;
mod fresh_ids;
mod load;
mod metadata_files;
mod placement;
mod register;
mod rename;
mod requirements;
mod storage_access;

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{Schema, SortOrder, UnboundPartitionSpec};
use iceberg::{TableRequirement, TableUpdate};

use crate::context::FileGrant;
use crate::error::{CatalogError, Result};
use crate::ident::{NamespaceIdent, validate_name};
use crate::schema_cost::{Pending, SchemaLimits};
use crate::storage::TableLocations;
use crate::store::{NewTabular, TabularKind, Warehouse};

pub use document::Layout;
pub use drop::Unregistered;
pub use load::Loaded;
pub(crate) use metadata_files::{location_inside, metadata_file_json, too_large};
pub(crate) use requirements::view_uuid_mismatch;
pub use storage_access::StorageRequest;

crate::service::area!(
    /// The tables' operations ([`crate::Catalog::tables`]): createTable, loadTable, commits,
    /// drop, register, rename, list, credentials and remote signing.
    Tables, tables
);

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

    /// A view's identifier (its name checked as a view's).
    pub fn parse_view(namespace: &str, name: &str) -> Result<Self> {
        Self::view(NamespaceIdent::parse_encoded(namespace)?, name)
    }

    pub fn view(namespace: NamespaceIdent, name: &str) -> Result<Self> {
        validate_name("view", name)?;
        Self::new(namespace, name)
    }

    pub fn new(namespace: NamespaceIdent, name: &str) -> Result<Self> {
        validate_name("table", name)?;
        Ok(Self { namespace, name: name.to_owned() })
    }
}

impl TableIdent {
    /// The row of this table or view (`kind`) as the store inserts it.
    pub(crate) fn new_row<'a>(
        &'a self,
        kind: TabularKind,
        warehouse: &'a Warehouse,
        location: &'a str,
        extra_locations: &'a [String],
        metadata_location: &'a str,
        metadata: &'a str,
    ) -> NewTabular<'a> {
        NewTabular {
            warehouse_id: &warehouse.id,
            namespace: &self.namespace,
            name: &self.name,
            kind,
            location,
            extra_locations,
            metadata_location,
            metadata,
            metadata_gzip: None,
        }
    }
}

impl std::fmt::Display for TableIdent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.namespace, self.name)
    }
}

/// A createTable request: its schema as it came, built once the create is authorized.
#[derive(Debug)]
pub struct CreateTable {
    pub name: String,
    pub location: Option<String>,
    pub schema: Pending<Schema>,
    pub partition_spec: Option<UnboundPartitionSpec>,
    pub write_order: Option<SortOrder>,
    pub properties: HashMap<String, String>,
    pub stage_create: bool,
}

/// One table's requirements and updates in a commit. The updates stay the JSON they came as
/// until the commit is authorized on the table (an `add-schema` builds a schema).
#[derive(Debug)]
pub struct TableChange {
    pub table: TableIdent,
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<Pending<TableUpdate>>,
    /// Applies only to the table at exactly this metadata location (the catalog's own commits,
    /// planned on that state: any change meanwhile fails them, and they plan again); `None`
    /// for clients' commits, which their requirements guard.
    pub base: Option<String>,
}

impl TableChange {
    /// The updates, built (each walked against the limits first); call once authorized.
    pub(crate) fn built_updates(&self, limits: &SchemaLimits) -> Result<Vec<&TableUpdate>> {
        self.updates.iter().map(|update| update.build(limits)).collect()
    }
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
    pub id: Option<crate::ids::TabularId>,
    /// `None` for a staged (not yet created) table.
    pub metadata_location: Option<String>,
    /// The metadata JSON, verbatim as stored (no re-serialisation on the hot path).
    pub metadata_json: Arc<str>,
    /// The same document as gzip members, when at hand (a commit makes it; large documents
    /// are stored so): a gzip answer sends it as it is.
    pub gzip: Option<Arc<[u8]>>,
    pub etag: String,
    /// The warehouse the table lives in (for credential vending).
    pub warehouse: Warehouse,
    /// The access to the table's files the caller gets with it, as decided: what its privileges
    /// give on a load, read-write for the creator of a table it creates or registers; `None`
    /// (nothing vended or signed) for a table read without such a decision.
    pub access: Option<FileGrant>,
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
