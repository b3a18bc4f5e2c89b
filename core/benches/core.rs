//! Criterion benches of the pure core: nanoseconds per decision, one group per algorithm.
//!
//! Each group times the same three situations, built by the algorithm itself:
//! - `new_key`: no stored state (a first call, or an expired key), allowed;
//! - `allowed`: a state left by earlier calls, and the call is allowed (the write path);
//! - `denied`: a state at its limit, and the call is denied (nothing to write).
//!
//! Run with `cargo bench -p redis-rl-core` (or `make bench`, which also runs the server
//! benchmarks). Adding an algorithm is one call in `benches()`: give its `check` as a closure
//! `(state, now, cost) -> (Decision, Option<State>)` and its limit.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use redis_rl_core::concurrency::{self, ConcurrencyParams};
use redis_rl_core::fixed_window::{self, FixedWindowParams};
use redis_rl_core::gcra::{self, GcraParams};
use redis_rl_core::sliding_log::{self, SlidingLogParams};
use redis_rl_core::sliding_window::{self, SlidingWindowParams};
use redis_rl_core::token_bucket::{self, TokenBucketParams};
use redis_rl_core::{Decision, Micros};

/// Any instant well past the epoch, so windows and refills are not at their edge cases.
const T0: Micros = Micros(1_700_000_000_000_000);

/// The three situations of one algorithm: `(name, state, now)`, each called with cost 1.
fn situations<S: Clone>(
    check: &impl Fn(Option<S>, Micros, u64) -> (Decision, Option<S>),
    limit: u64,
) -> Vec<(&'static str, Option<S>, Micros)> {
    // Calls of cost 1, 1 µs apart (so refills add less than a unit), keeping the latest
    // state; `n` calls from `None`.
    let run = |n: u64| {
        let mut state = None;
        let mut now = T0;
        for _ in 0..n {
            let (_, next) = check(state.clone(), now, 1);
            state = next.or(state);
            now = Micros(now.0 + 1);
        }
        (state, now)
    };
    let (half, after_half) = run((limit / 2).max(1));
    let (full, after_full) = run(limit);
    assert!(check(half.clone(), after_half, 1).0.is_allowed());
    assert!(!check(full.clone(), after_full, 1).0.is_allowed());
    vec![
        ("new_key", None, T0),
        ("allowed", half, after_half),
        ("denied", full, after_full),
    ]
}

/// One group: ns per decision (one element = one decision) for each situation.
///
/// The state is cloned outside the timed part (`iter_batched`), so an algorithm whose state
/// owns a `Vec` is timed for the decision only, like a `Copy` state.
fn group<S: Clone>(
    c: &mut Criterion,
    name: &str,
    limit: u64,
    check: impl Fn(Option<S>, Micros, u64) -> (Decision, Option<S>),
) {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    for (situation, state, now) in situations(&check, limit) {
        g.bench_function(situation, |b| {
            b.iter_batched(
                || state.clone(),
                |s| check(black_box(s), black_box(now), black_box(1)),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    // The design's pro tier (1000 per minute) wherever the algorithm has a rate.
    let p = TokenBucketParams::new(1_000, 1_000, 60_000).expect("valid");
    group(c, "token_bucket", 1_000, |s, now, cost| {
        token_bucket::check(s, now, black_box(&p), cost)
    });

    let p = SlidingWindowParams::new(1_000, 60_000).expect("valid");
    group(c, "sliding_window", 1_000, |s, now, cost| {
        sliding_window::check(s, now, black_box(&p), cost)
    });

    let p = FixedWindowParams::new(1_000, 60_000).expect("valid");
    group(c, "fixed_window", 1_000, |s, now, cost| {
        fixed_window::check(s, now, black_box(&p), cost)
    });

    // A log holds one entry per admitted instant: 100 per minute keeps 50 to 100 entries.
    let p = SlidingLogParams::new(100, 60_000).expect("valid");
    group(c, "sliding_log", 100, |s, now, cost| {
        sliding_log::check(s, now, black_box(&p), cost)
    });

    // Leases need distinct ids to fill: the id is the instant, so every call is a new holder.
    let p = ConcurrencyParams::new(100, 60_000).expect("valid");
    group(c, "concurrency", 100, |s, now, _cost| {
        concurrency::acquire(s, now, black_box(&p), &now.0.to_le_bytes())
    });

    // GCRA (also RL.THROTTLE, which is GCRA with redis-cell's arguments).
    let p = GcraParams::new(1_000, 60_000, None).expect("valid");
    group(c, "gcra", 1_000, |s, now, cost| {
        gcra::check(s, now, black_box(&p), cost)
    });
}

fn config() -> Criterion {
    // Short by default so `make bench` stays within its budget; criterion's command-line
    // flags (`--measurement-time`, `--warm-up-time`) still override these.
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(50)
}

criterion_group! {
    name = core;
    config = config();
    targets = benches
}
criterion_main!(core);
