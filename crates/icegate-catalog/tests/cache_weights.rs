//! Memory estimates against the bytes the allocator hands out: the metadata cache's estimate of
//! what a parsed document holds (`parsed_weight`), and the walk's estimates of what building a
//! schema and parsing a document take at their peak (`SchemaCost::build_bytes`, which the
//! commit budget reserves). One test in this binary, so no other test allocates while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use iceberg::spec::{Schema, TableMetadata};
use icegate_catalog::metadata_cache::parsed_weight;
use icegate_catalog::schema_cost::{SchemaLimits, of_document, of_schema};
use serde_json::json;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting the bytes of live allocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A version 2 document with `snapshots` snapshots (summaries like Spark's) and `columns`
/// columns.
fn document(snapshots: usize, columns: usize) -> String {
    let fields: Vec<_> = (1..=columns)
        .map(|i| json!({"id": i, "name": format!("column_number_{i}"), "required": false, "type": "long"}))
        .collect();
    let snapshots: Vec<_> = (0..snapshots)
        .map(|i| {
            json!({
                "snapshot-id": 1000 + i, "parent-snapshot-id": 999 + i, "sequence-number": i + 1,
                "timestamp-ms": 1_700_000_000_000_i64 + i as i64,
                "manifest-list": format!("s3://bucket/warehouse/db/table/metadata/snap-{}-1-0b1c7e3a-5f1e-4c2d-9e8a-1234567890ab.avro", 1000 + i),
                "summary": {"operation": "append", "added-data-files": "1", "added-records": "1000",
                    "added-files-size": "123456", "changed-partition-count": "1", "total-records": (1000 * i).to_string(),
                    "total-files-size": "99999999", "total-data-files": i.to_string(), "total-delete-files": "0",
                    "spark.app.id": "local-1700000000000"},
                "schema-id": 0
            })
        })
        .collect();
    let log: Vec<_> = (0..snapshots.len())
        .map(|i| json!({"snapshot-id": 1000 + i, "timestamp-ms": 1_700_000_000_000_i64 + i as i64}))
        .collect();
    let last = snapshots.len().checked_sub(1).map(|i| 1000 + i);
    let mut doc = json!({
        "format-version": 2, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1", "location": "s3://bucket/warehouse/db/table",
        "last-sequence-number": snapshots.len(), "last-updated-ms": 1_700_000_000_000_i64, "last-column-id": columns,
        "current-schema-id": 0, "schemas": [{"type": "struct", "schema-id": 0, "fields": fields}],
        "default-spec-id": 0, "partition-specs": [{"spec-id": 0, "fields": []}], "last-partition-id": 999,
        "default-sort-order-id": 0, "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {"owner": "etl", "write.format.default": "parquet"},
        "snapshots": snapshots, "snapshot-log": log
    });
    if let Some(last) = last {
        doc["current-snapshot-id"] = json!(last);
        doc["refs"] = json!({"main": {"snapshot-id": last, "type": "branch"}});
    }
    doc.to_string()
}

/// A schema of `columns` columns under `parents` structs named with `parent_name` bytes each
/// (nested `depth` deep), plus a list and a map; the innermost struct carries a member the
/// `iceberg` crate ignores, of `junk` zeros (the parser buffers it at every level all the same).
fn schema(columns: usize, parent_name: usize, depth: usize, junk: usize) -> String {
    let mut id = 0;
    let mut next = || {
        id += 1;
        id
    };
    let leaves: Vec<_> = (0..columns)
        .map(|i| json!({"id": next(), "name": format!("column_number_{i}"), "required": false, "type": "long"}))
        .collect();
    let mut inner = json!({"type": "struct", "fields": leaves});
    if junk > 0 {
        inner["x-junk"] = json!(vec![0; junk / 2]);
    }
    for level in 0..depth {
        let name = format!("{}{level}", "p".repeat(parent_name));
        inner = json!({"type": "struct", "fields": [{"id": next(), "name": name, "required": false, "type": inner}]});
    }
    let (element, key, value) = (next(), next(), next());
    let mut fields = inner["fields"].as_array().unwrap().clone();
    fields.push(json!({"id": next(), "name": "tags", "required": false,
        "type": {"type": "list", "element-id": element, "element": "string", "element-required": false}}));
    fields.push(json!({"id": next(), "name": "attributes", "required": false,
        "type": {"type": "map", "key-id": key, "key": "string", "value-id": value, "value": "string", "value-required": false}}));
    json!({"type": "struct", "schema-id": 0, "fields": fields}).to_string()
}

#[test]
fn estimates_are_close_to_what_the_allocator_hands_out() {
    // What the commit budget reserves for building a schema covers its peak, without
    // overstating it many times.
    let limits = SchemaLimits::default();
    let shapes = [
        (2000, 0, 0, 0),
        (200, 10, 3, 0),
        (2000, 1000, 1, 0),
        (20_000, 8, 2, 0),
        (10, 8, 30, 200_000),
        (250, 1000, 31, 0),
    ];
    for (columns, parent_name, depth, junk) in shapes {
        let text = schema(columns, parent_name, depth, junk);
        let estimate = of_schema(&text, &limits).unwrap().build_bytes() as f64;
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let built: Schema = serde_json::from_str(&text).unwrap();
        let peak = (PEAK.load(Ordering::Relaxed) - before) as f64;
        drop(built);
        let ratio = estimate / peak;
        assert!(
            (1.0..=3.0).contains(&ratio),
            "{columns} columns under {depth} parents named {parent_name} bytes, {junk} bytes of unknown members: \
             estimated {estimate} bytes, building peaks at {peak} ({ratio:.2})"
        );
    }
    the_estimate_of_a_parsed_document_is_close_to_what_parsing_allocates();
}

fn the_estimate_of_a_parsed_document_is_close_to_what_parsing_allocates() {
    for (snapshots, columns) in [(2000, 10), (100, 10), (20, 500), (5000, 40)] {
        let text = document(snapshots, columns);
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let parsed: TableMetadata = serde_json::from_str(&text).unwrap();
        let held = (LIVE.load(Ordering::Relaxed) - before) as f64;
        let peak = (PEAK.load(Ordering::Relaxed) - before) as f64;
        // What the commit budget reserves for parsing a document covers the parse's peak.
        let walked = of_document(&text, &SchemaLimits::default()).unwrap().build_bytes() as f64;
        assert!(
            (1.0..=3.0).contains(&(walked / peak)),
            "{snapshots} snapshots, {columns} columns: the walk estimated {walked} bytes, parsing peaks at {peak}"
        );
        let estimate = parsed_weight(&parsed) as f64;
        let ratio = estimate / held;
        assert!(
            (0.75..=1.5).contains(&ratio),
            "{snapshots} snapshots, {columns} columns: estimated {estimate} bytes, parsing holds {held} ({ratio:.2})"
        );
        drop(parsed);
    }
}
