//! Remote signing: a client sends the S3 request it wants to make, icegate checks that every
//! location it touches lies inside the table and that the operation is allowed at the caller's
//! access level, and only then signs it (SigV4) with the warehouse's credentials.

use std::collections::BTreeMap;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SessionTokenMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use icegate_catalog::storage::{AccessLevel, SignRequest, SignResult, TableLocations};
use icegate_catalog::{CatalogError, Result};

use crate::s3::S3Access;

const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// The S3 operation a request performs, as far as signing cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Operation {
    pub name: &'static str,
    pub access: AccessLevel,
    /// Object keys or key prefixes the operation touches, all of which must lie in the table.
    pub keys: Vec<String>,
}

fn refuse(why: impl Into<String>) -> CatalogError {
    CatalogError::Forbidden(format!("request not signed: {}", why.into()))
}

/// Query parameters each kind of request may carry; anything else (`acl`, `policy`, `tagging`,
/// `cors`, `website`, `retention`, ...) is refused even inside the table.
fn allowed_param(param: &str, allowed: &[&str]) -> bool {
    param == "x-id" || param.starts_with("response-") || allowed.contains(&param)
}

/// Classifies a request on `key` (empty for the bucket itself).
pub(crate) fn classify(
    method: &str,
    key: &str,
    query: &[(String, String)],
    headers: &BTreeMap<String, Vec<String>>,
    body: Option<&str>,
) -> Result<Operation> {
    let has = |p: &str| query.iter().any(|(k, _)| k == p);
    let value = |p: &str| query.iter().find(|(k, _)| k == p).map(|(_, v)| v.clone());
    let check_params = |allowed: &[&str]| -> Result<()> {
        match query.iter().find(|(k, _)| !allowed_param(k, allowed)) {
            Some((param, _)) => Err(refuse(format!("the ?{param} sub-resource is not allowed"))),
            None => Ok(()),
        }
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.first()).cloned();
    let op = |name, access, keys| Ok(Operation { name, access, keys });
    if !key.is_empty() {
        let object = vec![key.to_owned()];
        return match method {
            "GET" | "HEAD" if has("uploadId") => {
                check_params(&["uploadId", "max-parts", "part-number-marker"])?;
                op("ListParts", AccessLevel::ReadWrite, object)
            }
            "GET" | "HEAD" => {
                check_params(&["versionId", "partNumber"])?;
                op("GetObject", AccessLevel::Read, object)
            }
            "PUT" => {
                check_params(&["partNumber", "uploadId"])?;
                let mut keys = object;
                if let Some(source) = header("x-amz-copy-source") {
                    keys.push(copy_source_key(&source)?);
                }
                op("PutObject", AccessLevel::ReadWrite, keys)
            }
            "POST" if has("uploads") || has("uploadId") => {
                check_params(&["uploads", "uploadId"])?;
                op("MultipartUpload", AccessLevel::ReadWrite, object)
            }
            "DELETE" => {
                check_params(&["versionId", "uploadId"])?;
                op("DeleteObject", AccessLevel::ReadWrite, object)
            }
            _ => Err(refuse(format!("{method} on an object is not an allowed operation"))),
        };
    }
    match method {
        "GET" if has("uploads") => {
            check_params(&[
                "uploads",
                "prefix",
                "delimiter",
                "max-uploads",
                "key-marker",
                "upload-id-marker",
                "encoding-type",
            ])?;
            let prefix = value("prefix").ok_or_else(|| refuse("listing uploads needs a prefix inside the table"))?;
            op("ListMultipartUploads", AccessLevel::ReadWrite, vec![prefix])
        }
        "GET" if has("location") => {
            check_params(&["location"])?;
            op("GetBucketLocation", AccessLevel::Read, Vec::new())
        }
        "GET" => {
            check_params(&[
                "list-type",
                "prefix",
                "delimiter",
                "max-keys",
                "continuation-token",
                "start-after",
                "encoding-type",
                "fetch-owner",
                "marker",
            ])?;
            let prefix = value("prefix").ok_or_else(|| refuse("a listing needs a prefix inside the table"))?;
            op("ListObjects", AccessLevel::Read, vec![prefix])
        }
        "POST" if has("delete") => {
            check_params(&["delete"])?;
            let body = body.ok_or_else(|| refuse("DeleteObjects needs its body to check every key"))?;
            op("DeleteObjects", AccessLevel::ReadWrite, delete_keys(body)?)
        }
        _ => Err(refuse(format!("{method} on the bucket is not an allowed operation"))),
    }
}

/// `/bucket/key` or `bucket/key` (URL-encoded, maybe with `?versionId=`) -> `bucket/key`.
fn copy_source_key(source: &str) -> Result<String> {
    let source = source.split('?').next().unwrap_or_default().trim_start_matches('/');
    let decoded = percent_encoding::percent_decode_str(source)
        .decode_utf8()
        .map_err(|_| refuse("x-amz-copy-source is not UTF-8"))?;
    // Marked with a leading '/' so the caller checks bucket and key together.
    Ok(format!("/{decoded}"))
}

/// The keys of a DeleteObjects XML body.
fn delete_keys(body: &str) -> Result<Vec<String>> {
    use quick_xml::Reader;
    use quick_xml::events::Event;
    let mut reader = Reader::from_str(body);
    let mut keys = Vec::new();
    let mut current: Option<String> = None;
    let invalid = |e: &dyn std::fmt::Display| CatalogError::bad_request(format!("invalid DeleteObjects body: {e}"));
    loop {
        match reader.read_event().map_err(|e| invalid(&e))? {
            Event::Start(e) if e.local_name().as_ref() == b"Key" => current = Some(String::new()),
            Event::End(e) if e.local_name().as_ref() == b"Key" => keys.extend(current.take()),
            Event::Text(text) => {
                if let Some(key) = current.as_mut() {
                    key.push_str(&text.decode().map_err(|e| invalid(&e))?);
                }
            }
            Event::GeneralRef(reference) => {
                if let Some(key) = current.as_mut() {
                    let name = reference.decode().map_err(|e| invalid(&e))?;
                    if let Some(c) = reference.resolve_char_ref().map_err(|e| invalid(&e))? {
                        key.push(c);
                    } else if let Some(entity) = quick_xml::escape::resolve_predefined_entity(&name) {
                        key.push_str(entity);
                    } else {
                        return Err(invalid(&format!("unknown entity &{name};")));
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if keys.is_empty() {
        return Err(refuse("DeleteObjects without keys"));
    }
    Ok(keys)
}

/// Splits a request URI into the object key (empty for the bucket) and its query, checking that
/// it addresses this warehouse's bucket on its endpoint.
fn locate(access: &S3Access, uri: &url::Url) -> Result<(String, Vec<(String, String)>)> {
    let host = uri.host_str().ok_or_else(|| CatalogError::bad_request("the request URI has no host"))?;
    let bucket = access.bucket.as_str();
    let endpoint_host = match &access.profile.endpoint {
        Some(endpoint) => {
            let endpoint = url::Url::parse(endpoint).map_err(|e| CatalogError::Internal(anyhow::anyhow!("{e}")))?;
            Some((endpoint.host_str().unwrap_or_default().to_owned(), endpoint.port_or_known_default()))
        }
        None => None,
    };
    let path = uri.path();
    let (service_host, raw_key) = match host.strip_prefix(bucket).and_then(|h| h.strip_prefix('.')) {
        Some(service_host) => (service_host.to_owned(), path.trim_start_matches('/').to_owned()),
        None => {
            let rest = path
                .strip_prefix('/')
                .and_then(|p| p.strip_prefix(bucket))
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))
                .ok_or_else(|| refuse(format!("the request is not for bucket {bucket}")))?;
            (host.to_owned(), rest.trim_start_matches('/').to_owned())
        }
    };
    let endpoint_ok = match endpoint_host {
        Some((endpoint_host, port)) => service_host == endpoint_host && uri.port_or_known_default() == port,
        None => service_host.ends_with(".amazonaws.com") || service_host == "amazonaws.com",
    };
    if !endpoint_ok {
        return Err(refuse(format!("{host} is not this warehouse's storage endpoint")));
    }
    let key = percent_encoding::percent_decode_str(&raw_key)
        .decode_utf8()
        .map_err(|_| CatalogError::bad_request("the object key is not UTF-8"))?
        .into_owned();
    let query = uri.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    Ok((key, query))
}

/// Checks `request` against the table and signs it.
pub(crate) fn check_and_sign(
    access: &S3Access,
    locations: &TableLocations,
    level: AccessLevel,
    request: &SignRequest,
    credentials: &Credentials,
) -> Result<(SignResult, Operation)> {
    let uri = url::Url::parse(&request.uri)
        .map_err(|e| CatalogError::bad_request(format!("invalid request URI {}: {e}", request.uri)))?;
    let (key, query) = locate(access, &uri)?;
    let headers: BTreeMap<String, Vec<String>> =
        request.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
    let operation = classify(&request.method, &key, &query, &headers, request.body.as_deref())?;
    if operation.access == AccessLevel::ReadWrite && level == AccessLevel::Read {
        return Err(refuse(format!("{} needs write access to the table", operation.name)));
    }
    for touched in &operation.keys {
        let location = match touched.strip_prefix('/') {
            Some(bucket_and_key) => format!("s3://{bucket_and_key}"),
            None => format!("s3://{}/{touched}", access.bucket),
        };
        // A prefix may name the table directory itself ("wh/t/"): check it as a file below.
        let probe = if location.ends_with('/') { format!("{location}x") } else { location.clone() };
        if !locations.contains(&probe) {
            return Err(refuse(format!("{location} lies outside the table")));
        }
    }

    // Sign host, content-md5/type and every x-amz-* header the client sends.
    let payload = headers
        .get("x-amz-content-sha256")
        .and_then(|v| v.first())
        .cloned()
        .unwrap_or_else(|| UNSIGNED_PAYLOAD.to_owned());
    let host = match uri.port() {
        Some(port) => format!("{}:{port}", uri.host_str().unwrap_or_default()),
        None => uri.host_str().unwrap_or_default().to_owned(),
    };
    let mut to_sign: Vec<(String, String)> = vec![("host".into(), host)];
    for (name, values) in &headers {
        let signed = name.starts_with("x-amz-") || name == "content-md5" || name == "content-type";
        if signed && name != "x-amz-date" && name != "x-amz-security-token" && name != "x-amz-content-sha256" {
            to_sign.push((name.clone(), values.join(",")));
        }
    }
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.session_token_mode = SessionTokenMode::Include;
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&access.profile.region)
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("signing parameters: {e}")))?
        .into();
    let signable = SignableRequest::new(
        &request.method,
        request.uri.as_str(),
        to_sign.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Precomputed(payload),
    )
    .map_err(|e| CatalogError::bad_request(format!("cannot sign this request: {e}")))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("signing failed: {e}")))?
        .into_parts();
    let mut out: BTreeMap<String, Vec<String>> = request
        .headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("authorization"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (name, value) in instructions.headers() {
        out.retain(|k, _| !k.eq_ignore_ascii_case(name));
        out.insert(name.to_owned(), vec![value.to_owned()]);
    }
    Ok((SignResult { uri: request.uri.clone(), headers: out }, operation))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn object_operations_need_the_right_level() {
        let none = BTreeMap::new();
        assert_eq!(classify("GET", "k", &[], &none, None).unwrap().access, AccessLevel::Read);
        assert_eq!(classify("HEAD", "k", &q(&[("versionId", "1")]), &none, None).unwrap().access, AccessLevel::Read);
        for (method, query) in [
            ("PUT", q(&[])),
            ("PUT", q(&[("partNumber", "1"), ("uploadId", "u")])),
            ("POST", q(&[("uploads", "")])),
            ("DELETE", q(&[])),
        ] {
            assert_eq!(classify(method, "k", &query, &none, None).unwrap().access, AccessLevel::ReadWrite, "{method}");
        }
    }

    #[test]
    fn exposure_changing_sub_resources_are_refused() {
        let none = BTreeMap::new();
        for sub in ["acl", "policy", "tagging", "cors", "website", "retention", "legal-hold", "restore", "torrent"] {
            for method in ["GET", "PUT", "DELETE"] {
                let err = classify(method, "k", &q(&[(sub, "")]), &none, None).unwrap_err();
                assert!(matches!(err, CatalogError::Forbidden(_)), "{method} ?{sub}");
                assert!(classify(method, "", &q(&[(sub, ""), ("prefix", "p/")]), &none, None).is_err());
            }
        }
        assert!(classify("POST", "k", &[], &none, None).is_err(), "POST object without multipart");
        assert!(classify("GET", "", &[], &none, None).is_err(), "a listing without a prefix");
    }

    #[test]
    fn delete_objects_bodies_yield_every_key_and_copies_their_source() {
        let body = "<Delete><Object><Key>wh/t/a.parquet</Key></Object><Object><Key>wh/u/&amp;b</Key></Object></Delete>";
        let op = classify("POST", "", &q(&[("delete", "")]), &BTreeMap::new(), Some(body)).unwrap();
        assert_eq!(op.keys, ["wh/t/a.parquet", "wh/u/&b"]);
        let headers =
            BTreeMap::from([("x-amz-copy-source".to_owned(), vec!["/lake/wh/u/x%20y?versionId=3".to_owned()])]);
        let op = classify("PUT", "wh/t/c", &[], &headers, None).unwrap();
        assert_eq!(op.keys, ["wh/t/c", "/lake/wh/u/x y"]);
    }
}
