//! Manifests: the ones an adoption run writes (clustered by partition, so an engine that
//! prunes whole manifests by their partition summaries reads only a partition's), the manifest
//! list carrying the table's manifests before it, and what a table's current snapshot holds.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataFile, FormatVersion, Manifest, ManifestFile, ManifestList, ManifestListWriter, ManifestStatus,
    ManifestWriterBuilder, PartitionSpec, Schema, Struct,
};

use crate::files::FileIo;
use crate::store::Warehouse;
use crate::{CatalogError, Result};

/// Entries per manifest at most.
const MAX_MANIFEST_ENTRIES: usize = 5_000;
/// Up to this many partitions, each gets manifests of its own; beyond, files are sorted by
/// partition and cut into manifests of `SORTED_MANIFEST_ENTRIES`.
const MAX_PARTITION_MANIFESTS: usize = 200;
const SORTED_MANIFEST_ENTRIES: usize = 1_000;

/// Files written for one snapshot (deleted again if its commit fails).
#[derive(Debug, Default)]
pub struct Written {
    pub locations: Vec<String>,
    pub manifest_list: String,
    /// Records per partition as the written manifests say (read back from their bytes).
    pub records_by_partition: BTreeMap<String, u64>,
}

fn iceberg_error(what: &str) -> impl Fn(iceberg::Error) -> CatalogError + '_ {
    move |e| CatalogError::Internal(anyhow::anyhow!("{what}: {e}"))
}

/// The bytes written to `location` of the in-memory `memory` (manifests are written there
/// first, then stored as new files through the catalog's own storage).
async fn written_bytes(memory: &FileIO, location: &str) -> Result<Bytes> {
    let input = memory.new_input(location).map_err(iceberg_error("a manifest"))?;
    input.read().await.map_err(iceberg_error("a manifest"))
}

/// A partition tuple as text (for grouping and reports).
pub fn partition_key(partition: &Struct) -> String {
    serde_json::to_string(&partition.iter().map(|l| l.map(|l| format!("{l:?}"))).collect::<Vec<_>>())
        .unwrap_or_default()
}

/// Groups `files` into manifests: one group per partition while there are few, else sorted runs.
fn groups(files: Vec<DataFile>) -> Vec<Vec<DataFile>> {
    let mut by_partition: BTreeMap<String, Vec<DataFile>> = BTreeMap::new();
    for file in files {
        by_partition.entry(partition_key(file.partition())).or_default().push(file);
    }
    let chunk = if by_partition.len() <= MAX_PARTITION_MANIFESTS {
        let mut out = Vec::new();
        for (_, mut files) in by_partition {
            files.sort_by(|a, b| a.file_path().cmp(b.file_path()));
            while files.len() > MAX_MANIFEST_ENTRIES {
                let rest = files.split_off(MAX_MANIFEST_ENTRIES);
                out.push(std::mem::replace(&mut files, rest));
            }
            out.push(files);
        }
        return out;
    } else {
        SORTED_MANIFEST_ENTRIES
    };
    let sorted: Vec<DataFile> = by_partition.into_values().flatten().collect();
    let mut out = Vec::new();
    let mut current = Vec::with_capacity(chunk);
    for file in sorted {
        current.push(file);
        if current.len() == chunk {
            out.push(std::mem::replace(&mut current, Vec::with_capacity(chunk)));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// What to write for one snapshot.
pub struct SnapshotFiles<'a> {
    pub metadata_dir: &'a str,
    pub snapshot_id: i64,
    pub parent_snapshot_id: Option<i64>,
    pub sequence_number: i64,
    pub schema: Arc<Schema>,
    pub spec: &'a PartitionSpec,
    /// The parent snapshot's manifests, carried as they are.
    pub carried: Vec<ManifestFile>,
}

/// Writes the manifests of `files` and the snapshot's manifest list (the new manifests, then
/// the carried ones) into the table's metadata directory, as new files.
pub async fn write(
    io: &dyn FileIo,
    warehouse: &Warehouse,
    what: SnapshotFiles<'_>,
    files: Vec<DataFile>,
) -> Result<Written> {
    let memory = FileIO::new_with_memory();
    let mut written = Written::default();
    let mut manifests = Vec::new();
    let run = uuid::Uuid::now_v7().simple().to_string();
    for (n, group) in groups(files).into_iter().enumerate() {
        let location = format!("{}/{run}-m{n}.avro", what.metadata_dir);
        let output = memory.new_output(&location).map_err(iceberg_error("a manifest"))?;
        let mut writer =
            ManifestWriterBuilder::new(output, Some(what.snapshot_id), what.schema.clone(), what.spec.clone())
                .build_v2_data();
        for file in group {
            writer.add_file(file, -1).map_err(iceberg_error("a manifest entry"))?;
        }
        let manifest = writer.write_manifest_file().await.map_err(iceberg_error("writing a manifest"))?;
        let bytes = written_bytes(&memory, &location).await?;
        // Verified as written: the entries read back, their records summed per partition.
        let parsed = Manifest::parse_avro(&bytes).map_err(iceberg_error("reading back a manifest"))?;
        for entry in parsed.entries() {
            *written.records_by_partition.entry(partition_key(entry.data_file().partition())).or_default() +=
                entry.data_file().record_count();
        }
        io.write_new(warehouse, &location, bytes).await?;
        written.locations.push(location);
        manifests.push(manifest);
    }
    let list_location = format!("{}/snap-{}-1-{run}.avro", what.metadata_dir, what.snapshot_id);
    let output = memory.new_output(&list_location).map_err(iceberg_error("a manifest list"))?;
    let writer = output.writer().await.map_err(iceberg_error("a manifest list"))?;
    let mut list = ManifestListWriter::v2(writer, what.snapshot_id, what.parent_snapshot_id, what.sequence_number);
    list.add_manifests(manifests.into_iter().chain(what.carried)).map_err(iceberg_error("a manifest list"))?;
    list.close().await.map_err(iceberg_error("writing a manifest list"))?;
    let bytes = written_bytes(&memory, &list_location).await?;
    io.write_new(warehouse, &list_location, bytes).await?;
    written.locations.push(list_location.clone());
    written.manifest_list = list_location;
    Ok(written)
}

/// A data file a table's current snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFile {
    pub size: u64,
    pub records: u64,
    /// The manifest that holds it.
    pub manifest: String,
}

/// The parent's manifests (to carry) and every live data file they hold, by path.
pub async fn current(
    io: &dyn FileIo,
    warehouse: &Warehouse,
    manifest_list: &str,
    max_bytes: u64,
) -> Result<(Vec<ManifestFile>, HashMap<String, LiveFile>)> {
    let bytes = io.read(warehouse, manifest_list, max_bytes).await?;
    let list = ManifestList::parse_with_version(&bytes, FormatVersion::V2)
        .map_err(|e| CatalogError::bad_request(format!("the manifest list {manifest_list} does not parse: {e}")))?;
    let mut live = HashMap::new();
    for manifest in list.entries() {
        if manifest.content != iceberg::spec::ManifestContentType::Data {
            continue;
        }
        let bytes = io.read(warehouse, &manifest.manifest_path, max_bytes).await?;
        let parsed = Manifest::parse_avro(&bytes).map_err(|e| {
            CatalogError::bad_request(format!("the manifest {} does not parse: {e}", manifest.manifest_path))
        })?;
        for entry in parsed.entries() {
            if entry.status() == ManifestStatus::Deleted {
                continue;
            }
            let file = entry.data_file();
            live.insert(
                file.file_path().to_owned(),
                LiveFile {
                    size: file.file_size_in_bytes(),
                    records: file.record_count(),
                    manifest: manifest.manifest_path.clone(),
                },
            );
        }
    }
    Ok((list.entries().to_vec(), live))
}

/// A manifest rewritten without some of its files.
pub struct Rewritten {
    pub manifest: ManifestFile,
    pub location: String,
    /// The files marked deleted, and their records and bytes.
    pub removed: Vec<String>,
    pub records: u64,
    pub bytes: u64,
}

/// Rewrites `manifest` for snapshot `snapshot_id`: the files in `remove` marked deleted, the
/// other live ones kept as existing (their sequence numbers and snapshot as they were).
pub async fn rewrite_without(
    io: &dyn FileIo,
    warehouse: &Warehouse,
    (metadata_dir, snapshot_id): (&str, i64),
    (schema, spec): (Arc<Schema>, &PartitionSpec),
    manifest: &ManifestFile,
    remove: &std::collections::HashSet<String>,
    max_bytes: u64,
) -> Result<Rewritten> {
    let bytes = io.read(warehouse, &manifest.manifest_path, max_bytes).await?;
    let parsed = Manifest::parse_avro(&bytes).map_err(|e| {
        CatalogError::bad_request(format!("the manifest {} does not parse: {e}", manifest.manifest_path))
    })?;
    let memory = FileIO::new_with_memory();
    let location = format!("{metadata_dir}/{}-r.avro", uuid::Uuid::now_v7().simple());
    let output = memory.new_output(&location).map_err(iceberg_error("a manifest"))?;
    let mut writer = ManifestWriterBuilder::new(output, Some(snapshot_id), schema, spec.clone()).build_v2_data();
    let (mut removed, mut records, mut size) = (Vec::new(), 0u64, 0u64);
    for entry in parsed.entries() {
        if entry.status() == ManifestStatus::Deleted {
            continue;
        }
        // Values an entry leaves to its manifest (added in the manifest's snapshot).
        let added = entry.status() == ManifestStatus::Added;
        let entry_snapshot = entry.snapshot_id.unwrap_or(manifest.added_snapshot_id);
        let sequence = entry.sequence_number.or(added.then_some(manifest.sequence_number)).unwrap_or(0);
        let file_sequence = entry.file_sequence_number.or(added.then_some(manifest.sequence_number));
        let file = entry.data_file().clone();
        if remove.contains(file.file_path()) {
            removed.push(file.file_path().to_owned());
            records += file.record_count();
            size += file.file_size_in_bytes();
            writer.add_delete_file(file, sequence, file_sequence).map_err(iceberg_error("a manifest entry"))?;
        } else {
            writer
                .add_existing_file(file, entry_snapshot, sequence, file_sequence)
                .map_err(iceberg_error("a manifest entry"))?;
        }
    }
    let written = writer.write_manifest_file().await.map_err(iceberg_error("writing a manifest"))?;
    let bytes = written_bytes(&memory, &location).await?;
    io.write_new(warehouse, &location, bytes).await?;
    Ok(Rewritten { manifest: written, location, removed, records, bytes: size })
}
