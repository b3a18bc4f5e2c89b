//! Integer time with the unit in the type, so milliseconds and microseconds cannot be mixed up.

/// An instant (microseconds since the Unix epoch) or a duration in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Micros(pub u64);

/// An instant (milliseconds since the Unix epoch) or a duration in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(pub u64);

impl Micros {
    /// Converts to milliseconds, rounding up.
    ///
    /// This is the one rounding rule for every wait we report (`retry_after`, `reset_after`)
    /// and every expiry we set: rounding up means a caller who waits the reported time is
    /// never too early, and a key never expires before its limiter is idle.
    ///
    /// ```
    /// use redis_rl_core::{Micros, Millis};
    /// assert_eq!(Micros(1).ceil_millis(), Millis(1));
    /// assert_eq!(Micros(2_000).ceil_millis(), Millis(2));
    /// assert_eq!(Micros(0).ceil_millis(), Millis(0));
    /// ```
    pub const fn ceil_millis(self) -> Millis {
        Millis(self.0.div_ceil(1000))
    }

    /// Converts a `u128` microsecond count (as the limiters compute them) rounding up to
    /// milliseconds, saturating at `u64::MAX`.
    pub fn ceil_millis_u128(us: u128) -> Millis {
        Millis(u64::try_from(us.div_ceil(1000)).unwrap_or(u64::MAX))
    }
}

impl Millis {
    /// Converts to microseconds, saturating on overflow.
    pub const fn as_micros(self) -> Micros {
        Micros(self.0.saturating_mul(1000))
    }

    /// Adds two durations (or an instant and a duration), saturating on overflow.
    pub const fn saturating_add(self, other: Millis) -> Millis {
        Millis(self.0.saturating_add(other.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_the_next_millisecond() {
        assert_eq!(Micros(999).ceil_millis(), Millis(1));
        assert_eq!(Micros(1_000).ceil_millis(), Millis(1));
        assert_eq!(Micros(1_001).ceil_millis(), Millis(2));
        assert_eq!(Micros(u64::MAX).ceil_millis(), Millis(u64::MAX / 1000 + 1));
        assert_eq!(Micros::ceil_millis_u128(u128::MAX), Millis(u64::MAX));
    }

    #[test]
    fn millis_to_micros_saturates() {
        assert_eq!(Millis(3).as_micros(), Micros(3_000));
        assert_eq!(Millis(u64::MAX).as_micros(), Micros(u64::MAX));
    }
}
