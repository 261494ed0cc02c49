//! The THROTTLE command handlers: parse, open the key, run the algorithm,
//! propagate the effect, reply.

use std::ffi::c_char;

use redis_module::raw;

use super::ffi::{self, cstr, Ctx, Key, RString, Slot};
use super::stats::{self, Counter};
use super::types::Stored;
use super::propagation::{self, decimal, signed_decimal};
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

/// Where a call runs: a command handler has the client's own command at
/// hand (and its context's flags), a timer serving a blocked call does not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Handler { context_flags: u32 },
    Timer,
}

/// What one call did to its key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome {
    pub decision: Decision,
    /// The key's state changed: set its TTL (or delete it when idle) and
    /// propagate.
    pub changed: bool,
    /// The call, on the server's clock, left the instant the key goes idle
    /// where it was ([`crate::limiter::Limiter::idle_at_us`]): the expiry set when that
    /// instant last moved still holds, and setting it again (a lookup in
    /// the expires table) is skipped.
    pub expiry_holds: bool,
}

/// `THROTTLE.<ALGORITHM> key limit period [options]`.
pub(crate) fn throttle(ctx: Ctx, argv: &[RString], algorithm: Algorithm) {
    let counters = stats::for_command(algorithm);
    counters.add(Counter::Calls);
    let context_flags = ffi::context_flags(ctx);
    let result = (|| {
        let [_, key_name, rest @ ..] = argv else {
            return Err(CommandError::from(ArgError::WrongArity));
        };
        let call = parse_call(algorithm, rest.iter().map(|s| ffi::bytes(*s)))?;
        refuse_internal_options(context_flags, &call)?;
        // A call at a fixed time (AT) cannot wait for the clock: BLOCK then
        // answers at once.
        let blocking = call.block_ms.is_some() && call.at_us.is_none();
        if blocking && block::must_queue(ctx, *key_name, algorithm, &call) {
            return Ok(None);
        }
        let now_us = call.at_us.unwrap_or_else(super::clock::now_us);
        let outcome = execute(ctx, *key_name, algorithm, &call, now_us, Origin::Handler { context_flags })?;
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
            reply::decision(ctx, context_flags, &decision);
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
    origin: Origin,
) -> Result<Outcome, CommandError> {
    let key = Key::open(ctx, key_name);
    let outcome = run_on_key(&key, algorithm, call, now_us, Mode::Apply)?;
    if outcome.changed {
        let now_ms = server_now_ms(call, now_us);
        settle(&key, &outcome, call, now_ms);
        drop(key);
        let full = || propagate(ctx, key_name, algorithm, call, now_us, now_ms);
        match origin {
            Origin::Handler { context_flags } => propagation::send(ctx, context_flags, full),
            Origin::Timer => full(),
        }
    }
    Ok(outcome)
}

/// The server's clock in ms for a call at `now_us`: that time itself when
/// the call runs on the server's clock (no second reading), else the clock.
pub(crate) fn server_now_ms(call: &Call, now_us: u64) -> u64 {
    match call.at_us {
        None => now_us / 1000,
        Some(_) => super::clock::now_us() / 1000,
    }
}

/// `TTLFROM` comes only with the propagated form: from the master's
/// replication stream or an AOF being loaded.
pub(crate) fn refuse_internal_options(context_flags: u32, call: &Call) -> Result<(), CommandError> {
    if call.ttl_from_ms.is_none() {
        return Ok(());
    }
    if context_flags & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0 {
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
    if !outcome.expiry_holds {
        key.set_expire_ms(ttl_ms);
    }
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
            let idle_at_before = state.idle_at_us();
            let decision = step(state);
            let changed = call.cost < 0 || (decision.allowed && call.cost > 0);
            let server_clock = call.at_us.is_none() && call.ttl_from_ms.is_none();
            let expiry_holds = server_clock && idle_at_before.is_some() && state.idle_at_us() == idle_at_before;
            Outcome { decision, changed, expiry_holds }
        }
        (Some(state), Mode::DryRun) => {
            Outcome { decision: step(&mut state.clone()), changed: false, expiry_holds: false }
        }
        (None, _) => {
            // A refund or a peek on a missing key finds it idle and leaves
            // it missing; an admitted call creates it.
            let mut state = T::default();
            let decision = step(&mut state);
            let changed = mode == Mode::Apply && call.cost > 0 && decision.allowed;
            if changed {
                key.set(T::redis_type(), state);
            }
            Outcome { decision, changed, expiry_holds: false }
        }
    };
    Ok(outcome)
}

/// Replicas and the AOF get the call with its time fixed, so they compute
/// exactly the master's state, and with the master's clock, so the key
/// expires at the same instant: `CMD key limit <period>ms COST n AT t
/// TTLFROM ms [BURST b] [EXACT]`. Keywords are strings made at load and
/// numbers are written on the stack: Redis would allocate twice for each
/// `l` argument and once for each C string.
pub(crate) fn propagate(ctx: Ctx, key: RString, algorithm: Algorithm, call: &Call, now_us: u64, now_ms: u64) {
    // SAFETY: reading a function pointer Redis set at load time.
    let (Some(replicate), Some(word)) = (unsafe { raw::RedisModule_Replicate }, propagation::keywords()) else {
        return;
    };
    let name = command_cstr(algorithm);
    let mut buffers = [[0u8; 24]; 6];
    let [limit, period, cost, at, ttl_from, burst] = &mut buffers;
    let text = |b: &[u8]| (b.as_ptr().cast::<c_char>(), b.len());
    let limit = text(decimal(call.params.limit(), b"", limit));
    let period = text(decimal(call.params.period_us() / 1000, b"ms", period));
    let cost = text(signed_decimal(call.cost, cost));
    let at = text(decimal(now_us, b"", at));
    let ttl_from = text(decimal(call.ttl_from_ms.unwrap_or(now_ms), b"", ttl_from));
    // SAFETY: each format letter matches its argument: s = RedisModuleString,
    // b = buffer and length; the buffers outlive the call.
    unsafe {
        match algorithm {
            Algorithm::Fixed | Algorithm::Sliding if !call.exact => replicate(
                ctx, name, cstr!("sbbsbsbsb"), key, limit.0, limit.1, period.0, period.1, word.cost, cost.0, cost.1,
                word.at, at.0, at.1, word.ttl_from, ttl_from.0, ttl_from.1,
            ),
            Algorithm::Fixed | Algorithm::Sliding => replicate(
                ctx, name, cstr!("sbbsbsbsbs"), key, limit.0, limit.1, period.0, period.1, word.cost, cost.0, cost.1,
                word.at, at.0, at.1, word.ttl_from, ttl_from.0, ttl_from.1, word.exact,
            ),
            Algorithm::Token | Algorithm::Leaky => {
                let burst = text(decimal(call.params.burst(), b"", burst));
                replicate(
                    ctx, name, cstr!("sbbsbsbsbsb"), key, limit.0, limit.1, period.0, period.1, word.cost, cost.0,
                    cost.1, word.at, at.0, at.1, word.ttl_from, ttl_from.0, ttl_from.1, word.burst, burst.0, burst.1,
                )
            }
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
