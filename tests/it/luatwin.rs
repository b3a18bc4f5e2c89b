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
//! - the same error texts as the module for bad arguments, nothing changed by a refused call,
//!   the twin's exact-range refusal, and 32 concurrent clients admitting exactly the budget.

use redis_rl_testkit::*;

use redis::Value;
use redis_rl_core::calendar::{Calendar, Period};
use redis_rl_core::decision::expire_at;
use redis_rl_core::fixed_window::{self, FixedWindowParams, FixedWindowState};
use redis_rl_core::gcra::{self, GcraParams, GcraState};
use redis_rl_core::quota::{self, QuotaParams, QuotaState};
use redis_rl_core::sliding_log::{self, SlidingLogParams, SlidingLogState};
use redis_rl_core::sliding_window::{self, SlidingWindowParams, SlidingWindowState};
use redis_rl_core::token_bucket::{self, TokenBucketParams, TokenBucketState};
use redis_rl_core::{Decision, Micros, Millis, Outcome};
use std::time::Instant;

const SCRIPT: &str = include_str!("../../lua/rl.lua");
const CLOCK: &str = "call(\"TIME\")";
const ENTRY: &str = "  M = M or build()\n";

/// The library with the clock replaced by the last argument (µs): for exact comparisons only.
fn fixed_clock_library() -> String {
    assert!(
        SCRIPT.contains(CLOCK),
        "lua/rl.lua reads TIME as the test expects"
    );
    assert!(
        SCRIPT.contains(ENTRY),
        "lua/rl.lua builds M as the test expects"
    );
    // Every TIME call (the general path's and the fast code's) reads the test's clock.
    SCRIPT.replace(CLOCK, "M.FIXED_TIME").replacen(
        ENTRY,
        &format!(
            "{ENTRY}  local fixed = tonumber(table.remove(args))\n  \
             M.FIXED_TIME = {{ string.format(\"%d\", math.floor(fixed / 1000000)), \
             string.format(\"%d\", fixed % 1000000) }}\n"
        ),
        1,
    )
}

/// The same file as a script (EVALSHA), for servers that refuse FUNCTION.
fn as_script(library: &str) -> String {
    let (_, rest) = library.split_once('\n').unwrap();
    format!("#!lua\n{rest}")
}

/// Loads the library (`FUNCTION LOAD REPLACE`) and the same file as a script; returns the
/// script's sha.
fn load(conn: &mut redis::Connection, library: &str) -> String {
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
fn twin_cmd(_sha: &str, keys: &[String], argv: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg("rl").arg(keys.len()).arg(keys).arg(argv);
    cmd
}

/// The same through the script: `EVALSHA sha numkeys keys... RL.X args...`.
fn script_cmd(sha: &str, keys: &[String], argv: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(keys.len()).arg(keys).arg(argv);
    cmd
}

fn module_cmd(name: &str, keys: &[String], rest: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    if name == "RL.ALL" {
        cmd.arg(keys.len());
    }
    cmd.arg(keys).arg(rest);
    cmd
}

const EXACT: u128 = (1 << 53) - 1;
const MARGIN: u128 = 2_000_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Tb,
    Sw,
    Fw,
    Gc,
    Lg,
    Qu,
}

const KINDS: [Kind; 6] = [Kind::Tb, Kind::Sw, Kind::Fw, Kind::Gc, Kind::Lg, Kind::Qu];

#[derive(Clone, Copy, Debug)]
enum Spec {
    Tb(TokenBucketParams),
    Sw(SlidingWindowParams),
    Fw(FixedWindowParams),
    Gc(GcraParams),
    Lg(SlidingLogParams),
    Qu(QuotaParams),
}

#[derive(Clone, Debug)]
enum State {
    Tb(TokenBucketState),
    Sw(SlidingWindowState),
    Fw(FixedWindowState),
    Gc(GcraState),
    Lg(SlidingLogState),
    Qu(QuotaState),
}

fn count(r: &mut Rng) -> u64 {
    match r.below(10) {
        0 => r.range(1, 1_000_000_000_000_000),
        1 => r.range(1, 1_000_000),
        _ => r.range(1, 20),
    }
}

fn duration(r: &mut Rng) -> u64 {
    match r.below(10) {
        0 => r.range(1, 1_000_000_000_000),
        1 => r.pick(&[1, 2, 3, 7]),
        2 => r.range(1, 100_000),
        _ => r.pick(&[10, 100, 1000, 1500, 60_000]),
    }
}

impl Spec {
    /// Random parameters inside the twin's exact range (see README "Without the module").
    fn random(kind: Kind, r: &mut Rng) -> Spec {
        loop {
            let spec = match kind {
                Kind::Tb => {
                    Spec::Tb(TokenBucketParams::new(count(r), count(r), duration(r)).unwrap())
                }
                Kind::Sw => Spec::Sw(SlidingWindowParams::new(count(r), duration(r)).unwrap()),
                Kind::Fw => Spec::Fw(FixedWindowParams::new(count(r), duration(r)).unwrap()),
                Kind::Gc => {
                    let burst = r.percent(50).then(|| count(r));
                    Spec::Gc(GcraParams::new(count(r), duration(r), burst).unwrap())
                }
                Kind::Lg => {
                    let limit = if r.percent(10) {
                        r.range(1, 10_000)
                    } else {
                        r.range(1, 30)
                    };
                    Spec::Lg(SlidingLogParams::new(limit, duration(r)).unwrap())
                }
                Kind::Qu => {
                    let period = r.pick(&Period::ALL);
                    let tz = r.range(0, 2 * 1_439) as i64 - 1_439;
                    let anchor = if period == Period::Month {
                        let any = r.range(1, 31);
                        r.pick(&[1, 15, 28, 29, 30, 31, any])
                    } else {
                        1
                    };
                    let cal = Calendar::new(period, tz, anchor).unwrap();
                    Spec::Qu(QuotaParams::new(count(r), cal).unwrap())
                }
            };
            if spec.in_twin_range() {
                return spec;
            }
        }
    }

    /// The twin's documented exact range: a full refill (token bucket) or burst (GCRA)
    /// takes at most 2^53 - 1 ms less two maximal durations.
    fn in_twin_range(&self) -> bool {
        let wait = |a: u64, b: u64, c: u64| u128::from(a) * u128::from(b) / u128::from(c);
        match self {
            Spec::Tb(p) => wait(p.capacity(), p.refill_ms(), p.refill_tokens()) <= EXACT - MARGIN,
            Spec::Gc(p) => wait(p.burst(), p.period_ms(), p.limit()) <= EXACT - MARGIN,
            _ => true,
        }
    }

    fn limit(&self) -> u64 {
        match self {
            Spec::Tb(p) => p.capacity(),
            Spec::Sw(p) => p.limit(),
            Spec::Fw(p) => p.limit(),
            Spec::Gc(p) => p.burst(),
            Spec::Lg(p) => p.limit(),
            Spec::Qu(p) => p.limit(),
        }
    }

    fn duration_us(&self) -> u64 {
        match self {
            Spec::Tb(p) => p.refill_ms() * 1000,
            Spec::Sw(p) => p.window_ms() * 1000,
            Spec::Fw(p) => p.window_ms() * 1000,
            Spec::Gc(p) => p.period_ms() * 1000,
            Spec::Lg(p) => p.window_ms() * 1000,
            // The shortest period: the clock's long steps then cross days now and then.
            Spec::Qu(_) => 86_400_000_000,
        }
    }

    /// The command name and its arguments after the key.
    fn command(&self) -> (&'static str, Vec<String>) {
        let s = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>();
        match self {
            Spec::Tb(p) => (
                "RL.TOKENBUCKET",
                s(&[p.capacity(), p.refill_tokens(), p.refill_ms()]),
            ),
            Spec::Sw(p) => ("RL.SLIDING", s(&[p.limit(), p.window_ms()])),
            Spec::Fw(p) => ("RL.FIXED", s(&[p.limit(), p.window_ms()])),
            Spec::Gc(p) => {
                let mut a = s(&[p.limit(), p.period_ms()]);
                if p.burst() != p.limit() {
                    a.extend(["BURST".to_string(), p.burst().to_string()]);
                }
                ("RL.GCRA", a)
            }
            Spec::Lg(p) => ("RL.LOG", s(&[p.limit(), p.window_ms()])),
            Spec::Qu(p) => {
                let cal = p.calendar();
                let mut a = vec![p.limit().to_string(), cal.period().word().to_string()];
                // Options in either order; defaults sometimes written out.
                let tz = ["TZ".to_string(), cal.offset_min().to_string()];
                let anchor = ["ANCHOR".to_string(), cal.anchor().to_string()];
                let (tz_given, anchor_given) = (
                    cal.offset_min() != 0 || p.limit() % 2 == 0,
                    cal.anchor() != 1,
                );
                if p.limit() % 3 == 0 {
                    if anchor_given {
                        a.extend(anchor.clone());
                    }
                    if tz_given {
                        a.extend(tz);
                    }
                } else {
                    if tz_given {
                        a.extend(tz);
                    }
                    if anchor_given {
                        a.extend(anchor);
                    }
                }
                ("RL.QUOTA", a)
            }
        }
    }

    /// As a spec of RL.ALL / RL.REFUND.
    fn words(&self) -> Vec<String> {
        let (name, mut args) = self.command();
        args.insert(0, name.trim_start_matches("RL.").to_string());
        args
    }

    fn check(&self, state: Option<&State>, now: u64, cost: u64) -> (Decision, Option<State>) {
        let now = Micros(now);
        macro_rules! run {
            ($module:ident, $variant:ident, $p:expr) => {{
                let s = match state {
                    Some(State::$variant(s)) => Some(s.clone()),
                    None => None,
                    Some(other) => panic!("model state {other:?} for {self:?}"),
                };
                let (d, n) = $module::check(s, now, $p, cost);
                (d, n.map(State::$variant))
            }};
        }
        match self {
            Spec::Tb(p) => run!(token_bucket, Tb, p),
            Spec::Sw(p) => run!(sliding_window, Sw, p),
            Spec::Fw(p) => run!(fixed_window, Fw, p),
            Spec::Gc(p) => run!(gcra, Gc, p),
            Spec::Lg(p) => run!(sliding_log, Lg, p),
            Spec::Qu(p) => run!(quota, Qu, p),
        }
    }

    /// Whether its command takes `UPTO`.
    fn takes_upto(&self) -> bool {
        !matches!(self, Spec::Lg(_))
    }

    /// A partial grant (`UPTO`): the decision, the state to write and the units granted.
    fn upto(&self, state: Option<&State>, now: u64, cost: u64) -> (Decision, Option<State>, u64) {
        use redis_rl_core::algorithm::upto;
        let now = Micros(now);
        macro_rules! run {
            ($algorithm:ty, $variant:ident, $p:expr) => {{
                let s = match state {
                    Some(State::$variant(s)) => Some(s.clone()),
                    None => None,
                    Some(other) => panic!("model state {other:?} for {self:?}"),
                };
                let (d, granted, n) = upto::<$algorithm>(s, now, $p, cost);
                (d, n.map(State::$variant), granted)
            }};
        }
        match self {
            Spec::Tb(p) => run!(token_bucket::TokenBucket, Tb, p),
            Spec::Sw(p) => run!(sliding_window::SlidingWindow, Sw, p),
            Spec::Fw(p) => run!(fixed_window::FixedWindow, Fw, p),
            Spec::Gc(p) => run!(gcra::Gcra, Gc, p),
            Spec::Lg(_) => panic!("RL.LOG takes no UPTO"),
            Spec::Qu(p) => run!(quota::Quota, Qu, p),
        }
    }

    fn refund(&self, state: Option<&State>, now: u64, amount: u64) -> (u64, Option<State>) {
        let now = Micros(now);
        macro_rules! run {
            ($module:ident, $variant:ident, $p:expr) => {{
                let s = match state {
                    Some(State::$variant(s)) => Some(s.clone()),
                    None => None,
                    Some(other) => panic!("model state {other:?} for {self:?}"),
                };
                let (n, st) = $module::refund(s, now, $p, amount);
                (n, st.map(State::$variant))
            }};
        }
        match self {
            Spec::Tb(p) => run!(token_bucket, Tb, p),
            Spec::Sw(p) => run!(sliding_window, Sw, p),
            Spec::Fw(p) => run!(fixed_window, Fw, p),
            Spec::Gc(p) => run!(gcra, Gc, p),
            Spec::Lg(p) => run!(sliding_log, Lg, p),
            Spec::Qu(p) => run!(quota, Qu, p),
        }
    }
}

/// The stored bytes the twin writes (README's format, which the module reads): version 1,
/// 8-byte little-endian fields (16 for a u128), for the fixed-size states whose fields are
/// all below 2^53 (what the twin packs with the server's `struct` library) and for a GCRA
/// whatever its arrival time, else version 2
/// (varints, a window as its index); version 1 varints for a log.
fn encode(state: &State) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, v: u64) {
        wide(out, u128::from(v));
    }
    fn wide(out: &mut Vec<u8>, mut v: u128) {
        while v >= 0x80 {
            out.push((v & 0x7f) as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn fixed(tag: u8, fields: &[u128], widths: &[usize]) -> Vec<u8> {
        let mut out = vec![0, b'R', b'L', 1, tag];
        for (v, w) in fields.iter().zip(widths) {
            out.extend_from_slice(&v.to_le_bytes()[..*w]);
        }
        out
    }
    const EXACT: u128 = 1 << 53;
    let mut out = b"\0RL\x02".to_vec();
    match state {
        State::Tb(s) if s.level < EXACT => {
            let f = [u128::from(s.updated_at.0), u128::from(s.refill_ms), s.level];
            return fixed(b'T', &f, &[8, 8, 16]);
        }
        State::Tb(s) => {
            out.push(b'T');
            // Microseconds since 2020-01-01, wrapping below it.
            varint(&mut out, s.updated_at.0.wrapping_sub(1_577_836_800_000_000));
            varint(&mut out, s.refill_ms);
            wide(&mut out, s.level);
        }
        State::Sw(s) => {
            let f = [s.window_ms, s.window_start.0, s.previous, s.current].map(u128::from);
            return fixed(b'S', &f, &[8; 4]);
        }
        State::Fw(s) => {
            let f = [s.window_ms, s.window_start.0, s.count].map(u128::from);
            return fixed(b'F', &f, &[8; 3]);
        }
        State::Gc(s) => {
            let f = [s.tat, u128::from(s.limit), u128::from(s.period_ms)];
            return fixed(b'G', &f, &[16, 8, 8]);
        }
        State::Qu(s) => {
            out.push(b'Q');
            varint(&mut out, s.period_start.0);
            varint(&mut out, s.period_end.0 - s.period_start.0);
            varint(&mut out, s.count);
        }
        State::Lg(s) => {
            out[3] = 1;
            out.push(b'L');
            varint(&mut out, s.window_ms);
            let mut previous = 0;
            for e in &s.entries {
                let delta = e.at.0 - previous;
                previous = e.at.0;
                if e.count == 1 {
                    varint(&mut out, delta << 1);
                } else {
                    varint(&mut out, delta << 1 | 1);
                    varint(&mut out, e.count);
                }
            }
        }
    }
    out
}

/// The module's reply fields for a decision (`src/reply.rs`).
fn fields(d: &Decision) -> Vec<i64> {
    let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let (allowed, retry) = match d.outcome {
        Outcome::Allowed => (1, 0),
        Outcome::Denied { retry_after } => (0, int(retry_after.0)),
        Outcome::Never => (0, -1),
    };
    vec![
        allowed,
        int(d.limit),
        int(d.remaining),
        retry,
        int(d.reset_after.0),
    ]
}

fn to_ints(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => *n,
                other => panic!("not an integer: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

/// RL.ALL's reply as `(allowed, denied_index, per-key fields)`.
fn all_reply(v: &Value) -> (i64, i64, Vec<Vec<i64>>) {
    let Value::Array(items) = v else {
        panic!("RL.ALL reply {v:?}")
    };
    let [Value::Int(a), Value::Int(d), per] = &items[..] else {
        panic!("RL.ALL reply {v:?}")
    };
    let Value::Array(per) = per else {
        panic!("RL.ALL reply {v:?}")
    };
    (*a, *d, per.iter().map(to_ints).collect())
}

/// One operation of a random sequence.
#[derive(Clone, Debug)]
enum Op {
    Check {
        key: usize,
        cost: u64,
        peek: bool,
        upto: bool,
    },
    Refund {
        key: usize,
        amount: u64,
    },
    All {
        keys: Vec<usize>,
        cost: u64,
        peek: bool,
    },
}

impl Op {
    fn random(r: &mut Rng, specs: &[Spec]) -> Op {
        let cost_for = |r: &mut Rng, limit: u64| match r.below(10) {
            0 => 0,
            1 | 2 => r.range(0, limit.saturating_add(1).min(1_000_000_000_000_000)),
            3 => limit.min(1_000_000_000_000_000),
            _ => 1,
        };
        let key = r.below(specs.len() as u64) as usize;
        match r.below(10) {
            0 | 1 => Op::Refund {
                key,
                amount: cost_for(r, specs[key].limit()),
            },
            2 | 3 => {
                let mut keys: Vec<usize> = (0..specs.len()).filter(|_| r.percent(60)).collect();
                if keys.is_empty() {
                    keys.push(key);
                }
                let least = keys.iter().map(|&k| specs[k].limit()).min().unwrap();
                Op::All {
                    keys,
                    cost: cost_for(r, least),
                    peek: r.percent(15),
                }
            }
            _ => {
                let upto = specs[key].takes_upto() && r.percent(25);
                // With UPTO a cost above the limit is an ordinary request for "as many as can be".
                let limit = specs[key].limit();
                let cost = cost_for(r, if upto { limit.saturating_mul(3) } else { limit });
                Op::Check {
                    key,
                    cost,
                    peek: r.percent(15),
                    upto,
                }
            }
        }
    }

    /// The command as `(name, keys (indices), arguments after the keys)`.
    fn command(&self, specs: &[Spec]) -> (&'static str, Vec<usize>, Vec<String>) {
        let opts = |cost: u64, peek: bool| {
            let mut o = Vec::new();
            if cost != 1 {
                o.extend(["COST".to_string(), cost.to_string()]);
            }
            if peek {
                o.push("PEEK".to_string());
            }
            o
        };
        match self {
            Op::Check {
                key,
                cost,
                peek,
                upto,
            } => {
                let (name, mut args) = specs[*key].command();
                args.extend(opts(*cost, *peek));
                if *upto {
                    args.push("UPTO".to_string());
                }
                (name, vec![*key], args)
            }
            Op::Refund { key, amount } => {
                let mut args = specs[*key].words();
                args.extend(["COST".to_string(), amount.to_string()]);
                ("RL.REFUND", vec![*key], args)
            }
            Op::All { keys, cost, peek } => {
                let mut args: Vec<String> = keys.iter().flat_map(|&k| specs[k].words()).collect();
                args.extend(opts(*cost, *peek));
                ("RL.ALL", keys.clone(), args)
            }
        }
    }
}

/// What a call should reply and write, from the core.
struct Expected {
    reply: Value,
    writes: Vec<(usize, State, Millis)>,
}

fn int_array(v: Vec<i64>) -> Value {
    Value::Array(v.into_iter().map(Value::Int).collect())
}

fn model(op: &Op, specs: &[Spec], states: &[Option<State>], now: u64) -> Expected {
    let slack = Millis(1000);
    let expiry = |d: &Decision| expire_at(Micros(now), d.reset_after, slack);
    match op {
        Op::Check {
            key,
            cost,
            peek,
            upto,
        } => {
            let state = states[*key].as_ref();
            let (d, new, granted) = if *upto {
                let (d, new, granted) = specs[*key].upto(state, now, *cost);
                (d, new, Some(granted))
            } else {
                let (d, new) = specs[*key].check(state, now, *cost);
                (d, new, None)
            };
            let writes = match (new, peek) {
                (Some(s), false) => vec![(*key, s, expiry(&d))],
                _ => vec![],
            };
            let mut reply = fields(&d);
            reply.extend(granted.map(|g| g as i64));
            Expected {
                reply: int_array(reply),
                writes,
            }
        }
        Op::Refund { key, amount } => {
            let spec = &specs[*key];
            let (n, new) = spec.refund(states[*key].as_ref(), now, *amount);
            let view = spec.check(new.as_ref().or(states[*key].as_ref()), now, 0).0;
            let f = fields(&view);
            let writes = new
                .map(|s| vec![(*key, s, expiry(&view))])
                .unwrap_or_default();
            Expected {
                reply: int_array(vec![n as i64, f[1], f[2], 0, f[4]]),
                writes,
            }
        }
        Op::All { keys, cost, peek } => {
            let evaluated: Vec<_> = keys
                .iter()
                .map(|&k| specs[k].check(states[k].as_ref(), now, *cost))
                .collect();
            let denied = evaluated.iter().position(|(d, _)| !d.is_allowed());
            let mut per = Vec::new();
            let mut writes = Vec::new();
            for (&k, (d, new)) in keys.iter().zip(&evaluated) {
                let shown = if denied.is_some() && d.is_allowed() {
                    specs[k].check(states[k].as_ref(), now, 0).0
                } else {
                    *d
                };
                per.push(int_array(fields(&shown)[1..].to_vec()));
                if let (None, false, Some(s)) = (denied, peek, new) {
                    writes.push((k, s.clone(), expiry(d)));
                }
            }
            Expected {
                reply: Value::Array(vec![
                    Value::Int(i64::from(denied.is_none())),
                    Value::Int(denied.map_or(0, |i| i as i64 + 1)),
                    Value::Array(per),
                ]),
                writes,
            }
        }
    }
}

fn pexpiretime(conn: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(conn).unwrap()
}

fn get(conn: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(conn).unwrap()
}

#[test]
fn exact_against_the_core() {
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
        let mut states: Vec<Option<State>> = vec![None; n];
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
                    get(&mut conn, &keys[k]),
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
fn time_insensitive(kind: Kind, r: &mut Rng) -> Spec {
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
fn assert_same(module: &Value, twin: &Value, tolerance: i64, what: &str) {
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
fn same_replies_as_the_module() {
    let server = Server::start();
    let mut conn = server.client();
    let sha = load(&mut conn, SCRIPT);
    let began = Instant::now();
    for seed in 0..30u64 {
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
            let op = Op::random(&mut r, &specs);
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
            let m = run(&mut conn, &sets[0], 0);
            let t = run(&mut conn, &sets[1], 1);
            let x = run(&mut conn, &sets[2], r.below(3));
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
                    let v: Vec<Value> = redis::cmd("RL.STATE").arg(key).query(conn).unwrap();
                    v[..fields].to_vec()
                };
                let m = state(&mut conn, &sets[0][i]);
                assert_eq!(m, state(&mut conn, &sets[1][i]), "seed {seed} key {i}");
                assert_eq!(m, state(&mut conn, &sets[2][i]), "seed {seed} key {i}");
            }
            // A quota's period holds no instant either, and the twin writes it as the module.
            if *kind == Kind::Qu {
                let m = get(&mut conn, &sets[0][i]);
                assert_eq!(m, get(&mut conn, &sets[1][i]), "seed {seed} key {i}");
                assert_eq!(m, get(&mut conn, &sets[2][i]), "seed {seed} key {i}");
            }
        }
    }
}

#[test]
fn same_error_texts_as_the_module_and_nothing_changes() {
    let server = Server::start();
    let mut conn = server.client();
    let sha = load(&mut conn, SCRIPT);
    let bad_numbers = [
        "",
        "abc",
        "1.5",
        "-1",
        "+1",
        " 1",
        "1e3",
        "0x10",
        "\u{0663}",
        "99999999999999999999999",
        "18446744073709551616",
        "1000000000000001",
        "1000000000000000",
        "0",
        "00000000000000000000007",
        "1000000000001",
    ];
    let bases: &[&[&str]] = &[
        &["RL.TOKENBUCKET", "10", "10", "1000"],
        &["RL.SLIDING", "10", "1000"],
        &["RL.FIXED", "10", "1000"],
        &["RL.GCRA", "10", "1000", "BURST", "5"],
        &["RL.LOG", "10", "1000"],
        &["RL.QUOTA", "10", "MONTH", "TZ", "-300", "ANCHOR", "31"],
        &["RL.QUOTA", "10", "week", "ANCHOR", "1", "TZ", "330"],
        &["RL.REFUND", "SLIDING", "10", "1000", "COST", "1"],
        &["RL.REFUND", "QUOTA", "10", "DAY", "TZ", "1439", "COST", "1"],
        &["RL.REFUND", "GCRA", "10", "1000", "BURST", "3", "COST", "1"],
        &["RL.REFUND", "LOG", "10", "1000", "COST", "1"],
    ];
    let options: &[&[&str]] = &[
        &[],
        &["COST"],
        &["COST", "2", "COST", "3"],
        &["PEEK", "peek"],
        &["FOO"],
        &["BURST", "3"],
        &["cost", "x"],
        &["\u{1}bad\u{ff}option-that-is-longer-than-forty-bytes-for-sure"],
        &["BURST"],
        &["COST", "1", "EXTRA"],
        &["UPTO", "upto"],
        &["UPTO", "COST"],
        &["COST", "2", "UPTO", "2"],
        &["UPTO", "COST", "2"],
        &["UPTO", "PEEK", "COST", "1000000000000000"],
        &["TZ"],
        &["TZ", "1", "TZ", "2"],
        &["ANCHOR", "31", "ANCHOR"],
        &["ANCHOR", "15"],
        &["TZ", "-1440"],
        &["TZ", "--1"],
        &["FORCE"],
    ];
    let mut compare = |args: Vec<String>, base: &[&str]| {
        let (module_key, key) = ("{e}:m".to_string(), "{e}:k".to_string());
        // A live limiter in the twin's key first, which the refused call must leave alone.
        let base: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        let _ = module_cmd(&base[0], std::slice::from_ref(&module_key), &base[1..])
            .query::<Value>(&mut conn);
        let _ = twin_cmd(&sha, std::slice::from_ref(&key), &base).query::<Value>(&mut conn);
        let module = module_cmd(&args[0], std::slice::from_ref(&module_key), &args[1..])
            .query::<Value>(&mut conn);
        let before = (get(&mut conn, &key), pexpiretime(&mut conn, &key));
        let twin = twin_cmd(&sha, std::slice::from_ref(&key), &args).query::<Value>(&mut conn);
        match (&module, &twin) {
            (Err(m), Err(t)) => {
                assert_eq!(error_text(m), error_text(t), "{args:?}");
                let after = (get(&mut conn, &key), pexpiretime(&mut conn, &key));
                assert_eq!(
                    before, after,
                    "{args:?}: a refused twin call changed the key"
                );
            }
            // Both accepted: the values are compared elsewhere (with time-insensitive
            // parameters); some of these use windows of a few ms.
            (Ok(m), Ok(t)) => assert_eq!(to_ints(m)[1], to_ints(t)[1], "{args:?}"),
            // The documented difference: waits over 2^53 ms are refused by the twin.
            (Ok(_), Err(t)) if error_text(t).contains("beyond the exact range of the Lua twin") => {
            }
            // The other: FORCE (a debt over the limit) is the module's alone.
            (Ok(_), Err(t)) if error_text(t).contains("FORCE needs the redis-rl module") => {}
            _ => panic!("{args:?}: module {module:?}, twin {twin:?}"),
        }
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .arg(&module_key)
            .query(&mut conn)
            .unwrap();
    };
    for base in bases {
        for i in 1..base.len() {
            for bad in bad_numbers {
                let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
                args[i] = bad.to_string();
                compare(args, base);
            }
            // Truncated argument lists.
            compare(base[..i].iter().map(|s| s.to_string()).collect(), base);
        }
        for opts in options {
            let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            if args[0] == "RL.REFUND" {
                args.truncate(args.len() - 2);
            }
            args.extend(opts.iter().map(|s| s.to_string()));
            compare(args, base);
        }
    }
    // RL.ALL: the twin takes the keys from EVALSHA, so numkeys errors are its own; the rest
    // match.
    let all_cases: &[&[&str]] = &[
        &["SLIDING", "10", "1000", "FOO", "1"],
        &["SLIDING", "10", "1000"],
        &["SLIDING", "10", "1000", "GCRA", "1", "1000", "BURST"],
        &["SLIDING", "10", "1000", "GCRA", "1", "1000", "BURST", "0"],
        &["SLIDING", "10", "1000", "LOG", "10001", "1000"],
        &["SLIDING", "10", "1000", "TOKENBUCKET", "1", "1"],
        &[
            "SLIDING", "10", "1000", "FIXED", "1", "1000", "COST", "2", "PEEK", "PEEK",
        ],
        &["SLIDING", "10", "1000", "FIXED", "1", "1000", "BURST", "2"],
        &[
            "SLIDING", "10", "1000", "FIXED", "1", "1000", "COST", "2", "UPTO",
        ],
        &["QUOTA", "10", "MONTHLY", "FIXED", "1", "1000"],
        &["QUOTA", "10", "DAY", "ANCHOR", "2", "FIXED", "1", "1000"],
        &["QUOTA", "10", "MONTH", "ANCHOR", "32", "FIXED", "1", "1000"],
        &[
            "QUOTA", "10", "MONTH", "TZ", "1", "TZ", "2", "FIXED", "1", "1000",
        ],
        &[
            "QUOTA", "10", "MONTH", "ANCHOR", "31", "TZ", "-1440", "FIXED", "1", "1000",
        ],
    ];
    for case in all_cases {
        let keys = vec!["{e}:a".to_string(), "{e}:b".to_string()];
        let rest: Vec<String> = case.iter().map(|s| s.to_string()).collect();
        let m = module_cmd("RL.ALL", &keys, &rest).query::<Value>(&mut conn);
        let mut argv = vec!["RL.ALL".to_string()];
        argv.extend(rest.clone());
        let t = twin_cmd(&sha, &keys, &argv).query::<Value>(&mut conn);
        match (&m, &t) {
            (Err(m), Err(t)) => assert_eq!(error_text(m), error_text(t), "{case:?}"),
            _ => panic!("{case:?}: module {m:?}, twin {t:?}"),
        }
    }
    let keys = vec!["{e}:a".to_string(), "{e}:a".to_string()];
    let argv: Vec<String> = ["RL.ALL", "SLIDING", "1", "1", "SLIDING", "1", "1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let t = twin_cmd(&sha, &keys, &argv)
        .query::<Value>(&mut conn)
        .unwrap_err();
    assert_eq!(
        error_text(&t),
        "ERR key 2 repeats an earlier key: each key may appear once"
    );

    // Foreign values and other limiters: the module's texts.
    let _: () = redis::cmd("SET")
        .arg("{e}:text")
        .arg("hello")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("{e}:hash")
        .arg("f")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    let _: Value = redis::cmd("RL.SLIDING")
        .arg("{e}:sw")
        .arg(5)
        .arg(1000)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("{e}:v2")
        .arg(b"\0RL\x02S".as_slice())
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("{e}:bad")
        .arg(b"\0RL\x01Sxx".as_slice())
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("{e}:tag")
        .arg(b"\0RL\x01Z".as_slice())
        .query(&mut conn)
        .unwrap();
    let mut long_log = b"\0RL\x01L\x01".to_vec();
    long_log.resize(130_000, 0x02);
    let _: () = redis::cmd("SET")
        .arg("{e}:long")
        .arg(long_log)
        .query(&mut conn)
        .unwrap();
    let long_sw = [b"\0RL\x01S".as_slice(), &[1; 40]].concat();
    let _: () = redis::cmd("SET")
        .arg("{e}:long-sw")
        .arg(long_sw)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("{e}:empty")
        .arg("")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("{e}:int")
        .arg(12345)
        .query(&mut conn)
        .unwrap();
    let keys = [
        "{e}:text",
        "{e}:hash",
        "{e}:sw",
        "{e}:v2",
        "{e}:bad",
        "{e}:tag",
        "{e}:long",
        "{e}:long-sw",
        "{e}:empty",
        "{e}:int",
    ];
    for key in keys {
        for args in [
            vec!["RL.TOKENBUCKET", "1", "1", "1000"],
            vec!["RL.SLIDING", "5", "1000", "PEEK"],
            vec!["RL.FIXED", "5", "1000"],
            vec!["RL.GCRA", "5", "1000"],
            vec!["RL.LOG", "5", "1000"],
        ] {
            let mut full = vec![args[0].to_string()];
            full.extend(args[1..].iter().map(|s| s.to_string()));
            let keys = vec![key.to_string()];
            let m = module_cmd(args[0], &keys, &full[1..]).query::<Value>(&mut conn);
            let t = twin_cmd(&sha, &keys, &full).query::<Value>(&mut conn);
            match (&m, &t) {
                (Err(m), Err(t)) => assert_eq!(error_text(m), error_text(t), "{key} {args:?}"),
                (Ok(m), Ok(t)) => assert_same(m, t, 1000, key),
                _ => panic!("{key} {args:?}: module {m:?}, twin {t:?}"),
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
