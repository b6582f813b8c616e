//! Storage profiles (how icegate and its clients reach a warehouse's files), the secret cipher
//! that keeps their keys encrypted at rest, and the contract of credential vending.
//!
//! A warehouse's storage root says *where* (`file:///...` or `s3://bucket/prefix`); its profile
//! says *how*: region, endpoint, the server's own credentials, STS settings and the vending mode.
//! `icegate-storage` implements [`CredentialVendor`] for S3.

use std::collections::BTreeMap;
use std::fmt;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Nonce};
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::error::{CatalogError, Result};
use crate::store::Warehouse;

/// AWS limits for `AssumeRole`'s `DurationSeconds`.
pub const MIN_SESSION_SECONDS: u32 = 900;
pub const MAX_SESSION_SECONDS: u32 = 43_200;

/// How a warehouse's storage is reached. `File` is the local file system (no credentials).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StorageProfile {
    #[default]
    File,
    S3(S3Profile),
}

impl StorageProfile {
    pub fn s3(&self) -> Option<&S3Profile> {
        match self {
            Self::S3(profile) => Some(profile),
            Self::File => None,
        }
    }
}

/// An S3 (or S3-compatible) storage profile. Bucket and key prefix are the warehouse's
/// `s3://bucket/prefix` storage root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct S3Profile {
    pub region: String,
    /// For S3-compatible stores (MinIO, Ceph, ...): `https://host:port`. Absent for AWS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub path_style_access: bool,
    /// The server's own credentials, used for its own I/O, for STS calls and for signing.
    pub credentials: S3Credentials,
    #[serde(default)]
    pub sts: StsSettings,
    #[serde(default)]
    pub vending: VendingMode,
    /// Whether a loadTable without `X-Iceberg-Access-Delegation` gets credentials anyway.
    #[serde(default = "yes")]
    pub delegate_by_default: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum S3Credentials {
    /// An access key pair. The secret is stored sealed (see [`SecretCipher`]).
    #[serde(rename_all = "kebab-case")]
    Static { access_key_id: String, secret_access_key: Secret },
    /// The AWS default provider chain of the server's process (environment, profile, web
    /// identity, container and instance metadata).
    DefaultChain,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StsSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
    /// STS endpoint for S3-compatible stores; AWS's regional endpoint otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default = "default_session_seconds")]
    pub session_duration_seconds: u32,
    /// Tag each session with the principal it is for (`icegate-principal`,
    /// `icegate-principal-id`, `icegate-warehouse`): the role's trust policy must allow
    /// `sts:TagSession`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session_tags: bool,
    /// Set each session's source identity to the principal's name: the role's trust policy must
    /// allow `sts:SetSourceIdentity`; AWS keeps it through role chaining and logs it in
    /// CloudTrail.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub source_identity: bool,
}

fn default_session_seconds() -> u32 {
    3600
}

impl Default for StsSettings {
    fn default() -> Self {
        Self {
            role_arn: None,
            endpoint: None,
            external_id: None,
            session_duration_seconds: default_session_seconds(),
            session_tags: false,
            source_identity: false,
        }
    }
}

/// What clients get to reach table files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum VendingMode {
    /// Short-lived STS credentials with a session policy scoped to the table.
    #[default]
    Sts,
    /// No credentials: clients ask `/sign` to sign each request, and only in-table requests are.
    RemoteSigning,
    /// The warehouse's own keys, unscoped. An explicit opt-in for stores without STS.
    Static,
}

impl VendingMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sts => "sts",
            Self::RemoteSigning => "remote-signing",
            Self::Static => "static",
        }
    }
}

/// A secret as stored: sealed by [`SecretCipher`]. Never printed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn sealed(value: String) -> Self {
        Self(value)
    }

    pub fn as_sealed(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(**redacted**)")
    }
}

const SEALED_PREFIX: &str = "aes256gcm:v1:";

/// AES-256-GCM with a key from configuration (`secrets.encryption_key`). Sealed values carry a
/// random 96-bit nonce and a version tag: `aes256gcm:v1:<base64(nonce || ciphertext)>`.
#[derive(Clone)]
pub struct SecretCipher {
    cipher: Option<Aes256Gcm>,
}

impl fmt::Debug for SecretCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretCipher").field("configured", &self.cipher.is_some()).finish()
    }
}

impl SecretCipher {
    /// `key`: 32 bytes, base64; `None` leaves the cipher unconfigured (sealing then fails).
    pub fn from_base64(key: Option<&str>) -> std::result::Result<Self, String> {
        let Some(key) = key.map(str::trim).filter(|k| !k.is_empty()) else { return Ok(Self { cipher: None }) };
        let bytes = STANDARD.decode(key).map_err(|e| format!("not base64: {e}"))?;
        if bytes.len() != 32 {
            return Err(format!("must decode to 32 bytes, got {}", bytes.len()));
        }
        let cipher = Aes256Gcm::new_from_slice(&bytes).map_err(|e| e.to_string())?;
        Ok(Self { cipher: Some(cipher) })
    }

    pub fn unconfigured() -> Self {
        Self { cipher: None }
    }

    pub fn is_configured(&self) -> bool {
        self.cipher.is_some()
    }

    pub fn seal(&self, plaintext: &str) -> Result<Secret> {
        let cipher = self.cipher.as_ref().ok_or_else(|| {
            CatalogError::bad_request(
                "storing a secret needs an encryption key: set secrets.encryption_key \
                 (ICEGATE__SECRETS__ENCRYPTION_KEY, 32 random bytes in base64) on the server, \
                 or use credentials of type default-chain",
            )
        })?;
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ciphertext = cipher
            .encrypt(&nonce, plaintext.as_bytes())
            .map_err(|_| CatalogError::Internal(anyhow::anyhow!("sealing a secret failed")))?;
        let mut packed = nonce.to_vec();
        packed.extend_from_slice(&ciphertext);
        Ok(Secret(format!("{SEALED_PREFIX}{}", STANDARD.encode(packed))))
    }

    pub fn open(&self, secret: &Secret) -> Result<String> {
        let broken = |why: &str| CatalogError::Internal(anyhow::anyhow!("cannot open a stored secret: {why}"));
        let cipher = self.cipher.as_ref().ok_or_else(|| broken("secrets.encryption_key is not configured"))?;
        let packed = secret
            .0
            .strip_prefix(SEALED_PREFIX)
            .ok_or_else(|| broken("unknown format"))
            .and_then(|b| STANDARD.decode(b).map_err(|_| broken("not base64")))?;
        if packed.len() < 12 + 16 {
            return Err(broken("too short"));
        }
        let (nonce, ciphertext) = packed.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().map_err(|_| broken("bad nonce"))?;
        let plain = cipher
            .decrypt(&Nonce::from(nonce), ciphertext)
            .map_err(|_| broken("wrong encryption key or corrupted value"))?;
        String::from_utf8(plain).map_err(|_| broken("not UTF-8"))
    }
}

/// The access a caller's privileges give to a table's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccessLevel {
    Read,
    ReadWrite,
}

impl AccessLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::ReadWrite => "read-write",
        }
    }
}

/// A storage profile whose secrets are still in plain text, as an operator gives it: the
/// catalog seals them with its configured key (`secrets.encryption_key`) before the profile is
/// checked or stored.
pub trait UnsealedProfile: Send {
    fn seal(self, cipher: &SecretCipher) -> Result<StorageProfile>;
}

/// A profile without secrets to seal (or sealed already).
impl UnsealedProfile for StorageProfile {
    fn seal(self, _: &SecretCipher) -> Result<StorageProfile> {
        Ok(self)
    }
}

/// What the client asked for in `X-Iceberg-Access-Delegation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Delegation {
    /// The header was absent: the warehouse's default applies.
    pub unspecified: bool,
    pub vended_credentials: bool,
    pub remote_signing: bool,
}

impl Delegation {
    pub fn parse(header: Option<&str>) -> Self {
        let Some(header) = header else { return Self { unspecified: true, ..Self::default() } };
        let mut delegation = Self::default();
        for mode in header.split(',').map(str::trim) {
            match mode {
                "vended-credentials" => delegation.vended_credentials = true,
                "remote-signing" => delegation.remote_signing = true,
                _ => {}
            }
        }
        delegation
    }
}

/// The files of one table: its base location and, when set, `write.data.path` and
/// `write.metadata.path`. Every entry is a directory location without a trailing slash.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableLocations(Vec<String>);

impl TableLocations {
    /// Sorted, without duplicates and without entries inside another entry.
    pub fn new(locations: impl IntoIterator<Item = String>) -> Self {
        let mut all: Vec<String> = locations.into_iter().map(|l| l.trim_end_matches('/').to_owned()).collect();
        all.sort();
        all.dedup();
        let mut kept: Vec<String> = Vec::with_capacity(all.len());
        for location in all {
            if !kept.iter().any(|k| location.starts_with(k.as_str()) && location[k.len()..].starts_with('/')) {
                kept.push(location);
            }
        }
        Self(kept)
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// Whether `location` (a file or directory) lies inside one of the table's locations.
    pub fn contains(&self, location: &str) -> bool {
        self.0.iter().any(|l| location.strip_prefix(l.as_str()).is_some_and(|rest| rest.starts_with('/')))
    }
}

/// Configuration a client needs for a table's storage, plus credentials when vended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableStorageAccess {
    /// Merged into loadTable's `config`.
    pub config: BTreeMap<String, String>,
    /// `storage-credentials`: (prefix, config) pairs.
    pub credentials: Vec<(String, BTreeMap<String, String>)>,
    /// `remote-signing-config`, when the client is to sign through the catalog (newer clients
    /// read it; older ones the `signer.*` keys of `config`, which are sent too).
    pub remote_signing: Option<RemoteSigningConfig>,
}

/// What a remote-signing client passes to the signer: static properties for every sign
/// request's `properties`, and static headers for every request to the signing endpoint.
/// icegate's signer needs neither (the table is in the endpoint's path and the caller is
/// authenticated by its token), so both are empty: the client signs at the spec's default
/// endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteSigningConfig {
    pub properties: BTreeMap<String, String>,
    pub headers: BTreeMap<String, Vec<String>>,
}

/// The table a loadTable-like request is about: where its files are, who may do what, what the
/// client asked for, and its catalog routes (for refresh and signing endpoints).
#[derive(Debug, Clone)]
pub struct TableAccessRequest<'a> {
    pub warehouse: &'a Warehouse,
    pub locations: &'a TableLocations,
    /// Where the table's adopted files lie (its adoptions' sources): read, never written,
    /// whatever `access`.
    pub read_only: &'a TableLocations,
    pub access: AccessLevel,
    pub delegation: Delegation,
    /// `v1/{prefix}/namespaces/{ns}/tables/{table}`, URL-encoded, no leading slash.
    pub table_path: &'a str,
    /// The catalog's base URL as the client reached it (`http://host:port`).
    pub base_url: &'a str,
    /// Who the credentials are for: the principal's id and name (`None`: authentication off, or
    /// the system). STS sessions carry it (session name; tags and source identity as the
    /// profile says), so the store's own logs name the principal.
    pub principal: Option<(&'a str, &'a str)>,
}

/// A request to sign (the spec's `RemoteSignRequest`).
#[derive(Debug, Clone)]
pub struct SignRequest {
    pub region: String,
    pub uri: String,
    pub method: String,
    pub headers: BTreeMap<String, Vec<String>>,
    pub body: Option<String>,
}

#[derive(Debug, Clone)]
pub struct SignResult {
    pub uri: String,
    pub headers: BTreeMap<String, Vec<String>>,
    /// What was signed, for the record: the S3 operation, the bucket and the object key (empty
    /// for the bucket itself).
    pub operation: String,
    pub bucket: String,
    pub key: String,
}

/// Credential vending and request signing for tables in object storage.
#[async_trait]
pub trait CredentialVendor: Send + Sync + 'static {
    /// Checks a profile before it is stored: a probe object written, read and deleted under the
    /// storage root, and one STS call when the profile vends through STS.
    async fn validate(&self, warehouse: &Warehouse) -> Result<()>;
    /// Client configuration and, as the warehouse's mode and the request say, credentials for
    /// exactly this table.
    async fn table_access(&self, request: &TableAccessRequest<'_>) -> Result<TableStorageAccess>;
    /// Signs one request for a table of `warehouse` if it stays inside `locations` and within
    /// the `access` level, or reads inside `read_only` (an adopted table's sources).
    async fn sign(
        &self,
        warehouse: &Warehouse,
        locations: &TableLocations,
        read_only: &TableLocations,
        access: AccessLevel,
        sign: SignRequest,
    ) -> Result<SignResult>;
}

/// What `governance.strict` refuses in `profile` for warehouse `name` among `warehouses` (the
/// others' identities; its own entry, if listed, is skipped): vending `static`, or an identity
/// another warehouse has. `None` when nothing.
pub fn segregation_problem(
    name: &crate::ident::WarehouseName,
    profile: &StorageProfile,
    warehouses: &[crate::store::Warehouse],
) -> Option<String> {
    let s3 = profile.s3()?;
    if s3.vending == VendingMode::Static {
        return Some("vending `static` hands every client the warehouse's own keys".into());
    }
    warehouses.iter().filter(|other| other.name != *name).find_map(|other| {
        shared_identity(profile, &other.storage_profile)
            .map(|shared| format!("{shared} is warehouse {}'s too", other.name))
    })
}

/// The storage identity two profiles share, if any: the STS role they vend through, or the
/// static access key they act with (named, never the secret).
fn shared_identity(a: &StorageProfile, b: &StorageProfile) -> Option<String> {
    let (a, b) = (a.s3()?, b.s3()?);
    if let (Some(x), Some(y)) = (&a.sts.role_arn, &b.sts.role_arn)
        && x == y
        && a.vending == VendingMode::Sts
        && b.vending == VendingMode::Sts
    {
        return Some(format!("role {x}"));
    }
    if let (S3Credentials::Static { access_key_id: x, .. }, S3Credentials::Static { access_key_id: y, .. }) =
        (&a.credentials, &b.credentials)
        && x == y
    {
        return Some(format!("access key {x}"));
    }
    None
}

/// An endpoint the operator allows warehouse admins to point a profile at
/// (`storage.allowed_endpoints`): scheme, host and port of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedEndpoint {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl AllowedEndpoint {
    pub fn parse(url: &str) -> std::result::Result<Self, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(format!("{url:?} is not an http(s) URL with a host"));
        }
        Ok(Self {
            scheme: parsed.scheme().to_owned(),
            host: parsed.host_str().unwrap_or_default().to_ascii_lowercase(),
            port: parsed.port_or_known_default(),
        })
    }

    fn matches(&self, url: &str) -> bool {
        Self::parse(url).is_ok_and(|other| other == *self)
    }

    /// Whether `url` is at this endpoint (scheme, host and port).
    pub fn allows(&self, url: &str) -> bool {
        self.matches(url)
    }
}

/// Why storing `profile` needs admin on the server, not only on the warehouse: it makes the
/// server act with its own cloud identity (the default credential chain reaches whatever the
/// server's role reaches, other warehouses included), it hands clients unscoped keys (`static`
/// vending), or it points the server's signed requests at an endpoint the operator has not
/// allowed (server-side request forgery). Empty when a warehouse admin may store it.
pub fn server_admin_reasons(profile: &StorageProfile, allowed: &[AllowedEndpoint]) -> Vec<String> {
    let Some(s3) = profile.s3() else { return Vec::new() };
    let mut reasons = Vec::new();
    if s3.credentials == S3Credentials::DefaultChain {
        reasons.push("credentials of type default-chain use the server's own identity".to_owned());
    }
    if s3.vending == VendingMode::Static {
        reasons.push("vending mode static hands clients the warehouse's own, unscoped keys".to_owned());
    }
    for (what, url) in [("endpoint", &s3.endpoint), ("sts.endpoint", &s3.sts.endpoint)] {
        if let Some(url) = url
            && !allowed.iter().any(|a| a.matches(url))
        {
            reasons.push(format!("{what} {url} is not in storage.allowed_endpoints"));
        }
    }
    reasons
}

/// Validates a profile against its storage root and seals nothing (the caller seals secrets).
pub fn validate_profile(root: &crate::ident::StorageRoot, profile: &StorageProfile) -> Result<()> {
    let bad = |why: String| CatalogError::bad_request(format!("invalid storage profile: {why}"));
    match (profile, root.scheme()) {
        (StorageProfile::File, "file") => Ok(()),
        (StorageProfile::File, scheme) => {
            Err(bad(format!("an {scheme}:// storage root needs a storage profile of type {scheme}")))
        }
        (StorageProfile::S3(_), scheme) if scheme != "s3" => {
            Err(bad(format!("an s3 profile needs an s3:// storage root, not {scheme}://")))
        }
        (StorageProfile::S3(s3), _) => {
            let region_ok = !s3.region.is_empty()
                && s3.region.len() <= 64
                && s3.region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !region_ok {
                return Err(bad(format!("region {:?} is not a region name such as us-east-1", s3.region)));
            }
            for (what, url) in [("endpoint", &s3.endpoint), ("sts.endpoint", &s3.sts.endpoint)] {
                if let Some(url) = url {
                    let ok = (url.starts_with("https://") || url.starts_with("http://"))
                        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
                    if !ok {
                        return Err(bad(format!("{what} {url:?} must be an http(s) URL")));
                    }
                }
            }
            if let S3Credentials::Static { access_key_id, .. } = &s3.credentials
                && (access_key_id.is_empty() || access_key_id.len() > 128 || !access_key_id.is_ascii())
            {
                return Err(bad("credentials.access-key-id must be 1-128 ASCII characters".into()));
            }
            let duration = s3.sts.session_duration_seconds;
            if !(MIN_SESSION_SECONDS..=MAX_SESSION_SECONDS).contains(&duration) {
                return Err(bad(format!(
                    "sts.session-duration-seconds must be between {MIN_SESSION_SECONDS} and \
                     {MAX_SESSION_SECONDS}, got {duration}"
                )));
            }
            match (&s3.vending, &s3.sts.role_arn) {
                (VendingMode::Sts, None) => Err(bad("vending mode sts needs sts.role-arn".into())),
                (_, Some(arn)) if !arn.starts_with("arn:") || arn.len() > 2048 => {
                    Err(bad(format!("sts.role-arn {arn:?} is not an ARN")))
                }
                _ => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> String {
        STANDARD.encode([7u8; 32])
    }

    #[test]
    fn sealed_secrets_open_with_the_same_key_only() {
        let cipher = SecretCipher::from_base64(Some(&key())).unwrap();
        let sealed = cipher.seal("wJalrXUtnFEMI").unwrap();
        assert!(!sealed.as_sealed().contains("wJalrXUtnFEMI"));
        assert_ne!(sealed, cipher.seal("wJalrXUtnFEMI").unwrap(), "a fresh nonce every time");
        assert_eq!(cipher.open(&sealed).unwrap(), "wJalrXUtnFEMI");
        let other = SecretCipher::from_base64(Some(&STANDARD.encode([8u8; 32]))).unwrap();
        assert!(other.open(&sealed).is_err());
        assert!(!format!("{sealed:?}").contains(sealed.as_sealed()));
        assert!(SecretCipher::unconfigured().seal("x").is_err());
        assert!(SecretCipher::from_base64(Some("c2hvcnQ=")).is_err());
    }

    #[test]
    fn table_locations_drop_nested_entries() {
        let locations = TableLocations::new([
            "s3://b/wh/t/data".to_owned(),
            "s3://b/wh/t/".to_owned(),
            "s3://b/elsewhere/t-data".to_owned(),
            "s3://b/wh/t2".to_owned(),
        ]);
        assert_eq!(locations.as_slice(), ["s3://b/elsewhere/t-data", "s3://b/wh/t", "s3://b/wh/t2"]);
        assert!(locations.contains("s3://b/wh/t/data/x.parquet"));
        assert!(!locations.contains("s3://b/wh/t"));
        assert!(!locations.contains("s3://b/wh/t3/x"));
    }

    #[test]
    fn delegation_header_is_a_list() {
        let d = Delegation::parse(Some("vended-credentials, remote-signing"));
        assert!(d.vended_credentials && d.remote_signing && !d.unspecified);
        assert!(Delegation::parse(None).unspecified);
        assert!(!Delegation::parse(Some("other")).vended_credentials);
    }
}
