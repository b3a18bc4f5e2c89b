//! What one request is limited on: the validated policies of every dimension, and the
//! keys of a request (its plan).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::config::{Dimension, RateLimitConfig};
use crate::error::Result;
use crate::limiter::Limiter;
use crate::policy::Policy;
use crate::tier::TierResolver;

/// One dimension of one request.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    pub(crate) dimension: Dimension,
    pub(crate) key: String,
    pub(crate) policy: Policy,
}

/// What every service of a layer shares: the limiter, the configuration and its policies.
pub(crate) struct Shared {
    pub(crate) limiter: Limiter,
    pub(crate) config: RateLimitConfig,
    pub(crate) resolver: Arc<dyn TierResolver>,
    tier_policies: HashMap<String, Policy>,
    default_policy: Policy,
    ip: Policy,
    endpoint: Policy,
    global: Policy,
}

impl Shared {
    /// Validates `config` and builds every dimension's policy.
    pub(crate) fn new(
        limiter: Limiter,
        config: RateLimitConfig,
        resolver: Arc<dyn TierResolver>,
    ) -> Result<Self> {
        config.validate()?;
        let mode = config.failure_mode.with_instances(config.instances);
        let tiers = config.tier_config();
        let mut tier_policies = HashMap::new();
        for (name, rate) in &tiers.tiers {
            tier_policies.insert(name.clone(), rate.policy(mode)?);
        }
        let default_policy = tiers.rate(None).1.policy(mode)?;
        Ok(Shared {
            ip: config.ip.policy(mode)?,
            endpoint: config.endpoint.policy(mode)?,
            global: config.global.policy(mode)?,
            limiter,
            config,
            resolver,
            tier_policies,
            default_policy,
        })
    }

    /// The keys and policies of one request, in the configured order.
    pub(crate) fn plan(
        &self,
        tenant: Option<&str>,
        tier: Option<&str>,
        ip: Option<IpAddr>,
        endpoint: &str,
    ) -> Vec<Planned> {
        let prefix = &self.config.key_prefix;
        let ip = ip.map_or_else(|| "unknown".to_string(), |ip| ip.to_string());
        let mut out = Vec::with_capacity(self.config.dimensions.len());
        for &dimension in &self.config.dimensions {
            let planned = match (dimension, tenant) {
                (Dimension::ApiKey, None) => continue,
                (Dimension::ApiKey, Some(t)) => (
                    format!("{prefix}:{{k:{t}}}:key"),
                    tier.and_then(|name| self.tier_policies.get(name))
                        .copied()
                        .unwrap_or(self.default_policy),
                ),
                (Dimension::Ip, _) => (format!("{prefix}:{{ip:{ip}}}"), self.ip),
                (Dimension::Endpoint, Some(t)) => {
                    (format!("{prefix}:{{k:{t}}}:ep:{endpoint}"), self.endpoint)
                }
                (Dimension::Endpoint, None) => {
                    (format!("{prefix}:{{ip:{ip}}}:ep:{endpoint}"), self.endpoint)
                }
                (Dimension::Global, _) => (format!("{prefix}:{{global}}"), self.global),
            };
            out.push(Planned {
                dimension,
                key: planned.0,
                policy: planned.1,
            });
        }
        out
    }
}
