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

use redis_rl_core::limits::MAX_DURATION_MS;
use redis_rl_core::{AnyParams, ParamError};

use crate::policy::Algorithm;

/// The largest share of a LOG limit the fallback keeps as an exact log (entries per key).
pub const LOCAL_LOG_MAX: u64 = 64;

/// The core parameters of one instance's share of `algorithm` (validated by the core, like
/// every policy), for [`AnyParams::check`] on the stored [`AnyState`](redis_rl_core::AnyState).
pub(super) fn local_params(
    algorithm: &Algorithm,
    instances: NonZeroU32,
) -> Result<AnyParams, ParamError> {
    share(algorithm, instances).core_params()
}

/// One instance's share: rates divided exactly (the period multiplied by `instances`),
/// counts divided and kept at least 1; a LOG share over [`LOCAL_LOG_MAX`] runs as a
/// sliding window of the same limit and window.
fn share(algorithm: &Algorithm, instances: NonZeroU32) -> Algorithm {
    let n = u64::from(instances.get());
    let count = |c: u64| (c / n).max(1);
    let period = |ms: u64| ms.saturating_mul(n).min(MAX_DURATION_MS);
    match *algorithm {
        Algorithm::TokenBucket {
            capacity,
            refill_tokens,
            refill_ms,
        } => Algorithm::TokenBucket {
            capacity: count(capacity),
            refill_tokens,
            refill_ms: period(refill_ms),
        },
        Algorithm::Sliding { limit, window_ms } => Algorithm::Sliding {
            limit: count(limit),
            window_ms,
        },
        Algorithm::Fixed { limit, window_ms } => Algorithm::Fixed {
            limit: count(limit),
            window_ms,
        },
        Algorithm::Gcra {
            limit,
            period_ms,
            burst,
        } => Algorithm::Gcra {
            limit,
            period_ms: period(period_ms),
            burst: Some(count(burst.unwrap_or(limit))),
        },
        Algorithm::Log { limit, window_ms } if count(limit) <= LOCAL_LOG_MAX => Algorithm::Log {
            limit: count(limit),
            window_ms,
        },
        Algorithm::Log { limit, window_ms } => Algorithm::Sliding {
            limit: count(limit),
            window_ms,
        },
        // A calendar keeps its periods: each instance its part of the limit.
        Algorithm::Quota {
            limit,
            period,
            tz_minutes,
            anchor,
        } => Algorithm::Quota {
            limit: count(limit),
            period,
            tz_minutes,
            anchor,
        },
    }
}

#[cfg(test)]
mod tests {
    use redis_rl_core::fixed_window::{self, FixedWindowParams};
    use redis_rl_core::gcra::{self, GcraParams};
    use redis_rl_core::quota::{self, QuotaParams};
    use redis_rl_core::sliding_log::{self, SlidingLogParams};
    use redis_rl_core::sliding_window::{self, SlidingWindowParams};
    use redis_rl_core::token_bucket::{self, TokenBucketParams};
    use redis_rl_core::{AnyState, Micros};

    use super::*;
    use crate::policy::Period;

    const ONE: NonZeroU32 = NonZeroU32::MIN;

    fn all_algorithms() -> [Algorithm; 7] {
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
            Algorithm::Quota {
                limit: 5,
                period: Period::Day,
                tz_minutes: -300,
                anchor: 1,
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
            Algorithm::Quota {
                limit,
                period,
                tz_minutes,
                anchor,
            } => run!(
                quota,
                redis_rl_core::calendar::Calendar::new(period, tz_minutes, anchor)
                    .and_then(|cal| QuotaParams::new(limit, cal))
            ),
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
            let params = local_params(&algorithm, ONE).unwrap();
            for seed in 0..20 {
                let calls = calls(seed);
                let mut state: Option<AnyState> = None;
                let local: Vec<_> = calls
                    .iter()
                    .map(|&(now, cost)| {
                        let (d, s) = params.check(state.clone(), Micros(now), cost);
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
            local_params(&small, ONE),
            Ok(AnyParams::SlidingLog(_))
        ));
        let large = Algorithm::Log {
            limit: LOCAL_LOG_MAX + 1,
            window_ms: 1_000,
        };
        assert_eq!(
            local_params(&large, ONE),
            Ok(AnyParams::SlidingWindow(
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
            local_params(&shared, two_hundred),
            Ok(AnyParams::SlidingLog(
                SlidingLogParams::new(50, 1_000).unwrap()
            ))
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
            local_params(&g, four),
            Ok(AnyParams::Gcra(
                GcraParams::new(10, 4_000, Some(2)).unwrap()
            ))
        );
        let f = Algorithm::Fixed {
            limit: 3,
            window_ms: 1_000,
        };
        assert_eq!(
            local_params(&f, four),
            Ok(AnyParams::FixedWindow(
                FixedWindowParams::new(1, 1_000).unwrap()
            ))
        );
    }
}
