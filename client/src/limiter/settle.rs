//! Reserve, then settle: a cost known only after the work (the tokens an LLM used, the bytes
//! a response carried) is reserved as an estimate before it, and the difference is settled
//! after it, either way: what was over-reserved is given back (`RL.REFUND`), what was
//! under-reserved is taken even over the limit (`FORCE`), so the budget neither leaks nor
//! refuses work that already happened.

use crate::limiter::decision::Decision;
// `Limiter::settle`'s (feature `transport`); without it only [`Settled`] is here (the
// sans-I/O op's answer too).
#[cfg(feature = "transport")]
use {
    crate::error::{Error, Result},
    crate::layers::decider::AllMode,
    crate::limiter::policy::Policy,
    crate::limiter::Limiter,
};

/// What [`Limiter::settle`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The estimate was exact: nothing sent.
    Exact,
    /// Over-reserved: the units given back (at most the difference; a window that has
    /// ended gives back nothing, see RL.REFUND).
    Refunded(u64),
    /// Under-reserved: the difference was taken with `FORCE` (always allowed); the decision
    /// shows the limiter afterwards (`remaining` 0 when it is now in debt).
    Charged(Decision),
}

#[cfg(feature = "transport")]
impl Limiter {
    /// Settles a reservation of `reserved` units of `policy` on `key` (taken earlier, e.g.
    /// with [`Limiter::check_n`]) against the `actual` cost: refunds `reserved - actual`, or
    /// takes `actual - reserved` with `FORCE` (with the module or the Lua twin); `Err`
    /// when Redis did not answer (nothing is retried: a refund is
    /// lost, a charge not taken).
    ///
    /// ```no_run
    /// use redis_rl_client::{settle::Settled, Limiter, Period, Policy};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter = Limiter::standalone("redis://127.0.0.1:6379/").unwrap();
    /// let budget = Policy::calendar_quota(5_000_000, Period::Month, 0, 1).unwrap();
    /// let max_tokens = 4_096;
    /// if limiter.check_n("tokens:acme", &budget, max_tokens).await.allows() {
    ///     let used = 812; // the response's usage.total_tokens
    ///     let settled = limiter.settle("tokens:acme", &budget, max_tokens, used).await.unwrap();
    ///     assert_eq!(settled, Settled::Refunded(max_tokens - used));
    /// }
    /// # }
    /// ```
    pub async fn settle(
        &self,
        key: &str,
        policy: &Policy,
        reserved: u64,
        actual: u64,
    ) -> Result<Settled> {
        if actual < reserved {
            return Ok(Settled::Refunded(
                self.refund(key, policy, reserved - actual).await?,
            ));
        }
        if actual == reserved {
            return Ok(Settled::Exact);
        }
        // RL.ALL 1 key ... FORCE: the same wire as every decision (the module or the twin).
        let charged = self
            .every_key(&[(key, policy)], &[actual - reserved], AllMode::Force)
            .await?;
        charged
            .into_iter()
            .next()
            .map(Settled::Charged)
            .ok_or_else(|| Error::Reply {
                command: "RL.ALL",
                detail: "no decision for the charged key".to_string(),
            })
    }
}
