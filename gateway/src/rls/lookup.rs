//! Which rule a request descriptor falls under, as envoyproxy/ratelimit decides it: the
//! entries walk the tree level by level; at each level `key_value` first, then a wildcard
//! value in file order, then `key` alone; the rule counts only when it sits at the level of
//! the descriptor's last entry.

use redis_rl_middleware::escape_key_part;

use super::config::{wildcard_match, Level, Rule};

/// A descriptor's rule, with the names it is counted and reported under.
#[derive(Debug, PartialEq, Eq)]
pub struct Matched<'a> {
    pub rule: &'a Rule,
    /// The counter's identity: `domain:key=value:...` from the request's values, a
    /// `share_threshold` wildcard's pattern in place of the values it matched (so they
    /// share one counter).
    pub counter: String,
    /// The metric key: the rule's place in the tree (`domain.key_value.key`), with the
    /// request's values where `detailed_metric` or `value_to_metric` asks.
    pub metric: String,
}

/// The rule for `entries` (`(key, value)` pairs) in `domain`'s tree, if any.
pub fn find<'a>(domain: &str, tree: &'a Level, entries: &[(&str, &str)]) -> Option<Matched<'a>> {
    let mut level = tree;
    let mut found = None;
    // Per entry: the value the counter uses (the pattern under share_threshold).
    let mut counted: Vec<&str> = entries.iter().map(|(_, v)| *v).collect();
    let mut plain_metric = String::from(domain);
    let mut shared_patterns: Vec<Option<&str>> = vec![None; entries.len()];
    for (i, (key, value)) in entries.iter().enumerate() {
        let full = format!("{key}_{value}");
        let mut node = level.nodes.get(&full);
        let mut wildcard: Option<&str> = None;
        if node.is_none() {
            if let Some((pattern, _)) = level
                .wildcards
                .iter()
                .find(|(_, parts)| wildcard_match(parts, &full))
            {
                node = level.nodes.get(pattern);
                wildcard = Some(pattern.as_str());
            }
        }
        let by_value = node.is_some();
        if node.is_none() {
            node = level.nodes.get(*key);
        }
        plain_metric.push('.');
        plain_metric.push_str(key);
        let Some(n) = node else { break };
        let pattern_value = wildcard.map(|p| p.get(key.len() + 1..).unwrap_or(p));
        let metric_value: Option<&str> = match pattern_value {
            Some(p) if n.share_threshold => {
                if let Some(slot) = shared_patterns.get_mut(i) {
                    *slot = Some(p);
                }
                if let Some(slot) = counted.get_mut(i) {
                    *slot = p;
                }
                Some(p)
            }
            Some(_) if n.value_to_metric => Some(value),
            Some(p) => Some(p),
            None if by_value => Some(value),
            None if n.value_to_metric => Some(value),
            None => None,
        };
        if let Some(v) = metric_value.filter(|v| !v.is_empty()) {
            plain_metric.push('_');
            plain_metric.push_str(v);
        }
        if let Some(rule) = &n.rule {
            if i + 1 == entries.len() {
                found = Some(rule);
            }
        }
        if n.children.nodes.is_empty() {
            break;
        }
        level = &n.children;
    }
    let rule = found?;
    let metric = if rule.detailed_metric {
        let mut m = String::from(domain);
        for ((key, value), shared) in entries.iter().zip(&shared_patterns) {
            m.push('.');
            m.push_str(key);
            let v = shared.unwrap_or(value);
            if !v.is_empty() {
                m.push('_');
                m.push_str(v);
            }
        }
        m
    } else {
        plain_metric
    };
    Some(Matched {
        rule,
        counter: counter_name(domain, entries.iter().map(|(k, _)| *k).zip(counted)),
        metric,
    })
}

/// `domain:key1=value1:key2=value2`, each part escaped by the rule every key builder of
/// the gateway shares ([`escape_key_part`]): no domain, key or value can pass for another
/// part (envoyproxy/ratelimit's `domain_key1_value1_` cannot tell `a_b=c` from `a=b_c`).
pub fn counter_name<'a>(domain: &str, entries: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut c = escape_key_part(domain);
    for (k, v) in entries {
        c.push(':');
        c.push_str(&escape_key_part(k));
        c.push('=');
        c.push_str(&escape_key_part(v));
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rls::config::RlsConfig;

    const BASIC: &str = r#"
domain: d
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value3
  - key: key7
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 70}
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 60}
"#;

    fn config() -> RlsConfig {
        RlsConfig::from_sources(&[("f".into(), BASIC.into())]).unwrap()
    }

    fn names(entries: &[(&str, &str)]) -> Option<(u32, String, String)> {
        let c = config();
        find("d", &c.domains["d"], entries).map(|m| (m.rule.requests_per_unit, m.counter, m.metric))
    }

    #[test]
    fn most_specific_match_at_the_last_entry_only() {
        assert_eq!(
            names(&[("key1", "value1"), ("subkey1", "x")]),
            Some((
                5,
                "d:key1=value1:subkey1=x".into(),
                "d.key1_value1.subkey1".into()
            ))
        );
        assert_eq!(
            names(&[("key1", "value1"), ("subkey1", "subvalue1")]).map(|n| n.0),
            Some(10)
        );
        assert_eq!(names(&[("key1", "value1")]), None, "no rule at level 1");
        assert_eq!(names(&[("key2", "value3")]), None, "whitelisted value");
        assert_eq!(names(&[("key2", "any")]).map(|n| n.0), Some(20));
        assert_eq!(
            names(&[("key2", "any"), ("deeper", "x")]),
            None,
            "more entries than levels"
        );
        assert_eq!(names(&[("nokey", "x")]), None);
    }

    #[test]
    fn metrics_keep_values_only_where_asked() {
        assert_eq!(names(&[("key7", "v")]).unwrap().2, "d.key7_v");
        assert_eq!(names(&[("wild", "foobar")]).unwrap().2, "d.wild_foo*");
        assert_eq!(
            names(&[("route", "api"), ("method", "GET")]).unwrap().2,
            "d.route_api.method"
        );
    }

    #[test]
    fn share_threshold_counts_every_match_on_one_counter() {
        let a = names(&[("files", "files/a.pdf")]).unwrap();
        let b = names(&[("files", "files/b.csv")]).unwrap();
        assert_eq!(a.1, "d:files=files/%2A");
        assert_eq!(a.1, b.1);
        let x = names(&[("wild", "foo1")]).unwrap();
        let y = names(&[("wild", "foo2")]).unwrap();
        assert_ne!(x.1, y.1, "without share_threshold each value has its own");
    }

    #[test]
    fn counters_of_different_entries_never_share_a_name() {
        let name =
            |domain: &str, entries: &[(&str, &str)]| counter_name(domain, entries.iter().copied());
        assert_ne!(
            name("d", &[("user", "alice_sub_bob")]),
            name("d", &[("user", "alice"), ("sub", "bob")])
        );
        assert_ne!(name("d_user", &[("x", "y")]), name("d", &[("user_x", "y")]));
        assert_ne!(
            name("d", &[("a", "b:c=d")]),
            name("d", &[("a", "b"), ("c", "d")])
        );
    }
}
