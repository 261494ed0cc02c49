//! `CL.THROTTLE key max_burst count_per_period period [quantity]`:
//! redis-cell's command and reply, on the TOKEN type (`thr-token`), so
//! redis-cell's client libraries switch without a code change. The
//! semantics, and where they differ from redis-cell's, are in
//! `limiter::cell`.
//!
//! The key keeps what redis-cell keeps, its theoretical arrival time (with
//! the call's arguments, for THROTTLE.INFO), whatever the arguments: every
//! input redis-cell answers gets its reply, beyond the bounds of the native
//! commands too. THROTTLE.TOKEN on such a key reads the bucket whose debt
//! runs until that instant, so `THROTTLE.TOKEN key <count> <period>s BURST
//! <max_burst + 1>` sees the same bucket; CL.THROTTLE on a key THROTTLE.TOKEN
//! wrote reads the instant that bucket is full again.
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
//! Propagation is deterministic, and only when the state changed: the
//! state itself with the instant it expires (`THROTTLE._SET`), or `DEL
//! key` when the bucket is full again.

use redis_module::raw;

use super::docs::{ArgDoc, KEY_ARG};
use super::ffi::{self, cstr, Ctx, Key, RString, Slot};
use super::propagation;
use super::stats::{self, Counter};
use super::types::{Snapshot, TokenState, TOKEN_TYPE};
use crate::limiter::cell::{self as mapping, bucket_tat_ns, CellError, CellQuota, CellReply, CellState, Change};
use crate::limiter::{TokenBucket, TokenForm, MAX_TIME_US};

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
    Banned,
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
        Err(Failure::Banned) => {
            ffi::reply_error(ctx, "ERR the key is under a THROTTLE.TOKEN ban, which CL.THROTTLE cannot answer for")
        }
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
    // redis-cell's clock, to the µs (and within the bounds every state keeps).
    let now_us = super::clock::now_us().min(MAX_TIME_US);
    let now_ns = i128::from(now_us) * 1_000;
    let (tat, existed) = match key.slot::<TokenState>(&TOKEN_TYPE) {
        Slot::Other => return Err(Failure::WrongType),
        Slot::Empty => (None, false),
        // redis-cell has no bans: a key that THROTTLE.TOKEN banned is not
        // one it can answer for.
        Slot::Mine(state) if state.ban().is_some() => return Err(Failure::Banned),
        Slot::Mine(state) => match state.inner.form() {
            TokenForm::Cell(cell) => (i128::try_from(cell.tat_ns).ok(), true),
            TokenForm::Bucket(bucket) => (bucket_tat_ns(&bucket), true),
        },
    };
    let outcome = mapping::throttle(tat, &quota, quantity, now_ns);
    // What the key holds after the call: the state and its expiry instant,
    // or nothing (None: nothing changed).
    let after = match outcome.change {
        Change::None => None,
        Change::Delete if !existed => None,
        Change::Delete => Some(None),
        // Redis keeps a key through the ms its expiry names.
        Change::Store(tat_ns) => CellState::new(tat_ns, max_burst, count, period).map(|cell| {
            let expire_at_ms = u64::try_from(tat_ns / 1_000_000).unwrap_or(0);
            Some((TokenState::new(TokenBucket::from_cell(&cell)), expire_at_ms))
        }),
    };
    let Some(after) = after else { return outcome.reply.map_err(Failure::Cell) };
    match &after {
        Some((state, expire_at_ms)) => {
            let set = match key.slot::<TokenState>(&TOKEN_TYPE) {
                Slot::Mine(stored) => {
                    *stored = state.clone();
                    true
                }
                _ => key.set(&TOKEN_TYPE, state.clone()),
            };
            if !set {
                return outcome.reply.map_err(Failure::Cell);
            }
            key.set_expire_at_ms(*expire_at_ms);
        }
        None => key.delete(),
    }
    key.changed(cstr!("cl.throttle"), after.is_none());
    // Debt given back (a refund; with a negative rate, any taking): the
    // key's THROTTLE.TOKEN waiters may fit now.
    if i128::from(quota.emission_ns()) * i128::from(quantity) < 0 {
        super::blocked_clients::units_returned(ctx, key_name);
    }
    drop(key);
    // Replicas and the AOF get the state whole with the instant it expires
    // (redis-cell's own command would run again on their clocks), or its
    // deletion; made only when someone receives it.
    let flags = ffi::context_flags(ctx);
    propagation::send(ctx, flags, move || match after {
        Some((state, expire_at_ms)) => {
            // Seven words: a snapshot always has room for them.
            if let Some(snapshot) = Snapshot::of(&state, expire_at_ms) {
                propagation::set_state(ctx, key_name, &snapshot);
            }
        }
        None => propagation::delete(ctx, key_name),
    });
    outcome.reply.map_err(Failure::Cell)
}
