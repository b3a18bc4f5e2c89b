//! Shared by the `operations_*` tests: which RL.* commands this build has (asked of the
//! server, so the tests cover each command as it lands), a seeded random mix of calls across
//! all of them, pipelined sending that reports the failing command, and whole-dataset
//! snapshots (bytes and absolute expiry of every key).

use crate::cmd::{command, info_field, query, server_time_us};
use crate::rng::Rng;
use redis::{ConnectionLike, Value};
use std::collections::BTreeMap;

/// Every RL.* command the project plans, in a fixed order.
pub const PLANNED: [&str; 11] = [
    "RL.TOKENBUCKET",
    "RL.SLIDING",
    "RL.FIXED",
    "RL.LOG",
    "RL.GCRA",
    "RL.THROTTLE",
    "RL.CONCURRENCY",
    "RL.ALL",
    "RL.REFUND",
    "RL.RESET",
    "RL.STATE",
];

/// The planned commands this server knows (`COMMAND INFO name` is nil for an unknown one).
pub fn available(c: &mut redis::Connection) -> Vec<&'static str> {
    PLANNED
        .into_iter()
        .filter(|name| {
            let info: Vec<Value> = query(c, &["COMMAND", "INFO", name]);
            !matches!(info.as_slice(), [Value::Nil] | [])
        })
        .collect()
}

/// A limiter algorithm, its key prefix and the command that writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    TokenBucket,
    Sliding,
    Fixed,
    Log,
    Gcra,
    Throttle,
    Concurrency,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::TokenBucket,
        Kind::Sliding,
        Kind::Fixed,
        Kind::Log,
        Kind::Gcra,
        Kind::Throttle,
        Kind::Concurrency,
    ];

    pub fn command(self) -> &'static str {
        match self {
            Kind::TokenBucket => "RL.TOKENBUCKET",
            Kind::Sliding => "RL.SLIDING",
            Kind::Fixed => "RL.FIXED",
            Kind::Log => "RL.LOG",
            Kind::Gcra => "RL.GCRA",
            Kind::Throttle => "RL.THROTTLE",
            Kind::Concurrency => "RL.CONCURRENCY",
        }
    }

    pub fn prefix(self) -> &'static str {
        match self {
            Kind::TokenBucket => "tb",
            Kind::Sliding => "sw",
            Kind::Fixed => "fx",
            Kind::Log => "lg",
            Kind::Gcra => "gc",
            Kind::Throttle => "th",
            Kind::Concurrency => "cc",
        }
    }
}

/// Random calls over every available command, on `keys_per_kind` keys per algorithm.
///
/// Each key has fixed parameters derived from its number (so RL.ALL and RL.REFUND name the
/// same spec as the single-key calls); costs, PEEK and which key are random. With
/// `short_windows`, one key in five has a window, refill period or lease of 20..100 ms, so it
/// becomes idle and expires (after the TTL slack) while traffic goes on.
pub struct Mix {
    pub commands: Vec<&'static str>,
    pub kinds: Vec<Kind>,
    pub keys_per_kind: u64,
    pub short_windows: bool,
}

impl Mix {
    pub fn new(commands: Vec<&'static str>, keys_per_kind: u64, short_windows: bool) -> Mix {
        let kinds = Kind::ALL
            .into_iter()
            .filter(|k| commands.contains(&k.command()))
            .collect();
        Mix {
            commands,
            kinds,
            keys_per_kind,
            short_windows,
        }
    }

    fn has(&self, command: &str) -> bool {
        self.commands.contains(&command)
    }

    fn short(&self, i: u64) -> bool {
        self.short_windows && i.is_multiple_of(5)
    }

    /// A window, period or lease for key `i`, in ms.
    fn window_ms(&self, i: u64) -> u64 {
        if self.short(i) {
            20 + i % 80
        } else {
            60_000 + i
        }
    }

    pub fn key(kind: Kind, i: u64) -> String {
        format!("{}:{i}", kind.prefix())
    }

    /// The limit of key `i` (capacity, limit, count).
    fn limit(kind: Kind, i: u64) -> u64 {
        match kind {
            Kind::Log => 1 + i % 10,
            Kind::Concurrency => 1 + i % 5,
            _ => 1 + i % 20,
        }
    }

    /// `TOKENBUCKET c r ms` or `SLIDING l ms` for key `i`, as RL.ALL and RL.REFUND take it.
    fn spec(&self, kind: Kind, i: u64) -> Vec<String> {
        let limit = Self::limit(kind, i).to_string();
        let window = self.window_ms(i).to_string();
        match kind {
            Kind::TokenBucket => vec!["TOKENBUCKET".into(), limit.clone(), limit, window],
            _ => vec!["SLIDING".into(), limit, window],
        }
    }

    /// The positional arguments of a single-key call on key `i` of `kind`.
    fn params(&self, kind: Kind, i: u64) -> Vec<String> {
        let limit = Self::limit(kind, i).to_string();
        let window = self.window_ms(i).to_string();
        match kind {
            Kind::TokenBucket => vec![limit.clone(), limit, window],
            Kind::Throttle => {
                let period_s = if self.short(i) { 1 } else { 60 };
                vec![(i % 5).to_string(), limit, period_s.to_string()]
            }
            _ => vec![limit, window],
        }
    }

    /// `[COST n] [PEEK]`: mostly nothing, sometimes 0, a few units, or more than the limit.
    fn options(rng: &mut Rng, limit: u64, out: &mut Vec<String>) {
        let cost = match rng.below(20) {
            0..=13 => None,
            14..=17 => Some(1 + rng.below(3)),
            18 => Some(0),
            _ => Some(limit + 1),
        };
        if let Some(cost) = cost {
            out.extend(["COST".to_string(), cost.to_string()]);
        }
        if rng.percent(10) {
            out.push("PEEK".into());
        }
    }

    fn random_key(&self, rng: &mut Rng, kinds: &[Kind]) -> (Kind, u64) {
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        (kind, rng.below(self.keys_per_kind))
    }

    /// The token bucket and sliding window kinds that exist (what RL.ALL and RL.REFUND use).
    fn spec_kinds(&self) -> Vec<Kind> {
        self.kinds
            .iter()
            .copied()
            .filter(|k| matches!(k, Kind::TokenBucket | Kind::Sliding))
            .collect()
    }

    /// One random call, as its words.
    pub fn call(&self, rng: &mut Rng) -> Vec<String> {
        let name = self.commands[rng.below(self.commands.len() as u64) as usize];
        let mut out = vec![name.to_string()];
        match name {
            "RL.ALL" => {
                let n = 1 + rng.below(4);
                let mut keys: Vec<(Kind, u64)> = Vec::new();
                while (keys.len() as u64) < n {
                    let k = self.random_key(rng, &self.spec_kinds());
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
                out.push(n.to_string());
                out.extend(keys.iter().map(|&(kind, i)| Self::key(kind, i)));
                for &(kind, i) in &keys {
                    out.extend(self.spec(kind, i));
                }
                Self::options(rng, 20, &mut out);
            }
            "RL.REFUND" => {
                let (kind, i) = self.random_key(rng, &self.spec_kinds());
                out.push(Self::key(kind, i));
                out.extend(self.spec(kind, i));
                out.extend(["COST".to_string(), (1 + rng.below(3)).to_string()]);
            }
            "RL.RESET" | "RL.STATE" => {
                let (kind, i) = self.random_key(rng, &self.kinds);
                out.push(Self::key(kind, i));
            }
            "RL.CONCURRENCY" => {
                let i = rng.below(self.keys_per_kind);
                out.push(Self::key(Kind::Concurrency, i));
                let id = format!("worker-{}", rng.below(8));
                if rng.percent(40) {
                    out.extend(["RELEASE".to_string(), id]);
                } else {
                    out.extend(self.params(Kind::Concurrency, i));
                    out.extend(["ACQUIRE".to_string(), id]);
                }
            }
            "RL.THROTTLE" => {
                let i = rng.below(self.keys_per_kind);
                out.push(Self::key(Kind::Throttle, i));
                out.extend(self.params(Kind::Throttle, i));
                if rng.percent(20) {
                    out.push(rng.below(4).to_string());
                }
            }
            _ => {
                let kind = Kind::ALL
                    .into_iter()
                    .find(|k| k.command() == name)
                    .expect("a single-key limiting command");
                let i = rng.below(self.keys_per_kind);
                out.push(Self::key(kind, i));
                out.extend(self.params(kind, i));
                if kind == Kind::Gcra && i.is_multiple_of(3) {
                    out.extend(["BURST".to_string(), (1 + i % 5).to_string()]);
                }
                Self::options(rng, Self::limit(kind, i), &mut out);
                // A partial grant now and then (every rate limiter but the log takes UPTO).
                if kind != Kind::Log && rng.percent(15) {
                    out.push("UPTO".into());
                }
            }
        }
        out
    }

    /// A call that writes key `i` of `kind` (the first call on a missing key is allowed).
    pub fn first_call(&self, kind: Kind, i: u64) -> Vec<String> {
        let mut out = vec![kind.command().to_string(), Self::key(kind, i)];
        out.extend(self.params(kind, i));
        if kind == Kind::Concurrency {
            out.extend(["ACQUIRE".to_string(), "first".to_string()]);
        }
        out
    }

    /// The first calls of keys 0 to `per_kind - 1` of every kind: a dataset with keys of
    /// every algorithm to start from.
    pub fn first_calls(&self, per_kind: u64) -> Vec<Vec<String>> {
        self.kinds
            .iter()
            .flat_map(|&kind| (0..per_kind).map(move |i| self.first_call(kind, i)))
            .collect()
    }

    /// Whether the server has `name`.
    pub fn includes(&self, name: &str) -> bool {
        self.has(name)
    }
}

/// Sends `calls` in one pipeline and returns the replies; panics on an error reply, naming
/// the call (a random mix of valid calls must never fail).
pub fn send(c: &mut redis::Connection, calls: &[Vec<String>]) -> Vec<Value> {
    let mut pipe = redis::pipe();
    for call in calls {
        pipe.add_command(command(call));
    }
    let replies = c
        .req_packed_commands(&pipe.get_packed_pipeline(), 0, calls.len())
        .expect("pipeline");
    for (call, reply) in calls.iter().zip(&replies) {
        if let Value::ServerError(e) = reply {
            panic!("{call:?} failed: {e:?}");
        }
    }
    replies
}

/// Every key's bytes and absolute expiry (`PEXPIRETIME`), found with SCAN. A key that
/// expired between the SCAN and the DUMP is left out.
pub fn dataset(c: &mut redis::Connection) -> BTreeMap<String, (Vec<u8>, i64)> {
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(c)
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    let mut out = BTreeMap::new();
    for chunk in keys.chunks(1000) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("DUMP").arg(key).cmd("PEXPIRETIME").arg(key);
        }
        let replies: Vec<Value> = pipe.query(c).expect("DUMP and PEXPIRETIME");
        for (key, pair) in chunk.iter().zip(replies.chunks(2)) {
            if let [Value::BulkString(bytes), Value::Int(expiry)] = pair {
                out.insert(key.clone(), (bytes.clone(), *expiry));
            }
        }
    }
    out
}

/// The server clock in ms.
pub fn server_time_ms(c: &mut redis::Connection) -> i64 {
    (server_time_us(c) / 1000) as i64
}

/// Checks that `copy` (read after `original`) holds the same data: every key of `copy`
/// exists in `original` with the same bytes and expiry, and every key of `original` that
/// expires after `horizon_ms` (a server time taken after both reads) is in `copy`. Keys that
/// expired between the two reads may be missing. Returns how many keys had to be present.
pub fn assert_same(
    what: &str,
    original: &BTreeMap<String, (Vec<u8>, i64)>,
    copy: &BTreeMap<String, (Vec<u8>, i64)>,
    horizon_ms: i64,
) -> usize {
    let mut problems = Vec::new();
    for (key, state) in copy {
        if original.get(key) != Some(state) {
            problems.push(format!("{key}: {:?} became {state:?}", original.get(key)));
        }
    }
    let mut required = 0;
    for (key, state) in original {
        if state.1 == -1 || state.1 > horizon_ms {
            required += 1;
            if !copy.contains_key(key) {
                problems.push(format!("{key}: {state:?} is missing (now {horizon_ms})"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{what}: {} of {} keys differ, first: {:#?}",
        problems.len(),
        original.len(),
        &problems[..problems.len().min(5)]
    );
    required
}

/// `field` of `INFO section` as an integer (0 if absent).
pub fn info_int(c: &mut redis::Connection, section: &str, field: &str) -> i64 {
    info_field(c, section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Calls of every RL.* command the server counted (`INFO commandstats`).
pub fn limiter_calls(c: &mut redis::Connection) -> i64 {
    let stats: String = query(c, &["INFO", "commandstats"]);
    stats
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("cmdstat_rl."))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<i64>()
                .ok()
        })
        .sum()
}
