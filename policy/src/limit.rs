//! One window of a rate: the limit-string parser, the failure-mode names, and a window
//! validated against the server's ranges (the algorithm is the core's [`Kind`]).

use std::fmt;

use redis_rl_core::calendar::{self, Calendar, Period};
use redis_rl_core::{AnyParams, ConfigRate, Kind, ParamError, RateField};
use serde::Deserialize;

/// The failure mode named in configuration (the instance count is set once, globally).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum FailureModeName {
    /// Allow when Redis is unavailable.
    Open,
    /// Deny when Redis is unavailable.
    Closed,
    /// Decide locally when Redis is unavailable.
    Local,
}

impl FailureModeName {
    /// `open`, `closed` or `local`.
    pub const fn name(self) -> &'static str {
        match self {
            FailureModeName::Open => "open",
            FailureModeName::Closed => "closed",
            FailureModeName::Local => "local",
        }
    }
}

/// What a limit string counts over: a window of fixed length, or a calendar period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Per {
    /// A window of this many milliseconds.
    Window(u64),
    /// A calendar period (`week`, `month`, `year`): a quota that resets at the period's
    /// start, in the rate's `quota_tz`, monthly on its `quota_anchor` day.
    Calendar(Period),
}

/// The calendar period a unit names (`week`, `months`, ...).
fn calendar_unit(unit: &str) -> Option<Period> {
    match unit {
        "week" | "weeks" => Some(Period::Week),
        "month" | "months" => Some(Period::Month),
        "year" | "years" => Some(Period::Year),
        _ => None,
    }
}

/// Milliseconds per unit of a limit string, by the unit's name (singular and plural).
///
/// Calendar units are not fixed lengths (a month has 28 to 31 days): [`parse_limit_per`]
/// reads them as calendar quotas, and they are refused here.
fn unit_ms(unit: &str) -> Result<u64, String> {
    match unit {
        "ms" | "millisecond" | "milliseconds" => Ok(1),
        "s" | "second" | "seconds" => Ok(1_000),
        "m" | "minute" | "minutes" => Ok(60_000),
        "h" | "hour" | "hours" => Ok(3_600_000),
        "d" | "day" | "days" => Ok(86_400_000),
        "week" | "weeks" | "month" | "months" | "year" | "years" => Err(format!(
            "calendar period `{unit}` is a quota, not a window (write \"<count>/{unit}\" in `limits`)"
        )),
        other => Err(format!(
            "unknown unit `{other}` (units: second, minute, hour, day; calendar quotas: week, month, year)"
        )),
    }
}

/// Parses a limit string: `"<count>/<unit>"` or `"<count>/<n> <unit>"` (`"10/second"`,
/// `"10000/day"`, `"5/15 minutes"`), into `(limit, window_ms)`.
///
/// ```
/// use redis_rl_policy::parse_limit;
/// assert_eq!(parse_limit("10/second"), Ok((10, 1_000)));
/// assert_eq!(parse_limit("100/5 minutes"), Ok((100, 300_000)));
/// assert!(parse_limit("5/month").unwrap_err().contains("calendar"));
/// ```
pub fn parse_limit(text: &str) -> Result<(u64, u64), String> {
    match parse_limit_per(text)? {
        (count, Per::Window(ms)) => Ok((count, ms)),
        (_, Per::Calendar(p)) => {
            let unit = p.word().to_ascii_lowercase();
            Err(format!("{text:?}: {}", unit_ms(&unit).unwrap_err()))
        }
    }
}

/// [`parse_limit`], calendar periods included: `"1000/month"` is `(1000,
/// Per::Calendar(Period::Month))` (a calendar period takes no count: `"5/2 months"` is
/// refused).
///
/// ```
/// use redis_rl_policy::{parse_limit_per, Per};
/// use redis_rl_core::calendar::Period;
/// assert_eq!(parse_limit_per("1000/month"), Ok((1000, Per::Calendar(Period::Month))));
/// assert_eq!(parse_limit_per("10/second"), Ok((10, Per::Window(1_000))));
/// assert!(parse_limit_per("10/2 weeks").is_err());
/// ```
pub fn parse_limit_per(text: &str) -> Result<(u64, Per), String> {
    let bad = |why: &str| format!("{text:?}: {why}");
    let (count, per) = text
        .split_once('/')
        .ok_or_else(|| bad("expected \"<count>/<unit>\", e.g. \"10/second\""))?;
    let count: u64 = count
        .trim()
        .parse()
        .map_err(|_| bad("the count must be a whole number"))?;
    let per = per.trim();
    let digits = per.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = per.split_at(digits);
    let n: u64 = if n.is_empty() {
        1
    } else {
        n.parse()
            .map_err(|_| bad("the window count is too large"))?
    };
    if let Some(period) = calendar_unit(unit.trim()) {
        if digits > 0 {
            return Err(bad(
                "a calendar period takes no count (\"1000/month\", not \"1000/2 months\")",
            ));
        }
        return Ok((count, Per::Calendar(period)));
    }
    let ms = unit_ms(unit.trim()).map_err(|e| bad(&e))?;
    let window_ms = n
        .checked_mul(ms)
        .filter(|w| *w > 0)
        .ok_or_else(|| bad("the window must be positive and at most 10^12 ms"))?;
    Ok((count, Per::Window(window_ms)))
}

/// The usual length of a calendar period, in milliseconds (months of 30 days, years of
/// 365): what `RateLimit-Policy` shows as its window (the reply's reset is exact).
pub const fn nominal_ms(period: Period) -> u64 {
    period.usual_ms()
}

/// A window in the shortest exact unit, as it appears in policy names and keys (`1s`,
/// `15m`, `1d`, `250ms`).
pub fn window_label(window_ms: u64) -> String {
    for (unit, ms) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if window_ms.is_multiple_of(ms) {
            return format!("{}{unit}", window_ms / ms);
        }
    }
    format!("{window_ms}ms")
}

/// One validated window: `limit` units per `window_ms` under `algorithm`, and the core's
/// parameters they make (every per-algorithm fact comes from the core's registry: which
/// parameter a configured limit, window and burst feed, their ranges, the quota shown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LimitSpec {
    /// The algorithm.
    pub algorithm: Kind,
    /// Units per window.
    pub limit: u64,
    /// The window in milliseconds.
    pub window_ms: u64,
    /// Token bucket capacity or GCRA burst (`None`: `limit`).
    pub burst: Option<u64>,
    /// The calendar of a calendar quota (`window_ms` is then the period's [`nominal_ms`]).
    pub calendar: Option<Calendar>,
    /// The core's parameters.
    params: AnyParams,
}

/// Why a window cannot be enforced: a number outside the server's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidLimit(pub ParamError);

impl fmt::Display for InvalidLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid policy: {}", self.0)
    }
}

impl std::error::Error for InvalidLimit {}

impl LimitSpec {
    /// `limit` per `window_ms` under `algorithm`, checked with the ranges the core's
    /// registry declares, naming `limit` and `window_ms` as configuration writes them (a
    /// token bucket would say `refill_tokens`). An algorithm that counts per calendar period
    /// takes a calendar limit instead ([`LimitSpec::calendar_quota`]).
    pub fn new(
        algorithm: Kind,
        limit: u64,
        window_ms: u64,
        burst: Option<u64>,
    ) -> Result<Self, InvalidLimit> {
        if algorithm.rate_fields().contains(&RateField::Period) {
            // Counts per calendar period: only a calendar limit makes one.
            return Err(InvalidLimit(calendar::PERIOD.error()));
        }
        let rate = ConfigRate {
            limit,
            window_ms,
            burst,
        };
        let params = match AnyParams::from_rate(algorithm, &rate) {
            Some(params) => params.map_err(InvalidLimit)?,
            None => return Err(InvalidLimit(not_a_rate_limiter())),
        };
        Ok(Self {
            algorithm,
            limit,
            window_ms,
            burst,
            calendar: None,
            params,
        })
    }

    /// A calendar quota: `limit` units per period of `calendar`, under the rate limiter that
    /// counts per calendar period.
    pub fn calendar_quota(limit: u64, calendar: Calendar) -> Result<Self, InvalidLimit> {
        let algorithm = Kind::LIMITERS
            .iter()
            .copied()
            .find(|k| k.rate_fields().contains(&RateField::Period))
            .ok_or(InvalidLimit(not_a_rate_limiter()))?;
        let tz = calendar.offset_min() + calendar::MAX_OFFSET_MIN;
        let field = |f: &RateField| match f {
            RateField::Limit => Some(limit),
            RateField::Period => Some(calendar.period().code()),
            RateField::Tz => u64::try_from(tz).ok(),
            RateField::Anchor => Some(calendar.anchor()),
            RateField::WindowMs | RateField::BurstOrLimit | RateField::Burst => None,
        };
        let fields = algorithm.rate_fields();
        let positional = algorithm.params().len().min(fields.len());
        let (values, options) = fields.split_at(positional);
        let values: Vec<u64> = values.iter().map(|f| field(f).unwrap_or(0)).collect();
        let options: Vec<Option<u64>> = options.iter().map(field).collect();
        let params = AnyParams::from_numbers(algorithm, &values, &options)
            .ok_or(InvalidLimit(not_a_rate_limiter()))?
            .map_err(InvalidLimit)?;
        Ok(Self {
            algorithm,
            limit,
            window_ms: nominal_ms(calendar.period()),
            burst: None,
            calendar: Some(calendar),
            params,
        })
    }

    /// The core's parameters of this window.
    pub const fn params(&self) -> AnyParams {
        self.params
    }

    /// The core's algorithm and its numbers in the registry's order (positional, options).
    pub fn registry_numbers(&self) -> (Kind, Vec<u64>, Vec<Option<u64>>) {
        let numbers = self.params.numbers();
        (
            self.algorithm,
            numbers.values().to_vec(),
            numbers.options().to_vec(),
        )
    }

    /// How this window appears in plan names and keys: [`window_label`] of a window, the
    /// period of a quota (`1w`, `1mo`, `1y`).
    pub fn label(&self) -> String {
        match self.calendar {
            Some(cal) => match cal.period() {
                Period::Day => "1cd".to_string(),
                Period::Week => "1w".to_string(),
                Period::Month => "1mo".to_string(),
                Period::Year => "1y".to_string(),
            },
            None => window_label(self.window_ms),
        }
    }

    /// The quota a client sees (`q` of `RateLimit-Policy`): a bucket's capacity, else
    /// the limit.
    pub fn quota(&self) -> u64 {
        self.params.quota().0
    }

    /// The window over which the quota applies (`w`, in ms): a bucket's time to refill from
    /// empty, a calendar period's usual length, else the window.
    pub fn quota_window_ms(&self) -> u64 {
        self.params.quota().1
    }
}

/// The error of an algorithm that is not a rate limiter (a configuration cannot name one:
/// [`Kind`]'s names are the rate limiters').
fn not_a_rate_limiter() -> ParamError {
    ParamError {
        name: "algorithm",
        min: 0,
        max: 0,
        spelling: redis_rl_core::limits::Spelling::Integer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_strings() {
        for (text, expected) in [
            ("10/second", (10, 1_000)),
            ("10/seconds", (10, 1_000)),
            ("5/minute", (5, 60_000)),
            ("100/hour", (100, 3_600_000)),
            ("10000/day", (10_000, 86_400_000)),
            (" 7 / 15 minutes ", (7, 900_000)),
            ("3/2s", (3, 2_000)),
        ] {
            assert_eq!(parse_limit(text), Ok(expected), "{text}");
        }
        for (text, expected) in [
            ("10", "expected \"<count>/<unit>\""),
            ("x/second", "whole number"),
            ("10/fortnight", "unknown unit `fortnight`"),
            ("10/month", "calendar period `month` is a quota"),
            ("10/week", "is a quota, not a window"),
            ("10/year", "is a quota, not a window"),
            ("10/0 seconds", "must be positive"),
        ] {
            let err = parse_limit(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn labels_use_the_largest_exact_unit() {
        assert_eq!(window_label(1_000), "1s");
        assert_eq!(window_label(60_000), "1m");
        assert_eq!(window_label(90_000), "90s");
        assert_eq!(window_label(86_400_000), "1d");
        assert_eq!(window_label(3_600_000 * 2), "2h");
        assert_eq!(window_label(250), "250ms");
    }

    #[test]
    fn windows_are_checked_with_the_servers_ranges() {
        let err = LimitSpec::new(Kind::SlidingLog, 10_001, 1_000, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid policy: limit must be an integer between 1 and 10000"
        );
        let err = LimitSpec::new(Kind::TokenBucket, 1, 0, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid policy: window_ms must be an integer between 1 and 1000000000000"
        );
        let err = LimitSpec::new(Kind::TokenBucket, 1, 1, Some(0)).unwrap_err();
        assert!(err.to_string().contains("capacity"), "{err}");
        let g = LimitSpec::new(Kind::Gcra, 10, 1_000, Some(5)).unwrap();
        assert_eq!((g.quota(), g.quota_window_ms()), (5, 500));
    }
}
