//! Native Redis rate limiting: THROTTLE.FIXED, THROTTLE.SLIDING,
//! THROTTLE.TOKEN and THROTTLE.LEAKY.
//!
//! [`limiter`], [`args`] and [`codec`] know nothing of Redis; [`module`]
//! is the thin layer that registers the commands and data types.

pub mod args;
pub mod codec;
pub mod limiter;
mod module;
mod wait_queue;
