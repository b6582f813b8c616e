//! The catalogs a migration moves tables from, as the migration sees them: their namespaces and
//! tables, and the fence that stops a table's writers at the source (a compare-and-swap on the
//! table's current metadata location, to a location that never exists), its undoing and the
//! source entry's retirement. No file is read or written through a source.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::Result;

/// A table or view in a source catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTable {
    pub namespace: Vec<String>,
    pub name: String,
    /// `table` or `view`.
    pub kind: String,
    /// `None`: a row without one (a create in flight, or a broken entry).
    pub metadata_location: Option<String>,
}

/// What fencing a table at its source found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// Fenced at exactly the expected location; `previous`: what the source held as the
    /// previous location before (restored with it).
    Fenced { previous: Option<String> },
    /// Fenced already, by this very fence (a run resumed after it fenced).
    AlreadyFenced,
    /// A commit moved the table meanwhile: this is where it is now (fence that instead).
    Moved { now: String },
    /// The table is gone from the source.
    Gone,
    /// The source let the table go (a REST catalog's unregisterTable: no writer finds it
    /// there any more); `at` is its last metadata location, which is what moves (newer than
    /// `expected` when a commit came in between).
    Released { at: String },
}

/// A catalog tables are migrated from.
#[async_trait]
pub trait SourceCatalog: Send + Sync {
    /// Every namespace (levels) with its properties (without markers a catalog keeps for
    /// itself, such as the SQL catalog's `exists`).
    async fn namespaces(&self) -> Result<Vec<(Vec<String>, BTreeMap<String, String>)>>;
    /// The tables and views of one namespace.
    async fn tables(&self, namespace: &[String]) -> Result<Vec<SourceTable>>;
    /// One table, as it is now (`None`: not there).
    async fn table(&self, namespace: &[String], name: &str) -> Result<Option<SourceTable>> {
        Ok(self.tables(namespace).await?.into_iter().find(|t| t.name == name))
    }
    /// Moves the table's current metadata location from `expected` to `fenced` (a location
    /// that never exists: every writer's next commit fails there, naming it).
    async fn fence(&self, namespace: &[String], name: &str, expected: &str, fenced: &str) -> Result<Fence>;
    /// Undoes a fence: the entry of `table` (namespace, name) at `fenced` points at `back`
    /// again (with `previous` as its previous location); `false` when no entry is at `fenced`
    /// (restored already, or gone). A source that released the table registers it again at
    /// `back`.
    async fn unfence(&self, table: (&[String], &str), fenced: &str, back: &str, previous: Option<&str>)
    -> Result<bool>;
    /// Removes the fenced entry for good; `false` when none is at `fenced` (a released table
    /// has none).
    async fn retire(&self, table: (&[String], &str), fenced: &str) -> Result<bool>;
}
