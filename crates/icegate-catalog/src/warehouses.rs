//! The warehouses: getConfig and the management API's warehouse operations.

use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::{StorageRoot, WarehouseName};
use crate::service::{Catalog, WarehouseView};
use crate::storage::UnsealedProfile;
use crate::store::Warehouse;

crate::service::area!(
    /// The warehouses' operations ([`Catalog::warehouses`]).
    Warehouses, warehouses
);

impl Warehouses<'_> {
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
            None => self.default_warehouse().cloned().ok_or_else(|| {
                CatalogError::bad_request(
                    "no warehouse given and no default warehouse configured: \
                     pass ?warehouse=NAME (the client's `warehouse` property)",
                )
            })?,
        };
        self.store().warehouse_by_name(&name).await?.ok_or_else(|| CatalogError::no_such_warehouse(&name))
    }

    /// Creates a warehouse; the profile's secrets are sealed with the catalog's key first.
    pub async fn create(
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
        let profile = profile.seal(self.cipher())?;
        self.authorize_profile(ctx, &profile).await?;
        self.check_segregation(&name, &profile).await?;
        if self.store().warehouse_by_name(&name).await?.is_some() {
            return Err(CatalogError::AlreadyExists(format!("Warehouse already exists: {name}")));
        }
        self.check_profile(&name, &root, &profile).await?;
        self.store().create_warehouse(&ctx.write(), &name, &root, &profile).await
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
        let profile = profile.seal(self.cipher())?;
        self.authorize_profile(ctx, &profile).await?;
        check_settings(&existing.settings, &profile)?;
        self.check_segregation(&existing.name, &profile).await?;
        self.check_profile(&existing.name, &existing.storage_root, &profile).await?;
        let updated = self.store().update_storage_profile(&ctx.write(), &existing.name, &profile).await?;
        self.forget_warehouse(&updated.name);
        Ok(updated)
    }

    /// Replaces a warehouse's settings. Server admins only: the settings decide what the audit
    /// trail records of the warehouse, which its own admins do not decide.
    pub async fn update_settings(
        &self,
        ctx: &RequestContext,
        name: &str,
        settings: crate::store::WarehouseSettings,
    ) -> Result<Warehouse> {
        let existing = self.warehouse_named(name).await?;
        self.require_warehouse(ctx, &existing, name, Privilege::Describe).await?;
        ctx.require(&Target::Server, Privilege::Admin, || CatalogError::no_such_warehouse(name)).await?;
        check_settings(&settings, &existing.storage_profile)?;
        let updated = self.store().update_warehouse_settings(&ctx.write(), &existing.name, &settings).await?;
        self.forget_warehouse(&updated.name);
        Ok(updated)
    }

    /// The warehouses the caller may see: all of them with `describe` on the server, else those
    /// it holds something on or in.
    pub async fn list(&self, ctx: &RequestContext) -> Result<Vec<WarehouseView>> {
        // All of them only for a privilege held on the server itself: holding something inside
        // one warehouse (`describe` on the server by inheritance) shows that warehouse alone.
        let visible_to = match ctx.holds(&Target::Server, Privilege::Describe).await? {
            Some(allowed) => allowed.visible_to().cloned(),
            None => ctx.caller().principal_id().cloned(),
        };
        let mut views = Vec::new();
        for warehouse in self.store().list_warehouses(visible_to.as_ref()).await? {
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

    pub async fn get(&self, ctx: &RequestContext, name: &str) -> Result<WarehouseView> {
        let warehouse = self.warehouse_named(name).await?;
        self.require_warehouse(ctx, &warehouse, name, Privilege::Describe).await?;
        self.view_of(ctx, warehouse).await
    }

    pub async fn delete(&self, ctx: &RequestContext, name: &str) -> Result<()> {
        let warehouse = self.warehouse_named(name).await?;
        self.require_warehouse(ctx, &warehouse, name, Privilege::Admin).await?;
        let name = warehouse.name;
        self.store().delete_warehouse(&ctx.write(), &name).await?;
        self.forget_warehouse(&name);
        Ok(())
    }
}

/// Settings that the warehouse's storage profile can honour: a cap on credentials' lifetime
/// within what STS allows, and none with `static` vending (the warehouse's own keys, which no
/// lifetime bounds: a cap there would be a promise nothing keeps).
fn check_settings(settings: &crate::store::WarehouseSettings, profile: &crate::storage::StorageProfile) -> Result<()> {
    crate::maintenance::check_settings(settings)?;
    let Some(cap) = settings.credentials_max_lifetime_seconds else { return Ok(()) };
    if !(900..=43_200).contains(&cap) {
        return Err(CatalogError::bad_request(format!(
            "credentials.max-lifetime-seconds must be 900-43200 (what STS allows), not {cap}"
        )));
    }
    if profile.s3().is_some_and(|s3| s3.vending == crate::storage::VendingMode::Static) {
        return Err(CatalogError::bad_request(
            "credentials.max-lifetime-seconds cannot bound `static` vending (the warehouse's own keys); \
             use vending `sts`, or remove the setting first",
        ));
    }
    Ok(())
}

impl Catalog {
    /// The warehouse named `name`, without authorization (the management API's own lookups).
    pub(crate) async fn warehouse_named(&self, name: &str) -> Result<Warehouse> {
        let name = WarehouseName::parse(name).map_err(|_| CatalogError::no_such_warehouse(name))?;
        self.store().warehouse_by_name(&name).await?.ok_or_else(|| CatalogError::no_such_warehouse(&name))
    }

    /// The warehouse's id, for naming it in a grant (absent and invisible alike: `None`).
    pub(crate) async fn warehouse_id_of(&self, name: &str) -> Result<Option<crate::ids::WarehouseId>> {
        match self.warehouse_named(name).await {
            Ok(warehouse) => Ok(Some(warehouse.id)),
            Err(CatalogError::NotFound { .. } | CatalogError::BadRequest(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }
}
