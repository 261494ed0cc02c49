//! Property tests for the five algorithms against the contract in
//! COMMANDS.md ("Reply" and "Semantics").
//!
//! Every generated call goes through [`check_call`], which checks on clones
//! of the state the properties every algorithm shares:
//!
//! - the reply's `limit` is the limit (windows) or the burst (buckets), and
//!   `remaining <= limit`;
//! - denied calls and peeks leave the state exactly equal;
//! - `retry_after` is 0 for an admitted call (LEAKY: its queue delay),
//!   `NEVER` exactly when the cost exceeds the reply's `limit`, else >= 1;
//!   a limited call repeated `retry_after` ms later is admitted, and
//!   `retry_after - 1` ms later it is not;
//! - exactly `remaining` further cost-1 calls at the same instant are
//!   admitted (one at a time, each reply counting down) and the next is
//!   not; one call of cost `remaining` is admitted too;
//! - `reset_after` is > 0 after an admitted call with cost > 0; a peek
//!   `reset_after` ms later finds the key idle (`remaining == limit`,
//!   `reset_after == 0`), and one ms earlier it does not (`reset_after > 0`);
//! - a peek is always admitted (docs/commands.md, "Peek"); `check` answers what
//!   `acquire` does; the state's own invariants hold ([`Algo::well_formed`]),
//!   the parameters it keeps being the call's after a change.
//!
//! On top of that, with fixed parameters each algorithm is compared with an
//! independent reference model of its definition and its over-admission
//! bound is checked over all intervals; the buckets are checked for drift
//! against a closed form over long spans.

use std::fmt::Debug;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;

use super::{
    Decision, FixedWindow, LeakyBucket, Limiter, Params, SlidingLog, SlidingWindow, TokenBucket, MAX_LIMIT,
    MAX_PERIOD_US, MAX_TIME_US, MIN_PERIOD_US, NEVER,
};

const MS: u64 = 1_000;
/// Property 3 is checked one cost-1 call at a time up to this `remaining`.
const REMAINING_LOOP_CAP: u64 = 10_000;
/// Longest `reset_after` or `retry_after` any algorithm may answer, in ms:
/// the sliding counter needs up to two periods.
const MAX_WAIT_MS: u64 = 2 * MAX_PERIOD_US / MS;

trait Algo: Limiter + Clone + PartialEq + Debug {
    const NAME: &'static str;
    /// TOKEN and LEAKY: the reply's `limit` is the burst.
    const BUCKET: bool;
    /// LEAKY: an admitted call's `retry_after` is its queue delay.
    const LEAKY: bool;

    /// The state's own invariants, checked after every call. `just_took`:
    /// the call was admitted with cost > 0 under `p`.
    fn well_formed(&self, p: &Params, just_took: bool) -> Result<(), String>;

    /// The time a call at `at` is judged at (docs/commands.md, "Time"): never before
    /// the last change; for the windows, which keep no last change, never
    /// before the stored window's start.
    fn effective_now(&self, at: u64, last_change: u64) -> u64 {
        at.max(last_change)
    }
}

impl Algo for FixedWindow {
    const NAME: &'static str = "FIXED";
    const BUCKET: bool = false;
    const LEAKY: bool = false;

    fn well_formed(&self, p: &Params, just_took: bool) -> Result<(), String> {
        if just_took && !(1..=p.limit()).contains(&self.count) {
            return Err(format!("window holds {} units after an admission", self.count));
        }
        Ok(())
    }

    fn effective_now(&self, at: u64, _last_change: u64) -> u64 {
        at.max(self.window_start_us)
    }
}

impl Algo for SlidingWindow {
    const NAME: &'static str = "SLIDING";
    const BUCKET: bool = false;
    const LEAKY: bool = false;

    fn well_formed(&self, p: &Params, just_took: bool) -> Result<(), String> {
        let c = self.counts();
        if just_took && !(1..=p.limit()).contains(&c.current) {
            return Err(format!("current window holds {} units after an admission", c.current));
        }
        if just_took && !c.window_start_us.is_multiple_of(p.period_us()) {
            return Err("window not aligned on the epoch".into());
        }
        if just_took && c.period_us != p.period_us() {
            return Err(format!("period {} kept after a change under {}", c.period_us, p.period_us()));
        }
        Ok(())
    }

    fn effective_now(&self, at: u64, _last_change: u64) -> u64 {
        at.max(self.counts().window_start_us)
    }
}

/// SLIDING under `FLOOR`: the same state, every call's previous window
/// counted in whole units rounded down.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SlidingFloor(SlidingWindow);

impl Limiter for SlidingFloor {
    fn acquire(&mut self, params: &Params, cost: u64, now_us: u64) -> Decision {
        self.0.acquire(&params.with_floor_previous(), cost, now_us)
    }

    fn refund(&mut self, params: &Params, units: u64, now_us: u64) -> Decision {
        self.0.refund(&params.with_floor_previous(), units, now_us)
    }

    fn force(&mut self, params: &Params, units: u64, now_us: u64) {
        self.0.force(&params.with_floor_previous(), units, now_us)
    }

    fn used(&self, params: &Params, now_us: u64) -> u64 {
        self.0.used(&params.with_floor_previous(), now_us)
    }
}

impl Algo for SlidingFloor {
    const NAME: &'static str = "SLIDING FLOOR";
    const BUCKET: bool = false;
    const LEAKY: bool = false;

    fn well_formed(&self, p: &Params, just_took: bool) -> Result<(), String> {
        self.0.well_formed(p, just_took)
    }

    fn effective_now(&self, at: u64, last_change: u64) -> u64 {
        self.0.effective_now(at, last_change)
    }
}

impl Algo for SlidingLog {
    const NAME: &'static str = "SLIDING EXACT";
    const BUCKET: bool = false;
    const LEAKY: bool = false;

    /// Entries in strictly increasing time, each of at least one unit,
    /// summing to `used`; after an admission at most `limit` units (so at
    /// most `limit` entries).
    fn well_formed(&self, p: &Params, just_took: bool) -> Result<(), String> {
        let entries: Vec<_> = self.entries().collect();
        let sum: u64 = entries.iter().map(|e| e.units).sum();
        if sum != self.used || entries.iter().any(|e| e.units == 0) {
            return Err(format!("log {entries:?} does not add up to used {}", self.used));
        }
        if entries.windows(2).any(|w| w[0].at_us >= w[1].at_us) {
            return Err(format!("log not in strictly increasing time: {entries:?}"));
        }
        if just_took && self.used > p.limit() {
            return Err(format!("log holds {} units after an admission", self.used));
        }
        Ok(())
    }
}

/// The stored level never exceeds the stored capacity; after a change the
/// bucket keeps the call's parameters.
fn bucket_well_formed(b: &super::bucket::Bucket, p: &Params, just_took: bool) -> Result<(), String> {
    if b.level > u128::from(b.burst) * u128::from(b.period_us) {
        return Err(format!("level above capacity: {b:?}"));
    }
    if just_took && b.last_params() != Some(*p) {
        return Err(format!("parameters {:?} kept after a change under {p:?}", b.last_params()));
    }
    Ok(())
}

impl Algo for TokenBucket {
    const NAME: &'static str = "TOKEN";
    const BUCKET: bool = true;
    const LEAKY: bool = false;

    fn well_formed(&self, p: &Params, just_took: bool) -> Result<(), String> {
        bucket_well_formed(&self.bucket(), p, just_took)
    }
}

impl Algo for LeakyBucket {
    const NAME: &'static str = "LEAKY";
    const BUCKET: bool = true;
    const LEAKY: bool = true;

    fn well_formed(&self, p: &Params, just_took: bool) -> Result<(), String> {
        bucket_well_formed(&self.bucket(), p, just_took)
    }
}

/// Parameters as the command would build them: the windows take no burst;
/// a bucket whose burst `Params::new` refuses (`BurstTooSlow`) falls back
/// to the default burst.
fn params_for<A: Algo>(limit: u64, period_us: u64, burst: u64) -> Params {
    if A::BUCKET {
        if let Ok(p) = Params::new(limit, period_us, Some(burst)) {
            return p;
        }
    }
    Params::new(limit, period_us, None).expect("generated parameters are within bounds")
}

/// The reply's `limit`: the most units the key can admit at once.
fn cap<A: Algo>(p: &Params) -> u64 {
    if A::BUCKET {
        p.burst()
    } else {
        p.limit()
    }
}

fn ceil_ms(us: u128) -> u64 {
    u64::try_from(us.div_ceil(u128::from(MS))).unwrap_or(u64::MAX)
}

fn ms_to_us(ms: u64) -> u64 {
    ms.saturating_mul(MS)
}

/// One call on `state`, with every shared property checked on clones.
/// `last_change` is the time of the last admitted call with cost > 0 (the
/// limiter's own clock never runs back past it). Returns the reply and the
/// new `last_change`.
fn check_call<A: Algo>(
    state: &mut A,
    last_change: u64,
    p: &Params,
    cost: u64,
    at: u64,
    step: usize,
) -> Result<(Decision, u64), TestCaseError> {
    let now = state.effective_now(at, last_change);
    let cap = cap::<A>(p);
    let before = state.clone();
    let d = state.acquire(p, cost, at);
    let ctx = format!("{} step {step}: {p:?} cost {cost} at {at} (now {now}) -> {d:?}", A::NAME);

    prop_assert_eq!(d.limit, cap, "reply limit: {}", ctx);
    prop_assert!(d.remaining <= cap, "remaining above limit: {}", ctx);
    prop_assert!(d.reset_after_ms <= MAX_WAIT_MS, "reset_after out of range: {}", ctx);
    prop_assert_eq!(d.reset_after_ms, ceil_ms(u128::from(d.reset_after_us)), "reset_after in ms and µs: {}", ctx);
    prop_assert!(
        d.retry_after_ms == NEVER || (0..=MAX_WAIT_MS as i64).contains(&d.retry_after_ms),
        "retry_after out of range: {}",
        ctx
    );

    // 4. Denied calls and peeks change nothing.
    let took = d.allowed && cost > 0;
    if !took {
        prop_assert_eq!(&*state, &before, "a denied call or a peek changed the state: {}", ctx);
    }
    if let Err(why) = state.well_formed(p, took) {
        return Err(TestCaseError::fail(format!("{why}: {ctx}")));
    }
    // What acquire answers, check answers without the change.
    prop_assert_eq!(before.check(p, cost, now), d, "check disagrees with acquire: {}", ctx);
    // Zero units always fit (docs/commands.md, "Peek").
    if cost == 0 {
        prop_assert!(d.allowed, "a peek refused: {}", ctx);
    }

    // Shape of retry_after.
    if d.allowed {
        if A::LEAKY {
            prop_assert!(d.retry_after_ms >= 0, "admitted LEAKY call with NEVER: {}", ctx);
        } else {
            prop_assert_eq!(d.retry_after_ms, 0, "admitted call must not wait: {}", ctx);
        }
    } else if cost > cap {
        prop_assert_eq!(d.retry_after_ms, NEVER, "impossible cost must answer NEVER: {}", ctx);
    } else {
        prop_assert!(d.retry_after_ms >= 1, "a possible call limited without a wait: {}", ctx);
    }

    // 2. retry_after exactness.
    if !d.allowed && d.retry_after_ms >= 1 {
        let r = d.retry_after_ms as u64;
        let later = state.clone().acquire(p, cost, now + ms_to_us(r));
        prop_assert!(later.allowed, "not admitted retry_after later: {} then {:?}", ctx, later);
        if r >= 2 {
            let early = state.clone().acquire(p, cost, now + ms_to_us(r - 1));
            prop_assert!(!early.allowed, "admitted 1 ms before retry_after: {} then {:?}", ctx, early);
        }
    }

    // 3. remaining exactness.
    if d.remaining <= REMAINING_LOOP_CAP {
        let mut s = state.clone();
        for i in 0..d.remaining {
            let next = s.acquire(p, 1, now);
            prop_assert!(
                next.allowed && next.remaining == d.remaining - i - 1,
                "cost-1 call {} of {} at the same instant: {} then {:?}",
                i + 1,
                d.remaining,
                ctx,
                next
            );
        }
        let over = s.acquire(p, 1, now);
        prop_assert!(!over.allowed, "one call past remaining admitted: {} then {:?}", ctx, over);
    }
    if d.remaining > 0 {
        let mut s = state.clone();
        let all = s.acquire(p, d.remaining, now);
        prop_assert!(
            all.allowed && all.remaining == 0,
            "a call of cost remaining not admitted: {} then {:?}",
            ctx,
            all
        );
        let over = s.acquire(p, 1, now);
        prop_assert!(!over.allowed, "a call past cost remaining admitted: {} then {:?}", ctx, over);
    }

    // 6. reset_after.
    if d.allowed && cost > 0 {
        prop_assert!(d.reset_after_ms > 0, "admitted units but reset_after 0: {}", ctx);
    }
    let idle = state.clone().acquire(p, 0, now + ms_to_us(d.reset_after_ms));
    prop_assert!(
        idle.allowed && idle.remaining == cap && idle.reset_after_ms == 0,
        "not idle reset_after later: {} then {:?}",
        ctx,
        idle
    );
    if d.reset_after_ms >= 1 {
        let busy = state.clone().acquire(p, 0, now + ms_to_us(d.reset_after_ms - 1));
        prop_assert!(busy.reset_after_ms > 0, "idle 1 ms before reset_after: {} then {:?}", ctx, busy);
    }

    let last_change = if took { now } else { last_change };
    Ok((d, last_change))
}

/// How a generated call picks its cost.
#[derive(Clone, Copy, Debug)]
enum Cost {
    Units(u64),
    /// The reply's `limit` plus this, clamped to `[0, MAX_LIMIT]`.
    Cap(i64),
    /// The previous reply's `remaining`: exhausts the key.
    Remaining,
}

#[derive(Clone, Debug)]
struct Call {
    /// Microseconds after the previous call's `AT`; may be negative.
    dt: i64,
    cost: Cost,
    /// Which of the parameter sets this call uses (modulo their number).
    params: u8,
}

/// One call as the limiter saw it.
#[derive(Clone, Copy, Debug)]
struct Event {
    /// Effective time: `AT`, or the last change if that is later.
    now: u64,
    cost: u64,
    d: Decision,
}

impl Event {
    fn admitted(&self) -> u64 {
        if self.d.allowed {
            self.cost
        } else {
            0
        }
    }
}

fn drive<A: Algo>(start: u64, pool: &[Params], calls: &[Call]) -> Result<Vec<Event>, TestCaseError> {
    let mut state = A::default();
    let mut at = start;
    let mut last_change = 0;
    let mut last_remaining = None;
    let mut events = Vec::with_capacity(calls.len());
    for (step, call) in calls.iter().enumerate() {
        at = (i128::from(at) + i128::from(call.dt)).clamp(0, i128::from(MAX_TIME_US)) as u64;
        let p = &pool[usize::from(call.params) % pool.len()];
        let cap = cap::<A>(p);
        let cost = match call.cost {
            Cost::Units(n) => n.min(MAX_LIMIT),
            Cost::Cap(delta) => (i128::from(cap) + i128::from(delta)).clamp(0, i128::from(MAX_LIMIT)) as u64,
            Cost::Remaining => last_remaining.unwrap_or(cap),
        };
        let now = state.effective_now(at, last_change);
        let (d, changed) = check_call(&mut state, last_change, p, cost, at, step)?;
        last_change = changed;
        last_remaining = Some(d.remaining);
        events.push(Event { now, cost, d });
    }
    Ok(events)
}

// ---------------------------------------------------------------------------
// Reference models, for one fixed set of parameters. Each is written from
// the contract's definition, independently of the implementation, and
// checks both the exact replies and the over-admission bound.

type Model = fn(&Params, &[Event]) -> Result<(), TestCaseError>;

/// Units admitted with an effective time in `[from, to]`.
fn admitted_between(events: &[Event], from: u64, to: u64) -> u128 {
    events.iter().filter(|e| (from..=to).contains(&e.now)).map(|e| u128::from(e.admitted())).sum()
}

/// Largest number of units admitted in any half-open interval `(t - period, t]`
/// (it suffices to end intervals at admission times).
fn max_in_any_period(events: &[Event], period: u64) -> u128 {
    events
        .iter()
        .filter(|e| e.admitted() > 0)
        .map(|e| admitted_between(events, (e.now + 1).saturating_sub(period), e.now))
        .max()
        .unwrap_or(0)
}

/// FIXED: a window of one period opens at the first admitted call when
/// none is open; at most `limit` units per window.
fn fixed_model(p: &Params, events: &[Event]) -> Result<(), TestCaseError> {
    let (limit, period) = (p.limit(), p.period_us());
    // The window opened by the last admission, if any: (start, units).
    let mut window = (0u64, 0u64);
    for (i, e) in events.iter().enumerate() {
        let (start, mut used) = match window {
            (start, used) if used > 0 && e.now < start + period => (start, used),
            _ => (e.now, 0),
        };
        let allowed = e.cost <= limit - used;
        if allowed && e.cost > 0 {
            used += e.cost;
            window = (start, used);
        }
        let reset_us = if used > 0 { start + period - e.now } else { 0 };
        let reset = ceil_ms(u128::from(reset_us));
        let retry = match (allowed, e.cost > limit) {
            (true, _) => 0,
            (false, true) => NEVER,
            (false, false) => reset as i64,
        };
        let want = Decision {
            allowed,
            limit,
            remaining: limit - used,
            retry_after_ms: retry,
            reset_after_ms: reset,
            reset_after_us: reset_us,
        };
        prop_assert_eq!(e.d, want, "FIXED model, step {}: {:?}", i, e);
        prop_assert!(used <= limit, "FIXED: more than limit in one window at step {}", i);
    }
    let most = max_in_any_period(events, period);
    prop_assert!(most <= 2 * u128::from(limit), "FIXED: {} units in one period", most);
    Ok(())
}

/// SLIDING EXACT: a call is admitted when the units admitted in
/// `(now - period, now]` plus its cost fit the limit.
fn log_model(p: &Params, events: &[Event]) -> Result<(), TestCaseError> {
    let (limit, period) = (p.limit(), p.period_us());
    for (i, e) in events.iter().enumerate() {
        // Admissions still in the window, oldest first.
        let live: Vec<(u64, u64)> = events[..i]
            .iter()
            .filter(|x| x.admitted() > 0 && x.now + period > e.now)
            .map(|x| (x.now, x.admitted()))
            .collect();
        let used: u64 = live.iter().map(|x| x.1).sum();
        let allowed = used + e.cost <= limit;
        let used_after = if allowed { used + e.cost } else { used };
        let newest = if allowed && e.cost > 0 { Some(e.now) } else { live.last().map(|x| x.0) };
        let reset_us = match newest {
            Some(at) if used_after > 0 => at + period - e.now,
            _ => 0,
        };
        let reset = ceil_ms(u128::from(reset_us));
        let retry = if allowed {
            0
        } else if e.cost > limit {
            NEVER
        } else {
            // The oldest units leave first: wait for enough of them.
            let needed = used + e.cost - limit;
            let mut freed = 0;
            let mut wait = None;
            for &(at, units) in &live {
                freed += units;
                if freed >= needed {
                    wait = Some(at + period - e.now);
                    break;
                }
            }
            prop_assert!(wait.is_some(), "model: nothing frees enough at step {}", i);
            ceil_ms(u128::from(wait.unwrap_or(0))) as i64
        };
        let want = Decision {
            allowed,
            limit,
            remaining: limit - used_after,
            retry_after_ms: retry,
            reset_after_ms: reset,
            reset_after_us: reset_us,
        };
        prop_assert_eq!(e.d, want, "SLIDING EXACT model, step {}: {:?}", i, e);
    }
    let most = max_in_any_period(events, period);
    prop_assert!(most <= u128::from(limit), "SLIDING EXACT: {} units in one period", most);
    Ok(())
}

/// SLIDING: windows aligned on the epoch; a call is admitted when
/// `previous * (period - elapsed) / period + current + cost <= limit`.
fn sliding_model(p: &Params, events: &[Event]) -> Result<(), TestCaseError> {
    sliding_model_rounding(p, events, false)
}

/// SLIDING under `FLOOR`: admitted when
/// `floor(previous * (period - elapsed) / period) + current + cost <= limit`.
fn sliding_floor_model(p: &Params, events: &[Event]) -> Result<(), TestCaseError> {
    sliding_model_rounding(p, events, true)
}

fn sliding_model_rounding(p: &Params, events: &[Event], floor_previous: bool) -> Result<(), TestCaseError> {
    let (limit, period) = (p.limit(), p.period_us());
    let (l, pp) = (u128::from(limit), u128::from(period));
    let window_units = |events: &[Event], w: u64| -> u128 {
        events.iter().filter(|x| x.now / period == w).map(|x| u128::from(x.admitted())).sum()
    };
    for (i, e) in events.iter().enumerate() {
        let w = e.now / period;
        let elapsed = u128::from(e.now % period);
        let previous = if w == 0 { 0 } else { window_units(&events[..i], w - 1) };
        let current = window_units(&events[..i], w);
        let share = previous * (pp - elapsed);
        let share = if floor_previous { share / pp * pp } else { share };
        let weighted = |current: u128| share + current * pp;
        let allowed = e.cost == 0 || weighted(current + u128::from(e.cost)) <= l * pp;
        let current_after = if allowed { current + u128::from(e.cost) } else { current };
        let reset_us = if current_after > 0 {
            2 * pp - elapsed
        } else if previous > 0 {
            pp - elapsed
        } else {
            0
        };
        prop_assert_eq!(e.d.allowed, allowed, "SLIDING model, step {}: {:?}", i, e);
        let remaining = (l * pp).saturating_sub(weighted(current_after)) / pp;
        prop_assert_eq!(u128::from(e.d.remaining), remaining, "SLIDING remaining, step {}: {:?}", i, e);
        prop_assert_eq!(e.d.reset_after_ms, ceil_ms(reset_us), "SLIDING reset, step {}: {:?}", i, e);
        prop_assert_eq!(u128::from(e.d.reset_after_us), reset_us, "SLIDING reset in µs, step {}: {:?}", i, e);
        prop_assert!(current_after <= l, "SLIDING: more than limit in one aligned window at step {}", i);
    }
    // In any (t - period, t]: at most limit plus the previous aligned
    // window's count weighted by how far t is into its own window, plus
    // one unit rounded away under FLOOR (and so never more than 2 * limit).
    for e in events.iter().filter(|e| e.admitted() > 0) {
        let w = e.now / period;
        let previous = if w == 0 { 0 } else { window_units(events, w - 1) };
        let bound = l + previous * u128::from(e.now % period) / pp + u128::from(floor_previous && previous > 0);
        let rolling = admitted_between(events, (e.now + 1).saturating_sub(period), e.now);
        prop_assert!(rolling <= bound, "SLIDING: {} units in the period to {} (bound {})", rolling, e.now, bound);
        prop_assert!(rolling <= 2 * l, "SLIDING: {} units in one period", rolling);
    }
    Ok(())
}

/// TOKEN and LEAKY, in exact rationals: a level in units of
/// `1 / period` of a unit. TOKEN counts the tokens present (full at start,
/// refilled by `limit` each µs up to `burst * period`); LEAKY the queued
/// work (empty at start, drained by `limit` each µs down to 0).
fn bucket_model(p: &Params, events: &[Event], leaky: bool) -> Result<(), TestCaseError> {
    let (l, pp, b) = (u128::from(p.limit()), u128::from(p.period_us()), u128::from(p.burst()));
    let full = b * pp;
    let name = if leaky { "LEAKY" } else { "TOKEN" };
    // The level at the last change, and its time.
    let (mut stored, mut changed_at) = (if leaky { 0 } else { full }, 0u64);
    for (i, e) in events.iter().enumerate() {
        let flow = u128::from(e.now - changed_at.min(e.now)) * l;
        let level = if leaky { stored.saturating_sub(flow) } else { (stored + flow).min(full) };
        let asked = u128::from(e.cost) * pp;
        // Free room in scaled units: tokens present, or space left for work.
        let room = if leaky { full - level } else { level };
        let allowed = asked <= room;
        let room_after = if allowed { room - asked } else { room };
        let busy_after = full - room_after;
        let retry = if allowed {
            if leaky {
                ceil_ms(level.div_ceil(l)) as i64
            } else {
                0
            }
        } else if e.cost > p.burst() {
            NEVER
        } else {
            ceil_ms((asked - room).div_ceil(l)) as i64
        };
        let want = Decision {
            allowed,
            limit: p.burst(),
            remaining: (room_after / pp) as u64,
            retry_after_ms: retry,
            reset_after_ms: ceil_ms(busy_after.div_ceil(l)),
            reset_after_us: busy_after.div_ceil(l) as u64,
        };
        prop_assert_eq!(e.d, want, "{} model, step {}: {:?}", name, i, e);
        if allowed && e.cost > 0 {
            stored = if leaky { level + asked } else { level - asked };
            changed_at = e.now;
        }
    }
    // Over any [a, b]: at most burst + floor((b - a) * limit / period).
    let admits: Vec<&Event> = events.iter().filter(|e| e.admitted() > 0).collect();
    for (x, first) in admits.iter().enumerate() {
        // Admissions at the same time as `first` but earlier in the
        // sequence belong to [a, b] too.
        let same: u128 = admits[..x].iter().filter(|e| e.now == first.now).map(|e| u128::from(e.admitted())).sum();
        let mut units = 0u128;
        for last in &admits[x..] {
            units += u128::from(last.admitted());
            let bound = b + u128::from(last.now - first.now) * l / pp;
            prop_assert!(
                units + same <= bound,
                "{}: {} units in [{}, {}], bound {}",
                name,
                units + same,
                first.now,
                last.now,
                bound
            );
        }
    }
    Ok(())
}

fn token_model(p: &Params, events: &[Event]) -> Result<(), TestCaseError> {
    bucket_model(p, events, false)
}

fn leaky_model(p: &Params, events: &[Event]) -> Result<(), TestCaseError> {
    bucket_model(p, events, true)
}

// ---------------------------------------------------------------------------
// Strategies.

/// Small values, so windows fill, empty and roll over often.
/// (limit, period in ms, burst)
fn small_params() -> impl Strategy<Value = (u64, u64, u64)> {
    (1..=12u64, 1..=20u64, 1..=16u64)
}

/// Index of the weight bucket `kind` falls in (`kind < weights.sum()`).
/// Calls are decoded from plain integers by hand: 200-element vectors of
/// `prop_oneof!` are too slow to generate in a debug build. Every field
/// shrinks towards 0, that is towards a call of cost 1 at the same time.
fn pick(kind: u8, weights: &[u8]) -> usize {
    let mut kind = kind;
    for (i, &w) in weights.iter().enumerate() {
        if kind < w {
            return i;
        }
        kind -= w;
    }
    weights.len() - 1
}

fn small_call() -> impl Strategy<Value = Call> {
    (0..13u8, any::<u32>(), 0..12u8, any::<u32>(), any::<u8>()).prop_map(|(dk, dv, ck, cv, params)| {
        let dv = i64::from(dv);
        let dt = match pick(dk, &[3, 4, 4, 1, 1]) {
            0 => 0,
            1 => dv % 2_001,
            2 => dv % 25_001,
            3 => dv % 100_001,
            _ => -(dv % 20_000) - 1,
        };
        let cost = match pick(ck, &[6, 1, 3, 1, 1]) {
            0 => Cost::Units(1),
            1 => Cost::Units(0),
            2 => Cost::Units(u64::from(cv % 21)),
            3 => Cost::Cap(i64::from(cv % 4) - 2),
            _ => Cost::Remaining,
        };
        Call { dt, cost, params }
    })
}

fn small_start() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 0..=10_000_000u64, 0..=MAX_TIME_US - 1_000_000_000_000]
}

fn huge(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![Just(1u64), 1..=3u64, 1..=1_000u64, Just(max), max - 3..=max, 1..=max]
}

/// (limit, period in ms, burst) anywhere within bounds, extremes favoured.
fn extreme_params() -> impl Strategy<Value = (u64, u64, u64)> {
    let max_ms = MAX_PERIOD_US / MS;
    let period = prop_oneof![Just(MIN_PERIOD_US / MS), 1..=1_000u64, Just(max_ms), 1..=max_ms];
    (huge(MAX_LIMIT), period, huge(MAX_LIMIT))
}

fn extreme_call() -> impl Strategy<Value = Call> {
    (0..10u8, any::<u64>(), 0..13u8, any::<u64>(), any::<u8>()).prop_map(|(dk, dv, ck, cv, params)| {
        let max_period = MAX_PERIOD_US as i64;
        let max_time = MAX_TIME_US as i64;
        let dv = (dv >> 1) as i64;
        let dt = match pick(dk, &[3, 2, 2, 1, 1, 1]) {
            0 => 0,
            1 => dv % 10_001,
            2 => dv % (3 * max_period + 1) - max_period,
            3 => dv % (max_period + 1),
            4 => -max_time,
            _ => max_time,
        };
        let cost = match pick(ck, &[3, 2, 1, 1, 2, 2, 2]) {
            0 => Cost::Units(1),
            1 => Cost::Units(0),
            2 => Cost::Units(cv % 6),
            3 => Cost::Units(MAX_LIMIT),
            4 => Cost::Units(cv % (MAX_LIMIT + 1)),
            5 => Cost::Cap((cv % 5) as i64 - 3),
            _ => Cost::Remaining,
        };
        Call { dt, cost, params }
    })
}

fn extreme_start() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(MAX_TIME_US), 0..=MAX_TIME_US, MAX_TIME_US - 1_000_000_000_000_000..=MAX_TIME_US]
}

fn pool<A: Algo>(raw: &[(u64, u64, u64)]) -> Vec<Params> {
    raw.iter().map(|&(limit, period_ms, burst)| params_for::<A>(limit, period_ms * MS, burst)).collect()
}

// ---------------------------------------------------------------------------
// The properties, once per algorithm.

/// The default 256 cases, without writing regression files into the tree.
fn config() -> ProptestConfig {
    ProptestConfig { failure_persistence: None, ..ProptestConfig::default() }
}

macro_rules! algorithm_properties {
    ($name:ident, $algo:ty, $model:expr) => {
        mod $name {
            use super::*;

            const MODEL: Model = $model;

            proptest! {
                #![proptest_config(config())]

                /// 1-4, 6 and the reference model, with one set of parameters.
                #[test]
                fn fixed_parameters(
                    params in small_params(),
                    start in small_start(),
                    calls in vec(small_call(), 1..=200),
                ) {
                    let pool = pool::<$algo>(&[params]);
                    let events = drive::<$algo>(start, &pool, &calls)?;
                    MODEL(&pool[0], &events)?;
                }

                /// 2-4, 6 when limit, period and burst change between calls.
                #[test]
                fn changing_parameters(
                    params in vec(small_params(), 1..=3),
                    start in small_start(),
                    calls in vec(small_call(), 1..=200),
                ) {
                    drive::<$algo>(start, &pool::<$algo>(&params), &calls)?;
                }

                /// 5: no overflow or panic at the bounds, with time running
                /// backwards and parameters changing; 2-4, 6 still hold.
                #[test]
                fn extremes(
                    params in vec(extreme_params(), 1..=4),
                    start in extreme_start(),
                    calls in vec(extreme_call(), 1..=100),
                ) {
                    drive::<$algo>(start, &pool::<$algo>(&params), &calls)?;
                }
            }
        }
    };
}

algorithm_properties!(fixed, FixedWindow, fixed_model);
algorithm_properties!(sliding, SlidingWindow, sliding_model);
algorithm_properties!(sliding_floor, SlidingFloor, sliding_floor_model);
algorithm_properties!(sliding_exact, SlidingLog, log_model);
algorithm_properties!(token, TokenBucket, token_model);
algorithm_properties!(leaky, LeakyBucket, leaky_model);

// ---------------------------------------------------------------------------
// 7. No drift: a caller who takes every whole unit as soon as it is there
// has taken exactly `burst + floor((t - t0) * limit / period)` units by any
// time t, over spans up to the whole time range.

/// (limit, period, burst, start, ticks) with `burst >= 2` and each tick at
/// most `(burst - 1) * period / limit` µs, so that a greedy caller keeps
/// the bucket from ever capping (TOKEN) or running dry (LEAKY), and the
/// closed form holds exactly.
fn drift_case() -> impl Strategy<Value = (Params, u64, Vec<u64>)> {
    let max_ms = MAX_PERIOD_US / MS;
    let period = prop_oneof![1..=1_000u64, 1..=max_ms];
    (huge(MAX_LIMIT), period, any::<Index>(), 0..=MAX_TIME_US / 2, vec(any::<Index>(), 1..=200)).prop_filter_map(
        "no burst >= 2 fits",
        |(limit, period_ms, burst, start, ticks)| {
            let period = period_ms * MS;
            let most =
                (u128::from(MAX_PERIOD_US) * u128::from(limit) / u128::from(period)).min(u128::from(MAX_LIMIT)) as u64;
            if most < 2 {
                return None;
            }
            let burst = 2 + burst.index((most - 1) as usize) as u64;
            let params = Params::new(limit, period, Some(burst)).ok()?;
            let longest = (u128::from(burst - 1) * u128::from(period) / u128::from(limit))
                .min(u128::from(MAX_TIME_US / 2 / 200)) as usize;
            let ticks = ticks.iter().map(|t| t.index(longest + 1) as u64).collect();
            Some((params, start, ticks))
        },
    )
}

fn greedy_has_no_drift<A: Algo>(p: &Params, start: u64, ticks: &[u64]) -> Result<(), TestCaseError> {
    let (l, pp, b) = (u128::from(p.limit()), u128::from(p.period_us()), p.burst());
    let mut state = A::default();
    let first = state.acquire(p, b, start);
    prop_assert!(first.allowed && first.remaining == 0, "{} first call: {:?}", A::NAME, first);
    let mut taken = u128::from(b);
    let mut now = start;
    for (i, tick) in ticks.iter().enumerate() {
        now += tick;
        let due = u128::from(b) + u128::from(now - start) * l / pp;
        let cost = (due - taken) as u64;
        let d = state.acquire(p, cost, now);
        prop_assert!(
            d.allowed && d.remaining == 0,
            "{} {:?} tick {} at {} (+{} since start): cost {} -> {:?}",
            A::NAME,
            p,
            i,
            now,
            now - start,
            cost,
            d
        );
        taken = due;
        let more = state.clone().acquire(p, 1, now);
        prop_assert!(!more.allowed, "{} tick {}: one unit more than the closed form admitted", A::NAME, i);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn token_has_no_drift((p, start, ticks) in drift_case()) {
        greedy_has_no_drift::<TokenBucket>(&p, start, &ticks)?;
    }

    #[test]
    fn leaky_has_no_drift((p, start, ticks) in drift_case()) {
        greedy_has_no_drift::<LeakyBucket>(&p, start, &ticks)?;
    }
}

// ---------------------------------------------------------------------------
// 8. Penalties: a ban never admits, an escalating ban never passes its cap,
// counts never overflow, a call that says it changed nothing changed
// nothing, and every state reached stores and loads back.

mod penalties {
    use super::*;
    use crate::codec::{Codec, ENCODING_VERSION};
    use crate::limiter::{Escalation, Penalized, Rules};

    /// The longest ban any rule below asks for, in each scale.
    const SMALL_MAX_US: u64 = 4 * 1_000_000;

    fn rules(pick: u8, extreme: bool) -> Rules {
        let (short, long) = if extreme { (MAX_PERIOD_US / 2, MAX_PERIOD_US) } else { (500 * MS, SMALL_MAX_US) };
        let cap = if extreme { MAX_LIMIT } else { 30 };
        let ban = |escalation| Rules { ban_us: Some(short), escalation, ..Rules::default() };
        match pick % 9 {
            0 | 1 => Rules::default(),
            2 => ban(Escalation::Plain),
            3 => ban(Escalation::Renew),
            4 => ban(Escalation::Backoff { max_us: long }),
            5 => Rules { tally_cap: Some(cap), ..Rules::default() },
            6 => Rules { force: true, ..Rules::default() },
            7 => Rules { ban_now: true, ..ban(Escalation::Plain) },
            _ => Rules { tally_cap: Some(cap), ..ban(Escalation::Backoff { max_us: long }) },
        }
    }

    fn calls(extreme: bool) -> impl Strategy<Value = Vec<(i64, i64, u8)>> {
        let (dt, cost) = if extreme {
            (-(MAX_PERIOD_US as i64)..=MAX_PERIOD_US as i64, -(MAX_LIMIT as i64)..=MAX_LIMIT as i64)
        } else {
            (-200_000i64..=1_500_000, -3i64..=8)
        };
        vec((prop_oneof![Just(0i64), dt], cost, any::<u8>()), 1..=120)
    }

    fn drive<A: Algo + Codec>(
        p: &Params,
        start: u64,
        calls: &[(i64, i64, u8)],
        extreme: bool,
    ) -> Result<(), TestCaseError> {
        let longest = if extreme { MAX_PERIOD_US } else { SMALL_MAX_US };
        let mut state = Penalized::<A>::default();
        let mut at = start;
        for (i, &(dt, cost, pick)) in calls.iter().enumerate() {
            at = at.saturating_add_signed(dt).min(MAX_TIME_US);
            let r = rules(pick, extreme);
            let before = state.clone();
            let banned_before = before.ban().filter(|b| at.max(b.until_us - b.length_us) < b.until_us).is_some();
            let (d, changed) = state.call(p, cost, &r, at);
            let ctx = format!("{} step {i} at {at}: cost {cost} {r:?} -> {d:?}", A::NAME);
            prop_assert!(!(banned_before && cost >= 0 && d.allowed), "a ban admitted: {}", ctx);
            prop_assert!(changed || state == before, "changed nothing, yet the state moved: {}", ctx);
            prop_assert!(d.remaining <= d.limit, "{}", ctx);
            if let Some(ban) = state.ban() {
                prop_assert!(ban.length_us <= longest, "a ban of {} µs: {}", ban.length_us, ctx);
                // Time never runs back past the ban's start.
                let left = ban.until_us.saturating_sub(at.max(ban.until_us - ban.length_us));
                prop_assert!(left <= longest, "a ban to {}: {}", ban.until_us, ctx);
                prop_assert!(ban.hits <= MAX_LIMIT, "{}", ctx);
                let over = state.check(p, 0, ban.until_us);
                prop_assert!(over.allowed && over.remaining == d.limit, "not idle when the ban ends: {}", ctx);
            }
            let detail = state.detail(p, at);
            prop_assert!(detail.hits <= MAX_LIMIT, "{}", ctx);
            if state == Penalized::default() {
                continue; // an idle key is deleted, never stored
            }
            let mut words = Vec::new();
            state.encode(&mut |w| words.push(w));
            let loaded = Penalized::<A>::decode(ENCODING_VERSION, &mut words.into_iter());
            prop_assert_eq!(loaded.as_ref(), Ok(&state), "{}", ctx);
        }
        Ok(())
    }

    macro_rules! penalty_properties {
        ($name:ident, $algo:ty) => {
            proptest! {
                #![proptest_config(config())]

                #[test]
                fn $name(params in small_params(), start in small_start(), calls in calls(false)) {
                    let p = pool::<$algo>(&[params])[0];
                    drive::<$algo>(&p, start, &calls, false)?;
                }
            }
        };
    }

    penalty_properties!(fixed, FixedWindow);
    penalty_properties!(sliding, SlidingWindow);
    penalty_properties!(sliding_exact, SlidingLog);
    penalty_properties!(token, TokenBucket);
    penalty_properties!(leaky, LeakyBucket);

    proptest! {
        #![proptest_config(config())]

        /// At the bounds: bans of half the longest period doubling to the
        /// longest, costs up to the largest, time to its end.
        #[test]
        fn extremes(params in extreme_params(), start in extreme_start(), calls in calls(true)) {
            drive::<FixedWindow>(&pool::<FixedWindow>(&[params])[0], start, &calls, true)?;
            drive::<SlidingWindow>(&pool::<SlidingWindow>(&[params])[0], start, &calls, true)?;
            drive::<SlidingLog>(&pool::<SlidingLog>(&[params])[0], start, &calls, true)?;
            drive::<TokenBucket>(&pool::<TokenBucket>(&[params])[0], start, &calls, true)?;
            drive::<LeakyBucket>(&pool::<LeakyBucket>(&[params])[0], start, &calls, true)?;
        }
    }
}
