//! Idempotency keys: the request-scoped key that the store records in the same transaction as
//! the mutation it guards, so a retried request can never apply its change twice.
//!
//! The HTTP layer opens a scope around a mutating request that carries an `Idempotency-Key`;
//! the store's write path reads it (a task-local, so no signature has to thread it through) and
//! inserts the key row before committing.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

tokio::task_local! {
    static SCOPE: Arc<IdempotencyScope>;
}

/// An `Idempotency-Key` as stored: keys belong to the principal that sent them (`""` when
/// authentication is off), so one principal's key never answers for another's request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    pub principal: String,
    pub key: String,
}

/// The key of the request being served.
#[derive(Debug)]
pub struct IdempotencyScope {
    pub key: IdempotencyKey,
    /// `"<METHOD> <path>"`.
    pub operation: String,
    /// SHA-256 (hex) of the request's method, path, query and body: a key reused for another
    /// request is refused, not answered with the first one's response.
    pub request_digest: String,
    recorded: AtomicBool,
}

impl IdempotencyScope {
    pub fn new(key: IdempotencyKey, operation: String, request_digest: String) -> Arc<Self> {
        Arc::new(Self { key, operation, request_digest, recorded: AtomicBool::new(false) })
    }

    /// Whether a mutation committed together with this key's row.
    pub fn recorded(&self) -> bool {
        self.recorded.load(Ordering::SeqCst)
    }

    /// Called by the store after the transaction holding the key row committed.
    pub fn mark_recorded(&self) {
        self.recorded.store(true, Ordering::SeqCst);
    }
}

/// The scope of the current request, when it carries a key that has not been recorded yet.
pub fn pending() -> Option<Arc<IdempotencyScope>> {
    SCOPE.try_with(Arc::clone).ok().filter(|scope| !scope.recorded())
}

/// Runs `future` on its own task, carrying the request's idempotency scope along, so that it
/// finishes even if the request is cancelled (client gone, request timeout). Used for work that
/// must not stop half way, such as a commit between writing its metadata file and swapping it in.
pub async fn detached<F>(future: F) -> crate::Result<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let scope = SCOPE.try_with(Arc::clone).ok();
    let handle = tokio::spawn(async move {
        match scope {
            Some(scope) => SCOPE.scope(scope, future).await,
            None => future.await,
        }
    });
    handle.await.map_err(|e| crate::CatalogError::Internal(anyhow::anyhow!("background task failed: {e}")))
}

/// Runs `future` (a request) inside `scope`.
pub async fn scoped<F: Future>(scope: Arc<IdempotencyScope>, future: F) -> F::Output {
    SCOPE.scope(scope, future).await
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
