//! Small safe wrappers over the raw module API used on the hot path, so
//! the handlers read linearly and never allocate to talk to Redis.

use std::ffi::{c_char, c_int, c_void};
use std::marker::PhantomData;

use redis_module::native_types::RedisType;
use redis_module::raw;

/// A NUL-terminated literal for the C API.
macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr().cast::<std::ffi::c_char>()
    };
}
pub(crate) use cstr;

pub(crate) type Ctx = *mut raw::RedisModuleCtx;
pub(crate) type RString = *mut raw::RedisModuleString;

/// The context's flags (`REDISMODULE_CTX_FLAGS_*`).
pub(crate) fn context_flags(ctx: Ctx) -> u32 {
    // SAFETY: plain call on a live context.
    unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(ctx)) as u32 }
}

pub(crate) const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// The bytes of a command argument, valid for the call.
pub(crate) fn bytes<'a>(s: RString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: Redis hands valid strings to command handlers; the pointer
    // and length describe its buffer for the duration of the call.
    unsafe {
        let ptr = raw::RedisModule_StringPtrLen.map_or(std::ptr::null(), |f| f(s, &mut len));
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// An open key, closed on drop. Its value is borrowed from the handle,
/// so no reference to it outlives the handle or a change of the value.
pub(crate) struct Key<'a> {
    ptr: *mut raw::RedisModuleKey,
    ctx: Ctx,
    name: RString,
    _ctx: PhantomData<&'a ()>,
}

/// A key's content as one THROTTLE type sees it.
pub(crate) enum Slot<'a, T> {
    Empty,
    Mine(&'a mut T),
    Other,
}

/// The latest instant (Unix ms) a key of ours expires at: the latest `AT`
/// plus the longest TTL a THROTTLE command sets (two periods, SLIDING's),
/// or the latest theoretical arrival time CL.THROTTLE keeps (2^63 ns after
/// the latest time), whichever is later.
pub(crate) const LATEST_EXPIRY_MS: u64 = {
    let throttle = (crate::limiter::MAX_TIME_US + 2 * crate::limiter::MAX_PERIOD_US) / 1000;
    let cell = (crate::limiter::cell::MAX_TAT_NS / 1_000_000) as u64;
    if cell > throttle {
        cell
    } else {
        throttle
    }
};

impl<'a> Key<'a> {
    /// Opens the key for a call that may change it. Opening alone touches
    /// nothing: the module signals a key as modified itself, only when it
    /// changed it (`REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED`), so
    /// `WATCH` and client-side caching see only real changes.
    pub(crate) fn open(ctx: Ctx, name: RString) -> Key<'a> {
        Key::open_with(ctx, name, raw::KeyMode::READ | raw::KeyMode::WRITE)
    }

    /// Opens the key for reading only.
    pub(crate) fn open_read(ctx: Ctx, name: RString) -> Key<'a> {
        Key::open_with(ctx, name, raw::KeyMode::READ)
    }

    fn open_with(ctx: Ctx, name: RString, mode: raw::KeyMode) -> Key<'a> {
        // SAFETY: ctx and name come from the running command or callback.
        let ptr = unsafe { raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |f| f(ctx, name, mode.bits())) };
        Key { ptr, ctx, name, _ctx: PhantomData }
    }

    fn is_empty(&self) -> bool {
        // SAFETY: a null or open key is accepted by KeyType.
        unsafe { raw::RedisModule_KeyType.map_or(0, |f| f(self.ptr)) == raw::REDISMODULE_KEYTYPE_EMPTY as c_int }
    }

    /// The key's value if it holds a `T` of type `ty`.
    pub(crate) fn slot<T>(&mut self, ty: &RedisType) -> Slot<'_, T> {
        if self.ptr.is_null() || self.is_empty() {
            return Slot::Empty;
        }
        // SAFETY: the key is open; a value of our type is a Box<T> we set,
        // and the exclusive borrow of the handle keeps it alive and unique.
        unsafe {
            let theirs = raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(self.ptr));
            if theirs.is_null() || theirs != *ty.raw_type.borrow() {
                return Slot::Other;
            }
            let value = raw::RedisModule_ModuleTypeGetValue.map_or(std::ptr::null_mut(), |f| f(self.ptr));
            match value.cast::<T>().as_mut() {
                Some(v) => Slot::Mine(v),
                None => Slot::Other,
            }
        }
    }

    /// Stores `value` as the key's value, replacing what was there.
    pub(crate) fn set<T>(&mut self, ty: &RedisType, value: T) -> bool {
        let boxed = Box::into_raw(Box::new(value)).cast::<c_void>();
        // SAFETY: Redis takes ownership of the box and frees it through the
        // type's free callback; on failure we take it back.
        unsafe {
            let ok = raw::RedisModule_ModuleTypeSetValue
                .map_or(raw::REDISMODULE_ERR as c_int, |f| f(self.ptr, *ty.raw_type.borrow(), boxed))
                == raw::REDISMODULE_OK as c_int;
            if !ok {
                drop(Box::from_raw(boxed.cast::<T>()));
            }
            ok
        }
    }

    /// The key's TTL in ms, or -1 when it has none.
    pub(crate) fn ttl_ms(&self) -> i64 {
        if self.ptr.is_null() {
            return -1;
        }
        // SAFETY: the key is open.
        let ttl = unsafe { raw::RedisModule_GetExpire.map_or(-1, |f| f(self.ptr)) };
        if ttl == raw::REDISMODULE_NO_EXPIRE as i64 {
            -1
        } else {
            ttl
        }
    }

    /// The instant (Unix ms) the key expires at, if it has one and the
    /// server tells modules (7.0 and later do).
    pub(crate) fn expire_at_ms(&self) -> Option<u64> {
        if self.ptr.is_null() {
            return None;
        }
        // SAFETY: the key is open.
        let at = unsafe { raw::RedisModule_GetAbsExpire.map_or(-1, |f| f(self.ptr)) };
        u64::try_from(at).ok()
    }

    pub(crate) fn set_expire_ms(&mut self, ms: u64) {
        // The server adds its clock to the TTL: a TTL near i64::MAX would
        // wrap to an instant in the past (Valkey asserts on it). No TTL the
        // module sets comes near this one, about 317 years.
        const LONGEST_MS: u64 = crate::limiter::MAX_TIME_US / 1000;
        let ms = ms.clamp(1, LONGEST_MS) as i64;
        // SAFETY: the key is open for writing and holds a value.
        unsafe {
            if let Some(f) = raw::RedisModule_SetExpire {
                f(self.ptr, ms);
            }
        }
    }

    /// Makes the key expire at `at_ms` (Unix ms, at most
    /// [`LATEST_EXPIRY_MS`]): exactly where the server sets absolute
    /// expiries for modules (Redis 7.0 and later, Valkey), else as a TTL
    /// from the module's clock, which can land a millisecond off.
    pub(crate) fn set_expire_at_ms(&mut self, at_ms: u64) {
        // SAFETY: reading a function pointer Redis set at load time.
        let set_at = unsafe { raw::RedisModule_SetAbsExpire };
        match set_at {
            // SAFETY: the key is open for writing and holds a value.
            Some(f) if at_ms <= LATEST_EXPIRY_MS => unsafe {
                f(self.ptr, at_ms as i64);
            },
            _ => self.set_expire_ms(at_ms.saturating_sub(super::clock::now_us() / 1000)),
        }
    }

    pub(crate) fn delete(&mut self) {
        // SAFETY: the key is open for writing.
        unsafe {
            if let Some(f) = raw::RedisModule_DeleteKey {
                f(self.ptr);
            }
        }
    }

    /// Tells the server the key changed: `WATCH`, client-side caching and
    /// keyspace notifications (`event`, a NUL-terminated module-class
    /// event name; `deleted` adds the generic `del`).
    pub(crate) fn changed(&self, event: *const c_char, deleted: bool) {
        // SAFETY: plain calls on the key's context and name.
        unsafe {
            if let Some(signal) = raw::RedisModule_SignalModifiedKey {
                signal(self.ctx, self.name);
            }
            if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
                notify(self.ctx, raw::REDISMODULE_NOTIFY_MODULE as c_int, event, self.name);
                if deleted {
                    notify(self.ctx, raw::REDISMODULE_NOTIFY_GENERIC as c_int, cstr!("del"), self.name);
                }
            }
        }
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: opened by us, closed once.
            unsafe {
                if let Some(f) = raw::RedisModule_CloseKey {
                    f(self.ptr);
                }
            }
        }
    }
}

pub(crate) fn reply_error(ctx: Ctx, message: &str) {
    // Redis wants a C string; an error message has no NUL inside.
    let mut text = Vec::with_capacity(message.len() + 1);
    text.extend(message.bytes().filter(|&b| b != 0 && b != b'\r' && b != b'\n'));
    text.push(0);
    // SAFETY: NUL-terminated buffer alive across the call (Redis copies it).
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithError {
            f(ctx, text.as_ptr().cast::<c_char>());
        }
    }
}

pub(crate) fn reply_array(ctx: Ctx, len: usize) {
    // SAFETY: plain call on the command's context.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithArray {
            f(ctx, len as std::ffi::c_long);
        }
    }
}

pub(crate) fn reply_integer(ctx: Ctx, value: i64) {
    // SAFETY: plain call on the command's context.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithLongLong {
            f(ctx, value);
        }
    }
}

pub(crate) fn reply_wrong_arity(ctx: Ctx) {
    // SAFETY: plain call on the command's context.
    unsafe {
        if let Some(f) = raw::RedisModule_WrongArity {
            f(ctx);
        }
    }
}

pub(crate) fn reply_simple_ok(ctx: Ctx) {
    // SAFETY: plain call on the command's context.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithSimpleString {
            f(ctx, cstr!("OK"));
        }
    }
}

pub(crate) fn reply_map(ctx: Ctx, len: usize) {
    // SAFETY: plain call on the command's context (RESP2 clients get a
    // flat array of twice the length).
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithMap {
            f(ctx, len as std::ffi::c_long);
        }
    }
}

/// A simple string from a NUL-terminated literal (see `cstr!`).
pub(crate) fn reply_simple(ctx: Ctx, text: *const c_char) {
    // SAFETY: callers pass NUL-terminated literals.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithSimpleString {
            f(ctx, text);
        }
    }
}

pub(crate) fn reply_bool(ctx: Ctx, value: bool) {
    // SAFETY: plain call on the command's context.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithBool {
            f(ctx, c_int::from(value));
        }
    }
}

pub(crate) fn reply_null(ctx: Ctx) {
    // SAFETY: plain call on the command's context.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithNull {
            f(ctx);
        }
    }
}

pub(crate) fn reply_string(ctx: Ctx, text: &[u8]) {
    // SAFETY: Redis copies the buffer.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithStringBuffer {
            f(ctx, text.as_ptr().cast::<c_char>(), text.len());
        }
    }
}
