//! The create path (the first call on a missing key, which makes an exact-size raw string)
//! pinned to the update path (a call on a live key, which writes into the value in place):
//! the same reply, the same stored bytes, the same absolute expiry, and a replica holding the
//! same, for every fixed-size limiter and for RL.ALL's keys.
//!
//! The live key is brought to the state a missing key stands for by RL.REFUND (a window
//! limiter back to a count of 0 in the same window, a bucket back to full, a GCRA's arrival
//! time back to now). Window limiters' states are aligned to the window, so they must match to
//! the byte, and so must their idle instants; their expiries follow the one rule of every write
//! (see [`assert_window_expiry`]). A token bucket and a GCRA store the call's instant, so there
//! the values must have the same length and the replies and expiries agree within the time
//! between the two calls.

use redis_rl_testkit::*;
use std::time::Duration;

/// A window so long that the current one outlasts the test: [10^12, 2 x 10^12) ms.
const LONG: &str = "1000000000000";

struct Case {
    algorithm: &'static str,
    params: &'static [&'static str],
    /// The state holds the call's instant (not only the window's).
    timed: bool,
    /// A window limiter is idle at the end of this many windows from the current one's start
    /// (a sliding window's count still weighs through the next window); unused when `timed`.
    windows_to_idle: i64,
}

const CASES: [Case; 4] = [
    Case {
        algorithm: "FIXED",
        params: &["100", LONG],
        timed: false,
        windows_to_idle: 1,
    },
    Case {
        algorithm: "SLIDING",
        params: &["100", LONG],
        timed: false,
        windows_to_idle: 2,
    },
    Case {
        algorithm: "TOKENBUCKET",
        params: &["100", "100", "3600000"],
        timed: true,
        windows_to_idle: 0,
    },
    Case {
        algorithm: "GCRA",
        params: &["100", "3600000", "BURST", "100"],
        timed: true,
        windows_to_idle: 0,
    },
];

fn call(c: &mut redis::Connection, case: &Case, key: &str) -> Vec<i64> {
    let command = format!("RL.{}", case.algorithm);
    let mut args = vec![command.as_str(), key];
    args.extend_from_slice(case.params);
    ints(c, &args)
}

fn refund(c: &mut redis::Connection, case: &Case, key: &str) {
    let mut args = vec!["RL.REFUND", key, case.algorithm];
    args.extend_from_slice(case.params);
    args.extend_from_slice(&["COST", "1"]);
    assert_eq!(ints(c, &args)[0], 1, "{args:?}");
}

fn stored(c: &mut redis::Connection, key: &str) -> (Vec<u8>, i64) {
    (query(c, &["GET", key]), query(c, &["PEXPIRETIME", key]))
}

/// The `rl.ttl-slack-ms` the servers run with (the default).
const SLACK_MS: i64 = 1000;

/// A window limiter's key expires by the rule of every write: the call's instant rounded up
/// to a millisecond, plus `reset_after_ms` (the time to the idle instant, rounded up), plus the
/// slack. A window limiter's idle instant is a whole millisecond, so that is the idle instant
/// plus the slack when the call falls on a whole millisecond (the server's clock has
/// microseconds) and 1 ms more otherwise. Two writes of the same window thus agree to the
/// millisecond except when one of the calls fell on a whole millisecond; the live key may
/// also keep the expiry its RL.REFUND set (Valkey keeps one within half the slack).
fn assert_window_expiry(expiry: i64, idle_ms: i64, what: &str) {
    assert!(
        expiry == idle_ms + SLACK_MS || expiry == idle_ms + SLACK_MS + 1,
        "{what}: expiry {expiry}, idle at {idle_ms}"
    );
}

/// Replies agree: every field but the time-dependent ones exactly; `reset_after_ms` (and a
/// timed state's expiry) within the time between the calls.
fn assert_same_reply(created: &[i64], updated: &[i64], apart_ms: i64, what: &str) {
    assert_eq!(created.len(), updated.len(), "{what}");
    assert_eq!(
        created[..4],
        updated[..4],
        "{what}: {created:?} vs {updated:?}"
    );
    assert!(
        (created[4] - updated[4]).abs() <= apart_ms,
        "{what}: reset {created:?} vs {updated:?}"
    );
}

#[test]
fn a_created_key_matches_an_updated_one() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let (mut m, mut r) = (master.client(), replica.client());
    for case in &CASES {
        let (live, fresh) = (
            format!("live:{}", case.algorithm),
            format!("fresh:{}", case.algorithm),
        );
        call(&mut m, case, &live);
        refund(&mut m, case, &live);
        assert_eq!(query::<i64>(&mut m, &["EXISTS", &fresh]), 0);
        let before = server_time_us(&mut m);
        let updated = call(&mut m, case, &live);
        let created = call(&mut m, case, &fresh);
        let apart_ms = ((server_time_us(&mut m) - before) / 1000 + 1) as i64;
        let window_ms: i64 = LONG.parse().expect("LONG");
        let before_ms = (before / 1000) as i64;
        let idle_ms = before_ms - before_ms % window_ms + case.windows_to_idle * window_ms;
        assert_same_reply(&created, &updated, apart_ms, case.algorithm);

        let (live_value, live_expiry) = stored(&mut m, &live);
        let (fresh_value, fresh_expiry) = stored(&mut m, &fresh);
        assert!(
            fresh_expiry > 0,
            "{}: the created key expires",
            case.algorithm
        );
        if case.timed {
            assert_eq!(fresh_value.len(), live_value.len(), "{}", case.algorithm);
            assert!(
                (fresh_expiry - live_expiry).abs() <= apart_ms,
                "{}: expiry {fresh_expiry} vs {live_expiry}",
                case.algorithm
            );
        } else {
            assert_eq!(fresh_value, live_value, "{}", case.algorithm);
            assert_window_expiry(
                fresh_expiry,
                idle_ms,
                &format!("{} created", case.algorithm),
            );
            assert_window_expiry(live_expiry, idle_ms, &format!("{} updated", case.algorithm));
        }

        // The replica holds what the master holds, for the created key as for the other.
        assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
        for key in [&live, &fresh] {
            let on_master = stored(&mut m, key);
            wait_until(
                "the replica to hold the master's value",
                Duration::from_secs(10),
                || stored(&mut r, key) == on_master,
            );
        }

        // The created key's first update reads it and writes in place like any other: the
        // same reply as the live key's next call, and a raw string from then on.
        let updated = call(&mut m, case, &live);
        let again = call(&mut m, case, &fresh);
        assert_same_reply(&again, &updated, apart_ms + 1000, case.algorithm);
        let encoding: String = query(&mut m, &["OBJECT", "ENCODING", &fresh]);
        assert_eq!(encoding, "raw", "{}", case.algorithm);
        if !case.timed {
            let ((fresh_value, fresh_expiry), (live_value, live_expiry)) =
                (stored(&mut m, &fresh), stored(&mut m, &live));
            assert_eq!(fresh_value, live_value, "{}", case.algorithm);
            assert_window_expiry(fresh_expiry, idle_ms, &format!("{} again", case.algorithm));
            assert_window_expiry(live_expiry, idle_ms, &format!("{} again", case.algorithm));
        }
    }
}

#[test]
fn keys_created_by_rl_all_match_updated_ones() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let (mut m, mut r) = (master.client(), replica.client());
    let all = |c: &mut redis::Connection, a: &str, b: &str| -> redis::Value {
        query(
            c,
            &[
                "RL.ALL", "2", a, b, "FIXED", "100", LONG, "SLIDING", "100", LONG,
            ],
        )
    };
    all(&mut m, "{l}a", "{l}b");
    for (key, algorithm) in [("{l}a", "FIXED"), ("{l}b", "SLIDING")] {
        let args = ["RL.REFUND", key, algorithm, "100", LONG, "COST", "1"];
        assert_eq!(ints(&mut m, &args)[0], 1, "{args:?}");
    }
    let before_ms = (server_time_us(&mut m) / 1000) as i64;
    all(&mut m, "{l}a", "{l}b");
    all(&mut m, "{f}a", "{f}b");
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    let window_ms: i64 = LONG.parse().expect("LONG");
    let start_ms = before_ms - before_ms % window_ms;
    for (live, fresh, windows_to_idle) in [("{l}a", "{f}a", 1), ("{l}b", "{f}b", 2)] {
        let created = stored(&mut m, fresh);
        let (live_value, live_expiry) = stored(&mut m, live);
        assert_eq!(created.0, live_value, "{fresh} vs {live}");
        let idle_ms = start_ms + windows_to_idle * window_ms;
        assert_window_expiry(created.1, idle_ms, fresh);
        assert_window_expiry(live_expiry, idle_ms, live);
        wait_until(
            "the replica to hold the master's value",
            Duration::from_secs(10),
            || stored(&mut r, fresh) == created,
        );
    }
}
