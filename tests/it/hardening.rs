//! Hardening: a damaged value under a memory cap, keyspace notifications on master and replica,
//! one `rl.max-cost` rule for every way a cost arrives, and values whose encoding a refused or
//! read-only call must leave as it is.

use redis_rl_testkit::*;
use std::time::{Duration, Instant};

/// `OBJECT ENCODING key`.
fn encoding(c: &mut redis::Connection, key: &str) -> String {
    query(c, &["OBJECT", "ENCODING", key])
}

/// The server's own process id (`INFO server`).
fn server_pid(c: &mut redis::Connection) -> u32 {
    info_field(c, "server", "process_id")
        .expect("process_id")
        .parse()
        .expect("numeric pid")
}

/// The virtual memory size of a process, in bytes (`VmSize` in `/proc/<pid>/status`).
fn vm_size(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmSize");
    kb * 1024
}

/// A 300 MB string with a sliding log's header (or any other) is refused as corrupt by the
/// command, RL.STATE and RL.RESET's look, by a server whose address space leaves room for
/// the value but not for reserving entries in proportion to it. Before the fix, RL.LOG
/// reserved 8 bytes per byte of value (2.4 GB) and the server aborted.
#[test]
fn a_huge_damaged_value_is_refused_by_a_memory_capped_server() {
    const SIZE: u64 = 300_000_000;
    let server = Server::start();
    let mut c = server.client();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let pid = server_pid(&mut c);
    // Room for the value (and a copy of it) and some slack, far from 8 times the value.
    let cap = vm_size(pid) + 2 * SIZE + 400_000_000;
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--as={cap}")])
        .status()
        .expect("run prlimit");
    assert!(status.success(), "prlimit failed");
    let last = (SIZE - 1).to_string();
    for (key, header, call) in [
        (
            "big:log",
            &b"\0RL\x01L\x01"[..],
            vec!["RL.LOG", "big:log", "10", "1000"],
        ),
        (
            "big:lease",
            &b"\0RL\x01C\x01"[..],
            vec!["RL.CONCURRENCY", "big:lease", "10", "1000", "ACQUIRE", "a"],
        ),
    ] {
        let start = Instant::now();
        let _: i64 = query(&mut c, &["SETRANGE", key, &last, "x"]);
        let _: i64 = command(&[&b"SETRANGE"[..], key.as_bytes(), b"0", header])
            .query(&mut c)
            .unwrap();
        let algorithm = if header[4] == b'L' {
            "sliding window log"
        } else {
            "concurrency"
        };
        let corrupt = format!("ERR key holds a corrupt redis-rl {algorithm} limiter");
        assert_eq!(error(&mut c, &call), corrupt);
        assert_eq!(error(&mut c, &["RL.STATE", key]), corrupt);
        let len: u64 = query(&mut c, &["STRLEN", key]);
        assert_eq!(len, SIZE, "the value is untouched");
        let reset: i64 = query(&mut c, &["RL.RESET", key]);
        assert_eq!(reset, 1);
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{key}: took {:?}",
            start.elapsed()
        );
    }
    let pong: String = query(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
}

/// One keyspace notification as a subscriber sees it: (channel, payload).
type Event = (String, String);

/// A connection for a subscriber that fails instead of waiting more than 10 s.
fn subscriber_connection(server: &Server) -> redis::Connection {
    let conn = server.client();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn
}

/// Subscribes to every keyspace and keyevent notification and to `marker`.
fn subscribe(pubsub: &mut redis::PubSub<'_>) {
    pubsub.psubscribe("__key*__:*").unwrap();
    pubsub.subscribe("marker").unwrap();
}

/// The notifications received until the message on `marker` (bounded: 10 s without a
/// message fails the test).
fn events_until_marker(pubsub: &mut redis::PubSub<'_>) -> Vec<Event> {
    let mut events = Vec::new();
    for _ in 0..10_000 {
        let msg = pubsub.get_message().expect("a notification within 10 s");
        let channel = msg.get_channel_name().to_string();
        let payload: String = msg.get_payload().unwrap();
        if channel == "marker" {
            return events;
        }
        events.push((channel, payload));
    }
    panic!("no marker after 10,000 notifications");
}

/// What a replica publishes for `SET key value PXAT t`: `set` then `expire`, each as a
/// keyspace then a keyevent notification.
fn set_events(key: &str) -> Vec<Event> {
    ["set", "expire"]
        .iter()
        .flat_map(|e| event(key, e))
        .collect()
}

/// What a replica publishes for an in-place change of a lease table: `setrange` (once per
/// changed range; [`collapse`] counts repeats once) then `expire` for `PEXPIREAT`.
fn setrange_events(key: &str) -> Vec<Event> {
    ["setrange", "expire"]
        .iter()
        .flat_map(|e| event(key, e))
        .collect()
}

/// The events with a keyspace + keyevent pair that repeats the pair before it dropped (an
/// in-place change publishes one `setrange` per changed range).
fn collapse(events: &[Event]) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for pair in events.chunks(2) {
        if out.len() < 2 || out[out.len() - 2..] != *pair {
            out.extend_from_slice(pair);
        }
    }
    out
}

/// The keyspace and keyevent notifications of `event` on `key` (database 0).
fn event(key: &str, event: &str) -> Vec<Event> {
    vec![
        (format!("__keyspace@0__:{key}"), event.to_string()),
        (format!("__keyevent@0__:{event}"), key.to_string()),
    ]
}

/// The master publishes for every RL write and deletion the notifications its replica
/// publishes when it applies the replicated effect (`SET ... PXAT`, or `SETRANGE` and
/// `PEXPIREAT` for a lease table changed in place, or `DEL`); denials, PEEK, COST 0, RL.STATE and a
/// release of a lease not held publish nothing. Before the fix, the master published none.
#[test]
fn master_and_replica_publish_the_same_keyspace_notifications() {
    let notify = ["--notify-keyspace-events", "KEA"];
    let master_args = [&MASTER_ARGS[..], &notify[..]].concat();
    let master = Server::start_with(&master_args);
    let port = master.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port, notify[0], notify[1]]);
    let mut link = replica.client();
    wait_until("the replica to sync", Duration::from_secs(30), || {
        info_field(&mut link, "replication", "master_link_status").as_deref() == Some("up")
    });
    let (mut m, mut r) = (
        subscriber_connection(&master),
        subscriber_connection(&replica),
    );
    let (mut on_master, mut on_replica) = (m.as_pubsub(), r.as_pubsub());
    subscribe(&mut on_master);
    subscribe(&mut on_replica);
    let mut c = master.client();
    let calls: &[(&[&str], Vec<Event>)] = &[
        (
            &["RL.TOKENBUCKET", "tb", "1", "1", "60000"],
            set_events("tb"),
        ),
        (&["RL.TOKENBUCKET", "tb", "1", "1", "60000"], vec![]),
        (&["RL.TOKENBUCKET", "tb", "1", "1", "60000", "PEEK"], vec![]),
        (
            &["RL.TOKENBUCKET", "tb", "1", "1", "60000", "COST", "0"],
            vec![],
        ),
        (&["RL.LOG", "lg", "1", "60000"], set_events("lg")),
        (&["RL.LOG", "lg", "1", "60000"], vec![]),
        (&["RL.STATE", "lg"], vec![]),
        // A new key, then a rebuild (two records for one lease), then changes in place.
        (
            &["RL.CONCURRENCY", "cc", "3", "60000", "ACQUIRE", "a"],
            set_events("cc"),
        ),
        (
            &["RL.CONCURRENCY", "cc", "3", "60000", "ACQUIRE", "b"],
            set_events("cc"),
        ),
        (
            &["RL.CONCURRENCY", "cc", "3", "60000", "ACQUIRE", "c"],
            setrange_events("cc"),
        ),
        (
            &["RL.CONCURRENCY", "cc", "3", "60000", "ACQUIRE", "a"],
            setrange_events("cc"),
        ),
        (
            &["RL.CONCURRENCY", "cc", "3", "60000", "ACQUIRE", "d"],
            vec![],
        ),
        (
            &["RL.CONCURRENCY", "cc", "3", "60000", "ACQUIRE", "d", "PEEK"],
            vec![],
        ),
        (
            &["RL.CONCURRENCY", "cc", "RELEASE", "a"],
            setrange_events("cc"),
        ),
        (&["RL.CONCURRENCY", "cc", "RELEASE", "zz"], vec![]),
        (
            &["RL.CONCURRENCY", "cc", "RELEASE", "b"],
            setrange_events("cc"),
        ),
        (
            &["RL.CONCURRENCY", "cc", "RELEASE", "c"],
            event("cc", "del"),
        ),
        (
            &["RL.ALL", "1", "all", "GCRA", "10", "60000"],
            set_events("all"),
        ),
        (
            &["RL.REFUND", "all", "GCRA", "10", "60000", "COST", "1"],
            set_events("all"),
        ),
        (&["RL.RESET", "tb"], event("tb", "del")),
        (&["RL.RESET", "tb"], vec![]),
    ];
    let mut expected = Vec::new();
    for (args, events) in calls {
        let _: redis::Value = command(args).query(&mut c).unwrap();
        expected.extend(events.iter().cloned());
    }
    let _: i64 = query(&mut c, &["PUBLISH", "marker", "end"]);
    let (on_master, on_replica) = (
        events_until_marker(&mut on_master),
        events_until_marker(&mut on_replica),
    );
    assert_eq!(on_master, on_replica, "master and replica");
    assert_eq!(collapse(&on_master), expected);
}

/// Every command with each way a cost can arrive: an explicit `COST`, RL.THROTTLE's
/// quantity, and the implicit cost of 1 when none is given.
const COMMANDS: &[&[&str]] = &[
    &["RL.TOKENBUCKET", "k", "100", "1", "60000"],
    &["RL.SLIDING", "k", "100", "60000"],
    &["RL.FIXED", "k", "100", "60000"],
    &["RL.GCRA", "k", "100", "60000"],
    &["RL.LOG", "k", "100", "60000"],
    &["RL.ALL", "1", "k", "TOKENBUCKET", "100", "1", "60000"],
];

/// True if a limiting call was allowed (the first field of its reply, RL.ALL's included).
fn allowed(c: &mut redis::Connection, args: &[&str]) -> bool {
    match command(args).query::<redis::Value>(c) {
        Ok(redis::Value::Array(fields)) => fields.first() == Some(&redis::Value::Int(1)),
        other => panic!("{args:?}: {other:?}"),
    }
}

/// `args` fails with exactly `expected` and leaves key `k` (and the key it names) untouched.
fn refused_keeps(c: &mut redis::Connection, args: &[&str], expected: &str) {
    let before = frozen(c, "k");
    refused_untouched(c, args, expected);
    assert_eq!(frozen(c, "k"), before, "{args:?} changed k");
}

/// `rl.max-cost` bounds every cost: `COST n`, RL.THROTTLE's quantity, the implicit cost of 1
/// (so with `rl.max-cost 0` only `COST 0` checks pass) and RL.REFUND's amount; a refused
/// call leaves the key untouched. Before the fix, RL.THROTTLE took any quantity and an
/// implicit cost passed `rl.max-cost 0`.
#[test]
fn max_cost_bounds_every_way_a_cost_arrives() {
    let server = Server::start();
    let mut c = server.client();
    let _: () = query(&mut c, &["CONFIG", "SET", "rl.max-cost", "10"]);
    let over = "ERR cost must be an integer between 0 and 10";
    for args in COMMANDS {
        let with = |cost: &'static str| [&args[..], &["COST", cost]].concat();
        refused_keeps(&mut c, &with("11"), over);
        assert!(allowed(&mut c, &with("10")), "{args:?} COST 10 is allowed");
        assert!(allowed(&mut c, args), "{args:?} with the implicit cost");
        let _: i64 = query(&mut c, &["DEL", "k"]);
    }
    refused_keeps(
        &mut c,
        &["RL.THROTTLE", "b", "99", "100", "60", "50"],
        "ERR quantity must be an integer between 0 and 10",
    );
    assert_eq!(
        ints(&mut c, &["RL.THROTTLE", "b", "99", "100", "60", "10"])[..3],
        [0, 100, 90]
    );
    refused_keeps(
        &mut c,
        &["RL.REFUND", "b", "GCRA", "100", "60000", "COST", "11"],
        over,
    );

    let _: () = query(&mut c, &["CONFIG", "SET", "rl.max-cost", "0"]);
    let zero = "ERR cost must be an integer between 0 and 0";
    for args in COMMANDS {
        refused_keeps(&mut c, args, zero);
        refused_keeps(&mut c, &[&args[..], &["PEEK"]].concat(), zero);
        refused_keeps(&mut c, &[&args[..], &["COST", "1"]].concat(), zero);
        let check = [&args[..], &["COST", "0"]].concat();
        assert!(allowed(&mut c, &check), "{args:?} COST 0 is a check");
        let _: i64 = query(&mut c, &["DEL", "k"]);
    }
    refused_keeps(
        &mut c,
        &["RL.THROTTLE", "d", "99", "100", "60"],
        "ERR quantity must be an integer between 0 and 0",
    );
    assert_eq!(
        ints(&mut c, &["RL.THROTTLE", "d", "99", "100", "60", "0"])[0],
        0
    );
    refused_keeps(
        &mut c,
        &["RL.REFUND", "b", "GCRA", "100", "60000", "COST", "1"],
        zero,
    );
}

/// A refused call, a denial, a PEEK, RL.STATE and a refused RL.RESET leave a value's
/// encoding as it is: an integer, an embedded string, a longer text (embedded on Valkey),
/// and on a replica a limiter as replication stored it. Before the fix, reading converted
/// them to raw strings.
#[test]
fn refused_and_read_only_calls_keep_the_encoding() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let mut c = master.client();
    let text60 = "x".repeat(60);
    // The longest strings each server may embed under the key `v`: 44 bytes on Redis 7,
    // 112 on Valkey 9.1 (see `store::may_be_embedded`).
    let (text44, text112) = ("x".repeat(44), "x".repeat(112));
    let refusing: &[&[&str]] = &[
        &["RL.TOKENBUCKET", "v", "10", "1", "60000"],
        &["RL.SLIDING", "v", "10", "60000"],
        &["RL.FIXED", "v", "10", "60000"],
        &["RL.GCRA", "v", "10", "60000"],
        &["RL.THROTTLE", "v", "10", "10", "60"],
        &["RL.LOG", "v", "10", "60000"],
        &["RL.CONCURRENCY", "v", "10", "60000", "ACQUIRE", "a"],
        &["RL.CONCURRENCY", "v", "RELEASE", "a"],
        &["RL.REFUND", "v", "LOG", "10", "60000", "COST", "1"],
        &["RL.STATE", "v"],
        &["RL.RESET", "v"],
    ];
    for value in ["12345", "hello", "123456", &text60] {
        let _: () = query(&mut c, &["SET", "v", value]);
        let before = encoding(&mut c, "v");
        for args in refusing {
            let _ = error(&mut c, args);
            assert_eq!(encoding(&mut c, "v"), before, "{value:?} after {args:?}");
        }
        let all = ["RL.ALL", "1", "v", "LOG", "10", "60000"];
        let _ = error(&mut c, &all);
        assert_eq!(encoding(&mut c, "v"), before, "{value:?} after RL.ALL");
    }

    // Texts of the longest length each server may embed, under RL.LOG and RL.CONCURRENCY
    // (fixed-size states of 8 to 45 bytes are read in place: see `store::LimiterKey::read`).
    for value in [&text44, &text112] {
        let _: () = query(&mut c, &["SET", "v", value]);
        let before = encoding(&mut c, "v");
        for args in &refusing[5..9] {
            let _ = error(&mut c, args);
            assert_eq!(encoding(&mut c, "v"), before, "{value:?} after {args:?}");
        }
    }

    // A log and a lease set copied as SET stores them (embedded when short): a denial, a
    // PEEK, RL.STATE and a refusal by another command keep the copy's encoding. (A
    // fixed-size state of this length is read in place: see `store::LimiterKey::read`.)
    let copies: &[(&[&str], &[&str], &[&str])] = &[
        (
            &["RL.LOG", "lim:log", "1", "60000"],
            &["RL.LOG", "copy", "1", "60000"],
            &["RL.CONCURRENCY", "copy", "RELEASE", "a"],
        ),
        (
            &["RL.CONCURRENCY", "lim:cc", "1", "60000", "ACQUIRE", "a"],
            &["RL.CONCURRENCY", "copy", "1", "60000", "ACQUIRE", "b"],
            &["RL.LOG", "copy", "1", "60000"],
        ),
    ];
    for (write, deny, other) in copies {
        assert!(allowed(&mut c, write));
        let bytes: Vec<u8> = query(&mut c, &["GET", write[1]]);
        let _: () = command(&[&b"SET"[..], b"copy", &bytes])
            .query(&mut c)
            .unwrap();
        let before = encoding(&mut c, "copy");
        assert!(!allowed(&mut c, deny), "{deny:?} is denied");
        assert!(!allowed(&mut c, &[&deny[..], &["PEEK"]].concat()));
        let _: redis::Value = query(&mut c, &["RL.STATE", "copy"]);
        let _ = error(&mut c, other);
        assert_eq!(encoding(&mut c, "copy"), before, "copy of {}", write[1]);
        let _: i64 = query(&mut c, &["DEL", "copy"]);
    }
    let writes: &[&[&str]] = &[
        &["RL.TOKENBUCKET", "lim:tb", "1", "1", "60000"],
        &["RL.GCRA", "lim:gcra", "1", "60000"],
    ];
    for args in writes {
        assert!(allowed(&mut c, args));
    }
    let mut r = replica.client();
    let offset: i64 = query(&mut c, &["INCR", "sync"]);
    wait_until("the replica to catch up", Duration::from_secs(30), || {
        query::<Option<i64>>(&mut r, &["GET", "sync"]) == Some(offset)
    });
    for key in ["lim:log", "lim:cc", "lim:tb", "lim:gcra"] {
        let before = encoding(&mut r, key);
        let _: redis::Value = query(&mut r, &["RL.STATE", key]);
        assert_eq!(encoding(&mut r, key), before, "{key} on the replica");
    }
}

/// A replica with `repl-diskless-load swapdb` loads a master's dataset asynchronously (the
/// module declares it safe: it keeps no state tied to the keyspace) and holds the limiters
/// byte for byte. Before, the server fell back to a blocking load ("Skipping diskless-load
/// because there are modules that are not aware of async replication").
#[test]
fn a_swapdb_replica_loads_asynchronously_with_the_module() {
    let master = Server::start_with(&MASTER_ARGS);
    let mut c = master.client();
    assert_eq!(
        ints(&mut c, &["RL.TOKENBUCKET", "tb", "10", "1", "60000"])[0],
        1
    );
    assert_eq!(ints(&mut c, &["RL.LOG", "lg", "10", "60000"])[0], 1);
    let log = std::env::temp_dir().join(format!("rl-swapdb-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let port = master.port.to_string();
    let replica = Server::start_with(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--repl-diskless-load",
        "swapdb",
        "--logfile",
        log.to_str().unwrap(),
    ]);
    let mut r = replica.client();
    wait_until("the replica to sync", Duration::from_secs(30), || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        text.contains("Swapping active DB with loaded DB"),
        "no async (swapdb) load in the replica's log:\n{text}"
    );
    for key in ["tb", "lg"] {
        assert_eq!(frozen(&mut r, key), frozen(&mut c, key), "{key}");
    }
}
