//! Quotas and limits: what a key may admit, checked when they are made.

use std::num::NonZeroU64;
use std::time::Duration;

/// `limit` units per `period`: the quota every THROTTLE command takes.
///
/// A quota that the module would refuse cannot be built with
/// [`Quota::new`]: the limit is never zero (a [`NonZeroU64`]) and the
/// period is a whole number of milliseconds from 1 ms to 3650 days.
///
/// ```
/// use std::num::NonZeroU64;
/// use std::time::Duration;
/// use redis_throttle_client::Quota;
///
/// let ten = NonZeroU64::new(10).unwrap();
/// assert_eq!(Quota::per_second(ten).period(), Duration::from_secs(1));
/// assert_eq!(Quota::new(ten, Duration::from_millis(250)).map(|q| q.limit()), Some(10));
/// assert_eq!(Quota::new(ten, Duration::from_micros(1500)), None, "not whole milliseconds");
/// assert_eq!(Quota::new(ten, Duration::ZERO), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: NonZeroU64,
    period_ms: u64,
}

impl Quota {
    /// The largest `limit` (and `BURST`, `TALLY`) the module takes: 10^15.
    pub const MAX_LIMIT: u64 = 1_000_000_000_000_000;
    /// The longest period (and ban) the module takes: 3650 days.
    pub const MAX_PERIOD: Duration = Duration::from_secs(3650 * 86_400);

    /// `limit` units per `period`, or `None` when the module would refuse
    /// it: `limit` above [`Quota::MAX_LIMIT`], `period` not a whole number
    /// of milliseconds from 1 ms to [`Quota::MAX_PERIOD`].
    pub fn new(limit: NonZeroU64, period: Duration) -> Option<Quota> {
        let period_ms = whole_ms(period)?;
        (limit.get() <= Quota::MAX_LIMIT).then_some(Quota { limit, period_ms })
    }

    /// `limit` units per second. A `limit` above [`Quota::MAX_LIMIT`] is
    /// refused by the server, with an error naming `limit`.
    pub const fn per_second(limit: NonZeroU64) -> Quota {
        Quota { limit, period_ms: 1_000 }
    }

    /// `limit` units per minute.
    pub const fn per_minute(limit: NonZeroU64) -> Quota {
        Quota { limit, period_ms: 60_000 }
    }

    /// `limit` units per hour.
    pub const fn per_hour(limit: NonZeroU64) -> Quota {
        Quota { limit, period_ms: 3_600_000 }
    }

    /// `limit` units per day.
    pub const fn per_day(limit: NonZeroU64) -> Quota {
        Quota { limit, period_ms: 86_400_000 }
    }

    /// Units per period.
    pub const fn limit(&self) -> u64 {
        self.limit.get()
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms)
    }

    /// The period as the module reads it (`1500ms`).
    pub(crate) fn period_arg(&self) -> String {
        format!("{}ms", self.period_ms)
    }
}

/// A duration as whole milliseconds from 1 ms to [`Quota::MAX_PERIOD`].
pub(crate) fn whole_ms(d: Duration) -> Option<u64> {
    let ms = u64::try_from(d.as_millis()).ok()?;
    (d.subsec_nanos().is_multiple_of(1_000_000) && ms >= 1 && d <= Quota::MAX_PERIOD).then_some(ms)
}

/// How `THROTTLE.SLIDING` counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Sliding {
    /// The sliding-window counter: the previous window weighted by its
    /// overlap (constant memory). The module's default.
    #[default]
    Estimate,
    /// The same estimate with the previous window's share rounded down to
    /// whole units (`FLOOR`): a client keeping exactly to the rate is
    /// admitted.
    Floor,
    /// An exact sliding log (`EXACT`): in every interval of one period at
    /// most `limit` units; memory grows with the calls in the window.
    Exact,
}

/// Which command counts the units, with its own options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `THROTTLE.FIXED`: a window opened by the first call.
    Fixed,
    /// `THROTTLE.SLIDING`, in one of its modes.
    Sliding(Sliding),
    /// `THROTTLE.TOKEN`: a bucket of `burst` tokens (default: the limit)
    /// refilled continuously at the quota's rate.
    Token {
        /// The bucket's capacity; `None`: the quota's limit.
        burst: Option<NonZeroU64>,
    },
    /// `THROTTLE.LEAKY`: a bucket of `burst` units of queued work (default:
    /// the limit) drained at the quota's rate.
    Leaky {
        /// The bucket's capacity; `None`: the quota's limit.
        burst: Option<NonZeroU64>,
    },
}

impl Algorithm {
    /// The command that runs it alone.
    pub const fn command(self) -> &'static str {
        match self {
            Algorithm::Fixed => "THROTTLE.FIXED",
            Algorithm::Sliding(_) => "THROTTLE.SLIDING",
            Algorithm::Token { .. } => "THROTTLE.TOKEN",
            Algorithm::Leaky { .. } => "THROTTLE.LEAKY",
        }
    }

    /// Its name in a `THROTTLE.ALL` spec.
    pub(crate) const fn spec_name(self) -> &'static str {
        match self {
            Algorithm::Fixed => "FIXED",
            Algorithm::Sliding(_) => "SLIDING",
            Algorithm::Token { .. } => "TOKEN",
            Algorithm::Leaky { .. } => "LEAKY",
        }
    }

    /// True for TOKEN and LEAKY, whose `limit` in a reply is the burst.
    pub const fn is_bucket(self) -> bool {
        matches!(self, Algorithm::Token { .. } | Algorithm::Leaky { .. })
    }
}

/// An algorithm and its quota: one limit, as a command or a `THROTTLE.ALL`
/// spec runs it. Switching algorithm changes the constructor only.
///
/// ```
/// use std::num::NonZeroU64;
/// use redis_throttle_client::{Algorithm, Limit, Quota};
///
/// let quota = Quota::per_minute(NonZeroU64::new(60).unwrap());
/// let smooth = Limit::token_burst(quota, NonZeroU64::new(10).unwrap());
/// assert_eq!(smooth.algorithm.command(), "THROTTLE.TOKEN");
/// assert_eq!(Limit::sliding_exact(quota).quota.limit(), 60);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    /// The command and its options.
    pub algorithm: Algorithm,
    /// Units per period.
    pub quota: Quota,
}

impl Limit {
    /// `THROTTLE.FIXED`.
    pub const fn fixed(quota: Quota) -> Limit {
        Limit { algorithm: Algorithm::Fixed, quota }
    }

    /// `THROTTLE.SLIDING`, the estimate.
    pub const fn sliding(quota: Quota) -> Limit {
        Limit { algorithm: Algorithm::Sliding(Sliding::Estimate), quota }
    }

    /// `THROTTLE.SLIDING ... FLOOR`.
    pub const fn sliding_floor(quota: Quota) -> Limit {
        Limit { algorithm: Algorithm::Sliding(Sliding::Floor), quota }
    }

    /// `THROTTLE.SLIDING ... EXACT`.
    pub const fn sliding_exact(quota: Quota) -> Limit {
        Limit { algorithm: Algorithm::Sliding(Sliding::Exact), quota }
    }

    /// `THROTTLE.TOKEN`, a burst of the quota's limit.
    pub const fn token(quota: Quota) -> Limit {
        Limit { algorithm: Algorithm::Token { burst: None }, quota }
    }

    /// `THROTTLE.TOKEN ... BURST b`.
    pub const fn token_burst(quota: Quota, burst: NonZeroU64) -> Limit {
        Limit { algorithm: Algorithm::Token { burst: Some(burst) }, quota }
    }

    /// `THROTTLE.LEAKY`, a burst of the quota's limit.
    pub const fn leaky(quota: Quota) -> Limit {
        Limit { algorithm: Algorithm::Leaky { burst: None }, quota }
    }

    /// `THROTTLE.LEAKY ... BURST b`.
    pub const fn leaky_burst(quota: Quota, burst: NonZeroU64) -> Limit {
        Limit { algorithm: Algorithm::Leaky { burst: Some(burst) }, quota }
    }

    /// `limit period` and the algorithm's own options (`EXACT`, `FLOOR`,
    /// `BURST b`), as a command or a spec takes them after the key.
    pub(crate) fn args(&self) -> Vec<String> {
        let mut args = vec![self.quota.limit().to_string(), self.quota.period_arg()];
        match self.algorithm {
            Algorithm::Sliding(Sliding::Exact) => args.push("EXACT".into()),
            Algorithm::Sliding(Sliding::Floor) => args.push("FLOOR".into()),
            Algorithm::Token { burst: Some(b) } | Algorithm::Leaky { burst: Some(b) } => {
                args.extend(["BURST".into(), b.get().to_string()]);
            }
            _ => {}
        }
        args
    }
}
