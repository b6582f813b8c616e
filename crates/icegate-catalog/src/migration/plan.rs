//! A migration's plan: which of the source's tables move, to which names, and what keeps one
//! from moving (a name taken at the target, files outside the target warehouse's storage
//! root). Nothing read from the source is trusted as a path: a metadata location is checked to
//! lie inside the storage root before it is read, and what it says the table's locations are is
//! checked before the plan names them.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{Value, json};

use super::source::{SourceCatalog, SourceTable};
use super::store::{MigrationTable, TableState};
use super::{FENCE_SUFFIX, MAX_SOURCE_LOCATION, MAX_TABLES, Migrations, Selection};
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::store::{TabularKind, Warehouse};
use crate::tables::{TableIdent, location_inside, metadata_file_json};

/// One selected source object, as the plan sees it.
#[derive(Debug, Clone)]
pub struct PlannedTable {
    pub id: String,
    pub source: SourceTable,
    pub target_namespace: Vec<String>,
    pub target_name: String,
    /// The table's location, as its metadata file says.
    pub location: Option<String>,
    pub current_snapshot_id: Option<i64>,
    pub snapshots: usize,
    /// Why it does not move (`None`: it moves).
    pub conflict: Option<String>,
    /// The source's namespace properties, carried to the target namespace when the run makes it.
    pub namespace_properties: BTreeMap<String, String>,
    /// Keys of the source's namespace properties not carried: policy the catalog's
    /// administrators set (`lifecycle.*`), never a source's.
    pub left_out: Vec<String>,
}

impl PlannedTable {
    pub fn report(&self) -> Value {
        json!({
            "kind": self.source.kind,
            "source": { "namespace": self.source.namespace, "name": self.source.name },
            "target": { "namespace": self.target_namespace, "name": self.target_name },
            "metadata-location": self.source.metadata_location,
            "location": self.location,
            "current-snapshot-id": self.current_snapshot_id,
            "snapshots": self.snapshots,
            "moves": self.conflict.is_none(),
            "conflict": self.conflict,
            "namespace-properties": self.namespace_properties,
            "namespace-properties-left-out": self.left_out,
        })
    }

    /// The table as the run records it; `source`: the source catalog's identity.
    pub(super) fn record(&self, migration_id: &str, source: &str, now_ms: i64) -> MigrationTable {
        MigrationTable {
            id: self.id.clone(),
            migration_id: migration_id.to_owned(),
            kind: self.source.kind.clone(),
            source_key: source_key(source, &self.source),
            source_namespace: self.source.namespace.clone(),
            source_name: self.source.name.clone(),
            target_namespace: self.target_namespace.clone(),
            target_name: self.target_name.clone(),
            state: if self.conflict.is_some() { TableState::Skipped } else { TableState::Planned },
            planned_location: self.source.metadata_location.clone(),
            fenced_location: None,
            fence: None,
            tabular_id: None,
            handed_back: None,
            report: Some(json!({ "namespace-properties": self.namespace_properties })),
            error: self.conflict.clone(),
            updated_at_ms: now_ms,
        }
    }
}

/// The source object's identity (its catalog's, its namespace, its name): one live migration
/// of it at a time.
fn source_key(source: &str, table: &SourceTable) -> String {
    json!([source, table.namespace, table.name]).to_string()
}

/// The namespaces the plan creates at the target (each with its source's properties).
pub(super) fn namespaces_of(planned: &[PlannedTable]) -> Value {
    let set: BTreeSet<&Vec<String>> =
        planned.iter().filter(|t| t.conflict.is_none()).map(|t| &t.target_namespace).collect();
    json!(set)
}

/// What a metadata file says about where the table is (every other field is skipped).
#[derive(Deserialize)]
struct Light {
    location: String,
    #[serde(default)]
    properties: BTreeMap<String, String>,
    #[serde(default, rename = "current-snapshot-id")]
    current_snapshot_id: Option<i64>,
    #[serde(default)]
    snapshots: Vec<serde::de::IgnoredAny>,
}

/// `namespace`'s target under `mapping` (the longest mapped prefix wins).
fn mapped(namespace: &[String], mapping: &BTreeMap<String, String>) -> Vec<String> {
    for end in (1..=namespace.len()).rev() {
        if let Some(to) = mapping.get(&namespace[..end].join(".")) {
            let mut target: Vec<String> = to.split('.').map(str::to_owned).collect();
            target.extend(namespace[end..].iter().cloned());
            return target;
        }
    }
    namespace.to_vec()
}

fn under(namespace: &[String], parent: &[String]) -> bool {
    namespace.len() >= parent.len() && namespace[..parent.len()] == *parent
}

/// The source's objects the selection names, each with its namespace's properties.
pub(super) async fn select(
    source: &dyn SourceCatalog,
    selection: &Selection,
) -> Result<Vec<(SourceTable, BTreeMap<String, String>)>> {
    let given = [selection.namespaces.is_some(), selection.tables.is_some(), selection.include.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(CatalogError::bad_request("select by one of namespaces, tables or include, not several"));
    }
    for (from, to) in &selection.namespace_mapping {
        if from.is_empty() || to.is_empty() || to.split('.').any(str::is_empty) {
            return Err(CatalogError::bad_request(format!("namespace-mapping {from:?} -> {to:?}: empty level")));
        }
    }
    let include = selection
        .include
        .as_deref()
        .map(|pattern| {
            regex::RegexBuilder::new(pattern)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| CatalogError::bad_request(format!("include {pattern:?} is no regular expression: {e}")))
        })
        .transpose()?;
    if let Some(tables) = &selection.tables
        && tables.iter().any(|t| t.len() < 2)
    {
        return Err(CatalogError::bad_request("each of tables is a namespace's levels and the table's name"));
    }
    let namespaces = source.namespaces().await?;
    let mut selected = Vec::new();
    for (namespace, properties) in namespaces {
        let wanted = match (&selection.namespaces, &selection.tables) {
            (Some(list), _) => list.iter().any(|parent| under(&namespace, parent)),
            (_, Some(list)) => list.iter().any(|t| t[..t.len() - 1] == *namespace),
            _ => true,
        };
        if !wanted {
            continue;
        }
        for table in source.tables(&namespace).await? {
            let full = format!("{}.{}", table.namespace.join("."), table.name);
            let keep = match (&selection.tables, &include) {
                (Some(list), _) => list.iter().any(|t| t[..t.len() - 1] == *namespace && t[t.len() - 1] == table.name),
                (_, Some(pattern)) => pattern.is_match(&full),
                _ => true,
            };
            if keep {
                selected.push((table, properties.clone()));
                if selected.len() > MAX_TABLES {
                    return Err(CatalogError::bad_request(format!(
                        "the selection holds more than {MAX_TABLES} tables: migrate in parts"
                    )));
                }
            }
        }
    }
    if let Some(tables) = &selection.tables {
        for wanted in tables {
            let (namespace, name) = wanted.split_at(wanted.len() - 1);
            if !selected.iter().any(|(t, _)| t.namespace == namespace && t.name == name[0]) {
                return Err(CatalogError::bad_request(format!("{} is not in the source catalog", wanted.join("."))));
            }
        }
    }
    Ok(selected)
}

impl Migrations<'_> {
    /// Each selected object with its target and, when it cannot move, why.
    pub(super) async fn plan_tables(
        &self,
        warehouse: &Warehouse,
        selected: &[(SourceTable, BTreeMap<String, String>)],
        selection: &Selection,
    ) -> Result<Vec<PlannedTable>> {
        let mut targets = BTreeSet::new();
        let mut planned = Vec::with_capacity(selected.len());
        for (table, properties) in selected {
            let target_namespace = mapped(&table.namespace, &selection.namespace_mapping);
            let (left_out, carried): (BTreeMap<String, String>, BTreeMap<String, String>) =
                properties.clone().into_iter().partition(|(key, _)| crate::lifecycle::is_policy_key(key));
            let mut entry = PlannedTable {
                id: uuid::Uuid::now_v7().to_string(),
                source: table.clone(),
                target_namespace: target_namespace.clone(),
                target_name: table.name.clone(),
                location: None,
                current_snapshot_id: None,
                snapshots: 0,
                conflict: None,
                namespace_properties: carried,
                left_out: left_out.into_keys().collect(),
            };
            entry.conflict = self.conflict(warehouse, &mut entry).await?;
            if entry.conflict.is_none() && !targets.insert((target_namespace, table.name.clone())) {
                entry.conflict = Some("another selected table moves to the same name".into());
            }
            planned.push(entry);
        }
        Ok(planned)
    }

    /// Why `entry` cannot move (`None`: it can), filling in what its metadata file says.
    async fn conflict(&self, warehouse: &Warehouse, entry: &mut PlannedTable) -> Result<Option<String>> {
        if entry.source.kind == "view" {
            return Ok(Some("a view: views are not migrated yet (create it again at icegate)".into()));
        }
        let Some(metadata_location) = entry.source.metadata_location.clone() else {
            return Ok(Some("the source holds no metadata location for it".into()));
        };
        let root = warehouse.storage_root.as_str();
        if location_inside(root, &metadata_location).is_err() || metadata_location.ends_with('/') {
            return Ok(Some(format!(
                "its metadata file {metadata_location} lies outside the target warehouse's storage root {root}"
            )));
        }
        if metadata_location.len() + FENCE_SUFFIX.len() + entry.id.len() > MAX_SOURCE_LOCATION {
            return Ok(Some("its metadata location is too long to fence at the source".into()));
        }
        let ident = match NamespaceIdent::from_levels(entry.target_namespace.clone())
            .and_then(|ns| TableIdent::new(ns, &entry.target_name))
        {
            Ok(ident) => ident,
            Err(e) => return Ok(Some(format!("its target name is invalid: {e}"))),
        };
        for kind in [TabularKind::Table, TabularKind::View] {
            if self.store().load_tabular_head(&warehouse.id, &ident.namespace, &ident.name, kind).await?.is_some() {
                return Ok(Some(format!("{ident} exists at the target")));
            }
        }
        // Read only once it is known to lie inside the storage root, bounded.
        let light = match self.files().read(warehouse, &metadata_location, self.max_metadata_bytes()).await {
            Ok(bytes) => metadata_file_json(&metadata_location, bytes, self.max_metadata_bytes()).and_then(|json| {
                serde_json::from_slice::<Light>(&json).map_err(|e| {
                    CatalogError::bad_request(format!("invalid table metadata file {metadata_location}: {e}"))
                })
            }),
            // Whatever keeps one table's file from being read (a transient outage included) is
            // that table's conflict: the plan goes on with the others.
            Err(e) => Err(e),
        };
        let light = match light {
            Ok(light) => light,
            Err(e) => return Ok(Some(format!("its metadata file cannot be read: {e}"))),
        };
        entry.current_snapshot_id = light.current_snapshot_id.filter(|id| *id >= 0);
        entry.snapshots = light.snapshots.len();
        entry.location = Some(light.location.clone());
        let location = match location_inside(root, &light.location) {
            Ok(location) => location,
            Err(_) => {
                return Ok(Some(format!(
                    "its location {} lies outside the target warehouse's storage root {root}",
                    light.location
                )));
            }
        };
        for key in ["write.data.path", "write.metadata.path"] {
            if let Some(path) = light.properties.get(key)
                && location_inside(root, path).is_err()
            {
                return Ok(Some(format!("its {key} {path} lies outside the target warehouse's storage root {root}")));
            }
        }
        let metadata_dir = light.properties.get("write.metadata.path").map(|p| p.trim_end_matches('/').to_owned());
        let inside = |dir: &str| metadata_location.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'));
        if !inside(&location) && !metadata_dir.as_deref().is_some_and(inside) {
            return Ok(Some(format!(
                "its metadata file {metadata_location} lies outside its location {location} (and its \
                 write.metadata.path)"
            )));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_mapped_prefix_wins_and_the_rest_follows() {
        let mapping: BTreeMap<String, String> =
            [("sales".into(), "finance.sales".into()), ("sales.eu".into(), "eu".into())].into();
        let levels = |s: &str| s.split('.').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(mapped(&levels("sales"), &mapping), levels("finance.sales"));
        assert_eq!(mapped(&levels("sales.us.daily"), &mapping), levels("finance.sales.us.daily"));
        assert_eq!(mapped(&levels("sales.eu.daily"), &mapping), levels("eu.daily"));
        assert_eq!(mapped(&levels("salesforce"), &mapping), levels("salesforce"));
        assert!(under(&levels("a.b"), &levels("a")) && !under(&levels("ab"), &levels("a")));
    }
}
