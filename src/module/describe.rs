//! `THROTTLE.INFO key [AT µs]`: what a limiter key holds, changing nothing.

use std::ffi::c_char;

use super::ffi::{self, cstr, Ctx, Key, RString, Slot};
use super::types::Stored;
use crate::args::{parse_u64, ArgError};
use crate::limiter::{
    Decision, FixedWindow, LeakyBucket, Params, SlidingLog, SlidingWindow, TokenBucket, MAX_TIME_US,
};

/// The facts one state shows besides its parameters.
trait Describe: Stored {
    const ALGORITHM: &'static [u8];
    fn updated_at_us(&self) -> u64;
    /// SLIDING EXACT's log entries; others have none.
    fn entries(&self) -> Option<u64> {
        None
    }
}

impl Describe for FixedWindow {
    const ALGORITHM: &'static [u8] = b"fixed";
    fn updated_at_us(&self) -> u64 {
        self.updated_at_us
    }
}

impl Describe for SlidingWindow {
    const ALGORITHM: &'static [u8] = b"sliding";
    fn updated_at_us(&self) -> u64 {
        self.updated_at_us
    }
}

impl Describe for SlidingLog {
    const ALGORITHM: &'static [u8] = b"sliding-exact";
    fn updated_at_us(&self) -> u64 {
        self.updated_at_us
    }
    fn entries(&self) -> Option<u64> {
        Some(self.entries().count() as u64)
    }
}

impl Describe for TokenBucket {
    const ALGORITHM: &'static [u8] = b"token";
    fn updated_at_us(&self) -> u64 {
        self.0.updated_at_us
    }
}

impl Describe for LeakyBucket {
    const ALGORITHM: &'static [u8] = b"leaky";
    fn updated_at_us(&self) -> u64 {
        self.0.updated_at_us
    }
}

pub(crate) fn info(ctx: Ctx, argv: &[RString]) {
    let (key_name, at_us) = match argv {
        [_, key] => (*key, None),
        [_, key, option, value] if ffi::bytes(*option).eq_ignore_ascii_case(b"AT") => {
            match parse_u64(ffi::bytes(*value)).filter(|&t| t <= MAX_TIME_US) {
                Some(at) => (*key, Some(at)),
                None => return ffi::reply_error(ctx, &ArgError::At.message()),
            }
        }
        [_, _, option, _] => {
            let token = String::from_utf8_lossy(ffi::bytes(*option)).into_owned();
            return ffi::reply_error(ctx, &ArgError::UnknownOption(token).message());
        }
        _ => return ffi::reply_wrong_arity(ctx),
    };
    let now_us = at_us.unwrap_or_else(super::clock::now_us);
    let mut key = Key::open_read(ctx, key_name);
    let described = describe::<FixedWindow>(ctx, &mut key, now_us)
        || describe::<SlidingWindow>(ctx, &mut key, now_us)
        || describe::<SlidingLog>(ctx, &mut key, now_us)
        || describe::<TokenBucket>(ctx, &mut key, now_us)
        || describe::<LeakyBucket>(ctx, &mut key, now_us);
    if !described {
        match key.slot::<FixedWindow>(FixedWindow::redis_type()) {
            Slot::Empty => ffi::reply_null(ctx),
            _ => ffi::reply_error(ctx, ffi::WRONGTYPE),
        }
    }
}

/// Replies and returns true when the key holds a `T`.
fn describe<T: Describe>(ctx: Ctx, key: &mut Key, now_us: u64) -> bool {
    let Slot::Mine(state) = key.slot::<T>(T::redis_type()) else { return false };
    let Some(params) = state.last_params() else {
        ffi::reply_error(ctx, "ERR the key holds no parameters");
        return true;
    };
    // A peek: COST 0 changes nothing.
    let now = state.check(&params, 0, now_us);
    reply(ctx, T::ALGORITHM, &params, state.updated_at_us(), state.entries(), &now);
    true
}

fn reply(ctx: Ctx, algorithm: &[u8], params: &Params, updated_at_us: u64, entries: Option<u64>, now: &Decision) {
    let bucket = algorithm == b"token" || algorithm == b"leaky";
    let fields = 6 + usize::from(bucket) + usize::from(entries.is_some());
    ffi::reply_map(ctx, fields);
    let int = |name: *const c_char, value: i64| {
        ffi::reply_simple(ctx, name);
        ffi::reply_integer(ctx, value);
    };
    ffi::reply_simple(ctx, cstr!("algorithm"));
    ffi::reply_string(ctx, algorithm);
    int(cstr!("limit"), params.limit() as i64);
    int(cstr!("period_ms"), (params.period_us() / 1000) as i64);
    if bucket {
        int(cstr!("burst"), params.burst() as i64);
    }
    int(cstr!("updated_at"), updated_at_us as i64);
    if let Some(entries) = entries {
        int(cstr!("entries"), entries as i64);
    }
    int(cstr!("remaining"), now.remaining as i64);
    int(cstr!("reset_after"), now.reset_after_ms as i64);
}
