//! Management API: dropped tables and views (`/management/v1/warehouses/{name}/deleted`,
//! `.../undrop`).

use axum::extract::{Path, State};
use icegate_catalog::NamespaceIdent;
use icegate_catalog::lifecycle::Undrop;
use icegate_catalog::store::{DeletedFilter, DeletedTabular};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Query};

/// A dropped table or view the catalog keeps.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct DeletedResponse {
    /// The entry's id (the table's id, kept by undrop).
    pub id: String,
    pub namespace: Vec<String>,
    pub name: String,
    /// `table` or `view`.
    pub kind: String,
    pub location: String,
    pub metadata_location: String,
    pub dropped_at_ms: i64,
    /// Who dropped it (a principal, or `system:<job>:<task>`).
    pub dropped_by: String,
    /// Until when undrop brings it back (with a purge: when the purge is due).
    pub restorable_until_ms: i64,
    /// Set when the drop asked for a purge: when it is due.
    pub purge_due_ms: Option<i64>,
    /// `deleted`, or `purging` once its purge has started.
    pub state: String,
    /// Whether undrop would bring it back now.
    pub restorable: bool,
    /// Why undrop would not bring it back now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_restorable: Option<String>,
}

impl DeletedResponse {
    fn new(entry: DeletedTabular, now_ms: i64) -> Self {
        let not_restorable = entry.not_restorable(now_ms);
        Self {
            id: entry.id.as_str().to_owned(),
            namespace: entry.namespace.levels().to_vec(),
            name: entry.name,
            kind: entry.kind.as_str().to_owned(),
            location: entry.location,
            metadata_location: entry.metadata_location,
            dropped_at_ms: entry.dropped_at_ms,
            dropped_by: entry.dropped_by,
            restorable_until_ms: entry.restorable_until_ms,
            purge_due_ms: entry.purge_due_ms,
            state: entry.state.as_str().to_owned(),
            restorable: not_restorable.is_none(),
            not_restorable,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ListDeletedResponse {
    pub deleted: Vec<DeletedResponse>,
    /// Present when more entries may follow: pass it as `pageToken`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListDeletedQuery {
    /// Where the page starts: the `next-page-token` of the previous page.
    #[serde(rename = "pageToken")]
    #[param(rename = "pageToken")]
    pub page_token: Option<String>,
    /// The most entries a page holds (1-1000, default 100).
    #[serde(rename = "pageSize")]
    #[param(rename = "pageSize")]
    pub page_size: Option<i64>,
}

/// List dropped tables and views
///
/// Newest first: every dropped table and view the warehouse still keeps (restorable, or waiting
/// for its purge). Admins of the warehouse.
#[utoipa::path(get, path = "/management/v1/warehouses/{name}/deleted", tag = "Lifecycle",
    operation_id = "listDeleted",
    params(("name" = String, Path, description = "Warehouse name"), ListDeletedQuery),
    responses(
        (status = 200, description = "A page of dropped tables and views", body = ListDeletedResponse),
        (status = 400, description = "A bad page token or size, or an unknown parameter", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn list_deleted(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Query(query): Query<ListDeletedQuery>,
) -> Result<Json<ListDeletedResponse>, ApiError> {
    let page_size = query.page_size.unwrap_or(100);
    if !(1..=1000).contains(&page_size) {
        return Err(ApiError::bad_request("pageSize must be 1-1000"));
    }
    let before = match query.page_token.filter(|t| !t.is_empty()) {
        None => None,
        Some(token) => {
            let parsed = token.split_once(':').and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_owned())));
            Some(parsed.ok_or_else(|| ApiError::bad_request("pageToken is not one this listing gave"))?)
        }
    };
    let filter = DeletedFilter { before, limit: Some(page_size), ..DeletedFilter::default() };
    let entries = state.catalog.lifecycle().list_deleted(&ctx, &name, filter).await?;
    let next_page_token = (entries.len() as i64 == page_size)
        .then(|| entries.last().map(|e| format!("{}:{}", e.dropped_at_ms, e.id.as_str())))
        .flatten();
    let now = state.catalog.clock().now_ms();
    Ok(Json(ListDeletedResponse {
        deleted: entries.into_iter().map(|e| DeletedResponse::new(e, now)).collect(),
        next_page_token,
    }))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct UndropRequest {
    /// The namespace it was dropped from.
    pub namespace: Vec<String>,
    /// The name it was dropped as.
    pub name: String,
    /// Which of several dropped entries of that name (`id` from the listing); absent: the
    /// newest restorable one.
    pub id: Option<String>,
    /// Restore it into this (existing) namespace instead.
    pub new_namespace: Option<Vec<String>>,
    /// Restore it under this name instead (when the name has been taken meanwhile).
    pub new_name: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct UndropResponse {
    pub id: String,
    /// `table` or `view`.
    pub kind: String,
    /// Where it is now.
    pub namespace: Vec<String>,
    pub name: String,
    pub metadata_location: String,
}

/// Undrop a table or view
///
/// Brings a dropped table or view back, with its id, locations, metadata and the grants on it
/// (those whose role still exists and that have not expired), under its old name or a new one.
/// Admins of the warehouse. Refused (409) once its hold has ended, its purge has started, its
/// metadata was registered again, or when the name is taken.
#[utoipa::path(post, path = "/management/v1/warehouses/{name}/undrop", tag = "Lifecycle",
    operation_id = "undrop",
    params(("name" = String, Path, description = "Warehouse name")),
    request_body = UndropRequest,
    responses(
        (status = 200, description = "Restored", body = UndropResponse),
        (status = 400, description = "A malformed request, or its locations overlap another table's by now", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse, dropped table or view, or target namespace", body = IcebergErrorResponse),
        (status = 409, description = "The name is taken, or it can no longer be undropped (says why)", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn undrop(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Json(request): Json<UndropRequest>,
) -> Result<Json<UndropResponse>, ApiError> {
    let request = Undrop {
        id: request.id,
        namespace: NamespaceIdent::from_levels(request.namespace)?,
        name: request.name,
        new_namespace: request.new_namespace.map(NamespaceIdent::from_levels).transpose()?,
        new_name: request.new_name,
    };
    let target_namespace = request.new_namespace.clone().unwrap_or_else(|| request.namespace.clone());
    let target_name = request.new_name.clone().unwrap_or_else(|| request.name.clone());
    let (entry, restored) = state.catalog.lifecycle().undrop(&ctx, &name, request).await?;
    Ok(Json(UndropResponse {
        id: restored.id.as_str().to_owned(),
        kind: entry.kind.as_str().to_owned(),
        namespace: target_namespace.levels().to_vec(),
        name: target_name,
        metadata_location: restored.metadata_location,
    }))
}
