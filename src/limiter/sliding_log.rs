use std::collections::VecDeque;

use super::{until_idle, Decision, Limiter, Params, MAX_LIMIT, NEVER};

/// Sliding log: the exact admitted units of the last `period`. In every
/// interval of one `period`, at most `limit` units are admitted.
///
/// The log is a queue of 32-bit words in time order, each entry stored as
/// the time since the entry before it: one word for a gap under 2^30 µs
/// (about 18 minutes) and a single unit, more for a longer gap or more
/// units (see [`Word`]). Calls at the same microsecond share an entry. The
/// first and last entries' times are kept whole, so the log reads from
/// either end: expired entries leave from the front, refunds from the back.
/// Each call brings its `limit` and `period`; the state keeps neither.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingLog {
    log: VecDeque<u32>,
    /// The first entry's time (its own gap word is not read).
    front_at_us: u64,
    /// The last entry's time.
    back_at_us: u64,
    /// Sum of the units in `log`.
    pub(crate) used: u64,
    pub(crate) updated_at_us: u64,
}

/// The kind of a log word, in its top two bits; 30 bits of payload.
///
/// An entry is a `GAP` word, or a `LONG_GAP` word (the gap's high 30 bits)
/// and a `MORE` word (its low 30); then, for more than one unit, a `UNITS`
/// word (units below 2^30), or a `UNITS` word (the high bits) and a `MORE`
/// word (the low 30). Only `GAP` and `LONG_GAP` start an entry, so an entry
/// is found from either end.
struct Word;

impl Word {
    const GAP: u32 = 0b00 << 30;
    const LONG_GAP: u32 = 0b01 << 30;
    const MORE: u32 = 0b10 << 30;
    const UNITS: u32 = 0b11 << 30;
    const KIND: u32 = 0b11 << 30;
    const PAYLOAD: u32 = !Word::KIND;
    const PAYLOAD_BITS: u32 = 30;

    fn kind(word: u32) -> u32 {
        word & Word::KIND
    }

    fn payload(word: u32) -> u64 {
        u64::from(word & Word::PAYLOAD)
    }

    fn starts_entry(word: u32) -> bool {
        matches!(Word::kind(word), Word::GAP | Word::LONG_GAP)
    }

    /// A 60-bit value as one word of `kind` (when it fits 30 bits) or as
    /// `high_kind` plus a `MORE` word.
    fn push_value(log: &mut VecDeque<u32>, value: u64, kind: u32, high_kind: u32) {
        if value < 1 << Word::PAYLOAD_BITS {
            log.push_back(kind | value as u32);
        } else {
            log.push_back(high_kind | (value >> Word::PAYLOAD_BITS) as u32 & Word::PAYLOAD);
            log.push_back(Word::MORE | value as u32 & Word::PAYLOAD);
        }
    }
}

/// One decoded log entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) at_us: u64,
    pub(crate) units: u64,
}

/// An entry as its words say it: its gap from the entry before, its units,
/// and how many words it takes.
struct Parsed {
    gap: u64,
    units: u64,
    words: usize,
}

/// Parses the entry whose first word is at `start`.
fn parse(log: &VecDeque<u32>, start: usize) -> Option<Parsed> {
    let word = |i: usize| log.get(i).copied();
    let first = word(start)?;
    let (gap, mut next) = match Word::kind(first) {
        Word::GAP => (Word::payload(first), start + 1),
        Word::LONG_GAP => {
            let low = word(start + 1).filter(|w| Word::kind(*w) == Word::MORE)?;
            (Word::payload(first) << Word::PAYLOAD_BITS | Word::payload(low), start + 2)
        }
        _ => return None,
    };
    let mut units = 1;
    if let Some(count) = word(next).filter(|w| Word::kind(*w) == Word::UNITS) {
        units = Word::payload(count);
        next += 1;
        if let Some(low) = word(next).filter(|w| Word::kind(*w) == Word::MORE) {
            units = units << Word::PAYLOAD_BITS | Word::payload(low);
            next += 1;
        }
    }
    Some(Parsed { gap, units, words: next - start })
}

/// Walks a log's entries from the oldest.
pub(crate) struct Entries<'a> {
    log: &'a VecDeque<u32>,
    next: usize,
    at_us: u64,
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let parsed = parse(self.log, self.next)?;
        if self.next > 0 {
            self.at_us = self.at_us.saturating_add(parsed.gap);
        }
        self.next += parsed.words;
        Some(Entry { at_us: self.at_us, units: parsed.units })
    }
}

impl SlidingLog {
    /// An empty log last changed at `updated_at_us`, for the codec to fill.
    pub(crate) fn empty(updated_at_us: u64) -> SlidingLog {
        SlidingLog { updated_at_us, ..SlidingLog::default() }
    }

    pub(crate) fn entries(&self) -> Entries<'_> {
        Entries { log: &self.log, next: 0, at_us: self.front_at_us }
    }

    /// Words the log holds room for: its memory.
    pub(crate) fn capacity_words(&self) -> usize {
        self.log.capacity()
    }

    /// Appends an entry later than every entry in the log (the codec checks
    /// the order and the units; the algorithm keeps them).
    pub(crate) fn push_entry(&mut self, entry: Entry) {
        let gap = if self.log.is_empty() {
            self.front_at_us = entry.at_us;
            0
        } else {
            entry.at_us.saturating_sub(self.back_at_us)
        };
        Word::push_value(&mut self.log, gap, Word::GAP, Word::LONG_GAP);
        if entry.units > 1 {
            Word::push_value(&mut self.log, entry.units, Word::UNITS, Word::UNITS);
        }
        self.back_at_us = entry.at_us;
        self.used += entry.units;
    }

    /// Where the newest entry starts.
    fn newest_start(&self) -> Option<usize> {
        (0..self.log.len()).rev().find(|&i| self.log.get(i).is_some_and(|w| Word::starts_entry(*w)))
    }

    /// The newest entry, read from the back.
    fn newest(&self) -> Option<Entry> {
        let parsed = parse(&self.log, self.newest_start()?)?;
        Some(Entry { at_us: self.back_at_us, units: parsed.units })
    }

    fn pop_newest(&mut self) -> Option<Entry> {
        let start = self.newest_start()?;
        let parsed = parse(&self.log, start)?;
        let entry = Entry { at_us: self.back_at_us, units: parsed.units };
        self.log.truncate(start);
        self.used -= entry.units.min(self.used);
        if self.log.is_empty() {
            (self.front_at_us, self.back_at_us) = (0, 0);
        } else {
            self.back_at_us -= parsed.gap.min(self.back_at_us);
        }
        Some(entry)
    }

    fn pop_oldest(&mut self) -> Option<Entry> {
        let parsed = parse(&self.log, 0)?;
        let entry = Entry { at_us: self.front_at_us, units: parsed.units };
        self.log.drain(..parsed.words);
        self.used -= entry.units.min(self.used);
        match parse(&self.log, 0) {
            Some(next) => {
                self.front_at_us = self.front_at_us.saturating_add(next.gap);
                // The new first entry's gap is read from front_at_us now: an
                // empty gap word, as a log built from scratch has.
                let gap_words =
                    if Word::kind(self.log.front().copied().unwrap_or(0)) == Word::LONG_GAP { 2 } else { 1 };
                self.log.drain(..gap_words);
                self.log.push_front(Word::GAP);
            }
            None => (self.front_at_us, self.back_at_us) = (0, 0),
        }
        Some(entry)
    }

    /// Units in entries that have left the window `(now - period, now]`.
    /// Costs one step per expired entry.
    fn expired_units(&self, period: u64, now: u64) -> u64 {
        self.entries().take_while(|e| e.at_us.saturating_add(period) <= now).map(|e| e.units).sum()
    }

    fn drop_expired(&mut self, period: u64, now: u64) {
        while self.log.front().is_some() && self.front_at_us.saturating_add(period) <= now {
            self.pop_oldest();
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

/// Until the log is empty again: one period after its newest entry, in
/// ms (rounded up) and µs.
fn reset_after(newest_at_us: Option<u64>, used: u64, period: u64, now: u64) -> (u64, u64) {
    match newest_at_us {
        Some(at_us) if used > 0 => until_idle(u128::from(at_us + period - now)),
        _ => (0, 0),
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
        let (used_after, newest_at) =
            if allowed && cost > 0 { (used + cost, Some(now)) } else { (used, self.newest().map(|e| e.at_us)) };
        let (reset_after_ms, reset_after_us) = reset_after(newest_at, used_after, period, now);
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(used_after),
            retry_after_ms,
            reset_after_ms,
            reset_after_us,
        }
    }

    /// Logs `units` at `now` whatever the limit says. The log keeps at most
    /// `limit` entries even so (each entry holds a unit or more): once it
    /// holds `limit` units, more join the newest entry, which moves to
    /// `now` (its units then leave the window later than they would:
    /// stricter, never laxer).
    fn force(&mut self, params: &Params, units: u64, now_us: u64) {
        let now = now_us.max(self.updated_at_us);
        self.drop_expired(params.period_us(), now);
        let units = units.min(MAX_LIMIT - self.used.min(MAX_LIMIT));
        if units == 0 {
            return;
        }
        if self.used >= params.limit() {
            if let Some(newest) = self.pop_newest() {
                self.push_entry(Entry { at_us: now, units: newest.units + units });
            }
        } else {
            self.push(now, units);
        }
        self.updated_at_us = now;
    }

    fn used(&self, params: &Params, now_us: u64) -> u64 {
        let now = now_us.max(self.updated_at_us);
        self.used - self.expired_units(params.period_us(), now)
    }

    /// Removes the newest units first: a refund returns what was reserved
    /// last.
    fn refund(&mut self, params: &Params, units: u64, now_us: u64) -> Decision {
        let now = now_us.max(self.updated_at_us);
        let period = params.period_us();
        self.drop_expired(period, now);
        let mut left = units.min(self.used);
        while left > 0 {
            let Some(newest) = self.pop_newest() else { break };
            let taken = left.min(newest.units);
            left -= taken;
            if taken < newest.units {
                self.push_entry(Entry { at_us: newest.at_us, units: newest.units - taken });
            }
        }
        if self.used == 0 {
            *self = SlidingLog::default();
        } else {
            self.updated_at_us = now;
        }
        self.release_spare_capacity();
        let (reset_after_ms, reset_after_us) = reset_after(self.newest().map(|e| e.at_us), self.used, period, now);
        let limit = params.limit();
        Decision {
            allowed: true,
            limit,
            remaining: limit.saturating_sub(self.used),
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

    fn run(limit: u64, period_us: u64, steps: &[Step]) -> SlidingLog {
        crate::limiter::table::run::<SlidingLog>(params(limit, period_us), steps)
    }

    #[test]
    fn units_leave_one_period_after_admission() {
        let state = run(
            3,
            S,
            &[
                (0, 1, true, 2, 0, 1000),
                (200_000, 2, true, 0, 0, 1000),
                (500_000, 1, false, 0, 500, 700),
                (999_999, 1, false, 0, 1, 201),
                (S, 1, true, 0, 0, 1000),
                (S, 1, false, 0, 200, 1000),
                (S + 200_000, 2, true, 0, 0, 1000),
            ],
        );
        assert_eq!(state.used, 3);
        assert_eq!(state.entries().count(), 2);
    }

    #[test]
    fn peek_and_impossible_costs() {
        run(
            2,
            S,
            &[(0, 0, true, 2, 0, 0), (0, 3, false, 2, NEVER, 0), (0, 2, true, 0, 0, 1000), (S, 0, true, 2, 0, 0)],
        );
    }

    #[test]
    fn same_microsecond_shares_an_entry() {
        let p = params(100, S);
        let mut state = SlidingLog::default();
        state.acquire(&p, 1, 7);
        state.acquire(&p, 1, 7);
        state.acquire(&p, 5, 7);
        state.acquire(&p, 1, 8);
        // 7: a gap word and a units word; 8: one gap word.
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
    fn long_gaps_and_many_units_read_back_from_either_end() {
        let p = params(1_000_000_000_000_000, crate::limiter::MAX_PERIOD_US);
        let mut state = SlidingLog::default();
        let calls = [(5, 1), (6, 1 << 30), (6 + (1 << 30), 3), (7 + (1 << 40), 1), (8 + (1 << 47), (1 << 40) + 5)];
        for (at, cost) in calls {
            assert!(state.acquire(&p, cost, at).allowed);
        }
        let entries: Vec<_> = state.entries().map(|e| (e.at_us, e.units)).collect();
        assert_eq!(entries, calls.to_vec());
        assert_eq!(state.newest(), Some(Entry { at_us: 8 + (1 << 47), units: (1 << 40) + 5 }));
        state.refund(&p, (1 << 40) + 6, 9 + (1 << 47));
        let entries: Vec<_> = state.entries().map(|e| (e.at_us, e.units)).collect();
        assert_eq!(entries, vec![(5, 1), (6, 1 << 30), (6 + (1 << 30), 3)]);
        state.pop_oldest();
        assert_eq!(state.entries().next(), Some(Entry { at_us: 6, units: 1 << 30 }));
        state.pop_oldest();
        let entries: Vec<_> = state.entries().map(|e| (e.at_us, e.units)).collect();
        assert_eq!(entries, vec![(6 + (1 << 30), 3)]);
        // Popped down, the log is the one built from its entries.
        let mut rebuilt = SlidingLog::empty(state.updated_at_us);
        rebuilt.push_entry(Entry { at_us: 6 + (1 << 30), units: 3 });
        assert_eq!(state, rebuilt);
    }

    #[test]
    fn a_logged_call_takes_one_word() {
        let p = params(100_000, S);
        let mut state = SlidingLog::default();
        for i in 0..100_000 {
            state.acquire(&p, 1, 1_000 + i);
        }
        assert_eq!(state.log.len(), 100_000);
        assert!(state.capacity_words() * 4 <= 100_000 * 6, "{} words of room", state.capacity_words());
        // All expire: the memory comes back.
        state.acquire(&p, 1, 10 * S);
        assert_eq!(state.log.len(), 1);
        assert!(state.capacity_words() <= 8, "{} words of room", state.capacity_words());
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
