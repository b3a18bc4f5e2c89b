//! RL.TOKENBUCKET against a real server: every reply field, PEEK, COST, the seed's tiers,
//! TTL and expiry, waiting `retry_after_ms` (the key as a plain string: `conformance.rs`).
//!
//! Exact figures come from fresh keys (a missing key is a full bucket, whatever the time) or
//! from buckets that refill too slowly to gain a whole token during a test
//! (`refill_ms` = 10^9); time-dependent fields are checked against the server's own clock
//! (`TIME` before and after the call), never against the test's timing.

use redis_rl_testkit::conformance::{fresh_cases, waiting_retry_after_is_enough};
use redis_rl_testkit::*;
use std::time::Duration;

/// A refill period so long (about 11.6 days per refill) that no whole token accrues while
/// a test runs.
const SLOW: &str = "1000000000";

/// Changes since the last save: a call that writes nothing leaves it as it was.
const DIRTY: &str = "rdb_changes_since_last_save";

fn tb(conn: &mut redis::Connection, key: &str, params: &[&str]) -> Vec<i64> {
    call_on(conn, "RL.TOKENBUCKET", key, params)
}

#[test]
fn a_fresh_bucket_replies_every_field_exactly() {
    let server = Server::start();
    let mut c = server.client();
    // (params, reply, key written). A missing key is a full bucket at any instant, so every
    // field is exact, including reset_after_ms (rounded up to whole milliseconds).
    let cases: &[(&[&str], [i64; 5], bool)] = &[
        (&["10", "10", "1000"], [1, 10, 9, 0, 100], true),
        (
            &["10", "10", "1000", "COST", "10"],
            [1, 10, 0, 0, 1000],
            true,
        ),
        (&["10", "10", "1000", "COST", "0"], [1, 10, 10, 0, 0], false),
        (
            &["10", "10", "1000", "COST", "11"],
            [0, 10, 10, -1, 0],
            false,
        ),
        (&["10", "10", "1000", "PEEK"], [1, 10, 9, 0, 100], false),
        (
            &["10", "10", "1000", "COST", "11", "PEEK"],
            [0, 10, 10, -1, 0],
            false,
        ),
        // 3 tokens per second: one token takes 333.33 ms, reported as 334.
        (&["10", "3", "1000"], [1, 10, 9, 0, 334], true),
        (&["1", "1", "1"], [1, 1, 0, 0, 1], true),
        // The seed's tiers.
        (&["100", "100", "60000"], [1, 100, 99, 0, 600], true),
        (&["1000", "1000", "60000"], [1, 1000, 999, 0, 60], true),
        (
            &["10000", "10000", "60000", "COST", "10000"],
            [1, 10000, 0, 0, 60000],
            true,
        ),
        // The largest parameters.
        (
            &[
                "1000000000000000",
                "1000000000000000",
                "1000000000000",
                "COST",
                "1000000000000000",
            ],
            [1, 1_000_000_000_000_000, 0, 0, 1_000_000_000_000],
            true,
        ),
    ];
    fresh_cases(&mut c, "RL.TOKENBUCKET", cases);
}

/// A bucket of 10 refilled by one token every 10^8 ms, then `extra`.
fn slow_bucket(extra: &[&'static str]) -> Vec<&'static str> {
    [&["10", "10", SLOW][..], extra].concat()
}

#[test]
fn a_used_bucket_reports_remaining_retry_after_and_reset_after() {
    let server = Server::start();
    let mut c = server.client();
    let p = slow_bucket;
    // One token every 10^8 ms: nothing whole accrues during the test, so the counts are exact.
    assert_eq!(
        tb(&mut c, "k", &p(&["COST", "3"])),
        [1, 10, 7, 0, 300_000_000]
    );
    let r = tb(&mut c, "k", &p(&["COST", "4"]));
    assert_eq!(r[..4], [1, 10, 3, 0]);
    assert!(r[4] <= 700_000_000 && r[4] > 700_000_000 - 60_000, "{r:?}");

    // Denied: nothing taken, nothing written; waits are measured from the same level, so
    // reset_after - retry_after is exactly the time to refill the other tokens.
    let before = frozen(&mut c, "k");
    let denied = tb(&mut c, "k", &p(&["COST", "4"]));
    assert_eq!(denied[..3], [0, 10, 3]);
    let (retry, reset) = (denied[3], denied[4]);
    assert!(
        retry <= 100_000_000 && retry > 100_000_000 - 60_000,
        "{denied:?}"
    );
    assert_eq!(reset - retry, 600_000_000, "{denied:?}");
    assert_eq!(frozen(&mut c, "k"), before, "a denied call writes nothing");

    // Never: more than the capacity.
    let never = tb(&mut c, "k", &p(&["COST", "11"]));
    assert_eq!(never[..4], [0, 10, 3, -1]);
    assert!(never[4] <= reset, "{never:?}");
    assert_eq!(
        frozen(&mut c, "k"),
        before,
        "an impossible call writes nothing"
    );

    // COST 0: allowed, reports the level, takes and writes nothing.
    let check = tb(&mut c, "k", &p(&["COST", "0"]));
    assert_eq!(check[..4], [1, 10, 3, 0]);
    assert_eq!(frozen(&mut c, "k"), before, "COST 0 writes nothing");

    // The last three tokens, then an empty bucket.
    let r = tb(&mut c, "k", &p(&["COST", "3"]));
    assert_eq!(r[..4], [1, 10, 0, 0]);
    let empty = tb(&mut c, "k", &p(&[]));
    assert_eq!(empty[..3], [0, 10, 0]);
    assert_eq!(empty[4] - empty[3], 900_000_000, "{empty:?}");
}

#[test]
fn peek_replies_like_the_real_call_and_writes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    let p = slow_bucket;
    // On a missing key: the reply of a first call, and still no key.
    assert_eq!(
        tb(&mut c, "k", &p(&["PEEK", "COST", "4"])),
        [1, 10, 6, 0, 400_000_000]
    );
    assert!(!exists(&mut c, "k"));

    assert_eq!(
        tb(&mut c, "k", &p(&["COST", "4"])),
        [1, 10, 6, 0, 400_000_000]
    );
    for cost in ["2", "6", "7", "11", "0"] {
        let before = frozen(&mut c, "k");
        let peeked = tb(&mut c, "k", &p(&["COST", cost, "PEEK"]));
        assert_eq!(frozen(&mut c, "k"), before, "PEEK COST {cost} wrote");
        // The real call, just after: the same answer (the waits can only have shrunk).
        let real = tb(&mut c, "k", &p(&["COST", cost]));
        assert_peek_then_real(&peeked, &real, &format!("PEEK COST {cost}"));
        if real[0] == 1 {
            // Put the tokens back for the next case: a fresh key with the same level.
            query::<()>(&mut c, &["DEL", "k"]);
            tb(&mut c, "k", &p(&["COST", "4"]));
        }
    }
}

#[test]
fn calls_that_take_nothing_leave_the_dataset_clean() {
    let server = Server::start();
    let mut c = server.client();
    tb(&mut c, "k", &["2", "2", SLOW, "COST", "2"]);
    let before = info_field(&mut c, "persistence", DIRTY);
    for params in [
        &["2", "2", SLOW][..],                  // denied
        &["2", "2", SLOW, "COST", "3"],         // never
        &["2", "2", SLOW, "COST", "0"],         // a check
        &["2", "2", SLOW, "PEEK"],              // PEEK on a key
        &["2", "2", SLOW, "COST", "1", "PEEK"], // PEEK on a key
    ] {
        tb(&mut c, "k", params);
        tb(&mut c, "missing", &["2", "2", SLOW, "PEEK"]);
        tb(&mut c, "missing", &["2", "2", SLOW, "COST", "0"]);
        tb(&mut c, "missing", &["2", "2", SLOW, "COST", "3"]);
    }
    assert_eq!(info_field(&mut c, "persistence", DIRTY), before);
    assert_eq!(query::<i64>(&mut c, &["DBSIZE"]), 1);
}

/// Runs `calls` (argument lists after the key) in one MULTI on `key`.
fn multi(c: &mut redis::Connection, key: &str, calls: &[Vec<&str>]) -> Vec<Vec<i64>> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for args in calls {
        pipe.cmd("RL.TOKENBUCKET").arg(key).arg(args);
    }
    pipe.query(c).expect("burst")
}

/// The replies of `calls` run in one MULTI on a fresh key, from a run during which no token
/// accrued: `probe`, a denied call of the run, reports a reset_after of more than
/// `60000 - ms_per_token`, i.e. less than a token's time had passed since the first call.
/// A slower run (a stalled machine) is retried on another key.
fn burst(
    c: &mut redis::Connection,
    calls: &[Vec<&str>],
    probe: usize,
    ms_per_token: i64,
) -> Vec<Vec<i64>> {
    for attempt in 0..5 {
        let replies = multi(c, &format!("api:{ms_per_token}:{attempt}"), calls);
        let r = &replies[probe];
        if r[0] == 0 && r[4] > 60_000 - ms_per_token {
            return replies;
        }
    }
    panic!("no burst ran in under {ms_per_token} ms (or it admitted too much)");
}

#[test]
fn seed_tiers_admit_exactly_their_burst() {
    let server = Server::start();
    let mut c = server.client();
    for (capacity, ms_per_token) in [(100i64, 600i64), (1000, 60)] {
        let cap = capacity.to_string();
        let call = vec![cap.as_str(), &cap, "60000"];
        let n = capacity as usize;
        let replies = burst(&mut c, &vec![call; n + 1], n, ms_per_token);
        let (admitted, denied) = replies.split_at(n);
        for (i, r) in admitted.iter().enumerate() {
            assert_eq!(
                r[..4],
                [1, capacity, capacity - 1 - i as i64, 0],
                "call {i}"
            );
        }
        let last = &denied[0];
        assert_eq!(last[..3], [0, capacity, 0], "call {capacity}");
        assert!(
            (1..=ms_per_token).contains(&last[3]),
            "retry_after {last:?}"
        );
        assert!(last[4] <= 60_000, "{last:?}");
    }
    // Enterprise: 10001 calls take longer than a token (6 ms) even in one MULTI, so the
    // burst admits the 10000 tokens plus at most those that accrued meanwhile.
    let call = vec!["10000", "10000", "60000"];
    let t0 = server_time_us(&mut c);
    let replies = multi(&mut c, "api:e", &vec![call; 10001]);
    let took_us = server_time_us(&mut c) - t0;
    assert!(replies[..10000].iter().all(|r| r[0] == 1));
    let admitted = replies.iter().filter(|r| r[0] == 1).count() as u64;
    assert!(
        admitted <= 10000 + took_us / 6000,
        "{admitted} in {took_us} µs"
    );

    // Enterprise with COST: all 10000 at once, then nothing, and never more than 10000.
    let p = ["10000", "10000", "60000"];
    let replies = burst(
        &mut c,
        &[
            [&p[..], &["COST", "10000"]].concat(),
            [&p[..], &["PEEK"]].concat(),
            [&p[..], &["COST", "10001"]].concat(),
        ],
        1,
        6,
    );
    assert_eq!(replies[0], [1, 10000, 0, 0, 60000]);
    assert_eq!(replies[1][..3], [0, 10000, 0]);
    assert!((1..=6).contains(&replies[1][3]), "{replies:?}");
    assert_eq!(replies[2][..4], [0, 10000, 0, -1]);
}

#[test]
fn a_written_key_expires_reset_after_plus_one_second_after_the_call() {
    let server = Server::start();
    let mut c = server.client();
    for (i, params) in [
        &["10", "10", "1000"][..],
        &["10", "10", "1000", "COST", "10"],
        &["100", "100", "60000", "COST", "7"],
        &["5", "1", SLOW, "COST", "2"],
    ]
    .iter()
    .enumerate()
    {
        let key = format!("k{i}");
        let t0 = server_time_us(&mut c);
        let r = tb(&mut c, &key, params);
        let t1 = server_time_us(&mut c);
        let reset = r[4];
        // Expiry = the call's instant (rounded up to ms) + reset_after + 1000 ms of slack.
        let (_, expire_at) = frozen(&mut c, &key);
        let call_ms = expire_at - reset - 1000;
        let (lo, hi) = (t0.div_ceil(1000) as i64, t1.div_ceil(1000) as i64);
        assert!(
            (lo..=hi).contains(&call_ms),
            "{params:?}: expiry {expire_at}, reset {reset}, call between {lo} and {hi}"
        );
        assert_pttl_after_call(&mut c, &key, reset, t0);
    }
    // A write that moves the idle instant by more than half the slack moves the expiry (a
    // smaller move may keep it: see store_paths.rs).
    let (_, first) = frozen(&mut c, "k0");
    tb(&mut c, "k0", &["10", "10", "1000", "COST", "9"]);
    let (_, second) = frozen(&mut c, "k0");
    assert!(second > first, "{first} -> {second}");
}

#[test]
fn a_key_that_expired_is_the_idle_state() {
    let server = Server::start();
    let mut c = server.client();
    let params = ["5", "5", "50"];
    let first = tb(&mut c, "k", &[&params[..], &["COST", "5"]].concat());
    assert_eq!(first, [1, 5, 0, 0, 50]);
    wait_until("the key to expire", Duration::from_secs(10), || {
        !exists(&mut c, "k")
    });
    assert_eq!(
        tb(&mut c, "k", &[&params[..], &["COST", "0"]].concat()),
        [1, 5, 5, 0, 0]
    );
    assert_eq!(
        tb(&mut c, "k", &[&params[..], &["COST", "5"]].concat()),
        first
    );
}

#[test]
fn waiting_retry_after_suffices() {
    let server = Server::start();
    let mut c = server.client();
    // (capacity, refill_tokens, refill_ms, cost): a token every 30 ms, every 33.3 ms, every 5 ms.
    let cases = [
        ("3", "1", "30", "1"),
        ("3", "1", "30", "3"),
        ("6", "3", "100", "2"),
        ("20", "1", "5", "7"),
    ];
    for (i, (capacity, refill, ms, cost)) in cases.into_iter().enumerate() {
        let fill = ["RL.TOKENBUCKET", capacity, refill, ms, "COST", capacity];
        let ask = ["RL.TOKENBUCKET", capacity, refill, ms, "COST", cost];
        waiting_retry_after_is_enough(&mut c, &format!("k{i}"), &fill, &ask);
    }
}

#[test]
fn changed_parameters_keep_the_tokens_and_clamp_to_the_new_capacity() {
    let server = Server::start();
    let mut c = server.client();
    tb(&mut c, "k", &["100", "100", SLOW, "COST", "10"]);
    let check = |c: &mut redis::Connection, params: &[&str]| {
        tb(c, "k", &[params, &["COST", "0"]].concat())[..3].to_vec()
    };
    // Lowering the capacity takes effect at once; raising it gives no tokens.
    assert_eq!(check(&mut c, &["50", "100", SLOW]), [1, 50, 50]);
    assert_eq!(check(&mut c, &["200", "100", SLOW]), [1, 200, 90]);
    // Another refill period keeps the number of tokens.
    assert_eq!(check(&mut c, &["100", "100", "2000000000"]), [1, 100, 90]);
    assert_eq!(check(&mut c, &["100", "7", SLOW]), [1, 100, 90]);
    // A write with the lower capacity stores the clamped level.
    assert_eq!(tb(&mut c, "k", &["50", "50", SLOW])[..3], [1, 50, 49]);
    assert_eq!(check(&mut c, &["100", "100", SLOW]), [1, 100, 49]);
}
