//! A booking of one key (`check_all` of one key) goes out as its algorithm's own command on
//! every engine (the module; the Lua twin as a function, and as a script repaired after a
//! script cache flush), and decides as `RL.ALL` of that key does: the same verdicts, counts
//! and denied index, read from the server's slow log (every command logged) for the wire.

use std::time::Duration;

use redis::Value;
use redis_rl_client::layers::decider::lua::script_source;
use redis_rl_client::{Limiter, MultiDecision, Policy, Source};
use redis_rl_testkit::{query, Server};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Engine {
    Module,
    Function,
    /// The twin as a script: `FUNCTION` renamed away.
    Script,
}

impl Engine {
    fn server(self) -> Server {
        match self {
            Engine::Module => Server::start(),
            Engine::Function => Server::start_plain(&[]),
            Engine::Script => Server::start_plain(&["--rename-command", "FUNCTION", ""]),
        }
    }
}

/// A bucket of 5 refilled by one unit an hour: its counts do not move during the test.
fn bucket() -> Policy {
    Policy::token_bucket(5, 1, 3_600_000).unwrap()
}

/// `RL.ALL 1 key TOKENBUCKET 5 1 3600000 COST cost`, sent by hand (the module's command or
/// the twin's as a script): `(denied index, limit, remaining, waits)` of its one key.
fn rl_all(conn: &mut redis::Connection, engine: Engine, key: &str, cost: u64) -> Summary {
    let cost = cost.to_string();
    let spec = ["TOKENBUCKET", "5", "1", "3600000", "COST", &cost];
    let mut args = match engine {
        Engine::Module => vec!["RL.ALL", "1", key],
        Engine::Function | Engine::Script => vec!["EVAL", script_source(), "1", key, "RL.ALL"],
    };
    args.extend(spec);
    let (allowed, index, keys): (i64, i64, Vec<KeyFields>) = query(conn, &args);
    let [(limit, remaining, retry, _)] = keys.as_slice() else {
        panic!("one key expected: {keys:?}");
    };
    Summary {
        denied: (allowed == 0).then(|| usize::try_from(index - 1).unwrap()),
        limit: *limit as u64,
        remaining: *remaining as u64,
        waits: *retry > 0,
    }
}

/// One key's `[limit, remaining, retry_after_ms, reset_after_ms]` in an RL.ALL reply.
type KeyFields = (i64, i64, i64, i64);

#[derive(Debug, PartialEq)]
struct Summary {
    denied: Option<usize>,
    limit: u64,
    remaining: u64,
    /// A wait to retry after (a denial that may pass later).
    waits: bool,
}

fn summary(md: &MultiDecision) -> Summary {
    let [d] = md.decisions.as_slice() else {
        panic!("one decision expected: {md:?}");
    };
    assert_eq!(d.source, Source::Redis);
    Summary {
        denied: md.denied,
        limit: d.limit,
        remaining: d.remaining,
        waits: d.retry_after().is_some_and(|w| w > Duration::ZERO),
    }
}

/// The arguments of every command the slow log holds (all of them: logged from 0 us).
fn logged(server: &Server) -> Vec<Vec<String>> {
    let entries: Vec<Value> = query(&mut server.client(), &["SLOWLOG", "GET", "1000"]);
    entries
        .iter()
        .filter_map(|entry| match entry {
            Value::Array(fields) => match fields.get(3) {
                Some(Value::Array(args)) => Some(
                    args.iter()
                        .map(|a| match a {
                            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                            other => format!("{other:?}"),
                        })
                        .collect(),
                ),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_booking_of_one_key_is_its_algorithms_command_and_decides_as_rl_all() {
    for engine in [Engine::Module, Engine::Function, Engine::Script] {
        let server = engine.server();
        let mut conn = server.client();
        let _: () = query(
            &mut conn,
            &["CONFIG", "SET", "slowlog-log-slower-than", "0"],
        );
        let _: () = query(&mut conn, &["CONFIG", "SET", "slowlog-max-len", "1000"]);
        let l = Limiter::builder()
            .timeout(Duration::from_millis(500))
            .standalone(&server.url())
            .unwrap();
        let p = bucket();
        // Taken, taken to the last unit, denied (nothing taken); then a cost over the
        // capacity, never allowed. Each booking against RL.ALL's answer on a twin key.
        for (key, cost) in [("one", 3), ("one", 2), ("one", 1), ("over", 6)] {
            if (engine, key) == (Engine::Script, "over") {
                // A script cache flush (restart, failover): NOSCRIPT, the script loaded again.
                let _: () = query(&mut conn, &["SCRIPT", "FLUSH"]);
            }
            let booked = l.check_all_n(&[(key, p)], cost).await;
            let by_hand = rl_all(&mut conn, engine, &format!("ref:{key}"), cost);
            assert_eq!(summary(&booked), by_hand, "{engine:?} {key} cost {cost}");
        }
        let sent: Vec<Vec<String>> = logged(&server)
            .into_iter()
            .filter(|args| args.iter().any(|a| a == "one" || a == "over"))
            // The calls, not the twin's own reads and writes (logged inside a function).
            .filter(|args| {
                let name = args[0].to_ascii_uppercase();
                name.starts_with("RL.") || ["FCALL", "EVALSHA", "EVAL"].contains(&name.as_str())
            })
            .collect();
        // Four bookings; the twin's first call may be answered "function not found" and
        // the call after the flush NOSCRIPT, each then sent again.
        assert!(sent.len() >= 4, "{engine:?}: {sent:?}");
        for args in &sent {
            assert!(
                args.iter().any(|a| a == "RL.TOKENBUCKET") && !args.iter().any(|a| a == "RL.ALL"),
                "{engine:?}: {args:?}"
            );
        }
        if engine == Engine::Module {
            assert_eq!(server.calls("rl.tokenbucket"), 4);
            assert_eq!(server.calls("rl.all"), 4, "only the ones sent by hand");
        }
    }
}
