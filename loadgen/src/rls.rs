//! A load client of Envoy's rate limit service: `concurrency` callers, each sending
//! `ShouldRateLimit` back to back (one descriptor over `keys` values, as an edge proxy's
//! per-client limit) for `duration_ms` at most, over `connections` HTTP/2 connections.
//! Reports decisions per second and the latency percentiles.

use std::time::{Duration, Instant};

use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rl_gateway_proto::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::Channel;

/// `rl-loadgen rls` arguments.
#[derive(clap::Args)]
pub struct RlsArgs {
    /// The service's address (host:port).
    #[arg(long)]
    target: String,
    #[arg(long, default_value = "bench")]
    domain: String,
    /// The descriptor key; values are `v0` .. `v<keys-1>`.
    #[arg(long, default_value = "client")]
    key: String,
    #[arg(long, default_value_t = 1000)]
    keys: u32,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// HTTP/2 connections the callers share.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    #[arg(long, default_value_t = 5_000)]
    duration_ms: u64,
    /// Calls before measuring (connections warm, counters created).
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
}

/// Runs the load; the report as JSON.
pub async fn run(a: RlsArgs) -> Result<serde_json::Value, String> {
    let mut channels = Vec::new();
    for _ in 0..a.connections.max(1) {
        let ch = Channel::from_shared(format!("http://{}", a.target))
            .map_err(|e| e.to_string())?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| format!("{}: {e}", a.target))?;
        channels.push(ch);
    }
    let request = move |domain: &str, key: &str, n: u64, keys: u32| RateLimitRequest {
        domain: domain.to_string(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.to_string(),
                value: format!("v{}", n % u64::from(keys.max(1))),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    // Warm-up, one caller.
    let mut warm = RateLimitServiceClient::new(channels[0].clone());
    for n in 0..a.warmup {
        warm.should_rate_limit(request(&a.domain, &a.key, n, a.keys))
            .await
            .map_err(|e| format!("warm-up call: {e}"))?;
    }
    let started = Instant::now();
    let deadline = started + Duration::from_millis(a.duration_ms);
    let mut tasks = Vec::new();
    for c in 0..a.concurrency.max(1) {
        let mut client = RateLimitServiceClient::new(channels[c % channels.len()].clone());
        let (domain, key, keys) = (a.domain.clone(), a.key.clone(), a.keys);
        tasks.push(tokio::spawn(async move {
            let mut latencies_us: Vec<u32> = Vec::new();
            let (mut over, mut errors) = (0u64, 0u64);
            let mut n = c as u64 * 7919;
            while Instant::now() < deadline {
                let t = Instant::now();
                match client
                    .should_rate_limit(request(&domain, &key, n, keys))
                    .await
                {
                    Ok(r) if r.get_ref().overall_code == 2 => over += 1,
                    Ok(_) => {}
                    Err(_) => errors += 1,
                }
                latencies_us.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                n += 1;
            }
            (latencies_us, over, errors)
        }));
    }
    let mut all = Vec::new();
    let (mut over, mut errors) = (0, 0);
    for t in tasks {
        let (l, o, e) = t.await.map_err(|e| e.to_string())?;
        all.extend(l);
        over += o;
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: usize| {
        all.get((all.len() * p / 100).min(all.len().saturating_sub(1)))
            .copied()
    };
    Ok(serde_json::json!({
        "calls": all.len(),
        "decisions_per_s": all.len() as f64 / elapsed,
        "p50_us": pct(50),
        "p99_us": pct(99),
        "over_limit": over,
        "errors": errors,
    }))
}
