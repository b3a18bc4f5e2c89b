//! What one request is limited on: the validated policies of every dimension (per tier),
//! and the keys of a request (its plan).

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderName;

use super::access::AccessList;
use super::config::{Dimension, RateLimitConfig};
use crate::error::{Error, Result};
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

/// The policies of one tier: its API-key rate, and the dimensions it overrides.
#[derive(Clone, Debug)]
struct TierPolicies {
    api_key: Policy,
    ip: Option<Policy>,
    endpoint: Option<Policy>,
    global: Option<Policy>,
}

/// What every service of a layer shares: the limiter, the configuration and its policies.
pub(crate) struct Shared {
    pub(crate) limiter: Limiter,
    pub(crate) config: RateLimitConfig,
    pub(crate) resolver: Arc<dyn TierResolver>,
    pub(crate) api_key_header: HeaderName,
    pub(crate) access: AccessList,
    tiers: HashMap<String, TierPolicies>,
    default_tier: String,
    default_policy: Policy,
    ip: Policy,
    endpoint: Policy,
    global: Policy,
}

impl Shared {
    /// Validates `config` and builds every dimension's policy, per tier.
    pub(crate) fn new(
        limiter: Limiter,
        config: RateLimitConfig,
        resolver: Arc<dyn TierResolver>,
    ) -> Result<Self> {
        config.validate()?;
        let mode = config.failure_mode();
        let mut tiers = HashMap::new();
        for (name, limits) in &config.tiers {
            let over = |d: Dimension| {
                config
                    .tier_rate(name, d)
                    .filter(|_| limits.override_of(d).is_some())
                    .map(|r| r.policy(mode))
                    .transpose()
            };
            tiers.insert(
                name.clone(),
                TierPolicies {
                    api_key: limits.rate().policy(mode)?,
                    ip: over(Dimension::Ip)?,
                    endpoint: over(Dimension::Endpoint)?,
                    global: over(Dimension::Global)?,
                },
            );
        }
        let api_key_header = HeaderName::from_bytes(config.api_key_header.as_bytes())
            .map_err(|e| Error::Config(format!("api_key_header: {e}")))?;
        Ok(Shared {
            ip: config.ip.policy(mode)?,
            endpoint: config.endpoint.policy(mode)?,
            global: config.global.policy(mode)?,
            default_tier: config.default_tier.clone(),
            default_policy: config.tier_config().rate(None).1.policy(mode)?,
            access: AccessList::new(&config.access),
            api_key_header,
            limiter,
            config,
            resolver,
            tiers,
        })
    }

    /// The tier whose limits apply: `tier` when it is configured, else the default tier; none
    /// for key-less requests (the dimensions' own tables apply).
    fn effective_tier(
        &self,
        tenant: Option<&str>,
        tier: Option<&str>,
    ) -> Option<(&String, &TierPolicies)> {
        tenant.and({
            let known = tier.and_then(|t| self.tiers.get_key_value(t));
            known.or_else(|| self.tiers.get_key_value(&self.default_tier))
        })
    }

    /// The `tier` label of a response's metrics: the tier whose limits applied, `none` for a
    /// key-less request.
    pub(crate) fn tier_label(&self, tenant: Option<&str>, tier: Option<&str>) -> String {
        self.effective_tier(tenant, tier)
            .map_or_else(|| "none".to_owned(), |(name, _)| name.clone())
    }

    /// The keys and policies of one request, in the configured order. `tier` is the
    /// resolved tier of `tenant` (`None` or unknown: the default tier); `client` is the
    /// client's address or network as it appears in keys.
    pub(crate) fn plan(
        &self,
        tenant: Option<&str>,
        tier: Option<&str>,
        client: &str,
        endpoint: &str,
    ) -> Vec<Planned> {
        let prefix = &self.config.key_prefix;
        let tier = self.effective_tier(tenant, tier);
        let mut out = Vec::with_capacity(self.config.dimensions.len());
        for &dimension in &self.config.dimensions {
            // A tier's own budget for a shared dimension lives in a key of its own.
            let shared = |base: String, policy: Policy, over: Option<Policy>| match (tier, over) {
                (Some((name, _)), Some(p)) => (format!("{base}:tier:{name}"), p),
                _ => (base, policy),
            };
            let over = |f: fn(&TierPolicies) -> Option<Policy>| tier.and_then(|(_, t)| f(t));
            let (key, policy) = match (dimension, tenant) {
                (Dimension::ApiKey, None) => continue,
                (Dimension::ApiKey, Some(t)) => (
                    format!("{prefix}:{{k:{t}}}:key"),
                    tier.map_or(self.default_policy, |(_, p)| p.api_key),
                ),
                (Dimension::Ip, _) => {
                    shared(format!("{prefix}:{{ip:{client}}}"), self.ip, over(|t| t.ip))
                }
                (Dimension::Endpoint, Some(t)) => (
                    format!("{prefix}:{{k:{t}}}:ep:{endpoint}"),
                    over(|t| t.endpoint).unwrap_or(self.endpoint),
                ),
                (Dimension::Endpoint, None) => (
                    format!("{prefix}:{{ip:{client}}}:ep:{endpoint}"),
                    self.endpoint,
                ),
                (Dimension::Global, _) => shared(
                    format!("{prefix}:{{global}}"),
                    self.global,
                    over(|t| t.global),
                ),
            };
            let hot = self.config.hot.contains(&dimension);
            out.push(Planned {
                dimension,
                key,
                policy: policy.hot(hot),
            });
        }
        out
    }
}
