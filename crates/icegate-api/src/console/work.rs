//! The console's pages for work in progress: one task (its progress, result, a cancel button),
//! migrations (their tables' states, rollback, retire) and adoptions (their runs). A page
//! whose work is still going reloads itself every few seconds (no script), so an operator
//! watches it finish.

use std::collections::HashMap;

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::pages::{checked, encode, levels_of, live_layout, not_this_session, path_part, refused, signed_in, when};
use super::{Console, harden};

/// Whether a task's work is going: it runs, or it is queued and due (a recurring sweep queued
/// for later is not followed, or its page would reload until then).
pub(super) fn in_progress(task: &Value) -> bool {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis()) as i64;
    match task["state"].as_str() {
        Some("running") => true,
        Some("queued") => task["not-before-ms"].as_i64().is_none_or(|at| at <= now),
        _ => false,
    }
}

/// A task's progress: a bar when its total is known, else its count.
pub(super) fn progress(task: &Value) -> Markup {
    let done = task["progress"]["done"].as_i64().unwrap_or(0);
    let bytes = task["progress"]["bytes"].as_i64().unwrap_or(0);
    html! {
        @if let Some(total) = task["progress"]["total"].as_i64().filter(|total| *total > 0) {
            progress value=(done) max=(total) aria-label="Progress" { (done) "/" (total) }
            " " span.count { (done) "/" (total) }
        } @else {
            span.count { (done) }
        }
        @if bytes > 0 { " · " (bytes) " bytes" }
    }
}

fn json_block(value: &Value) -> Markup {
    html! { pre { code { (serde_json::to_string_pretty(value).unwrap_or_default()) } } }
}

/// One task, followed while it is queued or running.
pub(super) async fn task(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let task = q.get("id").cloned().unwrap_or_default();
    signed_in(&console.clone(), &headers, |session| async move {
        let path = format!("/management/v1/tasks/{}", path_part(&task));
        let answer = console.call(session.token.as_deref(), Method::GET, &path, None).await;
        let t = &answer.body;
        let follow = answer.ok() && in_progress(t);
        let body = if !answer.ok() {
            refused(&answer)
        } else {
            html! {
                dl.task {
                    dt { "Kind" } dd { (t["kind"].as_str().unwrap_or_default()) }
                    dt { "State" } dd.state role="status" { (t["state"].as_str().unwrap_or_default()) }
                    dt { "Progress" } dd { (progress(t)) }
                    dt { "Reason" } dd { (t["reason"].as_str().unwrap_or_default()) }
                    dt { "Attempts" } dd { (t["attempts"]) " of " (t["max-attempts"]) }
                    dt { "Created" } dd { (when(&t["created-at-ms"])) }
                    dt { "Finished" } dd { (when(&t["finished-at-ms"])) }
                    @if let Some(error) = t["last-error"].as_str() { dt { "Last error" } dd.error { (error) } }
                }
                @if follow {
                    p.muted { "This page follows the task until it ends." }
                    form method="post" action="/ui/task/cancel" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        input type="hidden" name="id" value=(task);
                        button type="submit" { "Cancel the task" }
                    }
                }
                @if !t["result"].is_null() { h2 { "Result" } (json_block(&t["result"])) }
                h2 { "Parameters" }
                (json_block(&t["params"]))
            }
        };
        live_layout("Task", Some(&session), follow, body)
    })
    .await
}

#[derive(Deserialize)]
pub(super) struct IdForm {
    csrf: String,
    id: String,
    #[serde(default)]
    action: Option<String>,
}

pub(super) async fn cancel(State(console): State<Console>, headers: HeaderMap, Form(form): Form<IdForm>) -> Response {
    let Some((session_id, session)) = checked(&console, &headers, &form.csrf) else {
        return not_this_session();
    };
    let path = format!("/management/v1/tasks/{}/cancel", path_part(&form.id));
    let answer = console.call(session.token.as_deref(), Method::POST, &path, None).await;
    let note =
        if answer.ok() { "Cancellation asked for.".to_owned() } else { format!("Not cancelled: {}", answer.message()) };
    console.sessions.notify(&session_id, note);
    harden(Redirect::to(&format!("/ui/task?id={}", encode(&form.id))).into_response())
}

/// Migration runs: a warehouse's (its admins), or every one (server admins).
pub(super) async fn migrations(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let warehouse = q.get("w").cloned().filter(|w| !w.is_empty());
    signed_in(&console.clone(), &headers, |session| async move {
        let path = match &warehouse {
            Some(w) => format!("/management/v1/migrations?warehouse={}", encode(w)),
            None => "/management/v1/migrations".to_owned(),
        };
        let answer = console.call(session.token.as_deref(), Method::GET, &path, None).await;
        let follow = answer.body["migrations"].as_array().into_iter().flatten().any(|m| m["state"] == "running");
        let body = if !answer.ok() {
            refused(&answer)
        } else {
            html! {
                table.migrations {
                    thead { tr { th { "Run" } th { "Into" } th { "Source" } th { "State" } th { "Started" } } }
                    tbody {
                        @for m in answer.body["migrations"].as_array().into_iter().flatten() {
                            @let run = m["id"].as_str().unwrap_or_default();
                            tr {
                                td { a href={ "/ui/migration?id=" (encode(run)) } { code { (run) } } }
                                td { (m["target-warehouse"].as_str().unwrap_or_default()) }
                                td { (m["source"]["type"].as_str().unwrap_or_default()) " " code { (m["source"]["uri"].as_str().or_else(|| m["source"]["region"].as_str()).unwrap_or_default()) } }
                                td.state { (m["state"].as_str().unwrap_or_default()) @if m["dry-run"] == true { " (dry run)" } }
                                td { (when(&m["created-at-ms"])) " by " (m["created-by"].as_str().unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
        };
        let title = match &warehouse {
            Some(w) => format!("Migrations into {w}"),
            None => "Migrations".to_owned(),
        };
        live_layout(&title, Some(&session), follow, body)
    })
    .await
}

/// One migration run: each table's state, the run's task progress, rollback and retire.
pub(super) async fn migration(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let run = q.get("id").cloned().unwrap_or_default();
    signed_in(&console.clone(), &headers, |session| async move {
        let token = session.token.as_deref();
        let answer = console.call(token, Method::GET, &format!("/management/v1/migrations/{}", path_part(&run)), None).await;
        let m = &answer.body;
        let follow = answer.ok() && m["state"] == "running";
        let task = match m["task-id"].as_str() {
            Some(task) if answer.ok() => {
                Some(console.call(token, Method::GET, &format!("/management/v1/tasks/{}", path_part(task)), None).await)
            }
            _ => None,
        };
        let body = if !answer.ok() {
            refused(&answer)
        } else {
            html! {
                dl {
                    dt { "State" } dd.state role="status" { (m["state"].as_str().unwrap_or_default()) @if m["dry-run"] == true { " (dry run)" } }
                    dt { "Into" } dd { (m["target-warehouse"].as_str().unwrap_or_default()) }
                    dt { "Source" } dd { code { (m["source"].to_string()) } }
                    @if let (Some(task), Some(t)) = (m["task-id"].as_str(), &task) {
                        dt { "Task" } dd { a href={ "/ui/task?id=" (encode(task)) } { code { (task) } } " " @if t.ok() { (progress(&t.body)) } }
                    }
                }
                @if follow { p.muted { "This page follows the run until it ends." } }
                h2 { "Tables" }
                @if m["tables"].as_array().is_none_or(Vec::is_empty) {
                    h3 { "Plan" }
                    table.plan {
                        thead { tr { th { "Source" } th { "Target" } th { "Snapshots" } th { "Moves" } } }
                        tbody {
                            @for p in m["report"]["plan"].as_array().into_iter().flatten() {
                                tr {
                                    td { (dotted(&p["source"]["namespace"], &p["source"]["name"])) }
                                    td { (dotted(&p["target"]["namespace"], &p["target"]["name"])) }
                                    td { (p["snapshots"]) }
                                    td { @if p["moves"] == true { "yes" } @else { (p["conflict"].as_str().unwrap_or("no")) } }
                                }
                            }
                        }
                    }
                } @else {
                    table.migration-tables {
                        thead { tr { th { "Source" } th { "Target" } th { "State" } th { "Metadata" } th { "Error" } } }
                        tbody {
                            @for t in m["tables"].as_array().into_iter().flatten() {
                                tr {
                                    td { (dotted(&t["source-namespace"], &t["source-name"])) }
                                    td { (dotted(&t["target-namespace"], &t["target-name"])) }
                                    td.state { (t["state"].as_str().unwrap_or_default()) }
                                    td { code { (t["moved-location"].as_str().or_else(|| t["planned-location"].as_str()).unwrap_or("-")) } }
                                    td { (t["error"].as_str().unwrap_or_default()) }
                                }
                            }
                        }
                    }
                }
                @if !m["dry-run"].as_bool().unwrap_or(false) && matches!(m["state"].as_str(), Some("completed" | "failed")) {
                    h2 { "Act on the run" }
                    form.inline method="post" action="/ui/migration" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        input type="hidden" name="id" value=(run);
                        button type="submit" name="action" value="rollback" { "Roll back (tables go back to the source)" }
                        button type="submit" name="action" value="retire" { "Retire (remove the source's fenced entries)" }
                    }
                }
            }
        };
        live_layout("Migration", Some(&session), follow, body)
    })
    .await
}

fn dotted(namespace: &Value, name: &Value) -> String {
    let mut parts: Vec<&str> = namespace.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    parts.extend(name.as_str());
    super::pages::dotted(&parts)
}

/// Rolls a run back, or retires its source entries.
pub(super) async fn migration_action(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<IdForm>,
) -> Response {
    let Some((session_id, session)) = checked(&console, &headers, &form.csrf) else {
        return not_this_session();
    };
    let action = match form.action.as_deref() {
        Some("rollback") => "rollback",
        Some("retire") => "retire",
        _ => return not_this_session(),
    };
    let path = format!("/management/v1/migrations/{}/{action}", path_part(&form.id));
    let answer = console.call(session.token.as_deref(), Method::POST, &path, None).await;
    let note = match (answer.ok(), action) {
        (true, "rollback") => "Rolled back: the tables are the source's again.".to_owned(),
        (true, _) => "Retired: the source's fenced entries are gone.".to_owned(),
        (false, _) => format!("Not done: {}", answer.message()),
    };
    console.sessions.notify(&session_id, note);
    harden(Redirect::to(&format!("/ui/migration?id={}", encode(&form.id))).into_response())
}

/// A warehouse's adoptions (its admins).
pub(super) async fn adoptions(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let warehouse = q.get("w").cloned().unwrap_or_default();
    signed_in(&console.clone(), &headers, |session| async move {
        let path = format!("/management/v1/warehouses/{}/adoptions", path_part(&warehouse));
        let answer = console.call(session.token.as_deref(), Method::GET, &path, None).await;
        let body = if !answer.ok() {
            refused(&answer)
        } else {
            html! {
                table.adoptions {
                    thead { tr { th { "Table" } th { "Source" } th { "Mode" } th { "Adopted" } } }
                    tbody {
                        @for a in answer.body["adoptions"].as_array().into_iter().flatten() {
                            tr {
                                td { a href={ "/ui/adoption?w=" (encode(&warehouse)) "&id=" (encode(a["id"].as_str().unwrap_or_default())) } { (dotted(&a["namespace"], &a["name"])) } }
                                td { code { (a["source"].as_str().unwrap_or_default()) } }
                                td { (a["mode"].as_str().unwrap_or_default()) }
                                td { (when(&a["created-at-ms"])) " by " (a["created-by"].as_str().unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
        };
        live_layout(&format!("Adoptions into {warehouse}"), Some(&session), false, body)
    })
    .await
}

/// One adoption with its runs (newest first), followed while one is going.
pub(super) async fn adoption(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let warehouse = q.get("w").cloned().unwrap_or_default();
    let adoption = q.get("id").cloned().unwrap_or_default();
    signed_in(&console.clone(), &headers, |session| async move {
        let path = format!("/management/v1/warehouses/{}/adoptions/{}", path_part(&warehouse), path_part(&adoption));
        let answer = console.call(session.token.as_deref(), Method::GET, &path, None).await;
        let a = &answer.body;
        let follow = answer.ok() && a["runs"].as_array().into_iter().flatten().any(|r| r["finished-at-ms"].is_null());
        let body = if !answer.ok() {
            refused(&answer)
        } else {
            html! {
                dl {
                    dt { "Table" } dd { (dotted(&a["namespace"], &a["name"])) }
                    dt { "Source" } dd { code { (a["source"].as_str().unwrap_or_default()) } }
                    dt { "Mode" } dd { (a["mode"].as_str().unwrap_or_default()) }
                }
                @if follow { p.muted role="status" { "A run is going: this page follows it." } }
                h2 { "Runs" }
                table.runs {
                    thead { tr { th { "Started" } th { "Finished" } th { "Snapshot" } th { "Report" } } }
                    tbody {
                        @for r in a["runs"].as_array().into_iter().flatten() {
                            tr {
                                td { (when(&r["started-at-ms"])) }
                                td { (if r["finished-at-ms"].is_null() { "running".to_owned() } else { when(&r["finished-at-ms"]) }) }
                                td { (r["snapshot-id"]) }
                                td { (json_block(&r["report"])) }
                            }
                        }
                    }
                }
            }
        };
        live_layout("Adoption", Some(&session), follow, body)
    })
    .await
}

#[derive(Deserialize)]
pub(super) struct MaintenanceForm {
    csrf: String,
    w: String,
    ns: String,
    t: String,
    action: String,
}

/// Queues a maintenance run on one table (the API decides who may), then follows its task.
pub(super) async fn maintenance(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<MaintenanceForm>,
) -> Response {
    let Some((session_id, session)) = checked(&console, &headers, &form.csrf) else {
        return not_this_session();
    };
    let kind = match form.action.as_str() {
        "expire-snapshots" => "expire-snapshots",
        "remove-orphans" => "remove-orphans",
        _ => return not_this_session(),
    };
    let path = format!("/management/v1/warehouses/{}/maintenance/run", path_part(&form.w));
    let body = serde_json::json!({ "namespace": levels_of(&form.ns), "table": form.t, "actions": [kind] });
    let answer = console.call(session.token.as_deref(), Method::POST, &path, Some(body)).await;
    let task = answer.body["tables"][0][kind]["task-id"].as_str().filter(|_| answer.ok());
    match task {
        Some(task) => harden(Redirect::to(&format!("/ui/task?id={}", encode(task))).into_response()),
        None => {
            let why = if answer.ok() { "no task was queued".to_owned() } else { answer.message() };
            console.sessions.notify(&session_id, format!("Not queued: {why}"));
            let back = format!("/ui/table?w={}&ns={}&t={}", encode(&form.w), encode(&form.ns), encode(&form.t));
            harden(Redirect::to(&back).into_response())
        }
    }
}
