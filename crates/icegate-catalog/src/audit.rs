//! What the audit trail records beside decisions: the events of a request that change nothing
//! yet hand something out or refuse it (credentials vended, a request signed, a token issued
//! or refused, a start-up), and the store interface that records requests and reads the trail.
//!
//! A change is recorded in its own transaction by the store (see `WriteContext`); everything
//! else a request does is recorded when its answer is ready and before it is sent
//! ([`AuditStore::record`]), so a vend, a signature or a read is never answered without its
//! record. The records' format and chain are the store's (`icegate_store::audit`).

use async_trait::async_trait;

use crate::error::Result;
use crate::idempotency::WriteContext;
use crate::ids::TabularId;
use crate::storage::AccessLevel;

/// Something a request handed out or was refused, beside its authorization decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditEvent {
    /// Storage credentials for one prefix of a table's files; `refresh`: asked for again through
    /// the credentials endpoint. The access key id names the credentials (never the secret).
    Vended {
        tabular_id: Option<TabularId>,
        prefix: String,
        level: AccessLevel,
        expires_at_ms: Option<i64>,
        access_key_id: Option<String>,
        refresh: bool,
    },
    /// One request to object storage signed for a table: its method, bucket and key.
    Signed { tabular_id: Option<TabularId>, method: String, bucket: String, key: String, level: AccessLevel },
    /// A token issued for a client's credentials (`token`: the token's digest).
    TokenIssued { client_id: String, expires_at_ms: i64, token: String },
    /// A token refused: the client id presented and why.
    TokenRefused { client_id: String, reason: String, suppressed_before: u64 },
    /// A request whose bearer token was refused (`token`: its digest, when one was presented).
    Unauthenticated { token: Option<String>, reason: String, suppressed_before: u64 },
    /// The server started, with the digest of its effective configuration (secrets included as
    /// digests only) and its version.
    Startup { version: String, config_digest: String, settings: serde_json::Value },
}

/// How a request that is not a recorded change ended, for its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// Answered with success (a read, a vend, a signature, a token).
    Allowed,
    /// Refused by authentication or authorization.
    Refused,
    /// Failed otherwise (bad request, missing object, conflict, error).
    Failed,
}

impl Answered {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Refused => "refused",
            Self::Failed => "failed",
        }
    }
}

/// A request to record: what its context wrote down, whether its caller was authenticated, the
/// HTTP status it is answered with and how it ended.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub write: WriteContext,
    pub authenticated: bool,
    /// `None` for what no HTTP request asked for (a start-up).
    pub status: Option<u16>,
    pub answered: Answered,
}

/// Filters of a search of the trail (each `None`: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Records at or after, and before, these times (ms since the epoch).
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// The actor as records name it (a principal's name, `anonymous`, `system:<job>...`).
    pub actor: Option<String>,
    pub principal_id: Option<String>,
    pub operation: Option<String>,
    /// Only records about this warehouse (its id).
    pub warehouse_id: Option<String>,
    /// Only records about this namespace (its levels) or something in it; with `name`, about
    /// that table or view.
    pub namespace: Option<Vec<String>>,
    pub name: Option<String>,
    /// `applied`, `allowed`, `refused` or `failed`.
    pub outcome: Option<String>,
    /// Only records numbered after this one (keyset pagination).
    pub after_seq: Option<i64>,
    /// Only records numbered up to this one (an export's end, fixed when it begins).
    pub until_seq: Option<i64>,
}

/// One record of the trail as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub seq: i64,
    pub at_ms: i64,
    pub hash: String,
    /// The canonical record text the hash covers.
    pub record: String,
}

/// The trail: recording requests, reading records.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends the record of `request` and returns once it is durable. Records of concurrent
    /// requests are appended together (one transaction for a group).
    async fn record(&self, request: RequestRecord) -> Result<()>;
    /// Up to `limit` records matching `filter`, by sequence number.
    async fn audit_records(&self, filter: &AuditFilter, limit: u32) -> Result<Vec<AuditRecord>>;
    /// Where the chain in the store starts (the last record removed by retention: its sequence
    /// number and hash; 0 and [`GENESIS`] before any) and where it ends (the head).
    async fn audit_ends(&self) -> Result<ChainEnds>;
    /// The last record before `at_ms` (by time), if any.
    async fn audit_seq_before(&self, at_ms: i64) -> Result<Option<i64>>;
    /// Retention: removes the records up to `seq` (which must be in the store, after the base),
    /// moving the base to it, in one transaction with `write`'s record of the cut.
    async fn cut_audit(&self, write: &crate::idempotency::WriteContext, seq: i64) -> Result<()>;
}

/// The hash before the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The link after `previous` for `record`: SHA-256 of `previous`, a newline and `record`, in hex.
pub fn link(previous: &str, record: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(previous.as_bytes());
    hasher.update(b"\n");
    hasher.update(record.as_bytes());
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A record as exported (`icegate audit export`, retention's archive): one JSON line with its
/// sequence number, time, hash, the record parsed, and its exact text (which the hash covers).
pub fn export_line(record: &AuditRecord) -> String {
    let parsed: serde_json::Value = serde_json::from_str(&record.record).unwrap_or(serde_json::Value::Null);
    serde_json::json!({
        "seq": record.seq, "at-ms": record.at_ms, "hash": record.hash, "record": parsed, "text": record.record,
    })
    .to_string()
}

/// Where the chain in the store starts and ends: (sequence number, hash) of the base (the last
/// record removed by retention) and of the head (the last record appended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainEnds {
    pub base: (i64, String),
    pub head: (i64, String),
}

crate::service::area!(
    /// The audit trail's operations: recording a request that is not a change, and searching
    /// the records.
    Audit,
    audit
);

/// The most records one page of a search returns.
pub const MAX_PAGE: u32 = 1000;

/// A page of a search of the trail: the records, and the sequence number to continue after.
#[derive(Debug, Clone)]
pub struct AuditPage {
    pub records: Vec<AuditRecord>,
    pub next_after: Option<i64>,
}

impl Audit<'_> {
    /// Records a request that is not a change applied with its record (a read, a vend, a
    /// signature, a refusal, a failed change, a token): returns once the record is durable, so
    /// the caller answers only then (and answers 503 if this fails).
    pub async fn record(
        &self,
        ctx: &crate::RequestContext,
        authenticated: bool,
        status: u16,
        answered: Answered,
    ) -> Result<()> {
        let request = RequestRecord { write: ctx.record(), authenticated, status: Some(status), answered };
        self.store().record(request).await
    }

    /// Whether the read `ctx` made is recorded: unless the warehouse it read in has turned read
    /// records off (`audit.record-reads`). Reads outside a warehouse (the server's own
    /// listings) are always recorded.
    pub async fn records_reads(&self, ctx: &crate::RequestContext) -> bool {
        use crate::actors::Target;
        let warehouse = ctx.with_decisions(|decisions| {
            decisions.iter().find_map(|d| match &d.target {
                Target::Server => None,
                Target::Warehouse { warehouse_id }
                | Target::Namespace { warehouse_id, .. }
                | Target::Tabular { warehouse_id, .. } => Some(warehouse_id.clone()),
            })
        });
        let Some(warehouse_id) = warehouse else { return true };
        // A warehouse that cannot be read now is recorded as ever.
        self.warehouse_for_prefix(&warehouse_id).await.map_or(true, |w| w.settings.audit_record_reads)
    }

    /// Records a request no request context was made for (the token endpoint, a start-up).
    pub async fn record_as(&self, request: RequestRecord) -> Result<()> {
        self.store().record(request).await
    }

    /// Records matching `filter`, `limit` at most (up to [`MAX_PAGE`]). Server admins and
    /// holders of `audit` on the server read every record; holders of `audit` on a warehouse
    /// read that warehouse's records only, and must name it (`warehouse`). Readers of every
    /// record may name a warehouse by its id instead (`filter.warehouse_id`: a deleted
    /// warehouse's records are found so).
    pub async fn search(
        &self,
        ctx: &crate::RequestContext,
        mut filter: AuditFilter,
        warehouse: Option<&str>,
        limit: u32,
    ) -> Result<AuditPage> {
        use crate::actors::{Privilege, Target};
        let everything = ctx.is_server_admin().await? || ctx.holds(&Target::Server, Privilege::Audit).await?.is_some();
        match warehouse {
            Some(name) => {
                let missing = || crate::error::CatalogError::no_such_warehouse(name);
                let Some(warehouse_id) = self.warehouse_id_of(name).await? else { return Err(missing()) };
                if !everything {
                    ctx.require(&Target::Warehouse { warehouse_id: warehouse_id.clone() }, Privilege::Audit, missing)
                        .await?;
                }
                filter.warehouse_id = Some(warehouse_id.as_str().to_owned());
            }
            // A warehouse by its id (a deleted one's records too): for readers of every record.
            None if everything => {}
            None if filter.warehouse_id.is_some() => {
                return Err(crate::error::CatalogError::Forbidden(
                    "a warehouse is named by its id only by readers of the whole trail; name it by `warehouse`".into(),
                ));
            }
            None => {
                return Err(crate::error::CatalogError::Forbidden(
                    "reading the audit trail needs `audit` on the server, or on the warehouse named by `warehouse`"
                        .into(),
                ));
            }
        }
        let limit = limit.clamp(1, MAX_PAGE);
        // One more than asked for tells whether another page exists.
        let mut records = self.store().audit_records(&filter, limit + 1).await?;
        let next_after = if records.len() > limit as usize {
            records.truncate(limit as usize);
            records.last().map(|r| r.seq)
        } else {
            None
        };
        Ok(AuditPage { records, next_after })
    }
}
