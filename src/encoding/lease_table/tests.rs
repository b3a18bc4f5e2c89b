//! Layout, damage and model tests of the lease table.

use super::*;
use proptest::prelude::*;
use redis_rl_core::concurrency::{self, acquire, release, Concurrency};
use redis_rl_core::Algorithm as _;

fn params(limit: u64, lease_ms: u64) -> ConcurrencyParams {
    ConcurrencyParams::new(limit, lease_ms).unwrap()
}

/// The leases held at `now`, as the core sees them.
fn held(state: &ConcurrencyState, now: Micros) -> Vec<Lease> {
    let mut leases: Vec<_> = state
        .leases
        .iter()
        .filter(|l| l.expires_at > now)
        .cloned()
        .collect();
    leases.sort_by(|a, b| (a.expires_at, &a.id).cmp(&(b.expires_at, &b.id)));
    leases
}

#[test]
fn layout_of_a_small_table() {
    let state = ConcurrencyState {
        leases: vec![Lease {
            id: b"ab".to_vec(),
            expires_at: Micros(7),
        }],
    };
    let bytes = build(&state);
    assert_eq!(bytes.len(), FIXED + 2 * (RECORD_FIXED + 2));
    assert_eq!(&bytes[..5], b"\0RL\x02C");
    assert_eq!(u16_at(&bytes, WIDTH), Some(2));
    assert_eq!(u16_at(&bytes, CAPACITY), Some(2));
    assert_eq!(u16_at(&bytes, LIVE_COUNT), Some(1));
    let slot = (fnv1a64(b"ab") & 1) as usize;
    let rec = &bytes[FIXED + slot * 16..FIXED + slot * 16 + 16];
    assert_eq!(
        rec,
        &[1, 1, 0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0, 0, 0, 0, 0, b'a', b'b']
    );
    let table = Table::parse(&bytes).unwrap();
    assert_eq!(table.leases().unwrap(), state);
}

#[test]
fn damaged_tables_are_corrupt_and_never_loop() {
    let state = ConcurrencyState {
        leases: (0..5)
            .map(|i| Lease {
                id: vec![b'a' + i],
                expires_at: Micros(100 + u64::from(i)),
            })
            .collect(),
    };
    let good = build(&state);
    for i in 5..good.len() {
        for v in [0u8, 1, 2, 0xff] {
            let mut bad = good.clone();
            bad[i] = v;
            if let Ok(table) = Table::parse(&bad) {
                let _ = table.leases();
                let _ = table.acquire(Micros(50), &params(10, 1), b"z");
                let _ = table.acquire(Micros(102), &params(2, 1), b"c");
                let _ = table.release(Micros(50), b"c");
            }
        }
    }
    assert_eq!(Table::parse(&good[..good.len() - 1]).err(), Some(Corrupt));
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        id: u8,
        len: usize,
        limit: u64,
        lease_ms: u64,
        peek: bool,
    },
    Release {
        id: u8,
        len: usize,
    },
}

fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
    let op = prop_oneof![
        (0u8..12, 1usize..40, 1u64..8, 1u64..50, any::<bool>()).prop_map(
            |(id, len, limit, lease_ms, peek)| Op::Acquire {
                id,
                len,
                limit,
                lease_ms,
                peek
            }
        ),
        (0u8..12, 1usize..40).prop_map(|(id, len)| Op::Release { id, len }),
    ];
    prop::collection::vec((0u64..20_000, op), 1..120)
}

fn id_of(id: u8, len: usize) -> Vec<u8> {
    // An id's length is fixed by its number, so one id never has two lengths.
    vec![b'a' + id; 1 + (len * usize::from(id)) % 40]
}

proptest! {
    /// Every call on the table decides as the core decides on the same leases, and
    /// leaves the same leases held (the table is only ever changed in place or rebuilt).
    #[test]
    fn the_table_decides_and_holds_as_the_core(ops in ops()) {
        let mut model: Option<ConcurrencyState> = None;
        let mut bytes: Option<Vec<u8>> = None;
        let mut now = 1_000_000u64;
        for (step, op) in ops {
            now += step;
            let at = Micros(now);
            match op {
                Op::Acquire { id, len, limit, lease_ms, peek } => {
                    let id = id_of(id, len);
                    let p = params(limit, lease_ms);
                    let (expected, next) = acquire(model.clone(), at, &p, &id);
                    let table_bytes = bytes.clone().unwrap_or_else(|| build(&ConcurrencyState::default()));
                    let table = Table::parse(&table_bytes).unwrap();
                    let (decision, change) = table.acquire(at, &p, &id).unwrap();
                    prop_assert_eq!(decision, expected);
                    prop_assert_eq!(change.is_some(), next.is_some());
                    if peek {
                        continue;
                    }
                    if let Some(change) = change {
                        let mut changed = table_bytes.clone();
                        match change {
                            Change::Rebuild => {
                                let (_, rebuilt) = acquire(Some(table.leases().unwrap()), at, &p, &id);
                                changed = build(&rebuilt.unwrap());
                            }
                            _ => {
                                let (dirty, _) = apply(&mut changed, change, &id);
                                // Only the reported ranges changed.
                                let mut check = table_bytes.clone();
                                for &(off, len) in dirty.ranges() {
                                    check[off..off + len].copy_from_slice(&changed[off..off + len]);
                                }
                                prop_assert_eq!(&check, &changed);
                            }
                        }
                        bytes = Some(changed);
                        model = next;
                    }
                }
                Op::Release { id, len } => {
                    let id = id_of(id, len);
                    let expected = release(model.clone(), at, &id);
                    let Some(table_bytes) = bytes.clone() else {
                        prop_assert_eq!(expected, concurrency::Release::NotHeld);
                        continue;
                    };
                    let table = Table::parse(&table_bytes).unwrap();
                    let change = table.release(at, &id).unwrap();
                    match (change, expected) {
                        (None, concurrency::Release::NotHeld) => {}
                        (Some(Change::Delete), concurrency::Release::Released(None)) => {
                            bytes = None;
                            model = None;
                        }
                        (Some(change), concurrency::Release::Released(Some(next))) => {
                            let mut changed = table_bytes.clone();
                            apply(&mut changed, change, &id);
                            bytes = Some(changed);
                            model = Some(next);
                        }
                        (change, expected) => prop_assert!(false, "{:?} vs {:?}", change, expected),
                    }
                }
            }
            if let (Some(b), Some(m)) = (&bytes, &model) {
                let table = Table::parse(b).unwrap();
                let leases = table.leases().unwrap();
                prop_assert_eq!(held(&leases, at), held(m, at));
                // The list is in expiry order.
                prop_assert!(leases.leases.windows(2).all(|w| w[0].expires_at <= w[1].expires_at));
                let described = Concurrency::view(&leases, at);
                let core_view = Concurrency::view(m, at);
                prop_assert_eq!(described, core_view);
            }
        }
    }
}
