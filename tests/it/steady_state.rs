//! Memory steady state: a million calls across 100k keys of every algorithm with 200 ms
//! windows, then nothing. Once the keys' TTLs pass, the keyspace is empty (no leaked key)
//! and `used_memory` is back to what it was after a warm-up round of the same size (no
//! growth per call). The warm-up round absorbs one-off allocations (the keyspace's hash
//! table growing, client buffers, allocator caches), so the comparison is of steady states.
//! No timing is asserted: only the deadline for the keys to expire.

use redis_rl_testkit::*;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const KEYS: usize = 100_000;
const CALLS: usize = 1_000_000;
const BATCH: usize = 10_000;
const WINDOW: &str = "200";

/// Appends call `n` of a round, in RESP, to `out`: key `n / 10` (a key's 10 calls come
/// together), one algorithm per key.
fn call(out: &mut Vec<u8>, prefix: &str, n: usize) {
    let k = n / (CALLS / KEYS);
    let key = format!("{prefix}:{k}");
    let id = format!("id{}", n % 3);
    let words: &[&str] = match k % 6 {
        0 => &["RL.TOKENBUCKET", &key, "5", "5", WINDOW],
        1 => &["RL.SLIDING", &key, "5", WINDOW],
        2 => &["RL.FIXED", &key, "5", WINDOW],
        3 => &["RL.GCRA", &key, "5", WINDOW],
        4 => &["RL.LOG", &key, "5", WINDOW],
        _ => &["RL.CONCURRENCY", &key, "5", WINDOW, "ACQUIRE", &id],
    };
    out.extend_from_slice(format!("*{}\r\n", words.len()).as_bytes());
    for w in words {
        out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
}

/// One round: CALLS calls, pipelined on a raw socket (the test is built without
/// optimisation, and a client library would be the bottleneck); returns how many were
/// allowed.
fn round(server: &Server, prefix: &str) -> usize {
    let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut line = Vec::new();
    let mut next_line = |reader: &mut BufReader<TcpStream>| {
        line.clear();
        reader.read_until(b'\n', &mut line).expect("read");
        line.clone()
    };
    let mut allowed = 0;
    for start in (0..CALLS).step_by(BATCH) {
        let mut out = Vec::with_capacity(BATCH * 64);
        for n in start..(start + BATCH).min(CALLS) {
            call(&mut out, prefix, n);
        }
        writer.write_all(&out).expect("send");
        for _ in start..(start + BATCH).min(CALLS) {
            let head = next_line(&mut reader);
            assert_eq!(head, b"*5\r\n", "{}", String::from_utf8_lossy(&head));
            if next_line(&mut reader) == b":1\r\n" {
                allowed += 1;
            }
            for _ in 0..4 {
                next_line(&mut reader);
            }
        }
    }
    allowed
}

fn used_memory(c: &mut redis::Connection) -> i64 {
    // Give freed pages back where the allocator supports it, so the figure is the live data.
    let _ = redis::cmd("MEMORY").arg("PURGE").query::<()>(c);
    info_field(c, "memory", "used_memory")
        .expect("used_memory")
        .parse()
        .expect("a number")
}

fn dbsize(c: &mut redis::Connection) -> i64 {
    query(c, &["DBSIZE"])
}

/// Runs a round, waits until every key has expired, and returns (allowed, keys left at the
/// end of the round, used_memory then, used_memory once idle).
fn round_to_idle(
    server: &Server,
    c: &mut redis::Connection,
    prefix: &str,
) -> (usize, i64, i64, i64) {
    let started = Instant::now();
    let allowed = round(server, prefix);
    let keys = dbsize(c);
    let full = used_memory(c);
    let calls_s = started.elapsed().as_secs_f64();
    wait_until("every key to expire", Duration::from_secs(120), || {
        dbsize(c) == 0
    });
    println!(
        "{prefix}: {CALLS} calls in {calls_s:.1} s, {allowed} allowed, {keys} keys, \
         used_memory {full} B with {keys} keys still live; idle after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    (allowed, keys, full, used_memory(c))
}

#[test]
fn memory_returns_to_its_baseline_once_a_million_calls_have_expired() {
    // Expire faster than the default 10 cycles per second (the keys go idle by the
    // hundred thousand).
    let server = Server::start_with(&["--hz", "100"]);
    let mut c = server.client();
    query::<()>(&mut c, &["CONFIG", "SET", "rl.ttl-slack-ms", "100"]);
    let empty = used_memory(&mut c);

    let (allowed, _, _, baseline) = round_to_idle(&server, &mut c, "warm");
    // Every key gets its 10 calls together; at least the first 5 pass.
    assert!(allowed >= KEYS * 5, "{allowed} allowed");

    let (_, _, full, after) = round_to_idle(&server, &mut c, "main");
    assert_eq!(dbsize(&mut c), 0, "leaked keys");
    let expired: i64 = info_field(&mut c, "stats", "expired_keys")
        .expect("expired_keys")
        .parse()
        .unwrap();
    println!(
        "used_memory: empty {empty} B, baseline after warm-up {baseline} B, \
         at the end of the round {full} B, after {CALLS} more calls and idle {after} B \
         ({:+} B); expired_keys {expired}",
        after - baseline
    );
    assert!(expired >= 2 * KEYS as i64, "expired_keys {expired}");
    // 1 MB of slack: allocator and client-buffer noise, and about 1 byte per call: a leak
    // of one small allocation per call or per key would show as several MB.
    let slack = 1 << 20;
    assert!(
        after <= baseline + slack,
        "used_memory grew from {baseline} B to {after} B after a round that went idle"
    );
}
