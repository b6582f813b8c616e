//! The console's pages. Each reads the API as the session's principal and renders what it
//! answered; a refusal is shown as the API's message, never worked around.

use std::collections::HashMap;

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::session::{Session, random_token, same};
use super::{Console, admin, harden, oidc, page, work};

pub(super) const SESSION_COOKIE: &str = "icegate_session";
/// API calls one view of a warehouse's tree makes at most, and namespaces it shows at most.
const MAX_TREE_CALLS: usize = 50;
const MAX_TREE_NAMESPACES: usize = 2_000;
/// Roles the access page shows at most (each costs one grants listing).
const MAX_ROLES: usize = 200;
const LOGIN_COOKIE: &str = "icegate_login";
const STYLE: &str = include_str!("style.css");

pub fn routes(console: Console) -> Router {
    Router::new()
        .route("/ui", get(home))
        .route("/ui/", get(home))
        .route("/ui/style.css", get(style))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/oidc/start", get(oidc::start))
        .route("/ui/oidc/callback/{issuer}", get(oidc::callback))
        .route("/ui/warehouse", get(warehouse))
        .route("/ui/namespace", get(namespace))
        .route("/ui/table", get(table))
        .route("/ui/deleted", get(deleted))
        .route("/ui/undrop", post(undrop))
        .route("/ui/tasks", get(tasks))
        .route("/ui/access", get(access))
        .route("/ui/grant", post(grant))
        .route("/ui/role", post(admin::role_action))
        .route("/ui/audit", get(audit))
        .route("/ui/view", get(view))
        .route("/ui/principals", get(admin::principals).post(admin::principal_action))
        .route("/ui/reviews", get(admin::reviews).post(admin::review_action))
        .route("/ui/review", get(admin::review))
        .route("/ui/task", get(work::task))
        .route("/ui/task/cancel", post(work::cancel))
        .route("/ui/maintenance", post(work::maintenance))
        .route("/ui/migrations", get(work::migrations))
        .route("/ui/migration", get(work::migration).post(work::migration_action))
        .route("/ui/adoptions", get(work::adoptions))
        .route("/ui/adoption", get(work::adoption))
        .with_state(console)
}

/// Milliseconds since the epoch, as people read them (UTC).
pub(super) fn when(value: &Value) -> String {
    value.as_u64().map_or_else(
        || "-".to_owned(),
        |ms| {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            humantime_serde::re::humantime::format_rfc3339_seconds(at).to_string()
        },
    )
}

/// Names joined by dots as the CLI writes them: a part holding a dot or a quote (or empty) in
/// double quotes, a quote inside doubled (`default."a.b".t`), so a level with a dot never reads
/// as two.
pub(super) fn dotted<S: AsRef<str>>(parts: &[S]) -> String {
    parts
        .iter()
        .map(|p| {
            let p = p.as_ref();
            if p.contains(['.', '"']) || p.is_empty() {
                format!("\"{}\"", p.replace('"', "\"\""))
            } else {
                p.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

pub(super) fn encode(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// A console cookie's name: under https with the `__Host-` prefix, which a browser takes only
/// from this very origin over TLS, for the path `/` (no sibling subdomain can plant one).
fn cookie_name(console: &Console, base: &str) -> String {
    if console.secure_cookies { format!("__Host-{base}") } else { base.to_owned() }
}

/// A console cookie's value. Two of one name (one planted by another origin on the same site,
/// for a longer path) are trusted neither.
pub(super) fn cookie(console: &Console, headers: &HeaderMap, base: &str) -> Option<String> {
    let mut found = cookies(console, headers, base).into_iter();
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// Every value the request carries for a console cookie.
pub(super) fn cookies(console: &Console, headers: &HeaderMap, base: &str) -> Vec<String> {
    cookie_values(headers, &cookie_name(console, base))
}

pub(super) fn cookie_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then(|| value.to_owned())
        })
        .collect()
}

/// How a cookie of the console is set: `HttpOnly`, `Secure` and `__Host-` under https. The
/// session's and the sign-in form's are `SameSite=Strict` for `/ui`; the sign-in flow's through
/// an identity provider (`flow`) is `SameSite=Lax` for `/ui/oidc`, so that the provider's
/// redirect back carries it.
pub(super) fn set_cookie(console: &Console, base: &str, value: &str, max_age: Option<u64>, flow: bool) -> String {
    let name = cookie_name(console, base);
    let (path, same_site) = match (console.secure_cookies, flow) {
        (true, false) => ("/", "Strict"),
        (true, true) => ("/", "Lax"),
        (false, false) => ("/ui", "Strict"),
        (false, true) => ("/ui/oidc", "Lax"),
    };
    let secure = if console.secure_cookies { "; Secure" } else { "" };
    let age = max_age.map(|s| format!("; Max-Age={s}")).unwrap_or_default();
    format!("{name}={value}; Path={path}; HttpOnly; SameSite={same_site}{secure}{age}")
}

/// Whether a form's request comes from this console's own pages. Browsers say where a request
/// comes from (`Sec-Fetch-Site`, `Origin`): another origin on the same site (another port, a
/// sibling subdomain), which `SameSite` lets send cookies, is refused. A client that says
/// neither is no browser, and carries no visitor's cookies.
pub(super) fn from_here(console: &Console, headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // What the browser itself says (no page can set it) decides.
    if let Some(site) = text("sec-fetch-site") {
        return site == "same-origin";
    }
    // A browser without it names the page's origin (the console's pages send their origin to
    // themselves: `Referrer-Policy: same-origin`).
    let Some(origin) = text("origin") else {
        return true;
    };
    let authority = |url: &str| {
        url::Url::parse(url)
            .ok()
            .map(|u| (u.scheme().to_owned(), u.host_str().map(str::to_owned), u.port_or_known_default()))
    };
    if let Some(public) = console.public_url.as_deref()
        && authority(public).is_some_and(|p| Some(p) == authority(origin))
    {
        return true;
    }
    // Without a public URL: the origin names the host the request was sent to.
    let host = text("host").unwrap_or_default();
    origin.split_once("://").is_some_and(|(_, rest)| !host.is_empty() && rest == host)
}

/// The session of a request; with authentication off, one is opened for it.
enum Visitor {
    In(String, Session),
    /// Not signed in: to the sign-in page.
    Out,
}

fn visitor(console: &Console, headers: &HeaderMap) -> Visitor {
    if let Some(id) = cookie(console, headers, SESSION_COOKIE)
        && let Some(session) = console.sessions.get(&id)
    {
        return Visitor::In(id, session);
    }
    if console.open
        && let Some((id, session)) = console.sessions.open_session()
    {
        return Visitor::In(id, session);
    }
    Visitor::Out
}

/// Runs `render` for a signed-in visitor; sends the others to sign in.
pub(super) async fn signed_in<F, Fut>(console: &Console, headers: &HeaderMap, render: F) -> Response
where
    F: FnOnce(Session) -> Fut,
    Fut: std::future::Future<Output = Markup>,
{
    match visitor(console, headers) {
        Visitor::In(id, session) => {
            let markup = render(session).await;
            // The notice the page showed (from the session as it was read) is not shown again.
            console.sessions.take_notice(&id);
            // The API refused the session's token on the way (its principal deleted, its secret
            // rotated): the session is over, sign in again.
            if console.sessions.get(&id).is_none() {
                return harden(Redirect::to("/ui/login").into_response());
            }
            let mut response = page(markup);
            if cookie(console, headers, SESSION_COOKIE).as_deref() != Some(id.as_str())
                && let Ok(value) = set_cookie(console, SESSION_COOKIE, &id, None, false).parse()
            {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
            response
        }
        Visitor::Out => harden(Redirect::to("/ui/login").into_response()),
    }
}

pub(super) fn layout(title: &str, session: Option<&Session>, body: Markup) -> Markup {
    live_layout(title, session, false, body)
}

/// Seconds between reloads of a page that follows work in progress.
const FOLLOW_SECONDS: u32 = 2;

/// A page; `follow`: it reloads itself while work is in progress (a refresh, no script).
pub(super) fn live_layout(title: &str, session: Option<&Session>, follow: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · icegate" }
                link rel="stylesheet" href="/ui/style.css";
                @if follow { meta http-equiv="refresh" content=(FOLLOW_SECONDS); }
            }
            body {
                header {
                    nav aria-label="Main" {
                        a.brand href="/ui" { "icegate" }
                        @if session.is_some() {
                            a href="/ui" { "Warehouses" }
                            a href="/ui/tasks" { "Tasks" }
                            a href="/ui/access" { "Access" }
                            a href="/ui/principals" { "Principals" }
                            a href="/ui/reviews" { "Reviews" }
                            a href="/ui/migrations" { "Migrations" }
                            a href="/ui/audit" { "Audit" }
                        }
                    }
                    @if let Some(session) = session {
                        form.signout method="post" action="/ui/logout" {
                            span { "Signed in as " strong { (session.principal) } }
                            input type="hidden" name="csrf" value=(session.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    // The outcome of the session's last form, once (whatever page it lands on).
                    @if let Some(note) = session.and_then(|s| s.notice.as_deref()) { p.note role="status" { (note) } }
                    (body)
                }
            }
        }
    }
}

pub(super) fn refused(answer: &super::Answer) -> Markup {
    html! { p.error role="alert" { (answer.message()) } }
}

async fn style() -> Response {
    harden(([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response())
}

async fn home(State(console): State<Console>, headers: HeaderMap) -> Response {
    signed_in(&console.clone(), &headers, |session| async move {
        let answer = console.call(session.token.as_deref(), Method::GET, "/management/v1/warehouses", None).await;
        let body = if answer.ok() {
            html! {
                table {
                    thead { tr { th { "Warehouse" } th { "Storage root" } th { "Storage" } th { "Dropped tables" } } }
                    tbody {
                        @for w in answer.body["warehouses"].as_array().into_iter().flatten() {
                            @let name = w["name"].as_str().unwrap_or_default();
                            tr {
                                td { a href={ "/ui/warehouse?w=" (encode(name)) } { (name) } }
                                td { code { (w["storage-root"].as_str().unwrap_or_default()) } }
                                td { (w["storage-profile"]["type"].as_str().unwrap_or("-")) }
                                td { a href={ "/ui/deleted?w=" (encode(name)) } { "Deleted tables" } }
                            }
                        }
                    }
                }
            }
        } else {
            refused(&answer)
        };
        layout("Warehouses", Some(&session), body)
    })
    .await
}

#[derive(Deserialize)]
struct LoginForm {
    client_id: String,
    client_secret: String,
    nonce: String,
}

async fn login_form(State(console): State<Console>) -> Response {
    if console.open {
        return harden(Redirect::to("/ui").into_response());
    }
    let nonce = random_token();
    let markup = layout(
        "Sign in",
        None,
        html! {
            form.card method="post" action="/ui/login" {
                input type="hidden" name="nonce" value=(nonce);
                label for="client_id" { "Client id" }
                input #client_id name="client_id" autocomplete="username" required;
                label for="client_secret" { "Client secret" }
                input #client_secret name="client_secret" type="password" autocomplete="current-password" required;
                button type="submit" { "Sign in" }
            }
            @for (i, issuer) in console.oidc.iter().enumerate() {
                p.sso { a.button href={ "/ui/oidc/start?i=" (i) } { "Sign in with " (issuer.principal_suffix()) } }
            }
        },
    );
    let mut response = page(markup);
    if let Ok(value) = set_cookie(&console, LOGIN_COOKIE, &nonce, Some(600), false).parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

async fn login(State(console): State<Console>, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    // The sign-in form must be this server's own, sent from its own page (no signing a visitor
    // in as someone else, not even from another origin of the same site).
    // (Any of the nonces the browser sends: one planted for `/ui/login` blocks no one; the
    // form's origin is what keeps other pages out.)
    if !from_here(&console, &headers)
        || !cookies(&console, &headers, LOGIN_COOKIE).iter().any(|nonce| same(nonce, &form.nonce))
    {
        return harden((StatusCode::FORBIDDEN, "the sign-in form expired: load it again").into_response());
    }
    let grant = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("grant_type", "client_credentials")
        .append_pair("client_id", &form.client_id)
        .append_pair("client_secret", &form.client_secret)
        .finish();
    let answer = console.call_form("/v1/oauth/tokens", grant).await;
    let Some(token) = answer.body["access_token"].as_str().filter(|_| answer.ok()).map(str::to_owned) else {
        let markup = layout(
            "Sign in",
            None,
            html! {
                p.error role="alert" { "Sign-in refused: the client id or secret is wrong, or the principal is locked." }
                p { a href="/ui/login" { "Try again" } }
            },
        );
        let mut response = page(markup);
        *response.status_mut() = StatusCode::UNAUTHORIZED;
        return response;
    };
    let lifetime = answer.body["expires_in"].as_u64().map(std::time::Duration::from_secs);
    let whoami = console.call(Some(&token), Method::GET, "/management/v1/whoami", None).await;
    // The principal as the API names it (its sessions are counted by it).
    let Some(principal) = whoami.body["principal"].as_str().filter(|_| whoami.ok()).map(str::to_owned) else {
        return harden(
            (StatusCode::SERVICE_UNAVAILABLE, "the catalog could not say who signed in: try again").into_response(),
        );
    };
    let Some((id, _)) = console.sessions.open(Some(token), principal, lifetime) else {
        return harden(
            (StatusCode::SERVICE_UNAVAILABLE, "the console holds as many sessions as it may: try again later")
                .into_response(),
        );
    };
    let mut response = harden(Redirect::to("/ui").into_response());
    for value in
        [set_cookie(&console, SESSION_COOKIE, &id, None, false), set_cookie(&console, LOGIN_COOKIE, "", Some(0), false)]
    {
        if let Ok(value) = value.parse() {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

/// A form that is not the session's own (no CSRF token, another session's, a signed-out one,
/// another origin's).
pub(super) fn not_this_session() -> Response {
    harden((StatusCode::FORBIDDEN, "not this session's form: load the page again").into_response())
}

/// The session of a form's request, if its CSRF token is the session's.
pub(super) fn checked(console: &Console, headers: &HeaderMap, csrf: &str) -> Option<(String, Session)> {
    if !from_here(console, headers) {
        return None;
    }
    let id = cookie(console, headers, SESSION_COOKIE)?;
    let session = console.sessions.get(&id)?;
    same(&session.csrf, csrf).then_some((id, session))
}

async fn logout(State(console): State<Console>, headers: HeaderMap, Form(form): Form<CsrfForm>) -> Response {
    let Some((id, _)) = checked(&console, &headers, &form.csrf) else {
        return not_this_session();
    };
    console.sessions.close(&id);
    let mut response = harden(Redirect::to("/ui/login").into_response());
    if let Ok(value) = set_cookie(&console, SESSION_COOKIE, "", Some(0), false).parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// A namespace in `/v1` paths.
pub(super) fn ns_path(levels: &[String]) -> String {
    levels
        .iter()
        .map(|l| percent_encoding::utf8_percent_encode(l, percent_encoding::NON_ALPHANUMERIC).to_string())
        .collect::<Vec<_>>()
        .join("%1F")
}

pub(super) fn levels_of(joined: &str) -> Vec<String> {
    joined.split('\u{1f}').map(str::to_owned).collect()
}

pub(super) async fn prefix(console: &Console, session: &Session, warehouse: &str) -> Result<String, super::Answer> {
    let answer = console
        .call(session.token.as_deref(), Method::GET, &format!("/v1/config?warehouse={}", encode(warehouse)), None)
        .await;
    if !answer.ok() {
        return Err(answer);
    }
    Ok(answer.body["overrides"]["prefix"].as_str().unwrap_or_default().to_owned())
}

pub(super) fn namespace_link(warehouse: &str, levels: &[String]) -> String {
    format!("/ui/namespace?w={}&ns={}", encode(warehouse), encode(&levels.join("\u{1f}")))
}

async fn warehouse(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let warehouse = q.get("w").cloned().unwrap_or_default();
    let search = q.get("q").cloned().unwrap_or_default();
    signed_in(&console.clone(), &headers, |session| async move {
        let body = match prefix(&console, &session, &warehouse).await {
            Err(answer) => refused(&answer),
            Ok(prefix) => {
                // The whole tree the principal may see, breadth first (bounded), filtered by the search.
                let mut found: Vec<Vec<String>> = Vec::new();
                let mut queue: Vec<Vec<String>> = vec![Vec::new()];
                let mut calls = 0;
                let mut truncated = false;
                while let Some(parent) = queue.pop() {
                    // A bounded walk: each level listed is one API call (and one audit record).
                    if calls >= MAX_TREE_CALLS || found.len() >= MAX_TREE_NAMESPACES {
                        truncated = true;
                        break;
                    }
                    calls += 1;
                    let mut path = format!("/v1/{prefix}/namespaces?pageSize=1000");
                    if !parent.is_empty() {
                        path.push_str(&format!("&parent={}", ns_path(&parent)));
                    }
                    let answer = console.call(session.token.as_deref(), Method::GET, &path, None).await;
                    truncated |= answer.body["next-page-token"].as_str().is_some_and(|t| !t.is_empty());
                    for ns in answer.body["namespaces"].as_array().into_iter().flatten() {
                        let levels: Vec<String> = serde_json::from_value(ns.clone()).unwrap_or_default();
                        if levels.len() == parent.len() + 1 {
                            queue.push(levels.clone());
                            found.push(levels);
                        }
                    }
                }
                found.sort();
                let storage_view = storage(&console, &session, &warehouse).await;
                let needle = search.to_lowercase();
                html! {
                    form.search role="search" method="get" action="/ui/warehouse" {
                        input type="hidden" name="w" value=(warehouse);
                        label for="q" { "Search namespaces" }
                        input #q name="q" value=(search);
                        button type="submit" { "Search" }
                    }
                    @if truncated { p.muted role="status" { "Only part of the tree is shown: search, or open a namespace." } }
                    ul.tree {
                        @for levels in found.iter().filter(|l| needle.is_empty() || dotted(l).to_lowercase().contains(&needle)) {
                            li class={ "depth-" ((levels.len() - 1).min(15)) } {
                                a href=(namespace_link(&warehouse, levels)) { (levels.last().cloned().unwrap_or_default()) }
                                @if levels.len() > 1 { span.muted { " in " (dotted(&levels[..levels.len() - 1])) } }
                            }
                        }
                    }
                    p { a href={ "/ui/deleted?w=" (encode(&warehouse)) } { "Dropped tables of " (warehouse) } }
                    p {
                        a href={ "/ui/adoptions?w=" (encode(&warehouse)) } { "Adoptions into " (warehouse) }
                        " · "
                        a href={ "/ui/migrations?w=" (encode(&warehouse)) } { "Migrations into " (warehouse) }
                        " · "
                        a href={ "/ui/tasks?w=" (encode(&warehouse)) } { "Tasks of " (warehouse) }
                    }
                    (storage_view)
                }
            }
        };
        layout(&format!("Warehouse {warehouse}"), Some(&session), body)
    })
    .await
}

async fn namespace(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let warehouse = q.get("w").cloned().unwrap_or_default();
    let levels = levels_of(q.get("ns").map(String::as_str).unwrap_or_default());
    signed_in(&console.clone(), &headers, |session| async move {
        let body = match prefix(&console, &session, &warehouse).await {
            Err(answer) => refused(&answer),
            Ok(prefix) => {
                let base = format!("/v1/{prefix}/namespaces/{}", ns_path(&levels));
                let loaded = console.call(session.token.as_deref(), Method::GET, &base, None).await;
                if !loaded.ok() {
                    refused(&loaded)
                } else {
                    let tables = console.call(session.token.as_deref(), Method::GET, &format!("{base}/tables?pageSize=1000"), None).await;
                    let views = console.call(session.token.as_deref(), Method::GET, &format!("{base}/views?pageSize=1000"), None).await;
                    html! {
                        h2 { "Properties" }
                        (properties(&loaded.body["properties"]))
                        h2 { "Tables" }
                        ul {
                            @for t in tables.body["identifiers"].as_array().into_iter().flatten() {
                                @let name = t["name"].as_str().unwrap_or_default();
                                li { a href={ "/ui/table?w=" (encode(&warehouse)) "&ns=" (encode(&levels.join("\u{1f}"))) "&t=" (encode(name)) } { (name) } }
                            }
                        }
                        h2 { "Views" }
                        ul {
                            @for v in views.body["identifiers"].as_array().into_iter().flatten() {
                                @let name = v["name"].as_str().unwrap_or_default();
                                li { a href={ "/ui/view?w=" (encode(&warehouse)) "&ns=" (encode(&levels.join("\u{1f}"))) "&v=" (encode(name)) } { (name) } }
                            }
                        }
                    }
                }
            }
        };
        layout(&format!("Namespace {}", dotted(&levels)), Some(&session), body)
    })
    .await
}

/// The warehouse's storage profile as the API shows it (never a secret), and when it was last
/// set (each setting is probed: an object written, read and deleted).
async fn storage(console: &Console, session: &Session, warehouse: &str) -> Markup {
    let answer = console
        .call(
            session.token.as_deref(),
            Method::GET,
            &format!("/management/v1/warehouses/{}", path_part(warehouse)),
            None,
        )
        .await;
    if !answer.ok() {
        // Reading the profile takes more than listing the tree: say so, nothing else.
        return html! { p.muted { "Storage profile not shown: " (answer.message()) } };
    }
    html! {
        h2 { "Storage" }
        p { "Root " code { (answer.body["storage-root"].as_str().unwrap_or_default()) } }
        (properties(&answer.body["storage-profile"]))
        p.muted {
            "Profile version " (answer.body["profile-version"]) ", probed when set at " (when(&answer.body["updated-at-ms"]))
            " (an object written, read and deleted)."
        }
    }
}

/// A path segment of the management API.
pub(super) fn path_part(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The element of a metadata list (schemas, specs, sort orders, versions) whose `key` is `id`.
fn by_id(list: &Value, key: &str, id: &Value) -> Value {
    list.as_array().into_iter().flatten().find(|item| &item[key] == id).cloned().unwrap_or(Value::Null)
}

/// A schema's fields: id, name, type and whether required.
fn schema_table(schema: &Value) -> Markup {
    html! {
        h2 { "Schema " (schema["schema-id"]) }
        table {
            thead { tr { th { "Field id" } th { "Column" } th { "Type" } th { "Required" } } }
            tbody {
                @for f in schema["fields"].as_array().into_iter().flatten() {
                    tr {
                        td { (f["id"]) }
                        td { (f["name"].as_str().unwrap_or_default()) }
                        td { code { (f["type"].as_str().map_or_else(|| f["type"]["type"].as_str().unwrap_or("nested").to_owned(), str::to_owned)) } }
                        td { (f["required"].as_bool().unwrap_or(false)) }
                    }
                }
            }
        }
    }
}

/// A form that creates something named by one field (a principal, a role).
pub(super) fn create_form(session: &Session, to: &str, (id, label, field): (&str, &str, &str), button: &str) -> Markup {
    html! {
        form.card method="post" action=(to) {
            input type="hidden" name="csrf" value=(session.csrf);
            input type="hidden" name="action" value="create";
            label for=(id) { (label) }
            input id=(id) name=(field) required;
            button type="submit" { (button) }
        }
    }
}

/// A table or view (`kind`: `tables` or `views`) as the API loads it for the session.
async fn load(
    console: &Console,
    session: &Session,
    (warehouse, levels): (&str, &[String]),
    kind: &str,
    name: &str,
) -> Result<Value, super::Answer> {
    let prefix = prefix(console, session, warehouse).await?;
    let path = format!("/v1/{prefix}/namespaces/{}/{kind}/{}", ns_path(levels), path_part(name));
    let loaded = console.call(session.token.as_deref(), Method::GET, &path, None).await;
    if loaded.ok() { Ok(loaded.body) } else { Err(loaded) }
}

/// A view: its SQL for each dialect (current version first), its schema and versions.
async fn view(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let warehouse = q.get("w").cloned().unwrap_or_default();
    let levels = levels_of(q.get("ns").map(String::as_str).unwrap_or_default());
    let name = q.get("v").cloned().unwrap_or_default();
    signed_in(&console.clone(), &headers, |session| async move {
        let body = match load(&console, &session, (&warehouse, &levels), "views", &name).await {
            Err(answer) => refused(&answer),
            Ok(loaded) => {
                let m = &loaded["metadata"];
                let versions: Vec<Value> = m["versions"].as_array().cloned().unwrap_or_default();
                let current = by_id(&m["versions"], "version-id", &m["current-version-id"]);
                let schema = by_id(&m["schemas"], "schema-id", &current["schema-id"]);
                html! {
                    p { "Location " code { (m["location"].as_str().unwrap_or_default()) } }
                    h2 { "SQL (version " (current["version-id"]) ")" }
                    @for r in current["representations"].as_array().into_iter().flatten() {
                        section.sql {
                            h3 { (r["dialect"].as_str().unwrap_or("unknown dialect")) }
                            pre { code { (r["sql"].as_str().unwrap_or_default()) } }
                        }
                    }
                    (schema_table(&schema))
                    h2 { "Versions" }
                    table {
                        thead { tr { th { "Version" } th { "Made" } th { "Dialects" } th { "Default namespace" } } }
                        tbody {
                            @for v in versions.iter().rev() {
                                tr {
                                    td { (v["version-id"]) }
                                    td { (when(&v["timestamp-ms"])) }
                                    td { (v["representations"].as_array().into_iter().flatten().filter_map(|r| r["dialect"].as_str()).collect::<Vec<_>>().join(", ")) }
                                    td { (dotted(&v["default-namespace"].as_array().into_iter().flatten().filter_map(Value::as_str).collect::<Vec<_>>())) }
                                }
                            }
                        }
                    }
                    h2 { "Properties" }
                    (properties(&m["properties"]))
                }
            }
        };
        layout(&format!("View {}", dotted(&[levels.as_slice(), std::slice::from_ref(&name)].concat())), Some(&session), body)
    })
    .await
}

pub(super) fn properties(value: &Value) -> Markup {
    html! {
        table {
            thead { tr { th { "Property" } th { "Value" } } }
            tbody {
                @for (k, v) in value.as_object().into_iter().flatten() {
                    tr { td { code { (k) } } td { (v.as_str().map_or_else(|| v.to_string(), str::to_owned)) } }
                }
            }
        }
    }
}

/// Snapshots the timeline draws at most (the newest); the table below lists them all.
const MAX_PLOTTED: usize = 1_000;

/// One snapshot on the timeline.
struct Point {
    at: i64,
    total_records: f64,
    total_size: f64,
    added_records: f64,
    title: String,
}

/// The snapshot timeline: time against total records and total size (lines), and the records
/// each snapshot added (bars); one point per snapshot, titled with its figures (records, files
/// and bytes added, totals). An SVG drawn here, no script.
fn timeline(snapshots: &[Value]) -> Markup {
    let mut points: Vec<Point> = snapshots
        .iter()
        .map(|s| {
            let summary = &s["summary"];
            let number = |k: &str| summary[k].as_str().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            let title = format!(
                "snapshot {} · {} · {} · +{} records, +{} files, +{} bytes · {} records, {} files, {} bytes in all",
                s["snapshot-id"],
                when(&s["timestamp-ms"]),
                summary["operation"].as_str().unwrap_or("-"),
                number("added-records"),
                number("added-data-files"),
                number("added-files-size"),
                number("total-records"),
                number("total-data-files"),
                number("total-files-size"),
            );
            Point {
                at: s["timestamp-ms"].as_i64().unwrap_or(0),
                total_records: number("total-records"),
                total_size: number("total-files-size"),
                added_records: number("added-records"),
                title,
            }
        })
        .collect();
    if points.is_empty() {
        return html! { p.muted { "No snapshots yet." } };
    }
    points.sort_by_key(|p| p.at);
    let cut = points.len().saturating_sub(MAX_PLOTTED);
    let points = &points[cut..];
    let (w, h, pad) = (640.0, 200.0, 24.0);
    let t0 = points.iter().map(|p| p.at).min().unwrap_or(0) as f64;
    let t1 = (points.iter().map(|p| p.at).max().unwrap_or(0) as f64).max(t0 + 1.0);
    let max_records = points.iter().map(|p| p.total_records).fold(1.0, f64::max);
    let max_size = points.iter().map(|p| p.total_size).fold(1.0, f64::max);
    let max_added = points.iter().map(|p| p.added_records).fold(1.0, f64::max);
    let x = |t: i64| pad + (t as f64 - t0) / (t1 - t0) * (w - 2.0 * pad);
    let y = |v: f64, max: f64| h - pad - v / max * (h - 2.0 * pad);
    let line = |pick: &dyn Fn(&Point) -> f64, max: f64| {
        points.iter().map(|p| format!("{:.1},{:.1}", x(p.at), y(pick(p), max))).collect::<Vec<_>>().join(" ")
    };
    let records = line(&|p| p.total_records, max_records);
    let sizes = line(&|p| p.total_size, max_size);
    let first = when(&Value::from(t0 as i64));
    let last = when(&Value::from(t1 as i64));
    html! {
        figure.timeline {
            svg viewBox={ "0 0 " (w) " " (h + 16.0) } role="img" aria-label="Snapshot timeline: records added by each snapshot, total records and total size over time" {
                line.axis x1=(pad) y1=(h - pad) x2=(w - pad) y2=(h - pad) {}
                @for p in points {
                    @let top = y(p.added_records, max_added);
                    rect.added x=(format!("{:.1}", x(p.at) - 3.0)) y=(format!("{top:.1}")) width="6" height=(format!("{:.1}", (h - pad - top).max(0.0))) { title { (p.title) } }
                }
                polyline.records points=(records) {}
                polyline.size points=(sizes) {}
                @for p in points {
                    circle.records cx=(format!("{:.1}", x(p.at))) cy=(format!("{:.1}", y(p.total_records, max_records))) r="4" { title { (p.title) } }
                }
                text.when x=(pad) y=(h - 4.0) { (first) }
                text.when.end x=(w - pad) y=(h - 4.0) { (last) }
            }
            figcaption {
                span.key-added { "records added (bars, max " (max_added) ")" }
                " · "
                span.key-records { "total records (max " (max_records) ")" }
                " · "
                span.key-size { "total size (max " (max_size) " bytes)" }
                @if cut > 0 { " · the newest " (MAX_PLOTTED) " of " (snapshots.len()) " snapshots" }
            }
        }
    }
}

async fn table(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let warehouse = q.get("w").cloned().unwrap_or_default();
    let levels = levels_of(q.get("ns").map(String::as_str).unwrap_or_default());
    let name = q.get("t").cloned().unwrap_or_default();
    signed_in(&console.clone(), &headers, |session| async move {
        let body = match load(&console, &session, (&warehouse, &levels), "tables", &name).await {
            Err(answer) => refused(&answer),
            Ok(loaded) => {
                let m = &loaded["metadata"];
                let schema = by_id(&m["schemas"], "schema-id", &m["current-schema-id"]);
                let spec = by_id(&m["partition-specs"], "spec-id", &m["default-spec-id"]);
                let order = by_id(&m["sort-orders"], "order-id", &m["default-sort-order-id"]);
                let snapshots: Vec<Value> = m["snapshots"].as_array().cloned().unwrap_or_default();
                let who = console
                    .call(
                        session.token.as_deref(),
                        Method::GET,
                        &format!(
                            "/management/v1/access-reviews/effective?warehouse={}&namespace={}&table={}",
                            encode(&warehouse),
                            // A trailing separator: one level holding a dot stays one level.
                            encode(&format!("{}\u{1f}", levels.join("\u{1f}"))),
                            encode(&name)
                        ),
                        None,
                    )
                    .await;
                html! {
                    p { "Location " code { (m["location"].as_str().unwrap_or_default()) } }
                    p { "Metadata " code { (loaded["metadata-location"].as_str().unwrap_or_default()) } }
                    (schema_table(&schema))
                    h2 { "Partition spec " (spec["spec-id"]) }
                    @if spec["fields"].as_array().is_none_or(Vec::is_empty) { p { "Unpartitioned" } }
                    ul { @for f in spec["fields"].as_array().into_iter().flatten() { li { (f["name"].as_str().unwrap_or_default()) ": " code { (f["transform"].as_str().unwrap_or_default()) } " of field " (f["source-id"]) } } }
                    h2 { "Sort order" }
                    @if order["fields"].as_array().is_none_or(Vec::is_empty) { p { "Unsorted" } }
                    ul { @for f in order["fields"].as_array().into_iter().flatten() { li { code { (f["transform"].as_str().unwrap_or_default()) } " of field " (f["source-id"]) " " (f["direction"].as_str().unwrap_or_default()) } } }
                    h2 { "Snapshots" }
                    (timeline(&snapshots))
                    table.snapshots {
                        thead { tr { th { "Snapshot" } th { "Committed" } th { "Operation" } th { "Records" } th { "Files" } th { "Size (bytes)" } } }
                        tbody {
                            @for s in &snapshots {
                                tr {
                                    td { (s["snapshot-id"]) }
                                    td { (when(&s["timestamp-ms"])) }
                                    td { (s["summary"]["operation"].as_str().unwrap_or("-")) }
                                    td { (s["summary"]["total-records"].as_str().unwrap_or("-")) }
                                    td { (s["summary"]["total-data-files"].as_str().unwrap_or("-")) }
                                    td { (s["summary"]["total-files-size"].as_str().unwrap_or("-")) }
                                }
                            }
                        }
                    }
                    h2 { "Refs" }
                    ul { @for (r, v) in m["refs"].as_object().into_iter().flatten() { li { (r) " (" (v["type"].as_str().unwrap_or_default()) "): " (v["snapshot-id"]) } } }
                    h2 { "Properties" }
                    (properties(&m["properties"]))
                    h2 { "Metadata log" }
                    ol { @for e in m["metadata-log"].as_array().into_iter().flatten() { li { code { (e["metadata-file"].as_str().unwrap_or_default()) } " at " (when(&e["timestamp-ms"])) } } }
                    h2 { "Who can access it" }
                    @if who.ok() {
                        table.access {
                            thead { tr { th { "Principal" } th { "Privilege" } th { "Via role" } th { "Granted on" } th { "Relation" } } }
                            tbody {
                                @for l in who.body["lines"].as_array().into_iter().flatten() {
                                    tr {
                                        td { (l["principal"].as_str().unwrap_or_default()) }
                                        td { (l["privilege"].as_str().unwrap_or_default()) }
                                        td { (l["role"].as_str().unwrap_or_default()) }
                                        td { (l["securable"]["type"].as_str().unwrap_or_default()) " " (l["securable"]["name"].as_str().or_else(|| l["securable"]["warehouse"].as_str()).unwrap_or_default()) }
                                        td { (l["relation"].as_str().unwrap_or_default()) }
                                    }
                                }
                            }
                        }
                    } @else {
                        p.muted { "Not shown: " (who.message()) }
                    }
                    h2 { "Maintenance" }
                    form.inline method="post" action="/ui/maintenance" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        input type="hidden" name="w" value=(warehouse);
                        input type="hidden" name="ns" value=(levels.join("\u{1f}"));
                        input type="hidden" name="t" value=(name);
                        button type="submit" name="action" value="expire-snapshots" { "Expire snapshots now" }
                        button type="submit" name="action" value="remove-orphans" { "Remove orphan files now" }
                    }
                    p.muted { "Each runs as a task, by the table's own settings; its page follows it." }
                }
            }
        };
        layout(&format!("Table {}", dotted(&[levels.as_slice(), std::slice::from_ref(&name)].concat())), Some(&session), body)
    })
    .await
}

async fn deleted(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let warehouse = q.get("w").cloned().unwrap_or_default();
    signed_in(&console.clone(), &headers, |session| async move {
        let path = format!("/management/v1/warehouses/{}/deleted", encode(&warehouse).replace('+', "%20"));
        let answer = console.call(session.token.as_deref(), Method::GET, &path, None).await;
        let body = if !answer.ok() {
            refused(&answer)
        } else {
            html! {
                table {
                    thead { tr { th { "Table" } th { "Dropped" } th { "By" } th { "Restorable" } th { "" } } }
                    tbody {
                        @for d in answer.body["deleted"].as_array().into_iter().flatten() {
                            @let namespace: Vec<String> = serde_json::from_value(d["namespace"].clone()).unwrap_or_default();
                            tr {
                                td { (dotted(&[namespace.as_slice(), &[d["name"].as_str().unwrap_or_default().to_owned()]].concat())) }
                                td { (when(&d["dropped-at-ms"])) }
                                td { (d["dropped-by"].as_str().unwrap_or_default()) }
                                td { @if d["restorable"] == json!(true) { "yes" } @else { (d["not-restorable"].as_str().unwrap_or("no")) } }
                                td {
                                    @if d["restorable"] == json!(true) {
                                        form method="post" action="/ui/undrop" {
                                            input type="hidden" name="csrf" value=(session.csrf);
                                            input type="hidden" name="w" value=(warehouse);
                                            input type="hidden" name="ns" value=(namespace.join("\u{1f}"));
                                            input type="hidden" name="name" value=(d["name"].as_str().unwrap_or_default());
                                            input type="hidden" name="id" value=(d["id"].as_str().unwrap_or_default());
                                            button type="submit" aria-label={ "Undrop " (d["name"].as_str().unwrap_or_default()) } { "Undrop" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        };
        layout(&format!("Dropped tables of {warehouse}"), Some(&session), body)
    })
    .await
}

#[derive(Deserialize)]
struct UndropForm {
    csrf: String,
    w: String,
    ns: String,
    name: String,
    id: String,
}

async fn undrop(State(console): State<Console>, headers: HeaderMap, Form(form): Form<UndropForm>) -> Response {
    let Some((id, session)) = checked(&console, &headers, &form.csrf) else {
        return not_this_session();
    };
    let body = json!({ "namespace": levels_of(&form.ns), "name": form.name, "id": form.id });
    let path = format!("/management/v1/warehouses/{}/undrop", encode(&form.w).replace('+', "%20"));
    let answer = console.call(session.token.as_deref(), Method::POST, &path, Some(body)).await;
    let note =
        if answer.ok() { format!("{} is back.", form.name) } else { format!("Not undropped: {}", answer.message()) };
    console.sessions.notify(&id, note);
    harden(Redirect::to(&format!("/ui/deleted?w={}", encode(&form.w))).into_response())
}

/// Background tasks, newest first, filtered by warehouse (its admins must name theirs), kind
/// and state; followed while one is going.
async fn tasks(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    signed_in(&console.clone(), &headers, |session| async move {
        let field = |key: &str| q.get(key).cloned().unwrap_or_default();
        let mut query = vec!["pageSize=100".to_owned()];
        for (key, param) in [("w", "warehouse"), ("kind", "kind"), ("state", "state")] {
            if let Some(value) = q.get(key).filter(|v| !v.is_empty()) {
                query.push(format!("{param}={}", encode(value)));
            }
        }
        let path = format!("/management/v1/tasks?{}", query.join("&"));
        let answer = console.call(session.token.as_deref(), Method::GET, &path, None).await;
        let filters = html! {
            form.search method="get" action="/ui/tasks" {
                label for="t-warehouse" { "Warehouse" } input #t-warehouse name="w" value=(field("w"));
                label for="t-kind" { "Kind" } input #t-kind name="kind" value=(field("kind"));
                label for="t-state" { "State" }
                select #t-state name="state" {
                    option value="" { "any" }
                    @for st in ["queued", "running", "done", "failed", "cancelled"] { option selected[field("state") == st] { (st) } }
                }
                button type="submit" { "Filter" }
            }
        };
        let running = answer.body["tasks"].as_array().into_iter().flatten().any(work::in_progress);
        let body = if !answer.ok() {
            html! {
                (filters)
                (refused(&answer))
                p.muted { "Admins of a warehouse see its tasks: name it above." }
            }
        } else {
            html! {
                (filters)
                @if running { p.muted role="status" { "Work in progress: this page follows it." } }
                table {
                    thead { tr { th { "Task" } th { "Kind" } th { "State" } th { "Progress" } th { "Reason" } } }
                    tbody {
                        @for t in answer.body["tasks"].as_array().into_iter().flatten() {
                            tr {
                                @let task = t["id"].as_str().unwrap_or_default();
                                td { a href={ "/ui/task?id=" (encode(task)) } { code { (task) } } }
                                td { (t["kind"].as_str().unwrap_or_default()) }
                                td.state { (t["state"].as_str().unwrap_or_default()) }
                                td { (work::progress(t)) }
                                td { (t["reason"].as_str().unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
        };
        live_layout("Tasks", Some(&session), running, body)
    })
    .await
}

/// Roles, their members and grants, with forms to grant and revoke (what the principal may
/// manage: the API decides).
async fn access(State(console): State<Console>, headers: HeaderMap) -> Response {
    signed_in(&console.clone(), &headers, |session| async move {
        let token = session.token.as_deref();
        let roles = console.call(token, Method::GET, "/management/v1/roles", None).await;
        let body = if !roles.ok() {
            refused(&roles)
        } else {
            let mut rows = Vec::new();
            // One grants listing per role shown: at most MAX_ROLES of them.
            for role in roles.body["roles"].as_array().into_iter().flatten().take(MAX_ROLES) {
                let name = role["name"].as_str().unwrap_or_default().to_owned();
                let grants = console.call(token, Method::GET, &format!("/management/v1/grants?role={}", encode(&name)), None).await;
                rows.push((role.clone(), grants.body["grants"].as_array().cloned().unwrap_or_default()));
            }
            html! {
                table.roles {
                    thead { tr { th { "Role" } th { "Members" } th { "Grants" } } }
                    tbody {
                        @for (role, grants) in &rows {
                            tr {
                                @let role_name = role["name"].as_str().unwrap_or_default();
                                td {
                                    (role_name)
                                    form.inline method="post" action="/ui/role" {
                                        input type="hidden" name="csrf" value=(session.csrf);
                                        input type="hidden" name="action" value="delete";
                                        input type="hidden" name="role" value=(role_name);
                                        label { input type="checkbox" name="confirm" value="yes" required; " confirm" }
                                        button type="submit" aria-label={ "Delete role " (role_name) } { "Delete" }
                                    }
                                }
                                td {
                                    ul {
                                        @for member in role["principals"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                                            li {
                                                (member)
                                                form.inline method="post" action="/ui/role" {
                                                    input type="hidden" name="csrf" value=(session.csrf);
                                                    input type="hidden" name="action" value="remove-member";
                                                    input type="hidden" name="role" value=(role_name);
                                                    input type="hidden" name="principal" value=(member);
                                                    button type="submit" aria-label={ "Remove " (member) " from " (role_name) } { "Remove" }
                                                }
                                            }
                                        }
                                    }
                                    form.inline method="post" action="/ui/role" {
                                        input type="hidden" name="csrf" value=(session.csrf);
                                        input type="hidden" name="action" value="add-member";
                                        input type="hidden" name="role" value=(role_name);
                                        input name="principal" aria-label={ "Principal to add to " (role_name) } required;
                                        button type="submit" aria-label={ "Add to " (role_name) } { "Add" }
                                    }
                                }
                                td {
                                    ul {
                                        @for g in grants {
                                            @let securable = &g["securable"];
                                            @let on = securable_text(securable);
                                            li {
                                                (g["privilege"].as_str().unwrap_or_default()) " on " (on)
                                                form.inline method="post" action="/ui/grant" {
                                                    input type="hidden" name="csrf" value=(session.csrf);
                                                    input type="hidden" name="action" value="revoke";
                                                    input type="hidden" name="role" value=(role["name"].as_str().unwrap_or_default());
                                                    input type="hidden" name="privilege" value=(g["privilege"].as_str().unwrap_or_default());
                                                    input type="hidden" name="securable" value=(securable.to_string());
                                                    button type="submit" aria-label={ "Revoke " (g["privilege"].as_str().unwrap_or_default()) " on " (on) " from " (role["name"].as_str().unwrap_or_default()) } { "Revoke" }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                h2 { "New role" }
                (create_form(&session, "/ui/role", ("new-role", "Role name", "role"), "Create role"))
                h2 { "Grant" }
                form.card method="post" action="/ui/grant" {
                    input type="hidden" name="csrf" value=(session.csrf);
                    input type="hidden" name="action" value="grant";
                    label for="grant-role" { "Role" }
                    input #grant-role name="role" required;
                    label for="grant-privilege" { "Privilege" }
                    select #grant-privilege name="privilege" {
                        @for p in ["read", "write", "create", "drop", "describe", "admin", "manage_grants", "review", "audit"] { option { (p) } }
                    }
                    label for="grant-on" { "On (warehouse.namespace.table, a namespace, or a warehouse)" }
                    input #grant-on name="on" required;
                    label for="grant-kind" { "Kind" }
                    select #grant-kind name="kind" { option { "table" } option { "namespace" } option { "warehouse" } option { "view" } }
                    button type="submit" { "Grant" }
                }
            }
        };
        layout("Access", Some(&session), body)
    })
    .await
}

pub(super) fn securable_text(securable: &Value) -> String {
    let mut parts: Vec<String> = securable["warehouse"].as_str().map(str::to_owned).into_iter().collect();
    match &securable["namespace"] {
        Value::Array(levels) => parts.extend(levels.iter().filter_map(Value::as_str).map(str::to_owned)),
        Value::String(joined) => parts.push(joined.clone()),
        _ => {}
    }
    parts.extend(securable["name"].as_str().map(str::to_owned));
    format!("{} {}", securable["type"].as_str().unwrap_or_default(), dotted(&parts))
}

#[derive(Deserialize)]
struct GrantForm {
    csrf: String,
    action: String,
    role: String,
    privilege: String,
    /// Revoke: the grant's securable as the API showed it (JSON).
    #[serde(default)]
    securable: Option<String>,
    /// Grant: `warehouse[.namespace...[.name]]` and its kind.
    #[serde(default)]
    on: Option<String>,
    #[serde(default)]
    kind: Option<String>,
}

async fn grant(State(console): State<Console>, headers: HeaderMap, Form(form): Form<GrantForm>) -> Response {
    let Some((id, session)) = checked(&console, &headers, &form.csrf) else {
        return not_this_session();
    };
    let securable = match (form.action.as_str(), &form.securable, &form.on, &form.kind) {
        ("revoke", Some(text), _, _) => serde_json::from_str::<Value>(text).ok(),
        ("grant", _, Some(on), Some(kind)) => {
            let mut parts: Vec<String> = on.split('.').map(str::to_owned).collect();
            let warehouse = parts.remove(0);
            match kind.as_str() {
                "warehouse" if parts.is_empty() => Some(json!({ "type": "warehouse", "warehouse": warehouse })),
                "namespace" if !parts.is_empty() => {
                    Some(json!({ "type": "namespace", "warehouse": warehouse, "namespace": parts }))
                }
                "table" | "view" if parts.len() >= 2 => {
                    let name = parts.pop();
                    Some(json!({ "type": kind, "warehouse": warehouse, "namespace": parts, "name": name }))
                }
                _ => None,
            }
        }
        _ => None,
    };
    let note = match securable {
        None => {
            "Not done: name what to grant on as warehouse.namespace.table (or a namespace, or a warehouse).".to_owned()
        }
        Some(securable) => {
            let method = if form.action == "revoke" { Method::DELETE } else { Method::POST };
            let body = json!({ "role": form.role, "privilege": form.privilege, "securable": securable });
            let answer = console.call(session.token.as_deref(), method, "/management/v1/grants", Some(body)).await;
            match (answer.ok(), form.action.as_str()) {
                (true, "revoke") => format!("Revoked {} from {}.", form.privilege, form.role),
                (true, _) => format!("Granted {} to {}.", form.privilege, form.role),
                (false, _) => format!("Not done: {}", answer.message()),
            }
        }
    };
    console.sessions.notify(&id, note);
    harden(Redirect::to("/ui/access").into_response())
}

/// The audit trail with filters (auditors and server admins: the API decides).
async fn audit(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    signed_in(&console.clone(), &headers, |session| async move {
        let mut query = vec!["pageSize=100".to_owned()];
        for key in ["principal", "action", "outcome", "warehouse"] {
            if let Some(value) = q.get(key).filter(|v| !v.is_empty()) {
                query.push(format!("{key}={}", encode(value)));
            }
        }
        let answer = console.call(session.token.as_deref(), Method::GET, &format!("/management/v1/audit?{}", query.join("&")), None).await;
        let field = |key: &str| q.get(key).cloned().unwrap_or_default();
        let body = html! {
            form.search method="get" action="/ui/audit" {
                label for="f-principal" { "Principal" } input #f-principal name="principal" value=(field("principal"));
                label for="f-action" { "Operation" } input #f-action name="action" value=(field("action"));
                label for="f-outcome" { "Outcome" }
                select #f-outcome name="outcome" {
                    option value="" { "any" }
                    @for o in ["allowed", "denied", "failed"] { option selected[field("outcome") == o] { (o) } }
                }
                button type="submit" { "Filter" }
            }
            @if answer.ok() {
                table.audit {
                    thead { tr { th { "#" } th { "When" } th { "Record" } } }
                    tbody {
                        @for r in answer.body["records"].as_array().into_iter().flatten() {
                            tr { td { (r["seq"]) } td { (when(&r["at-ms"])) } td { code { (r["text"].as_str().unwrap_or_default()) } } }
                        }
                    }
                }
            } @else {
                (refused(&answer))
            }
        };
        layout("Audit trail", Some(&session), body)
    })
    .await
}
