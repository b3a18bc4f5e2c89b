//! The client's own CPU time per decision: `tasks` concurrent tasks on one current-thread
//! runtime (the gateway's `--workers 1`) each deciding one key after another with
//! `Limiter::check_all` (one `RL.ALL` per request, as the gateway sends), against a Redis
//! server with the module. Prints decisions/s and this process's CPU time (its thread's run
//! time from /proc/thread-self/schedstat, so Redis's share is not counted) per decision.
//!
//! Not a test (no timing assertions on a shared machine): a measuring aid to compare two
//! builds of the client, run in turn against the same server:
//!
//! ```text
//! cargo run --release -p redis-rl-client --example decision_cpu -- \
//!     redis://127.0.0.1:6379/ [tasks=32] [decisions=200000] [max-seconds=30]
//! ```
//!
//! Bounded in count and time: it stops after `decisions` or `max-seconds`, whichever first.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use redis_rl_client::{Limiter, Policy};

/// This thread's time on a CPU so far (ns), from the scheduler's own accounting.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let mut num = |default: u64| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    let tasks = num(32);
    let decisions = num(200_000);
    let max_seconds = num(30);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let limiter = Rc::new(
            Limiter::builder()
                // A shared machine stalls now and then: a stall must not become a timeout
                // (the breaker would then decide locally, and the figure be another one).
                .timeout(Duration::from_secs(2))
                .deny_cache(0)
                .standalone(&url)
                .expect("a valid redis URL"),
        );
        // Limits nobody reaches: every decision is allowed and written.
        let policy = Policy::sliding(1_000_000_000_000, 60_000).expect("a valid policy");
        // Warm up: the connection, the server's capabilities.
        assert!(limiter
            .check_all(&[("rl:{bench}:warm", policy)])
            .await
            .allows());
        let deadline = Instant::now() + Duration::from_secs(max_seconds);
        let per_task = decisions / tasks.max(1);
        let cpu = thread_cpu_ns();
        let started = Instant::now();
        let decided = Rc::new(Cell::new(0u64));
        let local = tokio::task::LocalSet::new();
        for t in 0..tasks {
            let limiter = Rc::clone(&limiter);
            let decided = Rc::clone(&decided);
            local.spawn_local(async move {
                let keys: Vec<String> = (0..16).map(|i| format!("rl:{{ip{t}.{i}}}:ip")).collect();
                let mut done = 0;
                while done < per_task && Instant::now() < deadline {
                    let key = &keys[(done % 16) as usize];
                    let d = limiter.check_all(&[(key.as_str(), policy)]).await;
                    assert!(d.allows(), "{d:?}");
                    done += 1;
                    decided.set(decided.get() + 1);
                }
            });
        }
        local.await;
        let elapsed = started.elapsed().as_secs_f64();
        let cpu_us = (thread_cpu_ns() - cpu) as f64 / 1e3;
        let errors = limiter.stats().errors;
        if errors > 0 {
            println!("{errors} calls failed: not every decision came from Redis, discard this run");
        }
        let n = decided.get().max(1) as f64;
        println!(
            "{n:.0} decisions in {elapsed:.2} s: {:.0}/s, client CPU {:.2} us per decision",
            n / elapsed,
            cpu_us / n
        );
    });
}
