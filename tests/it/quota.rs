//! RL.QUOTA: a quota per calendar period. The period boundaries come from the server's
//! clock and the core's calendar (property-tested against chrono there); here: the reply,
//! the stored period, `retry_after_ms` until the next period, the anchor day's range, the
//! QUOTA spec in RL.ALL and RL.REFUND, FORCE (bad arguments: `conformance.rs`).

use redis_rl_core::calendar::{Calendar, Period};
use redis_rl_testkit::*;

/// The period of `cal` that contains the server's `now_us`, in milliseconds.
fn bounds(cal: Calendar, now_us: u64) -> (u64, u64) {
    let (start, end) = cal.bounds((now_us / 1000) as i64);
    (start as u64, end as u64)
}

fn state_fields(c: &mut redis::Connection, key: &str) -> Vec<(String, i64)> {
    let v: Vec<redis::Value> = query(c, &["RL.STATE", key]);
    v.chunks(2)
        .filter_map(|pair| match pair {
            [redis::Value::BulkString(k), redis::Value::Int(n)] => {
                Some((String::from_utf8_lossy(k).into_owned(), *n))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_monthly_quota_counts_in_its_calendar_period_and_waits_for_the_next() {
    let server = Server::start();
    let mut c = server.client();
    let args = ["RL.QUOTA", "q", "5", "MONTH", "TZ", "330", "ANCHOR", "31"];
    let cal = Calendar::new(Period::Month, 330, 31).unwrap();
    let before = server_time_us(&mut c);
    let first = ints(&mut c, &[&args[..], &["COST", "3"]].concat());
    let after = server_time_us(&mut c);
    let (start, end) = bounds(cal, before);
    // The test does not straddle a period boundary (they are a month apart).
    assert_eq!(bounds(cal, after), (start, end));
    assert_eq!(&first[..3], &[1, 5, 2]);
    assert_eq!(first[3], 0);
    let reset = first[4] as u64;
    assert!(
        (end - after / 1000..=end - before / 1000 + 1).contains(&reset),
        "{first:?}"
    );
    let state = state_fields(&mut c, "q");
    assert_eq!(state[0].0, "period_start_ms");
    assert_eq!(state[0].1 as u64, start);
    assert_eq!(state[1], ("period_end_ms".to_string(), end as i64));
    assert_eq!(state[2], ("count".to_string(), 3));
    // Full: refused until the next period starts, nothing written.
    ints(&mut c, &[&args[..], &["COST", "2"]].concat());
    let key_before = frozen(&mut c, "q");
    let denied = ints(&mut c, &args);
    assert_eq!(&denied[..3], &[0, 5, 0]);
    assert_eq!(denied[3], denied[4], "retry_after is the period's end");
    assert!(denied[3] as u64 <= end - after / 1000 + 1);
    assert_eq!(frozen(&mut c, "q"), key_before);
    // More than the limit is never possible; UPTO grants nothing; lowercase words work.
    assert_eq!(
        ints(&mut c, &["RL.QUOTA", "n", "5", "month", "COST", "6"])[3],
        -1
    );
    let upto = ints(
        &mut c,
        &[
            "RL.QUOTA", "q", "5", "Month", "TZ", "330", "ANCHOR", "31", "COST", "9", "UPTO",
        ],
    );
    assert_eq!((upto[0], upto[5]), (0, 0));
}

#[test]
fn days_weeks_and_years_at_negative_offsets() {
    let server = Server::start();
    let mut c = server.client();
    for (word, period) in [
        ("DAY", Period::Day),
        ("WEEK", Period::Week),
        ("YEAR", Period::Year),
    ] {
        let key = format!("q:{word}");
        let before = server_time_us(&mut c);
        let reply = ints(
            &mut c,
            &["RL.QUOTA", &key, "1", word, "TZ", "-300", "COST", "1"],
        );
        let after = server_time_us(&mut c);
        let cal = Calendar::new(period, -300, 1).unwrap();
        let (start, end) = bounds(cal, before);
        if bounds(cal, after) != (start, end) {
            continue; // crossed midnight at UTC-5 during the call: nothing to compare
        }
        assert_eq!(&reply[..3], &[1, 1, 0], "{word}");
        let state = state_fields(&mut c, &key);
        assert_eq!(
            (state[0].1 as u64, state[1].1 as u64),
            (start, end),
            "{word}"
        );
        let denied = ints(&mut c, &["RL.QUOTA", &key, "1", word, "TZ", "-300"]);
        assert_eq!(denied[0], 0, "{word}");
        assert!(
            denied[3] as u64 <= end - after / 1000 + 1,
            "{word}: {denied:?}"
        );
        assert!(
            denied[3] as u64 + 1 >= end.saturating_sub(server_time_us(&mut c) / 1000),
            "{word}"
        );
        // The key expires about when the period ends (plus the TTL slack).
        let pttl: i64 = query(&mut c, &["PTTL", &key]);
        assert!(
            pttl as u64 >= end - server_time_us(&mut c) / 1000,
            "{word}: {pttl}"
        );
    }
}

/// The anchor day's range depends on the period: any day of a month, only 1 otherwise
/// (the ranges, options and refusals every command shares are in `conformance.rs`).
#[test]
fn the_anchor_day_is_for_months_only() {
    let server = Server::start();
    let mut c = server.client();
    ints(&mut c, &["RL.QUOTA", "q", "10", "MONTH", "COST", "2"]);
    let other = "ERR anchor (for a period other than MONTH) must be an integer between 1 and 1";
    for key in ["q", "missing"] {
        for period in ["DAY", "WEEK", "YEAR"] {
            refused_untouched(
                &mut c,
                &["RL.QUOTA", key, "10", period, "ANCHOR", "15"],
                other,
            );
        }
    }
    for rest in [
        &["1", "MONTH", "ANCHOR", "31", "TZ", "0"][..],
        &["1", "MONTH", "ANCHOR", "1", "PEEK"],
        &["1", "WEEK", "ANCHOR", "1", "COST", "0"],
    ] {
        let mut args = vec!["RL.QUOTA", "edge"];
        args.extend_from_slice(rest);
        assert_eq!(ints(&mut c, &args).len(), 5, "{args:?}");
        let _: i64 = query(&mut c, &["DEL", "edge"]);
    }
}

/// A monthly quota of 10 from the 15th, at UTC-5, as an RL.ALL and RL.REFUND spec.
const PLAN: [&str; 7] = ["QUOTA", "10", "MONTH", "ANCHOR", "15", "TZ", "-300"];

#[test]
fn quota_specs_in_rl_all_and_rl_refund() {
    let server = Server::start();
    let mut c = server.client();
    let all = |c: &mut redis::Connection, rest: &[&str]| -> Vec<redis::Value> {
        let bucket = ["TOKENBUCKET", "100", "1", "1000000000"];
        let args = [&["RL.ALL", "2", "plan", "burst"][..], &PLAN, &bucket, rest].concat();
        query(c, &args)
    };
    let allowed = |v: &[redis::Value]| v.first() == Some(&redis::Value::Int(1));
    assert!(allowed(&all(&mut c, &["COST", "6"])));
    assert!(
        !allowed(&all(&mut c, &["COST", "6"])),
        "the quota has 4 left"
    );
    assert!(allowed(&all(&mut c, &["COST", "4"])));
    // A refund gives units of the current period back.
    let refund = call_on(
        &mut c,
        "RL.REFUND",
        "plan",
        &[&PLAN[..], &["COST", "3"]].concat(),
    );
    assert_eq!(&refund[..3], &[3, 10, 3]);
    // FORCE takes the cost on both, over the quota.
    assert!(allowed(&all(&mut c, &["COST", "8", "FORCE"])));
    let peek = ints(
        &mut c,
        &[
            "RL.QUOTA", "plan", "10", "MONTH", "ANCHOR", "15", "TZ", "-300", "COST", "0",
        ],
    );
    assert_eq!(
        &peek[..3],
        &[0, 10, 0],
        "over the quota: even a look waits for the next period"
    );
    assert_eq!(
        ints(
            &mut c,
            &[
                "RL.TOKENBUCKET",
                "burst",
                "100",
                "1",
                "1000000000",
                "COST",
                "0"
            ]
        )[2],
        82
    );
    assert_eq!(
        error(&mut c, &["RL.ALL", "1", "x", "QUOTA", "10", "MONTHLY"]),
        "ERR spec 1: period must be DAY, WEEK, MONTH or YEAR"
    );
    assert_eq!(
        error(
            &mut c,
            &["RL.ALL", "1", "x", "QUOTA", "10", "DAY", "TZ", "720", "ANCHOR", "2"]
        ),
        "ERR spec 1: anchor (for a period other than MONTH) must be an integer between 1 and 1"
    );
    assert_eq!(
        error(&mut c, &["RL.ALL", "1", "x", "NOSUCH", "10"]),
        "ERR spec 1: unknown algorithm 'NOSUCH', expected TOKENBUCKET, SLIDING, FIXED, GCRA, LOG or QUOTA"
    );
}
