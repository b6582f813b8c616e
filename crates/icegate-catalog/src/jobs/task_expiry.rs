//! Removes tasks that ended (done, failed or cancelled) longer than [`RETENTION`] ago: each
//! recurring run is a task of its own, and the queue would otherwise grow without end. Queued and
//! running tasks are never touched; what a removed task did is in the audit trail and the logs.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Job, Progress, TaskRun, TaskStore};
use crate::Result;

pub const KIND: &str = "task-expiry";

/// How long an ended task stays listed.
pub const RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Tasks removed per statement.
const BATCH: i64 = 10_000;

pub struct TaskExpiry {
    tasks: Arc<dyn TaskStore>,
}

impl TaskExpiry {
    pub fn new(tasks: Arc<dyn TaskStore>) -> Self {
        Self { tasks }
    }
}

#[async_trait::async_trait]
impl Job for TaskExpiry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn run(&self, run: &TaskRun) -> Result<Value> {
        let before = run.now_ms() - i64::try_from(RETENTION.as_millis()).unwrap_or(i64::MAX);
        let mut removed = 0_i64;
        loop {
            let batch = i64::try_from(self.tasks.remove_ended_tasks(before, BATCH).await?).unwrap_or(i64::MAX);
            removed += batch;
            run.save(Progress { done: removed, total: None, bytes: 0 }, None).await?;
            if batch < BATCH {
                return Ok(json!({ "removed": removed, "ended-before-ms": before }));
            }
        }
    }
}
