//! The THROTTLE command handlers: parse, open the key, run the algorithm,
//! propagate the effect, reply; or, for a limited `BLOCK` call, wait.

use redis_module::raw;

use super::apply::{self, Origin};
use super::blocked_clients::{self, Behind};
use super::ffi::{self, Ctx, RString};
use super::reply::{self, CommandError};
use super::stats::{self, Counter};
use crate::args::{parse_call, Algorithm, ArgError, Call, PackedCall};
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
            match blocked_clients::behind_waiters(ctx, *key_name, algorithm, &call) {
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
        if may_wait && blocked_clients::until_admitted(ctx, *key_name, algorithm, &call, decision.retry_after_ms) {
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
