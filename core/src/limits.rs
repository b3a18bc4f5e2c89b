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
    /// Whether the smallest accepted value is `-min` (a signed parameter such as a UTC
    /// offset).
    pub negative_min: bool,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.negative_min { "-" } else { "" };
        write!(
            f,
            "{} must be an integer between {sign}{} and {}",
            self.name, self.min, self.max
        )
    }
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
}

impl Range {
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
            negative_min: false,
        }
    }
}

/// `COST n`: units taken by one call. Zero is a check that takes nothing.
pub const COST: Range = Range {
    name: "cost",
    min: 0,
    max: MAX_COUNT,
};

/// A positive count parameter such as `capacity` or `limit`.
pub const fn count(name: &'static str) -> Range {
    Range {
        name,
        min: 1,
        max: MAX_COUNT,
    }
}

/// A positive duration parameter in milliseconds such as `refill_ms` or `window_ms`.
pub const fn duration_ms(name: &'static str) -> Range {
    Range {
        name,
        min: 1,
        max: MAX_DURATION_MS,
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
