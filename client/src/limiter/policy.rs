//! Policies: a rate limiter's validated parameters (the core's [`AnyParams`]), what to do
//! when Redis fails, and whether to enforce.
//!
//! The typed constructors ([`Policy::token_bucket`], [`Policy::sliding`], ...) are generated
//! from the core's registry, so every registered rate limiter has one, with the parameter
//! names and ranges the server uses; the command, spec word, arguments, quota and local
//! share are read from the registry too. Nothing here names an algorithm.

use std::num::NonZeroU32;
use std::time::Duration;

pub use redis_rl_core::calendar::Period;
use redis_rl_core::calendar::MAX_OFFSET_MIN;
use redis_rl_core::{AnyParams, Kind, ParamError};

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

    /// The failure mode a configuration names, with `instances` for the local one.
    pub const fn named(name: redis_rl_policy::FailureModeName, instances: NonZeroU32) -> Self {
        use redis_rl_policy::FailureModeName;
        match name {
            FailureModeName::Open => FailureMode::Open,
            FailureModeName::Closed => FailureMode::Closed,
            FailureModeName::Local => FailureMode::Local { instances },
        }
    }

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

/// A validated rate limiter plus what to do when Redis fails and whether to enforce.
///
/// ```
/// use redis_rl_client::{FailureMode, Policy};
/// let free = Policy::token_bucket(100, 100, 60_000).unwrap();
/// assert_eq!(free.limit(), 100);
/// let strict = Policy::sliding(10, 1_000).unwrap().on_failure(FailureMode::Closed);
/// assert_eq!(strict.failure_mode(), FailureMode::Closed);
/// assert!(Policy::sliding(0, 1_000).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    params: AnyParams,
    on_failure: FailureMode,
    shadow: bool,
    hot: bool,
}

/// What [`Policy::of`] answers for an algorithm that is not a rate limiter.
const NOT_A_LIMITER: ParamError = ParamError {
    name: "algorithm",
    min: 0,
    max: 0,
    spelling: redis_rl_core::limits::Spelling::Integer,
};

/// Generates one constructor per registered rate limiter, named and with the parameters of
/// its registry line.
macro_rules! constructors {
    (
        limiters: [$($l:ident = $lt:ty [$lc:ident($($lp:ident),* $(; $($lo:ident),*)?)]),* $(,)?],
        others: [$($o:ident = $ot:ty [$($ox:tt)*]),* $(,)?] $(,)?
    ) => {
        impl Policy {
            $(
                #[doc = concat!(
                    "A [`", stringify!($l), "`](Kind::", stringify!($l), ") policy (`",
                    stringify!($($lp),*), $($(", ", stringify!($lo), "?",)*)?
                    "`; `None`: the server's default): each number checked against the ",
                    "server's range, failure mode local, enforcing."
                )]
                pub fn $lc($($lp: u64,)* $($($lo: Option<u64>,)*)?) -> Result<Self, ParamError> {
                    Self::of(Kind::$l, &[$($lp),*], &[$($($lo),*)?])
                }
            )*
        }
    };
}

redis_rl_core::registry_full!(constructors);

impl Policy {
    /// A policy of `params`: failure mode local, enforcing.
    pub const fn new(params: AnyParams) -> Self {
        Self {
            params,
            on_failure: FailureMode::LOCAL,
            shadow: false,
            hot: false,
        }
    }

    /// A policy of the rate limiter `kind` from its numbers in the registry's order (the
    /// positional parameters, then the options; `None`: not given). The error names the
    /// first number outside its range.
    pub fn of(kind: Kind, values: &[u64], options: &[Option<u64>]) -> Result<Self, ParamError> {
        let params =
            AnyParams::from_numbers(kind, values, options).unwrap_or(Err(NOT_A_LIMITER))?;
        Ok(Self::new(params))
    }

    /// A calendar quota with its period and UTC offset typed: `limit` units per `period`
    /// starting at local midnight of `tz_minutes` east of UTC (-1439 to 1439), a month on
    /// day `anchor` (1-31; 1 for the other periods). The generated [`Policy::quota`] takes
    /// the same as the registry's numbers (the period's code, the offset plus 1439).
    ///
    /// ```
    /// use redis_rl_client::{Period, Policy};
    /// let plan = Policy::calendar_quota(10_000, Period::Month, 330, 15).unwrap();
    /// assert_eq!(plan.args(), ["10000", "MONTH", "TZ", "330", "ANCHOR", "15"]);
    /// assert!(Policy::calendar_quota(10, Period::Week, 0, 15).is_err());
    /// assert!(Policy::calendar_quota(10, Period::Day, -1_440, 1).is_err());
    /// ```
    pub fn calendar_quota(
        limit: u64,
        period: Period,
        tz_minutes: i64,
        anchor: u64,
    ) -> Result<Self, ParamError> {
        // An offset outside the range becomes a number the core refuses with its text.
        let tz = u64::try_from(tz_minutes.saturating_add(MAX_OFFSET_MIN)).unwrap_or(u64::MAX);
        Self::of(
            Kind::Quota,
            &[limit, period.code()],
            &[Some(tz), Some(anchor)],
        )
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
    /// process (see [`crate::layers::lease`]), so most requests cost Redis nothing. For limits
    /// many requests share (a global limit). Ignored for an algorithm that takes no `UPTO`
    /// (the log).
    pub const fn hot(mut self, hot: bool) -> Self {
        self.hot = hot;
        self
    }

    /// True for a hot key.
    pub const fn is_hot(&self) -> bool {
        self.hot
    }

    /// The algorithm.
    pub const fn kind(&self) -> Kind {
        self.params.kind()
    }

    /// The algorithm's validated parameters.
    pub const fn params(&self) -> &AnyParams {
        &self.params
    }

    /// The numeric parameters as the server reads them after the key (or spec word): the
    /// positional ones, then each option given (`BURST b`).
    pub fn args(&self) -> Vec<String> {
        crate::transport::command::args(&self.params)
    }

    /// The quota a client sees (`q` of `RateLimit-Policy`, `X-RateLimit-Limit`): the units
    /// that may pass at once (a token bucket's capacity, a GCRA's burst).
    pub fn limit(&self) -> u64 {
        self.params.quota().0
    }

    /// The window over which [`Self::limit`] applies (`w` of `RateLimit-Policy`). For a
    /// token bucket (and GCRA, a bucket of `burst` units) this is the time to refill from
    /// empty to full.
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.params.quota().1)
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
    fn every_registered_rate_limiter_has_a_constructor() {
        let policies = [
            Policy::token_bucket(1, 1, 1),
            Policy::sliding(1, 1),
            Policy::fixed(1, 1),
            Policy::gcra(1, 1, None),
            Policy::log(1, 1),
            Policy::quota(1, 1, None, None),
        ];
        let kinds: Vec<Kind> = policies.iter().map(|p| p.unwrap().kind()).collect();
        assert_eq!(kinds, Kind::LIMITERS);
        assert_eq!(
            Policy::of(Kind::Concurrency, &[1, 1], &[]),
            Err(NOT_A_LIMITER)
        );
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
        assert_eq!(tiers.window(), Duration::from_secs(60));
        let slow = Policy::token_bucket(10, 1, 1_000).unwrap();
        assert_eq!(slow.window(), Duration::from_secs(10));
        let gcra = Policy::gcra(10, 1_000, Some(30)).unwrap();
        assert_eq!(gcra.limit(), 30);
        assert_eq!(gcra.window(), Duration::from_secs(3));
        let small = Policy::gcra(10, 1_000, Some(2)).unwrap();
        assert_eq!(small.limit(), 2);
        assert_eq!(small.window(), Duration::from_millis(200));
    }
}
