//! Leases: a counting semaphore whose slots end by themselves
//! (`THROTTLE.ACQUIRE`, `THROTTLE.RELEASE`, `THROTTLE.RENEW`). Free of
//! Redis, like the algorithms.
//!
//! A key holds at most `limit` leases, each a token and the instant it
//! ends. A lease ends by itself at that instant, so a crashed holder never
//! keeps its slot; ended leases are ignored by every answer and dropped
//! when the key is next changed. Release and renew are token-safe: a token
//! that is not held (ended, never held, another holder's) changes nothing.
//!
//! Every change is one of two effects, [`Leases::put`] (a lease with its
//! end) and [`Leases::remove`] (a lease gone), each at a time and dropping
//! the leases ended by then. The master decides; replicas and the AOF
//! receive the effect and apply it to the same state, so they hold the
//! same leases whatever their own clocks say. The leases are kept sorted
//! by (end, token): the stored form depends on the holders only, never on
//! the order of the calls that made them.

use super::{retry_ms, until_idle, Decision, MAX_PERIOD_US, MAX_TIME_US, MIN_PERIOD_US};

/// Most holders a key admits (`limit`): every change is linear in them.
pub const MAX_HOLDERS: u64 = 100_000;
/// Longest token (`ID`), in bytes.
pub const MAX_TOKEN_LEN: usize = 64;
/// Latest instant a lease can end: the latest time plus the longest lease.
pub const LATEST_END_US: u64 = MAX_TIME_US + MAX_PERIOD_US;

/// One holder's lease.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lease {
    /// When it ends (Unix µs); it is held strictly before.
    pub until_us: u64,
    pub token: Box<[u8]>,
}

/// The leases of one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leases {
    /// The limit of the latest acquisition of a new slot (`THROTTLE.INFO`
    /// shows it); the key never holds more leases.
    pub(crate) limit: u64,
    /// The time of the latest change: a call earlier than it counts at it.
    pub(crate) updated_at_us: u64,
    /// Sorted by (end, token); tokens are unique.
    pub(crate) leases: Vec<Lease>,
}

/// A validated `limit lease` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseParams {
    limit: u64,
    lease_us: u64,
}

/// Why lease parameters are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseParamError {
    Limit,
    Lease,
}

impl LeaseParams {
    pub fn new(limit: u64, lease_us: u64) -> Result<LeaseParams, LeaseParamError> {
        if !(1..=MAX_HOLDERS).contains(&limit) {
            return Err(LeaseParamError::Limit);
        }
        if !valid_lease_us(lease_us) {
            return Err(LeaseParamError::Lease);
        }
        Ok(LeaseParams { limit, lease_us })
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn lease_us(&self) -> u64 {
        self.lease_us
    }
}

/// A lease length: a period, from 1 ms to 3650 days in whole ms.
pub fn valid_lease_us(lease_us: u64) -> bool {
    (MIN_PERIOD_US..=MAX_PERIOD_US).contains(&lease_us) && lease_us.is_multiple_of(1_000)
}

/// A token as a call carries it: at most [`MAX_TOKEN_LEN`] bytes, inline,
/// so that a waiting call is a plain value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Token {
    len: u8,
    bytes: [u8; MAX_TOKEN_LEN],
}

impl Token {
    /// `None` for an empty or too long token.
    pub fn new(bytes: &[u8]) -> Option<Token> {
        if bytes.is_empty() || bytes.len() > MAX_TOKEN_LEN {
            return None;
        }
        let mut token = Token { len: bytes.len() as u8, bytes: [0; MAX_TOKEN_LEN] };
        token.bytes.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(token)
    }

    /// A token of 32 bytes, as the master makes them.
    pub fn hex(text: [u8; 32]) -> Token {
        let mut bytes = [0; MAX_TOKEN_LEN];
        bytes[..32].copy_from_slice(&text);
        Token { len: 32, bytes }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({:?})", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// A change to a key's leases, as the master made it and as replicas and
/// the AOF apply it: at `at_us`, the leases ended by then are dropped, and
/// then `token`'s lease is set to end at `until_us` (`Some`) or removed
/// (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effect {
    pub at_us: u64,
    /// The limit the key keeps (the latest acquisition's).
    pub limit: u64,
    pub token: Token,
    pub until_us: Option<u64>,
}

/// What one call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseOutcome {
    pub decision: Decision,
    /// The change, when the call made one.
    pub effect: Option<Effect>,
}

impl Leases {
    /// The time a call at `now_us` counts at: never before the latest
    /// change.
    pub fn effective(&self, now_us: u64) -> u64 {
        now_us.max(self.updated_at_us)
    }

    /// The leases still held at `now_us`, earliest end first.
    pub fn live(&self, now_us: u64) -> &[Lease] {
        let ended = self.leases.partition_point(|l| l.until_us <= now_us);
        self.leases.get(ended..).unwrap_or_default()
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn updated_at_us(&self) -> u64 {
        self.updated_at_us
    }

    /// Every stored lease, ended ones included, earliest end first.
    pub fn stored(&self) -> &[Lease] {
        &self.leases
    }

    /// True when the key holds no lease at all (it is then deleted).
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    fn position(&self, token: &[u8]) -> Option<usize> {
        self.leases.iter().position(|l| &*l.token == token)
    }

    /// True when any lease, ended or not, has this token (a made token
    /// must be new to the key).
    pub fn contains(&self, token: &[u8]) -> bool {
        self.position(token).is_some()
    }

    /// When `token`'s lease ends, if it is held at `now_us`.
    pub fn held_until(&self, token: &[u8], now_us: u64) -> Option<u64> {
        let now_us = self.effective(now_us);
        self.position(token).and_then(|i| self.leases.get(i)).map(|l| l.until_us).filter(|&until| until > now_us)
    }

    /// The reply for the key as it stands at `now_us` (already effective).
    /// `remaining`: free slots under `limit`; `retry_after` (refused only):
    /// until enough leases end for one slot to free; `reset_after`: until
    /// the last lease ends.
    pub fn decision(&self, limit: u64, now_us: u64, allowed: bool) -> Decision {
        let live = self.live(now_us);
        let held = live.len() as u64;
        let remaining = limit.saturating_sub(held);
        let retry_after_ms = if allowed || remaining > 0 {
            0
        } else {
            // One slot frees when `held - limit + 1` leases have ended.
            let index = usize::try_from(held - limit).unwrap_or(usize::MAX);
            live.get(index).map_or(0, |l| retry_ms(u128::from(l.until_us - now_us)))
        };
        let last = live.last().map_or(0, |l| l.until_us - now_us);
        let (reset_after_ms, reset_after_us) = until_idle(u128::from(last));
        Decision { allowed, limit, remaining, retry_after_ms, reset_after_ms, reset_after_us }
    }

    /// Acquires a slot for `token` at `now_us`: renews it when `token` is
    /// held (a renewal needs no free slot), takes a free slot otherwise,
    /// or is refused and changes nothing.
    pub fn acquire(&mut self, params: &LeaseParams, token: Token, now_us: u64) -> LeaseOutcome {
        let now_us = self.effective(now_us);
        let held = self.held_until(token.as_bytes(), now_us).is_some();
        if !held && self.live(now_us).len() as u64 >= params.limit {
            return LeaseOutcome { decision: self.decision(params.limit, now_us, false), effect: None };
        }
        // A renewal keeps the key's limit: the state then holds no more
        // leases than its limit, whatever limit later calls bring.
        let limit = if held { self.limit } else { params.limit };
        let effect = Effect { at_us: now_us, limit, token, until_us: Some(now_us + params.lease_us) };
        self.apply(&effect);
        LeaseOutcome { decision: self.decision(params.limit, now_us, true), effect: Some(effect) }
    }

    /// What [`Leases::acquire`] would answer, changing nothing (`None`:
    /// a token the master would make, new to the key).
    pub fn check(&self, params: &LeaseParams, token: Option<&[u8]>, now_us: u64) -> Decision {
        let now_us = self.effective(now_us);
        let held = token.is_some_and(|t| self.held_until(t, now_us).is_some());
        if !held && self.live(now_us).len() as u64 >= params.limit {
            return self.decision(params.limit, now_us, false);
        }
        // Admitted: the answer is the one on a copy. An empty token is
        // never stored, so it stands for a new one.
        let token = token.and_then(Token::new).unwrap_or(Token { len: 0, bytes: [0; MAX_TOKEN_LEN] });
        self.clone().acquire(params, token, now_us).decision
    }

    /// Ends `token`'s lease now, if it is held. Returns the change.
    pub fn release(&mut self, token: Token, now_us: u64) -> Option<Effect> {
        let now_us = self.effective(now_us);
        self.held_until(token.as_bytes(), now_us)?;
        let effect = Effect { at_us: now_us, limit: self.limit, token, until_us: None };
        self.apply(&effect);
        Some(effect)
    }

    /// Makes `token`'s lease end `lease_us` from now, if it is held (a
    /// shorter lease than what is left shortens it). Returns the change.
    pub fn renew(&mut self, token: Token, lease_us: u64, now_us: u64) -> Option<Effect> {
        let now_us = self.effective(now_us);
        self.held_until(token.as_bytes(), now_us)?;
        let effect = Effect { at_us: now_us, limit: self.limit, token, until_us: Some(now_us + lease_us) };
        self.apply(&effect);
        Some(effect)
    }

    /// Applies a change: what the master does, and what a replica does
    /// with the change it receives. Drops the leases ended at the change's
    /// time, then sets or removes the token's lease.
    pub fn apply(&mut self, effect: &Effect) {
        let at_us = self.effective(effect.at_us);
        let ended = self.leases.partition_point(|l| l.until_us <= at_us);
        self.leases.drain(..ended);
        if let Some(i) = self.position(effect.token.as_bytes()) {
            self.leases.remove(i);
        }
        if let Some(until_us) = effect.until_us {
            let lease = Lease { until_us, token: effect.token.as_bytes().into() };
            let at = self.leases.partition_point(|l| *l < lease);
            self.leases.insert(at, lease);
        }
        self.limit = effect.limit;
        self.updated_at_us = at_us;
    }

    /// What every change leaves, and so what a replica may hold: no more
    /// leases than the limit, each ending after the latest change and at
    /// most the longest lease after it, sorted, with tokens of 1 to
    /// [`MAX_TOKEN_LEN`] bytes.
    pub fn well_formed(&self) -> bool {
        let at = self.updated_at_us;
        (1..=MAX_HOLDERS).contains(&self.limit)
            && self.leases.len() as u64 <= self.limit
            && at <= MAX_TIME_US
            && self.leases.iter().all(|l| {
                l.until_us > at && l.until_us - at <= MAX_PERIOD_US && (1..=MAX_TOKEN_LEN).contains(&l.token.len())
            })
            && self.leases.windows(2).all(|w| w.first() < w.get(1))
    }

    /// Bytes held outside the state itself.
    pub fn heap_bytes(&self) -> usize {
        self.leases.capacity() * std::mem::size_of::<Lease>() + self.leases.iter().map(|l| l.token.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn t(s: &str) -> Token {
        Token::new(s.as_bytes()).unwrap()
    }

    fn p(limit: u64, lease_us: u64) -> LeaseParams {
        LeaseParams::new(limit, lease_us).unwrap()
    }

    fn reply(d: &Decision) -> (bool, u64, u64, i64, u64) {
        (d.allowed, d.limit, d.remaining, d.retry_after_ms, d.reset_after_ms)
    }

    #[test]
    fn bounds() {
        assert_eq!(LeaseParams::new(0, S), Err(LeaseParamError::Limit));
        assert_eq!(LeaseParams::new(MAX_HOLDERS + 1, S), Err(LeaseParamError::Limit));
        assert_eq!(LeaseParams::new(1, 999), Err(LeaseParamError::Lease));
        assert_eq!(LeaseParams::new(1, 1_500), Err(LeaseParamError::Lease));
        assert_eq!(LeaseParams::new(1, MAX_PERIOD_US + 1_000), Err(LeaseParamError::Lease));
        assert!(LeaseParams::new(MAX_HOLDERS, MAX_PERIOD_US).is_ok());
        assert!(Token::new(b"").is_none());
        assert!(Token::new(&[b'x'; MAX_TOKEN_LEN + 1]).is_none());
        assert_eq!(Token::new(&[b'x'; MAX_TOKEN_LEN]).unwrap().as_bytes().len(), MAX_TOKEN_LEN);
    }

    /// (at s, call, want) where call is a(token) acquire, r(token) release,
    /// n(token) renew; limit 2, lease 10 s, renew 5 s.
    #[test]
    fn table() {
        let params = p(2, 10 * S);
        let mut k = Leases::default();
        let a = |k: &mut Leases, token: &str, at: u64| reply(&k.acquire(&params, t(token), at * S).decision);
        assert_eq!(a(&mut k, "x", 100), (true, 2, 1, 0, 10_000));
        assert_eq!(a(&mut k, "y", 102), (true, 2, 0, 0, 10_000));
        // Full: the earliest lease (x) ends at 110.
        assert_eq!(a(&mut k, "z", 104), (false, 2, 0, 6_000, 8_000));
        // x again renews: no slot needed.
        assert_eq!(a(&mut k, "x", 105), (true, 2, 0, 0, 10_000));
        assert_eq!(a(&mut k, "z", 105), (false, 2, 0, 7_000, 10_000));
        // Another's token, or one never held: nothing.
        assert_eq!(k.release(t("z"), 106 * S), None);
        assert_eq!(k.renew(t("q"), 5 * S, 106 * S), None);
        assert_eq!(k.leases.len(), 2);
        assert!(k.release(t("y"), 106 * S).is_some());
        assert_eq!(a(&mut k, "z", 106), (true, 2, 0, 0, 10_000));
        // Renew shortens or lengthens to `lease` from now.
        assert!(k.renew(t("z"), 5 * S, 107 * S).is_some());
        assert_eq!(k.held_until(b"z", 107 * S), Some(112 * S));
        // x ends at 115 by itself: its release is then refused.
        assert_eq!(k.release(t("x"), 115 * S), None);
        // z ended at 112 and x at 115: w is alone, and the ended leases
        // are dropped with the change.
        assert_eq!(a(&mut k, "w", 115), (true, 2, 1, 0, 10_000));
        assert_eq!(k.leases.iter().map(|l| &*l.token).collect::<Vec<_>>(), vec![&b"w"[..]]);
        // A time before the latest change (115) counts at it.
        assert_eq!(a(&mut k, "v", 90), (true, 2, 0, 0, 10_000));
        assert_eq!(k.updated_at_us, 115 * S);
    }

    #[test]
    fn a_smaller_limit_waits_for_enough_ends() {
        let mut k = Leases::default();
        for (i, token) in ["a", "b", "c"].iter().enumerate() {
            assert!(k.acquire(&p(3, 10 * S), t(token), i as u64 * S).decision.allowed);
        }
        // Limit 1 with three holders: a slot frees when all three have
        // ended (c, at 12 s).
        let d = k.acquire(&p(1, 10 * S), t("d"), 3 * S).decision;
        assert_eq!(reply(&d), (false, 1, 0, 9_000, 9_000));
        assert_eq!(k.check(&p(1, 10 * S), Some(b"d"), 3 * S), d);
        let d = k.acquire(&p(2, 10 * S), t("d"), 3 * S).decision;
        assert_eq!(reply(&d), (false, 2, 0, 8_000, 9_000), "two ends free one slot under limit 2");
    }

    #[test]
    fn the_last_release_empties_the_key() {
        let mut k = Leases::default();
        k.acquire(&p(1, S), t("a"), 0);
        let e = k.release(t("a"), 10).unwrap();
        assert!(k.is_empty());
        assert_eq!(e, Effect { at_us: 10, limit: 1, token: t("a"), until_us: None });
        assert_eq!(reply(&k.decision(1, 10, true)), (true, 1, 1, 0, 0));
    }

    #[test]
    fn the_bounds_do_not_overflow() {
        let mut k = Leases::default();
        let o = k.acquire(&p(MAX_HOLDERS, MAX_PERIOD_US), t("a"), MAX_TIME_US);
        assert_eq!(reply(&o.decision), (true, MAX_HOLDERS, MAX_HOLDERS - 1, 0, MAX_PERIOD_US / 1000));
        assert_eq!(k.held_until(b"a", 0), Some(LATEST_END_US));
        assert!(k.renew(t("a"), MAX_PERIOD_US, u64::MAX).is_none(), "ended by then");
    }

    #[test]
    fn check_answers_what_acquire_does() {
        let mut k = Leases::default();
        k.acquire(&p(2, 10 * S), t("a"), 0);
        let params = p(2, 3 * S);
        let want = k.clone().acquire(&params, t("b"), S).decision;
        assert_eq!(k.check(&params, None, S), want);
        assert_eq!(k.check(&params, Some(b"b"), S), want);
        let want = k.clone().acquire(&params, t("a"), S).decision;
        assert_eq!(k.check(&params, Some(b"a"), S), want);
    }
}

/// Property tests: the semaphore against a plain model of its holders.
#[cfg(test)]
mod proptests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::wait_queue::{Caps, Waiters};

    const MS: u64 = 1_000;

    #[derive(Clone, Debug)]
    enum Op {
        /// Acquire with one of a few named tokens, or a new one.
        Acquire(Option<u8>),
        Release(u8),
        Renew(u8, u16),
        /// Time passes (ms); sometimes a call comes "earlier" than the last.
        Advance(i32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => proptest::option::of(0..6u8).prop_map(Op::Acquire),
            2 => (0..8u8).prop_map(Op::Release),
            1 => (0..8u8, 1..3000u16).prop_map(|(t, ms)| Op::Renew(t, ms)),
            2 => (-200..3000i32).prop_map(Op::Advance),
        ]
    }

    fn name(i: u8) -> Token {
        Token::new(format!("t{i}").as_bytes()).unwrap()
    }

    fn live_model(model: &HashMap<Vec<u8>, u64>, now: u64) -> usize {
        model.values().filter(|&&until| until > now).count()
    }

    proptest! {
        /// Never more than `limit` holders; a call answers as the model
        /// says; a release or renewal of a token not held changes nothing,
        /// and one of a held token touches no other lease; `retry_after`
        /// is exact to the ms; replaying the effects gives the same state.
        #[test]
        fn holders_stay_within_the_limit_and_tokens_are_safe(
            limit in 1..5u64,
            lease_ms in 1..2000u64,
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let params = LeaseParams::new(limit, lease_ms * MS).unwrap();
            let mut k = Leases::default();
            let mut replica = Leases::default();
            let mut model: HashMap<Vec<u8>, u64> = HashMap::new();
            let mut now = 1_000 * MS;
            let mut fresh = 0u32;
            for op in ops {
                let before = k.clone();
                let effective = k.effective(now);
                let effect = match op {
                    Op::Advance(ms) => {
                        now = now.saturating_add_signed(i64::from(ms) * MS as i64);
                        None
                    }
                    Op::Acquire(named) => {
                        let token = named.map(name).unwrap_or_else(|| {
                            fresh += 1;
                            Token::new(format!("new{fresh}").as_bytes()).unwrap()
                        });
                        let held = model.get(token.as_bytes()).is_some_and(|&u| u > effective);
                        let want = held || (live_model(&model, effective) as u64) < limit;
                        let checked = k.check(&params, named.map(|_| token.as_bytes()), now);
                        let o = k.acquire(&params, token, now);
                        prop_assert_eq!(o.decision, checked, "check answers what acquire does");
                        prop_assert_eq!(o.decision.allowed, want);
                        prop_assert_eq!(o.effect.is_some(), want);
                        if want {
                            model.insert(token.as_bytes().to_vec(), effective + lease_ms * MS);
                        } else {
                            prop_assert_eq!(&k, &before, "a refused call changes nothing");
                            // A slot is free `retry_after` ms later, not a ms before.
                            let retry = o.decision.retry_after_ms as u64;
                            prop_assert!(retry >= 1);
                            prop_assert!(live_model(&model, effective + retry * MS) < limit as usize);
                            prop_assert!(live_model(&model, effective + (retry - 1) * MS) >= limit as usize);
                        }
                        o.effect
                    }
                    Op::Release(i) => {
                        let token = name(i);
                        let held = model.get(token.as_bytes()).is_some_and(|&u| u > effective);
                        let e = k.release(token, now);
                        prop_assert_eq!(e.is_some(), held);
                        if held {
                            model.remove(token.as_bytes());
                        } else {
                            prop_assert_eq!(&k, &before, "a token not held changes nothing");
                        }
                        e
                    }
                    Op::Renew(i, ms) => {
                        let token = name(i);
                        let held = model.get(token.as_bytes()).is_some_and(|&u| u > effective);
                        let e = k.renew(token, u64::from(ms) * MS, now);
                        prop_assert_eq!(e.is_some(), held);
                        if held {
                            model.insert(token.as_bytes().to_vec(), effective + u64::from(ms) * MS);
                        } else {
                            prop_assert_eq!(&k, &before, "a token not held changes nothing");
                        }
                        e
                    }
                };
                if let Some(e) = effect {
                    // Every other holder's lease is as it was.
                    let at = k.effective(now);
                    for l in before.live(at) {
                        if *l.token != *e.token.as_bytes() {
                            prop_assert_eq!(k.held_until(&l.token, at), Some(l.until_us));
                        }
                    }
                    replica.apply(&e);
                    prop_assert_eq!(&replica, &k, "the effect gives the replica the same state");
                }
                let at = k.effective(now);
                let live = k.live(at);
                prop_assert!(live.len() as u64 <= limit, "{} holders over {}", live.len(), limit);
                prop_assert_eq!(live.len(), live_model(&model, at));
                prop_assert!(k.leases.windows(2).all(|w| w[0] < w[1]), "sorted by end and token");
                prop_assert!(k.leases.len() as u64 <= k.limit, "stored over the key's limit");
                prop_assert!(k.well_formed() || k.is_empty());
                let d = k.decision(limit, at, true);
                prop_assert_eq!(d.remaining, limit - live.len() as u64);
                let last = model.values().filter(|&&u| u > at).max().map_or(0, |u| u - at);
                prop_assert_eq!(d.reset_after_us, last);
            }
        }

        /// Waiters queue in arrival order and are served from the head
        /// while a slot is free: they are admitted in arrival order,
        /// whatever frees the slots (releases, leases ending).
        #[test]
        fn waiters_are_admitted_in_arrival_order(
            limit in 1..4u64,
            steps in proptest::collection::vec((0..3u8, 0..400u16), 1..100),
        ) {
            let params = LeaseParams::new(limit, 300 * MS).unwrap();
            let caps = Caps { per_key: 1000, total: 1000 };
            let mut k = Leases::default();
            let mut queue: Waiters<Token> = Waiters::default();
            let (mut now, mut arrived, mut admitted) = (0u64, 0usize, Vec::new());
            for (kind, n) in steps {
                match kind {
                    0 => {
                        let token = Token::new(format!("w{arrived}").as_bytes()).unwrap();
                        queue.add(0, b"k", arrived, token, None, caps).unwrap();
                        arrived += 1;
                    }
                    1 => {
                        let holders: Vec<Token> =
                            k.live(k.effective(now)).iter().filter_map(|l| Token::new(&l.token)).collect();
                        if let Some(t) = holders.get(usize::from(n) % holders.len().max(1)) {
                            k.release(*t, now);
                        }
                    }
                    _ => now += u64::from(n) * MS,
                }
                // Serve from the head while admitted.
                while let Some((client, token)) = queue.queue(0, b"k").and_then(|q| queue.head(q)).map(|h| (h.client, *h.payload)) {
                    if !k.acquire(&params, token, now).decision.allowed {
                        break;
                    }
                    queue.remove(client);
                    admitted.push(client);
                }
                prop_assert!(admitted.windows(2).all(|w| w[0] < w[1]), "out of order: {:?}", admitted);
                prop_assert!(k.live(k.effective(now)).len() as u64 <= limit);
            }
        }

        /// At the bounds: the longest lease at the latest time, the most
        /// holders, nothing overflows and every answer is in range.
        #[test]
        fn no_overflow_at_the_bounds(at in (MAX_TIME_US - MAX_PERIOD_US)..=MAX_TIME_US, later in 0..=MAX_PERIOD_US) {
            let params = LeaseParams::new(MAX_HOLDERS, MAX_PERIOD_US).unwrap();
            let mut k = Leases::default();
            let o = k.acquire(&params, name(1), at);
            prop_assert!(o.decision.allowed);
            prop_assert_eq!(o.decision.reset_after_us, MAX_PERIOD_US);
            let renew_at = (at + later).min(MAX_TIME_US);
            prop_assert_eq!(k.renew(name(1), MAX_PERIOD_US, renew_at).is_some(), renew_at < at + MAX_PERIOD_US);
            let full = LeaseParams::new(1, MIN_PERIOD_US).unwrap();
            let d = k.acquire(&full, name(2), at).decision;
            prop_assert!(d.retry_after_ms >= 0 && d.reset_after_ms <= MAX_PERIOD_US / MS * 2);
            prop_assert!(k.stored().iter().all(|l| l.until_us <= LATEST_END_US));
        }
    }
}
