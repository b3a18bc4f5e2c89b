//! The only place that reads time: the server's wall clock, in microseconds.
//!
//! Limiters are always judged by the server's clock, never a client's, so gateways with
//! skewed clocks still share one view of every window and bucket. `CLOCK_REALTIME` because
//! windows are aligned to the Unix epoch and expiries are absolute Unix milliseconds.
//! (`RedisModule_Microseconds` would do, but only exists from Redis 7.2.)

use redis_rl_core::Micros;

/// The current wall-clock time. A clock before 1970 (or a failing call) reads as 0, which
/// the limiters treat like any clock that stepped back: no time has passed.
#[inline(always)]
pub fn now() -> Micros {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    if rc != 0 {
        return Micros(0);
    }
    let (Ok(secs), Ok(nanos)) = (u64::try_from(ts.tv_sec), u64::try_from(ts.tv_nsec)) else {
        return Micros(0);
    };
    // Unsigned, the division by 1000 is a multiplication.
    Micros(secs.saturating_mul(1_000_000).saturating_add(nanos / 1000))
}
