//! Argument parsing without allocation: integers, and the `COST n` / `UPTO` / `PEEK` options.
//!
//! Every bad argument becomes an [`ArgError`] whose text names the argument and what was
//! expected (`crate::error` adds the `ERR ` prefix). Parsing happens before any key is read,
//! so a rejected call changes nothing.

use std::fmt;

use redis_module::RedisString;
use redis_rl_core::algorithm::{Opt, MAX_OPTIONS};
use redis_rl_core::limits::{ParamError, Range};

use crate::config;

/// A bad argument, with the public error text as its `Display`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// A number missing, malformed or out of its range.
    Param(ParamError),
    /// An option name the command does not have, and the options it has (as listed in
    /// the error text).
    UnknownOption(String, Accepted),
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
            ArgError::Param(e) => write!(f, "{e}"),
            ArgError::UnknownOption(given, expected) => {
                write!(f, "unknown option '{given}', expected {expected}")
            }
            ArgError::RepeatedOption(name) => write!(f, "option {name} given more than once"),
            ArgError::MissingValue(name, range) => {
                write!(f, "option {name} needs a value: {}", range.error())
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
    /// Take `min(cost, available)` units: a partial grant, replied as a sixth integer.
    pub upto: bool,
}

/// The options a command accepts after its positional arguments: its algorithm's (such as
/// `BURST b`), `COST n` if it takes a cost, `UPTO` if it grants partially, and `PEEK`. The
/// `Display` lists them as error texts do: `BURST b, COST n, UPTO or PEEK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The algorithm's options (from the core registry).
    pub options: &'static [Opt],
    /// Whether `COST n` is accepted.
    pub cost: bool,
    /// Whether `UPTO` is accepted (the core's `RateLimiter::UPTO`).
    pub upto: bool,
}

impl fmt::Display for Accepted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for opt in self.options {
            write!(f, "{} {}, ", opt.token, opt.value)?;
        }
        match (self.cost, self.upto) {
            (true, true) => write!(f, "COST n, UPTO or ")?,
            (true, false) => write!(f, "COST n or ")?,
            (false, true) => write!(f, "UPTO or ")?,
            (false, false) => {}
        }
        write!(f, "PEEK")
    }
}

impl Options {
    /// Parses `[COST n] [PEEK]` in any order, each at most once, names in any case.
    pub fn parse(args: &[RedisString]) -> Result<Options, ArgError> {
        let accepted = Accepted {
            options: &[],
            cost: true,
            upto: false,
        };
        Self::parse_accepting(args, accepted).map(|(options, _)| options)
    }

    /// Parses `[PEEK]` (RL.CONCURRENCY ACQUIRE, which takes no `COST`): true if given.
    pub fn parse_peek_only(args: &[RedisString]) -> Result<bool, ArgError> {
        let accepted = Accepted {
            options: &[],
            cost: false,
            upto: false,
        };
        Self::parse_accepting(args, accepted).map(|(options, _)| options.peek)
    }

    /// Parses the options `accepted` lists, in any order, each at most once, names in any
    /// case; returns the algorithm's options apart, in the order of `accepted.options`
    /// (`None` when not given).
    pub fn parse_accepting(
        args: &[RedisString],
        accepted: Accepted,
    ) -> Result<(Options, [Option<u64>; MAX_OPTIONS]), ArgError> {
        let mut cost = None;
        let mut peek = false;
        let mut upto = false;
        let mut extra = [None; MAX_OPTIONS];
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            let name = arg.as_slice();
            let own = accepted
                .options
                .iter()
                .zip(extra.iter_mut())
                .find(|(opt, _)| name.eq_ignore_ascii_case(opt.token.as_bytes()));
            if let Some((opt, slot)) = own {
                if slot.is_some() {
                    return Err(ArgError::RepeatedOption(opt.token));
                }
                let value = rest
                    .next()
                    .ok_or(ArgError::MissingValue(opt.token, opt.range))?;
                *slot = Some(integer(value, opt.range)?);
            } else if accepted.cost && name.eq_ignore_ascii_case(b"COST") {
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
            } else if accepted.upto && name.eq_ignore_ascii_case(b"UPTO") {
                if upto {
                    return Err(ArgError::RepeatedOption("UPTO"));
                }
                upto = true;
            } else {
                return Err(ArgError::UnknownOption(shown(name), accepted));
            }
        }
        let cost = match cost {
            Some(cost) => cost,
            // The implicit cost is a cost like any other: `rl.max-cost 0` refuses it too.
            None if accepted.cost => config::cost_range().check(1)?,
            // A lease is one slot, not a cost (RL.CONCURRENCY takes no COST).
            None => 1,
        };
        Ok((Options { cost, peek, upto }, extra))
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
