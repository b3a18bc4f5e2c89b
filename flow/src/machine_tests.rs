use super::*;
use redis_rl_policy::Config;

const TOML: &str = r#"
dimensions = ["ip"]
[ip]
limit = 100
[[rules]]
name = "login"
paths = ["/login"]
key = ["ip"]
limits = ["2/second", "10/minute"]
ban = { after = 2, within_ms = 60000, for_ms = 5000 }
[[rules]]
name = "tokens"
paths = ["/llm"]
key = ["ip"]
limit = 1000
cost = "header:x-max-tokens"
settle = "response-header:x-tokens-used"
delay_max_ms = 2000
"#;

fn flow() -> Flow {
    Flow::new(Engine::new(Config::from_toml(TOML).unwrap(), &[]).unwrap())
}

fn request(path: &str, headers: &[(&str, &str)]) -> HttpRequest {
    HttpRequest {
        method: "POST".into(),
        path: path.into(),
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
            .collect(),
        peer: Some("192.0.2.7".parse().unwrap()),
        request_id: "r1".into(),
        trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
        ..HttpRequest::default()
    }
}

fn allowed(remaining: u64) -> Decided {
    Decided {
        verdict: Verdict::Allowed,
        remaining,
        reset_after_ms: 500,
        shadow: false,
        source: Source::Redis,
    }
}

fn denied(retry_after_ms: u64) -> Decided {
    Decided {
        verdict: Verdict::Denied { retry_after_ms },
        remaining: 0,
        reset_after_ms: retry_after_ms,
        shadow: false,
        source: Source::Redis,
    }
}

fn book(step: Step) -> Book {
    match step {
        Step::Book(b) => b,
        other => panic!("expected Book, got {other:?}"),
    }
}

#[test]
fn an_allowed_request_books_every_window_with_its_ban_read_then_forwards_with_headers() {
    let flow = flow();
    let (mut r, step) = flow.start(request("/login/", &[]), 0);
    let b = book(step);
    let keys: Vec<&str> = b.takes.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "rl:{ip:192.0.2.7}",
            "rl:{ip:192.0.2.7}:r:login:1s",
            "rl:{ip:192.0.2.7}:r:login:1m"
        ]
    );
    assert_eq!(b.ban_reads, ["rl:{ip:192.0.2.7}:r:login:ban"]);
    let step = r.booked(
        vec![allowed(99), allowed(1), allowed(9)],
        None,
        vec![Some(-2)],
        1,
    );
    let Step::Forward(f) = step else {
        panic!("{step:?}")
    };
    assert_eq!(f.path, "/login");
    assert_eq!(f.hold_ms, None);
    assert!(f
        .headers
        .contains(&("ratelimit", "\"login-1s\";r=1;t=1".to_owned())));
    assert_eq!(f.record.tier, "none");
    assert_eq!(f.record.reported.as_deref(), Some("login"));
    assert!(f.record.refusals.is_empty());
    assert_eq!(f.record.counts.len(), 3);
}

#[test]
fn a_refusal_counts_towards_the_ban_and_a_ban_read_refuses_gives_back_and_is_remembered() {
    let flow = flow();
    let (mut r, step) = flow.start(request("/login", &[]), 0);
    book(step);
    let step = r.booked(
        vec![allowed(99), denied(700), allowed(9)],
        Some(1),
        vec![Some(-2)],
        1,
    );
    let Step::Respond(reply) = step else {
        panic!("{step:?}")
    };
    assert_eq!(reply.response.status, 429);
    assert!(reply.response.body.contains("\"trace_id\""));
    assert_eq!(reply.record.refusals.len(), 1);
    assert_eq!(
        reply.record.refusals[0].subject,
        "rl:{ip:192.0.2.7}:r:login"
    );
    assert!(reply.record.refusals[0].ban.is_some());

    // The ban key exists: refused as banned, the units taken are given back.
    let (mut r, step) = flow.start(request("/login", &[]), 10);
    book(step);
    let step = r.booked(
        vec![allowed(98), allowed(0), allowed(8)],
        None,
        vec![Some(4_000)],
        11,
    );
    let Step::Respond(reply) = step else {
        panic!("{step:?}")
    };
    assert_eq!(reply.response.status, 429);
    assert!(
        reply.response.body.contains("\"banned\":true"),
        "{}",
        reply.response.body
    );
    assert!(reply
        .response
        .headers
        .contains(&("retry-after", "4".to_owned())));
    assert_eq!(reply.record.give_back.len(), 3);
    assert_eq!(reply.record.banned_ms, Some(4_000));
    assert!(
        reply.record.refusals[0].ban.is_none(),
        "a ban's refusal strikes nothing"
    );

    // Within a second: remembered, no Redis at all.
    let (_r, step) = flow.start(request("/login", &[]), 511);
    let Step::Respond(reply) = step else {
        panic!("{step:?}")
    };
    assert_eq!(reply.record.banned_ms, Some(3_500));
    // Past the recheck: read again.
    let (_r, step) = flow.start(request("/login", &[]), 1_011);
    book(step);
}

#[test]
fn a_cost_header_books_its_units_a_bad_one_is_refused_and_settle_reads_the_response() {
    let flow = flow();
    let (_r, step) = flow.start(request("/llm", &[("x-max-tokens", "abc")]), 0);
    let Step::Respond(reply) = step else {
        panic!("{step:?}")
    };
    assert_eq!(reply.response.status, 400);

    let (mut r, step) = flow.start(request("/llm", &[("x-max-tokens", "300")]), 0);
    let b = book(step);
    assert_eq!(
        b.takes.iter().map(|t| t.units).collect::<Vec<_>>(),
        [1, 300]
    );
    assert!(b.ban_reads.is_empty());
    let step = r.booked(vec![allowed(99), allowed(700)], None, vec![], 0);
    let Step::Forward(f) = step else {
        panic!("{step:?}")
    };
    let settle = f.settle.unwrap();
    assert_eq!(settle.headers(), ["x-tokens-used"]);
    let response: Vec<(String, Vec<u8>)> = vec![("X-Tokens-Used".into(), b"120".to_vec())];
    let (adjust, outcomes) = settle.adjust(&response);
    assert_eq!(adjust.len(), 1);
    assert_eq!(adjust[0].0.key, "rl:{ip:192.0.2.7}:r:tokens");
    assert_eq!(adjust[0].1, redis_rl_policy::Adjust::Refund(180));
    assert_eq!(outcomes, [("x-tokens-used".to_owned(), "refund")]);
}

#[test]
fn a_refusal_within_the_delay_is_looked_at_forced_and_held_once_under_the_cap() {
    let flow = flow();
    let (mut r, step) = flow.start(request("/llm", &[("x-max-tokens", "300")]), 0);
    book(step);
    let step = r.booked(vec![allowed(99), denied(1_500)], Some(1), vec![], 0);
    let Step::Peek(takes) = step else {
        panic!("{step:?}")
    };
    assert_eq!(takes.len(), 2);
    assert_eq!(flow.held(), 1);
    let step = r.peeked(Some(vec![allowed(99), denied(1_200)]));
    let Step::Force(_) = step else {
        panic!("{step:?}")
    };
    let step = r.forced(true);
    let Step::Forward(f) = step else {
        panic!("{step:?}")
    };
    assert_eq!(f.hold_ms, Some(1_200));
    assert_eq!(f.record.delayed, Some("held"));
    drop(r);
    assert_eq!(flow.held(), 0, "dropping the request ends its hold");

    // Too long a wait: refused as it was, the place under the cap given back.
    let (mut r, step) = flow.start(request("/llm", &[]), 0);
    book(step);
    let Step::Peek(_) = r.booked(vec![allowed(99), denied(9_000)], Some(1), vec![], 0) else {
        panic!()
    };
    let Step::Respond(reply) = r.peeked(Some(vec![allowed(99), denied(9_000)])) else {
        panic!()
    };
    assert_eq!(reply.response.status, 429);
    assert_eq!(reply.record.delayed, Some("too_long"));
    assert_eq!(flow.held(), 0);
}

#[test]
fn an_api_key_asks_for_its_tier_and_a_settle_report_takes_nothing() {
    let flow = flow();
    let mut req = request("/llm", &[("x-api-key", "k1"), ("x-max-tokens", "5")]);
    req.settle_report = true;
    let (mut r, step) = flow.start(req, 0);
    assert_eq!(
        step,
        Step::Tier {
            api_key: "k1".into()
        }
    );
    let Step::Respond(reply) = r.tier(Some("gold".into())) else {
        panic!()
    };
    assert_eq!(reply.response.status, 204);
    assert_eq!(reply.record.unknown_tier.as_deref(), Some("gold"));
    assert_eq!(reply.record.tier, "free");
    assert!(reply.settle.is_some());
}

#[test]
fn a_charge_on_a_fixed_window_asks_for_its_count_and_holds_its_subject_a_held_one_is_refused() {
    let toml = r#"
dimensions = []
[[rules]]
name = "tokens"
paths = ["/llm"]
key = ["ip"]
limits = ["1000/minute"]
algorithm = "fixed"
cost = "header:x-max-tokens"
settle = "response-header:x-tokens-used"
"#;
    let flow = Flow::new(Engine::new(Config::from_toml(toml).unwrap(), &[]).unwrap());
    let (mut r, step) = flow.start(request("/llm", &[("x-max-tokens", "1")]), 0);
    let b = book(step);
    // The subject a debt may hold is read with the limiter call.
    assert_eq!(b.ban_reads, ["rl:{ip:192.0.2.7}:r:tokens:ban"]);
    let Step::Forward(f) = r.booked(vec![allowed(999)], None, vec![None], 0) else {
        panic!()
    };
    let settle = f.settle.unwrap();
    // A refund owes nothing.
    let (adjust, _) = settle.adjust(&vec![("x-tokens-used".to_owned(), b"0".to_vec())]);
    assert!(settle.debt_watches(&adjust).is_empty());
    let used = vec![("x-tokens-used".to_owned(), b"5000".to_vec())];
    let (adjust, _) = settle.adjust(&used);
    let watches = settle.debt_watches(&adjust);
    assert_eq!(watches.len(), 1);
    assert_eq!(watches[0].key, "rl:{ip:192.0.2.7}:r:tokens");
    // Within the limit after the charge: no hold; 4,000 over with 10 s left: 4 more minutes.
    assert_eq!(watches[0].hold(1_000, 10_000), None);
    let hold = watches[0].hold(5_000, 10_000).unwrap();
    assert_eq!(hold.key, "rl:{ip:192.0.2.7}:r:tokens:ban");
    assert_eq!(hold.args.last().unwrap(), "250000");

    // Held: refused with the hold's time, saying why; its units given back.
    let (mut r, step) = flow.start(request("/llm", &[("x-max-tokens", "1")]), 0);
    book(step);
    let Step::Respond(reply) = r.booked(vec![allowed(0)], None, vec![Some(250_000)], 0) else {
        panic!()
    };
    assert_eq!(reply.response.status, 429);
    assert!(reply
        .response
        .body
        .contains("held by rule 'tokens' until a settled overage is paid"));
    assert_eq!(reply.record.give_back.len(), 1);
    assert!(reply.record.refusals.iter().all(|r| r.ban.is_none()));
}
