//! A load generator that speaks only the Iceberg REST protocol (plus the OAuth2 token
//! endpoint), so it can be pointed at any REST catalog for side-by-side runs.
//!
//! Workloads run a fixed number of concurrent connections for a fixed duration (closed loop) and
//! record every request's latency; the report gives throughput, percentiles and errors by status.
//! `commit-hot` also checks that no acknowledged commit was lost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::{Client, Method, StatusCode};
use serde::Serialize;
use serde_json::{Value, json};

mod commits;

pub use commits::{MixedLoad, commit, commit_hot, mixed};

/// A catalog to load, resolved through `/v1/config`.
#[derive(Clone)]
pub struct Target {
    pub http: Client,
    pub uri: String,
    pub prefix: String,
    pub token: Option<String>,
    /// Ask for gzip bodies (`Accept-Encoding: gzip`) on every request, as PyIceberg's
    /// `requests` and the Java client do; bodies are read as they come, compressed.
    pub gzip: bool,
}

impl Target {
    /// Fetches a token (with `credential` = `id:secret`) and the warehouse prefix.
    pub async fn connect(uri: &str, warehouse: &str, credential: Option<&str>) -> anyhow::Result<Self> {
        let http = Client::builder().pool_max_idle_per_host(1024).build()?;
        let uri = uri.trim_end_matches('/').to_owned();
        let token = match credential {
            Some(credential) => {
                let (id, secret) = credential.split_once(':').context("credential must be id:secret")?;
                let response: Value = http
                    .post(format!("{uri}/v1/oauth/tokens"))
                    .form(&[
                        ("grant_type", "client_credentials"),
                        ("client_id", id),
                        ("client_secret", secret),
                        ("scope", "catalog"),
                    ])
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                Some(response["access_token"].as_str().context("no access_token")?.to_owned())
            }
            None => None,
        };
        let mut request = http.get(format!("{uri}/v1/config")).query(&[("warehouse", warehouse)]);
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let config: Value = request.send().await?.error_for_status()?.json().await?;
        let prefix = config["overrides"]["prefix"].as_str().unwrap_or_default().to_owned();
        Ok(Self { http, uri, prefix, token, gzip: false })
    }

    fn url(&self, path: &str) -> String {
        if path.starts_with("/v1/") || path.starts_with("/health") {
            format!("{}{}", self.uri, path)
        } else if self.prefix.is_empty() {
            format!("{}/v1/{}", self.uri, path)
        } else {
            format!("{}/v1/{}/{}", self.uri, self.prefix, path)
        }
    }

    /// One request whose answer is only counted: its status (0 for a transport error). The body
    /// is read but not parsed, so the generator spends its CPU on sending.
    pub async fn status(&self, method: Method, path: &str, body: Option<&Value>) -> u16 {
        let mut request = self.http.request(method, self.url(path));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if self.gzip {
            request = request.header("Accept-Encoding", "gzip");
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                match response.bytes().await {
                    Ok(_) => status,
                    Err(_) => 0,
                }
            }
            Err(_) => 0,
        }
    }

    /// One request: its status and (parsed) body.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> anyhow::Result<(StatusCode, Value)> {
        let mut request = self.http.request(method, self.url(path));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }
}

/// What one workload measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub workload: String,
    pub connections: usize,
    pub seconds: f64,
    pub requests: usize,
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Non-2xx answers (and transport errors, as status 0) by status.
    pub errors: BTreeMap<u16, usize>,
    /// Workload-specific findings (for `commit-hot`: acknowledged, conflicts, lost).
    pub extra: BTreeMap<String, Value>,
}

impl Report {
    /// A report of `latencies` (sorted) over `seconds`.
    fn of(name: &str, connections: usize, seconds: f64, latencies: &[Duration], errors: BTreeMap<u16, usize>) -> Self {
        Report {
            workload: name.to_owned(),
            connections,
            seconds,
            requests: latencies.len(),
            requests_per_second: latencies.len() as f64 / seconds,
            p50_ms: percentile(latencies, 0.50),
            p95_ms: percentile(latencies, 0.95),
            p99_ms: percentile(latencies, 0.99),
            max_ms: latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            errors,
            extra: BTreeMap::new(),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

/// Runs `step` on `connections` workers for `duration`, timing each call.
async fn run<F, Fut>(name: &str, connections: usize, duration: Duration, step: F) -> Report
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = u16> + Send,
{
    let step = Arc::new(step);
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = Vec::new();
    for worker in 0..connections {
        let step = step.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors: BTreeMap<u16, usize> = BTreeMap::new();
            let mut n = 0;
            while Instant::now() < deadline {
                let at = Instant::now();
                let status = step(worker, n).await;
                latencies.push(at.elapsed());
                if !(200..300).contains(&status) {
                    *errors.entry(status).or_default() += 1;
                }
                n += 1;
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = BTreeMap::new();
    for worker in workers {
        let (l, e) = worker.await.expect("a worker panicked");
        latencies.extend(l);
        for (status, count) in e {
            *errors.entry(status).or_default() += count;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Report::of(name, connections, seconds, &latencies, errors)
}

/// A 10-column schema, as the polaris-tools suite uses.
fn schema(columns: usize) -> Value {
    let fields: Vec<Value> =
        (1..=columns).map(|i| json!({"id": i, "name": format!("c{i}"), "required": false, "type": "long"})).collect();
    json!({"type": "struct", "fields": fields})
}

/// The shape of the namespace tree and what each leaf holds.
#[derive(Debug, Clone)]
pub struct Tree {
    pub width: usize,
    pub depth: usize,
    pub tables_per_leaf: usize,
    pub columns: usize,
    pub properties: usize,
    /// Snapshots added to every table after it is created (commits of add-snapshot and
    /// set-snapshot-ref `main`, as an append does).
    pub snapshots: usize,
    /// Concurrent requests while creating tables and snapshots.
    pub create_connections: usize,
    /// Snapshots added by each create-tree commit (1: one per commit, as an append makes; more
    /// builds tables of thousands of snapshots in fewer, larger commits).
    pub snapshots_per_commit: usize,
}

impl Tree {
    /// Every leaf namespace, levels joined by `%1F` for URLs.
    pub fn leaves(&self) -> Vec<String> {
        let mut level: Vec<Vec<String>> = vec![vec![]];
        for d in 0..self.depth {
            level = level
                .into_iter()
                .flat_map(|prefix| {
                    (0..self.width).map(move |w| {
                        let mut next = prefix.clone();
                        next.push(format!("n{d}_{w}"));
                        next
                    })
                })
                .collect();
        }
        level.into_iter().map(|levels| levels.join("%1F")).collect()
    }

    pub fn tables(&self) -> Vec<String> {
        self.leaves()
            .into_iter()
            .flat_map(|leaf| (0..self.tables_per_leaf).map(move |t| format!("namespaces/{leaf}/tables/t{t}")))
            .collect()
    }
}

/// `create-tree`: the namespaces (level by level), then the tables.
pub async fn create_tree(target: &Target, tree: &Tree) -> anyhow::Result<Report> {
    let started = Instant::now();
    let mut requests = 0;
    let mut level: Vec<Vec<String>> = vec![vec![]];
    for d in 0..tree.depth {
        let mut next_level = Vec::new();
        for prefix in &level {
            for w in 0..tree.width {
                let mut levels = prefix.clone();
                levels.push(format!("n{d}_{w}"));
                let (status, body) =
                    target.call(Method::POST, "namespaces", Some(&json!({"namespace": levels}))).await?;
                if !status.is_success() && status != StatusCode::CONFLICT {
                    bail!("creating namespace {levels:?}: {status} {body}");
                }
                requests += 1;
                next_level.push(levels);
            }
        }
        level = next_level;
    }
    let properties: BTreeMap<String, String> =
        (0..tree.properties).map(|i| (format!("p{i}"), format!("value-{i}"))).collect();
    let creates: Vec<(String, Value)> = tree
        .leaves()
        .into_iter()
        .flat_map(|leaf| (0..tree.tables_per_leaf).map(move |t| (leaf.clone(), format!("t{t}"))))
        .map(|(leaf, name)| {
            let body = json!({"name": name, "schema": schema(tree.columns), "properties": properties});
            (format!("namespaces/{leaf}/tables"), body)
        })
        .collect();
    requests += creates.len();
    let parallel = tree.create_connections.max(1);
    let mut results = for_each_bounded(creates, parallel, |(path, body)| {
        let target = target.clone();
        async move {
            let (status, answer) = target.call(Method::POST, &path, Some(&body)).await?;
            if !status.is_success() && status != StatusCode::CONFLICT {
                bail!("creating a table at {path}: {status} {answer}");
            }
            Ok(())
        }
    })
    .await;
    if let Some(err) = results.iter_mut().find_map(|r| r.as_ref().err()) {
        bail!("{err}");
    }
    if tree.snapshots > 0 {
        let tables = tree.tables();
        requests += tables.len() * tree.snapshots.div_ceil(tree.snapshots_per_commit.max(1));
        let results = for_each_bounded(tables, parallel, |table| {
            let (target, snapshots, batch) = (target.clone(), tree.snapshots, tree.snapshots_per_commit.max(1));
            async move {
                let mut n = 0;
                while n < snapshots {
                    let count = batch.min(snapshots - n);
                    add_snapshots(&target, &table, n, count).await?;
                    n += count;
                }
                Ok(())
            }
        })
        .await;
        if let Some(err) = results.into_iter().find_map(Result::err) {
            bail!("{err}");
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Report {
        workload: "create-tree".into(),
        connections: 1,
        seconds,
        requests,
        requests_per_second: requests as f64 / seconds,
        p50_ms: 0.0,
        p95_ms: 0.0,
        p99_ms: 0.0,
        max_ms: 0.0,
        errors: BTreeMap::new(),
        extra: BTreeMap::from([
            ("tables".into(), json!(tree.tables().len())),
            ("snapshots_per_table".into(), json!(tree.snapshots)),
        ]),
    })
}

/// Runs `task` over `items`, at most `parallel` at a time; results in no particular order.
async fn for_each_bounded<T, F, Fut>(items: Vec<T>, parallel: usize, task: F) -> Vec<anyhow::Result<()>>
where
    T: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let semaphore = Arc::new(tokio::sync::Semaphore::new(parallel));
    let mut handles = Vec::with_capacity(items.len());
    for item in items {
        let permit = semaphore.clone().acquire_owned().await.expect("semaphore open");
        let future = task(item);
        handles.push(tokio::spawn(async move {
            let result = future.await;
            drop(permit);
            result
        }));
    }
    let mut results = Vec::with_capacity(handles.len());
    for handle in handles {
        results.push(handle.await.unwrap_or_else(|e| Err(anyhow::anyhow!("task failed: {e}"))));
    }
    results
}

/// Commits `count` snapshots to `table` (its `n`th and those after it), each the parent of the
/// next, and points `main` at the last, as `count` appends would.
async fn add_snapshots(target: &Target, table: &str, n: usize, count: usize) -> anyhow::Result<()> {
    let (status, loaded) = target.call(Method::GET, table, None).await?;
    if !status.is_success() {
        bail!("loading {table}: {status}");
    }
    let metadata = &loaded["metadata"];
    let current = metadata["current-snapshot-id"].as_i64().filter(|id| *id >= 0);
    let location = metadata["location"].as_str().unwrap_or_default();
    let sequence = metadata["last-sequence-number"].as_i64().unwrap_or(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let mut updates = Vec::with_capacity(count + 1);
    let mut parent = current;
    for k in 0..count {
        let id = 1_000_000 + (n + k) as i64;
        let mut snapshot = json!({
            "snapshot-id": id,
            "sequence-number": sequence + 1 + k as i64,
            "timestamp-ms": now,
            "manifest-list": format!("{location}/metadata/snap-{id}-bench.avro"),
            "summary": {"operation": "append", "added-data-files": "1", "added-records": "100"},
            "schema-id": metadata["current-schema-id"].as_i64().unwrap_or(0)
        });
        if let Some(parent) = parent {
            snapshot["parent-snapshot-id"] = json!(parent);
        }
        updates.push(json!({"action": "add-snapshot", "snapshot": snapshot}));
        parent = Some(id);
    }
    updates.push(json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": parent}));
    let body = json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": current}],
        "updates": updates
    });
    let (status, answer) = target.call(Method::POST, table, Some(&body)).await?;
    if !status.is_success() {
        bail!("adding snapshots {n}.. to {table}: {status} {answer}");
    }
    Ok(())
}

/// `list-tables`: the first page (page size 100) of listTables in the tree's leaves.
pub async fn list_tables(target: &Target, tree: &Tree, connections: usize, duration: Duration) -> Report {
    let leaves = Arc::new(tree.leaves());
    let target = target.clone();
    run("list-tables", connections, duration, move |worker, n| {
        let (target, leaves) = (target.clone(), leaves.clone());
        async move {
            let leaf = &leaves[(worker + n) % leaves.len()];
            target.status(Method::GET, &format!("namespaces/{leaf}/tables?pageToken=&pageSize=100"), None).await
        }
    })
    .await
}

/// The median of repeated runs of one workload (by throughput), with the spread noted.
pub fn median(mut runs: Vec<Report>) -> Report {
    runs.sort_by(|a, b| a.requests_per_second.total_cmp(&b.requests_per_second));
    let (low, high) = (runs[0].requests_per_second, runs[runs.len() - 1].requests_per_second);
    let count = runs.len();
    let mut chosen = runs.swap_remove(count / 2);
    if count > 1 {
        chosen.extra.insert("runs".into(), json!(count));
        chosen.extra.insert("req_s_range".into(), json!(format!("{low:.0}-{high:.0}")));
    }
    chosen
}

/// `read`: a uniform mix of list, exists and load over the tree's namespaces and tables.
pub async fn read(target: &Target, tree: &Tree, connections: usize, duration: Duration) -> Report {
    let leaves = Arc::new(tree.leaves());
    let tables = Arc::new(tree.tables());
    let target = target.clone();
    run("read", connections, duration, move |worker, n| {
        let (target, leaves, tables) = (target.clone(), leaves.clone(), tables.clone());
        async move {
            let pick = worker * 7919 + n * 104_729;
            match n % 4 {
                0 => {
                    target
                        .status(Method::GET, &format!("namespaces/{}/tables", leaves[pick % leaves.len()]), None)
                        .await
                }
                1 => target.status(Method::HEAD, &tables[pick % tables.len()], None).await,
                2 => target.status(Method::GET, &format!("namespaces/{}", leaves[pick % leaves.len()]), None).await,
                _ => target.status(Method::GET, &tables[pick % tables.len()], None).await,
            }
        }
    })
    .await
}

/// The `size` tables a workload with a fixed working set visits, spread evenly over all of
/// them (every table when `size` is 0 or at least their number). Holding the working set
/// while the catalog grows measures the catalog's size alone; loads over every table also
/// grow the working set.
pub fn working_set(tables: Vec<String>, size: usize) -> Vec<String> {
    if size == 0 || size >= tables.len() {
        return tables;
    }
    let step = tables.len() / size;
    tables.into_iter().step_by(step).take(size).collect()
}

/// How a load-table workload asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadKind {
    /// `load-table`: the whole document.
    Plain,
    /// `load-table-vended`: with vended credentials.
    Vended,
    /// `load-table-gzip`: with `Accept-Encoding: gzip` (as PyIceberg and the Java client ask).
    Gzip,
    /// `load-table-refs`: `?snapshots=refs`.
    Refs,
}

/// `load-table` and its variants: loadTable only, over `working_set` tables (0: every table).
pub async fn load_table(
    target: &Target,
    tree: &Tree,
    connections: usize,
    duration: Duration,
    kind: LoadKind,
    working_set: usize,
) -> Report {
    let tables = Arc::new(self::working_set(tree.tables(), working_set));
    let target = target.clone();
    let vended = kind == LoadKind::Vended;
    let name = match kind {
        LoadKind::Plain => "load-table",
        LoadKind::Vended => "load-table-vended",
        LoadKind::Gzip => "load-table-gzip",
        LoadKind::Refs => "load-table-refs",
    };
    run(name, connections, duration, move |worker, n| {
        let (target, tables) = (target.clone(), tables.clone());
        async move {
            // Spread over the working set: with a large one each worker visits all of it.
            let path = &tables[(worker * 7919 + n * 104_729) % tables.len()];
            let url =
                if kind == LoadKind::Refs { format!("{}?snapshots=refs", target.url(path)) } else { target.url(path) };
            let mut request = target.http.get(url);
            if let Some(token) = &target.token {
                request = request.bearer_auth(token);
            }
            if kind == LoadKind::Gzip || target.gzip {
                // The body is read as it comes (compressed): the server's cost is measured.
                request = request.header("Accept-Encoding", "gzip");
            }
            if vended {
                request = request.header("X-Iceberg-Access-Delegation", "vended-credentials");
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let _ = response.bytes().await;
                    status
                }
                Err(_) => 0,
            }
        }
    })
    .await
}

/// `http-floor`: the same client against `GET /health`, the HTTP stack's own ceiling.
pub async fn http_floor(target: &Target, connections: usize, duration: Duration) -> Report {
    let target = target.clone();
    run("http-floor", connections, duration, move |_, _| {
        let target = target.clone();
        async move { target.status(Method::GET, "/health", None).await }
    })
    .await
}

/// `config`: authenticated `GET /v1/config`, the cheapest request that authenticates its caller
/// (its token verified and its principal found current).
pub async fn config(target: &Target, connections: usize, duration: Duration) -> Report {
    let target = target.clone();
    run("config", connections, duration, move |_, _| {
        let target = target.clone();
        async move { target.status(Method::GET, "/v1/config", None).await }
    })
    .await
}

/// Anonymous token requests with random client ids, sent back to back by `connections`
/// tasks until dropped: what a stranger can do to the open token endpoint.
pub struct TokenFlood {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    started: std::time::Instant,
}

impl TokenFlood {
    pub fn start(uri: &str, connections: usize) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let sent = std::sync::Arc::new(AtomicU64::new(0));
        for _ in 0..connections {
            let (stop, sent) = (stop.clone(), sent.clone());
            let url = format!("{}/v1/oauth/tokens", uri.trim_end_matches('/'));
            tokio::spawn(async move {
                // A client of its own: the flood does not share the measured requests' pool.
                let http = Client::new();
                while !stop.load(Ordering::Relaxed) {
                    let id = format!("ig-{}", uuid::Uuid::new_v4().simple());
                    let form = [("grant_type", "client_credentials"), ("client_id", &id), ("client_secret", "x")];
                    let _ = http.post(&url).form(&form).send().await.map(|r| r.status());
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        Self { stop, sent, started: std::time::Instant::now() }
    }

    /// Token requests answered per second so far.
    pub fn rate(&self) -> f64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed) as f64 / self.started.elapsed().as_secs_f64()
    }
}

impl Drop for TokenFlood {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The reports as a Markdown table (throughput also as a ratio to `http-floor`, if present).
pub fn markdown(reports: &[Report]) -> String {
    let floor = reports.iter().find(|r| r.workload == "http-floor").map(|r| r.requests_per_second);
    let mut out = String::from(
        "| workload | conns | req/s | vs http-floor | p50 ms | p95 ms | p99 ms | max ms | errors | notes |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        // create-tree is not a timed workload: its rate is not comparable.
        let ratio = floor
            .filter(|f| *f > 0.0 && r.workload != "create-tree")
            .map_or("-".to_owned(), |f| format!("{:.0}%", 100.0 * r.requests_per_second / f));
        let errors: Vec<String> = r.errors.iter().map(|(s, c)| format!("{s}:{c}")).collect();
        let notes: Vec<String> = r.extra.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |\n",
            r.workload,
            r.connections,
            r.requests_per_second,
            ratio,
            r.p50_ms,
            r.p95_ms,
            r.p99_ms,
            r.max_ms,
            if errors.is_empty() { "0".to_owned() } else { errors.join(" ") },
            notes.join(" ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::working_set;

    #[test]
    fn a_working_set_is_spread_over_the_whole_catalog() {
        let tables: Vec<String> = (0..1000).map(|t| format!("t{t}")).collect();
        let set = working_set(tables.clone(), 10);
        assert_eq!(set, ["t0", "t100", "t200", "t300", "t400", "t500", "t600", "t700", "t800", "t900"]);
        assert_eq!(working_set(tables.clone(), 0).len(), 1000);
        assert_eq!(working_set(tables.clone(), 5000).len(), 1000);
        assert_eq!(working_set(tables, 999).len(), 999);
    }
}
