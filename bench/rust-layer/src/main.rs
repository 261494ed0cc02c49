//! `make bench`: one axum route behind each limiter, side by side in one
//! run on one machine: no limiter; tower_governor (in-process, nothing
//! shared); a naive Redis middleware (INCR, then EXPIRE on the first
//! request of a window); the redis-throttle layer with one limit
//! (THROTTLE.FIXED) and with two (THROTTLE.ALL). Every limit is far above
//! the load, so every request is admitted and each row measures the
//! limiter's cost: requests per second with BENCH_CONCURRENCY (32) clients
//! at once, and the mean latency of one client's sequential requests, less
//! the same without a limiter ("added").
//!
//!     rust-layer-bench /path/to/libredis_throttle.so bench/rust-layer.md
//!
//! BENCH_SECONDS (2) per measurement, BENCH_SERVER (redis-server) the
//! server binary. The server runs on a free loopback port and is stopped
//! by its child handle; load and service share the process and the cores.

use std::net::{SocketAddr, TcpListener};
use std::num::NonZeroU64;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use redis::aio::MultiplexedConnection;
use redis_throttle_client::layer::{RateLimitConfig, RateLimitLayer};
use redis_throttle_client::{Limit, Quota, Throttle};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// Far above any load here: every request is admitted.
const HUGE: u64 = 1_000_000_000_000;

struct Redis(Child, u16);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis(binary: &str, module: &str) -> Redis {
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a port");
    let child = Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--loadmodule", module])
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {binary}: {e}"));
    let server = Redis(child, port);
    let deadline = Instant::now() + Duration::from_secs(20);
    while redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_err()
    {
        assert!(Instant::now() < deadline, "{binary} did not answer");
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// The naive middleware: INCR the caller's counter, EXPIRE it when it is
/// new, refuse above the limit.
async fn incr_expire(
    State(conn): State<MultiplexedConnection>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let key = format!("naive:{}", peer.ip());
    let mut c = conn.clone();
    let Ok(count) = redis::cmd("INCR").arg(&key).query_async::<u64>(&mut c).await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    if count == 1 {
        let _: redis::RedisResult<()> = redis::cmd("EXPIRE").arg(&key).arg(3600).query_async(&mut c).await;
    }
    if count > HUGE {
        return StatusCode::TOO_MANY_REQUESTS.into_response();
    }
    next.run(request).await
}

fn route() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await;
    });
    addr
}

struct Measured {
    per_second: f64,
    /// The median latency of one request, µs.
    median_us: f64,
    requests: u64,
    refused: u64,
}

/// `clients` loops of GETs for `seconds` on `http`'s warm connections:
/// requests per second, and the median latency of one request.
async fn load(http: &reqwest::Client, url: &str, clients: usize, seconds: f64) -> Measured {
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (http, url, stop, refused) = (http.clone(), url.to_string(), stop.clone(), refused.clone());
            tokio::spawn(async move {
                let mut took = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let ok = matches!(http.get(&url).send().await, Ok(r) if r.status() == 200);
                    took.push(t.elapsed());
                    refused.fetch_add(u64::from(!ok), Ordering::Relaxed);
                }
                took
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut took = Vec::new();
    for w in workers {
        took.extend(w.await.unwrap_or_default());
    }
    let elapsed = started.elapsed().as_secs_f64();
    took.sort();
    let median = took.get(took.len() / 2).copied().unwrap_or_default();
    Measured {
        per_second: took.len() as f64 / elapsed,
        median_us: median.as_secs_f64() * 1e6,
        requests: took.len() as u64,
        refused: refused.load(Ordering::Relaxed),
    }
}

fn commands_processed(port: u16) -> u64 {
    let info: String = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("INFO").arg("stats").query(&mut c))
        .unwrap_or_default();
    info.lines().find_map(|l| l.strip_prefix("total_commands_processed:")?.trim().parse().ok()).unwrap_or(0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(module), Some(out)) = (args.get(1), args.get(2)) else {
        return Err("usage: rust-layer-bench MODULE.so OUT.md".into());
    };
    let seconds: f64 = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let clients: usize = std::env::var("BENCH_CONCURRENCY").ok().and_then(|s| s.parse().ok()).unwrap_or(32);
    let binary = std::env::var("BENCH_SERVER").unwrap_or_else(|_| "redis-server".into());
    let redis = start_redis(&binary, module);
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.1))?;
    let conn = client.get_multiplexed_async_connection().await?;
    let huge = NonZeroU64::new(HUGE).ok_or("zero")?;

    let governor =
        GovernorConfigBuilder::default().per_nanosecond(1).burst_size(u32::MAX).finish().ok_or("governor")?;
    let one = RateLimitConfig::builder(Throttle::new(conn.clone()))
        .prefix("bench1")
        .limit("hour", Limit::fixed(Quota::per_hour(huge)))
        .finish()?;
    let two = RateLimitConfig::builder(Throttle::new(conn.clone()))
        .prefix("bench2")
        .limit("second", Limit::token(Quota::per_second(huge)))
        .limit("hour", Limit::fixed(Quota::per_hour(huge)))
        .finish()?;
    let rows: Vec<(&str, Router)> = vec![
        ("no limiter", route()),
        ("tower_governor 0.8 (in-process, per instance)", route().layer(GovernorLayer::new(governor))),
        ("INCR + EXPIRE middleware (Redis)", route().layer(middleware::from_fn_with_state(conn.clone(), incr_expire))),
        ("redis-throttle layer, 1 limit (THROTTLE.FIXED)", route().layer(RateLimitLayer::new(one))),
        ("redis-throttle layer, 2 limits (THROTTLE.ALL)", route().layer(RateLimitLayer::new(two))),
    ];

    // Two rounds over the rows, interleaved so that a burst of other work
    // on the machine hits one round of a row, not all of it; each row's
    // best throughput and lowest median are kept.
    let http = reqwest::Client::new();
    let mut urls = Vec::new();
    for (name, app) in rows {
        let url = format!("http://{}/", serve(app).await);
        for _ in 0..200 {
            let _ = http.get(&url).send().await.and_then(|r| r.error_for_status());
        }
        urls.push((name, url));
    }
    let mut best: Vec<(f64, f64, f64, u64)> = vec![(0.0, f64::MAX, 0.0, 0); urls.len()];
    for round in 1..=2 {
        for ((name, url), best) in urls.iter().zip(best.iter_mut()) {
            eprintln!("== round {round}: {name}");
            let before = commands_processed(redis.1);
            let busy = load(&http, url, clients, seconds).await;
            let commands = commands_processed(redis.1).saturating_sub(before) as f64 / busy.requests.max(1) as f64;
            let alone = load(&http, url, 1, seconds / 2.0).await;
            *best = (
                best.0.max(busy.per_second),
                best.1.min(alone.median_us),
                commands,
                best.3 + busy.refused + alone.refused,
            );
        }
    }
    let baseline_us = best.first().map_or(0.0, |b| b.1);
    let table: Vec<String> = urls
        .iter()
        .zip(&best)
        .map(|((name, _), (per_second, median, commands, refused))| {
            format!(
                "| {name} | {per_second:.0} | {median:.0} | {:+.0} | {commands:.2} | {refused} |",
                median - baseline_us
            )
        })
        .collect();

    let version: String = {
        let mut c = client.get_connection()?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut c)?;
        info.lines().find_map(|l| l.strip_prefix("redis_version:")).unwrap_or("?").trim().to_string()
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_average = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load_average = load_average.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    let report = format!(
        "# The Rust tower layer against tower_governor and a naive Redis middleware\n\n\
         Written by `make bench` (`bench/rust-layer/`): one axum route behind each limiter, the rows in one \
         run on one machine ({cores} cores; load average {load_average} at the end, other work included), the service, its load and Redis {version} ({binary}, loopback) \
         sharing them. Every limit is far above the load, so every request is admitted and each row measures \
         the limiter's own cost. Requests per second: {clients} clients at once for {seconds} s; latency: the \
         median of one client's sequential requests for {half} s, and what the limiter adds to the row \
         without one; the best of two rounds, interleaved; Redis commands per request from `INFO stats`. tower_governor keeps its counts in the process: a service \
         of N instances admits N times its limit, and a restart forgets it. The naive middleware is the \
         usual INCR, then EXPIRE on a new key: two round trips at a window's first request, and a counter \
         that never expires if the process dies between them.\n\n\
         | limiter | requests/s | latency µs | added µs | Redis commands/request | refused |\n\
         |---|---:|---:|---:|---:|---:|\n{}\n",
        table.join("\n"),
        half = seconds / 2.0,
    );
    std::fs::write(out, &report)?;
    print!("{report}");
    Ok(())
}
