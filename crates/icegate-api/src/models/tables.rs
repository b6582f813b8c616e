//! Request and response bodies of the table endpoints, named as in the Iceberg REST spec. The
//! Iceberg structures inside them (schemas, specs, metadata, updates, requirements) are the
//! `iceberg` crate's own types, documented here as plain objects.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use iceberg::TableRequirement;
use iceberg::spec::{SortOrder, UnboundPartitionSpec};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use super::{Namespace, PageToken};

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TableIdentifier {
    pub namespace: Namespace,
    pub name: String,
}

impl TableIdentifier {
    /// The validated identifier (a 400 for invalid names).
    pub fn parse(self) -> Result<icegate_catalog::tables::TableIdent, icegate_catalog::CatalogError> {
        icegate_catalog::tables::TableIdent::new(
            icegate_catalog::NamespaceIdent::from_levels(self.namespace.0)?,
            &self.name,
        )
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct CreateTableRequest {
    pub name: String,
    pub location: Option<String>,
    // Kept as it came until the create is authorized (see `icegate_catalog::schema_cost`).
    #[schema(value_type = Object)]
    pub schema: Box<RawValue>,
    #[schema(value_type = Option<Object>)]
    pub partition_spec: Option<UnboundPartitionSpec>,
    #[schema(value_type = Option<Object>)]
    pub write_order: Option<SortOrder>,
    pub stage_create: Option<bool>,
    pub properties: Option<HashMap<String, String>>,
}

// The documented shape; handlers write it as `LoadTableFields` with the stored metadata
// spliced in (`WithMetadata`).
/// Result used when a table is successfully loaded.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct LoadTableResult {
    /// May be null if the table is staged as part of a transaction.
    pub metadata_location: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: Box<RawValue>,
    pub config: BTreeMap<String, String>,
    /// Credentials for the table's locations, when the warehouse vends them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub storage_credentials: Vec<StorageCredential>,
    /// How to sign, when the client signs its storage requests through the catalog.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_signing_config: Option<RemoteSigningConfig>,
}

/// Configuration for the remote signer client (spec after 1.11): static properties for every
/// sign request and static headers for every request to the signing endpoint.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct RemoteSigningConfig {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Vec<String>>,
}

/// [`LoadTableResult`] but its `metadata`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct LoadTableFields {
    pub metadata_location: Option<String>,
    pub config: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub storage_credentials: Vec<StorageCredential>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_signing_config: Option<RemoteSigningConfig>,
}

/// [`CommitTableResponse`] but its `metadata`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CommitTableFields {
    pub metadata_location: String,
}

/// A JSON object response: `fields`, plus a `metadata` member that is the stored metadata
/// document copied in as it is. The document was written by icegate's own serialiser (or parsed
/// when registered), so it is not parsed again: on a table with 100 snapshots that check cost more
/// than the rest of a loadTable.
///
/// With `gzip` (the document compressed as one gzip member, made once per metadata file), the
/// body goes out with `Content-Encoding: gzip` as three gzip members: the opening, the cached
/// document and the rest (the request's own fields, in stored blocks: framing, no compressor).
/// A gzip stream is a series of members (RFC 1952), which every client decompresses as one
/// (Python's urllib3, Java's `GZIPInputStream`), so the document is never compressed per request.
pub struct WithMetadata<T> {
    pub metadata: std::sync::Arc<str>,
    pub fields: T,
    pub gzip: Option<Arc<[u8]>>,
}

/// The opening of a response body, as a gzip member.
static GZIP_OPENING: std::sync::LazyLock<Bytes> =
    std::sync::LazyLock::new(|| Bytes::from(stored_gzip_member(br#"{"metadata":"#)));

/// One gzip member holding `data` in stored (uncompressed) deflate blocks.
pub(crate) fn stored_gzip_member(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 23 + 5 * (data.len() / 65_535));
    // Magic, deflate, no flags, no mtime, no extra flags, unknown OS.
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    let mut chunks = data.chunks(65_535).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        out.push(u8::from(chunks.peek().is_none())); // BFINAL on the last, BTYPE 00 (stored)
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    let mut crc = flate2::Crc::new();
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

/// `document` compressed as one gzip member (made once per metadata file).
pub(crate) fn gzip_member(document: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder =
        flate2::write::GzEncoder::new(Vec::with_capacity(document.len() / 6), flate2::Compression::default());
    // Writing into memory does not fail; should it, the document goes out uncompressed.
    match encoder.write_all(document).and_then(|()| encoder.finish()) {
        Ok(compressed) => compressed,
        Err(_) => stored_gzip_member(document),
    }
}

impl<T: Serialize> axum::response::IntoResponse for WithMetadata<T> {
    fn into_response(self) -> axum::response::Response {
        let fields = match serde_json::to_vec(&self.fields) {
            Ok(fields) => fields,
            Err(err) => {
                return crate::error::ApiError::from(icegate_catalog::CatalogError::Internal(err.into()))
                    .into_response();
            }
        };
        // `fields` is an object: `{}` or `{"a":...}`; its members follow the metadata.
        let rest = if fields.len() > 2 {
            let mut rest = fields;
            rest[0] = b',';
            Bytes::from(rest)
        } else {
            Bytes::from_static(b"}")
        };
        // The document goes out as it is held, shared, not copied into a buffer of its own: for
        // a table with history that copy was the largest single cost of a warm loadTable.
        use axum::http::header;
        if let Some(gzip) = self.gzip {
            let body = Parts::new([
                GZIP_OPENING.clone(),
                Bytes::from_owner(Gzip(gzip)),
                Bytes::from(stored_gzip_member(&rest)),
            ]);
            let headers = [
                (header::CONTENT_TYPE, "application/json"),
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "accept-encoding"),
            ];
            return (headers, axum::body::Body::new(body)).into_response();
        }
        let body =
            Parts::new([Bytes::from_static(br#"{"metadata":"#), Bytes::from_owner(Document(self.metadata)), rest]);
        ([(header::CONTENT_TYPE, "application/json")], axum::body::Body::new(body)).into_response()
    }
}

/// A shared compressed document as response bytes.
struct Gzip(Arc<[u8]>);

impl AsRef<[u8]> for Gzip {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A shared metadata document as response bytes.
struct Document(Arc<str>);

impl AsRef<[u8]> for Document {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// A response body sent as a few buffers (written with one vectored write), with its exact
/// length known, so it still goes out with a Content-Length rather than chunked.
struct Parts {
    parts: std::collections::VecDeque<Bytes>,
    remaining: u64,
}

impl Parts {
    fn new<const N: usize>(parts: [Bytes; N]) -> Self {
        let remaining = parts.iter().map(|part| part.len() as u64).sum();
        Self { parts: parts.into_iter().filter(|part| !part.is_empty()).collect(), remaining }
    }
}

impl http_body::Body for Parts {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        std::task::Poll::Ready(this.parts.pop_front().map(|part| {
            this.remaining -= part.len() as u64;
            Ok(http_body::Frame::data(part))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

/// Storage credentials for every location below `prefix`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StorageCredential {
    pub prefix: String,
    pub config: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct LoadCredentialsResponse {
    pub storage_credentials: Vec<StorageCredential>,
}

/// The request to be signed remotely.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RemoteSignRequest {
    pub region: String,
    pub uri: String,
    pub method: String,
    /// Header name to values.
    pub headers: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// The body, for requests whose body must be checked before signing (DeleteObjects).
    pub body: Option<String>,
    /// `s3` (the default).
    pub provider: Option<String>,
}

/// The result of a remote request signing operation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RemoteSignResult {
    pub uri: String,
    pub headers: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LoadTableQuery {
    /// `all` (default) or `refs`: only snapshots referenced by branches or tags.
    pub snapshots: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct CommitTableRequest {
    /// Required in commitTransaction; ignored (the path names the table) in updateTable.
    pub identifier: Option<TableIdentifier>,
    #[schema(value_type = Vec<Object>)]
    pub requirements: Vec<TableRequirement>,
    // Each kept as it came until the commit is authorized (an `add-schema` builds a schema).
    #[schema(value_type = Vec<Object>)]
    pub updates: Vec<Box<RawValue>>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct CommitTableResponse {
    pub metadata_location: String,
    #[schema(value_type = Object)]
    pub metadata: Box<RawValue>,
}

/// The answer to unregisterTable (its body is built as a [`WithMetadata`]; this documents it).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct UnregisterTableResult {
    pub metadata_location: String,
    #[schema(value_type = Object)]
    pub metadata: Box<RawValue>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct CommitTransactionRequest {
    pub table_changes: Vec<CommitTableRequest>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DropTableQuery {
    /// Whether the user requested to purge the underlying table's data and metadata.
    #[serde(rename = "purgeRequested", default)]
    #[param(rename = "purgeRequested", value_type = Option<bool>)]
    pub purge_requested: Option<String>,
}

impl DropTableQuery {
    /// `true`/`false` in any case: PyIceberg sends Python's `True`/`False`.
    pub fn purge(&self) -> Result<bool, String> {
        match self.purge_requested.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("false") => Ok(false),
            Some("true") => Ok(true),
            Some(other) => Err(format!("purgeRequested must be true or false, not {other:?}")),
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListTablesQuery {
    #[serde(rename = "pageToken")]
    #[param(rename = "pageToken")]
    pub page_token: Option<String>,
    #[serde(rename = "pageSize")]
    #[param(rename = "pageSize")]
    pub page_size: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ListTablesResponse {
    #[serde(rename = "next-page-token")]
    pub next_page_token: Option<PageToken>,
    pub identifiers: Vec<TableIdentifier>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RegisterTableRequest {
    pub name: String,
    pub metadata_location: String,
    /// Repoint an existing table at this metadata file.
    #[serde(default)]
    pub overwrite: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct RenameTableRequest {
    pub source: TableIdentifier,
    pub destination: TableIdentifier,
}

/// A scan or commit report (validated for its shape; counted in Prometheus).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ReportMetricsRequest {
    /// `scan-report` or `commit-report`.
    pub report_type: String,
    pub table_name: String,
    pub snapshot_id: i64,
    // Only counted: kept as text, never parsed into values.
    #[schema(value_type = Object)]
    pub metrics: Box<RawValue>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct CreateViewRequest {
    pub name: String,
    pub location: Option<String>,
    // Kept as it came until the create is authorized.
    #[schema(value_type = Object)]
    pub schema: Box<RawValue>,
    #[schema(value_type = Object)]
    pub view_version: iceberg::spec::ViewVersion,
    #[serde(default)]
    pub properties: HashMap<String, String>,
}

/// Result used when a view is successfully loaded.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct LoadViewResult {
    pub metadata_location: String,
    #[schema(value_type = Object)]
    pub metadata: Box<RawValue>,
    pub config: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct CommitViewRequest {
    pub identifier: Option<TableIdentifier>,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub requirements: Vec<icegate_catalog::views::ViewRequirement>,
    // Each kept as it came until the commit is authorized.
    #[schema(value_type = Vec<Object>)]
    pub updates: Vec<Box<RawValue>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RegisterViewRequest {
    pub name: String,
    pub metadata_location: String,
}
