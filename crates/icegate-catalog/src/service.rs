//! The catalog: the core its services share (the store, object storage, caches, the commit
//! budget, limits and the clock), and the services the HTTP handlers call, one per area:
//! [`Catalog::warehouses`], [`Catalog::namespaces`], [`Catalog::tables`], [`Catalog::views`]
//! (and, built on the catalog, [`crate::access_admin::AccessAdmin`]). Each operation takes the
//! request's context and values parsed at the edge, resolves the warehouse behind a URL
//! prefix, decides whether the caller may (see [`crate::authorization`]) and asks the store,
//! one transaction per call. The core's own methods are what every area shares: none of them
//! reads or changes anything on a caller's behalf without the area's decision.

use crate::cache::TtlCache;
use std::sync::Arc;

use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::files::FileIo;
use crate::ident::{StorageRoot, WarehouseName};
use crate::ids::{TabularId, WarehouseId};
use crate::metadata_cache::MetadataCache;
use crate::storage::{
    AllowedEndpoint, CredentialVendor, SecretCipher, StorageProfile, server_admin_reasons, validate_profile,
};
use crate::store::{CatalogStore, Warehouse};

/// An area's service over the catalog's core: the type listing the area's operations, which
/// reaches the core's shared parts through `Deref`, and the core's accessor for it.
macro_rules! area {
    ($(#[$doc:meta])* $name:ident, $accessor:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'a> {
            pub(crate) catalog: &'a $crate::Catalog,
        }

        impl std::ops::Deref for $name<'_> {
            type Target = $crate::Catalog;

            fn deref(&self) -> &$crate::Catalog {
                self.catalog
            }
        }

        impl $crate::Catalog {
            #[doc = concat!("The ", stringify!($accessor), "' operations.")]
            pub fn $accessor(&self) -> $name<'_> {
                $name { catalog: self }
            }
        }
    };
}
pub(crate) use area;

/// A page of results plus the token for the next one (`None` on the last page).
#[derive(Debug, Clone)]
pub struct Listing<T> {
    pub items: Vec<T>,
    pub next_page_token: Option<String>,
}

/// A warehouse as a caller sees it: whether it administers it (and so sees its storage
/// profile's details).
#[derive(Debug, Clone)]
pub struct WarehouseView {
    pub warehouse: Warehouse,
    pub administered: bool,
}

/// How long a warehouse looked up by its prefix is reused. Every catalog request resolves its
/// prefix, so this saves a round trip per request; a warehouse deleted on another replica can
/// be seen here for at most this long (requests into it then fail at the store, as for a
/// missing warehouse).
const WAREHOUSE_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(30);
const MAX_CACHED_WAREHOUSES: usize = 10_000;
/// One entry per table recently loaded with credentials or signing (a few hundred bytes each).
const MAX_CACHED_LOCATIONS: usize = 100_000;

#[derive(Clone)]
pub struct Catalog {
    store: Arc<dyn CatalogStore>,
    files: Arc<dyn FileIo>,
    default_warehouse: Option<WarehouseName>,
    cipher: SecretCipher,
    vendor: Option<Arc<dyn CredentialVendor>>,
    /// Warehouses by `/v1` prefix, for [`WAREHOUSE_CACHE_TTL`] (see [`crate::cache`]).
    warehouses: Arc<TtlCache<WarehouseId, Warehouse>>,
    /// Table locations by table id and metadata file: the recorded set only changes with a
    /// commit, which writes a new metadata file, so entries never go stale (the cache is only
    /// bounded). The id is part of the key because a metadata file is not one table's alone: a
    /// dropped table's file can be registered again as another table, which records other
    /// locations.
    locations: Arc<TtlCache<(TabularId, String), crate::storage::TableLocations>>,
    /// Metadata documents by metadata file (see [`MetadataCache`]).
    metadata: Arc<MetadataCache>,
    /// Memory that commits in flight may hold (`catalog.commit_memory_bytes`).
    commit_budget: crate::commit_budget::CommitBudget,

    /// The largest metadata document read, registered or committed (`catalog.max_metadata_bytes`).
    max_metadata_bytes: u64,
    /// What a schema may cost before it is built (`catalog.schema_limits`).
    schema_limits: crate::schema_cost::SchemaLimits,
    /// Requirements and updates one table or view change may carry
    /// (`catalog.max_updates_per_commit`).
    max_updates: usize,
    /// Endpoints a warehouse admin may use in a storage profile (`storage.allowed_endpoints`).
    allowed_endpoints: Arc<Vec<AllowedEndpoint>>,
    /// `server.public_url`: the catalog's URL as clients reach it (refresh endpoints).
    public_url: Option<Arc<str>>,
    /// What joins a namespace's levels in request paths (`catalog.namespace_separator`).
    namespace_separator: char,
    /// The time the catalog's own decisions read (grace periods, expiries, key ages).
    clock: crate::clock::SharedClock,
    /// `governance.strict`: no `static` vending, no storage identity shared by two warehouses.
    strict: bool,
    /// `governance.hold.two_person`: lifting a legal hold needs a second admin.
    two_person_holds: bool,
    /// The background task queue, for operators to see and cancel tasks (`None`: not served).
    tasks: Option<Arc<dyn crate::jobs::TaskStore>>,
    lifecycle: crate::lifecycle::LifecycleDefaults,
    /// When this replica last queued each table's snapshot expiry (due time): a commit that
    /// finds one queued for no later than it would ask skips the queue's round trip.
    expiry_queued: Arc<std::sync::Mutex<std::collections::HashMap<crate::ids::TabularId, i64>>>,
    /// The maintenance policy namespaces set, merged up the tree, by warehouse and namespace:
    /// 30 s, cleared by every change of namespace properties through this replica.
    namespace_policies: Arc<TtlCache<(WarehouseId, crate::NamespaceIdent), crate::maintenance::PolicyLevel>>,
    orphan_defaults: crate::maintenance::OrphanDefaults,
    adoption_defaults: crate::adoption::AdoptionDefaults,
    /// What opens the catalogs migrations move tables from (`None`: none).
    sources: Option<Arc<dyn crate::migration::SourceConnector>>,
}

/// Whose share of the commit budget a request takes: its principal's (auth off: one for all).
fn budget_key(ctx: &RequestContext) -> &str {
    ctx.caller().principal_id().map_or("", |id| id.as_str())
}

/// The spec's namespace separator in paths (`%1F`), always accepted.
pub const UNIT_SEPARATOR: char = '\u{1f}';

/// The default of `catalog.max_updates_per_commit`: far more than any client sends in one
/// commit (an append is three), few enough that applying them stays well under a second.
pub const DEFAULT_MAX_UPDATES: usize = 10_000;

/// The default of `catalog.max_metadata_bytes`.
pub const DEFAULT_MAX_METADATA_BYTES: u64 = 64 * 1024 * 1024;

/// The default bound of the metadata document cache (`catalog.metadata_cache_bytes`): with the
/// commit budget, chosen so that a large catalog with many big tables committed to at once
/// stays within a small, flat resident size (docs/benchmarks.md, "Memory"). An entry may take
/// an eighth, so tables of a few thousand snapshots keep their parsed form.
pub const DEFAULT_METADATA_CACHE_BYTES: u64 = 48 * 1024 * 1024;

/// The default memory budget of commits in flight (`catalog.commit_memory_bytes`): room for
/// more big-table commits at once than a small server's cores stage, so a larger budget buys
/// no throughput (docs/benchmarks.md, "Big tables").
pub const DEFAULT_COMMIT_MEMORY_BYTES: u64 = 16 * 1024 * 1024;

impl Catalog {
    /// `default_warehouse` answers `/v1/config` requests that name no warehouse.
    pub fn new(store: Arc<dyn CatalogStore>, files: Arc<dyn FileIo>, default_warehouse: Option<WarehouseName>) -> Self {
        Self {
            store,
            files,
            default_warehouse,
            cipher: SecretCipher::unconfigured(),
            vendor: None,
            warehouses: Arc::new(TtlCache::new(MAX_CACHED_WAREHOUSES, Some(WAREHOUSE_CACHE_TTL))),
            locations: Arc::new(TtlCache::new(MAX_CACHED_LOCATIONS, None)),

            metadata: Arc::new(MetadataCache::new(DEFAULT_METADATA_CACHE_BYTES)),
            commit_budget: crate::commit_budget::CommitBudget::new(DEFAULT_COMMIT_MEMORY_BYTES),
            max_metadata_bytes: DEFAULT_MAX_METADATA_BYTES,
            schema_limits: crate::schema_cost::SchemaLimits::default(),
            max_updates: DEFAULT_MAX_UPDATES,
            allowed_endpoints: Arc::default(),
            public_url: None,
            namespace_separator: UNIT_SEPARATOR,
            clock: crate::clock::system(),
            strict: false,
            two_person_holds: false,
            lifecycle: crate::lifecycle::LifecycleDefaults::default(),
            expiry_queued: Arc::default(),
            namespace_policies: Arc::new(TtlCache::new(MAX_CACHED_WAREHOUSES, Some(WAREHOUSE_CACHE_TTL))),
            orphan_defaults: crate::maintenance::OrphanDefaults::default(),
            adoption_defaults: crate::adoption::AdoptionDefaults::default(),
            sources: None,
            tasks: None,
        }
    }

    /// The catalog on another clock (tests: grace periods and expiries without waiting).
    pub fn with_clock(mut self, clock: crate::clock::SharedClock) -> Self {
        self.clock = clock;
        self
    }

    pub fn clock(&self) -> &crate::clock::SharedClock {
        &self.clock
    }

    /// `governance.hold.two_person`: a legal hold is lifted by a second admin approving the
    /// first one's request.
    pub fn with_two_person_holds(mut self, two_person: bool) -> Self {
        self.two_person_holds = two_person;
        self
    }

    pub fn two_person_holds(&self) -> bool {
        self.two_person_holds
    }

    /// The task queue operators read through the management API.
    /// The server's lifecycle defaults (`lifecycle.*`).
    pub fn with_lifecycle(mut self, defaults: crate::lifecycle::LifecycleDefaults) -> Self {
        self.lifecycle = defaults;
        self
    }

    pub(crate) fn lifecycle_defaults(&self) -> crate::lifecycle::LifecycleDefaults {
        self.lifecycle
    }

    /// The server's defaults for orphan removal (`lifecycle.orphan.*`).
    pub fn with_orphan_defaults(mut self, defaults: crate::maintenance::OrphanDefaults) -> Self {
        self.orphan_defaults = defaults;
        self
    }

    pub fn orphan_defaults(&self) -> crate::maintenance::OrphanDefaults {
        self.orphan_defaults
    }

    /// The server's bounds on adoption (`adoption.*`).
    pub fn with_adoption_defaults(mut self, defaults: crate::adoption::AdoptionDefaults) -> Self {
        self.adoption_defaults = defaults;
        self
    }

    pub fn adoption_defaults(&self) -> crate::adoption::AdoptionDefaults {
        self.adoption_defaults
    }

    /// What opens the catalogs migrations move tables from.
    pub fn with_migration_sources(mut self, sources: Arc<dyn crate::migration::SourceConnector>) -> Self {
        self.sources = Some(sources);
        self
    }

    pub(crate) fn allowed_endpoints(&self) -> &[AllowedEndpoint] {
        &self.allowed_endpoints
    }

    pub(crate) fn source_connector(&self) -> Option<&Arc<dyn crate::migration::SourceConnector>> {
        self.sources.as_ref()
    }

    pub(crate) fn namespace_policies(
        &self,
    ) -> &TtlCache<(WarehouseId, crate::NamespaceIdent), crate::maintenance::PolicyLevel> {
        &self.namespace_policies
    }

    /// Whether this replica queued table `id`'s expiry for a time still to come and no later
    /// than `due_ms` (a task queued for then has not run yet: tasks never run early); if not,
    /// notes `due_ms` as queued and answers `false`. Bounded: forgotten wholesale at 100,000.
    pub(crate) fn expiry_already_queued(&self, id: &crate::ids::TabularId, due_ms: i64, now_ms: i64) -> bool {
        let Ok(mut queued) = self.expiry_queued.lock() else { return false };
        if queued.get(id).is_some_and(|&at| now_ms < at && at <= due_ms) {
            return true;
        }
        if queued.len() >= 100_000 {
            queued.clear();
        }
        queued.insert(id.clone(), due_ms);
        false
    }

    pub fn with_task_store(mut self, tasks: Arc<dyn crate::jobs::TaskStore>) -> Self {
        self.tasks = Some(tasks);
        self
    }

    pub(crate) fn task_store(&self) -> Option<&Arc<dyn crate::jobs::TaskStore>> {
        self.tasks.as_ref()
    }

    /// `governance.strict`: storage profiles with `static` vending, or with a role ARN or
    /// static key another warehouse uses, are refused.
    pub fn with_strict_governance(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Under `governance.strict`, why `profile` may not serve warehouse `name` (vending mode
    /// `static`, or an identity another warehouse has); `None` when it may.
    pub async fn segregation_refusal(&self, name: &WarehouseName, profile: &StorageProfile) -> Result<Option<String>> {
        if !self.strict {
            return Ok(None);
        }
        let warehouses = self.store.list_warehouses(None).await?;
        Ok(crate::storage::segregation_problem(name, profile, &warehouses))
    }

    /// The catalog's URL as clients reach it (`server.public_url`); without it, the Host a
    /// request came to.
    pub fn with_public_url(mut self, url: Option<String>) -> Self {
        self.public_url = url.map(Arc::from);
        self
    }

    pub fn public_url(&self) -> Option<&str> {
        self.public_url.as_deref()
    }

    /// Until when (ms since the epoch) credentials vended now for `warehouse` may work: its STS
    /// session duration from now; `without_credentials` seconds for warehouses that vend none.
    pub(crate) fn credentials_valid_until(&self, warehouse: &Warehouse, without_credentials: u64) -> i64 {
        let seconds =
            warehouse.storage_profile.s3().map_or(without_credentials, |s3| u64::from(s3.sts.session_duration_seconds));
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        (now.as_millis() + u128::from(seconds) * 1000) as i64
    }

    /// Endpoints that storage profiles may name without admin on the server.
    pub fn with_allowed_endpoints(mut self, endpoints: Vec<AllowedEndpoint>) -> Self {
        self.allowed_endpoints = Arc::new(endpoints);
        self
    }

    /// A profile that uses the server's own identity, vends unscoped keys or names an endpoint
    /// outside `storage.allowed_endpoints` needs admin on the server, whoever may administer
    /// the warehouse.
    /// Refuses what `governance.strict` forbids for warehouse `name`'s profile.
    pub(crate) async fn check_segregation(&self, name: &WarehouseName, profile: &StorageProfile) -> Result<()> {
        match self.segregation_refusal(name, profile).await? {
            Some(why) => {
                Err(CatalogError::bad_request(format!("governance.strict refuses this storage profile: {why}")))
            }
            None => Ok(()),
        }
    }

    pub(crate) async fn authorize_profile(&self, ctx: &RequestContext, profile: &StorageProfile) -> Result<()> {
        let reasons = server_admin_reasons(profile, &self.allowed_endpoints);
        if reasons.is_empty() || ctx.is_server_admin().await? {
            return Ok(());
        }
        Err(CatalogError::Forbidden(format!("this storage profile needs admin on the server: {}", reasons.join("; "))))
    }

    /// Bounds every metadata document the catalog reads, registers or commits (decompressed).
    pub fn with_max_metadata_bytes(mut self, bytes: u64) -> Self {
        self.max_metadata_bytes = bytes;
        self
    }

    pub fn max_metadata_bytes(&self) -> u64 {
        self.max_metadata_bytes
    }

    /// Bounds the requirements and the updates of one table's or view's change: applying an
    /// update looks at every update before it (the `iceberg` crate's builder), so a change's
    /// cost grows with the square of their number.
    pub fn with_max_updates(mut self, max: usize) -> Self {
        self.max_updates = max;
        self
    }

    pub(crate) fn check_update_count(&self, requirements: usize, updates: usize) -> Result<()> {
        if requirements > self.max_updates || updates > self.max_updates {
            return Err(CatalogError::bad_request(format!(
                "a change may carry at most {} requirements and {} updates \
                 (catalog.max_updates_per_commit); this one has {requirements} and {updates}",
                self.max_updates, self.max_updates
            )));
        }
        Ok(())
    }

    /// Bounds what any schema the catalog builds may cost (see [`crate::schema_cost`]).
    pub fn with_schema_limits(mut self, limits: crate::schema_cost::SchemaLimits) -> Self {
        self.schema_limits = limits;
        self
    }

    pub fn schema_limits(&self) -> &crate::schema_cost::SchemaLimits {
        &self.schema_limits
    }

    /// What parsing a metadata document takes (its schemas, and the parser's buffering of all
    /// of it), refused past the limits (`what` names the document in the message).
    pub(crate) fn document_cost(&self, what: &str, document: &str) -> Result<crate::schema_cost::SchemaCost> {
        crate::schema_cost::of_document(document, &self.schema_limits)
            .map_err(|refused| CatalogError::bad_request(format!("{what}: {refused}")))
    }

    /// [`Self::document_cost`], off the async workers for a large document (a walk takes about
    /// what a scan of its text does).
    pub(crate) async fn document_cost_of(
        &self,
        what: &str,
        document: Arc<str>,
    ) -> Result<crate::schema_cost::SchemaCost> {
        if document.len() < 256 * 1024 {
            return self.document_cost(what, &document);
        }
        let (catalog, what_owned) = (self.clone(), what.to_owned());
        tokio::task::spawn_blocking(move || catalog.document_cost(&what_owned, &document))
            .await
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("walking a metadata document: {e}")))?
    }

    /// Refuses a document over the limit before it is written or stored.
    pub(crate) fn check_size(&self, what: &str, bytes: usize) -> Result<()> {
        if bytes as u64 > self.max_metadata_bytes {
            return Err(crate::tables::too_large(what, self.max_metadata_bytes));
        }
        Ok(())
    }

    /// Bounds the metadata document cache to `bytes` (0: no cache; every load reads the
    /// document from the database).
    pub fn with_metadata_cache(mut self, bytes: u64) -> Self {
        self.metadata = Arc::new(MetadataCache::new(bytes));
        self
    }

    pub fn metadata_cache(&self) -> &MetadataCache {
        &self.metadata
    }

    /// Bounds the memory commits in flight may hold to about `bytes` (0: unbounded); commits
    /// past it wait for room.
    pub fn with_commit_memory(mut self, bytes: u64) -> Self {
        self.commit_budget = crate::commit_budget::CommitBudget::new(bytes);
        self
    }

    /// Waits for room for `held` bytes in the commit budget, for the caller of `ctx` (see
    /// [`crate::commit_budget::CommitBudget`]).
    pub(crate) async fn reserve_room(&self, ctx: &RequestContext, held: u64) -> Result<crate::commit_budget::Reserved> {
        self.commit_budget.reserve(budget_key(ctx), held).await
    }

    /// The caller's turn for a large share of the commit budget, to hold while reading what
    /// decides how much room to take (a registered file); then [`Self::reserve_room_in`].
    pub(crate) async fn room_turn(&self, ctx: &RequestContext) -> crate::budget::Lane {
        self.commit_budget.lane(budget_key(ctx)).await
    }

    /// Room for `held` bytes in the commit budget, in a turn already held.
    pub(crate) async fn reserve_room_in(
        &self,
        turn: crate::budget::Lane,
        held: u64,
    ) -> Result<crate::commit_budget::Reserved> {
        self.commit_budget.reserve_in(turn, held).await
    }

    /// Room for `held` bytes in the commit budget if there is some now (see
    /// [`Self::reserve_room`]).
    pub(crate) fn try_reserve_room(&self, ctx: &RequestContext, held: u64) -> Option<crate::commit_budget::Reserved> {
        self.commit_budget.try_reserve(budget_key(ctx), held)
    }

    /// Object storage beyond the local file system: the cipher for stored secrets and the
    /// credential vendor that validates profiles and serves clients.
    pub fn with_storage(mut self, cipher: SecretCipher, vendor: Arc<dyn CredentialVendor>) -> Self {
        self.cipher = cipher;
        self.vendor = Some(vendor);
        self
    }

    /// The locations a loaded table's credentials and signatures cover: those the catalog
    /// recorded for it (its base location, its extra locations, and those it moved away from,
    /// whose files its snapshots may still use), with the ones its metadata names. Looked up
    /// once per metadata file: the recorded set changes only with a commit, which makes a new one.
    pub async fn table_locations(&self, result: &crate::tables::TableResult) -> Result<crate::storage::TableLocations> {
        let (Some(file), Some(id)) = (&result.metadata_location, &result.id) else { return result.locations() };
        let key = (id.clone(), file.clone());
        if let Some(found) = self.locations.get(&key, |_| true) {
            return Ok(found);
        }
        let (generation, read_at) = (self.locations.generation(), std::time::Instant::now());
        let recorded = self.store.recorded_locations(id).await?;
        let locations = crate::storage::TableLocations::new(
            recorded.into_iter().chain(result.locations()?.as_slice().iter().cloned()),
        );
        self.locations.offer(generation, key, locations.clone(), read_at);
        Ok(locations)
    }

    /// Where an adopted table's files lie outside its own locations: its adoptions' sources, as
    /// the store records them (never what its metadata says: a writer could name any prefix
    /// there). Read only. Asked of the store only for tables made by adoption (their metadata
    /// carries the adoption's id); empty for the rest.
    pub async fn read_only_locations(
        &self,
        result: &crate::tables::TableResult,
    ) -> Result<crate::storage::TableLocations> {
        let (Some(id), Some(queue)) = (&result.id, self.task_store()) else {
            return Ok(crate::storage::TableLocations::new([]));
        };
        if !result.metadata_json.contains(crate::adoption::PROPERTY_ADOPTION) {
            return Ok(crate::storage::TableLocations::new([]));
        }
        Ok(crate::storage::TableLocations::new(queue.adoption_sources(id.as_str()).await?))
    }

    pub fn vendor(&self) -> Option<&Arc<dyn CredentialVendor>> {
        self.vendor.as_ref()
    }

    /// Validates a profile for `root`: its fields, then (for object storage) a live probe.
    pub(crate) async fn check_profile(
        &self,
        name: &WarehouseName,
        root: &StorageRoot,
        profile: &StorageProfile,
    ) -> Result<()> {
        validate_profile(root, profile)?;
        if matches!(profile, StorageProfile::File) {
            return match root.local_path() {
                Some(dir) => prepare_local_root(dir).await,
                None => Ok(()),
            };
        }
        let vendor = self
            .vendor
            .as_ref()
            .ok_or_else(|| CatalogError::Unsupported("this server was built without object storage support".into()))?;
        let candidate = Warehouse {
            id: WarehouseId::default(),
            name: name.clone(),
            storage_root: root.clone(),
            storage_profile: profile.clone(),
            profile_version: 0,
            settings: crate::store::WarehouseSettings::default(),
            created_at_ms: 0,
            updated_at_ms: 0,
        };
        vendor.validate(&candidate).await
    }

    pub(crate) fn cipher(&self) -> &SecretCipher {
        &self.cipher
    }

    /// The warehouse `/v1/config` answers when a request names none.
    pub(crate) fn default_warehouse(&self) -> Option<&WarehouseName> {
        self.default_warehouse.as_ref()
    }

    /// A warehouse changed or went: its prefix is looked up again.
    pub(crate) fn forget_warehouse(&self, name: &WarehouseName) {
        self.warehouses.retain(|_, w| w.name != *name);
    }

    /// The store, for the catalog's own services only: everything outside reaches it through
    /// a service method that decides first.
    pub(crate) fn store(&self) -> &Arc<dyn CatalogStore> {
        &self.store
    }

    pub(crate) fn files(&self) -> &Arc<dyn FileIo> {
        &self.files
    }

    /// Idempotency keys, for the HTTP layer's replay guard: a key belongs to the principal that
    /// sent it and is looked up under that principal, so no further decision applies.
    pub fn idempotency_keys(&self) -> &dyn crate::store::IdempotencyStore {
        self.store.as_ref()
    }

    /// Whether the metadata store answers (readiness).
    pub async fn ping(&self) -> Result<()> {
        self.store.ping().await
    }

    /// The metadata store's connection pool, for metrics.
    pub fn pool_stats(&self) -> crate::store::PoolStats {
        self.store.pool_stats()
    }

    /// The warehouse behind a `/v1/{prefix}` URL (no authorization: see [`crate::authorization`]).
    pub(crate) async fn warehouse_for_prefix(&self, prefix: &WarehouseId) -> Result<Warehouse> {
        if let Some(warehouse) = self.warehouses.get(prefix, |_| true) {
            return Ok(warehouse);
        }
        let (generation, read_at) = (self.warehouses.generation(), std::time::Instant::now());
        let warehouse =
            self.store.warehouse_by_id(prefix).await?.ok_or_else(|| CatalogError::no_such_warehouse(prefix))?;
        self.warehouses.offer(generation, prefix.clone(), warehouse.clone(), read_at);
        Ok(warehouse)
    }

    /// What joins a namespace's levels in request paths (`catalog.namespace_separator`).
    pub fn namespace_separator(&self) -> char {
        self.namespace_separator
    }

    /// Joins levels with `separator` in request paths instead of the unit separator (which is
    /// always accepted too); namespaces whose levels contain it are then refused.
    pub fn with_namespace_separator(mut self, separator: char) -> Self {
        self.namespace_separator = separator;
        self
    }

    /// A namespace as a request path or `parent` names it (percent-decoded), its levels joined
    /// by the unit separator as the services read it: split at the configured separator, unless
    /// the unit separator joins them (older clients). No level contains the configured
    /// separator (creating one is refused), so the split is never ambiguous.
    pub fn namespace_param<'a>(&self, value: &'a str) -> std::borrow::Cow<'a, str> {
        let separator = self.namespace_separator;
        if separator == UNIT_SEPARATOR || value.contains(UNIT_SEPARATOR) || !value.contains(separator) {
            return std::borrow::Cow::Borrowed(value);
        }
        std::borrow::Cow::Owned(value.replace(separator, &UNIT_SEPARATOR.to_string()))
    }
}

/// A `file://` warehouse's directory, made ready the way the default warehouse's is at start-up:
/// created if missing, then a probe file written and removed, so a root the server cannot write
/// is refused now (400, with the cause) rather than at the first table.
pub async fn prepare_local_root(dir: &str) -> Result<()> {
    let dir = std::path::PathBuf::from(dir);
    let probe = dir.join(format!(".icegate-probe-{}", uuid::Uuid::now_v7()));
    let outcome = tokio::task::spawn_blocking({
        let (dir, probe) = (dir.clone(), probe.clone());
        move || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(&probe, b"icegate")?;
            std::fs::remove_file(&probe)
        }
    })
    .await
    .map_err(|e| CatalogError::Internal(anyhow::anyhow!("probing {}: {e}", dir.display())))?;
    outcome.map_err(|e| {
        CatalogError::BadRequest(format!(
            "storage root file://{}: the server cannot create and write that directory ({e})",
            dir.display()
        ))
    })
}
