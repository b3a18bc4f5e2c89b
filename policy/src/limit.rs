//! One window of a rate: the limit-string parser, the algorithm and failure-mode names, and
//! a window validated against the server's ranges.

use std::fmt;

use redis_rl_core::{AnyParams, ConfigRate, ParamError};
use serde::Deserialize;

/// The algorithm a configuration names (`algorithm = "sliding"`): the core registry's
/// [`Kind`], by its config name.
pub use redis_rl_core::Kind;

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

/// Milliseconds per unit of a limit string, by the unit's name (singular and plural).
///
/// Calendar units are not fixed lengths (a month has 28 to 31 days), so they are refused
/// here with their own text; calendar quotas extend this one function.
fn unit_ms(unit: &str) -> Result<u64, String> {
    match unit {
        "ms" | "millisecond" | "milliseconds" => Ok(1),
        "s" | "second" | "seconds" => Ok(1_000),
        "m" | "minute" | "minutes" => Ok(60_000),
        "h" | "hour" | "hours" => Ok(3_600_000),
        "d" | "day" | "days" => Ok(86_400_000),
        "week" | "weeks" | "month" | "months" | "year" | "years" => Err(format!(
            "calendar window `{unit}` is not supported (units: second, minute, hour, day)"
        )),
        other => Err(format!(
            "unknown unit `{other}` (units: second, minute, hour, day)"
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
    let ms = unit_ms(unit.trim()).map_err(|e| bad(&e))?;
    let window_ms = n
        .checked_mul(ms)
        .filter(|w| *w > 0)
        .ok_or_else(|| bad("the window must be positive and at most 10^12 ms"))?;
    Ok((count, window_ms))
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

/// One validated window: `limit` units per `window_ms` under `algorithm`.
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
    /// The core's parameters: which of them `limit`, `window_ms` and `burst` feed is the
    /// registry's.
    pub params: AnyParams,
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

/// What [`LimitSpec::new`] answers for an algorithm that is not a rate limiter.
const NOT_A_LIMITER: ParamError = ParamError {
    name: "algorithm",
    min: 0,
    max: 0,
    spelling: redis_rl_core::limits::Spelling::Integer,
};

impl LimitSpec {
    /// Checks the numbers with the ranges the core's registry declares, naming `limit` and
    /// `window_ms` as configuration writes them (a token bucket would say `refill_tokens`).
    pub fn new(
        algorithm: Kind,
        limit: u64,
        window_ms: u64,
        burst: Option<u64>,
    ) -> Result<Self, InvalidLimit> {
        let rate = ConfigRate {
            limit,
            window_ms,
            burst,
        };
        let params = AnyParams::from_rate(algorithm, &rate)
            .unwrap_or(Err(NOT_A_LIMITER))
            .map_err(InvalidLimit)?;
        Ok(Self {
            algorithm,
            limit,
            window_ms,
            burst,
            params,
        })
    }

    /// The core's algorithm and its numbers in the registry's order (positional, options).
    pub fn registry_numbers(&self) -> (Kind, Vec<u64>, Vec<Option<u64>>) {
        let n = self.params.numbers();
        (self.algorithm, n.values().to_vec(), n.options().to_vec())
    }

    /// The quota a client sees (`q` of `RateLimit-Policy`): the units that may pass at once
    /// (a bucket's capacity, else the limit).
    pub fn quota(&self) -> u64 {
        self.params.quota().0
    }

    /// The window over which the quota applies (`w`, in ms): a bucket's time to refill from
    /// empty, else the window.
    pub fn quota_window_ms(&self) -> u64 {
        self.params.quota().1
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
            ("10/month", "calendar window `month` is not supported"),
            ("10/week", "calendar window"),
            ("10/year", "calendar window"),
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
