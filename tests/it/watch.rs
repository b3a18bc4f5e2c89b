//! Only a real write signals a limiter key as modified: a `WATCH` on it survives reads,
//! denials, PEEK and `COST 0`, and is broken by an allowed call.

use redis_rl_testkit::*;

/// Runs `during` on a second connection between `WATCH key` and `EXEC` on the first, and
/// tells whether the transaction went through.
fn exec_survives(server: &Server, key: &str, during: &[&str]) -> bool {
    let mut watcher = server.client();
    let mut other = server.client();
    let _: () = query(&mut watcher, &["WATCH", key]);
    let _: redis::Value = query(&mut other, during);
    let _: () = query(&mut watcher, &["MULTI"]);
    let _: () = query(&mut watcher, &["PING"]);
    let result: redis::Value = query(&mut watcher, &["EXEC"]);
    !matches!(result, redis::Value::Nil)
}

#[test]
fn watch_is_broken_by_writes_only() {
    let server = Server::start();
    let mut c = server.client();
    ints(&mut c, &["RL.TOKENBUCKET", "k", "1", "1", "3600000"]);
    let denied = ["RL.TOKENBUCKET", "k", "1", "1", "3600000"];
    assert!(exec_survives(&server, "k", &denied));
    assert!(exec_survives(
        &server,
        "k",
        &["RL.TOKENBUCKET", "k", "1", "1", "3600000", "PEEK"]
    ));
    assert!(exec_survives(&server, "k", &["RL.STATE", "k"]));
    ints(&mut c, &["RL.SLIDING", "s", "5", "3600000"]);
    assert!(exec_survives(
        &server,
        "s",
        &["RL.SLIDING", "s", "5", "3600000", "COST", "0"]
    ));
    assert!(!exec_survives(
        &server,
        "s",
        &["RL.SLIDING", "s", "5", "3600000"]
    ));
    assert!(!exec_survives(&server, "k", &["RL.RESET", "k"]));
}
