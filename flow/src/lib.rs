//! The request flow of redis-rl, written once for every front end (rl-gateway's proxy,
//! forward auth and rate limit service, the tower/axum middleware, the Python ASGI and Node
//! Express middleware):
//!
//! ```text
//! admit ─ plan ─ ban check ─ book ─ decide ─ render ─ hold ─ (the application) ─ settle ─ record
//! ```
//!
//! - **admit**: the access lists, the API key and the client ([`redis_rl_policy::Engine::admit`]);
//! - **plan**: the key's tier (asked of the host: [`Step::Tier`]), then every key and window
//!   the request is limited on, and each item's units (a rule's cost header);
//! - **ban check** and **book**: one limiter call taking every item's units all or nothing,
//!   sent together with one `PTTL` per banning subject ([`Step::Book`]); a ban read a moment
//!   ago is remembered ([`BAN_RECHECK`]) and answers without Redis;
//! - **decide**: the host's limiter layers (shadow, leases, deny cache, failure modes)
//!   answer each item ([`Decided`]); a ban found gives the taken units back;
//! - **render**: status, `RateLimit*` headers, problem+json body (the engine's);
//! - **hold**: a refusal within every refusing item's `delay_max_ms` is looked at
//!   ([`Step::Peek`]), booked for its slot with `FORCE` ([`Step::Force`]) and held;
//! - **settle**: after the response, the actual cost read from its headers or trailers
//!   ([`Settle::adjust`]);
//! - **record**: what the host counts and queues ([`Record`]): refusals towards bans and
//!   the top offenders, the counters' labels, units to give back.
//!
//! A front end that plans with a configuration of its own (Envoy's rate limit service:
//! descriptors, not HTTP requests) enters at the book step with its counters
//! ([`counters::CounterFlow`]): the same [`Step::Book`], the same [`Decided`] answers, the
//! same record step.
//!
//! # Why sans-I/O
//!
//! The flow is a step machine: [`Flow::start`] returns the first [`Step`], and each step
//! says what the host must do (look a tier up, run a limiter call, read bans, hold, answer,
//! forward) and which method of [`RequestFlow`] takes the answer. It never performs I/O,
//! never reads a clock (the host passes `now_ms`, a monotonic millisecond count) and never
//! spawns. Chosen over an async core behind a transport trait because:
//!
//! - Python (redis-py, asyncio) and Node (ioredis or node-redis, the event loop) keep their
//!   own Redis clients, connection pools, TLS and cluster routing, and their own event
//!   loops: an async Rust core would need a runtime of its own in each host and a second
//!   connection pool next to the user's;
//! - every call into the flow is synchronous and short (no future crosses the binding), so
//!   a pyo3 or napi-rs binding is plain data in and out: owned strings, numbers and vectors,
//!   no generics, no lifetimes, no callbacks;
//! - the per-request path adds no round trip: the host sends what a step asks in one go
//!   (the limiter call and the ban reads concurrently, as before).
//!
//! What a [`Step::Book`] asks is a limiter call, not raw Redis commands: the limiter's
//! layers (deny cache, leases, breaker, failure modes, the module-or-twin wire) stay the
//! host's limiter's (the Rust client's stack; Python's own limiter for now). The commands
//! of bans and top offenders, which no limiter layer touches, are built here
//! ([`commands`]) and run by the host as they are.
//!
//! # Using it
//!
//! ```
//! use redis_rl_flow::{Decided, Flow, HttpRequest, Source, Step};
//! use redis_rl_policy::{Config, Engine, Verdict};
//!
//! let engine = Engine::new(Config::from_toml("dimensions = [\"ip\"]\n").unwrap(), &[]).unwrap();
//! let flow = Flow::new(engine);
//! let req = HttpRequest {
//!     method: "GET".into(),
//!     path: "/items/1".into(),
//!     peer: Some("192.0.2.1".parse().unwrap()),
//!     request_id: "r1".into(),
//!     ..HttpRequest::default()
//! };
//! let (mut request, mut step) = flow.start(req, 0);
//! loop {
//!     step = match step {
//!         Step::Tier { .. } => request.tier(None),
//!         Step::Book(book) => {
//!             // The host's limiter takes book.takes (all or nothing) and reads
//!             // book.ban_reads (PTTL each); here: Redis allowed, no ban.
//!             let decided = book.takes.iter().map(|_| Decided {
//!                 verdict: Verdict::Allowed, remaining: 99, reset_after_ms: 600,
//!                 shadow: false, source: Source::Redis,
//!             }).collect();
//!             request.booked(decided, None, vec![None; book.ban_reads.len()], 0)
//!         }
//!         Step::Peek(_) => request.peeked(None),
//!         Step::Force(_) => request.forced(false),
//!         Step::Respond(reply) => panic!("refused: {}", reply.response.status),
//!         Step::Forward(forward) => {
//!             assert!(forward.headers.iter().any(|(n, v)| *n == "ratelimit" && v.contains("r=99")));
//!             break;
//!         }
//!     };
//! }
//! ```

//! # For bindings
//!
//! [`Flow`] is `Send + Sync` and cheap to clone: one per configuration, shared by every
//! request (it holds the bans read a moment ago and the count of held requests).
//! [`RequestFlow`] is `Send`: one per request, kept until the answer is sent (dropping it
//! ends a hold). The answers each step takes:
//!
//! | step | the host does | then calls |
//! |---|---|---|
//! | [`Step::Tier`] | its tier lookup (a Redis hash, a table) | [`RequestFlow::tier`] |
//! | [`Step::Book`] | the limiter call on `takes` and one `PTTL` per `ban_reads`, concurrently | [`RequestFlow::booked`] |
//! | [`Step::Peek`] | takes the booking lock; `RL.ALL ... PEEK` of the takes | [`RequestFlow::peeked`] |
//! | [`Step::Force`] | `RL.ALL ... FORCE` of the takes; releases the lock | [`RequestFlow::forced`] |
//! | [`Step::Respond`] | sends the response, runs [`Reply::record`] off the path | (done) |
//! | [`Step::Forward`] | waits `hold_ms`, calls the application with the headers, settles | (done) |
//!
//! A [`Take`]'s `item` indexes [`RequestFlow::plan`]'s items: the host builds its limiter
//! policy from that item (its window's algorithm and numbers, shadow, failure mode, hot).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]
#![warn(missing_docs)]

mod bans;
pub mod commands;
pub mod counters;
mod debt;
mod machine;
mod record;
mod request;
mod step;

pub use bans::{ban_remaining_ms, BanMemory, BAN_MEMORY, BAN_RECHECK, BAN_RECHECK_MS};
pub use debt::DebtWatch;
pub use machine::{Flow, Holds, RequestFlow};
pub use record::{Count, Record, Refusal};
/// What a [`Decided`] says: allowed, denied for a while, never (the policy engine's).
pub use redis_rl_policy::Verdict;
pub use request::HttpRequest;
pub use step::{Book, Decided, Forward, Reply, Settle, SettledHeader, Source, Step, Take};
