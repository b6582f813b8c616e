//! Management API: adopting Parquet datasets in place (`/management/v1/warehouses/{name}/...`):
//! read-only source locations, adoptions and their runs. Admins of the warehouse (a `file://`
//! source outside its storage root: admins of the server).

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use icegate_catalog::NamespaceIdent;
use icegate_catalog::adoption::store::{AdoptionMode, SourceLocation};
use icegate_catalog::adoption::{AdoptRequest, AdoptionView, Outcome, Partitioning};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Query};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SourceLocationRequest {
    /// `s3://bucket/prefix` (the warehouse's bucket) or `file:///absolute/path`.
    pub location: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct SourceLocationResponse {
    pub location: String,
    pub created_at_ms: i64,
    /// The principal that registered it (empty: authentication off).
    pub created_by: String,
}

impl From<SourceLocation> for SourceLocationResponse {
    fn from(s: SourceLocation) -> Self {
        Self { location: s.location, created_at_ms: s.created_at_ms, created_by: s.created_by }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct SourceLocationsResponse {
    pub source_locations: Vec<SourceLocationResponse>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SourceLocationQuery {
    /// The source location to remove.
    pub location: String,
}

/// Register a source location
///
/// A prefix adoption may read Parquet files from, read-only. It must not equal, lie inside or
/// contain any table's or view's location, nor the storage of another warehouse; afterwards no
/// table or view may be placed over it. S3: inside the warehouse's bucket. Admins of the
/// warehouse; a `file://` location outside the warehouse's storage root needs admin on the server.
#[utoipa::path(post, path = "/management/v1/warehouses/{name}/source-locations", tag = "Adoption",
    operation_id = "addSourceLocation",
    params(("name" = String, Path, description = "Warehouse name")),
    request_body = SourceLocationRequest,
    responses(
        (status = 201, description = "Registered", body = SourceLocationResponse),
        (status = 400, description = "Not a valid location, another scheme or bucket, or it overlaps a table", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse (or the server, for file://), or over another warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 409, description = "Registered already", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn add_source_location(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Json(request): Json<SourceLocationRequest>,
) -> Result<(StatusCode, Json<SourceLocationResponse>), ApiError> {
    let added = state.catalog.adoptions().add_source(&ctx, &name, &request.location).await?;
    Ok((StatusCode::CREATED, Json(added.into())))
}

/// List source locations
#[utoipa::path(get, path = "/management/v1/warehouses/{name}/source-locations", tag = "Adoption",
    operation_id = "listSourceLocations",
    params(("name" = String, Path, description = "Warehouse name")),
    responses(
        (status = 200, description = "The warehouse's source locations", body = SourceLocationsResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn list_source_locations(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
) -> Result<Json<SourceLocationsResponse>, ApiError> {
    let found = state.catalog.adoptions().sources(&ctx, &name).await?;
    Ok(Json(SourceLocationsResponse { source_locations: found.into_iter().map(Into::into).collect() }))
}

/// Remove a source location
///
/// Refused (409) while an adoption reads from inside it and its table exists (or is dropped but
/// still restorable): its table references those files.
#[utoipa::path(delete, path = "/management/v1/warehouses/{name}/source-locations", tag = "Adoption",
    operation_id = "removeSourceLocation",
    params(("name" = String, Path, description = "Warehouse name"), SourceLocationQuery),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "No location given, or not a valid one", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse or source location", body = IcebergErrorResponse),
        (status = 409, description = "An adoption reads from it", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn remove_source_location(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Query(query): Query<SourceLocationQuery>,
) -> Result<StatusCode, ApiError> {
    state.catalog.adoptions().remove_source(&ctx, &name, &query.location).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// An adoption as asked for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AdoptionRequest {
    /// The dataset's prefix: inside a registered source location, or inside the warehouse's
    /// storage root (then registered as a source location itself).
    pub source: String,
    pub namespace: Vec<String>,
    /// The new table's name.
    pub name: String,
    /// The table's own location, for what icegate and engines write (default: its namespace's
    /// directory). Never inside the source.
    pub location: Option<String>,
    /// `{"type": "hive"}` (`key=value` directories), `{"type": "none"}` (the default), or
    /// `{"type": "spec", "fields": [{"source": "ts", "transform": "day"}]}` (values from each
    /// file's column bounds).
    #[schema(value_type = Object)]
    pub partitioning: Option<Partitioning>,
    /// `snapshot` (one run; re-sync when asked) or `continuous` (re-synced on a schedule).
    pub mode: Option<String>,
    /// Answer the report, create nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The table's properties.
    #[serde(default)]
    pub properties: HashMap<String, String>,
    /// Continuous: how often to re-sync (e.g. `15m`; default `adoption.sync_interval`).
    pub sync_interval: Option<String>,
    /// Files gone from the source are removed from the table at a re-sync (default: only
    /// reported).
    #[serde(default)]
    pub remove_missing: bool,
}

/// An adoption, with its latest runs' reports.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct AdoptionResponse {
    pub id: String,
    pub source: String,
    pub namespace: Vec<String>,
    pub name: String,
    pub table_id: String,
    pub mode: String,
    #[schema(value_type = Object)]
    pub settings: Value,
    pub created_at_ms: i64,
    pub created_by: String,
    /// Newest first.
    #[schema(value_type = Vec<Object>)]
    pub runs: Vec<Value>,
}

fn view(v: AdoptionView) -> AdoptionResponse {
    let a = v.adoption;
    AdoptionResponse {
        id: a.id,
        source: a.source,
        namespace: a.namespace.levels().to_vec(),
        name: a.name,
        table_id: a.tabular_id,
        mode: a.mode.as_str().to_owned(),
        settings: a.settings["settings"].clone(),
        created_at_ms: a.created_at_ms,
        created_by: a.created_by,
        runs: v
            .runs
            .into_iter()
            .map(|r| {
                json!({
                    "id": r.id, "started-at-ms": r.started_at_ms, "finished-at-ms": r.finished_at_ms,
                    "snapshot-id": r.snapshot_id, "report": r.report,
                })
            })
            .collect(),
    }
}

/// Adopt a Parquet dataset in place
///
/// Lists the source, reads only the Parquet footers of its files, and creates the table with
/// one append snapshot referencing them where they are (nothing is copied or rewritten). The
/// answer is the run's report: the adoption's `id`, `files-added`, `rows-added`,
/// `bytes-added`, `files-skipped` (each with its reason), the schema decisions and rows per
/// partition. A dry run answers the same report and creates nothing. A source with more files
/// than `adoption.inline_files` is adopted by a task: `202` with the adoption's and the task's
/// ids (`GET /management/v1/tasks/{id}` has the report once done). Admins of the warehouse.
#[utoipa::path(post, path = "/management/v1/warehouses/{name}/adoptions", tag = "Adoption",
    operation_id = "adoptDataset",
    params(("name" = String, Path, description = "Warehouse name")),
    request_body = AdoptionRequest,
    responses(
        (status = 200, description = "The run's report (or the dry run's)", body = Object),
        (status = 202, description = "Queued: the adoption's id and its task's", body = Object),
        (status = 400, description = "A malformed request, a dataset that cannot be adopted, or a table location over the source", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse, or a source in no source location", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse or namespace", body = IcebergErrorResponse),
        (status = 409, description = "The table exists", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store or object storage unavailable", body = IcebergErrorResponse),
    ))]
pub async fn adopt(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Json(request): Json<AdoptionRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let mode = AdoptionMode::parse(request.mode.as_deref().unwrap_or("snapshot"))?;
    let sync_interval = request
        .sync_interval
        .as_deref()
        .map(|text| {
            humantime_serde::re::humantime::parse_duration(text)
                .map_err(|e| ApiError::bad_request(format!("sync-interval {text:?}: {e}")))
        })
        .transpose()?;
    let adopt = AdoptRequest {
        source: request.source,
        namespace: NamespaceIdent::from_levels(request.namespace)?,
        name: request.name,
        location: request.location,
        partitioning: request.partitioning.unwrap_or(Partitioning::None),
        mode,
        dry_run: request.dry_run,
        properties: request.properties,
        sync_interval,
        remove_missing: request.remove_missing,
    };
    match state.catalog.adoptions().adopt(&ctx, &name, adopt).await? {
        Outcome::Done(report) => Ok((StatusCode::OK, Json(report))),
        Outcome::Queued { adoption_id, task_id } => {
            Ok((StatusCode::ACCEPTED, Json(json!({ "id": adoption_id, "task-id": task_id }))))
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AdoptionsQuery {
    #[serde(rename = "pageToken")]
    #[param(rename = "pageToken")]
    pub page_token: Option<String>,
    /// Adoptions per page (1-1000, default 100).
    #[serde(rename = "pageSize")]
    #[param(rename = "pageSize")]
    pub page_size: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct AdoptionsResponse {
    pub adoptions: Vec<AdoptionResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

/// List adoptions
#[utoipa::path(get, path = "/management/v1/warehouses/{name}/adoptions", tag = "Adoption",
    operation_id = "listAdoptions",
    params(("name" = String, Path, description = "Warehouse name"), AdoptionsQuery),
    responses(
        (status = 200, description = "A page of the warehouse's adoptions (without their runs)", body = AdoptionsResponse),
        (status = 400, description = "A bad page size", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn list_adoptions(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Query(query): Query<AdoptionsQuery>,
) -> Result<Json<AdoptionsResponse>, ApiError> {
    let page_size = query.page_size.unwrap_or(100);
    if !(1..=1000).contains(&page_size) {
        return Err(ApiError::bad_request("pageSize must be 1-1000"));
    }
    let after = query.page_token.filter(|t| !t.is_empty());
    let found = state.catalog.adoptions().list(&ctx, &name, after.as_deref(), page_size).await?;
    let next_page_token = (found.len() as i64 == page_size).then(|| found.last().map(|a| a.id.clone())).flatten();
    let adoptions = found.into_iter().map(|adoption| view(AdoptionView { adoption, runs: Vec::new() })).collect();
    Ok(Json(AdoptionsResponse { adoptions, next_page_token }))
}

/// Show an adoption
///
/// Its source, table, mode and settings, and its ten latest runs' reports.
#[utoipa::path(get, path = "/management/v1/warehouses/{name}/adoptions/{id}", tag = "Adoption",
    operation_id = "getAdoption",
    params(("name" = String, Path, description = "Warehouse name"), ("id" = String, Path, description = "Adoption id")),
    responses(
        (status = 200, description = "The adoption", body = AdoptionResponse),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse or adoption", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn get_adoption(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<AdoptionResponse>, ApiError> {
    Ok(Json(view(state.catalog.adoptions().get(&ctx, &name, &id).await?)))
}

/// Re-sync an adoption now
///
/// Adds the files that appeared in the source since (one append snapshot), reports files gone
/// from it, and refuses files changed in place (named in the report). Running it twice adds
/// nothing. Answers the run's report. Admins of the warehouse.
#[utoipa::path(post, path = "/management/v1/warehouses/{name}/adoptions/{id}/sync", tag = "Adoption",
    operation_id = "syncAdoption",
    params(("name" = String, Path, description = "Warehouse name"), ("id" = String, Path, description = "Adoption id")),
    responses(
        (status = 200, description = "The run's report", body = Object),
        (status = 403, description = "Without admin on the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse or adoption", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store or object storage unavailable", body = IcebergErrorResponse),
    ))]
pub async fn sync_adoption(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.catalog.adoptions().sync(&ctx, &name, &id).await?))
}
