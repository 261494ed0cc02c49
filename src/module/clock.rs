use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The server's wall clock in Unix microseconds: Redis 7.0 offers only
/// milliseconds to modules, and the algorithms are exact to the µs.
pub(crate) fn now_us() -> u64 {
    let now =
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    #[cfg(debug_assertions)]
    let now = now.saturating_add_signed(WALL_OFFSET_US.load(std::sync::atomic::Ordering::Relaxed));
    now
}

/// Debug builds only: a step added to the wall clock (`THROTTLE._CLOCK`).
#[cfg(debug_assertions)]
static WALL_OFFSET_US: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

#[cfg(debug_assertions)]
pub(crate) fn set_wall_offset_us(offset: i64) {
    WALL_OFFSET_US.store(offset, std::sync::atomic::Ordering::Relaxed);
}

/// Microseconds on a monotonic clock (since the module's first reading):
/// how long a waiter has waited, whatever happens to the wall clock. The
/// server's timers run on a monotonic clock too.
pub(crate) fn monotonic_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_micros()).unwrap_or(u64::MAX)
}
