//! Soak: 64 clients, each on its own connection and pipelining, hammer a few hot keys and
//! many cold keys of every limiting algorithm at once. Nothing refills during the test
//! (periods of 10^12 ms), and every key gets more calls than its budget, so each key must
//! admit exactly its budget: no lost update, no double grant, whatever the interleaving.

use redis_rl_testkit::*;

use std::time::Instant;

const CLIENTS: usize = 64;
const WIDE: &str = "1000000000000";
const HOT_KEYS: usize = 4;
const COLD_KEYS: usize = 8192;
const COLD_BUDGET: u64 = 3;
/// Cold key `k` is called by the clients with `i % COLD_GROUPS == k % COLD_GROUPS` (4 of
/// them), twice each: 8 calls for a budget of 3.
const COLD_GROUPS: usize = 16;
const COLD_CALLS: usize = 2;
/// Calls per client per batch.
const BATCH: usize = 64;

/// One algorithm: its hot budget and its call for a key with a budget (`id` is unique per
/// call, for leases).
struct Algorithm {
    name: &'static str,
    hot_budget: u64,
    call: fn(&str, u64, &str) -> Vec<String>,
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

const ALGORITHMS: &[Algorithm] = &[
    Algorithm {
        name: "tokenbucket",
        hot_budget: 2000,
        call: |k, b, _| words(&["RL.TOKENBUCKET", k, &b.to_string(), "1", WIDE]),
    },
    Algorithm {
        name: "sliding",
        hot_budget: 2000,
        call: |k, b, _| words(&["RL.SLIDING", k, &b.to_string(), WIDE]),
    },
    Algorithm {
        name: "fixed",
        hot_budget: 2000,
        call: |k, b, _| words(&["RL.FIXED", k, &b.to_string(), WIDE]),
    },
    Algorithm {
        name: "gcra",
        hot_budget: 2000,
        call: |k, b, _| words(&["RL.GCRA", k, &b.to_string(), WIDE]),
    },
    Algorithm {
        name: "log",
        hot_budget: 1000,
        call: |k, b, _| words(&["RL.LOG", k, &b.to_string(), WIDE]),
    },
    Algorithm {
        name: "concurrency",
        hot_budget: 1000,
        call: |k, b, id| words(&["RL.CONCURRENCY", k, &b.to_string(), WIDE, "ACQUIRE", id]),
    },
    // Two dimensions, the second with twice the room: exactly the first's budget passes,
    // and (checked after) the second lost nothing to the denied calls.
    Algorithm {
        name: "all",
        hot_budget: 2000,
        call: |k, b, _| {
            let second = format!("{k}:2");
            let b2 = (2 * b).to_string();
            words(&[
                "RL.ALL",
                "2",
                k,
                &second,
                "TOKENBUCKET",
                &b.to_string(),
                "1",
                WIDE,
                "GCRA",
                &b2,
                WIDE,
            ])
        },
    },
];

/// The key and budget of key number `k` (hot keys first).
fn key(alg: &Algorithm, k: usize) -> (String, u64) {
    if k < HOT_KEYS {
        (format!("{{{}}}:hot:{k}", alg.name), alg.hot_budget)
    } else {
        (format!("{{{}}}:cold:{k}", alg.name), COLD_BUDGET)
    }
}

/// The keys client `i` calls, in a shuffled order: every hot key enough times that the 64
/// clients together exceed its budget by a quarter, and its share of the cold keys.
fn plan(alg: &Algorithm, i: usize) -> Vec<usize> {
    let hot_calls = (alg.hot_budget as usize * 5 / 4).div_ceil(CLIENTS);
    let mut keys: Vec<usize> = (0..HOT_KEYS)
        .flat_map(|k| std::iter::repeat_n(k, hot_calls))
        .collect();
    for k in (HOT_KEYS..HOT_KEYS + COLD_KEYS).filter(|k| k % COLD_GROUPS == i % COLD_GROUPS) {
        keys.extend(std::iter::repeat_n(k, COLD_CALLS));
    }
    // A small xorshift, seeded per client: a different interleaving for each.
    let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for j in (1..keys.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        keys.swap(j, (x % (j as u64 + 1)) as usize);
    }
    keys
}

/// `allowed` from any limiter reply (`[allowed, ...]`; RL.ALL's too).
fn allowed(reply: &redis::Value) -> bool {
    match reply {
        redis::Value::Array(items) => matches!(items.first(), Some(redis::Value::Int(1))),
        other => panic!("unexpected reply {other:?}"),
    }
}

fn soak(alg: &Algorithm, server: &Server) {
    let started = Instant::now();
    let admitted = hammer_with(server, CLIENTS, |i, conn| {
        let keys = plan(alg, i);
        let mut out = Vec::new();
        for (n, batch) in keys.chunks(BATCH).enumerate() {
            let mut pipe = redis::pipe();
            for (j, &k) in batch.iter().enumerate() {
                let (name, budget) = key(alg, k);
                let id = format!("c{i}-{n}-{j}");
                pipe.add_command(command(&(alg.call)(&name, budget, &id)));
            }
            let replies: Vec<redis::Value> = pipe.query(conn).expect("pipeline");
            out.extend(
                batch
                    .iter()
                    .zip(&replies)
                    .filter(|(_, r)| allowed(r))
                    .map(|(&k, _)| k),
            );
        }
        out
    });
    let mut per_key = vec![0u64; HOT_KEYS + COLD_KEYS];
    for k in &admitted {
        per_key[*k] += 1;
    }
    for (k, &n) in per_key.iter().enumerate() {
        let (name, budget) = key(alg, k);
        assert_eq!(
            n, budget,
            "{}: {name} admitted {n}, budget {budget}",
            alg.name
        );
    }
    let calls: usize = (0..CLIENTS).map(|i| plan(alg, i).len()).sum();
    if alg.name == "all" {
        // The second dimension holds exactly what was admitted: denied calls took nothing.
        let mut c = server.client();
        for k in [0, HOT_KEYS] {
            let (name, budget) = key(alg, k);
            let second = format!("{name}:2");
            let r = ints(
                &mut c,
                &[
                    "RL.GCRA",
                    &second,
                    &(2 * budget).to_string(),
                    WIDE,
                    "COST",
                    "0",
                ],
            );
            assert_eq!(r[2] as u64, budget, "{second}: remaining");
        }
    }
    println!(
        "{:<12} {calls:>7} calls, {:>6} admitted (hot keys {} x {}, cold keys {} x {}), {:.1} s",
        alg.name,
        admitted.len(),
        HOT_KEYS,
        alg.hot_budget,
        COLD_KEYS,
        COLD_BUDGET,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn every_key_of_every_algorithm_admits_exactly_its_budget_under_64_clients() {
    let server = Server::start();
    for alg in ALGORITHMS {
        soak(alg, &server);
    }
}
