//! Bans in Redis (the keys are the policy engine's, [`redis_rl_policy::BanKeys`]): is a
//! subject banned, count a refusal towards a ban, list and lift bans. Plain Redis commands
//! and scripts only (`PTTL`, `GET`, `DEL`, `ZREM`, `EVAL`), so the same works with the
//! module and with the Lua twin on a server without modules, standalone or cluster (a
//! subject's keys share its hash tag; the index is a key of its own).

use futures_util::future::join_all;
use redis::{Cmd, Value};
use redis_rl_flow::commands::{self, Command};
use redis_rl_policy::{ban_index_key, ban_index_member, parse_ban_index_member, Ban, BanKeys};

use crate::error::{Error, Result};
use crate::limiter::Limiter;

/// The bans that have not ended, as the index holds them. KEYS: index. ARGV: max entries.
const LIST: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, ARGV[1])
";

/// A ban started by [`strike`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewBan {
    /// 1 for a subject's first ban (within `forget_ms` of the last), 2 for the next...
    pub level: u64,
    /// Its length in milliseconds.
    pub length_ms: u64,
}

/// A ban as `GET /bans` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveBan {
    /// The rule's or dimension's name.
    pub policy: String,
    /// The banned key (a limited key without window suffix).
    pub subject: String,
    /// Its level (1: the subject's first ban).
    pub level: u64,
    /// Milliseconds until it ends.
    pub remaining_ms: u64,
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn unexpected(command: &'static str, v: &Value) -> Error {
    Error::Reply {
        command,
        detail: format!("{v:?}"),
    }
}

/// The reply of `PTTL key`, in the key's slot.
pub async fn pttl(limiter: &Limiter, key: &str) -> Result<i64> {
    let v = limiter
        .query(redis::cmd("PTTL").arg(key), limiter.slot_of(key))
        .await?;
    int(&v).ok_or_else(|| unexpected("PTTL", &v))
}

/// Milliseconds left of `subject`'s ban (`None`: not banned), one `PTTL` in the subject's
/// slot.
pub async fn remaining_ms(limiter: &Limiter, subject: &str) -> Result<Option<u64>> {
    let read = commands::ban_read(subject);
    Ok(redis_rl_flow::ban_remaining_ms(
        pttl(limiter, &read.key).await?,
    ))
}

/// Runs one of the flow's commands in its key's slot.
async fn run(limiter: &Limiter, c: &Command) -> Result<Value> {
    let mut cmd = Cmd::new();
    for a in &c.args {
        cmd.arg(a);
    }
    limiter.query(&cmd, limiter.slot_of(&c.key)).await
}

/// Counts a refusal of `subject` under `ban`; `Some` when it started a ban (then also in the
/// index of `prefix`, best effort: enforcement never reads the index).
pub async fn strike(
    limiter: &Limiter,
    prefix: &str,
    policy: &str,
    subject: &str,
    ban: &Ban,
) -> Result<Option<NewBan>> {
    let v = run(limiter, &commands::strike(subject, ban)).await?;
    let Value::Array(fields) = &v else {
        return Err(unexpected("the ban script", &v));
    };
    let numbers: Vec<i64> = fields.iter().filter_map(int).collect();
    let new = commands::parse_strike(&numbers).map_err(|_| unexpected("the ban script", &v))?;
    let Some(new) = new else {
        return Ok(None);
    };
    if let Err(e) = run(limiter, &commands::index_ban(prefix, policy, subject, &new)).await {
        tracing::warn!(error = %e, "the ban index was not updated (the ban holds)");
    }
    Ok(Some(NewBan {
        level: new.level,
        length_ms: new.length_ms,
    }))
}

/// After a settlement charged `watch`'s key: reads the window's count and, when it is over
/// its limit, holds the subject in its ban key (the flow's command).
pub async fn hold_debt(limiter: &Limiter, watch: &redis_rl_flow::DebtWatch) -> Result<bool> {
    let Some(count) = limiter.window_count(&watch.key).await? else {
        return Ok(false);
    };
    let Some(cmd) = watch.hold(count.count, count.left_ms) else {
        return Ok(false);
    };
    run(limiter, &cmd).await?;
    Ok(true)
}

/// The bans of `prefix` that have not ended (at most `limit`, longest remaining first).
pub async fn list(limiter: &Limiter, prefix: &str, limit: u64) -> Result<Vec<ActiveBan>> {
    let index = ban_index_key(prefix);
    let mut cmd = Cmd::new();
    cmd.arg("EVAL").arg(LIST).arg(1).arg(&index).arg(limit);
    let v = limiter.query(&cmd, limiter.slot_of(&index)).await?;
    let Value::Array(members) = &v else {
        return Err(unexpected("the ban list", &v));
    };
    let members: Vec<String> = members.iter().filter_map(text).collect();
    let reads = members.iter().map(|m| async move {
        let (policy, subject) = parse_ban_index_member(m)?;
        let key = BanKeys::of(subject).ban;
        let slot = limiter.slot_of(&key);
        let (mut get, mut pttl) = (redis::cmd("GET"), redis::cmd("PTTL"));
        get.arg(&key);
        pttl.arg(&key);
        let (level, ttl) =
            futures_util::join!(limiter.query(&get, slot), limiter.query(&pttl, slot));
        // As in remaining_ms: 0 is the ban's last millisecond, listed with 1 ms left.
        let remaining_ms = ttl
            .ok()
            .as_ref()
            .and_then(int)
            .filter(|&ms| ms >= 0)?
            .max(1);
        Some(ActiveBan {
            policy: policy.to_string(),
            subject: subject.to_string(),
            level: level
                .ok()
                .as_ref()
                .and_then(int)
                .and_then(|l| u64::try_from(l).ok())
                .unwrap_or(0),
            remaining_ms: u64::try_from(remaining_ms).ok()?,
        })
    });
    let mut bans: Vec<ActiveBan> = join_all(reads).await.into_iter().flatten().collect();
    bans.sort_by_key(|b| std::cmp::Reverse(b.remaining_ms));
    Ok(bans)
}

/// Lifts `subject`'s ban and forgets its refusals and escalation; true when it was banned.
pub async fn lift(limiter: &Limiter, prefix: &str, policy: &str, subject: &str) -> Result<bool> {
    let keys = BanKeys::of(subject);
    let slot = limiter.slot_of(&keys.ban);
    let was = limiter
        .query(redis::cmd("DEL").arg(&keys.ban), slot)
        .await?;
    limiter
        .query(redis::cmd("DEL").arg(&keys.strikes).arg(&keys.level), slot)
        .await?;
    let index = ban_index_key(prefix);
    limiter
        .query(
            redis::cmd("ZREM")
                .arg(&index)
                .arg(ban_index_member(policy, subject)),
            limiter.slot_of(&index),
        )
        .await?;
    Ok(int(&was) == Some(1))
}
