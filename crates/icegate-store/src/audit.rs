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
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::store::MetadataSwap;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::{Backend, SqlStore, WriteTx, db_error};

/// The hash before the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The link after `previous` for `record`: SHA-256 of `previous`, a newline and `record`, in hex.
pub fn link(previous: &str, record: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(previous.as_bytes());
    hasher.update(b"\n");
    hasher.update(record.as_bytes());
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Who acted, as a record names them.
fn actor(caller: &Caller) -> Value {
    match caller {
        Caller::Anonymous => json!({ "kind": "anonymous" }),
        Caller::System { job, task_id } => json!({ "kind": "system", "job": job, "task": task_id }),
        Caller::Principal { id, name, via } => {
            let via = match via {
                Authentication::Icegate { token } => json!({ "kind": "icegate-token", "token": token }),
                Authentication::Oidc { issuer, subject, token } => {
                    json!({ "kind": "oidc", "issuer": issuer, "subject": subject, "token": token })
                }
                Authentication::Direct => json!({ "kind": "direct" }),
            };
            json!({ "kind": "principal", "id": id.as_str(), "name": name, "authenticated": via })
        }
    }
}

/// A decision as a record names it: the target by its parts (a namespace by its levels, so no
/// name can read as another), the privilege, the outcome.
fn decision(decision: &icegate_catalog::actors::Decision) -> Value {
    use icegate_catalog::actors::{Outcome, Target};
    let target = match &decision.target {
        Target::Server => json!({ "kind": "server" }),
        Target::Warehouse { warehouse_id } => json!({ "kind": "warehouse", "warehouse-id": warehouse_id.as_str() }),
        Target::Namespace { warehouse_id, namespace } => {
            json!({ "kind": "namespace", "warehouse-id": warehouse_id.as_str(), "namespace": namespace.levels() })
        }
        Target::Tabular { warehouse_id, namespace, name, kind } => json!({
            "kind": kind.as_str(), "warehouse-id": warehouse_id.as_str(), "namespace": namespace.levels(), "name": name,
        }),
    };
    let (outcome, by) = match decision.outcome {
        Outcome::Granted { by } => ("granted", Some(by.as_str())),
        other => (other.as_str(), None),
    };
    json!({ "target": target, "privilege": decision.privilege.as_str(), "outcome": outcome, "granted-by": by })
}

/// A change's record, ready to be linked.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    at_ms: i64,
    operation: Option<String>,
    principal_id: Option<String>,
    actor: String,
    record: String,
}

/// The record of the change `write` makes at `at_ms`; `None` for [`WriteContext::NONE`] (tests'
/// own set-up, which no one asked for).
pub(crate) fn entry(write: &WriteContext, at_ms: i64) -> Option<Entry> {
    entry_with(write, at_ms, Value::Null)
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
    entry_with(write, at_ms, change)
}

fn entry_with(write: &WriteContext, at_ms: i64, change: Value) -> Option<Entry> {
    if matches!(&write.actor, Caller::System { job, .. } if job.is_empty()) && write.operation.is_none() {
        return None;
    }
    let decisions: Vec<Value> = write.decisions.iter().map(decision).collect();
    let record = json!({
        "at-ms": at_ms,
        "actor": actor(&write.actor),
        "operation": write.operation.as_deref(),
        "decisions": decisions,
        "idempotency-key": write.idempotency.as_ref().map(|scope| scope.key.key.as_str()),
        "change": change,
        "outcome": "applied",
    });
    Some(Entry {
        at_ms,
        operation: write.operation.as_deref().map(str::to_owned),
        principal_id: write.actor.principal_id().map(|id| id.as_str().to_owned()),
        actor: write.actor.describe(),
        record: record.to_string(),
    })
}

/// Appends `entries` to the chain in `tx`, last in the transaction (see the module documentation).
pub(crate) async fn append(tx: &mut WriteTx, backend: Backend, entries: &[&Entry]) -> Result<(), CatalogError> {
    append_on(tx, backend, entries).await.map_err(db_error)
}

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
    for entry in entries {
        seq += 1;
        hash = link(&hash, &entry.record);
        sqlx::query(
            "INSERT INTO audit_log (seq, at_ms, operation, principal_id, actor, record, hash) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(seq)
        .bind(entry.at_ms)
        .bind(entry.operation.as_deref())
        .bind(entry.principal_id.as_deref())
        .bind(&entry.actor)
        .bind(&entry.record)
        .bind(&hash)
        .execute(&mut *conn)
        .await?;
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
            "INSERT INTO audit_log (seq, at_ms, operation, principal_id, actor, record, hash) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(rusqlite::params![
            seq,
            entry.at_ms,
            entry.operation,
            entry.principal_id,
            entry.actor,
            entry.record,
            hash
        ])?;
    }
    tx.prepare_cached("UPDATE audit_head SET seq = ?1, hash = ?2 WHERE id = 1")?
        .execute(rusqlite::params![seq, hash])?;
    Ok(())
}

impl Entry {
    /// The values the PostgreSQL group function takes for this record: time, operation,
    /// principal id, actor, record.
    pub(crate) fn columns(&self) -> (i64, Option<&str>, Option<&str>, &str, &str) {
        (self.at_ms, self.operation.as_deref(), self.principal_id.as_deref(), &self.actor, &self.record)
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
        // Rows numbered below the chain's first are outside it: none may exist.
        let stray: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit_log WHERE seq < 1")
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        if stray > 0 {
            return Ok(AuditCheck { records: 0, broken: Some((0, format!("{stray} records are numbered below 1"))) });
        }
        let mut walk = Walk { expected: 1, previous: GENESIS.to_owned(), records: 0 };
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
                "SELECT seq, at_ms, operation, principal_id, actor, record, hash FROM audit_log \
                 WHERE seq >= $1 ORDER BY seq LIMIT $2",
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
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

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
