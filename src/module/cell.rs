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
//! Propagation is deterministic, and only when the state changed: the
//! bucket itself with the instant it is full again (`THROTTLE._SET`), or
//! `DEL key` when it is full already.

use redis_module::raw;

use super::apply::idle_at_ms;
use super::docs::{ArgDoc, KEY_ARG};
use super::ffi::{self, cstr, Ctx, Key, RString, Slot};
use super::propagation;
use super::stats::{self, Counter};
use super::types::{Snapshot, TokenState, TOKEN_TYPE};
use crate::limiter::cell::{self as mapping, CellError, CellQuota, CellReply, Change};
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
    let now_us = super::clock::now_us();
    let (outcome, settled) = match key.slot::<TokenState>(&TOKEN_TYPE) {
        Slot::Other => return Err(Failure::WrongType),
        // redis-cell has no bans: a key that THROTTLE.TOKEN banned is not
        // one it can answer for.
        Slot::Mine(state) if state.ban().is_some() => return Err(Failure::Banned),
        Slot::Mine(state) => {
            let outcome = mapping::throttle(&mut state.inner, &quota, quantity, now_us);
            let changed = outcome.change != Change::None;
            (outcome, changed)
        }
        Slot::Empty => {
            let mut state = TokenBucket::default();
            let outcome = mapping::throttle(&mut state, &quota, quantity, now_us);
            let stored = match outcome.change {
                Change::None | Change::Token { ttl_us: 0, .. } | Change::Emptied => false,
                Change::Token { .. } | Change::Stored { .. } => key.set(&TOKEN_TYPE, TokenState::new(state)),
            };
            (outcome, stored)
        }
    };
    if !settled {
        return outcome.reply.map_err(Failure::Cell);
    }
    let ttl_us = match outcome.change {
        Change::Token { ttl_us, .. } | Change::Stored { ttl_us } => ttl_us,
        Change::None | Change::Emptied => 0,
    };
    // The instant it expires at, which the master sets and sends, as for
    // the THROTTLE commands.
    let expire_at_ms = idle_at_ms(now_us, ttl_us);
    if ttl_us == 0 {
        key.delete();
    } else {
        key.set_expire_at_ms(expire_at_ms);
    }
    key.changed(cstr!("cl.throttle"), ttl_us == 0);
    if quantity < 0 {
        super::blocked_clients::units_returned(ctx, key_name);
    }
    // Replicas and the AOF get the bucket whole with the instant it is full
    // again (redis-cell's own command would run again on their clocks), or
    // its deletion; made only when someone receives it.
    let flags = ffi::context_flags(ctx);
    propagation::send(ctx, flags, move || {
        let snapshot = match key.slot::<TokenState>(&TOKEN_TYPE) {
            Slot::Mine(state) if ttl_us > 0 => Snapshot::of(state, expire_at_ms),
            _ => None,
        };
        drop(key);
        match snapshot {
            Some(snapshot) => propagation::set_state(ctx, key_name, &snapshot),
            None => propagation::delete(ctx, key_name),
        }
    });
    outcome.reply.map_err(Failure::Cell)
}
