//! The module's settings: module arguments (`loadmodule ... cl-throttle
//! no max-waiters 5000`) and the matching `CONFIG GET/SET throttle.*`
//! entries (`throttle.cl-throttle` is fixed once loaded; the caps on
//! waiters change at any time).

use std::ffi::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redis_module::{raw, RedisString};

use super::ffi::{cstr, Ctx};
use crate::wait_queue::Caps;

/// Whether `CL.THROTTLE` (redis-cell's command) is registered. Off for
/// servers that also load redis-cell, whose command has the same name.
pub(crate) static CL_THROTTLE: AtomicBool = AtomicBool::new(true);

/// Most clients waiting (`BLOCK`) on one key; a call beyond it answers at
/// once. Each waiter costs the server a blocked client (tens of KB).
static MAX_WAITERS_PER_KEY: AtomicU64 = AtomicU64::new(1_000);
/// Most clients waiting in all.
static MAX_WAITERS: AtomicU64 = AtomicU64::new(10_000);
/// The largest value either cap takes.
const MAX_CAP: u64 = 1_000_000;

pub(crate) fn waiter_caps() -> Caps {
    let cap = |a: &AtomicU64| usize::try_from(a.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
    Caps { per_key: cap(&MAX_WAITERS_PER_KEY), total: cap(&MAX_WAITERS) }
}

fn parse_bool(value: &[u8]) -> Option<bool> {
    match value.to_ascii_lowercase().as_slice() {
        b"yes" | b"on" | b"1" | b"true" => Some(true),
        b"no" | b"off" | b"0" | b"false" => Some(false),
        _ => None,
    }
}

fn parse_cap(value: &[u8]) -> Option<u64> {
    crate::args::parse_u64(value).filter(|&n| n <= MAX_CAP)
}

/// Reads the module arguments, as name-value pairs.
pub(crate) fn from_module_args(args: &[RedisString]) -> Result<(), String> {
    let mut args = args.iter();
    while let Some(name) = args.next() {
        let name = name.as_slice();
        let value = args.next().map(|v| v.as_slice()).unwrap_or_default();
        let applied = match name.to_ascii_lowercase().as_slice() {
            b"cl-throttle" => parse_bool(value).map(|on| CL_THROTTLE.store(on, Ordering::Relaxed)),
            b"max-waiters" => parse_cap(value).map(|n| MAX_WAITERS.store(n, Ordering::Relaxed)),
            b"max-waiters-per-key" => parse_cap(value).map(|n| MAX_WAITERS_PER_KEY.store(n, Ordering::Relaxed)),
            _ => None,
        };
        if applied.is_none() {
            return Err(format!(
                "throttle: bad module argument '{} {}' (expected: cl-throttle yes|no, max-waiters 0-{MAX_CAP}, \
                 max-waiters-per-key 0-{MAX_CAP})",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(value)
            ));
        }
    }
    Ok(())
}

unsafe extern "C" fn get_cl_throttle(_name: *const c_char, _privdata: *mut c_void) -> c_int {
    c_int::from(CL_THROTTLE.load(Ordering::Relaxed))
}

unsafe extern "C" fn set_cl_throttle(
    _name: *const c_char,
    value: c_int,
    _privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    CL_THROTTLE.store(value != 0, Ordering::Relaxed);
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn get_cap(_name: *const c_char, privdata: *mut c_void) -> c_longlong {
    privdata.cast::<AtomicU64>().as_ref().map_or(0, |cap| cap.load(Ordering::Relaxed) as c_longlong)
}

unsafe extern "C" fn set_cap(
    _name: *const c_char,
    value: c_longlong,
    privdata: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // Redis has checked the range given at registration.
    if let Some(cap) = privdata.cast::<AtomicU64>().as_ref() {
        cap.store(value.max(0) as u64, Ordering::Relaxed);
    }
    raw::REDISMODULE_OK as c_int
}

/// Registers the settings and applies redis.conf's values.
pub(crate) fn register(ctx: Ctx) -> bool {
    // SAFETY: OnLoad context; Redis copies the names; the caps are statics.
    unsafe {
        let (Some(register_bool), Some(register_numeric)) =
            (raw::RedisModule_RegisterBoolConfig, raw::RedisModule_RegisterNumericConfig)
        else {
            return true;
        };
        let ok = |status: c_int| status == raw::REDISMODULE_OK as c_int;
        let caps: [(*const c_char, &AtomicU64); 2] =
            [(cstr!("max-waiters-per-key"), &MAX_WAITERS_PER_KEY), (cstr!("max-waiters"), &MAX_WAITERS)];
        ok(register_bool(
            ctx,
            cstr!("cl-throttle"),
            c_int::from(CL_THROTTLE.load(Ordering::Relaxed)),
            raw::REDISMODULE_CONFIG_IMMUTABLE,
            Some(get_cl_throttle),
            Some(set_cl_throttle),
            None,
            std::ptr::null_mut(),
        )) && caps.iter().all(|&(name, cap)| {
            ok(register_numeric(
                ctx,
                name,
                cap.load(Ordering::Relaxed) as c_longlong,
                raw::REDISMODULE_CONFIG_DEFAULT,
                0,
                MAX_CAP as c_longlong,
                Some(get_cap),
                Some(set_cap),
                None,
                (cap as *const AtomicU64).cast_mut().cast(),
            ))
        }) && raw::RedisModule_LoadConfigs.is_none_or(|load| ok(load(ctx)))
    }
}
