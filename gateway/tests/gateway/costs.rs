//! Requests whose limits are charged different costs, through the module and through the Lua
//! twin: the rate limit service's descriptors with their own `hits_addend`, and the proxy's
//! rules with their own `cost` headers. Each request is one atomic call (one `RL.ALL`, or one
//! `FCALL` of the twin, counted by `INFO commandstats`): a request over one limit consumes
//! nothing of the others, and nothing needs giving back (no `RL.REFUND`).

use std::collections::BTreeMap;

use redis_rl_testkit::{query, Server};

use super::rls::{descriptor, start, with_hits};
use super::upstream::Upstream;
use super::Gateway;

const OK: i32 = 1;
const OVER: i32 = 2;

/// The server and the gateway's `--engine` for one of the two ways of deciding.
fn server_for(engine: &str) -> Server {
    match engine {
        "lua" => Server::start_plain(&[]),
        _ => Server::start(),
    }
}

/// Every limiter's state (the string keys; the refusal counts of `/top` are sorted sets,
/// written on a refusal): what a refused request must leave as it was.
fn snapshot(server: &Server) -> BTreeMap<String, Vec<u8>> {
    let mut c = server.client();
    let keys: Vec<String> = query(&mut c, &["KEYS", "*"]);
    let mut out = BTreeMap::new();
    for k in keys {
        if query::<String>(&mut c, &["TYPE", &k]) == "string" {
            let v: Vec<u8> = query(&mut c, &["GET", &k]);
            out.insert(k, v);
        }
    }
    out
}

/// The calls that decide (`RL.ALL`, or `FCALL` of the twin) and the refunds, so far.
fn calls(server: &Server, engine: &str) -> (u64, u64) {
    match engine {
        "lua" => (server.calls("fcall"), 0),
        _ => (server.calls("rl.all"), server.calls("rl.refund")),
    }
}

const RLS_CONFIG: &str = "domain: costs\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";

/// The limiter keys and the decide/refund call counts before a refused request.
struct Before {
    keys: BTreeMap<String, Vec<u8>>,
    calls: (u64, u64),
}

impl Before {
    fn take(server: &Server, engine: &str) -> Self {
        Self {
            keys: snapshot(server),
            calls: calls(server, engine),
        }
    }

    /// The refused request was one decision call, gave nothing back and wrote nothing.
    fn one_call_nothing_written(&self, server: &Server, engine: &str) {
        let (decided, refunded) = calls(server, engine);
        assert_eq!(
            (decided - self.calls.0, refunded - self.calls.1),
            (1, 0),
            "{engine}: one call, nothing given back"
        );
        assert_eq!(snapshot(server), self.keys, "{engine}: nothing written");
    }
}

#[tokio::test]
async fn descriptors_of_different_hits_addend_are_one_atomic_call() {
    for engine in ["module", "lua"] {
        let server = server_for(engine);
        let dir = std::env::temp_dir().join(format!("rl-rls-costs-{}", server.port));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("costs.yaml");
        std::fs::write(&conf, RLS_CONFIG).unwrap();
        let mut rls = start(&server, &conf, &["--engine", engine, "--no-fleet"]).await;
        let a = |hits| with_hits(descriptor(&[("a", "x")]), hits);
        let b = |hits| with_hits(descriptor(&[("b", "y")]), hits);

        let r = rls.ask("costs", vec![a(2), b(1)], 0).await;
        assert_eq!(r.overall_code, OK, "{engine}");
        let left: Vec<u32> = r.statuses.iter().map(|s| s.limit_remaining).collect();
        assert_eq!(left, [8, 2], "{engine}: each its own cost");

        // b has 2 left: its 5 refuses the request, and a's 2 are not taken, in one call.
        let before = Before::take(&server, engine);
        let r = rls.ask("costs", vec![a(2), b(5)], 0).await;
        assert_eq!(r.overall_code, OVER, "{engine}");
        assert_eq!((r.statuses[0].code, r.statuses[1].code), (OK, OVER));
        assert_eq!(r.statuses[0].limit_remaining, 8, "{engine}");
        before.one_call_nothing_written(&server, engine);
        assert_eq!(rls.left("costs", &[("a", "x")]).await, 8, "{engine}");

        // The request's hits_addend for descriptors without their own: both fit, both taken.
        let r = rls
            .ask("costs", vec![a(6), descriptor(&[("b", "y")])], 2)
            .await;
        assert_eq!(r.overall_code, OK, "{engine}");
        let left: Vec<u32> = r.statuses.iter().map(|s| s.limit_remaining).collect();
        assert_eq!(left, [2, 0], "{engine}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

const RULES_CONFIG: &str = r#"
key_prefix = "cs"
dimensions = ["ip"]
hot = []
[fleet]
membership = false
[ip]
limit = 1000

[[rules]]
name = "tokens"
key = ["global"]
limits = ["1000/hour"]
algorithm = "fixed"
cost = "header:X-Tokens"

[[rules]]
name = "images"
key = ["global"]
limits = ["10/hour"]
algorithm = "fixed"
cost = "header:X-Images"
"#;

#[tokio::test]
async fn rules_of_different_costs_are_one_atomic_call() {
    for engine in ["module", "lua"] {
        let server = server_for(engine);
        let up = Upstream::plain(axum::Router::new().fallback(|| async { "up" })).await;
        let path = std::env::temp_dir().join(format!("rl-gw-costs-{}.toml", server.port));
        std::fs::write(&path, RULES_CONFIG).unwrap();
        let gw = Gateway::configured(
            &server,
            &path,
            &["--upstream", &up.url(), "--engine", engine],
        )
        .await;
        let send = async |tokens: &str, images: &str| {
            let headers = [("x-tokens", tokens), ("x-images", images)];
            gw.get("/x", &headers).await.expect("gateway answers").0
        };
        assert_eq!(send("5", "4").await, 200, "{engine}");
        // images has 6 left: its 20 refuses the request; tokens' 7 and the ip's 1 are not
        // taken, in one call.
        let before = Before::take(&server, engine);
        assert_eq!(send("7", "20").await, 429, "{engine}");
        before.one_call_nothing_written(&server, engine);
        assert_eq!(send("7", "6").await, 200, "{engine}");
        assert_eq!(send("1", "1").await, 429, "{engine}: images used up");
        let _ = std::fs::remove_file(&path);
    }
}
