//! `icegate`: the Iceberg REST catalog server binary. Parses the command line and the
//! configuration, wires the store, the catalog service and the HTTP app together, and runs them.

mod cli;
mod config;
mod server;
mod sources;

use icegate_catalog::store::prelude::*;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use icegate_api::{HttpOptions, Metrics, Security};
use icegate_catalog::access::{AccessStore, Authorizer};
use icegate_catalog::storage::SecretCipher;
use icegate_catalog::tokens::{AuthSettings, Authenticator};
use icegate_catalog::{Catalog, CatalogStore, RequestContext, StorageRoot, WarehouseName};
use icegate_store::{SqlStore, StoreOptions};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

use crate::config::{AuthMode, Config, ConfigArgs, LogFormat, ServeArgs};

#[derive(Parser)]
#[command(name = "icegate", version, about = "An Apache Iceberg REST catalog server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the catalog. With no configuration: SQLite under ./icegate-data, a warehouse named
    /// `default`, listening on 127.0.0.1:8181.
    Serve(ServeArgs),
    /// Apply pending database migrations and exit.
    Migrate(ConfigArgs),
    /// Create the `admin` principal (server admin) and print its credentials once.
    Bootstrap(BootstrapArgs),
    /// Check the configuration (file, environment and flags) without starting anything: exit 0
    /// when it is valid, 1 with every problem named.
    CheckConfig(ConfigArgs),
    /// The audit trail: `icegate audit verify` walks its hash chain (run with the configuration
    /// `serve` runs with) and exits 1 naming the first broken link.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// The operators' commands, against a running server.
    #[command(flatten)]
    Remote(cli::Remote),
    /// Print a shell completion script (`icegate completions bash > /etc/bash_completion.d/icegate`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the CLI's reference (docs/cli.md) from its own help.
    #[command(hide = true)]
    CliDocs {
        #[arg(long, default_value = "docs/cli.md")]
        out: std::path::PathBuf,
    },
    /// Write the generated OpenAPI documents (Iceberg REST surface and management API).
    Openapi {
        /// Directory to write `iceberg-rest.yaml` and `management.yaml` into.
        #[arg(long, default_value = "openapi")]
        out: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Walk the audit chain from its first record: every sequence number present, every hash
    /// the link of the record before and its own, every searchable column its record's, and the
    /// chain's head where its last record is. Exit 0 when it holds, 1 at the first broken link.
    Verify(ConfigArgs),
    /// Write the records (optionally of a time range) as JSON Lines, one record a line in chain
    /// order, each with its sequence number, hash and exact text (for a SIEM, or an archive
    /// whose links can be checked without the server). Reads the database directly, like
    /// `verify`; records appended while it runs are left for the next export.
    Export(ExportArgs),
    /// Search the trail through a running server (`GET /management/v1/audit`; auditors and
    /// server admins).
    Search {
        #[command(flatten)]
        connection: cli::Connection,
        #[command(flatten)]
        filters: cli::AuditSearch,
    },
}

#[derive(clap::Args)]
struct ExportArgs {
    #[command(flatten)]
    common: ConfigArgs,
    /// Records at or after this time: RFC 3339 (`2026-12-01T00:00:00Z`) or milliseconds since
    /// the Unix epoch.
    #[arg(long)]
    since: Option<String>,
    /// Records before this time (same forms).
    #[arg(long)]
    until: Option<String>,
    /// Only records numbered after this one (to continue an earlier export).
    #[arg(long)]
    after_seq: Option<i64>,
    /// The file to write (default: standard output).
    #[arg(long, short)]
    out: Option<std::path::PathBuf>,
}

/// A time given as RFC 3339 or as milliseconds since the epoch.
fn parse_time(flag: &str, value: &str) -> anyhow::Result<i64> {
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(ms);
    }
    let at = humantime_serde::re::humantime::parse_rfc3339_weak(value)
        .map_err(|e| anyhow::anyhow!("--{flag} {value:?}: not RFC 3339 nor milliseconds ({e})"))?;
    let ms =
        at.duration_since(std::time::UNIX_EPOCH).map_err(|_| anyhow::anyhow!("--{flag}: before 1970"))?.as_millis();
    Ok(i64::try_from(ms)?)
}

#[derive(clap::Args)]
struct BootstrapArgs {
    #[command(flatten)]
    common: ConfigArgs,
    /// Break-glass for whoever runs the server, when no one can administer the catalog any
    /// more: give the `admin` principal (created if missing) a new secret, and make it a member
    /// of the `admin` role holding `admin` on the server. Reads and writes the database
    /// directly; the old secret of `admin` stops working.
    #[arg(long)]
    recover: bool,
}

/// jemalloc rather than glibc's allocator: a catalog answers with documents of a few kilobytes,
/// and glibc consolidates its free lists on every allocation that size, a visible share of a
/// loadTable's cycles. Rather than mimalloc too: with a cache that turns over (small tables'
/// documents giving way to big ones) jemalloc stayed smaller at the same throughput
/// (docs/benchmarks.md, "Memory").
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read when it starts (`_RJEM_MALLOC_CONF` in the environment overrides
/// them): freed pages go back to the system a second after they fell free, returned by a
/// background thread rather than on a request's path.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    // The `iceberg` crate makes an error value for every element of a default value it parses,
    // even when parsing succeeds, and each captures a backtrace when backtraces are on: with
    // `RUST_BACKTRACE=1` in the environment, a request with a default of a few MB held a
    // worker for minutes. Library backtraces stay off unless asked for by name (panics still
    // print theirs under `RUST_BACKTRACE`).
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: no other thread exists yet (the runtime is built below).
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async {
        let outcome = match cli.command {
            // The operators' commands, against a running server: their own exit codes.
            Command::Remote(remote) => return remote.run().await,
            Command::Audit { command: AuditCommand::Search { connection, filters } } => {
                return cli::run(&connection, filters).await;
            }
            local => run_local(local).await,
        };
        match outcome {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("icegate: {err:#}");
                std::process::ExitCode::FAILURE
            }
        }
    })
}

/// The commands that run here: the server, and what works on its database or files directly.
async fn run_local(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve(config::load(&args.overrides())?).await,
        Command::Migrate(args) => migrate(config::load(&args.overrides())?).await,
        Command::Bootstrap(args) => bootstrap(config::load(&args.common.overrides())?, args.recover).await,
        Command::CheckConfig(args) => check_config(&config::load(&args.overrides())?),
        Command::Audit { command: AuditCommand::Verify(args) } => verify_audit(config::load(&args.overrides())?).await,
        Command::Audit { command: AuditCommand::Export(args) } => {
            export_audit(config::load(&args.common.overrides())?, &args).await
        }
        Command::Openapi { out } => write_openapi(&out),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "icegate", &mut std::io::stdout());
            Ok(())
        }
        Command::CliDocs { out } => Ok(std::fs::write(&out, cli_reference())?),
        // Run by `Remote::run` and `cli::run` (above), never here.
        Command::Remote(_) | Command::Audit { command: AuditCommand::Search { .. } } => {
            Err(anyhow::anyhow!("an operator's command runs against a server"))
        }
    }
}

fn init_logging(config: &Config) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(value) if !value.is_empty() => EnvFilter::try_new(value).context("invalid RUST_LOG")?,
        // PostgreSQL's notices (`relation "_sqlx_migrations" already exists, skipping` at every
        // start) are not news at the default level; RUST_LOG can still ask for them.
        _ => EnvFilter::try_new(&config.log.level)
            .context("invalid configuration: log.level")?
            .add_directive("sqlx::postgres::notice=warn".parse().expect("a valid directive")),
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match config.log.format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
    }
    Ok(())
}

fn store_options(config: &Config) -> StoreOptions {
    StoreOptions {
        url: config.database_url(),
        max_connections: config.database.max_connections,
        acquire_timeout: config.database.acquire_timeout,
    }
}

async fn migrate(config: Config) -> anyhow::Result<()> {
    init_logging(&config)?;
    let store = SqlStore::connect_lazy(&store_options(&config))?;
    store.check_connection().await?;
    store.migrate().await?;
    println!("icegate: migrations applied ({})", store.backend());
    store.close().await;
    Ok(())
}

async fn export_audit(config: Config, args: &ExportArgs) -> anyhow::Result<()> {
    use icegate_catalog::audit::{AuditFilter, AuditStore};
    use std::io::Write;
    init_logging(&config)?;
    let filter = AuditFilter {
        since_ms: args.since.as_deref().map(|v| parse_time("since", v)).transpose()?,
        until_ms: args.until.as_deref().map(|v| parse_time("until", v)).transpose()?,
        after_seq: args.after_seq,
        ..AuditFilter::default()
    };
    let store = SqlStore::connect_lazy(&store_options(&config))?;
    store.check_connection().await?;
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    // The end is fixed when the export begins: records appended meanwhile wait for the next one.
    let (head, _) = store.audit_head_now().await?;
    let mut filter = AuditFilter { until_seq: Some(head), ..filter };
    let mut written = 0u64;
    loop {
        let page = store.audit_records(&filter, 1000).await?;
        let Some(last) = page.last() else { break };
        filter.after_seq = Some(last.seq);
        for record in &page {
            writeln!(out, "{}", icegate_catalog::audit::export_line(record))?;
            written += 1;
        }
    }
    out.flush()?;
    store.close().await;
    eprintln!("icegate audit: {written} records exported (through record {head})");
    Ok(())
}

async fn verify_audit(config: Config) -> anyhow::Result<()> {
    init_logging(&config)?;
    let store = SqlStore::connect_lazy(&store_options(&config))?;
    store.check_connection().await?;
    let archive = match &config.audit.checkpoint.location {
        Some(location) => Some(
            icegate_storage::archive::ObjectArchive::open(
                location,
                config.audit.checkpoint.endpoint.as_deref(),
                config.audit.checkpoint.region.as_deref(),
            )
            .map_err(|e| anyhow::anyhow!("audit.checkpoint.location: {e}"))?,
        ),
        None => None,
    };
    // A server appending, checkpointing or cutting meanwhile can make one walk see a moment
    // between two steps: what is broken twice is broken.
    let mut outcome = check_audit(&store, archive.as_ref()).await;
    if matches!(outcome, Ok(Err(_))) {
        outcome = check_audit(&store, archive.as_ref()).await;
    }
    store.close().await;
    match outcome? {
        Ok(said) => {
            println!("icegate audit: {said}, the chain holds");
            Ok(())
        }
        Err((seq, why, held)) => anyhow::bail!("the audit chain breaks at record {seq}: {why} ({held})"),
    }
}

/// Walks the chain in the store and, with a checkpoint location, the archive and checkpoints:
/// what held, or where it breaks, why, and what held before.
async fn check_audit(
    store: &SqlStore,
    archive: Option<&icegate_storage::archive::ObjectArchive>,
) -> anyhow::Result<Result<String, (i64, String, String)>> {
    use icegate_catalog::audit::{AuditFilter, AuditStore};
    let check = store.verify_audit().await?;
    if let Some((seq, why)) = check.broken {
        return Ok(Err((seq, why, format!("{} records hold before it", check.records))));
    }
    let Some(archive) = archive else { return Ok(Ok(format!("{} records", check.records))) };
    let ends = store.audit_ends().await?;
    let hash_at = async |seq: i64| {
        let filter = AuditFilter { after_seq: Some(seq - 1), until_seq: Some(seq), ..AuditFilter::default() };
        Ok(store.audit_records(&filter, 1).await?.pop().map(|r| r.hash))
    };
    let found = icegate_catalog::audit_archive::verify(archive, &ends, hash_at).await?;
    let said = format!(
        "{} records in the database after record {}, {} archived at {}, {} checkpoints",
        check.records,
        ends.base.0,
        found.archived,
        icegate_catalog::audit_archive::ArchiveStore::describe(archive),
        found.checkpoints
    );
    Ok(match found.broken {
        None => Ok(said),
        Some((seq, why)) => Err((seq, why, said)),
    })
}

async fn bootstrap(config: Config, recover: bool) -> anyhow::Result<()> {
    init_logging(&config)?;
    let store = SqlStore::connect_lazy(&store_options(&config))?;
    store.check_connection().await?;
    if config.database.run_migrations {
        store.migrate().await?;
    }
    let (new_client_id, secret) = (icegate_catalog::tokens::new_client_id(), icegate_catalog::tokens::random_secret());
    let client_id = if recover {
        let client_id = icegate_catalog::tokens::recover_admin(&store, &new_client_id, &secret).await?;
        // Recorded in the audit trail (the system, job `bootstrap-recover`) and logged here.
        tracing::warn!(
            principal = "admin",
            client_id = %client_id,
            user = std::env::var("USER").unwrap_or_default(),
            "bootstrap --recover: the admin principal has a new secret and admin on the server"
        );
        println!("Recovered principal `admin` (server admin). Its new secret is shown only now:");
        client_id
    } else {
        if !icegate_catalog::tokens::bootstrap_admin(&store, &new_client_id, &secret).await? {
            let admins = icegate_catalog::access::AccessStore::server_admins(&store).await?;
            let hint = if admins.is_empty() {
                "no principal holds admin on the server any more; `icegate bootstrap --recover` gives `admin`                  a new secret and admin again"
            } else {
                "rotate its secret with POST /management/v1/principals/admin/rotate-secret, or, if no one can,                  run `icegate bootstrap --recover`"
            };
            anyhow::bail!("an `admin` principal exists already; {hint}");
        }
        println!("Created principal `admin` (server admin). Its secret is shown only now:");
        new_client_id
    };
    println!("  client id:     {client_id}");
    println!("  client secret: {secret}");
    println!();
    print_pyiceberg_snippet(
        &client_url(&config, config.server.listen),
        &config,
        Some(&format!("{client_id}:{secret}")),
    );
    store.close().await;
    Ok(())
}

fn check_config(config: &Config) -> anyhow::Result<()> {
    println!("icegate: the configuration is valid");
    println!(
        "  database: {}",
        if config.uses_embedded_database() {
            "embedded SQLite"
        } else if config.uses_postgres() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    );
    println!("  listen:   {}", config.server.listen);
    println!("  auth:     {}", if config.auth.mode == AuthMode::Required { "required" } else { "none" });
    Ok(())
}

/// Where clients reach this catalog: `server.public_url`, else `address` (the listen address; a
/// wildcard address as the loopback one).
fn client_url(config: &Config, mut address: std::net::SocketAddr) -> String {
    if let Some(url) = &config.server.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    if address.ip().is_unspecified() {
        address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{address}")
}

/// A PyIceberg snippet that works as pasted (with `credential` filled in, or its placeholder
/// named when authentication is required).
fn print_pyiceberg_snippet(url: &str, config: &Config, credential: Option<&str>) {
    let mut arguments = format!("\"icegate\", type=\"rest\", uri=\"{url}\"");
    match credential {
        Some(credential) => arguments.push_str(&format!(", credential=\"{credential}\"")),
        None if config.auth.mode == AuthMode::Required => {
            arguments.push_str(", credential=\"<client-id>:<client-secret>\"");
        }
        None => {}
    }
    let warehouse = config.catalog.default_warehouse.as_deref().filter(|_| config.creates_default_warehouse());
    if let Some(name) = warehouse {
        arguments.push_str(&format!(", warehouse=\"{name}\""));
    }
    println!("Connect with PyIceberg:");
    println!();
    println!("    from pyiceberg.catalog import load_catalog");
    println!("    catalog = load_catalog({arguments})");
    if warehouse.is_some() {
        println!("    catalog.create_namespace(\"demo\")");
    }
    println!();
    if credential.is_none() && config.auth.mode == AuthMode::Required {
        println!("(`icegate bootstrap` creates the first principal and prints its client id and secret.)");
        println!();
    }
}

async fn security(config: &Config, store: &SqlStore) -> anyhow::Result<Security> {
    let access: Arc<dyn AccessStore> = Arc::new(store.clone());
    if let (Some(id), Some(secret)) = (&config.auth.bootstrap_client_id, &config.auth.bootstrap_client_secret)
        && icegate_catalog::tokens::bootstrap_admin(access.as_ref(), id, secret).await?
    {
        tracing::info!(client_id = %id, "created the bootstrap admin principal");
    }
    let settings = AuthSettings {
        required: config.auth.mode == AuthMode::Required,
        issuer: config.auth.token_issuer.clone(),
        audience: config.auth.token_audience.clone(),
        token_lifetime: config.auth.token_lifetime,
        leeway: config.auth.clock_skew,
    };
    let authenticator = Authenticator::new(settings, access.clone(), config.auth.token_signing_key.clone())
        .await
        .context("setting up token signing")?;
    let oidc = (!config.auth.oidc.is_empty()).then(|| {
        Arc::new(icegate_api::oidc::OidcVerifier::new(config.auth.oidc.clone(), access.clone(), config.auth.clock_skew))
    });
    Ok(Security {
        authenticator: Arc::new(authenticator),
        authorizer: Arc::new(Authorizer::new(access).with_cache_ttl(config.auth.authorization_cache_ttl)),
        oidc,
    })
}

async fn serve(config: Config) -> anyhow::Result<()> {
    init_logging(&config)?;
    // `serve` owns a SQLite file (one server per file; table heads kept in memory).
    // One clock for everything that judges time (the store, the catalog, its workers).
    let clock = icegate_catalog::clock::system();
    let store = SqlStore::connect_owned(&store_options(&config))?.with_clock(clock.clone());
    store.check_connection().await?;
    if config.database.run_migrations {
        store.migrate().await?;
    }
    let default_warehouse = config.catalog.default_warehouse.as_deref().map(WarehouseName::parse).transpose()?;
    if let (Some(name), true) = (&default_warehouse, config.creates_default_warehouse()) {
        let root = StorageRoot::parse(&config.default_warehouse_root())?;
        if root.scheme() != "file" {
            anyhow::bail!(
                "catalog.default_warehouse_root must be a file:// root; create object-storage warehouses \
                 with their storage profile through POST /management/v1/warehouses"
            );
        }
        if let Some(dir) = root.local_path() {
            icegate_catalog::service::prepare_local_root(dir)
                .await
                .map_err(|e| anyhow::anyhow!("catalog.default_warehouse_root: {e}"))?;
        }
        store
            .ensure_warehouse(&RequestContext::system("start-up", None).write(), name, &root)
            .await
            .context("creating the default warehouse")?;
    }
    let security = security(&config, &store).await?;
    let tasks: Arc<dyn icegate_catalog::jobs::TaskStore> = Arc::new(store.clone());
    let store: Arc<dyn CatalogStore> = Arc::new(store);
    let cipher = SecretCipher::from_base64(config.secrets.encryption_key.as_deref())
        .map_err(|why| anyhow::anyhow!("secrets.encryption_key {why}"))?;
    let storage_metrics = icegate_storage::StorageMetrics::default();
    let storage = Arc::new(
        icegate_storage::ObjectStoreIo::with_cipher(cipher.clone(), storage_metrics.clone())
            .with_local_sync(config.storage.sync_local_files),
    );
    let job_metrics = icegate_catalog::jobs::JobMetrics::default();
    let catalog = Catalog::new(store.clone(), storage.clone(), default_warehouse.clone())
        .with_storage(cipher, storage.clone())
        .with_metadata_cache(config.catalog.metadata_cache_bytes)
        .with_commit_memory(config.catalog.commit_memory_bytes)
        .with_max_metadata_bytes(config.catalog.max_metadata_bytes)
        .with_schema_limits(config.catalog.schema_limits.limits())
        .with_max_updates(config.catalog.max_updates_per_commit)
        .with_clock(clock.clone())
        .with_strict_governance(config.governance.strict)
        .with_two_person_holds(config.governance.hold.two_person)
        .with_task_store(tasks.clone())
        .with_lifecycle(icegate_catalog::lifecycle::LifecycleDefaults {
            soft_delete_hold: config.lifecycle.soft_delete.hold,
            purge_delay: config.lifecycle.purge.delay,
        })
        .with_orphan_defaults(icegate_catalog::maintenance::OrphanDefaults {
            older_than: config.lifecycle.orphan.older_than,
            quarantine: config.lifecycle.orphan.quarantine,
            min_older_than: config.lifecycle.orphan.min_older_than,
            min_quarantine: config.lifecycle.orphan.min_quarantine,
            min_interval: config.lifecycle.orphan.min_interval,
        })
        .with_adoption_defaults(config.adoption.defaults())
        .with_migration_sources(Arc::new(sources::Sources))
        .with_public_url(config.server.public_url.clone())
        .with_namespace_separator(
            config.catalog.namespace_separator.chars().next().unwrap_or(icegate_api::UNIT_SEPARATOR),
        )
        .with_allowed_endpoints(
            config
                .storage
                .allowed_endpoints
                .iter()
                .map(|e| icegate_catalog::storage::AllowedEndpoint::parse(e))
                .collect::<Result<_, _>>()
                .map_err(|why| anyhow::anyhow!("storage.allowed_endpoints: {why}"))?,
        );
    // governance.strict: what is stored already must keep it too (what is made later is checked
    // as it is made).
    if config.governance.strict {
        let warehouses = store.list_warehouses(None).await?;
        let broken: Vec<String> = warehouses
            .iter()
            .filter_map(|w| {
                icegate_catalog::storage::segregation_problem(&w.name, &w.storage_profile, &warehouses)
                    .map(|why| format!("warehouse {}: {why}", w.name))
            })
            .collect();
        if !broken.is_empty() {
            anyhow::bail!(
                "governance.strict refuses to start: {} (change those storage profiles, or turn governance.strict off)",
                broken.join("; ")
            );
        }
    }
    // The start-up's record, with what it runs with: before anything is served.
    catalog
        .audit()
        .record_as(icegate_catalog::audit::RequestRecord {
            write: icegate_catalog::idempotency::WriteContext {
                actor: icegate_catalog::actors::Caller::System { job: "start-up".into(), task_id: None },
                operation: Some("startUp".into()),
                events: vec![icegate_catalog::audit::AuditEvent::Startup {
                    version: env!("CARGO_PKG_VERSION").into(),
                    config_digest: config.audit_digest(),
                    settings: config.audit_view(),
                }],
                ..icegate_catalog::idempotency::WriteContext::NONE
            },
            authenticated: true,
            status: None,
            answered: icegate_catalog::audit::Answered::Allowed,
        })
        .await
        .context("writing the start-up's audit record")?;
    // When grants were last used (access reviews): noted in memory, written every 30 s and at
    // shutdown.
    let (stop_usage, usage_stop) = tokio::sync::watch::channel(false);
    let usage_flush = security.authorizer.spawn_usage_flush(std::time::Duration::from_secs(30), usage_stop);
    let shared_catalog = std::sync::Arc::new(catalog.clone());
    let expiry =
        icegate_catalog::jobs::expire_snapshots::ExpireSnapshots::new(shared_catalog.clone(), job_metrics.clone());
    let orphans = icegate_catalog::jobs::orphans::RemoveOrphans::new(shared_catalog.clone(), job_metrics.clone());
    let adoption_sync = icegate_catalog::jobs::adopt::AdoptionSync::new(shared_catalog.clone());
    let migration_run = icegate_catalog::jobs::migrate::MigrationRun::new(shared_catalog.clone());
    let maintenance_sweep = icegate_catalog::jobs::maintenance_sweep::MaintenanceSweep::new(shared_catalog);
    let app = icegate_api::app(
        catalog,
        security,
        Metrics::with_registrations(|registry| {
            storage_metrics.register(registry);
            job_metrics.register(registry);
        }),
        &HttpOptions {
            request_timeout: config.server.request_timeout,
            max_body_bytes: config.server.max_body_bytes,
            idempotency_key_lifetime: config.catalog.idempotency_key_lifetime,
            max_header_bytes: config.server.max_header_bytes,
            max_in_flight: config.server.max_in_flight_requests,
            request_memory_bytes: config.server.request_memory_bytes,
        },
    );
    // Background work: this replica's workers on the shared task queue.
    let runner = std::sync::Arc::new(
        icegate_catalog::jobs::Runner::new(tasks.clone(), clock.clone())
            .with_lease(config.lifecycle.task_lease)
            .with_metrics(job_metrics.clone())
            .with_job(std::sync::Arc::new(expiry))
            .with_job(std::sync::Arc::new(orphans))
            .with_job(std::sync::Arc::new(adoption_sync))
            .with_job(std::sync::Arc::new(migration_run))
            .with_job(std::sync::Arc::new(maintenance_sweep))
            .every(
                icegate_catalog::jobs::maintenance_sweep::KIND,
                config.lifecycle.sweep_interval,
                "tables under inherited expiry or orphan policies get their work queued",
            )
            .with_job(std::sync::Arc::new(icegate_catalog::jobs::purge::PurgeJob::new(
                store.clone(),
                storage.clone(),
                job_metrics.clone(),
            )))
            .with_job(std::sync::Arc::new(icegate_catalog::jobs::lifecycle_sweep::LifecycleSweep::new(
                store.clone(),
                tasks.clone(),
            )))
            .every(
                icegate_catalog::jobs::lifecycle_sweep::KIND,
                config.lifecycle.sweep_interval,
                "dropped tables past their hold are forgotten and due purges queued",
            )
            .with_job(icegate_api::idempotency::expiry_job(store.clone(), config.catalog.idempotency_key_lifetime))
            .every(
                icegate_catalog::jobs::idempotency_expiry::KIND,
                std::time::Duration::from_secs(300),
                "idempotency keys past their lifetime are removed",
            )
            .with_job(std::sync::Arc::new(icegate_catalog::jobs::location_expiry::LocationHoldExpiry::new(
                store.clone(),
            )))
            .every(
                icegate_catalog::jobs::location_expiry::KIND,
                std::time::Duration::from_secs(300),
                "expired location reservations and leases are removed",
            )
            .with_job(std::sync::Arc::new(icegate_catalog::jobs::task_expiry::TaskExpiry::new(tasks.clone())))
            .every(
                icegate_catalog::jobs::task_expiry::KIND,
                std::time::Duration::from_secs(3600),
                "tasks that ended 30 days ago are removed",
            ),
    );
    // The audit trail's checkpoints (and retention), when a location is set.
    let mut checkpointer = None;
    let runner = match &config.audit.checkpoint.location {
        None => runner,
        Some(location) => {
            let archive = icegate_storage::archive::ObjectArchive::open(
                location,
                config.audit.checkpoint.endpoint.as_deref(),
                config.audit.checkpoint.region.as_deref(),
            )
            .map_err(|e| anyhow::anyhow!("audit.checkpoint.location: {e}"))?;
            let job = Arc::new(icegate_catalog::audit_archive::AuditCheckpointJob::new(
                store.clone(),
                Arc::new(archive),
                config.audit.retention,
            ));
            checkpointer = Some(job.clone());
            let runner = Arc::into_inner(runner).expect("the runner is not shared yet");
            Arc::new(runner.with_job(job).every(
                icegate_catalog::audit_archive::KIND,
                config.audit.checkpoint.interval,
                "the audit trail is checkpointed to object storage, and records past audit.retention are archived and removed",
            ))
        }
    };
    let (stop_workers, workers_stop) = tokio::sync::watch::channel(false);
    let workers = runner.spawn(workers_stop);

    let listener = TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.server.listen))?;
    let address = listener.local_addr()?;
    print_banner(&config, address, store.backend(), default_warehouse.as_ref());
    tracing::info!(%address, store = store.backend(), "icegate is serving");

    let shutdown = async {
        shutdown_signal().await;
        tracing::info!("shutting down: finishing in-flight requests");
    };
    server::serve(listener, app, config.server.header_read_timeout, shutdown, config.server.shutdown_timeout).await;
    // Running jobs stop at their next step; a task cut short is resumed by the next worker.
    let _ = stop_workers.send(true);
    let _ = stop_usage.send(true);
    // The head as the server leaves it, checkpointed: what it appended since the last checkpoint
    // is not left to the database alone while it is down.
    if let Some(job) = checkpointer {
        match tokio::time::timeout(config.server.shutdown_timeout, job.checkpoint_head(clock.now_ms())).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "the audit trail's head was not checkpointed at shutdown"),
            Err(_) => tracing::warn!("the audit trail's head was not checkpointed in time at shutdown"),
        }
    }
    if tokio::time::timeout(config.server.shutdown_timeout, usage_flush).await.is_err() {
        tracing::warn!("when grants were last used was not written in time");
    }
    if tokio::time::timeout(config.server.shutdown_timeout, workers).await.is_err() {
        tracing::warn!("background jobs did not stop in time");
    }
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

fn print_banner(config: &Config, address: std::net::SocketAddr, backend: &str, warehouse: Option<&WarehouseName>) {
    let url = client_url(config, address);
    let store = if config.uses_embedded_database() {
        format!("{backend} ({})", config.sqlite_path().display())
    } else {
        backend.to_owned()
    };
    println!("icegate {} is serving the Iceberg REST catalog at {url}", env!("CARGO_PKG_VERSION"));
    println!("  metadata store: {store}");
    println!(
        "  authentication: {}",
        if config.auth.mode == AuthMode::Required {
            "required (POST /v1/oauth/tokens)"
        } else {
            "none (loopback only)"
        }
    );
    match warehouse {
        Some(name) if config.creates_default_warehouse() => {
            println!("  default warehouse: {name} ({})", config.default_warehouse_root());
        }
        Some(name) => println!(
            "  default warehouse: {name}, not created on PostgreSQL (create warehouses with \
             POST /management/v1/warehouses, or set catalog.create_default_warehouse = true)"
        ),
        None => println!("  default warehouse: none (clients name theirs with `warehouse`)"),
    }
    println!();
    print_pyiceberg_snippet(&url, config, None);
    // Let the banner reach a pipe before the first log line.
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

fn write_openapi(out: &std::path::Path) -> anyhow::Result<()> {
    let documents = icegate_api::openapi::documents();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (file, text) in
        [("iceberg-rest.yaml", documents.iceberg_rest_yaml()), ("management.yaml", documents.management_yaml())]
    {
        let path = out.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// The CLI's reference, from its own help: every command an operator runs against a server,
/// with its long help (docs/cli.md; a test keeps the file equal to it).
fn cli_reference() -> String {
    let mut root = <Cli as clap::CommandFactory>::command();
    root.build();
    let mut out = String::from(
        "# icegate CLI reference\n\nGenerated from the CLI's own help (`icegate cli-docs`); a test keeps it current. \
         See the README's \"Console and CLI\" for the commands operators use most.\n",
    );
    fn walk(command: &clap::Command, path: &str, out: &mut String) {
        for sub in command.get_subcommands().filter(|c| !c.is_hide_set() && c.get_name() != "help") {
            let name = format!("{path} {}", sub.get_name());
            let mut sub = sub.clone().bin_name(name.clone());
            let help = sub.render_long_help().to_string();
            let help: String = help.lines().map(|line| format!("{}\n", line.trim_end())).collect();
            out.push_str(&format!(
                "\n## `{name}`\n\n<!-- snippet: not-run: the help text, not a command -->\n```text\n{}\n```\n",
                help.trim_end()
            ));
            walk(&sub, &name, out);
        }
    }
    walk(&root, "icegate", &mut out);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn docs_cli_md_is_the_clis_own_help() {
        let written = include_str!("../../../docs/cli.md");
        assert!(
            written == super::cli_reference(),
            "docs/cli.md is not what the CLI's help says: run `icegate cli-docs` and commit the file"
        );
    }
}
