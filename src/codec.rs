//! Each state's stored form, free of Redis: a versioned sequence of 64-bit
//! words. RDB, DUMP/RESTORE, the AOF rewrite and DEBUG DIGEST-VALUE all use
//! it, so one decoder validates every value that enters the server.
//!
//! Decoding is total: any word sequence either yields a state that the
//! algorithms can run on without overflow or panic, or an error.
//!
//! Version 2 dropped the parameters the windows do not need (each call
//! brings them): FIXED and SLIDING EXACT keep no `limit` or `period`,
//! SLIDING keeps its `period` only. Version 3 dropped FIXED's and
//! SLIDING's last change (a call before the window's start counts at the
//! start). Values of versions 1 and 2, which carried them, still load:
//! what they carried is checked, then left out. The buckets' words are the
//! same in every version. Version 4 puts a key's ban first: a word 0 and
//! the state's words, or 3 and the ban's end, length and hits (the state a
//! ban sets aside is idle, and not written). Version 5
//! (today) added a second form of the TOKEN type's value, the state
//! CL.THROTTLE keeps (redis-cell's theoretical arrival time and arguments),
//! marked by a first word no bucket has.

use crate::limiter::cell::CellState;
use crate::limiter::{
    Ban, Bucket, Counts, Entry, FixedWindow, LeakyBucket, Lease, Leases, Limiter, Params, Penalized, SlidingLog,
    SlidingWindow, TokenBucket, TokenForm, MAX_HOLDERS, MAX_LIMIT, MAX_PERIOD_US, MAX_TIME_US, MAX_TOKEN_LEN,
    MIN_PERIOD_US,
};

/// The encoding version written today; later releases keep loading it.
pub const ENCODING_VERSION: i32 = 5;
/// The first encoding of the lease type (`thr-lease`): no earlier version
/// wrote one.
pub const LEASES_SINCE: i32 = V5;
/// The first encoding with a ban after the state's words.
const V4: i32 = 4;
/// The first encoding, still loaded.
const V1: i32 = 1;
/// The second, still loaded.
const V2: i32 = 2;
/// The first with CL.THROTTLE's own form of a TOKEN value.
const V5: i32 = 5;

/// The first word of a TOKEN value in CL.THROTTLE's form (version 5 and
/// later): `u64::MAX`, where a bucket has its level's high word (below
/// 2^34). Then `tat` (Unix ns) high and low, `max_burst`, `count` and
/// `period` as `i64` bits: six words, as a bucket's.
const CELL_MARKER: u64 = u64::MAX;

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
    if (V1..=ENCODING_VERSION).contains(&version) {
        Ok(())
    } else {
        Err(DecodeError::Version)
    }
}

/// The last change of versions 1 and 2, checked (it lies at or after the
/// window's start) and then left out.
fn old_last_change(version: i32, window_start_us: u64, src: &mut dyn WordSource) -> Result<Option<u64>, DecodeError> {
    if version > V2 {
        return Ok(None);
    }
    let updated_at_us = time(src)?;
    check(window_start_us <= updated_at_us, "window")?;
    Ok(Some(updated_at_us))
}

/// Version 1's `limit` and `period`, checked and then left out.
fn v1_params(version: i32, src: &mut dyn WordSource) -> Result<Option<Params>, DecodeError> {
    if version != V1 {
        return Ok(None);
    }
    params(src.word()?, src.word()?, None).map(Some)
}

fn period(src: &mut dyn WordSource) -> Result<u64, DecodeError> {
    let period = src.word()?;
    check((MIN_PERIOD_US..=MAX_PERIOD_US).contains(&period) && period.is_multiple_of(1_000), "period")?;
    Ok(period)
}

impl Codec for FixedWindow {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        for w in [self.window_start_us, self.count] {
            out(w);
        }
    }

    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        known_version(version)?;
        let window_start_us = time(src)?;
        let count = src.word()?;
        let updated_at_us = old_last_change(version, window_start_us, src)?;
        let v1 = v1_params(version, src)?;
        // Not `count <= limit`: a refund under a lowered limit leaves the
        // count above the call's limit, and what the algorithms store must
        // load back. The algorithms saturate against the limit.
        check((1..=MAX_LIMIT).contains(&count), "count")?;
        if let (Some(p), Some(updated_at_us)) = (v1, updated_at_us) {
            check(updated_at_us - window_start_us < p.period_us(), "window")?;
        }
        Ok(FixedWindow { window_start_us, count })
    }
}

impl Codec for SlidingWindow {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        let c = self.counts();
        for w in [c.window_start_us, c.previous, c.current, c.period_us] {
            out(w);
        }
    }

    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        known_version(version)?;
        let window_start_us = time(src)?;
        let previous = src.word()?;
        let current = src.word()?;
        let updated_at_us = old_last_change(version, window_start_us, src)?;
        let period_us = match v1_params(version, src)? {
            Some(p) => p.period_us(),
            None => period(src)?,
        };
        check(window_start_us % period_us == 0, "window")?;
        if let Some(updated_at_us) = updated_at_us {
            check(updated_at_us - window_start_us < period_us, "window")?;
        }
        // Counts may exceed the limit after a refund under a lowered limit.
        check(previous <= MAX_LIMIT && current <= MAX_LIMIT, "count")?;
        Ok(SlidingWindow::pack(&Counts { window_start_us, previous, current, period_us }))
    }
}

impl Codec for SlidingLog {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        let entries = self.entries().count() as u64;
        for w in [self.used, self.updated_at_us, entries] {
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
        let v1 = v1_params(version, src)?;
        let entries = src.word()?;
        // `used` may exceed the limit after a refund under a lowered limit.
        check(used <= MAX_LIMIT && entries <= used, "log length")?;
        let mut log = SlidingLog::empty(updated_at_us);
        let mut previous_at = None;
        for _ in 0..entries {
            let at_us = src.word()?;
            let units = src.word()?;
            check(at_us <= updated_at_us, "entry time")?;
            if let Some(p) = v1 {
                check(at_us + p.period_us() > updated_at_us, "entry time")?;
            }
            check(previous_at.is_none_or(|prev| prev < at_us), "entry order")?;
            check(units >= 1 && units <= used - log.used, "entry units")?;
            previous_at = Some(at_us);
            log.push_entry(Entry { at_us, units });
        }
        check(log.used == used, "log total")?;
        Ok(log)
    }
}

/// The buckets' words are the same in every version.
fn encode_bucket(b: &Bucket, out: &mut dyn FnMut(u64)) {
    for w in [(b.level >> 64) as u64, b.level as u64, b.updated_at_us, b.limit, b.period_us, b.burst] {
        out(w);
    }
}

fn decode_bucket(version: i32, src: &mut dyn WordSource) -> Result<Bucket, DecodeError> {
    known_version(version)?;
    let high = src.word()?;
    decode_bucket_after(high, src)
}

/// A bucket's words after the first (its level's high word).
fn decode_bucket_after(high: u64, src: &mut dyn WordSource) -> Result<Bucket, DecodeError> {
    let low = src.word()?;
    let level = u128::from(high) << 64 | u128::from(low);
    let updated_at_us = time(src)?;
    let p = params(src.word()?, src.word()?, Some(src.word()?))?;
    check(level <= u128::from(p.burst()) * u128::from(p.period_us()), "level")?;
    Ok(Bucket { level, updated_at_us, limit: p.limit(), period_us: p.period_us(), burst: p.burst() })
}

impl Codec for TokenBucket {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        match self.form() {
            TokenForm::Bucket(bucket) => encode_bucket(&bucket, out),
            TokenForm::Cell(c) => {
                let words = [CELL_MARKER, (c.tat_ns >> 64) as u64, c.tat_ns as u64];
                for w in words.into_iter().chain([c.max_burst, c.count, c.period].map(|v| v as u64)) {
                    out(w);
                }
            }
        }
    }

    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        known_version(version)?;
        let first = src.word()?;
        if first != CELL_MARKER || version < V5 {
            return decode_bucket_after(first, src).map(|b| TokenBucket::from_bucket(&b));
        }
        let tat_ns = u128::from(src.word()?) << 64 | u128::from(src.word()?);
        let (max_burst, count, period) = (src.word()? as i64, src.word()? as i64, src.word()? as i64);
        let cell = CellState::new(tat_ns, max_burst, count, period).ok_or(DecodeError::Invalid("cell state"))?;
        Ok(TokenBucket::from_cell(&cell))
    }
}

impl Codec for LeakyBucket {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        encode_bucket(&self.bucket(), out);
    }

    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        decode_bucket(version, src).map(|b| LeakyBucket::from_bucket(&b))
    }
}

/// Leases (`thr-lease`), from version 5 on ([`LEASES_SINCE`]): the limit, the time of the
/// latest change, the number of leases, then each lease's end, its
/// token's length in bytes and the token in words of 8 bytes
/// (little-endian, the last one padded with zeros).
impl Codec for Leases {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        for w in [self.limit, self.updated_at_us, self.leases.len() as u64] {
            out(w);
        }
        for lease in &self.leases {
            out(lease.until_us);
            out(lease.token.len() as u64);
            for chunk in lease.token.chunks(8) {
                let mut word = [0u8; 8];
                word.iter_mut().zip(chunk).for_each(|(w, b)| *w = *b);
                out(u64::from_le_bytes(word));
            }
        }
    }

    /// Refuses anything the commands could not have stored: a limit out of
    /// range, more leases than it, none at all (the key would be gone), a
    /// lease ended by the latest change or longer than the longest lease,
    /// a token of bad length or padding, leases out of order or a token
    /// twice.
    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        if !(LEASES_SINCE..=ENCODING_VERSION).contains(&version) {
            return Err(DecodeError::Version);
        }
        let limit = src.word()?;
        check((1..=MAX_HOLDERS).contains(&limit), "limit")?;
        let updated_at_us = time(src)?;
        let count = src.word()?;
        check(count >= 1 && count <= limit, "lease count")?;
        let mut leases: Vec<Lease> = Vec::with_capacity(count as usize);
        let mut tokens = std::collections::HashSet::with_capacity(count as usize);
        for _ in 0..count {
            let until_us = src.word()?;
            check(until_us > updated_at_us && until_us - updated_at_us <= MAX_PERIOD_US, "lease end")?;
            let len = src.word()?;
            check((1..=MAX_TOKEN_LEN as u64).contains(&len), "token length")?;
            let len = len as usize;
            let mut token = Vec::with_capacity(len);
            for _ in 0..len.div_ceil(8) {
                let bytes = src.word()?.to_le_bytes();
                let take = (len - token.len()).min(8);
                check(bytes.get(take..).unwrap_or_default().iter().all(|&b| b == 0), "token padding")?;
                token.extend_from_slice(bytes.get(..take).unwrap_or_default());
            }
            let lease = Lease { until_us, token: token.into_boxed_slice() };
            check(leases.last().is_none_or(|last| *last < lease), "lease order")?;
            check(tokens.insert(lease.token.clone()), "token repeated")?;
            leases.push(lease);
        }
        Ok(Leases { limit, updated_at_us, leases })
    }
}

/// The first word of a banned key's value: the ban's words follow, and
/// nothing else (the state a ban sets aside is idle).
const BANNED: u64 = 3;

impl<L: Limiter + Codec> Codec for Penalized<L> {
    fn encode(&self, out: &mut dyn FnMut(u64)) {
        match self.ban() {
            None => {
                out(0);
                self.inner.encode(out);
            }
            Some(ban) => {
                for w in [BANNED, ban.until_us, ban.length_us, ban.hits] {
                    out(w);
                }
            }
        }
    }

    /// A ban ends at most the longest ban after the latest time, lasts a
    /// whole number of ms within the periods' bounds, and counts no more
    /// than any limit.
    fn decode(version: i32, src: &mut dyn WordSource) -> Result<Self, DecodeError> {
        if version < V4 {
            return L::decode(version, src).map(Penalized::new);
        }
        known_version(version)?;
        match src.word()? {
            0 => L::decode(version, src).map(Penalized::new),
            BANNED => {
                let (until_us, length_us, hits) = (src.word()?, src.word()?, src.word()?);
                check(until_us <= MAX_TIME_US + MAX_PERIOD_US && length_us <= until_us, "ban end")?;
                check((MIN_PERIOD_US..=MAX_PERIOD_US).contains(&length_us) && length_us % 1_000 == 0, "ban length")?;
                check(hits <= MAX_LIMIT, "ban hits")?;
                Ok(Penalized { inner: L::default(), ban: Some(Box::new(Ban { until_us, length_us, hits })) })
            }
            _ => Err(DecodeError::Invalid("ban")),
        }
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
        assert_eq!(T::decode(ENCODING_VERSION + 1, &mut encoded.iter().copied()), Err(DecodeError::Version));
        assert_eq!(T::decode(0, &mut encoded.iter().copied()), Err(DecodeError::Version));
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

    /// A state and its ban, in version 4; earlier versions load with none.
    #[test]
    fn bans_round_trip_and_are_checked() {
        use crate::limiter::{Escalation, Rules};
        let p = Params::new(2, 1_000_000, None).unwrap();
        let rules = Rules { ban_us: Some(60_000_000), escalation: Escalation::Renew, ..Rules::default() };
        let mut banned = Penalized::<FixedWindow>::default();
        for at in [5, 6, 7] {
            banned.call(&p, 1, &rules, at);
        }
        assert!(banned.ban().is_some());
        round_trip(banned.clone());
        let mut plain = Penalized::<SlidingLog>::default();
        plain.call(&p, 1, &Rules::default(), 5);
        round_trip(plain);
        let encoded = words(&banned);
        let decode = |w: &[u64]| Penalized::<FixedWindow>::decode(ENCODING_VERSION, &mut w.iter().copied());
        let with = |at: usize, value: u64| {
            let mut w = encoded.clone();
            w[at] = value;
            w
        };
        assert_eq!(decode(&with(0, 2)), Err(DecodeError::Invalid("ban")));
        assert_eq!(decode(&with(1, MAX_TIME_US + MAX_PERIOD_US + 1)), Err(DecodeError::Invalid("ban end")));
        assert_eq!(decode(&with(2, 1_500)), Err(DecodeError::Invalid("ban length")));
        assert_eq!(decode(&with(2, 0)), Err(DecodeError::Invalid("ban length")));
        assert_eq!(decode(&with(3, MAX_LIMIT + 1)), Err(DecodeError::Invalid("ban hits")));
        assert_eq!(decode(&[0, 5, 1]), Ok(Penalized::new(FixedWindow { window_start_us: 5, count: 1 })));
        assert!(decode(&[0, 5, 0]).is_err(), "the state's own checks");
        let v3 = words(&FixedWindow { window_start_us: 5, count: 1 });
        let loaded = Penalized::<FixedWindow>::decode(3, &mut v3.into_iter()).unwrap();
        assert_eq!(loaded, Penalized::new(FixedWindow { window_start_us: 5, count: 1 }));
    }

    /// Leases round-trip; every field a hostile payload could bend is
    /// refused, and versions before leases existed are too.
    #[test]
    fn leases_round_trip_and_are_checked() {
        use crate::limiter::{LeaseParams, Token};
        let mut leases = Leases::default();
        let p = LeaseParams::new(3, 10_000_000).unwrap();
        for (at, token) in [(5, &b"a"[..]), (6, b"a-token-longer-than-eight"), (7, &[0xff; MAX_TOKEN_LEN][..])] {
            assert!(leases.acquire(&p, Token::new(token).unwrap(), at).decision.allowed);
        }
        round_trip(leases.clone());
        let encoded = words(&leases);
        assert_eq!(Leases::decode(LEASES_SINCE - 1, &mut encoded.iter().copied()), Err(DecodeError::Version));
        let decode = |w: &[u64]| Leases::decode(ENCODING_VERSION, &mut w.iter().copied());
        let with = |at: usize, value: u64| {
            let mut w = encoded.clone();
            w[at] = value;
            w
        };
        // [limit, updated_at, count, until, len, token...]
        assert_eq!(decode(&with(0, 0)), Err(DecodeError::Invalid("limit")));
        assert_eq!(decode(&with(0, MAX_HOLDERS + 1)), Err(DecodeError::Invalid("limit")));
        assert_eq!(decode(&with(0, 2)), Err(DecodeError::Invalid("lease count")));
        assert_eq!(decode(&with(1, MAX_TIME_US + 1)), Err(DecodeError::Invalid("time")));
        assert_eq!(decode(&with(2, 0)), Err(DecodeError::Invalid("lease count")));
        assert_eq!(decode(&with(2, u64::MAX)), Err(DecodeError::Invalid("lease count")));
        assert_eq!(decode(&with(3, 7)), Err(DecodeError::Invalid("lease end")), "ended by the latest change");
        assert_eq!(decode(&with(3, 7 + MAX_PERIOD_US + 1)), Err(DecodeError::Invalid("lease end")));
        assert_eq!(decode(&with(4, 0)), Err(DecodeError::Invalid("token length")));
        assert_eq!(decode(&with(4, MAX_TOKEN_LEN as u64 + 1)), Err(DecodeError::Invalid("token length")));
        assert_eq!(decode(&with(5, 0x161)), Err(DecodeError::Invalid("token padding")));
        // The second lease (ends at 6 s + 5 µs... ) moved before the first.
        assert_eq!(decode(&with(6, 1)), Err(DecodeError::Invalid("lease end")));
        let mut twice = Leases::default();
        twice.acquire(&p, Token::new(b"a").unwrap(), 5);
        twice.acquire(&p, Token::new(b"b").unwrap(), 6);
        let mut w = words(&twice);
        w[0] = 3;
        w[8] = w[5]; // "b" becomes "a"
        assert_eq!(decode(&w), Err(DecodeError::Invalid("token repeated")));
        w[6] = w[3]; // the same end too: out of order
        assert_eq!(decode(&w), Err(DecodeError::Invalid("lease order")));
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

    /// CL.THROTTLE's form of a TOKEN value: six words behind a marker no
    /// bucket has, loaded from version 5 on, checked like the rest.
    #[test]
    fn cell_form_round_trips_from_version_5() {
        let tat = (1u128 << 64) + 123_456_789;
        for (b, c, p) in [(15, 30, 60), (-5, 1, -60), (1000, 1, 2_592_000), (0, 1, i64::MIN)] {
            let cell = CellState::new(tat, b, c, p).unwrap();
            let state = TokenBucket::from_cell(&cell);
            assert_eq!(state.form(), TokenForm::Cell(cell));
            round_trip(state.clone());
            let encoded = words(&state);
            assert_eq!(encoded, [u64::MAX, 1, 123_456_789, b as u64, c as u64, p as u64]);
            // Versions 1 to 4 read the marker as a bucket's level: refused.
            for old in [1, 2, 3, 4] {
                assert!(TokenBucket::decode(old, &mut encoded.iter().copied()).is_err());
            }
        }
        let good = [u64::MAX, 0, 5, 15, 30, 60];
        assert!(TokenBucket::decode(5, &mut good.into_iter()).is_ok());
        let bad: &[([u64; 6], &str)] = &[
            ([u64::MAX, 0, 0, 15, 30, 60], "no tat"),
            ([u64::MAX, 4, 0, 15, 30, 60], "tat beyond any call"),
            ([u64::MAX, 0, 5, 15, 0, 60], "zero rate"),
            ([u64::MAX, 0, 5, 15, 1_000_000_001, 1], "rate under 1 ns"),
            ([u64::MAX, 0, 5, i64::MAX as u64, 30, 60], "max_burst + 1 wraps"),
            ([u64::MAX, 0, 5, 1 << 40, 1, 1 << 40], "tolerance wraps"),
        ];
        for (words, why) in bad {
            assert!(TokenBucket::decode(5, &mut words.iter().copied()).is_err(), "{why}");
        }
        // The native buckets' words are unchanged in version 5.
        let p = Params::new(10, 1_000_000, Some(20)).unwrap();
        let token = used::<TokenBucket>(p, &[(5, 3)]);
        let encoded = words(&token);
        for version in [3, 4, 5] {
            assert_eq!(TokenBucket::decode(version, &mut encoded.iter().copied()), Ok(token.clone()));
        }
        // Behind the ban word of versions 4 and later, as the TOKEN type
        // stores it.
        let cell = CellState::new(5, 15, 30, 60).unwrap();
        let stored = Penalized::new(TokenBucket::from_cell(&cell));
        round_trip(stored.clone());
        assert_eq!(words(&stored), [0, u64::MAX, 0, 5, 15, 30, 60]);
        assert!(Penalized::<TokenBucket>::decode(4, &mut words(&stored).into_iter()).is_err());
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
        assert!(FixedWindow::decode(3, &mut bad.into_iter()).is_err());
        let mut bad = fixed.clone();
        bad[1] = MAX_LIMIT + 1; // count beyond any limit
        assert!(FixedWindow::decode(3, &mut bad.into_iter()).is_err());
        let mut bad = fixed.clone();
        bad[0] = MAX_TIME_US + 1; // a window beyond any time
        assert!(FixedWindow::decode(3, &mut bad.into_iter()).is_err());
        // Version 2: the window starts after the last change.
        assert!(FixedWindow::decode(2, &mut [6, 3, 5].into_iter()).is_err());

        let sliding = words(&used::<SlidingWindow>(p, &[(5, 3)]));
        let mut bad = sliding.clone();
        bad[3] = 0; // period
        assert!(SlidingWindow::decode(3, &mut bad.into_iter()).is_err());
        let mut bad = sliding.clone();
        bad[3] = 1_000_500; // a period that is not a whole number of ms
        assert!(SlidingWindow::decode(3, &mut bad.into_iter()).is_err());
        let mut bad = sliding.clone();
        bad[0] += 1; // a window not on a multiple of the period
        assert!(SlidingWindow::decode(3, &mut bad.into_iter()).is_err());
        // Version 2: the last change outside the window.
        assert!(SlidingWindow::decode(2, &mut [0, 0, 3, 1_000_000, 1_000_000].into_iter()).is_err());

        let log = words(&used::<SlidingLog>(p, &[(5, 1), (6, 2)]));
        let mut bad = log.clone();
        bad[2] = u64::MAX; // length
        assert!(SlidingLog::decode(2, &mut bad.into_iter()).is_err());
        let mut bad = log.clone();
        bad[0] = 4; // total disagrees with the entries
        assert!(SlidingLog::decode(2, &mut bad.into_iter()).is_err());

        let token = words(&used::<TokenBucket>(p, &[(5, 3)]));
        let mut bad = token.clone();
        bad[0] = 1; // level above capacity
        assert!(TokenBucket::decode(2, &mut bad.into_iter()).is_err());
    }

    /// Version 1 and 2 words (the last change, and in version 1 the
    /// parameters) load as the same state.
    #[test]
    fn versions_1_and_2_load() {
        let p = Params::new(10, 1_000_000, None).unwrap();
        let fixed = used::<FixedWindow>(p, &[(5, 3), (9, 2)]);
        let v1 = [fixed.window_start_us, fixed.count, 9, 10, 1_000_000];
        assert_eq!(FixedWindow::decode(1, &mut v1.into_iter()), Ok(fixed.clone()));
        let v2 = [fixed.window_start_us, fixed.count, 9];
        assert_eq!(FixedWindow::decode(2, &mut v2.into_iter()), Ok(fixed.clone()));
        // Version 1 still checks what it carried: the window within its period.
        let late = [5, 3, 1_000_005, 10, 1_000_000];
        assert!(FixedWindow::decode(1, &mut late.into_iter()).is_err());

        let sliding = used::<SlidingWindow>(p, &[(5, 3), (1_500_000, 2)]);
        let c = sliding.counts();
        let v1 = [c.window_start_us, c.previous, c.current, 1_500_000, 10, 1_000_000];
        assert_eq!(SlidingWindow::decode(1, &mut v1.into_iter()), Ok(sliding.clone()));
        let v2 = [c.window_start_us, c.previous, c.current, 1_500_000, 1_000_000];
        assert_eq!(SlidingWindow::decode(2, &mut v2.into_iter()), Ok(sliding));

        let log = used::<SlidingLog>(p, &[(5, 1), (6, 3)]);
        let v1 = [4, 6, 10, 1_000_000, 2, 5, 1, 6, 3];
        assert_eq!(SlidingLog::decode(1, &mut v1.into_iter()), Ok(log));
        let stale = [1, 2_000_000, 10, 1_000_000, 1, 5, 1];
        assert!(SlidingLog::decode(1, &mut stale.into_iter()).is_err(), "an entry outside its period");
        assert!(FixedWindow::decode(1, &mut [5, 3, 9, 0, 1_000_000].into_iter()).is_err(), "a v1 limit of 0");
        assert!(FixedWindow::decode(1, &mut [5, 3, 9].into_iter()).is_err(), "v1 words cut short");
    }
}
