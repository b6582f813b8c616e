//! What a table's clients get to reach its files: vended credentials or the signing
//! configuration for the caller's level (on loadTable, createTable, registerTable and the
//! credentials endpoint), and remote signing of one request.

use std::collections::BTreeMap;

use super::{SnapshotMode, TableIdent, TableResult, Tables};
use crate::access::Privilege;
use crate::audit::AuditEvent;
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::service::Catalog;
use crate::storage::{Delegation, SignRequest, SignResult, TableAccessRequest, TableStorageAccess};
use crate::store::TabularKind;

/// Everything but RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Percent-encodes one path segment of a catalog route.
fn segment(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, SEGMENT).to_string()
}

/// Who asks for a table's files and how: what vending needs besides the table itself (the
/// table's path names the refresh endpoint).
#[derive(Debug, Clone, Copy)]
pub struct StorageRequest<'a> {
    pub prefix: &'a WarehouseId,
    pub table: &'a TableIdent,
    /// What the client asked for (`X-Iceberg-Access-Delegation`).
    pub delegation: Delegation,
    /// The `Host` the client reached the catalog at: the base of the refresh endpoint unless
    /// `server.public_url` is set.
    pub host: Option<&'a str>,
}

impl StorageRequest<'_> {
    fn table_path(&self) -> String {
        let namespace = self.table.namespace.encoded();
        format!("v1/{}/namespaces/{}/tables/{}", segment(self.prefix), segment(&namespace), segment(&self.table.name))
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
}

impl Tables<'_> {
    /// Client configuration and vended credentials for a loaded (or created) table, at the
    /// level the service decided for the caller (`result.access`, which only a decision makes),
    /// as its warehouse's profile says; nothing for warehouses without object storage, or for a
    /// result no decision gave access to its files.
    /// Every credential handed out is noted in `ctx` for the request's audit record (the
    /// prefix, the level, the expiry and the access key id; never a secret).
    pub async fn storage_access(
        &self,
        ctx: &RequestContext,
        result: &TableResult,
        request: &StorageRequest<'_>,
    ) -> Result<TableStorageAccess> {
        self.storage_access_as(ctx, result, request, false).await
    }

    async fn storage_access_as(
        &self,
        ctx: &RequestContext,
        result: &TableResult,
        request: &StorageRequest<'_>,
        refresh: bool,
    ) -> Result<TableStorageAccess> {
        let Some(vendor) = self.vendor() else { return Ok(TableStorageAccess::default()) };
        let Some(grant) = result.access else { return Ok(TableStorageAccess::default()) };
        if result.warehouse.storage_profile.s3().is_none() {
            return Ok(TableStorageAccess::default());
        }
        let locations = self.table_locations(result).await?;
        let read_only = self.read_only_locations(result).await?;
        let table_path = request.table_path();
        let base_url = self.base_url(request.host);
        let access = TableAccessRequest {
            warehouse: &result.warehouse,
            locations: &locations,
            read_only: &read_only,
            access: grant.level(),
            delegation: request.delegation,
            table_path: &table_path,
            base_url: &base_url,
            principal: match ctx.caller() {
                crate::actors::Caller::Principal { id, name, .. } => Some((id.as_str(), name.as_str())),
                _ => None,
            },
        };
        let storage = vendor.table_access(&access).await?;
        for (prefix, config) in &storage.credentials {
            ctx.note(AuditEvent::Vended {
                tabular_id: result.id.clone(),
                prefix: prefix.clone(),
                level: grant.level(),
                expires_at_ms: config.get("s3.session-token-expires-at-ms").and_then(|v| v.parse().ok()),
                access_key_id: config.get("s3.access-key-id").cloned(),
                refresh,
            });
        }
        Ok(storage)
    }

    /// loadCredentials: fresh credentials for the table's locations, whatever the delegation
    /// header says (asking for credentials is asking for them).
    pub async fn credentials(
        &self,
        ctx: &RequestContext,
        request: &StorageRequest<'_>,
    ) -> Result<Vec<(String, BTreeMap<String, String>)>> {
        let result = self.load(ctx, request.prefix, request.table, SnapshotMode::All).await?;
        let request =
            StorageRequest { delegation: Delegation { vended_credentials: true, ..Delegation::default() }, ..*request };
        Ok(self.storage_access_as(ctx, &result, &request, true).await?.credentials)
    }

    /// signRequest: signs one request to object storage if it stays inside the table's
    /// locations and within what the caller's privileges give (`read`: reads only).
    pub async fn sign_request(
        &self,
        ctx: &RequestContext,
        (prefix, table): (&WarehouseId, &TableIdent),
        sign: SignRequest,
    ) -> Result<SignResult> {
        let result = self.load(ctx, prefix, table, SnapshotMode::All).await?;
        let vendor = self
            .vendor()
            .ok_or_else(|| CatalogError::bad_request("this server does not serve object storage"))?
            .clone();
        let grant = result.access.ok_or_else(|| CatalogError::Forbidden("no access to this table's files".into()))?;
        let locations = self.table_locations(&result).await?;
        let read_only = self.read_only_locations(&result).await?;
        let signed = vendor.sign(&result.warehouse, &locations, &read_only, grant.level(), sign).await?;
        ctx.note(AuditEvent::Signed {
            tabular_id: result.id.clone(),
            method: signed.operation.clone(),
            bucket: signed.bucket.clone(),
            key: signed.key.clone(),
            level: grant.level(),
        });
        Ok(signed)
    }

    /// The storage access to hand out again with a replayed createTable or registerTable answer
    /// (an `Idempotency-Key` retry): `None` when the table is gone or another one has its name
    /// now (`table_uuid` is the one the first answer was about), else the table with the level
    /// decided as for a load, by what the caller holds now: read-write with `write`, read with
    /// `read`. The creator of a table (which may hold only `create`) is answered read-write as it
    /// first was only while it still holds `create` there, the table is exactly what it created
    /// (`unchanged`: same metadata file, so the same locations) and it replaced nothing
    /// (`overwrite`); `None` too when the caller holds none of these.
    pub async fn replayed(
        &self,
        ctx: &RequestContext,
        request: &StorageRequest<'_>,
        table_uuid: &str,
        first_metadata_location: &str,
        overwrite: bool,
    ) -> Result<Option<TableResult>> {
        let table = request.table;
        let warehouse = self.warehouse_for_prefix(request.prefix).await?;
        let target =
            crate::authorization::tabular_target(&warehouse, &table.namespace, &table.name, TabularKind::Table);
        // Decided before the table is read.
        let Some(allowed) = ctx.holds(&target, Privilege::Describe).await? else { return Ok(None) };
        let mut result = match self.current_table(warehouse, table, SnapshotMode::All).await {
            Ok(result) => result,
            Err(CatalogError::NotFound { .. }) => return Ok(None),
            Err(other) => return Err(other),
        };
        #[derive(serde::Deserialize)]
        struct Uuid {
            #[serde(rename = "table-uuid")]
            table_uuid: String,
        }
        let current: Uuid = serde_json::from_str(&result.metadata_json)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("stored metadata lacks a table-uuid: {e}")))?;
        if current.table_uuid != table_uuid {
            return Ok(None); // dropped and made anew since: not the table the first answer was about
        }
        let unchanged = result.metadata_location.as_deref() == Some(first_metadata_location);
        // Decided (by a cached decision) about another table of that name, or about none: decided
        // again about this one; nothing to hand out when the name means yet another one.
        let object = result.id.clone().unwrap_or_default();
        let gone = || CatalogError::no_such_table(table);
        let allowed = match ctx.confirm(&target, Privilege::Describe, allowed, &object, gone, gone).await {
            Ok(allowed) => allowed,
            Err(CatalogError::NotFound { .. } | CatalogError::Forbidden(_)) => return Ok(None),
            Err(other) => return Err(other),
        };
        // The creator only while it may still create there (`create` on the namespace).
        result.access = allowed.file_grant_as(unchanged && !overwrite);
        Ok(result.access.is_some().then_some(result))
    }
}
