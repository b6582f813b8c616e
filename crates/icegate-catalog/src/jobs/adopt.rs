//! `adoption-sync` tasks: a large first adoption run, and each scheduled re-sync of a
//! continuous adoption. The run is the one the API runs inline (see `adoption`), as the system
//! with the task's reason; it is idempotent (the table's manifests say what it holds, so a
//! run repeated after a kill adds nothing twice) and queues the next re-sync when it ends.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Job, TaskRun};
use crate::adoption::{RunSpec, SYNC_KIND};
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::service::Catalog;

pub struct AdoptionSync {
    catalog: Arc<Catalog>,
}

impl AdoptionSync {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self { catalog }
    }
}

#[async_trait::async_trait]
impl Job for AdoptionSync {
    fn kind(&self) -> &'static str {
        SYNC_KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let queued: RunSpec = serde_json::from_value(run.task().params.clone())
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("an adoption task without its plan: {e}")))?;
        let warehouse_id = WarehouseId::new(run.task().warehouse_id.clone().unwrap_or_default());
        let warehouse = match self.catalog.warehouse_for_prefix(&warehouse_id).await {
            Ok(warehouse) => warehouse,
            Err(CatalogError::NotFound { .. }) => return Ok(json!({ "skipped": "the warehouse is gone" })),
            Err(other) => return Err(other),
        };
        let adoptions = self.catalog.adoptions();
        // A re-sync runs on the adoption as it is stored now; a first run (its adoption still
        // pending) on its plan, which holds what the request asked for.
        let spec = match adoptions.stored_spec(queued.adoption_id()).await? {
            Some(spec) if !spec.is_first_run() => spec,
            _ if queued.is_first_run() => queued,
            _ => return Ok(json!({ "skipped": "the adoption is gone" })),
        };
        adoptions.run_and_record(&run.context(), &warehouse, spec).await
    }
}
