//! RL.GCRA against a real server: every reply field, BURST, PEEK, COST, TTL and expiry,
//! waiting `retry_after_ms`, and 32 clients within a BURST (what every command shares,
//! such as the bad-input table and the refusal of other keys, is in `conformance.rs`).
//!
//! Exact figures come from fresh keys (a missing key is an idle limiter, whatever the time)
//! or from rates so slow (10 per 10^12 ms: one unit every 10^11 ms) that nothing accrues
//! during a test.

use redis_rl_testkit::conformance::{clients_admit_exactly, fresh_cases};
use redis_rl_testkit::*;
use std::time::Duration;

/// With limit 10: one unit every 10^11 ms.
const SLOW: &str = "1000000000000";
const T: i64 = 100_000_000_000;

fn gcra(c: &mut redis::Connection, key: &str, params: &[&str]) -> Vec<i64> {
    call_on(c, "RL.GCRA", key, params)
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
    fresh_cases(&mut c, "RL.GCRA", cases);
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

/// The conformance suite's 32 clients with a BURST: the burst, not the rate, is what
/// passes at once.
#[test]
fn thirty_two_clients_admit_exactly_the_burst() {
    let args = |_: &str| -> Vec<String> {
        ["RL.GCRA", "k", "1", "1000000000", "BURST", "300"]
            .map(String::from)
            .to_vec()
    };
    clients_admit_exactly(args, 300);
}
