//! Per-command counters for the `throttle_stats` INFO section.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::raw;

use crate::args::Algorithm;

#[derive(Clone, Copy)]
pub(crate) enum Counter {
    Calls,
    Admitted,
    Limited,
    Blocked,
    TimedOut,
    /// A `BLOCK` call answered at once because a cap on waiters was
    /// reached (it is also counted as admitted or limited).
    OverCap,
}

const COUNTER_NAMES: [&CStr; 6] = [c"calls", c"admitted", c"limited", c"blocked", c"timed_out", c"over_cap"];

pub(crate) struct Counters([AtomicU64; 6]);

impl Counters {
    const fn new() -> Counters {
        Counters([const { AtomicU64::new(0) }; 6])
    }

    pub(crate) fn add(&self, counter: Counter) {
        self.0[counter as usize].fetch_add(1, Ordering::Relaxed);
    }
}

static FIXED: Counters = Counters::new();
static SLIDING: Counters = Counters::new();
static TOKEN: Counters = Counters::new();
static LEAKY: Counters = Counters::new();
pub(crate) static ALL: Counters = Counters::new();
pub(crate) static CELL: Counters = Counters::new();
pub(crate) static ACQUIRE: Counters = Counters::new();
pub(crate) static RELEASE: Counters = Counters::new();
pub(crate) static RENEW: Counters = Counters::new();

pub(crate) fn for_command(algorithm: Algorithm) -> &'static Counters {
    match algorithm {
        Algorithm::Fixed => &FIXED,
        Algorithm::Sliding => &SLIDING,
        Algorithm::Token => &TOKEN,
        Algorithm::Leaky => &LEAKY,
    }
}

/// The `throttle_stats` INFO section: one line per command,
/// `throttle_fixed:calls=3,admitted=2,limited=1,blocked=0,timed_out=0,over_cap=0`,
/// then `extra` fields. For RELEASE and RENEW, `admitted` counts the
/// calls whose token held a lease and `limited` those whose did not.
pub(crate) fn info(ctx: *mut raw::RedisModuleInfoCtx, extra: &[(&CStr, u64)]) {
    // SAFETY: the INFO context Redis passed to the module's INFO callback.
    unsafe {
        let (Some(section), Some(begin), Some(field), Some(end)) = (
            raw::RedisModule_InfoAddSection,
            raw::RedisModule_InfoBeginDictField,
            raw::RedisModule_InfoAddFieldULongLong,
            raw::RedisModule_InfoEndDictField,
        ) else {
            return;
        };
        section(ctx, super::ffi::cstr!("stats"));
        let commands: [(&CStr, &Counters); 9] = [
            (c"fixed", &FIXED),
            (c"sliding", &SLIDING),
            (c"token", &TOKEN),
            (c"leaky", &LEAKY),
            (c"all", &ALL),
            (c"cl_throttle", &CELL),
            (c"acquire", &ACQUIRE),
            (c"release", &RELEASE),
            (c"renew", &RENEW),
        ];
        for (name, counters) in commands {
            begin(ctx, name.as_ptr());
            for (counter, value) in COUNTER_NAMES.iter().zip(&counters.0) {
                field(ctx, counter.as_ptr(), value.load(Ordering::Relaxed));
            }
            end(ctx);
        }
        for (name, value) in extra {
            field(ctx, name.as_ptr(), *value);
        }
    }
}
