//! The writing workloads: commits to many tables, commits racing on one table (`commit-hot`,
//! which also counts lost commits), and the mixed read/write load.

use super::*;

/// Snapshot ids no earlier run (or other worker) used: seeded from the clock, then counted.
fn next_snapshot_id() -> i64 {
    static NEXT: std::sync::OnceLock<std::sync::atomic::AtomicI64> = std::sync::OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
        // Microseconds since 1970 (~1.8e15) times 1,000 stays below i64::MAX for centuries.
        std::sync::atomic::AtomicI64::new((micros as i64) * 1_000)
    });
    next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What a writer needs to know of its own table to append to it.
#[derive(Debug, Clone)]
struct TableHead {
    location: String,
    schema_id: i64,
    snapshot_id: Option<i64>,
    sequence_number: i64,
    /// The table's snapshots, oldest first.
    snapshots: std::collections::VecDeque<i64>,
}

impl TableHead {
    async fn load(target: &Target, table: &str) -> anyhow::Result<Self> {
        let (status, loaded) = target.call(Method::GET, table, None).await?;
        if !status.is_success() {
            bail!("loading {table}: {status}");
        }
        let metadata = &loaded["metadata"];
        let mut snapshots: Vec<(i64, i64)> = metadata["snapshots"]
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|s| Some((s["sequence-number"].as_i64().unwrap_or(0), s["snapshot-id"].as_i64()?)))
                    .collect()
            })
            .unwrap_or_default();
        snapshots.sort_unstable();
        Ok(Self {
            snapshots: snapshots.into_iter().map(|(_, id)| id).collect(),
            location: metadata["location"].as_str().unwrap_or_default().to_owned(),
            schema_id: metadata["current-schema-id"].as_i64().unwrap_or(0),
            snapshot_id: metadata["current-snapshot-id"].as_i64().filter(|id| *id >= 0),
            sequence_number: metadata["last-sequence-number"].as_i64().unwrap_or(0),
        })
    }

    /// An append's commit: a new snapshot whose parent is the current one, `main` moved to it,
    /// on the condition that `main` has not moved meanwhile; with `keep` snapshots already, the
    /// oldest is removed in the same commit (as snapshot expiry would), so the table's size
    /// stays steady however long the benchmark runs.
    fn append(&self, id: i64, keep: usize) -> Value {
        let mut snapshot = json!({
            "snapshot-id": id,
            "sequence-number": self.sequence_number + 1,
            "timestamp-ms": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            "manifest-list": format!("{}/metadata/snap-{id}-bench.avro", self.location),
            "summary": {"operation": "append", "added-data-files": "1", "added-records": "100"},
            "schema-id": self.schema_id
        });
        if let Some(parent) = self.snapshot_id {
            snapshot["parent-snapshot-id"] = json!(parent);
        }
        let mut updates = vec![
            json!({"action": "add-snapshot", "snapshot": snapshot}),
            json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": id}),
        ];
        if self.snapshots.len() >= keep.max(1)
            && let Some(oldest) = self.snapshots.front()
        {
            updates.push(json!({"action": "remove-snapshots", "snapshot-ids": [oldest]}));
        }
        json!({
            "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": self.snapshot_id}],
            "updates": updates
        })
    }

    /// After `append(id, keep)` was acknowledged.
    fn appended(&mut self, id: i64, keep: usize) {
        if self.snapshots.len() >= keep.max(1) {
            self.snapshots.pop_front();
        }
        self.snapshots.push_back(id);
        self.snapshot_id = Some(id);
        self.sequence_number += 1;
    }
}

/// `commit`: each connection commits to a table of its own, alternating set-properties and an
/// append (add-snapshot + set-snapshot-ref with an assert-ref-snapshot-id requirement; beyond
/// `keep_snapshots` snapshots the append also removes the oldest).
pub async fn commit(
    target: &Target,
    tree: &Tree,
    connections: usize,
    duration: Duration,
    keep_snapshots: usize,
) -> anyhow::Result<Report> {
    let tables = Arc::new(tree.tables());
    if tables.len() < connections {
        bail!("commit needs at least one table per connection ({} tables, {connections} connections)", tables.len());
    }
    let mut heads = Vec::with_capacity(connections);
    for table in tables.iter().take(connections) {
        heads.push(tokio::sync::Mutex::new(TableHead::load(target, table).await?));
    }
    let heads = Arc::new(heads);
    let appends = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let target = target.clone();
    let counted = appends.clone();
    let mut report = run("commit", connections, duration, move |worker, n| {
        let (target, tables, heads, appends) = (target.clone(), tables.clone(), heads.clone(), counted.clone());
        async move {
            let table = &tables[worker];
            if n.is_multiple_of(2) {
                let body = json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"bench-n": n.to_string()}}]});
                return target.status(Method::POST, table, Some(&body)).await;
            }
            // Only this worker writes its table, so it knows the head without reading it back.
            let mut head = heads[worker].lock().await;
            let id = next_snapshot_id();
            let status = target.status(Method::POST, table, Some(&head.append(id, keep_snapshots))).await;
            if status == 200 {
                head.appended(id, keep_snapshots);
                appends.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            } else if let Ok(fresh) = TableHead::load(&target, table).await {
                *head = fresh;
            }
            status
        }
    })
    .await;
    report.extra.insert("appends".into(), json!(appends.load(std::sync::atomic::Ordering::Relaxed)));
    Ok(report)
}

/// What `mixed` sends: reads (loadTable, listTables) and commits, at a fixed arrival rate.
#[derive(Debug, Clone)]
pub struct MixedLoad {
    /// Requests started per second, whatever the answers' latency (open loop).
    pub rate: f64,
    /// Percentage of requests that are commits (set-properties on a random table).
    pub write_percent: u32,
    /// Requests in flight at most; an arrival beyond it is counted as dropped, not queued.
    pub max_in_flight: usize,
}

/// `mixed`: an open-loop load. Requests arrive on a fixed schedule, and each one's latency is
/// measured from when it was due, so a slow server is charged for the requests that waited
/// (no coordinated omission). Reads are 9 loadTable to 1 listTables (first page of 100);
/// writes are set-properties commits on a table picked at random.
pub async fn mixed(target: &Target, tree: &Tree, load: &MixedLoad, duration: Duration) -> Report {
    let tables = Arc::new(tree.tables());
    let leaves = Arc::new(tree.leaves());
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<(bool, Duration, u16)>();
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let rate = load.rate.max(0.001);
    let due_at = |arrival: usize| Duration::from_secs_f64(arrival as f64 / rate);
    let started = Instant::now();
    let deadline = started + duration;
    let (mut sent, mut dropped) = (0usize, 0usize);
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    'schedule: loop {
        let now = Instant::now();
        // Every arrival due by now starts now (the timer's granularity is about a millisecond).
        loop {
            let due = started + due_at(sent + dropped);
            if due >= deadline {
                break 'schedule;
            }
            if due > now {
                break;
            }
            if in_flight.load(std::sync::atomic::Ordering::Relaxed) >= load.max_in_flight {
                dropped += 1;
                continue;
            }
            sent += 1;
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let write = (rng % 100) < u64::from(load.write_percent);
            let pick = (rng >> 8) as usize;
            let (target, tables, leaves, sender, in_flight) =
                (target.clone(), tables.clone(), leaves.clone(), sender.clone(), in_flight.clone());
            in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(async move {
                let table = &tables[pick % tables.len()];
                let result = if write {
                    let body = json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {"bench-mixed": pick.to_string()}}]});
                    target.status(Method::POST, table, Some(&body)).await
                } else if pick.is_multiple_of(10) {
                    let leaf = &leaves[pick % leaves.len()];
                    target.status(Method::GET, &format!("namespaces/{leaf}/tables?pageSize=100"), None).await
                } else {
                    target.status(Method::GET, table, None).await
                };
                in_flight.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                let _ = sender.send((write, due.elapsed(), result));
            });
        }
        tokio::time::sleep_until((started + due_at(sent + dropped)).into()).await;
    }
    drop(sender);
    let (mut all, mut reads, mut writes) = (Vec::new(), Vec::new(), Vec::new());
    let mut errors: BTreeMap<u16, usize> = BTreeMap::new();
    while let Some((write, latency, status)) = receiver.recv().await {
        all.push(latency);
        if write {
            writes.push(latency)
        } else {
            reads.push(latency)
        }
        if !(200..300).contains(&status) {
            *errors.entry(status).or_default() += 1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    for latencies in [&mut all, &mut reads, &mut writes] {
        latencies.sort_unstable();
    }
    let mut report = Report::of("mixed", load.max_in_flight, seconds, &all, errors);
    let extra = &mut report.extra;
    extra.insert("target_rate".into(), json!(load.rate));
    extra.insert("dropped".into(), json!(dropped));
    extra.insert("writes".into(), json!(writes.len()));
    extra.insert("read_p99_ms".into(), json!((percentile(&reads, 0.99) * 100.0).round() / 100.0));
    extra.insert("write_p99_ms".into(), json!((percentile(&writes, 0.99) * 100.0).round() / 100.0));
    report
}

/// `commit-hot`: every connection commits to one table; then checks no acknowledged commit was lost.
pub async fn commit_hot(
    target: &Target,
    table: &str,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<Report> {
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (t, ack) = (target.clone(), acknowledged.clone());
    let table_path = table.to_owned();
    let mut report = run("commit-hot", connections, duration, move |worker, n| {
        let (target, ack, path) = (t.clone(), ack.clone(), table_path.clone());
        async move {
            let key = format!("hot-{worker}-{n}");
            let body =
                json!({"requirements": [], "updates": [{"action": "set-properties", "updates": {key.clone(): "1"}}]});
            let status = target.status(Method::POST, &path, Some(&body)).await;
            if status == 200 {
                ack.lock().unwrap().push(key);
            }
            status
        }
    })
    .await;
    let (status, loaded) = target.call(Method::GET, table, None).await?;
    if !status.is_success() {
        bail!("loading {table} after commit-hot: {status}");
    }
    let properties = &loaded["metadata"]["properties"];
    let acknowledged = acknowledged.lock().unwrap();
    let lost = acknowledged.iter().filter(|k| properties[k.as_str()] != "1").count();
    report.extra.insert("acknowledged".into(), json!(acknowledged.len()));
    report.extra.insert("conflicts_409".into(), json!(report.errors.get(&409).copied().unwrap_or(0)));
    report.extra.insert("lost".into(), json!(lost));
    Ok(report)
}
