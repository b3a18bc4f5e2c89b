//! Hostile input: arbitrary argument vectors thrown at every command (here), arbitrary bytes
//! stored where a limiter is expected (`hostile_values.rs`), and every attacker-controlled
//! size at and over its maximum (`hostile_sizes.rs`).
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

pub(crate) const WIDE: &str = "1000000000000";
pub(crate) const COUNT_MAX: &str = "1000000000000000";
pub(crate) const COUNT_ABOVE: &str = "1000000000000001";
pub(crate) const CASES: u32 = 200;

/// One RESP2 reply.
#[derive(Debug)]
pub(crate) enum Reply {
    Status,
    Error(Vec<u8>),
    Int,
    Bulk,
    Array,
}

/// A raw connection: commands as byte vectors, replies parsed strictly.
pub(crate) struct Raw {
    reader: BufReader<TcpStream>,
}

impl Raw {
    pub(crate) fn connect(server: &Server) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        Raw {
            reader: BufReader::new(stream),
        }
    }

    pub(crate) fn call(&mut self, args: &[Vec<u8>]) -> Reply {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&out).expect("send");
        self.read().expect("a well-formed reply")
    }

    pub(crate) fn line(&mut self) -> Result<Vec<u8>, String> {
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

    pub(crate) fn read(&mut self) -> Result<Reply, String> {
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
pub(crate) fn judge(args: &[Vec<u8>], reply: &Reply) -> Result<bool, TestCaseError> {
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

pub(crate) fn show(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| format!("{:?}", String::from_utf8_lossy(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn bytes(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// The keys that exist before the fuzzing starts: one of every algorithm (long windows, part
/// used), a plain string, a list, a missing key.
pub(crate) const KEYS: &[&str] = &[
    "h:tb", "h:sw", "h:fw", "h:gc", "h:log", "h:cc", "h:str", "h:list", "h:new",
];

pub(crate) fn create_keys(c: &mut redis::Connection) {
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

pub(crate) type Frozen = Vec<(Option<Vec<u8>>, i64)>;

/// Writes since the last save: an error must not move it (no key anywhere was written,
/// including keys the fuzzer named that are not in [`KEYS`]).
pub(crate) fn dirty(c: &mut redis::Connection) -> i64 {
    info_field(c, "persistence", "rdb_changes_since_last_save")
        .expect("rdb_changes_since_last_save")
        .parse()
        .expect("a number")
}

pub(crate) fn freeze_all(c: &mut redis::Connection) -> Frozen {
    KEYS.iter().map(|k| frozen(c, k)).collect()
}

/// Puts every key back as it was in `original` (after a call that was allowed to change it).
pub(crate) fn restore(c: &mut redis::Connection, original: &Frozen) {
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
pub(crate) const WORDS: &[&str] = &[
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
pub(crate) fn token() -> impl Strategy<Value = Vec<u8>> {
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
pub(crate) fn templates(name: &str) -> Vec<Vec<&'static str>> {
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

pub(crate) const COMMANDS: &[&str] = &[
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
pub(crate) enum Spoil {
    /// Replace argument `i` (modulo the length).
    Replace(usize, Vec<u8>),
    /// Insert at `i`.
    Insert(usize, Vec<u8>),
    /// Append the tail from `i` again (repeated options).
    RepeatTail(usize),
    /// Cut after `i` arguments.
    Cut(usize),
}

pub(crate) fn spoil() -> impl Strategy<Value = Spoil> {
    prop_oneof![
        3 => (any::<usize>(), token()).prop_map(|(i, t)| Spoil::Replace(i, t)),
        2 => (any::<usize>(), token()).prop_map(|(i, t)| Spoil::Insert(i, t)),
        1 => any::<usize>().prop_map(Spoil::RepeatTail),
        1 => any::<usize>().prop_map(Spoil::Cut),
    ]
}

/// Arguments after the command name: a valid call spoiled a few times, or random tokens.
pub(crate) fn arguments(name: &'static str) -> impl Strategy<Value = Vec<Vec<u8>>> {
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
pub(crate) fn arbitrary_arguments_get_a_reply_or_a_clean_error_and_errors_change_nothing() {
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
