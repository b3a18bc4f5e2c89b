//! Limiters under `maxmemory`, for each kind of eviction policy.
//!
//! - `noeviction`: every RL.* call that may write is refused with the server's own OOM error
//!   (the commands are flagged `deny-oom`), PEEK included; RL.STATE (read-only) and RL.RESET
//!   (which only frees memory) still work.
//! - `allkeys-lru`: limiter keys are evicted like any other key, and an evicted limiter
//!   restarts idle (a full bucket): the calls it admits again are over-admission, measured here.
//! - `volatile-lru` / `volatile-ttl`: every limiter key has a TTL, so limiter keys are the
//!   eviction candidates; next to data without a TTL they are the only ones, and
//!   `volatile-ttl` takes them before cache data with longer TTLs.

use redis_rl_testkit::ops::*;
use redis_rl_testkit::*;

/// Exhausted token buckets per test.
const LIMITERS: usize = 2_000;
/// Their capacity: an evicted one admits this many calls again.
const CAPACITY: u64 = 5;
/// A refill so slow that no token comes back during a test.
const SLOW_MS: &str = "1000000000";
/// Bytes of each filler value.
const FILLER: usize = 4_096;

fn limiter_key(i: usize) -> String {
    format!("lim:{i}")
}

/// Creates [`LIMITERS`] token buckets of [`CAPACITY`] and takes every token.
fn exhausted_limiters(c: &mut redis::Connection, refill_ms: &str) {
    let calls: Vec<Vec<String>> = (0..LIMITERS)
        .map(|i| {
            let cap = CAPACITY.to_string();
            command_words(&[
                "RL.TOKENBUCKET",
                &limiter_key(i),
                &cap,
                &cap,
                refill_ms,
                "COST",
                &cap,
            ])
        })
        .collect();
    for chunk in calls.chunks(500) {
        for reply in send(c, chunk) {
            let reply: Vec<i64> = redis::from_redis_value(&reply).expect("a limiter reply");
            assert_eq!(reply[..3], [1, CAPACITY as i64, 0]);
        }
    }
}

fn command_words(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// How many of the limiter keys are still there.
fn limiters_left(c: &mut redis::Connection) -> usize {
    let mut cmd = redis::cmd("EXISTS");
    for i in 0..LIMITERS {
        cmd.arg(limiter_key(i));
    }
    cmd.query::<usize>(c).expect("EXISTS")
}

/// Lets the server use only `headroom` bytes more than it uses now.
fn limit_memory(c: &mut redis::Connection, headroom: i64) {
    let used = info_int(c, "memory", "used_memory");
    query::<()>(
        c,
        &["CONFIG", "SET", "maxmemory", &(used + headroom).to_string()],
    );
}

/// Writes filler values (with `ttl_s`, or none) one by one until `done` or an error;
/// returns how many were written and the error, if any.
fn fill(
    c: &mut redis::Connection,
    ttl_s: Option<u64>,
    max: usize,
    mut done: impl FnMut(&mut redis::Connection) -> bool,
) -> (usize, Option<String>) {
    let value = vec![b'x'; FILLER];
    for n in 0..max {
        let mut cmd = redis::cmd("SET");
        cmd.arg(format!("filler:{n}")).arg(&value);
        if let Some(ttl) = ttl_s {
            cmd.arg("EX").arg(ttl);
        }
        if let Err(e) = cmd.query::<()>(c) {
            return (n, Some(error_text(&e)));
        }
        if n % 25 == 24 && done(c) {
            return (n + 1, None);
        }
    }
    (max, None)
}

fn fillers_left(c: &mut redis::Connection, written: usize) -> usize {
    let mut cmd = redis::cmd("EXISTS");
    for n in 0..written {
        cmd.arg(format!("filler:{n}"));
    }
    cmd.query::<usize>(c).expect("EXISTS")
}

/// Calls every limiter [`CAPACITY`] times for one unit; returns the calls admitted. With no
/// eviction all are exhausted and this is 0.
fn admitted_again(c: &mut redis::Connection) -> u64 {
    let cap = CAPACITY.to_string();
    let calls: Vec<Vec<String>> = (0..LIMITERS)
        .flat_map(|i| (0..CAPACITY).map(move |_| i))
        .map(|i| command_words(&["RL.TOKENBUCKET", &limiter_key(i), &cap, &cap, SLOW_MS]))
        .collect();
    let mut admitted = 0;
    for chunk in calls.chunks(1000) {
        for reply in send(c, chunk) {
            let reply: Vec<i64> = redis::from_redis_value(&reply).expect("a limiter reply");
            admitted += reply[0] as u64;
        }
    }
    admitted
}

/// One call per command the build has, each on a key that exists, as `(call, may write)`.
fn one_call_each(mix: &Mix) -> Vec<(Vec<String>, bool)> {
    let mut calls = Vec::new();
    for &kind in &mix.kinds {
        calls.push((mix.first_call(kind, 0), true));
        let mut peek = mix.first_call(kind, 0);
        if kind != Kind::Concurrency && kind != Kind::Throttle {
            peek.push("PEEK".into());
            calls.push((peek, true));
        }
    }
    if mix.includes("RL.CONCURRENCY") {
        calls.push((
            command_words(&["RL.CONCURRENCY", "cc:0", "RELEASE", "first"]),
            true,
        ));
    }
    if mix.includes("RL.ALL") {
        calls.push((
            command_words(&["RL.ALL", "1", "tb:0", "TOKENBUCKET", "1", "1", "60000"]),
            true,
        ));
    }
    if mix.includes("RL.REFUND") {
        calls.push((
            command_words(&[
                "RL.REFUND",
                "tb:0",
                "TOKENBUCKET",
                "1",
                "1",
                "60000",
                "COST",
                "1",
            ]),
            true,
        ));
    }
    if mix.includes("RL.STATE") {
        calls.push((command_words(&["RL.STATE", "tb:0"]), false));
    }
    calls
}

#[test]
fn noeviction_refuses_writing_calls_with_the_servers_oom_error() {
    let server = Server::start_with(&["--maxmemory-policy", "noeviction"]);
    let mut c = server.client();
    let mix = Mix::new(available(&mut c), 1, false);
    let first: Vec<Vec<String>> = mix.kinds.iter().map(|&k| mix.first_call(k, 0)).collect();
    send(&mut c, &first);
    let before = dataset(&mut c);

    // Below what is already used: nothing can be evicted, every deny-oom command is refused.
    let used = info_int(&mut c, "memory", "used_memory");
    query::<()>(
        &mut c,
        &["CONFIG", "SET", "maxmemory", &(used / 2).to_string()],
    );
    let oom = error(&mut c, &["SET", "other", "data"]);
    assert!(oom.starts_with("OOM "), "{oom}");
    for (call, writes) in one_call_each(&mix) {
        let words: Vec<&str> = call.iter().map(String::as_str).collect();
        if writes {
            assert_eq!(error(&mut c, &words), oom, "{words:?}");
        } else {
            query::<redis::Value>(&mut c, &words);
        }
    }
    assert_eq!(dataset(&mut c), before, "a refused call wrote");
    if mix.includes("RL.RESET") {
        // Deleting frees memory, so RL.RESET is not deny-oom.
        assert_eq!(query::<i64>(&mut c, &["RL.RESET", "tb:0"]), 1);
    }

    query::<()>(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    ints(&mut c, &["RL.TOKENBUCKET", "tb:0", "1", "1", "60000"]);
    println!("noeviction: every writing RL.* call refused with `{oom}`");
}

#[test]
fn allkeys_lru_evicts_limiters_and_they_restart_full() {
    let server = Server::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let mut c = server.client();
    exhausted_limiters(&mut c, SLOW_MS);
    limit_memory(&mut c, 512 * 1024);
    let (written, err) = fill(&mut c, None, 5_000, |c| {
        limiters_left(c) <= LIMITERS * 3 / 4
    });
    assert_eq!(err, None);
    query::<()>(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);

    let evicted = LIMITERS - limiters_left(&mut c);
    assert!(evicted > 0, "no limiter evicted after {written} fillers");
    let fillers_evicted = written - fillers_left(&mut c, written);
    let extra = admitted_again(&mut c);
    assert_eq!(
        extra,
        evicted as u64 * CAPACITY,
        "each evicted limiter restarts full"
    );
    println!(
        "allkeys-lru: {written} fillers of {FILLER} B (headroom 512 KiB) evicted {evicted} of \
         {LIMITERS} exhausted limiters and {fillers_evicted} fillers; {extra} extra admissions \
         ({CAPACITY} per evicted limiter, i.e. one full capacity each)"
    );
}

#[test]
fn volatile_lru_evicts_only_limiters_next_to_data_without_ttl() {
    let server = Server::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let mut c = server.client();
    exhausted_limiters(&mut c, SLOW_MS);
    limit_memory(&mut c, 512 * 1024);
    let (written, err) = fill(&mut c, None, 5_000, |_| false);
    let oom = err.expect("OOM once no key with a TTL is left");
    assert!(oom.starts_with("OOM "), "{oom}");
    // Every limiter key went before the first refusal; no filler (no TTL) was touched.
    assert_eq!(limiters_left(&mut c), 0);
    assert_eq!(fillers_left(&mut c, written), written);
    query::<()>(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    let extra = admitted_again(&mut c);
    assert_eq!(extra, LIMITERS as u64 * CAPACITY);
    println!(
        "volatile-lru: {written} fillers without TTL evicted all {LIMITERS} limiters (and no \
         filler) before the first OOM; {extra} extra admissions"
    );
}

#[test]
fn volatile_ttl_evicts_limiters_before_longer_lived_cache_data() {
    let server = Server::start_with(&["--maxmemory-policy", "volatile-ttl"]);
    let mut c = server.client();
    // Limiters idle within 10 minutes (so their TTL is at most that), cache data for a day.
    exhausted_limiters(&mut c, "600000");
    limit_memory(&mut c, 512 * 1024);
    let (written, err) = fill(&mut c, Some(86_400), 5_000, |c| {
        limiters_left(c) <= LIMITERS / 2
    });
    assert_eq!(err, None);
    let evicted = LIMITERS - limiters_left(&mut c);
    let fillers_evicted = written - fillers_left(&mut c, written);
    assert!(evicted > 0);
    assert!(
        evicted > fillers_evicted,
        "{evicted} limiters and {fillers_evicted} fillers evicted"
    );
    println!(
        "volatile-ttl: {written} fillers with a 1-day TTL evicted {evicted} of {LIMITERS} \
         limiters (TTL <= 10 min) and {fillers_evicted} fillers"
    );
}

/// Prints what one limiter key costs in memory, per algorithm (`MEMORY USAGE`), for sizing.
#[test]
fn memory_per_limiter_key() {
    let server = Server::start();
    let mut c = server.client();
    let mix = Mix::new(available(&mut c), 1, false);
    let mut line = String::new();
    for &kind in &mix.kinds {
        let call = mix.first_call(kind, 0);
        send(&mut c, std::slice::from_ref(&call));
        let key = Mix::key(kind, 0);
        let bytes: i64 = query(&mut c, &["MEMORY", "USAGE", &key, "SAMPLES", "0"]);
        let value_len: i64 = query(&mut c, &["STRLEN", &key]);
        assert!(bytes > 0);
        line += &format!(" {}={bytes} B (value {value_len} B);", kind.command());
    }
    // The two algorithms whose value grows: a log after 100 calls, 100 leases.
    let mut grown = |name: &str, calls: Vec<Vec<String>>| {
        if mix.includes(name) {
            send(&mut c, &calls);
            let bytes: i64 = query(&mut c, &["MEMORY", "USAGE", &calls[0][1], "SAMPLES", "0"]);
            line += &format!(" {name} after 100 calls={bytes} B;");
        }
    };
    grown(
        "RL.LOG",
        (0..100)
            .map(|_| command_words(&["RL.LOG", "log100", "100", "60000"]))
            .collect(),
    );
    grown(
        "RL.CONCURRENCY",
        (0..100)
            .map(|i| {
                let id = format!("worker-{i}");
                command_words(&["RL.CONCURRENCY", "cc100", "100", "60000", "ACQUIRE", &id])
            })
            .collect(),
    );
    println!("MEMORY USAGE per limiter key:{line}");
}
