//! API-key digests in key names: keyed with the gateway's secret (`--secret-file`) or the
//! configuration's `api_key_digest_secret_file`, the unkeyed SHA-256 without either.

use redis_rl_testkit::{query, Server};

use super::{get_from, named_config, test_dir, Gateway};

/// The secret of these tests (32 bytes), and digests of "bob" computed apart
/// (Python: `hmac.new(hmac.new(secret, b"redis-rl api-key digest v1", "sha256").digest(),
/// b"bob", "sha256").hexdigest()[:16]`, and `hashlib.sha256(b"bob").hexdigest()[:16]`).
const SECRET: &str = "0123456789abcdef0123456789abcdef\n";
const KEYED_BOB: &str = "4eb40ca3aff1ae55";
const UNKEYED_BOB: &str = "81b637d8fcd2c6da";

/// Starts a forward-auth gateway with `prefix` and `extra` flags and configuration lines,
/// checks one request of the API key "bob", and answers whether `<prefix>:{k:<digest>}:key`
/// exists for the keyed and the unkeyed digest.
async fn counted_as(
    server: &Server,
    prefix: &str,
    file_line: &str,
    flags: &[&str],
) -> (bool, bool) {
    let dir = test_dir(&format!("key-digest-{prefix}"), server.port);
    let secret = dir.join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let line = file_line.replace("SECRET", secret.to_str().unwrap());
    let toml = format!("key_prefix = \"{prefix}\"\ndimensions = [\"api_key\"]\n{line}\n");
    let config = named_config(server, &format!("key-digest-{prefix}"), &toml);
    let flags: Vec<String> = flags
        .iter()
        .map(|f| f.replace("SECRET", secret.to_str().unwrap()))
        .collect();
    let mut args = vec!["--redis".to_string(), server.url(), "--config".into()];
    args.push(config.to_str().unwrap().into());
    args.extend(flags);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_gw, auth) = Gateway::listening(&args, "--auth-listen").await;
    let h = [("x-forwarded-uri", "/v1/items"), ("x-api-key", "bob")];
    let (status, _, _) = get_from(auth, "/", &h).await.unwrap();
    assert_eq!(status, 200);
    let mut c = server.client();
    let exists = |c: &mut redis::Connection, digest: &str| -> bool {
        let n: i64 = query(c, &["EXISTS", &format!("{prefix}:{{k:{digest}}}:key")]);
        n == 1
    };
    (exists(&mut c, KEYED_BOB), exists(&mut c, UNKEYED_BOB))
}

#[tokio::test]
async fn a_secret_keys_the_digest_and_none_keeps_the_old_names() {
    let server = Server::start();
    // The gateway's --secret-file keys the digest (with a key derived for that use).
    let flagged = counted_as(&server, "kdf", "", &["--secret-file", "SECRET"]).await;
    assert_eq!(flagged, (true, false), "--secret-file");
    // The configuration's own secret file gives the same names (as Python's engine does).
    let filed = counted_as(
        &server,
        "kdc",
        "api_key_digest_secret_file = \"SECRET\"",
        &[],
    )
    .await;
    assert_eq!(filed, (true, false), "api_key_digest_secret_file");
    // Without a secret, the names of every earlier release.
    let unkeyed = counted_as(&server, "kdu", "", &[]).await;
    assert_eq!(unkeyed, (false, true), "no secret");
}

#[tokio::test]
async fn a_short_secret_file_is_refused_at_load() {
    let server = Server::start();
    let dir = test_dir("key-digest-short", server.port);
    let secret = dir.join("secret");
    std::fs::write(&secret, "short\n").unwrap();
    let toml = format!(
        "api_key_digest_secret_file = \"{}\"\n",
        secret.to_str().unwrap()
    );
    let config = named_config(&server, "key-digest-short", &toml);
    let out = super::check_config(&config);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("api_key_digest_secret_file") && err.contains("5 bytes, at least 32"),
        "{err}"
    );
}
