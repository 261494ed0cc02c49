//! The THROTTLE command handlers: parse, open the key, run the algorithm,
//! propagate the effect, reply.

use std::ffi::c_char;

use redis_module::raw;

use super::ffi::{self, cstr, Ctx, Key, RString, Slot};
use super::types::Stored;
use crate::args::{parse_call, Algorithm, ArgError, Call};
use crate::limiter::{Decision, FixedWindow, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket};

/// Why a call gets an error reply instead of a decision.
pub(crate) enum CommandError {
    Arg(ArgError),
    WrongType,
}

impl From<ArgError> for CommandError {
    fn from(e: ArgError) -> Self {
        CommandError::Arg(e)
    }
}

/// `THROTTLE.<ALGORITHM> key limit period [options]`.
pub(crate) fn throttle(ctx: Ctx, argv: &[RString], algorithm: Algorithm) {
    match decide(ctx, argv, algorithm) {
        Ok(decision) => reply_decision(ctx, &decision),
        Err(CommandError::Arg(ArgError::WrongArity)) => ffi::reply_wrong_arity(ctx),
        Err(CommandError::Arg(e)) => ffi::reply_error(ctx, &e.message()),
        Err(CommandError::WrongType) => ffi::reply_error(ctx, ffi::WRONGTYPE),
    }
}

fn decide(ctx: Ctx, argv: &[RString], algorithm: Algorithm) -> Result<Decision, CommandError> {
    let [_, key_name, rest @ ..] = argv else {
        return Err(ArgError::WrongArity.into());
    };
    let call = parse_call(algorithm, rest.iter().map(|s| ffi::bytes(*s)))?;
    let now_us = call.at_us.unwrap_or_else(super::clock::now_us);
    let key = Key::open(ctx, *key_name);
    let decision = match (algorithm, call.exact) {
        (Algorithm::Fixed, _) => acquire::<FixedWindow>(&key, &call, now_us)?,
        (Algorithm::Sliding, false) => acquire::<SlidingWindow>(&key, &call, now_us)?,
        (Algorithm::Sliding, true) => acquire::<SlidingLog>(&key, &call, now_us)?,
        (Algorithm::Token, _) => acquire::<TokenBucket>(&key, &call, now_us)?,
        (Algorithm::Leaky, _) => acquire::<LeakyBucket>(&key, &call, now_us)?,
    };
    if decision.allowed && call.cost > 0 {
        key.set_expire_ms(decision.reset_after_ms);
        propagate(ctx, argv, algorithm, &call, now_us);
    }
    Ok(decision)
}

/// Runs the call on the key's state, creating the key only when the call
/// takes units.
fn acquire<T: Stored>(key: &Key, call: &Call, now_us: u64) -> Result<Decision, CommandError> {
    match key.slot::<T>(T::redis_type()) {
        Slot::Mine(state) => Ok(state.acquire(&call.params, call.cost, now_us)),
        Slot::Empty => {
            let mut state = T::default();
            let decision = state.acquire(&call.params, call.cost, now_us);
            if decision.allowed && call.cost > 0 {
                key.set(T::redis_type(), state);
            }
            Ok(decision)
        }
        Slot::Other => Err(CommandError::WrongType),
    }
}

/// Replicas and the AOF get the call with its time fixed, so they compute
/// exactly the master's state: `CMD key limit period COST n AT t [BURST b]
/// [EXACT]`. Numbers go as integers; Redis formats them.
fn propagate(ctx: Ctx, argv: &[RString], algorithm: Algorithm, call: &Call, now_us: u64) {
    let (Some(replicate), [_, key, limit, period, ..]) = (unsafe { raw::RedisModule_Replicate }, argv) else {
        return;
    };
    let cost = call.cost as i64;
    let at = now_us as i64;
    let name = command_cstr(algorithm);
    // SAFETY: each format letter matches its argument: s = RedisModuleString,
    // c = C string, l = long long.
    unsafe {
        match algorithm {
            Algorithm::Fixed | Algorithm::Sliding if !call.exact => replicate(
                ctx, name, cstr!("sssclcl"), *key, *limit, *period, cstr!("COST"), cost, cstr!("AT"), at,
            ),
            Algorithm::Fixed | Algorithm::Sliding => replicate(
                ctx, name, cstr!("sssclclc"), *key, *limit, *period, cstr!("COST"), cost, cstr!("AT"), at,
                cstr!("EXACT"),
            ),
            Algorithm::Token | Algorithm::Leaky => replicate(
                ctx, name, cstr!("sssclclcl"), *key, *limit, *period, cstr!("COST"), cost, cstr!("AT"), at,
                cstr!("BURST"), call.params.burst() as i64,
            ),
        };
    }
}

fn command_cstr(algorithm: Algorithm) -> *const c_char {
    match algorithm {
        Algorithm::Fixed => cstr!("THROTTLE.FIXED"),
        Algorithm::Sliding => cstr!("THROTTLE.SLIDING"),
        Algorithm::Token => cstr!("THROTTLE.TOKEN"),
        Algorithm::Leaky => cstr!("THROTTLE.LEAKY"),
    }
}

fn reply_decision(ctx: Ctx, d: &Decision) {
    ffi::reply_array(ctx, 5);
    ffi::reply_integer(ctx, i64::from(d.allowed));
    ffi::reply_integer(ctx, d.limit as i64);
    ffi::reply_integer(ctx, d.remaining as i64);
    ffi::reply_integer(ctx, d.retry_after_ms);
    ffi::reply_integer(ctx, d.reset_after_ms as i64);
}
