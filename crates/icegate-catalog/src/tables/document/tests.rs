//! Spliced documents against the `iceberg` crate's own serialisation, over long random
//! histories of commits of every kind the splice treats specially (snapshots added, expired
//! from the front and the middle, refs moved, made and dropped, metadata-log expiry) and of the
//! kinds it writes afresh (schemas, specs, sort orders, properties, statistics, locations,
//! format upgrades).

use std::io::Read;

use iceberg::TableUpdate;
use iceberg::spec::{FormatVersion, TableMetadata, TableMetadataBuilder};
use serde_json::{Value, json};

use super::*;

/// xorshift64: a repeatable stream of choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn table(version: FormatVersion) -> TableMetadata {
    let schema = serde_json::from_value(json!({
        "type": "struct", "schema-id": 0,
        "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "name", "required": false, "type": "string"},
            {"id": 3, "name": "ts", "required": false, "type": "timestamptz"}
        ]
    }))
    .unwrap();
    let spec: iceberg::spec::UnboundPartitionSpec =
        serde_json::from_value(json!({"spec-id": 0, "fields": []})).unwrap();
    let order = serde_json::from_value(json!({"order-id": 0, "fields": []})).unwrap();
    let properties = [("owner".to_owned(), "test".to_owned())].into();
    TableMetadataBuilder::new(schema, spec, order, "file:///wh/ns/t".into(), version, properties)
        .unwrap()
        .build()
        .unwrap()
        .metadata
}

fn update(value: Value) -> TableUpdate {
    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{value}: {e}"))
}

/// One random commit's updates on `metadata`.
fn random_commit(rng: &mut Rng, metadata: &TableMetadata, next_id: &mut i64, step: usize) -> Vec<TableUpdate> {
    let snapshots: Vec<i64> = {
        let mut ids: Vec<(i64, i64)> = metadata.snapshots().map(|s| (s.sequence_number(), s.snapshot_id())).collect();
        ids.sort_unstable();
        ids.into_iter().map(|(_, id)| id).collect()
    };
    let v3 = metadata.format_version() == FormatVersion::V3;
    let mut snapshot = |rng: &mut Rng, parent: Option<i64>, sequence: i64| {
        *next_id += 1 + rng.below(3) as i64;
        let operation = ["append", "overwrite", "delete", "replace"][rng.below(4) as usize];
        let mut summary = json!({ "operation": operation });
        for k in 0..rng.below(6) {
            summary[format!("k{k}")] = json!(format!("v{}-\"quoted\"-é", rng.below(1000)));
        }
        let mut snapshot = json!({
            "snapshot-id": *next_id,
            "sequence-number": sequence,
            "timestamp-ms": metadata.last_updated_ms() + 1 + rng.below(5) as i64,
            "manifest-list": format!("file:///wh/ns/t/metadata/snap-{}.avro", *next_id),
            "summary": summary,
            "schema-id": metadata.current_schema_id()
        });
        if let Some(parent) = parent {
            snapshot["parent-snapshot-id"] = json!(parent);
        }
        if v3 {
            snapshot["first-row-id"] = json!(metadata.next_row_id());
            snapshot["added-rows"] = json!(rng.below(100));
        }
        snapshot
    };
    let sequence = metadata.last_sequence_number() + 1;
    match rng.below(20) {
        // Appends dominate, as on a streaming table; with expiry of the oldest half the time.
        0..=8 => {
            let s = snapshot(rng, metadata.current_snapshot_id(), sequence);
            let id = s["snapshot-id"].clone();
            let mut updates = vec![
                update(json!({"action": "add-snapshot", "snapshot": s})),
                update(json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": id})),
            ];
            if snapshots.len() > 40 && rng.below(2) == 0 {
                updates.push(update(json!({"action": "remove-snapshots", "snapshot-ids": [snapshots[0]]})));
            }
            updates
        }
        // Several snapshots in one commit (a transaction's intermediate snapshots).
        9 => {
            let first = snapshot(rng, metadata.current_snapshot_id(), sequence);
            let second = snapshot(rng, first["snapshot-id"].as_i64(), sequence + 1);
            let id = second["snapshot-id"].clone();
            vec![
                update(json!({"action": "add-snapshot", "snapshot": first})),
                update(json!({"action": "add-snapshot", "snapshot": second})),
                update(json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": id})),
            ]
        }
        // A branch or tag made or moved.
        10 if !snapshots.is_empty() => {
            let target = snapshots[rng.below(snapshots.len() as u64) as usize];
            let name = format!("r{}", rng.below(4));
            if rng.below(2) == 0 {
                vec![update(
                    json!({"action": "set-snapshot-ref", "ref-name": name, "type": "tag", "snapshot-id": target, "max-ref-age-ms": 1000}),
                )]
            } else {
                vec![update(
                    json!({"action": "set-snapshot-ref", "ref-name": name, "type": "branch", "snapshot-id": target, "min-snapshots-to-keep": 2}),
                )]
            }
        }
        11 => vec![update(json!({"action": "remove-snapshot-ref", "ref-name": format!("r{}", rng.below(4))}))],
        // Expiry in the middle, or of several.
        12 if snapshots.len() > 4 => {
            let mut ids: Vec<i64> =
                (0..1 + rng.below(3)).map(|_| snapshots[rng.below(snapshots.len() as u64 - 1) as usize]).collect();
            ids.dedup();
            vec![update(json!({"action": "remove-snapshots", "snapshot-ids": ids}))]
        }
        13 => {
            let field = metadata.last_column_id() + 1;
            vec![
                update(
                    json!({"action": "add-schema", "schema": {"type": "struct", "schema-id": metadata.current_schema_id() + 1,
                    "fields": metadata.current_schema().as_struct().fields().iter().map(|f| serde_json::to_value(f).unwrap())
                        .chain([json!({"id": field, "name": format!("c{field}"), "required": false, "type": "double"})]).collect::<Vec<_>>()}}),
                ),
                update(json!({"action": "set-current-schema", "schema-id": -1})),
            ]
        }
        14 => vec![
            update(
                json!({"action": "add-spec", "spec": {"fields": [{"source-id": 1, "field-id": 1000 + step, "name": format!("b{step}"), "transform": format!("bucket[{}]", 2 + rng.below(8))}]}}),
            ),
            update(json!({"action": "set-default-spec", "spec-id": -1})),
        ],
        15 => vec![
            update(
                json!({"action": "add-sort-order", "sort-order": {"order-id": 1 + step, "fields": [{"source-id": 1, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}]}}),
            ),
            update(json!({"action": "set-default-sort-order", "sort-order-id": -1})),
        ],
        16 => {
            let max = 2 + rng.below(20);
            vec![update(
                json!({"action": "set-properties", "updates": {"write.metadata.previous-versions-max": max.to_string(), format!("p{}", rng.below(5)): "x"}}),
            )]
        }
        17 => vec![update(json!({"action": "remove-properties", "removals": [format!("p{}", rng.below(5))]}))],
        18 if !snapshots.is_empty() => {
            let id = snapshots[rng.below(snapshots.len() as u64) as usize];
            vec![update(
                json!({"action": "set-statistics", "statistics": {"snapshot-id": id, "statistics-path": format!("file:///wh/ns/t/stats-{id}.puffin"), "file-size-in-bytes": 10, "file-footer-size-in-bytes": 2, "blob-metadata": []}}),
            )]
        }
        _ => vec![update(json!({"action": "set-location", "location": format!("file:///wh/ns/t{}", rng.below(2))}))],
    }
}

fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(bytes).read_to_string(&mut text).unwrap();
    text
}

/// Runs `steps` random commits from `version`, upgrading to v3 at `upgrade_at`, checking every
/// written document against the metadata it was written from.
fn history(seed: u64, steps: usize, version: FormatVersion, upgrade_at: Option<usize>) -> (usize, usize) {
    let mut rng = Rng(seed);
    let mut metadata = table(version);
    let mut written =
        write(&metadata, refs_of(&serde_json::to_string(&metadata).unwrap(), &metadata).unwrap(), None).unwrap();
    let mut next_id = 1000;
    let (mut commits, mut location) = (0, "file:///wh/ns/t/metadata/00000.metadata.json".to_owned());
    for step in 0..steps {
        let mut updates = random_commit(&mut rng, &metadata, &mut next_id, step);
        if upgrade_at == Some(step) {
            updates = vec![update(json!({"action": "upgrade-format-version", "format-version": 3}))];
        }
        let mut builder = Some(metadata.clone().into_builder(Some(location.clone())));
        for update in updates {
            builder = builder.and_then(|b| update.apply(b).ok());
        }
        let Some(built) = builder.and_then(|b| b.build().ok()) else { continue };
        let layout = written.layout.as_deref().expect("versions 2 and 3 are written in parts");
        let refs = refs_after(layout.refs(), &built.changes, &built.metadata)
            .unwrap_or_else(|| panic!("step {step}: refs not replayed for {:?}", built.changes));
        written = write(&built.metadata, refs.clone(), Some(layout)).unwrap();
        metadata = built.metadata;
        let parsed: TableMetadata = serde_json::from_str(&written.text).unwrap();
        assert_eq!(parsed, metadata, "step {step}: the spliced document differs from the metadata");
        let reference: TableMetadata = serde_json::from_str(&serde_json::to_string(&metadata).unwrap()).unwrap();
        assert_eq!(parsed, reference, "step {step}: the crate's own serialisation reads differently");
        assert_eq!(gunzip(&written.gzip), *written.text, "step {step}: the gzip members are not the document");
        assert_eq!(refs_of(&written.text, &parsed).unwrap(), refs, "step {step}: refs read back differ");
        let layout = written.layout.as_deref().unwrap();
        assert_eq!(
            layout.snapshot_bytes() + crate::metadata_cache::weight_but_snapshots(&metadata),
            crate::metadata_cache::parsed_weight(&metadata),
            "step {step}: the weight kept per chunk is the metadata's"
        );
        if step % 97 == 0 {
            let fresh = write(&metadata, refs, None).unwrap();
            assert_eq!(serde_json::from_str::<TableMetadata>(&fresh.text).unwrap(), metadata);
        }
        location = format!("file:///wh/ns/t/metadata/{step:05}.metadata.json");
        commits += 1;
    }
    (commits, metadata.snapshots().len())
}

#[test]
fn spliced_documents_read_as_the_metadata_over_random_v2_histories() {
    for seed in [1, 7, 42, 1234] {
        let (commits, snapshots) = history(0x9e37_79b9_7f4a_7c15 ^ seed, 700, FormatVersion::V2, None);
        assert!(commits > 500 && snapshots > 40, "seed {seed}: {commits} commits, {snapshots} snapshots");
    }
}

#[test]
fn spliced_documents_read_as_the_metadata_across_an_upgrade_to_v3() {
    let (commits, _) = history(0xdead_beef, 500, FormatVersion::V2, Some(250));
    assert!(commits > 350);
    let (commits, _) = history(0x1234_5678, 300, FormatVersion::V3, None);
    assert!(commits > 200);
}

#[test]
fn an_append_to_a_long_history_compresses_only_what_changed() {
    let mut metadata = table(FormatVersion::V2);
    let refs = refs_of(&serde_json::to_string(&metadata).unwrap(), &metadata).unwrap();
    let mut written = write(&metadata, refs, None).unwrap();
    let (mut rng, mut next_id) = (Rng(99), 1000);
    let (mut step, mut compressed) = (0, Vec::new());
    while metadata.snapshots().len() < 2200 {
        step += 1;
        let updates = random_commit(&mut Rng(rng.next() | 1), &metadata, &mut next_id, step);
        // Appends (expiring the oldest snapshot half the time): a streaming writer's table.
        if !matches!(updates.first(), Some(TableUpdate::AddSnapshot { .. })) || updates.len() > 3 {
            continue;
        }
        let mut builder = metadata.clone().into_builder(Some(format!("file:///wh/ns/t/metadata/{step}.json")));
        for update in updates {
            builder = update.apply(builder).unwrap();
        }
        let built = builder.build().unwrap();
        let layout = written.layout.as_deref().unwrap();
        let refs = refs_after(layout.refs(), &built.changes, &built.metadata).unwrap();
        written = write(&built.metadata, refs, Some(layout)).unwrap();
        metadata = built.metadata;
        if metadata.snapshots().len() >= 2000 {
            compressed.push(written.compressed_bytes);
        }
    }
    // The chunks an append changes (the head, both ends of each array) are as large whatever the
    // history: about a tenth of a 2,000-snapshot document at most, a few percent on average.
    let (largest, mean) = (compressed.iter().max().unwrap(), compressed.iter().sum::<usize>() / compressed.len());
    let size = written.text.len();
    assert!(
        *largest <= 6 * CHUNK_BYTES && mean * 15 < size,
        "appends compressed up to {largest}, {mean} on average, of {size} bytes"
    );
}

#[test]
fn refs_that_do_not_replay_are_refused() {
    let metadata = table(FormatVersion::V2);
    let mut refs = refs_of(&serde_json::to_string(&metadata).unwrap(), &metadata).unwrap();
    refs.insert("ghost".into(), SnapshotReference::new(1, SnapshotRetention::Tag { max_ref_age_ms: None }));
    assert!(refs_after(&refs, &[], &metadata).is_none(), "a ref the metadata does not have is caught");
}
