//! The Lua twin (`lua/rl.lua`) against the module on one server, for what `luatwin` does not
//! drive: RL.THROTTLE, RL.CONCURRENCY, RL.STATE and RL.RESET (random sequences on a key of
//! the module, one of the twin and one both write in turn), values the module refuses as
//! corrupt, the error named when a call has several, and that the shipped file is the one
//! `make lua` assembles from lua/src and the registry.

use redis::Value;
use redis_rl_testkit::*;
use std::time::Instant;

const SCRIPT: &str = include_str!("../../lua/rl.lua");

fn load(conn: &mut redis::Connection) {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(SCRIPT)
        .query(conn)
        .unwrap();
    assert_eq!(name, "redisrl");
}

/// `RL.X key args...` through the module (`twin` false) or the twin's `FCALL rl 1 key RL.X
/// args...`.
fn run(
    conn: &mut redis::Connection,
    twin: bool,
    key: &str,
    argv: &[String],
) -> redis::RedisResult<Value> {
    let mut cmd;
    if twin {
        cmd = redis::cmd("FCALL");
        cmd.arg("rl").arg(1).arg(key).arg(argv);
    } else {
        cmd = redis::cmd(&argv[0]);
        cmd.arg(key).arg(&argv[1..]);
    }
    cmd.query(conn)
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

/// RL.STATE's reply as its pairs sorted by name, in the same kind of reply: the module
/// sends its pairs in a fixed order, the twin in its Lua table's (a map in RESP3, its pairs
/// flattened in RESP2, from both).
fn by_name(v: &Value) -> Value {
    let mut pairs: Vec<(Value, Value)> = match v {
        Value::Map(pairs) => pairs.clone(),
        Value::Array(items) => items
            .chunks(2)
            .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or(Value::Nil)))
            .collect(),
        other => return other.clone(),
    };
    pairs.sort_by_key(|(k, _)| format!("{k:?}"));
    match v {
        Value::Map(_) => Value::Map(pairs),
        _ => Value::Array(pairs.into_iter().flat_map(|(k, v)| [k, v]).collect()),
    }
}

/// A reply as text: integers, strings and nil, flattened.
fn flat(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flat(i, out)),
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            flat(k, out);
            flat(v, out);
        }),
        Value::Int(i) => out.push(i.to_string()),
        Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => out.push(s.clone()),
        Value::Nil => out.push("nil".into()),
        other => out.push(format!("{other:?}")),
    }
}

/// Same replies, except the fields that move with the clock, which may differ by
/// `tolerance` ms: RL.STATE's `*_ms` instants and TTL, RL.THROTTLE's waits (seconds: one
/// more) and RL.CONCURRENCY's retry.
fn assert_same(
    cmd: &str,
    m: &redis::RedisResult<Value>,
    t: &redis::RedisResult<Value>,
    tolerance: i64,
    what: &str,
) {
    match (m, t) {
        (Err(m), Err(t)) => assert_eq!(error_text(m), error_text(t), "{what}"),
        (Ok(m), Ok(t)) => {
            assert_eq!(
                std::mem::discriminant(m),
                std::mem::discriminant(t),
                "{what}: another kind of reply: module {m:?}, twin {t:?}"
            );
            let (m, t) = if cmd == "RL.STATE" {
                (by_name(m), by_name(t))
            } else {
                (m.clone(), t.clone())
            };
            let (mut a, mut b) = (vec![], vec![]);
            flat(&m, &mut a);
            flat(&t, &mut b);
            assert_eq!(a.len(), b.len(), "{what}: module {a:?}, twin {b:?}");
            for i in 0..a.len() {
                let timed = match cmd {
                    "RL.STATE" => {
                        i > 0
                            && (a[i - 1].ends_with("_ms")
                                && a[i - 1] != "window_ms"
                                && a[i - 1] != "period_ms"
                                && a[i - 1] != "refill_ms")
                    }
                    "RL.THROTTLE" => i >= 3,
                    "RL.CONCURRENCY" => i == 3,
                    _ => false,
                };
                let close = |x: &str, y: &str, by: i64| match (x.parse::<i64>(), y.parse::<i64>()) {
                    (Ok(x), Ok(y)) => (x - y).abs() <= by,
                    _ => x == y,
                };
                let by = if cmd == "RL.THROTTLE" { 1 } else { tolerance };
                assert!(
                    if timed {
                        close(&a[i], &b[i], by)
                    } else {
                        a[i] == b[i]
                    },
                    "{what}: field {i}: module {a:?}, twin {b:?}"
                );
            }
        }
        _ => panic!("{what}: module {m:?}, twin {t:?}"),
    }
}

#[test]
fn twin_is_assembled_from_lua_src_and_the_registry() {
    assert!(
        redis_rl_testkit::twin::assemble() == SCRIPT,
        "lua/rl.lua is stale: run `make lua`"
    );
}

#[test]
fn throttle_concurrency_state_and_reset_as_the_module() {
    let server = Server::start();
    load(&mut server.client());
    for protocol in PROTOCOLS {
        let mut conn = server.client_speaking(protocol);
        query::<()>(&mut conn, &["FLUSHALL"]);
        throttle_concurrency_state_and_reset(&mut conn);
    }
}

fn throttle_concurrency_state_and_reset(conn: &mut redis::Connection) {
    let began = Instant::now();
    for seed in 0..12u64 {
        let mut r = Rng::new(seed * 7_919 + 11);
        let throttle = strings(&[
            "RL.THROTTLE",
            &r.range(0, 5).to_string(),
            &r.range(1, 5).to_string(),
            &r.pick(&[60, 3_600, 86_400]).to_string(),
        ]);
        let limit = r.range(1, 4).to_string();
        let ids = ["a", "b", "c", "worker-with-a-longer-id", "e"];
        let keys: Vec<[String; 3]> = ["th", "cc"]
            .iter()
            .map(|k| ["m", "t", "x"].map(|who| format!("{{n{seed}}}:{k}:{who}")))
            .collect();
        for step in 0..40 {
            let (which, argv) = match r.below(10) {
                0..=2 => {
                    let mut a = throttle.clone();
                    if r.percent(50) {
                        a.push(r.range(0, 3).to_string());
                    }
                    (0, a)
                }
                3..=5 => {
                    // Two lease lengths: a lease taken again with the shorter one stops
                    // being the newest, and the table's order changes.
                    let lease = r.pick(&["600000", "300000"]);
                    let mut a =
                        strings(&["RL.CONCURRENCY", &limit, lease, "ACQUIRE", r.pick(&ids)]);
                    if r.percent(20) {
                        a.push("PEEK".into());
                    }
                    (1, a)
                }
                6 => (1, strings(&["RL.CONCURRENCY", "RELEASE", r.pick(&ids)])),
                7 | 8 => (r.below(2) as usize, strings(&["RL.STATE"])),
                _ => (r.below(2) as usize, strings(&["RL.RESET"])),
            };
            let [mk, tk, xk] = &keys[which];
            let m = run(conn, false, mk, &argv);
            let t = run(conn, true, tk, &argv);
            let x = run(conn, r.percent(50), xk, &argv);
            let tolerance = began.elapsed().as_millis() as i64 + 2;
            let what = format!("seed {seed} step {step} {argv:?}");
            assert_same(&argv[0], &m, &t, tolerance, &what);
            assert_same(
                &argv[0],
                &m,
                &x,
                tolerance,
                &format!("{what} (alternating key)"),
            );
            if which == 1 {
                // A lease table's key lives until its newest lease has expired (plus the
                // TTL slack): the twin's writes in place move it as the module's do.
                let at = |conn: &mut redis::Connection, key: &str| -> i64 {
                    redis::cmd("PEXPIRETIME").arg(key).query(conn).unwrap()
                };
                let expected = at(conn, mk);
                for key in [tk, xk] {
                    let got = at(conn, key);
                    assert!(
                        (got - expected).abs() <= tolerance || (got < 0 && got == expected),
                        "{what}: expiry of {key}: {got}, module's {expected}"
                    );
                }
            }
        }
    }
}

/// The twin's fast code writes a lease taken again in place while it stays the newest: a
/// shorter lease that stops being the newest reorders the table and keeps the key as long as
/// the newest lease (RL.STATE's instants and the key's expiry as the module's).
#[test]
fn a_newest_lease_taken_again_shorter_as_the_module() {
    let server = Server::start();
    load(&mut server.client());
    for protocol in PROTOCOLS {
        let mut conn = server.client_speaking(protocol);
        query::<()>(&mut conn, &["FLUSHALL"]);
        a_newest_lease_taken_again_shorter(&mut conn);
    }
}

fn a_newest_lease_taken_again_shorter(conn: &mut redis::Connection) {
    let began = Instant::now();
    let calls = [
        ["2", "600000", "ACQUIRE", "a"],
        ["2", "600000", "ACQUIRE", "b"],
        ["2", "600000", "ACQUIRE", "b"],
        ["2", "300000", "ACQUIRE", "b"],
        ["2", "300000", "ACQUIRE", "b"],
    ];
    for (step, call) in calls.iter().enumerate() {
        let mut argv = strings(&["RL.CONCURRENCY"]);
        argv.extend(strings(call));
        let m = run(conn, false, "{s}:m", &argv);
        let t = run(conn, true, "{s}:t", &argv);
        let tolerance = began.elapsed().as_millis() as i64 + 2;
        assert_same(&argv[0], &m, &t, tolerance, &format!("step {step}"));
        let state = strings(&["RL.STATE"]);
        let (m, t) = (
            run(conn, false, "{s}:m", &state),
            run(conn, true, "{s}:t", &state),
        );
        // The TTLs are read a moment apart too.
        let tolerance = began.elapsed().as_millis() as i64 + 2;
        assert_same(
            "RL.STATE",
            &m,
            &t,
            tolerance,
            &format!("state after step {step}"),
        );
        let at = |conn: &mut redis::Connection, key: &str| -> i64 {
            redis::cmd("PEXPIRETIME").arg(key).query(conn).unwrap()
        };
        let (m, t) = (at(conn, "{s}:m"), at(conn, "{s}:t"));
        assert!(
            (m - t).abs() <= tolerance,
            "step {step}: key expires at {t}, module's at {m}"
        );
    }
}

#[test]
fn corrupt_values_and_the_first_error_as_the_module() {
    let server = Server::start();
    load(&mut server.client());
    for protocol in PROTOCOLS {
        let mut conn = server.client_speaking(protocol);
        query::<()>(&mut conn, &["FLUSHALL"]);
        corrupt_values_and_the_first_error(&mut conn);
    }
}

fn corrupt_values_and_the_first_error(conn: &mut redis::Connection) {
    let set = |conn: &mut redis::Connection, key: &str, value: &[u8]| {
        let _: () = redis::cmd("SET").arg(key).arg(value).query(conn).unwrap();
    };
    // A token bucket (version 2) whose instant is the varint of 2^64: over 64 bits.
    let mut instant_2_64 = b"\0RL\x02T".to_vec();
    instant_2_64.extend([0x80; 9]);
    instant_2_64.extend([0x02, 0xe8, 0x07, 0x00]);
    // A lease table whose header claims more leases than its list holds, and a list (version
    // 1) whose id runs past the end.
    let mut table = b"\0RL\x02C".to_vec();
    table.extend([1, 0, 2, 0, 1, 0, 1, 0, 0xff, 0xff, 0xff, 0xff]);
    table.extend([0; 2 * 15]);
    let values: &[(&str, &[u8])] = &[
        ("{c}:tb", &instant_2_64),
        ("{c}:table", &table),
        ("{c}:list", b"\0RL\x01C\x05\x09ab"),
        ("{c}:text", b"hello"),
        ("{c}:empty", b""),
        ("{c}:newer", b"\0RL\x07T"),
    ];
    for (key, value) in values {
        set(conn, key, value);
        for argv in [
            strings(&["RL.TOKENBUCKET", "10", "1", "1000"]),
            strings(&["RL.THROTTLE", "1", "1", "1"]),
            strings(&["RL.CONCURRENCY", "2", "1000", "ACQUIRE", "a"]),
            strings(&["RL.CONCURRENCY", "RELEASE", "a"]),
            strings(&["RL.STATE"]),
        ] {
            let m = run(conn, false, key, &argv);
            let t = run(conn, true, key, &argv);
            assert_same(&argv[0], &m, &t, 1000, &format!("{key} {argv:?}"));
            assert!(t.is_err(), "{key} {argv:?}: the twin accepted {t:?}");
        }
    }
    let _: () = redis::cmd("HSET")
        .arg("{c}:hash")
        .arg("f")
        .arg("v")
        .query(conn)
        .unwrap();
    for key in ["{c}:hash", "{c}:text", "{c}:tb", "{c}:missing"] {
        // Each side on its own copy: a reset deletes.
        let copy = format!("{key}:copy");
        let _: Value = redis::cmd("COPY").arg(key).arg(&copy).query(conn).unwrap();
        let argv = strings(&["RL.RESET"]);
        let m = run(conn, false, key, &argv);
        let t = run(conn, true, &copy, &argv);
        assert_same("RL.RESET", &m, &t, 0, key);
    }
    // Several errors in one call: the one the module names.
    for argv in [
        &[
            "RL.TOKENBUCKET",
            "1000000000000000",
            "1",
            "1000000000000",
            "COST",
            "1",
            "COST",
            "2",
        ][..],
        &[
            "RL.TOKENBUCKET",
            "1000000000000000",
            "1",
            "1000000000000",
            "FOO",
        ],
        &[
            "RL.GCRA",
            "1",
            "1000000000000",
            "BURST",
            "1000000000000000",
            "COST",
            "x",
        ],
        &[
            "RL.GCRA",
            "1",
            "1000000000000",
            "BURST",
            "1000000000000000",
            "BURST",
            "2",
        ],
        &["RL.THROTTLE", "999999999999999", "1", "1000000000", "x"],
        &["RL.THROTTLE", "x", "0", "1"],
        &["RL.CONCURRENCY", "0", "1000", "ACQUIRE", ""],
        &["RL.CONCURRENCY", "1", "1000", "TAKE", "a"],
        &[
            "RL.CONCURRENCY",
            "1",
            "1000",
            "ACQUIRE",
            "a",
            "PEEK",
            "PEEK",
        ],
        &["RL.CONCURRENCY", "RELEASE"],
        &["RL.STATE", "extra"],
    ] {
        let argv = strings(argv);
        let m = run(conn, false, "{c}:fresh", &argv);
        let t = run(conn, true, "{c}:fresh", &argv);
        assert!(m.is_err(), "{argv:?}: the module accepted it");
        assert_same(&argv[0], &m, &t, 0, &format!("{argv:?}"));
    }
}

/// A log in the twin's earlier layout (version 2: a total, then instants and counts) is
/// read and continued by the twin as by the module, and the twin's own layout (version 3:
/// running counts) by the module: a fleet moves between them without a reset.
#[test]
fn the_twins_earlier_log_layout_is_read_and_continued() {
    let server = Server::start();
    let mut conn = server.client();
    load(&mut conn);
    let time: Vec<String> = redis::cmd("TIME").query(&mut conn).unwrap();
    let now = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    let mut v2 = [
        &b"\0RL\x02L"[..],
        &60_000u64.to_le_bytes(),
        &3u16.to_le_bytes(),
    ]
    .concat();
    for (at, count) in [(now - 3_000_000, 2u16), (now - 1_000_000, 1)] {
        v2.extend_from_slice(&at.to_le_bytes());
        v2.extend_from_slice(&count.to_le_bytes());
    }
    for key in ["{l}:m", "{l}:t"] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(v2.as_slice())
            .query(&mut conn)
            .unwrap();
    }
    // Twice each: the twin's general path reads version 2, its fast code then version 3.
    for step in 0..2 {
        let argv = strings(&["RL.LOG", "10", "60000", "COST", "2"]);
        let m = run(&mut conn, false, "{l}:m", &argv);
        let t = run(&mut conn, true, "{l}:t", &argv);
        assert_same("RL.LOG", &m, &t, 0, &format!("step {step}"));
    }
    let stored: Vec<u8> = redis::cmd("GET").arg("{l}:t").query(&mut conn).unwrap();
    assert_eq!(&stored[..5], b"\0RL\x03L");
    assert_eq!(stored.len(), 16 + 4 * 10, "{stored:?}");
    // The module reads the twin's log as its own (the instants of the two writes may fall
    // in different milliseconds).
    let state =
        |conn: &mut redis::Connection, key: &str| run(conn, false, key, &strings(&["RL.STATE"]));
    assert_same(
        "RL.STATE",
        &state(&mut conn, "{l}:m"),
        &state(&mut conn, "{l}:t"),
        1_000,
        "state",
    );
    let m = run(
        &mut conn,
        false,
        "{l}:m",
        &strings(&["RL.LOG", "10", "60000", "COST", "3"]),
    );
    let t = run(
        &mut conn,
        false,
        "{l}:t",
        &strings(&["RL.LOG", "10", "60000", "COST", "3"]),
    );
    assert_same("RL.LOG", &m, &t, 0, "the module on the twin's log");
}

/// The running counts of the twin's log stay below 2^24: a call that would reach it is
/// written by the twin's general path, which starts them again from 0 (the same log).
#[test]
fn the_twins_running_counts_start_again_below_2_24() {
    let server = Server::start();
    let mut conn = server.client();
    load(&mut conn);
    let time: Vec<String> = redis::cmd("TIME").query(&mut conn).unwrap();
    let now = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    let top = (1u32 << 24) - 3;
    let mut v3 = [
        &b"\0RL\x03L"[..],
        &60_000u64.to_le_bytes(),
        &top.to_le_bytes()[..3],
    ]
    .concat();
    v3.extend_from_slice(&(now - 1_000_000).to_le_bytes()[..7]);
    v3.extend_from_slice(&(top + 1).to_le_bytes()[..3]);
    for key in ["{r}:m", "{r}:t"] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(v3.as_slice())
            .query(&mut conn)
            .unwrap();
    }
    for cost in ["1", "2"] {
        let argv = strings(&["RL.LOG", "10", "60000", "COST", cost]);
        let m = run(&mut conn, false, "{r}:m", &argv);
        let t = run(&mut conn, true, "{r}:t", &argv);
        assert_same("RL.LOG", &m, &t, 0, &format!("cost {cost}"));
    }
    let stored: Vec<u8> = redis::cmd("GET").arg("{r}:t").query(&mut conn).unwrap();
    let run_at = |at: usize| u32::from_le_bytes([stored[at], stored[at + 1], stored[at + 2], 0]);
    assert_eq!(stored.len(), 16 + 3 * 10, "{stored:?}");
    assert_eq!(
        [run_at(13), run_at(23), run_at(33), run_at(43)],
        [0, 1, 2, 4]
    );
}
