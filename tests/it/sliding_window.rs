//! RL.SLIDING against a real server: every reply field, the previous window's weight, PEEK,
//! COST, TTL and expiry, waiting `retry_after_ms` (the key as a plain string: `conformance.rs`).
//!
//! Windows are aligned to multiples of `window_ms` since the epoch. Most tests use the
//! largest window (10^12 ms: the current one runs from 2001 to 2033), so no window boundary
//! passes during a test, and check the time-dependent fields against the server's own clock
//! (`TIME` before and after the call).

use redis_rl_testkit::conformance::waiting_retry_after_is_enough;
use redis_rl_testkit::*;
use std::time::Duration;

fn sw(conn: &mut redis::Connection, key: &str, params: &[&str]) -> Vec<i64> {
    call_on(conn, "RL.SLIDING", key, params)
}

/// Runs one call and returns its reply with the server time (µs) just before and after it.
fn timed(conn: &mut redis::Connection, key: &str, params: &[&str]) -> (Vec<i64>, u128, u128) {
    let (reply, t0, t1) = timed_call(conn, "RL.SLIDING", key, params);
    assert_eq!(t0 / LONGEST_US, t1 / LONGEST_US, "a 30-year window ended");
    (reply, t0, t1)
}

/// Start of the wide window containing `t_us`, in µs.
fn wide_start_us(t_us: u128) -> u128 {
    t_us - t_us % LONGEST_US
}

/// The stored bytes of a sliding window as the module writes them (format version 2:
/// varints, the window as its index).
fn state_v2(window_ms: u64, start_ms: u64, previous: u64, current: u64) -> Vec<u8> {
    let mut v = b"\0RL\x02S".to_vec();
    for mut field in [window_ms, start_ms / window_ms, previous, current] {
        while field >= 0x80 {
            v.push((field & 0x7f) as u8 | 0x80);
            field >>= 7;
        }
        v.push(field as u8);
    }
    v
}

/// The stored bytes of a sliding window in format version 1 (still read).
fn state(window_ms: u64, start_ms: u64, previous: u64, current: u64) -> Vec<u8> {
    let mut v = b"\0RL\x01S".to_vec();
    for field in [window_ms, start_ms, previous, current] {
        v.extend_from_slice(&field.to_le_bytes());
    }
    v
}

#[test]
fn a_fresh_window_replies_every_field() {
    let server = Server::start();
    let mut c = server.client();
    // (params, allowed, remaining, retry_after, idle at the end of the next window?, written)
    type Case = (&'static [&'static str], i64, i64, i64, bool, bool);
    // (The whole limit, a zero cost, a cost above the limit and PEEKs on a fresh key:
    // `conformance.rs`.)
    let cases: &[Case] = &[
        (&["10", LONGEST], 1, 9, 0, true, true),
        (
            &["1000000000000000", LONGEST, "COST", "1000000000000000"],
            1,
            0,
            0,
            true,
            true,
        ),
    ];
    for (i, &(params, allowed, remaining, retry, busy, written)) in cases.iter().enumerate() {
        let key = format!("fresh:{i}");
        let (r, t0, t1) = timed(&mut c, &key, params);
        let limit: i64 = params[0].parse().unwrap();
        assert_eq!(r[..4], [allowed, limit, remaining, retry], "{params:?}");
        // Units taken now count until the end of the next window; nothing taken: idle now.
        if busy {
            let idle_at = wide_start_us(t0) + 2 * LONGEST_US;
            let range = ms_until(idle_at, t1)..=ms_until(idle_at, t0);
            assert!(
                range.contains(&r[4]),
                "{params:?}: reset {} not in {range:?}",
                r[4]
            );
        } else {
            assert_eq!(r[4], 0, "{params:?}");
        }
        assert_eq!(exists(&mut c, &key), written, "{params:?} key written");
    }
}

#[test]
fn a_full_window_denies_until_enough_has_decayed() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(
        sw(&mut c, "k", &["10", LONGEST, "COST", "3"])[..4],
        [1, 10, 7, 0]
    );
    assert_eq!(
        sw(&mut c, "k", &["10", LONGEST, "COST", "4"])[..4],
        [1, 10, 3, 0]
    );

    let before = frozen(&mut c, "k");
    let (denied, t0, t1) = timed(&mut c, "k", &["10", LONGEST, "COST", "4"]);
    assert_eq!(denied[..3], [0, 10, 3]);
    // 7 units in this window: 4 more fit once the next window is 1 - 6/7 of the way through
    // (7 x (1 - e) <= 10 - 4), rounded up to the microsecond.
    let next = wide_start_us(t0) + LONGEST_US;
    let decay = LONGEST_US - 6 * LONGEST_US / 7;
    let range = ms_until(next + decay, t1)..=ms_until(next + decay, t0);
    assert!(
        range.contains(&denied[3]),
        "retry {denied:?} not in {range:?}"
    );
    let range = ms_until(next + LONGEST_US, t1)..=ms_until(next + LONGEST_US, t0);
    assert!(
        range.contains(&denied[4]),
        "reset {denied:?} not in {range:?}"
    );
    assert_eq!(frozen(&mut c, "k"), before, "a denied call writes nothing");

    let never = sw(&mut c, "k", &["10", LONGEST, "COST", "11"]);
    assert_eq!(never[..4], [0, 10, 3, -1]);
    assert!(
        never[4] <= denied[4] && never[4] >= denied[4] - 60_000,
        "{never:?}"
    );
    let check = writes_nothing(&mut c, "k", |c| sw(c, "k", &["10", LONGEST, "COST", "0"]));
    assert_eq!(check[..4], [1, 10, 3, 0]);
    assert_eq!(frozen(&mut c, "k"), before, "never wrote");

    assert_eq!(
        sw(&mut c, "k", &["10", LONGEST, "COST", "3"])[..4],
        [1, 10, 0, 0]
    );
    // Full: one more unit fits once a tenth of the next window has passed, and the window
    // is idle at the end of the next one: the two waits differ by exactly 9/10 of a window.
    let full = sw(&mut c, "k", &["10", LONGEST]);
    assert_eq!(full[..3], [0, 10, 0]);
    assert_eq!(full[4] - full[3], (LONGEST_MS / 10 * 9) as i64, "{full:?}");
}

#[test]
fn the_previous_window_counts_by_the_fraction_not_yet_elapsed() {
    let server = Server::start();
    let mut c = server.client();
    let now = u128::from(server_time_us(&mut c));
    let start_us = wide_start_us(now);
    let start = u64::try_from(start_us / 1000).unwrap();
    let limit: u64 = 1_000_000;
    let limit_s = limit.to_string();
    // count = previous x (1 - e / window) + current, e = time since the window started.
    let remaining = |previous: u64, current: u64, now: u128| {
        let used = u128::from(previous) * (LONGEST_US - (now - start_us))
            + u128::from(current) * LONGEST_US;
        let budget = u128::from(limit) * LONGEST_US;
        i64::try_from(budget.saturating_sub(used) / LONGEST_US).unwrap()
    };

    // Stored one window ago: its current count is now the previous one, and the count before
    // it (999) is forgotten.
    set_bytes(
        &mut c,
        "k",
        &state(LONGEST_MS, start - LONGEST_MS, 999, limit),
    );
    let (r, t0, t1) = timed(&mut c, "k", &[&limit_s, LONGEST, "COST", "0"]);
    let range = remaining(limit, 0, t0)..=remaining(limit, 0, t1);
    assert!(range.contains(&r[2]), "remaining {r:?} not in {range:?}");
    assert_eq!(r[..2], [1, limit as i64]);
    // Only the previous window counts: idle when the current window ends.
    let range = ms_until(start_us + LONGEST_US, t1)..=ms_until(start_us + LONGEST_US, t0);
    assert!(range.contains(&r[4]), "reset {r:?} not in {range:?}");

    // One unit more than remains: denied until the previous window has decayed enough.
    let cost = r[2] as u64 + 1;
    let (denied, t0, t1) = timed(&mut c, "k", &[&limit_s, LONGEST, "COST", &cost.to_string()]);
    assert_eq!(denied[..3], [0, limit as i64, r[2]]);
    let spare = u128::from(limit - cost);
    let decayed_at = start_us + LONGEST_US - spare * LONGEST_US / u128::from(limit);
    let range = ms_until(decayed_at, t1)..=ms_until(decayed_at, t0);
    assert!(
        range.contains(&denied[3]),
        "retry {denied:?} not in {range:?}"
    );

    // A write keeps both windows in the one key.
    assert_eq!(sw(&mut c, "k", &[&limit_s, LONGEST, "COST", "5"])[0], 1);
    let stored: Vec<u8> = query(&mut c, &["GET", "k"]);
    assert_eq!(stored, state_v2(LONGEST_MS, start, limit, 5));
    assert_eq!(query::<i64>(&mut c, &["DBSIZE"]), 1);

    // Both windows: 1000 in the previous, 300 in this one.
    set_bytes(&mut c, "k", &state(LONGEST_MS, start, 1000, 300));
    let (r, t0, t1) = timed(&mut c, "k", &[&limit_s, LONGEST, "COST", "0"]);
    let range = remaining(1000, 300, t0)..=remaining(1000, 300, t1);
    assert!(range.contains(&r[2]), "remaining {r:?} not in {range:?}");
    let range = ms_until(start_us + 2 * LONGEST_US, t1)..=ms_until(start_us + 2 * LONGEST_US, t0);
    assert!(range.contains(&r[4]), "reset {r:?} not in {range:?}");

    // Stored two windows ago (or more): everything has expired. (A shorter window, since
    // the wide one before the previous would start before the epoch.)
    let window: u64 = 100_000_000_000;
    let start = u64::try_from(now / 1000).unwrap() / window * window;
    for windows_ago in [2, 3, 17] {
        set_bytes(
            &mut c,
            "k",
            &state(window, start - windows_ago * window, limit, limit),
        );
        assert_eq!(
            sw(&mut c, "k", &[&limit_s, &window.to_string(), "COST", "0"]),
            [1, limit as i64, limit as i64, 0, 0]
        );
    }
}

#[test]
fn peek_replies_like_the_real_call_and_writes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    let r = sw(&mut c, "k", &["10", LONGEST, "PEEK", "COST", "4"]);
    assert_eq!(r[..4], [1, 10, 6, 0]);
    assert!(!exists(&mut c, "k"));

    sw(&mut c, "k", &["10", LONGEST, "COST", "4"]);
    for cost in ["2", "6", "7", "11", "0"] {
        let before = frozen(&mut c, "k");
        let peeked = sw(&mut c, "k", &["10", LONGEST, "COST", cost, "PEEK"]);
        assert_eq!(frozen(&mut c, "k"), before, "PEEK COST {cost} wrote");
        let real = sw(&mut c, "k", &["10", LONGEST, "COST", cost]);
        assert_peek_then_real(&peeked, &real, &format!("PEEK COST {cost}"));
        if real[0] == 1 {
            query::<()>(&mut c, &["DEL", "k"]);
            sw(&mut c, "k", &["10", LONGEST, "COST", "4"]);
        }
    }
}

#[test]
fn a_written_key_expires_one_second_after_the_window_goes_idle() {
    let server = Server::start();
    let mut c = server.client();
    let (r, t0, _) = timed(&mut c, "k", &["10", LONGEST, "COST", "2"]);
    // Idle at the end of the next window; the expiry is that instant + 1000 ms (+1 when the
    // call's instant is rounded up to the millisecond).
    let idle_ms = (wide_start_us(t0) + 2 * LONGEST_US) / 1000;
    let (_, expire_at) = frozen(&mut c, "k");
    let expire_at = expire_at as u128;
    assert!(
        expire_at == idle_ms + 1000 || expire_at == idle_ms + 1001,
        "expiry {expire_at}, idle at {idle_ms}"
    );
    assert_pttl_after_call(&mut c, "k", r[4], u64::try_from(t0).unwrap());

    // Same on a short window, whatever the instant within it.
    let t0 = server_time_us(&mut c);
    let r = sw(&mut c, "short", &["5", "100", "COST", "1"]);
    let t1 = server_time_us(&mut c);
    let (_, expire_at) = frozen(&mut c, "short");
    let call_ms = expire_at - r[4] - 1000;
    let range = t0.div_ceil(1000) as i64..=t1.div_ceil(1000) as i64;
    assert!(
        range.contains(&call_ms),
        "expiry {expire_at}, {r:?}, call in {range:?}"
    );
    assert!(r[4] > 100 && r[4] <= 200, "{r:?}");
}

#[test]
fn a_key_that_expired_is_the_idle_state() {
    let server = Server::start();
    let mut c = server.client();
    let r = sw(&mut c, "k", &["3", "20", "COST", "3"]);
    assert_eq!(r[..4], [1, 3, 0, 0]);
    wait_until("the key to expire", Duration::from_secs(10), || {
        !exists(&mut c, "k")
    });
    assert_eq!(sw(&mut c, "k", &["3", "20", "COST", "0"]), [1, 3, 3, 0, 0]);
    assert_eq!(
        sw(&mut c, "k", &["3", "20", "COST", "3"])[..4],
        [1, 3, 0, 0]
    );
}

#[test]
fn waiting_retry_after_suffices() {
    let server = Server::start();
    let mut c = server.client();
    // (limit, window_ms, cost)
    let cases = [
        ("2", "40", "1"),
        ("5", "30", "3"),
        ("4", "50", "4"),
        ("10", "7", "2"),
    ];
    for (i, (limit, window, cost)) in cases.into_iter().enumerate() {
        let fill = ["RL.SLIDING", limit, window, "COST", limit];
        let ask = ["RL.SLIDING", limit, window, "COST", cost];
        waiting_retry_after_is_enough(&mut c, &format!("k{i}"), &fill, &ask);
    }
}

#[test]
fn a_changed_window_or_limit_keeps_the_traffic() {
    let server = Server::start();
    let mut c = server.client();
    sw(&mut c, "k", &["10", LONGEST, "COST", "6"]);
    let check = |c: &mut redis::Connection, params: &[&str]| {
        sw(c, "k", &[params, &["COST", "0"]].concat())[..3].to_vec()
    };
    // Another window: the count so far (6) carries over into the new window.
    assert_eq!(check(&mut c, &["10", "500000000000"]), [1, 10, 4]);
    assert_eq!(check(&mut c, &["10", "1000"]), [1, 10, 4]);
    // Another limit: judged against the count.
    // Over the lower limit, even a zero-cost check is denied (count + 0 > limit).
    assert_eq!(check(&mut c, &["5", LONGEST]), [0, 5, 0]);
    assert_eq!(check(&mut c, &["6", LONGEST]), [1, 6, 0]);
    assert_eq!(check(&mut c, &["20", LONGEST]), [1, 20, 14]);
    assert_eq!(sw(&mut c, "k", &["5", LONGEST])[..3], [0, 5, 0]);
    // A write with another window stores the carried-over count.
    assert_eq!(
        sw(&mut c, "k", &["10", "500000000000", "COST", "1"])[..3],
        [1, 10, 3]
    );
    assert_eq!(check(&mut c, &["10", "500000000000"]), [1, 10, 3]);
}
