//! The catalog service: what the HTTP handlers call. Each operation takes the request's
//! context, parses raw request values into domain types, resolves the warehouse behind a URL
//! prefix, decides whether the caller may (see [`crate::authorization`]) and asks the store,
//! one transaction per call.

use crate::cache::TtlCache;
use std::sync::Arc;

use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::files::FileIo;
use crate::ident::{NamespaceIdent, StorageRoot, WarehouseName};
use crate::metadata_cache::MetadataCache;
use crate::pagination::{encode_token, page_request};
use crate::storage::{
    AllowedEndpoint, CredentialVendor, SecretCipher, StorageProfile, UnsealedProfile, server_admin_reasons,
    validate_profile,
};
use crate::store::{CatalogStore, Properties, PropertiesChange, Warehouse};

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
    warehouses: Arc<TtlCache<String, Warehouse>>,
    /// Table locations by table id and metadata file: the recorded set only changes with a
    /// commit, which writes a new metadata file, so entries never go stale (the cache is only
    /// bounded). The id is part of the key because a metadata file is not one table's alone: a
    /// dropped table's file can be registered again as another table, which records other
    /// locations.
    locations: Arc<TtlCache<(String, String), crate::storage::TableLocations>>,
    /// Metadata documents by metadata file (see [`MetadataCache`]).
    metadata: Arc<MetadataCache>,
    /// Memory that commits in flight may hold (`catalog.commit_memory_bytes`).
    commit_budget: crate::commit::CommitBudget,

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
}

/// Whose share of the commit budget a request takes: its principal's (auth off: one for all).
fn budget_key(ctx: &RequestContext) -> &str {
    ctx.caller().principal_id().unwrap_or_default()
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
            commit_budget: crate::commit::CommitBudget::new(DEFAULT_COMMIT_MEMORY_BYTES),
            max_metadata_bytes: DEFAULT_MAX_METADATA_BYTES,
            schema_limits: crate::schema_cost::SchemaLimits::default(),
            max_updates: DEFAULT_MAX_UPDATES,
            allowed_endpoints: Arc::default(),
            public_url: None,
            namespace_separator: UNIT_SEPARATOR,
            clock: crate::clock::system(),
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
    async fn authorize_profile(&self, ctx: &RequestContext, profile: &StorageProfile) -> Result<()> {
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
        self.commit_budget = crate::commit::CommitBudget::new(bytes);
        self
    }

    /// Waits for room for `held` bytes in the commit budget, for the caller of `ctx` (see
    /// [`crate::commit::CommitBudget`]).
    pub(crate) async fn reserve_room(&self, ctx: &RequestContext, held: u64) -> Result<crate::commit::Reserved> {
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
    ) -> Result<crate::commit::Reserved> {
        self.commit_budget.reserve_in(turn, held).await
    }

    /// Room for `held` bytes in the commit budget if there is some now (see
    /// [`Self::reserve_room`]).
    pub(crate) fn try_reserve_room(&self, ctx: &RequestContext, held: u64) -> Option<crate::commit::Reserved> {
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

    pub fn vendor(&self) -> Option<&Arc<dyn CredentialVendor>> {
        self.vendor.as_ref()
    }

    /// Validates a profile for `root`: its fields, then (for object storage) a live probe.
    async fn check_profile(&self, name: &WarehouseName, root: &StorageRoot, profile: &StorageProfile) -> Result<()> {
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
            id: String::new(),
            name: name.clone(),
            storage_root: root.clone(),
            storage_profile: profile.clone(),
            profile_version: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
        };
        vendor.validate(&candidate).await
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

    /// getConfig: the warehouse a `/v1/config` request asks for (or the configured default),
    /// for a caller that may describe it.
    pub async fn config(&self, ctx: &RequestContext, requested: Option<&str>) -> Result<Warehouse> {
        let warehouse = self.config_warehouse(requested).await?;
        let asked = requested.filter(|w| !w.is_empty()).unwrap_or(warehouse.name.as_str()).to_owned();
        self.require_warehouse(ctx, &warehouse, &asked, Privilege::Describe).await?;
        Ok(warehouse)
    }

    async fn config_warehouse(&self, requested: Option<&str>) -> Result<Warehouse> {
        let name = match requested.filter(|w| !w.is_empty()) {
            Some(name) => WarehouseName::parse(name)?,
            None => self.default_warehouse.clone().ok_or_else(|| {
                CatalogError::bad_request(
                    "no warehouse given and no default warehouse configured: \
                     pass ?warehouse=NAME (the client's `warehouse` property)",
                )
            })?,
        };
        self.store.warehouse_by_name(&name).await?.ok_or_else(|| CatalogError::no_such_warehouse(&name))
    }

    /// The warehouse behind a `/v1/{prefix}` URL (no authorization: see [`crate::authorization`]).
    pub(crate) async fn warehouse_for_prefix(&self, prefix: &str) -> Result<Warehouse> {
        if let Some(warehouse) = self.warehouses.get(prefix, |_| true) {
            return Ok(warehouse);
        }
        let (generation, read_at) = (self.warehouses.generation(), std::time::Instant::now());
        let warehouse =
            self.store.warehouse_by_id(prefix).await?.ok_or_else(|| CatalogError::no_such_warehouse(prefix))?;
        self.warehouses.offer(generation, prefix.to_owned(), warehouse.clone(), read_at);
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

    /// Creates a warehouse; the profile's secrets are sealed with the catalog's key first.
    pub async fn create_warehouse(
        &self,
        ctx: &RequestContext,
        name: &str,
        storage_root: &str,
        profile: impl UnsealedProfile,
    ) -> Result<Warehouse> {
        ctx.require(&Target::Server, Privilege::Admin, || {
            CatalogError::Forbidden("creating a warehouse requires admin on the server".into())
        })
        .await?;
        let name = WarehouseName::parse(name)?;
        let root = StorageRoot::parse(storage_root)?;
        let profile = profile.seal(&self.cipher)?;
        self.authorize_profile(ctx, &profile).await?;
        if self.store.warehouse_by_name(&name).await?.is_some() {
            return Err(CatalogError::AlreadyExists(format!("Warehouse already exists: {name}")));
        }
        self.check_profile(&name, &root, &profile).await?;
        self.store.create_warehouse(&ctx.write(), &name, &root, &profile).await
    }

    /// Replaces a warehouse's storage profile (validated and probed like on create). Cached
    /// clients and credentials of the old profile are not used again: they are keyed by version.
    pub async fn update_storage_profile(
        &self,
        ctx: &RequestContext,
        name: &str,
        profile: impl UnsealedProfile,
    ) -> Result<Warehouse> {
        let existing = self.warehouse_named(name).await?;
        self.require_warehouse(ctx, &existing, name, Privilege::Admin).await?;
        let profile = profile.seal(&self.cipher)?;
        self.authorize_profile(ctx, &profile).await?;
        self.check_profile(&existing.name, &existing.storage_root, &profile).await?;
        let updated = self.store.update_storage_profile(&ctx.write(), &existing.name, &profile).await?;
        self.warehouses.retain(|_, w| w.name != updated.name);
        Ok(updated)
    }

    /// The warehouses the caller may see: all of them with `describe` on the server, else those
    /// it holds something on or in.
    pub async fn list_warehouses(&self, ctx: &RequestContext) -> Result<Vec<WarehouseView>> {
        // All of them only for a privilege held on the server itself: holding something inside
        // one warehouse (`describe` on the server by inheritance) shows that warehouse alone.
        let visible_to = match ctx.holds(&Target::Server, Privilege::Describe).await? {
            Some(allowed) => allowed.visible_to().map(str::to_owned),
            None => ctx.caller().principal_id().map(str::to_owned),
        };
        let mut views = Vec::new();
        for warehouse in self.store.list_warehouses(visible_to.as_deref()).await? {
            views.push(self.view_of(ctx, warehouse).await?);
        }
        Ok(views)
    }

    /// A warehouse as the caller may see it (its profile's details only for its admins).
    async fn view_of(&self, ctx: &RequestContext, warehouse: Warehouse) -> Result<WarehouseView> {
        let target = Target::Warehouse { warehouse_id: warehouse.id.clone() };
        let administered = ctx.holds(&target, Privilege::Admin).await?.is_some();
        Ok(WarehouseView { warehouse, administered })
    }

    /// The warehouse named `name`, without authorization (the management API's own lookups).
    pub(crate) async fn warehouse_named(&self, name: &str) -> Result<Warehouse> {
        let name = WarehouseName::parse(name).map_err(|_| CatalogError::no_such_warehouse(name))?;
        self.store.warehouse_by_name(&name).await?.ok_or_else(|| CatalogError::no_such_warehouse(&name))
    }

    /// The warehouse's id, for naming it in a grant (absent and invisible alike: `None`).
    pub(crate) async fn warehouse_id_of(&self, name: &str) -> Result<Option<String>> {
        match self.warehouse_named(name).await {
            Ok(warehouse) => Ok(Some(warehouse.id)),
            Err(CatalogError::NotFound { .. } | CatalogError::BadRequest(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    pub async fn get_warehouse(&self, ctx: &RequestContext, name: &str) -> Result<WarehouseView> {
        let warehouse = self.warehouse_named(name).await?;
        self.require_warehouse(ctx, &warehouse, name, Privilege::Describe).await?;
        self.view_of(ctx, warehouse).await
    }

    pub async fn delete_warehouse(&self, ctx: &RequestContext, name: &str) -> Result<()> {
        let warehouse = self.warehouse_named(name).await?;
        self.require_warehouse(ctx, &warehouse, name, Privilege::Admin).await?;
        let name = warehouse.name;
        self.store.delete_warehouse(&ctx.write(), &name).await?;
        self.warehouses.retain(|_, w| w.name != name);
        Ok(())
    }

    /// listNamespaces: for a caller that may describe the parent (or the warehouse), those of
    /// its children the caller may see.
    pub async fn list_namespaces(
        &self,
        ctx: &RequestContext,
        prefix: &str,
        parent: Option<&str>,
        page_token: Option<&str>,
        page_size: Option<i64>,
    ) -> Result<Listing<NamespaceIdent>> {
        // The spec treats an empty `parent` as absent, for older clients.
        let parent = parent.filter(|p| !p.is_empty()).map(NamespaceIdent::parse_encoded).transpose()?;
        let page = page_request(page_token, page_size)?;
        let (warehouse, allowed) = self.container_with(ctx, prefix, parent.as_ref(), Privilege::Describe).await?;
        let page = self.store.list_namespaces(&warehouse.id, parent.as_ref(), &page, allowed.visible_to()).await?;
        Ok(Listing { items: page.items, next_page_token: page.next_after.as_deref().map(encode_token) })
    }

    pub async fn create_namespace(
        &self,
        ctx: &RequestContext,
        prefix: &str,
        levels: Vec<String>,
        properties: Properties,
    ) -> Result<(NamespaceIdent, Properties)> {
        let namespace = NamespaceIdent::from_levels(levels)?;
        let separator = self.namespace_separator;
        if separator != UNIT_SEPARATOR && namespace.levels().iter().any(|level| level.contains(separator)) {
            return Err(CatalogError::bad_request(format!(
                "namespace levels cannot contain {separator:?}: this catalog joins levels with it in paths \
                 (catalog.namespace_separator)"
            )));
        }
        let parent = namespace.parent();
        let (warehouse, _) = self.container_with(ctx, prefix, parent.as_ref(), Privilege::Create).await?;
        self.store.create_namespace(&ctx.write(), &warehouse.id, &namespace, &properties).await?;
        Ok((namespace, properties))
    }

    pub async fn load_namespace(
        &self,
        ctx: &RequestContext,
        prefix: &str,
        namespace: &str,
    ) -> Result<(NamespaceIdent, Properties)> {
        let namespace = NamespaceIdent::parse_encoded(namespace)?;
        let (warehouse, _) = self.namespace_with(ctx, prefix, &namespace, Privilege::Describe).await?;
        let properties = self
            .store
            .load_namespace(&warehouse.id, &namespace)
            .await?
            .ok_or_else(|| CatalogError::no_such_namespace(&namespace))?;
        Ok((namespace, properties))
    }

    pub async fn namespace_exists(&self, ctx: &RequestContext, prefix: &str, namespace: &str) -> Result<()> {
        let namespace = NamespaceIdent::parse_encoded(namespace)?;
        let (warehouse, _) = self.namespace_with(ctx, prefix, &namespace, Privilege::Describe).await?;
        if self.store.namespace_exists(&warehouse.id, &namespace).await? {
            Ok(())
        } else {
            Err(CatalogError::no_such_namespace(&namespace))
        }
    }

    pub async fn drop_namespace(&self, ctx: &RequestContext, prefix: &str, namespace: &str) -> Result<()> {
        let namespace = NamespaceIdent::parse_encoded(namespace)?;
        let (warehouse, _) = self.namespace_with(ctx, prefix, &namespace, Privilege::Drop).await?;
        self.store.drop_namespace(&ctx.write(), &warehouse.id, &namespace).await?;
        // Grants follow objects: a namespace made anew under this name is another one.
        ctx.access_changed();
        Ok(())
    }

    pub async fn update_namespace_properties(
        &self,
        ctx: &RequestContext,
        prefix: &str,
        namespace: &str,
        updates: Properties,
        removals: Vec<String>,
    ) -> Result<PropertiesChange> {
        let namespace = NamespaceIdent::parse_encoded(namespace)?;
        let (warehouse, _) = self.namespace_with(ctx, prefix, &namespace, Privilege::Write).await?;
        let mut both: Vec<&str> = removals.iter().filter(|k| updates.contains_key(*k)).map(String::as_str).collect();
        if !both.is_empty() {
            both.sort_unstable();
            both.dedup();
            return Err(CatalogError::Unprocessable(format!(
                "keys present in both updates and removals: {}",
                both.join(", ")
            )));
        }
        let mut removals = removals;
        removals.sort_unstable();
        removals.dedup();
        self.store.update_namespace_properties(&ctx.write(), &warehouse.id, &namespace, &updates, &removals).await
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
