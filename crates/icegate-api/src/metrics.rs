//! Prometheus metrics: request counts and latency by route and status, and connection pool
//! gauges read at scrape time. One registry per server instance (no process-wide globals), so
//! tests can run many servers in one process.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use icegate_catalog::metadata_cache::MetadataCache;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    /// The route template (`/v1/{prefix}/namespaces`), never the raw path: bounded cardinality.
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReportLabels {
    report_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    state: &'static str,
}

type HistogramFamily = Family<RequestLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: HistogramFamily,
    pool_connections: Family<PoolLabels, Gauge>,
    pool_max: Gauge,
    reports: Family<ReportLabels, Counter>,
    cache_documents: Gauge,
    cache_bytes: Gauge,
    cache_lookups: Family<LookupLabels, Counter>,
    tasks: Family<TaskLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    kind: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    result: &'static str,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~16 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Self::with_registrations(|_| {})
    }

    /// A registry that also exposes what `register` adds (other components' metrics).
    pub fn with_registrations(register: impl FnOnce(&mut Registry)) -> Arc<Self> {
        let mut registry = Registry::with_prefix("icegate");
        register(&mut registry);
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let pool_connections = Family::<PoolLabels, Gauge>::default();
        let pool_max = Gauge::default();
        let reports = Family::<ReportLabels, Counter>::default();
        let (cache_documents, cache_bytes) = (Gauge::default(), Gauge::default());
        let cache_lookups = Family::<LookupLabels, Counter>::default();
        let tasks = Family::<TaskLabels, Gauge>::default();
        registry.register(
            "tasks",
            "Background tasks by kind and state (queued: the queue's depth; failed: tasks that ran out of attempts)",
            tasks.clone(),
        );
        registry.register("http_requests", "HTTP requests handled", requests.clone());
        registry.register("http_request_duration_seconds", "HTTP request latency", latency.clone());
        registry.register("db_pool_connections", "Metadata store connections by state", pool_connections.clone());
        registry.register("db_pool_max_connections", "Metadata store connection limit", pool_max.clone());
        registry.register("table_metrics_reports", "Scan and commit reports received from clients", reports.clone());
        registry.register("table_metadata_cache_documents", "Metadata documents cached", cache_documents.clone());
        registry.register("table_metadata_cache_bytes", "Weight of the cached metadata documents", cache_bytes.clone());
        registry.register(
            "table_metadata_cache_lookups",
            "Metadata document lookups (loadTable, commits), answered from memory (hit) or the database (miss)",
            cache_lookups.clone(),
        );
        Arc::new(Self {
            registry,
            requests,
            latency,
            pool_connections,
            pool_max,
            reports,
            cache_documents,
            cache_bytes,
            cache_lookups,
            tasks,
        })
    }

    /// Sets the task gauges to `counts` (kind, state, tasks); a pair no longer counted reads 0.
    pub fn set_task_counts(&self, counts: &[(String, icegate_catalog::jobs::TaskState, i64)]) {
        let current: std::collections::HashSet<TaskLabels> =
            counts.iter().map(|(kind, state, _)| TaskLabels { kind: kind.clone(), state: state.as_str() }).collect();
        // What was counted before and is not now: zero (a family cannot forget a label set).
        let mut stale = Vec::new();
        for state in ["queued", "running", "done", "failed", "cancelled"] {
            for (kind, _, _) in counts {
                let labels = TaskLabels { kind: kind.clone(), state };
                if !current.contains(&labels) {
                    stale.push(labels);
                }
            }
        }
        for labels in stale {
            self.tasks.get_or_create(&labels).set(0);
        }
        for (kind, state, count) in counts {
            self.tasks.get_or_create(&TaskLabels { kind: kind.clone(), state: state.as_str() }).set(*count);
        }
    }

    fn record(&self, method: &str, route: &str, status: StatusCode, seconds: f64) {
        let labels = RequestLabels { method: method.to_owned(), route: route.to_owned(), status: status.as_u16() };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(seconds);
    }

    /// Counts one client metrics report (`scan-report` or `commit-report`).
    pub fn record_report(&self, report_type: &'static str) {
        self.reports.get_or_create(&ReportLabels { report_type }).inc();
    }

    /// The text exposition, with pool and cache gauges refreshed.
    pub fn render(&self, stats: icegate_catalog::store::PoolStats, cache: &MetadataCache) -> String {
        let (documents, bytes) = cache.usage();
        self.cache_documents.set(i64::try_from(documents).unwrap_or(i64::MAX));
        self.cache_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        let (hits, misses) = cache.hits_and_misses();
        for (result, total) in [("hit", hits), ("miss", misses)] {
            // The cache counts; the counter catches up with it.
            let counter = self.cache_lookups.get_or_create(&LookupLabels { result });
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        let in_use = stats.size.saturating_sub(stats.idle);
        self.pool_connections.get_or_create(&PoolLabels { state: "idle" }).set(i64::from(stats.idle));
        self.pool_connections.get_or_create(&PoolLabels { state: "in_use" }).set(i64::from(in_use));
        self.pool_max.set(i64::from(stats.max));
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// Middleware: counts and times every request under its route template.
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route =
        request.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    metrics.record(&method, &route, response.status(), started.elapsed().as_secs_f64());
    response
}

/// `GET /metrics` response with the OpenMetrics content type.
pub fn exposition(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response()
}
