//! Keys of different costs checked together (`check_all_units`): one atomic call on every
//! wire (the module's RL.ALL, the Lua twin as a function and as a script), each key its own
//! cost, a refusal taking nothing anywhere and giving nothing back; the module's peek and
//! forced charge one call per slot.

use std::time::Duration;

use redis_rl_client::{Engine, Limiter, Policy, Source};
use redis_rl_testkit::Server;

/// A wire: its server, the engine to force, and the command each decision is.
struct Wire {
    name: &'static str,
    server: Server,
    engine: Engine,
    decides_with: &'static str,
}

fn wires() -> Vec<Wire> {
    vec![
        Wire {
            name: "module",
            server: Server::start(),
            engine: Engine::Module,
            decides_with: "rl.all",
        },
        Wire {
            name: "twin as a function",
            server: Server::start_plain(&[]),
            engine: Engine::Lua,
            decides_with: "fcall",
        },
        Wire {
            name: "twin as a script",
            server: Server::start_plain(&["--rename-command", "FUNCTION", ""]),
            engine: Engine::Lua,
            decides_with: "evalsha",
        },
    ]
}

#[tokio::test]
async fn different_costs_are_one_atomic_call_on_every_wire() {
    let sliding = Policy::sliding(10, 3_600_000).unwrap();
    let fixed = Policy::fixed(3, 3_600_000).unwrap();
    let items = [("{t}:a", sliding), ("{t}:b", fixed)];
    for w in wires() {
        let l = Limiter::builder()
            .timeout(Duration::from_millis(2_000))
            .engine(w.engine)
            .standalone(&w.server.url())
            .unwrap();
        let md = l.check_all_units(&items, &[2, 1]).await;
        assert!(md.allows(), "{}", w.name);
        let left: Vec<u64> = md.decisions.iter().map(|d| d.remaining).collect();
        assert_eq!(left, [8, 2], "{}: each key its own cost", w.name);

        // b has 2 left: its 5 refuses the request, a's 2 are not taken, in one call.
        let (calls, refunds) = (w.server.calls(w.decides_with), w.server.calls("rl.refund"));
        let md = l.check_all_units(&items, &[2, 5]).await;
        assert_eq!(md.denied, Some(1), "{}", w.name);
        assert_eq!(md.decisions[1].source, Source::Redis, "{}", w.name);
        assert_eq!(md.decisions[0].remaining, 8, "{}", w.name);
        assert_eq!(
            (
                w.server.calls(w.decides_with) - calls,
                w.server.calls("rl.refund") - refunds
            ),
            (1, 0),
            "{}: one call, nothing given back",
            w.name
        );
        assert_eq!(
            l.peek("{t}:a", &sliding, 0).await.remaining,
            8,
            "{}",
            w.name
        );
        assert_eq!(l.peek("{t}:b", &fixed, 0).await.remaining, 2, "{}", w.name);

        // A cost of 0 only looks; the others are taken.
        let md = l.check_all_units(&items, &[8, 0]).await;
        assert!(md.allows(), "{}", w.name);
        let left: Vec<u64> = md.decisions.iter().map(|d| d.remaining).collect();
        assert_eq!(left, [0, 2], "{}", w.name);
    }
}

#[tokio::test]
async fn the_modules_peek_and_forced_charge_take_one_call_with_costs() {
    let server = Server::start();
    let l = Limiter::builder()
        .timeout(Duration::from_millis(2_000))
        .standalone(&server.url())
        .unwrap();
    let a = Policy::sliding(10, 3_600_000).unwrap();
    let b = Policy::fixed(3, 3_600_000).unwrap();
    let items = [("{t}:a", &a), ("{t}:b", &b)];
    let peeks = l.peek_all_units(&items, &[4, 5]).await.unwrap();
    assert_eq!(
        peeks.iter().map(|d| d.allows()).collect::<Vec<_>>(),
        [true, false]
    );
    let forced = l.force_all_units(&items, &[12, 1]).await.unwrap();
    assert_eq!(forced[1].remaining, 2);
    assert!(l.peek("{t}:a", &a, 1).await.is_denied(), "a is in debt");
    assert_eq!(server.calls("rl.all"), 2, "one call each");
}
