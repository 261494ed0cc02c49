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
use super::types::{event_name, ExactState, FixedState, LeakyState, SlidingState, Snapshot, Stored, TokenState};
use crate::args::{Algorithm, Call, PackedCall, TtlFrom};
use crate::limiter::{Decision, Detail, Limiter, Penalized};

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
    /// The reply's extra fields, when the call asked for them (`DETAIL`).
    pub detail: Option<Detail>,
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
        let ttl_from = ttl_from(call, now_us);
        let expire_at_ms = expire_at_ms(ttl_from, &outcome.decision);
        settle(&mut key, algorithm, call.exact, &outcome, expire_at_ms);
        let idle = outcome.decision.reset_after_ms == 0;
        // Made only when someone receives it: the key stays open until then.
        let full = move || {
            let snapshot = if idle { None } else { snapshot(&mut key, algorithm, call.exact, expire_at_ms) };
            drop(key);
            match snapshot {
                _ if idle => propagation::delete(ctx, key_name),
                Some(snapshot) => propagation::set_state(ctx, key_name, &snapshot),
                None => propagation::call(ctx, key_name, &PackedCall::new(algorithm, call, now_us, ttl_from)),
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
        (Algorithm::Fixed, _) => of::<FixedState>(key, expire_at_ms),
        (Algorithm::Sliding, false) => of::<SlidingState>(key, expire_at_ms),
        (Algorithm::Sliding, true) => None,
        (Algorithm::Token, _) => of::<TokenState>(key, expire_at_ms),
        (Algorithm::Leaky, _) => of::<LeakyState>(key, expire_at_ms),
    }
}

/// What the call would answer now, changing nothing (the key is only read).
pub(crate) fn dry_run(
    ctx: Ctx,
    key_name: RString,
    algorithm: Algorithm,
    call: &Call,
    now_us: u64,
) -> Result<Outcome, CommandError> {
    let mut key = Key::open_read(ctx, key_name);
    run_on_key(&mut key, algorithm, call, now_us, Mode::DryRun)
}

/// The clock a change's expiry counts from: the master's, which a replayed
/// call carries; else the call's own time when it runs on the server's
/// clock (no second reading), or the clock read now for a call with `AT`
/// (which has a timeline of its own).
pub(crate) fn ttl_from(call: &Call, now_us: u64) -> TtlFrom {
    call.ttl_from.unwrap_or_else(|| TtlFrom::Us(if call.at_us.is_none() { now_us } else { super::clock::now_us() }))
}

/// The instant (Unix ms) a key changed with `decision` expires at: when it
/// is idle again, `reset_after` after the clock it counts from. The master
/// sets this instant itself and sends it (or the clock it counts from), so
/// a replica or an AOF replay sets the very same one. It is the idle
/// instant rounded down to the ms, which Redis still keeps the key through
/// (it expires a key once its clock is past the instant): so the key never
/// goes before it is idle, its PTTL is never above `reset_after`, and every
/// call of one window names the same instant, the window's end.
pub(crate) fn expire_at_ms(from: TtlFrom, decision: &Decision) -> u64 {
    match from {
        TtlFrom::Us(us) => idle_at_ms(us, decision.reset_after_us),
        TtlFrom::Ms(ms) => ms.saturating_add(decision.reset_after_ms),
    }
}

/// The instant a key idle `reset_after_us` after `clock_us` expires at (see
/// [`expire_at_ms`]).
pub(crate) fn idle_at_ms(clock_us: u64, reset_after_us: u64) -> u64 {
    clock_us.saturating_add(reset_after_us) / 1000
}

/// After a change: the key expires at `expire_at_ms`, when it is idle
/// again, and an idle key is deleted. Every change sets the expiry again,
/// so one taken away (PERSIST, a RESTORE without TTL) comes back with the
/// next change. Then the server hears of the change: `throttle.<algorithm>`,
/// and `del` for a deletion.
pub(crate) fn settle(key: &mut Key, algorithm: Algorithm, exact: bool, outcome: &Outcome, expire_at_ms: u64) {
    let deleted = outcome.decision.reset_after_ms == 0;
    if deleted {
        key.delete();
    } else {
        // A window's end stays put while its calls are admitted, and so
        // does the instant its key expires at: reading the expiry (the
        // key's lookup has just read it too) is cheaper than setting it.
        let window = algorithm == Algorithm::Fixed || (algorithm == Algorithm::Sliding && !exact);
        if !(window && key.expire_at_ms() == Some(expire_at_ms)) {
            key.set_expire_at_ms(expire_at_ms);
        }
    }
    key.changed(event_name(algorithm), deleted);
}

/// Refuses a key that holds a value `algorithm`'s call cannot run on (a
/// missing key takes any call).
pub(crate) fn check_type(key: &mut Key, algorithm: Algorithm, exact: bool) -> Result<(), CommandError> {
    fn of<T: Stored>(key: &mut Key) -> Result<(), CommandError> {
        match key.slot::<T>(T::redis_type()) {
            Slot::Other => Err(CommandError::WrongType),
            Slot::Empty | Slot::Mine(_) => Ok(()),
        }
    }
    match (algorithm, exact) {
        (Algorithm::Fixed, _) => of::<FixedState>(key),
        (Algorithm::Sliding, false) => of::<SlidingState>(key),
        (Algorithm::Sliding, true) => of::<ExactState>(key),
        (Algorithm::Token, _) => of::<TokenState>(key),
        (Algorithm::Leaky, _) => of::<LeakyState>(key),
    }
}

pub(crate) fn run_on_key(
    key: &mut Key,
    algorithm: Algorithm,
    call: &Call,
    now_us: u64,
    mode: Mode,
) -> Result<Outcome, CommandError> {
    match (algorithm, call.exact) {
        (Algorithm::Fixed, _) => run::<crate::limiter::FixedWindow>(key, call, now_us, mode),
        (Algorithm::Sliding, false) => run::<crate::limiter::SlidingWindow>(key, call, now_us, mode),
        (Algorithm::Sliding, true) => run::<crate::limiter::SlidingLog>(key, call, now_us, mode),
        (Algorithm::Token, _) => run::<crate::limiter::TokenBucket>(key, call, now_us, mode),
        (Algorithm::Leaky, _) => run::<crate::limiter::LeakyBucket>(key, call, now_us, mode),
    }
}

fn run<L>(key: &mut Key, call: &Call, now_us: u64, mode: Mode) -> Result<Outcome, CommandError>
where
    L: Limiter + PartialEq,
    Penalized<L>: Stored,
{
    let params = &call.params;
    let detail = |state: &Penalized<L>| call.detail.then(|| state.detail(params, now_us));
    let outcome = match (key.slot::<Penalized<L>>(Penalized::<L>::redis_type()), mode) {
        (Slot::Other, _) => return Err(CommandError::WrongType),
        (Slot::Mine(state), Mode::Apply) => {
            let (decision, changed) = state.call(params, call.cost, &call.rules, now_us);
            Outcome { decision, changed, detail: detail(state) }
        }
        (Slot::Mine(state), Mode::DryRun) => {
            let decision = if call.cost < 0 || !call.rules.is_none() {
                // A refund, and a call whose penalties change the state
                // even when refused, are answered by running on a copy.
                let mut copy = state.clone();
                copy.call(params, call.cost, &call.rules, now_us).0
            } else {
                state.check(params, call.cost.unsigned_abs(), now_us)
            };
            Outcome { decision, changed: false, detail: detail(state) }
        }
        (Slot::Empty, _) => {
            // A refund or a peek on a missing key finds it idle and leaves
            // it missing; a call that changes the state creates it.
            let mut state = Penalized::<L>::default();
            let (decision, changed) = state.call(params, call.cost, &call.rules, now_us);
            let detail = detail(&state);
            let keep = changed && state != Penalized::<L>::default();
            let changed = mode == Mode::Apply && keep && key.set(Penalized::<L>::redis_type(), state);
            Outcome { decision, changed, detail }
        }
    };
    Ok(outcome)
}
