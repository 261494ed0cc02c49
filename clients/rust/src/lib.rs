//! A typed async client for the redis-throttle module's `THROTTLE.*`
//! commands, and a [`tower`](https://docs.rs/tower) layer that rate-limits
//! axum, tonic and hyper services through it, so that every instance of a
//! service shares one limit.
//!
//! - [`Throttle`]: one method per command ([`fixed`](Throttle::fixed),
//!   [`sliding`](Throttle::sliding), [`token`](Throttle::token),
//!   [`leaky`](Throttle::leaky), [`all`](Throttle::all),
//!   [`info`](Throttle::info)) on a [`MultiplexedConnection`](redis::aio::MultiplexedConnection),
//!   a [`ConnectionManager`](redis::aio::ConnectionManager) or a cluster
//!   [`ClusterConnection`](redis::cluster_async::ClusterConnection).
//! - [`Quota`], [`Limit`]: what a key admits, checked when built.
//! - [`Options`]: cost, time (`AT`), `BLOCK`, the penalties (bans, counted
//!   refusals, forced units) and `DETAIL`.
//! - [`Decision`]: the reply, with [`Duration`](std::time::Duration)s.
//! - Leases, a counting semaphore whose slots end by themselves ("at most
//!   3 jobs at once"): [`acquire`](Throttle::acquire) gives a [`Lease`] (its
//!   [`Token`], [`release`](Lease::release), [`renew`](Lease::renew)) or a
//!   [`Refused`]; [`with_lease`](Throttle::with_lease) runs work holding a
//!   slot and always gives it back.
//! - [`layer`] (feature `layer`, on by default): [`RateLimitLayer`](layer::RateLimitLayer).
//!
//! ```no_run
//! use std::num::NonZeroU64;
//! use redis_throttle_client::{Options, Quota, Throttle};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let throttle = Throttle::new(client.get_multiplexed_async_connection().await?);
//! let quota = Quota::per_second(NonZeroU64::new(10).unwrap());
//! let d = throttle.token("api:carol", quota, None, &Options::new()).await?;
//! println!("allowed {}, {} left, reset in {:?}", d.allowed, d.remaining, d.reset_after);
//! # Ok(())
//! # }
//! ```
//!
//! The module must be loaded on the server (`loadmodule
//! /path/to/libredis_throttle.so` in redis.conf): without it every call
//! fails with [`Error::ModuleMissing`], which says so.

#![warn(missing_docs)]

mod client;
mod error;
mod lease;
mod options;
mod quota;
mod reply;

#[cfg(feature = "layer")]
pub mod layer;

pub use client::{Connection, Plain, Throttle};
pub use error::Error;
pub use lease::{AcquireOptions, Admission, Lease, Refused, Token};
pub use options::{AllOptions, Ban, Options, Penalty, Spec};
pub use quota::{Algorithm, Limit, Quota, Sliding};
pub use reply::{AllDecision, Decision, Detail, Holder, Info};
