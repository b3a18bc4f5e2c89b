//! Cost of one local fallback decision (shard lock, map lookup, core algorithm, store).
//! Target: under 200 ns.

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use redis_rl_client::{LocalLimiter, Policy};
use redis_rl_core::Micros;

fn bench(c: &mut Criterion) {
    let one = NonZeroU32::MIN;
    let algorithms = [
        (
            Policy::token_bucket(1_000_000_000, 1_000_000_000, 1_000),
            Policy::token_bucket(1, 1, 3_600_000),
        ),
        (
            Policy::sliding(1_000_000_000, 60_000),
            Policy::sliding(1, 3_600_000),
        ),
    ];
    for (open, tight) in algorithms {
        let (algorithm, tight) = (*open.unwrap().params(), *tight.unwrap().params());
        let name = algorithm.kind().config_name();
        let mut group = c.benchmark_group(format!("local_fallback/{name}"));
        group.throughput(Throughput::Elements(1));
        let local = LocalLimiter::new(100_000);
        let keys: Vec<String> = (0..1_000)
            .map(|i| format!("rl:{{k:{i:016x}}}:key"))
            .collect();
        let mut i = 0usize;
        group.bench_function("hot_key_allowed", |b| {
            b.iter(|| {
                black_box(local.check(
                    black_box("rl:{k:0123456789abcdef}:key"),
                    &algorithm,
                    one,
                    1,
                    false,
                ))
            })
        });
        // The decision alone, with the instant given (check_all reads the clock once per
        // request for all its dimensions).
        let now = Micros(1_000_000);
        group.bench_function("hot_key_allowed_given_now", |b| {
            b.iter(|| {
                black_box(local.check_at(
                    black_box("rl:{k:0123456789abcdef}:key"),
                    &algorithm,
                    one,
                    1,
                    false,
                    now,
                ))
            })
        });
        group.bench_function("1000_keys_allowed", |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(local.check(black_box(&keys[i]), &algorithm, one, 1, false))
            })
        });
        local.check_at("denied", &tight, one, 1, false, Micros(0));
        group.bench_function("denied", |b| {
            b.iter(|| black_box(local.check(black_box("denied"), &tight, one, 1, false)))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
