//! `Policy`: a rate limiter of the core's registry with its parameters, validated by the
//! core (the server's ranges and error texts), plus its failure mode and shadow flag.

use std::num::NonZeroU32;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use redis_rl_client::{FailureMode, Policy as ClientPolicy};
use redis_rl_core::{AnyParams, ConfigRate, Kind};

/// A number from JavaScript as the core takes it. A value that is not a whole number in
/// `0..2^64` is outside every documented range, so it is passed on as `u64::MAX` and the
/// core names the parameter in its own words; a fraction is refused here.
pub(crate) fn whole(name: &str, value: f64) -> Result<u64> {
    if value.fract() != 0.0 || value.is_nan() {
        return Err(Error::new(
            Status::InvalidArg,
            format!("{name} must be a whole number, not {value}"),
        ));
    }
    if !(0.0..18_446_744_073_709_551_616.0).contains(&value) {
        return Ok(u64::MAX);
    }
    // In range and whole: exact for every value the ranges accept (at most 10^15 < 2^53).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(value as u64)
}

fn limiter(name: &str) -> Result<Kind> {
    Kind::from_config_name(name)
        .filter(|k| k.is_limiter())
        .ok_or_else(|| {
            Error::new(
                Status::InvalidArg,
                format!(
                    "algorithm must be one of {}, not {name:?}",
                    Kind::CONFIG_NAMES.join(", ")
                ),
            )
        })
}

fn invalid(e: impl std::fmt::Display) -> Error {
    Error::new(Status::InvalidArg, e.to_string())
}

/// A validated policy.
#[napi]
#[derive(Clone, Copy)]
pub struct Policy {
    pub(crate) inner: ClientPolicy,
}

#[napi]
impl Policy {
    /// The policy of the rate limiter `algorithm` (its config name: `sliding`) from its
    /// positional numbers in the command's order and its options in the registry's order
    /// (`null`: not given).
    #[napi(factory)]
    pub fn of(
        algorithm: String,
        values: Vec<f64>,
        options: Option<Vec<Option<f64>>>,
    ) -> Result<Self> {
        let kind = limiter(&algorithm)?;
        let names = kind.params().iter().map(|r| r.name);
        if values.len() != kind.params().len() {
            let expected: Vec<&str> = names.collect();
            return Err(invalid(format!(
                "{algorithm} takes {} numbers ({}), not {}",
                expected.len(),
                expected.join(", "),
                values.len()
            )));
        }
        let values = values
            .iter()
            .zip(names)
            .map(|(v, name)| whole(name, *v))
            .collect::<Result<Vec<u64>>>()?;
        let options = options.unwrap_or_default();
        if options.len() > kind.options().len() {
            return Err(invalid(format!(
                "{algorithm} takes {} options, not {}",
                kind.options().len(),
                options.len()
            )));
        }
        let options = options
            .iter()
            .zip(kind.options().iter().map(|o| o.range.name))
            .map(|(v, name)| v.map(|v| whole(name, v)).transpose())
            .collect::<Result<Vec<Option<u64>>>>()?;
        let inner = ClientPolicy::of(kind, &values, &options).map_err(invalid)?;
        Ok(Self { inner })
    }

    /// The policy of the rate limiter `algorithm` for a configured rate: `limit` units per
    /// `windowMs`, `burst` at once (the registry says which parameters they feed).
    #[napi(factory)]
    pub fn from_rate(
        algorithm: String,
        limit: f64,
        window_ms: f64,
        burst: Option<f64>,
    ) -> Result<Self> {
        let rate = ConfigRate {
            limit: whole("limit", limit)?,
            window_ms: whole("window_ms", window_ms)?,
            burst: burst.map(|b| whole("burst", b)).transpose()?,
        };
        let params = AnyParams::from_rate(limiter(&algorithm)?, &rate)
            .ok_or_else(|| invalid(format!("{algorithm} is not a rate limiter")))?
            .map_err(invalid)?;
        Ok(Self {
            inner: ClientPolicy::new(params),
        })
    }

    /// The same policy with another failure mode: `open`, `closed` or `local` (the limit
    /// divided by `instances` while Redis is down).
    #[napi]
    pub fn on_failure(&self, mode: String, instances: Option<u32>) -> Result<Policy> {
        let mode = match mode.as_str() {
            "open" => FailureMode::Open,
            "closed" => FailureMode::Closed,
            "local" => FailureMode::Local {
                instances: NonZeroU32::new(instances.unwrap_or(1)).ok_or_else(|| {
                    invalid("instances must be an integer between 1 and 4294967295")
                })?,
            },
            other => {
                return Err(invalid(format!(
                    "failure mode must be open, closed or local, not {other:?}"
                )))
            }
        };
        Ok(Self {
            inner: self.inner.on_failure(mode),
        })
    }

    /// The same policy in (or out of) shadow mode: decided and reported, never denying.
    #[napi]
    pub fn with_shadow(&self, shadow: bool) -> Policy {
        Self {
            inner: self.inner.shadow(shadow),
        }
    }

    /// The same policy served (or not) from leases in a `checkAll` of a limiter with
    /// `leases` (a hot key).
    #[napi]
    pub fn with_hot(&self, hot: bool) -> Policy {
        Self {
            inner: self.inner.hot(hot),
        }
    }

    /// The config name of the algorithm (`sliding`).
    #[napi(getter)]
    pub fn algorithm(&self) -> String {
        self.inner.kind().config_name().to_string()
    }

    /// The single-key command (`RL.SLIDING`).
    #[napi(getter)]
    pub fn command(&self) -> String {
        self.inner.kind().command().to_string()
    }

    /// The parameters as the server reads them after the key or spec word.
    #[napi(getter)]
    pub fn args(&self) -> Vec<String> {
        self.inner.args()
    }

    /// The quota a client is shown (`q` of `RateLimit-Policy`, `X-RateLimit-Limit`).
    #[napi(getter)]
    pub fn limit(&self) -> f64 {
        to_f64(self.inner.limit())
    }

    /// The window of that quota in milliseconds (`w` of `RateLimit-Policy`).
    #[napi(getter)]
    pub fn window_ms(&self) -> f64 {
        to_f64(self.inner.params().quota().1)
    }

    /// `open`, `closed` or `local`.
    #[napi(getter)]
    pub fn failure_mode(&self) -> String {
        self.inner.failure_mode().name().to_string()
    }

    /// True in shadow mode.
    #[napi(getter)]
    pub fn shadow(&self) -> bool {
        self.inner.is_shadow()
    }

    /// True when served from leases (`withHot`).
    #[napi(getter)]
    pub fn hot(&self) -> bool {
        self.inner.is_hot()
    }

    /// True when the algorithm takes `UPTO` (`takeUpto`).
    #[napi(getter)]
    pub fn upto(&self) -> bool {
        self.inner.kind().upto()
    }
}

/// A count or duration for JavaScript: every value the core produces is below 2^53
/// (ranges end at 10^15), where a double is exact.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn to_f64(v: u64) -> f64 {
    v as f64
}
