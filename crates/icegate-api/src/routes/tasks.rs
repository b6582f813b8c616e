//! Management API: the background task queue (`/management/v1/tasks`).

use axum::extract::{Path, State};
use icegate_catalog::jobs::{TaskFilter, TaskRecord, TaskState};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Query};

/// How far a task got: units its job counts (files, records, tables), and bytes.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TaskProgress {
    pub done: i64,
    pub total: Option<i64>,
    pub bytes: i64,
}

/// A background task.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct TaskResponse {
    pub id: String,
    /// The job that runs it (`audit-checkpoint`, `idempotency-key-expiry`, ...).
    pub kind: String,
    pub warehouse_id: Option<String>,
    pub tabular_id: Option<String>,
    /// `queued`, `running`, `done`, `failed` or `cancelled`.
    pub state: String,
    pub attempts: i32,
    pub max_attempts: i32,
    /// Not run before this time (milliseconds since the Unix epoch).
    pub not_before_ms: i64,
    /// The replica working it (while `running`), and until when its lease holds.
    pub lease_owner: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    pub heartbeat_at_ms: Option<i64>,
    pub progress: TaskProgress,
    /// What the job was given.
    #[schema(value_type = Object)]
    pub params: serde_json::Value,
    /// What it did (when `done`).
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    pub last_error: Option<String>,
    /// Why the system does this work.
    pub reason: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

impl From<TaskRecord> for TaskResponse {
    fn from(t: TaskRecord) -> Self {
        Self {
            id: t.id,
            kind: t.kind,
            warehouse_id: t.warehouse_id,
            tabular_id: t.tabular_id,
            state: t.state.as_str().to_owned(),
            attempts: t.attempts,
            max_attempts: t.max_attempts,
            not_before_ms: t.not_before_ms,
            lease_owner: t.lease_owner,
            lease_expires_at_ms: t.lease_expires_at_ms,
            heartbeat_at_ms: t.heartbeat_at_ms,
            progress: TaskProgress { done: t.progress.done, total: t.progress.total, bytes: t.progress.bytes },
            params: t.params,
            result: t.result,
            last_error: t.last_error,
            reason: t.reason,
            created_at_ms: t.created_at_ms,
            updated_at_ms: t.updated_at_ms,
            finished_at_ms: t.finished_at_ms,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ListTasksResponse {
    pub tasks: Vec<TaskResponse>,
    /// Present when more tasks may follow: pass it as `pageToken`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListTasksQuery {
    /// Tasks of this job.
    pub kind: Option<String>,
    /// `queued`, `running`, `done`, `failed` or `cancelled`.
    pub state: Option<String>,
    /// Tasks of this warehouse (by name); required but for server admins.
    pub warehouse: Option<String>,
    /// Where the page starts: the `next-page-token` of the previous page.
    #[serde(rename = "pageToken")]
    #[param(rename = "pageToken")]
    pub page_token: Option<String>,
    /// The most tasks a page holds (1-1000, default 100).
    #[serde(rename = "pageSize")]
    #[param(rename = "pageSize")]
    pub page_size: Option<i64>,
}

/// List background tasks
///
/// Newest first. Server admins see every task; admins of a warehouse see its tasks and must
/// name it.
#[utoipa::path(get, path = "/management/v1/tasks", tag = "Tasks", operation_id = "listTasks",
    params(ListTasksQuery),
    responses(
        (status = 200, description = "A page of tasks", body = ListTasksResponse),
        (status = 400, description = "An unknown state or parameter", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the server, or on the warehouse named", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
    ))]
pub async fn list_tasks(
    State(state): State<AppState>,
    Context(ctx): Context,
    Query(query): Query<ListTasksQuery>,
) -> Result<Json<ListTasksResponse>, ApiError> {
    let page_size = query.page_size.unwrap_or(100);
    if !(1..=icegate_catalog::jobs::operators::MAX_TASKS_PAGE).contains(&page_size) {
        return Err(ApiError::bad_request("pageSize must be 1-1000"));
    }
    let filter = TaskFilter {
        kind: query.kind,
        state: query.state.as_deref().map(TaskState::parse).transpose()?,
        warehouse_id: None,
        before_id: query.page_token.filter(|t| !t.is_empty()),
        limit: Some(page_size),
    };
    let tasks = state.catalog.tasks().list(&ctx, filter, query.warehouse.as_deref()).await?;
    let next_page_token = (tasks.len() as i64 == page_size).then(|| tasks.last().map(|t| t.id.clone())).flatten();
    Ok(Json(ListTasksResponse { tasks: tasks.into_iter().map(Into::into).collect(), next_page_token }))
}

/// Read a background task
///
/// Its state, progress, result and last error.
#[utoipa::path(get, path = "/management/v1/tasks/{id}", tag = "Tasks", operation_id = "getTask",
    params(("id" = String, Path, description = "The task's id")),
    responses(
        (status = 200, description = "The task", body = TaskResponse),
        (status = 404, description = "No such task (or one the caller may not see)", body = IcebergErrorResponse),
    ))]
pub async fn get_task(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
) -> Result<Json<TaskResponse>, ApiError> {
    Ok(Json(state.catalog.tasks().get(&ctx, &id).await?.into()))
}

/// Cancel a background task
///
/// A queued task does not run; a running one stops at its next step (what it finished stays
/// done). A recurring task is queued again at its next period. Recorded in the audit trail.
#[utoipa::path(post, path = "/management/v1/tasks/{id}/cancel", tag = "Tasks", operation_id = "cancelTask",
    params(("id" = String, Path, description = "The task's id")),
    responses(
        (status = 200, description = "The cancelled task", body = TaskResponse),
        (status = 404, description = "No such task (or one the caller may not see)", body = IcebergErrorResponse),
        (status = 409, description = "The task has ended", body = IcebergErrorResponse),
    ))]
pub async fn cancel_task(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
) -> Result<Json<TaskResponse>, ApiError> {
    Ok(Json(state.catalog.tasks().cancel(&ctx, &id).await?.into()))
}
