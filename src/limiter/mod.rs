//! The rate-limiting algorithms, free of Redis.
//!
//! Every algorithm is a small state value with one entry point,
//! [`Limiter::acquire`]: time comes in as Unix microseconds, the answer is a
//! [`Decision`], and the state changes only when units are taken. Arithmetic
//! is exact in integers (`u128` where a product could overflow `u64`), so
//! nothing drifts and nothing overflows within the bounds below.

mod bucket;
pub mod cell;
mod fixed;
mod lease;
mod pack;
mod penalty;
#[cfg(test)]
mod proptests;
mod sliding;
mod sliding_log;

pub use bucket::{Bucket, LeakyBucket, TokenBucket, TokenForm};
pub use fixed::FixedWindow;
pub use lease::{
    valid_lease_us, Effect, Lease, LeaseOutcome, LeaseParamError, LeaseParams, Leases, Token, LATEST_END_US,
    MAX_HOLDERS, MAX_TOKEN_LEN,
};
pub use penalty::{Ban, Detail, Escalation, Penalized, Rules};
pub(crate) use sliding::Counts;
pub use sliding::SlidingWindow;
pub(crate) use sliding_log::Entry;
pub use sliding_log::SlidingLog;

/// Largest `limit`, `BURST` and `COST`: 10^15, so every count is exact in a
/// double-precision float too (JavaScript and Lua clients read it exactly).
pub const MAX_LIMIT: u64 = 1_000_000_000_000_000;
/// Longest `period`: 3650 days, in microseconds.
pub const MAX_PERIOD_US: u64 = 3650 * 86_400 * 1_000_000;
/// Shortest `period`: one millisecond, in microseconds.
pub const MIN_PERIOD_US: u64 = 1_000;
/// Latest `AT`: 10^16 µs after the Unix epoch (the year 2286).
pub const MAX_TIME_US: u64 = 10_000_000_000_000_000;
/// `retry_after` when the call can never be admitted (it asks for more than
/// the limit or burst).
pub const NEVER: i64 = -1;

/// A validated quota: `limit` units per `period`, and for the buckets a
/// capacity of `burst` units (equal to `limit` for the windows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    limit: u64,
    period_us: u64,
    burst: u64,
    /// SLIDING only: the previous window's weighted count is rounded down
    /// before it is compared (`FLOOR`, as the Python library limits
    /// counts), instead of compared exactly.
    floor_previous: bool,
}

/// Why a set of parameters is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamError {
    Limit,
    Period,
    Burst,
    /// Refilling (TOKEN) or draining (LEAKY) a full bucket would take longer
    /// than [`MAX_PERIOD_US`], so `reset_after` could not be represented.
    BurstTooSlow,
}

impl Params {
    /// Checks every bound; `burst` defaults to `limit`.
    pub fn new(limit: u64, period_us: u64, burst: Option<u64>) -> Result<Params, ParamError> {
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ParamError::Limit);
        }
        // Whole ms, as every command writes a period: SLIDING stores it so.
        if !(MIN_PERIOD_US..=MAX_PERIOD_US).contains(&period_us) || !period_us.is_multiple_of(1_000) {
            return Err(ParamError::Period);
        }
        let burst = burst.unwrap_or(limit);
        if !(1..=MAX_LIMIT).contains(&burst) {
            return Err(ParamError::Burst);
        }
        let params = Params { limit, period_us, burst, floor_previous: false };
        if params.full_bucket_us() > u128::from(MAX_PERIOD_US) {
            return Err(ParamError::BurstTooSlow);
        }
        Ok(params)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn period_us(&self) -> u64 {
        self.period_us
    }

    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The same quota, with SLIDING's previous window counted in whole
    /// units rounded down (`FLOOR`).
    pub fn with_floor_previous(self) -> Params {
        Params { floor_previous: true, ..self }
    }

    pub fn floor_previous(&self) -> bool {
        self.floor_previous
    }

    /// Microseconds a bucket takes to refill (or drain) completely.
    fn full_bucket_us(&self) -> u128 {
        ceil_div(u128::from(self.burst) * u128::from(self.period_us), u128::from(self.limit))
    }
}

/// The answer to one call: the five integers of the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The most units the key can admit at once (limit, or burst).
    pub limit: u64,
    /// Units still admissible right now, after this call.
    pub remaining: u64,
    /// Milliseconds to wait before acting, rounded up; [`NEVER`] if never.
    pub retry_after_ms: i64,
    /// Milliseconds until the key is idle again, rounded up; 0 if it is.
    pub reset_after_ms: u64,
    /// The same in exact microseconds: the key's expiry instant is computed
    /// from it, so that every call of one window names the same instant.
    pub reset_after_us: u64,
}

/// One algorithm's state for one key.
pub trait Limiter: Default + Clone {
    /// Decides a call asking for `cost` units at `now_us`. The state changes
    /// only when the call is admitted with `cost > 0`; a denied call or a
    /// peek (`cost == 0`) leaves it exactly as it was.
    fn acquire(&mut self, params: &Params, cost: u64, now_us: u64) -> Decision;

    /// What [`Limiter::acquire`] would answer, changing nothing. States
    /// that hold more than a few words answer without copying themselves.
    fn check(&self, params: &Params, cost: u64, now_us: u64) -> Decision {
        self.clone().acquire(params, cost, now_us)
    }

    /// Gives `units` back at `now_us`: the state moves towards idle, never
    /// past it. Always admitted; a reply with `reset_after_ms == 0` means
    /// the key is idle and can be deleted.
    fn refund(&mut self, params: &Params, units: u64, now_us: u64) -> Decision;

    /// Takes `units` at `now_us` whether or not they fit (`FORCE`, and
    /// refused units that count): the windows' counts may pass the limit,
    /// up to [`MAX_LIMIT`]; a bucket holds at most its burst, so what does
    /// not fit in it is not kept.
    fn force(&mut self, params: &Params, units: u64, now_us: u64);

    /// The units the key counts against its limit at `now_us` (rounded up
    /// where the state is fractional), beyond the limit included.
    fn used(&self, params: &Params, now_us: u64) -> u64;
}

pub(crate) fn ceil_div(numerator: u128, denominator: u128) -> u128 {
    numerator.div_ceil(denominator)
}

/// Microseconds to whole milliseconds, rounded up (saturating; the bounds
/// above keep every real value far below `i64::MAX`).
pub(crate) fn ms_ceil(us: u128) -> u64 {
    u64::try_from(us.div_ceil(1_000)).unwrap_or(u64::MAX)
}

/// `reset_after` from its exact value in µs: as the reply rounds it (up,
/// in ms), and exact.
pub(crate) fn until_idle(us: u128) -> (u64, u64) {
    (ms_ceil(us), u64::try_from(us).unwrap_or(u64::MAX))
}

pub(crate) fn retry_ms(us: u128) -> i64 {
    i64::try_from(ms_ceil(us)).unwrap_or(i64::MAX)
}

/// What the algorithms' table-driven tests share.
#[cfg(test)]
pub(crate) mod table {
    use super::{Limiter, Params};

    pub(crate) const S: u64 = 1_000_000;

    /// A quota for the windows: `limit` per `period_us`.
    pub(crate) fn quota(limit: u64, period_us: u64) -> Params {
        Params::new(limit, period_us, None).unwrap()
    }

    /// (at µs, cost, allowed, remaining, retry_after, reset_after)
    pub(crate) type Step = (u64, u64, bool, u64, i64, u64);

    /// Runs the steps on a fresh state, checking every reply (its `limit`
    /// field is the burst, which is the limit for the windows).
    pub(crate) fn run<L: Limiter>(p: Params, steps: &[Step]) -> L {
        let mut state = L::default();
        for (i, &(at, cost, allowed, remaining, retry, reset)) in steps.iter().enumerate() {
            let d = state.acquire(&p, cost, at);
            assert_eq!(
                (d.allowed, d.limit, d.remaining, d.retry_after_ms, d.reset_after_ms),
                (allowed, p.burst(), remaining, retry, reset),
                "step {i}"
            );
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_bounds() {
        type Case = (u64, u64, Option<u64>, Result<(), ParamError>);
        let cases: &[Case] = &[
            (1, MIN_PERIOD_US, None, Ok(())),
            (MAX_LIMIT, MAX_PERIOD_US, None, Ok(())),
            (0, 1_000_000, None, Err(ParamError::Limit)),
            (MAX_LIMIT + 1, 1_000_000, None, Err(ParamError::Limit)),
            (1, MIN_PERIOD_US - 1, None, Err(ParamError::Period)),
            (1, MAX_PERIOD_US + 1, None, Err(ParamError::Period)),
            (1, 1_500, None, Err(ParamError::Period)),
            (1, MAX_PERIOD_US - 1, None, Err(ParamError::Period)),
            (1, 1_000_000, Some(0), Err(ParamError::Burst)),
            (1, 1_000_000, Some(MAX_LIMIT + 1), Err(ParamError::Burst)),
            (1, MAX_PERIOD_US, Some(2), Err(ParamError::BurstTooSlow)),
            (1, 1_000_000, Some(3650 * 86_400), Ok(())),
            (1, 1_000_000, Some(3650 * 86_400 + 1), Err(ParamError::BurstTooSlow)),
            (MAX_LIMIT, MAX_PERIOD_US, Some(MAX_LIMIT), Ok(())),
        ];
        for (i, (limit, period, burst, want)) in cases.iter().enumerate() {
            let got = Params::new(*limit, *period, *burst).map(|_| ());
            assert_eq!(got, *want, "case {i}");
        }
    }

    /// What each key's state costs is what the server allocates for it
    /// (docs/performance.md): a word more moves a key into the next size
    /// class.
    #[test]
    fn states_stay_packed() {
        assert_eq!(std::mem::size_of::<FixedWindow>(), 16);
        assert_eq!(std::mem::size_of::<SlidingWindow>(), 24);
        assert_eq!(std::mem::size_of::<TokenBucket>(), 40);
        assert_eq!(std::mem::size_of::<LeakyBucket>(), 40);
    }

    #[test]
    fn rounding() {
        assert_eq!(ms_ceil(0), 0);
        assert_eq!(ms_ceil(1), 1);
        assert_eq!(ms_ceil(1_000), 1);
        assert_eq!(ms_ceil(1_001), 2);
        assert_eq!(ms_ceil(u128::MAX), u64::MAX);
    }
}
