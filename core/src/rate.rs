//! What a configured rate means to each rate limiter, as data: which parameter a
//! configuration's `limit`, `window_ms` and `burst` feed, how the local fallback divides a
//! limit among instances, and the quota a client is shown.
//!
//! Each algorithm declares these facts once (its `RATE`, `SHARE` and `LOCAL_EXACT_MAX` in
//! its [`RateLimiter`](crate::RateLimiter) impl); the functions here read them, so the
//! client, the Python package and the Lua twin derive the same parameters from the same
//! configuration without a table of their own.

use crate::algorithm::{MAX_OPTIONS, MAX_PARAMS};
use crate::limits::{ParamError, Range, MAX_DURATION_MS};

/// Where one parameter's value comes from in a configured rate (`limit` units per
/// `window_ms`, with an optional `burst`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RateField {
    /// The rate's `limit` (units per window).
    Limit,
    /// The rate's `window_ms`.
    WindowMs,
    /// A positional parameter: the rate's `burst`, or its `limit` when no burst is given (a
    /// token bucket's capacity).
    BurstOrLimit,
    /// An option: the rate's `burst` when given, else the option is left out (GCRA's
    /// `BURST b`).
    Burst,
    /// A calendar quota's period (`DAY`, `WEEK`, `MONTH`, `YEAR`): not a window, so a
    /// configured `limit` per `window_ms` cannot make one (configurations write
    /// `"1000/month"`, which the policy engine turns into a quota's numbers).
    Period,
    /// A calendar quota's UTC offset (`quota_tz` in configurations).
    Tz,
    /// A calendar quota's anchor day (`quota_anchor` in configurations).
    Anchor,
}

impl RateField {
    /// The name in configurations and error texts (`limit`, `window_ms`, `burst`).
    pub const fn config_name(self) -> &'static str {
        match self {
            RateField::Limit => "limit",
            RateField::WindowMs => "window_ms",
            RateField::BurstOrLimit | RateField::Burst => "burst",
            RateField::Period => "period",
            RateField::Tz => "quota_tz",
            RateField::Anchor => "quota_anchor",
        }
    }
}

/// How the local fallback gives each of `n` instances its share of a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Share {
    /// A refill rate (token bucket, GCRA): the period multiplied by `n`, so the rate divides
    /// exactly, and the burst divided (at least 1).
    Period,
    /// A count per window (the window algorithms): the limit divided (at least 1), the window
    /// kept.
    Count,
}

impl Share {
    /// The name in the registry's data (`period`, `count`).
    pub const fn name(self) -> &'static str {
        match self {
            Share::Period => "period",
            Share::Count => "count",
        }
    }
}

/// A rate as configurations write it: `limit` units per `window_ms`, an optional `burst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConfigRate {
    /// Units per window.
    pub limit: u64,
    /// The window in milliseconds.
    pub window_ms: u64,
    /// Units that may pass at once (`None`: the algorithm's default).
    pub burst: Option<u64>,
}

/// An algorithm's parameters as numbers: the positional ones in the order of its `PARAMS`,
/// then its options in the order of its `OPTIONS` (`None`: not given, the default).
///
/// What a command's arguments carry, and what the registry's generic code reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Numbers {
    values: [u64; MAX_PARAMS],
    options: [Option<u64>; MAX_OPTIONS],
    values_len: usize,
    options_len: usize,
}

impl Numbers {
    /// The numbers `values` then `options` (at most [`MAX_PARAMS`] and [`MAX_OPTIONS`]; more
    /// are dropped, which no registered algorithm has).
    pub fn new(values: &[u64], options: &[Option<u64>]) -> Numbers {
        let mut n = Numbers {
            values: [0; MAX_PARAMS],
            options: [None; MAX_OPTIONS],
            values_len: values.len().min(MAX_PARAMS),
            options_len: options.len().min(MAX_OPTIONS),
        };
        for (slot, v) in n.values.iter_mut().zip(values) {
            *slot = *v;
        }
        for (slot, v) in n.options.iter_mut().zip(options) {
            *slot = *v;
        }
        n
    }

    /// The positional parameters.
    pub fn values(&self) -> &[u64] {
        self.values.get(..self.values_len).unwrap_or(&[])
    }

    /// The options (`None`: not given).
    pub fn options(&self) -> &[Option<u64>] {
        self.options.get(..self.options_len).unwrap_or(&[])
    }

    /// The number `field` (in the order of `fields`: positional ones, then options) holds.
    fn get(&self, fields: &[RateField], field: RateField) -> Option<u64> {
        let at = fields.iter().position(|f| *f == field)?;
        match at.checked_sub(self.values_len) {
            None => self.values().get(at).copied(),
            Some(option) => self.options().get(option).copied().flatten(),
        }
    }

    /// The rate these numbers carry, read through `fields` (`None` if they name no limit or
    /// no window).
    pub(crate) fn rate(&self, fields: &[RateField]) -> Option<ConfigRate> {
        let limit = self.get(fields, RateField::Limit)?;
        let window_ms = self.get(fields, RateField::WindowMs)?;
        let burst = self
            .get(fields, RateField::BurstOrLimit)
            .or_else(|| self.get(fields, RateField::Burst));
        Some(ConfigRate {
            limit,
            window_ms,
            burst,
        })
    }
}

/// The numbers of an algorithm whose parameters are `fields` (positional ones first,
/// `values_len` of them) for `rate`. `limit` and `window_ms` are checked first, under those
/// names, with the ranges of the parameters they feed (a token bucket would otherwise say
/// `refill_tokens` for a configuration's `limit`).
pub(crate) fn numbers_of(
    rate: &ConfigRate,
    fields: &[RateField],
    ranges: &[Range],
) -> Result<Numbers, ParamError> {
    for (field, value) in [
        (RateField::Limit, rate.limit),
        (RateField::WindowMs, rate.window_ms),
    ] {
        if let Some(range) = fields
            .iter()
            .position(|f| *f == field)
            .and_then(|i| ranges.get(i))
        {
            Range {
                name: field.config_name(),
                ..*range
            }
            .check(value)?;
        }
    }
    let mut values = [0u64; MAX_PARAMS];
    let mut options = [None; MAX_OPTIONS];
    let values_len = ranges.len().min(MAX_PARAMS);
    for (i, field) in fields.iter().enumerate() {
        let value = match field {
            RateField::Limit => Some(rate.limit),
            RateField::WindowMs => Some(rate.window_ms),
            RateField::BurstOrLimit => Some(rate.burst.unwrap_or(rate.limit)),
            RateField::Burst => rate.burst,
            RateField::Period | RateField::Tz | RateField::Anchor => None,
        };
        match i.checked_sub(values_len) {
            None => {
                if let Some(slot) = values.get_mut(i) {
                    *slot = value.unwrap_or(0);
                }
            }
            Some(option) => {
                if let Some(slot) = options.get_mut(option) {
                    *slot = value;
                }
            }
        }
    }
    let options_len = fields.len().saturating_sub(values_len);
    Ok(Numbers::new(
        values.get(..values_len).unwrap_or(&[]),
        options.get(..options_len).unwrap_or(&[]),
    ))
}

/// The quota a client is shown for `rate`: `(limit, window_ms)`, the `q` and `w` of
/// `RateLimit-Policy`. The limit is the burst (a bucket of `burst` units, `limit` when none
/// is given), and the window the time in which `limit` per `window_ms` refills it.
pub(crate) fn quota(rate: &ConfigRate) -> (u64, u64) {
    let burst = rate.burst.unwrap_or(rate.limit);
    let ms = u128::from(burst) * u128::from(rate.window_ms) / u128::from(rate.limit.max(1));
    (burst, u64::try_from(ms).unwrap_or(u64::MAX))
}

/// One of `instances` instances' share of `rate` under `share`.
pub(crate) fn share_of(rate: &ConfigRate, share: Share, instances: u64) -> ConfigRate {
    let n = instances.max(1);
    let count = |c: u64| (c / n).max(1);
    match share {
        Share::Period => ConfigRate {
            limit: rate.limit,
            window_ms: rate.window_ms.saturating_mul(n).min(MAX_DURATION_MS),
            burst: Some(count(rate.burst.unwrap_or(rate.limit))),
        },
        Share::Count => ConfigRate {
            limit: count(rate.limit),
            window_ms: rate.window_ms,
            burst: rate.burst.map(count),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits;

    const TB: &[RateField] = &[
        RateField::BurstOrLimit,
        RateField::Limit,
        RateField::WindowMs,
    ];
    const GCRA: &[RateField] = &[RateField::Limit, RateField::WindowMs, RateField::Burst];

    #[test]
    fn numbers_read_back_as_the_rate_they_were_built_from() {
        let ranges = [
            limits::count("capacity"),
            limits::count("refill_tokens"),
            limits::duration_ms("refill_ms"),
        ];
        let rate = ConfigRate {
            limit: 10,
            window_ms: 1_000,
            burst: Some(30),
        };
        let n = numbers_of(&rate, TB, &ranges).unwrap();
        assert_eq!(n.values(), [30, 10, 1_000]);
        assert_eq!(n.rate(TB), Some(rate));
        let ranges = [limits::count("limit"), limits::duration_ms("period_ms")];
        let none = ConfigRate {
            burst: None,
            ..rate
        };
        let n = numbers_of(&none, GCRA, &ranges).unwrap();
        assert_eq!((n.values(), n.options()), (&[10, 1_000][..], &[None][..]));
        assert_eq!(n.rate(GCRA), Some(none));
        let zero = ConfigRate {
            window_ms: 0,
            ..rate
        };
        assert_eq!(
            numbers_of(&zero, GCRA, &ranges).unwrap_err().to_string(),
            "window_ms must be an integer between 1 and 1000000000000"
        );
    }

    #[test]
    fn quota_is_the_burst_and_the_time_to_refill_it() {
        let r = |limit, window_ms, burst| ConfigRate {
            limit,
            window_ms,
            burst,
        };
        assert_eq!(quota(&r(100, 60_000, None)), (100, 60_000));
        assert_eq!(quota(&r(10, 1_000, Some(30))), (30, 3_000));
        assert_eq!(quota(&r(10, 1_000, Some(2))), (2, 200));
    }

    #[test]
    fn shares_divide_rates_exactly_and_counts_at_least_to_one() {
        let r = ConfigRate {
            limit: 10,
            window_ms: 1_000,
            burst: None,
        };
        let p = share_of(&r, Share::Period, 4);
        assert_eq!((p.limit, p.window_ms, p.burst), (10, 4_000, Some(2)));
        let c = share_of(&r, Share::Count, 40);
        assert_eq!((c.limit, c.window_ms, c.burst), (1, 1_000, None));
        let long = ConfigRate {
            window_ms: MAX_DURATION_MS,
            ..r
        };
        assert_eq!(share_of(&long, Share::Period, 2).window_ms, MAX_DURATION_MS);
    }
}
