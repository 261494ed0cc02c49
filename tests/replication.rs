//! A replica holds exactly the master's values after a random workload on
//! the server clock, even when it falls behind: the master propagates each
//! change with its time fixed, never the bare call.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{info_field, same_values_on_replica, wait_until, Rng, Server};

/// One key's fixed parameters; the workload's calls vary only COST.
struct Limit {
    key: String,
    command: &'static str,
    limit: u64,
    period: &'static str,
    options: String,
}

fn limits(rng: &mut Rng, count: usize) -> Vec<Limit> {
    // Periods long enough that no key expires while the test runs: a TOKEN
    // key refills one unit in at least 10 min / 50 = 12 s.
    const PERIODS: [&str; 3] = ["10m", "1h", "2h"];
    (0..count)
        .map(|i| {
            let limit = 1 + rng.below(50);
            let period = PERIODS[rng.below(3) as usize];
            let (command, options) = match i % 5 {
                0 => ("THROTTLE.FIXED", String::new()),
                1 => ("THROTTLE.SLIDING", String::new()),
                2 => ("THROTTLE.SLIDING", "EXACT".to_string()),
                3 => ("THROTTLE.TOKEN", format!("BURST {}", limit + rng.below(limit + 1))),
                _ => ("THROTTLE.LEAKY", format!("BURST {}", limit + rng.below(limit + 1))),
            };
            Limit { key: format!("rk:{i}"), command, limit, period, options }
        })
        .collect()
}

fn cost(rng: &mut Rng, limit: u64) -> u64 {
    match rng.below(10) {
        0 => 0,                                // peek
        1 => limit + 1 + rng.below(limit * 2), // never admissible
        2 => 1 + rng.below(limit),             // up to the whole limit
        _ => 1 + rng.below(3),
    }
}

/// The propagated change carries the instant its key expires at (or the
/// master's clock, TTLFROM), so a stalled replica's keys still expire at
/// the very instant the master's do.
#[test]
fn replica_matches_master_after_a_random_workload_with_stalls() {
    // No delay before the full sync's diskless transfer (5 s by default).
    let master = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut m = master.conn();
    let mut r = replica.conn();
    wait_until("the replica's link to be up", Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });

    // Stalls the replica while the workload runs, from its own connection:
    // the main thread asks for a stall at the start of each phase and waits
    // for the previous one to be over.
    const PHASES: usize = 4;
    const BATCHES: usize = 20;
    const BATCH: usize = 100;
    let asked = Arc::new(AtomicUsize::new(0));
    let stalled = Arc::new(AtomicUsize::new(0));
    let staller = {
        let (asked, stalled) = (Arc::clone(&asked), Arc::clone(&stalled));
        let mut conn = replica.conn();
        std::thread::spawn(move || {
            for phase in 1..=PHASES {
                wait_until("a stall request", Duration::from_secs(60), || asked.load(Ordering::SeqCst) >= phase);
                let ok: String = redis::cmd("DEBUG").arg("SLEEP").arg("0.2").query(&mut conn).expect("DEBUG SLEEP");
                assert_eq!(ok, "OK");
                stalled.store(phase, Ordering::SeqCst);
            }
        })
    };

    let mut rng = Rng(0x5eed_1234);
    let keys = limits(&mut rng, 150);
    let mut admitted = 0;
    for phase in 1..=PHASES {
        wait_until("the previous stall to end", Duration::from_secs(10), || {
            stalled.load(Ordering::SeqCst) + 1 >= phase
        });
        asked.store(phase, Ordering::SeqCst);
        for _ in 0..BATCHES {
            let mut pipe = redis::pipe();
            for _ in 0..BATCH {
                let k = &keys[rng.below(keys.len() as u64) as usize];
                let cmd =
                    pipe.cmd(k.command).arg(&k.key).arg(k.limit).arg(k.period).arg("COST").arg(cost(&mut rng, k.limit));
                for option in k.options.split_whitespace() {
                    cmd.arg(option);
                }
            }
            let replies: Vec<Vec<i64>> = pipe.query(&mut m).expect("workload");
            admitted += replies.iter().filter(|r| r.first() == Some(&1)).count();
        }
    }
    staller.join().expect("staller");
    assert_eq!(stalled.load(Ordering::SeqCst), PHASES, "the replica was stalled");
    const OPS: usize = PHASES * BATCHES * BATCH;
    assert!(admitted > OPS / 4 && admitted < OPS, "a mix of admitted and limited calls: {admitted}");

    common::sync(&mut m);

    let keys = same_values_on_replica(&mut m, &mut r);
    assert!(keys.len() > 100, "most keys exist: {}", keys.len());
    for (name, expire_at) in keys {
        assert!(expire_at > 0, "{name} expires at {expire_at}");
    }
}

/// `PEXPIRETIME` of every key, by name.
fn expiry_instants(c: &mut redis::Connection) -> Vec<(String, i64)> {
    let mut keys: Vec<String> = common::call(c, "KEYS *").expect("KEYS");
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let at = common::call(c, &format!("PEXPIRETIME {k}")).expect("PEXPIRETIME");
            (k, at)
        })
        .collect()
}

/// A replica's key expires at the very instant the master's does, on every
/// server, for every way a change is made: the master sets the instant it
/// sends (never a TTL it rounds again), and every call of one window names
/// the same one, the window's end rounded down to the ms (Redis keeps a
/// key through the ms its expiry names).
#[test]
fn a_replicated_key_expires_at_the_masters_instant() {
    let (master, replica) = common::master_and_replica();
    let mut m = common::open(&master.url());
    let mut r = common::open(&replica.url());
    // An hour's quota: a bucket key stays 3.6 s per unit taken, so none
    // expires before the comparison, however slowly the calls go.
    let lines = [
        "THROTTLE.FIXED k{i} 1000 1h",
        "THROTTLE.SLIDING s{i} 1000 1h",
        "THROTTLE.SLIDING e{i} 1000 1h EXACT",
        "THROTTLE.TOKEN t{i} 1000 1h",
        "THROTTLE.LEAKY l{i} 1000 1h",
        "CL.THROTTLE c{i} 999 1000 3600",
        "THROTTLE.ALL FIXED {a{i}}f 1000 1h LEAKY {a{i}}l 1000 1h",
    ];
    for i in 0..300 {
        for line in lines {
            let line = line.replace("{i}", &(i % 20).to_string());
            let _: redis::Value = common::call(&mut m, &line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }
    // A refund through every path too.
    for line in ["THROTTLE.FIXED k0 1000 1h COST -1", "THROTTLE.ALL COST -1 FIXED {a1}f 1000 1h LEAKY {a1}l 1000 1h"] {
        let _: redis::Value = common::call(&mut m, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    common::sync(&mut m);
    same_values_on_replica(&mut m, &mut r);
    let (on_master, on_replica) = (expiry_instants(&mut m), expiry_instants(&mut r));
    assert_eq!(on_master.len(), 160, "{on_master:?}");
    assert_eq!(on_master, on_replica, "expiry instants on the master and the replica");
    // A fixed window's key expires at the window's end, whichever call set it.
    for i in 0..20 {
        let info: Vec<redis::Value> = common::call(&mut m, &format!("THROTTLE.INFO k{i}")).expect("INFO");
        let start = match info.get(3) {
            Some(redis::Value::Int(start)) => *start,
            other => panic!("window_start of k{i}: {other:?}"),
        };
        let at: i64 = common::call(&mut m, &format!("PEXPIRETIME k{i}")).expect("PEXPIRETIME");
        assert_eq!(at, (start + 3_600_000_000) / 1000, "k{i}: its window started at {start} µs");
    }
}
