//! The conformance suite: what every algorithm's command must do, read from the core's
//! registry ([`Kind::ALL`]) instead of written out per algorithm. `tests/it/conformance.rs`
//! runs each check for every kind, so a new algorithm is held to them from its registry line
//! on; an algorithm's own file keeps only what is particular to it (its arithmetic, its
//! stored layout).
//!
//! The checks: a key of one algorithm is refused by every other command, as are other
//! types, foreign strings and damaged values ([`wrong_type_matrix`]); every bad value of
//! every parameter and option, unknown and repeated options, the arity, all refused with
//! the documented text and nothing changed ([`bad_arguments`]); the edges of every range
//! accepted ([`edges_accepted`]); a fresh key's reply, PEEK, a zero cost and a cost that
//! can never pass ([`fresh_reply`]); the stored value a plain string with the documented
//! header that DUMP/RESTORE copies ([`plain_string`]); a replica with the same bytes and
//! expiry ([`replica_matches`]); and many clients on one key admitting exactly the budget
//! ([`clients_admit_exactly_the_budget`]).

mod args;

pub use args::*;

use crate::checks::refused_untouched;
use crate::cmd::{error, frozen, hammer_with, info_field, ints, query};
use crate::server::{Server, MASTER_ARGS};
use args::{accepted_options, strs, typical};
use redis_rl_core::limits::{Range, Spelling, MAX_DURATION_MS};
use redis_rl_core::Kind;

/// Every entry of [`bad_argument_table`] refused with its text, on a key of `kind`, on a
/// missing key and on a list (the arguments are checked before the key is read), nothing
/// written (not even a dirty counter); too few arguments are the server's arity error.
pub fn bad_arguments(c: &mut redis::Connection, kind: Kind) {
    let key = format!("bad:{}", kind.config_name());
    run(c, &call(kind, &key, BUDGET, "held", &[]));
    query::<i64>(c, &["RPUSH", "bad:list", "x"]);
    let dirty = info_field(c, "persistence", "rdb_changes_since_last_save");
    for (args, text) in bad_argument_table(kind) {
        for key in [key.as_str(), "missing", "bad:list"] {
            let mut full = vec![kind.command(), key];
            full.extend(strs(&args));
            refused_untouched(c, &full, &text);
        }
    }
    let arity = format!(
        "ERR wrong number of arguments for '{}' command",
        kind.command()
    );
    assert_eq!(error(c, &[kind.command()]), arity);
    let lower = kind.command().to_ascii_lowercase();
    let mut short = vec![lower, key.clone()];
    let params = kind.params();
    for range in params
        .get(..params.len().saturating_sub(1))
        .unwrap_or_default()
    {
        refused_untouched(c, &strs(&short), &arity);
        short.push(typical(range, BUDGET));
    }
    refused_untouched(c, &strs(&short), &arity);
    assert_eq!(
        info_field(c, "persistence", "rdb_changes_since_last_save"),
        dirty,
        "{kind:?}"
    );
}

/// The smallest and largest value of every parameter, and of every option (with some value
/// of a word parameter: a calendar quota's anchor day depends on its period), are accepted.
pub fn edges_accepted(c: &mut redis::Connection, kind: Kind) {
    let key = format!("edge:{}", kind.config_name());
    let params = kind.params();
    for pick in [|r: &Range| r.min, |r: &Range| r.max] {
        let p: Vec<String> = params.iter().map(|r| r.show(pick(r))).collect();
        let reply = run(c, &call_with(kind, &key, &p, "id", &["PEEK"]));
        assert_eq!(reply.len(), 5, "{kind:?} {p:?}");
    }
    let words = |r: &Range| match r.spelling {
        Spelling::Words(w) => w.iter().map(|s| s.to_string()).collect(),
        _ => vec![typical(r, BUDGET)],
    };
    let choices: Vec<Vec<String>> = params.iter().map(words).collect();
    for opt in kind.options() {
        for value in [opt.range.min, opt.range.max] {
            let shown = opt.range.show(value);
            let accepted = (0..choices.iter().map(Vec::len).max().unwrap_or(1)).any(|i| {
                let p: Vec<String> = choices
                    .iter()
                    .map(|c| c[i.min(c.len() - 1)].clone())
                    .collect();
                let args = call_with(kind, &key, &p, "id", &[opt.token, &shown, "PEEK"]);
                crate::cmd::command(&strs(&args))
                    .query::<Vec<i64>>(c)
                    .is_ok()
            });
            assert!(
                accepted,
                "{kind:?} {} {shown} refused with every period",
                opt.token
            );
        }
    }
    for extra in accepted_options(kind) {
        let reply = run(c, &call(kind, &key, BUDGET, "id", &strs(&extra)));
        let upto = extra.iter().any(|w| w.eq_ignore_ascii_case("UPTO"));
        assert_eq!(reply.len(), if upto { 6 } else { 5 }, "{kind:?} {extra:?}");
    }
    assert_eq!(
        query::<i64>(c, &["EXISTS", &key]),
        0,
        "{kind:?}: PEEK wrote"
    );
}

/// A fresh key: the first call admits one unit of [`BUDGET`] and writes the key, as does a
/// cost of the whole budget; PEEK (of one unit or three), a zero cost and a cost above the
/// budget (never, `retry_after` -1) reply the figures of the call but write nothing; a call
/// the budget cannot take is denied and writes nothing.
pub fn fresh_reply(c: &mut redis::Connection, kind: Kind) {
    let b = BUDGET as i64;
    let key = |what: &str| format!("fresh:{}:{what}", kind.config_name());
    let exists = |c: &mut redis::Connection, k: &str| query::<i64>(c, &["EXISTS", k]) == 1;
    let r = run(c, &call(kind, &key("peek"), BUDGET, "a", &["PEEK"]));
    assert_eq!(r[..4], [1, b, b - 1, 0], "{kind:?} PEEK");
    assert!(!exists(c, &key("peek")), "{kind:?}: PEEK wrote");
    if kind.is_limiter() {
        let r = run(c, &call(kind, &key("zero"), BUDGET, "a", &["COST", "0"]));
        assert_eq!(r[..4], [1, b, b, 0], "{kind:?} COST 0");
        let over = (BUDGET + 1).to_string();
        let r = run(c, &call(kind, &key("never"), BUDGET, "a", &["COST", &over]));
        assert_eq!(r[..4], [0, b, b, -1], "{kind:?} COST above the budget");
        let r = run(
            c,
            &call(kind, &key("peek3"), BUDGET, "a", &["COST", "3", "PEEK"]),
        );
        assert_eq!(r[..4], [1, b, b - 3, 0], "{kind:?} COST 3 PEEK");
        for what in ["zero", "never", "peek3"] {
            assert!(!exists(c, &key(what)), "{kind:?} {what} wrote");
        }
        let r = run(
            c,
            &call(kind, &key("all"), BUDGET, "a", &["COST", &b.to_string()]),
        );
        assert_eq!(r[..4], [1, b, 0, 0], "{kind:?} COST of the whole budget");
        assert!(
            exists(c, &key("all")),
            "{kind:?}: the whole budget taken wrote nothing"
        );
    }
    let k = key("used");
    let first = run(c, &call(kind, &k, BUDGET, "first", &[]));
    assert_eq!(first[..4], [1, b, b - 1, 0], "{kind:?}");
    assert!(first[4] >= 0, "{kind:?} {first:?}");
    assert!(exists(c, &k), "{kind:?}: the call wrote nothing");
    for i in 1..BUDGET {
        let r = run(c, &call(kind, &k, BUDGET, &format!("id{i}"), &[]));
        assert_eq!(r[..3], [1, b, b - 1 - i as i64], "{kind:?} call {i}");
    }
    let before = frozen(c, &k);
    let denied = run(c, &call(kind, &k, BUDGET, "one-more", &[]));
    assert_eq!(denied[..3], [0, b, 0], "{kind:?}");
    assert!(
        denied[3] > 0,
        "{kind:?}: a denial says how long to wait: {denied:?}"
    );
    assert_eq!(frozen(c, &k), before, "{kind:?}: a denial wrote");
}

/// A key of every kind, a list, a foreign string and a damaged value of every kind: each
/// command refuses every key but its own, with the text naming both algorithms, with or
/// without PEEK, and nothing changes.
pub fn wrong_type_matrix(c: &mut redis::Connection) {
    query::<()>(c, &["RPUSH", "list", "x"]);
    query::<()>(c, &["SET", "text", "hello", "PX", "600000"]);
    let key = |k: Kind| format!("of:{}", k.config_name());
    for &kind in Kind::ALL {
        run(c, &call(kind, &key(kind), BUDGET, "held", &[]));
        let mut value: Vec<u8> = query(c, &["GET", &key(kind)]);
        value.pop();
        let damaged = format!("damaged:{}", kind.config_name());
        crate::cmd::command::<&[u8]>(&[b"SET", damaged.as_bytes(), &value])
            .query::<()>(c)
            .expect("SET");
    }
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    let not_ours = "ERR key holds a value that is not a redis-rl limiter";
    for &command in Kind::ALL {
        let mut cases = vec![
            ("list".to_string(), wrongtype.to_string()),
            ("text".into(), not_ours.into()),
            (
                format!("damaged:{}", command.config_name()),
                format!(
                    "ERR key holds a corrupt redis-rl {} limiter",
                    command.name()
                ),
            ),
        ];
        for &stored in Kind::ALL.iter().filter(|k| **k != command) {
            let text = format!(
                "ERR key holds a {} limiter, not a {} limiter",
                stored.name(),
                command.name()
            );
            cases.push((key(stored), text));
        }
        for (k, text) in &cases {
            for extra in [&[][..], &["PEEK"]] {
                refused_untouched(c, &strs(&call(command, k, BUDGET, "x", extra)), text);
            }
        }
    }
}

/// The stored value is one plain string with the `\0RL`, version, tag header; DUMP and
/// RESTORE copy it (expiry included) into an independent limiter; a DEL is a fresh start.
pub fn plain_string(c: &mut redis::Connection, kind: Kind) {
    let k = format!("plain:{}", kind.config_name());
    let copy = format!("copy:{}", kind.config_name());
    run(c, &call(kind, &k, BUDGET, "a", &[]));
    assert_eq!(query::<String>(c, &["TYPE", &k]), "string", "{kind:?}");
    let value: Vec<u8> = query(c, &["GET", &k]);
    assert_eq!(&value[..3], b"\0RL", "{kind:?}");
    assert_eq!(value[4], kind.tag(), "{kind:?}");
    let (dump, expire_at) = frozen(c, &k);
    let dump = dump.expect("the key");
    redis::cmd("RESTORE")
        .arg(&copy)
        .arg(expire_at)
        .arg(&dump)
        .arg("ABSTTL")
        .query::<()>(c)
        .expect("RESTORE");
    assert_eq!(frozen(c, &copy), (Some(dump), expire_at), "{kind:?}");
    let remaining = |c: &mut redis::Connection, key: &str, id: &str| {
        run(c, &call(kind, key, BUDGET, id, &["PEEK"]))[2]
    };
    let b = BUDGET as i64;
    assert_eq!(
        remaining(c, &copy, "b"),
        b - 2,
        "{kind:?}: the copy holds the use"
    );
    run(c, &call(kind, &copy, BUDGET, "b", &[]));
    assert_eq!(
        remaining(c, &k, "b"),
        b - 2,
        "{kind:?}: the original is independent"
    );
    // EXPIRE and PERSIST change only the expiry; the next write sets it again.
    assert_eq!(query::<i64>(c, &["EXPIRE", &k, "100000"]), 1);
    assert_eq!(remaining(c, &k, "b"), b - 2, "{kind:?} after EXPIRE");
    assert_eq!(query::<i64>(c, &["PERSIST", &k]), 1);
    assert_eq!(remaining(c, &k, "b"), b - 2, "{kind:?} after PERSIST");
    run(c, &call(kind, &k, BUDGET, "b", &[]));
    assert!(
        query::<i64>(c, &["PTTL", &k]) > 0,
        "{kind:?}: a write sets the expiry"
    );
    query::<i64>(c, &["DEL", &k]);
    assert_eq!(
        remaining(c, &k, "b"),
        b - 1,
        "{kind:?}: a deleted key starts afresh"
    );
}

/// Runs `command key params...` on a fresh key per case and checks the whole reply and
/// whether the call wrote the key: `(params, reply, written)`.
pub fn fresh_cases(c: &mut redis::Connection, command: &str, cases: &[(&[&str], [i64; 5], bool)]) {
    for (i, (params, reply, written)) in cases.iter().enumerate() {
        let key = format!("fresh:{command}:{i}");
        let mut args = vec![command, key.as_str()];
        args.extend_from_slice(params);
        assert_eq!(ints(c, &args), reply.to_vec(), "{args:?}");
        let exists = query::<i64>(c, &["EXISTS", &key]) == 1;
        assert_eq!(exists, *written, "{args:?}: key written");
    }
}

/// Writes on a master (plain calls, a PEEK, three calls in one MULTI of which the last is
/// denied) reach its replica as the same bytes with the same absolute expiry; a PEEK's key
/// is on neither.
pub fn replica_matches(kind: Kind) {
    let master = Server::start_with(&MASTER_ARGS);
    let replica = Server::start_replica_of(&master);
    let (mut m, mut r) = (master.client(), replica.client());
    run(&mut m, &call(kind, "a", BUDGET, "x", &[]));
    run(&mut m, &call(kind, "a", BUDGET, "y", &[]));
    run(&mut m, &call(kind, "peek", BUDGET, "x", &["PEEK"]));
    let mut pipe = redis::pipe();
    pipe.atomic();
    for id in ["x", "y", "z"] {
        pipe.add_command(crate::cmd::command(&strs(&call(kind, "multi", 2, id, &[]))));
    }
    let replies: Vec<Vec<i64>> = pipe.query(&mut m).expect("MULTI");
    assert_eq!(
        replies.iter().map(|r| r[0]).collect::<Vec<_>>(),
        [1, 1, 0],
        "{kind:?}"
    );
    assert_eq!(query::<i64>(&mut m, &["WAIT", "1", "5000"]), 1);
    for key in ["a", "multi"] {
        assert_eq!(frozen(&mut r, key), frozen(&mut m, key), "{kind:?} {key}");
    }
    assert_eq!(query::<i64>(&mut r, &["EXISTS", "peek"]), 0, "{kind:?}");
}

/// 32 clients call one key until each is denied: the admitted calls saw every `remaining`
/// from `budget - 1` down to 0 exactly once (no update lost, none admitted twice), and
/// every denial reports an empty budget.
pub fn clients_admit_exactly_the_budget(kind: Kind, budget: u64) {
    let server = clients_admit_exactly(|id| call(kind, "k", budget, id, &[]), budget);
    if kind.is_limiter() {
        let check = run(
            &mut server.client(),
            &call(kind, "k", budget, "id", &["COST", "0"]),
        );
        assert_eq!(check[..3], [1, budget as i64, 0], "{kind:?}: spent");
    }
}

/// [`clients_admit_exactly_the_budget`] for any call: `args(id)` is the call of one client
/// (`id` unique per call), `budget` the units it admits in all. Returns the server.
pub fn clients_admit_exactly(args: impl Fn(&str) -> Vec<String> + Sync, budget: u64) -> Server {
    let server = Server::start();
    let replies = hammer_with(&server, 32, |client, c| {
        let mut seen = Vec::new();
        for i in 0.. {
            let r = run(c, &args(&format!("{client}:{i}")));
            let allowed = r[0] == 1;
            seen.push(r);
            if !allowed {
                break;
            }
        }
        seen
    });
    let b = budget as i64;
    let mut remaining: Vec<i64> = replies.iter().filter(|r| r[0] == 1).map(|r| r[2]).collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..b).collect::<Vec<_>>(), "{:?}", args("id"));
    assert!(
        replies
            .iter()
            .filter(|r| r[0] == 0)
            .all(|r| r[..3] == [0, b, 0] && r[3] > 0),
        "{:?}",
        args("id")
    );
    server
}

/// 32 clients take 1 to 4 units at a time, 20 calls each, from a rate limiter of `kind`
/// with `budget` and no refill: sorted by `remaining`, the admitted calls form one chain
/// from `budget` down, each step exactly its cost (no update lost or doubled), ending at
/// what a zero-cost check then reports; every denial asked for more than was left.
pub fn mixed_costs_form_one_chain(kind: Kind, budget: u64) {
    let server = Server::start();
    let replies = hammer_with(&server, 32, |i, c| {
        (0..20)
            .map(|n| {
                let cost = ((i + n) % 4 + 1) as i64;
                let args = call(kind, "k", budget, "id", &["COST", &cost.to_string()]);
                (cost, run(c, &args))
            })
            .collect()
    });
    let mut admitted: Vec<(i64, i64)> = replies
        .iter()
        .filter(|(_, r)| r[0] == 1)
        .map(|(cost, r)| (r[2], *cost))
        .collect();
    admitted.sort_unstable_by(|a, b| b.cmp(a));
    let b = budget as i64;
    let mut level = b;
    for (remaining, cost) in &admitted {
        assert_eq!(
            *remaining,
            level - cost,
            "{kind:?}: chain broken at {level}"
        );
        level = *remaining;
    }
    for (cost, r) in replies.iter().filter(|(_, r)| r[0] == 0) {
        assert!(r[2] < *cost, "{kind:?}: denied {cost} with {r:?}");
    }
    let check = run(
        &mut server.client(),
        &call(kind, "k", budget, "id", &["COST", "0"]),
    );
    assert_eq!(check[..3], [1, b, level], "{kind:?}");
    // 32 x 20 calls of 2.5 units on average is over three times the budget: all but a few
    // units are spent.
    assert!(level < 4, "{kind:?}: {level} left");
}

/// Waiting the `retry_after_ms` of a denial is enough: on fresh keys (`key:attempt`),
/// `fill` takes what the limiter holds, `ask` is then denied, and after sleeping its
/// `retry_after_ms` the same `ask` passes. An attempt in which `ask` passed at once (the
/// machine stalled long enough for units to come back) is tried again; two denials
/// waited out end the check, and at least one must have happened.
pub fn waiting_retry_after_is_enough(
    c: &mut redis::Connection,
    key: &str,
    fill: &[&str],
    ask: &[&str],
) {
    let with_key = |args: &[&str], key: &str| {
        let mut full = args.to_vec();
        full.insert(1, key);
        full.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let mut denials = 0;
    for attempt in 0..20 {
        if denials == 2 {
            break;
        }
        let key = format!("{key}:{attempt}");
        run(c, &with_key(fill, &key));
        let denied = run(c, &with_key(ask, &key));
        if denied[0] == 1 {
            continue;
        }
        denials += 1;
        let retry = denied[3];
        assert!(retry > 0, "{ask:?}: {denied:?}");
        // The denial was decided no later than now: after retry_after more, the server's
        // clock is past the moment the units come back.
        std::thread::sleep(std::time::Duration::from_millis(retry as u64));
        let again = run(c, &with_key(ask, &key));
        assert_eq!(
            again[0], 1,
            "{ask:?}: still denied {retry} ms later: {again:?}"
        );
    }
    assert!(denials > 0, "{ask:?}: never saw a denial");
}

/// [`waiting_retry_after_is_enough`] for every kind whose durations are plain
/// milliseconds (not a calendar quota's period): a budget of one unit per 40 ms, taken by
/// one call (or lease), so that the next is denied until it comes back.
pub fn waiting_retry_after_is_enough_for(c: &mut redis::Connection, kind: Kind) -> bool {
    let params = kind.params();
    if params
        .iter()
        .any(|r| !matches!(r.spelling, Spelling::Integer))
    {
        return false;
    }
    let short: Vec<String> = params
        .iter()
        .map(|r| {
            if r.max == MAX_DURATION_MS {
                "40".into()
            } else {
                "1".into()
            }
        })
        .collect();
    let args = |id: &str| call_with(kind, "", &short, id, &[]);
    let (fill, ask) = (args("fill"), args("ask"));
    let without_key = |a: &[String]| -> Vec<String> {
        a.iter()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, w)| w.clone())
            .collect()
    };
    let (fill, ask) = (without_key(&fill), without_key(&ask));
    let key = format!("wait:{}", kind.config_name());
    waiting_retry_after_is_enough(c, &key, &strs(&fill), &strs(&ask));
    true
}
