//! `file://` warehouses: what a client plants in its own table's directory (links to another
//! table, another warehouse or outside any) never leads the catalog's writes or purges there.

use serde_json::json;

use crate::common::TestApp;
use crate::http_tests;

fn schema() -> serde_json::Value {
    json!({"type": "struct", "fields": [{"id": 1, "name": "x", "required": false, "type": "long"}]})
}

async fn planted_links_lead_no_write_or_purge_outside_the_table(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let location = |created: &serde_json::Value| {
        std::path::PathBuf::from(created["metadata"]["location"].as_str().unwrap().strip_prefix("file://").unwrap())
    };
    let (_, mine) = app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": "mine", "schema": schema()})).await;
    let (_, victim) =
        app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": "victim", "schema": schema()})).await;
    let (mine_dir, victim_dir) = (location(&mine), location(&victim));
    std::fs::create_dir_all(victim_dir.join("data")).unwrap();
    std::fs::write(victim_dir.join("data/v.parquet"), b"victim").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"outside").unwrap();
    // The client's own table directory: its metadata directory swapped for a link to the
    // victim, and links to the victim's data and to a directory outside the warehouse.
    std::fs::remove_dir_all(mine_dir.join("metadata")).unwrap();
    std::os::unix::fs::symlink(victim_dir.join("metadata"), mine_dir.join("metadata")).unwrap();
    std::fs::create_dir_all(mine_dir.join("data")).unwrap();
    std::os::unix::fs::symlink(victim_dir.join("data"), mine_dir.join("data/to-victim")).unwrap();
    std::os::unix::fs::symlink(outside.path(), mine_dir.join("data/to-outside")).unwrap();
    let victim_metadata: Vec<_> = std::fs::read_dir(victim_dir.join("metadata")).unwrap().collect();

    // A commit's new metadata file would land in the victim's directory: it fails instead.
    let set = json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]});
    let (status, _) = app.post("/v1/{prefix}/namespaces/db/tables/mine", set).await;
    assert_eq!(status, 503);
    assert_eq!(std::fs::read_dir(victim_dir.join("metadata")).unwrap().count(), victim_metadata.len());
    // A purge removes the links, never what they point at.
    assert_eq!(app.delete("/v1/{prefix}/namespaces/db/tables/mine?purgeRequested=true").await.0, 204);
    assert!(!mine_dir.exists(), "the table's own directory went");
    assert_eq!(std::fs::read(victim_dir.join("data/v.parquet")).unwrap(), b"victim");
    assert_eq!(std::fs::read_dir(victim_dir.join("metadata")).unwrap().count(), victim_metadata.len());
    assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"outside");
    assert_eq!(app.get("/v1/{prefix}/namespaces/db/tables/victim").await.0, 200);
}

http_tests!(planted_links_lead_no_write_or_purge_outside_the_table);
