use std::collections::VecDeque;

use super::{ms_ceil, Decision, Limiter, Params, NEVER};

/// Sliding log: the exact admitted units of the last `period`. In every
/// interval of one `period`, at most `limit` units are admitted.
///
/// The log is a queue of 64-bit words in time order. A call of one unit
/// costs one word, its time shifted left by one; a call of more units sets
/// the low bit and adds a second word with the count. Calls at the same
/// microsecond share an entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingLog {
    pub(crate) log: VecDeque<u64>,
    /// Sum of the units in `log`.
    pub(crate) used: u64,
    pub(crate) updated_at_us: u64,
    pub(crate) limit: u64,
    pub(crate) period_us: u64,
}

const HAS_COUNT: u64 = 1;

/// One decoded log entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) at_us: u64,
    pub(crate) units: u64,
}

/// Walks a log's words as entries; `None` ends it, including at a flagged
/// word with no count after it (which the codec never accepts).
pub(crate) struct Entries<'a> {
    words: std::collections::vec_deque::Iter<'a, u64>,
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let word = *self.words.next()?;
        let units = if word & HAS_COUNT == 0 { 1 } else { *self.words.next()? };
        Some(Entry { at_us: word >> 1, units })
    }
}

impl SlidingLog {
    pub(crate) fn entries(&self) -> Entries<'_> {
        Entries { words: self.log.iter() }
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
        while let Some(&word) = self.log.front() {
            if (word >> 1).saturating_add(period) > now {
                break;
            }
            self.log.pop_front();
            let units = if word & HAS_COUNT == 0 { 1 } else { self.log.pop_front().unwrap_or(0) };
            self.used = self.used.saturating_sub(units);
        }
    }

    fn push(&mut self, now: u64, units: u64) {
        self.used += units;
        let len = self.log.len();
        // Same microsecond as the newest entry: add to it.
        if let Some(&last) = self.log.back() {
            if last >> 1 == now && last & HAS_COUNT == 0 {
                if let Some(slot) = self.log.back_mut() {
                    *slot |= HAS_COUNT;
                }
                self.log.push_back(1 + units);
                return;
            }
            if len >= 2 {
                if let Some(&stamp) = self.log.get(len - 2) {
                    if stamp & HAS_COUNT != 0 && stamp >> 1 == now {
                        if let Some(count) = self.log.back_mut() {
                            *count += units;
                        }
                        return;
                    }
                }
            }
        }
        if units == 1 {
            self.log.push_back(now << 1);
        } else {
            self.log.push_back(now << 1 | HAS_COUNT);
            self.log.push_back(units);
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
        if allowed && cost > 0 {
            self.drop_expired(period, now);
            self.push(now, cost);
            self.updated_at_us = now;
            self.limit = limit;
            self.period_us = period;
        }
        let used_after = if allowed { used + cost } else { used };
        let newest = self.entries().last().map(|e| e.at_us);
        let reset_after_ms = match newest {
            Some(at) if used_after > 0 => ms_ceil(u128::from(at + period - now)),
            _ => 0,
        };
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(used_after),
            retry_after_ms,
            reset_after_ms,
        }
    }

    fn last_params(&self) -> Option<Params> {
        Params::new(self.limit, self.period_us, None).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn params(limit: u64, period_us: u64) -> Params {
        Params::new(limit, period_us, None).unwrap()
    }

    /// (at µs, cost, allowed, remaining, retry_after, reset_after)
    type Step = (u64, u64, bool, u64, i64, u64);

    fn run(limit: u64, period_us: u64, steps: &[Step]) -> SlidingLog {
        let p = params(limit, period_us);
        let mut state = SlidingLog::default();
        for (i, &(at, cost, allowed, remaining, retry, reset)) in steps.iter().enumerate() {
            let d = state.acquire(&p, cost, at);
            assert_eq!(
                (d.allowed, d.limit, d.remaining, d.retry_after_ms, d.reset_after_ms),
                (allowed, limit, remaining, retry, reset),
                "step {i}"
            );
        }
        state
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
