//! RL.CONCURRENCY against a real server: every reply field, renewal, RELEASE (the last one
//! deletes the key), lease expiry, TTL, ids as arbitrary bytes, the stored layout, RELEASE
//! of foreign data, bad operations and ids, 32 clients acquiring and releasing, replication
//! of single records, and the key's size (printed for the README: run with `--nocapture`).
//! What every command shares is in `conformance.rs`.
//!
//! Most tests use the longest lease (10^12 ms), so no lease expires during a test. The
//! expiry tests use leases of a few milliseconds and poll with a deadline; none asserts how
//! long anything took.

use redis_rl_testkit::*;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_OURS: &str = "ERR key holds a value that is not a redis-rl limiter";
const LIMIT: &str = "ERR limit must be an integer between 1 and 10000";
const LEASE_MS: &str = "ERR lease_ms must be an integer between 1 and 1000000000000";
const OPERATION: &str = "ERR expected 'limit lease_ms ACQUIRE id' or 'RELEASE id' after the key";
const ID: &str = "ERR id must be between 1 and 256 bytes long";
const UNKNOWN_FOO: &str = "ERR unknown option 'FOO', expected PEEK";

fn acquire(c: &mut redis::Connection, key: &str, limit: &str, lease: &str, id: &str) -> Vec<i64> {
    ints(c, &["RL.CONCURRENCY", key, limit, lease, "ACQUIRE", id])
}

fn release(c: &mut redis::Connection, key: &str, id: &str) -> i64 {
    query(c, &["RL.CONCURRENCY", key, "RELEASE", id])
}

fn now_us(c: &mut redis::Connection) -> u128 {
    u128::from(server_time_us(c))
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap())
}

/// The leases of a stored value (format version 2, the lease table documented in the
/// README), soonest expiry first: `(id, expires_at_us)`, walking the expiry list.
fn decode(value: &[u8]) -> Vec<(Vec<u8>, u64)> {
    assert_eq!(&value[..5], b"\0RL\x02C");
    let (width, capacity) = (u16_at(value, 5) as usize, u16_at(value, 7) as usize);
    let (live, head, tail) = (
        u16_at(value, 9) as usize,
        u16_at(value, 13),
        u16_at(value, 15),
    );
    let record = 14 + width;
    assert_eq!(value.len(), 17 + capacity * record);
    let mut leases = Vec::new();
    let (mut cur, mut prev) = (head, u16::MAX);
    while cur != u16::MAX {
        let rec = &value[17 + cur as usize * record..][..record];
        assert_eq!(rec[0], 1, "a live record");
        assert_eq!(u16_at(rec, 2), prev, "linked back");
        let id_len = rec[1] as usize + 1;
        let at = u64::from_le_bytes(rec[6..14].try_into().unwrap());
        leases.push((rec[14..14 + id_len].to_vec(), at));
        (prev, cur) = (cur, u16_at(rec, 4));
        assert!(leases.len() <= live);
    }
    assert_eq!((leases.len(), prev), (live, tail));
    leases
}

#[test]
fn acquire_renew_and_release_reply_every_field() {
    let server = Server::start();
    let mut c = server.client();
    let t0 = now_us(&mut c);
    assert_eq!(acquire(&mut c, "k", "2", LONGEST, "a"), [1, 2, 1, 0, 0]);
    let t1 = now_us(&mut c);
    assert_eq!(acquire(&mut c, "k", "2", LONGEST, "b"), [1, 2, 0, 0, 0]);

    let before = frozen(&mut c, "k");
    let (u0, d, u1) = (
        now_us(&mut c),
        acquire(&mut c, "k", "2", LONGEST, "c"),
        now_us(&mut c),
    );
    assert_eq!(d[..3], [0, 2, 0]);
    assert_eq!(d[4], 0);
    // Until "a", the oldest lease, expires.
    let range = ms_until(t0 + LONGEST_US, u1)..=ms_until(t1 + LONGEST_US, u0);
    assert!(range.contains(&d[3]), "retry {d:?} not in {range:?}");
    assert_eq!(frozen(&mut c, "k"), before, "a denial wrote nothing");

    // Renewing a held lease needs no free slot; "b" is now the oldest.
    assert_eq!(acquire(&mut c, "k", "2", LONGEST, "a"), [1, 2, 0, 0, 0]);
    let ids: Vec<Vec<u8>> = decode(&get_bytes(&mut c, "k"))
        .into_iter()
        .map(|l| l.0)
        .collect();
    assert_eq!(ids, [b"b".to_vec(), b"a".to_vec()]);

    assert_eq!(release(&mut c, "k", "a"), 1);
    assert_eq!(release(&mut c, "k", "a"), 0);
    assert_eq!(release(&mut c, "k", "nobody"), 0);
    assert_eq!(acquire(&mut c, "k", "2", LONGEST, "c"), [1, 2, 0, 0, 0]);
    assert_eq!(release(&mut c, "k", "b"), 1);
    assert!(exists(&mut c, "k"));
    // The last lease released deletes the key: no lease held is no key.
    assert_eq!(release(&mut c, "k", "c"), 1);
    assert!(!exists(&mut c, "k"));
    assert_eq!(release(&mut c, "k", "c"), 0);
    assert_eq!(release(&mut c, "missing", "x"), 0);
    assert!(!exists(&mut c, "missing"));
}

#[test]
fn peek_replies_like_the_real_acquire_and_writes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    let peek = |c: &mut redis::Connection, id: &str| {
        ints(
            c,
            &["RL.CONCURRENCY", "k", "2", LONGEST, "ACQUIRE", id, "PEEK"],
        )
    };
    assert_eq!(peek(&mut c, "a"), [1, 2, 1, 0, 0]);
    assert!(!exists(&mut c, "k"), "a PEEK created the key");

    acquire(&mut c, "k", "2", LONGEST, "a");
    // A free slot (b would take the last one), then a renewal of the held lease (a keeps its
    // one slot): allowed, but nothing taken or renewed.
    for (id, remaining) in [("b", 0), ("a", 1)] {
        let before = frozen(&mut c, "k");
        assert_eq!(peek(&mut c, id), [1, 2, remaining, 0, 0], "{id}");
        assert_eq!(frozen(&mut c, "k"), before, "PEEK {id} wrote");
    }
    acquire(&mut c, "k", "2", LONGEST, "b");
    let before = frozen(&mut c, "k");
    let peeked = peek(&mut c, "c");
    assert_eq!(frozen(&mut c, "k"), before, "PEEK c wrote");
    let real = acquire(&mut c, "k", "2", LONGEST, "c");
    assert_eq!(peeked[..3], [0, 2, 0]);
    assert_eq!(real[..3], peeked[..3]);
    // The wait until the oldest lease expires can only have shrunk in between.
    assert!(
        real[3] <= peeked[3] && peeked[3] - real[3] < 60_000,
        "{peeked:?} {real:?}"
    );
    // Options in any case.
    let r = ints(
        &mut c,
        &["RL.CONCURRENCY", "k", "3", LONGEST, "acquire", "c", "peek"],
    );
    assert_eq!(r, [1, 3, 0, 0, 0]);
    assert_eq!(frozen(&mut c, "k"), before);
}

#[test]
fn lowering_the_limit_keeps_holders_and_waits_for_enough_expiries() {
    let server = Server::start();
    let mut c = server.client();
    for id in ["a", "b", "c"] {
        assert_eq!(acquire(&mut c, "k", "3", LONGEST, id)[0], 1);
    }
    let d = acquire(&mut c, "k", "1", LONGEST, "d");
    assert_eq!(d[..3], [0, 1, 0]);
    assert!(d[3] > 0);
    // A holder may renew even over the new limit.
    assert_eq!(acquire(&mut c, "k", "1", LONGEST, "c"), [1, 1, 0, 0, 0]);
    assert_eq!(acquire(&mut c, "k", "5", LONGEST, "d"), [1, 5, 1, 0, 0]);
}

#[test]
fn an_unreleased_lease_expires_by_itself() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(acquire(&mut c, "k", "1", "30", "crashed")[0], 1);
    let mut denials = 0;
    // "next" asks for a minute's lease, so the key is still there when read below, however
    // slow the machine; its denials wait for "crashed" (30 ms) only.
    wait_until("the lease to expire", Duration::from_secs(10), || {
        let before = frozen(&mut c, "k");
        let r = acquire(&mut c, "k", "1", "60000", "next");
        if r[0] == 0 {
            denials += 1;
            assert!((1..=30).contains(&r[3]), "{r:?}");
            assert_eq!(frozen(&mut c, "k"), before, "a denial wrote nothing");
        }
        r[0] == 1
    });
    // The crashed worker's lease is gone: releasing it releases nothing.
    assert_eq!(release(&mut c, "k", "crashed"), 0);
    let ids: Vec<Vec<u8>> = decode(&get_bytes(&mut c, "k"))
        .into_iter()
        .map(|l| l.0)
        .collect();
    assert_eq!(ids, [b"next".to_vec()]);
    // A lease renewed in time does not expire.
    let r = acquire(&mut c, "k2", "1", "60000", "w");
    assert_eq!(r[0], 1);
    assert_eq!(acquire(&mut c, "k2", "1", "60000", "w")[0], 1);
    println!("{denials} denials before the lease expired");
}

#[test]
fn the_key_expires_with_its_last_lease_plus_a_second() {
    let server = Server::start();
    let mut c = server.client();
    let expiry = |c: &mut redis::Connection| query::<i64>(c, &["PEXPIRETIME", "k"]) as u128;
    let t0 = now_us(&mut c);
    acquire(&mut c, "k", "5", "60000", "a");
    let t1 = now_us(&mut c);
    let range = (t0.div_ceil(1000) + 61_000)..=(t1.div_ceil(1000) + 61_000);
    assert!(range.contains(&expiry(&mut c)), "{range:?}");
    // A shorter lease does not shorten the key's life.
    acquire(&mut c, "k", "5", "10", "b");
    assert!(range.contains(&expiry(&mut c)), "{range:?}");
    let t0 = now_us(&mut c);
    acquire(&mut c, "k", "5", "120000", "c");
    let t1 = now_us(&mut c);
    let range = (t0.div_ceil(1000) + 121_000)..=(t1.div_ceil(1000) + 121_000);
    assert!(range.contains(&expiry(&mut c)), "{range:?}");
    // Releasing the longest lease brings the expiry back to the last remaining one.
    release(&mut c, "k", "c");
    assert!(expiry(&mut c) < range.start() - 50_000);
}

#[test]
fn ids_are_arbitrary_bytes_up_to_256() {
    let server = Server::start();
    let mut c = server.client();
    let acquire_bytes = |c: &mut redis::Connection, id: &[u8]| -> redis::RedisResult<Vec<i64>> {
        redis::cmd("RL.CONCURRENCY")
            .arg("k")
            .arg("10")
            .arg(LONGEST)
            .arg("ACQUIRE")
            .arg(id)
            .query(c)
    };
    let longest = vec![b'x'; 256];
    let ids: [&[u8]; 5] = [b"\0\xff\r\n", b"a", b"A", b"a b", &longest];
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            acquire_bytes(&mut c, id).unwrap(),
            [1, 10, 9 - i as i64, 0, 0]
        );
    }
    // The same bytes are the same holder.
    assert_eq!(acquire_bytes(&mut c, b"\0\xff\r\n").unwrap()[2], 5);
    let stored: Vec<Vec<u8>> = decode(&get_bytes(&mut c, "k"))
        .into_iter()
        .map(|l| l.0)
        .collect();
    assert_eq!(stored.len(), 5);
    assert_eq!(stored.last().unwrap(), b"\0\xff\r\n");
    let before = frozen(&mut c, "k");
    for id in [&b""[..], &[b'x'; 257]] {
        let err = acquire_bytes(&mut c, id).unwrap_err();
        assert_eq!(error_text(&err), ID);
        let err = redis::cmd("RL.CONCURRENCY")
            .arg("k")
            .arg("RELEASE")
            .arg(id)
            .query::<i64>(&mut c)
            .unwrap_err();
        assert_eq!(error_text(&err), ID);
    }
    assert_eq!(frozen(&mut c, "k"), before);
    let released: i64 = redis::cmd("RL.CONCURRENCY")
        .arg("k")
        .arg("release")
        .arg(&b"\0\xff\r\n"[..])
        .query(&mut c)
        .unwrap();
    assert_eq!(released, 1);
}

#[test]
fn the_stored_value_is_the_documented_layout() {
    let server = Server::start();
    let mut c = server.client();
    let t0 = now_us(&mut c);
    acquire(&mut c, "k", "3", "60000", "worker-1");
    let t1 = now_us(&mut c);
    acquire(&mut c, "k", "3", "1000", "w2");
    let leases = decode(&get_bytes(&mut c, "k"));
    assert_eq!(leases.len(), 2);
    // Soonest expiry first.
    assert_eq!(leases[0].0, b"w2");
    assert_eq!(leases[1].0, b"worker-1");
    let at = u128::from(leases[1].1);
    assert!((t0 + 60_000_000..=t1 + 60_000_000).contains(&at));
}

/// A value in the previous format (version 1: a varint-delta list) is still read, and the
/// next write converts it to a lease table; a denial or PEEK leaves it as it is.
#[test]
fn a_version_1_value_is_read_and_converted_on_write() {
    let server = Server::start();
    let mut c = server.client();
    let far = server_time_us(&mut c) + 3_600_000_000;
    let mut v1 = b"\0RL\x01C".to_vec();
    // One lease "old" expiring in an hour: varint(far), varint(3), "old".
    let mut v = far;
    while v >= 0x80 {
        v1.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    v1.push(v as u8);
    v1.extend_from_slice(b"\x03old");
    let _: () = command(&[&b"SET"[..], b"k", &v1]).query(&mut c).unwrap();
    let state: Vec<redis::Value> = query(&mut c, &["RL.STATE", "k"]);
    assert_eq!(state[3], redis::Value::Int(1), "held");
    assert_eq!(acquire(&mut c, "k", "1", "60000", "new")[..3], [0, 1, 0]);
    assert_eq!(get_bytes(&mut c, "k"), v1, "a denial left it as it was");
    assert_eq!(acquire(&mut c, "k", "2", "60000", "new")[..3], [1, 2, 0]);
    let leases = decode(&get_bytes(&mut c, "k"));
    assert_eq!(leases.len(), 2);
    assert_eq!(leases[1], (b"old".to_vec(), far));
    assert_eq!(release(&mut c, "k", "old"), 1);
    assert_eq!(decode(&get_bytes(&mut c, "k")).len(), 1);
}

/// RELEASE refuses what ACQUIRE refuses (the conformance suite covers ACQUIRE): other
/// types, foreign strings, other limiters and a damaged set of leases.
#[test]
fn release_refuses_foreign_data_untouched() {
    let server = Server::start();
    let mut c = server.client();
    query::<i64>(&mut c, &["RPUSH", "list", "a"]);
    query::<()>(&mut c, &["SET", "text", "hello", "PX", "600000"]);
    ints(&mut c, &["RL.TOKENBUCKET", "tb", "10", "10", "1000"]);
    redis::cmd("SET")
        .arg("corrupt")
        .arg(&b"\0RL\x01C\x00\x00"[..])
        .query::<()>(&mut c)
        .unwrap();
    for (key, expected) in [
        ("list", WRONGTYPE),
        ("text", NOT_OURS),
        (
            "tb",
            "ERR key holds a token bucket limiter, not a concurrency limiter",
        ),
        (
            "corrupt",
            "ERR key holds a corrupt redis-rl concurrency limiter",
        ),
    ] {
        refused_untouched(&mut c, &["RL.CONCURRENCY", key, "RELEASE", "a"], expected);
    }
}

/// The operation words and the id (the parameters' ranges and the options are checked for
/// every command in `conformance.rs`).
#[test]
fn bad_operations_and_ids_are_refused_with_their_text_and_change_nothing() {
    let server = Server::start();
    let mut c = server.client();
    acquire(&mut c, "k", "10", LONGEST, "held");
    query::<i64>(&mut c, &["RPUSH", "list", "a"]);
    let owned = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut cases: Vec<(Vec<String>, &str)> = Vec::new();
    for (args, expected) in [
        (&["10", "1000", "TAKE", "a"][..], OPERATION),
        (&["10", "1000", "RELEASE", "a"], OPERATION),
        (&["10", "1000", "", "a"], OPERATION),
        (&["ACQUIRE", "a"], OPERATION),
        (&["FREE", "a"], OPERATION),
        (&["10", "1000", "ACQUIRE", ""], ID),
        (&["RELEASE", ""], ID),
        // The operation is checked first, then limit, lease_ms and the id.
        (&["0", "0", "TAKE", ""], OPERATION),
        (&["0", "0", "ACQUIRE", ""], LIMIT),
        (&["10", "0", "ACQUIRE", ""], LEASE_MS),
        // PEEK is ACQUIRE's only option, checked last.
        (&["10", "1000", "ACQUIRE", "a", "PEEK", "FOO"], UNKNOWN_FOO),
        (&["10", "1000", "ACQUIRE", "", "FOO"], ID),
    ] {
        cases.push((owned(args), expected));
    }
    let long_id = "x".repeat(257);
    cases.push((owned(&["10", "1000", "ACQUIRE", &long_id]), ID));
    cases.push((owned(&["RELEASE", &long_id]), ID));
    let arity = "ERR wrong number of arguments for 'RL.CONCURRENCY' command";
    for key in ["k", "missing", "list"] {
        let before = frozen(&mut c, key);
        for (args, expected) in &cases {
            let mut full = vec!["RL.CONCURRENCY", key];
            full.extend(args.iter().map(String::as_str));
            assert_eq!(error(&mut c, &full), *expected, "{full:?}");
        }
        for args in [
            &[][..],
            &[key],
            &[key, "RELEASE"],
            &[key, "10", "1000", "ACQUIRE"],
            &[key, "RELEASE", "a", "b"],
        ] {
            let mut full = vec!["RL.CONCURRENCY"];
            full.extend_from_slice(args);
            assert_eq!(error(&mut c, &full), arity, "{full:?}");
        }
        assert_eq!(frozen(&mut c, key), before, "{key} changed");
    }
    // Any case for the operation is accepted.
    let r = ints(
        &mut c,
        &["RL.CONCURRENCY", "edge2", "10000", LONGEST, "acquire", "a"],
    );
    assert_eq!(r, [1, 10000, 9999, 0, 0]);
    assert_eq!(
        query::<i64>(&mut c, &["RL.CONCURRENCY", "edge2", "Release", "a"]),
        1
    );
}

#[test]
fn thirty_two_clients_never_hold_more_than_the_limit() {
    let server = Server::start();
    // First round: everyone asks once, nobody releases: exactly the limit gets a lease.
    let first = hammer_with(&server, 32, |i, c| {
        vec![acquire(c, "once", "10", LONGEST, &format!("w{i}"))]
    });
    let mut remaining: Vec<i64> = first.iter().filter(|r| r[0] == 1).map(|r| r[2]).collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..10).collect::<Vec<_>>());
    assert!(first
        .iter()
        .filter(|r| r[0] == 0)
        .all(|r| r[..3] == [0, 10, 0] && r[3] > 0));

    // Then each client loops: acquire, count itself in, count itself out, release. The
    // count of clients inside is never above the limit, and every granted lease is released
    // exactly once.
    let inside = AtomicI64::new(0);
    let most = AtomicI64::new(0);
    let results = hammer_with(&server, 32, |i, c| {
        let id = format!("w{i}");
        let mut granted = 0;
        let mut released = 0;
        for _ in 0..40 {
            if acquire(c, "k", "5", LONGEST, &id)[0] == 1 {
                granted += 1;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                released += release(c, "k", &id);
            }
        }
        vec![(granted, released)]
    });
    assert!(most.load(Ordering::SeqCst) <= 5);
    let granted: i64 = results.iter().map(|r| r.0).sum();
    let released: i64 = results.iter().map(|r| r.1).sum();
    assert_eq!(granted, released);
    assert!(granted >= 5, "only {granted} leases granted");
    let mut c = server.client();
    assert!(!exists(&mut c, "k"), "every lease was released");
}

/// MEMORY USAGE and STRLEN for N leases, for the README.
#[test]
fn bytes_per_lease_measured() {
    let server = Server::start();
    let mut c = server.client();
    println!("\nRL.CONCURRENCY key size (lease 60 s, ids of 36 bytes like a UUID):");
    println!(
        "{:>6} {:>8} {:>13} {:>10}",
        "N", "STRLEN", "MEMORY USAGE", "B/lease"
    );
    for n in [1usize, 10, 100, 1_000, 10_000] {
        let key = format!("k{n}");
        for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
            let mut pipe = redis::pipe();
            for i in chunk {
                let id = format!("{i:08}-0000-4000-8000-000000000000");
                pipe.add_command(command(&[
                    "RL.CONCURRENCY",
                    &key,
                    "10000",
                    "60000",
                    "ACQUIRE",
                    &id,
                ]));
            }
            let replies: Vec<Vec<i64>> = pipe.query(&mut c).expect("pipeline");
            assert!(replies.iter().all(|r| r[0] == 1));
        }
        let len: i64 = query(&mut c, &["STRLEN", &key]);
        let mem: i64 = query(&mut c, &["MEMORY", "USAGE", &key, "SAMPLES", "0"]);
        assert_eq!(decode(&get_bytes(&mut c, &key)).len(), n);
        println!("{n:>6} {len:>8} {mem:>13} {:>10.2}", len as f64 / n as f64);
    }
}

/// A renewal, an acquire and a release send a few hundred bytes down the replication stream
/// whatever the number of leases held (the changed records as `SETRANGE`, and `PEXPIREAT`),
/// and the replica holds the same bytes. Before the lease table, every call sent the whole
/// value: about 38 KB with these 1,000 leases.
#[test]
fn a_call_replicates_the_records_it_changes_not_the_whole_value() {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let mut c = master.client();
    let id = |i: usize| format!("{i:08}-0000-4000-8000-000000000000");
    let mut pipe = redis::pipe();
    for i in 0..1_000 {
        pipe.add_command(command(&[
            "RL.CONCURRENCY",
            "k",
            "2000",
            LONGEST,
            "ACQUIRE",
            &id(i),
        ]));
    }
    let _: Vec<Vec<i64>> = pipe.query(&mut c).unwrap();
    let offset = |c: &mut redis::Connection| -> i64 {
        info_field(c, "replication", "master_repl_offset")
            .unwrap()
            .parse()
            .unwrap()
    };
    let calls: Vec<Vec<String>> = (0..30)
        .map(|i| match i % 3 {
            0 => [
                "RL.CONCURRENCY",
                "k",
                "2000",
                LONGEST,
                "ACQUIRE",
                &id(i * 31 % 1_000),
            ]
            .map(String::from)
            .to_vec(),
            1 => [
                "RL.CONCURRENCY",
                "k",
                "2000",
                LONGEST,
                "ACQUIRE",
                &id(5_000 + i),
            ]
            .map(String::from)
            .to_vec(),
            _ => ["RL.CONCURRENCY", "k", "RELEASE", &id(5_000 + i - 1)]
                .map(String::from)
                .to_vec(),
        })
        .collect();
    for call in &calls {
        let before = offset(&mut c);
        let _: redis::Value = command(call).query(&mut c).unwrap();
        let sent = offset(&mut c) - before;
        assert!(sent < 1_000, "{call:?} replicated {sent} bytes");
    }
    let mut r = replica.client();
    let end = offset(&mut c);
    wait_until("the replica to catch up", Duration::from_secs(30), || {
        info_field(&mut r, "replication", "slave_repl_offset").and_then(|v| v.parse::<i64>().ok())
            == Some(end)
    });
    assert_eq!(frozen(&mut r, "k"), frozen(&mut c, "k"));
}
