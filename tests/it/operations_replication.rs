//! Replication at scale: a master, its replica and a replica of that replica take 100k random
//! calls across every RL.* command the build has (from several connections, pipelined, some
//! keys expiring during the run) and end up holding the same bytes and absolute expiry for
//! every key. Then the replica is promoted (`REPLICAOF NO ONE`), traffic continues on it, the
//! old master follows it, and all three still agree.

use redis_rl_testkit::ops::*;
use redis_rl_testkit::*;
use std::time::Duration;

/// Calls in each of the two rounds on the first master.
const ROUND: u64 = 50_000;
/// Calls on the promoted replica.
const AFTER_FAILOVER: u64 = 20_000;
/// Connections sending at once.
const THREADS: u64 = 4;
const PIPELINE: usize = 1_000;
const KEYS_PER_KIND: u64 = 600;

/// Sends `calls` random calls to `server` from [`THREADS`] connections; `seed` makes the run
/// reproducible (up to the interleaving).
fn traffic(server: &Server, mix: &Mix, calls: u64, seed: u64) {
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let mut c = server.client();
                let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(t));
                let mut left = calls / THREADS;
                while left > 0 {
                    let n = (left as usize).min(PIPELINE);
                    let batch: Vec<Vec<String>> = (0..n).map(|_| mix.call(&mut rng)).collect();
                    send(&mut c, &batch);
                    left -= n as u64;
                }
            });
        }
    });
}

fn offset(c: &mut redis::Connection) -> i64 {
    info_int(c, "replication", "master_repl_offset")
}

/// Waits until `server` has applied the replication stream up to `target`.
fn caught_up(server: &Server, target: i64) {
    let mut c = server.client();
    wait_until("a replica to catch up", Duration::from_secs(30), || {
        offset(&mut c) >= target
    });
}

fn link_up(server: &Server) {
    let mut c = server.client();
    wait_until("the replication link", Duration::from_secs(30), || {
        info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up")
    });
}

/// A replica of `master` that itself syncs its own replicas at once.
fn start_chained_replica(master: &Server) -> Server {
    let port = master.port.to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", &port];
    args.extend(MASTER_ARGS);
    let replica = Server::start_with(&args);
    link_up(&replica);
    replica
}

/// Reads `primary` then each copy, and checks every copy holds what `primary` holds.
/// Returns how many keys had to be present everywhere.
fn assert_all_same(primary: &Server, copies: &[(&str, &Server)]) -> usize {
    let mut p = primary.client();
    let original = dataset(&mut p);
    let read: Vec<_> = copies
        .iter()
        .map(|(name, s)| (*name, dataset(&mut s.client())))
        .collect();
    let horizon = server_time_ms(&mut p) + 50;
    let mut required = 0;
    for (name, copy) in &read {
        required = assert_same(name, &original, copy, horizon);
    }
    assert!(
        required > original.len() / 2,
        "only {required} of {} keys outlive the comparison",
        original.len()
    );
    required
}

#[test]
fn a_chain_of_replicas_holds_the_same_state_after_100k_calls_and_a_failover() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = start_chained_replica(&master);
    let sub = Server::start_replica_of(&replica);
    let mut m = master.client();
    let commands = available(&mut m);
    let mix = Mix::new(commands.clone(), KEYS_PER_KIND, true);
    println!("commands: {commands:?}");

    // Round one, then until short-lived keys expire on the master (DELs go down the chain),
    // then round two, which recreates some of them.
    let started = std::time::Instant::now();
    traffic(&master, &mix, ROUND, 1);
    wait_until(
        "keys to expire on the master",
        Duration::from_secs(15),
        || info_int(&mut m, "stats", "expired_keys") > 0,
    );
    traffic(&master, &mix, ROUND, 2);
    println!("{} calls in {:?}", 2 * ROUND, started.elapsed());
    let expired = info_int(&mut m, "stats", "expired_keys");

    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "10000"]), 1);
    let target = offset(&mut m);
    caught_up(&replica, target);
    caught_up(&sub, target);
    let compared = assert_all_same(&master, &[("replica", &replica), ("sub-replica", &sub)]);
    println!("before failover: {compared} keys equal on 3 nodes, {expired} expired during the run");
    // Replicas applied effects; they never ran a limiter.
    assert_eq!(limiter_calls(&mut replica.client()), 0);
    assert_eq!(limiter_calls(&mut sub.client()), 0);

    // Failover: the replica becomes the master, its replica stays with it, the old master
    // follows it.
    let mut r = replica.client();
    query::<()>(&mut r, &["REPLICAOF", "NO", "ONE"]);
    query::<()>(
        &mut m,
        &["REPLICAOF", "127.0.0.1", &replica.port.to_string()],
    );
    link_up(&master);
    link_up(&sub);
    assert_eq!(
        error(&mut m, &["RL.TOKENBUCKET", "tb:0", "1", "1", "60000"]),
        "READONLY You can't write against a read only replica."
    );

    traffic(&replica, &mix, AFTER_FAILOVER, 3);
    assert_eq!(query::<i64>(&mut r, &["WAIT", "2", "10000"]), 2);
    let target = offset(&mut r);
    caught_up(&master, target);
    caught_up(&sub, target);
    let compared = assert_all_same(&replica, &[("old master", &master), ("sub-replica", &sub)]);
    println!("after failover: {compared} keys equal on 3 nodes");
}

/// RL.STATE is read-only, so a replica answers it (the limiting commands get READONLY,
/// tested in replication.rs).
#[test]
fn a_replica_answers_rl_state() {
    let master = Server::start_with(&MASTER_ARGS);
    let mut m = master.client();
    if !available(&mut m).contains(&"RL.STATE") {
        println!("RL.STATE not in this build: skipped");
        return;
    }
    let replica = Server::start_replica_of(&master);
    ints(&mut m, &["RL.TOKENBUCKET", "k", "10", "10", "60000"]);
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    let mut r = replica.client();
    let on_replica: redis::Value = query(&mut r, &["RL.STATE", "k"]);
    assert!(
        matches!(on_replica, redis::Value::Array(_) | redis::Value::Map(_)),
        "{on_replica:?}"
    );
    let missing: redis::Value = query(&mut r, &["RL.STATE", "nothing"]);
    assert_eq!(missing, redis::Value::Nil);
}
