//! 32 clients, each on its own connection, hammer one key with a budget that does not refill
//! during the test: exactly the budget is admitted (no over- and no under-admission), and the
//! admitted calls' `remaining` values form one sequence, as if the calls ran one at a time.

use redis_rl_testkit::*;

const CLIENTS: usize = 32;
const BUDGET: i64 = 500;

/// One call of `args` with `COST cost`, as each client sends it.
fn call(conn: &mut redis::Connection, args: &[&str], cost: i64) -> Vec<i64> {
    let cost = cost.to_string();
    let mut full = args.to_vec();
    full.extend_from_slice(&["COST", &cost]);
    ints(conn, &full)
}

/// Every client calls with cost 1 until it is denied: with no refill, a denial means the
/// budget is spent, so exactly BUDGET calls pass, with remaining BUDGET-1 down to 0, once each.
fn exactly_the_budget_with_unit_costs(args: &[&str]) {
    let server = Server::start();
    let replies = hammer_with(&server, CLIENTS, |_, conn| {
        let mut seen = Vec::new();
        loop {
            let r = call(conn, args, 1);
            let allowed = r[0] == 1;
            seen.push((1, r));
            if !allowed {
                return seen;
            }
        }
    });
    let mut remaining: Vec<i64> = replies
        .iter()
        .filter(|(_, r)| r[0] == 1)
        .map(|(_, r)| r[2])
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining.len() as i64, BUDGET, "{args:?}: admitted");
    assert_eq!(remaining, (0..BUDGET).collect::<Vec<_>>(), "{args:?}");
    for (_, r) in replies.iter().filter(|(_, r)| r[0] == 0) {
        assert_eq!(r[..3], [0, BUDGET, 0], "{args:?}: a denial");
        assert!(r[3] > 0, "{args:?}: {r:?}");
    }
    let mut c = server.client();
    assert_eq!(call(&mut c, args, 0)[..3], [1, BUDGET, 0]);
}

/// Clients take 1 to 4 units at a time, a fixed number of calls each: sorting the admitted
/// calls by `remaining` must give one chain from BUDGET down, each step exactly its cost
/// (no lost or doubled update), ending at the limiter's final state.
fn a_single_chain_with_mixed_costs(args: &[&str]) {
    let server = Server::start();
    let replies = hammer_with(&server, CLIENTS, |i, conn| {
        (0..20)
            .map(|n| {
                let cost = ((i + n) % 4 + 1) as i64;
                (cost, call(conn, args, cost))
            })
            .collect()
    });
    let mut admitted: Vec<(i64, i64)> = replies
        .iter()
        .filter(|(_, r)| r[0] == 1)
        .map(|(cost, r)| (r[2], *cost))
        .collect();
    admitted.sort_unstable_by(|a, b| b.cmp(a));
    let mut level = BUDGET;
    for (remaining, cost) in &admitted {
        assert_eq!(
            *remaining,
            level - cost,
            "{args:?}: chain broken at {level}"
        );
        level = *remaining;
    }
    let taken: i64 = admitted.iter().map(|(_, cost)| cost).sum();
    assert!(taken <= BUDGET);
    let mut c = server.client();
    assert_eq!(call(&mut c, args, 0)[..3], [1, BUDGET, BUDGET - taken]);
    // Every denial asked for more than was left at its moment.
    for (cost, r) in replies.iter().filter(|(_, r)| r[0] == 0) {
        assert!(r[2] < *cost, "{args:?}: denied {cost} with {r:?}");
    }
    // 32 x 20 calls of 2.5 units on average is over three times the budget: all but a few
    // units are spent.
    assert!(BUDGET - taken < 4, "{args:?}: only {taken} taken");
}

/// 500 tokens, refilled at one per 10^9 ms.
const BUCKET: [&str; 5] = ["RL.TOKENBUCKET", "k", "500", "1", "1000000000"];
/// 500 per window of 10^12 ms (the current one ends in 2033).
const WINDOW: [&str; 4] = ["RL.SLIDING", "k", "500", "1000000000000"];

#[test]
fn token_bucket_admits_exactly_its_capacity() {
    exactly_the_budget_with_unit_costs(&BUCKET);
}

#[test]
fn sliding_window_admits_exactly_its_limit() {
    exactly_the_budget_with_unit_costs(&WINDOW);
}

#[test]
fn token_bucket_updates_are_never_lost_with_mixed_costs() {
    a_single_chain_with_mixed_costs(&BUCKET);
}

#[test]
fn sliding_window_updates_are_never_lost_with_mixed_costs() {
    a_single_chain_with_mixed_costs(&WINDOW);
}
