//! The golden policy files (`testdata/policy/NAME.toml` and `NAME.txt`, format in
//! `testdata/README.md`): each request of `NAME.txt` through the engine built from
//! `NAME.toml` must get exactly the refusal, or the plan items and the headers of an allowed
//! answer, written there. Python's policy tests read the same files
//! (`python/tests/test_policy_golden.py`).

use redis_rl_policy::{render, Admission, Config, Engine, Outcome, Rendered, Request, Verdict};
use std::path::Path;

/// What one request line of a golden file says it gets, as the file writes it.
fn outcome_lines(engine: &Engine, line: &str) -> Vec<String> {
    let mut words = line.split(' ');
    let method = words.next().unwrap_or_default();
    let path = words.next().unwrap_or_default();
    let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
    let (mut peer, mut tier) = (None, None);
    for word in words {
        let (name, value) = word.split_once('=').expect("name=value");
        match name {
            "peer" => peer = Some(value.parse().expect("an IP address")),
            "tier" => tier = Some(value),
            _ => headers.push((name.to_string(), value.as_bytes().to_vec())),
        }
    }
    let req = Request {
        method,
        path,
        host: None,
        headers: &headers,
        peer,
        route: None,
    };
    let id = match engine.admit(&req, "r1") {
        Admission::Refuse(r) => return vec![format!("refused {}", r.status)],
        Admission::Pass(_) => return vec!["passed".to_string()],
        Admission::Limit(id) => id,
    };
    let plan = engine.plan(&req, &id, tier);
    let mut out: Vec<String> = plan
        .items
        .iter()
        .map(|i| {
            let (limit, window) = (i.spec.limit, i.spec.window_ms);
            format!(
                "item {} {} {limit} {window}",
                i.key,
                i.spec.algorithm.config_name()
            )
        })
        .collect();
    // Every item allowed, one unit taken, idle again after its window.
    let outcomes: Vec<Outcome> = plan
        .items
        .iter()
        .map(|i| Outcome {
            verdict: Verdict::Allowed,
            remaining: i.spec.limit - 1,
            reset_after_ms: i.spec.window_ms,
            shadow: i.shadow,
            fail_open: false,
            fail_closed: false,
        })
        .collect();
    match render(&plan, &outcomes, None, "r1") {
        Rendered::Headers(h) => out.extend(h.iter().map(|(n, v)| format!("header {n}: {v}"))),
        Rendered::Refuse(r) => out.push(format!("refused {}", r.status)),
    }
    out
}

/// The requests of a golden `.txt` and the lines each must produce.
fn requests(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines().map(str::trim_end) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with(char::is_uppercase) {
            out.push((line.to_string(), Vec::new()));
        } else {
            out.last_mut()
                .expect("a result line after a request line")
                .1
                .push(line.to_string());
        }
    }
    out
}

#[test]
fn every_golden_request_gets_its_plan_and_headers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/policy");
    let mut tomls: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    tomls.sort();
    assert!(tomls.len() >= 3, "{tomls:?}");
    let mut wrong = Vec::new();
    for toml in tomls {
        let config = Config::from_toml(&std::fs::read_to_string(&toml).unwrap()).unwrap();
        let engine = Engine::new(config, &[]).unwrap();
        let expected = std::fs::read_to_string(toml.with_extension("txt")).unwrap();
        let cases = requests(&expected);
        assert!(!cases.is_empty(), "{toml:?} has no requests");
        for (request, lines) in cases {
            let got = outcome_lines(&engine, &request);
            if got != lines {
                wrong.push(format!(
                    "{}: {request}\nexpected:\n{}\ngot:\n{}",
                    toml.display(),
                    lines.join("\n"),
                    got.join("\n")
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}
