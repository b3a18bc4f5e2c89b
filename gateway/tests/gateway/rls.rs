//! Envoy's rate limit service (`--rls-listen`) through a real gRPC client built from Envoy's
//! protos: every example of envoyproxy/ratelimit's README configuration section answers as
//! that README says; refused configurations; one decision across descriptors; hits_addend;
//! shadow mode; wildcards; reload.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_rl_testkit::{eventually, free_port, Server};
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;
use rl_gateway_proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rl_gateway_proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

use super::Gateway;

const OK: i32 = 1;
const OVER: i32 = 2;

/// The README's examples, one domain per file (Example 4's and 9's first variants; the
/// others come by reload).
const EXAMPLES: &[(&str, &str)] = &[
    (
        "1.yaml",
        "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n\n  - key: database\n    value: default\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n",
    ),
    (
        "2.yaml",
        "domain: messaging\ndescriptors:\n  # Only allow 5 marketing messages a day\n  - key: message_type\n    value: marketing\n    descriptors:\n      - key: to_number\n        rate_limit:\n          unit: day\n          requests_per_unit: 5\n\n  # Only allow 100 messages a day to any unique phone number\n  - key: to_number\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n",
    ),
    (
        "3.yaml",
        "domain: edge_proxy_per_ip\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n\n  # Black list IP\n  - key: remote_address\n    value: 50.0.0.5\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n",
    ),
    (
        "4.yaml",
        "domain: example4\ndescriptors:\n  - key: key\n    value: value\n    rate_limit:\n      requests_per_unit: 300\n      unit: second\n",
    ),
    (
        "5.yaml",
        "domain: internal\ndescriptors:\n  - key: ldap\n    rate_limit:\n      unlimited: true\n\n  - key: azure\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n",
    ),
    (
        "6.yaml",
        "domain: example6\ndescriptors:\n  - key: service\n    descriptors:\n      - key: user\n        value: user-a\n        rate_limit:\n          requests_per_unit: 10\n          unit: second\n        shadow_mode: true\n      - key: user\n        value: user-b\n        rate_limit:\n          requests_per_unit: 20\n          unit: second\n",
    ),
    (
        "7.yaml",
        "domain: example7\ndescriptors:\n  - key: key_1\n    value: value_1\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit:\n          name: specific_limit\n          requests_per_unit: 5\n          unit: second\n  - key: key_2\n    value: value_2\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit:\n          replaces:\n            - name: specific_limit\n          requests_per_unit: 10\n          unit: second\n",
    ),
    (
        "8.yaml",
        "domain: example8\ndescriptors:\n  - key: key1\n    detailed_metric: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n",
    ),
    (
        "9.yaml",
        "domain: example9\ndescriptors:\n  - key: key1\n    value: value*\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n",
    ),
    (
        "10.yaml",
        "domain: example10\ndescriptors:\n  - key: route\n    value_to_metric: true\n    descriptors:\n      - key: http_method\n        value_to_metric: true\n        descriptors:\n          - key: subject_id\n            rate_limit:\n              unit: minute\n              requests_per_unit: 60\n",
    ),
    (
        "10w.yaml",
        "domain: example10_wildcard\ndescriptors:\n  - key: user\n    value_to_metric: true\n    descriptors:\n      - key: action\n        value: read*\n        value_to_metric: true\n        descriptors:\n          - key: resource\n            rate_limit:\n              unit: minute\n              requests_per_unit: 100\n",
    ),
    (
        "11.yaml",
        "domain: example11\ndescriptors:\n  # With share_threshold: true, all files/* matches share the same threshold\n  - key: files\n    value: files/*\n    share_threshold: true\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n\n  # Without share_threshold, each files_no_share/* match has its own isolated threshold\n  - key: files_no_share\n    value: files_no_share/*\n    share_threshold: false\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n",
    ),
    (
        "own.yaml",
        "domain: own\ndescriptors:\n  - key: small\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: big\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: sliding\n    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_window}\n",
    ),
];

const EXAMPLE4_NESTED: &str = "domain: example4\ndescriptors:\n  - key: key\n    value: value\n    descriptors:\n      - key: subkey\n        rate_limit:\n          requests_per_unit: 300\n          unit: second\n";
const EXAMPLE9_MIDDLE: &str = "domain: example9\ndescriptors:\n  - key: path\n    value: /api/*/action\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n";
const EXAMPLE9_MULTIPLE: &str = "domain: example9\ndescriptors:\n  - key: route\n    value: /api/*/resource/*/action\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n";

pub(super) struct Rls {
    pub(super) gw: Gateway,
    pub(super) client: RateLimitServiceClient<Channel>,
    pub(super) port: u16,
}

/// The gateway with `--rls-listen` on a free port and `config` (a file or directory).
pub(super) async fn start(server: &Server, config: &Path, extra: &[&str]) -> Rls {
    start_watched(server, config, extra, false).await
}

/// [`start`], watching the configuration's directory when `watch`.
pub(super) async fn start_watched(
    server: &Server,
    config: &Path,
    extra: &[&str],
    watch: bool,
) -> Rls {
    let url = server.url();
    let args = ["--redis", &url, "--rls-config", config.to_str().unwrap()];
    let all = [&args[..], extra].concat();
    let (gw, port) = Gateway::listening_watched(&all, "--rls-listen", watch).await;
    let mut client = None;
    eventually("the rate limit service answers", async || {
        client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}"))
            .await
            .ok();
        client.is_some()
    })
    .await;
    Rls {
        gw,
        client: client.unwrap(),
        port,
    }
}

pub(super) fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub(super) fn with_hits(mut d: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(hits);
    d
}

impl Rls {
    pub(super) async fn ask(
        &mut self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
        hits: u32,
    ) -> RateLimitResponse {
        let req = RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: hits,
        };
        self.client
            .should_rate_limit(req)
            .await
            .expect("ShouldRateLimit")
            .into_inner()
    }

    /// One descriptor: its status.
    pub(super) async fn one(
        &mut self,
        domain: &str,
        entries: &[(&str, &str)],
        hits: u32,
    ) -> DescriptorStatus {
        let r = self.ask(domain, vec![descriptor(entries)], hits).await;
        assert_eq!(r.statuses.len(), 1);
        r.statuses[0].clone()
    }

    /// What a descriptor has left, taking nothing (hits_addend 0).
    pub(super) async fn left(&mut self, domain: &str, entries: &[(&str, &str)]) -> u32 {
        let r = self
            .ask(domain, vec![with_hits(descriptor(entries), 0)], 0)
            .await;
        r.statuses[0].limit_remaining
    }
}

pub(super) fn limit_of(s: &DescriptorStatus) -> Option<(u32, i32)> {
    s.current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, l.unit))
}

/// Runs `f` from the start of a fresh second until one run stays within that second (so
/// per-second windows hold still), at most 5 runs. Returns that run's result.
async fn in_one_second<T>(mut f: impl AsyncFnMut(u32) -> T) -> T {
    for attempt in 0..5 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        tokio::time::sleep(Duration::from_nanos(
            1_000_000_000 - u64::from(now.subsec_nanos()) + 5_000_000,
        ))
        .await;
        let second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let out = f(attempt).await;
        if SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            == second
        {
            return out;
        }
    }
    panic!("no run fitted in one second");
}

fn write_examples(dir: &Path) -> PathBuf {
    let conf = dir.join("conf");
    let _ = std::fs::remove_dir_all(&conf);
    std::fs::create_dir_all(&conf).unwrap();
    for (name, text) in EXAMPLES {
        std::fs::write(conf.join(name), text).unwrap();
    }
    // Not YAML: skipped.
    std::fs::write(conf.join("README.txt"), "not a configuration").unwrap();
    conf
}

pub(super) async fn metrics(rls: &Rls) -> String {
    rls.gw.get("/metrics", &[]).await.unwrap().2
}

#[tokio::test]
async fn the_readme_examples_answer_as_the_readme_says() {
    let server = Server::start();
    let dir = std::env::temp_dir().join(format!("rl-rls-examples-{}", server.port));
    let conf = write_examples(&dir);
    let mut rls = start(&server, &conf, &[]).await;

    // Example 1: 500 per second for each database value.
    let (users, default) = in_one_second(async |_| {
        let a = rls.one("mongo_cps", &[("database", "users")], 500).await;
        let b = rls.one("mongo_cps", &[("database", "users")], 1).await;
        let c = rls.one("mongo_cps", &[("database", "default")], 1).await;
        ((a, b), c)
    })
    .await;
    assert_eq!((users.0.code, users.0.limit_remaining), (OK, 0));
    assert_eq!(limit_of(&users.0), Some((500, 1)));
    assert_eq!(users.1.code, OVER);
    assert_eq!((default.code, default.limit_remaining), (OK, 499));

    // Example 2: 5 marketing messages a day per number, 100 messages a day per number; the
    // aggregate is the OR of both.
    let marketing = |n: &str| {
        vec![
            descriptor(&[("message_type", "marketing"), ("to_number", n)]),
            descriptor(&[("to_number", n)]),
        ]
    };
    for i in 0..5 {
        let r = rls.ask("messaging", marketing("2061111111"), 0).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses[0].limit_remaining, 4 - i);
        assert_eq!(r.statuses[1].limit_remaining, 99 - i);
        assert_eq!(limit_of(&r.statuses[0]), Some((5, 4)));
        assert_eq!(limit_of(&r.statuses[1]), Some((100, 4)));
    }
    let r = rls.ask("messaging", marketing("2061111111"), 0).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OVER, OK));
    // Refused as a whole: the per-number counter was not charged for it.
    assert_eq!(
        rls.left("messaging", &[("to_number", "2061111111")]).await,
        95
    );
    let r = rls.ask("messaging", marketing("2062222222"), 0).await;
    assert_eq!(r.overall_code, OK, "another number has its own limits");

    // Example 3: 10 per second per address; 50.0.0.5 gets nothing.
    let (ten, eleventh) = in_one_second(async |_| {
        let a = rls
            .one("edge_proxy_per_ip", &[("remote_address", "50.0.0.1")], 10)
            .await;
        let b = rls
            .one("edge_proxy_per_ip", &[("remote_address", "50.0.0.1")], 1)
            .await;
        (a, b)
    })
    .await;
    assert_eq!((ten.code, eleventh.code), (OK, OVER));
    let black = rls
        .one("edge_proxy_per_ip", &[("remote_address", "50.0.0.5")], 0)
        .await;
    assert_eq!(black.code, OVER);
    assert_eq!(limit_of(&black), Some((0, 1)));

    // Example 4: a two-entry descriptor does not match a one-level rule.
    let s = rls
        .one("example4", &[("key", "value"), ("subkey", "subvalue")], 0)
        .await;
    assert_eq!((s.code, s.current_limit.is_none()), (OK, true));

    // Example 5: unlimited answers OK with the most remaining; azure 100 a minute.
    let s = rls.one("internal", &[("ldap", "x")], 1_000).await;
    assert_eq!((s.code, s.limit_remaining), (OK, u32::MAX));
    let s = rls.one("internal", &[("azure", "x")], 0).await;
    assert_eq!((s.code, limit_of(&s)), (OK, Some((100, 2))));

    // Example 6: user-a is in shadow mode (never limited, counted), user-b 20 per second.
    let (a, b) = in_one_second(async |_| {
        let a = rls
            .one(
                "example6",
                &[("service", "auth-service"), ("user", "user-a")],
                11,
            )
            .await;
        let b1 = rls
            .one(
                "example6",
                &[("service", "auth-service"), ("user", "user-b")],
                20,
            )
            .await;
        let b2 = rls
            .one(
                "example6",
                &[("service", "auth-service"), ("user", "user-b")],
                1,
            )
            .await;
        (a, (b1.code, b2.code))
    })
    .await;
    assert_eq!(a.code, OK, "shadow mode answers OK over its limit");
    assert_eq!(b, (OK, OVER));

    // Example 7: 5/s and 10/s alone; together only the replacing 10/s applies, and the
    // replaced rule's counter is not touched.
    let one = || descriptor(&[("key_1", "value_1"), ("user", "bkthomps")]);
    let two = || descriptor(&[("key_2", "value_2"), ("user", "bkthomps")]);
    let (alone1, alone2, both, after) = in_one_second(async |_| {
        let a = rls.ask("example7", vec![with_hits(one(), 0)], 0).await;
        let b = rls.ask("example7", vec![with_hits(two(), 0)], 0).await;
        let both = rls.ask("example7", vec![one(), two()], 10).await;
        let after = rls.ask("example7", vec![with_hits(one(), 0)], 0).await;
        (a, b, both, after)
    })
    .await;
    assert_eq!(limit_of(&alone1.statuses[0]), Some((5, 1)));
    assert_eq!(limit_of(&alone2.statuses[0]), Some((10, 1)));
    assert_eq!(both.overall_code, OK, "10 hits fit the replacing 10/s rule");
    assert_eq!(both.statuses[0].current_limit, None, "replaced");
    assert_eq!(limit_of(&both.statuses[1]), Some((10, 1)));
    assert_eq!(
        after.statuses[0].limit_remaining, 5,
        "the 5/s counter untouched"
    );

    // Example 8: 10 a minute per unlisted value, 20 for value1; metrics per value.
    for v in ["unspecified_value", "unspecified_value2"] {
        let s = rls.one("example8", &[("key1", v)], 10).await;
        assert_eq!((s.code, limit_of(&s)), (OK, Some((10, 2))));
        assert_eq!(rls.one("example8", &[("key1", v)], 1).await.code, OVER);
    }
    let s = rls.one("example8", &[("key1", "value1")], 20).await;
    assert_eq!((s.code, limit_of(&s)), (OK, Some((20, 2))));

    // Example 9 (trailing wildcard): each matching value its own 20 a minute.
    for v in ["value1", "value2", "valueXYZ"] {
        let s = rls.one("example9", &[("key1", v)], 20).await;
        assert_eq!((s.code, limit_of(&s)), (OK, Some((20, 2))), "{v}");
    }
    assert_eq!(
        rls.one("example9", &[("key1", "value1")], 1).await.code,
        OVER
    );
    assert_eq!(
        rls.one("example9", &[("key1", "other")], 0)
            .await
            .current_limit,
        None
    );

    // Example 10: metric keys with the runtime values.
    rls.one(
        "example10",
        &[
            ("route", "api"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ],
        1,
    )
    .await;
    rls.one(
        "example10",
        &[
            ("route", "web"),
            ("http_method", "POST"),
            ("subject_id", "456"),
        ],
        1,
    )
    .await;
    rls.one(
        "example10_wildcard",
        &[
            ("user", "alice"),
            ("action", "readfile"),
            ("resource", "documents"),
        ],
        1,
    )
    .await;

    // Example 11: files/* share one threshold; files_no_share/* do not.
    for (v, n) in [("files/a.pdf", 5), ("files/b.csv", 5)] {
        assert_eq!(rls.one("example11", &[("files", v)], n).await.code, OK);
    }
    assert_eq!(
        rls.one("example11", &[("files", "files/c.txt")], 1)
            .await
            .code,
        OVER
    );
    let no_share = "files_no_share";
    assert_eq!(
        rls.one("example11", &[(no_share, "files_no_share/a.pdf")], 10)
            .await
            .code,
        OK
    );
    assert_eq!(
        rls.one("example11", &[(no_share, "files_no_share/a.pdf")], 1)
            .await
            .code,
        OVER
    );
    assert_eq!(
        rls.one("example11", &[(no_share, "files_no_share/b.csv")], 1)
            .await
            .code,
        OK
    );

    let m = metrics(&rls).await;
    for line in [
        "ratelimit_service_rate_limit_total_hits{domain=\"example8\",key=\"example8.key1_unspecified_value\"} 11",
        "ratelimit_service_rate_limit_total_hits{domain=\"example8\",key=\"example8.key1_unspecified_value2\"} 11",
        "ratelimit_service_rate_limit_total_hits{domain=\"example8\",key=\"example8.key1_value1\"} 20",
        "ratelimit_service_rate_limit_over_limit{domain=\"example8\",key=\"example8.key1_unspecified_value\"} 1",
        "ratelimit_service_rate_limit_total_hits{domain=\"example10\",key=\"example10.route_api.http_method_GET.subject_id\"} 1",
        "ratelimit_service_rate_limit_total_hits{domain=\"example10\",key=\"example10.route_web.http_method_POST.subject_id\"} 1",
        "ratelimit_service_rate_limit_total_hits{domain=\"example10_wildcard\",key=\"example10_wildcard.user_alice.action_readfile.resource\"} 1",
        "ratelimit_service_rate_limit_shadow_mode{domain=\"example6\",key=\"example6.service.user_user-a\"} 11",
        "ratelimit_service_rate_limit_total_hits{domain=\"example9\",key=\"example9.key1_value*\"} 61",
    ] {
        assert!(m.contains(line), "/metrics lacks {line}");
    }
    assert!(
        !m.contains("key=\"example9.key1_value1\""),
        "values only where asked"
    );
    assert!(!m.contains("files/a.pdf"), "values only where asked");

    // Reload: Example 4's nested variant and Example 9's middle wildcard.
    std::fs::write(conf.join("4.yaml"), EXAMPLE4_NESTED).unwrap();
    std::fs::write(conf.join("9.yaml"), EXAMPLE9_MIDDLE).unwrap();
    rls.gw.hangup();
    let sub = [("key", "value"), ("subkey", "subvalue")];
    eventually("the reloaded example 4 applies", async || {
        rls.one("example4", &sub, 0).await.current_limit.is_some()
    })
    .await;
    assert_eq!(
        limit_of(&rls.one("example4", &sub, 0).await),
        Some((300, 1))
    );
    let s = rls.one("example9", &[("path", "/api/123/action")], 0).await;
    assert_eq!(limit_of(&s), Some((20, 2)));
    let s = rls
        .one("example9", &[("path", "/api/user-id/action")], 0)
        .await;
    assert_eq!(limit_of(&s), Some((20, 2)));
    assert_eq!(
        rls.one("example9", &[("path", "/api/123/other")], 0)
            .await
            .current_limit,
        None
    );

    std::fs::write(conf.join("9.yaml"), EXAMPLE9_MULTIPLE).unwrap();
    rls.gw.hangup();
    let route = [("route", "/api/v1/resource/123/action")];
    eventually("the reloaded example 9 applies", async || {
        rls.one("example9", &route, 0).await.current_limit.is_some()
    })
    .await;
    let s = rls
        .one("example9", &[("route", "/api/v2/resource/456/action")], 0)
        .await;
    assert_eq!(limit_of(&s), Some((20, 2)));
    assert_eq!(
        rls.one("example9", &[("route", "/api/v2/other/456/action")], 0)
            .await
            .current_limit,
        None
    );

    // A bad file is refused; the running configuration stays.
    std::fs::write(conf.join("bad.yaml"), "domain: example4\n").unwrap();
    rls.gw.hangup();
    eventually("the refused reload is counted", async || {
        metrics(&rls)
            .await
            .contains("rl_rls_config_reloads_total{result=\"error\"} 1")
    })
    .await;
    assert!(rls.one("example9", &route, 0).await.current_limit.is_some());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = rls.port;
}

#[tokio::test]
async fn one_decision_across_descriptors_hits_addend_headers_and_health() {
    let server = Server::start();
    let dir = std::env::temp_dir().join(format!("rl-rls-atomic-{}", server.port));
    let conf = write_examples(&dir);
    let mut rls = start(&server, &conf, &["--rls-response-headers"]).await;
    let small = || descriptor(&[("small", "s")]);
    let big = || descriptor(&[("big", "b")]);

    // Same cost: one RL.ALL. small allows 2 an hour, big 10.
    for _ in 0..2 {
        assert_eq!(
            rls.ask("own", vec![small(), big()], 0).await.overall_code,
            OK
        );
    }
    let r = rls.ask("own", vec![small(), big()], 0).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OVER, OK));
    assert_eq!(
        rls.left("own", &[("big", "b")]).await,
        8,
        "nothing taken from big"
    );
    let h: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let get = |k: &str| h.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("X-RateLimit-Limit").as_deref(), Some("2"));
    assert_eq!(get("X-RateLimit-Remaining").as_deref(), Some("0"));
    assert_eq!(
        get("RateLimit-Policy").as_deref(),
        Some("\"own.small\";q=2;w=3600, \"own.big\";q=10;w=3600")
    );
    assert!(get("RateLimit")
        .unwrap()
        .starts_with("\"own.small\";r=0;t="));

    // Different costs per descriptor: big costs 1, sliding 4 (over its 3): nothing taken.
    let r = rls
        .ask(
            "own",
            vec![
                with_hits(big(), 1),
                with_hits(descriptor(&[("sliding", "x")]), 4),
            ],
            0,
        )
        .await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OK, OVER));
    assert_eq!(
        rls.left("own", &[("big", "b")]).await,
        8,
        "nothing taken from big"
    );
    // Both fit: both taken, each its own cost (the request's hits_addend is overridden).
    let r = rls
        .ask(
            "own",
            vec![
                with_hits(big(), 2),
                with_hits(descriptor(&[("sliding", "x")]), 3),
            ],
            7,
        )
        .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses[0].limit_remaining, 6);
    assert_eq!(r.statuses[1].limit_remaining, 0);
    // The request's hits_addend applies to descriptors without their own.
    let r = rls.ask("own", vec![big()], 6).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));

    // A limit override in the request: its own counter and numbers.
    let mut d = descriptor(&[("tenant", "t1")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 3,
        unit: 3,
    });
    let r = rls.ask("own", vec![d.clone()], 3).await;
    assert_eq!(
        (r.overall_code, limit_of(&r.statuses[0])),
        (OK, Some((3, 3)))
    );
    assert_eq!(rls.ask("own", vec![d], 0).await.overall_code, OVER);
    // A domain the configuration does not define limits nothing, not even by the
    // request's own override (as envoyproxy/ratelimit answers).
    let mut d = descriptor(&[("tenant", "t1")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 0,
        unit: 3,
    });
    let r = rls.ask("no_such_domain", vec![d], 1).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK));
    assert_eq!(r.statuses[0].current_limit, None);

    // An empty domain is an error (Envoy then applies its failure_mode_deny).
    let err = rls
        .client
        .should_rate_limit(RateLimitRequest {
            domain: String::new(),
            descriptors: vec![big()],
            hits_addend: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(err.message(), "rate limit domain must not be empty");

    // grpc.health.v1.
    let channel = Channel::from_shared(format!("http://127.0.0.1:{}", rls.port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let r = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "envoy.service.ratelimit.v3.RateLimitService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, 1, "SERVING");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A configuration that does not load stops the start, and `--check-config` (offline)
/// refuses it the same way: file, line and column of the entry, then the reason.
#[tokio::test]
async fn a_refused_configuration_stops_the_start_naming_file_line_and_entry() {
    let dir = std::env::temp_dir().join(format!("rl-rls-refused-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
            "5:13: 'd.k': invalid rate limit unit 'fortnight'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n",
            "4:5: config error, unknown key 'ratelimit'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day}\n",
            "4:41: 'd.k': should not specify rate limit unit when unlimited",
        ),
        (
            "descriptors: []\n",
            "1:1: config file cannot have empty domain",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n   value: v\n",
            "4:4: error loading config file: did not find expected '-' indicator",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let file = dir.join(format!("c{i}.yaml"));
        std::fs::write(&file, text).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--rls-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--rls-config", file.to_str().unwrap(), "--log", "error"])
            .args(["--redis", "redis://127.0.0.1:1/"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        let want = format!("--rls-config: {}:{expected}", file.display());
        assert!(err.contains(&want), "{err}\nwant: {want}");

        let out = super::check_config(&file);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!("rl-gateway: {}:{expected}", file.display());
        assert!(err.starts_with(&want), "{err}\nwant: {want}");
    }
    // A directory of good files: ok, and the rules.
    let good = dir.join("good");
    std::fs::create_dir_all(&good).unwrap();
    std::fs::write(good.join("a.yaml"), EXAMPLES[2].1).unwrap();
    std::fs::write(good.join("b.yaml"), EXAMPLES[6].1).unwrap();
    let out = super::check_config(&good);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with(&format!("{}: ok (2 files, 2 domains)", good.display())),
        "{text}"
    );
    for line in [
        "domain edge_proxy_per_ip",
        "  edge_proxy_per_ip.remote_address: 10 per second (fixed_window)",
        "  edge_proxy_per_ip.remote_address_50.0.0.5: 0 per second (fixed_window)",
        "  example7.key_2_value_2.user_bkthomps: 10 per second (fixed_window), replaces specific_limit",
    ] {
        assert!(text.lines().any(|l| l == line), "{text}\nlacks {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG` (its test/config merge_domain_key*.yaml):
/// with `--rls-merge-domains` the files of one domain add up; the same descriptor twice is
/// still refused; without the flag the second file of a domain is.
#[tokio::test]
async fn files_of_one_domain_merge_with_the_option() {
    let server = Server::start();
    let dir = std::env::temp_dir().join(format!("rl-rls-merge-{}", server.port));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = |key: &str, value: &str, n: u32| {
        format!("domain: test-domain\ndescriptors:\n  - key: {key}\n    value: {value}\n    rate_limit:\n      unit: minute\n      requests_per_unit: {n}\n")
    };
    std::fs::write(dir.join("key1.yaml"), file("key1", "value1", 10)).unwrap();
    std::fs::write(dir.join("key2.yaml"), file("key2", "value2", 20)).unwrap();
    let mut rls = start(&server, &dir, &["--rls-merge-domains"]).await;
    let s = rls.one("test-domain", &[("key1", "value1")], 0).await;
    assert_eq!(limit_of(&s), Some((10, 2)));
    let s = rls.one("test-domain", &[("key2", "value2")], 0).await;
    assert_eq!(limit_of(&s), Some((20, 2)));
    drop(rls);

    let refused = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rl-gateway"))
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--rls-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--rls-config", dir.to_str().unwrap(), "--log", "error"])
            .args(["--redis", "redis://127.0.0.1:1/"])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(&[]);
    assert!(
        err.contains("key2.yaml:1:9: duplicate domain 'test-domain' in config file"),
        "{err}"
    );
    std::fs::write(dir.join("key3.yaml"), file("key1", "value1", 30)).unwrap();
    let err = refused(&["--rls-merge-domains"]);
    assert!(
        err.contains("key3.yaml:3:5: duplicate descriptor composite key 'test-domain.key1_value1'"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// gRPC server reflection (what grpcurl asks): the services, and the service's protos from
/// gateway/proto with the method's request and response types.
#[tokio::test]
async fn reflection_lists_the_services_and_describes_should_rate_limit() {
    use prost::Message;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let server = Server::start();
    let dir = std::env::temp_dir().join(format!("rl-rls-reflection-{}", server.port));
    let conf = write_examples(&dir);
    let rls = start(&server, &conf, &[]).await;
    let channel = Channel::from_shared(format!("http://127.0.0.1:{}", rls.port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = ServerReflectionClient::new(channel);
    let ask = |r: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(r),
    };
    let requests = vec![
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            "envoy.service.ratelimit.v3.RateLimitService".into(),
        )),
    ];
    let mut answers = client
        .server_reflection_info(tonic::codegen::tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("no service list");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for name in [
        "envoy.service.ratelimit.v3.RateLimitService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(names.iter().any(|n| n == name), "{names:?} lacks {name}");
    }
    let Some(MessageResponse::FileDescriptorResponse(files)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("no file descriptors");
    };
    let files: Vec<prost_types::FileDescriptorProto> = files
        .file_descriptor_proto
        .iter()
        .map(|b| prost_types::FileDescriptorProto::decode(b.as_slice()).unwrap())
        .collect();
    let rls_file = files
        .iter()
        .find(|f| f.name() == "envoy/service/ratelimit/v3/rls.proto")
        .expect("rls.proto");
    let method = &rls_file.service[0].method[0];
    assert_eq!(method.name(), "ShouldRateLimit");
    assert_eq!(
        method.input_type(),
        ".envoy.service.ratelimit.v3.RateLimitRequest"
    );
    assert_eq!(
        method.output_type(),
        ".envoy.service.ratelimit.v3.RateLimitResponse"
    );
    // Its imports are served by name (grpcurl asks for each to build requests).
    let deps: Vec<_> = rls_file
        .dependency
        .iter()
        .map(|d| ask(MessageRequest::FileByFilename(d.clone())))
        .collect();
    assert_eq!(deps.len(), 5, "{:?}", rls_file.dependency);
    let mut answers = client
        .server_reflection_info(tonic::codegen::tokio_stream::iter(deps))
        .await
        .unwrap()
        .into_inner();
    for dep in &rls_file.dependency {
        let answer = answers.message().await.unwrap().unwrap().message_response;
        let Some(MessageResponse::FileDescriptorResponse(files)) = answer else {
            panic!("{dep}: {answer:?}");
        };
        let file =
            prost_types::FileDescriptorProto::decode(files.file_descriptor_proto[0].as_slice())
                .unwrap();
        assert_eq!(file.name(), dep);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A request refused by a layer in process (the deny cache, a lease) still reports each
/// descriptor's own counter, as envoyproxy/ratelimit does: not a fresh one (the whole limit
/// left, reset 0).
#[tokio::test]
async fn each_descriptor_reports_its_own_counter_when_a_layer_refuses_locally() {
    let server = Server::start();
    let dir = std::env::temp_dir().join(format!("rl-rls-exact-{}", server.port));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("exact.yaml");
    std::fs::write(
        &conf,
        "domain: exact\ndescriptors:\n  - key: small\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: big\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: fast\n    rate_limit: {unit: second, requests_per_unit: 1000}\n",
    )
    .unwrap();
    let reset_ms = |s: &DescriptorStatus| {
        s.duration_until_reset
            .as_ref()
            .map_or(0, |d| d.seconds * 1000 + i64::from(d.nanos) / 1_000_000)
    };
    // The default deny cache; then leases (fast: 1000/s, hot from 100/s).
    for (run, extra, other) in [
        ("deny cache", &[][..], "big"),
        ("leases", &["--rls-hot-rate", "100"][..], "fast"),
    ] {
        let mut rls = start(&server, &conf, extra).await;
        let value = format!("{}-{run}", server.port);
        let small = || descriptor(&[("small", &value)]);
        let other_d = || descriptor(&[(other, &value)]);
        for _ in 0..2 {
            let r = rls.ask("exact", vec![small(), other_d()], 0).await;
            assert_eq!(r.overall_code, OK, "{run}");
        }
        // Refused by Redis (and remembered by the deny cache), then by the deny cache.
        for attempt in 0..2 {
            let r = rls.ask("exact", vec![small(), other_d()], 0).await;
            assert_eq!(r.overall_code, OVER, "{run} {attempt}");
            let (s, o) = (&r.statuses[0], &r.statuses[1]);
            assert_eq!((s.code, s.limit_remaining), (OVER, 0), "{run} {attempt}");
            assert!(reset_ms(s) > 0, "{run} {attempt}: {s:?}");
            assert_eq!(o.code, OK, "{run} {attempt}");
            let limit = o.current_limit.as_ref().unwrap().requests_per_unit;
            assert!(
                o.limit_remaining <= limit - 2,
                "{run} {attempt}: {other} reports its own counter, not a fresh one: {o:?}"
            );
            assert!(reset_ms(o) > 0, "{run} {attempt}: {o:?}");
        }
        // The refusals were recorded as the proxy's are: the refused descriptor's counter
        // among the top offenders, under its domain (the other descriptor, not refusing,
        // is not there); the counter's name escapes the value's space, as every key part.
        let escaped = value.replace(' ', "%20");
        let subject = format!("rl:rls:exact:small={escaped}");
        let refused = |top: &serde_json::Value, key: &str| {
            top["top"]["rls:exact"]
                .as_array()
                .and_then(|keys| keys.iter().find(|k| k["key"] == key))
                .map(|k| k["refused"].clone())
        };
        let mut top = serde_json::Value::Null;
        eventually("the refusals in /top", async || {
            top = serde_json::from_str(&rls.gw.ops("/top").await.unwrap().2).unwrap();
            refused(&top, &subject) == Some(2.into())
        })
        .await;
        assert_eq!(refused(&top, &subject), Some(2.into()), "{run}: {top}");
        let not_refusing = format!("rl:rls:exact:{other}={escaped}");
        assert_eq!(refused(&top, &not_refusing), None, "{run}: {top}");
        drop(rls);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
