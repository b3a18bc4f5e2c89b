//! Rates as written in configuration: one window (`limit`, `window_ms`) or several
//! (`limits = ["10/second", "10000/day"]`), and partial rates that override a base.

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use redis_rl_core::calendar::{Calendar, Period};

use crate::ban::Ban;
use crate::limit::{nominal_ms, parse_limit_per, FailureModeName, LimitSpec, Per};
use redis_rl_core::Kind;

/// One window as written: `limit` units per `window_ms`, with an optional algorithm and
/// burst of its own (else the rate's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Units per window.
    pub limit: u64,
    /// The window in milliseconds.
    pub window_ms: u64,
    /// This window's algorithm (default: the rate's).
    pub algorithm: Option<Kind>,
    /// This window's burst (default: the rate's, with one window).
    pub burst: Option<u64>,
    /// A calendar period instead of a window (`"1000/month"`): a quota per period, in the
    /// rate's `quota_tz` and (monthly) from its `quota_anchor` day; `window_ms` is then the
    /// period's usual length.
    pub period: Option<Period>,
}

impl Window {
    /// `limit` per `window_ms` with the rate's algorithm and burst.
    pub const fn new(limit: u64, window_ms: u64) -> Self {
        Self {
            limit,
            window_ms,
            algorithm: None,
            burst: None,
            period: None,
        }
    }

    /// `limit` per calendar `period` (a quota).
    pub const fn calendar(limit: u64, period: Period) -> Self {
        Self {
            period: Some(period),
            ..Window::new(limit, nominal_ms(period))
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowTable {
    limit: u64,
    window_ms: u64,
    #[serde(default)]
    algorithm: Option<Kind>,
    #[serde(default)]
    burst: Option<u64>,
}

impl<'de> Deserialize<'de> for Window {
    /// `"10/second"` or `{ limit = 10, window_ms = 1000, algorithm = "gcra", burst = 5 }`.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Window;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a limit string such as \"10/second\" or a table { limit, window_ms }")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Window, E> {
                match parse_limit_per(s).map_err(E::custom)? {
                    (limit, Per::Window(window_ms)) => Ok(Window::new(limit, window_ms)),
                    (limit, Per::Calendar(period)) => Ok(Window::calendar(limit, period)),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Window, A::Error> {
                let t = WindowTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Window {
                    limit: t.limit,
                    window_ms: t.window_ms,
                    algorithm: t.algorithm,
                    burst: t.burst,
                    period: None,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A rate: one or more windows that must all pass, and how they are enforced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Every window (at least one; distinct lengths).
    pub windows: Vec<Window>,
    /// The algorithm of windows without their own (default token bucket).
    pub algorithm: Kind,
    /// Burst: token bucket capacity or GCRA burst (default `limit`; one window only).
    pub burst: Option<u64>,
    /// Decide and record, but never deny.
    pub shadow: bool,
    /// Overrides the global failure mode for this rate.
    pub failure_mode: Option<FailureModeName>,
    /// The UTC offset in minutes of its calendar limits (default 0).
    pub quota_tz: Option<i64>,
    /// The day of the month its monthly limits start on (default 1).
    pub quota_anchor: Option<u64>,
    /// A request refused for at most this long is held and then forwarded instead
    /// (`None`: refused at once); see [`crate::delay`].
    pub delay_max_ms: Option<u64>,
    /// Refuse a key for a while after repeated refusals (default none).
    pub ban: Option<Ban>,
}

impl Rate {
    /// `limit` per minute, token bucket, enforced, the global failure mode.
    pub fn per_minute(limit: u64) -> Rate {
        Rate::of(Window::new(limit, 60_000))
    }

    /// One window with the defaults.
    pub fn of(window: Window) -> Rate {
        Rate {
            windows: vec![window],
            algorithm: Kind::TokenBucket,
            burst: None,
            shadow: false,
            failure_mode: None,
            quota_tz: None,
            quota_anchor: None,
            delay_max_ms: None,
            ban: None,
        }
    }

    /// The same rate with another algorithm.
    pub fn with_algorithm(mut self, algorithm: Kind) -> Rate {
        self.algorithm = algorithm;
        self
    }

    /// The same rate in shadow mode (or not).
    pub fn shadowed(mut self, shadow: bool) -> Rate {
        self.shadow = shadow;
        self
    }

    /// Every window validated with the server's ranges, in order.
    pub fn specs(&self) -> Result<Vec<LimitSpec>, String> {
        if self.windows.is_empty() {
            return Err("`limits` must name at least one window".to_string());
        }
        if self.windows.len() > 1 && self.burst.is_some() {
            return Err(
                "`burst` with several windows: give it per window ({ limit, window_ms, burst })"
                    .to_string(),
            );
        }
        let calendars = self.windows.iter().any(|w| w.period.is_some());
        if !calendars && (self.quota_tz.is_some() || self.quota_anchor.is_some()) {
            return Err(
                "`quota_tz` and `quota_anchor` apply to calendar limits (\"1000/month\")"
                    .to_string(),
            );
        }
        crate::delay::check(self.delay_max_ms)?;
        let mut specs: Vec<LimitSpec> = Vec::with_capacity(self.windows.len());
        let several = self.windows.len() > 1;
        for (i, w) in self.windows.iter().enumerate() {
            let spec = match w.period {
                Some(period) => {
                    // The anchor is a monthly period's; the other periods start on day 1.
                    let anchor = match period {
                        Period::Month => self.quota_anchor.unwrap_or(1),
                        _ => 1,
                    };
                    let cal = Calendar::new(period, self.quota_tz.unwrap_or(0), anchor)
                        .map_err(|e| format!("invalid policy: quota_{e}"))?;
                    LimitSpec::calendar_quota(w.limit, cal)
                }
                None => LimitSpec::new(
                    w.algorithm.unwrap_or(self.algorithm),
                    w.limit,
                    w.window_ms,
                    w.burst.or(self.burst),
                ),
            }
            .map_err(|e| window_error(several, i, &e))?;
            if specs.iter().any(|s| s.label() == spec.label()) {
                return Err(format!(
                    "two limits with the same window of {} (each window is its own key)",
                    spec.label()
                ));
            }
            specs.push(spec);
        }
        Ok(specs)
    }
}

/// A partial [`Rate`]: the fields given replace those of a base rate, the others are kept.
///
/// The dimensions' tables (`[ip]`, `[endpoint]`, `[global]`) override the design's
/// defaults, a tier's `[tiers.<name>.<dimension>]` overrides the dimension's table:
/// `[ip] limit = 1000` keeps the sliding window; `limits = [..]` replaces every window.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RateOverride {
    /// Units per window (a base with one window).
    pub limit: Option<u64>,
    /// The window in milliseconds (a base with one window).
    pub window_ms: Option<u64>,
    /// Every window: replaces the base's.
    pub limits: Option<Vec<Window>>,
    /// The algorithm.
    pub algorithm: Option<Kind>,
    /// Burst: token bucket capacity or GCRA burst.
    pub burst: Option<u64>,
    /// Decide and record, but never deny.
    pub shadow: Option<bool>,
    /// Overrides the global failure mode for this rate.
    pub failure_mode: Option<FailureModeName>,
    /// The UTC offset in minutes of its calendar limits.
    pub quota_tz: Option<i64>,
    /// The day of the month its monthly limits start on.
    pub quota_anchor: Option<u64>,
    /// Hold a request refused for at most this long instead of refusing it.
    pub delay_max_ms: Option<u64>,
    /// Refuse a key for a while after repeated refusals.
    pub ban: Option<Ban>,
}

/// The fields of a window, as a configuration writes them.
const WINDOW_FIELDS: [&str; 3] = ["limit", "window_ms", "burst"];

/// A window's error led by the field under the rate it is about (`limit: ...` for a rate
/// of one window, `limits[1].limit: ...` of several), which the loader moves into the
/// error's field path ([`crate::load::FieldError`]).
fn window_error(several: bool, i: usize, e: &crate::limit::InvalidLimit) -> String {
    let name = e.0.name;
    if !WINDOW_FIELDS.contains(&name) {
        return e.to_string();
    }
    if several {
        format!("limits[{i}].{name}: {e}")
    } else {
        format!("{name}: {e}")
    }
}

/// Splits a message led by a window's field (see [`window_error`]) into that field and the
/// rest.
pub(crate) fn window_field(message: &str) -> Option<(&str, &str)> {
    let (field, rest) = message.split_once(": ")?;
    let name = match field.strip_prefix("limits[") {
        Some(indexed) => {
            let (index, name) = indexed.split_once("].")?;
            index.parse::<usize>().ok()?;
            name
        }
        None => field,
    };
    WINDOW_FIELDS.contains(&name).then_some((field, rest))
}

/// Declares the raw (deserialized) form of a configuration table that takes a rate's fields,
/// those of [`RateOverride`], between its own (`{ before } { after }`, in the order serde
/// lists them in errors), with `fn rate(&mut self) -> RateOverride` taking them out. Tiers and
/// rules are such tables; the list of a rate's fields is then written once.
macro_rules! table_with_rate {
    (
        $(#[$meta:meta])*
        struct $name:ident {
            $($(#[$before_meta:meta])* $before:ident: $before_ty:ty,)*
        } {
            $($(#[$after_meta:meta])* $after:ident: $after_ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        struct $name {
            $($(#[$before_meta])* $before: $before_ty,)*
            limit: Option<u64>,
            window_ms: Option<u64>,
            limits: Option<Vec<$crate::rate::Window>>,
            algorithm: Option<redis_rl_core::Kind>,
            burst: Option<u64>,
            shadow: Option<bool>,
            failure_mode: Option<$crate::limit::FailureModeName>,
            quota_tz: Option<i64>,
            quota_anchor: Option<u64>,
            delay_max_ms: Option<u64>,
            ban: Option<$crate::ban::Ban>,
            $($(#[$after_meta])* $after: $after_ty,)*
        }

        impl $name {
            /// The rate's fields (taken out).
            fn rate(&mut self) -> $crate::rate::RateOverride {
                $crate::rate::RateOverride {
                    limit: self.limit,
                    window_ms: self.window_ms,
                    limits: self.limits.take(),
                    algorithm: self.algorithm,
                    burst: self.burst,
                    shadow: self.shadow,
                    failure_mode: self.failure_mode,
                    quota_tz: self.quota_tz,
                    quota_anchor: self.quota_anchor,
                    delay_max_ms: self.delay_max_ms,
                    ban: self.ban,
                }
            }
        }
    };
}

pub(crate) use table_with_rate;

impl RateOverride {
    /// `base` with the fields given here replaced.
    pub fn apply(&self, base: &Rate) -> Result<Rate, String> {
        let windows = match (&self.limits, self.limit, self.window_ms) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err("give either `limits` or `limit`/`window_ms`, not both".to_string())
            }
            (Some(limits), None, None) => limits.clone(),
            (None, None, None) => base.windows.clone(),
            (None, limit, window_ms) => match base.windows.as_slice() {
                [one] => vec![Window {
                    limit: limit.unwrap_or(one.limit),
                    window_ms: window_ms.unwrap_or(one.window_ms),
                    ..*one
                }],
                _ => {
                    return Err(
                        "`limit`/`window_ms` on a rate of several windows: use `limits`"
                            .to_string(),
                    )
                }
            },
        };
        Ok(Rate {
            windows,
            algorithm: self.algorithm.unwrap_or(base.algorithm),
            burst: self.burst.or(base.burst),
            shadow: self.shadow.unwrap_or(base.shadow),
            failure_mode: self.failure_mode.or(base.failure_mode),
            quota_tz: self.quota_tz.or(base.quota_tz),
            quota_anchor: self.quota_anchor.or(base.quota_anchor),
            delay_max_ms: self.delay_max_ms.or(base.delay_max_ms),
            ban: self.ban.or(base.ban),
        })
    }

    /// The rate these fields describe on their own (`limit` or `limits` required; the
    /// window defaults to a minute).
    pub fn standalone(&self, default_algorithm: Kind) -> Result<Rate, String> {
        if self.limits.is_none() && self.limit.is_none() {
            return Err("missing `limit` or `limits`".to_string());
        }
        let base = Rate::of(Window::new(self.limit.unwrap_or(1), 60_000))
            .with_algorithm(default_algorithm);
        self.apply(&base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_rl_core::calendar::Calendar;

    #[derive(Deserialize)]
    struct T {
        r: RateOverride,
    }

    fn parse(text: &str) -> Result<RateOverride, String> {
        toml::from_str::<T>(text)
            .map(|t| t.r)
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn limits_take_strings_and_tables() {
        let o = parse(
            "[r]\nlimits = [\"10/second\", { limit = 5, window_ms = 250, algorithm = \"gcra\", burst = 2 }]",
        )
        .unwrap();
        let rate = o.standalone(Kind::SlidingWindow).unwrap();
        assert_eq!(
            rate.windows,
            [
                Window::new(10, 1_000),
                Window {
                    limit: 5,
                    window_ms: 250,
                    algorithm: Some(Kind::Gcra),
                    burst: Some(2),
                    period: None,
                }
            ]
        );
        let specs = rate.specs().unwrap();
        assert_eq!(specs[0].algorithm, Kind::SlidingWindow);
        assert_eq!(specs[1].algorithm, Kind::Gcra);
    }

    #[test]
    fn calendar_limits_are_quotas_in_the_rates_time_zone() {
        let o = parse(
            "[r]\nlimits = [\"1000/month\", \"100/week\", \"10/second\"]\nquota_tz = 330\nquota_anchor = 31",
        )
        .unwrap();
        let rate = o.standalone(Kind::SlidingWindow).unwrap();
        assert_eq!(rate.windows[0], Window::calendar(1_000, Period::Month));
        let specs = rate.specs().unwrap();
        let labels: Vec<String> = specs.iter().map(LimitSpec::label).collect();
        assert_eq!(labels, ["1mo", "1w", "1s"]);
        let month = specs[0];
        assert_eq!(month.algorithm, Kind::Quota);
        assert_eq!(month.calendar, Calendar::new(Period::Month, 330, 31).ok());
        // The anchor is the month's; a week starts on Monday.
        assert_eq!(specs[1].calendar, Calendar::new(Period::Week, 330, 1).ok());
        assert_eq!(
            month.registry_numbers(),
            (
                redis_rl_core::Kind::Quota,
                vec![1_000, 3],
                vec![Some(1_769), Some(31)]
            )
        );
        assert_eq!(specs[2].algorithm, Kind::SlidingWindow);
        let year = parse("[r]\nlimits = [\"5/year\"]").unwrap();
        let spec = year.standalone(Kind::TokenBucket).unwrap().specs().unwrap()[0];
        assert_eq!(spec.calendar, Calendar::new(Period::Year, 0, 1).ok());
    }

    #[test]
    fn bad_calendar_limits_name_what_is_wrong() {
        for (text, expected) in [
            (
                "limits = [\"10/second\"]\nquota_tz = 60",
                "apply to calendar limits",
            ),
            ("limit = 10\nquota_anchor = 2", "apply to calendar limits"),
            (
                "limits = [\"10/month\"]\nquota_tz = 1440",
                "quota_tz must be an integer between -1439 and 1439",
            ),
            (
                "limits = [\"10/month\"]\nquota_anchor = 32",
                "quota_anchor must be an integer between 1 and 31",
            ),
            (
                "limits = [\"10/month\", \"20/months\"]",
                "two limits with the same window of 1mo",
            ),
            (
                "limits = [\"0/month\"]",
                "limit must be an integer between 1",
            ),
            (
                "limits = [\"10/month\"]\nalgorithm = \"quota\"\nlimit = 3",
                "either `limits` or",
            ),
            (
                "limit = 10\nalgorithm = \"quota\"",
                "period must be DAY, WEEK, MONTH or YEAR",
            ),
        ] {
            let err = parse(&format!("[r]\n{text}"))
                .and_then(|o| o.standalone(Kind::SlidingWindow))
                .and_then(|r| r.specs().map(|_| ()))
                .unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
        let err = parse("[r]\nlimits = [\"10/2 months\"]").unwrap_err();
        assert!(err.contains("takes no count"), "{err}");
    }

    #[test]
    fn overrides_keep_what_they_do_not_name() {
        let base = Rate::per_minute(100).with_algorithm(Kind::SlidingWindow);
        let o = parse("[r]\nlimit = 7").unwrap();
        assert_eq!(
            o.apply(&base).unwrap(),
            Rate::per_minute(7).with_algorithm(Kind::SlidingWindow)
        );
        let several = parse("[r]\nlimits = [\"1/second\", \"9/day\"]").unwrap();
        let two = several.apply(&base).unwrap();
        assert_eq!(two.windows.len(), 2);
        assert!(o.apply(&two).unwrap_err().contains("use `limits`"));
    }

    #[test]
    fn bad_rates_name_the_problem() {
        assert!(parse("[r]\nlimits = [\"1/2 months\"]")
            .unwrap_err()
            .contains("a calendar period takes no count"));
        assert!(parse("[r]\nlimits = [{ limit = 1 }]")
            .unwrap_err()
            .contains("missing field `window_ms`"));
        assert!(parse("[r]\nlimits = [3]")
            .unwrap_err()
            .contains("limit string"));
        let both = parse("[r]\nlimit = 1\nlimits = [\"1/second\"]").unwrap();
        assert!(both
            .apply(&Rate::per_minute(1))
            .unwrap_err()
            .contains("either"));
        let same = parse("[r]\nlimits = [\"1/second\", \"5/1000ms\"]").unwrap();
        assert!(same
            .standalone(Kind::SlidingWindow)
            .unwrap()
            .specs()
            .unwrap_err()
            .contains("same window"));
        let burst = parse("[r]\nburst = 3\nlimits = [\"1/second\", \"5/minute\"]").unwrap();
        assert!(burst
            .standalone(Kind::TokenBucket)
            .unwrap()
            .specs()
            .unwrap_err()
            .contains("per window"));
        assert!(RateOverride::default()
            .standalone(Kind::SlidingWindow)
            .unwrap_err()
            .contains("missing"));
    }
}
