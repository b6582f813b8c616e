//! The checks every service method starts with: resolve what the request names (the warehouse
//! behind a prefix, a namespace, a table or view) and require a privilege on it, before
//! anything about it is read or changed. What the caller cannot describe is answered exactly
//! as a missing object is.

use crate::access::{Privilege, Target};
use crate::context::{Allowed, RequestContext};
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::ids::WarehouseId;
use crate::service::Catalog;
use crate::store::{TabularHead, TabularKind, Warehouse};

/// A table's or view's target.
pub(crate) fn tabular_target(
    warehouse: &Warehouse,
    namespace: &NamespaceIdent,
    name: &str,
    kind: TabularKind,
) -> Target {
    Target::Tabular { warehouse_id: warehouse.id.clone(), namespace: namespace.clone(), name: name.to_owned(), kind }
}

pub(crate) fn namespace_target(warehouse: &Warehouse, namespace: &NamespaceIdent) -> Target {
    Target::Namespace { warehouse_id: warehouse.id.clone(), namespace: namespace.clone() }
}

/// What a missing table or view is answered with.
pub(crate) fn no_such_tabular(kind: TabularKind, namespace: &NamespaceIdent, name: &str) -> CatalogError {
    match kind {
        TabularKind::Table => CatalogError::no_such_table(format!("{namespace}.{name}")),
        TabularKind::View => CatalogError::no_such_view(format!("{namespace}.{name}")),
    }
}

impl Catalog {
    /// `privilege` on a warehouse the caller named as `asked` (its `/v1` prefix, or its name in
    /// the management API): a warehouse it may not see is answered as an unknown one.
    pub(crate) async fn require_warehouse(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        asked: &str,
        privilege: Privilege,
    ) -> Result<Allowed> {
        let target = Target::Warehouse { warehouse_id: warehouse.id.clone() };
        ctx.require(&target, privilege, || CatalogError::no_such_warehouse(asked)).await
    }

    /// The warehouse behind `prefix`, once the caller holds `privilege` on it.
    pub(crate) async fn warehouse_with(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        privilege: Privilege,
    ) -> Result<(Warehouse, Allowed)> {
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let allowed = self.require_warehouse(ctx, &warehouse, prefix, privilege).await?;
        Ok((warehouse, allowed))
    }

    /// The warehouse behind `prefix`, once the caller holds `privilege` on `namespace` in it.
    pub(crate) async fn namespace_with(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: &NamespaceIdent,
        privilege: Privilege,
    ) -> Result<(Warehouse, Allowed)> {
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let target = namespace_target(&warehouse, namespace);
        let allowed = ctx.require(&target, privilege, || CatalogError::no_such_namespace(namespace)).await?;
        Ok((warehouse, allowed))
    }

    /// `privilege` where something is created: on the namespace, or on the warehouse for a
    /// top-level namespace (`namespace` `None`).
    pub(crate) async fn container_with(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: Option<&NamespaceIdent>,
        privilege: Privilege,
    ) -> Result<(Warehouse, Allowed)> {
        match namespace {
            Some(namespace) => self.namespace_with(ctx, prefix, namespace, privilege).await,
            None => self.warehouse_with(ctx, prefix, privilege).await,
        }
    }

    /// The warehouse behind `prefix`, once the caller holds `privilege` on the table or view.
    pub(crate) async fn tabular_with(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        (namespace, name): (&NamespaceIdent, &str),
        kind: TabularKind,
        privilege: Privilege,
    ) -> Result<(Warehouse, Allowed)> {
        let warehouse = self.warehouse_for_prefix(prefix).await?;
        let target = tabular_target(&warehouse, namespace, name, kind);
        let allowed = ctx.require(&target, privilege, || no_such_tabular(kind, namespace, name)).await?;
        Ok((warehouse, allowed))
    }

    /// The table or view `(namespace, name)` names now, once every `decided` privilege (decided
    /// by name, perhaps from the cache) is confirmed to be about it: each is replaced by its
    /// confirmed form (see [`RequestContext::confirm`]). The operation then acts on the head's
    /// id alone; 503 when the name meant yet another one by the time it was decided again.
    pub(crate) async fn confirmed_head(
        &self,
        ctx: &RequestContext,
        warehouse_id: &WarehouseId,
        (namespace, name): (&NamespaceIdent, &str),
        kind: TabularKind,
        decided: &mut [(Privilege, Allowed)],
    ) -> Result<TabularHead> {
        let missing = || no_such_tabular(kind, namespace, name);
        let head = self.store().load_tabular_head(warehouse_id, namespace, name, kind).await?.ok_or_else(missing)?;
        let target = Target::Tabular {
            warehouse_id: warehouse_id.clone(),
            namespace: namespace.clone(),
            name: name.to_owned(),
            kind,
        };
        for (privilege, allowed) in decided.iter_mut() {
            let changed =
                || CatalogError::Unavailable(format!("{namespace}.{name} was renamed or replaced meanwhile; retry"));
            *allowed = ctx.confirm(&target, *privilege, allowed.clone(), &head.id, missing, changed).await?;
        }
        Ok(head)
    }
}
