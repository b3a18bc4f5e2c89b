//! Debts of under-declared costs on windows that forget them.
//!
//! A settled overage (more used than reserved) is charged with `FORCE` into the window
//! current at settlement. A token bucket, GCRA, sliding window or log keeps the debt until it
//! is paid; a fixed window or a calendar quota restarts from zero at its boundary, so a debt
//! charged there would vanish. For those, a charge that leaves the window over its limit
//! holds the subject on that policy until the debt is paid off, counted in whole windows:
//! the rest of the current window, plus one window per `limit` units of excess (rounded
//! up), at most [`DEBT_HOLD_MAX_MS`] (or the current window's rest, if longer). The hold is
//! written as the subject's ban key (`<subject>:ban`, see [`crate::BanKeys`]), so the ban
//! check already on the request path refuses it, with no further read.

use redis_rl_core::Kind;

use crate::ban::BanTarget;
use crate::cost::Booking;
use crate::limit::LimitSpec;
use crate::Plan;

/// The longest hold for a debt: 31 days (a monthly quota's debt of more than one period
/// holds into the next period at most).
pub const DEBT_HOLD_MAX_MS: u64 = 31 * 86_400_000;

/// Whether a debt charged on `spec` would vanish at its window's boundary (fixed window,
/// calendar quota): those hold the subject instead.
pub fn forgets_debt(spec: &LimitSpec) -> bool {
    matches!(spec.algorithm, Kind::FixedWindow | Kind::Quota)
}

/// How long to hold a subject whose window of `spec` counts `count` units after a charge,
/// with `window_left_ms` left of that window: `None` when the count is within the limit
/// (or the algorithm keeps its debts itself). A calendar period counts at its nominal
/// length.
///
/// ```
/// use redis_rl_policy::{debt_hold_ms, Config};
/// let toml = "[[rules]]\nname = \"r\"\nkey = [\"ip\"]\nlimits = [\"1000/minute\"]\nalgorithm = \"fixed\"\n";
/// let spec = Config::from_toml_named(toml, "t").unwrap().rules[0].rate.specs().unwrap()[0];
/// // 5,000 counted with 10 s of the window left: 4,000 of debt, four more windows.
/// assert_eq!(debt_hold_ms(&spec, 5_000, 10_000), Some(10_000 + 4 * 60_000));
/// assert_eq!(debt_hold_ms(&spec, 1_000, 10_000), None);
/// ```
pub fn debt_hold_ms(spec: &LimitSpec, count: u64, window_left_ms: u64) -> Option<u64> {
    if !forgets_debt(spec) || count <= spec.limit || spec.limit == 0 {
        return None;
    }
    let excess = count - spec.limit;
    let windows = excess.div_ceil(spec.limit);
    let hold = windows
        .saturating_mul(spec.window_ms)
        .saturating_add(window_left_ms);
    Some(hold.min(DEBT_HOLD_MAX_MS.max(window_left_ms)).max(1))
}

impl Plan {
    /// What the ban check reads for a request booked as `booking`: the subjects of banning
    /// policies ([`Plan::ban_targets`]), then the subjects a settled debt may hold (items
    /// settled after the response on a fixed window or quota, not shadow), each once.
    pub fn ban_checks(&self, booking: &Booking) -> Vec<BanTarget> {
        let mut out = self.ban_targets();
        for (index, item) in self.items.iter().enumerate() {
            let settles = booking.settle.get(index).is_some_and(Option::is_some);
            if !settles || item.shadow || !forgets_debt(&item.spec) {
                continue;
            }
            let subject = item.subject();
            if out.iter().any(|t| t.subject == subject) {
                continue;
            }
            out.push(BanTarget {
                index,
                policy: item.label.clone(),
                subject: subject.to_string(),
                ban: None,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_limit(limit: &str, algorithm: &str) -> Result<LimitSpec, String> {
        let toml = format!(
            "[[rules]]\nname = \"r\"\nkey = [\"ip\"]\nlimits = [\"{limit}\"]\nalgorithm = \"{algorithm}\"\n"
        );
        let c = crate::Config::from_toml_named(&toml, "t").map_err(|e| e.to_string())?;
        Ok(c.rules[0].rate.specs()?[0])
    }

    #[test]
    fn a_debt_holds_whole_windows_until_paid() {
        let fixed = parse_limit("1000/minute", "fixed").unwrap();
        // 1 unit over: the rest of this window and the next.
        assert_eq!(debt_hold_ms(&fixed, 1_001, 5), Some(60_005));
        assert_eq!(debt_hold_ms(&fixed, 2_000, 5), Some(60_005));
        assert_eq!(debt_hold_ms(&fixed, 2_001, 5), Some(120_005));
        // Within the limit: nothing.
        assert_eq!(debt_hold_ms(&fixed, 0, 5), None);
        assert_eq!(debt_hold_ms(&fixed, 1_000, 5), None);
        // Capped: 10^15 units of debt hold 31 days, not millennia.
        assert_eq!(
            debt_hold_ms(&fixed, 1_000_000_000_000_000, 5),
            Some(DEBT_HOLD_MAX_MS)
        );
        // A quota's debt, at the nominal period; the cap never cuts the current period.
        let month = parse_limit("1000/month", "fixed").unwrap();
        assert_eq!(month.algorithm, Kind::Quota);
        let left = 20 * 86_400_000;
        assert_eq!(debt_hold_ms(&month, 1_500, left), Some(DEBT_HOLD_MAX_MS));
        let year = parse_limit("10/year", "fixed").unwrap();
        let left = 200 * 86_400_000;
        assert_eq!(debt_hold_ms(&year, 11, left), Some(left));
        // Algorithms that keep their debts are never held.
        for algorithm in ["sliding", "gcra", "token_bucket", "log"] {
            let spec = parse_limit("1000/minute", algorithm).unwrap();
            assert_eq!(debt_hold_ms(&spec, 5_000, 5), None, "{algorithm}");
        }
    }
}
