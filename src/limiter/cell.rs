//! redis-cell's `CL.THROTTLE key max_burst count_per_period period [quantity]`
//! on our token bucket, free of Redis.
//!
//! # What redis-cell does (v0.4.0 and later, through v0.5.0)
//!
//! `src/lib.rs` parses the four numbers with Rust's `str::parse::<i64>` (an
//! optional `+` or `-`, digits, no spaces) and answers a wrong argument count
//! with a usage text. `src/cell/mod.rs` runs GCRA in integer nanoseconds:
//!
//! - emission interval `T = ((period * 10^9) as f64 / count as f64) as i64`
//!   ns (a float division, truncated); `T == 0` is refused ("Zero rates are
//!   not supported"), whatever the other arguments;
//! - limit `L = max_burst + 1`, tolerance `τ = T * L`;
//! - `tat` is the stored theoretical arrival time (`now` when missing);
//!   `new_tat = max(tat, now) + T * quantity`;
//! - limited when `new_tat - τ > now`; then nothing is stored, `retry_after
//!   = new_tat - τ - now` only when `T * quantity <= τ` (else it stays -1 s),
//!   and `ttl = tat - now`;
//! - otherwise `new_tat` is stored with a TTL of `ttl = new_tat - now`,
//!   truncated to whole milliseconds; Redis 7 refuses a negative TTL other
//!   than -1 ms, so a refund (negative quantity) reaching 2 ms or more past
//!   the idle state answers "Error while setting key expire";
//! - `remaining = trunc(whole_µs(τ - ttl) as f64 / whole_µs(T) as f64)` when
//!   `τ - ttl > -T`, else 0; `reset_after = ttl`;
//! - both durations go out as `secs = d.as_seconds_f64() as i64`, plus one
//!   when `d.subsec_milliseconds() > 0`: a ceiling taken after truncating to
//!   whole milliseconds (1.0004 s answers 1); `retry_after` is -1 when
//!   admitted. The reply is `[limited, L, remaining, retry_after,
//!   reset_after]`.
//! - Errors read `Cell error: Store error: <text>` (the harness in
//!   `src/redis/mod.rs` wraps `GenericError`'s display).
//!
//! # The mapping
//!
//! GCRA is a token bucket seen from the other side: the debt `D = max(tat -
//! now, 0)` is the time the bucket needs to be full again, and the bucket
//! holds `(τ - D) / T` tokens. With `burst = L` tokens refilled at `count`
//! per `period` seconds (so one token per `T`), "limited" (`D + T*q > τ`) is
//! exactly the token bucket's "fewer than `q` tokens", and our bucket's level
//! is the debt in units of `1 / (count · 1 µs)`: `level = D_µs * count`.
//! Every quantity in the reply is computed from that level in integers,
//! including redis-cell's float steps (emulated bit for bit, see
//! [`nearest_double`]).
//!
//! When the key's stored parameters differ from the call's (a reconfigured
//! limit, or a bucket last written by THROTTLE.TOKEN with other parameters),
//! redis-cell keeps its `tat`: the debt carries over in time, not in tokens.
//! So does this mapping; THROTTLE.TOKEN itself would keep the tokens instead.
//!
//! # Where it cannot be exact
//!
//! - When `count` does not divide `period * 10^9`, redis-cell's emission
//!   interval is truncated to whole nanoseconds (its rate is faster by less
//!   than one nanosecond per token); the bucket keeps the exact rate `count
//!   / period`. Replies agree except at instants within that drift of a
//!   boundary.
//! - The bucket's time is the server's clock in microseconds (redis-cell
//!   reads nanoseconds); a clock going backwards counts as no time passing.
//! - redis-cell's TTL is truncated to whole milliseconds, so in the last
//!   millisecond before the bucket is full its key may already be gone (a
//!   full bucket); here the state is exact until it is full.
//! - Arguments redis-cell accepts but cannot run sanely are refused with an
//!   error naming the argument: a negative `max_burst`, a negative rate
//!   (exactly one of `count` and `period` negative; both negative is the
//!   same rate and accepted, as in redis-cell), and anything beyond the
//!   TOKEN type's bounds (`count` and `L` up to 10^15, `period` up to 3650
//!   days, a full bucket refilled within 3650 days). A `quantity` whose
//!   `T * quantity` overflows 64-bit nanoseconds (redis-cell wraps or
//!   panics) gets the mathematically intended answer.
//! - Deliberate differences the replies do not show: errors carry the
//!   `ERR` code before redis-cell's text (redis-cell's code is `Cell`); a
//!   key of another type gets WRONGTYPE and a non-UTF-8 argument the parse
//!   error (redis-cell aborts the server on both); a peek or a limited call writes
//!   nothing (redis-cell rewrites the same `tat`); a refund that empties
//!   the bucket deletes the key (redis-cell leaves it without a TTL).
//! - redis-cell v0.3.1 and older rounded the seconds differently (v0.3.0:
//!   truncated; v0.3.1: plus one whenever the duration is at least 1 ms,
//!   so 2 s answered 3). This follows v0.4.0 and later.

use super::{ceil_div, Bucket, Limiter, ParamError, Params, TokenBucket, MAX_LIMIT, MAX_PERIOD_US};

/// Longest `period` in seconds (3650 days, the TOKEN type's bound).
pub const MAX_PERIOD_S: u64 = MAX_PERIOD_US / 1_000_000;

const NS_PER_US: i128 = 1_000;
const NS_PER_MS: i128 = 1_000_000;
const NS_PER_S: i128 = 1_000_000_000;

/// Why a call gets an error reply; nothing is changed except where
/// [`Outcome::change`] says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CellError {
    /// Not 4 or 5 arguments after the command name.
    Usage,
    /// An argument that `str::parse::<i64>` refuses, as given.
    NotInteger(String),
    /// `count` or `period` is 0, or the rate is faster than one per ns.
    ZeroRate,
    /// A refund 2 ms or more past the idle state: redis-cell stores it and
    /// then fails to set the key's TTL, leaving the bucket idle. Here the
    /// call changes nothing, as every call that gets an error.
    SetExpire,
    /// Ours: `max_burst` negative or above the TOKEN type's bound.
    MaxBurst,
    /// Ours: a negative rate, or `count` above 10^15.
    Count,
    /// Ours: a negative rate, or `period` above 3650 days.
    Period,
    /// Ours: a full bucket would take more than 3650 days to refill.
    BurstTooSlow,
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
            CellError::MaxBurst => "ERR invalid max_burst: expected an integer from 0 to 999999999999999".into(),
            CellError::Count => "ERR invalid count per period: expected an integer from 1 to \
                1000000000000000 (period of the same sign)"
                .into(),
            CellError::Period => "ERR invalid period: expected whole seconds from 1 to 315360000 \
                (3650 days), count of the same sign"
                .into(),
            CellError::BurstTooSlow => "ERR invalid max_burst: at this rate a full bucket would take \
                more than 3650 days to refill"
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

/// redis-cell's `max_burst count period`, checked and mapped onto the TOKEN
/// type: `burst = max_burst + 1` tokens, refilled at `count` per `period`
/// seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellQuota {
    params: Params,
    /// redis-cell's emission interval in ns, as its float division gives it.
    emission_ns: u64,
}

impl CellQuota {
    /// Checks in redis-cell's order (its zero-rate error first), then the
    /// TOKEN type's bounds.
    pub fn new(max_burst: i64, count: i64, period: i64) -> Result<CellQuota, CellError> {
        if count == 0 || period == 0 {
            return Err(CellError::ZeroRate);
        }
        let (count_abs, period_abs) = (count.unsigned_abs(), period.unsigned_abs());
        let period_ns = u128::from(period_abs) * NS_PER_S as u128;
        // |T| < 1 ns. Exact within the bounds checked below (both operands
        // are exact doubles there, so the quotient cannot round up to 1).
        if period_ns < u128::from(count_abs) {
            return Err(CellError::ZeroRate);
        }
        if (count < 0) != (period < 0) {
            return Err(if count < 0 { CellError::Count } else { CellError::Period });
        }
        let burst = u64::try_from(max_burst)
            .ok()
            .and_then(|b| b.checked_add(1))
            .filter(|b| *b <= MAX_LIMIT)
            .ok_or(CellError::MaxBurst)?;
        if count_abs > MAX_LIMIT {
            return Err(CellError::Count);
        }
        if period_abs > MAX_PERIOD_S {
            return Err(CellError::Period);
        }
        let params = Params::new(count_abs, period_abs * 1_000_000, Some(burst)).map_err(|e| match e {
            ParamError::Limit => CellError::Count,
            ParamError::Period => CellError::Period,
            ParamError::Burst => CellError::MaxBurst,
            ParamError::BurstTooSlow => CellError::BurstTooSlow,
        })?;
        // `(period_ns as f64 / count as f64) as i64`, both exact doubles
        // here: period_ns = period * 5^9 * 2^9 with period * 5^9 < 2^53.
        let scaled = nearest_double(period_ns << 52, u128::from(count_abs)) >> 52;
        let emission_ns = u64::try_from(scaled).unwrap_or(u64::MAX);
        Ok(CellQuota { params, emission_ns })
    }

    /// The TOKEN parameters: `limit = count`, `period`, `burst = max_burst + 1`.
    pub fn params(&self) -> Params {
        self.params
    }

    /// `period` in whole seconds.
    pub fn period_s(&self) -> u64 {
        self.params.period_us() / 1_000_000
    }

    /// redis-cell's emission interval in nanoseconds.
    pub fn emission_ns(&self) -> u64 {
        self.emission_ns
    }
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

/// What the call did to the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing: no write, no TTL, nothing to propagate.
    None,
    /// The bucket ran THROTTLE.TOKEN's own step (`acquire`, or `refund`
    /// for a negative cost) with the key's own parameters, so
    /// `THROTTLE.TOKEN key count <period>s COST cost AT now BURST
    /// max_burst+1` reproduces it. `ttl_us` is the key's new TTL, exact;
    /// 0 means the bucket is full again and the key goes.
    Token { cost: i64, ttl_us: u64 },
    /// The stored bucket had other parameters; it was converted keeping its
    /// debt in time and now holds the call's parameters. Only the state
    /// itself reproduces it. `ttl_us > 0`.
    Stored { ttl_us: u64 },
    /// The bucket (stored with other parameters) is full again: the key goes.
    Emptied,
}

/// The answer to one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Result<CellReply, CellError>,
    pub change: Change,
    /// The call's time as the bucket counts it (never before its last
    /// change): the `AT` to propagate.
    pub now_us: u64,
}

/// GCRA's quantities for one call, in the bucket's units of the call's
/// parameters (a token is `period_us` units, a microsecond `count` units).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Verdict {
    limited: bool,
    /// The debt after the call as redis-cell reports it (`ttl`); negative
    /// only for a refund past the idle state.
    ttl: i128,
    /// `new_tat - τ - now` when limited and the quantity fits the limit.
    retry: Option<i128>,
    /// The debt after the call if it is admitted (`new_tat - now`).
    after: i128,
}

/// Runs `CL.THROTTLE` on `state` (the key's bucket; `TokenBucket::default()`
/// for a missing key) at `now_us`. The state changes only when redis-cell's
/// would (an admitted call with a non-zero quantity), as [`Outcome::change`]
/// reports.
pub fn throttle(state: &mut TokenBucket, quota: &CellQuota, quantity: i64, now_us: u64) -> Outcome {
    let stored = state.bucket();
    let empty = stored.period_us == 0;
    let now_us = if empty { now_us } else { now_us.max(stored.updated_at_us) };
    let params = quota.params;
    let same =
        empty || (stored.limit, stored.period_us, stored.burst) == (params.limit(), params.period_us(), params.burst());
    let debt = if empty { 0 } else { debt_in(&stored, &params, now_us) };
    let verdict = gcra(&params, debt, quantity);
    // `after` in ns, times the rate (units are 1/rate µs).
    let after_ns_by_rate = verdict.after.saturating_mul(NS_PER_US);
    let reply = if !verdict.limited && after_ns_by_rate <= -2 * NS_PER_MS * i128::from(params.limit()) {
        Err(CellError::SetExpire)
    } else {
        Ok(cell_reply(quota, &verdict))
    };
    let change = if verdict.limited || quantity == 0 || (empty && quantity < 0) || reply.is_err() {
        Change::None
    } else if same {
        let burst = params.burst();
        let (cost, decision) = if quantity > 0 {
            (quantity, state.acquire(&params, quantity.unsigned_abs(), now_us))
        } else {
            // Refunding a whole bucket already empties it.
            let units = quantity.unsigned_abs().min(burst);
            (-i64::try_from(units).unwrap_or(i64::MAX), state.refund(&params, units, now_us))
        };
        Change::Token { cost, ttl_us: decision.reset_after_us }
    } else if verdict.after <= 0 {
        *state = TokenBucket::default();
        Change::Emptied
    } else {
        let level = u128::try_from(verdict.after).unwrap_or(0);
        *state = TokenBucket::from_bucket(&Bucket {
            level,
            updated_at_us: now_us,
            limit: params.limit(),
            period_us: params.period_us(),
            burst: params.burst(),
        });
        let ttl_us = ceil_div(level, u128::from(params.limit()));
        Change::Stored { ttl_us: u64::try_from(ttl_us).unwrap_or(u64::MAX) }
    };
    Outcome { reply, change, now_us }
}

/// The stored bucket's debt at `now_us` (>= its last change), kept in time
/// as redis-cell keeps `tat`, in units of `params` (rounded up when the
/// refill rates differ).
fn debt_in(stored: &Bucket, params: &Params, now_us: u64) -> i128 {
    let elapsed = u128::from(now_us.saturating_sub(stored.updated_at_us));
    let old_rate = u128::from(stored.limit.max(1));
    // The debt in units of the stored bucket: time to full is debt / old_rate µs.
    let debt = stored.level.saturating_sub(elapsed.saturating_mul(old_rate));
    let rate = u128::from(params.limit());
    let converted = if old_rate == rate {
        debt
    } else {
        (debt / old_rate)
            .saturating_mul(rate)
            .saturating_add(ceil_div((debt % old_rate).saturating_mul(rate), old_rate))
    };
    i128::try_from(converted).unwrap_or(i128::MAX)
}

/// redis-cell's decision from the debt before the call.
fn gcra(params: &Params, debt: i128, quantity: i64) -> Verdict {
    let token = i128::from(params.period_us());
    let burst = i128::from(params.burst());
    let tolerance = burst * token;
    let after = debt.saturating_add(i128::from(quantity).saturating_mul(token));
    if after > tolerance {
        let retry = (i128::from(quantity) <= burst).then_some(after - tolerance);
        Verdict { limited: true, ttl: debt, retry, after }
    } else {
        Verdict { limited: false, ttl: after, retry: None, after }
    }
}

fn cell_reply(quota: &CellQuota, verdict: &Verdict) -> CellReply {
    let params = &quota.params;
    let rate = i128::from(params.limit());
    let tolerance = i128::from(params.burst()) * i128::from(params.period_us());
    CellReply {
        limited: verdict.limited,
        limit: i64::try_from(params.burst()).unwrap_or(i64::MAX),
        remaining: remaining(quota, tolerance.saturating_sub(verdict.ttl)),
        retry_after: verdict.retry.map_or(-1, |units| cell_seconds(units_to_ns(units, rate))),
        reset_after: cell_seconds(units_to_ns(verdict.ttl, rate)),
    }
}

/// `if next > -T { (next.whole_microseconds() as f64 /
/// T.whole_microseconds() as f64) as i64 } else { 0 }`, with `next = τ -
/// ttl` in bucket units. Both operands stay below 2^53 within the bounds,
/// where the float division truncates like the integer one; a `T` under
/// 1 µs divides by zero (infinity saturates to `i64::MAX`, NaN gives 0).
fn remaining(quota: &CellQuota, next: i128) -> i64 {
    let params = &quota.params;
    if next <= -i128::from(params.period_us()) {
        return 0;
    }
    // Whole microseconds, truncated towards zero like `whole_microseconds`.
    let next_us = next / i128::from(params.limit());
    let emission_us = i128::from(quota.emission_ns / 1_000);
    if emission_us == 0 {
        return match next_us.signum() {
            1 => i64::MAX,
            -1 => i64::MIN,
            _ => 0,
        };
    }
    let quotient = next_us / emission_us;
    i64::try_from(quotient).unwrap_or(if quotient > 0 { i64::MAX } else { i64::MIN })
}

/// Bucket units (1 µs = `rate` units) to nanoseconds, rounded away from
/// zero; exact whenever redis-cell's emission interval is (`count` divides
/// `period * 10^9`).
fn units_to_ns(units: i128, rate: i128) -> i128 {
    let ns = units.unsigned_abs().saturating_mul(NS_PER_US as u128);
    let ns = i128::try_from(ceil_div(ns, rate.unsigned_abs().max(1))).unwrap_or(i128::MAX);
    if units < 0 {
        -ns
    } else {
        ns
    }
}

/// A duration in whole seconds as redis-cell replies it:
/// `d.as_seconds_f64() as i64`, plus one if `d.subsec_milliseconds() > 0`.
/// `as_seconds_f64` is `seconds as f64 + nanos as f64 / 1e9`, whose two
/// roundings can carry into the next second above 2^24 s; emulated exactly.
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
        whole + i64::from(nanos >= NS_PER_MS as u128)
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
    let unit = 1u128 << shift;
    let (mantissa, low, half) = (q >> shift, q & (unit - 1), unit >> 1);
    // The dropped part is low + r/d units of 2^-shift; r/d < 1.
    let up = match low.cmp(&half) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => r > 0 || mantissa & 1 == 1,
    };
    (mantissa + u128::from(up)) << shift
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;
    const MS: u64 = 1_000;
    /// Any instant; redis-cell's tests start at "now".
    const START: u64 = 1_700_000_000 * S + 123_456;

    fn quota(max_burst: i64, count: i64, period: i64) -> CellQuota {
        CellQuota::new(max_burst, count, period).unwrap()
    }

    /// redis-cell's `it_rate_limits` (src/cell/mod.rs), case for case:
    /// max_burst 4 (limit 5), 1 per second. The durations redis-cell checks
    /// exactly are checked here in ns; the reply in seconds is checked too.
    #[test]
    fn redis_cell_rate_limit_table() {
        let q = quota(4, 1, 1);
        const NEVER_S: i128 = -1;
        // (case #, now - start in ms, volume, remaining, reset_after ms,
        //  retry_after ms or NEVER_S, limited)
        #[rustfmt::skip]
        let cases: &[(u32, u64, i64, i64, i128, i128, bool)] = &[
            // You can never make a request larger than the maximum.
            (0, 0, 6, 5, 0, NEVER_S, true),
            // Rate limit normal requests appropriately.
            (1, 0, 1, 4, 1000, NEVER_S, false),
            (2, 0, 1, 3, 2000, NEVER_S, false),
            (3, 0, 1, 2, 3000, NEVER_S, false),
            (4, 0, 1, 1, 4000, NEVER_S, false),
            (5, 0, 1, 0, 5000, NEVER_S, false),
            (6, 0, 1, 0, 5000, 1000, true),
            (7, 3000, 1, 2, 3000, NEVER_S, false),
            (8, 3100, 1, 1, 3900, NEVER_S, false),
            (9, 4000, 1, 1, 4000, NEVER_S, false),
            (10, 8000, 1, 4, 1000, NEVER_S, false),
            (11, 9500, 1, 4, 1000, NEVER_S, false),
            // Zero-volume request just peeks at the state.
            (12, 9500, 0, 4, 1000, NEVER_S, false),
            // High-volume request uses up more of the limit.
            (13, 9500, 2, 2, 3000, NEVER_S, false),
            // Large requests cannot exceed limits.
            (14, 9500, 5, 2, 3000, 3000, true),
        ];
        let mut state = TokenBucket::default();
        for &(num, at_ms, volume, remaining, reset_ms, retry_ms, limited) in cases {
            let now = START + at_ms * MS;
            let before = state.clone();
            // The exact durations, as redis-cell's test asserts them.
            let debt = if before.bucket().period_us == 0 { 0 } else { debt_in(&before.bucket(), &q.params(), now) };
            let v = gcra(&q.params(), debt, volume);
            assert_eq!(v.limited, limited, "case {num}");
            assert_eq!(units_to_ns(v.ttl, 1), reset_ms * 1_000_000, "case {num} reset_after");
            let retry_ns = v.retry.map_or(NEVER_S * 1_000_000_000, |u| units_to_ns(u, 1));
            let want_retry = if retry_ms == NEVER_S { NEVER_S * 1_000_000_000 } else { retry_ms * 1_000_000 };
            assert_eq!(retry_ns, want_retry, "case {num} retry_after");
            // The reply.
            let out = throttle(&mut state, &q, volume, now);
            let reply = out.reply.unwrap();
            let secs = |ms: i128| if ms == NEVER_S { -1 } else { ((ms + 999) / 1000) as i64 };
            assert_eq!(
                reply.to_array(),
                [i64::from(limited), 5, remaining, secs(retry_ms), secs(reset_ms)],
                "case {num}"
            );
            // The state changes exactly when redis-cell stores a new tat.
            assert_eq!(state != before, !limited && volume != 0, "case {num} state");
        }
    }

    /// redis-cell's end-to-end test (tests/e2e.rs): `CL.THROTTLE user123 0 1
    /// 2 1` three times, the last after sleeping `retry_after` seconds.
    #[test]
    fn redis_cell_e2e() {
        let q = quota(0, 1, 2);
        let mut state = TokenBucket::default();
        let steps: &[(u32, u64, [i64; 5])] = &[
            (1, START, [0, 1, 0, -1, 2]),
            (2, START + 1_000, [1, 1, 0, 2, 2]),
            (3, START + 1_000 + 2 * S, [0, 1, 0, -1, 2]),
        ];
        for &(num, now, want) in steps {
            let reply = throttle(&mut state, &q, 1, now).reply.unwrap();
            assert_eq!(reply.to_array(), want, "step {num}");
        }
    }

    /// The example of docs/commands.md: `CL.THROTTLE user123 15 30 60`.
    #[test]
    fn redis_cell_readme() {
        let mut state = TokenBucket::default();
        let out = throttle(&mut state, &quota(15, 30, 60), 1, START);
        assert_eq!(out.reply.unwrap().to_array(), [0, 16, 15, -1, 2]);
        assert_eq!(out.change, Change::Token { cost: 1, ttl_us: 2_000_000 });
    }

    #[test]
    fn seconds_round_like_redis_cell() {
        let ms = 1_000_000i128;
        let cases: &[(i128, i64)] = &[
            (0, 0),
            (1, 0),       // 1 ns: no whole millisecond
            (999_999, 0), // 0.999999 ms
            (ms, 1),
            (1_000 * ms, 1),
            (1_000 * ms + 999_999, 1), // 1.000999999 s: 1
            (1_001 * ms, 2),
            (59_999 * ms, 60),
            (-ms, 0),
            (-2 * ms, 0),
            (-1_500 * ms, -1),
        ];
        for &(ns, want) in cases {
            assert_eq!(cell_seconds(ns), want, "{ns} ns");
        }
    }

    /// The integer emulation of redis-cell's float steps against the floats.
    #[test]
    fn float_emulation_matches_f64() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..200_000u64 {
            // Emission interval: (period_ns as f64 / count as f64) as i64.
            let period = 1 + next() % MAX_PERIOD_S;
            let count = match i % 3 {
                0 => 1 + next() % 1_000,
                1 => 1 + next() % 1_000_000_000,
                _ => 1 + next() % MAX_LIMIT,
            };
            let period_ns = u128::from(period) * 1_000_000_000;
            if period_ns >= u128::from(count) {
                let want = ((period_ns as f64) / (count as f64)) as i64;
                let got = nearest_double(period_ns << 52, u128::from(count)) >> 52;
                assert_eq!(got, want as u128, "period {period} count {count}");
            }
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
    }

    #[test]
    fn quota_validation() {
        use CellError::*;
        let cases: &[(i64, i64, i64, Result<(), CellError>)] = &[
            (0, 1, 1, Ok(())),
            (15, 30, 60, Ok(())),
            (15, -30, -60, Ok(())), // the same rate, as in redis-cell
            // redis-cell's zero rates, before anything else.
            (-5, 0, 60, Err(ZeroRate)),
            (5, 10, 0, Err(ZeroRate)),
            (5, 1_000_000_001, 1, Err(ZeroRate)),
            (5, -2_000_000_000, 1, Err(ZeroRate)),
            (5, 1_000_000_000, 1, Ok(())),
            // Ours.
            (-1, 1, 1, Err(MaxBurst)),
            (i64::MAX, 1, 1, Err(MaxBurst)),
            (999_999_999_999_999, 1_000_000_000_000_000, 1_000_000, Ok(())),
            (1_000_000_000_000_000, 1, 1, Err(MaxBurst)),
            (5, -1, 60, Err(Count)),
            (5, 1, -60, Err(Period)),
            (5, 1_000_000_000_000_001, 2_000_000, Err(Count)),
            (0, 1, 315_360_001, Err(Period)),
            (0, 1, 315_360_000, Ok(())),
            (1, 1, 315_360_000, Err(BurstTooSlow)),
        ];
        for (i, &(b, c, p, ref want)) in cases.iter().enumerate() {
            assert_eq!(CellQuota::new(b, c, p).map(|_| ()), *want, "case {i}");
        }
        let q = quota(15, 30, 60);
        assert_eq!((q.params().limit(), q.params().period_us(), q.params().burst()), (30, 60 * S, 16));
        assert_eq!((q.period_s(), q.emission_ns()), (60, 2_000_000_000));
        assert_eq!(quota(0, 3, 1).emission_ns(), 333_333_333);
    }

    /// Same parameters as the stored bucket: CL.THROTTLE's state is exactly
    /// what THROTTLE.TOKEN computes for the propagated call, and its
    /// decision agrees with the bucket's.
    #[test]
    fn same_parameters_match_throttle_token() {
        let mut seed = 42u64;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for &(b, c, p) in &[(4i64, 1i64, 1i64), (15, 30, 60), (0, 3, 1), (9, 7, 60), (99, 1000, 1)] {
            let q = quota(b, c, p);
            let params = q.params();
            let mut cell = TokenBucket::default();
            let mut token = TokenBucket::default();
            let mut now = START;
            for _ in 0..5_000 {
                now += next(3 * params.period_us() / params.limit());
                let quantity = next(q.params().burst() + 3) as i64 - 1;
                let out = throttle(&mut cell, &q, quantity, now);
                let limited = out.reply.as_ref().is_ok_and(|r| r.limited);
                match out.change {
                    Change::Token { cost, ttl_us } => {
                        let d = if cost > 0 {
                            token.acquire(&params, cost as u64, now)
                        } else {
                            token.refund(&params, cost.unsigned_abs(), now)
                        };
                        assert!(d.allowed);
                        assert_eq!(d.reset_after_us, ttl_us);
                        if ttl_us == 0 {
                            assert_eq!(cell, TokenBucket::default());
                            token = TokenBucket::default();
                        }
                    }
                    Change::None => {
                        if quantity > 0 {
                            let d = token.acquire(&params, quantity as u64, now);
                            assert!(!d.allowed);
                            assert!(limited);
                        }
                    }
                    other => panic!("unexpected {other:?}"),
                }
                assert_eq!(cell, token);
            }
        }
    }

    /// A literal port of redis-cell's GCRA (src/cell/mod.rs) and reply
    /// rounding (src/lib.rs), floats included, in ns, with Redis 7's TTL
    /// rules; its key is gone once tat has passed.
    struct Reference {
        tat: Option<i128>,
    }

    impl Reference {
        fn call(
            &mut self,
            max_burst: i64,
            count: i64,
            period: i64,
            quantity: i64,
            now_ns: i128,
        ) -> Result<[i64; 5], CellError> {
            let t = ((period as i128 * 1_000_000_000) as f64 / count as f64) as i64 as i128;
            if t == 0 {
                return Err(CellError::ZeroRate);
            }
            let limit = max_burst + 1;
            let dvt = t * limit as i128;
            let increment = t * quantity as i128;
            let tat = match self.tat {
                Some(tat) if tat > now_ns => tat,
                _ => now_ns,
            };
            let new_tat = tat.max(now_ns) + increment;
            let diff = now_ns - (new_tat - dvt);
            let (limited, ttl, retry) = if diff < 0 {
                (true, tat - now_ns, if increment <= dvt { -diff } else { -1_000_000_000 })
            } else {
                let ttl = new_tat - now_ns;
                // Redis 7 refuses a negative TTL other than -1 ms. (redis-cell
                // has stored the refund by then and leaves the bucket idle;
                // the module changes nothing on an error reply.)
                if ttl / 1_000_000 < -1 {
                    return Err(CellError::SetExpire);
                }
                self.tat = Some(new_tat);
                (false, ttl, -1_000_000_000)
            };
            let next = dvt - ttl;
            let remaining = if next > -t { ((next / 1_000) as f64 / (t / 1_000) as f64) as i64 } else { 0 };
            let secs = |d: i128| {
                let (s, n) = (d / 1_000_000_000, d % 1_000_000_000);
                let whole = (s as i64) as f64 + (n as i32) as f64 / 1e9;
                whole as i64 + i64::from(n / 1_000_000 > 0)
            };
            Ok([i64::from(limited), limit, remaining, secs(retry), secs(ttl)])
        }
    }

    /// Random calls, reconfigurations and refunds against the port. Rates
    /// where `count` divides `period * 10^9` (so redis-cell's emission
    /// interval is exact) must agree on every reply.
    #[test]
    fn agrees_with_redis_cell_reference() {
        let mut seed = 7u64;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let configs: &[(i64, i64, i64)] =
            &[(4, 1, 1), (0, 1, 2), (15, 30, 60), (9, 10, 1), (2, 4, 10), (19, 5, 60), (7, -2, -1), (29, 1_000, 1)];
        for round in 0..200 {
            let mut cell = TokenBucket::default();
            let mut reference = Reference { tat: None };
            let mut now = START + next(1_000_000);
            let mut config = configs[round % configs.len()];
            for step in 0..300 {
                if next(20) == 0 {
                    config = configs[next(configs.len() as u64) as usize];
                }
                let (b, c, p) = config;
                let q = quota(b, c, p);
                let token_us = q.params().period_us() / q.params().limit();
                now += match next(4) {
                    0 => 0,
                    1 => next(token_us / 2 + 1),
                    2 => next(2 * token_us + 1),
                    _ => next(30 * S),
                };
                let quantity = match next(10) {
                    0 => 0,
                    1 => -(next(3) as i64),
                    2 => (q.params().burst() + next(3)) as i64,
                    _ => 1 + next(3) as i64,
                };
                let want = reference.call(b, c, p, quantity, i128::from(now) * 1_000);
                let got = throttle(&mut cell, &q, quantity, now).reply.map(|r| r.to_array());
                assert_eq!(got, want, "round {round} step {step}: {b} {c} {p} quantity {quantity}");
            }
        }
    }

    /// redis-cell keeps `tat` when the parameters change: a smaller burst
    /// does not forgive the debt (THROTTLE.TOKEN would clamp the tokens).
    #[test]
    fn reconfiguration_keeps_the_debt_in_time() {
        let big = quota(99, 1, 1);
        let small = quota(9, 1, 1);
        let mut state = TokenBucket::default();
        let out = throttle(&mut state, &big, 50, START);
        assert_eq!(out.reply.unwrap().to_array(), [0, 100, 50, -1, 50]);
        // 50 s of debt against a 10 s tolerance: limited for 41 s more.
        let out = throttle(&mut state, &small, 1, START + S);
        assert_eq!(out.reply.unwrap().to_array(), [1, 10, 0, 40, 49]);
        assert_eq!(out.change, Change::None);
        let out = throttle(&mut state, &small, 1, START + 41 * S);
        assert_eq!(out.reply.unwrap().to_array(), [0, 10, 0, -1, 10]);
        assert_eq!(out.change, Change::Stored { ttl_us: 10_000_000 });
        assert_eq!((state.bucket().limit, state.bucket().period_us, state.bucket().burst), (1, S, 10));
        // Now the key holds the call's parameters: THROTTLE.TOKEN's step again.
        let out = throttle(&mut state, &small, -10, START + 41 * S);
        assert_eq!(out.reply.unwrap().to_array(), [0, 10, 10, -1, 0]);
        assert_eq!(out.change, Change::Token { cost: -10, ttl_us: 0 });
        assert_eq!(state, TokenBucket::default());
    }

    #[test]
    fn refunds_follow_redis_7_ttl_rules() {
        let q = quota(4, 1, 1);
        let mut state = TokenBucket::default();
        throttle(&mut state, &q, 2, START);
        let before = state.clone();
        // 2 s of debt; giving 3 tokens back goes 1 s past idle: redis-cell's
        // TTL error, and (an error reply) nothing changes.
        let out = throttle(&mut state, &q, -3, START);
        assert_eq!(out.reply, Err(CellError::SetExpire));
        assert_eq!(out.change, Change::None);
        assert_eq!(state, before);
        // On a missing key nothing changes either way.
        let mut state = TokenBucket::default();
        let out = throttle(&mut state, &q, -1, START);
        assert_eq!((out.reply, out.change), (Err(CellError::SetExpire), Change::None));
        // Within 2 ms past idle Redis accepts the TTL (0 or -1 ms).
        let fast = quota(4, 1000, 1); // 1 ms per token
        let mut state = TokenBucket::default();
        throttle(&mut state, &fast, 1, START);
        let out = throttle(&mut state, &fast, -2, START);
        assert_eq!(out.reply.unwrap().to_array(), [0, 5, 6, -1, 0]);
        let out = throttle(&mut state, &fast, -3, START);
        assert_eq!(out.reply, Err(CellError::SetExpire));
    }

    #[test]
    fn peek_and_oversized_calls_change_nothing() {
        let q = quota(4, 1, 1);
        let mut state = TokenBucket::default();
        let out = throttle(&mut state, &q, 0, START);
        assert_eq!((out.reply.unwrap().to_array(), out.change), ([0, 5, 5, -1, 0], Change::None));
        let out = throttle(&mut state, &q, i64::MAX, START);
        assert_eq!((out.reply.unwrap().to_array(), out.change), ([1, 5, 5, -1, 0], Change::None));
        assert_eq!(state, TokenBucket::default());
    }

    /// Emission intervals under 1 µs divide by zero in redis-cell's
    /// `remaining`: infinity, saturated.
    #[test]
    fn sub_microsecond_rates_reply_like_redis_cell() {
        let q = quota(9, 2_000_000, 1); // 500 ns per token
        let mut state = TokenBucket::default();
        let out = throttle(&mut state, &q, 1, START);
        assert_eq!(out.reply.unwrap().to_array(), [0, 10, i64::MAX, -1, 0]);
        let out = throttle(&mut state, &q, 9, START);
        assert_eq!(out.reply.unwrap().to_array(), [0, 10, 0, -1, 0]);
    }

    #[test]
    fn extreme_parameters_do_not_overflow() {
        let q = quota(999_999_999_999_999, 1_000_000_000_000_000, 315_360_000);
        let mut state = TokenBucket::default();
        for (quantity, at) in [(i64::MAX, 0), (i64::MIN, 0), (1_000_000_000_000_000, 0), (1, 1), (i64::MIN, 2)] {
            let _ = throttle(&mut state, &q, quantity, START + at);
        }
        let slow = quota(0, 1, 315_360_000);
        let mut state = TokenBucket::default();
        let out = throttle(&mut state, &slow, 1, START + 10);
        assert_eq!(out.reply.unwrap().to_array(), [0, 1, 0, -1, 315_360_000]);
        let out = throttle(&mut state, &slow, 1, u64::MAX);
        assert!(out.reply.is_ok());
    }
}
