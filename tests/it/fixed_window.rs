//! RL.FIXED against a real server: every reply field, PEEK, COST, TTL and expiry, waiting
//! `retry_after_ms`, the 2x boundary burst with numbers (what every command shares, such as
//! the bad-input table and the refusal of other keys, is in `conformance.rs`).
//!
//! Exact figures come from windows of 10^12 ms (the current one ends in 2033, so no window
//! ends during a test); the time-dependent `reset_after_ms` is checked against the server's
//! own clock (`TIME` before and after the call).

use redis_rl_testkit::*;
use std::time::Duration;

fn fixed(c: &mut redis::Connection, key: &str, params: &[&str]) -> Vec<i64> {
    call_on(c, "RL.FIXED", key, params)
}

/// Runs `f` and returns its result with the range of `end_ms - now_ms` over the call, by
/// the server's clock: the `reset_after_ms` a call made then reports for a window ending
/// at `end_ms`.
fn timed<T>(
    c: &mut redis::Connection,
    end_ms: u64,
    f: impl FnOnce(&mut redis::Connection) -> T,
) -> (T, std::ops::RangeInclusive<i64>) {
    let before = server_time_us(c);
    let out = f(c);
    let after = server_time_us(c);
    let until = |us: u64| (end_ms * 1000 - us).div_ceil(1000) as i64;
    (out, until(after)..=until(before))
}

fn long_window_end(c: &mut redis::Connection) -> u64 {
    (server_time_us(c) / 1000 / LONGEST_MS + 1) * LONGEST_MS
}

#[test]
fn a_fresh_key_replies_every_field() {
    let server = Server::start();
    let mut c = server.client();
    let end = long_window_end(&mut c);
    // (params, reply without reset_after, reset_after is "until the window ends", written)
    let cases: &[(&[&str], [i64; 4], bool, bool)] = &[
        (&["10", LONGEST], [1, 10, 9, 0], true, true),
        (&["10", LONGEST, "COST", "10"], [1, 10, 0, 0], true, true),
        (&["10", LONGEST, "COST", "0"], [1, 10, 10, 0], false, false),
        (
            &["10", LONGEST, "COST", "11"],
            [0, 10, 10, -1],
            false,
            false,
        ),
        (&["10", LONGEST, "PEEK"], [1, 10, 9, 0], true, false),
        (
            &["10", LONGEST, "COST", "11", "PEEK"],
            [0, 10, 10, -1],
            false,
            false,
        ),
        (
            &["1000000000000000", LONGEST, "COST", "1000000000000000"],
            [1, 1_000_000_000_000_000, 0, 0],
            true,
            true,
        ),
    ];
    for (i, (params, reply, counts, written)) in cases.iter().enumerate() {
        let key = format!("fresh:{i}");
        let (r, until_end) = timed(&mut c, end, |c| fixed(c, &key, params));
        assert_eq!(r[..4], reply[..], "{params:?}");
        if *counts {
            assert!(until_end.contains(&r[4]), "{params:?}: {r:?} {until_end:?}");
        } else {
            assert_eq!(r[4], 0, "{params:?}");
        }
        assert_eq!(exists(&mut c, &key), *written, "{params:?} key written");
    }
}

#[test]
fn a_full_window_denies_until_the_next_one_and_writes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    let end = long_window_end(&mut c);
    assert_eq!(
        fixed(&mut c, "k", &["10", LONGEST, "COST", "7"])[..4],
        [1, 10, 3, 0]
    );
    assert_eq!(
        fixed(&mut c, "k", &["10", LONGEST, "COST", "3"])[..4],
        [1, 10, 0, 0]
    );
    let before = frozen(&mut c, "k");
    // Denied: the wait is until the window ends, which is also when it resets.
    let (denied, until_end) = timed(&mut c, end, |c| fixed(c, "k", &["10", LONGEST]));
    assert_eq!(denied[..3], [0, 10, 0]);
    assert!(until_end.contains(&denied[3]), "{denied:?}");
    assert_eq!(denied[3], denied[4], "{denied:?}");
    // Never, a check, a PEEK: replies, but nothing written.
    assert_eq!(
        fixed(&mut c, "k", &["10", LONGEST, "COST", "11"])[..4],
        [0, 10, 0, -1]
    );
    assert_eq!(
        fixed(&mut c, "k", &["10", LONGEST, "COST", "0"])[..4],
        [1, 10, 0, 0]
    );
    assert_eq!(
        fixed(&mut c, "k", &["10", LONGEST, "PEEK"])[..3],
        [0, 10, 0]
    );
    assert_eq!(
        frozen(&mut c, "k"),
        before,
        "a call that takes nothing wrote"
    );
    // A higher limit applies to the same count at once.
    assert_eq!(
        fixed(&mut c, "k", &["12", LONGEST, "COST", "2"])[..4],
        [1, 12, 0, 0]
    );
}

#[test]
fn the_key_expires_when_its_window_ends_plus_one_second() {
    let server = Server::start();
    let mut c = server.client();
    let end = long_window_end(&mut c);
    fixed(&mut c, "k", &["10", LONGEST]);
    // The expiry is absolute: the window's end (rounded up by at most 1 ms) plus 1 s slack.
    let (_, expiry) = frozen(&mut c, "k");
    let slack_end = (end + 1000) as i64;
    assert!(
        expiry == slack_end || expiry == slack_end + 1,
        "{expiry} vs {slack_end}"
    );
    assert_eq!(query::<String>(&mut c, &["TYPE", "k"]), "string");
    let value: Vec<u8> = query(&mut c, &["GET", "k"]);
    assert!(value.len() <= 30, "{value:?}");
    assert_eq!(&value[..5], b"\0RL\x02F");

    // A 50 ms window: the key is gone about a second after the window ends.
    let t0 = server_time_us(&mut c);
    let r = fixed(&mut c, "short", &["10", "50"]);
    assert!((1..=50).contains(&r[4]), "{r:?}");
    assert_pttl_after_call(&mut c, "short", r[4], t0);
    wait_until("the key to expire", Duration::from_secs(10), || {
        !exists(&mut c, "short")
    });
}

/// The fixed window's known weakness, with numbers: `limit` units just before a window
/// ends and `limit` more just after it begins are all admitted.
#[test]
fn the_boundary_burst_admits_twice_the_limit() {
    let server = Server::start();
    let mut c = server.client();
    let (limit, window) = ("100", "1000");
    for attempt in 0..20 {
        let key = format!("burst:{attempt}");
        // Sleep (asking PEEK, which writes nothing, how long the window has left) until
        // the last 20 ms of a window; a machine that oversleeps just tries the next one.
        let mut left = fixed(&mut c, &key, &[limit, window, "PEEK"])[4];
        if left > 20 {
            std::thread::sleep(Duration::from_millis(left as u64 - 15));
            left = fixed(&mut c, &key, &[limit, window, "PEEK"])[4];
        }
        if left > 20 {
            continue;
        }
        let t0 = server_time_us(&mut c);
        let first = fixed(&mut c, &key, &[limit, window, "COST", limit]);
        if first[4] > 20 {
            continue; // the window turned between the PEEK and the call: try again
        }
        assert_eq!(first[..3], [1, 100, 0]);
        std::thread::sleep(Duration::from_millis(first[4] as u64));
        // The full limit in the next window, then one more call: in one MULTI, so both run
        // in the same window however slow the machine.
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.add_command(command(&["RL.FIXED", &key, limit, window, "COST", limit]));
        pipe.add_command(command(&["RL.FIXED", &key, limit, window]));
        let (second, third): (Vec<i64>, Vec<i64>) = pipe.query(&mut c).expect("MULTI");
        let t1 = server_time_us(&mut c);
        assert_eq!(
            second[..3],
            [1, 100, 0],
            "the next window admits a full limit"
        );
        // ... and then it is full.
        assert_eq!(third[..3], [0, 100, 0]);
        println!(
            "RL.FIXED {key} {limit} {window}: 100 units {} ms before a window ended, \
             100 more after it: 200 admitted within {:.1} ms (server clock)",
            first[4],
            (t1 - t0) as f64 / 1000.0
        );
        return;
    }
    panic!("never caught the end of a window");
}
