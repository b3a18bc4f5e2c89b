//! Hostile input, stored: real values of every kind damaged in every way, read by every
//! command (the promise and the raw reader: `hostile_input.rs`).

use super::hostile_input::*;
use redis_rl_testkit::*;

use std::cell::RefCell;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A real stored value of every kind, as the module wrote it.
fn real_values(c: &mut redis::Connection) -> Vec<Vec<u8>> {
    create_keys(c);
    KEYS[..6]
        .iter()
        .map(|k| query::<Vec<u8>>(c, &["GET", k]))
        .collect()
}

/// How a stored value is damaged.
#[derive(Debug, Clone)]
enum Damage {
    Truncate(usize),
    Extend(Vec<u8>),
    Set(usize, u8),
    Version(u8),
    Tag(u8),
    Random(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        2 => any::<usize>().prop_map(Damage::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..20).prop_map(Damage::Extend),
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Set(i, b)),
        1 => any::<u8>().prop_map(Damage::Version),
        1 => any::<u8>().prop_map(Damage::Tag),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Damage::Random),
    ]
}

fn apply(value: &[u8], damage: &[Damage]) -> Vec<u8> {
    let mut v = value.to_vec();
    for d in damage {
        let n = v.len();
        match d {
            Damage::Truncate(i) => v.truncate(i % (n + 1)),
            Damage::Extend(tail) => v.extend_from_slice(tail),
            Damage::Set(i, b) if n > 0 => v[i % n] = *b,
            Damage::Version(b) if n > 3 => v[3] = *b,
            Damage::Tag(b) if n > 4 => v[4] = *b,
            Damage::Random(r) => v = r.clone(),
            _ => {}
        }
    }
    v
}

/// Valid calls of every command on the damaged key `d`.
const READERS: &[&[&str]] = &[
    &["RL.TOKENBUCKET", "d", "10", "10", WIDE],
    &["RL.TOKENBUCKET", "d", "10", "10", WIDE, "PEEK"],
    &["RL.SLIDING", "d", "10", WIDE],
    &["RL.FIXED", "d", "10", WIDE],
    &["RL.GCRA", "d", "10", WIDE, "BURST", "20"],
    &["RL.GCRA", "d", "10", "1", "COST", "0"],
    &["RL.THROTTLE", "d", "9", "10", "1000000000", "1"],
    &["RL.LOG", "d", "10", WIDE],
    &["RL.LOG", "d", "10000", "1", "COST", "2"],
    &["RL.CONCURRENCY", "d", "10", WIDE, "ACQUIRE", "b"],
    &["RL.CONCURRENCY", "d", "RELEASE", "a"],
    &["RL.ALL", "1", "d", "SLIDING", "10", WIDE],
    &[
        "RL.ALL", "2", "d", "h:other", "LOG", "10", WIDE, "FIXED", "1", "1",
    ],
    &[
        "RL.REFUND",
        "d",
        "TOKENBUCKET",
        "10",
        "10",
        WIDE,
        "COST",
        "1",
    ],
    &["RL.REFUND", "d", "GCRA", "10", WIDE, "COST", "5"],
    &["RL.REFUND", "d", "LOG", "10", WIDE, "COST", "2"],
    &["RL.REFUND", "d", "FIXED", "10", WIDE, "COST", "2"],
    &["RL.REFUND", "d", "SLIDING", "10", WIDE, "COST", "2"],
    &["RL.STATE", "d"],
    &["RL.RESET", "d"],
];

/// Real values of every kind, damaged (truncated, extended, bytes changed, another version
/// or tag, or replaced), then read by every command: a reply or a clean error, and on error
/// the key is untouched.
#[test]
fn damaged_stored_values_get_a_reply_or_a_clean_error_and_stay_untouched() {
    let server = Server::start();
    let c = RefCell::new(server.client());
    let raw = RefCell::new(Raw::connect(&server));
    let values = real_values(&mut c.borrow_mut());
    let mut runner = TestRunner::new(Config {
        cases: CASES * 3,
        failure_persistence: None,
        ..Config::default()
    });
    let counts = RefCell::new((0u32, 0u32));
    runner
        .run(
            &(
                prop::sample::select(values),
                prop::collection::vec(damage(), 1..3),
            ),
            |(value, damage)| {
                let value = apply(&value, &damage);
                let c = &mut *c.borrow_mut();
                for reader in READERS {
                    let mut set = redis::cmd("SET");
                    set.arg("d").arg(&value).arg("PX").arg(100_000_000);
                    set.query::<()>(c).expect("SET");
                    let before = frozen(c, "d");
                    let dirty_before = dirty(c);
                    let args = bytes(reader);
                    let reply = raw.borrow_mut().call(&args);
                    if judge(&args, &reply)? {
                        counts.borrow_mut().0 += 1;
                        prop_assert_eq!(dirty(c), dirty_before, "{} wrote", show(&args));
                        prop_assert_eq!(
                            frozen(c, "d"),
                            before,
                            "{} changed the damaged key {:?}",
                            show(&args),
                            value
                        );
                    } else {
                        counts.borrow_mut().1 += 1;
                    }
                    let pong = raw.borrow_mut().call(&bytes(&["PING"]));
                    prop_assert!(matches!(pong, Reply::Status), "no PONG: {:?}", pong);
                }
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let (e, r) = counts.into_inner();
    println!("damaged values: {e} errors, {r} replies");
}
