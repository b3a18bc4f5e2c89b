//! The usual request in two calls: `Flow.begin` starts it and its booking (the plan, the
//! tier step, the limiter's first command), `Flow.feed` takes the reply and, for a request
//! forwarded as it is (no hold, no settlement, nothing to record), hands back the headers and
//! forgets it. Each answer is one string (words joined by line feeds): no object is made per
//! request, so none is finalized either. The middleware calls them for several requests at
//! once (`Flow.beginMany`: the requests of one turn of the event loop; `Flow.feedMany`: the
//! replies of one read of the client's socket): in an application the addon's code is cold
//! at each call, and a call per request cost about three times what it costs in a loop.
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
use crate::flow::{fill_header_list, leaves_nothing, Fed, Flow, RequestFlow, SEP};
use crate::reply::{MaybeReply, Reply, Slots};

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
    /// Requests `feed` forwarded (at most [`SPARES`]): `begin` fills them again (their
    /// strings' memory reused: about six allocations fewer per request).
    spare: RefCell<Vec<HttpRequest>>,
}

/// Spare requests kept at most: a batch's worth (the middleware's requests in flight).
const SPARES: usize = 64;

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

    /// A request to fill (a spare one when there is one).
    fn spare(&self) -> HttpRequest {
        self.spare.borrow_mut().pop().unwrap_or_default()
    }

    /// Keeps `request`'s memory for a later one.
    fn keep(&self, request: HttpRequest) {
        let mut spare = self.spare.borrow_mut();
        if spare.len() < SPARES {
            spare.push(request);
        }
    }

    fn take(&self, id: u32) -> Result<RequestFlow> {
        self.requests
            .borrow_mut()
            .remove(&id)
            .map(|request| *request)
            .ok_or_else(|| Error::new(Status::InvalidArg, format!("no request {id}")))
    }
}

/// `req` (its memory reused) filled with a request's parts: `headers` as `begin`'s (name,
/// value... joined by line feeds).
fn filled(
    mut req: HttpRequest,
    method: &str,
    path: &str,
    headers: &str,
    peer: Option<&str>,
    request_id: &str,
    route: Option<&str>,
) -> HttpRequest {
    let refill = |s: &mut String, text: &str| {
        s.clear();
        s.push_str(text);
    };
    refill(&mut req.method, method);
    refill(&mut req.path, path);
    refill(&mut req.request_id, request_id);
    fill_header_list(&mut req.headers, headers);
    req.peer = peer.and_then(|p| p.parse::<IpAddr>().ok());
    req.route = match (req.route.take(), route) {
        (Some(mut s), Some(r)) => {
            refill(&mut s, r);
            Some(s)
        }
        (None, Some(r)) => Some(r.to_owned()),
        (_, None) => None,
    };
    // What `begin` never sets: as a new request's.
    req.host = None;
    req.trace_id = None;
    req.settle_report = false;
    req
}

/// `answer` after its length in UTF-16 code units (as JavaScript counts) and a `:`: the
/// answers of a batch one after the other (a path may hold any character).
fn push_counted(out: &mut String, answer: &str) {
    let units = if answer.is_ascii() {
        answer.len()
    } else {
        answer.encode_utf16().count()
    };
    push_number(out, units);
    out.push(':');
    out.push_str(answer);
}

/// The words of `beginMany`'s requests, one after another.
struct Words<'a>(&'a str);

impl<'a> Words<'a> {
    fn done(&self) -> bool {
        self.0.is_empty()
    }

    fn next(&mut self) -> Result<&'a str> {
        self.take(1)
    }

    /// The next `n` words as they are (with their line feeds between).
    fn take(&mut self, n: usize) -> Result<&'a str> {
        if n == 0 {
            return Ok("");
        }
        let mut end = 0;
        for i in 0..n {
            match self.0[end..].find(SEP) {
                Some(at) => end += at + if i + 1 == n { 0 } else { 1 },
                None if i + 1 == n => end = self.0.len(),
                None => {
                    return Err(Error::new(
                        Status::InvalidArg,
                        "beginMany: a request cut short",
                    ))
                }
            }
        }
        let (taken, rest) = self.0.split_at(end);
        self.0 = rest.strip_prefix(SEP).unwrap_or(rest);
        Ok(taken)
    }
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
    /// `requestId`: `''` to have the request's `X-Request-Id` when it is a sane one, else a
    /// new UUID (the rule of every front end). Returns the request's number and id alone
    /// when it goes on step by step (take it out with `request`), else the number, the id,
    /// the key routing the booking's command ('' unless the client is a cluster's), the
    /// count of ban keys, the ban keys (read each `PTTL` along) and the command's words
    /// (none: decided without Redis; `\u0001`: the word at its place in the last answer's
    /// command), joined by line feeds. Feed the reply with `feed`, an error with `fail`.
    #[napi(
        ts_args_type = "method: string, path: string, headers: string, peer: string | undefined | null, requestId: string, route: string | undefined | null, nowMs: number"
    )]
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        &self,
        method: String,
        path: String,
        headers: String,
        peer: Option<String>,
        request_id: String,
        route: Option<String>,
        now_ms: f64,
    ) -> Result<String> {
        let req = filled(
            self.pending.spare(),
            &method,
            &path,
            &headers,
            peer.as_deref(),
            &request_id,
            route.as_deref(),
        );
        self.begin_request(req, now_ms)
    }

    /// `begin` of the requests that came together (one turn of the event loop), in order,
    /// in one call: each request as its method, path, peer (`''`: none), request id (`''`:
    /// chosen as `begin` does), route (`''`: none), the count of its header words and those
    /// words (name, value...), every word after a line feed but the first. Returns their answers in the same order, each
    /// after its length in UTF-16 code units and a `:`, as `feed_many`'s; a request whose
    /// `begin` failed answers `E` and the error's message.
    #[napi]
    pub fn begin_many(&self, requests: String, now_ms: f64) -> Result<String> {
        let mut words = Words(&requests);
        let mut out = String::with_capacity(128 * 4);
        while !words.done() {
            let method = words.next()?;
            let path = words.next()?;
            let peer = words.next()?;
            let request_id = words.next()?;
            let route = words.next()?;
            let count: usize = words.next()?.parse().map_err(|_| {
                Error::new(Status::InvalidArg, "beginMany: a count of header words")
            })?;
            let headers = words.take(count)?;
            let req = filled(
                self.pending.spare(),
                method,
                path,
                headers,
                (!peer.is_empty()).then_some(peer),
                request_id,
                (!route.is_empty()).then_some(route),
            );
            let answer = self
                .begin_request(req, now_ms)
                .unwrap_or_else(|e| format!("E{}", e.reason));
            push_counted(&mut out, &answer);
        }
        Ok(out)
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
        let mut out = String::with_capacity(512);
        self.feed_into(&mut out, id, reply.0.as_ref(), bans, now_ms)?;
        Ok(out)
    }

    /// `feed` of the usual bookings' replies that came together (one read of the client's
    /// socket), fed in order in one call (no ban reads): `slots[..used]` holds each request's
    /// number then its reply, written by `ReplySlots` (`ts/replies.ts`); `others` the values
    /// it wrote as an index. Returns their answers in the same order, each after its length
    /// in UTF-16 code units (as JavaScript counts) and a `:` (an answer's path may hold any
    /// character); a request whose feed failed answers `E` and the error's message (it is
    /// forgotten).
    #[napi(ts_args_type = "slots: Float64Array, used: number, others: unknown[], nowMs: number")]
    pub fn feed_many(
        &self,
        slots: &[f64],
        used: u32,
        others: Vec<Reply>,
        now_ms: f64,
    ) -> Result<String> {
        let slots = slots.get(..used as usize).ok_or_else(|| {
            Error::new(Status::InvalidArg, "feedMany: more slots used than given")
        })?;
        let mut others: Vec<Option<redis::Value>> = others.into_iter().map(|r| Some(r.0)).collect();
        let mut slots = Slots::new(slots, &mut others);
        let mut replies = Vec::with_capacity(32);
        while !slots.done() {
            let id = slots.number()?;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            replies.push((id as u32, slots.value()?));
        }
        let mut out = String::with_capacity(256 * replies.len());
        let mut answer = String::with_capacity(512);
        for (id, reply) in &replies {
            answer.clear();
            // As `feed` reads it: `null` is no reply.
            let reply = (*reply != redis::Value::Nil).then_some(reply);
            if let Err(e) = self.feed_into(&mut answer, *id, reply, Vec::new(), now_ms) {
                answer.clear();
                answer.push('E');
                answer.push_str(&e.reason);
            }
            push_counted(&mut out, &answer);
        }
        Ok(out)
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

impl Flow {
    /// `begin` of a request read.
    fn begin_request(&self, req: HttpRequest, now_ms: f64) -> Result<String> {
        let limiter = self.pending.limiter.borrow();
        let Some((layers, cluster)) = limiter.as_ref() else {
            return Err(Error::new(
                Status::GenericFailure,
                "begin: no limiter (bind)",
            ));
        };
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
            push_number(&mut out, self.pending.next());
            push_word(&mut out, request.request_id());
            self.pending.park(request);
            return Ok(out);
        };
        // Only a cluster client routes by the key.
        let key = match request.takes.first() {
            Some(t) if *cluster => t.key.as_str(),
            _ => "",
        };
        push_number(&mut out, self.pending.next());
        push_word(&mut out, request.request_id());
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

    /// `feed`'s answer for request `id`, written into `out`.
    fn feed_into(
        &self,
        out: &mut String,
        id: u32,
        reply: Option<&redis::Value>,
        bans: Vec<Option<i64>>,
        now_ms: f64,
    ) -> Result<()> {
        let mut requests = self.pending.requests.borrow_mut();
        let Some(request) = requests.get_mut(&id) else {
            return Err(Error::new(Status::InvalidArg, format!("no request {id}")));
        };
        let fed = match request.feed_booking(reply, bans, now_ms) {
            Ok(fed) => fed,
            Err(e) => {
                requests.remove(&id);
                return Err(e);
            }
        };
        match fed {
            Fed::Send(words) => {
                out.push('S');
                for w in &words {
                    push_word(out, w);
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
                    push_word(out, &request.traceparent);
                    for (i, (_, value)) in f.headers.iter().enumerate() {
                        push_new(out, value, last.get(i).map(|l| &l.1));
                    }
                } else {
                    out.push('F');
                    push_word(out, &request.traceparent);
                    out.push(SEP);
                    push_number(out, 2 * f.headers.len());
                    for (name, value) in &f.headers {
                        push_word(out, name);
                        push_word(out, value);
                    }
                }
                push_word(out, &f.path);
                *last = f.headers;
                self.pending.keep(request.take_request());
            }
            Fed::Step(step) => {
                request.step = request.value(step);
                out.push('O');
            }
        }
        Ok(())
    }
}
