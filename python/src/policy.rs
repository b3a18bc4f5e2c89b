//! The policy engine for Python (`redis_rl._core.PolicyEngine`): the ASGI middleware asks
//! the same engine as rl-gateway what a request is limited on, under which keys, and how
//! the decision is written, so one TOML gives the same answers in both.

use std::net::IpAddr;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use redis_rl_policy::{
    render, Adjust, Admission, Booking, Config, Engine, Identity, Outcome, Plan, Rendered,
    Response, Verdict,
};

type HeaderList = Vec<(String, Vec<u8>)>;
pub(crate) type PyHeaders = Vec<(Vec<u8>, Vec<u8>)>;

/// A configuration that did not load: the text names the file, the line and the field.
fn config_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

pub(crate) fn py_headers(headers: &[(&'static str, String)]) -> PyHeaders {
    headers
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// `r` with the request's trace id in its problem body, when there is one.
fn traced(r: Response, trace_id: Option<&str>) -> Response {
    match trace_id {
        Some(t) => r.with_trace_id(t),
        None => r,
    }
}

/// A response the middleware sends as is (400, 403, 429, 503).
#[pyclass(frozen, module = "redis_rl._core")]
struct Refusal {
    #[pyo3(get)]
    status: u16,
    #[pyo3(get)]
    headers: PyHeaders,
    body: Vec<u8>,
}

#[pymethods]
impl Refusal {
    /// The problem+json body.
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.body)
    }
}

impl From<Response> for Refusal {
    fn from(r: Response) -> Self {
        Self {
            status: r.status,
            headers: py_headers(&r.headers),
            body: r.body.into_bytes(),
        }
    }
}

/// A request the engine let through its identity checks.
#[pyclass(frozen, module = "redis_rl._core")]
struct Admitted {
    identity: Identity,
    method: String,
    headers: HeaderList,
    peer: Option<IpAddr>,
    /// False: on an allow list, never limited.
    #[pyo3(get)]
    limited: bool,
}

#[pymethods]
impl Admitted {
    /// The API key (look its tier up with it; never log it).
    #[getter]
    fn api_key(&self) -> Option<String> {
        self.identity.api_key.clone()
    }

    /// The key's tenant id (logs).
    #[getter]
    fn tenant(&self) -> Option<String> {
        self.identity.tenant.clone()
    }

    /// The path's normal form (what the application gets).
    #[getter]
    fn path(&self) -> String {
        self.identity.path.clone()
    }
}

/// What a request is limited on.
#[pyclass(frozen, module = "redis_rl._core")]
pub(crate) struct PlanResult {
    plan: Plan,
}

impl PlanResult {
    pub(crate) fn new(plan: Plan) -> Self {
        Self { plan }
    }
}

#[pymethods]
impl PlanResult {
    /// Per item: the core's numbers of its limit in the registry's order, `(values,
    /// options)` (what `Policy.of` takes; a calendar quota's period and offset included).
    #[getter]
    fn numbers(&self) -> Vec<(Vec<u64>, Vec<Option<u64>>)> {
        self.plan
            .items
            .iter()
            .map(|i| {
                let (_, values, options) = i.spec.registry_numbers();
                (values, options)
            })
            .collect()
    }

    /// Per item: `(key, algorithm, limit, window_ms, burst, shadow, failure_mode, name,
    /// label)`; `failure_mode` is `None` for the configuration's.
    #[allow(clippy::type_complexity)]
    #[getter]
    fn items(
        &self,
    ) -> Vec<(
        String,
        &'static str,
        u64,
        u64,
        Option<u64>,
        bool,
        Option<&'static str>,
        String,
        String,
    )> {
        self.plan
            .items
            .iter()
            .map(|i| {
                (
                    i.key.clone(),
                    i.spec.algorithm.config_name(),
                    i.spec.limit,
                    i.spec.window_ms,
                    i.spec.burst,
                    i.shadow,
                    i.failure_mode.map(|m| m.name()),
                    i.name.clone(),
                    i.label.clone(),
                )
            })
            .collect()
    }

    /// Per item: its `delay_max_ms` (`None`: refused at once).
    #[getter]
    fn delays(&self) -> Vec<Option<u64>> {
        self.plan.items.iter().map(|i| i.delay_max_ms).collect()
    }

    /// The tier the request was limited as.
    #[getter]
    fn tier(&self) -> Option<String> {
        self.plan.tier.clone()
    }

    /// The route of the endpoint dimension.
    #[getter]
    fn route(&self) -> String {
        self.plan.route.clone()
    }
}

/// What a request books on each plan item, and how it is settled after the response.
#[pyclass(frozen, module = "redis_rl._core")]
struct BookingResult {
    booking: Booking,
}

#[pymethods]
impl BookingResult {
    /// Per item: the units reserved (1, or a rule's `cost` header).
    #[getter]
    fn units(&self) -> Vec<u64> {
        self.booking.units.clone()
    }

    /// The response headers (or trailers, lower case) the actual cost is read from; empty
    /// when nothing is settled.
    #[getter]
    fn settle_headers(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for name in self.booking.settle.iter().flatten() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    /// Per item, what the response's `headers` (or trailers) say to do: `("keep", 0)`,
    /// `("refund", n)` or `("charge", n)`; and per settle header its outcome (`refund`,
    /// `charge`, `exact`, `missing`, `invalid`).
    #[allow(clippy::type_complexity)]
    fn settlement(
        &self,
        headers: PyHeaders,
    ) -> (Vec<(&'static str, u64)>, Vec<(String, &'static str)>) {
        let headers: HeaderList = headers
            .into_iter()
            .map(|(n, v)| (String::from_utf8_lossy(&n).into_owned(), v))
            .collect();
        let (adjust, outcomes) = self.booking.settlement(&headers);
        let adjust = adjust
            .into_iter()
            .map(|a| match a {
                Adjust::Keep => ("keep", 0),
                Adjust::Refund(n) => ("refund", n),
                Adjust::Charge(n) => ("charge", n),
            })
            .collect();
        let outcomes = outcomes.into_iter().map(|(h, o)| (h, o.name())).collect();
        (adjust, outcomes)
    }
}

/// The decisions as Python passes them: `(verdict, retry_after_ms, remaining,
/// reset_after_ms, shadow, source)` per item.
pub(crate) type PyOutcome = (String, Option<u64>, u64, u64, bool, String);

fn outcomes_of(outcomes: &[PyOutcome]) -> Vec<Outcome> {
    outcomes
        .iter()
        .map(
            |(verdict, retry, remaining, reset, shadow, source)| Outcome {
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
                fail_open: source == "fail_open",
                fail_closed: source == "fail_closed",
            },
        )
        .collect()
}

/// A validated configuration (the TOML of `rl-gateway --config`).
#[pyclass(frozen, module = "redis_rl._core")]
pub(crate) struct PolicyEngine {
    engine: Engine,
}

impl PolicyEngine {
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }
}

fn request<'a>(
    method: &'a str,
    path: &'a str,
    headers: &'a HeaderList,
    peer: Option<IpAddr>,
    route: Option<&'a str>,
) -> redis_rl_policy::Request<'a> {
    redis_rl_policy::Request {
        method,
        path,
        host: None,
        headers,
        peer,
        route,
    }
}

#[pymethods]
impl PolicyEngine {
    /// Parses and validates TOML; `source` names the file in errors (`ValueError`).
    #[staticmethod]
    #[pyo3(signature = (text, source="<config>", routes=Vec::new()))]
    fn from_toml(text: &str, source: &str, routes: Vec<String>) -> PyResult<Self> {
        let config = Config::from_toml_named(text, source).map_err(config_error)?;
        let engine = Engine::new(config, &routes)
            .map_err(|e| config_error(format!("{source}: {}: {}", e.field, e.message)))?;
        Ok(Self { engine })
    }

    /// Parses and validates JSON of the same schema (a mapping built in code).
    #[staticmethod]
    #[pyo3(signature = (text, source="<mapping>", routes=Vec::new()))]
    fn from_json(text: &str, source: &str, routes: Vec<String>) -> PyResult<Self> {
        let config = Config::from_json_named(text, source).map_err(config_error)?;
        let engine = Engine::new(config, &routes)
            .map_err(|e| config_error(format!("{source}: {}: {}", e.field, e.message)))?;
        Ok(Self { engine })
    }

    /// The design's limits (no file).
    #[staticmethod]
    fn default() -> PyResult<Self> {
        let engine = Engine::new(Config::default(), &[])
            .map_err(|e| config_error(format!("{}: {}", e.field, e.message)))?;
        Ok(Self { engine })
    }

    /// The effective plan in words (as `rl-gateway --check-config`).
    fn explain(&self) -> String {
        self.engine.explain()
    }

    /// The id of `api_key` in key names and logs: keyed with the configured
    /// `api_key_digest_secret_file`, else the unkeyed `tenant_id`.
    fn tenant_id(&self, api_key: &str) -> String {
        self.engine.tenant_id(api_key)
    }

    /// Whether API-key digests are keyed with a secret.
    #[getter]
    fn key_digest_is_keyed(&self) -> bool {
        self.engine.key_digest_is_keyed()
    }

    /// The configured failure mode (`open`, `closed`, `local`).
    #[getter]
    fn failure_mode(&self) -> &'static str {
        self.engine.config().failure_mode.name()
    }

    /// The static fleet size (1 when not set).
    #[getter]
    fn instances(&self) -> u32 {
        self.engine.config().instances.map_or(1, |n| n.get())
    }

    /// `(heartbeat_ms, ttl_ms)` of fleet membership (`[fleet]`), `None` when it is off.
    #[getter]
    fn fleet(&self) -> Option<(u64, u64)> {
        let fleet = &self.engine.config().fleet;
        fleet
            .membership
            .then_some((fleet.heartbeat_ms, fleet.ttl_ms))
    }

    /// Whether `instances` is configured (else the local fallback divides by the live
    /// fleet size once membership read it).
    #[getter]
    fn instances_configured(&self) -> bool {
        self.engine.config().instances.is_some()
    }

    /// The key prefix.
    #[getter]
    fn key_prefix(&self) -> String {
        self.engine.config().key_prefix.clone()
    }

    /// Identity and access lists: a `Refusal` (400, 403) or an `Admitted` request.
    /// `headers`: the ASGI scope's (lower-case names); `peer`: the client address;
    /// `trace_id`: the request's W3C trace, put into a refusal's body.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (method, path, headers, peer, request_id, trace_id=None))]
    fn admit(
        &self,
        py: Python<'_>,
        method: &str,
        path: &str,
        headers: PyHeaders,
        peer: Option<&str>,
        request_id: &str,
        trace_id: Option<&str>,
    ) -> PyResult<PyObject> {
        let headers: HeaderList = headers
            .into_iter()
            .map(|(n, v)| (String::from_utf8_lossy(&n).into_owned(), v))
            .collect();
        let peer: Option<IpAddr> = peer.and_then(|p| p.parse().ok());
        let admission = self
            .engine
            .admit(&request(method, path, &headers, peer, None), request_id);
        let (identity, limited) = match admission {
            Admission::Refuse(r) => {
                let r = traced(r, trace_id);
                return Ok(Refusal::from(r).into_pyobject(py)?.into_any().unbind());
            }
            Admission::Pass(id) => (id, false),
            Admission::Limit(id) => (id, true),
        };
        let admitted = Admitted {
            identity,
            method: method.to_string(),
            headers,
            peer,
            limited,
        };
        Ok(admitted.into_pyobject(py)?.into_any().unbind())
    }

    /// Every key and window the request is limited on. `route`: the application's route
    /// template (when no rule path or configured route matches); `tier`: the key's tier.
    #[pyo3(signature = (admitted, route=None, tier=None))]
    fn plan(&self, admitted: &Admitted, route: Option<&str>, tier: Option<&str>) -> PlanResult {
        let a = admitted;
        let req = request(&a.method, &a.identity.path, &a.headers, a.peer, route);
        PlanResult {
            plan: self.engine.plan(&req, &a.identity, tier),
        }
    }

    /// The cap on requests held at once (`delay_max_held`).
    #[getter]
    fn delay_max_held(&self) -> usize {
        self.engine.config().delay_max_held
    }

    /// How long to hold a refused request before serving it, in milliseconds, from the
    /// items' looks (`outcomes` as for `render`, nothing taken); `None`: refuse it.
    fn hold_ms(&self, plan: &PlanResult, outcomes: Vec<PyOutcome>) -> Option<u64> {
        redis_rl_policy::delay::hold_ms(&plan.plan, &outcomes_of(&outcomes))
    }

    /// What the request books on each item of `plan` (a rule's `cost` header, else 1): a
    /// `BookingResult`, or a `Refusal` (400) for a cost header that is not one positive
    /// integer up to 10^15.
    #[pyo3(signature = (admitted, plan, request_id, trace_id=None))]
    fn booking(
        &self,
        py: Python<'_>,
        admitted: &Admitted,
        plan: &PlanResult,
        request_id: &str,
        trace_id: Option<&str>,
    ) -> PyResult<PyObject> {
        let a = admitted;
        let req = request(&a.method, &a.identity.path, &a.headers, a.peer, None);
        match self.engine.booking(&req, &plan.plan, request_id) {
            Ok(booking) => Ok(BookingResult { booking }
                .into_pyobject(py)?
                .into_any()
                .unbind()),
            Err(r) => Ok(Refusal::from(traced(r, trace_id))
                .into_pyobject(py)?
                .into_any()
                .unbind()),
        }
    }

    /// The decision written out: `(status, headers, body)` for a refusal, `(None, headers,
    /// None)` for the headers of an allowed request. `outcomes` per item: `(verdict,
    /// retry_after_ms, remaining, reset_after_ms, shadow, source)`, verdict `allowed`,
    /// `denied` or `never`, source the decision's (`fail_open`, `fail_closed`, ...).
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (plan, outcomes, denied, request_id, trace_id=None))]
    fn render(
        &self,
        py: Python<'_>,
        plan: &PlanResult,
        outcomes: Vec<PyOutcome>,
        denied: Option<usize>,
        request_id: &str,
        trace_id: Option<&str>,
    ) -> (Option<u16>, PyHeaders, Option<Py<PyBytes>>) {
        let outcomes = outcomes_of(&outcomes);
        match render(&plan.plan, &outcomes, denied, request_id) {
            Rendered::Refuse(r) => {
                let r = traced(r, trace_id);
                (
                    Some(r.status),
                    py_headers(&r.headers),
                    Some(PyBytes::new(py, r.body.as_bytes()).unbind()),
                )
            }
            Rendered::Headers(h) => (None, py_headers(&h), None),
        }
    }
}

/// A stable id for an API key that does not reveal it (16 hex digits of its SHA-256).
#[pyfunction]
fn tenant_id(api_key: &str) -> String {
    redis_rl_policy::tenant_id(api_key)
}

/// The caller's request id if it is sane (1 to 128 of `A-Z a-z 0-9 - _ . :`), else None.
#[pyfunction]
#[pyo3(signature = (value=None))]
fn request_id(value: Option<Vec<u8>>) -> Option<String> {
    redis_rl_policy::request_id(value.as_deref())
}

/// The normal form of a path: no duplicate slashes, dot segments or trailing slash.
#[pyfunction]
fn normalize_path(path: &str) -> String {
    redis_rl_policy::normalize_path(path)
}

/// Adds the engine's classes to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tenant_id, m)?)?;
    m.add_function(wrap_pyfunction!(request_id, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_path, m)?)?;
    m.add_class::<PolicyEngine>()?;
    m.add_class::<Admitted>()?;
    m.add_class::<Refusal>()?;
    m.add_class::<PlanResult>()?;
    m.add_class::<BookingResult>()?;
    Ok(())
}
