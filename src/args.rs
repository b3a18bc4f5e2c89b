//! Argument parsing without allocation: integers, and the `COST n` / `PEEK` options.
//!
//! Every bad argument becomes an [`ArgError`] whose text names the argument and what was
//! expected. Parsing happens before any key is read, so a rejected call changes nothing.

use std::fmt;

use redis_module::RedisString;
use redis_rl_core::limits::{self, ParamError, Range};

use crate::config;

/// A bad argument, with the public error text as its `Display`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// A number missing, malformed or out of its range.
    Param(ParamError),
    /// An option name the command does not have, and the options it has (as listed in
    /// the error text).
    UnknownOption(String, &'static str),
    /// An option given twice.
    RepeatedOption(&'static str),
    /// `COST` as the last argument, without its value.
    MissingValue(&'static str, Range),
}

impl From<ParamError> for ArgError {
    fn from(e: ParamError) -> Self {
        ArgError::Param(e)
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Param(e) => write!(f, "ERR {e}"),
            ArgError::UnknownOption(given, expected) => {
                write!(f, "ERR unknown option '{given}', expected {expected}")
            }
            ArgError::RepeatedOption(name) => write!(f, "ERR option {name} given more than once"),
            ArgError::MissingValue(name, range) => {
                write!(f, "ERR option {name} needs a value: {}", range.error())
            }
        }
    }
}

/// Parses a decimal integer (ASCII digits only, no sign, no spaces) inside `range`.
///
/// Anything else (empty, `-1`, `1.5`, `+3`, ` 7`, too large) is the range error, which says
/// what is expected.
pub fn integer(arg: &RedisString, range: Range) -> Result<u64, ParamError> {
    let bytes = arg.as_slice();
    if bytes.is_empty() {
        return Err(range.error());
    }
    let mut value: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return Err(range.error());
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(range.error())?;
    }
    range.check(value)
}

/// The options every limiting command accepts after its positional arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Units to take (`COST n`, default 1; both within `rl.max-cost`).
    pub cost: u64,
    /// Decide without taking or writing anything.
    pub peek: bool,
}

impl Options {
    /// Parses `[COST n] [PEEK]` in any order, each at most once, names in any case.
    pub fn parse(args: &[RedisString]) -> Result<Options, ArgError> {
        Self::parse_accepting(args, None, true).map(|(options, _)| options)
    }

    /// Parses `[PEEK]` (RL.CONCURRENCY ACQUIRE, which takes no `COST`): true if given.
    pub fn parse_peek_only(args: &[RedisString]) -> Result<bool, ArgError> {
        Self::parse_accepting(args, None, false).map(|(options, _)| options.peek)
    }

    /// Parses `[BURST b] [COST n] [PEEK]` (RL.GCRA) like [`Options::parse`], and returns
    /// `BURST` apart (`None` when not given).
    pub fn parse_with_burst(args: &[RedisString]) -> Result<(Options, Option<u64>), ArgError> {
        Self::parse_accepting(args, Some(limits::count("burst")), true)
    }

    /// Parses the options: `PEEK` always, `BURST` only when its range is given, `COST` only
    /// when `accepts_cost`.
    fn parse_accepting(
        args: &[RedisString],
        burst_range: Option<Range>,
        accepts_cost: bool,
    ) -> Result<(Options, Option<u64>), ArgError> {
        let expected = match (burst_range.is_some(), accepts_cost) {
            (true, _) => "BURST b, COST n or PEEK",
            (false, true) => "COST n or PEEK",
            (false, false) => "PEEK",
        };
        let mut cost = None;
        let mut peek = false;
        let mut burst = None;
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            let name = arg.as_slice();
            if let (Some(range), true) = (burst_range, name.eq_ignore_ascii_case(b"BURST")) {
                if burst.is_some() {
                    return Err(ArgError::RepeatedOption("BURST"));
                }
                let value = rest.next().ok_or(ArgError::MissingValue("BURST", range))?;
                burst = Some(integer(value, range)?);
            } else if accepts_cost && name.eq_ignore_ascii_case(b"COST") {
                if cost.is_some() {
                    return Err(ArgError::RepeatedOption("COST"));
                }
                let value = rest
                    .next()
                    .ok_or(ArgError::MissingValue("COST", config::cost_range()))?;
                cost = Some(integer(value, config::cost_range())?);
            } else if name.eq_ignore_ascii_case(b"PEEK") {
                if peek {
                    return Err(ArgError::RepeatedOption("PEEK"));
                }
                peek = true;
            } else {
                return Err(ArgError::UnknownOption(shown(name), expected));
            }
        }
        let cost = match cost {
            Some(cost) => cost,
            // The implicit cost is a cost like any other: `rl.max-cost 0` refuses it too.
            None if accepts_cost => config::cost_range().check(1)?,
            // A lease is one slot, not a cost (RL.CONCURRENCY takes no COST).
            None => 1,
        };
        let options = Options { cost, peek };
        Ok((options, burst))
    }
}

/// An argument as it appears in an error text: at most 40 bytes, printable ASCII kept and
/// every other byte shown as `\xNN`, so the error line is always valid text for any client.
pub(crate) fn shown(bytes: &[u8]) -> String {
    const MAX: usize = 40;
    let mut out = String::new();
    for &b in bytes.iter().take(MAX) {
        if b.is_ascii_graphic() || b == b' ' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > MAX {
        out.push_str("...");
    }
    out
}
