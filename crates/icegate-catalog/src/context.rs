//! The request context: who is asking, how a service decides what they may do, what it
//! decided, and what a mutation records with its change (the request's idempotency key).
//!
//! Every catalog and management operation is a service method taking a [`RequestContext`]. The
//! service checks its own privileges with the values it parsed and acts on ([`RequestContext::
//! require`]), before it reads or changes anything the caller may not see: the HTTP layer only
//! authenticates. Each check is recorded as a [`Decision`] (target, privilege, outcome), which
//! the request's log line and, later, the audit trail carry.

use std::sync::{Arc, Mutex};

use crate::access::{Authorizer, Holdings, answer, outcome};
pub use crate::actors::{Caller, Decision, Outcome, Privilege, Target};
use crate::audit::AuditEvent;
use crate::error::{CatalogError, Result};
use crate::idempotency::{IdempotencyScope, WriteContext};
use crate::ids::{PrincipalId, TabularId};
use crate::storage::AccessLevel;

/// What a request's record carries beside who asked and for what.
#[derive(Debug, Default)]
struct Trail {
    decisions: Vec<Decision>,
    events: Vec<AuditEvent>,
    /// A change was handed to the store with this request's record (see [`RequestContext::write`]).
    written: bool,
    /// The request's idempotency key, once the handler's context took it (so the record written
    /// after the answer, from the guard's context, carries it too).
    idempotency: Option<Arc<IdempotencyScope>>,
}

#[derive(Clone)]
pub struct RequestContext {
    caller: Caller,
    authorizer: Option<Arc<Authorizer>>,
    idempotency: Option<Arc<IdempotencyScope>>,
    request_id: Option<Arc<str>>,
    /// The operation the request asks for, by its id in the OpenAPI documents (`loadTable`).
    operation: Option<Arc<str>>,
    /// Every decision taken for this request, in order, and what else its record carries
    /// (shared by the context's clones).
    trail: Arc<Mutex<Trail>>,
    /// The secret version the caller's token was issued under (icegate-issued tokens).
    secret_version: Option<i64>,
}

impl std::fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestContext")
            .field("caller", &self.caller)
            .field("request_id", &self.request_id)
            .finish_non_exhaustive()
    }
}

/// What an allowed check found: the privilege decided and the caller's holdings on the target
/// (`None` when unrestricted). Only a decision makes one ([`RequestContext::require`],
/// [`holds`](RequestContext::holds), [`confirm`](RequestContext::confirm)).
#[derive(Debug, Clone)]
pub struct Allowed {
    privilege: Privilege,
    principal: Option<PrincipalId>,
    holdings: Option<Holdings>,
}

/// Proof of a decision that gives access to a table's files, and at which level: what vending
/// and signing demand. Only an [`Allowed`] makes one, so no code path can vend or sign at a
/// level nobody decided (a result read without a decision carries none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileGrant {
    level: AccessLevel,
}

impl FileGrant {
    pub fn level(self) -> AccessLevel {
        self.level
    }
}

impl Allowed {
    pub fn holdings(&self) -> Option<&Holdings> {
        self.holdings.as_ref()
    }

    /// Listing the target's children: `None` shows all of them, `Some(principal)` only those
    /// the principal holds something on (or inside), when it holds nothing on the target itself.
    pub fn visible_to(&self) -> Option<&PrincipalId> {
        match &self.holdings {
            Some(holdings) if holdings.direct.is_empty() => self.principal.as_ref(),
            _ => None,
        }
    }

    /// The access to a table's files this decision gives: read-write when unrestricted, with
    /// `write`, or to the creator of a table (a decision for `create`, where it creates it);
    /// read with `read`; none otherwise.
    pub fn file_grant(&self) -> Option<FileGrant> {
        self.file_grant_as(self.privilege == Privilege::Create)
    }

    /// [`file_grant`](Self::file_grant) for a creator answered again (a replayed create): holding
    /// `create` counts as creating only while `still_as_created` (the table is exactly what it
    /// created, and it replaced nothing).
    pub fn file_grant_as(&self, creator: bool) -> Option<FileGrant> {
        let level = match &self.holdings {
            None => AccessLevel::ReadWrite,
            Some(held) if held.has(Privilege::Write) => AccessLevel::ReadWrite,
            Some(held) if creator && (self.privilege == Privilege::Create || held.has(Privilege::Create)) => {
                AccessLevel::ReadWrite
            }
            Some(held) if held.has(Privilege::Read) => AccessLevel::Read,
            Some(_) => return None,
        };
        Some(FileGrant { level })
    }
}

impl RequestContext {
    /// A request of `caller`, decided by `authorizer`.
    pub fn new(caller: Caller, authorizer: Arc<Authorizer>) -> Self {
        Self {
            caller,
            authorizer: Some(authorizer),
            idempotency: None,
            request_id: None,
            operation: None,
            trail: Arc::default(),
            secret_version: None,
        }
    }

    /// Work that no principal asked for: `job` (start-up, a background job's kind, a test) and
    /// the task it runs. Everything is allowed; decisions are recorded as unrestricted, and what
    /// it writes names the system and the job as the actor.
    pub fn system(job: &str, task_id: Option<&str>) -> Self {
        Self {
            caller: Caller::System { job: job.to_owned(), task_id: task_id.map(str::to_owned) },
            authorizer: None,
            idempotency: None,
            request_id: None,
            operation: None,
            trail: Arc::default(),
            secret_version: None,
        }
    }

    /// The secret version the caller's token was issued under (`None`: not an icegate token).
    pub fn with_secret_version(mut self, version: Option<i64>) -> Self {
        self.secret_version = version;
        self
    }

    pub fn secret_version(&self) -> Option<i64> {
        self.secret_version
    }

    /// The operation asked for, by its OpenAPI operation id.
    pub fn with_operation(mut self, operation: Arc<str>) -> Self {
        self.operation = (!operation.is_empty()).then_some(operation);
        self
    }

    pub fn operation(&self) -> Option<&str> {
        self.operation.as_deref()
    }

    /// The request's id (`x-request-id`), for the record of its decisions.
    pub fn with_request_id(mut self, id: Option<&str>) -> Self {
        self.request_id = id.map(Into::into);
        self
    }

    /// The request carries an `Idempotency-Key`: its mutation records it.
    pub fn with_idempotency(mut self, scope: Option<Arc<IdempotencyScope>>) -> Self {
        if let Ok(mut trail) = self.trail.lock() {
            trail.idempotency.clone_from(&scope);
        }
        self.idempotency = scope;
        self
    }

    /// What the request's mutation records with its change (the change's record is then
    /// written in its transaction: see [`wrote`](Self::wrote)).
    pub fn write(&self) -> WriteContext {
        self.context(true)
    }

    /// Everything the request's record carries, for a request that is not a recorded change
    /// (see `crate::audit`).
    pub fn record(&self) -> WriteContext {
        self.context(false)
    }

    /// The write context of the request: for a change (`change`: marked written, and without
    /// the events, which the record written after the answer carries), or for that record.
    fn context(&self, change: bool) -> WriteContext {
        let principal = self.caller.principal_id().map(|id| id.as_str().to_owned()).unwrap_or_default();
        let (decisions, events, key) = {
            let mut trail = self.trail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            trail.written |= change;
            let events = if change { Vec::new() } else { trail.events.clone() };
            (trail.decisions.clone(), events, trail.idempotency.clone())
        };
        WriteContext {
            principal,
            actor: self.caller.clone(),
            operation: self.operation.clone(),
            decisions,
            idempotency: self.idempotency.clone().or(key),
            request_id: self.request_id.clone(),
            events,
            change: None,
        }
    }

    /// Whether a change was handed to the store with this request's record (written in the
    /// change's transaction if it applied).
    pub fn wrote(&self) -> bool {
        self.with_trail(|trail| trail.written)
    }

    /// Notes something the request hands out or was refused, for its record.
    pub fn note(&self, event: AuditEvent) {
        if let Ok(mut trail) = self.trail.lock() {
            trail.events.push(event);
        }
    }

    /// Whether the request handed anything out (credentials, a signature, a token).
    pub fn handed_out(&self) -> bool {
        self.with_trail(|trail| !trail.events.is_empty())
    }

    fn with_trail<R>(&self, f: impl FnOnce(&Trail) -> R) -> R {
        match self.trail.lock() {
            Ok(trail) => f(&trail),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The decisions taken so far, in order.
    pub fn decisions(&self) -> Vec<Decision> {
        self.with_decisions(<[Decision]>::to_vec)
    }

    /// Looks at the decisions taken so far without copying them.
    pub fn with_decisions<R>(&self, f: impl FnOnce(&[Decision]) -> R) -> R {
        self.with_trail(|trail| f(&trail.decisions))
    }

    fn decided(&self, target: &Target, privilege: Privilege, outcome: Outcome) {
        self.decided_by(target, privilege, outcome, None);
    }

    fn decided_by(
        &self,
        target: &Target,
        privilege: Privilege,
        outcome: Outcome,
        grant: Option<&crate::actors::HeldGrant>,
    ) {
        let grant = grant.map(|g| Arc::new(g.clone()));
        if let Ok(mut trail) = self.trail.lock() {
            trail.decisions.push(Decision { target: target.clone(), privilege, outcome, grant });
        }
    }

    /// What the caller holds on `target`, and whether that allows `privilege` (recorded).
    async fn decide(&self, target: &Target, privilege: Privilege) -> Result<(Outcome, Allowed)> {
        self.decide_with(target, privilege, false).await
    }

    /// [`decide`](Self::decide) on holdings read now, not from the authorizer's cache.
    async fn decide_now(&self, target: &Target, privilege: Privilege) -> Result<(Outcome, Allowed)> {
        self.decide_with(target, privilege, true).await
    }

    async fn decide_with(&self, target: &Target, privilege: Privilege, now: bool) -> Result<(Outcome, Allowed)> {
        let (id, authorizer) = match (&self.caller, &self.authorizer) {
            (Caller::Anonymous | Caller::System { .. }, _) => {
                self.decided(target, privilege, Outcome::Unrestricted);
                return Ok((Outcome::Unrestricted, Allowed { privilege, principal: None, holdings: None }));
            }
            (Caller::Principal { id, .. }, Some(authorizer)) => (id, authorizer),
            // A principal without an authorizer is a wiring bug: refuse.
            (Caller::Principal { .. }, None) => {
                self.decided(target, privilege, Outcome::Forbidden);
                return Err(CatalogError::Forbidden("no authorization for this request".into()));
            }
        };
        let holdings =
            if now { authorizer.holdings_now(id, target).await? } else { authorizer.holdings(id, target).await? };
        let outcome = outcome(&holdings, privilege);
        let grant = match outcome {
            Outcome::Granted { by } => holdings.grant_of(by),
            _ => None,
        };
        if let Some(grant) = grant {
            authorizer.note_use(&grant.id, id);
        }
        self.decided_by(target, privilege, outcome, grant);
        Ok((outcome, Allowed { privilege, principal: Some(id.clone()), holdings: Some(holdings) }))
    }

    /// Fails unless the caller holds `privilege` on `target`: like a missing object
    /// (`not_found`) when it cannot even describe it, 403 otherwise. Returns what the caller
    /// holds there.
    pub async fn require(
        &self,
        target: &Target,
        privilege: Privilege,
        not_found: impl FnOnce() -> CatalogError,
    ) -> Result<Allowed> {
        let (outcome, allowed) = self.decide(target, privilege).await?;
        answer(outcome, privilege, not_found)?;
        Ok(allowed)
    }

    /// After an operation read the table or view `target` names (its id: `object`): confirms
    /// that `allowed`, decided by name before, was about that object. A name can change meaning
    /// while a decision is cached (a rename through another replica) or between the decision
    /// and the read: then the decision is made again, now, and stands only if it is about that
    /// object; if the name means yet another one, `changed` says so (for the caller to retry).
    pub async fn confirm(
        &self,
        target: &Target,
        privilege: Privilege,
        allowed: Allowed,
        object: &TabularId,
        not_found: impl FnOnce() -> CatalogError,
        changed: impl FnOnce() -> CatalogError,
    ) -> Result<Allowed> {
        let about = |allowed: &Allowed| allowed.holdings.as_ref().is_none_or(|h| h.object.as_ref() == Some(object));
        if about(&allowed) {
            return Ok(allowed);
        }
        let (outcome, allowed) = self.decide_now(target, privilege).await?;
        answer(outcome, privilege, not_found)?;
        if about(&allowed) { Ok(allowed) } else { Err(changed()) }
    }

    /// [`require`](Self::require) then [`confirm`](Self::confirm): for an operation that has
    /// read the object first.
    pub async fn require_on(
        &self,
        target: &Target,
        privilege: Privilege,
        object: &TabularId,
        not_found: impl Fn() -> CatalogError,
        changed: impl FnOnce() -> CatalogError,
    ) -> Result<Allowed> {
        let allowed = self.require(target, privilege, &not_found).await?;
        self.confirm(target, privilege, allowed, object, &not_found, changed).await
    }

    /// Whether the caller holds `privilege` on `target`, without failing (recorded all the same).
    pub async fn holds(&self, target: &Target, privilege: Privilege) -> Result<Option<Allowed>> {
        let (outcome, allowed) = self.decide(target, privilege).await?;
        Ok(outcome.allowed().then_some(allowed))
    }

    /// Whether the caller holds admin on the server (without failing).
    pub async fn is_server_admin(&self) -> Result<bool> {
        Ok(self.holds(&Target::Server, Privilege::Admin).await?.is_some())
    }

    /// Writes when grants last served principals, as this replica noted it (for a report that
    /// must be current; a failure leaves it to the periodic flush).
    pub async fn flush_grant_use(&self) {
        if let Some(authorizer) = &self.authorizer
            && let Err(e) = authorizer.flush_usage().await
        {
            tracing::warn!(error = %e, "writing when grants were last used failed");
        }
    }

    /// Who may do what changed (principals, roles, memberships, grants), or which object a name
    /// means did (grants follow objects; decisions are cached by name): cached decisions of this
    /// replica go at once (other replicas' within their TTL).
    pub fn access_changed(&self) {
        if let Some(authorizer) = &self.authorizer {
            authorizer.invalidate();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_system_s_writes_name_the_job_and_carry_its_decisions() {
        let ctx = RequestContext::system("purge", Some("task-1"));
        assert!(ctx.caller().unrestricted());
        ctx.require(&Target::Server, Privilege::Admin, || unreachable!()).await.unwrap();
        let write = ctx.write();
        assert_eq!(write.actor, Caller::System { job: "purge".into(), task_id: Some("task-1".into()) });
        assert_eq!(write.actor.describe(), "system:purge:task-1");
        assert_eq!(write.principal, "", "no principal's idempotency keys");
        assert_eq!(
            write.decisions,
            [Decision {
                target: Target::Server,
                privilege: Privilege::Admin,
                outcome: Outcome::Unrestricted,
                grant: None
            }]
        );
        assert_eq!(Caller::Anonymous.describe(), "anonymous");
        assert_eq!(
            Caller::Principal {
                id: PrincipalId::new("i"),
                name: "n".into(),
                via: crate::actors::Authentication::Direct
            }
            .principal_id()
            .map(|id| id.as_str()),
            Some("i")
        );
    }
}
