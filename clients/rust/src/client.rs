//! [`Throttle`]: the THROTTLE commands as typed async methods.

use std::num::NonZeroU64;
use std::time::SystemTime;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, RedisFuture, Value};

use crate::error::Error;
use crate::options::{at_args, AllOptions, Options, Spec};
use crate::quota::{Limit, Quota, Sliding};
use crate::reply::{self, AllDecision, Decision, Info};

/// A connection the commands can go through: redis' async connections,
/// and a cluster connection, which this trait routes by the command's key
/// (`THROTTLE.ALL` names its keys after its options, where a cluster client
/// does not look for them).
///
/// Cloning must be cheap and give a handle on the same connection, as it
/// is for the three types here: [`Throttle`] clones it for each call, so
/// calls can run concurrently through one `&Throttle`.
pub trait Connection: Clone + Send + Sync + 'static {
    /// Sends `cmd`, whose keys all hash to `key`'s slot, and returns its
    /// reply (an error reply as an `Err`).
    fn send<'a>(&'a mut self, cmd: &'a Cmd, key: &'a str) -> RedisFuture<'a, Value>;
}

impl Connection for MultiplexedConnection {
    fn send<'a>(&'a mut self, cmd: &'a Cmd, _key: &'a str) -> RedisFuture<'a, Value> {
        Box::pin(cmd.query_async(self))
    }
}

impl Connection for ConnectionManager {
    fn send<'a>(&'a mut self, cmd: &'a Cmd, _key: &'a str) -> RedisFuture<'a, Value> {
        Box::pin(cmd.query_async(self))
    }
}

impl Connection for ClusterConnection {
    fn send<'a>(&'a mut self, cmd: &'a Cmd, key: &'a str) -> RedisFuture<'a, Value> {
        let route =
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master)));
        Box::pin(async move { self.route_command(cmd.clone(), route).await?.extract_error() })
    }
}

/// Any other [`ConnectionLike`] (a pooled connection, say) that is cheap to
/// clone: its commands go where the connection sends them.
#[derive(Clone, Debug)]
pub struct Plain<C>(pub C);

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Connection for Plain<C> {
    fn send<'a>(&'a mut self, cmd: &'a Cmd, _key: &'a str) -> RedisFuture<'a, Value> {
        Box::pin(cmd.query_async(&mut self.0))
    }
}

/// The THROTTLE commands on a connection: one typed method per command.
///
/// Each method sends one command and reads its reply in either protocol
/// (RESP2 arrays or, on a `?protocol=resp3` connection, RESP3 maps). A
/// server without the module answers every method with
/// [`Error::ModuleMissing`], whose message says how to load it.
///
/// ```no_run
/// use std::num::NonZeroU64;
/// use redis_throttle_client::{Options, Quota, Throttle};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1/")?;
/// let throttle = Throttle::new(client.get_multiplexed_async_connection().await?);
/// let quota = Quota::per_minute(NonZeroU64::new(3).unwrap());
/// let decision = throttle.fixed("login:alice", quota, &Options::new()).await?;
/// if !decision.allowed {
///     println!("try again in {:?}", decision.retry_after);
/// }
/// # Ok(())
/// # }
/// ```
///
/// Leases (a counting semaphore whose slots end by themselves):
/// [`acquire`](Throttle::acquire), [`release`](Throttle::release),
/// [`renew`](Throttle::renew) and [`with_lease`](Throttle::with_lease).
#[derive(Clone, Debug)]
pub struct Throttle<C> {
    conn: C,
}

impl<C: Connection> Throttle<C> {
    /// The commands on `conn`.
    pub fn new(conn: C) -> Throttle<C> {
        Throttle { conn }
    }

    /// The connection.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    async fn send(&self, command: &'static str, key: &str, args: Vec<String>) -> Result<Value, Error> {
        let mut cmd = redis::cmd(command);
        cmd.arg(args);
        self.query(command, key, &cmd).await
    }

    /// Sends `cmd` (the command `command`, on `key`) and returns its reply.
    pub(crate) async fn query(&self, command: &'static str, key: &str, cmd: &Cmd) -> Result<Value, Error> {
        let mut conn = self.conn.clone();
        conn.send(cmd, key).await.map_err(|e| Error::from_redis(command, e))
    }

    /// `limit` on `key` with `options`: the command the limit's algorithm
    /// names (`THROTTLE.FIXED`, `.SLIDING`, `.TOKEN` or `.LEAKY`).
    pub async fn check(&self, key: &str, limit: &Limit, options: &Options) -> Result<Decision, Error> {
        let command = limit.algorithm.command();
        let mut args = vec![key.to_string()];
        args.extend(limit.args());
        options.args(&mut args)?;
        let reply = self.send(command, key, args).await?;
        reply::decision(command, &reply, options.wants_detail())
    }

    /// `THROTTLE.FIXED key limit period [options]`: a fixed window opened
    /// by the first admitted call.
    ///
    /// ```no_run
    /// # use std::num::NonZeroU64;
    /// # use std::time::{Duration, UNIX_EPOCH};
    /// # use redis_throttle_client::{Options, Quota, Throttle};
    /// # async fn run(throttle: Throttle<redis::aio::MultiplexedConnection>) -> Result<(), redis_throttle_client::Error> {
    /// let three_a_minute = Quota::per_minute(NonZeroU64::new(3).unwrap());
    /// let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    /// let d = throttle.fixed("login:alice", three_a_minute, &Options::new().at(t0)).await?;
    /// assert_eq!((d.allowed, d.remaining, d.reset_after), (true, 2, Duration::from_secs(60)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fixed(&self, key: &str, quota: Quota, options: &Options) -> Result<Decision, Error> {
        self.check(key, &Limit::fixed(quota), options).await
    }

    /// `THROTTLE.SLIDING key limit period [EXACT|FLOOR] [options]`.
    ///
    /// ```no_run
    /// # use std::num::NonZeroU64;
    /// # use redis_throttle_client::{Options, Quota, Sliding, Throttle};
    /// # async fn run(throttle: Throttle<redis::aio::MultiplexedConnection>) -> Result<(), redis_throttle_client::Error> {
    /// let quota = Quota::per_hour(NonZeroU64::new(3).unwrap());
    /// let d = throttle.sliding("sms:+15550100", quota, Sliding::Exact, &Options::new()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn sliding(&self, key: &str, quota: Quota, mode: Sliding, options: &Options) -> Result<Decision, Error> {
        let limit = match mode {
            Sliding::Estimate => Limit::sliding(quota),
            Sliding::Floor => Limit::sliding_floor(quota),
            Sliding::Exact => Limit::sliding_exact(quota),
        };
        self.check(key, &limit, options).await
    }

    /// `THROTTLE.TOKEN key limit period [BURST b] [options]`: a token
    /// bucket of `burst` (default: the limit) refilled at the quota's rate.
    ///
    /// ```no_run
    /// # use std::num::NonZeroU64;
    /// # use redis_throttle_client::{Options, Quota, Throttle};
    /// # async fn run(throttle: Throttle<redis::aio::MultiplexedConnection>) -> Result<(), redis_throttle_client::Error> {
    /// let quota = Quota::per_second(NonZeroU64::new(10).unwrap());
    /// let d = throttle.token("api:carol", quota, NonZeroU64::new(20), &Options::new().cost(5)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn token(
        &self,
        key: &str,
        quota: Quota,
        burst: Option<NonZeroU64>,
        options: &Options,
    ) -> Result<Decision, Error> {
        self.check(key, &Limit { algorithm: crate::Algorithm::Token { burst }, quota }, options).await
    }

    /// `THROTTLE.LEAKY key limit period [BURST b] [options]`: a leaky
    /// bucket; an admitted call's `retry_after` is its queue delay.
    ///
    /// ```no_run
    /// # use std::num::NonZeroU64;
    /// # use redis_throttle_client::{Options, Quota, Throttle};
    /// # async fn run(throttle: Throttle<redis::aio::MultiplexedConnection>) -> Result<(), redis_throttle_client::Error> {
    /// let quota = Quota::per_second(NonZeroU64::new(10).unwrap());
    /// let d = throttle.leaky("sms:gateway", quota, NonZeroU64::new(3), &Options::new()).await?;
    /// if let Some(delay) = d.retry_after.filter(|_| d.allowed) {
    ///     tokio::time::sleep(delay).await; // then send: the gateway sees a steady rate
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leaky(
        &self,
        key: &str,
        quota: Quota,
        burst: Option<NonZeroU64>,
        options: &Options,
    ) -> Result<Decision, Error> {
        self.check(key, &Limit { algorithm: crate::Algorithm::Leaky { burst }, quota }, options).await
    }

    /// `THROTTLE.ALL [COST n] [AT µs] [DETAIL] spec...`: several limits at
    /// once, all or nothing ("10 per second and 1000 per hour"). In Redis
    /// Cluster the keys must share a hash slot (`{user:42}:s`,
    /// `{user:42}:h`); the call goes to that slot's node.
    ///
    /// ```no_run
    /// # use std::num::NonZeroU64;
    /// # use redis_throttle_client::{AllOptions, Limit, Quota, Spec, Throttle};
    /// # async fn run(throttle: Throttle<redis::aio::MultiplexedConnection>) -> Result<(), redis_throttle_client::Error> {
    /// let n = |n| NonZeroU64::new(n).unwrap();
    /// let specs = [
    ///     Spec::new("{user:42}:s", Limit::fixed(Quota::per_second(n(10)))),
    ///     Spec::new("{user:42}:h", Limit::fixed(Quota::per_hour(n(1000)))),
    /// ];
    /// let d = throttle.all(&specs, &AllOptions::new()).await?;
    /// println!("admitted: {}, retry after {:?}", d.allowed, d.retry_after());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn all(&self, specs: &[Spec], options: &AllOptions) -> Result<AllDecision, Error> {
        const COMMAND: &str = "THROTTLE.ALL";
        let Some(first) = specs.first() else {
            return Err(Error::invalid("spec", "THROTTLE.ALL needs at least one limit".into()));
        };
        let mut args = Vec::new();
        options.args(&mut args)?;
        for spec in specs {
            spec.args(&mut args)?;
        }
        let reply = self.send(COMMAND, &first.key, args).await?;
        reply::all(&reply, specs.len(), options.wants_detail())
    }

    /// `THROTTLE.INFO key`: the key's algorithm and state now (a lease
    /// key's holders in [`Info::leases`]), or `None` for a missing key.
    /// Changes nothing.
    pub async fn info(&self, key: &str) -> Result<Option<Info>, Error> {
        self.info_at(key, None).await
    }

    /// `THROTTLE.INFO key AT µs`: the state as it is at `at`.
    pub async fn info_at(&self, key: &str, at: Option<SystemTime>) -> Result<Option<Info>, Error> {
        let mut args = vec![key.to_string()];
        at_args(at, &mut args)?;
        let reply = self.send("THROTTLE.INFO", key, args).await?;
        reply::info(&reply)
    }
}
