//! A limiter specification as RL.ALL and RL.REFUND take it: `TOKENBUCKET capacity
//! refill_tokens refill_ms`, `SLIDING limit window_ms`, ...; and running one against a key.
//!
//! The words, parameters and ranges come from the core registry (`AnyParams`), and the
//! dispatch to each algorithm's stored state is generated from the same list, so multi-key
//! commands treat every algorithm alike and a new one needs nothing here.

use std::fmt;
use std::slice::Iter;

use redis_module::RedisString;
use redis_rl_core::algorithm::{Opt, RateLimiter, Source};
use redis_rl_core::decision::expire_at;
use redis_rl_core::limits::{ParamError, Range};
use redis_rl_core::registry::SpecNames;
use redis_rl_core::{AnyParams, AnyState, Decision, Kind, Micros};

use crate::args::{bytes, integer, shown, ArgError};
use crate::config;
use crate::encoding::{Encoded, Stored};
use crate::error::Error;
use crate::store::LimiterKey;

/// One limiter's algorithm and parameters.
pub type Spec = AnyParams;

/// Why a spec could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// No spec where one was expected.
    Missing,
    /// A name that is not an algorithm.
    UnknownAlgorithm(String),
    /// A bad parameter of a known algorithm.
    Arg(ArgError),
}

impl fmt::Display for SpecError {
    /// The text after any position prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Missing => write!(f, "missing, expected {SpecNames} and its parameters"),
            SpecError::UnknownAlgorithm(name) => {
                write!(f, "unknown algorithm '{name}', expected {SpecNames}")
            }
            SpecError::Arg(e) => write!(f, "{e}"),
        }
    }
}

impl From<ArgError> for SpecError {
    fn from(e: ArgError) -> Self {
        SpecError::Arg(e)
    }
}

impl From<ParamError> for SpecError {
    fn from(e: ParamError) -> Self {
        SpecError::Arg(ArgError::Param(e))
    }
}

/// A spec's numbers, read from the arguments that follow its word.
struct Args<'a, 'b> {
    kind: Kind,
    args: &'a mut Iter<'b, RedisString>,
}

impl Source for Args<'_, '_> {
    type Error = SpecError;

    // Inlined into the parameter loop: it runs for every number of every spec.
    #[inline(always)]
    fn value(&mut self, range: Range) -> Result<u64, SpecError> {
        let range = config::param_range_of(Some(self.kind), range);
        let arg = self.args.next().ok_or(range.error())?;
        Ok(integer(arg, range)?)
    }

    fn option(&mut self, opt: &Opt) -> Result<Option<u64>, SpecError> {
        let given = self
            .args
            .as_slice()
            .first()
            .is_some_and(|a| bytes(a).eq_ignore_ascii_case(opt.token.as_bytes()));
        if !given {
            return Ok(None);
        }
        self.args.next();
        let value = self
            .args
            .next()
            .ok_or(ArgError::MissingValue(opt.token, opt.range))?;
        Ok(Some(integer(value, opt.range)?))
    }
}

/// Parses one spec from the front of `args`, consuming exactly its arguments: the word,
/// the parameters in order, then each of the algorithm's options if it comes next.
pub fn parse(args: &mut Iter<'_, RedisString>) -> Result<Spec, SpecError> {
    let name = args.next().ok_or(SpecError::Missing)?;
    let name = bytes(name);
    let unknown = || SpecError::UnknownAlgorithm(shown(name));
    let kind = Kind::limiter(name).ok_or_else(unknown)?;
    AnyParams::parse(kind, &mut Args { kind, args }).ok_or_else(unknown)?
}

/// Generates [`check`], [`encode`] and [`refund`] from the registry: one arm per rate limiter.
macro_rules! dispatch {
    (
        limiters: [$($l:ident = $lt:ty),* $(,)?],
        others: [$($o:ident = $ot:ty),* $(,)?] $(,)?
    ) => {
        /// Reads `spec`'s state from the open `key` (see [`LimiterKey::read`]) and decides
        /// whether `cost` units may be taken at `now` (taken whatever the limit says if
        /// `force`): the decision and the state to store if the call is to change the key.
        /// Writes nothing.
        pub fn check(
            spec: &Spec,
            key: &LimiterKey<'_>,
            now: Micros,
            cost: u64,
            force: bool,
        ) -> Result<(Decision, Option<AnyState>), Error> {
            match spec {
                $(AnyParams::$l(p) => {
                    let state = key.read()?;
                    let (decision, next) = if force {
                        <$lt as RateLimiter>::force(state, now, p, cost)
                    } else {
                        <$lt as RateLimiter>::check(state, now, p, cost)
                    };
                    Ok((decision, next.map(AnyState::$l)))
                })*
            }
        }

        /// The bytes to store for `state`.
        pub fn encode(state: &AnyState) -> Encoded {
            match state {
                $(AnyState::$l(s) => s.encode(),)*
            }
        }

        /// Reads `spec`'s state from the open `key`, gives back up to `amount` units at
        /// `now` and writes the key through the same handle if that changed it. Returns the
        /// units given back and the key's state afterwards (as a zero-cost decision).
        pub fn refund(
            spec: &Spec,
            key: &LimiterKey<'_>,
            now: Micros,
            amount: u64,
        ) -> Result<(u64, Decision), Error> {
            match spec {
                $(AnyParams::$l(p) => give_back::<$lt>(key, now, p, amount),)*
            }
        }
    };
}

redis_rl_core::registry!(dispatch);

fn give_back<A: RateLimiter>(
    key: &LimiterKey<'_>,
    now: Micros,
    params: &A::Params,
    amount: u64,
) -> Result<(u64, Decision), Error>
where
    A::State: Stored,
{
    let stored = key.read::<A::State>()?;
    let (refunded, state) = A::refund(stored.clone(), now, params, amount);
    let (view, _) = A::check(state.clone().or(stored), now, params, 0);
    if let Some(state) = state {
        let expiry = expire_at(now, view.reset_after, config::ttl_slack());
        state.with_bytes(|value| key.write(value, expiry))?;
    }
    Ok((refunded, view))
}
