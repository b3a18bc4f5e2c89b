//! `RL.STATE key`: a read-only view of a limiter, for debugging. Never writes.
//!
//! The bytes are decoded by `encoding`; what is shown of a state is the core algorithm's
//! view (`Kind::view`), so a new algorithm needs nothing here.

use redis_module::{raw, Context, RedisString, RedisValue};
use redis_rl_core::algorithm::{Algorithm as CoreAlgorithm, StateView};
use redis_rl_core::Micros;

use super::{Command, Handled};
use crate::docs::{key, Keys, Syntax};
use crate::encoding::{self, DecodeError, Kind, Visit};
use crate::error::Error;
use crate::{clock, reply, store};

pub const COMMAND: Command = Command {
    name: c"RL.STATE",
    flags: c"readonly fast",
    acl: c"read fast",
    keys: Keys::First {
        flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
    },
    arity: 2,
    summary: c"Shows a limiter's algorithm, stored parameters, current count or tokens and TTL, without writing.",
    complexity: c"O(1), O(N) for LOG and CONCURRENCY",
    syntax: Syntax::Args(&[key()]),
    handler: run,
};

fn run(ctx: &Context, args: &[RedisString]) -> Result<Handled, Error> {
    let [_, key] = args else {
        return Err(Error::WrongArity);
    };
    // Looked at without changing it (not even its encoding), and copied whole only when
    // its length is one a valid limiter has.
    let Some(value) = store::peek(ctx, key, true)? else {
        return Ok(RedisValue::Null.into());
    };
    let (algorithm, fields) = value
        .whole()
        .and_then(|(_, bytes)| describe(bytes, clock::now()))?;
    Ok(reply::state(ctx, algorithm.name(), &fields, value.ttl).into())
}

/// The view of a decoded state as of an instant.
struct View(Micros);

impl Visit for View {
    type Out = StateView;

    fn visit<A: CoreAlgorithm>(self, state: A::State) -> StateView {
        A::view(&state, self.0)
    }
}

/// RL.STATE's view of a stored value as of `now`: its algorithm and the fields the core
/// shows of its state.
pub fn describe(bytes: &[u8], now: Micros) -> Result<(Kind, StateView), DecodeError> {
    let algorithm = encoding::algorithm_of(bytes)?;
    Ok((algorithm, encoding::decode_any(bytes, View(now))?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::Stored;
    use proptest::prelude::*;
    use redis_rl_core::algorithm::StateValue;
    use redis_rl_core::concurrency::{ConcurrencyState, Lease};
    use redis_rl_core::fixed_window::FixedWindowState;
    use redis_rl_core::gcra::{check, GcraParams};
    use redis_rl_core::sliding_log::{LogEntry, SlidingLogState};
    use redis_rl_core::Millis;

    #[test]
    fn describes_the_window_and_its_count_now() {
        let state = FixedWindowState {
            window_ms: 60_000,
            window_start: Millis(1_700_000_040_000),
            count: 42,
        };
        let e = state.encode();
        let (algorithm, fields) = describe(e.as_bytes(), Micros(1_700_000_099_999_999)).unwrap();
        assert_eq!(algorithm, Kind::FixedWindow);
        assert_eq!(
            fields,
            vec![
                ("window_ms", StateValue::Int(60_000)),
                ("window_start_ms", StateValue::Int(1_700_000_040_000)),
                ("count", StateValue::Int(42)),
            ]
        );
        // Once the window has ended, the count is zero.
        let (_, fields) = describe(e.as_bytes(), Micros(1_700_000_100_000_000)).unwrap();
        assert_eq!(fields[2], ("count", StateValue::Int(0)));
    }

    #[test]
    fn describes_the_limit_the_arrival_time_and_the_units_in_use() {
        // 10 per second, 4 units taken at 1_700_000_000 s.
        let p = GcraParams::new(10, 1_000, None).unwrap();
        let state = check(None, Micros(1_700_000_000_000_000), &p, 4).1.unwrap();
        let e = state.encode();
        let (algorithm, fields) = describe(e.as_bytes(), Micros(1_700_000_000_150_000)).unwrap();
        assert_eq!(algorithm, Kind::Gcra);
        assert_eq!(
            fields,
            vec![
                ("limit", StateValue::Int(10)),
                ("period_ms", StateValue::Int(1_000)),
                ("tat_ms", StateValue::Int(1_700_000_000_400)),
                ("used", StateValue::Int(3)),
            ]
        );
    }

    #[test]
    fn describes_the_log_window_and_its_count_now() {
        let base = 1_700_000_000_000_000;
        let entry = |at: u64, count| LogEntry {
            at: Micros(at),
            count,
        };
        let state = SlidingLogState {
            window_ms: 1_000,
            entries: vec![entry(base, 2), entry(base + 600_000, 3)],
        };
        let (algorithm, fields) =
            describe(state.encode().as_bytes(), Micros(base + 1_200_000)).unwrap();
        assert_eq!(algorithm, Kind::SlidingLog);
        let int = StateValue::Int;
        assert_eq!(
            fields,
            vec![
                ("window_ms", int(1_000)),
                ("count", int(3)),
                ("entries", int(2)),
                ("oldest_at_ms", int(base / 1000)),
                ("newest_at_ms", int(base / 1000 + 600)),
            ]
        );
    }

    #[test]
    fn describes_the_leases_held_now() {
        let base = 1_700_000_000_000_000;
        let lease = |id: &[u8], at: u64| Lease {
            id: id.to_vec(),
            expires_at: Micros(at),
        };
        let state = ConcurrencyState {
            leases: vec![
                lease(b"a", base),
                lease(b"b", base + 1_500),
                lease(b"c", base + 9_000),
            ],
        };
        let (algorithm, fields) = describe(state.encode().as_bytes(), Micros(base)).unwrap();
        assert_eq!(algorithm, Kind::Concurrency);
        let int = StateValue::Int;
        assert_eq!(
            fields,
            vec![
                ("held", int(2)),
                ("next_expiry_ms", int(base / 1000 + 2)),
                ("last_expiry_ms", int(base / 1000 + 9)),
            ]
        );
        let (_, fields) = describe(state.encode().as_bytes(), Micros(base + 9_000)).unwrap();
        assert_eq!(fields[0], ("held", int(0)));
        assert_eq!(fields[1], ("next_expiry_ms", int(0)));
    }

    proptest! {
        #[test]
        fn our_header_with_random_fields_never_panics(
            tag in prop::sample::select(redis_rl_core::Kind::ALL.iter().map(|k| k.tag()).collect::<Vec<_>>()),
            body in prop::collection::vec(any::<u8>(), 0..40),
            now in any::<u64>(),
        ) {
            let v = [&b"\0RL\x01"[..], &[tag], &body].concat();
            let _ = describe(&v, Micros(now));
        }
    }
}
