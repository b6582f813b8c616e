//! Management API: warehouses (`/management/v1/warehouses`).

use axum::extract::State;
use axum::http::StatusCode;
use icegate_catalog::store::Warehouse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Json, Path};

/// A warehouse: a named storage root that holds namespaces, tables and views.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct WarehouseResponse {
    /// Opaque, URL-safe id; clients use it as the `prefix` of `/v1/{prefix}/...`.
    pub id: String,
    pub name: String,
    /// Where the warehouse's files live (`file:///...`).
    pub storage_root: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl From<Warehouse> for WarehouseResponse {
    fn from(w: Warehouse) -> Self {
        Self {
            id: w.id,
            name: w.name.to_string(),
            storage_root: w.storage_root.to_string(),
            created_at_ms: w.created_at_ms,
            updated_at_ms: w.updated_at_ms,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CreateWarehouseRequest {
    /// 1-128 characters of `A-Z a-z 0-9 _ . -`, starting with a letter or digit; unique.
    pub name: String,
    /// An absolute `file://` URL (`s3://` arrives with storage profiles).
    #[schema(example = "file:///var/lib/icegate/warehouse")]
    pub storage_root: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ListWarehousesResponse {
    pub warehouses: Vec<WarehouseResponse>,
}

/// Create a warehouse
#[utoipa::path(
    post,
    path = "/management/v1/warehouses",
    tag = "Warehouses",
    operation_id = "createWarehouse",
    request_body = CreateWarehouseRequest,
    responses(
        (status = 201, description = "The warehouse was created", body = WarehouseResponse),
        (status = 400, description = "Invalid name or storage root", body = IcebergErrorResponse),
        (status = 409, description = "A warehouse of that name exists", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn create_warehouse(
    State(state): State<AppState>,
    Json(request): Json<CreateWarehouseRequest>,
) -> Result<(StatusCode, Json<WarehouseResponse>), ApiError> {
    let warehouse = state.catalog.create_warehouse(&request.name, &request.storage_root).await?;
    Ok((StatusCode::CREATED, Json(warehouse.into())))
}

/// List warehouses
#[utoipa::path(
    get,
    path = "/management/v1/warehouses",
    tag = "Warehouses",
    operation_id = "listWarehouses",
    responses(
        (status = 200, description = "Every warehouse, by name", body = ListWarehousesResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn list_warehouses(
    State(state): State<AppState>,
    visibility: Option<axum::Extension<icegate_catalog::access::Visibility>>,
) -> Result<Json<ListWarehousesResponse>, ApiError> {
    let warehouses = state.catalog.list_warehouses(crate::authz::visibility(visibility).as_deref()).await?;
    Ok(Json(ListWarehousesResponse { warehouses: warehouses.into_iter().map(Into::into).collect() }))
}

/// Get a warehouse
#[utoipa::path(
    get,
    path = "/management/v1/warehouses/{name}",
    tag = "Warehouses",
    operation_id = "getWarehouse",
    params(("name" = String, Path, description = "Warehouse name")),
    responses(
        (status = 200, description = "The warehouse", body = WarehouseResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn get_warehouse(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WarehouseResponse>, ApiError> {
    Ok(Json(state.catalog.get_warehouse(&name).await?.into()))
}

/// Delete an empty warehouse
#[utoipa::path(
    delete,
    path = "/management/v1/warehouses/{name}",
    tag = "Warehouses",
    operation_id = "deleteWarehouse",
    params(("name" = String, Path, description = "Warehouse name")),
    responses(
        (status = 204, description = "The warehouse was deleted"),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 409, description = "The warehouse still holds namespaces", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn delete_warehouse(State(state): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    state.catalog.delete_warehouse(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
