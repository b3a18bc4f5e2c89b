//! From a `ShouldRateLimit` request to what must be counted: each descriptor's rule (the
//! configuration's, or the request's own `limit` override), its cost (`hits_addend`), and
//! `replaces` applied across the request's descriptors, as envoyproxy/ratelimit does.

use std::collections::HashSet;
use std::time::Duration;

use redis_rl_client::{FailureMode, Policy};
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

use super::config::{Counting, RlsConfig, Rule, Unit};
use super::lookup;

/// The metric key of every descriptor counted on its own `limit`: its domain, keys and
/// values come from the request, and metric labels come only from the configuration.
pub const OVERRIDE_METRIC: &str = "limit_override";

/// What one request descriptor gets.
#[derive(Debug)]
pub enum Planned {
    /// No rule: OK without a limit.
    NoLimit,
    /// `unlimited: true`: OK, never counted.
    Unlimited,
    /// A rule to count `cost` units against.
    Limited(Limited),
}

/// A counted descriptor.
#[derive(Debug)]
pub struct Limited {
    /// `requests_per_unit` (0 refuses every request that costs anything).
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub name: String,
    pub shadow: bool,
    /// The Redis key of the counter: `<key_prefix>:rls:<counter>:<counting>:<seconds>`.
    pub key: String,
    /// The length of the key's part that names the counter among the top offenders:
    /// `<key_prefix>:rls:<counter>`.
    pub subject_len: usize,
    /// The metric key (bounded: the rule's place in the tree unless the file asks for values).
    pub metric: String,
    /// The policy sent to Redis (`None` when `requests_per_unit` is 0: nothing to ask).
    pub policy: Option<Policy>,
    pub cost: u64,
    /// Give `cost` back instead of taking it (`is_negative_hits`).
    pub refund: bool,
}

/// A request that cannot be answered.
#[derive(Debug, PartialEq, Eq)]
pub struct BadRequest(pub String);

/// Plans every descriptor of a request in `domain`, its counters under `key_prefix` (the
/// gateway configuration's). `failure` is the gateway's failure mode; `hot_per_second`:
/// rules at least this fast are served from leases (0: none).
pub fn plan(
    config: &RlsConfig,
    key_prefix: &str,
    domain: &str,
    descriptors: &[RateLimitDescriptor],
    request_hits: u32,
    failure: FailureMode,
    hot_per_second: u64,
) -> Result<Vec<Planned>, BadRequest> {
    if domain.is_empty() {
        return Err(BadRequest("rate limit domain must not be empty".into()));
    }
    if descriptors.is_empty() {
        return Err(BadRequest(
            "rate limit descriptor list must not be empty".into(),
        ));
    }
    let request_cost = if request_hits == 0 {
        1
    } else {
        u64::from(request_hits)
    };
    let Some(tree) = config.domains.get(domain) else {
        // As envoyproxy/ratelimit: a domain the configuration does not define limits
        // nothing, not even by a descriptor's own `limit` override.
        return Ok(descriptors.iter().map(|_| Planned::NoLimit).collect());
    };
    let mut found: Vec<Option<(Rule, String, String)>> = Vec::with_capacity(descriptors.len());
    for d in descriptors {
        let entries: Vec<(&str, &str)> = d
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        let over = d
            .limit
            .as_ref()
            .and_then(|l| Unit::from_proto(l.unit).map(|u| (l.requests_per_unit, u)));
        found.push(match over {
            Some((requests_per_unit, unit)) => {
                // The request's own limit: counted per descriptor values, reported under
                // one metric key (its domain and keys are the request's).
                let metric = OVERRIDE_METRIC.to_string();
                let counter = lookup::counter_name(domain, entries.iter().copied());
                Some((
                    Rule {
                        requests_per_unit,
                        unit: Some(unit),
                        unlimited: false,
                        counting: Counting::FixedWindow,
                        name: None,
                        replaces: Vec::new(),
                        shadow_mode: false,
                        detailed_metric: false,
                        path: metric.clone(),
                    },
                    counter,
                    metric,
                ))
            }
            None => {
                lookup::find(domain, tree, &entries).map(|m| (m.rule.clone(), m.counter, m.metric))
            }
        });
    }
    let replaced: HashSet<&str> = found
        .iter()
        .flatten()
        .flat_map(|(r, _, _)| r.replaces.iter().map(String::as_str))
        .collect();
    let mut planned = Vec::with_capacity(descriptors.len());
    for (d, f) in descriptors.iter().zip(&found) {
        let Some((rule, counter, metric)) = f else {
            planned.push(Planned::NoLimit);
            continue;
        };
        if rule.unlimited {
            planned.push(Planned::Unlimited);
            continue;
        }
        if rule.name.as_deref().is_some_and(|n| replaced.contains(n)) {
            planned.push(Planned::NoLimit);
            continue;
        }
        let Some(unit) = rule.unit else {
            planned.push(Planned::NoLimit);
            continue;
        };
        // Over the flow's MAX_UNITS: never admitted, answered OVER_LIMIT by the flow (an
        // error would let Envoy's and the gateway's failure modes admit it).
        let cost = d.hits_addend.unwrap_or(request_cost);
        let policy = policy(rule.counting, rule.requests_per_unit, unit).map(|p| {
            let per_second = u64::from(rule.requests_per_unit) / unit.seconds();
            p.on_failure(failure)
                .shadow(rule.shadow_mode)
                .hot(hot_per_second > 0 && per_second >= hot_per_second && !rule.shadow_mode)
        });
        planned.push(Planned::Limited(Limited {
            requests_per_unit: rule.requests_per_unit,
            unit,
            name: rule.name.clone().unwrap_or_default(),
            shadow: rule.shadow_mode,
            key: format!(
                "{key_prefix}:rls:{counter}:{}:{}",
                rule.counting.name(),
                unit.seconds()
            ),
            subject_len: key_prefix.len() + ":rls:".len() + counter.len(),
            metric: metric.clone(),
            policy,
            cost,
            refund: d.is_negative_hits,
        }));
    }
    Ok(planned)
}

/// The module's policy for a rule (`None` for 0 requests per unit, which no limiter holds).
pub fn policy(counting: Counting, requests_per_unit: u32, unit: Unit) -> Option<Policy> {
    let limit = u64::from(requests_per_unit);
    let window_ms = Duration::from_secs(unit.seconds()).as_millis();
    let window_ms = u64::try_from(window_ms).ok()?;
    if limit == 0 {
        return None;
    }
    match counting {
        Counting::FixedWindow => Policy::fixed(limit, window_ms),
        Counting::SlidingWindow => Policy::sliding(limit, window_ms),
        Counting::TokenBucket => Policy::token_bucket(limit, limit, window_ms),
        Counting::Gcra => Policy::gcra(limit, window_ms, None),
    }
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
        Entry, RateLimitOverride,
    };

    fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Default::default()
        }
    }

    const EXAMPLE7: &str = r#"
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
"#;

    fn limits(planned: &[Planned]) -> Vec<Option<(u32, u64)>> {
        planned
            .iter()
            .map(|p| match p {
                Planned::Limited(l) => Some((l.requests_per_unit, l.cost)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn replaces_drops_the_named_rule_only_when_both_match() {
        let c = RlsConfig::from_sources(&[("f".into(), EXAMPLE7.into())]).unwrap();
        let one = [descriptor(&[("key_1", "value_1"), ("user", "bkthomps")])];
        let p = plan(&c, "rl", "example7", &one, 0, FailureMode::Open, 0).unwrap();
        assert_eq!(limits(&p), [Some((5, 1))]);
        let both = [
            descriptor(&[("key_1", "value_1"), ("user", "bkthomps")]),
            descriptor(&[("key_2", "value_2"), ("user", "bkthomps")]),
        ];
        let p = plan(&c, "rl", "example7", &both, 0, FailureMode::Open, 0).unwrap();
        assert_eq!(limits(&p), [None, Some((10, 1))]);
    }

    #[test]
    fn hits_addend_per_descriptor_overrides_the_request_and_zero_means_one() {
        let c = RlsConfig::from_sources(&[("f".into(), EXAMPLE7.into())]).unwrap();
        let mut a = descriptor(&[("key_1", "value_1"), ("user", "bkthomps")]);
        let b = a.clone();
        a.hits_addend = Some(0);
        let p = plan(
            &c,
            "rl",
            "example7",
            &[a.clone(), b.clone()],
            3,
            FailureMode::Open,
            0,
        )
        .unwrap();
        assert_eq!(limits(&p), [Some((5, 0)), Some((5, 3))]);
        let p = plan(
            &c,
            "rl",
            "example7",
            std::slice::from_ref(&b),
            0,
            FailureMode::Open,
            0,
        )
        .unwrap();
        assert_eq!(limits(&p), [Some((5, 1))]);
        a.hits_addend = Some(u64::MAX);
        let p = plan(&c, "rl", "example7", &[a], 0, FailureMode::Open, 0).unwrap();
        assert_eq!(
            limits(&p),
            [Some((5, u64::MAX))],
            "answered by decide, not refused"
        );
    }

    #[test]
    fn a_limit_override_counts_per_value_under_one_metric_key() {
        let c = RlsConfig::from_sources(&[("f".into(), "domain: any\n".into())]).unwrap();
        let mut d = descriptor(&[("tenant", "t1")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 42,
            unit: 2,
        });
        let p = plan(
            &c,
            "rl",
            "any",
            std::slice::from_ref(&d),
            0,
            FailureMode::Open,
            0,
        )
        .unwrap();
        let Planned::Limited(l) = &p[0] else { panic!() };
        assert_eq!((l.requests_per_unit, l.unit), (42, Unit::Minute));
        assert_eq!(l.key, "rl:rls:any:tenant=t1:fixed_window:60");
        assert_eq!(&l.key[..l.subject_len], "rl:rls:any:tenant=t1");
        assert_eq!(l.metric, OVERRIDE_METRIC);
        // A domain the configuration does not define: no limit, the override's neither.
        let p = plan(&c, "rl", "other", &[d], 0, FailureMode::Open, 0).unwrap();
        assert!(matches!(p[..], [Planned::NoLimit]));
    }

    #[test]
    fn empty_domain_or_descriptors_are_bad_requests() {
        let c = RlsConfig::default();
        assert!(plan(&c, "rl", "", &[descriptor(&[])], 0, FailureMode::Open, 0).is_err());
        assert!(plan(&c, "rl", "d", &[], 0, FailureMode::Open, 0).is_err());
        let p = plan(
            &c,
            "rl",
            "unknown",
            &[descriptor(&[("a", "b")])],
            0,
            FailureMode::Open,
            0,
        );
        assert!(matches!(p.unwrap()[..], [Planned::NoLimit]));
    }
}
