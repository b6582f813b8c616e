//! Authentication: icegate-issued bearer tokens for principals with client credentials.
//!
//! Tokens are HS256 JWTs signed with a key every replica shares (from configuration, or
//! generated once and kept in the database). Each carries the version of the secret it was
//! issued for (`sv`): rotating a principal's secret ends the tokens issued under the old one.
//!
//! Client secrets are shown once, when created or rotated, and stored only as a keyed hash:
//! HMAC-SHA-256 under a random salt of the secret's own. Secrets icegate generates are 256
//! random bits, which no slow hash makes stronger, and checking one costs microseconds, so the
//! token endpoint — open to anyone — cannot be used to spend the server's CPU. (Secrets
//! hashed with Argon2id by earlier versions are still accepted: checked on the blocking pool,
//! a few at a time, answered 503 past that, and rehashed once they match.) Every rejection is
//! logged with its reason and answered with the same 401, so a caller learns nothing about why.

use crate::actors::Authentication;
use crate::ids::PrincipalId;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordVerifier};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::access::{AccessStore, Caller, PrincipalRecord};
use crate::error::{CatalogError, Result};

/// The setting under which a generated signing key is shared between replicas.
pub const SIGNING_KEY_SETTING: &str = "token_signing_key";

#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// `false`: every request may do everything (the embedded default on loopback).
    pub required: bool,
    pub issuer: String,
    pub audience: String,
    pub token_lifetime: Duration,
    /// Clock skew tolerated when checking `exp` and `nbf`.
    pub leeway: Duration,
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    name: String,
    iss: String,
    aud: String,
    iat: u64,
    nbf: u64,
    exp: u64,
    jti: String,
    /// The version of the principal's secret the token was issued under; tokens of icegate
    /// versions that did not write it count as version 1 (every secret's first).
    #[serde(default = "first_secret_version")]
    sv: i64,
}

fn first_secret_version() -> i64 {
    1
}

/// A freshly issued token.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    pub access_token: String,
    pub expires_in: u64,
    /// Whom it was issued to, and the token as records name it (its digest), for the record.
    pub principal: Caller,
    pub expires_at_ms: i64,
}

/// Why a token request failed, in OAuth2 terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// `known_client`: a principal has the client id presented (only the secret was wrong), so
    /// the id may be recorded; an unknown one may be a secret sent in its place.
    InvalidClient {
        known_client: bool,
    },
    InvalidRequest(String),
    /// Too many slow (Argon2id) checks are running: retry shortly (503).
    Busy,
}

/// 32 random bytes, URL-safe base64.
pub fn random_secret() -> String {
    let mut bytes = Vec::with_capacity(32);
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A new client id.
pub fn new_client_id() -> String {
    format!("ig-{}", uuid::Uuid::new_v4().simple())
}

/// The stored form of a secret: `$icegate-hmac-sha256$<salt>$<mac>` (URL-safe base64), the
/// HMAC-SHA-256 of the secret keyed by 16 random bytes of its own.
pub fn hash_secret(secret: &str) -> Result<String> {
    let salt = *uuid::Uuid::new_v4().as_bytes();
    Ok(format!("{HMAC_PREFIX}{}${}", URL_SAFE_NO_PAD.encode(salt), URL_SAFE_NO_PAD.encode(hmac_sha256(&salt, secret))))
}

const HMAC_PREFIX: &str = "$icegate-hmac-sha256$";

/// HMAC-SHA-256 (RFC 2104).
fn hmac_sha256(key: &[u8], message: &str) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let (mut inner, mut outer) = (Sha256::new(), Sha256::new());
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message.as_bytes());
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// What checking a secret against its stored hash found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SecretCheck {
    Matches,
    DoesNotMatch,
    /// An Argon2id hash of an earlier version: slow to check (see [`LegacyChecks`]).
    Legacy,
}

fn check_secret(secret: &str, hash: &str) -> SecretCheck {
    let Some(rest) = hash.strip_prefix(HMAC_PREFIX) else {
        return if hash.starts_with("$argon2") { SecretCheck::Legacy } else { SecretCheck::DoesNotMatch };
    };
    let Some((salt, mac)) = rest.split_once('$') else { return SecretCheck::DoesNotMatch };
    let (Ok(salt), Ok(mac)) = (URL_SAFE_NO_PAD.decode(salt), URL_SAFE_NO_PAD.decode(mac)) else {
        return SecretCheck::DoesNotMatch;
    };
    let computed = hmac_sha256(&salt, secret);
    // Constant time: how much of the MAC matched does not show in the answer's timing.
    let differs =
        mac.len() != computed.len() || mac.iter().zip(computed.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0;
    if differs { SecretCheck::DoesNotMatch } else { SecretCheck::Matches }
}

fn verify_argon2(secret: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| Argon2::default().verify_password(secret.as_bytes(), &parsed).is_ok())
}

/// Argon2id checks of secrets hashed by earlier versions run on the blocking pool, at most this
/// many at once; a token request that would wait for one is answered 503 at once.
const LEGACY_CHECKS_AT_ONCE: usize = 2;

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub struct Authenticator {
    settings: AuthSettings,
    access: Arc<dyn AccessStore>,
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    /// Tokens already verified, by SHA-256 of the token (tokens themselves are not kept), until
    /// they expire. A token never changes, so its verification holds until its `exp`: this
    /// skips decoding, two JSON parses and the HMAC on every request after the first (perf:
    /// verification was a tenth of an authenticated loadTable's cycles).
    verified: quick_cache::sync::Cache<[u8; 32], Verified>,
    /// Room for Argon2id checks (see [`LEGACY_CHECKS_AT_ONCE`]).
    legacy_checks: Arc<tokio::sync::Semaphore>,
    /// Client ids with an Argon2id check running, or whose last one failed within
    /// [`LEGACY_RETRY_AFTER`]: one client id never holds more than one of the slots.
    legacy_turns: std::sync::Mutex<std::collections::HashMap<String, LegacyTurn>>,
}

/// A client id's Argon2id checks (see `Authenticator::legacy_turns`).
#[derive(Clone, Copy)]
struct LegacyTurn {
    running: bool,
    failed_at: Option<std::time::Instant>,
}

/// After a failed Argon2id check, the same client id is checked again no sooner than this.
const LEGACY_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Client ids and secrets longer than these are refused unchecked: icegate's are 35 and 43
/// characters, and hashing what a request sends costs time in proportion.
const MAX_CLIENT_ID_BYTES: usize = 256;
const MAX_CLIENT_SECRET_BYTES: usize = 1024;

/// How many verified tokens are remembered.
const VERIFIED_TOKENS: usize = 10_000;

#[derive(Clone)]
struct Verified {
    id: String,
    name: String,
    exp: u64,
    secret_version: i64,
}

/// A principal authenticated by an icegate token, with the version of the secret the token was
/// issued under (checked against the principal's current one by the caller).
#[derive(Debug, Clone)]
pub struct TokenCaller {
    pub caller: Caller,
    /// `None` with authentication off.
    pub secret_version: Option<i64>,
}

impl Authenticator {
    /// `signing_key`: the configured key, or `None` to use the one shared through the database
    /// (generated by the first replica that starts).
    pub async fn new(
        settings: AuthSettings,
        access: Arc<dyn AccessStore>,
        signing_key: Option<String>,
    ) -> Result<Self> {
        let key = match signing_key {
            Some(key) => key,
            None => access.init_setting(&system_write("start-up"), SIGNING_KEY_SETTING, &random_secret()).await?,
        };
        if key.len() < 32 {
            return Err(CatalogError::bad_request("the token signing key must be at least 32 characters"));
        }
        let invalid =
            |e: jsonwebtoken::errors::Error| CatalogError::bad_request(format!("invalid token signing key: {e}"));
        if let Ok(principals) = access.list_principals().await {
            let legacy = principals
                .iter()
                .filter(|p| p.secret_hash.as_deref().is_some_and(|h| h.starts_with("$argon2")))
                .count();
            if legacy > 0 {
                tracing::warn!(
                    principals = legacy,
                    "client secrets hashed with Argon2id by an earlier version: each is rehashed at its next use; \
                     rotate those not used (POST /management/v1/principals/{{name}}/rotate-secret), since \
                     their checks are slow and run at most two at a time"
                );
            }
        }
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[&settings.issuer]);
        validation.set_audience(&[&settings.audience]);
        validation.leeway = settings.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        Ok(Self {
            settings,
            access,
            encoding: EncodingKey::from_secret(key.as_bytes()).map_err(invalid)?,
            decoding: DecodingKey::from_secret(key.as_bytes()).map_err(invalid)?,
            validation,
            verified: quick_cache::sync::Cache::new(VERIFIED_TOKENS),
            legacy_checks: Arc::new(tokio::sync::Semaphore::new(LEGACY_CHECKS_AT_ONCE)),
            legacy_turns: std::sync::Mutex::default(),
        })
    }

    pub fn required(&self) -> bool {
        self.settings.required
    }

    pub fn access(&self) -> &Arc<dyn AccessStore> {
        &self.access
    }

    /// The OAuth2 client-credentials grant.
    pub async fn issue_token(
        &self,
        client_id: &str,
        client_secret: &str,
    ) -> std::result::Result<IssuedToken, TokenError> {
        let unavailable = || TokenError::InvalidRequest("the catalog cannot issue tokens right now".into());
        if client_id.len() > MAX_CLIENT_ID_BYTES || client_secret.len() > MAX_CLIENT_SECRET_BYTES {
            tracing::info!("token refused: client id or secret too long");
            return Err(TokenError::InvalidClient { known_client: false });
        }
        let principal = match self.access.principal_by_client_id(client_id).await {
            Ok(Some(principal)) => principal,
            Ok(None) => {
                tracing::info!(?client_id, "token refused: unknown client id");
                // The same (cheap) work as a real check.
                let _ = check_secret(client_secret, UNKNOWN_CLIENT_HASH);
                return Err(TokenError::InvalidClient { known_client: false });
            }
            Err(err) => {
                tracing::error!(error = %err, "token refused: the store failed");
                return Err(unavailable());
            }
        };
        let Some(hash) = principal.secret_hash.clone() else {
            tracing::info!(?client_id, "token refused: the principal has no secret");
            return Err(TokenError::InvalidClient { known_client: true });
        };
        let valid = match check_secret(client_secret, &hash) {
            SecretCheck::Matches => true,
            SecretCheck::DoesNotMatch => false,
            SecretCheck::Legacy => self.check_legacy(&principal, client_secret, &hash).await?,
        };
        // The secret replaced at the last rotation, during its grace period: a token under its
        // own (previous) version, ending with the grace period at the latest.
        let mut grace_until = None;
        if !valid
            && let (Some(previous), Some(until)) = (&principal.previous_secret_hash, principal.previous_secret_until_ms)
            && crate::access::now_ms() < until
            && check_secret(client_secret, previous) == SecretCheck::Matches
        {
            grace_until = Some(until);
        }
        if !valid && grace_until.is_none() {
            tracing::info!(?client_id, "token refused: wrong client secret");
            return Err(TokenError::InvalidClient { known_client: true });
        }
        if grace_until.is_some() {
            tracing::info!(?client_id, "token issued for the previous client secret, in its grace period");
        }
        self.sign(&principal, grace_until).map_err(|err| {
            tracing::error!(error = %err, "signing a token failed");
            unavailable()
        })
    }

    /// Checks a secret against an Argon2id hash of an earlier version, off the async workers
    /// and a few at a time (503 past that: these hashes cost 19 MiB and tens of milliseconds
    /// each), and replaces the hash with the current form once it matches.
    async fn check_legacy(
        &self,
        principal: &PrincipalRecord,
        secret: &str,
        hash: &str,
    ) -> std::result::Result<bool, TokenError> {
        let client_id = principal.client_id.clone().unwrap_or_default();
        if !self.legacy_turn(&client_id) {
            tracing::info!(?client_id, "token refused: this client id's Argon2id check is running or just failed");
            return Err(TokenError::Busy);
        }
        let Ok(permit) = self.legacy_checks.clone().try_acquire_owned() else {
            self.legacy_done(&client_id, false);
            tracing::info!(?client_id, "token refused: too many Argon2id checks at once");
            return Err(TokenError::Busy);
        };
        let (checked_secret, checked_hash) = (secret.to_owned(), hash.to_owned());
        let matches = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            verify_argon2(&checked_secret, &checked_hash)
        })
        .await
        .unwrap_or(false);
        self.legacy_done(&client_id, !matches);
        if matches {
            match hash_secret(secret) {
                // Only if the secret was not rotated meanwhile (compare-and-set on the old hash).
                Ok(rehashed) => match self
                    .access
                    .rehash_principal_secret(&system_write("secret-rehash"), &principal.id, hash, &rehashed)
                    .await
                {
                    Ok(_) => tracing::info!(principal = %principal.name, "rehashed an Argon2id client secret"),
                    Err(err) => tracing::warn!(error = %err, "could not rehash an Argon2id client secret"),
                },
                Err(err) => tracing::warn!(error = %err, "could not rehash an Argon2id client secret"),
            }
        }
        Ok(matches)
    }

    /// Takes `client_id`'s turn for an Argon2id check: false while one of its checks runs or
    /// within [`LEGACY_RETRY_AFTER`] of one that failed (so a flood of guesses at one client id
    /// costs one check a second, and takes one of the shared slots at most).
    fn legacy_turn(&self, client_id: &str) -> bool {
        let mut turns = self.legacy_turns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        turns.retain(|_, turn| turn.running || turn.failed_at.is_some_and(|at| now - at < LEGACY_RETRY_AFTER));
        if turns.contains_key(client_id) {
            return false;
        }
        turns.insert(client_id.to_owned(), LegacyTurn { running: true, failed_at: None });
        true
    }

    fn legacy_done(&self, client_id: &str, failed: bool) {
        let mut turns = self.legacy_turns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if failed {
            turns.insert(
                client_id.to_owned(),
                LegacyTurn { running: false, failed_at: Some(std::time::Instant::now()) },
            );
        } else {
            turns.remove(client_id);
        }
    }

    /// A token for `principal`'s current secret, or (`grace_until`, ms) for its previous one,
    /// ending no later than that secret's grace period.
    fn sign(&self, principal: &PrincipalRecord, grace_until: Option<i64>) -> Result<IssuedToken> {
        let now = now_secs();
        let mut lifetime = self.settings.token_lifetime.as_secs();
        let mut secret_version = principal.secret_version;
        if let Some(until) = grace_until {
            lifetime = lifetime.min(u64::try_from(until / 1000).unwrap_or(0).saturating_sub(now));
            secret_version -= 1;
        }
        let claims = Claims {
            sub: principal.id.as_str().to_owned(),
            name: principal.name.clone(),
            iss: self.settings.issuer.clone(),
            aud: self.settings.audience.clone(),
            iat: now,
            nbf: now,
            exp: now + lifetime,
            jti: uuid::Uuid::new_v4().to_string(),
            sv: secret_version,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| CatalogError::Internal(anyhow::anyhow!("signing a token: {e}")))?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let principal = Caller::Principal {
            id: principal.id.clone(),
            name: principal.name.clone(),
            via: Authentication::Icegate { token: Authentication::token_digest(&digest) },
        };
        let expires_at_ms = i64::try_from((now + lifetime).saturating_mul(1000)).unwrap_or(i64::MAX);
        Ok(IssuedToken { access_token: token, expires_in: lifetime, principal, expires_at_ms })
    }

    /// The caller behind an `Authorization` header, with the secret version its token was
    /// issued under. With auth off, everyone is unrestricted.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<TokenCaller> {
        if !self.settings.required {
            return Ok(TokenCaller { caller: Caller::Anonymous, secret_version: None });
        }
        let refuse = |reason: &str| {
            tracing::info!(reason, "request not authenticated");
            CatalogError::NotAuthorized("Not authorized: a valid bearer token is required".into())
        };
        let Some(header) = authorization else { return Err(refuse("no Authorization header")) };
        let Some(token) = header.strip_prefix("Bearer ").or_else(|| header.strip_prefix("bearer ")) else {
            return Err(refuse("not a bearer token"));
        };
        let token = token.trim();
        if token.is_empty() || token == "None" {
            return Err(refuse("empty bearer token"));
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let leeway = self.validation.leeway;
        if let Some(known) = self.verified.get(&digest) {
            // Expired exactly when jsonwebtoken would say so: `exp` more than `leeway` ago.
            if now_secs() <= known.exp.saturating_add(leeway) {
                let via = Authentication::Icegate { token: Authentication::token_digest(&digest) };
                let caller = Caller::Principal { id: PrincipalId::new(known.id), name: known.name, via };
                return Ok(TokenCaller { caller, secret_version: Some(known.secret_version) });
            }
            self.verified.remove(&digest);
        }
        match jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation) {
            Ok(data) => {
                let Claims { sub, name, exp, sv, .. } = data.claims;
                let verified = Verified { id: sub.clone(), name: name.clone(), exp, secret_version: sv };
                self.verified.insert(digest, verified);
                Ok(TokenCaller {
                    caller: Caller::Principal {
                        id: PrincipalId::new(sub),
                        name,
                        via: Authentication::Icegate { token: Authentication::token_digest(&digest) },
                    },
                    secret_version: Some(sv),
                })
            }
            Err(err) => Err(refuse(&format!("invalid token: {err}"))),
        }
    }
}

/// A well-formed hash no secret matches, checked for unknown client ids.
const UNKNOWN_CLIENT_HASH: &str =
    "$icegate-hmac-sha256$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

/// The name of the principal and role a fresh install's administrator gets.
pub const ADMIN: &str = "admin";

/// Break-glass for whoever runs the server (`icegate bootstrap --recover`, which reaches the
/// database directly): the `admin` principal (created with `new_client_id` when missing) gets
/// `client_secret` as its only secret, is made a member of the `admin` role, and that role holds
/// `admin` on the server without expiry. Returns the principal's client id. Nothing else changes:
/// other principals, roles and grants stay as they are.
pub async fn recover_admin(access: &dyn AccessStore, new_client_id: &str, client_secret: &str) -> Result<String> {
    let write = system_write("bootstrap-recover");
    let hash = hash_secret(client_secret)?;
    let client_id = match access.principal_by_name(ADMIN).await? {
        Some(principal) => {
            let Some(client_id) = principal.client_id else {
                return Err(CatalogError::Conflict(
                    "the principal `admin` is an external identity's and has no client credentials, so recovery \
                     cannot give it a secret; rename it in the database \
                     (UPDATE principals SET name = 'admin-external' WHERE name = 'admin') and recover again"
                        .into(),
                ));
            };
            // No grace: whoever held the old secret loses it now.
            access.set_principal_secret(&write, &principal.id, &hash, None).await?;
            client_id
        }
        None => {
            access.create_principal(&write, ADMIN, new_client_id, &hash).await?;
            new_client_id.to_owned()
        }
    };
    make_server_admin(access, &write).await?;
    Ok(client_id)
}

/// Creates the `admin` principal (with these credentials), an `admin` role holding `admin` on
/// the server, and the membership. Returns false, changing nothing, when `admin` exists already.
pub async fn bootstrap_admin(access: &dyn AccessStore, client_id: &str, client_secret: &str) -> Result<bool> {
    let write = system_write("bootstrap");
    if access.principal_by_name(ADMIN).await?.is_some() {
        return Ok(false);
    }
    match access.create_principal(&write, ADMIN, client_id, &hash_secret(client_secret)?).await {
        Ok(_) => {}
        // Another replica bootstrapped concurrently.
        Err(CatalogError::AlreadyExists(_)) => return Ok(false),
        Err(err) => return Err(err),
    }
    make_server_admin(access, &write).await?;
    Ok(true)
}

/// Makes the principal `admin` a member of the role `admin`, which holds `admin` on the server
/// without expiry (creating the role, and making an expiring grant permanent).
async fn make_server_admin(access: &dyn AccessStore, write: &crate::idempotency::WriteContext) -> Result<()> {
    match access.create_role(write, ADMIN).await {
        Ok(_) | Err(CatalogError::AlreadyExists(_)) => {}
        Err(err) => return Err(err),
    }
    access.add_role_member(write, ADMIN, ADMIN).await?;
    let server = crate::access::SecurableRef {
        kind: crate::access::SecurableType::Server,
        warehouse: None,
        namespace: None,
        name: None,
    };
    match access.grant(write, ADMIN, crate::access::Privilege::Admin, (&server, None), None).await {
        Ok(_) => Ok(()),
        Err(CatalogError::AlreadyExists(_)) => {
            // The role holds it already, possibly with an expiry (or another replica granted
            // it just now): make sure it does not expire.
            if !access.server_admins().await?.iter().any(|name| name == ADMIN) {
                access.revoke(write, ADMIN, crate::access::Privilege::Admin, (&server, None)).await?;
                access.grant(write, ADMIN, crate::access::Privilege::Admin, (&server, None), None).await?;
            }
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// A write the system makes for `job` (no principal asked for it).
fn system_write(job: &str) -> crate::idempotency::WriteContext {
    crate::RequestContext::system(job, None).write()
}
