//! Access reviews: the effective-access query, grant use, campaigns and their decisions.

use icegate_catalog::access::{GrantRecord, Privilege, SecurableRef, SecurableType};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::reviews::{
    AccessLine, GrantUse, Named, NewReview, ReviewDecision, ReviewLine, ReviewRecord, Revoked, implied,
};
use icegate_catalog::{CatalogError, Result};
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::guard::SERVER_GRANTS_NOT_BY_CLAIM;
use super::{GRANT_SELECT, ancestors_of, below_range, grant_from, securable_of};
use crate::{SqlStore, db_error};

/// Grant uses written per statement batch (each its own statement, in one transaction).
const USE_BATCH: usize = 500;

fn line_from(row: &AnyRow) -> Result<AccessLine> {
    let privilege = Privilege::parse(&row.try_get::<String, _>("privilege").map_err(db_error)?)?;
    Ok(AccessLine {
        principal: row.try_get("principal").map_err(db_error)?,
        principal_id: row.try_get("principal_id").map_err(db_error)?,
        role: row.try_get("role").map_err(db_error)?,
        role_id: row.try_get("role_id").map_err(db_error)?,
        membership: row.try_get("membership").map_err(db_error)?,
        privilege: privilege.as_str().to_owned(),
        implies: implied(privilege),
        securable: Named::from(&securable_of(row)?),
        relation: String::new(),
        grant_id: row.try_get("grant_id").map_err(db_error)?,
        granted_at_ms: row.try_get("created_at").map_err(db_error)?,
        expires_at_ms: row.try_get("expires_at").map_err(db_error)?,
        last_used_at_ms: row.try_get("last_used_at").map_err(db_error)?,
    })
}

fn review_from(row: &AnyRow) -> Result<ReviewRecord> {
    let scope: String = row.try_get("scope").map_err(db_error)?;
    Ok(ReviewRecord {
        id: row.try_get("id").map_err(db_error)?,
        scope: serde_json::from_str(&scope)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("access review scope: {e}")))?,
        warehouse_id: row.try_get("warehouse_id").map_err(db_error)?,
        description: row.try_get("description").map_err(db_error)?,
        created_by: row.try_get("created_by").map_err(db_error)?,
        created_at_ms: row.try_get("created_at").map_err(db_error)?,
        closed_by: row.try_get("closed_by").map_err(db_error)?,
        closed_at_ms: row.try_get("closed_at").map_err(db_error)?,
    })
}

const REVIEW_COLUMNS: &str = "id, scope, warehouse_id, description, created_by, created_at, closed_by, closed_at";

impl SqlStore {
    pub(super) async fn find_grant(&self, id: &str) -> Result<Option<GrantRecord>> {
        let row = sqlx::query(AssertSqlSafe(format!("{GRANT_SELECT} WHERE g.id = $1")))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.as_ref().map(grant_from).transpose()
    }

    pub(super) async fn store_grant_use(&self, uses: &[GrantUse]) -> Result<()> {
        for batch in uses.chunks(USE_BATCH) {
            let mut tx = self.begin_write().await?;
            for u in batch {
                // Only for grants and principals that still exist (either may have gone since
                // the use); the later time wins.
                sqlx::query(
                    "INSERT INTO grant_usage (grant_id, principal_id, last_used_at) \
                     SELECT g.id, p.id, CAST($3 AS BIGINT) FROM grants g, principals p WHERE g.id = $1 AND p.id = $2 \
                     ON CONFLICT (grant_id, principal_id) DO UPDATE SET last_used_at = \
                     CASE WHEN excluded.last_used_at > grant_usage.last_used_at THEN excluded.last_used_at \
                     ELSE grant_usage.last_used_at END",
                )
                .bind(&u.grant_id)
                .bind(&u.principal_id)
                .bind(u.at_ms)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            }
            // Bookkeeping, not a change: no record.
            self.commit_write(tx, &WriteContext::NONE).await?;
        }
        Ok(())
    }

    pub(super) async fn effective_lines(&self, scope: &SecurableRef, now: i64) -> Result<Vec<AccessLine>> {
        let resolved = self.resolve(scope, None).await?;
        // $1 now, $2 warehouse id, $3 namespace (encoded) or tabular id, $4/$5 the range of
        // names strictly below the namespace, $6.. the namespace and its ancestors.
        let ancestors = scope.namespace.as_ref().map(ancestors_of).unwrap_or_default();
        let in_ancestors: Vec<String> = (0..ancestors.len()).map(|i| format!("${}", i + 6)).collect();
        let in_ancestors = if in_ancestors.is_empty() { "NULL".to_owned() } else { in_ancestors.join(", ") };
        let (third, (lo, hi)) = match (&scope.namespace, &resolved.tabular_id) {
            (Some(_), Some(tabular)) => (tabular.clone(), (String::new(), String::new())),
            (Some(ns), None) => (ns.encoded(), below_range(&ns.encoded())),
            (None, _) => (String::new(), (String::new(), String::new())),
        };
        let scope_condition = match scope.kind {
            SecurableType::Server => "1 = 1".to_owned(),
            SecurableType::Warehouse => "g.securable_type = 'server' OR g.warehouse_id = $2".to_owned(),
            SecurableType::Namespace => format!(
                "g.securable_type = 'server' OR (g.securable_type = 'warehouse' AND g.warehouse_id = $2) \
                 OR (g.securable_type = 'namespace' AND g.warehouse_id = $2 \
                     AND (n.name IN ({in_ancestors}) OR (n.name >= $4 AND n.name < $5))) \
                 OR (g.securable_type IN ('table', 'view') AND g.warehouse_id = $2 \
                     AND (tn.name = $3 OR (tn.name >= $4 AND tn.name < $5)))"
            ),
            SecurableType::Table | SecurableType::View => format!(
                "g.securable_type = 'server' OR (g.securable_type = 'warehouse' AND g.warehouse_id = $2) \
                 OR (g.securable_type = 'namespace' AND g.warehouse_id = $2 AND n.name IN ({in_ancestors})) \
                 OR (g.securable_type IN ('table', 'view') AND g.tabular_id = $3)"
            ),
        };
        let sql = format!(
            "SELECT p.id AS principal_id, p.name AS principal, r.id AS role_id, r.name AS role, m.source AS membership, \
                    g.id AS grant_id, g.privilege, g.securable_type, w.name AS warehouse, \
                    COALESCE(tn.name, n.name) AS namespace, t.name AS tabular, g.created_at, g.expires_at, \
                    u.last_used_at \
             FROM grants g JOIN roles r ON r.id = g.role_id JOIN role_members m ON m.role_id = g.role_id \
             JOIN principals p ON p.id = m.principal_id \
             LEFT JOIN warehouses w ON w.id = g.warehouse_id LEFT JOIN namespaces n ON n.id = g.namespace_id \
             LEFT JOIN tabulars t ON t.id = g.tabular_id LEFT JOIN namespaces tn ON tn.id = t.namespace_id \
             LEFT JOIN grant_usage u ON u.grant_id = g.id AND u.principal_id = p.id \
             WHERE (g.expires_at IS NULL OR g.expires_at > $1) AND {SERVER_GRANTS_NOT_BY_CLAIM} AND ({scope_condition}) \
             LIMIT {}",
            icegate_catalog::reviews::MAX_LINES + 1
        );
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(now)
            .bind(resolved.warehouse_id.unwrap_or_default())
            .bind(third)
            .bind(lo)
            .bind(hi);
        for ancestor in &ancestors {
            query = query.bind(ancestor.as_str());
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_error)?;
        rows.iter().map(line_from).collect()
    }

    pub(super) async fn insert_review(&self, write: &WriteContext, review: &NewReview) -> Result<()> {
        let record = &review.record;
        let scope = serde_json::to_string(&record.scope).map_err(|e| CatalogError::Internal(anyhow::Error::new(e)))?;
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO access_reviews (id, scope, warehouse_id, description, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&record.id)
        .bind(&scope)
        .bind(record.warehouse_id.clone())
        .bind(record.description.clone())
        .bind(&record.created_by)
        .bind(record.created_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        for (i, line) in review.lines.iter().enumerate() {
            let entry = serde_json::to_string(line).map_err(|e| CatalogError::Internal(anyhow::Error::new(e)))?;
            sqlx::query("INSERT INTO access_review_lines (review_id, line, entry) VALUES ($1, $2, $3)")
                .bind(&record.id)
                .bind(i as i64 + 1)
                .bind(entry)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        let write = write.changing(serde_json::json!({
            "access-review": record.id, "scope": record.scope, "lines": review.lines.len(),
            "description": record.description,
        }));
        self.commit_write(tx, &write).await
    }

    pub(super) async fn read_review(&self, id: &str) -> Result<Option<ReviewRecord>> {
        let row = sqlx::query(AssertSqlSafe(format!("SELECT {REVIEW_COLUMNS} FROM access_reviews WHERE id = $1")))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?;
        row.as_ref().map(review_from).transpose()
    }

    pub(super) async fn read_reviews(&self) -> Result<Vec<ReviewRecord>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {REVIEW_COLUMNS} FROM access_reviews ORDER BY created_at DESC, id DESC"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(review_from).collect()
    }

    pub(super) async fn read_review_lines(&self, id: &str) -> Result<Vec<ReviewLine>> {
        let rows = sqlx::query(
            "SELECT line, entry, decision, decided_by, decided_at, comment FROM access_review_lines \
             WHERE review_id = $1 ORDER BY line",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                let entry: String = row.try_get("entry").map_err(db_error)?;
                let decision: Option<String> = row.try_get("decision").map_err(db_error)?;
                Ok(ReviewLine {
                    line: row.try_get("line").map_err(db_error)?,
                    entry: serde_json::from_str(&entry)
                        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("access review line: {e}")))?,
                    decision: decision.as_deref().map(ReviewDecision::parse).transpose()?,
                    decided_by: row.try_get("decided_by").map_err(db_error)?,
                    decided_at_ms: row.try_get("decided_at").map_err(db_error)?,
                    comment: row.try_get("comment").map_err(db_error)?,
                })
            })
            .collect()
    }

    /// Takes the campaign's row for this transaction if it is open (an update that changes
    /// nothing: a row lock on PostgreSQL, which orders a decision and a close of the campaign).
    async fn lock_open_review(tx: &mut crate::WriteTx, id: &str) -> Result<()> {
        let locked = sqlx::query("UPDATE access_reviews SET closed_at = closed_at WHERE id = $1 AND closed_at IS NULL")
            .bind(id)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        if locked.rows_affected() == 0 {
            return Err(CatalogError::Conflict(format!("access review {id} is closed, or does not exist")));
        }
        Ok(())
    }

    pub(super) async fn decide_line(
        &self,
        write: &WriteContext,
        id: &str,
        line: &ReviewLine,
        decision: ReviewDecision,
        (by, at_ms, comment): (String, i64, Option<String>),
    ) -> Result<Revoked> {
        let (mut tx, before) = self.begin_admin_change().await?;
        Self::lock_open_review(&mut tx, id).await?;
        let decided = sqlx::query(
            "UPDATE access_review_lines SET decision = $1, decided_by = $2, decided_at = $3, comment = $4 \
             WHERE review_id = $5 AND line = $6 AND decision IS NULL",
        )
        .bind(decision.as_str())
        .bind(&by)
        .bind(at_ms)
        .bind(comment.clone())
        .bind(id)
        .bind(line.line)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if decided.rows_affected() == 0 {
            return Err(CatalogError::Conflict(format!("line {} of access review {id} is decided already", line.line)));
        }
        let entry = &line.entry;
        let removed = match decision {
            ReviewDecision::Attest => None,
            ReviewDecision::RevokeGrant => Some(
                sqlx::query("DELETE FROM grants WHERE id = $1")
                    .bind(&entry.grant_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .rows_affected(),
            ),
            ReviewDecision::RevokeMembership => Some(
                sqlx::query("DELETE FROM role_members WHERE role_id = $1 AND principal_id = $2 AND source = 'manual'")
                    .bind(&entry.role_id)
                    .bind(&entry.principal_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(db_error)?
                    .rows_affected(),
            ),
        };
        let revoked = match removed {
            None => Revoked::Nothing,
            Some(0) => Revoked::AlreadyGone,
            Some(_) => Revoked::Removed,
        };
        let write = write.changing(serde_json::json!({
            "access-review": id, "line": line.line, "decision": decision.as_str(), "comment": comment,
            "principal": entry.principal, "principal-id": entry.principal_id, "role": entry.role,
            "privilege": entry.privilege, "securable": entry.securable, "grant-id": entry.grant_id,
            "revoked": match revoked { Revoked::Nothing => None, Revoked::Removed => Some("removed"), Revoked::AlreadyGone => Some("already-gone") },
        }));
        self.commit_admin_change(tx, &write, before, || {
            format!("line {} ({} of {} to {})", line.line, entry.privilege, entry.role, entry.principal)
        })
        .await?;
        Ok(revoked)
    }

    pub(super) async fn close_campaign(&self, write: &WriteContext, id: &str, by: &str, at_ms: i64) -> Result<()> {
        let mut tx = self.begin_write().await?;
        Self::lock_open_review(&mut tx, id).await?;
        sqlx::query("UPDATE access_reviews SET closed_at = $1, closed_by = $2 WHERE id = $3")
            .bind(at_ms)
            .bind(by)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let rows = sqlx::query(
            "SELECT COALESCE(decision, 'undecided') AS decision, COUNT(*) AS n FROM access_review_lines \
             WHERE review_id = $1 GROUP BY COALESCE(decision, 'undecided')",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let mut outcome = serde_json::Map::new();
        for row in rows {
            let decision: String = row.try_get("decision").map_err(db_error)?;
            let n: i64 = row.try_get("n").map_err(db_error)?;
            outcome.insert(decision, n.into());
        }
        let write = write.changing(serde_json::json!({ "access-review": id, "closed": true, "outcome": outcome }));
        self.commit_write(tx, &write).await
    }
}
