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
/// assert_eq!(redis_rl_core::registry!(count), 6);
/// ```
#[macro_export]
macro_rules! registry {
    ($callback:ident) => {
        $callback! {
            limiters: [
                TokenBucket = $crate::token_bucket::TokenBucket,
                SlidingWindow = $crate::sliding_window::SlidingWindow,
                FixedWindow = $crate::fixed_window::FixedWindow,
                Gcra = $crate::gcra::Gcra,
                SlidingLog = $crate::sliding_log::SlidingLog,
            ],
            others: [
                Concurrency = $crate::concurrency::Concurrency,
            ],
        }
    };
}

/// Generates [`Kind`], [`AnyParams`], [`AnyState`] and their dispatch from the list.
macro_rules! generate {
    (
        limiters: [$($l:ident = $lt:ty),* $(,)?],
        others: [$($o:ident = $ot:ty),* $(,)?] $(,)?
    ) => {
        /// The algorithm of a stored limiter (its tag byte) or of a spec.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

crate::registry!(generate);

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
    fn spec_words_and_their_order() {
        assert_eq!(
            SpecNames.to_string(),
            "TOKENBUCKET, SLIDING, FIXED, GCRA or LOG"
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
                &Kind::Gcra
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
