use super::*;
use crate::{Admission, Config, Engine, Request};

fn config(text: &str) -> Result<Config, String> {
    Config::from_toml_named(text, "f.toml").map_err(|e| e.to_string())
}

#[test]
fn the_issues_ban_parses_with_documented_defaults() {
    let c = config(
        "[[rules]]\nname = \"login\"\nkey = [\"ip\"]\nlimit = 5\n\
         ban = { after = 3, within_ms = 60000, for_ms = 600000, escalate = 2 }\n",
    )
    .unwrap();
    let ban = c.rules[0].rate.ban.unwrap();
    assert_eq!(
        ban,
        Ban {
            after: 3,
            within_ms: 60_000,
            for_ms: 600_000,
            escalate: 2,
            max_for_ms: DEFAULT_MAX_FOR_MS,
            forget_ms: DEFAULT_FORGET_MS,
        }
    );
    // 10 min, 20, 40, ... capped at a day.
    assert_eq!(ban.length_ms(1), 600_000);
    assert_eq!(ban.length_ms(2), 1_200_000);
    assert_eq!(ban.length_ms(3), 2_400_000);
    assert_eq!(ban.length_ms(100), DEFAULT_MAX_FOR_MS);
    assert_eq!(ban.length_ms(u64::MAX), DEFAULT_MAX_FOR_MS);
    // A first ban longer than a day raises the default cap to itself.
    let long = Ban::new(1, 1, 2 * DEFAULT_MAX_FOR_MS).unwrap();
    assert_eq!(long.max_for_ms, 2 * DEFAULT_MAX_FOR_MS);
    let flat = Ban::new(1, 10, 100).unwrap();
    assert_eq!(flat.length_ms(7), 100, "escalate 1: every ban the same");
}

#[test]
fn nonsense_bans_are_refused_naming_the_field() {
    for (ban, expected) in [
        (
            "{ after = 0, within_ms = 1, for_ms = 1 }",
            "ban: after must be an integer between 1 and 1000000",
        ),
        (
            "{ after = 1, within_ms = 0, for_ms = 1 }",
            "ban: within_ms must be an integer between 1 and",
        ),
        (
            "{ after = 1, within_ms = 1, for_ms = 0 }",
            "ban: for_ms must be an integer between 1 and",
        ),
        (
            "{ after = 1, within_ms = 1, for_ms = 1, escalate = 0 }",
            "ban: escalate must be an integer between 1 and 1000",
        ),
        (
            "{ after = 1, within_ms = 1, for_ms = 10, max_for_ms = 5 }",
            "ban: max_for_ms (5) is shorter than for_ms (10)",
        ),
        (
            "{ after = 1, within_ms = 1, for_ms = 1, forget_ms = 0 }",
            "ban: forget_ms must be",
        ),
        ("{ after = 1, within_ms = 1 }", "missing field `for_ms`"),
        (
            "{ after = 1, within_ms = 1, for_ms = 1, for = 2 }",
            "unknown field `for`",
        ),
        ("{ after = -1, within_ms = 1, for_ms = 1 }", "invalid value"),
    ] {
        let rule = format!("[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\nban = {ban}\n");
        let err = config(&rule).unwrap_err();
        assert!(err.contains(expected), "{ban}: {err}");
        assert!(err.starts_with("f.toml:"), "{err}");
        let ip = format!("[ip]\nban = {ban}\n");
        let err = config(&ip).unwrap_err();
        assert!(err.contains(expected), "{ban}: {err}");
    }
    let err = config("[global]\nban = { after = 1, within_ms = 1, for_ms = 1 }\n").unwrap_err();
    assert!(
        err.starts_with("f.toml:2: global.ban: ban: the global dimension"),
        "{err}"
    );
    let err = config("[tiers.free]\nlimit = 1\n[tiers.free.global]\nban = { after = 1, within_ms = 1, for_ms = 1 }\n")
        .unwrap_err();
    assert!(
        err.contains("tiers.free.global.ban: ban: the global dimension"),
        "{err}"
    );
}

fn plan(c: Config, path: &str, key: Option<&str>) -> Plan {
    let engine = Engine::new(c, &[]).unwrap();
    let mut headers: Vec<(String, Vec<u8>)> = vec![];
    if let Some(k) = key {
        headers.push(("x-api-key".into(), k.as_bytes().to_vec()));
    }
    let req = Request {
        method: "GET",
        path,
        host: None,
        headers: &headers,
        peer: Some("192.0.2.1".parse().unwrap()),
        route: None,
    };
    let Admission::Limit(id) = engine.admit(&req, "r1") else {
        panic!()
    };
    engine.plan(&req, &id, None)
}

#[test]
fn bans_reach_the_plan_once_per_subject_on_rules_dimensions_and_tiers() {
    let c = config(
        "dimensions = [\"api_key\", \"ip\", \"global\"]\n\
         [ip]\nban = { after = 2, within_ms = 1000, for_ms = 5000 }\n\
         [tiers.free]\nlimit = 10\nban = { after = 4, within_ms = 1000, for_ms = 7000 }\n\
         [[rules]]\nname = \"login\"\npaths = [\"/login\"]\nkey = [\"ip\"]\n\
         limits = [\"5/minute\", \"100/day\"]\nban = { after = 3, within_ms = 60000, for_ms = 600000 }\n\
         [[rules]]\nname = \"quiet\"\nkey = [\"ip\"]\nlimit = 5\n",
    )
    .unwrap();
    let p = plan(c.clone(), "/login", Some("k1"));
    let targets = p.ban_targets();
    let got: Vec<(usize, &str, &str, u64)> = targets
        .iter()
        .map(|t| {
            (
                t.index,
                t.policy.as_str(),
                t.subject.as_str(),
                t.ban.map_or(0, |b| b.for_ms),
            )
        })
        .collect();
    let tenant = crate::tenant_id("k1");
    let key = format!("rl:{{k:{tenant}}}:key");
    assert_eq!(
        got,
        [
            (0, "api_key", key.as_str(), 7_000),
            (1, "ip", "rl:{ip:192.0.2.1}", 5_000),
            // Two windows, one subject: the rule's key without the window suffix.
            (3, "login", "rl:{ip:192.0.2.1}:r:login", 600_000),
        ]
    );
    assert_eq!(p.items[4].subject(), "rl:{ip:192.0.2.1}:r:login");
    assert_eq!(p.items[4].key, "rl:{ip:192.0.2.1}:r:login:1d");
    assert!(p
        .items
        .iter()
        .any(|i| i.label == "quiet" && i.ban.is_none()));
    // Without a key: no api_key item, the ip dimension's own ban.
    let p = plan(c, "/other", None);
    assert_eq!(p.ban_targets().len(), 1);
    assert_eq!(BanKeys::of("rl:{ip:x}").strikes, "rl:{ip:x}:ban:strikes");
}

#[test]
fn a_shadow_policy_never_bans() {
    let c =
        config("[ip]\nshadow = true\nban = { after = 1, within_ms = 1, for_ms = 1 }\n").unwrap();
    assert!(plan(c, "/", None).ban_targets().is_empty());
}

#[test]
fn a_ban_renders_429_with_its_remaining_time_everywhere() {
    let c = config(
        "dimensions = [\"ip\"]\n[[rules]]\nname = \"login\"\nkey = [\"ip\"]\nlimit = 5\n\
         ban = { after = 3, within_ms = 60000, for_ms = 600000 }\n",
    )
    .unwrap();
    let p = plan(c, "/login", None);
    let r = render_ban(&p, 1, 599_001, "req-1");
    assert_eq!(r.status, 429);
    let h = |name: &str| {
        r.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(h("retry-after"), Some("600"));
    assert_eq!(h("ratelimit"), Some("\"login\";r=0;t=600"));
    assert_eq!(h("x-ratelimit-remaining"), Some("0"));
    assert_eq!(h("x-ratelimit-reset"), Some("600"));
    assert_eq!(h("x-ratelimit-limit"), Some("5"));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["banned"], true);
    assert_eq!(body["dimension"], "login");
    assert_eq!(body["retry_after"], 600);
    assert_eq!(
        body["detail"],
        "banned by rule 'login' after repeated refusals; retry after 600 s"
    );
}

#[test]
fn index_members_and_top_keys() {
    let m = ban_index_member("login", "rl:{ip:1}:r:login:/a\nb");
    assert_eq!(
        parse_ban_index_member(&m),
        Some(("login", "rl:{ip:1}:r:login:/a\nb"))
    );
    assert_eq!(ban_index_key("rl"), "rl:{bans}");
    assert_eq!(top_key("rl", "ip", 7), "rl:{top}:ip:7");
}

#[test]
fn the_ban_check_reads_the_subjects_a_settled_debt_may_hold() {
    let c = config(
        "dimensions = [\"ip\"]\n\
         [[rules]]\nname = \"fixed\"\nkey = [\"ip\"]\nlimits = [\"1000/minute\"]\nalgorithm = \"fixed\"\n\
         cost = \"header:x-cost\"\nsettle = \"response-header:x-used\"\n\
         [[rules]]\nname = \"month\"\nkey = [\"ip\"]\nlimits = [\"10/second\", \"1000/month\"]\n\
         settle = \"response-header:x-used\"\n\
         [[rules]]\nname = \"gcra\"\nkey = [\"ip\"]\nlimit = 5\nalgorithm = \"gcra\"\n\
         settle = \"response-header:x-used\"\n\
         [[rules]]\nname = \"unsettled\"\nkey = [\"ip\"]\nlimit = 5\nalgorithm = \"fixed\"\n\
         [[rules]]\nname = \"quiet\"\nkey = [\"ip\"]\nlimit = 5\nalgorithm = \"fixed\"\nshadow = true\n\
         settle = \"response-header:x-used\"\n",
    )
    .unwrap();
    let p = plan(c, "/x", None);
    let booking = crate::Booking {
        units: vec![1; p.items.len()],
        settle: p
            .items
            .iter()
            .map(|i| {
                (i.dimension.is_none() && i.label != "unsettled").then(|| "x-used".to_string())
            })
            .collect(),
    };
    let got: Vec<(&str, &str, bool)> = p
        .ban_checks(&booking)
        .iter()
        .map(|t| {
            let item = &p.items[t.index];
            (item.label.as_str(), item.key.as_str(), t.ban.is_some())
        })
        .collect();
    // A fixed window and a quota that settle, once per subject (the month's subject, not
    // its 1s window); never a GCRA (it keeps its debt), an unsettled or a shadow rule.
    assert_eq!(
        got,
        [
            ("fixed", "rl:{ip:192.0.2.1}:r:fixed", false),
            ("month", "rl:{ip:192.0.2.1}:r:month:1mo", false),
        ]
    );
    assert_eq!(
        p.ban_checks(&booking)[1].subject,
        "rl:{ip:192.0.2.1}:r:month"
    );
}
