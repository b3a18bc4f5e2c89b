//! Generic cell rate algorithm (GCRA): one stored instant, the theoretical arrival time.
//!
//! Units are due one emission interval `T = period_ms / limit` apart. The limiter stores the
//! theoretical arrival time (TAT): the instant by which every admitted unit would have
//! passed had they been spaced exactly `T` apart. A call for `cost` units at `now` is
//! allowed when it pushes the TAT at most `burst` intervals past now:
//!
//! ```text
//! max(TAT, now) + cost x T  <=  now + burst x T
//! ```
//!
//! This is a token bucket of `burst` tokens refilled at `limit` per `period_ms`, stored as
//! one instant instead of a level and a timestamp (the tests check that both agree on every
//! call). `burst` defaults to `limit`: the whole period's allowance may be used at once.
//!
//! **Exactness.** `T` is rarely a whole number of microseconds (1000 ms / 3 = 333 333.3 µs).
//! Time is therefore counted in *ticks* of 1/`limit` µs, in which `T` is exactly
//! `period_ms x 1000` ticks. Every TAT is exact, so nothing drifts however many calls are
//! made (redis-cell truncates `T` to whole nanoseconds and drifts by the remainder on every
//! unit). The TAT is stored with the `limit` that scales it. Within the documented limits a
//! tick count fits easily in `u128`: now (< 1.9 x 10^19 µs) x limit (<= 10^15) < 1.9 x 10^34,
//! and `burst x T` <= 10^15 x 10^15 ticks.

use crate::algorithm::{positional, rate_limiter, Algorithm, Opt, StateValue, StateView};
use crate::decision::{Decision, Outcome};
use crate::limits::{self, ParamError, Range};
use crate::rate::{Numbers, RateField, Share};
use crate::time::{ceil_millis_of, div_u128, Micros, Millis};

/// `BURST b`: the most units that may pass at once (default: `limit`).
pub const BURST: Opt = Opt {
    token: "BURST",
    value: "b",
    range: limits::count("burst"),
};

/// GCRA in the [registry](crate::registry): `GCRA limit period_ms [BURST b]`.
pub struct Gcra;

impl Algorithm for Gcra {
    const NAME: &'static str = "GCRA";
    const COMMAND: &'static str = "RL.GCRA";
    const LABEL: &'static str = "GCRA";
    const TAG: u8 = b'G';
    const PARAMS: &'static [Range] = &[limits::count("limit"), limits::duration_ms("period_ms")];
    const OPTIONS: &'static [Opt] = &[BURST];
    type Params = GcraParams;
    type State = GcraState;

    fn params(values: &[u64], options: &[Option<u64>]) -> Result<Self::Params, ParamError> {
        let [limit, period_ms] = positional(Self::PARAMS, values)?;
        let burst = options.first().copied().flatten().unwrap_or(limit);
        Ok(GcraParams {
            limit,
            period_ms,
            burst: BURST.range.check(burst)?,
        })
    }

    fn numbers(p: &Self::Params) -> Numbers {
        let burst = (p.burst != p.limit).then_some(p.burst);
        Numbers::new(&[p.limit, p.period_ms], &[burst])
    }

    fn view(state: &Self::State, now: Micros) -> StateView {
        vec![
            ("limit", StateValue::Int(state.limit)),
            ("period_ms", StateValue::Int(state.period_ms)),
            ("tat_ms", StateValue::Int(state.tat_ms().0)),
            ("used", StateValue::Int(state.used_at(now))),
        ]
    }
}

rate_limiter!(Gcra {
    const UPTO: bool = true;
    const RATE: &'static [RateField] = &[RateField::Limit, RateField::WindowMs, RateField::Burst];
    const SHARE: Share = Share::Period;
});

/// Validated GCRA parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GcraParams {
    limit: u64,
    period_ms: u64,
    burst: u64,
}

impl GcraParams {
    /// Checks every parameter against its documented range. `burst` is the most units that
    /// may pass at once (the bucket size); `None` means the default, `limit`.
    ///
    /// ```
    /// use redis_rl_core::gcra::GcraParams;
    /// // 100 requests per minute, at most 10 back to back.
    /// let p = GcraParams::new(100, 60_000, Some(10)).unwrap();
    /// assert_eq!(p.burst(), 10);
    /// assert_eq!(GcraParams::new(100, 60_000, None).unwrap().burst(), 100);
    /// assert!(GcraParams::new(100, 60_000, Some(0)).is_err());
    /// ```
    pub fn new(limit: u64, period_ms: u64, burst: Option<u64>) -> Result<Self, ParamError> {
        Gcra::params(&[limit, period_ms], &[burst])
    }

    /// Units admitted per period, on average.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The period in milliseconds.
    pub const fn period_ms(&self) -> u64 {
        self.period_ms
    }

    /// Most units that may pass at once (the bucket size).
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// Ticks per microsecond.
    fn scale(&self) -> u128 {
        u128::from(self.limit)
    }

    /// The emission interval `T` in ticks.
    fn interval(&self) -> u128 {
        u128::from(self.interval_ticks())
    }

    /// The emission interval in ticks, as a `u64` (`period_ms` <= 10^12).
    const fn interval_ticks(&self) -> u64 {
        self.period_ms * 1000
    }
}

/// The stored state: the theoretical arrival time and the units it is counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraState {
    /// The TAT in ticks of 1/`limit` µs since the Unix epoch.
    pub tat: u128,
    /// The `limit` that scales `tat` (ticks per µs).
    pub limit: u64,
    /// The `period_ms` of the last write (shown by RL.STATE; the decision does not need it).
    pub period_ms: u64,
}

impl GcraState {
    /// The TAT converted to ticks of 1/`limit` µs, rounded up (never a gift).
    fn tat_in(&self, limit: u64) -> u128 {
        let old = u128::from(self.limit.max(1));
        let new = u128::from(limit);
        if old == new {
            return self.tat;
        }
        (self.tat / old)
            .saturating_mul(new)
            .saturating_add((self.tat % old * new).div_ceil(old))
    }

    /// Units of the period's allowance in use at `now`, rounded up: how far the TAT is ahead
    /// of `now`, in emission intervals of the stored `limit` and `period_ms`.
    ///
    /// ```
    /// use redis_rl_core::gcra::{check, GcraParams};
    /// use redis_rl_core::Micros;
    /// let p = GcraParams::new(10, 1_000, None).unwrap();
    /// let (_, s) = check(None, Micros(0), &p, 4);
    /// let s = s.unwrap();
    /// assert_eq!(s.used_at(Micros(0)), 4);
    /// assert_eq!(s.used_at(Micros(150_000)), 3); // 2.5 intervals ahead: 3 in use
    /// assert_eq!(s.used_at(Micros(400_000)), 0);
    /// ```
    pub fn used_at(&self, now: Micros) -> u64 {
        let ahead = self
            .tat
            .saturating_sub(u128::from(now.0) * u128::from(self.limit));
        let interval = u128::from(self.period_ms.max(1)) * 1000;
        u64::try_from(ahead.div_ceil(interval)).unwrap_or(u64::MAX)
    }

    /// The TAT in milliseconds since the epoch, rounded up.
    pub fn tat_ms(&self) -> Millis {
        Micros::ceil_millis_u128(self.tat.div_ceil(u128::from(self.limit.max(1))))
    }
}

/// Decides whether `cost` units may be taken at `now`.
///
/// Returns the decision and the state to store, if any (`None`: write nothing). A missing
/// state, or a TAT in the past, is an idle limiter (a full bucket). The reply's `limit` is
/// `burst`, the most a caller can take at once.
///
/// New parameters apply at once to a stored TAT, which keeps its meaning as an instant:
/// the time the limiter is ahead of the schedule is kept, and re-measured in the new
/// emission interval. If that is more than the new `burst` allows, even a zero-cost check
/// is denied until the limiter is back within it (as in redis-cell). A clock that steps back by `d` makes the limiter stricter by `d` until
/// it catches up: nothing is ever credited twice.
///
/// ```
/// use redis_rl_core::gcra::{check, GcraParams};
/// use redis_rl_core::{Micros, Millis, Outcome};
/// // 3 per second, burst 1: one unit every 333.3 ms.
/// let p = GcraParams::new(3, 1_000, Some(1)).unwrap();
/// let (d, state) = check(None, Micros(0), &p, 1);
/// assert_eq!((d.remaining, d.reset_after), (0, Millis(334)));
/// let (d, _) = check(state, Micros(0), &p, 1);
/// assert_eq!(d.outcome, Outcome::Denied { retry_after: Millis(334) });
/// assert!(!check(state, Micros(333_333), &p, 1).0.is_allowed());
/// assert!(check(state, Micros(333_334), &p, 1).0.is_allowed());
/// ```
pub fn check(
    state: Option<GcraState>,
    now: Micros,
    params: &GcraParams,
    cost: u64,
) -> (Decision, Option<GcraState>) {
    let scale = params.scale();
    let interval = params.interval();
    let now_t = u128::from(now.0) * scale;
    let tat = state.map_or(0, |s| s.tat_in(params.limit)).max(now_t);
    // The furthest the TAT may be pushed: `burst` intervals past now.
    let horizon = now_t + u128::from(params.burst) * interval;
    // Ticks to whole milliseconds, rounded up (`limit` x 1000 <= 10^18 fits in u64).
    let to_millis = |ticks: u128| ceil_millis_of(ticks, params.limit);
    let decision = |outcome, tat: u128| Decision {
        outcome,
        limit: params.burst,
        remaining: u64::try_from(div_u128(
            horizon.saturating_sub(tat),
            params.interval_ticks(),
        ))
        .unwrap_or(u64::MAX),
        reset_after: to_millis(tat - now_t),
    };

    if cost > params.burst {
        return (decision(Outcome::Never, tat), None);
    }
    let after = tat.saturating_add(u128::from(cost) * interval);
    if after > horizon {
        // Allowed once `now` has moved `after - horizon` on: then the TAT is still ahead
        // of it (`cost <= burst`), so nothing else changes.
        let retry_after = to_millis(after - horizon);
        return (decision(Outcome::Denied { retry_after }, tat), None);
    }
    let new_state = (cost > 0).then_some(GcraState {
        tat: after,
        limit: params.limit,
        period_ms: params.period_ms,
    });
    (decision(Outcome::Allowed, after), new_state)
}

/// Takes `cost` units at `now` even past the burst (`FORCE`): the theoretical arrival
/// time moves on by `cost` emission intervals however far ahead it already is, so later
/// calls wait until it is back within the burst. The debt is capped at
/// [`MAX_COUNT`](limits::MAX_COUNT) units past `now`.
pub fn force(
    state: Option<GcraState>,
    now: Micros,
    params: &GcraParams,
    cost: u64,
) -> (Decision, Option<GcraState>) {
    let (probe, _) = check(state, now, params, cost);
    if probe.is_allowed() || cost == 0 {
        return check(state, now, params, cost);
    }
    let interval = params.interval();
    let now_t = u128::from(now.0) * params.scale();
    let tat = state.map_or(0, |s| s.tat_in(params.limit)).max(now_t);
    let furthest = now_t + u128::from(limits::MAX_COUNT) * interval;
    let after = tat
        .saturating_add(u128::from(cost) * interval)
        .min(furthest);
    let decision = Decision {
        outcome: Outcome::Allowed,
        limit: params.burst,
        remaining: 0,
        reset_after: ceil_millis_of(after - now_t, params.limit),
    };
    let state = GcraState {
        tat: after,
        limit: params.limit,
        period_ms: params.period_ms,
    };
    (decision, Some(state))
}

/// Gives back up to `amount` units taken earlier (RL.REFUND): moves the TAT back by that
/// many emission intervals, but never before `now` (an idle limiter has nothing to give
/// back). Returns the units given back (rounded up: a partly elapsed interval counts) and
/// the state to store, if any.
pub fn refund(
    state: Option<GcraState>,
    now: Micros,
    params: &GcraParams,
    amount: u64,
) -> (u64, Option<GcraState>) {
    let interval = params.interval();
    let now_t = u128::from(now.0) * params.scale();
    let tat = state.map_or(0, |s| s.tat_in(params.limit));
    let ahead = tat.saturating_sub(now_t);
    let refunded = ahead.div_ceil(interval).min(u128::from(amount));
    if refunded == 0 {
        return (0, None);
    }
    let new_state = GcraState {
        tat: tat.saturating_sub(refunded * interval).max(now_t),
        limit: params.limit,
        period_ms: params.period_ms,
    };
    (u64::try_from(refunded).unwrap_or(0), Some(new_state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promises::Model;
    use crate::scenario::{case, retry_ms, run};
    use crate::token_bucket::{self, TokenBucketParams};
    use proptest::prelude::*;

    impl Model for Gcra {
        fn params_of(limit: u64) -> Self::Params {
            params(limit, 1_000, limit)
        }

        fn arb_params() -> BoxedStrategy<GcraParams> {
            (1u64..100, 1u64..10_000, 1u64..100)
                .prop_map(|(limit, ms, burst)| params(limit, ms, burst))
                .boxed()
        }

        /// A full burst plus what the rate admits in the span.
        fn budget(p: &GcraParams, span_us: u64) -> u128 {
            let accrued = u128::from(span_us) * u128::from(p.limit) / p.interval();
            u128::from(p.burst) + accrued
        }
    }

    fn params(limit: u64, period_ms: u64, burst: u64) -> GcraParams {
        GcraParams::new(limit, period_ms, Some(burst)).unwrap()
    }

    #[test]
    fn refund_moves_the_arrival_time_back_but_not_before_now() {
        let p = params(10, 1_000, 10);
        let (_, s) = check(None, Micros(0), &p, 6);
        let (refunded, s2) = refund(s, Micros(0), &p, 4);
        assert_eq!(refunded, 4);
        assert_eq!(check(s2, Micros(0), &p, 0).0.remaining, 8);
        let (refunded, s3) = refund(s2, Micros(0), &p, 9);
        assert_eq!(refunded, 2);
        assert_eq!(check(s3, Micros(0), &p, 0).0.remaining, 10);
        assert_eq!(refund(None, Micros(0), &p, 4), (0, None));
    }

    #[test]
    fn ten_per_second_burst_five_spec() {
        // One unit every 100 ms, at most 5 at once.
        let p = params(10, 1_000, 5);
        run(
            &[
                //   now  cost allowed rem retry reset
                case(0, 1, true, 4, 0, 100),
                case(0, 4, true, 0, 0, 500),
                case(0, 1, false, 0, 100, 500),
                case(0, 6, false, 0, -1, 500),
                case(50, 1, false, 0, 50, 450),
                case(100, 1, true, 0, 0, 500),
                case(100, 0, true, 0, 0, 500),
                case(350, 2, true, 0, 0, 450),
                case(350, 5, false, 0, 450, 450),
                case(10_000, 0, true, 5, 0, 0),
                case(10_000, 5, true, 0, 0, 500),
            ],
            |s, now, cost| check(s, now, &p, cost),
        );
    }

    #[test]
    fn default_burst_is_the_limit() {
        let p = GcraParams::new(100, 60_000, None).unwrap();
        let mut state = None;
        let mut admitted = 0;
        for _ in 0..150 {
            let (d, next) = check(state, Micros(0), &p, 1);
            admitted += u64::from(d.is_allowed());
            state = next.or(state);
        }
        assert_eq!(admitted, 100);
    }

    #[test]
    fn emission_interval_of_a_third_of_a_millisecond_is_exact() {
        // 3 per ms: T = 333.33 µs, and 3 000 000 units are due in exactly 1000 s. Calls
        // come at floor(i x T), a hair early or on time: with burst 2 each is admitted, and
        // the final TAT is exact to the tick (no drift after 3 million calls).
        let p = params(3, 1, 2);
        let mut state = None;
        let n = 3_000_000u64;
        for i in 0..n {
            let (d, next) = check(state, Micros(i * 1_000 / 3), &p, 1);
            assert!(d.is_allowed(), "call {i}");
            state = next;
        }
        let s = state.unwrap();
        assert_eq!(s.tat, u128::from(n) * 1_000);
        assert_eq!(s.tat_ms(), Millis(1_000_000));
    }

    #[test]
    fn clock_stepping_back_credits_nothing() {
        let p = params(10, 1_000, 10);
        let (_, s) = check(None, Micros(5_000_000), &p, 10);
        // One second back: the limiter is a second further behind, not refilled.
        let (d, s2) = check(s, Micros(4_000_000), &p, 1);
        assert_eq!(retry_ms(&d), 1_100);
        assert_eq!(d.reset_after, Millis(2_000));
        assert!(s2.is_none());
        assert!(check(s, Micros(5_100_000), &p, 1).0.is_allowed());
        assert!(!check(s, Micros(5_100_000), &p, 2).0.is_allowed());
    }

    #[test]
    fn changed_parameters_keep_the_time_ahead() {
        // 10 per second, all used: the TAT is 1 s ahead.
        let (_, s) = check(None, Micros(0), &params(10, 1_000, 10), 10);
        // 100 per second: 1 s ahead is 100 units in use; the next is 10 ms away.
        let (d, _) = check(s, Micros(0), &params(100, 1_000, 100), 1);
        assert_eq!((d.remaining, retry_ms(&d)), (0, 10));
        // A lower burst applies at once.
        let (_, s) = check(None, Micros(0), &params(10, 1_000, 10), 4);
        let (d, _) = check(s, Micros(0), &params(10, 1_000, 5), 0);
        assert_eq!(d.remaining, 1);
        // Converting to a limit that does not divide the ticks rounds the TAT up.
        let s = GcraState {
            tat: 1,
            limit: 3,
            period_ms: 1,
        };
        assert_eq!(s.tat_in(2), 1);
        assert_eq!(s.tat_in(3), 1);
        assert_eq!(s.tat_in(6), 2);
    }

    #[test]
    fn a_check_is_denied_while_over_a_lowered_burst() {
        // 7 of 10 in use; with BURST 5 the limiter is 2 units over: even a check (cost 0)
        // waits until it is back within the burst, as in redis-cell.
        let (_, s) = check(None, Micros(0), &params(10, 1_000, 10), 7);
        let (d, next) = check(s, Micros(0), &params(10, 1_000, 5), 0);
        assert_eq!(
            (retry_ms(&d), d.remaining, d.reset_after),
            (200, 0, Millis(700))
        );
        assert!(next.is_none());
        assert!(check(s, Micros(200_000), &params(10, 1_000, 5), 0)
            .0
            .is_allowed());
    }

    #[test]
    fn largest_parameters_do_not_overflow() {
        let max = limits::MAX_COUNT;
        let p = params(max, limits::MAX_DURATION_MS, max);
        let (d, s) = check(None, Micros(u64::MAX), &p, max);
        assert!(d.is_allowed());
        assert_eq!(d.reset_after, Millis(limits::MAX_DURATION_MS));
        let (d, _) = check(s, Micros(u64::MAX), &p, max);
        assert_eq!(retry_ms(&d), limits::MAX_DURATION_MS as i64);
        let p = params(1, limits::MAX_DURATION_MS, max);
        let (d, _) = check(None, Micros(u64::MAX), &p, max);
        assert!(d.is_allowed());
        assert_eq!(d.reset_after, Millis(u64::MAX));
        let corrupt = GcraState {
            tat: u128::MAX,
            limit: 0,
            period_ms: 0,
        };
        let _ = check(Some(corrupt), Micros(u64::MAX), &params(max, 1, max), max);
        let _ = check(Some(corrupt), Micros(0), &params(1, 7, 1), 1);
        let _ = (corrupt.used_at(Micros(0)), corrupt.tat_ms());
    }

    proptest! {
        /// GCRA(limit, period, burst) and a token bucket (capacity = burst, refill = limit per
        /// period) are the same limiter: over random call sequences with a clock that never
        /// steps back, every reply field agrees.
        #[test]
        fn agrees_with_the_token_bucket(
            limit in 1u64..50,
            period_ms in 1u64..5_000,
            burst in 1u64..50,
            calls in prop::collection::vec((0u64..3_000_000, 0u64..60), 1..200),
        ) {
            let g = params(limit, period_ms, burst);
            let t = TokenBucketParams::new(burst, limit, period_ms).unwrap();
            let (mut gs, mut ts) = (None, None);
            let mut now = 0u64;
            for (step, cost) in calls {
                now += step;
                let (gd, gnext) = check(gs, Micros(now), &g, cost);
                let (td, tnext) = token_bucket::check(ts, Micros(now), &t, cost);
                prop_assert_eq!(gd, td);
                prop_assert_eq!(gnext.is_some(), tnext.is_some());
                gs = gnext.or(gs);
                ts = tnext.or(ts);
            }
        }

        /// After `reset_after` no unit is in use (the promise itself is checked for every
        /// algorithm in `promises`).
        #[test]
        fn no_unit_is_in_use_once_idle(
            limit in 1u64..1_000,
            period_ms in 1u64..100_000,
            burst in 1u64..1_000,
            at in 0u64..100_000_000,
            cost in 0u64..1_000,
        ) {
            let p = params(limit, period_ms, burst);
            let (d, s) = check(None, Micros(at), &p, cost);
            let idle = Micros(at + d.reset_after.as_micros().0);
            let (later, _) = check(s, idle, &p, 0);
            prop_assert_eq!(later.remaining, burst);
            prop_assert_eq!(later.reset_after, Millis(0));
            if let Some(s) = s {
                prop_assert_eq!(s.used_at(idle), 0);
            }
        }

        /// A changed `limit` never admits more than the old TAT allows in time.
        #[test]
        fn converting_the_tat_never_gives_time(tat in 0u128..1_000_000_000_000_000_000, old in 1u64..1_000_000, new in 1u64..1_000_000) {
            let s = GcraState { tat, limit: old, period_ms: 1 };
            let converted = s.tat_in(new);
            // converted / new >= tat / old, and by less than one new tick.
            prop_assert!(converted * u128::from(old) >= tat * u128::from(new));
            prop_assert!(converted == 0 || (converted - 1) * u128::from(old) < tat * u128::from(new));
        }
    }
}
