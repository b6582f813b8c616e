//! Management API: legal holds (`/management/v1/legal-holds`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use icegate_catalog::holds::{HoldRecord, Lift};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Query};
use crate::routes::access::Securable;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PlaceHoldRequest {
    /// A warehouse, namespace, table or view.
    pub securable: Securable,
    /// Why (a matter or case reference): 1-1000 bytes, kept and recorded.
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct HoldResponse {
    pub id: String,
    /// What is held, named as it is now.
    pub securable: Securable,
    pub reason: String,
    pub placed_by: String,
    pub placed_at_ms: i64,
    /// Two-person lifting: the admin who asked for the hold to be lifted.
    pub lift_requested_by: Option<String>,
    pub lift_requested_at_ms: Option<i64>,
}

impl From<HoldRecord> for HoldResponse {
    fn from(h: HoldRecord) -> Self {
        Self {
            id: h.id,
            securable: Securable::from(&h.securable),
            reason: h.reason,
            placed_by: h.placed_by,
            placed_at_ms: h.placed_at_ms,
            lift_requested_by: h.lift_requested_by,
            lift_requested_at_ms: h.lift_requested_at_ms,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ListHoldsResponse {
    pub holds: Vec<HoldResponse>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListHoldsQuery {
    /// The holds in this warehouse (required but for server admins).
    pub warehouse: Option<String>,
}

/// Place a legal hold
///
/// While the hold stands, what it covers (a warehouse: everything in it; a namespace: everything
/// in and below it; a table or view: that object, through renames) is not dropped, purged,
/// unregistered, moved out of its namespace or has files deleted by icegate: such requests are
/// answered 409. Needs `admin` on the securable; recorded.
#[utoipa::path(post, path = "/management/v1/legal-holds", tag = "Legal holds", operation_id = "placeLegalHold",
    request_body = PlaceHoldRequest,
    responses(
        (status = 201, description = "The hold", body = HoldResponse),
        (status = 400, description = "A server securable, or no reason", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the securable", body = IcebergErrorResponse),
        (status = 404, description = "No such securable", body = IcebergErrorResponse),
    ))]
pub async fn place_hold(
    State(state): State<AppState>,
    Context(ctx): Context,
    Json(request): Json<PlaceHoldRequest>,
) -> Result<(StatusCode, Json<HoldResponse>), ApiError> {
    let securable = request.securable.parse()?;
    let hold = state.access.place_hold(&ctx, &securable, &request.reason).await?;
    Ok((StatusCode::CREATED, Json(hold.into())))
}

/// List legal holds
///
/// The holds of a warehouse the caller may see (every hold: server admins, without `warehouse`).
#[utoipa::path(get, path = "/management/v1/legal-holds", tag = "Legal holds", operation_id = "listLegalHolds",
    params(ListHoldsQuery),
    responses(
        (status = 200, description = "Holds", body = ListHoldsResponse),
        (status = 400, description = "An unknown parameter", body = IcebergErrorResponse),
        (status = 403, description = "Every hold, without admin on the server", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
    ))]
pub async fn list_holds(
    State(state): State<AppState>,
    Context(ctx): Context,
    Query(query): Query<ListHoldsQuery>,
) -> Result<Json<ListHoldsResponse>, ApiError> {
    let holds = state.access.list_holds(&ctx, query.warehouse.as_deref()).await?;
    Ok(Json(ListHoldsResponse { holds: holds.into_iter().map(Into::into).collect() }))
}

/// Lift a legal hold
///
/// Needs `admin` on what is held. With `governance.hold.two_person`, the first admin's request
/// is kept (202) and a second, different admin lifts it (204). Recorded.
#[utoipa::path(delete, path = "/management/v1/legal-holds/{id}", tag = "Legal holds", operation_id = "liftLegalHold",
    params(("id" = String, Path, description = "The hold's id")),
    responses(
        (status = 204, description = "Lifted"),
        (status = 202, description = "Two-person lifting: asked for, waiting for a second admin", body = HoldResponse),
        (status = 403, description = "Without admin on what is held", body = IcebergErrorResponse),
        (status = 404, description = "No such hold", body = IcebergErrorResponse),
        (status = 409, description = "The same admin asked already", body = IcebergErrorResponse),
    ))]
pub async fn lift_hold(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match state.access.lift_hold(&ctx, &id).await? {
        Lift::Lifted => Ok(StatusCode::NO_CONTENT.into_response()),
        Lift::Requested => {
            let holds = state.access.get_hold(&ctx, &id).await?;
            Ok((StatusCode::ACCEPTED, Json(HoldResponse::from(holds))).into_response())
        }
    }
}
