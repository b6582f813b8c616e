//! Metadata files and documents: where a table's next metadata file goes, reading a metadata
//! file with bounds, (de)serialising documents, the locations a document names, ETags and the
//! `snapshots=refs` representation.

use std::collections::HashSet;
use std::io::Read;

use iceberg::spec::TableMetadata;
use sha2::{Digest, Sha256};

use super::{PROPERTY_DATA_PATH, PROPERTY_METADATA_PATH, SnapshotMode};
use crate::error::{CatalogError, Result};
use crate::storage::TableLocations;
use crate::store::Warehouse;

/// The locations outside `base` that the metadata's write paths add (no validation).
pub(super) fn extra_locations_of(base: &str, metadata: &TableMetadata) -> Vec<String> {
    let props = [PROPERTY_DATA_PATH, PROPERTY_METADATA_PATH].into_iter().filter_map(|k| metadata.properties().get(k));
    let all = TableLocations::new(std::iter::once(base.to_owned()).chain(props.cloned()));
    all.as_slice().iter().filter(|l| *l != base).cloned().collect()
}

/// A table's base location and the locations outside it that its properties make it write to,
/// each checked to lie inside the warehouse's storage root. (Overlaps with other tables are
/// checked by the store, atomically with the write.)
pub(super) fn table_locations(warehouse: &Warehouse, metadata: &TableMetadata) -> Result<(String, Vec<String>)> {
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

pub(super) fn etag(metadata_location: &str, mode: SnapshotMode) -> String {
    let mut hasher = Sha256::new();
    hasher.update(metadata_location.as_bytes());
    hasher.update(if mode == SnapshotMode::All { b"|all" } else { b"|ref" });
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Parses the stored metadata document of the table or view with id `id` (it was written by
/// us, so a failure is internal), once its schemas were walked against the limits
/// (`Catalog::document_cost`: a document stored by an earlier version may pass them).
pub(super) fn parse_stored(id: &str, document: &str) -> Result<TableMetadata> {
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

/// Parses a metadata file's JSON (see [`metadata_file_json`]), once its schemas were walked
/// against the limits (`Catalog::document_cost`).
pub(super) fn parse_metadata_file(location: &str, json: &[u8]) -> Result<TableMetadata> {
    serde_json::from_slice(json)
        .map_err(|e| CatalogError::bad_request(format!("invalid table metadata file {location}: {e}")))
}

/// Whether a file name is one of a metadata file (the only kind a metadata clean-up deletes).
pub(super) fn is_metadata_file(location: &str) -> bool {
    let name = location.rsplit('/').next().unwrap_or_default();
    name.ends_with(".metadata.json") || name.ends_with(".metadata.json.gz")
}

/// A metadata document as the `iceberg` crate writes it, but `float` defaults written as the
/// reference writes them (see `float_defaults`).
pub(super) fn to_json(metadata: &TableMetadata) -> Result<String> {
    let failed = |e: serde_json::Error| CatalogError::Internal(anyhow::anyhow!("serialising metadata: {e}"));
    if !metadata.schemas_iter().any(|s| super::float_defaults::has_float_default(s)) {
        return serde_json::to_string(metadata).map_err(failed);
    }
    let mut document = serde_json::to_value(metadata).map_err(failed)?;
    super::float_defaults::fix_document(&mut document);
    serde_json::to_string(&document).map_err(failed)
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
pub(super) fn metadata_file_location(metadata: &TableMetadata, previous: Option<&str>) -> String {
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
pub(super) fn referenced_snapshots_only(metadata_json: &str) -> Result<String> {
    let mut value: serde_json::Value = serde_json::from_str(metadata_json)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored metadata is invalid: {e}")))?;
    let mut keep: HashSet<i64> = value["refs"]
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
