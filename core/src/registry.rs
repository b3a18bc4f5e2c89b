//! The registry: every algorithm, listed once.
//!
//! [`registry!`](crate::registry) calls a macro of the caller's with the list, so each
//! crate generates its own per-algorithm code from the same line: here the [`Kind`] of a
//! stored key, the parameters of any rate limiter ([`AnyParams`]) and their dispatch; in
//! the module, decoding and RL.STATE. Adding an algorithm is one line in the list (plus its
//! file): every match generated from it follows, and a missing piece (an encoding, a
//! test model) is a compile error, not a silent gap.

use crate::algorithm::{parse_params, upto, Algorithm, Opt, RateLimiter, Source, StateView};
use crate::decision::Decision;
use crate::limits::{ParamError, Range};
use crate::rate::{self, ConfigRate, Numbers, RateField, Share};
use crate::time::Micros;

/// Calls `$callback! { limiters: [Variant = Type, ...], others: [...] }` with every
/// algorithm: `limiters` implement [`RateLimiter`] (RL.ALL and RL.REFUND specs, in the
/// order error texts list them), `others` only [`Algorithm`] (a key can hold them).
///
/// ```
/// macro_rules! count {
///     (limiters: [$($l:ident = $lt:ty),* $(,)?], others: [$($o:ident = $ot:ty),* $(,)?] $(,)?) => {
///         [$(stringify!($l),)* $(stringify!($o),)*].len()
///     };
/// }
/// assert_eq!(redis_rl_core::registry!(count), 7);
/// ```
#[macro_export]
macro_rules! registry {
    ($callback:ident) => {
        $crate::__registry_list! { plain $callback }
    };
}

/// [`registry!`] with each algorithm's constructor after its type: `Variant = Type
/// [config_name(param, ...; option, ...)]`. The name is the one configurations use
/// (`token_bucket`), the parameters those of the typed constructors generated from it
/// (the client's `Policy::token_bucket(capacity, refill_tokens, refill_ms)`); an option is
/// an `Option<u64>`.
///
/// ```
/// macro_rules! names {
///     (
///         limiters: [$($l:ident = $lt:ty [$lc:ident($($lp:ident),* $(; $($lo:ident),*)?)]),* $(,)?],
///         others: [$($o:ident = $ot:ty [$oc:ident($($op:ident),* $(; $($oo:ident),*)?)]),* $(,)?] $(,)?
///     ) => {
///         [$(stringify!($lc),)*]
///     };
/// }
/// assert_eq!(redis_rl_core::registry_full!(names), ["token_bucket", "sliding", "fixed", "gcra", "log", "quota"]);
/// ```
#[macro_export]
macro_rules! registry_full {
    ($callback:ident) => {
        $crate::__registry_list! { full $callback }
    };
}

/// The list itself. **Adding an algorithm** starts with its line here (and its file).
#[doc(hidden)]
#[macro_export]
macro_rules! __registry_list {
    ($mode:ident $callback:ident) => {
        $crate::__registry_emit! {
            ($mode $callback)
            limiters: [
                TokenBucket = $crate::token_bucket::TokenBucket [token_bucket(capacity, refill_tokens, refill_ms)],
                SlidingWindow = $crate::sliding_window::SlidingWindow [sliding(limit, window_ms)],
                FixedWindow = $crate::fixed_window::FixedWindow [fixed(limit, window_ms)],
                Gcra = $crate::gcra::Gcra [gcra(limit, period_ms; burst)],
                SlidingLog = $crate::sliding_log::SlidingLog [log(limit, window_ms)],
                Quota = $crate::quota::Quota [quota(limit, period; tz, anchor)],
            ],
            others: [
                Concurrency = $crate::concurrency::Concurrency [concurrency(limit, lease_ms)],
            ],
        }
    };
}

/// Hands the list to a callback: whole (`full`), or without the constructors (`plain`).
#[doc(hidden)]
#[macro_export]
macro_rules! __registry_emit {
    (
        (plain $callback:ident)
        limiters: [$($l:ident = $lt:ty [$($lx:tt)*]),* $(,)?],
        others: [$($o:ident = $ot:ty [$($ox:tt)*]),* $(,)?] $(,)?
    ) => {
        $callback! { limiters: [$($l = $lt,)*], others: [$($o = $ot,)*] }
    };
    ((full $callback:ident) $($list:tt)*) => {
        $callback! { $($list)* }
    };
}

/// Generates [`Kind`], [`AnyParams`], [`AnyState`] and their dispatch from the list.
macro_rules! generate {
    (
        limiters: [$($l:ident = $lt:ty [$lc:ident($($lp:ident),* $(; $($lo:ident),*)?)]),* $(,)?],
        others: [$($o:ident = $ot:ty [$oc:ident($($op:ident),* $(; $($oo:ident),*)?)]),* $(,)?] $(,)?
    ) => {
        /// An algorithm: of a stored limiter (its tag byte), of a spec, of a policy and of a
        /// configuration (`algorithm = "sliding"`, with the `serde` feature). The one
        /// "which algorithm" type of every crate.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Kind {
            $(
                #[doc = concat!("[`", stringify!($lt), "`]")]
                $l,
            )*
            $(
                #[doc = concat!("[`", stringify!($ot), "`]")]
                $o,
            )*
        }

        impl Kind {
            /// Every algorithm, rate limiters first.
            pub const ALL: &'static [Kind] = &[$(Kind::$l,)* $(Kind::$o,)*];
            /// The rate limiters, in the order error texts list them.
            pub const LIMITERS: &'static [Kind] = &[$(Kind::$l,)*];
            /// The names configurations give the rate limiters, in the order of [`Self::LIMITERS`].
            pub const CONFIG_NAMES: &'static [&'static str] = &[$(stringify!($lc),)*];

            /// The name in configurations and the Python package (`token_bucket`): the
            /// name of its constructors.
            pub const fn config_name(self) -> &'static str {
                match self {
                    $(Kind::$l => stringify!($lc),)*
                    $(Kind::$o => stringify!($oc),)*
                }
            }

            /// The algorithm a configuration names (`None` for an unknown name).
            pub fn from_config_name(name: &str) -> Option<Kind> {
                Kind::ALL.iter().copied().find(|k| k.config_name() == name)
            }

            /// The single-key command (`RL.TOKENBUCKET`).
            pub const fn command(self) -> &'static str {
                match self {
                    $(Kind::$l => <$lt as Algorithm>::COMMAND,)*
                    $(Kind::$o => <$ot as Algorithm>::COMMAND,)*
                }
            }

            /// True for a rate limiter (RL.ALL, RL.REFUND, a policy).
            pub const fn is_limiter(self) -> bool {
                match self {
                    $(Kind::$l => true,)*
                    $(Kind::$o => false,)*
                }
            }

            /// What each parameter (positional ones, then options) is in a configured rate
            /// (empty for an algorithm that is not a rate limiter).
            pub const fn rate_fields(self) -> &'static [RateField] {
                match self {
                    $(Kind::$l => <$lt as RateLimiter>::RATE,)*
                    $(Kind::$o => &[],)*
                }
            }

            /// How the local fallback divides its limit (`None`: not a rate limiter).
            pub const fn share(self) -> Option<Share> {
                match self {
                    $(Kind::$l => Some(<$lt as RateLimiter>::SHARE),)*
                    $(Kind::$o => None,)*
                }
            }

            /// The largest share the local fallback runs as this algorithm, and what it
            /// runs above it (`None`: any share).
            pub const fn local_exact_max(self) -> Option<(u64, Kind)> {
                match self {
                    $(Kind::$l => <$lt as RateLimiter>::LOCAL_EXACT_MAX,)*
                    $(Kind::$o => None,)*
                }
            }

            /// The tag byte in the stored header.
            pub const fn tag(self) -> u8 {
                match self {
                    $(Kind::$l => <$lt as Algorithm>::TAG,)*
                    $(Kind::$o => <$ot as Algorithm>::TAG,)*
                }
            }

            /// The algorithm with this tag byte.
            pub const fn from_tag(tag: u8) -> Option<Kind> {
                $(if tag == <$lt as Algorithm>::TAG { return Some(Kind::$l); })*
                $(if tag == <$ot as Algorithm>::TAG { return Some(Kind::$o); })*
                None
            }

            /// The name in error texts and RL.STATE (`token bucket`).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Kind::$l => <$lt as Algorithm>::LABEL,)*
                    $(Kind::$o => <$ot as Algorithm>::LABEL,)*
                }
            }

            /// The spec word (`TOKENBUCKET`).
            pub const fn spec_name(self) -> &'static str {
                match self {
                    $(Kind::$l => <$lt as Algorithm>::NAME,)*
                    $(Kind::$o => <$ot as Algorithm>::NAME,)*
                }
            }

            /// The positional parameters and their ranges.
            pub const fn params(self) -> &'static [Range] {
                match self {
                    $(Kind::$l => <$lt as Algorithm>::PARAMS,)*
                    $(Kind::$o => <$ot as Algorithm>::PARAMS,)*
                }
            }

            /// The named options and their ranges.
            pub const fn options(self) -> &'static [Opt] {
                match self {
                    $(Kind::$l => <$lt as Algorithm>::OPTIONS,)*
                    $(Kind::$o => <$ot as Algorithm>::OPTIONS,)*
                }
            }

            /// Whether its command takes `UPTO` (partial grants; false for the others).
            pub const fn upto(self) -> bool {
                match self {
                    $(Kind::$l => <$lt as RateLimiter>::UPTO,)*
                    $(Kind::$o => false,)*
                }
            }

            /// The rate limiter a spec word names, in any case (`None` for anything else).
            pub fn limiter(word: &[u8]) -> Option<Kind> {
                Kind::LIMITERS
                    .iter()
                    .copied()
                    .find(|k| word.eq_ignore_ascii_case(k.spec_name().as_bytes()))
            }
        }

        /// The validated parameters of any rate limiter: what a spec of RL.ALL or
        /// RL.REFUND holds.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum AnyParams {
            $(
                #[doc = concat!("[`", stringify!($lt), "`]")]
                $l(<$lt as Algorithm>::Params),
            )*
        }

        /// The state of any rate limiter.
        #[derive(Clone, Debug, PartialEq)]
        pub enum AnyState {
            $(
                #[doc = concat!("[`", stringify!($lt), "`]")]
                $l(<$lt as Algorithm>::State),
            )*
        }

        impl AnyParams {
            /// The algorithm.
            pub const fn kind(&self) -> Kind {
                match self {
                    $(AnyParams::$l(_) => Kind::$l,)*
                }
            }

            /// Parses the parameters of the rate limiter `kind` from `source` with
            /// [`parse_params`]; `None` if `kind` is not a rate limiter.
            pub fn parse<S: Source>(kind: Kind, source: &mut S) -> Option<Result<AnyParams, S::Error>> {
                match kind {
                    $(Kind::$l => Some(parse_params::<$lt, S>(source).map(AnyParams::$l)),)*
                    _ => None,
                }
            }

            /// Builds the parameters of the rate limiter `word` names from integers (see
            /// [`Algorithm::params`]); `None` if `word` names none.
            ///
            /// ```
            /// use redis_rl_core::registry::AnyParams;
            /// let p = AnyParams::new(b"gcra", &[100, 60_000], &[Some(10)]).unwrap().unwrap();
            /// assert_eq!(p.kind().spec_name(), "GCRA");
            /// let err = AnyParams::new(b"FIXED", &[0, 60_000], &[]).unwrap().unwrap_err();
            /// assert_eq!(err.to_string(), "limit must be an integer between 1 and 1000000000000000");
            /// assert!(AnyParams::new(b"LEAKY", &[1], &[]).is_none());
            /// ```
            pub fn new(
                word: &[u8],
                values: &[u64],
                options: &[Option<u64>],
            ) -> Option<Result<AnyParams, ParamError>> {
                match Kind::limiter(word)? {
                    $(Kind::$l => Some(<$lt as Algorithm>::params(values, options).map(AnyParams::$l)),)*
                    _ => None,
                }
            }

            /// Builds the parameters of the rate limiter `kind` from integers (see
            /// [`Algorithm::params`]); `None` if `kind` is not a rate limiter.
            pub fn from_numbers(
                kind: Kind,
                values: &[u64],
                options: &[Option<u64>],
            ) -> Option<Result<AnyParams, ParamError>> {
                match kind {
                    $(Kind::$l => Some(<$lt as Algorithm>::params(values, options).map(AnyParams::$l)),)*
                    _ => None,
                }
            }

            /// The numbers these parameters were built from, as a command takes them.
            pub fn numbers(&self) -> Numbers {
                match self {
                    $(AnyParams::$l(p) => <$lt as Algorithm>::numbers(p),)*
                }
            }

            /// [`RateLimiter::check`] of this algorithm. A state of another algorithm (the
            /// limiter was redefined) counts as no state: the limiter starts afresh.
            pub fn check(
                &self,
                state: Option<AnyState>,
                now: Micros,
                cost: u64,
            ) -> (Decision, Option<AnyState>) {
                match self {
                    $(AnyParams::$l(p) => {
                        let state = match state { Some(AnyState::$l(s)) => Some(s), _ => None };
                        let (d, next) = <$lt as RateLimiter>::check(state, now, p, cost);
                        (d, next.map(AnyState::$l))
                    })*
                }
            }

            /// [`RateLimiter::force`] of this algorithm (a state of another algorithm
            /// counts as no state).
            pub fn force(
                &self,
                state: Option<AnyState>,
                now: Micros,
                cost: u64,
            ) -> (Decision, Option<AnyState>) {
                match self {
                    $(AnyParams::$l(p) => {
                        let state = match state { Some(AnyState::$l(s)) => Some(s), _ => None };
                        let (d, next) = <$lt as RateLimiter>::force(state, now, p, cost);
                        (d, next.map(AnyState::$l))
                    })*
                }
            }

            /// A partial grant ([`upto`]) of this algorithm: the decision, the units
            /// granted and the state to store (a state of another algorithm counts as no
            /// state).
            pub fn upto(
                &self,
                state: Option<AnyState>,
                now: Micros,
                cost: u64,
            ) -> (Decision, u64, Option<AnyState>) {
                match self {
                    $(AnyParams::$l(p) => {
                        let state = match state { Some(AnyState::$l(s)) => Some(s), _ => None };
                        let (d, granted, next) = upto::<$lt>(state, now, p, cost);
                        (d, granted, next.map(AnyState::$l))
                    })*
                }
            }

            /// [`RateLimiter::refund`] of this algorithm (a state of another algorithm
            /// counts as no state).
            pub fn refund(
                &self,
                state: Option<AnyState>,
                now: Micros,
                amount: u64,
            ) -> (u64, Option<AnyState>) {
                match self {
                    $(AnyParams::$l(p) => {
                        let state = match state { Some(AnyState::$l(s)) => Some(s), _ => None };
                        let (n, next) = <$lt as RateLimiter>::refund(state, now, p, amount);
                        (n, next.map(AnyState::$l))
                    })*
                }
            }
        }

        impl AnyState {
            /// The algorithm.
            pub const fn kind(&self) -> Kind {
                match self {
                    $(AnyState::$l(_) => Kind::$l,)*
                }
            }

            /// What RL.STATE shows of it (see [`Algorithm::view`]).
            pub fn view(&self, now: Micros) -> StateView {
                match self {
                    $(AnyState::$l(s) => <$lt as Algorithm>::view(s, now),)*
                }
            }
        }
    };
}

crate::registry_full!(generate);

/// What a configuration's rate is to a rate limiter, read from its declared
/// [`RateField`]s and [`Share`] (no algorithm is named here).
impl AnyParams {
    /// The parameters of the rate limiter `kind` for a configured `rate` (`limit` and
    /// `window_ms` checked first, under those names); `None` if `kind` is not a rate
    /// limiter.
    ///
    /// ```
    /// use redis_rl_core::{AnyParams, ConfigRate, Kind};
    /// let rate = ConfigRate { limit: 10, window_ms: 1_000, burst: Some(30) };
    /// let tb = AnyParams::from_rate(Kind::TokenBucket, &rate).unwrap().unwrap();
    /// assert_eq!(tb.numbers().values(), [30, 10, 1_000]);
    /// assert_eq!(tb.quota(), (30, 3_000));
    /// ```
    pub fn from_rate(kind: Kind, rate: &ConfigRate) -> Option<Result<AnyParams, ParamError>> {
        if !kind.is_limiter() {
            return None;
        }
        let numbers = match rate::numbers_of(rate, kind.rate_fields(), kind.params()) {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        AnyParams::from_numbers(kind, numbers.values(), numbers.options())
    }

    /// The configured rate these parameters carry (`limit` per `window_ms`, the burst).
    pub fn rate(&self) -> ConfigRate {
        let kind = self.kind();
        let numbers = self.numbers();
        numbers.rate(kind.rate_fields()).unwrap_or(ConfigRate {
            limit: numbers.values().first().copied().unwrap_or(0),
            window_ms: 0,
            burst: None,
        })
    }

    /// The quota a client is shown, `(limit, window_ms)`: the units that may pass at once,
    /// and the time in which the rate refills them (`q` and `w` of `RateLimit-Policy`).
    pub fn quota(&self) -> (u64, u64) {
        rate::quota(&self.rate())
    }

    /// One of `instances` local fallbacks' share of this limit, validated: see [`Share`]
    /// and [`Kind::local_exact_max`].
    pub fn local_share(&self, instances: u64) -> Result<AnyParams, ParamError> {
        let kind = self.kind();
        let Some(share) = kind.share() else {
            return Ok(*self);
        };
        let numbers = self.numbers();
        if numbers.rate(kind.rate_fields()).is_none() {
            // No window to keep (a calendar quota): each instance gets its part of the
            // limit, the other numbers as they are.
            let mut values = [0u64; crate::algorithm::MAX_PARAMS];
            for (i, (slot, v)) in values.iter_mut().zip(numbers.values()).enumerate() {
                let is_limit = kind.rate_fields().get(i) == Some(&RateField::Limit);
                *slot = if is_limit {
                    (*v / instances.max(1)).max(1)
                } else {
                    *v
                };
            }
            let values = values.get(..numbers.values().len()).unwrap_or(&[]);
            return AnyParams::from_numbers(kind, values, numbers.options()).unwrap_or(Ok(*self));
        }
        let part = rate::share_of(&self.rate(), share, instances);
        let runs_as = match kind.local_exact_max() {
            Some((max, other)) if part.limit > max => other,
            _ => kind,
        };
        AnyParams::from_rate(runs_as, &part).unwrap_or(Ok(*self))
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.config_name())
    }
}

/// A configuration names a rate limiter by its config name (`"sliding"`).
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Kind, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Kind;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the name of a rate limiter")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Kind, E> {
                Kind::from_config_name(name)
                    .filter(|k| k.is_limiter())
                    .ok_or_else(|| E::unknown_variant(name, Kind::CONFIG_NAMES))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// The spec words of the rate limiters as error texts list them:
/// `TOKENBUCKET, SLIDING, FIXED, GCRA or LOG`.
pub struct SpecNames;

impl std::fmt::Display for SpecNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = Kind::LIMITERS.iter().map(|k| k.spec_name());
        let last = Kind::LIMITERS.len().saturating_sub(1);
        for (i, name) in names.enumerate() {
            let sep = match i {
                0 => "",
                i if i == last => " or ",
                _ => ", ",
            };
            write!(f, "{sep}{name}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_names_are_unique_and_round_trip() {
        for (i, k) in Kind::ALL.iter().enumerate() {
            assert_eq!(Kind::from_tag(k.tag()), Some(*k));
            for other in &Kind::ALL[..i] {
                assert_ne!(k.tag(), other.tag());
                assert_ne!(k.name(), other.name());
                assert_ne!(k.spec_name(), other.spec_name());
            }
            assert!(k.params().len() <= crate::algorithm::MAX_PARAMS);
            assert!(k.options().len() <= crate::algorithm::MAX_OPTIONS);
        }
        assert_eq!(Kind::from_tag(b'?'), None);
    }

    #[test]
    fn commands_and_config_names() {
        for (i, k) in Kind::ALL.iter().enumerate() {
            assert_eq!(k.command(), format!("RL.{}", k.spec_name()));
            assert_eq!(Kind::from_config_name(k.config_name()), Some(*k));
            for other in &Kind::ALL[..i] {
                assert_ne!(k.config_name(), other.config_name());
            }
            // A rate limiter's rate fields name a limit and a window (or a calendar
            // period), one per parameter.
            if k.is_limiter() {
                let fields = k.rate_fields();
                assert_eq!(fields.len(), k.params().len() + k.options().len(), "{k:?}");
                assert!(
                    fields.contains(&RateField::Limit)
                        && (fields.contains(&RateField::WindowMs)
                            || fields.contains(&RateField::Period))
                );
            }
        }
        assert_eq!(
            Kind::CONFIG_NAMES,
            ["token_bucket", "sliding", "fixed", "gcra", "log", "quota"]
        );
        assert_eq!(Kind::from_config_name("leaky"), None);
    }

    #[test]
    fn numbers_are_the_inverse_of_params() {
        let rate = ConfigRate {
            limit: 7,
            window_ms: 300,
            burst: None,
        };
        for k in Kind::LIMITERS.iter().filter(|k| **k != Kind::Quota) {
            let p = AnyParams::from_rate(*k, &rate).unwrap().unwrap();
            let n = p.numbers();
            assert_eq!(
                AnyParams::from_numbers(*k, n.values(), n.options()),
                Some(Ok(p))
            );
            assert_eq!(AnyParams::from_rate(*k, &p.rate()), Some(Ok(p)), "{k:?}");
            assert_eq!(p.quota(), (7, 300), "{k:?}");
        }
        // GCRA's burst at its default is left out, as a caller would leave it.
        let g = AnyParams::new(b"GCRA", &[5, 1_000], &[Some(5)])
            .unwrap()
            .unwrap();
        assert_eq!(g.numbers().options(), [None]);
        let g = AnyParams::new(b"GCRA", &[5, 1_000], &[Some(2)])
            .unwrap()
            .unwrap();
        assert_eq!(g.numbers().options(), [Some(2)]);
        assert_eq!(g.quota(), (2, 400));
        // A calendar quota is not a window: its numbers round-trip, a windowed rate cannot
        // make one, and its defaults (UTC, anchor 1) are left out.
        let q = AnyParams::new(b"QUOTA", &[1_000, 3], &[Some(1_439 + 330), Some(15)])
            .unwrap()
            .unwrap();
        let n = q.numbers();
        assert_eq!(
            (n.values(), n.options()),
            (&[1_000, 3][..], &[Some(1_769), Some(15)][..])
        );
        assert_eq!(
            AnyParams::from_numbers(Kind::Quota, n.values(), n.options()),
            Some(Ok(q))
        );
        let utc = AnyParams::new(b"QUOTA", &[5, 1], &[Some(1_439), Some(1)])
            .unwrap()
            .unwrap();
        assert_eq!(utc.numbers().options(), [None, None]);
        assert_eq!(
            AnyParams::from_rate(Kind::Quota, &rate)
                .unwrap()
                .unwrap_err()
                .to_string(),
            "period must be DAY, WEEK, MONTH or YEAR"
        );
    }

    #[test]
    fn configured_rates_name_the_configurations_fields() {
        let rate = |limit, window_ms| ConfigRate {
            limit,
            window_ms,
            burst: None,
        };
        let err = |k, r| {
            AnyParams::from_rate(k, &r)
                .unwrap()
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(Kind::TokenBucket, rate(0, 1)),
            "limit must be an integer between 1 and 1000000000000000"
        );
        assert_eq!(
            err(Kind::Gcra, rate(1, 0)),
            "window_ms must be an integer between 1 and 1000000000000"
        );
        assert_eq!(
            err(Kind::SlidingLog, rate(10_001, 1)),
            "limit must be an integer between 1 and 10000"
        );
        assert!(AnyParams::from_rate(Kind::Concurrency, &rate(1, 1)).is_none());
    }

    #[test]
    fn local_shares_divide_the_limit_and_a_large_log_runs_as_a_sliding_window() {
        let p = |word: &[u8], values: &[u64], options: &[Option<u64>]| {
            AnyParams::new(word, values, options).unwrap().unwrap()
        };
        let g = p(b"GCRA", &[10, 1_000], &[None]);
        assert_eq!(g.local_share(4), Ok(p(b"GCRA", &[10, 4_000], &[Some(2)])));
        let tb = p(b"TOKENBUCKET", &[10, 2, 700], &[]);
        assert_eq!(
            tb.local_share(3),
            Ok(p(b"TOKENBUCKET", &[3, 2, 2_100], &[]))
        );
        let f = p(b"FIXED", &[3, 1_000], &[]);
        assert_eq!(f.local_share(4), Ok(p(b"FIXED", &[1, 1_000], &[])));
        for one in [1, 0] {
            assert_eq!(f.local_share(one), Ok(f));
        }
        let small = p(b"LOG", &[64, 1_000], &[]);
        assert_eq!(small.local_share(1), Ok(small));
        let large = p(b"LOG", &[65, 1_000], &[]);
        assert_eq!(large.local_share(1), Ok(p(b"SLIDING", &[65, 1_000], &[])));
        // The share decides: 10000 over 200 instances is 50 entries, exact again.
        let shared = p(b"LOG", &[10_000, 1_000], &[]);
        assert_eq!(shared.local_share(200), Ok(p(b"LOG", &[50, 1_000], &[])));
        // A calendar quota shares its limit and keeps its calendar.
        let q = p(b"QUOTA", &[1_000, 3], &[Some(1_769), Some(15)]);
        assert_eq!(
            q.local_share(3),
            Ok(p(b"QUOTA", &[333, 3], &[Some(1_769), Some(15)]))
        );
    }

    #[test]
    fn spec_words_and_their_order() {
        assert_eq!(
            SpecNames.to_string(),
            "TOKENBUCKET, SLIDING, FIXED, GCRA, LOG or QUOTA"
        );
        assert_eq!(Kind::limiter(b"tokenBucket"), Some(Kind::TokenBucket));
        assert_eq!(Kind::limiter(b"CONCURRENCY"), None);
        let upto: Vec<_> = Kind::ALL.iter().filter(|k| k.upto()).collect();
        assert_eq!(
            upto,
            [
                &Kind::TokenBucket,
                &Kind::SlidingWindow,
                &Kind::FixedWindow,
                &Kind::Gcra,
                &Kind::Quota
            ]
        );
    }

    #[test]
    fn any_params_dispatch_to_the_algorithm() {
        let p = AnyParams::new(b"TOKENBUCKET", &[2, 1, 1_000], &[])
            .unwrap()
            .unwrap();
        let (d, s) = p.check(None, Micros(0), 2);
        assert!(d.is_allowed());
        assert_eq!(s.as_ref().map(AnyState::kind), Some(Kind::TokenBucket));
        assert!(!p.check(s.clone(), Micros(0), 1).0.is_allowed());
        assert_eq!(p.refund(s, Micros(0), 5).0, 2);
        // A state of another algorithm is no state.
        let other = AnyParams::new(b"FIXED", &[1, 1_000], &[]).unwrap().unwrap();
        let (_, fixed) = other.check(None, Micros(0), 1);
        assert!(p.check(fixed.clone(), Micros(0), 2).0.is_allowed());
        let (d, granted, s) = p.upto(fixed, Micros(0), 5);
        assert_eq!((d.remaining, granted), (0, 2));
        assert_eq!(p.upto(s, Micros(0), 5).1, 0);
        assert_eq!(
            AnyParams::new(b"GCRA", &[1], &[]).unwrap(),
            Err(crate::limits::duration_ms("period_ms").error())
        );
    }
}
