//! Writes replicate as their effect (`SET key value PXAT abs_ms`), never as the RL.* call:
//! a replica, an AOF replay and an RDB reload hold the same bytes and the same absolute
//! expiry as the master, and calls that write nothing send nothing.

use redis_rl_testkit::ops::limiter_calls;
use redis_rl_testkit::*;
use std::collections::BTreeMap;
use std::time::Duration;

const SLOW: &str = "1000000000";
const WIDE: &str = "1000000000000";

/// A mix of calls: first calls, repeated calls, denials, impossible costs, PEEK, COST 0,
/// changed parameters. Every period is a minute or more, so no key expires during a test.
const TRAFFIC: &[&[&str]] = &[
    &["RL.TOKENBUCKET", "tb:free", "100", "100", "60000"],
    &[
        "RL.TOKENBUCKET",
        "tb:free",
        "100",
        "100",
        "60000",
        "COST",
        "10",
    ],
    &["RL.TOKENBUCKET", "tb:free", "50", "100", "60000"],
    &["RL.TOKENBUCKET", "tb:slow", "10", "10", SLOW, "COST", "10"],
    &["RL.TOKENBUCKET", "tb:slow", "10", "10", SLOW],
    &["RL.TOKENBUCKET", "tb:slow", "10", "10", SLOW, "COST", "11"],
    &["RL.TOKENBUCKET", "tb:frac", "7", "3", "100000", "COST", "2"],
    &["RL.TOKENBUCKET", "tb:peek", "10", "10", "60000", "PEEK"],
    &[
        "RL.TOKENBUCKET",
        "tb:zero",
        "10",
        "10",
        "60000",
        "COST",
        "0",
    ],
    &[
        "RL.TOKENBUCKET",
        "tb:never",
        "10",
        "10",
        "60000",
        "COST",
        "11",
    ],
    &["RL.SLIDING", "sw:wide", "10", WIDE, "COST", "4"],
    &["RL.SLIDING", "sw:wide", "10", WIDE, "COST", "4"],
    &["RL.SLIDING", "sw:wide", "10", WIDE, "COST", "4"],
    &["RL.SLIDING", "sw:min", "100", "60000"],
    &["RL.SLIDING", "sw:min", "100", "120000", "COST", "5"],
    &["RL.SLIDING", "sw:peek", "10", "60000", "PEEK"],
    &["RL.SLIDING", "sw:zero", "10", "60000", "COST", "0"],
    &["RL.SLIDING", "sw:never", "10", "60000", "COST", "11"],
    &[
        "RL.QUOTA", "q:month", "10", "MONTH", "TZ", "330", "ANCHOR", "31", "COST", "4",
    ],
    &[
        "RL.QUOTA", "q:month", "10", "MONTH", "TZ", "330", "ANCHOR", "31", "COST", "7",
    ],
    &[
        "RL.QUOTA", "q:force", "10", "week", "TZ", "-300", "COST", "12", "FORCE",
    ],
    &["RL.QUOTA", "q:peek", "10", "YEAR", "PEEK"],
];

/// Keys that only saw calls which write nothing.
const NEVER_WRITTEN: [&str; 7] = [
    "tb:peek", "tb:zero", "tb:never", "sw:peek", "sw:zero", "sw:never", "q:peek",
];

/// Keys TRAFFIC writes, each once as is and once inside the MULTI.
const WRITTEN_KEYS: usize = 2 * 7;

/// Runs TRAFFIC, then the same kinds of calls inside one MULTI; returns how many calls wrote.
fn traffic(c: &mut redis::Connection) -> usize {
    let writes = |args: &[&str], reply: &[i64]| {
        let peek = args.contains(&"PEEK");
        let cost_zero = args.windows(2).any(|w| w == ["COST", "0"]);
        usize::from(reply[0] == 1 && !peek && !cost_zero)
    };
    let mut written = 0;
    for args in TRAFFIC {
        written += writes(args, &ints(c, args));
    }
    let mut pipe = redis::pipe();
    pipe.atomic();
    for args in TRAFFIC {
        pipe.add_command(command(
            &args
                .iter()
                .map(|a| a.replace(':', ":multi:"))
                .collect::<Vec<_>>(),
        ));
    }
    let replies: Vec<Vec<i64>> = pipe.query(c).expect("MULTI");
    for (args, reply) in TRAFFIC.iter().zip(&replies) {
        written += writes(args, reply);
    }
    written
}

/// Every key with its bytes and absolute expiry.
fn dataset(c: &mut redis::Connection) -> BTreeMap<String, (Option<Vec<u8>>, i64)> {
    let keys: Vec<String> = query(c, &["KEYS", "*"]);
    keys.into_iter()
        .map(|k| {
            let state = frozen(c, &k);
            (k, state)
        })
        .collect()
}

fn set_calls(c: &mut redis::Connection) -> i64 {
    info_field(c, "commandstats", "cmdstat_set")
        .and_then(|v| v.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

fn master_offset(c: &mut redis::Connection) -> String {
    info_field(c, "replication", "master_repl_offset").expect("master_repl_offset")
}

#[test]
fn a_replica_holds_the_same_bytes_and_absolute_expiry() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let (mut m, mut r) = (master.client(), replica.client());

    let written = traffic(&mut m);
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);

    let on_master = dataset(&mut m);
    for key in NEVER_WRITTEN {
        assert!(!on_master.contains_key(key), "{key} was written");
    }
    assert_eq!(on_master.len(), WRITTEN_KEYS, "{:?}", on_master.keys());
    assert_eq!(dataset(&mut r), on_master);
    for key in on_master.keys() {
        let value: Vec<u8> = query(&mut m, &["GET", key]);
        assert_eq!(query::<Vec<u8>>(&mut r, &["GET", key]), value, "{key}");
    }
    // The replica applied SETs, one per write, and never ran a limiter.
    assert_eq!(set_calls(&mut r), written as i64);
    assert_eq!(limiter_calls(&mut r), 0);
    // The replica reaches the master's offset: nothing else went down the stream. (Polled:
    // WAIT can return on the replica's periodic ACK before it has read the GETACK that WAIT
    // itself sent, which the master's offset already counts.)
    let offset = master_offset(&mut m);
    wait_until(
        "the replica to reach the master's offset",
        Duration::from_secs(10),
        || info_field(&mut r, "replication", "master_repl_offset").as_deref() == Some(&offset),
    );
    assert_eq!(master_offset(&mut m), offset);
}

#[test]
fn calls_that_write_nothing_send_nothing_to_the_replica() {
    let master = Server::start_with(&MASTER_ARGS);
    let _replica = Server::start_replica_of(&master);
    let mut m = master.client();
    ints(
        &mut m,
        &["RL.TOKENBUCKET", "tb", "10", "10", SLOW, "COST", "10"],
    );
    ints(&mut m, &["RL.SLIDING", "sw", "10", WIDE, "COST", "10"]);
    query::<()>(&mut m, &["SET", "text", "hello"]);
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    let offset = master_offset(&mut m);
    for args in [
        &["RL.TOKENBUCKET", "tb", "10", "10", SLOW][..],
        &["RL.TOKENBUCKET", "tb", "10", "10", SLOW, "COST", "0"],
        &["RL.TOKENBUCKET", "tb", "10", "10", SLOW, "COST", "11"],
        &["RL.TOKENBUCKET", "new", "10", "10", SLOW, "PEEK"],
        &["RL.SLIDING", "sw", "10", WIDE],
        &["RL.SLIDING", "sw", "10", WIDE, "COST", "0"],
        &["RL.SLIDING", "new", "10", WIDE, "COST", "1", "PEEK"],
    ] {
        ints(&mut m, args);
    }
    for args in [
        &["RL.TOKENBUCKET", "tb", "0", "10", SLOW][..],
        &["RL.TOKENBUCKET", "sw", "10", "10", SLOW],
        &["RL.SLIDING", "text", "10", WIDE],
        &["RL.SLIDING", "sw", "10"],
    ] {
        error(&mut m, args);
    }
    assert_eq!(
        master_offset(&mut m),
        offset,
        "a call that wrote nothing replicated"
    );
    ints(&mut m, &["RL.SLIDING", "new", "10", WIDE]);
    assert_ne!(master_offset(&mut m), offset, "a write did not replicate");
}

#[test]
fn a_replica_refuses_limiter_calls() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let mut r = replica.client();
    for args in [
        &["RL.TOKENBUCKET", "k", "10", "10", "1000"][..],
        &["RL.SLIDING", "k", "10", "1000", "PEEK"],
    ] {
        assert_eq!(
            error(&mut r, args),
            "READONLY You can't write against a read only replica."
        );
    }
}

#[test]
fn a_bucket_that_takes_ages_to_refill_replicates_too() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let (mut m, mut r) = (master.client(), replica.client());
    // Valid parameters whose refill time (10^19 ms) is beyond what an expiry can hold.
    let reply = ints(
        &mut m,
        &[
            "RL.TOKENBUCKET",
            "k",
            "10000000",
            "1",
            WIDE,
            "COST",
            "10000000",
        ],
    );
    assert_eq!(reply[..4], [1, 10_000_000, 0, 0]);
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    assert_eq!(dataset(&mut r), dataset(&mut m));
}

const AOF: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];

#[test]
fn an_aof_reload_restores_bytes_and_absolute_expiry() {
    let mut first = Server::start_with(&AOF);
    let mut c = first.client();
    traffic(&mut c);
    let before = dataset(&mut c);
    assert_eq!(before.len(), WRITTEN_KEYS);
    let log = aof_bytes(&first);
    assert!(contains(&log, b"PXAT"), "no SET ... PXAT in the AOF");
    assert!(!contains(&log, b"RL.TOKENBUCKET") && !contains(&log, b"RL.SLIDING"));

    first.kill();
    let mut second = Server::start_in(Some(first.dir.clone()), &AOF);
    let mut c = second.client();
    assert_eq!(dataset(&mut c), before, "after replaying the AOF");

    // The same after a rewrite of the AOF (an RDB preamble plus new writes).
    query::<String>(&mut c, &["BGREWRITEAOF"]);
    wait_until("the AOF rewrite", Duration::from_secs(20), || {
        info_field(&mut c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut c, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    ints(&mut c, &["RL.SLIDING", "sw:after", "10", WIDE]);
    let before = dataset(&mut c);
    second.kill();
    let third = Server::start_in(Some(first.dir.clone()), &AOF);
    assert_eq!(dataset(&mut third.client()), before, "after a rewrite");
}

#[test]
fn an_rdb_reload_restores_bytes_and_absolute_expiry() {
    let mut first = Server::start();
    let mut c = first.client();
    traffic(&mut c);
    let before = dataset(&mut c);
    query::<()>(&mut c, &["SAVE"]);
    first.kill();
    let second = Server::start_in(Some(first.dir.clone()), &[]);
    assert_eq!(dataset(&mut second.client()), before);
}
