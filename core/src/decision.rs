//! What a limiter answers: allowed, not now (and for how long), or never.

use crate::time::Millis;

/// The answer to one call, with everything the reply reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allowed, denied for now, or impossible.
    pub outcome: Outcome,
    /// The configured limit (capacity or limit) the caller is held to.
    pub limit: u64,
    /// Whole units left after this call (nothing is taken on a denial).
    pub remaining: u64,
    /// Time until the limiter is back to its idle state (full bucket, zero count).
    pub reset_after: Millis,
}

/// Whether the call may proceed.
///
/// "Not now" and "never" are different answers: a caller can wait out `Denied`, but a
/// cost larger than the limit can never succeed, and telling it to retry would be a lie.
///
/// Generic over the unit of the wait so that this one type is the answer everywhere: the
/// algorithms and the module use [`Millis`] (the default), the client's `Verdict` is
/// `Outcome<std::time::Duration>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome<T = Millis> {
    /// The units were (or, with PEEK, would be) taken.
    Allowed,
    /// Not enough units now; the same call succeeds after `retry_after` if no other
    /// traffic comes.
    Denied {
        /// Earliest wait after which the same call would be allowed (at least 1 ms).
        retry_after: T,
    },
    /// The cost exceeds the limit: no amount of waiting helps.
    Never,
}

impl<T> Outcome<T> {
    /// The same answer with the wait converted by `f` (to another unit).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::Allowed => Outcome::Allowed,
            Outcome::Denied { retry_after } => Outcome::Denied {
                retry_after: f(retry_after),
            },
            Outcome::Never => Outcome::Never,
        }
    }
}

impl Decision {
    /// True when the call was allowed.
    pub const fn is_allowed(&self) -> bool {
        matches!(self.outcome, Outcome::Allowed)
    }
}

/// When a written limiter key should expire: once its limiter is idle, plus `slack`.
///
/// A key that vanishes then means exactly the idle state, so idle limiters cost no memory.
/// `now` is rounded up so the expiry is never before the idle instant.
pub fn expire_at(now: crate::Micros, reset_after: Millis, slack: Millis) -> Millis {
    now.ceil_millis()
        .saturating_add(reset_after)
        .saturating_add(slack)
}

/// True if a key that already expires at `current` may keep that expiry instead of being
/// given `target` (= [`expire_at`]): it lies within half the `slack` of the target either
/// way, so the key still outlives its limiter's idle instant by at least half the slack and
/// by at most one and a half.
///
/// Why: on a server where reading a key's expiry is free but setting it is a lookup (Valkey
/// 9), a busy key's expiry is then set about once per half slack instead of on every call
/// (a bucket whose idle instant wanders back and forth around a steady level never moves
/// it). A key that outlives its idle instant holds a state that decides exactly as no key
/// does, so the only cost is memory for a little longer. With no slack only the exact target
/// is kept.
pub fn keeps_expiry(current: Millis, target: Millis, slack: Millis) -> bool {
    current.0.abs_diff(target.0) <= slack.0 / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_keeps_its_answer_in_another_unit() {
        let secs = |m: Millis| m.0.div_ceil(1000);
        assert_eq!(Outcome::Allowed.map(secs), Outcome::<u64>::Allowed);
        assert_eq!(Outcome::Never.map(secs), Outcome::<u64>::Never);
        let denied = Outcome::Denied {
            retry_after: Millis(1_500),
        };
        assert_eq!(denied.map(secs), Outcome::Denied { retry_after: 2 });
    }

    #[test]
    fn an_expiry_past_a_whole_millisecond_idle_instant_depends_on_the_calls_microseconds() {
        // A window limiter is idle at a whole millisecond; `reset_after` is the time to it
        // rounded up, as the algorithms give it. Its key then expires at idle + slack from a
        // call on a whole millisecond and 1 ms later from any other: two writes of the same
        // window may differ by that millisecond.
        let idle = Millis(3_000);
        let expiry = |now_us: u64| {
            let now = crate::Micros(now_us);
            let reset_after = crate::Micros(idle.as_micros().0 - now_us).ceil_millis();
            expire_at(now, reset_after, Millis(1_000)).0
        };
        assert_eq!(expiry(1_000_000), 4_000);
        assert_eq!(expiry(1_000_001), 4_001);
        assert_eq!(expiry(1_999_999), 4_001);
        assert_eq!(expiry(2_000_000), 4_000);
    }

    #[test]
    fn an_expiry_is_kept_within_half_the_slack_of_the_target() {
        let keeps =
            |current, target, slack| keeps_expiry(Millis(current), Millis(target), Millis(slack));
        assert!(keeps(10_000, 10_000, 1_000));
        assert!(keeps(9_500, 10_000, 1_000));
        assert!(
            !keeps(9_499, 10_000, 1_000),
            "the key would outlive idleness by < slack/2"
        );
        assert!(keeps(10_500, 10_000, 1_000));
        assert!(
            !keeps(10_501, 10_000, 1_000),
            "the key would outlive idleness by > 1.5 slack"
        );
        assert!(keeps(7, 7, 0) && !keeps(6, 7, 0) && !keeps(8, 7, 0));
        assert!(keeps(0, 1, 3), "slack 3: half is 1");
        assert!(keeps(0, 0, u64::MAX) && keeps(u64::MAX / 2, 0, u64::MAX));
        assert!(!keeps(u64::MAX, 0, u64::MAX));
    }

    #[test]
    fn a_kept_expiry_lies_between_half_and_one_and_a_half_slacks_after_idle() {
        for slack in [0, 1, 2, 3, 999, 1_000, 86_400_000] {
            for idle in [0, 1, 5_000, u64::MAX / 4_000] {
                let target = crate::Micros(idle * 1000)
                    .ceil_millis()
                    .saturating_add(Millis(slack));
                let half_below = target.0 - slack / 2;
                for current in [
                    0,
                    idle,
                    half_below.saturating_sub(1),
                    half_below,
                    target.0,
                    target.0 + 1,
                ] {
                    if keeps_expiry(Millis(current), target, Millis(slack)) {
                        assert!(current >= idle + slack / 2, "{current} {idle} {slack}");
                        assert!(
                            current <= idle + slack + slack / 2,
                            "{current} {idle} {slack}"
                        );
                    }
                }
            }
        }
    }
}
