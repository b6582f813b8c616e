//! The console's pages for people and their access: principals (create, rotate a secret,
//! delete) and access-review campaigns (start, attest or revoke each line, close). Every act is
//! the API's, as the signed-in principal: the console asks, the API decides.

use std::collections::HashMap;

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use serde_json::{Value, json};

use super::pages::{
    checked, create_form, encode, layout, not_this_session, path_part, refused, securable_text, signed_in, when,
};
use super::{Console, harden, page};

fn names(value: &Value) -> String {
    value.as_array().into_iter().flatten().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
}

/// Principals with their client ids and roles; forms to create one, rotate its secret, delete it.
pub(super) async fn principals(State(console): State<Console>, headers: HeaderMap) -> Response {
    signed_in(&console.clone(), &headers, |session| async move {
        let answer = console.call(session.token.as_deref(), Method::GET, "/management/v1/principals", None).await;
        let body = html! {
            @if answer.ok() {
                table.principals {
                    thead { tr { th { "Principal" } th { "Client id" } th { "Roles" } th { "Secret" } th { "Created" } th { "" } } }
                    tbody {
                        @for p in answer.body["principals"].as_array().into_iter().flatten() {
                            @let name = p["name"].as_str().unwrap_or_default();
                            tr {
                                td { (name) @if let Some(shown) = p["display-name"].as_str() { span.muted { " (" (shown) ")" } } }
                                td { code { (p["client-id"].as_str().unwrap_or("-")) } }
                                td { (names(&p["roles"])) }
                                td { "version " (p["secret-version"]) }
                                td { (when(&p["created-at-ms"])) }
                                td {
                                    @if p["client-id"].as_str().is_some_and(|c| !c.is_empty()) {
                                        form.inline method="post" action="/ui/principals" {
                                            input type="hidden" name="csrf" value=(session.csrf);
                                            input type="hidden" name="action" value="rotate";
                                            input type="hidden" name="name" value=(name);
                                            button type="submit" aria-label={ "Rotate the secret of " (name) } { "Rotate secret" }
                                        }
                                    }
                                    form.inline method="post" action="/ui/principals" {
                                        input type="hidden" name="csrf" value=(session.csrf);
                                        input type="hidden" name="action" value="delete";
                                        input type="hidden" name="name" value=(name);
                                        label { input type="checkbox" name="confirm" value="yes" required; " confirm" }
                                        button type="submit" aria-label={ "Delete " (name) } { "Delete" }
                                    }
                                }
                            }
                        }
                    }
                }
            } @else {
                (refused(&answer))
            }
            h2 { "New principal" }
            (create_form(&session, "/ui/principals", ("principal-name", "Name", "name"), "Create principal"))
        };
        layout("Principals", Some(&session), body)
    })
    .await
}

#[derive(Deserialize)]
pub(super) struct PrincipalForm {
    csrf: String,
    action: String,
    name: String,
    #[serde(default)]
    confirm: Option<String>,
}

/// Creates a principal or rotates its secret (the credentials shown once, on this answer only,
/// never kept in the session), or deletes one.
pub(super) async fn principal_action(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<PrincipalForm>,
) -> Response {
    let Some((id, session)) = checked(&console, &headers, &form.csrf) else {
        return not_this_session();
    };
    let token = session.token.clone();
    let token = token.as_deref();
    let shown = match form.action.as_str() {
        "create" => {
            let answer = console
                .call(token, Method::POST, "/management/v1/principals", Some(json!({ "name": form.name })))
                .await;
            Some(("created", answer))
        }
        "rotate" => {
            let path = format!("/management/v1/principals/{}/rotate-secret", path_part(&form.name));
            Some(("given a new secret", console.call(token, Method::POST, &path, None).await))
        }
        "delete" if form.confirm.as_deref() == Some("yes") => {
            let path = format!("/management/v1/principals/{}", path_part(&form.name));
            let answer = console.call(token, Method::DELETE, &path, None).await;
            let note = if answer.ok() {
                format!("{} is deleted.", form.name)
            } else {
                format!("Not deleted: {}", answer.message())
            };
            console.sessions.notify(&id, note);
            None
        }
        _ => {
            console.sessions.notify(&id, "Nothing done: tick confirm to delete.".into());
            None
        }
    };
    // The credentials' page says only this (no earlier outcome waiting in the session).
    let mut session = session;
    session.notice = None;
    match shown {
        Some((what, answer)) if answer.ok() => page(layout(
            "Principals",
            Some(&session),
            html! {
                p.note role="status" { (form.name) " is " (what) "." }
                section.card.credentials aria-label="Credentials" {
                    p { strong { "Shown once:" } " copy them now; icegate keeps only a hash of the secret." }
                    dl {
                        dt { "Client id" } dd { code #client-id { (answer.body["client-id"].as_str().unwrap_or_default()) } }
                        dt { "Client secret" } dd { code #client-secret { (answer.body["client-secret"].as_str().unwrap_or_default()) } }
                    }
                }
                p { a href="/ui/principals" { "Back to the principals" } }
            },
        )),
        Some((_, answer)) => {
            console.sessions.notify(&id, format!("Not done: {}", answer.message()));
            harden(Redirect::to("/ui/principals").into_response())
        }
        None => harden(Redirect::to("/ui/principals").into_response()),
    }
}

fn scope_text(scope: &Value) -> String {
    if scope["type"] == "server" { "the server".to_owned() } else { securable_text(scope) }
}

/// The campaigns the principal reviews, and a form to start one.
pub(super) async fn reviews(State(console): State<Console>, headers: HeaderMap) -> Response {
    signed_in(&console.clone(), &headers, |session| async move {
        let answer = console.call(session.token.as_deref(), Method::GET, "/management/v1/access-reviews", None).await;
        let body = html! {
            @if answer.ok() {
                table.reviews {
                    thead { tr { th { "Campaign" } th { "Scope" } th { "Description" } th { "Started" } th { "Closed" } } }
                    tbody {
                        @for r in answer.body["reviews"].as_array().into_iter().flatten() {
                            @let review = r["id"].as_str().unwrap_or_default();
                            tr {
                                td { a href={ "/ui/review?id=" (encode(review)) } { code { (review) } } }
                                td { (scope_text(&r["scope"])) }
                                td { (r["description"].as_str().unwrap_or_default()) }
                                td { (when(&r["created-at-ms"])) " by " (r["created-by"].as_str().unwrap_or_default()) }
                                td { @if r["closed-at-ms"].is_null() { "open" } @else { (when(&r["closed-at-ms"])) " by " (r["closed-by"].as_str().unwrap_or_default()) } }
                            }
                        }
                    }
                }
            } @else {
                (refused(&answer))
            }
            h2 { "Start a campaign" }
            p.muted { "It freezes who can access the scope now; each line is then attested or revoked." }
            form.card method="post" action="/ui/reviews" {
                input type="hidden" name="csrf" value=(session.csrf);
                input type="hidden" name="action" value="create";
                label for="review-warehouse" { "Warehouse (empty: the whole server)" }
                input #review-warehouse name="warehouse";
                label for="review-namespace" { "Namespace (levels joined by dots)" }
                input #review-namespace name="namespace";
                label for="review-table" { "Table" }
                input #review-table name="table";
                label for="review-description" { "Description" }
                input #review-description name="description";
                button type="submit" { "Start campaign" }
            }
        };
        layout("Access reviews", Some(&session), body)
    })
    .await
}

/// One campaign: each line with who holds what through which role, and its decision (or the
/// forms to decide it).
pub(super) async fn review(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let review = q.get("id").cloned().unwrap_or_default();
    signed_in(&console.clone(), &headers, |session| async move {
        let path = format!("/management/v1/access-reviews/{}", path_part(&review));
        let answer = console.call(session.token.as_deref(), Method::GET, &path, None).await;
        let open = answer.body["closed-at-ms"].is_null();
        let body = if !answer.ok() {
            refused(&answer)
        } else {
            let s = &answer.body["summary"];
            html! {
                p {
                    "Scope: " (scope_text(&answer.body["scope"])) ". "
                    (answer.body["description"].as_str().unwrap_or_default())
                }
                p.summary { (s["attested"]) " attested · " (s["revoked"]) " revoked · " (s["undecided"]) " undecided" }
                table.lines {
                    thead { tr { th { "#" } th { "Principal" } th { "Role" } th { "Privilege" } th { "On" } th { "Last used" } th { "Decision" } } }
                    tbody {
                        @for l in answer.body["lines"].as_array().into_iter().flatten() {
                            tr {
                                td { (l["line"]) }
                                td { (l["principal"].as_str().unwrap_or_default()) }
                                td { (l["role"].as_str().unwrap_or_default()) span.muted { " (" (l["membership"].as_str().unwrap_or_default()) ")" } }
                                td { (l["privilege"].as_str().unwrap_or_default()) }
                                td { (securable_text(&l["securable"])) span.muted { " (" (l["relation"].as_str().unwrap_or_default()) ")" } }
                                td { (if l["last-used-at-ms"].is_null() { "never".to_owned() } else { when(&l["last-used-at-ms"]) }) }
                                td {
                                    @if let Some(decision) = l["decision"].as_str() {
                                        (decision) " by " (l["decided-by"].as_str().unwrap_or_default())
                                    } @else if open {
                                        form.inline method="post" action="/ui/reviews" {
                                            input type="hidden" name="csrf" value=(session.csrf);
                                            input type="hidden" name="action" value="decide";
                                            input type="hidden" name="id" value=(review);
                                            input type="hidden" name="line" value=(l["line"]);
                                            button type="submit" name="decision" value="attest" aria-label={ "Attest line " (l["line"]) } { "Attest" }
                                            button type="submit" name="decision" value="revoke-grant" aria-label={ "Revoke the grant of line " (l["line"]) } { "Revoke grant" }
                                            button type="submit" name="decision" value="revoke-membership" aria-label={ "Revoke the membership of line " (l["line"]) } { "Revoke membership" }
                                        }
                                    } @else {
                                        "undecided"
                                    }
                                }
                            }
                        }
                    }
                }
                @if open {
                    form method="post" action="/ui/reviews" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        input type="hidden" name="action" value="close";
                        input type="hidden" name="id" value=(review);
                        button type="submit" { "Close the campaign" }
                    }
                } @else {
                    p { "Closed " (when(&answer.body["closed-at-ms"])) " by " (answer.body["closed-by"].as_str().unwrap_or_default()) "." }
                }
            }
        };
        layout("Access review", Some(&session), body)
    })
    .await
}

#[derive(Deserialize)]
pub(super) struct ReviewForm {
    csrf: String,
    action: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    line: Option<i64>,
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    warehouse: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    table: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// Starts a campaign, decides a line, or closes a campaign.
pub(super) async fn review_action(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<ReviewForm>,
) -> Response {
    let Some((session_id, session)) = checked(&console, &headers, &form.csrf) else {
        return not_this_session();
    };
    let token = session.token.as_deref();
    let given = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
    let review = form.id.clone().unwrap_or_default();
    let back = format!("/ui/review?id={}", encode(&review));
    let (note, to) = match (form.action.as_str(), form.line, &form.decision) {
        ("create", _, _) => {
            let mut scope = serde_json::Map::new();
            for (key, value) in [
                ("warehouse", given(&form.warehouse)),
                ("namespace", given(&form.namespace)),
                ("table", given(&form.table)),
            ] {
                if let Some(value) = value {
                    scope.insert(key.to_owned(), Value::String(value));
                }
            }
            let request = json!({ "scope": scope, "description": given(&form.description) });
            let answer = console.call(token, Method::POST, "/management/v1/access-reviews", Some(request)).await;
            match answer.body["id"].as_str().filter(|_| answer.ok()) {
                Some(created) => (
                    format!("Campaign started: {} lines to decide.", answer.body["summary"]["undecided"]),
                    format!("/ui/review?id={}", encode(created)),
                ),
                None => (format!("Not started: {}", answer.message()), "/ui/reviews".to_owned()),
            }
        }
        ("decide", Some(line), Some(decision)) => {
            let path = format!("/management/v1/access-reviews/{}/decisions", path_part(&review));
            let request = json!({ "decisions": [{ "line": line, "decision": decision }] });
            let answer = console.call(token, Method::POST, &path, Some(request)).await;
            let note = if answer.ok() {
                format!("Line {line}: {decision}.")
            } else {
                format!("Line {line} not decided: {}", answer.message())
            };
            (note, back)
        }
        ("close", _, _) => {
            let path = format!("/management/v1/access-reviews/{}/close", path_part(&review));
            let answer = console.call(token, Method::POST, &path, None).await;
            let note = if answer.ok() {
                "The campaign is closed.".to_owned()
            } else {
                format!("Not closed: {}", answer.message())
            };
            (note, back)
        }
        _ => ("Nothing done: an incomplete form.".to_owned(), "/ui/reviews".to_owned()),
    };
    console.sessions.notify(&session_id, note);
    harden(Redirect::to(&to).into_response())
}

#[derive(Deserialize)]
pub(super) struct RoleForm {
    csrf: String,
    action: String,
    role: String,
    #[serde(default)]
    principal: Option<String>,
    #[serde(default)]
    confirm: Option<String>,
}

/// Creates or deletes a role, adds a principal to it or removes one.
pub(super) async fn role_action(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<RoleForm>,
) -> Response {
    let Some((id, session)) = checked(&console, &headers, &form.csrf) else {
        return not_this_session();
    };
    let role = path_part(&form.role);
    let member = form.principal.clone().unwrap_or_default();
    let (method, path, body, done) = match form.action.as_str() {
        "create" => (
            Method::POST,
            "/management/v1/roles".to_owned(),
            Some(json!({ "name": form.role })),
            format!("Role {} created.", form.role),
        ),
        "delete" if form.confirm.as_deref() == Some("yes") => {
            (Method::DELETE, format!("/management/v1/roles/{role}"), None, format!("Role {} deleted.", form.role))
        }
        "add-member" if !member.is_empty() => (
            Method::PUT,
            format!("/management/v1/roles/{role}/principals/{}", path_part(&member)),
            None,
            format!("{member} is in {}.", form.role),
        ),
        "remove-member" if !member.is_empty() => (
            Method::DELETE,
            format!("/management/v1/roles/{role}/principals/{}", path_part(&member)),
            None,
            format!("{member} left {}.", form.role),
        ),
        _ => {
            console.sessions.notify(&id, "Nothing done: an incomplete form (tick confirm to delete).".into());
            return harden(Redirect::to("/ui/access").into_response());
        }
    };
    let answer = console.call(session.token.as_deref(), method, &path, body).await;
    let note = if answer.ok() { done } else { format!("Not done: {}", answer.message()) };
    console.sessions.notify(&id, note);
    harden(Redirect::to("/ui/access").into_response())
}
