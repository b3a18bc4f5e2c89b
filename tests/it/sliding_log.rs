//! RL.LOG against a real server: every reply field, exact `retry_after_ms`, PEEK, COST,
//! TTL, the stored layout, expired entries dropped on write, damaged values, and the bytes
//! per entry (printed for the README: run with `--nocapture`). What every command shares
//! is in `conformance.rs`.
//!
//! Most tests use the largest window (10^12 ms), so nothing leaves the window during a test,
//! and check time-dependent fields against the server's own clock (`TIME` before and after
//! each call). Tests that need entries to expire use windows of a few milliseconds and poll
//! with a deadline; none asserts how long anything took.

use redis_rl_testkit::*;
use std::time::Duration;

fn log(c: &mut redis::Connection, key: &str, params: &[&str]) -> Vec<i64> {
    call_on(c, "RL.LOG", key, params)
}

fn timed(c: &mut redis::Connection, key: &str, params: &[&str]) -> (Vec<i64>, u128, u128) {
    timed_call(c, "RL.LOG", key, params)
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

fn read_varint(bytes: &mut &[u8]) -> u64 {
    let mut v = 0;
    for shift in (0..64).step_by(7) {
        let (b, rest) = bytes.split_first().expect("truncated varint");
        *bytes = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
    }
    v
}

/// The documented value: header, `window_ms`, then per entry the µs since the previous one
/// (since the epoch for the first) shifted left, low bit set when a count follows.
fn encode(window_ms: u64, entries: &[(u64, u64)]) -> Vec<u8> {
    let mut v = b"\0RL\x01L".to_vec();
    varint(window_ms, &mut v);
    let mut previous = 0;
    for &(at, count) in entries {
        let delta = (at - previous) << 1;
        previous = at;
        if count == 1 {
            varint(delta, &mut v);
        } else {
            varint(delta | 1, &mut v);
            varint(count, &mut v);
        }
    }
    v
}

/// The entries of a stored value: `(window_ms, [(at_us, count)])`.
fn decode(value: &[u8]) -> (u64, Vec<(u64, u64)>) {
    assert_eq!(&value[..5], b"\0RL\x01L");
    let mut rest = &value[5..];
    let window = read_varint(&mut rest);
    let mut entries = Vec::new();
    let mut at = 0;
    while !rest.is_empty() {
        let word = read_varint(&mut rest);
        at += word >> 1;
        let count = if word & 1 == 1 {
            read_varint(&mut rest)
        } else {
            1
        };
        entries.push((at, count));
    }
    (window, entries)
}

#[test]
fn a_fresh_log_replies_every_field() {
    let server = Server::start();
    let mut c = server.client();
    // (params, allowed, remaining, retry_after, reset_after is the window?, written)
    type Case = (&'static [&'static str], i64, i64, i64, bool, bool);
    // (The whole limit, a zero cost, a cost above the limit and PEEKs on a fresh key:
    // `conformance.rs`.)
    let cases: &[Case] = &[
        (&["10", LONGEST], 1, 9, 0, true, true),
        (&["10000", LONGEST, "COST", "10000"], 1, 0, 0, true, true),
        (&["1", "1"], 1, 0, 0, true, true),
    ];
    for (i, &(params, allowed, remaining, retry, busy, written)) in cases.iter().enumerate() {
        let key = format!("fresh:{i}");
        let r = log(&mut c, &key, params);
        let limit: i64 = params[0].parse().unwrap();
        // Units taken now leave the window exactly `window_ms` from now.
        let reset = if busy { params[1].parse().unwrap() } else { 0 };
        assert_eq!(r, [allowed, limit, remaining, retry, reset], "{params:?}");
        assert_eq!(
            query::<i64>(&mut c, &["EXISTS", &key]) == 1,
            written,
            "{params:?} key written"
        );
    }
}

#[test]
fn a_denial_waits_exactly_for_the_oldest_units_it_needs() {
    let server = Server::start();
    let mut c = server.client();
    let (a, a0, a1) = timed(&mut c, "k", &["5", LONGEST, "COST", "2"]);
    assert_eq!(a, [1, 5, 3, 0, LONGEST_MS as i64]);
    let (b, b0, b1) = timed(&mut c, "k", &["5", LONGEST, "COST", "3"]);
    assert_eq!(b, [1, 5, 0, 0, LONGEST_MS as i64]);

    // Denials and checks write nothing.
    writes_nothing(&mut c, "k", |c| {
        // One unit: the two taken first must leave.
        let (d, t0, t1) = timed(c, "k", &["5", LONGEST]);
        assert_eq!(d[..3], [0, 5, 0]);
        let range = ms_until(a0 + LONGEST_US, t1)..=ms_until(a1 + LONGEST_US, t0);
        assert!(range.contains(&d[3]), "retry {d:?} not in {range:?}");
        let idle = ms_until(b0 + LONGEST_US, t1)..=ms_until(b1 + LONGEST_US, t0);
        assert!(idle.contains(&d[4]), "reset {d:?} not in {idle:?}");
        // Three units: the second call's units must leave too.
        let (d, t0, t1) = timed(c, "k", &["5", LONGEST, "COST", "3"]);
        let range = ms_until(b0 + LONGEST_US, t1)..=ms_until(b1 + LONGEST_US, t0);
        assert!(range.contains(&d[3]), "retry {d:?} not in {range:?}");
        assert_eq!(
            log(c, "k", &["5", LONGEST, "COST", "6"])[..4],
            [0, 5, 0, -1]
        );
        let peek = log(c, "k", &["5", LONGEST, "PEEK"]);
        assert_eq!(peek[..3], [0, 5, 0]);
        assert!(peek[3] > 0);
        assert_eq!(log(c, "k", &["5", LONGEST, "COST", "0"])[..4], [1, 5, 0, 0]);
    });

    // A larger limit judges the same instants: 2 more fit.
    assert_eq!(
        log(&mut c, "k", &["7", LONGEST, "COST", "2"])[..4],
        [1, 7, 0, 0]
    );
    assert_eq!(decode(&get_bytes(&mut c, "k")).1.len(), 3);
}

#[test]
fn expired_entries_are_dropped_on_write() {
    let server = Server::start();
    let mut c = server.client();
    for _ in 0..5 {
        assert_eq!(log(&mut c, "k", &["5", "20"])[0], 1);
    }
    wait_until("the log to empty", Duration::from_secs(10), || {
        log(&mut c, "k", &["5", "20", "COST", "0"])[2] == 5
    });
    // Still stored (a check writes nothing). Not necessarily all five: a call made after a
    // stall of over 20 ms has already dropped the ones before it.
    let stale = decode(&get_bytes(&mut c, "k")).1;
    assert!(!stale.is_empty(), "not yet rewritten");
    let (r, t0, t1) = timed(&mut c, "k", &["5", "20", "COST", "3"]);
    assert!(stale.iter().all(|&(at, _)| u128::from(at) < t0));
    assert_eq!(r, [1, 5, 2, 0, 20]);
    let (window, entries) = decode(&get_bytes(&mut c, "k"));
    assert_eq!(window, 20);
    assert_eq!(entries.len(), 1);
    let (at, count) = entries[0];
    assert_eq!(count, 3);
    assert!(
        (t0..=t1).contains(&u128::from(at)),
        "{at} not in {t0}..={t1}"
    );
}

#[test]
fn the_key_expires_when_the_log_is_idle_plus_a_second() {
    let server = Server::start();
    let mut c = server.client();
    let expiry = |c: &mut redis::Connection| query::<i64>(c, &["PEXPIRETIME", "k"]) as u128;
    let (_, t0, t1) = timed(&mut c, "k", &["10", "60000"]);
    let range = (t0.div_ceil(1000) + 61_000)..=(t1.div_ceil(1000) + 61_000);
    assert!(range.contains(&expiry(&mut c)), "{range:?}");
    // A later write moves the expiry with the newest entry.
    std::thread::sleep(Duration::from_millis(5));
    let (_, t0, t1) = timed(&mut c, "k", &["10", "60000", "COST", "2"]);
    let range = (t0.div_ceil(1000) + 61_000)..=(t1.div_ceil(1000) + 61_000);
    assert!(range.contains(&expiry(&mut c)), "{range:?}");
    assert_eq!(query::<String>(&mut c, &["TYPE", "k"]), "string");
}

#[test]
fn the_stored_value_is_the_documented_layout() {
    let server = Server::start();
    let mut c = server.client();
    // A minute's window: the first entry is still live when the second call writes.
    let (_, t0, t1) = timed(&mut c, "k", &["100", "60000", "COST", "3"]);
    let (_, u0, u1) = timed(&mut c, "k", &["100", "60000"]);
    let value = get_bytes(&mut c, "k");
    let (window, entries) = decode(&value);
    assert_eq!(window, 60000);
    assert_eq!(entries.len(), 2);
    assert!((t0..=t1).contains(&u128::from(entries[0].0)));
    assert_eq!(entries[0].1, 3);
    assert!((u0..=u1).contains(&u128::from(entries[1].0)));
    assert_eq!(entries[1].1, 1);
    assert_eq!(encode(window, &entries), value);

    // A log written by hand in the documented layout is read as such: 4 units in the window.
    let now = server_time_us(&mut c);
    set_bytes(
        &mut c,
        "hand",
        &encode(LONGEST_MS, &[(now - 10, 3), (now - 5, 1)]),
    );
    assert_eq!(
        log(&mut c, "hand", &["10", LONGEST, "COST", "0"])[..3],
        [1, 10, 6]
    );
    // Units taken more than a window ago no longer count.
    set_bytes(&mut c, "old", &encode(1, &[(now - 5_000, 7)]));
    assert_eq!(log(&mut c, "old", &["7", "1", "COST", "0"])[..3], [1, 7, 7]);
}

/// Values with the log's header that it cannot read: a zero window, a truncated entry,
/// a truncated version 2 or 3, a newer format version (the refusals every command shares are in `conformance.rs`).
#[test]
fn damaged_and_future_logs_are_refused_and_left_untouched() {
    let server = Server::start();
    let mut c = server.client();
    set_bytes(&mut c, "zero-window", b"\0RL\x01L\x00");
    set_bytes(&mut c, "truncated", b"\0RL\x01L\xe8\x07\x80");
    // Versions 2 and 3 (the Lua twin's fixed-width logs) cut short, and version 4 (not
    // yet written).
    set_bytes(&mut c, "v2-short", b"\0RL\x02L\xe8\x07");
    set_bytes(&mut c, "v3-short", b"\0RL\x03L\xe8\x07");
    set_bytes(&mut c, "v4", b"\0RL\x04L\xe8\x07");
    let corrupt = "ERR key holds a corrupt redis-rl sliding window log limiter";
    for (key, expected) in [
        ("zero-window", corrupt),
        ("truncated", corrupt),
        ("v2-short", corrupt),
        ("v3-short", corrupt),
        (
            "v4",
            "ERR key holds a redis-rl limiter in format version 4, this module reads version 1",
        ),
    ] {
        for options in [&[][..], &["PEEK"], &["COST", "0"], &["COST", "11"]] {
            let mut args = vec!["RL.LOG", key, "10", "1000"];
            args.extend_from_slice(options);
            refused_untouched(&mut c, &args, expected);
        }
    }
}

/// MEMORY USAGE and STRLEN of logs with N entries, for the README.
#[test]
fn bytes_per_entry_measured() {
    let server = Server::start();
    let mut c = server.client();
    let usage = |c: &mut redis::Connection, key: &str| -> (i64, i64) {
        (
            query(c, &["STRLEN", key]),
            query(c, &["MEMORY", "USAGE", key, "SAMPLES", "0"]),
        )
    };
    println!("\nRL.LOG key size (limit 10000, window 10^12 ms):");
    println!(
        "{:<34} {:>6} {:>8} {:>13} {:>10}",
        "entries", "N", "STRLEN", "MEMORY USAGE", "B/entry"
    );
    // `n` units; back-to-back calls that land in the same microsecond share one entry (with
    // a count), so the entries are at most `n`, and the figure is bytes per entry.
    let report = |c: &mut redis::Connection, what: &str, key: &str, n: u64| {
        let (len, mem) = usage(c, key);
        let (_, entries) = decode(&get_bytes(c, key));
        assert_eq!(entries.iter().map(|e| e.1).sum::<u64>(), n, "{what}");
        let stored = entries.len() as u64;
        assert!(stored <= n, "{what}");
        println!(
            "{what:<34} {stored:>6} {len:>8} {mem:>13} {:>10.2}",
            len as f64 / stored as f64
        );
        (len, mem)
    };
    // Written by RL.LOG: one round trip per call, and pipelined (back-to-back).
    for n in [1u64, 10, 100, 1_000, 10_000] {
        let key = format!("seq:{n}");
        for _ in 0..n.min(1_000) {
            log(&mut c, &key, &["10000", LONGEST]);
        }
        if n > 1_000 {
            // Round trips for the first 1000, then pipelines for speed.
            let mut left = n - 1_000;
            while left > 0 {
                let batch = left.min(1_000);
                let mut pipe = redis::pipe();
                for _ in 0..batch {
                    pipe.add_command(command(&["RL.LOG", &key, "10000", LONGEST]));
                }
                let _: Vec<Vec<i64>> = pipe.query(&mut c).expect("pipeline");
                left -= batch;
            }
        }
        report(&mut c, "RL.LOG calls, one per round trip", &key, n);
    }
    for n in [100u64, 10_000] {
        let key = format!("pipe:{n}");
        let mut pipe = redis::pipe();
        for _ in 0..n {
            pipe.add_command(command(&["RL.LOG", &key, "10000", LONGEST]));
        }
        let _: Vec<Vec<i64>> = pipe.query(&mut c).expect("pipeline");
        report(&mut c, "RL.LOG calls, pipelined", &key, n);
    }
    // The same layout written by hand with steady spacing (what steady traffic leaves).
    let now = server_time_us(&mut c);
    for spacing_us in [1_000u64, 100_000, 1_000_000, 10_000_000] {
        let n = 10_000u64;
        let entries: Vec<(u64, u64)> = (0..n).map(|i| (now - (n - i) * spacing_us, 1)).collect();
        let key = format!("spaced:{spacing_us}");
        set_bytes(&mut c, &key, &encode(LONGEST_MS, &entries));
        // The module reads it as a full log.
        assert_eq!(log(&mut c, &key, &["10000", LONGEST, "COST", "0"])[2], 0);
        let what = format!("steady, one every {} ms", spacing_us / 1000);
        report(&mut c, &what, &key, n);
    }

    // Every call reads and rewrites the whole log: the server's CPU time per call
    // (`INFO commandstats`), for the README (noisy on a shared machine; not asserted).
    let per_call_us = |c: &mut redis::Connection, args: &[&str]| -> f64 {
        query::<()>(c, &["CONFIG", "RESETSTAT"]);
        let mut pipe = redis::pipe();
        for _ in 0..1_000 {
            pipe.add_command(command(args));
        }
        let _: Vec<Vec<i64>> = pipe.query(c).expect("pipeline");
        // Redis keeps a module command's name as registered (valkey lowercases it).
        let stat = format!("cmdstat_{}", args[0]);
        let line = info_field(c, "commandstats", &stat)
            .or_else(|| info_field(c, "commandstats", &stat.to_ascii_lowercase()))
            .expect("commandstats");
        let usec: f64 = line
            .split("usec=")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        usec / 1_000.0
    };
    let now = server_time_us(&mut c);
    for n in [100u64, 1_000, 9_000] {
        let entries: Vec<(u64, u64)> = (0..n).map(|i| (now - n + i, 1)).collect();
        set_bytes(&mut c, &format!("log:{n}"), &encode(LONGEST_MS, &entries));
    }
    println!("\nserver CPU time per call (INFO commandstats, 1000 calls; noisy, not asserted):");
    for (what, args) in [
        ("RL.SLIDING", &["RL.SLIDING", "sw", "10000", LONGEST][..]),
        (
            "RL.LOG, 100 entries, PEEK",
            &["RL.LOG", "log:100", "10000", LONGEST, "PEEK"],
        ),
        (
            "RL.LOG, 1000 entries, PEEK",
            &["RL.LOG", "log:1000", "10000", LONGEST, "PEEK"],
        ),
        (
            "RL.LOG, 9000 entries, PEEK",
            &["RL.LOG", "log:9000", "10000", LONGEST, "PEEK"],
        ),
        (
            "RL.LOG, 9000 to 10000 entries, allowed",
            &["RL.LOG", "log:9000", "10000", LONGEST],
        ),
        (
            "RL.LOG, 10000 entries, denied",
            &["RL.LOG", "log:9000", "10000", LONGEST],
        ),
    ] {
        println!("{what:<40} {:>8.1} us", per_call_us(&mut c, args));
    }
}
