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
    /// Deletes one file; a missing file is not an error.
    async fn delete(&self, warehouse: &Warehouse, location: &str) -> Result<()>;
    /// Deletes every file below `prefix` (a directory location) and returns how many.
    async fn delete_prefix(&self, warehouse: &Warehouse, prefix: &str) -> Result<usize>;
}
