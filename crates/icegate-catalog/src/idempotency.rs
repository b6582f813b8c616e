//! Idempotency keys: the key of a request, which its mutation records in the same transaction
//! as its change, so a retried request can never apply its change twice.
//!
//! The HTTP layer binds a key to its request ([`IdempotencyScope`]) and hands it to the
//! service in the request context; every store mutation takes it in its [`WriteContext`] and
//! inserts the key row, with the request's [`reservation`](IdempotencyScope::reservation),
//! before committing. Whether a request's mutation committed is then a fact of the database:
//! the request's answer is stored by filling in the row it reserved
//! (`CatalogStore::finalize_idempotency_key`).

use std::sync::Arc;

/// An `Idempotency-Key` as stored: keys belong to the principal that sent them (`""` when
/// authentication is off), so one principal's key never answers for another's request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    pub principal: String,
    pub key: String,
}

/// The key of the request being served, bound to that request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyScope {
    pub key: IdempotencyKey,
    /// `"<METHOD> <path>"`.
    pub operation: String,
    /// SHA-256 (hex) of the request's method, path, query and body: a key reused for another
    /// request is refused, not answered with the first one's response.
    pub request_digest: String,
    /// Unique to this request (not to the key): the key row its mutation wrote says so.
    pub reservation: String,
}

impl IdempotencyScope {
    pub fn new(key: IdempotencyKey, operation: String, request_digest: String) -> Self {
        Self { key, operation, request_digest, reservation: uuid::Uuid::new_v4().hyphenated().to_string() }
    }
}

/// What a store mutation records with its change, in its own transaction: who makes it, and
/// the request's idempotency key, if it carries one.
#[derive(Debug, Clone)]
pub struct WriteContext {
    /// The principal's id (`""` when authentication is off, or for work no principal asked for).
    pub principal: String,
    /// Who acts: the principal, the anonymous caller, or the system doing a job.
    pub actor: crate::actors::Caller,
    /// The operation the change was asked for by (its OpenAPI operation id), when a request
    /// asked for it.
    pub operation: Option<Arc<str>>,
    /// The authorization decisions the change was made under, in order (what an audit record
    /// of the change carries).
    pub decisions: Vec<crate::actors::Decision>,
    pub idempotency: Option<Arc<IdempotencyScope>>,
    /// The request's id (`x-request-id`), when a request asked for the change.
    pub request_id: Option<Arc<str>>,
    /// What the request handed out or was refused beside its decisions (see `crate::audit`).
    pub events: Vec<crate::audit::AuditEvent>,
    /// What the change did, as its record says (the store sets it: the privilege granted, the
    /// role and principal of a membership, ...).
    pub change: Option<serde_json::Value>,
}

impl Default for WriteContext {
    fn default() -> Self {
        Self::NONE
    }
}

impl WriteContext {
    /// A mutation that records nothing beside its change (start-up, tests, requests without a key).
    pub const NONE: WriteContext = WriteContext {
        principal: String::new(),
        actor: crate::actors::Caller::System { job: String::new(), task_id: None },
        operation: None,
        decisions: Vec::new(),
        idempotency: None,
        request_id: None,
        events: Vec::new(),
        change: None,
    };

    /// The same write without the request's idempotency key: for a change whose answer must
    /// never be stored (it shows a secret once), or one of several a request makes.
    #[must_use]
    pub fn unkeyed(&self) -> Self {
        Self { idempotency: None, ..self.clone() }
    }

    /// The same write, its record saying what it did (`change`).
    #[must_use]
    pub fn changing(&self, change: serde_json::Value) -> Self {
        Self { change: Some(change), ..self.clone() }
    }

    /// A write by `principal` (tests and tools that act as one).
    #[must_use]
    pub fn by_principal(principal: &str, idempotency: Option<Arc<IdempotencyScope>>) -> Self {
        Self {
            principal: principal.to_owned(),
            actor: crate::actors::Caller::Principal {
                id: crate::ids::PrincipalId::new(principal),
                name: principal.to_owned(),
                via: crate::actors::Authentication::Direct,
            },
            operation: None,
            decisions: Vec::new(),
            idempotency,
            request_id: None,
            events: Vec::new(),
            change: None,
        }
    }
}

/// How storing a request's answer went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finalized {
    /// The row this request's mutation reserved now holds the answer.
    Filled,
    /// The request mutated nothing; its answer (a final 4xx) was stored under the key.
    Inserted,
    /// The request mutated nothing and a success is not kept: a retry simply runs again.
    NothingRecorded,
    /// The request mutated nothing and another request owns the key: answer as that one does.
    Taken,
}

/// A stored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    pub operation: String,
    pub request_digest: String,
    /// `None` while the guarded request has not finalised its response.
    pub status: Option<u16>,
    pub body: Option<String>,
    pub created_at_ms: i64,
}
