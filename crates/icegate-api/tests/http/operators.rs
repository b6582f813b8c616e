//! What operators rely on: no lockout of the last server admin, secret rotation with a grace
//! period and by the principal itself, the grants listing, namespace formats in the management
//! API, and the answers every client gets (challenges, documents, limits named).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::auth::{call, principal_with_secret, token};
use crate::common::{ADMIN_ID, ADMIN_SECRET, TestApp, assert_error};
use crate::{http_tests, secured_http_tests};

async fn token_status(app: &TestApp, id: &str, secret: &str) -> StatusCode {
    let form = [("grant_type", "client_credentials"), ("client_id", id), ("client_secret", secret)];
    app.client.post(app.url("/v1/oauth/tokens")).form(&form).send().await.unwrap().status()
}

fn server() -> Value {
    json!({"type": "server"})
}

async fn server_privileges(app: &TestApp, token: &str) -> Value {
    let (status, me) = call(app, token, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!(status, 200, "{me}");
    me["server-privileges"].clone()
}

async fn the_last_server_admin_cannot_be_removed(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    let revoke = json!({"role": "admin", "privilege": "admin", "securable": server()});
    let refusals = [
        (Method::DELETE, "/management/v1/roles/admin", None),
        (Method::DELETE, "/management/v1/roles/admin/principals/admin", None),
        (Method::DELETE, "/management/v1/principals/admin", None),
        (Method::DELETE, "/management/v1/grants", Some(revoke.clone())),
    ];
    for (method, path, body) in refusals.clone() {
        let message = assert_error(call(&app, &admin, method.clone(), path, body).await, 409, "ConflictException");
        assert!(message.contains("bootstrap --recover"), "{method} {path}: {message}");
    }
    // Nothing was changed: the admin still administers.
    assert_eq!(server_privileges(&app, &admin).await, json!(["admin"]));

    // With a second admin, the first may go; then the second is the last.
    let (ops_id, ops_secret) = principal_with_secret(&app, &admin, "ops").await;
    assert_eq!(call(&app, &admin, Method::PUT, "/management/v1/roles/admin/principals/ops", None).await.0, 204);
    assert_eq!(call(&app, &admin, Method::DELETE, "/management/v1/principals/admin", None).await.0, 204);
    let ops = token(&app, &ops_id, &ops_secret).await;
    assert_eq!(server_privileges(&app, &ops).await, json!(["admin"]));
    let message = assert_error(
        call(&app, &ops, Method::DELETE, "/management/v1/roles/admin/principals/ops", None).await,
        409,
        "ConflictException",
    );
    assert!(message.contains("ops"), "{message}");
    // An expiring admin grant does not count as a way back: it would lapse.
    let expiring = json!({"role": "ops-role", "privilege": "admin", "securable": server(),
        "expires-at-ms": chrono_now_ms() + 3_600_000});
    assert_eq!(call(&app, &ops, Method::POST, "/management/v1/grants", Some(expiring)).await.0, 201);
    assert_error(call(&app, &ops, Method::DELETE, "/management/v1/roles/admin", None).await, 409, "ConflictException");
    assert_eq!(server_privileges(&app, &ops).await, json!(["admin"]));
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

async fn recovery_gives_admin_a_new_secret_and_admin_again(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    principal_with_secret(&app, &admin, "other").await;
    let store = &app._db.as_ref().unwrap().store;
    let secret = "recovered-secret-0123456789";
    let client_id = icegate_catalog::tokens::recover_admin(store, "unused-id", secret).await.unwrap();
    assert_eq!(client_id, ADMIN_ID, "the existing principal keeps its client id");
    assert_eq!(token_status(&app, ADMIN_ID, ADMIN_SECRET).await, 401, "the old secret is gone");
    let recovered = token(&app, ADMIN_ID, secret).await;
    assert_eq!(server_privileges(&app, &recovered).await, json!(["admin"]));
    // Other principals are untouched, and recovering twice changes nothing more.
    let (status, other) = call(&app, &recovered, Method::GET, "/management/v1/principals/other", None).await;
    assert_eq!((status, other["roles"].clone()), (StatusCode::OK, json!(["other-role"])));
    icegate_catalog::tokens::recover_admin(store, "unused-id", secret).await.unwrap();
    let (_, grants) = call(&app, &recovered, Method::GET, "/management/v1/grants?role=admin", None).await;
    assert_eq!(grants["grants"].as_array().unwrap().len(), 1, "{grants}");
}

async fn a_rotated_secret_keeps_working_for_its_grace_period_only(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    let (id, old_secret) = principal_with_secret(&app, &admin, "etl").await;
    let old_token = token(&app, &id, &old_secret).await;
    let rotate = "/management/v1/principals/etl/rotate-secret";
    for body in [json!({"grace-period-seconds": 604_801}), json!({"grace": 5})] {
        assert_error(call(&app, &admin, Method::POST, rotate, Some(body)).await, 400, "BadRequestException");
    }
    let (status, rotated) = call(&app, &admin, Method::POST, rotate, Some(json!({"grace-period-seconds": 2}))).await;
    assert_eq!(status, 200, "{rotated}");
    let new_secret = rotated["client-secret"].as_str().unwrap();
    // During the grace period: both secrets give tokens, and the old token still works.
    let grace_token = token(&app, &id, &old_secret).await;
    token(&app, &id, new_secret).await;
    assert_eq!(call(&app, &old_token, Method::GET, "/management/v1/whoami", None).await.0, 200);
    let (_, shown) = call(&app, &admin, Method::GET, "/management/v1/principals/etl", None).await;
    assert!(shown["previous-secret-expires-at-ms"].as_i64().unwrap() > chrono_now_ms(), "{shown}");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    // After it: the old secret, and every token issued under it, are refused.
    assert_eq!(token_status(&app, &id, &old_secret).await, 401);
    assert_eq!(call(&app, &old_token, Method::GET, "/management/v1/whoami", None).await.0, 401);
    assert_eq!(call(&app, &grace_token, Method::GET, "/management/v1/whoami", None).await.0, 401);
    let new_token = token(&app, &id, new_secret).await;
    assert_eq!(call(&app, &new_token, Method::GET, "/management/v1/whoami", None).await.0, 200);
    let (_, shown) = call(&app, &admin, Method::GET, "/management/v1/principals/etl", None).await;
    assert!(shown.get("previous-secret-expires-at-ms").is_none(), "{shown}");
}

/// A leaked secret that its owner rotated with a grace period cannot rotate again: it would
/// replace the owner's new secret and keep itself alive.
async fn the_replaced_secret_cannot_rotate_during_its_grace(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    let (id, leaked) = principal_with_secret(&app, &admin, "bob").await;
    let rotate = "/management/v1/principals/bob/rotate-secret";
    let (status, rotated) = call(&app, &admin, Method::POST, rotate, Some(json!({"grace-period-seconds": 600}))).await;
    assert_eq!(status, 200, "{rotated}");
    let owner_secret = rotated["client-secret"].as_str().unwrap().to_owned();
    let thief = token(&app, &id, &leaked).await;
    for body in [None, Some(json!({"grace-period-seconds": 604_800}))] {
        assert_error(call(&app, &thief, Method::POST, rotate, body).await, 403, "ForbiddenException");
    }
    // The owner's secret is still the one that works, and the owner may rotate.
    let owner = token(&app, &id, &owner_secret).await;
    let (_, shown) = call(&app, &admin, Method::GET, "/management/v1/principals/bob", None).await;
    assert_eq!(shown["secret-version"], 2, "{shown}");
    assert_eq!(call(&app, &owner, Method::POST, rotate, None).await.0, 200);
    assert_eq!(token_status(&app, &id, &leaked).await, 401, "a rotation without grace ends the leaked one");

    // Nor through a replica that has not seen the rotation yet (its cache still takes the
    // leaked secret's token for a current one).
    let other = crate::auth::replica(&app).await;
    let (id, leaked) = principal_with_secret(&app, &admin, "carol").await;
    let thief = token(&app, &id, &leaked).await;
    assert_eq!(call(&other, &thief, Method::GET, "/management/v1/whoami", None).await.0, 200, "cache warmed");
    let rotate = "/management/v1/principals/carol/rotate-secret";
    let (status, rotated) = call(&app, &admin, Method::POST, rotate, Some(json!({"grace-period-seconds": 600}))).await;
    assert_eq!(status, 200, "{rotated}");
    assert_error(call(&other, &thief, Method::POST, rotate, None).await, 403, "ForbiddenException");
    assert_eq!(token_status(&app, &id, rotated["client-secret"].as_str().unwrap()).await, 200);
}

/// A token of a deleted principal, still accepted by another replica for a moment, reaches
/// nothing of a new principal of the same name: not its secret, not its grants.
async fn a_stale_token_reaches_nothing_of_a_principal_of_the_same_name(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    let other = crate::auth::replica(&app).await;
    let (id, secret) = principal_with_secret(&app, &admin, "dave").await;
    let stale = token(&app, &id, &secret).await;
    // The other replica remembers the token's principal as active.
    assert_eq!(call(&other, &stale, Method::GET, "/management/v1/whoami", None).await.0, 200);
    assert_eq!(call(&app, &admin, Method::DELETE, "/management/v1/principals/dave", None).await.0, 204);
    let (status, created) =
        call(&app, &admin, Method::POST, "/management/v1/principals", Some(json!({"name": "dave"}))).await;
    assert_eq!(status, 201, "{created}");
    let rotate = "/management/v1/principals/dave/rotate-secret";
    let (status, _) = call(&other, &stale, Method::POST, rotate, None).await;
    assert!(status == 401 || status == 403, "{status}");
    let (status, _) = call(&other, &stale, Method::GET, "/management/v1/grants?principal=dave", None).await;
    assert!(status == 401 || status == 403, "{status}");
    let (new_id, new_secret) = (created["client-id"].as_str().unwrap(), created["client-secret"].as_str().unwrap());
    assert_eq!(token_status(&app, new_id, new_secret).await, 200, "the new principal's secret is its own");
}

async fn a_principal_rotates_its_own_secret_and_no_one_else_s(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    let (id, secret) = principal_with_secret(&app, &admin, "svc").await;
    principal_with_secret(&app, &admin, "neighbour").await;
    let svc = token(&app, &id, &secret).await;
    assert_error(
        call(&app, &svc, Method::POST, "/management/v1/principals/neighbour/rotate-secret", None).await,
        403,
        "ForbiddenException",
    );
    let (status, rotated) = call(&app, &svc, Method::POST, "/management/v1/principals/svc/rotate-secret", None).await;
    assert_eq!(status, 200, "{rotated}");
    // Without a grace period the old secret and its tokens end at once.
    assert_eq!(token_status(&app, &id, &secret).await, 401);
    assert_eq!(call(&app, &svc, Method::GET, "/management/v1/whoami", None).await.0, 401);
    let renewed = token(&app, &id, rotated["client-secret"].as_str().unwrap()).await;
    assert_eq!(call(&app, &renewed, Method::GET, "/management/v1/whoami", None).await.0, 200);
}

async fn grants_are_listed_whole_filtered_and_paginated(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    for ns in ["db", "other"] {
        let body = json!({"namespace": [ns]});
        assert_eq!(call(&app, &admin, Method::POST, "/v1/{prefix}/namespaces", Some(body)).await.0, 200);
    }
    let (id, secret) = principal_with_secret(&app, &admin, "analyst").await;
    let grants = [
        ("analyst-role", "read", json!({"type": "namespace", "warehouse": "default", "namespace": ["db"]})),
        ("analyst-role", "describe", json!({"type": "namespace", "warehouse": "default", "namespace": ["other"]})),
        ("analyst-role", "read", json!({"type": "warehouse", "warehouse": "default"})),
        ("analyst-role", "create", json!({"type": "namespace", "warehouse": "default", "namespace": ["db"]})),
    ];
    for (role, privilege, securable) in grants {
        let body = json!({"role": role, "privilege": privilege, "securable": securable});
        let (status, created) = call(&app, &admin, Method::POST, "/management/v1/grants", Some(body)).await;
        assert_eq!(status, 201, "{created}");
    }
    let (status, all) = call(&app, &admin, Method::GET, "/management/v1/grants", None).await;
    assert_eq!(status, 200, "{all}");
    let all = all["grants"].as_array().unwrap().clone();
    assert_eq!(all.len(), 5, "the admin's grant and the four: {all:?}");
    // Pages of two cover the same grants, in the same order, each once.
    let mut paged = Vec::new();
    let mut page_token = String::new();
    loop {
        let path = format!("/management/v1/grants?pageSize=2&pageToken={page_token}");
        let (status, page) = call(&app, &admin, Method::GET, &path, None).await;
        assert_eq!(status, 200, "{page}");
        let items = page["grants"].as_array().unwrap();
        assert!(items.len() <= 2);
        paged.extend(items.iter().cloned());
        match page["next-page-token"].as_str() {
            Some(next) => page_token = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(paged, all);
    let count = |query: &'static str| {
        let (app, admin) = (&app, &admin);
        async move {
            let (status, body) = call(app, admin, Method::GET, &format!("/management/v1/grants?{query}"), None).await;
            assert_eq!(status, 200, "{query}: {body}");
            body["grants"].as_array().unwrap().len()
        }
    };
    assert_eq!(count("privilege=read").await, 2);
    assert_eq!(count("type=namespace").await, 3);
    assert_eq!(count("type=namespace&privilege=read").await, 1);
    assert_eq!(count("warehouse=default").await, 4);
    assert_eq!(count("role=admin").await, 1);
    assert_eq!(count("principal=analyst&type=warehouse").await, 1);
    for (query, parameter) in [
        ("privilege=own", "privilege"),
        ("type=table-ish", "type"),
        ("pageToken=%21", "pageToken"),
        ("pageToken=AA", "pageToken"),
        ("role=%00", "role"),
        ("warehouse=a%00", "warehouse"),
        ("principal=%00", "principal"),
    ] {
        let path = format!("/management/v1/grants?{query}");
        let message = assert_error(call(&app, &admin, Method::GET, &path, None).await, 400, "BadRequestException");
        assert!(message.contains(parameter), "{query}: {message}");
    }
    for size in ["0", "1001", "18446744073709551615"] {
        let path = format!("/management/v1/grants?pageSize={size}");
        assert_error(call(&app, &admin, Method::GET, &path, None).await, 400, "BadRequestException");
    }
    // The largest page, and a page token alone (the next page at the default size).
    let (status, page) = call(&app, &admin, Method::GET, "/management/v1/grants?pageSize=1000", None).await;
    assert_eq!((status, page["grants"].as_array().unwrap().len()), (StatusCode::OK, 5), "{page}");
    let (_, first) = call(&app, &admin, Method::GET, "/management/v1/grants?pageSize=1", None).await;
    let next = first["next-page-token"].as_str().unwrap();
    let (status, rest) =
        call(&app, &admin, Method::GET, &format!("/management/v1/grants?pageToken={next}"), None).await;
    assert_eq!((status, rest["grants"].as_array().unwrap().len()), (StatusCode::OK, 4), "{rest}");
    // A principal lists its own grants, not everyone's.
    let analyst = token(&app, &id, &secret).await;
    assert_error(call(&app, &analyst, Method::GET, "/management/v1/grants", None).await, 403, "ForbiddenException");
    let (status, own) = call(&app, &analyst, Method::GET, "/management/v1/grants?principal=analyst", None).await;
    assert_eq!((status, own["grants"].as_array().unwrap().len()), (StatusCode::OK, 4), "{own}");
    // A role narrows its own listing like any filter: whether another role exists is not told.
    for role in ["admin", "no-such-role"] {
        let path = format!("/management/v1/grants?principal=analyst&role={role}");
        let (status, body) = call(&app, &analyst, Method::GET, &path, None).await;
        assert_eq!((status, body["grants"].clone()), (StatusCode::OK, json!([])), "{role}: {body}");
    }
}

async fn principals_are_listed_with_ids_and_roles(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    principal_with_secret(&app, &admin, "reader").await;
    let (status, list) = call(&app, &admin, Method::GET, "/management/v1/principals", None).await;
    assert_eq!(status, 200, "{list}");
    let by_name: std::collections::HashMap<&str, &Value> =
        list["principals"].as_array().unwrap().iter().map(|p| (p["name"].as_str().unwrap(), p)).collect();
    assert_eq!(by_name["admin"]["roles"], json!(["admin"]));
    assert_eq!(by_name["reader"]["roles"], json!(["reader-role"]));
    for p in by_name.values() {
        assert!(p["id"].as_str().is_some_and(|id| !id.is_empty()), "{p}");
    }
    assert_ne!(by_name["admin"]["id"], by_name["reader"]["id"]);
}

async fn namespaces_take_every_documented_form(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    for ns in [json!(["sales"]), json!(["sales", "emea"])] {
        assert_eq!(
            call(&app, &admin, Method::POST, "/v1/{prefix}/namespaces", Some(json!({"namespace": ns}))).await.0,
            200
        );
    }
    let table = json!({"name": "orders", "schema": {"type": "struct", "fields": [{"id": 1, "name": "x", "required": false, "type": "long"}]}});
    let (status, body) =
        call(&app, &admin, Method::POST, "/v1/{prefix}/namespaces/sales%1Femea/tables", Some(table)).await;
    assert_eq!(status, 200, "{body}");
    principal_with_secret(&app, &admin, "emea").await;
    let grant = |namespace: Value| {
        json!({"role": "emea-role", "privilege": "read",
            "securable": {"type": "table", "warehouse": "default", "namespace": namespace, "name": "orders"}})
    };
    let (status, body) =
        call(&app, &admin, Method::POST, "/management/v1/grants", Some(grant(json!("sales.emea")))).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["securable"]["namespace"], json!(["sales", "emea"]), "{body}");
    // The array and the unit-separated string name the same table: the grant exists already.
    for same in [json!(["sales", "emea"]), json!("sales\u{1f}emea")] {
        assert_error(
            call(&app, &admin, Method::POST, "/management/v1/grants", Some(grant(same))).await,
            409,
            "AlreadyExistsException",
        );
    }
    for namespace in ["sales.emea", "sales%1Femea"] {
        let path = format!("/management/v1/grants/on?type=table&warehouse=default&namespace={namespace}&name=orders");
        let (status, body) = call(&app, &admin, Method::GET, &path, None).await;
        assert_eq!(status, 200, "{namespace}: {body}");
        let roles: Vec<&str> = body["grants"].as_array().unwrap().iter().map(|g| g["role"].as_str().unwrap()).collect();
        assert!(roles.contains(&"emea-role"), "{namespace}: {body}");
    }
    // A namespace of the wrong shape is refused naming the field.
    let (status, body) = call(&app, &admin, Method::POST, "/management/v1/grants", Some(grant(json!(7)))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("namespace"), "{body}");
    let message = assert_error(
        call(&app, &admin, Method::GET, "/management/v1/grants/on?type=tabel&warehouse=default", None).await,
        400,
        "BadRequestException",
    );
    assert!(message.contains("type"), "{message}");
}

async fn refusals_say_how_to_authenticate_and_documents_are_public(app: TestApp) {
    let response = app.client.get(app.url("/v1/config")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let challenge = response.headers().get("www-authenticate").expect("a challenge").to_str().unwrap().to_owned();
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], 401);
    for (path, expected) in [
        ("/openapi/catalog.yaml", "/v1/{prefix}/namespaces/{namespace}/tables/{table}:"),
        ("/openapi/management.yaml", "/management/v1/grants:"),
    ] {
        let response = app.client.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["content-type"], "application/yaml");
        let text = response.text().await.unwrap();
        assert!(text.starts_with("openapi:"), "{path}: {}", &text[..80]);
        assert!(text.contains(expected), "{path} lacks {expected}");
    }
}

secured_http_tests!(
    the_last_server_admin_cannot_be_removed,
    recovery_gives_admin_a_new_secret_and_admin_again,
    a_rotated_secret_keeps_working_for_its_grace_period_only,
    a_principal_rotates_its_own_secret_and_no_one_else_s,
    the_replaced_secret_cannot_rotate_during_its_grace,
    a_stale_token_reaches_nothing_of_a_principal_of_the_same_name,
    grants_are_listed_whole_filtered_and_paginated,
    principals_are_listed_with_ids_and_roles,
    namespaces_take_every_documented_form,
    refusals_say_how_to_authenticate_and_documents_are_public,
);

fn schema() -> Value {
    json!({"type": "struct", "fields": [{"id": 1, "name": "x", "required": false, "type": "long"}]})
}

async fn names_storage_cannot_hold_are_refused_up_front(app: TestApp) {
    app.create_namespace(&["db"]).await;
    let longest = "t".repeat(222);
    let (status, body) =
        app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": longest, "schema": schema()})).await;
    assert_eq!(status, 200, "{body}");
    assert!(app.head(&format!("/v1/{{prefix}}/namespaces/db/tables/{longest}")).await.is_success());
    let too_long = "u".repeat(223);
    let message = assert_error(
        app.post("/v1/{prefix}/namespaces/db/tables", json!({"name": too_long, "schema": schema()})).await,
        400,
        "BadRequestException",
    );
    assert!(message.contains("222"), "{message}");
    assert_eq!(app.head(&format!("/v1/{{prefix}}/namespaces/db/tables/{too_long}")).await, 404, "nothing was created");
    let view = json!({"name": too_long, "schema": schema(), "view-version": {"version-id": 1, "timestamp-ms": 0,
        "schema-id": 0, "summary": {}, "default-namespace": ["db"],
        "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}]}});
    assert_error(app.post("/v1/{prefix}/namespaces/db/views", view).await, 400, "BadRequestException");
    // A longer name at a location of its own fits.
    let dir = app.warehouse_dir.as_ref().unwrap().path().display().to_string();
    let body = json!({"name": too_long, "schema": schema(), "location": format!("file://{dir}/db/short")});
    let (status, created) = app.post("/v1/{prefix}/namespaces/db/tables", body).await;
    assert_eq!(status, 200, "{created}");
}

async fn an_oversized_body_names_the_setting(app: TestApp) {
    let big = json!({"namespace": ["big"], "properties": {"pad": "x".repeat(70 * 1024)}});
    let message = assert_error(app.post("/v1/{prefix}/namespaces", big).await, 413, "RequestEntityTooLargeException");
    assert!(message.contains("server.max_body_bytes"), "{message}");
    // On a new connection: the refused one is closed (its body was never read).
    let fresh = reqwest::Client::new();
    let status = fresh.head(app.url("/v1/{prefix}/namespaces/big")).send().await.unwrap().status();
    assert_eq!(status, 404, "nothing was created");
}

async fn a_file_warehouse_gets_its_directory_or_a_clear_refusal(app: TestApp) {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("not/yet/there");
    let body = json!({"name": "lake", "storage-root": format!("file://{}", root.display())});
    let (status, created) = app.post("/management/v1/warehouses", body).await;
    assert_eq!(status, 201, "{created}");
    assert!(root.is_dir(), "the directory was created");
    assert!(created["storage-profile"].as_object().unwrap().values().all(|v| !v.is_null()), "{created}");
    // Beneath a regular file no directory can exist.
    std::fs::write(base.path().join("plain"), b"x").unwrap();
    let body = json!({"name": "nowhere", "storage-root": format!("file://{}/plain/lake", base.path().display())});
    let message = assert_error(app.post("/management/v1/warehouses", body).await, 400, "BadRequestException");
    assert!(message.contains("plain/lake"), "{message}");
    assert_error(app.get("/management/v1/warehouses/nowhere").await, 404, "NoSuchWarehouseException");
}

mod open {
    use super::*;

    http_tests!(
        names_storage_cannot_hold_are_refused_up_front,
        an_oversized_body_names_the_setting,
        a_file_warehouse_gets_its_directory_or_a_clear_refusal,
    );
}
