//! Hostile input, sized: every size an attacker controls at and over its maximum (the
//! promise and the keys: `hostile_input.rs`).

use super::hostile_input::*;
use redis_rl_testkit::*;

/// `args` must be allowed (first reply field 1).
fn allowed(c: &mut redis::Connection, args: &[&str]) {
    assert_eq!(ints(c, args)[0], 1, "{args:?}");
}

/// `args` must be refused with exactly `expected`, changing nothing.
fn over(c: &mut redis::Connection, args: &[&str], expected: &str) {
    let all: Vec<_> = KEYS.iter().map(|k| frozen(c, k)).collect();
    assert_eq!(error(c, args), expected, "{args:?}");
    let after: Vec<_> = KEYS.iter().map(|k| frozen(c, k)).collect();
    assert_eq!(after, all, "{args:?} changed a key");
}

/// Every size an attacker controls, at its documented maximum (works) and just over it
/// (refused with its text, nothing changed).
#[test]
fn every_attacker_controlled_size_works_at_its_maximum_and_is_refused_above() {
    let server = Server::start();
    let mut c = server.client();
    create_keys(&mut c);
    let count = "ERR limit must be an integer between 1 and 1000000000000000";
    let cost = "ERR cost must be an integer between 0 and 1000000000000000";
    let log_limit = "ERR limit must be an integer between 1 and 10000";

    // cost and limit: 10^15 on every algorithm that takes them.
    for (name, rest) in [
        ("RL.SLIDING", &[WIDE][..]),
        ("RL.FIXED", &[WIDE]),
        ("RL.GCRA", &[WIDE]),
    ] {
        let key = format!("max:{name}");
        let mut args = vec![name, &key, COUNT_MAX];
        args.extend_from_slice(rest);
        args.extend_from_slice(&["COST", COUNT_MAX]);
        allowed(&mut c, &args);
        if name != "RL.GCRA" {
            // (GCRA at 10^15 per 10^12 ms frees one unit every microsecond.)
            args[5] = "1";
            assert_eq!(ints(&mut c, &args)[0], 0, "{args:?} after the whole budget");
        }
        let mut args = vec![name, "h:new", COUNT_ABOVE];
        args.extend_from_slice(rest);
        over(&mut c, &args, count);
        let mut args = vec![name, "h:new", COUNT_MAX];
        args.extend_from_slice(rest);
        args.extend_from_slice(&["COST", COUNT_ABOVE]);
        over(&mut c, &args, cost);
    }
    allowed(
        &mut c,
        &[
            "RL.GCRA",
            "max:burst",
            "1",
            WIDE,
            "BURST",
            COUNT_MAX,
            "COST",
            COUNT_MAX,
        ],
    );
    over(
        &mut c,
        &["RL.GCRA", "h:gc", "1", WIDE, "BURST", COUNT_ABOVE],
        "ERR burst must be an integer between 1 and 1000000000000000",
    );
    // (RL.THROTTLE replies `limited` first: 0 is allowed.)
    assert_eq!(
        ints(
            &mut c,
            &[
                "RL.THROTTLE",
                "max:th",
                "999999999999999",
                COUNT_MAX,
                "1",
                COUNT_MAX
            ]
        )[0],
        0
    );
    over(
        &mut c,
        &["RL.THROTTLE", "h:gc", COUNT_MAX, COUNT_MAX, "1"],
        "ERR max_burst must be an integer between 0 and 999999999999999",
    );

    // RL.LOG: at most 10000 entries.
    allowed(
        &mut c,
        &["RL.LOG", "max:log", "10000", WIDE, "COST", "10000"],
    );
    assert_eq!(
        ints(&mut c, &["RL.LOG", "max:log", "10000", WIDE])[..3],
        [0, 10000, 0]
    );
    over(&mut c, &["RL.LOG", "h:log", "10001", WIDE], log_limit);
    over(
        &mut c,
        &["RL.ALL", "1", "h:log", "LOG", "10001", WIDE],
        &format!("ERR spec 1: {}", &log_limit[4..]),
    );

    // RL.ALL: at most 16 keys.
    let keys: Vec<String> = (0..17).map(|i| format!("all:{i}")).collect();
    let all = |n: usize| {
        let mut args = vec!["RL.ALL".to_string(), n.to_string()];
        args.extend(keys[..n].iter().cloned());
        for _ in 0..n {
            args.extend(["FIXED", "1", WIDE].map(String::from));
        }
        args
    };
    let sixteen = all(16);
    let sixteen: Vec<&str> = sixteen.iter().map(String::as_str).collect();
    let r: redis::Value = query(&mut c, &sixteen);
    assert!(
        matches!(&r, redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(1))),
        "{r:?}"
    );
    let seventeen = all(17);
    let seventeen: Vec<&str> = seventeen.iter().map(String::as_str).collect();
    over(
        &mut c,
        &seventeen,
        "ERR numkeys must be an integer between 1 and 16",
    );
    assert_eq!(query::<i64>(&mut c, &["EXISTS", &keys[16]]), 0);

    // RL.CONCURRENCY: at most 10000 leases, ids of at most 256 bytes.
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.add_command(command(&[
            "RL.CONCURRENCY",
            "max:cc",
            "10000",
            WIDE,
            "ACQUIRE",
            &format!("lease-{i:05}"),
        ]));
    }
    let replies: Vec<Vec<i64>> = pipe.query(&mut c).expect("10000 leases");
    assert!(replies.iter().all(|r| r[0] == 1));
    assert_eq!(replies.last().unwrap()[2], 0, "no lease left after 10000");
    assert_eq!(
        ints(
            &mut c,
            &[
                "RL.CONCURRENCY",
                "max:cc",
                "10000",
                WIDE,
                "ACQUIRE",
                "one-more"
            ]
        )[..3],
        [0, 10000, 0]
    );
    over(
        &mut c,
        &["RL.CONCURRENCY", "h:cc", "10001", WIDE, "ACQUIRE", "x"],
        log_limit,
    );
    let id = "i".repeat(256);
    allowed(
        &mut c,
        &["RL.CONCURRENCY", "max:id", "1", WIDE, "ACQUIRE", &id],
    );
    assert_eq!(
        query::<i64>(&mut c, &["RL.CONCURRENCY", "max:id", "RELEASE", &id]),
        1
    );
    let long = "i".repeat(257);
    let id_error = "ERR id must be between 1 and 256 bytes long";
    over(
        &mut c,
        &["RL.CONCURRENCY", "h:cc", "10", WIDE, "ACQUIRE", &long],
        id_error,
    );
    over(
        &mut c,
        &["RL.CONCURRENCY", "h:cc", "RELEASE", &long],
        id_error,
    );
    over(&mut c, &["RL.CONCURRENCY", "h:cc", "RELEASE", ""], id_error);

    // Key length: the module sets no bound of its own; a 1 MB key name works like any other
    // (the server's own limit, 512 MB per string, applies) and is cleaned up by RL.RESET.
    let key = "k".repeat(1 << 20);
    allowed(
        &mut c,
        &["RL.TOKENBUCKET", &key, "2", "1", WIDE, "COST", "2"],
    );
    assert_eq!(
        ints(&mut c, &["RL.TOKENBUCKET", &key, "2", "1", WIDE])[0],
        0
    );
    let state: Vec<redis::Value> = query(&mut c, &["RL.STATE", &key]);
    assert!(!state.is_empty());
    assert_eq!(query::<i64>(&mut c, &["RL.RESET", &key]), 1);
    let keys_left: i64 = query(&mut c, &["EXISTS", &key]);
    assert_eq!(keys_left, 0);
    let pong: String = query(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
}
