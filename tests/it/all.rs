//! RL.ALL (several dimensions, all or nothing) and RL.REFUND against a real server.

use redis_rl_testkit::*;

/// A window of 10^12 ms (the current one ends in 2033): none ends during a test.
const WIDE: &str = "1000000000000";

/// The design's four dimensions, as one RL.ALL. Keys share a hash tag so they share a slot.
const KEYS: [&str; 4] = [
    "{api:K}:key",
    "{api:K}:ip:10.0.0.1",
    "{api:K}:endpoint:/search",
    "{api:K}:global",
];

fn four_dimensions(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["RL.ALL", "4"].iter().map(|s| s.to_string()).collect();
    args.extend(KEYS.iter().map(|s| s.to_string()));
    for spec in [
        "SLIDING 1000 60000",
        "SLIDING 100 60000",
        "SLIDING 100 60000",
        "SLIDING 100000 60000",
    ] {
        args.extend(spec.split(' ').map(str::to_string));
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn all(conn: &mut redis::Connection, args: &[String]) -> (i64, i64, Vec<Vec<i64>>) {
    let mut cmd = redis::cmd(&args[0]);
    for a in &args[1..] {
        cmd.arg(a);
    }
    cmd.query(conn).expect("RL.ALL")
}

#[test]
fn a_request_denied_by_one_dimension_consumes_nothing_anywhere() {
    let server = Server::start();
    let mut c = server.client();
    let (allowed, denied, dims) = all(&mut c, &four_dimensions(&[]));
    assert_eq!((allowed, denied), (1, 0));
    assert_eq!(
        dims.iter().map(|d| (d[0], d[1], d[2])).collect::<Vec<_>>(),
        vec![
            (1000, 999, 0),
            (100, 99, 0),
            (100, 99, 0),
            (100000, 99999, 0)
        ]
    );
    // Another API key from the same IP exhausts the IP dimension.
    ints(
        &mut c,
        &["RL.SLIDING", KEYS[1], "100", "60000", "COST", "99"],
    );
    let before: Vec<_> = KEYS.iter().map(|k| snapshot(&mut c, k)).collect();
    let (allowed, denied, dims) = all(&mut c, &four_dimensions(&[]));
    assert_eq!((allowed, denied), (0, 2));
    assert!(
        dims[1][2] > 0,
        "the IP dimension says when to retry: {dims:?}"
    );
    assert_eq!(
        dims[0][1], 999,
        "the API key dimension reports what it has, untaken"
    );
    for (i, k) in KEYS.iter().enumerate() {
        let after = snapshot(&mut c, k);
        assert_eq!(before[i].0, after.0, "{k} changed");
    }
}

#[test]
fn every_denying_dimension_is_visible_and_the_first_is_named() {
    let server = Server::start();
    let mut c = server.client();
    ints(
        &mut c,
        &["RL.TOKENBUCKET", "{t}b", "5", "1", "600000", "COST", "5"],
    );
    ints(
        &mut c,
        &["RL.TOKENBUCKET", "{t}c", "5", "1", "600000", "COST", "5"],
    );
    let args: Vec<String> = "RL.ALL 3 {t}a {t}b {t}c TOKENBUCKET 5 1 600000 TOKENBUCKET 5 1 600000 TOKENBUCKET 5 1 600000"
        .split(' ')
        .map(str::to_string)
        .collect();
    let (allowed, denied, dims) = all(&mut c, &args);
    assert_eq!((allowed, denied), (0, 2));
    assert_eq!(dims[0][2], 0);
    assert!(dims[1][2] > 0 && dims[2][2] > 0);
    // A cost above one dimension's capacity can never pass.
    let mut never = args.clone();
    never.extend(["COST".to_string(), "6".to_string()]);
    let (allowed, denied, dims) = all(&mut c, &never);
    assert_eq!((allowed, denied), (0, 1));
    assert_eq!(dims[0][2], -1);
    assert_eq!(
        snapshot(&mut c, "{t}a").0,
        None,
        "nothing written for {{t}}a"
    );
}

#[test]
fn peek_and_cost_apply_to_every_dimension() {
    let server = Server::start();
    let mut c = server.client();
    let (allowed, _, dims) = all(&mut c, &four_dimensions(&["COST", "10", "PEEK"]));
    assert_eq!(allowed, 1);
    assert_eq!(dims[1][1], 90);
    for k in KEYS {
        assert_eq!(snapshot(&mut c, k).0, None, "PEEK wrote {k}");
    }
    let t0 = server_time_us(&mut c);
    let (_, _, dims) = all(&mut c, &four_dimensions(&["COST", "10"]));
    assert_eq!(dims[3][1], 99990);
    // Idle when the next 60 s window ends (61..=120 s away), plus 1 s of slack; less the time
    // since the call, measured (a loaded machine may stall before the PTTL).
    let ttl = snapshot(&mut c, KEYS[0]).1;
    let waited = i64::try_from((server_time_us(&mut c) - t0).div_ceil(1000)).unwrap();
    assert!(ttl > 61_000 - waited && ttl <= 121_001, "ttl {ttl}");
}

#[test]
fn refund_gives_units_back() {
    let server = Server::start();
    let mut c = server.client();
    ints(
        &mut c,
        &["RL.TOKENBUCKET", "tb", "10", "1", "600000", "COST", "6"],
    );
    let refund = |c: &mut redis::Connection, cost: &str| {
        let spec = ["TOKENBUCKET", "10", "1", "600000", "COST", cost];
        call_on(c, "RL.REFUND", "tb", &spec)
    };
    let r = refund(&mut c, "4");
    assert_eq!(&r[..3], &[4, 10, 8]);
    let r = refund(&mut c, "9");
    assert_eq!(&r[..3], &[2, 10, 10], "capped at capacity");
    // (Only the current window's units can be given back: a window of 10^12 ms, so that
    // none ends between the call and the refund.)
    ints(&mut c, &["RL.SLIDING", "sw", "10", WIDE, "COST", "3"]);
    let r = ints(
        &mut c,
        &["RL.REFUND", "sw", "SLIDING", "10", WIDE, "COST", "5"],
    );
    assert_eq!(&r[..3], &[3, 10, 10]);
    // A refund on a missing key has nothing to give back and writes nothing.
    let r = ints(
        &mut c,
        &["RL.REFUND", "none", "SLIDING", "10", "600000", "COST", "5"],
    );
    assert_eq!(r[0], 0);
    assert_eq!(snapshot(&mut c, "none").0, None);
}

#[test]
fn bad_input_is_refused_with_a_clear_error_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    ints(&mut c, &["RL.TOKENBUCKET", "a", "10", "10", "60000"]);
    ints(&mut c, &["RL.SLIDING", "b", "10", "60000"]);
    let before = (frozen(&mut c, "a"), frozen(&mut c, "b"));
    let cases: &[(&str, &str)] = &[
        (
            "RL.ALL 0 a TOKENBUCKET 10 10 60000",
            "ERR numkeys must be an integer between 1 and 16",
        ),
        (
            "RL.ALL 17 a TOKENBUCKET 10 10 60000",
            "ERR numkeys must be an integer between 1 and 16",
        ),
        (
            "RL.ALL x a TOKENBUCKET 10 10 60000",
            "ERR numkeys must be an integer between 1 and 16",
        ),
        (
            "RL.ALL -1 a TOKENBUCKET 10 10 60000",
            "ERR numkeys must be an integer between 1 and 16",
        ),
        (
            "RL.ALL 9 a b TOKENBUCKET",
            "ERR numkeys is 9 but fewer keys follow",
        ),
        (
            "RL.ALL 2 a b TOKENBUCKET 10 10 60000",
            "ERR spec 2: missing, expected TOKENBUCKET, SLIDING, FIXED, GCRA, LOG or QUOTA and its parameters",
        ),
        (
            "RL.ALL 2 a b TOKENBUCKET 10 10 60000 FOO 1 2",
            "ERR spec 2: unknown algorithm 'FOO', expected TOKENBUCKET, SLIDING, FIXED, GCRA, LOG or QUOTA",
        ),
        (
            "RL.ALL 2 a b TOKENBUCKET 10 10 60000 SLIDING 10",
            "ERR spec 2: window_ms must be an integer between 1 and 1000000000000",
        ),
        (
            "RL.ALL 2 a b TOKENBUCKET 0 10 60000 SLIDING 10 60000",
            "ERR spec 1: capacity must be an integer between 1 and 1000000000000000",
        ),
        (
            "RL.ALL 2 a b TOKENBUCKET 10 10 60000 SLIDING ten 60000",
            "ERR spec 2: limit must be an integer between 1 and 1000000000000000",
        ),
        (
            "RL.ALL 2 a a TOKENBUCKET 10 10 60000 SLIDING 10 60000",
            "ERR key 2 repeats an earlier key: each key may appear once",
        ),
        (
            "RL.ALL 2 a b TOKENBUCKET 10 10 60000 SLIDING 10 60000 COST",
            "ERR option COST needs a value: cost must be an integer between 0 and 1000000000000000",
        ),
        (
            "RL.ALL 2 a b TOKENBUCKET 10 10 60000 SLIDING 10 60000 BOGUS",
            "ERR unknown option 'BOGUS', expected COST n, FORCE or PEEK",
        ),
        (
            "RL.ALL 2 a b TOKENBUCKET 10 10 60000 SLIDING 10 60000 PEEK PEEK",
            "ERR option PEEK given more than once",
        ),
        (
            "RL.ALL 2 a b SLIDING 10 60000 SLIDING 10 60000",
            "ERR key holds a token bucket limiter, not a sliding window limiter",
        ),
        (
            "RL.REFUND a TOKENBUCKET 10 10 60000",
            "ERR RL.REFUND needs COST n: the units to give back",
        ),
        (
            "RL.REFUND a TOKENBUCKET 10 10 60000 COST",
            "ERR option COST needs a value: cost must be an integer between 0 and 1000000000000000",
        ),
        (
            "RL.REFUND a TOKENBUCKET 10 10 60000 COST 1 COST 2",
            "ERR option COST given more than once",
        ),
        (
            "RL.REFUND a TOKENBUCKET 10 10 60000 PEEK",
            "ERR unknown option 'PEEK', expected COST n",
        ),
        (
            "RL.REFUND a TOKENBUCKET 10 10 60000 COST -1",
            "ERR cost must be an integer between 0 and 1000000000000000",
        ),
        (
            "RL.REFUND a NOPE 10 10 60000 COST 1",
            "ERR spec: unknown algorithm 'NOPE', expected TOKENBUCKET, SLIDING, FIXED, GCRA, LOG or QUOTA",
        ),
        (
            "RL.REFUND b TOKENBUCKET 10 10 60000 COST 1",
            "ERR key holds a sliding window limiter, not a token bucket limiter",
        ),
    ];
    for (line, expected) in cases {
        let args: Vec<&str> = line.split(' ').collect();
        assert_eq!(&error(&mut c, &args), expected, "{line}");
    }
    for line in [
        "RL.ALL",
        "RL.ALL 1",
        "RL.ALL 1 a",
        "RL.REFUND a",
        "RL.REFUND a SLIDING",
    ] {
        let args: Vec<&str> = line.split(' ').collect();
        let e = error(&mut c, &args);
        assert!(
            e.starts_with("ERR wrong number of arguments"),
            "{line}: {e}"
        );
    }
    assert_eq!(before, (frozen(&mut c, "a"), frozen(&mut c, "b")));
}

#[test]
fn keys_are_declared_to_the_server() {
    let server = Server::start();
    let mut c = server.client();
    let args = four_dimensions(&[]);
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("GETKEYS");
    for a in &args {
        cmd.arg(a);
    }
    let keys: Vec<String> = cmd.query(&mut c).expect("COMMAND GETKEYS");
    assert_eq!(keys, KEYS);
}

#[test]
fn concurrent_requests_over_several_keys_admit_exactly_the_tightest_budget() {
    let server = Server::start();
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let mut c = server.client();
            std::thread::spawn(move || {
                let args = "RL.ALL 3 {x}a {x}b {x}c TOKENBUCKET 300 1 1000000000 SLIDING 200 1000000000 TOKENBUCKET 1000 1 1000000000";
                let args: Vec<String> = args.split(' ').map(str::to_string).collect();
                let mut admitted = 0;
                for _ in 0..40 {
                    admitted += all(&mut c, &args).0;
                }
                admitted
            })
        })
        .collect();
    let admitted: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(admitted, 200);
    let mut c = server.client();
    let a = ints(
        &mut c,
        &[
            "RL.TOKENBUCKET",
            "{x}a",
            "300",
            "1",
            "1000000000",
            "PEEK",
            "COST",
            "0",
        ],
    );
    let c3 = ints(
        &mut c,
        &[
            "RL.TOKENBUCKET",
            "{x}c",
            "1000",
            "1",
            "1000000000",
            "PEEK",
            "COST",
            "0",
        ],
    );
    assert_eq!(
        (a[2], c3[2]),
        (100, 800),
        "denied requests consumed nothing"
    );
}

#[test]
fn fixed_and_gcra_dimensions_take_part_and_refund() {
    let server = Server::start();
    let mut c = server.client();
    // (The fixed window is 10^12 ms long, so it cannot end, and reset, during the test.)
    let args: Vec<String> =
        "RL.ALL 2 {g}f {g}g FIXED 5 1000000000000 GCRA 10 3600000 BURST 3 COST 2"
            .split(' ')
            .map(str::to_string)
            .collect();
    let (allowed, _, dims) = all(&mut c, &args);
    assert_eq!(allowed, 1);
    assert_eq!((dims[0][1], dims[1][0], dims[1][1]), (3, 3, 1));
    // The GCRA burst (3) is now the tightest: 2 more are denied there, nothing is taken.
    let (allowed, denied, dims) = all(&mut c, &args);
    assert_eq!((allowed, denied), (0, 2));
    assert_eq!(dims[0][1], 3);
    let r = ints(
        &mut c,
        &[
            "RL.REFUND",
            "{g}g",
            "GCRA",
            "10",
            "3600000",
            "BURST",
            "3",
            "COST",
            "2",
        ],
    );
    assert_eq!(&r[..3], &[2, 3, 3]);
    let r = ints(
        &mut c,
        &["RL.REFUND", "{g}f", "FIXED", "5", WIDE, "COST", "1"],
    );
    assert_eq!(&r[..3], &[1, 5, 4]);
    assert_eq!(all(&mut c, &args).0, 1);
    assert_eq!(
        error(&mut c, &["RL.ALL", "1", "x", "GCRA", "10", "1000", "BURST"]),
        "ERR spec 1: option BURST needs a value: burst must be an integer between 1 and 1000000000000000"
    );
}

#[test]
fn log_dimensions_take_part_and_refund() {
    let server = Server::start();
    let mut c = server.client();
    let args: Vec<String> = "RL.ALL 2 {l}log {l}tb LOG 3 3600000 TOKENBUCKET 10 1 3600000"
        .split(' ')
        .map(str::to_string)
        .collect();
    for _ in 0..3 {
        assert_eq!(all(&mut c, &args).0, 1);
    }
    let before = frozen(&mut c, "{l}tb");
    let (allowed, denied, dims) = all(&mut c, &args);
    assert_eq!((allowed, denied), (0, 1));
    assert!(dims[0][2] > 0);
    assert_eq!(frozen(&mut c, "{l}tb"), before, "the bucket gave nothing");
    let r = ints(
        &mut c,
        &["RL.REFUND", "{l}log", "LOG", "3", "3600000", "COST", "2"],
    );
    assert_eq!(&r[..3], &[2, 3, 2]);
    assert_eq!(all(&mut c, &args).0, 1);
}

/// 16 keys (the most whose per-call data the module keeps on the stack) and 40 (beyond it,
/// with `rl.max-all-keys` raised, and more arguments than the dispatcher keeps on the stack):
/// the same all-or-nothing answers either way.
#[test]
fn calls_of_sixteen_and_of_forty_keys_are_all_or_nothing_alike() {
    let server = Server::start();
    let mut c = server.client();
    let _: () = query(&mut c, &["CONFIG", "SET", "rl.max-all-keys", "40"]);
    for n in [16usize, 40] {
        let keys: Vec<String> = (0..n).map(|i| format!("{{many}}:{n}:{i}")).collect();
        let mut args = vec!["RL.ALL".to_string(), n.to_string()];
        args.extend(keys.iter().cloned());
        for i in 0..n {
            let spec = if i % 2 == 0 {
                "TOKENBUCKET 10 1 600000"
            } else {
                "SLIDING 10 600000"
            };
            args.extend(spec.split(' ').map(str::to_string));
        }
        let (allowed, denied, dims) = all(&mut c, &args);
        assert_eq!((allowed, denied, dims.len()), (1, 0, n), "{n} keys");
        assert!(dims.iter().all(|d| d[..3] == [10, 9, 0]), "{n}: {dims:?}");
        // The last key is exhausted elsewhere: the next call takes nothing anywhere.
        let last = &keys[n - 1];
        ints(&mut c, &["RL.SLIDING", last, "10", "600000", "COST", "9"]);
        let before: Vec<_> = keys.iter().map(|k| snapshot(&mut c, k).0).collect();
        let (allowed, denied, dims) = all(&mut c, &args);
        assert_eq!(
            (allowed, denied),
            (0, i64::try_from(n).unwrap()),
            "{n} keys"
        );
        assert!(dims[n - 1][2] > 0, "{n}: the last key says when to retry");
        assert!(
            dims[..n - 1].iter().all(|d| d[..3] == [10, 9, 0]),
            "{n}: {dims:?}"
        );
        let after: Vec<_> = keys.iter().map(|k| snapshot(&mut c, k).0).collect();
        assert_eq!(before, after, "{n} keys: a denied call changed a key");
    }
}

#[test]
fn costs_per_key_are_taken_together_or_not_at_all() {
    let server = Server::start();
    let mut c = server.client();
    let call = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["RL.ALL", "2", "a", "b", "SLIDING", "10", WIDE]
            .iter()
            .chain(&["SLIDING", "10", WIDE])
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let left = |dims: &[Vec<i64>]| dims.iter().map(|d| d[1]).collect::<Vec<_>>();
    let (allowed, denied, dims) = all(&mut c, &call(&["COSTS", "3", "5"]));
    assert_eq!((allowed, denied, left(&dims)), (1, 0, vec![7, 5]));
    // b has 5 left: a cost of 6 there refuses the request, and a's cost of 1 is not taken.
    let before = (frozen(&mut c, "a"), frozen(&mut c, "b"));
    let (allowed, denied, dims) = all(&mut c, &call(&["cOsTs", "1", "6"]));
    assert_eq!((allowed, denied, left(&dims)), (0, 2, vec![7, 5]));
    assert_eq!((frozen(&mut c, "a"), frozen(&mut c, "b")), before);
    let (allowed, denied, dims) = all(&mut c, &call(&["COSTS", "1", "5", "PEEK"]));
    assert_eq!((allowed, denied, left(&dims)), (1, 0, vec![6, 0]));
    assert_eq!((frozen(&mut c, "a"), frozen(&mut c, "b")), before);
    let (allowed, denied, dims) = all(&mut c, &call(&["COSTS", "1", "5"]));
    assert_eq!((allowed, denied, left(&dims)), (1, 0, vec![6, 0]));

    let before = (frozen(&mut c, "a"), frozen(&mut c, "b"));
    for (extra, expected) in [
        (&["COSTS", "1"][..], "ERR COSTS needs one cost per key (2)"),
        (&["COSTS"][..], "ERR COSTS needs one cost per key (2)"),
        (
            &["COSTS", "1", "1", "COST", "2"][..],
            "ERR COST and COSTS cannot be given together",
        ),
        (
            &["PEEK", "COSTS", "1", "1"][..],
            "ERR unknown option 'COSTS'",
        ),
    ] {
        let args = call(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let e = error(&mut c, &refs);
        assert!(e.starts_with(expected), "{extra:?}: {e}");
    }
    let args = call(&["COSTS", "1", "x"]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(error(&mut c, &refs).contains("cost"));
    assert_eq!((frozen(&mut c, "a"), frozen(&mut c, "b")), before);
}
