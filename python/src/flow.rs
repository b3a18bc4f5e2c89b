//! The request flow for Python (`redis_rl._core.Flow`): the ASGI middleware drives the
//! same steps as rl-gateway (admit, plan, ban check, book, decide, render, hold, settle,
//! record) and only runs what each step asks with redis-py, on its own event loop.
//!
//! Steps are tuples: `("tier", api_key)`, `("book", takes, ban_keys)`, `("peek", takes)`,
//! `("force", takes)`, `("respond", Reply)`, `("forward", Forward)`; a take is
//! `(item, key, units)` (`item`: the index into the plan's items).

use std::net::IpAddr;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use redis_rl_flow::{
    commands, DebtWatch, Flow, HttpRequest, Record, RequestFlow, Settle, Step, Take,
};
use redis_rl_policy::{Adjust, Verdict};

use crate::policy::{py_headers, PlanResult, PolicyEngine, PyHeaders, PyOutcome};

type PyTake = (usize, String, u64);

fn take(t: &Take) -> PyTake {
    (t.item, t.key.clone(), t.units)
}

fn takes(ts: &[Take]) -> Vec<PyTake> {
    ts.iter().map(take).collect()
}

fn header_list(headers: PyHeaders) -> Vec<(String, Vec<u8>)> {
    headers
        .into_iter()
        .map(|(n, v)| (String::from_utf8_lossy(&n).into_owned(), v))
        .collect()
}

fn decided(outcomes: &[PyOutcome]) -> PyResult<Vec<redis_rl_flow::Decided>> {
    outcomes
        .iter()
        .map(|(verdict, retry, remaining, reset, shadow, source)| {
            Ok(redis_rl_flow::Decided {
                verdict: match verdict.as_str() {
                    "allowed" => Verdict::Allowed,
                    "denied" => Verdict::Denied {
                        retry_after_ms: retry.unwrap_or(0),
                    },
                    _ => Verdict::Never,
                },
                remaining: *remaining,
                reset_after_ms: *reset,
                shadow: *shadow,
                source: redis_rl_flow::Source::from_name(source)
                    .ok_or_else(|| PyValueError::new_err(format!("unknown source {source:?}")))?,
            })
        })
        .collect()
}

/// What a request leaves behind: refusals to count towards bans and the top offenders,
/// units to give back.
#[pyclass(frozen, module = "redis_rl._core", name = "FlowRecord")]
struct PyRecord {
    /// The tier label (`none` without a key, `-` when the access lists decided).
    #[pyo3(get)]
    tier: String,
    /// `(policy, subject, strike)`: `strike` the ban script's command when the refusal
    /// counts towards a ban (its reply goes to `ban_index_command`), else `None`.
    #[pyo3(get)]
    refusals: Vec<(String, String, Option<Vec<String>>)>,
    /// Takes to give back (`RL.REFUND`): a banned request's units.
    #[pyo3(get)]
    give_back: Vec<PyTake>,
    /// `(label, outcome, source)` per item.
    #[pyo3(get)]
    counts: Vec<(String, &'static str, Option<&'static str>)>,
    /// `held`, `too_long`, `over_cap` or `None`.
    #[pyo3(get)]
    delayed: Option<&'static str>,
    /// The remaining milliseconds of the ban that refused the request.
    #[pyo3(get)]
    banned_ms: Option<u64>,
    /// A tier name the configuration does not know.
    #[pyo3(get)]
    unknown_tier: Option<String>,
}

impl From<Record> for PyRecord {
    fn from(r: Record) -> Self {
        Self {
            tier: r.tier,
            refusals: r
                .refusals
                .into_iter()
                .map(|x| {
                    let strike = x.ban.map(|b| commands::strike(&x.subject, &b).args);
                    (x.policy, x.subject, strike)
                })
                .collect(),
            give_back: takes(&r.give_back),
            counts: r
                .counts
                .into_iter()
                .map(|c| (c.label, c.outcome, c.source))
                .collect(),
            delayed: r.delayed,
            banned_ms: r.banned_ms,
            unknown_tier: r.unknown_tier,
        }
    }
}

/// A reservation to settle once the response is known.
#[pyclass(frozen, module = "redis_rl._core", name = "FlowSettle")]
struct PySettle {
    settle: Settle,
}

#[pymethods]
impl PySettle {
    /// The response headers (or trailers) the actual cost is read from, lower case.
    fn headers(&self) -> Vec<String> {
        self.settle
            .headers()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// True when `headers` carry every header the settlement reads (else: the trailers).
    fn found_in(&self, headers: PyHeaders) -> bool {
        self.settle.found_in(&header_list(headers))
    }

    /// From the response's `headers` (or trailers): `(item, key, "refund"|"charge", n)` per
    /// item to adjust in Redis, and per settle header its outcome.
    #[allow(clippy::type_complexity)]
    fn adjust(
        &self,
        headers: PyHeaders,
    ) -> (
        Vec<(usize, String, &'static str, u64)>,
        Vec<(String, &'static str)>,
    ) {
        let (items, outcomes) = self.settle.adjust(&header_list(headers));
        let items = items
            .into_iter()
            .filter_map(|(t, a)| match a {
                Adjust::Keep => None,
                Adjust::Refund(n) => Some((t.item, t.key, "refund", n)),
                Adjust::Charge(n) => Some((t.item, t.key, "charge", n)),
            })
            .collect();
        (items, outcomes)
    }

    /// After the charges `headers` report were made (the same headers as [`PySettle::adjust`]):
    /// per charged item whose window forgets its debt at its boundary (fixed window,
    /// calendar quota), its watch: read the key's count (`RL.STATE`), then `hold`.
    fn debt_watches(&self, headers: PyHeaders) -> Vec<PyDebtWatch> {
        let (items, _) = self.settle.adjust(&header_list(headers));
        self.settle
            .debt_watches(&items)
            .into_iter()
            .map(|watch| PyDebtWatch { watch })
            .collect()
    }
}

/// A charged item whose window forgets its debt: the key to read, and the hold to write.
#[pyclass(frozen, module = "redis_rl._core", name = "FlowDebtWatch")]
struct PyDebtWatch {
    watch: DebtWatch,
}

#[pymethods]
impl PyDebtWatch {
    /// The limiter key charged (its count: `RL.STATE`, the module's or the twin's).
    #[getter]
    fn key(&self) -> String {
        self.watch.key.clone()
    }

    /// The command (arguments, name first) holding the subject when the window counts
    /// `count` units with `left_ms` left; `None` when nothing is owed.
    fn hold(&self, count: u64, left_ms: u64) -> Option<Vec<String>> {
        self.watch.hold(count, left_ms).map(|c| c.args)
    }
}

/// Answer with this; the application is not called.
#[pyclass(frozen, module = "redis_rl._core", name = "FlowReply")]
struct PyReply {
    #[pyo3(get)]
    status: u16,
    #[pyo3(get)]
    headers: PyHeaders,
    body: Vec<u8>,
    #[pyo3(get)]
    record: Py<PyRecord>,
    /// A settlement report's reservation, to settle from the request's own headers.
    #[pyo3(get)]
    settle: Option<Py<PySettle>>,
}

#[pymethods]
impl PyReply {
    /// The problem+json body.
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.body)
    }
}

/// Call the application.
#[pyclass(frozen, module = "redis_rl._core", name = "FlowForward")]
struct PyForward {
    /// Headers to set on the application's response.
    #[pyo3(get)]
    headers: PyHeaders,
    /// Hold the request this long first (then drop or `release` the request's flow).
    #[pyo3(get)]
    hold_ms: Option<u64>,
    #[pyo3(get)]
    settle: Option<Py<PySettle>>,
    /// The path the application sees.
    #[pyo3(get)]
    path: String,
    #[pyo3(get)]
    record: Py<PyRecord>,
}

fn step(py: Python<'_>, step: Step) -> PyResult<PyObject> {
    let settle = |s: Option<Settle>| -> PyResult<Option<Py<PySettle>>> {
        s.map(|settle| Py::new(py, PySettle { settle })).transpose()
    };
    let tuple = match step {
        Step::Tier { api_key } => ("tier", api_key).into_pyobject(py)?,
        Step::Book(b) => ("book", takes(&b.takes), b.ban_reads).into_pyobject(py)?,
        Step::Peek(ts) => ("peek", takes(&ts)).into_pyobject(py)?,
        Step::Force(ts) => ("force", takes(&ts)).into_pyobject(py)?,
        Step::Respond(r) => {
            let reply = PyReply {
                status: r.response.status,
                headers: py_headers(&r.response.headers),
                body: r.response.body.into_bytes(),
                record: Py::new(py, PyRecord::from(r.record))?,
                settle: settle(r.settle)?,
            };
            ("respond", Py::new(py, reply)?).into_pyobject(py)?
        }
        Step::Forward(f) => {
            let forward = PyForward {
                headers: py_headers(&f.headers),
                hold_ms: f.hold_ms,
                settle: settle(f.settle)?,
                path: f.path,
                record: Py::new(py, PyRecord::from(f.record))?,
            };
            ("forward", Py::new(py, forward)?).into_pyobject(py)?
        }
    };
    Ok(Bound::<PyTuple>::into_any(tuple).unbind())
}

/// The request flow of one configuration: build one per middleware, start every request
/// from it.
#[pyclass(frozen, module = "redis_rl._core", name = "Flow")]
struct PyFlow {
    flow: Flow,
}

#[pymethods]
impl PyFlow {
    #[new]
    fn new(engine: &PolicyEngine) -> Self {
        Self {
            flow: Flow::new(engine.engine().clone()),
        }
    }

    /// Requests held right now.
    #[getter]
    fn held(&self) -> usize {
        self.flow.held()
    }

    /// Starts a request: `(request_flow, first_step)`. `now_ms`: a monotonic clock in
    /// milliseconds (bans read a moment ago are dated with it).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (method, path, headers, peer, request_id, trace_id=None, route=None, settle_report=false, now_ms=0))]
    fn start(
        &self,
        py: Python<'_>,
        method: String,
        path: String,
        headers: PyHeaders,
        peer: Option<&str>,
        request_id: String,
        trace_id: Option<String>,
        route: Option<String>,
        settle_report: bool,
        now_ms: u64,
    ) -> PyResult<(PyRequestFlow, PyObject)> {
        let req = HttpRequest {
            method,
            path,
            host: None,
            headers: header_list(headers),
            peer: peer.and_then(|p| p.parse::<IpAddr>().ok()),
            route,
            request_id,
            trace_id,
            settle_report,
        };
        let (flow, first) = self.flow.start(req, now_ms);
        Ok((PyRequestFlow { flow }, step(py, first)?))
    }
}

/// One request's way through the flow; each method takes the answer of the step that
/// named it and returns the next step.
#[pyclass(module = "redis_rl._core", name = "RequestFlow")]
struct PyRequestFlow {
    flow: RequestFlow,
}

#[pymethods]
impl PyRequestFlow {
    /// The plan (empty before `book`).
    #[getter]
    fn plan(&self) -> PlanResult {
        PlanResult::new(self.flow.plan().clone())
    }

    /// The answer to `tier`.
    #[pyo3(signature = (tier=None))]
    fn tier(&mut self, py: Python<'_>, tier: Option<String>) -> PyResult<PyObject> {
        step(py, self.flow.tier(tier))
    }

    /// The answer to `book`: per take `(verdict, retry_after_ms, remaining, reset_after_ms,
    /// shadow, source)`, the index of the refusing take, each ban key's `PTTL` reply (`None`:
    /// failed), `now_ms`.
    fn booked(
        &mut self,
        py: Python<'_>,
        decisions: Vec<PyOutcome>,
        denied: Option<usize>,
        bans: Vec<Option<i64>>,
        now_ms: u64,
    ) -> PyResult<PyObject> {
        let d = decided(&decisions)?;
        step(py, self.flow.booked(d, denied, bans, now_ms))
    }

    /// The answer to `peek` (`None`: Redis did not answer).
    #[pyo3(signature = (decisions=None))]
    fn peeked(&mut self, py: Python<'_>, decisions: Option<Vec<PyOutcome>>) -> PyResult<PyObject> {
        let d = decisions.as_deref().map(decided).transpose()?;
        step(py, self.flow.peeked(d))
    }

    /// The answer to `force`.
    fn forced(&mut self, py: Python<'_>, ok: bool) -> PyResult<PyObject> {
        step(py, self.flow.forced(ok))
    }

    /// Ends the request's hold.
    fn release(&mut self) {
        self.flow.release();
    }
}

/// After the ban script's `reply` for `(policy, subject)`: the command adding the new ban
/// to the index under `prefix`, or `None` when no ban started.
#[pyfunction]
fn ban_index_command(
    prefix: &str,
    policy: &str,
    subject: &str,
    reply: Vec<i64>,
) -> PyResult<Option<Vec<String>>> {
    let new = commands::parse_strike(&reply).map_err(PyValueError::new_err)?;
    Ok(new.map(|n| commands::index_ban(prefix, policy, subject, &n).args))
}

/// The command adding `counts` (`(subject, refusals)`) of `policy` to the top offenders
/// of the unix minute `minute`.
#[pyfunction]
fn top_add_command(
    prefix: &str,
    policy: &str,
    minute: u64,
    counts: Vec<(String, u64)>,
) -> Vec<String> {
    commands::top_add(prefix, policy, minute, &counts).args
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFlow>()?;
    m.add_class::<PyRequestFlow>()?;
    m.add_class::<PyReply>()?;
    m.add_class::<PyForward>()?;
    m.add_class::<PyRecord>()?;
    m.add_class::<PySettle>()?;
    m.add_class::<PyDebtWatch>()?;
    m.add_function(wrap_pyfunction!(ban_index_command, m)?)?;
    m.add_function(wrap_pyfunction!(top_add_command, m)?)?;
    Ok(())
}
