//! What the fuzz targets check, in one file that both the fuzz targets
//! (`fuzz_targets/*.rs`, through this crate) and `tests/fuzz_regressions.rs`
//! (by `#[path]`) compile, so a saved input replays in plain `cargo test`
//! exactly as the fuzzer ran it. Only `redis_throttle`'s public API and
//! `std` are used.
//!
//! Each entry point takes raw bytes and panics when an invariant breaks:
//!
//! - [`parse_call`]: bytes split on spaces into arguments, through
//!   `parse_call` for every algorithm and `parse_all`. Accepted calls are
//!   within the documented bounds and re-parse identically from the form the
//!   module propagates; errors are short printable `ERR ` lines.
//! - [`decode_state`]: bytes as LEB128 words through every type's
//!   `Codec::decode` for versions 0 to 3. A decoded state re-encodes to
//!   exactly the words read, then runs calls and refunds with parameters,
//!   costs and times taken from the remaining words; after each, what the
//!   module would store still decodes to itself. Leases likewise, driven
//!   by acquisitions, releases and renewals.
//! - [`algorithms`]: call sequences on each limiter against simple models
//!   (exact ones for the windows and the log, the token-bucket bound for
//!   the buckets); every reply's `remaining`, `retry_after` and
//!   `reset_after` is checked by replaying on a copy of the state.

use std::collections::BTreeMap;
use std::fmt::Debug;

use redis_throttle::args::{self, Algorithm, ArgError, Call, Spec, TtlFrom, MAX_BLOCK_MS};
use redis_throttle::codec::{Codec, DecodeError, ENCODING_VERSION, LEASES_SINCE};
use redis_throttle::limiter::{
    Decision, Escalation, FixedWindow, LeakyBucket, LeaseParams, Leases, Limiter, Params, Penalized, Rules, SlidingLog,
    SlidingWindow, Token, TokenBucket, MAX_HOLDERS, MAX_LIMIT, MAX_PERIOD_US, MAX_TIME_US, MIN_PERIOD_US, NEVER,
};

/// The largest `reset_after` or `retry_after` any algorithm may answer, in
/// ms: two periods (the sliding counter's current window still weighs in
/// the next one).
const MAX_WAIT_MS: u64 = 2 * MAX_PERIOD_US / 1000;

/// Reads the fuzzer's bytes as small structured values; past the end every
/// read gives 0.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&first, rest)) => {
                self.data = rest;
                first
            }
            None => 0,
        }
    }

    /// LEB128: 7 bits a byte, low first; bits past 64 are dropped.
    pub fn varint(&mut self) -> u64 {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte();
            if shift < 64 {
                value |= u64::from(b & 0x7f) << shift;
            }
            if b & 0x80 == 0 {
                break;
            }
        }
        value
    }

    /// A byte below `0xf0` as itself (mod `small`), else one of `edges`, or a
    /// varint when the byte is `0xff`.
    fn small_or_edge(&mut self, small: u64, edges: &[u64]) -> u64 {
        match self.byte() {
            0xff => self.varint(),
            b @ 0xf0..=0xfe => edges.get(usize::from(b - 0xf0) % edges.len().max(1)).copied().unwrap_or(0),
            b => u64::from(b) % small.max(1),
        }
    }
}

// ---------------------------------------------------------------- parsing

const ALGORITHMS: [Algorithm; 4] = [Algorithm::Fixed, Algorithm::Sliding, Algorithm::Token, Algorithm::Leaky];

/// `data` split on spaces is the argument list after the key (and, with
/// `THROTTLE.ALL` in front, a whole `THROTTLE.ALL` call).
pub fn parse_call(data: &[u8]) {
    let args: Vec<&[u8]> = if data.is_empty() { Vec::new() } else { data.split(|&b| b == b' ').collect() };
    for algorithm in ALGORITHMS {
        match args::parse_call(algorithm, args.iter().copied()) {
            Ok(call) => check_call(algorithm, &call, &args),
            Err(e) => check_error(&e),
        }
    }
    let mut all: Vec<&[u8]> = vec![b"THROTTLE.ALL"];
    all.extend(args.iter().copied());
    match args::parse_all(&all) {
        Ok(specs) => check_specs(&all, &specs),
        Err(e) => check_error(&e),
    }
}

fn check_error(e: &ArgError) {
    let message = e.message();
    assert!(message.starts_with("ERR "), "{message:?}");
    assert!(message.len() <= 400, "error reply of {} bytes", message.len());
    assert!(message.bytes().all(|b| (0x20..0x7f).contains(&b)), "unprintable error reply {message:?}");
}

fn check_call(algorithm: Algorithm, call: &Call, args: &[&[u8]]) {
    let p = call.params;
    let bucket = matches!(algorithm, Algorithm::Token | Algorithm::Leaky);
    assert!((1..=MAX_LIMIT).contains(&p.limit()), "{args:?}: {call:?}");
    assert!((MIN_PERIOD_US..=MAX_PERIOD_US).contains(&p.period_us()), "{args:?}: {call:?}");
    assert!((1..=MAX_LIMIT).contains(&p.burst()), "{args:?}: {call:?}");
    assert!(bucket || p.burst() == p.limit(), "BURST accepted on {algorithm:?}: {args:?}");
    assert!(!call.exact || algorithm == Algorithm::Sliding, "EXACT accepted on {algorithm:?}: {args:?}");
    assert!(call.cost.unsigned_abs() <= MAX_LIMIT, "{args:?}: {call:?}");
    assert!(call.at_us.is_none_or(|t| t <= MAX_TIME_US), "{args:?}: {call:?}");
    assert!(call.block_ms.is_none_or(|ms| ms <= MAX_BLOCK_MS), "{args:?}: {call:?}");
    // Replicas and the AOF get `limit <ms>ms COST c AT t [EXACT|BURST b]`:
    // it must mean exactly the same call.
    assert_eq!(p.period_us() % 1000, 0, "a period the propagated form cannot carry: {args:?}");
    let at = call.at_us.unwrap_or(1_700_000_000_000_000);
    let mut line = format!("{} {}ms COST {} AT {}", p.limit(), p.period_us() / 1000, call.cost, at);
    if call.exact {
        line.push_str(" EXACT");
    }
    if bucket {
        line.push_str(&format!(" BURST {}", p.burst()));
    }
    if let Some((option, clock)) = call.ttl_from.map(ttl_from_words) {
        line.push_str(&format!(" {option} {clock}"));
    }
    if p.floor_previous() {
        line.push_str(" FLOOR");
    }
    line.push_str(&rules_words(&call.rules));
    if call.detail {
        line.push_str(" DETAIL");
    }
    let again = args::parse_call(algorithm, line.split(' ').map(str::as_bytes));
    assert_eq!(again, Ok(Call { at_us: Some(at), block_ms: None, ..*call }), "propagated as {line:?}, from {args:?}");
}

/// The penalty options as words, each ms period as `<n>ms`.
fn rules_words(rules: &Rules) -> String {
    let mut words = String::new();
    if let Some(us) = rules.ban_us {
        words.push_str(&format!(" BAN {}ms", us / 1000));
    }
    match rules.escalation {
        Escalation::Plain => {}
        Escalation::Renew => words.push_str(" RENEW"),
        Escalation::Backoff { max_us } => words.push_str(&format!(" BACKOFF {}ms", max_us / 1000)),
    }
    if let Some(cap) = rules.tally_cap {
        words.push_str(&format!(" TALLY {cap}"));
    }
    if rules.force {
        words.push_str(" FORCE");
    }
    if rules.ban_now {
        words.push_str(" NOW");
    }
    words
}

/// The master's clock as the propagated form writes it.
fn ttl_from_words(ttl_from: TtlFrom) -> (&'static str, String) {
    match ttl_from {
        TtlFrom::Us(us) => ("TTLFROMUS", us.to_string()),
        TtlFrom::Ms(ms) => ("TTLFROM", ms.to_string()),
    }
}

fn check_specs(all: &[&[u8]], specs: &[Spec]) {
    let first = specs.first().expect("parse_all accepted no spec");
    let mut previous_key = 1;
    for spec in specs {
        assert!(spec.key_index > previous_key && spec.key_index < all.len(), "{all:?}: {specs:?}");
        previous_key = spec.key_index;
        let name = all[spec.key_index - 1];
        assert!(name.eq_ignore_ascii_case(&spec.algorithm.command_name().as_bytes()["THROTTLE.".len()..]));
        assert_eq!(
            (spec.call.cost, spec.call.at_us, spec.call.block_ms, spec.call.ttl_from),
            (first.call.cost, first.call.at_us, None, first.call.ttl_from)
        );
        check_call(spec.algorithm, &spec.call, all);
        let key = all[spec.key_index];
        assert_eq!(specs.iter().filter(|s| all[s.key_index] == key).count(), 1, "a key twice: {all:?}");
    }
    // Propagated as `THROTTLE.ALL COST n AT t <the specs as given>`.
    let at = first.call.at_us.unwrap_or(1_700_000_000_000_000);
    let (cost, at_text) = (first.call.cost.to_string(), at.to_string());
    let mut line: Vec<&[u8]> = vec![b"THROTTLE.ALL", b"COST", cost.as_bytes(), b"AT", at_text.as_bytes()];
    let ttl_from = first.call.ttl_from.map(ttl_from_words);
    if let Some((option, clock)) = &ttl_from {
        line.extend([option.as_bytes(), clock.as_bytes()]);
    }
    let prefix = line.len();
    let start = first.key_index - 1;
    line.extend(&all[start..]);
    let again = args::parse_all(&line).unwrap_or_else(|e| panic!("propagated THROTTLE.ALL refused: {e:?}: {line:?}"));
    let shift = prefix - start;
    let want: Vec<Spec> = specs
        .iter()
        // DETAIL shapes the master's reply only: the propagated form has none.
        .map(|s| Spec { key_index: s.key_index + shift, call: Call { at_us: Some(at), detail: false, ..s.call }, ..*s })
        .collect();
    assert_eq!(again, want, "propagated THROTTLE.ALL differs: {line:?}");
}

// ---------------------------------------------------------------- stored states

/// One algorithm's state, as the fuzz targets drive it.
trait State: Limiter + Codec + Clone + PartialEq + Debug {
    const NAME: &'static str;
    const BUCKET: bool;
}

impl State for FixedWindow {
    const NAME: &'static str = "fixed";
    const BUCKET: bool = false;
}
impl State for SlidingWindow {
    const NAME: &'static str = "sliding";
    const BUCKET: bool = false;
}
impl State for SlidingLog {
    const NAME: &'static str = "sliding-exact";
    const BUCKET: bool = false;
}
impl State for TokenBucket {
    const NAME: &'static str = "token";
    const BUCKET: bool = true;
}
impl State for LeakyBucket {
    const NAME: &'static str = "leaky";
    const BUCKET: bool = true;
}

fn encode<T: Codec>(state: &T) -> Vec<u64> {
    let mut out = Vec::new();
    state.encode(&mut |w| out.push(w));
    out
}

/// What the module stores must load back: RDB, DUMP/RESTORE, the AOF
/// rewrite and replication all go through the decoder.
fn assert_round_trips<T: State>(state: &T, context: &dyn Fn() -> String) {
    let words = encode(state);
    let mut source = words.iter().copied();
    match T::decode(ENCODING_VERSION, &mut source) {
        Ok(back) => assert_eq!(&back, state, "{}: decoded differently: {}", T::NAME, context()),
        Err(e) => {
            panic!("{}: a stored state does not load back ({e:?}): {state:?} as {words:?}: {}", T::NAME, context())
        }
    }
    assert_eq!(source.len(), 0, "{}: decode left words unread", T::NAME);
}

/// Words from LEB128 bytes, through every type's decoder.
pub fn decode_state(data: &[u8]) {
    let mut bytes = Bytes::new(data);
    let mut words = Vec::new();
    while !bytes.is_empty() && words.len() < 4096 {
        words.push(bytes.varint());
    }
    decode_then_run::<FixedWindow>(&words);
    decode_then_run::<SlidingWindow>(&words);
    decode_then_run::<SlidingLog>(&words);
    decode_then_run::<TokenBucket>(&words);
    decode_then_run::<LeakyBucket>(&words);
    decode_penalized::<FixedWindow>(&words);
    decode_penalized::<SlidingWindow>(&words);
    decode_penalized::<SlidingLog>(&words);
    decode_penalized::<TokenBucket>(&words);
    decode_penalized::<LeakyBucket>(&words);
    decode_leases_then_run(&words);
}

/// A stored key's value as the module keeps it (a state and the ban it
/// may be under): what decodes re-encodes as read, and the words after it
/// drive calls with penalties: cost (zigzag), limit, period, a rules
/// selector, time. A ban never admits; nothing panics.
fn decode_penalized<T: State>(words: &[u64]) {
    let mut source = words.iter().copied();
    let Ok(mut state) = Penalized::<T>::decode(ENCODING_VERSION, &mut source) else { return };
    let consumed = words.len() - source.len();
    let mut out = Vec::new();
    state.encode(&mut |w| out.push(w));
    assert_eq!(out, words[..consumed], "{} under a ban: not re-encoded as read", T::NAME);
    for op in words[consumed..].chunks_exact(5) {
        let &[cost, limit, period, pick, at] = op else { continue };
        let cost = ((cost >> 1) as i64 ^ -((cost & 1) as i64)).clamp(-(MAX_LIMIT as i64), MAX_LIMIT as i64);
        let Ok(params) = Params::new(limit, period - period % 1_000, None) else { continue };
        let now = at.min(MAX_TIME_US);
        let length = (pick >> 8).clamp(1, MAX_PERIOD_US / 1000) * 1000;
        let ban = |escalation| Rules { ban_us: Some(length), escalation, ..Rules::default() };
        let rules = match pick % 7 {
            0 => Rules::default(),
            1 => ban(Escalation::Plain),
            2 => ban(Escalation::Renew),
            3 => ban(Escalation::Backoff { max_us: MAX_PERIOD_US }),
            4 => Rules { tally_cap: Some((pick >> 8).clamp(1, MAX_LIMIT)), ..Rules::default() },
            5 => Rules { force: true, ..Rules::default() },
            _ => Rules { ban_now: true, ..ban(Escalation::Plain) },
        };
        let banned = state.ban().is_some_and(|b| b.holds_at(now));
        let (decision, _) = state.call(&params, cost, &rules, now);
        assert!(!(banned && cost >= 0 && decision.allowed), "{}: a ban admitted {cost} at {now}", T::NAME);
        assert!(decision.remaining <= decision.limit, "{}: {decision:?}", T::NAME);
        if let Some(b) = state.ban() {
            assert!(b.length_us() <= MAX_PERIOD_US && b.hits() <= MAX_LIMIT, "{}: {b:?}", T::NAME);
        }
    }
}

/// Leases: a decoded value is well formed and re-encodes as read; the
/// remaining words drive acquisitions, releases and renewals, each in
/// fives (kind, token, limit, lease, time), after each of which the state
/// is well formed, round-trips, and holds no more leases than its limit.
fn decode_leases_then_run(words: &[u64]) {
    for version in 0..=ENCODING_VERSION + 1 {
        let mut source = words.iter().copied();
        let decoded = Leases::decode(version, &mut source);
        let Ok(mut state) = decoded else { continue };
        assert!((LEASES_SINCE..=ENCODING_VERSION).contains(&version), "leases: version {version} accepted");
        assert!(state.well_formed(), "leases: decoded an unsound state {state:?}");
        let consumed = words.len() - source.len();
        assert_eq!(encode(&state), words[..consumed], "leases: not re-encoded as read");
        for op in words[consumed..].chunks_exact(5) {
            let &[kind, token, limit, lease, at] = op else { continue };
            let Some(token) = Token::new(format!("t{}", token % 8).as_bytes()) else { continue };
            let lease = (lease % MAX_PERIOD_US).max(MIN_PERIOD_US) / 1_000 * 1_000;
            let now = at.min(MAX_TIME_US);
            let before = state.clone();
            let changed = match kind % 3 {
                0 => {
                    let Ok(params) = LeaseParams::new(limit % (MAX_HOLDERS + 1), lease) else { continue };
                    let checked = state.check(&params, Some(token.as_bytes()), now);
                    let outcome = state.acquire(&params, token, now);
                    assert_eq!(checked, outcome.decision, "leases: check disagrees");
                    let live = state.live(state.effective(now)).len() as u64;
                    assert!(!outcome.decision.allowed || live <= params.limit().max(before.limit()), "over the limit");
                    outcome.effect.is_some()
                }
                1 => state.release(token, now).is_some(),
                _ => state.renew(token, lease, now).is_some(),
            };
            if !changed {
                assert_eq!(state, before, "leases: a refused call changed the state");
            }
            if state.is_empty() {
                state = Leases::default();
                continue;
            }
            assert!(state.well_formed(), "leases: a call left an unsound state {state:?}");
            let again = Leases::decode(ENCODING_VERSION, &mut encode(&state).into_iter());
            assert_eq!(again.as_ref(), Ok(&state), "leases: does not round-trip");
        }
    }
}

fn decode_then_run<T: State>(words: &[u64]) {
    for version in 0..=ENCODING_VERSION + 1 {
        let mut source = words.iter().copied();
        let decoded = T::decode(version, &mut source);
        if !(1..=ENCODING_VERSION).contains(&version) {
            assert_eq!(decoded, Err(DecodeError::Version), "{}: version {version} accepted", T::NAME);
            continue;
        }
        let Ok(mut state) = decoded else { continue };
        let consumed = words.len() - source.len();
        if version == ENCODING_VERSION {
            assert_eq!(encode(&state), words[..consumed], "{}: not re-encoded as read", T::NAME);
        }
        assert_round_trips(&state, &|| "as decoded".into());
        // The remaining words drive calls: cost (zigzag), limit, period,
        // burst (0: none), time. The period is cut to whole ms, as commands
        // write it; parameters out of bounds skip the call.
        for op in words[consumed..].chunks_exact(5) {
            let &[cost, limit, period, burst, at] = op else { continue };
            let cost = ((cost >> 1) as i64 ^ -((cost & 1) as i64)).clamp(-(MAX_LIMIT as i64), MAX_LIMIT as i64);
            let burst = (T::BUCKET && burst != 0).then_some(burst);
            let Ok(params) = Params::new(limit, period - period % 1_000, burst) else { continue };
            let now = at.min(MAX_TIME_US);
            let decision = module_step(&mut state, &params, cost, now);
            if cost != 0 && decision.reset_after_ms == 0 && (cost < 0 || decision.allowed) {
                // The module deletes an idle key.
                state = T::default();
            }
        }
    }
}

/// One call as the module makes it: a refund for a negative cost, else an
/// acquire; checks what the module relies on and returns the decision.
fn module_step<T: State>(state: &mut T, params: &Params, cost: i64, now: u64) -> Decision {
    let before = state.clone();
    let units = cost.unsigned_abs();
    let decision = if cost < 0 { state.refund(params, units, now) } else { state.acquire(params, units, now) };
    let context = || format!("cost {cost} at {now} with {params:?}, from {before:?}");
    if cost >= 0 {
        // THROTTLE.ALL's dry run and THROTTLE.INFO answer without a change.
        assert_eq!(before.check(params, units, now), decision, "{}: check disagrees: {}", T::NAME, context());
    }
    check_decision::<T>(&decision, params, cost);
    let changed = cost < 0 || (decision.allowed && cost > 0);
    if !changed {
        assert_eq!(*state, before, "{}: a call that admitted nothing changed the state: {}", T::NAME, context());
    }
    if decision.allowed && cost > 0 {
        // The key's TTL is reset_after: 0 would delete what was just taken.
        assert!(decision.reset_after_ms > 0, "{}: admitted units but reset_after 0: {}", T::NAME, context());
    }
    if changed && decision.reset_after_ms > 0 {
        assert_round_trips(state, &context);
    }
    decision
}

fn check_decision<T: State>(d: &Decision, params: &Params, cost: i64) {
    let cap = if T::BUCKET { params.burst() } else { params.limit() };
    assert_eq!(d.limit, cap, "{}: reply's limit", T::NAME);
    assert!(d.remaining <= cap, "{}: remaining {} above {cap}", T::NAME, d.remaining);
    assert!(d.reset_after_ms <= MAX_WAIT_MS, "{}: reset_after {}", T::NAME, d.reset_after_ms);
    assert!(
        d.retry_after_ms >= NEVER && d.retry_after_ms <= MAX_WAIT_MS as i64,
        "{}: retry_after {}",
        T::NAME,
        d.retry_after_ms
    );
    if cost <= 0 {
        assert!(d.allowed, "{}: a peek or refund was limited", T::NAME);
    }
    if d.allowed && !(T::NAME == "leaky" && cost >= 0) {
        assert_eq!(d.retry_after_ms, 0, "{}: admitted with retry_after {}", T::NAME, d.retry_after_ms);
    }
    assert_eq!(
        d.retry_after_ms == NEVER,
        !d.allowed && cost.unsigned_abs() > cap,
        "{}: retry_after {} for cost {cost} and limit {cap}",
        T::NAME,
        d.retry_after_ms
    );
}

// ---------------------------------------------------------------- algorithms

/// A simple model of one algorithm under constant parameters: exact for
/// the windows and the log; for the buckets, the history that the
/// token-bucket bound is checked on.
enum Model {
    Fixed {
        start: u64,
        count: u64,
    },
    /// Units admitted per aligned window (index = time / period).
    Sliding {
        windows: BTreeMap<u64, u64>,
    },
    /// Admitted (time, units), oldest first.
    Exact {
        log: Vec<(u64, u64)>,
    },
    /// Admitted (time, units); refunds switch the bound off.
    Bucket {
        admitted: Vec<(u64, u64)>,
        refunded: bool,
    },
}

impl Model {
    /// Whether the model admits `cost` at `now` (`None`: it does not say).
    fn admits(&self, p: &Params, now: u64, cost: u64) -> Option<bool> {
        let (limit, period) = (p.limit(), p.period_us());
        match self {
            Model::Fixed { start, count } => {
                let used = if *count > 0 && now < start + period { *count } else { 0 };
                Some(used + cost <= limit)
            }
            Model::Sliding { windows } => {
                let k = now / period;
                let elapsed = now % period;
                let current = windows.get(&k).copied().unwrap_or(0);
                let previous = k.checked_sub(1).and_then(|k| windows.get(&k)).copied().unwrap_or(0);
                let weighted = u128::from(previous) * u128::from(period - elapsed)
                    + u128::from(current + cost) * u128::from(period);
                Some(cost == 0 || weighted <= u128::from(limit) * u128::from(period))
            }
            Model::Exact { log } => {
                let used: u64 = log.iter().filter(|(t, _)| t + period > now).map(|(_, u)| u).sum();
                Some(used + cost <= limit)
            }
            Model::Bucket { .. } => None,
        }
    }

    fn admit(&mut self, p: &Params, now: u64, cost: u64) {
        let period = p.period_us();
        match self {
            Model::Fixed { start, count } => {
                if *count == 0 || now >= *start + period {
                    (*start, *count) = (now, 0);
                }
                *count += cost;
            }
            Model::Sliding { windows } => *windows.entry(now / period).or_insert(0) += cost,
            Model::Exact { log } => log.push((now, cost)),
            Model::Bucket { admitted, refunded } => {
                admitted.push((now, cost));
                if !*refunded {
                    // Units admitted in [s, now] <= burst + (now - s) * limit / period.
                    let mut units = 0u128;
                    for &(s, u) in admitted.iter().rev() {
                        units += u128::from(u);
                        let bound =
                            u128::from(p.burst()) * u128::from(period) + u128::from(now - s) * u128::from(p.limit());
                        assert!(
                            units * u128::from(period) <= bound,
                            "bucket over-admitted: {units} units in [{s}, {now}] with {p:?}"
                        );
                    }
                }
            }
        }
    }

    /// Gives units back; returns whether the model is idle afterwards.
    fn refund(&mut self, p: &Params, now: u64, units: u64) -> Option<bool> {
        let period = p.period_us();
        match self {
            Model::Fixed { start, count } => {
                let open = *count > 0 && now < *start + period;
                *count = if open { *count - units.min(*count) } else { 0 };
                Some(*count == 0)
            }
            Model::Sliding { windows } => {
                let k = now / period;
                let mut left = units;
                for w in [Some(k), k.checked_sub(1)].into_iter().flatten() {
                    if let Some(c) = windows.get_mut(&w) {
                        let taken = left.min(*c);
                        *c -= taken;
                        left -= taken;
                    }
                }
                let idle =
                    [Some(k), k.checked_sub(1)].into_iter().flatten().all(|w| windows.get(&w).is_none_or(|c| *c == 0));
                if idle {
                    windows.clear();
                }
                Some(idle)
            }
            Model::Exact { log } => {
                log.retain(|(t, _)| t + period > now);
                let mut left = units;
                while left > 0 {
                    let Some(last) = log.last_mut() else { break };
                    let taken = left.min(last.1);
                    last.1 -= taken;
                    left -= taken;
                    if last.1 == 0 {
                        log.pop();
                    }
                }
                Some(log.is_empty())
            }
            Model::Bucket { refunded, admitted } => {
                *refunded = true;
                admitted.clear();
                None
            }
        }
    }
}

/// Sequences of calls on one limiter: the first byte picks the algorithm
/// and the mode (refunds allowed; parameters changing between calls).
pub fn algorithms(data: &[u8]) {
    let mut b = Bytes::new(data);
    let head = b.byte();
    match head % 5 {
        0 => run_sequence::<FixedWindow>(head, &mut b),
        1 => run_sequence::<SlidingWindow>(head, &mut b),
        2 => run_sequence::<SlidingLog>(head, &mut b),
        3 => run_sequence::<TokenBucket>(head, &mut b),
        _ => run_sequence::<LeakyBucket>(head, &mut b),
    }
}

const LIMIT_EDGES: &[u64] = &[1, 2, 3, 7, 10, 64, 1000, MAX_LIMIT, MAX_LIMIT - 1, 999_999_999_999_999 / 7];
const PERIOD_EDGES: &[u64] = &[
    MIN_PERIOD_US,
    1_001,
    7_000,
    999_983,
    1_000_000,
    60_000_000,
    3_600_000_000,
    86_400_000_000,
    MAX_PERIOD_US,
    MAX_PERIOD_US - 1,
];
const TIME_EDGES: &[u64] =
    &[0, 1, 999, 1_000_000, 1_700_000_000_000_000, MAX_TIME_US - MAX_PERIOD_US, MAX_TIME_US - 1_000_000, MAX_TIME_US];

fn params_from<T: State>(b: &mut Bytes) -> Option<Params> {
    let limit = 1 + b.small_or_edge(32, LIMIT_EDGES).saturating_sub(1);
    let period = match b.byte() {
        0xff => b.varint(),
        x @ 0xf0..=0xfe => PERIOD_EDGES[usize::from(x - 0xf0) % PERIOD_EDGES.len()],
        x => (u64::from(x) + 1) * 1000,
    };
    let burst = if T::BUCKET { Some(b.small_or_edge(40, LIMIT_EDGES)).filter(|&x| x != 0) } else { None };
    Params::new(limit, period, burst).ok()
}

fn run_sequence<T: State>(head: u8, b: &mut Bytes) {
    let refunds = head & 0x20 != 0;
    let mixed = head & 0x40 != 0;
    let Some(first) = params_from::<T>(b) else { return };
    let mut all_params = vec![first];
    if mixed {
        all_params.extend(params_from::<T>(b));
        all_params.extend(params_from::<T>(b));
    }
    let mut t = b.small_or_edge(1 << 20, TIME_EDGES).min(MAX_TIME_US);
    let mut state = T::default();
    let mut model = match T::NAME {
        "fixed" => Model::Fixed { start: 0, count: 0 },
        "sliding" => Model::Sliding { windows: BTreeMap::new() },
        "sliding-exact" => Model::Exact { log: Vec::new() },
        _ => Model::Bucket { admitted: Vec::new(), refunded: false },
    };
    // The time of the state's last change: the limiter's clock never runs
    // behind it (and restarts from 0 once the state is idle again).
    let mut last_change = 0u64;
    for _ in 0..256 {
        if b.is_empty() {
            break;
        }
        let op = b.byte();
        let params = all_params[usize::from(op & 3) % all_params.len()];
        // Time moves by a varint scaled down or up by the op's bits; bit 2
        // runs it backwards.
        let step = b.varint();
        let step = match (op >> 3) & 3 {
            0 => step,
            1 => step.saturating_mul(1000),
            2 => step.saturating_mul(params.period_us() / 16 + 1),
            _ => step.saturating_mul(params.period_us()),
        };
        t = if op & 4 != 0 { t.saturating_sub(step) } else { t.saturating_add(step).min(MAX_TIME_US) };
        let cap = if T::BUCKET { params.burst() } else { params.limit() };
        let units =
            b.small_or_edge(cap + 2, &[0, 1, cap, cap + 1, MAX_LIMIT, cap / 2, cap.saturating_sub(1)]).min(MAX_LIMIT);
        let refund = refunds && op & 0x80 != 0;
        let cost = if refund { -(units as i64) } else { units as i64 };
        let now = t.max(last_change);
        let context = || format!("{} cost {cost} at {now} (asked {t}) with {params:?}", T::NAME);

        let predicted = if mixed || refund { None } else { model.admits(&params, now, units) };
        let before = state.clone();
        let d = module_step(&mut state, &params, cost, now);
        if let Some(want) = predicted {
            assert_eq!(d.allowed, want, "{}: the model disagrees: {:?} from {before:?}", context(), d);
        }
        if !mixed {
            if refund {
                let idle = model.refund(&params, now, units);
                if let Some(idle) = idle {
                    assert_eq!(idle, d.reset_after_ms == 0, "{}: model idle {idle}, {d:?}", context());
                }
            } else if d.allowed && units > 0 {
                model.admit(&params, now, units);
            }
        }
        let changed = refund || (d.allowed && units > 0);
        if changed {
            if d.reset_after_ms == 0 {
                state = T::default();
                last_change = 0;
                if let (false, Model::Sliding { windows }) = (mixed, &mut model) {
                    windows.clear();
                }
            } else {
                last_change = now;
            }
        }
        check_promises(&before, &state, &params, cost, now, &d, &context);
    }
}

/// The promises docs/commands.md makes about one reply, checked on copies of the state:
/// `remaining` further units fit at the same instant and one more does not;
/// a limited call repeated `retry_after` ms later is admitted and 1 ms
/// earlier is not; the key is idle `reset_after` ms later and not 1 ms
/// earlier.
fn check_promises<T: State>(
    before: &T,
    after: &T,
    p: &Params,
    cost: i64,
    now: u64,
    d: &Decision,
    context: &dyn Fn() -> String,
) {
    let cap = if T::BUCKET { p.burst() } else { p.limit() };
    let probe = |state: &T, units: u64, at: u64| state.clone().acquire(p, units, at);
    if d.remaining > 0 {
        let took = probe(after, d.remaining, now);
        assert!(took.allowed, "{}: remaining {} but they do not fit: {took:?}", context(), d.remaining);
    }
    let mut full = after.clone();
    if d.remaining > 0 {
        full.acquire(p, d.remaining, now);
    }
    let one_more = full.acquire(p, 1, now);
    assert!(!one_more.allowed, "{}: remaining {} but one more fits", context(), d.remaining);

    if !d.allowed && d.retry_after_ms > 0 {
        let wait = d.retry_after_ms as u64 * 1000;
        if now + wait <= MAX_TIME_US {
            let later = probe(before, cost as u64, now + wait);
            assert!(later.allowed, "{}: retry_after {} ms, then still limited: {later:?}", context(), d.retry_after_ms);
            let early = probe(before, cost as u64, now + wait - 1000);
            assert!(!early.allowed, "{}: retry_after {} ms, but admitted 1 ms earlier", context(), d.retry_after_ms);
        }
    }

    let reset_us = d.reset_after_ms * 1000;
    if d.reset_after_ms > 0 && now + reset_us <= MAX_TIME_US {
        let idle = probe(after, 0, now + reset_us);
        assert_eq!(
            (idle.remaining, idle.reset_after_ms),
            (cap, 0),
            "{}: reset_after {} ms, then not idle: {d:?}",
            context(),
            d.reset_after_ms
        );
        let busy = probe(after, 0, now + reset_us - 1000);
        assert!(busy.reset_after_ms > 0, "{}: reset_after {} ms, but idle 1 ms earlier", context(), d.reset_after_ms);
    }
}
