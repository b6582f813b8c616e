//! Table operations of the Iceberg REST catalog.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use icegate_catalog::storage::{Delegation, SignRequest, TableStorageAccess};
use icegate_catalog::tables::{
    CreateTable, Loaded, SnapshotMode, StorageRequest, TableChange, TableIdent, TableResult,
};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Path, Query};
use crate::models::tables::{
    CommitTableFields, CommitTableRequest, CommitTableResponse, CommitTransactionRequest, CreateTableRequest,
    DropTableQuery, ListTablesQuery, ListTablesResponse, LoadCredentialsResponse, LoadTableFields, LoadTableQuery,
    LoadTableResult, RegisterTableRequest, RemoteSignRequest, RemoteSignResult, RemoteSigningConfig,
    RenameTableRequest, ReportMetricsRequest, StorageCredential, TableIdentifier, UnregisterTableResult, WithMetadata,
};
use crate::models::{Namespace, NamespacePath, PageToken, PrefixPath, TablePath};
use icegate_catalog::schema_cost::Pending;
use icegate_catalog::{RequestContext, WarehouseId};

/// `X-Iceberg-Access-Delegation`: a list of values, in one header or repeated (spec after 1.11).
fn delegation(headers: &HeaderMap) -> Delegation {
    let values: Vec<&str> =
        headers.get_all("x-iceberg-access-delegation").iter().filter_map(|v| v.to_str().ok()).collect();
    if values.is_empty() { Delegation::parse(None) } else { Delegation::parse(Some(&values.join(","))) }
}

/// What the request's headers say about storage access: the delegation asked for and the Host.
fn storage_request<'a>(
    (prefix, table): (&'a WarehouseId, &'a TableIdent),
    headers: &'a HeaderMap,
) -> StorageRequest<'a> {
    StorageRequest {
        prefix,
        table,
        delegation: delegation(headers),
        host: headers.get(header::HOST).and_then(|h| h.to_str().ok()),
    }
}

fn credentials_list(credentials: Vec<(String, BTreeMap<String, String>)>) -> Vec<StorageCredential> {
    credentials.into_iter().map(|(prefix, config)| StorageCredential { prefix, config }).collect()
}

/// Documents smaller than this go out uncompressed: a few kilobytes gain little.
const GZIP_FROM_BYTES: usize = 8 * 1024;

/// Whether the client takes a gzip body (`Accept-Encoding: gzip`, unless with `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.replace(' ', "").strip_prefix("q=").is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        },
    )
}

fn load_result(
    state: &AppState,
    result: TableResult,
    storage: TableStorageAccess,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    // The compressed document is made once per metadata file (and form: `snapshots=refs` is
    // another document), never per request.
    // An answer kept for an idempotent retry is kept as text (as a commit's is).
    let gzip = match &result.metadata_location {
        Some(location)
            if result.metadata_json.len() >= GZIP_FROM_BYTES
                && accepts_gzip(headers)
                && !headers.contains_key(crate::idempotency::HEADER) =>
        {
            match &result.gzip {
                // Made by the commit that wrote the document (and stored so).
                Some(gzip) => Some(gzip.clone()),
                None => {
                    // Keyed by the entity tag: one per metadata file and representation.
                    let key = format!("{location}|{}", result.etag);
                    let document = result.metadata_json.clone();
                    let cache = state.catalog.metadata_cache();
                    Some(cache.gzip(&key, || crate::models::tables::gzip_member(document.as_bytes())))
                }
            }
        }
        _ => None,
    };
    let etag = HeaderValue::from_str(&result.etag).ok();
    let TableStorageAccess { config, credentials, remote_signing } = storage;
    let fields = LoadTableFields {
        metadata_location: result.metadata_location,
        config,
        storage_credentials: credentials_list(credentials),
        remote_signing_config: remote_signing
            .map(|r| RemoteSigningConfig { properties: r.properties, headers: r.headers }),
    };
    let mut response = WithMetadata { metadata: result.metadata_json, fields, gzip }.into_response();
    if let Some(etag) = etag {
        response.headers_mut().insert(header::ETAG, etag);
    }
    Ok(response)
}

/// A table response carrying the storage configuration (and credentials) at the level the
/// service decided.
async fn table_response(
    state: &AppState,
    ctx: &icegate_catalog::RequestContext,
    result: TableResult,
    table: (&WarehouseId, &TableIdent),
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let storage = state.catalog.tables().storage_access(ctx, &result, &storage_request(table, headers)).await?;
    load_result(state, result, storage, headers)
}

/// A commit's updates as they came: each is built once the commit is authorized on its table.
pub(crate) fn pending_updates<T: serde::de::DeserializeOwned>(
    updates: Vec<Box<serde_json::value::RawValue>>,
) -> Vec<Pending<T>> {
    updates.into_iter().map(|update| Pending::new(update, "update")).collect()
}

fn identifier(table: TableIdent) -> TableIdentifier {
    TableIdentifier { namespace: Namespace(table.namespace.levels().to_vec()), name: table.name }
}

/// List all table identifiers underneath a given namespace
#[utoipa::path(
    get,
    path = "/v1/{prefix}/namespaces/{namespace}/tables",
    tag = "Catalog API",
    operation_id = "listTables",
    params(NamespacePath, ListTablesQuery),
    responses(
        (status = 200, description = "A list of table identifiers", body = ListTablesResponse),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The namespace does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn list_tables(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
    Query(query): Query<ListTablesQuery>,
) -> Result<Json<ListTablesResponse>, ApiError> {
    let (prefix, namespace) = path.parse()?;
    let page = (query.page_token.as_deref(), query.page_size);
    let listing = state.catalog.tables().list(&ctx, &prefix, &namespace, page).await?;
    Ok(Json(ListTablesResponse {
        next_page_token: listing.next_page_token.map(PageToken),
        identifiers: listing.items.into_iter().map(identifier).collect(),
    }))
}

/// Create a table in the given namespace
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/tables",
    tag = "Catalog API",
    operation_id = "createTable",
    params(NamespacePath),
    request_body = CreateTableRequest,
    responses(
        (status = 200, description = "Table metadata result after creating a table", body = LoadTableResult),
        (status = 400, description = "Bad request, such as an invalid name, schema or location", body = IcebergErrorResponse),
        (status = 404, description = "The namespace does not exist", body = IcebergErrorResponse),
        (status = 409, description = "A table or view with that name exists", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn create_table(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
    headers: HeaderMap,
    Json(request): Json<CreateTableRequest>,
) -> Result<Response, ApiError> {
    let (prefix, namespace) = path.parse()?;
    let name = request.name.clone();
    let request = CreateTable {
        name: request.name,
        location: request.location,
        schema: Pending::new(request.schema, "schema"),
        partition_spec: request.partition_spec,
        write_order: request.write_order,
        properties: request.properties.unwrap_or_default(),
        stage_create: request.stage_create.unwrap_or(false),
    };
    let result = state.catalog.tables().create(&ctx, &prefix, &namespace, request).await?;
    let table = TableIdent::new(namespace, &name)?;
    table_response(&state, &ctx, result, (&prefix, &table), &headers).await
}

/// Load a table from the catalog
#[utoipa::path(
    get,
    path = "/v1/{prefix}/namespaces/{namespace}/tables/{table}",
    tag = "Catalog API",
    operation_id = "loadTable",
    params(TablePath, LoadTableQuery),
    responses(
        (status = 200, description = "Table metadata result when loading a table", body = LoadTableResult),
        (status = 304, description = "Not modified: the If-None-Match ETag is current"),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The table does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn load_table(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<TablePath>,
    Query(query): Query<LoadTableQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (prefix, table) = path.parse()?;
    let mode = match query.snapshots.as_deref() {
        None | Some("all") => SnapshotMode::All,
        Some("refs") => SnapshotMode::Refs,
        Some(other) => return Err(ApiError::bad_request(format!("snapshots must be `all` or `refs`, not {other:?}"))),
    };
    let if_none_match: Vec<&str> =
        headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).collect();
    let result = match state.catalog.tables().load_unless_current(&ctx, &prefix, &table, mode, &if_none_match).await? {
        Loaded::Table(result) => result,
        Loaded::NotModified { etag } => {
            let mut response = StatusCode::NOT_MODIFIED.into_response();
            if let Ok(etag) = HeaderValue::from_str(&etag) {
                response.headers_mut().insert(header::ETAG, etag);
            }
            return Ok(response);
        }
    };
    table_response(&state, &ctx, result, (&prefix, &table), &headers).await
}

/// Check if a table exists
#[utoipa::path(
    head,
    path = "/v1/{prefix}/namespaces/{namespace}/tables/{table}",
    tag = "Catalog API",
    operation_id = "tableExists",
    params(TablePath),
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The table does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn table_exists(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<TablePath>,
) -> Result<StatusCode, ApiError> {
    let (prefix, table) = path.parse()?;
    state.catalog.tables().exists(&ctx, &prefix, &table).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Commit updates to a table
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/tables/{table}",
    tag = "Catalog API",
    operation_id = "updateTable",
    params(TablePath),
    request_body = CommitTableRequest,
    responses(
        (status = 200, description = "The new metadata", body = CommitTableResponse),
        (status = 400, description = "Bad request: an unknown or invalid update or requirement", body = IcebergErrorResponse),
        (status = 404, description = "The table does not exist", body = IcebergErrorResponse),
        (status = 409, description = "A requirement failed: refresh and retry", body = IcebergErrorResponse),
        (status = 500, description = "The commit state is unknown", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn update_table(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<TablePath>,
    headers: HeaderMap,
    Json(request): Json<CommitTableRequest>,
) -> Result<WithMetadata<CommitTableFields>, ApiError> {
    let (prefix, table) = path.parse()?;
    let change = TableChange {
        table,
        requirements: request.requirements,
        updates: pending_updates(request.updates),
        base: None,
    };
    let result = state.catalog.tables().commit(&ctx, &prefix, change).await?;
    // The commit compressed its document already (in parts, only those that changed); an
    // answer kept for an idempotent retry is kept as text.
    let gzip = result.gzip.filter(|_| {
        result.metadata_json.len() >= GZIP_FROM_BYTES
            && accepts_gzip(&headers)
            && !headers.contains_key(crate::idempotency::HEADER)
    });
    let fields = CommitTableFields { metadata_location: result.metadata_location.unwrap_or_default() };
    Ok(WithMetadata { metadata: result.metadata_json, fields, gzip })
}

/// Drop a table from the catalog
#[utoipa::path(
    delete,
    path = "/v1/{prefix}/namespaces/{namespace}/tables/{table}",
    tag = "Catalog API",
    operation_id = "dropTable",
    params(TablePath, DropTableQuery),
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The table does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn drop_table(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<TablePath>,
    Query(query): Query<DropTableQuery>,
) -> Result<StatusCode, ApiError> {
    let (prefix, table) = path.parse()?;
    let purge = query.purge().map_err(ApiError::bad_request)?;
    state.catalog.tables().drop(&ctx, &prefix, &table, purge).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Unregister a table without removing its data or metadata files
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/tables/{table}/unregister",
    tag = "Catalog API",
    operation_id = "unregisterTable",
    params(TablePath),
    responses(
        (status = 200, description = "The table's last metadata location and metadata", body = UnregisterTableResult),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 403, description = "Not allowed", body = IcebergErrorResponse),
        (status = 404, description = "The table does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn unregister_table(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<TablePath>,
) -> Result<WithMetadata<CommitTableFields>, ApiError> {
    let (prefix, table) = path.parse()?;
    let unregistered = state.catalog.tables().unregister(&ctx, &prefix, &table).await?;
    let fields = CommitTableFields { metadata_location: unregistered.metadata_location };
    Ok(WithMetadata { metadata: unregistered.metadata, fields, gzip: None })
}

/// Register a table in the given namespace using given metadata file location
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/register",
    tag = "Catalog API",
    operation_id = "registerTable",
    params(NamespacePath),
    request_body = RegisterTableRequest,
    responses(
        (status = 200, description = "The registered table", body = LoadTableResult),
        (status = 400, description = "Bad request: unreadable metadata, or a location outside the warehouse", body = IcebergErrorResponse),
        (status = 404, description = "The namespace does not exist", body = IcebergErrorResponse),
        (status = 409, description = "A table or view with that name exists", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn register_table(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<NamespacePath>,
    headers: HeaderMap,
    Json(request): Json<RegisterTableRequest>,
) -> Result<Response, ApiError> {
    let (prefix, namespace) = path.parse()?;
    let table = TableIdent::new(namespace, &request.name)?;
    let result =
        state.catalog.tables().register(&ctx, &prefix, &table, &request.metadata_location, request.overwrite).await?;
    table_response(&state, &ctx, result, (&prefix, &table), &headers).await
}

/// Load vended credentials for a table from the catalog
#[utoipa::path(
    get,
    path = "/v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
    tag = "Catalog API",
    operation_id = "loadCredentials",
    params(TablePath),
    responses(
        (status = 200, description = "Fresh storage credentials for this table, scoped to it", body = LoadCredentialsResponse),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 403, description = "Not allowed", body = IcebergErrorResponse),
        (status = 404, description = "The table does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store or token service unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn load_credentials(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<TablePath>,
    headers: HeaderMap,
) -> Result<Json<LoadCredentialsResponse>, ApiError> {
    let (prefix, table) = path.parse()?;
    let request = storage_request((&prefix, &table), &headers);
    let credentials = state.catalog.tables().credentials(&ctx, &request).await?;
    Ok(Json(LoadCredentialsResponse { storage_credentials: credentials_list(credentials) }))
}

/// Remotely signs requests to object storage
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/tables/{table}/sign",
    tag = "Catalog API",
    operation_id = "signRequest",
    params(TablePath),
    request_body = RemoteSignRequest,
    responses(
        (status = 200, description = "The signed request's URI and headers", body = RemoteSignResult),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 403, description = "The request leaves the table, needs write access, or is not an allowed operation", body = IcebergErrorResponse),
        (status = 404, description = "The table does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn sign_request(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<TablePath>,
    Json(request): Json<RemoteSignRequest>,
) -> Result<Json<RemoteSignResult>, ApiError> {
    let (prefix, table) = path.parse()?;
    if request.provider.as_deref().is_some_and(|p| p != "s3") {
        return Err(ApiError::bad_request(format!("cannot sign for provider {:?}", request.provider)));
    }
    let sign = SignRequest {
        region: request.region,
        uri: request.uri,
        method: request.method,
        headers: request.headers,
        body: request.body,
    };
    let signed = state.catalog.tables().sign_request(&ctx, (&prefix, &table), sign).await?;
    Ok(Json(RemoteSignResult { uri: signed.uri, headers: signed.headers }))
}

/// Rename a table from its current name to a new name
#[utoipa::path(
    post,
    path = "/v1/{prefix}/tables/rename",
    tag = "Catalog API",
    operation_id = "renameTable",
    params(PrefixPath),
    request_body = RenameTableRequest,
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "The source table or the destination namespace does not exist", body = IcebergErrorResponse),
        (status = 409, description = "The destination name is taken", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn rename_table(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<PrefixPath>,
    Json(request): Json<RenameTableRequest>,
) -> Result<StatusCode, ApiError> {
    let (from, to) = (request.source.parse()?, request.destination.parse()?);
    state.catalog.tables().rename(&ctx, &path.warehouse(), from, to).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Send a metrics report to this endpoint to be processed by the backend
#[utoipa::path(
    post,
    path = "/v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    tag = "Catalog API",
    operation_id = "reportMetrics",
    params(TablePath),
    request_body = ReportMetricsRequest,
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request: not a scan or commit report", body = IcebergErrorResponse),
        (status = 404, description = "The table does not exist", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn report_metrics(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<TablePath>,
    Json(request): Json<ReportMetricsRequest>,
) -> Result<StatusCode, ApiError> {
    let (prefix, table) = path.parse()?;
    let report_type = match request.report_type.as_str() {
        "scan-report" => "scan-report",
        "commit-report" => "commit-report",
        other => {
            return Err(ApiError::bad_request(format!(
                "report-type must be scan-report or commit-report, not {other:?}"
            )));
        }
    };
    if !request.metrics.get().starts_with('{') {
        return Err(ApiError::bad_request("metrics must be an object"));
    }
    state.catalog.tables().report_metrics(&ctx, &prefix, &table).await?;
    state.metrics.record_report(report_type);
    tracing::debug!(table = %request.table_name, snapshot_id = request.snapshot_id, report_type, metrics_bytes = request.metrics.get().len(), "metrics report");
    Ok(StatusCode::NO_CONTENT)
}

/// Commit updates to multiple tables in an atomic operation
#[utoipa::path(
    post,
    path = "/v1/{prefix}/transactions/commit",
    tag = "Catalog API",
    operation_id = "commitTransaction",
    params(PrefixPath),
    request_body = CommitTransactionRequest,
    responses(
        (status = 204, description = "Success, no content"),
        (status = 400, description = "Bad request", body = IcebergErrorResponse),
        (status = 404, description = "A table does not exist", body = IcebergErrorResponse),
        (status = 409, description = "A requirement failed: nothing was applied", body = IcebergErrorResponse),
        (status = 500, description = "The commit state is unknown", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn commit_transaction(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(path): Path<PrefixPath>,
    Json(request): Json<CommitTransactionRequest>,
) -> Result<StatusCode, ApiError> {
    let mut changes = Vec::with_capacity(request.table_changes.len());
    for change in request.table_changes {
        let identifier = change
            .identifier
            .ok_or_else(|| ApiError::bad_request("every table change in a transaction needs an identifier"))?;
        changes.push(TableChange {
            table: identifier.parse()?,
            requirements: change.requirements,
            updates: pending_updates(change.updates),
            base: None,
        });
    }
    state.catalog.tables().commit_transaction(&ctx, &path.warehouse(), changes).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A replayed createTable or registerTable answer (an `Idempotency-Key` retry) with storage
/// access vended again as the caller may have it now (see `Tables::replayed`); `None`
/// to replay the stored answer as it is (it holds no credentials).
///
/// Neither the request nor the stored answer is parsed into values: only the members read here
/// are, the rest (a schema, a metadata document) stays text, so a replay costs what its text
/// does, however often its caller sends it.
pub(crate) async fn revend_replayed(
    state: &AppState,
    ctx: &RequestContext,
    parts: &axum::http::request::Parts,
    request_body: &[u8],
    stored: &str,
) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        name: String,
        #[serde(default)]
        overwrite: bool,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        #[serde(rename = "table-uuid")]
        table_uuid: String,
    }
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8().ok().map(|d| d.into_owned());
    let segments: Vec<&str> = parts.uri.path().trim_start_matches('/').split('/').collect();
    let ["v1", prefix, "namespaces", namespace, "tables" | "register"] = segments.as_slice() else { return None };
    let (prefix, namespace) = (WarehouseId::new(decode(prefix)?), decode(namespace)?);
    let namespace = state.catalog.namespace_param(&namespace).into_owned();
    let Named { name, overwrite } = serde_json::from_slice(request_body).ok()?;
    let crate::idempotency::Members(mut members) = serde_json::from_str(stored).ok()?;
    let member = |key: &str| members.iter().find(|(k, _)| k == key).map(|(_, v)| v.get());
    // A staged create stored nothing (it changed nothing); a created table has a location.
    let first_location: String = serde_json::from_str(member("metadata-location")?).ok()?;
    let Metadata { table_uuid } = serde_json::from_str(member("metadata")?).ok()?;
    let table = TableIdent::parse(&namespace, &name).ok()?;
    let request = storage_request((&prefix, &table), &parts.headers);
    let tables = state.catalog.tables();
    let result = tables.replayed(ctx, &request, &table_uuid, &first_location, overwrite).await.ok()??;
    let storage = tables.storage_access(ctx, &result, &request).await.ok()?;
    let mut config: serde_json::Map<String, serde_json::Value> =
        member("config").map_or(Some(serde_json::Map::new()), |raw| serde_json::from_str(raw).ok())?;
    for (key, value) in storage.config {
        config.insert(key, serde_json::Value::String(value));
    }
    let raw = |value: String| serde_json::value::RawValue::from_string(value).ok();
    members.retain(|(key, _)| key != "config" && key != "storage-credentials");
    members.push(("config".into(), raw(serde_json::to_string(&config).ok()?)?));
    if !storage.credentials.is_empty() {
        let credentials = serde_json::to_string(&credentials_list(storage.credentials)).ok()?;
        members.push(("storage-credentials".into(), raw(credentials)?));
    }
    crate::idempotency::object_of(&members)
}
