//! The trait every algorithm implements: its name, stored tag, parameters with their ranges
//! (declared once, as data), and what RL.STATE shows of its state. Rate limiters, which
//! take `cost` units per call, also implement [`RateLimiter`] (`check` and `refund`).
//!
//! Parsers, documentation and clients read the ranges from here: the module's arguments,
//! RL.ALL's specs and the client's `Policy` all refuse the same numbers with the same text.

use std::fmt::Debug;

use crate::decision::Decision;
use crate::limits::{ParamError, Range};
use crate::rate::{Numbers, RateField, Share};
use crate::registry::Kind;
use crate::time::Micros;

/// A named option after the positional parameters, such as GCRA's `BURST b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opt {
    /// The option word as the user writes it (`BURST`), matched in any case.
    pub token: &'static str,
    /// The placeholder of its value in texts (`b`, as in `BURST b`).
    pub value: &'static str,
    /// The accepted range of its value.
    pub range: Range,
}

/// A value RL.STATE shows. (Another kind of value needs a variant here and its arm in the
/// module's reply.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateValue {
    /// A count, a duration or an instant.
    Int(u64),
}

/// What RL.STATE shows of one state, as `(name, value)` pairs in display order.
pub type StateView = Vec<(&'static str, StateValue)>;

/// One limiting algorithm: everything generic code needs to parse, store and show it.
pub trait Algorithm {
    /// The spec word (`TOKENBUCKET`): RL.ALL and RL.REFUND specs start with it.
    const NAME: &'static str;
    /// The single-key command (`RL.TOKENBUCKET`): `RL.` and the spec word.
    const COMMAND: &'static str;
    /// The name in error texts and RL.STATE (`token bucket`).
    const LABEL: &'static str;
    /// The tag byte in the stored header (`b'T'`); unique across the registry.
    const TAG: u8;
    /// The positional parameters, in order, with their names and ranges.
    const PARAMS: &'static [Range];
    /// The optional named parameters after them (none for most algorithms).
    const OPTIONS: &'static [Opt] = &[];
    /// Validated parameters.
    type Params: Copy + Debug + PartialEq + Eq;
    /// The stored state.
    type State: Clone + Debug + PartialEq;

    /// Builds the parameters from integers: `values` in the order of [`Self::PARAMS`],
    /// `options` in the order of [`Self::OPTIONS`] (`None` when not given). Every number is
    /// checked against its range; the error names the first one outside it.
    fn params(values: &[u64], options: &[Option<u64>]) -> Result<Self::Params, ParamError>;

    /// The numbers [`Self::params`] builds `params` from (an option at its default is left
    /// out, as a caller that did not give it would): what a command's arguments carry.
    fn numbers(params: &Self::Params) -> Numbers;

    /// What RL.STATE shows of `state` as of `now`, between the algorithm's name and the
    /// key's TTL: the stored parameters and the current count or tokens. Never changes it.
    fn view(state: &Self::State, now: Micros) -> StateView;
}

/// An algorithm that takes `cost` units per call: what RL.ALL, RL.REFUND and the single-key
/// commands run.
pub trait RateLimiter: Algorithm {
    /// Whether its command takes `UPTO` (a partial grant, see [`upto`]).
    const UPTO: bool = false;
    /// What each parameter is in a configured rate (positional ones, then options): which
    /// of them `limit`, `window_ms` and `burst` feed.
    const RATE: &'static [RateField];
    /// How the local fallback divides the limit among instances.
    const SHARE: Share;
    /// A share above this limit runs as the other algorithm in the local fallback (a state
    /// that grows with the limit, such as a log's, would cost too much memory per key).
    const LOCAL_EXACT_MAX: Option<(u64, Kind)> = None;

    /// Decides whether `cost` units may be taken at `now`; returns the decision and the
    /// state to store (`None`: write nothing).
    fn check(
        state: Option<Self::State>,
        now: Micros,
        params: &Self::Params,
        cost: u64,
    ) -> (Decision, Option<Self::State>);

    /// Takes `cost` units at `now` whatever the limit says (`FORCE`): the decision is
    /// allowed, and what goes past the limit is a debt that later calls wait for (their
    /// `retry_after` includes it). How long a debt is remembered is the algorithm's own: a
    /// bucket or a GCRA repays it by refilling; a fixed window or a calendar quota is
    /// refused until its window ends; a sliding window or log while the units are inside
    /// the window. Returns the decision and the state to store (`None` for a zero cost).
    fn force(
        state: Option<Self::State>,
        now: Micros,
        params: &Self::Params,
        cost: u64,
    ) -> (Decision, Option<Self::State>);

    /// Gives back up to `amount` units taken earlier; returns the units given back and the
    /// state to store (`None`: write nothing).
    fn refund(
        state: Option<Self::State>,
        now: Micros,
        params: &Self::Params,
        amount: u64,
    ) -> (u64, Option<Self::State>);
}

/// Implements [`RateLimiter`] for `$algorithm` with the `check`, `force` and `refund` functions of
/// the module where it is invoked, and the associated constants given in braces (`UPTO`,
/// `RATE`, `SHARE`, `LOCAL_EXACT_MAX`).
macro_rules! rate_limiter {
    ($algorithm:ty { $($constant:item)* }) => {
        impl $crate::algorithm::RateLimiter for $algorithm {
            $($constant)*

            fn check(
                state: Option<Self::State>,
                now: $crate::Micros,
                params: &Self::Params,
                cost: u64,
            ) -> ($crate::Decision, Option<Self::State>) {
                check(state, now, params, cost)
            }

            fn force(
                state: Option<Self::State>,
                now: $crate::Micros,
                params: &Self::Params,
                cost: u64,
            ) -> ($crate::Decision, Option<Self::State>) {
                force(state, now, params, cost)
            }

            fn refund(
                state: Option<Self::State>,
                now: $crate::Micros,
                params: &Self::Params,
                amount: u64,
            ) -> (u64, Option<Self::State>) {
                refund(state, now, params, amount)
            }
        }
    };
}
pub(crate) use rate_limiter;

/// A partial grant (`COST n UPTO`): takes `min(cost, available)` units, where `available` is
/// the largest cost [`RateLimiter::check`] would allow right now (the `remaining` of a
/// zero-cost check). Returns the decision, the units granted and the state to store
/// (`None`: write nothing).
///
/// - `granted > 0`: the decision and state of `check(granted)` (allowed; `remaining` is
///   what is left after the grant).
/// - nothing available (and `cost > 0`): the decision of `check(1)`, denied with the wait
///   until one unit is available; `granted` is 0 and nothing is written.
/// - `cost == 0`: the zero-cost check, as without `UPTO` (granted 0, nothing written).
///
/// A cost above the limit is not "never" here: it is simply more than can be granted.
/// Allocates nothing for the algorithms whose state is `Copy` (every one that takes `UPTO`).
///
/// ```
/// use redis_rl_core::algorithm::upto;
/// use redis_rl_core::token_bucket::{TokenBucket, TokenBucketParams};
/// use redis_rl_core::Micros;
/// let p = TokenBucketParams::new(10, 1, 1_000).unwrap();
/// let (d, granted, state) = upto::<TokenBucket>(None, Micros(0), &p, 25);
/// assert_eq!((d.is_allowed(), granted, d.remaining), (true, 10, 0));
/// let (d, granted, none) = upto::<TokenBucket>(state, Micros(0), &p, 25);
/// assert_eq!((d.is_allowed(), granted), (false, 0));
/// assert!(none.is_none());
/// ```
pub fn upto<A: RateLimiter>(
    state: Option<A::State>,
    now: Micros,
    params: &A::Params,
    cost: u64,
) -> (Decision, u64, Option<A::State>) {
    let (probe, _) = A::check(state.clone(), now, params, 0);
    if cost == 0 {
        return (probe, 0, None);
    }
    let granted = cost.min(probe.remaining);
    // Nothing available: the call for one unit tells how long until there is one.
    let (decision, next) = A::check(state, now, params, granted.max(1));
    if decision.is_allowed() && granted > 0 {
        (decision, granted, next)
    } else {
        (decision, 0, None)
    }
}

/// Checks `values` against `ranges` in order and returns them as an array: the error of
/// the first value outside its range, or of the first missing one.
///
/// ```
/// use redis_rl_core::algorithm::positional;
/// use redis_rl_core::limits;
/// let ranges = [limits::count("limit"), limits::duration_ms("window_ms")];
/// assert_eq!(positional(&ranges, &[10, 1_000]), Ok([10, 1_000]));
/// assert_eq!(positional::<2>(&ranges, &[0, 1_000]), Err(ranges[0].error()));
/// assert_eq!(positional::<2>(&ranges, &[10]), Err(ranges[1].error()));
/// ```
pub fn positional<const N: usize>(
    ranges: &[Range],
    values: &[u64],
) -> Result<[u64; N], ParamError> {
    let mut out = [0u64; N];
    for (i, (slot, range)) in out.iter_mut().zip(ranges).enumerate() {
        *slot = range.check(*values.get(i).ok_or(range.error())?)?;
    }
    Ok(out)
}

/// Most positional parameters of any algorithm (parsers collect them on the stack).
pub const MAX_PARAMS: usize = 4;
/// Most options of any algorithm.
pub const MAX_OPTIONS: usize = 2;

/// Where a parser gets an algorithm's numbers from (the module reads its arguments).
pub trait Source {
    /// What a bad or missing number is.
    type Error: From<ParamError>;

    /// The next positional parameter, checked against `range` (the error names it when it
    /// is missing or outside).
    fn value(&mut self, range: Range) -> Result<u64, Self::Error>;

    /// The option `opt` if it is given (next), checked against its range; `None` if not.
    fn option(&mut self, opt: &Opt) -> Result<Option<u64>, Self::Error>;
}

/// Parses `A`'s parameters from `source`: each positional one in order, then the options in
/// any order (each at most once: a repeated one is left for the next spec, which refuses it),
/// then [`Algorithm::params`]. The one parser shared by every spec that names an algorithm.
/// Allocates nothing.
pub fn parse_params<A: Algorithm, S: Source>(source: &mut S) -> Result<A::Params, S::Error> {
    let mut values = [0u64; MAX_PARAMS];
    for (slot, range) in values.iter_mut().zip(A::PARAMS) {
        *slot = source.value(*range)?;
    }
    let mut options = [None; MAX_OPTIONS];
    // One round per option: each round takes whichever of the missing ones comes next.
    for _ in A::OPTIONS {
        for (slot, opt) in options.iter_mut().zip(A::OPTIONS) {
            if slot.is_none() {
                *slot = source.option(opt)?;
            }
        }
    }
    let values = values.get(..A::PARAMS.len()).unwrap_or(&[]);
    let options = options.get(..A::OPTIONS.len()).unwrap_or(&[]);
    Ok(A::params(values, options)?)
}
