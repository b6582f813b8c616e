//! View operations of the Iceberg REST catalog.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use icegate_catalog::tables::TableIdent;
use icegate_catalog::views::{CreateView, ViewResult};
use serde_json::value::RawValue;

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Path, Query};
use crate::models::tables::{
    CommitViewRequest, CreateViewRequest, ListTablesQuery, ListTablesResponse, LoadViewResult, RegisterViewRequest,
    RenameTableRequest, TableIdentifier,
};
use crate::models::{Namespace, NamespacePath, PageToken, PrefixPath, ViewPath};

fn result(view: ViewResult) -> Result<Json<LoadViewResult>, ApiError> {
    let metadata = RawValue::from_string(view.metadata_json)
        .map_err(|e| icegate_catalog::CatalogError::Internal(anyhow::anyhow!("view metadata is not JSON: {e}")))?;
    Ok(Json(LoadViewResult { metadata_location: view.metadata_location, metadata, config: BTreeMap::new() }))
}

/// List all view identifiers underneath a given namespace
#[utoipa::path(
    get,
    path = "/v1/{prefix}/namespaces/{namespace}/views",
    tag = "Catalog API",
    operation_id = "listViews",
    params(NamespacePath, ListTablesQuery),
    responses(
        (status = 200, description = "A list of view identifiers", body = ListTablesResponse),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The namespace does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn list_views(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
    Query(query): Query<ListTablesQuery>,
) -> Result<Json<ListTablesResponse>, ApiError> {
    let (prefix, namespace) = path.parse()?;
    let page = (query.page_token.as_deref(), query.page_size);
    let listing = state.catalog.views().list(&ctx, &prefix, &namespace, page).await?;
    Ok(Json(ListTablesResponse {
        next_page_token: listing.next_page_token.map(PageToken),
        identifiers: listing
            .items
            .into_iter()
            .map(|v| TableIdentifier { namespace: Namespace(v.namespace.levels().to_vec()), name: v.name })
            .collect(),
    }))
}

/// Create a view in the given namespace
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/views",
    tag = "Catalog API",
    operation_id = "createView",
    params(NamespacePath),
    request_body = CreateViewRequest,
    responses(
        (status = 200, description = "View metadata result", body = LoadViewResult),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The namespace does not exist", body = IcebergErrorResponse),
        (status = 409, description = "A table or view with that name exists", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn create_view(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
    Json(request): Json<CreateViewRequest>,
) -> Result<Json<LoadViewResult>, ApiError> {
    let (prefix, namespace) = path.parse()?;
    let request = CreateView {
        name: request.name,
        location: request.location,
        schema: icegate_catalog::schema_cost::Pending::new(request.schema, "schema"),
        view_version: request.view_version,
        properties: request.properties,
    };
    result(state.catalog.views().create(&ctx, &prefix, &namespace, request).await?)
}

/// Load a view from the catalog
#[utoipa::path(
    get,
    path = "/v1/{prefix}/namespaces/{namespace}/views/{view}",
    tag = "Catalog API",
    operation_id = "loadView",
    params(ViewPath),
    responses(
        (status = 200, description = "View metadata result", body = LoadViewResult),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The view does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn load_view(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<ViewPath>,
) -> Result<Json<LoadViewResult>, ApiError> {
    let (prefix, view) = path.parse()?;
    result(state.catalog.views().load(&ctx, &prefix, &view).await?)
}

/// Replace a view
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/views/{view}",
    tag = "Catalog API",
    operation_id = "replaceView",
    params(ViewPath),
    request_body = CommitViewRequest,
    responses(
        (status = 200, description = "View metadata result", body = LoadViewResult),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The view does not exist", body = IcebergErrorResponse),
        (status = 409, description = "The view UUID requirement failed", body = IcebergErrorResponse),
        (status = 500, description = "The commit state is unknown", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn replace_view(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<ViewPath>,
    Json(request): Json<CommitViewRequest>,
) -> Result<Json<LoadViewResult>, ApiError> {
    let (prefix, view) = path.parse()?;
    let updates = super::tables::pending_updates(request.updates);
    result(state.catalog.views().replace(&ctx, &prefix, view, request.requirements, updates).await?)
}

/// Drop a view from the catalog
#[utoipa::path(
    delete,
    path = "/v1/{prefix}/namespaces/{namespace}/views/{view}",
    tag = "Catalog API",
    operation_id = "dropView",
    params(ViewPath),
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The view does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn drop_view(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<ViewPath>,
) -> Result<StatusCode, ApiError> {
    let (prefix, view) = path.parse()?;
    state.catalog.views().drop(&ctx, &prefix, &view).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Check if a view exists
#[utoipa::path(
    head,
    path = "/v1/{prefix}/namespaces/{namespace}/views/{view}",
    tag = "Catalog API",
    operation_id = "viewExists",
    params(ViewPath),
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request (HEAD responses carry no body)"),
        (status = 404, description = "The view does not exist (no body)"),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn view_exists(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<ViewPath>,
) -> Result<StatusCode, ApiError> {
    let (prefix, view) = path.parse()?;
    state.catalog.views().exists(&ctx, &prefix, &view).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Rename a view from its current name to a new name
#[utoipa::path(
    post,
    path = "/v1/{prefix}/views/rename",
    tag = "Catalog API",
    operation_id = "renameView",
    params(PrefixPath),
    request_body = RenameTableRequest,
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The source view or the destination namespace does not exist", body = IcebergErrorResponse),
        (status = 409, description = "The destination name is taken", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn rename_view(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<PrefixPath>,
    Json(request): Json<RenameTableRequest>,
) -> Result<StatusCode, ApiError> {
    let (from, to) = (request.source.parse()?, request.destination.parse()?);
    state.catalog.views().rename(&ctx, &path.warehouse(), from, to).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Register a view using a given metadata file location
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/register-view",
    tag = "Catalog API",
    operation_id = "registerView",
    params(NamespacePath),
    request_body = RegisterViewRequest,
    responses(
        (status = 200, description = "The registered view", body = LoadViewResult),
        (status = 400, description = "Bad request: unreadable metadata, or a location outside the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "The namespace does not exist", body = IcebergErrorResponse),
        (status = 409, description = "A table or view with that name exists", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn register_view(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
    Json(request): Json<RegisterViewRequest>,
) -> Result<Json<LoadViewResult>, ApiError> {
    let (prefix, namespace) = path.parse()?;
    let view = TableIdent::view(namespace, &request.name)?;
    result(state.catalog.views().register(&ctx, &prefix, &view, &request.metadata_location).await?)
}
