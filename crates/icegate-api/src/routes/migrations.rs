//! Management API: catalog-to-catalog migrations (`/management/v1/migrations`): plan (or dry
//! run), progress per table, rollback and retirement. Admins of the target warehouse; a source
//! the server reaches on its own behalf (a SQL catalog; a REST catalog or Glue endpoint outside
//! `storage.allowed_endpoints`) needs admin on the server.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use icegate_catalog::migration::spec::SourceRequest;
use icegate_catalog::migration::store::{Migration, MigrationTable};
use icegate_catalog::migration::{MigrationRequest as Request, MigrationView, Selection};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Query};

/// A migration as asked for.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MigrationRequest {
    /// `{"type": "sql", "uri": "sqlite:////path.db" | "postgresql://user:password@host/db",
    /// "catalog-name": "..."}`, `{"type": "rest", "uri", "warehouse"?, "credential"? (id:secret) |
    /// "token"?, "scope"?}` or `{"type": "glue", "region", "endpoint"?, "catalog-id"?}`.
    /// Secrets are sealed with the server's key and never shown again.
    #[schema(value_type = Object)]
    pub source: SourceRequest,
    /// The warehouse the tables move into; their locations must lie inside its storage root.
    pub target_warehouse: String,
    /// Only these namespaces (and those below them), each as its levels.
    pub namespaces: Option<Vec<Vec<String>>>,
    /// Only these tables, each as its namespace's levels followed by its name.
    pub tables: Option<Vec<Vec<String>>>,
    /// Only tables whose `namespace.table` name this regular expression matches.
    pub include: Option<String>,
    /// Source namespace to target namespace (levels joined with `.`); the longest mapped prefix
    /// of a namespace wins.
    #[serde(default)]
    pub namespace_mapping: BTreeMap<String, String>,
    /// Plan only: the run ends `completed` with the plan, and nothing is fenced or registered.
    #[serde(default)]
    pub dry_run: bool,
}

/// One table of a run.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct MigrationTableResponse {
    pub id: String,
    pub kind: String,
    pub source_namespace: Vec<String>,
    pub source_name: String,
    pub target_namespace: Vec<String>,
    pub target_name: String,
    /// `planned`, `fenced`, `registered`, `verified`, `retired`, `rolled-back`, `failed` or
    /// `skipped`.
    pub state: String,
    /// The source's metadata location when the run was planned.
    pub planned_location: Option<String>,
    /// The metadata location that moved (the source's newest when it was fenced).
    pub moved_location: Option<String>,
    /// What a rollback gave back to the source (newer than `moved-location` when the table took
    /// commits at icegate).
    pub handed_back: Option<String>,
    pub table_id: Option<String>,
    /// The verification (each check with `ok` and its detail).
    #[schema(value_type = Option<Object>)]
    pub report: Option<Value>,
    pub error: Option<String>,
    pub updated_at_ms: i64,
}

impl From<MigrationTable> for MigrationTableResponse {
    fn from(t: MigrationTable) -> Self {
        Self {
            id: t.id,
            kind: t.kind,
            source_namespace: t.source_namespace,
            source_name: t.source_name,
            target_namespace: t.target_namespace,
            target_name: t.target_name,
            state: t.state.as_str().to_owned(),
            planned_location: t.planned_location,
            moved_location: t.fenced_location,
            handed_back: t.handed_back,
            table_id: t.tabular_id,
            report: t.report.filter(|r| r.get("checks").is_some()),
            error: t.error,
            updated_at_ms: t.updated_at_ms,
        }
    }
}

/// A migration run.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct MigrationResponse {
    pub id: String,
    /// `planned`, `running`, `completed`, `failed` or `rolled-back`.
    pub state: String,
    pub target_warehouse: String,
    /// The source without its secrets.
    #[schema(value_type = Object)]
    pub source: Value,
    #[schema(value_type = Object)]
    pub selection: Value,
    pub dry_run: bool,
    /// The plan (each table's target, metadata location and conflict) and, once the run ended,
    /// its result.
    #[schema(value_type = Object)]
    pub report: Value,
    /// The task moving the tables (`GET /management/v1/tasks/{id}` shows its progress).
    pub task_id: Option<String>,
    pub created_at_ms: i64,
    pub created_by: String,
    pub updated_at_ms: i64,
    /// Empty in lists and for dry runs.
    pub tables: Vec<MigrationTableResponse>,
}

fn response(migration: Migration, warehouse: String, source: Value, tables: Vec<MigrationTable>) -> MigrationResponse {
    MigrationResponse {
        task_id: migration.report.get("task-id").and_then(Value::as_str).map(str::to_owned),
        id: migration.id,
        state: migration.state.as_str().to_owned(),
        target_warehouse: warehouse,
        source,
        selection: migration.selection,
        dry_run: migration.dry_run,
        report: migration.report,
        created_at_ms: migration.created_at_ms,
        created_by: migration.created_by,
        updated_at_ms: migration.updated_at_ms,
        tables: tables.into_iter().map(Into::into).collect(),
    }
}

fn view(v: MigrationView) -> MigrationResponse {
    let source = v.migration.redacted_source();
    let mut answer = response(v.migration, v.warehouse, source, v.tables);
    answer.task_id = answer.task_id.or(v.task_id);
    answer
}

/// Plan or start a migration
///
/// Lists the source and plans every selected table: its target name, and what keeps it from
/// moving (a name taken at the target, a metadata file or table location outside the target
/// warehouse's storage root). A dry run answers `201` with the run `completed` and its plan, and
/// registers nothing. Otherwise the run is `planned` and a task moves its tables (`202`): each
/// is fenced at the source (its writers can no longer commit there), registered at icegate at
/// the newest metadata the source acknowledged, and verified.
#[utoipa::path(post, path = "/management/v1/migrations", tag = "Migration",
    operation_id = "createMigration",
    request_body = MigrationRequest,
    responses(
        (status = 201, description = "A dry run, completed with its plan (or a run with nothing to move)", body = MigrationResponse),
        (status = 202, description = "Planned; its task moves the tables", body = MigrationResponse),
        (status = 400, description = "A malformed request or source, or a source that is no catalog", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse, or on the server for this source", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 409, description = "A selected table is in another live migration", body = IcebergErrorResponse),
        (status = 503, description = "The metadata store, the source or storage unavailable", body = IcebergErrorResponse),
    ))]
pub async fn create_migration(
    State(state): State<AppState>,
    Context(ctx): Context,
    Json(request): Json<MigrationRequest>,
) -> Result<(StatusCode, Json<MigrationResponse>), ApiError> {
    let request = Request {
        source: request.source,
        target_warehouse: request.target_warehouse,
        selection: Selection {
            namespaces: request.namespaces,
            tables: request.tables,
            include: request.include,
            namespace_mapping: request.namespace_mapping,
        },
        dry_run: request.dry_run,
    };
    let created = state.catalog.migrations().create(&ctx, request).await?;
    let status = if created.task_id.is_some() { StatusCode::ACCEPTED } else { StatusCode::CREATED };
    Ok((status, Json(view(created))))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MigrationsQuery {
    /// Only this warehouse's runs (its admins); without it, every run (server admins).
    pub warehouse: Option<String>,
    #[serde(rename = "pageToken")]
    #[param(rename = "pageToken")]
    pub page_token: Option<String>,
    /// Runs per page (1-1000, default 100).
    #[serde(rename = "pageSize")]
    #[param(rename = "pageSize")]
    pub page_size: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct MigrationsResponse {
    pub migrations: Vec<MigrationResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

/// List migrations
#[utoipa::path(get, path = "/management/v1/migrations", tag = "Migration",
    operation_id = "listMigrations",
    params(MigrationsQuery),
    responses(
        (status = 200, description = "A page of runs, oldest first (without their tables)", body = MigrationsResponse),
        (status = 400, description = "A bad page size", body = IcebergErrorResponse),
        (status = 403, description = "Without admin on the warehouse (or, naming none, on the server)", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn list_migrations(
    State(state): State<AppState>,
    Context(ctx): Context,
    Query(query): Query<MigrationsQuery>,
) -> Result<Json<MigrationsResponse>, ApiError> {
    let page_size = query.page_size.unwrap_or(100);
    if !(1..=1000).contains(&page_size) {
        return Err(ApiError::bad_request("pageSize must be 1-1000"));
    }
    let after = query.page_token.filter(|t| !t.is_empty());
    let found = state.catalog.migrations().list(&ctx, query.warehouse.as_deref(), after.as_deref(), page_size).await?;
    let next_page_token = (found.len() as i64 == page_size).then(|| found.last().map(|(m, _)| m.id.clone())).flatten();
    let migrations = found
        .into_iter()
        .map(|(migration, warehouse)| {
            let source = migration.redacted_source();
            response(migration, warehouse, source, Vec::new())
        })
        .collect();
    Ok(Json(MigrationsResponse { migrations, next_page_token }))
}

/// Show a migration
///
/// The run's state and report, and each table's state, the metadata location that moved, its
/// verification and error.
#[utoipa::path(get, path = "/management/v1/migrations/{id}", tag = "Migration",
    operation_id = "getMigration",
    params(("id" = String, Path, description = "Migration id")),
    responses(
        (status = 200, description = "The run", body = MigrationResponse),
        (status = 404, description = "No such migration (or not the caller's to see)", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    ))]
pub async fn get_migration(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
) -> Result<Json<MigrationResponse>, ApiError> {
    Ok(Json(view(state.catalog.migrations().get(&ctx, &id).await?)))
}

#[derive(Debug, Serialize, Default, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RollbackRequest {
    /// Only these tables (their target namespace's levels followed by the name); default all.
    pub tables: Option<Vec<Vec<String>>>,
}

/// Roll a migration back
///
/// Each table goes back to the source: icegate's entry is removed and the source's pointer is
/// restored from the fence, to the newest metadata (a table that took commits at icegate hands
/// those back). No data or metadata file is touched. Not while the run is moving tables; a
/// retired table cannot come back (409 names it).
#[utoipa::path(post, path = "/management/v1/migrations/{id}/rollback", tag = "Migration",
    operation_id = "rollbackMigration",
    params(("id" = String, Path, description = "Migration id")),
    request_body = RollbackRequest,
    responses(
        (status = 200, description = "The run afterwards", body = MigrationResponse),
        (status = 400, description = "A table that is not the run's", body = IcebergErrorResponse),
        (status = 404, description = "No such migration", body = IcebergErrorResponse),
        (status = 409, description = "Running, a dry run, or a table that cannot go back (each named with why)", body = IcebergErrorResponse),
        (status = 503, description = "The metadata store or the source unavailable", body = IcebergErrorResponse),
    ))]
pub async fn rollback_migration(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<MigrationResponse>, ApiError> {
    let request: RollbackRequest = crate::extract::optional_body(&body)?;
    Ok(Json(view(state.catalog.migrations().rollback(&ctx, &id, request.tables.as_deref()).await?)))
}

/// Retire a migration's tables at the source
///
/// Removes the fenced entries of the run's verified tables from the source catalog for good
/// (their files stay: icegate owns the tables now). Do this once every client uses icegate;
/// a retired table can no longer be rolled back.
#[utoipa::path(post, path = "/management/v1/migrations/{id}/retire", tag = "Migration",
    operation_id = "retireMigration",
    params(("id" = String, Path, description = "Migration id")),
    responses(
        (status = 200, description = "The run afterwards", body = MigrationResponse),
        (status = 404, description = "No such migration", body = IcebergErrorResponse),
        (status = 409, description = "The run is moving tables", body = IcebergErrorResponse),
        (status = 503, description = "The metadata store or the source unavailable", body = IcebergErrorResponse),
    ))]
pub async fn retire_migration(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
) -> Result<Json<MigrationResponse>, ApiError> {
    Ok(Json(view(state.catalog.migrations().retire(&ctx, &id).await?)))
}
