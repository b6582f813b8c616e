//! Configuration: built-in defaults < TOML file (`--config`) < environment
//! (`ICEGATE__SECTION__KEY`) < command-line flags. Unknown keys and bad values stop start-up
//! with a message naming the key and where it came from. Every key is documented in
//! `docs/configuration.md`; keep the two in step.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the embedded default keeps its SQLite database and warehouse files.
    pub data_dir: PathBuf,
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub catalog: CatalogConfig,
    pub auth: AuthConfig,
    pub secrets: SecretsConfig,
    pub storage: StorageConfig,
    pub governance: GovernanceConfig,
    pub audit: AuditConfig,
    pub lifecycle: LifecycleConfig,
    pub adoption: AdoptionConfig,
    pub log: LogConfig,
}

/// Adopting Parquet datasets in place (docs/adoption.md): the server's bounds on each run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdoptionConfig {
    /// Files a run lists at most; a larger source is refused (adopt it one prefix at a time).
    pub max_files: usize,
    /// The largest Parquet footer read; a file with a larger one is skipped and named.
    pub max_footer_bytes: u64,
    /// Footers read at once (ranged reads).
    pub footer_concurrency: usize,
    /// A first run over more files than this is queued as a task (the request answers 202).
    pub inline_files: usize,
    /// How often a continuous adoption re-syncs, unless it says.
    #[serde(with = "humantime_serde")]
    pub sync_interval: Duration,
    /// The floor under every adoption's sync interval.
    #[serde(with = "humantime_serde")]
    pub min_sync_interval: Duration,
}

impl Default for AdoptionConfig {
    fn default() -> Self {
        let d = icegate_catalog::adoption::AdoptionDefaults::default();
        Self {
            max_files: d.max_files,
            max_footer_bytes: d.max_footer_bytes,
            footer_concurrency: d.concurrency,
            inline_files: d.inline_files,
            sync_interval: d.sync_interval,
            min_sync_interval: d.min_sync_interval,
        }
    }
}

impl AdoptionConfig {
    pub fn defaults(&self) -> icegate_catalog::adoption::AdoptionDefaults {
        icegate_catalog::adoption::AdoptionDefaults {
            max_files: self.max_files,
            max_footer_bytes: self.max_footer_bytes,
            concurrency: self.footer_concurrency,
            inline_files: self.inline_files,
            sync_interval: self.sync_interval,
            min_sync_interval: self.min_sync_interval,
        }
    }
}

/// Table lifecycle run by the catalog (docs/lifecycle.md).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LifecycleConfig {
    pub soft_delete: SoftDeleteConfig,
    pub purge: PurgeConfig,
    pub orphan: OrphanConfig,
    /// How often the lifecycle sweep runs: deleted entries past their hold go, due purges are
    /// queued.
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
    /// How long a worker's claim on a task lasts without its heartbeat (renewed at a third of
    /// it): how soon another replica takes up the task of a worker that died.
    #[serde(with = "humantime_serde")]
    pub task_lease: Duration,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            soft_delete: SoftDeleteConfig::default(),
            purge: PurgeConfig::default(),
            orphan: OrphanConfig::default(),
            sweep_interval: Duration::from_secs(600),
            task_lease: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SoftDeleteConfig {
    /// How long a dropped table or view stays restorable (`0s`: drops are final). A warehouse
    /// setting or namespace property `lifecycle.soft-delete.hold` overrides it.
    #[serde(with = "humantime_serde")]
    pub hold: Duration,
}

impl Default for SoftDeleteConfig {
    fn default() -> Self {
        Self { hold: Duration::from_secs(7 * 86_400) }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PurgeConfig {
    /// How long the purge of a table dropped with `purgeRequested=true` waits (undrop works
    /// meanwhile). A warehouse setting or namespace property `lifecycle.purge.delay` overrides it.
    #[serde(with = "humantime_serde")]
    pub delay: Duration,
}

/// Orphan removal (docs/lifecycle.md): warehouse settings and namespace properties
/// `lifecycle.orphan.*` override the first two.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OrphanConfig {
    /// How old an unreferenced file must be before it is quarantined.
    #[serde(with = "humantime_serde")]
    pub older_than: Duration,
    /// How long a quarantined file waits (restorable) before it is deleted.
    #[serde(with = "humantime_serde")]
    pub quarantine: Duration,
    /// No policy makes `older-than` shorter than this: a younger file may belong to a commit
    /// still being written.
    #[serde(with = "humantime_serde")]
    pub min_older_than: Duration,
    /// The floor under every `quarantine` (the window to restore a quarantined file).
    #[serde(with = "humantime_serde")]
    pub min_quarantine: Duration,
    /// The floor under every `interval` (each run lists the table's storage).
    #[serde(with = "humantime_serde")]
    pub min_interval: Duration,
}

impl Default for OrphanConfig {
    fn default() -> Self {
        let defaults = icegate_catalog::maintenance::OrphanDefaults::default();
        Self {
            older_than: defaults.older_than,
            quarantine: defaults.quarantine,
            min_older_than: defaults.min_older_than,
            min_quarantine: defaults.min_quarantine,
            min_interval: defaults.min_interval,
        }
    }
}

/// The audit trail outside the database (docs/governance.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Records older than this are exported to `checkpoint.location`, checkpointed and removed
    /// from the database (unset: kept forever). Needs `checkpoint.location`.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub retention: Option<Duration>,
    pub checkpoint: AuditCheckpointConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditCheckpointConfig {
    /// `s3://bucket/prefix` (with S3 Object Lock and a default retention, where available) or
    /// `file:///path`: where checkpoints of the chain, and retention's exports, are written.
    pub location: Option<String>,
    /// For an S3-compatible store: its endpoint (`http(s)://host:port`).
    pub endpoint: Option<String>,
    /// The bucket's region (else the environment's).
    pub region: Option<String>,
    /// How often the chain's head is checkpointed (and retention runs).
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

impl Default for AuditCheckpointConfig {
    fn default() -> Self {
        Self { location: None, endpoint: None, region: None, interval: Duration::from_secs(3600) }
    }
}

/// Preventative controls (docs/governance.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GovernanceConfig {
    /// Refuse to run unauthenticated, to vend `static` keys, or to let two warehouses share a
    /// storage identity (an STS role or a static access key): at start-up (naming what breaks
    /// it) and for every storage profile made afterwards.
    pub strict: bool,
    pub hold: HoldConfig,
}

/// Legal holds (docs/governance.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HoldConfig {
    /// Lifting a legal hold takes two different admins: one asks (`DELETE` answers 202), a
    /// second approves (`DELETE` again: 204).
    pub two_person: bool,
}

/// Object storage settings that only the operator may choose.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Endpoints (scheme, host and port) a warehouse admin may name in a storage profile's
    /// `endpoint` or `sts.endpoint`; any other needs admin on the server.
    pub allowed_endpoints: Vec<String>,
    /// `file://` warehouses: sync each metadata file and its directory entry to disk before the
    /// commit that references it is acknowledged (as an object store's PUT is durable).
    pub sync_local_files: bool,
}

impl Config {
    /// The configuration as the start-up's audit record shows it: every setting, with secrets
    /// replaced by whether they are set (and a database URL's password removed), so neither the
    /// record nor its digest reveals or helps guess a secret.
    pub fn audit_view(&self) -> serde_json::Value {
        let mut view = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        let set = |value: &serde_json::Value| serde_json::Value::Bool(!value.is_null());
        for (section, key) in
            [("secrets", "encryption_key"), ("auth", "token_signing_key"), ("auth", "bootstrap_client_secret")]
        {
            if let Some(value) = view.get_mut(section).and_then(|s| s.get_mut(key)) {
                *value = set(value);
            }
        }
        redact_urls(&mut view);
        view
    }

    /// SHA-256 (hex) of [`audit_view`](Self::audit_view)'s text: two start-ups with the same
    /// digest ran with the same settings.
    pub fn audit_digest(&self) -> String {
        use sha2::Digest;
        let text = self.audit_view().to_string();
        sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Every URL in `value` without what may be a secret: a password (`user:password@`) and the
/// values of query parameters that may hold one (`password`, `secret`, `token`, `key`, ...).
fn redact_urls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) => {
            let Ok(mut url) = url::Url::parse(text) else { return };
            if url.cannot_be_a_base() {
                return;
            }
            let mut changed = false;
            if url.password().is_some() {
                let _ = url.set_password(Some("redacted"));
                changed = true;
            }
            if url.query().is_some() {
                let secretive = |key: &str| {
                    let key = key.to_ascii_lowercase();
                    ["pass", "secret", "token", "key", "credential", "auth", "sig"].iter().any(|s| key.contains(s))
                };
                let pairs: Vec<(String, String)> = url
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if secretive(&k) { "redacted".to_owned() } else { v.into_owned() };
                        (k.into_owned(), v)
                    })
                    .collect();
                if pairs.iter().any(|(k, _)| secretive(k)) {
                    url.query_pairs_mut().clear().extend_pairs(pairs);
                    changed = true;
                }
            }
            if changed {
                *text = url.to_string();
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact_urls),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(redact_urls),
        _ => {}
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self { allowed_endpoints: Vec::new(), sync_local_files: true }
    }
}

/// Keys for secrets icegate stores (storage profile credentials).
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsConfig {
    /// 32 random bytes, base64 (`openssl rand -base64 32`): AES-256-GCM key that seals storage
    /// credentials in the database. Required to store a profile with static keys.
    pub encryption_key: Option<String>,
}

impl std::fmt::Debug for SecretsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsConfig")
            .field("encryption_key", &self.encryption_key.as_ref().map(|_| "**redacted**"))
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    None,
    Required,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `none` (every request may do everything; loopback only unless
    /// `allow_unauthenticated_remote`) or `required`.
    pub mode: AuthMode,
    /// Serve without authentication on a non-loopback address anyway.
    pub allow_unauthenticated_remote: bool,
    /// HS256 key for icegate-issued tokens (at least 32 characters); unset: one generated once
    /// and shared by every replica through the database.
    pub token_signing_key: Option<String>,
    #[serde(with = "humantime_serde")]
    pub token_lifetime: Duration,
    pub token_issuer: String,
    pub token_audience: String,
    #[serde(with = "humantime_serde")]
    pub clock_skew: Duration,
    /// Client id and secret of an `admin` principal created at start-up if it does not exist.
    pub bootstrap_client_id: Option<String>,
    pub bootstrap_client_secret: Option<String>,
    /// External OpenID Connect issuers whose tokens are accepted too (`[[auth.oidc]]` tables).
    pub oidc: Vec<icegate_api::oidc::OidcIssuerConfig>,
    /// How long an authorization decision (what a principal holds on an object) is reused.
    #[serde(with = "humantime_serde")]
    pub authorization_cache_ttl: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::None,
            allow_unauthenticated_remote: false,
            token_signing_key: None,
            token_lifetime: Duration::from_secs(3600),
            token_issuer: "icegate".into(),
            token_audience: "icegate".into(),
            clock_skew: Duration::from_secs(60),
            bootstrap_client_id: None,
            bootstrap_client_secret: None,
            oidc: Vec::new(),
            authorization_cache_ttl: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    pub max_body_bytes: usize,
    /// Memory large request bodies may take while parsed and handled (0: no bound).
    pub request_memory_bytes: u64,
    pub max_header_bytes: usize,
    /// Requests handled at once; more are answered with 503 + Retry-After (0: no bound).
    pub max_in_flight_requests: usize,
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// A connection that has not sent a complete request head within this is closed.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// The URL clients reach the catalog at (`https://catalog.example.com`), for endpoints it
    /// hands out (remote signing, credential refresh). Unset: taken from each request's Host.
    pub public_url: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `postgres://...` or `sqlite://...`; unset means SQLite at `<data_dir>/catalog.db`.
    pub url: Option<String>,
    pub max_connections: u32,
    #[serde(with = "humantime_serde")]
    pub acquire_timeout: Duration,
    pub run_migrations: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogConfig {
    /// The warehouse `/v1/config` answers for when the client names none; empty for none.
    pub default_warehouse: Option<String>,
    /// Create `default_warehouse` at start-up when it does not exist. Unset: yes on SQLite; on
    /// PostgreSQL (a deployment of replicas, where a `file://` root under one replica's working
    /// directory is no warehouse) only when `default_warehouse_root` is set.
    pub create_default_warehouse: Option<bool>,
    /// Storage root for that warehouse; unset means `file://<data_dir>/warehouse`.
    pub default_warehouse_root: Option<String>,
    /// How long a client may retry a mutation with the same `Idempotency-Key`.
    #[serde(with = "humantime_serde")]
    pub idempotency_key_lifetime: Duration,
    /// Bytes of table metadata documents kept in memory by metadata file (0: none).
    pub metadata_cache_bytes: u64,
    /// Memory that commits in flight may hold at once (about twice their documents' size);
    /// commits past it wait for room (0: unbounded).
    pub commit_memory_bytes: u64,
    /// The largest metadata document read (after decompression), registered or committed.
    pub max_metadata_bytes: u64,
    /// What joins a namespace's levels in request paths and `parent` (one character; the unit
    /// separator, U+001F, by default, which is always accepted too). Advertised in `/v1/config`.
    pub namespace_separator: String,
    /// What a schema may cost before it is built (`[catalog.schema_limits]`).
    pub schema_limits: SchemaLimitsConfig,
    /// Requirements and updates one table's or view's change may carry.
    pub max_updates_per_commit: usize,
}

/// Bounds on schemas, checked on their JSON before anything is built (see
/// `icegate_catalog::schema_cost`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaLimitsConfig {
    /// Fields of one schema, nested ones included.
    pub max_fields: u64,
    /// Levels of nesting of a schema's types.
    pub max_depth: u32,
    /// Bytes of one field's name.
    pub max_name_bytes: u64,
    /// Bytes of all full (dotted) field names of one document's or request's schemas together.
    pub max_full_name_bytes: u64,
    /// What building one document's or request's schemas may take, by the walk's estimate.
    pub max_build_bytes: u64,
}

impl Default for SchemaLimitsConfig {
    fn default() -> Self {
        let limits = icegate_catalog::schema_cost::SchemaLimits::default();
        Self {
            max_fields: limits.max_fields,
            max_depth: limits.max_depth,
            max_name_bytes: limits.max_name_bytes,
            max_full_name_bytes: limits.max_full_name_bytes,
            max_build_bytes: limits.max_build_bytes,
        }
    }
}

impl SchemaLimitsConfig {
    pub fn limits(&self) -> icegate_catalog::schema_cost::SchemaLimits {
        icegate_catalog::schema_cost::SchemaLimits {
            max_fields: self.max_fields,
            max_depth: self.max_depth,
            max_name_bytes: self.max_name_bytes,
            max_full_name_bytes: self.max_full_name_bytes,
            max_build_bytes: self.max_build_bytes,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `icegate=debug,sqlx=warn`; `RUST_LOG` wins over it.
    pub level: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./icegate-data"),
            server: ServerConfig::default(),
            database: DatabaseConfig::default(),
            catalog: CatalogConfig::default(),
            auth: AuthConfig::default(),
            secrets: SecretsConfig::default(),
            storage: StorageConfig::default(),
            governance: GovernanceConfig::default(),
            audit: AuditConfig::default(),
            lifecycle: LifecycleConfig::default(),
            adoption: AdoptionConfig::default(),
            log: LogConfig::default(),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8181)),
            request_timeout: Duration::from_secs(30),
            max_body_bytes: 16 * 1024 * 1024,
            request_memory_bytes: 128 * 1024 * 1024,
            max_header_bytes: 64 * 1024,
            max_in_flight_requests: 128,
            shutdown_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            public_url: None,
        }
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self { url: None, max_connections: 16, acquire_timeout: Duration::from_secs(5), run_migrations: true }
    }
}

impl Default for CatalogConfig {
    fn default() -> Self {
        Self {
            default_warehouse: Some("default".into()),
            create_default_warehouse: None,
            default_warehouse_root: None,
            idempotency_key_lifetime: Duration::from_secs(30 * 60),
            metadata_cache_bytes: icegate_catalog::service::DEFAULT_METADATA_CACHE_BYTES,
            commit_memory_bytes: icegate_catalog::service::DEFAULT_COMMIT_MEMORY_BYTES,
            max_metadata_bytes: icegate_catalog::service::DEFAULT_MAX_METADATA_BYTES,
            namespace_separator: "\u{1f}".into(),
            schema_limits: SchemaLimitsConfig::default(),
            max_updates_per_commit: icegate_catalog::service::DEFAULT_MAX_UPDATES,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { format: LogFormat::Text, level: "info".into() }
    }
}

/// Values given on the command line; each one set overrides every other source.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub database_url: Option<String>,
    pub no_migrate: bool,
    pub insecure_no_auth: bool,
    pub log_format: Option<LogFormat>,
}

/// The flags every subcommand that reads the configuration takes.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ConfigArgs {
    /// TOML configuration file.
    #[arg(long, env = "ICEGATE_CONFIG", value_name = "FILE", hide_env_values = true)]
    pub config: Option<PathBuf>,
    /// Directory of the embedded default's database and warehouse (`data_dir`).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// `postgres://...` or `sqlite://...` (`database.url`).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// How log lines are written (`log.format`).
    #[arg(long, value_name = "FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
}

/// `icegate serve`'s flags.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: ConfigArgs,
    /// Address to listen on (`server.listen`).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Do not apply migrations at start-up (`database.run_migrations = false`).
    #[arg(long)]
    pub no_migrate: bool,
    /// Serve without authentication even on a non-loopback address
    /// (`auth.allow_unauthenticated_remote = true`). Never in production.
    #[arg(long)]
    pub insecure_no_auth: bool,
}

impl ConfigArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            config: self.config.clone(),
            data_dir: self.data_dir.clone(),
            database_url: self.database_url.clone(),
            log_format: self.log_format,
            ..Overrides::default()
        }
    }
}

impl ServeArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen,
            no_migrate: self.no_migrate,
            insecure_no_auth: self.insecure_no_auth,
            ..self.common.overrides()
        }
    }
}

/// Loads the configuration from every source, in order of precedence.
pub fn load(overrides: &Overrides) -> anyhow::Result<Config> {
    let mut figment = Figment::from(Serialized::defaults(Config::default()));
    if let Some(path) = &overrides.config {
        if !path.is_file() {
            bail!("configuration file {} does not exist", path.display());
        }
        figment = figment.merge(Toml::file_exact(path));
    }
    figment = figment.merge(Env::prefixed("ICEGATE__").split("__"));
    if let Some(dir) = &overrides.data_dir {
        figment = figment.merge(("data_dir", dir));
    }
    if let Some(listen) = overrides.listen {
        figment = figment.merge(("server.listen", listen.to_string()));
    }
    if let Some(url) = &overrides.database_url {
        figment = figment.merge(("database.url", url));
    }
    if overrides.no_migrate {
        figment = figment.merge(("database.run_migrations", false));
    }
    if overrides.insecure_no_auth {
        figment = figment.merge(("auth.allow_unauthenticated_remote", true));
    }
    if let Some(format) = overrides.log_format {
        figment = figment.merge(("log.format", format));
    }
    let mut config: Config = figment.extract().map_err(describe)?;
    config.data_dir = std::path::absolute(&config.data_dir).context("resolving data_dir")?;
    // TOML has no null: an empty name is how a file or the environment says "no default".
    if config.catalog.default_warehouse.as_deref() == Some("") {
        config.catalog.default_warehouse = None;
    }
    config.validate()?;
    Ok(config)
}

/// One line per problem: the key, what is wrong, and where the value came from (the exact
/// environment variable, or the file).
fn describe(errors: figment::Error) -> anyhow::Error {
    let lines: Vec<String> = errors
        .into_iter()
        .map(|e| {
            let key = e.path.join(".").to_lowercase();
            let source = match &e.metadata {
                Some(m) if m.name.contains("environment") => {
                    format!("environment variable ICEGATE__{}", e.path.join("__").to_uppercase())
                }
                Some(m) => match &m.source {
                    Some(source) => format!("{} {source}", m.name),
                    // Flags are merged as (key, value) pairs, which carry no source.
                    None if m.name.starts_with('(') => "the command line".to_owned(),
                    None => m.name.to_string(),
                },
                None => "unknown source".to_owned(),
            };
            let key = if key.is_empty() { "(top level)".to_owned() } else { key };
            // figment quotes a list of expected values that it has quoted already.
            let what = e.kind.to_string().replace("``", "`");
            format!("  - {key}: {what} (from {source})")
        })
        .collect();
    anyhow::anyhow!("invalid configuration:\n{}", lines.join("\n"))
}

impl Config {
    fn validate(&self) -> anyhow::Result<()> {
        if let Err(why) = icegate_catalog::storage::SecretCipher::from_base64(self.secrets.encryption_key.as_deref()) {
            bail!("invalid configuration: secrets.encryption_key {why}");
        }
        if let Some(url) = &self.server.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            bail!("invalid configuration: server.public_url must be an http(s) URL, got {url:?}");
        }
        // Issuers name their principals `<user>@<suffix>`: two issuers with one suffix (two realms
        // on one host, say) would share names, first come first served.
        let mut suffixes = std::collections::HashSet::new();
        for issuer in &self.auth.oidc {
            let suffix = issuer.principal_suffix();
            // Names are `<subject>@<suffix>`: with an `@` in a suffix, `s@y` of issuer `x` and
            // `s` of issuer `y@x` would be one name.
            if suffix.contains('@') || suffix.is_empty() {
                bail!("invalid configuration: auth.oidc name {suffix:?} must be non-empty and contain no `@`");
            }
            if !suffixes.insert(suffix.clone()) {
                bail!(
                    "invalid configuration: two auth.oidc issuers name their principals `<user>@{suffix}`; \
                     give each a distinct `name`"
                );
            }
        }
        // The console's sign-in through an issuer comes back to `<public_url>/ui/oidc/callback/<name>`:
        // the one address the issuer has registered (never one taken from a request's Host).
        if let Some(issuer) = self.auth.oidc.iter().find(|i| i.console_client_id.is_some())
            && self.server.public_url.is_none()
        {
            bail!(
                "invalid configuration: auth.oidc console_client_id (issuer {}) needs server.public_url, the \
                 address the console's sign-in returns to (<public_url>/ui/oidc/callback/<name>)",
                issuer.issuer
            );
        }
        for endpoint in &self.storage.allowed_endpoints {
            if let Err(why) = icegate_catalog::storage::AllowedEndpoint::parse(endpoint) {
                bail!("invalid configuration: storage.allowed_endpoints: {why}");
            }
        }
        let mut separator = self.catalog.namespace_separator.chars();
        match (separator.next(), separator.next()) {
            (Some(c), None) if c != '/' && c != '%' && !c.is_alphanumeric() && !c.is_whitespace() => {}
            _ => bail!(
                "invalid configuration: catalog.namespace_separator must be one character that is not a letter, \
                 digit, space, `/` or `%` (got {:?})",
                self.catalog.namespace_separator
            ),
        }
        if self.database.max_connections == 0 {
            bail!("invalid configuration: database.max_connections must be at least 1");
        }
        // Past 40 levels a stored document (three JSON levels per nested struct) would no longer
        // parse with the 128 levels JSON parsers allow.
        if !(1..=40).contains(&self.catalog.schema_limits.max_depth) {
            bail!("invalid configuration: catalog.schema_limits.max_depth must be between 1 and 40");
        }
        if self.server.max_body_bytes < 1024 {
            bail!("invalid configuration: server.max_body_bytes must be at least 1024");
        }
        if self.catalog.idempotency_key_lifetime < Duration::from_secs(60) {
            bail!("invalid configuration: catalog.idempotency_key_lifetime must be at least 1m");
        }
        if self.server.request_timeout.is_zero() {
            bail!("invalid configuration: server.request_timeout must be positive");
        }
        if self.audit.retention.is_some() && self.audit.checkpoint.location.is_none() {
            bail!(
                "invalid configuration: audit.retention removes records only after exporting them: set \
                 audit.checkpoint.location"
            );
        }
        if self.adoption.max_files == 0
            || self.adoption.footer_concurrency == 0
            || self.adoption.max_footer_bytes < 1024
        {
            bail!(
                "invalid configuration: adoption.max_files and adoption.footer_concurrency must be positive, \
                 adoption.max_footer_bytes at least 1024"
            );
        }
        if self.adoption.min_sync_interval.is_zero() || self.adoption.sync_interval < self.adoption.min_sync_interval {
            bail!(
                "invalid configuration: adoption.min_sync_interval must be positive and at most adoption.sync_interval"
            );
        }
        if self.lifecycle.task_lease < Duration::from_secs(3) {
            bail!("invalid configuration: lifecycle.task_lease must be at least 3s (a heartbeat every third of it)");
        }
        if self.lifecycle.sweep_interval.is_zero() {
            bail!("invalid configuration: lifecycle.sweep_interval must be positive");
        }
        for (key, period) in [
            ("lifecycle.soft_delete.hold", self.lifecycle.soft_delete.hold),
            ("lifecycle.purge.delay", self.lifecycle.purge.delay),
            ("lifecycle.orphan.older_than", self.lifecycle.orphan.older_than),
            ("lifecycle.orphan.quarantine", self.lifecycle.orphan.quarantine),
            ("lifecycle.orphan.min_older_than", self.lifecycle.orphan.min_older_than),
            ("lifecycle.orphan.min_quarantine", self.lifecycle.orphan.min_quarantine),
            ("lifecycle.orphan.min_interval", self.lifecycle.orphan.min_interval),
        ] {
            if period > icegate_catalog::lifecycle::MAX_PERIOD {
                bail!("invalid configuration: {key} is at most 3650 days");
            }
        }
        if self.audit.retention.is_some_and(|r| r.is_zero()) || self.audit.checkpoint.interval.is_zero() {
            bail!("invalid configuration: audit.retention and audit.checkpoint.interval must be positive");
        }
        if self.governance.strict && self.auth.mode == AuthMode::None {
            bail!(
                "invalid configuration: governance.strict refuses auth.mode = \"none\" (or --insecure-no-auth): \
                 set auth.mode = \"required\""
            );
        }
        if self.auth.mode == AuthMode::None
            && !self.server.listen.ip().is_loopback()
            && !self.auth.allow_unauthenticated_remote
        {
            bail!(
                "refusing to serve without authentication on {}: set auth.mode = \"required\" \
                 (ICEGATE__AUTH__MODE=required), listen on a loopback address, or pass --insecure-no-auth",
                self.server.listen
            );
        }
        if self.auth.bootstrap_client_id.is_some() != self.auth.bootstrap_client_secret.is_some() {
            bail!("invalid configuration: auth.bootstrap_client_id and auth.bootstrap_client_secret go together");
        }
        if self.auth.bootstrap_client_secret.as_ref().is_some_and(|s| s.len() < 16) {
            bail!("invalid configuration: auth.bootstrap_client_secret must be at least 16 characters");
        }
        if let Some(url) = &self.database.url {
            icegate_store::Database::parse(url).context("invalid configuration: database.url")?;
        }
        if let Some(name) = &self.catalog.default_warehouse {
            icegate_catalog::WarehouseName::parse(name)
                .map_err(|e| anyhow::anyhow!("invalid configuration: catalog.default_warehouse: {e}"))?;
        }
        if let Some(root) = &self.catalog.default_warehouse_root {
            icegate_catalog::StorageRoot::parse(root)
                .map_err(|e| anyhow::anyhow!("invalid configuration: catalog.default_warehouse_root: {e}"))?;
        }
        Ok(())
    }

    /// The database URL in effect: the configured one, or the embedded SQLite file.
    pub fn database_url(&self) -> String {
        match &self.database.url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}?mode=rwc", self.sqlite_path().display()),
        }
    }

    /// The embedded default's SQLite file.
    pub fn sqlite_path(&self) -> PathBuf {
        self.data_dir.join("catalog.db")
    }

    /// The default warehouse's storage root in effect.
    pub fn default_warehouse_root(&self) -> String {
        self.catalog
            .default_warehouse_root
            .clone()
            .unwrap_or_else(|| format!("file://{}", self.data_dir.join("warehouse").display()))
    }

    /// Whether start-up creates the default warehouse (see `catalog.create_default_warehouse`).
    pub fn creates_default_warehouse(&self) -> bool {
        self.catalog.default_warehouse.is_some()
            && self
                .catalog
                .create_default_warehouse
                .unwrap_or_else(|| !self.uses_postgres() || self.catalog.default_warehouse_root.is_some())
    }

    pub fn uses_postgres(&self) -> bool {
        self.database.url.as_deref().is_some_and(|url| url.starts_with("postgres"))
    }

    pub fn uses_embedded_database(&self) -> bool {
        self.database.url.is_none()
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment::Jail closures return figment::Error by design
mod tests {
    use super::*;
    use figment::Jail;

    fn overrides_with_file(path: &str) -> Overrides {
        Overrides { config: Some(PathBuf::from(path)), ..Overrides::default() }
    }

    #[test]
    fn defaults_are_the_embedded_catalog_on_loopback() {
        Jail::expect_with(|_jail| {
            let config = load(&Overrides::default()).unwrap();
            assert_eq!(config.server.listen.to_string(), "127.0.0.1:8181");
            assert!(config.data_dir.is_absolute());
            assert!(config.database_url().starts_with("sqlite://"));
            assert!(config.database_url().ends_with("icegate-data/catalog.db?mode=rwc"));
            assert!(config.default_warehouse_root().ends_with("icegate-data/warehouse"));
            assert_eq!(config.catalog.default_warehouse.as_deref(), Some("default"));
            Ok(())
        });
    }

    #[test]
    fn file_then_environment_then_flags_take_precedence() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "icegate.toml",
                r#"
                [server]
                listen = "0.0.0.0:9000"
                request_timeout = "5s"
                [database]
                url = "postgres://file/db"
                max_connections = 3
                "#,
            )?;
            jail.set_env("ICEGATE__DATABASE__MAX_CONNECTIONS", "7");
            jail.set_env("ICEGATE__SERVER__LISTEN", "127.0.0.1:9001");
            let mut overrides = overrides_with_file("icegate.toml");
            overrides.database_url = Some("postgres://flag/db".into());
            let config = load(&overrides).unwrap();
            assert_eq!(config.server.request_timeout, Duration::from_secs(5)); // file
            assert_eq!(config.database.max_connections, 7); // env over file
            assert_eq!(config.server.listen.to_string(), "127.0.0.1:9001"); // env over file
            assert_eq!(config.database.url.as_deref(), Some("postgres://flag/db")); // flag over file
            Ok(())
        });
    }

    #[test]
    fn an_unknown_key_in_the_file_is_named_in_the_error() {
        Jail::expect_with(|jail| {
            jail.create_file("icegate.toml", "[server]\nlisten_addr = \"0.0.0.0:1\"\n")?;
            let err = load(&overrides_with_file("icegate.toml")).unwrap_err().to_string();
            assert!(err.contains("listen_addr"), "{err}");
            assert!(err.contains("icegate.toml"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn an_unknown_environment_key_is_named_in_the_error() {
        Jail::expect_with(|jail| {
            jail.set_env("ICEGATE__DATABASE__URLL", "postgres://x/y");
            let err = load(&Overrides::default()).unwrap_err().to_string();
            assert!(err.contains("urll"), "{err}");
            assert!(err.contains("ICEGATE__DATABASE__URLL"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_bad_value_is_named_with_its_key() {
        Jail::expect_with(|jail| {
            jail.set_env("ICEGATE__DATABASE__MAX_CONNECTIONS", "many");
            let err = load(&Overrides::default()).unwrap_err().to_string();
            assert!(err.contains("max_connections"), "{err}");
            Ok(())
        });
        Jail::expect_with(|jail| {
            jail.set_env("ICEGATE__LOG__FORMAT", "xml");
            let err = load(&Overrides::default()).unwrap_err().to_string();
            assert!(err.contains("format"), "{err}");
            Ok(())
        });
        Jail::expect_with(|jail| {
            jail.set_env("ICEGATE__DATABASE__URL", "mysql://x/y");
            let err = load(&Overrides::default()).unwrap_err().to_string();
            assert!(err.contains("database.url"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn an_empty_default_warehouse_means_none() {
        Jail::expect_with(|jail| {
            jail.set_env("ICEGATE__CATALOG__DEFAULT_WAREHOUSE", "");
            assert_eq!(load(&Overrides::default()).unwrap().catalog.default_warehouse, None);
            Ok(())
        });
    }

    #[test]
    fn serving_a_routable_address_without_auth_is_refused_unless_insisted() {
        Jail::expect_with(|jail| {
            jail.set_env("ICEGATE__SERVER__LISTEN", "0.0.0.0:8181");
            let err = load(&Overrides::default()).unwrap_err().to_string();
            assert!(err.contains("refusing to serve without authentication"), "{err}");
            assert!(load(&Overrides { insecure_no_auth: true, ..Overrides::default() }).is_ok());
            jail.set_env("ICEGATE__AUTH__MODE", "required");
            assert!(load(&Overrides::default()).is_ok());
            Ok(())
        });
    }

    #[test]
    fn a_missing_config_file_is_an_error() {
        let err = load(&overrides_with_file("/nonexistent/icegate.toml")).unwrap_err().to_string();
        assert!(err.contains("does not exist"), "{err}");
    }

    #[test]
    fn the_consoles_sign_in_through_an_issuer_needs_the_public_url() {
        Jail::expect_with(|jail| {
            let issuer = r#"
                [[auth.oidc]]
                issuer = "https://login.example.com"
                audience = "icegate"
                console_client_id = "icegate-console"
                "#;
            jail.create_file("icegate.toml", &format!("[auth]\nmode = \"required\"\n{issuer}"))?;
            let err = load(&overrides_with_file("icegate.toml")).unwrap_err().to_string();
            assert!(err.contains("needs server.public_url"), "{err}");
            jail.create_file(
                "icegate.toml",
                &format!(
                    "[server]\npublic_url = \"https://catalog.example.com\"\n[auth]\nmode = \"required\"\n{issuer}"
                ),
            )?;
            let config = load(&overrides_with_file("icegate.toml")).unwrap();
            assert_eq!(config.auth.oidc[0].console_client_id.as_deref(), Some("icegate-console"));
            Ok(())
        });
    }

    #[test]
    fn an_issuer_name_with_an_at_sign_is_refused() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "icegate.toml",
                r#"
                [auth]
                mode = "required"
                [[auth.oidc]]
                issuer = "https://login.example.com"
                audience = "icegate"
                name = "y@x"
                "#,
            )?;
            let err = load(&overrides_with_file("icegate.toml")).unwrap_err().to_string();
            assert!(err.contains("contain no `@`"), "{err}");
            Ok(())
        });
    }
}

#[cfg(test)]
mod audit_view_tests {
    use super::*;

    #[test]
    fn the_start_up_record_shows_no_secret() {
        let mut config = Config::default();
        config.database.url = Some("postgres://icegate:hunter2@db:5432/catalog?sslmode=require&password=pw2".into());
        config.secrets.encryption_key = Some("a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleTE=".into());
        config.auth.bootstrap_client_secret = Some("boot-secret".into());
        config.auth.token_signing_key = Some("signing-key-material".into());
        let text = config.audit_view().to_string();
        for secret in ["hunter2", "pw2", "a2V5LWtl", "boot-secret", "signing-key-material"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("sslmode=require"), "{text}");
        assert_eq!(config.audit_view()["secrets"]["encryption_key"], serde_json::Value::Bool(true));
        assert_eq!(config.audit_digest().len(), 64);
    }
}
