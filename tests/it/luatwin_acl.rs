//! The Lua twin under the documented ACL rules (docs/src/security.md, testkit's `TWIN_RULES`):
//! every command the twin's fast and general paths send from inside the function is one the
//! limiter's user may run. A command missing from the rules is not an outage (the fast path
//! leaves a refused call to the general path), only slower, so what this checks is the server's
//! ACL log: no refusal at all while the common calls run, on the paths that write in place.

use redis_rl_testkit::tls::{TlsServer, MINIMAL_USER};

const SCRIPT: &str = include_str!("../../lua/rl.lua");

/// `FCALL rl 1 key args...` as the minimal user; the reply must not be an error.
fn fcall(conn: &mut redis::Connection, key: &str, args: &[&str]) -> redis::Value {
    redis::cmd("FCALL")
        .arg("rl")
        .arg(1)
        .arg(key)
        .arg(args)
        .query(conn)
        .unwrap_or_else(|e| panic!("FCALL rl 1 {key} {args:?}: {e}"))
}

#[test]
fn the_minimal_users_rules_let_every_common_call_run_its_own_path() {
    let server = TlsServer::start(false, false);
    let url = format!(
        "redis://{MINIMAL_USER}:{MINIMAL_USER}@127.0.0.1:{}/",
        server.port
    );
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(SCRIPT)
        .query(&mut conn)
        .unwrap();
    // Each common call three times on its own key: the first creates it, the next ones
    // continue it on the fast path (RL.LOG's and RL.CONCURRENCY's renewal write in place).
    let calls: &[(&str, &[&str])] = &[
        ("rl:tb", &["RL.TOKENBUCKET", "100", "10", "1000"]),
        ("rl:sw", &["RL.SLIDING", "100", "60000"]),
        ("rl:fw", &["RL.FIXED", "100", "60000"]),
        ("rl:gc", &["RL.GCRA", "10", "1000", "BURST", "100"]),
        ("rl:th", &["RL.THROTTLE", "100", "10", "1", "1"]),
        ("rl:lg", &["RL.LOG", "100", "60000"]),
        (
            "rl:cc",
            &["RL.CONCURRENCY", "10", "60000", "ACQUIRE", "worker-1"],
        ),
    ];
    for (key, args) in calls {
        for _ in 0..3 {
            fcall(&mut conn, key, args);
        }
    }
    fcall(
        &mut conn,
        "rl:cc",
        &["RL.CONCURRENCY", "RELEASE", "worker-1"],
    );
    fcall(&mut conn, "rl:tb", &["RL.STATE"]);
    fcall(&mut conn, "rl:tb", &["RL.RESET"]);

    let mut admin = server.client();
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(&mut admin).unwrap();
    assert!(
        log.is_empty(),
        "the twin ran a command the documented rules refuse: {log:?}"
    );
}

/// A user the rules give no `SET`: every fast path leaves the refused write to the general
/// path, which answers the server's refusal (a permission failure, not "internal error"),
/// and nothing is written.
#[test]
fn a_refused_write_is_the_servers_noperm_and_writes_nothing() {
    use redis_rl_testkit::tls::{BASE_RULES, TWIN_RULES};
    let server = TlsServer::start(false, false);
    let mut admin = server.client();
    let mut setuser = redis::cmd("ACL");
    setuser.arg("SETUSER").arg("noset").arg("on").arg(">noset");
    setuser.arg(BASE_RULES).arg(TWIN_RULES).arg("-set");
    let _: () = setuser.query(&mut admin).unwrap();
    let url = format!("redis://noset:noset@127.0.0.1:{}/", server.port);
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(SCRIPT)
        .query(&mut conn)
        .unwrap();
    let calls: &[&[&str]] = &[
        &["RL.TOKENBUCKET", "100", "10", "1000"],
        &["RL.SLIDING", "100", "60000"],
        &["RL.FIXED", "100", "60000"],
        &["RL.GCRA", "10", "1000", "BURST", "100"],
        &["RL.THROTTLE", "100", "10", "1", "1"],
        &["RL.CONCURRENCY", "10", "60000", "ACQUIRE", "worker-1"],
    ];
    // Twice each: the first call builds the library on the general path, the second is the
    // fast path's.
    for args in calls {
        for _ in 0..2 {
            let err = redis::cmd("FCALL")
                .arg("rl")
                .arg(1)
                .arg("rl:k")
                .arg(*args)
                .query::<redis::Value>(&mut conn)
                .unwrap_err();
            // Redis 7.0 words a refusal inside a script as `ERR The user executing the
            // script can't run this command or subcommand`.
            let text = err.to_string();
            assert!(
                err.code() == Some("NOPERM") || text.contains("can't run this command"),
                "{args:?}: {err}"
            );
            assert!(!text.contains("internal error"), "{args:?}: {err}");
        }
        let exists: i64 = redis::cmd("EXISTS").arg("rl:k").query(&mut admin).unwrap();
        assert_eq!(exists, 0, "{args:?} wrote");
    }
}
