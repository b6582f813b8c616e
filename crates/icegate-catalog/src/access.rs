//! Access control: principals, privileges, securables and the authorization decision.
//!
//! Deny by default. A grant on a container applies to everything below it; any privilege on an
//! object lets its holder `describe` the object's ancestors, so callers can navigate to what
//! they may use. An object the caller cannot describe is answered exactly like a missing one.

use crate::cache::TtlCache;
use std::collections::HashSet;

use crate::error::CatalogError;
use crate::ident::NamespaceIdent;
use crate::ids::{PrincipalId, TabularId};

use crate::actors::Outcome;
pub use crate::actors::{Caller, Privilege, Target};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurableType {
    Server,
    Warehouse,
    Namespace,
    Table,
    View,
}

impl SecurableType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Warehouse => "warehouse",
            Self::Namespace => "namespace",
            Self::Table => "table",
            Self::View => "view",
        }
    }

    pub fn parse(value: &str) -> Result<Self, CatalogError> {
        match value {
            "server" => Ok(Self::Server),
            "warehouse" => Ok(Self::Warehouse),
            "namespace" => Ok(Self::Namespace),
            "table" => Ok(Self::Table),
            "view" => Ok(Self::View),
            other => Err(CatalogError::bad_request(format!("unknown securable type {other:?}"))),
        }
    }
}

/// The privileges a principal holds on a target: `direct` applies to the target (granted on it or
/// inherited from a container), `below` are held on something inside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holdings {
    pub direct: HashSet<Privilege>,
    /// The grants `direct` comes from (for the record of which one decided).
    pub grants: Vec<crate::actors::HeldGrant>,
    pub below: bool,
    /// The earliest expiry of the grants these holdings come from (milliseconds since the
    /// epoch): a cached decision is not used past it.
    pub expires_at_ms: Option<i64>,
    /// For a table or view target: the id of the one its name meant when these were read
    /// (`None`: none). Grants follow objects, names do not: an operation on a table checks that
    /// it is the one decided about (see `RequestContext::confirm`).
    pub object: Option<TabularId>,
}

impl Holdings {
    pub fn has(&self, wanted: Privilege) -> bool {
        self.direct.iter().any(|held| held.grants(wanted))
    }

    /// The grant that gives `by` (what a decision granted by `by` names): one of `by` itself,
    /// unexpiring first, else the latest to expire.
    pub fn grant_of(&self, by: Privilege) -> Option<&crate::actors::HeldGrant> {
        self.grants.iter().filter(|g| g.privilege == by).max_by_key(|g| g.expires_at_ms.map_or((1, 0), |at| (0, at)))
    }

    pub fn can_describe(&self) -> bool {
        !self.direct.is_empty() || self.below
    }
}

/// Whether `holdings` allow `wanted`, and by which held privilege.
pub fn outcome(holdings: &Holdings, wanted: Privilege) -> Outcome {
    if holdings.has(wanted) {
        match Privilege::ALL.into_iter().find(|p| holdings.direct.contains(p) && p.grants(wanted)) {
            Some(by) => Outcome::Granted { by },
            None => Outcome::Inside,
        }
    } else if wanted == Privilege::Describe && holdings.can_describe() {
        Outcome::Inside
    } else if holdings.can_describe() {
        Outcome::Forbidden
    } else {
        Outcome::Hidden
    }
}

/// An outcome as the client sees it: a refusal of what it may see is 403, of what it may not
/// even see the answer for a missing object (`not_found`).
pub fn answer(
    outcome: Outcome,
    wanted: Privilege,
    not_found: impl FnOnce() -> CatalogError,
) -> Result<(), CatalogError> {
    match outcome {
        allowed if allowed.allowed() => Ok(()),
        Outcome::Forbidden => Err(CatalogError::Forbidden(format!("missing privilege {wanted}"))),
        _ => Err(not_found()),
    }
}

/// The outcome of an authorization check, as the client sees it.
pub fn decide(
    holdings: &Holdings,
    wanted: Privilege,
    not_found: impl FnOnce() -> CatalogError,
) -> Result<(), CatalogError> {
    answer(outcome(holdings, wanted), wanted, not_found)
}

/// Milliseconds since the Unix epoch (grant expiries are kept so).
/// The system's time, for token lifetimes (which the JWT library checks against the system clock
/// too); everything else reads the injected clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_grants_everything_but_audit_write_grants_read_and_all_grant_describe() {
        for p in Privilege::ALL {
            assert_eq!(Privilege::Admin.grants(p), !matches!(p, Privilege::Audit | Privilege::Review), "{p}");
            assert!(p.grants(Privilege::Describe));
            assert!(p.grants(p));
        }
        assert!(Privilege::Write.grants(Privilege::Read));
        assert!(!Privilege::Read.grants(Privilege::Write));
        assert!(!Privilege::Create.grants(Privilege::Drop));
        assert!(!Privilege::ManageGrants.grants(Privilege::Read));
    }

    #[test]
    fn undescribable_objects_look_missing_and_describable_ones_forbidden() {
        let none = Holdings::default();
        let err = decide(&none, Privilege::Read, || CatalogError::no_such_table("t")).unwrap_err();
        assert!(matches!(err, CatalogError::NotFound { .. }));
        let below = Holdings { direct: HashSet::new(), below: true, ..Holdings::default() };
        assert!(decide(&below, Privilege::Describe, || CatalogError::no_such_table("t")).is_ok());
        let err = decide(&below, Privilege::Read, || CatalogError::no_such_table("t")).unwrap_err();
        assert!(matches!(err, CatalogError::Forbidden(_)));
        let reader = Holdings { direct: HashSet::from([Privilege::Read]), ..Holdings::default() };
        assert!(decide(&reader, Privilege::Read, || CatalogError::no_such_table("t")).is_ok());
        assert!(matches!(
            decide(&reader, Privilege::Write, || CatalogError::no_such_table("t")),
            Err(CatalogError::Forbidden(_))
        ));
    }
}

/// A principal as stored (never with its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrincipalRecord {
    pub id: PrincipalId,
    pub name: String,
    pub client_id: Option<String>,
    pub secret_hash: Option<String>,
    /// 1 for its first secret, one more at every rotation (tokens carry it).
    pub secret_version: i64,
    /// What an external identity provider calls it (shown beside its name).
    pub display_name: Option<String>,
    pub created_at_ms: i64,
    /// The secret replaced at the last rotation, while its grace period lasts.
    pub previous_secret_hash: Option<String>,
    /// Until when (ms since the epoch) the previous secret still works; `None`: it does not.
    pub previous_secret_until_ms: Option<i64>,
}

/// Which secret versions a principal's icegate-issued tokens may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretState {
    /// The current secret's version.
    pub version: i64,
    /// Until when (ms since the epoch) tokens of the previous version still work.
    pub previous_until_ms: Option<i64>,
}

impl SecretState {
    /// Whether a token issued under secret version `token` works at `now_ms`.
    pub fn accepts(&self, token: i64, now_ms: i64) -> bool {
        token == self.version
            || (token == self.version - 1 && self.previous_until_ms.is_some_and(|until| now_ms < until))
    }
}

/// Which grants a listing shows (every field narrows it; all `None`: every grant).
#[derive(Debug, Clone, Default)]
pub struct GrantFilter {
    pub role: Option<String>,
    /// The grants of this principal's roles (by id).
    pub principal_id: Option<PrincipalId>,
    pub privilege: Option<Privilege>,
    pub securable_type: Option<SecurableType>,
    pub warehouse: Option<String>,
    /// Unexpired at this time only.
    pub unexpired_at_ms: Option<i64>,
    /// Grants after this id (keyset pagination).
    pub after_id: Option<String>,
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRecord {
    pub id: String,
    pub name: String,
    pub created_at_ms: i64,
}

/// A securable named the way people name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurableRef {
    pub kind: SecurableType,
    pub warehouse: Option<String>,
    pub namespace: Option<NamespaceIdent>,
    pub name: Option<String>,
}

impl SecurableRef {
    /// Checks that exactly the parts its type needs are present.
    pub fn validate(&self) -> Result<(), CatalogError> {
        let (w, n, t) = (self.warehouse.is_some(), self.namespace.is_some(), self.name.is_some());
        let ok = match self.kind {
            SecurableType::Server => !w && !n && !t,
            SecurableType::Warehouse => w && !n && !t,
            SecurableType::Namespace => w && n && !t,
            SecurableType::Table | SecurableType::View => w && n && t,
        };
        if ok {
            Ok(())
        } else {
            Err(CatalogError::bad_request(format!(
                "a {} securable needs {}",
                self.kind.as_str(),
                match self.kind {
                    SecurableType::Server => "no warehouse, namespace or name",
                    SecurableType::Warehouse => "a warehouse only",
                    SecurableType::Namespace => "a warehouse and a namespace",
                    SecurableType::Table | SecurableType::View => "a warehouse, a namespace and a name",
                }
            )))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRecord {
    pub id: String,
    pub role: String,
    pub privilege: Privilege,
    pub securable: SecurableRef,
    pub expires_at_ms: Option<i64>,
}

/// Persistence of principals, roles, memberships, grants and server settings.
#[async_trait::async_trait]
pub trait AccessStore: Send + Sync + 'static {
    /// Stores `value` under `key` unless a value exists; returns the stored one (replica-safe).
    async fn init_setting(
        &self,
        write: &crate::idempotency::WriteContext,
        key: &str,
        value: &str,
    ) -> crate::Result<String>;

    async fn create_principal(
        &self,
        write: &crate::idempotency::WriteContext,
        name: &str,
        client_id: &str,
        secret_hash: &str,
    ) -> crate::Result<PrincipalRecord>;
    async fn principal_by_name(&self, name: &str) -> crate::Result<Option<PrincipalRecord>>;
    async fn principal_by_client_id(&self, client_id: &str) -> crate::Result<Option<PrincipalRecord>>;
    /// The secret versions the principal with this id accepts; `None` when it does not exist
    /// (its tokens stop working when it is deleted, or its secret rotated).
    async fn principal_secret_state(&self, id: &PrincipalId) -> crate::Result<Option<SecretState>>;
    async fn list_principals(&self) -> crate::Result<Vec<PrincipalRecord>>;
    /// Deletes a principal, unless it is the last one holding `admin` on the server (409).
    async fn delete_principal(&self, write: &crate::idempotency::WriteContext, name: &str) -> crate::Result<()>;
    /// A new secret for the principal (its secret version goes up by one); with
    /// `previous_until_ms`, the replaced secret keeps working until then.
    async fn set_principal_secret(
        &self,
        write: &crate::idempotency::WriteContext,
        id: &PrincipalId,
        secret_hash: &str,
        previous_until_ms: Option<i64>,
    ) -> crate::Result<PrincipalRecord>;
    /// Replaces the hash of the same secret (an earlier version's form), unless it changed
    /// meanwhile; whether it was replaced.
    async fn rehash_principal_secret(
        &self,
        write: &crate::idempotency::WriteContext,
        id: &PrincipalId,
        old_hash: &str,
        new_hash: &str,
    ) -> crate::Result<bool>;

    async fn create_role(&self, write: &crate::idempotency::WriteContext, name: &str) -> crate::Result<RoleRecord>;
    async fn role_by_name(&self, name: &str) -> crate::Result<Option<RoleRecord>>;
    async fn list_roles(&self) -> crate::Result<Vec<RoleRecord>>;
    /// Deletes a role, unless that leaves no principal holding `admin` on the server (409).
    async fn delete_role(&self, write: &crate::idempotency::WriteContext, name: &str) -> crate::Result<()>;
    async fn add_role_member(
        &self,
        write: &crate::idempotency::WriteContext,
        role: &str,
        principal: &str,
    ) -> crate::Result<()>;
    /// Removes a membership, unless that leaves no principal holding `admin` on the server (409).
    async fn remove_role_member(
        &self,
        write: &crate::idempotency::WriteContext,
        role: &str,
        principal: &str,
    ) -> crate::Result<()>;
    async fn role_members(&self, role: &str) -> crate::Result<Vec<String>>;
    /// Every membership, as (role name, principal name), in one query.
    async fn memberships(&self) -> crate::Result<Vec<(String, String)>>;
    /// Principals holding `admin` on the server through a grant that does not expire and a
    /// membership not derived from an issuer's claims: who can recover the catalog.
    async fn server_admins(&self) -> crate::Result<Vec<String>>;
    async fn principal_roles(&self, principal_id: &PrincipalId) -> crate::Result<Vec<String>>;

    /// The principal of an external identity (created on first sight, named `name` or, if that is
    /// taken, `name@issuer`; `display_name` kept up to date), with its claim-derived memberships
    /// set to the existing roles among `claimed_roles` (which the caller limited to the roles the
    /// issuer may confer) — unless claims of a token issued after `issued_at` (seconds) set them
    /// already. Those memberships confer grants on the server only for roles listed in
    /// `admin_roles`.
    async fn provision_external_principal(
        &self,
        write: &crate::idempotency::WriteContext,
        (issuer, subject): (&str, &str),
        (name, display_name): (&str, Option<&str>),
        (claimed_roles, issued_at): (&[String], i64),
        admin_roles: &[String],
    ) -> crate::Result<PrincipalRecord>;

    /// Grants `privilege` on `securable`. For a table or view, `object` is its id when the
    /// caller decided about that one (the grant goes to it, the name is not resolved again).
    async fn grant(
        &self,
        write: &crate::idempotency::WriteContext,
        role: &str,
        privilege: Privilege,
        (securable, object): (&SecurableRef, Option<&str>),
        expires_at_ms: Option<i64>,
    ) -> crate::Result<GrantRecord>;
    /// Revokes a grant (`object` as for [`grant`](Self::grant)), unless that leaves no principal
    /// holding `admin` on the server (409).
    async fn revoke(
        &self,
        write: &crate::idempotency::WriteContext,
        role: &str,
        privilege: Privilege,
        (securable, object): (&SecurableRef, Option<&str>),
    ) -> crate::Result<()>;
    /// The grants `filter` selects, ordered by id.
    async fn list_grants(&self, filter: &GrantFilter) -> crate::Result<Vec<GrantRecord>>;
    /// Unexpired grants that apply to a securable, including those inherited from its containers.
    /// `object` as for [`grant`](Self::grant).
    async fn grants_on(
        &self,
        (securable, object): (&SecurableRef, Option<&str>),
        now_ms: i64,
    ) -> crate::Result<Vec<GrantRecord>>;

    /// What `principal_id` holds on `target` at `now_ms`, in one round trip.
    async fn holdings(&self, principal_id: &PrincipalId, target: &Target, now_ms: i64) -> crate::Result<Holdings>;

    /// The grant with this id, its securable named as it is now.
    async fn grant_by_id(&self, id: &str) -> crate::Result<Option<GrantRecord>>;
    /// Stores when grants last served principals (a later time than the stored one wins; uses
    /// of grants or principals deleted since are dropped).
    async fn record_grant_use(&self, uses: &[crate::reviews::GrantUse]) -> crate::Result<()>;
    /// Every principal holding a grant in force at `now_ms` that applies to `scope` (on it, a
    /// container of it, or anything inside it), one line per principal, grant and membership;
    /// `relation` is left for the caller to set.
    async fn effective_access(
        &self,
        scope: &SecurableRef,
        now_ms: i64,
    ) -> crate::Result<Vec<crate::reviews::AccessLine>>;
    /// Stores a campaign and its lines, recorded as a change.
    async fn create_review(
        &self,
        write: &crate::idempotency::WriteContext,
        review: &crate::reviews::NewReview,
    ) -> crate::Result<()>;
    async fn review(&self, id: &str) -> crate::Result<Option<crate::reviews::ReviewRecord>>;
    /// Every campaign, newest first.
    async fn reviews(&self) -> crate::Result<Vec<crate::reviews::ReviewRecord>>;
    async fn review_lines(&self, id: &str) -> crate::Result<Vec<crate::reviews::ReviewLine>>;
    /// Records a decision on a line not decided yet (else a conflict) of an open campaign, and
    /// applies a revocation in the same transaction; `by`: who decided, when, and why.
    async fn decide_review_line(
        &self,
        write: &crate::idempotency::WriteContext,
        id: &str,
        line: &crate::reviews::ReviewLine,
        decision: crate::reviews::ReviewDecision,
        by: (String, i64, Option<String>),
    ) -> crate::Result<crate::reviews::Revoked>;
    /// Places a legal hold on `securable` (recorded).
    async fn place_hold(
        &self,
        write: &crate::idempotency::WriteContext,
        securable: &SecurableRef,
        reason: &str,
        placed_by: &str,
    ) -> crate::Result<crate::holds::HoldRecord>;
    async fn hold(&self, id: &str) -> crate::Result<Option<crate::holds::HoldRecord>>;
    /// The holds in `warehouse` (`None`: every hold), oldest first.
    async fn holds(&self, warehouse: Option<&str>) -> crate::Result<Vec<crate::holds::HoldRecord>>;
    /// Records who asks for a hold to be lifted (`by`: id and name), unless someone (other
    /// than `replacing`, the id of a request that lapsed) did (then `false`).
    async fn ask_hold_lift(
        &self,
        write: &crate::idempotency::WriteContext,
        id: &str,
        by: (&str, &str),
        replacing: Option<&str>,
    ) -> crate::Result<bool>;
    /// Lifts a hold (with `approving`: only if that principal, by id, asked for it); `false` if
    /// it did not.
    async fn lift_hold(
        &self,
        write: &crate::idempotency::WriteContext,
        id: &str,
        approving: Option<&str>,
    ) -> crate::Result<bool>;

    /// Closes an open campaign (else a conflict), recording its outcome.
    async fn close_review(
        &self,
        write: &crate::idempotency::WriteContext,
        id: &str,
        by: &str,
        at_ms: i64,
    ) -> crate::Result<()>;
}

/// Authorization decisions: one store round trip each, or none when a fresh answer for the same
/// principal and target is cached.
///
/// The cache (off unless [`Authorizer::with_cache_ttl`]) keeps what a principal holds on a target
/// for at most its TTL, and never past the expiry of a grant it comes from. Every change of
/// principals, roles, memberships or grants made through this process clears it at once
/// ([`Authorizer::invalidate`]); other replicas see such a change within the TTL.
pub struct Authorizer {
    access: std::sync::Arc<dyn AccessStore>,
    /// What "now" is for grant expiries and grace periods.
    clock: crate::clock::SharedClock,
    /// What a principal holds on a target (see [`crate::cache`]; built by `with_cache_ttl`).
    cache: Option<TtlCache<(PrincipalId, Target), Holdings>>,
    /// The current secret version of principals found to exist (same TTL and invalidation as
    /// holdings).
    active: Option<TtlCache<PrincipalId, SecretState>>,
    /// When each grant last allowed a request of each principal, since the last flush.
    usage: crate::reviews::UsageLog,
}

/// Holdings (and principals) kept at most.
const MAX_CACHED_HOLDINGS: usize = 100_000;

impl Authorizer {
    pub fn new(access: std::sync::Arc<dyn AccessStore>) -> Self {
        Self { access, cache: None, active: None, clock: crate::clock::system(), usage: Default::default() }
    }

    /// The authorizer on another clock (tests).
    pub fn with_clock(mut self, clock: crate::clock::SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Caches holdings for `ttl` (zero: no cache).
    pub fn with_cache_ttl(mut self, ttl: std::time::Duration) -> Self {
        let cached = !ttl.is_zero();
        self.cache = cached.then(|| TtlCache::new(MAX_CACHED_HOLDINGS, Some(ttl)));
        self.active = cached.then(|| TtlCache::new(MAX_CACHED_HOLDINGS, Some(ttl)));
        self
    }

    /// Notes that `grant` allowed a request of `principal` now (in memory: see
    /// [`flush_usage`](Self::flush_usage)).
    pub fn note_use(&self, grant: &str, principal: &PrincipalId) {
        self.usage.note(grant, principal, self.clock.now_ms());
    }

    /// Writes the uses noted since the last flush (what cannot be written is kept for the next).
    pub async fn flush_usage(&self) -> Result<(), CatalogError> {
        let uses = self.usage.take();
        if uses.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.access.record_grant_use(&uses).await {
            self.usage.restore(uses);
            return Err(e);
        }
        Ok(())
    }

    /// Flushes the uses noted every `every` until `stop` turns true (then once more).
    pub fn spawn_usage_flush(
        self: &std::sync::Arc<Self>,
        every: std::time::Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                let last = tokio::select! {
                    () = tokio::time::sleep(every) => false,
                    // Told to stop, or the sender is gone: flush once more and end.
                    changed = stop.changed() => changed.is_err() || *stop.borrow(),
                };
                if let Err(e) = this.flush_usage().await {
                    tracing::warn!(error = %e, "writing when grants were last used failed; kept for the next try");
                }
                if last {
                    return;
                }
            }
        })
    }

    /// Forgets every cached decision (after any change to principals, roles or grants).
    pub fn invalidate(&self) {
        if let Some(cache) = &self.cache {
            cache.clear();
        }
        if let Some(active) = &self.active {
            active.clear();
        }
    }

    /// Whether the principal behind a verified token still exists and, for a token icegate
    /// issued (`token_version`: the secret version it was issued under), whether its secret is
    /// still the one the token was issued for. A deleted principal's tokens, and those issued
    /// before its secret was rotated, stop working at once on this replica (both invalidate)
    /// and within the TTL on others.
    pub async fn principal_active(&self, id: &PrincipalId, token_version: Option<i64>) -> Result<bool, CatalogError> {
        let current = match &self.active {
            None => self.access.principal_secret_state(id).await?,
            // A token newer than the version remembered: the secret was rotated (perhaps
            // through another replica) since; read it again rather than refuse the new token.
            Some(active) => match active.get(id, |state| token_version.is_none_or(|token| token <= state.version)) {
                Some(version) => Some(version),
                None => {
                    let (generation, read_at) = (active.generation(), std::time::Instant::now());
                    let version = self.access.principal_secret_state(id).await?;
                    if let Some(version) = version {
                        active.offer(generation, id.clone(), version, read_at);
                    }
                    version
                }
            },
        };
        Ok(match (current, token_version) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(current), Some(token)) => current.accepts(token, self.clock.now_ms()),
        })
    }

    /// What `principal` holds on `target`, read from the store now (and cached for the next
    /// requests): for a decision whose cached answer was about another object of that name.
    pub async fn holdings_now(&self, principal: &PrincipalId, target: &Target) -> Result<Holdings, CatalogError> {
        let now = self.clock.now_ms();
        let Some(cache) = &self.cache else { return self.access.holdings(principal, target, now).await };
        let (generation, read_at) = (cache.generation(), std::time::Instant::now());
        let holdings = self.access.holdings(principal, target, now).await?;
        cache.offer(generation, (principal.clone(), target.clone()), holdings.clone(), read_at);
        Ok(holdings)
    }

    /// What `principal` holds on `target` now (cached as described above). Services decide
    /// through [`crate::RequestContext::require`], which records the decision.
    pub async fn holdings(&self, principal: &PrincipalId, target: &Target) -> Result<Holdings, CatalogError> {
        let now = self.clock.now_ms();
        let Some(cache) = &self.cache else { return self.access.holdings(principal, target, now).await };
        let key = (principal.clone(), target.clone());
        // A cached answer holds for the TTL, and never past the expiry of a grant behind it.
        if let Some(holdings) = cache.get(&key, |h| h.expires_at_ms.is_none_or(|expiry| now < expiry)) {
            return Ok(holdings);
        }
        let (generation, read_at) = (cache.generation(), std::time::Instant::now());
        let holdings = self.access.holdings(principal, target, now).await?;
        cache.offer(generation, key, holdings.clone(), read_at);
        Ok(holdings)
    }
}
