use super::pack::{Packer, Unpacker};
use super::{until_idle, Decision, Limiter, Params, MAX_LIMIT, NEVER};

/// Sliding window counter: windows of one `period` aligned on the Unix
/// epoch; the previous window's count is weighted by its overlap with the
/// rolling window `(now - period, now]`. Constant memory.
///
/// All comparisons are scaled by `period` so the weighting is exact:
/// a call fits when `prev * (period - elapsed) + (curr + cost) * period <=
/// limit * period`.
///
/// Stored in three words ([`Counts`] packed): the counts, the window (as
/// its number since the epoch: it starts on a multiple of the period) and
/// the period in ms (a call under another period carries the estimate
/// over, see [`Counts::view`]). Each call brings its `limit`, so the state
/// keeps none; nor the time of its last change: a call earlier than the
/// stored window's start counts at the start, and one inside the window
/// at its own time (the estimate only falls as time passes, so an earlier
/// call is judged at least as strictly as a later one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingWindow([u64; 3]);

/// The sliding counter's fields, as the algorithm reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) window_start_us: u64,
    pub(crate) previous: u64,
    pub(crate) current: u64,
    /// A whole number of ms (as every period is), or 0 when idle.
    pub(crate) period_us: u64,
}

/// Field widths: counts up to 10^15 < 2^50; periods up to 3650 days < 2^39
/// ms; window numbers below 10^16 µs / 1 ms < 2^44.
const COUNT_BITS: u32 = 50;
const PERIOD_MS_BITS: u32 = 39;
const WINDOW_BITS: u32 = 44;
const MS: u64 = 1_000;

impl SlidingWindow {
    pub(crate) fn counts(&self) -> Counts {
        let mut read = Unpacker::new(&self.0);
        let previous = read.take(COUNT_BITS);
        let current = read.take(COUNT_BITS);
        let period_us = read.take(PERIOD_MS_BITS) * MS;
        let window = read.take(WINDOW_BITS);
        Counts { window_start_us: window.saturating_mul(period_us), previous, current, period_us }
    }

    /// Packs counts whose fields are within their bounds (the algorithm's
    /// and the codec's): the period is a whole number of ms and the window
    /// starts on a multiple of it.
    pub(crate) fn pack(c: &Counts) -> SlidingWindow {
        let window = c.window_start_us.checked_div(c.period_us).unwrap_or(0);
        SlidingWindow(
            Packer::new()
                .put(c.previous, COUNT_BITS)
                .put(c.current, COUNT_BITS)
                .put(c.period_us / MS, PERIOD_MS_BITS)
                .put(window, WINDOW_BITS)
                .finish(),
        )
    }
}

impl Limiter for SlidingWindow {
    fn acquire(&mut self, params: &Params, cost: u64, now_us: u64) -> Decision {
        let mut counts = self.counts();
        let decision = counts.acquire(params, cost, now_us);
        *self = SlidingWindow::pack(&counts);
        decision
    }

    fn refund(&mut self, params: &Params, units: u64, now_us: u64) -> Decision {
        let mut counts = self.counts();
        let decision = counts.refund(params, units, now_us);
        *self = SlidingWindow::pack(&counts);
        decision
    }

    fn force(&mut self, params: &Params, units: u64, now_us: u64) {
        let mut counts = self.counts();
        counts.force(params, units, now_us);
        *self = SlidingWindow::pack(&counts);
    }

    fn used(&self, params: &Params, now_us: u64) -> u64 {
        let counts = self.counts();
        let period = params.period_us();
        let mut view = counts.view(period, now_us.max(counts.window_start_us));
        view.floor_previous = params.floor_previous();
        super::ceil_div(view.weighted(period), u128::from(period)) as u64
    }
}

/// The counts as seen from one instant.
struct View {
    window_start: u64,
    previous: u64,
    current: u64,
    /// Microseconds since `window_start`, in `[0, period)`.
    elapsed: u64,
    /// The previous window weighs in whole units, rounded down (`FLOOR`).
    floor_previous: bool,
}

impl Counts {
    fn view(&self, period: u64, now: u64) -> View {
        let window_start = now - now % period;
        let elapsed = now - window_start;
        let (previous, current) = if self.current == 0 && self.previous == 0 {
            (0, 0)
        } else if period != self.period_us {
            // The period changed: carry the old estimate, rounded up, as the
            // current window's count, so nothing admitted is forgotten.
            (0, self.estimate_ceil(now))
        } else if window_start == self.window_start_us {
            (self.previous, self.current)
        } else if window_start == self.window_start_us + period {
            (self.current, 0)
        } else {
            (0, 0)
        };
        View { window_start, previous, current, elapsed, floor_previous: false }
    }

    /// The units counted against the limit at `now` (the weighted estimate,
    /// rounded up) and the ms until the counter is idle, under the stored
    /// period.
    pub(crate) fn at(&self, now: u64) -> (u64, u64) {
        if self.period_us == 0 {
            return (0, 0);
        }
        let now = now.max(self.window_start_us);
        let view = self.view(self.period_us, now);
        let used = super::ceil_div(view.weighted(self.period_us), u128::from(self.period_us)) as u64;
        (used, view.decision(true, 0, self.period_us, 0).reset_after_ms)
    }

    /// The stored counts' weighted estimate at `now` under their own period.
    fn estimate_ceil(&self, now: u64) -> u64 {
        let weighted = self.view(self.period_us, now).weighted(self.period_us);
        super::ceil_div(weighted, u128::from(self.period_us)) as u64
    }
}

impl View {
    fn decision(&self, allowed: bool, limit: u64, period: u64, retry_after_ms: i64) -> Decision {
        let capacity = u128::from(limit) * u128::from(period);
        let reset_after_us = if self.current > 0 {
            2 * period - self.elapsed
        } else if self.previous > 0 {
            period - self.elapsed
        } else {
            0
        };
        let (reset_after_ms, reset_after_us) = until_idle(u128::from(reset_after_us));
        Decision {
            allowed,
            limit,
            remaining: (capacity.saturating_sub(self.weighted(period)) / u128::from(period)) as u64,
            retry_after_ms,
            reset_after_ms,
            reset_after_us,
        }
    }

    /// The estimate scaled by `period`: exact, or with the previous
    /// window's share rounded down to whole units (`FLOOR`).
    fn weighted(&self, period: u64) -> u128 {
        let p = u128::from(period);
        let previous = u128::from(self.previous) * u128::from(period - self.elapsed);
        let previous = if self.floor_previous { previous / p * p } else { previous };
        previous + u128::from(self.current) * p
    }

    /// The largest scaled share `weight * (period - e)` the previous
    /// window may have for `room` whole units to be left: `room * period`
    /// exactly, or under `FLOOR` anything whose floor is at most `room`.
    fn share_for(&self, room: u64, period: u128) -> u128 {
        if self.floor_previous {
            (u128::from(room) + 1) * period - 1
        } else {
            u128::from(room) * period
        }
    }

    /// Microseconds from now until a call of `cost` fits, for a call that
    /// does not fit now and `cost <= limit`. The estimate only falls as
    /// time passes, so the earliest such instant is found in closed form.
    fn wait_us(&self, limit: u64, period: u64, cost: u64) -> u128 {
        let p = u128::from(period);
        if self.current + cost <= limit {
            // Fits later in this window once `previous` weighs little enough:
            // previous * (period - e) <= (limit - current - cost) * period.
            let room = self.share_for(limit - self.current - cost, p);
            let earliest = p - (room / u128::from(self.previous)).min(p);
            earliest - u128::from(self.elapsed)
        } else {
            // In the next window `current` becomes the previous count:
            // current * (period - e) <= (limit - cost) * period.
            let room = self.share_for(limit - cost, p);
            let earliest = p - (room / u128::from(self.current)).min(p);
            (p - u128::from(self.elapsed)) + earliest
        }
    }
}

impl Counts {
    pub(crate) fn acquire(&mut self, params: &Params, cost: u64, now_us: u64) -> Decision {
        let now = now_us.max(self.window_start_us);
        let limit = params.limit();
        let period = params.period_us();
        let p = u128::from(period);
        let mut view = self.view(period, now);
        view.floor_previous = params.floor_previous();
        let capacity = u128::from(limit) * p;
        let weighted = view.weighted(period);
        // Zero units always fit: a peek is admitted even while a lowered
        // limit leaves the estimate above it.
        let allowed = cost == 0 || weighted + u128::from(cost) * p <= capacity;
        // Until a call is admitted under a new period, the stored counts
        // keep decaying under their own period (each call carries them over
        // afresh), so a call that changes nothing waits on that view.
        let stored = (period != self.period_us && (self.current > 0 || self.previous > 0))
            .then(|| (self.view(self.period_us, now), self.period_us));
        let retry_after_ms = if allowed {
            0
        } else if cost > limit {
            NEVER
        } else {
            super::retry_ms(match &stored {
                // Fits exactly when `ceil(estimate) + cost <= limit`, that is
                // when the stored view fits `cost` under its own period.
                Some((old, old_period)) => old.wait_us(limit, *old_period, cost),
                None => view.wait_us(limit, period, cost),
            })
        };
        if allowed && cost > 0 {
            view.current += cost;
            *self = Counts {
                window_start_us: view.window_start,
                previous: view.previous,
                current: view.current,
                period_us: period,
            };
        }
        let mut decision = view.decision(allowed, limit, period, retry_after_ms);
        if let (false, Some((old, old_period))) = (allowed && cost > 0, &stored) {
            let idle = old.decision(allowed, limit, *old_period, 0);
            (decision.reset_after_ms, decision.reset_after_us) = (idle.reset_after_ms, idle.reset_after_us);
        }
        decision
    }

    /// Adds `units` to the current window, whatever the limit says.
    fn force(&mut self, params: &Params, units: u64, now_us: u64) {
        let now = now_us.max(self.window_start_us);
        let period = params.period_us();
        let view = self.view(period, now);
        let current = view.current.saturating_add(units).min(MAX_LIMIT);
        if current > 0 || view.previous > 0 {
            *self = Counts { window_start_us: view.window_start, previous: view.previous, current, period_us: period };
        }
    }

    /// Takes units from the current window first, then the previous one.
    pub(crate) fn refund(&mut self, params: &Params, units: u64, now_us: u64) -> Decision {
        let now = now_us.max(self.window_start_us);
        let period = params.period_us();
        let mut view = self.view(period, now);
        view.floor_previous = params.floor_previous();
        let from_current = units.min(view.current);
        view.current -= from_current;
        view.previous -= (units - from_current).min(view.previous);
        *self = if view.current == 0 && view.previous == 0 {
            Counts::default()
        } else {
            Counts {
                window_start_us: view.window_start,
                previous: view.previous,
                current: view.current,
                period_us: period,
            }
        };
        view.decision(true, params.limit(), period, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::table::{quota as params, Step, S};

    fn run(limit: u64, period_us: u64, steps: &[Step]) {
        crate::limiter::table::run::<SlidingWindow>(params(limit, period_us), steps);
    }

    #[test]
    fn previous_window_weighs_by_overlap() {
        run(
            10,
            10 * S,
            &[
                // 10 units late in window [0, 10 s).
                (9 * S, 10, true, 0, 0, 11_000),
                // At 12 s the previous window weighs 8/10: 8 used, 2 left.
                (12 * S, 0, true, 2, 0, 8_000),
                (12 * S, 2, true, 0, 0, 18_000),
                // Full: previous 10 * (10 - 2.5)/10 = 7.5, + 2 = 9.5; one more
                // fits once the estimate drops to 9: 10 * (10 - e)/10 <= 7 -> e = 3 s.
                (12_500_000, 1, false, 0, 500, 17_500),
                (13 * S - 1, 1, false, 0, 1, 17_001),
                (13 * S, 1, true, 0, 0, 17_000),
            ],
        );
    }

    #[test]
    fn waits_into_the_next_window() {
        run(
            4,
            S,
            &[
                (0, 4, true, 0, 0, 2000),
                // current 4 + 1 > 4: in the next window 4 * (1 - e) <= 3 -> e = 0.25 s.
                (100_000, 1, false, 0, 1150, 1900),
                (1_250_000, 1, true, 0, 0, 1750),
            ],
        );
    }

    #[test]
    fn peek_and_impossible_costs() {
        run(
            3,
            S,
            &[(0, 0, true, 3, 0, 0), (0, 4, false, 3, NEVER, 0), (0, 3, true, 0, 0, 2000), (2 * S, 0, true, 3, 0, 0)],
        );
    }

    #[test]
    fn never_more_than_limit_in_window_of_aligned_traffic() {
        let p = params(20, S);
        let mut state = SlidingWindow::default();
        // The seed's boundary burst: 20 late in a window, then at the edge.
        let late = (0..20).filter(|i| state.acquire(&p, 1, 500_000 + i * 20_000).allowed).count();
        let edge = (0..20).filter(|i| state.acquire(&p, 1, S + i * 10_000).allowed).count();
        assert_eq!(late, 20);
        // The estimate assumes the previous window's calls were spread
        // evenly, so one unit frees up per 1/20 of the period: 50, 100 and
        // 150 ms into the new window.
        assert_eq!(edge, 3);
    }

    #[test]
    fn refund_takes_from_the_current_window_first() {
        let p = params(10, S);
        let mut state = SlidingWindow::default();
        state.acquire(&p, 6, 500_000);
        state.acquire(&p, 3, 1_000_000);
        // previous 6 weighs fully at the window start: 9 used.
        let d = state.refund(&p, 4, 1_000_000);
        assert_eq!((state.counts().previous, state.counts().current, d.remaining), (5, 0, 5));
        let d = state.refund(&p, 9, 1_000_000);
        assert_eq!((d.remaining, d.reset_after_ms), (10, 0));
        assert_eq!(state, SlidingWindow::default());
    }

    #[test]
    fn packing_keeps_every_field() {
        let c = Counts {
            window_start_us: 9_999_999_999_000_000 / 3_000 * 3_000,
            previous: 1_000_000_000_000_000,
            current: 999_999_999_999_999,
            period_us: 3_000,
        };
        assert_eq!(SlidingWindow::pack(&c).counts(), c);
        let longest = Counts { period_us: crate::limiter::MAX_PERIOD_US, ..Counts::default() };
        assert_eq!(SlidingWindow::pack(&longest).counts(), longest);
        assert_eq!(SlidingWindow::pack(&Counts::default()), SlidingWindow::default());
    }

    /// `FLOOR` counts the previous window as limits does: its weighted
    /// share rounded down. One call a second at the same phase under
    /// "1 per second" is then always admitted (the exact estimate refuses
    /// every other one: 1 * 0.9 + 1 > 1).
    #[test]
    fn floor_previous_admits_a_client_that_keeps_to_the_rate() {
        let exact = params(1, S);
        let floor = exact.with_floor_previous();
        let (mut a, mut b) = (SlidingWindow::default(), SlidingWindow::default());
        let admitted = |state: &mut SlidingWindow, p: &Params| {
            (0..10).filter(|i| state.acquire(p, 1, 100_000 + i * S).allowed).count()
        };
        assert_eq!(admitted(&mut a, &exact), 5);
        assert_eq!(admitted(&mut b, &floor), 10);
        // 10 late in [0, 10 s); at 12 s the previous share is 8 either way;
        // at 12.5 s it is 7.5: 7 under FLOOR (3 left), 8 rounded up exactly.
        let p = params(10, 10 * S).with_floor_previous();
        let mut state = SlidingWindow::default();
        state.acquire(&p, 10, 9 * S);
        assert_eq!(state.acquire(&p, 0, 12 * S).remaining, 2);
        assert_eq!(state.acquire(&p, 0, 12_500_000).remaining, 3);
        assert_eq!(state.acquire(&params(10, 10 * S), 0, 12_500_000).remaining, 2);
        // Full at 12.5 s under FLOOR after 3 more: 7 + 3 = 10. One more fits
        // once floor(10 * (10 - e) / 10) <= 6, that is 10 - e < 7: e > 3 s,
        // the first µs after 13 s.
        assert!(state.acquire(&p, 3, 12_500_000).allowed);
        let d = state.acquire(&p, 1, 12_500_000);
        assert_eq!((d.allowed, d.retry_after_ms), (false, 501));
        assert!(!state.acquire(&p, 1, 13 * S).allowed);
        assert!(state.acquire(&p, 1, 13 * S + 1).allowed);
    }

    #[test]
    fn period_change_carries_the_estimate() {
        let mut state = SlidingWindow::default();
        state.acquire(&params(10, S), 6, 0);
        let d = state.acquire(&params(10, 2 * S), 0, 500_000);
        assert_eq!(d.remaining, 4);
    }
}
