//! What adoption keeps (see migration 24): the warehouse's read-only source locations, each
//! adoption (its source, table and settings), what each adopted file looked like when it was
//! added, and every run's report.

use serde_json::Value;

use crate::Result;
use crate::ident::NamespaceIdent;

/// A prefix a warehouse may adopt files from, read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLocation {
    pub location: String,
    pub created_at_ms: i64,
    pub created_by: String,
}

/// Whether an adoption re-syncs by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdoptionMode {
    /// One run; re-syncs only when asked for.
    Snapshot,
    /// Re-synced on a schedule through the task queue.
    Continuous,
}

impl AdoptionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Continuous => "continuous",
        }
    }

    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "snapshot" => Ok(Self::Snapshot),
            "continuous" => Ok(Self::Continuous),
            other => Err(crate::CatalogError::bad_request(format!("unknown mode {other:?} (snapshot, continuous)"))),
        }
    }
}

/// An adopted dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Adoption {
    pub id: String,
    pub warehouse_id: String,
    pub tabular_id: String,
    pub namespace: NamespaceIdent,
    pub name: String,
    /// The source prefix (no trailing slash).
    pub source: String,
    /// Partitioning, sync interval, what to do with files that vanish (see `Settings`).
    pub settings: Value,
    pub mode: AdoptionMode,
    pub created_at_ms: i64,
    pub created_by: String,
}

/// A source file as it was when a run added it to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptedFile {
    pub location: String,
    pub size: u64,
    /// The store's ETag; empty where it has none.
    pub etag: String,
    pub modified_ms: i64,
    /// The snapshot that added it.
    pub snapshot_id: i64,
}

/// One run's report.
#[derive(Debug, Clone, PartialEq)]
pub struct AdoptionRun {
    pub id: String,
    pub adoption_id: String,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    /// The snapshot it committed (`None`: nothing to add).
    pub snapshot_id: Option<i64>,
    pub report: Value,
}
