//! A tower layer that rate-limits requests through the THROTTLE commands:
//! the limits live in Redis, so every instance of a service shares them.
//!
//! Its shape is tower_governor's: a config builder, a [`KeyExtractor`]
//! with ready implementations ([`PeerIp`], [`Header`], [`Global`], and a
//! closure, [`KeyFn`]), and every refusal turned into a response in one
//! place ([`Rejection::into_response`], or your own handler). What differs:
//!
//! - Limits are the module's quotas (`limit` per `period`) on any of its
//!   algorithms, several at once (`THROTTLE.ALL`), with penalties.
//! - Responses carry the IETF RateLimit headers (draft 11 by default, see
//!   [`Headers`]) and `Retry-After` on a 429.
//! - Redis can be unreachable: [`FailureMode`] says what happens then.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use std::num::NonZeroU64;
//! use axum::{routing::get, Router};
//! use redis_throttle_client::layer::{RateLimitConfig, RateLimitLayer};
//! use redis_throttle_client::{Limit, Quota, Throttle};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let throttle = Throttle::new(client.get_connection_manager().await?);
//! let config = RateLimitConfig::builder(throttle)
//!     .limit("burst", Limit::token(Quota::per_second(NonZeroU64::new(10).unwrap())))
//!     .limit("hour", Limit::fixed(Quota::per_hour(NonZeroU64::new(1000).unwrap())))
//!     .finish()?;
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(RateLimitLayer::new(config));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // PeerIp (the default key) reads the peer's address from ConnectInfo.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderMap, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use crate::{AllDecision, AllOptions, Connection, Decision, Error, Limit, Options, Penalty, Spec, Throttle};

/// Finds the rate-limit key of a request: whose requests count together.
///
/// Any `Fn(&Parts) -> Option<String>` closure is one too (wrap it in
/// [`KeyFn`]). `None` means no key could be found: the request is answered
/// with [`Rejection::NoKey`] (500 by default, as tower_governor does).
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key of the request whose head is `parts`.
    fn extract(&self, parts: &Parts) -> Option<String>;
}

/// The peer's IP address: from a [`SocketAddr`] extension (hyper users
/// insert it), or axum's `ConnectInfo<SocketAddr>` (serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`). Behind a reverse
/// proxy every request has the proxy's address: use a [`Header`] the proxy
/// sets, or a [`KeyFn`].
#[derive(Clone, Copy, Debug, Default)]
pub struct PeerIp;

impl KeyExtractor for PeerIp {
    fn extract(&self, parts: &Parts) -> Option<String> {
        let addr = parts.extensions.get::<SocketAddr>().copied();
        #[cfg(feature = "axum")]
        let addr = addr.or_else(|| parts.extensions.get::<axum::extract::ConnectInfo<SocketAddr>>().map(|c| c.0));
        addr.map(|a| a.ip().to_string())
    }
}

/// The value of a header (an API key, a user id a gateway sets). A request
/// without it, or with a value that is not visible ASCII, has no key.
#[derive(Clone, Debug)]
pub struct Header(pub HeaderName);

impl KeyExtractor for Header {
    fn extract(&self, parts: &Parts) -> Option<String> {
        parts.headers.get(&self.0).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty()).map(str::to_owned)
    }
}

/// One key for every request: a limit on the whole service.
#[derive(Clone, Copy, Debug, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _parts: &Parts) -> Option<String> {
        Some("global".into())
    }
}

/// A closure over the request's head.
///
/// ```
/// use redis_throttle_client::layer::{KeyExtractor, KeyFn};
///
/// let by_tenant = KeyFn(|parts: &http::request::Parts| {
///     parts.uri.path().strip_prefix("/tenants/")?.split('/').next().map(str::to_owned)
/// });
/// let request = http::Request::get("/tenants/acme/orders").body(()).unwrap();
/// assert_eq!(by_tenant.extract(&request.into_parts().0), Some("acme".to_string()));
/// ```
#[derive(Clone, Copy)]
pub struct KeyFn<F>(pub F);

impl<F: Fn(&Parts) -> Option<String> + Send + Sync + 'static> KeyExtractor for KeyFn<F> {
    fn extract(&self, parts: &Parts) -> Option<String> {
        (self.0)(parts)
    }
}

/// The time the layer's calls happen at.
///
/// The default, [`ServerClock`], sends no time: the server's clock decides,
/// the same for every instance of the service. [`ManualClock`] sends its
/// own (`AT`): for tests that drive time instead of sleeping.
pub trait Clock: Send + Sync + 'static {
    /// The call's time, or `None` for the server's clock.
    fn now(&self) -> Option<SystemTime>;
}

/// The server's clock (no `AT`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerClock;

impl Clock for ServerClock {
    fn now(&self) -> Option<SystemTime> {
        None
    }
}

/// A clock that moves only when told, shared by its clones.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use redis_throttle_client::layer::{Clock, ManualClock};
///
/// let clock = ManualClock::at(UNIX_EPOCH + Duration::from_secs(100));
/// clock.clone().advance(Duration::from_millis(1500));
/// assert_eq!(clock.now(), Some(UNIX_EPOCH + Duration::from_millis(101_500)));
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock showing `time` (microsecond precision).
    pub fn at(time: SystemTime) -> ManualClock {
        let us = time.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        ManualClock(Arc::new(AtomicU64::new(us)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let us = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        self.0.fetch_add(us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Option<SystemTime> {
        Some(UNIX_EPOCH + Duration::from_micros(self.0.load(Ordering::SeqCst)))
    }
}

/// What the layer does when Redis cannot answer (refused or lost
/// connection, the [`timeout`](RateLimitConfigBuilder::timeout), a cluster
/// without a node for the slot): see [`Error::is_unavailable`].
///
/// Either way a missing module or a bad argument is not an outage: those
/// requests get [`Rejection::Failed`] (500), so a misconfiguration shows
/// at the first request instead of disabling the limit silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Let the request through, without RateLimit headers: an outage of
    /// Redis does not take the service down with it. The default.
    #[default]
    Open,
    /// Refuse the request with [`Rejection::Unavailable`] (503 by default):
    /// for limits that protect something (logins, costly calls).
    Closed,
}

/// Which rate-limit headers responses carry. `Retry-After` (whole seconds,
/// rounded up) comes with every 429 whatever the choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Headers {
    /// The IETF draft 11 fields, one list item per limit, named as the
    /// limits are: `RateLimit-Policy: "burst";q=10;w=1, "hour";q=1000;w=3600`
    /// and `RateLimit: "burst";r=9;t=1, "hour";r=999;t=3600`. `q` and `w`
    /// are the quota (`w`: the period in seconds, rounded up); `r` is
    /// `remaining`; `t` is `reset_after` in seconds rounded up, except on a
    /// 429 from a TOKEN or LEAKY limit, where it is that limit's
    /// `retry_after` (when the next request can pass). The default.
    #[default]
    Draft11,
    /// The three fields of the earlier drafts (up to 06), for clients
    /// that read those: `RateLimit-Limit`, `RateLimit-Remaining`,
    /// `RateLimit-Reset` (seconds, as `t` above), of the limit with the
    /// fewest units remaining.
    Draft6,
    /// No rate-limit headers (`Retry-After` only, on 429s).
    None,
}

/// One limit of the layer, with its name (in keys and headers) and penalty.
#[derive(Clone, Debug)]
struct NamedLimit {
    name: String,
    limit: Limit,
    penalty: Penalty,
}

/// The layer's settings, built by [`RateLimitConfig::builder`]; shared by
/// every service the layer makes.
pub struct RateLimitConfig<C> {
    throttle: Throttle<C>,
    limits: Vec<NamedLimit>,
    key_extractor: Arc<dyn KeyExtractor>,
    prefix: String,
    failure: FailureMode,
    headers: Headers,
    timeout: Option<Duration>,
    cost: i64,
    clock: Arc<dyn Clock>,
}

impl<C> fmt::Debug for RateLimitConfig<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitConfig")
            .field("limits", &self.limits)
            .field("prefix", &self.prefix)
            .field("failure", &self.failure)
            .field("headers", &self.headers)
            .field("timeout", &self.timeout)
            .field("cost", &self.cost)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RateLimitConfig`]: at least one [`limit`](Self::limit), and
/// the rest as needed.
pub struct RateLimitConfigBuilder<C> {
    config: RateLimitConfig<C>,
}

/// Why [`RateLimitConfigBuilder::finish`] refused the settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limit config: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl<C: Connection> RateLimitConfig<C> {
    /// Settings for limits on `throttle`'s connection: key [`PeerIp`],
    /// prefix `throttle`, [`FailureMode::Open`], [`Headers::Draft11`], no
    /// time-out, one unit per request, the server's clock.
    pub fn builder(throttle: Throttle<C>) -> RateLimitConfigBuilder<C> {
        RateLimitConfigBuilder {
            config: RateLimitConfig {
                throttle,
                limits: Vec::new(),
                key_extractor: Arc::new(PeerIp),
                prefix: "throttle".into(),
                failure: FailureMode::default(),
                headers: Headers::default(),
                timeout: None,
                cost: 1,
                clock: Arc::new(ServerClock),
            },
        }
    }

    /// The Redis key of `limit` for the request key `key`:
    /// `{prefix:key}:name`. The braces are a hash tag: in Redis Cluster
    /// one request's keys share a slot, as `THROTTLE.ALL` needs.
    fn redis_key(&self, key: &str, limit: &NamedLimit) -> String {
        format!("{{{}:{key}}}:{}", self.prefix, limit.name)
    }

    /// Runs the request's limits: one command, or `THROTTLE.ALL` for
    /// several.
    async fn decide(&self, key: &str) -> Result<AllDecision, Error> {
        let at = self.clock.now();
        let call = async {
            if let [only] = self.limits.as_slice() {
                let mut options = Options::new().cost(self.cost).penalty(only.penalty);
                if let Some(at) = at {
                    options = options.at(at);
                }
                let d = self.throttle.check(&self.redis_key(key, only), &only.limit, &options).await?;
                Ok(AllDecision { allowed: d.allowed, limits: vec![d] })
            } else {
                let specs: Vec<Spec> =
                    self.limits.iter().map(|l| Spec::new(self.redis_key(key, l), l.limit).penalty(l.penalty)).collect();
                let mut options = AllOptions::new().cost(self.cost);
                if let Some(at) = at {
                    options = options.at(at);
                }
                self.throttle.all(&specs, &options).await
            }
        };
        match self.timeout {
            Some(limit) => tokio::time::timeout(limit, call).await.unwrap_or(Err(Error::Timeout)),
            None => call.await,
        }
    }

    /// The rate-limit headers for `decision` (see [`Headers`]).
    fn rate_limit_headers(&self, decision: &AllDecision) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let seconds = |d: Duration| d.as_millis().div_ceil(1000);
        let t = |l: &NamedLimit, d: &Decision| {
            let wait = if !decision.allowed && !d.allowed && l.limit.algorithm.is_bucket() {
                d.retry_after.unwrap_or(d.reset_after)
            } else {
                d.reset_after
            };
            seconds(wait)
        };
        let pairs = self.limits.iter().zip(&decision.limits);
        let mut set = |name: &'static str, value: String| {
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        };
        match self.headers {
            Headers::Draft11 => {
                let policy: Vec<String> = self
                    .limits
                    .iter()
                    .map(|l| {
                        format!("\"{}\";q={};w={}", l.name, l.limit.quota.limit(), seconds(l.limit.quota.period()))
                    })
                    .collect();
                let state: Vec<String> =
                    pairs.map(|(l, d)| format!("\"{}\";r={};t={}", l.name, d.remaining, t(l, d))).collect();
                set("ratelimit-policy", policy.join(", "));
                set("ratelimit", state.join(", "));
            }
            Headers::Draft6 => {
                if let Some((l, d)) = pairs.min_by_key(|(l, d)| (d.remaining, std::cmp::Reverse(t(l, d)))) {
                    set("ratelimit-limit", d.limit.to_string());
                    set("ratelimit-remaining", d.remaining.to_string());
                    set("ratelimit-reset", t(l, d).to_string());
                }
            }
            Headers::None => {}
        }
        headers
    }
}

impl<C: Connection> RateLimitConfigBuilder<C> {
    /// Adds a limit named `name` (letters, digits, `-`, `_`, `.`; it is
    /// part of the Redis key and of the headers). A request is admitted
    /// only if every limit admits it (`THROTTLE.ALL`, one round trip).
    pub fn limit(self, name: &str, limit: Limit) -> Self {
        self.limit_with_penalty(name, limit, Penalty::none())
    }

    /// Adds a limit with a penalty: a ban, counted refusals.
    pub fn limit_with_penalty(mut self, name: &str, limit: Limit, penalty: Penalty) -> Self {
        self.config.limits.push(NamedLimit { name: name.into(), limit, penalty });
        self
    }

    /// Whose requests count together (default: [`PeerIp`]).
    pub fn key_extractor(mut self, extractor: impl KeyExtractor) -> Self {
        self.config.key_extractor = Arc::new(extractor);
        self
    }

    /// The start of every Redis key (default `throttle`): give each layer
    /// its own to keep its limits apart (per-route limits), or the same to
    /// share one limit between routes. No braces.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// What happens when Redis cannot answer (default [`FailureMode::Open`]).
    pub fn failure_mode(mut self, mode: FailureMode) -> Self {
        self.config.failure = mode;
        self
    }

    /// Which rate-limit headers responses carry (default [`Headers::Draft11`]).
    pub fn headers(mut self, headers: Headers) -> Self {
        self.config.headers = headers;
        self
    }

    /// Gives up on Redis after `timeout`, then treats it as unavailable
    /// (see [`failure_mode`](Self::failure_mode)). Redis' own connections
    /// have response timeouts too (500 ms by default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = Some(timeout);
        self
    }

    /// Units each request costs (default 1).
    pub fn cost(mut self, units: u32) -> Self {
        self.config.cost = i64::from(units);
        self
    }

    /// The time calls happen at (default [`ServerClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.config.clock = Arc::new(clock);
        self
    }

    /// The settings, or why they cannot work: no limit, a name used twice
    /// or not a plain token, a prefix that is empty or has braces.
    pub fn finish(self) -> Result<RateLimitConfig<C>, ConfigError> {
        let config = self.config;
        if config.limits.is_empty() {
            return Err(ConfigError("no limit: add one with .limit(name, limit)".into()));
        }
        for (i, l) in config.limits.iter().enumerate() {
            let plain = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
            if l.name.is_empty() || !l.name.chars().all(plain) {
                return Err(ConfigError(format!("limit name {:?}: use letters, digits, '-', '_', '.'", l.name)));
            }
            if config.limits[..i].iter().any(|other| other.name == l.name) {
                return Err(ConfigError(format!("limit name {:?} used twice", l.name)));
            }
        }
        if config.prefix.is_empty() || config.prefix.contains(['{', '}']) {
            return Err(ConfigError(format!("prefix {:?}: not empty, no braces", config.prefix)));
        }
        Ok(config)
    }
}

/// Why the layer answered instead of the service. Every such response is
/// made from one of these, by [`Rejection::into_response`] or the handler
/// given to [`RateLimitLayer::with_error_handler`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejection {
    /// The limit refused the request: 429.
    TooManyRequests {
        /// When it can pass (`None`: never, its cost is above a limit).
        retry_after: Option<Duration>,
        /// `Retry-After` and the rate-limit headers.
        headers: HeaderMap,
    },
    /// The key extractor found no key: 500.
    NoKey,
    /// Redis could not answer and the layer fails closed: 503.
    Unavailable(Error),
    /// Redis answered with an error no retry cures (the module is not
    /// loaded, a key holds another type): 500, with the error's message.
    Failed(Error),
}

impl Rejection {
    /// The status it answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Rejection::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::NoKey | Rejection::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The default response: the status, the headers, a short text.
    pub fn into_response(self) -> Response<String> {
        let status = self.status();
        let (body, headers) = match self {
            Rejection::TooManyRequests { retry_after: Some(wait), headers } => {
                (format!("Too Many Requests: retry in {} s", wait.as_millis().div_ceil(1000)), headers)
            }
            Rejection::TooManyRequests { retry_after: None, headers } => {
                ("Too Many Requests: this request is above the limit".into(), headers)
            }
            Rejection::NoKey => ("rate limit: no key for this request".into(), HeaderMap::new()),
            Rejection::Unavailable(e) => (format!("rate limit unavailable: {e}"), HeaderMap::new()),
            Rejection::Failed(e) => (format!("rate limit failed: {e}"), HeaderMap::new()),
        };
        let mut response = Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        response
    }
}

type Handler<B> = Arc<dyn Fn(Rejection) -> Response<B> + Send + Sync>;

/// The [`tower_layer::Layer`]: wrap a service (an axum `Router` or route,
/// a tonic server, a hyper service) in [`RateLimit`].
pub struct RateLimitLayer<C, B> {
    config: Arc<RateLimitConfig<C>>,
    handler: Handler<B>,
}

impl<C, B> Clone for RateLimitLayer<C, B> {
    fn clone(&self) -> Self {
        RateLimitLayer { config: self.config.clone(), handler: self.handler.clone() }
    }
}

impl<C: Connection, B: From<String>> RateLimitLayer<C, B> {
    /// The layer, answering refusals with [`Rejection::into_response`]
    /// (bodies that convert from `String`: axum's, `http_body_util::Full`).
    pub fn new(config: impl Into<Arc<RateLimitConfig<C>>>) -> Self {
        RateLimitLayer::with_error_handler(config, |r: Rejection| r.into_response().map(B::from))
    }
}

impl<C: Connection, B> RateLimitLayer<C, B> {
    /// The layer, answering refusals with `handler`: for other bodies
    /// (tonic's: answer with `tonic::Status::resource_exhausted(..).into_http()`),
    /// or other texts.
    pub fn with_error_handler(
        config: impl Into<Arc<RateLimitConfig<C>>>,
        handler: impl Fn(Rejection) -> Response<B> + Send + Sync + 'static,
    ) -> Self {
        RateLimitLayer { config: config.into(), handler: Arc::new(handler) }
    }
}

impl<S, C, B> Layer<S> for RateLimitLayer<C, B> {
    type Service = RateLimit<S, C, B>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit { inner, config: self.config.clone(), handler: self.handler.clone() }
    }
}

/// The service [`RateLimitLayer`] makes: checks the request's limits, then
/// calls the inner service or answers with a [`Rejection`].
pub struct RateLimit<S, C, B> {
    inner: S,
    config: Arc<RateLimitConfig<C>>,
    handler: Handler<B>,
}

impl<S: Clone, C, B> Clone for RateLimit<S, C, B> {
    fn clone(&self) -> Self {
        RateLimit { inner: self.inner.clone(), config: self.config.clone(), handler: self.handler.clone() }
    }
}

impl<S, C, ReqB, B> Service<Request<ReqB>> for RateLimit<S, C, B>
where
    S: Service<Request<ReqB>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    C: Connection,
    ReqB: Send + 'static,
    B: 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // The clone may not be ready: call the one that is, keep the clone.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (config, handler) = (self.config.clone(), self.handler.clone());
        let (parts, body) = request.into_parts();
        let key = config.key_extractor.extract(&parts);
        let request = Request::from_parts(parts, body);
        Box::pin(async move {
            let Some(key) = key else { return Ok(handler(Rejection::NoKey)) };
            let decision = match config.decide(&key).await {
                Ok(decision) => decision,
                Err(e) if e.is_unavailable() && config.failure == FailureMode::Open => {
                    return inner.call(request).await
                }
                Err(e) if e.is_unavailable() => return Ok(handler(Rejection::Unavailable(e))),
                Err(e) => return Ok(handler(Rejection::Failed(e))),
            };
            let mut headers = config.rate_limit_headers(&decision);
            if !decision.allowed {
                let retry_after = decision.retry_after();
                if let Some(wait) = retry_after {
                    headers.insert(RETRY_AFTER, HeaderValue::from(wait.as_millis().div_ceil(1000) as u64));
                }
                return Ok(handler(Rejection::TooManyRequests { retry_after, headers }));
            }
            let mut response = inner.call(request).await?;
            response.headers_mut().extend(headers);
            Ok(response)
        })
    }
}
