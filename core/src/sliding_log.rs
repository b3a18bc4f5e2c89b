//! Sliding window log: the exact sliding window.
//!
//! The state is the list of admission instants (microseconds, the server clock's
//! resolution) still inside the window, oldest first. A unit admitted at `t` counts until
//! `t + window` (exclusive), so at any instant `now` the count is the number of units
//! admitted in `(now - window, now]`, and a call is allowed when `count + cost <= limit`.
//! Nothing is estimated: no window of length `window_ms` ever holds more than `limit`
//! units, and `retry_after` is the exact moment the oldest units the call needs leave the
//! window.
//!
//! A call of cost `n` is one entry with a count, and only units inside the window are kept,
//! so a state never has more entries than `limit`. `limit` is capped at [`MAX_LIMIT`] because
//! every call reads and rewrites the whole log: its cost grows with the limit.

use crate::algorithm::{rate_limiter, Algorithm, StateValue, StateView};
use crate::decision::{Decision, Outcome};
use crate::limits::{ParamError, Range};
use crate::rate::{Numbers, RateField, Share};
use crate::registry::Kind;
use crate::time::{Micros, Millis};
use crate::window::WindowParams;

/// Largest `limit` of a log (entries are kept one per admitted call).
pub const MAX_LIMIT: u64 = 10_000;

/// Validated sliding window log parameters: `limit` (at most [`MAX_LIMIT`]) units in any
/// window of `window_ms`.
pub type SlidingLogParams = WindowParams<MAX_LIMIT>;

/// The range of `limit`: `limit must be an integer between 1 and 10000`.
pub const LIMIT: Range = SlidingLogParams::PARAMS[0];

/// The sliding window log in the [registry](crate::registry): `LOG limit window_ms`.
pub struct SlidingLog;

impl Algorithm for SlidingLog {
    const NAME: &'static str = "LOG";
    const COMMAND: &'static str = "RL.LOG";
    const LABEL: &'static str = "sliding window log";
    const TAG: u8 = b'L';
    const PARAMS: &'static [Range] = &SlidingLogParams::PARAMS;
    type Params = SlidingLogParams;
    type State = SlidingLogState;

    fn params(values: &[u64], _options: &[Option<u64>]) -> Result<Self::Params, ParamError> {
        SlidingLogParams::from_values(values)
    }

    fn numbers(p: &Self::Params) -> Numbers {
        Numbers::new(&[p.limit, p.window_ms], &[])
    }

    /// The window, the units in it now, and the stored entries with the instants (ms) of
    /// the oldest and newest (0 when empty).
    fn view(state: &Self::State, now: Micros) -> StateView {
        let at_ms = |e: Option<&LogEntry>| e.map_or(0, |e| e.at.0 / 1000);
        let entries = u64::try_from(state.entries.len()).unwrap_or(u64::MAX);
        vec![
            ("window_ms", StateValue::Int(state.window_ms)),
            ("count", StateValue::Int(state.count_at(now))),
            ("entries", StateValue::Int(entries)),
            (
                "oldest_at_ms",
                StateValue::Int(at_ms(state.entries.first())),
            ),
            ("newest_at_ms", StateValue::Int(at_ms(state.entries.last()))),
        ]
    }
}

rate_limiter!(SlidingLog {
    const RATE: &'static [RateField] = &[RateField::Limit, RateField::WindowMs];
    const SHARE: Share = Share::Count;
    // One entry per admitted unit: above 64 (1 KiB per key) the fallback keeps two weighted
    // counters of the same limit and window instead, an approximation.
    const LOCAL_EXACT_MAX: Option<(u64, Kind)> = Some((64, Kind::SlidingWindow));
});

/// Units admitted at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// When they were admitted.
    pub at: Micros,
    /// How many (at least 1).
    pub count: u64,
}

/// The stored log: admitted units, oldest first (`at` never decreases).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlidingLogState {
    /// The window the log was last written with (for RL.STATE; a call judges the
    /// instants by its own `window_ms`).
    pub window_ms: u64,
    /// The entries, oldest first.
    pub entries: Vec<LogEntry>,
}

impl SlidingLogState {
    /// Units in the log.
    pub fn total(&self) -> u64 {
        self.entries
            .iter()
            .fold(0, |sum, e| sum.saturating_add(e.count))
    }

    /// Units inside the window at `now`, judged by the window the log was written with (what
    /// a cost-0 call with that window counts).
    pub fn count_at(&self, now: Micros) -> u64 {
        let window = self.window_ms.saturating_mul(1000);
        let at = self.entries.last().map_or(now.0, |e| e.at.0.max(now.0));
        self.entries
            .iter()
            .filter(|e| e.at.0.saturating_add(window) > at)
            .fold(0, |sum, e| sum.saturating_add(e.count))
    }
}

/// Decides whether `cost` units may be taken at `now`.
///
/// Returns the decision and the state to store, if any (`None`: write nothing, for a
/// denial or a zero cost). The new state drops every entry that has left the window. A
/// missing state is an empty log. The log holds instants, not parameters, so a call with
/// another `limit` or `window_ms` simply judges the same instants by its own numbers.
///
/// A clock that stepped back behind the newest entry is treated as standing still at that
/// entry, so the log stays in order and nothing leaves the window early.
///
/// ```
/// use redis_rl_core::sliding_log::{check, SlidingLogParams};
/// use redis_rl_core::{Micros, Millis, Outcome};
/// let params = SlidingLogParams::new(2, 1_000).unwrap();
/// let (_, s) = check(None, Micros(0), &params, 1);
/// let (_, s) = check(s, Micros(300_000), &params, 1);
/// let (d, _) = check(s.clone(), Micros(500_000), &params, 1);
/// // The unit taken at 0 ms leaves the window at 1000 ms.
/// assert_eq!(d.outcome, Outcome::Denied { retry_after: Millis(500) });
/// assert!(check(s, Micros(1_000_000), &params, 1).0.is_allowed());
/// ```
pub fn check(
    state: Option<SlidingLogState>,
    now: Micros,
    params: &SlidingLogParams,
    cost: u64,
) -> (Decision, Option<SlidingLogState>) {
    let mut entries = state.map(|s| s.entries).unwrap_or_default();
    let window = params.window_us();
    let limit = params.limit;
    let at = entries.last().map_or(now.0, |e| e.at.0.max(now.0));
    // Entries are in order, so the expired ones are a prefix.
    let first_live = entries.partition_point(|e| e.at.0.saturating_add(window) <= at);
    let live = entries.get(first_live..).unwrap_or(&[]);
    let used = live.iter().fold(0u64, |sum, e| sum.saturating_add(e.count));
    let since_now = |instant: u64| Micros(instant.saturating_sub(now.0)).ceil_millis();
    let decision = |outcome, used: u64, newest: Option<u64>| Decision {
        outcome,
        limit,
        remaining: limit.saturating_sub(used),
        reset_after: newest.map_or(Millis(0), |t| since_now(t.saturating_add(window))),
    };
    let newest = live.last().map(|e| e.at.0);

    if cost > limit {
        return (decision(Outcome::Never, used, newest), None);
    }
    let excess = used.saturating_add(cost).saturating_sub(limit);
    if excess > 0 {
        // `excess` units must leave the window first: the call fits once the entry that
        // frees the last of them has expired. `cost <= limit` makes `excess <= used`, so
        // that entry exists.
        let mut freed = 0u64;
        let frees_enough = live.iter().find(|e| {
            freed = freed.saturating_add(e.count);
            freed >= excess
        });
        let retry_at = frees_enough
            .or(live.last())
            .map_or(at, |e| e.at.0.saturating_add(window));
        let retry_after = since_now(retry_at);
        return (
            decision(Outcome::Denied { retry_after }, used, newest),
            None,
        );
    }
    if cost == 0 {
        return (decision(Outcome::Allowed, used, newest), None);
    }
    entries.drain(..first_live);
    match entries.last_mut() {
        // Same instant as the newest entry: one entry with a count.
        Some(last) if last.at.0 == at => last.count = last.count.saturating_add(cost),
        _ => entries.push(LogEntry {
            at: Micros(at),
            count: cost,
        }),
    }
    let used = used.saturating_add(cost);
    (
        decision(Outcome::Allowed, used, Some(at)),
        Some(SlidingLogState {
            window_ms: params.window_ms,
            entries,
        }),
    )
}

/// Takes `cost` units at `now` even over the limit (`FORCE`): the log holds more than
/// `limit` units, and later calls wait until enough of them have left the window. The log
/// keeps its bounds: at most [`MAX_LIMIT`] units in the window (a larger debt is dropped)
/// and at most `limit` entries (past that the units join the newest entry, moved to now,
/// so they count a little longer, never shorter).
pub fn force(
    state: Option<SlidingLogState>,
    now: Micros,
    params: &SlidingLogParams,
    cost: u64,
) -> (Decision, Option<SlidingLogState>) {
    let (probe, _) = check(state.clone(), now, params, cost);
    if probe.is_allowed() || cost == 0 {
        return check(state, now, params, cost);
    }
    let mut entries = state.map(|s| s.entries).unwrap_or_default();
    let window = params.window_us();
    let at = entries.last().map_or(now.0, |e| e.at.0.max(now.0));
    let first_live = entries.partition_point(|e| e.at.0.saturating_add(window) <= at);
    entries.drain(..first_live);
    let used = entries
        .iter()
        .fold(0u64, |sum, e| sum.saturating_add(e.count));
    let cost = cost.min(MAX_LIMIT.saturating_sub(used));
    let room_for_entry = u64::try_from(entries.len()).unwrap_or(u64::MAX) < params.limit;
    match entries.last_mut() {
        _ if cost == 0 => {}
        Some(last) if last.at.0 == at || !room_for_entry => {
            last.at = Micros(at);
            last.count = last.count.saturating_add(cost);
        }
        _ => entries.push(LogEntry {
            at: Micros(at),
            count: cost,
        }),
    }
    let decision = Decision {
        outcome: Outcome::Allowed,
        limit: params.limit,
        remaining: 0,
        reset_after: Micros(at.saturating_add(window).saturating_sub(now.0)).ceil_millis(),
    };
    let state = SlidingLogState {
        window_ms: params.window_ms,
        entries,
    };
    (decision, Some(state))
}

/// Gives back up to `amount` units taken earlier (RL.REFUND) by dropping the newest entries
/// still in the window (a refund undoes the most recent admissions). Returns the units
/// given back and the state to store, if any.
pub fn refund(
    state: Option<SlidingLogState>,
    now: Micros,
    params: &SlidingLogParams,
    amount: u64,
) -> (u64, Option<SlidingLogState>) {
    let Some(mut state) = state else {
        return (0, None);
    };
    let window = params.window_us();
    let at = state.entries.last().map_or(now.0, |e| e.at.0.max(now.0));
    state.entries.retain(|e| e.at.0.saturating_add(window) > at);
    let mut refunded = 0u64;
    while refunded < amount {
        let Some(newest) = state.entries.last_mut() else {
            break;
        };
        let take = newest.count.min(amount - refunded);
        newest.count -= take;
        refunded += take;
        if newest.count == 0 {
            state.entries.pop();
        }
    }
    if refunded == 0 {
        return (0, None);
    }
    state.window_ms = params.window_ms;
    (refunded, Some(state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits;
    use crate::promises::Model;
    use crate::scenario::{case, retry_ms, run, wait_is_exact};
    use proptest::prelude::*;

    impl Model for SlidingLog {
        fn params_of(limit: u64) -> Self::Params {
            params(limit, 1_000)
        }

        fn arb_params() -> BoxedStrategy<SlidingLogParams> {
            (1u64..20, 1u64..3_000)
                .prop_map(|(limit, ms)| params(limit, ms))
                .boxed()
        }

        /// `limit` in any window: a span shorter than the window holds at most `limit`.
        fn budget(p: &SlidingLogParams, span_us: u64) -> u128 {
            u128::from(p.limit) * u128::from(span_us / p.window_us() + 1)
        }
    }

    fn params(limit: u64, window_ms: u64) -> SlidingLogParams {
        SlidingLogParams::new(limit, window_ms).unwrap()
    }

    #[test]
    fn refund_drops_the_newest_units() {
        let p = params(10, 1_000);
        let (_, s) = check(None, Micros(0), &p, 3);
        let (_, s) = check(s, Micros(100_000), &p, 4);
        let (refunded, s2) = refund(s.clone(), Micros(200_000), &p, 5);
        assert_eq!(refunded, 5);
        let s2 = s2.unwrap();
        assert_eq!(
            s2.entries,
            vec![LogEntry {
                at: Micros(0),
                count: 2
            }]
        );
        // The remaining units still leave the window when they were taken.
        assert!(check(Some(s2.clone()), Micros(999_999), &p, 9).0.outcome != Outcome::Allowed);
        assert!(check(Some(s2), Micros(1_000_000), &p, 10).0.is_allowed());
        assert_eq!(
            refund(s, Micros(1_100_000), &p, 5),
            (0, None),
            "all expired"
        );
        assert_eq!(refund(None, Micros(0), &p, 5), (0, None));
    }

    #[test]
    fn five_per_second_spec() {
        let p = params(5, 1_000);
        let state = run(
            &[
                //   now   cost allowed rem retry reset
                case(0, 2, true, 3, 0, 1_000),
                case(100, 1, true, 2, 0, 1_000),
                case(400, 2, true, 0, 0, 1_000),
                // Needs 1 unit: the 2 taken at 0 ms leave at 1000 ms.
                case(500, 1, false, 0, 500, 900),
                // Needs 3 units: 2 at 1000 ms and 1 at 1100 ms.
                case(500, 3, false, 0, 600, 900),
                case(500, 6, false, 0, -1, 900),
                case(999, 1, false, 0, 1, 401),
                case(1_000, 2, true, 0, 0, 1_000),
                case(1_000, 0, true, 0, 0, 1_000),
                // Units from 100 and 400 are gone; 2 from 1000 remain.
                case(1_400, 3, true, 0, 0, 1_000),
                case(10_000, 0, true, 5, 0, 0),
            ],
            |s, now, cost| check(s, now, &p, cost),
        );
        let entries = state.unwrap().entries;
        assert_eq!(
            entries,
            vec![
                LogEntry {
                    at: Millis(1_000).as_micros(),
                    count: 2
                },
                LogEntry {
                    at: Millis(1_400).as_micros(),
                    count: 3
                },
            ]
        );
    }

    #[test]
    fn no_boundary_burst() {
        // The fixed window's 2x burst: 10 at 0.999 s and 10 at 1.000 s. The log refuses
        // the second ten until the first have been in the past for a whole window.
        let p = params(10, 1_000);
        let (_, s) = check(None, Micros(999_000), &p, 10);
        let (d, _) = check(s.clone(), Micros(1_000_000), &p, 1);
        assert_eq!(retry_ms(&d), 999);
        assert!(!check(s.clone(), Micros(1_998_999), &p, 1).0.is_allowed());
        assert!(check(s, Micros(1_999_000), &p, 10).0.is_allowed());
    }

    #[test]
    fn same_instant_calls_share_one_entry() {
        let p = params(100, 1_000);
        let mut state = None;
        for _ in 0..50 {
            state = check(state, Micros(7), &p, 1).1;
        }
        let s = state.unwrap();
        assert_eq!(
            s.entries,
            vec![LogEntry {
                at: Micros(7),
                count: 50
            }]
        );
    }

    #[test]
    fn clock_stepping_back_counts_as_standing_still() {
        let p = params(2, 1_000);
        let (_, s) = check(None, Micros(5_000_000), &p, 2);
        let (d, s2) = check(s.clone(), Micros(4_000_000), &p, 1);
        // Measured from the real now: the units leave at 6 s, 2 s from 4 s.
        assert_eq!(retry_ms(&d), 2_000);
        assert!(s2.is_none());
        let (d, s3) = check(s.clone(), Micros(5_500_000), &p, 0);
        assert_eq!((d.remaining, d.reset_after), (0, Millis(500)));
        assert!(s3.is_none());
        // An allowed call while behind is logged at the newest instant, keeping the order.
        let p3 = params(3, 1_000);
        let (d, s4) = check(s, Micros(4_000_000), &p3, 1);
        assert!(d.is_allowed());
        assert_eq!(d.reset_after, Millis(2_000));
        assert_eq!(s4.unwrap().entries.last().unwrap().at, Micros(5_000_000));
    }

    #[test]
    fn lowering_the_limit_waits_for_enough_units_to_leave() {
        let (_, s) = check(None, Micros(0), &params(10, 1_000), 4);
        let (_, s) = check(s, Micros(100_000), &params(10, 1_000), 4);
        // Limit 3 with 8 in the window: 6 must leave for 1 unit, so both entries.
        let (d, _) = check(s.clone(), Micros(200_000), &params(3, 1_000), 1);
        assert_eq!(retry_ms(&d), 900);
        assert_eq!(d.remaining, 0);
        // A shorter window: the same instants, judged by 150 ms.
        let (d, _) = check(s, Micros(200_000), &params(5, 150), 1);
        assert!(d.is_allowed());
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn largest_parameters_do_not_overflow() {
        let p = params(MAX_LIMIT, limits::MAX_DURATION_MS);
        let (d, s) = check(None, Micros(u64::MAX / 2), &p, MAX_LIMIT);
        assert!(d.is_allowed());
        let (d, _) = check(s, Micros(u64::MAX / 2), &p, 1);
        assert_eq!(retry_ms(&d), limits::MAX_DURATION_MS as i64);
        let corrupt = SlidingLogState {
            window_ms: 1,
            entries: vec![
                LogEntry {
                    at: Micros(u64::MAX),
                    count: u64::MAX,
                },
                LogEntry {
                    at: Micros(3),
                    count: u64::MAX,
                },
            ],
        };
        let _ = check(Some(corrupt.clone()), Micros(0), &p, MAX_LIMIT);
        let _ = check(Some(corrupt), Micros(u64::MAX), &params(1, 1), 1);
    }

    /// Random calls: (µs since the previous call, cost).
    fn calls() -> impl Strategy<Value = Vec<(u64, u64)>> {
        prop::collection::vec(
            (
                prop_oneof![Just(0u64), 0u64..2_000, 0u64..3_000_000],
                prop_oneof![Just(1u64), 0u64..12],
            ),
            1..150,
        )
    }

    proptest! {
        /// Against a model that keeps every admitted unit: the decision, `remaining`,
        /// the bound (no window of `window_ms` ever holds more than `limit` units), the
        /// size bound (at most `limit` entries) and the retry promise (waiting
        /// `retry_after` is enough, 1 ms less is not).
        #[test]
        fn exact_against_the_model(
            limit in 1u64..20,
            window_ms in 1u64..3_000,
            calls in calls(),
        ) {
            let p = params(limit, window_ms);
            let w = window_ms * 1000;
            let mut state: Option<SlidingLogState> = None;
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            let mut now = 1_000_000_000u64;
            for (step, cost) in calls {
                now += step;
                let in_window = |admitted: &[(u64, u64)], t: u64| {
                    admitted.iter().filter(|(a, _)| a + w > t).map(|(_, c)| c).sum::<u64>()
                };
                let used = in_window(&admitted, now);
                if let Some(s) = &state {
                    prop_assert_eq!(s.count_at(Micros(now)), used);
                }
                let expect = cost <= limit && used + cost <= limit;
                let (d, next) = check(state.clone(), Micros(now), &p, cost);
                prop_assert_eq!(d.is_allowed(), expect);
                let after = if expect { used + cost } else { used };
                prop_assert_eq!(d.remaining, limit - after.min(limit));
                wait_is_exact(&d, &state, now, |s, t| check(s, t, &p, cost).0)?;
                if expect && cost > 0 {
                    admitted.push((now, cost));
                    prop_assert!(in_window(&admitted, now) <= limit);
                    let s = next.clone().unwrap();
                    prop_assert!(s.entries.len() as u64 <= limit);
                    prop_assert_eq!(s.total(), in_window(&admitted, now));
                } else {
                    prop_assert!(next.is_none());
                }
                state = next.or(state);
            }
            // Every window that ends at an admission holds at most `limit` units.
            for &(t, _) in &admitted {
                let held: u64 = admitted.iter().filter(|(a, _)| *a <= t && a + w > t).map(|(_, c)| c).sum();
                prop_assert!(held <= limit);
            }
        }
    }
}
