//! Replies: the five-integer array, or a map for RESP3 clients.

use redis_module::raw;

use super::ffi::{self, cstr, Ctx};
use crate::args::ArgError;
use crate::limiter::{Decision, Detail};

/// True when the calling client said `HELLO 3`, given the context's flags.
pub(crate) fn resp3(context_flags: u32) -> bool {
    context_flags & raw::REDISMODULE_CTX_FLAGS_RESP3 != 0
}

/// The decision, in the client's protocol (`context_flags` tell which),
/// with the extra fields after the five when the call asked for them.
pub(crate) fn decision(ctx: Ctx, context_flags: u32, d: &Decision, detail: Option<&Detail>) {
    let extra =
        detail.map(|x| [(cstr!("hits"), x.hits), (cstr!("banned"), x.banned_ms), (cstr!("next_free"), x.next_free_ms)]);
    let fields = 5 + extra.map_or(0, |e| e.len());
    if resp3(context_flags) {
        ffi::reply_map(ctx, fields);
        ffi::reply_simple(ctx, cstr!("allowed"));
        ffi::reply_bool(ctx, d.allowed);
        ffi::reply_simple(ctx, cstr!("limit"));
        ffi::reply_integer(ctx, d.limit as i64);
        ffi::reply_simple(ctx, cstr!("remaining"));
        ffi::reply_integer(ctx, d.remaining as i64);
        ffi::reply_simple(ctx, cstr!("retry_after"));
        ffi::reply_integer(ctx, d.retry_after_ms);
        ffi::reply_simple(ctx, cstr!("reset_after"));
        ffi::reply_integer(ctx, d.reset_after_ms as i64);
        for (name, value) in extra.iter().flatten() {
            ffi::reply_simple(ctx, *name);
            ffi::reply_integer(ctx, *value as i64);
        }
    } else {
        ffi::reply_array(ctx, fields);
        ffi::reply_integer(ctx, i64::from(d.allowed));
        ffi::reply_integer(ctx, d.limit as i64);
        ffi::reply_integer(ctx, d.remaining as i64);
        ffi::reply_integer(ctx, d.retry_after_ms);
        ffi::reply_integer(ctx, d.reset_after_ms as i64);
        for (_, value) in extra.iter().flatten() {
            ffi::reply_integer(ctx, *value as i64);
        }
    }
}

/// Why a call gets an error reply instead of a decision.
#[derive(Clone, Debug)]
pub(crate) enum CommandError {
    Arg(ArgError),
    WrongType,
    /// The server refuses writes right now, in its own words (`OOM ...`,
    /// `NOREPLICAS ...`): what a waiter is told when its turn comes then.
    Refused(String),
}

impl From<ArgError> for CommandError {
    fn from(e: ArgError) -> Self {
        CommandError::Arg(e)
    }
}

impl CommandError {
    pub(crate) fn reply(&self, ctx: Ctx) {
        match self {
            CommandError::Arg(ArgError::WrongArity) => ffi::reply_wrong_arity(ctx),
            CommandError::Arg(e) => ffi::reply_error(ctx, &e.message()),
            CommandError::WrongType => ffi::reply_error(ctx, ffi::WRONGTYPE),
            CommandError::Refused(text) => ffi::reply_error(ctx, text),
        }
    }
}
