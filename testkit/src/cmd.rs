//! Running commands and reading what they return: replies, error texts, key bytes and
//! expiry, `INFO` fields, the server clock; waiting for a condition; many clients at once.

use crate::server::Server;
use std::time::{Duration, Instant};

/// Runs a command that replies with an array of integers (every limiter reply).
pub fn ints(conn: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    query(conn, args)
}

/// Runs a command that must fail, and returns the full error text as the client saw it
/// (`ERR ...` or `WRONGTYPE ...`).
pub fn error(conn: &mut redis::Connection, args: &[&str]) -> String {
    match command(args).query::<redis::Value>(conn) {
        Ok(v) => panic!("{args:?} should fail, replied {v:?}"),
        Err(e) => error_text(&e),
    }
}

/// The server's error line, `CODE message`, from a client error.
pub fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// The raw bytes of a key (`None` if missing), and its PTTL.
pub fn snapshot(conn: &mut redis::Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    let value: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(conn).expect("DUMP");
    let ttl: i64 = redis::cmd("PTTL").arg(key).query(conn).expect("PTTL");
    (value, ttl)
}

/// Builds a command from its words, text or bytes (`&["SET", "k", "v"]`).
pub fn command<A: redis::ToRedisArgs>(args: &[A]) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(a);
    }
    cmd
}

/// Runs a command and converts its reply, panicking with the command on failure.
pub fn query<T: redis::FromRedisValue>(conn: &mut redis::Connection, args: &[&str]) -> T {
    command(args)
        .query(conn)
        .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
}

/// The raw bytes of a key (`None` if missing) and its absolute expiry in Unix ms
/// (`PEXPIRETIME`: -1 without expiry, -2 missing). Unlike [`snapshot`] it does not change as
/// time passes, so "before == after" is an exact check that a call wrote nothing.
pub fn frozen(conn: &mut redis::Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    let value: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(conn).expect("DUMP");
    let expiry: i64 = redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(conn)
        .expect("PEXPIRETIME");
    (value, expiry)
}

/// Whether `needle` occurs in `haystack`, ignoring ASCII case (a command name in an AOF).
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// The server's clock (`TIME`) in microseconds since the epoch: the clock the limiters use.
pub fn server_time_us(conn: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(conn).expect("TIME");
    secs * 1_000_000 + micros
}

/// Polls `done` every few milliseconds until it returns true; panics after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The value of `field` in `INFO section` (`None` if the server does not report it).
pub fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn).expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// Polls `f` every 20 ms until it returns true or 10 s pass (no timing assertions: only
/// an upper bound that a healthy machine never reaches).
pub async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not within 10 s: {what}");
}

/// Runs `client(i, conn)` on `clients` threads, each with its own connection, started
/// together; returns everything they collected.
pub fn hammer_with<T: Send>(
    server: &Server,
    clients: usize,
    client: impl Fn(usize, &mut redis::Connection) -> Vec<T> + Sync,
) -> Vec<T> {
    let start = std::sync::Barrier::new(clients);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|i| {
                let (start, client) = (&start, &client);
                let mut conn = server.client();
                s.spawn(move || {
                    start.wait();
                    client(i, &mut conn)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("client thread"))
            .collect()
    })
}

/// The longest duration any parameter takes (10^12 ms, about 31.7 years; the current
/// window of that length runs from 2001 to 2033): a window, period or lease that nothing
/// leaves and nothing refills during a test.
pub const LONGEST: &str = "1000000000000";
/// [`LONGEST`] in ms.
pub const LONGEST_MS: u64 = 1_000_000_000_000;
/// [`LONGEST`] in µs, as the limiters compute.
pub const LONGEST_US: u128 = LONGEST_MS as u128 * 1000;

/// Runs `command key params...`, a limiter call, and returns its reply.
pub fn call_on(c: &mut redis::Connection, command: &str, key: &str, params: &[&str]) -> Vec<i64> {
    let mut args = vec![command, key];
    args.extend_from_slice(params);
    ints(c, &args)
}

/// [`call_on`], with the server time (µs) just before and after the call.
pub fn timed_call(
    c: &mut redis::Connection,
    command: &str,
    key: &str,
    params: &[&str],
) -> (Vec<i64>, u128, u128) {
    let t0 = server_time_us(c);
    let reply = call_on(c, command, key, params);
    let t1 = server_time_us(c);
    (reply, u128::from(t0), u128::from(t1))
}

/// Whole ms from `now_us` until `at_us`, rounded up (as every wait in a reply); 0 once
/// `at_us` has passed.
pub fn ms_until(at_us: u128, now_us: u128) -> i64 {
    i64::try_from(at_us.saturating_sub(now_us).div_ceil(1000)).expect("a wait in i64")
}

/// Whether `key` exists.
pub fn exists(c: &mut redis::Connection, key: &str) -> bool {
    query::<i64>(c, &["EXISTS", key]) == 1
}

/// Sets `key` to raw bytes (a stored limiter as a test writes it), without expiry.
pub fn set_bytes(c: &mut redis::Connection, key: &str, value: &[u8]) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<()>(c)
        .expect("SET");
}

/// The raw bytes of `key` (empty if missing).
pub fn get_bytes(c: &mut redis::Connection, key: &str) -> Vec<u8> {
    redis::cmd("GET")
        .arg(key)
        .query::<Option<Vec<u8>>>(c)
        .expect("GET")
        .unwrap_or_default()
}
