//! Names and locations, parsed once at the edge so inner code never sees raw strings.
//!
//! Namespace and (later) table names become parts of object-storage paths, so a name that could
//! escape or break a path (`/`, `.`, `..`, control characters, over-long) is refused here, before
//! anything is written.

use std::fmt;

use crate::error::CatalogError;

/// The separator of multi-level namespaces in URLs and query parameters (`%1F`).
pub const NAMESPACE_SEPARATOR: char = '\u{1f}';
/// The longest name of one namespace level, table or view, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// The deepest namespace nesting accepted.
pub const MAX_NAMESPACE_DEPTH: usize = 16;

/// Checks one name (a namespace level, a table or a view) for use in a storage path.
pub fn validate_name(what: &str, name: &str) -> Result<(), CatalogError> {
    if name.is_empty() {
        return Err(CatalogError::bad_request(format!("{what} name must not be empty")));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(CatalogError::bad_request(format!(
            "{what} name is {} bytes long; the limit is {MAX_NAME_BYTES}",
            name.len()
        )));
    }
    if name == "." || name == ".." {
        return Err(CatalogError::bad_request(format!("{what} name must not be '{name}'")));
    }
    if let Some(c) = name.chars().find(|c| c.is_control() || *c == '/' || *c == '\\') {
        return Err(CatalogError::bad_request(format!("{what} name must not contain {}", describe_char(c))));
    }
    Ok(())
}

fn describe_char(c: char) -> String {
    if c.is_control() { format!("control character U+{:04X}", c as u32) } else { format!("'{c}'") }
}

/// A namespace: one or more validated levels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespaceIdent(Vec<String>);

impl NamespaceIdent {
    /// Builds a namespace from its levels, validating each.
    pub fn from_levels<I, S>(levels: I) -> Result<Self, CatalogError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let levels: Vec<String> = levels.into_iter().map(Into::into).collect();
        if levels.is_empty() {
            return Err(CatalogError::bad_request("namespace must have at least one level"));
        }
        if levels.len() > MAX_NAMESPACE_DEPTH {
            return Err(CatalogError::bad_request(format!(
                "namespace has {} levels; the limit is {MAX_NAMESPACE_DEPTH}",
                levels.len()
            )));
        }
        for level in &levels {
            validate_name("namespace", level)?;
        }
        Ok(Self(levels))
    }

    /// Parses the URL form: levels joined by the unit separator (already percent-decoded).
    pub fn parse_encoded(encoded: &str) -> Result<Self, CatalogError> {
        Self::from_levels(encoded.split(NAMESPACE_SEPARATOR))
    }

    pub fn levels(&self) -> &[String] {
        &self.0
    }

    /// The URL and storage-key form: levels joined by the unit separator.
    pub fn encoded(&self) -> String {
        self.0.join(&NAMESPACE_SEPARATOR.to_string())
    }

    /// The namespace one level up, `None` for a top-level namespace.
    pub fn parent(&self) -> Option<NamespaceIdent> {
        (self.0.len() > 1).then(|| Self(self.0[..self.0.len() - 1].to_vec()))
    }
}

impl fmt::Display for NamespaceIdent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// A warehouse name: 1-128 characters of `[A-Za-z0-9_.-]`, starting with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WarehouseName(String);

impl WarehouseName {
    pub fn parse(name: &str) -> Result<Self, CatalogError> {
        let valid_start = name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
        let valid_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid_start || !valid_chars || name.len() > 128 {
            return Err(CatalogError::bad_request(format!(
                "invalid warehouse name {name:?}: use 1-128 characters of A-Z a-z 0-9 _ . -, \
                 starting with a letter or digit"
            )));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WarehouseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a warehouse keeps its files: an absolute, normalised `file://` URL without a trailing
/// slash: `file:///abs/path` or `s3://bucket/key/prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StorageRoot(String);

impl StorageRoot {
    pub fn parse(url: &str) -> Result<Self, CatalogError> {
        let bad = |why: &str| CatalogError::bad_request(format!("invalid storage root {url:?}: {why}"));
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad("expected a URL such as file:///var/lib/icegate/warehouse or s3://bucket/prefix"));
        };
        if url.chars().any(char::is_control) {
            return Err(bad("control characters are not allowed"));
        }
        match scheme {
            "file" => {
                if !rest.starts_with('/') {
                    return Err(bad("a file:// root must be an absolute path (file:///...)"));
                }
                let path = rest.trim_end_matches('/');
                if path.is_empty() {
                    return Err(bad("the file system root itself cannot be a warehouse"));
                }
                if path[1..].split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..") {
                    return Err(bad("empty, '.' and '..' path segments are not allowed"));
                }
                Ok(Self(format!("file://{path}")))
            }
            "s3" => {
                let rest = rest.trim_end_matches('/');
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let bucket_ok = (3..=63).contains(&bucket.len())
                    && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
                    && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && bucket.ends_with(|c: char| c.is_ascii_alphanumeric())
                    && !bucket.contains("..");
                if !bucket_ok {
                    return Err(bad("the bucket must be a valid S3 bucket name (3-63 of a-z 0-9 . -)"));
                }
                if !prefix.is_empty() && prefix.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..") {
                    return Err(bad("empty, '.' and '..' key prefix segments are not allowed"));
                }
                if prefix.len() > 512 {
                    return Err(bad("the key prefix is longer than 512 bytes"));
                }
                Ok(Self(format!("s3://{rest}")))
            }
            "s3a" | "gs" | "abfss" => {
                Err(bad(&format!("the {scheme}:// scheme is not supported; use file:// or s3://")))
            }
            _ => Err(bad("unknown scheme; use file:// or s3://")),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `file` or `s3`.
    pub fn scheme(&self) -> &str {
        self.0.split_once("://").map_or("", |(scheme, _)| scheme)
    }

    /// The local directory of a `file://` root.
    pub fn local_path(&self) -> Option<&str> {
        self.0.strip_prefix("file://")
    }

    /// The bucket of an `s3://` root.
    pub fn bucket(&self) -> Option<&str> {
        self.0.strip_prefix("s3://").map(|rest| rest.split_once('/').map_or(rest, |(bucket, _)| bucket))
    }

    /// The key prefix of an `s3://` root (empty for a whole bucket).
    pub fn key_prefix(&self) -> Option<&str> {
        self.0.strip_prefix("s3://").map(|rest| rest.split_once('/').map_or("", |(_, prefix)| prefix))
    }
}

impl fmt::Display for StorageRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_level_namespace_round_trips_through_its_encoded_form() {
        let ns = NamespaceIdent::parse_encoded("a\u{1f}b\u{1f}c").unwrap();
        assert_eq!(ns.levels(), ["a", "b", "c"]);
        assert_eq!(ns.encoded(), "a\u{1f}b\u{1f}c");
        assert_eq!(ns.to_string(), "a.b.c");
        assert_eq!(ns.parent().unwrap().levels(), ["a", "b"]);
        assert!(NamespaceIdent::parse_encoded("a").unwrap().parent().is_none());
    }

    #[test]
    fn names_that_would_break_a_storage_path_are_rejected() {
        for bad in ["", ".", "..", "a/b", "a\\b", "a\u{0}b", "tab\there", "del\u{7f}"] {
            assert!(validate_name("table", bad).is_err(), "{bad:?} was accepted");
        }
        assert!(validate_name("table", &"x".repeat(MAX_NAME_BYTES + 1)).is_err());
        for good in ["a", "a.b", "sales_2024", "ünïcode", "with space", "..a"] {
            assert!(validate_name("table", good).is_ok(), "{good:?} was rejected");
        }
    }

    #[test]
    fn namespace_with_an_empty_level_is_rejected() {
        assert!(NamespaceIdent::parse_encoded("a\u{1f}").is_err());
        assert!(NamespaceIdent::parse_encoded("").is_err());
        assert!(NamespaceIdent::from_levels(Vec::<String>::new()).is_err());
        let deep: Vec<String> = (0..=MAX_NAMESPACE_DEPTH).map(|i| i.to_string()).collect();
        assert!(NamespaceIdent::from_levels(deep).is_err());
    }

    #[test]
    fn warehouse_names_are_restricted_to_url_safe_characters() {
        assert!(WarehouseName::parse("prod-eu_1.a").is_ok());
        for bad in ["", "-x", "a b", "a/b", "ä", &"x".repeat(129)] {
            assert!(WarehouseName::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn storage_roots_are_normalised_absolute_file_urls() {
        let root = StorageRoot::parse("file:///tmp/wh/").unwrap();
        assert_eq!(root.as_str(), "file:///tmp/wh");
        assert_eq!(root.local_path(), Some("/tmp/wh"));
        for bad in [
            "/tmp/wh",
            "file://tmp/wh",
            "file:///",
            "file:///tmp/../etc",
            "file:///tmp//x",
            "http://x/y",
            "s3://B/prefix",
            "s3://ab/prefix",
            "s3://bucket/a//b",
            "s3://bucket/a/../b",
            "s3a://bucket/prefix",
        ] {
            assert!(StorageRoot::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let root = StorageRoot::parse("s3://my-bucket/wh/prod/").unwrap();
        assert_eq!(root.as_str(), "s3://my-bucket/wh/prod");
        assert_eq!((root.scheme(), root.bucket(), root.key_prefix()), ("s3", Some("my-bucket"), Some("wh/prod")));
        assert_eq!(StorageRoot::parse("s3://my-bucket").unwrap().key_prefix(), Some(""));
    }
}
