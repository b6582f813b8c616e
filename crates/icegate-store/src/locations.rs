//! Which locations tables and views own: recorded with them, never overlapping another's, and
//! the warehouse lock that serialises the changes that allocate them; and a namespace's row id,
//! which both namespaces and tables resolve.

use icegate_catalog::{CatalogError, NamespaceId, NamespaceIdent};
use sqlx::{Any, AssertSqlSafe, Executor, Row};

use crate::{Backend, SqlStore, db_error};

/// The row id of a namespace, if it exists.
pub(crate) async fn id_of<'e, E>(
    executor: E,
    warehouse_id: &str,
    namespace: &NamespaceIdent,
) -> Result<Option<NamespaceId>, CatalogError>
where
    E: Executor<'e, Database = Any>,
{
    let row = sqlx::query("SELECT id FROM namespaces WHERE warehouse_id = $1 AND name = $2")
        .bind(warehouse_id)
        .bind(namespace.encoded())
        .fetch_optional(executor)
        .await
        .map_err(db_error)?;
    row.map(|r| r.try_get::<String, _>("id").map(NamespaceId::new)).transpose().map_err(db_error)
}

/// Serialises location-allocating changes within one warehouse, so two concurrent creates can
/// never both pass the overlap check. PostgreSQL: a row lock on the warehouse that does not block
/// the foreign-key checks of ordinary inserts (FOR NO KEY UPDATE vs. FOR KEY SHARE). SQLite: the
/// transaction already holds the database's write lock (BEGIN IMMEDIATE).
pub(crate) async fn lock_warehouse(
    store: &SqlStore,
    tx: &mut crate::WriteTx,
    warehouse_id: &str,
) -> Result<(), CatalogError> {
    if store.backend == Backend::Postgres {
        sqlx::query("SELECT id FROM warehouses WHERE id = $1 FOR NO KEY UPDATE")
            .bind(warehouse_id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| CatalogError::no_such_warehouse(warehouse_id))?;
    }
    Ok(())
}

/// Whose locations an overlap check leaves out: the table or view itself (a commit that moves
/// it), and the reservation made by the staged create of the same name (its commit).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Own<'a> {
    pub tabular_id: Option<&'a str>,
    /// (namespace id, name, principal) of the table being created or staged: that principal's
    /// own reservations for that table do not count against it (others' always do).
    pub reserved_as: Option<(&'a str, &'a str, &'a str)>,
    /// Only locations that equal or contain the one checked count, not those inside it (a
    /// namespace's directory may hold a table that was renamed out of it).
    pub holders_only: bool,
    /// The uuid of the table or view being placed, and who places it: a dropped (or
    /// unregistered) one's leases do not keep the same table, registered again by the principal
    /// that dropped it, out of its own locations. Anyone else waits for the lease to end: the
    /// metadata file says which table it is, not who may read it.
    pub uuid: Option<&'a str>,
    pub leased_by: Option<&'a str>,
    /// Source locations (read-only prefixes adoption reads from) do not count: registering a
    /// source checks tables' locations only. Everything else counts them: no table or view
    /// may equal, lie inside or contain a source location.
    pub ignore_sources: bool,
}

/// The `table-uuid` (or `view-uuid`) of a metadata document; empty when it has none.
pub(crate) fn uuid_of(document: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Ids {
        #[serde(rename = "table-uuid")]
        table: Option<String>,
        #[serde(rename = "view-uuid")]
        view: Option<String>,
    }
    serde_json::from_str::<Ids>(document).ok().and_then(|ids| ids.table.or(ids.view)).unwrap_or_default()
}

/// Fails when `location` equals, lies inside, or contains a location of another table or view
/// (a base location or one of the extra locations, `write.data.path`, ..., it writes to), a
/// location reserved by another staged create that has not expired, or a dropped table's or
/// view's location whose lease has not expired (credentials vended for it may still work).
pub(crate) async fn check_overlap(
    conn: &mut sqlx::AnyConnection,
    warehouse_id: &str,
    location: &str,
    own: Own<'_>,
    now: i64,
) -> Result<(), CatalogError> {
    // The location itself and every ancestor directory: a row there contains `location`.
    let mut candidates = vec![location.to_owned()];
    let mut current = location;
    while let Some((parent, _)) = current.rsplit_once('/') {
        if parent.ends_with('/') || parent.is_empty() {
            break; // reached "scheme://" or "file://"'s root slash
        }
        candidates.push(parent.to_owned());
        current = parent;
    }
    // Built at run time because the number of ancestors varies; every value is a bind parameter.
    // Descendants are the byte range ("<location>/", "<location>0"): '0' follows '/' in ASCII.
    let placeholders: Vec<String> = (0..candidates.len()).map(|i| format!("${}", i + 10)).collect();
    // One branch per index lookup: an OR of the two made the planner scan every row of the
    // warehouse, so creates slowed down linearly with the catalog's size.
    let exact = format!("location IN ({})", placeholders.join(", "));
    let below = "location > $3 || '/' AND location < $3 || '0'";
    let reserved = "warehouse_id = $1 AND expires_at > $4 AND NOT (namespace_id = $5 AND name = $6 AND principal = $7)";
    let mut branches = Vec::new();
    for within in std::iter::once(exact.as_str()).chain((!own.holders_only).then_some(below)) {
        branches.push(format!("SELECT id FROM tabulars WHERE warehouse_id = $1 AND id <> $2 AND {within}"));
        branches.push(format!(
            "SELECT tabular_id FROM tabular_locations WHERE warehouse_id = $1 AND tabular_id <> $2 AND {within}"
        ));
        branches.push(format!("SELECT name FROM location_reservations WHERE {reserved} AND {within}"));
        branches.push(format!(
            "SELECT location FROM location_leases \
             WHERE warehouse_id = $1 AND expires_at > $4 \
             AND NOT (tabular_uuid <> '' AND tabular_uuid = $8 AND principal = $9) \
             AND {within}"
        ));
    }
    if !own.ignore_sources {
        branches.push(format!("SELECT location FROM source_locations WHERE warehouse_id = $1 AND {exact}"));
        if !own.holders_only {
            branches.push(format!("SELECT location FROM source_locations WHERE warehouse_id = $1 AND {below}"));
        }
    }
    let sql = format!("{} LIMIT 1", branches.join(" UNION ALL "));
    // An empty namespace id matches no row: nothing is excluded without a reservation of one's own.
    let (reserved_namespace, reserved_name, reserved_by) = own.reserved_as.unwrap_or(("", "", ""));
    let mut query = sqlx::query(AssertSqlSafe(sql))
        .bind(warehouse_id)
        .bind(own.tabular_id.unwrap_or(""))
        .bind(location)
        .bind(now)
        .bind(reserved_namespace)
        .bind(reserved_name)
        .bind(reserved_by)
        .bind(own.uuid.unwrap_or(""))
        .bind(own.leased_by.unwrap_or(""));
    for candidate in &candidates {
        query = query.bind(candidate.as_str());
    }
    if query.fetch_optional(&mut *conn).await.map_err(db_error)?.is_some() {
        return Err(CatalogError::bad_request(format!(
            "location {location} overlaps the location of another table or view, or a source location"
        )));
    }
    Ok(())
}

/// Fails when `location`, of a table or view in `namespace`, equals, lies inside or contains the
/// directory of another namespace than its own or one of its ancestors (`<root>/<levels>`):
/// a namespace's directory is where its own tables go by default, and a table there would hold
/// (or block) their files. Namespaces below an existing one have existing parents, so a
/// location containing a namespace's directory also equals or lies inside the directory of
/// one of the namespaces tried here (the prefixes of its path).
pub(crate) async fn check_namespace_dirs(
    conn: &mut sqlx::AnyConnection,
    warehouse_id: &str,
    namespace: &NamespaceIdent,
    location: &str,
) -> Result<(), CatalogError> {
    let root = storage_root(conn, warehouse_id).await?;
    let Some(rest) = root.as_deref().and_then(|root| location.strip_prefix(root)).and_then(|r| r.strip_prefix('/'))
    else {
        return Ok(()); // outside the warehouse: refused elsewhere
    };
    let segments: Vec<&str> = rest.split('/').collect();
    for depth in 1..=segments.len().min(icegate_catalog::ident::MAX_NAMESPACE_DEPTH) {
        let levels = &segments[..depth];
        if namespace.levels().starts_with(&levels.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>()) {
            if depth == segments.len() {
                // The directory of its own namespace or an ancestor: it would hold every
                // namespace below and every default location there.
                return Err(CatalogError::bad_request(format!(
                    "location {location} is the directory of namespace {}",
                    NamespaceIdent::from_levels(levels.iter().map(|l| (*l).to_owned()))?
                )));
            }
            continue; // inside its own namespace's directory, or an ancestor's
        }
        let Ok(candidate) = NamespaceIdent::from_levels(levels.iter().map(|l| (*l).to_owned())) else {
            break; // no namespace can be named so, nor any below it
        };
        if crate::locations::id_of(&mut *conn, warehouse_id, &candidate).await?.is_some() {
            return Err(CatalogError::bad_request(format!(
                "location {location} overlaps the directory of namespace {candidate}"
            )));
        }
    }
    Ok(())
}

/// The storage root of a warehouse, by id.
pub(crate) async fn storage_root(
    conn: &mut sqlx::AnyConnection,
    warehouse_id: &str,
) -> Result<Option<String>, CatalogError> {
    sqlx::query("SELECT storage_root FROM warehouses WHERE id = $1")
        .bind(warehouse_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_error)?
        .map(|row| row.try_get("storage_root"))
        .transpose()
        .map_err(db_error)
}

/// Records locations a table owns besides its base location. Additive: a location a table
/// moved away from (an old base location, a former `write.data.path`) stays recorded, and so
/// overlap-protected, purged with the table and readable with its credentials, as long as the
/// table exists. Its current snapshot may still have files there, and no other table may be
/// handed credentials for them.
/// `recorded_at` is kept from the first time a location is recorded: orphan clean-up never takes
/// a file older than the time its table came to own the location.
pub(crate) async fn record_locations(
    tx: &mut crate::WriteTx,
    warehouse_id: &str,
    tabular_id: &str,
    locations: &[String],
    recorded_at: i64,
) -> Result<(), CatalogError> {
    for location in locations {
        sqlx::query(
            "INSERT INTO tabular_locations (tabular_id, warehouse_id, location, recorded_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tabular_id, location) DO NOTHING",
        )
        .bind(tabular_id)
        .bind(warehouse_id)
        .bind(location.as_str())
        .bind(recorded_at)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    }
    Ok(())
}

pub(crate) async fn recorded_locations_in(
    conn: &mut sqlx::AnyConnection,
    tabular_id: &str,
) -> Result<Vec<String>, CatalogError> {
    let rows = sqlx::query(
        "SELECT location FROM tabulars WHERE id = $1 UNION SELECT location FROM tabular_locations WHERE tabular_id = $1",
    )
    .bind(tabular_id)
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?;
    rows.iter().map(|r| r.try_get("location").map_err(db_error)).collect()
}
