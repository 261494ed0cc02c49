//! Penalties, the second half of rate limiting: bans, refused units that
//! count, and units taken without a check. Free of Redis, like the
//! algorithms they wrap.
//!
//! A key's state is its algorithm's state plus, only while a ban holds, a
//! [`Ban`] kept apart (boxed), so that keys that never meet a penalty keep
//! their plain size. Refused units that count (`TALLY`) and forced units
//! (`FORCE`) go into the algorithm's own state, past its limit where it can
//! hold them (the windows); a bucket holds at most its burst.
//!
//! A ban starts when a call carrying `BAN d` is refused (or at once with
//! `NOW`). The algorithm's state is set aside then: the ban remembers the
//! units the key counted ([`Ban::hits`]), every call is refused until it
//! ends, and when it ends the key is idle again. How further refusals treat
//! it is the call's choice ([`Escalation`]).

use super::{retry_ms, until_idle, Decision, Limiter, Params, MAX_LIMIT, NEVER};

/// How a ban answers the refused calls made while it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Escalation {
    /// They leave it as it is (Nest's and rate-limiter-flexible's
    /// `blockDuration`).
    #[default]
    Plain,
    /// Each restarts it, for the call's `BAN` length (`RENEW`; fastify's
    /// `continueExceeding`).
    Renew,
    /// Each doubles it, from that call, up to `max_us` (`BACKOFF max`;
    /// fastify's `exponentialBackoff`).
    Backoff { max_us: u64 },
}

/// What one call asks of the penalties; the default asks nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// `BAN d`: a refused call bans the key for `d` µs.
    pub ban_us: Option<u64>,
    /// `RENEW` or `BACKOFF max`, with `BAN`.
    pub escalation: Escalation,
    /// `TALLY cap`: a refused call's units count against the limit all the
    /// same, as long as the key counts fewer than `cap` units.
    pub tally_cap: Option<u64>,
    /// `FORCE`: the units are taken whether or not they fit.
    pub force: bool,
    /// `NOW`, with `BAN`: the key is banned now, whatever it holds.
    pub ban_now: bool,
}

impl Rules {
    /// True when the call asks for no penalty at all.
    pub fn is_none(&self) -> bool {
        *self == Rules::default()
    }
}

/// A ban on a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ban {
    /// When it ends (Unix µs).
    pub(crate) until_us: u64,
    /// Its length: what `RENEW` restarts and `BACKOFF` doubles.
    pub(crate) length_us: u64,
    /// The units the key counted when it started, and those counted since
    /// (`TALLY`, `FORCE`), less refunds.
    pub(crate) hits: u64,
}

impl Ban {
    /// When it started: a call earlier than that counts at that instant
    /// (for one key time never runs backwards).
    fn started_us(&self) -> u64 {
        self.until_us.saturating_sub(self.length_us)
    }

    /// True while it holds at `now_us`.
    pub fn holds_at(&self, now_us: u64) -> bool {
        now_us.max(self.started_us()) < self.until_us
    }

    pub fn until_us(&self) -> u64 {
        self.until_us
    }

    pub fn length_us(&self) -> u64 {
        self.length_us
    }

    pub fn hits(&self) -> u64 {
        self.hits
    }
}

/// An algorithm's state and the ban it may be under.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Penalized<L> {
    pub(crate) inner: L,
    pub(crate) ban: Option<Box<Ban>>,
}

/// The reply's extra fields (`DETAIL`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Detail {
    /// The units the key counts now, refused and forced ones included; in a
    /// ban, those it counted when the ban started and since.
    pub hits: u64,
    /// Milliseconds left of the ban, rounded up; 0 when there is none.
    pub banned_ms: u64,
    /// Milliseconds until one more unit is admissible (until `remaining`
    /// grows), rounded up; 0 when nothing is used.
    pub next_free_ms: u64,
}

impl<L: Limiter> Penalized<L> {
    /// A state that holds `inner` and no ban.
    pub fn new(inner: L) -> Penalized<L> {
        Penalized { inner, ban: None }
    }

    pub fn inner(&self) -> &L {
        &self.inner
    }

    pub fn ban(&self) -> Option<&Ban> {
        self.ban.as_deref()
    }

    /// The ban in force at `now_us`, if any.
    fn ban_at(&self, now_us: u64) -> Option<&Ban> {
        self.ban.as_deref().filter(|ban| ban.holds_at(now_us))
    }

    /// Runs one call: `cost` units (a refund when negative, a peek at 0) at
    /// `now_us` under `params` and `rules`. Returns the reply and whether
    /// the state changed (then it must be stored and propagated). Without
    /// rules and outside a ban it is exactly the algorithm's own call.
    pub fn call(&mut self, params: &Params, cost: i64, rules: &Rules, now_us: u64) -> (Decision, bool) {
        if self.ban.is_some() && self.ban_at(now_us).is_none() {
            // The ban is over and the key idle: the call runs on a fresh
            // state, which replaces this one only if the call changes it
            // (a peek must leave the stored value exactly as it was).
            let mut fresh = Penalized::<L>::default();
            let (decision, changed) = fresh.call_unbanned(params, cost, rules, now_us);
            if changed {
                *self = fresh;
            }
            return (decision, changed);
        }
        if self.ban.is_some() {
            return self.call_banned(params, cost, rules, now_us);
        }
        self.call_unbanned(params, cost, rules, now_us)
    }

    fn call_unbanned(&mut self, params: &Params, cost: i64, rules: &Rules, now_us: u64) -> (Decision, bool) {
        if let (true, Some(length_us)) = (rules.ban_now, rules.ban_us) {
            return (self.start_ban(params, length_us, now_us), true);
        }
        let units = cost.unsigned_abs();
        if cost < 0 {
            return (self.inner.refund(params, units, now_us), true);
        }
        let decision = self.inner.acquire(params, units, now_us);
        if decision.allowed || cost == 0 {
            return (decision, decision.allowed && cost > 0);
        }
        let counted = if rules.force {
            units
        } else if let Some(cap) = rules.tally_cap {
            units.min(cap.saturating_sub(self.inner.used(params, now_us)))
        } else {
            0
        };
        if counted > 0 {
            self.inner.force(params, counted, now_us);
        }
        if let Some(length_us) = rules.ban_us {
            return (self.start_ban(params, length_us, now_us), true);
        }
        if counted == 0 {
            return (decision, false);
        }
        // The units now counted weigh on when the same call fits.
        (Decision { allowed: false, ..self.inner.check(params, units, now_us) }, true)
    }

    fn call_banned(&mut self, params: &Params, cost: i64, rules: &Rules, now_us: u64) -> (Decision, bool) {
        let Some(ban) = self.ban.as_deref_mut() else { return (self.inner.check(params, 0, now_us), false) };
        let now = now_us.max(ban.started_us());
        let units = cost.unsigned_abs();
        let before = ban.clone();
        match (cost, rules.ban_us) {
            (_, Some(length_us)) if rules.ban_now => restart(ban, length_us, now),
            // A refund is always admitted: it takes units off the count,
            // and leaves the ban.
            (..0, _) => {
                ban.hits -= units.min(ban.hits);
                let changed = *ban != before;
                return (Decision { allowed: true, retry_after_ms: 0, ..banned(ban, params, 0, now) }, changed);
            }
            (0, _) => {}
            _ if rules.force => {
                ban.hits = ban.hits.max(ban.hits.saturating_add(units).min(rules.tally_cap.unwrap_or(MAX_LIMIT)))
            }
            (_, length) => {
                if let Some(cap) = rules.tally_cap {
                    ban.hits = ban.hits.max(ban.hits.saturating_add(units).min(cap));
                }
                match (rules.escalation, length) {
                    (Escalation::Renew, Some(length_us)) => restart(ban, length_us, now),
                    (Escalation::Backoff { max_us }, Some(_)) => {
                        restart(ban, ban.length_us.saturating_mul(2).min(max_us.max(ban.length_us)), now)
                    }
                    _ => {}
                }
            }
        }
        let changed = *ban != before;
        (banned(ban, params, units, now), changed)
    }

    /// Bans the key for `length_us` from `now_us`: the units it counts are
    /// kept in the ban, and its algorithm's state is set aside.
    fn start_ban(&mut self, params: &Params, length_us: u64, now_us: u64) -> Decision {
        let hits = self.inner.used(params, now_us).min(MAX_LIMIT);
        let ban = Ban { until_us: now_us.saturating_add(length_us), length_us, hits };
        let decision = banned(&ban, params, 1, now_us);
        *self = Penalized { inner: L::default(), ban: Some(Box::new(ban)) };
        decision
    }

    /// What the call would answer, changing nothing: the algorithm's own
    /// check outside a ban (the penalties it would apply do not change
    /// whether it is admitted), the ban's refusal inside one.
    pub fn check(&self, params: &Params, cost: u64, now_us: u64) -> Decision {
        match (self.ban_at(now_us), &self.ban) {
            (Some(ban), _) => banned(ban, params, cost, now_us.max(ban.started_us())),
            (None, Some(_)) => L::default().check(params, cost, now_us),
            (None, None) => self.inner.check(params, cost, now_us),
        }
    }

    /// The reply's extra fields at `now_us` (after the call).
    pub fn detail(&self, params: &Params, now_us: u64) -> Detail {
        if let Some(ban) = self.ban_at(now_us) {
            let (left_ms, _) = until_idle(u128::from(ban.until_us - now_us.max(ban.started_us())));
            return Detail { hits: ban.hits, banned_ms: left_ms, next_free_ms: left_ms };
        }
        let fresh = L::default();
        let inner = if self.ban.is_some() { &fresh } else { &self.inner };
        let now = inner.check(params, 0, now_us);
        let next_free_ms = if now.remaining >= now.limit {
            0
        } else {
            inner.check(params, now.remaining + 1, now_us).retry_after_ms.max(0) as u64
        };
        // The sliding counter's estimate weighs two windows of forced
        // units: reported within the bound every count keeps.
        Detail { hits: inner.used(params, now_us).min(MAX_LIMIT), banned_ms: 0, next_free_ms }
    }
}

/// Restarts `ban` for `length_us` from `now`.
fn restart(ban: &mut Ban, length_us: u64, now: u64) {
    ban.until_us = now.saturating_add(length_us);
    ban.length_us = length_us;
}

/// The reply to a call of `cost` units under `ban` at `now`: refused until
/// it ends, when the key is idle again.
fn banned(ban: &Ban, params: &Params, cost: u64, now: u64) -> Decision {
    let left_us = u128::from(ban.until_us.saturating_sub(now));
    let (reset_after_ms, reset_after_us) = until_idle(left_us);
    Decision {
        allowed: false,
        limit: params.burst(),
        remaining: 0,
        retry_after_ms: if cost > params.burst() { NEVER } else { retry_ms(left_us) },
        reset_after_ms,
        reset_after_us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::table::S;
    use crate::limiter::{FixedWindow, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket};

    const MS: u64 = 1_000;

    fn quota(limit: u64, period_us: u64) -> Params {
        Params::new(limit, period_us, None).unwrap()
    }

    fn ban(length_us: u64, escalation: Escalation) -> Rules {
        Rules { ban_us: Some(length_us), escalation, ..Rules::default() }
    }

    /// (at, cost) -> (allowed, remaining, retry_after ms, reset_after ms, changed)
    type Step = (u64, i64, (bool, u64, i64, u64, bool));

    fn run<L: Limiter>(state: &mut Penalized<L>, p: &Params, rules: &Rules, steps: &[Step]) {
        for (i, &(at, cost, want)) in steps.iter().enumerate() {
            let (d, changed) = state.call(p, cost, rules, at);
            assert_eq!((d.allowed, d.remaining, d.retry_after_ms, d.reset_after_ms, changed), want, "step {i} at {at}");
        }
    }

    #[test]
    fn a_plain_ban_refuses_everything_until_it_ends_then_the_key_is_idle() {
        let p = quota(2, S);
        let mut state = Penalized::<FixedWindow>::default();
        run(
            &mut state,
            &p,
            &ban(10 * S, Escalation::Plain),
            &[
                (0, 1, (true, 1, 0, 1000, true)),
                (0, 1, (true, 0, 0, 1000, true)),
                // Refused: banned for 10 s from here.
                (500 * MS, 1, (false, 0, 10_000, 10_000, true)),
                // The window would have reopened at 1 s: the ban holds.
                (2 * S, 1, (false, 0, 8_500, 8_500, false)),
                (2 * S, 0, (false, 0, 8_500, 8_500, false)),
                (10 * S + 499_999, 1, (false, 0, 1, 1, false)),
                // Over: idle, a fresh window.
                (10 * S + 500 * MS, 0, (true, 2, 0, 0, false)),
                (10 * S + 500 * MS, 2, (true, 0, 0, 1000, true)),
            ],
        );
        assert!(state.ban().is_none());
    }

    #[test]
    fn a_renewing_ban_restarts_with_each_refusal() {
        let p = quota(1, S);
        let mut state = Penalized::<SlidingWindow>::default();
        run(
            &mut state,
            &p,
            &ban(5 * S, Escalation::Renew),
            &[
                (0, 1, (true, 0, 0, 2000, true)),
                (100 * MS, 1, (false, 0, 5000, 5000, true)),
                (4 * S, 1, (false, 0, 5000, 5000, true)),
                // A peek renews nothing.
                (8 * S, 0, (false, 0, 1000, 1000, false)),
                (9 * S, 1, (true, 0, 0, 2000, true)),
            ],
        );
    }

    #[test]
    fn an_escalating_ban_doubles_up_to_its_cap() {
        let p = quota(1, S);
        let mut state = Penalized::<TokenBucket>::default();
        let rules = ban(S, Escalation::Backoff { max_us: 5 * S });
        run(
            &mut state,
            &p,
            &rules,
            &[
                (0, 1, (true, 0, 0, 1000, true)),
                (0, 1, (false, 0, 1000, 1000, true)),
                (500 * MS, 1, (false, 0, 2000, 2000, true)),
                (S, 1, (false, 0, 4000, 4000, true)),
                (2 * S, 1, (false, 0, 5000, 5000, true)),
                (3 * S, 1, (false, 0, 5000, 5000, true)),
                (8 * S, 1, (true, 0, 0, 1000, true)),
            ],
        );
    }

    #[test]
    fn refused_units_that_count_refuse_further_calls_in_the_window() {
        // rate-limiter-flexible: 5 points, consume 3, then 3 (refused,
        // counted: 6), then 1 (refused: 7).
        let p = quota(5, 60 * S);
        let rules = Rules { tally_cap: Some(1000), ..Rules::default() };
        let mut state = Penalized::<FixedWindow>::default();
        run(
            &mut state,
            &p,
            &rules,
            &[
                (0, 3, (true, 2, 0, 60_000, true)),
                (S, 3, (false, 0, 59_000, 59_000, true)),
                (2 * S, 1, (false, 0, 58_000, 58_000, true)),
            ],
        );
        assert_eq!(state.detail(&p, 2 * S).hits, 7);
        // Without TALLY the same calls leave 3 counted.
        let mut plain = Penalized::<FixedWindow>::default();
        for (at, cost) in [(0, 3), (S, 3), (2 * S, 1)] {
            plain.call(&p, cost, &Rules::default(), at);
        }
        assert_eq!(plain.detail(&p, 2 * S).hits, 4);
        // The cap bounds the count.
        let capped = Rules { tally_cap: Some(6), ..Rules::default() };
        let mut state = Penalized::<FixedWindow>::default();
        for cost in [5, 3, 3] {
            state.call(&p, cost, &capped, 0);
        }
        assert_eq!(state.detail(&p, 0).hits, 6);
    }

    #[test]
    fn forced_units_pass_the_limit_and_may_start_the_ban() {
        let p = quota(3, 10 * S);
        let force = Rules { force: true, ..Rules::default() };
        let mut state = Penalized::<SlidingLog>::default();
        let (d, changed) = state.call(&p, 5, &force, 0);
        assert_eq!((d.allowed, d.remaining, changed), (false, 0, true));
        assert_eq!(state.detail(&p, 0).hits, 5);
        assert!(!state.call(&p, 1, &Rules::default(), S).0.allowed);
        let banning = Rules { force: true, ..ban(60 * S, Escalation::Plain) };
        let mut state = Penalized::<LeakyBucket>::default();
        let (d, _) = state.call(&p, 4, &banning, 0);
        assert_eq!((d.allowed, d.retry_after_ms), (false, 60_000));
        // A bucket holds at most its burst.
        assert_eq!(state.ban().map(|b| b.hits), Some(3));
    }

    #[test]
    fn a_ban_set_directly_and_refunds_under_it() {
        let p = quota(10, 60 * S);
        let now = Rules { ban_now: true, ..ban(30 * S, Escalation::Plain) };
        let mut state = Penalized::<FixedWindow>::default();
        state.call(&p, 4, &Rules::default(), 0);
        let (d, changed) = state.call(&p, 0, &now, S);
        assert_eq!((d.allowed, d.retry_after_ms, changed), (false, 30_000, true));
        assert_eq!(state.detail(&p, S), Detail { hits: 4, banned_ms: 30_000, next_free_ms: 30_000 });
        let (d, changed) = state.call(&p, -3, &Rules::default(), 2 * S);
        assert_eq!((d.allowed, d.retry_after_ms, d.reset_after_ms, changed), (true, 0, 29_000, true));
        assert_eq!(state.detail(&p, 2 * S).hits, 1);
        assert!(!state.call(&p, 1, &Rules::default(), 3 * S).0.allowed);
        // Over at 31 s: idle, its window gone with the ban.
        assert!(state.call(&p, 10, &Rules::default(), 31 * S).0.allowed);
    }

    #[test]
    fn detail_tells_when_the_next_unit_frees() {
        let p = quota(3, 10 * S);
        let mut log = Penalized::<SlidingLog>::default();
        for at in [S, 2 * S, 4 * S] {
            log.call(&p, 1, &Rules::default(), at);
        }
        // The oldest entry (1 s) leaves at 11 s, whether or not the log is full.
        assert_eq!(log.detail(&p, 5 * S), Detail { hits: 3, banned_ms: 0, next_free_ms: 6_000 });
        log.call(&p, -1, &Rules::default(), 5 * S);
        assert_eq!(log.detail(&p, 5 * S), Detail { hits: 2, banned_ms: 0, next_free_ms: 6_000 });
        let idle = Penalized::<TokenBucket>::default();
        assert_eq!(idle.detail(&p, 0), Detail::default());
    }

    #[test]
    fn a_call_without_rules_is_the_algorithm_s_own() {
        let p = quota(2, S);
        let mut plain = FixedWindow::default();
        let mut wrapped = Penalized::<FixedWindow>::default();
        for (at, cost) in [(0, 1), (1, 2), (2, 1), (S, 0), (S, -1), (S + 1, 2)] {
            let want = if cost < 0 { plain.refund(&p, 1, at) } else { plain.acquire(&p, cost as u64, at) };
            assert_eq!(wrapped.call(&p, cost, &Rules::default(), at).0, want);
            assert_eq!(wrapped.inner(), &plain);
        }
    }
}
