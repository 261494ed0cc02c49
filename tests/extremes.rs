//! Extreme parameters against a live server: limit, BURST and COST at
//! 10^15, periods of 3650 days and 1 ms, AT at 0 and at 10^16 and going
//! backwards. Every reply is the exact one the arithmetic of docs/commands.md gives
//! (no overflow, no saturation); one past each bound is the documented
//! error and creates nothing; the extreme states survive DEBUG RELOAD.

mod common;

use common::{call, digest, error, throttle, Reply, Server};

const MAX: u64 = 1_000_000_000_000_000;
/// 3650 days in ms and in µs.
const P_MS: i64 = 315_360_000_000;
const P_US: u64 = 315_360_000_000_000;
const MAX_AT: u64 = 10_000_000_000_000_000;

const LIMIT_ERR: &str = "ERR invalid limit: expected an integer from 1 to 1000000000000000";
const PERIOD_ERR: &str = "ERR invalid period: expected a positive integer with an optional unit ms, s, m, h or d (bare numbers are seconds), from 1ms to 3650d";
const COST_ERR: &str =
    "ERR invalid COST: expected an integer from -1000000000000000 to 1000000000000000 (negative gives units back)";
const BLOCK_ERR: &str = "ERR invalid BLOCK: expected milliseconds, an integer from 0 (no time-out) to 315360000000";
const AT_ERR: &str = "ERR invalid AT: expected Unix time in microseconds, an integer from 0 to 10000000000000000";
const BURST_ERR: &str = "ERR invalid BURST: expected an integer from 1 to 1000000000000000";
const BURST_SLOW_ERR: &str = "ERR invalid BURST: at this rate a full bucket would take more than 3650 days to refill";

fn t(c: &mut redis::Connection, line: &str, want: Reply) {
    assert_eq!(throttle(c, line), want, "{line}");
}

/// Runs the calls in one MULTI/EXEC: the server's clock stands still
/// during EXEC, so keys whose TTL is a millisecond or two cannot expire
/// between the calls.
fn atomic(c: &mut redis::Connection, steps: &[(String, Reply)]) {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for (line, _) in steps {
        let mut words = line.split(' ');
        let p = pipe.cmd(words.next().unwrap_or_default());
        for w in words {
            p.arg(w);
        }
    }
    let replies: Vec<Vec<i64>> = pipe.query(c).unwrap_or_else(|e| panic!("{steps:?}: {e}"));
    for ((line, want), got) in steps.iter().zip(&replies) {
        assert_eq!(got[..], [want.0, want.1, want.2, want.3, want.4], "{line}");
    }
}

fn exists(c: &mut redis::Connection, key: &str) -> i64 {
    call(c, &format!("EXISTS {key}")).unwrap()
}

fn pttl(c: &mut redis::Connection, key: &str) -> i64 {
    call(c, &format!("PTTL {key}")).unwrap()
}

/// The key's PTTL is `want`, counted from a call made after `called`:
/// less by no more than the time since then, as measured here.
fn assert_pttl_near(c: &mut redis::Connection, key: &str, want: i64, called: std::time::Instant) {
    let ttl = pttl(c, key);
    let since = called.elapsed().as_micros().div_ceil(1000) as i64 + 1;
    assert!((want - since..=want).contains(&ttl), "{key}: PTTL {ttl}, want {want} less at most {since} ms");
}

#[test]
fn fixed_window_at_the_bounds() {
    let server = Server::start();
    let c = &mut server.conn();
    let (m, mi) = (MAX, MAX as i64);
    // The whole limit in one call, a 3650-day window at time 0.
    let called = std::time::Instant::now();
    t(c, &format!("THROTTLE.FIXED x:f {m} 3650d COST {m} AT 0"), (1, mi, 0, 0, P_MS));
    assert_pttl_near(c, "x:f", P_MS, called);
    t(c, &format!("THROTTLE.FIXED x:f {m} 3650d COST 1 AT 0"), (0, mi, 0, P_MS, P_MS));
    t(c, &format!("THROTTLE.FIXED x:f {m} 3650d COST {m} AT {}", P_US - 1), (0, mi, 0, 1, 1));
    // The window ends exactly one period after it opened.
    t(c, &format!("THROTTLE.FIXED x:f {m} 3650d COST 1 AT {P_US}"), (1, mi, mi - 1, 0, P_MS));
    // Going backwards counts at the window's start.
    t(c, &format!("THROTTLE.FIXED x:f {m} 3650d COST 1 AT 0"), (1, mi, mi - 2, 0, P_MS));
    // The whole limit back: idle, the key is gone.
    t(c, &format!("THROTTLE.FIXED x:f {m} 3650d COST -{m} AT 0"), (1, mi, mi, 0, 0));
    assert_eq!(exists(c, "x:f"), 0);

    // 1 ms windows at the last representable instant; from the year 2286
    // back to 1970 is still the year 2286 for this key.
    atomic(
        c,
        &[
            (format!("THROTTLE.FIXED x:g 1 1ms AT {MAX_AT}"), (1, 1, 0, 0, 1)),
            (format!("THROTTLE.FIXED x:g 1 1ms AT {}", MAX_AT - 1), (0, 1, 0, 1, 1)),
            (format!("THROTTLE.FIXED x:g 1 1ms AT {}", MAX_AT - 10_000_000_000), (0, 1, 0, 1, 1)),
            ("THROTTLE.FIXED x:g 1 1ms COST 0 AT 0".to_string(), (1, 1, 0, 0, 1)),
        ],
    );
}

#[test]
fn sliding_counter_at_the_bounds() {
    let server = Server::start();
    let c = &mut server.conn();
    let (m, mi) = (MAX, MAX as i64);
    // The current window weighs on the next one too: reset_after is two
    // periods at the start of a window.
    let called = std::time::Instant::now();
    t(c, &format!("THROTTLE.SLIDING x:s {m} 3650d COST {m} AT 0"), (1, mi, 0, 0, 2 * P_MS));
    assert_pttl_near(c, "x:s", 2 * P_MS, called);
    // One unit frees up once the previous window weighs at most
    // (10^15 - 1)/10^15: 1 µs into the next window.
    t(c, &format!("THROTTLE.SLIDING x:s {m} 3650d COST 1 AT 0"), (0, mi, 0, P_MS + 1, 2 * P_MS));
    // 1 ms into the next window the previous one weighs (P - 1000)/P:
    // floor(1000 * 10^15 / P) - 1 = 3169 units are free after this one.
    t(c, &format!("THROTTLE.SLIDING x:s {m} 3650d COST 1 AT {}", P_US + 1_000), (1, mi, 3169, 0, 2 * P_MS - 1));
    // Backwards: a call before the window counts at its start, where the
    // previous window still weighs whole.
    t(c, &format!("THROTTLE.SLIDING x:s {m} 3650d COST 0 AT 5"), (1, mi, 0, 0, 2 * P_MS));
    // A refund takes the current window's unit, then the previous
    // window's: one of those is left.
    t(c, &format!("THROTTLE.SLIDING x:s {m} 3650d COST -{m} AT 0"), (1, mi, mi - 1, 0, P_MS));
    t(c, &format!("THROTTLE.SLIDING x:s {m} 3650d COST -1 AT 0"), (1, mi, mi, 0, 0));
    assert_eq!(exists(c, "x:s"), 0);

    // 1 ms windows at 10^16 (a multiple of 1 ms: a window starts there).
    // One more unit fits once 3 * (1000 - e) <= 2000: 334 µs into the next
    // window.
    atomic(
        c,
        &[
            (format!("THROTTLE.SLIDING x:t 3 1ms COST 3 AT {MAX_AT}"), (1, 3, 0, 0, 2)),
            (format!("THROTTLE.SLIDING x:t 3 1ms COST 1 AT {MAX_AT}"), (0, 3, 0, 2, 2)),
        ],
    );
    let t0 = MAX_AT - 1_000_000;
    atomic(
        c,
        &[
            (format!("THROTTLE.SLIDING x:u 3 1ms COST 3 AT {t0}"), (1, 3, 0, 0, 2)),
            (format!("THROTTLE.SLIDING x:u 3 1ms COST 1 AT {}", t0 + 1_333), (0, 3, 0, 1, 1)),
            (format!("THROTTLE.SLIDING x:u 3 1ms COST 1 AT {}", t0 + 1_334), (1, 3, 0, 0, 2)),
        ],
    );
}

#[test]
fn sliding_log_at_the_bounds() {
    let server = Server::start();
    let c = &mut server.conn();
    let (m, mi) = (MAX, MAX as i64);
    t(c, &format!("THROTTLE.SLIDING x:e {m} 3650d COST {m} AT {MAX_AT} EXACT"), (1, mi, 0, 0, P_MS));
    t(c, &format!("THROTTLE.SLIDING x:e {m} 3650d COST 1 AT {MAX_AT} EXACT"), (0, mi, 0, P_MS, P_MS));
    // Backwards from 10^16 to 0.
    t(c, &format!("THROTTLE.SLIDING x:e {m} 3650d COST 1 AT 0 EXACT"), (0, mi, 0, P_MS, P_MS));
    let info: Vec<String> = call(c, "THROTTLE.INFO x:e").unwrap();
    let want: Vec<String> = [
        "algorithm",
        "sliding-exact",
        "entries",
        "1",
        "used",
        &MAX.to_string(),
        "updated_at",
        &MAX_AT.to_string(),
        "reset_after",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(info[..want.len()], want[..], "{info:?}");
    // A huge and a 1-unit entry, then half of the huge one back (the
    // newest units go first).
    atomic(
        c,
        &[
            (format!("THROTTLE.SLIDING x:e2 {m} 1ms COST {} AT 0 EXACT", m - 1), (1, mi, 1, 0, 1)),
            (format!("THROTTLE.SLIDING x:e2 {m} 1ms COST 1 AT 1 EXACT"), (1, mi, 0, 0, 1)),
            (format!("THROTTLE.SLIDING x:e2 {m} 1ms COST -{} AT 1 EXACT", m / 2), (1, mi, mi / 2, 0, 1)),
        ],
    );
}

#[test]
fn buckets_at_the_bounds() {
    let server = Server::start();
    let c = &mut server.conn();
    let (m, mi) = (MAX, MAX as i64);
    // 10^15 tokens per 3650 days: emptying the bucket takes a full period
    // to refill; one token comes back every 0.31536 µs.
    t(c, &format!("THROTTLE.TOKEN x:k {m} 3650d BURST {m} COST {m} AT 0"), (1, mi, 0, 0, P_MS));
    t(c, &format!("THROTTLE.TOKEN x:k {m} 3650d BURST {m} COST 1 AT 0"), (0, mi, 0, 1, P_MS));
    // 1 ms later: floor(10^18 / 315360000000000) = 3170 tokens, one taken.
    t(c, &format!("THROTTLE.TOKEN x:k {m} 3650d BURST {m} COST 1 AT 1000"), (1, mi, 3169, 0, P_MS));
    t(c, &format!("THROTTLE.TOKEN x:k {m} 3650d BURST {m} COST 1 AT 0"), (1, mi, 3168, 0, P_MS));

    // The slowest bucket the bounds allow: 1 unit per ms, 3650 days deep.
    let deep = P_MS as u64;
    t(c, &format!("THROTTLE.LEAKY x:l 1 1ms BURST {deep} COST {deep} AT {MAX_AT}"), (1, P_MS, 0, 0, P_MS));
    t(c, &format!("THROTTLE.LEAKY x:l 1 1ms BURST {deep} COST 1 AT {MAX_AT}"), (0, P_MS, 0, 1, P_MS));
    t(c, &format!("THROTTLE.LEAKY x:l 1 1ms BURST {deep} COST 0 AT {MAX_AT}"), (1, P_MS, 0, P_MS, P_MS));
    assert_eq!(error(c, &format!("THROTTLE.LEAKY x:l2 1 1ms BURST {}", deep + 1)), BURST_SLOW_ERR);
    assert_eq!(error(c, "THROTTLE.TOKEN x:k2 1 3650d BURST 2"), BURST_SLOW_ERR);
    // 10^15 per 1 ms: the fastest rate; the bucket refills in 1 ms.
    atomic(
        c,
        &[
            (format!("THROTTLE.TOKEN x:k3 {m} 1ms COST {m} AT {MAX_AT}"), (1, mi, 0, 0, 1)),
            (format!("THROTTLE.TOKEN x:k3 {m} 1ms COST {m} AT {}", MAX_AT - 1), (0, mi, 0, 1, 1)),
            (format!("THROTTLE.LEAKY x:l3 {m} 1ms COST {m} AT 0"), (1, mi, 0, 0, 1)),
            (format!("THROTTLE.LEAKY x:l3 {m} 1ms COST -{m} AT 0"), (1, mi, mi, 0, 0)),
        ],
    );
    assert_eq!(exists(c, "x:l3"), 0);
}

#[test]
fn one_past_each_bound_is_the_documented_error_and_creates_nothing() {
    let server = Server::start();
    let c = &mut server.conn();
    let cases: &[(&str, &str)] = &[
        ("THROTTLE.FIXED b 1000000000000001 1s", LIMIT_ERR),
        ("THROTTLE.FIXED b 0 1s", LIMIT_ERR),
        ("THROTTLE.FIXED b 9223372036854775808 1s", LIMIT_ERR),
        ("THROTTLE.FIXED b 18446744073709551616 1s", LIMIT_ERR),
        ("THROTTLE.FIXED b 1 3651d", PERIOD_ERR),
        ("THROTTLE.FIXED b 1 87601h", PERIOD_ERR),
        ("THROTTLE.FIXED b 1 5256001m", PERIOD_ERR),
        ("THROTTLE.FIXED b 1 315360001s", PERIOD_ERR),
        ("THROTTLE.FIXED b 1 315360000001ms", PERIOD_ERR),
        ("THROTTLE.FIXED b 1 0ms", PERIOD_ERR),
        ("THROTTLE.FIXED b 1 18446744073709551615d", PERIOD_ERR),
        ("THROTTLE.SLIDING b 1 1s COST 1000000000000001", COST_ERR),
        ("THROTTLE.SLIDING b 1 1s COST -1000000000000001", COST_ERR),
        ("THROTTLE.SLIDING b 1 1s COST -9223372036854775808", COST_ERR),
        ("THROTTLE.SLIDING b 1 1s COST 9223372036854775808", COST_ERR),
        ("THROTTLE.TOKEN b 1 1s AT 10000000000000001", AT_ERR),
        ("THROTTLE.TOKEN b 1 1s AT -1", AT_ERR),
        ("THROTTLE.TOKEN b 1 1s BURST 1000000000000001", BURST_ERR),
        ("THROTTLE.TOKEN b 1 1s BURST 0", BURST_ERR),
        ("THROTTLE.LEAKY b 1 1s BLOCK 315360000001", BLOCK_ERR),
        ("THROTTLE.LEAKY b 1 1s BLOCK -1", BLOCK_ERR),
        ("THROTTLE.ALL COST 1000000000000001 FIXED b 1 1s", COST_ERR),
        ("THROTTLE.ALL AT 10000000000000001 FIXED b 1 1s", AT_ERR),
        ("THROTTLE.ALL FIXED b 1000000000000001 1s", LIMIT_ERR),
        ("THROTTLE.ALL TOKEN b 1 3651d", PERIOD_ERR),
        ("THROTTLE.INFO b AT 10000000000000001", AT_ERR),
    ];
    for (line, want) in cases {
        assert_eq!(&error(c, line), want, "{line}");
    }
    assert_eq!(exists(c, "b"), 0);
    // The bounds themselves are accepted (BLOCK on a peek answers at once).
    let m = MAX;
    t(
        c,
        &format!("THROTTLE.TOKEN ok {m} 315360000s BURST {m} COST 0 AT {MAX_AT} BLOCK 315360000000"),
        (1, m as i64, m as i64, 0, 0),
    );
    for period in ["3650d", "87600h", "5256000m", "315360000s", "315360000", "315360000000ms"] {
        t(c, &format!("THROTTLE.FIXED ok {m} {period} COST -{m} AT 0"), (1, m as i64, m as i64, 0, 0));
    }
    assert_eq!(exists(c, "ok"), 0);
}

/// Lowering the limit, then giving units back, leaves a count above the
/// new limit; that state must still save and load (it once made the RDB
/// unloadable: DEBUG RELOAD emptied the server, a restart refused to
/// start).
#[test]
fn refunds_under_a_lowered_limit_survive_reload() {
    let server = Server::start();
    let c = &mut server.conn();
    let lines = [
        ("x:rf", "THROTTLE.FIXED x:rf 10 1h COST 8", "THROTTLE.FIXED x:rf 5 1h COST -1", (1, 5, 0, 0)),
        ("x:rs", "THROTTLE.SLIDING x:rs 10 3650d COST 8", "THROTTLE.SLIDING x:rs 5 3650d COST -1", (1, 5, 0, 0)),
        ("x:re", "THROTTLE.SLIDING x:re 10 1h COST 8 EXACT", "THROTTLE.SLIDING x:re 5 1h COST -1 EXACT", (1, 5, 0, 0)),
        // 2 tokens left, 3 missing from the smaller bucket, one back.
        ("x:rt", "THROTTLE.TOKEN x:rt 10 3650d COST 8", "THROTTLE.TOKEN x:rt 5 3650d COST -1", (1, 5, 3, 0)),
        // 8 queued, clamped to 5, one removed.
        ("x:rl", "THROTTLE.LEAKY x:rl 10 3650d COST 8", "THROTTLE.LEAKY x:rl 5 3650d COST -1", (1, 5, 1, 0)),
    ];
    let mut digests = Vec::new();
    for (key, first, second, head) in lines {
        throttle(c, first);
        let (allowed, limit, remaining, retry, _) = throttle(c, second);
        assert_eq!((allowed, limit, remaining, retry), head, "{second}");
        digests.push((key, digest(c, key)));
    }
    let reload: String =
        call(c, "DEBUG RELOAD").unwrap_or_else(|e| panic!("DEBUG RELOAD: {e}; log:\n{}", server.log()));
    assert_eq!(reload, "OK");
    for (key, before) in digests {
        assert_eq!(digest(c, key), before, "{key} after DEBUG RELOAD");
    }
}

#[test]
fn extreme_states_survive_reload() {
    let server = Server::start();
    let c = &mut server.conn();
    let m = MAX;
    let lines = [
        format!("THROTTLE.FIXED y:f {m} 3650d COST {m} AT {MAX_AT}"),
        format!("THROTTLE.SLIDING y:s {m} 3650d COST {m} AT {MAX_AT}"),
        format!("THROTTLE.SLIDING y:e {m} 3650d COST {m} AT {MAX_AT} EXACT"),
        format!("THROTTLE.TOKEN y:t {m} 3650d BURST {m} COST {m} AT 0"),
        format!("THROTTLE.LEAKY y:l 1 1ms BURST {P_MS} COST {P_MS} AT {MAX_AT}"),
    ];
    let mut digests = Vec::new();
    for line in &lines {
        assert_eq!(throttle(c, line).0, 1, "{line}");
        let key = line.split(' ').nth(1).unwrap_or_default().to_string();
        digests.push((key.clone(), digest(c, &key)));
    }
    let reload: String =
        call(c, "DEBUG RELOAD").unwrap_or_else(|e| panic!("DEBUG RELOAD: {e}; log:\n{}", server.log()));
    assert_eq!(reload, "OK");
    for (key, before) in digests {
        assert_eq!(digest(c, &key), before, "{key}");
        let info: redis::Value = call(c, &format!("THROTTLE.INFO {key}")).unwrap();
        assert!(matches!(info, redis::Value::Array(ref v) if v.len() >= 8), "{key}: {info:?}");
    }
}

/// How much more work THROTTLE.ALL may cost with ten times the specs. A
/// parse linear in its specs costs about 10 times as much (10 to 20 times
/// measured here: the larger call's 160,000 arguments outgrow the caches
/// the smaller call's fit in); one that checks every key against every
/// earlier one (what it once did: 40,000 specs took 5.8 s) about 100 times
/// in theory, 265 times measured. 40 is twice the worst linear ratio seen
/// and well below the quadratic one.
const LINEAR_BOUND: f64 = 40.0;

/// THROTTLE.ALL's work grows linearly with its specs: 40,000 of them (a key
/// named twice is still found, wherever it is) cost the server about ten
/// times what 4,000 cost, in the command, in the key extraction that
/// cluster routing and ACLs run (COMMAND GETKEYS), and on a replica.
///
/// The work is the CPU time of the server's main thread (INFO cpu) across
/// each call, compared within the run, so the machine's speed cancels out.
/// Not the command's time in INFO commandstats: that is wall time, which a
/// loaded machine stretches the more the longer the call (a 40,000-spec
/// call spans many scheduler slices, a 4,000-spec one often fits in one):
/// it put the linear parse anywhere from 10 to 79 times. Each call is
/// measured five times and the least costly counts.
#[test]
fn a_throttle_all_with_forty_thousand_specs_takes_linear_time() {
    const SMALL: usize = 4_000;
    const LARGE: usize = 40_000;
    const ROUNDS: usize = 5;
    let (master, replica) = common::master_and_replica();
    let mut m = common::open(&master.url());
    let mut r = common::open(&replica.url());
    let specs = |tag: &str, n: usize| -> Vec<String> {
        let mut args: Vec<String> = vec!["COST".into(), "1".into()];
        for i in 0..n {
            args.extend(["FIXED".into(), format!("{{{tag}}}:{i}"), "10".into(), "1h".into()]);
        }
        args
    };
    let (small, large) = (specs("s", SMALL), specs("u", LARGE));
    let all = |args: &[String]| {
        let mut cmd = redis::cmd("THROTTLE.ALL");
        cmd.arg(args);
        cmd
    };
    // The least costly of each size's rounds, in µs of CPU time: [master,
    // COMMAND GETKEYS, replica].
    let mut least = [[u64::MAX; 3]; 2];
    for _ in 0..ROUNDS {
        for (size, args) in [&small, &large].into_iter().enumerate() {
            let n = (args.len() - 2) / 4;
            let calls = |c: &mut redis::Connection, name: &str| common::command_stats(c, name).0;
            let (calls_m, calls_r) = (calls(&mut m, "THROTTLE.ALL"), calls(&mut r, "THROTTLE.ALL"));
            let (cpu_m, cpu_r) = (common::main_thread_cpu_us(&mut m), common::main_thread_cpu_us(&mut r));
            let reply: Vec<redis::Value> = all(args).query(&mut m).expect("THROTTLE.ALL");
            assert_eq!((reply.len(), reply.first()), (n + 1, Some(&redis::Value::Int(1))));
            let on_master = common::main_thread_cpu_us(&mut m) - cpu_m;
            common::sync(&mut m);
            let on_replica = common::main_thread_cpu_us(&mut r) - cpu_r;
            // The replica ran the call as THROTTLE.ALL, once.
            assert_eq!((calls(&mut m, "THROTTLE.ALL"), calls(&mut r, "THROTTLE.ALL")), (calls_m + 1, calls_r + 1));

            let cpu_m = common::main_thread_cpu_us(&mut m);
            let mut getkeys = redis::cmd("COMMAND");
            getkeys.arg("GETKEYS").arg("THROTTLE.ALL").arg(args);
            let keys: Vec<String> = getkeys.query(&mut m).expect("COMMAND GETKEYS");
            assert_eq!(keys.len(), n);
            let extracting = common::main_thread_cpu_us(&mut m) - cpu_m;

            for (best, us) in least[size].iter_mut().zip([on_master, extracting, on_replica]) {
                *best = (*best).min(us);
            }
        }
    }
    // A key named twice, the last spec repeating the first.
    let mut repeated = large.clone();
    repeated.extend(["TOKEN".into(), "{u}:0".into(), "10".into(), "1h".into()]);
    let e = all(&repeated).query::<redis::Value>(&mut m).expect_err("a key named twice");
    assert!(e.to_string().contains("same key"), "{e}");
    common::sync(&mut m);
    let size: i64 = call(&mut r, "DBSIZE").expect("DBSIZE");
    assert_eq!(size, (SMALL + LARGE) as i64);

    for (i, what) in ["THROTTLE.ALL on the master", "COMMAND GETKEYS", "THROTTLE.ALL on the replica"].iter().enumerate()
    {
        let (small_us, large_us) = (least[0][i], least[1][i]);
        let ratio = large_us as f64 / small_us.max(1) as f64;
        eprintln!("{what}: {SMALL} specs {small_us} µs of CPU, {LARGE} specs {large_us} µs: {ratio:.1} times");
        assert!(
            ratio < LINEAR_BOUND,
            "{what}: {LARGE} specs cost {large_us} µs of CPU, {ratio:.1} times the {small_us} µs of {SMALL} (linear: about 10)"
        );
    }
}
