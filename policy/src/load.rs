//! Reading and validating a configuration: every error names the file, the line and the
//! field.

use std::fmt;

use crate::schema::{Config, Dimension};

/// An invalid configuration: where, which field, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or what the text came from).
    pub source: String,
    /// The line (1-based), when it is known.
    pub line: Option<usize>,
    /// The field (`tiers.pro.ip`, `rules[1].limits`), when it is known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A field and what is wrong with it, before the line is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    /// `message` about `field`; a message led by a window's field (`limits[1].limit: ...`)
    /// names that field under `field`.
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        let (field, message) = (field.into(), message.into());
        match crate::rate::window_field(&message) {
            Some((sub, rest)) => Self {
                field: join(&field, sub),
                message: rest.to_string(),
            },
            None => Self { field, message },
        }
    }

    /// The error located in `text` (the first line that sets the field or its table).
    pub fn locate(self, text: &str, source: &str) -> ConfigError {
        ConfigError {
            source: source.to_string(),
            line: locate(text, &self.field),
            field: Some(self.field),
            message: self.message,
        }
    }
}

impl Config {
    /// Parses and validates TOML (missing fields take the defaults); errors name
    /// `source`, the line and the field.
    pub fn from_toml_named(text: &str, source: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            let field = line.and_then(|l| field_at(text, l));
            let message = message_of(&e);
            // A window's error names its field under the table (a rule, a tier) whose
            // deserialization refused it: that field's own line.
            if let (Some(table), Some((sub, rest))) =
                (table_at(text, line), crate::rate::window_field(&message))
            {
                let table = failing_rule(text).unwrap_or(table);
                let field = join(&table, sub);
                return ConfigError {
                    source: source.to_string(),
                    line: locate(text, &field).or(line),
                    field: Some(field),
                    message: rest.to_string(),
                };
            }
            ConfigError {
                source: source.to_string(),
                line,
                field,
                message,
            }
        })?;
        config.validate().map_err(|e| e.locate(text, source))?;
        Ok(config)
    }

    /// Parses and validates JSON of the same schema (a configuration built in code, such
    /// as a Python mapping); errors name `source`, the line and column, and the field.
    pub fn from_json_named(text: &str, source: &str) -> Result<Config, ConfigError> {
        let config: Config = serde_json::from_str(text).map_err(|e| {
            let message = e.to_string();
            ConfigError {
                source: source.to_string(),
                line: Some(e.line()),
                field: None,
                // JSON's errors name no table: a window's field alone would mislead.
                message: crate::rate::window_field(&message)
                    .map_or(message.clone(), |(_, rest)| rest.to_string()),
            }
        })?;
        config.validate().map_err(|e| ConfigError {
            source: source.to_string(),
            line: None,
            field: Some(e.field),
            message: e.message,
        })?;
        Ok(config)
    }

    /// [`Config::from_toml_named`] for text of no particular file (`<config>`).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Self::from_toml_named(text, "<config>")
    }

    /// Checks what one table cannot check alone: the default tier, tier overrides over the
    /// dimensions' tables, names, the access lists and the rules' tiers.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !self.tiers.contains_key(&self.default_tier) {
            return Err(FieldError::new(
                "default_tier",
                format!(
                    "default_tier {:?} is not among the tiers",
                    self.default_tier
                ),
            ));
        }
        for (name, tier) in &self.tiers {
            for d in [Dimension::Ip, Dimension::Endpoint, Dimension::Global] {
                if let Some(o) = tier.override_of(d) {
                    o.apply(&self.dimension_rate(d))
                        .and_then(|r| r.specs().map(|_| ()))
                        .map_err(|e| FieldError::new(format!("tiers.{name}.{d}"), e))?;
                }
            }
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(FieldError::new(
                "key_prefix",
                "key_prefix must be non-empty and must not contain braces (they would change the hash slot)",
            ));
        }
        if !crate::rule::is_token(&self.api_key_header) {
            return Err(FieldError::new(
                "api_key_header",
                format!(
                    "api_key_header {:?} is not a valid header name",
                    self.api_key_header
                ),
            ));
        }
        if !(1..=128).contains(&self.ipv6_prefix) {
            return Err(FieldError::new(
                "ipv6_prefix",
                "ipv6_prefix must be between 1 and 128",
            ));
        }
        for (field, keys) in [
            ("access.allow_api_keys", &self.access.allow_api_keys),
            ("access.deny_api_keys", &self.access.deny_api_keys),
        ] {
            // A key with whitespace or control characters is refused with 400 before any
            // list is read, so such an entry could never match.
            if keys.iter().any(|k| !crate::identity::is_key_text(k)) {
                return Err(FieldError::new(
                    field,
                    "access: API keys must be non-empty, without spaces or control characters",
                ));
            }
        }
        // The heartbeat renews a lease of ttl_ms: it must come before the lease ends, and
        // the lease must be one the server accepts (at most 10^12 ms).
        if self.fleet.membership
            && (self.fleet.heartbeat_ms == 0
                || self.fleet.ttl_ms <= self.fleet.heartbeat_ms
                || self.fleet.ttl_ms > redis_rl_core::limits::MAX_DURATION_MS)
        {
            return Err(FieldError::new(
                "fleet",
                format!(
                    "fleet: heartbeat_ms ({}) must be positive and shorter than ttl_ms ({}), at most {} ms",
                    self.fleet.heartbeat_ms,
                    self.fleet.ttl_ms,
                    redis_rl_core::limits::MAX_DURATION_MS
                ),
            ));
        }
        if self.leases.lifetime_ms == 0 || self.leases.demand_ms == 0 {
            return Err(FieldError::new(
                "leases",
                "leases: lifetime_ms and demand_ms must be at least 1",
            ));
        }
        if !(1..=100).contains(&self.leases.max_percent) {
            return Err(FieldError::new(
                "leases.max_percent",
                "leases: max_percent must be between 1 and 100",
            ));
        }
        self.check_bans()?;
        for (i, rule) in self.rules.iter().enumerate() {
            if Dimension::from_name(&rule.name).is_some() {
                return Err(FieldError::new(
                    format!("rules[{i}].name"),
                    format!(
                        "{:?} is a dimension's name; give the rule its own",
                        rule.name
                    ),
                ));
            }
            if self.rules[..i].iter().any(|r| r.name == rule.name) {
                return Err(FieldError::new(
                    format!("rules[{i}].name"),
                    format!("two rules are named {:?}", rule.name),
                ));
            }
            if let Some(t) = rule.tiers.iter().find(|t| !self.tiers.contains_key(*t)) {
                return Err(FieldError::new(
                    format!("rules[{i}].tiers"),
                    format!("tier {t:?} is not among the tiers"),
                ));
            }
        }
        Ok(())
    }
}

/// What a TOML error says; the display's quoted line of the file is left out (a line may
/// hold a secret, and the error names the line already).
fn message_of(e: &toml::de::Error) -> String {
    let message = e.message().trim();
    if message.is_empty() {
        "invalid TOML syntax".to_string()
    } else {
        message.to_string()
    }
}

/// The 1-based line of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()
        .get(..end)
        .map_or(0, |b| b.iter().filter(|c| **c == b'\n').count())
        + 1
}

/// A line's table header (`[a.b]` -> `a.b`; `[[rules]]` -> `rules[<n>]`), counting array
/// tables seen so far.
fn header(line: &str, arrays: &mut std::collections::HashMap<String, usize>) -> Option<String> {
    let t = line.trim();
    if let Some(name) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
        let name = unquote_path(name);
        let n = arrays.entry(name.clone()).or_insert(0);
        let out = format!("{name}[{n}]");
        *n += 1;
        return Some(out);
    }
    let name = t.strip_prefix('[')?.split(']').next()?;
    Some(unquote_path(name))
}

fn unquote_path(path: &str) -> String {
    path.split('.')
        .map(|s| s.trim().trim_matches('"').trim_matches('\''))
        .collect::<Vec<_>>()
        .join(".")
}

/// The key a line sets (`limit = 1` -> `limit`), if it sets one.
fn key_of(line: &str) -> Option<String> {
    let t = line.trim_start();
    if t.starts_with(['#', '[']) {
        return None;
    }
    let (key, _) = t.split_once('=')?;
    let key = unquote_path(key.trim());
    let ok = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b));
    ok.then_some(key)
}

fn join(table: &str, key: &str) -> String {
    if table.is_empty() {
        key.to_string()
    } else {
        format!("{table}.{key}")
    }
}

/// The field set at (or around) 1-based `line`: the table, and the key of the nearest
/// line at or above it that sets one.
fn field_at(text: &str, line: usize) -> Option<String> {
    let mut arrays = std::collections::HashMap::new();
    let mut table = String::new();
    let mut key = None;
    for l in text.lines().take(line) {
        if let Some(h) = header(l, &mut arrays) {
            table = h;
            key = None;
        } else if let Some(k) = key_of(l) {
            key = Some(k);
        }
    }
    match key {
        Some(k) => Some(join(&table, &k)),
        None if table.is_empty() => None,
        None => Some(table),
    }
}

/// `rules[i]` of the first rule that does not load on its own: an error inside a rule is
/// reported at the start of the whole `rules` array.
fn failing_rule(text: &str) -> Option<String> {
    let table: toml::Table = toml::from_str(text).ok()?;
    let rules = table.get("rules")?.as_array()?;
    rules
        .iter()
        .position(|r| r.clone().try_into::<crate::rule::Rule>().is_err())
        .map(|i| format!("rules[{i}]"))
}

/// The table (`rules[0]`, `tiers.pro`) open at `line` (1-based), if any.
fn table_at(text: &str, line: Option<usize>) -> Option<String> {
    let mut arrays = std::collections::HashMap::new();
    let mut table = None;
    for l in text.lines().take(line?) {
        if let Some(h) = header(l, &mut arrays) {
            table = Some(h);
        }
    }
    table
}

/// The first line that sets `field` or opens its table (or a table or key containing it);
/// a field that no line sets (a window of `limits`, a default) is looked for as the field
/// it is under (`rules[0].limits[1].limit` on the line of `rules[0].limits`).
fn locate(text: &str, field: &str) -> Option<usize> {
    let found = locate_exactly(text, field);
    if found.is_some() {
        return found;
    }
    let parent = field
        .rfind(['.', '['])
        .map(|at| &field[..at])
        .filter(|p| !p.is_empty())?;
    locate(text, parent)
}

fn locate_exactly(text: &str, field: &str) -> Option<usize> {
    let mut arrays = std::collections::HashMap::new();
    let mut table = String::new();
    let within = |path: &str| field == path || field.starts_with(&format!("{path}."));
    for (i, l) in text.lines().enumerate() {
        if let Some(h) = header(l, &mut arrays) {
            table = h;
            if field == table {
                return Some(i + 1);
            }
        } else if let Some(k) = key_of(l) {
            if within(&join(&table, &k)) {
                return Some(i + 1);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_toml_is_the_default() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        for (text, expected) in [
            ("keyprefix = \"x\"", "f.toml:1: keyprefix: unknown field `keyprefix`"),
            ("\n[ip]\nlimit = 0", "f.toml:3: ip.limit: invalid policy: limit must be"),
            (
                "[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 0\n",
                "f.toml:4: rules[0].limit: invalid policy: limit must be",
            ),
            (
                "[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\n[[rules]]\nname = \"b\"\nkey = [\"ip\"]\n\
                 limits = [\"10/second\", { limit = 5, window_ms = 0 }]\n",
                "f.toml:8: rules[1].limits[1].window_ms: invalid policy: window_ms must be",
            ),
            ("\n[ip]\nlimt = 0", "f.toml:3: ip.limt: unknown field `limt`"),
            ("key_prefix = \"{a}\"", "f.toml:1: key_prefix: key_prefix must be non-empty"),
            ("key_prefix = \"a\"\ndefault_tier = \"gold\"", "f.toml:2: default_tier: default_tier \"gold\""),
            ("trusted_proxies = [\"nope\"]", "f.toml:1: trusted_proxies: invalid IP"),
            ("instances = 0", "f.toml:1: instances:"),
            ("hot = [\"nope\"]", "unknown variant `nope`"),
            ("limit = ", "f.toml:1: limit: invalid TOML syntax"),
            ("[leases]\nlifetime_ms = 0", "f.toml:1: leases: leases:"),
            ("[fleet]\nheartbeat_ms = 3000", "f.toml:1: fleet: fleet: heartbeat_ms (3000) must be positive and shorter than ttl_ms"),
            ("[fleet]\nttl_ms = 1000000000000000", "f.toml:1: fleet: fleet: heartbeat_ms (1000)"),
            ("ipv6_prefix = 129", "f.toml:1: ipv6_prefix: ipv6_prefix must be between 1 and 128"),
            ("api_key_header = \"x key\"", "f.toml:1: api_key_header: api_key_header \"x key\" is not a valid"),
            ("[access]\nallow_ips = [\"10.0.0.0/33\"]", "f.toml:2: access.allow_ips: invalid IP"),
            ("[access]\ndeny_api_keys = [\"a b\"]", "f.toml:2: access.deny_api_keys: access: API keys"),
            (
                "[tiers.free]\nlimit = 1\n[tiers.free.ip]\nlimit = 0",
                "f.toml:4: tiers.free.ip.limit: invalid policy: limit",
            ),
            ("[tiers.free]\nlimit = 1\n[tiers.free.api]\nlimit = 1", "unknown field `api`"),
            (
                "[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\n\n[[rules]]\nname = \"b\"\nkey = [\"ip\"]\nlimits = [\"5/fortnight\"]\n",
                "f.toml:9: rules[1].limits: \"5/fortnight\": unknown unit `fortnight`",
            ),
            (
                "[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\ntiers = [\"gold\"]\n",
                "f.toml:5: rules[0].tiers: tier \"gold\" is not among the tiers",
            ),
            (
                "[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\n[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\n",
                "f.toml:6: rules[1].name: two rules are named \"a\"",
            ),
            (
                "[[rules]]\nname = \"ip\"\nkey = [\"ip\"]\nlimit = 1\n",
                "f.toml:2: rules[0].name: \"ip\" is a dimension's name",
            ),
            ("[ip]\nlimits = [\"1/3 weeks\"]", "f.toml:2: ip.limits: \"1/3 weeks\": a calendar period takes no count"),
        ] {
            let err = Config::from_toml_named(text, "f.toml").unwrap_err().to_string();
            assert!(err.starts_with(expected) || err.contains(expected), "{text}\n{err}\n{expected}");
        }
    }

    /// The book's annotated TOML ("Configuring rl-gateway") is the default, key for key.
    #[test]
    fn the_documented_toml_is_the_default() {
        let doc = include_str!("../../docs/src/rules.md");
        let toml = doc
            .split("## Configuring rl-gateway")
            .nth(1)
            .and_then(|s| s.split("```toml\n").nth(1))
            .and_then(|s| s.split("```").next())
            .expect("the section has a TOML block");
        assert_eq!(Config::from_toml(toml).unwrap(), Config::default());
    }

    #[test]
    fn several_windows_everywhere() {
        let c = Config::from_toml(
            r#"
            [tiers.free]
            limits = ["10/second", "10000/day"]
            [ip]
            limits = ["5/second", { limit = 100, window_ms = 3600000, algorithm = "fixed" }]
            [tiers.free.global]
            limits = ["1/second", "2/minute"]
            "#,
        )
        .unwrap();
        assert_eq!(c.tiers["free"].rate.windows.len(), 2);
        assert_eq!(c.ip.specs().unwrap()[1].algorithm, crate::Kind::FixedWindow);
        let g = c.tier_rate("free", Dimension::Global).unwrap().unwrap();
        assert_eq!(g.specs().unwrap().len(), 2);
    }
}
