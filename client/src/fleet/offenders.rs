//! Refusals, off the request's path: a bounded queue that a background task drains,
//! counting each refusal towards its subject's ban ([`crate::fleet::bans::strike`]) and adding it
//! to the fleet's per-minute top-offender counts in Redis (`GET /top`).
//!
//! A request only pushes onto the queue (`try_send`: never waits); a full queue drops the
//! refusal and counts it in `rl_offenders_dropped_total`. The task sums the counts in
//! process and writes them once a second (or when [`LOCAL_ENTRIES`] subjects are pending),
//! one script per policy: `ZINCRBY` into `<prefix>:{top}:<policy>:<minute>`, trimmed to
//! the [`TOP_ENTRIES`](redis_rl_policy::TOP_ENTRIES) highest and expiring after [`TOP_MINUTES`] and one more minutes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use redis::{Cmd, Value};
use redis_rl_policy::{top_key, Ban, TOP_MINUTES};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::error::Result;
use crate::limiter::Limiter;

/// Refusals the queue holds before dropping new ones.
pub const QUEUE: usize = 10_000;
/// Distinct subjects summed in process before an early write.
pub const LOCAL_ENTRIES: usize = 10_000;
/// Ban scripts in flight at once.
const STRIKES_IN_FLIGHT: usize = 32;
/// Subjects per top-offender script.
const CHUNK: usize = 256;

/// One refused request.
#[derive(Clone, Debug)]
pub struct Refusal {
    /// The rule's or dimension's name that refused it.
    pub policy: String,
    /// The refused key, without window suffix.
    pub subject: String,
    /// The policy's ban, when the refusal counts towards one (not when a ban refused it).
    pub ban: Option<Ban>,
}

/// The queue of refusals and its background task (started on the first refusal, in the
/// runtime of the request; it ends, after a last write, once the queue is dropped).
pub struct Offenders {
    limiter: Limiter,
    prefix: String,
    sender: Mutex<Option<mpsc::Sender<Refusal>>>,
}

impl Offenders {
    /// A queue writing under `prefix` (the configuration's `key_prefix`).
    pub fn new(limiter: Limiter, prefix: impl Into<String>) -> Self {
        Self {
            limiter,
            prefix: prefix.into(),
            sender: Mutex::new(None),
        }
    }

    /// Queues a refusal; never waits (a full queue drops it, counted).
    pub fn record(&self, refusal: Refusal) {
        let mut sender = self.sender.lock().unwrap_or_else(|e| e.into_inner());
        if sender.is_none() {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let (tx, rx) = mpsc::channel(QUEUE);
            runtime.spawn(drain(self.limiter.clone(), self.prefix.clone(), rx));
            *sender = Some(tx);
        }
        if let Some(tx) = sender.as_ref() {
            if tx.try_send(refusal).is_err() {
                metrics::counter!("rl_offenders_dropped_total").increment(1);
            }
        }
    }
}

fn unix_minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

async fn drain(limiter: Limiter, prefix: String, mut rx: mpsc::Receiver<Refusal>) {
    let mut counts: HashMap<(String, String), u64> = HashMap::new();
    let mut strikes: JoinSet<()> = JoinSet::new();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            refusal = rx.recv() => {
                let Some(r) = refusal else { break };
                if let Some(ban) = r.ban {
                    while strikes.len() >= STRIKES_IN_FLIGHT {
                        strikes.join_next().await;
                    }
                    let (limiter, prefix) = (limiter.clone(), prefix.clone());
                    let (policy, subject) = (r.policy.clone(), r.subject.clone());
                    strikes.spawn(async move {
                        strike(&limiter, &prefix, &policy, &subject, &ban).await;
                    });
                }
                *counts.entry((r.policy, r.subject)).or_insert(0) += 1;
                if counts.len() >= LOCAL_ENTRIES {
                    write(&limiter, &prefix, std::mem::take(&mut counts)).await;
                }
            }
            _ = every.tick() => {
                if !counts.is_empty() {
                    write(&limiter, &prefix, std::mem::take(&mut counts)).await;
                }
                while strikes.try_join_next().is_some() {}
            }
        }
    }
    write(&limiter, &prefix, counts).await;
    while strikes.join_next().await.is_some() {}
}

async fn strike(limiter: &Limiter, prefix: &str, policy: &str, subject: &str, ban: &Ban) {
    match crate::fleet::bans::strike(limiter, prefix, policy, subject, ban).await {
        Ok(Some(new)) => {
            metrics::counter!("rl_bans_total", "policy" => policy.to_owned()).increment(1);
            tracing::info!(
                policy,
                subject,
                level = new.level,
                length_ms = new.length_ms,
                "banned after repeated refusals"
            );
        }
        Ok(None) => {}
        Err(e) => tracing::debug!(error = %e, policy, "a refusal was not counted towards a ban"),
    }
}

/// Writes summed counts into the current minute's sets, one script per policy and chunk.
async fn write(limiter: &Limiter, prefix: &str, counts: HashMap<(String, String), u64>) {
    let minute = unix_minute();
    let mut by_policy: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    for ((policy, subject), n) in counts {
        by_policy.entry(policy).or_default().push((subject, n));
    }
    let calls = by_policy.iter().flat_map(|(policy, entries)| {
        entries.chunks(CHUNK).map(move |chunk| {
            let c = redis_rl_flow::commands::top_add(prefix, policy, minute, chunk);
            let mut cmd = Cmd::new();
            for a in &c.args {
                cmd.arg(a);
            }
            let slot = limiter.slot_of(&c.key);
            async move { limiter.query(&cmd, slot).await }
        })
    });
    for result in join_all(calls).await {
        if let Err(e) = result {
            metrics::counter!("rl_offenders_write_errors_total").increment(1);
            tracing::debug!(error = %e, "top-offender counts not written");
        }
    }
}

/// One policy's most refused subjects over the last `minutes` (at most [`TOP_MINUTES`]):
/// `(subject, refusals)`, most first, at most `n`.
pub type Top = Vec<(String, Vec<(String, u64)>)>;

/// The most refused subjects of each of `policies`, fleet-wide, over the last `minutes`
/// (1 to [`TOP_MINUTES`], the current minute included), at most `n` each, most first.
pub async fn top(
    limiter: &Limiter,
    prefix: &str,
    policies: &[String],
    minutes: u64,
    n: usize,
) -> Result<Top> {
    let now = unix_minute();
    let minutes = minutes.clamp(1, TOP_MINUTES);
    let mut out = Vec::with_capacity(policies.len());
    for policy in policies {
        let reads = (0..minutes).map(|ago| {
            let key = top_key(prefix, policy, now.saturating_sub(ago));
            async move {
                let mut cmd = redis::cmd("ZRANGE");
                cmd.arg(&key).arg(0).arg(-1).arg("WITHSCORES");
                limiter.query(&cmd, limiter.slot_of(&key)).await
            }
        });
        let mut sums: HashMap<String, u64> = HashMap::new();
        for reply in join_all(reads).await {
            add_pairs(&mut sums, &reply?);
        }
        let mut ranked: Vec<(String, u64)> = sums.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(n);
        out.push((policy.clone(), ranked));
    }
    Ok(out)
}

/// Adds `[member, score, member, score, ...]` (RESP2) or `[[member, score], ...]` (RESP3).
fn add_pairs(sums: &mut HashMap<String, u64>, reply: &Value) {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    // Scores are whole counts; a double's text without its fraction is the count.
    let whole = |f: f64| (f >= 0.0).then(|| format!("{f:.0}").parse::<u64>().ok())?;
    let number = |v: &Value| match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::Double(d) => whole(*d),
        other => whole(text(other)?.parse().ok()?),
    };
    let Value::Array(items) = reply else { return };
    let mut add = |m: &Value, s: &Value| {
        if let (Some(m), Some(s)) = (text(m), number(s)) {
            *sums.entry(m).or_insert(0) += s;
        }
    };
    if items.iter().all(|i| matches!(i, Value::Array(_))) {
        for pair in items {
            if let Value::Array(p) = pair {
                if let [m, s] = p.as_slice() {
                    add(m, s);
                }
            }
        }
    } else {
        for pair in items.chunks(2) {
            if let [m, s] = pair {
                add(m, s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_add_up_in_both_reply_shapes() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let mut sums = HashMap::new();
        add_pairs(
            &mut sums,
            &Value::Array(vec![bulk("a"), bulk("3"), bulk("b"), bulk("1")]),
        );
        add_pairs(
            &mut sums,
            &Value::Array(vec![Value::Array(vec![bulk("a"), Value::Double(2.0)])]),
        );
        assert_eq!(sums["a"], 5);
        assert_eq!(sums["b"], 1);
    }
}
