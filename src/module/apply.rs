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
use crate::args::{Acquire, Algorithm, Call, Holder, PackedCall, PackedEffect, TtlFrom};
use crate::limiter::{Decision, Detail, Effect, Leases, Limiter, Penalized, Token};

/// Who runs the call: a command handler has the client's own command at
/// hand (and its context's flags), a served waiter does not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Handler { context_flags: u32 },
    Waiter,
}

/// What one call did to its key.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    pub decision: Decision,
    /// The key's state changed: it was settled and must be propagated.
    pub changed: bool,
    /// The reply's extra fields, when the call asked for them (`DETAIL`).
    pub detail: Option<Detail>,
    /// An admitted `THROTTLE.ACQUIRE`'s lease token (boxed: the rate
    /// commands' outcomes stay small).
    pub token: Option<Box<Token>>,
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
            Outcome { decision, changed, detail: detail(state), token: None }
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
            Outcome { decision, changed: false, detail: detail(state), token: None }
        }
        (Slot::Empty, _) => {
            // A refund or a peek on a missing key finds it idle and leaves
            // it missing; a call that changes the state creates it.
            let mut state = Penalized::<L>::default();
            let (decision, changed) = state.call(params, call.cost, &call.rules, now_us);
            let detail = detail(&state);
            let keep = changed && state != Penalized::<L>::default();
            let changed = mode == Mode::Apply && keep && key.set(Penalized::<L>::redis_type(), state);
            Outcome { decision, changed, detail, token: None }
        }
    };
    Ok(outcome)
}

// ---------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------

/// A call on a lease key.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LeaseCall {
    Acquire(Acquire),
    /// RELEASE (no lease) or RENEW (the new lease's length).
    Holder(Holder),
}

impl LeaseCall {
    fn at_us(&self) -> Option<u64> {
        match self {
            LeaseCall::Acquire(a) => a.at_us,
            LeaseCall::Holder(h) => h.at_us,
        }
    }
}

/// Runs one lease call on the key and, when it changed the leases, settles
/// the key (its expiry at the last lease's end, or its deletion with the
/// last lease) and propagates the change with the master's time and clock.
/// RELEASE and RENEW answer `allowed` 1 when the token was held.
pub(crate) fn execute_lease(
    ctx: Ctx,
    key_name: RString,
    call: &LeaseCall,
    now_us: u64,
    origin: Origin,
) -> Result<Outcome, CommandError> {
    let mut key = Key::open(ctx, key_name);
    let mut fresh = Leases::default();
    let (leases, existed) = match key.slot::<Leases>(Leases::redis_type()) {
        Slot::Other => return Err(CommandError::WrongType),
        Slot::Mine(leases) => (leases, true),
        Slot::Empty => (&mut fresh, false),
    };
    let (decision, token, effect) = match call {
        LeaseCall::Acquire(a) => {
            let token = a.token.unwrap_or_else(|| new_token(leases));
            let o = leases.acquire(&a.params, token, now_us);
            (o.decision, o.decision.allowed.then(|| Box::new(token)), o.effect)
        }
        LeaseCall::Holder(h) => {
            let effect = match h.lease_us {
                Some(lease_us) => leases.renew(h.token, lease_us, now_us),
                None => leases.release(h.token, now_us),
            };
            let limit = leases.limit();
            let mut decision = leases.decision(limit, leases.effective(now_us), effect.is_some());
            decision.allowed = effect.is_some();
            (decision, None, effect)
        }
    };
    let outcome = Outcome { decision, changed: effect.is_some(), detail: None, token };
    let Some(effect) = effect else { return Ok(outcome) };
    let idle = leases.is_empty();
    let reset_after_us = decision.reset_after_us;
    if !existed && !idle && !key.set(Leases::redis_type(), fresh) {
        return Err(CommandError::Refused("ERR could not store the leases".to_string()));
    }
    let clock_us = if call.at_us().is_none() { now_us } else { super::clock::now_us() };
    settle_leases(&mut key, existed, idle, idle_at_ms(clock_us, reset_after_us), lease_event(call));
    drop(key);
    let full = move || propagation::lease(ctx, key_name, &PackedEffect::new(&effect, clock_us));
    match origin {
        Origin::Handler { context_flags } => propagation::send(ctx, context_flags, full),
        Origin::Waiter => full(),
    }
    Ok(outcome)
}

/// The keyspace event of a lease call's change.
fn lease_event(call: &LeaseCall) -> *const std::ffi::c_char {
    match call {
        LeaseCall::Acquire(_) => super::ffi::cstr!("throttle.acquire"),
        LeaseCall::Holder(h) if h.lease_us.is_some() => super::ffi::cstr!("throttle.renew"),
        LeaseCall::Holder(_) => super::ffi::cstr!("throttle.release"),
    }
}

/// After a change to a key's leases: it expires when its last lease ends,
/// or is deleted with its last lease; then the server hears of it.
pub(crate) fn settle_leases(
    key: &mut Key,
    existed: bool,
    idle: bool,
    expire_at_ms: u64,
    event: *const std::ffi::c_char,
) {
    if idle {
        if existed {
            key.delete();
        }
    } else {
        key.set_expire_at_ms(expire_at_ms);
    }
    key.changed(event, idle && existed);
}

/// Applies a change the master made (`THROTTLE._LEASE`), as the master
/// did: the same leases, expiring at the same instant. A change that
/// would leave leases the commands could not have made is refused.
pub(crate) fn apply_lease_effect(
    ctx: Ctx,
    key_name: RString,
    effect: &Effect,
    clock_us: u64,
) -> Result<(), CommandError> {
    let mut key = Key::open(ctx, key_name);
    let (mut leases, existed) = match key.slot::<Leases>(Leases::redis_type()) {
        Slot::Other => return Err(CommandError::WrongType),
        Slot::Mine(leases) => (leases.clone(), true),
        Slot::Empty => (Leases::default(), false),
    };
    leases.apply(effect);
    if !leases.well_formed() {
        return Err(CommandError::Arg(crate::args::ArgError::LeaseEffect));
    }
    let at = leases.effective(effect.at_us);
    let last = leases.live(at).last().map_or(0, |l| l.until_us - at);
    let idle = leases.is_empty();
    if !idle {
        // A replica's key takes the new leases in place.
        let stored = match key.slot::<Leases>(Leases::redis_type()) {
            Slot::Mine(stored) => {
                *stored = leases;
                true
            }
            _ => key.set(Leases::redis_type(), leases),
        };
        if !stored {
            return Err(CommandError::Refused("ERR could not store the leases".to_string()));
        }
    }
    let event = if effect.until_us.is_some() {
        super::ffi::cstr!("throttle.acquire")
    } else {
        super::ffi::cstr!("throttle.release")
    };
    settle_leases(&mut key, existed, idle, idle_at_ms(clock_us, last), event);
    Ok(())
}

/// Whether `token` holds a lease on the key at `now_us` (a holder's
/// `BLOCK` call renews at once, ahead of the waiters).
pub(crate) fn holds_lease(ctx: Ctx, key_name: RString, token: &Token, now_us: u64) -> bool {
    let mut key = Key::open_read(ctx, key_name);
    match key.slot::<Leases>(Leases::redis_type()) {
        Slot::Mine(leases) => leases.held_until(token.as_bytes(), now_us).is_some(),
        _ => false,
    }
}

/// What a waiting acquisition is told when it must be answered without a
/// write (its time is up while the server refuses writes, or it was
/// unblocked from outside): a refused reply, changing nothing; one that
/// would fit right now says so with `retry_after` 0.
pub(crate) fn acquire_limited_now(
    ctx: Ctx,
    key_name: RString,
    acquire: &Acquire,
    now_us: u64,
) -> Result<Outcome, CommandError> {
    let mut key = Key::open_read(ctx, key_name);
    let token = acquire.token.as_ref().map(Token::as_bytes);
    let empty = Leases::default();
    let leases = match key.slot::<Leases>(Leases::redis_type()) {
        Slot::Other => return Err(CommandError::WrongType),
        Slot::Mine(leases) => &*leases,
        Slot::Empty => &empty,
    };
    let mut decision = leases.check(&acquire.params, token, now_us);
    if decision.allowed {
        decision = leases.decision(acquire.params.limit(), leases.effective(now_us), false);
        decision.retry_after_ms = 0;
    }
    Ok(Outcome { decision, changed: false, detail: None, token: None })
}

/// A token the master makes: 32 hex digits (128 bits) from the process's
/// random hash keys and a counter, new to the key.
fn new_token(leases: &Leases) -> Token {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static KEYS: OnceLock<[std::collections::hash_map::RandomState; 2]> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let keys = KEYS.get_or_init(|| {
        [std::collections::hash_map::RandomState::new(), std::collections::hash_map::RandomState::new()]
    });
    let mut text = [0u8; 32];
    // A repeat among 2^128 values is not expected; the bound keeps the
    // loop finite whatever happens.
    for _ in 0..8 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        for (half, key) in text.chunks_exact_mut(16).zip(keys) {
            let mut h = key.build_hasher();
            h.write_u64(n);
            for (i, out) in half.iter_mut().enumerate() {
                let nibble = (h.finish() >> (60 - 4 * i)) & 0xf;
                *out = b"0123456789abcdef".get(nibble as usize).copied().unwrap_or(b'0');
            }
        }
        if !leases.contains(&text) {
            break;
        }
    }
    Token::hex(text)
}
