//! Settled debts on windows that forget them at their boundary (fixed window, calendar
//! quota): after a charge, the host reads the window's count and the flow decides the
//! subject's hold ([`redis_rl_policy::debt_hold_ms`]), written into its ban key so the ban
//! check on the request path refuses it.

use redis_rl_policy::{debt_hold_ms, forgets_debt, LimitSpec, PlanItem};

use crate::commands::{self, Command};

/// A settled item whose window forgets its debt: what to read after a charge, and whom to
/// hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebtWatch {
    /// The limiter key charged: read its count with `RL.STATE` (the module's or the twin's).
    pub key: String,
    /// The subject held (its ban key).
    pub subject: String,
    spec: LimitSpec,
}

impl DebtWatch {
    pub(crate) fn of(item: &PlanItem, key: &str) -> Option<Self> {
        (forgets_debt(&item.spec) && !item.shadow).then(|| Self {
            key: key.to_owned(),
            subject: item.subject().to_owned(),
            spec: item.spec,
        })
    }

    /// The command holding the subject when the window counts `count` units with
    /// `window_left_ms` left of it (`None`: within the limit, nothing owed).
    pub fn hold(&self, count: u64, window_left_ms: u64) -> Option<Command> {
        debt_hold_ms(&self.spec, count, window_left_ms)
            .map(|ms| commands::debt_hold(&self.subject, ms))
    }
}
