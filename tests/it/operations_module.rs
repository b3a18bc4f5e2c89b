//! The module as an operator sees it: `MODULE UNLOAD` / `MODULE LOAD` at run time, the
//! command flags in `COMMAND INFO` (which decide how replicas, `maxmemory` and ACLs treat each
//! command), and ACL key patterns applied to every RL.* command, RL.ALL's keys included.

use redis::Value;
use redis_rl_testkit::ops::*;
use redis_rl_testkit::*;

const SLOW: &str = "1000000000";

fn text(v: &Value) -> String {
    match v {
        Value::SimpleString(s) => s.clone(),
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

/// `COMMAND INFO name`: (flags, first key, last key, step, ACL categories).
fn command_info(
    c: &mut redis::Connection,
    name: &str,
) -> (Vec<String>, i64, i64, i64, Vec<String>) {
    let info: Vec<Value> = query(c, &["COMMAND", "INFO", name]);
    let Some(Value::Array(fields)) = info.first() else {
        panic!("{name}: no COMMAND INFO: {info:?}");
    };
    let list = |v: &Value| match v {
        Value::Array(items) | Value::Set(items) => items.iter().map(text).collect(),
        other => panic!("{name}: not a list: {other:?}"),
    };
    let int = |v: &Value| match v {
        Value::Int(i) => *i,
        other => panic!("{name}: not an integer: {other:?}"),
    };
    (
        list(&fields[2]),
        int(&fields[3]),
        int(&fields[4]),
        int(&fields[5]),
        list(&fields[6]),
    )
}

/// The flags each command must carry and must not carry.
fn expected_flags(name: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match name {
        // Read-only: runs on replicas and under OOM, never writes.
        "RL.STATE" => (&["readonly", "fast"], &["write", "denyoom"]),
        // Only deletes, so it stays usable when memory is full (like DEL).
        "RL.RESET" => (&["write", "fast"], &["readonly", "denyoom"]),
        "RL.ALL" => (&["write", "denyoom", "fast", "movablekeys"], &["readonly"]),
        _ => (&["write", "denyoom", "fast"], &["readonly", "movablekeys"]),
    }
}

#[test]
fn command_info_flags_match_what_each_command_does() {
    let server = Server::start();
    let mut c = server.client();
    let commands = available(&mut c);
    for name in &commands {
        let (flags, first, last, step, _) = command_info(&mut c, name);
        let (required, forbidden) = expected_flags(name);
        for flag in required {
            assert!(
                flags.iter().any(|f| f == flag),
                "{name} lacks {flag}: {flags:?}"
            );
        }
        for flag in forbidden {
            assert!(
                !flags.iter().any(|f| f == flag),
                "{name} has {flag}: {flags:?}"
            );
        }
        let keys = if *name == "RL.ALL" {
            (0, 0, 0)
        } else {
            (1, 1, 1)
        };
        assert_eq!((first, last, step), keys, "{name} key positions");
    }
    println!("flags checked for {commands:?}");
}

/// The names in `MODULE LIST` (Valkey lists its built-in `lua` too).
fn module_names(c: &mut redis::Connection) -> Vec<String> {
    let modules: Vec<Value> = query(c, &["MODULE", "LIST"]);
    modules
        .iter()
        .filter_map(|m| match m {
            Value::Array(fields) => fields
                .chunks(2)
                .find(|pair| text(&pair[0]) == "name")
                .map(|pair| text(&pair[1])),
            Value::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| text(k) == "name")
                .map(|(_, v)| text(v)),
            _ => None,
        })
        .collect()
}

#[test]
fn module_unload_and_load_again_keep_the_limiters() {
    let refused = Server::start();
    let mut c = refused.client();
    assert!(
        error(&mut c, &["MODULE", "UNLOAD", "rl"]).starts_with("ERR MODULE command not allowed")
    );
    ints(&mut c, &["RL.TOKENBUCKET", "k", "10", "10", SLOW]);

    let server = Server::start_with(&["--enable-module-command", "yes"]);
    let mut c = server.client();
    let module = module_path();
    let module = module.to_str().expect("module path");
    assert_eq!(
        ints(&mut c, &["RL.TOKENBUCKET", "k", "10", "10", SLOW])[2],
        9
    );
    for round in 1..=2 {
        let stored = frozen(&mut c, "k");
        query::<()>(&mut c, &["MODULE", "UNLOAD", "rl"]);
        assert!(!module_names(&mut c).contains(&"rl".to_string()));
        assert!(error(&mut c, &["RL.TOKENBUCKET", "k", "10", "10", SLOW])
            .starts_with("ERR unknown command"));
        // The limiter is a plain string: it stays, untouched, while the module is away.
        assert_eq!(frozen(&mut c, "k"), stored);

        query::<()>(&mut c, &["MODULE", "LOAD", module]);
        assert_eq!(available(&mut c), available(&mut refused.client()));
        let remaining = ints(&mut c, &["RL.TOKENBUCKET", "k", "10", "10", SLOW])[2];
        assert_eq!(remaining, 9 - round, "the bucket continues where it was");
    }
}

/// A connection authenticated as a new user with the given ACL rules.
fn user(server: &Server, name: &str, rules: &[&str]) -> redis::Connection {
    let mut admin = server.client();
    let mut args = vec!["ACL", "SETUSER", name, "on", "nopass"];
    args.extend(rules);
    query::<()>(&mut admin, &args);
    let mut c = server.client();
    query::<()>(&mut c, &["AUTH", name, "any"]);
    c
}

/// One call per command the build has, on `key` (RL.ALL on `key` alone).
fn calls_on(mix: &Mix, key: &str) -> Vec<Vec<String>> {
    let mut calls: Vec<Vec<String>> = mix
        .kinds
        .iter()
        .map(|&kind| {
            let mut call = mix.first_call(kind, 0);
            call[1] = key.to_string();
            call
        })
        .collect();
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    if mix.includes("RL.CONCURRENCY") {
        calls.push(words(&["RL.CONCURRENCY", key, "RELEASE", "first"]));
    }
    if mix.includes("RL.ALL") {
        calls.push(words(&["RL.ALL", "1", key, "SLIDING", "10", "1000"]));
    }
    if mix.includes("RL.REFUND") {
        let refund = ["RL.REFUND", key, "SLIDING", "10", "1000", "COST", "1"];
        calls.push(words(&refund));
    }
    for name in ["RL.RESET", "RL.STATE"] {
        if mix.includes(name) {
            calls.push(words(&[name, key]));
        }
    }
    calls
}

#[test]
fn acl_key_patterns_apply_to_every_command_and_to_each_key_of_rl_all() {
    let server = Server::start();
    let mut admin = server.client();
    let mix = Mix::new(available(&mut admin), 1, false);
    let mut api = user(&server, "api", &["~api:*", "+@all"]);

    assert_eq!(
        ints(&mut api, &["RL.TOKENBUCKET", "api:x", "10", "10", SLOW])[0],
        1
    );
    for (i, call) in calls_on(&mix, "other:x").iter().enumerate() {
        let words: Vec<&str> = call.iter().map(String::as_str).collect();
        assert!(error(&mut api, &words).starts_with("NOPERM"), "{words:?}");
        // Allowed on its own pattern (a fresh key each, so no call depends on another).
        let key = format!("api:{i}");
        let allowed: Vec<&str> = words
            .iter()
            .map(|&w| if w == "other:x" { key.as_str() } else { w })
            .collect();
        query::<Value>(&mut api, &allowed);
    }
    assert_eq!(query::<i64>(&mut admin, &["EXISTS", "other:x"]), 0);

    if mix.includes("RL.ALL") {
        let both = |second: &'static str| {
            vec![
                "RL.ALL", "2", "api:a", second, "SLIDING", "10", "1000", "SLIDING", "10", "1000",
            ]
        };
        assert!(error(&mut api, &both("other:b")).starts_with("NOPERM"));
        assert_eq!(query::<i64>(&mut admin, &["EXISTS", "api:a", "other:b"]), 0);
        let reply: Vec<Value> = query(&mut api, &both("api:b"));
        assert_eq!(reply[0], Value::Int(1));
    }
}

/// RL.STATE only reads, so read-only key access (`%R~`) should be enough, and a limiting
/// call should need write access.
#[test]
fn read_only_key_access_allows_rl_state_only() {
    let server = Server::start();
    let mut admin = server.client();
    if !available(&mut admin).contains(&"RL.STATE") {
        return;
    }
    ints(&mut admin, &["RL.TOKENBUCKET", "api:x", "10", "10", SLOW]);
    let mut reader = user(&server, "reader", &["%R~api:*", "+@all"]);
    let state: Value = query(&mut reader, &["RL.STATE", "api:x"]);
    assert_ne!(state, Value::Nil);
    assert!(
        error(&mut reader, &["RL.TOKENBUCKET", "api:x", "10", "10", SLOW]).starts_with("NOPERM")
    );
}

/// ACL categories follow the flags on servers that let modules set them (Redis 7.2+,
/// Valkey): a user with `-@write` cannot change limiters, `+@read` can call RL.STATE.
#[test]
fn acl_categories_follow_the_flags() {
    let server = Server::start();
    let mut admin = server.client();
    let version = info_field(&mut admin, "server", "redis_version").expect("redis_version");
    let numbers: Vec<u32> = version.split('.').filter_map(|n| n.parse().ok()).collect();
    if numbers < vec![7, 2] {
        println!("redis_version {version}: modules cannot set ACL categories; skipped");
        return;
    }
    let commands = available(&mut admin);
    let category = |c: &mut redis::Connection, cat: &str| -> Vec<String> {
        let names: Vec<String> = query(c, &["ACL", "CAT", cat]);
        names.into_iter().map(|n| n.to_ascii_uppercase()).collect()
    };
    let (write, read, fast) = (
        category(&mut admin, "write"),
        category(&mut admin, "read"),
        category(&mut admin, "fast"),
    );
    for name in &commands {
        let name = name.to_string();
        assert!(fast.contains(&name), "{name} not in @fast");
        assert_eq!(
            write.contains(&name),
            name != "RL.STATE",
            "{name} in @write"
        );
        assert_eq!(read.contains(&name), name == "RL.STATE", "{name} in @read");
    }
    let mut no_write = user(&server, "nowrite", &["~*", "+@all", "-@write"]);
    assert!(error(&mut no_write, &["RL.TOKENBUCKET", "k", "10", "10", SLOW]).starts_with("NOPERM"));
}

/// A field of a `COMMAND DOCS` entry (a map in RESP3, flat pairs in RESP2).
fn doc_field<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    match doc {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).eq_ignore_ascii_case(name))
            .map(|(_, v)| v),
        Value::Array(items) => items
            .chunks(2)
            .find(|pair| text(&pair[0]).eq_ignore_ascii_case(name))
            .map(|pair| &pair[1]),
        _ => None,
    }
}

/// Every command the module registers (one table generates registration and docs) answers
/// `COMMAND DOCS` with its summary and arguments, the algorithm commands with the parameter
/// names of the core registry.
#[test]
fn every_command_answers_command_docs() {
    let server = Server::start();
    let mut c = server.client();
    let listed: Vec<String> = query(&mut c, &["COMMAND", "LIST", "FILTERBY", "MODULE", "rl"]);
    let mut names: Vec<String> = listed.iter().map(|n| n.to_lowercase()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "rl.all",
            "rl.concurrency",
            "rl.fixed",
            "rl.gcra",
            "rl.log",
            "rl.quota",
            "rl.refund",
            "rl.reset",
            "rl.sliding",
            "rl.state",
            "rl.throttle",
            "rl.tokenbucket"
        ]
    );
    for name in &names {
        let docs: Value = query(&mut c, &["COMMAND", "DOCS", name]);
        let doc = doc_field(&docs, name).unwrap_or_else(|| panic!("{name}: no docs: {docs:?}"));
        let summary = doc_field(doc, "summary").map(text).unwrap_or_default();
        assert!(!summary.is_empty(), "{name}: no summary: {doc:?}");
        let Some(Value::Array(args)) = doc_field(doc, "arguments") else {
            panic!("{name}: no arguments: {doc:?}");
        };
        let arg_names: Vec<String> = args
            .iter()
            .filter_map(|a| doc_field(a, "name").map(text))
            .collect();
        assert_eq!(
            arg_names.first().map(String::as_str),
            Some(if name == "rl.all" { "numkeys" } else { "key" }),
            "{name}"
        );
        let expected: &[&str] = match name.as_str() {
            "rl.tokenbucket" => &[
                "key",
                "capacity",
                "refill_tokens",
                "refill_ms",
                "cost",
                "upto",
                "force",
                "peek",
            ],
            "rl.gcra" => &[
                "key",
                "limit",
                "period_ms",
                "burst",
                "cost",
                "upto",
                "force",
                "peek",
            ],
            "rl.sliding" | "rl.fixed" => {
                &["key", "limit", "window_ms", "cost", "upto", "force", "peek"]
            }
            "rl.log" => &["key", "limit", "window_ms", "cost", "force", "peek"],
            "rl.quota" => &[
                "key", "limit", "period", "tz", "anchor", "cost", "upto", "force", "peek",
            ],
            _ => &[],
        };
        if !expected.is_empty() {
            assert_eq!(arg_names, expected, "{name}");
        }
    }
}
