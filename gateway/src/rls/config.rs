//! envoyproxy/ratelimit's configuration format, read unchanged: one YAML document per file
//! (`domain`, a tree of `descriptors` with `key`, optional `value`, optional `rate_limit`),
//! from one file or every `*.yaml`/`*.yml` of a directory, several domains.
//!
//! What that service refuses at load is refused here too, with the file and the entry named:
//! unknown fields, a non-string key, a list of anything but maps, duplicate YAML keys, a
//! duplicate descriptor (same key and value at one level), a bad unit, `unlimited` with a
//! unit, a rule that replaces itself or an empty `replaces` name, an empty domain or key, a
//! domain defined twice, `share_threshold` on a value without `*`. One addition:
//! `algorithm:` in a `rate_limit` (fixed_window by default, the counting of
//! envoyproxy/ratelimit; sliding_window, token_bucket or gcra).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

/// Keys accepted anywhere in a file (envoyproxy/ratelimit's list, plus `algorithm`).
const VALID_KEYS: [&str; 17] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "algorithm",
];

/// The time unit of a rule; the numbering is the protocol's (`RateLimitResponse.RateLimit.Unit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    Second = 1,
    Minute = 2,
    Hour = 3,
    Day = 4,
    Month = 5,
    Year = 6,
    Week = 7,
}

impl Unit {
    /// The unit named in a file (any case, as envoyproxy/ratelimit reads it).
    pub fn parse(name: &str) -> Option<Unit> {
        Some(match name.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// The unit of a request's `limit` override (same numbering; 0 and unknown: none).
    pub fn from_proto(n: i32) -> Option<Unit> {
        Some(match n {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// The window length: envoyproxy/ratelimit's divider (a month is 30 days, a year 365),
    /// so fixed windows start at the same instants as its counters do.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }
}

/// How a rule counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counting {
    /// envoyproxy/ratelimit's: a counter per window aligned to the unit (RL.FIXED).
    FixedWindow,
    /// Two weighted windows (RL.SLIDING): no double burst at a window boundary.
    SlidingWindow,
    /// A bucket of `requests_per_unit` refilled at that rate (RL.TOKENBUCKET).
    TokenBucket,
    /// The same rate as evenly spaced cells (RL.GCRA).
    Gcra,
}

impl Counting {
    fn parse(name: &str) -> Option<Counting> {
        Some(match name {
            "fixed_window" | "fixed" => Counting::FixedWindow,
            "sliding_window" | "sliding" => Counting::SlidingWindow,
            "token_bucket" => Counting::TokenBucket,
            "gcra" => Counting::Gcra,
            _ => return None,
        })
    }

    pub const fn name(self) -> &'static str {
        match self {
            Counting::FixedWindow => "fixed_window",
            Counting::SlidingWindow => "sliding_window",
            Counting::TokenBucket => "token_bucket",
            Counting::Gcra => "gcra",
        }
    }
}

/// A `rate_limit` block with the flags of its descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub requests_per_unit: u32,
    /// `None` only when `unlimited`.
    pub unit: Option<Unit>,
    pub unlimited: bool,
    pub counting: Counting,
    pub name: Option<String>,
    pub replaces: Vec<String>,
    pub shadow_mode: bool,
    pub detailed_metric: bool,
    /// The rule's place in the tree, `domain.key_value.key` (its metric key).
    pub path: String,
}

/// One descriptor of the tree.
#[derive(Debug, Default)]
pub struct Node {
    pub rule: Option<Rule>,
    pub value_to_metric: bool,
    pub share_threshold: bool,
    pub children: Level,
}

/// The descriptors of one level: by `key_value` (or `key` alone), and the wildcard values
/// in file order.
#[derive(Debug, Default)]
pub struct Level {
    pub nodes: HashMap<String, Node>,
    /// `(key_value pattern, the pattern split on '*')`.
    pub wildcards: Vec<(String, Vec<String>)>,
}

/// A loaded configuration: the domains and the files they came from.
#[derive(Debug, Default)]
pub struct RlsConfig {
    pub domains: HashMap<String, Level>,
    pub files: Vec<PathBuf>,
}

impl RlsConfig {
    /// Reads `path`: a YAML file, or every `.yaml`/`.yml` file of a directory (in name order;
    /// subdirectories and other files are skipped, and files whose name begins with a dot
    /// when `skip_dot_files`: envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES).
    pub fn load(path: &Path, skip_dot_files: bool) -> Result<RlsConfig, String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut files = Vec::new();
        if meta.is_dir() {
            let entries =
                std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
            for entry in entries {
                let p = entry
                    .map_err(|e| format!("{}: {e}", path.display()))?
                    .path();
                let yaml = p.extension().is_some_and(|e| e == "yaml" || e == "yml");
                let dot = p
                    .file_name()
                    .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
                if yaml && p.is_file() && !(skip_dot_files && dot) {
                    files.push(p);
                }
            }
            files.sort();
        } else {
            files.push(path.to_path_buf());
        }
        let mut sources = Vec::new();
        for f in &files {
            let text = crate::files::read_text(f)?;
            sources.push((f.display().to_string(), text));
        }
        let mut config = Self::from_sources(&sources)?;
        config.files = files;
        Ok(config)
    }

    /// Builds a configuration from `(file name, YAML text)` pairs.
    pub fn from_sources(sources: &[(String, String)]) -> Result<RlsConfig, String> {
        let mut config = RlsConfig::default();
        for (name, text) in sources {
            let root: Value = serde_yaml_ng::from_str(text)
                .map_err(|e| format!("{name}: error loading config file: {e}"))?;
            config.add_document(name, root)?;
        }
        Ok(config)
    }

    /// Builds a configuration from `(name, YAML document)` pairs: the documents an xDS
    /// server pushed, checked as a file's are.
    pub fn from_documents(documents: &[(String, Value)]) -> Result<RlsConfig, String> {
        let mut config = RlsConfig::default();
        for (name, root) in documents {
            config.add_document(name, root.clone())?;
        }
        Ok(config)
    }

    /// Adds the domain of one document (`name`: its file, in errors).
    fn add_document(&mut self, name: &str, root: Value) -> Result<(), String> {
        let fail = |msg: String| format!("{name}: {msg}");
        let root = match root {
            Value::Mapping(m) => m,
            // An empty file is a document without a domain.
            Value::Null => Mapping::new(),
            _ => return Err(fail("error loading config file: not a map".into())),
        };
        validate_keys(&root, "").map_err(fail)?;
        let domain = string_field(&root, "domain", "").map_err(fail)?;
        if domain.is_empty() {
            return Err(fail("config file cannot have empty domain".into()));
        }
        if self.domains.contains_key(&domain) {
            return Err(fail(format!("duplicate domain '{domain}' in config file")));
        }
        let mut level = Level::default();
        load_level(&mut level, &root, &format!("{domain}.")).map_err(fail)?;
        self.domains.insert(domain, level);
        Ok(())
    }
}

/// Every key of `map` (and below) must be a string among [`VALID_KEYS`]; lists hold maps.
fn validate_keys(map: &Mapping, at: &str) -> Result<(), String> {
    for (k, v) in map {
        let Value::String(k) = k else {
            return Err(format!(
                "config error, key is not of type string: {}",
                scalar_text(k)
            ));
        };
        let here = if at.is_empty() {
            k.clone()
        } else {
            format!("{at}.{k}")
        };
        if !VALID_KEYS.contains(&k.as_str()) {
            return Err(format!("config error, unknown key '{k}' at {here}"));
        }
        if k == "metadata" {
            continue; // free-form, returned to Envoy as is by envoyproxy/ratelimit
        }
        match v {
            Value::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    let Value::Mapping(m) = item else {
                        return Err(format!(
                            "config error, yaml file contains list of type other than map: {} at {here}[{i}]",
                            scalar_text(item)
                        ));
                    };
                    validate_keys(m, &format!("{here}[{i}]"))?;
                }
            }
            Value::Mapping(m) => validate_keys(m, &here)?,
            Value::Tagged(_) => return Err(format!("error checking config at {here}")),
            _ => {}
        }
    }
    Ok(())
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        _ => "a collection".into(),
    }
}

fn field<'a>(map: &'a Mapping, name: &str) -> Option<&'a Value> {
    map.get(name).filter(|v| !v.is_null())
}

/// A string field (a number or bool is read as its text, as Go's YAML decoder does).
fn string_field(map: &Mapping, name: &str, at: &str) -> Result<String, String> {
    match field(map, name) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(scalar_text(v)),
        Some(_) => Err(format!("{at}: '{name}' must be a string")),
    }
}

fn bool_field(map: &Mapping, name: &str, at: &str) -> Result<bool, String> {
    match field(map, name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("{at}: '{name}' must be true or false")),
    }
}

/// Loads the `descriptors` list of `map` into `level`; `parent` is the path so far
/// (`domain.` or `domain.key_value.`), which names entries in errors and metrics.
fn load_level(level: &mut Level, map: &Mapping, parent: &str) -> Result<(), String> {
    let items = match field(map, "descriptors") {
        None => return Ok(()),
        Some(Value::Sequence(items)) => items,
        Some(_) => return Err(format!("{parent}descriptors: must be a list")),
    };
    for (i, item) in items.iter().enumerate() {
        let Value::Mapping(d) = item else {
            return Err(format!("{parent}descriptors[{i}]: must be a map"));
        };
        let at = format!("descriptor {i} under '{}'", parent.trim_end_matches('.'));
        let key = string_field(d, "key", &at)?;
        if key.is_empty() {
            return Err(format!("{at}: descriptor has empty key"));
        }
        let value = string_field(d, "value", &at)?;
        let final_key = if value.is_empty() {
            key.clone()
        } else {
            format!("{key}_{value}")
        };
        let path = format!("{parent}{final_key}");
        if level.nodes.contains_key(&final_key) {
            return Err(format!("duplicate descriptor composite key '{path}'"));
        }
        let share_threshold = bool_field(d, "share_threshold", &path)?;
        if share_threshold && !final_key.contains('*') {
            return Err(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}' at '{path}'"
            ));
        }
        let shadow_mode = bool_field(d, "shadow_mode", &path)?;
        let detailed_metric = bool_field(d, "detailed_metric", &path)?;
        let value_to_metric = bool_field(d, "value_to_metric", &path)?;
        bool_field(d, "quota_mode", &path)?;
        let rule = match field(d, "rate_limit") {
            None => None,
            Some(Value::Mapping(r)) => Some(load_rule(r, &path, shadow_mode, detailed_metric)?),
            Some(_) => return Err(format!("'{path}': rate_limit must be a map")),
        };
        if final_key.contains('*') {
            let parts = final_key.split('*').map(str::to_string).collect();
            level.wildcards.push((final_key.clone(), parts));
        }
        let mut node = Node {
            rule,
            value_to_metric,
            share_threshold,
            children: Level::default(),
        };
        load_level(&mut node.children, d, &format!("{path}."))?;
        level.nodes.insert(final_key, node);
    }
    Ok(())
}

fn load_rule(
    r: &Mapping,
    path: &str,
    shadow_mode: bool,
    detailed_metric: bool,
) -> Result<Rule, String> {
    let unlimited = bool_field(r, "unlimited", path)?;
    let unit_text = string_field(r, "unit", path)?;
    let unit = Unit::parse(&unit_text);
    if unlimited && unit.is_some() {
        return Err(format!(
            "'{path}': should not specify rate limit unit when unlimited"
        ));
    }
    if !unlimited && unit.is_none() {
        return Err(format!("'{path}': invalid rate limit unit '{unit_text}'"));
    }
    let requests_per_unit = match field(r, "requests_per_unit") {
        None => 0,
        Some(Value::Number(n)) => {
            n.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    format!("'{path}': requests_per_unit must be an integer from 0 to 4294967295")
                })?
        }
        Some(_) => {
            return Err(format!(
                "'{path}': requests_per_unit must be an integer from 0 to 4294967295"
            ))
        }
    };
    let counting = match field(r, "algorithm") {
        None => Counting::FixedWindow,
        Some(Value::String(s)) => Counting::parse(s).ok_or_else(|| {
            format!(
                "'{path}': unknown algorithm '{s}', expected fixed_window, sliding_window, token_bucket or gcra"
            )
        })?,
        Some(_) => return Err(format!("'{path}': algorithm must be a string")),
    };
    let name = Some(string_field(r, "name", path)?).filter(|n| !n.is_empty());
    let mut replaces = Vec::new();
    match field(r, "replaces") {
        None => {}
        Some(Value::Sequence(items)) => {
            for item in items {
                let replaced = match item {
                    Value::Mapping(m) => string_field(m, "name", path)?,
                    _ => String::new(),
                };
                if replaced.is_empty() {
                    return Err(format!("'{path}': should not have an empty replaces entry"));
                }
                if name.as_deref() == Some(replaced.as_str()) {
                    return Err(format!(
                        "'{path}': replaces should not contain name of same descriptor"
                    ));
                }
                replaces.push(replaced);
            }
        }
        Some(_) => return Err(format!("'{path}': replaces must be a list")),
    }
    Ok(Rule {
        requests_per_unit,
        unit: if unlimited { None } else { unit },
        unlimited,
        counting,
        name,
        replaces,
        shadow_mode,
        detailed_metric,
        path: path.to_string(),
    })
}

/// Whether `value` matches a pattern split on `*` (each `*` any run of characters, possibly
/// empty; the pieces in order, the first at the start and the last at the end).
pub fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    let Some(mut rest) = value.get(first.len()..value.len() - last.len()) else {
        return false;
    };
    for part in parts.iter().take(parts.len() - 1).skip(1) {
        match rest.find(part.as_str()) {
            Some(at) => rest = rest.get(at + part.len()..).unwrap_or(""),
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<RlsConfig, String> {
        RlsConfig::from_sources(&[("f.yaml".to_string(), text.to_string())])
    }

    #[test]
    fn refusals_name_the_file_and_the_entry() {
        let cases: &[(&str, &str)] = &[
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
                "f.yaml: 'd.k_v': invalid rate limit unit 'foo'",
            ),
            ("'''\n", "f.yaml: error loading config file"),
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
                "f.yaml: duplicate descriptor composite key 'd.k_v'",
            ),
            ("descriptors:\n", "f.yaml: config file cannot have empty domain"),
            (
                "domain: d\ndescriptors:\n  - value: v\n",
                "f.yaml: descriptor 0 under 'd': descriptor has empty key",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: day\n",
                "f.yaml: config error, unknown key 'ratelimit' at descriptors[0].ratelimit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
                "f.yaml: config error, unknown key 'requestsperunit' at descriptors[0].rate_limit.requestsperunit",
            ),
            (
                "domain: d\ndescriptors:\n  - a\n  - b\n",
                "f.yaml: config error, yaml file contains list of type other than map: a at descriptors[0]",
            ),
            (
                "0.25: d\ndescriptors: []\n",
                "f.yaml: config error, key is not of type string: 0.25",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n",
                "f.yaml: 'd.k': should not have an empty replaces entry",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n",
                "f.yaml: 'd.k': replaces should not contain name of same descriptor",
            ),
            (
                "domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
                "f.yaml: 'd.foo': should not specify rate limit unit when unlimited",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
                "f.yaml: share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v' at 'd.k_v'",
            ),
            (
                "domain: d\ndomain: e\n",
                "f.yaml: error loading config file: duplicate entry with key \"domain\"",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: nosuch\n",
                "f.yaml: 'd.k': unknown algorithm 'nosuch'",
            ),
        ];
        for (text, expected) in cases {
            let err = load(text).expect_err(text);
            assert!(
                err.starts_with(expected),
                "{text}\n got: {err}\nwant: {expected}"
            );
        }
    }

    #[test]
    fn a_domain_defined_twice_is_refused() {
        let a = ("a.yaml".to_string(), "domain: d\n".to_string());
        let b = ("b.yaml".to_string(), "domain: d\n".to_string());
        let err = RlsConfig::from_sources(&[a, b]).unwrap_err();
        assert_eq!(err, "b.yaml: duplicate domain 'd' in config file");
    }

    #[test]
    fn units_rules_and_metadata_load() {
        let c = load(
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n    metadata:\n      any: {thing: [1, 2]}\n    descriptors:\n      - key: s\n        shadow_mode: true\n        rate_limit:\n          unit: WEEK\n          requests_per_unit: 7\n          name: n\n          algorithm: gcra\n  - key: u\n    rate_limit:\n      unlimited: true\n",
        )
        .unwrap();
        let d = &c.domains["d"];
        let rule = d.nodes["k_v"].children.nodes["s"].rule.as_ref().unwrap();
        assert_eq!(rule.unit, Some(Unit::Week));
        assert_eq!(rule.requests_per_unit, 7);
        assert_eq!(rule.counting, Counting::Gcra);
        assert!(rule.shadow_mode);
        assert_eq!(rule.path, "d.k_v.s");
        assert_eq!(rule.name.as_deref(), Some("n"));
        assert!(d.nodes["u"].rule.as_ref().unwrap().unlimited);
        assert_eq!(Unit::Month.seconds(), 2_592_000);
    }

    #[test]
    fn wildcards_match_in_order() {
        let p = |s: &str| s.split('*').map(str::to_string).collect::<Vec<_>>();
        assert!(wildcard_match(&p("k_foo*"), "k_foo"));
        assert!(wildcard_match(&p("k_foo*"), "k_foobar"));
        assert!(!wildcard_match(&p("k_foo*"), "k_fo"));
        assert!(wildcard_match(&p("k_/api/*/action"), "k_/api/12/action"));
        assert!(!wildcard_match(&p("k_/api/*/action"), "k_/api/12/other"));
        assert!(wildcard_match(&p("k_foo*bar*baz"), "k_foo1bar2baz"));
        assert!(wildcard_match(&p("k_foo*bar*baz"), "k_foobarbaz"));
        assert!(!wildcard_match(&p("k_foo*bar*baz"), "k_foobaz"));
        assert!(
            !wildcard_match(&p("k_a*a"), "k_a"),
            "pieces may not overlap"
        );
        assert!(wildcard_match(&p("k_exact"), "k_exact"));
    }
}
