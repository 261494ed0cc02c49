//! What a call asks besides its limit: cost, time, waiting, penalties.

use std::num::NonZeroU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Error;
use crate::quota::{whole_ms, Limit, Quota};

/// A ban: what a refused call does to its key (`BAN d`, with `RENEW` or
/// `BACKOFF max`). While a key is banned every call is refused with
/// `retry_after` = what is left of the ban; when it ends the key is idle.
///
/// Lengths are whole milliseconds from 1 ms to 3650 days; anything else is
/// an [`Error::InvalidArgument`] naming `BAN` or `BACKOFF`, before any I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ban {
    /// `BAN d`: refusals during the ban leave it as it is.
    Plain(Duration),
    /// `BAN d RENEW`: each refused call restarts the ban.
    Renew(Duration),
    /// `BAN first BACKOFF max`: each refused call doubles the ban, up to `max`.
    Backoff {
        /// The first ban's length.
        first: Duration,
        /// The longest ban, at least `first`.
        max: Duration,
    },
}

impl Ban {
    fn args(&self, out: &mut Vec<String>) -> Result<(), Error> {
        let ms = |d: Duration, name: &'static str| {
            whole_ms(d).ok_or_else(|| {
                Error::invalid(name, format!("{d:?} is not a whole number of milliseconds from 1 ms to 3650 days"))
            })
        };
        match *self {
            Ban::Plain(d) => out.extend(["BAN".into(), format!("{}ms", ms(d, "BAN")?)]),
            Ban::Renew(d) => out.extend(["BAN".into(), format!("{}ms", ms(d, "BAN")?), "RENEW".into()]),
            Ban::Backoff { first, max } => {
                let (first, max) = (ms(first, "BAN")?, ms(max, "BACKOFF")?);
                if max < first {
                    return Err(Error::invalid(
                        "BACKOFF",
                        format!("the longest ban ({max} ms) is shorter than the first ({first} ms)"),
                    ));
                }
                out.extend(["BAN".into(), format!("{first}ms"), "BACKOFF".into(), format!("{max}ms")]);
            }
        }
        Ok(())
    }
}

/// The penalties of one limit: a ban and counted refusals. The default asks
/// for none, and the reply is then exactly the five fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Penalty {
    /// A refused call bans the key.
    pub ban: Option<Ban>,
    /// `TALLY cap`: a refused call's units count against the limit all the
    /// same, up to `cap` units in the window or ban.
    pub tally: Option<NonZeroU64>,
}

impl Penalty {
    /// No penalty.
    pub const fn none() -> Penalty {
        Penalty { ban: None, tally: None }
    }

    /// A refused call bans the key.
    pub const fn ban(mut self, ban: Ban) -> Penalty {
        self.ban = Some(ban);
        self
    }

    /// Refused units count, up to `cap`.
    pub const fn tally(mut self, cap: NonZeroU64) -> Penalty {
        self.tally = Some(cap);
        self
    }

    pub(crate) fn args(&self, out: &mut Vec<String>) -> Result<(), Error> {
        if let Some(ban) = &self.ban {
            ban.args(out)?;
        }
        if let Some(cap) = self.tally {
            if cap.get() > Quota::MAX_LIMIT {
                return Err(Error::invalid("TALLY", format!("{cap} is above 10^15")));
            }
            out.extend(["TALLY".into(), cap.to_string()]);
        }
        Ok(())
    }
}

/// `AT`: the call's time instead of the server's clock, as Unix µs.
pub(crate) fn at_args(at: Option<SystemTime>, out: &mut Vec<String>) -> Result<(), Error> {
    if let Some(at) = at {
        let us = at
            .duration_since(UNIX_EPOCH)
            .map_err(|_| Error::invalid("AT", "a time before the Unix epoch".into()))?
            .as_micros();
        out.extend(["AT".into(), us.to_string()]);
    }
    Ok(())
}

fn cost_args(cost: i64, out: &mut Vec<String>) {
    if cost != 1 {
        out.extend(["COST".into(), cost.to_string()]);
    }
}

/// One call's options, built by chaining: `COST`, `AT`, `BLOCK`, the
/// penalties (`BAN`, `RENEW`, `BACKOFF`, `TALLY`), `FORCE`, `NOW` and
/// `DETAIL`. The default is a plain call of one unit on the server's clock.
///
/// ```
/// use std::num::NonZeroU64;
/// use std::time::{Duration, UNIX_EPOCH};
/// use redis_throttle_client::{Ban, Options};
///
/// let opts = Options::new()
///     .cost(2)
///     .at(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
///     .ban(Ban::Renew(Duration::from_secs(600)))
///     .tally(NonZeroU64::new(100).unwrap())
///     .detail();
/// assert_eq!(opts, opts.clone());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Options {
    cost: i64,
    at: Option<SystemTime>,
    block: Option<Duration>,
    penalty: Penalty,
    force: bool,
    ban_now: bool,
    detail: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options::new()
    }
}

impl Options {
    /// One unit, now, no waiting, no penalty.
    pub const fn new() -> Options {
        Options {
            cost: 1,
            at: None,
            block: None,
            penalty: Penalty::none(),
            force: false,
            ban_now: false,
            detail: false,
        }
    }

    /// `COST n`: units this call asks for; 0 peeks, a negative cost gives
    /// units back (a refund, always admitted).
    pub const fn cost(mut self, units: i64) -> Options {
        self.cost = units;
        self
    }

    /// `COST 0`: the reply for the key as it stands, changing nothing.
    pub const fn peek(self) -> Options {
        self.cost(0)
    }

    /// `AT µs`: the call happens at `time` instead of on the server's
    /// clock: for tests, batch replays, and deterministic time.
    pub const fn at(mut self, time: SystemTime) -> Options {
        self.at = Some(time);
        self
    }

    /// `BLOCK ms`: when the call would be refused but can succeed later,
    /// wait on the server up to `timeout` (rounded up to milliseconds) for
    /// admission. `Duration::ZERO` does not wait. A call with [`at`](Options::at)
    /// answers at once. The connection's response timeout must be longer
    /// (redis' async connections default to 500 ms), and a multiplexed
    /// connection's other calls queue behind a waiting one: give waiting
    /// calls their own connection.
    pub const fn block(mut self, timeout: Duration) -> Options {
        self.block = if timeout.is_zero() { None } else { Some(timeout) };
        self
    }

    /// `BLOCK 0`: wait without time-out.
    pub const fn block_forever(mut self) -> Options {
        self.block = Some(Duration::ZERO);
        self
    }

    /// The penalties, as [`Penalty`] holds them.
    pub const fn penalty(mut self, penalty: Penalty) -> Options {
        self.penalty = penalty;
        self
    }

    /// `BAN d` (`RENEW`, `BACKOFF max`): a refusal bans the key.
    pub const fn ban(mut self, ban: Ban) -> Options {
        self.penalty.ban = Some(ban);
        self
    }

    /// `BAN d NOW`: bans the key now, whatever it holds (a manual ban).
    pub const fn ban_now(mut self, ban: Ban) -> Options {
        self.penalty.ban = Some(ban);
        self.ban_now = true;
        self
    }

    /// `TALLY cap`: refused units count, up to `cap`.
    pub const fn tally(mut self, cap: NonZeroU64) -> Options {
        self.penalty.tally = Some(cap);
        self
    }

    /// `FORCE`: the units are taken whether or not they fit (the reply
    /// still says whether they did).
    pub const fn force(mut self) -> Options {
        self.force = true;
        self
    }

    /// `DETAIL`: the reply adds `hits`, `banned` and `next_free`
    /// ([`Decision::detail`](crate::Decision::detail)).
    pub const fn detail(mut self) -> Options {
        self.detail = true;
        self
    }

    pub(crate) const fn wants_detail(&self) -> bool {
        self.detail
    }

    /// Everything after `limit period`.
    pub(crate) fn args(&self, out: &mut Vec<String>) -> Result<(), Error> {
        cost_args(self.cost, out);
        at_args(self.at, out)?;
        if let Some(block) = self.block {
            let ms = block.as_millis() + u128::from(!block.subsec_nanos().is_multiple_of(1_000_000));
            out.extend(["BLOCK".into(), ms.to_string()]);
        }
        self.penalty.args(out)?;
        for (set, word) in [(self.force, "FORCE"), (self.ban_now, "NOW"), (self.detail, "DETAIL")] {
            if set {
                out.push(word.into());
            }
        }
        Ok(())
    }
}

/// One limit of a [`THROTTLE.ALL`](crate::Throttle::all) call: a key, its
/// limit and the penalties it applies when it is the one that refuses.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Spec {
    /// The key. In Redis Cluster every key of one call must share a hash
    /// slot: use a hash tag (`{user:42}:s`, `{user:42}:h`).
    pub key: String,
    /// The algorithm and quota.
    pub limit: Limit,
    /// What a refusal by this limit does.
    pub penalty: Penalty,
}

impl Spec {
    /// `limit` on `key`, no penalty.
    pub fn new(key: impl Into<String>, limit: Limit) -> Spec {
        Spec { key: key.into(), limit, penalty: Penalty::none() }
    }

    /// With `penalty`.
    pub fn penalty(mut self, penalty: Penalty) -> Spec {
        self.penalty = penalty;
        self
    }

    pub(crate) fn args(&self, out: &mut Vec<String>) -> Result<(), Error> {
        out.push(self.limit.algorithm.spec_name().into());
        out.push(self.key.clone());
        out.extend(self.limit.args());
        self.penalty.args(out)
    }
}

/// The options of a [`THROTTLE.ALL`](crate::Throttle::all) call, which
/// apply to every spec: `COST`, `AT`, `DETAIL`. (`BLOCK`, `FORCE` and `NOW`
/// are not taken there.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AllOptions {
    cost: i64,
    at: Option<SystemTime>,
    detail: bool,
}

impl Default for AllOptions {
    fn default() -> AllOptions {
        AllOptions::new()
    }
}

impl AllOptions {
    /// One unit, now.
    pub const fn new() -> AllOptions {
        AllOptions { cost: 1, at: None, detail: false }
    }

    /// `COST n` on every limit (0 peeks, negative refunds).
    pub const fn cost(mut self, units: i64) -> AllOptions {
        self.cost = units;
        self
    }

    /// `AT µs`.
    pub const fn at(mut self, time: SystemTime) -> AllOptions {
        self.at = Some(time);
        self
    }

    /// `DETAIL` on every limit's reply.
    pub const fn detail(mut self) -> AllOptions {
        self.detail = true;
        self
    }

    pub(crate) const fn wants_detail(&self) -> bool {
        self.detail
    }

    pub(crate) fn args(&self, out: &mut Vec<String>) -> Result<(), Error> {
        cost_args(self.cost, out);
        at_args(self.at, out)?;
        if self.detail {
            out.push("DETAIL".into());
        }
        Ok(())
    }
}
