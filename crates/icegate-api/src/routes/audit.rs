//! Management API: reading the audit trail (`/management/v1/audit`).

use axum::extract::State;
use icegate_catalog::audit::{AuditFilter, MAX_PAGE};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Query};
use crate::routes::access::split_namespace;

/// One record of the audit trail.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct AuditRecordResponse {
    /// The record's place in the chain (1, 2, 3, ... without gaps).
    pub seq: i64,
    /// When, milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// SHA-256 (hex) of the previous record's hash, a newline and `record`.
    pub hash: String,
    /// The record as chained: its canonical text, parsed (actor, operation, subject, decisions,
    /// events, outcome, ...; see docs/governance.md).
    #[schema(value_type = Object)]
    pub record: serde_json::Value,
    /// The record's exact text, which `hash` covers (for checking a link without the server).
    pub text: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct AuditPageResponse {
    pub records: Vec<AuditRecordResponse>,
    /// Present when more records match: pass it as `pageToken`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Records at or after this time (milliseconds since the Unix epoch).
    pub since: Option<i64>,
    /// Records before this time (milliseconds since the Unix epoch).
    pub until: Option<i64>,
    /// Records of this actor: a principal's name, `anonymous`, `unauthenticated` or
    /// `system:<job>[:<task>]`.
    pub principal: Option<String>,
    /// Records of the principal with this id.
    #[serde(rename = "principalId")]
    #[param(rename = "principalId")]
    pub principal_id: Option<String>,
    /// Records of this operation (its OpenAPI operation id: `loadTable`, `grantPrivilege`, ...).
    pub action: Option<String>,
    /// Records about this warehouse (by name). Required for holders of `audit` on a warehouse.
    pub warehouse: Option<String>,
    /// Records about the warehouse with this id, for readers of every record (a deleted
    /// warehouse's records are found by its id).
    #[serde(rename = "warehouseId")]
    #[param(rename = "warehouseId")]
    pub warehouse_id: Option<String>,
    /// Records about this namespace or anything in it (levels joined by `%1F`, or by `.` when
    /// no level holds one); with `name`, about that table or view.
    pub namespace: Option<String>,
    /// Records about a table or view of this name (in `namespace`, or in any namespace).
    pub name: Option<String>,
    /// `applied` (a change), `allowed`, `refused` or `failed`.
    pub outcome: Option<String>,
    /// Where the page starts: the `next-page-token` of the previous page.
    #[serde(rename = "pageToken")]
    #[param(rename = "pageToken")]
    pub page_token: Option<String>,
    /// The most records a page holds (1-1000, default 100).
    #[serde(rename = "pageSize")]
    #[param(rename = "pageSize")]
    pub page_size: Option<u32>,
}

/// Search the audit trail
///
/// Records in chain order, filtered. Server admins and holders of `audit` on the server read
/// every record; holders of `audit` on a warehouse read that warehouse's records and must name
/// it (`warehouse`). Reading is itself recorded.
#[utoipa::path(
    get,
    path = "/management/v1/audit",
    tag = "Audit",
    operation_id = "searchAudit",
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of matching records", body = AuditPageResponse),
        (status = 400, description = "An invalid filter or page token", body = IcebergErrorResponse),
        (status = 403, description = "Without `audit` on the server or on the warehouse named", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn search_audit(
    State(state): State<AppState>,
    Context(ctx): Context,
    Query(query): Query<AuditQuery>,
) -> Result<Json<AuditPageResponse>, ApiError> {
    const OUTCOMES: [&str; 4] = ["applied", "allowed", "refused", "failed"];
    if let Some(outcome) = &query.outcome
        && !OUTCOMES.contains(&outcome.as_str())
    {
        return Err(ApiError::bad_request(format!("outcome must be one of {}, not {outcome:?}", OUTCOMES.join(", "))));
    }
    let after_seq = match query.page_token.as_deref().filter(|t| !t.is_empty()) {
        None => None,
        Some(token) => Some(
            token
                .parse::<i64>()
                .ok()
                .filter(|seq| *seq >= 0)
                .ok_or_else(|| ApiError::bad_request("pageToken is not a token this endpoint gave out"))?,
        ),
    };
    let page_size = query.page_size.unwrap_or(100);
    if !(1..=MAX_PAGE).contains(&page_size) {
        return Err(ApiError::bad_request(format!("pageSize must be 1-{MAX_PAGE}")));
    }
    let filter = AuditFilter {
        since_ms: query.since,
        until_ms: query.until,
        actor: query.principal,
        principal_id: query.principal_id,
        operation: query.action,
        warehouse_id: query.warehouse_id,
        namespace: query.namespace.as_deref().map(split_namespace),
        name: query.name,
        outcome: query.outcome,
        after_seq,
        until_seq: None,
    };
    let page = state.catalog.audit().search(&ctx, filter, query.warehouse.as_deref(), page_size).await?;
    let records = page
        .records
        .into_iter()
        .map(|r| AuditRecordResponse {
            seq: r.seq,
            at_ms: r.at_ms,
            hash: r.hash,
            record: serde_json::from_str(&r.record).unwrap_or(serde_json::Value::Null),
            text: r.record,
        })
        .collect();
    Ok(Json(AuditPageResponse { records, next_page_token: page.next_after.map(|seq| seq.to_string()) }))
}
