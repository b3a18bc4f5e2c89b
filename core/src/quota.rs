//! Calendar quota: at most `limit` units per calendar period (a day, a week from Monday, a
//! month from an anchor day, a year) at a fixed UTC offset.
//!
//! It is a fixed window whose windows are the periods of a [`Calendar`] instead of
//! multiples of a length: "10,000 calls a month, resetting on the 15th at UTC+05:30". One
//! period (its start and end) and one count are stored; `retry_after` is the wait until the
//! next period starts. As with any fixed window, `limit` at the end of one period and
//! `limit` more at the start of the next are both admitted: for plans that is the point.
//!
//! Units taken with `FORCE` past the limit close the period: nothing more passes until the
//! next one, which starts from zero (as after a plan's limit was lowered: a downgrade must
//! not charge the next period).

use crate::algorithm::{positional, rate_limiter, Algorithm, Opt, StateValue, StateView};
use crate::calendar::{self, Calendar, Period};
use crate::decision::{Decision, Outcome};
use crate::limits::{self, ParamError, Range};
use crate::rate::{Numbers, RateField, Share};
use crate::time::{Micros, Millis};

/// `TZ minutes`: the UTC offset of the calendar (default 0), -1439 to 1439.
pub const TZ: Opt = Opt {
    token: "TZ",
    value: "minutes",
    range: calendar::TZ,
};

/// `ANCHOR day`: the day of the month a monthly period starts on (default 1).
pub const ANCHOR: Opt = Opt {
    token: "ANCHOR",
    value: "day",
    range: calendar::ANCHOR,
};

/// The calendar quota in the [registry](crate::registry): `QUOTA limit period [TZ minutes]
/// [ANCHOR day]`, the period written `DAY`, `WEEK`, `MONTH` or `YEAR`.
pub struct Quota;

impl Algorithm for Quota {
    const NAME: &'static str = "QUOTA";
    const COMMAND: &'static str = "RL.QUOTA";
    const LABEL: &'static str = "calendar quota";
    const TAG: u8 = b'Q';
    const PARAMS: &'static [Range] = &[limits::count("limit"), calendar::PERIOD];
    const OPTIONS: &'static [Opt] = &[TZ, ANCHOR];
    type Params = QuotaParams;
    type State = QuotaState;

    fn params(values: &[u64], options: &[Option<u64>]) -> Result<Self::Params, ParamError> {
        let [limit, period] = positional(Self::PARAMS, values)?;
        let period = Period::from_code(period).ok_or(calendar::PERIOD.error())?;
        let tz = TZ
            .range
            .check(options.first().copied().flatten().unwrap_or(TZ_UTC))?;
        let anchor = options.get(1).copied().flatten().unwrap_or(1);
        let offset = i64::try_from(tz).unwrap_or(0) - calendar::MAX_OFFSET_MIN;
        QuotaParams::new(limit, Calendar::new(period, offset, anchor)?)
    }

    fn numbers(p: &Self::Params) -> Numbers {
        let cal = p.calendar;
        let tz = u64::try_from(cal.offset_min() + calendar::MAX_OFFSET_MIN).unwrap_or(TZ_UTC);
        // Defaults are left out, as a caller would write the command.
        let tz = (tz != TZ_UTC).then_some(tz);
        let anchor = (cal.anchor() != 1).then_some(cal.anchor());
        Numbers::new(&[p.limit, cal.period().code()], &[tz, anchor])
    }

    fn view(state: &Self::State, now: Micros) -> StateView {
        vec![
            ("period_start_ms", StateValue::Int(state.period_start.0)),
            ("period_end_ms", StateValue::Int(state.period_end.0)),
            ("count", StateValue::Int(state.count_at(now))),
        ]
    }
}

rate_limiter!(Quota {
    const UPTO: bool = true;
    const RATE: &'static [RateField] = &[
        RateField::Limit,
        RateField::Period,
        RateField::Tz,
        RateField::Anchor,
    ];
    const SHARE: Share = Share::Count;
});

/// `TZ`'s number for UTC (offsets are carried as `minutes + 1439`).
const TZ_UTC: u64 = calendar::MAX_OFFSET_MIN.unsigned_abs();

/// Validated quota parameters: `limit` units per period of `calendar`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuotaParams {
    limit: u64,
    calendar: Calendar,
}

impl QuotaParams {
    /// `limit` units (1 to [`MAX_COUNT`](limits::MAX_COUNT)) per period of `calendar`.
    pub fn new(limit: u64, calendar: Calendar) -> Result<Self, ParamError> {
        let limit = limits::count("limit").check(limit)?;
        Ok(QuotaParams { limit, calendar })
    }

    /// Units per period.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The calendar whose periods are counted.
    pub const fn calendar(&self) -> Calendar {
        self.calendar
    }
}

/// The stored state: one period and the units counted in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaState {
    /// Start of the period (milliseconds since the epoch).
    pub period_start: Millis,
    /// End of the period (exclusive).
    pub period_end: Millis,
    /// Units counted in it (past `limit` only with `FORCE`).
    pub count: u64,
}

impl QuotaState {
    /// Units counted against the period that contains `now`: the stored count while its
    /// period lasts, else 0.
    pub fn count_at(&self, now: Micros) -> u64 {
        if now.0 / 1000 < self.period_end.0 {
            self.count
        } else {
            0
        }
    }
}

/// Decides whether `cost` units may be taken at `now`: the decision and the state to store
/// (`None`: write nothing). `retry_after` is the wait until the next period starts.
///
/// ```
/// use redis_rl_core::calendar::{days_from_civil, Calendar, Period};
/// use redis_rl_core::quota::{check, QuotaParams};
/// use redis_rl_core::{Micros, Millis, Outcome};
/// let day_ms = 86_400_000;
/// let p = QuotaParams::new(2, Calendar::new(Period::Month, 0, 1).unwrap()).unwrap();
/// let now = Micros((days_from_civil(2024, 2, 28) * day_ms * 1000) as u64);
/// let (_, s) = check(None, now, &p, 2);
/// let (d, _) = check(s, now, &p, 1);
/// // February 2024 has 29 days: the quota is back on March 1st, 2 days later.
/// assert_eq!(d.outcome, Outcome::Denied { retry_after: Millis(2 * 86_400_000) });
/// ```
pub fn check(
    state: Option<QuotaState>,
    now: Micros,
    params: &QuotaParams,
    cost: u64,
) -> (Decision, Option<QuotaState>) {
    decide(state, now, params, cost, false)
}

/// Takes `cost` units at `now` even over the limit (`FORCE`): the period is refused until
/// it ends. Counts are capped at [`MAX_COUNT`](limits::MAX_COUNT).
pub fn force(
    state: Option<QuotaState>,
    now: Micros,
    params: &QuotaParams,
    cost: u64,
) -> (Decision, Option<QuotaState>) {
    decide(state, now, params, cost, true)
}

/// Gives back up to `amount` units of the current period (RL.REFUND); units of a period
/// that has ended are gone anyway. Returns the units given back and the state to store.
pub fn refund(
    state: Option<QuotaState>,
    now: Micros,
    params: &QuotaParams,
    amount: u64,
) -> (u64, Option<QuotaState>) {
    let Some(stored) = state else {
        return (0, None);
    };
    let period = current(Some(stored), now, params);
    let refunded = period.count.min(amount);
    let same_period = (stored.period_start, stored.period_end) == (period.start, period.end);
    if refunded == 0 || !same_period {
        return (0, None);
    }
    let new_state = QuotaState {
        period_start: period.start,
        period_end: period.end,
        count: period.count - refunded,
    };
    (refunded, Some(new_state))
}

fn decide(
    state: Option<QuotaState>,
    now: Micros,
    params: &QuotaParams,
    cost: u64,
    forced: bool,
) -> (Decision, Option<QuotaState>) {
    let period = current(state, now, params);
    let limit = params.limit;
    let until_end = Micros(period.end.as_micros().0.saturating_sub(now.0)).ceil_millis();
    let decision = |outcome, count: u64| Decision {
        outcome,
        limit,
        remaining: limit.saturating_sub(count),
        reset_after: if count > 0 { until_end } else { Millis(0) },
    };
    let stored = |count| QuotaState {
        period_start: period.start,
        period_end: period.end,
        count,
    };

    let after = period.count.saturating_add(cost);
    if forced && cost > 0 && after > limit {
        let after = after.min(limits::MAX_COUNT);
        return (decision(Outcome::Allowed, after), Some(stored(after)));
    }
    if cost > limit {
        return (decision(Outcome::Never, period.count), None);
    }
    // Over the limit (a lowered limit, or FORCE) even a zero cost waits, as in the other
    // limiters; the next period starts from zero and `cost <= limit` fits there.
    if after > limit {
        let retry_after = until_end;
        return (
            decision(Outcome::Denied { retry_after }, period.count),
            None,
        );
    }
    let new_state = (cost > 0).then(|| stored(after));
    (decision(Outcome::Allowed, after), new_state)
}

/// The period a call counts in.
struct Current {
    start: Millis,
    end: Millis,
    count: u64,
}

/// The current period and the units counted in it: the stored count while the stored
/// period lasts (also when the calendar changed since: it is carried into the new
/// calendar's period, so changing a plan never forgets traffic), else 0. A clock that
/// stepped back stands still in the stored period.
fn current(state: Option<QuotaState>, now: Micros, params: &QuotaParams) -> Current {
    let cal = params.calendar;
    let now_ms = now.0 / 1000;
    let at = state.map_or(now_ms, |s| now_ms.max(s.period_start.0));
    let at_i = i64::try_from(at).unwrap_or(i64::MAX);
    let index = cal.index(at_i);
    let count = match state {
        Some(s) if at < s.period_end.0 => s.count,
        _ => 0,
    };
    Current {
        start: Millis(to_ms(cal.start_of(index))),
        end: Millis(to_ms(cal.start_of(index.saturating_add(1)))),
        count,
    }
}

/// An instant before the epoch (a first period that began before 1970) as the epoch.
fn to_ms(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::days_from_civil;
    use crate::promises::Model;
    use proptest::prelude::*;

    impl Model for Quota {
        fn params_of(limit: u64) -> Self::Params {
            quota(limit, Period::Day, 0, 1)
        }

        fn arb_params() -> BoxedStrategy<QuotaParams> {
            (
                1u64..50,
                prop::sample::select(Period::ALL.to_vec()),
                -1_439i64..=1_439,
                1u64..=31,
            )
                .prop_map(|(limit, period, tz, anchor)| {
                    let anchor = if period == Period::Month { anchor } else { 1 };
                    quota(limit, period, tz, anchor)
                })
                .boxed()
        }

        /// `limit` in each period the span touches (a period is at least a day).
        fn budget(p: &QuotaParams, span_us: u64) -> u128 {
            u128::from(p.limit) * u128::from(span_us / (DAY * 1000) + 2)
        }
    }

    const DAY: u64 = 86_400_000;

    fn at(y: i64, m: u8, d: u8) -> Micros {
        Micros(days_from_civil(y, m, d) as u64 * DAY * 1000)
    }

    fn quota(limit: u64, period: Period, tz: i64, anchor: u64) -> QuotaParams {
        QuotaParams::new(limit, Calendar::new(period, tz, anchor).unwrap()).unwrap()
    }

    fn retry(d: &Decision) -> u64 {
        match d.outcome {
            Outcome::Denied { retry_after } => retry_after.0,
            other => panic!("not denied: {other:?}"),
        }
    }

    #[test]
    fn monthly_quota_resets_on_the_anchor_day() {
        // 3 a month from the 31st: January 31st, then February 29th (2024 is a leap year).
        let p = quota(3, Period::Month, 0, 31);
        let (d, s) = check(None, at(2024, 2, 10), &p, 3);
        assert_eq!((d.is_allowed(), d.remaining), (true, 0));
        assert_eq!(d.reset_after, Millis(19 * DAY));
        let s = s.unwrap();
        assert_eq!(s.period_start.0, days_from_civil(2024, 1, 31) as u64 * DAY);
        assert_eq!(s.period_end.0, days_from_civil(2024, 2, 29) as u64 * DAY);
        let (d, none) = check(Some(s), at(2024, 2, 28), &p, 1);
        assert_eq!(retry(&d), DAY);
        assert!(none.is_none());
        assert!(check(Some(s), at(2024, 2, 29), &p, 3).0.is_allowed());
        assert_eq!(
            check(Some(s), at(2024, 2, 28), &p, 4).0.outcome,
            Outcome::Never
        );
    }

    #[test]
    fn offsets_move_the_boundary() {
        // Daily at UTC+05:30: the day ends at 18:30 UTC.
        let p = quota(1, Period::Day, 330, 1);
        let noon = Micros(at(2026, 12, 3).0 + 12 * 3_600_000_000);
        let (_, s) = check(None, noon, &p, 1);
        let (d, _) = check(s, noon, &p, 1);
        assert_eq!(retry(&d), 6 * 3_600_000 + 30 * 60_000);
        let (d, _) = check(s, Micros(noon.0 + (6 * 60 + 30) * 60_000_000), &p, 1);
        assert!(d.is_allowed());
    }

    #[test]
    fn a_forced_cost_closes_the_period_and_a_refund_reopens_it() {
        let p = quota(10, Period::Week, 0, 1);
        // 2026-12-07 is a Monday.
        let monday = at(2026, 12, 7);
        let (d, s) = force(None, monday, &p, 25);
        assert_eq!((d.is_allowed(), d.remaining), (true, 0));
        assert_eq!(d.reset_after, Millis(7 * DAY));
        assert_eq!(s.unwrap().count, 25);
        let (d, _) = check(s, at(2026, 12, 13), &p, 0);
        assert_eq!(retry(&d), DAY);
        assert!(check(s, at(2026, 12, 14), &p, 10).0.is_allowed());
        let (n, s2) = refund(s, monday, &p, 20);
        assert_eq!(n, 20);
        assert_eq!(check(s2, monday, &p, 5).0.remaining, 0);
    }

    #[test]
    fn changing_the_calendar_keeps_the_count_while_its_period_lasts() {
        let daily = quota(5, Period::Day, 0, 1);
        let (_, s) = check(None, at(2026, 12, 3), &daily, 4);
        let monthly = quota(5, Period::Month, 0, 1);
        let (d, s2) = check(s, Micros(at(2026, 12, 3).0 + 1), &monthly, 1);
        assert_eq!((d.is_allowed(), d.remaining), (true, 0));
        assert_eq!(
            s2.unwrap().period_end.0,
            days_from_civil(2027, 1, 1) as u64 * DAY
        );
        // Refunds only apply to the period stored under the same calendar.
        assert_eq!(refund(s, at(2026, 12, 3), &monthly, 1).0, 0);
        assert_eq!(refund(s, at(2026, 12, 3), &daily, 1).0, 1);
    }

    #[test]
    fn clock_stepping_back_stays_in_the_stored_period() {
        let p = quota(1, Period::Day, 0, 1);
        let (_, s) = check(None, at(2026, 12, 3), &p, 1);
        let (d, _) = check(s, Micros(at(2026, 12, 3).0 - 1_000_000), &p, 1);
        assert_eq!(retry(&d), DAY + 1_000);
    }

    #[test]
    fn extremes_do_not_overflow() {
        let p = QuotaParams::new(
            limits::MAX_COUNT,
            Calendar::new(Period::Year, -1_439, 1).unwrap(),
        )
        .unwrap();
        for now in [Micros(0), Micros(u64::MAX)] {
            let (d, s) = force(None, now, &p, limits::MAX_COUNT);
            assert!(d.is_allowed());
            let _ = force(s, now, &p, limits::MAX_COUNT);
            let _ = check(s, now, &p, 1);
        }
        let corrupt = QuotaState {
            period_start: Millis(u64::MAX),
            period_end: Millis(0),
            count: u64::MAX,
        };
        let _ = check(
            Some(corrupt),
            Micros(0),
            &quota(1, Period::Month, 1_439, 31),
            1,
        );
    }

    proptest! {
        /// Against a model (a count per period, from the calendar's bounds): the decision,
        /// `remaining`, and `retry_after` = the next period's start; waiting it suffices.
        #[test]
        fn matches_a_count_per_period(
            limit in 1u64..20,
            period in prop::sample::select(Period::ALL.to_vec()),
            tz in -1_439i64..=1_439,
            anchor in 28u64..=31,
            start_day in 0i64..60_000,
            calls in prop::collection::vec((0u64..3 * DAY * 1000 * 1000 / 4, 0u64..8), 1..60),
        ) {
            let anchor = if period == Period::Month { anchor } else { 1 };
            let p = quota(limit, period, tz, anchor);
            let cal = p.calendar();
            let mut used = std::collections::BTreeMap::<i64, u64>::new();
            let mut state = None;
            let mut now = start_day as u64 * DAY * 1000;
            for (step, cost) in calls {
                now += step;
                let now_ms = (now / 1000) as i64;
                let idx = cal.index(now_ms);
                let count = used.get(&idx).copied().unwrap_or(0);
                let allowed = count + cost <= limit;
                let (d, next) = check(state, Micros(now), &p, cost);
                prop_assert_eq!(d.is_allowed(), allowed);
                let after = if allowed { count + cost } else { count };
                prop_assert_eq!(d.remaining, limit - after);
                if !allowed && cost <= limit {
                    let end = cal.bounds(now_ms).1 as u64;
                    prop_assert_eq!(retry(&d), (end * 1000 - now).div_ceil(1000));
                    let later = Micros(now + retry(&d) * 1000);
                    prop_assert!(check(state, later, &p, cost).0.is_allowed());
                }
                if allowed {
                    *used.entry(idx).or_insert(0) += cost;
                }
                state = next.or(state);
            }
        }
    }
}
