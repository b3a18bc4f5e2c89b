//! The client's sans-I/O op for Python (`redis_rl._core.Layers`, `Op`): the limiters of
//! `redis_rl.limiter` and `redis_rl.sync` send what an op asks with redis-py, on their own
//! event loop or thread, and feed back the reply or the error; the commands (the module's or
//! the Lua twin's), the reply parsers, the deny cache, the circuit breaker, the failure
//! modes and the local fallback are the Rust client's (`redis_rl_client::sansio`), the
//! same as the Node.js package's.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use redis::Value;

use redis_rl_client::sansio::{self, LayersConfig, LeaseConfig, OpError, Outcome};
use redis_rl_client::settle::Settled;
use redis_rl_client::{
    BreakerConfig, Decision, FailureMode, FleetConfig, Policy, ServerImpl, Verdict,
};

use crate::slots::AcrossSlots;
use crate::Params;

/// A decision as Python's `Decision` takes it: `(allowed, limit, remaining, retry_after_ms
/// (None: never), reset_after_ms, source, shadow)`.
pub(crate) type PyDecision = (bool, u64, u64, Option<u64>, u64, &'static str, bool);

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn decision(d: &Decision, shadow: bool) -> PyDecision {
    let retry = match d.verdict {
        Verdict::Allowed => Some(0),
        Verdict::Denied { retry_after } => Some(ms(retry_after)),
        Verdict::Never => None,
    };
    (
        matches!(d.verdict, Verdict::Allowed),
        d.limit,
        d.remaining,
        retry,
        ms(d.reset_after),
        d.source.name(),
        d.shadow || shadow,
    )
}

/// `ReplyError` (the package's) for a reply that is not the command's, `ValueError` for the
/// call's own arguments.
pub(crate) fn py_error(e: OpError) -> PyErr {
    match e {
        OpError::Invalid(m) => PyValueError::new_err(m),
        OpError::Failed(m) => PyRuntimeError::new_err(m),
    }
}

/// A reply as redis-py hands it over (RESP2 or RESP3), as the client's parsers read it.
fn value(reply: &Bound<'_, PyAny>) -> PyResult<Value> {
    if reply.is_none() {
        return Ok(Value::Nil);
    }
    if reply.is_instance_of::<PyBool>() {
        return Ok(Value::Int(i64::from(reply.extract::<bool>()?)));
    }
    if reply.is_instance_of::<PyInt>() {
        return Ok(match reply.extract::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::SimpleString(reply.str()?.to_string()),
        });
    }
    if let Ok(b) = reply.downcast::<PyBytes>() {
        let bytes = b.as_bytes();
        return Ok(
            match std::str::from_utf8(bytes).ok().and_then(|s| s.parse().ok()) {
                Some(i) => Value::Int(i),
                None => Value::BulkString(bytes.to_vec()),
            },
        );
    }
    if let Ok(s) = reply.downcast::<PyString>() {
        let s = s.to_cow()?;
        return Ok(match s.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::BulkString(s.as_bytes().to_vec()),
        });
    }
    if let Ok(list) = reply.downcast::<PyList>() {
        return list
            .iter()
            .map(|v| value(&v))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(tuple) = reply.downcast::<PyTuple>() {
        return tuple
            .iter()
            .map(|v| value(&v))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(dict) = reply.downcast::<PyDict>() {
        return dict
            .iter()
            .map(|(k, v)| Ok((value(&k)?, value(&v)?)))
            .collect::<PyResult<_>>()
            .map(Value::Map);
    }
    if reply.is_instance_of::<PyFloat>() {
        return Ok(Value::SimpleString(reply.str()?.to_string()));
    }
    Ok(Value::SimpleString(reply.repr()?.to_string()))
}

/// The client's policy from Python's: parameters, failure mode, instances, shadow.
fn policy(params: &Params, failure: &str, instances: u32, shadow: bool) -> PyResult<Policy> {
    let mode = match failure {
        "open" => FailureMode::Open,
        "closed" => FailureMode::Closed,
        "local" => FailureMode::Local {
            instances: NonZeroU32::new(instances).unwrap_or(NonZeroU32::MIN),
        },
        other => {
            return Err(PyValueError::new_err(format!(
                "failure mode must be open, closed or local, not {other:?}"
            )))
        }
    };
    Ok(Policy::new(params.params).on_failure(mode).shadow(shadow))
}

/// The layers one limiter's ops share.
#[pyclass(frozen, module = "redis_rl._core")]
pub(crate) struct Layers {
    layers: Arc<sansio::Layers>,
}

/// A policy as the ops take it, made once per Python `Policy`.
#[pyclass(frozen, module = "redis_rl._core", name = "OpPolicy")]
#[derive(Clone, Copy)]
pub(crate) struct OpPolicy {
    pub(crate) policy: Policy,
}

#[pymethods]
impl OpPolicy {
    /// `hot`: a `check_all` serves the key from leases (when the layers hold leases).
    #[new]
    #[pyo3(signature = (params, failure, instances, shadow, hot=false))]
    fn new(
        params: &Params,
        failure: &str,
        instances: u32,
        shadow: bool,
        hot: bool,
    ) -> PyResult<Self> {
        Ok(Self {
            policy: policy(params, failure, instances, shadow)?.hot(hot),
        })
    }
}

#[pymethods]
impl Layers {
    /// `engine`: `auto`, `module` or `lua`; `deny_cache`: keys (0: off); the breaker opens
    /// after `failures` in a row for `open_ms`; `local_capacity`: keys of the fallback.
    /// `fleet`: `(key, heartbeat_ms, ttl_ms, divides)` for fleet membership (`divides`: the
    /// local fallback divides by the live fleet size). `leases`: `(lifetime_ms, demand_ms,
    /// max_percent)` to serve hot keys from leases.
    #[new]
    #[pyo3(signature = (engine, cluster, deny_cache, failures, open_ms, local_capacity, fleet=None, leases=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        engine: &str,
        cluster: bool,
        deny_cache: usize,
        failures: u32,
        open_ms: u64,
        local_capacity: usize,
        fleet: Option<(String, u64, u64, bool)>,
        leases: Option<(u64, u64, u64)>,
    ) -> PyResult<Self> {
        if let Some((lifetime_ms, demand_ms, max_percent)) = leases {
            if lifetime_ms == 0 || demand_ms == 0 || !(1..=100).contains(&max_percent) {
                return Err(PyValueError::new_err(
                    "leases: lifetime_ms and demand_ms must be at least 1, max_percent between 1 and 100",
                ));
            }
        }
        let leases = leases.map(|(lifetime_ms, demand_ms, max_percent)| LeaseConfig {
            lifetime: Duration::from_millis(lifetime_ms),
            demand: Duration::from_millis(demand_ms),
            max_percent,
            ..LeaseConfig::default()
        });
        let server_impl: ServerImpl = engine.parse().map_err(PyValueError::new_err)?;
        let fleet_divides = fleet.as_ref().is_some_and(|f| f.3);
        let fleet = fleet
            .map(|(key, heartbeat_ms, ttl_ms, _)| {
                let config = FleetConfig {
                    heartbeat: Duration::from_millis(heartbeat_ms),
                    ttl: Duration::from_millis(ttl_ms),
                    ..FleetConfig::new(key)
                };
                config.validate().map(|()| config)
            })
            .transpose()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let config = LayersConfig {
            server_impl,
            cluster,
            deny_cache: NonZeroUsize::new(deny_cache),
            breaker: BreakerConfig {
                failure_threshold: failures.max(1),
                open_for: Duration::from_millis(open_ms),
            },
            local_capacity: local_capacity.max(1),
            // `check` never raises for Redis trouble in Python either.
            errors_fail_over: true,
            fleet,
            fleet_divides,
            leases,
        };
        Ok(Self {
            layers: Arc::new(sansio::Layers::new(config)),
        })
    }

    fn check(&self, key: String, policy: &OpPolicy, cost: u64, peek: bool) -> Op {
        Op::new(self.layers.check(key, policy.policy, cost, peek))
    }

    /// Several keys all or nothing, one `RL.ALL` per hash slot, shadow keys on their own.
    fn check_all(&self) -> AcrossSlots {
        AcrossSlots::new(self.layers.check_all_across(AcrossSlots::SCHEDULE))
    }

    /// Every key's own decision (`RL.ALL ... FORCE` or `PEEK`), one call per hash slot.
    fn each(&self, force: bool) -> AcrossSlots {
        AcrossSlots::new(self.layers.each_across(force, AcrossSlots::SCHEDULE))
    }

    fn take_upto(&self, key: String, policy: &OpPolicy, n: u64, peek: bool) -> Op {
        Op::new(self.layers.take_upto(key, policy.policy, n, peek))
    }

    fn refund(&self, key: String, policy: &OpPolicy, amount: u64) -> Op {
        Op::new(self.layers.refund(key, policy.policy, amount))
    }

    fn settle(&self, key: String, policy: &OpPolicy, reserved: u64, actual: u64) -> Op {
        Op::new(self.layers.settle(key, policy.policy, reserved, actual))
    }

    fn reset(&self, key: String) -> Op {
        Op::new(self.layers.reset(key))
    }

    /// One of the module's commands as it goes out now (the module's, or the twin's);
    /// other commands as they are.
    fn encode(&self, command: Vec<String>) -> Vec<String> {
        self.layers.encode(command)
    }

    /// The command to send after the error reply `message` to `command` (the module's
    /// form), or `None`.
    fn retry(&self, command: Vec<String>, message: &str) -> Option<Vec<String>> {
        self.layers.retry(&command, message)
    }

    /// The next work not tied to a request that is due at `now_ms` (wall-clock ms): the
    /// fleet heartbeat (its result is the fleet size, 0 while unknown), then the refunds of
    /// leases that ended. Run from a timer, again until `None`.
    fn pending(&self, now_ms: u64) -> Option<Op> {
        self.layers.pending(now_ms).map(Op::new)
    }

    /// The `RL.REFUND` ops of every lease's unspent units, at shutdown.
    fn release_leases(&self) -> Vec<Op> {
        self.layers
            .release_leases()
            .into_iter()
            .map(Op::new)
            .collect()
    }

    /// `(takes, granted, hits, refunds, refunded, dropped)` of the leases since start.
    fn lease_stats(&self) -> (u64, u64, u64, u64, u64, u64) {
        let s = self.layers.lease_stats();
        (s.takes, s.granted, s.hits, s.refunds, s.refunded, s.dropped)
    }

    /// Leaving the fleet at shutdown (`None` without membership).
    fn leave(&self) -> Option<Op> {
        self.layers.leave().map(Op::new)
    }

    /// The live fleet size once read (`None` before, or without membership).
    #[getter]
    fn fleet_size(&self) -> Option<u32> {
        self.layers.fleet_size()
    }

    /// `module` or `lua`: the route the next call takes.
    #[getter]
    fn route(&self) -> &'static str {
        if self.layers.twin() {
            "lua"
        } else {
            "module"
        }
    }

    /// `closed`, `open` or `half_open`.
    #[getter]
    fn breaker_state(&self) -> &'static str {
        self.layers.breaker_state().name()
    }

    /// `(opened, closed)`: the breaker's transitions since start.
    fn breaker_transitions(&self) -> (u64, u64) {
        let s = self.layers.breaker().stats();
        (s.opened, s.closed)
    }

    /// Whether Redis may be called now (a raw query); tell the breaker how it went with
    /// `call_ended`.
    fn permit(&self) -> bool {
        self.layers.breaker().permit() != redis_rl_client::breaker::Permit::Reject
    }

    /// A raw query ended: `outage` when Redis could not answer.
    fn call_ended(&self, outage: bool) {
        if outage {
            self.layers.breaker().on_failure();
        } else {
            self.layers.breaker().on_success();
        }
    }
}

/// One call in progress: `start()`, then `feed(reply)` or `fail(message, outage)` until
/// they return `None`; then `result()`.
#[pyclass(module = "redis_rl._core")]
pub(crate) struct Op {
    pub(crate) inner: sansio::Op,
}

impl Op {
    pub(crate) fn new(inner: sansio::Op) -> Self {
        Self { inner }
    }
}

#[pymethods]
impl Op {
    fn start(&mut self) -> PyResult<Option<Vec<String>>> {
        self.inner.start().map_err(py_error)
    }

    fn feed(&mut self, reply: &Bound<'_, PyAny>) -> PyResult<Option<Vec<String>>> {
        let reply = value(reply)?;
        self.inner.feed(&reply).map_err(py_error)
    }

    fn fail(&mut self, message: &str, outage: bool) -> PyResult<Option<Vec<String>>> {
        self.inner.fail(message, outage).map_err(py_error)
    }

    /// The outcome: a decision tuple (`check`), `(kind, units, decision or None)`
    /// (`settle`), `(granted, decision)` (`take_upto`) or an int (`refund`,
    /// `reset`).
    fn result(&self, py: Python<'_>) -> PyResult<PyObject> {
        let shadow = self.inner.policy_shadow();
        Ok(match self.inner.outcome() {
            Some(Outcome::Decision(d)) => {
                decision(d, shadow).into_pyobject(py)?.into_any().unbind()
            }
            Some(Outcome::Multi(m)) => {
                let ds: Vec<PyDecision> = m.decisions.iter().map(|d| decision(d, false)).collect();
                (m.denied, ds).into_pyobject(py)?.into_any().unbind()
            }
            Some(Outcome::Grant(g)) => (g.granted, decision(&g.decision, false))
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            Some(Outcome::Units(u)) => u.into_pyobject(py)?.into_any().unbind(),
            Some(Outcome::Settled { settled, units }) => {
                let (kind, charged) = match settled {
                    Settled::Exact => ("exact", None),
                    Settled::Refunded(_) => ("refunded", None),
                    Settled::Charged(d) => ("charged", Some(decision(d, false))),
                };
                (kind, *units, charged)
                    .into_pyobject(py)?
                    .into_any()
                    .unbind()
            }
            None => return Err(PyRuntimeError::new_err("the op has no outcome yet")),
        })
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Layers>()?;
    m.add_class::<OpPolicy>()?;
    m.add_class::<Op>()?;
    m.add_class::<AcrossSlots>()?;
    Ok(())
}
