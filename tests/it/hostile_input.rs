//! Hostile input: arbitrary argument vectors thrown at every command, arbitrary bytes stored
//! where a limiter is expected, and every attacker-controlled size at and over its maximum.
//!
//! The promise checked everywhere: the reply is a well-formed RESP reply, or an error line
//! that starts with `ERR ` or `WRONGTYPE` and is valid UTF-8 (never the module's
//! "internal error", which means a caught panic); the server still answers PING; and an
//! error changes no key (bytes and absolute expiry, as `frozen` sees them) and writes
//! nothing at all (`rdb_changes_since_last_save` does not move).
//!
//! Replies are read with a minimal RESP2 reader on a raw socket, so the exact bytes of every
//! error line are checked (a client library might replace bad UTF-8 or refuse the line).

use redis_rl_testkit::*;

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const WIDE: &str = "1000000000000";
const COUNT_MAX: &str = "1000000000000000";
const COUNT_ABOVE: &str = "1000000000000001";
const CASES: u32 = 200;

/// One RESP2 reply.
#[derive(Debug)]
enum Reply {
    Status,
    Error(Vec<u8>),
    Int,
    Bulk,
    Array,
}

/// A raw connection: commands as byte vectors, replies parsed strictly.
struct Raw {
    reader: BufReader<TcpStream>,
}

impl Raw {
    fn connect(server: &Server) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        Raw {
            reader: BufReader::new(stream),
        }
    }

    fn call(&mut self, args: &[Vec<u8>]) -> Reply {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&out).expect("send");
        self.read().expect("a well-formed reply")
    }

    fn line(&mut self) -> Result<Vec<u8>, String> {
        let mut line = Vec::new();
        self.reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("read: {e}"))?;
        if !line.ends_with(b"\r\n") {
            return Err(format!("line without CRLF: {line:?}"));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    fn read(&mut self) -> Result<Reply, String> {
        let line = self.line()?;
        let (kind, rest) = line.split_first().ok_or("empty reply line")?;
        let number = || -> Result<i64, String> {
            std::str::from_utf8(rest)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("bad number {rest:?}"))
        };
        match kind {
            b'+' => Ok(Reply::Status),
            b'-' => Ok(Reply::Error(rest.to_vec())),
            b':' => number().map(|_| Reply::Int),
            b'$' => {
                let n = number()?;
                if n >= 0 {
                    let mut body = vec![0; n as usize + 2];
                    self.reader
                        .read_exact(&mut body)
                        .map_err(|e| format!("bulk: {e}"))?;
                    if !body.ends_with(b"\r\n") {
                        return Err("bulk without CRLF".into());
                    }
                }
                Ok(Reply::Bulk)
            }
            b'*' => {
                let n = number()?;
                for _ in 0..n.max(0) {
                    self.read()?;
                }
                Ok(Reply::Array)
            }
            other => Err(format!("unknown reply type {other}")),
        }
    }
}

/// Checks one reply: any non-error reply is fine; an error must be a clean `ERR`/`WRONGTYPE`
/// line in UTF-8 that is not a caught panic. Returns whether it was an error.
fn judge(args: &[Vec<u8>], reply: &Reply) -> Result<bool, TestCaseError> {
    let Reply::Error(text) = reply else {
        return Ok(false);
    };
    let shown = String::from_utf8_lossy(text);
    prop_assert!(
        std::str::from_utf8(text).is_ok(),
        "error not UTF-8: {shown:?} for {}",
        show(args)
    );
    prop_assert!(
        text.starts_with(b"ERR ") || text.starts_with(b"WRONGTYPE"),
        "unexpected error {shown:?} for {}",
        show(args)
    );
    prop_assert!(
        !shown.contains("internal error"),
        "a caught panic: {shown:?} for {}",
        show(args)
    );
    Ok(true)
}

fn show(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| format!("{:?}", String::from_utf8_lossy(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn bytes(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// The keys that exist before the fuzzing starts: one of every algorithm (long windows, part
/// used), a plain string, a list, a missing key.
const KEYS: &[&str] = &[
    "h:tb", "h:sw", "h:fw", "h:gc", "h:log", "h:cc", "h:str", "h:list", "h:new",
];

fn create_keys(c: &mut redis::Connection) {
    for args in [
        &["RL.TOKENBUCKET", "h:tb", "10", "10", WIDE, "COST", "3"][..],
        &["RL.SLIDING", "h:sw", "10", WIDE, "COST", "3"],
        &["RL.FIXED", "h:fw", "10", WIDE, "COST", "3"],
        &["RL.GCRA", "h:gc", "10", WIDE, "COST", "3"],
        &["RL.LOG", "h:log", "10", WIDE, "COST", "3"],
        &["RL.CONCURRENCY", "h:cc", "10", WIDE, "ACQUIRE", "a"],
    ] {
        assert_eq!(ints(c, args)[0], 1, "{args:?}");
    }
    query::<()>(c, &["SET", "h:str", "plain text"]);
    query::<i64>(c, &["RPUSH", "h:list", "x"]);
}

type Frozen = Vec<(Option<Vec<u8>>, i64)>;

/// Writes since the last save: an error must not move it (no key anywhere was written,
/// including keys the fuzzer named that are not in [`KEYS`]).
fn dirty(c: &mut redis::Connection) -> i64 {
    info_field(c, "persistence", "rdb_changes_since_last_save")
        .expect("rdb_changes_since_last_save")
        .parse()
        .expect("a number")
}

fn freeze_all(c: &mut redis::Connection) -> Frozen {
    KEYS.iter().map(|k| frozen(c, k)).collect()
}

/// Puts every key back as it was in `original` (after a call that was allowed to change it).
fn restore(c: &mut redis::Connection, original: &Frozen) {
    for (key, (value, expiry)) in KEYS.iter().zip(original) {
        if frozen(c, key) == (value.clone(), *expiry) {
            continue;
        }
        query::<i64>(c, &["DEL", key]);
        if let Some(payload) = value {
            let mut cmd = redis::cmd("RESTORE");
            cmd.arg(*key);
            if *expiry > 0 {
                cmd.arg(*expiry).arg(payload).arg("REPLACE").arg("ABSTTL");
            } else {
                cmd.arg(0).arg(payload).arg("REPLACE");
            }
            cmd.query::<()>(c).expect("RESTORE");
        }
    }
}

/// Words that mean something to some command, and edge numbers.
const WORDS: &[&str] = &[
    "",
    "0",
    "1",
    "10",
    "16",
    "17",
    "10000",
    "10001",
    "-1",
    "-0",
    "+1",
    "1.5",
    "1e3",
    " 1",
    "0x10",
    WIDE,
    "1000000000001",
    COUNT_MAX,
    COUNT_ABOVE,
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "COST",
    "cost",
    "PEEK",
    "peek",
    "BURST",
    "ACQUIRE",
    "RELEASE",
    "TOKENBUCKET",
    "SLIDING",
    "FIXED",
    "GCRA",
    "LOG",
    "tokenbucket",
    "CONCURRENCY",
    "a",
    "h:tb",
    "h:sw",
    "h:fw",
    "h:gc",
    "h:log",
    "h:cc",
    "h:str",
    "h:list",
    "h:new",
    "\u{0663}",
    "é",
    "\u{1F600}",
    "\0",
];

/// One argument: a known word, a number of any size, raw bytes, unicode, or a known word with
/// a garbage tail.
fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(WORDS).prop_map(|w| w.as_bytes().to_vec()),
        2 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        1 => "[0-9]{15,45}".prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..48),
        1 => any::<String>().prop_map(String::into_bytes),
        2 => (prop::sample::select(WORDS), prop::collection::vec(any::<u8>(), 1..6))
            .prop_map(|(w, tail)| [w.as_bytes(), &tail].concat()),
    ]
}

/// A valid call of each command on a key that exists (`@` is replaced by a key).
fn templates(name: &str) -> Vec<Vec<&'static str>> {
    let t: &[&[&'static str]] = match name {
        "RL.TOKENBUCKET" => &[&["@", "10", "10", WIDE, "COST", "1", "PEEK"]],
        "RL.SLIDING" => &[&["@", "10", WIDE, "COST", "1"]],
        "RL.FIXED" => &[&["@", "10", WIDE, "PEEK", "COST", "1"]],
        "RL.GCRA" => &[&["@", "10", WIDE, "BURST", "5", "COST", "1"]],
        "RL.THROTTLE" => &[&["@", "9", "10", "1000000000", "1"]],
        "RL.LOG" => &[&["@", "10", WIDE, "COST", "1"]],
        "RL.CONCURRENCY" => &[
            &["@", "10", WIDE, "ACQUIRE", "id"],
            &["@", "10", WIDE, "ACQUIRE", "id", "PEEK"],
            &["@", "RELEASE", "a"],
        ],
        "RL.ALL" => &[&[
            "2",
            "@",
            "h:new",
            "TOKENBUCKET",
            "10",
            "10",
            WIDE,
            "GCRA",
            "10",
            WIDE,
            "BURST",
            "3",
            "COST",
            "1",
        ]],
        "RL.REFUND" => &[
            &["@", "TOKENBUCKET", "10", "10", WIDE, "COST", "1"],
            &["@", "LOG", "10", WIDE, "COST", "1"],
        ],
        "RL.RESET" | "RL.STATE" => &[&["@"]],
        _ => unreachable!(),
    };
    t.iter().map(|a| a.to_vec()).collect()
}

const COMMANDS: &[&str] = &[
    "RL.TOKENBUCKET",
    "RL.SLIDING",
    "RL.FIXED",
    "RL.GCRA",
    "RL.THROTTLE",
    "RL.LOG",
    "RL.CONCURRENCY",
    "RL.ALL",
    "RL.REFUND",
    "RL.RESET",
    "RL.STATE",
];

/// How a valid call is spoiled.
#[derive(Debug, Clone)]
enum Spoil {
    /// Replace argument `i` (modulo the length).
    Replace(usize, Vec<u8>),
    /// Insert at `i`.
    Insert(usize, Vec<u8>),
    /// Append the tail from `i` again (repeated options).
    RepeatTail(usize),
    /// Cut after `i` arguments.
    Cut(usize),
}

fn spoil() -> impl Strategy<Value = Spoil> {
    prop_oneof![
        3 => (any::<usize>(), token()).prop_map(|(i, t)| Spoil::Replace(i, t)),
        2 => (any::<usize>(), token()).prop_map(|(i, t)| Spoil::Insert(i, t)),
        1 => any::<usize>().prop_map(Spoil::RepeatTail),
        1 => any::<usize>().prop_map(Spoil::Cut),
    ]
}

/// Arguments after the command name: a valid call spoiled a few times, or random tokens.
fn arguments(name: &'static str) -> impl Strategy<Value = Vec<Vec<u8>>> {
    let templates = templates(name);
    let spoiled = (
        prop::sample::select(templates),
        prop::sample::select(KEYS),
        prop::collection::vec(spoil(), 1..3),
    )
        .prop_map(|(template, key, spoils)| {
            let mut args: Vec<Vec<u8>> = template
                .iter()
                .map(|a| if *a == "@" { key } else { a }.as_bytes().to_vec())
                .collect();
            for s in spoils {
                let n = args.len();
                match s {
                    Spoil::Replace(i, t) if n > 0 => args[i % n] = t,
                    Spoil::Insert(i, t) => args.insert(i % (n + 1), t),
                    Spoil::RepeatTail(i) if n > 0 => {
                        let tail = args[i % n..].to_vec();
                        args.extend(tail);
                    }
                    Spoil::Cut(i) => args.truncate(i % (n + 1)),
                    _ => {}
                }
            }
            args
        });
    let random = (
        prop::sample::select(KEYS),
        prop::collection::vec(token(), 0..10),
    )
        .prop_map(|(key, mut rest)| {
            rest.insert(0, key.as_bytes().to_vec());
            rest
        });
    prop_oneof![3 => spoiled, 1 => random]
}

/// Every command, 200 arbitrary argument vectors each, on one server whose keys of every
/// kind must survive every refused call unchanged.
#[test]
fn arbitrary_arguments_get_a_reply_or_a_clean_error_and_errors_change_nothing() {
    let server = Server::start();
    let c = RefCell::new(server.client());
    let raw = RefCell::new(Raw::connect(&server));
    create_keys(&mut c.borrow_mut());
    let original = freeze_all(&mut c.borrow_mut());
    let mut errors = 0;
    let mut replies = 0;
    let counts = RefCell::new((0u32, 0u32));
    for name in COMMANDS {
        let mut runner = TestRunner::new(Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&arguments(name), |rest| {
                let mut args = vec![name.as_bytes().to_vec()];
                args.extend(rest);
                let c = &mut *c.borrow_mut();
                let dirty_before = dirty(c);
                let reply = raw.borrow_mut().call(&args);
                let failed = judge(&args, &reply)?;
                let dirty_after = dirty(c);
                let after = freeze_all(c);
                if failed {
                    counts.borrow_mut().0 += 1;
                    prop_assert_eq!(&after, &original, "{} changed a key", show(&args));
                    prop_assert_eq!(dirty_after, dirty_before, "{} wrote", show(&args));
                } else {
                    counts.borrow_mut().1 += 1;
                    restore(c, &original);
                }
                let pong = raw.borrow_mut().call(&bytes(&["PING"]));
                prop_assert!(matches!(pong, Reply::Status), "no PONG: {:?}", pong);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (e, r) = counts.replace((0, 0));
        println!("{name}: {e} errors, {r} replies");
        errors += e;
        replies += r;
    }
    println!("total: {errors} errors, {replies} replies");
}

/// A real stored value of every kind, as the module wrote it.
fn real_values(c: &mut redis::Connection) -> Vec<Vec<u8>> {
    create_keys(c);
    KEYS[..6]
        .iter()
        .map(|k| query::<Vec<u8>>(c, &["GET", k]))
        .collect()
}

/// How a stored value is damaged.
#[derive(Debug, Clone)]
enum Damage {
    Truncate(usize),
    Extend(Vec<u8>),
    Set(usize, u8),
    Version(u8),
    Tag(u8),
    Random(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        2 => any::<usize>().prop_map(Damage::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..20).prop_map(Damage::Extend),
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Damage::Set(i, b)),
        1 => any::<u8>().prop_map(Damage::Version),
        1 => any::<u8>().prop_map(Damage::Tag),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Damage::Random),
    ]
}

fn apply(value: &[u8], damage: &[Damage]) -> Vec<u8> {
    let mut v = value.to_vec();
    for d in damage {
        let n = v.len();
        match d {
            Damage::Truncate(i) => v.truncate(i % (n + 1)),
            Damage::Extend(tail) => v.extend_from_slice(tail),
            Damage::Set(i, b) if n > 0 => v[i % n] = *b,
            Damage::Version(b) if n > 3 => v[3] = *b,
            Damage::Tag(b) if n > 4 => v[4] = *b,
            Damage::Random(r) => v = r.clone(),
            _ => {}
        }
    }
    v
}

/// Valid calls of every command on the damaged key `d`.
const READERS: &[&[&str]] = &[
    &["RL.TOKENBUCKET", "d", "10", "10", WIDE],
    &["RL.TOKENBUCKET", "d", "10", "10", WIDE, "PEEK"],
    &["RL.SLIDING", "d", "10", WIDE],
    &["RL.FIXED", "d", "10", WIDE],
    &["RL.GCRA", "d", "10", WIDE, "BURST", "20"],
    &["RL.GCRA", "d", "10", "1", "COST", "0"],
    &["RL.THROTTLE", "d", "9", "10", "1000000000", "1"],
    &["RL.LOG", "d", "10", WIDE],
    &["RL.LOG", "d", "10000", "1", "COST", "2"],
    &["RL.CONCURRENCY", "d", "10", WIDE, "ACQUIRE", "b"],
    &["RL.CONCURRENCY", "d", "RELEASE", "a"],
    &["RL.ALL", "1", "d", "SLIDING", "10", WIDE],
    &[
        "RL.ALL", "2", "d", "h:other", "LOG", "10", WIDE, "FIXED", "1", "1",
    ],
    &[
        "RL.REFUND",
        "d",
        "TOKENBUCKET",
        "10",
        "10",
        WIDE,
        "COST",
        "1",
    ],
    &["RL.REFUND", "d", "GCRA", "10", WIDE, "COST", "5"],
    &["RL.REFUND", "d", "LOG", "10", WIDE, "COST", "2"],
    &["RL.REFUND", "d", "FIXED", "10", WIDE, "COST", "2"],
    &["RL.REFUND", "d", "SLIDING", "10", WIDE, "COST", "2"],
    &["RL.STATE", "d"],
    &["RL.RESET", "d"],
];

/// Real values of every kind, damaged (truncated, extended, bytes changed, another version
/// or tag, or replaced), then read by every command: a reply or a clean error, and on error
/// the key is untouched.
#[test]
fn damaged_stored_values_get_a_reply_or_a_clean_error_and_stay_untouched() {
    let server = Server::start();
    let c = RefCell::new(server.client());
    let raw = RefCell::new(Raw::connect(&server));
    let values = real_values(&mut c.borrow_mut());
    let mut runner = TestRunner::new(Config {
        cases: CASES * 3,
        failure_persistence: None,
        ..Config::default()
    });
    let counts = RefCell::new((0u32, 0u32));
    runner
        .run(
            &(
                prop::sample::select(values),
                prop::collection::vec(damage(), 1..3),
            ),
            |(value, damage)| {
                let value = apply(&value, &damage);
                let c = &mut *c.borrow_mut();
                for reader in READERS {
                    let mut set = redis::cmd("SET");
                    set.arg("d").arg(&value).arg("PX").arg(100_000_000);
                    set.query::<()>(c).expect("SET");
                    let before = frozen(c, "d");
                    let dirty_before = dirty(c);
                    let args = bytes(reader);
                    let reply = raw.borrow_mut().call(&args);
                    if judge(&args, &reply)? {
                        counts.borrow_mut().0 += 1;
                        prop_assert_eq!(dirty(c), dirty_before, "{} wrote", show(&args));
                        prop_assert_eq!(
                            frozen(c, "d"),
                            before,
                            "{} changed the damaged key {:?}",
                            show(&args),
                            value
                        );
                    } else {
                        counts.borrow_mut().1 += 1;
                    }
                    let pong = raw.borrow_mut().call(&bytes(&["PING"]));
                    prop_assert!(matches!(pong, Reply::Status), "no PONG: {:?}", pong);
                }
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let (e, r) = counts.into_inner();
    println!("damaged values: {e} errors, {r} replies");
}

/// `args` must be allowed (first reply field 1).
fn allowed(c: &mut redis::Connection, args: &[&str]) {
    assert_eq!(ints(c, args)[0], 1, "{args:?}");
}

/// `args` must be refused with exactly `expected`, changing nothing.
fn over(c: &mut redis::Connection, args: &[&str], expected: &str) {
    let all: Vec<_> = KEYS.iter().map(|k| frozen(c, k)).collect();
    assert_eq!(error(c, args), expected, "{args:?}");
    let after: Vec<_> = KEYS.iter().map(|k| frozen(c, k)).collect();
    assert_eq!(after, all, "{args:?} changed a key");
}

/// Every size an attacker controls, at its documented maximum (works) and just over it
/// (refused with its text, nothing changed).
#[test]
fn every_attacker_controlled_size_works_at_its_maximum_and_is_refused_above() {
    let server = Server::start();
    let mut c = server.client();
    create_keys(&mut c);
    let count = "ERR limit must be an integer between 1 and 1000000000000000";
    let cost = "ERR cost must be an integer between 0 and 1000000000000000";
    let log_limit = "ERR limit must be an integer between 1 and 10000";

    // cost and limit: 10^15 on every algorithm that takes them.
    for (name, rest) in [
        ("RL.SLIDING", &[WIDE][..]),
        ("RL.FIXED", &[WIDE]),
        ("RL.GCRA", &[WIDE]),
    ] {
        let key = format!("max:{name}");
        let mut args = vec![name, &key, COUNT_MAX];
        args.extend_from_slice(rest);
        args.extend_from_slice(&["COST", COUNT_MAX]);
        allowed(&mut c, &args);
        if name != "RL.GCRA" {
            // (GCRA at 10^15 per 10^12 ms frees one unit every microsecond.)
            args[5] = "1";
            assert_eq!(ints(&mut c, &args)[0], 0, "{args:?} after the whole budget");
        }
        let mut args = vec![name, "h:new", COUNT_ABOVE];
        args.extend_from_slice(rest);
        over(&mut c, &args, count);
        let mut args = vec![name, "h:new", COUNT_MAX];
        args.extend_from_slice(rest);
        args.extend_from_slice(&["COST", COUNT_ABOVE]);
        over(&mut c, &args, cost);
    }
    allowed(
        &mut c,
        &[
            "RL.GCRA",
            "max:burst",
            "1",
            WIDE,
            "BURST",
            COUNT_MAX,
            "COST",
            COUNT_MAX,
        ],
    );
    over(
        &mut c,
        &["RL.GCRA", "h:gc", "1", WIDE, "BURST", COUNT_ABOVE],
        "ERR burst must be an integer between 1 and 1000000000000000",
    );
    // (RL.THROTTLE replies `limited` first: 0 is allowed.)
    assert_eq!(
        ints(
            &mut c,
            &[
                "RL.THROTTLE",
                "max:th",
                "999999999999999",
                COUNT_MAX,
                "1",
                COUNT_MAX
            ]
        )[0],
        0
    );
    over(
        &mut c,
        &["RL.THROTTLE", "h:gc", COUNT_MAX, COUNT_MAX, "1"],
        "ERR max_burst must be an integer between 0 and 999999999999999",
    );

    // RL.LOG: at most 10000 entries.
    allowed(
        &mut c,
        &["RL.LOG", "max:log", "10000", WIDE, "COST", "10000"],
    );
    assert_eq!(
        ints(&mut c, &["RL.LOG", "max:log", "10000", WIDE])[..3],
        [0, 10000, 0]
    );
    over(&mut c, &["RL.LOG", "h:log", "10001", WIDE], log_limit);
    over(
        &mut c,
        &["RL.ALL", "1", "h:log", "LOG", "10001", WIDE],
        &format!("ERR spec 1: {}", &log_limit[4..]),
    );

    // RL.ALL: at most 16 keys.
    let keys: Vec<String> = (0..17).map(|i| format!("all:{i}")).collect();
    let all = |n: usize| {
        let mut args = vec!["RL.ALL".to_string(), n.to_string()];
        args.extend(keys[..n].iter().cloned());
        for _ in 0..n {
            args.extend(["FIXED", "1", WIDE].map(String::from));
        }
        args
    };
    let sixteen = all(16);
    let sixteen: Vec<&str> = sixteen.iter().map(String::as_str).collect();
    let r: redis::Value = query(&mut c, &sixteen);
    assert!(
        matches!(&r, redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(1))),
        "{r:?}"
    );
    let seventeen = all(17);
    let seventeen: Vec<&str> = seventeen.iter().map(String::as_str).collect();
    over(
        &mut c,
        &seventeen,
        "ERR numkeys must be an integer between 1 and 16",
    );
    assert_eq!(query::<i64>(&mut c, &["EXISTS", &keys[16]]), 0);

    // RL.CONCURRENCY: at most 10000 leases, ids of at most 256 bytes.
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.add_command(command(&[
            "RL.CONCURRENCY",
            "max:cc",
            "10000",
            WIDE,
            "ACQUIRE",
            &format!("lease-{i:05}"),
        ]));
    }
    let replies: Vec<Vec<i64>> = pipe.query(&mut c).expect("10000 leases");
    assert!(replies.iter().all(|r| r[0] == 1));
    assert_eq!(replies.last().unwrap()[2], 0, "no lease left after 10000");
    assert_eq!(
        ints(
            &mut c,
            &[
                "RL.CONCURRENCY",
                "max:cc",
                "10000",
                WIDE,
                "ACQUIRE",
                "one-more"
            ]
        )[..3],
        [0, 10000, 0]
    );
    over(
        &mut c,
        &["RL.CONCURRENCY", "h:cc", "10001", WIDE, "ACQUIRE", "x"],
        log_limit,
    );
    let id = "i".repeat(256);
    allowed(
        &mut c,
        &["RL.CONCURRENCY", "max:id", "1", WIDE, "ACQUIRE", &id],
    );
    assert_eq!(
        query::<i64>(&mut c, &["RL.CONCURRENCY", "max:id", "RELEASE", &id]),
        1
    );
    let long = "i".repeat(257);
    let id_error = "ERR id must be between 1 and 256 bytes long";
    over(
        &mut c,
        &["RL.CONCURRENCY", "h:cc", "10", WIDE, "ACQUIRE", &long],
        id_error,
    );
    over(
        &mut c,
        &["RL.CONCURRENCY", "h:cc", "RELEASE", &long],
        id_error,
    );
    over(&mut c, &["RL.CONCURRENCY", "h:cc", "RELEASE", ""], id_error);

    // Key length: the module sets no bound of its own; a 1 MB key name works like any other
    // (the server's own limit, 512 MB per string, applies) and is cleaned up by RL.RESET.
    let key = "k".repeat(1 << 20);
    allowed(
        &mut c,
        &["RL.TOKENBUCKET", &key, "2", "1", WIDE, "COST", "2"],
    );
    assert_eq!(
        ints(&mut c, &["RL.TOKENBUCKET", &key, "2", "1", WIDE])[0],
        0
    );
    let state: Vec<redis::Value> = query(&mut c, &["RL.STATE", &key]);
    assert!(!state.is_empty());
    assert_eq!(query::<i64>(&mut c, &["RL.RESET", &key]), 1);
    let keys_left: i64 = query(&mut c, &["EXISTS", &key]);
    assert_eq!(keys_left, 0);
    let pong: String = query(&mut c, &["PING"]);
    assert_eq!(pong, "PONG");
}
