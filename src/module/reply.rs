//! Replies: the five-integer array, or a map for RESP3 clients.

use redis_module::raw;

use super::ffi::{self, cstr, Ctx};
use crate::args::ArgError;
use crate::limiter::{Decision, Detail, Token};

/// True when the calling client said `HELLO 3`, given the context's flags.
pub(crate) fn resp3(context_flags: u32) -> bool {
    context_flags & raw::REDISMODULE_CTX_FLAGS_RESP3 != 0
}

/// An acquisition's reply: the five fields, then the lease's token when
/// admitted (RESP2: a sixth element; RESP3: a `token` map field).
pub(crate) fn lease(ctx: Ctx, context_flags: u32, d: &Decision, token: Option<&Token>) {
    fields(ctx, context_flags, d, None, token)
}

/// The decision, in the client's protocol (`context_flags` tell which),
/// with the extra fields after the five when the call asked for them.
pub(crate) fn decision(ctx: Ctx, context_flags: u32, d: &Decision, detail: Option<&Detail>) {
    fields(ctx, context_flags, d, detail, None)
}

fn fields(ctx: Ctx, context_flags: u32, d: &Decision, detail: Option<&Detail>, token: Option<&Token>) {
    let extra =
        detail.map(|x| [(cstr!("hits"), x.hits), (cstr!("banned"), x.banned_ms), (cstr!("next_free"), x.next_free_ms)]);
    let fields = 5 + extra.map_or(0, |e| e.len()) + usize::from(token.is_some());
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
        if let Some(token) = token {
            ffi::reply_simple(ctx, cstr!("token"));
            ffi::reply_string(ctx, token.as_bytes());
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
        if let Some(token) = token {
            ffi::reply_string(ctx, token.as_bytes());
        }
    }
}

/// An outcome's reply: a lease's, with its token, or a limit's.
pub(crate) fn outcome(ctx: Ctx, context_flags: u32, o: &super::apply::Outcome) {
    match &o.token {
        Some(token) => lease(ctx, context_flags, &o.decision, Some(token)),
        None => decision(ctx, context_flags, &o.decision, o.detail.as_ref()),
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
