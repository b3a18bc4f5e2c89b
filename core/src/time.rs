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

/// `n / d` of a 128-bit count by a 64-bit divisor: one 64-bit division when `n` fits in 64
/// bits (the common case), where the 128-bit routine is a call of several dozen
/// instructions.
#[inline]
pub(crate) fn div_u128(n: u128, d: u64) -> u128 {
    match u64::try_from(n) {
        Ok(n) => u128::from(n / d),
        Err(_) => n / u128::from(d),
    }
}

/// `n / d` rounded up, as [`div_u128`].
#[inline]
pub(crate) fn div_ceil_u128(n: u128, d: u64) -> u128 {
    match u64::try_from(n) {
        Ok(n) => u128::from(n.div_ceil(d)),
        Err(_) => n.div_ceil(u128::from(d)),
    }
}

/// `us_times_d / d` microseconds rounded up to milliseconds, saturating: the same as
/// `Micros::ceil_millis_u128(us_times_d.div_ceil(d))` (rounding up twice is rounding up
/// once by the product) with one division instead of two. `d` x 1000 must fit in `u64`.
#[inline]
pub(crate) fn ceil_millis_of(us_times_d: u128, d: u64) -> Millis {
    let ms = div_ceil_u128(us_times_d, d * 1000);
    Millis(u64::try_from(ms).unwrap_or(u64::MAX))
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
    fn one_division_is_the_two_it_replaces() {
        let ns = [
            0u128,
            1,
            999,
            1000,
            1001,
            u128::from(u64::MAX) - 1,
            u128::from(u64::MAX),
            u128::from(u64::MAX) + 1,
            u128::from(u64::MAX) * 1000 + 999,
            1 << 100,
            u128::MAX / 2,
            u128::MAX,
        ];
        let ds = [
            1u64,
            3,
            1000,
            999_983,
            1_000_000_000_000_000,
            u64::MAX / 1000,
        ];
        for &n in &ns {
            for &d in &ds {
                assert_eq!(div_u128(n, d), n / u128::from(d));
                assert_eq!(div_ceil_u128(n, d), n.div_ceil(u128::from(d)));
                assert_eq!(
                    ceil_millis_of(n, d),
                    Micros::ceil_millis_u128(n.div_ceil(u128::from(d))),
                    "{n} {d}"
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn one_division_is_the_two_it_replaces_anywhere(
            n in proptest::prelude::any::<u128>(),
            small in 0u64..=u64::MAX,
            d in 1u64..=u64::MAX / 1000,
        ) {
            for n in [n, u128::from(small)] {
                proptest::prop_assert_eq!(div_u128(n, d), n / u128::from(d));
                proptest::prop_assert_eq!(
                    ceil_millis_of(n, d),
                    Micros::ceil_millis_u128(n.div_ceil(u128::from(d)))
                );
            }
        }
    }

    #[test]
    fn millis_to_micros_saturates() {
        assert_eq!(Millis(3).as_micros(), Micros(3_000));
        assert_eq!(Millis(u64::MAX).as_micros(), Micros(u64::MAX));
    }
}
