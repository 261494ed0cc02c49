use super::{until_idle, Decision, Limiter, Params, MAX_LIMIT, NEVER};

/// Fixed window counter with Laravel's DurationLimiter semantics: a window
/// of one `period` opens at the first admitted call when none is open, and
/// admits at most `limit` units.
///
/// Two words: each call brings its `limit` and `period`, so the state keeps
/// neither; nor the time of its last change. A call earlier than the
/// window's start counts at the start: between the start and the last
/// change the window is open either way, so the decision is the same, and
/// `retry_after` and `reset_after` count from the caller's own time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FixedWindow {
    pub(crate) window_start_us: u64,
    /// Units admitted in the window; 0 means no window is open.
    pub(crate) count: u64,
}

impl FixedWindow {
    /// The open window at `now` as (start, units used), if any.
    fn open_window(&self, period_us: u64, now: u64) -> Option<(u64, u64)> {
        let open = self.count > 0 && now < self.window_start_us.saturating_add(period_us);
        open.then_some((self.window_start_us, self.count))
    }
}

impl Limiter for FixedWindow {
    fn acquire(&mut self, params: &Params, cost: u64, now_us: u64) -> Decision {
        let now = now_us.max(self.window_start_us);
        let limit = params.limit();
        let period = params.period_us();
        let (start, used) = self.open_window(period, now).unwrap_or((now, 0));
        let allowed = cost <= limit.saturating_sub(used);
        let used_after = if allowed { used + cost } else { used };
        if allowed && cost > 0 {
            *self = FixedWindow { window_start_us: start, count: used_after };
        }
        let (reset_after_ms, reset_after_us) =
            until_idle(if used_after > 0 { u128::from(start + period - now) } else { 0 });
        let retry_after_ms = match (allowed, cost > limit) {
            (true, _) => 0,
            (false, true) => NEVER,
            // The next window opens when this one ends.
            (false, false) => reset_after_ms as i64,
        };
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(used_after),
            retry_after_ms,
            reset_after_ms,
            reset_after_us,
        }
    }

    fn force(&mut self, params: &Params, units: u64, now_us: u64) {
        let now = now_us.max(self.window_start_us);
        let (start, used) = self.open_window(params.period_us(), now).unwrap_or((now, 0));
        let count = used.saturating_add(units).min(MAX_LIMIT);
        if count > 0 {
            *self = FixedWindow { window_start_us: start, count };
        }
    }

    fn used(&self, params: &Params, now_us: u64) -> u64 {
        let now = now_us.max(self.window_start_us);
        self.open_window(params.period_us(), now).map_or(0, |(_, used)| used)
    }

    fn refund(&mut self, params: &Params, units: u64, now_us: u64) -> Decision {
        let now = now_us.max(self.window_start_us);
        let period = params.period_us();
        let (start, used) = self.open_window(period, now).unwrap_or((now, 0));
        let used_after = used - units.min(used);
        *self = if used_after == 0 {
            FixedWindow::default()
        } else {
            FixedWindow { window_start_us: start, count: used_after }
        };
        let (reset_after_ms, reset_after_us) =
            until_idle(if used_after > 0 { u128::from(start + period - now) } else { 0 });
        Decision {
            allowed: true,
            limit: params.limit(),
            remaining: params.limit().saturating_sub(used_after),
            retry_after_ms: 0,
            reset_after_ms,
            reset_after_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::table::{quota as params, Step, S};

    fn run(limit: u64, period_us: u64, steps: &[Step]) {
        crate::limiter::table::run::<FixedWindow>(params(limit, period_us), steps);
    }

    #[test]
    fn window_opens_at_first_call_and_closes_after_period() {
        run(
            3,
            S,
            &[
                (10 * S, 1, true, 2, 0, 1000),
                (10 * S + 500_000, 2, true, 0, 0, 500),
                (10 * S + 999_999, 1, false, 0, 1, 1),
                (11 * S, 1, true, 2, 0, 1000),
            ],
        );
    }

    #[test]
    fn peek_and_impossible_costs() {
        run(
            5,
            S,
            &[
                (0, 0, true, 5, 0, 0),
                (0, 6, false, 5, NEVER, 0),
                (0, 5, true, 0, 0, 1000),
                (1, 0, true, 0, 0, 1000),
                (2, 1, false, 0, 1000, 1000),
            ],
        );
    }

    #[test]
    fn laravel_boundary_burst() {
        // 20 per second: 20 late in one window and 20 at the start of the next.
        let p = params(20, S);
        let mut state = FixedWindow::default();
        assert!(state.acquire(&p, 1, 0).allowed);
        let admitted = (0..40).map(|i| 900_000 + i * 5_000).filter(|&t| state.acquire(&p, 1, t).allowed).count();
        // 19 more in the first window (which ends at 1 s), 20 in the next.
        assert_eq!(admitted, 39);
    }

    #[test]
    fn time_never_runs_back_past_the_window_start() {
        let p = params(3, S);
        let mut state = FixedWindow::default();
        state.acquire(&p, 1, 5 * S);
        state.acquire(&p, 1, 5 * S + 600_000);
        // Before the last change, inside the window: its own time.
        let d = state.acquire(&p, 1, 5 * S + 200_000);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 0, 800));
        // Before the window: at its start.
        let d = state.acquire(&p, 1, 4 * S);
        assert_eq!((d.allowed, d.retry_after_ms, d.reset_after_ms), (false, 1000, 1000));
        assert_eq!(state, FixedWindow { window_start_us: 5 * S, count: 3 });
    }

    #[test]
    fn refund_gives_units_back_but_not_past_idle() {
        let p = params(5, S);
        let mut state = FixedWindow::default();
        state.acquire(&p, 4, 0);
        let d = state.refund(&p, 2, 100_000);
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 3, 900));
        let d = state.refund(&p, 10, 200_000);
        assert_eq!((d.remaining, d.reset_after_ms), (5, 0));
        assert_eq!(state, FixedWindow::default());
    }

    #[test]
    fn lower_limit_leaves_no_remaining() {
        let mut state = FixedWindow::default();
        state.acquire(&params(10, S), 8, 0);
        let d = state.acquire(&params(5, S), 1, 1);
        assert_eq!((d.allowed, d.remaining, d.retry_after_ms), (false, 0, 1000));
    }
}
