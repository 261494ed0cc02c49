//! The tower layer in an axum app served on loopback, driven through real
//! HTTP, against real servers with the module (every server of
//! `THROTTLE_SERVERS`): statuses and headers, a concurrent flood on every
//! algorithm, per-route limits, several limits through THROTTLE.ALL,
//! penalties, key extractors, Redis unreachable (open and closed), and a
//! server without the module. Time is a ManualClock sent as `AT`.

mod common;

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use common::{n, serve, servers, t0, Server};
use redis::aio::MultiplexedConnection;
use redis_throttle_client::layer::{
    FailureMode, Header, Headers, KeyFn, ManualClock, RateLimitConfig, RateLimitConfigBuilder, RateLimitLayer,
};
use redis_throttle_client::{Ban, Limit, Penalty, Quota, Throttle};

fn app(layer: RateLimitLayer<MultiplexedConnection, axum::body::Body>) -> Router {
    Router::new().route("/", get(|| async { "ok" })).layer(layer)
}

async fn builder(server: &Server, clock: &ManualClock) -> RateLimitConfigBuilder<MultiplexedConnection> {
    RateLimitConfig::builder(server.throttle(false).await).clock(clock.clone())
}

/// A response's status and the headers the tests read.
#[derive(Debug)]
struct Seen {
    status: u16,
    retry_after: Option<String>,
    ratelimit: Option<String>,
    policy: Option<String>,
    body: String,
}

async fn get_url(http: &reqwest::Client, url: &str) -> Seen {
    let response = http.get(url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap_or("?").to_string());
    let (retry_after, ratelimit, policy) = (header("retry-after"), header("ratelimit"), header("ratelimit-policy"));
    let status = response.status().as_u16();
    Seen { status, retry_after, ratelimit, policy, body: response.text().await.unwrap_or_default() }
}

/// 200s with the draft-11 headers until the limit, then a 429 with
/// Retry-After; the window's end lets requests through again.
#[tokio::test]
async fn statuses_and_headers() {
    let http = reqwest::Client::new();
    for binary in servers() {
        let server = Server::start(&binary);
        let clock = ManualClock::at(t0());
        let config = builder(&server, &clock).await.limit("minute", Limit::fixed(Quota::per_minute(n(3))));
        let (addr, _task) = serve(app(RateLimitLayer::new(config.finish().unwrap()))).await;
        let url = format!("http://{addr}/");
        for remaining in [2, 1, 0] {
            let seen = get_url(&http, &url).await;
            assert_eq!((seen.status, seen.body.as_str()), (200, "ok"), "{binary}");
            assert_eq!(seen.policy.as_deref(), Some("\"minute\";q=3;w=60"), "{binary}");
            assert_eq!(seen.ratelimit, Some(format!("\"minute\";r={remaining};t=60")), "{binary}");
            assert_eq!(seen.retry_after, None, "{binary}");
        }
        clock.advance(Duration::from_millis(20_500));
        let seen = get_url(&http, &url).await;
        assert_eq!(seen.status, 429, "{binary}: {seen:?}");
        assert_eq!(seen.retry_after.as_deref(), Some("40"), "{binary}: 39.5 s, rounded up");
        assert_eq!(seen.ratelimit.as_deref(), Some("\"minute\";r=0;t=40"), "{binary}");
        assert!(seen.body.contains("Too Many Requests"), "{binary}: {}", seen.body);
        clock.advance(Duration::from_millis(39_500));
        assert_eq!(get_url(&http, &url).await.status, 200, "{binary}: the window ended");

        // A token bucket's 429 says when the next token comes (t and
        // Retry-After), not when the bucket is full; draft 6's fields.
        let config = builder(&server, &clock)
            .await
            .prefix("token")
            .headers(Headers::Draft6)
            .limit("rate", Limit::token(Quota::per_minute(n(2))));
        let (addr, _task) = serve(app(RateLimitLayer::new(config.finish().unwrap()))).await;
        let url = format!("http://{addr}/");
        let response = http.get(&url).send().await.unwrap();
        let h = |r: &reqwest::Response, name: &str| r.headers().get(name).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            (h(&response, "ratelimit-limit"), h(&response, "ratelimit-remaining"), h(&response, "ratelimit-reset")),
            (Some("2".into()), Some("1".into()), Some("30".into())),
            "{binary}"
        );
        assert_eq!(h(&response, "ratelimit"), None, "{binary}: draft 6 only");
        http.get(&url).send().await.unwrap();
        let refused = http.get(&url).send().await.unwrap();
        assert_eq!(refused.status(), 429, "{binary}");
        assert_eq!(
            (h(&refused, "retry-after"), h(&refused, "ratelimit-reset")),
            (Some("30".into()), Some("30".into()))
        );
    }
}

/// 200 concurrent requests for one key admit exactly the limit, on every
/// algorithm.
#[tokio::test]
async fn a_concurrent_flood_admits_exactly_the_limit() {
    let http = reqwest::Client::new();
    let quota = Quota::per_hour(n(50));
    for binary in servers() {
        let server = Server::start(&binary);
        for (i, limit) in [
            Limit::fixed(quota),
            Limit::sliding(quota),
            Limit::sliding_floor(quota),
            Limit::sliding_exact(quota),
            Limit::token(quota),
            Limit::leaky(quota),
        ]
        .into_iter()
        .enumerate()
        {
            let clock = ManualClock::at(t0());
            let config = builder(&server, &clock).await.prefix(&format!("flood{i}")).limit("hour", limit);
            let (addr, _task) = serve(app(RateLimitLayer::new(config.finish().unwrap()))).await;
            let url = format!("http://{addr}/");
            let requests: Vec<_> = (0..200)
                .map(|_| {
                    let (http, url) = (http.clone(), url.clone());
                    tokio::spawn(async move { get_url(&http, &url).await.status })
                })
                .collect();
            let mut statuses = Vec::new();
            for r in requests {
                statuses.push(r.await.expect("a request"));
            }
            let ok = statuses.iter().filter(|&&s| s == 200).count();
            let limited = statuses.iter().filter(|&&s| s == 429).count();
            assert_eq!((ok, limited), (50, 150), "{binary}: {limit:?}");
        }
    }
}

/// A layer per route: each route counts its own requests.
#[tokio::test]
async fn per_route_limits() {
    let http = reqwest::Client::new();
    for binary in servers() {
        let server = Server::start(&binary);
        let clock = ManualClock::at(t0());
        let login = builder(&server, &clock).await.prefix("login").limit("m", Limit::fixed(Quota::per_minute(n(2))));
        let search = builder(&server, &clock).await.prefix("search").limit("m", Limit::fixed(Quota::per_minute(n(5))));
        let app = Router::new()
            .route("/login", get(|| async { "login" }).layer(RateLimitLayer::new(login.finish().unwrap())))
            .route("/search", get(|| async { "search" }).layer(RateLimitLayer::new(search.finish().unwrap())))
            .route("/free", get(|| async { "free" }));
        let (addr, _task) = serve(app).await;
        let mut counts = Vec::new();
        for path in ["login", "search", "free"] {
            let mut ok = 0;
            for _ in 0..8 {
                let seen = get_url(&http, &format!("http://{addr}/{path}")).await;
                ok += usize::from(seen.status == 200);
            }
            counts.push((path, ok));
        }
        assert_eq!(counts, [("login", 2), ("search", 5), ("free", 8)], "{binary}");
    }
}

/// Several limits: one THROTTLE.ALL per request; a refusal by either
/// refuses, and the headers list both.
#[tokio::test]
async fn several_limits_through_throttle_all() {
    let http = reqwest::Client::new();
    for binary in servers() {
        let server = Server::start(&binary);
        let clock = ManualClock::at(t0());
        let config = builder(&server, &clock)
            .await
            .limit("second", Limit::fixed(Quota::per_second(n(3))))
            .limit("hour", Limit::sliding_exact(Quota::per_hour(n(5))));
        let (addr, _task) = serve(app(RateLimitLayer::new(config.finish().unwrap()))).await;
        let url = format!("http://{addr}/");
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(get_url(&http, &url).await);
        }
        let statuses: Vec<u16> = seen.iter().map(|s| s.status).collect();
        assert_eq!(statuses, [200, 200, 200, 429], "{binary}");
        assert_eq!(seen[0].policy.as_deref(), Some("\"second\";q=3;w=1, \"hour\";q=5;w=3600"), "{binary}");
        assert_eq!(seen[2].ratelimit.as_deref(), Some("\"second\";r=0;t=1, \"hour\";r=2;t=3600"), "{binary}");
        assert_eq!(seen[3].retry_after.as_deref(), Some("1"), "{binary}: the per-second limit refused");
        clock.advance(Duration::from_secs(1));
        let mut after = Vec::new();
        for _ in 0..3 {
            after.push(get_url(&http, &url).await.status);
        }
        assert_eq!(after, [200, 200, 429], "{binary}: the hourly limit is used up");
        let refused = get_url(&http, &url).await;
        assert_eq!(refused.retry_after.as_deref(), Some("3599"), "{binary}: {refused:?}");
    }
}

/// A penalty on a limit: the refusal that starts a ban answers with its
/// length, and every request is refused until it ends.
#[tokio::test]
async fn a_ban_holds_until_it_ends() {
    let http = reqwest::Client::new();
    for binary in servers() {
        let server = Server::start(&binary);
        let clock = ManualClock::at(t0());
        let ban = Penalty::none().ban(Ban::Plain(Duration::from_secs(600)));
        let config = builder(&server, &clock).await.limit_with_penalty("s", Limit::fixed(Quota::per_second(n(1))), ban);
        let (addr, _task) = serve(app(RateLimitLayer::new(config.finish().unwrap()))).await;
        let url = format!("http://{addr}/");
        assert_eq!(get_url(&http, &url).await.status, 200, "{binary}");
        assert_eq!(get_url(&http, &url).await.retry_after.as_deref(), Some("600"), "{binary}");
        clock.advance(Duration::from_secs(300));
        let seen = get_url(&http, &url).await;
        assert_eq!((seen.status, seen.retry_after.as_deref()), (429, Some("300")), "{binary}: still banned");
        clock.advance(Duration::from_secs(300));
        assert_eq!(get_url(&http, &url).await.status, 200, "{binary}: the ban is over");
    }
}

/// Keys from a header and from a closure; a request without a key gets a
/// 500.
#[tokio::test]
async fn key_extractors() {
    let http = reqwest::Client::new();
    for binary in servers() {
        let server = Server::start(&binary);
        let clock = ManualClock::at(t0());
        let by_header = builder(&server, &clock)
            .await
            .prefix("hdr")
            .key_extractor(Header(http::HeaderName::from_static("x-api-key")))
            .limit("m", Limit::fixed(Quota::per_minute(n(1))));
        let by_path = builder(&server, &clock)
            .await
            .prefix("path")
            .key_extractor(KeyFn(|p: &http::request::Parts| p.uri.path().strip_prefix("/t/").map(str::to_owned)))
            .limit("m", Limit::fixed(Quota::per_minute(n(1))));
        let app = Router::new()
            .route("/", get(|| async { "ok" }).layer(RateLimitLayer::new(by_header.finish().unwrap())))
            .route("/t/{tenant}", get(|| async { "ok" }).layer(RateLimitLayer::new(by_path.finish().unwrap())));
        let (addr, _task) = serve(app).await;
        let with_key = |key: &'static str| http.get(format!("http://{addr}/")).header("x-api-key", key).send();
        let statuses = [
            with_key("a").await.unwrap().status().as_u16(),
            with_key("a").await.unwrap().status().as_u16(),
            with_key("b").await.unwrap().status().as_u16(),
        ];
        assert_eq!(statuses, [200, 429, 200], "{binary}");
        let missing = get_url(&http, &format!("http://{addr}/")).await;
        assert_eq!(missing.status, 500, "{binary}: {}", missing.body);
        let tenants = [
            get_url(&http, &format!("http://{addr}/t/acme")).await.status,
            get_url(&http, &format!("http://{addr}/t/acme")).await.status,
            get_url(&http, &format!("http://{addr}/t/initech")).await.status,
        ];
        assert_eq!(tenants, [200, 429, 200], "{binary}");
    }
}

/// Redis unreachable: fail open lets requests through (no headers), fail
/// closed answers 503. A server without the module is a 500 saying how to
/// load it, whatever the failure mode.
#[tokio::test]
async fn redis_unreachable_and_module_missing() {
    let http = reqwest::Client::new();
    for binary in servers() {
        let mut server = Server::start(&binary);
        let clock = ManualClock::at(t0());
        let mut apps = Vec::new();
        for mode in [FailureMode::Open, FailureMode::Closed] {
            let config = builder(&server, &clock)
                .await
                .failure_mode(mode)
                .timeout(Duration::from_secs(5))
                .limit("m", Limit::fixed(Quota::per_minute(n(1))));
            apps.push(serve(app(RateLimitLayer::new(config.finish().unwrap()))).await);
        }
        let urls: Vec<String> = apps.iter().map(|(addr, _)| format!("http://{addr}/")).collect();
        assert_eq!(get_url(&http, &urls[0]).await.status, 200, "{binary}");
        server.stop();
        let open = get_url(&http, &urls[0]).await;
        assert_eq!((open.status, open.ratelimit), (200, None), "{binary}: fail open");
        let closed = get_url(&http, &urls[1]).await;
        assert_eq!(closed.status, 503, "{binary}: fail closed: {}", closed.body);

        let bare = Server::without_module(&binary);
        for mode in [FailureMode::Open, FailureMode::Closed] {
            let config =
                builder(&bare, &clock).await.failure_mode(mode).limit("m", Limit::fixed(Quota::per_minute(n(1))));
            let (addr, _task) = serve(app(RateLimitLayer::new(config.finish().unwrap()))).await;
            let seen = get_url(&http, &format!("http://{addr}/")).await;
            assert_eq!(seen.status, 500, "{binary} {mode:?}");
            assert!(seen.body.contains("loadmodule /path/to/libredis_throttle.so"), "{binary}: {}", seen.body);
        }
    }
}

/// The config refuses what cannot work.
#[tokio::test]
async fn config_errors() {
    let server = Server::start(&servers()[0]);
    let t: Throttle<MultiplexedConnection> = server.throttle(false).await;
    let limit = Limit::fixed(Quota::per_minute(n(1)));
    let bad = [
        RateLimitConfig::builder(t.clone()),
        RateLimitConfig::builder(t.clone()).limit("a b", limit),
        RateLimitConfig::builder(t.clone()).limit("a", limit).limit("a", limit),
        RateLimitConfig::builder(t.clone()).limit("a", limit).prefix("{x}"),
        RateLimitConfig::builder(t.clone()).limit("a", limit).prefix(""),
    ];
    for builder in bad {
        assert!(builder.finish().is_err());
    }
}
