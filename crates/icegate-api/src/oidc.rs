//! Bearer tokens from external OpenID Connect issuers.
//!
//! Each configured issuer's signing keys come from its JWKS (found through discovery, or
//! configured). Keys are cached; a token signed with an unknown `kid` triggers one refetch (at
//! most every few seconds), so key rotation at the provider needs no restart. The token's
//! issuer, audience, expiry and signature are checked with a small clock-skew allowance. The
//! principal is provisioned on first sight, named by the issuer's subject (which its user cannot
//! change; the username is kept beside it), and a roles or groups claim maps onto the icegate
//! roles of the same name that the operator made claimable for that issuer — no other. A
//! verified identity is remembered for the token's lifetime, so the store is written once per
//! token, not once per request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use icegate_catalog::access::{AccessStore, Caller};
use icegate_catalog::cache::TtlCache;
use icegate_catalog::{CatalogError, Result};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{DecodingKey, Validation};
use serde_json::Value;
use tokio::sync::{Mutex, RwLock};

/// One trusted issuer.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcIssuerConfig {
    /// The `iss` of its tokens (and, without `jwks_url`, where discovery starts).
    pub issuer: String,
    /// The JWKS location; unset: `<issuer>/.well-known/openid-configuration`'s `jwks_uri`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// The `aud` icegate's tokens must carry.
    pub audience: String,
    /// The claim that identifies the principal, and names it (`<subject>@<name>`): one its user
    /// cannot change.
    #[serde(default = "default_subject_claim")]
    pub subject_claim: String,
    /// The claim whose values name the caller's icegate roles (e.g. `groups` or `roles`); only
    /// roles this issuer may confer (`claimable_roles`, `claimable_role_prefix`, `admin_roles`)
    /// are joined.
    #[serde(default)]
    pub roles_claim: Option<String>,
    /// Roles a claim of this issuer may make its users members of, by name.
    #[serde(default)]
    pub claimable_roles: Vec<String>,
    /// Roles whose names start with this may be conferred by this issuer's claims too (e.g.
    /// `okta-`): roles made for this issuer, which no other issuer's users can claim.
    #[serde(default)]
    pub claimable_role_prefix: Option<String>,
    /// Roles that a claim may map onto with their grants on the server itself (such as the
    /// `admin` role); claimable by this issuer. Through any other claimable role, that role's
    /// server-wide grants do not apply. Empty by default: no identity provider group becomes the
    /// catalog's administrator unless the operator says so here.
    #[serde(default)]
    pub admin_roles: Vec<String>,
    /// The suffix of the principal names this issuer's users get (`<username>@<name>`);
    /// the issuer URL's host by default. Names are qualified so that one issuer's users can
    /// never take names meant for another's, or for icegate's own principals.
    #[serde(default)]
    pub name: Option<String>,
    /// The console's sign-in through this issuer (authorization code with PKCE): the client id
    /// registered at the issuer for icegate's console, with the redirect URI
    /// `<server.public_url>/ui/oidc/callback/<name>` (`name` percent-encoded: set it, rather than
    /// rely on the default, the issuer's host). Its access tokens must carry `audience`, as the
    /// API's do: the console calls the API with them. Unset: no console sign-in here.
    #[serde(default)]
    pub console_client_id: Option<String>,
    /// The console client's secret, for an issuer that registers it as a confidential client
    /// (sent with HTTP basic authentication); unset for a public client (PKCE alone).
    #[serde(default)]
    pub console_client_secret: Option<String>,
    /// The scopes the console asks for (space-separated; `openid` by default).
    #[serde(default)]
    pub console_scopes: Option<String>,
}

impl OidcIssuerConfig {
    /// Whether a claim of this issuer may make its user a member of `role`: the operator named
    /// the role (or its prefix) for this issuer. Anything else a claim names is ignored, so
    /// whoever controls the issuer's groups cannot join a role meant for someone else.
    pub fn may_confer(&self, role: &str) -> bool {
        self.claimable_roles.iter().any(|r| r == role)
            || self.admin_roles.iter().any(|r| r == role)
            || self
                .claimable_role_prefix
                .as_deref()
                .is_some_and(|prefix| !prefix.is_empty() && role.starts_with(prefix))
    }

    /// The suffix of this issuer's principal names.
    pub fn principal_suffix(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            url::Url::parse(&self.issuer)
                .ok()
                .and_then(|u| {
                    u.host_str().map(|h| match u.port() {
                        Some(port) => format!("{h}:{port}"),
                        None => h.to_owned(),
                    })
                })
                .unwrap_or_else(|| self.issuer.clone())
        })
    }
}

fn default_subject_claim() -> String {
    "sub".into()
}

/// A refetch for an unknown key id happens at most this often per issuer.
const REFETCH_INTERVAL: Duration = Duration::from_secs(5);
/// Verified identities remembered at most this many at once (then the cache starts over).
const CACHE_LIMIT: usize = 10_000;

struct Issuer {
    config: OidcIssuerConfig,
    keys: RwLock<HashMap<String, (DecodingKey, jsonwebtoken::Algorithm)>>,
    last_fetch: Mutex<Option<Instant>>,
}

pub struct OidcVerifier {
    issuers: Vec<Issuer>,
    http: reqwest::Client,
    access: Arc<dyn AccessStore>,
    leeway: Duration,
    /// token -> (caller, when the token expires)
    /// Verified identities by SHA-256 of the token (tokens themselves are not kept), until the
    /// token expires (see `icegate_catalog::cache`).
    verified: TtlCache<[u8; 32], (Caller, Instant)>,
    /// Counts provisionings (which may change role memberships from the roles claim).
    provisioned: std::sync::atomic::AtomicU64,
}

/// A JWT's claims as it carries them, not verified: only to pick what verifies it (or, in the
/// console, to see which issuer it names before the API verifies it).
pub(crate) fn unverified_claims(token: &str) -> Option<Value> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn refuse(reason: &str) -> CatalogError {
    tracing::info!(reason, "request not authenticated");
    CatalogError::NotAuthorized("Not authorized: a valid bearer token is required".into())
}

impl OidcVerifier {
    /// How many tokens have provisioned their principal (and synced its roles) so far.
    pub fn provisioned(&self) -> u64 {
        self.provisioned.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn new(configs: Vec<OidcIssuerConfig>, access: Arc<dyn AccessStore>, leeway: Duration) -> Self {
        let issuers = configs
            .into_iter()
            .map(|config| Issuer { config, keys: RwLock::new(HashMap::new()), last_fetch: Mutex::new(None) })
            .collect();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("an HTTP client");
        Self {
            issuers,
            http,
            access,
            leeway,
            verified: TtlCache::new(CACHE_LIMIT, None),
            provisioned: Default::default(),
        }
    }

    /// The issuer a token claims to come from, if it is one of ours (read before verifying, only
    /// to pick the keys; everything is verified afterwards).
    fn issuer_of(&self, token: &str) -> Option<&Issuer> {
        let claims = unverified_claims(token)?;
        let iss = claims.get("iss")?.as_str()?;
        self.issuers.iter().find(|i| i.config.issuer == iss)
    }

    /// The issuers the console offers sign-in through (those with a console client id).
    pub fn console_issuers(&self) -> Vec<OidcIssuerConfig> {
        self.issuers.iter().filter(|i| i.config.console_client_id.is_some()).map(|i| i.config.clone()).collect()
    }

    /// `None` when the token is not from a configured issuer (it may be one of icegate's own).
    pub async fn verify(&self, token: &str) -> Option<Result<Caller>> {
        let issuer = self.issuer_of(token)?;
        if let Some((caller, _)) = self.verified.get(&digest(token), |(_, expires)| *expires > Instant::now()) {
            return Some(Ok(caller));
        }
        Some(self.verify_with(issuer, token).await)
    }

    async fn verify_with(&self, issuer: &Issuer, token: &str) -> Result<Caller> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| refuse(&format!("malformed token: {e}")))?;
        let kid = header.kid.clone().unwrap_or_default();
        let key = match self.key(issuer, &kid, false).await? {
            Some(key) => key,
            None => self.key(issuer, &kid, true).await?.ok_or_else(|| refuse("unknown signing key"))?,
        };
        if key.1 != header.alg {
            return Err(refuse("algorithm does not match the key"));
        }
        let mut validation = Validation::new(key.1);
        validation.set_issuer(&[&issuer.config.issuer]);
        validation.set_audience(&[&issuer.config.audience]);
        validation.leeway = self.leeway.as_secs();
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Value>(token, &key.0, &validation)
            .map_err(|e| refuse(&format!("invalid token: {e}")))?;
        let claims = data.claims;
        let subject = claims
            .get(&issuer.config.subject_claim)
            .and_then(Value::as_str)
            .ok_or_else(|| refuse("no subject claim"))?
            .to_owned();
        let claimed: Vec<String> = issuer
            .config
            .roles_claim
            .as_ref()
            .and_then(|claim| claims.get(claim))
            .map(|value| match value {
                Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
                Value::String(one) => one.split_whitespace().map(str::to_owned).collect(),
                _ => Vec::new(),
            })
            .unwrap_or_default();
        let (roles, ignored): (Vec<String>, Vec<String>) =
            claimed.into_iter().partition(|role| issuer.config.may_confer(role));
        if !ignored.is_empty() {
            tracing::debug!(issuer = %issuer.config.issuer, %subject, ?ignored, "claimed roles this issuer may not confer");
        }
        // Named by the subject, which the user cannot change; the username, which many
        // providers let users pick, is only shown beside it.
        let username = claims.get("preferred_username").and_then(Value::as_str);
        let name = format!("{subject}@{}", issuer.config.principal_suffix());
        // When the token was issued: claims of a token issued earlier, seen later, are not
        // applied over those of a later one. A date may be fractional (RFC 7519); one in the
        // future (a provider's clock ahead) counts as now, so it cannot hold claims in place;
        // without one, the token counts as issued when first seen.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
        let issued_at = claims
            .get("iat")
            .and_then(Value::as_f64)
            .filter(|iat| iat.is_finite() && *iat >= 0.0)
            .map_or(now, |iat| (iat as i64).min(now));
        let principal = self
            .access
            .provision_external_principal(
                // The system provisions the identity the issuer vouched for, on its first sight.
                &icegate_catalog::RequestContext::system("oidc-provisioning", None).write(),
                (&issuer.config.issuer, &subject),
                (&name, username),
                (&roles, issued_at),
                &issuer.config.admin_roles,
            )
            .await?;
        self.provisioned.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let via = icegate_catalog::actors::Authentication::Oidc {
            issuer: issuer.config.issuer.clone(),
            subject: subject.clone(),
            token: icegate_catalog::actors::Authentication::token_digest(&digest(token)),
        };
        let caller = Caller::Principal { id: principal.id, name: principal.name, via };
        let expires_in = claims.get("exp").and_then(Value::as_u64).map_or(0, |exp| {
            exp.saturating_sub(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            )
        });
        let until = Instant::now() + Duration::from_secs(expires_in);
        self.verified.offer(self.verified.generation(), digest(token), (caller.clone(), until), Instant::now());
        Ok(caller)
    }

    /// The key for `kid`, fetching the JWKS first when asked (and not fetched too recently).
    async fn key(
        &self,
        issuer: &Issuer,
        kid: &str,
        refetch: bool,
    ) -> Result<Option<(DecodingKey, jsonwebtoken::Algorithm)>> {
        if refetch {
            let mut last = issuer.last_fetch.lock().await;
            let due = last.is_none_or(|at| at.elapsed() >= REFETCH_INTERVAL);
            if due {
                *last = Some(Instant::now());
                let keys = self.fetch_keys(&issuer.config).await?;
                *issuer.keys.write().await = keys;
            }
        }
        Ok(issuer.keys.read().await.get(kid).cloned())
    }

    async fn fetch_keys(
        &self,
        config: &OidcIssuerConfig,
    ) -> Result<HashMap<String, (DecodingKey, jsonwebtoken::Algorithm)>> {
        let unavailable = |what: &str, e: String| {
            tracing::warn!(issuer = %config.issuer, error = %e, "{what}");
            CatalogError::Unavailable(format!("cannot reach the identity provider {}", config.issuer))
        };
        let jwks_url = match &config.jwks_url {
            Some(url) => url.clone(),
            None => {
                let discovery = format!("{}/.well-known/openid-configuration", config.issuer.trim_end_matches('/'));
                let document: Value = self
                    .http
                    .get(&discovery)
                    .send()
                    .await
                    .and_then(reqwest::Response::error_for_status)
                    .map_err(|e| unavailable("OIDC discovery failed", e.to_string()))?
                    .json()
                    .await
                    .map_err(|e| unavailable("OIDC discovery returned no JSON", e.to_string()))?;
                document["jwks_uri"]
                    .as_str()
                    .ok_or_else(|| unavailable("OIDC discovery has no jwks_uri", String::new()))?
                    .to_owned()
            }
        };
        let set: JwkSet = self
            .http
            .get(&jwks_url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| unavailable("fetching the JWKS failed", e.to_string()))?
            .json()
            .await
            .map_err(|e| unavailable("the JWKS is not valid", e.to_string()))?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let (Some(kid), Ok(key)) = (jwk.common.key_id.clone(), DecodingKey::from_jwk(jwk)) else { continue };
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<jsonwebtoken::Algorithm>().ok())
                .unwrap_or(jsonwebtoken::Algorithm::RS256);
            keys.insert(kid, (key, alg));
        }
        tracing::info!(issuer = %config.issuer, keys = keys.len(), "fetched signing keys");
        Ok(keys)
    }
}

fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}
