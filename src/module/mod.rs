//! The Redis module: registration and the glue between Redis and the pure
//! algorithms.

mod all;
mod alloc;
mod apply;
mod blocked_clients;
mod cell;
mod clock;
mod commands;
mod config;
mod describe;
mod docs;
mod events;
mod ffi;
mod gate;
mod propagation;
mod reply;
mod stats;
mod types;

use std::ffi::{c_int, CString};

use redis_module::{raw, redis_module, Context, RedisString, Status};

use crate::args::Algorithm;
use docs::{
    ArgDoc, CommandDoc, AT, BACKOFF, BAN, BLOCK, BURST, COST, DETAIL, EXACT, FLOOR, FORCE, HOLDERS, KEY_ARG,
    KEY_OVERWRITTEN, KEY_READ, KEY_UPDATED, LEASE, LEASE_ID, LEASE_TOKEN, LIMIT, NOW, PERIOD, RENEW, TALLY,
};
use ffi::{Ctx, RString};
use types::{EXACT_TYPE, FIXED_TYPE, LEAKY_TYPE, LEASE_TYPE, SLIDING_TYPE, TOKEN_TYPE};

/// A command handler as Redis calls it, with a panic turned into an error
/// reply: a panic must never unwind into Redis (that aborts the server).
macro_rules! handler {
    ($name:ident, $body:expr) => {
        extern "C" fn $name(ctx: Ctx, argv: *mut RString, argc: c_int) -> c_int {
            let args: &[RString] = match usize::try_from(argc) {
                // SAFETY: Redis passes argc valid strings.
                Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
                _ => &[],
            };
            let run = std::panic::AssertUnwindSafe(|| $body(ctx, args));
            if std::panic::catch_unwind(run).is_err() {
                ffi::reply_error(
                    ctx,
                    "ERR internal error in the throttle module; the call changed nothing it reported",
                );
            }
            raw::REDISMODULE_OK as c_int
        }
    };
}

handler!(fixed_cmd, |ctx, args| commands::throttle(ctx, args, Algorithm::Fixed));
handler!(sliding_cmd, |ctx, args| commands::throttle(ctx, args, Algorithm::Sliding));
handler!(token_cmd, |ctx, args| commands::throttle(ctx, args, Algorithm::Token));
handler!(leaky_cmd, |ctx, args| commands::throttle(ctx, args, Algorithm::Leaky));
handler!(load_cmd, types::load_command);
handler!(set_cmd, types::set_command);
handler!(call_cmd, commands::packed_call);
handler!(all_cmd, all::throttle_all);
handler!(info_cmd, describe::info);
handler!(cell_cmd, cell::cl_throttle);
handler!(gate_cmd, gate::gate_command);
handler!(acquire_cmd, commands::acquire);
handler!(release_cmd, |ctx, args| commands::holder(ctx, args, false));
handler!(renew_cmd, |ctx, args| commands::holder(ctx, args, true));
handler!(lease_cmd, types::lease_command);

/// redis-cell's command, registered unless the `cl-throttle` setting is off.
static CL_THROTTLE: Command = Command {
    doc: CommandDoc {
        name: "CL.THROTTLE",
        summary: "redis-cell's rate limit on the TOKEN type: `max_burst + 1` tokens, `count_per_period` per `period` seconds.",
        complexity: "O(1)",
        arity: -5,
        args: cell::ARGS,
        key_flags: KEY_UPDATED,
    },
    handler: cell_cmd,
    flags: "write deny-oom fast",
};

/// Debug builds only: `THROTTLE._PANIC` panics inside the handler;
/// `THROTTLE._PANIC CALLBACK` makes the next type callback panic. Tests use
/// it to prove a panic never takes the server down. Release builds do not
/// have the command.
#[cfg(debug_assertions)]
fn panic_command(ctx: Ctx, args: &[RString]) {
    if args.get(1).is_some_and(|a| ffi::bytes(*a).eq_ignore_ascii_case(b"CALLBACK")) {
        types::PANIC_IN_NEXT_CALLBACK.store(true, std::sync::atomic::Ordering::Relaxed);
        return ffi::reply_simple_ok(ctx);
    }
    panic!("THROTTLE._PANIC: test trigger in a command handler");
}
#[cfg(debug_assertions)]
handler!(panic_cmd, panic_command);

/// Debug builds only: `THROTTLE._CLOCK offset_µs` shifts the module's wall
/// clock (never its monotonic one), so tests can step it as an operator's
/// `date -s` or an NTP jump would.
#[cfg(debug_assertions)]
fn clock_command(ctx: Ctx, args: &[RString]) {
    let offset = args.get(1).and_then(|a| std::str::from_utf8(ffi::bytes(*a)).ok()?.parse::<i64>().ok());
    match offset {
        Some(offset) => {
            clock::set_wall_offset_us(offset);
            ffi::reply_simple_ok(ctx)
        }
        None => ffi::reply_error(ctx, "ERR THROTTLE._CLOCK takes an offset in microseconds"),
    }
}
#[cfg(debug_assertions)]
handler!(clock_cmd, clock_command);

type Handler = extern "C" fn(Ctx, *mut RString, c_int) -> c_int;

struct Command {
    doc: CommandDoc,
    handler: Handler,
    flags: &'static str,
}

const fn throttle_doc(name: &'static str, summary: &'static str, args: &'static [ArgDoc]) -> CommandDoc {
    CommandDoc { name, summary, complexity: "O(1)", arity: -4, args, key_flags: KEY_UPDATED }
}

static COMMANDS: &[Command] = &[
    Command {
        doc: throttle_doc(
            "THROTTLE.FIXED",
            "Fixed window rate limit: at most `limit` units per window of `period` opened by the first call.",
            &[KEY_ARG, LIMIT, PERIOD, COST, AT, BLOCK, BAN, RENEW, BACKOFF, TALLY, FORCE, NOW, DETAIL],
        ),
        handler: fixed_cmd,
        flags: "write deny-oom fast",
    },
    Command {
        doc: CommandDoc {
            complexity: "O(1); with EXACT, O(1) amortized (O(COST) when limited)",
            ..throttle_doc(
                "THROTTLE.SLIDING",
                "Sliding window rate limit: weighted counter, or with EXACT a log of the last `period`.",
                &[KEY_ARG, LIMIT, PERIOD, COST, AT, BLOCK, EXACT, FLOOR, BAN, RENEW, BACKOFF, TALLY, FORCE, NOW, DETAIL],
            )
        },
        handler: sliding_cmd,
        flags: "write deny-oom fast",
    },
    Command {
        doc: throttle_doc(
            "THROTTLE.TOKEN",
            "Token bucket: `burst` tokens, refilled continuously at `limit` per `period`.",
            &[KEY_ARG, LIMIT, PERIOD, COST, AT, BLOCK, BURST, BAN, RENEW, BACKOFF, TALLY, FORCE, NOW, DETAIL],
        ),
        handler: token_cmd,
        flags: "write deny-oom fast",
    },
    Command {
        doc: throttle_doc(
            "THROTTLE.LEAKY",
            "Leaky bucket: up to `burst` units of queued work, drained at `limit` per `period`.",
            &[KEY_ARG, LIMIT, PERIOD, COST, AT, BLOCK, BURST, BAN, RENEW, BACKOFF, TALLY, FORCE, NOW, DETAIL],
        ),
        handler: leaky_cmd,
        flags: "write deny-oom fast",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE.ALL",
            summary: "Checks several limits atomically: admitted only if every limit admits, then all consume.",
            complexity: "O(N) where N is the number of limits",
            arity: -5,
            args: &[COST, AT, DETAIL, ArgDoc { name: "spec", kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING, token: None, optional: false, multiple: true }],
            key_flags: None,
        },
        handler: all_cmd,
        flags: "write deny-oom fast getkeys-api",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE.ACQUIRE",
            summary: "Takes one of `limit` slots for `lease` (a counting semaphore whose leases end by themselves); with BLOCK, waits in arrival order for a slot. Replies the five fields, then the lease's token when admitted.",
            complexity: "O(N) where N is the number of holders",
            arity: -4,
            args: &[KEY_ARG, HOLDERS, LEASE, LEASE_ID, BLOCK, AT],
            key_flags: KEY_UPDATED,
        },
        handler: acquire_cmd,
        flags: "write deny-oom fast",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE.RELEASE",
            summary: "Ends the lease of `token`: 1 if it was held, 0 (and no change) if not.",
            complexity: "O(N) where N is the number of holders",
            arity: -3,
            args: &[KEY_ARG, LEASE_TOKEN, AT],
            key_flags: KEY_UPDATED,
        },
        handler: release_cmd,
        flags: "write fast",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE.RENEW",
            summary: "Makes the lease of `token` end `lease` from now: 1 if it was held, 0 (and no change) if not.",
            complexity: "O(N) where N is the number of holders",
            arity: -4,
            args: &[KEY_ARG, LEASE_TOKEN, LEASE, AT],
            key_flags: KEY_UPDATED,
        },
        handler: renew_cmd,
        flags: "write deny-oom fast",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE._LEASE",
            summary: "Internal: applies a change to a key's leases as the master made it (how lease changes reach replicas and the AOF).",
            complexity: "O(N) where N is the number of holders",
            arity: 3,
            args: &[
                KEY_ARG,
                docs::ArgDoc { name: "change", kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING, token: None, optional: false, multiple: false },
            ],
            key_flags: KEY_UPDATED,
        },
        handler: lease_cmd,
        flags: "write deny-oom admin",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE.INFO",
            summary: "Describes a limiter key: its algorithm, what its state keeps, the units used or remaining and reset_after now.",
            complexity: "O(1); O(N) for SLIDING EXACT where N is the log length, and for leases where N is the number of holders",
            arity: -2,
            args: &[KEY_ARG, AT],
            key_flags: KEY_READ,
        },
        handler: info_cmd,
        flags: "readonly fast",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE._LOAD",
            summary: "Internal: sets a key to a stored THROTTLE state (written by the AOF rewrite).",
            complexity: "O(N) where N is the number of words",
            arity: -5,
            args: &[
                KEY_ARG,
                docs::ArgDoc { name: "type", kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING, token: None, optional: false, multiple: false },
                docs::ArgDoc { name: "version", kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER, token: None, optional: false, multiple: false },
                docs::ArgDoc { name: "word", kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER, token: None, optional: false, multiple: true },
            ],
            key_flags: KEY_OVERWRITTEN,
        },
        handler: load_cmd,
        flags: "write deny-oom admin",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE._SET",
            summary: "Internal: sets a key to a THROTTLE state expiring at the instant it carries (how changes reach replicas and the AOF).",
            complexity: "O(1)",
            arity: -3,
            args: &[
                KEY_ARG,
                docs::ArgDoc { name: "snapshot", kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING, token: None, optional: false, multiple: false },
                docs::ArgDoc { name: "unix-time-milliseconds", kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER, token: None, optional: true, multiple: false },
            ],
            key_flags: KEY_OVERWRITTEN,
        },
        handler: set_cmd,
        flags: "write deny-oom admin",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE._CALL",
            summary: "Internal: runs a THROTTLE call sent packed, at its time and with the master's clock (how a SLIDING EXACT change reaches replicas and the AOF).",
            complexity: "O(1) amortized",
            arity: 3,
            args: &[
                KEY_ARG,
                docs::ArgDoc { name: "call", kind: raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING, token: None, optional: false, multiple: false },
            ],
            key_flags: KEY_UPDATED,
        },
        handler: call_cmd,
        flags: "write deny-oom admin",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE._GATE",
            summary: "Internal: does nothing. The module calls it to learn whether the server accepts a write to the key now.",
            complexity: "O(1)",
            arity: 2,
            args: &[KEY_ARG],
            key_flags: KEY_UPDATED,
        },
        handler: gate_cmd,
        flags: "write deny-oom no-monitor no-slowlog",
    },
];

#[cfg(debug_assertions)]
static DEBUG_COMMANDS: &[Command] = &[
    Command {
        doc: CommandDoc {
            name: "THROTTLE._PANIC",
            summary: "Debug builds only: panics, to test that a panic is contained.",
            complexity: "O(1)",
            arity: -1,
            args: &[],
            key_flags: None,
        },
        handler: panic_cmd,
        flags: "",
    },
    Command {
        doc: CommandDoc {
            name: "THROTTLE._CLOCK",
            summary: "Debug builds only: shifts the module's wall clock, to test a clock step.",
            complexity: "O(1)",
            arity: 2,
            args: &[],
            key_flags: None,
        },
        handler: clock_cmd,
        flags: "",
    },
];

fn register(ctx: Ctx, command: &Command) -> bool {
    let (Ok(name), Ok(flags)) = (CString::new(command.doc.name), CString::new(command.flags)) else {
        return false;
    };
    // SAFETY: called from OnLoad with the module's context.
    let first_key = c_int::from(command.doc.key_flags.is_some());
    let created = unsafe {
        raw::RedisModule_CreateCommand.map_or(raw::REDISMODULE_ERR as c_int, |f| {
            f(ctx, name.as_ptr(), Some(command.handler), flags.as_ptr(), first_key, first_key, first_key)
        })
    };
    created == raw::REDISMODULE_OK as c_int
        && docs::set_command_info(ctx, &command.doc)
        && set_acl_categories(ctx, &name, command.flags)
}

/// Servers with module ACL categories (7.2+) get `@write`/`@read`,
/// `@fast` and, where modules may add categories, `@throttle`; the
/// internal commands (`THROTTLE._*`) are in neither `@throttle` nor
/// `@fast`, and those that overwrite any key (`THROTTLE._LOAD`,
/// `THROTTLE._SET`) or run a call at any time it names (`THROTTLE._CALL`)
/// are `@admin @dangerous`. On 7.0 module commands have no categories:
/// grant them by name (docs/operations.md, "ACL").
fn set_acl_categories(ctx: Ctx, name: &CString, flags: &str) -> bool {
    // SAFETY: called from OnLoad with the module's context; the strings
    // outlive the calls.
    unsafe {
        let (Some(get_command), Some(set_categories)) =
            (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandACLCategories)
        else {
            return true;
        };
        let command = get_command(ctx, name.as_ptr());
        if command.is_null() {
            return false;
        }
        let internal = name.to_bytes().starts_with(b"THROTTLE._");
        let mut categories: Vec<&str> = Vec::new();
        for flag in flags.split(' ') {
            match flag {
                "write" => categories.push("write"),
                "readonly" => categories.push("read"),
                "fast" if !internal => categories.push("fast"),
                "admin" => categories.extend(["admin", "dangerous"]),
                _ => {}
            }
        }
        if THROTTLE_CATEGORY.load(std::sync::atomic::Ordering::Relaxed) && !internal {
            categories.push("throttle");
        }
        let Ok(categories) = CString::new(categories.join(" ")) else { return false };
        set_categories(command, categories.as_ptr()) == raw::REDISMODULE_OK as c_int
    }
}

/// True once the `@throttle` ACL category exists (servers with
/// `RedisModule_AddACLCategory`).
static THROTTLE_CATEGORY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn add_throttle_category(ctx: Ctx) {
    // SAFETY: OnLoad context.
    let added = unsafe {
        raw::RedisModule_AddACLCategory
            .is_some_and(|add| add(ctx, ffi::cstr!("throttle")) == raw::REDISMODULE_OK as c_int)
    };
    THROTTLE_CATEGORY.store(added, std::sync::atomic::Ordering::Relaxed);
}

/// The `throttle_stats` INFO section.
unsafe extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    let _ = std::panic::catch_unwind(|| stats::info(ctx, &[(c"waiting_clients", blocked_clients::waiting() as u64)]));
}

/// Everything that can fail comes before the event subscriptions, the last
/// step: Redis 7.0 keeps a failed module's subscriptions (see `events`).
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    if let Err(message) = config::from_module_args(args) {
        ctx.log_warning(&message);
        return Status::Err;
    }
    if !config::register(ctx.ctx) {
        ctx.log_warning("throttle: could not register the module's configuration");
        return Status::Err;
    }
    // SAFETY: OnLoad context. IO errors: rdb_load sees truncated input as
    // an error instead of Redis aborting. No implicit signal: closing a key
    // opened for writing does not count as a change (WATCH, client-side
    // caching); the module signals the keys it changes.
    unsafe {
        if let Some(set_options) = raw::RedisModule_SetModuleOptions {
            let options =
                raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED;
            set_options(ctx.ctx, options as c_int);
        }
        // Replaces the crate's default INFO handler.
        if let Some(register_info) = raw::RedisModule_RegisterInfoFunc {
            register_info(ctx.ctx, Some(info));
        }
    }
    add_throttle_category(ctx.ctx);
    for command in COMMANDS {
        if !register(ctx.ctx, command) {
            ctx.log_warning(&format!("throttle: could not register {}", command.doc.name));
            return Status::Err;
        }
    }
    if config::CL_THROTTLE.load(std::sync::atomic::Ordering::Relaxed) && !register(ctx.ctx, &CL_THROTTLE) {
        ctx.log_warning("throttle: could not register CL.THROTTLE (another module has it: load with cl-throttle no)");
        return Status::Err;
    }
    #[cfg(debug_assertions)]
    if !DEBUG_COMMANDS.iter().all(|command| register(ctx.ctx, command)) {
        return Status::Err;
    }
    if !events::subscribe(ctx.ctx) {
        ctx.log_warning("throttle: could not subscribe to server events");
        return Status::Err;
    }
    blocked_clients::prepare(ctx.ctx);
    types::on_unlink(blocked_clients::key_removed);
    Status::Ok
}

redis_module! {
    name: "throttle",
    version: 1,
    allocator: (alloc::ModuleAlloc, alloc::ModuleAlloc),
    data_types: [FIXED_TYPE, SLIDING_TYPE, EXACT_TYPE, TOKEN_TYPE, LEAKY_TYPE, LEASE_TYPE],
    init: init,
}
