//! The documented bounds on every number a caller controls, and the error for breaking them.
//!
//! The bounds keep every intermediate product inside `u128` (10^15 units x 10^15 µs = 10^30,
//! far below 3.4 x 10^38), so the limiters never overflow, and they are generous enough for
//! any real quota (a billion requests per second, a period of decades).

use std::fmt;

/// Largest count a caller may give: capacity, refill_tokens, limit and cost (10^15).
pub const MAX_COUNT: u64 = 1_000_000_000_000_000;

/// Largest duration a caller may give, in milliseconds (10^12 ms, about 31.7 years).
pub const MAX_DURATION_MS: u64 = 1_000_000_000_000;

/// A parameter outside its documented range.
///
/// The `Display` text is the public error text (without Redis's `ERR ` prefix):
/// `capacity must be an integer between 1 and 1000000000000000`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamError {
    /// The parameter's name as the user writes it (`capacity`, `window_ms`, ...).
    pub name: &'static str,
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
    /// How the value is written (the bounds are shown that way).
    pub spelling: Spelling,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.spelling {
            Spelling::Integer => write!(
                f,
                "{} must be an integer between {} and {}",
                self.name, self.min, self.max
            ),
            Spelling::Offset(bias) => {
                let signed = |v: u64| i128::from(v) - i128::from(bias);
                write!(
                    f,
                    "{} must be an integer between {} and {}",
                    self.name,
                    signed(self.min),
                    signed(self.max)
                )
            }
            Spelling::Words(words) => {
                write!(f, "{} must be ", self.name)?;
                let last = words.len().saturating_sub(1);
                for (i, word) in words.iter().enumerate() {
                    let sep = match i {
                        0 => "",
                        i if i == last => " or ",
                        _ => ", ",
                    };
                    write!(f, "{sep}{word}")?;
                }
                Ok(())
            }
        }
    }
}

/// How a parameter is written in commands and configurations; the core carries every
/// parameter as a `u64` (so generic code, stored specs and clients handle one type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Spelling {
    /// A decimal integer, the value itself.
    Integer,
    /// A signed decimal integer `v`, carried as `v + bias` (a UTC offset in minutes).
    Offset(u64),
    /// One of these words, in any case, carried as its position from 1 (`MONTH` of `DAY,
    /// WEEK, MONTH, YEAR` is 3).
    Words(&'static [&'static str]),
}

impl std::error::Error for ParamError {}

/// The accepted range of one named parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// The parameter's name as the user writes it.
    pub name: &'static str,
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
    /// How it is written.
    pub spelling: Spelling,
}

impl Range {
    /// A range of decimal integers.
    pub const fn integer(name: &'static str, min: u64, max: u64) -> Range {
        Range {
            name,
            min,
            max,
            spelling: Spelling::Integer,
        }
    }

    /// Reads `text` as this parameter is written and checks the range.
    ///
    /// ```
    /// use redis_rl_core::limits::{Range, Spelling};
    /// let tz = Range { name: "tz", min: 0, max: 2_878, spelling: Spelling::Offset(1_439) };
    /// assert_eq!(tz.parse(b"-300"), Ok(1_139));
    /// assert_eq!(tz.show(1_139), "-300");
    /// assert_eq!(tz.parse(b"1440").unwrap_err().to_string(), "tz must be an integer between -1439 and 1439");
    /// let period = Range { name: "period", min: 1, max: 2, spelling: Spelling::Words(&["DAY", "WEEK"]) };
    /// assert_eq!(period.parse(b"week"), Ok(2));
    /// assert_eq!(period.parse(b"2").unwrap_err().to_string(), "period must be DAY or WEEK");
    /// ```
    pub fn parse(&self, text: &[u8]) -> Result<u64, ParamError> {
        let decimal = |digits: &[u8]| -> Option<u64> {
            if digits.is_empty() || digits.len() > 19 {
                return None;
            }
            digits.iter().try_fold(0u64, |v, &b| {
                let d = b.checked_sub(b'0').filter(|d| *d <= 9)?;
                v.checked_mul(10)?.checked_add(u64::from(d))
            })
        };
        let value = match self.spelling {
            Spelling::Integer => decimal(text),
            Spelling::Offset(bias) => match text.split_first() {
                Some((b'-', digits)) => decimal(digits).and_then(|n| bias.checked_sub(n)),
                _ => decimal(text).and_then(|n| n.checked_add(bias)),
            },
            Spelling::Words(words) => words
                .iter()
                .position(|w| text.eq_ignore_ascii_case(w.as_bytes()))
                .and_then(|i| u64::try_from(i + 1).ok()),
        };
        value.map_or(Err(self.error()), |v| self.check(v))
    }

    /// How `value` is written (the inverse of [`Range::parse`]).
    pub fn show(&self, value: u64) -> String {
        match self.spelling {
            Spelling::Integer => value.to_string(),
            Spelling::Offset(bias) => (i128::from(value) - i128::from(bias)).to_string(),
            Spelling::Words(words) => usize::try_from(value)
                .ok()
                .and_then(|v| v.checked_sub(1))
                .and_then(|i| words.get(i))
                .map_or_else(|| value.to_string(), |w| (*w).to_string()),
        }
    }

    /// Returns `value` if it is inside the range, else the error naming the parameter.
    pub const fn check(&self, value: u64) -> Result<u64, ParamError> {
        if value >= self.min && value <= self.max {
            Ok(value)
        } else {
            Err(self.error())
        }
    }

    /// The error for a value outside this range (or not a number at all).
    pub const fn error(&self) -> ParamError {
        ParamError {
            name: self.name,
            min: self.min,
            max: self.max,
            spelling: self.spelling,
        }
    }
}

/// `COST n`: units taken by one call. Zero is a check that takes nothing.
pub const COST: Range = Range {
    name: "cost",
    min: 0,
    max: MAX_COUNT,
    spelling: Spelling::Integer,
};

/// A positive count parameter such as `capacity` or `limit`.
pub const fn count(name: &'static str) -> Range {
    Range {
        name,
        min: 1,
        max: MAX_COUNT,
        spelling: Spelling::Integer,
    }
}

/// A positive duration parameter in milliseconds such as `refill_ms` or `window_ms`.
pub const fn duration_ms(name: &'static str) -> Range {
    Range {
        name,
        min: 1,
        max: MAX_DURATION_MS,
        spelling: Spelling::Integer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_names_the_parameter_and_range() {
        let err = count("capacity").check(0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "capacity must be an integer between 1 and 1000000000000000"
        );
        assert_eq!(COST.check(0), Ok(0));
        assert_eq!(COST.check(MAX_COUNT), Ok(MAX_COUNT));
        assert!(COST.check(MAX_COUNT + 1).is_err());
        assert!(duration_ms("window_ms").check(MAX_DURATION_MS + 1).is_err());
    }
}
