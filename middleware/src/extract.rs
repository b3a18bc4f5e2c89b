//! What the middleware reads from an `http` request, through the policy engine's rules:
//! headers for the engine, the request id, and the engine's identity helpers.

use http::HeaderMap;

pub use redis_rl_policy::{client_network, tenant_id};

/// The request id header, taken from the request or generated, and returned.
pub const REQUEST_ID: &str = "x-request-id";
/// [`REQUEST_ID`] as a header name: a `&str` is parsed into a name on each lookup or insert.
pub(crate) const REQUEST_ID_NAME: http::HeaderName = http::HeaderName::from_static(REQUEST_ID);
/// The default API key header.
pub const API_KEY: &str = "x-api-key";

/// An `http::HeaderMap` as the engine reads headers.
pub(crate) struct HttpHeaders<'a>(pub(crate) &'a HeaderMap);

impl redis_rl_policy::Headers for HttpHeaders<'_> {
    fn get_all(&self, name: &str) -> Vec<&[u8]> {
        self.0.get_all(name).iter().map(|v| v.as_bytes()).collect()
    }
}

/// The caller's request id if it is sane (1 to 128 of `A-Z a-z 0-9 - _ . :`), else a new
/// UUID: an id is echoed into logs and headers, so arbitrary bytes are not.
pub fn request_id(headers: &HeaderMap) -> String {
    redis_rl_policy::request_id(headers.get(REQUEST_ID_NAME).map(|v| v.as_bytes()))
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_kept_when_sane() {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_ID, "abc-123_x.y:z".parse().unwrap());
        assert_eq!(request_id(&h), "abc-123_x.y:z");
        h.insert(REQUEST_ID, "has space".parse().unwrap());
        assert_eq!(request_id(&h).len(), 36);
        assert_eq!(request_id(&HeaderMap::new()).len(), 36);
    }
}
