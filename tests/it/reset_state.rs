//! RL.RESET and RL.STATE against a real server: every kind of limiter, foreign data left
//! untouched, RESP2 and RESP3 replies, no writes from RL.STATE, replication (RL.RESET is
//! sent as DEL; RL.STATE runs on a replica), and the command flags.

use redis::Value;
use redis_rl_testkit::*;

/// A window or period so long that nothing expires or refills during a test.
const LONG: &str = "1000000000000";

/// One RL.STATE value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum V {
    Int(i64),
    Text(String),
}

fn v(value: &Value) -> V {
    match value {
        Value::Int(i) => V::Int(*i),
        Value::BulkString(b) => V::Text(String::from_utf8(b.clone()).expect("UTF-8")),
        Value::SimpleString(s) => V::Text(s.clone()),
        other => panic!("unexpected value {other:?}"),
    }
}

fn name(value: &Value) -> String {
    match v(value) {
        V::Text(s) => s,
        other => panic!("a field name, got {other:?}"),
    }
}

/// RL.STATE as (name, value) pairs in reply order, from a flat RESP2 array or a RESP3 map;
/// `None` for a nil reply.
fn state(c: &mut redis::Connection, key: &str) -> Option<Vec<(String, V)>> {
    match query::<Value>(c, &["RL.STATE", key]) {
        Value::Nil => None,
        Value::Array(items) => {
            assert_eq!(items.len() % 2, 0, "{items:?}");
            Some(
                items
                    .chunks(2)
                    .map(|pair| (name(&pair[0]), v(&pair[1])))
                    .collect(),
            )
        }
        Value::Map(pairs) => Some(pairs.iter().map(|(k, x)| (name(k), v(x))).collect()),
        other => panic!("RL.STATE {key}: unexpected reply {other:?}"),
    }
}

fn resp3(server: &Server) -> redis::Connection {
    let url = format!("{}?protocol=resp3", server.url());
    redis::Client::open(url)
        .expect("client")
        .get_connection()
        .expect("RESP3 connection")
}

fn text(s: &str) -> V {
    V::Text(s.to_string())
}

/// Checks the fields of a state: the algorithm first, `ttl_ms` last (within `ttl`), and in
/// between the expected fields (`None`: any value) in order.
fn assert_state(
    got: &[(String, V)],
    algorithm: &str,
    fields: &[(&str, Option<i64>)],
    ttl: std::ops::RangeInclusive<i64>,
) {
    assert_eq!(got.len(), fields.len() + 2, "{got:?}");
    assert_eq!(
        got[0],
        ("algorithm".to_string(), text(algorithm)),
        "{got:?}"
    );
    for ((name, value), (want_name, want)) in got[1..].iter().zip(fields) {
        assert_eq!(name, want_name, "{got:?}");
        match (value, want) {
            (V::Int(i), Some(w)) => assert_eq!(i, w, "{name} in {got:?}"),
            (V::Int(_), None) => {}
            (other, _) => panic!("{name}: {other:?}"),
        }
    }
    let (last, value) = got.last().unwrap();
    assert_eq!(last, "ttl_ms");
    match value {
        V::Int(t) => assert!(ttl.contains(t), "ttl_ms {t} not in {ttl:?}"),
        other => panic!("ttl_ms: {other:?}"),
    }
}

/// One key of every kind, each with a little traffic.
fn every_kind(c: &mut redis::Connection) -> Vec<(&'static str, &'static str)> {
    let calls: [(&str, &[&str], &str); 7] = [
        (
            "tb",
            &["RL.TOKENBUCKET", "tb", "10", "1", "1000000000", "COST", "3"],
            "token bucket",
        ),
        (
            "sw",
            &["RL.SLIDING", "sw", "10", LONG, "COST", "4"],
            "sliding window",
        ),
        (
            "fw",
            &["RL.FIXED", "fw", "10", LONG, "COST", "3"],
            "fixed window",
        ),
        ("gc", &["RL.GCRA", "gc", "10", LONG, "COST", "4"], "GCRA"),
        (
            "th",
            &["RL.THROTTLE", "th", "9", "10", "1000000", "2"],
            "GCRA",
        ),
        (
            "lg",
            &["RL.LOG", "lg", "10", LONG, "COST", "2"],
            "sliding window log",
        ),
        (
            "cc",
            &["RL.CONCURRENCY", "cc", "10", "1000000", "ACQUIRE", "job-1"],
            "concurrency",
        ),
    ];
    calls
        .iter()
        .map(|(key, args, algorithm)| {
            let r = ints(c, args);
            assert_eq!(r.len(), 5, "{args:?}");
            (*key, *algorithm)
        })
        .collect()
}

#[test]
fn reset_deletes_every_kind_of_limiter() {
    let server = Server::start();
    let mut c = server.client();
    let keys = every_kind(&mut c);
    // Our header, but a newer format, an unknown kind or damaged contents: still ours.
    for (key, value) in [
        (
            "newer",
            &b"\0RL\x03T and whatever a later version stores"[..],
        ),
        ("unknown", b"\0RL\x01?xyz"),
        ("damaged", b"\0RL\x01G\x01\x02"),
    ] {
        command::<&[u8]>(&[b"SET", key.as_bytes(), value])
            .query::<()>(&mut c)
            .unwrap();
    }
    for key in keys
        .iter()
        .map(|(k, _)| *k)
        .chain(["newer", "unknown", "damaged"])
    {
        assert_eq!(query::<i64>(&mut c, &["RL.RESET", key]), 1, "{key}");
        assert_eq!(query::<i64>(&mut c, &["EXISTS", key]), 0, "{key}");
        assert_eq!(query::<i64>(&mut c, &["RL.RESET", key]), 0, "{key} again");
    }
    // A reset limiter starts afresh.
    ints(&mut c, &["RL.FIXED", "fw", "2", LONG, "COST", "2"]);
    assert_eq!(ints(&mut c, &["RL.FIXED", "fw", "2", LONG])[0], 0);
    assert_eq!(query::<i64>(&mut c, &["RL.RESET", "fw"]), 1);
    assert_eq!(ints(&mut c, &["RL.FIXED", "fw", "2", LONG])[..3], [1, 2, 1]);
    assert_eq!(query::<i64>(&mut c, &["RL.RESET", "missing"]), 0);
    assert_eq!(query::<i64>(&mut c, &["DBSIZE"]), 1);
}

#[test]
fn reset_refuses_what_is_not_a_limiter_and_leaves_it_untouched() {
    let server = Server::start();
    let mut c = server.client();
    query::<()>(&mut c, &["SET", "text", "hello", "PX", "100000"]);
    query::<()>(&mut c, &["SET", "number", "42"]);
    command::<&[u8]>(&[b"SET", b"short", b"\0RL"])
        .query::<()>(&mut c)
        .unwrap();
    query::<()>(&mut c, &["RPUSH", "list", "a"]);
    query::<()>(&mut c, &["HSET", "hash", "a", "1"]);
    let not_ours = "ERR key holds a value that is not a redis-rl limiter";
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    for (key, text) in [
        ("text", not_ours),
        ("number", not_ours),
        ("short", not_ours),
        ("list", wrongtype),
        ("hash", wrongtype),
    ] {
        refused_untouched(&mut c, &["RL.RESET", key], text);
    }
    let arity = "ERR wrong number of arguments for 'RL.RESET' command";
    assert_eq!(error(&mut c, &["RL.RESET"]), arity);
    refused_untouched(&mut c, &["RL.RESET", "text", "list"], arity);
    assert_eq!(query::<i64>(&mut c, &["DBSIZE"]), 5);
}

#[test]
fn state_shows_each_algorithm_its_parameters_and_count() {
    let server = Server::start();
    let mut c = server.client();
    let now_ms = (server_time_us(&mut c) / 1000) as i64;
    every_kind(&mut c);
    let window_start = now_ms / 1_000_000_000_000 * 1_000_000_000_000;
    let long = 1_000_000_000_000i64;
    let ttl = |reset: i64| (reset + 1000 - 60_000)..=(reset + 1001);
    assert_state(
        &state(&mut c, "tb").unwrap(),
        "token bucket",
        &[
            ("refill_ms", Some(1_000_000_000)),
            ("tokens_at_update", Some(7)),
            ("updated_at_ms", None),
        ],
        ttl(3_000_000_000),
    );
    assert_state(
        &state(&mut c, "sw").unwrap(),
        "sliding window",
        &[
            ("window_ms", Some(long)),
            ("window_start_ms", Some(window_start)),
            ("previous", Some(0)),
            ("current", Some(4)),
            ("count", Some(4)),
        ],
        0..=2 * long,
    );
    assert_state(
        &state(&mut c, "fw").unwrap(),
        "fixed window",
        &[
            ("window_ms", Some(long)),
            ("window_start_ms", Some(window_start)),
            ("count", Some(3)),
        ],
        ttl(window_start + long - now_ms),
    );
    let gcra = state(&mut c, "gc").unwrap();
    assert_state(
        &gcra,
        "GCRA",
        &[
            ("limit", Some(10)),
            ("period_ms", Some(long)),
            ("tat_ms", None),
            ("used", Some(4)),
        ],
        ttl(4 * long / 10),
    );
    let V::Int(tat_ms) = gcra[3].1 else {
        panic!("{gcra:?}")
    };
    assert!((tat_ms - now_ms - 4 * long / 10).abs() < 60_000, "{gcra:?}");
    // RL.THROTTLE 9 10 1000000: 10 per 10^6 s, stored as a GCRA of 10 per 10^9 ms.
    assert_state(
        &state(&mut c, "th").unwrap(),
        "GCRA",
        &[
            ("limit", Some(10)),
            ("period_ms", Some(1_000_000_000)),
            ("tat_ms", None),
            ("used", Some(2)),
        ],
        ttl(200_000_000),
    );
    // Every algorithm is described, whatever fields it shows.
    for (key, algorithm) in [("lg", "sliding window log"), ("cc", "concurrency")] {
        let got = state(&mut c, key).unwrap();
        assert_eq!(got[0], ("algorithm".to_string(), text(algorithm)));
        assert_eq!(got.last().unwrap().0, "ttl_ms");
    }
    assert_eq!(state(&mut c, "missing"), None);
    // A key without expiry reports ttl_ms -1.
    query::<()>(&mut c, &["PERSIST", "fw"]);
    assert_eq!(state(&mut c, "fw").unwrap().last().unwrap().1, V::Int(-1));
}

#[test]
fn state_is_a_map_in_resp3_with_the_same_pairs() {
    let server = Server::start();
    let mut c = server.client();
    every_kind(&mut c);
    let mut c3 = resp3(&server);
    assert!(matches!(
        query::<Value>(&mut c3, &["RL.STATE", "gc"]),
        Value::Map(_)
    ));
    for key in ["tb", "sw", "fw", "gc", "th", "lg", "cc"] {
        let flat = state(&mut c, key).unwrap();
        let map = state(&mut c3, key).unwrap();
        let names = |s: &[(String, V)]| s.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&flat), names(&map), "{key}");
        assert_eq!(flat[0], map[0], "{key}");
        if !["lg", "cc"].contains(&key) {
            // The first parameter agrees too (instants and the TTL may have moved on).
            assert_eq!(flat[1], map[1], "{key}");
        }
    }
    assert_eq!(
        query::<Value>(&mut c3, &["RL.STATE", "missing"]),
        Value::Nil
    );
}

#[test]
fn state_never_writes() {
    let server = Server::start();
    let mut c = server.client();
    let keys = every_kind(&mut c);
    let dirty = info_field(&mut c, "persistence", "rdb_changes_since_last_save");
    for (key, _) in &keys {
        let before = frozen(&mut c, key);
        state(&mut c, key);
        state(&mut c, key);
        assert_eq!(frozen(&mut c, key), before, "{key}");
    }
    state(&mut c, "missing");
    assert_eq!(query::<i64>(&mut c, &["EXISTS", "missing"]), 0);
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_changes_since_last_save"),
        dirty
    );
}

#[test]
fn state_refuses_what_it_cannot_read_and_leaves_it_untouched() {
    let server = Server::start();
    let mut c = server.client();
    query::<()>(&mut c, &["SET", "text", "hello"]);
    query::<()>(&mut c, &["SADD", "set", "a"]);
    for (key, value) in [
        ("newer", &b"\0RL\x03G0123456789"[..]),
        ("unknown", b"\0RL\x01?xyz"),
        ("damaged", b"\0RL\x01G\x01\x02"),
        ("damaged_fixed", b"\0RL\x01F"),
    ] {
        command::<&[u8]>(&[b"SET", key.as_bytes(), value])
            .query::<()>(&mut c)
            .unwrap();
    }
    for (key, expected) in [
        (
            "text",
            "ERR key holds a value that is not a redis-rl limiter",
        ),
        (
            "set",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            "newer",
            "ERR key holds a redis-rl limiter in format version 3, this module reads version 1",
        ),
        (
            "unknown",
            "ERR key holds a redis-rl limiter of a kind this module does not know (tag 63)",
        ),
        ("damaged", "ERR key holds a corrupt redis-rl GCRA limiter"),
        (
            "damaged_fixed",
            "ERR key holds a corrupt redis-rl fixed window limiter",
        ),
    ] {
        refused_untouched(&mut c, &["RL.STATE", key], expected);
    }
    let arity = "ERR wrong number of arguments for 'RL.STATE' command";
    assert_eq!(error(&mut c, &["RL.STATE"]), arity);
    refused_untouched(&mut c, &["RL.STATE", "text", "set"], arity);
}

#[test]
fn reset_replicates_as_del_and_state_runs_on_a_replica() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let (mut m, mut r) = (master.client(), replica.client());
    let keys = every_kind(&mut m);
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    for (key, _) in &keys {
        assert_eq!(frozen(&mut r, key), frozen(&mut m, key), "{key}");
        let on_master = state(&mut m, key).unwrap();
        let on_replica = state(&mut r, key).unwrap();
        assert_eq!(on_master[0], on_replica[0], "{key}");
        assert_eq!(on_master.len(), on_replica.len(), "{key}");
    }
    assert!(error(&mut r, &["RL.RESET", "fw"]).starts_with("READONLY"));
    for (key, _) in &keys {
        assert_eq!(query::<i64>(&mut m, &["RL.RESET", key]), 1);
    }
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    assert_eq!(query::<i64>(&mut r, &["DBSIZE"]), 0);
    // The replica ran DELs, never RL.RESET itself (only the refused call above is counted).
    let stats: String = query(&mut r, &["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_del:calls=7,"), "{stats}");
    let reset = stats
        .lines()
        .find(|l| l.to_lowercase().starts_with("cmdstat_rl.reset:"));
    assert!(reset.is_none_or(|l| l.contains(":calls=0,")), "{stats}");
}

#[test]
fn commands_are_registered_with_their_flags() {
    let server = Server::start();
    let mut c = server.client();
    for (name, flags) in [
        ("rl.fixed", &["write", "denyoom", "fast"][..]),
        ("rl.gcra", &["write", "denyoom", "fast"]),
        ("rl.throttle", &["write", "denyoom", "fast"]),
        ("rl.reset", &["write", "fast"]),
        ("rl.state", &["readonly", "fast"]),
    ] {
        let info: Value = query(&mut c, &["COMMAND", "INFO", name]);
        let Value::Array(outer) = info else {
            panic!("{info:?}")
        };
        let Value::Array(entry) = &outer[0] else {
            panic!("{name}: {outer:?}")
        };
        assert_eq!(v(&entry[0]), text(&name.to_ascii_uppercase()));
        let Value::Array(got) = &entry[2] else {
            panic!("{entry:?}")
        };
        let mut got: Vec<String> = got.iter().map(name_of).collect();
        got.retain(|f| f != "module");
        got.sort();
        let mut want: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        want.sort();
        assert_eq!(got, want, "{name}");
        // firstkey, lastkey, step: 1, 1, 1.
        assert_eq!(
            entry[3..6].iter().map(v).collect::<Vec<_>>(),
            vec![V::Int(1), V::Int(1), V::Int(1)]
        );
    }
}

fn name_of(value: &Value) -> String {
    match value {
        Value::SimpleString(s) => s.clone(),
        other => name(other),
    }
}
