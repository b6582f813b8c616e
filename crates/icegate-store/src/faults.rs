//! A store for tests that delegates every call to a real [`SqlStore`] and lets a test inject
//! what a real database cannot be made to do on demand (feature `testing`): fail or hang on any
//! call, or misbehave around a swap or a create (apply and then report an error, lose a race).
//! Tests implement [`Faults`] for what they need; everything else reaches the real store.

use async_trait::async_trait;
use icegate_catalog::idempotency::{Finalized, IdempotencyKey, IdempotencyRecord, IdempotencyScope, WriteContext};
use icegate_catalog::ids::{PrincipalId, TabularId, WarehouseId};
use icegate_catalog::storage::StorageProfile;
use icegate_catalog::store::prelude::*;
use icegate_catalog::store::{
    DeletedFilter, DeletedTabular, DropOptions, Dropped, MetadataSwap, NewTabular, Page, PageRequest, PoolStats,
    PropertiesChange, SwapOutcome, Tabular, TabularHead, TabularKind, Warehouse,
};
use icegate_catalog::{NamespaceIdent, Properties, Result, StorageRoot, WarehouseName};

use crate::SqlStore;

/// What a [`FaultStore`] does around the real store's calls. Every method has the default of
/// doing nothing (the call reaches the real store).
#[async_trait]
pub trait Faults: Send + Sync + 'static {
    /// Before every call but `backend` and `pool_stats` (`call`: the method's name): an error
    /// answers the call instead (waiting first is how a test makes a call hang).
    async fn before(&self, _call: &'static str) -> Result<()> {
        Ok(())
    }

    /// A create, given the real store to make it on.
    async fn create_tabular(
        &self,
        store: &SqlStore,
        write: &WriteContext,
        tabular: &NewTabular<'_>,
    ) -> Result<TabularId> {
        store.create_tabular(write, tabular).await
    }

    /// A swap, given the real store to make it on.
    async fn swap_metadata(
        &self,
        store: &SqlStore,
        write: &WriteContext,
        swaps: &[MetadataSwap],
    ) -> Result<SwapOutcome> {
        store.swap_metadata(write, swaps).await
    }
}

/// The real store `inner`, with `faults` injected.
pub struct FaultStore<F> {
    pub inner: SqlStore,
    pub faults: F,
}

impl<F: Faults> FaultStore<F> {
    pub fn new(inner: SqlStore, faults: F) -> Self {
        Self { inner, faults }
    }

    /// The injected faults (what a test armed, and what they saw).
    pub fn faults(&self) -> &F {
        &self.faults
    }
}

#[async_trait]
impl<F: Faults> CatalogStore for FaultStore<F> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn pool_stats(&self) -> PoolStats {
        self.inner.pool_stats()
    }
    async fn ping(&self) -> Result<()> {
        self.faults.before("ping").await?;
        self.inner.ping().await
    }
}

#[async_trait]
impl<F: Faults> icegate_catalog::audit::AuditStore for FaultStore<F> {
    async fn record(&self, request: icegate_catalog::audit::RequestRecord) -> Result<()> {
        self.faults.before("record").await?;
        self.inner.record(request).await
    }
    async fn audit_records(
        &self,
        filter: &icegate_catalog::audit::AuditFilter,
        limit: u32,
    ) -> Result<Vec<icegate_catalog::audit::AuditRecord>> {
        self.faults.before("audit_records").await?;
        self.inner.audit_records(filter, limit).await
    }
    async fn audit_ends(&self) -> Result<icegate_catalog::audit::ChainEnds> {
        self.faults.before("audit_ends").await?;
        self.inner.audit_ends().await
    }
    async fn audit_seq_before(&self, at_ms: i64) -> Result<Option<i64>> {
        self.faults.before("audit_seq_before").await?;
        self.inner.audit_seq_before(at_ms).await
    }
    async fn cut_audit(&self, write: &WriteContext, seq: i64) -> Result<()> {
        self.faults.before("cut_audit").await?;
        self.inner.cut_audit(write, seq).await
    }
}

#[async_trait]
impl<F: Faults> WarehouseStore for FaultStore<F> {
    async fn create_warehouse(
        &self,
        x: &WriteContext,
        n: &WarehouseName,
        r: &StorageRoot,
        p: &StorageProfile,
    ) -> Result<Warehouse> {
        self.faults.before("create_warehouse").await?;
        self.inner.create_warehouse(x, n, r, p).await
    }
    async fn update_storage_profile(
        &self,
        x: &WriteContext,
        n: &WarehouseName,
        p: &StorageProfile,
    ) -> Result<Warehouse> {
        self.faults.before("update_storage_profile").await?;
        self.inner.update_storage_profile(x, n, p).await
    }
    async fn update_warehouse_settings(
        &self,
        x: &WriteContext,
        n: &WarehouseName,
        s: &icegate_catalog::store::WarehouseSettings,
    ) -> Result<Warehouse> {
        self.faults.before("update_warehouse_settings").await?;
        self.inner.update_warehouse_settings(x, n, s).await
    }
    async fn ensure_warehouse(&self, x: &WriteContext, n: &WarehouseName, r: &StorageRoot) -> Result<Warehouse> {
        self.faults.before("ensure_warehouse").await?;
        self.inner.ensure_warehouse(x, n, r).await
    }
    async fn list_warehouses(&self, visible_to: Option<&PrincipalId>) -> Result<Vec<Warehouse>> {
        self.faults.before("list_warehouses").await?;
        self.inner.list_warehouses(visible_to).await
    }
    async fn warehouse_by_name(&self, n: &WarehouseName) -> Result<Option<Warehouse>> {
        self.faults.before("warehouse_by_name").await?;
        self.inner.warehouse_by_name(n).await
    }
    async fn warehouse_by_id(&self, id: &WarehouseId) -> Result<Option<Warehouse>> {
        self.faults.before("warehouse_by_id").await?;
        self.inner.warehouse_by_id(id).await
    }
    async fn delete_warehouse(&self, x: &WriteContext, n: &WarehouseName) -> Result<()> {
        self.faults.before("delete_warehouse").await?;
        self.inner.delete_warehouse(x, n).await
    }
}

#[async_trait]
impl<F: Faults> NamespaceStore for FaultStore<F> {
    async fn create_namespace(
        &self,
        x: &WriteContext,
        w: &WarehouseId,
        ns: &NamespaceIdent,
        p: &Properties,
    ) -> Result<()> {
        self.faults.before("create_namespace").await?;
        self.inner.create_namespace(x, w, ns, p).await
    }
    async fn list_namespaces(
        &self,
        w: &WarehouseId,
        parent: Option<&NamespaceIdent>,
        page: &PageRequest,
        visible_to: Option<&PrincipalId>,
    ) -> Result<Page<NamespaceIdent>> {
        self.faults.before("list_namespaces").await?;
        self.inner.list_namespaces(w, parent, page, visible_to).await
    }
    async fn load_namespace(&self, w: &WarehouseId, ns: &NamespaceIdent) -> Result<Option<Properties>> {
        self.faults.before("load_namespace").await?;
        self.inner.load_namespace(w, ns).await
    }
    async fn namespace_exists(&self, w: &WarehouseId, ns: &NamespaceIdent) -> Result<bool> {
        self.faults.before("namespace_exists").await?;
        self.inner.namespace_exists(w, ns).await
    }
    async fn drop_namespace(&self, x: &WriteContext, w: &WarehouseId, ns: &NamespaceIdent) -> Result<()> {
        self.faults.before("drop_namespace").await?;
        self.inner.drop_namespace(x, w, ns).await
    }
    async fn update_namespace_properties(
        &self,
        x: &WriteContext,
        w: &WarehouseId,
        ns: &NamespaceIdent,
        updates: &Properties,
        removals: &[String],
    ) -> Result<PropertiesChange> {
        self.faults.before("update_namespace_properties").await?;
        self.inner.update_namespace_properties(x, w, ns, updates, removals).await
    }
}

#[async_trait]
impl<F: Faults> IdempotencyStore for FaultStore<F> {
    async fn idempotency_record(&self, key: &IdempotencyKey) -> Result<Option<IdempotencyRecord>> {
        self.faults.before("idempotency_record").await?;
        self.inner.idempotency_record(key).await
    }
    async fn finalize_idempotency_key(
        &self,
        scope: &IdempotencyScope,
        status: u16,
        body: &str,
        keep_unreserved: bool,
    ) -> Result<Finalized> {
        self.faults.before("finalize_idempotency_key").await?;
        self.inner.finalize_idempotency_key(scope, status, body, keep_unreserved).await
    }
    async fn delete_idempotency_key(&self, key: &IdempotencyKey) -> Result<()> {
        self.faults.before("delete_idempotency_key").await?;
        self.inner.delete_idempotency_key(key).await
    }
    async fn delete_idempotency_keys_before(&self, before_ms: i64) -> Result<u64> {
        self.faults.before("delete_idempotency_keys_before").await?;
        self.inner.delete_idempotency_keys_before(before_ms).await
    }
}

#[async_trait]
impl<F: Faults> TabularStore for FaultStore<F> {
    async fn legal_hold(
        &self,
        w: &WarehouseId,
        ns: &NamespaceIdent,
        id: &TabularId,
    ) -> Result<Option<icegate_catalog::CatalogError>> {
        self.faults.before("legal_hold").await?;
        self.inner.legal_hold(w, ns, id).await
    }
    async fn create_tabular(&self, x: &WriteContext, t: &NewTabular<'_>) -> Result<TabularId> {
        self.faults.before("create_tabular").await?;
        self.faults.create_tabular(&self.inner, x, t).await
    }
    async fn load_tabular(
        &self,
        w: &WarehouseId,
        ns: &NamespaceIdent,
        n: &str,
        k: TabularKind,
    ) -> Result<Option<Tabular>> {
        self.faults.before("load_tabular").await?;
        self.inner.load_tabular(w, ns, n, k).await
    }
    async fn load_tabular_head(
        &self,
        w: &WarehouseId,
        ns: &NamespaceIdent,
        n: &str,
        k: TabularKind,
    ) -> Result<Option<TabularHead>> {
        self.faults.before("load_tabular_head").await?;
        self.inner.load_tabular_head(w, ns, n, k).await
    }
    async fn swap_metadata(&self, x: &WriteContext, swaps: &[MetadataSwap]) -> Result<SwapOutcome> {
        self.faults.before("swap_metadata").await?;
        self.faults.swap_metadata(&self.inner, x, swaps).await
    }
    async fn drop_tabular(
        &self,
        x: &WriteContext,
        w: &WarehouseId,
        t: (&NamespaceIdent, &str),
        k: TabularKind,
        options: DropOptions,
        expected_id: Option<&TabularId>,
    ) -> Result<Option<Dropped>> {
        self.faults.before("drop_tabular").await?;
        self.inner.drop_tabular(x, w, t, k, options, expected_id).await
    }
    async fn list_deleted(&self, w: &WarehouseId, filter: &DeletedFilter) -> Result<Vec<DeletedTabular>> {
        self.inner.list_deleted(w, filter).await
    }
    async fn deleted_tabular(&self, id: &TabularId) -> Result<Option<DeletedTabular>> {
        self.inner.deleted_tabular(id).await
    }
    async fn undrop_tabular(
        &self,
        x: &WriteContext,
        id: &TabularId,
        to: (&NamespaceIdent, &str),
        now_ms: i64,
    ) -> Result<Tabular> {
        self.faults.before("undrop_tabular").await?;
        self.inner.undrop_tabular(x, id, to, now_ms).await
    }
    async fn begin_purge(&self, id: &TabularId) -> Result<Option<DeletedTabular>> {
        self.faults.before("begin_purge").await?;
        self.inner.begin_purge(id).await
    }
    async fn finish_purge(&self, x: &WriteContext, id: &TabularId, report: serde_json::Value) -> Result<()> {
        self.faults.before("finish_purge").await?;
        self.inner.finish_purge(x, id, report).await
    }
    async fn expire_deleted(&self, now_ms: i64, limit: i64) -> Result<u64> {
        self.inner.expire_deleted(now_ms, limit).await
    }
    async fn purges_due(&self, now_ms: i64, limit: i64) -> Result<Vec<DeletedTabular>> {
        self.inner.purges_due(now_ms, limit).await
    }
    async fn expire_location_holds(&self, now_ms: i64) -> Result<u64> {
        self.inner.expire_location_holds(now_ms).await
    }
    async fn metadata_location_of(&self, id: &TabularId) -> Result<Option<String>> {
        self.faults.before("metadata_location_of").await?;
        self.inner.metadata_location_of(id).await
    }
    async fn recorded_locations(&self, id: &TabularId) -> Result<Vec<String>> {
        self.faults.before("recorded_locations").await?;
        self.inner.recorded_locations(id).await
    }
    async fn check_locations_free(
        &self,
        x: &WriteContext,
        w: &WarehouseId,
        t: (&NamespaceIdent, &str),
        locations: &[String],
        exclude_id: Option<&TabularId>,
    ) -> Result<()> {
        self.faults.before("check_locations_free").await?;
        self.inner.check_locations_free(x, w, t, locations, exclude_id).await
    }
    async fn reserve_locations(
        &self,
        x: &WriteContext,
        w: &WarehouseId,
        ns: &NamespaceIdent,
        n: &str,
        locations: &[String],
        until_ms: i64,
    ) -> Result<()> {
        self.faults.before("reserve_locations").await?;
        self.inner.reserve_locations(x, w, ns, n, locations, until_ms).await
    }
    async fn rename_tabular(
        &self,
        x: &WriteContext,
        w: &WarehouseId,
        k: TabularKind,
        from: (&NamespaceIdent, &str),
        to: (&NamespaceIdent, &str),
        expected_id: Option<&TabularId>,
    ) -> Result<()> {
        self.faults.before("rename_tabular").await?;
        self.inner.rename_tabular(x, w, k, from, to, expected_id).await
    }
    async fn list_tabulars(
        &self,
        w: &WarehouseId,
        ns: &NamespaceIdent,
        k: TabularKind,
        page: &PageRequest,
        visible_to: Option<&PrincipalId>,
    ) -> Result<Page<String>> {
        self.faults.before("list_tabulars").await?;
        self.inner.list_tabulars(w, ns, k, page, visible_to).await
    }
}
