//! The Lua twin (`lua/rl.lua`) against the module and the core.
//!
//! - `exact_against_the_core`: random sequences of every algorithm (costs, PEEK, UPTO,
//!   refunds, RL.ALL, changed parameters, clock steps back and forth) through the twin with a clock
//!   the test sets, against `redis-rl-core` with the same instants: identical replies,
//!   identical stored bytes (the README's format, which the module writes) and identical
//!   absolute expiries.
//! - `same_replies_as_the_module`: the same random sequences through the module and the
//!   twin on one server with the real clock, on three keys per limiter (module only, twin
//!   only, and one that alternates randomly, so each continues the other's bytes):
//!   identical replies, except the time fields (`retry_after_ms`, `reset_after_ms`), which
//!   may differ by the time between the calls (documented in the README).
//! - the twin's exact-range refusal, and 32 concurrent clients admitting exactly the budget.
//!
//! The model is `luatwin_model.rs`; the error texts against the module's,
//! `luatwin_errors.rs`.

use super::luatwin_model::*;
use redis_rl_testkit::*;

use redis::Value;
use redis_rl_core::calendar::{Calendar, Period};
use redis_rl_core::fixed_window::FixedWindowParams;
use redis_rl_core::gcra::GcraParams;
use redis_rl_core::quota::QuotaParams;
use redis_rl_core::sliding_log::SlidingLogParams;
use redis_rl_core::sliding_window::SlidingWindowParams;
use redis_rl_core::token_bucket::TokenBucketParams;
use redis_rl_core::AnyState;
use std::time::Instant;

pub(crate) const SCRIPT: &str = include_str!("../../lua/rl.lua");
pub(crate) const CLOCK: &str = "call(\"TIME\")";
/// The fast code's form of it (redis.pcall: that code raises no error).
pub(crate) const CLOCK_PCALL: &str = "pcall_redis(\"TIME\")";
pub(crate) const ENTRY: &str = "local function rl(keys, args)\n";

/// The library with the clock replaced by the last argument (µs): for exact comparisons only.
pub(crate) fn fixed_clock_library() -> String {
    assert!(
        SCRIPT.contains(CLOCK),
        "lua/rl.lua reads TIME as the test expects"
    );
    assert!(
        SCRIPT.contains(ENTRY),
        "lua/rl.lua enters its calls as the test expects"
    );
    // Every TIME call (the general path's and the fast code's) reads the test's clock.
    let library = SCRIPT
        .replace(CLOCK_PCALL, "M.FIXED_TIME")
        .replace(CLOCK, "M.FIXED_TIME")
        .replacen(
            ENTRY,
            &format!(
                "{ENTRY}  if not M then\n    built()\n  end\n  \
             local fixed = tonumber(table.remove(args))\n  \
             M.FIXED_TIME = {{ string.format(\"%d\", math.floor(fixed / 1000000)), \
             string.format(\"%d\", fixed % 1000000) }}\n"
            ),
            1,
        );
    assert!(
        !library.contains("\"TIME\""),
        "lua/rl.lua reads TIME in a form the test does not replace"
    );
    library
}

/// The same file as a script (EVALSHA), for servers that refuse FUNCTION.
pub(crate) fn as_script(library: &str) -> String {
    let (_, rest) = library.split_once('\n').unwrap();
    format!("#!lua\n{rest}")
}

/// Loads the library (`FUNCTION LOAD REPLACE`) and the same file as a script; returns the
/// script's sha.
pub(crate) fn load(conn: &mut redis::Connection, library: &str) -> String {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library)
        .query(conn)
        .unwrap();
    assert_eq!(name, "redisrl");
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(as_script(library))
        .query(conn)
        .unwrap()
}

/// `RL.X key args...` as the twin's `FCALL rl numkeys keys... RL.X args...`.
pub(crate) fn twin_cmd(_sha: &str, keys: &[String], argv: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg("rl").arg(keys.len()).arg(keys).arg(argv);
    cmd
}

/// The same through the script: `EVALSHA sha numkeys keys... RL.X args...`.
pub(crate) fn script_cmd(sha: &str, keys: &[String], argv: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(keys.len()).arg(keys).arg(argv);
    cmd
}

pub(crate) fn module_cmd(name: &str, keys: &[String], rest: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    if name == "RL.ALL" {
        cmd.arg(keys.len());
    }
    cmd.arg(keys).arg(rest);
    cmd
}

pub(crate) fn pexpiretime(conn: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(conn).unwrap()
}

pub(crate) fn get(conn: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(conn).unwrap()
}

#[test]
pub(crate) fn exact_against_the_core() {
    let server = Server::start();
    let mut conn = server.client();
    let sha = load(&mut conn, &fixed_clock_library());
    // Start a day ahead of the server's clock, so no key expires during the test.
    let start = server_time_us(&mut conn) + 86_400_000_000;
    let sequences: u64 = 60;
    let steps = 80;
    let mut calls = 0;
    for seed in 0..sequences {
        let mut r = Rng::new(seed * 7919 + 17);
        let n = r.range(1, 3) as usize;
        let kinds: Vec<Kind> = (0..n).map(|_| r.pick(&KINDS)).collect();
        let mut specs: Vec<Spec> = kinds.iter().map(|&k| Spec::random(k, &mut r)).collect();
        let keys: Vec<String> = (0..n).map(|i| format!("{{s{seed}}}:k{i}")).collect();
        let mut states: Vec<Option<AnyState>> = vec![None; n];
        let mut expiries: Vec<i64> = vec![-2; n];
        let mut now = start + r.below(1_000_000_000);
        for step in 0..steps {
            // The clock: mostly small steps, sometimes a window or more, sometimes back.
            let longest = specs.iter().map(Spec::duration_us).max().unwrap();
            now = match r.below(20) {
                0 => now.saturating_sub(r.range(1, 5_000)).max(start),
                1..=3 => now + r.below(longest.saturating_mul(2).min(10_000_000_000)),
                4..=6 => now,
                _ => now + r.below(1_500),
            };
            if r.percent(5) {
                let k = r.below(n as u64) as usize;
                specs[k] = Spec::random(kinds[k], &mut r);
            }
            let op = Op::random(&mut r, &specs);
            let (name, idx, rest) = op.command(&specs);
            let op_keys: Vec<String> = idx.iter().map(|&i| keys[i].clone()).collect();
            let mut argv = vec![name.to_string()];
            argv.extend(rest);
            argv.push(now.to_string());
            let expected = model(&op, &specs, &states, now);
            // The library and the script alike.
            let cmd = if r.percent(25) {
                script_cmd(&sha, &op_keys, &argv)
            } else {
                twin_cmd(&sha, &op_keys, &argv)
            };
            let got: Value = cmd
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("seed {seed} step {step} {argv:?}: {e}"));
            calls += 1;
            assert_eq!(
                got, expected.reply,
                "seed {seed} step {step} now {now} {argv:?} keys {op_keys:?} specs {specs:?} states {states:?}"
            );
            for (k, state, expiry) in expected.writes {
                expiries[k] = expiry.0 as i64;
                states[k] = Some(state);
            }
            for k in 0..n {
                let want = states[k].as_ref().map(encode);
                assert_eq!(
                    get(&mut conn, &keys[k]).map(rebased),
                    want,
                    "bytes of {} after seed {seed} step {step} {argv:?}",
                    keys[k]
                );
                assert_eq!(
                    pexpiretime(&mut conn, &keys[k]),
                    expiries[k],
                    "expiry of {} after seed {seed} step {step} {argv:?}",
                    keys[k]
                );
            }
        }
    }
    assert_eq!(calls, sequences * steps);
}

/// Parameters for which a few seconds of real time change no count (durations of 10^12 ms,
/// refill far below one token per test): the module and the twin then agree exactly on
/// every count, and their time fields differ by no more than the time between the calls.
pub(crate) fn time_insensitive(kind: Kind, r: &mut Rng) -> Spec {
    let long = 1_000_000_000_000;
    let limit = r.range(1, 12);
    match kind {
        Kind::Tb => Spec::Tb(TokenBucketParams::new(limit, r.range(1, 3), long).unwrap()),
        Kind::Sw => Spec::Sw(SlidingWindowParams::new(limit, long).unwrap()),
        Kind::Fw => Spec::Fw(FixedWindowParams::new(limit, long).unwrap()),
        Kind::Gc => {
            let burst = r.percent(50).then(|| r.range(1, 12));
            Spec::Gc(GcraParams::new(limit, long, burst).unwrap())
        }
        Kind::Lg => Spec::Lg(SlidingLogParams::new(limit, long).unwrap()),
        Kind::Qu => {
            let cal = Calendar::new(Period::Year, r.range(0, 1_439) as i64, 1).unwrap();
            Spec::Qu(QuotaParams::new(limit, cal).unwrap())
        }
    }
}

/// Time fields (retry_after_ms, reset_after_ms) within `tolerance` ms; everything else equal.
pub(crate) fn assert_same(module: &Value, twin: &Value, tolerance: i64, what: &str) {
    let close = |a: &[i64], b: &[i64], time_fields: &[usize]| {
        a.len() == b.len()
            && a.iter().zip(b).enumerate().all(|(i, (x, y))| {
                if time_fields.contains(&i) && *x >= 0 && *y >= 0 {
                    (x - y).abs() <= tolerance
                } else {
                    x == y
                }
            })
    };
    let ok = match (module, twin) {
        (Value::Array(m), Value::Array(_)) if m.len() == 3 => {
            let (ma, md, mp) = all_reply(module);
            let (ta, td, tp) = all_reply(twin);
            ma == ta
                && md == td
                && mp.len() == tp.len()
                && mp.iter().zip(&tp).all(|(a, b)| close(a, b, &[2, 3]))
        }
        // Single-key replies, with `granted` as a sixth integer after UPTO.
        _ => close(&to_ints(module), &to_ints(twin), &[3, 4]),
    };
    assert!(
        ok,
        "{what}: module {module:?}, twin {twin:?} (tolerance {tolerance} ms)"
    );
}

#[test]
pub(crate) fn same_replies_as_the_module() {
    let server = Server::start();
    let sha = load(&mut server.client(), SCRIPT);
    // Every seed on a connection of its own, RESP2 and RESP3 in turn.
    let mut conns = PROTOCOLS.map(|p| server.client_speaking(p));
    let began = Instant::now();
    for seed in 0..30u64 {
        let conn = &mut conns[seed as usize % PROTOCOLS.len()];
        let mut r = Rng::new(seed * 104_729 + 3);
        let n = r.range(1, 3) as usize;
        let kinds: Vec<Kind> = (0..n).map(|_| r.pick(&KINDS)).collect();
        let specs: Vec<Spec> = kinds.iter().map(|&k| time_insensitive(k, &mut r)).collect();
        // Module only, twin only, and alternating (each continues the other's bytes).
        let sets: Vec<Vec<String>> = ["m", "t", "x"]
            .iter()
            .map(|who| (0..n).map(|i| format!("{{d{seed}}}:{who}{i}")).collect())
            .collect();
        for step in 0..40 {
            // Without FORCE: a forced debt on these refills of 10^12 ms is paid back beyond
            // the latest instant the twin stores (2^52 us), which it refuses by its range
            // error; the clocked model test compares FORCE exactly.
            let op = Op::random(&mut r, &specs).without_force();
            let (name, idx, rest) = op.command(&specs);
            // 0: the module, 1: the library (FCALL), 2: the script (EVALSHA).
            let run = |conn: &mut redis::Connection, set: &[String], how: u64| -> Value {
                let keys: Vec<String> = idx.iter().map(|&i| set[i].clone()).collect();
                let mut argv = vec![name.to_string()];
                argv.extend(rest.iter().cloned());
                let cmd = match how {
                    0 => module_cmd(name, &keys, &rest),
                    1 => twin_cmd(&sha, &keys, &argv),
                    _ => script_cmd(&sha, &keys, &argv),
                };
                cmd.query(conn)
                    .unwrap_or_else(|e| panic!("seed {seed} step {step} {name} {rest:?}: {e}"))
            };
            let m = run(conn, &sets[0], 0);
            let t = run(conn, &sets[1], 1);
            let x = run(conn, &sets[2], r.below(3));
            let tolerance = began.elapsed().as_millis() as i64 + 2;
            let what = format!("seed {seed} step {step} {name} {rest:?}");
            assert_same(&m, &t, tolerance, &what);
            assert_same(&m, &x, tolerance, &format!("{what} (alternating key)"));
        }
        // Windows and counters hold no instant finer than the window: the module reads the
        // same state from each key (the window, its start and its counts; RL.STATE's
        // `count` and TTL move with the clock).
        for (i, kind) in kinds.iter().enumerate() {
            if matches!(kind, Kind::Sw | Kind::Fw) {
                let fields = if *kind == Kind::Sw { 10 } else { 6 };
                let state = |conn: &mut redis::Connection, key: &str| {
                    // A map in RESP3, its pairs flattened in RESP2.
                    let v = match redis::cmd("RL.STATE").arg(key).query(conn).unwrap() {
                        Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                        Value::Array(items) => items,
                        other => panic!("RL.STATE replied {other:?}"),
                    };
                    v[..fields].to_vec()
                };
                let m = state(conn, &sets[0][i]);
                assert_eq!(m, state(conn, &sets[1][i]), "seed {seed} key {i}");
                assert_eq!(m, state(conn, &sets[2][i]), "seed {seed} key {i}");
            }
            // A quota's period holds no instant either, and the twin writes it as the module.
            if *kind == Kind::Qu {
                let m = get(conn, &sets[0][i]);
                assert_eq!(m, get(conn, &sets[1][i]), "seed {seed} key {i}");
                assert_eq!(m, get(conn, &sets[2][i]), "seed {seed} key {i}");
            }
        }
    }
}

#[test]
fn refuses_what_it_cannot_compute_exactly() {
    let server = Server::start();
    let mut conn = server.client();
    let sha = load(&mut conn, SCRIPT);
    let twin_error = |conn: &mut redis::Connection, argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let e = twin_cmd(&sha, &["{x}:k".to_string()], &argv)
            .query::<Value>(conn)
            .unwrap_err();
        error_text(&e)
    };
    assert_eq!(
        twin_error(&mut conn, &["RL.TOKENBUCKET", "1000000000000000", "1", "1000000000000"]),
        "ERR capacity x refill_ms / refill_tokens is over 2^53 ms, beyond the exact range of the Lua twin: use the module for these parameters"
    );
    assert_eq!(
        twin_error(&mut conn, &["RL.GCRA", "1", "1000000000000", "BURST", "1000000000000000"]),
        "ERR burst x period_ms / limit is over 2^53 ms, beyond the exact range of the Lua twin: use the module for these parameters"
    );
    assert_eq!(get(&mut conn, "{x}:k"), None);
    // The largest counts and durations are exact when the waits fit.
    let ok: Value = twin_cmd(
        &sha,
        &["{x}:k".to_string()],
        &[
            "RL.TOKENBUCKET",
            "1000000000000000",
            "1000000000000000",
            "1000000000000",
            "COST",
            "1000000000000000",
        ]
        .map(String::from),
    )
    .query(&mut conn)
    .unwrap();
    assert_eq!(to_ints(&ok)[..3], [1, 1_000_000_000_000_000, 0]);
    assert_eq!(
        twin_error(&mut conn, &["RL.NOPE"]),
        "ERR unknown command 'RL.NOPE' for the Lua twin"
    );
    let e = script_cmd(&sha, &["{x}:k".to_string()], &["RL.NOPE".to_string()])
        .query::<Value>(&mut conn)
        .unwrap_err();
    assert_eq!(
        error_text(&e),
        "ERR unknown command 'RL.NOPE' for the Lua twin"
    );
}

#[test]
fn concurrent_clients_admit_exactly_the_budget() {
    let server = Server::start();
    let sha = load(&mut server.client(), SCRIPT);
    let budget = 100;
    for kind in KINDS {
        let spec = match kind {
            Kind::Tb => Spec::Tb(TokenBucketParams::new(budget, 1, 1_000_000_000_000).unwrap()),
            Kind::Sw => Spec::Sw(SlidingWindowParams::new(budget, 1_000_000_000_000).unwrap()),
            Kind::Fw => Spec::Fw(FixedWindowParams::new(budget, 1_000_000_000_000).unwrap()),
            Kind::Gc => Spec::Gc(GcraParams::new(budget, 1_000_000_000_000, None).unwrap()),
            Kind::Lg => Spec::Lg(SlidingLogParams::new(budget, 1_000_000_000_000).unwrap()),
            Kind::Qu => {
                let cal = Calendar::new(Period::Year, 0, 1).unwrap();
                Spec::Qu(QuotaParams::new(budget, cal).unwrap())
            }
        };
        let (name, rest) = spec.command();
        let key = format!("{{c}}:{kind:?}");
        let admitted = hammer_with(&server, 32, |_, conn| {
            let mut argv = vec![name.to_string()];
            argv.extend(rest.iter().cloned());
            (0..8)
                .map(|_| {
                    let v: Value = twin_cmd(&sha, std::slice::from_ref(&key), &argv)
                        .query(conn)
                        .unwrap();
                    to_ints(&v)[0]
                })
                .collect()
        });
        assert_eq!(admitted.len(), 256);
        assert_eq!(admitted.iter().sum::<i64>(), budget as i64, "{kind:?}");
    }
}

/// The fast GCRA adds to the arrival time's low 48 bits and carries into the high ones: an
/// instant where now x limit is just below a multiple of 2^48 and a cost that passes it
/// must write exactly now x limit + cost x interval (the random sequences rarely cross).
#[test]
fn gcra_arrival_time_carries_past_2_48() {
    let server = Server::start();
    let mut conn = server.client();
    load(&mut conn, &fixed_clock_library());
    // limit 2^30: now x limit mod 2^48 is (now mod 2^18) x 2^30, so the instant is found at
    // once, and the limit has a high 26-bit half (both halves of the product are used).
    let (limit, period_ms, cost): (u128, u128, u128) = (1 << 30, 2_000_000, 1_000);
    let interval = period_ms * 1000;
    let start = u128::from(server_time_us(&mut conn)) + 86_400_000_000;
    let below = (1u128 << 48) - cost * interval;
    let m = below.div_ceil(1 << 30);
    let mut now = start - start % (1 << 18) + m;
    if now < start {
        now += 1 << 18;
    }
    let low = (now * limit) % (1 << 48);
    assert!(low < 1 << 48 && low + cost * interval >= 1 << 48);
    let key = vec!["{carry}:g".to_string()];
    let argv: Vec<String> = [
        "RL.GCRA",
        &limit.to_string(),
        &period_ms.to_string(),
        "BURST",
        "1000000",
        "COST",
        &cost.to_string(),
        &now.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let reply: Vec<i64> = twin_cmd("", &key, &argv).query(&mut conn).unwrap();
    assert_eq!(reply[0], 1, "{reply:?}");
    let tat = now * limit + cost * interval;
    let mut want = vec![0, b'R', b'L', 1, b'G'];
    want.extend_from_slice(&tat.to_le_bytes());
    want.extend_from_slice(&(limit as u64).to_le_bytes());
    want.extend_from_slice(&(period_ms as u64).to_le_bytes());
    assert_eq!(get(&mut conn, &key[0]), Some(want));
}
