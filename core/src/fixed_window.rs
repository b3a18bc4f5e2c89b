//! Fixed window counter: at most `limit` units per window, windows aligned to the epoch.
//!
//! Time is cut into windows aligned to multiples of `window_ms` since the Unix epoch (with
//! `window_ms` = 60000, the seed's "minute 0:00-0:59"). Each window admits at most `limit`
//! units; the count starts again from zero when the next window begins. One window start
//! and one count are stored, and the comparison is exact integer arithmetic.
//!
//! The price of this simplicity is the boundary burst: `limit` units at the very end of one
//! window and `limit` more at the very start of the next are all admitted, so up to
//! `2 x limit` units pass within moments of each other (and within any span of `window_ms`).
//! The test `boundary_burst_is_twice_the_limit` shows it with numbers.

use crate::algorithm::{rate_limiter, Algorithm, StateValue, StateView};
use crate::decision::{Decision, Outcome};
use crate::limits::{self, ParamError, Range};
use crate::rate::{Numbers, RateField, Share};
use crate::time::{Micros, Millis};
use crate::window::WindowParams;

/// Validated fixed window parameters: `limit` units per window of `window_ms`.
pub type FixedWindowParams = WindowParams<{ limits::MAX_COUNT }>;

/// The fixed window in the [registry](crate::registry): `FIXED limit window_ms`.
pub struct FixedWindow;

impl Algorithm for FixedWindow {
    const NAME: &'static str = "FIXED";
    const COMMAND: &'static str = "RL.FIXED";
    const LABEL: &'static str = "fixed window";
    const TAG: u8 = b'F';
    const PARAMS: &'static [Range] = &FixedWindowParams::PARAMS;
    type Params = FixedWindowParams;
    type State = FixedWindowState;

    fn params(values: &[u64], _options: &[Option<u64>]) -> Result<Self::Params, ParamError> {
        FixedWindowParams::from_values(values)
    }

    fn numbers(p: &Self::Params) -> Numbers {
        Numbers::new(&[p.limit, p.window_ms], &[])
    }

    fn view(state: &Self::State, now: Micros) -> StateView {
        vec![
            ("window_ms", StateValue::Int(state.window_ms)),
            ("window_start_ms", StateValue::Int(state.window_start.0)),
            ("count", StateValue::Int(state.count_at(now))),
        ]
    }
}

rate_limiter!(FixedWindow {
    const UPTO: bool = true;
    const RATE: &'static [RateField] = &[RateField::Limit, RateField::WindowMs];
    const SHARE: Share = Share::Count;
});

/// The stored state: one window and the units taken in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindowState {
    /// The window length the count was taken with.
    pub window_ms: u64,
    /// Start of the window (a multiple of `window_ms`).
    pub window_start: Millis,
    /// Units taken in the window starting at `window_start`.
    pub count: u64,
}

impl FixedWindowState {
    /// Units counted against the window that contains `now`: the stored count while its
    /// window lasts (or while a clock that stepped back is still before it), else 0.
    ///
    /// ```
    /// use redis_rl_core::fixed_window::FixedWindowState;
    /// use redis_rl_core::{Micros, Millis};
    /// let s = FixedWindowState { window_ms: 1_000, window_start: Millis(5_000), count: 3 };
    /// assert_eq!(s.count_at(Micros(5_999_999)), 3);
    /// assert_eq!(s.count_at(Micros(6_000_000)), 0);
    /// ```
    pub fn count_at(&self, now: Micros) -> u64 {
        current(Some(*self), now, self.window_ms).1
    }
}

/// Decides whether `cost` units may be taken at `now`.
///
/// Returns the decision and the state to store, if any (`None`: write nothing). A missing
/// state, or one from an earlier window, is a zero count. A clock that stepped back is
/// treated as standing still in the stored window, so it never reopens a window. A state
/// stored with another `window_ms` keeps its count while its own window lasts (carried into
/// the current window of the new size), so changing the window never forgets traffic.
///
/// ```
/// use redis_rl_core::fixed_window::{check, FixedWindowParams};
/// use redis_rl_core::{Micros, Millis, Outcome};
/// let params = FixedWindowParams::new(2, 1_000).unwrap();
/// let (_, state) = check(None, Micros(250_000), &params, 2);
/// let (d, _) = check(state, Micros(250_000), &params, 1);
/// // The window [0, 1000) ms is full: the next one starts in 750 ms.
/// assert_eq!(d.outcome, Outcome::Denied { retry_after: Millis(750) });
/// ```
pub fn check(
    state: Option<FixedWindowState>,
    now: Micros,
    params: &FixedWindowParams,
    cost: u64,
) -> (Decision, Option<FixedWindowState>) {
    decide(state, now, params, cost, false)
}

/// Takes `cost` units at `now` even over the limit (`FORCE`). The count goes past the
/// limit and the window stays refused until it ends (the debt is the rest of the window:
/// the next one starts from zero, as after a lowered limit). Counts are capped at
/// [`MAX_COUNT`](limits::MAX_COUNT).
///
/// ```
/// use redis_rl_core::fixed_window::{check, force, FixedWindowParams};
/// use redis_rl_core::{Micros, Millis, Outcome};
/// let p = FixedWindowParams::new(10, 1_000).unwrap();
/// let (d, s) = force(None, Micros(0), &p, 25);
/// assert!(d.is_allowed());
/// // Over the limit: one more unit waits for the next window.
/// let (d, _) = check(s, Micros(0), &p, 1);
/// assert_eq!(d.outcome, Outcome::Denied { retry_after: Millis(1_000) });
/// ```
pub fn force(
    state: Option<FixedWindowState>,
    now: Micros,
    params: &FixedWindowParams,
    cost: u64,
) -> (Decision, Option<FixedWindowState>) {
    decide(state, now, params, cost, true)
}

fn decide(
    state: Option<FixedWindowState>,
    now: Micros,
    params: &FixedWindowParams,
    cost: u64,
    forced: bool,
) -> (Decision, Option<FixedWindowState>) {
    let (start, count) = current(state, now, params.window_ms);
    let end = start.saturating_add(Millis(params.window_ms));
    let until_end = Micros(end.as_micros().0.saturating_sub(now.0)).ceil_millis();
    let decision = |outcome, count: u64| Decision {
        outcome,
        limit: params.limit,
        remaining: params.limit.saturating_sub(count),
        reset_after: if count > 0 { until_end } else { Millis(0) },
    };

    let after = count.saturating_add(cost);
    if forced && cost > 0 && after > params.limit {
        let after = after.min(limits::MAX_COUNT);
        let new_state = FixedWindowState {
            window_ms: params.window_ms,
            window_start: start,
            count: after,
        };
        return (decision(Outcome::Allowed, after), Some(new_state));
    }
    if cost > params.limit {
        return (decision(Outcome::Never, count), None);
    }
    if after > params.limit {
        // The next window starts from zero, and `cost <= limit` fits there.
        let outcome = Outcome::Denied {
            retry_after: until_end,
        };
        return (decision(outcome, count), None);
    }
    let new_state = (cost > 0).then_some(FixedWindowState {
        window_ms: params.window_ms,
        window_start: start,
        count: after,
    });
    (decision(Outcome::Allowed, after), new_state)
}

/// Gives back up to `amount` units taken earlier (RL.REFUND).
///
/// Only units of the window that is still current can be given back; once it has ended the
/// count is gone anyway and the refund gives back 0. Returns the units given back and the
/// state to store, if any.
pub fn refund(
    state: Option<FixedWindowState>,
    now: Micros,
    params: &FixedWindowParams,
    amount: u64,
) -> (u64, Option<FixedWindowState>) {
    let Some(stored) = state else {
        return (0, None);
    };
    let (start, count) = current(Some(stored), now, params.window_ms);
    let refunded = count.min(amount);
    if refunded == 0 || stored.window_ms != params.window_ms {
        return (0, None);
    }
    let new_state = FixedWindowState {
        window_ms: params.window_ms,
        window_start: start,
        count: count - refunded,
    };
    (refunded, Some(new_state))
}

/// The current window's start and the units already taken in it.
fn current(state: Option<FixedWindowState>, now: Micros, window_ms: u64) -> (Millis, u64) {
    let now_ms = now.0 / 1000;
    let align = |t: u64, w: u64| Millis(t - t % w.max(1));
    let Some(s) = state else {
        return (align(now_ms, window_ms), 0);
    };
    // A clock that stepped back stands still at the start of the stored window.
    let at = now_ms.max(s.window_start.0);
    let stored_end = s.window_start.0.saturating_add(s.window_ms);
    let count = if at < stored_end { s.count } else { 0 };
    (align(at, window_ms), count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promises::{self, Model};
    use crate::scenario::{case_us as case, retry_ms, run, wait_is_exact};
    use proptest::prelude::*;

    impl Model for FixedWindow {
        fn params_of(limit: u64) -> Self::Params {
            params(limit, 1_000)
        }

        fn arb_params() -> BoxedStrategy<FixedWindowParams> {
            (1u64..50, 1u64..5_000)
                .prop_map(|(limit, ms)| params(limit, ms))
                .boxed()
        }

        /// `limit` in each window the span touches: `limit` at the end of one window and
        /// `limit` more at the start of the next is the boundary burst.
        fn budget(p: &FixedWindowParams, span_us: u64) -> u128 {
            u128::from(p.limit) * u128::from(span_us / p.window_us() + 2)
        }
    }

    fn params(limit: u64, window_ms: u64) -> FixedWindowParams {
        FixedWindowParams::new(limit, window_ms).unwrap()
    }

    #[test]
    fn refund_only_gives_back_units_of_the_current_window() {
        promises::refund_only_touches_the_current_window::<FixedWindow>(Micros(1_000_000));
    }

    #[test]
    fn five_per_second_spec() {
        let p = params(5, 1_000);
        run(
            &[
                //   now_us     cost allowed rem retry reset
                case(100_000, 1, true, 4, 0, 900),
                case(100_000, 4, true, 0, 0, 900),
                case(100_000, 1, false, 0, 900, 900),
                case(999_999, 1, false, 0, 1, 1),
                case(500_000, 6, false, 0, -1, 500),
                case(500_000, 0, true, 0, 0, 500),
                // The next window starts from zero.
                case(1_000_000, 5, true, 0, 0, 1_000),
                case(1_000_500, 1, false, 0, 1_000, 1_000),
                // Two windows later: idle, nothing stored counts.
                case(3_000_000, 0, true, 5, 0, 0),
                case(3_999_000, 2, true, 3, 0, 1),
            ],
            |s, now, cost| {
                let (d, next) = check(s, now, &p, cost);
                assert_eq!(d.limit, p.limit());
                (d, next)
            },
        );
    }

    #[test]
    fn boundary_burst_is_twice_the_limit() {
        // 100 per minute. 100 requests at 0:59.999 fill minute 0; 100 more at 1:00.000
        // open minute 1: 200 requests admitted within one millisecond.
        let p = params(100, 60_000);
        let mut state = None;
        let mut admitted = 0;
        for at_us in [59_999_000, 60_000_000] {
            for _ in 0..150 {
                let (d, next) = check(state, Micros(at_us), &p, 1);
                admitted += u64::from(d.is_allowed());
                state = next.or(state);
            }
        }
        assert_eq!(admitted, 200);
    }

    #[test]
    fn seed_tiers_admit_their_limit_per_minute() {
        for limit in [100, 1_000, 10_000] {
            let p = params(limit, 60_000);
            let mut state = None;
            let mut admitted = 0;
            for i in 0..limit + 5 {
                let (d, next) = check(state, Micros(i * 1_000), &p, 1);
                admitted += u64::from(d.is_allowed());
                state = next.or(state);
            }
            assert_eq!(admitted, limit);
        }
    }

    #[test]
    fn clock_stepping_back_stays_in_the_stored_window() {
        let p = params(5, 1_000);
        let (_, s) = check(None, Micros(5_500_000), &p, 5);
        // One second back: still the full window [5000, 6000), retry from the real `now`.
        let (d, s2) = check(s, Micros(4_500_000), &p, 1);
        assert_eq!(retry_ms(&d), 1_500);
        assert_eq!(d.reset_after, Millis(1_500));
        assert!(s2.is_none());
        let (d, s3) = check(s, Micros(4_500_000), &p, 0);
        assert_eq!((d.is_allowed(), d.remaining), (true, 0));
        assert!(s3.is_none());
        assert!(check(s, Micros(6_000_000), &p, 5).0.is_allowed());
    }

    #[test]
    fn changing_the_window_keeps_the_count_while_its_window_lasts() {
        let (_, s) = check(None, Micros(200_000), &params(10, 1_000), 8);
        // Still inside [0, 1000): the 8 units count in the new window [0, 60000).
        let (d, s2) = check(s, Micros(500_000), &params(10, 60_000), 2);
        assert_eq!((d.is_allowed(), d.remaining), (true, 0));
        assert_eq!(s2.unwrap().count, 10);
        assert_eq!(d.reset_after, Millis(59_500));
        // After the old window ended, the count is gone.
        let (d, _) = check(s, Micros(1_000_000), &params(10, 60_000), 0);
        assert_eq!(d.remaining, 10);
    }

    #[test]
    fn lowering_the_limit_applies_at_once() {
        let (_, s) = check(None, Micros(0), &params(10, 1_000), 8);
        let (d, _) = check(s, Micros(0), &params(5, 1_000), 1);
        assert_eq!(
            (d.is_allowed(), d.remaining, retry_ms(&d)),
            (false, 0, 1_000)
        );
    }

    #[test]
    fn largest_parameters_do_not_overflow() {
        let max = limits::MAX_COUNT;
        let p = params(max, limits::MAX_DURATION_MS);
        let (d, s) = check(None, Micros(u64::MAX), &p, max);
        assert!(d.is_allowed());
        let (d, _) = check(s, Micros(u64::MAX), &p, max);
        assert!(!d.is_allowed());
        let corrupt = FixedWindowState {
            window_ms: 0,
            window_start: Millis(u64::MAX),
            count: u64::MAX,
        };
        let _ = check(Some(corrupt), Micros(u64::MAX), &params(max, 1), max);
        let _ = check(Some(corrupt), Micros(0), &params(1, 7), 1);
    }

    proptest! {
        /// Against a reference model (a count per window index): the decision, every reply
        /// field, and the retry promise (waiting `retry_after` is enough, 1 ms less is not).
        #[test]
        fn matches_the_model_and_retry_after_is_exact(
            limit in 1u64..50,
            window_ms in 1u64..5_000,
            calls in prop::collection::vec((0u64..3_000_000, 0u64..20), 1..150),
        ) {
            let p = params(limit, window_ms);
            let window_us = window_ms * 1000;
            let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
            let mut state = None;
            let mut now = 0u64;
            for (step, cost) in calls {
                now += step;
                let idx = now / window_us;
                let used = per_window.get(&idx).copied().unwrap_or(0);
                let allowed = used + cost <= limit;
                let after = if allowed { used + cost } else { used };
                let end_ms = (idx + 1) * window_ms;
                let until_end = (end_ms * 1000 - now).div_ceil(1000);
                let (d, next) = check(state, Micros(now), &p, cost);
                prop_assert_eq!(d.is_allowed(), allowed);
                prop_assert_eq!(d.remaining, limit - after);
                prop_assert_eq!(d.reset_after.0, if after > 0 { until_end } else { 0 });
                match d.outcome {
                    Outcome::Allowed => {}
                    Outcome::Never => prop_assert!(cost > limit),
                    Outcome::Denied { retry_after } => {
                        prop_assert_eq!(retry_after.0, until_end);
                        wait_is_exact(&d, &state, now, |s, t| check(s, t, &p, cost).0)?;
                    }
                }
                if allowed {
                    *per_window.entry(idx).or_insert(0) += cost;
                }
                state = next.or(state);
            }
        }

        /// Never more than `limit` in any window, and never more than `2 x limit` in any
        /// span of `window_ms` (the boundary burst is the worst case; the span bound is
        /// the budget checked in `promises`).
        #[test]
        fn never_more_than_the_limit_in_one_window(
            limit in 1u64..30,
            window_ms in 1u64..2_000,
            calls in prop::collection::vec((0u64..500_000, 0u64..10), 1..200),
        ) {
            let p = params(limit, window_ms);
            let window_us = window_ms * 1000;
            let admitted = promises::admitted::<FixedWindow>(&p, &calls);
            for &(from, _) in &admitted {
                let span: u64 = admitted.iter().filter(|(t, _)| (from..from + window_us).contains(t)).map(|(_, c)| c).sum();
                prop_assert!(span <= 2 * limit);
                let same: u64 = admitted.iter().filter(|(t, _)| t / window_us == from / window_us).map(|(_, c)| c).sum();
                prop_assert!(same <= limit);
            }
        }
    }
}
