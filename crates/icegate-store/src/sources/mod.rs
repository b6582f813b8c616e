//! Catalogs a migration moves tables from (issue 35): the JDBC/SQL catalog, reached over SQL.

mod sql;

use std::sync::Arc;

use async_trait::async_trait;
use icegate_catalog::migration::SourceConnector;
use icegate_catalog::migration::source::SourceCatalog;
use icegate_catalog::migration::spec::SourceSpec;
use icegate_catalog::storage::SecretCipher;
use icegate_catalog::{CatalogError, Result};
pub use sql::{SqlSource, connection_url};

/// Opens the sources this build reaches.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sources;

#[async_trait]
impl SourceConnector for Sources {
    async fn connect(&self, spec: &SourceSpec, cipher: &SecretCipher) -> Result<Arc<dyn SourceCatalog>> {
        match spec {
            SourceSpec::Sql { catalog_name, .. } => {
                let uri = spec.sql_uri(cipher)?.unwrap_or_default();
                Ok(Arc::new(SqlSource::connect(&uri, catalog_name).await?))
            }
            SourceSpec::Rest { .. } => {
                Err(CatalogError::bad_request("REST catalogs are not a migration source in this release"))
            }
            SourceSpec::Glue { .. } => Err(CatalogError::bad_request("Glue is not a migration source in this release")),
        }
    }
}
