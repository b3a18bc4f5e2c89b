//! The usual request in two calls: `Flow.begin` starts it and its booking (the plan, the
//! tier step, the limiter's first command), `Flow.feed` takes the reply and, for a request
//! forwarded as it is (no hold, no settlement, nothing to record), hands back the headers and
//! forgets it. Each answer is one string (words joined by line feeds): no object is made per
//! request, so none is finalized either.
//!
//! # Why numbers and not objects
//!
//! A `RequestFlow` object costs its making, a finalizer and a collection per request, and
//! each of its getters a crossing. Between `begin` and `feed` the request waits in the flow
//! under a number instead; any other way through the flow (a tier to look up, a refusal, a
//! hold, a settlement, a record) takes the request out as a `RequestFlow` object
//! (`Flow.request`) and goes on step by step as before.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use redis_rl_client::sansio::Layers;
use redis_rl_flow::{HttpRequest, Step};

use crate::core::Core;
use crate::flow::{fill_header_list, leaves_nothing, Fed, Flow, FlowState, RequestFlow, SEP};
use crate::reply::MaybeReply;
use crate::text::JsText;

/// A word the same as the one at its place in the flow's last answer of its kind (the last
/// booking's command, the last forwarded request's headers): JavaScript keeps those and
/// puts its own copy back. Most words repeat from request to request (the command's name
/// and numbers, the header names, `RateLimit-Policy`): each word is a string JavaScript
/// makes, and one character makes none (V8 keeps one-character strings). No header value,
/// and no key or number of a command, is this control character; a word that is goes over
/// as it is (the command step by step, the headers in full).
pub(crate) const SAME: &str = "\u{1}";

/// Requests begun and not yet fed (or taken out), by number. A number is reused only after
/// 2^32 others: a request waits here one Redis round trip. Boxed: a request is about 1.5
/// KiB, copied into the table and out of it again when it was held by value.
#[derive(Default)]
pub(crate) struct Pending {
    requests: RefCell<HashMap<u32, Box<RequestFlow>>>,
    last: Cell<u32>,
    /// The layers of the limiter the flow books on, and whether its client is a cluster's
    /// (`Flow.bind`): given once, not with every request.
    limiter: RefCell<Option<(Arc<Layers>, bool)>>,
    /// The words of the last command `begin` answered, as JavaScript has them.
    last_command: RefCell<Vec<String>>,
    /// The headers of the last request `feed` answered `F` or `f`, as JavaScript has them.
    last_headers: RefCell<Vec<(&'static str, String)>>,
    /// The last request's strings as `begin` read them (kept: no allocation per request).
    text: RefCell<Vec<u8>>,
    /// The request of the last one `feed` forwarded: `begin` fills it again (its strings'
    /// memory reused: about six allocations fewer per request).
    spare: RefCell<HttpRequest>,
}

impl Pending {
    /// The number the next request parked gets.
    fn next(&self) -> u32 {
        self.last.get().wrapping_add(1)
    }

    fn park(&self, request: Box<RequestFlow>) -> u32 {
        let id = self.next();
        self.last.set(id);
        self.requests.borrow_mut().insert(id, request);
        id
    }

    fn take(&self, id: u32) -> Result<RequestFlow> {
        self.requests
            .borrow_mut()
            .remove(&id)
            .map(|request| *request)
            .ok_or_else(|| Error::new(Status::InvalidArg, format!("no request {id}")))
    }
}

/// The request `begin` got, read into `buf` (see [`JsText`]), in `req`'s memory.
#[allow(clippy::too_many_arguments)]
fn http_request(
    mut req: HttpRequest,
    buf: &mut Vec<u8>,
    method: &JsText,
    path: &JsText,
    headers: &JsText,
    peer: Option<&JsText>,
    request_id: &JsText,
    route: Option<&JsText>,
) -> Result<HttpRequest> {
    buf.clear();
    let method = method.append_to(buf)?;
    let path = path.append_to(buf)?;
    let headers = headers.append_to(buf)?;
    let peer = peer.map(|p| p.append_to(buf)).transpose()?;
    let request_id = request_id.append_to(buf)?;
    let route = route.map(|r| r.append_to(buf)).transpose()?;
    // V8 writes UTF-8 (a lone surrogate as U+FFFD): each part starts at a character.
    let text =
        std::str::from_utf8(buf).map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
    let word = |r: std::ops::Range<usize>| text.get(r).unwrap_or_default();
    let refill = |s: &mut String, r: std::ops::Range<usize>| {
        s.clear();
        s.push_str(word(r));
    };
    refill(&mut req.method, method);
    refill(&mut req.path, path);
    refill(&mut req.request_id, request_id);
    fill_header_list(&mut req.headers, word(headers));
    req.peer = peer.and_then(|p| word(p).parse::<IpAddr>().ok());
    req.route = match (req.route.take(), route) {
        (Some(mut s), Some(r)) => {
            refill(&mut s, r);
            Some(s)
        }
        (None, Some(r)) => Some(word(r).to_owned()),
        (_, None) => None,
    };
    // What `begin` never sets: as a new request's.
    req.host = None;
    req.trace_id = None;
    req.settle_report = false;
    Ok(req)
}

/// `n` in decimal (without the formatting machinery of `write!`: twice a request).
fn push_number(out: &mut String, n: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(n));
}

fn push_word(out: &mut String, word: &str) {
    out.push(SEP);
    out.push_str(word);
}

/// `word`, or [`SAME`] when it is `last`'s.
fn push_new(out: &mut String, word: &str, last: Option<&String>) {
    push_word(
        out,
        if last.is_some_and(|l| l == word) {
            SAME
        } else {
            word
        },
    );
}

#[napi]
impl Flow {
    /// The limiter `begin` books on: `core`'s layers (`cluster`: its client is a cluster
    /// client).
    #[napi]
    pub fn bind(&self, core: &Core, cluster: bool) {
        *self.pending.limiter.borrow_mut() = Some((Arc::clone(&core.layers), cluster));
    }

    /// Starts a request (the arguments of `start`) and, when its first step is the booking
    /// the flow runs itself, that booking on the limiter `bind` gave.
    /// Returns the request's number alone when it goes on step by step (take it out with
    /// `request`), else the number, the key routing the booking's command ('' unless the
    /// client is a cluster's), the count of ban keys, the ban keys (read each `PTTL` along)
    /// and the command's words (none: decided without Redis; `\u0001`: the word at its
    /// place in the last answer's command), joined by line feeds. Feed the reply with
    /// `feed`, an error with `fail`.
    #[napi(
        ts_args_type = "method: string, path: string, headers: string, peer: string | undefined | null, requestId: string, route: string | undefined | null, nowMs: number"
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        &self,
        method: JsText,
        path: JsText,
        headers: JsText,
        peer: Option<JsText>,
        request_id: JsText,
        route: Option<JsText>,
        now_ms: f64,
    ) -> Result<String> {
        FlowState::begin(self, method, path, headers, peer, request_id, route, now_ms)
    }

    /// The reply to the booking's last command (`undefined` when it sent none or `fail`
    /// decided it), each ban key's `PTTL` reply (`null`: the read failed), `nowMs`. Returns
    /// `S` and the next command's words (a hot key's lease was taken first: send it, feed
    /// its reply here again); `F`, the `traceparent` the application sees, the count of
    /// header words, the headers' names and values and the path's normal form (the request
    /// is forwarded as it is, and forgotten here); `f`: the same with the last `F` or `f`
    /// answer's header names, so only the `traceparent`, the values (`\u0001`: the last
    /// answer's value at its place) and the path; or `O`: the request goes on step by step
    /// (take it out with `request`, its `step` is the next).
    #[napi(ts_args_type = "id: number, reply: unknown, bans: (number | null)[], nowMs: number")]
    pub fn feed(
        &self,
        id: u32,
        reply: MaybeReply,
        bans: Vec<Option<i64>>,
        now_ms: f64,
    ) -> Result<String> {
        FlowState::feed(self, id, reply, bans, now_ms)
    }

    /// The error the booking's command got (`outage`: no answer, a timeout): the next command
    /// (the twin, `EVAL`), or `null`: decided (feed `undefined`); throws the error when it is
    /// the call's own (the request is forgotten).
    #[napi]
    pub fn fail(&self, id: u32, message: String, outage: bool) -> Result<Option<Vec<String>>> {
        let mut requests = self.pending.requests.borrow_mut();
        let Some(request) = requests.get_mut(&id) else {
            return Err(Error::new(Status::InvalidArg, format!("no request {id}")));
        };
        let next = request.fail_booking(&message, outage);
        if next.is_err() {
            requests.remove(&id);
        }
        next
    }

    /// Takes request `id` out of the flow as a `RequestFlow` object, to go on step by step
    /// (after `begin` answered its number alone, or `feed` answered `O`).
    #[napi]
    pub fn request(&self, id: u32) -> Result<RequestFlow> {
        self.pending.take(id)
    }

    /// Forgets request `id` (its booking failed in the application's code: nothing more
    /// will be fed); ends its hold if it had one.
    #[napi]
    pub fn forget(&self, id: u32) {
        self.pending.requests.borrow_mut().remove(&id);
    }

    /// Requests begun and not yet fed, taken out or forgotten (a leak shows here).
    #[napi(getter)]
    pub fn pending_requests(&self) -> u32 {
        u32::try_from(self.pending.requests.borrow().len()).unwrap_or(u32::MAX)
    }
}

impl FlowState {
    /// [`Flow::begin`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn begin(
        &self,
        method: JsText,
        path: JsText,
        headers: JsText,
        peer: Option<JsText>,
        request_id: JsText,
        route: Option<JsText>,
        now_ms: f64,
    ) -> Result<String> {
        let limiter = self.pending.limiter.borrow();
        let Some((layers, cluster)) = limiter.as_ref() else {
            return Err(Error::new(
                Status::GenericFailure,
                "begin: no limiter (bind)",
            ));
        };
        let spare = std::mem::take(&mut *self.pending.spare.borrow_mut());
        let req = http_request(
            spare,
            &mut self.pending.text.borrow_mut(),
            &method,
            &path,
            &headers,
            peer.as_ref(),
            &request_id,
            route.as_ref(),
        )?;
        let mut request = Box::new(self.request_flow(req, now_ms));
        // The first step is the booking (kept here: `step` is null), its words cross joined
        // by line feeds: a ban key with one (from the key prefix) goes step by step.
        let booking =
            if request.step.is_null() && !request.ban_reads.iter().any(|k| k.contains(SEP)) {
                request.start_booking(layers, *cluster)?
            } else {
                None
            };
        let mut out = String::with_capacity(256);
        let Some(command) = booking else {
            push_number(&mut out, self.pending.park(request));
            return Ok(out);
        };
        // Only a cluster client routes by the key.
        let key = match request.takes.first() {
            Some(t) if *cluster => t.key.as_str(),
            _ => "",
        };
        push_number(&mut out, self.pending.next());
        out.push(SEP);
        out.push_str(key);
        out.push(SEP);
        push_number(&mut out, request.ban_reads.len());
        for k in &request.ban_reads {
            push_word(&mut out, k);
        }
        let mut last = self.pending.last_command.borrow_mut();
        for (i, w) in command.iter().enumerate() {
            push_new(&mut out, w, last.get(i));
        }
        *last = command;
        self.pending.park(request);
        Ok(out)
    }

    /// [`Flow::feed`].
    pub(crate) fn feed(
        &self,
        id: u32,
        reply: MaybeReply,
        bans: Vec<Option<i64>>,
        now_ms: f64,
    ) -> Result<String> {
        let mut requests = self.pending.requests.borrow_mut();
        let Some(request) = requests.get_mut(&id) else {
            return Err(Error::new(Status::InvalidArg, format!("no request {id}")));
        };
        let fed = match request.feed_booking(reply.0.as_ref(), bans, now_ms) {
            Ok(fed) => fed,
            Err(e) => {
                requests.remove(&id);
                return Err(e);
            }
        };
        let mut out = String::with_capacity(512);
        match fed {
            Fed::Send(words) => {
                out.push('S');
                for w in &words {
                    push_word(&mut out, w);
                }
            }
            Fed::Step(Step::Forward(f))
                if f.hold_ms.is_none() && f.settle.is_none() && leaves_nothing(&f.record) =>
            {
                let Some(mut request) = requests.remove(&id) else {
                    return Err(Error::new(Status::InvalidArg, format!("no request {id}")));
                };
                // Header names and values hold no line feed (HTTP); the path may (decoded):
                // it comes last, the rest of the string.
                let mut last = self.pending.last_headers.borrow_mut();
                let same_names = last.len() == f.headers.len()
                    && last.iter().zip(&f.headers).all(|(l, h)| l.0 == h.0)
                    && !f.headers.iter().any(|(_, v)| v == SAME);
                if same_names {
                    out.push('f');
                    push_word(&mut out, &request.traceparent);
                    for (i, (_, value)) in f.headers.iter().enumerate() {
                        push_new(&mut out, value, last.get(i).map(|l| &l.1));
                    }
                } else {
                    out.push('F');
                    push_word(&mut out, &request.traceparent);
                    out.push(SEP);
                    push_number(&mut out, 2 * f.headers.len());
                    for (name, value) in &f.headers {
                        push_word(&mut out, name);
                        push_word(&mut out, value);
                    }
                }
                push_word(&mut out, &f.path);
                *last = f.headers;
                *self.pending.spare.borrow_mut() = request.take_request();
            }
            Fed::Step(step) => {
                request.step = request.value(step);
                out.push('O');
            }
        }
        Ok(out)
    }
}
