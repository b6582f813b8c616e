//! Table and view rows: creation with location-overlap checks, compare-and-swap commits,
//! drops, renames and listings.

mod deleted;
pub(crate) mod swap;

use async_trait::async_trait;
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::ids::{PrincipalId, TabularId, WarehouseId};
use icegate_catalog::store::{
    DeletedFilter, DeletedTabular, DropOptions, Dropped, MetadataSwap, NewTabular, Page, PageRequest, SwapOutcome,
    Tabular, TabularHead, TabularKind, TabularStore,
};
use icegate_catalog::{CatalogError, NamespaceIdent};
use sqlx::any::AnyRow;
use sqlx::error::ErrorKind;
use sqlx::{AssertSqlSafe, FromRow, Row};

use crate::locations::id_of;
use crate::{Backend, SqlStore, db_error, fetch_count, heads, is_violation, keyset_page, swap_error, taken_or_failed};

use crate::locations::{
    Own, check_namespace_dirs, check_overlap, lock_warehouse, record_locations, recorded_locations_in, uuid_of,
};

fn kind_from(value: &str) -> Result<TabularKind, CatalogError> {
    match value {
        "table" => Ok(TabularKind::Table),
        "view" => Ok(TabularKind::View),
        other => Err(CatalogError::Internal(anyhow::anyhow!("unknown tabular kind {other:?}"))),
    }
}

/// The columns of a `tabulars` row that a load answers with.
#[derive(sqlx::FromRow)]
struct TabularRow {
    id: String,
    kind: String,
    location: String,
    metadata_location: String,
    metadata: String,
    metadata_gzip: Option<Vec<u8>>,
}

fn from_row(row: &AnyRow) -> Result<Tabular, CatalogError> {
    let row = TabularRow::from_row(row).map_err(db_error)?;
    tabular(row.id, &row.kind, row.location, row.metadata_location, (row.metadata, row.metadata_gzip))
}

/// A row's values as a [`Tabular`]: a document stored compressed is inflated (the text column
/// is empty then).
pub(crate) fn tabular(
    id: String,
    kind: &str,
    location: String,
    metadata_location: String,
    (metadata, gzip): (String, Option<Vec<u8>>),
) -> Result<Tabular, CatalogError> {
    let (metadata, gzip) = match gzip {
        Some(gzip) => (inflate(&gzip)?, Some(gzip.into())),
        None => (metadata, None),
    };
    Ok(Tabular { id: TabularId::new(id), kind: kind_from(kind)?, location, metadata_location, metadata, gzip })
}

/// A stored gzip document's text. The store wrote it (from a document the catalog bounded by
/// `catalog.max_metadata_bytes`); the bound here only keeps a damaged row from exhausting
/// memory.
fn inflate(gzip: &[u8]) -> Result<String, CatalogError> {
    use std::io::Read;
    const MAX_INFLATED: u64 = 1 << 30;
    let mut text = String::with_capacity(gzip.len() * 8);
    flate2::read::MultiGzDecoder::new(gzip)
        .take(MAX_INFLATED)
        .read_to_string(&mut text)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("a stored metadata document does not inflate: {e}")))?;
    Ok(text)
}

fn already_exists(namespace: &NamespaceIdent, name: &str) -> CatalogError {
    CatalogError::AlreadyExists(format!("A table or view already exists with that name: {namespace}.{name}"))
}

/// The `FROM ... WHERE` that finds a table or view by name; binds warehouse id, encoded
/// namespace, name and kind.
macro_rules! by_name {
    () => {
        "FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
         WHERE n.warehouse_id = $1 AND n.name = $2 AND t.name = $3 AND t.kind = $4"
    };
}

/// Runs `sql` (a SELECT ending in [`by_name!`]) for one table or view.
async fn fetch_by_name(
    store: &SqlStore,
    sql: &'static str,
    warehouse_id: &str,
    namespace: &NamespaceIdent,
    name: &str,
    kind: TabularKind,
) -> Result<Option<AnyRow>, CatalogError> {
    sqlx::query(sql)
        .bind(warehouse_id)
        .bind(namespace.encoded())
        .bind(name)
        .bind(kind.as_str())
        .fetch_optional(&store.pool)
        .await
        .map_err(db_error)
}

/// Runs `sql` (a SELECT ending in [`by_name!`]) for one table or view on SQLite's in-place
/// read connections; `None` when the store has none or the read must go through sqlx.
fn read_in_place<T>(
    store: &SqlStore,
    sql: &str,
    (warehouse_id, namespace, name, kind): (&str, &NamespaceIdent, &str, TabularKind),
    map: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Option<Option<T>> {
    store.reads.as_ref()?.query_row(sql, (warehouse_id, namespace.encoded(), name, kind.as_str()), map)
}

async fn load_head(
    store: &SqlStore,
    warehouse_id: &str,
    namespace: &NamespaceIdent,
    name: &str,
    kind: TabularKind,
) -> Result<Option<TabularHead>, CatalogError> {
    let sql = concat!("SELECT t.id, t.location, t.metadata_location ", by_name!());
    let key = (warehouse_id, namespace, name, kind);
    let read = read_in_place(store, sql, key, |row| {
        Ok(TabularHead {
            id: TabularId::new(row.get::<_, String>(0)?),
            location: row.get(1)?,
            metadata_location: row.get(2)?,
        })
    });
    if let Some(found) = read {
        return Ok(found);
    }
    let row = fetch_by_name(store, sql, warehouse_id, namespace, name, kind).await?;
    row.map(|row| {
        Ok(TabularHead {
            id: TabularId::new(row.try_get::<String, _>("id").map_err(db_error)?),
            location: row.try_get("location").map_err(db_error)?,
            metadata_location: row.try_get("metadata_location").map_err(db_error)?,
        })
    })
    .transpose()
}

async fn swap(store: &SqlStore, write: &WriteContext, swaps: &[MetadataSwap]) -> Result<SwapOutcome, CatalogError> {
    let now = store.now_ms();
    // The common case, one table and no new location, is committed with the others queued
    // meanwhile, in one transaction (`group_commit`).
    if let [only] = swaps
        && !only.locations_changed
        && write.idempotency.is_none()
        && let Some(group) = &store.group
    {
        return group.swap(store, only.clone(), crate::audit::entry_for_swap(write, now, only)).await;
    }
    let mut tx = store.begin_write().await?;
    // Locks in one order (see `lock_order`): the warehouses whose locations change first, then
    // the rows, by id.
    let mut warehouses: Vec<&str> =
        swaps.iter().filter(|swap| swap.locations_changed).map(|swap| swap.warehouse_id.as_str()).collect();
    warehouses.sort_unstable();
    warehouses.dedup();
    for warehouse_id in warehouses {
        lock_warehouse(store, &mut tx, warehouse_id).await?;
    }
    for index in lock_order(swaps.iter()) {
        let swap = &swaps[index];
        if swap.locations_changed {
            // Namespace directories count for the locations it gains only: a table renamed into
            // another namespace keeps the locations it had, in its old namespace's directory.
            let namespace = namespace_of(&mut tx, &swap.id).await?;
            let had = recorded_locations_in(&mut tx, &swap.id).await?;
            let uuid = uuid_of(&swap.metadata);
            for location in std::iter::once(&swap.location).chain(&swap.extra_locations) {
                let own = Own {
                    tabular_id: Some(&swap.id),
                    uuid: Some(&uuid),
                    leased_by: Some(&write.principal),
                    ..Own::default()
                };
                check_overlap(&mut tx, &swap.warehouse_id, location, own, now).await?;
                if let Some(namespace) = namespace.as_ref().filter(|_| !had.contains(location)) {
                    check_namespace_dirs(&mut tx, &swap.warehouse_id, namespace, location).await?;
                }
            }
        }
        // The base location it moves away from, if any: read under the row lock the swap takes.
        let previous: Option<String> = if swap.locations_changed {
            let row = sqlx::query(AssertSqlSafe(format!(
                "SELECT location FROM tabulars WHERE id = $1{}",
                if store.backend == Backend::Postgres { " FOR UPDATE" } else { "" }
            )))
            .bind(swap.id.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
            row.map(|r| r.try_get("location")).transpose().map_err(db_error)?
        } else {
            None
        };
        // The write's one record is appended by `commit_write`.
        if !swap::apply(&mut tx, store.backend, (swap, None), now).await.map_err(db_error)? {
            tx.rollback().await.map_err(db_error)?;
            return Ok(SwapOutcome::Conflict(index));
        }
        if swap.locations_changed {
            let mut owned = swap.extra_locations.clone();
            // A base location moved: the new one too, with when the table came to own it (it
            // may be a folder that already held files that are not the table's).
            if previous.as_ref().is_some_and(|old| *old != swap.location) {
                owned.push(swap.location.clone());
            }
            owned.extend(previous.filter(|old| *old != swap.location));
            record_locations(&mut tx, &swap.warehouse_id, &swap.id, &owned, now).await?;
            // A dropped table's metadata registered over this one: that entry is not undropped.
            let as_what = format!("the table or view with id {}", swap.id);
            let taken: Vec<&str> = std::iter::once(swap.location.as_str())
                .chain(swap.extra_locations.iter().map(String::as_str))
                .collect();
            deleted::supersede(&mut tx, &swap.warehouse_id, (&uuid_of(&swap.metadata), &taken), &as_what, now).await?;
        }
    }
    // Only the COMMIT can apply the swaps: a connection lost before it leaves nothing behind.
    store.commit_write_or(tx, write, swap_error).await?;
    Ok(SwapOutcome::Applied)
}

/// The order in which a write that changes several table or view rows takes their locks: by
/// id, ascending (ties in the order given). Every such write on PostgreSQL — a multi-table
/// commit, a group of single-table commits (`group_commit`) — takes its rows' locks in this one
/// order, and warehouse locks (`lock_warehouse`) before any row's, so two of them never wait for
/// each other in a cycle. (A drop, a rename or a single swap locks one row.) Answers indexes
/// into `swaps`.
pub(crate) fn lock_order<'a>(swaps: impl ExactSizeIterator<Item = &'a MetadataSwap>) -> Vec<usize> {
    let mut ids: Vec<(&str, usize)> = swaps.enumerate().map(|(index, swap)| (swap.id.as_str(), index)).collect();
    ids.sort();
    ids.into_iter().map(|(_, index)| index).collect()
}

/// The namespace of a table or view, by id (`None` when it is gone: the swap then conflicts).
async fn namespace_of(conn: &mut sqlx::AnyConnection, id: &str) -> Result<Option<NamespaceIdent>, CatalogError> {
    let row = sqlx::query("SELECT n.name FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id WHERE t.id = $1")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_error)?;
    let Some(row) = row else { return Ok(None) };
    let encoded: String = row.try_get("name").map_err(db_error)?;
    NamespaceIdent::parse_encoded(&encoded).map(Some)
}

async fn drop(
    store: &SqlStore,
    write: &WriteContext,
    (warehouse_id, namespace, name, kind): (&str, &NamespaceIdent, &str, TabularKind),
    options: DropOptions,
    expected_id: Option<&str>,
) -> Result<Option<Dropped>, CatalogError> {
    let lease_until_ms = options.lease_until_ms;
    let mut tx = store.begin_write().await?;
    // FOR UPDATE (PostgreSQL): a concurrent commit that moves the table's extra locations ends
    // before the locations below are read, so a purge sees the ones that were current.
    let lock = if store.backend == Backend::Postgres { " FOR UPDATE OF t" } else { "" };
    let found = sqlx::query(AssertSqlSafe(format!(
        "SELECT t.id FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
         WHERE n.warehouse_id = $1 AND n.name = $2 AND t.name = $3 AND t.kind = $4{lock}"
    )))
    .bind(warehouse_id)
    .bind(namespace.encoded())
    .bind(name)
    .bind(kind.as_str())
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?;
    let Some(found) = found else { return Ok(None) };
    let id: String = found.try_get("id").map_err(db_error)?;
    // The name means another table or view now than the one the caller decided about.
    if expected_id.is_some_and(|expected| expected != id) {
        return Ok(None);
    }
    if let Some(held) = crate::holds::covering(&mut *tx, warehouse_id, Some(namespace), Some(&id)).await? {
        return Err(held);
    }
    let extra: Vec<String> =
        // Besides its base location (recorded too when it moved there, for since when it is owned).
        sqlx::query(
            "SELECT location FROM tabular_locations WHERE tabular_id = $1 \
             AND location <> (SELECT location FROM tabulars WHERE id = $1) ORDER BY location",
        )
            .bind(&id)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?
            .iter()
            .map(|r| r.try_get("location").map_err(db_error))
            .collect::<Result<_, _>>()?;
    // Grants go with the row: a kept entry keeps them for undrop.
    let grants = match options.keep {
        Some(_) => deleted::grants_of(&mut tx, &id).await?,
        None => Vec::new(),
    };
    let row = sqlx::query(
        "DELETE FROM tabulars WHERE id = $1 \
             RETURNING id, kind, location, metadata_location, metadata, metadata_gzip, created_at",
    )
    .bind(&id)
    .fetch_one(&mut *tx)
    .await
    .map_err(db_error)?;
    let tabular = from_row(&row)?;
    if let Some(keep) = options.keep {
        // Kept restorable: its row's values, locations and grants (deleted with the row) go to
        // `deleted_tabulars`; its locations stay leased until it is restored, expires or is purged.
        let now = store.now_ms();
        let values = (&row, &tabular, extra.as_slice(), grants.as_slice());
        deleted::keep(&mut tx, write, (warehouse_id, namespace, name, kind), values, keep, (lease_until_ms, now))
            .await?;
    } else if lease_until_ms > store.now_ms() {
        // Its locations stay out of reach of new tables, views and namespaces while credentials
        // vended for them may still work.
        // Expired leases are removed by the expiry job (`jobs::location_expiry`).
        let uuid = uuid_of(&tabular.metadata);
        for location in std::iter::once(&tabular.location).chain(&extra) {
            sqlx::query(
                "INSERT INTO location_leases (warehouse_id, location, tabular_uuid, expires_at, principal) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(warehouse_id)
            .bind(location)
            .bind(&uuid)
            .bind(lease_until_ms)
            .bind(&write.principal)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
    }
    let mut detail = serde_json::json!({ "dropped": true, "metadata-location": tabular.metadata_location });
    if let Some(keep) = options.keep {
        detail["restorable-until-ms"] = keep.restorable_until_ms.into();
        if let Some(due) = keep.purge_due_ms {
            detail["purge-due-ms"] = due.into();
        }
    }
    let change = crate::audit::Change::tabular(warehouse_id, (namespace, name), (&id, kind), detail);
    store.commit_write_changed(tx, write, &change, db_error).await?;
    Ok(Some(Dropped { tabular, extra_locations: extra, kept: options.keep }))
}

async fn rename(
    store: &SqlStore,
    write: &WriteContext,
    warehouse_id: &str,
    kind: TabularKind,
    from: (&NamespaceIdent, &str),
    to: (&NamespaceIdent, &str),
    expected_id: Option<&str>,
) -> Result<(), CatalogError> {
    let not_found = |ns: &NamespaceIdent, name: &str| match kind {
        TabularKind::Table => CatalogError::no_such_table(format!("{ns}.{name}")),
        TabularKind::View => CatalogError::no_such_view(format!("{ns}.{name}")),
    };
    let mut tx = store.begin_write().await?;
    let source = sqlx::query(
        "SELECT t.id FROM tabulars t JOIN namespaces n ON n.id = t.namespace_id \
         WHERE n.warehouse_id = $1 AND n.name = $2 AND t.name = $3 AND t.kind = $4",
    )
    .bind(warehouse_id)
    .bind(from.0.encoded())
    .bind(from.1)
    .bind(kind.as_str())
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?
    .ok_or_else(|| not_found(from.0, from.1))?;
    let id: String = source.try_get("id").map_err(db_error)?;
    if expected_id.is_some_and(|expected| expected != id) {
        return Err(not_found(from.0, from.1));
    }
    // Out of its namespace: not while a legal hold covers it.
    if from.0 != to.0
        && let Some(held) = crate::holds::covering(&mut *tx, warehouse_id, Some(from.0), Some(&id)).await?
    {
        return Err(held);
    }
    let target_namespace =
        id_of(&mut *tx, warehouse_id, to.0).await?.ok_or_else(|| CatalogError::no_such_namespace(to.0))?;
    let updated = sqlx::query("UPDATE tabulars SET namespace_id = $1, name = $2, updated_at = $3 WHERE id = $4")
        .bind(target_namespace.as_str())
        .bind(to.1)
        .bind(store.now_ms())
        .bind(&id)
        .execute(&mut *tx)
        .await;
    match updated {
        Ok(_) => {}
        Err(e) if is_violation(&e, ErrorKind::ForeignKeyViolation) => {
            return Err(CatalogError::no_such_namespace(to.0));
        }
        Err(e) => return Err(taken_or_failed(e, || already_exists(to.0, to.1))),
    }
    let mut renamed_to = to.0.levels().to_vec();
    renamed_to.push(to.1.to_owned());
    let change =
        crate::audit::Change::tabular(warehouse_id, from, (&id, kind), serde_json::json!({ "renamed-to": renamed_to }));
    store.commit_write_changed(tx, write, &change, db_error).await
}

#[async_trait]
impl TabularStore for SqlStore {
    async fn legal_hold(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        id: &TabularId,
    ) -> Result<Option<CatalogError>, CatalogError> {
        crate::holds::covering(&self.pool, warehouse_id.as_str(), Some(namespace), Some(id.as_str())).await
    }

    async fn create_tabular(&self, write: &WriteContext, new: &NewTabular<'_>) -> Result<TabularId, CatalogError> {
        let mut tx = self.begin_write().await?;
        lock_warehouse(self, &mut tx, new.warehouse_id).await?;
        let namespace_id = id_of(&mut *tx, new.warehouse_id, new.namespace)
            .await?
            .ok_or_else(|| CatalogError::no_such_namespace(new.namespace))?;
        // A taken name is the more useful answer (409) than an overlapping location (400).
        let taken = sqlx::query("SELECT id FROM tabulars WHERE namespace_id = $1 AND name = $2")
            .bind(namespace_id.as_str())
            .bind(new.name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
        if taken.is_some() {
            return Err(already_exists(new.namespace, new.name));
        }
        let uuid = uuid_of(new.metadata);
        for location in std::iter::once(new.location).chain(new.extra_locations.iter().map(String::as_str)) {
            // A staged create reserves for the table it will be: a view of the name is not it.
            let reserved_as =
                (new.kind == TabularKind::Table).then_some((namespace_id.as_str(), new.name, write.principal.as_str()));
            let own = Own { reserved_as, uuid: Some(&uuid), leased_by: Some(&write.principal), ..Own::default() };
            check_overlap(&mut tx, new.warehouse_id, location, own, self.now_ms()).await?;
            check_namespace_dirs(&mut tx, new.warehouse_id, new.namespace, location).await?;
        }
        let id = uuid::Uuid::now_v7().to_string();
        let inserted = sqlx::query(
            "INSERT INTO tabulars (id, warehouse_id, namespace_id, name, kind, location, metadata_location, metadata, \
             metadata_gzip, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)",
        )
        .bind(&id)
        .bind(new.warehouse_id.as_str())
        .bind(namespace_id.as_str())
        .bind(new.name)
        .bind(new.kind.as_str())
        .bind(new.location)
        .bind(new.metadata_location)
        .bind(if new.metadata_gzip.is_some() { "" } else { new.metadata })
        .bind(new.metadata_gzip)
        .bind(self.now_ms())
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_violation(&e, ErrorKind::ForeignKeyViolation) => {
                return Err(CatalogError::no_such_namespace(new.namespace));
            }
            Err(e) => return Err(taken_or_failed(e, || already_exists(new.namespace, new.name))),
        }
        record_locations(&mut tx, new.warehouse_id, &id, new.extra_locations, self.now_ms()).await?;
        let as_what = format!("{}.{}", new.namespace, new.name);
        let taken: Vec<&str> =
            std::iter::once(new.location).chain(new.extra_locations.iter().map(String::as_str)).collect();
        deleted::supersede(&mut tx, new.warehouse_id, (&uuid, &taken), &as_what, self.now_ms()).await?;
        // The staged create's reservation of the locations the table took has served: the table
        // holds them now. Any other reservation stays until it expires.
        for location in std::iter::once(new.location).chain(new.extra_locations.iter().map(String::as_str)) {
            sqlx::query(
                "DELETE FROM location_reservations \
                 WHERE namespace_id = $1 AND name = $2 AND principal = $3 AND location = $4",
            )
            .bind(namespace_id.as_str())
            .bind(new.name)
            .bind(&write.principal)
            .bind(location)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        // The row may point at a metadata file the caller wrote: a COMMIT that fails unanswered
        // and may still apply says so, and the caller keeps the file.
        let change = crate::audit::Change::tabular(
            new.warehouse_id.as_str(),
            (new.namespace, new.name),
            (&id, new.kind),
            serde_json::json!({ "created": true, "metadata-location": new.metadata_location }),
        );
        self.commit_write_changed(tx, write, &change, swap_error).await?;
        Ok(TabularId::new(id))
    }

    async fn load_tabular(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        name: &str,
        kind: TabularKind,
    ) -> Result<Option<Tabular>, CatalogError> {
        let sql =
            concat!("SELECT t.id, t.kind, t.location, t.metadata_location, t.metadata, t.metadata_gzip ", by_name!());
        let key = (warehouse_id.as_str(), namespace, name, kind);
        let read = read_in_place(self, sql, key, |row| {
            Ok((row.get(0)?, row.get::<_, String>(1)?, row.get(2)?, row.get(3)?, (row.get(4)?, row.get(5)?)))
        });
        if let Some(found) = read {
            return found
                .map(|(id, kind, location, metadata_location, document)| {
                    tabular(id, &kind, location, metadata_location, document)
                })
                .transpose();
        }
        let row = fetch_by_name(self, sql, warehouse_id, namespace, name, kind).await?;
        row.as_ref().map(from_row).transpose()
    }

    async fn load_tabular_head(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        name: &str,
        kind: TabularKind,
    ) -> Result<Option<TabularHead>, CatalogError> {
        let Some(heads) = &self.heads else {
            return load_head(self, warehouse_id, namespace, name, kind).await;
        };
        let key = heads::key(warehouse_id, namespace, name, kind);
        let generation = match heads.lookup(&key) {
            heads::Lookup::Hit(head) => return Ok(Some(head)),
            heads::Lookup::Miss(generation) => generation,
        };
        let head = load_head(self, warehouse_id, namespace, name, kind).await?;
        if let Some(head) = &head {
            heads.offer(generation, key, head);
        }
        Ok(head)
    }

    async fn swap_metadata(&self, write: &WriteContext, swaps: &[MetadataSwap]) -> Result<SwapOutcome, CatalogError> {
        let Some(heads) = self.heads.clone() else { return swap(self, write, swaps).await };
        let (store, write, swaps) = (self.clone(), write.clone(), swaps.to_vec());
        icegate_catalog::detach::run_to_completion(async move {
            let outcome = swap(&store, &write, &swaps).await;
            heads.forget_ids(swaps.iter().map(|swap| swap.id.as_str()));
            outcome
        })
        .await?
    }

    async fn drop_tabular(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        (namespace, name): (&NamespaceIdent, &str),
        kind: TabularKind,
        options: DropOptions,
        expected_id: Option<&TabularId>,
    ) -> Result<Option<Dropped>, CatalogError> {
        let Some(heads) = self.heads.clone() else {
            let expected_id = expected_id.map(|id| id.as_str());
            return drop(self, write, (warehouse_id.as_str(), namespace, name, kind), options, expected_id).await;
        };
        let expected_id = expected_id.cloned();
        let (store, write, warehouse_id, namespace, name) =
            (self.clone(), write.clone(), warehouse_id.to_owned(), namespace.clone(), name.to_owned());
        icegate_catalog::detach::run_to_completion(async move {
            let dropped =
                drop(&store, &write, (&warehouse_id, &namespace, &name, kind), options, expected_id.as_deref()).await;
            heads.forget_key(&heads::key(&warehouse_id, &namespace, &name, kind));
            dropped
        })
        .await?
    }

    async fn list_deleted(
        &self,
        warehouse_id: &WarehouseId,
        filter: &DeletedFilter,
    ) -> Result<Vec<DeletedTabular>, CatalogError> {
        self.list_deleted_entries(warehouse_id, filter).await
    }

    async fn deleted_tabular(&self, id: &TabularId) -> Result<Option<DeletedTabular>, CatalogError> {
        self.deleted_entry(id).await
    }

    async fn undrop_tabular(
        &self,
        write: &WriteContext,
        id: &TabularId,
        to: (&NamespaceIdent, &str),
        now_ms: i64,
    ) -> Result<Tabular, CatalogError> {
        let restored = self.undrop(write, id, to, now_ms).await?;
        if let Some(heads) = &self.heads {
            heads.forget_ids(std::iter::once(id.as_str()));
        }
        Ok(restored)
    }

    async fn begin_purge(&self, id: &TabularId) -> Result<Option<DeletedTabular>, CatalogError> {
        self.start_purge(id).await
    }

    async fn finish_purge(
        &self,
        write: &WriteContext,
        id: &TabularId,
        report: serde_json::Value,
    ) -> Result<(), CatalogError> {
        self.end_purge(write, id, report).await
    }

    async fn expire_deleted(&self, now_ms: i64, limit: i64) -> Result<u64, CatalogError> {
        self.expire_deleted_entries(now_ms, limit).await
    }

    async fn purges_due(&self, now_ms: i64, limit: i64) -> Result<Vec<DeletedTabular>, CatalogError> {
        self.due_purges(now_ms, limit).await
    }

    /// Every location recorded for a table or view: its base location and the others it owns.
    async fn expire_location_holds(&self, now_ms: i64) -> Result<u64, CatalogError> {
        let mut removed = 0;
        for sql in [
            "DELETE FROM location_reservations WHERE expires_at <= $1",
            "DELETE FROM location_leases WHERE expires_at <= $1",
        ] {
            removed += sqlx::query(sql).bind(now_ms).execute(&self.pool).await.map_err(db_error)?.rows_affected();
        }
        // Settlers' fences of group commits (see `group_commit`), kept a day.
        if self.backend == Backend::Postgres {
            let done = sqlx::query("DELETE FROM swap_fences WHERE created_at < $1")
                .bind(now_ms - crate::group_commit::FENCE_KEPT_MS)
                .execute(&self.pool)
                .await
                .map_err(db_error)?;
            removed += done.rows_affected();
        }
        Ok(removed)
    }

    async fn metadata_location_of(&self, tabular_id: &TabularId) -> Result<Option<String>, CatalogError> {
        sqlx::query_scalar("SELECT metadata_location FROM tabulars WHERE id = $1")
            .bind(tabular_id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn recorded_locations(&self, tabular_id: &TabularId) -> Result<Vec<String>, CatalogError> {
        let mut conn = self.pool.acquire().await.map_err(db_error)?;
        recorded_locations_in(&mut conn, tabular_id).await
    }

    /// The read-only form of the overlap checks, for callers that must know before they write or
    /// vend anything (a commit that moves a table's files). The checks that count run again,
    /// atomically, with the insert or swap.
    async fn check_locations_free(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        (namespace, name): (&NamespaceIdent, &str),
        locations: &[String],
        exclude_id: Option<&TabularId>,
    ) -> Result<(), CatalogError> {
        let mut conn = self.pool.acquire().await.map_err(db_error)?;
        let namespace_id = id_of(&mut *conn, warehouse_id, namespace).await?.unwrap_or_default();
        for location in locations {
            let own = Own {
                tabular_id: exclude_id.map(|id| id.as_str()),
                reserved_as: Some((&namespace_id, name, &write.principal)),
                ..Own::default()
            };
            check_overlap(&mut conn, warehouse_id, location, own, self.now_ms()).await?;
            check_namespace_dirs(&mut conn, warehouse_id, namespace, location).await?;
        }
        Ok(())
    }

    /// Reserves a staged create's locations for its principal until `until_ms`, once they pass
    /// the checks a create makes (atomically, under the warehouse's lock). Staging the same
    /// table at the same location again extends the reservation; nothing shortens it. Expired
    /// reservations of the warehouse go.
    async fn reserve_locations(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        name: &str,
        locations: &[String],
        until_ms: i64,
    ) -> Result<(), CatalogError> {
        let mut tx = self.begin_write().await?;
        lock_warehouse(self, &mut tx, warehouse_id).await?;
        let namespace_id = id_of(&mut *tx, warehouse_id, namespace)
            .await?
            .ok_or_else(|| CatalogError::no_such_namespace(namespace))?;
        for table in ["location_reservations", "location_leases"] {
            sqlx::query(AssertSqlSafe(format!("DELETE FROM {table} WHERE warehouse_id = $1 AND expires_at <= $2")))
                .bind(warehouse_id.as_str())
                .bind(self.now_ms())
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        for location in locations {
            let own = Own { reserved_as: Some((&namespace_id, name, &write.principal)), ..Own::default() };
            check_overlap(&mut tx, warehouse_id, location, own, self.now_ms()).await?;
            check_namespace_dirs(&mut tx, warehouse_id, namespace, location).await?;
        }
        for location in locations {
            sqlx::query(
                "INSERT INTO location_reservations (warehouse_id, namespace_id, name, principal, location, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (namespace_id, name, location) DO UPDATE SET expires_at = \
                 CASE WHEN excluded.expires_at > location_reservations.expires_at THEN excluded.expires_at \
                 ELSE location_reservations.expires_at END",
            )
            .bind(warehouse_id.as_str())
            .bind(namespace_id.as_str())
            .bind(name)
            .bind(&write.principal)
            .bind(location)
            .bind(until_ms)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        // Not an idempotent mutation: a staged create's answer is not kept (it creates nothing).
        self.commit_write(tx, &write.unkeyed()).await
    }

    async fn rename_tabular(
        &self,
        write: &WriteContext,
        warehouse_id: &WarehouseId,
        kind: TabularKind,
        from: (&NamespaceIdent, &str),
        to: (&NamespaceIdent, &str),
        expected_id: Option<&TabularId>,
    ) -> Result<(), CatalogError> {
        let Some(heads) = self.heads.clone() else {
            return rename(self, write, warehouse_id, kind, from, to, expected_id.map(|id| id.as_str())).await;
        };
        let (store, write, warehouse_id) = (self.clone(), write.clone(), warehouse_id.to_owned());
        let (from, to) = ((from.0.clone(), from.1.to_owned()), (to.0.clone(), to.1.to_owned()));
        let expected_id = expected_id.cloned();
        icegate_catalog::detach::run_to_completion(async move {
            let renamed =
                rename(&store, &write, &warehouse_id, kind, (&from.0, &from.1), (&to.0, &to.1), expected_id.as_deref())
                    .await;
            heads.forget_key(&heads::key(&warehouse_id, &from.0, &from.1, kind));
            heads.forget_key(&heads::key(&warehouse_id, &to.0, &to.1, kind));
            renamed
        })
        .await?
    }

    async fn list_tabulars(
        &self,
        warehouse_id: &WarehouseId,
        namespace: &NamespaceIdent,
        kind: TabularKind,
        page: &PageRequest,
        visible_to: Option<&PrincipalId>,
    ) -> Result<Page<String>, CatalogError> {
        let namespace_id = id_of(&self.pool, warehouse_id, namespace)
            .await?
            .ok_or_else(|| CatalogError::no_such_namespace(namespace))?;
        // With `visible_to`: only tables or views the principal holds a grant on (`access::visible`).
        let visible =
            if visible_to.is_some() { format!(" AND {}", *crate::access::visible::TABULAR) } else { String::new() };
        // Assembled from constant fragments only; every value is a bind parameter.
        let sql = format!(
            "SELECT t.name FROM tabulars t WHERE t.namespace_id = $1 AND t.kind = $2 AND t.name > $3{visible} \
             ORDER BY t.name LIMIT $4"
        );
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(namespace_id.as_str())
            .bind(kind.as_str())
            .bind(page.after.clone().unwrap_or_default())
            .bind(fetch_count(page));
        if let Some(principal) = visible_to {
            query = query.bind(principal.as_str()).bind(self.now_ms());
        }
        let rows = query.fetch_all(&self.pool).await.map_err(db_error)?;
        let names: Vec<String> = rows.iter().map(|r| r.try_get("name")).collect::<Result<_, _>>().map_err(db_error)?;
        Ok(keyset_page(names, page))
    }
}
