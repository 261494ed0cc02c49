use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The server's wall clock in Unix microseconds: Redis 7.0 offers only
/// milliseconds to modules, and the algorithms are exact to the µs.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Microseconds on a monotonic clock (since the module's first reading):
/// how long a waiter has waited, whatever happens to the wall clock. The
/// server's timers run on a monotonic clock too.
pub(crate) fn monotonic_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_micros()).unwrap_or(u64::MAX)
}
