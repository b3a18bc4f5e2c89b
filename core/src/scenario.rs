//! Table-driven scenarios for the limiter tests: one call per row, with the reply it must
//! get, run in order against one state (as redis-cell's `RateLimitCase` table reads).

use proptest::prelude::*;

use crate::decision::{Decision, Outcome};
use crate::time::Micros;

/// One call of a scripted scenario: at `now`, take `cost`; expect this reply.
pub struct Case {
    pub now: Micros,
    pub cost: u64,
    pub allowed: bool,
    pub remaining: u64,
    pub retry_after_ms: i64,
    pub reset_after_ms: u64,
}

/// A row whose instant is in milliseconds.
pub const fn case(
    now_ms: u64,
    cost: u64,
    allowed: bool,
    remaining: u64,
    retry_after_ms: i64,
    reset_after_ms: u64,
) -> Case {
    case_us(
        now_ms * 1000,
        cost,
        allowed,
        remaining,
        retry_after_ms,
        reset_after_ms,
    )
}

/// A row whose instant is in microseconds (the other fields as in [`case`]).
#[rustfmt::skip]
pub const fn case_us(now_us: u64, cost: u64, ok: bool, left: u64, retry: i64, reset: u64) -> Case {
    Case { now: Micros(now_us), cost, allowed: ok, remaining: left, retry_after_ms: retry, reset_after_ms: reset }
}

/// `retry_after_ms` as the reply shows it: 0 allowed, -1 never.
pub fn retry_ms(d: &Decision) -> i64 {
    match d.outcome {
        Outcome::Allowed => 0,
        Outcome::Denied { retry_after } => retry_after.0 as i64,
        Outcome::Never => -1,
    }
}

/// Runs the rows in order through `check`, keeping each written state, and returns the
/// last state.
pub fn run<S: Clone>(
    cases: &[Case],
    check: impl Fn(Option<S>, Micros, u64) -> (Decision, Option<S>),
) -> Option<S> {
    let mut state = None;
    for (i, c) in cases.iter().enumerate() {
        let (d, next) = check(state.clone(), c.now, c.cost);
        assert_eq!(
            (d.is_allowed(), d.remaining, retry_ms(&d), d.reset_after.0),
            (c.allowed, c.remaining, c.retry_after_ms, c.reset_after_ms),
            "case {i} at {} us",
            c.now.0
        );
        if next.is_some() {
            state = next;
        }
    }
    state
}

/// The promise of a denial's `retry_after`: the same call (`call(state, instant)`, no other
/// traffic) is allowed that long after `now`, and not a millisecond sooner. Other outcomes pass.
pub fn wait_is_exact<S: Clone>(
    d: &Decision,
    state: &Option<S>,
    now: u64,
    call: impl Fn(Option<S>, Micros) -> Decision,
) -> Result<(), TestCaseError> {
    if let Outcome::Denied { retry_after } = d.outcome {
        let wait = retry_after.as_micros().0;
        prop_assert!(call(state.clone(), Micros(now + wait)).is_allowed());
        prop_assert!(!call(state.clone(), Micros(now + wait - 1_000)).is_allowed());
    }
    Ok(())
}
