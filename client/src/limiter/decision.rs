//! Typed decisions, and the parsers for the server's replies.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};

/// Whether a call may proceed: the core's [`Outcome`](redis_rl_core::Outcome) (allowed, not
/// now and for how long, never) with the wait as a [`Duration`]. The wire format's `-1`
/// ("never") lives only in the parser.
pub type Verdict = redis_rl_core::Outcome<Duration>;

/// Who made a decision (the one list, the core's: the flow and the bindings name the same).
pub use redis_rl_core::Source;

/// The answer for one key: the core's [`Decision`](redis_rl_core::Decision) (what an
/// algorithm answered) in [`Duration`]s, plus who decided and whether it is enforced. A
/// type of its own, not the core's, because a limiter's answer need not come from an
/// algorithm at all (fail open, fail closed, a lease, not checked) and because callers
/// branch on those two fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allowed, denied for now, or never.
    pub verdict: Verdict,
    /// The limit the caller is held to.
    pub limit: u64,
    /// Units left after this call.
    pub remaining: u64,
    /// Time until the limiter is back to idle (full bucket, empty window).
    pub reset_after: Duration,
    /// Who decided.
    pub source: Source,
    /// The policy is in shadow mode: a denial is recorded but not enforced.
    pub shadow: bool,
}

impl Decision {
    /// True when the caller may proceed: allowed, or denied by a shadow policy.
    pub const fn allows(&self) -> bool {
        self.shadow || matches!(self.verdict, Verdict::Allowed)
    }

    /// True when the limiter said no (whether or not it is enforced).
    pub const fn is_denied(&self) -> bool {
        !matches!(self.verdict, Verdict::Allowed)
    }

    /// The wait before retrying: `Some` for a denial, `None` for allowed or never.
    pub const fn retry_after(&self) -> Option<Duration> {
        match self.verdict {
            Verdict::Denied { retry_after } => Some(retry_after),
            _ => None,
        }
    }
}

/// The answer to a partial grant ([`crate::Limiter::take_upto`], `COST n UPTO`): how many
/// units were taken, and the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Units taken: `min(n, units available)`; 0 when denied (or for a cost of 0). With a
    /// peek, what the real call would take (nothing is taken).
    pub granted: u64,
    /// The decision: allowed when `granted > 0` (`remaining` is what is left after the
    /// grant); denied when nothing was available, with the wait until one unit is
    /// (`retry_after`). Never [`Verdict::Never`]: a cost above the limit only asks for all
    /// there is.
    pub decision: Decision,
}

/// The answer for several keys checked together ([`crate::Limiter::check_all`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiDecision {
    /// The index (into the request) of the first enforced dimension that denied.
    pub denied: Option<usize>,
    /// One decision per key, in request order. On a denial, the other keys' entries say
    /// what they would have answered; nothing was consumed on any of them (best effort
    /// across hash slots, see the crate docs).
    pub decisions: Vec<Decision>,
}

impl MultiDecision {
    /// True when every enforced dimension allowed the request.
    pub fn allows(&self) -> bool {
        self.denied.is_none()
    }

    /// The longest wait among the enforced denying dimensions (`None` when allowed, or when
    /// a dimension can never allow the call).
    pub fn retry_after(&self) -> Option<Duration> {
        let mut longest = None;
        for d in self.decisions.iter().filter(|d| !d.shadow) {
            match d.verdict {
                Verdict::Never => return None,
                Verdict::Denied { retry_after } => {
                    longest = Some(longest.map_or(retry_after, |l: Duration| l.max(retry_after)));
                }
                Verdict::Allowed => {}
            }
        }
        longest
    }
}

fn reply_error(command: &'static str, detail: impl Into<String>) -> Error {
    Error::Reply {
        command,
        detail: detail.into(),
    }
}

fn int(command: &'static str, v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(reply_error(
            command,
            format!("expected an integer, got {other:?}"),
        )),
    }
}

fn non_negative(command: &'static str, v: &Value) -> Result<u64> {
    let i = int(command, v)?;
    u64::try_from(i).map_err(|_| reply_error(command, format!("expected a count, got {i}")))
}

fn array<'a>(command: &'static str, v: &'a Value, len: Option<usize>) -> Result<&'a [Value]> {
    match v {
        Value::Array(items) if len.is_none_or(|n| items.len() == n) => Ok(items),
        other => Err(reply_error(command, format!("unexpected shape {other:?}"))),
    }
}

/// The verdict from `allowed` and `retry_after_ms` (`-1` = never).
fn verdict(command: &'static str, allowed: bool, retry_ms: i64) -> Result<Verdict> {
    Ok(match (allowed, retry_ms) {
        (_, -1) => Verdict::Never,
        (true, _) => Verdict::Allowed,
        (false, ms) => Verdict::Denied {
            retry_after: Duration::from_millis(
                u64::try_from(ms)
                    .map_err(|_| reply_error(command, format!("bad retry_after_ms {ms}")))?,
            ),
        },
    })
}

/// Parses `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
pub fn parse_single(command: &'static str, v: &Value) -> Result<Decision> {
    let items = array(command, v, Some(5))?;
    let [allowed, limit, remaining, retry, reset] = items else {
        return Err(reply_error(command, "expected 5 elements"));
    };
    Ok(Decision {
        verdict: verdict(command, int(command, allowed)? == 1, int(command, retry)?)?,
        limit: non_negative(command, limit)?,
        remaining: non_negative(command, remaining)?,
        reset_after: Duration::from_millis(non_negative(command, reset)?),
        source: Source::Redis,
        shadow: false,
    })
}

/// Parses a partial grant's reply: the five fields of [`parse_single`], then `granted`.
pub fn parse_upto(command: &'static str, v: &Value) -> Result<Grant> {
    let items = array(command, v, Some(6))?;
    let [fields @ .., granted] = items else {
        return Err(reply_error(command, "expected 6 elements"));
    };
    Ok(Grant {
        granted: non_negative(command, granted)?,
        decision: parse_single(command, &Value::Array(fields.to_vec()))?,
    })
}

/// Parses RL.REFUND's reply `[refunded, limit, remaining, 0, reset_after_ms]`: the units
/// given back.
pub fn parse_refund(v: &Value) -> Result<u64> {
    const CMD: &str = "RL.REFUND";
    match array(CMD, v, Some(5))? {
        [refunded, ..] => non_negative(CMD, refunded),
        [] => Err(reply_error(CMD, "expected 5 elements")),
    }
}

/// Parses `[allowed, denied_index, [[limit, remaining, retry_after_ms, reset_after_ms], ...]]`
/// into the decisions of `n` keys and the 0-based index of the first denying key.
pub fn parse_all(v: &Value, n: usize) -> Result<(Option<usize>, Vec<Decision>)> {
    const CMD: &str = "RL.ALL";
    let items = array(CMD, v, Some(3))?;
    let [allowed, denied_index, per_key] = items else {
        return Err(reply_error(CMD, "expected 3 elements"));
    };
    let allowed = int(CMD, allowed)? == 1;
    let denied_index = non_negative(CMD, denied_index)?;
    let per_key = array(CMD, per_key, Some(n))?;
    let mut decisions = Vec::with_capacity(n);
    for entry in per_key {
        let fields = array(CMD, entry, Some(4))?;
        let [limit, remaining, retry, reset] = fields else {
            return Err(reply_error(CMD, "expected 4 fields per key"));
        };
        let retry = int(CMD, retry)?;
        // Inside RL.ALL a key that would allow reports retry_after 0.
        let key_allows = retry == 0;
        decisions.push(Decision {
            verdict: verdict(CMD, key_allows, retry)?,
            limit: non_negative(CMD, limit)?,
            remaining: non_negative(CMD, remaining)?,
            reset_after: Duration::from_millis(non_negative(CMD, reset)?),
            source: Source::Redis,
            shadow: false,
        });
    }
    let denied = if allowed {
        None
    } else {
        let i = usize::try_from(denied_index)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .filter(|i| *i < n)
            .ok_or_else(|| reply_error(CMD, format!("bad denied_index {denied_index}")))?;
        Some(i)
    };
    Ok((denied, decisions))
}

// The replies are built with the scripted Redis's helpers (feature `transport`).
#[cfg(all(test, feature = "transport"))]
mod tests {
    use super::*;
    use crate::testing::{all_reply, ints};

    #[test]
    fn single_reply_table() {
        let cases = [
            (vec![1, 10, 9, 0, 100], Verdict::Allowed, 9),
            (
                vec![0, 10, 0, 250, 1000],
                Verdict::Denied {
                    retry_after: Duration::from_millis(250),
                },
                0,
            ),
            (vec![0, 10, 10, -1, 0], Verdict::Never, 10),
        ];
        for (reply, verdict, remaining) in cases {
            let d = parse_single("RL.SLIDING", &ints(&reply)).unwrap();
            assert_eq!(d.verdict, verdict, "{reply:?}");
            assert_eq!(d.remaining, remaining);
            assert_eq!(d.limit, 10);
            assert_eq!(d.source, Source::Redis);
        }
    }

    #[test]
    fn malformed_single_replies_are_errors() {
        assert!(parse_single("RL.SLIDING", &ints(&[1, 2, 3])).is_err());
        assert!(parse_single("RL.SLIDING", &ints(&[0, -5, 0, 1, 1])).is_err());
        assert!(parse_single("RL.SLIDING", &ints(&[0, 5, 0, -7, 1])).is_err());
        assert!(parse_single("RL.SLIDING", &Value::Okay).is_err());
    }

    #[test]
    fn upto_and_refund_replies() {
        let g = parse_upto("RL.SLIDING", &ints(&[1, 10, 0, 0, 900, 7])).unwrap();
        assert_eq!((g.granted, g.decision.remaining), (7, 0));
        assert!(g.decision.allows());
        let g = parse_upto("RL.SLIDING", &ints(&[0, 10, 0, 30, 900, 0])).unwrap();
        assert_eq!(g.granted, 0);
        assert_eq!(g.decision.retry_after(), Some(Duration::from_millis(30)));
        assert!(parse_upto("RL.SLIDING", &ints(&[1, 10, 0, 0, 900])).is_err());
        assert!(parse_upto("RL.SLIDING", &ints(&[1, 10, 0, 0, 900, -1])).is_err());
        assert_eq!(parse_refund(&ints(&[3, 10, 8, 0, 100])).unwrap(), 3);
        assert!(parse_refund(&ints(&[3, 10])).is_err());
    }

    #[test]
    fn all_reply_gives_first_denier_and_every_key() {
        let reply = all_reply(2, vec![ints(&[10, 5, 0, 100]), ints(&[3, 0, 700, 900])]);
        let (denied, ds) = parse_all(&reply, 2).unwrap();
        assert_eq!(denied, Some(1));
        assert_eq!(ds[0].verdict, Verdict::Allowed);
        assert_eq!(
            ds[1].retry_after(),
            Some(Duration::from_millis(700)),
            "{ds:?}"
        );
        let m = MultiDecision {
            denied,
            decisions: ds,
        };
        assert_eq!(m.retry_after(), Some(Duration::from_millis(700)));
        assert!(parse_all(&reply, 3).is_err(), "key count must match");
        let bad_index = all_reply(9, vec![ints(&[1, 0, 5, 5])]);
        assert!(parse_all(&bad_index, 1).is_err());
    }
}
