//! Keys of different costs checked together (`check_all_units`): one atomic call on every
//! wire (the module's RL.ALL, the Lua twin as a function and as a script), each key its own
//! cost, a refusal taking nothing anywhere and giving nothing back; the peek and forced
//! charge of a held request one call per slot, on every wire too.

use std::time::Duration;

use redis_rl_client::settle::Settled;
use redis_rl_client::{Limiter, Policy, ServerImpl, Source};
use redis_rl_testkit::Server;

/// A wire: its server, the implementation to force, and the command each decision is.
struct Wire {
    name: &'static str,
    server: Server,
    engine: ServerImpl,
    decides_with: &'static str,
}

impl Wire {
    /// A limiter on this wire: its server, its implementation forced.
    fn limiter(&self) -> Limiter {
        Limiter::builder()
            .timeout(Duration::from_millis(2_000))
            .server_impl(self.engine)
            .standalone(&self.server.url())
            .unwrap()
    }
}

fn wires() -> Vec<Wire> {
    vec![
        Wire {
            name: "module",
            server: Server::start(),
            engine: ServerImpl::Module,
            decides_with: "rl.all",
        },
        Wire {
            name: "twin as a function",
            server: Server::start_plain(&[]),
            engine: ServerImpl::Lua,
            decides_with: "fcall",
        },
        Wire {
            name: "twin as a script",
            server: Server::start_plain(&["--rename-command", "FUNCTION", ""]),
            engine: ServerImpl::Lua,
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
        let l = w.limiter();
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

/// The held request of rl-gateway's delay: every key's wait looked at (`PEEK`), then its
/// units booked even over the limits (`FORCE`), one call each with each key's cost, on every
/// wire: the twin too (a server without the module, as managed Redis).
#[tokio::test]
async fn peek_and_forced_charge_take_one_call_with_costs_on_every_wire() {
    let a = Policy::sliding(10, 3_600_000).unwrap();
    let b = Policy::fixed(3, 3_600_000).unwrap();
    let items = [("{t}:a", &a), ("{t}:b", &b)];
    for w in wires() {
        let l = w.limiter();
        // The wire chosen (and the twin loaded) first, so that each call below is one.
        assert_eq!(l.peek("{t}:a", &a, 0).await.remaining, 10, "{}", w.name);
        let calls = w.server.calls(w.decides_with);
        let peeks = l.peek_all_units(&items, &[4, 5]).await.unwrap();
        assert_eq!(w.server.calls(w.decides_with) - calls, 1, "{}", w.name);
        assert_eq!(
            peeks.iter().map(|d| d.allows()).collect::<Vec<_>>(),
            [true, false],
            "{}",
            w.name
        );
        assert_eq!(peeks[1].source, Source::Redis, "{}", w.name);
        assert_eq!(l.peek("{t}:a", &a, 0).await.remaining, 10, "{}", w.name);
        let calls = w.server.calls(w.decides_with);
        let forced = l.force_all_units(&items, &[12, 1]).await.unwrap();
        assert_eq!(w.server.calls(w.decides_with) - calls, 1, "{}", w.name);
        assert!(forced.iter().all(|d| d.allows()), "{}", w.name);
        assert_eq!(forced[0].remaining, 0, "{}: a is over", w.name);
        assert_eq!(forced[1].remaining, 2, "{}", w.name);
        assert!(
            l.peek("{t}:a", &a, 1).await.is_denied(),
            "{}: a is in debt",
            w.name
        );
        assert_eq!(l.peek("{t}:b", &b, 0).await.remaining, 2, "{}", w.name);
    }
}

/// A reservation settled upward (the work cost more) takes the excess with `FORCE` on every
/// wire: the twin too.
#[tokio::test]
async fn a_charge_after_the_response_is_taken_on_every_wire() {
    let p = Policy::fixed(10, 3_600_000).unwrap();
    for w in wires() {
        let l = w.limiter();
        assert!(l.check_n("{t}:s", &p, 8).await.allows(), "{}", w.name);
        match l.settle("{t}:s", &p, 8, 13).await {
            Ok(Settled::Charged(d)) => {
                assert_eq!((d.allows(), d.remaining), (true, 0), "{}", w.name)
            }
            other => panic!("{}: {other:?}", w.name),
        }
        let d = l.peek("{t}:s", &p, 0).await;
        assert!(d.is_denied(), "{}: 13 of 10 taken, in debt: {d:?}", w.name);
    }
}
