//! Management API: access reviews (`/management/v1/access-reviews`): the effective-access
//! report of a scope, and review campaigns.

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use icegate_catalog::NamespaceIdent;
use icegate_catalog::access::{SecurableRef, SecurableType};
use icegate_catalog::reviews::{AccessLine, ReportFilter, ReviewDecision, ReviewLine, ReviewRecord, Revoked};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Query};
use crate::routes::access::{NamespaceParam, split_namespace};

/// A securable named by the names of its parts.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NamedSecurable {
    /// server, warehouse, namespace, table or view.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warehouse: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl From<icegate_catalog::reviews::Named> for NamedSecurable {
    fn from(n: icegate_catalog::reviews::Named) -> Self {
        Self { kind: n.kind, warehouse: n.warehouse, namespace: n.namespace, name: n.name }
    }
}

/// One principal holding one grant through one membership.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct AccessLineResponse {
    pub principal: String,
    pub principal_id: String,
    pub role: String,
    /// `manual` (the management API), or `claim` / `claim-admin` (an identity provider's group
    /// claim, set anew with each token).
    pub membership: String,
    /// The privilege as granted.
    pub privilege: String,
    /// What it gives besides `describe` (`admin`: everything but `audit` and `review`).
    pub implies: Vec<String>,
    /// What the grant is on, named as it is now.
    pub securable: NamedSecurable,
    /// `above` (a container of the scope: it applies to all of it), `on` (the scope) or
    /// `inside` (something in the scope).
    pub relation: String,
    pub grant_id: String,
    pub granted_at_ms: i64,
    pub expires_at_ms: Option<i64>,
    /// When this grant last allowed a request of this principal (`null`: not since it was made).
    pub last_used_at_ms: Option<i64>,
}

impl From<AccessLine> for AccessLineResponse {
    fn from(l: AccessLine) -> Self {
        Self {
            principal: l.principal,
            principal_id: l.principal_id,
            role: l.role,
            membership: l.membership,
            privilege: l.privilege,
            implies: l.implies,
            securable: l.securable.into(),
            relation: l.relation,
            grant_id: l.grant_id,
            granted_at_ms: l.granted_at_ms,
            expires_at_ms: l.expires_at_ms,
            last_used_at_ms: l.last_used_at_ms,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct EffectiveAccessResponse {
    pub scope: NamedSecurable,
    /// When the report was made, milliseconds since the Unix epoch.
    pub as_of_ms: i64,
    pub lines: Vec<AccessLineResponse>,
}

/// The scope of a report or campaign: nothing (the server), a warehouse, a namespace in it, or
/// a table or view in that.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopeQuery {
    pub warehouse: Option<String>,
    /// Its levels as an array, or one string: levels joined by `%1F` (the unit separator) or `.`.
    pub namespace: Option<NamespaceParam>,
    pub table: Option<String>,
    pub view: Option<String>,
}

impl ScopeQuery {
    fn securable(&self) -> Result<SecurableRef, ApiError> {
        let namespace = match &self.namespace {
            Some(n) => Some(
                NamespaceIdent::from_levels(n.clone().levels())
                    .map_err(|e| ApiError::bad_request(format!("namespace: {e}")))?,
            ),
            None => None,
        };
        let kind = match (&self.warehouse, &namespace, &self.table, &self.view) {
            (None, None, None, None) => SecurableType::Server,
            (Some(_), None, None, None) => SecurableType::Warehouse,
            (Some(_), Some(_), None, None) => SecurableType::Namespace,
            (Some(_), Some(_), Some(_), None) => SecurableType::Table,
            (Some(_), Some(_), None, Some(_)) => SecurableType::View,
            _ => {
                return Err(ApiError::bad_request(
                    "a scope is nothing (the server), a warehouse, a warehouse and a namespace, or those and a \
                     table or a view",
                ));
            }
        };
        Ok(SecurableRef {
            kind,
            warehouse: self.warehouse.clone(),
            namespace,
            name: self.table.clone().or_else(|| self.view.clone()),
        })
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EffectiveQuery {
    pub warehouse: Option<String>,
    /// Levels joined by `%1F` (the unit separator) or, when no level contains one, by `.`.
    pub namespace: Option<String>,
    pub table: Option<String>,
    pub view: Option<String>,
    /// `json` (the default) or `csv`.
    pub format: Option<String>,
    /// Only lines not used for this many days (a line never used counts once its grant is that
    /// old).
    #[serde(rename = "dormantDays")]
    #[param(rename = "dormantDays")]
    pub dormant_days: Option<u32>,
    /// Only lines whose grant expires within this many days.
    #[serde(rename = "expiringDays")]
    #[param(rename = "expiringDays")]
    pub expiring_days: Option<u32>,
}

/// Who can do what on a scope
///
/// Every principal holding a grant in force that applies to the scope: granted on it, on a
/// container of it (server, warehouse, enclosing namespaces) or on anything inside it; one line
/// per principal, grant and membership, with when that grant last allowed a request of that
/// principal. `dormantDays` and `expiringDays` narrow it to dormant or expiring grants. Server
/// admins and holders of `review` on the scope (or a container of it) read it; the read is
/// recorded.
#[utoipa::path(get, path = "/management/v1/access-reviews/effective", tag = "Access reviews",
    operation_id = "effectiveAccess",
    params(EffectiveQuery),
    responses(
        (status = 200, description = "The report (JSON, or CSV with `format=csv`)", body = EffectiveAccessResponse),
        (status = 400, description = "An invalid scope or filter", body = IcebergErrorResponse),
        (status = 403, description = "Without `review` on the scope", body = IcebergErrorResponse),
        (status = 404, description = "No such scope (or one the caller may not see)", body = IcebergErrorResponse),
    ))]
pub async fn effective_access(
    State(state): State<AppState>,
    Context(ctx): Context,
    Query(query): Query<EffectiveQuery>,
) -> Result<Response, ApiError> {
    let csv = match query.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(other) => return Err(ApiError::bad_request(format!("format must be json or csv, not {other:?}"))),
    };
    let scope = ScopeQuery {
        warehouse: query.warehouse,
        namespace: query.namespace.map(|n| NamespaceParam::Levels(split_namespace(&n))),
        table: query.table,
        view: query.view,
    }
    .securable()?;
    let filter = ReportFilter { dormant_days: query.dormant_days, expiring_days: query.expiring_days };
    let lines = state.access.effective_access(&ctx, &scope, filter).await?;
    if csv {
        return Ok(([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], to_csv(&lines)).into_response());
    }
    let as_of_ms = state.catalog.clock().now_ms();
    Ok(Json(EffectiveAccessResponse {
        scope: icegate_catalog::reviews::Named::from(&scope).into(),
        as_of_ms,
        lines: lines.into_iter().map(Into::into).collect(),
    })
    .into_response())
}

/// The report as CSV (RFC 4180, with a header row; times in RFC 3339 UTC). A field that a
/// spreadsheet would read as a formula (`=`, `+`, `-`, `@` first) gets a leading `'`: names are
/// chosen by principals, and the report is opened by reviewers.
fn to_csv(lines: &[AccessLine]) -> String {
    let mut out = String::from(
        "principal,principal_id,role,membership,privilege,implies,securable_type,warehouse,namespace,name,relation,\
         grant_id,granted_at,expires_at,last_used_at\r\n",
    );
    for l in lines {
        let namespace = l.securable.namespace.as_ref().map(|levels| {
            if levels.iter().any(|level| level.contains('.')) {
                levels.join(&icegate_catalog::ident::NAMESPACE_SEPARATOR.to_string())
            } else {
                levels.join(".")
            }
        });
        let fields = [
            l.principal.clone(),
            l.principal_id.clone(),
            l.role.clone(),
            l.membership.clone(),
            l.privilege.clone(),
            l.implies.join(";"),
            l.securable.kind.clone(),
            l.securable.warehouse.clone().unwrap_or_default(),
            namespace.unwrap_or_default(),
            l.securable.name.clone().unwrap_or_default(),
            l.relation.clone(),
            l.grant_id.clone(),
            rfc3339(Some(l.granted_at_ms)),
            rfc3339(l.expires_at_ms),
            rfc3339(l.last_used_at_ms),
        ];
        let row: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        out.push_str(&row.join(","));
        out.push_str("\r\n");
    }
    out
}

/// Every field quoted (a `;` or a tab inside is never read as a separator, whatever the
/// spreadsheet's locale), and one that a spreadsheet would read as a formula (`=`, `+`, `-`, `@`
/// first, after any spaces) defused with a leading `'`.
fn csv_field(value: &str) -> String {
    let formula = value.trim_start().starts_with(['=', '+', '-', '@']) || value.starts_with(['\t', '\r']);
    let value = if formula { format!("'{value}") } else { value.to_owned() };
    format!("\"{}\"", value.replace('"', "\"\""))
}

/// Milliseconds since the epoch as RFC 3339 UTC (`2026-12-05T15:04:05.123Z`); empty for none.
fn rfc3339(ms: Option<i64>) -> String {
    let Some(ms) = ms else { return String::new() };
    let (secs, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CreateReviewRequest {
    /// What the campaign reviews: `{}` for the server, else `warehouse`, with `namespace`, with
    /// `table` or `view`.
    pub scope: ScopeQuery,
    pub description: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ReviewLineResponse {
    /// The line's number in its campaign (1, 2, ...).
    pub line: i64,
    #[serde(flatten)]
    pub entry: AccessLineResponse,
    /// `attest`, `revoke-grant` or `revoke-membership`; `null` while undecided.
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub comment: Option<String>,
}

impl From<ReviewLine> for ReviewLineResponse {
    fn from(l: ReviewLine) -> Self {
        Self {
            line: l.line,
            entry: l.entry.into(),
            decision: l.decision.map(|d| d.as_str().to_owned()),
            decided_by: l.decided_by,
            decided_at_ms: l.decided_at_ms,
            comment: l.comment,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ReviewResponse {
    pub id: String,
    pub scope: NamedSecurable,
    pub description: Option<String>,
    pub created_by: String,
    pub created_at_ms: i64,
    pub closed_by: Option<String>,
    pub closed_at_ms: Option<i64>,
    /// Present when the campaign is read by id (not in listings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<ReviewLineResponse>>,
    /// How many lines are attested, revoked and undecided (when read by id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<ReviewSummary>,
}

#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ReviewSummary {
    pub attested: usize,
    pub revoked: usize,
    pub undecided: usize,
}

fn review_response(record: ReviewRecord, lines: Option<Vec<ReviewLine>>) -> ReviewResponse {
    let summary = lines.as_ref().map(|lines| {
        let mut s = ReviewSummary::default();
        for l in lines {
            match l.decision {
                None => s.undecided += 1,
                Some(ReviewDecision::Attest) => s.attested += 1,
                Some(_) => s.revoked += 1,
            }
        }
        s
    });
    ReviewResponse {
        id: record.id,
        scope: record.scope.into(),
        description: record.description,
        created_by: record.created_by,
        created_at_ms: record.created_at_ms,
        closed_by: record.closed_by,
        closed_at_ms: record.closed_at_ms,
        lines: lines.map(|lines| lines.into_iter().map(Into::into).collect()),
        summary,
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ListReviewsResponse {
    pub reviews: Vec<ReviewResponse>,
}

/// Start an access review campaign
///
/// Freezes the effective access on the scope now (the lines of `effectiveAccess`); reviewers
/// then attest or revoke each line. Server admins and holders of `review` on the scope.
#[utoipa::path(post, path = "/management/v1/access-reviews", tag = "Access reviews", operation_id = "createAccessReview",
    request_body = CreateReviewRequest,
    responses(
        (status = 201, description = "The campaign and its lines", body = ReviewResponse),
        (status = 400, description = "An invalid scope", body = IcebergErrorResponse),
        (status = 403, description = "Without `review` on the scope", body = IcebergErrorResponse),
        (status = 404, description = "No such scope", body = IcebergErrorResponse),
    ))]
pub async fn create_review(
    State(state): State<AppState>,
    Context(ctx): Context,
    Json(request): Json<CreateReviewRequest>,
) -> Result<(StatusCode, Json<ReviewResponse>), ApiError> {
    let scope = request.scope.securable()?;
    let (record, lines) = state.access.create_review(&ctx, &scope, request.description).await?;
    Ok((StatusCode::CREATED, Json(review_response(record, Some(lines)))))
}

/// List access review campaigns
///
/// The campaigns whose scope the caller reviews, newest first.
#[utoipa::path(get, path = "/management/v1/access-reviews", tag = "Access reviews", operation_id = "listAccessReviews",
    responses((status = 200, description = "Campaigns", body = ListReviewsResponse)))]
pub async fn list_reviews(
    State(state): State<AppState>,
    Context(ctx): Context,
) -> Result<Json<ListReviewsResponse>, ApiError> {
    let reviews = state.access.list_reviews(&ctx).await?;
    Ok(Json(ListReviewsResponse { reviews: reviews.into_iter().map(|r| review_response(r, None)).collect() }))
}

/// Read an access review campaign with its lines and decisions
#[utoipa::path(get, path = "/management/v1/access-reviews/{id}", tag = "Access reviews", operation_id = "getAccessReview",
    params(("id" = String, Path, description = "The campaign's id")),
    responses(
        (status = 200, description = "The campaign", body = ReviewResponse),
        (status = 404, description = "No such campaign (or one the caller does not review)", body = IcebergErrorResponse),
    ))]
pub async fn get_review(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
) -> Result<Json<ReviewResponse>, ApiError> {
    let (record, lines) = state.access.get_review(&ctx, &id).await?;
    Ok(Json(review_response(record, Some(lines))))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DecisionRequest {
    /// The line's number.
    pub line: i64,
    /// `attest`; `revoke-grant` (the role's grant goes, for all its members; needs `review`
    /// where the grant is); `revoke-membership` (the principal leaves the role, losing all of
    /// its grants; needs `review` on the server).
    pub decision: String,
    pub comment: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionsRequest {
    pub decisions: Vec<DecisionRequest>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DecisionResult {
    pub line: i64,
    /// `none` (an attestation), `removed`, or `already-gone` (revoked before the decision).
    pub revoked: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DecisionsResponse {
    pub decided: Vec<DecisionResult>,
}

/// Decide lines of an access review
///
/// Each decision is applied with its record, in order; a revocation takes effect at once (on
/// other replicas within `auth.authorization_cache_ttl`). A line is decided once; a reviewer
/// does not attest its own access. Decisions before a refused one stand.
#[utoipa::path(post, path = "/management/v1/access-reviews/{id}/decisions", tag = "Access reviews",
    operation_id = "decideAccessReview",
    params(("id" = String, Path, description = "The campaign's id")),
    request_body = DecisionsRequest,
    responses(
        (status = 200, description = "What each decision did", body = DecisionsResponse),
        (status = 400, description = "An unknown line or decision", body = IcebergErrorResponse),
        (status = 403, description = "Not the caller's to decide", body = IcebergErrorResponse),
        (status = 404, description = "No such campaign", body = IcebergErrorResponse),
        (status = 409, description = "The campaign is closed, or the line decided already", body = IcebergErrorResponse),
    ))]
pub async fn decide_review(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
    Json(request): Json<DecisionsRequest>,
) -> Result<Json<DecisionsResponse>, ApiError> {
    if request.decisions.is_empty() || request.decisions.len() > 1000 {
        return Err(ApiError::bad_request("decisions holds 1-1000 decisions"));
    }
    let decisions = request
        .decisions
        .into_iter()
        .map(|d| Ok((d.line, ReviewDecision::parse(&d.decision)?, d.comment)))
        .collect::<Result<Vec<_>, icegate_catalog::CatalogError>>()?;
    let done = state.access.decide_review(&ctx, &id, &decisions).await?;
    Ok(Json(DecisionsResponse {
        decided: done
            .into_iter()
            .map(|(line, revoked)| DecisionResult {
                line,
                revoked: match revoked {
                    Revoked::Nothing => "none",
                    Revoked::Removed => "removed",
                    Revoked::AlreadyGone => "already-gone",
                }
                .to_owned(),
            })
            .collect(),
    }))
}

/// Close an access review
///
/// No decision is taken after; the campaign's outcome is recorded.
#[utoipa::path(post, path = "/management/v1/access-reviews/{id}/close", tag = "Access reviews",
    operation_id = "closeAccessReview",
    params(("id" = String, Path, description = "The campaign's id")),
    responses(
        (status = 200, description = "The closed campaign", body = ReviewResponse),
        (status = 404, description = "No such campaign", body = IcebergErrorResponse),
        (status = 409, description = "Closed already", body = IcebergErrorResponse),
    ))]
pub async fn close_review(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
) -> Result<Json<ReviewResponse>, ApiError> {
    let record = state.access.close_review(&ctx, &id).await?;
    Ok(Json(review_response(record, None)))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DiffQuery {
    /// The campaign to compare with (usually an earlier one of the same scope).
    pub against: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ChangedLine {
    pub before: AccessLineResponse,
    pub after: AccessLineResponse,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReviewDiffResponse {
    /// Access in this campaign, not in the other.
    pub added: Vec<AccessLineResponse>,
    /// Access in the other campaign, not in this one.
    pub removed: Vec<AccessLineResponse>,
    /// In both, with another expiry or membership.
    pub changed: Vec<ChangedLine>,
    pub unchanged: usize,
}

/// Compare two access reviews
///
/// Lines are matched by principal, role, privilege and securable (a grant made again is the
/// same access).
#[utoipa::path(get, path = "/management/v1/access-reviews/{id}/diff", tag = "Access reviews",
    operation_id = "diffAccessReviews",
    params(("id" = String, Path, description = "The campaign's id"), DiffQuery),
    responses(
        (status = 200, description = "What changed", body = ReviewDiffResponse),
        (status = 400, description = "No `against`, or an unknown parameter", body = IcebergErrorResponse),
        (status = 404, description = "No such campaign", body = IcebergErrorResponse),
    ))]
pub async fn diff_reviews(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(id): Path<String>,
    Query(query): Query<DiffQuery>,
) -> Result<Json<ReviewDiffResponse>, ApiError> {
    let diff = state.access.diff_reviews(&ctx, &id, &query.against).await?;
    Ok(Json(ReviewDiffResponse {
        added: diff.added.into_iter().map(Into::into).collect(),
        removed: diff.removed.into_iter().map(Into::into).collect(),
        changed: diff
            .changed
            .into_iter()
            .map(|(before, after)| ChangedLine { before: before.into(), after: after.into() })
            .collect(),
        unchanged: diff.unchanged,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_and_defuses_formulas() {
        assert_eq!(csv_field("plain"), "\"plain\"");
        assert_eq!(csv_field("q;=1+2"), "\"q;=1+2\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_field("-1"), "\"'-1\"");
        assert_eq!(csv_field("  =1+3"), "\"'  =1+3\"");
    }

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(Some(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(Some(1_796_484_645_123)), "2026-12-05T15:30:45.123Z");
        assert_eq!(rfc3339(Some(951_782_400_000)), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(None), "");
    }
}
