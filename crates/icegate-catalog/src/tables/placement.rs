//! Where tables and views go: default locations inside their namespace's directory, and the
//! rule that keeps a principal's tables and views there.

use crate::access::{Privilege, Target};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ident::NamespaceIdent;
use crate::service::Catalog;
use crate::store::Warehouse;

use super::TableIdent;

/// The longest table or view name created at its default location: 255 bytes of a path
/// component, less the `-` and 32 hex digits that follow the name.
pub const MAX_DEFAULT_LOCATION_NAME_BYTES: usize = 255 - 33;

impl Catalog {
    pub(crate) fn default_location(warehouse: &Warehouse, table: &TableIdent) -> Result<String> {
        Self::default_location_of(warehouse, &table.namespace, &table.name, "table")
    }

    /// `<namespace dir>/<name>-<32 hex digits>`: one storage path component, which file systems
    /// cap at 255 bytes, so a name longer than [`MAX_DEFAULT_LOCATION_NAME_BYTES`] is refused
    /// here (400) rather than failing in storage. A table or view given a `location` may have a
    /// longer name.
    pub(crate) fn default_location_of(
        warehouse: &Warehouse,
        namespace: &NamespaceIdent,
        name: &str,
        what: &str,
    ) -> Result<String> {
        if name.len() > MAX_DEFAULT_LOCATION_NAME_BYTES {
            return Err(CatalogError::bad_request(format!(
                "{what} name is {} bytes long; at its default location (a directory `<name>-<32 hex digits>`, \
                 one path component of at most 255 bytes) the limit is {MAX_DEFAULT_LOCATION_NAME_BYTES} bytes: \
                 choose a shorter name or give a location",
                name.len()
            )));
        }
        Ok(format!(
            "{}/{}/{}-{}",
            warehouse.storage_root.as_str(),
            namespace.levels().join("/"),
            name,
            uuid::Uuid::new_v4().simple()
        ))
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
