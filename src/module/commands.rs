//! The THROTTLE command handlers: parse, open the key, run the algorithm,
//! propagate the effect, reply; or, for a limited `BLOCK` call, wait.

use redis_module::raw;

use super::apply::LeaseCall;
use super::apply::{self, Origin};
use super::blocked_clients::{self, Behind, Pending};
use super::ffi::{self, Ctx, RString};
use super::reply::{self, CommandError};
use super::stats::{self, Counter};
use crate::args::{parse_acquire, parse_call, parse_holder, Algorithm, ArgError, Call, PackedCall};
use crate::limiter::NEVER;

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
        // A call at a fixed time (AT) cannot wait for the clock, and one
        // that takes its units whatever (FORCE) or bans now (NOW) has
        // nothing to wait for: BLOCK then answers at once.
        let mut blocking = call.block_ms.is_some() && call.at_us.is_none() && !call.rules.force && !call.rules.ban_now;
        if blocking {
            match blocked_clients::behind_waiters(ctx, *key_name, &Pending::Limit { algorithm, call }) {
                Behind::Queued => return Ok(None),
                Behind::Full => blocking = false,
                Behind::Run => {}
            }
        }
        let now_us = call.at_us.unwrap_or_else(super::clock::now_us);
        let outcome = apply::execute(ctx, *key_name, algorithm, &call, now_us, Origin::Handler { context_flags })?;
        if call.cost < 0 && outcome.changed {
            blocked_clients::units_returned(ctx, *key_name);
        }
        let decision = outcome.decision;
        let may_wait = blocking && !decision.allowed && decision.retry_after_ms != NEVER;
        let pending = Pending::Limit { algorithm, call };
        if may_wait && blocked_clients::until_admitted(ctx, *key_name, &pending, decision.retry_after_ms) {
            return Ok(None);
        }
        Ok(Some(outcome))
    })();
    match result {
        Ok(Some(outcome)) => {
            counters.add(if outcome.decision.allowed { Counter::Admitted } else { Counter::Limited });
            reply::decision(ctx, context_flags, &outcome.decision, outcome.detail.as_ref());
        }
        Ok(None) => counters.add(Counter::Blocked),
        Err(e) => e.reply(ctx),
    }
}

/// `THROTTLE._CALL key <call>`: runs a call sent packed (a [`PackedCall`]) by
/// a master or read from the AOF, at the time and with the master's clock
/// it carries, as the command it packs would run. Internal and admin-only,
/// like `THROTTLE._SET`.
pub(crate) fn packed_call(ctx: Ctx, argv: &[RString]) {
    let result = (|| {
        let [_, key_name, packed] = argv else {
            return Err(CommandError::from(ArgError::WrongArity));
        };
        let (algorithm, call) = PackedCall::unpack(ffi::bytes(*packed))?;
        let context_flags = ffi::context_flags(ctx);
        let now_us = call.at_us.unwrap_or_else(super::clock::now_us);
        let outcome = apply::execute(ctx, *key_name, algorithm, &call, now_us, Origin::Handler { context_flags })?;
        if call.cost < 0 && outcome.changed {
            blocked_clients::units_returned(ctx, *key_name);
        }
        Ok((context_flags, outcome.decision))
    })();
    match result {
        Ok((context_flags, decision)) => reply::decision(ctx, context_flags, &decision, None),
        Err(e) => e.reply(ctx),
    }
}

/// `TTLFROMUS` and `TTLFROM` come only with the propagated form: from the
/// master's replication stream or an AOF being loaded.
pub(crate) fn refuse_internal_options(context_flags: u32, call: &Call) -> Result<(), CommandError> {
    if call.ttl_from.is_none() {
        return Ok(());
    }
    if context_flags & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0 {
        Ok(())
    } else {
        Err(ArgError::InternalOption.into())
    }
}

/// `THROTTLE.ACQUIRE key limit lease [ID token] [BLOCK ms] [AT µs]`: a
/// slot of a counting semaphore for `lease`, or, with `BLOCK`, a wait in
/// arrival order until a slot frees (a release, a lease's end, the key
/// changed by another command).
pub(crate) fn acquire(ctx: Ctx, argv: &[RString]) {
    let counters = &stats::ACQUIRE;
    counters.add(Counter::Calls);
    let context_flags = ffi::context_flags(ctx);
    let result = (|| {
        let [_, key_name, rest @ ..] = argv else {
            return Err(CommandError::from(ArgError::WrongArity));
        };
        let acquire = parse_acquire(rest.iter().map(|s| ffi::bytes(*s)))?;
        let pending = Pending::Acquire(acquire);
        // A call at a fixed time (AT) cannot wait for the clock.
        let mut blocking = acquire.block_ms.is_some() && acquire.at_us.is_none();
        if blocking {
            match blocked_clients::behind_waiters(ctx, *key_name, &pending) {
                Behind::Queued => return Ok(None),
                Behind::Full => blocking = false,
                Behind::Run => {}
            }
        }
        let now_us = acquire.at_us.unwrap_or_else(super::clock::now_us);
        let call = LeaseCall::Acquire(acquire);
        let outcome = apply::execute_lease(ctx, *key_name, &call, now_us, Origin::Handler { context_flags })?;
        let decision = outcome.decision;
        if blocking
            && !decision.allowed
            && blocked_clients::until_admitted(ctx, *key_name, &pending, decision.retry_after_ms)
        {
            return Ok(None);
        }
        Ok(Some(outcome))
    })();
    match result {
        Ok(Some(outcome)) => {
            counters.add(if outcome.decision.allowed { Counter::Admitted } else { Counter::Limited });
            reply::lease(ctx, context_flags, &outcome.decision, outcome.token.as_deref());
        }
        Ok(None) => counters.add(Counter::Blocked),
        Err(e) => e.reply(ctx),
    }
}

/// `THROTTLE.RELEASE key token [AT µs]` and `THROTTLE.RENEW key token lease
/// [AT µs]`: 1 when the token held a lease (now ended, or renewed), 0 and
/// no change when it did not. A release wakes the key's waiters.
pub(crate) fn holder(ctx: Ctx, argv: &[RString], renew: bool) {
    let counters = if renew { &stats::RENEW } else { &stats::RELEASE };
    counters.add(Counter::Calls);
    let context_flags = ffi::context_flags(ctx);
    let result = (|| {
        let [_, key_name, rest @ ..] = argv else {
            return Err(CommandError::from(ArgError::WrongArity));
        };
        let holder = parse_holder(renew, rest.iter().map(|s| ffi::bytes(*s)))?;
        let now_us = holder.at_us.unwrap_or_else(super::clock::now_us);
        let call = LeaseCall::Holder(holder);
        let outcome = apply::execute_lease(ctx, *key_name, &call, now_us, Origin::Handler { context_flags })?;
        if outcome.changed && !renew {
            blocked_clients::units_returned(ctx, *key_name);
        }
        Ok(outcome.changed)
    })();
    match result {
        Ok(held) => {
            counters.add(if held { Counter::Admitted } else { Counter::Limited });
            ffi::reply_integer(ctx, i64::from(held));
        }
        Err(e) => e.reply(ctx),
    }
}
