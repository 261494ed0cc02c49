//! Per-command counters for the `throttle_stats` INFO section.

use std::ffi::CString;
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
}

const COUNTER_NAMES: [&str; 5] = ["calls", "admitted", "limited", "blocked", "timed_out"];

pub(crate) struct Counters([AtomicU64; 5]);

impl Counters {
    const fn new() -> Counters {
        Counters([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)])
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

pub(crate) fn for_command(algorithm: Algorithm) -> &'static Counters {
    match algorithm {
        Algorithm::Fixed => &FIXED,
        Algorithm::Sliding => &SLIDING,
        Algorithm::Token => &TOKEN,
        Algorithm::Leaky => &LEAKY,
    }
}

/// `INFO throttle` shows one line per command:
/// `throttle_fixed:calls=3,admitted=2,limited=1,blocked=0,timed_out=0`.
pub(crate) unsafe extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: std::ffi::c_int) {
    let _ = std::panic::catch_unwind(|| {
        let (Some(section), Some(begin), Some(field), Some(end)) = (
            raw::RedisModule_InfoAddSection,
            raw::RedisModule_InfoBeginDictField,
            raw::RedisModule_InfoAddFieldULongLong,
            raw::RedisModule_InfoEndDictField,
        ) else {
            return;
        };
        section(ctx, super::ffi::cstr!("stats"));
        let commands: [(&str, &Counters); 6] = [
            ("fixed", &FIXED),
            ("sliding", &SLIDING),
            ("token", &TOKEN),
            ("leaky", &LEAKY),
            ("all", &ALL),
            ("cl_throttle", &CELL),
        ];
        for (name, counters) in commands {
            let Ok(name) = CString::new(name) else { continue };
            begin(ctx, name.as_ptr());
            for (i, counter) in COUNTER_NAMES.iter().enumerate() {
                let Ok(counter) = CString::new(*counter) else { continue };
                let value = counters.0.get(i).map_or(0, |c| c.load(Ordering::Relaxed));
                field(ctx, counter.as_ptr(), value);
            }
            end(ctx);
        }
        field(ctx, super::ffi::cstr!("waiting_clients"), super::block::waiting() as u64);
    });
}
