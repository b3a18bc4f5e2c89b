//! Every algorithm under a clock that jumps backwards and far forwards: no panic, and never
//! more admissions than a model on a monotonic clock would allow.
//!
//! Each test feeds one limiter a random sequence of (clock step, cost) calls, keeps what the
//! core decided, and then judges the admitted calls against the algorithm's budget at
//! monotonic instants:
//! - buckets, windows and the log: `m` = the largest clock reading the limiter has *stored*
//!   (readings of calls that wrote a state) or the current one. A call that writes nothing
//!   (a denial, a cost that can never pass, COST 0) leaves no trace, in the core as on the
//!   server, so its reading cannot count. This is the README's promise: "if the server clock
//!   steps backwards, no time passes for the limiter until it catches up". A limiter that
//!   refilled, reopened a window or let an entry leave early because the clock stepped back
//!   breaks these bounds.
//! - leases (RL.CONCURRENCY) are durations a holder owns, so they are judged on *elapsed*
//!   time: forward moves of the clock are time passing, backward steps take no time. A lease
//!   granted before a step back must not end early because of it.

use proptest::prelude::*;
use redis_rl_core::concurrency::{self, ConcurrencyParams, Release};
use redis_rl_core::fixed_window::{self, FixedWindowParams};
use redis_rl_core::gcra::{self, GcraParams};
use redis_rl_core::sliding_log::{self, SlidingLogParams};
use redis_rl_core::sliding_window::{self, SlidingWindowParams};
use redis_rl_core::token_bucket::{self, TokenBucketParams};
use redis_rl_core::{Decision, Micros};

/// A realistic start: 2026 in microseconds since the epoch.
const START_US: u64 = 1_780_000_000_000_000;

/// `i64::MAX` microseconds: about the year 294,000.
const LATEST_US: u64 = i64::MAX as u64;

/// One move of the simulated clock.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A little forward (up to 3 s), as between ordinary calls.
    Forward(u64),
    /// Far forward (up to about 30 years).
    Far(u64),
    /// Back by up to 30 years.
    Back(u64),
    /// Back to the epoch.
    Zero,
    /// To the last instant a server clock can show (`i64::MAX` µs; the extreme `u64::MAX`
    /// has its own test below).
    Max,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0u64..3_000_000).prop_map(Step::Forward),
        1 => (0u64..1_000_000_000_000_000).prop_map(Step::Far),
        3 => prop_oneof![0u64..5_000_000, 0u64..1_000_000_000_000_000].prop_map(Step::Back),
        1 => Just(Step::Zero),
        1 => Just(Step::Max),
    ]
}

/// The clock readings for `steps`.
fn clock(steps: &[Step]) -> Vec<Micros> {
    elapsed(steps).into_iter().map(|(now, _)| now).collect()
}

/// The clock readings for `steps`, and the time elapsed at each: forward moves are time
/// passing, backward steps take none.
fn elapsed(steps: &[Step]) -> Vec<(Micros, u128)> {
    let mut now = START_US;
    let mut elapsed: u128 = 0;
    steps
        .iter()
        .map(|s| {
            let next = match *s {
                Step::Forward(d) | Step::Far(d) => now.saturating_add(d),
                Step::Back(d) => now.saturating_sub(d),
                Step::Zero => 0,
                Step::Max => LATEST_US,
            };
            elapsed += u128::from(next.saturating_sub(now));
            now = next;
            (Micros(now), elapsed)
        })
        .collect()
}

/// Runs `check` over the calls and returns `(monotonic instant, cost)` of each admitted call.
fn admitted<S: Clone>(
    calls: &[(Step, u64)],
    mut check: impl FnMut(Option<S>, Micros, u64) -> (Decision, Option<S>),
) -> Vec<(u64, u64)> {
    let steps: Vec<Step> = calls.iter().map(|c| c.0).collect();
    let mut state = None;
    let mut stored_max = 0;
    let mut out = Vec::new();
    for (now, (_, cost)) in clock(&steps).into_iter().zip(calls) {
        let m = stored_max.max(now.0);
        let (decision, new) = check(state.clone(), now, *cost);
        if decision.is_allowed() {
            out.push((m, *cost));
        }
        if new.is_some() {
            stored_max = m;
        }
        // The store keeps the old value when nothing is written.
        state = new.or(state);
    }
    out
}

/// A limiter that holds `capacity` units and regains `rate` every `period_us`: between two
/// admitted calls at monotonic `a <= b`, the units admitted at instants in `[a, b]` are at
/// most `capacity + rate * (b - a) / period_us`.
fn check_bucket(admitted: &[(u64, u64)], capacity: u64, rate: u64, period_us: u64) {
    // A call that wrote nothing may carry a later instant than the next one: sort, so that
    // every span [a, b] is a run of consecutive entries.
    let mut admitted = admitted.to_vec();
    admitted.sort_by_key(|&(m, _)| m);
    for (i, &(a, _)) in admitted.iter().enumerate() {
        let mut sum: u128 = 0;
        for &(b, cost) in &admitted[i..] {
            sum += u128::from(cost);
            let allowance =
                u128::from(capacity) * u128::from(period_us) + u128::from(rate) * u128::from(b - a);
            assert!(
                sum * u128::from(period_us) <= allowance,
                "{sum} units admitted in [{a}, {b}] us, budget {capacity} + {rate}/{period_us} us: {admitted:?}"
            );
        }
    }
}

/// Units admitted at monotonic instants in `(b - window, b]`, for every admitted `b`, are at
/// most `limit`.
fn check_span(admitted: &[(u64, u64)], limit: u64, window_us: u64) {
    for &(b, _) in admitted {
        let sum: u64 = admitted
            .iter()
            .filter(|(a, _)| *a <= b && a.saturating_add(window_us) > b)
            .map(|(_, c)| c)
            .sum();
        assert!(
            sum <= limit,
            "{sum} units in the window ending at {b} us, limit {limit}: {admitted:?}"
        );
    }
}

fn calls(max_cost: u64) -> impl Strategy<Value = Vec<(Step, u64)>> {
    prop::collection::vec((step(), 0..=max_cost), 1..80)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_never_gains_from_clock_steps(
        (capacity, refill, refill_ms) in (1u64..20, 1u64..20, 1u64..5_000),
        calls in calls(22),
    ) {
        let params = TokenBucketParams::new(capacity, refill, refill_ms).unwrap();
        let ok = admitted(&calls, |s, now, cost| token_bucket::check(s, now, &params, cost));
        check_bucket(&ok, capacity, refill, refill_ms * 1000);
    }

    #[test]
    fn gcra_never_gains_from_clock_steps(
        (limit, period_ms, burst) in (1u64..20, 1u64..5_000, 1u64..25),
        calls in calls(27),
    ) {
        let params = GcraParams::new(limit, period_ms, Some(burst)).unwrap();
        let ok = admitted(&calls, |s, now, cost| gcra::check(s, now, &params, cost));
        check_bucket(&ok, burst, limit, period_ms * 1000);
    }

    #[test]
    fn fixed_window_never_reopens_a_window_on_clock_steps(
        (limit, window_ms) in (1u64..20, 1u64..5_000),
        calls in calls(22),
    ) {
        let params = FixedWindowParams::new(limit, window_ms).unwrap();
        let ok = admitted(&calls, |s, now, cost| fixed_window::check(s, now, &params, cost));
        let window_us = window_ms * 1000;
        for &(m, _) in &ok {
            let sum: u64 = ok.iter().filter(|(a, _)| a / window_us == m / window_us).map(|(_, c)| c).sum();
            prop_assert!(sum <= limit, "{} units in window {}, limit {}: {:?}", sum, m / window_us, limit, ok);
        }
    }

    #[test]
    fn sliding_window_never_counts_less_on_clock_steps(
        (limit, window_ms) in (1u64..20, 1u64..5_000),
        calls in calls(22),
    ) {
        let params = SlidingWindowParams::new(limit, window_ms).unwrap();
        let ok = admitted(&calls, |s, now, cost| sliding_window::check(s, now, &params, cost));
        // On monotonic time, at each admitted call (window k, `elapsed` into it), the
        // previous window's units weighted by what is left of it plus this window's units
        // so far, this call included, fit the limit.
        let w = u128::from(window_ms * 1000);
        for (j, &(m, _)) in ok.iter().enumerate() {
            let k = u128::from(m) / w;
            let elapsed = u128::from(m) % w;
            let units = |window: u128, upto: usize| -> u128 {
                ok[..upto].iter().filter(|(a, _)| u128::from(*a) / w == window).map(|(_, c)| u128::from(*c)).sum()
            };
            let current = units(k, j + 1);
            let previous = if k == 0 { 0 } else { units(k - 1, j + 1) };
            prop_assert!(
                previous * (w - elapsed) + current * w <= u128::from(limit) * w,
                "at {} us: previous {} current {} limit {}: {:?}", m, previous, current, limit, ok
            );
        }
    }

    #[test]
    fn sliding_log_never_drops_entries_early_on_clock_steps(
        (limit, window_ms) in (1u64..20, 1u64..5_000),
        calls in calls(22),
    ) {
        let params = SlidingLogParams::new(limit, window_ms).unwrap();
        let ok = admitted(&calls, |s, now, cost| sliding_log::check(s, now, &params, cost));
        check_span(&ok, limit, window_ms * 1000);
    }

    #[test]
    fn concurrency_never_ends_leases_early_on_clock_steps(
        (limit, lease_ms) in (1u64..8, 1u64..5_000),
        ops in prop::collection::vec((step(), any::<bool>(), any::<prop::sample::Index>()), 1..80),
    ) {
        let params = ConcurrencyParams::new(limit, lease_ms).unwrap();
        let steps: Vec<Step> = ops.iter().map(|o| o.0).collect();
        let mut state = None;
        // The model: leases the core granted, each live for `lease_ms` of elapsed time.
        let mut live: Vec<(Vec<u8>, u128)> = Vec::new();
        let mut granted: Vec<Vec<u8>> = Vec::new();
        for (i, ((now, m), (_, is_release, which))) in elapsed(&steps).into_iter().zip(&ops).enumerate() {
            live.retain(|(_, end)| *end > m);
            if *is_release && !granted.is_empty() {
                let id = granted[which.index(granted.len())].clone();
                // NotHeld writes nothing: the stored state stays.
                if let Release::Released(s) = concurrency::release(state.clone(), now, &id) {
                    state = s;
                    live.retain(|(held, _)| *held != id);
                }
                continue;
            }
            let id = format!("lease-{i}").into_bytes();
            let (decision, new) = concurrency::acquire(state.clone(), now, &params, &id);
            if decision.is_allowed() {
                live.push((id.clone(), m + u128::from(lease_ms * 1000)));
                granted.push(id);
                prop_assert!(
                    live.len() as u64 <= limit,
                    "{} leases live at {} us, limit {}", live.len(), m, limit
                );
            }
            state = new.or(state);
        }
    }
}

/// Any clock reading a `u64` can hold, the edges often: 0, around `i64::MAX`, around
/// `u64::MAX` (a server clock set beyond the year 586,000 saturates there).
fn any_reading() -> impl Strategy<Value = Micros> {
    prop_oneof![
        2 => any::<u64>(),
        1 => (0u64..2_000_000_000).prop_map(|d| u64::MAX - d),
        1 => (0u64..2_000_000_000).prop_map(|d| LATEST_US - d),
        1 => 0u64..2_000_000_000,
    ]
    .prop_map(Micros)
}

/// Calls (a reading, a cost, whether it is a refund) at readings anywhere in `u64`: no
/// panic, whatever the order.
fn survive<S: Clone>(
    calls: &[(Micros, u64, bool)],
    mut check: impl FnMut(Option<S>, Micros, u64) -> (Decision, Option<S>),
    mut refund: impl FnMut(Option<S>, Micros, u64) -> (u64, Option<S>),
) {
    let mut state = None;
    for &(now, cost, is_refund) in calls {
        let new = if is_refund {
            refund(state.clone(), now, cost).1
        } else {
            check(state.clone(), now, cost).1
        };
        state = new.or(state);
    }
}

fn extreme_calls(max_cost: u64) -> impl Strategy<Value = Vec<(Micros, u64, bool)>> {
    prop::collection::vec(
        (any_reading(), 0..=max_cost, prop::bool::weighted(0.2)),
        1..40,
    )
}

/// Small parameters, or the documented maxima.
fn count() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..20, Just(redis_rl_core::limits::MAX_COUNT)]
}

fn duration_ms() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..5_000, Just(redis_rl_core::limits::MAX_DURATION_MS)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_survives_any_clock_reading(
        (capacity, refill, refill_ms) in (count(), count(), duration_ms()),
        calls in extreme_calls(25),
    ) {
        let p = TokenBucketParams::new(capacity, refill, refill_ms).unwrap();
        survive(&calls, |s, n, c| token_bucket::check(s, n, &p, c), |s, n, c| token_bucket::refund(s, n, &p, c));
    }

    #[test]
    fn gcra_survives_any_clock_reading(
        (limit, period_ms, burst) in (count(), duration_ms(), count()),
        calls in extreme_calls(25),
    ) {
        let p = GcraParams::new(limit, period_ms, Some(burst)).unwrap();
        survive(&calls, |s, n, c| gcra::check(s, n, &p, c), |s, n, c| gcra::refund(s, n, &p, c));
    }

    #[test]
    fn fixed_window_survives_any_clock_reading(
        (limit, window_ms) in (count(), duration_ms()),
        calls in extreme_calls(25),
    ) {
        let p = FixedWindowParams::new(limit, window_ms).unwrap();
        survive(&calls, |s, n, c| fixed_window::check(s, n, &p, c), |s, n, c| fixed_window::refund(s, n, &p, c));
    }

    #[test]
    fn sliding_window_survives_any_clock_reading(
        (limit, window_ms) in (count(), duration_ms()),
        calls in extreme_calls(25),
    ) {
        let p = SlidingWindowParams::new(limit, window_ms).unwrap();
        survive(&calls, |s, n, c| sliding_window::check(s, n, &p, c), |s, n, c| sliding_window::refund(s, n, &p, c));
    }

    #[test]
    fn sliding_log_survives_any_clock_reading(
        (limit, window_ms) in (1u64..20, duration_ms()),
        calls in extreme_calls(25),
    ) {
        let p = SlidingLogParams::new(limit, window_ms).unwrap();
        survive(&calls, |s, n, c| sliding_log::check(s, n, &p, c), |s, n, c| sliding_log::refund(s, n, &p, c));
    }

    #[test]
    fn concurrency_survives_any_clock_reading(
        (limit, lease_ms) in (1u64..8, duration_ms()),
        calls in prop::collection::vec((any_reading(), 0u8..6, any::<bool>()), 1..40),
    ) {
        let p = ConcurrencyParams::new(limit, lease_ms).unwrap();
        let mut state = None;
        for (now, id, is_release) in calls {
            let id = [id];
            if is_release {
                if let Release::Released(s) = concurrency::release(state.clone(), now, &id) {
                    state = s;
                }
            } else {
                state = concurrency::acquire(state.clone(), now, &p, &id).1.or(state);
            }
        }
    }
}

/// A clock saturated at `u64::MAX` µs (what `src/clock.rs` returns for a wall clock beyond
/// the year 586,000), a full previous window and a denied call early in the last window:
/// the instant the sliding window reports as "allowed again" lies beyond `u64::MAX`.
#[test]
fn sliding_window_denial_in_the_last_window_before_u64_max() {
    // u64::MAX % 10_000 = 1615: the last window starts 1615 us before u64::MAX.
    let p = SlidingWindowParams::new(6, 10).unwrap();
    let (d, s) = sliding_window::check(None, Micros(u64::MAX - 1615 - 1), &p, 6);
    assert!(d.is_allowed());
    let (d, _) = sliding_window::check(s, Micros(u64::MAX), &p, 1);
    // The previous window's 6 units decay below 5 within the 10 ms window.
    match d.outcome {
        redis_rl_core::Outcome::Denied { retry_after } => {
            assert!((1..=10).contains(&retry_after.0), "{d:?}")
        }
        _ => panic!("{d:?}"),
    }
}
