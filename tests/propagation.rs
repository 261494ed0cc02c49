//! A call that nobody would receive is not built for propagation (no AOF,
//! no replica, no backlog: Redis would drop it). These tests change who
//! listens while calls run on the server clock, and check that every
//! listener still ends with exactly the master's values and that the
//! changes still count for the `save` points.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{call, digest, info_field, same_values_on_replica, wait_aof_rewrite_done, wait_until, Rng, Server};

/// 200 keys, 40 of each kind, with limits high enough that calls keep
/// being admitted and periods long enough that nothing expires while a
/// test runs.
fn key_call(i: u64) -> Vec<String> {
    let key = format!("pk:{i}");
    match i % 5 {
        0 => vec!["THROTTLE.FIXED".into(), key, "5000".into(), "1h".into()],
        1 => vec!["THROTTLE.SLIDING".into(), key, "5000".into(), "1h".into()],
        2 => vec!["THROTTLE.SLIDING".into(), key, "5000".into(), "1h".into(), "EXACT".into()],
        3 => vec!["THROTTLE.TOKEN".into(), key, "5000".into(), "1h".into(), "BURST".into(), "6000".into()],
        _ => vec!["THROTTLE.LEAKY".into(), key, "5000".into(), "1h".into(), "BURST".into(), "6000".into()],
    }
}

/// `batches` pipelines of 100 calls on the server clock; returns how many
/// were admitted.
fn load(c: &mut redis::Connection, rng: &mut Rng, batches: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..batches {
        let mut pipe = redis::pipe();
        for _ in 0..100 {
            let words = key_call(rng.below(200));
            let cmd = pipe.cmd(&words[0]);
            for w in &words[1..] {
                cmd.arg(w);
            }
            cmd.arg("COST").arg(1 + rng.below(2));
        }
        let replies: Vec<Vec<i64>> = pipe.query(c).expect("load");
        admitted += replies.iter().filter(|r| r.first() == Some(&1)).count();
    }
    admitted
}

/// Runs `load` on its own connection, one batch at least, until told to
/// stop.
struct Loader {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<usize>,
}

impl Loader {
    fn start(server: &Server, seed: u64) -> Loader {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = server.conn();
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut rng = Rng(seed);
            let mut admitted = 0;
            loop {
                admitted += load(&mut c, &mut rng, 1);
                if flag.load(Ordering::SeqCst) {
                    return admitted;
                }
            }
        });
        Loader { stop, thread }
    }

    fn finish(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("loader")
    }
}

/// After `WAIT`, the replica holds every key of the master with the same
/// value, expiring at the same instant.
fn assert_replica_matches(m: &mut redis::Connection, r: &mut redis::Connection) {
    common::sync(m);
    let keys = same_values_on_replica(m, r);
    assert!(keys.len() >= 150, "most keys exist: {}", keys.len());
    for (name, expire_at) in keys {
        assert!(expire_at > 0, "{name} expires at {expire_at}");
    }
}

fn wait_link_up(r: &mut redis::Connection) {
    wait_until("the replica's link to be up", Duration::from_secs(30), || {
        info_field(r, "replication", "master_link_status").as_deref() == Some("up")
    });
}

/// A replica attaches while calls keep coming: the calls before its sync
/// are in its snapshot, every later one reaches it.
fn replica_attaches_under_load(master_args: &[&str], seed: u64) {
    let master = Server::start_with(master_args);
    let mut m = master.conn();
    let mut rng = Rng(seed);
    let quiet = load(&mut m, &mut rng, 20);
    assert!(quiet > 0, "calls were admitted before any replica");
    assert_eq!(info_field(&mut m, "replication", "repl_backlog_active").as_deref(), Some("0"), "no backlog yet");

    let loader = Loader::start(&master, seed + 1);
    let port = master.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut r = replica.conn();
    wait_link_up(&mut r);
    let during = loader.finish();
    assert!(during > 0, "calls were admitted while the replica attached");
    load(&mut m, &mut rng, 10);
    assert_replica_matches(&mut m, &mut r);
}

#[test]
fn replica_attaching_during_calls_gets_every_change_diskless() {
    replica_attaches_under_load(&["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"], 11);
}

/// The sync waits a second before it forks: calls in that second run while
/// the replica is already listed but not yet served.
#[test]
fn replica_attaching_during_calls_gets_every_change_delayed_diskless() {
    replica_attaches_under_load(&["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "1"], 22);
}

#[test]
fn replica_attaching_during_calls_gets_every_change_disk_based() {
    replica_attaches_under_load(&["--repl-diskless-sync", "no"], 33);
}

/// A replica that loses its link catches up from the backlog (a partial
/// resync) with the calls made while nobody was connected.
#[test]
fn replica_reconnecting_gets_the_calls_it_missed() {
    let master = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let mut m = master.conn();
    let port = master.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut r = replica.conn();
    wait_link_up(&mut r);
    let mut rng = Rng(44);
    load(&mut m, &mut rng, 10);
    let partial_before: i64 = info_field(&mut m, "stats", "sync_partial_ok").and_then(|v| v.parse().ok()).unwrap_or(-1);

    // Calls while the replica is cut off and reconnecting.
    let killed: i64 = call(&mut m, "CLIENT KILL TYPE replica").expect("CLIENT KILL");
    assert_eq!(killed, 1, "the replica's link was cut");
    let missed = load(&mut m, &mut rng, 20);
    assert!(missed > 0, "calls were admitted while the replica was away");
    wait_link_up(&mut r);
    wait_until("a partial resync", Duration::from_secs(30), || {
        info_field(&mut m, "stats", "sync_partial_ok").and_then(|v| v.parse::<i64>().ok()).unwrap_or(0) > partial_before
    });
    load(&mut m, &mut rng, 5);
    assert_replica_matches(&mut m, &mut r);
}

/// A promoted replica's new replica gets every change made after the
/// promotion.
#[test]
fn promoted_replica_feeds_its_own_replica() {
    let first = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let mut a = first.conn();
    let port = first.port.to_string();
    let second = Server::start_with(&["--replicaof", "127.0.0.1", &port, "--repl-diskless-sync-delay", "0"]);
    let mut b = second.conn();
    wait_link_up(&mut b);
    let mut rng = Rng(55);
    load(&mut a, &mut rng, 10);
    common::sync(&mut a);

    let _: String = call(&mut b, "REPLICAOF NO ONE").expect("REPLICAOF NO ONE");
    load(&mut b, &mut rng, 10);
    let b_port = second.port.to_string();
    let loader = Loader::start(&second, 66);
    let third = Server::start_with(&["--replicaof", "127.0.0.1", &b_port]);
    let mut c = third.conn();
    wait_link_up(&mut c);
    assert!(loader.finish() > 0, "calls were admitted while the third server attached");
    load(&mut b, &mut rng, 5);
    assert_replica_matches(&mut b, &mut c);
}

/// Every key's digest and the instant it expires at.
fn snapshot(c: &mut redis::Connection) -> Vec<(String, String, i64)> {
    let mut names: Vec<String> = call(c, "KEYS *").expect("KEYS");
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let d = digest(c, &n);
            let expire_at: i64 = call(c, &format!("PEXPIRETIME {n}")).expect("PEXPIRETIME");
            (n, d, expire_at)
        })
        .collect()
}

/// AOF switched on at run time, while calls come in: loading the AOF gives
/// back exactly the values the calls left, expiring at the same instants.
#[test]
fn aof_switched_on_during_calls_keeps_every_change() {
    let server = Server::start();
    let mut c = server.conn();
    let mut rng = Rng(77);
    load(&mut c, &mut rng, 20);
    let loader = Loader::start(&server, 88);
    let _: String = call(&mut c, "CONFIG SET appendonly yes").expect("CONFIG SET appendonly yes");
    wait_aof_rewrite_done(&mut c);
    assert!(loader.finish() > 0, "calls were admitted while the AOF was switched on");
    load(&mut c, &mut rng, 20);

    let before = snapshot(&mut c);
    assert!(before.len() >= 150, "most keys exist: {}", before.len());
    let _: String = call(&mut c, "DEBUG LOADAOF").expect("DEBUG LOADAOF");
    let after = snapshot(&mut c);
    assert_eq!(before.len(), after.len(), "keys after loading the AOF");
    assert_eq!(before, after, "key, value and the instant it expires at, after loading the AOF");
}

/// With nobody listening, each change still counts towards `save` points;
/// limited calls and peeks do not.
#[test]
fn unpropagated_changes_count_for_save_points() {
    let server = Server::start();
    let mut c = server.conn();
    let changes = |c: &mut redis::Connection| -> i64 {
        info_field(c, "persistence", "rdb_changes_since_last_save")
            .and_then(|v| v.parse().ok())
            .expect("rdb_changes_since_last_save")
    };
    let before = changes(&mut c);
    for i in 0..12 {
        let reply: Vec<i64> = call(&mut c, &format!("THROTTLE.FIXED sp:{} 3 1h", i % 4)).expect("call");
        assert_eq!(reply.first(), Some(&1), "admitted");
    }
    for i in 0..4 {
        let reply: Vec<i64> = call(&mut c, &format!("THROTTLE.FIXED sp:{i} 3 1h")).expect("call");
        assert_eq!(reply.first(), Some(&0), "limited");
        let _: Vec<i64> = call(&mut c, &format!("THROTTLE.TOKEN sp:t{i} 3 1h COST 0")).expect("peek");
    }
    assert_eq!(changes(&mut c) - before, 12, "one change per admitted call");
}
