//! `BLOCK ms`: a limited call waits on the server until it is admitted or
//! its time is up, in arrival order per key, without polling.
//!
//! Who owns what:
//! - [`crate::wait_queue::Waiters`] owns the queues: arrival order, deadlines
//!   (on a monotonic clock), the caps, and each queue's one pending timer.
//! - Redis owns the blocked clients. Each waiter is blocked on its key
//!   (`RedisModule_BlockClientOnKeys`), so Redis treats it as it treats its
//!   own blocked clients: it redirects it when the key's slot moves away or
//!   the cluster goes down (`-MOVED`, `-CLUSTERDOWN`), unblocks it when the
//!   server turns replica (`-UNBLOCKED`), and reports each of these, and a
//!   disconnection, through the disconnect callback.
//!
//! What wakes a queue:
//! - time: its timer, due when its first waiter's call can succeed or at
//!   the earliest deadline;
//! - its key: created (Redis signals the blocked clients), removed or
//!   replaced by any command (DEL, UNLINK, RENAME, MOVE, RESTORE, SET, ...),
//!   expiry or eviction (the type's unlink callback), flushed, swapped or
//!   reloaded with its database (server events), or given units back by a
//!   refund;
//! - its first waiter leaving.
//!
//! A wake-up only sets the queue's timer for now: waiters are served from
//! a timer, never inside the command or event that woke them. Serving asks
//! [`super::gate`] once whether the server accepts a write now, then runs
//! the waiters in order through [`super::apply::execute`], the path a
//! command takes. Every answer reaches its client the same way: the module
//! unblocks it and Redis calls the timeout callback, which replies.
//!
//! Everything runs on Redis's main thread. The registry lock is never held
//! while calling into Redis (a key change can call back into us).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

use redis_module::raw;

use super::apply::{self, LeaseCall, Origin, Outcome};
use super::clock;
use super::config;
use super::ffi::{self, Ctx, RString};
use super::gate::{self, Gate};
use super::reply::{self, CommandError};
use super::stats::{self, Counter, Counters};
use crate::args::{Acquire, Algorithm, Call};
use crate::limiter::{Decision, Rules, NEVER};
use crate::wait_queue::{ClientId, Db, QueueId, Timer, Waiters};

type BlockedClient = *mut raw::RedisModuleBlockedClient;

/// What serving a waiter needs: a rate-limit call, or an acquisition of
/// a lease. Both wait, and are served, the same way.
#[derive(Clone, Copy)]
pub(crate) enum Pending {
    Limit { algorithm: Algorithm, call: Call },
    Acquire(Acquire),
}

impl Pending {
    fn counters(&self) -> &'static Counters {
        match self {
            Pending::Limit { algorithm, .. } => stats::for_command(*algorithm),
            Pending::Acquire(_) => &stats::ACQUIRE,
        }
    }

    fn block_ms(&self) -> Option<u64> {
        match self {
            Pending::Limit { call, .. } => call.block_ms,
            Pending::Acquire(a) => a.block_ms,
        }
    }

    /// False for a call that could never be admitted by waiting: a refund
    /// or a peek, or a rate-limit call asking for more than the key holds.
    fn can_wait(&self) -> bool {
        match self {
            Pending::Limit { call, .. } => call.cost > 0 && call.cost.unsigned_abs() <= call.params.burst(),
            Pending::Acquire(_) => true,
        }
    }
}

/// A waiter's private data, shared with Redis from the moment it blocks
/// until Redis frees it: its handle, and its answer once there is one. Its
/// address identifies the waiter in the registry.
struct Slot {
    client: BlockedClient,
    answer: Option<Answer>,
}

/// A waiter's reply: the decision (and the extra fields it asked for), or
/// the error a command would get.
type Answer = Result<Outcome, CommandError>;

static WAITERS: Mutex<Option<Waiters<Pending>>> = Mutex::new(None);
/// A context of the module's own, for timers set where Redis gives none
/// (a type callback).
static OWN_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());
/// How many wait, readable without the lock: an event on a key when nobody
/// waits costs one load.
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// How soon to look again while the server refuses writes for now (a
/// pause, a slot in migration).
const CLOSED_GATE_RETRY_MS: i64 = 10;

fn with<R>(f: impl FnOnce(&mut Waiters<Pending>) -> R) -> R {
    let mut guard = WAITERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let waiters = guard.get_or_insert_with(Waiters::default);
    let result = f(waiters);
    COUNT.store(waiters.len(), Ordering::Relaxed);
    result
}

/// Clients waiting right now, for INFO.
pub(crate) fn waiting() -> usize {
    COUNT.load(Ordering::Relaxed)
}

fn selected_db(ctx: Ctx) -> Db {
    // SAFETY: plain call on a live context.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx)) }
}

fn can_block(ctx: Ctx) -> bool {
    let refuse = raw::REDISMODULE_CTX_FLAGS_MULTI
        | raw::REDISMODULE_CTX_FLAGS_LUA
        | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
        | raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | raw::REDISMODULE_CTX_FLAGS_LOADING;
    ffi::context_flags(ctx) & refuse == 0
}

/// What a `BLOCK` call on a key that already has waiters does.
pub(crate) enum Behind {
    /// It waits at the back of the queue, without trying: arrival order
    /// is kept.
    Queued,
    /// The key has no waiters, or the call could never wait: it runs now.
    Run,
    /// The queue is full: it runs now as if it had no `BLOCK`.
    Full,
}

pub(crate) fn behind_waiters(ctx: Ctx, key: RString, pending: &Pending) -> Behind {
    // A call asking for more than the key can ever hold answers at once.
    if !pending.can_wait() || waiting() == 0 {
        return Behind::Run;
    }
    if with(|w| w.queue(selected_db(ctx), ffi::bytes(key)).is_none()) {
        return Behind::Run;
    }
    // A holder renews its own lease at once: it needs no free slot.
    if let Pending::Acquire(Acquire { token: Some(token), .. }) = pending {
        if apply::holds_lease(ctx, key, token, clock::now_us()) {
            return Behind::Run;
        }
    }
    match block(ctx, key, pending, None) {
        Blocked::Yes => Behind::Queued,
        Blocked::No => Behind::Run,
        Blocked::Full => Behind::Full,
    }
}

/// Blocks the caller of a limited call until it is admitted, `BLOCK` ms
/// pass, or something else answers it. Returns false (answer now) where
/// Redis cannot block the client or a cap is reached.
pub(crate) fn until_admitted(ctx: Ctx, key: RString, pending: &Pending, retry_after_ms: i64) -> bool {
    pending.can_wait() && matches!(block(ctx, key, pending, Some(retry_after_ms)), Blocked::Yes)
}

enum Blocked {
    Yes,
    No,
    Full,
}

fn block(ctx: Ctx, key: RString, pending: &Pending, retry_after_ms: Option<i64>) -> Blocked {
    if !can_block(ctx) {
        return Blocked::No;
    }
    let (db, name) = (selected_db(ctx), ffi::bytes(key));
    let now_us = clock::monotonic_us();
    let deadline_us = pending.block_ms().filter(|&ms| ms > 0).map(|ms| now_us.saturating_add(ms.saturating_mul(1000)));
    let slot = Box::into_raw(Box::new(Slot { client: std::ptr::null_mut(), answer: None }));
    // Its penalties ran with the call (if it ran before waiting): a waiter
    // is not punished again each time it is looked at.
    let pending = match *pending {
        Pending::Limit { algorithm, call } => {
            Pending::Limit { algorithm, call: Call { rules: Rules::default(), ..call } }
        }
        acquire => acquire,
    };
    let Ok(queue) = with(|w| w.add(db, name, slot as ClientId, pending, deadline_us, config::waiter_caps())) else {
        // SAFETY: never shared: the box is ours again.
        drop(unsafe { Box::from_raw(slot) });
        pending.counters().add(Counter::OverCap);
        return Blocked::Full;
    };
    let mut keys = [key];
    // SAFETY: blocking the client of the running command on its key with
    // our callbacks and no Redis time-out; Redis frees `slot` through
    // free_slot once the client is unblocked, whatever unblocks it.
    let client = unsafe {
        let private = slot.cast::<c_void>();
        let flags = raw::REDISMODULE_BLOCK_UNBLOCK_DELETED as c_int;
        match (raw::RedisModule_BlockClientOnKeysWithFlags, raw::RedisModule_BlockClientOnKeys) {
            (Some(block), _) => {
                block(ctx, Some(key_ready), Some(answer_now), Some(free_slot), 0, keys.as_mut_ptr(), 1, private, flags)
            }
            (None, Some(block)) => {
                block(ctx, Some(key_ready), Some(answer_now), Some(free_slot), 0, keys.as_mut_ptr(), 1, private)
            }
            (None, None) => std::ptr::null_mut(),
        }
    };
    if client.is_null() {
        forget(ctx, slot as ClientId);
        // SAFETY: Redis did not take it.
        drop(unsafe { Box::from_raw(slot) });
        return Blocked::No;
    }
    // SAFETY: the slot lives until free_slot; the handle was just returned.
    unsafe {
        (*slot).client = client;
        if let Some(on_disconnect) = raw::RedisModule_SetDisconnectCallback {
            on_disconnect(client, Some(disconnected));
        }
    }
    let until_deadline_ms = deadline_us.map_or(i64::MAX, |d| ms_until(d, now_us));
    // A queue that waits already keeps its timer, unless this deadline is
    // earlier.
    schedule_unless_sooner(ctx, queue, retry_after_ms.unwrap_or(i64::MAX).min(until_deadline_ms));
    Blocked::Yes
}

/// Whole milliseconds from `now_us` to `at_us`, rounded up.
fn ms_until(at_us: u64, now_us: u64) -> i64 {
    i64::try_from(at_us.saturating_sub(now_us).div_ceil(1000)).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------
// Wake-ups
// ---------------------------------------------------------------------------

/// Units came back to a key (a refund): its waiters may fit now.
pub(crate) fn units_returned(ctx: Ctx, key: RString) {
    key_changed(ctx, selected_db(ctx), ffi::bytes(key));
}

/// Makes the module's own context, at load.
pub(crate) fn prepare(ctx: Ctx) {
    // SAFETY: OnLoad context; the detached context lives as long as the
    // module and is used on the main thread only.
    let own = unsafe { raw::RedisModule_GetDetachedThreadSafeContext.map_or(std::ptr::null_mut(), |f| f(ctx)) };
    OWN_CTX.store(own, Ordering::Relaxed);
}

/// A key of ours was removed or replaced: its waiters are served now.
pub(crate) fn key_removed(db: Db, key: &[u8]) {
    let ctx = OWN_CTX.load(Ordering::Relaxed);
    if !ctx.is_null() {
        key_changed(ctx, db, key);
    }
}

/// Another command changed or removed a key: its waiters are served now.
pub(crate) fn key_changed(ctx: Ctx, db: Db, key: &[u8]) {
    if waiting() == 0 {
        return;
    }
    if let Some(queue) = with(|w| w.queue(db, key)) {
        wake(ctx, queue);
    }
}

/// A database (or, with `None`, every one) was flushed, swapped or loaded.
pub(crate) fn database_changed(ctx: Ctx, db: Option<Db>) {
    if waiting() == 0 {
        return;
    }
    for queue in with(|w| w.queues_in(db)) {
        wake(ctx, queue);
    }
}

fn wake(ctx: Ctx, queue: QueueId) {
    schedule_unless_sooner(ctx, queue, 0);
}

/// Sets the queue's timer `delay_ms` from now, unless it is due sooner.
fn schedule_unless_sooner(ctx: Ctx, queue: QueueId, delay_ms: i64) {
    if delay_ms == i64::MAX {
        return;
    }
    let due_us = clock::monotonic_us().saturating_add(delay_ms.max(0) as u64 * 1000);
    if with(|w| w.timer(queue)).is_some_and(|t| t.due_us <= due_us) {
        return;
    }
    schedule(ctx, queue, delay_ms);
}

/// Replaces the queue's timer with one `delay_ms` from now.
fn schedule(ctx: Ctx, queue: QueueId, delay_ms: i64) {
    let delay_ms = delay_ms.max(0);
    if let Some(old) = with(|w| w.timer(queue)) {
        stop_timer(ctx, old);
    }
    let data = Box::into_raw(Box::new(queue)).cast::<c_void>();
    // SAFETY: the timer owns `data` until it fires or is stopped.
    let id = unsafe {
        match raw::RedisModule_CreateTimer {
            Some(create) => create(ctx, delay_ms, Some(timer_fired), data),
            None => {
                drop(Box::from_raw(data.cast::<QueueId>()));
                return;
            }
        }
    };
    let timer = Timer { id, due_us: clock::monotonic_us().saturating_add(delay_ms as u64 * 1000) };
    if !with(|w| w.set_timer(queue, Some(timer))) {
        stop_timer(ctx, timer);
    }
}

fn stop_timer(ctx: Ctx, timer: Timer) {
    // SAFETY: the timer is ours; stopping it hands its data back.
    unsafe {
        let mut data: *mut c_void = std::ptr::null_mut();
        if raw::RedisModule_StopTimer.is_some_and(|stop| stop(ctx, timer.id, &mut data) == raw::REDISMODULE_OK as c_int)
            && !data.is_null()
        {
            drop(Box::from_raw(data.cast::<QueueId>()));
        }
    }
}

unsafe extern "C" fn timer_fired(ctx: Ctx, data: *mut c_void) {
    let queue = *Box::from_raw(data.cast::<QueueId>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if with(|w| w.set_timer(queue, None)) {
            serve(ctx, queue);
        }
    }));
}

// ---------------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------------

/// Serves the queue's waiters in order while they can be admitted, answers
/// those whose time is up, and sets the timer for the next look.
fn serve(ctx: Ctx, queue: QueueId) {
    let Some((db, name)) = with(|w| w.key(queue).map(|(db, key)| (db, key.to_vec()))) else { return };
    // SAFETY: the timer's context; the string is freed below.
    let key = unsafe {
        if let Some(select) = raw::RedisModule_SelectDb {
            select(ctx, db);
        }
        match raw::RedisModule_CreateString {
            Some(create) => create(ctx, name.as_ptr().cast(), name.len()),
            None => return,
        }
    };
    let gate = gate::check(ctx, key);
    let mut next_look_ms;
    loop {
        next_look_ms = serve_in_order(ctx, queue, key, &gate);
        // Waiters whose time is up get the normal reply, wherever they
        // wait; when one was first, the next may go now.
        let now_us = clock::monotonic_us();
        let mut expired = 0;
        while let Some((client, pending)) = with(|w| w.first_expired(queue, now_us).map(|h| (h.client, *h.payload))) {
            let answer = match &gate {
                Gate::Open => run(ctx, key, &pending),
                _ => limited_now(ctx, key, &pending),
            };
            answer_waiter(ctx, client, &pending, answer);
            expired += 1;
        }
        if expired == 0 {
            break;
        }
    }
    let until_deadline_ms = with(|w| w.next_deadline(queue)).map(|d| ms_until(d, clock::monotonic_us()));
    let next_ms = match (next_look_ms, until_deadline_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(ms) = next_ms {
        schedule(ctx, queue, ms);
    }
    // SAFETY: created above with this context.
    unsafe {
        if let Some(free) = raw::RedisModule_FreeString {
            free(ctx, key);
        }
    }
}

/// Runs the queue's waiters in arrival order until one is still limited.
/// Returns when to look again for that one, if any.
fn serve_in_order(ctx: Ctx, queue: QueueId, key: RString, gate: &Gate) -> Option<i64> {
    while let Some((client, pending)) = with(|w| w.head(queue).map(|h| (h.client, *h.payload))) {
        let answer = match gate {
            Gate::Open => match run(ctx, key, &pending) {
                Ok(o) if !o.decision.allowed && o.decision.retry_after_ms != NEVER => {
                    return Some(o.decision.retry_after_ms)
                }
                answer => answer,
            },
            Gate::Closed => return Some(CLOSED_GATE_RETRY_MS),
            Gate::Refused(e) => Err(e.clone()),
        };
        answer_waiter(ctx, client, &pending, answer);
    }
    None
}

/// The reply of a waiter that must be answered without a write (its time
/// is up while the server refuses writes, or it was unblocked from
/// outside): what its call would answer now, as a limited reply. A call
/// that would fit right now says so with `retry_after` 0.
fn limited_now(ctx: Ctx, key: RString, pending: &Pending) -> Answer {
    let now_us = clock::now_us();
    let (algorithm, call) = match pending {
        Pending::Acquire(acquire) => return apply::acquire_limited_now(ctx, key, acquire, now_us),
        Pending::Limit { algorithm, call } => (*algorithm, call),
    };
    let outcome = apply::dry_run(ctx, key, algorithm, call, now_us)?;
    if !outcome.decision.allowed {
        return Ok(outcome);
    }
    let peek = Call { cost: 0, ..*call };
    let now = apply::dry_run(ctx, key, algorithm, &peek, now_us)?;
    Ok(Outcome { decision: Decision { allowed: false, retry_after_ms: 0, ..now.decision }, ..now })
}

/// The waiter's call, run now through the command's own path.
fn run(ctx: Ctx, key: RString, pending: &Pending) -> Answer {
    match pending {
        Pending::Limit { algorithm, call } => {
            apply::execute(ctx, key, *algorithm, call, clock::now_us(), Origin::Waiter)
        }
        Pending::Acquire(acquire) => {
            apply::execute_lease(ctx, key, &LeaseCall::Acquire(*acquire), clock::now_us(), Origin::Waiter)
        }
    }
}

fn count(pending: &Pending, answer: &Answer) {
    let counter = match answer {
        Ok(o) if o.decision.allowed => Counter::Admitted,
        Ok(_) => Counter::TimedOut,
        Err(_) => return,
    };
    pending.counters().add(counter);
}

/// Takes the waiter out and unblocks it with its answer: Redis then calls
/// answer_now, which replies, and later free_slot.
fn answer_waiter(ctx: Ctx, client: ClientId, pending: &Pending, answer: Answer) {
    count(pending, &answer);
    forget(ctx, client);
    let slot = client as *mut Slot;
    // SAFETY: the slot lives until Redis calls free_slot, which happens
    // only after the unblock below; the waiter was in the registry, so it
    // has not been unblocked yet.
    unsafe {
        (*slot).answer = Some(answer);
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            unblock((*slot).client, slot.cast());
        }
    }
}

/// Takes a waiter out of its queue. Returns whether it was first, and
/// its queue, which may have lost the waiter it was waiting for.
fn forget(ctx: Ctx, client: ClientId) -> Option<(QueueId, bool)> {
    let removed = with(|w| w.remove(client))?;
    if let Some(timer) = removed.orphan_timer {
        stop_timer(ctx, timer);
    }
    Some((removed.queue, removed.was_first))
}

// ---------------------------------------------------------------------------
// Callbacks Redis calls
// ---------------------------------------------------------------------------

/// Redis signals the key of a waiter (created, deleted, overwritten): the
/// module serves from its timer, so this only wakes the queue, and the
/// client stays blocked (`REDISMODULE_ERR`).
unsafe extern "C" fn key_ready(ctx: Ctx, _argv: *mut RString, _argc: c_int) -> c_int {
    let _ = std::panic::catch_unwind(|| {
        let key = raw::RedisModule_GetBlockedClientReadyKey.map_or(std::ptr::null_mut(), |f| f(ctx));
        if !key.is_null() {
            key_changed(ctx, selected_db(ctx), ffi::bytes(key));
        }
    });
    raw::REDISMODULE_ERR as c_int
}

/// Replies to an unblocked waiter: with its answer when the module
/// unblocked it, or (`CLIENT UNBLOCK ... TIMEOUT`) with what its call
/// would answer now, changing nothing.
unsafe extern "C" fn answer_now(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let slot = raw::RedisModule_GetBlockedClientPrivateData.map_or(std::ptr::null_mut(), |f| f(ctx)).cast::<Slot>();
        let Some(slot) = slot.as_mut() else { return ffi::reply_null(ctx) };
        if slot.answer.is_none() {
            // The command's own arguments: the key is the first.
            let key = (argc > 1 && !argv.is_null()).then(|| *argv.add(1));
            slot.answer = Some(unblocked_from_outside(ctx, slot as *mut Slot as ClientId, key));
        }
        match &slot.answer {
            Some(Ok(o)) => reply::outcome(ctx, ffi::context_flags(ctx), o),
            Some(Err(e)) => e.reply(ctx),
            None => ffi::reply_null(ctx),
        }
    }));
    raw::REDISMODULE_OK as c_int
}

fn unblocked_from_outside(ctx: Ctx, client: ClientId, key: Option<RString>) -> Answer {
    let pending = with(|w| w.payload(client).copied());
    if let Some((queue, true)) = forget(ctx, client) {
        wake(ctx, queue);
    }
    match (pending, key) {
        (Some(pending), Some(key)) => {
            let answer = limited_now(ctx, key, &pending);
            count(&pending, &answer);
            answer
        }
        _ => Err(CommandError::Refused("UNBLOCKED the waiter was unblocked".to_string())),
    }
}

unsafe extern "C" fn free_slot(_ctx: Ctx, slot: *mut c_void) {
    if !slot.is_null() {
        drop(Box::from_raw(slot.cast::<Slot>()));
    }
}

/// A waiting client went away, or Redis unblocked it (a cluster redirect,
/// a role change, `CLIENT UNBLOCK ... ERROR`, `CLIENT KILL`): forget it,
/// and let the next one go first. Redis frees its slot.
unsafe extern "C" fn disconnected(ctx: Ctx, _client: BlockedClient) {
    let _ = std::panic::catch_unwind(|| {
        let slot = raw::RedisModule_GetBlockedClientPrivateData.map_or(std::ptr::null_mut(), |f| f(ctx));
        if slot.is_null() {
            return;
        }
        if let Some((queue, true)) = forget(ctx, slot as ClientId) {
            wake(ctx, queue);
        }
    });
}
