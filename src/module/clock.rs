use std::time::{SystemTime, UNIX_EPOCH};

/// The server's wall clock in Unix microseconds: Redis 7.0 offers only
/// milliseconds to modules, and the algorithms are exact to the µs.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
