use super::*;
use crate::render::{render, Outcome, Rendered, Verdict};

struct Req {
    method: &'static str,
    path: &'static str,
    headers: Vec<(String, Vec<u8>)>,
    peer: &'static str,
}

fn req(method: &'static str, path: &'static str, headers: &[(&str, &str)]) -> Req {
    Req {
        method,
        path,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect(),
        peer: "192.0.2.1",
    }
}

impl Req {
    fn view(&self) -> Request<'_> {
        Request {
            method: self.method,
            path: self.path,
            host: None,
            headers: &self.headers,
            peer: Some(self.peer.parse().unwrap()),
            route: None,
        }
    }
}

fn engine(toml: &str) -> Engine {
    Engine::new(Config::from_toml(toml).unwrap(), &[]).unwrap()
}

/// The keys and policy names of `r` with the key's tier `tier`.
fn plan(e: &Engine, r: &Req, tier: Option<&str>) -> Vec<(String, String)> {
    let view = r.view();
    let id = match e.admit(&view, "rid") {
        Admission::Limit(id) => id,
        other => panic!("not limited: {other:?}"),
    };
    e.plan(&view, &id, tier)
        .items
        .into_iter()
        .map(|i| (i.name, i.key))
        .collect()
}

fn rule_keys(e: &Engine, r: &Req, tier: Option<&str>) -> Vec<String> {
    plan(e, r, tier)
        .into_iter()
        .filter(|(name, _)| Dimension::ALL.iter().all(|d| !name.starts_with(d.name())))
        .map(|(_, k)| k)
        .collect()
}

#[test]
fn the_default_plan_keeps_the_designs_keys() {
    let e = Engine::new(Config::default(), &["/items/{id}".into()]).unwrap();
    let tenant = crate::tenant_id("k1");
    assert_eq!(
        plan(
            &e,
            &req("GET", "/items/7", &[("x-api-key", "k1")]),
            Some("pro")
        ),
        [
            ("api_key".into(), format!("rl:{{k:{tenant}}}:key")),
            ("ip".into(), "rl:{ip:192.0.2.1}".into()),
            (
                "endpoint".into(),
                format!("rl:{{k:{tenant}}}:ep:/items/{{id}}")
            ),
            ("global".into(), "rl:{global}".into()),
        ]
    );
    let anonymous = plan(&e, &req("GET", "/nowhere", &[]), None);
    assert_eq!(
        anonymous,
        [
            ("ip".into(), "rl:{ip:192.0.2.1}".into()),
            ("endpoint".into(), "rl:{ip:192.0.2.1}:ep:<unmatched>".into()),
            ("global".into(), "rl:{global}".into()),
        ]
    );
}

#[test]
fn rules_match_by_path_template_method_host_header_and_tier() {
    let e = engine(
        r#"
        dimensions = []
        [[rules]]
        name = "r"
        paths = ["/login", "/api/items/{id}", "/admin/**"]
        methods = ["POST"]
        hosts = ["api.example.com"]
        headers = { "x-client" = "mobile" }
        tiers = ["pro"]
        key = ["global"]
        limit = 5
        "#,
    );
    let ok: &[(&str, &str)] = &[
        ("host", "API.example.com:8443"),
        ("x-client", "mobile"),
        ("x-api-key", "k"),
    ];
    let matched = |method: &'static str, path: &'static str, headers: &[(&str, &str)], tier| {
        !rule_keys(&e, &req(method, path, headers), tier).is_empty()
    };
    for path in [
        "/login",
        "/api/items/7",
        "/admin",
        "/admin/a/b",
        "/login/",
        "//api/items/7",
    ] {
        assert!(matched("POST", path, ok, Some("pro")), "{path}");
    }
    for path in [
        "/logins",
        "/api/items",
        "/api/items/7/x",
        "/Login",
        "/other",
    ] {
        assert!(!matched("POST", path, ok, Some("pro")), "{path}");
    }
    assert!(
        matched("post", "/login", ok, Some("pro")),
        "methods in any case"
    );
    assert!(!matched("GET", "/login", ok, Some("pro")), "method");
    let other_host = [("host", "www.example.com"), ok[1], ok[2]];
    assert!(!matched("POST", "/login", &other_host, Some("pro")), "host");
    let no_header = [ok[0], ok[2]];
    assert!(
        !matched("POST", "/login", &no_header, Some("pro")),
        "header missing"
    );
    let other_value = [ok[0], ("x-client", "web"), ok[2]];
    assert!(
        !matched("POST", "/login", &other_value, Some("pro")),
        "header value"
    );
    assert!(!matched("POST", "/login", ok, Some("free")), "tier");
    assert!(
        !matched("POST", "/login", ok, Some("gold")),
        "unknown tier: the default, free"
    );
    let anonymous = [ok[0], ok[1]];
    assert!(
        !matched("POST", "/login", &anonymous, None),
        "no key, no tier"
    );
}

#[test]
fn keys_by_each_part() {
    let tenant = crate::tenant_id("k1");
    let long = "x".repeat(65);
    let headers: &[(&str, &str)] = &[
        ("x-api-key", "k1"),
        ("host", "api.example.com"),
        ("x-tenant", "acme"),
        ("x-odd", "a}b{c"),
        ("x-colon", "alice:sub"),
        ("x-long", &long),
    ];
    let key_of = |parts: &str| {
        let e = engine(&format!(
            "dimensions = []\n[[rules]]\nname = \"r\"\nkey = {parts}\nlimit = 5\npaths = [\"/api/items/{{id}}\"]"
        ));
        let keys = rule_keys(&e, &req("POST", "/api/items/9", headers), Some("pro"));
        assert_eq!(keys.len(), 1, "{parts}: {keys:?}");
        keys[0].clone()
    };
    for (parts, expected) in [
        ("[\"api_key\"]", format!("rl:{{k:{tenant}}}:r:r")),
        ("[\"ip\"]", "rl:{ip:192.0.2.1}:r:r".to_string()),
        (
            "[\"route\"]",
            "rl:{r:r}:r:r:route:/api/items/%7Bid%7D".to_string(),
        ),
        ("[\"method\"]", "rl:{m:POST}:r:r".to_string()),
        ("[\"host\"]", "rl:{host:api.example.com}:r:r".to_string()),
        ("[\"tier\"]", "rl:{tier:pro}:r:r".to_string()),
        ("[\"global\"]", "rl:{global}:r:r".to_string()),
        (
            "[\"header:X-Tenant\"]",
            "rl:{h:x-tenant=acme}:r:r".to_string(),
        ),
        (
            "[\"header:x-odd\"]",
            "rl:{h:x-odd=a%7Db%7Bc}:r:r".to_string(),
        ),
        (
            "[\"header:x-colon\"]",
            "rl:{h:x-colon=alice%3Asub}:r:r".to_string(),
        ),
        (
            "[\"header:x-long\"]",
            format!(
                "rl:{{h:x-long=~{}}}:r:r",
                crate::identity::hex16(long.as_bytes())
            ),
        ),
        (
            "[\"route\", \"ip\", \"method\"]",
            "rl:{ip:192.0.2.1}:r:r:route:/api/items/%7Bid%7D:m:POST".to_string(),
        ),
    ] {
        assert_eq!(key_of(parts), expected, "{parts}");
    }
}

#[test]
fn a_missing_key_part_means_the_rule_does_not_apply() {
    for part in ["api_key", "tier", "header:x-tenant", "host"] {
        let e = engine(&format!(
            "dimensions = []\n[[rules]]\nname = \"r\"\nkey = [\"{part}\"]\nlimit = 5"
        ));
        assert!(
            rule_keys(&e, &req("GET", "/", &[]), None).is_empty(),
            "{part}"
        );
    }
}

#[test]
fn several_windows_are_policies_and_keys_of_their_own() {
    let e = engine(
        r#"
        dimensions = ["api_key", "ip"]
        [tiers.free]
        limits = ["10/second", "10000/day"]
        [ip]
        limits = ["1/second", { limit = 5, window_ms = 90000 }]
        "#,
    );
    let tenant = crate::tenant_id("k");
    assert_eq!(
        plan(&e, &req("GET", "/", &[("x-api-key", "k")]), None),
        [
            ("api_key-1s".into(), format!("rl:{{k:{tenant}}}:key:1s")),
            ("api_key-1d".into(), format!("rl:{{k:{tenant}}}:key:1d")),
            ("ip-1s".into(), "rl:{ip:192.0.2.1}:1s".into()),
            ("ip-90s".into(), "rl:{ip:192.0.2.1}:90s".into()),
        ]
    );
}

#[test]
fn rule_paths_are_routes_of_the_endpoint_dimension() {
    let e = Engine::new(
        Config::from_toml(
            "dimensions = [\"endpoint\"]\n[[rules]]\nname = \"s\"\npaths = [\"/search/**\"]\nkey = [\"ip\"]\nlimit = 9",
        )
        .unwrap(),
        &["/items/{id}".into()],
    )
    .unwrap();
    let keys: Vec<String> = plan(&e, &req("GET", "/search/a/b/", &[]), None)
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(
        keys,
        ["rl:{ip:192.0.2.1}:ep:/search/**", "rl:{ip:192.0.2.1}:r:s"]
    );
    assert_eq!(e.route("/items/3", None), "/items/{id}");
    let both = Engine::new(
        Config::from_toml(
            "[[rules]]\nname = \"a\"\npaths = [\"/items/**\"]\nkey = [\"ip\"]\nlimit = 9",
        )
        .unwrap(),
        &["/items/{id}".into()],
    )
    .unwrap();
    assert_eq!(
        both.route("/items/3", None),
        "/items/{id}",
        "a template without ** first"
    );
    assert_eq!(both.route("/items/3/4", None), "/items/**");
    assert_eq!(e.route("/x", Some("/{*path}")), "/{*path}");
    assert_eq!(e.route("/x", None), UNMATCHED);
}

#[test]
fn identity_refusals_come_first() {
    let e = engine("api_key_header = \"Authorization\"\n[access]\ndeny_ips = [\"::ffff:192.0.2.1/128\"]\ndeny_api_keys = [\"badkey\"]");
    let refuse = |r: &Req| match e.admit(&r.view(), "rid") {
        Admission::Refuse(resp) => resp.status,
        _ => 0,
    };
    let mut r = req("GET", "/", &[]);
    assert_eq!(
        refuse(&r),
        403,
        "a mapped deny network matches the IPv4 client"
    );
    r.peer = "192.0.2.9";
    assert_eq!(refuse(&r), 0);
    r.headers = req("GET", "/", &[("authorization", "Bearer\tbadkey")]).headers;
    assert_eq!(refuse(&r), 403, "Bearer and a tab");
    r.headers = req(
        "GET",
        "/",
        &[("authorization", "ok"), ("Authorization", "badkey")],
    )
    .headers;
    assert_eq!(refuse(&r), 400, "two keys");
    r.headers = req("GET", "/", &[("authorization", "bad\x01key")]).headers;
    let Admission::Refuse(resp) = e.admit(&r.view(), "rid-9") else {
        panic!()
    };
    assert_eq!(resp.status, 400);
    let body: serde_json::Value = serde_json::from_str(&resp.body).unwrap();
    assert_eq!(body["request_id"], "rid-9");
    assert_eq!(body["title"], "Bad Request");
}

#[test]
fn a_refusal_carries_the_trace_id_given() {
    let resp = crate::render::forbidden("ip", "rid-1");
    assert!(!resp.body.contains("trace_id"));
    let traced = resp
        .clone()
        .with_trace_id("4bf92f3577b34da6a3ce929d0e0e4736");
    let body: serde_json::Value = serde_json::from_str(&traced.body).unwrap();
    assert_eq!(body["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(body["request_id"], "rid-1");
    assert_eq!(
        (traced.status, &traced.headers),
        (resp.status, &resp.headers)
    );
    // Keys stay in serde_json's sorted order, as the Python middleware writes them.
    assert!(traced
        .body
        .contains("\"status\":403,\"title\":\"Forbidden\",\"trace_id\":"));
}

fn outcome(verdict: Verdict, remaining: u64, reset_after_ms: u64) -> Outcome {
    Outcome {
        verdict,
        remaining,
        reset_after_ms,
        shadow: false,
        fail_open: false,
        fail_closed: false,
    }
}

#[test]
fn headers_list_every_window_and_report_the_most_restrictive() {
    let e =
        engine("dimensions = [\"api_key\"]\n[tiers.free]\nlimits = [\"10/second\", \"10000/day\"]");
    let r = req("GET", "/", &[("x-api-key", "k")]);
    let view = r.view();
    let Admission::Limit(id) = e.admit(&view, "rid") else {
        panic!()
    };
    let p = e.plan(&view, &id, None);
    let allowed = [
        outcome(Verdict::Allowed, 9, 100),
        outcome(Verdict::Allowed, 3, 80_000_000),
    ];
    let Rendered::Headers(h) = render(&p, &allowed, None, "rid") else {
        panic!()
    };
    let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
    assert_eq!(
        get("ratelimit-policy"),
        Some("\"api_key-1s\";q=10;w=1, \"api_key-1d\";q=10000;w=86400")
    );
    assert_eq!(get("ratelimit"), Some("\"api_key-1d\";r=3;t=80000"));
    assert_eq!(get("x-ratelimit-limit"), Some("10000"));
    let denied = [
        outcome(Verdict::Allowed, 9, 100),
        outcome(
            Verdict::Denied {
                retry_after_ms: 1_500,
            },
            0,
            1_500,
        ),
    ];
    let Rendered::Refuse(resp) = render(&p, &denied, Some(1), "rid") else {
        panic!()
    };
    assert_eq!(resp.status, 429);
    let body: serde_json::Value = serde_json::from_str(&resp.body).unwrap();
    assert_eq!(body["dimension"], "api_key");
    assert_eq!(body["policy"], "api_key-1d");
    assert_eq!(body["retry_after"], 2);
    assert!(resp.headers.contains(&("retry-after", "2".into())));
    assert!(resp
        .headers
        .contains(&("ratelimit", "\"api_key-1d\";r=0;t=2".into())));
}

#[test]
fn legacy_headers_false_sends_the_drafts_two_alone() {
    let e = engine("legacy_headers = false\ndimensions = [\"ip\"]\nip = { limit = 10 }");
    let r = req("GET", "/", &[]);
    let view = r.view();
    let Admission::Limit(id) = e.admit(&view, "rid") else {
        panic!()
    };
    let p = e.plan(&view, &id, None);
    let Rendered::Headers(h) = render(&p, &[outcome(Verdict::Allowed, 9, 6_000)], None, "rid")
    else {
        panic!()
    };
    let names: Vec<&str> = h.iter().map(|(k, _)| *k).collect();
    assert_eq!(names, ["ratelimit-policy", "ratelimit"]);
    let denied = [outcome(
        Verdict::Denied {
            retry_after_ms: 1_500,
        },
        0,
        1_500,
    )];
    let Rendered::Refuse(resp) = render(&p, &denied, Some(0), "rid") else {
        panic!()
    };
    assert_eq!(resp.status, 429);
    assert!(resp
        .headers
        .iter()
        .all(|(k, _)| !k.starts_with("x-ratelimit")));
    assert!(resp
        .headers
        .contains(&("ratelimit", "\"ip\";r=0;t=2".into())));
    // The default keeps them.
    let e = engine("dimensions = [\"ip\"]\nip = { limit = 10 }");
    let p = e.plan(&view, &id, None);
    let Rendered::Headers(h) = render(&p, &[outcome(Verdict::Allowed, 9, 6_000)], None, "rid")
    else {
        panic!()
    };
    assert!(h.contains(&("x-ratelimit-remaining", "9".into())));
}

#[test]
fn explain_names_rules_windows_and_keys() {
    let e = engine(
        "[[rules]]\nname = \"login\"\npaths = [\"/login\"]\nmethods = [\"POST\"]\nkey = [\"ip\"]\nlimits = [\"5/minute\", \"100/day\"]",
    );
    let text = e.explain();
    for expected in [
        "\"login-1m\" 5/1m sliding, \"login-1d\" 100/1d sliding",
        "matches POST /login",
        "counted per [ip] in rl:{<first part>}:r:login:<other parts>:<window>",
        "tier free (default): \"api_key\" 100/1m token_bucket",
        "global    key rl:{global}: \"global\" 100000/1m sliding",
    ] {
        assert!(text.contains(expected), "{expected}\n{text}");
    }
}
