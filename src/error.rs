//! The one error type of the commands, and the one place it becomes Redis's error text.
//!
//! Every error below carries its text without Redis's `ERR ` prefix (its `Display`); the
//! prefix is added in [`From<Error> for RedisError`] only. The texts are public contract:
//! README.md lists them and the tests assert them exactly.

use std::fmt;

use redis_module::RedisError;
use redis_rl_core::limits::ParamError;

use crate::args::ArgError;
use crate::encoding::DecodeError;

/// Why a command failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The wrong number of arguments (the server's own text names the command).
    WrongArity,
    /// A key of another type (the server's own `WRONGTYPE` text).
    WrongType,
    /// A bad argument.
    Arg(ArgError),
    /// A key that does not hold a limiter this command can read.
    Decode(DecodeError),
    /// Any other failure, with a fixed text.
    Fixed(&'static str),
    /// Any other failure, with a text made for this call (the command's own error types).
    Text(String),
}

impl Error {
    /// An error whose text is `text`'s `Display`.
    pub fn text(text: impl fmt::Display) -> Self {
        Error::Text(text.to_string())
    }
}

impl fmt::Display for Error {
    /// The error text, without the `ERR ` prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WrongArity => write!(f, "wrong number of arguments"),
            Error::WrongType => {
                write!(f, "Operation against a key holding the wrong kind of value")
            }
            Error::Arg(e) => write!(f, "{e}"),
            Error::Decode(e) => write!(f, "{e}"),
            Error::Fixed(text) => f.write_str(text),
            Error::Text(text) => f.write_str(text),
        }
    }
}

impl From<ArgError> for Error {
    fn from(e: ArgError) -> Self {
        Error::Arg(e)
    }
}

impl From<ParamError> for Error {
    fn from(e: ParamError) -> Self {
        Error::Arg(ArgError::Param(e))
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        Error::Decode(e)
    }
}

impl From<Error> for RedisError {
    /// The error reply: the server's own for arity and type, `ERR <text>` for the rest.
    fn from(e: Error) -> Self {
        match e {
            Error::WrongArity => RedisError::WrongArity,
            Error::WrongType => RedisError::WrongType,
            // The crate turns the text into a C string and would panic on a NUL byte; no
            // text of ours has one, but never let that reach the server.
            other => RedisError::String(format!("ERR {other}").replace('\0', "\\x00")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::Kind;

    fn text(e: impl Into<Error>) -> String {
        match RedisError::from(e.into()) {
            RedisError::String(s) => s,
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn error_texts_are_the_documented_ones() {
        assert_eq!(
            text(DecodeError::NotOurs),
            "ERR key holds a value that is not a redis-rl limiter"
        );
        assert_eq!(
            text(DecodeError::WrongAlgorithm {
                stored: Kind::TokenBucket,
                expected: Kind::SlidingWindow
            }),
            "ERR key holds a token bucket limiter, not a sliding window limiter"
        );
        assert_eq!(
            text(redis_rl_core::limits::count("capacity").error()),
            "ERR capacity must be an integer between 1 and 1000000000000000"
        );
        assert_eq!(text(Error::Fixed("a\0b")), "ERR a\\x00b");
        assert!(matches!(
            RedisError::from(Error::WrongArity),
            RedisError::WrongArity
        ));
    }
}
