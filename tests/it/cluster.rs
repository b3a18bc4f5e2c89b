//! Redis Cluster: a 3-master cluster on loopback, started by the test. Calls route by key
//! (`MOVED` from the wrong node), RL.ALL across slots is refused with `CROSSSLOT`, and a
//! limiter key migrated to another node with `MIGRATE` keeps its state. On Valkey 9.1, a
//! 2-master cluster moves a slot with atomic slot migration (`CLUSTER MIGRATESLOTS`), with
//! writes made during the migration.

use redis_rl_testkit::*;
use std::time::Duration;

#[test]
fn calls_route_by_key_and_multi_slot_calls_are_refused() {
    let cluster = Cluster::start();
    let key = "api:K";
    let owner = cluster.owner(key);
    let mut right = owner.client();
    assert_eq!(
        ints(&mut right, &["RL.TOKENBUCKET", key, "10", "10", "1000"])[0],
        1
    );
    let mut wrong = cluster.other_than(owner).client();
    let e = error(&mut wrong, &["RL.TOKENBUCKET", key, "10", "10", "1000"]);
    let slot = cluster.slot(key);
    assert_eq!(e, format!("MOVED {slot} 127.0.0.1:{}", owner.port));
    let e = error(&mut wrong, &["RL.SLIDING", key, "10", "1000"]);
    assert!(e.starts_with("MOVED"), "{e}");

    // RL.ALL keys are declared through the getkeys API: one slot passes, two slots do not.
    let tagged = ["{api:K}:key", "{api:K}:ip"];
    let mut c = cluster.owner(tagged[0]).client();
    let reply: redis::Value = query(
        &mut c,
        &[
            "RL.ALL", "2", tagged[0], tagged[1], "SLIDING", "10", "1000", "SLIDING", "10", "1000",
        ],
    );
    assert!(matches!(reply, redis::Value::Array(_)), "{reply:?}");
    let (a, b) = ("user:1", "user:2");
    assert_ne!(cluster.slot(a), cluster.slot(b));
    let mut c = cluster.owner(a).client();
    let e = error(
        &mut c,
        &[
            "RL.ALL", "2", a, b, "SLIDING", "10", "1000", "SLIDING", "10", "1000",
        ],
    );
    assert!(e.starts_with("CROSSSLOT"), "{e}");
}

#[test]
fn a_migrated_limiter_keeps_its_state() {
    let cluster = Cluster::start();
    let key = "bucket:migrating";
    let source = cluster.owner(key);
    let target = cluster.other_than(source);
    let slot = cluster.slot(key).to_string();
    let mut src = source.client();
    let mut tgt = target.client();
    let taken = ints(
        &mut src,
        &["RL.TOKENBUCKET", key, "100", "1", "3600000", "COST", "60"],
    );
    assert_eq!(taken[2], 40);
    let before = frozen(&mut src, key);

    let (src_id, tgt_id) = (Cluster::node_id(source), Cluster::node_id(target));
    let _: () = query(
        &mut tgt,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id],
    );
    let _: () = query(
        &mut src,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &tgt_id],
    );
    let t0 = server_time_us(&mut src);
    let _: () = query(
        &mut src,
        &[
            "MIGRATE",
            "127.0.0.1",
            &target.port.to_string(),
            "",
            "0",
            "5000",
            "KEYS",
            key,
        ],
    );
    let t1 = server_time_us(&mut src);
    for node in &cluster.nodes {
        let _: () = query(
            &mut node.client(),
            &["CLUSTER", "SETSLOT", &slot, "NODE", &tgt_id],
        );
    }

    let after = frozen(&mut tgt, key);
    assert_eq!(after.0, before.0, "same bytes");
    // MIGRATE carries the TTL relative to the moment it runs: the target's absolute expiry
    // is later by the time the transfer took (at most the whole MIGRATE call, measured on
    // the server's clock; a loaded machine can take long), give or take 1 ms of rounding.
    let took_ms = i64::try_from((t1 - t0).div_ceil(1000)).unwrap();
    assert!(
        (-1..=took_ms + 1).contains(&(after.1 - before.1)),
        "expiry {} vs {}, MIGRATE took up to {took_ms} ms",
        after.1,
        before.1
    );
    let after = ints(
        &mut tgt,
        &["RL.TOKENBUCKET", key, "100", "1", "3600000", "COST", "40"],
    );
    assert_eq!(&after[..3], &[1, 100, 0]);
    let e = error(&mut src, &["RL.TOKENBUCKET", key, "100", "1", "3600000"]);
    assert!(e.starts_with("MOVED"), "{e}");
}

/// Valkey 9.1's atomic slot migration is not refused because of the module, and moves a
/// slot's limiters with their state, including every write the source acknowledged while
/// the migration ran: a token bucket (rewritten in place), a log and a set of leases.
/// Skipped on servers without `CLUSTER MIGRATESLOTS` (Redis 7.0).
#[test]
fn atomic_slot_migration_moves_limiters_with_the_writes_made_during_it() {
    let cluster = Cluster::start_nodes(2);
    let mut c = cluster.nodes[0].client();
    let info: Vec<redis::Value> = query(&mut c, &["COMMAND", "INFO", "CLUSTER|MIGRATESLOTS"]);
    if matches!(info.as_slice(), [redis::Value::Nil] | []) {
        eprintln!("skipped: this server has no CLUSTER MIGRATESLOTS");
        return;
    }
    let (tb, log, cc) = ("{asm}:tb", "{asm}:log", "{asm}:cc");
    let source = cluster.owner(tb);
    let target = cluster.other_than(source);
    let slot = cluster.slot(tb).to_string();
    let mut src = source.client();
    src.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let bucket = ["RL.TOKENBUCKET", tb, "100000", "1", "1000000000000"];
    let log_call = ["RL.LOG", log, "10000", "3600000"];
    let acquire = |id: &str| -> Vec<String> {
        ["RL.CONCURRENCY", cc, "100", "3600000", "ACQUIRE", id]
            .map(String::from)
            .to_vec()
    };
    assert_eq!(
        ints(&mut src, &[&bucket[..], &["COST", "60"]].concat())[0],
        1
    );
    assert_eq!(
        ints(&mut src, &[&log_call[..], &["COST", "5"]].concat())[0],
        1
    );
    let _: Vec<i64> = command(&acquire("before")).query(&mut src).unwrap();

    let target_id = Cluster::node_id(target);
    let _: () = query(
        &mut src,
        &[
            "CLUSTER",
            "MIGRATESLOTS",
            "SLOTSRANGE",
            &slot,
            &slot,
            "NODE",
            &target_id,
        ],
    );
    // Write until the source sends the slot's clients to the target (bounded).
    let (mut taken, mut logged) = (0i64, 0i64);
    let mut ids = std::collections::BTreeSet::from(["before".to_string()]);
    let mut moved = false;
    for i in 0..200_000 {
        let id = format!("w{}", i % 50);
        let call: Vec<String> = match i % 3 {
            0 => bucket.map(String::from).to_vec(),
            1 => log_call.map(String::from).to_vec(),
            _ => acquire(&id),
        };
        match command(&call).query::<Vec<i64>>(&mut src) {
            Ok(reply) => {
                assert_eq!(reply[0], 1, "{call:?}");
                match i % 3 {
                    0 => taken += 1,
                    1 => logged += 1,
                    _ => {
                        ids.insert(id);
                    }
                }
            }
            Err(e) => {
                let e = error_text(&e);
                assert!(e.starts_with("MOVED"), "{e}");
                moved = true;
                break;
            }
        }
    }
    assert!(moved, "the slot did not move");
    assert!(taken > 0, "no write landed during the migration");

    let mut tgt = target.client();
    let now = ints(&mut tgt, &[&bucket[..], &["COST", "0"]].concat());
    assert_eq!(now[2], 100_000 - 60 - taken, "token bucket");
    let state: Vec<redis::Value> = query(&mut tgt, &["RL.STATE", log]);
    let count = state
        .chunks(2)
        .find(|pair| pair[0] == redis::Value::BulkString(b"count".to_vec()))
        .map(|pair| pair[1].clone());
    assert_eq!(count, Some(redis::Value::Int(5 + logged)), "log");
    let state: Vec<redis::Value> = query(&mut tgt, &["RL.STATE", cc]);
    let held = state
        .chunks(2)
        .find(|pair| pair[0] == redis::Value::BulkString(b"held".to_vec()))
        .map(|pair| pair[1].clone());
    assert_eq!(held, Some(redis::Value::Int(ids.len() as i64)), "leases");
    let e = error(&mut src, &bucket);
    assert!(e.starts_with("MOVED"), "{e}");
}
