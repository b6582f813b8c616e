//! The CLI's connection to a running server: its URL and credentials (flags, environment, or a
//! named profile in `~/.config/icegate/profiles.toml`), a token fetched with the client
//! credentials and fetched again when it expires, and calls that answer the server's JSON or its
//! error message.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Mutex;

/// How an operator reaches the server (every noun takes these, before or after its verb).
#[derive(clap::Args, Clone)]
pub struct Connection {
    /// The server's URL [default: http://127.0.0.1:8181].
    #[arg(long, global = true, env = "ICEGATE_URL", hide_env_values = true)]
    pub url: Option<String>,
    /// The client id to sign in with (client credentials).
    #[arg(long, global = true, env = "ICEGATE_CLIENT_ID", hide_env_values = true)]
    pub client_id: Option<String>,
    /// The client secret to sign in with.
    #[arg(long, global = true, env = "ICEGATE_CLIENT_SECRET", hide_env_values = true)]
    pub client_secret: Option<String>,
    /// A named profile in ~/.config/icegate/profiles.toml (`[name]` with `url`, `client-id`,
    /// `client-secret`); flags and the environment win over it.
    #[arg(long, global = true, env = "ICEGATE_PROFILE", hide_env_values = true)]
    pub profile: Option<String>,
    /// `table` (for people) or `json` (one document, stable field names, for scripts).
    #[arg(long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

impl std::fmt::Debug for Connection {
    /// Without the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("url", &self.url).field("client_id", &self.client_id).finish_non_exhaustive()
    }
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

/// What went wrong: the server's refusal (its message), or not reaching it.
#[derive(Debug)]
pub struct Failure(pub String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type Outcome<T> = std::result::Result<T, Failure>;

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct Profile {
    url: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
}

fn profiles_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("icegate").join("profiles.toml"))
}

fn profile(name: Option<&str>) -> Outcome<Profile> {
    let Some(path) = profiles_path() else { return Ok(Profile::default()) };
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(&path) {
        use std::os::unix::fs::PermissionsExt;
        // It holds client secrets: readable by its owner only, as ssh keys are.
        if meta.permissions().mode() & 0o077 != 0 {
            eprintln!("icegate: warning: {} is readable by others than its owner (chmod 600 it)", path.display());
        }
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(_) if name.is_none() => return Ok(Profile::default()),
        Err(e) => return Err(Failure(format!("{}: {e}", path.display()))),
    };
    let mut profiles: BTreeMap<String, Profile> =
        toml::from_str(&text).map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    let wanted = name.unwrap_or("default");
    match profiles.remove(wanted) {
        Some(profile) => Ok(profile),
        None if name.is_none() => Ok(Profile::default()),
        None => Err(Failure(format!("no profile [{wanted}] in {}", path.display()))),
    }
}

/// A signed-in session with the server.
pub struct Client {
    http: reqwest::Client,
    url: String,
    credentials: Option<(String, String)>,
    token: Mutex<Option<(String, Instant)>>,
    pub output: Output,
}

impl Client {
    pub fn new(connection: &Connection) -> Outcome<Self> {
        let profile = profile(connection.profile.as_deref())?;
        let url = connection
            .url
            .clone()
            .or(profile.url)
            .unwrap_or_else(|| "http://127.0.0.1:8181".to_owned())
            .trim_end_matches('/')
            .to_owned();
        let id = connection.client_id.clone().or(profile.client_id);
        let secret = connection.client_secret.clone().or(profile.client_secret);
        let credentials = match (id, secret) {
            (Some(id), Some(secret)) => Some((id, secret)),
            (None, None) => None,
            _ => return Err(Failure("give both a client id and a client secret, or neither".into())),
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| Failure(format!("an HTTP client: {e}")))?;
        Ok(Self { http, url, credentials, token: Mutex::new(None), output: connection.output })
    }

    /// A token for the credentials (fetched once, again when it expires); `None` without them.
    async fn token(&self, fresh: bool) -> Outcome<Option<String>> {
        let Some((id, secret)) = &self.credentials else { return Ok(None) };
        let mut held = self.token.lock().await;
        if !fresh
            && let Some((token, until)) = held.as_ref()
            && Instant::now() < *until
        {
            return Ok(Some(token.clone()));
        }
        let form =
            [("grant_type", "client_credentials"), ("client_id", id.as_str()), ("client_secret", secret.as_str())];
        let response = self
            .http
            .post(format!("{}/v1/oauth/tokens", self.url))
            .form(&form)
            .send()
            .await
            .map_err(|e| Failure(format!("cannot reach {}: {e}", self.url)))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let why = body["error_description"].as_str().or_else(|| body["error"].as_str()).unwrap_or("refused");
            return Err(Failure(format!("signing in failed ({status}): {why}")));
        }
        let token = body["access_token"].as_str().unwrap_or_default().to_owned();
        let lifetime = body["expires_in"].as_u64().unwrap_or(300).saturating_sub(30).max(1);
        *held = Some((token.clone(), Instant::now() + Duration::from_secs(lifetime)));
        Ok(Some(token))
    }

    /// Calls `path` with `body`; the answer as `T` (`()`-like answers: use `Value`).
    pub async fn call<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Outcome<T> {
        let mut fresh = false;
        loop {
            let mut request = self.http.request(method.clone(), format!("{}{path}", self.url));
            if let Some(token) = self.token(fresh).await? {
                request = request.bearer_auth(token);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await.map_err(|e| Failure(format!("cannot reach {}: {e}", self.url)))?;
            let status = response.status();
            // A token that expired early (the server restarted with a new key): once more, afresh.
            if status == StatusCode::UNAUTHORIZED && !fresh && self.credentials.is_some() {
                fresh = true;
                continue;
            }
            let bytes = response.bytes().await.map_err(|e| Failure(format!("reading the answer: {e}")))?;
            if !status.is_success() {
                let message = serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(500).collect());
                return Err(Failure(format!("{} {}", status.as_u16(), message)));
            }
            let bytes: &[u8] = if bytes.is_empty() { b"null" } else { &bytes };
            return serde_json::from_slice(bytes).map_err(|e| Failure(format!("an unexpected answer to {path}: {e}")));
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Outcome<T> {
        self.call::<T, ()>(Method::GET, path, None).await
    }

    pub async fn post<T: DeserializeOwned, B: Serialize + ?Sized>(&self, path: &str, body: &B) -> Outcome<T> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Outcome<Value> {
        self.call::<Value, ()>(Method::DELETE, path, None).await
    }

    /// The `/v1` prefix of `warehouse`.
    pub async fn prefix(&self, warehouse: &str) -> Outcome<String> {
        let config: Value = self.get(&format!("/v1/config?warehouse={}", encode(warehouse))).await?;
        Ok(config["overrides"]["prefix"]
            .as_str()
            .or_else(|| config["defaults"]["prefix"].as_str())
            .unwrap_or_default()
            .to_owned())
    }
}

/// One path segment or query value, percent-encoded.
pub fn encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A namespace in a `/v1` path: its levels joined by the unit separator, encoded.
pub fn namespace_path(levels: &[String]) -> String {
    levels.iter().map(|l| encode(l)).collect::<Vec<_>>().join("%1F")
}
