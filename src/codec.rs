//! Each state's stored form, free of Redis: a versioned sequence of 64-bit
//! words. RDB, DUMP/RESTORE, the AOF rewrite and DEBUG DIGEST-VALUE all use
//! it, so one decoder validates every value that enters the server.
//!
//! Decoding is total: any word sequence either yields a state that the
//! algorithms can run on without overflow or panic, or an error.

use std::collections::VecDeque;

use crate::limiter::{
    Bucket, Entry, FixedWindow, LeakyBucket, Params, SlidingLog, SlidingWindow, TokenBucket,
    MAX_LIMIT, MAX_TIME_US,
};

/// The encoding version written today; later releases keep loading it.
pub const ENCODING_VERSION: i32 = 1;

/// Why a stored value is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended or could not be read.
    Truncated,
    /// An encoding version this release does not know.
    Version,
    /// A field out of range or inconsistent with another.
    Invalid(&'static str),
}

/// A source of words: the RDB loader, a command's arguments, a test slice.
pub trait WordSource {
    fn word(&mut self) -> Result<u64, DecodeError>;
}

impl<I: Iterator<Item = u64>> WordSource for I {
    fn word(&mut self) -> Result<u64, DecodeError> {
        self.next().ok_or(DecodeError::Truncated)
    }
}

/// A state that can be stored.
pub trait Codec: Sized {
    /// Writes the fields, in the order `decode` reads them.
    fn encode(&self, out: &mut dyn FnMut(u64));
    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError>;
}

fn check(ok: bool, what: &'static str) -> Result<(), DecodeError> {
    if ok {
        Ok(())
    } else {
        Err(DecodeError::Invalid(what))
    }
}

fn time(src: &mut dyn WordSource) -> Result<u64, DecodeError> {
    let t = src.word()?;
    check(t <= MAX_TIME_US, "time")?;
    Ok(t)
}

fn params(limit: u64, period_us: u64, burst: Option<u64>) -> Result<Params, DecodeError> {
    Params::new(limit, period_us, burst).map_err(|_| DecodeError::Invalid("parameters"))
}

fn known_version(version: i32) -> Result<(), DecodeError> {
    if version == ENCODING_VERSION {
        Ok(())
    } else {
        Err(DecodeError::Version)
    }
}

impl Codec for FixedWindow {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        for w in [self.window_start_us, self.count, self.updated_at_us, self.limit, self.period_us] {
            out(w);
        }
    }

    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        known_version(version)?;
        let window_start_us = time(src)?;
        let count = src.word()?;
        let updated_at_us = time(src)?;
        let p = params(src.word()?, src.word()?, None)?;
        // Not `count <= limit`: a refund under a lowered limit leaves the
        // count above the call's limit, and what the algorithms store must
        // load back. The algorithms saturate against the limit.
        check((1..=MAX_LIMIT).contains(&count), "count")?;
        check(
            window_start_us <= updated_at_us && updated_at_us - window_start_us < p.period_us(),
            "window",
        )?;
        Ok(FixedWindow { window_start_us, count, updated_at_us, limit: p.limit(), period_us: p.period_us() })
    }
}

impl Codec for SlidingWindow {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        for w in [
            self.window_start_us,
            self.previous,
            self.current,
            self.updated_at_us,
            self.limit,
            self.period_us,
        ] {
            out(w);
        }
    }

    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        known_version(version)?;
        let window_start_us = time(src)?;
        let previous = src.word()?;
        let current = src.word()?;
        let updated_at_us = time(src)?;
        let p = params(src.word()?, src.word()?, None)?;
        check(window_start_us % p.period_us() == 0, "window")?;
        check(
            window_start_us <= updated_at_us && updated_at_us - window_start_us < p.period_us(),
            "window",
        )?;
        // Counts may exceed the limit after a refund under a lowered limit.
        check(previous <= MAX_LIMIT && current <= MAX_LIMIT, "count")?;
        Ok(SlidingWindow {
            window_start_us,
            previous,
            current,
            updated_at_us,
            limit: p.limit(),
            period_us: p.period_us(),
        })
    }
}

impl Codec for SlidingLog {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        let entries = self.entries().count() as u64;
        for w in [self.used, self.updated_at_us, self.limit, self.period_us, entries] {
            out(w);
        }
        for entry in self.entries() {
            out(entry.at_us);
            out(entry.units);
        }
    }

    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        known_version(version)?;
        let used = src.word()?;
        let updated_at_us = time(src)?;
        let p = params(src.word()?, src.word()?, None)?;
        let entries = src.word()?;
        // `used` may exceed the limit after a refund under a lowered limit.
        check(used <= MAX_LIMIT && entries <= used, "log length")?;
        // Reserve no more than a bounded amount up front: the length is
        // untrusted until the words are actually there.
        let mut log = SlidingLog {
            log: VecDeque::with_capacity(entries.min(4096) as usize),
            used: 0,
            updated_at_us,
            limit: p.limit(),
            period_us: p.period_us(),
        };
        let mut previous_at = None;
        for _ in 0..entries {
            let at_us = src.word()?;
            let units = src.word()?;
            check(at_us <= updated_at_us && at_us + p.period_us() > updated_at_us, "entry time")?;
            check(previous_at.is_none_or(|prev| prev < at_us), "entry order")?;
            check(units >= 1 && units <= used - log.used, "entry units")?;
            previous_at = Some(at_us);
            log.push_entry(Entry { at_us, units });
        }
        check(log.used == used, "log total")?;
        Ok(log)
    }
}

fn encode_bucket(b: &Bucket, out: &mut dyn FnMut(u64)) {
    for w in [(b.level >> 64) as u64, b.level as u64, b.updated_at_us, b.limit, b.period_us, b.burst] {
        out(w);
    }
}

fn decode_bucket(version: i32, src: &mut dyn WordSource) -> Result<Bucket, DecodeError> {
    known_version(version)?;
    let high = src.word()?;
    let low = src.word()?;
    let level = u128::from(high) << 64 | u128::from(low);
    let updated_at_us = time(src)?;
    let p = params(src.word()?, src.word()?, Some(src.word()?))?;
    check(level <= u128::from(p.burst()) * u128::from(p.period_us()), "level")?;
    Ok(Bucket { level, updated_at_us, limit: p.limit(), period_us: p.period_us(), burst: p.burst() })
}

impl Codec for TokenBucket {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        encode_bucket(&self.0, out);
    }

    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        decode_bucket(version, src).map(TokenBucket)
    }
}

impl Codec for LeakyBucket {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        encode_bucket(&self.0, out);
    }

    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        decode_bucket(version, src).map(LeakyBucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Limiter;

    fn words<T: Codec>(state: &T) -> Vec<u64> {
        let mut out = Vec::new();
        state.encode(&mut |w| out.push(w));
        out
    }

    fn round_trip<T: Codec + PartialEq + std::fmt::Debug>(state: T) {
        let encoded = words(&state);
        let decoded = T::decode(ENCODING_VERSION, &mut encoded.iter().copied()).unwrap();
        assert_eq!(decoded, state);
        assert_eq!(T::decode(2, &mut encoded.iter().copied()), Err(DecodeError::Version));
        for cut in 0..encoded.len() {
            assert!(T::decode(ENCODING_VERSION, &mut encoded[..cut].iter().copied()).is_err());
        }
    }

    fn used<T: Limiter>(params: Params, calls: &[(u64, u64)]) -> T {
        let mut state = T::default();
        for &(at, cost) in calls {
            state.acquire(&params, cost, at);
        }
        state
    }

    #[test]
    fn every_type_round_trips_and_refuses_truncation() {
        let p = Params::new(10, 1_000_000, Some(20)).unwrap();
        let calls = [(5, 1), (5, 2), (900_000, 1), (1_500_000, 3)];
        round_trip(used::<FixedWindow>(p, &calls));
        round_trip(used::<SlidingWindow>(p, &calls));
        round_trip(used::<SlidingLog>(p, &calls));
        round_trip(used::<TokenBucket>(p, &calls));
        round_trip(used::<LeakyBucket>(p, &calls));
    }

    /// A refund under a lowered limit stores a count above that limit; it
    /// must load back (it once made the RDB unloadable).
    #[test]
    fn refund_under_a_lowered_limit_round_trips() {
        let high = Params::new(10, 1_000_000, None).unwrap();
        let low = Params::new(5, 1_000_000, None).unwrap();
        let calls = [(5, 8)];
        let mut fixed = used::<FixedWindow>(high, &calls);
        fixed.refund(&low, 1, 6);
        round_trip(fixed);
        let mut sliding = used::<SlidingWindow>(high, &calls);
        sliding.refund(&low, 1, 6);
        round_trip(sliding);
        let mut log = used::<SlidingLog>(high, &[(5, 4), (6, 4)]);
        log.refund(&low, 1, 7);
        round_trip(log);
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        let p = Params::new(10, 1_000_000, None).unwrap();
        let fixed = words(&used::<FixedWindow>(p, &[(5, 3)]));
        let mut bad = fixed.clone();
        bad[1] = 0; // an open window without units
        assert!(FixedWindow::decode(1, &mut bad.into_iter()).is_err());
        let mut bad = fixed.clone();
        bad[4] = 0; // period
        assert!(FixedWindow::decode(1, &mut bad.into_iter()).is_err());

        let log = words(&used::<SlidingLog>(p, &[(5, 1), (6, 2)]));
        let mut bad = log.clone();
        bad[4] = u64::MAX; // length
        assert!(SlidingLog::decode(1, &mut bad.into_iter()).is_err());
        let mut bad = log.clone();
        bad[0] = 4; // total disagrees with the entries
        assert!(SlidingLog::decode(1, &mut bad.into_iter()).is_err());

        let mut bad = fixed.clone();
        bad[1] = MAX_LIMIT + 1; // count beyond any limit
        assert!(FixedWindow::decode(1, &mut bad.into_iter()).is_err());

        let token = words(&used::<TokenBucket>(p, &[(5, 3)]));
        let mut bad = token.clone();
        bad[0] = 1; // level above capacity
        assert!(TokenBucket::decode(1, &mut bad.into_iter()).is_err());
    }
}
