//! The token endpoint and token lifetimes: secrets stored as keyed hashes (cheap to check, so an
//! open endpoint cannot spend the server's CPU), earlier Argon2id hashes checked a few at a time
//! and rehashed, and rotation ending the tokens issued under the old secret.

use argon2::password_hash::{PasswordHasher, SaltString};
use icegate_catalog::access::AccessStore;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::auth::{call, token};
use crate::common::{ADMIN_ID, ADMIN_SECRET, TestApp};
use crate::secured_http_tests;

async fn token_request(app: &TestApp, id: &str, secret: &str) -> reqwest::Response {
    app.client
        .post(app.url("/v1/oauth/tokens"))
        .form(&[("grant_type", "client_credentials"), ("client_id", id), ("client_secret", secret)])
        .send()
        .await
        .unwrap()
}

fn access(app: &TestApp) -> &icegate_store::SqlStore {
    &app._db.as_ref().unwrap().store
}

async fn rotating_a_secret_ends_the_tokens_issued_under_the_old_one(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    let (status, created) =
        call(&app, &admin, Method::POST, "/management/v1/principals", Some(json!({"name": "etl"}))).await;
    assert_eq!(status, 201, "{created}");
    let (id, first) = (created["client-id"].as_str().unwrap(), created["client-secret"].as_str().unwrap());
    let old = token(&app, id, first).await;
    assert_eq!(call(&app, &old, Method::GET, "/management/v1/whoami", None).await.0, 200);

    let (status, rotated) = call(&app, &admin, Method::POST, "/management/v1/principals/etl/rotate-secret", None).await;
    assert_eq!(status, 200, "{rotated}");
    // The token issued under the old secret is refused, as is the old secret itself.
    let (status, body) = call(&app, &old, Method::GET, "/management/v1/whoami", None).await;
    assert_eq!((status.as_u16(), &body["error"]["type"]), (401, &json!("NotAuthorizedException")), "{body}");
    assert_eq!(token_request(&app, id, first).await.status(), 401);
    let new = token(&app, id, rotated["client-secret"].as_str().unwrap()).await;
    assert_eq!(call(&app, &new, Method::GET, "/management/v1/whoami", None).await.0, 200);
    let (_, shown) = call(&app, &admin, Method::GET, "/management/v1/principals/etl", None).await;
    assert_eq!(shown["secret-version"], 2, "{shown}");
    // The rotation is in the database, not only in this process's caches.
    let stored = access(&app).principal_by_name("etl").await.unwrap().unwrap();
    assert_eq!(stored.secret_version, 2);
}

async fn secrets_are_stored_as_keyed_hashes_and_argon2_ones_are_rehashed_on_use(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    let (_, created) =
        call(&app, &admin, Method::POST, "/management/v1/principals", Some(json!({"name": "fresh"}))).await;
    let stored = access(&app).principal_by_name("fresh").await.unwrap().unwrap();
    let hash = stored.secret_hash.unwrap();
    assert!(hash.starts_with("$icegate-hmac-sha256$"), "{hash}");
    assert!(!hash.contains(created["client-secret"].as_str().unwrap()));

    // A principal whose secret an earlier version hashed with Argon2id.
    let secret = "a-secret-from-an-earlier-version-0123456789";
    let salt = SaltString::encode_b64(b"sixteen byte sal").unwrap();
    let legacy = argon2::Argon2::default().hash_password(secret.as_bytes(), &salt).unwrap().to_string();
    access(&app)
        .create_principal(&icegate_catalog::idempotency::WriteContext::NONE, "old-timer", "old-timer-id", &legacy)
        .await
        .unwrap();
    assert_eq!(token_request(&app, "old-timer-id", "wrong").await.status(), 401);
    assert_eq!(access(&app).principal_by_name("old-timer").await.unwrap().unwrap().secret_hash.unwrap(), legacy);
    // A failed Argon2id check is not run again for that client id within a second.
    assert_eq!(token_request(&app, "old-timer-id", secret).await.status(), 503);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    // The right secret is accepted, and its hash replaced by the current form.
    let issued = token(&app, "old-timer-id", secret).await;
    assert_eq!(call(&app, &issued, Method::GET, "/management/v1/whoami", None).await.0, 200);
    let rehashed = access(&app).principal_by_name("old-timer").await.unwrap().unwrap();
    assert!(rehashed.secret_hash.as_deref().unwrap().starts_with("$icegate-hmac-sha256$"), "{rehashed:?}");
    assert_eq!(rehashed.secret_version, 1, "the same secret: tokens issued before stay valid");
    assert_eq!(call(&app, &issued, Method::GET, "/management/v1/whoami", None).await.0, 200);
    token(&app, "old-timer-id", secret).await;
    // Now a keyed hash: a wrong secret is refused at once, and retried at once.
    assert_eq!(token_request(&app, "old-timer-id", "wrong").await.status(), 401);
    assert_eq!(token_request(&app, "old-timer-id", "wrong").await.status(), 401);
}

async fn argon2_checks_past_their_bound_are_answered_503_at_once(app: TestApp) {
    let salt = SaltString::encode_b64(b"sixteen byte sal").unwrap();
    let legacy = argon2::Argon2::default().hash_password(b"right", &salt).unwrap().to_string();
    access(&app)
        .create_principal(&icegate_catalog::idempotency::WriteContext::NONE, "slow", "slow-id", &legacy)
        .await
        .unwrap();
    let mut attempts = tokio::task::JoinSet::new();
    for _ in 0..48 {
        let request = app.client.post(app.url("/v1/oauth/tokens")).form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "slow-id"),
            ("client_secret", "wrong"),
        ]);
        attempts.spawn(async move { request.send().await.unwrap() });
    }
    let mut busy = 0;
    while let Some(answer) = attempts.join_next().await {
        let answer = answer.unwrap();
        match answer.status() {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::SERVICE_UNAVAILABLE => {
                busy += 1;
                assert_eq!(answer.headers()["retry-after"], "1");
                let body: Value = answer.json().await.unwrap();
                assert_eq!(body["error"], "temporarily_unavailable", "{body}");
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert!(busy > 0, "48 Argon2id checks at once were all run");
    // Unknown client ids and current hashes never wait for that bound.
    assert_eq!(token_request(&app, "nobody", "x").await.status(), 401);
    token(&app, ADMIN_ID, ADMIN_SECRET).await;
}

async fn a_flood_at_one_legacy_client_id_leaves_the_others_their_turn(app: TestApp) {
    let salt = SaltString::encode_b64(b"sixteen byte sal").unwrap();
    let hash = |secret: &str| argon2::Argon2::default().hash_password(secret.as_bytes(), &salt).unwrap().to_string();
    access(&app)
        .create_principal(&icegate_catalog::idempotency::WriteContext::NONE, "flooded", "flooded-id", &hash("right"))
        .await
        .unwrap();
    access(&app)
        .create_principal(
            &icegate_catalog::idempotency::WriteContext::NONE,
            "bystander",
            "bystander-id",
            &hash("bystander-secret"),
        )
        .await
        .unwrap();
    // A flood of guesses at one client id, all at once: it takes one check at a time.
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..48 {
        let request = app.client.post(app.url("/v1/oauth/tokens")).form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "flooded-id"),
            ("client_secret", "wrong"),
        ]);
        flood.spawn(async move { request.send().await.unwrap().status() });
    }
    // Meanwhile another principal still on an Argon2id hash gets its token.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(token_request(&app, "bystander-id", "bystander-secret").await.status(), 200);
    let mut answered = Vec::new();
    while let Some(status) = flood.join_next().await {
        answered.push(status.unwrap().as_u16());
    }
    assert!(answered.iter().all(|s| *s == 401 || *s == 503), "{answered:?}");
    assert!(answered.iter().filter(|s| **s == 401).count() <= 8, "each guess ran a check: {answered:?}");
    // Client ids and secrets longer than any icegate makes are refused unchecked, and a token
    // request's body is small.
    assert_eq!(token_request(&app, "flooded-id", &"s".repeat(8 * 1024)).await.status(), 401);
    assert_eq!(token_request(&app, &"i".repeat(4096), "x").await.status(), 401);
    assert_eq!(token_request(&app, "flooded-id", &"s".repeat(32 * 1024)).await.status(), 413);
}

async fn a_replica_accepts_a_token_issued_after_a_rotation_it_has_not_seen(app: TestApp) {
    let admin = token(&app, ADMIN_ID, ADMIN_SECRET).await;
    let (_, created) =
        call(&app, &admin, Method::POST, "/management/v1/principals", Some(json!({"name": "roamer"}))).await;
    let id = created["client-id"].as_str().unwrap();
    let other = crate::auth::replica(&app).await;
    // The replica remembers the principal's secret version 1 (its cache lives 600 s here).
    let old = token(&app, id, created["client-secret"].as_str().unwrap()).await;
    assert_eq!(call(&other, &old, Method::GET, "/management/v1/whoami", None).await.0, 200);
    let (_, rotated) = call(&app, &admin, Method::POST, "/management/v1/principals/roamer/rotate-secret", None).await;
    // A token for the new secret, issued by either replica, works on the replica at once.
    let new = token(&other, id, rotated["client-secret"].as_str().unwrap()).await;
    assert_eq!(call(&other, &new, Method::GET, "/management/v1/whoami", None).await.0, 200);
    // And having seen it, the replica refuses the old token (before its cache would have ended).
    assert_eq!(call(&other, &old, Method::GET, "/management/v1/whoami", None).await.0, 401);
}

secured_http_tests!(
    a_flood_at_one_legacy_client_id_leaves_the_others_their_turn,
    a_replica_accepts_a_token_issued_after_a_rotation_it_has_not_seen,
    rotating_a_secret_ends_the_tokens_issued_under_the_old_one,
    secrets_are_stored_as_keyed_hashes_and_argon2_ones_are_rehashed_on_use,
    argon2_checks_past_their_bound_are_answered_503_at_once,
);
