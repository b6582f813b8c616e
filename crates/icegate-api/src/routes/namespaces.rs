//! Namespace operations of the Iceberg REST catalog.

use axum::extract::State;
use axum::http::StatusCode;
use icegate_catalog::NamespaceIdent;

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Path, Query};
use crate::models::{
    CreateNamespaceRequest, CreateNamespaceResponse, GetNamespaceResponse, ListNamespacesQuery, ListNamespacesResponse,
    Namespace, NamespacePath, PageToken, PrefixPath, UpdateNamespacePropertiesRequest,
    UpdateNamespacePropertiesResponse,
};

/// List namespaces, optionally providing a parent namespace to list underneath
#[utoipa::path(
    get,
    path = "/v1/{prefix}/namespaces",
    tag = "Catalog API",
    operation_id = "listNamespaces",
    params(PrefixPath, ListNamespacesQuery),
    responses(
        (status = 200, description = "A list of namespaces", body = ListNamespacesResponse),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The parent namespace or the warehouse does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn list_namespaces(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<PrefixPath>,
    Query(query): Query<ListNamespacesQuery>,
) -> Result<Json<ListNamespacesResponse>, ApiError> {
    // The spec treats an empty `parent` as absent, for older clients.
    let parent = query.parent.as_deref().filter(|parent| !parent.is_empty());
    let parent =
        parent.map(|parent| NamespaceIdent::parse_encoded(&state.catalog.namespace_param(parent))).transpose()?;
    let page_token = query.page_token.as_deref();
    let namespaces = state.catalog.namespaces();
    let listing = namespaces.list(&ctx, &path.warehouse(), parent.as_ref(), page_token, query.page_size).await?;
    Ok(Json(ListNamespacesResponse {
        next_page_token: listing.next_page_token.map(PageToken),
        namespaces: listing.items.into_iter().map(|ns| Namespace(ns.levels().to_vec())).collect(),
    }))
}

/// Create a namespace
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces",
    tag = "Catalog API",
    operation_id = "createNamespace",
    params(PrefixPath),
    request_body = CreateNamespaceRequest,
    responses(
        (status = 200, description = "Represents a successful call to create a namespace", body = CreateNamespaceResponse),
        (status = 400, description = "Bad request, such as an invalid name", body = IcebergErrorResponse),
        (status = 404, description = "The parent namespace or the warehouse does not exist", body = IcebergErrorResponse),
        (status = 409, description = "The namespace already exists", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn create_namespace(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<PrefixPath>,
    Json(request): Json<CreateNamespaceRequest>,
) -> Result<Json<CreateNamespaceResponse>, ApiError> {
    let namespace = NamespaceIdent::from_levels(request.namespace.0)?;
    let (namespace, properties) =
        state.catalog.namespaces().create(&ctx, &path.warehouse(), namespace, request.properties).await?;
    Ok(Json(CreateNamespaceResponse { namespace: Namespace(namespace.levels().to_vec()), properties }))
}

/// Load the metadata properties for a namespace
#[utoipa::path(
    get,
    path = "/v1/{prefix}/namespaces/{namespace}",
    tag = "Catalog API",
    operation_id = "loadNamespaceMetadata",
    params(NamespacePath),
    responses(
        (status = 200, description = "The namespace and its properties", body = GetNamespaceResponse),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "Namespace not found", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn load_namespace(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
) -> Result<Json<GetNamespaceResponse>, ApiError> {
    let (prefix, namespace) = path.parse()?;
    let properties = state.catalog.namespaces().load(&ctx, &prefix, &namespace).await?;
    Ok(Json(GetNamespaceResponse { namespace: Namespace(namespace.levels().to_vec()), properties }))
}

/// Check if a namespace exists
#[utoipa::path(
    head,
    path = "/v1/{prefix}/namespaces/{namespace}",
    tag = "Catalog API",
    operation_id = "namespaceExists",
    params(NamespacePath),
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "Namespace not found", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn namespace_exists(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
) -> Result<StatusCode, ApiError> {
    let (prefix, namespace) = path.parse()?;
    state.catalog.namespaces().exists(&ctx, &prefix, &namespace).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Drop a namespace from the catalog. Namespace must be empty.
#[utoipa::path(
    delete,
    path = "/v1/{prefix}/namespaces/{namespace}",
    tag = "Catalog API",
    operation_id = "dropNamespace",
    params(NamespacePath),
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "Namespace to delete does not exist", body = IcebergErrorResponse),
        (status = 409, description = "Namespace to delete is not empty", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn drop_namespace(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
) -> Result<StatusCode, ApiError> {
    let (prefix, namespace) = path.parse()?;
    state.catalog.namespaces().drop(&ctx, &prefix, &namespace).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Set or remove properties on a namespace
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/properties",
    tag = "Catalog API",
    operation_id = "updateProperties",
    params(NamespacePath),
    request_body = UpdateNamespacePropertiesRequest,
    responses(
        (status = 200, description = "What was updated, removed and missing", body = UpdateNamespacePropertiesResponse),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "Namespace not found", body = IcebergErrorResponse),
        (status = 422, description = "A property key was included in both removals and updates", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn update_properties(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
    Json(request): Json<UpdateNamespacePropertiesRequest>,
) -> Result<Json<UpdateNamespacePropertiesResponse>, ApiError> {
    let (prefix, namespace) = path.parse()?;
    let namespaces = state.catalog.namespaces();
    let change = namespaces.update_properties(&ctx, &prefix, &namespace, request.updates, request.removals).await?;
    Ok(Json(UpdateNamespacePropertiesResponse {
        updated: change.updated,
        removed: change.removed,
        missing: change.missing,
    }))
}
