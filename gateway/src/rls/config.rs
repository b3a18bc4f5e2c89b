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

use super::yaml_position::{locate, Step};

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

    /// The unit's name in a file.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
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

/// How files are read into one configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Several files may define one domain: their descriptors are added to the domain's
    /// top level, in file order (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`); the same
    /// descriptor in two of them is still refused. Without it a second file of a domain is
    /// refused.
    pub merge_domains: bool,
    /// A directory's files whose name begins with a dot are skipped (envoyproxy/ratelimit's
    /// `RUNTIME_IGNOREDOTFILES`).
    pub skip_dot_files: bool,
}

/// A loaded configuration: the domains and the files they came from.
#[derive(Debug, Default)]
pub struct RlsConfig {
    pub domains: HashMap<String, Level>,
    pub files: Vec<PathBuf>,
}

impl RlsConfig {
    /// Reads `path`: a YAML file, or every `.yaml`/`.yml` file of a directory (in name order;
    /// subdirectories and other files are skipped).
    pub fn load(path: &Path, options: LoadOptions) -> Result<RlsConfig, String> {
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
                if yaml && p.is_file() && !(options.skip_dot_files && dot) {
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
        let mut config = Self::from_sources_with(&sources, options)?;
        config.files = files;
        Ok(config)
    }

    /// Builds a configuration from `(file name, YAML text)` pairs.
    #[cfg(test)]
    pub fn from_sources(sources: &[(String, String)]) -> Result<RlsConfig, String> {
        Self::from_sources_with(sources, LoadOptions::default())
    }

    /// [`from_sources`](Self::from_sources) with `options`. An error names the file, and
    /// the line and column of the entry refused when it has one: `name:line:column: ...`.
    pub fn from_sources_with(
        sources: &[(String, String)],
        options: LoadOptions,
    ) -> Result<RlsConfig, String> {
        let mut config = RlsConfig::default();
        for (name, text) in sources {
            config
                .add_source(text, options)
                .map_err(|r| r.in_file(name, text))?;
        }
        Ok(config)
    }

    /// Builds a configuration from `(name, YAML document)` pairs: the documents an xDS
    /// server pushed, checked as a file's are (errors name the document, without a line).
    pub fn from_documents(
        documents: &[(String, Value)],
        options: LoadOptions,
    ) -> Result<RlsConfig, String> {
        let mut config = RlsConfig::default();
        for (name, root) in documents {
            config
                .add_document(root.clone(), options)
                .map_err(|r| r.in_file(name, ""))?;
        }
        Ok(config)
    }

    fn add_source(&mut self, text: &str, options: LoadOptions) -> Result<(), Refusal> {
        let root: Value = serde_yaml_ng::from_str(text).map_err(Refusal::syntax)?;
        self.add_document(root, options)
    }

    fn add_document(&mut self, root: Value, options: LoadOptions) -> Result<(), Refusal> {
        let root = match root {
            Value::Mapping(m) => m,
            // An empty file is a document without a domain.
            Value::Null => Mapping::new(),
            _ => {
                return Err(Refusal::at(
                    &[],
                    "error loading config file: not a map".into(),
                ))
            }
        };
        validate_keys(&root, &[])?;
        let domain = string_field(&root, "domain", "", &[])?;
        if domain.is_empty() {
            return Err(Refusal::at(
                &[],
                "config file cannot have empty domain".into(),
            ));
        }
        let parent = format!("{domain}.");
        match self.domains.get_mut(&domain) {
            Some(level) if options.merge_domains => load_level(level, &root, &parent, &[]),
            Some(_) => Err(Refusal::at(
                &[Step::Value("domain".into())],
                format!("duplicate domain '{domain}' in config file"),
            )),
            None => {
                let mut level = Level::default();
                load_level(&mut level, &root, &parent, &[])?;
                self.domains.insert(domain, level);
                Ok(())
            }
        }
    }
}

impl RlsConfig {
    /// The loaded rules, for `--check-config`: per domain (in name order), each rule's place
    /// in the tree (its metric key) and what it allows, in tree order.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let mut domains: Vec<_> = self.domains.iter().collect();
        domains.sort_by(|a, b| a.0.cmp(b.0));
        for (name, level) in domains {
            out.push_str(&format!("domain {name}\n"));
            explain_level(level, &mut out);
        }
        out
    }
}

fn explain_level(level: &Level, out: &mut String) {
    let mut nodes: Vec<_> = level.nodes.iter().collect();
    nodes.sort_by(|a, b| a.0.cmp(b.0));
    for (_, node) in nodes {
        if let Some(r) = &node.rule {
            let mut line = match r.unit {
                Some(unit) if !r.unlimited => format!(
                    "  {}: {} per {} ({})",
                    r.path,
                    r.requests_per_unit,
                    unit.name(),
                    r.counting.name()
                ),
                _ => format!("  {}: unlimited", r.path),
            };
            if let Some(n) = &r.name {
                line.push_str(&format!(", name {n}"));
            }
            if !r.replaces.is_empty() {
                line.push_str(&format!(", replaces {}", r.replaces.join(", ")));
            }
            if r.shadow_mode {
                line.push_str(", shadow mode (counted, never refused)");
            }
            out.push_str(&line);
            out.push('\n');
        }
        explain_level(&node.children, out);
    }
}

/// Why a file is refused, and where in it (the steps from the document to the entry).
#[derive(Debug)]
struct Refusal {
    message: String,
    at: Option<Vec<Step>>,
    /// A YAML syntax error: its own position.
    position: Option<(usize, usize)>,
}

impl Refusal {
    fn at(at: &[Step], message: String) -> Refusal {
        Refusal {
            message,
            at: Some(at.to_vec()),
            position: None,
        }
    }

    fn syntax(e: serde_yaml_ng::Error) -> Refusal {
        let position = e.location().map(|l| (l.line(), l.column()));
        let mut message = e.to_string();
        // The position goes in front, as for every other refusal.
        if let Some((line, column)) = position {
            message = message.replacen(&format!(" at line {line} column {column}"), "", 1);
        }
        Refusal {
            message: format!("error loading config file: {message}"),
            at: None,
            position,
        }
    }

    /// `name:line:column: message`, or `name: message` when the entry has no position.
    fn in_file(self, name: &str, text: &str) -> String {
        let position = self
            .position
            .or_else(|| self.at.as_deref().and_then(|at| locate(text, at)));
        match position {
            Some((line, column)) => format!("{name}:{line}:{column}: {}", self.message),
            None => format!("{name}: {}", self.message),
        }
    }
}

/// `at` and one step more.
fn step(at: &[Step], next: Step) -> Vec<Step> {
    let mut v = at.to_vec();
    v.push(next);
    v
}

/// Every key of `map` (and below) must be a string among [`VALID_KEYS`]; lists hold maps.
/// `here` names the map in errors (`descriptors[0].rate_limit`); `at` is where it is.
fn validate_keys(map: &Mapping, at: &[Step]) -> Result<(), Refusal> {
    let here = dotted(at);
    for (k, v) in map {
        let Value::String(k) = k else {
            let text = scalar_text(k);
            return Err(Refusal::at(
                &step(at, Step::Key(text.clone())),
                format!("config error, key is not of type string: {text}"),
            ));
        };
        let named = if here.is_empty() {
            k.clone()
        } else {
            format!("{here}.{k}")
        };
        if !VALID_KEYS.contains(&k.as_str()) {
            return Err(Refusal::at(
                &step(at, Step::Key(k.clone())),
                format!("config error, unknown key '{k}' at {named}"),
            ));
        }
        if k == "metadata" {
            continue; // free-form, returned to Envoy as is by envoyproxy/ratelimit
        }
        let below = step(at, Step::Value(k.clone()));
        match v {
            Value::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    let item_at = step(&below, Step::Item(i));
                    let Value::Mapping(m) = item else {
                        return Err(Refusal::at(
                            &item_at,
                            format!(
                                "config error, yaml file contains list of type other than map: {} at {named}[{i}]",
                                scalar_text(item)
                            ),
                        ));
                    };
                    validate_keys(m, &item_at)?;
                }
            }
            Value::Mapping(m) => validate_keys(m, &below)?,
            Value::Tagged(_) => {
                return Err(Refusal::at(
                    &below,
                    format!("error checking config at {named}"),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// `descriptors[0].rate_limit` for the steps to it.
fn dotted(at: &[Step]) -> String {
    let mut s = String::new();
    for st in at {
        match st {
            Step::Value(k) | Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Item(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
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
/// `who` names the entry in errors; `at` is where the map is.
fn string_field(map: &Mapping, name: &str, who: &str, at: &[Step]) -> Result<String, Refusal> {
    match field(map, name) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(scalar_text(v)),
        Some(_) => Err(Refusal::at(
            &step(at, Step::Value(name.into())),
            format!("{who}: '{name}' must be a string"),
        )),
    }
}

fn bool_field(map: &Mapping, name: &str, who: &str, at: &[Step]) -> Result<bool, Refusal> {
    match field(map, name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Refusal::at(
            &step(at, Step::Value(name.into())),
            format!("{who}: '{name}' must be true or false"),
        )),
    }
}

/// Loads the `descriptors` list of `map` into `level`; `parent` is the path so far
/// (`domain.` or `domain.key_value.`), which names entries in errors and metrics; `at` is
/// where `map` is in the file.
fn load_level(level: &mut Level, map: &Mapping, parent: &str, at: &[Step]) -> Result<(), Refusal> {
    let list_at = step(at, Step::Value("descriptors".into()));
    let items = match field(map, "descriptors") {
        None => return Ok(()),
        Some(Value::Sequence(items)) => items,
        Some(_) => {
            return Err(Refusal::at(
                &list_at,
                format!("{parent}descriptors: must be a list"),
            ))
        }
    };
    for (i, item) in items.iter().enumerate() {
        let d_at = step(&list_at, Step::Item(i));
        let Value::Mapping(d) = item else {
            return Err(Refusal::at(
                &d_at,
                format!("{parent}descriptors[{i}]: must be a map"),
            ));
        };
        let who = format!("descriptor {i} under '{}'", parent.trim_end_matches('.'));
        let key = string_field(d, "key", &who, &d_at)?;
        if key.is_empty() {
            return Err(Refusal::at(
                &d_at,
                format!("{who}: descriptor has empty key"),
            ));
        }
        let value = string_field(d, "value", &who, &d_at)?;
        let final_key = if value.is_empty() {
            key.clone()
        } else {
            format!("{key}_{value}")
        };
        let path = format!("{parent}{final_key}");
        if level.nodes.contains_key(&final_key) {
            return Err(Refusal::at(
                &d_at,
                format!("duplicate descriptor composite key '{path}'"),
            ));
        }
        let share_threshold = bool_field(d, "share_threshold", &path, &d_at)?;
        if share_threshold && !final_key.contains('*') {
            return Err(Refusal::at(
                &step(&d_at, Step::Value("share_threshold".into())),
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}' at '{path}'"
                ),
            ));
        }
        let shadow_mode = bool_field(d, "shadow_mode", &path, &d_at)?;
        let detailed_metric = bool_field(d, "detailed_metric", &path, &d_at)?;
        let value_to_metric = bool_field(d, "value_to_metric", &path, &d_at)?;
        bool_field(d, "quota_mode", &path, &d_at)?;
        let rule_at = step(&d_at, Step::Value("rate_limit".into()));
        let rule = match field(d, "rate_limit") {
            None => None,
            Some(Value::Mapping(r)) => {
                Some(load_rule(r, &path, &rule_at, shadow_mode, detailed_metric)?)
            }
            Some(_) => {
                return Err(Refusal::at(
                    &rule_at,
                    format!("'{path}': rate_limit must be a map"),
                ))
            }
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
        load_level(&mut node.children, d, &format!("{path}."), &d_at)?;
        level.nodes.insert(final_key, node);
    }
    Ok(())
}

fn load_rule(
    r: &Mapping,
    path: &str,
    at: &[Step],
    shadow_mode: bool,
    detailed_metric: bool,
) -> Result<Rule, Refusal> {
    let refuse = |field: &str, message: String| {
        let place = if r.contains_key(field) {
            step(at, Step::Value(field.into()))
        } else {
            at.to_vec()
        };
        Refusal::at(&place, message)
    };
    let unlimited = bool_field(r, "unlimited", path, at)?;
    let unit_text = string_field(r, "unit", path, at)?;
    let unit = Unit::parse(&unit_text);
    if unlimited && unit.is_some() {
        return Err(refuse(
            "unit",
            format!("'{path}': should not specify rate limit unit when unlimited"),
        ));
    }
    if !unlimited && unit.is_none() {
        return Err(refuse(
            "unit",
            format!("'{path}': invalid rate limit unit '{unit_text}'"),
        ));
    }
    let bad_count = || {
        refuse(
            "requests_per_unit",
            format!("'{path}': requests_per_unit must be an integer from 0 to 4294967295"),
        )
    };
    let requests_per_unit = match field(r, "requests_per_unit") {
        None => 0,
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(bad_count)?,
        Some(_) => return Err(bad_count()),
    };
    let counting = match field(r, "algorithm") {
        None => Counting::FixedWindow,
        Some(Value::String(s)) => Counting::parse(s).ok_or_else(|| {
            refuse(
                "algorithm",
                format!(
                    "'{path}': unknown algorithm '{s}', expected fixed_window, sliding_window, token_bucket or gcra"
                ),
            )
        })?,
        Some(_) => {
            return Err(refuse(
                "algorithm",
                format!("'{path}': algorithm must be a string"),
            ))
        }
    };
    let name = Some(string_field(r, "name", path, at)?).filter(|n| !n.is_empty());
    let mut replaces = Vec::new();
    let replaces_at = step(at, Step::Value("replaces".into()));
    match field(r, "replaces") {
        None => {}
        Some(Value::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                let item_at = step(&replaces_at, Step::Item(i));
                let replaced = match item {
                    Value::Mapping(m) => string_field(m, "name", path, &item_at)?,
                    _ => String::new(),
                };
                if replaced.is_empty() {
                    return Err(Refusal::at(
                        &item_at,
                        format!("'{path}': should not have an empty replaces entry"),
                    ));
                }
                if name.as_deref() == Some(replaced.as_str()) {
                    return Err(Refusal::at(
                        &item_at,
                        format!("'{path}': replaces should not contain name of same descriptor"),
                    ));
                }
                replaces.push(replaced);
            }
        }
        Some(_) => {
            return Err(Refusal::at(
                &replaces_at,
                format!("'{path}': replaces must be a list"),
            ))
        }
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
    fn refusals_name_the_file_the_line_and_column_and_the_entry() {
        let cases: &[(&str, &str)] = &[
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
                "f.yaml:6:13: 'd.k_v': invalid rate limit unit 'foo'",
            ),
            ("'''\n", "f.yaml:2:1: error loading config file: found unexpected end of stream"),
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
                "f.yaml:5:5: duplicate descriptor composite key 'd.k_v'",
            ),
            ("descriptors:\n", "f.yaml:1:1: config file cannot have empty domain"),
            (
                "domain: d\ndescriptors:\n  - value: v\n",
                "f.yaml:3:5: descriptor 0 under 'd': descriptor has empty key",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: day\n",
                "f.yaml:4:5: config error, unknown key 'ratelimit' at descriptors[0].ratelimit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n",
                "f.yaml:6:7: config error, unknown key 'requestsperunit' at descriptors[0].rate_limit.requestsperunit",
            ),
            (
                "domain: d\ndescriptors:\n  - a\n  - b\n",
                "f.yaml:3:5: config error, yaml file contains list of type other than map: a at descriptors[0]",
            ),
            (
                "0.25: d\ndescriptors: []\n",
                "f.yaml:1:1: config error, key is not of type string: 0.25",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name:\n      unit: second\n      requests_per_unit: 5\n",
                "f.yaml:7:11: 'd.k': should not have an empty replaces entry",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces:\n        - name: self\n      unit: second\n      requests_per_unit: 5\n",
                "f.yaml:7:11: 'd.k': replaces should not contain name of same descriptor",
            ),
            (
                "domain: d\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
                "f.yaml:6:13: 'd.foo': should not specify rate limit unit when unlimited",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
                "f.yaml:5:22: share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v' at 'd.k_v'",
            ),
            (
                "domain: d\ndomain: e\n",
                "f.yaml:1:1: error loading config file: duplicate entry with key \"domain\"",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: nosuch\n",
                "f.yaml:7:18: 'd.k': unknown algorithm 'nosuch'",
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
        assert_eq!(err, "b.yaml:1:9: duplicate domain 'd' in config file");
    }

    #[test]
    fn merged_domains_add_their_descriptors_and_still_refuse_a_duplicate() {
        let merge = LoadOptions {
            merge_domains: true,
            ..Default::default()
        };
        let rule = |k: &str, n: u32| {
            format!("domain: d\ndescriptors:\n  - key: {k}\n    rate_limit: {{unit: second, requests_per_unit: {n}}}\n")
        };
        let a = ("a.yaml".to_string(), rule("key1", 10));
        let b = ("b.yaml".to_string(), rule("key2", 20));
        let c = RlsConfig::from_sources_with(&[a.clone(), b], merge).unwrap();
        let d = &c.domains["d"];
        let n = |k: &str| d.nodes[k].rule.as_ref().unwrap().requests_per_unit;
        assert_eq!((n("key1"), n("key2")), (10, 20));
        let again = ("c.yaml".to_string(), rule("key1", 30));
        let err = RlsConfig::from_sources_with(&[a, again], merge).unwrap_err();
        assert_eq!(
            err,
            "c.yaml:3:5: duplicate descriptor composite key 'd.key1'"
        );
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
