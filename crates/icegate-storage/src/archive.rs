//! The audit trail's checkpoint location (`audit.checkpoint.location`): a `file://` directory or
//! an `s3://bucket/prefix`, reached with the server process's own AWS credentials (environment,
//! container or instance role), never a warehouse's.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use icegate_catalog::audit_archive::ArchiveStore;
use icegate_catalog::{CatalogError, Result};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

pub struct ObjectArchive {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    location: String,
}

fn failed(what: &str, location: &str, e: &dyn std::fmt::Display) -> CatalogError {
    CatalogError::Unavailable(format!("{what} at the audit checkpoint location {location} failed: {e}"))
}

impl ObjectArchive {
    /// The archive at `location`; for S3, `endpoint` and `region` override what the environment
    /// says (an S3-compatible store).
    pub fn open(location: &str, endpoint: Option<&str>, region: Option<&str>) -> Result<Self> {
        let url = url::Url::parse(location)
            .map_err(|e| CatalogError::bad_request(format!("audit.checkpoint.location {location:?}: {e}")))?;
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match url.scheme() {
            "file" => {
                let dir = url.to_file_path().map_err(|()| {
                    CatalogError::bad_request(format!("audit.checkpoint.location {location:?} is not a path"))
                })?;
                std::fs::create_dir_all(&dir).map_err(|e| failed("creating the directory", location, &e))?;
                let store = LocalFileSystem::new_with_prefix(&dir).map_err(|e| failed("opening", location, &e))?;
                (Arc::new(store), String::new())
            }
            "s3" => {
                let bucket = url.host_str().unwrap_or_default();
                let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
                if let Some(endpoint) = endpoint {
                    builder = builder.with_endpoint(endpoint).with_allow_http(endpoint.starts_with("http://"));
                    builder = builder.with_virtual_hosted_style_request(false);
                }
                if let Some(region) = region {
                    builder = builder.with_region(region);
                }
                let store = builder.build().map_err(|e| failed("opening", location, &e))?;
                (Arc::new(store), url.path().trim_matches('/').to_owned())
            }
            other => {
                return Err(CatalogError::bad_request(format!(
                    "audit.checkpoint.location must be file:// or s3://, not {other}://"
                )));
            }
        };
        Ok(Self { store, prefix: Path::from(prefix), location: location.to_owned() })
    }

    fn path(&self, name: &str) -> Path {
        name.split('/').fold(self.prefix.clone(), |path, part| path.clone().join(part))
    }
}

#[async_trait::async_trait]
impl ArchiveStore for ObjectArchive {
    async fn put(&self, name: &str, bytes: Bytes) -> Result<()> {
        self.store
            .put(&self.path(name), PutPayload::from(bytes))
            .await
            .map_err(|e| failed("writing", &self.location, &e))?;
        Ok(())
    }

    async fn get(&self, name: &str, max_bytes: u64) -> Result<Bytes> {
        self.get_if_exists(name, max_bytes).await?.ok_or_else(|| {
            CatalogError::Conflict(format!("{name} is not at the audit checkpoint location {}", self.location))
        })
    }

    async fn get_if_exists(&self, name: &str, max_bytes: u64) -> Result<Option<Bytes>> {
        let got = match self.store.get(&self.path(name)).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(failed("reading", &self.location, &e)),
        };
        if got.meta.size > max_bytes {
            return Err(CatalogError::Conflict(format!(
                "{name} at the audit checkpoint location is {} bytes, more than the {max_bytes} it may be",
                got.meta.size
            )));
        }
        got.bytes().await.map(Some).map_err(|e| failed("reading", &self.location, &e))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let under = self.path(prefix.trim_end_matches('/'));
        let listed: Vec<_> =
            self.store.list(Some(&under)).try_collect().await.map_err(|e| failed("listing", &self.location, &e))?;
        let base = self.prefix.as_ref();
        Ok(listed
            .into_iter()
            .map(|meta| {
                let path = meta.location.as_ref();
                path.strip_prefix(base).map_or(path, |rest| rest.trim_start_matches('/')).to_owned()
            })
            .collect())
    }

    fn describe(&self) -> String {
        self.location.clone()
    }
}
