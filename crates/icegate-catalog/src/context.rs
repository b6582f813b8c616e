//! The request context: who is asking, how a service decides what they may do, and what a
//! mutation records with its change (the request's idempotency key).
//!
//! Most requests are authorized before the service runs, from the route. Some operations need
//! privileges that depend on what the service finds: a commit that turns out to create a table
//! needs `create`, a registration that replaces an existing table needs `write` and `drop` on
//! it, a storage profile that uses the server's own identity needs server `admin`. Those
//! services take a [`RequestContext`] and decide with the values they act on.

use std::sync::Arc;

use crate::access::{Authorizer, Caller, Holdings, Privilege, Target};
use crate::error::{CatalogError, Result};
use crate::idempotency::{IdempotencyScope, WriteContext};

#[derive(Clone)]
pub struct RequestContext {
    caller: Caller,
    authorizer: Option<Arc<Authorizer>>,
    idempotency: Option<Arc<IdempotencyScope>>,
}

impl std::fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestContext").field("caller", &self.caller).finish_non_exhaustive()
    }
}

impl RequestContext {
    /// A request of `caller`, decided by `authorizer`.
    pub fn new(caller: Caller, authorizer: Arc<Authorizer>) -> Self {
        Self { caller, authorizer: Some(authorizer), idempotency: None }
    }

    /// Work that no principal asked for (start-up, tests): everything is allowed.
    pub fn system() -> Self {
        Self { caller: Caller::Unrestricted, authorizer: None, idempotency: None }
    }

    /// The request carries an `Idempotency-Key`: its mutation records it.
    pub fn with_idempotency(mut self, scope: Option<Arc<IdempotencyScope>>) -> Self {
        self.idempotency = scope;
        self
    }

    /// What the request's mutation records with its change.
    pub fn write(&self) -> WriteContext {
        let principal = match &self.caller {
            Caller::Principal { id, .. } => id.clone(),
            Caller::Unrestricted => String::new(),
        };
        WriteContext { principal, idempotency: self.idempotency.clone() }
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Fails unless the caller holds `privilege` on `target`: like a missing object
    /// (`not_found`) when it cannot even describe it, 403 otherwise. Returns what the caller
    /// holds there (`None` when unrestricted).
    pub async fn require(
        &self,
        target: &Target,
        privilege: Privilege,
        not_found: impl FnOnce() -> CatalogError,
    ) -> Result<Option<Holdings>> {
        match (&self.caller, &self.authorizer) {
            (Caller::Unrestricted, _) => Ok(None),
            (caller, Some(authorizer)) => Ok(authorizer.check_holdings(caller, target, privilege, not_found).await?.1),
            // A principal without an authorizer is a wiring bug: refuse.
            (Caller::Principal { .. }, None) => {
                Err(CatalogError::Forbidden("no authorization for this request".into()))
            }
        }
    }

    /// Whether the caller holds admin on the server (without failing).
    pub async fn is_server_admin(&self) -> Result<bool> {
        match self.require(&Target::Server, Privilege::Admin, || CatalogError::Forbidden(String::new())).await {
            Ok(_) => Ok(true),
            Err(CatalogError::Forbidden(_) | CatalogError::NotFound { .. }) => Ok(false),
            Err(other) => Err(other),
        }
    }
}
