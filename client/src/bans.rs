//! Bans in Redis (the keys are the policy engine's, [`redis_rl_policy::BanKeys`]): is a
//! subject banned, count a refusal towards a ban, list and lift bans. Plain Redis commands
//! and scripts only (`PTTL`, `GET`, `DEL`, `ZREM`, `EVAL`), so the same works with the
//! module and with the Lua twin on a server without modules, standalone or cluster (a
//! subject's keys share its hash tag; the index is a key of its own).

use futures_util::future::join_all;
use redis::{Cmd, Value};
use redis_rl_policy::{
    ban_index_key, ban_index_member, parse_ban_index_member, Ban, BanKeys, BAN_INDEX_MAX,
};

use crate::error::{Error, Result};
use crate::limiter::Limiter;

/// Counts one refusal of a subject that is not banned; at the `after`-th within
/// `within_ms` of the first, starts the next ban (its level one more than the last, its
/// length `for_ms * escalate^(level-1)` capped at `max_for_ms`) and forgets the count.
/// KEYS: ban, strikes, level. ARGV: after, within_ms, for_ms, escalate, max_for_ms,
/// forget_ms. Reply `{level, length_ms, ends_at_ms}` (level 0: no new ban).
const STRIKE: &str = r"
if redis.call('PTTL', KEYS[1]) >= 0 then return {0, 0, 0} end
local n = redis.call('INCR', KEYS[2])
if n == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
if n < tonumber(ARGV[1]) then return {0, 0, 0} end
redis.call('DEL', KEYS[2])
local level = redis.call('INCR', KEYS[3])
local ms, escalate, max = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if escalate > 1 then
  for _ = 2, level do
    ms = ms * escalate
    if ms >= max then break end
  end
end
if ms > max then ms = max end
redis.call('SET', KEYS[1], level, 'PX', ms)
redis.call('PEXPIRE', KEYS[3], ms + tonumber(ARGV[6]))
local t = redis.call('TIME')
return {level, ms, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ms}
";

/// Adds a ban to the index, drops the ended ones and keeps the newest ARGV[3].
/// KEYS: index. ARGV: member, ends_at_ms, max entries.
const INDEX: &str = r"
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local t = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[3]) - 1)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], last[2]) end
return 1
";

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

/// Milliseconds left of `subject`'s ban (`None`: not banned), one `PTTL` in the subject's
/// slot.
pub async fn remaining_ms(limiter: &Limiter, subject: &str) -> Result<Option<u64>> {
    let key = BanKeys::of(subject).ban;
    let v = limiter
        .query(redis::cmd("PTTL").arg(&key), limiter.slot_of(&key))
        .await?;
    match int(&v) {
        // 0: the ban's last millisecond (the key still exists, so a lift still finds it):
        // banned for 1 ms more.
        Some(ms) if ms >= 0 => Ok(Some(u64::try_from(ms).map_or(1, |ms| ms.max(1)))),
        // -2: no key; -1: a key without expiry (never written so by a gateway): not a ban.
        Some(_) => Ok(None),
        None => Err(unexpected("PTTL", &v)),
    }
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
    let keys = BanKeys::of(subject);
    let mut cmd = Cmd::new();
    cmd.arg("EVAL")
        .arg(STRIKE)
        .arg(3)
        .arg(&keys.ban)
        .arg(&keys.strikes)
        .arg(&keys.level)
        .arg(ban.after)
        .arg(ban.within_ms)
        .arg(ban.for_ms)
        .arg(ban.escalate)
        .arg(ban.max_for_ms)
        .arg(ban.forget_ms);
    let v = limiter.query(&cmd, limiter.slot_of(&keys.ban)).await?;
    let Value::Array(fields) = &v else {
        return Err(unexpected("the ban script", &v));
    };
    let n = |i: usize| {
        fields
            .get(i)
            .and_then(int)
            .and_then(|x| u64::try_from(x).ok())
    };
    let (Some(level), Some(length_ms), Some(ends_at)) = (n(0), n(1), n(2)) else {
        return Err(unexpected("the ban script", &v));
    };
    if level == 0 {
        return Ok(None);
    }
    let index = ban_index_key(prefix);
    let mut add = Cmd::new();
    add.arg("EVAL")
        .arg(INDEX)
        .arg(1)
        .arg(&index)
        .arg(ban_index_member(policy, subject))
        .arg(ends_at)
        .arg(BAN_INDEX_MAX);
    if let Err(e) = limiter.query(&add, limiter.slot_of(&index)).await {
        tracing::warn!(error = %e, "the ban index was not updated (the ban holds)");
    }
    Ok(Some(NewBan { level, length_ms }))
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
