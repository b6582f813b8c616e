//! Management API: maintenance run by operators (`/management/v1/warehouses/{name}/maintenance/...`):
//! the dry run, the run (tasks queued), and the orphan quarantine.

use axum::extract::{Path, State};
use icegate_catalog::NamespaceIdent;
use icegate_catalog::jobs::QuarantinedFile;
use icegate_catalog::maintenance::Scope;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Query};

/// Which tables, and what to do.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MaintenanceRequest {
    /// Only tables in this namespace and the namespaces below it.
    pub namespace: Option<Vec<String>>,
    /// Only this table (with `namespace`).
    pub table: Option<String>,
    /// `expire-snapshots`, `remove-orphans` (absent: both).
    pub actions: Option<Vec<String>>,
    /// The `next-page-token` of the previous page.
    pub page_token: Option<String>,
    /// Tables per page (1-100, default 100).
    pub page_size: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct MaintenanceResponse {
    /// Per table: its id, namespace and name, and per action what it would remove (plan) or
    /// the task queued (run).
    #[schema(value_type = Vec<Object>)]
    pub tables: Vec<Value>,
    /// Present when more tables follow: pass it as `page-token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

fn scope(request: MaintenanceRequest) -> Result<Scope, ApiError> {
    let actions = request.actions.unwrap_or_else(|| vec!["expire-snapshots".into(), "remove-orphans".into()]);
    let mut scope = Scope {
        namespace: request.namespace.map(NamespaceIdent::from_levels).transpose()?,
        table: request.table,
        after: request.page_token.filter(|t| !t.is_empty()),
        limit: request.page_size.unwrap_or(100),
        ..Scope::default()
    };
    if !(1..=100).contains(&scope.limit) {
        return Err(ApiError::bad_request("page-size must be 1-100"));
    }
    if scope.table.is_some() && scope.namespace.is_none() {
        return Err(ApiError::bad_request("a table is named with its namespace"));
    }
    for action in &actions {
        match action.as_str() {
            "expire-snapshots" => scope.expire_snapshots = true,
            "remove-orphans" => scope.remove_orphans = true,
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown action {other:?} (expire-snapshots, remove-orphans)"
                )));
            }
        }
    }
    if actions.is_empty() {
        return Err(ApiError::bad_request("no action asked for"));
    }
    Ok(scope)
}

/// Plan maintenance (dry run)
///
/// Per table in scope: what snapshot expiry would remove now under the table's policy (its own
/// `history.expire.*` properties over what it inherits), the files that would go with those
/// snapshots, and what orphan removal would quarantine. Changes nothing: storage is listed and
/// manifests are read. Admins of the warehouse.
#[utoipa::path(post, path = "/management/v1/warehouses/{name}/maintenance/plan", tag = "Lifecycle",
    operation_id = "planMaintenance",
    params(("name" = String, Path, description = "Warehouse name")),
    request_body = MaintenanceRequest,
    responses(
        (status = 200, description = "What each table's maintenance would do", body = MaintenanceResponse),
        (status = 400, description = "A malformed request, or a table whose files cannot be read", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse, namespace or table", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store or object storage unavailable", body = IcebergErrorResponse),
    ))]
pub async fn plan(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Json(request): Json<MaintenanceRequest>,
) -> Result<Json<MaintenanceResponse>, ApiError> {
    let outcome = state.catalog.maintenance().plan(&ctx, &name, scope(request)?).await?;
    Ok(Json(MaintenanceResponse { tables: outcome.tables, next_page_token: outcome.next_after }))
}

/// Run maintenance
///
/// Queues, per table in scope, a snapshot expiry and an orphan removal task due now (a table
/// whose task of that kind is queued or running keeps that one), and answers the tasks' ids
/// (`GET /management/v1/tasks/{id}` follows them). Admins of the warehouse.
#[utoipa::path(post, path = "/management/v1/warehouses/{name}/maintenance/run", tag = "Lifecycle",
    operation_id = "runMaintenance",
    params(("name" = String, Path, description = "Warehouse name")),
    request_body = MaintenanceRequest,
    responses(
        (status = 200, description = "The tasks queued, per table", body = MaintenanceResponse),
        (status = 400, description = "A malformed request", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse, namespace or table", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn run(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Json(request): Json<MaintenanceRequest>,
) -> Result<Json<MaintenanceResponse>, ApiError> {
    let outcome = state.catalog.maintenance().run(&ctx, &name, scope(request)?).await?;
    Ok(Json(MaintenanceResponse { tables: outcome.tables, next_page_token: outcome.next_after }))
}

/// A file orphan removal quarantined.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct QuarantinedResponse {
    /// The table's id.
    pub table_id: String,
    pub location: String,
    pub size: u64,
    /// Its last-modified time when quarantined: a file changed since is not deleted.
    pub modified_ms: i64,
    pub quarantined_at_ms: i64,
    /// Deleted after this (if still unreferenced and unchanged), unless restored.
    pub delete_after_ms: i64,
    /// The task that quarantined it.
    pub task_id: String,
    /// `quarantined`, or `restored` (kept for good).
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_by: Option<String>,
}

impl From<QuarantinedFile> for QuarantinedResponse {
    fn from(f: QuarantinedFile) -> Self {
        Self {
            table_id: f.tabular_id,
            location: f.location,
            size: f.size,
            modified_ms: f.modified_ms,
            quarantined_at_ms: f.quarantined_at_ms,
            delete_after_ms: f.delete_after_ms,
            task_id: f.task_id,
            state: f.state.as_str().to_owned(),
            restored_by: f.restored_by,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct QuarantineResponse {
    pub files: Vec<QuarantinedResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct QuarantineQuery {
    /// Only this table's files: its namespace, levels joined by the unit separator (`%1F`).
    pub namespace: Option<String>,
    /// With `namespace`: the table.
    pub table: Option<String>,
    #[serde(rename = "pageToken")]
    #[param(rename = "pageToken")]
    pub page_token: Option<String>,
    /// Files per page (1-1000, default 100).
    #[serde(rename = "pageSize")]
    #[param(rename = "pageSize")]
    pub page_size: Option<i64>,
}

/// List the orphan quarantine
///
/// Files orphan removal found unreferenced and quarantined (deleted once their quarantine has
/// passed, if still unreferenced and unchanged), and restored ones. Admins of the warehouse.
#[utoipa::path(get, path = "/management/v1/warehouses/{name}/maintenance/quarantine", tag = "Lifecycle",
    operation_id = "listQuarantine",
    params(("name" = String, Path, description = "Warehouse name"), QuarantineQuery),
    responses(
        (status = 200, description = "A page of quarantined files", body = QuarantineResponse),
        (status = 400, description = "A bad page token or size", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse or table", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn list_quarantine(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Query(query): Query<QuarantineQuery>,
) -> Result<Json<QuarantineResponse>, ApiError> {
    let page_size = query.page_size.unwrap_or(100);
    if !(1..=1000).contains(&page_size) {
        return Err(ApiError::bad_request("pageSize must be 1-1000"));
    }
    let table = match (query.namespace, query.table) {
        (Some(namespace), Some(table)) => Some((NamespaceIdent::parse_encoded(&namespace)?, table)),
        (None, None) => None,
        _ => return Err(ApiError::bad_request("namespace and table go together")),
    };
    let after = match query.page_token.filter(|t| !t.is_empty()) {
        None => None,
        Some(token) => Some(
            token
                .split_once('\n')
                .map(|(id, location)| (id.to_owned(), location.to_owned()))
                .ok_or_else(|| ApiError::bad_request("pageToken is not one this listing gave"))?,
        ),
    };
    let files = state.catalog.maintenance().quarantine(&ctx, &name, table, after, page_size).await?;
    let next_page_token = (files.len() as i64 == page_size)
        .then(|| files.last().map(|f| format!("{}\n{}", f.tabular_id, f.location)))
        .flatten();
    Ok(Json(QuarantineResponse { files: files.into_iter().map(Into::into).collect(), next_page_token }))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RestoreRequest {
    pub namespace: Vec<String>,
    pub table: String,
    /// Only these files (absent: every quarantined file of the table).
    pub locations: Option<Vec<String>>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RestoreResponse {
    /// How many quarantined files are restored (kept for good).
    pub restored: u64,
}

/// Restore quarantined files
///
/// Quarantined files of one table are kept for good: never deleted, nor quarantined again.
/// Admins of the warehouse.
#[utoipa::path(post, path = "/management/v1/warehouses/{name}/maintenance/quarantine/restore", tag = "Lifecycle",
    operation_id = "restoreQuarantined",
    params(("name" = String, Path, description = "Warehouse name")),
    request_body = RestoreRequest,
    responses(
        (status = 200, description = "How many were restored", body = RestoreResponse),
        (status = 400, description = "A malformed request", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse or table", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn restore(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Json(request): Json<RestoreRequest>,
) -> Result<Json<RestoreResponse>, ApiError> {
    if request.locations.as_ref().is_some_and(|l| l.len() > 1000) {
        return Err(ApiError::bad_request("at most 1000 locations a request"));
    }
    let table = (NamespaceIdent::from_levels(request.namespace)?, request.table);
    let restored = state.catalog.maintenance().restore(&ctx, &name, table, request.locations).await?;
    Ok(Json(RestoreResponse { restored }))
}
