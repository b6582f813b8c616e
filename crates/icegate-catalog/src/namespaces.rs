//! The namespaces: list, create, load, drop and update properties.

use crate::access::Privilege;
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::ids::WarehouseId;
use crate::pagination::{encode_token, page_request};
use crate::service::{Listing, UNIT_SEPARATOR};
use crate::store::{Properties, PropertiesChange};

crate::service::area!(
    /// The namespaces' operations ([`Catalog::namespaces`]).
    Namespaces, namespaces
);

impl Namespaces<'_> {
    /// listNamespaces: for a caller that may describe the parent (or the warehouse), those of
    /// its children the caller may see.
    pub async fn list(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        parent: Option<&NamespaceIdent>,
        page_token: Option<&str>,
        page_size: Option<i64>,
    ) -> Result<Listing<NamespaceIdent>> {
        let page = page_request(page_token, page_size)?;
        let (warehouse, allowed) = self.container_with(ctx, prefix, parent, Privilege::Describe).await?;
        let page = self.store().list_namespaces(&warehouse.id, parent, &page, allowed.visible_to()).await?;
        Ok(Listing { items: page.items, next_page_token: page.next_after.as_deref().map(encode_token) })
    }

    pub async fn create(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: NamespaceIdent,
        properties: Properties,
    ) -> Result<(NamespaceIdent, Properties)> {
        let separator = self.namespace_separator();
        if separator != UNIT_SEPARATOR && namespace.levels().iter().any(|level| level.contains(separator)) {
            return Err(CatalogError::bad_request(format!(
                "namespace levels cannot contain {separator:?}: this catalog joins levels with it in paths \
                 (catalog.namespace_separator)"
            )));
        }
        let parent = namespace.parent();
        let (warehouse, _) = self.container_with(ctx, prefix, parent.as_ref(), Privilege::Create).await?;
        // Lifecycle policy (how long drops stay restorable) is the administrators' to set.
        if properties.keys().any(|k| crate::lifecycle::is_policy_key(k)) {
            crate::lifecycle::check_namespace_properties(&properties)?;
            self.container_with(ctx, prefix, parent.as_ref(), Privilege::Admin).await?;
        }
        self.store().create_namespace(&ctx.write(), &warehouse.id, &namespace, &properties).await?;
        self.namespace_policies().clear();
        Ok((namespace, properties))
    }

    pub async fn load(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: &NamespaceIdent,
    ) -> Result<Properties> {
        let (warehouse, _) = self.namespace_with(ctx, prefix, namespace, Privilege::Describe).await?;
        self.store()
            .load_namespace(&warehouse.id, namespace)
            .await?
            .ok_or_else(|| CatalogError::no_such_namespace(namespace))
    }

    pub async fn exists(&self, ctx: &RequestContext, prefix: &WarehouseId, namespace: &NamespaceIdent) -> Result<()> {
        let (warehouse, _) = self.namespace_with(ctx, prefix, namespace, Privilege::Describe).await?;
        if self.store().namespace_exists(&warehouse.id, namespace).await? {
            Ok(())
        } else {
            Err(CatalogError::no_such_namespace(namespace))
        }
    }

    pub async fn drop(&self, ctx: &RequestContext, prefix: &WarehouseId, namespace: &NamespaceIdent) -> Result<()> {
        let (warehouse, _) = self.namespace_with(ctx, prefix, namespace, Privilege::Drop).await?;
        self.store().drop_namespace(&ctx.write(), &warehouse.id, namespace).await?;
        self.namespace_policies().clear();
        // Grants follow objects: a namespace made anew under this name is another one.
        ctx.access_changed();
        Ok(())
    }

    pub async fn update_properties(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: &NamespaceIdent,
        updates: Properties,
        removals: Vec<String>,
    ) -> Result<PropertiesChange> {
        let (warehouse, _) = self.namespace_with(ctx, prefix, namespace, Privilege::Write).await?;
        if updates.keys().chain(&removals).any(|k| crate::lifecycle::is_policy_key(k)) {
            crate::lifecycle::check_namespace_properties(&updates)?;
            self.namespace_with(ctx, prefix, namespace, Privilege::Admin).await?;
        }
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
        let change = self
            .store()
            .update_namespace_properties(&ctx.write(), &warehouse.id, namespace, &updates, &removals)
            .await?;
        // Maintenance policy inherited from namespaces is cached: this replica sees it at once.
        self.namespace_policies().clear();
        Ok(change)
    }
}
