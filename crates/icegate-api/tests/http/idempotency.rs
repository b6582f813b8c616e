//! `Idempotency-Key`: retries replay the first answer and never apply a change twice.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{TestApp, assert_error};
use crate::http_tests;

async fn send(app: &TestApp, method: Method, path: &str, key: &str, body: Option<Value>) -> (StatusCode, Value, bool) {
    let mut request = app.client.request(method, app.url(path)).header("Idempotency-Key", key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let replayed = response.headers().get("idempotency-replayed").is_some();
    let text = response.text().await.unwrap();
    (status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap() }, replayed)
}

fn key() -> String {
    uuid::Uuid::now_v7().to_string()
}

async fn config_advertises_the_key_lifetime(app: TestApp) {
    let (_, config) = app.get("/v1/config").await;
    assert_eq!(config["idempotency-key-lifetime"], "PT30M");
}

async fn a_retried_create_replays_the_first_answer(app: TestApp) {
    let k = key();
    let body = json!({"namespace": ["once"], "properties": {"a": "1"}});
    let first = send(&app, Method::POST, "/v1/{prefix}/namespaces", &k, Some(body.clone())).await;
    assert_eq!(first.0, 200, "{}", first.1);
    assert!(!first.2);
    let retry = send(&app, Method::POST, "/v1/{prefix}/namespaces", &k, Some(body)).await;
    assert_eq!(retry.0, 200, "a retry is not a 409: {}", retry.1);
    assert_eq!(retry.1, first.1);
    assert!(retry.2, "marked as replayed");
    // Without the key the same request is a new one.
    assert_error(
        app.post("/v1/{prefix}/namespaces", json!({"namespace": ["once"]})).await,
        409,
        "AlreadyExistsException",
    );
}

async fn a_retried_create_of_a_wide_table_replays_for_gzip_clients_too(app: TestApp) {
    app.create_namespace(&["db"]).await;
    // A document past 8 KiB, which loads answer compressed to gzip clients.
    let fields: Vec<Value> = (1..=300)
        .map(|i| json!({"id": i, "name": format!("a_long_column_name_{i}"), "required": false, "type": "long"}))
        .collect();
    let body = json!({"name": "wide", "schema": {"type": "struct", "schema-id": 0, "fields": fields}});
    let k = key();
    let send_gzip = || {
        app.client
            .post(app.url("/v1/{prefix}/namespaces/db/tables"))
            .header("Idempotency-Key", &k)
            .header("Accept-Encoding", "gzip")
            .json(&body)
            .send()
    };
    let first = send_gzip().await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("content-encoding").is_none(), "an answer to keep is sent as text");
    let first: Value = first.json().await.unwrap();
    let retry = send_gzip().await.unwrap();
    assert_eq!(retry.status(), 200, "the retry is replayed, not left waiting");
    assert!(retry.headers().get("idempotency-replayed").is_some());
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry["metadata-location"], first["metadata-location"]);
}

async fn a_retried_commit_is_applied_once(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let (status, _) = app
        .post("/v1/{prefix}/namespaces/db/tables", json!({"name": "t", "schema": {"type": "struct", "fields": []}}))
        .await;
    assert_eq!(status, 200);
    let k = key();
    let commit = json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"n": "1"}}]});
    let first = send(&app, Method::POST, "/v1/{prefix}/namespaces/db/tables/t", &k, Some(commit.clone())).await;
    assert_eq!(first.0, 200);
    let retry = send(&app, Method::POST, "/v1/{prefix}/namespaces/db/tables/t", &k, Some(commit)).await;
    assert_eq!(retry.0, 200);
    assert_eq!(retry.1["metadata-location"], first.1["metadata-location"]);
    let (_, loaded) = app.get("/v1/{prefix}/namespaces/db/tables/t").await;
    assert_eq!(loaded["metadata-location"], first.1["metadata-location"]);
    assert_eq!(loaded["metadata"]["metadata-log"].as_array().unwrap().len(), 1, "one commit, not two");
}

async fn a_terminal_4xx_is_replayed_and_a_drop_stays_204(app: TestApp) {
    app.create_namespace(&["taken"]).await;
    let k = key();
    let body = json!({"namespace": ["taken"]});
    let first = send(&app, Method::POST, "/v1/{prefix}/namespaces", &k, Some(body.clone())).await;
    assert_eq!(first.0, 409);
    assert_eq!(app.delete("/v1/{prefix}/namespaces/taken").await.0, 204);
    let retry = send(&app, Method::POST, "/v1/{prefix}/namespaces", &k, Some(body)).await;
    assert_eq!((retry.0, &retry.1), (StatusCode::CONFLICT, &first.1), "the 409 is final for this key");
    assert_eq!(app.head("/v1/{prefix}/namespaces/taken").await, 404, "and nothing was created by the retry");

    app.create_namespace(&["gone"]).await;
    let k = key();
    assert_eq!(send(&app, Method::DELETE, "/v1/{prefix}/namespaces/gone", &k, None).await.0, 204);
    assert_eq!(send(&app, Method::DELETE, "/v1/{prefix}/namespaces/gone", &k, None).await.0, 204, "not 404");
}

async fn a_key_is_bound_to_one_operation_and_must_be_a_uuid(app: TestApp) {
    let k = key();
    assert_eq!(send(&app, Method::POST, "/v1/{prefix}/namespaces", &k, Some(json!({"namespace": ["a"]}))).await.0, 200);
    let other = send(&app, Method::DELETE, "/v1/{prefix}/namespaces/a", &k, None).await;
    assert_error((other.0, other.1), 422, "UnprocessableEntityException");
    assert_eq!(app.head("/v1/{prefix}/namespaces/a").await, 204, "the other operation did not run");
    let bad =
        send(&app, Method::POST, "/v1/{prefix}/namespaces", "not-a-uuid", Some(json!({"namespace": ["b"]}))).await;
    assert_error((bad.0, bad.1), 400, "BadRequestException");
}

async fn concurrent_duplicates_apply_once_and_answer_alike(app: TestApp) {
    let app = std::sync::Arc::new(app);
    let k = key();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (app, k) = (app.clone(), k.clone());
            tokio::spawn(async move {
                send(
                    &app,
                    Method::POST,
                    "/v1/{prefix}/namespaces",
                    &k,
                    Some(json!({"namespace": ["dup"], "properties": {"x": "y"}})),
                )
                .await
            })
        })
        .collect();
    let mut bodies = Vec::new();
    for task in tasks {
        let (status, body, _) = task.await.unwrap();
        assert_eq!(status, 200, "{body}");
        bodies.push(body);
    }
    assert!(bodies.iter().all(|b| *b == bodies[0]));
    let (_, list) = app.get("/v1/{prefix}/namespaces").await;
    assert_eq!(list["namespaces"], json!([["dup"]]));
}

http_tests!(
    a_retried_create_of_a_wide_table_replays_for_gzip_clients_too,
    config_advertises_the_key_lifetime,
    a_retried_create_replays_the_first_answer,
    a_retried_commit_is_applied_once,
    a_terminal_4xx_is_replayed_and_a_drop_stays_204,
    a_key_is_bound_to_one_operation_and_must_be_a_uuid,
    concurrent_duplicates_apply_once_and_answer_alike,
);
