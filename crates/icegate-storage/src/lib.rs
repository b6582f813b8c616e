//! Object storage for icegate's own I/O (metadata files, purges), through `object_store`.
//!
//! Only `file://` locations are served so far; `s3://` arrives with storage profiles and will
//! build its store from the warehouse's credentials.

use std::sync::Arc;

use async_trait::async_trait;
use futures::TryStreamExt;
use icegate_catalog::files::FileIo;
use icegate_catalog::{CatalogError, Result};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

/// `FileIo` over `object_store`.
pub struct ObjectStoreIo {
    local: Arc<LocalFileSystem>,
}

impl Default for ObjectStoreIo {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectStoreIo {
    pub fn new() -> Self {
        Self { local: Arc::new(LocalFileSystem::new()) }
    }

    fn resolve(&self, location: &str) -> Result<(Arc<LocalFileSystem>, Path)> {
        let Some(path) = location.strip_prefix("file://") else {
            return Err(CatalogError::bad_request(format!(
                "unsupported storage location {location}: only file:// is served"
            )));
        };
        let path = Path::from_absolute_path(path)
            .map_err(|e| CatalogError::bad_request(format!("invalid file location {location}: {e}")))?;
        Ok((self.local.clone(), path))
    }
}

fn io_error(what: &str, location: &str, err: object_store::Error) -> CatalogError {
    CatalogError::Internal(anyhow::Error::new(err).context(format!("{what} {location}")))
}

#[async_trait]
impl FileIo for ObjectStoreIo {
    async fn write_new(&self, location: &str, bytes: Vec<u8>) -> Result<()> {
        let (store, path) = self.resolve(location)?;
        let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
        store.put_opts(&path, PutPayload::from(bytes), options).await.map_err(|e| io_error("writing", location, e))?;
        Ok(())
    }

    async fn read(&self, location: &str) -> Result<Vec<u8>> {
        let (store, path) = self.resolve(location)?;
        match store.get(&path).await {
            Ok(result) => Ok(result.bytes().await.map_err(|e| io_error("reading", location, e))?.to_vec()),
            Err(object_store::Error::NotFound { .. }) => {
                Err(CatalogError::bad_request(format!("file does not exist: {location}")))
            }
            Err(e) => Err(io_error("reading", location, e)),
        }
    }

    async fn delete(&self, location: &str) -> Result<()> {
        let (store, path) = self.resolve(location)?;
        match store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io_error("deleting", location, e)),
        }
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<usize> {
        let (store, path) = self.resolve(prefix)?;
        let files: Vec<Path> = store
            .list(Some(&path))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|e| io_error("listing", prefix, e))?;
        for file in &files {
            match store.delete(file).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(io_error("deleting", prefix, e)),
            }
        }
        // object_store leaves empty directories behind on a local file system.
        if let Some(dir) = prefix.strip_prefix("file://") {
            remove_empty_dirs(std::path::Path::new(dir)).await;
        }
        Ok(files.len())
    }
}

/// Removes `dir` and its subdirectories if they hold no files (best effort).
async fn remove_empty_dirs(dir: &std::path::Path) {
    let dir = dir.to_owned();
    let _ = tokio::task::spawn_blocking(move || {
        fn prune(dir: &std::path::Path) -> bool {
            let Ok(entries) = std::fs::read_dir(dir) else { return false };
            let mut empty = true;
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() && !path.is_symlink() {
                    empty &= prune(&path);
                } else {
                    empty = false;
                }
            }
            empty && std::fs::remove_dir(dir).is_ok()
        }
        prune(&dir)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_are_written_once_read_and_purged_by_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let io = ObjectStoreIo::new();
        let root = format!("file://{}", dir.path().display());
        let table = format!("{root}/ns/t1");
        io.write_new(&format!("{table}/metadata/00000-a.metadata.json"), b"{}".to_vec()).await.unwrap();
        io.write_new(&format!("{table}/data/x.parquet"), b"data".to_vec()).await.unwrap();
        io.write_new(&format!("{root}/ns/t10/keep.txt"), b"other table".to_vec()).await.unwrap();
        assert!(io.write_new(&format!("{table}/data/x.parquet"), b"again".to_vec()).await.is_err(), "no overwrite");
        assert_eq!(io.read(&format!("{table}/data/x.parquet")).await.unwrap(), b"data");
        assert!(matches!(io.read(&format!("{table}/nope")).await, Err(CatalogError::BadRequest(_))));

        assert_eq!(io.delete_prefix(&table).await.unwrap(), 2);
        assert!(!dir.path().join("ns/t1").exists(), "the table directory is gone");
        assert!(dir.path().join("ns/t10/keep.txt").exists(), "a sibling with a common name prefix survives");
        io.delete(&format!("{table}/missing")).await.unwrap();
    }

    #[test]
    fn only_file_locations_are_served() {
        assert!(ObjectStoreIo::new().resolve("s3://bucket/x").is_err());
    }
}
