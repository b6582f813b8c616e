//! Object storage for icegate: its own I/O (metadata files, purges) through `object_store`, and,
//! for S3 warehouses, credential vending (STS session policies scoped to one table) and remote
//! signing.
//!
//! `file://` warehouses use the local file system. `s3://` warehouses reach their bucket with
//! the profile's credentials; the clients for a profile are built once and cached by warehouse
//! id and profile version, so a profile update takes effect on the next request.

pub mod archive;
pub mod glue;
mod local;
mod policy;
mod s3;
mod sign;
mod vending;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use icegate_catalog::files::{Deleted, FileIo, ListedFile, Listing};
use icegate_catalog::storage::SecretCipher;
use icegate_catalog::store::Warehouse;
use icegate_catalog::{CatalogError, Result};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

pub use policy::session_policy;
pub use vending::StorageMetrics;

use crate::s3::S3Access;

/// One profile version's S3 clients, built once on first use.
type S3Cell = Arc<tokio::sync::OnceCell<Arc<S3Access>>>;

/// `FileIo` and `CredentialVendor` over `object_store` and the AWS SDK.
pub struct ObjectStoreIo {
    local: Arc<LocalFileSystem>,
    cipher: SecretCipher,
    /// S3 clients by (warehouse id, profile version).
    s3: Mutex<HashMap<(icegate_catalog::WarehouseId, i64), S3Cell>>,
    vending: vending::Vending,
    /// Sync local files (and their directory entries) before a write returns.
    local_sync: bool,
}

impl Default for ObjectStoreIo {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectStoreIo {
    /// Local files only (no cipher: S3 profiles with static keys cannot be opened).
    pub fn new() -> Self {
        Self::with_cipher(SecretCipher::unconfigured(), StorageMetrics::default())
    }

    pub fn with_cipher(cipher: SecretCipher, metrics: StorageMetrics) -> Self {
        Self {
            local: Arc::new(LocalFileSystem::new()),
            cipher,
            s3: Mutex::default(),
            vending: vending::Vending::new(metrics),
            local_sync: true,
        }
    }

    /// Whether local files are synced to disk before a write returns (the default), so a
    /// commit acknowledged on a `file://` warehouse survives a power failure like the database
    /// row that references its file. Off, a write is as fast as the page cache.
    pub fn with_local_sync(mut self, sync: bool) -> Self {
        self.local_sync = sync;
        self
    }

    /// The cached S3 clients of a warehouse's current profile.
    async fn s3_access(&self, warehouse: &Warehouse) -> Result<Arc<S3Access>> {
        let cell = {
            let mut clients = self.s3.lock().expect("s3 client cache");
            // Older versions of this warehouse's profile are never asked for again.
            clients.retain(|(id, version), _| id != &warehouse.id || *version == warehouse.profile_version);
            clients.entry((warehouse.id.clone(), warehouse.profile_version)).or_default().clone()
        };
        cell.get_or_try_init(|| async { S3Access::new(warehouse, &self.cipher).await.map(Arc::new) }).await.cloned()
    }

    /// The warehouse's S3 store and the key of `location` in its bucket (no storage-root check:
    /// the caller checked the location against a source location).
    async fn resolve_s3(&self, warehouse: &Warehouse, location: &str) -> Result<(Arc<dyn ObjectStore>, Path)> {
        if !location.starts_with("s3://") || !warehouse.storage_root.as_str().starts_with("s3://") {
            return Err(CatalogError::bad_request(format!(
                "{location} is not in the warehouse's storage ({})",
                warehouse.storage_root
            )));
        }
        let access = self.s3_access(warehouse).await?;
        let key = access.key_of(location)?;
        let path = Path::parse(key).map_err(|e| CatalogError::bad_request(format!("invalid S3 key {key}: {e}")))?;
        Ok((access.store.clone(), path))
    }

    async fn resolve(&self, warehouse: &Warehouse, location: &str) -> Result<(Arc<dyn ObjectStore>, Path)> {
        if !location.starts_with(&format!("{}/", warehouse.storage_root.as_str())) {
            return Err(CatalogError::bad_request(format!(
                "{location} lies outside the warehouse's storage root {}",
                warehouse.storage_root
            )));
        }
        if let Some(path) = location.strip_prefix("file://") {
            let path = Path::from_absolute_path(path)
                .map_err(|e| CatalogError::bad_request(format!("invalid file location {location}: {e}")))?;
            return Ok((self.local.clone(), path));
        }
        self.resolve_s3(warehouse, location).await
    }
}

/// A local walk's files as a listing (local files have no ETag: size and mtime tell changes).
fn local_listing((found, complete): (Vec<local::ListedFile>, bool)) -> Listing {
    let files = found
        .into_iter()
        .map(|(location, size, modified_ms)| ListedFile { location, size, modified_ms, etag: String::new() })
        .collect();
    Listing { files, complete }
}

/// At most `max_files` objects below `path` (the key of `prefix`), named by their locations.
/// `list` matches whole path segments: `prefix/...`, never `prefix-2/...`.
async fn list_store(store: &dyn ObjectStore, path: &Path, prefix: &str, max_files: usize) -> Result<Listing> {
    let listed: Vec<object_store::ObjectMeta> = store
        .list(Some(path))
        .take(max_files.saturating_add(1))
        .try_collect()
        .await
        .map_err(|e| io_error("listing", prefix, e))?;
    let complete = listed.len() <= max_files;
    let base = path.as_ref().to_owned();
    let files = listed
        .into_iter()
        .take(max_files)
        .filter_map(|meta| {
            let rest = meta.location.as_ref().strip_prefix(base.as_str())?.strip_prefix('/')?;
            Some(ListedFile {
                location: format!("{prefix}/{rest}"),
                size: meta.size,
                modified_ms: meta.last_modified.timestamp_millis(),
                etag: meta.e_tag.clone().unwrap_or_default(),
            })
        })
        .collect();
    Ok(Listing { files, complete })
}

/// `location` is the source location `root` or lies below it, in whole path segments, with
/// no `.` or `..` segment (object keys may hold them; a source never reaches outside itself).
fn within_source(root: &str, location: &str) -> Result<()> {
    let rest = if location == root {
        ""
    } else {
        location
            .strip_prefix(root)
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| CatalogError::bad_request(format!("{location} lies outside the source location {root}")))?
    };
    if !rest.is_empty() && rest.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
        return Err(CatalogError::bad_request(format!("{location} has an empty, `.` or `..` segment")));
    }
    Ok(())
}

/// Runs a local file operation (see `local`: never through a link) on the blocking pool; a
/// failure is logged in full and answered as unavailable storage.
async fn local_io<T: Send + 'static>(
    what: &'static str,
    location: &str,
    operation: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(operation).await {
        Ok(Ok(value)) => Ok(value),
        // A path the file system cannot hold fails the same way at every retry: a 400 naming
        // it, not a 503 inviting the client to try again.
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::InvalidFilename => Err(CatalogError::bad_request(format!(
            "{location} is longer than the file system allows ({e}); use shorter names or a shorter location"
        ))),
        Ok(Err(e)) => {
            tracing::warn!(%location, error = %e, "local storage failed {what}");
            Err(CatalogError::Unavailable(format!("local storage failed {what} {location}")))
        }
        Err(e) => Err(CatalogError::Internal(anyhow::anyhow!("{what} {location}: {e}"))),
    }
}

/// Storage failures are 503s the client may retry: the catalog changed nothing. The cause is
/// logged in full; the client gets a one-line reason.
fn io_error(what: &str, location: &str, err: object_store::Error) -> CatalogError {
    tracing::warn!(%location, error = %err, "object storage failed {what}");
    let reason = match &err {
        object_store::Error::Generic { source, .. } if source.to_string().contains("timed out") => "timed out",
        object_store::Error::Generic { .. } => "request failed",
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => "access denied",
        _ => "request failed",
    };
    CatalogError::Unavailable(format!("object storage {reason} {what} {location}"))
}

#[async_trait]
impl FileIo for ObjectStoreIo {
    async fn write_new(&self, warehouse: &Warehouse, location: &str, bytes: bytes::Bytes) -> Result<()> {
        let (store, path) = self.resolve(warehouse, location).await?;
        if location.starts_with("file://") {
            let (root, owned, sync) =
                (warehouse.storage_root.as_str().to_owned(), location.to_owned(), self.local_sync);
            return local_io("writing", location, move || local::write_new(&root, &owned, &bytes, sync)).await;
        }
        let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
        store.put_opts(&path, PutPayload::from(bytes), options).await.map_err(|e| io_error("writing", location, e))?;
        Ok(())
    }

    async fn read(&self, warehouse: &Warehouse, location: &str, max_bytes: u64) -> Result<Vec<u8>> {
        let (store, path) = self.resolve(warehouse, location).await?;
        if location.starts_with("file://") {
            let (root, owned) = (warehouse.storage_root.as_str().to_owned(), location.to_owned());
            let read = local_io("reading", location, move || local::read(&root, &owned, max_bytes)).await?;
            return match read {
                local::Found::Bytes(bytes) => Ok(bytes),
                local::Found::Missing => Err(CatalogError::bad_request(format!("file does not exist: {location}"))),
                local::Found::TooLarge(size) => Err(CatalogError::bad_request(format!(
                    "{location} is {size} bytes, larger than the catalog's limit of {max_bytes} \
                     (catalog.max_metadata_bytes)"
                ))),
                local::Found::NotAFile => Err(CatalogError::bad_request(format!("not a regular file: {location}"))),
            };
        }
        match store.get(&path).await {
            Ok(result) if result.meta.size > max_bytes => Err(CatalogError::bad_request(format!(
                "{location} is {} bytes, larger than the catalog's limit of {max_bytes} \
                     (catalog.max_metadata_bytes)",
                result.meta.size
            ))),
            Ok(result) => Ok(result.bytes().await.map_err(|e| io_error("reading", location, e))?.to_vec()),
            Err(object_store::Error::NotFound { .. }) => {
                Err(CatalogError::bad_request(format!("file does not exist: {location}")))
            }
            Err(e) => Err(io_error("reading", location, e)),
        }
    }

    async fn size_of(&self, warehouse: &Warehouse, location: &str) -> Result<Option<u64>> {
        let (store, path) = self.resolve(warehouse, location).await?;
        if location.starts_with("file://") {
            let (root, owned) = (warehouse.storage_root.as_str().to_owned(), location.to_owned());
            // Read nothing: a file of any size but zero is too large for zero bytes.
            let found = local_io("reading", location, move || local::read(&root, &owned, 0)).await?;
            return Ok(match found {
                local::Found::Bytes(_) => Some(0),
                local::Found::TooLarge(size) => Some(size),
                local::Found::Missing | local::Found::NotAFile => None,
            });
        }
        match store.head(&path).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(io_error("reading", location, e)),
        }
    }

    async fn delete(&self, warehouse: &Warehouse, location: &str) -> Result<()> {
        let (store, path) = self.resolve(warehouse, location).await?;
        if location.starts_with("file://") {
            let (root, owned) = (warehouse.storage_root.as_str().to_owned(), location.to_owned());
            return local_io("deleting", location, move || local::delete(&root, &owned)).await;
        }
        match store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io_error("deleting", location, e)),
        }
    }

    async fn delete_many(&self, warehouse: &Warehouse, locations: &[String]) -> Result<()> {
        let Some(first) = locations.first() else { return Ok(()) };
        if first.starts_with("file://") {
            for location in locations {
                self.delete(warehouse, location).await?;
            }
            return Ok(());
        }
        let mut store = None;
        let mut paths = Vec::with_capacity(locations.len());
        for location in locations {
            let (resolved, path) = self.resolve(warehouse, location).await?;
            store.get_or_insert(resolved);
            paths.push(Ok(path));
        }
        let Some(store) = store else { return Ok(()) };
        let mut results = store.delete_stream(futures::stream::iter(paths).boxed());
        while let Some(result) = results.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(io_error("deleting", first, e)),
            }
        }
        Ok(())
    }

    async fn list_below(&self, warehouse: &Warehouse, prefix: &str, max_files: usize) -> Result<Listing> {
        let prefix = prefix.trim_end_matches('/');
        let (store, path) = self.resolve(warehouse, prefix).await?;
        if prefix.starts_with("file://") {
            let (root, owned) = (warehouse.storage_root.as_str().to_owned(), prefix.to_owned());
            let listed = local_io("listing", prefix, move || local::list_below(&root, &owned, max_files)).await?;
            return Ok(local_listing(listed));
        }
        list_store(store.as_ref(), &path, prefix, max_files).await
    }

    async fn list_source(&self, warehouse: &Warehouse, root: &str, prefix: &str, max_files: usize) -> Result<Listing> {
        let (root, prefix) = (root.trim_end_matches('/'), prefix.trim_end_matches('/'));
        within_source(root, prefix)?;
        if prefix.starts_with("file://") {
            let (root, owned) = (root.to_owned(), prefix.to_owned());
            let listed = tokio::task::spawn_blocking(move || local::list_source(&root, &owned, max_files))
                .await
                .map_err(|e| CatalogError::Internal(anyhow::anyhow!("listing {prefix}: {e}")))?;
            return match listed {
                Ok(found) => Ok(local_listing(found)),
                // A link (or a file) where a directory of the source should be: never followed.
                Err(e)
                    if [rustix::io::Errno::LOOP, rustix::io::Errno::NOTDIR]
                        .iter()
                        .any(|n| e.raw_os_error() == Some(n.raw_os_error())) =>
                {
                    Err(CatalogError::bad_request(format!(
                        "{prefix} is reached through a symbolic link or is not a directory: sources are read \
                         without following links"
                    )))
                }
                Err(e) => {
                    tracing::warn!(location = %prefix, error = %e, "local storage failed listing");
                    Err(CatalogError::Unavailable(format!("local storage failed listing {prefix}")))
                }
            };
        }
        let (store, path) = self.resolve_s3(warehouse, prefix).await?;
        list_store(store.as_ref(), &path, prefix, max_files).await
    }

    async fn read_source_tail(
        &self,
        warehouse: &Warehouse,
        root: &str,
        file: &ListedFile,
        bytes: u64,
    ) -> Result<bytes::Bytes> {
        let root = root.trim_end_matches('/');
        let location = file.location.as_str();
        within_source(root, location)?;
        if location == root {
            return Err(CatalogError::bad_request(format!(
                "{location} is the source location itself, not a file in it"
            )));
        }
        let changed = || CatalogError::Conflict(format!("{location} changed while it was read"));
        if location.starts_with("file://") {
            let (root, owned, listed) = (root.to_owned(), location.to_owned(), (file.size, file.modified_ms));
            let read = tokio::task::spawn_blocking(move || local::read_tail(&root, &owned, listed, bytes))
                .await
                .map_err(|e| CatalogError::Internal(anyhow::anyhow!("reading {location}: {e}")))?;
            return match read {
                Ok(Some(tail)) => Ok(bytes::Bytes::from(tail)),
                Ok(None) => Err(CatalogError::bad_request(format!("file does not exist: {location}"))),
                Err(e) if e.kind() == std::io::ErrorKind::StaleNetworkFileHandle => Err(changed()),
                Err(e) => {
                    tracing::warn!(%location, error = %e, "local storage failed reading");
                    Err(CatalogError::Unavailable(format!("local storage failed reading {location}")))
                }
            };
        }
        let (store, path) = self.resolve_s3(warehouse, location).await?;
        let options = object_store::GetOptions {
            range: Some(object_store::GetRange::Suffix(bytes.min(file.size.max(1)))),
            if_match: (!file.etag.is_empty()).then(|| file.etag.clone()),
            ..Default::default()
        };
        match store.get_opts(&path, options).await {
            Ok(result) if result.meta.size != file.size => Err(changed()),
            Ok(result) => result.bytes().await.map_err(|e| io_error("reading", location, e)),
            Err(object_store::Error::Precondition { .. }) => Err(changed()),
            Err(object_store::Error::NotFound { .. }) => {
                Err(CatalogError::bad_request(format!("file does not exist: {location}")))
            }
            Err(e) => Err(io_error("reading", location, e)),
        }
    }

    async fn delete_some_below(&self, warehouse: &Warehouse, prefix: &str, max_files: usize) -> Result<Deleted> {
        let (store, path) = self.resolve(warehouse, prefix).await?;
        if prefix.starts_with("file://") {
            let (root, owned) = (warehouse.storage_root.as_str().to_owned(), prefix.to_owned());
            let (files, bytes, complete) =
                local_io("deleting", prefix, move || local::delete_below(&root, &owned, max_files)).await?;
            return Ok(Deleted { files: files as u64, bytes, complete });
        }
        // `list` matches whole path segments: `prefix/...`, never `prefix-2/...`.
        let listed: Vec<object_store::ObjectMeta> =
            store.list(Some(&path)).take(max_files).try_collect().await.map_err(|e| io_error("listing", prefix, e))?;
        let complete = listed.len() < max_files;
        let bytes = listed.iter().map(|meta| meta.size).sum();
        let files = listed.len() as u64;
        let paths = futures::stream::iter(listed.into_iter().map(|meta| Ok(meta.location))).boxed();
        // Bulk deletes (S3 DeleteObjects); a key already gone is not an error.
        let mut results = store.delete_stream(paths);
        while let Some(result) = results.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(io_error("deleting", prefix, e)),
            }
        }
        Ok(Deleted { files, bytes, complete })
    }
}

#[cfg(test)]
mod tests {
    use icegate_catalog::storage::StorageProfile;
    use icegate_catalog::{StorageRoot, WarehouseName};

    use super::*;

    fn warehouse(root: &str) -> Warehouse {
        Warehouse {
            id: icegate_catalog::WarehouseId::new("w"),
            name: WarehouseName::parse("w").unwrap(),
            storage_root: StorageRoot::parse(root).unwrap(),
            storage_profile: StorageProfile::File,
            profile_version: 1,
            settings: icegate_catalog::store::WarehouseSettings::default(),
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    #[tokio::test]
    async fn files_are_written_once_read_and_purged_by_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let io = ObjectStoreIo::new();
        let root = format!("file://{}", dir.path().display());
        let wh = &warehouse(&root);
        let table = format!("{root}/ns/t1");
        io.write_new(wh, &format!("{table}/metadata/00000-a.metadata.json"), bytes::Bytes::from_static(b"{}"))
            .await
            .unwrap();
        io.write_new(wh, &format!("{table}/data/x.parquet"), bytes::Bytes::from_static(b"data")).await.unwrap();
        io.write_new(wh, &format!("{root}/ns/t10/keep.txt"), bytes::Bytes::from_static(b"other table")).await.unwrap();
        assert!(
            io.write_new(wh, &format!("{table}/data/x.parquet"), bytes::Bytes::from_static(b"again")).await.is_err(),
            "no overwrite"
        );
        assert_eq!(io.read(wh, &format!("{table}/data/x.parquet"), 4).await.unwrap(), b"data");
        assert!(matches!(io.read(wh, &format!("{table}/data/x.parquet"), 3).await, Err(CatalogError::BadRequest(_))));
        assert!(matches!(io.read(wh, &format!("{table}/nope"), 4).await, Err(CatalogError::BadRequest(_))));

        // In bounded batches: one file, then the rest.
        let first = io.delete_some_below(wh, &table, 1).await.unwrap();
        assert_eq!((first.files, first.complete), (1, false));
        let rest = io.delete_some_below(wh, &table, 10).await.unwrap();
        assert_eq!((rest.files, rest.complete, first.bytes + rest.bytes), (1, true, 6));
        assert!(!dir.path().join("ns/t1").exists(), "the table directory is gone");
        assert_eq!(io.delete_some_below(wh, &table, 10).await.unwrap(), Deleted { files: 0, bytes: 0, complete: true });
        assert!(dir.path().join("ns/t10/keep.txt").exists(), "a sibling with a common name prefix survives");
        io.delete(wh, &format!("{table}/missing")).await.unwrap();
    }

    #[tokio::test]
    async fn nothing_outside_the_warehouse_root_is_touched() {
        let io = ObjectStoreIo::new();
        let wh = &warehouse("file:///tmp/icegate-root-check");
        for outside in ["file:///etc/passwd", "file:///tmp/icegate-root-check-other/x", "s3://bucket/x"] {
            assert!(io.read(wh, outside, 1024).await.is_err(), "{outside}");
        }
    }
}
