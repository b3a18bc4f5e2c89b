//! The load: paced (open-loop) HTTP requests spread over the targets like a load balancer
//! would, each with an API key, a client IP (`X-Forwarded-For`) and an endpoint drawn from
//! the traffic model; every answer recorded.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Semaphore;

use crate::record::{Dim, Rec, NO_KEY, STATUS_ERROR, STATUS_NOT_SENT};
use crate::traffic::{self, Discrete, Rng, ROUTES};

/// What to send.
#[derive(Clone, Debug, clap::Args)]
pub struct LoadArgs {
    /// A target `host:port` (repeat for a fleet; requests are spread uniformly at random).
    #[arg(long = "target", required = true)]
    pub targets: Vec<String>,
    /// Requests per second offered (paced, whatever the answers).
    #[arg(long, default_value_t = 400.0)]
    pub rate: f64,
    /// How long to send, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub duration_ms: u64,
    /// API keys (ranks 0..keys, Zipf).
    #[arg(long, default_value_t = 300)]
    pub keys: u32,
    /// Zipf exponent of the API keys.
    #[arg(long, default_value_t = 1.0)]
    pub zipf_keys: f64,
    /// Client IPs (ranks 0..ips, Zipf), sent as X-Forwarded-For.
    #[arg(long, default_value_t = 2_000)]
    pub ips: u32,
    /// Zipf exponent of the client IPs.
    #[arg(long, default_value_t = 0.8)]
    pub zipf_ips: f64,
    /// A key (rank) sending `--burst-x` times its share of `--rate`.
    #[arg(long)]
    pub burst_key: Option<u32>,
    /// The burst key's multiplier.
    #[arg(long, default_value_t = 10.0)]
    pub burst_x: f64,
    /// Send no API key (straight to an upstream: no limits involved).
    #[arg(long)]
    pub no_key: bool,
    /// Requests waiting for an answer at most; a request due beyond it is recorded as not
    /// sent (status 1) rather than queued, so the offered rate stays what it says.
    #[arg(long, default_value_t = 256)]
    pub max_inflight: usize,
    /// Timeout of one request, in milliseconds (status 0 when it expires).
    #[arg(long, default_value_t = 2_000)]
    pub timeout_ms: u64,
    /// Seed of the traffic (the same seed sends the same keys, IPs and endpoints).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Append one line per request to this file (see record.rs).
    #[arg(long)]
    pub out: PathBuf,
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

struct Ctx {
    client: HttpClient,
    targets: Vec<String>,
    timeout: Duration,
    inflight: Arc<Semaphore>,
    records: Mutex<Vec<Rec>>,
    no_key: bool,
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Sends the load and writes the records; returns (sent, not sent, errors).
pub async fn run(args: LoadArgs) -> Result<(usize, usize, usize), String> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(args.max_inflight)
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector);
    let ctx = Arc::new(Ctx {
        client,
        targets: args.targets.clone(),
        timeout: Duration::from_millis(args.timeout_ms),
        inflight: Arc::new(Semaphore::new(args.max_inflight.max(1))),
        records: Mutex::new(Vec::new()),
        no_key: args.no_key,
    });
    let keys = Discrete::zipf(args.keys, args.zipf_keys);
    let ips = Discrete::zipf(args.ips, args.zipf_ips);
    let routes = Discrete::weights(ROUTES.iter().map(|r| f64::from(r.1)));
    let duration = Duration::from_millis(args.duration_ms);
    let start = Instant::now();

    let mut pacers = vec![tokio::spawn(pace(
        ctx.clone(),
        args.rate,
        duration,
        start,
        Rng::new(args.seed),
        move |rng: &mut Rng| keys.sample(rng),
        ips,
        routes,
    ))];
    if let Some(k) = args.burst_key {
        let p = Discrete::zipf(args.keys, args.zipf_keys).p(k);
        let extra = (args.burst_x - 1.0).max(0.0) * args.rate * p;
        pacers.push(tokio::spawn(pace(
            ctx.clone(),
            extra,
            duration,
            start,
            Rng::new(args.seed ^ 0xB0B5),
            move |_: &mut Rng| k,
            Discrete::zipf(args.ips, args.zipf_ips),
            Discrete::weights(ROUTES.iter().map(|r| f64::from(r.1))),
        )));
    }
    for p in pacers {
        p.await.map_err(|e| e.to_string())?;
    }
    // Every request in flight ends by its timeout: wait for all of them, bounded.
    let all = u32::try_from(args.max_inflight.max(1)).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(
        ctx.timeout + Duration::from_secs(1),
        ctx.inflight.acquire_many(all),
    )
    .await;

    let mut records = std::mem::take(&mut *ctx.records.lock().unwrap_or_else(|e| e.into_inner()));
    records.sort_by_key(|r| r.t_us);
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.out)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", args.out.display()))?;
    let not_sent = records
        .iter()
        .filter(|r| r.status == STATUS_NOT_SENT)
        .count();
    let errors = records.iter().filter(|r| r.status == STATUS_ERROR).count();
    Ok((records.len() - not_sent, not_sent, errors))
}

/// Sends `rate` requests per second for `duration` from `start`, evenly spaced (a late
/// timer sends what is due at once, it does not skip).
#[allow(clippy::too_many_arguments)]
async fn pace(
    ctx: Arc<Ctx>,
    rate: f64,
    duration: Duration,
    start: Instant,
    mut rng: Rng,
    key: impl Fn(&mut Rng) -> u32,
    ips: Discrete,
    routes: Discrete,
) {
    if rate <= 0.0 {
        return;
    }
    let total = (rate * duration.as_secs_f64()).floor() as u64;
    let n_targets = u32::try_from(ctx.targets.len()).unwrap_or(1);
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        // A bound in time as well as in count: never run past the duration by much.
        if start.elapsed() > duration + Duration::from_secs(1) {
            break;
        }
        let k = key(&mut rng);
        let ip = ips.sample(&mut rng);
        let route = routes.sample(&mut rng);
        let gw = rng.below(u64::from(n_targets));
        let n = u32::try_from(rng.below(1000)).unwrap_or(0);
        let rec = Rec {
            t_us: unix_us(),
            lat_us: 0,
            gw: u16::try_from(gw).unwrap_or(0),
            key: if ctx.no_key { NO_KEY } else { k },
            ip,
            route: u8::try_from(route).unwrap_or(0),
            status: STATUS_NOT_SENT,
            dim: Dim::None,
        };
        let Ok(permit) = ctx.inflight.clone().try_acquire_owned() else {
            ctx.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(rec);
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let rec = send(&ctx, rec, n).await;
            ctx.records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(rec);
            drop(permit);
        });
    }
}

async fn send(ctx: &Ctx, mut rec: Rec, n: u32) -> Rec {
    let target = ctx
        .targets
        .get(rec.gw as usize)
        .map_or("127.0.0.1:1", String::as_str);
    let path = ROUTES.get(rec.route as usize).map_or("/", |r| r.2);
    let mut req = Request::get(format!("http://{target}{path}{n}"))
        .header("x-forwarded-for", traffic::ip(rec.ip));
    if rec.key != NO_KEY {
        req = req.header("x-api-key", traffic::api_key(rec.key));
    }
    let Ok(req) = req.body(Empty::<Bytes>::new()) else {
        rec.status = STATUS_ERROR;
        return rec;
    };
    let t0 = Instant::now();
    let answer = tokio::time::timeout(ctx.timeout, async {
        let resp = ctx.client.request(req).await.ok()?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.ok()?.to_bytes();
        Some((status, body))
    })
    .await;
    rec.lat_us = u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX);
    match answer {
        Ok(Some((status, body))) => {
            rec.status = status;
            if !(200..300).contains(&status) {
                rec.dim = Dim::from_body(&body);
            }
        }
        _ => rec.status = STATUS_ERROR,
    }
    rec
}
