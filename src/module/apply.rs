//! One call on one key, for a command handler and a served waiter alike:
//! run the algorithm and, only when the state changed, settle the key (its
//! TTL, or its deletion once idle), tell the server (`WATCH`, client-side
//! caching, keyspace notifications) and propagate the effect.
//!
//! Whether the server accepts a write at all is decided before: by Redis
//! for a command, by [`super::gate`] for a waiter served later.

use super::ffi::{Ctx, Key, RString, Slot};
use super::propagation;
use super::reply::CommandError;
use super::types::{event_name, Snapshot, Stored};
use crate::args::{Algorithm, Call, PackedCall};
use crate::limiter::{Decision, FixedWindow, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket};

/// Who runs the call: a command handler has the client's own command at
/// hand (and its context's flags), a served waiter does not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Handler { context_flags: u32 },
    Waiter,
}

/// What one call did to its key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome {
    pub decision: Decision,
    /// The key's state changed: it was settled and must be propagated.
    pub changed: bool,
}

/// Apply changes the key; DryRun answers what Apply would, changing nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Apply,
    DryRun,
}

/// Runs one call on the key and, when the state changed, settles the key
/// and propagates the change: the new state whole with the instant it
/// expires (a SLIDING EXACT log, which can be long, as the call with its
/// time and the master's clock), or the key's deletion.
pub(crate) fn execute(
    ctx: Ctx,
    key_name: RString,
    algorithm: Algorithm,
    call: &Call,
    now_us: u64,
    origin: Origin,
) -> Result<Outcome, CommandError> {
    let mut key = Key::open(ctx, key_name);
    let outcome = run_on_key(&mut key, algorithm, call, now_us, Mode::Apply)?;
    if outcome.changed {
        let now_ms = server_now_ms(call, now_us);
        settle(&mut key, algorithm, &outcome, call, now_ms);
        let reset_after_ms = outcome.decision.reset_after_ms;
        // Made only when someone receives it: the key stays open until then.
        let full = move || {
            // The master's clock: this server's, or the one a replayed call carries.
            let master_ms = call.ttl_from_ms.unwrap_or(now_ms);
            let expire_at_ms = master_ms.saturating_add(reset_after_ms);
            let snapshot =
                if reset_after_ms > 0 { snapshot(&mut key, algorithm, call.exact, expire_at_ms) } else { None };
            drop(key);
            match snapshot {
                _ if reset_after_ms == 0 => propagation::delete(ctx, key_name),
                Some(snapshot) => propagation::set_state(ctx, key_name, &snapshot),
                None => propagation::call(ctx, key_name, &PackedCall::new(algorithm, call, now_us, master_ms)),
            }
        };
        match origin {
            Origin::Handler { context_flags } => propagation::send(ctx, context_flags, full),
            Origin::Waiter => full(),
        }
    }
    Ok(outcome)
}

/// The key's state as `THROTTLE._SET` carries it: every type but SLIDING
/// EXACT, whose log is replicated as the call that changed it.
fn snapshot(key: &mut Key, algorithm: Algorithm, exact: bool, expire_at_ms: u64) -> Option<Snapshot> {
    fn of<T: Stored>(key: &mut Key, expire_at_ms: u64) -> Option<Snapshot> {
        match key.slot::<T>(T::redis_type()) {
            Slot::Mine(state) => Snapshot::of(state, expire_at_ms),
            _ => None,
        }
    }
    match (algorithm, exact) {
        (Algorithm::Fixed, _) => of::<FixedWindow>(key, expire_at_ms),
        (Algorithm::Sliding, false) => of::<SlidingWindow>(key, expire_at_ms),
        (Algorithm::Sliding, true) => None,
        (Algorithm::Token, _) => of::<TokenBucket>(key, expire_at_ms),
        (Algorithm::Leaky, _) => of::<LeakyBucket>(key, expire_at_ms),
    }
}

/// What the call would answer now, changing nothing (the key is only read).
pub(crate) fn dry_run(
    ctx: Ctx,
    key_name: RString,
    algorithm: Algorithm,
    call: &Call,
    now_us: u64,
) -> Result<Decision, CommandError> {
    let mut key = Key::open_read(ctx, key_name);
    run_on_key(&mut key, algorithm, call, now_us, Mode::DryRun).map(|o| o.decision)
}

/// The server's clock in ms for a call at `now_us`: that time itself when
/// the call runs on the server's clock (no second reading), else the clock.
pub(crate) fn server_now_ms(call: &Call, now_us: u64) -> u64 {
    match call.at_us {
        None => now_us / 1000,
        Some(_) => super::clock::now_us() / 1000,
    }
}

/// After a change: the key expires when it is idle again, `reset_after`
/// after the call (after the master's call, for a propagated one), and an
/// idle key is deleted. Every change leaves the TTL at `reset_after`, so one
/// taken away (PERSIST, a RESTORE without TTL) comes back with the next
/// change. Then the server hears of the change: `throttle.<algorithm>`, and
/// `del` for a deletion.
pub(crate) fn settle(key: &mut Key, algorithm: Algorithm, outcome: &Outcome, call: &Call, now_ms: u64) {
    let reset_after_ms = outcome.decision.reset_after_ms;
    let deleted = reset_after_ms == 0;
    if deleted {
        key.delete();
    } else {
        let ttl_ms = match call.ttl_from_ms {
            Some(from_ms) => (from_ms + reset_after_ms).saturating_sub(now_ms),
            None => reset_after_ms,
        };
        // A window's end stays put while its calls are admitted, and so
        // does the TTL that points at it: reading the TTL (the key's lookup
        // has just read it too) is cheaper than setting it again. A TTL up
        // to a millisecond short is the same instant, rounded on another
        // call's clock; never one longer than `reset_after`.
        let window = matches!(algorithm, Algorithm::Fixed) || (algorithm == Algorithm::Sliding && !call.exact);
        let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
        if !(window && (ttl - 1..=ttl).contains(&key.ttl_ms())) {
            match call.ttl_from_ms {
                // The master's instant, replayed.
                Some(from_ms) => key.set_expire_at_ms(from_ms.saturating_add(reset_after_ms)),
                None => key.set_expire_ms(ttl_ms),
            }
        }
    }
    key.changed(event_name(algorithm), deleted);
}

pub(crate) fn run_on_key(
    key: &mut Key,
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

fn run<T: Stored>(key: &mut Key, call: &Call, now_us: u64, mode: Mode) -> Result<Outcome, CommandError> {
    let units = call.cost.unsigned_abs();
    let step = |state: &mut T| {
        if call.cost < 0 {
            state.refund(&call.params, units, now_us)
        } else {
            state.acquire(&call.params, units, now_us)
        }
    };
    let outcome = match (key.slot::<T>(T::redis_type()), mode) {
        (Slot::Other, _) => return Err(CommandError::WrongType),
        (Slot::Mine(state), Mode::Apply) => {
            let decision = step(state);
            let changed = call.cost < 0 || (decision.allowed && call.cost > 0);
            Outcome { decision, changed }
        }
        (Slot::Mine(state), Mode::DryRun) => {
            let decision =
                if call.cost < 0 { step(&mut state.clone()) } else { state.check(&call.params, units, now_us) };
            Outcome { decision, changed: false }
        }
        (Slot::Empty, _) => {
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
