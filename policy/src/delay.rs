//! Delay instead of 429: a rule or dimension with `delay_max_ms` holds a request whose wait
//! is at most that long, books its units now for its future slot (the front end takes them
//! with `FORCE`, so the debt makes the next callers wait behind it: no herd at the slot),
//! and forwards it once the wait is over. A longer wait, a wait on an item without
//! `delay_max_ms`, or more held requests than `delay_max_held` is refused as before.

use crate::engine::Plan;
use crate::render::{Outcome, Verdict};

/// The longest `delay_max_ms`: holding a request longer than a minute only ties up a
/// connection a client has likely given up on.
pub const DELAY_MAX_MS: u64 = 60_000;

/// The default cap on requests held at once, per front-end process (`delay_max_held`).
pub const DEFAULT_MAX_HELD: usize = 1_000;

/// Checks a configured `delay_max_ms`.
pub(crate) fn check(delay_max_ms: Option<u64>) -> Result<(), String> {
    match delay_max_ms {
        Some(ms) if !(1..=DELAY_MAX_MS).contains(&ms) => Err(format!(
            "delay_max_ms must be an integer between 1 and {DELAY_MAX_MS}"
        )),
        _ => Ok(()),
    }
}

/// How long to hold a refused request before forwarding it, in milliseconds: the longest
/// wait of the enforced items that refuse it, when each of them allows a delay at least
/// that long; `None` (refuse) when one of them has no `delay_max_ms`, a shorter one, never
/// allows the cost, or when the limiter failed closed. `outcomes` are the items' decisions
/// with nothing taken (a look, `PEEK`), in plan order.
pub fn hold_ms(plan: &Plan, outcomes: &[Outcome]) -> Option<u64> {
    let mut wait: Option<u64> = None;
    for (item, outcome) in plan.items.iter().zip(outcomes) {
        if item.shadow || outcome.shadow {
            continue;
        }
        if outcome.fail_closed {
            return None;
        }
        let ms = match outcome.verdict {
            Verdict::Allowed => continue,
            Verdict::Never => return None,
            Verdict::Denied { retry_after_ms } => retry_after_ms,
        };
        if item.delay_max_ms.is_none_or(|max| ms > max) {
            return None;
        }
        wait = Some(wait.unwrap_or(0).max(ms));
    }
    wait
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Admission, Engine, Request};
    use crate::schema::Config;

    fn plan(toml: &str) -> Plan {
        let engine = Engine::new(Config::from_toml(toml).unwrap(), &[]).unwrap();
        let headers: Vec<(String, Vec<u8>)> = vec![];
        let req = Request {
            method: "GET",
            path: "/chat",
            host: None,
            headers: &headers,
            peer: Some("192.0.2.1".parse().unwrap()),
            route: None,
        };
        let Admission::Limit(id) = engine.admit(&req, "r") else {
            panic!()
        };
        engine.plan(&req, &id, None)
    }

    fn outcome(verdict: Verdict) -> Outcome {
        Outcome {
            verdict,
            remaining: 0,
            reset_after_ms: 0,
            shadow: false,
            fail_open: false,
            fail_closed: false,
        }
    }

    const TOML: &str = r#"
dimensions = ["ip", "global"]
[ip]
limit = 10
delay_max_ms = 500
[[rules]]
name = "chat"
key = ["ip"]
limit = 5
delay_max_ms = 200
"#;

    #[test]
    fn a_wait_within_every_refusing_items_delay_is_held_for_the_longest() {
        let p = plan(TOML);
        let names: Vec<_> = p
            .items
            .iter()
            .map(|i| (i.name.as_str(), i.delay_max_ms))
            .collect();
        assert_eq!(
            names,
            [("ip", Some(500)), ("global", None), ("chat", Some(200))]
        );
        let allowed = outcome(Verdict::Allowed);
        let denied = |ms| outcome(Verdict::Denied { retry_after_ms: ms });
        assert_eq!(hold_ms(&p, &[denied(400), allowed, denied(150)]), Some(400));
        assert_eq!(hold_ms(&p, &[allowed, allowed, denied(200)]), Some(200));
        assert_eq!(
            hold_ms(&p, &[allowed, allowed, denied(201)]),
            None,
            "beyond"
        );
        assert_eq!(hold_ms(&p, &[denied(501), allowed, allowed]), None);
        assert_eq!(
            hold_ms(&p, &[allowed, denied(1), allowed]),
            None,
            "global has no delay"
        );
        assert_eq!(
            hold_ms(&p, &[outcome(Verdict::Never), allowed, allowed]),
            None
        );
        let closed = Outcome {
            fail_closed: true,
            ..denied(1)
        };
        assert_eq!(hold_ms(&p, &[closed, allowed, allowed]), None);
        assert_eq!(
            hold_ms(&p, &[allowed, allowed, allowed]),
            None,
            "nothing to wait for"
        );
    }

    #[test]
    fn delay_max_ms_is_bounded() {
        for bad in ["0", "60001"] {
            let err = Config::from_toml(&format!("[ip]\ndelay_max_ms = {bad}"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("delay_max_ms must be an integer between 1 and 60000"),
                "{err}"
            );
        }
        let err = Config::from_toml(
            "[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\ndelay_max_ms = 0",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("delay_max_ms must be"), "{err}");
    }
}
