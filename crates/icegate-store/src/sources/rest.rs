//! An Iceberg REST catalog as a migration source (another icegate, Polaris, Lakekeeper, ...).
//! Its tables are listed and loaded for their metadata locations; the fence is the catalog's
//! own `unregisterTable` (the upstream spec's: the table is let go, its files kept, its last
//! metadata location answered), sent with an `Idempotency-Key` derived from the migrated
//! table's id, so a run killed after the call repeats it and gets the same answer from a
//! catalog that keeps keys. Undoing it registers the table again. Redirects are not followed
//! (the server admin approved this endpoint, not wherever it points), and every answer is read
//! up to a bound.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use icegate_catalog::migration::FENCE_SUFFIX;
use icegate_catalog::migration::source::{Fence, SourceCatalog, SourceTable};
use icegate_catalog::{CatalogError, Result};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The largest answer read from the source (a loadTable answer holds the table's metadata).
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;
/// Namespaces listed at most, and how deep.
const MAX_NAMESPACES: usize = 10_000;
const MAX_DEPTH: usize = 16;
/// Pages of one listing read at most.
const MAX_PAGES: usize = 1_000;

/// A REST catalog, reached with a bearer token (given, or got with client credentials).
pub struct RestSource {
    client: reqwest::Client,
    /// `<uri>/v1/<prefix>` (no trailing slash).
    base: String,
    token: Option<String>,
}

fn unavailable(what: &str) -> impl Fn(reqwest::Error) -> CatalogError + '_ {
    move |e| {
        tracing::warn!(error = %e, "the source catalog failed {what}");
        CatalogError::Unavailable(format!("the source catalog failed {what}"))
    }
}

fn encoded(level: &str) -> String {
    utf8_percent_encode(level, NON_ALPHANUMERIC).to_string()
}

/// A namespace in a request path: its levels, each encoded, joined with `%1F`.
fn namespace_path(levels: &[String]) -> String {
    levels.iter().map(|l| encoded(l)).collect::<Vec<_>>().join("%1F")
}

/// Reads an answer of at most [`MAX_ANSWER_BYTES`].
async fn bounded(mut response: reqwest::Response, what: &str) -> Result<Vec<u8>> {
    if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
        return Err(CatalogError::bad_request(format!("the source catalog's answer {what} is too large")));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(unavailable(what))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(CatalogError::bad_request(format!("the source catalog's answer {what} is too large")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl RestSource {
    /// Connects: a token (given, or got at `<uri>/v1/oauth/tokens` with the client credentials
    /// `id:secret`), then `/v1/config` for the warehouse's prefix.
    pub async fn connect(
        uri: &str,
        warehouse: Option<&str>,
        credential: Option<&str>,
        token: Option<&str>,
        scope: Option<&str>,
    ) -> Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("an HTTP client: {e}")))?;
        let root = uri.trim_end_matches('/').to_owned();
        let token = match (token, credential) {
            (Some(token), _) => Some(token.to_owned()),
            (None, Some(credential)) => {
                let (id, secret) = credential.split_once(':').unwrap_or((credential, ""));
                let mut form = vec![("grant_type", "client_credentials"), ("client_id", id), ("client_secret", secret)];
                if let Some(scope) = scope {
                    form.push(("scope", scope));
                }
                let response = client
                    .post(format!("{root}/v1/oauth/tokens"))
                    .form(&form)
                    .send()
                    .await
                    .map_err(unavailable("issuing a token"))?;
                let status = response.status();
                let body = bounded(response, "issuing a token").await?;
                if !status.is_success() {
                    return Err(CatalogError::bad_request(format!(
                        "the source catalog refused the credential ({status})"
                    )));
                }
                let answer: Value = serde_json::from_slice(&body)
                    .map_err(|_| CatalogError::bad_request("the source catalog's token answer is not JSON"))?;
                Some(answer["access_token"].as_str().unwrap_or_default().to_owned())
            }
            (None, None) => None,
        };
        let mut source = Self { client, base: format!("{root}/v1"), token };
        let query = warehouse.map(|w| format!("?warehouse={}", encoded(w))).unwrap_or_default();
        let config = source
            .call(Method::GET, &format!("/config{query}"), None, None)
            .await?
            .ok_or_else(|| CatalogError::bad_request("the source is no Iceberg REST catalog (no /v1/config)"))?;
        let prefix = config["overrides"]["prefix"].as_str().or_else(|| config["defaults"]["prefix"].as_str());
        if let Some(prefix) = prefix.filter(|p| !p.is_empty()) {
            source.base = format!("{root}/v1/{}", encoded(prefix));
        }
        Ok(source)
    }

    /// Calls `path` (below the base); `None` for a 404.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<Option<Value>> {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await.map_err(unavailable("answering"))?;
        let status = response.status();
        let bytes = bounded(response, "answering").await?;
        let message = || {
            serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        match status {
            s if s.is_success() => {
                if bytes.is_empty() {
                    return Ok(Some(Value::Null));
                }
                serde_json::from_slice(&bytes).map(Some).map_err(|_| {
                    CatalogError::bad_request(format!("the source catalog's answer to {path} is not JSON"))
                })
            }
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::CONFLICT => Err(CatalogError::AlreadyExists(format!("the source catalog: {}", message()))),
            s if s.is_server_error() => Err(CatalogError::Unavailable(format!("the source catalog answered {s}"))),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(CatalogError::bad_request(format!(
                "the source catalog refused {path} ({status}): the migration's credential lacks the right"
            ))),
            s => Err(CatalogError::bad_request(format!("the source catalog answered {s} to {path}: {}", message()))),
        }
    }

    /// Every page of a listing (`key`: the list's field).
    async fn pages(&self, path: &str, key: &str) -> Result<Vec<Value>> {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let separator = if path.contains('?') { '&' } else { '?' };
            let page = match &token {
                Some(t) => format!("{path}{separator}pageToken={}", encoded(t)),
                None => path.to_owned(),
            };
            let Some(answer) = self.call(Method::GET, &page, None, None).await? else { return Ok(items) };
            items.extend(answer[key].as_array().cloned().unwrap_or_default());
            match answer["next-page-token"].as_str().filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next.to_owned()),
                None => return Ok(items),
            }
        }
        Err(CatalogError::bad_request(format!("the source catalog's listing {path} has more than {MAX_PAGES} pages")))
    }
}

fn levels(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|l| l.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

#[async_trait]
impl SourceCatalog for RestSource {
    async fn namespaces(&self) -> Result<Vec<(Vec<String>, BTreeMap<String, String>)>> {
        let mut found = Vec::new();
        let mut queue: Vec<Vec<String>> = vec![Vec::new()];
        while let Some(parent) = queue.pop() {
            let path = if parent.is_empty() {
                "/namespaces".to_owned()
            } else {
                format!("/namespaces?parent={}", namespace_path(&parent))
            };
            for child in self.pages(&path, "namespaces").await? {
                let child = levels(&child);
                // A catalog that ignores `parent` answers the top level again: only children count.
                if child.len() != parent.len() + 1 || child[..parent.len()] != parent[..] {
                    continue;
                }
                if found.len() >= MAX_NAMESPACES || child.len() > MAX_DEPTH {
                    return Err(CatalogError::bad_request(format!(
                        "the source catalog holds more than {MAX_NAMESPACES} namespaces or deeper than {MAX_DEPTH}: \
                         migrate in parts"
                    )));
                }
                let loaded =
                    self.call(Method::GET, &format!("/namespaces/{}", namespace_path(&child)), None, None).await?;
                let properties: BTreeMap<String, String> =
                    loaded.and_then(|l| serde_json::from_value(l["properties"].clone()).ok()).unwrap_or_default();
                queue.push(child.clone());
                found.push((child, properties));
            }
        }
        found.sort();
        Ok(found)
    }

    async fn tables(&self, namespace: &[String]) -> Result<Vec<SourceTable>> {
        let ns = namespace_path(namespace);
        let mut tables = Vec::new();
        for identifier in self.pages(&format!("/namespaces/{ns}/tables"), "identifiers").await? {
            let Some(name) = identifier["name"].as_str() else { continue };
            let loaded =
                self.call(Method::GET, &format!("/namespaces/{ns}/tables/{}", encoded(name)), None, None).await?;
            let Some(loaded) = loaded else { continue };
            tables.push(SourceTable {
                namespace: namespace.to_vec(),
                name: name.to_owned(),
                kind: "table".into(),
                metadata_location: loaded["metadata-location"].as_str().map(str::to_owned),
            });
        }
        // Views, where the catalog has them (listed, not moved).
        if let Ok(views) = self.pages(&format!("/namespaces/{ns}/views"), "identifiers").await {
            for identifier in views {
                let Some(name) = identifier["name"].as_str() else { continue };
                tables.push(SourceTable {
                    namespace: namespace.to_vec(),
                    name: name.to_owned(),
                    kind: "view".into(),
                    metadata_location: None,
                });
            }
        }
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(tables)
    }

    async fn fence(&self, namespace: &[String], name: &str, _expected: &str, fenced: &str) -> Result<Fence> {
        // The key is the migrated table's id (a UUIDv7): a repeated release answers the same.
        let key = fenced.rsplit_once(FENCE_SUFFIX).map(|(_, id)| id.to_owned());
        let path = format!("/namespaces/{}/tables/{}/unregister", namespace_path(namespace), encoded(name));
        match self.call(Method::POST, &path, None, key.as_deref()).await {
            Ok(Some(answer)) => match answer["metadata-location"].as_str() {
                Some(at) => Ok(Fence::Released { at: at.to_owned() }),
                None => Err(CatalogError::bad_request("the source's unregisterTable answered no metadata-location")),
            },
            Ok(None) => Ok(Fence::Gone),
            Err(CatalogError::BadRequest(why)) => Err(CatalogError::bad_request(format!(
                "the source catalog did not release {name} ({why}); it needs unregisterTable (Iceberg REST, \
                 POST .../tables/{{table}}/unregister) for a fenced migration"
            ))),
            Err(other) => Err(other),
        }
    }

    async fn unfence(
        &self,
        (namespace, name): (&[String], &str),
        _fenced: &str,
        back: &str,
        _previous: Option<&str>,
    ) -> Result<bool> {
        let path = format!("/namespaces/{}/register", namespace_path(namespace));
        match self.call(Method::POST, &path, Some(&json!({ "name": name, "metadata-location": back })), None).await {
            Ok(_) => Ok(true),
            // Registered again already (a rollback repeated).
            Err(CatalogError::AlreadyExists(_)) => Ok(false),
            Err(other) => Err(other),
        }
    }

    async fn retire(&self, _table: (&[String], &str), _fenced: &str) -> Result<bool> {
        // Released at the fence: the source holds no entry to remove.
        Ok(false)
    }
}
