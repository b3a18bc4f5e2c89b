//! The stored format versions of the fixed-size states: version 1 (fixed-width fields, what
//! older modules wrote) is still read by the module and by the Lua twin, and becomes version
//! 2 (varints) on the next write, the same bytes as a version 2 key of the same state; a
//! replica of a master holding both versions holds the master's bytes.
//!
//! Every state here lies in the future of the server's clock (a bucket updated, a window
//! started, a GCRA arrival time a day ahead), so a call's result does not depend on when it
//! runs and keys written at different instants can be compared byte for byte.

use redis_rl_testkit::*;
use std::time::Duration;

const DAY_US: u64 = 86_400_000_000;

fn varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One limiter state in both versions, and a call that writes it.
struct Case {
    name: &'static str,
    v1: Vec<u8>,
    v2: Vec<u8>,
    /// The command and its arguments after the key.
    call: &'static [&'static str],
}

fn cases(future_us: u64) -> Vec<Case> {
    let header = |version: u8, tag: u8| vec![0, b'R', b'L', version, tag];
    let window_ms = 60_000u64;
    let start_ms = future_us / 1000 / window_ms * window_ms;
    let mut out = Vec::new();

    // Token bucket: updated_at_us (version 2: since 2020-01-01), refill_ms, level (tokens x
    // refill_ms x 1000).
    let (refill_ms, level) = (1_000u64, 7u128 * 1_000 * 1_000);
    let mut v1 = header(1, b'T');
    v1.extend(future_us.to_le_bytes());
    v1.extend(refill_ms.to_le_bytes());
    v1.extend(level.to_le_bytes());
    let mut v2 = header(2, b'T');
    varint(&mut v2, (future_us - 1_577_836_800_000_000).into());
    varint(&mut v2, refill_ms.into());
    varint(&mut v2, level);
    out.push(Case {
        name: "token bucket",
        v1,
        v2,
        call: &["RL.TOKENBUCKET", "10", "1", "1000"],
    });

    // Sliding window: window_ms, window_start (version 2: its index), previous, current.
    let mut v1 = header(1, b'S');
    for f in [window_ms, start_ms, 4, 2] {
        v1.extend(f.to_le_bytes());
    }
    let mut v2 = header(2, b'S');
    for f in [window_ms, start_ms / window_ms, 4, 2] {
        varint(&mut v2, f.into());
    }
    out.push(Case {
        name: "sliding window",
        v1,
        v2,
        call: &["RL.SLIDING", "100", "60000"],
    });

    // Fixed window: window_ms, window_start (version 2: its index), count.
    let mut v1 = header(1, b'F');
    for f in [window_ms, start_ms, 5] {
        v1.extend(f.to_le_bytes());
    }
    let mut v2 = header(2, b'F');
    for f in [window_ms, start_ms / window_ms, 5] {
        varint(&mut v2, f.into());
    }
    out.push(Case {
        name: "fixed window",
        v1,
        v2,
        call: &["RL.FIXED", "100", "60000"],
    });

    // GCRA: tat (in 1/limit us), limit, period_ms.
    let (limit, period_ms) = (10u64, 1_000u64);
    let tat = u128::from(future_us) * u128::from(limit);
    let mut v1 = header(1, b'G');
    v1.extend(tat.to_le_bytes());
    v1.extend(limit.to_le_bytes());
    v1.extend(period_ms.to_le_bytes());
    let mut v2 = header(2, b'G');
    varint(&mut v2, tat);
    varint(&mut v2, limit.into());
    varint(&mut v2, period_ms.into());
    out.push(Case {
        name: "GCRA",
        v1,
        v2,
        // A burst larger than a day of debt: the call is allowed with `tat` a day ahead.
        call: &["RL.GCRA", "10", "1000", "BURST", "1000000000"],
    });
    out
}

fn set(c: &mut redis::Connection, key: &str, value: &[u8]) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(3_600_000)
        .query::<()>(c)
        .expect("SET");
}

fn get(c: &mut redis::Connection, key: &str) -> Vec<u8> {
    query(c, &["GET", key])
}

/// The call on `key`, a PEEK or a write of one unit: the reply without its last field (the
/// time until the limiter is idle, which depends on the instant of the call).
fn call(c: &mut redis::Connection, case: &Case, key: &str, peek: bool) -> Vec<i64> {
    let mut args = vec![case.call[0], key];
    args.extend(&case.call[1..]);
    if peek {
        args.push("PEEK");
    }
    let mut reply: Vec<i64> = query(c, &args);
    reply.truncate(4);
    reply
}

/// The same write through the Lua twin (the library loaded as `rl`), as [`call`].
fn twin(c: &mut redis::Connection, case: &Case, key: &str) -> Vec<i64> {
    let mut args = vec!["FCALL", "rl", "1", key, case.call[0]];
    args.extend(&case.call[1..]);
    let mut reply: Vec<i64> = query(c, &args);
    reply.truncate(4);
    reply
}

#[test]
fn version_1_is_read_and_becomes_version_2_on_write_in_the_module_and_the_twin() {
    let server = Server::start();
    let mut c = server.client();
    let library = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/rl.lua"),
    )
    .expect("lua/rl.lua");
    let _: String = query(&mut c, &["FUNCTION", "LOAD", "REPLACE", &library]);
    let future = server_time_us(&mut c) + DAY_US;
    for case in cases(future) {
        let name = case.name;
        assert!(case.v2.len() <= 30, "{name}: {} bytes", case.v2.len());
        set(&mut c, "v1", &case.v1);
        set(&mut c, "v1:twin", &case.v1);
        set(&mut c, "v2", &case.v2);
        // Both versions read as the same state, and a read changes nothing.
        let peeked = call(&mut c, &case, "v2", true);
        assert_eq!(call(&mut c, &case, "v1", true), peeked, "{name}");
        assert_eq!(get(&mut c, "v1"), case.v1, "{name}: a read rewrote");
        // A write converts in the module: it writes the same version 2 bytes. The twin
        // writes the same state in version 1 (fixed-width fields it packs in one call) when
        // every field is below 2^53, else in version 2; the module reads it as that state.
        let written = call(&mut c, &case, "v2", false);
        assert_eq!(call(&mut c, &case, "v1", false), written, "{name}");
        assert_eq!(twin(&mut c, &case, "v1:twin"), written, "{name}: twin");
        let after = get(&mut c, "v2");
        assert_eq!(&after[..5], &case.v2[..5], "{name}");
        assert_ne!(after, case.v2, "{name}: the write changed nothing");
        assert_eq!(get(&mut c, "v1"), after, "{name}: module");
        let by_twin = get(&mut c, "v1:twin");
        assert!(
            by_twin[..3] == case.v1[..3] && matches!(by_twin[3], 1 | 2) && by_twin[4] == case.v1[4],
            "{name}: twin wrote {by_twin:?}"
        );
        let state = |c: &mut redis::Connection, key: &str| {
            let mut v: Vec<redis::Value> = query(c, &["RL.STATE", key]);
            v.truncate(v.len() - 2); // the TTL
            v
        };
        assert_eq!(
            state(&mut c, "v1:twin"),
            state(&mut c, "v2"),
            "{name}: twin"
        );
    }
}

#[test]
fn a_replica_of_a_master_holding_both_versions_holds_the_masters_bytes() {
    let master = Server::start_with(&MASTER_ARGS);
    let mut m = master.client();
    let future = server_time_us(&mut m) + DAY_US;
    let cases = cases(future);
    for (i, case) in cases.iter().enumerate() {
        set(&mut m, &format!("old:{i}"), &case.v1);
        set(&mut m, &format!("new:{i}"), &case.v2);
    }
    let replica = Server::start_replica_of(&master);
    let mut r = replica.client();
    // Writes after the sync: a version 1 key converted, a version 2 key continued.
    for (i, case) in cases.iter().enumerate() {
        call(&mut m, case, &format!("old:{i}"), false);
        call(&mut m, case, &format!("new:{i}"), false);
    }
    // One version 1 key left as it is.
    set(&mut m, "kept", &cases[0].v1);
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    let offset = info_field(&mut m, "replication", "master_repl_offset");
    wait_until("the replica's offset", Duration::from_secs(10), || {
        info_field(&mut r, "replication", "master_repl_offset") == offset
    });
    let keys: Vec<String> = query(&mut m, &["KEYS", "*"]);
    assert_eq!(keys.len(), 2 * cases.len() + 1);
    for key in &keys {
        assert_eq!(get(&mut r, key), get(&mut m, key), "{key}");
        assert_eq!(
            query::<i64>(&mut r, &["PEXPIRETIME", key]),
            query::<i64>(&mut m, &["PEXPIRETIME", key]),
            "{key}"
        );
    }
    for i in 0..cases.len() {
        assert_eq!(
            get(&mut m, &format!("old:{i}")),
            get(&mut m, &format!("new:{i}"))
        );
        assert_eq!(get(&mut m, &format!("old:{i}"))[3], 2);
    }
    assert_eq!(get(&mut r, "kept"), cases[0].v1);
}
