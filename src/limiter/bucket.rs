use super::cell::CellState;
use super::pack::{Packer, Unpacker};
use super::{ceil_div, retry_ms, until_idle, Decision, Limiter, Params, NEVER};

/// What the token and leaky buckets share: a level that falls at `limit`
/// units per `period`, capped at `burst` units.
///
/// The level is kept in units of `1 / period` of a unit, so it falls by
/// exactly `limit` every microsecond and no division ever rounds: a unit is
/// `period_us` scaled units, the bucket holds `burst * period_us`.
/// For TOKEN the level is the tokens missing from a full bucket; for LEAKY
/// it is the queued work. Either way 0 is idle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub(crate) level: u128,
    pub(crate) updated_at_us: u64,
    pub(crate) limit: u64,
    pub(crate) period_us: u64,
    pub(crate) burst: u64,
}

/// Token bucket: starts full with `burst` tokens, refills continuously at
/// `limit` per `period`; a call takes `cost` tokens when it has them.
///
/// A key CL.THROTTLE changed last holds redis-cell's state instead, in the
/// same five words ([`TokenForm`]); THROTTLE.TOKEN reads it as the bucket
/// whose debt runs until redis-cell's `tat` ([`CellState::bucket_at`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenBucket(Packed);

/// What a TOKEN key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenForm {
    /// The native bucket (THROTTLE.TOKEN, THROTTLE.ALL, a missing key).
    Bucket(Bucket),
    /// redis-cell's `tat` and arguments (CL.THROTTLE).
    Cell(CellState),
}

/// Marks a [`CellState`] in the fifth word: bit 319 of the five, which a
/// bucket's 301 bits never reach. The state's words are `max_burst`,
/// `count`, `period` (as `i64` bits), then `tat` low and high (below 2^66).
const CELL_FLAG: u64 = 1 << 63;

/// Leaky bucket as a meter with a queue: holds up to `burst` units of work,
/// drains continuously at `limit` per `period`. An admitted call's
/// `retry_after` is the time for the work queued ahead of it to drain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeakyBucket(Packed);

/// A [`Bucket`] in five words: the level needs 98 bits (at most `burst *
/// period` < 2^98), the time 54, the three parameters 50, 49 and 50. All
/// three stay: a call under other parameters carries the level over (and
/// CL.THROTTLE carries the debt over in time, at the stored rate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Packed([u64; 5]);

const LEVEL_HIGH_BITS: u32 = 34;
const TIME_BITS: u32 = 54;
const LIMIT_BITS: u32 = 50;
const PERIOD_BITS: u32 = 49;

impl Packed {
    fn bucket(&self) -> Bucket {
        let mut read = Unpacker::new(&self.0);
        let low = read.take(64);
        let high = read.take(LEVEL_HIGH_BITS);
        Bucket {
            level: u128::from(high) << 64 | u128::from(low),
            updated_at_us: read.take(TIME_BITS),
            limit: read.take(LIMIT_BITS),
            period_us: read.take(PERIOD_BITS),
            burst: read.take(LIMIT_BITS),
        }
    }

    /// Packs a bucket whose fields are within the bounds the algorithms and
    /// the codec keep.
    fn pack(b: &Bucket) -> Packed {
        Packed(
            Packer::new()
                .put(b.level as u64, 64)
                .put((b.level >> 64) as u64, LEVEL_HIGH_BITS)
                .put(b.updated_at_us, TIME_BITS)
                .put(b.limit, LIMIT_BITS)
                .put(b.period_us, PERIOD_BITS)
                .put(b.burst, LIMIT_BITS)
                .finish(),
        )
    }
}

impl LeakyBucket {
    /// The bucket, as the algorithm reads it.
    pub(crate) fn bucket(&self) -> Bucket {
        self.0.bucket()
    }

    pub(crate) fn from_bucket(b: &Bucket) -> LeakyBucket {
        LeakyBucket(Packed::pack(b))
    }
}

impl TokenBucket {
    /// The state: a native bucket or redis-cell's.
    pub fn form(&self) -> TokenForm {
        let [max_burst, count, period, tat_low, tat_high] = self.0 .0;
        if tat_high & CELL_FLAG == 0 {
            return TokenForm::Bucket(self.0.bucket());
        }
        let tat_ns = u128::from(tat_high & !CELL_FLAG) << 64 | u128::from(tat_low);
        TokenForm::Cell(CellState { tat_ns, max_burst: max_burst as i64, count: count as i64, period: period as i64 })
    }

    pub(crate) fn from_bucket(b: &Bucket) -> TokenBucket {
        TokenBucket(Packed::pack(b))
    }

    /// A state that holds the invariants of [`CellState`].
    pub fn from_cell(c: &CellState) -> TokenBucket {
        let words =
            [c.max_burst as u64, c.count as u64, c.period as u64, c.tat_ns as u64, CELL_FLAG | (c.tat_ns >> 64) as u64];
        TokenBucket(Packed(words))
    }

    /// The native bucket a call with `params` at `now_us` runs on.
    fn bucket_for(&self, params: &Params, now_us: u64) -> Bucket {
        match self.form() {
            TokenForm::Bucket(bucket) => bucket,
            TokenForm::Cell(cell) => cell.bucket_at(params, now_us),
        }
    }

    /// The native bucket (tests of native states only).
    #[cfg(test)]
    pub(crate) fn bucket(&self) -> Bucket {
        match self.form() {
            TokenForm::Bucket(bucket) => bucket,
            TokenForm::Cell(cell) => panic!("a CL.THROTTLE state: {cell:?}"),
        }
    }
}

impl Limiter for TokenBucket {
    fn acquire(&mut self, params: &Params, cost: u64, now_us: u64) -> Decision {
        let mut bucket = self.bucket_for(params, now_us);
        let decision = bucket.acquire(params, cost, now_us, Kind::Token);
        if decision.allowed && cost > 0 {
            *self = TokenBucket::from_bucket(&bucket);
        }
        decision
    }

    fn refund(&mut self, params: &Params, units: u64, now_us: u64) -> Decision {
        let mut bucket = self.bucket_for(params, now_us);
        let decision = bucket.refund(params, units, now_us, Kind::Token);
        *self = TokenBucket::from_bucket(&bucket);
        decision
    }

    fn force(&mut self, params: &Params, units: u64, now_us: u64) {
        let mut bucket = self.bucket_for(params, now_us);
        bucket.force(params, units, now_us, Kind::Token);
        *self = TokenBucket::from_bucket(&bucket);
    }

    fn used(&self, params: &Params, now_us: u64) -> u64 {
        self.bucket_for(params, now_us).used(params, now_us, Kind::Token)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Token,
    Leaky,
}

/// `x * to / from` for the bounded values a bucket holds, without an
/// intermediate product beyond `u128`; rounded up or down.
fn rescale(x: u128, from: u64, to: u64, round_up: bool) -> u128 {
    let (from, to) = (u128::from(from), u128::from(to));
    let part = (x % from) * to;
    let part = if round_up { ceil_div(part, from) } else { part / from };
    (x / from) * to + part
}

impl Bucket {
    /// The level at `now` under the call's parameters. When the parameters
    /// changed since the last call, the stored level is first carried over:
    /// rescaled to the new period (rounded towards fewer tokens and more
    /// queued work, never towards admitting more) and clamped to the new
    /// burst. TOKEN keeps its tokens, LEAKY its queued work.
    fn level_at(&self, params: &Params, now: u64, kind: Kind) -> u128 {
        if self.period_us == 0 {
            return 0;
        }
        let period = params.period_us();
        let capacity = u128::from(params.burst()) * u128::from(period);
        let mut level = self.level;
        if (self.period_us, self.burst) != (period, params.burst()) {
            let old_capacity = u128::from(self.burst) * u128::from(self.period_us);
            level = match kind {
                Kind::Token => {
                    let tokens = old_capacity.saturating_sub(level);
                    capacity - rescale(tokens, self.period_us, period, false).min(capacity)
                }
                Kind::Leaky => rescale(level, self.period_us, period, true).min(capacity),
            };
        }
        let elapsed = u128::from(now.saturating_sub(self.updated_at_us));
        level.saturating_sub(elapsed * u128::from(params.limit()))
    }

    fn acquire(&mut self, params: &Params, cost: u64, now_us: u64, kind: Kind) -> Decision {
        let now = now_us.max(self.updated_at_us);
        let limit = u128::from(params.limit());
        let period = u128::from(params.period_us());
        let capacity = u128::from(params.burst()) * period;
        let level = self.level_at(params, now, kind);
        let asked = u128::from(cost) * period;
        let allowed = level + asked <= capacity;
        let level_after = if allowed { level + asked } else { level };
        let retry_after_ms = match (allowed, kind) {
            (true, Kind::Token) => 0,
            (true, Kind::Leaky) => retry_ms(ceil_div(level, limit)),
            (false, _) if cost > params.burst() => NEVER,
            (false, _) => retry_ms(ceil_div(level + asked - capacity, limit)),
        };
        if allowed && cost > 0 {
            *self = Bucket {
                level: level_after,
                updated_at_us: now,
                limit: params.limit(),
                period_us: params.period_us(),
                burst: params.burst(),
            };
        }
        let (reset_after_ms, reset_after_us) = until_idle(ceil_div(level_after, limit));
        Decision {
            allowed,
            limit: params.burst(),
            remaining: ((capacity - level_after) / period) as u64,
            retry_after_ms,
            reset_after_ms,
            reset_after_us,
        }
    }

    fn refund(&mut self, params: &Params, units: u64, now_us: u64, kind: Kind) -> Decision {
        let now = now_us.max(self.updated_at_us);
        let period = u128::from(params.period_us());
        let level = self.level_at(params, now, kind);
        let level = level - (u128::from(units) * period).min(level);
        *self = if level == 0 {
            Bucket::default()
        } else {
            Bucket {
                level,
                updated_at_us: now,
                limit: params.limit(),
                period_us: params.period_us(),
                burst: params.burst(),
            }
        };
        let limit = u128::from(params.limit());
        let capacity = u128::from(params.burst()) * period;
        let (reset_after_ms, reset_after_us) = until_idle(ceil_div(level, limit));
        Decision {
            allowed: true,
            limit: params.burst(),
            remaining: ((capacity - level) / period) as u64,
            retry_after_ms: 0,
            reset_after_ms,
            reset_after_us,
        }
    }

    /// Adds `units` of work (LEAKY) or takes `units` tokens (TOKEN) whether
    /// or not they fit, up to a full (LEAKY) or empty (TOKEN) bucket.
    fn force(&mut self, params: &Params, units: u64, now_us: u64, kind: Kind) {
        let now = now_us.max(self.updated_at_us);
        let period = u128::from(params.period_us());
        let capacity = u128::from(params.burst()) * period;
        let level = (self.level_at(params, now, kind) + u128::from(units) * period).min(capacity);
        if level > 0 {
            *self = Bucket {
                level,
                updated_at_us: now,
                limit: params.limit(),
                period_us: params.period_us(),
                burst: params.burst(),
            };
        }
    }

    /// The units in the bucket's level at `now`, rounded up.
    fn used(&self, params: &Params, now_us: u64, kind: Kind) -> u64 {
        let level = self.level_at(params, now_us.max(self.updated_at_us), kind);
        ceil_div(level, u128::from(params.period_us())) as u64
    }

    /// The parameters of the last change.
    pub(crate) fn last_params(&self) -> Option<Params> {
        Params::new(self.limit, self.period_us, Some(self.burst)).ok()
    }
}

impl Limiter for LeakyBucket {
    fn acquire(&mut self, params: &Params, cost: u64, now_us: u64) -> Decision {
        let mut bucket = self.bucket();
        let decision = bucket.acquire(params, cost, now_us, Kind::Leaky);
        if decision.allowed && cost > 0 {
            *self = LeakyBucket::from_bucket(&bucket);
        }
        decision
    }

    fn refund(&mut self, params: &Params, units: u64, now_us: u64) -> Decision {
        let mut bucket = self.bucket();
        let decision = bucket.refund(params, units, now_us, Kind::Leaky);
        *self = LeakyBucket::from_bucket(&bucket);
        decision
    }

    fn force(&mut self, params: &Params, units: u64, now_us: u64) {
        let mut bucket = self.bucket();
        bucket.force(params, units, now_us, Kind::Leaky);
        *self = LeakyBucket::from_bucket(&bucket);
    }

    fn used(&self, params: &Params, now_us: u64) -> u64 {
        self.bucket().used(params, now_us, Kind::Leaky)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::table::{run, S};

    fn params(limit: u64, period_us: u64, burst: u64) -> Params {
        Params::new(limit, period_us, Some(burst)).unwrap()
    }

    #[test]
    fn token_bucket_starts_full_and_refills_continuously() {
        // 10 per second, burst 5: one token every 100 ms.
        run::<TokenBucket>(
            params(10, S, 5),
            &[
                (0, 0, true, 5, 0, 0),
                (0, 5, true, 0, 0, 500),
                (0, 1, false, 0, 100, 500),
                (50_000, 1, false, 0, 50, 450),
                (100_000, 1, true, 0, 0, 500),
                (350_000, 2, true, 0, 0, 450),
                (350_000, 6, false, 0, NEVER, 450),
                (2 * S, 0, true, 5, 0, 0),
            ],
        );
    }

    #[test]
    fn token_bucket_rate_is_exact_with_odd_periods() {
        // 3 per 7 ms: 7/3 ms per token, not representable in µs.
        let p = params(3, 7_000, 3);
        let mut state = TokenBucket::default();
        let mut admitted = 0u64;
        for t in 0..7_000_000u64 {
            if state.acquire(&p, 1, t).allowed {
                admitted += 1;
            }
        }
        // A full bucket of 3, then exactly 3 per 7 ms for 7 s.
        assert_eq!(admitted, 3 + 3 * 1000 - 1);
    }

    #[test]
    fn leaky_bucket_queues_work_at_the_leak_rate() {
        // Drains 10 per second; up to 3 units of work queued.
        run::<LeakyBucket>(
            params(10, S, 3),
            &[
                (0, 0, true, 3, 0, 0),
                (0, 1, true, 2, 0, 100),
                (0, 1, true, 1, 100, 200),
                (0, 1, true, 0, 200, 300),
                (0, 1, false, 0, 100, 300),
                (100_000, 1, true, 0, 200, 300),
                (100_000, 4, false, 0, NEVER, 300),
                (S, 0, true, 3, 0, 0),
            ],
        );
    }

    #[test]
    fn smaller_burst_clamps_and_period_change_rescales() {
        let mut token = TokenBucket::default();
        token.acquire(&params(10, S, 10), 2, 0);
        // 8 tokens left; burst 5 holds 5.
        assert_eq!(token.acquire(&params(10, S, 5), 0, 0).remaining, 5);
        // Same rate written per minute: 8 tokens stay 8.
        assert_eq!(token.acquire(&params(600, 60 * S, 10), 0, 0).remaining, 8);

        let mut leaky = LeakyBucket::default();
        leaky.acquire(&params(10, S, 10), 8, 0);
        let d = leaky.acquire(&params(10, S, 5), 0, 0);
        assert_eq!((d.remaining, d.reset_after_ms), (0, 500));
        assert_eq!(leaky.acquire(&params(600, 60 * S, 10), 0, 0).remaining, 2);
    }

    #[test]
    fn refund_puts_tokens_back_up_to_a_full_bucket() {
        let p = params(10, S, 5);
        let mut token = TokenBucket::default();
        token.acquire(&p, 4, 0);
        let d = token.refund(&p, 2, 0);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 3, 200));
        let d = token.refund(&p, 9, 0);
        assert_eq!((d.remaining, d.reset_after_ms), (5, 0));
        assert_eq!(token, TokenBucket::default());

        let mut leaky = LeakyBucket::default();
        leaky.acquire(&p, 3, 0);
        let d = leaky.refund(&p, 1, 0);
        assert_eq!((d.remaining, d.retry_after_ms, d.reset_after_ms), (3, 0, 200));
    }

    #[test]
    fn extreme_parameters_do_not_overflow() {
        use super::super::{MAX_LIMIT, MAX_PERIOD_US, MAX_TIME_US};
        let p = params(MAX_LIMIT, MAX_PERIOD_US, MAX_LIMIT);
        let mut token = TokenBucket::default();
        let d = token.acquire(&p, MAX_LIMIT, MAX_TIME_US);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 0, MAX_PERIOD_US / 1000));
        let d = token.acquire(&p, 1, MAX_TIME_US);
        // One token takes MAX_PERIOD_US / MAX_LIMIT < 1 µs: the wait rounds up to 1 ms.
        const { assert!(MAX_PERIOD_US < MAX_LIMIT) };
        assert_eq!(d.retry_after_ms, 1);
        let slow = params(1, 1_000, 3650 * 86_400 * 1000);
        let mut leaky = LeakyBucket::default();
        let d = leaky.acquire(&slow, 3650 * 86_400 * 1000, 0);
        assert_eq!(d.reset_after_ms, MAX_PERIOD_US / 1000);
    }
}
