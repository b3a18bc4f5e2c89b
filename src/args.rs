//! Argument parsing without allocation: integers, and the `COST n` / `UPTO` / `PEEK` options.
//!
//! Every bad argument becomes an [`ArgError`] whose text names the argument and what was
//! expected (`crate::error` adds the `ERR ` prefix). Parsing happens before any key is read,
//! so a rejected call changes nothing.

use std::fmt;

use redis_module::{raw, RedisString};
use redis_rl_core::algorithm::{Opt, MAX_OPTIONS};
use redis_rl_core::limits::{ParamError, Range, Spelling};

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
    /// Two options that cannot be given together.
    Exclusive(&'static str, &'static str),
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
            ArgError::Exclusive(a, b) => write!(f, "options {a} and {b} cannot be combined"),
        }
    }
}

/// Parses a decimal integer (ASCII digits only, no sign, no spaces) inside `range`.
///
/// Anything else (empty, `-1`, `1.5`, `+3`, ` 7`, too large) is the range error, which says
/// what is expected.
#[inline(always)]
pub fn integer(arg: &RedisString, range: Range) -> Result<u64, ParamError> {
    if !matches!(range.spelling, Spelling::Integer) {
        // A word or a signed offset (RL.QUOTA's period and TZ): the core reads it.
        return range.parse(bytes(arg));
    }
    match digits(bytes(arg)) {
        Some(value) => range.check(value),
        None => Err(range.error()),
    }
}

/// The bytes of an argument. The same as `RedisString::as_slice`, but inlined: every
/// argument of every call goes through here.
#[inline]
pub fn bytes(arg: &RedisString) -> &[u8] {
    // SAFETY: the API table is filled at module load.
    let Some(ptr_len) = (unsafe { raw::RedisModule_StringPtrLen }) else {
        return &[];
    };
    let mut len = 0;
    // SAFETY: `arg` is a live string of this call; the server returns its buffer and length,
    // valid (and unchanged) as long as `arg` is borrowed.
    unsafe {
        let ptr = ptr_len(arg.inner, &mut len);
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// The value of `bytes` read as a decimal number of ASCII digits, or `None`: empty, any
/// other byte, or above `u64::MAX`.
#[inline(always)]
fn digits(bytes: &[u8]) -> Option<u64> {
    // Up to 19 digits the value stays below 10^19 < u64::MAX (1.8 x 10^19): no step can
    // overflow, so no checked arithmetic. Longer numbers (leading zeros, or out of any
    // range) take the checked loop.
    const SAFE_DIGITS: usize = 19;
    if bytes.is_empty() || bytes.len() > SAFE_DIGITS {
        return digits_checked(bytes);
    }
    // The first `len % 8` digits one by one, then eight at a time.
    let (head, body) = bytes.split_at_checked(bytes.len() % 8)?;
    let mut value: u64 = 0;
    for &b in head {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    for chunk in body.chunks_exact(8) {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        value = value * 100_000_000 + eight_digits(word)?;
    }
    Some(value)
}

/// The value of eight ASCII digits loaded as a little-endian word (the first digit in the
/// lowest byte), or `None` if any byte is not a digit: the digits combined pairwise in a
/// few multiplications instead of eight steps (the classic SWAR method of fast_float and
/// simdjson).
#[inline(always)]
fn eight_digits(word: u64) -> Option<u64> {
    const LOW_NIBBLES: u64 = 0x0F0F_0F0F_0F0F_0F0F;
    const ZEROS: u64 = 0x3030_3030_3030_3030; // b'0' in every byte
                                              // A byte is a digit (0x30..=0x39) iff its high nibble is 3 and adding 6 leaves it 3. (A
                                              // carry out of a byte needs a byte >= 0xFA, which already fails its own test.)
    let high = word & !LOW_NIBBLES;
    let high_plus_6 = word.wrapping_add(0x0606_0606_0606_0606) & !LOW_NIBBLES;
    if high | (high_plus_6 >> 4) != 0x3333_3333_3333_3333 {
        return None;
    }
    // Each byte now 0..=9; no step below carries out of its lane or overflows the word.
    let d = word - ZEROS;
    // 16-bit lanes: 10 x first + second of each pair of digits (0..=99).
    let pairs = (d * 10 + (d >> 8)) & 0x00FF_00FF_00FF_00FF;
    // 32-bit lanes: 100 x first + second of each pair of pairs (0..=9999).
    let quads = (pairs * 100 + (pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    // 10000 x first + second quad (0..=99,999,999).
    Some((quads * 10_000 + (quads >> 32)) & 0xFFFF_FFFF)
}

/// [`digits`] for any length, with checked arithmetic.
#[cold]
fn digits_checked(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |value, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        value.checked_mul(10)?.checked_add(u64::from(digit))
    })
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
    /// Take the cost even over the limit (the excess is a debt later calls wait for).
    pub force: bool,
}

/// The options a command accepts after its positional arguments: its algorithm's (such as
/// `BURST b`), `COST n` if it takes a cost, `UPTO` if it grants partially, `FORCE` if it is
/// a rate limiter, and `PEEK`. The `Display` lists them as error texts do: `BURST b, COST n,
/// UPTO, FORCE or PEEK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The algorithm's options (from the core registry).
    pub options: &'static [Opt],
    /// Whether `COST n` is accepted.
    pub cost: bool,
    /// Whether `UPTO` is accepted (the core's `RateLimiter::UPTO`).
    pub upto: bool,
    /// Whether `FORCE` is accepted (every rate limiter).
    pub force: bool,
}

impl Accepted {
    /// What a rate limiter's command accepts: its options, `COST n`, `UPTO` if `upto`,
    /// `FORCE` and `PEEK`.
    pub const fn limiter(options: &'static [Opt], upto: bool) -> Accepted {
        Accepted {
            options,
            cost: true,
            upto,
            force: true,
        }
    }
}

impl fmt::Display for Accepted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for opt in self.options {
            write!(f, "{} {}, ", opt.token, opt.value)?;
        }
        let words = [
            (self.cost, "COST n"),
            (self.upto, "UPTO"),
            (self.force, "FORCE"),
        ];
        let mut given = words.iter().filter(|(given, _)| *given).peekable();
        while let Some((_, word)) = given.next() {
            let sep = if given.peek().is_some() { ", " } else { " or " };
            write!(f, "{word}{sep}")?;
        }
        write!(f, "PEEK")
    }
}

impl Options {
    /// Parses `[COST n] [PEEK]` in any order, each at most once, names in any case.
    pub fn parse(args: &[RedisString]) -> Result<Options, ArgError> {
        Self::parse_accepting(args, Accepted::limiter(&[], false)).map(|(options, _)| options)
    }

    /// Parses `[PEEK]` (RL.CONCURRENCY ACQUIRE, which takes no `COST`): true if given.
    pub fn parse_peek_only(args: &[RedisString]) -> Result<bool, ArgError> {
        let accepted = Accepted {
            options: &[],
            cost: false,
            upto: false,
            force: false,
        };
        Self::parse_accepting(args, accepted).map(|(options, _)| options.peek)
    }

    /// Parses the options `accepted` lists, in any order, each at most once, names in any
    /// case; returns the algorithm's options apart, in the order of `accepted.options`
    /// (`None` when not given).
    ///
    /// Most calls give no option at all: that case is inlined and costs a comparison (and
    /// the `rl.max-cost` check of the implicit cost).
    #[inline(always)]
    pub fn parse_accepting(
        args: &[RedisString],
        accepted: Accepted,
    ) -> Result<(Options, [Option<u64>; MAX_OPTIONS]), ArgError> {
        if args.is_empty() {
            let options = Options {
                cost: implicit_cost(accepted)?,
                peek: false,
                upto: false,
                force: false,
            };
            return Ok((options, [None; MAX_OPTIONS]));
        }
        Self::parse_given(args, accepted)
    }

    /// [`Options::parse_accepting`] when at least one option is given. Inlined: each
    /// command's options are then constants, and the search for a word unrolls.
    #[inline(always)]
    fn parse_given(
        args: &[RedisString],
        accepted: Accepted,
    ) -> Result<(Options, [Option<u64>; MAX_OPTIONS]), ArgError> {
        let mut cost = None;
        let mut peek = false;
        let mut upto = false;
        let mut force = false;
        let mut extra = [None; MAX_OPTIONS];
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            let name = bytes(arg);
            let own = accepted
                .options
                .iter()
                .zip(extra.iter_mut())
                .find(|(opt, _)| is_word(name, opt.token));
            if let Some((opt, slot)) = own {
                if slot.is_some() {
                    return Err(ArgError::RepeatedOption(opt.token));
                }
                let value = rest
                    .next()
                    .ok_or(ArgError::MissingValue(opt.token, opt.range))?;
                *slot = Some(integer(value, opt.range)?);
            } else if accepted.cost && is_word(name, "COST") {
                if cost.is_some() {
                    return Err(ArgError::RepeatedOption("COST"));
                }
                let range = config::cost_range();
                let value = rest.next().ok_or(ArgError::MissingValue("COST", range))?;
                cost = Some(integer(value, range)?);
            } else if is_word(name, "PEEK") {
                if peek {
                    return Err(ArgError::RepeatedOption("PEEK"));
                }
                peek = true;
            } else if accepted.upto && is_word(name, "UPTO") {
                if upto {
                    return Err(ArgError::RepeatedOption("UPTO"));
                }
                upto = true;
            } else if accepted.force && is_word(name, "FORCE") {
                if force {
                    return Err(ArgError::RepeatedOption("FORCE"));
                }
                force = true;
            } else {
                return Err(ArgError::UnknownOption(shown(name), accepted));
            }
        }
        let cost = match cost {
            Some(cost) => cost,
            None => implicit_cost(accepted)?,
        };
        if upto && force {
            // A partial grant takes what fits; forcing takes everything: they contradict.
            return Err(ArgError::Exclusive("UPTO", "FORCE"));
        }
        Ok((
            Options {
                cost,
                peek,
                upto,
                force,
            },
            extra,
        ))
    }
}

/// True if `name` is the option word `word` in any case. Every option word is upper-case
/// ASCII letters (a test checks the registry's), and for those clearing bit 5 (0x20) of a
/// byte matches exactly its two cases: `b & 0xDF == b'B'` holds for `B` and `b` only. (The
/// standard `eq_ignore_ascii_case` lower-cases both sides, byte by byte.)
#[inline]
fn is_word(name: &[u8], word: &str) -> bool {
    name.len() == word.len()
        && name
            .iter()
            .zip(word.as_bytes())
            .all(|(&b, &w)| b & !0x20 == w)
}

/// The cost of a call that gives no `COST n`.
#[inline]
fn implicit_cost(accepted: Accepted) -> Result<u64, ParamError> {
    if accepted.cost {
        // The implicit cost is a cost like any other: `rl.max-cost 0` refuses it too.
        config::cost_range().check(1)
    } else {
        // A lease is one slot, not a cost (RL.CONCURRENCY takes no COST).
        Ok(1)
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The plain definition: non-empty, ASCII digits only, fits in a u64.
    fn reference(bytes: &[u8]) -> Option<u64> {
        if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(bytes).ok()?.parse().ok()
    }

    #[test]
    fn digits_reads_every_length_and_refuses_anything_else() {
        for text in [
            "0",
            "7",
            "60000",
            "1000000000",
            "12345678",
            "123456789",
            "00000001",
            "99999999",
            "999999999999999999",
            "9999999999999999999",
            "10000000000000000000",
            "18446744073709551615",
            "18446744073709551616",
            "000000000000000000000000000042",
            "",
            "-1",
            "+3",
            " 7",
            "7 ",
            "1.5",
            "1e3",
            "12345678:",
            ":2345678",
            "1234/678",
            "\u{0}",
            "１",
        ] {
            assert_eq!(
                digits(text.as_bytes()),
                reference(text.as_bytes()),
                "{text:?}"
            );
        }
        assert_eq!(digits(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(digits(b"18446744073709551616"), None);
    }

    #[test]
    fn eight_digits_refuses_each_byte_that_is_not_a_digit_at_each_position() {
        for position in 0..8 {
            for b in 0..=255u8 {
                let mut text = *b"12345678";
                text[position] = b;
                let expected = reference(&text);
                assert_eq!(eight_digits(u64::from_le_bytes(text)), expected, "{text:?}");
            }
        }
    }

    #[test]
    fn option_words_match_in_any_case_and_nothing_else() {
        // `is_word` needs upper-case letters: every word a command accepts.
        let mut words = vec!["COST", "PEEK", "UPTO"];
        for command in crate::commands::COMMANDS {
            if let crate::docs::Syntax::Limiter { options, .. } = command.syntax {
                words.extend(options.iter().map(|o| o.token));
            }
        }
        assert!(words.contains(&"BURST"));
        for word in words {
            assert!(word.bytes().all(|b| b.is_ascii_uppercase()), "{word}");
            for b in 0..=255u8 {
                for i in 0..word.len() {
                    let mut name = word.as_bytes().to_vec();
                    name[i] = b;
                    let expected = name.eq_ignore_ascii_case(word.as_bytes());
                    assert_eq!(is_word(&name, word), expected, "{name:?} {word}");
                }
            }
            assert!(is_word(word.to_lowercase().as_bytes(), word));
            assert!(!is_word(&word.as_bytes()[1..], word));
            assert!(!is_word(format!("{word}S").as_bytes(), word));
        }
    }

    proptest! {
        #[test]
        fn digits_matches_the_definition_on_numbers(n: u64, zeros in 0usize..4) {
            let text = format!("{}{n}", "0".repeat(zeros));
            prop_assert_eq!(digits(text.as_bytes()), reference(text.as_bytes()));
        }

        #[test]
        fn digits_matches_the_definition_on_any_bytes(
            bytes in proptest::collection::vec(prop_oneof![b'0'..=b'9', any::<u8>()], 0..24)
        ) {
            prop_assert_eq!(digits(&bytes), reference(&bytes));
        }
    }
}
