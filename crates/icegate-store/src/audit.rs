//! The audit trail: one record per change, written in the change's own transaction (so a change
//! is never applied without its record, nor recorded without being applied), in one hash chain
//! per database.
//!
//! Each record is a canonical JSON text (who acted and how they authenticated, the operation,
//! the decisions that allowed it, when); its hash is SHA-256 of the previous record's hash (hex),
//! a newline and the record, so editing, removing, inserting or re-ordering any record breaks
//! every link after it. `seq` numbers the records 1, 2, 3, ... without gaps. The head row
//! (`audit_head`) holds the last sequence number and hash: an append takes it last in its
//! transaction (PostgreSQL: its row lock, so concurrent transactions and replicas queue in one
//! order; SQLite: the write lock the transaction already holds), and moves it.
//! [`SqlStore::verify_audit`] walks the chain.

use icegate_catalog::CatalogError;
use icegate_catalog::actors::{Authentication, Caller};
use icegate_catalog::audit::{AuditEvent, RequestRecord};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::store::MetadataSwap;
use serde_json::{Value, json};
use sqlx::Row;

use crate::{Backend, SqlStore, WriteTx, db_error};

pub use icegate_catalog::audit::{GENESIS, link};

/// A record's text: serialized from borrowed fields in one pass (a tree of `Value`s cost a
/// third of a read's time in allocations).
#[derive(serde::Serialize)]
struct RecordText<'a> {
    #[serde(rename = "at-ms")]
    at_ms: i64,
    #[serde(rename = "request-id")]
    request_id: Option<&'a str>,
    actor: ActorText<'a>,
    operation: Option<&'a str>,
    subject: SubjectText<'a>,
    decisions: Vec<DecisionText<'a>>,
    #[serde(rename = "idempotency-key")]
    idempotency_key: Option<&'a str>,
    change: &'a Value,
    outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    events: Vec<Value>,
}

/// Who acted, as a record names them.
#[derive(serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum ActorText<'a> {
    Anonymous,
    Unauthenticated,
    System { job: &'a str, task: Option<&'a str> },
    Principal { id: &'a str, name: &'a str, authenticated: ViaText<'a> },
}

/// How a principal authenticated (never the token: its digest).
#[derive(serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum ViaText<'a> {
    IcegateToken { token: &'a str },
    Oidc { issuer: &'a str, subject: &'a str, token: &'a str },
    Direct,
}

fn actor(caller: &Caller) -> ActorText<'_> {
    match caller {
        Caller::Anonymous => ActorText::Anonymous,
        Caller::System { job, task_id } => ActorText::System { job, task: task_id.as_deref() },
        Caller::Principal { id, name, via } => {
            let authenticated = match via {
                Authentication::Icegate { token } => ViaText::IcegateToken { token },
                Authentication::Oidc { issuer, subject, token } => ViaText::Oidc { issuer, subject, token },
                Authentication::Direct => ViaText::Direct,
            };
            ActorText::Principal { id: id.as_str(), name, authenticated }
        }
    }
}

/// A decision as a record names it: the target by its parts (a namespace by its levels, so no
/// name can read as another), the privilege, the outcome, and the grant that allowed it.
#[derive(serde::Serialize)]
struct DecisionText<'a> {
    target: TargetText<'a>,
    privilege: &'a str,
    outcome: &'a str,
    #[serde(rename = "granted-by")]
    granted_by: Option<&'a str>,
    grant: Option<GrantText<'a>>,
}

#[derive(serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum TargetText<'a> {
    Server,
    Warehouse {
        #[serde(rename = "warehouse-id")]
        warehouse_id: &'a str,
    },
    Namespace {
        #[serde(rename = "warehouse-id")]
        warehouse_id: &'a str,
        namespace: &'a [String],
    },
    Table {
        #[serde(rename = "warehouse-id")]
        warehouse_id: &'a str,
        namespace: &'a [String],
        name: &'a str,
    },
    View {
        #[serde(rename = "warehouse-id")]
        warehouse_id: &'a str,
        namespace: &'a [String],
        name: &'a str,
    },
}

#[derive(serde::Serialize)]
struct GrantText<'a> {
    id: &'a str,
    role: &'a str,
    privilege: &'a str,
    on: &'a str,
    #[serde(rename = "expires-at-ms")]
    expires_at_ms: Option<i64>,
}

fn decision(decision: &icegate_catalog::actors::Decision) -> DecisionText<'_> {
    use icegate_catalog::actors::{Outcome, TabularKind, Target};
    let target = match &decision.target {
        Target::Server => TargetText::Server,
        Target::Warehouse { warehouse_id } => TargetText::Warehouse { warehouse_id: warehouse_id.as_str() },
        Target::Namespace { warehouse_id, namespace } => {
            TargetText::Namespace { warehouse_id: warehouse_id.as_str(), namespace: namespace.levels() }
        }
        Target::Tabular { warehouse_id, namespace, name, kind: TabularKind::Table } => {
            TargetText::Table { warehouse_id: warehouse_id.as_str(), namespace: namespace.levels(), name }
        }
        Target::Tabular { warehouse_id, namespace, name, kind: TabularKind::View } => {
            TargetText::View { warehouse_id: warehouse_id.as_str(), namespace: namespace.levels(), name }
        }
    };
    let (outcome, granted_by) = match decision.outcome {
        Outcome::Granted { by } => ("granted", Some(by.as_str())),
        other => (other.as_str(), None),
    };
    let grant = decision.grant.as_deref().map(|g| GrantText {
        id: &g.id,
        role: &g.role,
        privilege: g.privilege.as_str(),
        on: &g.securable_type,
        expires_at_ms: g.expires_at_ms,
    });
    DecisionText { target, privilege: decision.privilege.as_str(), outcome, granted_by, grant }
}

#[derive(serde::Serialize)]
struct SubjectText<'a> {
    #[serde(rename = "warehouse-id")]
    warehouse_id: Option<&'a str>,
    kind: Option<&'a str>,
    namespace: Option<&'a [String]>,
    name: Option<&'a str>,
}

/// A change's record, ready to be linked.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    at_ms: i64,
    operation: Option<String>,
    principal_id: Option<String>,
    actor: String,
    /// What the record is about (see [`subject`]) and how it ended: searchable copies.
    warehouse_id: Option<String>,
    resource: Option<String>,
    outcome: &'static str,
    record: String,
}

/// The separator of a namespace's levels in the `resource` column: a control character, which
/// no name may hold.
pub const RESOURCE_SEPARATOR: char = '\u{1f}';
/// What comes before a table's or view's name in the `resource` column (after its namespace's
/// levels), so a name is never read as a level, nor a level as a name.
pub const NAME_SEPARATOR: char = '\u{1e}';

/// What a record is about: the warehouse, the namespace (its levels) and, for a table or view,
/// its name, and which kind of object that is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Subject {
    warehouse_id: Option<String>,
    namespace: Option<Vec<String>>,
    name: Option<String>,
    kind: Option<&'static str>,
}

impl Subject {
    /// The record's `subject` field.
    fn text(&self) -> SubjectText<'_> {
        SubjectText {
            warehouse_id: self.warehouse_id.as_deref(),
            kind: self.kind,
            namespace: self.namespace.as_deref(),
            name: self.name.as_deref(),
        }
    }

    /// The searchable `resource` column: the namespace's levels joined by [`RESOURCE_SEPARATOR`],
    /// then [`NAME_SEPARATOR`] and the name.
    fn resource(&self) -> Option<String> {
        resource_of(self.namespace.as_deref()?, self.name.as_deref())
    }
}

/// The `resource` column of `namespace` (levels) and `name`.
fn resource_of(namespace: &[String], name: Option<&str>) -> Option<String> {
    let mut column = namespace.join(&RESOURCE_SEPARATOR.to_string());
    if let Some(name) = name {
        column.push(NAME_SEPARATOR);
        column.push_str(name);
    }
    Some(column)
}

/// What a request was about, by its most specific decision's target (the server: nothing).
fn subject(decisions: &[icegate_catalog::actors::Decision]) -> Subject {
    use icegate_catalog::actors::Target;
    let depth = |target: &Target| match target {
        Target::Server => 0,
        Target::Warehouse { .. } => 1,
        Target::Namespace { .. } => 2,
        Target::Tabular { .. } => 3,
    };
    let Some(target) = decisions.iter().map(|d| &d.target).rev().max_by_key(|t| depth(t)) else {
        return Subject::default();
    };
    match target {
        Target::Server => Subject::default(),
        Target::Warehouse { warehouse_id } => Subject {
            warehouse_id: Some(warehouse_id.as_str().to_owned()),
            kind: Some("warehouse"),
            ..Subject::default()
        },
        Target::Namespace { warehouse_id, namespace } => Subject {
            warehouse_id: Some(warehouse_id.as_str().to_owned()),
            namespace: Some(namespace.levels().to_vec()),
            name: None,
            kind: Some("namespace"),
        },
        Target::Tabular { warehouse_id, namespace, name, kind } => Subject {
            warehouse_id: Some(warehouse_id.as_str().to_owned()),
            namespace: Some(namespace.levels().to_vec()),
            name: Some(name.clone()),
            kind: Some(kind.as_str()),
        },
    }
}

/// An event as a record names it.
fn event(event: &AuditEvent) -> Value {
    match event {
        AuditEvent::Vended { tabular_id, prefix, level, expires_at_ms, access_key_id, refresh } => json!({
            "kind": if *refresh { "credentials-refreshed" } else { "credentials-vended" },
            "tabular-id": tabular_id.as_ref().map(|id| id.as_str()),
            "prefix": prefix,
            "access": level.as_str(),
            "expires-at-ms": expires_at_ms,
            "access-key-id": access_key_id,
        }),
        AuditEvent::Signed { tabular_id, method, bucket, key, level } => json!({
            "kind": "request-signed",
            "tabular-id": tabular_id.as_ref().map(|id| id.as_str()),
            "operation": method,
            "bucket": bucket,
            "key": key,
            "access": level.as_str(),
        }),
        AuditEvent::TokenIssued { client_id, expires_at_ms, token } => json!({
            "kind": "token-issued", "client-id": client_id, "expires-at-ms": expires_at_ms, "token": token,
        }),
        AuditEvent::TokenRefused { client_id, reason, suppressed_before } => json!({
            "kind": "token-refused", "client-id": client_id, "reason": reason, "suppressed-before": suppressed_before,
        }),
        AuditEvent::Unauthenticated { token, reason, suppressed_before } => json!({
            "kind": "unauthenticated", "token": token, "reason": reason, "suppressed-before": suppressed_before,
        }),
        AuditEvent::Startup { version, config_digest, settings } => json!({
            "kind": "startup", "version": version, "config-digest": config_digest, "settings": settings,
        }),
    }
}

/// The record of the change `write` makes at `at_ms`; `None` for [`WriteContext::NONE`] (tests'
/// own set-up, which no one asked for).
pub(crate) fn entry(write: &WriteContext, at_ms: i64) -> Option<Entry> {
    applied(write, at_ms, write.change.clone().unwrap_or(Value::Null), None)
}

/// What a change made, for its record: the object it is about (its warehouse, and namespace
/// levels then name: the record's subject and searchable resource, in place of the decisions'
/// most specific target, which for a create is the container) and what happened to it.
pub(crate) struct Change {
    pub subject: Subject,
    pub detail: Value,
}

impl Change {
    /// A table or view (`kind`) by its id and name, with `detail`'s fields beside them.
    pub(crate) fn tabular(
        warehouse_id: &str,
        (namespace, name): (&icegate_catalog::NamespaceIdent, &str),
        (id, kind): (&str, icegate_catalog::store::TabularKind),
        mut detail: Value,
    ) -> Self {
        detail["tabular-id"] = json!(id);
        let subject = Subject {
            warehouse_id: Some(warehouse_id.to_owned()),
            namespace: Some(namespace.levels().to_vec()),
            name: Some(name.to_owned()),
            kind: Some(kind.as_str()),
        };
        Self { subject, detail }
    }

    /// A warehouse itself (its settings, its source locations), with `detail`.
    pub(crate) fn warehouse(warehouse_id: &str, detail: Value) -> Self {
        let subject = Subject {
            warehouse_id: Some(warehouse_id.to_owned()),
            namespace: None,
            name: None,
            kind: Some("warehouse"),
        };
        Self { subject, detail }
    }

    /// A namespace by its levels, with `detail`.
    pub(crate) fn namespace(warehouse_id: &str, namespace: &icegate_catalog::NamespaceIdent, detail: Value) -> Self {
        let subject = Subject {
            warehouse_id: Some(warehouse_id.to_owned()),
            namespace: Some(namespace.levels().to_vec()),
            name: None,
            kind: Some("namespace"),
        };
        Self { subject, detail }
    }
}

/// The record of `write`'s change `change` at `at_ms` (`None` as for [`entry`]).
pub(crate) fn entry_changed(write: &WriteContext, at_ms: i64, change: &Change) -> Option<Entry> {
    applied(write, at_ms, change.detail.clone(), Some(&change.subject))
}

/// The record of a single-table commit's swap (committed in a group): the change names the table
/// and the metadata file it now points at.
pub(crate) fn entry_for_swap(write: &WriteContext, at_ms: i64, swap: &MetadataSwap) -> Option<Entry> {
    let change = json!({
        "tabular-id": swap.id.as_str(),
        "warehouse-id": swap.warehouse_id.as_str(),
        "name": format!("{}.{}", swap.namespace, swap.name),
        "metadata-location": swap.metadata_location,
    });
    applied(write, at_ms, change, None)
}

/// The record of a change `write` applied (`about`: what it made, when not its decisions' most
/// specific target); `None` for [`WriteContext::NONE`].
fn applied(write: &WriteContext, at_ms: i64, change: Value, about: Option<&Subject>) -> Option<Entry> {
    if matches!(&write.actor, Caller::System { job, .. } if job.is_empty()) && write.operation.is_none() {
        return None;
    }
    Some(build(write, at_ms, true, ("applied", None), change, about))
}

/// The record of a request that is not a recorded change (a read, a vend, a signature, a
/// refusal, a token, a start-up): what it was answered with and how it ended.
pub(crate) fn request_entry(request: &RequestRecord, at_ms: i64) -> Entry {
    let ended = (request.answered.as_str(), request.status);
    build(&request.write, at_ms, request.authenticated, ended, Value::Null, None)
}

/// A record; `about`: what it is about, when not its decisions' most specific target.
fn build(
    write: &WriteContext,
    at_ms: i64,
    authenticated: bool,
    (outcome, status): (&'static str, Option<u16>),
    change: Value,
    about: Option<&Subject>,
) -> Entry {
    let subject = about.cloned().unwrap_or_else(|| subject(&write.decisions));
    let (actor_text, actor_column) = if authenticated {
        (actor(&write.actor), write.actor.describe())
    } else {
        (ActorText::Unauthenticated, UNAUTHENTICATED.to_owned())
    };
    let record = RecordText {
        at_ms,
        request_id: write.request_id.as_deref(),
        actor: actor_text,
        operation: write.operation.as_deref(),
        subject: subject.text(),
        decisions: write.decisions.iter().map(decision).collect(),
        idempotency_key: write.idempotency.as_ref().map(|scope| scope.key.key.as_str()),
        change: &change,
        outcome,
        status,
        events: write.events.iter().map(event).collect(),
    };
    // Serializing borrowed strings and numbers cannot fail.
    let record = serde_json::to_string(&record).unwrap_or_default();
    Entry {
        at_ms,
        operation: write.operation.as_deref().map(str::to_owned),
        principal_id: if authenticated { write.actor.principal_id().map(|id| id.as_str().to_owned()) } else { None },
        actor: actor_column,
        resource: subject.resource(),
        warehouse_id: subject.warehouse_id,
        outcome,
        record,
    }
}

/// How the actor column names a caller that did not authenticate.
pub const UNAUTHENTICATED: &str = "unauthenticated";

/// Appends `entries` to the chain in `tx`, last in the transaction (see the module documentation).
pub(crate) async fn append(tx: &mut WriteTx, backend: Backend, entries: &[&Entry]) -> Result<(), CatalogError> {
    append_on(tx, backend, entries).await.map_err(db_error)
}

/// The columns of a record, in the order statements bind them.
const COLUMNS: [&str; 10] =
    ["seq", "at_ms", "operation", "principal_id", "actor", "warehouse_id", "resource", "outcome", "record", "hash"];

/// Records per `INSERT` statement when many are appended together.
const ROWS_PER_INSERT: usize = 50;

/// [`append`] on a connection in a transaction (the group committers' and a swap run alone).
pub(crate) async fn append_on(
    conn: &mut sqlx::AnyConnection,
    backend: Backend,
    entries: &[&Entry],
) -> Result<(), sqlx::Error> {
    if entries.is_empty() {
        return Ok(());
    }
    let lock = if backend == Backend::Postgres { " FOR UPDATE" } else { "" };
    let head = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT seq, hash FROM audit_head WHERE id = 1{lock}")))
        .fetch_one(&mut *conn)
        .await?;
    let (mut seq, mut hash): (i64, String) = (head.try_get("seq")?, head.try_get("hash")?);
    let mut linked = Vec::with_capacity(entries.len());
    for entry in entries {
        seq += 1;
        hash = link(&hash, &entry.record);
        linked.push((seq, *entry, hash.clone()));
    }
    for rows in linked.chunks(ROWS_PER_INSERT) {
        let values: Vec<String> = (0..rows.len())
            .map(|row| {
                let first = row * COLUMNS.len();
                let params: Vec<String> = (1..=COLUMNS.len()).map(|n| format!("${}", first + n)).collect();
                format!("({})", params.join(", "))
            })
            .collect();
        let sql = format!("INSERT INTO audit_log ({}) VALUES {}", COLUMNS.join(", "), values.join(", "));
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (seq, entry, hash) in rows {
            query = query
                .bind(*seq)
                .bind(entry.at_ms)
                .bind(entry.operation.as_deref())
                .bind(entry.principal_id.as_deref())
                .bind(&entry.actor)
                .bind(entry.warehouse_id.as_deref())
                .bind(entry.resource.as_deref())
                .bind(entry.outcome)
                .bind(&entry.record)
                .bind(hash);
        }
        query.execute(&mut *conn).await?;
    }
    sqlx::query("UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1")
        .bind(seq)
        .bind(&hash)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// [`append`] on the SQLite group committer's own connection, in its transaction.
pub(crate) fn append_sqlite(tx: &rusqlite::Transaction<'_>, entries: &[&Entry]) -> rusqlite::Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let (mut seq, mut hash): (i64, String) =
        tx.query_row("SELECT seq, hash FROM audit_head WHERE id = 1", [], |row| Ok((row.get(0)?, row.get(1)?)))?;
    for entry in entries {
        seq += 1;
        hash = link(&hash, &entry.record);
        tx.prepare_cached(
            "INSERT INTO audit_log (seq, at_ms, operation, principal_id, actor, warehouse_id, resource, outcome, \
             record, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(rusqlite::params![
            seq,
            entry.at_ms,
            entry.operation,
            entry.principal_id,
            entry.actor,
            entry.warehouse_id,
            entry.resource,
            entry.outcome,
            entry.record,
            hash
        ])?;
    }
    tx.prepare_cached("UPDATE audit_head SET seq = ?1, hash = ?2 WHERE id = 1")?
        .execute(rusqlite::params![seq, hash])?;
    Ok(())
}

/// See [`Entry::columns`].
pub(crate) type EntryColumns<'a> =
    (i64, Option<&'a str>, Option<&'a str>, &'a str, &'a str, Option<&'a str>, Option<&'a str>, &'a str);

impl Entry {
    /// The values the PostgreSQL group function takes for this record: time, operation,
    /// principal id, actor, record, warehouse, resource, outcome.
    pub(crate) fn columns(&self) -> EntryColumns<'_> {
        (
            self.at_ms,
            self.operation.as_deref(),
            self.principal_id.as_deref(),
            &self.actor,
            &self.record,
            self.warehouse_id.as_deref(),
            self.resource.as_deref(),
            self.outcome,
        )
    }
}

/// Records of requests that are not changes, appended in groups: each request queues its record
/// and waits; whoever finds no group being appended starts one (on a task of its own, so a
/// request that gives up does not strand the others), which appends everything queued, in one
/// transaction, until the queue is empty. Concurrent requests share a transaction and an
/// `fsync`, so recording them costs little more than recording one.
#[derive(Default)]
pub(crate) struct Recorder {
    queue: std::sync::Mutex<Queue>,
    /// SQLite: a connection of the recorder's own, as the group committer has (statements
    /// prepared once, no round trips to sqlx's worker thread); opened on first use.
    sqlite: std::sync::Mutex<Option<rusqlite::Connection>>,
}

#[derive(Default)]
struct Queue {
    pending: Vec<(Entry, tokio::sync::oneshot::Sender<Result<(), String>>)>,
    appending: bool,
}

/// Records appended in one transaction at most.
const GROUP: usize = 500;

impl Recorder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Clears the `appending` mark when the appending task ends, however it ends (the records it
/// took then fail: their senders are dropped).
struct Appending<'a>(&'a Recorder);

impl Drop for Appending<'_> {
    fn drop(&mut self) {
        self.0.lock().appending = false;
    }
}

impl SqlStore {
    /// Appends `entry` with the next group and returns once it is durable.
    pub(crate) async fn record_entry(&self, entry: Entry) -> Result<(), CatalogError> {
        let (sent, received) = tokio::sync::oneshot::channel();
        let start = {
            let mut queue = self.recorder.lock();
            queue.pending.push((entry, sent));
            !std::mem::replace(&mut queue.appending, true)
        };
        if start {
            let store = self.clone();
            tokio::spawn(async move { store.append_groups().await });
        }
        match received.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(CatalogError::Unavailable(format!("the audit trail could not be written: {why}"))),
            Err(_) => Err(CatalogError::Unavailable("the audit trail could not be written".into())),
        }
    }

    async fn append_groups(&self) {
        let _appending = Appending(&self.recorder);
        loop {
            let group: Vec<_> = {
                let mut queue = self.recorder.lock();
                if queue.pending.is_empty() {
                    queue.appending = false;
                    return;
                }
                let take = queue.pending.len().min(GROUP);
                queue.pending.drain(..take).collect()
            };
            let (entries, senders): (Vec<Entry>, Vec<_>) = group.into_iter().unzip();
            let (records, started) = (entries.len(), std::time::Instant::now());
            let result = self.append_alone(entries).await.map_err(|e| e.to_string());
            tracing::debug!(target: "icegate::audit", records, micros = started.elapsed().as_micros() as u64, "appended a group of records");
            for sent in senders {
                let _ = sent.send(result.clone());
            }
        }
    }

    /// Appends `entries` in a transaction of their own: on SQLite's file on the recorder's own
    /// connection, in this process's turn among writers; else through the pool.
    async fn append_alone(&self, entries: Vec<Entry>) -> Result<(), CatalogError> {
        if let Some(file) = self.database.0.sqlite_file() {
            let turn = self.write_turn().await;
            let (file, recorder) = (file.to_owned(), self.recorder.clone());
            let ran = tokio::task::spawn_blocking(move || {
                let mut slot = recorder.sqlite.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let mut connection = match slot.take() {
                    Some(connection) => connection,
                    None => crate::group_commit::open(&file)?,
                };
                let tx = connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                append_sqlite(&tx, &entries.iter().collect::<Vec<_>>())?;
                tx.commit()?;
                // Kept only after a success: a failure's connection goes, rolling back what it left.
                *slot = Some(connection);
                Ok::<_, rusqlite::Error>(())
            })
            .await;
            drop(turn);
            return match ran {
                Ok(result) => result.map_err(crate::group_commit::sqlite_error),
                Err(err) => Err(CatalogError::Internal(anyhow::anyhow!("appending audit records: {err}"))),
            };
        }
        let entries: Vec<&Entry> = entries.iter().collect();
        let mut tx = self.begin_write().await?;
        if let Err(err) = append(&mut tx, self.backend, &entries).await {
            let _ = tx.rollback().await;
            return Err(err);
        }
        tx.commit().await.map_err(db_error)
    }
}

#[async_trait::async_trait]
impl icegate_catalog::audit::AuditStore for SqlStore {
    async fn record(&self, request: RequestRecord) -> Result<(), CatalogError> {
        self.record_entry(request_entry(&request, self.now_ms())).await
    }

    async fn audit_ends(&self) -> Result<icegate_catalog::audit::ChainEnds, CatalogError> {
        // The base first: a cut between the two reads moves the base forward, never past this head.
        let base = self.audit_base().await?;
        let head = self.audit_head().await?;
        Ok(icegate_catalog::audit::ChainEnds { base, head })
    }

    async fn audit_seq_before(&self, at_ms: i64) -> Result<Option<i64>, CatalogError> {
        sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(seq) FROM audit_log WHERE at_ms < $1")
            .bind(at_ms)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn cut_audit(&self, write: &WriteContext, seq: i64) -> Result<(), CatalogError> {
        let mut tx = self.begin_write().await?;
        let base =
            sqlx::query("SELECT seq FROM audit_base WHERE id = 1").fetch_one(&mut *tx).await.map_err(db_error)?;
        let base: i64 = base.try_get("seq").map_err(db_error)?;
        if seq <= base {
            // Cut already (a task resumed after its cut committed).
            let _ = tx.rollback().await;
            return Ok(());
        }
        let hash = sqlx::query("SELECT hash FROM audit_log WHERE seq = $1")
            .bind(seq)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| CatalogError::Conflict(format!("audit record {seq} is not in the store to cut at")))?;
        let hash: String = hash.try_get("hash").map_err(db_error)?;
        sqlx::query("UPDATE audit_base SET seq = $1, hash = $2 WHERE id = 1")
            .bind(seq)
            .bind(&hash)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let removed = sqlx::query("DELETE FROM audit_log WHERE seq > $1 AND seq <= $2")
            .bind(base)
            .bind(seq)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        let write =
            write.changing(json!({ "audit-cut": { "after": base, "through": seq, "hash": hash, "removed": removed } }));
        self.commit_write(tx, &write).await
    }

    async fn audit_records(
        &self,
        filter: &icegate_catalog::audit::AuditFilter,
        limit: u32,
    ) -> Result<Vec<icegate_catalog::audit::AuditRecord>, CatalogError> {
        enum Param {
            Int(i64),
            Text(String),
        }
        let mut params: Vec<Param> = Vec::new();
        // The placeholder of a new parameter.
        let mut bind = |param: Param| {
            params.push(param);
            format!("${}", params.len())
        };
        let mut conditions: Vec<String> = Vec::new();
        for (value, column) in [
            (filter.after_seq, "seq >"),
            (filter.until_seq, "seq <="),
            (filter.since_ms, "at_ms >="),
            (filter.until_ms, "at_ms <"),
        ] {
            if let Some(value) = value {
                conditions.push(format!("{column} {}", bind(Param::Int(value))));
            }
        }
        for (value, column) in [
            (&filter.actor, "actor"),
            (&filter.principal_id, "principal_id"),
            (&filter.operation, "operation"),
            (&filter.warehouse_id, "warehouse_id"),
            (&filter.outcome, "outcome"),
        ] {
            if let Some(value) = value {
                conditions.push(format!("{column} = {}", bind(Param::Text(value.clone()))));
            }
        }
        // Resources are compared whole or by prefix and suffix, never with LIKE, so no
        // character of a name acts as a pattern.
        match (&filter.namespace, &filter.name) {
            (Some(levels), Some(name)) => {
                let whole = resource_of(levels, Some(name)).unwrap_or_default();
                conditions.push(format!("resource = {}", bind(Param::Text(whole))));
            }
            (Some(levels), None) => {
                // The namespace itself, or anything inside it: a namespace below it, or a table
                // or view in it or below.
                let exact = levels.join(&RESOURCE_SEPARATOR.to_string());
                let len = exact.chars().count() + 1;
                let below = format!("{exact}{RESOURCE_SEPARATOR}");
                let named = format!("{exact}{NAME_SEPARATOR}");
                let (exact, below, named) =
                    (bind(Param::Text(exact)), bind(Param::Text(below)), bind(Param::Text(named)));
                conditions.push(format!(
                    "(resource = {exact} OR substr(resource, 1, {len}) = {below} OR substr(resource, 1, {len}) = {named})"
                ));
            }
            (None, Some(name)) => {
                // A table or view of this name, in any namespace.
                let suffix = format!("{NAME_SEPARATOR}{name}");
                let len = suffix.chars().count();
                conditions.push(format!(
                    "length(resource) >= {len} AND substr(resource, length(resource) - {len} + 1) = {}",
                    bind(Param::Text(suffix))
                ));
            }
            (None, None) => {}
        }
        let filter_sql =
            if conditions.is_empty() { String::new() } else { format!(" WHERE {}", conditions.join(" AND ")) };
        let sql = format!("SELECT seq, at_ms, record, hash FROM audit_log{filter_sql} ORDER BY seq LIMIT {limit}");
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for param in params {
            query = match param {
                Param::Int(value) => query.bind(value),
                Param::Text(value) => query.bind(value),
            };
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok(icegate_catalog::audit::AuditRecord {
                    seq: row.try_get("seq")?,
                    at_ms: row.try_get("at_ms")?,
                    record: row.try_get("record")?,
                    hash: row.try_get("hash")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(db_error)
    }
}

/// What walking the chain found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditCheck {
    /// Records read.
    pub records: u64,
    /// The first broken link: its sequence number and what is wrong there.
    pub broken: Option<(i64, String)>,
}

/// Records read per query while walking the chain.
const PAGE: i64 = 100;

/// Where a walk of the chain is: the next sequence number expected, the hash before it, and
/// the records read.
struct Walk {
    expected: i64,
    previous: String,
    records: u64,
}

impl SqlStore {
    /// Walks the audit chain from its first record: every sequence number in turn, every hash
    /// the link of the one before and its record, every searchable column the record's own, the
    /// record the head named when the walk began, and the head where the last record is (a
    /// server appending meanwhile moves the head; the walk follows). Reports the first broken
    /// link.
    pub async fn verify_audit(&self) -> Result<AuditCheck, CatalogError> {
        let (start_seq, start_hash) = self.audit_head().await?;
        // The chain in the store starts after its base (the last record retention removed; a
        // checkpoint in object storage vouches for it: see `icegate audit verify`). Rows numbered
        // at or below it are outside the chain: none may exist.
        let (base_seq, base_hash) = self.audit_base().await?;
        let stray: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit_log WHERE seq <= $1")
            .bind(base_seq)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        if stray > 0 {
            return Ok(AuditCheck {
                records: 0,
                broken: Some((
                    base_seq,
                    format!("{stray} records are numbered at or below the chain's start {base_seq}"),
                )),
            });
        }
        let mut walk = Walk { expected: base_seq + 1, previous: base_hash, records: 0 };
        if let Some(broken) = self.walk_audit(&mut walk, (start_seq, &start_hash)).await? {
            return Ok(AuditCheck { records: walk.records, broken: Some(broken) });
        }
        loop {
            let (head_seq, head_hash) = self.audit_head().await?;
            let last = walk.expected - 1;
            if head_seq == last && head_hash == walk.previous {
                return Ok(AuditCheck { records: walk.records, broken: None });
            }
            let broken = if head_seq < last {
                (head_seq + 1, format!("records after the head's record {head_seq} were added behind it"))
            } else if head_seq == last {
                (last, "the last record is not the one the head names".to_owned())
            } else {
                // Appended since the walk read the rows: walk on, unless nothing is there.
                let before = walk.records;
                if let Some(broken) = self.walk_audit(&mut walk, (head_seq, &head_hash)).await? {
                    return Ok(AuditCheck { records: walk.records, broken: Some(broken) });
                }
                if walk.records > before {
                    continue;
                }
                (
                    last + 1,
                    format!("the head names record {head_seq}, the chain ends at record {last}: records were removed"),
                )
            };
            return Ok(AuditCheck { records: walk.records, broken: Some(broken) });
        }
    }

    /// The chain's head now: the last record's sequence number and hash.
    pub async fn audit_head_now(&self) -> Result<(i64, String), CatalogError> {
        self.audit_head().await
    }

    async fn audit_base(&self) -> Result<(i64, String), CatalogError> {
        let base = sqlx::query("SELECT seq, hash FROM audit_base WHERE id = 1")
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Ok((base.try_get("seq").map_err(db_error)?, base.try_get("hash").map_err(db_error)?))
    }

    async fn audit_head(&self) -> Result<(i64, String), CatalogError> {
        let head = sqlx::query("SELECT seq, hash FROM audit_head WHERE id = 1")
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Ok((head.try_get("seq").map_err(db_error)?, head.try_get("hash").map_err(db_error)?))
    }

    /// Walks the records from `walk.expected` on; `head`: a record the head named, whose hash
    /// must be its own. The first broken link, if any.
    async fn walk_audit(&self, walk: &mut Walk, head: (i64, &str)) -> Result<Option<(i64, String)>, CatalogError> {
        loop {
            let rows = sqlx::query(
                "SELECT seq, at_ms, operation, principal_id, actor, warehouse_id, resource, outcome, record, hash \
                 FROM audit_log WHERE seq >= $1 ORDER BY seq LIMIT $2",
            )
            .bind(walk.expected)
            .bind(PAGE)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
            for row in &rows {
                let seq: i64 = row.try_get("seq").map_err(db_error)?;
                let record: String = row.try_get("record").map_err(db_error)?;
                let hash: String = row.try_get("hash").map_err(db_error)?;
                if seq != walk.expected {
                    return Ok(Some((
                        walk.expected,
                        format!("record {} is missing (the next is {seq})", walk.expected),
                    )));
                }
                if hash != link(&walk.previous, &record) {
                    let why = format!("record {seq} does not link to the one before it (edited, inserted or moved)");
                    return Ok(Some((seq, why)));
                }
                if seq == head.0 && hash != head.1 {
                    return Ok(Some((seq, format!("record {seq} is not the one the head named"))));
                }
                if let Some(why) = columns_differ(row, &record).map_err(db_error)? {
                    return Ok(Some((seq, format!("record {seq}: {why}"))));
                }
                walk.records += 1;
                walk.expected += 1;
                walk.previous = hash;
            }
            if (rows.len() as i64) < PAGE {
                return Ok(None);
            }
        }
    }
}

/// Whether the searchable columns of `row` say something its record does not.
fn columns_differ(row: &sqlx::any::AnyRow, record: &str) -> Result<Option<String>, sqlx::Error> {
    let Ok(parsed) = serde_json::from_str::<Value>(record) else {
        return Ok(Some("its record is not JSON".into()));
    };
    let at_ms: i64 = row.try_get("at_ms")?;
    let operation: Option<String> = row.try_get("operation")?;
    let principal_id: Option<String> = row.try_get("principal_id")?;
    let actor_column: String = row.try_get("actor")?;
    let actor = &parsed["actor"];
    let described = match actor["kind"].as_str() {
        Some("principal") => actor["name"].as_str().map(str::to_owned),
        Some("unauthenticated") => Some(UNAUTHENTICATED.to_owned()),
        Some("anonymous") => Some("anonymous".to_owned()),
        Some("system") => actor["job"].as_str().map(|job| match actor["task"].as_str() {
            Some(task) => format!("system:{job}:{task}"),
            None => format!("system:{job}"),
        }),
        _ => None,
    };
    if described.as_deref() != Some(actor_column.as_str()) {
        return Ok(Some("its actor column differs from its record".into()));
    }
    if parsed["at-ms"].as_i64() != Some(at_ms) {
        return Ok(Some("its time column differs from its record".into()));
    }
    if parsed["operation"].as_str() != operation.as_deref() {
        return Ok(Some("its operation column differs from its record".into()));
    }
    let recorded = (parsed["actor"]["kind"] == "principal").then(|| parsed["actor"]["id"].as_str()).flatten();
    if recorded != principal_id.as_deref() {
        return Ok(Some("its principal column differs from its record".into()));
    }
    let warehouse_id: Option<String> = row.try_get("warehouse_id")?;
    let resource: Option<String> = row.try_get("resource")?;
    let outcome: String = row.try_get("outcome")?;
    let subject = &parsed["subject"];
    if subject["warehouse-id"].as_str() != warehouse_id.as_deref() {
        return Ok(Some("its warehouse column differs from its record".into()));
    }
    let levels: Option<Vec<String>> = subject["namespace"]
        .as_array()
        .map(|levels| levels.iter().map(|l| l.as_str().unwrap_or_default().to_owned()).collect());
    let recorded = levels.and_then(|levels| resource_of(&levels, subject["name"].as_str()));
    if recorded != resource {
        return Ok(Some("its resource column differs from its record".into()));
    }
    if parsed["outcome"].as_str() != Some(outcome.as_str()) {
        return Ok(Some("its outcome column differs from its record".into()));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    #[test]
    fn a_link_covers_the_previous_hash_and_the_record() {
        let first = link(GENESIS, "{\"a\":1}");
        assert_eq!(first.len(), 64);
        assert_ne!(first, link(GENESIS, "{\"a\":2}"));
        assert_ne!(link(&first, "x"), link(GENESIS, "x"));
        // SHA-256 of "<64 zeros>\nabc", as any implementation computes it.
        let mut hasher = Sha256::new();
        hasher.update(format!("{GENESIS}\nabc").as_bytes());
        let expected: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(link(GENESIS, "abc"), expected);
    }

    #[test]
    fn the_tests_own_set_up_is_not_recorded_but_everything_else_is() {
        assert!(entry(&WriteContext::NONE, 1).is_none());
        let system = icegate_catalog::RequestContext::system("location-hold-expiry", Some("t1")).write();
        let entry = entry(&system, 5).unwrap();
        let record: Value = serde_json::from_str(&entry.record).unwrap();
        assert_eq!(record["actor"], json!({"kind": "system", "job": "location-hold-expiry", "task": "t1"}));
        assert_eq!(record["at-ms"], 5);
        assert_eq!(entry.actor, "system:location-hold-expiry:t1");
    }
}
