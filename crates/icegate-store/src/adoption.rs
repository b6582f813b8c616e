//! What adoption keeps (see migration 24): source locations, adoptions, the files they added as
//! they were then, and each run's report. Registering and removing a source location and
//! recording a run are changes recorded in the audit trail.

use icegate_catalog::adoption::store::{AdoptedFile, Adoption, AdoptionMode, AdoptionRun, SourceLocation};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::store::TabularKind;
use icegate_catalog::{CatalogError, NamespaceIdent, Result, WarehouseId};
use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::error::ErrorKind;
use sqlx::{AssertSqlSafe, Row};

use crate::{SqlStore, audit, db_error, is_violation};

const ADOPTION_COLUMNS: &str =
    "id, warehouse_id, tabular_id, namespace, name, source, settings, mode, created_at, created_by";

fn adoption_from(row: &AnyRow) -> Result<Adoption> {
    let namespace: String = row.try_get("namespace").map_err(db_error)?;
    let settings: String = row.try_get("settings").map_err(db_error)?;
    let mode: String = row.try_get("mode").map_err(db_error)?;
    Ok(Adoption {
        id: row.try_get("id").map_err(db_error)?,
        warehouse_id: row.try_get("warehouse_id").map_err(db_error)?,
        tabular_id: row.try_get("tabular_id").map_err(db_error)?,
        namespace: NamespaceIdent::parse_encoded(&namespace)?,
        name: row.try_get("name").map_err(db_error)?,
        source: row.try_get("source").map_err(db_error)?,
        settings: serde_json::from_str(&settings)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored adoption settings: {e}")))?,
        mode: AdoptionMode::parse(&mode)?,
        created_at_ms: row.try_get("created_at").map_err(db_error)?,
        created_by: row.try_get("created_by").map_err(db_error)?,
    })
}

fn warehouse_change(warehouse_id: &str, detail: serde_json::Value) -> audit::Change {
    audit::Change::warehouse(warehouse_id, detail)
}

fn table_change(adoption: &Adoption, detail: serde_json::Value) -> audit::Change {
    audit::Change::tabular(
        &adoption.warehouse_id,
        (&adoption.namespace, &adoption.name),
        (&adoption.tabular_id, TabularKind::Table),
        detail,
    )
}

impl SqlStore {
    pub(crate) async fn insert_source_location(
        &self,
        write: &WriteContext,
        warehouse_id: &str,
        location: &str,
        now_ms: i64,
    ) -> Result<SourceLocation> {
        let mut tx = self.begin_write().await?;
        // Under the warehouse's lock, which creates and moves of tables take for their own
        // overlap checks: no table can come to lie inside (or around) the source meanwhile.
        let id = WarehouseId::new(warehouse_id);
        crate::warehouses::check_source_free(self, &mut tx, warehouse_id, location).await?;
        crate::locations::lock_warehouse(self, &mut tx, &id).await?;
        crate::locations::check_overlap(
            &mut tx,
            warehouse_id,
            location,
            crate::locations::Own { ignore_sources: true, ..Default::default() },
            now_ms,
        )
        .await
        .map_err(|_| {
            CatalogError::bad_request(format!(
                "source location {location} overlaps the location of a table or view: a table's own files are \
                 never a source"
            ))
        })?;
        let inserted = sqlx::query(
            "INSERT INTO source_locations (warehouse_id, location, created_at, created_by) VALUES ($1, $2, $3, $4)",
        )
        .bind(warehouse_id)
        .bind(location)
        .bind(now_ms)
        .bind(&write.principal)
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_violation(&e, ErrorKind::UniqueViolation) => {
                return Err(CatalogError::AlreadyExists(format!("source location {location} is registered already")));
            }
            Err(e) => return Err(db_error(e)),
        }
        let change = warehouse_change(warehouse_id, json!({ "source-location-added": location }));
        self.commit_write_changed(tx, write, &change, db_error).await?;
        Ok(SourceLocation { location: location.to_owned(), created_at_ms: now_ms, created_by: write.principal.clone() })
    }

    pub(crate) async fn list_source_locations(&self, warehouse_id: &str) -> Result<Vec<SourceLocation>> {
        let rows = sqlx::query(
            "SELECT location, created_at, created_by FROM source_locations WHERE warehouse_id = $1 ORDER BY location",
        )
        .bind(warehouse_id)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok(SourceLocation {
                    location: row.try_get("location").map_err(db_error)?,
                    created_at_ms: row.try_get("created_at").map_err(db_error)?,
                    created_by: row.try_get("created_by").map_err(db_error)?,
                })
            })
            .collect()
    }

    pub(crate) async fn delete_source_location(
        &self,
        write: &WriteContext,
        warehouse_id: &str,
        location: &str,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        // An adoption holds its source while its table references the files: pending (its
        // first run not yet committed), live, or dropped and still restorable or being purged.
        let using = sqlx::query(
            "SELECT a.id, a.source FROM adoptions a WHERE a.warehouse_id = $1 \
             AND (a.source = $2 OR (a.source > $2 || '/' AND a.source < $2 || '0')) \
             AND (a.tabular_id = '' OR EXISTS (SELECT 1 FROM tabulars t WHERE t.id = a.tabular_id) \
                  OR EXISTS (SELECT 1 FROM deleted_tabulars d WHERE d.id = a.tabular_id)) LIMIT 1",
        )
        .bind(warehouse_id)
        .bind(location)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        if let Some(row) = using {
            let id: String = row.try_get("id").map_err(db_error)?;
            let source: String = row.try_get("source").map_err(db_error)?;
            return Err(CatalogError::Conflict(format!(
                "adoption {id} reads from {source}, inside source location {location}; its table keeps \
                 referencing those files (once the table is dropped and no longer restorable, the source \
                 location can be removed)"
            )));
        }
        let removed = sqlx::query("DELETE FROM source_locations WHERE warehouse_id = $1 AND location = $2")
            .bind(warehouse_id)
            .bind(location)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        if removed == 0 {
            return Ok(false);
        }
        let change = warehouse_change(warehouse_id, json!({ "source-location-removed": location }));
        self.commit_write_changed(tx, write, &change, db_error).await?;
        Ok(true)
    }

    pub(crate) async fn insert_adoption(&self, write: &WriteContext, adoption: &Adoption) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO adoptions (id, warehouse_id, tabular_id, namespace, name, source, settings, mode, \
             created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(&adoption.id)
        .bind(&adoption.warehouse_id)
        .bind(&adoption.tabular_id)
        .bind(adoption.namespace.encoded())
        .bind(&adoption.name)
        .bind(&adoption.source)
        .bind(adoption.settings.to_string())
        .bind(adoption.mode.as_str())
        .bind(adoption.created_at_ms)
        .bind(&adoption.created_by)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        let detail =
            json!({ "adoption-created": adoption.id, "source": adoption.source, "mode": adoption.mode.as_str() });
        self.commit_write_changed(tx, write, &table_change(adoption, detail), db_error).await
    }

    pub(crate) async fn delete_pending_adoption(&self, write: &WriteContext, id: &str) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query("SELECT warehouse_id, namespace, name FROM adoptions WHERE id = $1 AND tabular_id = ''")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
        let Some(row) = row else { return Ok(()) };
        sqlx::query("DELETE FROM adoptions WHERE id = $1 AND tabular_id = ''")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let warehouse_id: String = row.try_get("warehouse_id").map_err(db_error)?;
        let detail = json!({ "adoption-abandoned": id, "reason": "its first run failed before it made a table" });
        self.commit_write_changed(tx, write, &warehouse_change(&warehouse_id, detail), db_error).await
    }

    pub(crate) async fn find_adoption(&self, id: &str) -> Result<Option<Adoption>> {
        let sql = format!("SELECT {ADOPTION_COLUMNS} FROM adoptions WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql)).bind(id).fetch_optional(&self.pool).await.map_err(db_error)?;
        row.as_ref().map(adoption_from).transpose()
    }

    pub(crate) async fn list_adoptions(
        &self,
        warehouse_id: &str,
        after_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Adoption>> {
        let sql = format!(
            "SELECT {ADOPTION_COLUMNS} FROM adoptions WHERE warehouse_id = $1 AND id > $2 ORDER BY id LIMIT $3"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(warehouse_id)
            .bind(after_id.unwrap_or(""))
            .bind(limit.max(0))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(adoption_from).collect()
    }

    pub(crate) async fn list_adopted_files(&self, adoption_id: &str) -> Result<Vec<AdoptedFile>> {
        let rows = sqlx::query(
            "SELECT location, size, etag, modified_at, snapshot_id FROM adoption_files WHERE adoption_id = $1 \
             ORDER BY location",
        )
        .bind(adoption_id)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                let size: i64 = row.try_get("size").map_err(db_error)?;
                Ok(AdoptedFile {
                    location: row.try_get("location").map_err(db_error)?,
                    size: u64::try_from(size).unwrap_or(0),
                    etag: row.try_get("etag").map_err(db_error)?,
                    modified_ms: row.try_get("modified_at").map_err(db_error)?,
                    snapshot_id: row.try_get("snapshot_id").map_err(db_error)?,
                })
            })
            .collect()
    }

    pub(crate) async fn insert_adoption_run(
        &self,
        write: &WriteContext,
        adoption: &Adoption,
        run: &AdoptionRun,
        added: &[AdoptedFile],
        removed: &[String],
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        // A pending adoption's first run names the table it made.
        sqlx::query("UPDATE adoptions SET tabular_id = $1 WHERE id = $2 AND tabular_id = ''")
            .bind(&adoption.tabular_id)
            .bind(&adoption.id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        for file in added {
            sqlx::query(
                "INSERT INTO adoption_files (adoption_id, location, size, etag, modified_at, snapshot_id) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (adoption_id, location) DO UPDATE SET \
                 size = excluded.size, etag = excluded.etag, modified_at = excluded.modified_at, \
                 snapshot_id = excluded.snapshot_id",
            )
            .bind(&adoption.id)
            .bind(&file.location)
            .bind(i64::try_from(file.size).unwrap_or(i64::MAX))
            .bind(&file.etag)
            .bind(file.modified_ms)
            .bind(file.snapshot_id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        for location in removed {
            sqlx::query("DELETE FROM adoption_files WHERE adoption_id = $1 AND location = $2")
                .bind(&adoption.id)
                .bind(location)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        sqlx::query(
            "INSERT INTO adoption_runs (id, adoption_id, started_at, finished_at, snapshot_id, report) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&run.id)
        .bind(&adoption.id)
        .bind(run.started_at_ms)
        .bind(run.finished_at_ms)
        .bind(run.snapshot_id)
        .bind(run.report.to_string())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        let detail = json!({
            "adoption-run": run.id,
            "adoption": adoption.id,
            "snapshot-id": run.snapshot_id,
            "files-added": added.len(),
            "files-removed": removed.len(),
        });
        self.commit_write_changed(tx, write, &table_change(adoption, detail), db_error).await
    }

    pub(crate) async fn sources_of_table(&self, tabular_id: &str) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT source FROM adoptions WHERE tabular_id = $1 ORDER BY source")
            .bind(tabular_id)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter().map(|row| row.try_get("source").map_err(db_error)).collect()
    }

    pub(crate) async fn list_adoption_runs(&self, adoption_id: &str, limit: i64) -> Result<Vec<AdoptionRun>> {
        let rows = sqlx::query(
            "SELECT id, adoption_id, started_at, finished_at, snapshot_id, report FROM adoption_runs \
             WHERE adoption_id = $1 ORDER BY started_at DESC, id DESC LIMIT $2",
        )
        .bind(adoption_id)
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                let report: String = row.try_get("report").map_err(db_error)?;
                Ok(AdoptionRun {
                    id: row.try_get("id").map_err(db_error)?,
                    adoption_id: row.try_get("adoption_id").map_err(db_error)?,
                    started_at_ms: row.try_get("started_at").map_err(db_error)?,
                    finished_at_ms: row.try_get("finished_at").map_err(db_error)?,
                    snapshot_id: row.try_get("snapshot_id").map_err(db_error)?,
                    report: serde_json::from_str(&report)
                        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored adoption report: {e}")))?,
                })
            })
            .collect()
    }
}
