//! `redis_rl._core`: the redis-rl core algorithms as a Python extension.
//!
//! Python validates policies here (so the ranges and error texts are the server's own) and
//! the local fallback decides here, with the very functions the Redis module runs: one
//! implementation of the math. Nothing here names an algorithm: the registry is handed to
//! Python as data (`REGISTRY_JSON`, read by `redis_rl._registry`), and parameters are
//! built, shared and run through the core's registry types.

// A panic would surface as a Python exception, but the rule of the project holds here too.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod flow;
mod op;
mod policy;
mod slots;

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

use redis_rl_core::limits::{self, ParamError, Range};
use redis_rl_core::{AnyParams, AnyState, ConfigRate, Decision, Kind, Micros, Outcome};

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

/// Validated parameters of one rate limiter (built by `Policy`): the core's own.
#[pyclass(frozen, module = "redis_rl._core")]
#[derive(Clone, Copy, Debug)]
struct Params {
    params: AnyParams,
}

/// The rate limiter a configuration name stands for, or the error naming the known ones.
fn limiter(name: &str) -> PyResult<Kind> {
    Kind::from_config_name(name)
        .filter(|k| k.is_limiter())
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "algorithm must be one of {}, not {name:?}",
                Kind::CONFIG_NAMES.join(", ")
            ))
        })
}

#[pymethods]
impl Params {
    /// The parameters of the rate limiter `algorithm` (its config name, `"sliding"`) from
    /// its numbers in the registry's order: `values` the positional ones, `options` the
    /// options (`None`: not given). Each number is checked against the server's range.
    #[new]
    #[pyo3(signature = (algorithm, values, options=Vec::new()))]
    fn new(
        algorithm: &str,
        values: Vec<Bound<'_, PyAny>>,
        options: Vec<Option<Bound<'_, PyAny>>>,
    ) -> PyResult<Self> {
        let kind = limiter(algorithm)?;
        let names = kind.params().iter().map(|r| r.name);
        let values = values
            .iter()
            .zip(names)
            .map(|(v, name)| number(name, v))
            .collect::<PyResult<Vec<u64>>>()?;
        let option_names = kind.options().iter().map(|o| o.range.name);
        let options = options
            .iter()
            .zip(option_names)
            .map(|(v, name)| v.as_ref().map(|v| number(name, v)).transpose())
            .collect::<PyResult<Vec<Option<u64>>>>()?;
        let params = AnyParams::from_numbers(kind, &values, &options)
            .ok_or_else(|| PyValueError::new_err(format!("{algorithm} is not a rate limiter")))?
            .map_err(param_error)?;
        Ok(Self { params })
    }

    /// The parameters of the rate limiter `algorithm` for a configured rate (`limit` per
    /// `window_ms`, `burst`): which parameters they feed is the registry's, and errors name
    /// `limit` and `window_ms`.
    #[staticmethod]
    #[pyo3(signature = (algorithm, limit, window_ms, burst=None))]
    fn from_rate(
        algorithm: &str,
        limit: &Bound<'_, PyAny>,
        window_ms: &Bound<'_, PyAny>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rate = ConfigRate {
            limit: number("limit", limit)?,
            window_ms: number("window_ms", window_ms)?,
            burst: burst.map(|b| number("burst", b)).transpose()?,
        };
        let params = AnyParams::from_rate(limiter(algorithm)?, &rate)
            .ok_or_else(|| PyValueError::new_err(format!("{algorithm} is not a rate limiter")))?
            .map_err(param_error)?;
        Ok(Self { params })
    }

    /// The config name of the algorithm (`"sliding"`).
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.params.kind().config_name()
    }

    /// The positional parameters, as the command takes them.
    #[getter]
    fn values(&self) -> Vec<u64> {
        self.params.numbers().values().to_vec()
    }

    /// The options, in the registry's order (`None`: not given, the server's default).
    #[getter]
    fn options(&self) -> Vec<Option<u64>> {
        self.params.numbers().options().to_vec()
    }

    /// `(limit, window_ms)`: the quota a client is shown (`q` and `w` of `RateLimit-Policy`).
    fn quota(&self) -> (u64, u64) {
        self.params.quota()
    }

    /// The parameters of one of `instances` processes sharing this limit (local fallback),
    /// as the registry divides it.
    fn share(&self, instances: u32) -> PyResult<Self> {
        let params = self
            .params
            .local_share(u64::from(instances.max(1)))
            .map_err(param_error)?;
        Ok(Self { params })
    }

    fn __repr__(&self) -> String {
        format!("Params({:?})", self.params)
    }
}

struct Slot {
    state: AnyState,
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
        // A state another algorithm left (after a policy change) counts as none: the local
        // store is a fallback, not a record.
        let stored = map.get(key).map(|s| s.state.clone());
        let (d, new_state) = params.params.check(stored, now, cost);
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
    m.add("REGISTRY_JSON", redis_rl_core::export::json())?;
    // Who decided: the names of the one list (`redis_rl.decision.Source` must name only these).
    m.add("SOURCES", redis_rl_core::Source::NAMES.to_vec())?;
    policy::register(m)?;
    flow::register(m)?;
    op::register(m)?;
    Ok(())
}
