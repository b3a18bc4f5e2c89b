//! A booking of one key (`check_all` of one key, or a hash slot's group of one key in a
//! `check_all` across slots) goes out as its algorithm's own command, `RL.<ALG> key
//! params... [COST n]`, not as `RL.ALL 1 key SPEC params... [COST n]`. The command decides
//! with the same algorithm, cost and stored bytes; its reply carries all RL.ALL's does for
//! one key (the denying index is the key's own verdict) in five integers instead of three
//! elements with a nested array, and it costs the server less to run. The async decider and
//! the sans-I/O op (the Node.js and Python packages) both ask [`booking_of_one`] and read
//! the reply with [`parse_booking_of_one`], so every front end sends the same command for
//! the same booking. A look or a forced booking of every key (`RL.ALL ... PEEK|FORCE`) stays
//! RL.ALL, as it was.

use redis::Value;

use super::cost_at;
use crate::error::Result;
use crate::limiter::decision::{parse_single, MultiDecision};

/// The key of a booking that goes out as its algorithm's own command, and its cost
/// ([`cost_at`]: a missing cost is 1): `Some` when `items` is one key.
pub(crate) fn booking_of_one<'a, T>(items: &'a [T], costs: &[u64]) -> Option<(&'a T, u64)> {
    match items {
        [item] => Some((item, cost_at(costs, 0))),
        _ => None,
    }
}

/// The reply of `command` (the algorithm's own, `RL.<ALG>`) as the booking's decision: the
/// key's own, denied at index 0 when the key denies.
pub(crate) fn parse_booking_of_one(command: &'static str, reply: &Value) -> Result<MultiDecision> {
    let decision = parse_single(command, reply)?;
    Ok(MultiDecision {
        denied: decision.is_denied().then_some(0),
        decisions: vec![decision],
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limiter::decision::Source;

    fn ints(fields: &[i64]) -> Value {
        Value::Array(fields.iter().map(|&n| Value::Int(n)).collect())
    }

    #[test]
    fn one_key_is_a_booking_of_one_with_its_cost() {
        assert_eq!(booking_of_one(&["a"], &[3]), Some((&"a", 3)));
        assert_eq!(
            booking_of_one(&["a"], &[]),
            Some((&"a", 1)),
            "the default cost"
        );
        assert_eq!(booking_of_one(&["a", "b"], &[1, 1]), None);
        assert_eq!(booking_of_one::<&str>(&[], &[]), None);
    }

    #[test]
    fn the_reply_reads_as_the_keys_decision_denied_at_its_index() {
        let denied = parse_booking_of_one("RL.SLIDING", &ints(&[0, 10, 1, 250, 900])).unwrap();
        assert_eq!(denied.denied, Some(0));
        let d = denied.decisions[0];
        assert_eq!(
            (
                d.retry_after(),
                d.limit,
                d.remaining,
                d.reset_after,
                d.source
            ),
            (
                Some(Duration::from_millis(250)),
                10,
                1,
                Duration::from_millis(900),
                Source::Redis
            )
        );
        let allowed = parse_booking_of_one("RL.SLIDING", &ints(&[1, 10, 9, 0, 100])).unwrap();
        assert_eq!((allowed.denied, allowed.decisions.len()), (None, 1));
        // An RL.ALL reply is not this command's: an error, never a guess.
        let all = Value::Array(vec![Value::Int(1), Value::Int(0), Value::Array(vec![])]);
        assert!(parse_booking_of_one("RL.SLIDING", &all).is_err());
    }
}
