//! What a principal holds and may see: the one definition of a principal's grants in force,
//! which every decision (`holdings`) and every listing filtered to what a principal may see
//! (warehouses, namespaces, tables and views) reads. A listing shows an object to a principal
//! that holds a grant in force on it or on anything inside it; the service lists unfiltered
//! only where the principal's holdings on the container already show everything in it.

use std::sync::LazyLock;

use super::guard::SERVER_GRANTS_NOT_BY_CLAIM;

/// `FROM` and `WHERE` over the grants (`g`) the principal (parameter `$principal`) holds at
/// time `$now`: through a membership (`m`), not expired, and on the server only through a
/// membership that may confer it.
pub(crate) fn grants_in_force(principal: u8, now: u8) -> String {
    format!(
        "FROM grants g JOIN role_members m ON m.role_id = g.role_id \
         WHERE m.principal_id = ${principal} AND (g.expires_at IS NULL OR g.expires_at > ${now}) \
         AND {SERVER_GRANTS_NOT_BY_CLAIM}"
    )
}

/// A condition on `warehouses`: the principal ($1, at time $2) holds a grant on the warehouse
/// or inside it.
pub(crate) static WAREHOUSE: LazyLock<String> =
    LazyLock::new(|| format!("EXISTS (SELECT 1 {} AND g.warehouse_id = warehouses.id)", grants_in_force(1, 2)));

/// A condition on a namespace `n`: the principal ($4, at time $5) holds a grant on it or inside
/// it (a namespace below it, a table or view in either); $6/$7 are the separator and the byte
/// after it, bounding the names strictly below `n`.
pub(crate) static NAMESPACE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "EXISTS (SELECT 1 {} AND g.warehouse_id = n.warehouse_id \
         AND ((g.securable_type = 'namespace' AND g.namespace_id IN (SELECT d.id FROM namespaces d \
                 WHERE d.warehouse_id = n.warehouse_id AND (d.id = n.id OR (d.name >= n.name || $6 AND d.name < n.name || $7)))) \
           OR (g.securable_type IN ('table', 'view') AND g.tabular_id IN (SELECT t.id FROM tabulars t \
                 JOIN namespaces d ON d.id = t.namespace_id \
                 WHERE d.warehouse_id = n.warehouse_id AND (d.id = n.id OR (d.name >= n.name || $6 AND d.name < n.name || $7))))))",
        grants_in_force(4, 5)
    )
});

/// A condition on a table or view `t`: the principal ($5, at time $6) holds a grant on it.
pub(crate) static TABULAR: LazyLock<String> =
    LazyLock::new(|| format!("EXISTS (SELECT 1 {} AND g.tabular_id = t.id)", grants_in_force(5, 6)));
