//! The engine: a validated configuration asked, per request, who sent it (and whether it
//! is refused or never limited) and what it is limited on, under which keys.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::access::{Access, AccessList};
use crate::ban::Ban;
use crate::identity::{self, canonical_net, hex16, ClientText};
use crate::key_digest::KeyDigest;
use crate::key_part::push_escaped_key_part;
use crate::limit::{FailureModeName, LimitSpec};
use crate::load::FieldError;
use crate::path::{normalize_path, Template};
use crate::rate::Rate;
use crate::render::{bad_request, forbidden, Response};
use crate::rule::{KeyPart, Rule};
use crate::schema::{Config, Dimension};
use crate::window_text::{Shown, WindowText};

/// The endpoint dimension's route for a path that no route matches.
pub const UNMATCHED: &str = "<unmatched>";

/// A request's headers, as the front end holds them.
pub trait Headers {
    /// Every value of the header `name` (given in lower case), in order.
    fn get_all(&self, name: &str) -> Vec<&[u8]>;
}

impl Headers for Vec<(String, Vec<u8>)> {
    fn get_all(&self, name: &str) -> Vec<&[u8]> {
        self.iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
            .collect()
    }
}

/// What the engine needs to know of a request.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The method (`GET`).
    pub method: &'a str,
    /// The path as received (the engine normalises it).
    pub path: &'a str,
    /// The host (from the URI's authority); `None`: the `Host` header.
    pub host: Option<&'a str>,
    /// The headers.
    pub headers: &'a dyn Headers,
    /// The address of the peer that sent it.
    pub peer: Option<IpAddr>,
    /// The front end's own route template for it, if it knows one (used when no rule path
    /// or configured route matches).
    pub route: Option<&'a str>,
}

/// Who sent a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The API key (never logged; look its tier up with it).
    pub api_key: Option<String>,
    /// The key's tenant id (what logs and keys show).
    pub tenant: Option<String>,
    /// The client address (after trusted proxies).
    pub client_ip: Option<IpAddr>,
    /// The normal form of the path: matched, and what the front end forwards.
    pub path: String,
}

/// What happens to a request before any limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Answer with this response (400 for a bad API key, 403 for a denied client).
    Refuse(Response),
    /// On an allow list: never limited, nothing counted.
    Pass(Identity),
    /// Limited: ask [`Engine::plan`].
    Limit(Identity),
}

/// One key a request is limited on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanItem {
    /// The policy's name in `RateLimit-Policy` (`api_key`, or `api_key-1s` when the rate
    /// has several windows; a rule's name likewise).
    pub name: String,
    /// The dimension's or the rule's name (problem bodies, logs, metrics).
    pub label: String,
    /// The dimension, or `None` for a rule.
    pub dimension: Option<Dimension>,
    /// The Redis key.
    pub key: String,
    /// The window.
    pub spec: LimitSpec,
    /// Decide and record, never deny.
    pub shadow: bool,
    /// Its own failure mode (`None`: the configuration's).
    pub failure_mode: Option<FailureModeName>,
    /// Served from leases.
    pub hot: bool,
    /// Held instead of refused for a wait up to this long (`delay_max_ms`).
    pub delay_max_ms: Option<u64>,
    /// Its policy's ban, if it has one.
    pub ban: Option<Ban>,
    /// Its entry in `RateLimit-Policy` (`"name";q=10;w=1`), written at load.
    pub(crate) policy: Arc<str>,
    /// Its quota and window as shown, computed at load.
    pub(crate) shown: Shown,
}

/// What one request is limited on: every item, all or nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The items, dimensions first (in the configured order), then matching rules.
    pub items: Vec<PlanItem>,
    /// The tier the request was limited as (`None` without an API key).
    pub tier: Option<String>,
    /// The route of the endpoint dimension.
    pub route: String,
    /// The `X-RateLimit-*` headers are sent beside the draft's (`legacy_headers`).
    pub legacy_headers: bool,
}

/// A rate ready to plan: its windows and how they are enforced.
#[derive(Clone, Debug)]
pub(crate) struct Compiled {
    pub(crate) specs: Vec<LimitSpec>,
    /// Each window's name, key suffix and policy entry (in the order of `specs`).
    pub(crate) texts: Vec<WindowText>,
    pub(crate) shadow: bool,
    pub(crate) failure_mode: Option<FailureModeName>,
    pub(crate) delay_max_ms: Option<u64>,
    pub(crate) ban: Option<Ban>,
}

impl Compiled {
    /// `rate`, the rate of the policy `label` (a dimension's or a rule's name).
    fn of(label: &str, rate: &Rate) -> Result<Self, String> {
        let specs = rate.specs()?;
        Ok(Self {
            texts: WindowText::of_rate(label, &specs),
            specs,
            shadow: rate.shadow,
            failure_mode: rate.failure_mode,
            delay_max_ms: rate.delay_max_ms,
            ban: rate.ban,
        })
    }
}

#[derive(Clone, Debug)]
pub(crate) struct TierPolicies {
    pub(crate) api_key: Compiled,
    pub(crate) ip: Option<Compiled>,
    pub(crate) endpoint: Option<Compiled>,
    pub(crate) global: Option<Compiled>,
}

/// A validated configuration, ready to plan requests. Building one is where a bad file is
/// refused; planning never fails.
#[derive(Clone, Debug)]
pub struct Engine {
    config: Config,
    pub(crate) tiers: HashMap<String, TierPolicies>,
    pub(crate) ip: Compiled,
    pub(crate) endpoint: Compiled,
    pub(crate) global: Compiled,
    pub(crate) rules: Vec<(Rule, Compiled)>,
    pub(crate) routes: Vec<Template>,
    trusted: Vec<IpNet>,
    access: AccessList,
    api_key_header: String,
    key_digest: KeyDigest,
    /// Whether a rule matches or keys on the host (else a request's host is not read).
    rules_read_host: bool,
    /// Whether a rule books its units from a request header or settles them from the
    /// response ([`Engine::books_from_headers`]).
    books_from_headers: bool,
    /// The most items a plan can have (its vector is sized once).
    items_at_most: usize,
}

impl Engine {
    /// Validates `config` and compiles it. `routes` are the front end's own route
    /// templates (rl-gateway's `--route`), matched after the rules' paths.
    /// The secret file `api_key_digest_secret_file` names is read here, once.
    pub fn new(config: Config, routes: &[String]) -> Result<Self, FieldError> {
        config.validate()?;
        let key_digest = match &config.api_key_digest_secret_file {
            Some(path) => KeyDigest::from_file(path)
                .map_err(|e| FieldError::new("api_key_digest_secret_file", e))?,
            None => KeyDigest::unkeyed(),
        };
        let compile = |field: String, label: &str, rate: &Rate| {
            Compiled::of(label, rate).map_err(|e| FieldError::new(field, e))
        };
        let mut tiers = HashMap::new();
        for (name, limits) in &config.tiers {
            let over = |d: Dimension| -> Result<Option<Compiled>, FieldError> {
                match limits.override_of(d) {
                    None => Ok(None),
                    Some(o) => {
                        let field = format!("tiers.{name}.{d}");
                        let rate = o
                            .apply(&config.dimension_rate(d))
                            .map_err(|e| FieldError::new(field.clone(), e))?;
                        compile(field, d.name(), &rate).map(Some)
                    }
                }
            };
            tiers.insert(
                name.clone(),
                TierPolicies {
                    api_key: compile(
                        format!("tiers.{name}"),
                        Dimension::ApiKey.name(),
                        &limits.rate,
                    )?,
                    ip: over(Dimension::Ip)?,
                    endpoint: over(Dimension::Endpoint)?,
                    global: over(Dimension::Global)?,
                },
            );
        }
        let mut rules = Vec::with_capacity(config.rules.len());
        let mut templates: Vec<Template> = Vec::new();
        for (i, rule) in config.rules.iter().enumerate() {
            let compiled = compile(format!("rules[{i}]"), &rule.name, &rule.rate)?;
            rules.push((rule.clone(), compiled));
            for t in &rule.paths {
                if !templates.contains(t) {
                    templates.push(t.clone());
                }
            }
        }
        for r in routes {
            let t = Template::parse(r).map_err(|e| FieldError::new("routes", e))?;
            if !templates.contains(&t) {
                templates.push(t);
            }
        }
        let ip = compile("ip".into(), Dimension::Ip.name(), &config.ip)?;
        let endpoint = compile(
            "endpoint".into(),
            Dimension::Endpoint.name(),
            &config.endpoint,
        )?;
        let global = compile("global".into(), Dimension::Global.name(), &config.global)?;
        let rules_read_host = rules
            .iter()
            .any(|(r, _)| !r.hosts.is_empty() || r.key.contains(&KeyPart::Host));
        let books_from_headers = rules
            .iter()
            .any(|(r, _)| r.cost.is_some() || r.settle.is_some());
        let items_at_most = items_at_most(&config, &tiers, [&ip, &endpoint, &global], &rules);
        Ok(Self {
            ip,
            endpoint,
            global,
            trusted: config
                .trusted_proxies
                .iter()
                .copied()
                .map(canonical_net)
                .collect(),
            access: AccessList::new(&config.access),
            api_key_header: config.api_key_header.to_ascii_lowercase(),
            key_digest,
            tiers,
            rules,
            routes: templates,
            config,
            rules_read_host,
            books_from_headers,
            items_at_most,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The id of `api_key` in key names, logs and the admin endpoints: keyed with the
    /// configured secret, else the unkeyed [`tenant_id`](crate::tenant_id).
    pub fn tenant_id(&self, api_key: &str) -> String {
        self.key_digest.of(api_key)
    }

    /// Whether API-key digests are keyed with a secret (without one, a guessable API key
    /// can be recognised in key names: front ends warn at start).
    pub fn key_digest_is_keyed(&self) -> bool {
        self.key_digest.is_keyed()
    }

    /// Whether some rule books its units from a request header (`cost`) or settles them
    /// from the response (`settle`): when none does, every request's
    /// [`booking`](Engine::booking) is 1 unit per item and settles nothing.
    pub fn books_from_headers(&self) -> bool {
        self.books_from_headers
    }

    /// The header carrying the API key, in lower case.
    pub fn api_key_header(&self) -> &str {
        &self.api_key_header
    }

    /// Who sent `req`, and whether it is refused (bad API key: 400; deny list: 403), never
    /// limited (allow list) or limited. `request_id` goes into a refusal.
    pub fn admit(&self, req: &Request<'_>, request_id: &str) -> Admission {
        let api_key = match identity::api_key(&req.headers.get_all(&self.api_key_header)) {
            Ok(k) => k,
            Err(e) => return Admission::Refuse(bad_request(e, request_id)),
        };
        let client_ip = identity::client_ip(
            req.peer,
            &req.headers.get_all("x-forwarded-for"),
            &self.trusted,
        );
        let identity = Identity {
            tenant: api_key.as_deref().map(|k| self.key_digest.of(k)),
            api_key,
            client_ip,
            path: normalize_path(req.path),
        };
        match self.access.check(client_ip, identity.api_key.as_deref()) {
            Access::Denied(on) => Admission::Refuse(forbidden(on, request_id)),
            Access::Allowed => Admission::Pass(identity),
            Access::Limited => Admission::Limit(identity),
        }
    }

    /// The route of the endpoint dimension for a normalised path: the first rule path or
    /// configured route that matches (those without `**` first), else the front end's,
    /// else `<unmatched>`.
    pub fn route(&self, path: &str, front_end: Option<&str>) -> String {
        let matching = || self.routes.iter().filter(|t| t.matches(path));
        matching()
            .find(|t| !t.has_rest())
            .or_else(|| matching().next())
            .map(|t| t.as_str().to_string())
            .or_else(|| front_end.map(str::to_string))
            .unwrap_or_else(|| UNMATCHED.to_string())
    }

    /// Every key and window `req` is limited on: the dimensions, then every rule it
    /// matches. `tier` is the key's tier as found (`None` or unknown: the default tier).
    pub fn plan(&self, req: &Request<'_>, id: &Identity, tier: Option<&str>) -> Plan {
        let prefix = self.config.key_prefix.as_str();
        let route = self.route(&id.path, req.route);
        // Key-less requests have no tier: the dimensions' own tables apply.
        let tier = id.tenant.as_ref().and_then(|_| {
            tier.and_then(|t| self.tiers.get_key_value(t))
                .or_else(|| self.tiers.get_key_value(&self.config.default_tier))
        });
        let client = ClientText::of(id.client_ip, self.config.ipv6_prefix);
        let client = client.as_str();
        let mut plan = Plan {
            items: Vec::with_capacity(self.items_at_most),
            tier: tier.map(|(name, _)| name.clone()),
            route,
            legacy_headers: self.config.legacy_headers,
        };
        for &dimension in &self.config.dimensions {
            let over = |f: fn(&TierPolicies) -> &Option<Compiled>| {
                tier.and_then(|(name, t)| f(t).as_ref().map(|c| (name, c)))
            };
            let (key, compiled) = match (dimension, &id.tenant) {
                (Dimension::ApiKey, None) => continue,
                (Dimension::ApiKey, Some(t)) => {
                    let Some((_, policies)) = tier else { continue };
                    ([prefix, ":{k:", t, "}:key"].concat(), &policies.api_key)
                }
                (Dimension::Ip, _) => shared(
                    [prefix, ":{ip:", client, "}"].concat(),
                    over(|t| &t.ip),
                    &self.ip,
                ),
                (Dimension::Endpoint, Some(t)) => (
                    [prefix, ":{k:", t, "}:ep:", &plan.route].concat(),
                    over(|t| &t.endpoint).map_or(&self.endpoint, |(_, c)| c),
                ),
                (Dimension::Endpoint, None) => (
                    [prefix, ":{ip:", client, "}:ep:", &plan.route].concat(),
                    &self.endpoint,
                ),
                (Dimension::Global, _) => shared(
                    [prefix, ":{global}"].concat(),
                    over(|t| &t.global),
                    &self.global,
                ),
            };
            let hot = self.config.hot.contains(&dimension);
            push_windows(
                &mut plan.items,
                dimension.name(),
                Some(dimension),
                key,
                compiled,
                hot,
            );
        }
        // The host is read only if a rule looks at it (it costs a header lookup and two
        // copies).
        let host = if self.rules_read_host {
            request_host(req)
        } else {
            None
        };
        let method = upper_case(req.method);
        for (rule, compiled) in &self.rules {
            let facts = Facts {
                id,
                tier: plan.tier.as_deref(),
                client,
                route: &plan.route,
                method: &method,
                host: host.as_deref(),
                headers: req.headers,
            };
            if !facts.matches(rule) {
                continue;
            }
            let Some(key) = facts.key(prefix, rule) else {
                continue; // a part of the key is missing: the rule does not apply
            };
            push_windows(&mut plan.items, &rule.name, None, key, compiled, false);
        }
        plan
    }
}

/// A shared dimension's key and rate: a tier's own budget (`own`) lives in a key of its
/// own.
fn shared<'c>(
    mut base: String,
    own: Option<(&String, &'c Compiled)>,
    default: &'c Compiled,
) -> (String, &'c Compiled) {
    match own {
        Some((name, c)) => {
            base.push_str(":tier:");
            base.push_str(name);
            (base, c)
        }
        None => (base, default),
    }
}

/// The most items a plan of `config` can have: each dimension's windows (its tiers' own
/// rates included), then every rule's.
fn items_at_most(
    config: &Config,
    tiers: &HashMap<String, TierPolicies>,
    [ip, endpoint, global]: [&Compiled; 3],
    rules: &[(Rule, Compiled)],
) -> usize {
    let windows = |c: &Compiled| c.specs.len();
    let most = |default: usize, f: fn(&TierPolicies) -> &Option<Compiled>| {
        tiers
            .values()
            .filter_map(|t| f(t).as_ref().map(windows))
            .fold(default, usize::max)
    };
    let dimensions: usize = config
        .dimensions
        .iter()
        .map(|d| match d {
            Dimension::ApiKey => tiers
                .values()
                .map(|t| windows(&t.api_key))
                .max()
                .unwrap_or(0),
            Dimension::Ip => most(windows(ip), |t| &t.ip),
            Dimension::Endpoint => most(windows(endpoint), |t| &t.endpoint),
            Dimension::Global => most(windows(global), |t| &t.global),
        })
        .sum();
    dimensions + rules.iter().map(|(_, c)| windows(c)).sum::<usize>()
}

/// One plan item per window of `compiled`, under `key` (and the window's suffix when it
/// has several).
fn push_windows(
    items: &mut Vec<PlanItem>,
    label: &str,
    dimension: Option<Dimension>,
    mut key: String,
    compiled: &Compiled,
    hot: bool,
) {
    let several = compiled.specs.len() > 1;
    for (spec, text) in compiled.specs.iter().zip(&compiled.texts) {
        let key = if several {
            [key.as_str(), &text.key_suffix].concat()
        } else {
            std::mem::take(&mut key) // the one window: the key itself
        };
        items.push(PlanItem {
            name: text.name.clone(),
            label: label.to_owned(),
            dimension,
            key,
            spec: *spec,
            shadow: compiled.shadow,
            failure_mode: compiled.failure_mode,
            hot,
            delay_max_ms: compiled.delay_max_ms,
            ban: compiled.ban,
            policy: Arc::clone(&text.policy),
            shown: text.shown,
        });
    }
}

/// `text` in upper case, borrowed when it is already (a method usually is).
fn upper_case(text: &str) -> Cow<'_, str> {
    if text.bytes().any(|b| b.is_ascii_lowercase()) {
        Cow::Owned(text.to_ascii_uppercase())
    } else {
        Cow::Borrowed(text)
    }
}

/// The host of a request: lower case, without the port.
fn request_host(req: &Request<'_>) -> Option<String> {
    let raw = match req.host {
        Some(h) => h.to_string(),
        None => {
            let values = req.headers.get_all("host");
            String::from_utf8_lossy(values.first()?).into_owned()
        }
    };
    let raw = raw.trim();
    let host = if raw.starts_with('[') {
        raw.split_inclusive(']').next().unwrap_or(raw)
    } else {
        raw.split(':').next().unwrap_or(raw)
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Appends a key part's value as it appears in a key: escaped by the rule every key
/// builder shares ([`crate::escape_key_part`]), so a header value cannot change a key's
/// hash slot or inject a part; an empty value, or one whose escaped text is over 64 bytes,
/// as `~` and a digest (`~` is never in escaped text).
fn push_part_text(key: &mut String, value: &str) {
    let start = key.len();
    push_escaped_key_part(key, value);
    let escaped = key.len() - start;
    if escaped == 0 || escaped > 64 {
        key.truncate(start);
        key.push('~');
        key.push_str(&hex16(value.as_bytes()));
    }
}

/// What rules are matched against, for one request.
struct Facts<'a> {
    id: &'a Identity,
    tier: Option<&'a str>,
    client: &'a str,
    route: &'a str,
    method: &'a str,
    host: Option<&'a str>,
    headers: &'a dyn Headers,
}

impl Facts<'_> {
    fn header(&self, name: &str) -> Option<String> {
        let values = self.headers.get_all(name);
        values
            .first()
            .map(|v| String::from_utf8_lossy(v).trim().to_string())
    }

    fn matches(&self, rule: &Rule) -> bool {
        (rule.paths.is_empty() || rule.paths.iter().any(|t| t.matches(&self.id.path)))
            && (rule.methods.is_empty() || rule.methods.iter().any(|m| m == self.method))
            && (rule.hosts.is_empty()
                || self.host.is_some_and(|h| rule.hosts.iter().any(|r| r == h)))
            && rule.headers.iter().all(|(name, value)| {
                self.headers
                    .get_all(name)
                    .iter()
                    .any(|v| String::from_utf8_lossy(v).trim() == value)
            })
            && (rule.tiers.is_empty()
                || self.tier.is_some_and(|t| rule.tiers.iter().any(|r| r == t)))
    }

    /// `<prefix>:{<first part>}:r:<rule>[:<other parts>]`; the route is never the hash
    /// tag (its braces would end it). `None` when a part is missing. Each part is written
    /// straight into the key, once.
    fn key(&self, prefix: &str, rule: &Rule) -> Option<String> {
        let tag_at = rule.key.iter().position(|p| !matches!(p, KeyPart::Route));
        // Room for the usual parts (an address, a tenant id) without growing.
        let mut key = String::with_capacity(prefix.len() + rule.name.len() + 64);
        key.push_str(prefix);
        key.push_str(":{");
        match tag_at.and_then(|i| rule.key.get(i)) {
            Some(part) => self.push_part(&mut key, part)?,
            None => {
                key.push_str("r:");
                key.push_str(&rule.name);
            }
        }
        key.push_str("}:r:");
        key.push_str(&rule.name);
        for (i, part) in rule.key.iter().enumerate() {
            if Some(i) != tag_at {
                key.push(':');
                self.push_part(&mut key, part)?;
            }
        }
        Some(key)
    }

    /// Appends one part of a rule's key (`None`: the request has no value for it).
    fn push_part(&self, key: &mut String, part: &KeyPart) -> Option<()> {
        match part {
            KeyPart::ApiKey => {
                let tenant = self.id.tenant.as_ref()?;
                key.push_str("k:");
                key.push_str(tenant);
            }
            KeyPart::Ip => {
                key.push_str("ip:");
                key.push_str(self.client);
            }
            KeyPart::Route => {
                key.push_str("route:");
                push_escaped_key_part(key, self.route);
            }
            KeyPart::Method => {
                key.push_str("m:");
                push_part_text(key, self.method);
            }
            KeyPart::Host => {
                let host = self.host?;
                key.push_str("host:");
                push_part_text(key, host);
            }
            KeyPart::Tier => {
                let tier = self.tier?;
                key.push_str("tier:");
                push_part_text(key, tier);
            }
            KeyPart::Global => key.push_str("global"),
            KeyPart::Header(name) => {
                let value = self.header(name).filter(|v| !v.is_empty())?;
                key.push_str("h:");
                key.push_str(name);
                key.push('=');
                push_part_text(key, &value);
            }
        }
        Some(())
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
