//! RL.GCRA against a real server: every reply field, BURST, PEEK, COST, TTL and expiry,
//! waiting `retry_after_ms`, foreign and other-algorithm keys, the bad-input table, and 32
//! clients on one key.
//!
//! Exact figures come from fresh keys (a missing key is an idle limiter, whatever the time)
//! or from rates so slow (10 per 10^12 ms: one unit every 10^11 ms) that nothing accrues
//! during a test.

use redis_rl_testkit::*;
use std::time::Duration;

/// With limit 10: one unit every 10^11 ms.
const SLOW: &str = "1000000000000";
const T: i64 = 100_000_000_000;

const LIMIT: &str = "ERR limit must be an integer between 1 and 1000000000000000";
const PERIOD_MS: &str = "ERR period_ms must be an integer between 1 and 1000000000000";
const BURST: &str = "ERR burst must be an integer between 1 and 1000000000000000";
const COST: &str = "ERR cost must be an integer between 0 and 1000000000000000";

fn gcra(c: &mut redis::Connection, key: &str, params: &[&str]) -> Vec<i64> {
    let mut args = vec!["RL.GCRA", key];
    args.extend_from_slice(params);
    ints(c, &args)
}

fn exists(c: &mut redis::Connection, key: &str) -> bool {
    query::<i64>(c, &["EXISTS", key]) == 1
}

#[test]
fn a_fresh_key_replies_every_field_exactly() {
    let server = Server::start();
    let mut c = server.client();
    let cases: &[(&[&str], [i64; 5], bool)] = &[
        (&["10", "1000"], [1, 10, 9, 0, 100], true),
        // BURST is the bucket size, reported as the limit.
        (&["10", "1000", "BURST", "5"], [1, 5, 4, 0, 100], true),
        (
            &["10", "1000", "BURST", "5", "COST", "5"],
            [1, 5, 0, 0, 500],
            true,
        ),
        (
            &["10", "1000", "burst", "5", "COST", "6"],
            [0, 5, 5, -1, 0],
            false,
        ),
        (&["10", "1000", "BURST", "1"], [1, 1, 0, 0, 100], true),
        (
            &["10", "1000", "BURST", "20", "COST", "20"],
            [1, 20, 0, 0, 2000],
            true,
        ),
        (&["10", "1000", "COST", "0"], [1, 10, 10, 0, 0], false),
        (&["10", "1000", "PEEK"], [1, 10, 9, 0, 100], false),
        (
            &["10", "1000", "PEEK", "COST", "11"],
            [0, 10, 10, -1, 0],
            false,
        ),
        // 3 per second: one unit every 333.33 ms, reported as 334.
        (&["3", "1000"], [1, 3, 2, 0, 334], true),
        (&["1", "1"], [1, 1, 0, 0, 1], true),
        // The seed's tiers.
        (&["100", "60000"], [1, 100, 99, 0, 600], true),
        (
            &["10000", "60000", "COST", "10000"],
            [1, 10000, 0, 0, 60000],
            true,
        ),
        // The largest parameters.
        (
            &[
                "1000000000000000",
                "1000000000000",
                "BURST",
                "1000000000000000",
                "COST",
                "1000000000000000",
            ],
            [1, 1_000_000_000_000_000, 0, 0, 1_000_000_000_000],
            true,
        ),
    ];
    for (i, (params, reply, written)) in cases.iter().enumerate() {
        let key = format!("fresh:{i}");
        assert_eq!(gcra(&mut c, &key, params), reply.to_vec(), "{params:?}");
        assert_eq!(exists(&mut c, &key), *written, "{params:?} key written");
    }
}

#[test]
fn a_used_limiter_reports_remaining_retry_after_and_reset_after() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(
        gcra(&mut c, "k", &["10", SLOW, "COST", "3"]),
        [1, 10, 7, 0, 3 * T]
    );
    let r = gcra(&mut c, "k", &["10", SLOW, "COST", "4"]);
    assert_eq!(r[..4], [1, 10, 3, 0]);
    assert!(r[4] <= 7 * T && r[4] > 7 * T - 60_000, "{r:?}");

    let before = frozen(&mut c, "k");
    // Denied: the wait for 4 units is the reset time less the 6 units of room it needs.
    let denied = gcra(&mut c, "k", &["10", SLOW, "COST", "4"]);
    assert_eq!(denied[..3], [0, 10, 3]);
    assert_eq!(denied[4] - denied[3], 6 * T, "{denied:?}");
    let never = gcra(&mut c, "k", &["10", SLOW, "COST", "11"]);
    assert_eq!(never[..4], [0, 10, 3, -1]);
    assert_eq!(
        gcra(&mut c, "k", &["10", SLOW, "COST", "0"])[..4],
        [1, 10, 3, 0]
    );
    let peek = gcra(&mut c, "k", &["10", SLOW, "COST", "2", "PEEK"]);
    assert_eq!(peek[..4], [1, 10, 1, 0]);
    // A smaller BURST applies at once: 7 in use, only 5 allowed at once. Even a check
    // (COST 0) is denied until the use is back within the burst, as in redis-cell.
    let over = gcra(&mut c, "k", &["10", SLOW, "BURST", "5", "COST", "0"]);
    assert_eq!(over[..3], [0, 5, 0]);
    assert_eq!(over[4] - over[3], 5 * T, "{over:?}");
    assert_eq!(
        frozen(&mut c, "k"),
        before,
        "a call that takes nothing wrote"
    );

    assert_eq!(
        gcra(&mut c, "k", &["10", SLOW, "COST", "3"])[..4],
        [1, 10, 0, 0]
    );
    let empty = gcra(&mut c, "k", &["10", SLOW]);
    assert_eq!(empty[..3], [0, 10, 0]);
    assert_eq!(empty[4] - empty[3], 9 * T, "{empty:?}");
}

#[test]
fn the_key_expires_once_idle_plus_one_second() {
    let server = Server::start();
    let mut c = server.client();
    let t0 = server_time_us(&mut c);
    let r = gcra(&mut c, "k", &["10", "1000", "COST", "5"]);
    assert_eq!(r, [1, 10, 5, 0, 500]);
    assert_pttl_after_call(&mut c, "k", 500, t0);
    assert_eq!(query::<String>(&mut c, &["TYPE", "k"]), "string");
    let value: Vec<u8> = query(&mut c, &["GET", "k"]);
    assert!(value.len() <= 30, "{value:?}");
    assert_eq!(&value[..5], b"\0RL\x02G");
    wait_until("the key to expire", Duration::from_secs(10), || {
        !exists(&mut c, "k")
    });
}

#[test]
fn waiting_retry_after_is_enough() {
    let server = Server::start();
    let mut c = server.client();
    let p = ["1", "200", "BURST", "1"];
    assert_eq!(gcra(&mut c, "k", &p)[..3], [1, 1, 0]);
    let mut denials = 0;
    for _ in 0..20 {
        if denials == 5 {
            break;
        }
        let denied = gcra(&mut c, "k", &p);
        if denied[0] == 1 {
            continue; // the machine stalled for a whole period: it took the unit, try again
        }
        denials += 1;
        assert_eq!(denied[..3], [0, 1, 0]);
        assert!(denied[3] >= 1 && denied[3] <= 200, "{denied:?}");
        std::thread::sleep(Duration::from_millis(denied[3] as u64));
        assert_eq!(gcra(&mut c, "k", &p)[..3], [1, 1, 0]);
    }
    assert!(denials > 0, "never saw a denial");
}

#[test]
fn other_types_foreign_values_and_other_limiters_are_refused_untouched() {
    let server = Server::start();
    let mut c = server.client();
    query::<()>(&mut c, &["SADD", "set", "x"]);
    query::<()>(&mut c, &["SET", "text", "12345"]);
    ints(&mut c, &["RL.SLIDING", "sliding", "10", "1000"]);
    ints(&mut c, &["RL.FIXED", "fixed", "10", "1000"]);
    gcra(&mut c, "gcra", &["10", SLOW]);
    let cases: &[(&[&str], &str)] = &[
        (
            &["RL.GCRA", "set", "10", SLOW],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            &["RL.GCRA", "text", "10", SLOW],
            "ERR key holds a value that is not a redis-rl limiter",
        ),
        (
            &["RL.GCRA", "sliding", "10", SLOW],
            "ERR key holds a sliding window limiter, not a GCRA limiter",
        ),
        (
            &["RL.GCRA", "fixed", "10", SLOW],
            "ERR key holds a fixed window limiter, not a GCRA limiter",
        ),
        (
            &["RL.TOKENBUCKET", "gcra", "10", "10", "1000"],
            "ERR key holds a GCRA limiter, not a token bucket limiter",
        ),
        (
            &["RL.FIXED", "gcra", "10", "1000"],
            "ERR key holds a GCRA limiter, not a fixed window limiter",
        ),
    ];
    for (args, text) in cases {
        refused_untouched(&mut c, args, text);
    }
    let mut value: Vec<u8> = query(&mut c, &["GET", "gcra"]);
    value.push(0);
    command::<&[u8]>(&[b"SET", b"damaged", &value])
        .query::<()>(&mut c)
        .unwrap();
    refused_untouched(
        &mut c,
        &["RL.GCRA", "damaged", "10", SLOW],
        "ERR key holds a corrupt redis-rl GCRA limiter",
    );
}

#[test]
fn every_bad_argument_is_refused_with_its_text_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(gcra(&mut c, "k", &["10", SLOW, "COST", "3"])[0], 1);
    let dirty = info_field(&mut c, "persistence", "rdb_changes_since_last_save");
    let unknown = |shown: &str| {
        format!("ERR unknown option '{shown}', expected BURST b, COST n, UPTO, FORCE or PEEK")
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut table: Vec<(Vec<String>, String)> = Vec::new();
    for bad in NOT_DECIMAL_INTEGERS
        .iter()
        .chain(&["0", "1000000000000001"])
    {
        table.push((s(&[bad, SLOW]), LIMIT.into()));
        table.push((s(&["10", bad]), PERIOD_MS.into()));
        table.push((s(&["10", SLOW, "BURST", bad]), BURST.into()));
    }
    table.push((s(&["10", "1000000000001"]), PERIOD_MS.into()));
    for bad in NOT_DECIMAL_INTEGERS.iter().chain(&["1000000000000001"]) {
        table.push((s(&["10", SLOW, "COST", bad]), COST.into()));
    }
    let options: &[(&[&str], String)] = &[
        (&["FOO"], unknown("FOO")),
        (&["BURSTS", "2"], unknown("BURSTS")),
        (&["1"], unknown("1")),
        (
            &["BURST"],
            format!("ERR option BURST needs a value: {}", &BURST[4..]),
        ),
        (
            &["PEEK", "burst"],
            format!("ERR option BURST needs a value: {}", &BURST[4..]),
        ),
        (&["BURST", "PEEK"], BURST.into()),
        (
            &["COST"],
            format!("ERR option COST needs a value: {}", &COST[4..]),
        ),
        (
            &["BURST", "1", "BURST", "1"],
            "ERR option BURST given more than once".into(),
        ),
        (
            &["BURST", "1", "burst", "2"],
            "ERR option BURST given more than once".into(),
        ),
        (
            &["COST", "1", "COST", "1"],
            "ERR option COST given more than once".into(),
        ),
        (
            &["PEEK", "PEEK"],
            "ERR option PEEK given more than once".into(),
        ),
        (&["BURST", "2", "PEEK", "EXTRA"], unknown("EXTRA")),
    ];
    for (opts, text) in options {
        let mut args = s(&["10", SLOW]);
        args.extend(s(opts));
        table.push((args, text.clone()));
    }
    // Arguments are checked in order: the first bad one is reported.
    table.push((s(&["0", "0", "BURST", "0"]), LIMIT.into()));
    table.push((s(&["10", "0", "BURST", "0"]), PERIOD_MS.into()));
    table.push((s(&["10", "10", "BURST", "0", "FOO"]), BURST.into()));
    for (args, text) in &table {
        for key in ["k", "missing"] {
            let mut full = vec!["RL.GCRA", key];
            full.extend(args.iter().map(String::as_str));
            refused_untouched(&mut c, &full, text);
        }
    }
    let arity = "ERR wrong number of arguments for 'RL.GCRA' command";
    assert_eq!(error(&mut c, &["RL.GCRA"]), arity);
    for args in [&["RL.GCRA", "k"][..], &["rl.gcra", "k", "10"]] {
        refused_untouched(&mut c, args, arity);
    }
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_changes_since_last_save"),
        dirty
    );
    // The edges of every range are accepted, options in any order and case.
    for params in [
        &["1", "1", "BURST", "1", "PEEK"][..],
        &[
            "1000000000000000",
            "1000000000000",
            "BURST",
            "1000000000000000",
            "PEEK",
        ],
        &["10", SLOW, "peek", "cost", "1000000000000000", "burst", "3"],
        &["10", SLOW, "COST", "0"],
    ] {
        assert_eq!(gcra(&mut c, "edge", params).len(), 5, "{params:?}");
    }
}

#[test]
fn thirty_two_clients_admit_exactly_the_burst() {
    for (params, budget) in [
        (&["500", "1000000000000"][..], 500),
        (&["1", "1000000000", "BURST", "300"], 300),
    ] {
        let server = Server::start();
        let replies = hammer_with(&server, 32, |_, c| {
            let mut seen = Vec::new();
            loop {
                let r = gcra(c, "k", params);
                let allowed = r[0] == 1;
                seen.push(r);
                if !allowed {
                    return seen;
                }
            }
        });
        let mut remaining: Vec<i64> = replies.iter().filter(|r| r[0] == 1).map(|r| r[2]).collect();
        remaining.sort_unstable();
        assert_eq!(remaining, (0..budget).collect::<Vec<_>>(), "{params:?}");
        assert!(replies
            .iter()
            .filter(|r| r[0] == 0)
            .all(|r| r[..3] == [0, budget, 0] && r[3] > 0));
    }
}
