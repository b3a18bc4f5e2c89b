//! The layers between the [`Limiter`](crate::Limiter) and the transport, each wrapping the
//! next (the order is [`stack`]'s): shadow policies, leases of hot keys, failure modes and
//! the local fallback, the deny cache, and the decider that sends the module's commands.

pub mod decider;
pub mod deny_cache;
pub mod failover;
pub mod fallback;
pub mod lease;
#[cfg(feature = "transport")]
pub(crate) mod shadow;
#[cfg(feature = "transport")]
pub(crate) mod stack;
