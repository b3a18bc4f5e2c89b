//! Allow and deny lists: checked before any limit, deny first.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::identity::canonical_net;
use crate::schema::AccessConfig;

/// What the access lists say about a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Refused with 403: the client IP (`"ip"`) or the API key (`"api_key"`) is denied.
    Denied(&'static str),
    /// Never limited: the client IP or the API key is allowed, and neither is denied.
    Allowed,
    /// Neither list names the request: it is limited as usual.
    Limited,
}

/// The access lists of a configuration, ready for lookups (networks in canonical form).
#[derive(Clone, Debug, Default)]
pub struct AccessList {
    allow_ips: Vec<IpNet>,
    deny_ips: Vec<IpNet>,
    allow_keys: HashSet<String>,
    deny_keys: HashSet<String>,
}

impl AccessList {
    /// The lists of `c`, IPv4-mapped networks as IPv4 ones.
    pub fn new(c: &AccessConfig) -> Self {
        Self {
            allow_ips: c.allow_ips.iter().copied().map(canonical_net).collect(),
            deny_ips: c.deny_ips.iter().copied().map(canonical_net).collect(),
            allow_keys: c.allow_api_keys.iter().cloned().collect(),
            deny_keys: c.deny_api_keys.iter().cloned().collect(),
        }
    }

    /// True when no list has an entry.
    pub fn is_empty(&self) -> bool {
        self.allow_ips.is_empty()
            && self.deny_ips.is_empty()
            && self.allow_keys.is_empty()
            && self.deny_keys.is_empty()
    }

    /// Deny wins over allow, whichever of IP and key each list names.
    pub fn check(&self, ip: Option<IpAddr>, api_key: Option<&str>) -> Access {
        let ip = ip.map(|ip| ip.to_canonical());
        let in_nets = |nets: &[IpNet]| ip.is_some_and(|ip| nets.iter().any(|n| n.contains(&ip)));
        let in_keys = |keys: &HashSet<String>| api_key.is_some_and(|k| keys.contains(k));
        if in_nets(&self.deny_ips) {
            Access::Denied("ip")
        } else if in_keys(&self.deny_keys) {
            Access::Denied("api_key")
        } else if in_nets(&self.allow_ips) || in_keys(&self.allow_keys) {
            Access::Allowed
        } else {
            Access::Limited
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_wins_over_allow_and_mapped_networks_match() {
        let list = AccessList::new(&AccessConfig {
            allow_ips: vec![
                "10.0.0.0/8".parse().unwrap(),
                "2001:db8::/32".parse().unwrap(),
            ],
            deny_ips: vec![
                "10.9.0.0/16".parse().unwrap(),
                "::ffff:127.0.0.2/128".parse().unwrap(),
            ],
            allow_api_keys: vec!["good".into(), "both".into()],
            deny_api_keys: vec!["bad".into(), "both".into()],
        });
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let cases: &[(Option<IpAddr>, Option<&str>, Access)] = &[
            (ip("10.1.2.3"), None, Access::Allowed),
            (ip("2001:db8::1"), None, Access::Allowed),
            (ip("10.9.1.1"), None, Access::Denied("ip")),
            (ip("10.9.1.1"), Some("good"), Access::Denied("ip")),
            (ip("127.0.0.2"), None, Access::Denied("ip")),
            (ip("::ffff:127.0.0.2"), None, Access::Denied("ip")),
            (ip("127.0.0.3"), None, Access::Limited),
            (ip("192.0.2.1"), Some("good"), Access::Allowed),
            (ip("10.1.2.3"), Some("bad"), Access::Denied("api_key")),
            (ip("192.0.2.1"), Some("both"), Access::Denied("api_key")),
            (ip("192.0.2.1"), Some("other"), Access::Limited),
            (None, None, Access::Limited),
        ];
        for &(ip, key, expected) in cases {
            assert_eq!(list.check(ip, key), expected, "{ip:?} {key:?}");
        }
        assert!(AccessList::default().is_empty());
    }
}
