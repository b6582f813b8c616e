//! Catalogs a migration moves tables from (issue 35): the JDBC/SQL catalog, reached over SQL,
//! and Iceberg REST catalogs.

mod rest;
mod sql;

use std::sync::Arc;

use async_trait::async_trait;
use icegate_catalog::migration::SourceConnector;
use icegate_catalog::migration::source::SourceCatalog;
use icegate_catalog::migration::spec::SourceSpec;
use icegate_catalog::storage::SecretCipher;
use icegate_catalog::{CatalogError, Result};
pub use rest::RestSource;
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
            SourceSpec::Rest { uri, warehouse, credential, token, scope } => {
                let credential = credential.as_ref().map(|c| cipher.open(c)).transpose()?;
                let token = token.as_ref().map(|t| cipher.open(t)).transpose()?;
                let source = RestSource::connect(
                    uri,
                    warehouse.as_deref(),
                    credential.as_deref(),
                    token.as_deref(),
                    scope.as_deref(),
                )
                .await?;
                Ok(Arc::new(source))
            }
            SourceSpec::Glue { .. } => Err(CatalogError::bad_request("Glue is not a migration source in this release")),
        }
    }
}
