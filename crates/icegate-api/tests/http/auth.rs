//! Authentication (tokens) and authorization (roles, grants, inheritance, deny by default).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{ADMIN_ID, ADMIN_SECRET, TEST_SIGNING_KEY, TestApp, assert_error};
use crate::secured_http_tests;

pub(crate) async fn token(app: &TestApp, id: &str, secret: &str) -> String {
    let response = app
        .client
        .post(app.url("/v1/oauth/tokens"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", id),
            ("client_secret", secret),
            ("scope", "catalog"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["issued_token_type"], "urn:ietf:params:oauth:token-type:access_token");
    assert!(body["expires_in"].as_u64().unwrap() > 0);
    body["access_token"].as_str().unwrap().to_owned()
}

pub(crate) async fn call(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) })
}

/// A principal `name`, member of its own role `<name>-role`; returns its client id and secret.
pub(crate) async fn principal_with_secret(app: &TestApp, admin: &str, name: &str) -> (String, String) {
    let (status, created) =
        call(app, admin, Method::POST, "/management/v1/principals", Some(json!({"name": name}))).await;
    assert_eq!(status, 201, "{created}");
    let role = format!("{name}-role");
    assert_eq!(call(app, admin, Method::POST, "/management/v1/roles", Some(json!({"name": role}))).await.0, 201);
    let path = format!("/management/v1/roles/{role}/principals/{name}");
    assert_eq!(call(app, admin, Method::PUT, &path, None).await.0, 204);
    (created["client-id"].as_str().unwrap().to_owned(), created["client-secret"].as_str().unwrap().to_owned())
}

/// A principal holding one role with the given grants; returns its token.
pub(crate) async fn principal(app: &TestApp, admin: &str, name: &str, grants: &[(&str, Value)]) -> String {
    let (id, secret) = principal_with_secret(app, admin, name).await;
    for (privilege, securable) in grants {
        let grant = json!({"role": format!("{name}-role"), "privilege": privilege, "securable": securable});
        let (status, body) = call(app, admin, Method::POST, "/management/v1/grants", Some(grant)).await;
        assert_eq!(status, 201, "{body}");
    }
    token(app, &id, &secret).await
}

fn table_body(name: &str) -> Value {
    json!({"name": name, "schema": {"type": "struct", "fields": [{"id": 1, "name": "x", "required": false, "type": "long"}]}})
}

/// A warehouse `default` with namespaces db and db.sub, tables db.t1..t3 and db.sub.deep.
async fn seed(app: &TestApp, admin: &str) {
    for ns in [json!(["db"]), json!(["db", "sub"]), json!(["other"])] {
        assert_eq!(
            call(app, admin, Method::POST, "/v1/{prefix}/namespaces", Some(json!({"namespace": ns}))).await.0,
            200
        );
    }
    for t in ["t1", "t2", "t3"] {
        assert_eq!(
            call(app, admin, Method::POST, "/v1/{prefix}/namespaces/db/tables", Some(table_body(t))).await.0,
            200
        );
    }
    assert_eq!(
        call(app, admin, Method::POST, "/v1/{prefix}/namespaces/db%1Fsub/tables", Some(table_body("deep"))).await.0,
        200
    );
    assert_eq!(
        call(app, admin, Method::POST, "/v1/{prefix}/namespaces/other/tables", Some(table_body("secret"))).await.0,
        200
    );
}

fn table(ns: &[&str], name: &str) -> Value {
    json!({"type": "table", "warehouse": "default", "namespace": ns, "name": name})
}

fn namespace(ns: &[&str]) -> Value {
    json!({"type": "namespace", "warehouse": "default", "namespace": ns})
}

fn set_property() -> Value {
    json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]})
}

async fn tokens_are_issued_for_client_credentials_only(app: TestApp) {
    token(&app, ADMIN_ID, ADMIN_SECRET).await;
    // HTTP Basic works as well as form fields.
    let basic = app
        .client
        .post(app.url("/v1/oauth/tokens"))
        .basic_auth(ADMIN_ID, Some(ADMIN_SECRET))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status(), 200);
    let oauth = |form: Vec<(&'static str, &'static str)>| {
        let request = app.client.post(app.url("/v1/oauth/tokens")).form(&form);
        async move {
            let response = request.send().await.unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        }
    };
    let (status, body) =
        oauth(vec![("grant_type", "client_credentials"), ("client_id", ADMIN_ID), ("client_secret", "wrong")]).await;
    assert_eq!((status.as_u16(), body["error"].as_str()), (401, Some("invalid_client")));
    let (status, body) =
        oauth(vec![("grant_type", "client_credentials"), ("client_id", "nobody"), ("client_secret", "x")]).await;
    assert_eq!((status.as_u16(), body["error"].as_str()), (401, Some("invalid_client")));
    let (status, body) =
        oauth(vec![("grant_type", "password"), ("client_id", ADMIN_ID), ("client_secret", ADMIN_SECRET)]).await;
    assert_eq!((status.as_u16(), body["error"].as_str()), (400, Some("unsupported_grant_type")));
    let (status, body) = oauth(vec![("grant_type", "client_credentials")]).await;
    assert_eq!((status.as_u16(), body["error"].as_str()), (400, Some("invalid_request")));
}

fn forge(key: &str, header: jsonwebtoken::Header, iss: &str, aud: &str, exp_offset: i64) -> String {
    forge_for("x", key, header, iss, aud, exp_offset)
}

fn forge_for(sub: &str, key: &str, header: jsonwebtoken::Header, iss: &str, aud: &str, exp_offset: i64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let claims = json!({"sub": sub, "name": "admin", "iss": iss, "aud": aud, "iat": now, "nbf": now - 10, "exp": now + exp_offset, "jti": "j"});
    jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_secret(key.as_bytes()).unwrap()).unwrap()
}

async fn bad_credentials_are_401_and_say_nothing_more(app: TestApp) {
    let hs = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    let alg_none = {
        use base64::Engine;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let claims = json!({"sub": "x", "name": "admin", "iss": "icegate", "aud": "icegate", "exp": 9999999999u64});
        format!("{}.{}.", engine.encode(r#"{"alg":"none","typ":"JWT"}"#), engine.encode(claims.to_string()))
    };
    let cases = [
        ("none", None),
        ("pyiceberg's Bearer None", Some("Bearer None".to_owned())),
        ("not bearer", Some("Basic Zm9vOmJhcg==".to_owned())),
        ("garbage", Some("Bearer not.a.jwt".to_owned())),
        (
            "forged",
            Some(format!(
                "Bearer {}",
                forge("another-key-another-key-another-key-0", hs.clone(), "icegate", "icegate", 600)
            )),
        ),
        ("expired", Some(format!("Bearer {}", forge(TEST_SIGNING_KEY, hs.clone(), "icegate", "icegate", -600)))),
        ("wrong issuer", Some(format!("Bearer {}", forge(TEST_SIGNING_KEY, hs.clone(), "evil", "icegate", 600)))),
        ("wrong audience", Some(format!("Bearer {}", forge(TEST_SIGNING_KEY, hs.clone(), "icegate", "other", 600)))),
        ("alg none", Some(format!("Bearer {alg_none}"))),
    ];
    for (case, header) in cases {
        let mut request = app.client.get(app.url("/v1/{prefix}/namespaces"));
        if let Some(header) = header {
            request = request.header("authorization", header);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        let message = assert_error((status, body), 401, "NotAuthorizedException");
        assert!(!message.contains("expired") && !message.contains("signature"), "{case}: the reason leaked: {message}");
    }
    // Operational endpoints stay open.
    assert_eq!(app.get("/health").await.0, 200);
}

/// Verified tokens are remembered (by digest) to skip verifying them again; a remembered token
/// is still refused the moment it expires (`exp` plus the 5 s leeway of the test server).
/// The principal id (`sub`) of an icegate-issued token.
fn subject_of(token: &str) -> String {
    use base64::Engine;
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token.split('.').nth(1).unwrap()).unwrap();
    serde_json::from_slice::<Value>(&payload).unwrap()["sub"].as_str().unwrap().to_owned()
}

async fn a_remembered_token_still_expires(app: TestApp) {
    let hs = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    let admin = subject_of(&token(&app, ADMIN_ID, ADMIN_SECRET).await);
    let token = forge_for(&admin, TEST_SIGNING_KEY, hs, "icegate", "icegate", -4);
    let status = || async {
        app.client.get(app.url("/v1/{prefix}/namespaces")).bearer_auth(&token).send().await.unwrap().status()
    };
    for _ in 0..3 {
        assert_ne!(status().await, 401, "valid for one more second (leeway)");
    }
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    assert_eq!(status().await, 401, "expired, though verified before");
}

async fn the_admin_may_do_everything(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    seed(&app, &admin).await;
    let (status, body) = call(&app, &admin, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!(status, 200);
    assert_eq!(body["principal"], "admin");
    assert_eq!(body["roles"], json!(["admin"]));
    assert_eq!(body["server-privileges"], json!(["admin"]));
    let (_, list) = call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces", None).await;
    assert_eq!(list["namespaces"], json!([["db"], ["other"]]));
    assert_eq!(
        call(&app, &admin, Method::POST, "/v1/{prefix}/namespaces/db/tables/t1", Some(set_property())).await.0,
        200
    );
}

async fn a_reader_reads_one_table_and_sees_nothing_else(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    seed(&app, &admin).await;
    let reader = principal(&app, &admin, "reader", &[("read", table(&["db"], "t1"))]).await;
    // Navigable: the config, the namespace that holds the table, the table itself.
    assert_eq!(call(&app, &reader, Method::GET, "/v1/config", None).await.0, 200);
    let (_, namespaces) = call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces", None).await;
    assert_eq!(namespaces["namespaces"], json!([["db"]]), "other is invisible");
    let (_, tables) = call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/db/tables", None).await;
    assert_eq!(tables["identifiers"], json!([{"namespace": ["db"], "name": "t1"}]));
    assert_eq!(call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await.0, 200);
    assert_eq!(call(&app, &reader, Method::HEAD, "/v1/{prefix}/namespaces/db/tables/t1", None).await.0, 204);
    // Describable but not permitted: 403.
    assert_error(
        call(&app, &reader, Method::POST, "/v1/{prefix}/namespaces/db/tables/t1", Some(set_property())).await,
        403,
        "ForbiddenException",
    );
    assert_error(
        call(&app, &reader, Method::DELETE, "/v1/{prefix}/namespaces/db/tables/t1", None).await,
        403,
        "ForbiddenException",
    );
    assert_error(
        call(&app, &reader, Method::POST, "/v1/{prefix}/namespaces/db/tables", Some(table_body("new"))).await,
        403,
        "ForbiddenException",
    );
    // Not describable: exactly like a missing object.
    assert_error(
        call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/db/tables/t2", None).await,
        404,
        "NoSuchTableException",
    );
    assert_error(
        call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/other/tables/secret", None).await,
        404,
        "NoSuchTableException",
    );
    assert_error(
        call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/other", None).await,
        404,
        "NoSuchNamespaceException",
    );
    assert_error(
        call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/other/tables", None).await,
        404,
        "NoSuchNamespaceException",
    );
    // The management API is for admins.
    assert_error(
        call(&app, &reader, Method::POST, "/management/v1/roles", Some(json!({"name": "x"}))).await,
        403,
        "ForbiddenException",
    );
    let (_, warehouses) = call(&app, &reader, Method::GET, "/management/v1/warehouses", None).await;
    assert_eq!(warehouses["warehouses"].as_array().unwrap().len(), 1, "the warehouse it holds something in");
}

async fn grants_on_a_namespace_apply_to_everything_below(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    seed(&app, &admin).await;
    let writer =
        principal(&app, &admin, "writer", &[("write", namespace(&["db"])), ("create", namespace(&["db", "sub"]))])
            .await;
    for path in ["/v1/{prefix}/namespaces/db/tables/t2", "/v1/{prefix}/namespaces/db%1Fsub/tables/deep"] {
        let (status, body) = call(&app, &writer, Method::POST, path, Some(set_property())).await;
        assert_eq!(status, 200, "write is inherited by {path}: {body}");
        assert_eq!(call(&app, &writer, Method::GET, path, None).await.0, 200, "write implies read");
    }
    // Present and future: a table created later is covered too.
    assert_eq!(
        call(&app, &writer, Method::POST, "/v1/{prefix}/namespaces/db%1Fsub/tables", Some(table_body("later"))).await.0,
        200
    );
    assert_eq!(
        call(&app, &writer, Method::POST, "/v1/{prefix}/namespaces/db%1Fsub/tables/later", Some(set_property()))
            .await
            .0,
        200
    );
    assert_error(
        call(&app, &writer, Method::POST, "/v1/{prefix}/namespaces/db/tables", Some(table_body("x"))).await,
        403,
        "ForbiddenException",
    );
    assert_error(
        call(&app, &writer, Method::GET, "/v1/{prefix}/namespaces/other/tables/secret", None).await,
        404,
        "NoSuchTableException",
    );
    let (_, tables) = call(&app, &writer, Method::GET, "/v1/{prefix}/namespaces/db/tables", None).await;
    assert_eq!(tables["identifiers"].as_array().unwrap().len(), 3, "a namespace grant shows all its tables");
}

async fn revocation_and_expiry_take_effect_at_once(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    seed(&app, &admin).await;
    let past = 1_000i64;
    let reader = principal(&app, &admin, "temp", &[("read", table(&["db"], "t1"))]).await;
    // A grant that could never apply is refused (here: seconds given where milliseconds are due).
    let expired =
        json!({"role": "temp-role", "privilege": "read", "securable": table(&["db"], "t2"), "expires-at-ms": past});
    assert_error(
        call(&app, &admin, Method::POST, "/management/v1/grants", Some(expired)).await,
        400,
        "BadRequestException",
    );
    let soon = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64 + 1_500;
    let expiring =
        json!({"role": "temp-role", "privilege": "read", "securable": table(&["db"], "t2"), "expires-at-ms": soon});
    assert_eq!(call(&app, &admin, Method::POST, "/management/v1/grants", Some(expiring)).await.0, 201);
    assert_eq!(call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/db/tables/t2", None).await.0, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1_600)).await;
    assert_error(
        call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/db/tables/t2", None).await,
        404,
        "NoSuchTableException",
    );
    assert_eq!(call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await.0, 200);
    let revoke = json!({"role": "temp-role", "privilege": "read", "securable": table(&["db"], "t1")});
    assert_eq!(call(&app, &admin, Method::DELETE, "/management/v1/grants", Some(revoke)).await.0, 204);
    assert_error(
        call(&app, &reader, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await,
        404,
        "NoSuchTableException",
    );
    // A deleted principal's token stops working (it holds nothing any more).
    assert_eq!(call(&app, &admin, Method::DELETE, "/management/v1/principals/temp", None).await.0, 204);
}

async fn renames_need_drop_at_the_source_and_create_at_the_target(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    seed(&app, &admin).await;
    let mover = principal(&app, &admin, "mover", &[("drop", table(&["db"], "t1"))]).await;
    let rename = json!({"source": {"namespace": ["db"], "name": "t1"}, "destination": {"namespace": ["db", "sub"], "name": "t1"}});
    let (status, _) = call(&app, &mover, Method::POST, "/v1/{prefix}/tables/rename", Some(rename.clone())).await;
    assert!(status == 403 || status == 404, "no create on the target: {status}");
    let grant = json!({"role": "mover-role", "privilege": "create", "securable": namespace(&["db", "sub"])});
    assert_eq!(call(&app, &admin, Method::POST, "/management/v1/grants", Some(grant)).await.0, 201);
    // Into another namespace a move is a copy of what the mover can read: `read` too.
    let (status, _) = call(&app, &mover, Method::POST, "/v1/{prefix}/tables/rename", Some(rename.clone())).await;
    assert_eq!(status, 403, "drop and create, but no read");
    let grant = json!({"role": "mover-role", "privilege": "read", "securable": table(&["db"], "t1")});
    assert_eq!(call(&app, &admin, Method::POST, "/management/v1/grants", Some(grant)).await.0, 201);
    // A move never widens the mover's access: with admin on the target it would own the table.
    let admin_there = json!({"role": "mover-role", "privilege": "admin", "securable": namespace(&["db", "sub"])});
    assert_eq!(call(&app, &admin, Method::POST, "/management/v1/grants", Some(admin_there.clone())).await.0, 201);
    let (status, _) = call(&app, &mover, Method::POST, "/v1/{prefix}/tables/rename", Some(rename.clone())).await;
    assert_eq!(status, 403, "admin on the target namespace would widen drop+read on the table");
    assert_eq!(call(&app, &admin, Method::DELETE, "/management/v1/grants", Some(admin_there)).await.0, 204);
    assert_eq!(call(&app, &mover, Method::POST, "/v1/{prefix}/tables/rename", Some(rename)).await.0, 204);
    // Within a namespace, drop alone renames.
    let within = json!({"source": {"namespace": ["db", "sub"], "name": "t1"}, "destination": {"namespace": ["db", "sub"], "name": "t1b"}});
    assert_eq!(call(&app, &mover, Method::POST, "/v1/{prefix}/tables/rename", Some(within)).await.0, 204);
}

async fn filtered_listings_paginate_correctly(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    assert_eq!(
        call(&app, &admin, Method::POST, "/v1/{prefix}/namespaces", Some(json!({"namespace": ["many"]}))).await.0,
        200
    );
    for i in 0..7 {
        let body = table_body(&format!("t{i}"));
        assert_eq!(call(&app, &admin, Method::POST, "/v1/{prefix}/namespaces/many/tables", Some(body)).await.0, 200);
    }
    let grants: Vec<(&str, Value)> =
        [1, 3, 4, 6].iter().map(|i| ("read", table(&["many"], &format!("t{i}")))).collect();
    let reader = principal(&app, &admin, "pager", &grants).await;
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let (status, page) = call(
            &app,
            &reader,
            Method::GET,
            &format!("/v1/{{prefix}}/namespaces/many/tables?pageSize=2&pageToken={token}"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{page}");
        assert!(page["identifiers"].as_array().unwrap().len() <= 2);
        seen.extend(page["identifiers"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap().to_owned()));
        match page["next-page-token"].as_str() {
            Some(next) => token = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(seen, ["t1", "t3", "t4", "t6"]);
}

async fn an_access_review_lists_who_can_do_what_and_why(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    seed(&app, &admin).await;
    principal(&app, &admin, "analyst", &[("read", table(&["db"], "t1"))]).await;
    principal(&app, &admin, "engineer", &[("write", namespace(&["db"]))]).await;
    let (status, body) = call(
        &app,
        &admin,
        Method::GET,
        "/management/v1/grants/on?type=table&warehouse=default&namespace=db&name=t1",
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let mut who: Vec<(String, String, String)> = body["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["role"].as_str().unwrap().to_owned(),
                g["privilege"].as_str().unwrap().to_owned(),
                g["securable"]["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    who.sort();
    assert_eq!(
        who,
        [
            ("admin".into(), "admin".into(), "server".into()),
            ("analyst-role".into(), "read".into(), "table".into()),
            ("engineer-role".into(), "write".into(), "namespace".into()),
        ]
    );
    let (_, effective) = call(&app, &admin, Method::GET, "/management/v1/grants?principal=engineer", None).await;
    assert_eq!(effective["grants"][0]["privilege"], "write");
    assert_eq!(effective["grants"][0]["role"], "engineer-role");
}

/// Every operation of both documents: without a token 401; for a principal holding nothing,
/// with a request the admin could make (so each reaches its service, past body validation),
/// never a success (403 or, where it cannot even see the object, 404) and nothing revealed or
/// changed. The services decide: no route-level rule stands in front of them.
async fn every_operation_is_closed_to_strangers(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    seed(&app, &admin).await;
    let view = json!({
        "name": "v1",
        "schema": {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "n", "required": false, "type": "long"}]},
        "view-version": {"version-id": 1, "schema-id": 0, "timestamp-ms": 1, "summary": {"engine-name": "test"},
            "representations": [{"type": "sql", "sql": "SELECT 1 AS n", "dialect": "spark"}], "default-namespace": ["db"]},
    });
    assert_eq!(call(&app, &admin, Method::POST, "/v1/{prefix}/namespaces/db/views", Some(view.clone())).await.0, 200);
    let stranger = principal(&app, &admin, "stranger", &[]).await;
    let (_, t1) = call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await;
    let t1_location = t1["metadata-location"].as_str().unwrap().to_owned();
    let bodies: std::collections::HashMap<(&str, &str), Value> = [
        (("POST", "/v1/{prefix}/namespaces"), json!({"namespace": ["db", "new"]})),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/properties"), json!({"updates": {"k": "v"}, "removals": []})),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/tables"), table_body("t9")),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/register"), json!({"name": "t9", "metadata-location": t1_location})),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/views"), json!({"name": "v9", "schema": view["schema"], "view-version": view["view-version"]})),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/register-view"), json!({"name": "v9", "metadata-location": t1_location})),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"), set_property()),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics"), json!({"report-type": "scan-report", "table-name": "db.t1", "snapshot-id": 1, "metrics": {}})),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/unregister"), json!({})),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/sign"), json!({"region": "us-east-1", "uri": "s3://b/k", "method": "GET", "headers": {}})),
        (("POST", "/v1/{prefix}/namespaces/{namespace}/views/{view}"), json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]})),
        (("POST", "/v1/{prefix}/tables/rename"), json!({"source": {"namespace": ["db"], "name": "t1"}, "destination": {"namespace": ["db"], "name": "t9"}})),
        (("POST", "/v1/{prefix}/views/rename"), json!({"source": {"namespace": ["db"], "name": "v1"}, "destination": {"namespace": ["db"], "name": "v9"}})),
        (("POST", "/v1/{prefix}/transactions/commit"), json!({"table-changes": [{"identifier": {"namespace": ["db"], "name": "t1"}, "requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]}]})),
        (("POST", "/management/v1/warehouses"), json!({"name": "w9", "storage-root": "file:///tmp/icegate-stranger-w9"})),
        (("PUT", "/management/v1/warehouses/{name}/storage-profile"), json!({"type": "file"})),
        (("PUT", "/management/v1/warehouses/{name}/settings"), json!({"audit.record-reads": false})),
        (("POST", "/management/v1/principals"), json!({"name": "p9"})),
        (("POST", "/management/v1/roles"), json!({"name": "r9"})),
        (("POST", "/management/v1/grants"), json!({"role": "stranger-role", "privilege": "admin", "securable": {"type": "server"}})),
        (("DELETE", "/management/v1/grants"), json!({"role": "admin", "privilege": "admin", "securable": {"type": "server"}})),
        (("POST", "/management/v1/access-reviews"), json!({"scope": {"warehouse": "default"}})),
        (("POST", "/management/v1/access-reviews/{id}/decisions"), json!({"decisions": [{"line": 1, "decision": "revoke-grant"}]})),
        (("POST", "/management/v1/legal-holds"), json!({"securable": {"type": "table", "warehouse": "default", "namespace": ["db"], "name": "t1"}, "reason": "r"})),
        (("POST", "/management/v1/warehouses/{name}/undrop"), json!({"namespace": ["db"], "name": "t1"})),
        (("POST", "/management/v1/warehouses/{name}/maintenance/plan"), json!({"namespace": ["db"], "table": "t1"})),
        (("POST", "/management/v1/warehouses/{name}/maintenance/run"), json!({"namespace": ["db"], "table": "t1"})),
        (("POST", "/management/v1/warehouses/{name}/maintenance/quarantine/restore"), json!({"namespace": ["db"], "table": "t1"})),
        (("POST", "/management/v1/warehouses/{name}/source-locations"), json!({"location": "file:///tmp/icegate-stranger-lake"})),
        (("POST", "/management/v1/warehouses/{name}/adoptions"), json!({"source": "file:///tmp/icegate-stranger-lake", "namespace": ["db"], "name": "t9"})),
        (("POST", "/management/v1/warehouses/{name}/adoptions/{id}/sync"), json!({})),
        (("POST", "/management/v1/migrations"), json!({"source": {"type": "sql", "uri": "sqlite:////tmp/icegate-stranger.db", "catalog-name": "c"}, "target-warehouse": "default", "dry-run": true})),
        (("POST", "/management/v1/migrations/{id}/rollback"), json!({})),
        (("POST", "/management/v1/migrations/{id}/retire"), json!({})),
    ]
    .into_iter()
    .collect();
    let mut checked = 0;
    for (method, route) in icegate_api::openapi::documents().operations() {
        if icegate_api::authn::PUBLIC_ROUTES.contains(&route.as_str()) {
            continue;
        }
        let body = bodies.get(&(method.as_str(), route.as_str())).cloned();
        let method: Method = method.parse().unwrap();
        let path = route
            .replace("{namespace}", "db")
            .replace("{table}", "t1")
            .replace("{view}", "v1")
            .replace("{name}", "default")
            .replace("{role}", "admin")
            .replace("{principal}", "admin")
            .replace("{id}", "01a24000-0000-7000-8000-000000000000");
        let path = match route.as_str() {
            "/management/v1/grants/on" => format!("{path}?type=server"),
            "/management/v1/grants" if method == Method::GET => format!("{path}?role=admin"),
            "/management/v1/access-reviews/{id}/diff" => format!("{path}?against=x"),
            "/management/v1/warehouses/{name}/source-locations" if method == Method::DELETE => {
                format!("{path}?location=file:///tmp/icegate-stranger-lake")
            }
            _ => path,
        };
        let needs_body = matches!(method, Method::POST | Method::PUT)
            && !route.contains("{principal}")
            && !route.ends_with("/rotate-secret")
            && !route.ends_with("/close")
            && !route.ends_with("/cancel");
        assert!(body.is_some() || !needs_body, "{method} {route}: no request body in this test");
        let anonymous = {
            let mut request = app.client.request(method.clone(), app.url(&path));
            if let Some(body) = &body {
                request = request.json(body);
            }
            request.send().await.unwrap().status()
        };
        assert_eq!(anonymous, 401, "{method} {route} without a token");
        let (status, response) = call(&app, &stranger, method.clone(), &path, body).await;
        match route.as_str() {
            "/management/v1/whoami" => assert_eq!(response["roles"], json!(["stranger-role"])),
            "/management/v1/warehouses" if method == Method::GET => assert_eq!(response["warehouses"], json!([])),
            "/management/v1/access-reviews" if method == Method::GET => assert_eq!(response["reviews"], json!([])),
            _ => assert!(status == 403 || status == 404, "{method} {route} for a stranger: {status} {response}"),
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} operations were checked");
    // And nothing changed: the admin still sees everything as seeded.
    let (_, tables) = call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces/db/tables", None).await;
    assert_eq!(tables["identifiers"].as_array().unwrap().len(), 3);
    let (_, views) = call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces/db/views", None).await;
    assert_eq!(views["identifiers"], json!([{"namespace": ["db"], "name": "v1"}]));
    let (_, loaded) = call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await;
    assert_eq!(loaded["metadata-location"], t1_location.as_str());
    let (_, namespaces) = call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces?parent=db", None).await;
    assert_eq!(namespaces["namespaces"], json!([["db", "sub"]]));
    let (_, warehouses) = call(&app, &admin, Method::GET, "/management/v1/warehouses", None).await;
    assert_eq!(warehouses["warehouses"].as_array().unwrap().len(), 1);
    let (_, principals) = call(&app, &admin, Method::GET, "/management/v1/principals", None).await;
    assert_eq!(principals["principals"].as_array().unwrap().len(), 2);
    let (_, roles) = call(&app, &admin, Method::GET, "/management/v1/roles", None).await;
    assert_eq!(roles["roles"].as_array().unwrap().len(), 2);
    let (_, me) = call(&app, &admin, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!(me["server-privileges"], json!(["admin"]), "the admin's grant is still there: {me}");
}

/// unregisterTable answers with the table's metadata: `drop` alone does not let its holder read
/// it, so it takes `read` too; with both, the table leaves the catalog.
async fn unregister_needs_drop_and_read(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    seed(&app, &admin).await;
    let dropper = principal(&app, &admin, "dropper", &[("drop", table(&["db"], "t1"))]).await;
    let unregister = "/v1/{prefix}/namespaces/db/tables/t1/unregister";
    let (status, body) = call(&app, &dropper, Method::POST, unregister, Some(json!({}))).await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"]["message"].as_str().is_some() && body.get("metadata").is_none(), "{body}");
    assert_eq!(
        call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await.0,
        200,
        "still there"
    );
    let owner =
        principal(&app, &admin, "owner", &[("drop", table(&["db"], "t1")), ("read", table(&["db"], "t1"))]).await;
    let (status, body) = call(&app, &owner, Method::POST, unregister, Some(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["metadata"]["table-uuid"].is_string());
    assert_eq!(call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await.0, 404, "gone");
}

/// A second replica on the same database, sharing nothing in memory with `app` (its own
/// authorization and metadata caches), as a second icegate process would.
pub(crate) async fn replica(app: &TestApp) -> TestApp {
    use std::sync::Arc;
    let db = app._db.as_ref().expect("spawned app");
    let store: Arc<dyn icegate_catalog::CatalogStore> = Arc::new(db.store.clone());
    let access: Arc<dyn icegate_catalog::access::AccessStore> = Arc::new(db.store.clone());
    let name = icegate_catalog::WarehouseName::parse("default").unwrap();
    let mut other =
        TestApp::serve_with(store, access, true, Vec::new(), Some(name), crate::common::default_options()).await;
    other.prefix = app.prefix.clone();
    other
}

/// Grants follow tables, not names: a decision cached on one replica for a name (by a load) is
/// not used for another table that took the name through another replica meanwhile. The
/// writer's commit, load and drop through the first replica reach nothing of the table that
/// now holds the name; its grant went along with its own table to the new name.
async fn decisions_follow_tables_not_names_across_replicas(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    seed(&app, &admin).await;
    let other = replica(&app).await;
    let grants = [
        ("read", table(&["db"], "t1")),
        ("write", table(&["db"], "t1")),
        ("drop", table(&["db"], "t1")),
        ("manage_grants", table(&["db"], "t1")),
    ];
    let writer = principal(&app, &admin, "writer", &grants).await;
    let t1 = "/v1/{prefix}/namespaces/db/tables/t1";
    let (status, own) = call(&app, &writer, Method::GET, t1, None).await;
    assert_eq!(status, 200, "{own}");
    let (_, victim) = call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces/db/tables/t2", None).await;
    // Through the other replica: t1 -> t1_old, t2 -> t1 (this replica's caches know nothing of it).
    for (from, to) in [("t1", "t1_old"), ("t2", "t1")] {
        let rename =
            json!({"source": {"namespace": ["db"], "name": from}, "destination": {"namespace": ["db"], "name": to}});
        let (status, body) = call(&other, &admin, Method::POST, "/v1/{prefix}/tables/rename", Some(rename)).await;
        assert_eq!(status, 204, "{body}");
    }
    let (_, now_t1) = call(&other, &admin, Method::GET, t1, None).await;
    assert_eq!(now_t1["metadata"]["table-uuid"], victim["metadata"]["table-uuid"]);

    let (status, body) = call(&app, &writer, Method::GET, t1, None).await;
    assert_eq!(status, 404, "the other table's metadata: {body}");
    let stolen = json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"stolen": "yes"}}]});
    let (status, body) = call(&app, &writer, Method::POST, t1, Some(stolen.clone())).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = call(&app, &writer, Method::DELETE, t1, None).await;
    assert_eq!(status, 404, "{body}");
    let away =
        json!({"source": {"namespace": ["db"], "name": "t1"}, "destination": {"namespace": ["db"], "name": "mine"}});
    let (status, body) = call(&app, &writer, Method::POST, "/v1/{prefix}/tables/rename", Some(away)).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(call(&app, &writer, Method::HEAD, t1, None).await.0, 404);
    let report = json!({"report-type": "scan-report", "table-name": "db.t1", "snapshot-id": 1, "metrics": {}});
    let (status, body) = call(&app, &writer, Method::POST, &format!("{t1}/metrics"), Some(report)).await;
    assert_eq!(status, 404, "{body}");
    // Nor can it hand itself, or see, grants on the table that took the name.
    let grant = json!({"role": "writer-role", "privilege": "read", "securable": table(&["db"], "t1")});
    let (status, body) = call(&app, &writer, Method::POST, "/management/v1/grants", Some(grant)).await;
    assert_eq!(status, 404, "{body}");
    let on = "/management/v1/grants/on?type=table&warehouse=default&namespace=db&name=t1";
    let (status, body) = call(&app, &writer, Method::GET, on, None).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = call(&other, &admin, Method::GET, on, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.to_string().contains("writer-role"), "{body}");
    let (status, after) = call(&other, &admin, Method::GET, t1, None).await;
    assert_eq!(status, 200, "still there: {after}");
    assert_eq!(after["metadata"]["table-uuid"], victim["metadata"]["table-uuid"]);
    assert!(after["metadata"]["properties"].get("stolen").is_none(), "{after}");
    assert_eq!(after["metadata-location"], victim["metadata-location"], "unchanged");

    // Its own table, under its new name, is still its own.
    let (status, body) =
        call(&app, &writer, Method::POST, "/v1/{prefix}/namespaces/db/tables/t1_old", Some(stolen)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["metadata"]["table-uuid"], own["metadata"]["table-uuid"]);
}

secured_http_tests!(
    decisions_follow_tables_not_names_across_replicas,
    unregister_needs_drop_and_read,
    every_operation_is_closed_to_strangers,
    tokens_are_issued_for_client_credentials_only,
    bad_credentials_are_401_and_say_nothing_more,
    a_remembered_token_still_expires,
    the_admin_may_do_everything,
    a_reader_reads_one_table_and_sees_nothing_else,
    grants_on_a_namespace_apply_to_everything_below,
    revocation_and_expiry_take_effect_at_once,
    renames_need_drop_at_the_source_and_create_at_the_target,
    filtered_listings_paginate_correctly,
    an_access_review_lists_who_can_do_what_and_why,
);
