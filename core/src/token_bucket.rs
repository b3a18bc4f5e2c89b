//! Token bucket with continuous, exact refill.
//!
//! The bucket holds at most `capacity` tokens and gains `refill_tokens` every `refill_ms`,
//! continuously. To accrue fractions of a token exactly, the level is stored in units of
//! 1 / `refill_us` of a token (`refill_us` = `refill_ms` x 1000): `elapsed_us` microseconds
//! then add exactly `refill_tokens x elapsed_us` units, an integer. Nothing is rounded while
//! the parameters stay the same, so there is no drift after any number of calls.

use crate::algorithm::{positional, rate_limiter, Algorithm, StateValue, StateView};
use crate::decision::{Decision, Outcome};
use crate::limits::{self, ParamError, Range};
use crate::rate::{Numbers, RateField, Share};
use crate::time::{ceil_millis_of, div_u128, Micros, Millis};

/// The token bucket in the [registry](crate::registry): `TOKENBUCKET capacity refill_tokens
/// refill_ms`.
pub struct TokenBucket;

impl Algorithm for TokenBucket {
    const NAME: &'static str = "TOKENBUCKET";
    const COMMAND: &'static str = "RL.TOKENBUCKET";
    const LABEL: &'static str = "token bucket";
    const TAG: u8 = b'T';
    const PARAMS: &'static [Range] = &[
        limits::count("capacity"),
        limits::count("refill_tokens"),
        limits::duration_ms("refill_ms"),
    ];
    type Params = TokenBucketParams;
    type State = TokenBucketState;

    fn params(values: &[u64], _options: &[Option<u64>]) -> Result<Self::Params, ParamError> {
        let [capacity, refill_tokens, refill_ms] = positional(Self::PARAMS, values)?;
        Ok(TokenBucketParams {
            capacity,
            refill_tokens,
            refill_ms,
        })
    }

    fn numbers(p: &Self::Params) -> Numbers {
        Numbers::new(&[p.capacity, p.refill_tokens, p.refill_ms], &[])
    }

    /// The bucket does not store its capacity or refill rate (each call passes them), so
    /// its level now cannot be known: this shows the whole tokens left at the last write.
    fn view(state: &Self::State, _now: Micros) -> StateView {
        let unit = u128::from(state.refill_ms.max(1)) * 1000;
        let tokens = u64::try_from(state.level / unit).unwrap_or(u64::MAX);
        vec![
            ("refill_ms", StateValue::Int(state.refill_ms)),
            ("tokens_at_update", StateValue::Int(tokens)),
            ("updated_at_ms", StateValue::Int(state.updated_at.0 / 1000)),
        ]
    }
}

rate_limiter!(TokenBucket {
    const UPTO: bool = true;
    // `burst` tokens (default `limit`) refilled at `limit` per window.
    const RATE: &'static [RateField] = &[RateField::BurstOrLimit, RateField::Limit, RateField::WindowMs];
    const SHARE: Share = Share::Period;
});

/// Validated token bucket parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenBucketParams {
    capacity: u64,
    refill_tokens: u64,
    refill_ms: u64,
}

impl TokenBucketParams {
    /// Checks every parameter against its documented range.
    ///
    /// ```
    /// use redis_rl_core::token_bucket::TokenBucketParams;
    /// // The free tier: 100 requests, refilled at 100 per minute.
    /// assert!(TokenBucketParams::new(100, 100, 60_000).is_ok());
    /// assert!(TokenBucketParams::new(0, 100, 60_000).is_err());
    /// ```
    pub fn new(capacity: u64, refill_tokens: u64, refill_ms: u64) -> Result<Self, ParamError> {
        TokenBucket::params(&[capacity, refill_tokens, refill_ms], &[])
    }

    /// Most tokens the bucket holds.
    pub const fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens gained every `refill_ms`.
    pub const fn refill_tokens(&self) -> u64 {
        self.refill_tokens
    }

    /// The refill period in milliseconds.
    pub const fn refill_ms(&self) -> u64 {
        self.refill_ms
    }

    fn units_per_token(&self) -> u128 {
        u128::from(self.refill_ms) * 1000
    }

    fn full_level(&self) -> u128 {
        u128::from(self.capacity) * self.units_per_token()
    }
}

/// The stored state of one bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucketState {
    /// Tokens x `refill_ms` x 1000 (see the module doc).
    pub level: u128,
    /// When `level` was computed. Never moves backwards, so a clock that steps back
    /// cannot credit the same interval twice.
    pub updated_at: Micros,
    /// The `refill_ms` that `level` is scaled by.
    pub refill_ms: u64,
}

/// Decides whether `cost` tokens may be taken at `now`.
///
/// Returns the decision and the state to store, if any. `None` means "write nothing":
/// a denial, an impossible cost, or a zero-cost check leave the key as it was.
///
/// A missing state is a full bucket. A stored state with other parameters is carried over:
/// its tokens are kept (rounded down when `refill_ms` changed) and clamped to the new
/// capacity, so lowering a limit takes effect at once and changing it never adds tokens.
///
/// ```
/// use redis_rl_core::token_bucket::{check, TokenBucketParams};
/// use redis_rl_core::{Micros, Millis, Outcome};
/// let params = TokenBucketParams::new(2, 1, 1_000).unwrap();
/// let (first, state) = check(None, Micros(0), &params, 1);
/// assert!(first.is_allowed());
/// let (second, state) = check(state, Micros(0), &params, 1);
/// assert_eq!(second.remaining, 0);
/// let (third, none) = check(state, Micros(0), &params, 1);
/// assert_eq!(third.outcome, Outcome::Denied { retry_after: Millis(1_000) });
/// assert!(none.is_none());
/// ```
pub fn check(
    state: Option<TokenBucketState>,
    now: Micros,
    params: &TokenBucketParams,
    cost: u64,
) -> (Decision, Option<TokenBucketState>) {
    let (level, as_of, full) = level_at(state, now, params);
    let unit = params.units_per_token();
    let rate = u128::from(params.refill_tokens);
    // Waits are measured from `as_of`; when the clock stepped back it is later than `now`.
    let lag = u128::from(as_of.0 - now.0);
    // ceil(missing / rate) µs, plus the lag, rounded up to ms: in one division, as
    // ceil((missing + lag x rate) / rate) (at most 10^30 + 1.9 x 10^34: fits in u128).
    let wait_to_reach = |target: u128, from: u128| -> Millis {
        ceil_millis_of(
            target.saturating_sub(from) + lag * rate,
            params.refill_tokens,
        )
    };
    let decision = |outcome, after: u128| Decision {
        outcome,
        limit: params.capacity,
        remaining: u64::try_from(div_u128(after, params.refill_ms * 1000)).unwrap_or(u64::MAX),
        reset_after: wait_to_reach(full, after),
    };

    if cost > params.capacity {
        return (decision(Outcome::Never, level), None);
    }
    let need = u128::from(cost) * unit;
    if level < need {
        let retry_after = wait_to_reach(need, level);
        return (decision(Outcome::Denied { retry_after }, level), None);
    }
    let after = level - need;
    let new_state = (cost > 0).then_some(TokenBucketState {
        level: after,
        updated_at: as_of,
        refill_ms: params.refill_ms,
    });
    (decision(Outcome::Allowed, after), new_state)
}

/// Takes `cost` tokens at `now` even when the bucket holds fewer (`FORCE`). The missing
/// tokens are a debt: the bucket stays empty until the refill has paid them back (the state
/// records the instant it is empty and paid, which may be in the future), so later calls
/// wait for the debt as well as for their own tokens.
///
/// ```
/// use redis_rl_core::token_bucket::{check, force, TokenBucketParams};
/// use redis_rl_core::{Micros, Millis, Outcome};
/// let p = TokenBucketParams::new(10, 10, 1_000).unwrap(); // one token per 100 ms
/// let (d, s) = force(None, Micros(0), &p, 15);
/// assert!(d.is_allowed());
/// // 5 tokens of debt (500 ms), then one more token (100 ms).
/// let (d, _) = check(s, Micros(0), &p, 1);
/// assert_eq!(d.outcome, Outcome::Denied { retry_after: Millis(600) });
/// ```
pub fn force(
    state: Option<TokenBucketState>,
    now: Micros,
    params: &TokenBucketParams,
    cost: u64,
) -> (Decision, Option<TokenBucketState>) {
    let need = u128::from(cost) * params.units_per_token();
    let (level, as_of, full) = level_at(state, now, params);
    if level >= need {
        return check(state, now, params, cost);
    }
    // Empty and paid back once `deficit / rate` microseconds of refill have passed; the
    // level then holds the fraction of a microsecond's refill left over.
    let deficit = need - level;
    let rate = u128::from(params.refill_tokens);
    let wait_us = deficit.div_ceil(rate);
    let paid_at = u64::try_from(u128::from(as_of.0) + wait_us).unwrap_or(u64::MAX);
    let left = (wait_us * rate - deficit).min(full);
    let until_full = ceil_millis_of(
        u128::from(paid_at - now.0) * rate + (full - left),
        params.refill_tokens,
    );
    let decision = Decision {
        outcome: Outcome::Allowed,
        limit: params.capacity,
        remaining: 0,
        reset_after: until_full,
    };
    let state = TokenBucketState {
        level: left,
        updated_at: Micros(paid_at),
        refill_ms: params.refill_ms,
    };
    (decision, Some(state))
}

/// Gives back up to `amount` tokens taken earlier (RL.REFUND), capped at capacity.
///
/// Returns how many whole tokens went back and the state to store (`None`: nothing to
/// write, the bucket was already full or `amount` is 0).
pub fn refund(
    state: Option<TokenBucketState>,
    now: Micros,
    params: &TokenBucketParams,
    amount: u64,
) -> (u64, Option<TokenBucketState>) {
    let (level, as_of, full) = level_at(state, now, params);
    let unit = params.units_per_token();
    // A partly refilled token counts as room for one: the refund then fills up to capacity.
    let refunded = ((full - level).div_ceil(unit)).min(u128::from(amount));
    if refunded == 0 {
        return (0, None);
    }
    let new_state = TokenBucketState {
        level: (level + refunded * unit).min(full),
        updated_at: as_of,
        refill_ms: params.refill_ms,
    };
    (u64::try_from(refunded).unwrap_or(0), Some(new_state))
}

/// The bucket's level at `now` in the units of `params`, the instant it is computed for
/// (`now`, or the stored instant if the clock has stepped back since), and the level of a
/// full bucket.
fn level_at(
    state: Option<TokenBucketState>,
    now: Micros,
    params: &TokenBucketParams,
) -> (u128, Micros, u128) {
    let full = params.full_level();
    let Some(stored) = state else {
        return (full, now, full);
    };
    let stored_level = if stored.refill_ms == params.refill_ms {
        stored.level
    } else {
        // Same number of tokens in the new units, rounded down: never a gift.
        let old_unit = u128::from(stored.refill_ms.max(1)) * 1000;
        let level = stored.level.min(u128::from(limits::MAX_COUNT) * old_unit);
        level / old_unit * params.units_per_token()
            + level % old_unit * params.units_per_token() / old_unit
    };
    let as_of = now.max(stored.updated_at);
    let elapsed = u128::from(as_of.0 - stored.updated_at.0);
    let refilled = stored_level.saturating_add(u128::from(params.refill_tokens) * elapsed);
    (refilled.min(full), as_of, full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promises::Model;
    use crate::scenario::{case, run};
    use proptest::prelude::*;

    impl Model for TokenBucket {
        fn params_of(limit: u64) -> Self::Params {
            params(limit, limit, 1_000)
        }

        fn arb_params() -> BoxedStrategy<TokenBucketParams> {
            (1u64..100, 1u64..100, 1u64..10_000)
                .prop_map(|(c, t, ms)| params(c, t, ms))
                .boxed()
        }

        /// The full bucket plus what accrues in the span.
        fn budget(p: &TokenBucketParams, span_us: u64) -> u128 {
            let accrued = u128::from(p.refill_tokens) * u128::from(span_us)
                / (u128::from(p.refill_ms) * 1000);
            u128::from(p.capacity) + accrued
        }
    }

    fn params(capacity: u64, refill_tokens: u64, refill_ms: u64) -> TokenBucketParams {
        TokenBucketParams::new(capacity, refill_tokens, refill_ms).unwrap()
    }

    #[test]
    fn ten_per_second_bucket_spec() {
        // capacity 10, 10 tokens per 1000 ms: one token every 100 ms.
        let p = params(10, 10, 1_000);
        run(
            &[
                //   now  cost allowed rem retry reset
                case(0, 1, true, 9, 0, 100),
                case(0, 9, true, 0, 0, 1_000),
                case(0, 1, false, 0, 100, 1_000),
                case(50, 1, false, 0, 50, 950),
                case(100, 1, true, 0, 0, 1_000),
                case(100, 11, false, 0, -1, 1_000),
                case(350, 2, true, 0, 0, 950),
                case(10_000, 0, true, 10, 0, 0),
                case(10_000, 10, true, 0, 0, 1_000),
            ],
            |s, now, cost| check(s, now, &p, cost),
        );
    }

    #[test]
    fn seed_tiers_admit_their_limit_per_minute() {
        for limit in [100, 1_000, 10_000] {
            let p = params(limit, limit, 60_000);
            let mut state = None;
            let mut admitted = 0;
            for _ in 0..limit + 5 {
                let (d, next) = check(state, Micros(0), &p, 1);
                admitted += u64::from(d.is_allowed());
                state = next.or(state);
            }
            assert_eq!(admitted, limit);
        }
    }

    #[test]
    fn fractions_of_a_token_accrue_exactly() {
        // 1 token every 3 ms: 1/3 of a token per ms. After 1 ms and 2 ms nothing is
        // whole; at 3 ms exactly one token is back.
        let p = params(1, 1, 3);
        let (_, s) = check(None, Micros(0), &p, 1);
        let (d, _) = check(s, Micros(1_000), &p, 1);
        assert_eq!(
            d.outcome,
            Outcome::Denied {
                retry_after: Millis(2)
            }
        );
        let (d, _) = check(s, Micros(2_999), &p, 1);
        assert_eq!(
            d.outcome,
            Outcome::Denied {
                retry_after: Millis(1)
            }
        );
        let (d, _) = check(s, Micros(3_000), &p, 1);
        assert!(d.is_allowed());
    }

    #[test]
    fn no_drift_after_a_million_calls() {
        // 7 tokens every 1000 ms, one call every 143 ms taking one token: in 1_000_000 calls
        // (143_000 s) exactly 1_001_000 tokens accrue, so every call passes and the level
        // ends where exact arithmetic says.
        let p = params(7, 7, 1_000);
        let mut state = None;
        for i in 0..1_000_000u64 {
            let (d, next) = check(state, Micros(i * 143_000), &p, 1);
            assert!(d.is_allowed(), "call {i}");
            state = next;
        }
        // Last call at 142_999_857 ms. Tokens: start 7, +7/1000 per ms, -1 per call,
        // capped at 7: the bucket is refilled by 1.001 per call and so stays full before
        // each call: 6 after it.
        let s = state.unwrap();
        assert_eq!(s.level, 6 * 1_000_000);
    }

    #[test]
    fn clock_stepping_back_gives_no_extra_tokens() {
        let p = params(10, 10, 1_000);
        let (_, s) = check(None, Micros(5_000_000), &p, 10);
        // The clock steps back one second, then forward again to 5.1 s.
        let (d, s2) = check(s, Micros(4_000_000), &p, 1);
        assert!(!d.is_allowed());
        assert_eq!(
            d.outcome,
            Outcome::Denied {
                retry_after: Millis(1_100)
            }
        );
        assert!(s2.is_none());
        let (d, _) = check(s, Micros(5_100_000), &p, 1);
        assert!(d.is_allowed());
        let (d, _) = check(s, Micros(5_100_000), &p, 2);
        assert!(!d.is_allowed());
    }

    #[test]
    fn lowering_capacity_clamps_and_changing_period_keeps_tokens() {
        let (_, s) = check(None, Micros(0), &params(100, 100, 60_000), 10);
        let (d, _) = check(s, Micros(0), &params(50, 100, 60_000), 0);
        assert_eq!(d.remaining, 50);
        let (d, _) = check(s, Micros(0), &params(100, 100, 1_000), 0);
        assert_eq!(d.remaining, 90);
        // 90 tokens at 100 per second: full 100 ms later.
        assert_eq!(d.reset_after, Millis(100));
    }

    #[test]
    fn refund_gives_tokens_back_up_to_capacity() {
        let p = params(10, 1, 1_000_000);
        let (_, s) = check(None, Micros(0), &p, 4);
        let (refunded, s2) = refund(s, Micros(0), &p, 3);
        assert_eq!(refunded, 3);
        assert_eq!(check(s2, Micros(0), &p, 0).0.remaining, 9);
        let (refunded, s3) = refund(s2, Micros(0), &p, 5);
        assert_eq!(refunded, 1);
        assert_eq!(check(s3, Micros(0), &p, 0).0.remaining, 10);
        assert_eq!(refund(None, Micros(0), &p, 5), (0, None));
    }

    #[test]
    fn largest_parameters_do_not_overflow() {
        let max = limits::MAX_COUNT;
        let p = params(max, max, limits::MAX_DURATION_MS);
        let (d, s) = check(None, Micros(u64::MAX), &p, max);
        assert!(d.is_allowed());
        assert_eq!(d.reset_after, Millis(limits::MAX_DURATION_MS));
        let (d, _) = check(s, Micros(u64::MAX), &p, max);
        assert_eq!(
            d.outcome,
            Outcome::Denied {
                retry_after: Millis(limits::MAX_DURATION_MS)
            }
        );
        let corrupt = TokenBucketState {
            level: u128::MAX,
            updated_at: Micros(0),
            refill_ms: 1,
        };
        let (d, _) = check(Some(corrupt), Micros(u64::MAX), &params(1, max, 7), 1);
        assert!(d.is_allowed());
    }

    /// The seed's Lua script in `f64`: `tokens = min(capacity, tokens + elapsed * rate)`.
    struct LuaModel {
        tokens: f64,
        last: f64,
    }

    proptest! {
        /// Against the seed's Lua math, over random call sequences: every decision and every
        /// `remaining` agrees wherever floating point is not within a hair of a boundary.
        #[test]
        fn agrees_with_the_seed_lua_script(
            capacity in 1u64..50,
            refill_tokens in 1u64..50,
            refill_ms in 1u64..5_000,
            calls in prop::collection::vec((0u64..3_000_000, 0u64..60), 1..200),
        ) {
            let p = params(capacity, refill_tokens, refill_ms);
            let rate = refill_tokens as f64 / (refill_ms as f64 * 1000.0);
            let mut lua = LuaModel { tokens: capacity as f64, last: 0.0 };
            let mut state = None;
            let mut now = 0u64;
            for (step_us, cost) in calls {
                now += step_us;
                let (d, next) = check(state, Micros(now), &p, cost);
                let t = now as f64;
                let tokens = (lua.tokens + (t - lua.last) * rate).min(capacity as f64);
                let near = |x: f64| (x - x.round()).abs() < 1e-6;
                let lua_allows = tokens >= cost as f64;
                if !near(tokens - cost as f64) && !near(tokens) {
                    prop_assert_eq!(d.is_allowed(), lua_allows);
                    let left = if lua_allows { tokens - cost as f64 } else { tokens };
                    prop_assert_eq!(d.remaining, left.floor() as u64);
                }
                if d.is_allowed() {
                    lua = LuaModel { tokens: tokens - cost as f64, last: t };
                    // Resync on exact state so float error cannot accumulate in the model.
                    if let Some(s) = next {
                        lua.tokens = s.level as f64 / (refill_ms as f64 * 1000.0);
                    }
                }
                state = next.or(state);
            }
        }
    }
}
