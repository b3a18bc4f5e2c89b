//! What the middleware reads from a request: client IP, API key, tenant id, request id.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;
use sha2::{Digest, Sha256};

/// The request id header, taken from the request or generated, and returned.
pub const REQUEST_ID: &str = "x-request-id";
/// The API key header.
pub const API_KEY: &str = "x-api-key";

/// The client's address: the peer, unless the peer is a trusted proxy, in which case the
/// nearest address in `X-Forwarded-For` that is not itself a trusted proxy.
///
/// `X-Forwarded-For` from an untrusted peer is ignored: anyone can send it, so believing
/// it would let a client pick its own rate-limit key. A malformed entry stops the walk at
/// the last trusted hop's view (the peer), for the same reason.
pub fn client_ip(peer: Option<IpAddr>, headers: &HeaderMap, trusted: &[IpNet]) -> Option<IpAddr> {
    let peer = peer?;
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return Some(peer);
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Ok(ip) = hop.parse::<IpAddr>() else {
            return Some(peer);
        };
        client = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    Some(client)
}

/// The API key, if the header is present, non-empty and printable.
pub fn api_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(API_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// A stable id for an API key that does not reveal it: the first 16 hex digits of its
/// SHA-256. Used in logs and Redis keys; the raw key is never logged.
///
/// ```
/// let id = redis_rl_client::middleware::tenant_id("secret-key");
/// assert_eq!(id.len(), 16);
/// assert!(!id.contains("secret"));
/// ```
pub fn tenant_id(api_key: &str) -> String {
    let digest = Sha256::digest(api_key.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The caller's request id if it is sane (1 to 128 of `A-Z a-z 0-9 - _ . :`), else a new
/// UUID: an id is echoed into logs and headers, so arbitrary bytes are not.
pub fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| {
            (1..=128).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        })
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
        let cases: &[(&str, &[&str], &str)] = &[
            // Untrusted peer: its header is ignored.
            ("203.0.113.9", &["1.2.3.4"], "203.0.113.9"),
            // Trusted peer: the nearest untrusted hop.
            ("10.0.0.1", &["1.2.3.4"], "1.2.3.4"),
            ("10.0.0.1", &["6.6.6.6, 1.2.3.4, 10.0.0.7"], "1.2.3.4"),
            ("10.0.0.1", &["6.6.6.6", "1.2.3.4"], "1.2.3.4"),
            ("::1", &["2001:db8::1"], "2001:db8::1"),
            // Trusted peer without the header, or only trusted hops.
            ("10.0.0.1", &[], "10.0.0.1"),
            ("10.0.0.1", &["10.0.0.2"], "10.0.0.2"),
            // Garbage: fall back to the peer.
            ("10.0.0.1", &["1.2.3.4, bogus"], "10.0.0.1"),
        ];
        for (peer, xff, expected) in cases {
            let got = client_ip(Some(ip(peer)), &headers(xff), &trusted);
            assert_eq!(got, Some(ip(expected)), "{peer} {xff:?}");
        }
        assert_eq!(client_ip(None, &headers(&["1.2.3.4"]), &trusted), None);
        assert_eq!(
            client_ip(Some(ip("10.0.0.1")), &headers(&["1.2.3.4"]), &[]),
            Some(ip("10.0.0.1")),
            "no trusted proxies: the peer"
        );
    }

    #[test]
    fn request_ids_are_kept_when_sane() {
        let mut h = HeaderMap::new();
        h.insert(REQUEST_ID, "abc-123_x.y:z".parse().unwrap());
        assert_eq!(request_id(&h), "abc-123_x.y:z");
        h.insert(REQUEST_ID, "has space".parse().unwrap());
        assert_eq!(request_id(&h).len(), 36);
        h.insert(REQUEST_ID, "a".repeat(129).parse().unwrap());
        assert_eq!(request_id(&h).len(), 36);
        assert_eq!(request_id(&HeaderMap::new()).len(), 36);
    }

    #[test]
    fn api_key_and_tenant() {
        let mut h = HeaderMap::new();
        assert_eq!(api_key(&h), None);
        h.insert(API_KEY, " ".parse().unwrap());
        assert_eq!(api_key(&h), None);
        h.insert(API_KEY, "k1".parse().unwrap());
        assert_eq!(api_key(&h), Some("k1"));
        assert_eq!(tenant_id("k1"), tenant_id("k1"));
        assert_ne!(tenant_id("k1"), tenant_id("k2"));
    }
}
