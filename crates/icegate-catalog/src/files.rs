//! The file operations the catalog needs from object storage: metadata files written before a
//! commit and removed when it loses, metadata read on register, and purges. `icegate-storage`
//! implements it with `object_store`, reaching each warehouse's storage with its profile.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::Result;
use crate::store::Warehouse;

/// A shared document as the bytes of a file write, without copying it.
pub fn shared_bytes(document: &Arc<str>) -> Bytes {
    struct Shared(Arc<str>);
    impl AsRef<[u8]> for Shared {
        fn as_ref(&self) -> &[u8] {
            self.0.as_bytes()
        }
    }
    Bytes::from_owner(Shared(document.clone()))
}

#[async_trait]
pub trait FileIo: Send + Sync + 'static {
    /// Writes a new file; fails if one exists at `location` already.
    async fn write_new(&self, warehouse: &Warehouse, location: &str, bytes: Bytes) -> Result<()>;
    /// Reads a whole file of at most `max_bytes` (a larger one is refused with `BadRequest`
    /// before its content is read; a missing one is `BadRequest` too).
    async fn read(&self, warehouse: &Warehouse, location: &str, max_bytes: u64) -> Result<Vec<u8>>;
    /// The size of the file at `location` (inside the storage root), `None` when there is none.
    async fn size_of(&self, warehouse: &Warehouse, location: &str) -> Result<Option<u64>> {
        let _ = (warehouse, location);
        Err(crate::CatalogError::bad_request("this storage cannot tell a file's size"))
    }
    /// Deletes one file; a missing file is not an error.
    async fn delete(&self, warehouse: &Warehouse, location: &str) -> Result<()>;
    /// Deletes at most `max_files` files below `prefix` (a directory location: `prefix/...`,
    /// never a sibling such as `prefix-2/...`), and answers what went and whether nothing is left
    /// below it. Object stores delete in bulk (S3 `DeleteObjects`, 1,000 keys a call); a local
    /// directory is walked without following links (a link is removed, its target kept).
    async fn delete_some_below(&self, warehouse: &Warehouse, prefix: &str, max_files: usize) -> Result<Deleted>;
    /// Lists the files below `prefix` (a directory location: `prefix/...`, never a sibling such
    /// as `prefix-2/...`), at most `max_files`; `complete` says whether that was all of them. A
    /// local directory is walked without following links, and only regular files are listed.
    async fn list_below(&self, warehouse: &Warehouse, prefix: &str, max_files: usize) -> Result<Listing>;
    /// Lists the files below `prefix` (a directory location, or `root` itself) inside `root`: a
    /// source location the catalog checked (adoption reads from it, read-only). As
    /// [`list_below`](Self::list_below), without the storage-root check the catalog made itself.
    async fn list_source(&self, warehouse: &Warehouse, root: &str, prefix: &str, max_files: usize) -> Result<Listing> {
        let _ = (warehouse, root, prefix, max_files);
        Err(crate::CatalogError::bad_request("this storage cannot read source locations"))
    }
    /// The last `bytes` bytes of `file` (listed by [`list_source`](Self::list_source) below
    /// `root`), as it was listed: a file whose ETag (S3) or size and modification time (local)
    /// changed since is refused with `Conflict`; one that is gone with `BadRequest`.
    async fn read_source_tail(
        &self,
        warehouse: &Warehouse,
        root: &str,
        file: &ListedFile,
        bytes: u64,
    ) -> Result<Bytes> {
        let _ = (warehouse, root, file, bytes);
        Err(crate::CatalogError::bad_request("this storage cannot read source locations"))
    }
    /// Deletes these files (in bulk where the store can: S3 `DeleteObjects`); a missing file is
    /// not an error.
    async fn delete_many(&self, warehouse: &Warehouse, locations: &[String]) -> Result<()> {
        for location in locations {
            self.delete(warehouse, location).await?;
        }
        Ok(())
    }
}

/// A file found by [`FileIo::list_below`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    pub location: String,
    pub size: u64,
    /// Its last-modified time (ms since the epoch), as the store reports it.
    pub modified_ms: i64,
    /// The store's ETag (S3); empty where it has none (local files).
    pub etag: String,
}

/// What one [`FileIo::list_below`] call found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub files: Vec<ListedFile>,
    /// Every file below the prefix is listed.
    pub complete: bool,
}

/// What one [`FileIo::delete_some_below`] call deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    pub files: u64,
    pub bytes: u64,
    /// Nothing is left below the prefix.
    pub complete: bool,
}
