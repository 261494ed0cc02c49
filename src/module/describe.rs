//! `THROTTLE.INFO key [AT µs]`: what a limiter key holds, changing nothing.
//!
//! Each state reports what it keeps. The windows keep no `limit` (each call
//! brings it), so for them INFO reports the units `used` instead of
//! `remaining`; FIXED and SLIDING EXACT keep no `period` either, so their
//! `reset_after` is the key's TTL, which every change sets to it. FIXED and
//! SLIDING keep no time of their last change, so they report no
//! `updated_at`. The buckets keep their parameters and report them with
//! `remaining`. A TOKEN key CL.THROTTLE changed last reports redis-cell's
//! arguments and theoretical arrival time instead.
//!
//! A lease key reports its limit (the latest acquisition's), its holders
//! now and what is left under that limit, and lists each lease held: its
//! token, the instant it ends (Unix µs) and the ms left until then.

use std::ffi::CStr;

use super::ffi::{self, Ctx, Key, RString, Slot};
use super::types::{FixedState, Stored};
use crate::args::{parse_at, ArgError};
use crate::limiter::{
    Bucket, FixedWindow, LeakyBucket, Leases, Limiter, Penalized, SlidingLog, SlidingWindow, TokenBucket, TokenForm,
};

/// A field's name and value.
type Field = (&'static CStr, i64);

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The facts one state shows.
trait Describe: Limiter {
    const INFO_NAME: &'static [u8];
    /// The fields after `algorithm`, at `now_us`; `ttl_ms` is the key's TTL
    /// (-1 when it has none), its `reset_after` where the state cannot tell.
    fn fields(&self, now_us: u64, ttl_ms: i64) -> Vec<Field>;
}

impl Describe for FixedWindow {
    const INFO_NAME: &'static [u8] = b"fixed";
    fn fields(&self, _now_us: u64, ttl_ms: i64) -> Vec<Field> {
        vec![(c"window_start", int(self.window_start_us)), (c"used", int(self.count)), (c"reset_after", ttl_ms)]
    }
}

impl Describe for SlidingWindow {
    const INFO_NAME: &'static [u8] = b"sliding";
    fn fields(&self, now_us: u64, _ttl_ms: i64) -> Vec<Field> {
        let c = self.counts();
        let (used, reset_after_ms) = c.at(now_us);
        vec![
            (c"period_ms", int(c.period_us / 1000)),
            (c"window_start", int(c.window_start_us)),
            (c"previous", int(c.previous)),
            (c"current", int(c.current)),
            (c"used", int(used)),
            (c"reset_after", int(reset_after_ms)),
        ]
    }
}

impl Describe for SlidingLog {
    const INFO_NAME: &'static [u8] = b"sliding-exact";
    fn fields(&self, _now_us: u64, ttl_ms: i64) -> Vec<Field> {
        vec![
            (c"entries", int(self.entries().count() as u64)),
            (c"used", int(self.used)),
            (c"updated_at", int(self.updated_at_us)),
            (c"reset_after", ttl_ms),
        ]
    }
}

/// A bucket's fields: its parameters, and a `COST 0` peek with them.
fn bucket_fields<T: Limiter>(state: &T, bucket: &Bucket, now_us: u64) -> Vec<Field> {
    let Some(params) = bucket.last_params() else { return Vec::new() };
    // A peek: COST 0 changes nothing.
    let now = state.check(&params, 0, now_us);
    vec![
        (c"limit", int(params.limit())),
        (c"period_ms", int(params.period_us() / 1000)),
        (c"burst", int(params.burst())),
        (c"updated_at", int(bucket.updated_at_us)),
        (c"remaining", int(now.remaining)),
        (c"reset_after", int(now.reset_after_ms)),
    ]
}

impl Describe for TokenBucket {
    const INFO_NAME: &'static [u8] = b"token";
    fn fields(&self, now_us: u64, _ttl_ms: i64) -> Vec<Field> {
        match self.form() {
            TokenForm::Bucket(bucket) => bucket_fields(self, &bucket, now_us),
            // CL.THROTTLE's: its arguments as given, redis-cell's tat (Unix
            // µs like every instant here, rounded up from its ns), what a
            // peek with those arguments replies as `remaining` (redis-cell's),
            // and the ms until tat.
            TokenForm::Cell(cell) => {
                let (remaining, reset_after_ms) = cell.describe(now_us);
                vec![
                    (c"max_burst", cell.max_burst),
                    (c"count_per_period", cell.count),
                    (c"period", cell.period),
                    (c"tat", i64::try_from(cell.tat_ns.div_ceil(1000)).unwrap_or(i64::MAX)),
                    (c"remaining", remaining),
                    (c"reset_after", int(reset_after_ms)),
                ]
            }
        }
    }
}

impl Describe for LeakyBucket {
    const INFO_NAME: &'static [u8] = b"leaky";
    fn fields(&self, now_us: u64, _ttl_ms: i64) -> Vec<Field> {
        bucket_fields(self, &self.bucket(), now_us)
    }
}

pub(crate) fn info(ctx: Ctx, argv: &[RString]) {
    let (key_name, at_us) = match argv {
        [_, key] => (*key, None),
        [_, key, option, value] if ffi::bytes(*option).eq_ignore_ascii_case(b"AT") => {
            match parse_at(ffi::bytes(*value)) {
                Ok(at) => (*key, Some(at)),
                Err(e) => return ffi::reply_error(ctx, &e.message()),
            }
        }
        [_, _, option, _] => {
            let token = String::from_utf8_lossy(ffi::bytes(*option)).into_owned();
            return ffi::reply_error(ctx, &ArgError::UnknownOption(token).message());
        }
        _ => return ffi::reply_wrong_arity(ctx),
    };
    let now_us = at_us.unwrap_or_else(super::clock::now_us);
    let mut key = Key::open_read(ctx, key_name);
    let described = describe::<FixedWindow>(ctx, &mut key, now_us)
        || describe::<SlidingWindow>(ctx, &mut key, now_us)
        || describe::<SlidingLog>(ctx, &mut key, now_us)
        || describe::<TokenBucket>(ctx, &mut key, now_us)
        || describe::<LeakyBucket>(ctx, &mut key, now_us)
        || describe_leases(ctx, &mut key, now_us);
    if !described {
        match key.slot::<FixedState>(FixedState::redis_type()) {
            Slot::Empty => ffi::reply_null(ctx),
            _ => ffi::reply_error(ctx, ffi::WRONGTYPE),
        }
    }
}

/// Replies and returns true when the key holds an `L` state.
fn describe<L: Describe>(ctx: Ctx, key: &mut Key, now_us: u64) -> bool
where
    Penalized<L>: Stored,
{
    let ttl_ms = key.ttl_ms();
    let Slot::Mine(state) = key.slot::<Penalized<L>>(Penalized::<L>::redis_type()) else { return false };
    let mut fields = state.inner().fields(now_us, ttl_ms);
    if let Some(ban) = state.ban() {
        let left_us = ban.until_us.saturating_sub(now_us);
        fields.extend([
            (c"banned", int(left_us.div_ceil(1000))),
            (c"ban_length", int(ban.length_us / 1000)),
            (c"hits", int(ban.hits)),
        ]);
    }
    ffi::reply_map(ctx, fields.len() + 1);
    ffi::reply_simple(ctx, ffi::cstr!("algorithm"));
    ffi::reply_string(ctx, L::INFO_NAME);
    for (name, value) in fields {
        ffi::reply_simple(ctx, name.as_ptr());
        ffi::reply_integer(ctx, value);
    }
    true
}

/// Replies and returns true when the key holds leases. Ended leases,
/// still stored until the key next changes, are not shown.
fn describe_leases(ctx: Ctx, key: &mut Key, now_us: u64) -> bool {
    let Slot::Mine(leases) = key.slot::<Leases>(Leases::redis_type()) else { return false };
    let now_us = leases.effective(now_us);
    let live = leases.live(now_us);
    let limit = leases.limit();
    let now = leases.decision(limit, now_us, true);
    let fields: [Field; 5] = [
        (c"limit", int(limit)),
        (c"holders", int(live.len() as u64)),
        (c"remaining", int(now.remaining)),
        (c"updated_at", int(leases.updated_at_us())),
        (c"reset_after", int(now.reset_after_ms)),
    ];
    ffi::reply_map(ctx, fields.len() + 2);
    ffi::reply_simple(ctx, ffi::cstr!("algorithm"));
    ffi::reply_string(ctx, b"lease");
    for (name, value) in fields {
        ffi::reply_simple(ctx, name.as_ptr());
        ffi::reply_integer(ctx, value);
    }
    ffi::reply_simple(ctx, ffi::cstr!("leases"));
    ffi::reply_array(ctx, live.len());
    for lease in live {
        ffi::reply_array(ctx, 3);
        ffi::reply_string(ctx, &lease.token);
        ffi::reply_integer(ctx, int(lease.until_us));
        ffi::reply_integer(ctx, int((lease.until_us - now_us).div_ceil(1000)));
    }
    true
}
