//! Table lifecycle run by the catalog: soft delete and undrop, and purges as tasks.
//!
//! A drop without a purge hides the table or view at once (its name is free at once) and keeps
//! it restorable for its hold period (`lifecycle.soft-delete.hold`: the server's default, a
//! warehouse's setting, or a namespace property, the nearest one winning); its files stay, as
//! Iceberg says. A drop with a purge hides it the same way and queues a `purge` task due after
//! the purge delay (`lifecycle.purge.delay`, default 0): until the purge starts it can be
//! undropped; the purge deletes exactly the locations the catalog recorded for it, in batches,
//! resumable after a crash. Held objects (legal holds) are neither dropped nor purged.

use std::time::Duration;

use serde_json::json;

use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::ids::TabularId;
use crate::jobs::NewTask;
use crate::service::Catalog;
use crate::store::{DeletedFilter, DeletedTabular, DropOptions, SoftDelete, Tabular, Warehouse};

/// The namespace property (and warehouse setting) holding how long a dropped table or view
/// stays restorable.
pub const HOLD_PROPERTY: &str = "lifecycle.soft-delete.hold";
/// The namespace property (and warehouse setting) holding how long a purge waits.
pub const PURGE_DELAY_PROPERTY: &str = "lifecycle.purge.delay";
/// The longest hold or purge delay accepted.
pub const MAX_PERIOD: Duration = Duration::from_secs(3650 * 86_400);
/// The task kind of purges.
pub const PURGE_KIND: &str = "purge";

/// The server's defaults (configuration `lifecycle.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LifecycleDefaults {
    pub soft_delete_hold: Duration,
    pub purge_delay: Duration,
}

impl Default for LifecycleDefaults {
    fn default() -> Self {
        Self { soft_delete_hold: Duration::from_secs(7 * 86_400), purge_delay: Duration::ZERO }
    }
}

/// Parses a hold or delay (`7d`, `12h`, `0s`), bounded by [`MAX_PERIOD`].
pub fn parse_period(key: &str, value: &str) -> Result<Duration> {
    let period = humantime_serde::re::humantime::parse_duration(value.trim()).map_err(|e| {
        CatalogError::bad_request(format!("{key} must be a duration such as 7d, 12h or 0s, not {value:?}: {e}"))
    })?;
    if period > MAX_PERIOD {
        return Err(CatalogError::bad_request(format!("{key} is at most 3650 days, not {value}")));
    }
    Ok(period)
}

/// Whether a namespace property is lifecycle policy (set by administrators of the namespace).
pub fn is_policy_key(key: &str) -> bool {
    key.starts_with("lifecycle.")
}

/// Checks the lifecycle properties among a namespace's (the rest are not the catalog's).
pub fn check_namespace_properties<'a>(properties: impl IntoIterator<Item = (&'a String, &'a String)>) -> Result<()> {
    for (key, value) in properties {
        match key.as_str() {
            HOLD_PROPERTY | PURGE_DELAY_PROPERTY => {
                parse_period(key, value)?;
            }
            other if crate::maintenance::is_policy_key(other) => {
                crate::maintenance::PolicyLevel::from_properties([(key, value)])?;
            }
            other if is_policy_key(other) => {
                return Err(CatalogError::bad_request(format!(
                    "unknown lifecycle property {other:?} ({HOLD_PROPERTY}, {PURGE_DELAY_PROPERTY}, \
                     lifecycle.expire.*, lifecycle.orphan.*: docs/lifecycle.md)"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

crate::service::area!(
    /// Dropped tables and views: listing them, undropping one.
    Lifecycle,
    lifecycle
);

/// What undrop restores, and as what.
#[derive(Debug, Clone)]
pub struct Undrop {
    /// The deleted entry's id (from the listing); or, with `namespace` and `name` alone, the
    /// newest restorable entry of that name.
    pub id: Option<String>,
    pub namespace: NamespaceIdent,
    pub name: String,
    pub new_namespace: Option<NamespaceIdent>,
    pub new_name: Option<String>,
}

impl Catalog {
    /// How long a table dropped in `namespace` of `warehouse` stays restorable, and how long its
    /// purge waits: the nearest namespace property up the tree, else the warehouse's setting,
    /// else the server's default.
    pub(crate) async fn lifecycle_periods(
        &self,
        warehouse: &Warehouse,
        namespace: &NamespaceIdent,
    ) -> Result<(Duration, Duration)> {
        let defaults = self.lifecycle_defaults();
        let mut hold = None;
        let mut delay = None;
        let mut current = Some(namespace.clone());
        while let Some(level) = current {
            if hold.is_some() && delay.is_some() {
                break;
            }
            if let Some(properties) = self.store().load_namespace(&warehouse.id, &level).await? {
                if hold.is_none()
                    && let Some(value) = properties.get(HOLD_PROPERTY)
                {
                    hold = Some(parse_period(HOLD_PROPERTY, value)?);
                }
                if delay.is_none()
                    && let Some(value) = properties.get(PURGE_DELAY_PROPERTY)
                {
                    delay = Some(parse_period(PURGE_DELAY_PROPERTY, value)?);
                }
            }
            current = level.parent();
        }
        let hold = hold.or(warehouse.settings.soft_delete_hold).unwrap_or(defaults.soft_delete_hold);
        let delay = delay.or(warehouse.settings.purge_delay).unwrap_or(defaults.purge_delay);
        Ok((hold, delay))
    }

    /// How a drop (with `purge` or without) of a table or view in `namespace` leaves it: kept
    /// restorable, or, with a hold of zero and no purge, gone for good. Without a task queue
    /// (an embedded catalog) a purge cannot be queued: it is gone for good and purged inline.
    pub(crate) async fn drop_options(
        &self,
        warehouse: &Warehouse,
        namespace: &NamespaceIdent,
        purge: bool,
        lease_until_ms: i64,
    ) -> Result<DropOptions> {
        if purge && self.task_store().is_none() {
            return Ok(DropOptions::final_drop(lease_until_ms));
        }
        let (hold, delay) = self.lifecycle_periods(warehouse, namespace).await?;
        let now = self.clock().now_ms();
        let keep = if purge {
            let due = now.saturating_add(ms(delay));
            Some(SoftDelete { restorable_until_ms: due, purge_due_ms: Some(due) })
        } else if hold.is_zero() {
            None
        } else {
            Some(SoftDelete { restorable_until_ms: now.saturating_add(ms(hold)), purge_due_ms: None })
        };
        Ok(DropOptions { lease_until_ms, keep })
    }

    /// Queues the purge of a kept entry, due at `due_ms` (see [`queue_purge`]).
    pub(crate) async fn queue_purge(
        &self,
        warehouse: &Warehouse,
        id: &TabularId,
        due_ms: i64,
        reason: &str,
    ) -> Result<()> {
        let Some(queue) = self.task_store() else { return Ok(()) };
        queue_purge(queue.as_ref(), &warehouse.id, id, due_ms, (reason, self.clock().now_ms())).await
    }
}

/// Queues the purge of deleted entry `id`, due at `due_ms` (once: queueing it again does nothing
/// while one is queued or running).
pub async fn queue_purge(
    queue: &dyn crate::jobs::TaskStore,
    warehouse_id: &crate::ids::WarehouseId,
    id: &TabularId,
    due_ms: i64,
    (reason, now_ms): (&str, i64),
) -> Result<()> {
    let task = NewTask {
        params: json!({ "deleted-id": id.as_str() }),
        // A purge is resumable: storage outages are waited out rather than failing it.
        max_attempts: 20,
        ..NewTask::for_tabular(PURGE_KIND, reason, (warehouse_id.as_str(), id.as_str()), due_ms)
    };
    queue.enqueue(&task, now_ms).await?;
    Ok(())
}

impl Catalog {
    /// The warehouse named `warehouse`, when `ctx` administers it (lifecycle and maintenance
    /// are its admins'); 404 for those who may not see it.
    pub(crate) async fn administered(&self, ctx: &RequestContext, warehouse: &str) -> Result<Warehouse> {
        let warehouse = self.warehouse_named(warehouse).await?;
        let missing = || CatalogError::no_such_warehouse(warehouse.name.as_str());
        ctx.require(&Target::Warehouse { warehouse_id: warehouse.id.clone() }, Privilege::Admin, missing).await?;
        Ok(warehouse)
    }
}

impl Lifecycle<'_> {
    /// The deleted tables and views of a warehouse (admins of it), newest first.
    pub async fn list_deleted(
        &self,
        ctx: &RequestContext,
        warehouse: &str,
        filter: DeletedFilter,
    ) -> Result<Vec<DeletedTabular>> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let filter = DeletedFilter { limit: Some(filter.limit.unwrap_or(100).clamp(1, 1000)), ..filter };
        self.store().list_deleted(&warehouse.id, &filter).await
    }

    /// Restores a deleted table or view (admins of its warehouse), as it was when dropped or
    /// under a new name, with its grants.
    pub async fn undrop(
        &self,
        ctx: &RequestContext,
        warehouse: &str,
        request: Undrop,
    ) -> Result<(DeletedTabular, Tabular)> {
        let warehouse = self.administered(ctx, warehouse).await?;
        let entry = match &request.id {
            Some(id) => self.store().deleted_tabular(&TabularId::new(id.clone())).await?,
            None => self.newest_named(&warehouse, &request.namespace, &request.name).await?,
        };
        let entry = entry
            .filter(|e| e.warehouse_id == warehouse.id && e.namespace == request.namespace && e.name == request.name)
            .ok_or_else(|| CatalogError::NotFound {
                kind: crate::ObjectKind::Table,
                message: format!(
                    "no deleted table or view {}.{} in warehouse {}",
                    request.namespace, request.name, warehouse.name
                ),
            })?;
        let namespace = request.new_namespace.clone().unwrap_or_else(|| entry.namespace.clone());
        let name = request.new_name.clone().unwrap_or_else(|| entry.name.clone());
        crate::tables::TableIdent::new(namespace.clone(), &name)?;
        let restored =
            self.store().undrop_tabular(&ctx.write(), &entry.id, (&namespace, &name), self.clock().now_ms()).await?;
        // Grants came back with it: decisions cached without them are stale.
        ctx.access_changed();
        // A purge queued for it is called off (a later drop with purge queues its own, due
        // then); one that runs anyway finds no entry, or one not yet due, and deletes nothing.
        if let Some(queue) = self.task_store() {
            let filter = crate::jobs::TaskFilter {
                kind: Some(PURGE_KIND.into()),
                state: Some(crate::jobs::TaskState::Queued),
                warehouse_id: Some(warehouse.id.as_str().to_owned()),
                ..Default::default()
            };
            for task in queue.list_tasks(&filter).await? {
                if task.tabular_id.as_deref() == Some(entry.id.as_str()) {
                    queue.cancel(&task.id, self.clock().now_ms()).await?;
                }
            }
        }
        Ok((entry, restored))
    }

    /// The newest restorable entry of a name (several tables of one name may have been dropped),
    /// else the newest of that name (undrop then says why it cannot).
    async fn newest_named(
        &self,
        warehouse: &Warehouse,
        namespace: &NamespaceIdent,
        name: &str,
    ) -> Result<Option<DeletedTabular>> {
        let now = self.clock().now_ms();
        let filter = DeletedFilter { named: Some((namespace.clone(), name.to_owned())), ..DeletedFilter::default() };
        let mut named = self.store().list_deleted(&warehouse.id, &filter).await?;
        let at = named.iter().position(|e| e.not_restorable(now).is_none()).unwrap_or(0);
        Ok((at < named.len()).then(|| named.swap_remove(at)))
    }
}
