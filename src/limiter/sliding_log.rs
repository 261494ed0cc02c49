use std::collections::VecDeque;

use super::{ms_ceil, Decision, Limiter, Params, NEVER};

/// Sliding log: the exact admitted units of the last `period`. In every
/// interval of one `period`, at most `limit` units are admitted.
///
/// The log is a queue of 64-bit words in time order. A call of one unit
/// costs one word, its time; a call of more units adds a second word, the
/// count tagged with the top bit (times stay below 2^54), so the log reads
/// unambiguously from either end. Calls at the same microsecond share an
/// entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingLog {
    pub(crate) log: VecDeque<u64>,
    /// Sum of the units in `log`.
    pub(crate) used: u64,
    pub(crate) updated_at_us: u64,
    pub(crate) limit: u64,
    pub(crate) period_us: u64,
}

const COUNT_TAG: u64 = 1 << 63;

fn is_count(word: u64) -> bool {
    word & COUNT_TAG != 0
}

/// One decoded log entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) at_us: u64,
    pub(crate) units: u64,
}

/// Walks a log's words as entries.
pub(crate) struct Entries<'a> {
    words: std::iter::Peekable<std::collections::vec_deque::Iter<'a, u64>>,
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let at_us = *self.words.next()?;
        let units = match self.words.next_if(|w| is_count(**w)) {
            Some(count) => count & !COUNT_TAG,
            None => 1,
        };
        Some(Entry { at_us, units })
    }
}

impl SlidingLog {
    /// Builds a log from entries in strictly increasing time order (the
    /// codec checks the order, the units and the total).
    pub(crate) fn push_entry(&mut self, entry: Entry) {
        self.log.push_back(entry.at_us);
        if entry.units > 1 {
            self.log.push_back(entry.units | COUNT_TAG);
        }
        self.used += entry.units;
    }


    pub(crate) fn entries(&self) -> Entries<'_> {
        Entries { words: self.log.iter().peekable() }
    }

    /// The newest entry, read from the back.
    fn newest(&self) -> Option<Entry> {
        let len = self.log.len();
        let last = *self.log.back()?;
        if is_count(last) {
            let at_us = *self.log.get(len.checked_sub(2)?)?;
            Some(Entry { at_us, units: last & !COUNT_TAG })
        } else {
            Some(Entry { at_us: last, units: 1 })
        }
    }

    fn pop_newest(&mut self) {
        if self.log.pop_back().is_some_and(is_count) {
            self.log.pop_back();
        }
    }

    /// Units in entries that have left the window `(now - period, now]`.
    /// Costs one step per expired entry.
    fn expired_units(&self, period: u64, now: u64) -> u64 {
        self.entries()
            .take_while(|e| e.at_us.saturating_add(period) <= now)
            .map(|e| e.units)
            .sum()
    }

    fn drop_expired(&mut self, period: u64, now: u64) {
        while let Some(&at_us) = self.log.front() {
            if at_us.saturating_add(period) > now {
                break;
            }
            self.log.pop_front();
            let units = match self.log.front() {
                Some(&w) if is_count(w) => {
                    self.log.pop_front();
                    w & !COUNT_TAG
                }
                _ => 1,
            };
            self.used = self.used.saturating_sub(units);
        }
        self.release_spare_capacity();
    }

    /// Gives memory back once the log uses a quarter of what it holds,
    /// keeping room to double: each shrink follows as many removals as it
    /// copies words, so the cost stays amortized O(1) per entry.
    fn release_spare_capacity(&mut self) {
        const KEEP_WORDS: usize = 8;
        let capacity = self.log.capacity();
        if capacity > KEEP_WORDS && self.log.len() <= capacity / 4 {
            self.log.shrink_to((self.log.len() * 2).max(KEEP_WORDS));
        }
    }

    fn push(&mut self, now: u64, units: u64) {
        match self.newest() {
            // Same microsecond as the newest entry: add to it.
            Some(newest) if newest.at_us == now => {
                self.pop_newest();
                self.used -= newest.units;
                self.push_entry(Entry { at_us: now, units: newest.units + units });
            }
            _ => self.push_entry(Entry { at_us: now, units }),
        }
    }

    /// Microseconds until `needed` more units have left the window, skipping
    /// the `expired` units already out. Walks only as far as it must.
    fn wait_us(&self, period: u64, now: u64, expired: u64, needed: u64) -> u128 {
        let mut freed = 0u64;
        for entry in self.entries() {
            freed = freed.saturating_add(entry.units);
            if freed >= expired.saturating_add(needed) {
                return u128::from(entry.at_us + period - now);
            }
        }
        0
    }
}

impl Limiter for SlidingLog {
    fn acquire(&mut self, params: &Params, cost: u64, now_us: u64) -> Decision {
        let decision = self.check(params, cost, now_us);
        if decision.allowed && cost > 0 {
            let now = now_us.max(self.updated_at_us);
            self.drop_expired(params.period_us(), now);
            self.push(now, cost);
            self.updated_at_us = now;
            self.limit = params.limit();
            self.period_us = params.period_us();
        }
        decision
    }

    fn check(&self, params: &Params, cost: u64, now_us: u64) -> Decision {
        let now = now_us.max(self.updated_at_us);
        let limit = params.limit();
        let period = params.period_us();
        let expired = self.expired_units(period, now);
        let used = self.used - expired;
        let allowed = cost <= limit.saturating_sub(used);
        let retry_after_ms = if allowed {
            0
        } else if cost > limit {
            NEVER
        } else {
            super::retry_ms(self.wait_us(period, now, expired, used + cost - limit))
        };
        let (used_after, newest_at) = if allowed && cost > 0 {
            (used + cost, Some(now))
        } else {
            (used, self.newest().map(|e| e.at_us))
        };
        let reset_after_ms = match newest_at {
            Some(at_us) if used_after > 0 => ms_ceil(u128::from(at_us + period - now)),
            _ => 0,
        };
        Decision { allowed, limit, remaining: limit.saturating_sub(used_after), retry_after_ms, reset_after_ms }
    }

    /// Removes the newest units first: a refund returns what was reserved
    /// last.
    fn refund(&mut self, params: &Params, units: u64, now_us: u64) -> Decision {
        let now = now_us.max(self.updated_at_us);
        let period = params.period_us();
        self.drop_expired(period, now);
        let mut left = units.min(self.used);
        while left > 0 {
            let Some(newest) = self.newest() else { break };
            let taken = left.min(newest.units);
            left -= taken;
            self.pop_newest();
            self.used -= newest.units;
            if taken < newest.units {
                self.push_entry(Entry { at_us: newest.at_us, units: newest.units - taken });
            }
        }
        if self.used == 0 {
            *self = SlidingLog::default();
        } else {
            self.updated_at_us = now;
            self.limit = params.limit();
            self.period_us = period;
        }
        self.release_spare_capacity();
        let reset_after_ms = match self.newest() {
            Some(entry) if self.used > 0 => ms_ceil(u128::from(entry.at_us + period - now)),
            _ => 0,
        };
        let limit = params.limit();
        Decision { allowed: true, limit, remaining: limit.saturating_sub(self.used), retry_after_ms: 0, reset_after_ms }
    }

    fn last_params(&self) -> Option<Params> {
        Params::new(self.limit, self.period_us, None).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::table::{quota as params, Step, S};

    fn run(limit: u64, period_us: u64, steps: &[Step]) -> SlidingLog {
        crate::limiter::table::run::<SlidingLog>(params(limit, period_us), steps)
    }

    #[test]
    fn units_leave_one_period_after_admission() {
        let state = run(3, S, &[
            (0, 1, true, 2, 0, 1000),
            (200_000, 2, true, 0, 0, 1000),
            (500_000, 1, false, 0, 500, 700),
            (999_999, 1, false, 0, 1, 201),
            (S, 1, true, 0, 0, 1000),
            (S, 1, false, 0, 200, 1000),
            (S + 200_000, 2, true, 0, 0, 1000),
        ]);
        assert_eq!(state.used, 3);
        assert_eq!(state.entries().count(), 2);
    }

    #[test]
    fn peek_and_impossible_costs() {
        run(2, S, &[
            (0, 0, true, 2, 0, 0),
            (0, 3, false, 2, NEVER, 0),
            (0, 2, true, 0, 0, 1000),
            (S, 0, true, 2, 0, 0),
        ]);
    }

    #[test]
    fn same_microsecond_shares_an_entry() {
        let p = params(100, S);
        let mut state = SlidingLog::default();
        state.acquire(&p, 1, 7);
        state.acquire(&p, 1, 7);
        state.acquire(&p, 5, 7);
        state.acquire(&p, 1, 8);
        assert_eq!(state.log.len(), 3);
        let entries: Vec<_> = state.entries().map(|e| (e.at_us, e.units)).collect();
        assert_eq!(entries, vec![(7, 7), (8, 1)]);
        assert_eq!(state.used, 8);
    }

    #[test]
    fn never_more_than_limit_in_any_period() {
        let p = params(20, S);
        let mut state = SlidingLog::default();
        let late = (0..20).filter(|i| state.acquire(&p, 1, 500_000 + i * 20_000).allowed).count();
        let edge = (0..20).filter(|i| state.acquire(&p, 1, S + i * 10_000).allowed).count();
        assert_eq!((late, edge), (20, 0));
    }

    #[test]
    fn refund_removes_the_newest_units() {
        let p = params(10, S);
        let mut state = SlidingLog::default();
        state.acquire(&p, 1, 0);
        state.acquire(&p, 3, 100);
        state.acquire(&p, 1, 200);
        let d = state.refund(&p, 3, 300);
        let entries: Vec<_> = state.entries().map(|e| (e.at_us, e.units)).collect();
        assert_eq!(entries, vec![(0, 1), (100, 1)]);
        assert_eq!((d.allowed, d.remaining, state.used), (true, 8, 2));
        let d = state.refund(&p, 5, 400);
        assert_eq!((d.remaining, d.reset_after_ms), (10, 0));
        assert_eq!(state, SlidingLog::default());
    }

    #[test]
    fn denied_calls_and_peeks_change_nothing() {
        let p = params(2, S);
        let mut state = SlidingLog::default();
        state.acquire(&p, 2, 0);
        let before = state.clone();
        state.acquire(&p, 1, 10);
        state.acquire(&p, 0, 2 * S);
        assert_eq!(state, before);
    }
}
