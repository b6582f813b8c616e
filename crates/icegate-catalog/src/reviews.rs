//! Access reviews: who can do what on a scope (the effective-access report), when each grant
//! last served each principal, and review campaigns that freeze a scope's effective access and
//! take a reviewer's decision on every line.
//!
//! A line is one principal holding one grant through one membership: the privilege as granted
//! (what it implies follows from it: `admin` everything but `audit` and `review`, `write`
//! `read`), the securable it was granted on, named as it is now, and how that securable relates
//! to the scope (`above`: a container of the scope, so the grant applies to all of it; `on`: the
//! scope itself; `inside`: something in it). Memberships an identity provider's claims set are
//! listed with their source, and server grants through them only where they apply (see
//! `SERVER_GRANTS_NOT_BY_CLAIM` in the store).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::RequestContext;
use crate::access::{SecurableRef, SecurableType};
use crate::access_admin::AccessAdmin;
use crate::actors::{Caller, Privilege, Target};
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::ids::PrincipalId;

/// A securable by the names of its parts (as records and reports show it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Named {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub warehouse: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub namespace: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
}

impl From<&SecurableRef> for Named {
    fn from(s: &SecurableRef) -> Self {
        Self {
            kind: s.kind.as_str().to_owned(),
            warehouse: s.warehouse.clone(),
            namespace: s.namespace.as_ref().map(|n| n.levels().to_vec()),
            name: s.name.clone(),
        }
    }
}

impl Named {
    pub fn securable(&self) -> Result<SecurableRef> {
        let securable = SecurableRef {
            kind: SecurableType::parse(&self.kind)?,
            warehouse: self.warehouse.clone(),
            namespace: self.namespace.clone().map(NamespaceIdent::from_levels).transpose()?,
            name: self.name.clone(),
        };
        securable.validate()?;
        Ok(securable)
    }

    /// How a grant on `self` relates to `scope`: `above` (a container of it), `on` (it) or
    /// `inside` (something in it).
    pub fn relation_to(&self, scope: &Named) -> &'static str {
        let depth = |n: &Named| match n.kind.as_str() {
            "server" => 0,
            "warehouse" => 1,
            "namespace" => 2 + n.namespace.as_ref().map_or(0, Vec::len),
            _ => 1000,
        };
        if self == scope {
            "on"
        } else if depth(self) < depth(scope) {
            "above"
        } else {
            "inside"
        }
    }
}

/// One principal holding one grant through one membership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AccessLine {
    pub principal: String,
    pub principal_id: String,
    pub role: String,
    pub role_id: String,
    /// How the principal is in the role: `manual` (the management API), `claim` or
    /// `claim-admin` (an identity provider's group claim, set anew with each token).
    pub membership: String,
    pub privilege: String,
    /// What the privilege gives, `describe` aside (`admin`: everything but audit and review).
    pub implies: Vec<String>,
    pub securable: Named,
    /// `above`, `on` or `inside` the scope reported on.
    pub relation: String,
    pub grant_id: String,
    pub granted_at_ms: i64,
    pub expires_at_ms: Option<i64>,
    /// When this grant last decided an allowed request of this principal (`None`: never since
    /// use was first tracked).
    pub last_used_at_ms: Option<i64>,
}

impl AccessLine {
    /// What identifies a line across campaigns (a grant made again gets a new id).
    fn identity(&self) -> (String, String, String, Named) {
        (self.principal_id.clone(), self.role_id.clone(), self.privilege.clone(), self.securable.clone())
    }
}

/// What the privileges `privilege` gives, `describe` aside.
pub fn implied(privilege: Privilege) -> Vec<String> {
    Privilege::ALL
        .into_iter()
        .filter(|p| *p != Privilege::Describe && privilege.grants(*p))
        .map(|p| p.as_str().to_owned())
        .collect()
}

/// Which lines a report keeps.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportFilter {
    /// Only lines not used for this many days (never used counts as dormant once the grant is
    /// that old).
    pub dormant_days: Option<u32>,
    /// Only lines whose grant expires within this many days.
    pub expiring_days: Option<u32>,
}

const DAY_MS: i64 = 86_400_000;

impl ReportFilter {
    fn keeps(&self, line: &AccessLine, now_ms: i64) -> bool {
        if let Some(days) = self.dormant_days {
            let since = now_ms - i64::from(days) * DAY_MS;
            let used = line.last_used_at_ms.unwrap_or(line.granted_at_ms);
            if used > since {
                return false;
            }
        }
        if let Some(days) = self.expiring_days {
            match line.expires_at_ms {
                Some(at) if at <= now_ms + i64::from(days) * DAY_MS => {}
                _ => return false,
            }
        }
        true
    }
}

/// The most lines a report or a campaign holds (a larger scope is refused: narrow it).
pub const MAX_LINES: usize = 100_000;

/// A grant's use by a principal, as the authorizer noted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantUse {
    pub grant_id: String,
    pub principal_id: String,
    pub at_ms: i64,
}

/// Uses kept in memory between flushes, at most this many (grant, principal) pairs; more are
/// not noted until the next flush (the report says "at least this recent" either way).
const MAX_USES: usize = 100_000;

/// The last use of each grant by each principal since the last flush: noted on every allowed
/// decision (a map update, no write), written to the store in batches.
#[derive(Default)]
pub struct UsageLog {
    uses: Mutex<HashMap<String, HashMap<PrincipalId, i64>>>,
    count: std::sync::atomic::AtomicUsize,
}

impl UsageLog {
    pub fn note(&self, grant_id: &str, principal: &PrincipalId, at_ms: i64) {
        let Ok(mut uses) = self.uses.lock() else { return };
        if let Some(by) = uses.get_mut(grant_id) {
            if let Some(at) = by.get_mut(principal) {
                *at = (*at).max(at_ms);
                return;
            }
            if self.count.load(std::sync::atomic::Ordering::Relaxed) < MAX_USES {
                by.insert(principal.clone(), at_ms);
                self.count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            return;
        }
        if self.count.load(std::sync::atomic::Ordering::Relaxed) < MAX_USES {
            uses.insert(grant_id.to_owned(), HashMap::from([(principal.clone(), at_ms)]));
            self.count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Takes what was noted.
    pub fn take(&self) -> Vec<GrantUse> {
        let Ok(mut uses) = self.uses.lock() else { return Vec::new() };
        self.count.store(0, std::sync::atomic::Ordering::Relaxed);
        std::mem::take(&mut *uses)
            .into_iter()
            .flat_map(|(grant_id, by)| {
                by.into_iter().map(move |(principal, at_ms)| GrantUse {
                    grant_id: grant_id.clone(),
                    principal_id: principal.into_string(),
                    at_ms,
                })
            })
            .collect()
    }

    /// Puts back what could not be written (a later use noted meanwhile wins).
    pub fn restore(&self, uses: Vec<GrantUse>) {
        for u in uses {
            self.note(&u.grant_id, &PrincipalId::new(u.principal_id), u.at_ms);
        }
    }
}

/// Grants that only server admins make and take away: `audit` and `review` anywhere, `admin`
/// on the server.
fn reserved_to_server_admins(privilege: Privilege, on: SecurableType) -> bool {
    matches!(privilege, Privilege::Audit | Privilege::Review)
        || (privilege == Privilege::Admin && on == SecurableType::Server)
}

/// Free text kept and recorded (a campaign's description, a decision's comment): bounded, and
/// without control characters (which would make the record or a report read otherwise).
pub fn check_text(what: &str, text: &str) -> Result<()> {
    if text.len() > MAX_TEXT {
        return Err(CatalogError::bad_request(format!("{what} is longer than {MAX_TEXT} bytes")));
    }
    // Control characters, and the invisible formatting ones (direction marks and overrides,
    // zero-width characters, line and paragraph separators, the soft hyphen, the BOM).
    let invisible = |c: char| {
        matches!(c, '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}' | '\u{feff}')
    };
    if text.chars().any(|c| c.is_control() || invisible(c)) {
        return Err(CatalogError::bad_request(format!("{what} holds control or text-direction characters")));
    }
    Ok(())
}

const MAX_TEXT: usize = 4096;

/// What a caller is on the server, for review decisions.
#[derive(Debug, Clone, Copy)]
struct OnServer {
    admin: bool,
    /// A server admin, or a holder of `review` on the server.
    reviewer: bool,
}

/// A campaign as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewRecord {
    pub id: String,
    pub scope: Named,
    pub warehouse_id: Option<String>,
    pub description: Option<String>,
    pub created_by: String,
    pub created_at_ms: i64,
    pub closed_by: Option<String>,
    pub closed_at_ms: Option<i64>,
}

/// A line of a campaign and what was decided about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewLine {
    pub line: i64,
    pub entry: AccessLine,
    pub decision: Option<ReviewDecision>,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub comment: Option<String>,
}

/// What a reviewer decides about a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewDecision {
    /// The access is right as it is.
    Attest,
    /// The role's grant goes (for every member of the role).
    RevokeGrant,
    /// The principal leaves the role (and so loses all of the role's grants).
    RevokeMembership,
}

impl ReviewDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Attest => "attest",
            Self::RevokeGrant => "revoke-grant",
            Self::RevokeMembership => "revoke-membership",
        }
    }

    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "attest" => Ok(Self::Attest),
            "revoke-grant" => Ok(Self::RevokeGrant),
            "revoke-membership" => Ok(Self::RevokeMembership),
            other => Err(CatalogError::bad_request(format!(
                "decision must be attest, revoke-grant or revoke-membership, not {other:?}"
            ))),
        }
    }
}

/// A campaign to store: its lines frozen now.
#[derive(Debug, Clone)]
pub struct NewReview {
    pub record: ReviewRecord,
    pub lines: Vec<AccessLine>,
}

/// What a decision did besides recording itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// Nothing to revoke (an attestation).
    Nothing,
    /// The grant or membership was removed.
    Removed,
    /// It was gone already.
    AlreadyGone,
}

/// Lines that differ between two campaigns.
#[derive(Debug, Clone, Default)]
pub struct ReviewDiff {
    /// In the campaign, not in the one compared against.
    pub added: Vec<AccessLine>,
    /// In the one compared against, not in the campaign.
    pub removed: Vec<AccessLine>,
    /// In both, with another expiry or membership: (then, now).
    pub changed: Vec<(AccessLine, AccessLine)>,
    pub unchanged: usize,
}

/// Compares campaign `now` with campaign `then` (lines by principal, role, privilege and
/// securable).
pub fn diff(now: &[AccessLine], then: &[AccessLine]) -> ReviewDiff {
    let before: BTreeMap<_, &AccessLine> = then.iter().map(|l| (l.identity(), l)).collect();
    let after: BTreeMap<_, &AccessLine> = now.iter().map(|l| (l.identity(), l)).collect();
    let mut out = ReviewDiff::default();
    for (key, line) in &after {
        match before.get(key) {
            None => out.added.push((*line).clone()),
            Some(old) if old.expires_at_ms != line.expires_at_ms || old.membership != line.membership => {
                out.changed.push(((*old).clone(), (*line).clone()));
            }
            Some(_) => out.unchanged += 1,
        }
    }
    out.removed = before.iter().filter(|(k, _)| !after.contains_key(*k)).map(|(_, l)| (*l).clone()).collect();
    out
}

impl AccessAdmin {
    /// The target a securable names for deciding on it; `None` when it does not resolve (a
    /// warehouse gone, say).
    async fn review_target(&self, securable: &SecurableRef) -> Result<Option<Target>> {
        match self.securable_target(securable).await {
            Ok(target) => Ok(Some(target)),
            Err(CatalogError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reviewing `scope`: server admins, and holders of `review` on it or on a container of it.
    async fn authorize_review(&self, ctx: &RequestContext, scope: &SecurableRef) -> Result<()> {
        if ctx.is_server_admin().await? {
            return Ok(());
        }
        let missing = || crate::access_admin::missing(scope);
        let target = self.review_target(scope).await?.ok_or_else(missing)?;
        ctx.require(&target, Privilege::Review, missing).await?;
        Ok(())
    }

    /// The effective access on `scope` now (the uses this replica noted are written first, so
    /// its report is current), as `filter` keeps it.
    pub async fn effective_access(
        &self,
        ctx: &RequestContext,
        scope: &SecurableRef,
        filter: ReportFilter,
    ) -> Result<Vec<AccessLine>> {
        scope.validate()?;
        self.authorize_review(ctx, scope).await?;
        self.lines_now(ctx, scope, filter).await
    }

    async fn lines_now(
        &self,
        ctx: &RequestContext,
        scope: &SecurableRef,
        filter: ReportFilter,
    ) -> Result<Vec<AccessLine>> {
        ctx.flush_grant_use().await;
        let now = self.catalog.clock().now_ms();
        let named = Named::from(scope);
        let mut lines = self.access.effective_access(scope, now).await?;
        if lines.len() > MAX_LINES {
            return Err(CatalogError::bad_request(format!(
                "more than {MAX_LINES} principals hold grants that apply to this scope: report on a narrower one \
                 (a warehouse, a namespace, a table)"
            )));
        }
        for line in &mut lines {
            line.relation = line.securable.relation_to(&named).to_owned();
        }
        lines.retain(|l| filter.keeps(l, now));
        lines.sort_by(|a, b| {
            (&a.principal, &a.securable, &a.privilege, &a.role).cmp(&(
                &b.principal,
                &b.securable,
                &b.privilege,
                &b.role,
            ))
        });
        Ok(lines)
    }

    /// Starts a campaign: the effective access on `scope` frozen now.
    pub async fn create_review(
        &self,
        ctx: &RequestContext,
        scope: &SecurableRef,
        description: Option<String>,
    ) -> Result<(ReviewRecord, Vec<ReviewLine>)> {
        scope.validate()?;
        if let Some(description) = &description {
            check_text("description", description)?;
        }
        self.authorize_review(ctx, scope).await?;
        let lines = self.lines_now(ctx, scope, ReportFilter::default()).await?;
        let warehouse_id = match &scope.warehouse {
            Some(name) => self.catalog.warehouse_id_of(name).await?.map(|id| id.as_str().to_owned()),
            None => None,
        };
        let record = ReviewRecord {
            id: uuid::Uuid::now_v7().to_string(),
            scope: Named::from(scope),
            warehouse_id,
            description,
            created_by: ctx.caller().describe(),
            created_at_ms: self.catalog.clock().now_ms(),
            closed_by: None,
            closed_at_ms: None,
        };
        let review = NewReview { record: record.clone(), lines };
        self.access.create_review(&ctx.write().unkeyed(), &review).await?;
        let lines = review
            .lines
            .into_iter()
            .enumerate()
            .map(|(i, entry)| ReviewLine {
                line: i as i64 + 1,
                entry,
                decision: None,
                decided_by: None,
                decided_at_ms: None,
                comment: None,
            })
            .collect();
        Ok((record, lines))
    }

    /// What the caller is on the server, decided once per request: a server admin, a reviewer
    /// of the server.
    async fn on_server(ctx: &RequestContext) -> Result<OnServer> {
        let admin = ctx.is_server_admin().await?;
        let reviewer = admin || ctx.holds(&Target::Server, Privilege::Review).await?.is_some();
        Ok(OnServer { admin, reviewer })
    }

    /// A campaign the caller may review (one it may not is answered as missing).
    async fn visible_review(&self, ctx: &RequestContext, on_server: OnServer, id: &str) -> Result<ReviewRecord> {
        let missing = || CatalogError::NotFound {
            kind: crate::ObjectKind::AccessControl,
            message: format!("Access review does not exist: {id}"),
        };
        let record = self.access.review(id).await?.ok_or_else(missing)?;
        if self.may_review(ctx, on_server, &record).await? { Ok(record) } else { Err(missing()) }
    }

    /// Whether the caller reviews `record`'s scope (a scope that no longer resolves: server
    /// admins and reviewers of the server only).
    async fn may_review(&self, ctx: &RequestContext, on_server: OnServer, record: &ReviewRecord) -> Result<bool> {
        if on_server.reviewer {
            return Ok(true);
        }
        let Ok(scope) = record.scope.securable() else { return Ok(false) };
        let Some(target) = self.review_target(&scope).await? else { return Ok(false) };
        // The warehouse its name means now must be the one reviewed (a warehouse made again under
        // the name does not inherit the old one's campaigns).
        let now_id = match &target {
            Target::Server => None,
            Target::Warehouse { warehouse_id }
            | Target::Namespace { warehouse_id, .. }
            | Target::Tabular { warehouse_id, .. } => Some(warehouse_id.as_str()),
        };
        if now_id != record.warehouse_id.as_deref() {
            return Ok(false);
        }
        Ok(ctx.holds(&target, Privilege::Review).await?.is_some())
    }

    /// The campaigns the caller may review, newest first.
    pub async fn list_reviews(&self, ctx: &RequestContext) -> Result<Vec<ReviewRecord>> {
        let on_server = Self::on_server(ctx).await?;
        let mut visible = Vec::new();
        for record in self.access.reviews().await? {
            if self.may_review(ctx, on_server, &record).await? {
                visible.push(record);
            }
        }
        Ok(visible)
    }

    pub async fn get_review(&self, ctx: &RequestContext, id: &str) -> Result<(ReviewRecord, Vec<ReviewLine>)> {
        let record = self.visible_review(ctx, Self::on_server(ctx).await?, id).await?;
        let lines = self.access.review_lines(id).await?;
        Ok((record, lines))
    }

    /// Decides lines of an open campaign, each in its own transaction with its record; a
    /// revocation takes effect with it. A reviewer does not attest its own access; revoking a
    /// grant needs `review` where the grant is (a grant on a container of the scope is not the
    /// scope's reviewers' to take away), leaving a role needs `review` on the server.
    pub async fn decide_review(
        &self,
        ctx: &RequestContext,
        id: &str,
        decisions: &[(i64, ReviewDecision, Option<String>)],
    ) -> Result<Vec<(i64, Revoked)>> {
        for (_, _, comment) in decisions {
            if let Some(comment) = comment {
                check_text("comment", comment)?;
            }
        }
        let on_server = Self::on_server(ctx).await?;
        let record = self.visible_review(ctx, on_server, id).await?;
        if record.closed_at_ms.is_some() {
            return Err(CatalogError::Conflict(format!("access review {id} is closed")));
        }
        let lines: HashMap<i64, ReviewLine> =
            self.access.review_lines(id).await?.into_iter().map(|l| (l.line, l)).collect();
        let me = match ctx.caller() {
            Caller::Principal { id, .. } => Some(id.as_str().to_owned()),
            _ => None,
        };
        let mut done = Vec::with_capacity(decisions.len());
        for (number, decision, comment) in decisions {
            let line = lines
                .get(number)
                .ok_or_else(|| CatalogError::bad_request(format!("access review {id} has no line {number}")))?;
            if line.decision.is_some() {
                return Err(CatalogError::Conflict(format!("line {number} of access review {id} is decided already")));
            }
            match decision {
                ReviewDecision::Attest if me.as_deref() == Some(line.entry.principal_id.as_str()) => {
                    return Err(CatalogError::Forbidden(format!(
                        "line {number} is your own access: another reviewer attests it"
                    )));
                }
                ReviewDecision::Attest => {}
                ReviewDecision::RevokeGrant => {
                    // Where the grant is now (it follows its object through renames).
                    if !on_server.admin
                        && let Some(grant) = self.access.grant_by_id(&line.entry.grant_id).await?
                    {
                        if reserved_to_server_admins(grant.privilege, grant.securable.kind) {
                            return Err(CatalogError::Forbidden(format!(
                                "line {number}'s grant ({} on the {}) is granted and revoked by server admins only",
                                grant.privilege,
                                grant.securable.kind.as_str()
                            )));
                        }
                        let missing = || crate::access_admin::missing(&grant.securable);
                        let target = self.review_target(&grant.securable).await?.ok_or_else(missing)?;
                        if ctx.holds(&target, Privilege::Review).await?.is_none() {
                            return Err(CatalogError::Forbidden(format!(
                                "line {number}'s grant is on a {} above this review's scope: revoking it needs \
                                 review there",
                                grant.securable.kind.as_str()
                            )));
                        }
                    }
                }
                ReviewDecision::RevokeMembership => {
                    if line.entry.membership != "manual" {
                        return Err(CatalogError::Conflict(format!(
                            "line {number}'s membership comes from the identity provider's claims and returns \
                             with the next token: revoke the grant, or change the groups at the provider"
                        )));
                    }
                    if !on_server.admin {
                        if !on_server.reviewer {
                            return Err(CatalogError::Forbidden(
                                "taking a principal out of a role takes all of the role's grants, anywhere: it needs \
                                 review on the server"
                                    .into(),
                            ));
                        }
                        let filter = crate::access::GrantFilter {
                            role: Some(line.entry.role.clone()),
                            ..crate::access::GrantFilter::default()
                        };
                        let grants = self.access.list_grants(&filter).await?;
                        if grants.iter().any(|g| reserved_to_server_admins(g.privilege, g.securable.kind)) {
                            return Err(CatalogError::Forbidden(format!(
                                "line {number}'s role holds grants that server admins alone grant and revoke (admin on \
                                 the server, audit, review): a server admin takes principals out of it"
                            )));
                        }
                    }
                }
            }
            let decided = self
                .access
                .decide_review_line(
                    &ctx.write().unkeyed(),
                    id,
                    line,
                    *decision,
                    (ctx.caller().describe(), self.catalog.clock().now_ms(), comment.clone()),
                )
                .await?;
            if decided == Revoked::Removed {
                ctx.access_changed();
            }
            done.push((*number, decided));
        }
        Ok(done)
    }

    /// Closes a campaign: no decision after; its outcome (lines attested, revoked, undecided) is
    /// recorded.
    pub async fn close_review(&self, ctx: &RequestContext, id: &str) -> Result<ReviewRecord> {
        let record = self.visible_review(ctx, Self::on_server(ctx).await?, id).await?;
        if record.closed_at_ms.is_some() {
            return Err(CatalogError::Conflict(format!("access review {id} is closed already")));
        }
        self.access
            .close_review(&ctx.write().unkeyed(), id, &ctx.caller().describe(), self.catalog.clock().now_ms())
            .await?;
        self.access.review(id).await?.ok_or_else(|| CatalogError::Conflict(format!("access review {id} vanished")))
    }

    /// What changed between campaign `id` and campaign `against`.
    pub async fn diff_reviews(&self, ctx: &RequestContext, id: &str, against: &str) -> Result<ReviewDiff> {
        let on_server = Self::on_server(ctx).await?;
        self.visible_review(ctx, on_server, id).await?;
        self.visible_review(ctx, on_server, against).await?;
        let now: Vec<AccessLine> = self.access.review_lines(id).await?.into_iter().map(|l| l.entry).collect();
        let then: Vec<AccessLine> = self.access.review_lines(against).await?.into_iter().map(|l| l.entry).collect();
        Ok(diff(&now, &then))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(principal: &str, privilege: &str, expires: Option<i64>) -> AccessLine {
        AccessLine {
            principal: principal.into(),
            principal_id: format!("id-{principal}"),
            role: "r".into(),
            role_id: "rid".into(),
            membership: "manual".into(),
            privilege: privilege.into(),
            implies: vec![],
            securable: Named { kind: "warehouse".into(), warehouse: Some("w".into()), namespace: None, name: None },
            relation: "on".into(),
            grant_id: uuid::Uuid::now_v7().to_string(),
            granted_at_ms: 0,
            expires_at_ms: expires,
            last_used_at_ms: None,
        }
    }

    #[test]
    fn diff_matches_lines_by_what_they_give_not_by_grant_id() {
        let then = vec![line("a", "read", None), line("b", "write", None), line("c", "read", Some(5))];
        let now = vec![line("a", "read", None), line("c", "read", Some(9)), line("d", "admin", None)];
        let d = diff(&now, &then);
        assert_eq!(d.added.iter().map(|l| l.principal.as_str()).collect::<Vec<_>>(), ["d"]);
        assert_eq!(d.removed.iter().map(|l| l.principal.as_str()).collect::<Vec<_>>(), ["b"]);
        assert_eq!(d.changed.len(), 1);
        assert_eq!((d.changed[0].0.expires_at_ms, d.changed[0].1.expires_at_ms), (Some(5), Some(9)));
        assert_eq!(d.unchanged, 1);
    }

    #[test]
    fn relation_places_a_grant_against_the_scope() {
        let ns = |levels: &[&str]| Named {
            kind: "namespace".into(),
            warehouse: Some("w".into()),
            namespace: Some(levels.iter().map(|s| s.to_string()).collect()),
            name: None,
        };
        let server = Named { kind: "server".into(), warehouse: None, namespace: None, name: None };
        assert_eq!(server.relation_to(&ns(&["a"])), "above");
        assert_eq!(ns(&["a"]).relation_to(&ns(&["a", "b"])), "above");
        assert_eq!(ns(&["a", "b"]).relation_to(&ns(&["a", "b"])), "on");
        assert_eq!(ns(&["a", "b", "c"]).relation_to(&ns(&["a", "b"])), "inside");
    }

    #[test]
    fn dormant_and_expiring_filters() {
        let now = 100 * DAY_MS;
        let mut l = line("a", "read", Some(now + 3 * DAY_MS));
        l.granted_at_ms = now - 40 * DAY_MS;
        assert!(ReportFilter { dormant_days: Some(30), expiring_days: None }.keeps(&l, now));
        l.last_used_at_ms = Some(now - DAY_MS);
        assert!(!ReportFilter { dormant_days: Some(30), expiring_days: None }.keeps(&l, now));
        assert!(ReportFilter { dormant_days: None, expiring_days: Some(7) }.keeps(&l, now));
        assert!(!ReportFilter { dormant_days: None, expiring_days: Some(2) }.keeps(&l, now));
    }

    #[test]
    fn usage_log_keeps_the_latest_use_and_is_bounded() {
        let log = UsageLog::default();
        let p = PrincipalId::new("p".to_owned());
        log.note("g", &p, 5);
        log.note("g", &p, 3);
        assert_eq!(log.take(), vec![GrantUse { grant_id: "g".into(), principal_id: "p".into(), at_ms: 5 }]);
        assert!(log.take().is_empty());
        for i in 0..MAX_USES + 10 {
            log.note(&i.to_string(), &p, 1);
        }
        assert_eq!(log.take().len(), MAX_USES);
    }
}
