//! Namespace endpoints of the Iceberg REST catalog.

use serde_json::{Value, json};

use crate::common::{TestApp, assert_error};
use crate::http_tests;

async fn a_namespace_is_created_loaded_checked_and_dropped(app: TestApp) {
    let (status, body) =
        app.post("/v1/{prefix}/namespaces", json!({"namespace": ["sales"], "properties": {"owner": "eng"}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"namespace": ["sales"], "properties": {"owner": "eng"}}));
    let (status, body) = app.get("/v1/{prefix}/namespaces/sales").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"namespace": ["sales"], "properties": {"owner": "eng"}}));
    assert_eq!(app.head("/v1/{prefix}/namespaces/sales").await, 204);
    let (status, body) = app.delete("/v1/{prefix}/namespaces/sales").await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(body, Value::Null);
    assert_eq!(app.head("/v1/{prefix}/namespaces/sales").await, 404);
    assert_error(app.get("/v1/{prefix}/namespaces/sales").await, 404, "NoSuchNamespaceException");
    assert_error(app.delete("/v1/{prefix}/namespaces/sales").await, 404, "NoSuchNamespaceException");
}

async fn properties_default_to_empty(app: TestApp) {
    let (status, body) = app.post("/v1/{prefix}/namespaces", json!({"namespace": ["bare"]})).await;
    assert_eq!(status, 200);
    assert_eq!(body["properties"], json!({}));
}

async fn nested_namespaces_use_the_unit_separator(app: TestApp) {
    app.create_namespace(&["a"]).await;
    app.create_namespace(&["a", "b"]).await;
    app.create_namespace(&["a", "b", "c"]).await;
    app.create_namespace(&["a", "x"]).await;
    let (status, body) = app.get("/v1/{prefix}/namespaces/a%1Fb").await;
    assert_eq!(status, 200);
    assert_eq!(body["namespace"], json!(["a", "b"]));
    let (_, top) = app.get("/v1/{prefix}/namespaces").await;
    assert_eq!(top, json!({"namespaces": [["a"]], "next-page-token": null}));
    let (_, children) = app.get("/v1/{prefix}/namespaces?parent=a").await;
    assert_eq!(children["namespaces"], json!([["a", "b"], ["a", "x"]]));
    let (_, grandchildren) = app.get("/v1/{prefix}/namespaces?parent=a%1Fb").await;
    assert_eq!(grandchildren["namespaces"], json!([["a", "b", "c"]]));
    // An empty parent means "top level", for older clients.
    let (_, empty_parent) = app.get("/v1/{prefix}/namespaces?parent=").await;
    assert_eq!(empty_parent["namespaces"], json!([["a"]]));
    assert_error(app.get("/v1/{prefix}/namespaces?parent=zzz").await, 404, "NoSuchNamespaceException");
    assert_eq!(app.head("/v1/{prefix}/namespaces/a%1Fb%1Fc").await, 204);
}

async fn a_child_needs_its_parent(app: TestApp) {
    let message = assert_error(
        app.post("/v1/{prefix}/namespaces", json!({"namespace": ["p", "c"]})).await,
        404,
        "NoSuchNamespaceException",
    );
    assert!(message.contains('p'), "{message}");
}

async fn creating_an_existing_namespace_is_409(app: TestApp) {
    app.create_namespace(&["dup"]).await;
    assert_error(
        app.post("/v1/{prefix}/namespaces", json!({"namespace": ["dup"]})).await,
        409,
        "AlreadyExistsException",
    );
}

async fn dropping_a_namespace_with_children_is_409(app: TestApp) {
    app.create_namespace(&["a"]).await;
    app.create_namespace(&["a", "b"]).await;
    assert_error(app.delete("/v1/{prefix}/namespaces/a").await, 409, "NamespaceNotEmptyException");
    assert_eq!(app.head("/v1/{prefix}/namespaces/a").await, 204);
}

async fn properties_are_updated_and_removed(app: TestApp) {
    let (status, _) =
        app.post("/v1/{prefix}/namespaces", json!({"namespace": ["p"], "properties": {"a": "1", "b": "2"}})).await;
    assert_eq!(status, 200);
    let (status, body) = app
        .post(
            "/v1/{prefix}/namespaces/p/properties",
            json!({"updates": {"a": "10", "c": "3"}, "removals": ["b", "zzz"]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"updated": ["a", "c"], "removed": ["b"], "missing": ["zzz"]}));
    let (_, loaded) = app.get("/v1/{prefix}/namespaces/p").await;
    assert_eq!(loaded["properties"], json!({"a": "10", "c": "3"}));
    // Either field may be omitted.
    let (status, body) = app.post("/v1/{prefix}/namespaces/p/properties", json!({"removals": ["c"]})).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"updated": [], "removed": ["c"], "missing": []}));
}

async fn a_key_in_both_updates_and_removals_is_422_and_changes_nothing(app: TestApp) {
    let (status, _) = app.post("/v1/{prefix}/namespaces", json!({"namespace": ["p"], "properties": {"k": "v"}})).await;
    assert_eq!(status, 200);
    assert_error(
        app.post("/v1/{prefix}/namespaces/p/properties", json!({"updates": {"k": "new", "o": "x"}, "removals": ["k"]}))
            .await,
        422,
        "UnprocessableEntityException",
    );
    let (_, loaded) = app.get("/v1/{prefix}/namespaces/p").await;
    assert_eq!(loaded["properties"], json!({"k": "v"}));
    assert_error(
        app.post("/v1/{prefix}/namespaces/missing/properties", json!({"updates": {"a": "b"}})).await,
        404,
        "NoSuchNamespaceException",
    );
}

async fn invalid_namespace_names_are_400_and_create_nothing(app: TestApp) {
    let long = "x".repeat(256);
    for bad in [
        json!([]),
        json!([""]),
        json!(["a", ""]),
        json!(["a/b"]),
        json!([".."]),
        json!(["tab\tname"]),
        json!(["nul\u{0}"]),
        json!([long]),
    ] {
        assert_error(app.post("/v1/{prefix}/namespaces", json!({"namespace": bad})).await, 400, "BadRequestException");
    }
    let (_, list) = app.get("/v1/{prefix}/namespaces").await;
    assert_eq!(list["namespaces"], json!([]));
    // In a path: an encoded slash or an empty level.
    assert_error(app.get("/v1/{prefix}/namespaces/a%2Fb").await, 400, "BadRequestException");
    assert_error(app.get("/v1/{prefix}/namespaces/a%1F").await, 400, "BadRequestException");
}

async fn malformed_bodies_are_400(app: TestApp) {
    let url = app.url("/v1/{prefix}/namespaces");
    let send = |body: &'static str, content_type: Option<&'static str>| {
        let mut request = app.client.post(&url).body(body);
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        }
    };
    assert_error(send("{\"namespace\": [", Some("application/json")).await, 400, "BadRequestException");
    assert_error(send("{}", Some("application/json")).await, 400, "BadRequestException");
    assert_error(send("{\"namespace\": \"a\"}", Some("application/json")).await, 400, "BadRequestException");
    assert_error(send("{\"namespace\": [1]}", Some("application/json")).await, 400, "BadRequestException");
    assert_error(send("{\"namespace\": [\"a\"]}", Some("text/plain")).await, 400, "BadRequestException");
    assert_error(send("{\"namespace\": [\"a\"]}", None).await, 400, "BadRequestException");
}

async fn pagination_walks_every_namespace_once(app: TestApp) {
    for i in 0..7 {
        app.create_namespace(&[&format!("ns{i}")]).await;
    }
    // Without pageToken or pageSize: everything at once (clients that do not paginate).
    let (_, all) = app.get("/v1/{prefix}/namespaces").await;
    assert_eq!(all["namespaces"].as_array().unwrap().len(), 7);
    assert_eq!(all["next-page-token"], Value::Null);
    // A pageSize alone is an upper bound too (the spec's wording): the first page.
    let (_, first) = app.get("/v1/{prefix}/namespaces?pageSize=2").await;
    assert_eq!(first["namespaces"].as_array().unwrap().len(), 2);
    assert!(first["next-page-token"].is_string());
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let (status, page) = app.get(&format!("/v1/{{prefix}}/namespaces?pageSize=3&pageToken={token}")).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        for ns in page["namespaces"].as_array().unwrap() {
            seen.push(ns[0].as_str().unwrap().to_owned());
        }
        match page["next-page-token"].as_str() {
            Some(next) => token = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, (0..7).map(|i| format!("ns{i}")).collect::<Vec<_>>());
    assert_error(app.get("/v1/{prefix}/namespaces?pageToken=garbage!").await, 400, "BadRequestException");
    assert_error(app.get("/v1/{prefix}/namespaces?pageToken=&pageSize=0").await, 400, "BadRequestException");
    assert_error(app.get("/v1/{prefix}/namespaces?pageToken=&pageSize=abc").await, 400, "BadRequestException");
}

async fn an_unknown_prefix_is_404(app: TestApp) {
    assert_error(app.get("/v1/not-a-warehouse/namespaces").await, 404, "NoSuchWarehouseException");
    assert_error(
        app.post("/v1/not-a-warehouse/namespaces", json!({"namespace": ["a"]})).await,
        404,
        "NoSuchWarehouseException",
    );
}

http_tests!(
    a_namespace_is_created_loaded_checked_and_dropped,
    properties_default_to_empty,
    nested_namespaces_use_the_unit_separator,
    a_child_needs_its_parent,
    creating_an_existing_namespace_is_409,
    dropping_a_namespace_with_children_is_409,
    properties_are_updated_and_removed,
    a_key_in_both_updates_and_removals_is_422_and_changes_nothing,
    invalid_namespace_names_are_400_and_create_nothing,
    malformed_bodies_are_400,
    pagination_walks_every_namespace_once,
    an_unknown_prefix_is_404,
);
