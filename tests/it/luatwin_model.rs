//! The model the Lua twin is checked against (see `luatwin.rs`): random parameters of
//! every rate limiter inside the twin's exact range, the random operations on them, what
//! the core replies and stores for each (through the registry's `AnyParams`), and the
//! stored bytes the twin writes.

use redis::Value;
use redis_rl_core::calendar::{Calendar, Period};
use redis_rl_core::decision::expire_at;
use redis_rl_core::fixed_window::FixedWindowParams;
use redis_rl_core::gcra::GcraParams;
use redis_rl_core::quota::QuotaParams;
use redis_rl_core::sliding_log::SlidingLogParams;
use redis_rl_core::sliding_window::SlidingWindowParams;
use redis_rl_core::token_bucket::TokenBucketParams;
use redis_rl_core::{AnyParams, AnyState, Decision, Micros, Millis, Outcome};
use redis_rl_testkit::*;

pub(crate) const EXACT: u128 = (1 << 53) - 1;
pub(crate) const MARGIN: u128 = 2_000_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tb,
    Sw,
    Fw,
    Gc,
    Lg,
    Qu,
}

pub(crate) const KINDS: [Kind; 6] = [Kind::Tb, Kind::Sw, Kind::Fw, Kind::Gc, Kind::Lg, Kind::Qu];

#[derive(Clone, Copy, Debug)]
pub(crate) enum Spec {
    Tb(TokenBucketParams),
    Sw(SlidingWindowParams),
    Fw(FixedWindowParams),
    Gc(GcraParams),
    Lg(SlidingLogParams),
    Qu(QuotaParams),
}

pub(crate) fn count(r: &mut Rng) -> u64 {
    match r.below(10) {
        0 => r.range(1, 1_000_000_000_000_000),
        1 => r.range(1, 1_000_000),
        _ => r.range(1, 20),
    }
}

pub(crate) fn duration(r: &mut Rng) -> u64 {
    match r.below(10) {
        0 => r.range(1, 1_000_000_000_000),
        1 => r.pick(&[1, 2, 3, 7]),
        2 => r.range(1, 100_000),
        _ => r.pick(&[10, 100, 1000, 1500, 60_000]),
    }
}

impl Spec {
    /// Random parameters inside the twin's exact range (see README "Without the module").
    pub(crate) fn random(kind: Kind, r: &mut Rng) -> Spec {
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
    pub(crate) fn in_twin_range(&self) -> bool {
        let wait = |a: u64, b: u64, c: u64| u128::from(a) * u128::from(b) / u128::from(c);
        match self {
            Spec::Tb(p) => wait(p.capacity(), p.refill_ms(), p.refill_tokens()) <= EXACT - MARGIN,
            Spec::Gc(p) => wait(p.burst(), p.period_ms(), p.limit()) <= EXACT - MARGIN,
            _ => true,
        }
    }

    pub(crate) fn limit(&self) -> u64 {
        match self {
            Spec::Tb(p) => p.capacity(),
            Spec::Sw(p) => p.limit(),
            Spec::Fw(p) => p.limit(),
            Spec::Gc(p) => p.burst(),
            Spec::Lg(p) => p.limit(),
            Spec::Qu(p) => p.limit(),
        }
    }

    pub(crate) fn duration_us(&self) -> u64 {
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
    pub(crate) fn command(&self) -> (&'static str, Vec<String>) {
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
    pub(crate) fn words(&self) -> Vec<String> {
        let (name, mut args) = self.command();
        args.insert(0, name.trim_start_matches("RL.").to_string());
        args
    }

    /// The same parameters as the registry's type, which runs every algorithm.
    pub(crate) fn any(&self) -> AnyParams {
        match *self {
            Spec::Tb(p) => AnyParams::TokenBucket(p),
            Spec::Sw(p) => AnyParams::SlidingWindow(p),
            Spec::Fw(p) => AnyParams::FixedWindow(p),
            Spec::Gc(p) => AnyParams::Gcra(p),
            Spec::Lg(p) => AnyParams::SlidingLog(p),
            Spec::Qu(p) => AnyParams::Quota(p),
        }
    }

    /// Whether its command takes `UPTO`.
    pub(crate) fn takes_upto(&self) -> bool {
        self.any().kind().upto()
    }
}

/// The stored bytes the twin writes (README's format, which the module reads): version 1,
/// 8-byte little-endian fields (16 for a u128), for the fixed-size states whose fields are
/// all below 2^53 (what the twin packs with the server's `struct` library), else version 2
/// (varints, a window as its index); version 3 fixed-width entries for a log.
pub(crate) fn encode(state: &AnyState) -> Vec<u8> {
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
        AnyState::TokenBucket(s) if s.level < EXACT => {
            let f = [u128::from(s.updated_at.0), u128::from(s.refill_ms), s.level];
            return fixed(b'T', &f, &[8, 8, 16]);
        }
        AnyState::TokenBucket(s) => {
            out.push(b'T');
            // Microseconds since 2020-01-01, wrapping below it.
            varint(&mut out, s.updated_at.0.wrapping_sub(1_577_836_800_000_000));
            varint(&mut out, s.refill_ms);
            wide(&mut out, s.level);
        }
        AnyState::SlidingWindow(s) => {
            let f = [s.window_ms, s.window_start.0, s.previous, s.current].map(u128::from);
            return fixed(b'S', &f, &[8; 4]);
        }
        AnyState::FixedWindow(s) => {
            let f = [s.window_ms, s.window_start.0, s.count].map(u128::from);
            return fixed(b'F', &f, &[8; 3]);
        }
        AnyState::Gcra(s) => {
            let f = [s.tat, u128::from(s.limit), u128::from(s.period_ms)];
            return fixed(b'G', &f, &[16, 8, 8]);
        }
        AnyState::Quota(s) => {
            out.push(b'Q');
            varint(&mut out, s.period_start.0);
            varint(&mut out, s.period_end.0 - s.period_start.0);
            varint(&mut out, s.count);
        }
        AnyState::SlidingLog(s) => {
            // Version 3: fixed-width entries with running counts, from 0
            // (src/encoding/sliding_log.rs).
            let mut out = b"\0RL\x03L".to_vec();
            out.extend_from_slice(&s.window_ms.to_le_bytes());
            out.extend_from_slice(&[0; 3]);
            let mut run = 0u64;
            for e in &s.entries {
                run += e.count;
                out.extend_from_slice(&e.at.0.to_le_bytes()[..7]);
                out.extend_from_slice(&run.to_le_bytes()[..3]);
            }
            return out;
        }
    }
    out
}

/// A version 3 log's bytes with its running counts taken from 0: the twin's fast code
/// keeps the running count of the entries it dropped (it rewrites no entry), its general
/// code starts again from 0, and both stand for the same log. Other bytes as they are.
pub(crate) fn rebased(mut value: Vec<u8>) -> Vec<u8> {
    if !value.starts_with(b"\0RL\x03L")
        || value.len() < 16
        || !(value.len() - 16).is_multiple_of(10)
    {
        return value;
    }
    let run = |v: &[u8], at: usize| u32::from_le_bytes([v[at], v[at + 1], v[at + 2], 0]);
    let base = run(&value, 13);
    value[13..16].fill(0);
    for at in (16..value.len()).step_by(10) {
        let through = run(&value, at + 7).wrapping_sub(base);
        value[at + 7..at + 10].copy_from_slice(&through.to_le_bytes()[..3]);
    }
    value
}

/// The module's reply fields for a decision (`src/reply.rs`).
pub(crate) fn fields(d: &Decision) -> Vec<i64> {
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

pub(crate) fn to_ints(v: &Value) -> Vec<i64> {
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
pub(crate) fn all_reply(v: &Value) -> (i64, i64, Vec<Vec<i64>>) {
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
/// One call of a single-key command.
#[derive(Clone, Debug)]
pub(crate) struct Check {
    key: usize,
    cost: u64,
    peek: bool,
    upto: bool,
    /// `FORCE`: the cost taken even over the limit.
    force: bool,
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Check(Check),
    Refund {
        key: usize,
        amount: u64,
    },
    /// One cost per key: sent as `COST n` when they are equal, else as `COSTS`.
    All {
        keys: Vec<usize>,
        costs: Vec<u64>,
        peek: bool,
        force: bool,
    },
}

impl Op {
    pub(crate) fn random(r: &mut Rng, specs: &[Spec]) -> Op {
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
                let costs = if r.percent(50) {
                    vec![cost_for(r, least); keys.len()]
                } else {
                    keys.iter()
                        .map(|&k| cost_for(r, specs[k].limit()))
                        .collect()
                };
                Op::All {
                    keys,
                    costs,
                    peek: r.percent(15),
                    force: r.percent(15),
                }
            }
            _ => {
                let upto = specs[key].takes_upto() && r.percent(25);
                // With UPTO a cost above the limit is an ordinary request for "as many as can be".
                let limit = specs[key].limit();
                let cost = cost_for(r, if upto { limit.saturating_mul(3) } else { limit });
                Op::Check(Check {
                    key,
                    cost,
                    peek: r.percent(15),
                    upto,
                    force: !upto && r.percent(15),
                })
            }
        }
    }

    /// The same call without `FORCE`.
    pub(crate) fn without_force(self) -> Op {
        match self {
            Op::Check(c) => Op::Check(Check { force: false, ..c }),
            Op::All {
                keys, costs, peek, ..
            } => Op::All {
                keys,
                costs,
                peek,
                force: false,
            },
            refund => refund,
        }
    }

    /// The command as `(name, keys (indices), arguments after the keys)`.
    pub(crate) fn command(&self, specs: &[Spec]) -> (&'static str, Vec<usize>, Vec<String>) {
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
            Op::Check(c) => {
                let (name, mut args) = specs[c.key].command();
                args.extend(opts(c.cost, c.peek));
                if c.upto {
                    args.push("UPTO".to_string());
                }
                if c.force {
                    args.push("FORCE".to_string());
                }
                (name, vec![c.key], args)
            }
            Op::Refund { key, amount } => {
                let mut args = specs[*key].words();
                args.extend(["COST".to_string(), amount.to_string()]);
                ("RL.REFUND", vec![*key], args)
            }
            Op::All {
                keys,
                costs,
                peek,
                force,
            } => {
                let mut args: Vec<String> = keys.iter().flat_map(|&k| specs[k].words()).collect();
                if costs.iter().all(|&c| c == costs[0]) {
                    args.extend(opts(costs[0], *peek));
                } else {
                    args.push("COSTS".to_string());
                    args.extend(costs.iter().map(u64::to_string));
                    args.extend(opts(1, *peek));
                }
                if *force {
                    args.push("FORCE".to_string());
                }
                ("RL.ALL", keys.clone(), args)
            }
        }
    }
}

/// What a call should reply and write, from the core.
pub(crate) struct Expected {
    pub(crate) reply: Value,
    pub(crate) writes: Vec<(usize, AnyState, Millis)>,
}

pub(crate) fn int_array(v: Vec<i64>) -> Value {
    Value::Array(v.into_iter().map(Value::Int).collect())
}

pub(crate) fn model(op: &Op, specs: &[Spec], states: &[Option<AnyState>], now: u64) -> Expected {
    let slack = Millis(1000);
    let expiry = |d: &Decision| expire_at(Micros(now), d.reset_after, slack);
    match op {
        Op::Check(Check {
            key,
            cost,
            peek,
            upto,
            force,
        }) => {
            let (state, now) = (states[*key].clone(), Micros(now));
            let (d, new, granted) = if *upto {
                let (d, granted, new) = specs[*key].any().upto(state, now, *cost);
                (d, new, Some(granted))
            } else if *force {
                let (d, new) = specs[*key].any().force(state, now, *cost);
                (d, new, None)
            } else {
                let (d, new) = specs[*key].any().check(state, now, *cost);
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
            let (state, now) = (states[*key].clone(), Micros(now));
            let (n, new) = spec.any().refund(state.clone(), now, *amount);
            let view = spec.any().check(new.clone().or(state), now, 0).0;
            let f = fields(&view);
            let writes = new
                .map(|s| vec![(*key, s, expiry(&view))])
                .unwrap_or_default();
            Expected {
                reply: int_array(vec![n as i64, f[1], f[2], 0, f[4]]),
                writes,
            }
        }
        Op::All {
            keys,
            costs,
            peek,
            force,
        } => {
            let evaluated: Vec<_> = keys
                .iter()
                .zip(costs)
                .map(|(&k, &cost)| {
                    let (state, now) = (states[k].clone(), Micros(now));
                    if *force {
                        specs[k].any().force(state, now, cost)
                    } else {
                        specs[k].any().check(state, now, cost)
                    }
                })
                .collect();
            let denied = evaluated.iter().position(|(d, _)| !d.is_allowed());
            let mut per = Vec::new();
            let mut writes = Vec::new();
            for (&k, (d, new)) in keys.iter().zip(&evaluated) {
                let shown = if denied.is_some() && d.is_allowed() {
                    specs[k].any().check(states[k].clone(), Micros(now), 0).0
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

/// The twin's differential tests draw their algorithms from [`KINDS`], a list of their own
/// (each needs its parameters drawn and its stored bytes written): it must hold every rate
/// limiter of the registry, or a new algorithm's twin would never be compared with the
/// module.
#[test]
fn the_model_covers_every_rate_limiter_of_the_registry() {
    let mut r = Rng::new(7);
    let modelled: Vec<redis_rl_core::Kind> = KINDS
        .iter()
        .map(|&kind| super::luatwin::time_insensitive(kind, &mut r).any().kind())
        .collect();
    assert_eq!(modelled, redis_rl_core::Kind::LIMITERS);
}
