//! Sliding window counter, with both windows in one state and integer math.
//!
//! Time is cut into windows aligned to multiples of `window_ms` since the epoch. The count
//! at an instant `elapsed` into the current window is
//! `previous x (1 - elapsed / window) + current`, and a call is allowed when
//! `count + cost <= limit`. Multiplying both sides by the window length in microseconds
//! turns this into an exact integer comparison: no float, no rounding.
//!
//! This is an approximation of a true sliding window: it assumes the previous window's
//! requests were spread evenly across it.

use crate::algorithm::{rate_limiter, Algorithm, StateValue, StateView};
use crate::decision::{Decision, Outcome};
use crate::limits::{self, ParamError, Range};
use crate::rate::{Numbers, RateField, Share};
use crate::time::{div_u128, Micros, Millis};
use crate::window::WindowParams;

/// Validated sliding window parameters: `limit` units per window of `window_ms`.
pub type SlidingWindowParams = WindowParams<{ limits::MAX_COUNT }>;

/// The sliding window counter in the [registry](crate::registry): `SLIDING limit window_ms`.
pub struct SlidingWindow;

impl Algorithm for SlidingWindow {
    const NAME: &'static str = "SLIDING";
    const COMMAND: &'static str = "RL.SLIDING";
    const LABEL: &'static str = "sliding window";
    const TAG: u8 = b'S';
    const PARAMS: &'static [Range] = &SlidingWindowParams::PARAMS;
    type Params = SlidingWindowParams;
    type State = SlidingWindowState;

    fn params(values: &[u64], _options: &[Option<u64>]) -> Result<Self::Params, ParamError> {
        SlidingWindowParams::from_values(values)
    }

    fn numbers(p: &Self::Params) -> Numbers {
        Numbers::new(&[p.limit, p.window_ms], &[])
    }

    fn view(state: &Self::State, now: Micros) -> StateView {
        // The weighted count now, rounded up: with the largest limit, a zero-cost check's
        // `remaining` is that limit minus the count.
        let max = limits::MAX_COUNT;
        let count = SlidingWindowParams::new(max, state.window_ms)
            .map(|p| max.saturating_sub(check(Some(*state), now, &p, 0).0.remaining))
            .unwrap_or(0);
        vec![
            ("window_ms", StateValue::Int(state.window_ms)),
            ("window_start_ms", StateValue::Int(state.window_start.0)),
            ("previous", StateValue::Int(state.previous)),
            ("current", StateValue::Int(state.current)),
            ("count", StateValue::Int(count)),
        ]
    }
}

rate_limiter!(SlidingWindow {
    const UPTO: bool = true;
    const RATE: &'static [RateField] = &[RateField::Limit, RateField::WindowMs];
    const SHARE: Share = Share::Count;
});

/// The stored state: the current window and the counts of it and the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindowState {
    /// The window length the counts were taken with.
    pub window_ms: u64,
    /// Start of the current window (a multiple of `window_ms`).
    pub window_start: Millis,
    /// Units taken in the window before `window_start`.
    pub previous: u64,
    /// Units taken in the window starting at `window_start`.
    pub current: u64,
}

/// The counts as seen from one instant.
struct View {
    /// Start of the window containing `at`, in µs.
    start: u64,
    /// The instant the decision is made for (`now`, or later if the clock stepped back).
    at: u64,
    previous: u64,
    current: u64,
}

/// Decides whether `cost` units may be taken at `now`.
///
/// Returns the decision and the state to store, if any (`None`: write nothing). A missing
/// state is a zero count. A state stored with a different `window_ms` is carried over
/// conservatively: its estimated count at `now` (rounded up) becomes the count of the
/// current window, so changing the window never forgets traffic.
///
/// ```
/// use redis_rl_core::sliding_window::{check, SlidingWindowParams};
/// use redis_rl_core::Micros;
/// let params = SlidingWindowParams::new(10, 1_000).unwrap();
/// let (d, _) = check(None, Micros(0), &params, 4);
/// assert!(d.is_allowed());
/// assert_eq!(d.remaining, 6);
/// ```
pub fn check(
    state: Option<SlidingWindowState>,
    now: Micros,
    params: &SlidingWindowParams,
    cost: u64,
) -> (Decision, Option<SlidingWindowState>) {
    let v = view(state, now, params);
    let window = u128::from(params.window_us());
    let budget = u128::from(params.limit) * window;
    // The count x window: exact.
    let weighted = |previous: u64, current: u64, elapsed: u64| {
        u128::from(previous) * (window - u128::from(elapsed)) + u128::from(current) * window
    };
    let used = weighted(v.previous, v.current, v.at - v.start);
    let since_now = |instant: u64| Micros(instant.saturating_sub(now.0)).ceil_millis();
    let decision = |outcome, used: u128, current: u64| Decision {
        outcome,
        limit: params.limit,
        remaining: u64::try_from(div_u128(budget.saturating_sub(used), params.window_us()))
            .unwrap_or(u64::MAX),
        reset_after: since_now(idle_at(&v, current, params.window_us())),
    };

    if cost > params.limit {
        return (decision(Outcome::Never, used, v.current), None);
    }
    let need = u128::from(cost) * window;
    if used + need > budget {
        // At least 1 ms: only a clock saturated at u64::MAX makes the instant itself unreachable.
        let retry_after = Millis(since_now(earliest_allowed(&v, cost, params)).0.max(1));
        return (
            decision(Outcome::Denied { retry_after }, used, v.current),
            None,
        );
    }
    let current = v.current + cost;
    let new_state = (cost > 0).then_some(SlidingWindowState {
        window_ms: params.window_ms,
        window_start: Micros(v.start).ceil_millis(),
        previous: v.previous,
        current,
    });
    (decision(Outcome::Allowed, used + need, current), new_state)
}

/// Takes `cost` units at `now` even over the limit (`FORCE`): the current window's count
/// goes past the limit, and later calls wait until the weighted count (this window's, then
/// the decaying previous one's) leaves room. A debt is remembered for two windows at most,
/// as every count of this algorithm; the counts are capped at
/// [`MAX_COUNT`](limits::MAX_COUNT).
pub fn force(
    state: Option<SlidingWindowState>,
    now: Micros,
    params: &SlidingWindowParams,
    cost: u64,
) -> (Decision, Option<SlidingWindowState>) {
    let (probe, _) = check(state, now, params, cost);
    if probe.is_allowed() || cost == 0 {
        return check(state, now, params, cost);
    }
    let v = view(state, now, params);
    let current = v.current.saturating_add(cost).min(limits::MAX_COUNT);
    let decision = Decision {
        outcome: Outcome::Allowed,
        limit: params.limit,
        remaining: 0,
        reset_after: Micros(idle_at(&v, current, params.window_us()).saturating_sub(now.0))
            .ceil_millis(),
    };
    let state = SlidingWindowState {
        window_ms: params.window_ms,
        window_start: Micros(v.start).ceil_millis(),
        previous: v.previous,
        current,
    };
    (decision, Some(state))
}

/// Gives back up to `amount` units taken earlier (RL.REFUND).
///
/// Only units of the current window can be given back: once the window has moved on, the
/// units taken in it are part of the decaying previous count and a refund is a no-op
/// (best effort). Returns how many units went back and the state to store, if any.
pub fn refund(
    state: Option<SlidingWindowState>,
    now: Micros,
    params: &SlidingWindowParams,
    amount: u64,
) -> (u64, Option<SlidingWindowState>) {
    let Some(stored) = state else {
        return (0, None);
    };
    let v = view(Some(stored), now, params);
    let refunded = v.current.min(amount);
    if refunded == 0 || stored.window_ms != params.window_ms {
        return (0, None);
    }
    let new_state = SlidingWindowState {
        window_ms: params.window_ms,
        window_start: Micros(v.start).ceil_millis(),
        previous: v.previous,
        current: v.current - refunded,
    };
    (refunded, Some(new_state))
}

#[inline(always)]
fn view(state: Option<SlidingWindowState>, now: Micros, params: &SlidingWindowParams) -> View {
    let window = params.window_us();
    let align = |t: u64| t - t % window;
    let fresh = |at: u64, previous, current| View {
        start: align(at),
        at,
        previous,
        current,
    };
    let Some(s) = state else {
        return fresh(now.0, 0, 0);
    };
    let stored_start = s.window_start.as_micros().0;
    if s.window_ms != params.window_ms {
        let old_window = s.window_ms.max(1) * 1000;
        let at = now.0.max(stored_start);
        let old_start = at - at % old_window;
        let (previous, current) = match old_start.checked_sub(stored_start) {
            Some(0) => (s.previous, s.current),
            Some(d) if d == old_window => (s.current, 0),
            _ => (0, 0),
        };
        let old = u128::from(old_window);
        let elapsed = u128::from(at - old_start);
        let estimate =
            (u128::from(previous) * (old - elapsed) + u128::from(current) * old).div_ceil(old);
        return fresh(at, 0, u64::try_from(estimate).unwrap_or(u64::MAX));
    }
    // A clock that stepped back is treated as standing still at the stored window's start.
    let at = now.0.max(stored_start);
    let start = align(at);
    let (previous, current) = match start - stored_start {
        0 => (s.previous, s.current),
        d if d == window => (s.current, 0),
        _ => (0, 0),
    };
    View {
        start,
        at,
        previous,
        current,
    }
}

/// The instant (µs) at which the count reaches zero, given `current` units in this window.
fn idle_at(v: &View, current: u64, window: u64) -> u64 {
    if current > 0 {
        v.start.saturating_add(2 * window)
    } else if v.previous > 0 {
        v.start.saturating_add(window)
    } else {
        0
    }
}

/// The earliest instant (µs) at which `cost` fits, with no other traffic. Needs `cost <= limit`.
fn earliest_allowed(v: &View, cost: u64, params: &SlidingWindowParams) -> u64 {
    let window = u128::from(params.window_us());
    let limit = params.limit;
    // Later in this window, as the previous window's weight decays:
    // previous x (window - e) <= (limit - current - cost) x window.
    if v.previous > 0 {
        if let Some(spare) = limit.checked_sub(v.current.saturating_add(cost)) {
            let decay_needed =
                window - (u128::from(spare) * window / u128::from(v.previous)).min(window);
            if decay_needed < window {
                let at = v
                    .start
                    .saturating_add(u64::try_from(decay_needed).unwrap_or(u64::MAX));
                return at.max(v.at);
            }
        }
    }
    // Next window: this window's count becomes the previous one and decays:
    // current x (window - e) <= (limit - cost) x window.
    let next = u128::from(v.start) + window;
    let spare = u128::from(limit - cost) * window;
    let decay_needed = if v.current == 0 {
        0
    } else {
        window - (spare / u128::from(v.current)).min(window)
    };
    u64::try_from(next + decay_needed).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits;
    use crate::promises::{self, Model};
    use crate::scenario::{retry_ms, wait_is_exact};
    use proptest::prelude::*;

    impl Model for SlidingWindow {
        fn params_of(limit: u64) -> Self::Params {
            params(limit, 1_000)
        }

        fn arb_params() -> BoxedStrategy<SlidingWindowParams> {
            (1u64..100, 1u64..10_000)
                .prop_map(|(limit, ms)| params(limit, ms))
                .boxed()
        }

        /// The current window's count never passes `limit` (the previous window's weight
        /// only lowers it), so at most `limit` in each window the span touches.
        fn budget(p: &SlidingWindowParams, span_us: u64) -> u128 {
            u128::from(p.limit) * u128::from(span_us / p.window_us() + 2)
        }
    }

    fn params(limit: u64, window_ms: u64) -> SlidingWindowParams {
        SlidingWindowParams::new(limit, window_ms).unwrap()
    }

    #[test]
    fn the_seed_formula_with_numbers() {
        // limit 10 per 1000 ms. 8 units in window [0, 1000), then at 1250 ms the previous
        // window weighs 0.75: count = 8 x 0.75 = 6, so 4 units fit and a 5th does not.
        let p = params(10, 1_000);
        let (_, s) = check(None, Micros(100_000), &p, 8);
        let (d, s2) = check(s, Micros(1_250_000), &p, 4);
        assert!(d.is_allowed());
        assert_eq!(d.remaining, 0);
        assert_eq!(d.reset_after, Millis(3_000 - 1_250));
        let (d, _) = check(s2, Micros(1_250_000), &p, 1);
        // 8 x (1 - e/1000) + 4 + 1 <= 10 needs e >= 375 ms: 125 ms from now.
        assert_eq!(retry_ms(&d), 125);
        assert_eq!(d.remaining, 0);
        let (d, _) = check(s2, Micros(1_375_000), &p, 1);
        assert!(d.is_allowed());
        let (d, _) = check(s2, Micros(1_374_999), &p, 1);
        assert!(!d.is_allowed());
    }

    #[test]
    fn remaining_is_the_largest_cost_that_fits() {
        let p = params(10, 1_000);
        let (_, s) = check(None, Micros(0), &p, 7);
        // At 1500 ms: 7 x 0.5 = 3.5 used, 6.5 free: 6 whole units.
        let (d, _) = check(s, Micros(1_500_000), &p, 0);
        assert_eq!(d.remaining, 6);
        assert!(check(s, Micros(1_500_000), &p, 6).0.is_allowed());
        assert!(!check(s, Micros(1_500_000), &p, 7).0.is_allowed());
    }

    #[test]
    fn full_current_window_waits_for_the_next() {
        let p = params(5, 1_000);
        let (_, s) = check(None, Micros(200_000), &p, 5);
        let (d, _) = check(s, Micros(200_000), &p, 1);
        // At 1000 + e: 5 x (1000 - e)/1000 + 1 <= 5 needs e >= 200 ms.
        assert_eq!(retry_ms(&d), 1_000);
        let (d, _) = check(s, Micros(200_000), &p, 5);
        // 5 x (1 - e) + 5 <= 5 only when the previous weight is zero: at 2000 ms.
        assert_eq!(retry_ms(&d), 1_800);
        let (d, _) = check(s, Micros(200_000), &p, 6);
        assert_eq!(retry_ms(&d), -1);
    }

    #[test]
    fn windows_older_than_two_are_forgotten() {
        let p = params(5, 1_000);
        let (_, s) = check(None, Micros(0), &p, 5);
        let (d, _) = check(s, Micros(2_000_000), &p, 5);
        assert!(d.is_allowed());
        let (d, _) = check(s, Micros(10_000_000), &p, 0);
        assert_eq!((d.remaining, d.reset_after), (5, Millis(0)));
    }

    #[test]
    fn clock_stepping_back_counts_as_standing_still() {
        let p = params(5, 1_000);
        let (_, s) = check(None, Micros(5_500_000), &p, 5);
        let (d, s2) = check(s, Micros(1_000_000), &p, 1);
        assert!(!d.is_allowed());
        assert!(s2.is_none());
    }

    #[test]
    fn changing_the_window_keeps_the_count() {
        let (_, s) = check(None, Micros(0), &params(10, 1_000), 8);
        let (d, _) = check(s, Micros(500_000), &params(10, 60_000), 0);
        assert_eq!(d.remaining, 2);
    }

    #[test]
    fn refund_only_touches_the_current_window() {
        promises::refund_only_touches_the_current_window::<SlidingWindow>(Micros(1_100_000));
    }

    #[test]
    fn largest_parameters_do_not_overflow() {
        let max = limits::MAX_COUNT;
        let p = params(max, limits::MAX_DURATION_MS);
        let (d, s) = check(None, Micros(u64::MAX - 1), &p, max);
        assert!(d.is_allowed());
        let (d, _) = check(s, Micros(u64::MAX - 1), &p, max);
        assert!(!d.is_allowed());
        let corrupt = SlidingWindowState {
            window_ms: 1,
            window_start: Millis(u64::MAX / 1000),
            previous: u64::MAX,
            current: u64::MAX,
        };
        let _ = check(Some(corrupt), Micros(u64::MAX), &params(max, 1), max);
        let _ = check(Some(corrupt), Micros(0), &params(max, 7), 1);
    }

    proptest! {
        /// Against the formula in exact rationals: the decision, `remaining` and the retry
        /// promise (waiting `retry_after` is enough, 1 ms less is not).
        #[test]
        fn matches_the_formula_and_retry_after_is_exact(
            limit in 1u64..100,
            window_ms in 1u64..10_000,
            calls in prop::collection::vec((0u64..5_000_000, 0u64..40), 1..100),
        ) {
            let p = params(limit, window_ms);
            let w = u128::from(window_ms) * 1000;
            let mut state: Option<SlidingWindowState> = None;
            let mut now = 0u64;
            // Reference: counts per window index.
            let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
            for (step, cost) in calls {
                now += step;
                let idx = now / (window_ms * 1000);
                let prev = idx.checked_sub(1).and_then(|i| per_window.get(&i)).copied().unwrap_or(0);
                let cur = per_window.get(&idx).copied().unwrap_or(0);
                let e = u128::from(now) % w;
                let used = u128::from(prev) * (w - e) + u128::from(cur) * w;
                let expect = cost <= limit && used + u128::from(cost) * w <= u128::from(limit) * w;
                let (d, next) = check(state, Micros(now), &p, cost);
                prop_assert_eq!(d.is_allowed(), expect);
                let after = if expect { used + u128::from(cost) * w } else { used };
                prop_assert_eq!(u128::from(d.remaining), (u128::from(limit) * w).saturating_sub(after) / w);
                wait_is_exact(&d, &state, now, |s, t| check(s, t, &p, cost).0)?;
                if expect {
                    *per_window.entry(idx).or_insert(0) += cost;
                }
                state = next.or(state);
            }
        }
    }
}
