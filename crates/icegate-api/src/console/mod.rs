//! The web console (`/ui`), served by `icegate serve` itself: server-rendered pages (every name
//! and property escaped by the templates), no script, every asset served here, under a strict
//! Content-Security-Policy. A signed-in operator's session holds the token its client
//! credentials were exchanged for, and every page is made from the API's own answers to that
//! token, called in-process through the whole API stack (authentication, authorization, audit):
//! the console sees exactly what the principal sees through the API, never more. Sessions are
//! `HttpOnly`, `SameSite=Strict` cookies (`Secure` when the server's public URL is https), a
//! fresh id at every sign-in; every form carries the session's CSRF token.

mod admin;
mod oidc;
mod pages;
mod session;
mod work;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tower::ServiceExt;

pub use session::Sessions;

/// What every console page shares: the API it calls, the sessions, and how cookies are marked.
#[derive(Clone)]
pub struct Console {
    api: Router,
    sessions: Arc<Sessions>,
    secure_cookies: bool,
    /// Authentication is off: the console opens directly, as the API answers anyone.
    open: bool,
    /// The identity providers offered for sign-in (authorization code with PKCE).
    oidc: Arc<Vec<crate::oidc::OidcIssuerConfig>>,
    /// `server.public_url`: where an identity provider sends the browser back.
    public_url: Option<String>,
    /// For the identity providers' discovery and token endpoints.
    http: reqwest::Client,
    /// The identity providers' discovery documents, by issuer, with when they were read.
    discovered: Arc<std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, oidc::Discovered)>>>,
}

/// The largest console form accepted (a sign-in, an undrop: a few fields).
pub const MAX_FORM_BYTES: usize = 16 * 1024;

/// The policy every console answer carries: nothing but this server's own styles and images, no
/// script at all, no framing, forms posting only here.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// The console's answer to an API call: its status and JSON (or the error's message).
pub(crate) struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }

    /// The server's message for a refusal.
    pub fn message(&self) -> String {
        self.body["error"]["message"].as_str().map_or_else(|| self.status.to_string(), str::to_owned)
    }
}

impl Console {
    pub fn new(api: Router, secure_cookies: bool, open: bool) -> Self {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            api,
            sessions: Arc::new(Sessions::default()),
            secure_cookies,
            open,
            oidc: Arc::new(Vec::new()),
            public_url: None,
            http,
            discovered: Arc::default(),
        }
    }

    /// Offers sign-in through these identity providers, which send the browser back to
    /// `public_url`.
    pub fn with_oidc(mut self, issuers: Vec<crate::oidc::OidcIssuerConfig>, public_url: Option<String>) -> Self {
        self.oidc = Arc::new(issuers);
        self.public_url = public_url;
        self
    }

    /// Calls the API in-process as `token`'s principal (none: anonymous).
    pub(crate) async fn call(&self, token: Option<&str>, method: Method, path: &str, body: Option<Value>) -> Answer {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = match body {
            Some(body) => request.header(header::CONTENT_TYPE, "application/json").body(Body::from(body.to_string())),
            None => request.body(Body::empty()),
        };
        let answer = self.send(request, 64 * 1024 * 1024).await;
        // A token the API no longer takes (its principal deleted, its secret rotated, its
        // expiry): the sessions holding it end, and the next page asks to sign in again.
        if answer.status == StatusCode::UNAUTHORIZED
            && let Some(token) = token
        {
            self.sessions.close_token(token);
        }
        answer
    }

    /// Sends a request through the API's whole stack; its answer read up to `max` bytes. It
    /// carries the console request's id, so the audit trail ties the page to its API calls.
    async fn send(&self, request: axum::http::Result<Request>, max: usize) -> Answer {
        let Ok(mut request) = request else {
            return Answer { status: StatusCode::BAD_REQUEST, body: Value::Null };
        };
        if let Ok(id) = REQUEST_ID.try_with(Clone::clone) {
            request.headers_mut().insert(crate::REQUEST_ID_HEADER, id);
        }
        match self.api.clone().oneshot(request).await {
            Ok(response) => {
                let status = response.status();
                let bytes = axum::body::to_bytes(response.into_body(), max).await.unwrap_or_default();
                Answer { status, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
            }
            Err(never) => match never {},
        }
    }

    /// Posts a form (the token endpoint's grant) in-process.
    pub(crate) async fn call_form(&self, path: &str, form: String) -> Answer {
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form));
        self.send(request, 1024 * 1024).await
    }

    /// The console's routes (everything else is the API's).
    pub fn pages(self) -> Router {
        pages::routes(self)
    }
}

tokio::task_local! {
    /// The id of the console request being answered (its API calls carry it too).
    static REQUEST_ID: HeaderValue;
}

/// The console's cookies, as named over http and under https.
const COOKIE_NAMES: [&str; 6] = [
    "icegate_session",
    "icegate_login",
    "icegate_oidc",
    "__Host-icegate_session",
    "__Host-icegate_login",
    "__Host-icegate_oidc",
];

/// Runs a console request with its request id at hand for the API calls it makes. A console
/// cookie the request carries twice was planted by another page for a longer path: the answer
/// expires that name on the request's path and every path above it (the browser's own cookie
/// too: sign in again), so a planted cookie blocks nothing for long.
pub async fn each_request(request: Request, next: axum::middleware::Next) -> Response {
    let planted: Vec<&str> =
        COOKIE_NAMES.into_iter().filter(|name| pages::cookie_values(request.headers(), name).len() > 1).collect();
    let path = request.uri().path().to_owned();
    let mut response = match request.headers().get(crate::REQUEST_ID_HEADER).cloned() {
        Some(id) => REQUEST_ID.scope(id, next.run(request)).await,
        None => next.run(request).await,
    };
    if !planted.is_empty() {
        expire_planted(&mut response, &planted, &path);
    }
    response
}

/// Expires `names` on `path` and every path above it, with and without a trailing `/`, except
/// where the answer itself sets that cookie.
fn expire_planted(response: &mut Response, names: &[&str], path: &str) {
    let set: Vec<String> = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| {
            let name = v.split('=').next().unwrap_or_default();
            let at = v.split(';').find_map(|a| a.trim().strip_prefix("Path=")).unwrap_or_default();
            format!("{name} {at}")
        })
        .collect();
    let mut paths = vec!["/".to_owned()];
    let mut prefix = String::new();
    for segment in path.split('/').filter(|s| !s.is_empty()).take(8) {
        prefix.push('/');
        prefix.push_str(segment);
        paths.push(prefix.clone());
        paths.push(format!("{prefix}/"));
    }
    for name in names {
        let host_only = name.starts_with("__Host-");
        for at in &paths {
            if (host_only && at != "/") || set.contains(&format!("{name} {at}")) {
                continue;
            }
            let secure = if host_only { "; Secure" } else { "" };
            if let Ok(value) = format!("{name}=; Path={at}; HttpOnly; Max-Age=0{secure}").parse() {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
        }
    }
}

/// Marks a console answer: its policy, no caching, no sniffing, no framing, no referrer to
/// other sites.
pub(crate) fn harden(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Nothing leaves for another site (a page's address holds names); the console's own forms
    // carry their origin, which `from_here` checks.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

/// A page's HTML, hardened.
pub(crate) fn page(markup: maud::Markup) -> Response {
    harden((StatusCode::OK, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], markup.into_string()).into_response())
}
