//! Whether the server would accept a write to a key right now: asked
//! before a waiter is served outside any command, from a timer.
//!
//! Redis checks a command before it runs it; nobody checks a timer. So the
//! module asks the same questions itself:
//! - writes paused (`CLIENT PAUSE`, `FAILOVER`, `CLUSTER FAILOVER`): wait
//!   until they resume; nothing is written or propagated meanwhile;
//! - not a master, or over `maxmemory`: the error a command would get;
//! - the key's cluster slot, `min-replicas-to-write`, a failed save: Redis's
//!   own checks, by calling `THROTTLE._GATE key`, a write command that does
//!   nothing, through `RM_Call` in script mode (the checks Redis applies to
//!   a script's writes). A slot this node cannot serve now (moved, being
//!   migrated away, cluster down) keeps the waiter waiting: Redis itself
//!   redirects clients blocked on a key it no longer serves.

use std::ffi::c_int;

use redis_module::raw;

use super::ffi::{self, cstr, Ctx, RString};
use super::reply::CommandError;

pub(crate) enum Gate {
    /// Write now.
    Open,
    /// Not now, but nothing to tell the waiter: look again shortly.
    Closed,
    /// A command would be refused with this error now.
    Refused(CommandError),
}

pub(crate) fn check(ctx: Ctx, key: RString) -> Gate {
    // SAFETY: a plain query of the server's state.
    if unsafe { raw::RedisModule_AvoidReplicaTraffic.is_some_and(|paused| paused() != 0) } {
        return Gate::Closed;
    }
    let flags = ffi::context_flags(ctx);
    if flags & raw::REDISMODULE_CTX_FLAGS_MASTER == 0 {
        return refused("READONLY You can't write against a read only replica.");
    }
    if flags & raw::REDISMODULE_CTX_FLAGS_OOM != 0 {
        return refused("OOM command not allowed when used memory > 'maxmemory'.");
    }
    redis_checks(ctx, key)
}

fn refused(text: &str) -> Gate {
    Gate::Refused(CommandError::Refused(text.to_string()))
}

/// Redis's checks of a script's write to `key`, by calling
/// `THROTTLE._GATE key` (S: script mode, E: errors as replies).
fn redis_checks(ctx: Ctx, key: RString) -> Gate {
    // SAFETY: the reply is read and freed before returning; `key` is a
    // live string of the caller.
    unsafe {
        let (Some(call), Some(reply_type), Some(text), Some(free)) = (
            raw::RedisModule_Call,
            raw::RedisModule_CallReplyType,
            raw::RedisModule_CallReplyStringPtr,
            raw::RedisModule_FreeCallReply,
        ) else {
            return Gate::Closed;
        };
        let reply = call(ctx, cstr!("THROTTLE._GATE"), cstr!("SEs"), key);
        let errno = std::io::Error::last_os_error().raw_os_error();
        if !reply.is_null() && reply_type(reply) != raw::REDISMODULE_REPLY_ERROR as c_int {
            free(reply);
            return Gate::Open;
        }
        // The cluster's answers: the slot is elsewhere or being migrated
        // (EPERM), or the cluster is down (ENETDOWN, EROFS).
        const EPERM: i32 = 1;
        const EROFS: i32 = 30;
        const ENETDOWN: i32 = 100;
        let message = if reply.is_null() {
            None
        } else {
            let mut len = 0usize;
            let ptr = text(reply, &mut len);
            let message = (!ptr.is_null())
                .then(|| String::from_utf8_lossy(std::slice::from_raw_parts(ptr.cast::<u8>(), len)).into_owned());
            free(reply);
            message
        };
        match (errno, message) {
            (Some(EPERM | EROFS | ENETDOWN), _) | (_, None) => Gate::Closed,
            (_, Some(message)) => Gate::Refused(CommandError::Refused(message)),
        }
    }
}

/// `THROTTLE._GATE key`: nothing. Redis's checks before it runs are the
/// point (see the module comment).
pub(crate) fn gate_command(ctx: Ctx, _argv: &[RString]) {
    ffi::reply_simple_ok(ctx);
}
