//! 32 client threads hammer one key of each algorithm on the server's
//! clock, with a rate so slow that nothing refills during the test (under
//! one unit): exactly `limit` (or `burst`) units are admitted, each
//! admitted reply sees a different `remaining` (every call is atomic), and
//! with a replica attached the replica ends with the master's exact state.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{call, digest, info_field, wait_until, Server};

const THREADS: usize = 32;
/// Calls per thread, spread evenly over the five keys: 32 * 240 / 5 =
/// 1536 calls of 1 unit per key, for 1000 units.
const CALLS: usize = 240;
const LIMIT: i64 = 1000;

/// One key per algorithm. SLIDING uses 3650 days too: its windows are
/// aligned on the epoch, so an hourly one could roll over mid-test. At
/// 1000 per 3650 days a bucket refills 1 unit in 3.65 days.
const KEYS: &[(&str, &str)] = &[
    ("c:fixed", "THROTTLE.FIXED c:fixed 1000 1h"),
    ("c:sliding", "THROTTLE.SLIDING c:sliding 1000 3650d"),
    ("c:exact", "THROTTLE.SLIDING c:exact 1000 1h EXACT"),
    ("c:token", "THROTTLE.TOKEN c:token 1000 3650d BURST 1000"),
    ("c:leaky", "THROTTLE.LEAKY c:leaky 1000 3650d BURST 1000"),
];

/// Runs the hammering against `port`; returns, per key, the `remaining`
/// of every admitted reply.
fn hammer(port: u16) -> Vec<Vec<i64>> {
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let url = format!("redis://127.0.0.1:{port}/");
                let mut c = redis::Client::open(url).and_then(|c| c.get_connection()).expect("connect");
                barrier.wait();
                let mut admitted = vec![Vec::new(); KEYS.len()];
                // Interleave the keys, in a different order per thread, in
                // pipelined batches of 8 calls.
                for round in 0..CALLS / 8 {
                    let order: Vec<usize> = (0..8).map(|j| (i + round + j) % KEYS.len()).collect();
                    let mut pipe = redis::pipe();
                    for &k in &order {
                        let mut words = KEYS[k].1.split(' ');
                        let p = pipe.cmd(words.next().unwrap_or_default());
                        for w in words {
                            p.arg(w);
                        }
                    }
                    let replies: Vec<Vec<i64>> = pipe.query(&mut c).expect("pipeline");
                    for (&k, reply) in order.iter().zip(&replies) {
                        assert_eq!(reply.len(), 5, "{}: {reply:?}", KEYS[k].1);
                        assert_eq!(reply[1], LIMIT, "{}: {reply:?}", KEYS[k].1);
                        if reply[0] == 1 {
                            admitted[k].push(reply[2]);
                        }
                    }
                }
                admitted
            })
        })
        .collect();
    let mut all = vec![Vec::new(); KEYS.len()];
    for h in handles {
        for (k, remaining) in h.join().expect("client thread").into_iter().enumerate() {
            all[k].extend(remaining);
        }
    }
    all
}

fn check_admitted(all: &[Vec<i64>]) {
    let calls_per_key = THREADS * (CALLS / 8) * 8 / KEYS.len();
    assert!(calls_per_key as i64 > LIMIT, "the test must ask for more than the limit");
    for ((_, line), remaining) in KEYS.iter().zip(all) {
        assert_eq!(remaining.len() as i64, LIMIT, "{line}: admitted {} calls of 1 unit", remaining.len());
        let mut seen = remaining.clone();
        seen.sort_unstable();
        let want: Vec<i64> = (0..LIMIT).collect();
        assert_eq!(seen, want, "{line}: each admitted call must see its own remaining");
    }
}

#[test]
fn thirty_two_clients_admit_exactly_the_limit() {
    let server = Server::start();
    let all = hammer(server.port);
    check_admitted(&all);
    let mut c = server.conn();
    for (key, line) in KEYS {
        let peek: Vec<i64> = call(&mut c, &format!("{line} COST 0")).unwrap();
        assert_eq!(peek[2], 0, "{key}: nothing left after the test: {peek:?}");
    }
}

#[test]
fn with_a_replica_the_replica_holds_the_same_states() {
    let master = Server::start();
    let port = master.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut r = replica.conn();
    wait_until("the replica to sync", Duration::from_secs(30), || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    let all = hammer(master.port);
    check_admitted(&all);
    let mut m = master.conn();
    common::sync(&mut m);
    for (key, _) in KEYS {
        let (dm, dr) = (digest(&mut m, key), digest(&mut r, key));
        assert_ne!(dm, "0000000000000000000000000000000000000000", "{key} exists on the master");
        assert_eq!(dm, dr, "{key}: replica differs from master");
        let (tm, tr): (String, String) =
            (call(&mut m, &format!("TYPE {key}")).unwrap(), call(&mut r, &format!("TYPE {key}")).unwrap());
        assert_eq!(tm, tr, "{key}: type");
    }
}
