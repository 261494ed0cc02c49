//! redis-cell's `CL.THROTTLE key max_burst count_per_period period [quantity]`,
//! free of Redis: its arithmetic, exactly, for every input it answers.
//!
//! # What redis-cell does (v0.4.0 and later, through v0.5.0)
//!
//! `src/lib.rs` parses the four numbers with Rust's `str::parse::<i64>` (an
//! optional `+` or `-`, digits, no spaces) and answers a wrong argument count
//! with a usage text. It accepts every `i64`, of either sign. `src/cell/mod.rs`
//! runs GCRA on `time::Duration`s (whole nanoseconds), in a release build
//! (64-bit integer overflow wraps):
//!
//! - emission interval `T = ((period * 10^9) as f64 / count as f64) as i64`
//!   ns (a float division, truncated towards zero, saturated at `i64::MAX`
//!   and `MIN`); `count == 0`, `period == 0` or `T == 0` is refused ("Zero
//!   rates are not supported"), whatever the other arguments;
//! - limit `L = max_burst + 1`, tolerance `τ = T * L` (both `i64`, wrapping);
//! - `tat` is the stored theoretical arrival time (`now` when missing);
//!   `increment = T * quantity` (`i64`, wrapping); `new_tat = max(tat, now) +
//!   increment`;
//! - limited when `new_tat - τ > now`; then nothing is stored, `retry_after
//!   = new_tat - τ - now` only when `increment <= τ` (else it stays -1 s),
//!   and `ttl = tat - now`;
//! - otherwise `new_tat` is stored with a TTL of `ttl = new_tat - now`,
//!   truncated to whole milliseconds; Redis refuses a negative TTL other
//!   than -1 ms (which removes the TTL), so a call that lands 2 ms or more
//!   before `now` (a refund past the idle state, a negative rate) answers
//!   "Error while setting key expire";
//! - `remaining = (whole_µs(τ - ttl) as f64 / whole_µs(T) as f64) as i64`
//!   when `τ - ttl > -T`, else 0 (a `T` under 1 µs divides by zero: the
//!   infinity saturates to `i64::MAX`); `reset_after = ttl`;
//! - both durations go out as `secs = d.as_seconds_f64() as i64`, plus one
//!   when `d.subsec_milliseconds() > 0`: a ceiling taken after truncating to
//!   whole milliseconds (1.0004 s answers 1); `retry_after` is -1 when
//!   admitted. The reply is `[limited, L, remaining, retry_after,
//!   reset_after]`.
//! - Errors read `Cell error: Store error: <text>` (the harness in
//!   `src/redis/mod.rs` wraps `GenericError`'s display).
//!
//! # The state
//!
//! What redis-cell keeps is `tat` alone, and so does this: a TOKEN key
//! written by CL.THROTTLE holds a [`CellState`], redis-cell's `tat` in Unix
//! nanoseconds with the arguments of the call that stored it (for
//! THROTTLE.INFO). Every call brings its own arguments and runs redis-cell's
//! arithmetic on that `tat`, so a reconfigured key keeps its debt in time,
//! as in redis-cell. A native TOKEN bucket read by CL.THROTTLE counts as the
//! `tat` at which it is full again ([`bucket_tat_ns`]); a `tat` read by
//! THROTTLE.TOKEN as the bucket whose refill takes until `tat` at the
//! call's rate ([`CellState::bucket_at`]): with `THROTTLE.TOKEN key count
//! <period>s BURST max_burst+1` the two are the same bucket. Both round
//! towards the larger debt.
//!
//! Everything is computed in `i128` nanoseconds, where nothing overflows,
//! and redis-cell's three float steps are emulated bit for bit in integers
//! ([`float_div_trunc`], [`cell_seconds`]): the replies are redis-cell's own.
//!
//! # Where it differs from redis-cell
//!
//! Where redis-cell's 64-bit arithmetic wraps (its answer is then garbage,
//! and differs between a debug and a release build):
//!
//! - `max_burst + 1` or `T * (max_burst + 1)` beyond `i64` (a full bucket
//!   that takes more than 2^63 ns, about 292 years): an error naming
//!   `max_burst` ([`CellError::MaxBurst`]).
//! - `T * quantity` beyond `i64`: the exact product. A quantity that big is
//!   limited with `retry_after` -1 (more than the bucket holds), or, for a
//!   refund, gets redis-cell's "Error while setting key expire"; redis-cell
//!   would run the wrapped product, e.g. `quantity` `i64::MAX` at 1 per
//!   second as a refund of one token.
//!
//! Elsewhere the replies are redis-cell's; what differs is around them:
//!
//! - Time is the server's clock in microseconds (redis-cell reads
//!   nanoseconds; `now` here is a whole microsecond).
//! - The key lives until its `tat` (its expiry is `tat` rounded down to the
//!   millisecond, which Redis keeps the key through); a `tat` already passed
//!   counts as a missing key. redis-cell's TTL is truncated to whole
//!   milliseconds from the moment of the call, so its key can vanish up to
//!   2 ms before `tat`; and after a call that lands within 2 ms before `now`
//!   its key keeps a past `tat` without a TTL, which a later limited call
//!   reports as a negative `reset_after`. Here such a key is idle: deleted.
//! - Every call that gets an error changes nothing. redis-cell's "Error
//!   while setting key expire" comes after it stored the new `tat`, which
//!   leaves its key idle, without a TTL.
//! - A peek (`quantity` 0) or a limited call writes and propagates nothing;
//!   redis-cell writes the same `tat` again (or, on a missing key, `now`).
//! - Errors carry the `ERR` code before redis-cell's text (redis-cell's
//!   code is `Cell`); a key of another type gets WRONGTYPE and a non-UTF-8
//!   argument the parse error, where redis-cell aborts the server. A TOKEN
//!   key under a ban (THROTTLE.TOKEN's penalties, which redis-cell does
//!   not have) gets an error too.
//! - redis-cell v0.3.1 and older rounded the seconds differently (v0.3.0:
//!   truncated; v0.3.1: plus one whenever the duration is at least 1 ms,
//!   so 2 s answered 3). This follows v0.4.0 and later.

use super::{ceil_div, Bucket, Params, MAX_TIME_US};

const NS_PER_US: i128 = 1_000;
const NS_PER_MS: i128 = 1_000_000;
const NS_PER_S: i128 = 1_000_000_000;

/// The latest `tat` a state holds: a call's time is at most [`MAX_TIME_US`],
/// and an admitted call stores at most `now + τ`, with `τ < 2^63` ns.
pub const MAX_TAT_NS: u128 = MAX_TIME_US as u128 * NS_PER_US as u128 + i64::MAX as u128;

/// Why a call gets an error reply; it changes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CellError {
    /// Not 4 or 5 arguments after the command name.
    Usage,
    /// An argument that `str::parse::<i64>` refuses, as given.
    NotInteger(String),
    /// `count` or `period` is 0, or the emission interval truncates to 0 ns.
    ZeroRate,
    /// The call would land 2 ms or more before now (a refund past the idle
    /// state, a negative rate): redis-cell fails to set the key's TTL.
    SetExpire,
    /// Ours: `max_burst + 1`, or the full bucket's time `T * (max_burst +
    /// 1)`, beyond 64 bits, where redis-cell's arithmetic wraps.
    MaxBurst,
}

impl CellError {
    /// The error reply, `ERR` code first, then redis-cell's own words (for
    /// its errors) exactly as it sends them after its `-`.
    pub fn message(&self) -> String {
        match self {
            CellError::Usage => cell_text(USAGE),
            CellError::NotInteger(arg) => cell_text(&format!("Couldn't parse as integer: {arg}")),
            CellError::ZeroRate => cell_text("Zero rates are not supported"),
            CellError::SetExpire => cell_text("Error while setting key expire"),
            CellError::MaxBurst => "ERR invalid max_burst: (max_burst + 1) * period / count_per_period must stay \
                within 2^63 ns (about 292 years), where redis-cell's arithmetic wraps"
                .into(),
        }
    }
}

const USAGE: &str = "Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]";

/// redis-cell's error text as it reaches the client: its harness wraps the
/// message, hands Redis a C string (cut at the first NUL), and Redis trims
/// trailing and replaces inner CR/LF with spaces.
fn cell_text(message: &str) -> String {
    let text = format!("Cell error: Store error: {message}");
    let text = text.split('\0').next().unwrap_or_default();
    let text = text.trim_end_matches(['\r', '\n']);
    let mut out = String::with_capacity(text.len() + 4);
    out.push_str("ERR ");
    out.extend(text.chars().map(|c| if c == '\r' || c == '\n' { ' ' } else { c }));
    out
}

/// One argument as redis-cell reads it: `str::parse::<i64>`.
pub fn parse_integer(arg: &[u8]) -> Result<i64, CellError> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| CellError::NotInteger(String::from_utf8_lossy(arg).into_owned()))
}

/// redis-cell's `max_burst count period`, with the quantities its GCRA
/// derives from them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellQuota {
    max_burst: i64,
    count: i64,
    period: i64,
    /// `T`, the emission interval in ns, as redis-cell's float division
    /// gives it; never 0.
    emission_ns: i64,
    /// `L = max_burst + 1`.
    limit: i64,
    /// `τ = T * L` in ns.
    tolerance_ns: i64,
}

impl CellQuota {
    /// Checks in redis-cell's order (its zero-rate error first), then where
    /// its arithmetic would wrap.
    pub fn new(max_burst: i64, count: i64, period: i64) -> Result<CellQuota, CellError> {
        let period_ns = i128::from(period) * NS_PER_S;
        if count == 0 || period_ns == 0 {
            return Err(CellError::ZeroRate);
        }
        let emission_ns = float_div_trunc(period_ns, i128::from(count));
        if emission_ns == 0 {
            return Err(CellError::ZeroRate);
        }
        let limit = max_burst.checked_add(1).ok_or(CellError::MaxBurst)?;
        let tolerance_ns = emission_ns.checked_mul(limit).ok_or(CellError::MaxBurst)?;
        Ok(CellQuota { max_burst, count, period, emission_ns, limit, tolerance_ns })
    }

    pub fn max_burst(&self) -> i64 {
        self.max_burst
    }

    pub fn count(&self) -> i64 {
        self.count
    }

    pub fn period(&self) -> i64 {
        self.period
    }

    /// redis-cell's emission interval in nanoseconds.
    pub fn emission_ns(&self) -> i64 {
        self.emission_ns
    }

    /// `max_burst + 1`.
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// `T * (max_burst + 1)` in nanoseconds.
    pub fn tolerance_ns(&self) -> i64 {
        self.tolerance_ns
    }
}

/// What a TOKEN key written by CL.THROTTLE holds: redis-cell's `tat`, and
/// the arguments of the call that stored it (which only THROTTLE.INFO
/// reads: every call brings its own).
///
/// Invariants (the codec checks them): `0 < tat_ns <= MAX_TAT_NS`, and the
/// three arguments make a [`CellQuota`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellState {
    /// The theoretical arrival time, Unix ns: the bucket is full again then.
    pub tat_ns: u128,
    pub max_burst: i64,
    pub count: i64,
    pub period: i64,
}

impl CellState {
    /// The state if its fields hold the invariants.
    pub fn new(tat_ns: u128, max_burst: i64, count: i64, period: i64) -> Option<CellState> {
        let ok = tat_ns > 0 && tat_ns <= MAX_TAT_NS && CellQuota::new(max_burst, count, period).is_ok();
        ok.then_some(CellState { tat_ns, max_burst, count, period })
    }

    /// The arguments it was stored with.
    pub fn quota(&self) -> Option<CellQuota> {
        CellQuota::new(self.max_burst, self.count, self.period).ok()
    }

    /// The native bucket THROTTLE.TOKEN with `params` sees at `now_us`: the
    /// debt `tat - now` kept in time, in the call's units (rounded up, and
    /// at most an empty bucket).
    pub fn bucket_at(&self, params: &Params, now_us: u64) -> Bucket {
        let debt_ns = self.tat_ns.saturating_sub(u128::from(now_us) * NS_PER_US as u128);
        let capacity = u128::from(params.burst()) * u128::from(params.period_us());
        // debt_ns < 2^66 and limit <= 10^15 < 2^50: the product fits.
        let level = ceil_div(debt_ns * u128::from(params.limit()), NS_PER_US as u128).min(capacity);
        if level == 0 {
            return Bucket::default();
        }
        Bucket {
            level,
            updated_at_us: now_us,
            limit: params.limit(),
            period_us: params.period_us(),
            burst: params.burst(),
        }
    }

    /// What THROTTLE.INFO shows at `now_us`: `remaining` as a peek with the
    /// stored arguments replies it, and the ms until `tat`, rounded up.
    pub fn describe(&self, now_us: u64) -> (i64, u64) {
        let now_ns = i128::from(now_us) * NS_PER_US;
        let tat = i128::try_from(self.tat_ns).unwrap_or(i128::MAX);
        let remaining = match self.quota() {
            Some(quota) => throttle(Some(tat), &quota, 0, now_ns).reply.map_or(0, |r| r.remaining),
            None => 0,
        };
        let reset_after_ms = u64::try_from(ceil_div(u128::try_from(tat - now_ns).unwrap_or(0), NS_PER_MS as u128));
        (remaining, reset_after_ms.unwrap_or(u64::MAX))
    }
}

/// The `tat` of a native TOKEN bucket: when it is full again at its own
/// rate, in Unix ns, rounded up (`None` when it is idle).
pub fn bucket_tat_ns(bucket: &Bucket) -> Option<i128> {
    if bucket.period_us == 0 || bucket.level == 0 {
        return None;
    }
    // level <= burst * period < 2^98, so level * 1000 fits.
    let debt_ns = ceil_div(bucket.level * NS_PER_US as u128, u128::from(bucket.limit.max(1)));
    let tat = u128::from(bucket.updated_at_us) * NS_PER_US as u128 + debt_ns;
    i128::try_from(tat).ok()
}

/// redis-cell's reply, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellReply {
    pub limited: bool,
    /// `max_burst + 1`.
    pub limit: i64,
    pub remaining: i64,
    /// Seconds; -1 when admitted, or when the quantity exceeds the limit.
    pub retry_after: i64,
    /// Seconds.
    pub reset_after: i64,
}

impl CellReply {
    pub fn to_array(&self) -> [i64; 5] {
        [i64::from(self.limited), self.limit, self.remaining, self.retry_after, self.reset_after]
    }
}

/// What the call does to the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing: no write, no TTL, nothing to propagate.
    None,
    /// The key holds this `tat` (Unix ns, later than now) from now on.
    Store(u128),
    /// The bucket is idle: the key, if there is one, goes.
    Delete,
}

/// The answer to one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Result<CellReply, CellError>,
    pub change: Change,
}

/// Runs `CL.THROTTLE` at `now_ns` on the key's `tat` (`None` for a missing
/// key). redis-cell's GCRA, in `i128`: `tat < 2^66` and every `i64`
/// product of the call fit, so nothing overflows.
pub fn throttle(tat: Option<i128>, quota: &CellQuota, quantity: i64, now_ns: i128) -> Outcome {
    let t = i128::from(quota.emission_ns);
    let tolerance = i128::from(quota.tolerance_ns);
    // A tat already passed is a key that has expired.
    let tat = tat.filter(|tat| *tat > now_ns).unwrap_or(now_ns);
    let increment = t * i128::from(quantity);
    let new_tat = tat + increment;
    let diff = now_ns - (new_tat - tolerance);
    let (limited, ttl, retry, change) = if diff < 0 {
        let retry = (increment <= tolerance).then_some(-diff);
        (true, tat - now_ns, retry, Change::None)
    } else {
        let ttl = new_tat - now_ns;
        // `whole_milliseconds` truncates; Redis takes -1 (no TTL) and up.
        if ttl / NS_PER_MS < -1 {
            return Outcome { reply: Err(CellError::SetExpire), change: Change::None };
        }
        let change = match u128::try_from(new_tat) {
            _ if quantity == 0 => Change::None,
            Ok(new_tat) if ttl > 0 => Change::Store(new_tat),
            _ => Change::Delete,
        };
        (false, ttl, None, change)
    };
    let next = tolerance - ttl;
    let remaining = if next > -t { float_div_trunc(next / NS_PER_US, t / NS_PER_US) } else { 0 };
    let reply = CellReply {
        limited,
        limit: quota.limit,
        remaining,
        retry_after: retry.map_or(-1, cell_seconds),
        reset_after: cell_seconds(ttl),
    };
    Outcome { reply: Ok(reply), change }
}

/// A duration in whole seconds as redis-cell replies it:
/// `d.as_seconds_f64() as i64`, plus one if `d.subsec_milliseconds() > 0`.
/// `as_seconds_f64` is `seconds as f64 + nanos as f64 / 1e9`, whose two
/// roundings can carry into the next second above 2^24 s; emulated exactly
/// below 2^44 s (the durations here stay below 2^36 s), saturated beyond.
pub fn cell_seconds(ns: i128) -> i64 {
    let magnitude = ns.unsigned_abs();
    let seconds = magnitude / NS_PER_S as u128;
    let nanos = magnitude % NS_PER_S as u128;
    let whole = i64::try_from(float_seconds_trunc(seconds, nanos)).unwrap_or(i64::MAX);
    if ns < 0 {
        // Negative: both parts are negative and truncate towards zero;
        // `subsec_milliseconds` is not positive.
        -whole
    } else {
        whole.saturating_add(i64::from(nanos >= NS_PER_MS as u128))
    }
}

/// `(seconds as f64 + nanos as f64 / 1e9) as i64` for `nanos < 10^9`.
fn float_seconds_trunc(seconds: u128, nanos: u128) -> u128 {
    // Exact doubles at a scale of 2^83: the fraction's double is at least
    // 2^-30, so scaled it has all 53 bits integral; seconds below 2^44 keep
    // the sum within u128.
    const SCALE: u32 = 83;
    if nanos == 0 || seconds >= 1 << 44 {
        return seconds;
    }
    let fraction = nearest_double(nanos << SCALE, NS_PER_S as u128);
    let sum = nearest_double((seconds << SCALE) + fraction, 1);
    sum >> SCALE
}

/// The double nearest to `n / d` (ties to even), as an integer: correct
/// whenever `n / d >= 2^52` (or `n == 0`), where every double is an integer.
/// Callers scale by a power of two to get there.
pub(crate) fn nearest_double(n: u128, d: u128) -> u128 {
    if d == 0 {
        return u128::MAX;
    }
    let (q, r) = (n / d, n % d);
    let bits = u128::BITS - q.leading_zeros();
    if bits <= 53 {
        // Round to an integer: compare the remainder with half of d.
        let up = match r.cmp(&(d - r)) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => q & 1 == 1,
        };
        return q + u128::from(up);
    }
    let shift = bits - 53;
    let (mantissa, up) = round_bits(q, shift, r > 0);
    (mantissa + u128::from(up)) << shift
}

/// `q` without its low `shift` bits (`shift >= 1`), and whether to round
/// that up to nearest, ties to even; `sticky`: something nonzero lies below
/// `q`'s last bit.
fn round_bits(q: u128, shift: u32, sticky: bool) -> (u128, bool) {
    let unit = 1u128 << shift;
    let (mantissa, low, half) = (q >> shift, q & (unit - 1), unit >> 1);
    let up = match low.cmp(&half) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => sticky || mantissa & 1 == 1,
    };
    (mantissa, up)
}

/// `x as f64` for `x > 0`: `(m, e)` with `x ≈ m * 2^e`, `m` in `[2^52,
/// 2^53)`, rounded to nearest, ties to even.
fn to_double(x: u128) -> (u128, i32) {
    let bits = (u128::BITS - x.leading_zeros()) as i32;
    if bits <= 53 {
        return (x << (53 - bits), bits - 53);
    }
    let shift = (bits - 53) as u32;
    let (mantissa, up) = round_bits(x, shift, false);
    let mantissa = mantissa + u128::from(up);
    if mantissa == 1 << 53 {
        (1 << 52, shift as i32 + 1)
    } else {
        (mantissa, shift as i32)
    }
}

/// `(a as f64 / b as f64) as i64`, bit for bit as Rust computes it: both
/// integers rounded to doubles, the quotient rounded to nearest, then
/// truncated towards zero and saturated; `x / 0` is an infinity (saturated)
/// or, for `0 / 0`, NaN (0).
pub fn float_div_trunc(a: i128, b: i128) -> i64 {
    if b == 0 {
        return match a.signum() {
            1 => i64::MAX,
            -1 => i64::MIN,
            _ => 0,
        };
    }
    if a == 0 {
        return 0;
    }
    let negative = (a < 0) != (b < 0);
    let (ma, ea) = to_double(a.unsigned_abs());
    let (mb, eb) = to_double(b.unsigned_abs());
    // ma / mb lies in (1/2, 2): scaled by 2^64 the integer quotient has 64
    // or 65 bits, of which 53 stay.
    let scaled = ma << 64;
    let (q, r) = (scaled / mb, scaled % mb);
    let shift = u128::BITS - q.leading_zeros() - 53;
    let (mut mantissa, up) = round_bits(q, shift, r > 0);
    mantissa += u128::from(up);
    let mut exponent = ea - eb - 64 + shift as i32;
    if mantissa == 1 << 53 {
        mantissa >>= 1;
        exponent += 1;
    }
    // The quotient is mantissa * 2^exponent; its whole part, saturated.
    let whole = match exponent {
        e if e >= 64 => u128::MAX,
        e if e >= 0 => mantissa << e,
        e if e > -128 => mantissa >> -e,
        _ => 0,
    };
    if negative {
        if whole >= 1 << 63 {
            i64::MIN
        } else {
            -(whole as i64)
        }
    } else {
        i64::try_from(whole).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Limiter, TokenBucket};

    const S: i128 = 1_000_000_000;
    const MS: i128 = 1_000_000;
    /// Any instant, in ns on a whole µs; redis-cell's tests start at "now".
    const START: i128 = 1_700_000_000 * S + 123_456_000;

    fn quota(max_burst: i64, count: i64, period: i64) -> CellQuota {
        CellQuota::new(max_burst, count, period).unwrap()
    }

    /// redis-cell on Redis, as a key sees it: the stored `tat`.
    #[derive(Default)]
    struct Key {
        tat: Option<i128>,
    }

    impl Key {
        fn call(&mut self, q: &CellQuota, quantity: i64, now: i128) -> Result<[i64; 5], CellError> {
            let out = throttle(self.tat, q, quantity, now);
            match out.change {
                Change::None => {}
                Change::Store(tat) => self.tat = Some(tat as i128),
                Change::Delete => self.tat = None,
            }
            out.reply.map(|r| r.to_array())
        }
    }

    /// redis-cell's `it_rate_limits` (src/cell/mod.rs), case for case:
    /// max_burst 4 (limit 5), 1 per second. Its durations in ms.
    #[test]
    fn redis_cell_rate_limit_table() {
        let q = quota(4, 1, 1);
        const NEVER: i128 = -1;
        // (case #, now - start in ms, volume, remaining, reset_after ms,
        //  retry_after ms or NEVER, limited)
        #[rustfmt::skip]
        let cases: &[(u32, i128, i64, i64, i128, i128, bool)] = &[
            // You can never make a request larger than the maximum.
            (0, 0, 6, 5, 0, NEVER, true),
            // Rate limit normal requests appropriately.
            (1, 0, 1, 4, 1000, NEVER, false),
            (2, 0, 1, 3, 2000, NEVER, false),
            (3, 0, 1, 2, 3000, NEVER, false),
            (4, 0, 1, 1, 4000, NEVER, false),
            (5, 0, 1, 0, 5000, NEVER, false),
            (6, 0, 1, 0, 5000, 1000, true),
            (7, 3000, 1, 2, 3000, NEVER, false),
            (8, 3100, 1, 1, 3900, NEVER, false),
            (9, 4000, 1, 1, 4000, NEVER, false),
            (10, 8000, 1, 4, 1000, NEVER, false),
            (11, 9500, 1, 4, 1000, NEVER, false),
            // Zero-volume request just peeks at the state.
            (12, 9500, 0, 4, 1000, NEVER, false),
            // High-volume request uses up more of the limit.
            (13, 9500, 2, 2, 3000, NEVER, false),
            // Large requests cannot exceed limits.
            (14, 9500, 5, 2, 3000, 3000, true),
        ];
        let mut key = Key::default();
        for &(num, at_ms, volume, remaining, reset_ms, retry_ms, limited) in cases {
            let secs = |ms: i128| if ms == NEVER { -1 } else { ((ms + 999) / 1000) as i64 };
            let reply = key.call(&q, volume, START + at_ms * MS).unwrap();
            assert_eq!(reply, [i64::from(limited), 5, remaining, secs(retry_ms), secs(reset_ms)], "case {num}");
        }
    }

    /// redis-cell's end-to-end test (tests/e2e.rs): `CL.THROTTLE user123 0 1
    /// 2 1` three times, the last after sleeping `retry_after` seconds.
    #[test]
    fn redis_cell_e2e() {
        let q = quota(0, 1, 2);
        let mut key = Key::default();
        assert_eq!(key.call(&q, 1, START), Ok([0, 1, 0, -1, 2]));
        assert_eq!(key.call(&q, 1, START + MS), Ok([1, 1, 0, 2, 2]));
        assert_eq!(key.call(&q, 1, START + MS + 2 * S), Ok([0, 1, 0, -1, 2]));
    }

    /// The example of docs/commands.md: `CL.THROTTLE user123 15 30 60`.
    #[test]
    fn redis_cell_readme() {
        let out = throttle(None, &quota(15, 30, 60), 1, START);
        assert_eq!(out.reply.unwrap().to_array(), [0, 16, 15, -1, 2]);
        assert_eq!(out.change, Change::Store((START + 2 * S) as u128));
    }

    #[test]
    fn seconds_round_like_redis_cell() {
        let cases: &[(i128, i64)] = &[
            (0, 0),
            (1, 0),       // 1 ns: no whole millisecond
            (999_999, 0), // 0.999999 ms
            (MS, 1),
            (1_000 * MS, 1),
            (1_000 * MS + 999_999, 1), // 1.000999999 s: 1
            (1_001 * MS, 2),
            (59_999 * MS, 60),
            (-MS, 0),
            (-2 * MS, 0),
            (-1_500 * MS, -1),
        ];
        for &(ns, want) in cases {
            assert_eq!(cell_seconds(ns), want, "{ns} ns");
        }
    }

    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// The integer emulation of redis-cell's float steps against the floats.
    #[test]
    fn float_emulation_matches_f64() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let edges: &[i128] = &[
            0,
            1,
            -1,
            2,
            999,
            1_000,
            (1 << 53) - 1,
            1 << 53,
            (1 << 53) + 1,
            (1 << 54) + 3,
            i64::MAX as i128,
            i64::MIN as i128,
            i64::MAX as i128 * S,
            i64::MIN as i128 * S,
            1 << 100,
        ];
        let check = |a: i128, b: i128| {
            let want = (a as f64 / b as f64) as i64;
            assert_eq!(float_div_trunc(a, b), want, "{a} / {b}");
        };
        for &a in edges {
            for &b in edges {
                check(a, b);
            }
        }
        // Magnitudes from 1 bit to 100, either sign; often all ones at the
        // bottom, where roundings tie or carry.
        let pick = |shape: u64, high: u64, low: u64| -> i128 {
            let bits = 1 + (shape % 100) as u32;
            let x = (i128::from(high) << 64 | i128::from(low)) & ((1i128 << bits) - 1);
            let x = if shape.is_multiple_of(7) { (1i128 << bits) - 1 - (x & 0xff) } else { x };
            if shape.is_multiple_of(2) {
                -x
            } else {
                x
            }
        };
        for _ in 0..300_000u64 {
            let a = pick(next(), next(), next());
            let b = pick(next(), next(), next());
            check(a, b);
            // The emission interval's own operands: period in ns, count.
            let period = next() as i64 >> (next() % 64);
            let count = next() as i64 >> (next() % 64);
            check(i128::from(period) * S, i128::from(count));
        }
        for i in 0..200_000u64 {
            // as_seconds_f64() as i64, near second boundaries and large.
            let seconds = match i % 4 {
                0 => next() % 100,
                1 => next() % (1 << 30),
                2 => (1 << 24) + next() % (1 << 26),
                _ => next() % (1 << 40),
            };
            let nanos = match i % 5 {
                0 => 999_999_999 - next() % 100,
                1 => next() % 100,
                _ => next() % 1_000_000_000,
            };
            let want = (seconds as f64 + nanos as f64 / 1_000_000_000f64) as i64;
            assert_eq!(
                float_seconds_trunc(u128::from(seconds), u128::from(nanos)),
                want as u128,
                "{seconds} s {nanos} ns"
            );
        }
        // A carry redis-cell really makes: 2^25 s + 999999999 ns reads as
        // 2^25 + 1 whole seconds, then one more for the milliseconds.
        assert_eq!(float_seconds_trunc(1 << 25, 999_999_999), (1 << 25) + 1);
    }

    #[test]
    fn arguments_parse_like_rust_i64() {
        assert_eq!(parse_integer(b"15"), Ok(15));
        assert_eq!(parse_integer(b"+15"), Ok(15));
        assert_eq!(parse_integer(b"-0"), Ok(0));
        assert_eq!(parse_integer(b"007"), Ok(7));
        assert_eq!(parse_integer(b"-9223372036854775808"), Ok(i64::MIN));
        for bad in [&b""[..], b"+", b"-", b" 1", b"1 ", b"1.0", b"1e3", b"9223372036854775808", b"\xff"] {
            assert!(parse_integer(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_integer(b"x\r\ny\0z").unwrap_err().message(),
            "ERR Cell error: Store error: Couldn't parse as integer: x  y"
        );
        assert_eq!(
            CellError::Usage.message(),
            "ERR Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
        );
        assert_eq!(CellError::ZeroRate.message(), "ERR Cell error: Store error: Zero rates are not supported");
        assert!(CellError::MaxBurst.message().starts_with("ERR invalid max_burst: "));
    }

    #[test]
    fn quota_validation() {
        use CellError::*;
        // (max_burst, count, period, (T, L, τ) or the error)
        type Case = (i64, i64, i64, Result<(i64, i64, i64), CellError>);
        let cases: &[Case] = &[
            (0, 1, 1, Ok((S as i64, 1, S as i64))),
            (15, 30, 60, Ok((2 * S as i64, 16, 32 * S as i64))),
            (15, -30, -60, Ok((2 * S as i64, 16, 32 * S as i64))), // the same rate
            (15, -30, 60, Ok((-2 * S as i64, 16, -32 * S as i64))), // a negative one
            (0, 3, 1, Ok((333_333_333, 1, 333_333_333))),
            // redis-cell's zero rates, before anything else.
            (-5, 0, 60, Err(ZeroRate)),
            (5, 10, 0, Err(ZeroRate)),
            (i64::MAX, 10, 0, Err(ZeroRate)),
            (5, 1_000_000_001, 1, Err(ZeroRate)),
            (5, -2_000_000_000, 1, Err(ZeroRate)),
            (5, 1_000_000_000, 1, Ok((1, 6, 6))),
            (5, i64::MAX, 1, Err(ZeroRate)),
            // Accepted as redis-cell accepts them.
            (-1, 1, 1, Ok((S as i64, 0, 0))),
            (-5, 1, 60, Ok((60 * S as i64, -4, -240 * S as i64))),
            (1000, 1, 2_592_000, Ok((2_592_000 * S as i64, 1001, 1001 * 2_592_000 * S as i64))),
            (0, 1, 315_360_001, Ok((315_360_001 * S as i64, 1, 315_360_001 * S as i64))),
            (999_999_999, 1_000_000_000_000_000, 1, Err(ZeroRate)),
            (999_999_999, 1_000_000_000_000_000, 1_000_000, Ok((1, 1_000_000_000, 1_000_000_000))),
            (1_000_000_000_000_000, 1_000_000, 1, Ok((1_000, 1_000_000_000_000_001, 1_000_000_000_000_001_000))),
            // The emission interval saturates (1e20 ns), as in redis-cell.
            (0, 1, 100_000_000_000, Ok((i64::MAX, 1, i64::MAX))),
            (-1, 1, i64::MAX, Ok((i64::MAX, 0, 0))),
            (0, 1, i64::MIN, Ok((i64::MIN, 1, i64::MIN))),
            // Where redis-cell wraps.
            (i64::MAX, 1_000_000_000, 1, Err(MaxBurst)),
            (i64::MAX - 1, 1, 1, Err(MaxBurst)),
            (1_000_000_000_000_000, 1, 1, Err(MaxBurst)),
            (1, 1, 100_000_000_000, Err(MaxBurst)),
            (-3, 1, 100_000_000_000, Err(MaxBurst)),
            (-2, 1, i64::MIN, Err(MaxBurst)), // -1 * MIN
        ];
        for (i, &(b, c, p, ref want)) in cases.iter().enumerate() {
            let got = CellQuota::new(b, c, p).map(|q| (q.emission_ns(), q.limit(), q.tolerance_ns()));
            assert_eq!(got, *want, "case {i}: {b} {c} {p}");
        }
    }

    /// A literal transcription of redis-cell's GCRA (src/cell/mod.rs) and
    /// reply (src/lib.rs), floats included, on a key that holds redis-cell's
    /// stored `tat` (u64 ns) and is gone once `tat` has passed. With
    /// `wrapping`, `i64` products and sums wrap as in redis-cell's release
    /// build; without, they are exact (in `i128`), the arithmetic intended.
    /// Also says whether anything wrapped.
    #[derive(Default)]
    struct Reference {
        tat: Option<u64>,
    }

    impl Reference {
        fn call(
            &mut self,
            args: (i64, i64, i64, i64),
            now: i128,
            wrapping: bool,
        ) -> (Result<[i64; 5], CellError>, bool) {
            let (max_burst, count, period, quantity) = args;
            let mut wrapped = false;
            let mut mul = |a: i64, b: i64| -> i128 {
                wrapped |= a.checked_mul(b).is_none();
                if wrapping {
                    i128::from(a.wrapping_mul(b))
                } else {
                    i128::from(a) * i128::from(b)
                }
            };
            // Rate::per_period
            let ns = i128::from(period) * 1_000_000_000;
            let t: i64 = if count == 0 || ns == 0 { 0 } else { ((ns as f64) / (count as f64)) as i64 };
            // RateLimiter::new
            let limit = max_burst.wrapping_add(1);
            let mut wrapped_limit = max_burst.checked_add(1).is_none();
            let dvt = mul(t, limit);
            let increment = mul(t, quantity);
            wrapped_limit |= t.checked_mul(limit).is_none();
            wrapped |= wrapped_limit;
            if t == 0 {
                return (Err(CellError::ZeroRate), false);
            }
            if wrapped_limit && !wrapping {
                // No exact arithmetic intended here: ours refuses it.
                return (Err(CellError::MaxBurst), true);
            }
            // rate_limit
            let t = i128::from(t);
            let tat = match self.tat {
                Some(v) if i128::from(v) > now => i128::from(v),
                _ => now,
            };
            let new_tat = if now > tat { now + increment } else { tat + increment };
            let allow_at = new_tat - dvt;
            let diff = now - allow_at;
            let (limited, ttl, retry) = if diff < 0 {
                (true, tat - now, if increment <= dvt { -diff } else { -S })
            } else {
                let ttl = new_tat - now;
                // set_expire(ttl.whole_milliseconds()): Redis refuses < -1.
                if ttl / MS < -1 {
                    return (Err(CellError::SetExpire), wrapped);
                }
                self.tat = Some(new_tat as u64);
                (false, ttl, -S)
            };
            let next = dvt - ttl;
            let remaining = if next > -t { ((next / 1_000) as f64 / (t / 1_000) as f64) as i64 } else { 0 };
            // lib.rs: as_seconds_f64() as i64, plus one for a partial ms.
            let secs = |d: i128| {
                let (s, n) = (d / S, (d % S) as i32);
                let whole = (s as f64 + n as f64 / 1e9) as i64;
                whole.saturating_add(i64::from(n / 1_000_000 > 0))
            };
            (Ok([i64::from(limited), limit, remaining, secs(retry), secs(ttl)]), wrapped)
        }
    }

    /// Extreme arguments: 0, ±1, the bounds the native commands keep and
    /// beyond, `i64::MAX`/`MIN`, negatives redis-cell accepts.
    const BURSTS: &[i64] = &[
        0,
        1,
        4,
        1000,
        999_999_999_999_999,
        1_000_000_000_000_000,
        i64::MAX / 1_000_000_000,
        i64::MAX - 1,
        i64::MAX,
        -1,
        -2,
        -5,
        i64::MIN,
    ];
    const COUNTS: &[i64] =
        &[1, 2, 3, 7, 30, 1000, 1_000_000, 1_000_000_000, 1_000_000_000_000_001, i64::MAX, -1, -3, i64::MIN];
    const PERIODS: &[i64] =
        &[1, 2, 60, 2_592_000, 315_360_000, 315_360_001, 9_223_372_036, 100_000_000_000, i64::MAX, -1, -60, i64::MIN];
    const QUANTITIES: &[i64] =
        &[1, 0, 2, 5, -1, -3, 1000, 1_000_000_000_000_000, i64::MAX, i64::MIN, -1_000_000_000_000];

    /// Every combination of the extremes, on a fresh key and then for a
    /// few more calls on it (at the same instant, 1 µs, 1 s and a day
    /// later): where redis-cell's arithmetic does not wrap, the replies
    /// and errors are its own; where it wraps, ours are the exact
    /// arithmetic's or the `max_burst` error.
    #[test]
    fn extremes_agree_with_redis_cell() {
        let (mut compared, mut wrapped_cases) = (0u64, 0u64);
        for &b in BURSTS {
            for &c in COUNTS {
                for &p in PERIODS {
                    let quota = CellQuota::new(b, c, p);
                    for &first in QUANTITIES {
                        let mut key = Key::default();
                        let (mut cell, mut exact) = (Reference::default(), Reference::default());
                        let mut now = START;
                        for (step, (dt, quantity)) in
                            [(0, first), (0, 1), (1_000, first), (S, 1), (86_400 * S, first), (0, 0)]
                                .into_iter()
                                .enumerate()
                        {
                            now += dt;
                            let (want, wrapped) = cell.call((b, c, p, quantity), now, true);
                            let (intended, _) = exact.call((b, c, p, quantity), now, false);
                            let got = match &quota {
                                Ok(q) => key.call(q, quantity, now),
                                Err(e) => Err(e.clone()),
                            };
                            assert_eq!(got, intended, "{b} {c} {p} quantity {quantity}, step {step}");
                            if wrapped {
                                wrapped_cases += 1;
                                // The keys may differ from here on.
                                break;
                            }
                            assert_eq!(got, want, "{b} {c} {p} quantity {quantity}, step {step}");
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert!(compared > 50_000 && wrapped_cases > 1_000, "{compared} compared, {wrapped_cases} wrapped");
    }

    /// An argument: an extreme, a small number of either sign, or any i64.
    fn argument(extremes: &'static [i64]) -> impl proptest::strategy::Strategy<Value = i64> {
        use proptest::prelude::*;
        prop_oneof![proptest::sample::select(extremes), -10i64..1_000, any::<i64>(), (0u32..63).prop_map(|b| 1i64 << b)]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        /// Random calls on one key, each with its own arguments and time
        /// step: the replies are redis-cell's wherever its arithmetic does
        /// not wrap, and the exact arithmetic's always.
        #[test]
        fn random_calls_agree_with_redis_cell(
            calls in proptest::collection::vec(
                (argument(BURSTS), argument(COUNTS), argument(PERIODS), argument(QUANTITIES), 0u64..3, 0i64..1 << 40),
                1..12,
            ),
        ) {
            let mut key = Key::default();
            let (mut cell, mut exact) = (Reference::default(), Reference::default());
            let mut now = START;
            for (step, &(b, c, p, quantity, scale, dt)) in calls.iter().enumerate() {
                // Whole µs, up to a second, a day or 12 days.
                now += i128::from(dt >> [30, 14, 0][scale as usize]) * 1_000;
                let (want, wrapped) = cell.call((b, c, p, quantity), now, true);
                let (intended, _) = exact.call((b, c, p, quantity), now, false);
                let got = CellQuota::new(b, c, p).and_then(|q| key.call(&q, quantity, now));
                proptest::prop_assert_eq!(&got, &intended, "step {}: {} {} {} {}", step, b, c, p, quantity);
                if wrapped {
                    break;
                }
                proptest::prop_assert_eq!(&got, &want, "step {}: {} {} {} {}", step, b, c, p, quantity);
            }
        }
    }

    /// The brief's examples, and the replies redis-cell 0.5.0 gave for them
    /// on a fresh key (measured on Redis 7.0).
    #[test]
    fn inputs_the_native_bounds_refuse() {
        let fresh = |b, c, p, q| throttle(None, &quota(b, c, p), q, START).reply.map(|r| r.to_array());
        // 1 per 30 days, burst 1000: a full bucket takes 82 years.
        assert_eq!(fresh(1000, 1, 2_592_000, 1), Ok([0, 1001, 1000, -1, 2_592_000]));
        let mut key = Key::default();
        let q = quota(1000, 1, 2_592_000);
        key.call(&q, 1, START).unwrap();
        assert_eq!(key.call(&q, 1, START + 1_000), Ok([0, 1001, 999, -1, 5_184_000]));
        // A period above 3650 days.
        assert_eq!(fresh(0, 1, 315_360_001, 1), Ok([0, 1, 0, -1, 315_360_001]));
        // A count above 10^15 (T = 1 ns): remaining divides by 0 µs.
        assert_eq!(fresh(5, 1_000_000_000_000_001, 2_000_000, 1), Ok([0, 6, 0, -1, 0]));
        assert_eq!(fresh(9, 2_000_000, 1, 1), Ok([0, 10, i64::MAX, -1, 0]));
        // max_burst of 10^15 where the bucket fits 2^63 ns.
        assert_eq!(
            fresh(1_000_000_000_000_000, 1_000_000, 1, 1),
            Ok([0, 1_000_000_000_000_001, 1_000_000_000_000_000, -1, 0])
        );
        // Negative max_burst: nothing is ever admitted but a peek.
        assert_eq!(fresh(-1, 1, 1, 1), Ok([1, 0, 0, -1, 0]));
        assert_eq!(fresh(-5, 1, 60, 1), Ok([1, -4, 0, -1, 0]));
        assert_eq!(fresh(-1, 1, 1, 0), Ok([0, 0, 0, -1, 0]));
        // A negative rate.
        assert_eq!(fresh(5, -1, 60, 1), Ok([1, 6, 0, -1, 0]));
        assert_eq!(fresh(5, -1, 60, -3), Ok([1, 6, 0, -1, 0]));
        // A saturated emission interval (period 3170 years, 1 per period).
        assert_eq!(fresh(0, 1, 100_000_000_000, 1), Ok([0, 1, 0, -1, 9_223_372_037]));
        // Where redis-cell wraps: T * quantity is exact here.
        assert_eq!(fresh(4, 1, 1, i64::MAX), Ok([1, 5, 5, -1, 0]));
        assert_eq!(fresh(4, 1, 1, i64::MIN), Err(CellError::SetExpire));
        assert_eq!(CellQuota::new(1_000_000_000_000_000, 1, 1), Err(CellError::MaxBurst));
    }

    /// Negative rates and bursts go through redis-cell's arithmetic as they
    /// are, storing what it stores.
    #[test]
    fn negative_arguments_store_what_redis_cell_stores() {
        // T = -60 s, L = -4, τ = 240 s: a refund of 3 takes 180 s of debt.
        let q = quota(-5, 1, -60);
        let out = throttle(None, &q, -3, START);
        assert_eq!(out.reply.unwrap().to_array(), [0, -4, 0, -1, 180]);
        assert_eq!(out.change, Change::Store((START + 180 * S) as u128));
        // A negative rate taking a unit lands a minute before now.
        let out = throttle(None, &quota(0, -1, 60), 1, START);
        assert_eq!((out.reply, out.change), (Err(CellError::SetExpire), Change::None));
    }

    /// redis-cell keeps `tat` when the parameters change: a smaller burst
    /// does not forgive the debt.
    #[test]
    fn reconfiguration_keeps_the_debt_in_time() {
        let (big, small) = (quota(99, 1, 1), quota(9, 1, 1));
        let mut key = Key::default();
        assert_eq!(key.call(&big, 50, START), Ok([0, 100, 50, -1, 50]));
        // 49 s of debt against a 10 s tolerance: limited for 40 s more.
        assert_eq!(key.call(&small, 1, START + S), Ok([1, 10, 0, 40, 49]));
        assert_eq!(key.call(&small, 1, START + 41 * S), Ok([0, 10, 0, -1, 10]));
        assert_eq!(key.call(&small, -10, START + 41 * S), Ok([0, 10, 10, -1, 0]));
        assert_eq!(key.tat, None);
    }

    #[test]
    fn refunds_follow_redis_ttl_rules() {
        let q = quota(4, 1, 1);
        let mut key = Key::default();
        key.call(&q, 2, START).unwrap();
        // 2 s of debt; giving 3 tokens back lands 1 s past idle: redis-cell's
        // TTL error, and (an error reply) nothing changes.
        let out = throttle(key.tat, &q, -3, START);
        assert_eq!((out.reply, out.change), (Err(CellError::SetExpire), Change::None));
        // On a missing key nothing changes either way.
        let out = throttle(None, &q, -1, START);
        assert_eq!((out.reply, out.change), (Err(CellError::SetExpire), Change::None));
        // Within 2 ms past idle Redis accepts the TTL (0 or -1 ms): idle.
        let fast = quota(4, 1000, 1); // 1 ms per token
        let tat = throttle(None, &fast, 1, START).change;
        assert_eq!(tat, Change::Store((START + MS) as u128));
        let out = throttle(Some(START + MS), &fast, -2, START);
        assert_eq!(out.reply.unwrap().to_array(), [0, 5, 6, -1, 0]);
        assert_eq!(out.change, Change::Delete);
        assert_eq!(throttle(Some(START + MS), &fast, -3, START).reply, Err(CellError::SetExpire));
    }

    #[test]
    fn peek_and_oversized_calls_change_nothing() {
        let q = quota(4, 1, 1);
        let out = throttle(None, &q, 0, START);
        assert_eq!((out.reply.unwrap().to_array(), out.change), ([0, 5, 5, -1, 0], Change::None));
        let out = throttle(Some(START + 2 * S), &q, 0, START);
        assert_eq!((out.reply.unwrap().to_array(), out.change), ([0, 5, 3, -1, 2], Change::None));
        let out = throttle(None, &q, i64::MAX, START);
        assert_eq!((out.reply.unwrap().to_array(), out.change), ([1, 5, 5, -1, 0], Change::None));
    }

    /// CL.THROTTLE and THROTTLE.TOKEN with the equivalent parameters see
    /// the same bucket, each through its own conversion.
    #[test]
    fn native_bucket_and_tat_convert_both_ways() {
        let q = quota(15, 30, 60); // 2 s per token, 16 tokens
        let params = Params::new(30, 60_000_000, Some(16)).unwrap();
        let now_us = (START / 1_000) as u64;
        // CL.THROTTLE takes 5 tokens: 10 s of debt.
        let Change::Store(tat) = throttle(None, &q, 5, START).change else { panic!() };
        let cell = CellState::new(tat, 15, 30, 60).unwrap();
        // THROTTLE.TOKEN sees 11 tokens, and 10 s to full.
        let mut token = TokenBucket::from_cell(&cell);
        let d = token.check(&params, 0, now_us);
        assert_eq!((d.remaining, d.reset_after_ms), (11, 10_000));
        // It takes one more: its bucket, back in CL.THROTTLE, is 12 s of debt.
        token.acquire(&params, 1, now_us);
        let crate::limiter::TokenForm::Bucket(bucket) = token.form() else { panic!() };
        assert_eq!(bucket_tat_ns(&bucket), Some(START + 12 * S));
        assert_eq!(throttle(bucket_tat_ns(&bucket), &q, 0, START).reply.unwrap().to_array(), [0, 16, 10, -1, 12]);
        // A debt of a fraction of a µs rounds up to a whole unit.
        let cell = CellState::new(START as u128 + 1, 15, 30, 60).unwrap();
        assert_eq!(cell.bucket_at(&params, now_us).level, 1);
        assert_eq!(cell.bucket_at(&params, now_us + 1), Bucket::default());
        // More debt than the call's bucket holds is an empty bucket.
        let cell = CellState::new((START + 100 * S) as u128, 15, 30, 60).unwrap();
        assert_eq!(cell.bucket_at(&params, now_us).level, 16 * 60_000_000);
        // INFO: remaining as a peek with the stored arguments, ms to tat.
        let cell = CellState::new(tat, 15, 30, 60).unwrap();
        assert_eq!(cell.describe(now_us), (11, 10_000));
        assert_eq!(cell.describe(now_us + 10_000_000), (16, 0));
    }

    #[test]
    fn state_invariants() {
        assert!(CellState::new(1, 0, 1, 1).is_some());
        assert!(CellState::new(MAX_TAT_NS, 0, 1, 1).is_some());
        assert!(CellState::new(0, 0, 1, 1).is_none());
        assert!(CellState::new(MAX_TAT_NS + 1, 0, 1, 1).is_none());
        assert!(CellState::new(1, 0, 0, 1).is_none());
        assert!(CellState::new(1, i64::MAX, 1, 1).is_none());
    }
}
