//! Opaque page tokens for keyset pagination.
//!
//! A token is the URL-safe base64 of the last key of the previous page, behind a version tag,
//! so listings stay stable while rows are added or removed between pages (no offsets).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::CatalogError;
use crate::store::PageRequest;

const TOKEN_VERSION: &str = "k1:";
/// The largest page a client may ask for; larger `pageSize` values are clamped to it.
pub const MAX_PAGE_SIZE: u32 = 1000;

pub fn encode_token(last_key: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{TOKEN_VERSION}{last_key}"))
}

fn decode_token(token: &str) -> Result<String, CatalogError> {
    let invalid = || CatalogError::bad_request("invalid pageToken");
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    text.strip_prefix(TOKEN_VERSION).map(str::to_owned).ok_or_else(invalid)
}

/// Turns the `pageToken` / `pageSize` query parameters into a page request.
///
/// As the spec says, a client that sends no `pageToken` gets every result in one response; an
/// empty `pageToken` starts a paginated listing.
pub fn page_request(page_token: Option<&str>, page_size: Option<i64>) -> Result<PageRequest, CatalogError> {
    if let Some(size) = page_size
        && size < 1
    {
        return Err(CatalogError::bad_request(format!("pageSize must be a positive integer, got {size}")));
    }
    // Without a token or a size the client does not paginate (older clients): everything. A
    // size alone is an upper bound the client expects to be honoured: the first page.
    if page_token.is_none() && page_size.is_none() {
        return Ok(PageRequest { after: None, limit: None });
    }
    let after = match page_token {
        Some(token) if !token.is_empty() => Some(decode_token(token)?),
        _ => None,
    };
    let limit = page_size.map_or(MAX_PAGE_SIZE, |s| s.min(i64::from(MAX_PAGE_SIZE)) as u32);
    Ok(PageRequest { after, limit: Some(limit) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_round_trips_any_key() {
        let key = "a\u{1f}b/ü";
        let req = page_request(Some(&encode_token(key)), Some(10)).unwrap();
        assert_eq!(req.after.as_deref(), Some(key));
        assert_eq!(req.limit, Some(10));
    }

    #[test]
    fn neither_token_nor_size_means_everything_and_a_size_alone_bounds_the_first_page() {
        assert_eq!(page_request(None, None).unwrap(), PageRequest { after: None, limit: None });
        assert_eq!(page_request(None, Some(5)).unwrap(), PageRequest { after: None, limit: Some(5) });
    }

    #[test]
    fn empty_token_starts_pagination_with_a_clamped_size() {
        let req = page_request(Some(""), Some(1_000_000)).unwrap();
        assert_eq!(req, PageRequest { after: None, limit: Some(MAX_PAGE_SIZE) });
    }

    #[test]
    fn garbage_tokens_and_non_positive_sizes_are_bad_requests() {
        assert!(page_request(Some("!!!"), None).is_err());
        assert!(page_request(Some(&URL_SAFE_NO_PAD.encode("x")), None).is_err());
        assert!(page_request(Some(""), Some(0)).is_err());
        assert!(page_request(None, Some(-3)).is_err());
    }
}
