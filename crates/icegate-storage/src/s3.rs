//! The server's own S3 access for one warehouse profile: an `object_store` client for metadata
//! I/O, the credentials behind it (for STS calls and request signing) and an STS client.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use icegate_catalog::storage::{S3Credentials, S3Profile, SecretCipher};
use icegate_catalog::store::Warehouse;
use icegate_catalog::{CatalogError, Result};
use object_store::aws::{AmazonS3, AmazonS3Builder, AwsCredential};
use object_store::{ClientOptions, CredentialProvider, RetryConfig};

/// Everything the server needs to act on one warehouse profile's bucket.
pub(crate) struct S3Access {
    pub profile: S3Profile,
    pub bucket: String,
    /// The storage root's key prefix (`""` for a whole bucket).
    pub key_prefix: String,
    pub store: Arc<AmazonS3>,
    pub credentials: SharedCredentialsProvider,
    pub sts: aws_sdk_sts::Client,
}

impl S3Access {
    pub(crate) async fn new(warehouse: &Warehouse, cipher: &SecretCipher) -> Result<Self> {
        let profile = warehouse
            .storage_profile
            .s3()
            .ok_or_else(|| {
                CatalogError::bad_request(format!("warehouse {} has no S3 storage profile", warehouse.name))
            })?
            .clone();
        let bucket = warehouse.storage_root.bucket().unwrap_or_default().to_owned();
        let key_prefix = warehouse.storage_root.key_prefix().unwrap_or_default().to_owned();
        let credentials = match &profile.credentials {
            S3Credentials::Static { access_key_id, secret_access_key } => {
                let secret = cipher.open(secret_access_key)?;
                SharedCredentialsProvider::new(Credentials::new(access_key_id, secret, None, None, "icegate-profile"))
            }
            S3Credentials::DefaultChain => {
                let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
                    .region(aws_config::Region::new(profile.region.clone()))
                    .load()
                    .await;
                config.credentials_provider().ok_or_else(|| {
                    CatalogError::bad_request("the AWS default credential chain found no credential provider")
                })?
            }
        };
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&bucket)
            .with_region(&profile.region)
            .with_virtual_hosted_style_request(!profile.path_style_access)
            .with_credentials(Arc::new(ObjectStoreCredentials(credentials.clone())))
            // A stalled store fails a request after 8 s; retries stop 10 s after the first try.
            // Together they stay well below the default request timeout (30 s), so a commit
            // against a hanging store ends in a definite "nothing was committed" rather than
            // an ambiguous timeout.
            .with_retry(RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(10),
                ..RetryConfig::default()
            })
            .with_client_options(
                ClientOptions::new().with_timeout(Duration::from_secs(8)).with_connect_timeout(Duration::from_secs(3)),
            );
        if let Some(endpoint) = &profile.endpoint {
            builder = builder.with_endpoint(endpoint).with_allow_http(endpoint.starts_with("http://"));
        }
        let store = builder
            .build()
            .map_err(|e| CatalogError::bad_request(format!("invalid S3 settings for {}: {e}", warehouse.name)))?;

        let mut sts = aws_sdk_sts::config::Builder::new()
            .behavior_version(aws_sdk_sts::config::BehaviorVersion::latest())
            .region(aws_sdk_sts::config::Region::new(profile.region.clone()))
            .credentials_provider(credentials.clone());
        if let Some(endpoint) = profile.sts.endpoint.as_ref().or(profile.endpoint.as_ref()) {
            sts = sts.endpoint_url(endpoint);
        }
        Ok(Self {
            profile,
            bucket,
            key_prefix,
            store: Arc::new(store),
            credentials,
            sts: aws_sdk_sts::Client::from_conf(sts.build()),
        })
    }

    /// The server's current credentials (for signing).
    pub(crate) async fn current_credentials(&self) -> Result<Credentials> {
        self.credentials
            .provide_credentials()
            .await
            .map_err(|e| CatalogError::Unavailable(format!("the warehouse's storage credentials are unavailable: {e}")))
    }

    /// The object key of an `s3://bucket/key` location in this bucket.
    pub(crate) fn key_of<'a>(&self, location: &'a str) -> Result<&'a str> {
        location
            .strip_prefix("s3://")
            .and_then(|rest| rest.strip_prefix(self.bucket.as_str()))
            .and_then(|rest| rest.strip_prefix('/'))
            .filter(|key| !key.is_empty())
            .ok_or_else(|| CatalogError::bad_request(format!("{location} is not in bucket {}", self.bucket)))
    }
}

/// The AWS SDK's credential provider (static keys or the default chain) behind `object_store`.
#[derive(Debug)]
struct ObjectStoreCredentials(SharedCredentialsProvider);

#[async_trait]
impl CredentialProvider for ObjectStoreCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let credentials = self.0.provide_credentials().await.map_err(|e| object_store::Error::Generic {
            store: "S3",
            source: Box::new(std::io::Error::other(e.to_string())),
        })?;
        Ok(Arc::new(AwsCredential {
            key_id: credentials.access_key_id().to_owned(),
            secret_key: credentials.secret_access_key().to_owned(),
            token: credentials.session_token().map(str::to_owned),
        }))
    }
}
