//! The promises every rate limiter keeps, written once against [`RateLimiter`] and checked
//! for each one in the [registry](crate::registry) (a new algorithm without a [`Model`] does
//! not compile):
//!
//! - never more than the budget in any span of time;
//! - a denial's `retry_after` is exact: waiting it suffices, a millisecond less does not;
//! - after `reset_after` the limiter is idle (the same as a missing key);
//! - a refund right after a take gives every unit back and restores the decision;
//! - a partial grant (`UPTO`, [`upto`]) takes the most units `check` would allow, at most
//!   the cost, stays within the budget, writes nothing when it grants nothing, and a peek
//!   (the same call with its state dropped) tells the grant of the real call.

use proptest::prelude::*;

use crate::algorithm::{upto, RateLimiter};
use crate::decision::{Decision, Outcome};
use crate::scenario::wait_is_exact;
use crate::time::{Micros, Millis};

/// What the generic tests need to know of an algorithm besides its trait.
pub trait Model: RateLimiter {
    /// Parameters for random tests: small, so that random calls reach the limits.
    fn arb_params() -> BoxedStrategy<Self::Params>;

    /// The most units the limiter may admit within any span of `span_us` microseconds
    /// (calls at both ends included), starting from any state.
    fn budget(params: &Self::Params, span_us: u64) -> u128;

    /// Parameters `limit`-like 10 per 1000 ms (capacity or burst 10).
    fn limit_ten_per_second() -> Self::Params {
        Self::params_of(10)
    }

    /// The same with a limit of 1.
    fn limit_one() -> Self::Params {
        Self::params_of(1)
    }

    /// `limit` units per 1000 ms (capacity or burst `limit`).
    fn params_of(limit: u64) -> Self::Params;
}

/// Random calls: (µs since the previous call, cost).
pub fn calls() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..2_000, 0u64..3_000_000],
            prop_oneof![Just(1u64), 0u64..12, 0u64..60],
        ),
        1..150,
    )
}

/// Runs `calls` from a missing key, calling `each(state before, now, cost, decision)`;
/// returns the last state and instant.
fn run<A: RateLimiter>(
    params: &A::Params,
    calls: &[(u64, u64)],
    mut each: impl FnMut(&Option<A::State>, u64, u64, &Decision) -> Result<(), TestCaseError>,
) -> Result<(Option<A::State>, u64), TestCaseError> {
    let mut state = None;
    let mut now = 0u64;
    for &(step, cost) in calls {
        now += step;
        let (d, next) = A::check(state.clone(), Micros(now), params, cost);
        each(&state, now, cost, &d)?;
        state = next.or(state);
    }
    Ok((state, now))
}

/// The admitted calls of `calls` (instant, cost), zero costs left out.
pub fn admitted<A: RateLimiter>(params: &A::Params, calls: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut admitted = Vec::new();
    let _ = run::<A>(params, calls, |_, now, cost, d| {
        if d.is_allowed() && cost > 0 {
            admitted.push((now, cost));
        }
        Ok(())
    });
    admitted
}

/// In every span between two admissions, the units admitted stay within the budget.
pub fn never_admits_more_than_the_budget<A: Model>(
    params: &A::Params,
    calls: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let admitted = admitted::<A>(params, calls);
    for (i, &(from, _)) in admitted.iter().enumerate() {
        let mut taken = 0u128;
        for &(to, cost) in &admitted[i..] {
            taken += u128::from(cost);
            prop_assert!(taken <= A::budget(params, to - from));
        }
    }
    Ok(())
}

/// Waiting exactly `retry_after` is enough, and 1 ms less is not; only a cost above the
/// limit is never possible.
pub fn retry_after_is_exact<A: RateLimiter>(
    params: &A::Params,
    calls: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    run::<A>(params, calls, |state, now, cost, d| {
        wait_is_exact(d, state, now, |s, t| A::check(s, t, params, cost).0)?;
        match d.outcome {
            Outcome::Denied { .. } => {}
            Outcome::Never => prop_assert!(cost > d.limit),
            Outcome::Allowed => prop_assert!(cost <= d.limit),
        }
        Ok(())
    })
    .map(|_| ())
}

/// After the last call's `reset_after` the limiter is idle: the whole limit is left and
/// nothing is to reset, as with a missing key; a millisecond earlier it is not yet idle.
pub fn reset_after_reaches_the_idle_state<A: RateLimiter>(
    params: &A::Params,
    calls: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let mut last = None;
    let (state, now) = run::<A>(params, calls, |_, _, _, d| {
        last = Some(*d);
        Ok(())
    })?;
    let Some(d) = last else { return Ok(()) };
    let idle = Micros(now + d.reset_after.as_micros().0);
    let (later, _) = A::check(state.clone(), idle, params, 0);
    prop_assert_eq!(later.remaining, later.limit);
    prop_assert_eq!(later.reset_after, Millis(0));
    if d.reset_after > Millis(0) {
        let before = Micros(idle.0 - 1_000);
        prop_assert!(A::check(state, before, params, 0).0.reset_after > Millis(0));
    }
    Ok(())
}

/// Taking `cost` units and refunding them at the same instant gives back all of them and
/// leaves the limiter deciding as before the take.
pub fn refund_round_trips<A: RateLimiter>(
    params: &A::Params,
    calls: &[(u64, u64)],
    cost: u64,
) -> Result<(), TestCaseError> {
    let (state, now) = run::<A>(params, calls, |_, _, _, _| Ok(()))?;
    let now = Micros(now);
    let (before, _) = A::check(state.clone(), now, params, 0);
    let (d, taken) = A::check(state, now, params, cost);
    let Some(taken) = taken else {
        prop_assert!(!d.is_allowed() || cost == 0);
        return Ok(());
    };
    let (refunded, after) = A::refund(Some(taken.clone()), now, params, cost);
    prop_assert_eq!(refunded, cost);
    prop_assert_eq!(A::check(after.or(Some(taken)), now, params, 0).0, before);
    Ok(())
}

/// Random calls through [`upto`] (as in [`calls`], with costs up to 60 against limits
/// under 100): at each one, the grant is the largest `k <= cost` that `check(k)` allows,
/// with `check(granted)`'s decision and state; granting nothing writes nothing and is
/// denied with the exact wait for one unit (a cost of 0 is the plain zero-cost check); a
/// peek (the same call, its state dropped) grants what the real call then grants. Over the
/// whole sequence the granted units stay within the budget.
pub fn partial_grants_are_the_largest_allowed<A: Model>(
    params: &A::Params,
    calls: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let mut state = None;
    let mut now = 0u64;
    let mut granted_at = Vec::new();
    for &(step, cost) in calls {
        now += step;
        let t = Micros(now);
        let peek = upto::<A>(state.clone(), t, params, cost);
        let (d, granted, next) = upto::<A>(state.clone(), t, params, cost);
        prop_assert_eq!((peek.0, peek.1), (d, granted));
        prop_assert!(granted <= cost);
        let allows = |k: u64| A::check(state.clone(), t, params, k).0.is_allowed();
        let largest = (0..=cost).rev().find(|&k| allows(k)).unwrap_or(0);
        prop_assert_eq!(granted, largest);
        if cost == 0 {
            prop_assert_eq!(d, A::check(state.clone(), t, params, 0).0);
            prop_assert!(next.is_none());
        } else if granted == 0 {
            prop_assert!(!d.is_allowed());
            prop_assert!(next.is_none());
            prop_assert_eq!(d, A::check(state.clone(), t, params, 1).0);
            wait_is_exact(&d, &state, now, |s, at| A::check(s, at, params, 1).0)?;
        } else {
            let (expected, expected_next) = A::check(state.clone(), t, params, granted);
            prop_assert!(expected.is_allowed());
            prop_assert_eq!(d, expected);
            prop_assert_eq!(&next, &expected_next);
            granted_at.push((now, granted));
        }
        state = next.or(state);
    }
    for (i, &(from, _)) in granted_at.iter().enumerate() {
        let mut taken = 0u128;
        for &(to, granted) in &granted_at[i..] {
            taken += u128::from(granted);
            prop_assert!(taken <= A::budget(params, to - from));
        }
    }
    Ok(())
}

/// `FORCE` (mixed at random into the calls): a forced call of a positive cost is always
/// allowed (of cost 0 it is a plain check); one that
/// `check` would have refused leaves a debt, so a call of one unit right after it is
/// refused; and the `retry_after` of every refusal stays exact, debts included.
pub fn forced_calls_leave_a_debt_later_calls_wait_for<A: RateLimiter>(
    params: &A::Params,
    calls: &[(u64, u64, bool)],
) -> Result<(), TestCaseError> {
    let mut state: Option<A::State> = None;
    let mut now = 0u64;
    for &(step, cost, forced) in calls {
        now += step;
        let t = Micros(now);
        if forced {
            let (would, _) = A::check(state.clone(), t, params, cost);
            let (d, next) = A::force(state.clone(), t, params, cost);
            if cost == 0 {
                prop_assert_eq!((d, next.is_none()), (would, true));
                continue;
            }
            prop_assert!(d.is_allowed() && next.is_some());
            if !would.is_allowed() && cost > 0 {
                prop_assert!(!A::check(next.clone(), t, params, 1).0.is_allowed());
                prop_assert_eq!(d.remaining, 0);
            }
            state = next.or(state);
        } else {
            let (d, next) = A::check(state.clone(), t, params, cost);
            wait_is_exact(&d, &state, now, |s, t| A::check(s, t, params, cost).0)?;
            state = next.or(state);
        }
    }
    Ok(())
}

/// Instantiates the promises for every rate limiter of the registry.
macro_rules! promise_tests {
    (
        limiters: [$($l:ident = $lt:ty),* $(,)?],
        others: [$($o:ident = $ot:ty),* $(,)?] $(,)?
    ) => {
        $(
            #[allow(non_snake_case)]
            mod $l {
                use super::*;

                #[test]
                fn zero_cost_and_denials_write_nothing() {
                    super::zero_cost_and_denials_write_nothing::<$lt>();
                }

                proptest! {
                    #[test]
                    fn never_admits_more_than_the_budget(p in <$lt as Model>::arb_params(), calls in calls()) {
                        super::never_admits_more_than_the_budget::<$lt>(&p, &calls)?;
                    }

                    #[test]
                    fn retry_after_is_exact(p in <$lt as Model>::arb_params(), calls in calls()) {
                        super::retry_after_is_exact::<$lt>(&p, &calls)?;
                    }

                    #[test]
                    fn reset_after_reaches_the_idle_state(p in <$lt as Model>::arb_params(), calls in calls()) {
                        super::reset_after_reaches_the_idle_state::<$lt>(&p, &calls)?;
                    }

                    #[test]
                    fn partial_grants_are_the_largest_allowed(p in <$lt as Model>::arb_params(), calls in calls()) {
                        super::partial_grants_are_the_largest_allowed::<$lt>(&p, &calls)?;
                    }

                    #[test]
                    fn forced_calls_leave_a_debt_later_calls_wait_for(
                        p in <$lt as Model>::arb_params(),
                        calls in prop::collection::vec((0u64..1_500_000, 0u64..30, prop::bool::weighted(0.3)), 1..80),
                    ) {
                        super::forced_calls_leave_a_debt_later_calls_wait_for::<$lt>(&p, &calls)?;
                    }

                    #[test]
                    fn refund_round_trips(p in <$lt as Model>::arb_params(), calls in calls(), cost in 1u64..20) {
                        super::refund_round_trips::<$lt>(&p, &calls, cost)?;
                    }
                }
            }
        )*
    };
}

crate::registry!(promise_tests);

/// A call of cost 0 and a denial write nothing (limit 1); a cost above the limit is never
/// possible. A zero-cost check of an idle limiter shows the whole limit and nothing to reset.
pub fn zero_cost_and_denials_write_nothing<A: Model>() {
    let p = A::limit_one();
    let (d, s) = A::check(None, Micros(0), &p, 0);
    assert!(d.is_allowed() && s.is_none());
    assert_eq!((d.remaining, d.reset_after), (1, Millis(0)));
    let (_, s) = A::check(None, Micros(0), &p, 1);
    let (d, s2) = A::check(s.clone(), Micros(0), &p, 1);
    assert!(!d.is_allowed() && s2.is_none());
    let (d, s3) = A::check(s, Micros(0), &p, 2);
    assert_eq!(d.outcome, Outcome::Never);
    assert!(s3.is_none());
}

/// For the window counters (limit 10 per 1000 ms): a refund gives back units of the current
/// window only, never more than were taken; at `gone` (when the units taken at 100 ms no
/// longer count in the current window) it gives back nothing.
pub fn refund_only_touches_the_current_window<A: Model>(gone: Micros) {
    let p = A::limit_ten_per_second();
    let (_, s) = A::check(None, Micros(100_000), &p, 6);
    let (refunded, s2) = A::refund(s.clone(), Micros(200_000), &p, 4);
    assert_eq!(refunded, 4);
    assert_eq!(A::check(s2.clone(), Micros(200_000), &p, 0).0.remaining, 8);
    assert_eq!(A::refund(s2, Micros(200_000), &p, 9).0, 2);
    assert_eq!(A::refund(s, gone, &p, 4), (0, None));
    assert_eq!(A::refund(None, Micros(0), &p, 4), (0, None));
}
