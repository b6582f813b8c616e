//! Removes idempotency keys older than their lifetime (plus the grace for clock skew). Recurs
//! (see `icegate serve`); one replica runs each pass.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Job, Progress, TaskRun};
use crate::{CatalogStore, Result};

pub const KIND: &str = "idempotency-key-expiry";

pub struct IdempotencyKeyExpiry {
    store: Arc<dyn CatalogStore>,
    /// How long after its creation a key is removed.
    keep: Duration,
}

impl IdempotencyKeyExpiry {
    pub fn new(store: Arc<dyn CatalogStore>, keep: Duration) -> Self {
        Self { store, keep }
    }
}

#[async_trait::async_trait]
impl Job for IdempotencyKeyExpiry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let before = run.now_ms().saturating_sub(i64::try_from(self.keep.as_millis()).unwrap_or(i64::MAX));
        let removed = self.store.delete_idempotency_keys_before(before).await?;
        let removed = i64::try_from(removed).unwrap_or(i64::MAX);
        run.save(Progress { done: removed, total: Some(removed), bytes: 0 }, None).await?;
        Ok(json!({ "removed": removed, "created-before-ms": before }))
    }
}
