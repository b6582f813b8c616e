//! renameTable and renameView, decided on the identifiers the rename parsed.

use super::TableIdent;
use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::service::Catalog;
use crate::store::TabularKind;

impl Catalog {
    /// renameTable and renameView: moves a table or view, possibly to another namespace.
    ///
    /// Needs `drop` on it and `create` in the target namespace. Into another namespace, it also
    /// needs `read` on it (a move is a copy of what the mover can read), and the mover must
    /// already hold on it every privilege the target namespace would confer on it there: a move
    /// never widens the mover's own access (`drop` plus `admin` on one's own namespace would
    /// otherwise be full control of any table one may drop).
    pub(crate) async fn rename_tabular(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        kind: TabularKind,
        from: TableIdent,
        to: TableIdent,
    ) -> Result<()> {
        let (warehouse, _) = self.warehouse_with(ctx, prefix, Privilege::Describe).await?;
        let source = Target::Tabular {
            warehouse_id: warehouse.id.clone(),
            namespace: from.namespace.clone(),
            name: from.name.clone(),
            kind,
        };
        let missing = || match kind {
            TabularKind::Table => CatalogError::no_such_table(&from),
            TabularKind::View => CatalogError::no_such_view(&from),
        };
        let mut decided = vec![(Privilege::Drop, ctx.require(&source, Privilege::Drop, missing).await?)];
        let target = Target::Namespace { warehouse_id: warehouse.id.clone(), namespace: to.namespace.clone() };
        let conferred =
            ctx.require(&target, Privilege::Create, || CatalogError::no_such_namespace(&to.namespace)).await?;
        if from.namespace != to.namespace {
            decided.push((Privilege::Read, ctx.require(&source, Privilege::Read, missing).await?));
        }
        // Decided about the table or view the source name means (by id: a name can change
        // meaning while a decision is cached), and only that one is moved.
        let source_name = (&from.namespace, from.name.as_str());
        let head = self.confirmed_head(ctx, &warehouse.id, source_name, kind, &mut decided).await?;
        if from.namespace != to.namespace {
            let held = &decided[0].1;
            if let (Some(held), Some(conferred)) = (held.holdings(), conferred.holdings()) {
                let mut widened: Vec<Privilege> = conferred
                    .direct
                    .iter()
                    .copied()
                    .filter(|p| !matches!(p, Privilege::Describe | Privilege::Create) && !held.has(*p))
                    .collect();
                widened.sort();
                if let Some(privilege) = widened.first() {
                    return Err(CatalogError::Forbidden(format!(
                        "moving {from} into {} would give you {privilege} on it, which you do not hold on it now",
                        to.namespace
                    )));
                }
            }
        }
        // Out from under a stricter lifecycle policy (a longer hold or purge delay: the undo
        // window its namespace's admins chose) takes admin on the namespace it leaves.
        if from.namespace != to.namespace {
            let (hold, delay) = self.lifecycle_periods(&warehouse, &from.namespace).await?;
            let (new_hold, new_delay) = self.lifecycle_periods(&warehouse, &to.namespace).await?;
            if new_hold < hold || new_delay < delay {
                let namespace =
                    Target::Namespace { warehouse_id: warehouse.id.clone(), namespace: from.namespace.clone() };
                if ctx.holds(&namespace, Privilege::Admin).await?.is_none() {
                    return Err(CatalogError::Forbidden(format!(
                        "{} keeps dropped tables longer than {} (lifecycle.soft-delete.hold, lifecycle.purge.delay): \
                         moving {from} there takes admin on {}",
                        from.namespace, to.namespace, from.namespace
                    )));
                }
            }
        }
        self.store()
            .rename_tabular(
                &ctx.write(),
                &warehouse.id,
                kind,
                (&from.namespace, &from.name),
                (&to.namespace, &to.name),
                Some(&head.id),
            )
            .await?;
        // Grants follow objects, and decisions are cached by name.
        ctx.access_changed();
        Ok(())
    }
}

impl super::Tables<'_> {
    /// renameTable (see [`Catalog::rename_tabular`]).
    pub async fn rename(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        from: TableIdent,
        to: TableIdent,
    ) -> Result<()> {
        self.rename_tabular(ctx, prefix, TabularKind::Table, from, to).await
    }
}

impl crate::views::Views<'_> {
    /// renameView (see [`Catalog::rename_tabular`]).
    pub async fn rename(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        from: TableIdent,
        to: TableIdent,
    ) -> Result<()> {
        self.rename_tabular(ctx, prefix, TabularKind::View, from, to).await
    }
}
