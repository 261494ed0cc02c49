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
//! still go out, only in the client's words). Otherwise the call is
//! propagated with its time fixed, its arguments built without allocating
//! where Redis lets us: keywords are strings made once, numbers are
//! written on the stack.
//!
//! Whether anyone listens is asked of Redis (INFO replication) the first
//! time it matters and again after any event that can change it
//! ([`super::events`]): a role change, a replica coming or going, a fork
//! (a replica's first sync forks before it needs the stream; writes before
//! that fork are in its snapshot), loading. The AOF is checked on every
//! call (it can be switched on at any time).

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

use redis_module::raw;

use super::ffi::{cstr, Ctx, RString};

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

/// The fixed words of the propagated form, made once at load.
pub(crate) struct Keywords {
    pub cost: RString,
    pub at: RString,
    pub ttl_from: RString,
    pub burst: RString,
    pub exact: RString,
}

static KEYWORDS: [AtomicPtr<raw::RedisModuleString>; 5] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 5];

/// Makes the keywords; returns false if Redis could not.
pub(crate) fn make_keywords() -> bool {
    let words: [&[u8]; 5] = [b"COST", b"AT", b"TTLFROM", b"BURST", b"EXACT"];
    words.iter().zip(&KEYWORDS).all(|(word, slot)| {
        // SAFETY: a NULL context makes a string we own for the module's
        // life; Redis copies the bytes.
        let s = unsafe {
            raw::RedisModule_CreateString
                .map_or(std::ptr::null_mut(), |f| f(std::ptr::null_mut(), word.as_ptr().cast(), word.len()))
        };
        slot.store(s, Ordering::Relaxed);
        !s.is_null()
    })
}

/// The keywords, or None before they were made.
pub(crate) fn keywords() -> Option<Keywords> {
    let [cost, at, ttl_from, burst, exact] = KEYWORDS.each_ref().map(|slot| slot.load(Ordering::Relaxed));
    if [cost, at, ttl_from, burst, exact].iter().any(|p| p.is_null()) {
        return None;
    }
    Some(Keywords { cost, at, ttl_from, burst, exact })
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

/// Replicates a change as its effect: `THROTTLE._SET key <state>
/// <unix-ms>`, the state whole and the instant it expires (replicas and the
/// AOF then hold exactly the master's value, expiring when it does).
pub(crate) fn set_state(ctx: Ctx, key: RString, state: &[u8], expire_at_ms: u64) {
    let mut buffer = [0u8; 24];
    let at = decimal(expire_at_ms, b"", &mut buffer);
    // SAFETY: s = RedisModuleString, b = buffer and length; the buffers
    // outlive the call (Redis copies them).
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx,
                cstr!("THROTTLE._SET"),
                cstr!("sbb"),
                key,
                state.as_ptr().cast::<c_char>(),
                state.len(),
                at.as_ptr().cast::<c_char>(),
                at.len(),
            );
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

/// `n` in decimal followed by `suffix` (at most 4 bytes), written at the
/// end of `buffer`.
pub(crate) fn decimal<'a>(n: u64, suffix: &[u8], buffer: &'a mut [u8; 24]) -> &'a [u8] {
    let mut end = buffer.len() - suffix.len();
    buffer[end..].copy_from_slice(suffix);
    let mut rest = n;
    loop {
        end -= 1;
        buffer[end] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    &buffer[end..]
}

/// `n` in decimal, with its sign, written at the end of `buffer`.
pub(crate) fn signed_decimal(n: i64, buffer: &mut [u8; 24]) -> &[u8] {
    let mut start = buffer.len() - decimal(n.unsigned_abs(), b"", buffer).len();
    if n < 0 {
        start -= 1;
        buffer[start] = b'-';
    }
    &buffer[start..]
}

#[cfg(test)]
mod tests {
    use super::{decimal, signed_decimal};

    #[test]
    fn decimal_text() {
        let mut buffer = [0u8; 24];
        assert_eq!(decimal(0, b"", &mut buffer), b"0");
        assert_eq!(decimal(0, b"s", &mut buffer), b"0s");
        assert_eq!(decimal(60, b"s", &mut buffer), b"60s");
        assert_eq!(decimal(u64::MAX, b"s", &mut buffer), b"18446744073709551615s");
        assert_eq!(decimal(315_360_000_000, b"ms", &mut buffer), b"315360000000ms");
        assert_eq!(decimal(u64::MAX, b"ms", &mut buffer), b"18446744073709551615ms");
        assert_eq!(signed_decimal(0, &mut buffer), b"0");
        assert_eq!(signed_decimal(-7, &mut buffer), b"-7");
        assert_eq!(signed_decimal(i64::MAX, &mut buffer), b"9223372036854775807");
        assert_eq!(signed_decimal(i64::MIN, &mut buffer), b"-9223372036854775808");
    }
}
