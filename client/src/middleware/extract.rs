//! What the middleware reads from a request: client IP, API key, tenant id, request id.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName};
use ipnet::{IpNet, Ipv6Net};
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
    // An IPv4 client on a dual-stack socket arrives as ::ffff:a.b.c.d: match it as IPv4.
    let peer = peer?.to_canonical();
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
        let ip = ip.to_canonical();
        client = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    Some(client)
}

/// The API key from `X-API-Key`, if present, non-empty and printable.
pub fn api_key(headers: &HeaderMap) -> Option<&str> {
    api_key_in(headers, &HeaderName::from_static(API_KEY))
}

/// The API key from the header `name` (e.g. `Authorization`), if present, non-empty and
/// printable; a leading `Bearer ` (the scheme in any case, RFC 9110 section 11.1) is
/// stripped, so `Authorization: Bearer k1` and `Authorization: bearer k1` both give `k1`.
///
/// ```
/// use http::{HeaderMap, HeaderName};
/// use redis_rl_client::middleware::api_key_in;
/// let mut h = HeaderMap::new();
/// h.insert("authorization", "Bearer s3cret".parse().unwrap());
/// assert_eq!(api_key_in(&h, &HeaderName::from_static("authorization")), Some("s3cret"));
/// ```
pub fn api_key_in<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    if value.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = match value.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case("bearer ") => value.get(7..)?.trim(),
        _ => value,
    };
    Some(token).filter(|k| !k.is_empty())
}

/// How a client address appears in limiter keys: an IPv4 address as is (an IPv4-mapped
/// IPv6 address as the IPv4 one), an IPv6 address as its network of `ipv6_prefix` bits
/// (`2001:db8:1:2::/64`), so a host cannot multiply its budget by rotating through the
/// addresses of its block.
///
/// ```
/// use redis_rl_client::middleware::client_network;
/// assert_eq!(client_network("2001:db8:1:2:aaaa::9".parse().unwrap(), 64), "2001:db8:1:2::/64");
/// assert_eq!(client_network("::ffff:192.0.2.1".parse().unwrap(), 64), "192.0.2.1");
/// ```
pub fn client_network(ip: IpAddr, ipv6_prefix: u8) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) if ipv6_prefix >= 128 => v6.to_string(),
        IpAddr::V6(v6) => Ipv6Net::new(v6, ipv6_prefix)
            .map_or_else(|_| v6.to_string(), |net| net.trunc().to_string()),
    }
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
            // IPv4-mapped IPv6 peers and hops are their IPv4 addresses.
            ("::ffff:10.0.0.1", &["::ffff:1.2.3.4"], "1.2.3.4"),
            ("::ffff:203.0.113.9", &["1.2.3.4"], "203.0.113.9"),
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

    #[test]
    fn api_key_from_any_header_with_bearer_stripped() {
        let auth = HeaderName::from_static("authorization");
        let mut h = HeaderMap::new();
        assert_eq!(api_key_in(&h, &auth), None);
        for (value, expected) in [
            ("Bearer k1", Some("k1")),
            ("bearer k1", Some("k1")),
            ("BEARER   k1 ", Some("k1")),
            ("Bearer ", None),
            ("Bearer", None),
            ("Basic dXNlcjpwdw==", Some("Basic dXNlcjpwdw==")),
            ("k2", Some("k2")),
        ] {
            h.insert(&auth, value.parse().unwrap());
            assert_eq!(api_key_in(&h, &auth), expected, "{value:?}");
        }
        let custom = HeaderName::from_static("x-token");
        h.insert(&custom, "t9".parse().unwrap());
        assert_eq!(api_key_in(&h, &custom), Some("t9"));
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let cases = [
            ("192.0.2.7", 64, "192.0.2.7"),
            ("::ffff:192.0.2.7", 64, "192.0.2.7"),
            ("2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"),
            ("2001:db8:1:2:ffff::1", 64, "2001:db8:1:2::/64"),
            ("2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"),
            ("2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"),
        ];
        for (addr, prefix, expected) in cases {
            assert_eq!(
                client_network(ip(addr), prefix),
                expected,
                "{addr}/{prefix}"
            );
        }
    }
}
