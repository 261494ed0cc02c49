//! `BLOCK ms`: a limited call waits on the server until it is admitted or
//! its time is up. No polling: each key with waiters has one timer, set for
//! the moment the first waiter's call can succeed. Waiters of one key are
//! served in arrival order.
//!
//! Everything here runs on Redis's main thread. The registry lock is never
//! held while calling into Redis (a key change can call back into us).

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use redis_module::raw;

use super::commands::{execute, CommandError};
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
}

#[derive(Default)]
struct Queue {
    waiters: VecDeque<Waiter>,
    timer: Option<raw::RedisModuleTimerID>,
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
    // SAFETY: plain call on a live context.
    let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(ctx)) } as u32;
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
    // SAFETY: blocking the client of the running command with our callbacks.
    let client = unsafe {
        let Some(block) = raw::RedisModule_BlockClient else { return false };
        let timeout = call.block_ms.unwrap_or(0) as i64;
        block(ctx, Some(reply_callback), Some(timeout_callback), Some(free_answer), timeout)
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
    let needs_timer = with_registry(|r| {
        r.queue_of.insert(client as usize, qkey.clone());
        let queue = r.queues.entry(qkey.clone()).or_default();
        queue.waiters.push_back(Waiter { client: client as usize, algorithm, call: *call });
        queue.timer.is_none()
    });
    if needs_timer {
        schedule(ctx, qkey, retry_after_ms.unwrap_or(0));
    }
    true
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
    with_registry(|r| {
        if let Some(queue) = r.queues.get_mut(&qkey) {
            queue.timer = Some(id);
        }
    });
}

/// The first waiter of the queue, if any, as (client, algorithm, call).
fn head(qkey: &QueueKey) -> Option<(usize, Algorithm, Call)> {
    with_registry(|r| {
        let queue = r.queues.get(qkey)?;
        let w = queue.waiters.front()?;
        Some((w.client, w.algorithm, w.call))
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
    let timer = with_registry(|r| {
        let queue = r.queues.get_mut(&qkey)?;
        if queue.waiters.is_empty() {
            return None;
        }
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
    schedule(ctx, qkey, 0);
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
    while let Some((client, algorithm, call)) = head(&qkey) {
        let answer = match execute(ctx, key, algorithm, &call, super::clock::now_us()) {
            Ok(outcome) if !outcome.decision.allowed && outcome.decision.retry_after_ms != NEVER => {
                schedule(ctx, qkey.clone(), outcome.decision.retry_after_ms);
                break;
            }
            Ok(outcome) => {
                let counter = if outcome.decision.allowed { Counter::Admitted } else { Counter::Limited };
                stats::for_command(algorithm).add(counter);
                Answer::Decision(outcome.decision)
            }
            Err(e) => Answer::Error(e),
        };
        remove(client);
        let answer = Box::into_raw(Box::new(answer)).cast::<c_void>();
        // SAFETY: the client is still blocked (it leaves the registry when
        // it disconnects or times out); Redis hands `answer` to
        // reply_callback, then to free_answer.
        unsafe {
            if let Some(unblock) = raw::RedisModule_UnblockClient {
                unblock(client as Client, answer);
            }
        }
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

unsafe extern "C" fn reply_callback(ctx: Ctx, _argv: *mut RString, _argc: c_int) -> c_int {
    let _ = std::panic::catch_unwind(|| {
        let answer = raw::RedisModule_GetBlockedClientPrivateData.map_or(std::ptr::null_mut(), |f| f(ctx));
        match answer.cast::<Answer>().as_ref() {
            Some(Answer::Decision(d)) => super::reply::decision(ctx, d),
            Some(Answer::Error(e)) => e.reply(ctx),
            None => ffi::reply_null(ctx),
        }
    });
    raw::REDISMODULE_OK as c_int
}

/// Time is up: the call is tried once more and answered as it stands.
unsafe extern "C" fn timeout_callback(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let client = raw::RedisModule_GetBlockedClientHandle.map_or(std::ptr::null_mut(), |f| f(ctx));
        let Some((qkey, waiter, was_first)) = remove(client as usize) else {
            return ffi::reply_null(ctx);
        };
        release(client);
        if was_first {
            serve_soon(ctx, qkey);
        }
        let counters = stats::for_command(waiter.algorithm);
        let key = match usize::try_from(argc) {
            Ok(n) if n >= 2 && !argv.is_null() => *argv.add(1),
            _ => return ffi::reply_null(ctx),
        };
        match execute(ctx, key, waiter.algorithm, &waiter.call, super::clock::now_us()) {
            Ok(outcome) => {
                counters.add(if outcome.decision.allowed { Counter::Admitted } else { Counter::TimedOut });
                super::reply::decision(ctx, &outcome.decision);
            }
            Err(e) => e.reply(ctx),
        }
    }));
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
