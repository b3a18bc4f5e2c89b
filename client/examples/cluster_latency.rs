//! How long a multi-slot request takes on a 3-master Redis Cluster on loopback: the design's
//! 4 dimensions (API key and endpoint under one hash tag, client IP, global), whose keys live
//! on 3 different masters, so one request needs one `RL.ALL` per master.
//!
//! - `concurrent`: `Limiter::check_all` (the client sends the 3 calls at once);
//! - `sequential`: the same 3 `RL.ALL` calls through the same limiter, each awaited before
//!   the next (what the client did before: one round trip per slot);
//! - `one slot`: a single `RL.ALL` of the 2 keys on one master (one round trip).
//!
//! Loopback has almost no network latency, so the run is repeated with every call delayed
//! by a simulated 1 ms round trip (a `Backend` wrapper that sleeps before each call: the
//! latency between a gateway and Redis in another zone), where one round trip per slot
//! shows plainly.
//!
//! Not a test (no timing assertions on a shared machine): run it by hand after
//! `cargo build --release` (the cluster loads the module from target/release):
//!
//! ```text
//! cargo run --release -p redis-rl-client --example cluster_latency [requests]
//! ```
//!
//! The three modes run in interleaved blocks, so a noisy neighbour slows them alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, RedisResult, Value};
use redis_rl_client::backend::{Backend, BoxFuture};
use redis_rl_client::{Limiter, Policy};
use redis_rl_testkit::{Cluster, Server};

/// A backend whose every call first waits `rtt` (a network round trip).
struct Delayed {
    inner: redis_rl_client::Cluster,
    rtt: Duration,
}

impl Backend for Delayed {
    fn query<'a>(&'a self, cmd: &'a Cmd, slot: Option<u16>) -> BoxFuture<'a, RedisResult<Value>> {
        Box::pin(async move {
            if !self.rtt.is_zero() {
                tokio::time::sleep(self.rtt).await;
            }
            self.inner.query(cmd, slot).await
        })
    }

    fn is_cluster(&self) -> bool {
        true
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let mean = samples.iter().sum::<Duration>().as_secs_f64() * 1e6 / samples.len() as f64;
    println!(
        "{name:<12} n={:<6} mean {mean:>7.1} us  p50 {:>7.1} us  p99 {:>7.1} us",
        samples.len(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.99)
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let requests: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_000);
    let cluster = Cluster::start();
    let urls: Vec<String> = cluster.nodes.iter().map(Server::url).collect();
    for (rtt, requests) in [
        (Duration::ZERO, requests),
        (Duration::from_millis(1), requests / 10),
    ] {
        let backend = Delayed {
            inner: redis_rl_client::Cluster::new(&urls, Duration::from_secs(1)).unwrap(),
            rtt,
        };
        let limiter = Limiter::builder()
            .timeout(Duration::from_secs(1))
            .deny_cache(0)
            .backend(Arc::new(backend));
        measure(&cluster, &limiter, requests, rtt).await;
    }
}

async fn measure(cluster: &Cluster, limiter: &Limiter, requests: usize, rtt: Duration) {
    // One hash tag per master.
    let tags: Vec<String> = cluster
        .nodes
        .iter()
        .map(|node| {
            (0..1_000)
                .map(|i| format!("t{i}"))
                .find(|t| cluster.owner(&format!("{{{t}}}")).port == node.port)
                .unwrap()
        })
        .collect();
    let keys = [
        format!("rl:{{{}}}:key", tags[0]),
        format!("rl:{{{}}}:ep:/search", tags[0]),
        format!("rl:{{{}}}:ip", tags[1]),
        format!("rl:{{{}}}:global", tags[2]),
    ];
    // Limits nobody reaches: every request is allowed, nothing is refunded.
    let p = Policy::sliding(1_000_000_000_000_000, 60_000).unwrap();
    let request: Vec<(&str, Policy)> = keys.iter().map(|k| (k.as_str(), p)).collect();
    let rl_all = |keys: &[&String]| {
        let mut cmd = redis::cmd("RL.ALL");
        cmd.arg(keys.len()).arg(keys);
        for _ in keys {
            cmd.arg(p.kind().spec_name()).arg(p.args());
        }
        cmd
    };
    let slot = |key: &str| Some(redis::cluster_routing::get_slot(key.as_bytes()));
    let groups = [
        (rl_all(&[&keys[0], &keys[1]]), slot(&keys[0])),
        (rl_all(&[&keys[2]]), slot(&keys[2])),
        (rl_all(&[&keys[3]]), slot(&keys[3])),
    ];

    let (mut concurrent, mut sequential, mut single) = (Vec::new(), Vec::new(), Vec::new());
    let block = 50;
    for round in 0..(requests / block + 1) {
        for _ in 0..block {
            let t = Instant::now();
            assert!(limiter.check_all(&request).await.allows());
            concurrent.push(t.elapsed());

            let t = Instant::now();
            for (cmd, slot) in &groups {
                limiter.query(cmd, *slot).await.unwrap();
            }
            sequential.push(t.elapsed());

            let t = Instant::now();
            limiter.query(&groups[0].0, groups[0].1).await.unwrap();
            single.push(t.elapsed());
        }
        if round == 0 {
            // The first block warms up connections and caches.
            concurrent.clear();
            sequential.clear();
            single.clear();
        }
    }
    println!(
        "4 dimensions over 3 masters, {} requests per mode, simulated round trip {rtt:?}:",
        concurrent.len()
    );
    report("concurrent", concurrent);
    report("sequential", sequential);
    report("one slot", single);
}
