//! Who sent a request: the API key (one per request), its tenant id, the client address
//! and network, and the request id.

use std::borrow::Cow;
use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use sha2::{Digest, Sha256};

use crate::text::Ipv4Text;

/// Why a request's API key is refused with 400 before anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// More than one header carries a key: which one counts would be the client's choice.
    Several,
    /// The key has whitespace or control characters inside, or bytes that are not ASCII.
    Malformed,
}

impl KeyError {
    /// The `detail` of the problem body.
    pub const fn detail(self) -> &'static str {
        match self {
            KeyError::Several => "the request carries more than one API key header",
            KeyError::Malformed => {
                "the API key contains whitespace, control characters or non-ASCII bytes"
            }
        }
    }
}

/// Whether `key` can be an API key: 1 or more visible ASCII characters.
pub fn is_key_text(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(|b| b.is_ascii_graphic())
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// The API key from the values of the key header (`values`: every occurrence): none
/// without the header or with an empty value; a leading `Bearer` scheme (any case)
/// followed by any whitespace is stripped. Several headers, or a key with whitespace or
/// control characters inside, are refused.
///
/// ```
/// use redis_rl_policy::{api_key, KeyError};
/// assert_eq!(api_key(&[b"Bearer\tk1"]), Ok(Some("k1".to_string())));
/// assert_eq!(api_key(&[b"k1", b"k2"]), Err(KeyError::Several));
/// assert_eq!(api_key(&[b"k 1"]), Err(KeyError::Malformed));
/// ```
pub fn api_key(values: &[&[u8]]) -> Result<Option<String>, KeyError> {
    let raw = match values {
        [] => return Ok(None),
        [one] => *one,
        _ => return Err(KeyError::Several),
    };
    if !raw.iter().all(|b| b.is_ascii_graphic() || is_space(*b)) {
        return Err(KeyError::Malformed);
    }
    let mut value = trim(raw);
    if value.eq_ignore_ascii_case(b"bearer") {
        return Ok(None);
    }
    if let (Some(scheme), Some(next)) = (value.get(..6), value.get(6)) {
        if scheme.eq_ignore_ascii_case(b"bearer") && is_space(*next) {
            value = trim(value.get(7..).unwrap_or_default());
        }
    }
    if value.is_empty() {
        return Ok(None);
    }
    if value.iter().any(|b| is_space(*b)) {
        return Err(KeyError::Malformed);
    }
    Ok(Some(String::from_utf8_lossy(value).into_owned()))
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_space(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_space(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// The unkeyed id of an API key: the first 16 hex digits of its SHA-256 (what
/// [`Engine::tenant_id`](crate::Engine::tenant_id) answers when no secret is configured).
/// Used in logs and Redis keys; the raw key is never logged.
pub fn tenant_id(api_key: &str) -> String {
    crate::KeyDigest::unkeyed().of(api_key)
}

pub(crate) fn hex16(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// An IPv4-mapped IPv6 network of prefix 96 or more (`::ffff:192.0.2.0/120`) as the IPv4
/// network it names (`192.0.2.0/24`): client addresses are compared as IPv4, so the mapped
/// form would never match.
pub fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net {
        if let Some(v4) = v6.network().to_ipv4_mapped() {
            if v6.prefix_len() >= 96 {
                if let Ok(n) = Ipv4Net::new(v4, v6.prefix_len() - 96) {
                    return IpNet::V4(n.trunc());
                }
            }
        }
    }
    net.trunc()
}

/// The client's address: the peer, unless the peer is a trusted proxy, in which case the
/// nearest address in `X-Forwarded-For` that is not itself a trusted proxy. A malformed
/// entry stops the walk at the peer. IPv4-mapped addresses are their IPv4 ones.
pub fn client_ip(
    peer: Option<IpAddr>,
    forwarded_for: &[&[u8]],
    trusted: &[IpNet],
) -> Option<IpAddr> {
    let peer = peer?.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return Some(peer);
    }
    let hops: Vec<&str> = forwarded_for
        .iter()
        .map(|v| std::str::from_utf8(v).unwrap_or("\u{0}"))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Ok(ip) = hop.parse::<IpAddr>() else {
            return Some(peer);
        };
        client = ip.to_canonical();
        if !is_trusted(&client) {
            break;
        }
    }
    Some(client)
}

/// How a client address appears in limiter keys: IPv4 as is, IPv6 as its network of
/// `ipv6_prefix` bits (`2001:db8:1:2::/64`).
pub fn client_network(ip: IpAddr, ipv6_prefix: u8) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => Ipv4Text::of(v4).as_str().to_owned(),
        IpAddr::V6(v6) if ipv6_prefix >= 128 => v6.to_string(),
        IpAddr::V6(v6) => Ipv6Net::new(v6, ipv6_prefix)
            .map_or_else(|_| v6.to_string(), |net| net.trunc().to_string()),
    }
}

/// A request's client as its keys name it ([`client_network`], or `unknown` without an
/// address), an IPv4 address (the usual case) written without allocating.
pub(crate) enum ClientText {
    V4(Ipv4Text),
    Other(Cow<'static, str>),
}

impl ClientText {
    pub(crate) fn of(ip: Option<IpAddr>, ipv6_prefix: u8) -> Self {
        match ip.map(|ip| ip.to_canonical()) {
            Some(IpAddr::V4(v4)) => ClientText::V4(Ipv4Text::of(v4)),
            Some(ip) => ClientText::Other(Cow::Owned(client_network(ip, ipv6_prefix))),
            None => ClientText::Other(Cow::Borrowed("unknown")),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            ClientText::V4(v4) => v4.as_str(),
            ClientText::Other(text) => text,
        }
    }
}

/// The caller's request id if it is sane (1 to 128 of `A-Z a-z 0-9 - _ . :`); `None`: the
/// front end makes a new one (a UUID).
pub fn request_id(value: Option<&[u8]>) -> Option<String> {
    let id = value?;
    let sane = (1..=128).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b));
    sane.then(|| String::from_utf8_lossy(id).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    type Case<'a> = (&'a [&'a [u8]], Result<Option<&'a str>, KeyError>);

    #[test]
    fn one_api_key_per_request() {
        let cases: &[Case] = &[
            (&[], Ok(None)),
            (&[b"k1"], Ok(Some("k1"))),
            (&[b" k1 "], Ok(Some("k1"))),
            (&[b"Bearer k1"], Ok(Some("k1"))),
            (&[b"bearer k1"], Ok(Some("k1"))),
            (&[b"BEARER   k1 "], Ok(Some("k1"))),
            (&[b"Bearer\tk1"], Ok(Some("k1"))),
            (&[b"Bearer \t k1"], Ok(Some("k1"))),
            (&[b"Bearer"], Ok(None)),
            (&[b"Bearer "], Ok(None)),
            (&[b""], Ok(None)),
            (&[b"Bearerk1"], Ok(Some("Bearerk1"))),
            (&[b"good", b"bad"], Err(KeyError::Several)),
            (&[b"k1", b"k1"], Err(KeyError::Several)),
            (&[b"Basic dXNlcjpwdw=="], Err(KeyError::Malformed)),
            (&[b"k\t1"], Err(KeyError::Malformed)),
            (&[b"k\x001"], Err(KeyError::Malformed)),
            (&[b"k\x7f"], Err(KeyError::Malformed)),
            (&[b"k\xc3\xa9"], Err(KeyError::Malformed)),
            (&[b"Bearer a b"], Err(KeyError::Malformed)),
        ];
        for (values, expected) in cases {
            let got = api_key(values);
            assert_eq!(got, expected.map(|k| k.map(str::to_string)), "{values:?}");
        }
    }

    #[test]
    fn mapped_networks_become_ipv4() {
        let n = |s: &str| canonical_net(s.parse().unwrap()).to_string();
        assert_eq!(n("::ffff:127.0.0.2/128"), "127.0.0.2/32");
        assert_eq!(n("::ffff:192.0.2.0/120"), "192.0.2.0/24");
        assert_eq!(n("::ffff:0.0.0.0/96"), "0.0.0.0/0");
        assert_eq!(n("2001:db8::1/32"), "2001:db8::/32");
        assert_eq!(n("10.1.2.3/8"), "10.0.0.0/8");
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
        let cases: &[(&str, &[&[u8]], &str)] = &[
            ("203.0.113.9", &[b"1.2.3.4"], "203.0.113.9"),
            ("10.0.0.1", &[b"1.2.3.4"], "1.2.3.4"),
            ("10.0.0.1", &[b"6.6.6.6, 1.2.3.4, 10.0.0.7"], "1.2.3.4"),
            ("10.0.0.1", &[b"6.6.6.6", b"1.2.3.4"], "1.2.3.4"),
            ("::1", &[b"2001:db8::1"], "2001:db8::1"),
            ("10.0.0.1", &[], "10.0.0.1"),
            ("10.0.0.1", &[b"10.0.0.2"], "10.0.0.2"),
            ("::ffff:10.0.0.1", &[b"::ffff:1.2.3.4"], "1.2.3.4"),
            ("10.0.0.1", &[b"1.2.3.4, bogus"], "10.0.0.1"),
        ];
        for (peer, xff, expected) in cases {
            assert_eq!(
                client_ip(Some(ip(peer)), xff, &trusted),
                Some(ip(expected)),
                "{peer}"
            );
        }
        assert_eq!(client_ip(None, &[], &trusted), None);
    }

    #[test]
    fn networks_and_ids() {
        assert_eq!(
            client_network(ip("2001:db8:1:2:3::9"), 64),
            "2001:db8:1:2::/64"
        );
        assert_eq!(client_network(ip("::ffff:192.0.2.1"), 64), "192.0.2.1");
        let client = |ip: Option<IpAddr>| ClientText::of(ip, 64).as_str().to_owned();
        assert_eq!(client(Some(ip("::ffff:192.0.2.1"))), "192.0.2.1");
        assert_eq!(client(Some(ip("2001:db8:1:2:3::9"))), "2001:db8:1:2::/64");
        assert_eq!(client(None), "unknown");
        assert_eq!(
            client_network(ip("2001:db8:1:2:3:4:5:6"), 128),
            "2001:db8:1:2:3:4:5:6"
        );
        assert_eq!(request_id(Some(b"abc-1_x.y:z")), Some("abc-1_x.y:z".into()));
        assert_eq!(request_id(Some(b"has space")), None);
        assert_eq!(request_id(Some(&[b'a'; 129])), None);
        assert_eq!(request_id(None), None);
        assert_eq!(tenant_id("k1").len(), 16);
        assert_ne!(tenant_id("k1"), tenant_id("k2"));
    }
}
