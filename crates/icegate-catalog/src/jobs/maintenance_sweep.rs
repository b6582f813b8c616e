//! The maintenance sweep (every `lifecycle.sweep-interval`): tables under a policy they inherit
//! from their warehouse or a namespace get their work queued, as the after-commit check does
//! for commits: an expiry when snapshots are (or will be) due, and, under an orphan interval,
//! an orphan removal unless one is queued already (each run queues the next). A table's own
//! `history.expire.*` properties are the after-commit check's (and each expiry queues the next).
//! The documents read are the catalog's (database and memory), never object storage.

use std::sync::Arc;

use serde_json::{Value, json};

use super::expire_snapshots::{self, Document};
use super::{Job, Progress, TaskRun};
use crate::Result;
use crate::ids::{TabularId, WarehouseId};
use crate::service::Catalog;
use crate::tables::{SnapshotMode, TableIdent};

pub const KIND: &str = "maintenance-sweep";
/// Tables read per page.
const PAGE: i64 = 500;

pub struct MaintenanceSweep {
    catalog: Arc<Catalog>,
}

impl MaintenanceSweep {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self { catalog }
    }
}

#[async_trait::async_trait]
impl Job for MaintenanceSweep {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let Some(queue) = self.catalog.task_store().cloned() else { return Ok(json!({})) };
        let now = run.now_ms();
        let (mut tables, mut expiries, mut orphan_runs) = (0i64, 0i64, 0i64);
        let forgotten = queue.forget_quarantine_of_gone(10_000).await?;
        for warehouse in self.catalog.store().list_warehouses(None).await? {
            let mut after: Option<String> = None;
            loop {
                let page = queue.maintained_tables(warehouse.id.as_str(), None, after.as_deref(), PAGE).await?;
                after = page.last().map(|t| t.id.clone());
                for table in &page {
                    tables += 1;
                    let inherited = self.catalog.inherited_policy(&warehouse, &table.namespace).await?;
                    if let Some(interval) = inherited.orphan_interval {
                        let reason = "the orphan policy's interval: the table has no orphan removal queued";
                        let due =
                            table.created_at_ms.saturating_add(i64::try_from(interval.as_millis()).unwrap_or(i64::MAX));
                        let queued = crate::maintenance::queue_for(
                            queue.as_ref(),
                            &warehouse.id,
                            table,
                            super::orphans::KIND,
                            (due.max(now), reason, now),
                        )
                        .await?;
                        orphan_runs += i64::from(queued);
                    }
                    if !inherited.expires() {
                        continue;
                    }
                    let ident = TableIdent::new(table.namespace.clone(), &table.name)?;
                    let loaded = match self
                        .catalog
                        .tables()
                        .load(&run.context(), &warehouse.id, &ident, SnapshotMode::All)
                        .await
                    {
                        Ok(loaded) if loaded.id.as_ref().map(TabularId::as_str) == Some(table.id.as_str()) => loaded,
                        _ => continue,
                    };
                    let Ok(document) = Document::parse(&loaded.metadata_json) else { continue };
                    let Ok(Some(policy)) = crate::maintenance::expiry_policy(&document.properties, &inherited) else {
                        continue;
                    };
                    let Some(due) = expire_snapshots::first_due(&document, &policy, now) else { continue };
                    let id = TabularId::new(table.id.clone());
                    if self.catalog.expiry_already_queued(&id, due.max(now), now) {
                        continue;
                    }
                    let reason = ("the maintenance sweep found snapshots due under an inherited policy", now);
                    expire_snapshots::queue_expiry(
                        queue.as_ref(),
                        (&WarehouseId::new(table.warehouse_id.clone()), &id),
                        &ident,
                        due.max(now),
                        reason,
                    )
                    .await?;
                    expiries += 1;
                }
                run.save(Progress { done: tables, total: None, bytes: 0 }, None).await?;
                if (page.len() as i64) < PAGE {
                    break;
                }
            }
        }
        Ok(json!({
            "tables": tables,
            "expiries-queued": expiries,
            "orphan-removals-queued": orphan_runs,
            "quarantine-of-gone-tables-forgotten": forgotten,
        }))
    }
}
