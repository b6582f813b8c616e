//! Operational endpoints: liveness, readiness and metrics.

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::Json;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StatusResponse {
    pub status: String,
}

/// Liveness: the process is up and serving HTTP. Touches nothing else.
#[utoipa::path(
    get,
    path = "/health",
    tag = "Operations",
    operation_id = "health",
    responses((status = 200, description = "The process is up", body = StatusResponse))
)]
pub async fn health() -> Json<StatusResponse> {
    Json(StatusResponse { status: "ok".into() })
}

/// Readiness: the metadata store answers. 503 while it does not, so a load balancer stops
/// sending traffic until it does.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "Operations",
    operation_id = "ready",
    responses(
        (status = 200, description = "Ready to serve", body = StatusResponse),
        (status = 503, description = "The metadata store is unreachable", body = IcebergErrorResponse),
    )
)]
pub async fn ready(State(state): State<AppState>) -> Result<Json<StatusResponse>, ApiError> {
    state.catalog.ping().await?;
    Ok(Json(StatusResponse { status: "ready".into() }))
}

/// Prometheus metrics in the OpenMetrics text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "Operations",
    operation_id = "metrics",
    responses((status = 200, description = "OpenMetrics text exposition", content_type = "application/openmetrics-text"))
)]
pub async fn metrics(State(state): State<AppState>) -> Response {
    // The task queue's counts are read at each scrape (one grouped count; the queue is bounded
    // by the expiry of ended tasks). A store that cannot answer leaves the gauges as they were.
    if let Ok(counts) = state.catalog.tasks().counts().await {
        state.metrics.set_task_counts(&counts);
    }
    crate::metrics::exposition(state.metrics.render(state.catalog.pool_stats(), state.catalog.metadata_cache()))
}
