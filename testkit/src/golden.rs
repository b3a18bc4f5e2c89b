//! The golden command files of `testdata/commands/` (format: `testdata/README.md`): a
//! command line, then `=> ` and the reply it must get. The module's tests run them as
//! commands, the Lua twin's through `FCALL`, and Python's tests read the same files, so the
//! three agree on every reply and error text listed there.

use std::path::{Path, PathBuf};

/// One command of a golden file and the reply it expects.
#[derive(Clone, Debug)]
pub struct Case {
    /// The file and line of the command, for messages.
    pub at: String,
    /// The command's words.
    pub command: Vec<String>,
    /// The reply it must get.
    pub expected: Expected,
}

/// An expected reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    /// An error line, exactly (`ERR ...`, `WRONGTYPE ...`).
    Error(String),
    /// A status reply (`OK`).
    Status(String),
    /// An integer.
    Int(i64),
    /// Any integer (a time-dependent field: `*`).
    AnyInt,
    /// An array of these.
    Array(Vec<Expected>),
}

/// The directory of the golden command files.
pub fn commands_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/commands")
}

/// Every golden file, sorted, with its cases.
pub fn files() -> Vec<(PathBuf, Vec<Case>)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(commands_dir())
        .expect("testdata/commands")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a golden file");
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            let cases = parse(&name, &text);
            (p, cases)
        })
        .collect()
}

/// The cases of one file's text; panics on a malformed line (a golden file is test code).
pub fn parse(name: &str, text: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut pending: Option<(String, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        let at = format!("{name}:{}", i + 1);
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(reply) = line.strip_prefix("=> ") {
            let (at, command) = pending
                .take()
                .unwrap_or_else(|| panic!("{at}: a reply without a command"));
            cases.push(Case {
                at,
                command,
                expected: expected(reply),
            });
        } else {
            assert!(
                pending.is_none(),
                "{at}: a command without a reply before it"
            );
            pending = Some((at, line.split(' ').map(str::to_string).collect()));
        }
    }
    assert!(pending.is_none(), "{name}: the last command has no reply");
    cases
}

fn expected(reply: &str) -> Expected {
    if reply.starts_with("ERR ") || reply.starts_with("WRONGTYPE ") {
        return Expected::Error(reply.to_string());
    }
    if reply.starts_with('[') {
        let mut words = reply.replace('[', " [ ").replace(']', " ] ");
        words = words.trim().to_string();
        let mut tokens = words.split_whitespace();
        assert_eq!(tokens.next(), Some("["), "an array starts with [");
        return array(&mut tokens);
    }
    scalar(reply)
}

fn scalar(word: &str) -> Expected {
    match word {
        "*" => Expected::AnyInt,
        w => w
            .parse()
            .map_or_else(|_| Expected::Status(w.to_string()), Expected::Int),
    }
}

/// The items of an array whose `[` was read, up to its `]`.
fn array(tokens: &mut dyn Iterator<Item = &str>) -> Expected {
    let mut items = Vec::new();
    loop {
        match tokens.next() {
            Some("]") => return Expected::Array(items),
            Some("[") => items.push(array(tokens)),
            Some(word) => items.push(scalar(word)),
            None => panic!("an array without its ]"),
        }
    }
}

impl Expected {
    /// Whether `reply` (or the error the call returned) is this.
    pub fn matches(&self, reply: &Result<redis::Value, String>) -> bool {
        match (self, reply) {
            (Expected::Error(text), Err(got)) => text == got,
            (_, Err(_)) | (Expected::Error(_), Ok(_)) => false,
            (expected, Ok(value)) => expected.matches_value(value),
        }
    }

    fn matches_value(&self, value: &redis::Value) -> bool {
        use redis::Value;
        match (self, value) {
            (Expected::Int(n), Value::Int(v)) => n == v,
            (Expected::AnyInt, Value::Int(_)) => true,
            (Expected::Status(s), Value::Okay) => s == "OK",
            (Expected::Status(s), Value::SimpleString(v)) => s == v,
            (Expected::Array(items), Value::Array(values)) => {
                items.len() == values.len()
                    && items.iter().zip(values).all(|(e, v)| e.matches_value(v))
            }
            _ => false,
        }
    }
}

/// The keys of a command as the twin takes them (`FCALL rl numkeys keys...`): RL.ALL's
/// after its count, another RL.* command's first argument.
pub fn keys_of(command: &[String]) -> Vec<String> {
    let name = command
        .first()
        .map(|c| c.to_ascii_uppercase())
        .unwrap_or_default();
    if name == "RL.ALL" {
        let n: usize = command.get(1).and_then(|n| n.parse().ok()).unwrap_or(0);
        return command.iter().skip(2).take(n).cloned().collect();
    }
    command.get(1).into_iter().cloned().collect()
}

/// How a golden command is sent: to the module as itself, or to the Lua twin (the
/// library `rl` loaded) as `FCALL rl numkeys keys... RL.X args...`. Commands that are not
/// the limiter's (`SET`, `EXISTS`) go to the server as they are either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The module's commands.
    Module,
    /// The Lua twin's function.
    Twin,
}

/// The command a golden line is sent as.
pub fn command_for(command: &[String], via: Via) -> redis::Cmd {
    let is_limiter = command
        .first()
        .is_some_and(|c| c.to_ascii_uppercase().starts_with("RL."));
    if via == Via::Module || !is_limiter {
        return crate::cmd::command(command);
    }
    let keys = keys_of(command);
    let name = command[0].to_ascii_uppercase();
    let rest: Vec<&String> = if name == "RL.ALL" {
        command.iter().skip(2 + keys.len()).collect()
    } else {
        command.iter().skip(2).collect()
    };
    let mut cmd = redis::cmd("FCALL");
    cmd.arg("rl")
        .arg(keys.len())
        .arg(&keys)
        .arg(&name)
        .arg(rest);
    cmd
}

/// Runs every case of `cases` in order on `conn` `via` the module or the twin, and returns
/// the cases whose reply differs, with what came back.
pub fn run(conn: &mut redis::Connection, cases: &[Case], via: Via) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in cases {
        let reply = command_for(&case.command, via)
            .query::<redis::Value>(conn)
            .map_err(|e| crate::cmd::error_text(&e));
        if !case.expected.matches(&reply) {
            wrong.push(format!(
                "{} {:?} ({via:?}): expected {:?}, got {reply:?}",
                case.at, case.command, case.expected
            ));
        }
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_parses_into_commands_and_replies() {
        let cases = parse(
            "t.txt",
            "# c\nRL.X k 1\n=> [1 -1 [2 *] 3]\n\nSET a b\n=> OK\nRL.X k\n=> ERR no\n",
        );
        assert_eq!(cases.len(), 3);
        assert_eq!(cases[0].command, ["RL.X", "k", "1"]);
        assert_eq!(
            cases[0].expected,
            Expected::Array(vec![
                Expected::Int(1),
                Expected::Int(-1),
                Expected::Array(vec![Expected::Int(2), Expected::AnyInt]),
                Expected::Int(3),
            ])
        );
        assert_eq!(cases[1].expected, Expected::Status("OK".into()));
        assert_eq!(cases[2].expected, Expected::Error("ERR no".into()));
        assert_eq!(cases[2].at, "t.txt:7");
    }

    #[test]
    fn keys_are_the_first_argument_or_those_of_rl_all() {
        let words = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(keys_of(&words("RL.FIXED k 1 2")), ["k"]);
        assert_eq!(keys_of(&words("RL.ALL 2 a b SLIDING 1 2")), ["a", "b"]);
    }
}
