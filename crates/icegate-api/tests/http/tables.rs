//! Table endpoints: create, load (ETag), commit (every requirement and update type), races,
//! transactions, drop and purge, rename, register, listing, metrics reports.

use std::path::Path as FsPath;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{TestApp, assert_error};
use crate::http_tests;

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 10, "name": "id", "required": true, "type": "long"},
        {"id": 20, "name": "data", "required": false, "type": "string"},
        {"id": 30, "name": "ts", "required": false, "type": "timestamp"},
    ]})
}

async fn create(app: &TestApp, ns: &str, name: &str, extra: Value) -> Value {
    let mut body = json!({"name": name, "schema": schema()});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, created) = app.post(&format!("/v1/{{prefix}}/namespaces/{ns}/tables"), body).await;
    assert_eq!(status, 200, "{created}");
    created
}

async fn commit(app: &TestApp, table: &str, requirements: Value, updates: Value) -> (StatusCode, Value) {
    app.post(
        &format!("/v1/{{prefix}}/namespaces/db/tables/{table}"),
        json!({"requirements": requirements, "updates": updates}),
    )
    .await
}

async fn load(app: &TestApp, table: &str) -> Value {
    let (status, body) = app.get(&format!("/v1/{{prefix}}/namespaces/db/tables/{table}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 + 1000
}

fn local(location: &str) -> &FsPath {
    FsPath::new(location.strip_prefix("file://").unwrap())
}

fn files_under(dir: &FsPath) -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                found.extend(files_under(&path));
            } else {
                found.push(path.display().to_string());
            }
        }
    }
    found.sort();
    found
}

async fn a_created_table_is_loaded_from_the_catalog_with_its_file_on_disk(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let created = create(&app, "db", "events", json!({"properties": {"owner": "eng"}})).await;
    let location = created["metadata-location"].as_str().unwrap();
    assert!(location.ends_with(".metadata.json") && location.contains("/metadata/00000-"), "{location}");
    assert!(local(location).is_file(), "metadata file written");
    let metadata = &created["metadata"];
    assert_eq!(metadata["format-version"], 2);
    // Field ids are re-assigned from 1, as the spec says for a new table.
    let ids: Vec<i64> =
        metadata["schemas"][0]["fields"].as_array().unwrap().iter().map(|f| f["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3]);
    assert_eq!(metadata["properties"]["owner"], "eng");
    let table_location = metadata["location"].as_str().unwrap();
    assert!(table_location.starts_with(&format!("{}/db/events-", app.root())), "{table_location}");
    let loaded = load(&app, "events").await;
    assert_eq!(loaded["metadata-location"], created["metadata-location"]);
    assert_eq!(loaded["metadata"], created["metadata"]);
    assert!(loaded["config"].is_object());
    assert_eq!(app.head("/v1/{prefix}/namespaces/db/tables/events").await, 204);
    assert_eq!(app.head("/v1/{prefix}/namespaces/db/tables/nope").await, 404);
    assert_error(app.get("/v1/{prefix}/namespaces/db/tables/nope").await, 404, "NoSuchTableException");
    assert_error(
        app.post("/v1/{prefix}/namespaces/missing/tables", json!({"name": "t", "schema": schema()})).await,
        404,
        "NoSuchNamespaceException",
    );
}

async fn a_create_that_fails_after_writing_its_file_removes_it(app: TestApp) {
    app.create_namespace(&["db"]).await;
    create(&app, "db", "t", json!({})).await;
    let before = files_under(std::path::Path::new(&app.root()[7..]));
    // The name is taken: the second create writes its metadata file, then the insert fails.
    let here = format!("{}/fixed/place", app.root());
    assert_error(
        app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": "t", "schema": schema(), "location": here})).await,
        409,
        "AlreadyExistsException",
    );
    assert_eq!(files_under(std::path::Path::new(&app.root()[7..])), before, "no orphaned metadata file");
}

async fn format_versions_one_to_three_are_honoured(app: TestApp) {
    app.create_namespace(&["db"]).await;
    for version in [1, 2, 3] {
        let created =
            create(&app, "db", &format!("v{version}"), json!({"properties": {"format-version": version.to_string()}}))
                .await;
        assert_eq!(created["metadata"]["format-version"], version);
        assert!(created["metadata"]["properties"].get("format-version").is_none());
    }
    assert_error(
        app.post(
            "/v1/{prefix}/namespaces/db/tables",
            json!({"name": "v9", "schema": schema(), "properties": {"format-version": "9"}}),
        )
        .await,
        400,
        "BadRequestException",
    );
}

async fn partition_spec_and_sort_order_are_kept(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let created = create(
        &app,
        "db",
        "parted",
        json!({
            "partition-spec": {"fields": [{"source-id": 30, "transform": "day", "name": "ts_day"}]},
            "write-order": {"order-id": 1, "fields": [{"source-id": 10, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}]},
        }),
    )
    .await;
    let metadata = &created["metadata"];
    let spec = &metadata["partition-specs"][0];
    assert_eq!(spec["fields"][0]["transform"], "day");
    assert_eq!(spec["fields"][0]["source-id"], 3, "source ids follow the re-assigned field ids");
    assert_eq!(
        metadata["sort-orders"].as_array().unwrap().iter().find(|o| o["order-id"] == 1).unwrap()["fields"][0]["source-id"],
        1
    );
}

async fn etags_answer_304_until_the_table_changes(app: TestApp) {
    app.create_namespace(&["db"]).await;
    create(&app, "db", "t", json!({})).await;
    let url = app.url("/v1/{prefix}/namespaces/db/tables/t");
    let first = app.client.get(&url).send().await.unwrap();
    let etag = first.headers()["etag"].to_str().unwrap().to_owned();
    let cached = app.client.get(&url).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(cached.status(), 304);
    assert_eq!(cached.headers()["etag"].to_str().unwrap(), etag);
    assert!(cached.text().await.unwrap().is_empty());
    let refs = app.client.get(format!("{url}?snapshots=refs")).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(refs.status(), 200, "another representation has another ETag");
    let (status, _) = commit(&app, "t", json!([]), json!([{"action": "set-properties", "updates": {"k": "v"}}])).await;
    assert_eq!(status, 200);
    let changed = app.client.get(&url).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(changed.status(), 200);
    assert_ne!(changed.headers()["etag"].to_str().unwrap(), etag);
    assert_error(app.get("/v1/{prefix}/namespaces/db/tables/t?snapshots=some").await, 400, "BadRequestException");
}

async fn every_requirement_type_is_checked(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let created = create(&app, "db", "t", json!({})).await;
    let uuid = created["metadata"]["table-uuid"].as_str().unwrap().to_owned();
    let holds = json!([
        {"type": "assert-table-uuid", "uuid": uuid},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null},
        {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 3},
        {"type": "assert-current-schema-id", "current-schema-id": 0},
        {"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": 999},
        {"type": "assert-default-spec-id", "default-spec-id": 0},
        {"type": "assert-default-sort-order-id", "default-sort-order-id": 0},
    ]);
    let (status, body) =
        commit(&app, "t", holds.clone(), json!([{"action": "set-properties", "updates": {"a": "1"}}])).await;
    assert_eq!(status, 200, "{body}");
    let failing = [
        json!({"type": "assert-create"}),
        json!({"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}),
        json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 42}),
        json!({"type": "assert-last-assigned-field-id", "last-assigned-field-id": 7}),
        json!({"type": "assert-current-schema-id", "current-schema-id": 5}),
        json!({"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": 1000}),
        json!({"type": "assert-default-spec-id", "default-spec-id": 3}),
        json!({"type": "assert-default-sort-order-id", "default-sort-order-id": 2}),
    ];
    let before = load(&app, "t").await;
    for requirement in failing {
        assert_error(
            commit(&app, "t", json!([requirement]), json!([{"action": "set-properties", "updates": {"b": "2"}}])).await,
            409,
            "CommitFailedException",
        );
    }
    assert_eq!(load(&app, "t").await["metadata-location"], before["metadata-location"], "nothing was applied");
    assert_error(commit(&app, "t", json!([{"type": "assert-nothing"}]), json!([])).await, 400, "BadRequestException");
    assert_error(commit(&app, "t", json!([]), json!([{"action": "make-it-fast"}])).await, 400, "BadRequestException");
    assert_error(
        app.post("/v1/{prefix}/namespaces/db/tables/ghost", json!({"requirements": [], "updates": []})).await,
        404,
        "NoSuchTableException",
    );
}

async fn every_update_action_applies(app: TestApp) {
    app.create_namespace(&["db"]).await;
    create(&app, "db", "t", json!({"properties": {"drop-me": "x"}})).await;
    let manifest_list = format!("{}/db/t/metadata/snap-1.avro", app.root());
    let new_location = format!("{}/db/t-moved", app.root());
    // A table's uuid is its own: assigning another is refused and changes nothing; its own is
    // accepted (clients send it in create transactions).
    let uuid = load(&app, "t").await["metadata"]["table-uuid"].as_str().unwrap().to_owned();
    let other = json!([{"action": "assign-uuid", "uuid": "11111111-2222-3333-4444-555555555555"}]);
    assert_error(commit(&app, "t", json!([]), other).await, 400, "BadRequestException");
    assert_eq!(load(&app, "t").await["metadata"]["table-uuid"], uuid.as_str());
    let updates = json!([
        {"action": "assign-uuid", "uuid": uuid},
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "set-properties", "updates": {"k": "v"}},
        {"action": "remove-properties", "removals": ["drop-me"]},
        {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "data", "required": false, "type": "string"},
            {"id": 3, "name": "ts", "required": false, "type": "timestamp"},
            {"id": 4, "name": "extra", "required": false, "type": "int"}]}},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"fields": [{"source-id": 1, "field-id": 1000, "transform": "bucket[4]", "name": "id_bucket"}]}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 1, "fields": [{"source-id": 1, "transform": "identity", "direction": "desc", "null-order": "nulls-last"}]}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": new_location},
        {"action": "add-snapshot", "snapshot": {"snapshot-id": 1, "timestamp-ms": now_ms(), "sequence-number": 1,
            "manifest-list": manifest_list, "summary": {"operation": "append"}, "schema-id": 1}},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1},
        {"action": "set-snapshot-ref", "ref-name": "audit", "type": "tag", "snapshot-id": 1},
        {"action": "set-statistics", "snapshot-id": 1, "statistics": {"snapshot-id": 1, "statistics-path": format!("{}/db/t/s.puffin", app.root()),
            "file-size-in-bytes": 10, "file-footer-size-in-bytes": 2, "blob-metadata": []}},
        {"action": "set-partition-statistics", "partition-statistics": {"snapshot-id": 1,
            "statistics-path": format!("{}/db/t/p.parquet", app.root()), "file-size-in-bytes": 10}},
    ]);
    let (status, body) = commit(&app, "t", json!([]), updates).await;
    assert_eq!(status, 200, "{body}");
    let m = &body["metadata"];
    assert_eq!(m["table-uuid"], uuid.as_str());
    assert_eq!(m["properties"], json!({"k": "v"}));
    assert_eq!(m["current-schema-id"], 1);
    assert_eq!(m["default-spec-id"], 1);
    assert_eq!(m["default-sort-order-id"], 1);
    assert_eq!(m["location"], new_location.as_str());
    assert_eq!(m["current-snapshot-id"], 1);
    assert_eq!(m["refs"]["audit"]["type"], "tag");
    assert_eq!(m["statistics"].as_array().unwrap().len(), 1);
    assert_eq!(m["partition-statistics"].as_array().unwrap().len(), 1);
    assert!(body["metadata-location"].as_str().unwrap().starts_with(&format!("{new_location}/metadata/00001-")));
    assert_eq!(m["metadata-log"].as_array().unwrap().len(), 1, "the previous file is in the metadata log");

    let removals = json!([
        {"action": "remove-statistics", "snapshot-id": 1},
        {"action": "remove-partition-statistics", "snapshot-id": 1},
        {"action": "remove-snapshot-ref", "ref-name": "audit"},
        {"action": "remove-schemas", "schema-ids": [0]},
        {"action": "remove-partition-specs", "spec-ids": [0]},
    ]);
    let (status, body) = commit(&app, "t", json!([]), removals).await;
    assert_eq!(status, 200, "{body}");
    let m = &body["metadata"];
    assert!(m["statistics"].as_array().is_none_or(|s| s.is_empty()), "{m}");
    assert!(m["refs"].get("audit").is_none());
    assert_eq!(m["schemas"].as_array().unwrap().len(), 1);
    assert_eq!(m["partition-specs"].as_array().unwrap().len(), 1);
    let (status, body) = commit(
        &app,
        "t",
        json!([]),
        json!([{"action": "remove-snapshot-ref", "ref-name": "main"}, {"action": "remove-snapshots", "snapshot-ids": [1]}]),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["metadata"]["snapshots"].as_array().is_none_or(|s| s.is_empty()), "{body}");
    // Encryption keys exist from format version 3 on.
    create(&app, "db", "v3", json!({"properties": {"format-version": "3"}})).await;
    let key =
        json!([{"action": "add-encryption-key", "encryption-key": {"key-id": "k1", "encrypted-key-metadata": "AAAA"}}]);
    let (status, body) = commit(&app, "v3", json!([]), key).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["metadata"]["encryption-keys"].as_array().unwrap().len(), 1, "{body}");
    let (status, body) =
        commit(&app, "v3", json!([]), json!([{"action": "remove-encryption-key", "key-id": "k1"}])).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["metadata"]["encryption-keys"].as_array().is_none_or(|k| k.is_empty()), "{body}");
    // The snapshots=refs representation of a table with no refs has no snapshots.
    let (_, refs) = app.get("/v1/{prefix}/namespaces/db/tables/t?snapshots=refs").await;
    assert!(refs["metadata"]["snapshots"].as_array().is_none_or(|s| s.is_empty()));
}

async fn format_version_3_assigns_row_ids_to_snapshots(app: TestApp) {
    app.create_namespace(&["db"]).await;
    create(&app, "db", "v3", json!({"properties": {"format-version": "3"}})).await;
    let snapshot = |id: i64, parent: Option<i64>, first_row_id: u64, added: u64| {
        let mut s = json!({"snapshot-id": id, "timestamp-ms": now_ms() + id, "sequence-number": id,
            "manifest-list": format!("{}/m{id}.avro", app.root()), "summary": {"operation": "append"},
            "first-row-id": first_row_id, "added-rows": added});
        if let Some(parent) = parent {
            s["parent-snapshot-id"] = json!(parent);
        }
        json!([{"action": "add-snapshot", "snapshot": s},
               {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": id}])
    };
    let (status, body) = commit(&app, "v3", json!([]), snapshot(1, None, 0, 10)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["metadata"]["next-row-id"], 10);
    // A snapshot whose first row id is behind the table's next-row-id is refused.
    assert_error(commit(&app, "v3", json!([]), snapshot(2, Some(1), 5, 10)).await, 400, "BadRequestException");
    let (status, body) = commit(&app, "v3", json!([]), snapshot(2, Some(1), 10, 5)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["metadata"]["next-row-id"], 15);
}

async fn a_rejected_commit_leaves_no_file_behind(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let created = create(&app, "db", "t", json!({})).await;
    let metadata_dir = local(created["metadata-location"].as_str().unwrap()).parent().unwrap().to_owned();
    let before = files_under(&metadata_dir);
    // Invalid: a schema id that does not exist; a location outside the warehouse.
    assert_error(
        commit(&app, "t", json!([]), json!([{"action": "set-current-schema", "schema-id": 7}])).await,
        400,
        "BadRequestException",
    );
    assert_error(
        commit(&app, "t", json!([]), json!([{"action": "set-location", "location": "file:///etc/evil"}])).await,
        400,
        "BadRequestException",
    );
    assert_eq!(files_under(&metadata_dir), before);
    assert_eq!(load(&app, "t").await["metadata-location"], created["metadata-location"]);
}

async fn the_metadata_log_is_capped_and_old_files_deleted_when_asked(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let created = create(
        &app,
        "db",
        "t",
        json!({"properties": {"write.metadata.previous-versions-max": "1", "write.metadata.delete-after-commit.enabled": "true"}}),
    )
    .await;
    let mut locations = vec![created["metadata-location"].as_str().unwrap().to_owned()];
    for i in 0..3 {
        let (status, body) =
            commit(&app, "t", json!([]), json!([{"action": "set-properties", "updates": {"i": i.to_string()}}])).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["metadata"]["metadata-log"].as_array().unwrap().len(), 1, "capped at one previous version");
        locations.push(body["metadata-location"].as_str().unwrap().to_owned());
    }
    // Versions 0 and 1 fell out of the log and were deleted; 2 (in the log) and 3 (current) remain.
    assert!(!local(&locations[0]).exists());
    assert!(!local(&locations[1]).exists());
    assert!(local(&locations[2]).is_file());
    assert!(local(&locations[3]).is_file());
}

async fn concurrent_commits_lose_nothing(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let created = create(&app, "db", "hot", json!({})).await;
    let uuid = created["metadata"]["table-uuid"].as_str().unwrap().to_owned();
    let app = std::sync::Arc::new(app);
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let (app, uuid) = (app.clone(), uuid.clone());
            tokio::spawn(async move {
                let (status, body) = commit(
                    &app,
                    "hot",
                    json!([{"type": "assert-table-uuid", "uuid": uuid}]),
                    json!([{"action": "set-properties", "updates": {format!("writer-{i}"): "done"}}]),
                )
                .await;
                (i, status, body)
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for task in tasks {
        let (i, status, body) = task.await.unwrap();
        match status.as_u16() {
            200 => acknowledged.push(i),
            409 => assert_eq!(body["error"]["type"], "CommitFailedException"),
            other => panic!("writer {i} got {other}: {body}"),
        }
    }
    let properties = &load(&app, "hot").await["metadata"]["properties"];
    for i in &acknowledged {
        assert_eq!(properties[format!("writer-{i}")], "done", "acknowledged commit {i} is missing");
    }
    // Non-conflicting updates are re-applied on the new metadata, so (nearly) all succeed.
    assert!(acknowledged.len() >= 16, "only {} of 32 commits succeeded", acknowledged.len());
}

async fn conflicting_concurrent_commits_get_409_and_keep_every_acknowledged_one(app: TestApp) {
    app.create_namespace(&["db"]).await;
    create(&app, "db", "snap", json!({})).await;
    let app = std::sync::Arc::new(app);
    let root = app.root();
    let tasks: Vec<_> = (1..=8)
        .map(|i| {
            let (app, root) = (app.clone(), root.clone());
            tokio::spawn(async move {
                // Every writer believes main has no snapshot yet: only one can be right.
                let (status, _) = commit(
                    &app,
                    "snap",
                    json!([{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null}]),
                    json!([
                        {"action": "add-snapshot", "snapshot": {"snapshot-id": i, "timestamp-ms": now_ms() + i,
                            "sequence-number": 1, "manifest-list": format!("{root}/m{i}.avro"), "summary": {"operation": "append"}}},
                        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": i},
                    ]),
                )
                .await;
                (i, status.as_u16())
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let (i, status) = task.await.unwrap();
        assert!(status == 200 || status == 409, "unexpected {status}");
        if status == 200 {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one writer may win: {winners:?}");
    let metadata = &load(&app, "snap").await["metadata"];
    assert_eq!(metadata["current-snapshot-id"], winners[0]);
}

async fn a_transaction_applies_all_or_nothing(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let a = create(&app, "db", "a", json!({})).await;
    let b = create(&app, "db", "b", json!({})).await;
    let change = |name: &str, requirement: Value| {
        json!({"identifier": {"namespace": ["db"], "name": name}, "requirements": [requirement],
               "updates": [{"action": "set-properties", "updates": {"txn": "1"}}]})
    };
    let ok_a = change("a", json!({"type": "assert-table-uuid", "uuid": a["metadata"]["table-uuid"]}));
    let bad_b = change("b", json!({"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}));
    assert_error(
        app.post("/v1/{prefix}/transactions/commit", json!({"table-changes": [ok_a.clone(), bad_b]})).await,
        409,
        "CommitFailedException",
    );
    assert_eq!(load(&app, "a").await["metadata-location"], a["metadata-location"], "a was rolled back");
    let ok_b = change("b", json!({"type": "assert-table-uuid", "uuid": b["metadata"]["table-uuid"]}));
    let (status, body) = app.post("/v1/{prefix}/transactions/commit", json!({"table-changes": [ok_a, ok_b]})).await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(load(&app, "a").await["metadata"]["properties"]["txn"], "1");
    assert_eq!(load(&app, "b").await["metadata"]["properties"]["txn"], "1");
    assert_error(
        app.post("/v1/{prefix}/transactions/commit", json!({"table-changes": [{"requirements": [], "updates": []}]}))
            .await,
        400,
        "BadRequestException",
    );
    assert_error(
        app.post(
            "/v1/{prefix}/transactions/commit",
            json!({"table-changes": [change("ghost", json!({"type": "assert-create"}))]}),
        )
        .await,
        400,
        "BadRequestException",
    );
}

async fn a_staged_create_becomes_a_table_on_its_assert_create_commit(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let staged = create(&app, "db", "staged", json!({"stage-create": true})).await;
    assert_eq!(staged["metadata-location"], Value::Null);
    assert_eq!(app.head("/v1/{prefix}/namespaces/db/tables/staged").await, 404, "not created yet");
    let m = &staged["metadata"];
    let updates = json!([
        {"action": "assign-uuid", "uuid": m["table-uuid"]},
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "add-schema", "schema": m["schemas"][0]},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": m["partition-specs"][0]},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": m["sort-orders"][0]},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": m["location"]},
        {"action": "set-properties", "updates": {"created-by": "test"}},
    ]);
    let (status, body) = commit(&app, "staged", json!([{"type": "assert-create"}]), updates.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["metadata"]["table-uuid"], m["table-uuid"]);
    assert_eq!(body["metadata"]["properties"]["created-by"], "test");
    assert!(local(body["metadata-location"].as_str().unwrap()).is_file());
    assert_error(
        commit(&app, "staged", json!([{"type": "assert-create"}]), updates).await,
        409,
        "CommitFailedException",
    );
}

async fn explicit_locations_stay_inside_the_warehouse_and_apart(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let here = format!("{}/custom/here", app.root());
    let created = create(&app, "db", "placed", json!({"location": format!("{here}/")})).await;
    assert_eq!(created["metadata"]["location"], here.as_str());
    for (name, location) in [
        ("outside", "file:///tmp/elsewhere".to_owned()),
        ("root", app.root()),
        ("same", here.clone()),
        ("inside", format!("{here}/nested")),
        ("around", format!("{}/custom", app.root())),
        ("dots", format!("{}/custom/../x", app.root())),
    ] {
        let (status, body) = app
            .post("/v1/{prefix}/namespaces/db/tables", json!({"name": name, "schema": schema(), "location": location}))
            .await;
        assert_error((status, body), 400, "BadRequestException");
    }
    // A sibling whose name merely starts the same way is fine.
    create(&app, "db", "sibling", json!({"location": format!("{here}2")})).await;
}

async fn invalid_table_names_are_400(app: TestApp) {
    app.create_namespace(&["db"]).await;
    for name in ["", "a/b", "..", "nul\u{0}", &"x".repeat(256)] {
        assert_error(
            app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": name, "schema": schema()})).await,
            400,
            "BadRequestException",
        );
    }
    assert_error(app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": "t"})).await, 400, "BadRequestException");
    let (_, list) = app.get("/v1/{prefix}/namespaces/db/tables").await;
    assert_eq!(list["identifiers"], json!([]));
}

async fn drop_keeps_files_and_purge_removes_only_the_tables(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let kept = create(&app, "db", "kept", json!({})).await;
    let purged = create(&app, "db", "purged", json!({})).await;
    let neighbour = create(&app, "db", "neighbour", json!({})).await;
    let purged_dir = local(purged["metadata"]["location"].as_str().unwrap()).to_owned();
    std::fs::create_dir_all(purged_dir.join("data")).unwrap();
    std::fs::write(purged_dir.join("data/part-0.parquet"), b"rows").unwrap();

    assert_eq!(app.delete("/v1/{prefix}/namespaces/db/tables/kept").await.0, 204);
    assert!(local(kept["metadata-location"].as_str().unwrap()).is_file(), "drop without purge keeps files");
    assert_eq!(app.delete("/v1/{prefix}/namespaces/db/tables/purged?purgeRequested=true").await.0, 204);
    assert!(!purged_dir.exists(), "purge removes the table's directory");
    assert!(local(neighbour["metadata-location"].as_str().unwrap()).is_file(), "other tables are untouched");
    assert_error(app.delete("/v1/{prefix}/namespaces/db/tables/purged").await, 404, "NoSuchTableException");
    assert_error(
        app.delete("/v1/{prefix}/namespaces/db/tables/neighbour?purgeRequested=maybe").await,
        400,
        "BadRequestException",
    );
    assert_eq!(app.delete("/v1/{prefix}/namespaces/db/tables/neighbour?purgeRequested=False").await.0, 204);
}

async fn a_namespace_holding_a_table_cannot_be_dropped(app: TestApp) {
    app.create_namespace(&["db"]).await;
    create(&app, "db", "t", json!({})).await;
    assert_error(app.delete("/v1/{prefix}/namespaces/db").await, 409, "NamespaceNotEmptyException");
    assert_eq!(app.delete("/v1/{prefix}/namespaces/db/tables/t").await.0, 204);
    assert_eq!(app.delete("/v1/{prefix}/namespaces/db").await.0, 204);
}

async fn tables_are_renamed_within_and_across_namespaces(app: TestApp) {
    app.create_namespace(&["db"]).await;
    app.create_namespace(&["other"]).await;
    let created = create(&app, "db", "t", json!({})).await;
    create(&app, "db", "taken", json!({})).await;
    let rename = |from: (&str, &str), to: (&str, &str)| json!({"source": {"namespace": [from.0], "name": from.1}, "destination": {"namespace": [to.0], "name": to.1}});
    assert_error(
        app.post("/v1/{prefix}/tables/rename", rename(("db", "t"), ("db", "taken"))).await,
        409,
        "AlreadyExistsException",
    );
    assert_error(
        app.post("/v1/{prefix}/tables/rename", rename(("db", "nope"), ("db", "x"))).await,
        404,
        "NoSuchTableException",
    );
    assert_error(
        app.post("/v1/{prefix}/tables/rename", rename(("db", "t"), ("ghost", "x"))).await,
        404,
        "NoSuchNamespaceException",
    );
    assert_eq!(app.post("/v1/{prefix}/tables/rename", rename(("db", "t"), ("other", "moved"))).await.0, 204);
    assert_eq!(app.head("/v1/{prefix}/namespaces/db/tables/t").await, 404);
    let (_, moved) = app.get("/v1/{prefix}/namespaces/other/tables/moved").await;
    assert_eq!(moved["metadata-location"], created["metadata-location"]);
}

async fn a_table_is_registered_from_its_metadata_file(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let original = create(&app, "db", "orig", json!({})).await;
    let location = original["metadata-location"].as_str().unwrap().to_owned();
    // Its location is taken while the original exists.
    let register =
        |name: &str, overwrite: bool| json!({"name": name, "metadata-location": location, "overwrite": overwrite});
    assert_error(
        app.post("/v1/{prefix}/namespaces/db/register", register("copy", false)).await,
        400,
        "BadRequestException",
    );
    assert_eq!(app.delete("/v1/{prefix}/namespaces/db/tables/orig").await.0, 204);
    let (status, registered) = app.post("/v1/{prefix}/namespaces/db/register", register("again", false)).await;
    assert_eq!(status, 200, "{registered}");
    assert_eq!(registered["metadata-location"], location.as_str());
    assert_eq!(registered["metadata"]["table-uuid"], original["metadata"]["table-uuid"]);
    // Registering the same name again: the name is taken (checked before the location).
    assert_error(
        app.post("/v1/{prefix}/namespaces/db/register", register("again", false)).await,
        409,
        "AlreadyExistsException",
    );
    // overwrite repoints an existing table (here: at a newer file of the same table).
    let (status, committed) =
        commit(&app, "again", json!([]), json!([{"action": "set-properties", "updates": {"v": "2"}}])).await;
    assert_eq!(status, 200);
    let (status, _) = app.post("/v1/{prefix}/namespaces/db/register", register("again", true)).await;
    assert_eq!(status, 200);
    assert_eq!(load(&app, "again").await["metadata-location"], location.as_str());
    assert_ne!(committed["metadata-location"], location.as_str());
    for bad in [
        json!({"name": "x", "metadata-location": "file:///etc/passwd"}),
        json!({"name": "x", "metadata-location": format!("{}/db/none.metadata.json", app.root())}),
    ] {
        assert_error(app.post("/v1/{prefix}/namespaces/db/register", bad).await, 400, "BadRequestException");
    }
}

async fn tables_are_listed_with_pagination(app: TestApp) {
    app.create_namespace(&["db"]).await;
    for i in 0..5 {
        create(&app, "db", &format!("t{i}"), json!({})).await;
    }
    let (_, all) = app.get("/v1/{prefix}/namespaces/db/tables").await;
    assert_eq!(all["identifiers"].as_array().unwrap().len(), 5);
    assert_eq!(all["identifiers"][0], json!({"namespace": ["db"], "name": "t0"}));
    let (_, first) = app.get("/v1/{prefix}/namespaces/db/tables?pageToken=&pageSize=3").await;
    assert_eq!(first["identifiers"].as_array().unwrap().len(), 3);
    let token = first["next-page-token"].as_str().unwrap();
    let (_, second) = app.get(&format!("/v1/{{prefix}}/namespaces/db/tables?pageToken={token}&pageSize=3")).await;
    assert_eq!(
        second["identifiers"],
        json!([{"namespace": ["db"], "name": "t3"}, {"namespace": ["db"], "name": "t4"}])
    );
    assert_eq!(second["next-page-token"], Value::Null);
    assert_error(app.get("/v1/{prefix}/namespaces/ghost/tables").await, 404, "NoSuchNamespaceException");
}

async fn metrics_reports_are_validated_and_counted(app: TestApp) {
    app.create_namespace(&["db"]).await;
    create(&app, "db", "t", json!({})).await;
    let report = json!({"report-type": "commit-report", "table-name": "db.t", "snapshot-id": 1, "sequence-number": 1,
                        "operation": "append", "metrics": {}});
    let (status, _) = app.post("/v1/{prefix}/namespaces/db/tables/t/metrics", report.clone()).await;
    assert_eq!(status, 204);
    assert_error(
        app.post("/v1/{prefix}/namespaces/db/tables/ghost/metrics", report).await,
        404,
        "NoSuchTableException",
    );
    assert_error(
        app.post(
            "/v1/{prefix}/namespaces/db/tables/t/metrics",
            json!({"report-type": "x", "table-name": "db.t", "snapshot-id": 1, "metrics": {}}),
        )
        .await,
        400,
        "BadRequestException",
    );
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"icegate_table_metrics_reports_total{report_type="commit-report"} 1"#), "{metrics}");
}

/// GET a table's URL with `Accept-Encoding`, returning the Content-Encoding and the JSON body
/// (decompressed as a client does: a gzip stream of several members).
async fn load_encoded(app: &TestApp, path: &str, accept: &str) -> (Option<String>, Value) {
    let response = app.client.get(app.url(path)).header("accept-encoding", accept).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let encoding = response.headers().get("content-encoding").map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.bytes().await.unwrap();
    let text = if encoding.as_deref() == Some("gzip") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(&bytes[..]), &mut text).unwrap();
        text
    } else {
        String::from_utf8(bytes.to_vec()).unwrap()
    };
    (encoding, serde_json::from_str(&text).unwrap())
}

/// A big table's load is gzip-compressed for clients that ask (the document once per metadata
/// file), decompresses to exactly the plain answer, full and `snapshots=refs` alike, and
/// follows each commit; `q=0` and small tables go out plain.
async fn big_tables_load_gzip_compressed_and_refs_from_memory(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let properties: serde_json::Map<String, Value> =
        (0..300).map(|i| (format!("property-{i:04}"), json!(format!("value {i} of a table with history")))).collect();
    create(&app, "db", "big", json!({"properties": properties})).await;
    create(&app, "db", "small", json!({})).await;
    let root = app.root();
    for i in 1..=5 {
        let mut updates =
            vec![json!({"action": "add-snapshot", "snapshot": {"snapshot-id": i, "timestamp-ms": now_ms() + i,
            "sequence-number": i, "manifest-list": format!("{root}/m{i}.avro"), "summary": {"operation": "append"}}})];
        if i % 2 == 1 {
            updates.push(json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": i}));
        }
        assert_eq!(commit(&app, "big", json!([]), Value::Array(updates)).await.0, 200);
        for path in ["/v1/{prefix}/namespaces/db/tables/big", "/v1/{prefix}/namespaces/db/tables/big?snapshots=refs"] {
            let (_, plain) = app.get(path).await;
            for _ in 0..2 {
                let (encoding, zipped) = load_encoded(&app, path, "deflate, gzip;q=0.8, br").await;
                assert_eq!(encoding.as_deref(), Some("gzip"), "{path}");
                assert_eq!(zipped, plain, "{path} after commit {i}");
            }
            let (encoding, body) = load_encoded(&app, path, "gzip;q=0, identity").await;
            assert_eq!((encoding, body), (None, plain));
        }
        let (_, refs) = app.get("/v1/{prefix}/namespaces/db/tables/big?snapshots=refs").await;
        let ids: Vec<i64> = refs["metadata"]["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["snapshot-id"].as_i64().unwrap())
            .collect();
        let main = if i % 2 == 1 { i } else { i - 1 };
        assert_eq!(ids, vec![main], "after commit {i}: only main's snapshot");
        assert_eq!(load(&app, "big").await["metadata"]["snapshots"].as_array().unwrap().len(), i as usize);
    }
    let (encoding, _) = load_encoded(&app, "/v1/{prefix}/namespaces/db/tables/small", "gzip").await;
    assert_eq!(encoding, None, "a small document goes out plain");
}

http_tests!(
    big_tables_load_gzip_compressed_and_refs_from_memory,
    a_created_table_is_loaded_from_the_catalog_with_its_file_on_disk,
    a_create_that_fails_after_writing_its_file_removes_it,
    format_versions_one_to_three_are_honoured,
    partition_spec_and_sort_order_are_kept,
    etags_answer_304_until_the_table_changes,
    every_requirement_type_is_checked,
    every_update_action_applies,
    a_rejected_commit_leaves_no_file_behind,
    format_version_3_assigns_row_ids_to_snapshots,
    the_metadata_log_is_capped_and_old_files_deleted_when_asked,
    concurrent_commits_lose_nothing,
    conflicting_concurrent_commits_get_409_and_keep_every_acknowledged_one,
    a_transaction_applies_all_or_nothing,
    a_staged_create_becomes_a_table_on_its_assert_create_commit,
    explicit_locations_stay_inside_the_warehouse_and_apart,
    invalid_table_names_are_400,
    drop_keeps_files_and_purge_removes_only_the_tables,
    a_namespace_holding_a_table_cannot_be_dropped,
    tables_are_renamed_within_and_across_namespaces,
    a_table_is_registered_from_its_metadata_file,
    tables_are_listed_with_pagination,
    metrics_reports_are_validated_and_counted,
);
