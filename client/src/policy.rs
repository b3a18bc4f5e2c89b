//! Typed policies: one variant per server command, validated when built.

use std::num::NonZeroU32;
use std::time::Duration;

use redis_rl_core::algorithm::{MAX_OPTIONS, MAX_PARAMS};
pub use redis_rl_core::calendar::Period;
use redis_rl_core::calendar::MAX_OFFSET_MIN;
use redis_rl_core::{AnyParams, Kind, ParamError};

/// The limiting algorithm and its parameters, mirroring the server commands.
///
/// Build it through [`Policy`]'s constructors, which check every number against the
/// ranges the server accepts, so a call never fails on a parameter the client could
/// have rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `RL.TOKENBUCKET key capacity refill_tokens refill_ms`.
    TokenBucket {
        /// Most tokens the bucket holds (the burst).
        capacity: u64,
        /// Tokens gained every `refill_ms`.
        refill_tokens: u64,
        /// The refill period in milliseconds.
        refill_ms: u64,
    },
    /// `RL.SLIDING key limit window_ms` (two weighted counters).
    Sliding {
        /// Most units per window.
        limit: u64,
        /// Window length in milliseconds.
        window_ms: u64,
    },
    /// `RL.FIXED key limit window_ms`.
    Fixed {
        /// Most units per window.
        limit: u64,
        /// Window length in milliseconds.
        window_ms: u64,
    },
    /// `RL.GCRA key limit period_ms [BURST b]`.
    Gcra {
        /// Units per period.
        limit: u64,
        /// The period in milliseconds.
        period_ms: u64,
        /// Units that may arrive at once (server default when `None`).
        burst: Option<u64>,
    },
    /// `RL.LOG key limit window_ms` (exact sliding log; `limit` at most 10000).
    Log {
        /// Most units per window.
        limit: u64,
        /// Window length in milliseconds.
        window_ms: u64,
    },
    /// `RL.QUOTA key limit period [TZ minutes] [ANCHOR day]`: a quota per calendar period.
    Quota {
        /// Most units per period.
        limit: u64,
        /// Day, week (from Monday), month (from `anchor`) or year.
        period: Period,
        /// The UTC offset of the calendar in minutes (-1439 to 1439).
        tz_minutes: i64,
        /// The day of the month a monthly period starts on (1-31; 1 for other periods).
        anchor: u64,
    },
}

/// A policy's numbers in the registry's order: the positional parameters, then the options
/// (`None`: not given). Slices of them go to the core's validation and to the commands.
#[derive(Clone, Copy, Debug)]
struct Numbers {
    kind: Kind,
    command: &'static str,
    values: [u64; MAX_PARAMS],
    options: [Option<u64>; MAX_OPTIONS],
}

impl Numbers {
    fn values(&self) -> &[u64] {
        self.values.get(..self.kind.params().len()).unwrap_or(&[])
    }

    fn options(&self) -> &[Option<u64>] {
        self.options.get(..self.kind.options().len()).unwrap_or(&[])
    }
}

/// What [`Algorithm::core_params`] answers if a variant named no registered rate limiter
/// (a test checks that every variant does).
const NOT_A_LIMITER: ParamError = ParamError {
    name: "algorithm",
    min: 0,
    max: 0,
    spelling: redis_rl_core::limits::Spelling::Integer,
};

impl Algorithm {
    /// The one mapping from the variants to the core's registry: the algorithm, the
    /// module's command, and the fields in the registry's parameter order. Everything
    /// else (spec words, arguments, ranges, the local fallback) is read from there.
    const fn numbers(&self) -> Numbers {
        let (kind, command, values, burst) = match *self {
            Algorithm::TokenBucket {
                capacity,
                refill_tokens,
                refill_ms,
            } => (
                Kind::TokenBucket,
                "RL.TOKENBUCKET",
                [capacity, refill_tokens, refill_ms, 0],
                None,
            ),
            Algorithm::Sliding { limit, window_ms } => (
                Kind::SlidingWindow,
                "RL.SLIDING",
                [limit, window_ms, 0, 0],
                None,
            ),
            Algorithm::Fixed { limit, window_ms } => (
                Kind::FixedWindow,
                "RL.FIXED",
                [limit, window_ms, 0, 0],
                None,
            ),
            Algorithm::Gcra {
                limit,
                period_ms,
                burst,
            } => (Kind::Gcra, "RL.GCRA", [limit, period_ms, 0, 0], burst),
            Algorithm::Log { limit, window_ms } => {
                (Kind::SlidingLog, "RL.LOG", [limit, window_ms, 0, 0], None)
            }
            Algorithm::Quota {
                limit,
                period,
                tz_minutes,
                anchor,
            } => {
                // TZ travels as `minutes + 1439` (the core's signed spelling); an offset
                // outside the range wraps to a number the core then refuses.
                let tz = tz_minutes.wrapping_add(MAX_OFFSET_MIN) as u64;
                return Numbers {
                    kind: Kind::Quota,
                    command: "RL.QUOTA",
                    values: [limit, period.code(), 0, 0],
                    options: [Some(tz), Some(anchor)],
                };
            }
        };
        Numbers {
            kind,
            command,
            values,
            options: [burst, None],
        }
    }

    /// The algorithm in the core's registry.
    pub const fn kind(&self) -> Kind {
        self.numbers().kind
    }

    /// The single-key server command.
    pub const fn command(&self) -> &'static str {
        self.numbers().command
    }

    /// The spec word used by `RL.ALL` and `RL.REFUND`.
    pub const fn spec_name(&self) -> &'static str {
        self.kind().spec_name()
    }

    /// The core's validated parameters: the ranges the server checks, from the core's
    /// registry (the error names the first number outside its range).
    pub fn core_params(&self) -> Result<AnyParams, ParamError> {
        let n = self.numbers();
        AnyParams::new(n.kind.spec_name().as_bytes(), n.values(), n.options())
            .unwrap_or(Err(NOT_A_LIMITER))
    }

    /// The numeric parameters as the server reads them after the key (or spec word):
    /// the positional ones, then each option given (`BURST b`).
    pub fn params(&self) -> Vec<String> {
        // The core's canonical numbers (defaults left out), each written as the server
        // reads it (a period as its word, an offset signed).
        let n = match self.core_params() {
            Ok(p) => p.numbers(),
            Err(_) => {
                let n = self.numbers();
                redis_rl_core::Numbers::new(n.values(), n.options())
            }
        };
        let kind = self.kind();
        let mut args: Vec<String> = kind
            .params()
            .iter()
            .zip(n.values())
            .map(|(range, v)| range.show(*v))
            .collect();
        for (opt, value) in kind.options().iter().zip(n.options()) {
            if let Some(value) = value {
                args.push(opt.token.to_string());
                args.push(opt.range.show(*value));
            }
        }
        args
    }

    /// The quota a client sees (`q` of `RateLimit-Policy`, `X-RateLimit-Limit`).
    pub const fn limit(&self) -> u64 {
        match *self {
            Algorithm::TokenBucket { capacity, .. } => capacity,
            Algorithm::Sliding { limit, .. }
            | Algorithm::Fixed { limit, .. }
            | Algorithm::Log { limit, .. }
            | Algorithm::Quota { limit, .. } => limit,
            // A bucket of `burst` units (default `limit`) refilled at `limit` per period.
            Algorithm::Gcra { limit, burst, .. } => match burst {
                Some(b) => b,
                None => limit,
            },
        }
    }

    /// The window over which `limit` applies (`w` of `RateLimit-Policy`). For a token
    /// bucket (and GCRA, a bucket of `burst` units) this is the time to refill from empty
    /// to full.
    pub fn window(&self) -> Duration {
        let ms = match *self {
            Algorithm::TokenBucket {
                capacity,
                refill_tokens,
                refill_ms,
            } => {
                let ms = u128::from(capacity) * u128::from(refill_ms) / u128::from(refill_tokens);
                u64::try_from(ms).unwrap_or(u64::MAX)
            }
            Algorithm::Sliding { window_ms, .. }
            | Algorithm::Fixed { window_ms, .. }
            | Algorithm::Log { window_ms, .. } => window_ms,
            // A calendar period has no fixed length: its usual one (months of 30 days,
            // years of 365); the reply's reset_after_ms is the exact time left.
            Algorithm::Quota { period, .. } => match period {
                Period::Day => 86_400_000,
                Period::Week => 7 * 86_400_000,
                Period::Month => 30 * 86_400_000,
                Period::Year => 365 * 86_400_000,
            },
            Algorithm::Gcra {
                limit,
                period_ms,
                burst,
            } => {
                let ms = u128::from(burst.unwrap_or(limit)) * u128::from(period_ms)
                    / u128::from(limit.max(1));
                u64::try_from(ms).unwrap_or(u64::MAX)
            }
        };
        Duration::from_millis(ms)
    }

    fn validate(self) -> Result<Self, ParamError> {
        self.core_params()?;
        Ok(self)
    }
}

/// What to do when Redis cannot answer (error, timeout, or the breaker is open).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureMode {
    /// Allow the request (and count it): availability first, accepting over-admission for
    /// the length of the outage.
    Open,
    /// Deny the request: protection first, accepting that an outage of the limiter is an
    /// outage of the API.
    Closed,
    /// Decide with an in-process limiter running the same core algorithm, its limit divided
    /// by the expected number of gateway instances. Approximate: each instance sees only its
    /// own traffic, and an uneven spread over instances admits more or less than the limit.
    Local {
        /// How many gateway instances share the limit (the local limit is `limit / instances`,
        /// at least 1).
        instances: NonZeroU32,
    },
}

impl FailureMode {
    /// [`FailureMode::Local`] for a single instance (the whole limit held locally).
    pub const LOCAL: FailureMode = FailureMode::Local {
        instances: NonZeroU32::MIN,
    };

    /// A short name for logs and metrics: `open`, `closed`, `local`.
    pub const fn name(&self) -> &'static str {
        match self {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
            FailureMode::Local { .. } => "local",
        }
    }
}

impl Default for FailureMode {
    /// Local, one instance: the whole limit is enforced by each gateway while Redis is down.
    fn default() -> Self {
        FailureMode::LOCAL
    }
}

/// A validated algorithm plus what to do when Redis fails and whether to enforce.
///
/// ```
/// use redis_rl_client::{FailureMode, Policy};
/// let free = Policy::token_bucket(100, 100, 60_000).unwrap();
/// assert_eq!(free.algorithm().limit(), 100);
/// let strict = Policy::sliding(10, 1_000).unwrap().on_failure(FailureMode::Closed);
/// assert_eq!(strict.failure_mode(), FailureMode::Closed);
/// assert!(Policy::sliding(0, 1_000).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    algorithm: Algorithm,
    on_failure: FailureMode,
    shadow: bool,
    hot: bool,
}

impl Policy {
    /// Checks `algorithm`'s parameters; failure mode local, enforcing.
    pub fn new(algorithm: Algorithm) -> Result<Self, ParamError> {
        Ok(Self {
            algorithm: algorithm.validate()?,
            on_failure: FailureMode::default(),
            shadow: false,
            hot: false,
        })
    }

    /// A token bucket: `capacity` tokens, `refill_tokens` added every `refill_ms`.
    pub fn token_bucket(
        capacity: u64,
        refill_tokens: u64,
        refill_ms: u64,
    ) -> Result<Self, ParamError> {
        Self::new(Algorithm::TokenBucket {
            capacity,
            refill_tokens,
            refill_ms,
        })
    }

    /// A sliding window (weighted counters): `limit` units per `window_ms`.
    pub fn sliding(limit: u64, window_ms: u64) -> Result<Self, ParamError> {
        Self::new(Algorithm::Sliding { limit, window_ms })
    }

    /// A fixed window: `limit` units per `window_ms`, reset at window boundaries.
    pub fn fixed(limit: u64, window_ms: u64) -> Result<Self, ParamError> {
        Self::new(Algorithm::Fixed { limit, window_ms })
    }

    /// GCRA: `limit` units per `period_ms`, optionally with a burst.
    pub fn gcra(limit: u64, period_ms: u64, burst: Option<u64>) -> Result<Self, ParamError> {
        Self::new(Algorithm::Gcra {
            limit,
            period_ms,
            burst,
        })
    }

    /// An exact sliding log: `limit` (at most 10000) units per `window_ms`.
    pub fn log(limit: u64, window_ms: u64) -> Result<Self, ParamError> {
        Self::new(Algorithm::Log { limit, window_ms })
    }

    /// A calendar quota: `limit` units per `period` at UTC + `tz_minutes`, a monthly
    /// period starting on day `anchor` (the month's last day when it is shorter).
    ///
    /// ```
    /// use redis_rl_client::{Period, Policy};
    /// let plan = Policy::quota(10_000, Period::Month, 330, 15).unwrap();
    /// assert_eq!(plan.algorithm().params(), ["10000", "MONTH", "TZ", "330", "ANCHOR", "15"]);
    /// assert!(Policy::quota(10, Period::Week, 0, 15).is_err());
    /// assert!(Policy::quota(10, Period::Day, -1_440, 1).is_err());
    /// ```
    pub fn quota(
        limit: u64,
        period: Period,
        tz_minutes: i64,
        anchor: u64,
    ) -> Result<Self, ParamError> {
        Self::new(Algorithm::Quota {
            limit,
            period,
            tz_minutes,
            anchor,
        })
    }

    /// Sets what happens when Redis cannot answer.
    pub const fn on_failure(mut self, mode: FailureMode) -> Self {
        self.on_failure = mode;
        self
    }

    /// Shadow mode: decide and record, but report every call as allowed. For launching a
    /// new limit safely: watch the `shadow_denied` counts before enforcing it.
    pub const fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// A hot key: served from leases, batches of units taken with `UPTO` and spent in
    /// process (see [`crate::lease`]), so most requests cost Redis nothing. For limits
    /// many requests share (a global limit). Ignored for a log, which takes no `UPTO`.
    pub const fn hot(mut self, hot: bool) -> Self {
        self.hot = hot;
        self
    }

    /// True for a hot key.
    pub const fn is_hot(&self) -> bool {
        self.hot
    }

    /// The algorithm and its parameters.
    pub const fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    /// What happens when Redis cannot answer.
    pub const fn failure_mode(&self) -> FailureMode {
        self.on_failure
    }

    /// True in shadow mode.
    pub const fn is_shadow(&self) -> bool {
        self.shadow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_the_server_arguments_in_order() {
        let cases: &[(Algorithm, &str, &[&str])] = &[
            (
                Algorithm::TokenBucket {
                    capacity: 10,
                    refill_tokens: 1,
                    refill_ms: 100,
                },
                "RL.TOKENBUCKET",
                &["10", "1", "100"],
            ),
            (
                Algorithm::Sliding {
                    limit: 5,
                    window_ms: 60_000,
                },
                "RL.SLIDING",
                &["5", "60000"],
            ),
            (
                Algorithm::Fixed {
                    limit: 5,
                    window_ms: 1_000,
                },
                "RL.FIXED",
                &["5", "1000"],
            ),
            (
                Algorithm::Gcra {
                    limit: 5,
                    period_ms: 1_000,
                    burst: Some(2),
                },
                "RL.GCRA",
                &["5", "1000", "BURST", "2"],
            ),
            (
                Algorithm::Gcra {
                    limit: 5,
                    period_ms: 1_000,
                    burst: None,
                },
                "RL.GCRA",
                &["5", "1000"],
            ),
            (
                Algorithm::Log {
                    limit: 7,
                    window_ms: 10,
                },
                "RL.LOG",
                &["7", "10"],
            ),
        ];
        for (alg, command, params) in cases {
            assert!(
                alg.core_params().is_ok(),
                "{alg:?} is a registered rate limiter"
            );
            assert_eq!(alg.core_params().unwrap().kind(), alg.kind());
            assert_eq!(alg.command(), *command);
            assert_eq!(alg.params(), params.to_vec());
            assert_eq!(format!("RL.{}", alg.spec_name()), *command);
        }
    }

    #[test]
    fn every_registered_rate_limiter_has_a_policy() {
        let policies = [
            Policy::token_bucket(1, 1, 1),
            Policy::sliding(1, 1),
            Policy::fixed(1, 1),
            Policy::gcra(1, 1, None),
            Policy::log(1, 1),
            Policy::quota(1, Period::Day, 0, 1),
        ];
        let kinds: Vec<Kind> = policies
            .iter()
            .map(|p| p.unwrap().algorithm().kind())
            .collect();
        assert_eq!(kinds, Kind::LIMITERS);
    }

    #[test]
    fn invalid_parameters_name_the_argument() {
        let err = Policy::token_bucket(10, 0, 100).unwrap_err();
        assert_eq!(err.name, "refill_tokens");
        assert_eq!(Policy::log(10_001, 10).unwrap_err().name, "limit");
        assert_eq!(Policy::gcra(1, 1, Some(0)).unwrap_err().name, "burst");
        assert_eq!(Policy::fixed(1, 0).unwrap_err().name, "window_ms");
    }

    #[test]
    fn window_of_a_token_bucket_is_the_time_to_fill() {
        let tiers = Policy::token_bucket(100, 100, 60_000).unwrap();
        assert_eq!(tiers.algorithm().window(), Duration::from_secs(60));
        let slow = Policy::token_bucket(10, 1, 1_000).unwrap();
        assert_eq!(slow.algorithm().window(), Duration::from_secs(10));
        let gcra = Policy::gcra(10, 1_000, Some(30)).unwrap();
        assert_eq!(gcra.algorithm().limit(), 30);
        assert_eq!(gcra.algorithm().window(), Duration::from_secs(3));
        let small = Policy::gcra(10, 1_000, Some(2)).unwrap();
        assert_eq!(small.algorithm().limit(), 2);
        assert_eq!(small.algorithm().window(), Duration::from_millis(200));
    }
}
