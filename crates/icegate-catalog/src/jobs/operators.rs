//! What operators see of the task queue and do with it: list tasks, read one, cancel one.
//!
//! Server admins see every task; admins of a warehouse see that warehouse's tasks (and must name
//! it). A task of no warehouse (the audit trail's checkpoints, expiry of idempotency keys) is
//! the server's.

use crate::actors::{Privilege, Target};
use crate::error::{CatalogError, Result};
use crate::jobs::{TaskFilter, TaskRecord, TaskState};
use crate::{ObjectKind, RequestContext};

crate::service::area!(
    /// The background task queue as operators see it.
    Tasks,
    tasks
);

/// The most tasks one page lists.
pub const MAX_TASKS_PAGE: i64 = 1000;

fn no_such_task(id: &str) -> CatalogError {
    CatalogError::NotFound { kind: ObjectKind::AccessControl, message: format!("Task does not exist: {id}") }
}

impl Tasks<'_> {
    /// Whether the caller may see and cancel tasks of `warehouse_id` (`None`: the server's).
    async fn may_operate(&self, ctx: &RequestContext, warehouse_id: Option<&str>) -> Result<bool> {
        if ctx.is_server_admin().await? {
            return Ok(true);
        }
        let Some(warehouse_id) = warehouse_id else { return Ok(false) };
        let target = Target::Warehouse { warehouse_id: crate::ids::WarehouseId::new(warehouse_id.to_owned()) };
        Ok(ctx.holds(&target, Privilege::Admin).await?.is_some())
    }

    /// Tasks, newest first, as `filter` narrows them; `warehouse` (by name) is required but for
    /// server admins. `before`: the id the previous page ended with.
    pub async fn list(
        &self,
        ctx: &RequestContext,
        mut filter: TaskFilter,
        warehouse: Option<&str>,
    ) -> Result<Vec<TaskRecord>> {
        let server_admin = ctx.is_server_admin().await?;
        match warehouse {
            Some(name) => {
                let missing = || CatalogError::no_such_warehouse(name);
                let warehouse_id = self.warehouse_id_of(name).await?.ok_or_else(missing)?;
                if !server_admin {
                    ctx.require(&Target::Warehouse { warehouse_id: warehouse_id.clone() }, Privilege::Admin, missing)
                        .await?;
                }
                filter.warehouse_id = Some(warehouse_id.as_str().to_owned());
            }
            None if server_admin => {}
            None => {
                return Err(CatalogError::Forbidden(
                    "listing every task requires admin on the server; name a warehouse you administer".into(),
                ));
            }
        }
        filter.limit = Some(filter.limit.unwrap_or(100).clamp(1, MAX_TASKS_PAGE));
        // A catalog served without a task queue (embedded in tests) has no tasks.
        match self.task_store() {
            Some(queue) => queue.list_tasks(&filter).await,
            None => Ok(Vec::new()),
        }
    }

    /// How many tasks there are of each kind in each state (for the metrics; none without a
    /// queue).
    pub async fn counts(&self) -> Result<Vec<(String, TaskState, i64)>> {
        match self.task_store() {
            Some(queue) => queue.task_counts().await,
            None => Ok(Vec::new()),
        }
    }

    /// One task (one the caller may not see is answered as missing).
    pub async fn get(&self, ctx: &RequestContext, id: &str) -> Result<TaskRecord> {
        let queue = self.task_store().ok_or_else(|| no_such_task(id))?;
        let task = queue.task(id).await?.ok_or_else(|| no_such_task(id))?;
        if self.may_operate(ctx, task.warehouse_id.as_deref()).await? { Ok(task) } else { Err(no_such_task(id)) }
    }

    /// Cancels a queued or running task (a running one stops at its next step; a task cut short
    /// leaves what it finished done, and nothing half done: its steps are idempotent). A
    /// recurring task is queued again at its next period.
    pub async fn cancel(&self, ctx: &RequestContext, id: &str) -> Result<TaskRecord> {
        let task = self.get(ctx, id).await?;
        if matches!(task.state, TaskState::Done | TaskState::Failed | TaskState::Cancelled) {
            return Err(CatalogError::Conflict(format!("task {id} has ended ({})", task.state.as_str())));
        }
        let queue = self.task_store().ok_or_else(|| no_such_task(id))?;
        if !queue.cancel(id, self.clock().now_ms()).await? {
            return Err(CatalogError::Conflict(format!("task {id} ended meanwhile")));
        }
        queue.task(id).await?.ok_or_else(|| no_such_task(id))
    }
}
