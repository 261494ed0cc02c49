//! Micro-benchmarks of the pure algorithms: nanoseconds per decision, with
//! the clock given as a number (no system time, no Redis).
//!
//! `make bench` runs them with the end-to-end benchmark; alone:
//! `cargo bench --bench algorithms`. Each benchmark id is
//! `<algorithm>/<path>`: `admit` calls are admitted and change the state,
//! `deny` calls are refused and change nothing.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use redis_throttle::args::{parse_call, Algorithm};
use redis_throttle::limiter::{
    FixedWindow, LeakyBucket, Limiter, Params, SlidingLog, SlidingWindow, TokenBucket, MAX_LIMIT,
};

/// 2023-11-14T22:13:20Z in Unix µs: any fixed instant will do.
const T0: u64 = 1_700_000_000_000_000;
const HOUR_US: u64 = 3_600_000_000;

fn params(limit: u64, period_us: u64, burst: Option<u64>) -> Params {
    Params::new(limit, period_us, burst).expect("valid benchmark parameters")
}

/// One call per iteration at a fixed instant on a state that always admits
/// (a limit no benchmark can exhaust).
fn admit_fixed_clock<L: Limiter>(c: &mut Criterion, id: &str, p: Params) {
    let mut state = L::default();
    c.bench_function(id, |b| b.iter(|| black_box(state.acquire(black_box(&p), black_box(1), black_box(T0)))));
}

/// One call per iteration at a fixed instant on a state that is full:
/// every call is denied and leaves the state as it was.
fn deny_fixed_clock<L: Limiter>(c: &mut Criterion, id: &str, p: Params) {
    let mut state = L::default();
    let first = state.acquire(&p, p.burst(), T0);
    assert!(first.allowed && first.remaining == 0);
    assert!(!state.acquire(&p, 1, T0).allowed);
    c.bench_function(id, |b| b.iter(|| black_box(state.acquire(black_box(&p), black_box(1), black_box(T0)))));
}

fn windows_and_buckets(c: &mut Criterion) {
    let big = params(MAX_LIMIT, HOUR_US, None);
    let one = params(1, HOUR_US, None);
    admit_fixed_clock::<FixedWindow>(c, "fixed/admit", big);
    deny_fixed_clock::<FixedWindow>(c, "fixed/deny", one);
    admit_fixed_clock::<SlidingWindow>(c, "sliding/admit", big);
    deny_fixed_clock::<SlidingWindow>(c, "sliding/deny", one);
    admit_fixed_clock::<TokenBucket>(c, "token/admit", big);
    deny_fixed_clock::<TokenBucket>(c, "token/deny", one);
    admit_fixed_clock::<LeakyBucket>(c, "leaky/admit", big);
    deny_fixed_clock::<LeakyBucket>(c, "leaky/deny", one);
}

/// SLIDING EXACT. `admit` is the steady state of a small limit: a log of
/// 100 entries, the clock moving one 100th of the period per call, so each
/// call drops one expired entry and logs itself. `deny` finds the log of
/// 100 full. `admit-same-us/100000` adds to the newest entry of a log of
/// 100,000 (the end-to-end log-length check does the same).
fn exact(c: &mut Criterion) {
    const LIMIT: u64 = 100;
    const STEP_US: u64 = 1_000;
    let p = params(LIMIT, LIMIT * STEP_US, None);
    let mut log = SlidingLog::default();
    let mut now = T0;
    for _ in 0..LIMIT {
        assert!(log.acquire(&p, 1, now).allowed);
        now += STEP_US;
    }
    c.bench_function("exact/admit", |b| {
        b.iter(|| {
            let d = log.acquire(black_box(&p), black_box(1), black_box(now));
            now += STEP_US;
            black_box(d)
        })
    });

    let mut full = SlidingLog::default();
    for i in 0..LIMIT {
        assert!(full.acquire(&p, 1, T0 + i).allowed);
    }
    let at = T0 + LIMIT;
    assert!(!full.acquire(&p, 1, at).allowed);
    c.bench_function("exact/deny", |b| b.iter(|| black_box(full.acquire(black_box(&p), black_box(1), black_box(at)))));

    const LONG: u64 = 100_000;
    let p_long = params(MAX_LIMIT, HOUR_US, None);
    let mut long = SlidingLog::default();
    for i in 0..LONG {
        assert!(long.acquire(&p_long, 1, T0 + i).allowed);
    }
    let last = T0 + LONG - 1;
    c.bench_function("exact/admit-same-us/100000", |b| {
        b.iter(|| black_box(long.acquire(black_box(&p_long), black_box(1), black_box(last))))
    });
}

/// Argument parsing, which every call pays before its decision.
fn parsing(c: &mut Criterion) {
    let args: [&[u8]; 4] = [b"1000", b"1m", b"BURST", b"2000"];
    c.bench_function("parse/token-burst", |b| {
        b.iter(|| black_box(parse_call(Algorithm::Token, black_box(args).into_iter())))
    });
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1_000))
        .sample_size(30)
        .without_plots()
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = windows_and_buckets, exact, parsing
}
criterion_main!(benches);
