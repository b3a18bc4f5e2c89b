//! What the flow costs per request, in time and heap allocations: an HTTP request started,
//! planned, booked (answered allowed, as the host's limiter would) and forwarded with its
//! headers, the path every front end takes for an allowed request. Two configurations: one
//! sliding limit keyed on `ip`, and four (a second, a minute, an hour, a day).
//!
//! `cargo bench -p redis-rl-flow --bench per_request` (not part of `make test`): prints
//! ns/request (best of a few rounds: the machine is shared) and allocations/request (exact).
//! `-- --show` prints the takes and the forward headers of one request first, to compare
//! two builds' output byte for byte.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use redis_rl_flow::{Decided, Flow, HttpRequest, Source, Step, Verdict};
use redis_rl_policy::{Config, Engine};

/// The system allocator, counting every allocation (a `realloc` counts as one: it may move).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const COMMON: &str = r#"
key_prefix = "rl"
dimensions = []
hot = []
[fleet]
membership = false
[[rules]]
name = "bench"
key = ["ip"]
algorithm = "sliding"
"#;

/// The request a front end hands over: `GET /`, three headers, peer 127.0.0.1, no API key.
fn request(n: u64) -> HttpRequest {
    HttpRequest {
        method: "GET".into(),
        path: "/".into(),
        headers: vec![
            ("host".into(), b"127.0.0.1:8080".to_vec()),
            ("user-agent".into(), b"wrk".to_vec()),
            ("accept".into(), b"*/*".to_vec()),
        ],
        peer: Some(std::net::IpAddr::from([127, 0, 0, 1])),
        request_id: format!("req-{n}"),
        trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
        ..HttpRequest::default()
    }
}

fn allowed(remaining: u64) -> Decided {
    Decided {
        verdict: Verdict::Allowed,
        remaining,
        reset_after_ms: 60_000,
        shadow: false,
        source: Source::Redis,
    }
}

/// One request from start to its forward step; the forward's headers are returned so the
/// work is not optimised away.
fn one(flow: &Flow, req: HttpRequest, n: u64, show: bool) -> usize {
    let (mut request, step) = flow.start(req, n);
    let Step::Book(book) = step else {
        panic!("expected a book step, got {step:?}");
    };
    if show {
        for t in &book.takes {
            println!("  take {} {} {}", t.item, t.key, t.units);
        }
        println!("  ban reads {:?}", book.ban_reads);
    }
    let decided = book
        .takes
        .iter()
        .map(|_| allowed(999_999_999 - n % 1_000))
        .collect();
    match request.booked(decided, None, vec![None; book.ban_reads.len()], n) {
        Step::Forward(forward) => {
            if show {
                for (name, value) in &forward.headers {
                    println!("  header {name}: {value}");
                }
                println!("  path {} record {:?}", forward.path, forward.record);
            }
            black_box(&forward);
            forward.headers.len()
        }
        other => panic!("expected a forward step, got {other:?}"),
    }
}

fn measure(name: &str, limits: &str, show: bool) {
    let toml = format!("{COMMON}{limits}\n");
    let engine = Engine::new(Config::from_toml(&toml).expect("config"), &[]).expect("engine");
    let flow = Flow::new(engine);
    if show {
        println!("{name}:");
        one(&flow, request(0), 0, true);
    }
    // The request's own input (strings and header vectors a front end builds) is counted
    // apart, so the figure below is the flow's alone.
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    drop(black_box(request(1)));
    let input = ALLOCATIONS.load(Ordering::Relaxed) - before;

    // Requests are built in small batches outside the timed part: a front end's
    // allocator sees one request at a time, not a heap of a hundred thousand.
    const BATCH: u64 = 64;
    const BATCHES: u64 = 1_000;
    const N: u64 = BATCH * BATCHES;
    let mut best = f64::MAX;
    let mut allocations = 0;
    for _round in 0..7 {
        let mut elapsed = std::time::Duration::ZERO;
        let mut counted = 0;
        let mut headers = 0;
        for batch in 0..BATCHES {
            let first = batch * BATCH;
            let requests: Vec<HttpRequest> = (first..first + BATCH).map(request).collect();
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            let start = Instant::now();
            for (n, req) in (first..).zip(requests) {
                headers += one(&flow, req, n, false);
            }
            elapsed += start.elapsed();
            counted += ALLOCATIONS.load(Ordering::Relaxed) - before;
        }
        black_box(headers);
        allocations = counted / N;
        best = best.min(elapsed.as_nanos() as f64 / N as f64);
    }
    println!(
        "{name}: {best:.0} ns/request, {allocations} allocations/request \
         (the request's input: {input} more, built before)"
    );
}

fn main() {
    let show = std::env::args().any(|a| a == "--show");
    measure("one limit", "limit = 1000000000\nwindow_ms = 60000", show);
    measure(
        "four limits",
        r#"limits = ["1000000000/second", "1000000000/minute", "1000000000/hour", "1000000000/day"]"#,
        show,
    );
}
