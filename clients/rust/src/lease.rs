//! Leases: `THROTTLE.ACQUIRE`, `THROTTLE.RELEASE` and `THROTTLE.RENEW`, a
//! counting semaphore whose slots end by themselves.

use std::fmt;
use std::num::NonZeroU32;
use std::time::{Duration, SystemTime};

use redis::Cmd;

use crate::client::{Connection, Throttle};
use crate::error::Error;
use crate::options::at_args;
use crate::quota::whole_ms;
use crate::reply;

/// The name of a lease: 1 to 64 bytes, any bytes. A token that the module
/// would refuse cannot be built.
///
/// The server makes one (32 lowercase hex digits) when the caller names
/// none; [`AcquireOptions::id`] names one ("worker-7"), which makes
/// acquiring idempotent.
///
/// ```
/// use redis_throttle_client::Token;
///
/// let token = Token::new("worker-7")?;
/// assert_eq!((token.as_bytes(), token.as_str()), (&b"worker-7"[..], Some("worker-7")));
/// assert!(Token::new("").is_err());
/// assert!(Token::new("x".repeat(65)).is_err());
/// assert_eq!(Token::try_from(vec![0xff, 0x00])?.as_str(), None, "any bytes");
/// # Ok::<(), redis_throttle_client::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(Vec<u8>);

impl Token {
    /// The longest token the module takes, in bytes.
    pub const MAX_LEN: usize = 64;

    /// `bytes` as a token, or [`Error::InvalidArgument`] naming `token`
    /// when it is empty or longer than [`Token::MAX_LEN`] bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Token, Error> {
        let bytes = bytes.into();
        if bytes.is_empty() || bytes.len() > Token::MAX_LEN {
            return Err(Error::invalid(
                "token",
                format!("{} bytes; a token has 1 to {} bytes", bytes.len(), Token::MAX_LEN),
            ));
        }
        Ok(Token(bytes))
    }

    /// The token's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The token as text, when it is UTF-8 (a token the server made is:
    /// hex digits).
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The token's bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

impl AsRef<[u8]> for Token {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token(\"{}\")", self.0.escape_ascii())
    }
}

/// The token as text; bytes that are not UTF-8 show as U+FFFD.
impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl TryFrom<&str> for Token {
    type Error = Error;
    fn try_from(s: &str) -> Result<Token, Error> {
        Token::new(s)
    }
}

impl TryFrom<String> for Token {
    type Error = Error;
    fn try_from(s: String) -> Result<Token, Error> {
        Token::new(s)
    }
}

impl TryFrom<&[u8]> for Token {
    type Error = Error;
    fn try_from(b: &[u8]) -> Result<Token, Error> {
        Token::new(b)
    }
}

impl TryFrom<Vec<u8>> for Token {
    type Error = Error;
    fn try_from(b: Vec<u8>) -> Result<Token, Error> {
        Token::new(b)
    }
}

/// The options of a [`THROTTLE.ACQUIRE`](Throttle::acquire): `ID`, `BLOCK`,
/// `AT`. The default takes a slot now, with a token the server makes, and
/// does not wait.
///
/// ```
/// use std::time::Duration;
/// use redis_throttle_client::{AcquireOptions, Token};
///
/// let opts = AcquireOptions::new().id(Token::new("worker-7")?).block(Duration::from_secs(10));
/// assert_eq!(opts.clone(), opts);
/// # Ok::<(), redis_throttle_client::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AcquireOptions {
    id: Option<Token>,
    block: Option<Duration>,
    at: Option<SystemTime>,
}

impl AcquireOptions {
    /// The most holders a lease key takes: the largest `limit` of
    /// [`acquire`](Throttle::acquire).
    pub const MAX_HOLDERS: u32 = 100_000;

    /// The longest `BLOCK` wait (3650 days).
    pub const MAX_BLOCK: Duration = Duration::from_millis(315_360_000_000);

    /// A slot now, a token the server makes, no waiting.
    pub const fn new() -> AcquireOptions {
        AcquireOptions { id: None, block: None, at: None }
    }

    /// `ID token`: the caller names the lease. Acquiring with a token that
    /// already holds a lease on the key renews that lease (it now ends
    /// `lease` from now) and is admitted without needing a free slot, so
    /// a worker that names its lease can acquire again (after a restart,
    /// a retry) without taking a second slot.
    pub fn id(mut self, token: Token) -> AcquireOptions {
        self.id = Some(token);
        self
    }

    /// `BLOCK ms`: when every slot is taken, wait on the server up to
    /// `timeout` (rounded up to milliseconds, at most
    /// [`MAX_BLOCK`](AcquireOptions::MAX_BLOCK)) for one; waiters of a key
    /// are let in in arrival order, the moment a slot frees.
    /// `Duration::ZERO` does not wait. A call with [`at`](AcquireOptions::at)
    /// answers at once.
    ///
    /// The connection's response timeout must be longer than `timeout`
    /// (redis' async connections default to 500 ms), and a multiplexed
    /// connection's other calls queue behind a waiting one: give waiting
    /// calls their own connection.
    pub fn block(mut self, timeout: Duration) -> AcquireOptions {
        self.block = if timeout.is_zero() { None } else { Some(timeout) };
        self
    }

    /// `BLOCK 0`: wait for a slot without time-out.
    pub fn block_forever(mut self) -> AcquireOptions {
        self.block = Some(Duration::ZERO);
        self
    }

    /// `AT µs`: the call happens at `time` instead of on the server's
    /// clock, for tests and replays. Such a call does not wait.
    pub fn at(mut self, time: SystemTime) -> AcquireOptions {
        self.at = Some(time);
        self
    }

    fn args(&self, cmd: &mut Cmd) -> Result<(), Error> {
        if let Some(id) = &self.id {
            cmd.arg("ID").arg(id.as_bytes());
        }
        if let Some(block) = self.block {
            if block > AcquireOptions::MAX_BLOCK {
                return Err(Error::invalid("BLOCK", format!("{block:?} is longer than 3650 days")));
            }
            let ms = block.as_millis() + u128::from(!block.subsec_nanos().is_multiple_of(1_000_000));
            cmd.arg("BLOCK").arg(ms.to_string());
        }
        let mut at = Vec::new();
        at_args(self.at, &mut at)?;
        cmd.arg(at);
        Ok(())
    }
}

/// `lease` as the module reads it (`1500ms`), or an error naming `lease`.
fn lease_arg(lease: Duration) -> Result<String, Error> {
    let ms = whole_ms(lease).ok_or_else(|| {
        Error::invalid("lease", format!("{lease:?} is not a whole number of milliseconds from 1 ms to 3650 days"))
    })?;
    Ok(format!("{ms}ms"))
}

/// The refusal of an acquisition: every slot was taken (and a `BLOCK`
/// waiter's time ran out first). Being refused is a normal outcome, not an
/// [`Error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Refused {
    /// The call's `limit`: the most holders at once.
    pub limit: u32,
    /// Free slots: 0.
    pub remaining: u32,
    /// Until enough leases end for a slot to free, if none is released
    /// first: the same call this much later is admitted if nothing else
    /// happens in between.
    pub retry_after: Duration,
    /// Until the key's last lease ends (its TTL).
    pub reset_after: Duration,
}

/// What an acquisition got: `T` (a [`Lease`], or what
/// [`with_lease`](Throttle::with_lease)'s work returned) or a [`Refused`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Admission<T> {
    /// A slot was free (or the `ID` already held one).
    Admitted(T),
    /// Every slot was taken.
    Refused(Refused),
}

impl<T> Admission<T> {
    /// True when admitted.
    pub fn is_admitted(&self) -> bool {
        matches!(self, Admission::Admitted(_))
    }

    /// The admitted value, if any.
    pub fn admitted(self) -> Option<T> {
        match self {
            Admission::Admitted(t) => Some(t),
            Admission::Refused(_) => None,
        }
    }

    /// The refusal, if refused.
    pub fn refused(&self) -> Option<&Refused> {
        match self {
            Admission::Admitted(_) => None,
            Admission::Refused(r) => Some(r),
        }
    }

    /// `Ok(admitted)` or `Err(refusal)`, for `?` and `let ... else`.
    pub fn into_result(self) -> Result<T, Refused> {
        match self {
            Admission::Admitted(t) => Ok(t),
            Admission::Refused(r) => Err(r),
        }
    }
}

/// A slot held: the key, the lease's token and the reply's fields.
///
/// The slot is held until [`release`](Lease::release)d or until the lease
/// ends by itself; [`renew`](Lease::renew) keeps it longer. Dropping a
/// `Lease` does **not** release it (a drop cannot wait for Redis): release
/// it explicitly, or let [`Throttle::with_lease`] do it.
#[must_use = "a lease holds its slot until it is released or ends by itself"]
pub struct Lease<C> {
    throttle: Throttle<C>,
    key: String,
    token: Token,
    limit: u32,
    remaining: u32,
    reset_after: Duration,
}

/// The key, the token and the fields; not the connection (a cluster
/// connection has no `Debug`).
impl<C> fmt::Debug for Lease<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining)
            .field("reset_after", &self.reset_after)
            .finish_non_exhaustive()
    }
}

impl<C: Connection> Lease<C> {
    /// The key whose slot this is.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease's token: the `ID` the call named, or the one the server
    /// made. `throttle.release(key, token)` from anywhere releases it.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The call's `limit`: the most holders at once.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Free slots right after this acquisition.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Until the key's last lease ends (its TTL), as of this acquisition.
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// `THROTTLE.RENEW key token lease`: the lease now ends `lease` from
    /// now (a heartbeat for long work). False when it no longer held its
    /// slot (it ended: stop the work, or acquire again); then nothing
    /// changed.
    pub async fn renew(&self, lease: Duration) -> Result<bool, Error> {
        self.throttle.renew(&self.key, &self.token, lease).await
    }

    /// `THROTTLE.RELEASE key token`: gives the slot back (the key's first
    /// waiter is let in). False when the lease had already ended; it then
    /// held nothing, and nothing changed.
    pub async fn release(self) -> Result<bool, Error> {
        self.throttle.release(&self.key, &self.token).await
    }

    /// The token, keeping the slot: the lease is then released by token
    /// ([`Throttle::release`]), perhaps by another process, or ends by itself.
    pub fn into_token(self) -> Token {
        self.token
    }
}

/// While armed, releases the lease when dropped (an error or panic of the
/// work unwinding, or `with_lease`'s future dropped) by spawning the
/// release on the current tokio runtime.
struct ReleaseOnDrop<'a, C: Connection> {
    lease: &'a Lease<C>,
    armed: bool,
}

impl<C: Connection> Drop for ReleaseOnDrop<'_, C> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Without a runtime (dropped outside one) nothing can be sent: the
        // lease then ends by itself.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (throttle, key, token) =
                (self.lease.throttle.clone(), self.lease.key.clone(), self.lease.token.clone());
            runtime.spawn(async move {
                // A failure leaves the lease to end by itself.
                let _ = throttle.release(&key, &token).await;
            });
        }
    }
}

impl<C: Connection> Throttle<C> {
    /// `THROTTLE.ACQUIRE key limit lease [ID token] [BLOCK ms] [AT µs]`:
    /// one of `limit` slots of `key` for `lease` (whole milliseconds from
    /// 1 ms to 3650 days), or the refusal when every slot is taken.
    ///
    /// Arguments the module would refuse (`limit` above
    /// [`MAX_HOLDERS`](AcquireOptions::MAX_HOLDERS), a `lease` of zero,
    /// not whole milliseconds or above 3650 days, a `BLOCK` above 3650
    /// days, a time before 1970) are an [`Error::InvalidArgument`] naming
    /// them, before anything is sent. A key holding a rate limiter or another type is
    /// `WRONGTYPE` ([`Error::Redis`]).
    ///
    /// ```no_run
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use redis_throttle_client::{AcquireOptions, Admission, Throttle};
    ///
    /// # async fn run(throttle: Throttle<redis::aio::MultiplexedConnection>) -> Result<(), redis_throttle_client::Error> {
    /// let three = NonZeroU32::new(3).unwrap();
    /// match throttle.acquire("api:vendor", three, Duration::from_secs(30), &AcquireOptions::new()).await? {
    ///     Admission::Admitted(lease) => {
    ///         println!("slot {} of {}; {} free", lease.token(), lease.limit(), lease.remaining());
    ///         // ... call the vendor's API ...
    ///         lease.release().await?;
    ///     }
    ///     Admission::Refused(refused) => println!("busy; a slot frees in {:?}", refused.retry_after),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(
        &self,
        key: &str,
        limit: NonZeroU32,
        lease: Duration,
        options: &AcquireOptions,
    ) -> Result<Admission<Lease<C>>, Error> {
        const COMMAND: &str = "THROTTLE.ACQUIRE";
        if limit.get() > AcquireOptions::MAX_HOLDERS {
            return Err(Error::invalid(
                "limit",
                format!("{limit} is above {}, the most holders", AcquireOptions::MAX_HOLDERS),
            ));
        }
        let mut cmd = redis::cmd(COMMAND);
        cmd.arg(key).arg(limit.get()).arg(lease_arg(lease)?);
        options.args(&mut cmd)?;
        let reply = self.query(COMMAND, key, &cmd).await?;
        let acquired = reply::acquire(&reply)?;
        Ok(match acquired.token {
            Some(token) => Admission::Admitted(Lease {
                throttle: self.clone(),
                key: key.to_string(),
                token,
                limit: acquired.limit,
                remaining: acquired.remaining,
                reset_after: acquired.reset_after,
            }),
            None => Admission::Refused(Refused {
                limit: acquired.limit,
                remaining: acquired.remaining,
                retry_after: acquired.retry_after,
                reset_after: acquired.reset_after,
            }),
        })
    }

    /// `THROTTLE.RELEASE key token`: ends `token`'s lease now. True when
    /// the token held a lease (its slot is free, the key's first waiter is
    /// let in); false when it did not (it ended, was released, never held
    /// one, or the key does not exist), and then nothing changed: a late
    /// release never frees another holder's slot.
    pub async fn release(&self, key: &str, token: &Token) -> Result<bool, Error> {
        self.release_at(key, token, None).await
    }

    /// `THROTTLE.RELEASE key token AT µs`: the release at `at`.
    pub async fn release_at(&self, key: &str, token: &Token, at: Option<SystemTime>) -> Result<bool, Error> {
        const COMMAND: &str = "THROTTLE.RELEASE";
        let mut args = Vec::new();
        at_args(at, &mut args)?;
        let mut cmd = redis::cmd(COMMAND);
        cmd.arg(key).arg(token.as_bytes()).arg(args);
        let reply = self.query(COMMAND, key, &cmd).await?;
        reply::held(COMMAND, &reply)
    }

    /// `THROTTLE.RENEW key token lease`: `token`'s lease now ends `lease`
    /// from now (shorter than what is left shortens it). True when the
    /// token held a lease; false (nothing changed) when it did not: a lease
    /// that has ended cannot be renewed, acquire again.
    pub async fn renew(&self, key: &str, token: &Token, lease: Duration) -> Result<bool, Error> {
        self.renew_at(key, token, lease, None).await
    }

    /// `THROTTLE.RENEW key token lease AT µs`: the renewal at `at`.
    pub async fn renew_at(
        &self,
        key: &str,
        token: &Token,
        lease: Duration,
        at: Option<SystemTime>,
    ) -> Result<bool, Error> {
        const COMMAND: &str = "THROTTLE.RENEW";
        let mut args = vec![lease_arg(lease)?];
        at_args(at, &mut args)?;
        let mut cmd = redis::cmd(COMMAND);
        cmd.arg(key).arg(token.as_bytes()).arg(args);
        let reply = self.query(COMMAND, key, &cmd).await?;
        reply::held(COMMAND, &reply)
    }

    /// Acquires a slot (as [`acquire`](Throttle::acquire)), runs `work`
    /// with the lease, and releases the slot whatever happens:
    ///
    /// - when `work` returns (its value, an `Err` included, comes back as
    ///   [`Admission::Admitted`]), the release is sent and awaited; its own
    ///   failure is not reported, since the lease then ends by itself;
    /// - when `work` panics, or this future is dropped before it is done
    ///   (a `select!`, a `timeout`), a guard spawns the release on the
    ///   current tokio runtime: it is sent shortly after, not before the
    ///   panic or drop goes on. Outside a runtime, or while it shuts down,
    ///   nothing can be sent, and the lease ends by itself after `lease`.
    ///
    /// Refused, `work` does not run and the [`Refused`] comes back. Work
    /// that may outlast `lease` renews it through the lease it is given
    /// ([`Lease::renew`]; false means the lease ended, and someone else
    /// may hold the slot).
    ///
    /// ```no_run
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use redis_throttle_client::{AcquireOptions, Admission, Lease, Throttle};
    ///
    /// # async fn run(throttle: Throttle<redis::aio::MultiplexedConnection>) -> Result<(), redis_throttle_client::Error> {
    /// # async fn export(report: u32) -> Result<usize, std::io::Error> { Ok(0) }
    /// let one = NonZeroU32::new(1).unwrap();
    /// // At most one export at a time; wait up to 10 s for the slot.
    /// let wait = AcquireOptions::new().block(Duration::from_secs(10));
    /// let outcome = throttle
    ///     .with_lease("exports", one, Duration::from_secs(60), &wait, async |lease: &Lease<_>| {
    ///         let rows = export(7).await?;
    ///         lease.renew(Duration::from_secs(60)).await.ok(); // a heartbeat, for long work
    ///         Ok::<_, std::io::Error>(rows)
    ///     })
    ///     .await?;
    /// match outcome {
    ///     Admission::Admitted(Ok(rows)) => println!("exported {rows} rows"),
    ///     Admission::Admitted(Err(e)) => println!("export failed (the slot is free again): {e}"),
    ///     Admission::Refused(r) => println!("another export runs; the slot frees in {:?}", r.retry_after),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lease<T>(
        &self,
        key: &str,
        limit: NonZeroU32,
        lease: Duration,
        options: &AcquireOptions,
        work: impl AsyncFnOnce(&Lease<C>) -> T,
    ) -> Result<Admission<T>, Error> {
        let lease = match self.acquire(key, limit, lease, options).await? {
            Admission::Admitted(lease) => lease,
            Admission::Refused(refused) => return Ok(Admission::Refused(refused)),
        };
        let mut guard = ReleaseOnDrop { lease: &lease, armed: true };
        let value = work(&lease).await;
        // Cancelled during the release, the guard sends another: a token
        // that no longer holds a lease changes nothing.
        let _ = self.release(&lease.key, &lease.token).await;
        guard.armed = false;
        Ok(Admission::Admitted(value))
    }
}
