//! redis-cell's `CL.THROTTLE` on the GCRA core: its arguments, its reply and its rounding.
//!
//! `CL.THROTTLE key max_burst count period [quantity]` admits `count` units per `period`
//! seconds (`period_s` here), at most `max_burst + 1` at once. That is [`gcra`](crate::gcra) with
//! `limit = count`, `period_ms = period_s x 1000` and `burst = max_burst + 1`, so RL.THROTTLE
//! and RL.GCRA share their keys. The reply is redis-cell's:
//! `[limited, max_burst + 1, remaining, retry_after_s (-1 when allowed), reset_after_s]`,
//! with waits rounded up to whole seconds.
//!
//! Differences from redis-cell, all at the edges: arguments outside the documented ranges
//! are refused (redis-cell accepts a negative `quantity`, which gives units back, and
//! negative or zero rates), and the emission interval is exact where redis-cell truncates it
//! to whole nanoseconds, so a wait can round up to one more second where redis-cell's is a
//! few nanoseconds short of a whole second.

use crate::decision::{Decision, Outcome};
use crate::gcra::GcraParams;
use crate::limits::{self, ParamError, Range, MAX_COUNT, MAX_DURATION_MS};
use crate::time::Millis;

/// `max_burst`: units that may pass at once beyond the first; the limit is `max_burst + 1`.
pub const MAX_BURST: Range = Range {
    name: "max_burst",
    min: 0,
    max: MAX_COUNT - 1,
    spelling: crate::limits::Spelling::Integer,
};

/// `count`: units per period.
pub const COUNT: Range = limits::count("count");

/// `period_s`: the period in seconds (up to 10^9 s, the same bound as every duration).
pub const PERIOD_S: Range = Range {
    name: "period_s",
    min: 1,
    max: MAX_DURATION_MS / 1000,
    spelling: crate::limits::Spelling::Integer,
};

/// `quantity`: units taken by the call (default 1); 0 looks without taking anything.
pub const QUANTITY: Range = Range {
    name: "quantity",
    min: 0,
    max: MAX_COUNT,
    spelling: crate::limits::Spelling::Integer,
};

/// The GCRA parameters of `CL.THROTTLE key max_burst count period`.
///
/// ```
/// use redis_rl_core::throttle;
/// // redis-cell's README: 30 per 60 s, bursts of 15 (+1).
/// let p = throttle::params(15, 30, 60).unwrap();
/// assert_eq!((p.limit(), p.period_ms(), p.burst()), (30, 60_000, 16));
/// ```
pub fn params(max_burst: u64, count: u64, period_s: u64) -> Result<GcraParams, ParamError> {
    let burst = MAX_BURST.check(max_burst)? + 1;
    let count = COUNT.check(count)?;
    let period_ms = PERIOD_S.check(period_s)? * 1000;
    GcraParams::new(count, period_ms, Some(burst))
}

/// A decision as `CL.THROTTLE` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttled {
    /// True when the call was refused (redis-cell reports 1).
    pub limited: bool,
    /// `max_burst + 1`.
    pub limit: u64,
    /// Whole units left.
    pub remaining: u64,
    /// Seconds to wait before the same call is allowed; `None` when allowed or never
    /// possible (`quantity > max_burst + 1`), which redis-cell reports as -1.
    pub retry_after_s: Option<u64>,
    /// Seconds until the limiter is back to idle.
    pub reset_after_s: u64,
}

impl From<&Decision> for Throttled {
    fn from(d: &Decision) -> Self {
        Throttled {
            limited: !d.is_allowed(),
            limit: d.limit,
            remaining: d.remaining,
            retry_after_s: match d.outcome {
                Outcome::Denied { retry_after } => Some(ceil_seconds(retry_after)),
                Outcome::Allowed | Outcome::Never => None,
            },
            reset_after_s: ceil_seconds(d.reset_after),
        }
    }
}

/// redis-cell's rounding: any part of a second counts as a whole one, so a caller who
/// waits the reported seconds is never early.
///
/// ```
/// use redis_rl_core::{throttle::ceil_seconds, Millis};
/// assert_eq!(ceil_seconds(Millis(0)), 0);
/// assert_eq!(ceil_seconds(Millis(1)), 1);
/// assert_eq!(ceil_seconds(Millis(3_900)), 4);
/// assert_eq!(ceil_seconds(Millis(4_000)), 4);
/// ```
pub const fn ceil_seconds(ms: Millis) -> u64 {
    ms.0.div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::{check, GcraState};
    use crate::Micros;

    /// A fixed "now" for the cases (redis-cell's tests start at the wall clock).
    const START_MS: u64 = 1_700_000_000_000;

    fn at(offset_ms: u64) -> Micros {
        Millis(START_MS + offset_ms).as_micros()
    }

    fn throttle(
        state: &mut Option<GcraState>,
        now: Micros,
        p: &GcraParams,
        quantity: u64,
    ) -> (Decision, Throttled) {
        let (d, next) = check(*state, now, p, quantity);
        *state = next.or(*state);
        (d, Throttled::from(&d))
    }

    /// redis-cell's `RateLimitCase`: `(num, offset_ms, volume, remaining, reset_after_ms,
    /// retry_after_ms, limited)`, the exact waits (ms, -1 for none) as its core computes
    /// them.
    struct Case(u64, u64, u64, u64, u64, i64, bool);

    /// A reply's fields as a tuple, for comparing in one assertion.
    fn fields(t: Throttled) -> (bool, u64, u64, Option<u64>, u64) {
        (
            t.limited,
            t.limit,
            t.remaining,
            t.retry_after_s,
            t.reset_after_s,
        )
    }

    /// redis-cell's `it_rate_limits` (src/cell/mod.rs), case for case: limit 5
    /// (max_burst 4), 1 per second.
    #[rustfmt::skip]
    #[test]
    fn redis_cell_rate_limit_cases() {
        let p = params(4, 1, 1).unwrap();
        let cases = [
            // You can never make a request larger than the maximum.
            Case(0, 0, 6, 5, 0, -1, true),
            // Rate limit normal requests appropriately.
            Case(1, 0, 1, 4, 1_000, -1, false),
            Case(2, 0, 1, 3, 2_000, -1, false),
            Case(3, 0, 1, 2, 3_000, -1, false),
            Case(4, 0, 1, 1, 4_000, -1, false),
            Case(5, 0, 1, 0, 5_000, -1, false),
            Case(6, 0, 1, 0, 5_000, 1_000, true),
            Case(7, 3_000, 1, 2, 3_000, -1, false),
            Case(8, 3_100, 1, 1, 3_900, -1, false),
            Case(9, 4_000, 1, 1, 4_000, -1, false),
            Case(10, 8_000, 1, 4, 1_000, -1, false),
            Case(11, 9_500, 1, 4, 1_000, -1, false),
            // Zero-volume request just peeks at the state.
            Case(12, 9_500, 0, 4, 1_000, -1, false),
            // High-volume request uses up more of the limit.
            Case(13, 9_500, 2, 2, 3_000, -1, false),
            // Large requests cannot exceed limits.
            Case(14, 9_500, 5, 2, 3_000, 3_000, true),
        ];
        let mut state = None;
        for Case(num, offset_ms, volume, remaining, reset_after_ms, retry_after_ms, limited) in cases {
            let (d, t) = throttle(&mut state, at(offset_ms), &p, volume);
            let retry_ms = match d.outcome {
                Outcome::Denied { retry_after } => retry_after.0 as i64,
                Outcome::Allowed | Outcome::Never => -1,
            };
            assert_eq!(
                (t.limited, t.limit, t.remaining, d.reset_after.0, retry_ms),
                (limited, 5, remaining, reset_after_ms, retry_after_ms),
                "case {num}"
            );
            // The reply rounds each wait up to whole seconds.
            assert_eq!(t.reset_after_s, reset_after_ms.div_ceil(1000), "case {num}");
            let expected_retry = (retry_after_ms >= 0).then(|| (retry_after_ms as u64).div_ceil(1000));
            assert_eq!(t.retry_after_s, expected_retry, "case {num}");
        }
    }

    #[test]
    fn redis_cell_readme_example() {
        // CL.THROTTLE user123 15 30 60 -> 0, 16, 15, -1, 2
        let p = params(15, 30, 60).unwrap();
        let (_, t) = throttle(&mut None, at(0), &p, 1);
        assert_eq!(
            t,
            Throttled {
                limited: false,
                limit: 16,
                remaining: 15,
                retry_after_s: None,
                reset_after_s: 2,
            }
        );
    }

    #[test]
    fn redis_cell_end_to_end_example() {
        // CL.THROTTLE user123 0 1 2 1: allowed, then limited for 2 s, then allowed again.
        let p = params(0, 1, 2).unwrap();
        let mut state = None;
        let reply = fields;
        let (_, t) = throttle(&mut state, at(0), &p, 1);
        assert_eq!(reply(t), (false, 1, 0, None, 2));
        let (_, t) = throttle(&mut state, at(0), &p, 1);
        assert_eq!(reply(t), (true, 1, 0, Some(2), 2));
        let (_, t) = throttle(&mut state, at(2_000), &p, 1);
        assert_eq!(reply(t), (false, 1, 0, None, 2));
    }

    #[test]
    fn quantity_zero_on_a_new_key_reports_the_full_limit() {
        let p = params(9, 10, 1).unwrap();
        let (d, next) = check(None, at(0), &p, 0);
        assert!(next.is_none());
        let t = Throttled::from(&d);
        assert_eq!(fields(t), (false, 10, 10, None, 0));
    }

    #[test]
    fn partial_seconds_round_up() {
        // 3 per second, max_burst 0: the interval is 333.3 ms; the wait after one call is
        // 334 ms, reported as 1 s (redis-cell: 0.333333333 s, also 1 s).
        let p = params(0, 3, 1).unwrap();
        let mut state = None;
        let (_, t) = throttle(&mut state, at(0), &p, 1);
        assert_eq!((t.reset_after_s, t.retry_after_s), (1, None));
        let (d, t) = throttle(&mut state, at(0), &p, 1);
        assert_eq!(
            d.outcome,
            Outcome::Denied {
                retry_after: Millis(334)
            }
        );
        assert_eq!((t.limited, t.retry_after_s), (true, Some(1)));
    }

    #[test]
    fn ranges_are_checked() {
        assert_eq!(params(MAX_COUNT, 1, 1).unwrap_err(), MAX_BURST.error());
        assert_eq!(params(0, 0, 1).unwrap_err(), COUNT.error());
        assert_eq!(params(0, 1, 0).unwrap_err(), PERIOD_S.error());
        assert_eq!(
            params(0, 1, MAX_DURATION_MS / 1000 + 1).unwrap_err(),
            PERIOD_S.error()
        );
        assert!(params(MAX_COUNT - 1, MAX_COUNT, MAX_DURATION_MS / 1000).is_ok());
        assert_eq!(
            PERIOD_S.error().to_string(),
            "period_s must be an integer between 1 and 1000000000"
        );
        assert_eq!(
            MAX_BURST.error().to_string(),
            "max_burst must be an integer between 0 and 999999999999999"
        );
    }
}
