//! `redis_rl._core`: the redis-rl core algorithms as a Python extension.
//!
//! Python validates policies here (so the ranges and error texts are the server's own) and
//! the local fallback decides here, with the very functions the Redis module runs: one
//! implementation of the math. Nothing in this file does arithmetic of its own beyond the
//! per-instance share of a limit.

// A panic would surface as a Python exception, but the rule of the project holds here too.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod policy;

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

use redis_rl_core::fixed_window::{self, FixedWindowParams, FixedWindowState};
use redis_rl_core::gcra::{self, GcraParams, GcraState};
use redis_rl_core::limits::{self, ParamError, Range};
use redis_rl_core::sliding_log::{self, SlidingLogParams, SlidingLogState};
use redis_rl_core::sliding_window::{self, SlidingWindowParams, SlidingWindowState};
use redis_rl_core::token_bucket::{self, TokenBucketParams, TokenBucketState};
use redis_rl_core::{Decision, Micros, Outcome};

/// A whole number from Python, or the core's range error.
///
/// A value that is not a `u64` (negative, or beyond 2^64) is outside every documented range,
/// so it is passed on as `u64::MAX` and the core names the parameter in its own words.
fn number(name: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        let type_name = value.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {type_name}"
        )));
    }
    Ok(value.extract::<u64>().unwrap_or(u64::MAX))
}

fn param_error(e: ParamError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn in_range(range: Range, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    range.check(number(range.name, value)?).map_err(param_error)
}

/// Checks a cost (`COST n`: 0 to 10^15) and returns it.
#[pyfunction]
fn check_cost(cost: &Bound<'_, PyAny>) -> PyResult<u64> {
    in_range(limits::COST, cost)
}

#[derive(Clone, Copy, Debug)]
enum Spec {
    TokenBucket(TokenBucketParams),
    Sliding(SlidingWindowParams),
    Fixed(FixedWindowParams),
    Gcra(GcraParams),
    Log(SlidingLogParams),
}

/// Validated parameters of one algorithm (built by `Policy`).
#[pyclass(frozen, module = "redis_rl._core")]
#[derive(Clone, Copy, Debug)]
struct Params {
    spec: Spec,
}

#[pymethods]
impl Params {
    /// `RL.TOKENBUCKET` parameters.
    #[staticmethod]
    fn token_bucket(
        capacity: &Bound<'_, PyAny>,
        refill_tokens: &Bound<'_, PyAny>,
        refill_ms: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let p = TokenBucketParams::new(
            number("capacity", capacity)?,
            number("refill_tokens", refill_tokens)?,
            number("refill_ms", refill_ms)?,
        )
        .map_err(param_error)?;
        Ok(Self {
            spec: Spec::TokenBucket(p),
        })
    }

    /// `RL.SLIDING` parameters.
    #[staticmethod]
    fn sliding(limit: &Bound<'_, PyAny>, window_ms: &Bound<'_, PyAny>) -> PyResult<Self> {
        let p = SlidingWindowParams::new(number("limit", limit)?, number("window_ms", window_ms)?)
            .map_err(param_error)?;
        Ok(Self {
            spec: Spec::Sliding(p),
        })
    }

    /// `RL.FIXED` parameters.
    #[staticmethod]
    fn fixed(limit: &Bound<'_, PyAny>, window_ms: &Bound<'_, PyAny>) -> PyResult<Self> {
        let p = FixedWindowParams::new(number("limit", limit)?, number("window_ms", window_ms)?)
            .map_err(param_error)?;
        Ok(Self {
            spec: Spec::Fixed(p),
        })
    }

    /// `RL.GCRA` parameters (`burst=None`: the server's default, `limit`).
    #[staticmethod]
    #[pyo3(signature = (limit, period_ms, burst=None))]
    fn gcra(
        limit: &Bound<'_, PyAny>,
        period_ms: &Bound<'_, PyAny>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let burst = burst.map(|b| number("burst", b)).transpose()?;
        let p = GcraParams::new(
            number("limit", limit)?,
            number("period_ms", period_ms)?,
            burst,
        )
        .map_err(param_error)?;
        Ok(Self {
            spec: Spec::Gcra(p),
        })
    }

    /// `RL.LOG` parameters (`limit` at most 10000).
    #[staticmethod]
    fn log(limit: &Bound<'_, PyAny>, window_ms: &Bound<'_, PyAny>) -> PyResult<Self> {
        let p = SlidingLogParams::new(number("limit", limit)?, number("window_ms", window_ms)?)
            .map_err(param_error)?;
        Ok(Self { spec: Spec::Log(p) })
    }

    /// The parameters of one of `instances` processes sharing this limit (local fallback):
    /// counts divided (at least 1), refill periods multiplied, so the rates divide exactly.
    fn share(&self, instances: u32) -> PyResult<Self> {
        let n = u64::from(instances.max(1));
        if n == 1 && !matches!(self.spec, Spec::Log(_)) {
            return Ok(*self);
        }
        let part = |count: u64| (count / n).max(1);
        let longer = |ms: u64| ms.saturating_mul(n).min(limits::MAX_DURATION_MS);
        // A shared limit is a valid limit: the divided counts stay within their ranges.
        let spec = match self.spec {
            Spec::TokenBucket(p) => Spec::TokenBucket(
                TokenBucketParams::new(
                    part(p.capacity()),
                    p.refill_tokens(),
                    longer(p.refill_ms()),
                )
                .map_err(param_error)?,
            ),
            Spec::Sliding(p) => Spec::Sliding(
                SlidingWindowParams::new(part(p.limit()), p.window_ms()).map_err(param_error)?,
            ),
            Spec::Fixed(p) => Spec::Fixed(
                FixedWindowParams::new(part(p.limit()), p.window_ms()).map_err(param_error)?,
            ),
            Spec::Gcra(p) => Spec::Gcra(
                GcraParams::new(p.limit(), longer(p.period_ms()), Some(part(p.burst())))
                    .map_err(param_error)?,
            ),
            // A log's state grows with its limit: above the engine's bound the share runs as
            // a sliding window of the same limit and window, as in the Rust fallback.
            Spec::Log(p) if part(p.limit()) > redis_rl_policy::LOCAL_LOG_MAX => Spec::Sliding(
                SlidingWindowParams::new(part(p.limit()), p.window_ms()).map_err(param_error)?,
            ),
            Spec::Log(p) => Spec::Log(
                SlidingLogParams::new(part(p.limit()), p.window_ms()).map_err(param_error)?,
            ),
        };
        Ok(Self { spec })
    }

    fn __repr__(&self) -> String {
        format!("Params({:?})", self.spec)
    }
}

/// The stored state of one local key, of the algorithm that wrote it.
#[derive(Clone, Debug)]
enum State {
    TokenBucket(TokenBucketState),
    Sliding(SlidingWindowState),
    Fixed(FixedWindowState),
    Gcra(GcraState),
    Log(SlidingLogState),
}

/// Runs the core algorithm of `spec` on `stored` (a state another algorithm left, after a
/// policy change, counts as none: the local store is a fallback, not a record).
fn decide(
    spec: &Spec,
    stored: Option<&State>,
    now: Micros,
    cost: u64,
) -> (Decision, Option<State>) {
    match spec {
        Spec::TokenBucket(p) => {
            let prev = match stored {
                Some(State::TokenBucket(s)) => Some(*s),
                _ => None,
            };
            let (d, s) = token_bucket::check(prev, now, p, cost);
            (d, s.map(State::TokenBucket))
        }
        Spec::Sliding(p) => {
            let prev = match stored {
                Some(State::Sliding(s)) => Some(*s),
                _ => None,
            };
            let (d, s) = sliding_window::check(prev, now, p, cost);
            (d, s.map(State::Sliding))
        }
        Spec::Fixed(p) => {
            let prev = match stored {
                Some(State::Fixed(s)) => Some(*s),
                _ => None,
            };
            let (d, s) = fixed_window::check(prev, now, p, cost);
            (d, s.map(State::Fixed))
        }
        Spec::Gcra(p) => {
            let prev = match stored {
                Some(State::Gcra(s)) => Some(*s),
                _ => None,
            };
            let (d, s) = gcra::check(prev, now, p, cost);
            (d, s.map(State::Gcra))
        }
        Spec::Log(p) => {
            let prev = match stored {
                Some(State::Log(s)) => Some(s.clone()),
                _ => None,
            };
            let (d, s) = sliding_log::check(prev, now, p, cost);
            (d, s.map(State::Log))
        }
    }
}

struct Slot {
    state: State,
    /// When the limiter is idle again: past it, the entry means nothing and may be dropped.
    idle_at: Micros,
}

/// The reply's five fields: `(allowed, limit, remaining, retry_after_ms, reset_after_ms)`,
/// `retry_after_ms` -1 when no wait helps, exactly as the module replies.
type Reply = (bool, u64, u64, i64, u64);

fn reply(d: &Decision) -> Reply {
    let retry = match d.outcome {
        Outcome::Allowed => 0,
        Outcome::Denied { retry_after } => i64::try_from(retry_after.0).unwrap_or(i64::MAX),
        Outcome::Never => -1,
    };
    (d.is_allowed(), d.limit, d.remaining, retry, d.reset_after.0)
}

/// An in-process store of limiter states, bounded to `capacity` keys, deciding with the
/// core algorithms. Thread-safe; the caller gives the time (microseconds since the Unix
/// epoch, so fixed and sliding windows align with the server's).
#[pyclass(frozen, module = "redis_rl._core")]
struct LocalStore {
    map: Mutex<HashMap<String, Slot>>,
    capacity: usize,
}

#[pymethods]
impl LocalStore {
    #[new]
    #[pyo3(signature = (capacity=100_000))]
    fn new(capacity: usize) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// Decides `cost` units for `key` at `now_us`; `peek` decides without storing.
    /// Returns the module's reply fields.
    #[pyo3(signature = (key, params, cost, now_us, peek=false))]
    fn check(&self, key: &str, params: &Params, cost: u64, now_us: u64, peek: bool) -> Reply {
        let now = Micros(now_us);
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let (d, new_state) = decide(&params.spec, map.get(key).map(|s| &s.state), now, cost);
        if let (Some(state), false) = (new_state, peek) {
            let idle_at = Micros(now.0.saturating_add(d.reset_after.as_micros().0));
            if !map.contains_key(key) && map.len() >= self.capacity {
                evict(&mut map, now, self.capacity);
            }
            map.insert(key.to_owned(), Slot { state, idle_at });
        }
        reply(&d)
    }

    /// Keys held now.
    fn __len__(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Forgets every key.
    fn clear(&self) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Makes room in a full store: idle entries first; if still full, an eighth of it, so the
/// next inserts do not pay for another scan (a dropped key starts again from idle).
fn evict(map: &mut HashMap<String, Slot>, now: Micros, capacity: usize) {
    map.retain(|_, slot| slot.idle_at > now);
    if map.len() >= capacity {
        let target = capacity - capacity.div_ceil(8);
        let excess: Vec<String> = map.keys().take(map.len() - target).cloned().collect();
        for key in excess {
            map.remove(&key);
        }
    }
}

/// The Lua twin of the module's commands (`lua/rl.lua`), for servers without the module.
const LUA_TWIN: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../lua/rl.lua"));

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Params>()?;
    m.add_class::<LocalStore>()?;
    m.add_function(wrap_pyfunction!(check_cost, m)?)?;
    m.add("MAX_COUNT", limits::MAX_COUNT)?;
    m.add("MAX_DURATION_MS", limits::MAX_DURATION_MS)?;
    m.add("LUA_TWIN", LUA_TWIN)?;
    policy::register(m)?;
    Ok(())
}
