//! The persistence contract, one trait per aggregate ([`WarehouseStore`], [`NamespaceStore`],
//! [`TabularStore`], [`IdempotencyStore`]; access control's is `access::AccessStore`), and
//! [`CatalogStore`], the store that implements them all. `icegate-store` implements them for
//! PostgreSQL and SQLite, each in its own module; both run one shared test suite. Every method
//! is one database transaction, so callers never see a half applied change. Mutations take a
//! [`WriteContext`]: what they record in the same transaction (the request's idempotency key).

use std::collections::BTreeMap;

use async_trait::async_trait;

pub use crate::actors::TabularKind;
use crate::error::Result;
use crate::idempotency::{Finalized, IdempotencyKey, IdempotencyRecord, IdempotencyScope, WriteContext};
use crate::ident::{NamespaceIdent, StorageRoot, WarehouseName};
use crate::ids::{PrincipalId, TabularId, WarehouseId};
use crate::storage::StorageProfile;

/// String properties, kept sorted so responses are stable.
pub type Properties = BTreeMap<String, String>;

/// A warehouse row. `id` is the opaque, URL-safe prefix clients put in `/v1/{prefix}/...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warehouse {
    pub id: WarehouseId,
    pub name: WarehouseName,
    pub storage_root: StorageRoot,
    /// How the storage is reached; secrets in it are sealed.
    pub storage_profile: StorageProfile,
    /// Grows with every profile change; caches of clients and credentials are keyed by it.
    pub profile_version: i64,
    /// The warehouse's settings (`PUT /management/v1/warehouses/{name}/settings`).
    pub settings: WarehouseSettings,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// Settings of one warehouse, stored as a JSON document of the keys set (unknown keys are
/// refused, so a misspelt key is an error, not a setting that silently does nothing).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarehouseSettings {
    /// Whether metadata reads (loads without credentials, listings, existence checks) are
    /// recorded in the audit trail. Changes, refusals, vends and signatures always are.
    #[serde(rename = "audit.record-reads", default = "yes")]
    pub audit_record_reads: bool,
    /// The longest lifetime of credentials vended for the warehouse's tables, in seconds
    /// (900-43200; `None`: the storage profile's session duration).
    #[serde(rename = "credentials.max-lifetime-seconds", default, skip_serializing_if = "Option::is_none")]
    pub credentials_max_lifetime_seconds: Option<u32>,
    /// How long a dropped table or view stays restorable (`7d`; `0s`: a drop is final);
    /// `None`: the server's `lifecycle.soft-delete.hold`. A namespace property of the same name
    /// overrides it for the namespace's tables.
    #[serde(
        rename = "lifecycle.soft-delete.hold",
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub soft_delete_hold: Option<std::time::Duration>,
    /// How long a purge waits after its drop (undrop works meanwhile); `None`: the server's
    /// `lifecycle.purge.delay`.
    #[serde(
        rename = "lifecycle.purge.delay",
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub purge_delay: Option<std::time::Duration>,
    /// Maintenance policy for the warehouse's tables (namespace properties of the same names
    /// override it; docs/lifecycle.md): snapshot expiry for tables that set none of their own,
    #[serde(
        rename = "lifecycle.expire.max-snapshot-age",
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub expire_max_snapshot_age: Option<std::time::Duration>,
    #[serde(rename = "lifecycle.expire.min-snapshots-to-keep", default, skip_serializing_if = "Option::is_none")]
    pub expire_min_snapshots_to_keep: Option<u32>,
    #[serde(
        rename = "lifecycle.expire.max-ref-age",
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub expire_max_ref_age: Option<std::time::Duration>,
    /// and orphan removal: how old an unreferenced file must be, how long it stays quarantined,
    /// how often the catalog looks.
    #[serde(
        rename = "lifecycle.orphan.older-than",
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub orphan_older_than: Option<std::time::Duration>,
    #[serde(
        rename = "lifecycle.orphan.quarantine",
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub orphan_quarantine: Option<std::time::Duration>,
    #[serde(
        rename = "lifecycle.orphan.interval",
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub orphan_interval: Option<std::time::Duration>,
    /// Metadata files that fall out of the metadata log are deleted after commits, for tables
    /// that do not set `write.metadata.delete-after-commit.enabled` themselves.
    #[serde(rename = "lifecycle.metadata.delete-after-commit", default, skip_serializing_if = "Option::is_none")]
    pub metadata_delete_after_commit: Option<bool>,
}

fn yes() -> bool {
    true
}

impl Default for WarehouseSettings {
    fn default() -> Self {
        Self {
            audit_record_reads: true,
            credentials_max_lifetime_seconds: None,
            soft_delete_hold: None,
            purge_delay: None,
            expire_max_snapshot_age: None,
            expire_min_snapshots_to_keep: None,
            expire_max_ref_age: None,
            orphan_older_than: None,
            orphan_quarantine: None,
            orphan_interval: None,
            metadata_delete_after_commit: None,
        }
    }
}

/// One page of a keyset-paginated listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Return only keys strictly after this one (the last key of the previous page).
    pub after: Option<String>,
    /// At most this many items; `None` for everything.
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// The key to continue after, present only when more items exist.
    pub next_after: Option<String>,
}

/// What an update of namespace properties did, key by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PropertiesChange {
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    pub missing: Vec<String>,
}

/// Connection pool figures for the metrics endpoint.
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolStats {
    pub size: u32,
    pub idle: u32,
    pub max: u32,
}

/// A stored table or view: where it lives and its current metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tabular {
    pub id: TabularId,
    pub kind: TabularKind,
    /// Base location, without a trailing slash.
    pub location: String,
    pub metadata_location: String,
    /// The current metadata JSON (what `metadata_location` holds).
    pub metadata: String,
    /// The same document as the store keeps it when it keeps it compressed (gzip members),
    /// which is also what a gzip answer sends.
    pub gzip: Option<std::sync::Arc<[u8]>>,
}

/// A table or view as it was when dropped, with the extra locations recorded for it (for a
/// purge: everything the table owned, and nothing else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub tabular: Tabular,
    pub extra_locations: Vec<String>,
    /// How it was kept as a deleted entry (restorable, or waiting for its purge), if it was.
    pub kept: Option<SoftDelete>,
}

/// How a drop leaves a table or view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropOptions {
    /// Until then (when credentials vended for it expire; 0: no lease) its locations stay out of
    /// reach of other tables, views, staged creates and namespaces.
    pub lease_until_ms: i64,
    /// Kept as a deleted entry (soft delete); `None`: gone for good (unregisterTable, or a hold
    /// of zero without a purge).
    pub keep: Option<SoftDelete>,
}

impl DropOptions {
    /// Gone for good, its locations leased until `lease_until_ms`.
    pub fn final_drop(lease_until_ms: i64) -> Self {
        Self { lease_until_ms, keep: None }
    }
}

/// A drop that keeps the table or view restorable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftDelete {
    /// Undrop works until then; with a purge, this is when the purge is due.
    pub restorable_until_ms: i64,
    /// A purge was asked for: its files are deleted from then on, by a `purge` task.
    pub purge_due_ms: Option<i64>,
}

/// Where a deleted table or view is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletedState {
    /// Restorable (until its hold ends, its purge starts, or it is superseded).
    Deleted,
    /// Its files are being deleted: it will not come back.
    Purging,
}

impl DeletedState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deleted => "deleted",
            Self::Purging => "purging",
        }
    }
}

/// A dropped table or view the catalog still keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedTabular {
    pub id: TabularId,
    pub warehouse_id: WarehouseId,
    pub namespace: NamespaceIdent,
    pub name: String,
    pub kind: TabularKind,
    pub location: String,
    pub extra_locations: Vec<String>,
    pub metadata_location: String,
    pub dropped_at_ms: i64,
    pub dropped_by: String,
    pub restorable_until_ms: i64,
    pub purge_due_ms: Option<i64>,
    pub state: DeletedState,
    /// Why it can no longer be undropped, though its hold lasts.
    pub superseded: Option<String>,
}

impl DeletedTabular {
    /// Every location recorded for it: what a purge deletes below, and nothing else.
    pub fn locations(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.location).chain(&self.extra_locations)
    }

    /// Why undrop cannot bring it back at `now_ms`; `None` when it can.
    pub fn not_restorable(&self, now_ms: i64) -> Option<String> {
        if let Some(why) = &self.superseded {
            return Some(why.clone());
        }
        if self.state == DeletedState::Purging {
            return Some("its purge has started".into());
        }
        if self.restorable_until_ms <= now_ms {
            return Some(match self.purge_due_ms {
                Some(_) => "its purge is due".into(),
                None => "its hold period has ended".into(),
            });
        }
        None
    }
}

/// Which deleted entries a listing shows.
#[derive(Debug, Clone, Default)]
pub struct DeletedFilter {
    /// Entries dropped before this one (by (dropped-at, id), newest first), for the next page.
    pub before: Option<(i64, String)>,
    pub limit: Option<i64>,
    /// Only the entries dropped as this namespace and name.
    pub named: Option<(NamespaceIdent, String)>,
}

/// Where a table's or view's current metadata is, without the document itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TabularHead {
    pub id: TabularId,
    pub location: String,
    pub metadata_location: String,
}

/// A table or view to insert.
#[derive(Debug, Clone)]
pub struct NewTabular<'a> {
    pub warehouse_id: &'a WarehouseId,
    pub namespace: &'a NamespaceIdent,
    pub name: &'a str,
    pub kind: TabularKind,
    pub location: &'a str,
    /// Locations outside `location` the table writes to (`write.data.path`, ...).
    pub extra_locations: &'a [String],
    pub metadata_location: &'a str,
    pub metadata: &'a str,
    /// The document's gzip form, to store in its place (see [`MetadataSwap::metadata_gzip`]).
    pub metadata_gzip: Option<&'a [u8]>,
}

/// One compare-and-swap of a table's metadata pointer: it applies only if the row still points
/// at `expected_metadata_location`.
#[derive(Debug, Clone)]
pub struct MetadataSwap {
    pub id: TabularId,
    pub warehouse_id: WarehouseId,
    /// The namespace and name the commit was addressed to: the swap applies only while the row
    /// still has them (a table renamed meanwhile is not another name's to change).
    pub namespace: NamespaceIdent,
    pub name: String,
    pub expected_metadata_location: String,
    pub metadata_location: String,
    /// The new document (shared: the commit also writes it to its file and answers with it).
    pub metadata: std::sync::Arc<str>,
    /// When set, the store keeps this gzip form of the document instead of its text: large
    /// documents are stored compressed once, by the commit that made them, and the store
    /// writes a few times less than their text (its own compression, such as PostgreSQL's
    /// TOAST, would compress them again on every write).
    pub metadata_gzip: Option<std::sync::Arc<[u8]>>,
    /// The (possibly new) base location and the locations outside it the table writes to;
    /// checked for overlaps and recorded when they changed (a location the table moves away
    /// from stays recorded as the table's while it exists).
    pub location: String,
    pub extra_locations: Vec<String>,
    pub locations_changed: bool,
}

/// How a set of swaps ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwapOutcome {
    /// Every swap applied, atomically.
    Applied,
    /// Nothing applied: the swap at this index found another metadata location (or no row).
    Conflict(usize),
}

/// The whole store: one implementation of every aggregate's trait (see the module doc), plus
/// what describes the store itself.
#[async_trait]
pub trait CatalogStore:
    WarehouseStore + NamespaceStore + TabularStore + IdempotencyStore + crate::audit::AuditStore + Send + Sync + 'static
{
    /// `"postgres"` or `"sqlite"`.
    fn backend(&self) -> &'static str;
    fn pool_stats(&self) -> PoolStats;
    /// One round trip to the database; fails with `Unavailable` when it cannot be reached.
    async fn ping(&self) -> Result<()>;
}

/// Warehouses: a storage root and its profile.
#[async_trait]
pub trait WarehouseStore: Send + Sync {
    async fn create_warehouse(
        &self,
        write: &WriteContext,
        name: &WarehouseName,
        root: &StorageRoot,
        profile: &StorageProfile,
    ) -> Result<Warehouse>;
    /// Replaces a warehouse's storage profile and bumps its version; `NotFound` without it.
    async fn update_storage_profile(
        &self,
        write: &WriteContext,
        name: &WarehouseName,
        profile: &StorageProfile,
    ) -> Result<Warehouse>;
    /// Replaces a warehouse's settings; `NotFound` without it.
    async fn update_warehouse_settings(
        &self,
        write: &WriteContext,
        name: &WarehouseName,
        settings: &WarehouseSettings,
    ) -> Result<Warehouse>;
    /// Creates the warehouse unless one of that name exists; returns the stored one either way.
    async fn ensure_warehouse(
        &self,
        write: &WriteContext,
        name: &WarehouseName,
        root: &StorageRoot,
    ) -> Result<Warehouse>;
    /// Every warehouse, or with `visible_to` only those the principal holds something in.
    async fn list_warehouses(&self, visible_to: Option<&PrincipalId>) -> Result<Vec<Warehouse>>;
    async fn warehouse_by_name(&self, name: &WarehouseName) -> Result<Option<Warehouse>>;
    async fn warehouse_by_id(&self, id: &WarehouseId) -> Result<Option<Warehouse>>;
    /// Deletes an empty warehouse: `NotFound`, or `WarehouseNotEmpty` while it holds namespaces.
    async fn delete_warehouse(&self, write: &WriteContext, name: &WarehouseName) -> Result<()>;
}

/// Namespaces and their properties.
#[async_trait]
pub trait NamespaceStore: Send + Sync {
    /// `AlreadyExists`, or `NotFound(Namespace)` when the parent does not exist.
    async fn create_namespace(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        properties: &Properties,
    ) -> Result<()>;
    /// Direct children of `parent` (top-level namespaces when `None`), ordered by name; with
    /// `visible_to`, only those the principal holds something on or inside (filtered in SQL, so
    /// pages stay full and tokens stay correct).
    /// `NotFound(Namespace)` when the parent does not exist.
    async fn list_namespaces(
        &self,
        warehouse_id: &WarehouseId,
        parent: Option<&NamespaceIdent>,
        page: &PageRequest,
        visible_to: Option<&PrincipalId>,
    ) -> Result<Page<NamespaceIdent>>;
    /// The namespace's properties, `None` when it does not exist.
    async fn load_namespace(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
    ) -> Result<Option<Properties>>;
    async fn namespace_exists(&self, warehouse_id: &WarehouseId, namespace: &NamespaceIdent) -> Result<bool>;
    /// `NotFound`, or `NamespaceNotEmpty` while it holds namespaces, tables or views.
    async fn drop_namespace(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
    ) -> Result<()>;
    /// Applies updates and removals atomically. Keys must not appear in both.
    async fn update_namespace_properties(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        updates: &Properties,
        removals: &[String],
    ) -> Result<PropertiesChange>;
}

/// Idempotency keys: recorded by mutations (see [`WriteContext`]), answered here.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    async fn idempotency_record(&self, key: &IdempotencyKey) -> Result<Option<IdempotencyRecord>>;
    /// Stores the final answer of a request that carries a key: fills in the row its mutation
    /// reserved (`scope.reservation`); if it reserved none, inserts one for a final 4xx
    /// (`keep_unreserved`) unless another request owns the key. See [`Finalized`].
    async fn finalize_idempotency_key(
        &self,
        scope: &IdempotencyScope,
        status: u16,
        body: &str,
        keep_unreserved: bool,
    ) -> Result<Finalized>;
    /// Forgets a key (an expired one, before it is used again).
    async fn delete_idempotency_key(&self, key: &IdempotencyKey) -> Result<()>;
    async fn delete_idempotency_keys_before(&self, before_ms: i64) -> Result<u64>;
}

/// Tables and views ("tabulars"): their rows, metadata pointers and locations.
#[async_trait]
pub trait TabularStore: Send + Sync {
    /// Inserts a table or view. `AlreadyExists` when a table or view of that name exists,
    /// `NotFound(Namespace)` without the namespace, `BadRequest` when the location overlaps
    /// another table's or view's.
    async fn create_tabular(&self, write: &WriteContext, tabular: &NewTabular<'_>) -> Result<TabularId>;
    async fn load_tabular(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        name: &str,
        kind: TabularKind,
    ) -> Result<Option<Tabular>>;
    /// The row's pointer without its metadata document (what a cached load reads).
    async fn load_tabular_head(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        name: &str,
        kind: TabularKind,
    ) -> Result<Option<TabularHead>> {
        let row = self.load_tabular(warehouse_id, namespace, name, kind).await?;
        Ok(row.map(|t| TabularHead { id: t.id, location: t.location, metadata_location: t.metadata_location }))
    }
    /// Applies every swap in one transaction, or none of them.
    async fn swap_metadata(&self, write: &WriteContext, swaps: &[MetadataSwap]) -> Result<SwapOutcome>;
    /// The legal hold that keeps table or view `id` (in `namespace`): the error a change that
    /// would drop or replace it, or delete its files, is refused with; `None` when none does.
    async fn legal_hold(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        id: &TabularId,
    ) -> Result<Option<crate::CatalogError>>;
    /// Deletes a table or view and returns what it was, `None` when it did not exist. Until
    /// `lease_until_ms` (when credentials vended for it expire; 0: no lease) its locations stay
    /// out of reach of other tables, views, staged creates and namespaces. With `expected_id`,
    /// only that table or view is dropped (`None` when the name means another one now).
    async fn drop_tabular(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        tabular: (&NamespaceIdent, &str),
        kind: TabularKind,
        options: DropOptions,
        expected_id: Option<&TabularId>,
    ) -> Result<Option<Dropped>>;
    /// The deleted tables and views of a warehouse the catalog still keeps, newest first.
    async fn list_deleted(&self, warehouse_id: &WarehouseId, filter: &DeletedFilter) -> Result<Vec<DeletedTabular>>;
    async fn deleted_tabular(&self, id: &TabularId) -> Result<Option<DeletedTabular>>;
    /// Puts a deleted table or view back, as `to` (in an existing namespace), with the same id,
    /// locations and metadata, and the grants on it whose roles still exist; answers it. Fails
    /// (changing nothing) when it is no longer restorable at `now_ms` (`Conflict`, saying why),
    /// the name is taken (`AlreadyExists`), the namespace is missing, or its locations overlap
    /// another table's or view's by now.
    async fn undrop_tabular(
        &self,
        write: &WriteContext,
        id: &TabularId,
        to: (&NamespaceIdent, &str),
        now_ms: i64,
    ) -> Result<Tabular>;
    /// Marks a deleted entry as being purged (from then on it cannot be undropped or registered
    /// again) and answers it; `None` when it is gone (undropped, expired) or superseded.
    async fn begin_purge(&self, id: &TabularId) -> Result<Option<DeletedTabular>>;
    /// Ends a purge: the entry goes, its locations stay leased only while credentials vended
    /// for it may work.
    async fn finish_purge(&self, write: &WriteContext, id: &TabularId, report: serde_json::Value) -> Result<()>;
    /// Deleted entries without a pending purge whose hold ended before `now_ms` go (at most
    /// `limit`); how many.
    async fn expire_deleted(&self, now_ms: i64, limit: i64) -> Result<u64>;
    /// Deleted entries waiting for a purge that is due (for the sweep to queue their purges).
    async fn purges_due(&self, now_ms: i64, limit: i64) -> Result<Vec<DeletedTabular>>;
    /// The metadata location a table or view's row points at now, by id, read from the database
    /// (never from memory), `None` when the row is gone: how a commit whose swap failed learns
    /// what became of it, whatever the table is called by then.
    async fn metadata_location_of(&self, tabular_id: &TabularId) -> Result<Option<String>>;
    /// Every location recorded for a table or view: its base location and every other location
    /// it owns (current extra locations and those it moved away from).
    async fn recorded_locations(&self, tabular_id: &TabularId) -> Result<Vec<String>>;
    /// Fails with `BadRequest` when one of `locations`, of the table or view `(namespace, name)`,
    /// equals, lies inside or contains a location of another table or view of the warehouse (not
    /// `exclude_id`) or of an unexpired staged create (other than `write`'s principal's own of
    /// exactly that location for that table), or the directory of another namespace than
    /// `namespace` and its ancestors, or equals the directory of one of those. Read-only: callers that then insert or swap get the
    /// same checks again, atomically with the write.
    async fn check_locations_free(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        tabular: (&NamespaceIdent, &str),
        locations: &[String],
        exclude_id: Option<&TabularId>,
    ) -> Result<()>;
    /// Removes what held locations and has expired by `now_ms`: staged creates' reservations,
    /// dropped tables' and views' leases (and the store's own bookkeeping of that kind); how many
    /// rows went. Nothing that still holds a location is touched (the expiry job).
    async fn expire_location_holds(&self, now_ms: i64) -> Result<u64>;
    /// Reserves the locations of a staged create of `namespace.name` by `write`'s principal until
    /// `until_ms` (when the credentials vended for them expire), once they pass the checks of
    /// [`check_locations_free`](Self::check_locations_free), atomically. Other tables, views,
    /// staged creates and namespaces cannot be placed there meanwhile; the same principal's create
    /// of that table at exactly those locations may, and ends their reservation. Nothing else
    /// ends one before it expires.
    async fn reserve_locations(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        name: &str,
        locations: &[String],
        until_ms: i64,
    ) -> Result<()>;
    /// Moves a table or view to another name, possibly in another namespace of the warehouse.
    /// `NotFound` (the source, or the target namespace), `AlreadyExists` (the target name).
    /// With `expected_id`, only that table or view is moved (`NotFound` when the source name
    /// means another one now).
    async fn rename_tabular(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        kind: TabularKind,
        from: (&NamespaceIdent, &str),
        to: (&NamespaceIdent, &str),
        expected_id: Option<&TabularId>,
    ) -> Result<()>;
    /// Names of a namespace's tables or views, in byte order. `NotFound(Namespace)`.
    async fn list_tabulars(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        kind: TabularKind,
        page: &PageRequest,
        visible_to: Option<&PrincipalId>,
    ) -> Result<Page<String>>;
}

/// The store's traits, for callers of their methods: `use icegate_catalog::store::prelude::*`.
pub mod prelude {
    pub use super::{CatalogStore, IdempotencyStore, NamespaceStore, TabularStore, WarehouseStore};
}
