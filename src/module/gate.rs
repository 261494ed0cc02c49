//! Whether the server would accept a write to a key right now: asked
//! before a waiter is served outside any command, from a timer.
//!
//! Redis checks a command before it runs it; nobody checks a timer. So the
//! module asks the questions Redis asks of a command, by the same rules,
//! no stricter:
//! - writes paused (`CLIENT PAUSE`, `FAILOVER`, `CLUSTER FAILOVER`): wait
//!   until they resume; nothing is written or propagated meanwhile;
//! - over `maxmemory`: Redis evicts before it runs a command and refuses
//!   only where eviction cannot help (`noeviction`, or no key left that
//!   the policy may evict), and never on a replica that ignores
//!   `maxmemory`. The module cannot evict; where Redis would, the waiter
//!   is served and Redis evicts before its next command;
//! - a read-only replica, `min-replicas-to-write`, a failed save, a stale
//!   replica, the key's cluster slot: Redis's own checks, by calling
//!   `THROTTLE._GATE key`, a write command that does nothing, through
//!   `RM_Call` in script mode (the checks Redis applies to a script's
//!   writes: a writable replica takes them). A slot this node cannot serve
//!   now (moved, being migrated away, cluster down) keeps the waiter
//!   waiting: Redis itself redirects clients blocked on a key it no longer
//!   serves.

use std::ffi::{c_int, CStr};

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
    if flags & raw::REDISMODULE_CTX_FLAGS_OOM != 0 && !eviction_makes_room(ctx, flags) {
        return refused("OOM command not allowed when used memory > 'maxmemory'.");
    }
    redis_checks(ctx, key)
}

/// Over `maxmemory`, whether a command issued now would run: Redis evicts
/// first, and refuses it only when the policy evicts nothing
/// (`noeviction`) or no key is left that the policy may evict (none at all
/// for `allkeys-*`, none with a TTL for `volatile-*`). A replica that
/// ignores `maxmemory` (the default) neither evicts nor refuses.
fn eviction_makes_room(ctx: Ctx, flags: u32) -> bool {
    if flags & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0
        && config(ctx, c"replica-ignore-maxmemory").as_deref() == Some("yes")
    {
        return true;
    }
    if flags & raw::REDISMODULE_CTX_FLAGS_EVICT == 0 {
        return false;
    }
    let volatile = config(ctx, c"maxmemory-policy").is_some_and(|policy| policy.starts_with("volatile-"));
    let counted = if volatile { "expires=" } else { "keys=" };
    // `db0:keys=3,expires=1,avg_ttl=0`, one line per database with keys.
    let keyspace = reply_text(call(ctx, c"INFO", c"keyspace")).unwrap_or_default();
    keyspace.lines().filter_map(|line| line.split_once(':')).any(|(_, fields)| {
        fields
            .split(',')
            .any(|field| field.strip_prefix(counted).is_some_and(|n| n.parse::<u64>().is_ok_and(|n| n > 0)))
    })
}

/// A setting's value, as `CONFIG GET` gives it.
fn config(ctx: Ctx, name: &CStr) -> Option<String> {
    // SAFETY: the format names two C strings; reply_text frees the reply.
    let reply = unsafe {
        match raw::RedisModule_Call {
            Some(call) => call(ctx, cstr!("CONFIG"), cstr!("cc"), cstr!("GET"), name.as_ptr()),
            None => std::ptr::null_mut(),
        }
    };
    reply_text(reply)
}

/// `command arg` through `RM_Call`.
fn call(ctx: Ctx, command: &CStr, arg: &CStr) -> *mut raw::RedisModuleCallReply {
    // SAFETY: the format names one C string, `arg`.
    unsafe {
        match raw::RedisModule_Call {
            Some(call) => call(ctx, command.as_ptr(), cstr!("c"), arg.as_ptr()),
            None => std::ptr::null_mut(),
        }
    }
}

/// A reply's text, freeing the reply: a string, or an array's last element
/// (`CONFIG GET name` answers the name, then the value).
fn reply_text(reply: *mut raw::RedisModuleCallReply) -> Option<String> {
    if reply.is_null() {
        return None;
    }
    // SAFETY: a live reply of ours, freed once at the end; element replies
    // belong to it.
    unsafe {
        let (Some(reply_type), Some(length), Some(element), Some(text), Some(free)) = (
            raw::RedisModule_CallReplyType,
            raw::RedisModule_CallReplyLength,
            raw::RedisModule_CallReplyArrayElement,
            raw::RedisModule_CallReplyStringPtr,
            raw::RedisModule_FreeCallReply,
        ) else {
            return None;
        };
        let value = if reply_type(reply) == raw::REDISMODULE_REPLY_ARRAY as c_int {
            element(reply, length(reply).saturating_sub(1))
        } else {
            reply
        };
        let mut len = 0usize;
        let ptr = if value.is_null() { std::ptr::null() } else { text(value, &mut len) };
        let result = (!ptr.is_null())
            .then(|| String::from_utf8_lossy(std::slice::from_raw_parts(ptr.cast::<u8>(), len)).into_owned());
        free(reply);
        result
    }
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
