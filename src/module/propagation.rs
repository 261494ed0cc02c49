//! Propagating a change to replicas and the AOF cheaply.
//!
//! Redis 7.0 throws a propagated command away when there is no AOF, no
//! replica and no replication backlog, but only after `RM_Replicate` has
//! built it: a lookup of the command name and a string object per
//! argument, about 40% of a THROTTLE call's server time when profiled. So
//! a call first asks whether anyone would receive its command. When nobody
//! would, it calls `RM_ReplicateVerbatim`, which costs nothing to build and
//! still counts the change for the `save` points (Redis then drops the
//! command by the same rule; were our answer ever stale, the command would
//! still go out, only in the client's words). Otherwise the change goes
//! out as one internal command with the fewest arguments: the new state
//! and its expiry instant, or the call packed whole; each argument is
//! built on the stack, and Redis makes one string of it.
//!
//! Whether anyone listens is asked of Redis (INFO replication) the first
//! time it matters and again after any event that can change it
//! ([`super::events`]): a role change, a replica coming or going, a fork
//! (a replica's first sync forks before it needs the stream; writes before
//! that fork are in its snapshot), loading. The AOF is checked on every
//! call (it can be switched on at any time).

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU8, Ordering};

use redis_module::raw;

use super::ffi::{cstr, Ctx, RString};
use super::types::Snapshot;
use crate::args::{PackedCall, PackedEffect};

const UNKNOWN: u8 = 0;
const QUIET: u8 = 1;
const LISTENING: u8 = 2;

static LISTENERS: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Asks again next time: after an event that can change who listens
/// (see [`super::events`]).
pub(crate) fn forget() {
    LISTENERS.store(UNKNOWN, Ordering::Relaxed);
}

/// True when no AOF, replica or replication backlog would receive a
/// command propagated now (`context_flags` are the call's).
fn nobody_listens(ctx: Ctx, context_flags: u32) -> bool {
    let flags = context_flags;
    if flags & raw::REDISMODULE_CTX_FLAGS_AOF != 0 || flags & raw::REDISMODULE_CTX_FLAGS_MASTER == 0 {
        return false;
    }
    match LISTENERS.load(Ordering::Relaxed) {
        QUIET => true,
        LISTENING => false,
        _ => {
            let quiet = replication_is_quiet(ctx);
            LISTENERS.store(if quiet { QUIET } else { LISTENING }, Ordering::Relaxed);
            quiet
        }
    }
}

/// A master with no replica and no backlog, as INFO replication says.
/// Anything unexpected counts as someone listening.
fn replication_is_quiet(ctx: Ctx) -> bool {
    // SAFETY: the info data is used only between its creation and free.
    unsafe {
        let (Some(get), Some(free), Some(field), Some(signed)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_FreeServerInfo,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_ServerInfoGetFieldSigned,
        ) else {
            return false;
        };
        let info = get(ctx, cstr!("replication"));
        if info.is_null() {
            return false;
        }
        let role = field(info, cstr!("role"));
        let is_master = !role.is_null() && CStr::from_ptr(role).to_bytes() == b"master";
        let zero = |name: *const c_char| {
            let mut err: c_int = 0;
            let value = signed(info, name, &mut err);
            err == raw::REDISMODULE_OK as c_int && value == 0
        };
        let quiet = is_master && zero(cstr!("connected_slaves")) && zero(cstr!("repl_backlog_active"));
        free(ctx, info);
        quiet
    }
}

/// Propagates a change made by a command handler: `full` builds the
/// propagated form, unless nobody would receive it.
pub(crate) fn send(ctx: Ctx, context_flags: u32, full: impl FnOnce()) {
    if nobody_listens(ctx, context_flags) {
        replicate_verbatim(ctx);
    } else {
        full();
    }
}

/// Counts the change for the `save` points and lets Redis propagate the
/// client's own command if, against our reading, someone listens.
fn replicate_verbatim(ctx: Ctx) {
    // SAFETY: called from a command handler, whose client holds the argv.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplicateVerbatim {
            f(ctx);
        }
    }
}

/// Replicates a change as its effect: `THROTTLE._SET key <snapshot>`, the
/// state whole and the instant it expires in one argument (replicas and
/// the AOF then hold exactly the master's value, expiring when it does).
pub(crate) fn set_state(ctx: Ctx, key: RString, snapshot: &Snapshot) {
    replicate_binary(ctx, cstr!("THROTTLE._SET"), key, snapshot.bytes());
}

/// Replicates a change as the call that made it, whole and packed:
/// `THROTTLE._CALL key <call>`, which the replica runs at the master's
/// time and clock. For a state that is cheaper to recompute than to send
/// (a SLIDING EXACT log can be long).
pub(crate) fn call(ctx: Ctx, key: RString, packed: &PackedCall) {
    replicate_binary(ctx, cstr!("THROTTLE._CALL"), key, packed.bytes());
}

/// Replicates a change to a key's leases: `THROTTLE._LEASE key <change>`,
/// the lease with its token, end and time, and the master's clock.
pub(crate) fn lease(ctx: Ctx, key: RString, effect: &PackedEffect) {
    replicate_binary(ctx, cstr!("THROTTLE._LEASE"), key, effect.bytes());
}

/// `command key <bytes>`: one string for Redis to make besides the key's.
fn replicate_binary(ctx: Ctx, command: *const c_char, key: RString, bytes: &[u8]) {
    // SAFETY: s = RedisModuleString, b = buffer and length; Redis copies it.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(ctx, command, cstr!("sb"), key, bytes.as_ptr().cast::<c_char>(), bytes.len());
        }
    }
}

/// Replicates a key's deletion (a refund that left it idle).
pub(crate) fn delete(ctx: Ctx, key: RString) {
    // SAFETY: s = RedisModuleString.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(ctx, cstr!("DEL"), cstr!("s"), key);
        }
    }
}
