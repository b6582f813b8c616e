//! `icegate-bench`: run workloads against an Iceberg REST catalog and print a report.

use std::time::Duration;

use clap::Parser;
use icegate_bench::{
    LoadKind, MixedLoad, Target, TokenFlood, Tree, commit, commit_hot, config, create_tree, http_floor, list_tables,
    load_table, markdown, median, mixed, read,
};

#[derive(Parser)]
#[command(name = "icegate-bench", about = "Load generator for Iceberg REST catalogs", args_override_self = true)]
struct Args {
    /// The catalog's base URI.
    #[arg(long, default_value = "http://127.0.0.1:8181")]
    uri: String,
    #[arg(long, default_value = "default")]
    warehouse: String,
    /// `client_id:client_secret`, when the catalog requires authentication.
    #[arg(long)]
    credential: Option<String>,
    /// Workloads to run, in order: create-tree, read, load-table, load-table-vended,
    /// load-table-gzip, load-table-refs, list-tables,
    /// commit, commit-hot, mixed, http-floor, config.
    #[arg(long, value_delimiter = ',', default_value = "create-tree,http-floor,read,load-table,commit,commit-hot")]
    workloads: Vec<String>,
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Seconds per timed workload.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    #[arg(long, default_value_t = 2)]
    width: usize,
    #[arg(long, default_value_t = 2)]
    depth: usize,
    #[arg(long, default_value_t = 16)]
    tables_per_leaf: usize,
    #[arg(long, default_value_t = 10)]
    columns: usize,
    #[arg(long, default_value_t = 10)]
    properties: usize,
    /// Snapshots committed to every table by create-tree.
    #[arg(long, default_value_t = 0)]
    snapshots: usize,
    /// Snapshots per create-tree commit (more builds big tables faster).
    #[arg(long, default_value_t = 1)]
    snapshots_per_commit: usize,
    /// Send `Accept-Encoding: gzip` on every request (loads and commits), as PyIceberg and the
    /// Java client do.
    #[arg(long)]
    gzip: bool,
    /// Concurrent requests while create-tree creates tables and snapshots.
    #[arg(long, default_value_t = 8)]
    create_connections: usize,
    /// commit: snapshots a table keeps; an append beyond them removes the oldest.
    #[arg(long, default_value_t = 100)]
    keep_snapshots: usize,
    /// Runs of every timed workload; the report shows the median run (by throughput).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// load-table, load-table-vended: how many tables the loads visit, spread evenly over the
    /// catalog (0: every table).
    #[arg(long, default_value_t = 0)]
    working_set: usize,
    /// Writers of commit-hot.
    #[arg(long, default_value_t = 16)]
    hot_writers: usize,
    /// mixed: requests started per second (open loop).
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// mixed: percentage of requests that are commits.
    #[arg(long, default_value_t = 10)]
    write_percent: u32,
    /// mixed: requests in flight at most; later arrivals are dropped (and counted).
    #[arg(long, default_value_t = 1024)]
    max_in_flight: usize,
    /// Write the reports as JSON here too.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Anonymous token requests (random client ids) sent by this many connections throughout
    /// the timed workloads, as a flood of the open token endpoint (0: none).
    #[arg(long, default_value_t = 0)]
    token_flood: usize,
}

/// Named sets of options, given before the command line's own (which override them):
/// `--preset big-tables` is four tables of 2,000 snapshots (metadata of ~0.8 MB) written and
/// read by four connections, the shape of streaming writers' tables.
const PRESETS: &[(&str, &[&str])] = &[(
    "big-tables",
    &[
        "--width=1",
        "--depth=1",
        "--tables-per-leaf=4",
        "--snapshots=2000",
        "--keep-snapshots=2000",
        "--snapshots-per-commit=100",
        "--connections=4",
        "--create-connections=4",
    ],
)];

/// The command line with a `--preset NAME` replaced by the preset's options, put first.
fn expand_presets(args: Vec<String>) -> anyhow::Result<Vec<String>> {
    let mut preset = Vec::new();
    let mut rest = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let name = match arg.strip_prefix("--preset") {
            Some("") => args.next().unwrap_or_default(),
            Some(value) if value.starts_with('=') => value[1..].to_owned(),
            _ => {
                rest.push(arg);
                continue;
            }
        };
        let (_, options) = PRESETS
            .iter()
            .find(|(known, _)| *known == name)
            .ok_or_else(|| anyhow::anyhow!("unknown preset {name:?} (known: big-tables)"))?;
        preset.extend(options.iter().map(|o| (*o).to_owned()));
    }
    let program = if rest.is_empty() { String::new() } else { rest.remove(0) };
    Ok(std::iter::once(program).chain(preset).chain(rest).collect())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse_from(expand_presets(std::env::args().collect())?);
    let mut target = Target::connect(&args.uri, &args.warehouse, args.credential.as_deref()).await?;
    target.gzip = args.gzip;
    let tree = Tree {
        width: args.width,
        depth: args.depth,
        tables_per_leaf: args.tables_per_leaf,
        columns: args.columns,
        properties: args.properties,
        snapshots: args.snapshots,
        create_connections: args.create_connections,
        snapshots_per_commit: args.snapshots_per_commit,
    };
    let duration = Duration::from_secs_f64(args.seconds);
    let mixed_load =
        MixedLoad { rate: args.rate, write_percent: args.write_percent.min(100), max_in_flight: args.max_in_flight };
    let mut reports = Vec::new();
    let mut flood = None;
    for workload in &args.workloads {
        if workload != "create-tree" && args.token_flood > 0 && flood.is_none() {
            flood = Some(TokenFlood::start(&args.uri, args.token_flood));
        }
        let report = if workload == "create-tree" {
            create_tree(&target, &tree).await?
        } else {
            let mut runs = Vec::new();
            for _ in 0..args.repeat.max(1) {
                runs.push(match workload.as_str() {
                    "read" => read(&target, &tree, args.connections, duration).await,
                    "load-table" | "load-table-vended" | "load-table-gzip" | "load-table-refs" => {
                        let kind = match workload.as_str() {
                            "load-table-vended" => LoadKind::Vended,
                            "load-table-gzip" => LoadKind::Gzip,
                            "load-table-refs" => LoadKind::Refs,
                            _ => LoadKind::Plain,
                        };
                        load_table(&target, &tree, args.connections, duration, kind, args.working_set).await
                    }
                    "list-tables" => list_tables(&target, &tree, args.connections, duration).await,
                    "commit" => {
                        let connections = args.connections.min(tree.tables().len());
                        commit(&target, &tree, connections, duration, args.keep_snapshots).await?
                    }
                    "commit-hot" => commit_hot(&target, &tree.tables()[0], args.hot_writers, duration).await?,
                    "http-floor" => http_floor(&target, args.connections, duration).await,
                    "config" => config(&target, args.connections, duration).await,
                    "mixed" => mixed(&target, &tree, &mixed_load, duration).await,
                    other => anyhow::bail!("unknown workload {other}"),
                });
            }
            let mut report = median(runs);
            if let Some(flood) = &flood {
                report.extra.insert("token_flood_rps".into(), serde_json::json!(flood.rate().round()));
            }
            report
        };
        eprintln!("{}: {:.0} req/s, p99 {:.2} ms", report.workload, report.requests_per_second, report.p99_ms);
        reports.push(report);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&reports)?)?;
    }
    print!("{}", markdown(&reports));
    if reports.iter().any(|r| r.extra.get("lost").and_then(|v| v.as_u64()).unwrap_or(0) > 0) {
        anyhow::bail!("acknowledged commits were lost");
    }
    Ok(())
}
