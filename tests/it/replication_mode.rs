//! The replication mode (`src/replication.rs`): a master with nothing listening hands its
//! calls to `ReplicateVerbatim` (`INFO rl` `replication_mode:verbatim`); as soon as a
//! listener may appear it replicates effects again, so that replicas and the AOF hold the
//! master's bytes and absolute expiries through a full sync, a partial resync from the
//! backlog, `CONFIG SET appendonly yes` at runtime, an AOF rewrite, a failover, MULTI/EXEC
//! and scripts; and no RL call ever reaches a replica or the AOF (`writes_replayed` stays 0).

use redis_rl_testkit::ops::*;
use redis_rl_testkit::*;
use std::collections::BTreeMap;
use std::time::Duration;

const KEYS_PER_KIND: u64 = 100;

fn mode(c: &mut redis::Connection) -> String {
    info_field(c, "rl", "rl_replication_mode").unwrap_or_default()
}

fn wait_for_mode(c: &mut redis::Connection, expected: &str) {
    wait_until(
        &format!("replication_mode {expected}"),
        Duration::from_secs(10),
        || mode(c) == expected,
    );
}

/// `calls` random calls of every command, then a MULTI/EXEC and a script that write.
fn traffic(c: &mut redis::Connection, mix: &Mix, calls: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let random: Vec<Vec<String>> = (0..calls).map(|_| mix.call(&mut rng)).collect();
    for batch in random.chunks(500) {
        send(c, batch);
    }
    let mut pipe = redis::pipe();
    pipe.atomic();
    for i in 0..5 {
        let key = |kind: &str| format!("multi:{kind}:{seed}:{i}");
        pipe.add_command(command(&["RL.TOKENBUCKET", &key("tb"), "10", "1", "60000"]));
        pipe.add_command(command(&[
            "RL.SLIDING",
            &key("sw"),
            "10",
            "60000",
            "COST",
            "0",
        ]));
        pipe.add_command(command(&["RL.FIXED", &key("fw"), "10", "60000"]));
    }
    let _: redis::Value = pipe.query(c).expect("MULTI/EXEC");
    let script = "redis.call('RL.TOKENBUCKET', KEYS[1], 10, 1, 60000) \
                  return redis.call('RL.GCRA', KEYS[2], 10, 60000)";
    let keys = [format!("lua:{seed}:a"), format!("lua:{seed}:b")];
    let _: Vec<i64> = query(c, &["EVAL", script, "2", &keys[0], &keys[1]]);
}

/// Waits until `replica` has everything `master` sent, then compares their datasets.
fn assert_replica_holds_the_masters_bytes(
    what: &str,
    m: &mut redis::Connection,
    r: &mut redis::Connection,
    ran_before: i64,
) {
    assert_eq!(query::<i64>(m, &["WAIT", "1", "5000"]), 1, "{what}: WAIT");
    let offset = info_field(m, "replication", "master_repl_offset");
    wait_until(
        &format!("{what}: the replica's offset"),
        Duration::from_secs(10),
        || info_field(r, "replication", "master_repl_offset") == offset,
    );
    // Keys that expire within a few seconds (an RL.REFUND or a release can leave a limiter
    // idle, and its key then expires after the TTL slack) may expire between the two reads.
    let soon = server_time_ms(m) + 5_000;
    let lasting = |data: BTreeMap<String, (Vec<u8>, i64)>| {
        data.into_iter()
            .filter(|(_, (_, expiry))| *expiry == -1 || *expiry > soon)
            .collect::<BTreeMap<_, _>>()
    };
    let on_master = lasting(dataset(m));
    let on_replica = lasting(dataset(r));
    assert!(on_master.len() > 100, "{what}: too few keys");
    let differ: Vec<&String> = on_master
        .keys()
        .chain(on_replica.keys())
        .filter(|k| on_master.get(*k) != on_replica.get(*k))
        .collect();
    assert!(
        differ.is_empty(),
        "{what}: {} keys differ: {:?}",
        differ.len(),
        &differ[..differ.len().min(5)]
    );
    assert_eq!(
        limiter_calls(r),
        ran_before,
        "{what}: the replica ran RL calls"
    );
    assert_eq!(info_int(r, "rl", "rl_writes_replayed"), 0, "{what}");
}

#[test]
fn a_replica_holds_the_masters_bytes_through_full_sync_partial_resync_and_failover() {
    let master = Server::start_with(&MASTER_ARGS);
    let mut m = master.client();
    let mix = Mix::new(available(&mut m), KEYS_PER_KIND, false);
    wait_for_mode(&mut m, "verbatim");
    send(&mut m, &mix.first_calls(5));
    traffic(&mut m, &mix, 1_000, 1);
    let dirty = info_int(&mut m, "persistence", "rdb_changes_since_last_save");
    assert!(dirty > 0, "verbatim writes count for save points");

    // Full sync: the replica's REPLCONF/PSYNC switch the master to effects before the
    // backlog exists.
    let replica = Server::start_replica_of(&master);
    let mut r = replica.client();
    assert_eq!(mode(&mut m), "effects");
    traffic(&mut m, &mix, 1_000, 2);
    assert_replica_holds_the_masters_bytes("after a full sync", &mut m, &mut r, 0);

    // Partial resync from the backlog: the link drops, writes go on, the replica resumes.
    let partial = info_int(&mut m, "stats", "sync_partial_ok");
    let _: i64 = query(&mut m, &["CLIENT", "KILL", "TYPE", "replica"]);
    traffic(&mut m, &mix, 500, 3);
    wait_until("the partial resync", Duration::from_secs(20), || {
        info_int(&mut m, "stats", "sync_partial_ok") > partial
    });
    traffic(&mut m, &mix, 500, 4);
    assert_replica_holds_the_masters_bytes("after a partial resync", &mut m, &mut r, 0);
    assert_eq!(
        mode(&mut m),
        "effects",
        "a master with a replica stays in effects"
    );

    // Failover: the replica becomes the master, the old master its replica.
    let _: String = query(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let port = replica.port.to_string();
    let _: String = query(&mut m, &["REPLICAOF", "127.0.0.1", &port]);
    wait_until("the old master to follow", Duration::from_secs(30), || {
        info_field(&mut m, "replication", "master_link_status").as_deref() == Some("up")
    });
    assert_eq!(mode(&mut r), "effects");
    let ran_as_master = limiter_calls(&mut m);
    traffic(&mut r, &mix, 1_000, 5);
    assert_replica_holds_the_masters_bytes("after a failover", &mut r, &mut m, ran_as_master);
}

#[test]
fn the_aof_holds_the_masters_bytes_when_enabled_at_runtime_and_rewritten() {
    let mut first = Server::start();
    let mut c = first.client();
    let mix = Mix::new(available(&mut c), KEYS_PER_KIND, false);
    wait_for_mode(&mut c, "verbatim");
    send(&mut c, &mix.first_calls(5));
    traffic(&mut c, &mix, 1_000, 6);

    // CONFIG SET appendonly yes: effects at once (the AOF starts with a rewrite of the
    // dataset, then appends what follows).
    let _: String = query(&mut c, &["CONFIG", "SET", "appendfsync", "always"]);
    let _: String = query(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    assert_eq!(mode(&mut c), "effects");
    traffic(&mut c, &mix, 1_000, 7);
    let rewritten = |c: &mut redis::Connection| {
        info_field(c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(c, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    };
    wait_until("the first AOF rewrite", Duration::from_secs(20), || {
        rewritten(&mut c)
    });
    let _: String = query(&mut c, &["BGREWRITEAOF"]);
    traffic(&mut c, &mix, 500, 8);
    wait_until("the AOF rewrite", Duration::from_secs(20), || {
        rewritten(&mut c)
    });
    traffic(&mut c, &mix, 500, 9);
    assert_eq!(mode(&mut c), "effects", "AOF on: effects");

    let log = aof_bytes(&first);
    for name in &mix.commands {
        assert!(!contains(&log, name.as_bytes()), "{name} is in the AOF");
    }
    let before = dataset(&mut c);
    first.kill();
    let second = Server::start_in(
        Some(first.dir.clone()),
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let mut c2 = second.client();
    let after = dataset(&mut c2);
    assert_same(
        "after replaying the AOF",
        &before,
        &after,
        server_time_ms(&mut c2),
    );
    assert_eq!(info_int(&mut c2, "rl", "rl_writes_replayed"), 0);

    // AOF off again: back to verbatim after the periodic check.
    let _: String = query(&mut c2, &["CONFIG", "SET", "appendonly", "no"]);
    wait_for_mode(&mut c2, "verbatim");
}

#[test]
fn an_rl_call_replayed_from_an_aof_is_counted() {
    // An AOF in the single-file layout of Redis 6 (loaded and upgraded at start) holding an
    // RL call itself, as a wrong prediction would have written it.
    let dir = std::env::temp_dir().join(format!("rl-test-replayed-aof-{}", std::process::id()));
    let call = ["RL.TOKENBUCKET", "k", "10", "10", "60000"];
    let mut aof = format!("*{}\r\n", call.len());
    for arg in call {
        aof += &format!("${}\r\n{arg}\r\n", arg.len());
    }
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("appendonly.aof"), aof).expect("write AOF");
    let second = Server::start_in(Some(dir), &["--appendonly", "yes"]);
    let mut c = second.client();
    assert_eq!(info_int(&mut c, "rl", "rl_writes_replayed"), 1);
    assert_eq!(query::<i64>(&mut c, &["EXISTS", "k"]), 1);
}
