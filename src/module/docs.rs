//! Command metadata for Redis 7.0+: arity, key specs (so cluster clients
//! route the calls and ACL key patterns apply) and COMMAND DOCS.

use std::ffi::{c_char, c_int, CString};
use std::ptr::{null, null_mut};

use redis_module::raw;

use super::ffi::Ctx;

/// One argument as COMMAND DOCS shows it.
pub(crate) struct ArgDoc {
    pub name: &'static str,
    pub kind: raw::RedisModuleCommandArgType,
    /// The option's keyword, for options.
    pub token: Option<&'static str>,
    pub optional: bool,
    pub multiple: bool,
}

pub(crate) struct CommandDoc {
    pub name: &'static str,
    pub summary: &'static str,
    pub complexity: &'static str,
    pub arity: c_int,
    pub args: &'static [ArgDoc],
    /// The key spec's flags for the one key at argument 1, or `None` for a
    /// command whose keys the module reports itself (getkeys-api).
    pub key_flags: Option<u32>,
}

/// Read, then updated in place: the THROTTLE commands.
pub(crate) const KEY_UPDATED: Option<u32> =
    Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE);
/// Only read.
pub(crate) const KEY_READ: Option<u32> = Some(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS);
/// Replaced whole: THROTTLE._LOAD.
pub(crate) const KEY_OVERWRITTEN: Option<u32> = Some(raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE);

const fn arg(name: &'static str, kind: raw::RedisModuleCommandArgType) -> ArgDoc {
    ArgDoc { name, kind, token: None, optional: false, multiple: false }
}

const fn option(token: &'static str, name: &'static str, kind: raw::RedisModuleCommandArgType) -> ArgDoc {
    ArgDoc { name, kind, token: Some(token), optional: true, multiple: false }
}

use raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER as INTEGER;
use raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY as KEY;
use raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN as PURE_TOKEN;
use raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING as STRING;

pub(crate) const KEY_ARG: ArgDoc = arg("key", KEY);
pub(crate) const LIMIT: ArgDoc = arg("limit", INTEGER);
pub(crate) const PERIOD: ArgDoc = arg("period", STRING);
pub(crate) const COST: ArgDoc = option("COST", "cost", INTEGER);
pub(crate) const AT: ArgDoc = option("AT", "unix-time-microseconds", INTEGER);
pub(crate) const BURST: ArgDoc = option("BURST", "burst", INTEGER);
pub(crate) const EXACT: ArgDoc = option("EXACT", "exact", PURE_TOKEN);
pub(crate) const FLOOR: ArgDoc = option("FLOOR", "floor", PURE_TOKEN);
pub(crate) const BLOCK: ArgDoc = option("BLOCK", "timeout-milliseconds", INTEGER);
pub(crate) const BAN: ArgDoc = option("BAN", "ban-period", STRING);
pub(crate) const RENEW: ArgDoc = option("RENEW", "renew", PURE_TOKEN);
pub(crate) const BACKOFF: ArgDoc = option("BACKOFF", "longest-ban-period", STRING);
pub(crate) const TALLY: ArgDoc = option("TALLY", "most-units-counted", INTEGER);
pub(crate) const FORCE: ArgDoc = option("FORCE", "force", PURE_TOKEN);
pub(crate) const NOW: ArgDoc = option("NOW", "now", PURE_TOKEN);
pub(crate) const DETAIL: ArgDoc = option("DETAIL", "detail", PURE_TOKEN);
pub(crate) const HOLDERS: ArgDoc = arg("limit", INTEGER);
pub(crate) const LEASE: ArgDoc = arg("lease", STRING);
pub(crate) const LEASE_ID: ArgDoc = option("ID", "token", STRING);
pub(crate) const LEASE_TOKEN: ArgDoc = arg("token", STRING);

/// Registers the metadata of an already created command. Redis copies
/// everything, so the temporary buffers are freed on return.
pub(crate) fn set_command_info(ctx: Ctx, doc: &CommandDoc) -> bool {
    // SAFETY: every pointer handed over points into buffers alive for the
    // call; the structs follow redismodule.h's layout (bindgen).
    unsafe {
        let (Some(get_command), Some(set_info)) = (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) else {
            // Before 7.0: no metadata API; the command still works.
            return true;
        };
        let Ok(name) = CString::new(doc.name) else { return false };
        let command = get_command(ctx, name.as_ptr());
        if command.is_null() {
            return false;
        }
        let mut strings: Vec<CString> = Vec::new();
        let mut keep = |s: &str| -> *const c_char {
            let c = CString::new(s).unwrap_or_default();
            let ptr = c.as_ptr();
            strings.push(c);
            ptr
        };
        let summary = keep(doc.summary);
        let complexity = keep(doc.complexity);
        let since = keep("1.0.0");
        let mut args: Vec<raw::RedisModuleCommandArg> = doc
            .args
            .iter()
            .map(|a| raw::RedisModuleCommandArg {
                name: keep(a.name),
                type_: a.kind,
                key_spec_index: if a.kind == KEY { 0 } else { -1 },
                token: a.token.map_or(null(), &mut keep),
                summary: null(),
                since: null(),
                flags: (if a.optional { raw::REDISMODULE_CMD_ARG_OPTIONAL } else { 0 }
                    | if a.multiple { raw::REDISMODULE_CMD_ARG_MULTIPLE } else { 0 }) as c_int,
                deprecated_since: null(),
                subargs: null_mut(),
                display_text: null(),
            })
            .collect();
        args.push(std::mem::zeroed());
        let mut key_specs = [std::mem::zeroed(), std::mem::zeroed()];
        if let Some(flags) = doc.key_flags {
            key_specs[0] = key_spec(flags);
        }
        let version = raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
        };
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary,
            complexity,
            since,
            history: null_mut(),
            tips: null(),
            arity: doc.arity,
            key_specs: key_specs.as_mut_ptr(),
            args: args.as_mut_ptr(),
        };
        set_info(command, &info) == raw::REDISMODULE_OK as c_int
    }
}

/// The one key, at argument 1.
fn key_spec(flags: u32) -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: null(),
        flags: u64::from(flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 { lastkey: 0, keystep: 1, limit: 0 },
        },
    }
}
