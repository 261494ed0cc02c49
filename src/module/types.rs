//! The five data types, one per algorithm (SLIDING's two modes apart), and
//! their callbacks. Every callback is total: loading validates through the
//! codec and refuses what it cannot prove sound.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::ffi::{self, cstr};
use crate::args::Algorithm;
use crate::codec::{Codec, DecodeError, WordSource, ENCODING_VERSION};
use crate::limiter::{
    Ban, FixedWindow, LeakyBucket, Leases, Limiter, Penalized, SlidingLog, SlidingWindow, TokenBucket,
};

/// The state each data type holds: an algorithm's state and the ban it
/// may be under.
pub(crate) type FixedState = Penalized<FixedWindow>;
pub(crate) type SlidingState = Penalized<SlidingWindow>;
pub(crate) type ExactState = Penalized<SlidingLog>;
pub(crate) type TokenState = Penalized<TokenBucket>;
pub(crate) type LeakyState = Penalized<LeakyBucket>;

/// What the module needs of a state to store it in a key.
pub(crate) trait Stored: Codec + Clone + Default + 'static {
    /// The type's name as `TYPE` shows it (exactly 9 characters).
    const NAME: &'static str;
    /// The byte that names the type in `THROTTLE._SET`.
    const TAG: u8;
    /// The keyspace event of a change propagated as a snapshot.
    const EVENT: *const std::ffi::c_char;
    fn redis_type() -> &'static RedisType;
    /// Bytes held outside the state itself.
    fn heap_bytes(&self) -> usize;
    /// The words DEBUG DIGEST-VALUE sums: the stored words, less the word
    /// that says a key holds no ban (a value's digest is the same as
    /// before bans were kept).
    fn digest_words(&self, out: &mut dyn FnMut(u64));
}

/// Bytes a state's ban takes, apart from the state.
fn ban_bytes<L: Limiter>(state: &Penalized<L>) -> usize {
    state.ban().map_or(0, |_| std::mem::size_of::<Ban>())
}

macro_rules! stored {
    ($state:ty, $static:ident, $name:literal, $tag:literal, $algorithm:expr, $heap:expr) => {
        pub(crate) static $static: RedisType = RedisType::new($name, ENCODING_VERSION, methods::<$state>());

        impl Stored for $state {
            const NAME: &'static str = $name;
            const TAG: u8 = $tag;
            const EVENT: *const std::ffi::c_char = event_name($algorithm);
            fn redis_type() -> &'static RedisType {
                &$static
            }
            fn heap_bytes(&self) -> usize {
                let heap: fn(&$state) -> usize = $heap;
                ban_bytes(self) + heap(self)
            }
            fn digest_words(&self, out: &mut dyn FnMut(u64)) {
                match self.ban() {
                    None => self.inner().encode(out),
                    Some(_) => self.encode(out),
                }
            }
        }
    };
}

stored!(FixedState, FIXED_TYPE, "thr-fixed", 1, Algorithm::Fixed, |_| 0);
stored!(SlidingState, SLIDING_TYPE, "thr-slide", 2, Algorithm::Sliding, |_| 0);
stored!(ExactState, EXACT_TYPE, "thr-exact", 3, Algorithm::Sliding, |state| {
    state.inner().capacity_words() * std::mem::size_of::<u32>()
});
stored!(TokenState, TOKEN_TYPE, "thr-token", 4, Algorithm::Token, |_| 0);
stored!(LeakyState, LEAKY_TYPE, "thr-leaky", 5, Algorithm::Leaky, |_| 0);

/// Leases (`THROTTLE.ACQUIRE`): a type of its own, changed only by the
/// lease commands and by `THROTTLE._LEASE`, their propagated form.
pub(crate) static LEASE_TYPE: RedisType = RedisType::new("thr-lease", ENCODING_VERSION, methods::<Leases>());

impl Stored for Leases {
    const NAME: &'static str = "thr-lease";
    const TAG: u8 = 6;
    const EVENT: *const std::ffi::c_char = cstr!("throttle.acquire");
    fn redis_type() -> &'static RedisType {
        &LEASE_TYPE
    }
    fn heap_bytes(&self) -> usize {
        Leases::heap_bytes(self)
    }
    fn digest_words(&self, out: &mut dyn FnMut(u64)) {
        self.encode(out)
    }
}

/// The keyspace event of a change made by `algorithm`'s command.
pub(crate) const fn event_name(algorithm: Algorithm) -> *const std::ffi::c_char {
    match algorithm {
        Algorithm::Fixed => cstr!("throttle.fixed"),
        Algorithm::Sliding => cstr!("throttle.sliding"),
        Algorithm::Token => cstr!("throttle.token"),
        Algorithm::Leaky => cstr!("throttle.leaky"),
    }
}

const fn methods<T: Stored>() -> raw::RedisModuleTypeMethods {
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load::<T>),
        rdb_save: Some(rdb_save::<T>),
        aof_rewrite: Some(aof_rewrite::<T>),
        mem_usage: Some(mem_usage::<T>),
        digest: Some(digest::<T>),
        free: Some(free::<T>),
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: Some(copy::<T>),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlinked),
        copy2: None,
    }
}

/// Reads words from an RDB stream or a RESTORE payload, stopping at the
/// first IO error (the module handles IO errors itself).
struct RdbWords(*mut raw::RedisModuleIO);

impl WordSource for RdbWords {
    fn word(&mut self) -> Result<u64, DecodeError> {
        raw::load_unsigned(self.0).map_err(|_| DecodeError::Truncated)
    }
}

/// Runs a callback body, turning a panic into `fallback`: a callback must
/// never unwind into Redis.
fn guarded<R>(fallback: R, body: impl FnOnce() -> R) -> R {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        #[cfg(debug_assertions)]
        if PANIC_IN_NEXT_CALLBACK.swap(false, std::sync::atomic::Ordering::Relaxed) {
            panic!("THROTTLE._PANIC: test trigger in a type callback");
        }
        body()
    }))
    .unwrap_or(fallback)
}

/// Debug builds only: `THROTTLE._PANIC CALLBACK` makes the next type
/// callback panic, to prove the panic is contained.
#[cfg(debug_assertions)]
pub(crate) static PANIC_IN_NEXT_CALLBACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

unsafe extern "C" fn rdb_load<T: Stored>(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guarded(std::ptr::null_mut(), || match T::decode(encver, &mut RdbWords(rdb)) {
        Ok(state) => Box::into_raw(Box::new(state)).cast(),
        Err(_) => std::ptr::null_mut(),
    })
}

/// Runs a callback that writes a value out, where a panic midway would
/// leave half a value behind (a corrupt RDB or DUMP payload, a key missing
/// from an AOF rewrite) with nothing to tell Redis: the process aborts
/// instead. In BGSAVE or BGREWRITEAOF that is the forked child, whose
/// failure Redis reports and survives; the old file stays.
fn guarded_or_abort(io: *mut raw::RedisModuleIO, body: impl FnOnce()) {
    if guarded(false, || {
        body();
        true
    }) {
        return;
    }
    // SAFETY: a plain log call on the callback's IO handle.
    unsafe {
        if let Some(log) = raw::RedisModule_LogIOError {
            log(io, cstr!("warning"), cstr!("throttle: internal error while writing a value; aborting"));
        }
    }
    std::process::abort();
}

unsafe extern "C" fn rdb_save<T: Stored>(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded_or_abort(rdb, || {
        if let Some(state) = value.cast::<T>().as_ref() {
            state.encode(&mut |w| raw::save_unsigned(rdb, w));
        }
    })
}

/// Rewrites the key as one `THROTTLE._LOAD key type version word...` call.
unsafe extern "C" fn aof_rewrite<T: Stored>(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guarded_or_abort(aof, || {
        let Some(state) = value.cast::<T>().as_ref() else { return };
        let (Some(create), Some(free), Some(emit)) =
            (raw::RedisModule_CreateString, raw::RedisModule_FreeString, raw::RedisModule_EmitAOF)
        else {
            return;
        };
        let mut words = Vec::new();
        state.encode(&mut |w| {
            let text = w.to_string();
            words.push(create(std::ptr::null_mut(), text.as_ptr().cast(), text.len()));
        });
        let name = format!("{}\0", T::NAME);
        emit(
            aof,
            cstr!("THROTTLE._LOAD"),
            cstr!("sclv"),
            key,
            name.as_ptr(),
            i64::from(ENCODING_VERSION),
            words.as_mut_ptr(),
            words.len(),
        );
        for w in words {
            free(std::ptr::null_mut(), w);
        }
    })
}

unsafe extern "C" fn mem_usage<T: Stored>(value: *const c_void) -> usize {
    guarded(0, || value.cast::<T>().as_ref().map_or(0, |s| std::mem::size_of::<T>() + s.heap_bytes()))
}

unsafe extern "C" fn digest<T: Stored>(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guarded((), || {
        let (Some(state), Some(add), Some(end)) =
            (value.cast::<T>().as_ref(), raw::RedisModule_DigestAddLongLong, raw::RedisModule_DigestEndSequence)
        else {
            return;
        };
        state.digest_words(&mut |w| add(md, w as i64));
        end(md);
    })
}

unsafe extern "C" fn free<T: Stored>(value: *mut c_void) {
    if !value.is_null() {
        drop(Box::from_raw(value.cast::<T>()));
    }
}

/// Who hears that a value of ours left its key: waiting, which sets it at
/// load. A function pointer, so that the types need nothing of the waiting
/// machinery that needs them.
static ON_UNLINK: OnceLock<fn(i32, &[u8])> = OnceLock::new();

pub(crate) fn on_unlink(hook: fn(i32, &[u8])) {
    let _ = ON_UNLINK.set(hook);
}

/// A value of ours leaves its key (DEL, UNLINK, an overwrite, RENAME,
/// MOVE, RESTORE ... REPLACE, MIGRATE, expiry, eviction). Redis calls this
/// for our types only, so other keys cost nothing.
unsafe extern "C" fn unlinked(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
    guarded((), || {
        let (Some(hook), Some(name), Some(db)) =
            (ON_UNLINK.get(), raw::RedisModule_GetKeyNameFromOptCtx, raw::RedisModule_GetDbIdFromOptCtx)
        else {
            return;
        };
        let key = name(ctx);
        if !key.is_null() {
            hook(db(ctx), ffi::bytes(key.cast_mut()));
        }
    })
}

unsafe extern "C" fn copy<T: Stored>(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    guarded(std::ptr::null_mut(), || match value.cast::<T>().as_ref() {
        Some(state) => Box::into_raw(Box::new(state.clone())).cast(),
        None => std::ptr::null_mut(),
    })
}

/// `THROTTLE._LOAD key type version word...`: sets a key from its stored
/// form. The AOF rewrite writes it; the decoder validates it like an RDB
/// value, so a hand-made call cannot plant an unsound state.
pub(crate) fn load_command(ctx: ffi::Ctx, argv: &[ffi::RString]) {
    let [_, key, type_name, version, words @ ..] = argv else {
        return ffi::reply_wrong_arity(ctx);
    };
    let version = crate::args::parse_u64(ffi::bytes(*version)).and_then(|v| i32::try_from(v).ok()).unwrap_or(-1);
    // Every word must be a number: a bad one is an error wherever it is,
    // not the end of the input (which let trailing garbage through).
    let Some(words) = words.iter().map(|w| crate::args::parse_u64(ffi::bytes(*w))).collect::<Option<Vec<u64>>>() else {
        return ffi::reply_error(ctx, "ERR invalid THROTTLE state");
    };
    let mut words = words.into_iter();
    let result = match ffi::bytes(*type_name) {
        b"thr-fixed" => load_into::<FixedState>(ctx, *key, version, &mut words, None),
        b"thr-slide" => load_into::<SlidingState>(ctx, *key, version, &mut words, None),
        b"thr-exact" => load_into::<ExactState>(ctx, *key, version, &mut words, None),
        b"thr-token" => load_into::<TokenState>(ctx, *key, version, &mut words, None),
        b"thr-leaky" => load_into::<LeakyState>(ctx, *key, version, &mut words, None),
        b"thr-lease" => load_into::<Leases>(ctx, *key, version, &mut words, None),
        _ => Err("ERR unknown THROTTLE type"),
    };
    match result {
        Ok(()) => ffi::reply_simple_ok(ctx),
        Err(message) => ffi::reply_error(ctx, message),
    }
}

/// Sets the key to the state the words hold, and, with `expire_at_ms`, its
/// expiry to that instant, the master's (an instant already past expires
/// the key, as Redis's own `PXAT` does).
fn load_into<T: Stored>(
    ctx: ffi::Ctx,
    key: ffi::RString,
    version: i32,
    words: &mut dyn Iterator<Item = u64>,
    expire_at_ms: Option<u64>,
) -> Result<(), &'static str> {
    let state = T::decode(version, &mut WordsLeft(words)).map_err(|_| "ERR invalid THROTTLE state")?;
    if words.next().is_some() {
        return Err("ERR invalid THROTTLE state");
    }
    let mut key = ffi::Key::open(ctx, key);
    match (key.slot::<T>(T::redis_type()), expire_at_ms) {
        // A replica's key of the same type takes the new state in place:
        // no value to free and make again for each change.
        (ffi::Slot::Mine(stored), Some(_)) => *stored = state,
        _ => key.set(T::redis_type(), state).then_some(()).ok_or("ERR could not store the state")?,
    }
    match expire_at_ms {
        Some(at_ms) => {
            key.set_expire_at_ms(at_ms);
            key.changed(T::EVENT, false);
        }
        None => key.changed(cstr!("throttle._load"), false),
    }
    // SAFETY: plain call on the command's context.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplicateVerbatim {
            f(ctx);
        }
    }
    Ok(())
}

struct WordsLeft<'a>(&'a mut dyn Iterator<Item = u64>);

impl WordSource for WordsLeft<'_> {
    fn word(&mut self) -> Result<u64, DecodeError> {
        self.0.next().ok_or(DecodeError::Truncated)
    }
}

/// A state as `THROTTLE._SET` carries it, with the instant it expires: its
/// type's tag, the encoding version, its words, then the instant (Unix
/// ms), each word little-endian. Made on the stack: replicating a change
/// allocates nothing for it.
pub(crate) struct Snapshot {
    bytes: [u8; Snapshot::CAPACITY],
    len: usize,
}

impl Snapshot {
    /// Room for the largest fixed-size state (a word that says it holds
    /// no ban, then the buckets' six words) and the expiry.
    const CAPACITY: usize = 2 + 8 * 7 + 8;

    pub(crate) fn of<T: Stored>(state: &T, expire_at_ms: u64) -> Option<Snapshot> {
        let mut snapshot = Snapshot { bytes: [0; Snapshot::CAPACITY], len: 2 };
        snapshot.bytes[0] = T::TAG;
        snapshot.bytes[1] = ENCODING_VERSION as u8;
        let mut fits = true;
        let mut push = |w: u64| match snapshot.bytes.get_mut(snapshot.len..snapshot.len + 8) {
            Some(slot) => {
                slot.copy_from_slice(&w.to_le_bytes());
                snapshot.len += 8;
            }
            None => fits = false,
        };
        state.encode(&mut push);
        push(expire_at_ms);
        fits.then_some(snapshot)
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

/// `THROTTLE._SET key <snapshot>`: sets a key to a state expiring at the
/// master's instant, both in the [`Snapshot`]. How a change reaches
/// replicas and the AOF: its effect, exactly, rather than a call to run
/// again. The state is validated like a RESTORE payload. The form before
/// the expiry joined the snapshot, `THROTTLE._SET key <state> <unix-ms>`,
/// still applies (AOF files written by earlier versions).
pub(crate) fn set_command(ctx: ffi::Ctx, argv: &[ffi::RString]) {
    let (key, state, expire_at_ms) = match argv {
        [_, key, snapshot] => match ffi::bytes(*snapshot) {
            [state @ .., a, b, c, d, e, f, g, h] => (key, state, u64::from_le_bytes([*a, *b, *c, *d, *e, *f, *g, *h])),
            _ => return ffi::reply_error(ctx, "ERR invalid THROTTLE state"),
        },
        [_, key, state, expire_at] => match crate::args::parse_u64(ffi::bytes(*expire_at)) {
            Some(at_ms) => (key, ffi::bytes(*state), at_ms),
            None => return ffi::reply_error(ctx, "ERR invalid expiry"),
        },
        _ => return ffi::reply_wrong_arity(ctx),
    };
    // Refused rather than clamped: a master never sends a later one.
    if expire_at_ms > ffi::LATEST_EXPIRY_MS {
        return ffi::reply_error(ctx, "ERR invalid expiry");
    }
    let (tag, version, body) = match state {
        [tag, version, body @ ..] if body.len() % 8 == 0 => (*tag, i32::from(*version), body),
        _ => return ffi::reply_error(ctx, "ERR invalid THROTTLE state"),
    };
    let words = &mut body.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
    let at = Some(expire_at_ms);
    let result = match tag {
        FixedState::TAG => load_into::<FixedState>(ctx, *key, version, words, at),
        SlidingState::TAG => load_into::<SlidingState>(ctx, *key, version, words, at),
        ExactState::TAG => load_into::<ExactState>(ctx, *key, version, words, at),
        TokenState::TAG => load_into::<TokenState>(ctx, *key, version, words, at),
        LeakyState::TAG => load_into::<LeakyState>(ctx, *key, version, words, at),
        _ => Err("ERR unknown THROTTLE type"),
    };
    match result {
        Ok(()) => ffi::reply_simple_ok(ctx),
        Err(message) => ffi::reply_error(ctx, message),
    }
}

/// `THROTTLE._LEASE key <change>`: applies a change to a key's leases as
/// the master made it (a [`crate::args::PackedEffect`]): how lease changes
/// reach replicas and the AOF, tokens and ends included, never a call they
/// would decide again. Internal and admin-only, like `THROTTLE._SET`.
pub(crate) fn lease_command(ctx: ffi::Ctx, argv: &[ffi::RString]) {
    let [_, key, packed] = argv else {
        return ffi::reply_wrong_arity(ctx);
    };
    let result = crate::args::PackedEffect::unpack(ffi::bytes(*packed))
        .map_err(super::reply::CommandError::from)
        .and_then(|(effect, clock_us)| super::apply::apply_lease_effect(ctx, *key, &effect, clock_us));
    match result {
        Ok(()) => {
            // SAFETY: plain call on the command's context.
            unsafe {
                if let Some(f) = raw::RedisModule_ReplicateVerbatim {
                    f(ctx);
                }
            }
            ffi::reply_simple_ok(ctx)
        }
        Err(e) => e.reply(ctx),
    }
}
