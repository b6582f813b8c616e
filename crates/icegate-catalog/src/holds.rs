//! Legal holds on warehouses, namespaces, tables and views: while one stands, what it covers is
//! not dropped, purged, moved out of its namespace or has files deleted by icegate (the store
//! checks in the transaction of each such change). Placing and lifting a hold needs `admin` on
//! what it is on; with `governance.hold.two_person`, lifting needs a second, different admin to
//! approve the first one's request. Every step is recorded.

use crate::RequestContext;
use crate::access::{SecurableRef, SecurableType};
use crate::access_admin::AccessAdmin;
use crate::actors::{Caller, Privilege};
use crate::error::{CatalogError, Result};

/// A hold as listed: what it is on (named as it is now), why, and who placed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRecord {
    pub id: String,
    pub securable: SecurableRef,
    pub reason: String,
    pub placed_by: String,
    pub placed_at_ms: i64,
    /// The admin who asked for it to be lifted (two-person lifting), waiting for another: its
    /// name, and its id (what is compared).
    pub lift_requested_by: Option<String>,
    pub lift_requested_by_id: Option<String>,
    pub lift_requested_at_ms: Option<i64>,
}

/// What a request to lift a hold did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lift {
    Lifted,
    /// Two-person lifting: asked for, waiting for a second admin.
    Requested,
}

/// How long a request to lift a hold waits for a second admin.
const LIFT_REQUEST_LIFETIME_MS: i64 = 24 * 3600 * 1000;

/// Reasons are bounded (they are kept and recorded).
const MAX_REASON: usize = 1000;

fn no_such_hold(id: &str) -> CatalogError {
    CatalogError::NotFound {
        kind: crate::ObjectKind::AccessControl,
        message: format!("Legal hold does not exist: {id}"),
    }
}

impl AccessAdmin {
    /// `admin` on what a hold is on.
    async fn authorize_hold(&self, ctx: &RequestContext, securable: &SecurableRef) -> Result<()> {
        let target = self.securable_target(securable).await?;
        ctx.require(&target, Privilege::Admin, || crate::access_admin::missing(securable)).await?;
        Ok(())
    }

    pub async fn place_hold(&self, ctx: &RequestContext, securable: &SecurableRef, reason: &str) -> Result<HoldRecord> {
        securable.validate()?;
        if securable.kind == SecurableType::Server {
            return Err(CatalogError::bad_request("a legal hold is on a warehouse, a namespace, a table or a view"));
        }
        let reason = reason.trim();
        if reason.is_empty() || reason.len() > MAX_REASON {
            return Err(CatalogError::bad_request(format!("a legal hold needs a reason of 1-{MAX_REASON} bytes")));
        }
        crate::reviews::check_text("reason", reason)?;
        self.authorize_hold(ctx, securable).await?;
        self.access.place_hold(&ctx.write().unkeyed(), securable, reason, &ctx.caller().describe()).await
    }

    /// The holds in `warehouse` (every hold: server admins only) the caller may see.
    pub async fn list_holds(&self, ctx: &RequestContext, warehouse: Option<&str>) -> Result<Vec<HoldRecord>> {
        if warehouse.is_none() && !ctx.is_server_admin().await? {
            return Err(CatalogError::Forbidden(
                "listing every legal hold requires admin on the server; name a warehouse".into(),
            ));
        }
        if let Some(name) = warehouse {
            let missing = || CatalogError::no_such_warehouse(name);
            let warehouse_id = self.catalog.warehouse_id_of(name).await?.ok_or_else(missing)?;
            ctx.require(&crate::actors::Target::Warehouse { warehouse_id }, Privilege::Describe, missing).await?;
        }
        let mut visible = Vec::new();
        for hold in self.access.holds(warehouse).await? {
            let target = self.securable_target(&hold.securable).await?;
            if ctx.holds(&target, Privilege::Describe).await?.is_some() {
                visible.push(hold);
            }
        }
        Ok(visible)
    }

    /// A hold, for one who may lift it.
    pub async fn get_hold(&self, ctx: &RequestContext, id: &str) -> Result<HoldRecord> {
        let hold = self.access.hold(id).await?.ok_or_else(|| no_such_hold(id))?;
        self.authorize_hold(ctx, &hold.securable).await.map_err(|e| match e {
            CatalogError::NotFound { .. } => no_such_hold(id),
            other => other,
        })?;
        Ok(hold)
    }

    /// Lifts a hold, or with two-person lifting asks for it to be lifted (the first admin) or
    /// approves that (a second, different admin).
    pub async fn lift_hold(&self, ctx: &RequestContext, id: &str) -> Result<Lift> {
        let hold = self.get_hold(ctx, id).await?;
        let write = ctx.write().unkeyed();
        if !self.catalog.two_person_holds() {
            return if self.access.lift_hold(&write, id, None).await? {
                Ok(Lift::Lifted)
            } else {
                Err(no_such_hold(id))
            };
        }
        let Caller::Principal { id: me, name, .. } = ctx.caller() else {
            return Err(CatalogError::Conflict(
                "two-person lifting (governance.hold.two_person) takes two authenticated admins".into(),
            ));
        };
        // A request stands while it is fresh and its asker (by id: a principal made again under
        // its name is another) still holds admin on what is held; otherwise this admin's request
        // replaces it.
        let stale = match (&hold.lift_requested_by_id, hold.lift_requested_at_ms) {
            (Some(asker), Some(at)) if asker != me.as_str() => {
                let now = self.catalog.clock().now_ms();
                let target = self.securable_target(&hold.securable).await?;
                let still_admin = self
                    .access
                    .holdings(&crate::ids::PrincipalId::new(asker.clone()), &target, now)
                    .await?
                    .has(Privilege::Admin);
                (now - at > LIFT_REQUEST_LIFETIME_MS || !still_admin).then_some(asker.as_str())
            }
            _ => None,
        };
        match (&hold.lift_requested_by_id, stale) {
            (None, _) | (Some(_), Some(_)) => {
                if self.access.ask_hold_lift(&write, id, (me.as_str(), name), stale).await? {
                    Ok(Lift::Requested)
                } else {
                    Err(CatalogError::Conflict(format!("lifting legal hold {id} was asked for meanwhile; try again")))
                }
            }
            (Some(asker), None) if asker == me.as_str() => Err(CatalogError::Conflict(format!(
                "lifting legal hold {id} needs a second admin (governance.hold.two_person): you asked for it"
            ))),
            (Some(asker), None) => {
                if self.access.lift_hold(&write, id, Some(asker)).await? {
                    Ok(Lift::Lifted)
                } else {
                    Err(CatalogError::Conflict(format!("legal hold {id} changed meanwhile; try again")))
                }
            }
        }
    }
}
