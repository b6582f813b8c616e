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
            // Markup inside a key is something the store may read differently: refused.
            Event::Start(_) | Event::Empty(_) if current.is_some() => {
                return Err(refuse("DeleteObjects body has markup inside a Key"));
            }
            Event::Start(e) if e.local_name().as_ref() == b"Key" => current = Some(String::new()),
            Event::End(e) if e.local_name().as_ref() == b"Key" => keys.extend(current.take()),
            Event::Text(text) => {
                if let Some(key) = current.as_mut() {
                    key.push_str(&text.decode().map_err(|e| invalid(&e))?);
                }
            }
            Event::CData(text) => {
                if let Some(key) = current.as_mut() {
                    key.push_str(&text.decode().map_err(|e| invalid(&e))?);
                }
            }
            Event::DocType(_) => return Err(refuse("DeleteObjects body declares a document type")),
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

/// The request URI, checked to be exactly the form the store will act on. A client could
/// otherwise have one URI checked and another one acted on: dot segments (`/x/../lake/...`),
/// their percent-encoded forms, encoded separators and anything a URL parser rewrites. The URI
/// is refused unless parsing leaves it unchanged, so what is checked is what is signed.
fn canonical_uri(raw: &str) -> Result<url::Url> {
    if raw.chars().any(|c| c.is_whitespace() || c.is_control() || c == '\\' || c == '#') {
        return Err(refuse("the request URI contains whitespace, a backslash or a fragment"));
    }
    let uri = url::Url::parse(raw).map_err(|e| CatalogError::bad_request(format!("invalid request URI: {e}")))?;
    if !matches!(uri.scheme(), "http" | "https") {
        return Err(refuse(format!("{}:// is not an S3 request URI", uri.scheme())));
    }
    if !uri.username().is_empty() || uri.password().is_some() {
        return Err(refuse("the request URI carries user information"));
    }
    for segment in uri.path().split('/') {
        let lower = segment.to_ascii_lowercase();
        if lower.contains("%2f") || lower.contains("%5c") {
            return Err(refuse("the request path contains an encoded separator"));
        }
        let decoded = percent_encoding::percent_decode_str(segment).decode_utf8_lossy();
        if decoded == "." || decoded == ".." {
            return Err(refuse("the request path contains a dot segment"));
        }
    }
    if uri.as_str() != raw {
        return Err(refuse(format!(
            "the request URI is not in canonical form (a store would read it as {})",
            uri.as_str()
        )));
    }
    Ok(uri)
}

/// Where the warehouse's bucket is served: the profile's endpoint, or AWS's S3 hosts for its
/// region. Each entry is an exact host and port.
pub(crate) fn service_hosts(endpoint: Option<&str>, region: &str) -> Result<Vec<(String, u16)>> {
    if let Some(endpoint) = endpoint {
        let endpoint = url::Url::parse(endpoint).map_err(|e| CatalogError::Internal(anyhow::anyhow!("{e}")))?;
        let host = endpoint.host_str().unwrap_or_default().to_ascii_lowercase();
        let port = endpoint.port_or_known_default().unwrap_or(443);
        return Ok(vec![(host, port)]);
    }
    let suffix = if region.starts_with("cn-") { "amazonaws.com.cn" } else { "amazonaws.com" };
    let mut hosts = vec![
        format!("s3.{region}.{suffix}"),
        format!("s3-{region}.{suffix}"),
        format!("s3.dualstack.{region}.{suffix}"),
    ];
    if region == "us-east-1" {
        hosts.push(format!("s3.{suffix}"));
    }
    Ok(hosts.into_iter().flat_map(|h| [(h.clone(), 443), (h, 80)]).collect())
}

/// How a store reads the bucket from a request: AWS's own hosts read both forms alike; another
/// endpoint reads exactly the form its profile says (a path-style-only store would read a
/// virtual-hosted URI's first path segment as the bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Addressing {
    Either,
    PathStyle,
    VirtualHosted,
}

impl Addressing {
    pub(crate) fn of(endpoint: Option<&str>, path_style_access: bool) -> Self {
        match (endpoint, path_style_access) {
            (None, _) => Self::Either,
            (Some(_), true) => Self::PathStyle,
            (Some(_), false) => Self::VirtualHosted,
        }
    }
}

/// Splits a request URI into the object key (empty for the bucket) and its query, checking that
/// it addresses exactly this warehouse's bucket: virtual-hosted (`<bucket>.<service host>`) or
/// path-style (`<service host>/<bucket>/...`) as `addressing` allows, on one of `hosts`. Nothing
/// is matched by suffix, so `lake.x.s3...` (bucket `lake.x`) is not bucket `lake`. A query
/// parameter given twice is refused: the store may act on another value than the one checked.
pub(crate) fn locate(
    bucket: &str,
    hosts: &[(String, u16)],
    addressing: Addressing,
    uri: &url::Url,
) -> Result<(String, Vec<(String, String)>)> {
    let host = uri.host_str().ok_or_else(|| CatalogError::bad_request("the request URI has no host"))?;
    let port = uri.port_or_known_default().unwrap_or(0);
    let path = uri.path();
    let virtual_hosted = addressing != Addressing::PathStyle
        && hosts.iter().any(|(service, p)| *p == port && host == format!("{bucket}.{service}"));
    let path_style =
        addressing != Addressing::VirtualHosted && hosts.iter().any(|(service, p)| *p == port && host == service);
    let raw_key = if virtual_hosted {
        path.strip_prefix('/').unwrap_or(path).to_owned()
    } else if path_style {
        let rest = path
            .strip_prefix('/')
            .and_then(|p| p.strip_prefix(bucket))
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
            .ok_or_else(|| refuse(format!("the request is not for bucket {bucket}")))?;
        rest.strip_prefix('/').unwrap_or(rest).to_owned()
    } else {
        return Err(refuse(format!("{host} is not this warehouse's storage endpoint for bucket {bucket}")));
    };
    let key = percent_encoding::percent_decode_str(&raw_key)
        .decode_utf8()
        .map_err(|_| CatalogError::bad_request("the object key is not UTF-8"))?
        .into_owned();
    let query: Vec<(String, String)> = uri.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let mut seen = std::collections::HashSet::new();
    if let Some((twice, _)) = query.iter().find(|(k, _)| !seen.insert(k.to_ascii_lowercase())) {
        return Err(refuse(format!("the query parameter {twice} is given more than once")));
    }
    Ok((key, query))
}

/// Headers the signer sets itself; a client's values for them are replaced.
const SIGNER_HEADERS: [&str; 4] = ["authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"];

/// Whether a header of the client's request may be signed for `operation`. `x-amz-*` headers
/// outside this list refuse the request: S3 acts on them (`x-amz-acl`, `x-amz-grant-*`,
/// `x-amz-tagging`, `x-amz-website-redirect-location`, object lock, KMS keys, ...), and a
/// signature must not carry a change of exposure that the sub-resource rules refuse.
fn header_allowed(operation: &str, name: &str) -> bool {
    let writes = matches!(operation, "PutObject" | "MultipartUpload");
    match name {
        "content-type" | "content-md5" | "x-amz-expected-bucket-owner" | "x-amz-request-payer" => true,
        "range"
        | "if-match"
        | "if-none-match"
        | "if-modified-since"
        | "if-unmodified-since"
        | "x-amz-checksum-mode" => true,
        "x-amz-sdk-checksum-algorithm"
        | "x-amz-checksum-crc32"
        | "x-amz-checksum-crc32c"
        | "x-amz-checksum-crc64nvme"
        | "x-amz-checksum-sha1"
        | "x-amz-checksum-sha256"
        | "x-amz-checksum-type" => writes || operation == "DeleteObjects",
        "content-encoding" | "x-amz-trailer" | "x-amz-decoded-content-length" | "x-amz-server-side-encryption" => {
            writes
        }
        "x-amz-copy-source"
        | "x-amz-copy-source-range"
        | "x-amz-metadata-directive"
        | "x-amz-copy-source-if-match"
        | "x-amz-copy-source-if-none-match"
        | "x-amz-copy-source-if-modified-since"
        | "x-amz-copy-source-if-unmodified-since" => operation == "PutObject",
        other => writes && other.starts_with("x-amz-meta-"),
    }
}

/// Whether a header is one S3 requires to be signed when present (every `x-amz-*`).
fn must_be_signed(name: &str) -> bool {
    name.starts_with("x-amz-") || name == "content-md5"
}

/// The payload hash to sign, and headers the signer sets from the body it checked.
///
/// A body that decides what is touched (DeleteObjects' key list) is hashed here: the signature
/// then holds only for exactly the body that was checked, and the store refuses any other. The
/// client's claimed hashes and checksums are replaced or verified, never trusted. For other
/// operations the body does not choose what is touched, so the client's own payload hash (or
/// `UNSIGNED-PAYLOAD`) is signed as it stands.
fn payload(
    operation: &Operation,
    headers: &BTreeMap<String, Vec<String>>,
    body: Option<&str>,
) -> Result<(String, Vec<(String, String)>)> {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use sha2::Digest;
    let header = |name: &str| headers.get(name).and_then(|v| v.first()).map(String::as_str);
    if operation.name == "DeleteObjects" {
        let body = body.ok_or_else(|| refuse("DeleteObjects needs its body to check every key"))?.as_bytes();
        let sha256 = sha2::Sha256::digest(body);
        let mut computed = vec![("content-md5".to_owned(), STANDARD.encode(<md5::Md5 as md5::Digest>::digest(body)))];
        for (name, values) in headers {
            let Some(algorithm) = name.strip_prefix("x-amz-checksum-") else { continue };
            let claimed = values.first().map(String::as_str).unwrap_or_default();
            let actual = match algorithm {
                "crc32" => STANDARD.encode(crc32fast::hash(body).to_be_bytes()),
                "sha256" => STANDARD.encode(sha256),
                "mode" | "type" => continue,
                other => return Err(refuse(format!("DeleteObjects with an x-amz-checksum-{other} cannot be checked"))),
            };
            if claimed != actual {
                return Err(refuse(format!("x-amz-checksum-{algorithm} does not match the body that was checked")));
            }
            computed.push((name.clone(), actual));
        }
        let hex: String = sha256.iter().map(|b| format!("{b:02x}")).collect();
        return Ok((hex, computed));
    }
    let claimed = header("x-amz-content-sha256").unwrap_or(UNSIGNED_PAYLOAD);
    let is_hash = claimed.len() == 64 && claimed.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    if claimed == UNSIGNED_PAYLOAD || claimed == "STREAMING-UNSIGNED-PAYLOAD-TRAILER" || is_hash {
        Ok((claimed.to_owned(), Vec::new()))
    } else {
        Err(refuse(format!("payload hash {claimed:?} cannot be signed")))
    }
}

/// Checks `request` against the table and signs it.
pub(crate) fn check_and_sign(
    access: &S3Access,
    (locations, read_only): (&TableLocations, &TableLocations),
    level: AccessLevel,
    request: &SignRequest,
    credentials: &Credentials,
) -> Result<(SignResult, Operation)> {
    let uri = canonical_uri(&request.uri)?;
    let hosts = service_hosts(access.profile.endpoint.as_deref(), &access.profile.region)?;
    let addressing = Addressing::of(access.profile.endpoint.as_deref(), access.profile.path_style_access);
    let (key, query) = locate(&access.bucket, &hosts, addressing, &uri)?;
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, values) in &request.headers {
        headers.entry(name.to_ascii_lowercase()).or_default().extend(values.iter().cloned());
    }
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
        // An adopted table's sources are read, never written (whatever the caller's level).
        let inside =
            locations.contains(&probe) || (operation.access == AccessLevel::Read && read_only.contains(&probe));
        if !inside || touched.split('/').any(|segment| segment == "." || segment == "..") {
            return Err(refuse(format!("{location} lies outside the table")));
        }
    }
    let (payload_hash, computed) = payload(&operation, &headers, request.body.as_deref())?;

    // Sign the host, the headers computed from the checked body, and the client's headers that
    // the operation allows; any other header S3 would act on refuses the request.
    let host = match uri.port() {
        Some(port) => format!("{}:{port}", uri.host_str().unwrap_or_default()),
        None => uri.host_str().unwrap_or_default().to_owned(),
    };
    let mut to_sign: BTreeMap<String, String> = BTreeMap::from([("host".to_owned(), host)]);
    for (name, values) in &headers {
        if SIGNER_HEADERS.contains(&name.as_str()) || name == "host" {
            continue;
        }
        if header_allowed(operation.name, name) {
            to_sign.insert(name.clone(), values.join(","));
        } else if must_be_signed(name) {
            return Err(refuse(format!("the {name} header is not allowed on {}", operation.name)));
        }
    }
    to_sign.extend(computed.iter().cloned());
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
        uri.as_str(),
        to_sign.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Precomputed(payload_hash),
    )
    .map_err(|e| CatalogError::bad_request(format!("cannot sign this request: {e}")))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("signing failed: {e}")))?
        .into_parts();
    // The client's headers, less those the signer sets or replaced, then what was signed.
    let mut out: BTreeMap<String, Vec<String>> = request
        .headers
        .iter()
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            !SIGNER_HEADERS.contains(&k.as_str()) && !computed.iter().any(|(c, _)| *c == k)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (name, value) in computed.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(instructions.headers()) {
        out.retain(|k, _| !k.eq_ignore_ascii_case(name));
        out.insert(name.to_owned(), vec![value.to_owned()]);
    }
    let signed = SignResult {
        uri: uri.as_str().to_owned(),
        headers: out,
        operation: operation.name.to_string(),
        bucket: access.bucket.clone(),
        key,
    };
    Ok((signed, operation))
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

    #[test]
    fn uris_that_a_store_would_read_differently_are_refused() {
        for bad in [
            "http://127.0.0.1:9000/other/x/../../lake/wh/t/y.txt",
            "http://127.0.0.1:9000/lake/wh/t/./y.txt",
            "http://127.0.0.1:9000/lake/wh/t/%2e%2e/u/y.txt",
            "http://127.0.0.1:9000/lake/wh/t/.%2E/u/y.txt",
            "http://127.0.0.1:9000/lake/wh/t%2F..%2Fu/y.txt",
            "http://127.0.0.1:9000/lake/wh/t\\..\\u/y.txt",
            "http://127.0.0.1:9000/lake/wh/t/y.txt#frag",
            "http://user:pw@127.0.0.1:9000/lake/wh/t/y.txt",
            "HTTP://127.0.0.1:9000/lake/wh/t/y.txt",
            "http://127.0.0.1:80/lake/wh/t/y.txt",
            "http://127.0.0.1:9000/lake/wh/t/a b",
            "ftp://127.0.0.1/lake/wh/t/y.txt",
        ] {
            assert!(canonical_uri(bad).is_err(), "{bad} was accepted");
        }
        let good = "http://127.0.0.1:9000/lake/wh/t/data/a%20b.parquet?x-id=PutObject";
        assert_eq!(canonical_uri(good).unwrap().as_str(), good);
    }

    #[test]
    fn only_the_exact_bucket_on_the_exact_endpoint_is_located() {
        let aws = service_hosts(None, "us-east-1").unwrap();
        let parse = |u: &str| url::Url::parse(u).unwrap();
        let key = |u: &str| locate("lake", &aws, Addressing::Either, &parse(u)).map(|(k, _)| k);
        assert_eq!(key("https://lake.s3.amazonaws.com/wh/t/x").unwrap(), "wh/t/x");
        assert_eq!(key("https://lake.s3.us-east-1.amazonaws.com/wh/t/x").unwrap(), "wh/t/x");
        assert_eq!(key("https://s3.us-east-1.amazonaws.com/lake/wh/t/x").unwrap(), "wh/t/x");
        assert_eq!(key("https://s3.amazonaws.com/lake").unwrap(), "");
        for other in [
            "https://lake.x.s3.amazonaws.com/wh/t/x",
            "https://lake.evil.amazonaws.com/wh/t/x",
            "https://s3.amazonaws.com/lake2/wh/t/x",
            "https://s3.amazonaws.com/other/lake/wh/t/x",
            "https://lake.s3.eu-west-1.amazonaws.com/wh/t/x",
            "https://lake.s3.amazonaws.com:8443/wh/t/x",
            "https://evil.com/lake/wh/t/x",
            "https://lakes3.amazonaws.com/wh/t/x",
        ] {
            assert!(key(other).is_err(), "{other} was located in bucket lake");
        }
        let minio = service_hosts(Some("http://127.0.0.1:9000"), "us-east-1").unwrap();
        let path = Addressing::of(Some("http://127.0.0.1:9000"), true);
        assert_eq!(locate("lake", &minio, path, &parse("http://127.0.0.1:9000/lake/wh/t")).unwrap().0, "wh/t");
        assert!(locate("lake", &minio, path, &parse("http://127.0.0.1:9001/lake/wh/t")).is_err());
        assert!(locate("lake", &minio, path, &parse("http://127.0.0.2:9000/lake/wh/t")).is_err());
        assert!(key("https://s3.amazonaws.com/lake?prefix=wh/t/&prefix=other/").is_err(), "a parameter given twice");
        assert!(key("https://s3.amazonaws.com/lake?prefix=wh/t/&Prefix=other/").is_err(), "in any case");
    }

    #[test]
    fn a_store_is_addressed_only_in_the_style_its_profile_names() {
        let parse = |u: &str| url::Url::parse(u).unwrap();
        let hosts = service_hosts(Some("http://localhost:9000"), "us-east-1").unwrap();
        // A path-style-only store reads `lake-whole.localhost:9000/lake/x` as bucket `lake`.
        let path = Addressing::of(Some("http://localhost:9000"), true);
        assert!(locate("lake-whole", &hosts, path, &parse("http://lake-whole.localhost:9000/lake/x")).is_err());
        assert_eq!(locate("lake-whole", &hosts, path, &parse("http://localhost:9000/lake-whole/x")).unwrap().0, "x");
        let virtual_hosted = Addressing::of(Some("http://localhost:9000"), false);
        assert!(locate("lake", &hosts, virtual_hosted, &parse("http://localhost:9000/lake/x")).is_err());
        assert_eq!(locate("lake", &hosts, virtual_hosted, &parse("http://lake.localhost:9000/x")).unwrap().0, "x");
    }

    #[test]
    fn exposure_changing_headers_are_never_signed() {
        for header in [
            "x-amz-acl",
            "x-amz-grant-read",
            "x-amz-grant-full-control",
            "x-amz-tagging",
            "x-amz-website-redirect-location",
            "x-amz-object-lock-mode",
            "x-amz-server-side-encryption-aws-kms-key-id",
            "x-amz-storage-class",
            "x-amz-unknown",
        ] {
            assert!(!header_allowed("PutObject", header), "{header}");
            assert!(must_be_signed(header));
        }
        assert!(header_allowed("PutObject", "x-amz-checksum-crc32"));
        assert!(header_allowed("PutObject", "x-amz-meta-owner"));
        assert!(!header_allowed("GetObject", "x-amz-meta-owner"));
        assert!(!header_allowed("GetObject", "x-amz-copy-source"));
    }

    #[test]
    fn delete_objects_are_signed_for_the_body_that_was_checked() {
        use base64::Engine;
        let body = "<Delete><Object><Key>wh/t/a</Key></Object></Delete>";
        let op = Operation { name: "DeleteObjects", access: AccessLevel::ReadWrite, keys: vec!["wh/t/a".into()] };
        let claimed = BTreeMap::from([
            ("x-amz-content-sha256".to_owned(), vec![UNSIGNED_PAYLOAD.to_owned()]),
            ("content-md5".to_owned(), vec!["AAAAAAAAAAAAAAAAAAAAAA==".to_owned()]),
        ]);
        let (hash, computed) = payload(&op, &claimed, Some(body)).unwrap();
        use sha2::Digest;
        let expected: String = sha2::Sha256::digest(body.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hash, expected, "the hash of the checked body, not the client's claim");
        let md5 = base64::engine::general_purpose::STANDARD.encode(<md5::Md5 as md5::Digest>::digest(body.as_bytes()));
        assert_eq!(computed, [("content-md5".to_owned(), md5)]);
        assert!(payload(&op, &BTreeMap::new(), None).is_err(), "no body, no signature");
        let wrong = BTreeMap::from([("x-amz-checksum-crc32".to_owned(), vec!["AAAAAA==".to_owned()])]);
        assert!(payload(&op, &wrong, Some(body)).is_err());
        let crc = base64::engine::general_purpose::STANDARD.encode(crc32fast::hash(body.as_bytes()).to_be_bytes());
        let right = BTreeMap::from([("x-amz-checksum-crc32".to_owned(), vec![crc])]);
        assert!(payload(&op, &right, Some(body)).is_ok());
        let put = Operation { name: "PutObject", access: AccessLevel::ReadWrite, keys: vec!["wh/t/a".into()] };
        let streaming = BTreeMap::from([(
            "x-amz-content-sha256".to_owned(),
            vec!["STREAMING-AWS4-HMAC-SHA256-PAYLOAD".to_owned()],
        )]);
        assert!(payload(&put, &streaming, None).is_err(), "chunk signatures would need icegate's key");
        assert_eq!(payload(&put, &BTreeMap::new(), None).unwrap().0, UNSIGNED_PAYLOAD);
    }

    #[test]
    fn markup_inside_a_delete_key_is_refused_and_cdata_is_read() {
        let q = [("delete".to_owned(), String::new())];
        let none = BTreeMap::new();
        let cdata = "<Delete><Object><Key><![CDATA[other/x]]></Key></Object></Delete>";
        assert_eq!(classify("POST", "", &q, &none, Some(cdata)).unwrap().keys, ["other/x"]);
        let nested = "<Delete><Object><Key>wh/t/<b/>x</Key></Object></Delete>";
        assert!(classify("POST", "", &q, &none, Some(nested)).is_err());
        let doctype = "<!DOCTYPE d [<!ENTITY x \"other\">]><Delete><Object><Key>&x;</Key></Object></Delete>";
        assert!(classify("POST", "", &q, &none, Some(doctype)).is_err());
    }
}
