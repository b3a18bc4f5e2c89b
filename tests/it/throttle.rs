//! RL.THROTTLE, the drop-in for redis-cell's CL.THROTTLE, against a real server: redis-cell's
//! documented examples and its test table, the seconds rounding, quantity 0, keys shared with
//! RL.GCRA, the bad-input table, and 32 clients on one key.
//!
//! redis-cell's table runs at one instant with 1 unit per second; here the rate is 1 per
//! 1000 s so that the replies do not depend on how fast the test runs (every wait is the
//! table's, times 1000, less the few milliseconds the test takes).

use redis_rl_testkit::*;

const MAX_BURST: &str = "ERR max_burst must be an integer between 0 and 999999999999999";
const COUNT: &str = "ERR count must be an integer between 1 and 1000000000000000";
const PERIOD_S: &str = "ERR period_s must be an integer between 1 and 1000000000";
const QUANTITY: &str = "ERR quantity must be an integer between 0 and 1000000000000000";

fn throttle(c: &mut redis::Connection, key: &str, params: &[&str]) -> Vec<i64> {
    call_on(c, "RL.THROTTLE", key, params)
}

#[test]
fn redis_cell_readme_example() {
    let server = Server::start();
    let mut c = server.client();
    // CL.THROTTLE user123 15 30 60 -> 0, 16, 15, -1, 2. Only the command name changes.
    assert_eq!(
        throttle(&mut c, "user123", &["15", "30", "60"]),
        [0, 16, 15, -1, 2]
    );
    assert_eq!(
        throttle(&mut c, "user124", &["15", "30", "60", "1"]),
        [0, 16, 15, -1, 2]
    );
}

#[test]
fn redis_cell_end_to_end_example() {
    let server = Server::start();
    let mut c = server.client();
    // redis-cell's tests/e2e.rs: CL.THROTTLE user123 0 1 2 1.
    let p = ["0", "1", "2", "1"];
    assert_eq!(throttle(&mut c, "user123", &p), [0, 1, 0, -1, 2]);
    let limited = throttle(&mut c, "user123", &p);
    assert_eq!(limited[..3], [1, 1, 0]);
    // Both waits are 2 s less the time since the first call, rounded up to whole seconds.
    assert!(
        (1..=2).contains(&limited[3]) && limited[3] == limited[4],
        "{limited:?}"
    );
}

#[test]
fn redis_cell_rate_limit_table() {
    let server = Server::start();
    let mut c = server.client();
    // max_burst 4 (limit 5), 1 unit per 1000 s. (quantity, limited, remaining, retry_after_s,
    // reset_after_s), as in redis-cell's it_rate_limits cases 0 to 6 (waits x 1000).
    let cases: [(&str, i64, i64, i64, i64); 9] = [
        ("6", 1, 5, -1, 0), // never more than the maximum
        ("1", 0, 4, -1, 1000),
        ("1", 0, 3, -1, 2000),
        ("1", 0, 2, -1, 3000),
        ("1", 0, 1, -1, 4000),
        ("1", 0, 0, -1, 5000),
        ("1", 1, 0, 1000, 5000),
        ("0", 0, 0, -1, 5000), // quantity 0 peeks
        ("5", 1, 0, 5000, 5000),
    ];
    for (i, (quantity, limited, remaining, retry, reset)) in cases.into_iter().enumerate() {
        let r = throttle(&mut c, "k", &["4", "1", "1000", quantity]);
        assert_eq!(r[..3], [limited, 5, remaining], "case {i}: {r:?}");
        let close =
            |got: i64, want: i64| got == want || (want > 0 && got < want && got > want - 60);
        assert!(close(r[3], retry) && close(r[4], reset), "case {i}: {r:?}");
    }
}

#[test]
fn quantity_zero_looks_without_writing() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(
        throttle(&mut c, "k", &["9", "10", "60", "0"]),
        [0, 10, 10, -1, 0]
    );
    assert!(!exists(&mut c, "k"));
    assert_eq!(
        throttle(&mut c, "k", &["9", "10", "60", "3"]),
        [0, 10, 7, -1, 18]
    );
    let before = frozen(&mut c, "k");
    let r = throttle(&mut c, "k", &["9", "10", "60", "0"]);
    assert_eq!(r[..4], [0, 10, 7, -1]);
    // Too many at once: limited, and never possible (-1).
    assert_eq!(
        throttle(&mut c, "k", &["9", "10", "60", "11"])[..4],
        [1, 10, 7, -1]
    );
    // More than what is left: limited, with the wait for 1 more.
    let r = throttle(&mut c, "k", &["9", "10", "60", "8"]);
    assert_eq!(r[..3], [1, 10, 7]);
    assert!((1..=6).contains(&r[3]), "{r:?}");
    assert_eq!(frozen(&mut c, "k"), before, "a limited or zero call wrote");
}

#[test]
fn waits_round_up_to_whole_seconds_and_the_key_expires() {
    let server = Server::start();
    let mut c = server.client();
    // 3 per second, no burst: 333.3 ms per unit is reported as 1 s.
    assert_eq!(
        throttle(&mut c, "third", &["0", "3", "1"]),
        [0, 1, 0, -1, 1]
    );
    // 2 per 21 s: 10.5 s per unit is reported as 11 s.
    let t0 = server_time_us(&mut c);
    assert_eq!(throttle(&mut c, "k", &["0", "2", "21"]), [0, 1, 0, -1, 11]);
    let r = throttle(&mut c, "k", &["0", "2", "21"]);
    let waited_ms = (server_time_us(&mut c) - t0).div_ceil(1000);
    assert_eq!(r[..3], [1, 1, 0]);
    // The wait for the next unit is 10.5 s less the time since the first call (measured on
    // the server's clock), rounded up to whole seconds.
    let least = 10_500u64.saturating_sub(waited_ms).div_ceil(1000) as i64;
    assert!((least..=11).contains(&r[3]) && r[3] == r[4], "{r:?}");
    let ttl: i64 = query(&mut c, &["PTTL", "k"]);
    assert!(ttl > 0 && ttl <= 11_501, "{ttl}");
    let value: Vec<u8> = query(&mut c, &["GET", "k"]);
    assert_eq!(&value[..5], b"\0RL\x02G");
}

#[test]
fn rl_gcra_and_rl_throttle_share_keys() {
    let server = Server::start();
    let mut c = server.client();
    // 10 per 1000 s, max_burst 9: RL.GCRA k 10 1000000 BURST 10.
    assert_eq!(
        throttle(&mut c, "k", &["9", "10", "1000", "2"])[..3],
        [0, 10, 8]
    );
    let r = ints(
        &mut c,
        &["RL.GCRA", "k", "10", "1000000", "BURST", "10", "COST", "3"],
    );
    assert_eq!(r[..4], [1, 10, 5, 0]);
    assert_eq!(
        throttle(&mut c, "k", &["9", "10", "1000", "0"])[..4],
        [0, 10, 5, -1]
    );
    assert_eq!(
        error(&mut c, &["RL.TOKENBUCKET", "k", "10", "10", "1000"]),
        "ERR key holds a GCRA limiter, not a token bucket limiter"
    );
    ints(&mut c, &["RL.FIXED", "fixed", "10", "1000"]);
    refused_untouched(
        &mut c,
        &["RL.THROTTLE", "fixed", "9", "10", "1000"],
        "ERR key holds a fixed window limiter, not a GCRA limiter",
    );
    query::<()>(&mut c, &["SET", "text", "1700000000000000000"]);
    // redis-cell's own value (nanoseconds as text) is not ours: refused, not misread.
    refused_untouched(
        &mut c,
        &["RL.THROTTLE", "text", "9", "10", "1000"],
        "ERR key holds a value that is not a redis-rl limiter",
    );
    query::<()>(&mut c, &["HSET", "hash", "a", "1"]);
    refused_untouched(
        &mut c,
        &["RL.THROTTLE", "hash", "9", "10", "1000"],
        "WRONGTYPE Operation against a key holding the wrong kind of value",
    );
}

#[test]
fn every_bad_argument_is_refused_with_its_text_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    throttle(&mut c, "k", &["9", "10", "1000", "3"]);
    let dirty = info_field(&mut c, "persistence", "rdb_changes_since_last_save");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut table: Vec<(Vec<String>, &str)> = Vec::new();
    for bad in NOT_DECIMAL_INTEGERS {
        table.push((s(&[bad, "10", "60"]), MAX_BURST));
        table.push((s(&["9", bad, "60"]), COUNT));
        table.push((s(&["9", "10", bad]), PERIOD_S));
        table.push((s(&["9", "10", "60", bad]), QUANTITY));
    }
    table.push((s(&["1000000000000000", "10", "60"]), MAX_BURST));
    table.push((s(&["9", "0", "60"]), COUNT));
    table.push((s(&["9", "1000000000000001", "60"]), COUNT));
    table.push((s(&["9", "10", "0"]), PERIOD_S));
    table.push((s(&["9", "10", "1000000001"]), PERIOD_S));
    table.push((s(&["9", "10", "60", "1000000000000001"]), QUANTITY));
    // Options of the other commands are not quantities.
    table.push((s(&["9", "10", "60", "PEEK"]), QUANTITY));
    // Arguments are checked in order.
    table.push((s(&["-1", "0", "0", "-1"]), MAX_BURST));
    table.push((s(&["9", "0", "0", "-1"]), COUNT));
    for (args, text) in &table {
        for key in ["k", "missing"] {
            let mut full = vec!["RL.THROTTLE", key];
            full.extend(args.iter().map(String::as_str));
            refused_untouched(&mut c, &full, text);
        }
    }
    let arity = "ERR wrong number of arguments for 'RL.THROTTLE' command";
    assert_eq!(error(&mut c, &["RL.THROTTLE"]), arity);
    for args in [
        &["RL.THROTTLE", "k"][..],
        &["RL.THROTTLE", "k", "9", "10"],
        &["rl.throttle", "k", "9", "10", "60", "1", "1"],
        &["RL.THROTTLE", "k", "9", "10", "60", "COST", "1"],
    ] {
        refused_untouched(&mut c, args, arity);
    }
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_changes_since_last_save"),
        dirty
    );
    // The edges of every range are accepted.
    for params in [
        &["0", "1", "1", "0"][..],
        &["999999999999999", "1000000000000000", "1000000000", "0"],
        &["9", "10", "60", "1000000000000000"],
    ] {
        assert_eq!(throttle(&mut c, "edge", params).len(), 5, "{params:?}");
    }
}

#[test]
fn thirty_two_clients_admit_exactly_the_limit() {
    let server = Server::start();
    let replies = hammer_with(&server, 32, |_, c| {
        let mut seen = Vec::new();
        loop {
            let r = throttle(c, "k", &["499", "1", "1000000000"]);
            let limited = r[0] == 1;
            seen.push(r);
            if limited {
                return seen;
            }
        }
    });
    let mut remaining: Vec<i64> = replies.iter().filter(|r| r[0] == 0).map(|r| r[2]).collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..500).collect::<Vec<_>>());
    assert!(replies
        .iter()
        .filter(|r| r[0] == 1)
        .all(|r| r[..3] == [1, 500, 0] && r[3] > 0));
}
