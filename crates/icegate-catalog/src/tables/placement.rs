//! Where tables and views go: default locations inside their namespace's directory, and the
//! rule that keeps a principal's tables and views there.

use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::service::Catalog;
use crate::store::Warehouse;

use super::TableIdent;

impl Catalog {
    pub(crate) fn default_location(warehouse: &Warehouse, table: &TableIdent) -> String {
        format!(
            "{}/{}/{}-{}",
            warehouse.storage_root.as_str(),
            table.namespace.levels().join("/"),
            table.name,
            uuid::Uuid::new_v4().simple()
        )
    }

    /// The directory of a namespace's tables and views: where their default locations go.
    pub(crate) fn namespace_dir(warehouse: &Warehouse, namespace: &NamespaceIdent) -> String {
        format!("{}/{}", warehouse.storage_root.as_str(), namespace.levels().join("/"))
    }

    /// A table's or view's locations lie strictly inside its namespace's directory, unless the
    /// caller administers the warehouse (adopting or registering tables where they already are
    /// is an operator's decision). Otherwise a principal with `create` in one namespace could
    /// claim another namespace's directory, where later tables are created by default, and hold
    /// credentials for their files; or block that namespace's creates.
    pub(crate) async fn check_placement(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        namespace: &NamespaceIdent,
        locations: &[String],
    ) -> Result<()> {
        let dir = Self::namespace_dir(warehouse, namespace);
        let inside =
            |l: &String| l.strip_prefix(dir.as_str()).is_some_and(|rest| rest.starts_with('/') && rest.len() > 1);
        let Some(outside) = locations.iter().find(|l| !inside(l)) else { return Ok(()) };
        let target = Target::Warehouse { warehouse_id: warehouse.id.clone() };
        match ctx.holds(&target, Privilege::Admin).await? {
            Some(_) => Ok(()),
            None => Err(CatalogError::Forbidden(format!(
                "{outside} lies outside the directory of namespace {namespace} ({dir}); placing tables and views \
                 elsewhere in the warehouse needs admin on the warehouse"
            ))),
        }
    }
}
