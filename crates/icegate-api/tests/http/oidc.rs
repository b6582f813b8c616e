//! Tokens from an external OIDC issuer, served by a local discovery + JWKS endpoint, with key
//! rotation. The RSA keys in `keys/` exist only for these tests.

use std::sync::{Arc, Mutex};

use axum::routing::get;
use icegate_api::oidc::OidcIssuerConfig;
use icegate_store::testing::TestBackend;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{ADMIN_ID, ADMIN_SECRET, TestApp, assert_error};

const KEY_A: &str = include_str!("keys/oidc-a.pem");
const KEY_B: &str = include_str!("keys/oidc-b.pem");
const N_A: &str = include_str!("keys/oidc-a.n");
const N_B: &str = include_str!("keys/oidc-b.n");

fn jwk(kid: &str, n: &str) -> Value {
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": n.trim(), "e": "AQAB"})
}

/// A local identity provider: discovery document and a JWKS that the test can rotate.
async fn identity_provider(keys: Arc<Mutex<Value>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let discovery = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")});
    let app = axum::Router::new()
        .route("/.well-known/openid-configuration", get(move || async move { axum::Json(discovery) }))
        .route("/jwks", get(move || async move { axum::Json(keys.lock().unwrap().clone()) }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    issuer
}

fn sign(pem: &str, kid: &str, claims: Value) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap()).unwrap()
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

async fn call(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (reqwest::StatusCode, Value) {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap() })
}

async fn admin_token(app: &TestApp) -> String {
    let response = app
        .client
        .post(app.url("/v1/oauth/tokens"))
        .form(&[("grant_type", "client_credentials"), ("client_id", ADMIN_ID), ("client_secret", ADMIN_SECRET)])
        .send()
        .await
        .unwrap();
    response.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned()
}

async fn oidc_tokens_are_verified_provisioned_mapped_to_roles_and_survive_key_rotation(backend: TestBackend) {
    let keys = Arc::new(Mutex::new(json!({"keys": [jwk("a", N_A)]})));
    let issuer = identity_provider(keys.clone()).await;
    let config = OidcIssuerConfig {
        issuer: issuer.clone(),
        jwks_url: None,
        audience: "icegate-api".into(),
        subject_claim: "sub".into(),
        roles_claim: Some("groups".into()),
        claimable_roles: vec!["analysts".into()],
        claimable_role_prefix: None,
        admin_roles: Vec::new(),
        name: Some("idp".into()),
        console_client_id: None,
        console_client_secret: None,
        console_scopes: None,
    };
    let app = TestApp::spawn_secured_with_oidc(backend, vec![config.clone()]).await;
    let admin = admin_token(&app).await;
    for (path, body) in [
        ("/v1/{prefix}/namespaces", json!({"namespace": ["db"]})),
        ("/v1/{prefix}/namespaces/db/tables", json!({"name": "t1", "schema": {"type": "struct", "fields": []}})),
        ("/v1/{prefix}/namespaces/db/tables", json!({"name": "t2", "schema": {"type": "struct", "fields": []}})),
        ("/management/v1/roles", json!({"name": "analysts"})),
        (
            "/management/v1/grants",
            json!({"role": "analysts", "privilege": "read",
            "securable": {"type": "table", "warehouse": "default", "namespace": ["db"], "name": "t1"}}),
        ),
    ] {
        let (status, body) = call(&app, &admin, Method::POST, path, Some(body)).await;
        assert!(status.is_success(), "{path}: {body}");
    }
    let claims = |groups: Value, aud: &str, exp: u64| json!({"iss": issuer, "aud": aud, "sub": "alice-123", "preferred_username": "alice", "groups": groups, "exp": exp, "iat": now()});

    // A valid token: provisioned on first sight, its group claim maps onto the `analysts` role.
    let alice = sign(KEY_A, "a", claims(json!(["analysts", "unknown-group"]), "icegate-api", now() + 600));
    assert_eq!(call(&app, &alice, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await.0, 200);
    assert_error(
        call(&app, &alice, Method::GET, "/v1/{prefix}/namespaces/db/tables/t2", None).await,
        404,
        "NoSuchTableException",
    );
    let (_, me) = call(&app, &alice, Method::GET, "/management/v1/whoami", None).await;
    // Named by the issuer's subject, which its user cannot change, and by issuer: an external
    // user can never take a name meant for another user, another issuer's user or one of
    // icegate's own principals.
    assert_eq!(me["principal"], "alice-123@idp");
    assert_eq!(me["roles"], json!(["analysts"]));
    let (_, listed) = call(&app, &admin, Method::GET, "/management/v1/principals/alice-123@idp", None).await;
    assert_eq!(listed["display-name"], "alice", "{listed}");

    // A group claim naming the `admin` role makes the caller a member, but the role's grants on
    // the server do not apply through a claim unless the issuer's admin_roles lists it.
    let mallory = sign(
        KEY_A,
        "a",
        json!({"iss": issuer, "aud": "icegate-api", "sub": "mallory-1", "preferred_username": "admin",
               "groups": ["admin"], "exp": now() + 600, "iat": now()}),
    );
    let (_, me) = call(&app, &mallory, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!(me["principal"], "mallory-1@idp", "named by subject, not by the username it chose");
    assert_eq!(me["server-privileges"], json!([]), "{me}");
    assert_eq!(me["roles"], json!([]), "admin is not claimable by this issuer: {me}");
    let (status, _) = call(&app, &mallory, Method::GET, "/management/v1/principals", None).await;
    assert_eq!(status, 403);
    let (status, _) = call(&app, &mallory, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await;
    assert_eq!(status, 404);
    // With the role named in admin_roles, the mapping is the operator's explicit choice.
    let trusted = TestApp::spawn_secured_with_oidc(
        backend,
        vec![OidcIssuerConfig { admin_roles: vec!["admin".into()], ..config.clone() }],
    )
    .await;
    let (_, me) = call(&trusted, &mallory, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!(me["server-privileges"], json!(["admin"]), "{me}");
    assert_eq!(call(&trusted, &mallory, Method::GET, "/management/v1/principals", None).await.0, 200);

    // A role the operator did not make claimable for this issuer is never joined by a claim,
    // whatever it holds: a warehouse's admins, say.
    for (path, body) in [
        ("/management/v1/roles", json!({"name": "wh-admins"})),
        (
            "/management/v1/grants",
            json!({"role": "wh-admins", "privilege": "admin", "securable": {"type": "warehouse", "warehouse": "default"}}),
        ),
    ] {
        let (status, body) = call(&app, &admin, Method::POST, path, Some(body)).await;
        assert!(status.is_success(), "{path}: {body}");
    }
    let climber = sign(
        KEY_A,
        "a",
        json!({"iss": issuer, "aud": "icegate-api", "sub": "eve-7", "preferred_username": "alice",
               "groups": ["wh-admins", "analysts"], "exp": now() + 600, "iat": now()}),
    );
    let (_, me) = call(&app, &climber, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!(me["roles"], json!(["analysts"]), "{me}");
    assert_eq!(me["principal"], "eve-7@idp", "a chosen username does not take Alice's name: {me}");
    let (status, _) =
        call(&app, &climber, Method::POST, "/v1/{prefix}/namespaces", Some(json!({"namespace": ["climbed"]}))).await;
    assert!(status == 403 || status == 404, "a warehouse admin role joined through a claim: {status}");
    let (status, _) = call(&app, &admin, Method::GET, "/v1/{prefix}/namespaces/climbed", None).await;
    assert_eq!(status, 404);
    // A prefix makes a family of roles claimable by this issuer, and only by it.
    let prefixed = TestApp::spawn_secured_with_oidc(
        backend,
        vec![OidcIssuerConfig { claimable_roles: vec![], claimable_role_prefix: Some("wh-".into()), ..config.clone() }],
    )
    .await;
    let admin_there = admin_token(&prefixed).await;
    for (path, body) in
        [("/management/v1/roles", json!({"name": "wh-readers"})), ("/management/v1/roles", json!({"name": "analysts"}))]
    {
        assert!(call(&prefixed, &admin_there, Method::POST, path, Some(body)).await.0.is_success());
    }
    let (_, me) = call(&prefixed, &climber, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!(me["roles"], json!([]), "wh-admins does not exist there, analysts is not claimable: {me}");
    let reader = sign(
        KEY_A,
        "a",
        json!({"iss": issuer, "aud": "icegate-api", "sub": "bob-2", "groups": ["wh-readers"], "exp": now() + 600}),
    );
    let (_, me) = call(&prefixed, &reader, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!(me["roles"], json!(["wh-readers"]), "{me}");

    // Refused: wrong audience, expired, signed with another key under a known kid, wrong issuer.
    let refused = [
        sign(KEY_A, "a", claims(json!(["analysts"]), "someone-else", now() + 600)),
        sign(KEY_A, "a", claims(json!(["analysts"]), "icegate-api", now() - 600)),
        sign(KEY_B, "a", claims(json!(["analysts"]), "icegate-api", now() + 600)),
        sign(
            KEY_A,
            "a",
            json!({"iss": "http://evil.example", "aud": "icegate-api", "sub": "alice-123", "exp": now() + 600}),
        ),
    ];
    for token in refused {
        assert_error(
            call(&app, &token, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await,
            401,
            "NotAuthorizedException",
        );
    }

    // The provider rotates to key B: a token with the new kid makes icegate refetch the JWKS.
    *keys.lock().unwrap() = json!({"keys": [jwk("b", N_B)]});
    tokio::time::sleep(std::time::Duration::from_millis(5100)).await; // past the refetch interval
    let rotated = sign(KEY_B, "b", claims(json!(["analysts"]), "icegate-api", now() + 600));
    assert_eq!(call(&app, &rotated, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await.0, 200);

    // A later token without the group loses the role (claim memberships follow the token).
    let demoted = sign(KEY_B, "b", claims(json!([]), "icegate-api", now() + 601));
    assert_error(
        call(&app, &demoted, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await,
        404,
        "NoSuchTableException",
    );
    // A token issued before that one, seen only now (by this replica or another), does not
    // bring the group back: claims follow the latest token issued, not the latest seen.
    let stale = sign(
        KEY_B,
        "b",
        json!({"iss": issuer, "aud": "icegate-api", "sub": "alice-123", "groups": ["analysts"],
               "exp": now() + 500, "iat": now() - 100}),
    );
    let (_, me) = call(&app, &stale, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!(me["roles"], json!([]), "{me}");
    // A date in the future counts as now: it cannot hold claims in place against later tokens.
    let ahead = sign(
        KEY_B,
        "b",
        json!({"iss": issuer, "aud": "icegate-api", "sub": "alice-123", "groups": ["analysts"],
               "exp": now() + 500, "iat": now() + 10 * 365 * 86_400}),
    );
    assert_eq!(call(&app, &ahead, Method::GET, "/management/v1/whoami", None).await.1["roles"], json!(["analysts"]));
    let later = sign(KEY_B, "b", claims(json!([]), "icegate-api", now() + 602));
    assert_eq!(call(&app, &later, Method::GET, "/management/v1/whoami", None).await.1["roles"], json!([]));
    assert_error(
        call(&app, &demoted, Method::GET, "/v1/{prefix}/namespaces/db/tables/t1", None).await,
        404,
        "NoSuchTableException",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_on_sqlite() {
    oidc_tokens_are_verified_provisioned_mapped_to_roles_and_survive_key_rotation(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_on_postgres() {
    oidc_tokens_are_verified_provisioned_mapped_to_roles_and_survive_key_rotation(TestBackend::Postgres).await;
}
