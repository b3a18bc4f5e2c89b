//! The parameters shared by the window algorithms (fixed window, sliding window, sliding
//! log): `limit` units per `window_ms`.

use crate::algorithm::positional;
use crate::limits::{self, ParamError, Range};

/// Validated `limit window_ms` parameters, `limit` at most `MAX_LIMIT`.
///
/// The algorithms name it [`FixedWindowParams`](crate::fixed_window::FixedWindowParams),
/// [`SlidingWindowParams`](crate::sliding_window::SlidingWindowParams) and
/// [`SlidingLogParams`](crate::sliding_log::SlidingLogParams) (whose `limit` is capped lower).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WindowParams<const MAX_LIMIT: u64> {
    pub(crate) limit: u64,
    pub(crate) window_ms: u64,
}

impl<const MAX_LIMIT: u64> WindowParams<MAX_LIMIT> {
    /// The ranges of `limit` and `window_ms`, in this order.
    pub const PARAMS: [Range; 2] = [
        Range {
            name: "limit",
            min: 1,
            max: MAX_LIMIT,
            spelling: crate::limits::Spelling::Integer,
        },
        limits::duration_ms("window_ms"),
    ];

    /// Checks every parameter against its documented range.
    ///
    /// ```
    /// use redis_rl_core::fixed_window::FixedWindowParams;
    /// use redis_rl_core::sliding_log::SlidingLogParams;
    /// // 100 requests per minute.
    /// assert!(FixedWindowParams::new(100, 60_000).is_ok());
    /// assert!(FixedWindowParams::new(0, 60_000).is_err());
    /// assert!(FixedWindowParams::new(1_000, 0).is_err());
    /// assert!(SlidingLogParams::new(10_001, 60_000).is_err());
    /// ```
    pub fn new(limit: u64, window_ms: u64) -> Result<Self, ParamError> {
        Self::from_values(&[limit, window_ms])
    }

    /// [`Self::new`] from a slice in the order of [`Self::PARAMS`].
    pub(crate) fn from_values(values: &[u64]) -> Result<Self, ParamError> {
        let [limit, window_ms] = positional(&Self::PARAMS, values)?;
        Ok(Self { limit, window_ms })
    }

    /// Most units per window.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// Window length in milliseconds.
    pub const fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// Window length in microseconds (at most 10^15: `window_ms` <= 10^12).
    pub(crate) const fn window_us(&self) -> u64 {
        self.window_ms * 1000
    }
}
