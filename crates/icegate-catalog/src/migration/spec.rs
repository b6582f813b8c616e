//! A migration's source as a request names it, and as the catalog keeps it: secrets sealed
//! with the server's key (`secrets.encryption_key`, as storage profiles' are), shown redacted,
//! and who may name it. Every source makes the server reach somewhere a warehouse admin could
//! not otherwise (a database on its network, a file on its disk, another catalog with given
//! credentials, a cloud account), so naming one needs admin on the server unless its endpoint
//! is one the operator allowed (`storage.allowed_endpoints`, for REST catalogs and Glue).

use serde::{Deserialize, Serialize};

use crate::storage::{AllowedEndpoint, Secret, SecretCipher};
use crate::{CatalogError, Result};

/// A source as a request gives it (secrets in the clear, only in the request).
#[derive(Debug, Serialize, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SourceRequest {
    /// Any Iceberg REST catalog.
    Rest {
        uri: String,
        #[serde(default)]
        warehouse: Option<String>,
        /// OAuth2 client credentials, `<client-id>:<client-secret>`.
        #[serde(default)]
        credential: Option<String>,
        /// A bearer token, in place of `credential`.
        #[serde(default)]
        token: Option<String>,
        #[serde(default)]
        scope: Option<String>,
    },
    /// The JDBC/SQL catalog schema (Java's `JdbcCatalog`, PyIceberg's `SqlCatalog`).
    Sql {
        /// `sqlite:////absolute/path.db` or `postgresql://user:password@host:port/database`.
        uri: String,
        #[serde(rename = "catalog-name")]
        catalog_name: String,
    },
    /// AWS Glue's Iceberg tables.
    Glue {
        region: String,
        #[serde(default)]
        endpoint: Option<String>,
        #[serde(default, rename = "catalog-id")]
        catalog_id: Option<String>,
    },
}

/// A source as the catalog keeps it: what is secret sealed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SourceSpec {
    Rest {
        uri: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        warehouse: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        credential: Option<Secret>,
        #[serde(skip_serializing_if = "Option::is_none")]
        token: Option<Secret>,
        #[serde(skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
    },
    Sql {
        /// The whole URI, sealed, when it holds a password (`None`: `shown` is all of it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<Secret>,
        /// What can be shown: the URI without its password.
        shown: String,
        #[serde(rename = "catalog-name")]
        catalog_name: String,
    },
    Glue {
        region: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", rename = "catalog-id")]
        catalog_id: Option<String>,
    },
}

/// A database URI as it can be shown: any password replaced (`postgresql://user:***@host/db`)
/// and the query left out (it can hold one too, under any spelling a driver decodes).
fn without_password(uri: &str) -> String {
    match url::Url::parse(uri) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.to_string()
        }
        Err(_) => uri.split(['?', '#']).next().unwrap_or_default().to_owned(),
    }
}

fn http_url(what: &str, uri: &str) -> Result<()> {
    let parsed = url::Url::parse(uri).map_err(|e| CatalogError::bad_request(format!("{what} {uri:?}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(CatalogError::bad_request(format!("{what} {uri:?} is not an http(s) URL with a host")));
    }
    // Credentials go in their own (sealed) fields; a query or fragment has no place in a base URL.
    if !parsed.username().is_empty()
        || parsed.password().is_some()
        || parsed.query().is_some()
        || parsed.fragment().is_some()
    {
        return Err(CatalogError::bad_request(format!(
            "{what} holds a user, password, query or fragment: give credentials in their own fields"
        )));
    }
    Ok(())
}

impl SourceRequest {
    /// `rest`, `sql` or `glue`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Rest { .. } => "rest",
            Self::Sql { .. } => "sql",
            Self::Glue { .. } => "glue",
        }
    }

    /// Why naming this source needs admin on the server (empty: a warehouse admin may). A SQL
    /// source always does (a file on the server's disk, a database on its network); a REST
    /// catalog or a Glue endpoint unless `allowed` lists it; Glue without an endpoint acts with
    /// the server's own cloud identity.
    pub fn server_admin_reasons(&self, allowed: &[AllowedEndpoint]) -> Vec<String> {
        let listed = |url: &str| allowed.iter().any(|a| a.allows(url));
        match self {
            Self::Sql { .. } => vec!["a SQL source opens a database the server reaches (a file or a host)".into()],
            Self::Rest { uri, .. } if !listed(uri) => vec![format!("{uri} is not in storage.allowed_endpoints")],
            Self::Rest { .. } => Vec::new(),
            // Glue is reached with the server's own AWS identity (its default credential chain),
            // whichever endpoint: what that identity may see and sign is the server's admins' to lend.
            Self::Glue { .. } => vec!["a Glue source acts with the server's own AWS identity".into()],
        }
    }

    /// Checks the source's fields and seals its secrets.
    pub fn seal(self, cipher: &SecretCipher) -> Result<SourceSpec> {
        match self {
            Self::Rest { uri, warehouse, credential, token, scope } => {
                http_url("uri", &uri)?;
                if credential.is_some() && token.is_some() {
                    return Err(CatalogError::bad_request("a REST source takes a credential or a token, not both"));
                }
                if credential.as_deref().is_some_and(|c| !c.contains(':')) {
                    return Err(CatalogError::bad_request("credential is <client-id>:<client-secret>"));
                }
                Ok(SourceSpec::Rest {
                    uri,
                    warehouse,
                    credential: credential.map(|c| cipher.seal(&c)).transpose()?,
                    token: token.map(|t| cipher.seal(&t)).transpose()?,
                    scope,
                })
            }
            Self::Sql { uri, catalog_name } => {
                let sqlite = uri.starts_with("sqlite:////") && uri.len() > "sqlite:////".len() && !uri.contains('?');
                let postgres = uri.split_once("://").is_some_and(|(scheme, _)| {
                    scheme == "postgres" || scheme == "postgresql" || scheme.starts_with("postgresql+")
                });
                if !sqlite && !postgres {
                    return Err(CatalogError::bad_request(
                        "a SQL source's uri is sqlite:////<absolute path> or postgresql://<host>/<database>",
                    ));
                }
                if catalog_name.is_empty() || catalog_name.len() > 255 {
                    return Err(CatalogError::bad_request("catalog-name is 1-255 characters"));
                }
                // A database URI that can hold a secret is sealed whole: one with a password in its
                // user part or any query (a driver decodes a password there under many spellings).
                // A SQLite file's path, or a bare postgresql://user@host/db, holds none.
                let shown = if sqlite { uri.clone() } else { without_password(&uri) };
                let sealed = if shown == uri { None } else { Some(cipher.seal(&uri)?) };
                Ok(SourceSpec::Sql { shown, uri: sealed, catalog_name })
            }
            Self::Glue { region, endpoint, catalog_id } => {
                if region.is_empty()
                    || region.len() > 64
                    || !region.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                {
                    return Err(CatalogError::bad_request(format!("region {region:?} is not an AWS region")));
                }
                if let Some(url) = &endpoint {
                    http_url("endpoint", url)?;
                }
                Ok(SourceSpec::Glue { region, endpoint, catalog_id })
            }
        }
    }
}

impl SourceSpec {
    /// Which catalog this is, without secrets: one live migration of each of its tables.
    pub fn identity(&self) -> String {
        match self {
            Self::Rest { uri, warehouse, .. } => format!("rest {uri} {}", warehouse.as_deref().unwrap_or_default()),
            Self::Sql { shown, catalog_name, .. } => format!("sql {shown} {catalog_name}"),
            Self::Glue { region, endpoint, catalog_id } => format!(
                "glue {region} {} {}",
                endpoint.as_deref().unwrap_or_default(),
                catalog_id.as_deref().unwrap_or_default()
            ),
        }
    }

    /// A SQL source's URI, opened (`None`: not a SQL source).
    pub fn sql_uri(&self, cipher: &SecretCipher) -> Result<Option<String>> {
        match self {
            Self::Sql { uri: Some(sealed), .. } => cipher.open(sealed).map(Some),
            Self::Sql { shown, .. } => Ok(Some(shown.clone())),
            _ => Ok(None),
        }
    }

    /// The source as an answer shows it: no secret, sealed or not.
    pub fn redacted(&self) -> serde_json::Value {
        match self {
            Self::Rest { uri, warehouse, credential, token, scope } => serde_json::json!({
                "type": "rest", "uri": uri, "warehouse": warehouse, "scope": scope,
                "credential": credential.as_ref().map(|_| "***"), "token": token.as_ref().map(|_| "***"),
            }),
            Self::Sql { shown, catalog_name, .. } => {
                serde_json::json!({ "type": "sql", "uri": shown, "catalog-name": catalog_name })
            }
            Self::Glue { region, endpoint, catalog_id } => {
                serde_json::json!({ "type": "glue", "region": region, "endpoint": endpoint, "catalog-id": catalog_id })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cipher() -> SecretCipher {
        SecretCipher::from_base64(Some("MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=")).unwrap()
    }

    fn request(json: serde_json::Value) -> SourceRequest {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn secrets_are_sealed_kept_and_never_shown() {
        let sql = request(serde_json::json!({
            "type": "sql", "uri": "postgresql+psycopg2://etl:hunter2@db:5432/catalog", "catalog-name": "prod"
        }));
        let sealed = sql.seal(&cipher()).unwrap();
        let stored = serde_json::to_string(&sealed).unwrap();
        assert!(!stored.contains("hunter2"), "{stored}");
        let SourceSpec::Sql { uri, .. } = serde_json::from_str::<SourceSpec>(&stored).unwrap() else { panic!() };
        assert_eq!(cipher().open(&uri.unwrap()).unwrap(), "postgresql+psycopg2://etl:hunter2@db:5432/catalog");
        // Nothing secret in a SQLite path or a bare PostgreSQL URI: kept as it is, no key needed.
        let bare =
            request(serde_json::json!({ "type": "sql", "uri": "postgresql://etl@db:5432/c", "catalog-name": "c" }));
        assert!(bare.seal(&SecretCipher::unconfigured()).is_ok());
        let file = request(serde_json::json!({ "type": "sql", "uri": "sqlite:////srv/cat.db", "catalog-name": "c" }));
        let kept = file.seal(&SecretCipher::unconfigured()).unwrap();
        assert_eq!(kept.sql_uri(&SecretCipher::unconfigured()).unwrap().as_deref(), Some("sqlite:////srv/cat.db"));
        let shown = sealed.redacted().to_string();
        assert!(!shown.contains("hunter2") && shown.contains("etl:***@db"), "{shown}");
        // A password in the query, under a spelling the driver decodes, is sealed and never shown.
        for uri in [
            "postgresql://etl@db/catalog?pass%77ord=hunter2",
            "postgresql://etl@db/catalog?sslmode=disable&%70assword=hunter2",
            "postgres://etl@db/catalog?passwd=hunter2",
        ] {
            let request = request(serde_json::json!({ "type": "sql", "uri": uri, "catalog-name": "c" }));
            let sealed = request.seal(&cipher()).unwrap();
            let everything = format!("{} {}", serde_json::to_string(&sealed).unwrap(), sealed.redacted());
            assert!(!everything.contains("hunter2"), "{everything}");
            assert_eq!(sealed.sql_uri(&cipher()).unwrap().as_deref(), Some(uri));
        }

        let rest =
            request(serde_json::json!({ "type": "rest", "uri": "https://cat.example/api", "credential": "id:s3cret" }));
        let sealed = rest.seal(&cipher()).unwrap();
        assert!(!serde_json::to_string(&sealed).unwrap().contains("s3cret"));
        assert_eq!(sealed.redacted()["credential"], "***");
        // No key configured: nothing secret is stored in the clear.
        let again = request(serde_json::json!({ "type": "rest", "uri": "https://cat.example/api", "token": "t" }));
        assert!(again.seal(&SecretCipher::unconfigured()).is_err());
    }

    #[test]
    fn sources_are_checked_and_the_server_admin_decides_what_the_server_reaches() {
        for bad in [
            serde_json::json!({ "type": "sql", "uri": "sqlite:///relative.db", "catalog-name": "c" }),
            serde_json::json!({ "type": "sql", "uri": "mysql://h/db", "catalog-name": "c" }),
            serde_json::json!({ "type": "sql", "uri": "sqlite:////x.db", "catalog-name": "" }),
            serde_json::json!({ "type": "rest", "uri": "file:///etc/passwd" }),
            serde_json::json!({ "type": "rest", "uri": "https://h", "credential": "no-colon" }),
            serde_json::json!({ "type": "rest", "uri": "https://alice:pw@h/api" }),
            serde_json::json!({ "type": "rest", "uri": "https://h/api?token=x" }),
            serde_json::json!({ "type": "glue", "region": "us-east-1", "endpoint": "https://h/#x" }),
            serde_json::json!({ "type": "glue", "region": "us-east-1; rm" }),
        ] {
            assert!(request(bad.clone()).seal(&cipher()).is_err(), "{bad}");
        }
        assert!(
            serde_json::from_value::<SourceRequest>(serde_json::json!({ "type": "hive", "uri": "thrift://h" }))
                .is_err()
        );
        let allowed = [AllowedEndpoint::parse("https://cat.example").unwrap()];
        let rest = request(serde_json::json!({ "type": "rest", "uri": "https://cat.example/api" }));
        assert!(rest.server_admin_reasons(&allowed).is_empty());
        assert!(!rest.server_admin_reasons(&[]).is_empty());
        let sql = request(serde_json::json!({ "type": "sql", "uri": "sqlite:////x.db", "catalog-name": "c" }));
        assert!(!sql.server_admin_reasons(&allowed).is_empty(), "a SQL source always needs a server admin");
        let glue = request(serde_json::json!({ "type": "glue", "region": "us-east-1" }));
        assert!(!glue.server_admin_reasons(&allowed).is_empty());
        let listed =
            request(serde_json::json!({ "type": "glue", "region": "us-east-1", "endpoint": "https://cat.example" }));
        assert!(!listed.server_admin_reasons(&allowed).is_empty(), "Glue signs with the server's identity");
    }
}
