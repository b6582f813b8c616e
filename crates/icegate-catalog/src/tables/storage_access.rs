//! What a table's clients get to reach its files: vended credentials or the signing
//! configuration for the caller's level (on loadTable, createTable, registerTable and the
//! credentials endpoint), and remote signing of one request.

use std::collections::BTreeMap;

use super::{SnapshotMode, TableResult};
use crate::error::{CatalogError, Result};
use crate::service::Catalog;
use crate::storage::{AccessLevel, Delegation, SignRequest, SignResult, TableAccessRequest, TableStorageAccess};

/// Everything but RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Percent-encodes one path segment of a catalog route.
fn segment(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, SEGMENT).to_string()
}

/// Who asks for a table's files and how: what vending needs besides the table itself. The
/// names are as the request's path gave them (they name the refresh endpoint).
#[derive(Debug, Clone, Copy)]
pub struct StorageRequest<'a> {
    pub prefix: &'a str,
    pub namespace: &'a str,
    pub table: &'a str,
    pub access: AccessLevel,
    /// What the client asked for (`X-Iceberg-Access-Delegation`).
    pub delegation: Delegation,
    /// The `Host` the client reached the catalog at: the base of the refresh endpoint unless
    /// `server.public_url` is set.
    pub host: Option<&'a str>,
}

impl StorageRequest<'_> {
    fn table_path(&self) -> String {
        format!("v1/{}/namespaces/{}/tables/{}", segment(self.prefix), segment(self.namespace), segment(self.table))
    }
}

impl Catalog {
    /// The catalog's base URL as clients should use it: `server.public_url`, else the Host the
    /// request came to.
    pub fn base_url(&self, host: Option<&str>) -> String {
        match self.public_url() {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("http://{}", host.unwrap_or("localhost")),
        }
    }

    /// Client configuration and vended credentials for a loaded (or created) table, as its
    /// warehouse's profile says; nothing for warehouses without object storage.
    pub async fn storage_access(
        &self,
        result: &TableResult,
        request: &StorageRequest<'_>,
    ) -> Result<TableStorageAccess> {
        let Some(vendor) = self.vendor() else { return Ok(TableStorageAccess::default()) };
        if result.warehouse.storage_profile.s3().is_none() {
            return Ok(TableStorageAccess::default());
        }
        let locations = self.table_locations(result).await?;
        let table_path = request.table_path();
        let base_url = self.base_url(request.host);
        let access = TableAccessRequest {
            warehouse: &result.warehouse,
            locations: &locations,
            access: request.access,
            delegation: request.delegation,
            table_path: &table_path,
            base_url: &base_url,
        };
        vendor.table_access(&access).await
    }

    /// loadCredentials: fresh credentials for the table's locations, whatever the delegation
    /// header says (asking for credentials is asking for them).
    pub async fn table_credentials(
        &self,
        request: &StorageRequest<'_>,
    ) -> Result<Vec<(String, BTreeMap<String, String>)>> {
        let result = self.load_table(request.prefix, request.namespace, request.table, SnapshotMode::All).await?;
        let request =
            StorageRequest { delegation: Delegation { vended_credentials: true, ..Delegation::default() }, ..*request };
        Ok(self.storage_access(&result, &request).await?.credentials)
    }

    /// signRequest: signs one request to object storage if it stays inside the table's
    /// locations and within the caller's `access` level.
    pub async fn sign_table_request(
        &self,
        (prefix, namespace, table): (&str, &str, &str),
        access: AccessLevel,
        sign: SignRequest,
    ) -> Result<SignResult> {
        let vendor = self
            .vendor()
            .ok_or_else(|| CatalogError::bad_request("this server does not serve object storage"))?
            .clone();
        let result = self.load_table(prefix, namespace, table, SnapshotMode::All).await?;
        let locations = self.table_locations(&result).await?;
        vendor.sign(&result.warehouse, &locations, access, sign).await
    }
}
