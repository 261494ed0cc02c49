//! The module through the server's own life, as an operator meets it:
//! write pauses and FAILOVER, a refused MODULE LOAD, slot migration in a
//! real cluster, writes refused by the server (min-replicas, maxmemory),
//! other commands on a waited key, WATCH, keyspace notifications, TTLs
//! and ACLs. `make test` runs this file on every server it tests
//! (`THROTTLE_REDIS_SERVER`); a crash report in any server's log fails
//! the test that ran it.
//!
//! `BLOCK` waits on the server's clock by nature. No test bounds how long
//! a reply takes. The waits are long (a minute) wherever the point is that
//! something else releases a waiter, so a waiter left waiting shows as a
//! read time-out, never as a lucky pass; where a waiter's turn must come at
//! a chosen moment, a refund gives a unit back then (the module serves the
//! waiter from its timer, as it does when a window ends), not a window
//! short enough to end in time, which a slow setup could outlast.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    call, error, free_cluster_port, info_field, info_number, master_and_replica, open, sync, throttle, wait_until,
    waiting, Server, Waiter,
};

/// A limiter that admits one call a minute: its second call waits.
const MINUTE_LIMIT: &str = "THROTTLE.FIXED k 1 60s";

/// Starts a second caller of `line` (with `BLOCK`) on key `k` after a
/// first one took the only unit; returns once it waits.
fn waiter_on(server: &Server, c: &mut redis::Connection, line: &str, block_ms: u64) -> Waiter {
    assert_eq!(throttle(c, line).0, 1, "{line}");
    assert_eq!(throttle(c, line).0, 0, "{line}: limited");
    Waiter::queued(&server.url(), c, &format!("{line} BLOCK {block_ms}"), 1)
}

fn exists(c: &mut redis::Connection, key: &str) -> i64 {
    call(c, &format!("EXISTS {key}")).expect("EXISTS")
}

// ---------------------------------------------------------------------------
// 1. Write pauses and FAILOVER
// ---------------------------------------------------------------------------

/// A waiter whose time comes while writes are paused is served after the
/// pause, and nothing is written or propagated during it. Its key's
/// window ends during the pause, while expiry is suspended: serving it
/// then made Redis 7.0 and 8.2 assert (the key is missing to a lookup but
/// still in the keyspace).
#[test]
fn a_waiter_due_during_a_write_pause_is_served_after_it() {
    for mode in ["WRITE", "ALL"] {
        let (master, replica) = master_and_replica();
        let mut c = open(&master.url());
        let line = "THROTTLE.FIXED p 1 2s";
        let waiter = {
            assert_eq!(throttle(&mut c, line).0, 1);
            Waiter::queued(&master.url(), &mut c, &format!("{line} BLOCK 60000"), 1)
        };
        if mode == "WRITE" {
            // Reads go on, and the pause lasts until the test ends it: the
            // window ends (the key reads as missing), the waiter's time
            // comes, the module looks again every 10 ms, and still nothing
            // is written, propagated or answered.
            let _: () = call(&mut c, "CLIENT PAUSE 600000 WRITE").expect("CLIENT PAUSE");
            wait_until("the window to end during the pause", Duration::from_secs(10), || exists(&mut c, "p") == 0);
            let offset = info_number(&mut c, "replication", "master_repl_offset");
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(25));
                assert_eq!(
                    info_number(&mut c, "replication", "master_repl_offset"),
                    offset,
                    "propagated during the pause"
                );
                assert_eq!(waiting(&mut c), 1, "answered during the pause");
            }
            let _: () = call(&mut c, "CLIENT UNPAUSE").expect("CLIENT UNPAUSE");
            let (got, _) = waiter.reply();
            assert_eq!(got, (1, 1, 0, 0, 2000), "{mode}: served after the pause");
        } else {
            // Every command waits out the pause, this test's too: the pause
            // ends by its time-out, and the reply comes no sooner (a lower
            // bound: a loaded machine only makes it later).
            let pause = Duration::from_millis(4000);
            let paused_at = Instant::now();
            let _: () = call(&mut c, &format!("CLIENT PAUSE {} ALL", pause.as_millis())).expect("CLIENT PAUSE");
            let (got, at) = waiter.reply();
            assert_eq!(got, (1, 1, 0, 0, 2000), "{mode}: served after the pause");
            assert!(
                at.duration_since(paused_at) >= pause - Duration::from_millis(50),
                "{mode}: answered during the pause"
            );
        }
        sync(&mut c);
        let mut r = open(&replica.url());
        common::same_values_on_replica(&mut c, &mut r);
    }
}

/// FAILOVER pauses writes, then turns the master into a replica: its
/// waiters are told (as Redis tells its own blocked clients), both
/// servers stay up, and the new master holds the same limiter.
#[test]
fn failover_unblocks_waiters_and_keeps_both_servers_up() {
    let (mut master, mut replica) = master_and_replica();
    let mut c = open(&master.url());
    let waiter = waiter_on(&master, &mut c, MINUTE_LIMIT, 30_000);
    let mut r = common::fail_over(&mut c, &replica);
    let e = waiter.error();
    assert!(e.to_string().contains("UNBLOCKED"), "{e}");
    wait_until("the old master to follow it", Duration::from_secs(20), || {
        info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up")
    });
    assert_eq!(throttle(&mut r, MINUTE_LIMIT).0, 0, "the new master holds the used limiter");
    assert_eq!(waiting(&mut c), 0);
    assert!(master.alive() && replica.alive());
}

// ---------------------------------------------------------------------------
// 2. A refused load
// ---------------------------------------------------------------------------

/// Builds tests/fixtures/cl_throttle_owner.c, a module that owns
/// CL.THROTTLE as redis-cell does.
fn cl_throttle_owner(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cl_throttle_owner.c");
    let out = dir.join("cl_throttle_owner.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(status.success(), "{cc} failed on {}", source.display());
    out
}

/// Loading the module where CL.THROTTLE is taken fails (with `cl-throttle
/// yes`), and leaves nothing behind: Redis 7.0 does not undo a failed
/// module's event subscriptions, and the next fork called into the
/// unloaded library.
#[test]
fn a_refused_load_leaves_nothing_behind() {
    let build = common::tempdir::Dir::new();
    let owner = cl_throttle_owner(build.path());
    let mut server = Server::start_with_module(&owner, &["--enable-module-command", "yes", "--save", ""]);
    let mut c = server.conn();
    let module = common::module_path();
    let refused = error(&mut c, &format!("MODULE LOAD {}", module.display()));
    assert!(refused.starts_with("ERR"), "{refused}");
    assert!(server.log().contains("could not register CL.THROTTLE"), "the log says why");

    // Everything the module subscribed to happens now: a fork, a flush,
    // keyspace events, a load.
    let _: () = call(&mut c, "SET s 1").expect("SET");
    let _: i64 = call(&mut c, "DEL s").expect("DEL");
    let _: String = call(&mut c, "BGSAVE").expect("BGSAVE");
    wait_until("BGSAVE", Duration::from_secs(20), || info_number(&mut c, "persistence", "rdb_bgsave_in_progress") == 0);
    assert_eq!(info_field(&mut c, "persistence", "rdb_last_bgsave_status").as_deref(), Some("ok"));
    let _: () = call(&mut c, "FLUSHALL").expect("FLUSHALL");
    let _: String = call(&mut c, "DEBUG RELOAD").expect("DEBUG RELOAD");
    assert!(server.alive());

    // With CL.THROTTLE off it loads, and the other module keeps its command.
    let _: () = call(&mut c, &format!("MODULE LOAD {} cl-throttle no", module.display())).expect("MODULE LOAD");
    assert_eq!(throttle(&mut c, MINUTE_LIMIT).0, 1);
    assert_eq!(call::<String>(&mut c, "CL.THROTTLE k 1 1 1").expect("CL.THROTTLE"), "OWNED");
    let _: String = call(&mut c, "BGSAVE").expect("BGSAVE");
    wait_until("BGSAVE", Duration::from_secs(20), || info_number(&mut c, "persistence", "rdb_bgsave_in_progress") == 0);
    assert!(server.alive());
}

// ---------------------------------------------------------------------------
// 3. Writes the server refuses, and cluster slot migration
// ---------------------------------------------------------------------------

/// When its time comes, a waiter is served only where a command could
/// write: with `min-replicas-to-write` unmet or over `maxmemory` it gets
/// the error a command would get, and the key stays as it was.
#[test]
fn a_waiter_is_not_served_where_a_command_could_not_write() {
    for (setting, undo, code) in
        [("min-replicas-to-write 1", "min-replicas-to-write 0", "NOREPLICAS"), ("maxmemory 1", "maxmemory 0", "OOM")]
    {
        let server = Server::start();
        let mut c = open(&server.url());
        let line = "THROTTLE.FIXED w 2 1h";
        assert_eq!(throttle(&mut c, &format!("{line} COST 2")).0, 1);
        let waiter = Waiter::queued(&server.url(), &mut c, &format!("{line} BLOCK 60000"), 1);
        // One transaction gives a unit back (the waiter's turn: the module
        // serves it from its timer once the transaction is over), then
        // stops the server from taking writes.
        let () = redis::pipe()
            .atomic()
            .add_command(common::command(&format!("{line} COST -1")))
            .ignore()
            .add_command(common::command(&format!("CONFIG SET {setting}")))
            .ignore()
            .query(&mut c)
            .expect("the transaction");
        let e = waiter.error();
        assert_eq!(e.code(), Some(code), "{setting}: {e}");
        let _: () = call(&mut c, &format!("CONFIG SET {undo}")).expect("CONFIG SET");
        // The key holds what the refund left, never a new admission.
        let after: Vec<redis::Value> = call(&mut c, "THROTTLE.INFO w").expect("INFO");
        let used =
            after.iter().position(|v| *v == redis::Value::SimpleString("used".into())).and_then(|i| after.get(i + 1));
        assert_eq!(used, Some(&redis::Value::Int(1)), "{setting}: the waiter changed the key: {after:?}");
        assert_eq!(waiting(&mut c), 0);
    }
}

/// Over `maxmemory`, a waiter whose turn comes is served wherever a command
/// issued then would run. Redis evicts before it runs a command and refuses
/// it only where eviction cannot help: with `noeviction`, or with no key
/// the policy may evict (none with a TTL for `volatile-*`). One transaction
/// gives the waiter its turn (a refund) and takes memory past the limit
/// (one large write); no command runs between it and the waiter's turn,
/// which the module's timer serves once the transaction is over: nothing
/// evicts in between.
#[test]
fn a_waiter_over_maxmemory_is_served_where_eviction_would_make_room() {
    // (policy, the limiter's key loses its TTL, served)
    let cases = [
        ("allkeys-lfu", false, true),
        ("volatile-lru", false, true),
        ("noeviction", false, false),
        ("volatile-lru", true, false),
    ];
    for (policy, persist, served) in cases {
        let server = Server::start_with(&["--maxmemory-policy", policy]);
        let mut c = open(&server.url());
        for i in 0..200 {
            let _: () = call(&mut c, &format!("SET filler:{i} {}", "x".repeat(1000))).expect("SET");
        }
        let line = "THROTTLE.FIXED hot 2 1h";
        assert_eq!(throttle(&mut c, &format!("{line} COST 2")).0, 1);
        let waiter = Waiter::queued(&server.url(), &mut c, &format!("{line} BLOCK 60000"), 1);
        let used = info_number(&mut c, "memory", "used_memory");
        let _: () = call(&mut c, &format!("CONFIG SET maxmemory {}", used + 100_000)).expect("CONFIG SET");
        // The refund sets the key's TTL again: PERSIST comes after it.
        let mut transaction = redis::pipe();
        transaction.atomic().add_command(common::command(&format!("{line} COST -1"))).ignore();
        if persist {
            transaction.cmd("PERSIST").arg("hot").ignore();
        }
        let () = transaction.cmd("SETRANGE").arg("big").arg(500_000).arg("x").ignore().query(&mut c).expect("EXEC");
        let result = waiter.result().0;
        // This is the first command since the large write: Redis evicts
        // before it runs it, so memory was over the limit until now.
        let evicted = info_number(&mut c, "stats", "evicted_keys");
        let _: () = call(&mut c, "CONFIG SET maxmemory 0").expect("CONFIG SET");
        match result {
            Ok(v) => assert!(served && v[..4] == [1, 2, 0, 0], "{policy}, PERSIST {persist}: {v:?}"),
            Err(e) => assert!(!served && e.code() == Some("OOM"), "{policy}, PERSIST {persist}: {e}"),
        }
        assert_eq!(evicted > 0, served, "{policy}, PERSIST {persist}: {evicted} keys evicted");
        assert_eq!(waiting(&mut c), 0);
    }
}

/// On a writable replica (`replica-read-only no`) a waiter is served as the
/// same call without `BLOCK` is; where the replica is read-only, Redis
/// refuses the call itself.
#[test]
fn a_waiter_on_a_writable_replica_is_served_as_a_command_is() {
    let (_master, replica) = master_and_replica();
    let mut r = open(&replica.url());
    let line = "THROTTLE.FIXED w 2 1h";
    let e = error(&mut r, line);
    assert!(e.starts_with("READONLY"), "a read-only replica: {e}");
    let _: () = call(&mut r, "CONFIG SET replica-read-only no").expect("CONFIG SET");
    assert_eq!(throttle(&mut r, &format!("{line} COST 2")).0, 1);
    let waiter = Waiter::queued(&replica.url(), &mut r, &format!("{line} BLOCK 60000"), 1);
    // A unit back: the waiter's turn.
    assert_eq!(throttle(&mut r, &format!("{line} COST -1")).0, 1);
    let (got, _) = waiter.reply();
    assert_eq!((got.0, got.1, got.2, got.3), (1, 2, 0, 0), "{got:?}");
    assert_eq!(waiting(&mut r), 0);
}

struct Cluster {
    nodes: [Server; 2],
    ids: [String; 2],
}

/// Two masters on loopback; the first owns every slot.
fn two_node_cluster() -> Cluster {
    let node = || {
        Server::start_prepared(
            free_cluster_port(),
            |_| {},
            &["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"],
        )
    };
    let nodes = [node(), node()];
    let mut a = open(&nodes[0].url());
    let mut b = open(&nodes[1].url());
    let _: () = call(&mut a, "CLUSTER ADDSLOTSRANGE 0 16383").expect("ADDSLOTSRANGE");
    let _: () = call(&mut a, &format!("CLUSTER MEET 127.0.0.1 {}", nodes[1].port)).expect("MEET");
    for c in [&mut a, &mut b] {
        wait_until("the cluster to form", Duration::from_secs(20), || {
            let info: String = call(c, "CLUSTER INFO").unwrap_or_default();
            let nodes: String = call(c, "CLUSTER NODES").unwrap_or_default();
            info.contains("cluster_state:ok") && nodes.lines().count() == 2 && !nodes.contains("handshake")
        });
    }
    let id = |c: &mut redis::Connection| call::<String>(c, "CLUSTER MYID").expect("MYID");
    let ids = [id(&mut a), id(&mut b)];
    Cluster { nodes, ids }
}

/// A waiter whose key's slot moves to another node is never served by the
/// old node: it is redirected, as Redis redirects its own blocked clients,
/// and the old node creates nothing in a slot it no longer owns.
#[test]
fn a_waiter_whose_slot_moves_is_redirected_not_served() {
    let cluster = two_node_cluster();
    let [from, to] = &cluster.nodes;
    let mut a = open(&from.url());
    let mut b = open(&to.url());
    // A minute's window: the waiter's own turn never comes during the test.
    let line = "THROTTLE.FIXED {m}k 1 1m";
    let slot: i64 = call(&mut a, "CLUSTER KEYSLOT {m}k").expect("KEYSLOT");
    assert_eq!(throttle(&mut a, line).0, 1);
    let waiter = Waiter::queued(&from.url(), &mut a, &format!("{line} BLOCK 60000"), 1);

    let _: () = call(&mut b, &format!("CLUSTER SETSLOT {slot} IMPORTING {}", cluster.ids[0])).expect("IMPORTING");
    let _: () = call(&mut a, &format!("CLUSTER SETSLOT {slot} MIGRATING {}", cluster.ids[1])).expect("MIGRATING");
    let _: () = call(&mut a, &format!("MIGRATE 127.0.0.1 {} {{m}}k 0 5000", to.port)).expect("MIGRATE");
    for c in [&mut b, &mut a] {
        let _: () = call(c, &format!("CLUSTER SETSLOT {slot} NODE {}", cluster.ids[1])).expect("SETSLOT NODE");
    }

    let e = waiter.error();
    let code = e.code().unwrap_or_default();
    assert!(code == "MOVED" || code == "ASK", "redirected: {e}");
    let left: i64 = call(&mut a, &format!("CLUSTER COUNTKEYSINSLOT {slot}")).expect("COUNTKEYSINSLOT");
    assert_eq!(left, 0, "the old node created the key in a slot it no longer owns");
    let moved: redis::Value = call(&mut b, "THROTTLE.INFO {m}k").expect("INFO on the new owner");
    assert_ne!(moved, redis::Value::Nil, "the limiter moved with its slot");
    assert_eq!(waiting(&mut a), 0);
}

// ---------------------------------------------------------------------------
// 4. Other commands on a waited key
// ---------------------------------------------------------------------------

/// Whatever removes or replaces a waited key releases its waiters at once:
/// an operator's DEL resets a user's limit and lets the waiting calls in.
/// (Their window lasts a minute and their BLOCK 30 s: a waiter the
/// operation did not release gets no reply before the read gives up.)
#[test]
fn commands_that_remove_a_waited_key_release_its_waiters_at_once() {
    let server = Server::start();
    let mut c = open(&server.url());
    for operation in [
        "DEL k",
        "UNLINK k",
        "FLUSHDB",
        "FLUSHALL",
        "FLUSHALL ASYNC",
        "RENAME k elsewhere",
        "MOVE k 1",
        "SWAPDB 0 1",
        "PEXPIRE k 1",
    ] {
        let _: () = call(&mut c, "FLUSHALL").expect("FLUSHALL");
        let waiter = waiter_on(&server, &mut c, MINUTE_LIMIT, 30_000);
        let _: redis::Value = call(&mut c, operation).unwrap_or_else(|e| panic!("{operation}: {e}"));
        let (got, _) = waiter.reply();
        assert_eq!(got, (1, 1, 0, 0, 60_000), "{operation}: admitted on a fresh key");
        assert_eq!(waiting(&mut c), 0, "{operation}");
    }
}

/// A key replaced by another value (RESTORE ... REPLACE, RENAME onto it,
/// SET) has its waiters re-evaluated at once against what it now holds.
#[test]
fn commands_that_replace_a_waited_key_reevaluate_its_waiters_at_once() {
    let server = Server::start();
    let mut c = open(&server.url());
    let _: () = call(&mut c, "SET text v").expect("SET");
    let dump: Vec<u8> = redis::cmd("DUMP").arg("text").query(&mut c).expect("DUMP");
    for operation in ["RESTORE", "RENAME text k", "SET k v"] {
        let _: () = call(&mut c, "FLUSHALL").expect("FLUSHALL");
        let _: () = call(&mut c, "SET text v").expect("SET");
        let waiter = waiter_on(&server, &mut c, MINUTE_LIMIT, 30_000);
        if operation == "RESTORE" {
            let _: () = redis::cmd("RESTORE").arg("k").arg(0).arg(&dump).arg("REPLACE").query(&mut c).expect("RESTORE");
        } else {
            let _: () = call(&mut c, operation).unwrap_or_else(|e| panic!("{operation}: {e}"));
        }
        // Told by the re-evaluation: a time-out would be a limited reply,
        // and comes after the read gives up.
        let e = waiter.error();
        assert_eq!(e.code(), Some("WRONGTYPE"), "{operation}: {e}");
    }
}

/// Eviction under `maxmemory` releases a waited key's waiters at once.
#[test]
fn eviction_of_a_waited_key_releases_its_waiters() {
    let server = Server::start_with(&["--maxmemory-policy", "volatile-ttl"]);
    let mut c = open(&server.url());
    let waiter = waiter_on(&server, &mut c, MINUTE_LIMIT, 30_000);
    for i in 0..200 {
        let _: () = call(&mut c, &format!("SET filler:{i} {}", "x".repeat(200))).expect("SET");
    }
    // Only the limiter has a TTL: volatile-ttl must evict it first.
    let used = info_number(&mut c, "memory", "used_memory");
    let _: () = call(&mut c, &format!("CONFIG SET maxmemory {}", used - 64)).expect("CONFIG SET");
    let _: redis::RedisResult<()> = call(&mut c, "SET trigger 1");
    // Left waiting, the waiter's read would give up: an error without OOM.
    let result = waiter.result().0;
    let _: () = call(&mut c, "CONFIG SET maxmemory 0").expect("CONFIG SET");
    assert!(info_number(&mut c, "stats", "evicted_keys") >= 1);
    // Admitted on the fresh key, or told the server is out of memory.
    match result {
        Ok(v) => assert_eq!(v, vec![1, 1, 0, 0, 60_000]),
        Err(e) => assert_eq!(e.code(), Some("OOM"), "{e}"),
    }
}

// ---------------------------------------------------------------------------
// 5. WATCH, 6. keyspace notifications, 7. TTLs
// ---------------------------------------------------------------------------

/// `WATCH k` then `MULTI ... EXEC` succeeds unless `k` changed in between.
fn exec_after(c: &mut redis::Connection, other: &mut redis::Connection, line: &str) -> bool {
    let _: () = call(c, "WATCH k").expect("WATCH");
    let _: redis::Value = call(other, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    let _: () = call(c, "MULTI").expect("MULTI");
    let _: redis::Value = call(c, "SET untouched 1").expect("queued");
    let exec: redis::Value = call(c, "EXEC").expect("EXEC");
    exec != redis::Value::Nil
}

/// Only a call that changes a key touches it: reads, peeks and limited
/// calls leave a WATCH on it alone.
#[test]
fn only_a_change_touches_a_watched_key() {
    let server = Server::start();
    let mut c = open(&server.url());
    let mut other = open(&server.url());
    assert_eq!(throttle(&mut other, "THROTTLE.FIXED k 1 60s").0, 1);
    for line in
        ["THROTTLE.INFO k", "THROTTLE.FIXED k 1 60s COST 0", "THROTTLE.FIXED k 1 60s", "THROTTLE.FIXED k 1 60s AT 1"]
    {
        assert!(exec_after(&mut c, &mut other, line), "`{line}` changed nothing, yet aborted the transaction");
    }
    let _: () = call(&mut other, "DEL k").expect("DEL");
    assert!(!exec_after(&mut c, &mut other, "THROTTLE.FIXED k 1 60s"), "an admitted call changes the key");
    assert!(!exec_after(&mut c, &mut other, "THROTTLE.FIXED k 1 60s COST -1"), "a refund changes the key");
    for line in ["THROTTLE.TOKEN t 1 60s", "THROTTLE.SLIDING s 1 60s EXACT"] {
        let key = line.split(' ').nth(1).unwrap_or_default();
        assert_eq!(throttle(&mut other, line).0, 1);
        let _: () = call(&mut c, &format!("WATCH {key}")).expect("WATCH");
        assert_eq!(throttle(&mut other, line).0, 0);
        let _: () = call(&mut c, "MULTI").expect("MULTI");
        let exec: redis::Value = call(&mut c, "EXEC").expect("EXEC");
        assert_ne!(exec, redis::Value::Nil, "a limited `{line}` aborted the transaction");
    }
}

/// Keyspace notifications: a module-class event named after the command
/// on each change, `del` when a refund empties a key, nothing for peeks
/// and limited calls.
#[test]
fn each_change_emits_a_keyspace_event() {
    let server = Server::start();
    let mut c = open(&server.url());
    let _: () = call(&mut c, "CONFIG SET notify-keyspace-events KEA").expect("CONFIG SET");
    let mut listener = server.conn();
    let mut pubsub = listener.as_pubsub();
    pubsub.psubscribe("__keyevent@0__:*").expect("PSUBSCRIBE");
    pubsub.set_read_timeout(Some(Duration::from_millis(500))).expect("read timeout");
    let steps: &[(&str, &[&str])] = &[
        ("THROTTLE.FIXED f 1 60s", &["throttle.fixed"]),
        ("THROTTLE.FIXED f 1 60s", &[]),
        ("THROTTLE.FIXED f 1 60s COST 0", &[]),
        ("THROTTLE.INFO f", &[]),
        ("THROTTLE.SLIDING s 5 60s", &["throttle.sliding"]),
        ("THROTTLE.SLIDING e 5 60s EXACT", &["throttle.sliding"]),
        ("THROTTLE.TOKEN t 5 60s", &["throttle.token"]),
        ("THROTTLE.LEAKY l 5 60s", &["throttle.leaky"]),
        ("THROTTLE.TOKEN t 5 60s COST -1", &["throttle.token", "del"]),
        ("THROTTLE.FIXED f 1 60s COST -1", &["throttle.fixed", "del"]),
        ("THROTTLE.ALL FIXED a 1 60s TOKEN b 1 60s", &["throttle.fixed", "throttle.token"]),
        ("CL.THROTTLE c 5 1 60", &["cl.throttle"]),
        ("SET marker 1", &["set"]),
    ];
    for (line, _) in steps {
        let _: redis::Value = call(&mut c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    let mut events = Vec::new();
    while let Ok(message) = pubsub.get_message() {
        let key: String = message.get_payload().expect("payload");
        let event = message.get_channel_name().trim_start_matches("__keyevent@0__:").to_string();
        let done = key == "marker";
        events.push(format!("{event} {key}"));
        if done {
            break;
        }
    }
    let mut want = Vec::new();
    for (line, names) in steps {
        let words: Vec<&str> = line.split(' ').collect();
        let keys: Vec<&str> = if words[0] == "THROTTLE.ALL" { vec![words[2], words[6]] } else { vec![words[1]] };
        for (i, name) in names.iter().enumerate() {
            let key = if keys.len() > 1 { keys[i] } else { keys[0] };
            want.push(format!("{name} {key}"));
        }
    }
    assert_eq!(events, want);
}

/// Every change leaves the key's TTL at its `reset_after`, even after the
/// TTL was taken away (PERSIST, or a RESTORE without one).
#[test]
fn a_change_always_restores_the_ttl() {
    let server = Server::start();
    let mut c = open(&server.url());
    let pttl = |c: &mut redis::Connection| call::<i64>(c, "PTTL k").expect("PTTL");
    // The TTL a change sets: its reset_after, less no more than the time
    // since the call, as measured here.
    let change = |c: &mut redis::Connection| {
        let called = Instant::now();
        let got = throttle(c, "THROTTLE.FIXED k 5 60s");
        let ttl = pttl(c);
        let since = called.elapsed().as_micros().div_ceil(1000) as i64 + 1;
        assert!((got.4 - since..=got.4).contains(&ttl), "PTTL {ttl} after a change with reset_after {}", got.4);
    };
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED k 5 60s").0, 1);
    let _: i64 = call(&mut c, "PERSIST k").expect("PERSIST");
    assert_eq!(pttl(&mut c), -1);
    change(&mut c);

    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut c).expect("DUMP");
    let _: () = redis::cmd("RESTORE").arg("k").arg(0).arg(dump).arg("REPLACE").query(&mut c).expect("RESTORE");
    assert_eq!(pttl(&mut c), -1);
    change(&mut c);
}

// ---------------------------------------------------------------------------
// 8. ACL
// ---------------------------------------------------------------------------

/// On servers with module ACL categories, `@throttle` (and `@fast`) hold the
/// commands users call, never the internal ones: a user granted
/// `+@throttle ~api:*` cannot overwrite keys with THROTTLE._LOAD.
#[test]
fn the_throttle_category_leaves_out_internal_commands() {
    let server = Server::start();
    let mut c = open(&server.url());
    let Ok(throttle_category) = call::<Vec<String>>(&mut c, "ACL CAT throttle") else {
        // Redis 7.0: no module categories; commands are granted by name.
        return;
    };
    let fast: Vec<String> = call(&mut c, "ACL CAT fast").expect("ACL CAT fast");
    for command in
        ["throttle.fixed", "throttle.sliding", "throttle.token", "throttle.leaky", "throttle.all", "throttle.info"]
    {
        assert!(throttle_category.iter().any(|c| c.eq_ignore_ascii_case(command)), "{command} in @throttle");
    }
    let internal: Vec<&String> =
        throttle_category.iter().chain(&fast).filter(|c| c.to_ascii_lowercase().starts_with("throttle._")).collect();
    assert!(internal.is_empty(), "internal commands in @throttle or @fast: {internal:?}");
    let _: () = call(&mut c, "ACL SETUSER api on >pw +@throttle ~api:*").expect("ACL SETUSER");
    let mut user = open(&server.url());
    let _: () = call(&mut user, "AUTH api pw").expect("AUTH");
    assert_eq!(throttle(&mut user, "THROTTLE.FIXED api:1 1 60s").0, 1);
    let e = error(&mut user, "THROTTLE._LOAD api:1 thr-fixed 1 1 1 1 1 1000000");
    assert!(e.starts_with("NOPERM"), "{e}");
}

// ---------------------------------------------------------------------------
// 9. SLIDING EXACT memory, 10. BLOCK at scale
// ---------------------------------------------------------------------------

/// A SLIDING EXACT log gives its memory back as its entries leave the
/// window (it once kept its peak capacity for good). Its window is an hour
/// (every call dated 2023): the key's TTL counts from each call on the
/// server's clock, and must outlast the reading of 100,000 replies however
/// slowly the machine does it.
#[test]
fn a_drained_exact_log_gives_its_memory_back() {
    let server = Server::start();
    let mut c = open(&server.url());
    let t = 1_700_000_000_000_000u64;
    let entries = 100_000u64;
    let mut pipe = redis::pipe();
    for i in 0..entries {
        pipe.cmd("THROTTLE.SLIDING").arg("e").arg(entries).arg("1h").arg("EXACT").arg("AT").arg(t + i).ignore();
    }
    let _: () = pipe.query(&mut c).expect("pipeline");
    let memory = |c: &mut redis::Connection| call::<i64>(c, "MEMORY USAGE e").expect("MEMORY USAGE");
    let full = memory(&mut c);
    assert!(full >= 4 * entries as i64, "{entries} entries in {full} bytes");
    // All of them have left the window: the log holds the new call only.
    let got = throttle(&mut c, &format!("THROTTLE.SLIDING e {entries} 1h EXACT AT {}", t + 3_620_000_000));
    assert_eq!((got.0, got.2), (1, entries as i64 - 1));
    let drained = memory(&mut c);
    assert!(drained < 1024, "a one-entry log still takes {drained} bytes (it took {full})");
}

/// Caps on waiters, per key and in total, are module settings; a `BLOCK`
/// call over one answers at once as if it had no `BLOCK`, and is counted.
#[test]
fn waiters_over_a_cap_answer_at_once_and_are_counted() {
    let server = Server::start_with(&["--throttle.max-waiters", "5"]);
    let mut c = open(&server.url());
    let config = |c: &mut redis::Connection, name: &str| -> String {
        let v: Vec<String> = call(c, &format!("CONFIG GET throttle.{name}")).expect("CONFIG GET");
        v.get(1).cloned().unwrap_or_default()
    };
    assert_eq!(config(&mut c, "max-waiters-per-key"), "1000");
    assert_eq!(config(&mut c, "max-waiters"), "5", "set from the server's configuration");
    let over_cap = |c: &mut redis::Connection| {
        let line = info_field(c, "throttle", "throttle_fixed").unwrap_or_default();
        line.split(',').find_map(|f| f.strip_prefix("over_cap=")).and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1)
    };
    assert_eq!(over_cap(&mut c), 0);

    let _: () = call(&mut c, "CONFIG SET throttle.max-waiters-per-key 2").expect("CONFIG SET");
    let first = waiter_on(&server, &mut c, MINUTE_LIMIT, 30_000);
    let second = Waiter::queued(&server.url(), &mut c, &format!("{MINUTE_LIMIT} BLOCK 30000"), 2);
    let blocked = info_field(&mut c, "throttle", "throttle_fixed").unwrap_or_default();
    let third = throttle(&mut c, &format!("{MINUTE_LIMIT} BLOCK 30000"));
    // Answered at once: it never counted as blocked, and two still wait.
    let field = |line: &str, name: &str| line.split(',').find_map(|f| f.strip_prefix(name)).map(str::to_string);
    let now = info_field(&mut c, "throttle", "throttle_fixed").unwrap_or_default();
    assert_eq!(field(&now, "blocked="), field(&blocked, "blocked="), "the call over the cap waited: {now}");
    assert_eq!(waiting(&mut c), 2);
    assert_eq!((third.0, third.1, third.2), (0, 1, 0), "the limited reply");
    assert!(third.3 > 0);
    assert_eq!(over_cap(&mut c), 1);

    // The total: 2 wait on k, 3 more fit anywhere.
    let _: () = call(&mut c, "CONFIG SET throttle.max-waiters-per-key 100").expect("CONFIG SET");
    let more: Vec<Waiter> = (0..3)
        .map(|i| {
            let key = format!("THROTTLE.FIXED other{i} 1 60s");
            assert_eq!(throttle(&mut c, &key).0, 1);
            Waiter::queued(&server.url(), &mut c, &format!("{key} BLOCK 30000"), 3 + i)
        })
        .collect();
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED other9 1 60s").0, 1);
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED other9 1 60s BLOCK 30000").0, 0);
    assert_eq!((over_cap(&mut c), waiting(&mut c)), (2, 5));

    let e = error(&mut c, "CONFIG SET throttle.max-waiters -1");
    assert!(e.starts_with("ERR"), "{e}");
    // FLUSHALL releases them: each key admits one call a minute.
    for waiters in [std::iter::once(first).chain(more).collect::<Vec<_>>(), vec![second]] {
        let _: () = call(&mut c, "FLUSHALL").expect("FLUSHALL");
        for w in waiters {
            assert_eq!(w.reply().0 .0, 1, "released by FLUSHALL and admitted");
        }
    }
    assert_eq!(waiting(&mut c), 0);
}

/// A waiter's `BLOCK` time runs on a monotonic clock: a step of the wall
/// clock (an operator's `date -s`, an NTP jump) neither stretches nor cuts
/// it. The debug build's `THROTTLE._CLOCK` steps the module's wall clock.
/// A cut shows as a reply before the 1.5 s are up; a stretch by the hour
/// as no reply before the read gives up.
#[test]
fn a_wall_clock_step_neither_stretches_nor_cuts_a_wait() {
    let module = common::debug_module();
    let server = Server::start_with_module(&module, &[]);
    let mut c = open(&server.url());
    let hour_us: i64 = 3_600_000_000;
    for step in [-hour_us, hour_us] {
        let _: () = call(&mut c, "FLUSHALL").expect("FLUSHALL");
        let _: () = call(&mut c, "THROTTLE._CLOCK 0").expect("clock");
        let blocked = Instant::now();
        let waiter = waiter_on(&server, &mut c, MINUTE_LIMIT, 1500);
        let _: () = call(&mut c, &format!("THROTTLE._CLOCK {step}")).expect("clock");
        let (result, at) = waiter.result();
        let got =
            result.unwrap_or_else(|e| panic!("step {step}: no reply to BLOCK 1500 ({e}): the wait was stretched"));
        assert_eq!(got.len(), 5, "step {step}: {got:?}");
        let waited = at.duration_since(blocked);
        assert!(waited >= Duration::from_millis(1400), "step {step}: answered after {waited:?} of BLOCK 1500");
    }
    let _: () = call(&mut c, "THROTTLE._CLOCK 0").expect("clock");
}

/// The id of the client whose last command was `command` (lower case).
fn client_id(c: &mut redis::Connection, command: &str) -> i64 {
    let list: String = call(c, "CLIENT LIST").expect("CLIENT LIST");
    let list = list.to_ascii_lowercase();
    let line = list
        .lines()
        .find(|l| l.contains(&format!(" cmd={command} ")))
        .unwrap_or_else(|| panic!("no {command} client in {list}"));
    line.split(' ').find_map(|f| f.strip_prefix("id=")).and_then(|v| v.parse().ok()).expect("id")
}

/// `CLIENT UNBLOCK` answers a waiter as Redis answers its own blocked
/// clients: with its reply as it stands, changing nothing (`TIMEOUT`, the
/// default), or with Redis's `-UNBLOCKED` error (`ERROR`).
#[test]
fn client_unblock_answers_a_waiter() {
    let server = Server::start();
    let mut c = open(&server.url());
    let waiter = waiter_on(&server, &mut c, MINUTE_LIMIT, 0);
    let before = common::digest(&mut c, "k");
    let id = client_id(&mut c, "throttle.fixed");
    assert_eq!(call::<i64>(&mut c, &format!("CLIENT UNBLOCK {id}")).expect("CLIENT UNBLOCK"), 1);
    let (got, _) = waiter.reply();
    assert_eq!((got.0, got.1, got.2), (0, 1, 0), "the limited reply");
    assert!(got.3 > 0 && got.4 > 0);
    assert_eq!(common::digest(&mut c, "k"), before, "unblocking changed the key");
    assert_eq!(waiting(&mut c), 0);

    let waiter = Waiter::queued(&server.url(), &mut c, &format!("{MINUTE_LIMIT} BLOCK 0"), 1);
    let id = client_id(&mut c, "throttle.fixed");
    assert_eq!(call::<i64>(&mut c, &format!("CLIENT UNBLOCK {id} ERROR")).expect("CLIENT UNBLOCK"), 1);
    assert_eq!(waiter.error().code(), Some("UNBLOCKED"));
    assert_eq!(waiting(&mut c), 0);
}
