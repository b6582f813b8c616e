//! An Iceberg REST catalog as a migration source (another icegate, Polaris, Lakekeeper, ...).
//! Its tables are listed and loaded for their metadata locations; the fence is the catalog's
//! own `unregisterTable` (the upstream spec's: the table is let go, its files kept, its last
//! metadata location answered), sent with an `Idempotency-Key` derived from the migrated
//! table's id, so a run killed after the call repeats it and gets the same answer from a
//! catalog that keeps keys. Undoing it registers the table again. Redirects are not followed
//! (the server admin approved this endpoint, not wherever it points); every answer is read up
//! to a bound and parsed into only the fields used (a table's metadata is skipped, not built),
//! and listings stop at a bound of items.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use icegate_catalog::migration::source::{Fence, SourceCatalog, SourceTable};
use icegate_catalog::migration::{FENCE_SUFFIX, MAX_TABLES};
use icegate_catalog::{CatalogError, Result};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The largest answer read: a loadTable answer holds the table's metadata (skipped as it is
/// parsed); a listing page or any other answer is far smaller.
const MAX_TABLE_ANSWER_BYTES: usize = 64 * 1024 * 1024;
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// Namespaces listed at most, and how deep.
const MAX_NAMESPACES: usize = 10_000;
const MAX_DEPTH: usize = 16;
/// Pages of one listing read at most.
const MAX_PAGES: usize = 1_000;
/// What of a source's error message is kept (it ends up in the run's record).
const MAX_MESSAGE_CHARS: usize = 512;

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

/// `text`, cut to [`MAX_MESSAGE_CHARS`].
fn clipped(text: &str) -> String {
    let mut out: String = text.chars().take(MAX_MESSAGE_CHARS).collect();
    if out.len() < text.len() {
        out.push_str("...");
    }
    out
}

/// Reads an answer of at most `max` bytes.
async fn bounded(mut response: reqwest::Response, what: &str, max: usize) -> Result<Vec<u8>> {
    let too_large = || CatalogError::bad_request(format!("the source catalog's answer {what} is too large"));
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(unavailable(what))? {
        if body.len() + chunk.len() > max {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
}

#[derive(Deserialize, Default)]
struct ConfigAnswer {
    #[serde(default)]
    overrides: BTreeMap<String, Value>,
    #[serde(default)]
    defaults: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct Page<T> {
    #[serde(default = "Vec::new", alias = "identifiers")]
    namespaces: Vec<T>,
    #[serde(default, rename = "next-page-token")]
    next: Option<String>,
}

#[derive(Deserialize)]
struct Identifier {
    name: String,
}

#[derive(Deserialize)]
struct NamespaceAnswer {
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

/// A loadTable (or unregisterTable) answer: its metadata location; the metadata is skipped.
#[derive(Deserialize)]
struct TableAnswer {
    #[serde(default, rename = "metadata-location")]
    metadata_location: Option<String>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: ErrorModel,
}

#[derive(Deserialize)]
struct ErrorModel {
    #[serde(default)]
    message: String,
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
                let body = bounded(response, "issuing a token", MAX_ANSWER_BYTES).await?;
                if !status.is_success() {
                    return Err(CatalogError::bad_request(format!(
                        "the source catalog refused the credential ({status})"
                    )));
                }
                let answer: TokenAnswer = serde_json::from_slice(&body)
                    .map_err(|_| CatalogError::bad_request("the source catalog's token answer has no access_token"))?;
                Some(answer.access_token)
            }
            (None, None) => None,
        };
        let mut source = Self { client, base: format!("{root}/v1"), token };
        let query = warehouse.map(|w| format!("?warehouse={}", encoded(w))).unwrap_or_default();
        let config: ConfigAnswer = source
            .call(Method::GET, &format!("/config{query}"), None, None)
            .await?
            .ok_or_else(|| CatalogError::bad_request("the source is no Iceberg REST catalog (no /v1/config)"))?;
        let prefix = config.overrides.get("prefix").or_else(|| config.defaults.get("prefix")).and_then(Value::as_str);
        if let Some(prefix) = prefix.filter(|p| !p.is_empty()) {
            source.base = format!("{root}/v1/{}", encoded(prefix));
        }
        Ok(source)
    }

    /// Calls `path` (below the base) and parses the answer as `T`; `None` for a 404.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<Option<T>> {
        self.call_within(method, path, body, idempotency_key, MAX_ANSWER_BYTES).await
    }

    async fn call_within<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
        max: usize,
    ) -> Result<Option<T>> {
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
        let bytes = bounded(response, "answering", max).await?;
        let message =
            || serde_json::from_slice::<ErrorAnswer>(&bytes).map(|e| clipped(&e.error.message)).unwrap_or_default();
        let path = clipped(path);
        match status {
            s if s.is_success() => {
                let bytes: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
                serde_json::from_slice(bytes).map(Some).map_err(|_| {
                    CatalogError::bad_request(format!(
                        "the source catalog's answer to {path} is not what the spec says"
                    ))
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

    /// Every item of a paged listing, at most `max_items` (more fails the listing).
    async fn pages<T: DeserializeOwned>(&self, path: &str, max_items: usize) -> Result<Vec<T>> {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let separator = if path.contains('?') { '&' } else { '?' };
            let page = match &token {
                Some(t) => format!("{path}{separator}pageToken={}", encoded(t)),
                None => path.to_owned(),
            };
            let Some(answer) = self.call::<Page<T>>(Method::GET, &page, None, None).await? else { return Ok(items) };
            items.extend(answer.namespaces);
            if items.len() > max_items {
                return Err(CatalogError::bad_request(format!(
                    "the source catalog's listing {} holds more than {max_items} items: migrate in parts",
                    clipped(path)
                )));
            }
            match answer.next.filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next),
                None => return Ok(items),
            }
        }
        Err(CatalogError::bad_request(format!(
            "the source catalog's listing {} has more than {MAX_PAGES} pages",
            clipped(path)
        )))
    }

    /// One table's metadata location (`None`: not there).
    async fn load(&self, namespace: &[String], name: &str) -> Result<Option<Option<String>>> {
        let path = format!("/namespaces/{}/tables/{}", namespace_path(namespace), encoded(name));
        let loaded: Option<TableAnswer> =
            self.call_within(Method::GET, &path, None, None, MAX_TABLE_ANSWER_BYTES).await?;
        Ok(loaded.map(|t| t.metadata_location))
    }
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
            for child in self.pages::<Vec<String>>(&path, MAX_NAMESPACES).await? {
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
                let path = format!("/namespaces/{}", namespace_path(&child));
                let loaded: Option<NamespaceAnswer> = self.call(Method::GET, &path, None, None).await?;
                queue.push(child.clone());
                found.push((child, loaded.map(|l| l.properties).unwrap_or_default()));
            }
        }
        found.sort();
        Ok(found)
    }

    async fn tables(&self, namespace: &[String]) -> Result<Vec<SourceTable>> {
        let ns = namespace_path(namespace);
        let mut tables = Vec::new();
        for identifier in self.pages::<Identifier>(&format!("/namespaces/{ns}/tables"), MAX_TABLES).await? {
            let Some(metadata_location) = self.load(namespace, &identifier.name).await? else { continue };
            tables.push(SourceTable {
                namespace: namespace.to_vec(),
                name: identifier.name,
                kind: "table".into(),
                metadata_location,
            });
        }
        // Views, where the catalog has them (listed, not moved).
        if let Ok(views) = self.pages::<Identifier>(&format!("/namespaces/{ns}/views"), MAX_TABLES).await {
            for identifier in views {
                tables.push(SourceTable {
                    namespace: namespace.to_vec(),
                    name: identifier.name,
                    kind: "view".into(),
                    metadata_location: None,
                });
            }
        }
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(tables)
    }

    async fn table(&self, namespace: &[String], name: &str) -> Result<Option<SourceTable>> {
        Ok(self.load(namespace, name).await?.map(|metadata_location| SourceTable {
            namespace: namespace.to_vec(),
            name: name.to_owned(),
            kind: "table".into(),
            metadata_location,
        }))
    }

    async fn fence(&self, namespace: &[String], name: &str, _expected: &str, fenced: &str) -> Result<Fence> {
        // The key is the migrated table's id (a UUIDv7): a repeated release answers the same.
        let key = fenced.rsplit_once(FENCE_SUFFIX).map(|(_, id)| id.to_owned());
        let path = format!("/namespaces/{}/tables/{}/unregister", namespace_path(namespace), encoded(name));
        let answer: Result<Option<TableAnswer>> =
            self.call_within(Method::POST, &path, None, key.as_deref(), MAX_TABLE_ANSWER_BYTES).await;
        match answer {
            Ok(Some(TableAnswer { metadata_location: Some(at) })) => Ok(Fence::Released { at }),
            Ok(Some(_)) => Err(CatalogError::bad_request("the source's unregisterTable answered no metadata-location")),
            Ok(None) => Ok(Fence::Gone),
            Err(CatalogError::BadRequest(why)) => Err(CatalogError::bad_request(format!(
                "the source catalog did not release {} ({why}); a fenced migration needs its unregisterTable \
                 (Iceberg REST, POST .../tables/{{table}}/unregister)",
                clipped(name)
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
        let body = json!({ "name": name, "metadata-location": back });
        match self
            .call_within::<serde::de::IgnoredAny>(Method::POST, &path, Some(&body), None, MAX_TABLE_ANSWER_BYTES)
            .await
        {
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
