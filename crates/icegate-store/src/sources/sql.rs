//! The JDBC/SQL catalog as a migration source: the schema Java's `JdbcCatalog` and PyIceberg's
//! `SqlCatalog` share (`iceberg_tables`, `iceberg_namespace_properties`), on SQLite or
//! PostgreSQL. Namespaces are dot-joined there; a fence is the compare-and-swap the catalog's own
//! writers commit with (`UPDATE ... WHERE metadata_location = <expected>`), so no writer commits
//! past it: each re-reads the row, fails to read the fenced location, and says so.

use std::collections::BTreeMap;

use async_trait::async_trait;
use icegate_catalog::migration::source::{Fence, SourceCatalog, SourceTable};
use icegate_catalog::{CatalogError, Result};
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{AnyPool, Row};

/// A SQL catalog, reached with its own connection (two at most).
pub struct SqlSource {
    pool: AnyPool,
    catalog: String,
    /// The schema has `iceberg_type` (PyIceberg's v1, Java's with `jdbc.schema-version=V1`).
    typed: bool,
}

fn source_error(what: &str) -> impl Fn(sqlx::Error) -> CatalogError + '_ {
    move |e| {
        tracing::warn!(error = %e, "the source catalog failed {what}");
        CatalogError::Unavailable(format!("the source catalog failed {what}"))
    }
}

/// The sqlx URL of a source's `uri`, in SQLAlchemy's spellings as PyIceberg takes them:
/// `sqlite:////absolute/path.db` (opened read-write, never created) or `postgresql://...`
/// (`+psycopg2` and the like accepted).
pub fn connection_url(uri: &str) -> Result<String> {
    if let Some(path) = uri.strip_prefix("sqlite:///") {
        if !path.starts_with('/') || path.len() < 2 || path.contains('?') {
            return Err(CatalogError::bad_request("a SQLite source is sqlite:////<absolute path>"));
        }
        return Ok(format!("sqlite://{path}?mode=rw"));
    }
    if let Some((scheme, rest)) = uri.split_once("://")
        && (scheme == "postgres" || scheme == "postgresql" || scheme.starts_with("postgresql+"))
    {
        return Ok(format!("postgres://{rest}"));
    }
    Err(CatalogError::bad_request("a SQL source's uri is sqlite:////<absolute path> or postgresql://<host>/<database>"))
}

impl SqlSource {
    pub async fn connect(uri: &str, catalog: &str) -> Result<Self> {
        install_default_drivers();
        let mut url = connection_url(uri)?;
        if url.starts_with("postgres://") {
            // A row locked at the source (a writer's transaction left open) fails a statement after
            // a while, rather than holding a worker without end: the task retries later.
            let options = "options=-c%20lock_timeout%3D10000%20-c%20statement_timeout%3D60000";
            url = format!("{url}{}{options}", if url.contains('?') { '&' } else { '?' });
        }
        let pool = AnyPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect(&url)
            .await
            .map_err(source_error("connecting"))?;
        let typed = sqlx::query("SELECT iceberg_type FROM iceberg_tables LIMIT 0").execute(&pool).await.is_ok();
        // The catalog's tables must be there (a database that is no SQL catalog says so).
        sqlx::query("SELECT catalog_name FROM iceberg_tables LIMIT 0")
            .execute(&pool)
            .await
            .map_err(|_| CatalogError::bad_request("the source database holds no iceberg_tables: not a SQL catalog"))?;
        Ok(Self { pool, catalog: catalog.to_owned(), typed })
    }
}

/// Namespaces read at most, their properties' bytes at most, and a namespace's bounds (the
/// schema's `VARCHAR(255)`, which SQLite does not enforce; the catalog's depth).
const MAX_NAMESPACES: usize = 10_000;
const MAX_PROPERTY_BYTES: usize = 16 * 1024 * 1024;
const MAX_NAMESPACE_BYTES: usize = 255;

fn too_many() -> CatalogError {
    CatalogError::bad_request(format!(
        "the source catalog holds more than {MAX_NAMESPACES} namespaces: migrate in parts"
    ))
}

/// A namespace as read, refused when longer or deeper than a catalog holds.
fn checked(namespace: String) -> Result<String> {
    let depth = namespace.split('.').count();
    if namespace.len() > MAX_NAMESPACE_BYTES || depth > icegate_catalog::ident::MAX_NAMESPACE_DEPTH {
        let shown: String = namespace.chars().take(64).collect();
        return Err(CatalogError::bad_request(format!(
            "the source catalog holds a namespace longer than {MAX_NAMESPACE_BYTES} bytes or deeper than {} levels \
             ({shown}...)",
            icegate_catalog::ident::MAX_NAMESPACE_DEPTH
        )));
    }
    Ok(namespace)
}

fn split(namespace: &str) -> Vec<String> {
    namespace.split('.').map(str::to_owned).collect()
}

#[async_trait]
impl SourceCatalog for SqlSource {
    async fn namespaces(&self) -> Result<Vec<(Vec<String>, BTreeMap<String, String>)>> {
        let mut found: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let rows = sqlx::query("SELECT DISTINCT table_namespace FROM iceberg_tables WHERE catalog_name = $1")
            .bind(&self.catalog)
            .fetch_all(&self.pool)
            .await
            .map_err(source_error("listing namespaces"))?;
        for row in &rows {
            let namespace: String = row.try_get(0).map_err(source_error("listing namespaces"))?;
            found.entry(checked(namespace)?).or_default();
            if found.len() > MAX_NAMESPACES {
                return Err(too_many());
            }
        }
        let rows = sqlx::query(
            "SELECT namespace, property_key, property_value FROM iceberg_namespace_properties WHERE catalog_name = $1",
        )
        .bind(&self.catalog)
        .fetch_all(&self.pool)
        .await
        .map_err(source_error("reading namespace properties"))?;
        let mut property_bytes = 0usize;
        for row in &rows {
            let namespace: String = row.try_get(0).map_err(source_error("reading namespace properties"))?;
            let key: String = row.try_get(1).map_err(source_error("reading namespace properties"))?;
            let value: Option<String> = row.try_get(2).map_err(source_error("reading namespace properties"))?;
            let value = value.unwrap_or_default();
            property_bytes += key.len() + value.len();
            if property_bytes > MAX_PROPERTY_BYTES {
                return Err(CatalogError::bad_request(format!(
                    "the source catalog's namespace properties exceed {MAX_PROPERTY_BYTES} bytes"
                )));
            }
            let namespace = checked(namespace)?;
            if !found.contains_key(&namespace) && found.len() >= MAX_NAMESPACES {
                return Err(too_many());
            }
            let properties = found.entry(namespace).or_default();
            if key != "exists" {
                properties.insert(key, value);
            }
        }
        // A namespace's parents exist too (the catalog keeps them implicitly).
        let names: Vec<String> = found.keys().cloned().collect();
        for name in names {
            let levels = split(&name);
            for end in 1..levels.len() {
                found.entry(levels[..end].join(".")).or_default();
            }
        }
        Ok(found.into_iter().map(|(name, properties)| (split(&name), properties)).collect())
    }

    async fn tables(&self, namespace: &[String]) -> Result<Vec<SourceTable>> {
        let kind = if self.typed { "iceberg_type" } else { "NULL" };
        let sql = format!(
            "SELECT table_name, metadata_location, {kind} AS kind FROM iceberg_tables \
             WHERE catalog_name = $1 AND table_namespace = $2 ORDER BY table_name"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&self.catalog)
            .bind(namespace.join("."))
            .fetch_all(&self.pool)
            .await
            .map_err(source_error("listing tables"))?;
        rows.iter()
            .map(|row| {
                let kind: Option<String> = row.try_get("kind").map_err(source_error("listing tables"))?;
                Ok(SourceTable {
                    namespace: namespace.to_vec(),
                    name: row.try_get("table_name").map_err(source_error("listing tables"))?,
                    kind: if kind.as_deref() == Some("VIEW") { "view" } else { "table" }.to_owned(),
                    metadata_location: row.try_get("metadata_location").map_err(source_error("listing tables"))?,
                })
            })
            .collect()
    }

    async fn table(&self, namespace: &[String], name: &str) -> Result<Option<SourceTable>> {
        let row = sqlx::query(
            "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 \
             AND table_name = $3",
        )
        .bind(&self.catalog)
        .bind(namespace.join("."))
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(source_error("reading a table"))?;
        row.map(|row| {
            Ok(SourceTable {
                namespace: namespace.to_vec(),
                name: name.to_owned(),
                kind: "table".into(),
                metadata_location: row.try_get(0).map_err(source_error("reading a table"))?,
            })
        })
        .transpose()
    }

    async fn fence(&self, namespace: &[String], name: &str, expected: &str, fenced: &str) -> Result<Fence> {
        let namespace = namespace.join(".");
        // A writer committing between the read and the swap makes the swap miss: read again.
        for _ in 0..3 {
            let row = sqlx::query(
                "SELECT metadata_location, previous_metadata_location FROM iceberg_tables \
                 WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3",
            )
            .bind(&self.catalog)
            .bind(&namespace)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(source_error("fencing"))?;
            let Some(row) = row else { return Ok(Fence::Gone) };
            let current: Option<String> = row.try_get(0).map_err(source_error("fencing"))?;
            let previous: Option<String> = row.try_get(1).map_err(source_error("fencing"))?;
            match current.as_deref() {
                Some(at) if at == fenced => return Ok(Fence::AlreadyFenced),
                Some(at) if at != expected => return Ok(Fence::Moved { now: at.to_owned() }),
                None => return Ok(Fence::Gone),
                Some(_) => {}
            }
            // The writers' own compare-and-swap: no writer commits past it.
            let updated = sqlx::query(
                "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
                 WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 AND metadata_location = $2",
            )
            .bind(fenced)
            .bind(expected)
            .bind(&self.catalog)
            .bind(&namespace)
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(source_error("fencing"))?
            .rows_affected();
            if updated == 1 {
                return Ok(Fence::Fenced { previous });
            }
        }
        Err(CatalogError::Unavailable(format!("{namespace}.{name} kept changing at the source while it was fenced")))
    }

    async fn unfence(
        &self,
        (namespace, name): (&[String], &str),
        fenced: &str,
        back: &str,
        previous: Option<&str>,
    ) -> Result<bool> {
        // Only the migrated table's own row (a row elsewhere set to the same string is not it).
        let updated = sqlx::query(
            "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
             WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 AND metadata_location = $6",
        )
        .bind(back)
        .bind(previous)
        .bind(&self.catalog)
        .bind(namespace.join("."))
        .bind(name)
        .bind(fenced)
        .execute(&self.pool)
        .await
        .map_err(source_error("restoring a table"))?
        .rows_affected();
        Ok(updated > 0)
    }

    async fn retire(&self, (namespace, name): (&[String], &str), fenced: &str) -> Result<bool> {
        let deleted = sqlx::query(
            "DELETE FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3 \
             AND metadata_location = $4",
        )
        .bind(&self.catalog)
        .bind(namespace.join("."))
        .bind(name)
        .bind(fenced)
        .execute(&self.pool)
        .await
        .map_err(source_error("retiring a table"))?
        .rows_affected();
        Ok(deleted > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlalchemy_spellings_become_sqlx_urls() {
        assert_eq!(connection_url("sqlite:////var/lib/cat.db").unwrap(), "sqlite:///var/lib/cat.db?mode=rw");
        assert_eq!(connection_url("postgresql+psycopg2://u:p@h:5432/db").unwrap(), "postgres://u:p@h:5432/db");
        assert_eq!(connection_url("postgres://h/db").unwrap(), "postgres://h/db");
        for bad in ["sqlite:///relative.db", "sqlite:////x.db?mode=rwc", "mysql://h/db", "sqlite://", "/x.db"] {
            assert!(connection_url(bad).is_err(), "{bad}");
        }
    }
}
