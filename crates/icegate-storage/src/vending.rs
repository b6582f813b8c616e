//! Credential vending: STS `AssumeRole` with an inline session policy per (profile version,
//! location set, access level), cached for at most half the credential's validity, with
//! concurrent misses coalesced into one STS call. Failures are not cached.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use icegate_catalog::storage::{
    AccessLevel, CredentialVendor, SignRequest, SignResult, TableAccessRequest, TableLocations, TableStorageAccess,
    VendingMode,
};
use icegate_catalog::store::Warehouse;
use icegate_catalog::{CatalogError, Result};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};

use crate::ObjectStoreIo;
use crate::s3::S3Access;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VendLabels {
    mode: &'static str,
    access: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SignLabels {
    outcome: &'static str,
}

/// Prometheus metrics of vending and signing.
#[derive(Clone)]
pub struct StorageMetrics {
    vends: Family<VendLabels, Counter>,
    cache_hits: Counter,
    sts_calls: Counter,
    sts_failures: Counter,
    sts_latency: Histogram,
    signs: Family<SignLabels, Counter>,
}

impl Default for StorageMetrics {
    fn default() -> Self {
        Self {
            vends: Family::default(),
            cache_hits: Counter::default(),
            sts_calls: Counter::default(),
            sts_failures: Counter::default(),
            sts_latency: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            signs: Family::default(),
        }
    }
}

impl StorageMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register("vended_credentials", "Storage credentials handed to clients", self.vends.clone());
        registry.register("vended_credentials_cache_hits", "Vends served from the cache", self.cache_hits.clone());
        registry.register("sts_assume_role_calls", "STS AssumeRole calls", self.sts_calls.clone());
        registry.register("sts_assume_role_failures", "Failed STS AssumeRole calls", self.sts_failures.clone());
        registry.register("sts_assume_role_duration_seconds", "STS AssumeRole latency", self.sts_latency.clone());
        registry.register("remote_sign_requests", "Remote signing requests by outcome", self.signs.clone());
    }
}

/// Credentials from one AssumeRole call.
#[derive(Clone)]
pub(crate) struct Minted {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    expires_at_ms: i64,
    /// Handed out again until this instant: half the remaining validity at minting time.
    reuse_until: Instant,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CacheKey {
    warehouse_id: icegate_catalog::WarehouseId,
    profile_version: i64,
    /// The warehouse's cap on credentials' lifetime (a new cap mints anew).
    max_lifetime_seconds: Option<u32>,
    access: AccessLevel,
    locations: TableLocations,
    /// Read only, whatever `access` (an adopted table's sources).
    read_only: TableLocations,
    /// The principal the session is for (id, name): its name is in the session's name (and,
    /// as the profile says, its tags and source identity), so each principal gets its own.
    principal: Option<(String, String)>,
}

type Cell = Arc<tokio::sync::OnceCell<Arc<Minted>>>;

pub(crate) struct Vending {
    cache: Mutex<HashMap<CacheKey, Cell>>,
    metrics: StorageMetrics,
}

/// Entries beyond this are pruned of stale ones (and, if still too many, cleared).
const MAX_CACHE_ENTRIES: usize = 50_000;

impl Vending {
    pub(crate) fn new(metrics: StorageMetrics) -> Self {
        Self { cache: Mutex::default(), metrics }
    }

    /// A fresh-enough cached credential, or one minted by `mint`; concurrent misses for one key
    /// share one `mint`. Returns whether it came from the cache.
    async fn get_or_mint<F, Fut>(&self, key: CacheKey, mint: F) -> Result<(Arc<Minted>, bool)>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Minted>>,
    {
        let now = Instant::now();
        let cell = {
            let mut cache = self.cache.lock().expect("credential cache");
            if cache.len() >= MAX_CACHE_ENTRIES {
                cache.retain(|_, cell| cell.get().is_some_and(|m| m.reuse_until > now));
                if cache.len() >= MAX_CACHE_ENTRIES {
                    cache.clear();
                }
            }
            let cell = cache.entry(key.clone()).or_default();
            if cell.get().is_some_and(|m| m.reuse_until <= now) {
                *cell = Cell::default();
            }
            cell.clone()
        };
        let mut minted_here = false;
        let value = cell
            .get_or_try_init(|| {
                minted_here = true;
                async { mint().await.map(Arc::new) }
            })
            .await?
            .clone();
        Ok((value, !minted_here))
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Object keys of a table's locations in the warehouse's bucket.
fn location_keys(access: &S3Access, locations: &TableLocations) -> Result<Vec<String>> {
    locations.as_slice().iter().map(|l| access.key_of(l).map(str::to_owned)).collect()
}

/// Characters STS allows in a session name and a source identity (`[\w+=,.@-]`); others become `_`.
fn sts_safe(value: &str, max: usize) -> String {
    value.chars().map(|c| if c.is_ascii_alphanumeric() || "_+=,.@-".contains(c) { c } else { '_' }).take(max).collect()
}

/// Characters STS accepts in a tag value everywhere (ASCII letters, digits, spaces and
/// `_.:/=+-@`); others become `_`. Names that differ only there read alike: policies that must
/// tell principals apart use `icegate-principal-id` (or the source identity, the id too).
fn tag_safe(value: &str) -> String {
    value
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == ' ' || "_.:/=+-@".contains(c) { c } else { '_' })
        .take(256)
        .collect()
}

/// A role session name (64 characters at most): `icegate-`, the level, the principal's name
/// (up to 32 characters, what the store's logs show: CloudTrail's `userIdentity.arn` ends with
/// it) and a digest of the warehouse, the locations and the principal's id, which tells
/// sessions apart.
fn session_name(key: &CacheKey) -> String {
    let mut hasher = Sha256::new();
    hasher.update(key.warehouse_id.as_bytes());
    for location in key.locations.as_slice() {
        hasher.update(location.as_bytes());
        hasher.update([0]);
    }
    hasher.update([1]);
    for location in key.read_only.as_slice() {
        hasher.update(location.as_bytes());
        hasher.update([0]);
    }
    if let Some((id, _)) = &key.principal {
        hasher.update(id.as_bytes());
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let level = if key.access == AccessLevel::Read { "r" } else { "rw" };
    match &key.principal {
        Some((_, name)) => format!("icegate-{level}-{}-{hex}", sts_safe(name, 32)),
        None => format!("icegate-{level}-{hex}"),
    }
}

impl ObjectStoreIo {
    async fn assume_role(&self, access: &S3Access, key: &CacheKey, warehouse: &str) -> Result<Minted> {
        let role_arn = access
            .profile
            .sts
            .role_arn
            .as_deref()
            .ok_or_else(|| CatalogError::bad_request("the storage profile has no sts.role-arn"))?;
        let policy = crate::policy::session_policy(
            &access.profile.region,
            &access.bucket,
            &location_keys(access, &key.locations)?,
            &location_keys(access, &key.read_only)?,
            key.access,
        )?;
        let duration = match key.max_lifetime_seconds {
            Some(cap) => access.profile.sts.session_duration_seconds.min(cap),
            None => access.profile.sts.session_duration_seconds,
        };
        let started = Instant::now();
        self.vending.metrics.sts_calls.inc();
        let mut call = access
            .sts
            .assume_role()
            .role_arn(role_arn)
            .role_session_name(session_name(key))
            .policy(policy)
            .duration_seconds(duration as i32);
        if let Some(external_id) = &access.profile.sts.external_id {
            call = call.external_id(external_id);
        }
        if let Some((id, name)) = &key.principal {
            if access.profile.sts.source_identity {
                // The principal's id: unique (a name made safe for STS may read like another's),
                // 36 characters of `[0-9a-f-]`, and what icegate's records name it by.
                call = call.source_identity(sts_safe(id, 64));
            }
            if access.profile.sts.session_tags {
                for (tag, value) in [
                    ("icegate-principal", name.as_str()),
                    ("icegate-principal-id", id.as_str()),
                    ("icegate-warehouse", warehouse),
                ] {
                    let tag = aws_sdk_sts::types::Tag::builder()
                        .key(tag)
                        .value(tag_safe(value))
                        .build()
                        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("an STS session tag: {e}")))?;
                    call = call.tags(tag);
                }
            }
        }
        let result = call.send().await;
        self.vending.metrics.sts_latency.observe(started.elapsed().as_secs_f64());
        let output = result.map_err(|e| {
            self.vending.metrics.sts_failures.inc();
            tracing::warn!(role = role_arn, error = %aws_sdk_sts::error::DisplayErrorContext(&e), "STS AssumeRole failed");
            // One line for the client: the service's error code (when it is one) or the HTTP
            // status, never the remote reply's text (the endpoint is not the client's to read).
            use aws_sdk_sts::error::ProvideErrorMetadata;
            let status = e.raw_response().map(|r| r.status().as_u16());
            let code = e.code().filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'));
            let reason = match (code, status) {
                (Some(code), _) => code.to_owned(),
                (None, Some(status)) => format!("HTTP {status}"),
                (None, None) => "no response (timeout or connection failure)".to_owned(),
            };
            CatalogError::Unavailable(format!("STS AssumeRole on {role_arn} failed: {reason}"))
        })?;
        let credentials = output
            .credentials()
            .ok_or_else(|| CatalogError::Internal(anyhow::anyhow!("AssumeRole returned no credentials")))?;
        let expires_at_ms = credentials.expiration().to_millis().unwrap_or_else(|_| now_ms() + 900_000);
        let remaining = Duration::from_millis((expires_at_ms - now_ms()).max(0) as u64);
        Ok(Minted {
            access_key_id: credentials.access_key_id().to_owned(),
            secret_access_key: credentials.secret_access_key().to_owned(),
            session_token: credentials.session_token().to_owned(),
            expires_at_ms,
            reuse_until: Instant::now() + remaining / 2,
        })
    }

    fn count_vend(&self, mode: VendingMode, access: AccessLevel) {
        self.vending.metrics.vends.get_or_create(&VendLabels { mode: mode.as_str(), access: access.as_str() }).inc();
    }
}

#[async_trait]
impl CredentialVendor for ObjectStoreIo {
    async fn validate(&self, warehouse: &Warehouse) -> Result<()> {
        let Some(profile) = warehouse.storage_profile.s3() else { return Ok(()) };
        let access = S3Access::new(warehouse, &self.cipher).await?;
        // The failing step and a kind of failure, never the store's reply: the endpoint may be
        // any server, and its answer is not the caller's to read (server-side request forgery).
        let failed = |step: &str, e: &dyn std::fmt::Display| {
            tracing::info!(warehouse = %warehouse.name, step, error = %e, "storage profile check failed");
            CatalogError::bad_request(format!("storage profile check failed: {step}"))
        };
        let store_failed = |step: &str, e: &object_store::Error| {
            let kind = match e {
                object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
                    "access denied"
                }
                object_store::Error::NotFound { .. } => "not found",
                _ => "request failed",
            };
            failed(&format!("{step} ({kind})"), e)
        };
        let probe = format!(
            "{}{}.icegate-probe-{}",
            access.key_prefix,
            if access.key_prefix.is_empty() { "" } else { "/" },
            uuid::Uuid::new_v4().simple()
        );
        let path = Path::parse(&probe).map_err(|e| failed("probe key", &e))?;
        let body = b"icegate storage probe".to_vec();
        access
            .store
            .put(&path, PutPayload::from(body.clone()))
            .await
            .map_err(|e| store_failed("writing a probe object", &e))?;
        let read = async { access.store.get(&path).await?.bytes().await };
        let read = read.await;
        let deleted = access.store.delete(&path).await;
        match read {
            Ok(bytes) if bytes.as_ref() == body.as_slice() => {}
            Ok(_) => return Err(failed("reading the probe object back", &"its content differs")),
            Err(e) => return Err(store_failed("reading the probe object back", &e)),
        }
        deleted.map_err(|e| store_failed("deleting the probe object", &e))?;
        if profile.vending == VendingMode::Sts {
            let key = CacheKey {
                warehouse_id: warehouse.id.clone(),
                profile_version: 0,
                max_lifetime_seconds: None,
                access: AccessLevel::Read,
                // A location below the root: a root may be a whole bucket (`s3://lake`).
                locations: TableLocations::new([format!("{}/.icegate-probe", warehouse.storage_root.as_str())]),
                read_only: TableLocations::new([]),
                principal: None,
            };
            self.assume_role(&access, &key, warehouse.name.as_str()).await.map_err(|e| {
                let reason = match e {
                    CatalogError::Unavailable(message) => message,
                    other => other.to_string(),
                };
                CatalogError::bad_request(format!("storage profile check failed: {reason}"))
            })?;
        }
        if profile.vending == VendingMode::Static {
            tracing::warn!(
                warehouse = %warehouse.name,
                "storage profile vends the warehouse's own keys (vending mode static): clients get unscoped access"
            );
        }
        Ok(())
    }

    async fn table_access(&self, request: &TableAccessRequest<'_>) -> Result<TableStorageAccess> {
        let warehouse = request.warehouse;
        let Some(profile) = warehouse.storage_profile.s3() else { return Ok(TableStorageAccess::default()) };
        // Where the store is: for the table's config and for every storage credential.
        let mut client = BTreeMap::new();
        client.insert("client.region".to_owned(), profile.region.clone());
        client.insert("s3.region".to_owned(), profile.region.clone());
        if let Some(endpoint) = &profile.endpoint {
            client.insert("s3.endpoint".to_owned(), endpoint.clone());
        }
        client.insert("s3.path-style-access".to_owned(), profile.path_style_access.to_string());
        let mut config = client.clone();
        let delegation = request.delegation;
        let table_url = format!("{}/{}", request.base_url.trim_end_matches('/'), request.table_path);
        let wants_credentials =
            delegation.vended_credentials || (delegation.unspecified && profile.delegate_by_default);
        // PyIceberg advertises only `vended-credentials` yet signs when told to: in a remote-signing
        // warehouse any delegation request gets the signing configuration (and never keys).
        let wants_signing = delegation.remote_signing
            || delegation.vended_credentials
            || (delegation.unspecified && profile.delegate_by_default);
        let mut credentials = Vec::new();
        let mut remote_signing = None;
        match profile.vending {
            VendingMode::Sts | VendingMode::Static if wants_credentials => {
                let access = self.s3_access(warehouse).await?;
                let (key_id, secret, token, expires_at_ms) = if profile.vending == VendingMode::Sts {
                    let key = CacheKey {
                        warehouse_id: warehouse.id.clone(),
                        profile_version: warehouse.profile_version,
                        max_lifetime_seconds: warehouse.settings.credentials_max_lifetime_seconds,
                        access: request.access,
                        locations: request.locations.clone(),
                        read_only: request.read_only.clone(),
                        principal: request.principal.map(|(id, name)| (id.to_owned(), name.to_owned())),
                    };
                    let (minted, hit) = self
                        .vending
                        .get_or_mint(key.clone(), || self.assume_role(&access, &key, warehouse.name.as_str()))
                        .await?;
                    if hit {
                        self.vending.metrics.cache_hits.inc();
                    }
                    (
                        minted.access_key_id.clone(),
                        minted.secret_access_key.clone(),
                        Some(minted.session_token.clone()),
                        Some(minted.expires_at_ms),
                    )
                } else {
                    let own = access.current_credentials().await?;
                    tracing::warn!(warehouse = %warehouse.name, "vending the warehouse's own, unscoped keys (mode static)");
                    (
                        own.access_key_id().to_owned(),
                        own.secret_access_key().to_owned(),
                        own.session_token().map(str::to_owned),
                        own.expiry().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_millis() as i64),
                    )
                };
                self.count_vend(profile.vending, request.access);
                let mut vended = BTreeMap::new();
                vended.insert("s3.access-key-id".to_owned(), key_id);
                vended.insert("s3.secret-access-key".to_owned(), secret);
                if let Some(token) = token {
                    vended.insert("s3.session-token".to_owned(), token);
                }
                if let Some(expires) = expires_at_ms {
                    vended.insert("s3.session-token-expires-at-ms".to_owned(), expires.to_string());
                }
                vended.insert("client.refresh-credentials-endpoint".to_owned(), format!("{table_url}/credentials"));
                vended.insert("client.refresh-credentials-enabled".to_owned(), "true".to_owned());
                config.extend(vended.clone());
                vended.extend(client);
                for location in request.locations.as_slice().iter().chain(request.read_only.as_slice()) {
                    credentials.push((location.clone(), vended.clone()));
                }
            }
            VendingMode::RemoteSigning if wants_signing => {
                remote_signing = Some(icegate_catalog::storage::RemoteSigningConfig::default());
                let endpoint = format!("{}/sign", request.table_path);
                for (k, v) in [
                    ("s3.remote-signing-enabled", "true".to_owned()),
                    ("s3.signer", "S3V4RestSigner".to_owned()),
                    ("s3.signer.uri", request.base_url.to_owned()),
                    ("s3.signer.endpoint", endpoint.clone()),
                    ("signer.uri", request.base_url.to_owned()),
                    ("signer.endpoint", endpoint),
                    // PyIceberg signs only through its fsspec FileIO.
                    ("py-io-impl", "pyiceberg.io.fsspec.FsspecFileIO".to_owned()),
                ] {
                    config.insert(k.to_owned(), v);
                }
            }
            _ => {}
        }
        Ok(TableStorageAccess { config, credentials, remote_signing })
    }

    async fn sign(
        &self,
        warehouse: &Warehouse,
        locations: &TableLocations,
        read_only: &TableLocations,
        access: AccessLevel,
        sign: SignRequest,
    ) -> Result<SignResult> {
        let count = |outcome| self.vending.metrics.signs.get_or_create(&SignLabels { outcome }).inc();
        let Some(profile) = warehouse.storage_profile.s3() else {
            count("refused");
            return Err(CatalogError::bad_request("this warehouse is not on S3: there is nothing to sign"));
        };
        if profile.vending != VendingMode::RemoteSigning {
            count("refused");
            return Err(CatalogError::Forbidden(format!(
                "remote signing is not enabled for this warehouse (vending mode {})",
                profile.vending.as_str()
            )));
        }
        let s3 = self.s3_access(warehouse).await?;
        let credentials = s3.current_credentials().await?;
        match crate::sign::check_and_sign(&s3, (locations, read_only), access, &sign, &credentials) {
            Ok((result, operation)) => {
                count("signed");
                tracing::debug!(operation = operation.name, "signed a storage request");
                Ok(result)
            }
            Err(err) => {
                count("refused");
                tracing::info!(method = %sign.method, uri = %sign.uri, reason = %err, "refused to sign a storage request");
                Err(err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn key(location: &str) -> CacheKey {
        CacheKey {
            warehouse_id: icegate_catalog::WarehouseId::new("w"),
            profile_version: 1,
            max_lifetime_seconds: None,
            access: AccessLevel::Read,
            locations: TableLocations::new([location.to_owned()]),
            read_only: TableLocations::new([]),
            principal: None,
        }
    }

    fn minted(valid_for: Duration) -> Minted {
        Minted {
            access_key_id: "ASIA".into(),
            secret_access_key: "s".into(),
            session_token: "t".into(),
            expires_at_ms: now_ms() + valid_for.as_millis() as i64,
            reuse_until: Instant::now() + valid_for / 2,
        }
    }

    #[tokio::test]
    async fn concurrent_misses_share_one_mint_and_later_calls_hit() {
        let vending = Arc::new(Vending::new(StorageMetrics::default()));
        let calls = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (vending, calls) = (vending.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                vending
                    .get_or_mint(key("s3://b/t"), || async {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(minted(Duration::from_secs(3600)))
                    })
                    .await
                    .unwrap()
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one STS call for 16 concurrent misses");
        let (_, hit) = vending.get_or_mint(key("s3://b/t"), || async { unreachable!() }).await.unwrap();
        assert!(hit);
        // Another location set or access level is another credential.
        let (_, hit) =
            vending.get_or_mint(key("s3://b/u"), || async { Ok(minted(Duration::from_secs(3600))) }).await.unwrap();
        assert!(!hit);
    }

    #[tokio::test]
    async fn credentials_past_half_their_validity_and_failures_are_not_reused() {
        let vending = Vending::new(StorageMetrics::default());
        let calls = AtomicUsize::new(0);
        let mint = |valid: Duration| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok(minted(valid)) }
        };
        vending.get_or_mint(key("s3://b/t"), || mint(Duration::from_millis(40))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (_, hit) = vending.get_or_mint(key("s3://b/t"), || mint(Duration::from_secs(3600))).await.unwrap();
        assert!(!hit, "past half its validity, a credential is minted again");
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        let failing = || async { Err::<Minted, _>(CatalogError::Unavailable("sts down".into())) };
        assert!(vending.get_or_mint(key("s3://b/x"), failing).await.is_err());
        let (_, hit) = vending.get_or_mint(key("s3://b/x"), || mint(Duration::from_secs(3600))).await.unwrap();
        assert!(!hit, "a failure is not cached");
        // A profile update bumps the version: nothing minted under the old profile is reused.
        let mut updated = key("s3://b/t");
        updated.profile_version += 1;
        let (_, hit) = vending.get_or_mint(updated, || mint(Duration::from_secs(3600))).await.unwrap();
        assert!(!hit);
    }

    #[test]
    fn session_names_fit_aws_limits_and_name_the_principal() {
        let allowed =
            |name: &str| name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c));
        let name = session_name(&key(&format!("s3://b/{}", "x".repeat(500))));
        assert!(allowed(&name), "{name}");
        let mut for_alice = key("s3://b/t");
        for_alice.principal = Some(("01id".into(), "alice smith/ü".repeat(9)));
        let name = session_name(&for_alice);
        assert!(allowed(&name) && name.starts_with("icegate-r-alice_smith__"), "{name}");
        // Two principals whose names read alike still get sessions of their own.
        let mut other = for_alice.clone();
        other.principal = Some(("02id".into(), "alice smith/ü".repeat(9)));
        assert_ne!(session_name(&other), name);
        assert_eq!(tag_safe("a=b/c:d ü%\u{93f}"), "a=b/c:d ___");
    }
}
