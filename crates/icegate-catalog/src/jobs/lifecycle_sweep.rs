//! The lifecycle sweep (every `lifecycle.sweep-interval`): deleted entries whose hold ended
//! without a purge go (their files stay, as a drop without purge says; their locations are no
//! longer held), and every entry whose purge is due has its purge queued (a purge the drop
//! could not queue, or one postponed by a legal hold, is queued again here).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Job, Progress, TaskRun, TaskStore};
use crate::{CatalogStore, Result};

pub const KIND: &str = "lifecycle-sweep";

/// Entries handled per pass.
const LIMIT: i64 = 1000;

pub struct LifecycleSweep {
    store: Arc<dyn CatalogStore>,
    queue: Arc<dyn TaskStore>,
}

impl LifecycleSweep {
    pub fn new(store: Arc<dyn CatalogStore>, queue: Arc<dyn TaskStore>) -> Self {
        Self { store, queue }
    }

    fn store(&self) -> &Arc<dyn CatalogStore> {
        &self.store
    }
}

#[async_trait::async_trait]
impl Job for LifecycleSweep {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let now = run.now_ms();
        let expired = self.store().expire_deleted(now, LIMIT).await?;
        let due = self.store().purges_due(now, LIMIT).await?;
        let mut queued = 0;
        for entry in &due {
            let due_ms = entry.purge_due_ms.unwrap_or(now);
            let reason = ("the lifecycle sweep found its purge due", now);
            crate::lifecycle::queue_purge(self.queue.as_ref(), &entry.warehouse_id, &entry.id, due_ms, reason).await?;
            queued += 1;
        }
        let done = i64::try_from(expired).unwrap_or(i64::MAX) + queued;
        run.save(Progress { done, total: Some(done), bytes: 0 }, None).await?;
        Ok(json!({ "expired": expired, "purges-queued": queued }))
    }
}
