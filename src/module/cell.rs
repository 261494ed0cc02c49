//! `CL.THROTTLE key max_burst count_per_period period [quantity]`:
//! redis-cell's command and reply, running on the TOKEN type (`thr-token`),
//! so redis-cell's client libraries switch without a code change. The
//! semantics, and where they cannot be exact, are in `limiter::cell`.
//!
//! How the arguments map onto THROTTLE.TOKEN, so that
//! `THROTTLE.TOKEN key <count> <period>s BURST <max_burst + 1>` on the same
//! key sees the same bucket (same parameters, no conversion):
//!
//! | CL.THROTTLE            | THROTTLE.TOKEN                                 |
//! |------------------------|------------------------------------------------|
//! | `key`                  | `key` (type `thr-token`)                       |
//! | `max_burst`            | `BURST max_burst + 1` (reply's `limit`)        |
//! | `count_per_period`     | `limit`                                        |
//! | `period` (seconds)     | `period` as `<period>s`                        |
//! | `quantity` (default 1) | `COST quantity` (0 peeks; negative refunds)    |
//! | server clock           | `AT now_us`                                    |
//!
//! The reply stays redis-cell's: `[limited 0/1, max_burst + 1, remaining,
//! retry_after s or -1, reset_after s]`, an array for RESP2 and RESP3
//! clients alike (its clients index it). Argument errors are redis-cell's
//! words after an `ERR` code; a key of another type gets WRONGTYPE (where
//! redis-cell would crash).
//!
//! Propagation is deterministic, and only when the state changed:
//! - the key held the call's parameters (or nothing): `THROTTLE.TOKEN key
//!   <count> <period>s COST <quantity> AT <now_us> TTLFROM <now_ms> BURST
//!   <max_burst + 1>` (a refund's COST is capped at the burst, which already empties the
//!   bucket); the replica runs the same bucket step, TTL and deletion;
//! - the key held other parameters (redis-cell keeps the debt in time where
//!   THROTTLE.TOKEN would keep tokens): the converted state itself,
//!   `THROTTLE._LOAD key thr-token <version> <words>` then `PEXPIREAT key
//!   <unix ms>`, or `DEL key` when the bucket is full again.

use std::ffi::c_char;

use redis_module::raw;

use super::docs::{ArgDoc, KEY_ARG};
use super::ffi::{self, cstr, Ctx, Key, RString, Slot};
use super::stats::{self, Counter};
use super::types::{Stored, TOKEN_TYPE};
use crate::codec::{Codec, ENCODING_VERSION};
use crate::limiter::cell::{self as mapping, CellError, CellQuota, CellReply, Change, Outcome};
use crate::limiter::TokenBucket;

const INTEGER: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;

/// The arguments as COMMAND DOCS shows them.
pub(crate) const ARGS: &[ArgDoc] = &[
    KEY_ARG,
    ArgDoc { name: "max_burst", kind: INTEGER, token: None, optional: false, multiple: false },
    ArgDoc { name: "count_per_period", kind: INTEGER, token: None, optional: false, multiple: false },
    ArgDoc { name: "period", kind: INTEGER, token: None, optional: false, multiple: false },
    ArgDoc { name: "quantity", kind: INTEGER, token: None, optional: true, multiple: false },
];

enum Failure {
    Cell(CellError),
    WrongType,
}

impl From<CellError> for Failure {
    fn from(e: CellError) -> Self {
        Failure::Cell(e)
    }
}

pub(crate) fn cl_throttle(ctx: Ctx, argv: &[RString]) {
    stats::CELL.add(Counter::Calls);
    match run(ctx, argv) {
        Ok(reply) => {
            stats::CELL.add(if reply.limited { Counter::Limited } else { Counter::Admitted });
            ffi::reply_array(ctx, 5);
            for value in reply.to_array() {
                ffi::reply_integer(ctx, value);
            }
        }
        Err(Failure::Cell(e)) => ffi::reply_error(ctx, &e.message()),
        Err(Failure::WrongType) => ffi::reply_error(ctx, ffi::WRONGTYPE),
    }
}

fn run(ctx: Ctx, argv: &[RString]) -> Result<CellReply, Failure> {
    // redis-cell checks the count first, then parses in order.
    let (key_name, max_burst, count, period, quantity) = match argv {
        [_, key, b, c, p] => (*key, *b, *c, *p, None),
        [_, key, b, c, p, q] => (*key, *b, *c, *p, Some(*q)),
        _ => return Err(CellError::Usage.into()),
    };
    let max_burst = mapping::parse_integer(ffi::bytes(max_burst))?;
    let count = mapping::parse_integer(ffi::bytes(count))?;
    let period = mapping::parse_integer(ffi::bytes(period))?;
    let quantity = match quantity {
        Some(q) => mapping::parse_integer(ffi::bytes(q))?,
        None => 1,
    };
    let quota = CellQuota::new(max_burst, count, period)?;

    let mut key = Key::open(ctx, key_name);
    let now_us = super::clock::now_us();
    let mut words = Vec::new();
    let (outcome, settled) = match key.slot::<TokenBucket>(&TOKEN_TYPE) {
        Slot::Other => return Err(Failure::WrongType),
        Slot::Mine(state) => {
            let outcome = mapping::throttle(state, &quota, quantity, now_us);
            if matches!(outcome.change, Change::Stored { .. }) {
                state.encode(&mut |w| words.push(w));
            }
            let settled = match outcome.change {
                Change::None => false,
                Change::Token { ttl_ms: 0, .. } | Change::Emptied => {
                    key.delete();
                    true
                }
                Change::Token { ttl_ms, .. } | Change::Stored { ttl_ms } => {
                    key.set_expire_ms(ttl_ms);
                    true
                }
            };
            (outcome, settled)
        }
        Slot::Empty => {
            let mut state = TokenBucket::default();
            let outcome = mapping::throttle(&mut state, &quota, quantity, now_us);
            if matches!(outcome.change, Change::Stored { .. }) {
                state.encode(&mut |w| words.push(w));
            }
            let settled = match outcome.change {
                Change::None | Change::Token { ttl_ms: 0, .. } | Change::Emptied => false,
                Change::Token { ttl_ms, .. } | Change::Stored { ttl_ms } => {
                    let stored = key.set(&TOKEN_TYPE, state);
                    if stored {
                        key.set_expire_ms(ttl_ms);
                    }
                    stored
                }
            };
            (outcome, settled)
        }
    };
    if settled {
        let deleted = matches!(outcome.change, Change::Token { ttl_ms: 0, .. } | Change::Emptied);
        key.changed(cstr!("cl.throttle"), deleted);
    }
    drop(key);
    if settled && quantity < 0 {
        super::wait::units_returned(ctx, key_name);
    }
    if settled {
        let flags = super::ffi::context_flags(ctx);
        super::propagation::send(ctx, flags, || propagate(ctx, key_name, &quota, &outcome, &words));
    }
    outcome.reply.map_err(Failure::Cell)
}

fn propagate(ctx: Ctx, key: RString, quota: &CellQuota, outcome: &Outcome, words: &[u64]) {
    // SAFETY: reading a function pointer Redis set at load time.
    let Some(replicate) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    let params = quota.params();
    match outcome.change {
        Change::None => {}
        Change::Token { cost, .. } => {
            let mut buffer = [0u8; 24];
            let period = super::propagation::decimal(quota.period_s(), b"s", &mut buffer);
            let at = i64::try_from(outcome.now_us).unwrap_or(i64::MAX);
            let limit = i64::try_from(params.limit()).unwrap_or(i64::MAX);
            let burst = i64::try_from(params.burst()).unwrap_or(i64::MAX);
            // SAFETY: each format letter matches its argument: s =
            // RedisModuleString, l = long long, b = buffer and length, c = C
            // string.
            unsafe {
                replicate(
                    ctx,
                    cstr!("THROTTLE.TOKEN"),
                    cstr!("slbclclclcl"),
                    key,
                    limit,
                    period.as_ptr().cast::<c_char>(),
                    period.len(),
                    cstr!("COST"),
                    cost,
                    cstr!("AT"),
                    at,
                    cstr!("TTLFROM"),
                    now_ms(),
                    cstr!("BURST"),
                    burst,
                );
            }
        }
        Change::Stored { ttl_ms } => replicate_state(ctx, key, words, ttl_ms),
        Change::Emptied => {
            // SAFETY: s = RedisModuleString.
            unsafe {
                replicate(ctx, cstr!("DEL"), cstr!("s"), key);
            }
        }
    }
}

/// `THROTTLE._LOAD key thr-token <version> <words>` and `PEXPIREAT key <unix ms>`
/// (Redis wraps the two in MULTI/EXEC).
fn replicate_state(ctx: Ctx, key: RString, words: &[u64], ttl_ms: u64) {
    // SAFETY: reading function pointers Redis set at load time.
    let pointers = unsafe { (raw::RedisModule_Replicate, raw::RedisModule_CreateString, raw::RedisModule_FreeString) };
    let (Some(replicate), Some(create), Some(free)) = pointers else {
        return;
    };
    let mut strings: Vec<RString> = Vec::with_capacity(words.len());
    for w in words {
        let text = w.to_string();
        // SAFETY: Redis copies the buffer into a new string we free below.
        strings.push(unsafe { create(ctx, text.as_ptr().cast::<c_char>(), text.len()) });
    }
    let name = <TokenBucket as Stored>::NAME;
    let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX).max(1);
    // SAFETY: s = RedisModuleString, b = buffer and length, l = long long,
    // v = array of RedisModuleString and its length (Redis takes its own
    // references to them).
    unsafe {
        replicate(
            ctx,
            cstr!("THROTTLE._LOAD"),
            cstr!("sblv"),
            key,
            name.as_ptr().cast::<c_char>(),
            name.len(),
            i64::from(ENCODING_VERSION),
            strings.as_mut_ptr(),
            strings.len(),
        );
        // Absolute, so a late replica or an AOF replay expires it when the
        // master does.
        replicate(ctx, cstr!("PEXPIREAT"), cstr!("sl"), key, now_ms().saturating_add(ttl));
        for s in strings {
            free(ctx, s);
        }
    }
}

/// The server's clock in Unix ms, as the propagated forms carry it.
fn now_ms() -> i64 {
    i64::try_from(super::clock::now_us() / 1000).unwrap_or(i64::MAX)
}
