//! The client's error type.

use std::time::Duration;

use redis_rl_core::ParamError;

/// Why a call to Redis, or a configuration, failed.
///
/// The limiter never returns these from `check`: a failed call is turned into a decision
/// by the policy's failure mode. They surface from configuration loading, from
/// [`crate::Limiter::query`], and in logs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis did not answer within the configured timeout.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The circuit breaker is open: Redis was not called.
    #[error("circuit breaker open: redis not called")]
    BreakerOpen,
    /// Redis answered something the client cannot read (a server of another version?).
    #[error("unexpected reply to {command}: {detail}")]
    Reply {
        /// The command that got the reply.
        command: &'static str,
        /// What was wrong with it.
        detail: String,
    },
    /// A policy parameter is out of range.
    #[error("invalid policy: {0}")]
    Param(#[from] ParamError),
    /// A configuration file or value is invalid.
    #[error("config: {0}")]
    Config(String),
}

impl Error {
    /// True when the error means Redis is unavailable (connection, timeout, loading,
    /// cluster down), as opposed to an answer from a healthy server. Only these count
    /// towards opening the circuit breaker.
    pub fn is_outage(&self) -> bool {
        match self {
            Error::Timeout(_) | Error::BreakerOpen => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::BusyLoadingError
                            | redis::ErrorKind::ClusterDown
                            | redis::ErrorKind::MasterDown
                            | redis::ErrorKind::TryAgain
                    )
            }
            Error::Reply { .. } | Error::Param(_) | Error::Config(_) => false,
        }
    }
}

/// Redis refused the limiter's user: a configuration error (the password, or the user's
/// ACL), not an outage. Reported under its own name in logs, metrics and health checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// `WRONGPASS` or `NOAUTH`: the user or password in the URL is wrong, or missing.
    AuthenticationFailed,
    /// `NOPERM`: the user's ACL does not allow a command or key the limiter needs.
    PermissionDenied,
}

impl Refusal {
    /// `authentication_failed` or `permission_denied` (metric labels, health reasons).
    pub fn name(self) -> &'static str {
        match self {
            Refusal::AuthenticationFailed => "authentication_failed",
            Refusal::PermissionDenied => "permission_denied",
        }
    }
}

impl Error {
    /// The refusal this error is, if Redis refused the user (as opposed to being down or
    /// answering another error).
    pub fn refusal(&self) -> Option<Refusal> {
        let Error::Redis(e) = self else { return None };
        if e.kind() == redis::ErrorKind::AuthenticationFailed {
            return Some(Refusal::AuthenticationFailed);
        }
        let text = e.to_string();
        let has = |code: &str| e.code() == Some(code) || text.contains(code);
        if has("WRONGPASS") || has("NOAUTH") {
            Some(Refusal::AuthenticationFailed)
        } else if has("NOPERM") {
            Some(Refusal::PermissionDenied)
        } else {
            None
        }
    }
}

/// `Result` with the client's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
