//! The catalogs `icegate serve` migrates tables from: the SQL catalog and REST catalogs (the
//! store crate's), and Glue (the storage crate's, which speaks AWS).

use std::sync::Arc;

use icegate_catalog::Result;
use icegate_catalog::migration::SourceConnector;
use icegate_catalog::migration::source::SourceCatalog;
use icegate_catalog::migration::spec::SourceSpec;
use icegate_catalog::storage::SecretCipher;

pub struct Sources;

#[async_trait::async_trait]
impl SourceConnector for Sources {
    async fn connect(&self, spec: &SourceSpec, cipher: &SecretCipher) -> Result<Arc<dyn SourceCatalog>> {
        match spec {
            SourceSpec::Glue { region, endpoint, catalog_id } => {
                let glue =
                    icegate_storage::glue::GlueSource::connect(region, endpoint.as_deref(), catalog_id.as_deref())
                        .await?;
                Ok(Arc::new(glue))
            }
            _ => icegate_store::sources::Sources.connect(spec, cipher).await,
        }
    }
}
