//! Inline session policies for `AssumeRole`: the effective permissions of vended credentials are
//! the role's policies AND this policy, so the credentials reach exactly one table's files.

use icegate_catalog::storage::AccessLevel;
use icegate_catalog::{CatalogError, Result};
use serde_json::{Value, json};

/// AWS's limit on the plaintext of an inline session policy.
pub const MAX_POLICY_CHARS: usize = 2048;

const READ_ACTIONS: [&str; 2] = ["s3:GetObject", "s3:GetObjectVersion"];
const WRITE_ACTIONS: [&str; 4] =
    ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"];

/// The ARN partition of a region (`aws`, `aws-cn`, `aws-us-gov`).
pub fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

/// Escapes IAM policy wildcard characters so a key is matched literally.
pub fn escape(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        match c {
            '*' => out.push_str("${*}"),
            '?' => out.push_str("${?}"),
            '$' => out.push_str("${$}"),
            other => out.push(other),
        }
    }
    out
}

/// The session policy for `keys` (key prefixes of the table's directories, no trailing slash)
/// in `bucket`, at `access`, and for `read_keys` (the sources of an adopted table's files) to
/// read only, whatever `access`. Fails when it exceeds AWS's size limit.
pub fn session_policy(
    region: &str,
    bucket: &str,
    keys: &[String],
    read_keys: &[String],
    access: AccessLevel,
) -> Result<String> {
    let partition = partition(region);
    let bucket_arn = format!("arn:{partition}:s3:::{bucket}");
    let mut actions: Vec<&str> = READ_ACTIONS.to_vec();
    if access == AccessLevel::ReadWrite {
        actions.extend(WRITE_ACTIONS);
    }
    let objects: Vec<String> = keys.iter().map(|k| format!("{bucket_arn}/{}/*", escape(k))).collect();
    // With the trailing slash: a bare `wh/ns/t1` would also list `wh/ns/t10/...`.
    let prefixes: Vec<String> =
        keys.iter().chain(read_keys).flat_map(|k| [format!("{}/", escape(k)), format!("{}/*", escape(k))]).collect();
    let mut statements =
        vec![json!({ "Sid": "TableObjects", "Effect": "Allow", "Action": actions, "Resource": objects })];
    if !read_keys.is_empty() {
        let sources: Vec<String> = read_keys.iter().map(|k| format!("{bucket_arn}/{}/*", escape(k))).collect();
        statements
            .push(json!({ "Sid": "SourceObjects", "Effect": "Allow", "Action": READ_ACTIONS, "Resource": sources }));
    }
    let policy: Value = json!({
        "Version": "2012-10-17",
        "Statement": statements.into_iter().chain([
            json!({
                "Sid": "ListTablePrefixes",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": bucket_arn,
                "Condition": { "StringLike": { "s3:prefix": prefixes } }
            }),
            json!({ "Sid": "BucketLocation", "Effect": "Allow", "Action": "s3:GetBucketLocation", "Resource": bucket_arn }),
        ]).collect::<Vec<_>>()
    });
    let text = policy.to_string();
    if text.len() > MAX_POLICY_CHARS {
        return Err(CatalogError::bad_request(format!(
            "the session policy for this table's {} locations is {} characters, over AWS's limit of \
             {MAX_POLICY_CHARS}: shorten the table's locations or drop write.data.path / write.metadata.path",
            keys.len(),
            text.len()
        )));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(region: &str, keys: &[&str], access: AccessLevel) -> Value {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        serde_json::from_str(&session_policy(region, "lake", &keys, &[], access).unwrap()).unwrap()
    }

    #[test]
    fn read_policies_allow_only_gets_on_the_table_prefix() {
        let policy = parsed("us-east-1", &["wh/db/t"], AccessLevel::Read);
        let objects = &policy["Statement"][0];
        assert_eq!(objects["Action"], json!(["s3:GetObject", "s3:GetObjectVersion"]));
        assert_eq!(objects["Resource"], json!(["arn:aws:s3:::lake/wh/db/t/*"]));
        let list = &policy["Statement"][1];
        assert_eq!(list["Action"], "s3:ListBucket");
        assert_eq!(list["Resource"], "arn:aws:s3:::lake");
        assert_eq!(list["Condition"]["StringLike"]["s3:prefix"], json!(["wh/db/t/", "wh/db/t/*"]));
        assert!(!policy.to_string().contains("PutObject"));
    }

    #[test]
    fn write_policies_add_put_delete_and_multipart_for_every_location() {
        let policy = parsed("cn-north-1", &["wh/db/t", "data/t"], AccessLevel::ReadWrite);
        let objects = &policy["Statement"][0];
        for action in ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"] {
            assert!(objects["Action"].as_array().unwrap().contains(&json!(action)), "{action}");
        }
        assert_eq!(objects["Resource"], json!(["arn:aws-cn:s3:::lake/wh/db/t/*", "arn:aws-cn:s3:::lake/data/t/*"]));
    }

    #[test]
    fn sources_are_read_only_whatever_the_level() {
        let keys = vec!["wh/db/t".to_owned()];
        let sources = vec!["lake/events".to_owned()];
        let text = session_policy("us-east-1", "lake", &keys, &sources, AccessLevel::ReadWrite).unwrap();
        let policy: Value = serde_json::from_str(&text).unwrap();
        let source = &policy["Statement"][1];
        assert_eq!(source["Sid"], "SourceObjects");
        assert_eq!(source["Action"], json!(["s3:GetObject", "s3:GetObjectVersion"]));
        assert_eq!(source["Resource"], json!(["arn:aws:s3:::lake/lake/events/*"]));
        assert!(policy["Statement"][0]["Resource"].to_string().contains("wh/db/t/*"));
        assert!(!policy["Statement"][0]["Resource"].to_string().contains("lake/events"), "no write on the source");
        let list = &policy["Statement"][2]["Condition"]["StringLike"]["s3:prefix"];
        assert_eq!(*list, json!(["wh/db/t/", "wh/db/t/*", "lake/events/", "lake/events/*"]));
    }

    #[test]
    fn wildcards_in_names_are_escaped() {
        assert_eq!(escape("a*b?c$d"), "a${*}b${?}c${$}d");
        let policy = parsed("us-east-1", &["wh/db/t*"], AccessLevel::Read);
        assert_eq!(policy["Statement"][0]["Resource"], json!(["arn:aws:s3:::lake/wh/db/t${*}/*"]));
    }

    #[test]
    fn oversized_policies_fail_clearly() {
        let keys: Vec<String> = (0..20).map(|i| format!("wh/{}/t{i}", "x".repeat(100))).collect();
        let err = session_policy("us-east-1", "lake", &keys, &[], AccessLevel::Read).unwrap_err();
        assert!(err.to_string().contains("over AWS's limit"), "{err}");
    }
}
