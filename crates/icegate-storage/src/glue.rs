//! AWS Glue's Data Catalog as a migration source: its databases (one-level namespaces, with
//! their parameters) and the Iceberg tables among their tables (`table_type=ICEBERG`, the
//! current metadata in the `metadata_location` parameter). The fence is the compare-and-swap
//! Glue's writers commit with: `UpdateTable` with the table's `VersionId`, moving
//! `metadata_location` to a location that never exists (with `previous_metadata_location` and a
//! parameter naming the migration), so every writer's next commit fails there. Requests are
//! SigV4-signed with the server's own AWS identity (the default credential chain); a Glue source
//! without an endpoint needs admin on the server.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use icegate_catalog::migration::source::{Fence, SourceCatalog, SourceTable};
use icegate_catalog::{CatalogError, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A database as `GetDatabases` lists it (what a migration reads of it).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Database {
    name: String,
    #[serde(default)]
    parameters: BTreeMap<String, String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    location_uri: Option<String>,
}

/// A table as `GetTables` lists it.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Listed {
    name: String,
    #[serde(default)]
    parameters: BTreeMap<String, String>,
    #[serde(default)]
    table_type: Option<String>,
}

#[derive(Deserialize)]
struct Page<T> {
    #[serde(default = "Vec::new", alias = "DatabaseList", alias = "TableList")]
    items: Vec<T>,
    #[serde(default, rename = "NextToken")]
    next: Option<String>,
}

/// The parameter a fenced table carries: the migrated table's id.
const FENCE_PARAMETER: &str = "icegate.migration.fenced";
/// The largest answer read (Glue's own limits keep a table's definition far smaller).
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// Databases, and tables of one database, listed at most.
const MAX_ITEMS: usize = 10_000;
/// What of Glue's error message is kept.
const MAX_MESSAGE_CHARS: usize = 512;
const MAX_PAGES: usize = 1_000;
/// `UpdateTable` tries while other writers keep changing the table's version.
const SWAP_TRIES: usize = 3;
/// What `GetTable` answers that `UpdateTable`'s `TableInput` takes back.
const TABLE_INPUT_FIELDS: &[&str] = &[
    "Name",
    "Description",
    "Owner",
    "LastAccessTime",
    "LastAnalyzedTime",
    "Retention",
    "StorageDescriptor",
    "PartitionKeys",
    "ViewOriginalText",
    "ViewExpandedText",
    "TableType",
    "Parameters",
    "TargetTable",
];

pub struct GlueSource {
    http: reqwest::Client,
    endpoint: String,
    region: String,
    catalog_id: Option<String>,
    credentials: aws_credential_types::provider::SharedCredentialsProvider,
}

fn unavailable(e: impl std::fmt::Display) -> CatalogError {
    tracing::warn!(error = %e, "Glue failed");
    CatalogError::Unavailable("the Glue source failed answering".into())
}

impl GlueSource {
    pub async fn connect(region: &str, endpoint: Option<&str>, catalog_id: Option<&str>) -> Result<Self> {
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(region.to_owned()))
            .load()
            .await;
        let credentials = config.credentials_provider().ok_or_else(|| {
            CatalogError::bad_request("the AWS default credential chain found no credentials for Glue")
        })?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("an HTTP client: {e}")))?;
        let endpoint = endpoint
            .map_or_else(|| format!("https://glue.{region}.amazonaws.com"), |e| e.trim_end_matches('/').to_owned());
        let source =
            Self { http, endpoint, region: region.to_owned(), catalog_id: catalog_id.map(str::to_owned), credentials };
        // Reached and allowed, before anything is planned.
        source.call("GetDatabases", json!({ "MaxResults": 1 })).await?;
        Ok(source)
    }

    /// One Glue API call (JSON 1.1), signed, its answer parsed as `T`.
    async fn call_as<T: DeserializeOwned>(&self, action: &str, body: Value) -> Result<T> {
        let bytes = self.call_bytes(action, body).await?;
        serde_json::from_slice(&bytes)
            .map_err(|_| CatalogError::bad_request(format!("Glue's answer to {action} does not parse")))
    }

    async fn call(&self, action: &str, body: Value) -> Result<Value> {
        self.call_as(action, body).await
    }

    async fn call_bytes(&self, action: &str, mut body: Value) -> Result<Vec<u8>> {
        if let Some(id) = &self.catalog_id {
            body["CatalogId"] = json!(id);
        }
        let payload = serde_json::to_vec(&body).map_err(|e| CatalogError::Internal(e.into()))?;
        let credentials = self.credentials.provide_credentials().await.map_err(unavailable)?;
        let url = format!("{}/", self.endpoint);
        let host = url::Url::parse(&url)
            .ok()
            .and_then(|u| u.host_str().map(|h| u.port().map_or_else(|| h.to_owned(), |p| format!("{h}:{p}"))))
            .ok_or_else(|| CatalogError::bad_request(format!("the Glue endpoint {} has no host", self.endpoint)))?;
        let target = format!("AWSGlue.{action}");
        let headers = [
            ("host", host.as_str()),
            ("content-type", "application/x-amz-json-1.1"),
            ("x-amz-target", target.as_str()),
        ];
        let identity = credentials.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("glue")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("signing parameters: {e}")))?
            .into();
        let signable = SignableRequest::new("POST", &url, headers.iter().copied(), SignableBody::Bytes(&payload))
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("a Glue request: {e}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("signing a Glue request: {e}")))?
            .into_parts();
        let mut request = self.http.post(&url).body(payload);
        for (name, value) in headers.iter().filter(|(n, _)| *n != "host").copied().chain(instructions.headers()) {
            request = request.header(name, value);
        }
        let mut response = request.send().await.map_err(unavailable)?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unavailable)? {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(CatalogError::bad_request("a Glue answer is too large"));
            }
            bytes.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok(bytes);
        }
        let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let kind: String = answer["__type"]
            .as_str()
            .unwrap_or_default()
            .rsplit('#')
            .next()
            .unwrap_or_default()
            .chars()
            .take(64)
            .collect();
        let message: String = answer["message"]
            .as_str()
            .or_else(|| answer["Message"].as_str())
            .unwrap_or_default()
            .chars()
            .take(MAX_MESSAGE_CHARS)
            .collect();
        match kind.as_str() {
            "EntityNotFoundException" => Err(CatalogError::NotFound {
                kind: icegate_catalog::error::ObjectKind::Table,
                message: format!("Glue: {message}"),
            }),
            "ConcurrentModificationException" => Err(CatalogError::CommitFailed(format!("Glue: {message}"))),
            _ if status.is_server_error() || kind == "ThrottlingException" => {
                Err(CatalogError::Unavailable(format!("Glue answered {status} {kind}")))
            }
            _ => Err(CatalogError::bad_request(format!("Glue refused {action}: {kind} {message}"))),
        }
    }

    /// Every item of a paged listing, at most [`MAX_ITEMS`].
    async fn pages<T: DeserializeOwned>(&self, action: &str, body: Value) -> Result<Vec<T>> {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut request = body.clone();
            if let Some(t) = &token {
                request["NextToken"] = json!(t);
            }
            let page: Page<T> = self.call_as(action, request).await?;
            items.extend(page.items);
            if items.len() > MAX_ITEMS {
                return Err(CatalogError::bad_request(format!(
                    "Glue's {action} lists more than {MAX_ITEMS}: migrate in parts"
                )));
            }
            match page.next.filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next),
                None => return Ok(items),
            }
        }
        Err(CatalogError::bad_request(format!("Glue's {action} has more than {MAX_PAGES} pages")))
    }

    /// The table as `GetTable` answers it (`None`: gone).
    async fn get_table(&self, database: &str, name: &str) -> Result<Option<Value>> {
        match self.call("GetTable", json!({ "DatabaseName": database, "Name": name })).await {
            Ok(answer) => Ok(Some(answer["Table"].clone())),
            Err(CatalogError::NotFound { .. }) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// `UpdateTable` with the table's parameters changed, if it is still at `version`.
    async fn swap(&self, database: &str, table: &Value, parameters: BTreeMap<String, String>) -> Result<bool> {
        let mut input = serde_json::Map::new();
        for field in TABLE_INPUT_FIELDS {
            if let Some(value) = table.get(*field) {
                input.insert((*field).to_owned(), value.clone());
            }
        }
        input.insert("Parameters".into(), json!(parameters));
        let mut body = json!({ "DatabaseName": database, "TableInput": input, "SkipArchive": false });
        if let Some(version) = table["VersionId"].as_str() {
            body["VersionId"] = json!(version);
        }
        match self.call("UpdateTable", body).await {
            Ok(_) => Ok(true),
            Err(CatalogError::CommitFailed(_)) => Ok(false),
            Err(other) => Err(other),
        }
    }
}

fn parameters(table: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(table["Parameters"].clone()).unwrap_or_default()
}

/// An Iceberg table (or view) of Glue's, as a migration sees it; `None` for other tables.
fn iceberg_table(namespace: &[String], table: Listed) -> Option<SourceTable> {
    let kind = table.parameters.iter().find(|(k, _)| k.eq_ignore_ascii_case("table_type"))?.1;
    if !kind.eq_ignore_ascii_case("ICEBERG") {
        return None;
    }
    let view = table.table_type.as_deref() == Some("VIRTUAL_VIEW");
    Some(SourceTable {
        namespace: namespace.to_vec(),
        name: table.name,
        kind: if view { "view" } else { "table" }.into(),
        metadata_location: table.parameters.get("metadata_location").cloned(),
    })
}

fn database_of(namespace: &[String]) -> Result<&str> {
    match namespace {
        [database] => Ok(database),
        _ => Err(CatalogError::bad_request("Glue's namespaces are one level (databases)")),
    }
}

#[async_trait]
impl SourceCatalog for GlueSource {
    async fn namespaces(&self) -> Result<Vec<(Vec<String>, BTreeMap<String, String>)>> {
        let databases: Vec<Database> = self.pages("GetDatabases", json!({})).await?;
        let mut found: Vec<(Vec<String>, BTreeMap<String, String>)> = databases
            .into_iter()
            .map(|db| {
                let mut properties = db.parameters;
                if let Some(description) = db.description {
                    properties.insert("comment".into(), description);
                }
                if let Some(location) = db.location_uri {
                    properties.insert("location".into(), location);
                }
                (vec![db.name], properties)
            })
            .collect();
        found.sort();
        Ok(found)
    }

    async fn tables(&self, namespace: &[String]) -> Result<Vec<SourceTable>> {
        let database = database_of(namespace)?;
        let tables: Vec<Listed> = self.pages("GetTables", json!({ "DatabaseName": database })).await?;
        let mut found: Vec<SourceTable> =
            tables.into_iter().filter_map(|table| iceberg_table(namespace, table)).collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(found)
    }

    async fn table(&self, namespace: &[String], name: &str) -> Result<Option<SourceTable>> {
        let database = database_of(namespace)?;
        let Some(table) = self.get_table(database, name).await? else { return Ok(None) };
        let listed: Listed = serde_json::from_value(table)
            .map_err(|_| CatalogError::bad_request("Glue's answer to GetTable does not parse"))?;
        Ok(iceberg_table(namespace, listed))
    }

    async fn fence(&self, namespace: &[String], name: &str, expected: &str, fenced: &str) -> Result<Fence> {
        let database = database_of(namespace)?;
        for _ in 0..SWAP_TRIES {
            let Some(table) = self.get_table(database, name).await? else { return Ok(Fence::Gone) };
            let mut parameters = parameters(&table);
            match parameters.get("metadata_location").map(String::as_str) {
                Some(at) if at == fenced => return Ok(Fence::AlreadyFenced),
                Some(at) if at != expected => return Ok(Fence::Moved { now: at.to_owned() }),
                None => return Ok(Fence::Gone),
                Some(_) => {}
            }
            let previous = parameters.get("previous_metadata_location").cloned();
            parameters.insert("metadata_location".into(), fenced.to_owned());
            parameters.insert("previous_metadata_location".into(), expected.to_owned());
            parameters.insert(FENCE_PARAMETER.into(), fenced.rsplit('.').next().unwrap_or_default().to_owned());
            if self.swap(database, &table, parameters).await? {
                return Ok(Fence::Fenced { previous });
            }
        }
        Err(CatalogError::Unavailable(format!("{database}.{name} kept changing in Glue while it was fenced")))
    }

    async fn unfence(
        &self,
        (namespace, name): (&[String], &str),
        fenced: &str,
        back: &str,
        previous: Option<&str>,
    ) -> Result<bool> {
        let database = database_of(namespace)?;
        for _ in 0..SWAP_TRIES {
            let Some(table) = self.get_table(database, name).await? else { return Ok(false) };
            let mut parameters = parameters(&table);
            if parameters.get("metadata_location").map(String::as_str) != Some(fenced) {
                return Ok(false);
            }
            parameters.insert("metadata_location".into(), back.to_owned());
            match previous {
                Some(previous) => parameters.insert("previous_metadata_location".into(), previous.to_owned()),
                None => parameters.remove("previous_metadata_location"),
            };
            parameters.remove(FENCE_PARAMETER);
            if self.swap(database, &table, parameters).await? {
                return Ok(true);
            }
        }
        Err(CatalogError::Unavailable(format!("{database}.{name} kept changing in Glue while it was restored")))
    }

    async fn retire(&self, (namespace, name): (&[String], &str), fenced: &str) -> Result<bool> {
        let database = database_of(namespace)?;
        let Some(table) = self.get_table(database, name).await? else { return Ok(false) };
        if parameters(&table).get("metadata_location").map(String::as_str) != Some(fenced) {
            return Ok(false);
        }
        match self.call("DeleteTable", json!({ "DatabaseName": database, "Name": name })).await {
            Ok(_) => Ok(true),
            Err(CatalogError::NotFound { .. }) => Ok(false),
            Err(other) => Err(other),
        }
    }
}
