//! Forward auth (`--auth-listen`): checks as Traefik and Caddy send them, and the shipped
//! examples/nginx/nginx.conf run by Debian's real nginx in front of an upstream.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use axum::routing::get;
use axum::Router;
use redis_rl_testkit::{eventually, free_port, Server};

use super::upstream::Upstream;
use super::{get_from, Gateway};

/// The gateway with `--auth-listen` on a free port; returns it and that port.
async fn start(server: &Server, config: &Path) -> (Gateway, u16) {
    let args = [
        "--redis",
        &server.url(),
        "--config",
        config.to_str().unwrap(),
    ];
    Gateway::listening(&args, "--auth-listen").await
}

fn config(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        "dimensions = [\"ip\"]\n[ip]\nlimit = 3\n[access]\ndeny_api_keys = [\"blocked\"]\n",
    )
    .unwrap();
    path
}

#[tokio::test]
async fn traefik_and_caddy_style_checks_answer_200_429_and_403() {
    let server = Server::start();
    let dir = std::env::temp_dir().join(format!("rl-fwd-auth-{}", server.port));
    let (_gw, auth) = start(&server, &config(&dir)).await;
    let check = |client: &'static str, key: Option<&'static str>| async move {
        let mut h = vec![
            ("x-forwarded-method", "GET"),
            ("x-forwarded-uri", "/api/items/1?q=2"),
            ("x-forwarded-host", "api.example.com"),
            ("x-forwarded-for", client),
        ];
        if let Some(k) = key {
            h.push(("x-api-key", k));
        }
        get_from(auth, "/", &h).await.unwrap()
    };
    for left in ["2", "1", "0"] {
        let (status, h, _) = check("203.0.113.7", None).await;
        assert_eq!(status, 200);
        assert_eq!(h["x-ratelimit-remaining"], left);
        assert_eq!(h["ratelimit-policy"], "\"ip\";q=3;w=60");
    }
    let (status, h, body) = check("203.0.113.7", None).await;
    assert_eq!(status, 429);
    assert!(h.contains_key("retry-after"));
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert!(body.contains("\"dimension\":\"ip\""), "{body}");
    // Another client (the last X-Forwarded-For hop) has its own budget.
    assert_eq!(check("203.0.113.8", None).await.0, 200);
    // The access lists.
    assert_eq!(check("203.0.113.9", Some("blocked")).await.0, 403);
    // One dimension: each request is one call of its algorithm's own command, as the Node.js
    // and Python middlewares send it, never RL.ALL of one key.
    assert_eq!(server.calls("rl.all"), 0);
    assert_eq!(server.calls("rl.sliding"), 5, "five requests limited");
    let _ = std::fs::remove_dir_all(&dir);
}

/// nginx in the foreground, stopped on drop: SIGTERM, on which the master stops its
/// workers before it exits (a killed master would leave them running).
struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn nginx_binary() -> String {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nginx is not installed (make deps installs Debian's)")
        .to_string()
}

#[tokio::test]
async fn the_nginx_example_turns_a_limited_check_into_429_with_the_headers() {
    let server = Server::start();
    let dir = std::env::temp_dir().join(format!("rl-fwd-nginx-{}", server.port));
    let up = Upstream::plain(Router::new().route("/{*rest}", get(|| async { "up" }))).await;
    let (_gw, auth) = start(&server, &config(&dir)).await;
    let example = include_str!("../../../examples/nginx/nginx.conf");
    let mut nginx = None;
    let mut port = 0;
    for _ in 0..5 {
        port = free_port();
        let conf = example
            .replace("LISTEN_ADDR", &format!("127.0.0.1:{port}"))
            .replace("AUTH_ADDR", &format!("127.0.0.1:{auth}"))
            .replace("UPSTREAM_ADDR", &format!("127.0.0.1:{}", up.port));
        let file = dir.join("nginx.conf");
        std::fs::write(&file, conf).unwrap();
        let mut child = Nginx(
            Command::new(nginx_binary())
                .args(["-p", dir.to_str().unwrap(), "-c", file.to_str().unwrap()])
                .args(["-g", "daemon off;"])
                .stdout(Stdio::null())
                .spawn()
                .expect("start nginx"),
        );
        let mut exited = false;
        eventually("nginx answers", async || {
            exited = matches!(child.0.try_wait(), Ok(Some(_)));
            exited || get_from(port, "/", &[]).await.is_some()
        })
        .await;
        if !exited {
            nginx = Some(child);
            break;
        }
    }
    let nginx = nginx.expect("nginx did not start on any of 5 free ports");
    // The probe above was one request of the client's 3.
    let (status, h, body) = get_from(port, "/api/items/1", &[]).await.unwrap();
    assert_eq!((status, body.as_str()), (200, "up"));
    assert_eq!(h["x-ratelimit-limit"], "3");
    assert_eq!(h["x-ratelimit-remaining"], "1");
    assert_eq!(h["ratelimit"], "\"ip\";r=1;t=60");
    assert_eq!(get_from(port, "/api/items/2", &[]).await.unwrap().0, 200);
    let (status, h, body) = get_from(port, "/api/items/3", &[]).await.unwrap();
    assert_eq!(status, 429, "{body}");
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1, "{retry}");
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert_eq!(h["ratelimit-policy"], "\"ip\";q=3;w=60");
    assert_eq!(h["ratelimit"], format!("\"ip\";r=0;t={retry}").as_str());
    assert_eq!(h["content-type"], "application/problem+json");
    assert!(body.contains("\"status\":429"), "{body}");
    // The access lists: 403 through nginx as well.
    let (status, _, _) = get_from(port, "/api/items/4", &[("x-api-key", "blocked")])
        .await
        .unwrap();
    assert_eq!(status, 403);
    drop(nginx);
    let _ = std::fs::remove_dir_all(&dir);
}
