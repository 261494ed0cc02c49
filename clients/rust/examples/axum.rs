//! An axum service whose limits live in Redis, shared by every instance.
//!
//!     cargo run -p redis-throttle-client --example axum
//!     curl -i http://127.0.0.1:3000/
//!
//! REDIS_URL (default redis://127.0.0.1:6379/) names a server with the
//! module loaded; LISTEN (default 127.0.0.1:3000) the address to serve on.

use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use redis_throttle_client::layer::{FailureMode, RateLimitConfig, RateLimitLayer};
use redis_throttle_client::{Ban, Limit, Penalty, Quota, Throttle};

fn n(v: u64) -> NonZeroU64 {
    NonZeroU64::new(v).expect("not zero")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    // A ConnectionManager reconnects by itself after Redis restarts.
    let throttle = Throttle::new(redis::Client::open(url)?.get_connection_manager().await?);

    // Every route: 10 a second in bursts (token bucket) and 1000 an hour,
    // checked together in one THROTTLE.ALL; if Redis is down, let requests
    // through.
    let api = RateLimitConfig::builder(throttle.clone())
        .prefix("api")
        .limit("burst", Limit::token(Quota::per_second(n(10))))
        .limit("hour", Limit::fixed(Quota::per_hour(n(1000))))
        .timeout(Duration::from_millis(200))
        .finish()?;

    // Logins: 5 a minute per address, then banned for 15 minutes; if Redis
    // is down, refuse (503) rather than allow unlimited guessing.
    let ban = Penalty::none().ban(Ban::Plain(Duration::from_secs(15 * 60)));
    let login = RateLimitConfig::builder(throttle)
        .prefix("login")
        .limit_with_penalty("minute", Limit::sliding_exact(Quota::per_minute(n(5))), ban)
        .failure_mode(FailureMode::Closed)
        .finish()?;

    let app = Router::new()
        .route("/login", post(|| async { "welcome" }).layer(RateLimitLayer::new(login)))
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(api));

    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{listen}/");
    // The default key is the peer's address, which axum gives through ConnectInfo.
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}
