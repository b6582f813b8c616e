//! Idempotency keys: a request's key is recorded by its mutation (`SqlStore::commit_write`),
//! and its answer stored and read back here.

use async_trait::async_trait;
use icegate_catalog::CatalogError;
use icegate_catalog::idempotency::{Finalized, IdempotencyKey, IdempotencyRecord, IdempotencyScope};
use icegate_catalog::store::IdempotencyStore;

use crate::{SqlStore, db_error};

#[derive(sqlx::FromRow)]
struct KeyRow {
    operation: String,
    request_digest: String,
    status: Option<i64>,
    body: Option<String>,
    created_at: i64,
}

#[async_trait]
impl IdempotencyStore for SqlStore {
    async fn idempotency_record(&self, key: &IdempotencyKey) -> Result<Option<IdempotencyRecord>, CatalogError> {
        let row: Option<KeyRow> = sqlx::query_as(
            "SELECT operation, request_digest, status, body, created_at FROM idempotency_keys \
             WHERE principal = $1 AND key = $2",
        )
        .bind(&key.principal)
        .bind(&key.key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(row.map(|row| IdempotencyRecord {
            operation: row.operation,
            request_digest: row.request_digest,
            status: row.status.and_then(|s| u16::try_from(s).ok()),
            body: row.body,
            created_at_ms: row.created_at,
        }))
    }

    async fn finalize_idempotency_key(
        &self,
        scope: &IdempotencyScope,
        status: u16,
        body: &str,
        keep_unreserved: bool,
    ) -> Result<Finalized, CatalogError> {
        // The row this request's own mutation wrote, if it committed one.
        let filled = sqlx::query(
            "UPDATE idempotency_keys SET status = $1, body = $2 \
             WHERE principal = $3 AND key = $4 AND reservation = $5 AND status IS NULL",
        )
        .bind(i64::from(status))
        .bind(body)
        .bind(&scope.key.principal)
        .bind(&scope.key.key)
        .bind(&scope.reservation)
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        if filled.rows_affected() == 1 {
            return Ok(Finalized::Filled);
        }
        if !keep_unreserved {
            return Ok(Finalized::NothingRecorded);
        }
        // A request that mutated nothing: its answer is final only if no other request with
        // the key got there first.
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (principal, key, operation, request_digest, status, body, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (principal, key) DO NOTHING",
        )
        .bind(&scope.key.principal)
        .bind(&scope.key.key)
        .bind(&scope.operation)
        .bind(&scope.request_digest)
        .bind(i64::from(status))
        .bind(body)
        .bind(self.now_ms())
        .execute(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(if inserted.rows_affected() == 1 { Finalized::Inserted } else { Finalized::Taken })
    }

    async fn delete_idempotency_key(&self, key: &IdempotencyKey) -> Result<(), CatalogError> {
        sqlx::query("DELETE FROM idempotency_keys WHERE principal = $1 AND key = $2")
            .bind(&key.principal)
            .bind(&key.key)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn delete_idempotency_keys_before(&self, before_ms: i64) -> Result<u64, CatalogError> {
        let done = sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1")
            .bind(before_ms)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(done.rows_affected())
    }
}
