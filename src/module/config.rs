//! The module's settings: module arguments (`loadmodule ... cl-throttle
//! no`) and the matching `CONFIG GET throttle.*` entries.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{raw, RedisString};

use super::ffi::{cstr, Ctx};

/// Whether `CL.THROTTLE` (redis-cell's command) is registered. Off for
/// servers that also load redis-cell, whose command has the same name.
pub(crate) static CL_THROTTLE: AtomicBool = AtomicBool::new(true);

fn parse_bool(value: &[u8]) -> Option<bool> {
    match value.to_ascii_lowercase().as_slice() {
        b"yes" | b"on" | b"1" | b"true" => Some(true),
        b"no" | b"off" | b"0" | b"false" => Some(false),
        _ => None,
    }
}

/// Reads the module arguments, as name-value pairs.
pub(crate) fn from_module_args(args: &[RedisString]) -> Result<(), String> {
    let mut args = args.iter();
    while let Some(name) = args.next() {
        let name = name.as_slice();
        let value = args.next().map(|v| v.as_slice());
        match (name.to_ascii_lowercase().as_slice(), value.and_then(parse_bool)) {
            (b"cl-throttle", Some(on)) => CL_THROTTLE.store(on, Ordering::Relaxed),
            _ => {
                return Err(format!(
                    "throttle: bad module argument '{}' (expected: cl-throttle yes|no)",
                    String::from_utf8_lossy(name)
                ))
            }
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

/// Registers `throttle.cl-throttle` (immutable: it decides at load time
/// whether the command exists) and applies redis.conf's values.
pub(crate) fn register(ctx: Ctx) -> bool {
    // SAFETY: OnLoad context; Redis copies the name.
    unsafe {
        let Some(register_bool) = raw::RedisModule_RegisterBoolConfig else { return true };
        let ok = register_bool(
            ctx,
            cstr!("cl-throttle"),
            c_int::from(CL_THROTTLE.load(Ordering::Relaxed)),
            raw::REDISMODULE_CONFIG_IMMUTABLE,
            Some(get_cl_throttle),
            Some(set_cl_throttle),
            None,
            std::ptr::null_mut(),
        ) == raw::REDISMODULE_OK as c_int;
        ok && raw::RedisModule_LoadConfigs.is_none_or(|load| load(ctx) == raw::REDISMODULE_OK as c_int)
    }
}
