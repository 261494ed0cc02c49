//! `THROTTLE.ALL [COST n] [AT µs] spec [spec ...]`: several limits checked
//! atomically, all or nothing.

use std::ffi::c_int;

use redis_module::raw;

use super::apply::{check_type, expire_at_ms, run_on_key, settle, ttl_from, Mode, Outcome};
use super::commands::refuse_internal_options;
use super::ffi::{self, cstr, Ctx, Key, RString};
use super::propagation;
use super::reply::CommandError;
use super::stats::{self, Counter};
use crate::args::{parse_all, Spec, TtlFrom};

pub(crate) fn throttle_all(ctx: Ctx, argv: &[RString]) {
    // SAFETY: plain call on the command's context.
    if unsafe { raw::RedisModule_IsKeysPositionRequest.is_some_and(|f| f(ctx) != 0) } {
        return report_keys(ctx, argv);
    }
    stats::ALL.add(Counter::Calls);
    let flags = ffi::context_flags(ctx);
    match run(ctx, flags, argv) {
        Ok((allowed, outcomes)) => {
            stats::ALL.add(if allowed { Counter::Admitted } else { Counter::Limited });
            ffi::reply_array(ctx, outcomes.len() + 1);
            if super::reply::resp3(flags) {
                ffi::reply_bool(ctx, allowed);
            } else {
                ffi::reply_integer(ctx, i64::from(allowed));
            }
            for outcome in &outcomes {
                super::reply::decision(ctx, flags, &outcome.decision, outcome.detail.as_ref());
            }
        }
        Err(e) => e.reply(ctx),
    }
}

fn parse(argv: &[RString]) -> Result<Vec<Spec>, CommandError> {
    let args: Vec<&[u8]> = argv.iter().map(|s| ffi::bytes(*s)).collect();
    Ok(parse_all(&args)?)
}

/// Checks every limit without changing anything: every key's type, and
/// unless the call is a refund (always admitted) whether it admits. Only
/// when every key can take the call and every limit admits, runs them for
/// real. A call that gets an error has changed nothing. Propagates one
/// `THROTTLE.ALL COST n AT t TTLFROMUS µs spec...`.
fn run(ctx: Ctx, context_flags: u32, argv: &[RString]) -> Result<(bool, Vec<Outcome>), CommandError> {
    let specs = parse(argv)?;
    let Some(first) = specs.first() else { return Ok((true, Vec::new())) };
    refuse_internal_options(context_flags, &first.call)?;
    let (cost, now_us) = (first.call.cost, first.call.at_us.unwrap_or_else(super::clock::now_us));
    let mut keys = Vec::with_capacity(specs.len());
    for spec in &specs {
        let name = argv.get(spec.key_index).copied().ok_or(CommandError::from(crate::args::ArgError::WrongArity))?;
        keys.push(Key::open(ctx, name));
    }
    if cost < 0 {
        for (spec, key) in specs.iter().zip(keys.iter_mut()) {
            check_type(key, spec.algorithm, spec.call.exact)?;
        }
    } else {
        let mut trial = Vec::with_capacity(specs.len());
        for (spec, key) in specs.iter().zip(keys.iter_mut()) {
            trial.push(run_on_key(key, spec.algorithm, &spec.call, now_us, Mode::DryRun)?);
        }
        if cost == 0 {
            return Ok((trial.iter().all(|o| o.decision.allowed), trial));
        }
        if !trial.iter().all(|o| o.decision.allowed) {
            return refused(ctx, context_flags, argv, &specs, &mut keys, trial, now_us);
        }
    }
    let ttl_from = ttl_from(&first.call, now_us);
    let mut outcomes = Vec::with_capacity(specs.len());
    // Every key was checked above, so no step fails; were one to, what the
    // steps before it changed still reaches replicas and the AOF below.
    let mut failed = None;
    for (spec, key) in specs.iter().zip(keys.iter_mut()) {
        match run_on_key(key, spec.algorithm, &spec.call, now_us, Mode::Apply) {
            Ok(outcome) => {
                if outcome.changed {
                    settle(key, spec.algorithm, spec.call.exact, &outcome, expire_at_ms(ttl_from, &outcome.decision));
                }
                outcomes.push(outcome);
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    drop(keys);
    if cost < 0 {
        for (spec, outcome) in specs.iter().zip(&outcomes) {
            if let (true, Some(&name)) = (outcome.changed, argv.get(spec.key_index)) {
                super::blocked_clients::units_returned(ctx, name);
            }
        }
    }
    if outcomes.iter().any(|o| o.changed) {
        propagation::send(ctx, context_flags, || propagate(ctx, argv, &specs, cost, now_us, ttl_from));
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((true, outcomes)),
    }
}

/// A refused call consumes nothing. A limit that would admit shows its
/// state as it stands (a peek), with its own verdict; a limit that refused
/// applies its penalties (a ban, refused units that count), and what they
/// change is settled and propagated as any change is.
fn refused(
    ctx: Ctx,
    context_flags: u32,
    argv: &[RString],
    specs: &[Spec],
    keys: &mut [Key],
    mut trial: Vec<Outcome>,
    now_us: u64,
) -> Result<(bool, Vec<Outcome>), CommandError> {
    let Some(first) = specs.first() else { return Ok((false, trial)) };
    let ttl_from = ttl_from(&first.call, now_us);
    let mut changed = false;
    for ((spec, key), outcome) in specs.iter().zip(keys.iter_mut()).zip(trial.iter_mut()) {
        if outcome.decision.allowed {
            let peek = crate::args::Call { cost: 0, ..spec.call };
            *outcome = run_on_key(key, spec.algorithm, &peek, now_us, Mode::DryRun)?;
        } else if !spec.call.rules.is_none() {
            *outcome = run_on_key(key, spec.algorithm, &spec.call, now_us, Mode::Apply)?;
            if outcome.changed {
                settle(key, spec.algorithm, spec.call.exact, outcome, expire_at_ms(ttl_from, &outcome.decision));
                changed = true;
            }
        }
    }
    if changed {
        let cost = first.call.cost;
        propagation::send(ctx, context_flags, || propagate(ctx, argv, specs, cost, now_us, ttl_from));
    }
    Ok((false, trial))
}

fn propagate(ctx: Ctx, argv: &[RString], specs: &[Spec], cost: i64, now_us: u64, ttl_from: TtlFrom) {
    // The specs start one before the first key.
    let Some(start) = specs.first().map(|s| s.key_index - 1) else { return };
    let Some(rest) = argv.get(start..) else { return };
    // A replayed call from an earlier master keeps its clock in ms.
    let (clock_option, clock) = match ttl_from {
        TtlFrom::Us(us) => (cstr!("TTLFROMUS"), us),
        TtlFrom::Ms(ms) => (cstr!("TTLFROM"), ms),
    };
    // SAFETY: format letters match: c = C string, l = long long,
    // v = array of RedisModuleString and its length.
    unsafe {
        if let Some(replicate) = raw::RedisModule_Replicate {
            replicate(
                ctx,
                cstr!("THROTTLE.ALL"),
                cstr!("clclclv"),
                cstr!("COST"),
                cost,
                cstr!("AT"),
                now_us as i64,
                clock_option,
                clock as i64,
                rest.as_ptr(),
                rest.len(),
            );
        }
    }
}

/// `COMMAND GETKEYS` and cluster routing ask where the keys are.
fn report_keys(ctx: Ctx, argv: &[RString]) {
    let Ok(specs) = parse(argv) else { return };
    for spec in specs {
        // SAFETY: plain call on a keys-position request context.
        unsafe {
            if let Some(key_at) = raw::RedisModule_KeyAtPos {
                key_at(ctx, spec.key_index as c_int);
            }
        }
    }
}
