//! The server events the module hears, and who they concern:
//! - propagation asks again whether anyone listens after a role change, a
//!   replica coming or going, a fork or a load;
//! - waiting serves the waiters of a database that was flushed, swapped
//!   or loaded. (A key of ours removed or replaced one at a time reaches
//!   waiting through its type's unlink callback.)
//!
//! Subscribing is the last step of loading: Redis 7.0 keeps the
//! subscriptions of a module whose load fails after them, and calls into
//! the unloaded library on the next event.

use std::ffi::{c_int, c_void};

use redis_module::raw;

use super::ffi::Ctx;
use super::{blocked_clients, propagation};

const SERVER_EVENTS: [u64; 6] = [
    raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
    raw::REDISMODULE_EVENT_REPLICA_CHANGE,
    raw::REDISMODULE_EVENT_FORK_CHILD,
    raw::REDISMODULE_EVENT_LOADING,
    raw::REDISMODULE_EVENT_FLUSHDB,
    raw::REDISMODULE_EVENT_SWAPDB,
];

/// Subscribes to everything above. Either all subscriptions hold, or none
/// does and it returns false.
pub(crate) fn subscribe(ctx: Ctx) -> bool {
    // SAFETY: OnLoad context; the callbacks are plain functions.
    unsafe {
        let Some(server) = raw::RedisModule_SubscribeToServerEvent else { return false };
        let event = |id: u64| raw::RedisModuleEvent { id, dataver: 1 };
        for (done, &id) in SERVER_EVENTS.iter().enumerate() {
            if server(ctx, event(id), Some(on_server_event)) != raw::REDISMODULE_OK as c_int {
                for &earlier in &SERVER_EVENTS[..done] {
                    server(ctx, event(earlier), None);
                }
                return false;
            }
        }
        true
    }
}

unsafe extern "C" fn on_server_event(ctx: Ctx, event: raw::RedisModuleEvent, subevent: u64, data: *mut c_void) {
    let _ = std::panic::catch_unwind(|| match event.id {
        raw::REDISMODULE_EVENT_LOADING => {
            propagation::forget();
            if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED {
                blocked_clients::database_changed(ctx, None);
            }
        }
        raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
            let Some(info) = data.cast::<raw::RedisModuleFlushInfoV1>().as_ref() else { return };
            blocked_clients::database_changed(ctx, (info.dbnum >= 0).then_some(info.dbnum));
        }
        raw::REDISMODULE_EVENT_SWAPDB => {
            let Some(info) = data.cast::<raw::RedisModuleSwapDbInfoV1>().as_ref() else { return };
            blocked_clients::database_changed(ctx, Some(info.dbnum_first));
            blocked_clients::database_changed(ctx, Some(info.dbnum_second));
        }
        raw::REDISMODULE_EVENT_FLUSHDB => {}
        _ => propagation::forget(),
    });
}
