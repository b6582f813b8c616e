//! Removes location holds that have expired: reservations of staged creates never committed and
//! leases of dropped tables and views whose credentials can no longer work (they would
//! otherwise pile up: nothing else ends them). Recurs (see `icegate serve`); one replica runs
//! each pass. A hold that has not expired is never touched: the checks that read holds ignore
//! expired ones anyway, so a pass changes no decision, only what is stored.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Job, Progress, TaskRun};
use crate::{CatalogStore, Result};

pub const KIND: &str = "location-hold-expiry";

pub struct LocationHoldExpiry {
    store: Arc<dyn CatalogStore>,
}

impl LocationHoldExpiry {
    pub fn new(store: Arc<dyn CatalogStore>) -> Self {
        Self { store }
    }
}

#[async_trait::async_trait]
impl Job for LocationHoldExpiry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let now = run.now_ms();
        let removed = i64::try_from(self.store.expire_location_holds(now).await?).unwrap_or(i64::MAX);
        run.save(Progress { done: removed, total: Some(removed), bytes: 0 }, None).await?;
        Ok(json!({ "removed": removed, "expired-by-ms": now }))
    }
}
