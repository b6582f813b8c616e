//! The console's sign-in through an OpenID Connect issuer: the authorization code flow with
//! PKCE (S256). The flow's state and code verifier live in a short-lived cookie of this browser
//! (`HttpOnly`, `SameSite=Lax` so that the issuer's redirect back carries it, limited to the
//! callback's path): nothing is held on the server for a sign-in that is never finished, and a
//! callback is accepted only in the browser that started it, with the state it was sent with
//! (no signing a visitor in as someone else). The code is exchanged at the issuer's token
//! endpoint, found through the configured issuer's discovery document; the access token that
//! comes back is the session's token, which the API verifies like any bearer token of that
//! issuer (signature, issuer, audience, expiry) and maps to its principal.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use maud::{DOCTYPE, html};
use serde_json::Value;
use sha2::Digest;

use super::pages::{SESSION_COOKIE, cookies, layout, set_cookie};
use super::session::{random_token, same};
use super::{Console, harden, page};

const FLOW_COOKIE: &str = "icegate_oidc";
/// The longest a session signed in through an issuer lasts (its token's lifetime, if shorter).
const MAX_SESSION: Duration = Duration::from_secs(12 * 3600);
/// How long a started sign-in may take at the issuer.
const FLOW_SECONDS: u64 = 600;
/// The largest discovery document or token answer read from an issuer.
const MAX_ISSUER_ANSWER: usize = 256 * 1024;

/// What the console uses of an issuer's discovery document.
#[derive(Clone)]
pub(super) struct Discovered {
    authorize: String,
    token: String,
    /// The issuer names itself in its answers (RFC 9207): an answer without its name is refused.
    sends_iss: bool,
}

/// How long a discovery document is reused.
const DISCOVERY_SECONDS: u64 = 300;

/// The issuer's discovery document (checked to be the configured issuer's), fetched at most
/// every few minutes.
async fn discover(console: &Console, issuer: &str) -> Result<Discovered, String> {
    if let Some((at, found)) = console.discovered.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(issuer)
        && at.elapsed() < Duration::from_secs(DISCOVERY_SECONDS)
    {
        return Ok(found.clone());
    }
    let url = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
    let document = fetch_json(console.http.get(&url)).await?;
    if document["issuer"].as_str() != Some(issuer) {
        return Err(format!("the discovery document at {url} names another issuer"));
    }
    let endpoint = |key: &str| {
        document[key]
            .as_str()
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
            .map(str::to_owned)
            .ok_or_else(|| format!("the discovery document has no {key}"))
    };
    let found = Discovered {
        authorize: endpoint("authorization_endpoint")?,
        token: endpoint("token_endpoint")?,
        sends_iss: document["authorization_response_iss_parameter_supported"] == true,
    };
    let mut cache = console.discovered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // A few issuers are configured: the cache holds one entry each.
    cache.insert(issuer.to_owned(), (std::time::Instant::now(), found.clone()));
    Ok(found)
}

/// An issuer's JSON answer, read up to `MAX_ISSUER_ANSWER` bytes.
async fn fetch_json(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let mut response = request.send().await.map_err(|e| format!("the identity provider is unreachable: {e}"))?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("reading the identity provider: {e}"))? {
        if body.len() + chunk.len() > MAX_ISSUER_ANSWER {
            return Err("the identity provider's answer is too large".into());
        }
        body.extend_from_slice(&chunk);
    }
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !status.is_success() {
        let reason =
            value["error_description"].as_str().or_else(|| value["error"].as_str()).unwrap_or("no reason given");
        return Err(format!("the identity provider answered {status}: {reason}"));
    }
    Ok(value)
}

/// Where issuer `issuer` sends the browser back: a path of its own per issuer, so that an
/// answer can only come back to the issuer its sign-in went to (no mixing up two issuers).
pub fn redirect_uri(public_url: &str, issuer: &crate::oidc::OidcIssuerConfig) -> String {
    let name = percent_encoding::utf8_percent_encode(&issuer.principal_suffix(), percent_encoding::NON_ALPHANUMERIC)
        .to_string();
    format!("{}/ui/oidc/callback/{name}", public_url.trim_end_matches('/'))
}

fn failed(status: StatusCode, why: &str) -> Response {
    let mut response = page(layout(
        "Sign in",
        None,
        html! {
            p.error role="alert" { "Sign-in failed: " (why) }
            p { a href="/ui/login" { "Try again" } }
        },
    ));
    *response.status_mut() = status;
    response
}

/// Starts a sign-in at issuer `i`: a fresh state and code verifier in this browser's cookie,
/// then to the issuer's authorization endpoint with the verifier's S256 challenge.
pub(super) async fn start(State(console): State<Console>, Query(q): Query<HashMap<String, String>>) -> Response {
    let Some((index, issuer)) =
        q.get("i").and_then(|i| i.parse::<usize>().ok()).and_then(|i| console.oidc.get(i).map(|c| (i, c)))
    else {
        return failed(StatusCode::NOT_FOUND, "no such identity provider");
    };
    let authorize = match discover(&console, &issuer.issuer).await {
        Ok(found) => found.authorize,
        Err(why) => return failed(StatusCode::BAD_GATEWAY, &why),
    };
    let state = random_token();
    let verifier = format!("{}{}", random_token(), random_token());
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
    let mut url = match url::Url::parse(&authorize) {
        Ok(url) => url,
        Err(e) => return failed(StatusCode::BAD_GATEWAY, &format!("the authorization endpoint: {e}")),
    };
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", issuer.console_client_id.as_deref().unwrap_or_default())
        .append_pair("redirect_uri", &redirect_uri(console.public_url.as_deref().unwrap_or_default(), issuer))
        .append_pair("scope", issuer.console_scopes.as_deref().unwrap_or("openid"))
        .append_pair("state", &state)
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256");
    let mut response = harden(Redirect::to(url.as_str()).into_response());
    let flow = set_cookie(&console, FLOW_COOKIE, &format!("{index}.{state}.{verifier}"), Some(FLOW_SECONDS), true);
    if let Ok(value) = flow.parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// The issuer's redirect back: the state checked against this browser's, the code exchanged
/// (with the verifier) for tokens, the access token's principal asked of the API, a session.
pub(super) async fn callback(
    State(console): State<Console>,
    Path(returned_to): Path<String>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    // The flow this answer is for: the browser's flow cookie holding its state (one planted
    // beside it, for a longer path, neither blocks nor replaces it).
    let given = q.get("state").cloned().unwrap_or_default();
    let flows = cookies(&console, &headers, FLOW_COOKIE);
    let Some(flow) = flows.iter().find(|flow| flow.split('.').nth(1).is_some_and(|state| same(state, &given))) else {
        let why = if flows.is_empty() {
            "this browser did not start a sign-in (or it expired): start again"
        } else {
            "the answer is not for the sign-in this browser started"
        };
        return failed(StatusCode::BAD_REQUEST, why);
    };
    let mut parts = flow.splitn(3, '.');
    let (Some(index), Some(_), Some(verifier)) = (parts.next(), parts.next(), parts.next()) else {
        return failed(StatusCode::BAD_REQUEST, "this browser did not start a sign-in (or it expired): start again");
    };
    if let Some(error) = q.get("error") {
        let why = q.get("error_description").map_or_else(|| error.clone(), |d| format!("{error}: {d}"));
        return failed(StatusCode::UNAUTHORIZED, &format!("the identity provider refused: {why}"));
    }
    let Some(code) = q.get("code") else {
        return failed(StatusCode::BAD_REQUEST, "the identity provider sent no code");
    };
    let Some(issuer) = index.parse::<usize>().ok().and_then(|i| console.oidc.get(i)) else {
        return failed(StatusCode::BAD_REQUEST, "no such identity provider");
    };
    // The answer came back to the path of the issuer this sign-in went to.
    if returned_to != issuer.principal_suffix() {
        return failed(StatusCode::BAD_REQUEST, "the answer comes from another identity provider than the one asked");
    }
    let found = match discover(&console, &issuer.issuer).await {
        Ok(found) => found,
        Err(why) => return failed(StatusCode::BAD_GATEWAY, &why),
    };
    // RFC 9207: the issuer's name in its answer is this sign-in's issuer (required of an issuer
    // that says it sends it).
    match q.get("iss") {
        Some(iss) if iss != &issuer.issuer => {
            return failed(
                StatusCode::BAD_REQUEST,
                "the answer comes from another identity provider than the one asked",
            );
        }
        None if found.sends_iss => {
            return failed(StatusCode::BAD_REQUEST, "the identity provider's answer does not name it");
        }
        _ => {}
    }
    let token_endpoint = found.token;
    let client_id = issuer.console_client_id.clone().unwrap_or_default();
    let mut form = vec![
        ("grant_type", "authorization_code".to_owned()),
        ("code", code.clone()),
        ("redirect_uri", redirect_uri(console.public_url.as_deref().unwrap_or_default(), issuer)),
        ("code_verifier", verifier.to_owned()),
    ];
    let mut request = console.http.post(&token_endpoint);
    match &issuer.console_client_secret {
        Some(secret) => request = request.basic_auth(&client_id, Some(secret)),
        None => form.push(("client_id", client_id.clone())),
    }
    let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form.iter()).finish();
    let request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded").body(body);
    let answer = match fetch_json(request).await {
        Ok(answer) => answer,
        Err(why) => return failed(StatusCode::UNAUTHORIZED, &why),
    };
    let Some(token) = answer["access_token"].as_str().map(str::to_owned) else {
        return failed(StatusCode::BAD_GATEWAY, "the identity provider sent no access token");
    };
    // The token must be this issuer's (the API then verifies its signature, audience and
    // expiry): an issuer cannot hand over a token of another issuer, or one of icegate's own.
    let claims = crate::oidc::unverified_claims(&token).unwrap_or(serde_json::Value::Null);
    if claims["iss"].as_str() != Some(issuer.issuer.as_str()) {
        return failed(
            StatusCode::UNAUTHORIZED,
            "the identity provider's access token is not one it issued for icegate",
        );
    }
    // The API decides who the token is (or refuses it), as for any caller.
    let whoami = console.call(Some(&token), Method::GET, "/management/v1/whoami", None).await;
    let Some(principal) = whoami.body["principal"].as_str().filter(|_| whoami.ok()).map(str::to_owned) else {
        return failed(StatusCode::UNAUTHORIZED, &format!("icegate refused the issuer's token: {}", whoami.message()));
    };
    // As long as the token lasts (by its own expiry and the answer's), at most MAX_SESSION.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // A browser signed in already stays as it is: a sign-in never replaces another principal's
    // session (an answer planted in the browser by another page cannot swap who it acts as).
    // Every session cookie the browser sends counts (a planted one beside it hides nothing).
    let held = cookies(&console, &headers, SESSION_COOKIE);
    if let Some(current) = held.iter().filter_map(|id| console.sessions.get(id)).find(|s| s.principal != principal) {
        return failed(
            StatusCode::CONFLICT,
            &format!(
                "this browser is signed in as {} already: sign out first to sign in as {principal}",
                current.principal
            ),
        );
    }
    if held.len() > 1 {
        return failed(StatusCode::CONFLICT, "this browser holds two sessions: sign out first");
    }
    let lifetime = [answer["expires_in"].as_u64(), claims["exp"].as_u64().map(|exp| exp.saturating_sub(now))]
        .into_iter()
        .flatten()
        .chain([MAX_SESSION.as_secs()])
        .min()
        .map(Duration::from_secs);
    let Some((id, _)) = console.sessions.open(Some(token), principal, lifetime) else {
        return failed(
            StatusCode::SERVICE_UNAVAILABLE,
            "the console holds as many sessions as it may: try again later",
        );
    };
    // A page of this server goes on to the console: a navigation this site starts carries the
    // `SameSite=Strict` session cookie, the issuer's redirect would not.
    let mut response = page(html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content="0;url=/ui";
                title { "Signed in · icegate" }
                link rel="stylesheet" href="/ui/style.css";
            }
            body { main { p { "Signed in. " a href="/ui" { "Continue to the console" } } } }
        }
    });
    for value in
        [set_cookie(&console, SESSION_COOKIE, &id, None, false), set_cookie(&console, FLOW_COOKIE, "", Some(0), true)]
    {
        if let Ok(value) = value.parse() {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}
