//! `BLOCK ms`: a limited call waits on the server until it is admitted or
//! its time is up. No polling: each key with waiters has one timer, set for
//! the moment the first waiter's call can succeed or the earliest time-out,
//! whichever comes first. Waiters of one key are served in arrival order.
//!
//! The module keeps the time-outs itself and is the only one to unblock a
//! client: on Redis 7.0, a client that the module unblocks in the same event
//! loop iteration as Redis's own time-out fires gets no reply at all.
//!
//! Everything here runs on Redis's main thread. The registry lock is never
//! held while calling into Redis (a key change can call back into us).

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use redis_module::raw;

use super::commands::{execute, CommandError, Origin};
use super::ffi::{self, Ctx, RString};
use super::stats::{self, Counter};
use crate::args::{Algorithm, Call};
use crate::limiter::{Decision, NEVER};

type Client = *mut raw::RedisModuleBlockedClient;
/// A key in a database.
type QueueKey = (c_int, Vec<u8>);

struct Waiter {
    client: usize,
    algorithm: Algorithm,
    call: Call,
    /// When `BLOCK` runs out (server clock, µs); `None` for `BLOCK 0`.
    deadline_us: Option<u64>,
}

#[derive(Default)]
struct Queue {
    waiters: VecDeque<Waiter>,
    timer: Option<raw::RedisModuleTimerID>,
    /// When the timer fires (server clock, µs).
    timer_due_us: Option<u64>,
}

#[derive(Default)]
struct Registry {
    queues: HashMap<QueueKey, Queue>,
    queue_of: HashMap<usize, QueueKey>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut guard = REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(Registry::default))
}

/// What a served waiter is answered.
enum Answer {
    Decision(Decision),
    Error(CommandError),
}

fn can_block(ctx: Ctx) -> bool {
    let flags = ffi::context_flags(ctx);
    let refuse = raw::REDISMODULE_CTX_FLAGS_MULTI
        | raw::REDISMODULE_CTX_FLAGS_LUA
        | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
        | raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | raw::REDISMODULE_CTX_FLAGS_LOADING;
    flags & refuse == 0
}

fn queue_key(ctx: Ctx, key: RString) -> QueueKey {
    // SAFETY: plain call on a live context.
    let db = unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx)) };
    (db, ffi::bytes(key).to_vec())
}

/// A BLOCK call on a key that already has waiters queues behind them,
/// without trying: arrival order is kept. Returns true if it queued.
pub(crate) fn must_queue(ctx: Ctx, key: RString, algorithm: Algorithm, call: &Call) -> bool {
    // A call asking for more than the key can ever hold answers at once.
    if call.cost <= 0 || call.cost.unsigned_abs() > call.params.burst() || !can_block(ctx) {
        return false;
    }
    let qkey = queue_key(ctx, key);
    let waiting = with_registry(|r| r.queues.get(&qkey).is_some_and(|q| !q.waiters.is_empty()));
    waiting && enqueue(ctx, qkey, algorithm, call, None)
}

/// Blocks the caller of a limited call until it is admitted or `BLOCK` ms
/// pass. Returns false (answer now) where Redis cannot block the client.
pub(crate) fn wait(ctx: Ctx, argv: &[RString], algorithm: Algorithm, call: &Call, limited: &Decision) -> bool {
    let Some(&key) = argv.get(1) else { return false };
    if call.cost <= 0 || limited.retry_after_ms == NEVER || !can_block(ctx) {
        return false;
    }
    enqueue(ctx, queue_key(ctx, key), algorithm, call, Some(limited.retry_after_ms))
}

fn enqueue(ctx: Ctx, qkey: QueueKey, algorithm: Algorithm, call: &Call, retry_after_ms: Option<i64>) -> bool {
    // SAFETY: blocking the client of the running command with our callbacks;
    // no Redis time-out (see the module comment).
    let client = unsafe {
        let Some(block) = raw::RedisModule_BlockClient else { return false };
        block(ctx, Some(reply_callback), None, Some(free_answer), 0)
    };
    if client.is_null() {
        return false;
    }
    // SAFETY: the handle was just returned by BlockClient.
    unsafe {
        if let Some(on_disconnect) = raw::RedisModule_SetDisconnectCallback {
            on_disconnect(client, Some(disconnected));
        }
    }
    let now_us = super::clock::now_us();
    let deadline_us = call.block_ms.filter(|&ms| ms > 0).map(|ms| now_us.saturating_add(ms.saturating_mul(1000)));
    let (has_timer, earlier_deadline) = with_registry(|r| {
        r.queue_of.insert(client as usize, qkey.clone());
        let queue = r.queues.entry(qkey.clone()).or_default();
        queue.waiters.push_back(Waiter { client: client as usize, algorithm, call: *call, deadline_us });
        let earlier = deadline_us.is_some_and(|d| queue.timer_due_us.is_none_or(|due| d < due));
        (queue.timer.is_some(), earlier)
    });
    if !has_timer {
        let wait_ms = retry_after_ms.unwrap_or(0);
        let until_deadline_ms = deadline_us.map_or(i64::MAX, |d| ms_until(d, now_us));
        schedule(ctx, qkey, wait_ms.min(until_deadline_ms));
    } else if earlier_deadline {
        serve_soon_in(ctx, qkey, deadline_us.map_or(0, |d| ms_until(d, now_us)));
    }
    true
}

/// Whole milliseconds from `now_us` to `at_us`, rounded up.
fn ms_until(at_us: u64, now_us: u64) -> i64 {
    i64::try_from(at_us.saturating_sub(now_us).div_ceil(1000)).unwrap_or(i64::MAX)
}

fn schedule(ctx: Ctx, qkey: QueueKey, delay_ms: i64) {
    let data = Box::into_raw(Box::new(qkey.clone())).cast::<c_void>();
    // SAFETY: the timer owns `data` until its callback takes it back.
    let id = unsafe {
        match raw::RedisModule_CreateTimer {
            Some(create) => create(ctx, delay_ms.max(0), Some(timer_fired), data),
            None => {
                drop(Box::from_raw(data.cast::<QueueKey>()));
                return;
            }
        }
    };
    let due = super::clock::now_us().saturating_add(delay_ms.max(0) as u64 * 1000);
    with_registry(|r| {
        if let Some(queue) = r.queues.get_mut(&qkey) {
            queue.timer = Some(id);
            queue.timer_due_us = Some(due);
        }
    });
}

/// The first waiter of the queue, if any.
fn head(qkey: &QueueKey) -> Option<(usize, Algorithm, Call, Option<u64>)> {
    with_registry(|r| {
        let queue = r.queues.get(qkey)?;
        let w = queue.waiters.front()?;
        Some((w.client, w.algorithm, w.call, w.deadline_us))
    })
}

/// Takes a waiter out of its queue. Returns its queue's key, the waiter,
/// and whether it was first (then the queue's timer was set for it).
fn remove(client: usize) -> Option<(QueueKey, Waiter, bool)> {
    with_registry(|r| {
        let qkey = r.queue_of.remove(&client)?;
        let queue = r.queues.get_mut(&qkey)?;
        let index = queue.waiters.iter().position(|w| w.client == client)?;
        let waiter = queue.waiters.remove(index)?;
        if queue.waiters.is_empty() && queue.timer.is_none() {
            r.queues.remove(&qkey);
        }
        Some((qkey, waiter, index == 0))
    })
}

/// Serves the queue now instead of at its timer: its first waiter left,
/// or units came back.
fn serve_soon(ctx: Ctx, qkey: QueueKey) {
    serve_soon_in(ctx, qkey, 0);
}

/// Moves the queue's timer to `delay_ms` from now.
fn serve_soon_in(ctx: Ctx, qkey: QueueKey, delay_ms: i64) {
    let timer = with_registry(|r| {
        let queue = r.queues.get_mut(&qkey)?;
        if queue.waiters.is_empty() {
            return None;
        }
        queue.timer_due_us = None;
        queue.timer.take()
    });
    let Some(id) = timer else { return };
    // SAFETY: the timer is ours; stopping it hands its data back to free.
    unsafe {
        let mut data: *mut c_void = std::ptr::null_mut();
        if raw::RedisModule_StopTimer.is_some_and(|stop| stop(ctx, id, &mut data) == raw::REDISMODULE_OK as c_int)
            && !data.is_null()
        {
            drop(Box::from_raw(data.cast::<QueueKey>()));
        }
    }
    schedule(ctx, qkey, delay_ms);
}

/// Units came back to a key (a refund): its waiters may fit now.
pub(crate) fn units_returned(ctx: Ctx, key: RString) {
    let qkey = queue_key(ctx, key);
    if with_registry(|r| r.queues.contains_key(&qkey)) {
        serve_soon(ctx, qkey);
    }
}

/// Redis frees a blocked client's handle only once the module unblocks it,
/// also after a time-out or a disconnection.
fn release(client: Client) {
    // SAFETY: the handle is still ours until this call.
    unsafe {
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            unblock(client, std::ptr::null_mut());
        }
    }
}

/// Serves the queue's waiters in order at the current time, until one is
/// still limited (then waits for it) or the queue is empty.
unsafe extern "C" fn timer_fired(ctx: Ctx, data: *mut c_void) {
    let qkey = *Box::from_raw(data.cast::<QueueKey>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(ctx, qkey)));
}

fn serve(ctx: Ctx, qkey: QueueKey) {
    with_registry(|r| {
        if let Some(queue) = r.queues.get_mut(&qkey) {
            queue.timer = None;
            queue.timer_due_us = None;
        }
    });
    // SAFETY: the timer's context; the key names a key of that database.
    let key = unsafe {
        if let Some(select) = raw::RedisModule_SelectDb {
            select(ctx, qkey.0);
        }
        match raw::RedisModule_CreateString {
            Some(create) => create(ctx, qkey.1.as_ptr().cast(), qkey.1.len()),
            None => return,
        }
    };
    // The first waiters, in order, while they can be answered.
    let mut wait_ms = None;
    while let Some((client, algorithm, call, deadline_us)) = head(&qkey) {
        let now_us = super::clock::now_us();
        let answer = match execute(ctx, key, algorithm, &call, now_us, Origin::Timer) {
            Ok(outcome)
                if !outcome.decision.allowed
                    && outcome.decision.retry_after_ms != NEVER
                    && deadline_us.is_none_or(|d| now_us < d) =>
            {
                wait_ms = Some(outcome.decision.retry_after_ms);
                break;
            }
            Ok(outcome) => Answer::Decision(outcome.decision),
            Err(e) => Answer::Error(e),
        };
        answer_waiter(client, algorithm, answer);
    }
    // Waiters further back whose time is up get the normal reply now.
    let now_us = super::clock::now_us();
    for (client, algorithm, call) in expired_behind_head(&qkey, now_us) {
        let answer = match execute(ctx, key, algorithm, &call, now_us, Origin::Timer) {
            Ok(outcome) => Answer::Decision(outcome.decision),
            Err(e) => Answer::Error(e),
        };
        answer_waiter(client, algorithm, answer);
    }
    let next_deadline = with_registry(|r| {
        let queue = r.queues.get(&qkey)?;
        queue.waiters.iter().filter_map(|w| w.deadline_us).min()
    });
    let until_deadline_ms = next_deadline.map(|d| ms_until(d, super::clock::now_us()));
    match (wait_ms, until_deadline_ms) {
        (Some(w), Some(d)) => schedule(ctx, qkey.clone(), w.min(d)),
        (Some(w), None) => schedule(ctx, qkey.clone(), w),
        (None, Some(d)) => schedule(ctx, qkey.clone(), d),
        (None, None) => {}
    }
    with_registry(|r| {
        if r.queues.get(&qkey).is_some_and(|q| q.waiters.is_empty() && q.timer.is_none()) {
            r.queues.remove(&qkey);
        }
    });
    // SAFETY: created above with this context.
    unsafe {
        if let Some(free) = raw::RedisModule_FreeString {
            free(ctx, key);
        }
    }
}

/// Takes the waiter out and unblocks it with its answer; Redis hands the
/// answer to reply_callback, then to free_answer.
fn answer_waiter(client: usize, algorithm: Algorithm, answer: Answer) {
    let counter = match &answer {
        Answer::Decision(d) if d.allowed => Some(Counter::Admitted),
        Answer::Decision(_) => Some(Counter::TimedOut),
        Answer::Error(_) => None,
    };
    if let Some(counter) = counter {
        stats::for_command(algorithm).add(counter);
    }
    remove(client);
    let answer = Box::into_raw(Box::new(answer)).cast::<c_void>();
    // SAFETY: the client is still blocked: it leaves the registry only here
    // or when it disconnects.
    unsafe {
        if let Some(unblock) = raw::RedisModule_UnblockClient {
            unblock(client as Client, answer);
        }
    }
}

/// The waiters after the first whose `BLOCK` time is up.
fn expired_behind_head(qkey: &QueueKey, now_us: u64) -> Vec<(usize, Algorithm, Call)> {
    with_registry(|r| {
        let Some(queue) = r.queues.get(qkey) else { return Vec::new() };
        queue
            .waiters
            .iter()
            .skip(1)
            .filter(|w| w.deadline_us.is_some_and(|d| d <= now_us))
            .map(|w| (w.client, w.algorithm, w.call))
            .collect()
    })
}

unsafe extern "C" fn reply_callback(ctx: Ctx, _argv: *mut RString, _argc: c_int) -> c_int {
    let _ = std::panic::catch_unwind(|| {
        let answer = raw::RedisModule_GetBlockedClientPrivateData.map_or(std::ptr::null_mut(), |f| f(ctx));
        match answer.cast::<Answer>().as_ref() {
            Some(Answer::Decision(d)) => super::reply::decision(ctx, ffi::context_flags(ctx), d),
            Some(Answer::Error(e)) => e.reply(ctx),
            None => ffi::reply_null(ctx),
        }
    });
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn free_answer(_ctx: Ctx, answer: *mut c_void) {
    if !answer.is_null() {
        drop(Box::from_raw(answer.cast::<Answer>()));
    }
}

/// A waiting client went away: forget it, and let the next one go first.
unsafe extern "C" fn disconnected(ctx: Ctx, client: Client) {
    let _ = std::panic::catch_unwind(|| {
        if let Some((qkey, _, was_first)) = remove(client as usize) {
            release(client);
            if was_first {
                serve_soon(ctx, qkey);
            }
        }
    });
}

/// Waiters right now, for tests and INFO.
pub(crate) fn waiting() -> usize {
    with_registry(|r| r.queue_of.len())
}
