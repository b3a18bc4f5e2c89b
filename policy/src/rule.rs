//! `[[rules]]`: limits for the requests that match a path template, method, host, header
//! and tier, counted together per key.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer};

use crate::ban::Ban;
use crate::limit::{AlgorithmKind, FailureModeName, LimitSpec};
use crate::path::Template;
use crate::rate::{Rate, RateOverride, Window};

/// What a rule counts together: the parts of its key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyPart {
    /// The API key's tenant id (absent without a key).
    ApiKey,
    /// The client address (or IPv6 network).
    Ip,
    /// The route template.
    Route,
    /// The method.
    Method,
    /// The host (lower case, without the port; absent without a Host).
    Host,
    /// The key's tier (absent without a key).
    Tier,
    /// Nothing: one count for every request the rule matches.
    Global,
    /// A request header's value (absent without the header); the name in lower case.
    Header(String),
}

impl KeyPart {
    /// Parses `api_key`, `ip`, `route`, `method`, `host`, `tier`, `global` or
    /// `header:<name>`.
    pub fn parse(text: &str) -> Result<Self, String> {
        Ok(match text {
            "api_key" => KeyPart::ApiKey,
            "ip" => KeyPart::Ip,
            "route" => KeyPart::Route,
            "method" => KeyPart::Method,
            "host" => KeyPart::Host,
            "tier" => KeyPart::Tier,
            "global" => KeyPart::Global,
            other => match other.strip_prefix("header:") {
                Some(name) if is_token(name) => KeyPart::Header(name.to_ascii_lowercase()),
                Some(name) => return Err(format!("key: {name:?} is not a valid header name")),
                None => {
                    return Err(format!(
                        "key: unknown part {other:?} (api_key, ip, route, method, host, tier, global, \"header:<name>\")"
                    ))
                }
            },
        })
    }
}

impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::ApiKey => f.write_str("api_key"),
            KeyPart::Ip => f.write_str("ip"),
            KeyPart::Route => f.write_str("route"),
            KeyPart::Method => f.write_str("method"),
            KeyPart::Host => f.write_str("host"),
            KeyPart::Tier => f.write_str("tier"),
            KeyPart::Global => f.write_str("global"),
            KeyPart::Header(name) => write!(f, "header:{name}"),
        }
    }
}

impl<'de> Deserialize<'de> for KeyPart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        KeyPart::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// RFC 9110 token: what a header name or a method is made of.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A valid policy name: it appears in keys, headers and metrics.
pub(crate) fn is_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    methods: Vec<String>,
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    tiers: Vec<String>,
    key: Vec<KeyPart>,
    limit: Option<u64>,
    window_ms: Option<u64>,
    limits: Option<Vec<Window>>,
    algorithm: Option<AlgorithmKind>,
    burst: Option<u64>,
    shadow: Option<bool>,
    failure_mode: Option<FailureModeName>,
    quota_tz: Option<i64>,
    quota_anchor: Option<u64>,
    ban: Option<Ban>,
}

/// One `[[rules]]` entry, checked on its own (its tiers are checked against the tiers of
/// the whole configuration when the engine is built).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The policy's name in `RateLimit-Policy`, problem bodies, metrics and keys.
    pub name: String,
    /// Route templates (empty: every path).
    pub paths: Vec<Template>,
    /// Methods, upper case (empty: any).
    pub methods: Vec<String>,
    /// Hosts, lower case, without port (empty: any).
    pub hosts: Vec<String>,
    /// Headers that must be present with exactly these values (names lower case).
    pub headers: BTreeMap<String, String>,
    /// Tiers (empty: any request, with or without a key).
    pub tiers: Vec<String>,
    /// What is counted together.
    pub key: Vec<KeyPart>,
    /// The windows and how they are enforced (default algorithm: sliding window).
    pub rate: Rate,
    /// The windows, validated.
    pub specs: Vec<LimitSpec>,
}

impl Rule {
    fn from_raw(raw: RawRule) -> Result<Self, String> {
        if !is_name(&raw.name) {
            return Err(format!("name {:?}: 1 to 64 of A-Z a-z 0-9 _ - .", raw.name));
        }
        let paths = raw
            .paths
            .iter()
            .map(|p| Template::parse(p).map_err(|e| format!("paths: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        for m in &raw.methods {
            if !is_token(m) {
                return Err(format!("methods: {m:?} is not a method"));
            }
        }
        for h in &raw.hosts {
            if h.is_empty() || h.contains(['/', ' ', '@']) {
                return Err(format!("hosts: {h:?} is not a host name"));
            }
            // Hosts are compared without their port: one with a port never matches.
            if h.contains(':') && !h.starts_with('[') {
                return Err(format!("hosts: {h:?}: give the host without a port"));
            }
        }
        let mut headers = BTreeMap::new();
        for (name, value) in &raw.headers {
            if !is_token(name) {
                return Err(format!("headers: {name:?} is not a valid header name"));
            }
            headers.insert(name.to_ascii_lowercase(), value.clone());
        }
        if raw.key.is_empty() {
            return Err("key: name at least one part (\"global\" for one count)".to_string());
        }
        let over = RateOverride {
            limit: raw.limit,
            window_ms: raw.window_ms,
            limits: raw.limits,
            algorithm: raw.algorithm,
            burst: raw.burst,
            shadow: raw.shadow,
            failure_mode: raw.failure_mode,
            quota_tz: raw.quota_tz,
            quota_anchor: raw.quota_anchor,
            ban: raw.ban,
        };
        let rate = over.standalone(AlgorithmKind::Sliding)?;
        let specs = rate.specs()?;
        Ok(Rule {
            name: raw.name,
            paths,
            methods: raw.methods.iter().map(|m| m.to_ascii_uppercase()).collect(),
            hosts: raw.hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            headers,
            tiers: raw.tiers,
            key: raw.key,
            rate,
            specs,
        })
    }

    /// Parses one rule from its TOML text (tests and tools).
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str::<Rule>(text).map_err(|e| e.message().to_string())
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Rule::from_raw(RawRule::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issues_rule_parses() {
        let r = Rule::from_toml(
            r#"
            name = "login"
            paths = ["/login", "/api/items/{id}", "/admin/**"]
            methods = ["post"]
            hosts = ["API.example.com"]
            headers = { "X-Client" = "mobile" }
            tiers = ["free", "pro"]
            key = ["ip", "header:X-Tenant"]
            limits = ["5/minute", "100/day"]
            algorithm = "sliding"
            "#,
        )
        .unwrap();
        assert_eq!(r.methods, ["POST"]);
        assert_eq!(r.hosts, ["api.example.com"]);
        assert_eq!(r.headers["x-client"], "mobile");
        assert_eq!(r.key, [KeyPart::Ip, KeyPart::Header("x-tenant".into())]);
        assert_eq!(r.specs.len(), 2);
        assert_eq!(r.specs[1].window_ms, 86_400_000);
    }

    #[test]
    fn bad_rules_name_the_field() {
        for (text, expected) in [
            ("name = \"a b\"\nkey = [\"ip\"]\nlimit = 1", "name \"a b\""),
            (
                "name = \"a\"\nkey = [\"ip\"]\nlimit = 1\npaths = [\"x\"]",
                "paths: path \"x\" must start with /",
            ),
            (
                "name = \"a\"\nkey = [\"ip\"]\nlimit = 1\nmethods = [\"P O\"]",
                "methods",
            ),
            (
                "name = \"a\"\nkey = [\"cookie\"]\nlimit = 1",
                "key: unknown part \"cookie\"",
            ),
            (
                "name = \"a\"\nkey = [\"header:a b\"]\nlimit = 1",
                "key: \"a b\" is not a valid header",
            ),
            (
                "name = \"a\"\nkey = []\nlimit = 1",
                "key: name at least one part",
            ),
            (
                "name = \"a\"\nkey = [\"ip\"]",
                "missing `limit` or `limits`",
            ),
            (
                "name = \"a\"\nkey = [\"ip\"]\nlimit = 0",
                "invalid policy: limit must be",
            ),
            (
                "name = \"a\"\nkey = [\"ip\"]\nlimits = [\"1/month\"]\nquota_anchor = 0",
                "invalid policy: quota_anchor must be an integer between 1 and 31",
            ),
            (
                "name = \"a\"\nkey = [\"ip\"]\nlimit = 1\npath = []",
                "unknown field `path`",
            ),
            ("key = [\"ip\"]\nlimit = 1", "missing field `name`"),
            ("name = \"a\"\nlimit = 1", "missing field `key`"),
        ] {
            let err = Rule::from_toml(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
