//! `ratelimit.config.ratelimit.v3.RateLimitConfig`, the resource an xDS management server
//! pushes to envoyproxy/ratelimit (`api/ratelimit/config/ratelimit/v3/rls_conf.proto` in
//! that repository; its messages are rl-gateway-proto's), as the YAML document a file holds.
//!
//! A pushed configuration goes through the same loader as a file, so both are refused (or
//! accepted) alike, as that service does with its own loader.

pub use rl_gateway_proto::ratelimit::config::ratelimit::v3::RateLimitConfig;
use rl_gateway_proto::ratelimit::config::ratelimit::v3::{
    RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use serde_yaml_ng::{Mapping, Value};

/// The resource's type URL.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The YAML document a file would hold for this configuration.
pub fn to_document(config: &RateLimitConfig) -> Value {
    let mut root = Mapping::new();
    root.insert("domain".into(), config.domain.clone().into());
    root.insert("descriptors".into(), descriptors(&config.descriptors));
    Value::Mapping(root)
}

fn descriptors(list: &[RateLimitDescriptor]) -> Value {
    Value::Sequence(list.iter().map(descriptor).collect())
}

fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut m = Mapping::new();
    m.insert("key".into(), d.key.clone().into());
    if !d.value.is_empty() {
        m.insert("value".into(), d.value.clone().into());
    }
    if let Some(p) = &d.rate_limit {
        m.insert("rate_limit".into(), policy(p));
    }
    if !d.descriptors.is_empty() {
        m.insert("descriptors".into(), descriptors(&d.descriptors));
    }
    m.insert("shadow_mode".into(), d.shadow_mode.into());
    m.insert("detailed_metric".into(), d.detailed_metric.into());
    m.insert("quota_mode".into(), d.quota_mode.into());
    // The metadata's contents are not used (accepted and ignored, as in a file).
    if d.metadata.is_some() {
        m.insert("metadata".into(), Value::Mapping(Mapping::new()));
    }
    Value::Mapping(m)
}

fn policy(p: &RateLimitPolicy) -> Value {
    let mut m = Mapping::new();
    // The unit's enum name, as that service writes it before loading: UNKNOWN (0) is an
    // invalid unit for a limit and the absence of one for `unlimited`.
    let unit = RateLimitUnit::try_from(p.unit)
        .map_or_else(|_| p.unit.to_string(), |u| u.as_str_name().to_string());
    m.insert("unit".into(), unit.into());
    m.insert(
        "requests_per_unit".into(),
        u64::from(p.requests_per_unit).into(),
    );
    m.insert("unlimited".into(), p.unlimited.into());
    if !p.name.is_empty() {
        m.insert("name".into(), p.name.clone().into());
    }
    if !p.replaces.is_empty() {
        let replaces = p
            .replaces
            .iter()
            .map(|r| {
                let mut e = Mapping::new();
                e.insert("name".into(), r.name.clone().into());
                Value::Mapping(e)
            })
            .collect();
        m.insert("replaces".into(), Value::Sequence(replaces));
    }
    Value::Mapping(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn limited(key: &str, value: &str, unit: i32, n: u32) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.into(),
            value: value.into(),
            rate_limit: Some(RateLimitPolicy {
                unit,
                requests_per_unit: n,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_pushed_configuration_loads_as_its_yaml_would() {
        let config = RateLimitConfig {
            name: "one".into(),
            domain: "d".into(),
            descriptors: vec![
                limited("k", "v", 2, 5),
                RateLimitDescriptor {
                    key: "free".into(),
                    rate_limit: Some(RateLimitPolicy {
                        unlimited: true,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                RateLimitDescriptor {
                    key: "parent".into(),
                    descriptors: vec![limited("child", "", 7, 3)],
                    ..Default::default()
                },
            ],
        };
        // Through the wire first: the field numbers are the proto's.
        let bytes = config.encode_to_vec();
        let decoded = RateLimitConfig::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded, config);
        let loaded = crate::rls::config::RlsConfig::from_documents(
            &[("one".to_string(), to_document(&decoded))],
            Default::default(),
        )
        .unwrap();
        let d = &loaded.domains["d"];
        let rule = d.nodes["k_v"].rule.as_ref().unwrap();
        assert_eq!(rule.requests_per_unit, 5);
        assert_eq!(rule.unit, Some(crate::rls::config::Unit::Minute));
        assert!(d.nodes["free"].rule.as_ref().unwrap().unlimited);
        let child = d.nodes["parent"].children.nodes["child"]
            .rule
            .as_ref()
            .unwrap();
        assert_eq!(child.unit, Some(crate::rls::config::Unit::Week));
    }

    #[test]
    fn resources_of_one_domain_merge_only_with_merge_domains() {
        let doc = |name: &str, key: &str| {
            let c = RateLimitConfig {
                name: name.into(),
                domain: "d".into(),
                descriptors: vec![limited(key, "", 1, 1)],
            };
            (name.to_string(), to_document(&c))
        };
        let docs = [doc("a", "x"), doc("b", "y")];
        let err =
            crate::rls::config::RlsConfig::from_documents(&docs, Default::default()).unwrap_err();
        assert!(err.starts_with("b: duplicate domain 'd'"), "{err}");
        let merge = crate::rls::config::LoadOptions {
            merge_domains: true,
            ..Default::default()
        };
        let loaded = crate::rls::config::RlsConfig::from_documents(&docs, merge).unwrap();
        let d = &loaded.domains["d"];
        assert!(d.nodes.contains_key("x") && d.nodes.contains_key("y"));
    }

    #[test]
    fn a_limit_without_a_unit_is_refused_like_a_file() {
        let config = RateLimitConfig {
            name: "bad".into(),
            domain: "d".into(),
            descriptors: vec![limited("k", "", 0, 5)],
        };
        let err = crate::rls::config::RlsConfig::from_documents(
            &[("bad".to_string(), to_document(&config))],
            Default::default(),
        )
        .unwrap_err();
        assert_eq!(err, "bad: 'd.k': invalid rate limit unit 'UNKNOWN'");
    }
}
