//! The store's write paths (`src/store.rs`): a live key of the same length (written into the
//! read's buffer), a new key, a short value that shrinks (cut in place) or grows (re-created):
//! each leaves a raw string of the new length with the new expiry, and a replica holding the
//! same bytes and absolute expiry (RL.REFUND's writes too).

use std::time::Duration;

use redis_rl_testkit::*;

/// A bucket refilled every 1000 ms stores a longer state than one refilled every 100 ms.
const SLOW: [&str; 5] = ["1000000000", "1", "1000", "COST", "100"];
const FAST: [&str; 5] = ["1000000000", "1", "100", "COST", "100"];

fn bucket(c: &mut redis::Connection, key: &str, args: &[&str]) -> usize {
    let mut call = vec!["RL.TOKENBUCKET", key];
    call.extend_from_slice(args);
    assert_eq!(ints(c, &call)[0], 1, "{call:?}");
    query(c, &["STRLEN", key])
}

#[test]
fn every_write_path_leaves_an_exact_raw_string_and_the_replica_the_same_bytes() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let (mut m, mut r) = (master.client(), replica.client());

    let new = bucket(&mut m, "shrinks", &SLOW);
    let same = bucket(&mut m, "shrinks", &SLOW);
    let shrunk = bucket(&mut m, "shrinks", &FAST);
    assert_eq!(new, same);
    assert!(shrunk < same, "{shrunk} < {same}");
    let short = bucket(&mut m, "grows", &FAST);
    let grown = bucket(&mut m, "grows", &SLOW);
    assert!(grown > short, "{grown} > {short}");
    // RL.REFUND writes through its own read as well: a drained bucket's level grows to
    // thousands of tokens (a longer value), then by one (the same length).
    let drained = bucket(
        &mut m,
        "refunded",
        &["1000000000", "1", "1000", "COST", "1000000000"],
    );
    let refund = |c: &mut redis::Connection, cost| {
        let call = [
            "RL.REFUND",
            "refunded",
            "TOKENBUCKET",
            "1000000000",
            "1",
            "1000",
            "COST",
            cost,
        ];
        (
            ints(c, &call)[0],
            query::<usize>(c, &["STRLEN", "refunded"]),
        )
    };
    let (n, longer) = refund(&mut m, "3000");
    assert!(n == 3000 && longer > drained, "{n}: {longer} > {drained}");
    assert_eq!(refund(&mut m, "1"), (1, longer));

    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    for key in ["shrinks", "grows", "refunded"] {
        let encoding: String = query(&mut m, &["OBJECT", "ENCODING", key]);
        assert_eq!(encoding, "raw", "{key}");
        // A further call reads the state it left (no refusal) and writes in place.
        let len = bucket(&mut m, key, if key == "shrinks" { &FAST } else { &SLOW });
        assert_eq!(len, query::<usize>(&mut m, &["STRLEN", key]));
    }
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    for key in ["shrinks", "grows", "refunded"] {
        let value: Vec<u8> = query(&mut m, &["GET", key]);
        let expiry: i64 = query(&mut m, &["PEXPIRETIME", key]);
        assert!(expiry > 0, "{key} has an expiry");
        wait_until(
            "the replica to hold the master's bytes",
            Duration::from_secs(10),
            || query::<Vec<u8>>(&mut r, &["GET", key]) == value,
        );
        assert_eq!(query::<i64>(&mut r, &["PEXPIRETIME", key]), expiry, "{key}");
    }
}

/// Every write leaves the key expiring between half and one and a half TTL slacks (1 s) after
/// its limiter becomes idle: the exact target (idle + 1 s) on Redis 7.0; on Valkey 9 the
/// expiry already set is kept while it lies within half a slack of the target, and a larger
/// move, either way, sets the new target.
#[test]
fn a_write_leaves_the_key_expiring_within_half_a_slack_of_the_target() {
    let server = Server::start();
    let mut c = server.client();
    let mut expiries = Vec::new();
    // 10 tokens refilled 10 per second: a unit taken moves the idle instant by 100 ms; the
    // last call refills 10 per 100 ms, which brings the idle instant ~1 s nearer.
    for (refill_ms, cost) in [
        ("1000", "1"),
        ("1000", "1"),
        ("1000", "6"),
        ("1000", "1"),
        ("100", "1"),
    ] {
        let before_ms = server_time_us(&mut c).div_ceil(1000) as i64;
        let reply = ints(
            &mut c,
            &["RL.TOKENBUCKET", "k", "10", "10", refill_ms, "COST", cost],
        );
        let after_ms = server_time_us(&mut c).div_ceil(1000) as i64;
        assert_eq!(reply[0], 1, "cost {cost}: {reply:?}");
        let reset = reply[4];
        let expiry: i64 = query(&mut c, &["PEXPIRETIME", "k"]);
        assert!(
            (before_ms + reset + 500..=after_ms + reset + 1500).contains(&expiry),
            "cost {cost}: expiry {expiry}, reset {reset}, call between {before_ms} and {after_ms}"
        );
        expiries.push(expiry);
    }
    assert!(
        expiries[..4].windows(2).all(|w| w[0] <= w[1]),
        "{expiries:?}"
    );
    assert!(
        expiries[2] >= expiries[1] + 500,
        "the 6-unit take moved it: {expiries:?}"
    );
    assert!(
        expiries[4] < expiries[3],
        "the faster refill brought it nearer: {expiries:?}"
    );
}

/// Appends `v` as a LEB128 varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A valid sliding log (window 1 s) of 122 entries under `header`: one that expired at
/// `now_us`, then 121 within the last 0.2 s (138 bytes: read in place on both servers). A call now drops the first and appends one: the same length
/// (8 + 3 bytes for the first two entries before, 8 + 3 for the first and the new one after).
fn log_value(header: &[u8], now_us: u64) -> Vec<u8> {
    let mut out = header.to_vec();
    varint(&mut out, 1000);
    let first = now_us - 1_100_000;
    varint(&mut out, first << 1);
    varint(&mut out, 900_000 << 1);
    for _ in 0..120 {
        varint(&mut out, 10 << 1);
    }
    out
}

fn now_us() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    u64::try_from(since.as_micros()).expect("microseconds fit u64")
}

/// A value SET earlier in the same MULTI is still referenced by the transaction (and its
/// pending propagation) when a limiter call reads it in place and writes the same length:
/// the call must write into its own copy, so the AOF holds the SET's bytes as sent.
#[test]
fn a_write_into_a_value_set_in_the_same_multi_leaves_the_set_as_sent() {
    let server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.client();
    ints(&mut c, &["RL.LOG", "model", "1000", "1000"]);
    let model: Vec<u8> = query(&mut c, &["GET", "model"]);
    let header = &model[..model.len().min(5)];
    let (mut same_length, mut attempts) = (false, 0);
    while !same_length && attempts < 5 {
        attempts += 1;
        let key = format!("log{attempts}");
        let sent = log_value(header, now_us());
        assert!(sent.len() > 128, "{}", sent.len());
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(&key)
            .arg(&sent)
            .cmd("RL.LOG")
            .arg(&key)
            .arg(1000)
            .arg(1000)
            .cmd("GET")
            .arg(&key);
        let ((), reply, after): ((), Vec<i64>, Vec<u8>) = pipe.query(&mut c).expect("MULTI");
        assert_eq!(reply[0], 1, "allowed");
        same_length = after.len() == sent.len();
        let aof = aof_bytes(&server);
        assert!(
            aof.windows(sent.len()).any(|w| w == sent.as_slice()),
            "the AOF holds the SET's bytes"
        );
        assert!(aof.windows(after.len()).any(|w| w == after.as_slice()));
    }
    assert!(
        same_length,
        "a call wrote the same length in {attempts} attempts"
    );
}
