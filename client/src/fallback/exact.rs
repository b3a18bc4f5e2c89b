//! What the local fallback runs for each algorithm: the core's own algorithm, exactly, on
//! one instance's share of the limit.
//!
//! Every limiter whose state is small runs exactly as the server would (token bucket,
//! sliding window, fixed window, GCRA). A log's state grows with its limit (one entry per
//! admitted call), so a LOG runs exactly while its share is at most [`LOCAL_LOG_MAX`]
//! units (at most 1 KiB per key) and, above that, as a sliding window (two weighted
//! counters) of the same limit and window: an approximation that assumes the previous
//! window's calls were spread evenly.

use std::num::NonZeroU32;

use redis_rl_core::fixed_window::{self, FixedWindowParams, FixedWindowState};
use redis_rl_core::gcra::{self, GcraParams, GcraState};
use redis_rl_core::limits::MAX_DURATION_MS;
use redis_rl_core::sliding_log::{self, SlidingLogParams, SlidingLogState};
use redis_rl_core::sliding_window::{self, SlidingWindowParams, SlidingWindowState};
use redis_rl_core::token_bucket::{self, TokenBucketParams, TokenBucketState};
use redis_rl_core::{Decision, Micros, ParamError};

use crate::policy::Algorithm;

/// The largest share of a LOG limit the fallback keeps as an exact log (entries per key).
pub const LOCAL_LOG_MAX: u64 = 64;

/// A limiter's state in the local store.
#[derive(Clone, Debug)]
pub(super) enum LocalState {
    Bucket(TokenBucketState),
    Window(SlidingWindowState),
    Fixed(FixedWindowState),
    Gcra(GcraState),
    Log(SlidingLogState),
}

/// The core parameters of one instance's share of an algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LocalParams {
    Bucket(TokenBucketParams),
    Window(SlidingWindowParams),
    Fixed(FixedWindowParams),
    Gcra(GcraParams),
    Log(SlidingLogParams),
}

/// Runs the core algorithm of the matching variant; a state of another kind (left by a
/// policy change) counts as none.
macro_rules! dispatch {
    ($params:expr, $stored:expr, $now:expr, $cost:expr, $($variant:ident => $module:ident),+) => {
        match $params {
            $(LocalParams::$variant(p) => {
                let prev = match $stored {
                    Some(LocalState::$variant(s)) => Some(s.clone()),
                    _ => None,
                };
                let (d, s) = $module::check(prev, $now, p, $cost);
                (d, s.map(LocalState::$variant))
            })+
        }
    };
}

impl LocalParams {
    /// One instance's share of `algorithm`: rates divided exactly (the period multiplied
    /// by `instances`), counts divided and kept at least 1.
    pub(super) fn share(algorithm: &Algorithm, instances: NonZeroU32) -> Result<Self, ParamError> {
        let n = u64::from(instances.get());
        let count = |c: u64| (c / n).max(1);
        let period = |ms: u64| ms.saturating_mul(n).min(MAX_DURATION_MS);
        Ok(match *algorithm {
            Algorithm::TokenBucket {
                capacity,
                refill_tokens,
                refill_ms,
            } => LocalParams::Bucket(TokenBucketParams::new(
                count(capacity),
                refill_tokens,
                period(refill_ms),
            )?),
            Algorithm::Sliding { limit, window_ms } => {
                LocalParams::Window(SlidingWindowParams::new(count(limit), window_ms)?)
            }
            Algorithm::Fixed { limit, window_ms } => {
                LocalParams::Fixed(FixedWindowParams::new(count(limit), window_ms)?)
            }
            Algorithm::Gcra {
                limit,
                period_ms,
                burst,
            } => LocalParams::Gcra(GcraParams::new(
                limit,
                period(period_ms),
                Some(count(burst.unwrap_or(limit))),
            )?),
            Algorithm::Log { limit, window_ms } if count(limit) <= LOCAL_LOG_MAX => {
                LocalParams::Log(SlidingLogParams::new(count(limit), window_ms)?)
            }
            Algorithm::Log { limit, window_ms } => {
                LocalParams::Window(SlidingWindowParams::new(count(limit), window_ms)?)
            }
        })
    }

    /// The core decision at `now` on `stored`, and the state to store, if any.
    pub(super) fn check(
        &self,
        stored: Option<&LocalState>,
        now: Micros,
        cost: u64,
    ) -> (Decision, Option<LocalState>) {
        dispatch!(self, stored, now, cost,
            Bucket => token_bucket,
            Window => sliding_window,
            Fixed => fixed_window,
            Gcra => gcra,
            Log => sliding_log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: NonZeroU32 = NonZeroU32::MIN;

    fn all_algorithms() -> [Algorithm; 6] {
        [
            Algorithm::TokenBucket {
                capacity: 5,
                refill_tokens: 2,
                refill_ms: 700,
            },
            Algorithm::Sliding {
                limit: 5,
                window_ms: 1_000,
            },
            Algorithm::Fixed {
                limit: 5,
                window_ms: 1_000,
            },
            Algorithm::Gcra {
                limit: 5,
                period_ms: 1_000,
                burst: Some(3),
            },
            Algorithm::Log {
                limit: 5,
                window_ms: 1_000,
            },
            Algorithm::Gcra {
                limit: 7,
                period_ms: 300,
                burst: None,
            },
        ]
    }

    /// The server's decision for the same calls: the core algorithm named by the policy.
    fn server(algorithm: &Algorithm, calls: &[(u64, u64)]) -> Vec<redis_rl_core::Decision> {
        macro_rules! run {
            ($module:ident, $params:expr) => {{
                let p = $params.unwrap();
                let mut state = None;
                calls
                    .iter()
                    .map(|&(now, cost)| {
                        let (d, s) = $module::check(state.clone(), Micros(now), &p, cost);
                        if s.is_some() {
                            state = s;
                        }
                        d
                    })
                    .collect()
            }};
        }
        match *algorithm {
            Algorithm::TokenBucket {
                capacity,
                refill_tokens,
                refill_ms,
            } => run!(
                token_bucket,
                TokenBucketParams::new(capacity, refill_tokens, refill_ms)
            ),
            Algorithm::Sliding { limit, window_ms } => {
                run!(sliding_window, SlidingWindowParams::new(limit, window_ms))
            }
            Algorithm::Fixed { limit, window_ms } => {
                run!(fixed_window, FixedWindowParams::new(limit, window_ms))
            }
            Algorithm::Gcra {
                limit,
                period_ms,
                burst,
            } => run!(gcra, GcraParams::new(limit, period_ms, burst)),
            Algorithm::Log { limit, window_ms } => {
                run!(sliding_log, SlidingLogParams::new(limit, window_ms))
            }
        }
    }

    /// A bounded pseudo-random walk: instants moving forward by 0-400 ms, costs 0-3.
    fn calls(seed: u64) -> Vec<(u64, u64)> {
        let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let mut now = 0;
        (0..300)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                now += (x >> 33) % 400_000;
                (now, (x >> 20) % 4)
            })
            .collect()
    }

    #[test]
    fn one_instance_decides_exactly_as_the_core_algorithm() {
        for algorithm in all_algorithms() {
            let params = LocalParams::share(&algorithm, ONE).unwrap();
            for seed in 0..20 {
                let calls = calls(seed);
                let mut state: Option<LocalState> = None;
                let local: Vec<_> = calls
                    .iter()
                    .map(|&(now, cost)| {
                        let (d, s) = params.check(state.as_ref(), Micros(now), cost);
                        if s.is_some() {
                            state = s;
                        }
                        d
                    })
                    .collect();
                assert_eq!(
                    local,
                    server(&algorithm, &calls),
                    "{algorithm:?} seed {seed}"
                );
            }
        }
    }

    #[test]
    fn a_large_log_runs_as_a_sliding_window() {
        let small = Algorithm::Log {
            limit: LOCAL_LOG_MAX,
            window_ms: 1_000,
        };
        assert!(matches!(
            LocalParams::share(&small, ONE),
            Ok(LocalParams::Log(_))
        ));
        let large = Algorithm::Log {
            limit: LOCAL_LOG_MAX + 1,
            window_ms: 1_000,
        };
        assert_eq!(
            LocalParams::share(&large, ONE),
            Ok(LocalParams::Window(
                SlidingWindowParams::new(LOCAL_LOG_MAX + 1, 1_000).unwrap()
            ))
        );
        // Its share decides: 10000 over 200 instances is 50 entries, exact again.
        let shared = Algorithm::Log {
            limit: 10_000,
            window_ms: 1_000,
        };
        let two_hundred = NonZeroU32::new(200).unwrap();
        assert_eq!(
            LocalParams::share(&shared, two_hundred),
            Ok(LocalParams::Log(SlidingLogParams::new(50, 1_000).unwrap()))
        );
    }

    #[test]
    fn shares_divide_counts_and_rates() {
        let four = NonZeroU32::new(4).unwrap();
        let g = Algorithm::Gcra {
            limit: 10,
            period_ms: 1_000,
            burst: None,
        };
        assert_eq!(
            LocalParams::share(&g, four),
            Ok(LocalParams::Gcra(
                GcraParams::new(10, 4_000, Some(2)).unwrap()
            ))
        );
        let f = Algorithm::Fixed {
            limit: 3,
            window_ms: 1_000,
        };
        assert_eq!(
            LocalParams::share(&f, four),
            Ok(LocalParams::Fixed(
                FixedWindowParams::new(1, 1_000).unwrap()
            ))
        );
    }
}
