//! Calendar periods at a fixed UTC offset: the day, the week (from Monday 00:00), the month
//! (from an anchor day) and the year that contain an instant.
//!
//! Plans sell quotas per calendar period ("10,000 calls a month, resetting on the 15th"),
//! which no fixed-length window can express: months have 28 to 31 days and years 365 or
//! 366. A period boundary is local midnight at `UTC + offset`; there is no time-zone
//! database (a server-side module cannot carry one, and an offset is what a customer's
//! billing system stores), so daylight saving time is the caller's business.
//!
//! The arithmetic is integer civil-date conversion (Howard Hinnant's `days_from_civil` and
//! `civil_from_days`, exact over the proleptic Gregorian calendar), so the core keeps its
//! promise of no dependencies and no floating point.

use crate::limits::ParamError;

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// The furthest period number [`Calendar::start_of`] computes (either side).
const MAX_INDEX: i64 = 1_000_000_000_000;

/// The length of a calendar period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Period {
    /// From local midnight to the next.
    Day,
    /// From Monday 00:00 local time to the next Monday.
    Week,
    /// From the anchor day of one month to that of the next (the month's last day when
    /// the anchor is past it).
    Month,
    /// From January 1st to the next.
    Year,
}

impl Period {
    /// Every period, in the order of their codes.
    pub const ALL: [Period; 4] = [Period::Day, Period::Week, Period::Month, Period::Year];

    /// The word that names it in commands and configs (`MONTH`).
    pub const fn word(self) -> &'static str {
        match self {
            Period::Day => "DAY",
            Period::Week => "WEEK",
            Period::Month => "MONTH",
            Period::Year => "YEAR",
        }
    }

    /// The period a word names, in any case (`month`, `MONTH`).
    pub fn from_word(word: &[u8]) -> Option<Period> {
        Period::ALL
            .into_iter()
            .find(|p| word.eq_ignore_ascii_case(p.word().as_bytes()))
    }

    /// Its code where periods are carried as integers (stored states, parameter lists):
    /// 1 day, 2 week, 3 month, 4 year.
    pub const fn code(self) -> u64 {
        match self {
            Period::Day => 1,
            Period::Week => 2,
            Period::Month => 3,
            Period::Year => 4,
        }
    }

    /// Its usual length in milliseconds (a month of 30 days, a year of 365): the window a
    /// client is shown (`w` of `RateLimit-Policy`); the reply's `reset_after` is exact.
    pub const fn usual_ms(self) -> u64 {
        const DAY_MS: u64 = 86_400_000;
        match self {
            Period::Day => DAY_MS,
            Period::Week => 7 * DAY_MS,
            Period::Month => 30 * DAY_MS,
            Period::Year => 365 * DAY_MS,
        }
    }

    /// The period with this code.
    pub const fn from_code(code: u64) -> Option<Period> {
        match code {
            1 => Some(Period::Day),
            2 => Some(Period::Week),
            3 => Some(Period::Month),
            4 => Some(Period::Year),
            _ => None,
        }
    }
}

/// The largest UTC offset accepted, in minutes (either side): anything under a day.
pub const MAX_OFFSET_MIN: i64 = 1_439;

/// A calendar: a period length, a UTC offset and (for months) an anchor day.
///
/// ```
/// use redis_rl_core::calendar::{Calendar, Period};
/// // Monthly from the 31st, at UTC+05:30.
/// let cal = Calendar::new(Period::Month, 330, 31).unwrap();
/// assert_eq!(cal.anchor(), 31);
/// assert!(Calendar::new(Period::Month, 0, 32).is_err());
/// assert!(Calendar::new(Period::Day, 1_440, 1).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Calendar {
    period: Period,
    offset_min: i64,
    anchor: u8,
}

/// The error of an offset outside `-MAX_OFFSET_MIN..=MAX_OFFSET_MIN`.
pub const TZ_ERROR: ParamError = TZ.error();

/// The range of a UTC offset in minutes, carried as `offset + MAX_OFFSET_MIN`.
pub const TZ: crate::limits::Range = crate::limits::Range {
    name: "tz",
    min: 0,
    max: 2 * MAX_OFFSET_MIN.unsigned_abs(),
    spelling: crate::limits::Spelling::Offset(MAX_OFFSET_MIN.unsigned_abs()),
};

/// The range of a period, carried as its [`Period::code`].
pub const PERIOD: crate::limits::Range = crate::limits::Range {
    name: "period",
    min: 1,
    max: 4,
    spelling: crate::limits::Spelling::Words(&["DAY", "WEEK", "MONTH", "YEAR"]),
};

/// The range of an anchor day.
pub const ANCHOR: crate::limits::Range = crate::limits::Range {
    name: "anchor",
    min: 1,
    max: 31,
    spelling: crate::limits::Spelling::Integer,
};

impl Calendar {
    /// A calendar of `period` at `UTC + offset_min` minutes, months starting on day
    /// `anchor` (1-31; only 1 for the other periods, where it means nothing).
    pub fn new(period: Period, offset_min: i64, anchor: u64) -> Result<Calendar, ParamError> {
        if offset_min.unsigned_abs() > MAX_OFFSET_MIN.unsigned_abs() {
            return Err(TZ_ERROR);
        }
        let anchor = match period {
            Period::Month => ANCHOR.check(anchor)?,
            _ if anchor == 1 => 1,
            _ => {
                return Err(ParamError {
                    name: "anchor (for a period other than MONTH)",
                    min: 1,
                    max: 1,
                    spelling: crate::limits::Spelling::Integer,
                })
            }
        };
        Ok(Calendar {
            period,
            offset_min,
            anchor: u8::try_from(anchor).unwrap_or(1),
        })
    }

    /// The period length.
    pub const fn period(&self) -> Period {
        self.period
    }

    /// The UTC offset in minutes.
    pub const fn offset_min(&self) -> i64 {
        self.offset_min
    }

    /// The day of the month a monthly period starts on (1 for the others).
    pub const fn anchor(&self) -> u64 {
        self.anchor as u64
    }

    /// The number of the period that contains `at_ms` (milliseconds since the epoch): it
    /// grows by one from each period to the next, so the difference of two numbers is the
    /// count of boundaries between them.
    pub fn index(&self, at_ms: i64) -> i64 {
        let local = at_ms.saturating_add(self.offset_min * 60_000);
        let day = local.div_euclid(DAY_MS);
        match self.period {
            Period::Day => day,
            // 1970-01-01 was a Thursday: day 0 is 3 days after a Monday.
            Period::Week => (day + 3).div_euclid(7),
            Period::Month => {
                let (y, m, d) = civil_from_days(day);
                let month = y * 12 + i64::from(m) - 1;
                if u64::from(d) < self.first_day(y, m) {
                    month - 1
                } else {
                    month
                }
            }
            Period::Year => civil_from_days(day).0,
        }
    }

    /// When period number `index` starts, in milliseconds since the epoch (negative before
    /// it).
    pub fn start_of(&self, index: i64) -> i64 {
        // Far beyond any clock (10^12 periods is at least 2.7 billion years): keeps the
        // date arithmetic inside `i64`; the result saturates anyway.
        let index = index.clamp(-MAX_INDEX, MAX_INDEX);
        let day = match self.period {
            Period::Day => index,
            Period::Week => index * 7 - 3,
            Period::Month => {
                let (y, m0) = (index.div_euclid(12), index.rem_euclid(12));
                // 0..=11 fits in u8.
                let m = u8::try_from(m0 + 1).unwrap_or(1);
                let d = u8::try_from(self.first_day(y, m)).unwrap_or(1);
                days_from_civil(y, m, d)
            }
            Period::Year => days_from_civil(index, 1, 1),
        };
        day.saturating_mul(DAY_MS)
            .saturating_sub(self.offset_min * 60_000)
    }

    /// The start and end (exclusive) of the period that contains `at_ms`, in milliseconds
    /// since the epoch.
    ///
    /// ```
    /// use redis_rl_core::calendar::{days_from_civil, Calendar, Period};
    /// let ms = |y, m, d| days_from_civil(y, m, d) * 86_400_000;
    /// let cal = Calendar::new(Period::Month, 0, 31).unwrap();
    /// // Anchored on the 31st: February's period starts on its last day.
    /// assert_eq!(cal.bounds(ms(2024, 2, 15)), (ms(2024, 1, 31), ms(2024, 2, 29)));
    /// ```
    pub fn bounds(&self, at_ms: i64) -> (i64, i64) {
        let index = self.index(at_ms);
        (self.start_of(index), self.start_of(index + 1))
    }

    /// The day a monthly period starts in month `m` of year `y`: the anchor, or the
    /// month's last day if it is shorter.
    fn first_day(&self, y: i64, m: u8) -> u64 {
        match self.period {
            Period::Month => self.anchor().min(u64::from(days_in_month(y, m))),
            _ => 1,
        }
    }
}

/// Whether `y` is a leap year of the Gregorian calendar.
pub const fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

/// The number of days in month `m` (1-12) of year `y`.
pub const fn days_in_month(y: i64, m: u8) -> u8 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of the date `y-m-d` (proleptic Gregorian; `m` 1-12, `d` 1-31).
///
/// ```
/// use redis_rl_core::calendar::days_from_civil;
/// assert_eq!(days_from_civil(1970, 1, 1), 0);
/// assert_eq!(days_from_civil(2000, 3, 1), 11_017);
/// assert_eq!(days_from_civil(1969, 12, 31), -1);
/// ```
pub const fn days_from_civil(y: i64, m: u8, d: u8) -> i64 {
    // Years start in March, so the leap day is the last day of a year.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400; // 0..=399
    let m = m as i64;
    let mp = if m > 2 { m - 3 } else { m + 9 }; // March = 0
    let doy = (153 * mp + 2) / 5 + d as i64 - 1; // 0..=365
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // 0..=146096
    era * 146_097 + doe - 719_468
}

/// The date `(year, month, day)` of day `z` since 1970-01-01 (the inverse of
/// [`days_from_civil`]).
///
/// ```
/// use redis_rl_core::calendar::civil_from_days;
/// assert_eq!(civil_from_days(0), (1970, 1, 1));
/// assert_eq!(civil_from_days(11_016), (2000, 2, 29));
/// ```
pub const fn civil_from_days(z: i64) -> (i64, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097; // 0..=146096
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365
    let mp = (5 * doy + 2) / 153; // 0..=11, March = 0
    let d = doy - (153 * mp + 2) / 5 + 1; // 1..=31
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // 1..=12
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m as u8, d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Datelike, Duration, NaiveDate};
    use proptest::prelude::*;

    /// The reference: chrono's calendar, walking the local date.
    fn reference_start(cal: &Calendar, at_ms: i64) -> i64 {
        let offset = Duration::minutes(cal.offset_min);
        let local = DateTime::UNIX_EPOCH.naive_utc() + Duration::milliseconds(at_ms) + offset;
        let date = local.date();
        let start = match cal.period {
            Period::Day => date,
            Period::Week => date - Duration::days(i64::from(date.weekday().num_days_from_monday())),
            Period::Month => {
                let anchored = |y: i32, m: u32| {
                    let last = last_day(y, m);
                    NaiveDate::from_ymd_opt(y, m, (cal.anchor as u32).min(last)).unwrap()
                };
                let this = anchored(date.year(), date.month());
                if date >= this {
                    this
                } else if date.month() == 1 {
                    anchored(date.year() - 1, 12)
                } else {
                    anchored(date.year(), date.month() - 1)
                }
            }
            Period::Year => NaiveDate::from_ymd_opt(date.year(), 1, 1).unwrap(),
        };
        let start = start.and_hms_opt(0, 0, 0).unwrap() - offset;
        (start - DateTime::UNIX_EPOCH.naive_utc()).num_milliseconds()
    }

    fn last_day(y: i32, m: u32) -> u32 {
        let next = if m == 12 {
            NaiveDate::from_ymd_opt(y + 1, 1, 1)
        } else {
            NaiveDate::from_ymd_opt(y, m + 1, 1)
        };
        next.unwrap().pred_opt().unwrap().day()
    }

    fn ms(y: i64, m: u8, d: u8) -> i64 {
        days_from_civil(y, m, d) * DAY_MS
    }

    fn cal(period: Period, offset: i64, anchor: u64) -> Calendar {
        Calendar::new(period, offset, anchor).unwrap()
    }

    #[test]
    fn civil_days_round_trip_against_chrono_over_six_centuries() {
        let mut date = NaiveDate::from_ymd_opt(1700, 1, 1).unwrap();
        let end = NaiveDate::from_ymd_opt(2300, 1, 1).unwrap();
        while date < end {
            let z = (date - NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()).num_days();
            let (y, m, d) = (i64::from(date.year()), date.month() as u8, date.day() as u8);
            assert_eq!(days_from_civil(y, m, d), z, "{date}");
            assert_eq!(civil_from_days(z), (y, m, d), "{date}");
            assert_eq!(
                u32::from(days_in_month(y, m)),
                last_day(date.year(), date.month())
            );
            date = date.succ_opt().unwrap();
        }
    }

    #[test]
    fn leap_years_follow_the_gregorian_rules() {
        assert!(!is_leap(1900) && is_leap(2000) && !is_leap(2100) && is_leap(2024));
        assert!(!is_leap(2023) && is_leap(2400) && !is_leap(2200));
        // February's last day in each.
        let feb = |y| civil_from_days(days_from_civil(y, 3, 1) - 1);
        assert_eq!(feb(1900), (1900, 2, 28));
        assert_eq!(feb(2000), (2000, 2, 29));
        assert_eq!(feb(2100), (2100, 2, 28));
    }

    #[test]
    fn anchors_past_a_months_end_fall_on_its_last_day() {
        let c = cal(Period::Month, 0, 31);
        // Jan 31 -> Feb 29 (2024, leap) -> Mar 31 -> Apr 30.
        assert_eq!(c.bounds(ms(2024, 2, 1)), (ms(2024, 1, 31), ms(2024, 2, 29)));
        assert_eq!(
            c.bounds(ms(2024, 3, 30)),
            (ms(2024, 2, 29), ms(2024, 3, 31))
        );
        assert_eq!(
            c.bounds(ms(2024, 4, 29)),
            (ms(2024, 3, 31), ms(2024, 4, 30))
        );
        // 1900 and 2100 are not leap years; 2000 is.
        assert_eq!(c.bounds(ms(1900, 2, 28)).0, ms(1900, 2, 28));
        assert_eq!(c.bounds(ms(2100, 2, 27)).1, ms(2100, 2, 28));
        assert_eq!(c.bounds(ms(2000, 2, 28)).1, ms(2000, 2, 29));
        let c29 = cal(Period::Month, 0, 29);
        assert_eq!(
            c29.bounds(ms(2023, 3, 1)),
            (ms(2023, 2, 28), ms(2023, 3, 29))
        );
        assert_eq!(
            c29.bounds(ms(2024, 3, 1)),
            (ms(2024, 2, 29), ms(2024, 3, 29))
        );
        let c30 = cal(Period::Month, 0, 30);
        assert_eq!(
            c30.bounds(ms(2024, 12, 31)),
            (ms(2024, 12, 30), ms(2025, 1, 30))
        );
    }

    #[test]
    fn weeks_start_on_monday_and_offsets_move_midnight() {
        // 2026-12-07 is a Monday.
        let w = cal(Period::Week, 0, 1);
        assert_eq!(
            w.bounds(ms(2026, 12, 10)),
            (ms(2026, 12, 7), ms(2026, 12, 14))
        );
        assert_eq!(w.bounds(ms(2026, 12, 7)).0, ms(2026, 12, 7));
        assert_eq!(w.bounds(ms(2026, 12, 7) - 1).1, ms(2026, 12, 7));
        // At UTC+05:30 the day starts at 18:30 UTC the day before.
        let d = cal(Period::Day, 330, 1);
        let start = ms(2026, 12, 3) - 330 * 60_000;
        assert_eq!(d.bounds(start), (start, start + DAY_MS));
        assert_eq!(d.bounds(start - 1).1, start);
        // At UTC-05:00 the year starts at 05:00 UTC on January 1st.
        let y = cal(Period::Year, -300, 1);
        assert_eq!(y.bounds(ms(2027, 1, 1)).1, ms(2027, 1, 1) + 300 * 60_000);
    }

    #[test]
    fn bad_calendars_are_refused() {
        assert_eq!(
            Calendar::new(Period::Day, -1_440, 1)
                .unwrap_err()
                .to_string(),
            "tz must be an integer between -1439 and 1439"
        );
        assert!(Calendar::new(Period::Month, 0, 0).is_err());
        assert!(Calendar::new(Period::Week, 0, 2).is_err());
        assert!(Calendar::new(Period::Year, 1_439, 1).is_ok());
        assert!(Calendar::new(Period::Year, -1_439, 1).is_ok());
    }

    #[test]
    fn periods_have_words_and_codes() {
        for p in Period::ALL {
            assert_eq!(
                Period::from_word(p.word().to_lowercase().as_bytes()),
                Some(p)
            );
            assert_eq!(Period::from_code(p.code()), Some(p));
        }
        assert_eq!(Period::from_word(b"FORTNIGHT"), None);
        assert_eq!(Period::from_code(0), None);
    }

    fn arb_calendar() -> impl Strategy<Value = Calendar> {
        let period = prop::sample::select(Period::ALL.to_vec());
        // Anchors 28-31 are where months differ; offsets cover both sides and the extremes.
        let anchor = prop_oneof![1u64..=31, 28u64..=31];
        let offset = prop_oneof![
            -1_439i64..=1_439,
            prop::sample::select(vec![-1_439, -720, -300, 0, 330, 345, 840, 1_439])
        ];
        (period, offset, anchor).prop_map(|(p, o, a)| {
            let a = if p == Period::Month { a } else { 1 };
            cal(p, o, a)
        })
    }

    /// Instants near the interesting edges: month ends, leap days of 1900, 2000 and 2100.
    fn arb_instant() -> impl Strategy<Value = i64> {
        let edge = (
            prop::sample::select(vec![
                1899i64, 1900, 1970, 1999, 2000, 2023, 2024, 2099, 2100, 2101,
            ]),
            1u8..=12,
            prop::sample::select(vec![1u8, 27, 28, 29, 30, 31]),
            -2 * DAY_MS..2 * DAY_MS,
        )
            .prop_map(|(y, m, d, jitter)| ms(y, m, d.min(days_in_month(y, m))) + jitter);
        prop_oneof![edge, -2_208_988_800_000i64..7_258_118_400_000]
    }

    proptest! {
        /// The start of the period containing an instant is the reference calendar's, the
        /// instant lies in `[start, end)`, and `end` is the next period's start.
        #[test]
        fn bounds_match_the_reference_calendar(c in arb_calendar(), at in arb_instant()) {
            let (start, end) = c.bounds(at);
            prop_assert_eq!(start, reference_start(&c, at));
            prop_assert!(start <= at && at < end, "{} {} {}", start, at, end);
            prop_assert_eq!(reference_start(&c, end), end);
            prop_assert_eq!(reference_start(&c, end - 1), start);
            prop_assert_eq!(c.index(end), c.index(at) + 1);
            prop_assert_eq!(c.start_of(c.index(at)), start);
        }

        #[test]
        fn civil_days_round_trip(z in -1_000_000_000i64..1_000_000_000) {
            let (y, m, d) = civil_from_days(z);
            prop_assert!((1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m));
            prop_assert_eq!(days_from_civil(y, m, d), z);
        }
    }
}
