//! The core contract of /work/shared/COMMANDS.md ("One shape", "Reply",
//! "Semantics", "Errors and bad input", and the TYPE/TTL bullets of "Keys"),
//! checked against a live redis-server with the module loaded.
//!
//! Time is driven with `AT` everywhere. A key's TTL, however, runs on the
//! server's real clock, so a simulation whose `AT` times advance slower than
//! real time could see a key vanish early. Scripted tests below only make
//! calls whose keys hold TTLs far longer than the test; the randomized
//! property test makes each call and a `PERSIST` of its key atomic (MULTI),
//! so real time never interferes with simulated time.

mod common;

use std::time::Instant;

use common::{call, error, throttle, Reply, Server};

/// Seconds and milliseconds in µs.
const S: u64 = 1_000_000;
const MS: u64 = 1_000;
/// 2019-12-20, a multiple of 3650 days: aligned to every period that
/// divides 3650d, so SLIDING's epoch-aligned windows start exactly here.
const T0: u64 = 5 * 3650 * 86_400 * S;
const MAX: u64 = 1_000_000_000_000_000;

const FIXED: &str = "THROTTLE.FIXED";
const SLIDING: &str = "THROTTLE.SLIDING";
const TOKEN: &str = "THROTTLE.TOKEN";
const LEAKY: &str = "THROTTLE.LEAKY";

// ---------------------------------------------------------------------------
// helpers

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64
}

fn digest(c: &mut redis::Connection, key: &str) -> String {
    let v: Vec<String> = call(c, &format!("DEBUG DIGEST-VALUE {key}")).unwrap();
    v.into_iter().next().unwrap()
}

fn exists(c: &mut redis::Connection, key: &str) -> i64 {
    call(c, &format!("EXISTS {key}")).unwrap()
}

fn key_type(c: &mut redis::Connection, key: &str) -> String {
    call(c, &format!("TYPE {key}")).unwrap()
}

fn pttl(c: &mut redis::Connection, key: &str) -> i64 {
    call(c, &format!("PTTL {key}")).unwrap()
}

/// The real time since `then`, in whole ms rounded up: how far a PTTL
/// read now can have run down since a call made after `then`.
fn ms_since(then: Instant) -> i64 {
    then.elapsed().as_micros().div_ceil(1000) as i64
}

/// The key's PTTL is the reset_after of the call that set it, made after
/// `called`: never more, and less by no more than the time since then, as
/// measured here (1 ms more for the rounding to ms).
fn assert_ttl_is_reset(c: &mut redis::Connection, key: &str, reset_after: i64, called: Instant, context: &str) {
    let ttl = pttl(c, key);
    let since = ms_since(called) + 1;
    assert!(
        (reset_after - since..=reset_after).contains(&ttl),
        "{context}: PTTL {ttl} should equal reset_after {reset_after} ({since} ms after the call)"
    );
}

fn cmd(line: &str) -> redis::Cmd {
    let mut parts = line.split(' ');
    let mut cmd = redis::cmd(parts.next().unwrap());
    for arg in parts {
        cmd.arg(arg);
    }
    cmd
}

/// Runs a THROTTLE call and removes its key's TTL in one transaction, so
/// the key lives on however slowly the simulated time advances.
fn sim(c: &mut redis::Connection, line: &str) -> Reply {
    let key = line.split(' ').nth(1).unwrap();
    let mut pipe = redis::pipe();
    pipe.atomic().add_command(cmd(line)).cmd("PERSIST").arg(key).ignore();
    let (v,): (Vec<i64>,) = pipe.query(c).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(v.len(), 5, "{line}: {v:?}");
    (v[0], v[1], v[2], v[3], v[4])
}

/// True when `word` appears in `text` as a whole word.
fn names(text: &str, word: &str) -> bool {
    text.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '.')).any(|w| w == word)
}

/// (AT offset from T0 in µs, COST, expected reply)
type Step = (u64, i64, Reply);

/// Runs `steps` as `<head> COST n AT t<tail>` and checks every reply
/// exactly; after each call that took units, checks PTTL = reset_after.
fn run_script(c: &mut redis::Connection, head: &str, tail: &str, steps: &[Step]) {
    let key = head.split(' ').nth(1).unwrap().to_string();
    for (i, &(offset, cost, want)) in steps.iter().enumerate() {
        let line = format!("{head} COST {cost} AT {}{tail}", T0 + offset);
        let called = Instant::now();
        let got = throttle(c, &line);
        assert_eq!(got, want, "step {i}: {line}");
        if got.0 == 1 && cost > 0 {
            assert_ttl_is_reset(c, &key, got.4, called, &format!("step {i}: {line}"));
        }
    }
}

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The four commands and SLIDING EXACT: (command, option appended to the
/// line, TYPE name).
const KINDS: [(&str, &str, &str); 5] = [
    (FIXED, "", "thr-fixed"),
    (SLIDING, "", "thr-slide"),
    (SLIDING, " EXACT", "thr-exact"),
    (TOKEN, "", "thr-token"),
    (LEAKY, "", "thr-leaky"),
];

// ---------------------------------------------------------------------------
// each algorithm, scripted with exact replies

#[test]
fn fixed_window_opens_at_first_call() {
    let server = Server::start();
    let mut c = server.conn();
    run_script(
        &mut c,
        "THROTTLE.FIXED k 3 10s",
        "",
        &[
            (0, 1, (1, 3, 2, 0, 10_000)),
            (5 * S, 2, (1, 3, 0, 0, 5_000)),
            // Full: retry when the window ends, 1 µs later, rounded up.
            (10 * S - 1, 1, (0, 3, 0, 1, 1)),
            (10 * S, 1, (1, 3, 2, 0, 10_000)),
            (10 * S, 0, (1, 3, 2, 0, 10_000)),
            (10 * S, 4, (0, 3, 2, -1, 10_000)),
            (15 * S, 2, (1, 3, 0, 0, 5_000)),
            (15 * S, 1, (0, 3, 0, 5_000, 5_000)),
            // The window [10 s, 20 s) is over: idle.
            (25 * S, 0, (1, 3, 3, 0, 0)),
            // A new window opens at the call, not on a grid.
            (25 * S + 300 * MS, 1, (1, 3, 2, 0, 10_000)),
            (34_800 * MS, 2, (1, 3, 0, 0, 500)),
            (35_300 * MS, 1, (1, 3, 2, 0, 10_000)),
        ],
    );
}

#[test]
fn sliding_counter_weighs_the_previous_window() {
    let server = Server::start();
    let mut c = server.conn();
    // Windows of 10 s aligned on the epoch; T0 starts one.
    run_script(
        &mut c,
        "THROTTLE.SLIDING a 10 10s",
        "",
        &[
            (9 * S, 10, (1, 10, 0, 0, 11_000)),
            // At 12 s the previous window weighs 8/10: 8 used, 2 left.
            (12 * S, 0, (1, 10, 2, 0, 8_000)),
            (12 * S, 2, (1, 10, 0, 0, 18_000)),
            // 10 * 7.5/10 + 2 = 9.5: one more fits at 13 s (estimate 9).
            (12_500 * MS, 1, (0, 10, 0, 500, 17_500)),
            (13 * S - 1, 1, (0, 10, 0, 1, 17_001)),
            (13 * S, 1, (1, 10, 0, 0, 17_000)),
            (13 * S, 11, (0, 10, 0, -1, 17_000)),
        ],
    );
    run_script(
        &mut c,
        "THROTTLE.SLIDING b 4 10s",
        "",
        &[
            (0, 4, (1, 4, 0, 0, 20_000)),
            // 4 + 1 > 4 in this window; in the next 4 * (10 - e)/10 <= 3 at e = 2.5 s.
            (S, 1, (0, 4, 0, 11_500, 19_000)),
            (12_500 * MS - 1, 1, (0, 4, 0, 1, 7_501)),
            (12_500 * MS, 1, (1, 4, 0, 0, 17_500)),
            // Next window: the 1 of [10 s, 20 s) weighs fully at its start.
            (20 * S, 0, (1, 4, 3, 0, 10_000)),
            // Two windows on, nothing counts.
            (30 * S, 0, (1, 4, 4, 0, 0)),
            (30 * S, 5, (0, 4, 4, -1, 0)),
        ],
    );
}

/// `FLOOR` counts the previous window's share rounded down, as the Python
/// library limits does: a client keeping exactly to "1 per second" at the
/// same phase is always admitted (the exact estimate refuses every other
/// call). THROTTLE.ALL takes it in a spec too.
#[test]
fn sliding_floor_rounds_the_previous_window_down() {
    let server = Server::start();
    let mut c = server.conn();
    let every_second = |c: &mut redis::Connection, line: &str| -> Vec<i64> {
        (0..6).map(|i| throttle(c, &format!("{line} AT {}", T0 + 100 * MS + i * S)).0).collect()
    };
    assert_eq!(every_second(&mut c, "THROTTLE.SLIDING exact 1 1s"), [1, 0, 1, 0, 1, 0]);
    assert_eq!(every_second(&mut c, "THROTTLE.SLIDING floor 1 1s FLOOR"), [1, 1, 1, 1, 1, 1]);
    run_script(
        &mut c,
        "THROTTLE.SLIDING f 10 10s",
        " FLOOR",
        &[
            (9 * S, 10, (1, 10, 0, 0, 11_000)),
            // At 12.5 s the previous window weighs 7.5: 7 under FLOOR.
            (12_500 * MS, 0, (1, 10, 3, 0, 7_500)),
            (12_500 * MS, 3, (1, 10, 0, 0, 17_500)),
            // One more once floor(10 * (10 - e)/10) <= 6: just after 13 s.
            (12_500 * MS, 1, (0, 10, 0, 501, 17_500)),
            (13 * S, 1, (0, 10, 0, 1, 17_000)),
            (13 * S + 1, 1, (1, 10, 0, 0, 17_000)),
        ],
    );
    let all: Vec<redis::Value> =
        common::command(&format!("THROTTLE.ALL AT {} SLIDING g 1 1s FLOOR", T0 + 1_100 * MS)).query(&mut c).unwrap();
    assert_eq!(all.first(), Some(&redis::Value::Int(1)));
    assert!(error(&mut c, "THROTTLE.SLIDING f 10 10s FLOOR EXACT").contains("FLOOR"));
    assert!(error(&mut c, "THROTTLE.FIXED f 10 10s FLOOR").contains("FLOOR"));
}

#[test]
fn sliding_exact_units_leave_one_period_after_admission() {
    let server = Server::start();
    let mut c = server.conn();
    run_script(
        &mut c,
        "THROTTLE.SLIDING k 3 10s",
        " EXACT",
        &[
            (0, 1, (1, 3, 2, 0, 10_000)),
            (2 * S, 2, (1, 3, 0, 0, 10_000)),
            // Until the unit of 0 s leaves at 10 s; idle when the 2 s entry leaves.
            (5 * S, 1, (0, 3, 0, 5_000, 7_000)),
            (10 * S - 1, 1, (0, 3, 0, 1, 2_001)),
            (10 * S, 1, (1, 3, 0, 0, 10_000)),
            (10 * S, 1, (0, 3, 0, 2_000, 10_000)),
            (12 * S, 2, (1, 3, 0, 0, 10_000)),
            // 3 units must leave: the entries of 10 s (1) and 12 s (2).
            (12 * S, 3, (0, 3, 0, 10_000, 10_000)),
            (12 * S, 4, (0, 3, 0, -1, 10_000)),
            (12 * S, 0, (1, 3, 0, 0, 10_000)),
            // The 10 s unit left at 20 s; the 12 s entry leaves 1 µs later.
            (22 * S - 1, 0, (1, 3, 1, 0, 1)),
            (22 * S, 0, (1, 3, 3, 0, 0)),
        ],
    );
}

#[test]
fn token_bucket_starts_full_and_refills_continuously() {
    let server = Server::start();
    let mut c = server.conn();
    // 10 per 10 s, burst 5: one token a second; `limit` field = burst.
    run_script(
        &mut c,
        "THROTTLE.TOKEN a 10 10s",
        " BURST 5",
        &[
            (0, 0, (1, 5, 5, 0, 0)),
            (0, 5, (1, 5, 0, 0, 5_000)),
            (0, 1, (0, 5, 0, 1_000, 5_000)),
            (500 * MS, 1, (0, 5, 0, 500, 4_500)),
            (S, 1, (1, 5, 0, 0, 5_000)),
            // 2.5 tokens back, 2 taken: 0.5 left, 4.5 s to full.
            (3_500 * MS, 2, (1, 5, 0, 0, 4_500)),
            (3_500 * MS, 6, (0, 5, 0, -1, 4_500)),
            (3_500 * MS, 1, (0, 5, 0, 500, 4_500)),
            (20 * S, 0, (1, 5, 5, 0, 0)),
        ],
    );
    // BURST defaults to limit.
    run_script(
        &mut c,
        "THROTTLE.TOKEN b 2 10s",
        "",
        &[(0, 1, (1, 2, 1, 0, 5_000)), (0, 1, (1, 2, 0, 0, 10_000)), (0, 1, (0, 2, 0, 5_000, 10_000))],
    );
    // A burst above the rate.
    run_script(
        &mut c,
        "THROTTLE.TOKEN c 1 10s",
        " BURST 4",
        &[
            (0, 4, (1, 4, 0, 0, 40_000)),
            (10 * S, 1, (1, 4, 0, 0, 40_000)),
            (10 * S, 1, (0, 4, 0, 10_000, 40_000)),
            (15 * S, 0, (1, 4, 0, 0, 35_000)),
            (20 * S, 0, (1, 4, 1, 0, 30_000)),
        ],
    );
}

#[test]
fn leaky_bucket_admits_with_queue_delay() {
    let server = Server::start();
    let mut c = server.conn();
    // Drains 10 per 10 s (one a second); holds up to 3 units of work.
    run_script(
        &mut c,
        "THROTTLE.LEAKY a 10 10s",
        " BURST 3",
        &[
            (0, 0, (1, 3, 3, 0, 0)),
            (0, 1, (1, 3, 2, 0, 1_000)),
            // Admitted, behind 1 s of queued work.
            (0, 1, (1, 3, 1, 1_000, 2_000)),
            (0, 1, (1, 3, 0, 2_000, 3_000)),
            (0, 1, (0, 3, 0, 1_000, 3_000)),
            (S, 1, (1, 3, 0, 2_000, 3_000)),
            (S, 4, (0, 3, 0, -1, 3_000)),
            (10 * S, 0, (1, 3, 3, 0, 0)),
            (10 * S, 2, (1, 3, 1, 0, 2_000)),
            // 1.5 units still queued ahead.
            (10_500 * MS, 1, (1, 3, 0, 1_500, 2_500)),
        ],
    );
    // BURST defaults to limit.
    run_script(
        &mut c,
        "THROTTLE.LEAKY b 2 10s",
        "",
        &[(0, 1, (1, 2, 1, 0, 5_000)), (0, 1, (1, 2, 0, 5_000, 10_000)), (0, 1, (0, 2, 0, 5_000, 10_000))],
    );
}

// ---------------------------------------------------------------------------
// periods, options

#[test]
fn period_units_and_bare_seconds() {
    let server = Server::start();
    let mut c = server.conn();
    // Spellings of one period, and its length in ms.
    let groups: &[(&[&str], i64)] = &[
        (&["1ms", "1MS", "1Ms"], 1),
        (&["500ms", "500MS"], 500),
        (&["1", "1s", "1S", "1000ms"], 1_000),
        (&["60", "60s", "1m", "1M", "60000ms"], 60_000),
        (&["900", "15m", "15M"], 900_000),
        (&["3600", "60m", "1h", "1H"], 3_600_000),
        (&["86400", "1440m", "24h", "1d", "1D"], 86_400_000),
        (&["315360000", "315360000000ms", "5256000m", "87600h", "3650d"], 315_360_000_000),
    ];
    let mut n = 0;
    for (spellings, ms) in groups {
        for (cmd, extra, _) in KINDS {
            let mut digests = Vec::new();
            for period in *spellings {
                n += 1;
                let key = format!("k{n}");
                let line = format!("{cmd} {key} 1 {period} AT {T0}{extra}");
                // SLIDING's unit weighs through the next window too.
                let reset = if cmd == SLIDING && extra.is_empty() { 2 * ms } else { *ms };
                // sim: a 1 ms key must outlive the checks below.
                assert_eq!(sim(&mut c, &line), (1, 1, 0, 0, reset), "{line}");
                digests.push((line.clone(), digest(&mut c, &key)));
                // Seen from the limited side too: a limit of 1 waits it out.
                assert_eq!(throttle(&mut c, &line), (0, 1, 0, reset, reset), "{line}");
            }
            for (line, d) in &digests {
                assert_eq!(d, &digests[0].1, "{line} stores another state than {}", digests[0].0);
            }
        }
    }
}

#[test]
fn options_are_case_insensitive_in_any_order() {
    let server = Server::start();
    let mut c = server.conn();
    let t = T0 + 3 * S;
    let variants: &[(&str, &[&str])] = &[
        (FIXED, &["COST 2 AT {t}", "AT {t} COST 2", "cost 2 at {t}", "aT {t} CoSt 2"]),
        (SLIDING, &["COST 2 AT {t}", "at {t} Cost 2"]),
        (SLIDING, &["COST 2 AT {t} EXACT", "EXACT AT {t} COST 2", "exact cost 2 at {t}", "AT {t} eXaCt COST 2"]),
        (TOKEN, &["COST 2 AT {t} BURST 7", "BURST 7 AT {t} COST 2", "burst 7 cost 2 at {t}", "AT {t} Burst 7 cOsT 2"]),
        (LEAKY, &["COST 2 AT {t} BURST 7", "at {t} burst 7 cost 2", "BuRsT 7 COST 2 At {t}"]),
    ];
    for (group, (cmd, options)) in variants.iter().enumerate() {
        let mut first: Option<(Reply, String, String)> = None;
        for (i, opts) in options.iter().enumerate() {
            let key = format!("g{group}v{i}");
            let line = format!("{cmd} {key} 5 10s {}", opts.replace("{t}", &t.to_string()));
            let reply = throttle(&mut c, &line);
            assert_eq!(reply.0, 1, "{line}");
            assert_eq!(reply.2, if cmd == &TOKEN || cmd == &LEAKY { 5 } else { 3 }, "{line}: COST 2 taken");
            let (d, ty) = (digest(&mut c, &key), key_type(&mut c, &key));
            match &first {
                None => first = Some((reply, d, ty)),
                Some((r0, d0, ty0)) => {
                    assert_eq!(&reply, r0, "{line}");
                    assert_eq!(&d, d0, "{line}: state differs");
                    assert_eq!(&ty, ty0, "{line}: type differs");
                }
            }
        }
    }
    assert_eq!(key_type(&mut c, "g2v0"), "thr-exact");
    assert_eq!(key_type(&mut c, "g1v0"), "thr-slide");
    // A key may be named like an option.
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED COST 2 10s AT {T0}")), (1, 2, 1, 0, 10_000));
    assert_eq!(key_type(&mut c, "COST"), "thr-fixed");
}

// ---------------------------------------------------------------------------
// COST

#[test]
fn cost_takes_n_units() {
    let server = Server::start();
    let mut c = server.conn();
    let cases: &[(&str, Reply, Reply)] = &[
        // (head, after COST 4, then COST 2 at the same instant)
        ("THROTTLE.FIXED a 5 10s", (1, 5, 1, 0, 10_000), (0, 5, 1, 10_000, 10_000)),
        // 6 > 5 in this window; in the next 4 * (10 - e)/10 <= 3 at e = 2.5 s.
        ("THROTTLE.SLIDING b 5 10s", (1, 5, 1, 0, 20_000), (0, 5, 1, 12_500, 20_000)),
        ("THROTTLE.SLIDING c 5 10s EXACT", (1, 5, 1, 0, 10_000), (0, 5, 1, 10_000, 10_000)),
        ("THROTTLE.TOKEN d 5 10s", (1, 5, 1, 0, 8_000), (0, 5, 1, 2_000, 8_000)),
        ("THROTTLE.LEAKY e 5 10s", (1, 5, 1, 0, 8_000), (0, 5, 1, 2_000, 8_000)),
    ];
    for (head, first, second) in cases {
        assert_eq!(throttle(&mut c, &format!("{head} COST 4 AT {T0}")), *first, "{head}");
        assert_eq!(throttle(&mut c, &format!("{head} COST 2 AT {T0}")), *second, "{head}");
        let last = throttle(&mut c, &format!("{head} COST 1 AT {T0}"));
        assert_eq!((last.0, last.2), (1, 0), "{head}: the last unit");
    }
}

#[test]
fn peek_changes_nothing_and_creates_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    for (i, (cmd, extra, _)) in KINDS.iter().enumerate() {
        let key = format!("k{i}");
        // On a missing key: the idle reply, and still no key.
        let line = format!("{cmd} {key} 4 10s COST 0 AT {T0}{extra}");
        assert_eq!(throttle(&mut c, &line), (1, 4, 4, 0, 0), "{line}");
        assert_eq!(exists(&mut c, &key), 0, "{line} created the key");

        // On an existing key, at the same and at later instants.
        let take = format!("{cmd} {key} 4 10s COST 3 AT {T0}{extra}");
        let taken = throttle(&mut c, &take);
        assert_eq!((taken.0, taken.2), (1, 1), "{take}");
        let before = digest(&mut c, &key);
        let ttl_before = pttl(&mut c, &key);
        for at in [T0, T0 + 2 * S, T0 + 30 * S] {
            let line = format!("{cmd} {key} 4 10s COST 0 AT {at}{extra}");
            let reply = throttle(&mut c, &line);
            assert_eq!(reply.0, 1, "{line}");
            if at == T0 {
                // LEAKY: even a peek reports the queue delay.
                let delay = if *cmd == LEAKY { taken.4 } else { 0 };
                assert_eq!(reply, (1, 4, 1, delay, taken.4), "{line}");
            }
            if at == T0 + 30 * S {
                assert_eq!(reply, (1, 4, 4, 0, 0), "{line}: idle by then");
            }
            assert_eq!(digest(&mut c, &key), before, "{line} changed the key");
        }
        assert!(pttl(&mut c, &key) <= ttl_before, "a peek must not extend the TTL");
        // Time did not move forward either: the same call as before still
        // sees the state at T0.
        let line = format!("{cmd} {key} 4 10s COST 1 AT {T0}{extra}");
        assert_eq!(throttle(&mut c, &line).2, 0, "{line}");
    }
}

#[test]
fn denied_calls_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    for (i, (cmd, extra, _)) in KINDS.iter().enumerate() {
        let key = format!("k{i}");
        let take = format!("{cmd} {key} 2 10s COST 2 AT {T0}{extra}");
        assert_eq!(throttle(&mut c, &take).0, 1, "{take}");
        let before = digest(&mut c, &key);
        let ttl_before = pttl(&mut c, &key);
        for (cost, at) in [(1, T0 + S), (2, T0 + 3 * S), (3, T0 + 4 * S)] {
            let line = format!("{cmd} {key} 2 10s COST {cost} AT {at}{extra}");
            assert_eq!(throttle(&mut c, &line).0, 0, "{line}");
            assert_eq!(digest(&mut c, &key), before, "{line} changed the key");
        }
        assert!(pttl(&mut c, &key) <= ttl_before, "a denied call must not extend the TTL");
    }
}

#[test]
fn cost_above_limit_or_burst_never_fits() {
    let server = Server::start();
    let mut c = server.conn();
    let cases: &[(&str, &str, i64)] = &[
        (FIXED, "", 5),
        (SLIDING, "", 5),
        (SLIDING, " EXACT", 5),
        (TOKEN, "", 5),
        (LEAKY, "", 5),
        // The bound is the burst, not the rate.
        (TOKEN, " BURST 3", 3),
        (LEAKY, " BURST 3", 3),
        (TOKEN, " BURST 8", 8),
        (LEAKY, " BURST 8", 8),
    ];
    for (i, (cmd, extra, cap)) in cases.iter().enumerate() {
        let key = format!("k{i}");
        let over = format!("{cmd} {key} 5 10s COST {} AT {T0}{extra}", cap + 1);
        // Missing key: never, nothing created.
        assert_eq!(throttle(&mut c, &over), (0, *cap, *cap, -1, 0), "{over}");
        assert_eq!(exists(&mut c, &key), 0, "{over}");
        // The whole capacity fits at once.
        let all = format!("{cmd} {key} 5 10s COST {cap} AT {T0}{extra}");
        assert_eq!(throttle(&mut c, &all).0, 1, "{all}");
        let before = digest(&mut c, &key);
        let over_later = format!("{cmd} {key} 5 10s COST {} AT {}{extra}", cap + 1, T0 + 1000 * S);
        let reply = throttle(&mut c, &over_later);
        assert_eq!((reply.0, reply.1, reply.3), (0, *cap, -1), "{over_later}");
        assert_eq!(digest(&mut c, &key), before, "{over_later}");
        let huge = format!("{cmd} {key} 5 10s COST {MAX} AT {T0}{extra}");
        assert_eq!(throttle(&mut c, &huge).3, -1, "{huge}");
    }
}

// ---------------------------------------------------------------------------
// the two properties, on randomized traffic

/// Checks, for every call of a random workload on `head` (`CMD key limit
/// period`) with `tail` options:
/// - limited (retry_after r >= 0): the same call r ms later is admitted,
///   r - 1 ms later it is not; r = -1 only when COST > the `limit` field;
/// - admitted: exactly `remaining` COST 1 calls at the same instant follow;
/// - LEAKY admitted with a queue delay d: after d ms the work ahead has
///   drained (room for this call's COST again), d - 1 ms after it has not.
///
/// The checks run on copies of the key so the workload goes on undisturbed.
fn check_properties(c: &mut redis::Connection, head: &str, tail: &str, period_us: u64, seed: u64) {
    let key = head.split(' ').nth(1).unwrap();
    let copy = format!("{key}:copy");
    let copy_head = head.replacen(key, &copy, 1);
    let leaky = head.starts_with(LEAKY);
    let mut rng = Rng(seed);
    let mut t = T0 + rng.below(period_us);
    let (mut admitted, mut limited) = (0, 0);
    for step in 0..150 {
        t += match rng.below(8) {
            0 => 0,
            1 => rng.below(1_000),
            2 => rng.below(period_us / 20 + 1),
            3 | 4 => rng.below(period_us / 4 + 1),
            5 => rng.below(period_us + 1),
            6 => period_us,
            _ => rng.below(2 * period_us + 1),
        };
        let probe =
            |c: &mut redis::Connection, cost: i64, at: u64| sim(c, &format!("{copy_head} COST {cost} AT {at}{tail}"));
        let fresh_copy = |c: &mut redis::Connection| {
            let _: i64 = call(c, &format!("DEL {copy}")).unwrap();
            let _: i64 = call(c, &format!("COPY {key} {copy}")).unwrap();
        };
        let cost = match rng.below(10) {
            0 => 0,
            1..=5 => 1,
            6 | 7 => 2,
            _ => 1 + rng.below(6) as i64,
        };
        let line = format!("{head} COST {cost} AT {t}{tail}");
        let reply = sim(c, &line);
        let ctx = format!("step {step}: {line} -> {reply:?}");
        let (allowed, cap, remaining, retry, reset) = reply;
        assert!(remaining >= 0 && reset >= 0 && remaining <= cap, "{ctx}");
        if allowed == 1 {
            admitted += 1;
            if !leaky {
                assert_eq!(retry, 0, "{ctx}");
            }
            fresh_copy(c);
            for i in 0..remaining {
                assert_eq!(probe(c, 1, t).0, 1, "{ctx}: further call {i} of {remaining}");
            }
            assert_eq!(probe(c, 1, t).0, 0, "{ctx}: more than `remaining` further calls admitted");
            if leaky && retry > 0 && cost > 0 {
                let room = cap - cost;
                let peek = |c: &mut redis::Connection, at: u64| sim(c, &format!("{head} COST 0 AT {at}{tail}")).2;
                let due = t + retry as u64 * MS;
                assert!(peek(c, due) >= room, "{ctx}: queue not drained after retry_after");
                assert!(peek(c, due - MS) < room, "{ctx}: queue drained 1 ms before retry_after");
            }
        } else {
            limited += 1;
            if retry == -1 {
                assert!(cost > cap, "{ctx}: -1 although COST fits the capacity");
                continue;
            }
            assert!(retry >= 1 && cost <= cap, "{ctx}");
            fresh_copy(c);
            let due = t + retry as u64 * MS;
            assert_eq!(probe(c, cost, due - MS).0, 0, "{ctx}: admitted 1 ms before retry_after");
            assert_eq!(probe(c, cost, due).0, 1, "{ctx}: not admitted after retry_after");
        }
    }
    assert!(
        admitted > 20 && limited > 10,
        "{head}: a workload that tests little ({admitted} admitted, {limited} limited)"
    );
}

#[test]
fn retry_after_and_remaining_are_exact() {
    let server = Server::start();
    let mut c = server.conn();
    let cases: &[(&str, &str, u64)] = &[
        ("THROTTLE.FIXED f1 5 10s", "", 10 * S),
        ("THROTTLE.FIXED f2 3 1500ms", "", 1_500 * MS),
        ("THROTTLE.SLIDING s1 5 10s", "", 10 * S),
        ("THROTTLE.SLIDING s2 4 7", "", 7 * S),
        ("THROTTLE.SLIDING s3 9 333ms", "", 333 * MS),
        ("THROTTLE.SLIDING e1 7 1m", " EXACT", 60 * S),
        ("THROTTLE.SLIDING e2 3 2s", " EXACT", 2 * S),
        ("THROTTLE.TOKEN t1 3 10s", " BURST 6", 10 * S),
        ("THROTTLE.TOKEN t2 7 3s", "", 3 * S),
        ("THROTTLE.TOKEN t3 3 7ms", " BURST 2", 7 * MS),
        ("THROTTLE.LEAKY l1 3 10s", " BURST 5", 10 * S),
        ("THROTTLE.LEAKY l2 5 7s", " BURST 2", 7 * S),
        ("THROTTLE.LEAKY l3 6 1m", "", 60 * S),
    ];
    for (i, (head, tail, period)) in cases.iter().enumerate() {
        check_properties(&mut c, head, tail, *period, 0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
    }
}

// ---------------------------------------------------------------------------
// the seed's boundary case

#[test]
fn fixed_admits_a_double_burst_at_the_window_edge_and_exact_does_not() {
    let server = Server::start();
    let mut c = server.conn();
    // One call opens a window at T0; 19 come late in it (0.62 s to 0.98 s),
    // then 20 at the start of the next (1.00 s to 1.19 s).
    let mut traffic = vec![T0];
    traffic.extend((0..19).map(|i| T0 + 620 * MS + i * 20 * MS));
    traffic.extend((0..20).map(|i| T0 + S + i * 10 * MS));
    let admitted = |c: &mut redis::Connection, head: &str, tail: &str| -> Vec<u64> {
        traffic.iter().copied().filter(|t| sim(c, &format!("{head} AT {t}{tail}")).0 == 1).collect()
    };
    let most_in_a_period = |times: &[u64]| -> usize {
        times.iter().map(|&start| times.iter().filter(|&&t| t >= start && t < start + S).count()).max().unwrap_or(0)
    };

    // FIXED (Laravel): all 40, 39 of them within 0.57 s.
    let fixed = admitted(&mut c, "THROTTLE.FIXED f 20 1s", "");
    assert_eq!(fixed.len(), 40);
    let late_and_edge: Vec<u64> = fixed.iter().copied().filter(|&t| t >= T0 + 620 * MS).collect();
    assert_eq!(late_and_edge.len(), 39);
    assert!(late_and_edge.last().unwrap() - late_and_edge[0] < 600 * MS);
    assert_eq!(most_in_a_period(&fixed), 39);

    // SLIDING EXACT: never more than 20 in any interval of 1 s.
    let exact = admitted(&mut c, "THROTTLE.SLIDING e 20 1s", " EXACT");
    assert!(most_in_a_period(&exact) <= 20, "EXACT admitted {} within 1 s", most_in_a_period(&exact));
    // Exactly the first 20, then one more when the call of T0 leaves at T0 + 1 s.
    assert_eq!(exact, traffic[..21].to_vec());

    // The same on a denser, longer stream: 20 per 1 s, asked 100 per 1 s.
    let stream: Vec<u64> = (0..300).map(|i| T0 + 10 * S + i * 10 * MS + (i * 7919) % 9_000).collect();
    let exact: Vec<u64> = stream
        .iter()
        .copied()
        .filter(|t| sim(&mut c, &format!("THROTTLE.SLIDING e2 20 1s AT {t} EXACT")).0 == 1)
        .collect();
    assert!(most_in_a_period(&exact) <= 20);
    assert!(exact.len() >= 60, "admits as much as the limit allows: {}", exact.len());
}

// ---------------------------------------------------------------------------
// keys: TYPE, TTL

#[test]
fn type_names_each_algorithm() {
    let server = Server::start();
    let mut c = server.conn();
    for (i, (cmd, extra, name)) in KINDS.iter().enumerate() {
        let key = format!("k{i}");
        throttle(&mut c, &format!("{cmd} {key} 5 1h{extra}"));
        assert_eq!(key_type(&mut c, &key), *name, "{cmd}{extra}");
    }
}

#[test]
fn ttl_equals_reset_after() {
    let server = Server::start();
    let mut c = server.conn();
    for (i, (cmd, extra, _)) in KINDS.iter().enumerate() {
        let key = format!("k{i}");
        let head = format!("{cmd} {key} 3 1h");
        let steps: &[(i64, bool)] = &[(1, true), (0, true), (1, true), (3, false), (1, true), (1, false), (0, true)];
        // Taken before the AT of the last call that set the TTL is read.
        let mut ttl_set = Instant::now();
        for &(cost, allowed) in steps {
            let called = Instant::now();
            let line = format!("{head} COST {cost} AT {}{extra}", now_us());
            let reply = throttle(&mut c, &line);
            assert_eq!(reply.0, i64::from(allowed), "{line}");
            assert!(reply.4 > 0, "{line}: {reply:?}");
            if allowed && cost > 0 {
                ttl_set = called;
                assert_ttl_is_reset(&mut c, &key, reply.4, called, &line);
            } else {
                // The TTL was set by an earlier call, relative to when the
                // server ran it; this reply is relative to this call's AT,
                // read on the client. They differ by no more than the time
                // since that earlier call, as measured here.
                let ttl = pttl(&mut c, &key);
                let since = ms_since(ttl_set) + 1;
                assert!(
                    (ttl - reply.4).abs() <= since,
                    "{line}: PTTL {ttl} should equal reset_after {} ({since} ms after the TTL was set)",
                    reply.4
                );
            }
        }
        // Calls without AT use the server's clock: the same holds.
        let line = format!("{head} COST 0{extra}");
        let reply = throttle(&mut c, &line);
        let ttl = pttl(&mut c, &key);
        let since = ms_since(ttl_set) + 1;
        assert!(
            (ttl - reply.4).abs() <= since,
            "{line}: PTTL {ttl} should equal reset_after {} ({since} ms after the TTL was set)",
            reply.4
        );
    }
    // Without AT the server's clock is the time: a fresh FIXED window is a
    // full period, and a second call sees the same window, less the time
    // since it opened, as measured here.
    let opened = Instant::now();
    let fresh = throttle(&mut c, "THROTTLE.FIXED clock 2 1h");
    assert_eq!(fresh, (1, 2, 1, 0, 3_600_000));
    let second = throttle(&mut c, &format!("THROTTLE.FIXED clock 2 1h AT {}", now_us()));
    assert_eq!((second.0, second.2), (1, 0));
    assert!((3_600_000 - ms_since(opened) - 1..=3_600_000).contains(&second.4), "{second:?}");
}

// ---------------------------------------------------------------------------
// time never runs backwards

#[test]
fn a_call_earlier_than_the_last_change_counts_at_that_change() {
    let server = Server::start();
    let mut c = server.conn();
    // FIXED: a call before the window counts at its start; one inside it
    // counts at its own time.
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED f 3 10s AT {}", T0 + 5 * S)), (1, 3, 2, 0, 10_000));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED f 3 10s AT {T0}")), (1, 3, 1, 0, 10_000));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED f 3 10s AT {}", T0 + 9 * S)), (1, 3, 0, 0, 6_000));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED f 3 10s AT {}", T0 + 6 * S)), (0, 3, 0, 9_000, 9_000));
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED f 3 10s AT 0"), (0, 3, 0, 10_000, 10_000));
    // TOKEN: no negative refill from an earlier call.
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN t 1 10s AT {}", T0 + 10 * S)), (1, 1, 0, 0, 10_000));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN t 1 10s AT {}", T0 + 4 * S)), (0, 1, 0, 10_000, 10_000));

    // Every algorithm: a twin key driven at the time the call counts at
    // gives the same replies and ends in the same state. That is the last
    // change, except for the windows, which keep none: FIXED's window
    // opened at the last change here, and SLIDING counts a call inside its
    // window at its own time and one before it at the window's start.
    for (i, (cmd, extra, _)) in KINDS.iter().enumerate() {
        let t1 = T0 + 7 * S + 123;
        let counts_at = |at: u64| if (*cmd, *extra) == (SLIDING, "") { at.max(T0) } else { t1 };
        let pairs: &[(i64, u64)] = &[(1, 0), (1, 3 * S), (1, 7 * S), (2, 4 * S), (0, 5 * S), (1, 9 * S), (3, t1 - T0)];
        let (a, b) = (format!("a{i}"), format!("b{i}"));
        throttle(&mut c, &format!("{cmd} {a} 3 10s COST 1 AT {t1}{extra}"));
        throttle(&mut c, &format!("{cmd} {b} 3 10s COST 1 AT {t1}{extra}"));
        for &(cost, back) in pairs {
            let ra = throttle(&mut c, &format!("{cmd} {a} 3 10s COST {cost} AT {}{extra}", counts_at(t1 - back)));
            let line = format!("{cmd} {b} 3 10s COST {cost} AT {}{extra}", t1 - back);
            let rb = throttle(&mut c, &line);
            assert_eq!(rb, ra, "{line}: an earlier call must count at {}", counts_at(t1 - back));
            assert_eq!(digest(&mut c, &b), digest(&mut c, &a), "{line}");
        }
    }
}

// ---------------------------------------------------------------------------
// parameter changes between calls

#[test]
fn changed_parameters_carry_the_state_over() {
    let server = Server::start();
    let mut c = server.conn();
    let at = |dt: u64| T0 + dt;
    // TOKEN keeps its tokens, clamped to a smaller burst.
    assert_eq!(
        throttle(&mut c, &format!("THROTTLE.TOKEN t 10 10s BURST 10 COST 2 AT {}", at(0))),
        (1, 10, 8, 0, 2_000)
    );
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN t 10 10s BURST 5 COST 0 AT {}", at(0))), (1, 5, 5, 0, 0));
    // The same rate written per minute: the 8 tokens stay 8 (the peek
    // above changed nothing).
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN t 60 1m BURST 10 COST 0 AT {}", at(0))), (1, 10, 8, 0, 2_000));
    // A change that takes units stores the clamped bucket: 5 - 1 = 4
    // tokens, and a larger burst later does not give the clamped ones back.
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN t 10 10s BURST 5 COST 1 AT {}", at(0))), (1, 5, 4, 0, 1_000));
    assert_eq!(
        throttle(&mut c, &format!("THROTTLE.TOKEN t 10 10s BURST 10 COST 0 AT {}", at(0))),
        (1, 10, 4, 0, 6_000)
    );

    // LEAKY keeps its queued work, clamped to a smaller burst.
    assert_eq!(
        throttle(&mut c, &format!("THROTTLE.LEAKY l 10 10s BURST 10 COST 8 AT {}", at(0))),
        (1, 10, 2, 0, 8_000)
    );
    assert_eq!(
        throttle(&mut c, &format!("THROTTLE.LEAKY l 10 10s BURST 5 COST 0 AT {}", at(0))),
        (1, 5, 0, 5_000, 5_000)
    );
    assert_eq!(
        throttle(&mut c, &format!("THROTTLE.LEAKY l 60 1m BURST 10 COST 0 AT {}", at(0))),
        (1, 10, 2, 8_000, 8_000)
    );
    // A faster leak drains the same work sooner.
    assert_eq!(
        throttle(&mut c, &format!("THROTTLE.LEAKY l 20 10s BURST 10 COST 0 AT {}", at(0))),
        (1, 10, 2, 4_000, 4_000)
    );

    // FIXED: a lower limit with more already used leaves nothing.
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED f 10 10s COST 8 AT {}", at(0))), (1, 10, 2, 0, 10_000));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED f 5 10s COST 1 AT {}", at(1))), (0, 5, 0, 10_000, 10_000));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED f 12 10s COST 1 AT {}", at(1))), (1, 12, 3, 0, 10_000));

    // SLIDING: a new period carries the old estimate as the current count.
    assert_eq!(throttle(&mut c, &format!("THROTTLE.SLIDING s 10 10s COST 6 AT {}", at(0))), (1, 10, 4, 0, 20_000));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.SLIDING s 10 20s COST 0 AT {}", at(5 * S))).2, 4);
    assert_eq!(throttle(&mut c, &format!("THROTTLE.SLIDING s 8 10s COST 0 AT {}", at(5 * S))).2, 2);

    // SLIDING EXACT: the log counts against the new limit.
    assert_eq!(throttle(&mut c, &format!("THROTTLE.SLIDING e 5 10s COST 3 AT {} EXACT", at(0))), (1, 5, 2, 0, 10_000));
    assert_eq!(
        throttle(&mut c, &format!("THROTTLE.SLIDING e 3 10s COST 1 AT {} EXACT", at(1))),
        (0, 3, 0, 10_000, 10_000)
    );
    assert_eq!(throttle(&mut c, &format!("THROTTLE.SLIDING e 4 10s COST 1 AT {} EXACT", at(1))), (1, 4, 0, 0, 10_000));
}

// ---------------------------------------------------------------------------
// bounds

#[test]
fn numbers_at_their_bounds() {
    let server = Server::start();
    let mut c = server.conn();
    let m = MAX as i64;
    let ok: &[(&str, Reply)] = &[
        // limit 10^15
        (&format!("THROTTLE.FIXED a {MAX} 1 AT {T0}"), (1, m, m - 1, 0, 1_000)),
        (&format!("THROTTLE.SLIDING b {MAX} 1 AT {T0}"), (1, m, m - 1, 0, 2_000)),
        (&format!("THROTTLE.SLIDING c {MAX} 1 AT {T0} EXACT"), (1, m, m - 1, 0, 1_000)),
        (&format!("THROTTLE.TOKEN d {MAX} 1 AT {T0}"), (1, m, m - 1, 0, 1)),
        (&format!("THROTTLE.LEAKY e {MAX} 1 AT {T0}"), (1, m, m - 1, 0, 1)),
        // COST 10^15
        (&format!("THROTTLE.FIXED f {MAX} 1 COST {MAX} AT {T0}"), (1, m, 0, 0, 1_000)),
        (&format!("THROTTLE.SLIDING g {MAX} 1 COST {MAX} AT {T0} EXACT"), (1, m, 0, 0, 1_000)),
        (&format!("THROTTLE.FIXED h 1 1 COST {MAX} AT {T0}"), (0, 1, 1, -1, 0)),
        // AT from 0 to 10^16
        ("THROTTLE.FIXED i 1 1 AT 0", (1, 1, 0, 0, 1_000)),
        ("THROTTLE.FIXED j 1 1 AT 10000000000000000", (1, 1, 0, 0, 1_000)),
        (
            "THROTTLE.SLIDING k 1 3650d AT 10000000000000000",
            (1, 1, 0, 0, 2 * 315_360_000_000 - 10_000_000_000_000 % 315_360_000_000),
        ),
        // period from 1 ms to 3650 days
        (&format!("THROTTLE.FIXED l 1 1ms AT {T0}"), (1, 1, 0, 0, 1)),
        (&format!("THROTTLE.FIXED m 1 3650d AT {T0}"), (1, 1, 0, 0, 315_360_000_000)),
        // BURST 10^15, and the slowest refill allowed (exactly 3650 days).
        (&format!("THROTTLE.TOKEN n {MAX} 1 BURST {MAX} COST {MAX} AT {T0}"), (1, m, 0, 0, 1_000)),
        (
            &format!("THROTTLE.TOKEN o 1 1 BURST 315360000 COST 315360000 AT {T0}"),
            (1, 315_360_000, 0, 0, 315_360_000_000),
        ),
        (
            &format!("THROTTLE.LEAKY p 1 1ms BURST 315360000000 COST 315360000000 AT {T0}"),
            (1, 315_360_000_000, 0, 0, 315_360_000_000),
        ),
        // Nothing overflows at the extremes together.
        (
            &format!("THROTTLE.TOKEN q {MAX} 3650d BURST {MAX} COST {MAX} AT 10000000000000000"),
            (1, m, 0, 0, 315_360_000_000),
        ),
        (
            &format!("THROTTLE.LEAKY r {MAX} 3650d BURST {MAX} COST {MAX} AT 10000000000000000"),
            (1, m, 0, 0, 315_360_000_000),
        ),
        (
            &format!("THROTTLE.SLIDING s {MAX} 3650d COST {MAX} AT 10000000000000000"),
            (1, m, 0, 0, 2 * 315_360_000_000 - 10_000_000_000_000 % 315_360_000_000),
        ),
    ];
    for (line, want) in ok {
        assert_eq!(throttle(&mut c, line), *want, "{line}");
    }
    // One more of each is refused, naming the argument.
    let refused: &[(&str, &str)] = &[
        ("THROTTLE.FIXED x 1000000000000001 1", "limit"),
        ("THROTTLE.SLIDING x 1000000000000001 1 EXACT", "limit"),
        ("THROTTLE.TOKEN x 1000000000000001 1", "limit"),
        ("THROTTLE.FIXED x 1 1 COST 1000000000000001", "COST"),
        ("THROTTLE.LEAKY x 1 1 COST 1000000000000001", "COST"),
        ("THROTTLE.FIXED x 1 1 AT 10000000000000001", "AT"),
        ("THROTTLE.TOKEN x 1 1 AT 10000000000000001", "AT"),
        ("THROTTLE.FIXED x 1 3651d", "period"),
        ("THROTTLE.FIXED x 1 315360001", "period"),
        ("THROTTLE.SLIDING x 1 87601h", "period"),
        ("THROTTLE.TOKEN x 1 5256001m", "period"),
        ("THROTTLE.LEAKY x 1 315360000001ms", "period"),
        ("THROTTLE.FIXED x 1 0", "period"),
        ("THROTTLE.FIXED x 1 0ms", "period"),
        ("THROTTLE.FIXED x 1 0s", "period"),
        ("THROTTLE.TOKEN x 1 1 BURST 1000000000000001", "BURST"),
        ("THROTTLE.LEAKY x 1 1 BURST 0", "BURST"),
        // A burst refilled too slowly to fit 3650 days.
        ("THROTTLE.TOKEN x 1 1 BURST 315360001", "BURST"),
        ("THROTTLE.LEAKY x 1 1ms BURST 315360000001", "BURST"),
        ("THROTTLE.TOKEN x 1 3650d BURST 2", "BURST"),
    ];
    for (line, arg) in refused {
        let e = error(&mut c, line);
        assert!(e.starts_with("ERR ") && names(&e, arg), "{line}: {e:?} should name {arg}");
    }
    assert_eq!(exists(&mut c, "x"), 0);
}

// ---------------------------------------------------------------------------
// errors

#[test]
fn wrong_argument_count() {
    let server = Server::start();
    let mut c = server.conn();
    for cmd in [FIXED, SLIDING, TOKEN, LEAKY] {
        for line in [cmd.to_string(), format!("{cmd} k"), format!("{cmd} k 1")] {
            let e = error(&mut c, &line);
            assert!(e.starts_with("ERR wrong number of arguments"), "{line}: {e}");
        }
    }
}

#[test]
fn each_bad_argument_is_named() {
    let server = Server::start();
    let mut c = server.conn();
    // (line after the key, what the error must name)
    let all: &[(&str, &str)] = &[
        ("0 1", "limit"),
        ("x 1", "limit"),
        ("-1 1", "limit"),
        ("+1 1", "limit"),
        ("1.5 1", "limit"),
        ("1e3 1", "limit"),
        ("18446744073709551616 1", "limit"),
        ("1 x", "period"),
        ("1 -1", "period"),
        ("1 +1", "period"),
        ("1 1.5s", "period"),
        ("1 1sec", "period"),
        ("1 1us", "period"),
        ("1 ms", "period"),
        ("1 s1", "period"),
        ("1 1h30m", "period"),
        ("1 0x10", "period"),
        ("1 99999999999999999999d", "period"),
        ("1 1 COST x", "COST"),
        ("1 1 COST 1.5", "COST"),
        ("1 1 COST --1", "COST"),
        ("1 1 COST 1x", "COST"),
        ("1 1 COST AT 5", "COST"),
        ("1 1 AT x", "AT"),
        ("1 1 AT -1", "AT"),
        ("1 1 AT 1.5", "AT"),
        ("1 1 AT 99999999999999999999", "AT"),
        ("1 1 NOPE", "NOPE"),
        ("1 1 COST 1 whatever", "whatever"),
        ("1 1 1", "1"),
        ("1 1 COST 1 COST 1", "COST"),
        ("1 1 AT 1 at 1", "AT"),
        ("1 1 cost 1 AT 1 Cost 2", "COST"),
        ("1 1 COST", "COST"),
        ("1 1 AT", "AT"),
        ("1 1 AT 5 COST", "COST"),
    ];
    let buckets: &[(&str, &str)] = &[
        ("1 1 BURST x", "BURST"),
        ("1 1 BURST 0", "BURST"),
        ("1 1 BURST -1", "BURST"),
        ("1 1 BURST 1 BURST 1", "BURST"),
        ("1 1 BURST", "BURST"),
        ("1 1 EXACT", "EXACT"),
        ("1 1 exact", "EXACT"),
    ];
    let windows: &[(&str, &str)] = &[("1 1 BURST 5", "BURST"), ("1 1 burst 1", "BURST")];
    let sliding: &[(&str, &str)] = &[("1 1 EXACT EXACT", "EXACT"), ("1 1 exact COST 1 Exact", "EXACT")];
    let fixed: &[(&str, &str)] = &[("1 1 EXACT", "EXACT")];
    let mut cases: Vec<(String, &str)> = Vec::new();
    for cmd in [FIXED, SLIDING, TOKEN, LEAKY] {
        let own: &[&[(&str, &str)]] = match cmd {
            FIXED => &[all, windows, fixed],
            SLIDING => &[all, windows, sliding],
            _ => &[all, buckets],
        };
        for (rest, arg) in own.iter().flat_map(|t| t.iter()) {
            cases.push((format!("{cmd} k {rest}"), arg));
        }
        cases.push((format!("{cmd} k 1 1 EXACT NOPE"), if cmd == SLIDING { "NOPE" } else { "EXACT" }));
    }
    for (line, arg) in &cases {
        let e = error(&mut c, line);
        assert!(e.starts_with("ERR "), "{line}: {e}");
        assert!(names(&e, arg), "{line}: {e:?} should name {arg}");
    }
    // BURST and EXACT where they do not belong say which command refuses them.
    for (line, cmd) in [
        ("THROTTLE.FIXED k 1 1 BURST 5", FIXED),
        ("THROTTLE.SLIDING k 1 1 BURST 5", SLIDING),
        ("THROTTLE.TOKEN k 1 1 EXACT", TOKEN),
        ("THROTTLE.LEAKY k 1 1 EXACT", LEAKY),
    ] {
        let e = error(&mut c, line);
        assert!(e.to_uppercase().contains(cmd), "{line}: {e}");
    }
    // The too-slow burst is a BURST error of its own.
    let slow = error(&mut c, "THROTTLE.TOKEN k 1 3650d BURST 2");
    let plain = error(&mut c, "THROTTLE.TOKEN k 1 1 BURST 0");
    assert!(names(&slow, "BURST") && slow != plain, "{slow} / {plain}");
    // Errors are exact texts for the simple cases.
    assert_eq!(error(&mut c, "THROTTLE.FIXED k 1 1 NOPE"), "ERR unknown option 'NOPE'");
    assert_eq!(error(&mut c, "THROTTLE.FIXED k 1 1 COST"), "ERR option COST needs a value");
    assert_eq!(error(&mut c, "THROTTLE.FIXED k 1 1 AT 1 AT 1"), "ERR option AT given more than once");
    assert_eq!(error(&mut c, "THROTTLE.FIXED k 1 1 BURST 1"), "ERR option BURST is not valid for THROTTLE.FIXED");
    assert_eq!(error(&mut c, "THROTTLE.LEAKY k 1 1 EXACT"), "ERR option EXACT is not valid for THROTTLE.LEAKY");
    // An empty argument.
    let e = redis::cmd("THROTTLE.FIXED").arg("k").arg("").arg("1").query::<redis::Value>(&mut c).unwrap_err();
    assert!(names(e.detail().unwrap_or(""), "limit"), "{e}");
    let e = redis::cmd("THROTTLE.FIXED").arg("k").arg("1").arg("").query::<redis::Value>(&mut c).unwrap_err();
    assert!(names(e.detail().unwrap_or(""), "period"), "{e}");
    assert_eq!(exists(&mut c, "k"), 0, "an erroring call created its key");
}

#[test]
fn erroring_calls_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    for (i, (cmd, extra, name)) in KINDS.iter().enumerate() {
        let key = format!("k{i}");
        let take = format!("{cmd} {key} 3 10s COST 2 AT {T0}{extra}");
        assert_eq!(throttle(&mut c, &take).0, 1, "{take}");
        let before = digest(&mut c, &key);
        let ttl = pttl(&mut c, &key);
        let bad = [
            format!("{cmd} {key} 0 10s AT {T0}{extra}"),
            format!("{cmd} {key} 3 0 AT {T0}{extra}"),
            format!("{cmd} {key} 3 10s COST x AT {T0}{extra}"),
            format!("{cmd} {key} 3 10s COST 1 AT x{extra}"),
            format!("{cmd} {key} 3 10s COST 1 AT {}{extra} NOPE", T0 + 20 * S),
            format!("{cmd} {key} 3 10s COST 1 COST 1 AT {}{extra}", T0 + 20 * S),
            format!("{cmd} {key} 3 10s AT {}{extra} COST", T0 + 20 * S),
            format!("{cmd} {key} 3 10s AT {}{extra} BURST 0", T0 + 20 * S),
            format!("{cmd} {key} 3 3650d AT {}{extra} BURST 4", T0 + 20 * S),
            format!("{cmd} {key} 3 10s AT {}{extra} EXACT EXACT", T0 + 20 * S),
            format!("{cmd} {key}"),
        ];
        for line in &bad {
            error(&mut c, line);
            assert_eq!(digest(&mut c, &key), before, "{line} changed the key");
        }
        assert_eq!(key_type(&mut c, &key), *name);
        assert!(pttl(&mut c, &key) <= ttl, "an erroring call extended the TTL");
    }
}

#[test]
fn wrongtype_for_any_other_type() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = call(&mut c, "SET str x").unwrap();
    let _: i64 = call(&mut c, "LPUSH list x").unwrap();
    let _: i64 = call(&mut c, "HSET hash f v").unwrap();
    for (i, (cmd, extra, _)) in KINDS.iter().enumerate() {
        throttle(&mut c, &format!("{cmd} k{i} 3 1h COST 1 AT {T0}{extra}"));
    }
    let mut digests: Vec<String> = (0..KINDS.len()).map(|i| digest(&mut c, &format!("k{i}"))).collect();
    digests.extend(["str", "list", "hash"].map(|k| digest(&mut c, k)));
    let keys: Vec<String> =
        (0..KINDS.len()).map(|i| format!("k{i}")).chain(["str", "list", "hash"].map(String::from)).collect();
    for (cmd, extra, name) in KINDS {
        for (j, key) in keys.iter().enumerate() {
            if j < KINDS.len() && KINDS[j].2 == name {
                continue;
            }
            for cost in [0, 1, 9] {
                let line = format!("{cmd} {key} 3 1h COST {cost} AT {}{extra}", T0 + S);
                let e = error(&mut c, &line);
                assert!(e.starts_with("WRONGTYPE"), "{line}: {e}");
            }
        }
    }
    for (key, d) in keys.iter().zip(&digests) {
        assert_eq!(&digest(&mut c, key), d, "{key} changed");
    }
    let v: String = call(&mut c, "GET str").unwrap();
    assert_eq!(v, "x");
    // SLIDING and SLIDING EXACT are distinct types for one key.
    assert!(error(&mut c, &format!("THROTTLE.SLIDING k1 3 1h AT {T0} EXACT")).starts_with("WRONGTYPE"));
    assert!(error(&mut c, &format!("THROTTLE.SLIDING k2 3 1h AT {T0}")).starts_with("WRONGTYPE"));
    assert_eq!(key_type(&mut c, "k1"), "thr-slide");
    assert_eq!(key_type(&mut c, "k2"), "thr-exact");
}

// ---------------------------------------------------------------------------
// nothing propagated when nothing changed

#[test]
fn only_changes_reach_the_aof() {
    let server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.conn();
    let aof_size = |c: &mut redis::Connection| -> u64 {
        let info: String = call(c, "INFO persistence").unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("aof_current_size:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("aof_current_size")
    };
    for (i, (cmd, extra, _)) in KINDS.iter().enumerate() {
        let key = format!("k{i}");
        let missing = format!("m{i}");
        let size = aof_size(&mut c);
        throttle(&mut c, &format!("{cmd} {key} 2 1h COST 2 AT {T0}{extra}"));
        let grown = aof_size(&mut c);
        assert!(grown > size, "{cmd}{extra}: an admitted call must be propagated");
        let quiet = [
            format!("{cmd} {key} 2 1h COST 0 AT {T0}{extra}"),
            format!("{cmd} {key} 2 1h COST 1 AT {T0}{extra}"),
            format!("{cmd} {key} 2 1h COST 3 AT {T0}{extra}"),
            format!("{cmd} {missing} 2 1h COST 0 AT {T0}{extra}"),
            format!("{cmd} {missing} 2 1h COST 3 AT {T0}{extra}"),
        ];
        for line in &quiet {
            throttle(&mut c, line);
            assert_eq!(aof_size(&mut c), grown, "{line} was propagated");
        }
        error(&mut c, &format!("{cmd} {key} 2 1h COST x AT {T0}{extra}"));
        assert_eq!(aof_size(&mut c), grown, "an erroring call was propagated");
    }
}

// ---------------------------------------------------------------------------
// no input crashes the server

#[test]
fn random_arguments_get_a_reply_or_an_error() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = call(&mut c, "SET plain x").unwrap();
    let pool: &[&[u8]] = &[
        b"0",
        b"1",
        b"2",
        b"7",
        b"-1",
        b"-0",
        b"+1",
        b"1.5",
        b"10s",
        b"1ms",
        b"500MS",
        b"1m",
        b"24h",
        b"3650d",
        b"3651d",
        b"0ms",
        b"1000000000000000",
        b"1000000000000001",
        b"-1000000000000000",
        b"10000000000000000",
        b"10000000000000001",
        b"18446744073709551615",
        b"18446744073709551616",
        b"99999999999999999999d",
        b"9223372036854775808",
        b"COST",
        b"cost",
        b"AT",
        b"at",
        b"BURST",
        b"burst",
        b"EXACT",
        b"exact",
        b"NOPE",
        b"",
        b" ",
        b"\x00",
        b"\xff\xfe",
        b"1\x00",
        b"ms",
        b"d",
    ];
    let commands = [FIXED, SLIDING, TOKEN, LEAKY];
    let keys = ["k1", "k2", "k3", "plain"];
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let mut at = T0;
    for i in 0..3000 {
        let mut cmd = redis::cmd(commands[rng.below(4) as usize]);
        cmd.arg(keys[rng.below(4) as usize]);
        // Mostly well-formed heads, so the options get exercised too.
        if rng.below(4) > 0 {
            cmd.arg(1 + rng.below(5)).arg(["1s", "10s", "1m", "7ms"][rng.below(4) as usize]);
            if rng.below(2) == 0 {
                at += rng.below(2 * S);
                cmd.arg("AT").arg(at);
            }
        }
        let mut shown = format!("{i}:");
        for _ in 0..rng.below(6) {
            let token = pool[rng.below(pool.len() as u64) as usize];
            shown.push_str(&format!(" {}", String::from_utf8_lossy(token)));
            cmd.arg(token);
        }
        match cmd.query::<redis::Value>(&mut c) {
            Ok(redis::Value::Array(v)) => {
                let n: Vec<i64> = v.iter().map(|x| redis::from_redis_value_ref(x).unwrap()).collect();
                assert_eq!(n.len(), 5, "{shown}: {n:?}");
                let (allowed, cap, remaining, retry, reset) = (n[0], n[1], n[2], n[3], n[4]);
                assert!(allowed == 0 || allowed == 1, "{shown}: {n:?}");
                assert!((0..=cap).contains(&remaining) && retry >= -1 && reset >= 0, "{shown}: {n:?}");
            }
            Ok(other) => panic!("{shown}: unexpected reply {other:?}"),
            Err(e) => {
                let code = e.code().unwrap_or("");
                assert!(code == "ERR" || code == "WRONGTYPE", "{shown}: {e}");
            }
        }
    }
    let pong: String = call(&mut c, "PING").unwrap();
    assert_eq!(pong, "PONG");
    let v: String = call(&mut c, "GET plain").unwrap();
    assert_eq!(v, "x", "another key was corrupted");
}
