//! The middleware's configuration: the policy engine's schema (`redis_rl_policy::Config`,
//! here [`RateLimitConfig`]), read from files, and what the client builds from it (failure
//! modes, fleet membership, the limiter's policies).

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

pub use redis_rl_policy::{
    AccessConfig, Config as RateLimitConfig, Dimension, FailureModeName, FleetSettings,
    LeaseSettings, LimitSpec, Rate, RateOverride, Rule, TierLimits, Window,
};

use redis_rl_client::error::{Error, Result};
use redis_rl_client::fleet::FleetConfig;
use redis_rl_client::policy::{FailureMode, Policy};
use redis_rl_core::AnyParams;

/// What the client adds to [`RateLimitConfig`]: reading it from a file, and the failure
/// mode and fleet membership it configures.
pub trait RateLimitConfigExt: Sized {
    /// Reads and validates a TOML file; errors name the file, the line and the field.
    fn load(path: &Path) -> Result<Self>;
    /// The failure mode of every limit without its own, with the static `instances` (1
    /// when not set: the limiter then divides by the live fleet size once known).
    fn failure_mode(&self) -> FailureMode;
    /// The fleet membership settings (`None` when membership is off). The fleet key is
    /// `<key_prefix>:{fleet}`: gateways with the same prefix form one fleet.
    fn fleet_config(&self) -> Option<FleetConfig>;
    /// Whether the local fallback should divide by the live fleet size: membership on and
    /// no static `instances`.
    fn fleet_fallback(&self) -> bool;
    /// Everything the engine checks, and the fleet settings.
    fn check(&self) -> Result<()>;
}

impl RateLimitConfigExt for RateLimitConfig {
    fn load(path: &Path) -> Result<Self> {
        let text = crate::toml_file::read(path)?;
        let config = RateLimitConfig::from_toml_named(&text, &path.display().to_string())
            .map_err(|e| Error::Config(e.to_string()))?;
        config.check()?;
        Ok(config)
    }

    fn failure_mode(&self) -> FailureMode {
        mode(self.failure_mode, self.instances.unwrap_or(NonZeroU32::MIN))
    }

    fn fleet_config(&self) -> Option<FleetConfig> {
        self.fleet.membership.then(|| FleetConfig {
            heartbeat: Duration::from_millis(self.fleet.heartbeat_ms),
            ttl: Duration::from_millis(self.fleet.ttl_ms),
            ..FleetConfig::new(format!("{}:{{fleet}}", self.key_prefix))
        })
    }

    fn fleet_fallback(&self) -> bool {
        self.fleet.membership && self.instances.is_none()
    }

    fn check(&self) -> Result<()> {
        self.validate()
            .map_err(|e| Error::Config(format!("{}: {}", e.field, e.message)))?;
        if let Some(fleet) = self.fleet_config() {
            fleet.validate()?;
        }
        Ok(())
    }
}

/// The client's failure mode for a configured name.
pub fn mode(name: FailureModeName, instances: NonZeroU32) -> FailureMode {
    FailureMode::named(name, instances)
}

/// The core's parameters of a window the engine validated (the engine builds them with the
/// core, so this cannot fail; the `Result` is kept for callers written against it).
pub fn params_of(spec: &LimitSpec) -> Result<AnyParams> {
    Ok(spec.params())
}

/// The limiter's policy of one plan item: its window, failure mode (its own, else
/// `default_mode`'s), shadow and hot flags.
pub fn policy_of(item: &redis_rl_policy::PlanItem, default_mode: FailureMode) -> Result<Policy> {
    let instances = match default_mode {
        FailureMode::Local { instances } => instances,
        _ => NonZeroU32::MIN,
    };
    let on_failure = item
        .failure_mode
        .map_or(default_mode, |m| mode(m, instances));
    Ok(Policy::new(params_of(&item.spec)?)
        .on_failure(on_failure)
        .shadow(item.shadow)
        .hot(item.hot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_is_on_by_default_and_instances_overrides_its_size() {
        let c = RateLimitConfig::default();
        assert_eq!(c.hot, [Dimension::Global]);
        let fleet = c.fleet_config().unwrap();
        assert_eq!(fleet.key, "rl:{fleet}");
        assert_eq!(fleet.heartbeat, Duration::from_secs(1));
        assert!(c.fleet_fallback());
        let c = RateLimitConfig::from_toml(
            "key_prefix = \"x\"\ninstances = 4\nhot = []\n[fleet]\nheartbeat_ms = 200\nttl_ms = 900\n",
        )
        .unwrap();
        assert!(c.hot.is_empty());
        assert!(!c.fleet_fallback(), "a static instances count overrides");
        assert_eq!(c.fleet_config().unwrap().key, "x:{fleet}");
        assert_eq!(
            c.failure_mode(),
            FailureMode::Local {
                instances: NonZeroU32::new(4).unwrap()
            }
        );
        let off = RateLimitConfig::from_toml("[fleet]\nmembership = false\n").unwrap();
        assert!(off.fleet_config().is_none() && !off.fleet_fallback());
        // Refused where the file is read, not first at start.
        let bad = RateLimitConfig::from_toml("[fleet]\nheartbeat_ms = 3000").unwrap_err();
        assert!(bad.to_string().contains("shorter than ttl"), "{bad}");
    }

    #[test]
    fn a_file_error_names_the_file_line_and_field() {
        let dir = std::env::temp_dir().join(format!("rl-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(
            &path,
            "[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimits = [\"5/fortnight\"]\n",
        )
        .unwrap();
        let err = RateLimitConfig::load(&path).unwrap_err().to_string();
        let expected = format!(
            "config: {}:4: rules[0].limits: \"5/fortnight\"",
            path.display()
        );
        assert!(err.starts_with(&expected), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_window_becomes_a_policy() {
        for &kind in redis_rl_client::Kind::LIMITERS {
            if kind
                .rate_fields()
                .contains(&redis_rl_core::RateField::Period)
            {
                continue; // a calendar quota, below
            }
            let spec = LimitSpec::new(kind, 10, 1_000, None).unwrap();
            let p = Policy::new(params_of(&spec).unwrap());
            assert_eq!(p.limit(), spec.quota(), "{kind:?}");
            assert_eq!(
                u64::try_from(p.window().as_millis()).unwrap(),
                spec.quota_window_ms()
            );
            assert_eq!(p.kind(), spec.registry_numbers().0);
        }
        // A calendar limit: the same numbers as the engine's.
        let cal = redis_rl_core::calendar::Calendar::new(redis_rl_client::Period::Month, -300, 31)
            .unwrap();
        let spec = LimitSpec::calendar_quota(1_000, cal).unwrap();
        let a = Policy::new(params_of(&spec).unwrap());
        assert_eq!(a.params().numbers().values(), [1_000, 3]);
        assert_eq!(a.args(), ["1000", "MONTH", "TZ", "-300", "ANCHOR", "31"]);
        assert_eq!(
            u64::try_from(a.window().as_millis()).unwrap(),
            spec.quota_window_ms()
        );
    }
}
