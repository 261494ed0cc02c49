//! The client's errors. Being limited is not one: it is a [`Decision`](crate::Decision).

use std::fmt;

use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Why a call got no decision.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The server has no THROTTLE commands: the module is not loaded there.
    /// Its message says how to load it.
    ModuleMissing {
        /// The command the server did not know.
        command: &'static str,
        /// The server's own error.
        source: RedisError,
    },
    /// An argument the module would refuse, caught before sending.
    InvalidArgument {
        /// The argument, as the module names it (`BAN`, `AT`, ...).
        argument: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// An error from Redis: a connection failure, or the server's error
    /// reply (`ERR invalid limit: ...`, `WRONGTYPE ...`, `CROSSSLOT ...`).
    Redis(RedisError),
    /// A reply of an unexpected shape.
    UnexpectedReply {
        /// The command.
        command: &'static str,
        /// What came back.
        reply: String,
    },
    /// No reply within the time the caller allowed (the layer's
    /// [`timeout`](crate::layer::RateLimitConfigBuilder::timeout)).
    Timeout,
}

impl Error {
    pub(crate) fn invalid(argument: &'static str, reason: String) -> Error {
        Error::InvalidArgument { argument, reason }
    }

    /// The error a failed `command` gives: [`Error::ModuleMissing`] when
    /// the server does not know the command.
    pub(crate) fn from_redis(command: &'static str, e: RedisError) -> Error {
        let unknown = e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
            && e.detail().is_some_and(|d| {
                let d = d.to_ascii_lowercase();
                d.contains("unknown command") && d.contains("throttle.")
            });
        if unknown {
            Error::ModuleMissing { command, source: e }
        } else {
            Error::Redis(e)
        }
    }

    /// True when Redis could not be reached or could not serve the call
    /// now (connection refused or lost, a time-out, a cluster without a
    /// node for the slot, a server still loading): what a rate limiter's
    /// failure mode is about. Errors that retrying cannot cure (a missing
    /// module, a bad argument, a key of another type) are not.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Timeout => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || matches!(
                        e.kind(),
                        ErrorKind::ClusterConnectionNotFound
                            | ErrorKind::Server(
                                ServerErrorKind::ClusterDown
                                    | ServerErrorKind::MasterDown
                                    | ServerErrorKind::BusyLoading
                                    | ServerErrorKind::TryAgain
                            )
                    )
            }
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ModuleMissing { command, source } => write!(
                f,
                "the server has no {command} command: the redis-throttle module is not loaded. Load it with the \
                 line `loadmodule /path/to/libredis_throttle.so` in redis.conf, or start the server with \
                 `redis-server --loadmodule /path/to/libredis_throttle.so`, or run `MODULE LOAD \
                 /path/to/libredis_throttle.so` (the server said: {source})"
            ),
            Error::InvalidArgument { argument, reason } => write!(f, "invalid {argument}: {reason}"),
            // A server's error reply in its own words: `ERR invalid limit: ...`.
            Error::Redis(e) => match (e.code(), e.detail()) {
                (Some(code), Some(detail)) => write!(f, "{code} {detail}"),
                _ => e.fmt(f),
            },
            Error::UnexpectedReply { command, reply } => write!(f, "unexpected reply to {command}: {reply}"),
            Error::Timeout => f.write_str("Redis did not answer in time"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::ModuleMissing { source, .. } | Error::Redis(source) => Some(source),
            _ => None,
        }
    }
}
