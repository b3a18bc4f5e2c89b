//! The request flow for Node (`Flow`, `RequestFlow`): the middleware drives the same steps
//! as rl-gateway and the Python middleware (admit, plan, ban check, book, decide, render,
//! hold, settle, record) and only runs what each step asks with the application's own
//! Redis client. Every call is synchronous and short: plain data in and out.
//!
//! A step is a plain object: `{kind: "tier", apiKey}`, `{kind: "book", takes, banReads}`,
//! `{kind: "peek", takes}`, `{kind: "force", takes}`, `{kind: "respond", status, headers,
//! body, record, settle}`, `{kind: "forward", headers, holdMs, path, record, settle}`; a
//! take is `{item, key, units}` (`item`: the index into `policies()`).

use std::net::IpAddr;
use std::num::NonZeroU32;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde_json::{json, Value};

use redis_rl_client::sansio::{self, Outcome};
use redis_rl_client::{
    Decision, FailureMode, Policy as ClientPolicy, Verdict as ClientVerdict, WindowCount,
};
use redis_rl_flow::{commands, DebtWatch, Record, Settle, Step, Take};
use redis_rl_middleware::TraceContext;
use redis_rl_policy::{Adjust, Config, Engine, Verdict};

use crate::core::Core;
use crate::policy::Policy;

fn config_error(e: impl std::fmt::Display) -> Error {
    Error::new(Status::InvalidArg, e.to_string())
}

fn takes(ts: &[Take]) -> Value {
    ts.iter()
        .map(|t| json!({"item": t.item, "key": t.key, "units": t.units}))
        .collect()
}

fn headers(hs: &[(&'static str, String)]) -> Value {
    hs.iter().map(|(n, v)| json!([n, v])).collect()
}

/// Separates the words of one string handed across the addon (a header name or value, a key
/// of the flow, a number: none holds a line feed). One string crosses in one napi call; an
/// array of them costs a call per word.
pub(crate) const SEP: char = '\n';

/// Headers as Node's `rawHeaders` joined by line feeds: name, value, name, value...
fn flat_header_list(hs: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    fill_header_list(&mut out, hs);
    out
}

/// [`flat_header_list`] into `list`, reusing its entries' memory.
pub(crate) fn fill_header_list(list: &mut Vec<(String, Vec<u8>)>, hs: &str) {
    let mut words = hs.split(SEP);
    let mut n = 0;
    while let (Some(name), Some(value)) = (words.next(), words.next()) {
        match list.get_mut(n) {
            Some((old_name, old_value)) => {
                old_name.clear();
                old_name.push_str(name);
                old_name.make_ascii_lowercase();
                old_value.clear();
                old_value.extend_from_slice(value.as_bytes());
            }
            None => list.push((name.to_ascii_lowercase(), value.as_bytes().to_vec())),
        }
        n += 1;
    }
    list.truncate(n);
}

/// `req`'s id when none was given: its `X-Request-Id` when the front ends' rule keeps it
/// (`redis_rl_policy::request_id`), else a new UUID (written into the string it has).
fn choose_request_id(req: &mut redis_rl_flow::HttpRequest) {
    let given = req
        .headers
        .iter()
        .find(|(name, _)| name == REQUEST_ID)
        .and_then(|(_, value)| redis_rl_policy::request_id(Some(value)));
    match given {
        Some(id) => req.request_id = id,
        None => req.request_id.push_str(
            uuid::Uuid::new_v4()
                .hyphenated()
                .encode_lower(&mut uuid::Uuid::encode_buffer()),
        ),
    }
}

/// The request id's header (as the flow's header list has its names: lowercase).
const REQUEST_ID: &str = "x-request-id";

fn header_list(hs: Vec<Vec<String>>) -> Vec<(String, Vec<u8>)> {
    hs.into_iter()
        .filter_map(|mut pair| {
            let value = pair.pop()?;
            let name = pair.pop()?;
            Some((name.to_ascii_lowercase(), value.into_bytes()))
        })
        .collect()
}

/// The usual request leaves nothing behind: no record to build and hand over.
pub(crate) fn leaves_nothing(r: &Record) -> bool {
    r.refusals.is_empty()
        && r.give_back.is_empty()
        && r.delayed.is_none()
        && r.banned_ms.is_none()
        && r.unknown_tier.is_none()
}

fn record(r: Record) -> Value {
    if leaves_nothing(&r) {
        return Value::Null;
    }
    let refusals: Vec<Value> = r
        .refusals
        .into_iter()
        .map(|x| {
            let strike = x.ban.map(|b| commands::strike(&x.subject, &b).args);
            json!({"policy": x.policy, "subject": x.subject, "strike": strike})
        })
        .collect();
    json!({
        "tier": r.tier,
        "refusals": refusals,
        "giveBack": takes(&r.give_back),
        "delayed": r.delayed,
        "bannedMs": r.banned_ms,
        "unknownTier": r.unknown_tier,
    })
}

/// One item's decision as the limiter made it (`retryAfterMs` absent when denied for
/// good; `source`: the decision's, `redis`, `deny_cache`, ...).
#[napi(object)]
pub struct FlowOutcome {
    pub allowed: bool,
    pub retry_after_ms: Option<f64>,
    pub remaining: f64,
    pub reset_after_ms: f64,
    pub shadow: bool,
    pub source: String,
}

fn whole(v: f64) -> u64 {
    // Numbers from the limiter's own decisions: whole and in range.
    if v.is_finite() && v > 0.0 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = v as u64;
        n
    } else {
        0
    }
}

fn decided(outcomes: &[FlowOutcome]) -> Result<Vec<redis_rl_flow::Decided>> {
    outcomes
        .iter()
        .map(|o| {
            Ok(redis_rl_flow::Decided {
                verdict: match (o.allowed, o.retry_after_ms) {
                    (true, _) => Verdict::Allowed,
                    (false, Some(r)) => Verdict::Denied {
                        retry_after_ms: whole(r),
                    },
                    (false, None) => Verdict::Never,
                },
                remaining: whole(o.remaining),
                reset_after_ms: whole(o.reset_after_ms),
                shadow: o.shadow,
                source: redis_rl_flow::Source::from_name(&o.source).ok_or_else(|| {
                    Error::new(Status::InvalidArg, format!("unknown source {:?}", o.source))
                })?,
            })
        })
        .collect()
}

/// A decision of the addon's own op as the flow takes it.
fn decided_of(d: &Decision) -> Result<redis_rl_flow::Decided> {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    Ok(redis_rl_flow::Decided {
        verdict: match d.verdict {
            ClientVerdict::Allowed => Verdict::Allowed,
            ClientVerdict::Denied { retry_after } => Verdict::Denied {
                retry_after_ms: ms(retry_after),
            },
            ClientVerdict::Never => Verdict::Never,
        },
        remaining: d.remaining,
        reset_after_ms: ms(d.reset_after),
        shadow: d.shadow,
        source: redis_rl_flow::Source::from_name(d.source.name()).ok_or_else(|| {
            Error::new(
                Status::GenericFailure,
                format!("unknown source {:?}", d.source.name()),
            )
        })?,
    })
}

/// The request flow of one configuration: build one per middleware, start every request
/// from it.
#[napi]
pub struct Flow {
    flow: redis_rl_flow::Flow,
    engine: Engine,
    /// The requests between [`Flow::begin`] and their end, by number (see `booking.rs`).
    pub(crate) pending: crate::booking::Pending,
}

fn engine(
    config: std::result::Result<Config, redis_rl_policy::ConfigError>,
    source: &str,
    routes: &[String],
) -> Result<Engine> {
    let config = config.map_err(config_error)?;
    Engine::new(config, routes)
        .map_err(|e| config_error(format!("{source}: {}: {}", e.field, e.message)))
}

#[napi]
impl Flow {
    /// Parses and validates TOML (rl-gateway's `--config`); `source` names the file in
    /// errors, with the line and the field.
    #[napi(factory)]
    pub fn from_toml(text: String, source: String, routes: Option<Vec<String>>) -> Result<Self> {
        let routes = routes.unwrap_or_default();
        let engine = engine(Config::from_toml_named(&text, &source), &source, &routes)?;
        Ok(Self::of(engine))
    }

    /// Parses and validates JSON of the same schema (an object built in code).
    #[napi(factory)]
    pub fn from_json(text: String, source: String, routes: Option<Vec<String>>) -> Result<Self> {
        let routes = routes.unwrap_or_default();
        let engine = engine(Config::from_json_named(&text, &source), &source, &routes)?;
        Ok(Self::of(engine))
    }

    fn of(engine: Engine) -> Self {
        Self {
            flow: redis_rl_flow::Flow::new(engine.clone()),
            engine,
            pending: crate::booking::Pending::default(),
        }
    }

    /// The key prefix (bans' index, top offenders).
    #[napi(getter)]
    pub fn key_prefix(&self) -> String {
        self.engine.config().key_prefix.clone()
    }

    /// `[heartbeatMs, ttlMs]` of fleet membership (`[fleet]`), `null` when it is off.
    #[napi(getter)]
    pub fn fleet(&self) -> Option<Vec<f64>> {
        let fleet = &self.engine.config().fleet;
        fleet.membership.then(|| {
            vec![
                crate::policy::to_f64(fleet.heartbeat_ms),
                crate::policy::to_f64(fleet.ttl_ms),
            ]
        })
    }

    /// `[lifetimeMs, demandMs, maxPercent]` of `[leases]`, `null` when no dimension is `hot`.
    #[napi(getter)]
    pub fn leases(&self) -> Option<Vec<f64>> {
        let config = self.engine.config();
        #[allow(clippy::cast_precision_loss)]
        (!config.hot.is_empty()).then(|| {
            vec![
                config.leases.lifetime_ms as f64,
                config.leases.demand_ms as f64,
                config.leases.max_percent as f64,
            ]
        })
    }

    /// Whether `instances` is configured (else the local fallback divides by the live
    /// fleet size once membership read it).
    #[napi(getter)]
    pub fn instances_configured(&self) -> bool {
        self.engine.config().instances.is_some()
    }

    /// The effective plan in words (as `rl-gateway --check-config`).
    #[napi]
    pub fn explain(&self) -> String {
        self.engine.explain()
    }

    /// Requests held right now.
    #[napi(getter)]
    pub fn held(&self) -> u32 {
        u32::try_from(self.flow.held()).unwrap_or(u32::MAX)
    }

    /// Starts a request; its first step is `RequestFlow.step`. `headers`: name, value,
    /// name, value... joined by line feeds (Node's `rawHeaders.join('\n')`: a header holds
    /// none); `requestId`: `''` to have its `X-Request-Id` when sane, else a new UUID;
    /// `nowMs`: a monotonic clock in milliseconds.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        method: String,
        path: String,
        headers: String,
        peer: Option<String>,
        request_id: String,
        route: Option<String>,
        now_ms: f64,
    ) -> RequestFlow {
        let req = redis_rl_flow::HttpRequest {
            method,
            path,
            headers: flat_header_list(&headers),
            peer: peer.and_then(|p| p.parse::<IpAddr>().ok()),
            route,
            request_id,
            ..redis_rl_flow::HttpRequest::default()
        };
        self.request_flow(req, now_ms)
    }
}

impl Flow {
    /// A request started (see [`Flow::start`]), as a Rust value: `req` without its trace id
    /// (read here from its `traceparent`).
    pub(crate) fn request_flow(
        &self,
        mut req: redis_rl_flow::HttpRequest,
        now_ms: f64,
    ) -> RequestFlow {
        // The request's W3C trace (its `traceparent` when valid, else a new one), as
        // rl-gateway reads it: its id goes into problem bodies.
        let mut traceparents = http::HeaderMap::new();
        for (name, value) in &req.headers {
            if name == "traceparent" {
                if let Ok(v) = http::HeaderValue::from_bytes(value) {
                    traceparents.append(http::header::HeaderName::from_static("traceparent"), v);
                }
            }
        }
        let trace = TraceContext::of(&traceparents);
        req.trace_id = Some(trace.trace_id());
        if req.request_id.is_empty() {
            choose_request_id(&mut req);
        }
        let (flow, first) = self.flow.start(req, whole(now_ms));
        let mut request = RequestFlow {
            flow,
            settle: None,
            mode: self.engine.config().failure_mode,
            instances: self.engine.config().instances.unwrap_or(NonZeroU32::MIN),
            step: Value::Null,
            traceparent: trace.traceparent(),
            takes: Vec::new(),
            ban_reads: Vec::new(),
            booking: None,
            forward: None,
        };
        request.step = match first {
            // The usual first step: its takes stay here (the flow books them itself), the
            // object is built only if asked for.
            Step::Book(b) => {
                request.takes = b.takes;
                request.ban_reads = b.ban_reads;
                Value::Null
            }
            other => request.value(other),
        };
        request
    }
}

/// One request's way through the flow; each method takes the answer of the step that
/// named it and returns the next step.
#[napi]
pub struct RequestFlow {
    flow: redis_rl_flow::RequestFlow,
    settle: Option<Settle>,
    mode: redis_rl_policy::FailureModeName,
    instances: NonZeroU32,
    /// The step to hand over (`null`: the first `book` step, its takes below).
    pub(crate) step: Value,
    pub(crate) traceparent: String,
    /// The takes of the `book` step (for [`RequestFlow::book_start`]).
    pub(crate) takes: Vec<Take>,
    /// The ban keys of the first `book` step.
    pub(crate) ban_reads: Vec<String>,
    /// The `book` step's limiter call when the flow drives it itself.
    booking: Option<sansio::Op>,
    /// The `forward` step's parts (see [`RequestFlow::forward_words`]) and its record.
    forward: Option<(Vec<String>, Value)>,
}

/// What the booking's reply led to: another command to send first (a hot key's lease was
/// taken: the `RL.ALL` of the others follows), or the flow's next step.
// Returned once per request and matched at once: a box would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Fed {
    Send(Vec<String>),
    Step(Step),
}

impl RequestFlow {
    /// The request's id (the one given, its `X-Request-Id` or a new one).
    pub(crate) fn request_id(&self) -> &str {
        &self.flow.request().request_id
    }

    /// The request, out of a flow done with it (see `Pending`'s `spare`).
    pub(crate) fn take_request(&mut self) -> redis_rl_flow::HttpRequest {
        self.flow.take_request()
    }

    /// Feeds the reply to the booking's last command (`None`: decided without Redis or by
    /// `bookFail`) and the ban reads' replies.
    pub(crate) fn feed_booking(
        &mut self,
        reply: Option<&redis::Value>,
        bans: Vec<Option<i64>>,
        now_ms: f64,
    ) -> Result<Fed> {
        let Some(mut op) = self.booking.take() else {
            return Err(Error::new(Status::GenericFailure, "bookFeed: no booking"));
        };
        if let Some(reply) = reply {
            let next = op
                .feed(reply)
                .map_err(|e| Error::new(Status::GenericFailure, e.to_string()))?;
            if let Some(next) = next {
                self.booking = Some(op);
                return Ok(Fed::Send(next));
            }
        }
        let Some(Outcome::Multi(m)) = op.outcome() else {
            return Err(Error::new(
                Status::GenericFailure,
                "bookFeed: the booking has no decision",
            ));
        };
        let d = m.decisions.iter().map(decided_of).collect::<Result<_>>()?;
        Ok(Fed::Step(self.flow.booked(
            d,
            m.denied,
            bans,
            whole(now_ms),
        )))
    }

    /// The error the booking's command last sent got (see [`RequestFlow::book_fail`]).
    pub(crate) fn fail_booking(
        &mut self,
        message: &str,
        outage: bool,
    ) -> Result<Option<Vec<String>>> {
        let Some(op) = &mut self.booking else {
            return Err(Error::new(Status::GenericFailure, "bookFail: no booking"));
        };
        op.fail(message, outage)
            .map_err(|e| Error::new(Status::GenericFailure, e.to_string()))
    }

    pub(crate) fn value(&mut self, step: Step) -> Value {
        match step {
            Step::Tier { api_key } => json!({"kind": "tier", "apiKey": api_key}),
            Step::Book(b) => {
                let v = json!({"kind": "book", "takes": takes(&b.takes), "banReads": b.ban_reads});
                self.takes = b.takes;
                self.ban_reads = b.ban_reads;
                v
            }
            Step::Peek(ts) => json!({"kind": "peek", "takes": takes(&ts)}),
            Step::Force(ts) => json!({"kind": "force", "takes": takes(&ts)}),
            Step::Respond(r) => {
                let settle = r.settle.is_some();
                self.settle = r.settle;
                json!({
                    "kind": "respond",
                    "status": r.response.status,
                    "headers": headers(&r.response.headers),
                    "body": r.response.body,
                    "record": record(r.record),
                    "settle": settle,
                })
            }
            Step::Forward(f) => {
                // The usual end of a request: its parts go over as one flat list of strings
                // (`forwardWords`), not an object of arrays, and its record only if any.
                let record = record(f.record);
                let mut rest = String::with_capacity(256);
                rest.push_str(&f.hold_ms.map(|ms| ms.to_string()).unwrap_or_default());
                rest.push(SEP);
                rest.push_str(if f.settle.is_some() { "1" } else { "" });
                rest.push(SEP);
                rest.push_str(if record.is_null() { "" } else { "1" });
                rest.push(SEP);
                rest.push_str(&self.traceparent);
                // Header values hold no line feed (HTTP), nor do their names.
                for (name, value) in f.headers {
                    rest.push(SEP);
                    rest.push_str(name);
                    rest.push(SEP);
                    rest.push_str(&value);
                }
                let words = vec![f.path, rest];
                self.settle = f.settle;
                self.forward = Some((words, record));
                json!("forward")
            }
        }
    }

    fn next(&mut self, step: Step) -> Value {
        self.value(step)
    }

    /// Each plan item's limiter policy.
    fn client_policies(&self) -> Vec<ClientPolicy> {
        self.flow
            .plan()
            .items
            .iter()
            .map(|item| {
                let mode =
                    FailureMode::named(item.failure_mode.unwrap_or(self.mode), self.instances);
                ClientPolicy::new(item.spec.params())
                    .on_failure(mode)
                    .shadow(item.shadow)
                    .hot(item.hot)
            })
            .collect()
    }
}

#[napi]
impl RequestFlow {
    /// The first step.
    #[napi(getter, ts_return_type = "unknown")]
    pub fn step(&self) -> Value {
        if self.step.is_null() {
            return json!({"kind": "book", "takes": takes(&self.takes), "banReads": self.ban_reads});
        }
        self.step.clone()
    }

    /// The `traceparent` the application sees: the request's trace, this hop as the parent.
    #[napi(getter)]
    pub fn traceparent(&self) -> String {
        self.traceparent.clone()
    }

    /// The limiter's policy of each plan item (empty before `book`): its window, failure
    /// mode (its own, else the configuration's) and shadow flag.
    #[napi]
    pub fn policies(&self) -> Vec<Policy> {
        self.client_policies()
            .into_iter()
            .map(|inner| Policy { inner })
            .collect()
    }

    /// The kind of the first step (`tier`, `book`, `respond`...): what to do first, without
    /// handing the whole step over.
    #[napi(getter)]
    pub fn kind(&self) -> String {
        if self.step.is_null() {
            return "book".to_string();
        }
        self.step
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("forward")
            .to_string()
    }

    /// The ban keys the `book` step reads (`PTTL`) along with the limiter call.
    #[napi(getter)]
    pub fn ban_reads(&self) -> Vec<String> {
        self.ban_reads.clone()
    }

    /// The `book` step's limiter call (every take, all or nothing) run by the flow itself on
    /// `core`'s layers: the first command to send, its words joined by line feeds (one
    /// string across the addon), `''` when decided without Redis (the
    /// breaker open: the failure modes), or `null` when the limiter's own `checkAll` must do
    /// it: a shadow item (checked on its own), or keys in several hash slots of a cluster
    /// (`cluster`: the client is one). No policy, take or op object crosses into JavaScript;
    /// feed the reply with `bookFeed`, an error with `bookFail`.
    #[napi]
    pub fn book_start(&mut self, core: &Core, cluster: bool) -> Result<Option<String>> {
        Ok(self
            .start_booking(&core.layers, cluster)?
            .map(|words| words.join("\n")))
    }
}

impl RequestFlow {
    /// [`RequestFlow::book_start`] on `layers`.
    pub(crate) fn start_booking(
        &mut self,
        layers: &std::sync::Arc<sansio::Layers>,
        cluster: bool,
    ) -> Result<Option<Vec<String>>> {
        let policies = self.client_policies();
        let mut op = layers.check_all();
        for t in &self.takes {
            let Some(p) = policies.get(t.item) else {
                return Ok(None);
            };
            if p.is_shadow() {
                return Ok(None);
            }
            op.add(t.key.clone(), *p, t.units)
                .map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
        }
        if cluster {
            let slot = |t: &Take| redis::cluster_routing::get_slot(t.key.as_bytes());
            let first = self.takes.first().map(slot);
            if self.takes.iter().any(|t| Some(slot(t)) != first) {
                return Ok(None);
            }
        }
        // A hot key's op may send its lease's take before the `RL.ALL` (`bookFeed` hands
        // that command over): every key then crosses joined by line feeds.
        if self.takes.iter().any(|t| t.key.contains(SEP))
            && policies.iter().any(ClientPolicy::is_hot)
        {
            return Ok(None);
        }
        let first = op
            .start()
            .map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?
            .unwrap_or_default();
        if first
            .iter()
            .any(|w| w.contains(SEP) || w == crate::booking::SAME)
        {
            // A key with a line feed (from the key prefix), or that is the mark of a word
            // the same as the last one: the words one by one.
            return Ok(None);
        }
        self.booking = Some(op);
        Ok(Some(first))
    }
}

#[napi]
impl RequestFlow {
    /// The key the booking's command is routed by (its first key).
    #[napi(getter)]
    pub fn booking_key(&self) -> String {
        self.takes
            .first()
            .map(|t| t.key.clone())
            .unwrap_or_default()
    }

    /// The error the booking's command last sent got (`outage`: no answer, a timeout): the
    /// next command (the twin, `EVAL`), or `null`: decided (by the failure modes); throws
    /// the error when it is the call's own.
    #[napi]
    pub fn book_fail(&mut self, message: String, outage: bool) -> Result<Option<Vec<String>>> {
        self.fail_booking(&message, outage)
    }

    /// The answer to `book` when the flow ran the booking: the reply to its last command
    /// (`undefined` when it was decided without Redis or by `bookFail`), each ban key's
    /// `PTTL` reply (`null`: the read failed), `nowMs`. Returns the next step, or
    /// `{kind: "send", command}` when the booking sends another command first (a hot key's
    /// lease taken, its words joined by line feeds): send it, feed its reply here again.
    #[napi(
        ts_args_type = "reply: unknown, bans: (number | null)[], nowMs: number",
        ts_return_type = "unknown"
    )]
    pub fn book_feed(
        &mut self,
        reply: crate::reply::MaybeReply,
        bans: Vec<Option<i64>>,
        now_ms: f64,
    ) -> Result<Value> {
        Ok(match self.feed_booking(reply.0.as_ref(), bans, now_ms)? {
            Fed::Send(next) => json!({"kind": "send", "command": next.join("\n")}),
            Fed::Step(s) => self.next(s),
        })
    }

    /// The `forward` step (a step given as the string `forward`): `[path, rest]`, `rest`
    /// joined by line feeds: holdMs ('': none), settle ('1' or ''), record ('1' when
    /// `forwardRecord` has one), traceparent, then name, value, name, value... of the
    /// headers. The path apart: the only part that could hold a line feed.
    /// Hands them over once: a second call gives `[]`.
    #[napi]
    pub fn forward_words(&mut self) -> Vec<String> {
        self.forward
            .as_mut()
            .map(|(words, _)| std::mem::take(words))
            .unwrap_or_default()
    }

    /// The `forward` step's record (`null`: nothing to count or give back).
    #[napi(ts_return_type = "unknown")]
    pub fn forward_record(&self) -> Value {
        self.forward
            .as_ref()
            .map(|(_, record)| record.clone())
            .unwrap_or(Value::Null)
    }

    /// The answer to `tier`.
    #[napi(ts_return_type = "unknown")]
    pub fn tier(&mut self, tier: Option<String>) -> Value {
        let s = self.flow.tier(tier);
        self.next(s)
    }

    /// The answer to `book`: each take's outcome, the index of the refusing take, each ban
    /// key's `PTTL` reply (`null`: the read failed), `nowMs`.
    #[napi(ts_return_type = "unknown")]
    pub fn booked(
        &mut self,
        outcomes: Vec<FlowOutcome>,
        denied: Option<u32>,
        bans: Vec<Option<i64>>,
        now_ms: f64,
    ) -> Result<Value> {
        let d = decided(&outcomes)?;
        let s = self
            .flow
            .booked(d, denied.map(|i| i as usize), bans, whole(now_ms));
        Ok(self.next(s))
    }

    /// The answer to `peek` (`null`: Redis did not answer).
    #[napi(ts_return_type = "unknown")]
    pub fn peeked(&mut self, outcomes: Option<Vec<FlowOutcome>>) -> Result<Value> {
        let d = outcomes.as_deref().map(decided).transpose()?;
        let s = self.flow.peeked(d);
        Ok(self.next(s))
    }

    /// The answer to `force`.
    #[napi(ts_return_type = "unknown")]
    pub fn forced(&mut self, ok: bool) -> Value {
        let s = self.flow.forced(ok);
        self.next(s)
    }

    /// Ends the request's hold.
    #[napi]
    pub fn release(&mut self) {
        self.flow.release();
    }

    /// The response headers the settlement reads (lower case; empty without one).
    #[napi]
    pub fn settle_headers(&self) -> Vec<String> {
        self.settle
            .as_ref()
            .map(|s| s.headers().into_iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// After the charges `adjust` gave were made (the same response headers): per charged
    /// item whose window forgets its debt at its boundary (fixed window, calendar quota), its
    /// watch: read its key's `RL.STATE`, then `hold` with the reply.
    #[napi]
    pub fn debt_watches(&self, response_headers: Vec<Vec<String>>) -> Vec<FlowDebtWatch> {
        let Some(settle) = &self.settle else {
            return Vec::new();
        };
        let (items, _) = settle.adjust(&header_list(response_headers));
        settle
            .debt_watches(&items)
            .into_iter()
            .map(|watch| FlowDebtWatch { watch })
            .collect()
    }

    /// From the response's headers (`[name, value]` pairs): `{item, key, kind, units}` per
    /// item to adjust in Redis (`kind`: `refund` or `charge`).
    #[napi(
        ts_return_type = "{ item: number; key: string; kind: 'refund' | 'charge'; units: number }[]"
    )]
    pub fn adjust(&self, response_headers: Vec<Vec<String>>) -> Value {
        let Some(settle) = &self.settle else {
            return json!([]);
        };
        let (items, _) = settle.adjust(&header_list(response_headers));
        items
            .into_iter()
            .filter_map(|(t, a)| match a {
                Adjust::Keep => None,
                Adjust::Refund(n) => {
                    Some(json!({"item": t.item, "key": t.key, "kind": "refund", "units": n}))
                }
                Adjust::Charge(n) => {
                    Some(json!({"item": t.item, "key": t.key, "kind": "charge", "units": n}))
                }
            })
            .collect()
    }
}

/// After the ban script's `reply` for `(policy, subject)`: the command adding the new ban
/// to the index under `prefix`, or `null` when no ban started.
#[napi]
pub fn ban_index_command(
    prefix: String,
    policy: String,
    subject: String,
    reply: Vec<i64>,
) -> Result<Option<Vec<String>>> {
    let new = commands::parse_strike(&reply).map_err(config_error)?;
    Ok(new.map(|n| commands::index_ban(&prefix, &policy, &subject, &n).args))
}

/// The command adding `counts` (`[subject, refusals]`) of `policy` to the top offenders of
/// the unix minute `minute`.
#[napi]
pub fn top_add_command(
    prefix: String,
    policy: String,
    minute: f64,
    counts: Vec<(String, u32)>,
) -> Vec<String> {
    let counts: Vec<(String, u64)> = counts.into_iter().map(|(s, n)| (s, u64::from(n))).collect();
    commands::top_add(&prefix, &policy, whole(minute), &counts).args
}

/// A charged item whose window forgets its debt: the key to read, and the hold to write.
#[napi]
pub struct FlowDebtWatch {
    watch: DebtWatch,
}

#[napi]
impl FlowDebtWatch {
    /// The limiter key charged (read its `RL.STATE`, the module's or the twin's).
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.watch.key.clone()
    }

    /// From the key's `RL.STATE` reply as the client gave it: the command (name first)
    /// holding the subject in its ban key until the debt is paid, or `null` (nothing owed, or
    /// the key is gone or not a fixed window or calendar quota any more).
    #[napi(ts_args_type = "state: unknown")]
    pub fn hold(&self, state: crate::reply::Reply) -> Option<Vec<String>> {
        let count = WindowCount::parse(&state.0)?;
        self.watch
            .hold(count.count, count.left_ms)
            .map(|command| command.args)
    }
}
