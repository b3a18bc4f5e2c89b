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

/// One operation on a rate limiter's state, written once for every algorithm: the
/// generated dispatch of [`AnyParams`] picks the algorithm, the step runs it.
trait Step {
    /// What the operation tells the caller besides the new state.
    type Out;
    /// Runs the operation with algorithm `A`.
    fn run<A: RateLimiter>(
        self,
        state: Option<A::State>,
        params: &A::Params,
    ) -> (Self::Out, Option<A::State>);
}

/// [`RateLimiter::check`], or [`RateLimiter::force`] with `force`.
struct Check {
    now: Micros,
    cost: u64,
    force: bool,
}

impl Step for Check {
    type Out = Decision;
    fn run<A: RateLimiter>(
        self,
        state: Option<A::State>,
        params: &A::Params,
    ) -> (Decision, Option<A::State>) {
        if self.force {
            A::force(state, self.now, params, self.cost)
        } else {
            A::check(state, self.now, params, self.cost)
        }
    }
}

/// [`upto`]: the decision and the units granted.
struct UpTo {
    now: Micros,
    cost: u64,
}

impl Step for UpTo {
    type Out = (Decision, u64);
    fn run<A: RateLimiter>(
        self,
        state: Option<A::State>,
        params: &A::Params,
    ) -> ((Decision, u64), Option<A::State>) {
        let (decision, granted, next) = upto::<A>(state, self.now, params, self.cost);
        ((decision, granted), next)
    }
}

/// [`RateLimiter::refund`]: the units given back.
struct Refund {
    now: Micros,
    amount: u64,
}

impl Step for Refund {
    type Out = u64;
    fn run<A: RateLimiter>(
        self,
        state: Option<A::State>,
        params: &A::Params,
    ) -> (u64, Option<A::State>) {
        A::refund(state, self.now, params, self.amount)
    }
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
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
            /// assert!(AnyParams::new(b"NOSUCH", &[1], &[]).is_none());
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

            /// Runs `step` with this algorithm's parameters and its state (a state of
            /// another algorithm, left by a redefined limiter, counts as no state: the
            /// limiter starts afresh); returns what `step` decided and the state to store.
            fn step<S: Step>(&self, state: Option<AnyState>, step: S) -> (S::Out, Option<AnyState>) {
                match self {
                    $(AnyParams::$l(p) => {
                        let state = match state { Some(AnyState::$l(s)) => Some(s), _ => None };
                        let (out, next) = step.run::<$lt>(state, p);
                        (out, next.map(AnyState::$l))
                    })*
                }
            }

            /// [`RateLimiter::check`] of this algorithm.
            pub fn check(
                &self,
                state: Option<AnyState>,
                now: Micros,
                cost: u64,
            ) -> (Decision, Option<AnyState>) {
                self.step(state, Check { now, cost, force: false })
            }

            /// [`RateLimiter::force`] of this algorithm.
            pub fn force(
                &self,
                state: Option<AnyState>,
                now: Micros,
                cost: u64,
            ) -> (Decision, Option<AnyState>) {
                self.step(state, Check { now, cost, force: true })
            }

            /// A partial grant ([`upto`]) of this algorithm: the decision, the units
            /// granted and the state to store.
            pub fn upto(
                &self,
                state: Option<AnyState>,
                now: Micros,
                cost: u64,
            ) -> (Decision, u64, Option<AnyState>) {
                let ((decision, granted), next) = self.step(state, UpTo { now, cost });
                (decision, granted, next)
            }

            /// [`RateLimiter::refund`] of this algorithm.
            pub fn refund(
                &self,
                state: Option<AnyState>,
                now: Micros,
                amount: u64,
            ) -> (u64, Option<AnyState>) {
                self.step(state, Refund { now, amount })
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
        let kind = self.kind();
        let numbers = self.numbers();
        if numbers.rate(kind.rate_fields()).is_none() {
            // A calendar period instead of a window: its limit over the period's usual
            // length.
            let field = |f: RateField| {
                let at = kind.rate_fields().iter().position(|x| *x == f)?;
                numbers.values().get(at).copied()
            };
            let period = field(RateField::Period).and_then(crate::calendar::Period::from_code);
            return (
                field(RateField::Limit).unwrap_or(0),
                period.map_or(0, crate::calendar::Period::usual_ms),
            );
        }
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
#[path = "registry_tests.rs"]
mod tests;
