//! The THROTTLE command handlers: parse, open the key, run the algorithm,
//! propagate the effect, reply.

use std::ffi::c_char;

use redis_module::raw;

use super::ffi::{self, cstr, Ctx, Key, RString, Slot};
use super::stats::{self, Counter};
use super::types::Stored;
use super::{block, reply};
use crate::args::{parse_call, Algorithm, ArgError, Call};
use crate::limiter::{Decision, FixedWindow, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket, NEVER};

/// Why a call gets an error reply instead of a decision.
#[derive(Debug)]
pub(crate) enum CommandError {
    Arg(ArgError),
    WrongType,
}

impl From<ArgError> for CommandError {
    fn from(e: ArgError) -> Self {
        CommandError::Arg(e)
    }
}

impl CommandError {
    pub(crate) fn reply(&self, ctx: Ctx) {
        match self {
            CommandError::Arg(ArgError::WrongArity) => ffi::reply_wrong_arity(ctx),
            CommandError::Arg(e) => ffi::reply_error(ctx, &e.message()),
            CommandError::WrongType => ffi::reply_error(ctx, ffi::WRONGTYPE),
        }
    }
}

/// What one call did to its key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome {
    pub decision: Decision,
    /// The key's state changed: set its TTL (or delete it when idle) and
    /// propagate.
    pub changed: bool,
}

/// `THROTTLE.<ALGORITHM> key limit period [options]`.
pub(crate) fn throttle(ctx: Ctx, argv: &[RString], algorithm: Algorithm) {
    let counters = stats::for_command(algorithm);
    counters.add(Counter::Calls);
    let result = (|| {
        let [_, key_name, rest @ ..] = argv else {
            return Err(CommandError::from(ArgError::WrongArity));
        };
        let call = parse_call(algorithm, rest.iter().map(|s| ffi::bytes(*s)))?;
        refuse_internal_options(ctx, &call)?;
        // A call at a fixed time (AT) cannot wait for the clock: BLOCK then
        // answers at once.
        let blocking = call.block_ms.is_some() && call.at_us.is_none();
        if blocking && block::must_queue(ctx, *key_name, algorithm, &call) {
            return Ok(None);
        }
        let now_us = call.at_us.unwrap_or_else(super::clock::now_us);
        let outcome = execute(ctx, *key_name, algorithm, &call, now_us)?;
        if call.cost < 0 && outcome.changed {
            block::units_returned(ctx, *key_name);
        }
        let may_wait = blocking && !outcome.decision.allowed && outcome.decision.retry_after_ms != NEVER;
        if may_wait && block::wait(ctx, argv, algorithm, &call, &outcome.decision) {
            return Ok(None);
        }
        Ok(Some(outcome.decision))
    })();
    match result {
        Ok(Some(decision)) => {
            counters.add(if decision.allowed { Counter::Admitted } else { Counter::Limited });
            reply::decision(ctx, &decision);
        }
        Ok(None) => counters.add(Counter::Blocked),
        Err(e) => e.reply(ctx),
    }
}

/// Runs one call on the key and, when the state changed, sets its TTL (or
/// deletes it when it is idle again) and propagates the call with its time.
pub(crate) fn execute(
    ctx: Ctx,
    key_name: RString,
    algorithm: Algorithm,
    call: &Call,
    now_us: u64,
) -> Result<Outcome, CommandError> {
    let key = Key::open(ctx, key_name);
    let outcome = run_on_key(&key, algorithm, call, now_us, Mode::Apply)?;
    if outcome.changed {
        let now_ms = super::clock::now_us() / 1000;
        settle(&key, &outcome, call, now_ms);
        drop(key);
        propagate(ctx, key_name, algorithm, call, now_us, now_ms);
    }
    Ok(outcome)
}

/// `TTLFROM` comes only with the propagated form: from the master's
/// replication stream or an AOF being loaded.
pub(crate) fn refuse_internal_options(ctx: Ctx, call: &Call) -> Result<(), CommandError> {
    if call.ttl_from_ms.is_none() {
        return Ok(());
    }
    // SAFETY: plain call on a live context.
    let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(ctx)) } as u32;
    if flags & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0 {
        Ok(())
    } else {
        Err(ArgError::InternalOption.into())
    }
}

/// After a change: the key expires when it is idle again, `reset_after`
/// after the call (after the master's call, for a propagated one); an idle
/// key is deleted.
pub(crate) fn settle(key: &Key, outcome: &Outcome, call: &Call, now_ms: u64) {
    let reset_after_ms = outcome.decision.reset_after_ms;
    if reset_after_ms == 0 {
        key.delete();
        return;
    }
    let ttl_ms = match call.ttl_from_ms {
        Some(from_ms) => (from_ms + reset_after_ms).saturating_sub(now_ms),
        None => reset_after_ms,
    };
    key.set_expire_ms(ttl_ms);
}

/// Apply changes the key; DryRun answers what Apply would, changing nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Apply,
    DryRun,
}

pub(crate) fn run_on_key(
    key: &Key,
    algorithm: Algorithm,
    call: &Call,
    now_us: u64,
    mode: Mode,
) -> Result<Outcome, CommandError> {
    match (algorithm, call.exact) {
        (Algorithm::Fixed, _) => run::<FixedWindow>(key, call, now_us, mode),
        (Algorithm::Sliding, false) => run::<SlidingWindow>(key, call, now_us, mode),
        (Algorithm::Sliding, true) => run::<SlidingLog>(key, call, now_us, mode),
        (Algorithm::Token, _) => run::<TokenBucket>(key, call, now_us, mode),
        (Algorithm::Leaky, _) => run::<LeakyBucket>(key, call, now_us, mode),
    }
}

fn run<T: Stored>(key: &Key, call: &Call, now_us: u64, mode: Mode) -> Result<Outcome, CommandError> {
    let existing = match key.slot::<T>(T::redis_type()) {
        Slot::Mine(state) => Some(state),
        Slot::Empty => None,
        Slot::Other => return Err(CommandError::WrongType),
    };
    let units = call.cost.unsigned_abs();
    let step = |state: &mut T| {
        if call.cost < 0 {
            state.refund(&call.params, units, now_us)
        } else {
            state.acquire(&call.params, units, now_us)
        }
    };
    let outcome = match (existing, mode) {
        (Some(state), Mode::Apply) => {
            let decision = step(state);
            let changed = call.cost < 0 || (decision.allowed && call.cost > 0);
            Outcome { decision, changed }
        }
        (Some(state), Mode::DryRun) => Outcome { decision: step(&mut state.clone()), changed: false },
        (None, _) => {
            // A refund or a peek on a missing key finds it idle and leaves
            // it missing; an admitted call creates it.
            let mut state = T::default();
            let decision = step(&mut state);
            let changed = mode == Mode::Apply && call.cost > 0 && decision.allowed;
            if changed {
                key.set(T::redis_type(), state);
            }
            Outcome { decision, changed }
        }
    };
    Ok(outcome)
}

/// Replicas and the AOF get the call with its time fixed, so they compute
/// exactly the master's state, and with the master's clock, so the key
/// expires at the same instant: `CMD key limit <period>ms COST n AT t
/// TTLFROM ms [BURST b] [EXACT]`. Numbers go as integers (Redis formats
/// them); the period is written into a stack buffer.
pub(crate) fn propagate(ctx: Ctx, key: RString, algorithm: Algorithm, call: &Call, now_us: u64, now_ms: u64) {
    // SAFETY: reading a function pointer Redis set at load time.
    let Some(replicate) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    let name = command_cstr(algorithm);
    let limit = call.params.limit() as i64;
    let mut buffer = [0u8; 24];
    let period = period_ms_text(call.params.period_us() / 1000, &mut buffer);
    let (period_ptr, period_len) = (period.as_ptr().cast::<c_char>(), period.len());
    let at = now_us as i64;
    let ttl_from = call.ttl_from_ms.unwrap_or(now_ms) as i64;
    // SAFETY: each format letter matches its argument: s = RedisModuleString,
    // b = buffer and length, c = C string, l = long long.
    unsafe {
        match algorithm {
            Algorithm::Fixed | Algorithm::Sliding if !call.exact => replicate(
                ctx, name, cstr!("slbclclcl"), key, limit, period_ptr, period_len, cstr!("COST"), call.cost,
                cstr!("AT"), at, cstr!("TTLFROM"), ttl_from,
            ),
            Algorithm::Fixed | Algorithm::Sliding => replicate(
                ctx, name, cstr!("slbclclclc"), key, limit, period_ptr, period_len, cstr!("COST"), call.cost,
                cstr!("AT"), at, cstr!("TTLFROM"), ttl_from, cstr!("EXACT"),
            ),
            Algorithm::Token | Algorithm::Leaky => replicate(
                ctx, name, cstr!("slbclclclcl"), key, limit, period_ptr, period_len, cstr!("COST"), call.cost,
                cstr!("AT"), at, cstr!("TTLFROM"), ttl_from, cstr!("BURST"), call.params.burst() as i64,
            ),
        };
    }
}

/// `<ms>ms` in decimal, written into `buffer` without allocating.
pub(crate) fn period_ms_text(ms: u64, buffer: &mut [u8; 24]) -> &[u8] {
    let mut end = buffer.len() - 2;
    buffer[end..].copy_from_slice(b"ms");
    let mut n = ms;
    loop {
        end -= 1;
        buffer[end] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buffer[end..]
}

fn command_cstr(algorithm: Algorithm) -> *const c_char {
    match algorithm {
        Algorithm::Fixed => cstr!("THROTTLE.FIXED"),
        Algorithm::Sliding => cstr!("THROTTLE.SLIDING"),
        Algorithm::Token => cstr!("THROTTLE.TOKEN"),
        Algorithm::Leaky => cstr!("THROTTLE.LEAKY"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn period_text() {
        let mut buffer = [0u8; 24];
        assert_eq!(super::period_ms_text(0, &mut buffer), b"0ms");
        assert_eq!(super::period_ms_text(315_360_000_000, &mut buffer), b"315360000000ms");
        assert_eq!(super::period_ms_text(u64::MAX, &mut buffer), b"18446744073709551615ms");
    }
}
