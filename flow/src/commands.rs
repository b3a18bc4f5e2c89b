//! The Redis commands of bans and top offenders, built once for every host: plain commands
//! and scripts (`PTTL`, `EVAL`), so the same works with the module and with the Lua twin,
//! standalone or cluster (a subject's keys share its hash tag; the index and each minute's
//! top set are keys of their own). Hosts send each as it is, in the slot of [`Command::key`],
//! and hand the reply to the matching `parse_*` function.

use redis_rl_policy::{ban_index_key, ban_index_member, top_key, Ban, BanKeys, BAN_INDEX_MAX};

/// Counts one refusal of a subject that is not banned; at the `after`-th within
/// `within_ms` of the first, starts the next ban (its level one more than the last, its
/// length `for_ms * escalate^(level-1)` capped at `max_for_ms`) and forgets the count.
/// KEYS: ban, strikes, level. ARGV: after, within_ms, for_ms, escalate, max_for_ms,
/// forget_ms. Reply `{level, length_ms, ends_at_ms}` (level 0: no new ban).
pub const STRIKE: &str = r"
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

/// Adds a ban to the index, drops the ended ones and keeps the newest `ARGV[3]`.
/// KEYS: index. ARGV: member, ends_at_ms, max entries.
pub const INDEX: &str = r"
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local t = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[3]) - 1)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], last[2]) end
return 1
";

/// Adds counts to one minute's set, keeps the `ARGV[2]` highest and sets its life.
/// KEYS: the set. ARGV: life_ms, entries, then count and subject pairs.
pub const TOP_ADD: &str = r"
for i = 3, #ARGV, 2 do redis.call('ZINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
local n = redis.call('ZCARD', KEYS[1])
local keep = tonumber(ARGV[2])
if n > keep then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - keep - 1) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n
";

/// Holds a subject for a settled debt: its ban key for ARGV[1] ms, unless it already lasts
/// as long (a ban keeps its level; a hold alone is level 0). KEYS: ban. ARGV: hold_ms.
pub const DEBT_HOLD: &str = r"
if redis.call('PTTL', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
local level = redis.call('GET', KEYS[1]) or '0'
redis.call('SET', KEYS[1], level, 'PX', ARGV[1])
return 1
";

/// One Redis command: its arguments, and the key whose slot it goes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The arguments, the command's name first.
    pub args: Vec<String>,
    /// The key that routes it (cluster slot).
    pub key: String,
}

fn eval(script: &str, keys: &[&str], argv: impl IntoIterator<Item = String>) -> Command {
    let mut args = vec!["EVAL".to_owned(), script.to_owned(), keys.len().to_string()];
    args.extend(keys.iter().map(|k| (*k).to_owned()));
    args.extend(argv);
    Command {
        args,
        key: keys.first().map(|k| (*k).to_owned()).unwrap_or_default(),
    }
}

/// The read of `subject`'s ban: `PTTL <subject>:ban` (the reply goes to
/// [`crate::RequestFlow::booked`] as it is).
pub fn ban_read(subject: &str) -> Command {
    let key = BanKeys::of(subject).ban;
    Command {
        args: vec!["PTTL".to_owned(), key.clone()],
        key,
    }
}

/// Counts a refusal of `subject` under `ban`: the reply goes to [`parse_strike`].
pub fn strike(subject: &str, ban: &Ban) -> Command {
    let keys = BanKeys::of(subject);
    eval(
        STRIKE,
        &[&keys.ban, &keys.strikes, &keys.level],
        [
            ban.after,
            ban.within_ms,
            ban.for_ms,
            ban.escalate,
            ban.max_for_ms,
            ban.forget_ms,
        ]
        .map(|n| n.to_string()),
    )
}

/// Holds `subject` for `hold_ms` (a settled debt: [`redis_rl_policy::debt_hold_ms`]) in its
/// ban key, so that the ban check refuses it; a longer ban or hold already there stands.
/// Reply 1 (written) or 0 (a longer one stands).
pub fn debt_hold(subject: &str, hold_ms: u64) -> Command {
    let keys = BanKeys::of(subject);
    eval(DEBT_HOLD, &[&keys.ban], [hold_ms.max(1).to_string()])
}

/// A ban started by a strike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewBan {
    /// 1 for a subject's first ban (within `forget_ms` of the last), 2 for the next...
    pub level: u64,
    /// Its length in milliseconds.
    pub length_ms: u64,
    /// When it ends, in the server's unix milliseconds.
    pub ends_at_ms: u64,
}

/// The strike script's reply `{level, length_ms, ends_at_ms}`: `Ok(None)` when no ban
/// started, `Err` for a reply of another shape.
pub fn parse_strike(reply: &[i64]) -> Result<Option<NewBan>, String> {
    let n = |i: usize| reply.get(i).and_then(|x| u64::try_from(*x).ok());
    match (reply.len(), n(0), n(1), n(2)) {
        (3, Some(0), _, _) => Ok(None),
        (3, Some(level), Some(length_ms), Some(ends_at_ms)) => Ok(Some(NewBan {
            level,
            length_ms,
            ends_at_ms,
        })),
        _ => Err(format!("the ban script answered {reply:?}")),
    }
}

/// Adds a new ban to the fleet's index under `prefix` (what `GET /bans` lists; best
/// effort: enforcement never reads the index).
pub fn index_ban(prefix: &str, policy: &str, subject: &str, new: &NewBan) -> Command {
    let index = ban_index_key(prefix);
    eval(
        INDEX,
        &[&index],
        [
            ban_index_member(policy, subject),
            new.ends_at_ms.to_string(),
            BAN_INDEX_MAX.to_string(),
        ],
    )
}

/// Adds `counts` (subject, refusals) of `policy` to the unix minute `minute`'s top set
/// under `prefix`, keeping the `TOP_ENTRIES` highest for `TOP_MINUTES` and one more minutes.
pub fn top_add(prefix: &str, policy: &str, minute: u64, counts: &[(String, u64)]) -> Command {
    let key = top_key(prefix, policy, minute);
    let life_ms = (redis_rl_policy::TOP_MINUTES + 1) * 60_000;
    let mut argv = vec![
        life_ms.to_string(),
        redis_rl_policy::TOP_ENTRIES.to_string(),
    ];
    for (subject, n) in counts {
        argv.push(n.to_string());
        argv.push(subject.clone());
    }
    eval(TOP_ADD, &[&key], argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commands_name_the_policy_engines_keys() {
        let ban = Ban::new(3, 60_000, 1_000).unwrap();
        let c = strike("rl:{ip:1.2.3.4}:r:login", &ban);
        assert_eq!(c.key, "rl:{ip:1.2.3.4}:r:login:ban");
        assert_eq!(
            &c.args[2..6],
            [
                "3",
                "rl:{ip:1.2.3.4}:r:login:ban",
                "rl:{ip:1.2.3.4}:r:login:ban:strikes",
                "rl:{ip:1.2.3.4}:r:login:ban:level"
            ]
        );
        assert_eq!(ban_read("s").args, ["PTTL", "s:ban"]);
        let h = debt_hold("s", 0);
        assert_eq!(h.key, "s:ban");
        assert_eq!(&h.args[2..], ["1", "s:ban", "1"]);
        let t = top_add("rl", "login", 7, &[("s".into(), 2)]);
        assert_eq!(t.key, "rl:{top}:login:7");
        assert_eq!(
            &t.args[2..],
            ["1", "rl:{top}:login:7", "360000", "256", "2", "s"]
        );
        assert_eq!(parse_strike(&[0, 0, 0]), Ok(None));
        assert_eq!(
            parse_strike(&[1, 1000, 5]),
            Ok(Some(NewBan {
                level: 1,
                length_ms: 1000,
                ends_at_ms: 5
            }))
        );
        assert!(parse_strike(&[1]).is_err());
    }
}
