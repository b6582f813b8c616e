//! Management API: warehouses (`/management/v1/warehouses`).

use axum::extract::State;
use axum::http::StatusCode;
use icegate_catalog::storage::{
    S3Credentials, S3Profile, SecretCipher, StorageProfile, StsSettings, UnsealedProfile, VendingMode,
};
use icegate_catalog::store::Warehouse;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Path};
use icegate_catalog::service::WarehouseView;

/// A warehouse: a named storage root that holds namespaces, tables and views.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct WarehouseResponse {
    /// Opaque, URL-safe id; clients use it as the `prefix` of `/v1/{prefix}/...`.
    pub id: String,
    pub name: String,
    /// Where the warehouse's files live (`file:///...` or `s3://bucket/prefix`).
    pub storage_root: String,
    /// How the storage is reached. Secrets are never returned.
    pub storage_profile: StorageProfileView,
    /// Grows with every profile change.
    pub profile_version: i64,
    /// The warehouse's settings (`PUT .../settings`).
    pub settings: WarehouseSettingsBody,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl From<Warehouse> for WarehouseResponse {
    fn from(w: Warehouse) -> Self {
        Self {
            id: w.id.into_string(),
            name: w.name.to_string(),
            storage_root: w.storage_root.to_string(),
            storage_profile: StorageProfileView::from(&w.storage_profile),
            profile_version: w.profile_version,
            settings: WarehouseSettingsBody {
                audit_record_reads: w.settings.audit_record_reads,
                credentials_max_lifetime_seconds: w.settings.credentials_max_lifetime_seconds,
                soft_delete_hold: w.settings.soft_delete_hold.map(format_period),
                purge_delay: w.settings.purge_delay.map(format_period),
                expire_max_snapshot_age: w.settings.expire_max_snapshot_age.map(format_period),
                expire_min_snapshots_to_keep: w.settings.expire_min_snapshots_to_keep,
                expire_max_ref_age: w.settings.expire_max_ref_age.map(format_period),
                orphan_older_than: w.settings.orphan_older_than.map(format_period),
                orphan_quarantine: w.settings.orphan_quarantine.map(format_period),
                orphan_interval: w.settings.orphan_interval.map(format_period),
                metadata_delete_after_commit: w.settings.metadata_delete_after_commit,
            },
            created_at_ms: w.created_at_ms,
            updated_at_ms: w.updated_at_ms,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CreateWarehouseRequest {
    /// 1-128 characters of `A-Z a-z 0-9 _ . -`, starting with a letter or digit; unique.
    pub name: String,
    /// An absolute `file://` URL, or `s3://bucket/key/prefix` with an `s3` storage profile.
    #[schema(example = "file:///var/lib/icegate/warehouse")]
    pub storage_root: String,
    /// Required for `s3://` roots; `file` (the default) otherwise.
    pub storage_profile: Option<StorageProfileInput>,
}

/// A storage profile as given by an operator (secrets in plain text, sealed before storing).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StorageProfileInput {
    /// The local file system.
    File,
    S3(S3ProfileInput),
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct S3ProfileInput {
    #[schema(example = "us-east-1")]
    pub region: String,
    /// For S3-compatible stores: `https://host:port`.
    pub endpoint: Option<String>,
    #[serde(default)]
    pub path_style_access: bool,
    /// The server's own credentials: for its metadata I/O, STS calls and signing.
    pub credentials: S3CredentialsInput,
    pub sts: Option<StsInput>,
    /// `sts` (default): short-lived credentials scoped to one table; `remote-signing`: clients
    /// get no credentials and ask the catalog to sign each request; `static`: clients get the
    /// warehouse's own keys, unscoped (an explicit opt-in for stores without STS).
    #[schema(value_type = Option<String>, example = "sts")]
    pub vending: Option<VendingMode>,
    /// Whether a loadTable without `X-Iceberg-Access-Delegation` gets credentials (default true).
    pub delegate_by_default: Option<bool>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum S3CredentialsInput {
    /// An access key pair; the secret is encrypted at rest and never returned.
    #[serde(rename_all = "kebab-case")]
    Static { access_key_id: String, secret_access_key: String },
    /// The server process's AWS default credential chain.
    DefaultChain,
}

#[derive(Debug, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StsInput {
    /// The role assumed for vended credentials (required for vending mode `sts`).
    pub role_arn: Option<String>,
    /// STS endpoint for S3-compatible stores (defaults to the S3 endpoint, else AWS's).
    pub endpoint: Option<String>,
    pub external_id: Option<String>,
    /// 900-43200; default 3600.
    pub session_duration_seconds: Option<u32>,
    /// Tag each session with the principal it is for (`icegate-principal`,
    /// `icegate-principal-id`, `icegate-warehouse`); the role's trust policy must allow
    /// `sts:TagSession`. Default false.
    pub session_tags: Option<bool>,
    /// Set each session's source identity to the principal's name; the role's trust policy must
    /// allow `sts:SetSourceIdentity`. Default false.
    pub source_identity: Option<bool>,
}

impl UnsealedProfile for StorageProfileInput {
    /// The domain profile, with its secret sealed.
    fn seal(self, cipher: &SecretCipher) -> Result<StorageProfile, icegate_catalog::CatalogError> {
        Ok(match self {
            Self::File => StorageProfile::File,
            Self::S3(s3) => {
                let credentials = match s3.credentials {
                    S3CredentialsInput::Static { access_key_id, secret_access_key } => {
                        S3Credentials::Static { access_key_id, secret_access_key: cipher.seal(&secret_access_key)? }
                    }
                    S3CredentialsInput::DefaultChain => S3Credentials::DefaultChain,
                };
                let sts = s3.sts.unwrap_or_default();
                let defaults = StsSettings::default();
                StorageProfile::S3(S3Profile {
                    region: s3.region,
                    endpoint: s3.endpoint,
                    path_style_access: s3.path_style_access,
                    credentials,
                    sts: StsSettings {
                        role_arn: sts.role_arn,
                        endpoint: sts.endpoint,
                        external_id: sts.external_id,
                        session_duration_seconds: sts
                            .session_duration_seconds
                            .unwrap_or(defaults.session_duration_seconds),
                        session_tags: sts.session_tags.unwrap_or(false),
                        source_identity: sts.source_identity.unwrap_or(false),
                    },
                    vending: s3.vending.unwrap_or_default(),
                    delegate_by_default: s3.delegate_by_default.unwrap_or(true),
                })
            }
        })
    }
}

/// A stored storage profile without its secrets; fields that do not apply to its type are absent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct StorageProfileView {
    /// `file` or `s3`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_style_access: Option<bool>,
    /// `static` or `default-chain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_role_arn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_session_duration_seconds: Option<u32>,
    /// Whether an STS external id is set (the value is not returned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_external_id_set: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_session_tags: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_source_identity: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vending: Option<String>,
    /// True for vending mode `static`: clients receive the warehouse's own, unscoped keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vends_unscoped_keys: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delegate_by_default: Option<bool>,
}

impl StorageProfileView {
    /// The type of a profile only, for callers that do not administer its warehouse.
    fn redacted(kind: &str) -> Self {
        let mut view = Self::from(&StorageProfile::File);
        view.kind = kind.to_owned();
        view
    }
}

impl From<&StorageProfile> for StorageProfileView {
    fn from(profile: &StorageProfile) -> Self {
        match profile {
            StorageProfile::File => Self {
                kind: "file".into(),
                region: None,
                endpoint: None,
                path_style_access: None,
                credentials_type: None,
                access_key_id: None,
                sts_role_arn: None,
                sts_endpoint: None,
                sts_session_duration_seconds: None,
                sts_external_id_set: None,
                sts_session_tags: None,
                sts_source_identity: None,
                vending: None,
                vends_unscoped_keys: None,
                delegate_by_default: None,
            },
            StorageProfile::S3(s3) => Self {
                kind: "s3".into(),
                region: Some(s3.region.clone()),
                endpoint: s3.endpoint.clone(),
                path_style_access: Some(s3.path_style_access),
                credentials_type: Some(
                    match s3.credentials {
                        S3Credentials::Static { .. } => "static",
                        S3Credentials::DefaultChain => "default-chain",
                    }
                    .into(),
                ),
                access_key_id: match &s3.credentials {
                    S3Credentials::Static { access_key_id, .. } => Some(access_key_id.clone()),
                    S3Credentials::DefaultChain => None,
                },
                sts_role_arn: s3.sts.role_arn.clone(),
                sts_endpoint: s3.sts.endpoint.clone(),
                sts_session_duration_seconds: Some(s3.sts.session_duration_seconds),
                sts_external_id_set: Some(s3.sts.external_id.is_some()),
                sts_session_tags: Some(s3.sts.session_tags),
                sts_source_identity: Some(s3.sts.source_identity),
                vending: Some(s3.vending.as_str().into()),
                vends_unscoped_keys: Some(s3.vending == VendingMode::Static),
                delegate_by_default: Some(s3.delegate_by_default),
            },
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ListWarehousesResponse {
    pub warehouses: Vec<WarehouseResponse>,
}

/// Create a warehouse
#[utoipa::path(
    post,
    path = "/management/v1/warehouses",
    tag = "Warehouses",
    operation_id = "createWarehouse",
    request_body = CreateWarehouseRequest,
    responses(
        (status = 201, description = "The warehouse was created", body = WarehouseResponse),
        (status = 400, description = "Invalid name, storage root or profile, or the storage check failed", body = IcebergErrorResponse),
        (status = 409, description = "A warehouse of that name exists", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn create_warehouse(
    State(state): State<AppState>,
    Context(ctx): Context,
    Json(request): Json<CreateWarehouseRequest>,
) -> Result<(StatusCode, Json<WarehouseResponse>), ApiError> {
    let profile = request.storage_profile.unwrap_or(StorageProfileInput::File);
    let warehouse = state.catalog.warehouses().create(&ctx, &request.name, &request.storage_root, profile).await?;
    Ok((StatusCode::CREATED, Json(warehouse.into())))
}

/// Replace a warehouse's storage profile
///
/// The new profile is checked like on create (a probe object written, read and deleted, and
/// one STS call for vending mode `sts`) before it replaces the old one. Credentials vended
/// under the old profile are not handed out again.
#[utoipa::path(
    put,
    path = "/management/v1/warehouses/{name}/storage-profile",
    tag = "Warehouses",
    operation_id = "updateStorageProfile",
    params(("name" = String, Path, description = "Warehouse name")),
    request_body = StorageProfileInput,
    responses(
        (status = 200, description = "The warehouse with its new profile", body = WarehouseResponse),
        (status = 400, description = "Invalid profile, or the storage check failed", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn update_storage_profile(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Json(profile): Json<StorageProfileInput>,
) -> Result<Json<WarehouseResponse>, ApiError> {
    Ok(Json(state.catalog.warehouses().update_storage_profile(&ctx, &name, profile).await?.into()))
}

/// A warehouse's settings. Every key is optional (a missing key takes its default); unknown
/// keys are refused.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WarehouseSettingsBody {
    /// Whether metadata reads in the warehouse (loads without credentials, listings, existence
    /// checks) are recorded in the audit trail (default true). Changes, refusals, credential
    /// vends and signatures are recorded whatever it says.
    #[serde(rename = "audit.record-reads", default = "default_true")]
    pub audit_record_reads: bool,
    /// The longest lifetime, in seconds, of credentials vended for the warehouse's tables
    /// (900-43200; absent: the storage profile's `sts.session-duration-seconds`). Refused for
    /// `static` vending, which no lifetime bounds.
    #[serde(rename = "credentials.max-lifetime-seconds", default, skip_serializing_if = "Option::is_none")]
    pub credentials_max_lifetime_seconds: Option<u32>,
    /// How long a dropped table or view stays restorable (`7d`, `36h`; `0s`: drops are final;
    /// absent: the server's `lifecycle.soft-delete.hold`). A namespace property of the same name
    /// overrides it for the tables below that namespace.
    #[serde(rename = "lifecycle.soft-delete.hold", default, skip_serializing_if = "Option::is_none")]
    pub soft_delete_hold: Option<String>,
    /// How long the purge of a table dropped with `purgeRequested=true` waits (undrop works
    /// meanwhile; absent: the server's `lifecycle.purge.delay`, by default 0).
    #[serde(rename = "lifecycle.purge.delay", default, skip_serializing_if = "Option::is_none")]
    pub purge_delay: Option<String>,
    /// Snapshot expiry for tables that set no `history.expire.max-snapshot-age-ms` of their own
    /// (`7d`; absent: none). Namespace properties of the same names override these.
    #[serde(rename = "lifecycle.expire.max-snapshot-age", default, skip_serializing_if = "Option::is_none")]
    pub expire_max_snapshot_age: Option<String>,
    /// How many snapshots expiry keeps whatever their age (default 1).
    #[serde(rename = "lifecycle.expire.min-snapshots-to-keep", default, skip_serializing_if = "Option::is_none")]
    pub expire_min_snapshots_to_keep: Option<u32>,
    /// How old a branch or tag (not `main`) may grow before expiry removes it (absent: kept).
    #[serde(rename = "lifecycle.expire.max-ref-age", default, skip_serializing_if = "Option::is_none")]
    pub expire_max_ref_age: Option<String>,
    /// How old an unreferenced file must be before orphan removal quarantines it (default the
    /// server's `lifecycle.orphan.older_than`, 24h; never below `lifecycle.orphan.min_older_than`).
    #[serde(rename = "lifecycle.orphan.older-than", default, skip_serializing_if = "Option::is_none")]
    pub orphan_older_than: Option<String>,
    /// How long a quarantined file waits before it is deleted (default 7d); restorable meanwhile.
    #[serde(rename = "lifecycle.orphan.quarantine", default, skip_serializing_if = "Option::is_none")]
    pub orphan_quarantine: Option<String>,
    /// How often the catalog removes orphans of each table (absent: only when asked).
    #[serde(rename = "lifecycle.orphan.interval", default, skip_serializing_if = "Option::is_none")]
    pub orphan_interval: Option<String>,
    /// Metadata files that fall out of a table's metadata log (its
    /// `write.metadata.previous-versions-max`, default 100) are deleted after its commits, for
    /// tables that do not set `write.metadata.delete-after-commit.enabled` themselves.
    #[serde(rename = "lifecycle.metadata.delete-after-commit", default, skip_serializing_if = "Option::is_none")]
    pub metadata_delete_after_commit: Option<bool>,
}

use icegate_catalog::maintenance;

fn period(key: &str, value: Option<String>) -> Result<Option<std::time::Duration>, ApiError> {
    Ok(value.map(|v| icegate_catalog::lifecycle::parse_period(key, &v)).transpose()?)
}

fn format_period(period: std::time::Duration) -> String {
    humantime_serde::re::humantime::format_duration(period).to_string()
}

fn default_true() -> bool {
    true
}

/// Replace a warehouse's settings
///
/// Server admins only: the settings decide what the audit trail records of the warehouse. The
/// whole document is replaced (a key left out takes its default).
#[utoipa::path(
    put,
    path = "/management/v1/warehouses/{name}/settings",
    tag = "Warehouses",
    operation_id = "updateWarehouseSettings",
    params(("name" = String, Path, description = "Warehouse name")),
    request_body = WarehouseSettingsBody,
    responses(
        (status = 200, description = "The warehouse with its new settings", body = WarehouseResponse),
        (status = 400, description = "An unknown key or a wrong type", body = IcebergErrorResponse),
        (status = 403, description = "Not a server admin", body = IcebergErrorResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn update_settings(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
    Json(settings): Json<WarehouseSettingsBody>,
) -> Result<Json<WarehouseResponse>, ApiError> {
    let settings = icegate_catalog::store::WarehouseSettings {
        audit_record_reads: settings.audit_record_reads,
        credentials_max_lifetime_seconds: settings.credentials_max_lifetime_seconds,
        soft_delete_hold: settings
            .soft_delete_hold
            .map(|v| icegate_catalog::lifecycle::parse_period(icegate_catalog::lifecycle::HOLD_PROPERTY, &v))
            .transpose()?,
        purge_delay: settings
            .purge_delay
            .map(|v| icegate_catalog::lifecycle::parse_period(icegate_catalog::lifecycle::PURGE_DELAY_PROPERTY, &v))
            .transpose()?,
        expire_max_snapshot_age: period(maintenance::EXPIRE_MAX_AGE, settings.expire_max_snapshot_age)?,
        expire_min_snapshots_to_keep: settings.expire_min_snapshots_to_keep,
        expire_max_ref_age: period(maintenance::EXPIRE_MAX_REF_AGE, settings.expire_max_ref_age)?,
        orphan_older_than: period(maintenance::ORPHAN_OLDER_THAN, settings.orphan_older_than)?,
        orphan_quarantine: period(maintenance::ORPHAN_QUARANTINE, settings.orphan_quarantine)?,
        orphan_interval: period(maintenance::ORPHAN_INTERVAL, settings.orphan_interval)?,
        metadata_delete_after_commit: settings.metadata_delete_after_commit,
    };
    Ok(Json(state.catalog.warehouses().update_settings(&ctx, &name, settings).await?.into()))
}

/// List warehouses
#[utoipa::path(
    get,
    path = "/management/v1/warehouses",
    tag = "Warehouses",
    operation_id = "listWarehouses",
    responses(
        (status = 200, description = "Every warehouse, by name", body = ListWarehousesResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn list_warehouses(
    State(state): State<AppState>,
    Context(ctx): Context,
) -> Result<Json<ListWarehousesResponse>, ApiError> {
    let warehouses = state.catalog.warehouses().list(&ctx).await?;
    Ok(Json(ListWarehousesResponse { warehouses: warehouses.into_iter().map(shown).collect() }))
}

/// A warehouse as its viewer may see it: the storage profile's details (key id, role,
/// endpoints) only for those who administer the warehouse; others see its type.
fn shown(view: WarehouseView) -> WarehouseResponse {
    let mut response = WarehouseResponse::from(view.warehouse);
    if !view.administered {
        response.storage_profile = StorageProfileView::redacted(&response.storage_profile.kind);
    }
    response
}

/// Get a warehouse
#[utoipa::path(
    get,
    path = "/management/v1/warehouses/{name}",
    tag = "Warehouses",
    operation_id = "getWarehouse",
    params(("name" = String, Path, description = "Warehouse name")),
    responses(
        (status = 200, description = "The warehouse", body = WarehouseResponse),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn get_warehouse(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
) -> Result<Json<WarehouseResponse>, ApiError> {
    Ok(Json(shown(state.catalog.warehouses().get(&ctx, &name).await?)))
}

/// Delete an empty warehouse
#[utoipa::path(
    delete,
    path = "/management/v1/warehouses/{name}",
    tag = "Warehouses",
    operation_id = "deleteWarehouse",
    params(("name" = String, Path, description = "Warehouse name")),
    responses(
        (status = 204, description = "The warehouse was deleted"),
        (status = 404, description = "No such warehouse", body = IcebergErrorResponse),
        (status = 409, description = "The warehouse still holds namespaces", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn delete_warehouse(
    State(state): State<AppState>,
    Context(ctx): Context,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.catalog.warehouses().delete(&ctx, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
