//! The extensions of the interface contract (COMMANDS.md, "Extensions"):
//! `BLOCK ms`, refunds (negative `COST`), `THROTTLE.ALL`, `THROTTLE.INFO`,
//! RESP3 maps and the `throttle_stats` INFO section, against real
//! `redis-server` processes: standalone, master with replica, and a
//! three-master cluster.
//!
//! Time is driven with `AT` wherever the behaviour allows. `BLOCK` waits on
//! the server's clock by nature, and no test bounds how long a reply takes:
//! they assert on the replies, on the module's counters (a call that
//! waited counts once as `blocked`; one answered at once does not), on who
//! still waits when another reply comes, and on the earliest time a reply
//! may come (a loaded machine only makes it later). A waiter that something
//! must wake waits a minute, and reads give up after ten seconds: one left
//! waiting fails its test, never by a clock's measure, and never hangs it.

mod common;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    blocked_clients, call, command, error, info_field, info_number, master_and_replica, open, send_raw, sync, throttle,
    wait_until, waiting, Reply, Server, Waiter, READ_TIMEOUT,
};
use redis::Value;

/// A fixed `AT` base, 2023-11-14 22:00:00 UTC: on a whole hour, so SLIDING
/// windows of a second, a minute or an hour start exactly here.
const T: u64 = 1_699_999_200_000_000;
const SECOND: u64 = 1_000_000;
const MS: u64 = 1_000;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn resp3_url(server: &Server) -> String {
    format!("{}?protocol=resp3", server.url())
}

/// One command's line of the `throttle_stats` section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counters {
    calls: u64,
    admitted: u64,
    limited: u64,
    blocked: u64,
    timed_out: u64,
}

fn counters(c: &mut redis::Connection, command: &str) -> Counters {
    let field = format!("throttle_{command}");
    let line = info_field(c, "throttle", &field).unwrap_or_else(|| panic!("no {field} in INFO throttle"));
    let mut out = Counters::default();
    for pair in line.split(',') {
        let (name, value) = pair.split_once('=').unwrap_or_else(|| panic!("{field}:{line}"));
        let value: u64 = value.parse().unwrap_or_else(|_| panic!("{field}:{line}"));
        match name {
            "calls" => out.calls = value,
            "admitted" => out.admitted = value,
            "limited" => out.limited = value,
            "blocked" => out.blocked = value,
            "timed_out" => out.timed_out = value,
            _ => {}
        }
    }
    out
}

fn stats(calls: u64, admitted: u64, limited: u64, blocked: u64, timed_out: u64) -> Counters {
    Counters { calls, admitted, limited, blocked, timed_out }
}

/// Runs a `BLOCK` call that must be answered at once: its reply, and proof
/// that it never waited (the command's `blocked` counter did not move;
/// every call that waits counts there when it starts waiting).
fn at_once(c: &mut redis::Connection, command: &str, line: &str) -> Reply {
    let before = counters(c, command);
    let got = throttle(c, line);
    let after = counters(c, command);
    assert_eq!(after.calls, before.calls + 1, "{line}: counted once");
    assert_eq!(after.blocked, before.blocked, "{line}: waited, instead of answering at once");
    got
}

/// The ids of the clients blocked in a THROTTLE command (CLIENT LIST).
fn waiting_client_ids(c: &mut redis::Connection) -> Vec<i64> {
    let list: String = call(c, "CLIENT LIST").expect("CLIENT LIST");
    list.lines()
        .filter(|l| l.to_ascii_lowercase().contains(" cmd=throttle.") && l.contains(" flags=b"))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")).and_then(|v| v.parse().ok()))
        .collect()
}

/// `DEBUG DIGEST-VALUE key` (all zeros for a missing key).
fn digest(c: &mut redis::Connection, key: &str) -> String {
    let v: Vec<String> = call(c, &format!("DEBUG DIGEST-VALUE {key}")).unwrap_or_else(|e| panic!("digest {key}: {e}"));
    assert_eq!(v.len(), 1, "digest {key}: {v:?}");
    v.into_iter().next().unwrap_or_default()
}

const NO_DIGEST: &str = "0000000000000000000000000000000000000000";

fn exists(c: &mut redis::Connection, key: &str) -> i64 {
    call(c, &format!("EXISTS {key}")).expect("EXISTS")
}

fn reply_of(line: &str, v: &[i64]) -> Reply {
    assert_eq!(v.len(), 5, "{line}: {v:?}");
    (v[0], v[1], v[2], v[3], v[4])
}

/// A five-integer reply from a RESP2 value.
fn five(v: &Value) -> Reply {
    let Value::Array(items) = v else { panic!("expected five integers, got {v:?}") };
    let ints: Vec<i64> = items
        .iter()
        .map(|i| match i {
            Value::Int(n) => *n,
            other => panic!("expected an integer, got {other:?} in {v:?}"),
        })
        .collect();
    reply_of("reply", &ints)
}

/// `THROTTLE.ALL`'s RESP2 reply: allowed, then one reply per spec.
fn all_reply(v: &Value) -> (i64, Vec<Reply>) {
    let Value::Array(items) = v else { panic!("expected an array, got {v:?}") };
    let Some((Value::Int(allowed), specs)) = items.split_first() else { panic!("expected allowed first, got {v:?}") };
    (*allowed, specs.iter().map(five).collect())
}

fn all(c: &mut redis::Connection, line: &str) -> (i64, Vec<Reply>) {
    let v: Value = call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    all_reply(&v)
}

fn text(v: &Value) -> String {
    match v {
        Value::SimpleString(s) => s.clone(),
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Okay => "OK".into(),
        other => panic!("expected a string, got {other:?}"),
    }
}

/// Field-value pairs from a RESP3 map or a RESP2 flat array; a field named
/// twice fails.
fn pairs(v: &Value) -> BTreeMap<String, Value> {
    let list: Vec<(String, Value)> = match v {
        Value::Map(p) => p.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "odd field-value list: {v:?}");
            items.chunks(2).map(|kv| (text(&kv[0]), kv[1].clone())).collect()
        }
        other => panic!("expected field-value pairs, got {other:?}"),
    };
    let n = list.len();
    let map: BTreeMap<String, Value> = list.into_iter().collect();
    assert_eq!(map.len(), n, "a field repeats in {v:?}");
    map
}

/// What `THROTTLE.INFO` should answer.
fn info_fields(algorithm: &str, ints: &[(&str, i64)]) -> BTreeMap<String, Value> {
    let mut map = BTreeMap::new();
    map.insert("algorithm".to_string(), Value::BulkString(algorithm.as_bytes().to_vec()));
    for (name, value) in ints {
        map.insert(name.to_string(), Value::Int(*value));
    }
    map
}

/// What a RESP3 client should get for a decision.
fn decision_map(
    allowed: bool,
    limit: i64,
    remaining: i64,
    retry_after: i64,
    reset_after: i64,
) -> BTreeMap<String, Value> {
    [
        ("allowed", Value::Boolean(allowed)),
        ("limit", Value::Int(limit)),
        ("remaining", Value::Int(remaining)),
        ("retry_after", Value::Int(retry_after)),
        ("reset_after", Value::Int(reset_after)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// A RESP3 map reply, checked to be a map (not a flat array).
fn map_reply(v: &Value) -> BTreeMap<String, Value> {
    assert!(matches!(v, Value::Map(_)), "expected a RESP3 map, got {v:?}");
    pairs(v)
}

fn assert_same_on_replica(master: &mut redis::Connection, replica: &mut redis::Connection, keys: &[&str]) {
    for key in keys {
        let (m, r) = (digest(master, key), digest(replica, key));
        assert_ne!(m, NO_DIGEST, "{key} missing on the master");
        assert_eq!(m, r, "{key}: master and replica digests differ");
    }
}

// ---------------------------------------------------------------------------
// BLOCK
// ---------------------------------------------------------------------------

#[test]
fn block_waits_until_the_call_can_succeed_on_every_command() {
    let server = Server::start();
    let mut c = open(&server.url());
    // (command, key and quota, trailing options): each admits one call,
    // then frees a unit within 1 to 2 s. The key loses its TTL (its expiry
    // would wake the waiter as the unit frees) and the blocked call may
    // wait a minute: only the module's own timer, set for when the unit
    // frees, answers it before the read gives up.
    let cases = [
        ("THROTTLE.FIXED", "b:fixed 1 1s", ""),
        ("THROTTLE.SLIDING", "b:sliding 1 1s", ""),
        ("THROTTLE.SLIDING", "b:exact 1 1s", " EXACT"),
        ("THROTTLE.TOKEN", "b:token 1 1s", " BURST 1"),
        ("THROTTLE.LEAKY", "b:leaky 1 1s", " BURST 1"),
    ];
    for (name, args, tail) in cases {
        let plain = format!("{name} {args}{tail}");
        assert_eq!(throttle(&mut c, &plain).0, 1, "{plain}: first call");
        let key = args.split(' ').next().unwrap_or_default();
        assert_eq!(call::<i64>(&mut c, &format!("PERSIST {key}")).expect("PERSIST"), 1, "{key}");
        let before = Instant::now();
        let probe = throttle(&mut c, &plain);
        assert_eq!((probe.0, probe.2), (0, 0), "{plain}: the second call is limited: {probe:?}");
        assert!(probe.3 > 0, "{plain}: {probe:?}");
        let blocking = format!("{name} {args} BLOCK 60000{tail}");
        let got = throttle(&mut c, &blocking);
        let waited = before.elapsed();
        assert_eq!(got.0, 1, "{blocking}: admitted once it can be: {got:?}");
        let earliest = Duration::from_millis(probe.3 as u64 - 1);
        assert!(
            waited >= earliest,
            "{blocking}: answered after {waited:?}, before retry_after ({} ms) allows",
            probe.3
        );
    }
    assert_eq!((waiting(&mut c), blocked_clients(&mut c)), (0, 0));
    // Each blocked call counts once as blocked, then as admitted.
    assert_eq!(counters(&mut c, "fixed"), stats(3, 2, 1, 1, 0));
    assert_eq!(counters(&mut c, "sliding"), stats(6, 4, 2, 2, 0));
    assert_eq!(counters(&mut c, "token"), stats(3, 2, 1, 1, 0));
    assert_eq!(counters(&mut c, "leaky"), stats(3, 2, 1, 1, 0));
}

#[test]
fn waiters_of_one_key_are_admitted_in_arrival_order() {
    let server = Server::start();
    let url = server.url();
    let mut c = open(&url);
    // A window of 3 units an hour, used up; three waiters for one unit
    // each. A refund of the 3 lets them all in at once, in the order they
    // came: each one's `remaining` tells its place in the window.
    let line = "THROTTLE.FIXED fifo 3 1h";
    assert_eq!(throttle(&mut c, &format!("{line} COST 3")).0, 1);
    let blocking = format!("{line} BLOCK 60000");
    let waiters: Vec<Waiter> = (1..=3).map(|n| Waiter::queued(&url, &mut c, &blocking, n)).collect();
    assert_eq!(throttle(&mut c, &format!("{line} COST -3")).0, 1);
    let replies: Vec<Reply> = waiters.into_iter().map(|w| w.reply().0).collect();
    let remaining: Vec<i64> = replies.iter().map(|r| r.2).collect();
    assert_eq!(remaining, [2, 1, 0], "each waiter's place in the window, in arrival order: {replies:?}");
    for (i, r) in replies.iter().enumerate() {
        assert_eq!((r.0, r.1, r.3), (1, 3, 0), "waiter {i} admitted: {r:?}");
    }
    assert_eq!((waiting(&mut c), blocked_clients(&mut c)), (0, 0));
}

#[test]
fn a_later_call_that_fits_now_still_waits_behind_an_earlier_waiter() {
    let server = Server::start();
    let url = server.url();
    let mut c = open(&url);
    // One token every 6 minutes: none comes back while the test runs, the
    // refunds below give them. 4 left. A asks for 5; B, after it, for 1,
    // which the bucket holds right now: B still waits, behind A.
    let line = "THROTTLE.TOKEN overtake 10 1h";
    assert_eq!(throttle(&mut c, &format!("{line} COST 6")).2, 4);
    let a = Waiter::queued(&url, &mut c, &format!("{line} COST 5 BLOCK 60000"), 1);
    let b = Waiter::queued(&url, &mut c, &format!("{line} COST 1 BLOCK 60000"), 2);
    // One token back: A goes, takes all 5, and B, with none left, waits on.
    assert_eq!(throttle(&mut c, &format!("{line} COST -1")).0, 1);
    let (ra, _) = a.reply();
    assert_eq!((ra.0, ra.2), (1, 0), "A: {ra:?}");
    assert_eq!((waiting(&mut c), blocked_clients(&mut c)), (1, 1), "B waits: A took the tokens");
    // Another one back: B goes.
    assert_eq!(throttle(&mut c, &format!("{line} COST -1")).0, 1);
    let (rb, _) = b.reply();
    assert_eq!((rb.0, rb.2), (1, 0), "B: {rb:?}");
    assert_eq!(counters(&mut c, "token").blocked, 2);
}

#[test]
fn when_the_first_waiter_gives_up_the_next_is_admitted_as_soon_as_it_can_be() {
    let server = Server::start();
    let url = server.url();
    let mut c = open(&url);
    // One token a second. A needs all 10 (10 s away) but gives up after
    // 2 s; B, queued behind A, needs 1 token, which the bucket holds by
    // then: B goes in the very pass that answers A, not at A's turn. So by
    // the time A has its answer, nobody waits any more.
    let slow = common::slowdown();
    let line = format!("THROTTLE.TOKEN gives-up 10 {}s", 10 * slow);
    assert_eq!(throttle(&mut c, &format!("{line} COST 10")).0, 1);
    let a = Waiter::queued(&url, &mut c, &format!("{line} COST 10 BLOCK {}", 2_000 * slow), 1);
    let b = Waiter::queued(&url, &mut c, &format!("{line} COST 1 BLOCK 60000"), 2);
    let (ra, _) = a.reply();
    assert_eq!(ra.0, 0, "A timed out: {ra:?}");
    assert_eq!(
        (waiting(&mut c), blocked_clients(&mut c)),
        (0, 0),
        "B still waited when A left, though a token was there: it waits for A's turn"
    );
    let (rb, _) = b.reply();
    assert_eq!(rb.0, 1, "B: {rb:?}");
    assert_eq!(counters(&mut c, "token"), stats(3, 2, 0, 2, 1));
}

#[test]
fn block_times_out_with_the_normal_limited_reply() {
    let server = Server::start();
    let mut c = open(&server.url());
    let line = "THROTTLE.FIXED timeout 1 10s";
    let before = Instant::now();
    assert_eq!(throttle(&mut c, line).0, 1);
    let blocked = Instant::now();
    let got = throttle(&mut c, &format!("{line} BLOCK 300"));
    assert!(
        blocked.elapsed() >= Duration::from_millis(300),
        "answered after {:?}, before BLOCK 300 was up",
        blocked.elapsed()
    );
    // The window's time left when the 300 ms were up: at most 10 s less
    // those (the server's own clock says it was not answered sooner), at
    // least 10 s less all the time since the window opened, as measured here.
    let since_ms = before.elapsed().as_millis() as i64;
    assert_eq!((got.0, got.1, got.2), (0, 1, 0), "{got:?}");
    assert!(
        (10_000 - since_ms - 1..=9_701).contains(&got.3),
        "retry_after {since_ms} ms after the window opened: {got:?}"
    );
    assert!(
        (10_000 - since_ms - 1..=9_701).contains(&got.4),
        "reset_after {since_ms} ms after the window opened: {got:?}"
    );
    assert_eq!((waiting(&mut c), blocked_clients(&mut c)), (0, 0));
    assert_eq!(counters(&mut c, "fixed"), stats(2, 1, 0, 1, 1));
}

#[test]
fn block_zero_waits_with_no_time_out() {
    let server = Server::start();
    let mut c = open(&server.url());
    let line = "THROTTLE.FIXED forever 1 700ms";
    assert_eq!(throttle(&mut c, line).0, 1);
    let before = Instant::now();
    let probe = throttle(&mut c, line);
    assert_eq!(probe.0, 0);
    let got = throttle(&mut c, &format!("{line} BLOCK 0"));
    let waited = before.elapsed();
    assert_eq!(got.0, 1, "BLOCK 0 waits until admitted: {got:?}");
    assert!(waited >= Duration::from_millis(probe.3 as u64 - 1), "answered after {waited:?}, retry_after {}", probe.3);
    assert_eq!(counters(&mut c, "fixed").timed_out, 0);
}

#[test]
fn inside_multi_and_scripts_block_answers_at_once() {
    let server = Server::start();
    let url = server.url();
    let mut c = open(&url);
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED tx 1 10s").0, 1);
    assert_eq!(throttle(&mut c, "THROTTLE.TOKEN tx:t 1 10s").0, 1);
    // A client already waits on the key (until the test lets it go): the
    // transaction must not queue.
    let waiter = Waiter::queued(&url, &mut c, "THROTTLE.FIXED tx 1 10s BLOCK 60000", 1);
    // Answered at once: neither command's `blocked` counter moves, and the
    // one waiter is all that waits.
    let answered_at_once = |c: &mut redis::Connection, what: &str| {
        assert_eq!((counters(c, "fixed").blocked, counters(c, "token").blocked), (1, 0), "{what} waited");
        assert_eq!((waiting(c), blocked_clients(c)), (1, 1), "{what} waited");
    };

    let replies: Vec<Vec<i64>> = redis::pipe()
        .atomic()
        .add_command(command("THROTTLE.FIXED tx 1 10s BLOCK 0"))
        .add_command(command("THROTTLE.TOKEN tx:t 1 10s BLOCK 5000"))
        .query(&mut c)
        .expect("MULTI/EXEC");
    answered_at_once(&mut c, "MULTI/EXEC");
    assert_eq!(replies.len(), 2);
    for (line, r) in ["FIXED in MULTI", "TOKEN in MULTI"].iter().zip(&replies) {
        let r = reply_of(line, r);
        assert_eq!((r.0, r.2), (0, 0), "{line}: {r:?}");
        assert!(r.3 > 0, "{line}: {r:?}");
    }

    for (name, key) in [("THROTTLE.FIXED", "tx"), ("THROTTLE.TOKEN", "tx:t")] {
        let script = format!("return redis.call('{name}', KEYS[1], '1', '10s', 'BLOCK', '0')");
        let v: Vec<i64> = redis::cmd("EVAL").arg(&script).arg(1).arg(key).query(&mut c).expect("EVAL");
        answered_at_once(&mut c, &format!("{name} in EVAL"));
        let r = reply_of(&script, &v);
        assert_eq!((r.0, r.2), (0, 0), "{name} in EVAL: {r:?}");
        assert!(r.3 > 0, "{name} in EVAL: {r:?}");
    }

    // Let the waiter go as its time-out would (CLIENT UNBLOCK ... TIMEOUT).
    for id in waiting_client_ids(&mut c) {
        let _: i64 = call(&mut c, &format!("CLIENT UNBLOCK {id}")).expect("CLIENT UNBLOCK");
    }
    let (r, _) = waiter.reply();
    assert_eq!(r.0, 0, "the waiter's limited reply: {r:?}");
    assert_eq!((waiting(&mut c), blocked_clients(&mut c)), (0, 0));
    // Only the waiter blocked; the calls in MULTI and EVAL were limited.
    assert_eq!(counters(&mut c, "fixed"), stats(4, 1, 2, 1, 1));
    assert_eq!(counters(&mut c, "token"), stats(3, 1, 2, 0, 0));
}

#[test]
fn a_waiter_that_disconnects_leaves_nothing_behind() {
    let server = Server::start();
    let mut c = open(&server.url());
    let line = "THROTTLE.FIXED leaves 1 1h";
    assert_eq!(throttle(&mut c, line).0, 1);
    let gone = send_raw(server.port, &format!("{line} BLOCK 0"));
    wait_until("the raw client to wait", Duration::from_secs(5), || {
        waiting(&mut c) == 1 && blocked_clients(&mut c) == 1
    });
    drop(gone);
    wait_until("the module to forget the client", Duration::from_secs(5), || {
        waiting(&mut c) == 0 && blocked_clients(&mut c) == 0
    });
    // The next caller waits, and gets the unit once the key is gone: the
    // one that left took nothing (had it been admitted, it would count, and
    // this call would wait on).
    let next = Waiter::queued(&server.url(), &mut c, &format!("{line} BLOCK 60000"), 1);
    assert_eq!(call::<i64>(&mut c, "DEL leaves").expect("DEL"), 1);
    let (got, _) = next.reply();
    assert_eq!(got.0, 1, "{got:?}");
    assert_eq!((waiting(&mut c), blocked_clients(&mut c)), (0, 0));
    assert_eq!(counters(&mut c, "fixed").admitted, 2, "the client that left was never admitted");
}

/// Waiters per round in the memory tests: enough that a leak per waiter
/// stands far above the allocator's noise.
const CROWD: usize = 100;

fn used_memory(c: &mut redis::Connection) -> i64 {
    info_number(c, "memory", "used_memory")
}

/// `CROWD` raw clients each send `line` (a BLOCK call on a limited key);
/// `leave` ends them; returns once they are all gone from the server.
fn crowd(server: &Server, c: &mut redis::Connection, line: &str, leave: impl FnOnce(&mut redis::Connection)) {
    let clients: Vec<TcpStream> = (0..CROWD).map(|_| send_raw(server.port, line)).collect();
    leave(c);
    drop(clients);
    wait_until("the crowd to leave", Duration::from_secs(10), || {
        info_number(c, "clients", "connected_clients") == 1 && waiting(c) == 0 && blocked_clients(c) == 0
    });
}

/// Redis frees a module-blocked client's handle, with the reply client it
/// carries (tens of KB), only once the module calls `RM_UnblockClient`;
/// after a disconnect or a time-out too.
#[test]
fn waiters_that_disconnect_free_their_memory() {
    let server = Server::start();
    let mut c = open(&server.url());
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED mem 1 1h").0, 1);
    let line = "THROTTLE.FIXED mem 1 1h BLOCK 0";
    let all_waiting = |c: &mut redis::Connection| {
        wait_until("the crowd to wait", Duration::from_secs(10), || waiting(c) == CROWD as i64);
    };
    crowd(&server, &mut c, line, all_waiting);
    let before = used_memory(&mut c);
    crowd(&server, &mut c, line, all_waiting);
    let grown = used_memory(&mut c) - before;
    assert!(
        grown < 1 << 20,
        "{CROWD} waiters that disconnected left {grown} bytes behind (about {} per waiter)",
        grown / CROWD as i64
    );
}

#[test]
fn waiters_that_time_out_free_their_memory() {
    let server = Server::start();
    let mut c = open(&server.url());
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED mem 1 1h").0, 1);
    let line = "THROTTLE.FIXED mem 1 1h BLOCK 50";
    let mut rounds = 0;
    let mut all_timed_out = |c: &mut redis::Connection| {
        rounds += 1;
        let want = rounds * CROWD as u64;
        wait_until("the crowd to time out", Duration::from_secs(10), || counters(c, "fixed").timed_out == want);
    };
    crowd(&server, &mut c, line, &mut all_timed_out);
    let before = used_memory(&mut c);
    crowd(&server, &mut c, line, &mut all_timed_out);
    let grown = used_memory(&mut c) - before;
    assert!(
        grown < 1 << 20,
        "{CROWD} waiters that timed out left {grown} bytes behind (about {} per waiter)",
        grown / CROWD as i64
    );
}

#[test]
fn a_key_deleted_under_its_waiters_does_not_strand_them() {
    let server = Server::start();
    let url = server.url();
    let mut c = open(&url);
    // A minute's window and wait: only the DEL can let the waiter in
    // before the read gives up.
    let line = "THROTTLE.FIXED deleted 1 1m";
    assert_eq!(throttle(&mut c, line).0, 1);
    let waiter = Waiter::queued(&url, &mut c, &format!("{line} BLOCK 60000"), 1);
    assert_eq!(call::<i64>(&mut c, "DEL deleted").expect("DEL"), 1);
    let (got, _) = waiter.reply();
    assert_eq!(got, (1, 1, 0, 0, 60_000), "admitted on a fresh key");
    assert_eq!(exists(&mut c, "deleted"), 1);
    assert_eq!(counters(&mut c, "fixed").timed_out, 0);

    // A key replaced by another type: its waiter is told, not kept waiting.
    let line = "THROTTLE.FIXED replaced 1 1m";
    assert_eq!(throttle(&mut c, line).0, 1);
    let waiter = Waiter::queued(&url, &mut c, &format!("{line} BLOCK 60000"), 1);
    let _: () = call(&mut c, "SET replaced text").expect("SET");
    let (result, _) = waiter.result();
    let e = result.expect_err("a waiter on a key that became a string");
    assert_eq!(e.code(), Some("WRONGTYPE"), "{e}");
    assert_eq!((waiting(&mut c), blocked_clients(&mut c)), (0, 0));
}

#[test]
fn block_on_a_cost_above_the_limit_answers_at_once() {
    let server = Server::start();
    let mut c = open(&server.url());
    let cases = [
        ("THROTTLE.FIXED over:f 2 10s COST 3 BLOCK 5000", (0, 2, 2, -1, 0)),
        ("THROTTLE.SLIDING over:s 2 10s COST 3 BLOCK 5000", (0, 2, 2, -1, 0)),
        ("THROTTLE.SLIDING over:e 2 10s COST 3 BLOCK 5000 EXACT", (0, 2, 2, -1, 0)),
        ("THROTTLE.TOKEN over:t 5 10s BURST 2 COST 3 BLOCK 5000", (0, 2, 2, -1, 0)),
        ("THROTTLE.LEAKY over:l 5 10s BURST 2 COST 3 BLOCK 0", (0, 2, 2, -1, 0)),
    ];
    for (line, want) in cases {
        let command = line.split(['.', ' ']).nth(1).unwrap_or_default().to_ascii_lowercase();
        assert_eq!(at_once(&mut c, &command, line), want, "{line}");
    }
    for key in ["over:f", "over:s", "over:e", "over:t", "over:l"] {
        assert_eq!(exists(&mut c, key), 0, "{key}");
    }
    assert_eq!((waiting(&mut c), blocked_clients(&mut c)), (0, 0));
}

#[test]
fn block_on_a_cost_above_the_limit_answers_at_once_even_behind_waiters() {
    let server = Server::start();
    let url = server.url();
    let mut c = open(&url);
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED over 2 10s COST 2").0, 1);
    let waiter = Waiter::queued(&url, &mut c, "THROTTLE.FIXED over 2 10s BLOCK 1000", 1);
    // COST 3 of 2 can never succeed: it does not queue behind the waiter.
    let got = at_once(&mut c, "fixed", "THROTTLE.FIXED over 2 10s COST 3 BLOCK 60000");
    assert_eq!((got.0, got.3), (0, -1), "{got:?}");
    let (r, _) = waiter.reply();
    assert_eq!(r.0, 0);
}

#[test]
fn bad_block_values_are_errors_naming_block() {
    let server = Server::start();
    let mut c = open(&server.url());
    let heads =
        ["THROTTLE.FIXED bad 1 1s", "THROTTLE.SLIDING bad 1 1s", "THROTTLE.TOKEN bad 1 1s", "THROTTLE.LEAKY bad 1 1s"];
    let tails = [
        ("BLOCK -1", "invalid BLOCK"),
        ("BLOCK x", "invalid BLOCK"),
        ("BLOCK 1.5", "invalid BLOCK"),
        ("BLOCK +5", "invalid BLOCK"),
        ("BLOCK 315360000001", "invalid BLOCK"),
        ("BLOCK 99999999999999999999", "invalid BLOCK"),
        ("block -5", "invalid BLOCK"),
        ("BLOCK", "option BLOCK needs a value"),
        ("BLOCK 1 BLOCK 1", "option BLOCK given more than once"),
        ("BLOCK 1 block 2", "option BLOCK given more than once"),
    ];
    for head in heads {
        for (tail, want) in tails {
            let line = format!("{head} {tail}");
            let e = error(&mut c, &line);
            assert!(e.starts_with("ERR ") && e.contains(want), "{line}: {e}");
        }
    }
    assert_eq!(exists(&mut c, "bad"), 0, "an error changes nothing");
    // The largest value is accepted; the option is case-insensitive.
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED bad 1 1s BLOCK 315360000000").0, 1);
    assert_eq!(throttle(&mut c, "THROTTLE.TOKEN bad:t 1 1s block 0").0, 1);
    // THROTTLE.ALL has no BLOCK.
    for line in ["THROTTLE.ALL FIXED all 1 1s BLOCK 5", "THROTTLE.ALL BLOCK 5 FIXED all 1 1s"] {
        let e = error(&mut c, line);
        assert!(e.starts_with("ERR ") && e.contains("BLOCK"), "{line}: {e}");
    }
    assert_eq!(exists(&mut c, "all"), 0);
}

#[test]
fn waiters_are_per_database() {
    let server = Server::start();
    let url = server.url();
    let mut c = open(&url);
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED samename 1 10s").0, 1);
    let waiter = Waiter::queued(&url, &mut c, "THROTTLE.FIXED samename 1 10s BLOCK 500", 1);
    // The same name in database 1 is another key, with nobody waiting.
    let mut db1 = open(&format!("redis://127.0.0.1:{}/1", server.port));
    let got = at_once(&mut db1, "fixed", "THROTTLE.FIXED samename 1 10s BLOCK 60000");
    assert_eq!(got.0, 1, "db 1's call, behind db 0's waiter: {got:?}");
    let (r, _) = waiter.reply();
    assert_eq!(r.0, 0);
}

#[test]
fn blocked_admissions_reach_the_replica_exactly() {
    let (master, replica) = master_and_replica();
    let url = master.url();
    let mut m = open(&url);
    let mut r = open(&replica.url());
    // Keys used up for an hour. A waiter queues on each; a refund gives one
    // unit back and the module admits the waiter from its timer, as it
    // serves every waiter, and propagates the admission from there.
    let cases = [
        ("rb:f", "THROTTLE.FIXED rb:f 2 1h", ""),
        ("rb:s", "THROTTLE.SLIDING rb:s 2 1h", ""),
        ("rb:e", "THROTTLE.SLIDING rb:e 2 1h", " EXACT"),
        ("rb:t", "THROTTLE.TOKEN rb:t 2 1h", ""),
        ("rb:l", "THROTTLE.LEAKY rb:l 2 1h", ""),
    ];
    for (key, head, tail) in cases {
        assert_eq!(throttle(&mut m, &format!("{head} COST 2{tail}")).0, 1, "{head}");
        let waiter = Waiter::queued(&url, &mut m, &format!("{head} BLOCK 60000{tail}"), 1);
        assert_eq!(throttle(&mut m, &format!("{head} COST -1{tail}")).0, 1, "{head}: the refund");
        let (got, _) = waiter.reply();
        assert_eq!((got.0, got.2), (1, 0), "{head}: the waiter, admitted: {got:?}");
        sync(&mut m);
        assert_same_on_replica(&mut m, &mut r, &[key]);
    }
    // Every one of them waited (so was admitted by the timer, not at once).
    assert_eq!(counters(&mut m, "fixed").blocked, 1);
    assert_eq!(counters(&mut m, "sliding").blocked, 2);
    assert_eq!(counters(&mut m, "token").blocked, 1);
    assert_eq!(counters(&mut m, "leaky").blocked, 1);

    // Admitted on a fresh key: the key was deleted under its waiter.
    assert_eq!(throttle(&mut m, "THROTTLE.FIXED rb:x 1 10s").0, 1);
    let waiter = Waiter::queued(&url, &mut m, "THROTTLE.FIXED rb:x 1 10s BLOCK 60000", 1);
    let _: i64 = call(&mut m, "DEL rb:x").expect("DEL");
    let (got, _) = waiter.reply();
    assert_eq!(got, (1, 1, 0, 0, 10_000), "admitted once the key was gone");
    sync(&mut m);
    assert_same_on_replica(&mut m, &mut r, &["rb:x"]);
    assert_eq!(counters(&mut m, "fixed").timed_out, 0, "it was admitted, not timed out");
}

// ---------------------------------------------------------------------------
// Refunds: negative COST
// ---------------------------------------------------------------------------

/// Runs `(line, expected reply)` steps; `EXISTS key` after the last one.
fn steps(c: &mut redis::Connection, steps: &[(String, Reply)], key: &str, exists_after: i64) {
    for (line, want) in steps {
        assert_eq!(throttle(c, line), *want, "{line}");
    }
    assert_eq!(exists(c, key), exists_after, "EXISTS {key} after the steps");
}

#[test]
fn refunds_give_units_back_but_never_past_idle() {
    let server = Server::start();
    let mut c = open(&server.url());
    let at = |offset_us: u64| T + offset_us;

    let h = "THROTTLE.FIXED r:f 5 1m";
    steps(&mut c, &[(format!("{h} COST 3 AT {}", at(0)), (1, 5, 2, 0, 60_000))], "r:f", 1);
    let refunded = Instant::now();
    steps(&mut c, &[(format!("{h} COST -2 AT {}", at(SECOND)), (1, 5, 4, 0, 59_000))], "r:f", 1);
    // The TTL counts from the refund on the server's clock: at most
    // reset_after, less no more than the time since, as measured here.
    let pttl: i64 = call(&mut c, "PTTL r:f").expect("PTTL");
    let since_ms = refunded.elapsed().as_millis() as i64;
    assert!((59_000 - since_ms - 1..=59_000).contains(&pttl), "PTTL follows reset_after: {pttl}, {since_ms} ms on");
    steps(&mut c, &[(format!("{h} COST -10 AT {}", at(2 * SECOND)), (1, 5, 5, 0, 0))], "r:f", 0);

    let h = "THROTTLE.SLIDING r:s 5 1m";
    steps(
        &mut c,
        &[
            (format!("{h} COST 3 AT {}", at(0)), (1, 5, 2, 0, 120_000)),
            (format!("{h} COST -2 AT {}", at(SECOND)), (1, 5, 4, 0, 119_000)),
            (format!("{h} COST -10 AT {}", at(2 * SECOND)), (1, 5, 5, 0, 0)),
        ],
        "r:s",
        0,
    );
    // The current window gives back first, then the previous one.
    let h = "THROTTLE.SLIDING r:s2 5 1m";
    steps(
        &mut c,
        &[
            (format!("{h} COST 4 AT {}", at(0)), (1, 5, 1, 0, 120_000)),
            (format!("{h} COST 1 AT {}", at(60 * SECOND)), (1, 5, 0, 0, 120_000)),
            (format!("{h} COST -2 AT {}", at(60 * SECOND)), (1, 5, 2, 0, 60_000)),
        ],
        "r:s2",
        1,
    );

    // The newest units go first: the entry at T keeps 2 of its 3.
    let h = "THROTTLE.SLIDING r:e 5 1m";
    steps(
        &mut c,
        &[
            (format!("{h} COST 3 AT {} EXACT", at(0)), (1, 5, 2, 0, 60_000)),
            (format!("{h} COST 1 AT {} EXACT", at(SECOND)), (1, 5, 1, 0, 60_000)),
            (format!("{h} COST -2 AT {} EXACT", at(2 * SECOND)), (1, 5, 3, 0, 58_000)),
            (format!("{h} COST -10 AT {} EXACT", at(3 * SECOND)), (1, 5, 5, 0, 0)),
        ],
        "r:e",
        0,
    );

    // One token or unit per 6 s.
    let h = "THROTTLE.TOKEN r:t 10 1m";
    steps(
        &mut c,
        &[
            (format!("{h} COST 8 AT {}", at(0)), (1, 10, 2, 0, 48_000)),
            (format!("{h} COST -3 AT {}", at(0)), (1, 10, 5, 0, 30_000)),
            (format!("{h} COST -100 AT {}", at(100 * MS)), (1, 10, 10, 0, 0)),
        ],
        "r:t",
        0,
    );

    // LEAKY: a refund shortens the queue ahead of the next call.
    let h = "THROTTLE.LEAKY r:l 10 1m";
    steps(
        &mut c,
        &[
            (format!("{h} COST 8 AT {}", at(0)), (1, 10, 2, 0, 48_000)),
            (format!("{h} COST -3 AT {}", at(0)), (1, 10, 5, 0, 30_000)),
            (format!("{h} COST 1 AT {}", at(0)), (1, 10, 4, 30_000, 36_000)),
            (format!("{h} COST -100 AT {}", at(0)), (1, 10, 10, 0, 0)),
        ],
        "r:l",
        0,
    );

    // Time never runs backwards: a refund dated before the last change
    // counts at that change.
    let h = "THROTTLE.FIXED r:back 5 1m";
    steps(
        &mut c,
        &[
            (format!("{h} COST 3 AT {}", at(10 * SECOND)), (1, 5, 2, 0, 60_000)),
            (format!("{h} COST -1 AT {}", at(0)), (1, 5, 3, 0, 60_000)),
        ],
        "r:back",
        1,
    );
}

#[test]
fn refunds_are_always_admitted_and_change_nothing_on_a_missing_key() {
    let server = Server::start();
    let mut c = open(&server.url());
    let h = "THROTTLE.FIXED r:full 2 1m";
    steps(
        &mut c,
        &[
            (format!("{h} COST 2 AT {T}"), (1, 2, 0, 0, 60_000)),
            (format!("{h} AT {T}"), (0, 2, 0, 60_000, 60_000)),
            (format!("{h} COST -1 AT {T}"), (1, 2, 1, 0, 60_000)),
            (format!("{h} AT {T}"), (1, 2, 0, 0, 60_000)),
            (format!("{h} COST -1000000000000000 AT {T}"), (1, 2, 2, 0, 0)),
        ],
        "r:full",
        0,
    );
    let e = error(&mut c, &format!("{h} COST -1000000000000001 AT {T}"));
    assert!(e.starts_with("ERR ") && e.contains("COST"), "{e}");

    // On a missing key: admitted, idle, still missing.
    for (line, want) in [
        (format!("THROTTLE.FIXED r:none 5 1m COST -3 AT {T}"), (1, 5, 5, 0, 0)),
        (format!("THROTTLE.SLIDING r:none 5 1m COST -3 AT {T}"), (1, 5, 5, 0, 0)),
        (format!("THROTTLE.SLIDING r:none 5 1m COST -3 AT {T} EXACT"), (1, 5, 5, 0, 0)),
        (format!("THROTTLE.TOKEN r:none 5 1m BURST 7 COST -3 AT {T}"), (1, 7, 7, 0, 0)),
        (format!("THROTTLE.LEAKY r:none 5 1m BURST 7 COST -3 AT {T}"), (1, 7, 7, 0, 0)),
    ] {
        assert_eq!(throttle(&mut c, &line), want, "{line}");
        assert_eq!(exists(&mut c, "r:none"), 0, "{line} created the key");
    }

    // With BLOCK on a limited key: admitted at once.
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED r:block 1 10s").0, 1);
    assert_eq!(at_once(&mut c, "fixed", "THROTTLE.FIXED r:block 1 10s COST -1 BLOCK 60000"), (1, 1, 1, 0, 0));
    assert_eq!(exists(&mut c, "r:block"), 0);

    // A refund on a key of another type is WRONGTYPE and changes nothing.
    let _: () = call(&mut c, "SET r:str text").expect("SET");
    throttle(&mut c, &format!("THROTTLE.TOKEN r:tok 5 1m COST 2 AT {T}"));
    let before = digest(&mut c, "r:tok");
    for line in [
        format!("THROTTLE.FIXED r:str 5 1m COST -1 AT {T}"),
        format!("THROTTLE.LEAKY r:tok 5 1m COST -1 AT {T}"),
        format!("THROTTLE.SLIDING r:tok 5 1m COST -1 AT {T} EXACT"),
    ] {
        assert!(error(&mut c, &line).starts_with("WRONGTYPE"), "{line}");
    }
    assert_eq!(digest(&mut c, "r:tok"), before);
}

#[test]
fn refunds_and_throttle_all_reach_the_replica_exactly() {
    let (master, replica) = master_and_replica();
    let mut m = open(&master.url());
    let mut r = open(&replica.url());
    let s = SECOND;
    for line in [
        format!("THROTTLE.FIXED rr:f 10 1h COST 5 AT {T}"),
        format!("THROTTLE.FIXED rr:f 10 1h COST -2 AT {}", T + s),
        format!("THROTTLE.SLIDING rr:s 10 1h COST 5 AT {T}"),
        format!("THROTTLE.SLIDING rr:s 10 1h COST -2 AT {}", T + s),
        format!("THROTTLE.SLIDING rr:e 10 1h COST 5 AT {T} EXACT"),
        format!("THROTTLE.SLIDING rr:e 10 1h COST 1 AT {} EXACT", T + s),
        format!("THROTTLE.SLIDING rr:e 10 1h COST -2 AT {} EXACT", T + 2 * s),
        format!("THROTTLE.TOKEN rr:t 10 1h BURST 20 COST 15 AT {T}"),
        format!("THROTTLE.TOKEN rr:t 10 1h BURST 20 COST -4 AT {}", T + s),
        format!("THROTTLE.LEAKY rr:l 10 1h BURST 20 COST 15 AT {T}"),
        format!("THROTTLE.LEAKY rr:l 10 1h BURST 20 COST -4 AT {}", T + s),
        format!("THROTTLE.FIXED rr:gone 10 1h COST 3 AT {T}"),
        format!("THROTTLE.FIXED rr:gone 10 1h COST -3 AT {}", T + s),
    ] {
        assert_eq!(throttle(&mut m, &line).0, 1, "{line}");
    }
    let specs = "FIXED rr:a1 10 1h TOKEN rr:a2 10 1h BURST 20 SLIDING rr:a3 10 1h EXACT";
    assert_eq!(all(&mut m, &format!("THROTTLE.ALL COST 3 AT {T} {specs}")).0, 1);
    assert_eq!(all(&mut m, &format!("THROTTLE.ALL COST 8 AT {T} {specs}")).0, 0);
    assert_eq!(all(&mut m, &format!("THROTTLE.ALL COST -1 AT {} {specs}", T + s)).0, 1);
    sync(&mut m);
    assert_same_on_replica(&mut m, &mut r, &["rr:f", "rr:s", "rr:e", "rr:t", "rr:l", "rr:a1", "rr:a2", "rr:a3"]);
    assert_eq!(exists(&mut r, "rr:gone"), 0, "the refund to idle deleted the key on the replica too");
    // THROTTLE.INFO is read-only: the replica answers it, the same way
    // (but for a reset_after read from the TTL, a moment apart).
    for key in ["rr:e", "rr:t", "rr:a2"] {
        let line = format!("THROTTLE.INFO {key} AT {}", T + 3 * s);
        let (vm, vr): (Value, Value) = (call(&mut m, &line).expect("master"), call(&mut r, &line).expect("replica"));
        let (mut pm, mut pr) = (pairs(&vm), pairs(&vr));
        if let (Some(Value::Int(a)), Some(Value::Int(b))) = (pm.remove("reset_after"), pr.remove("reset_after")) {
            assert!((a - b).abs() <= 100, "{line}: reset_after {a} on the master, {b} on the replica");
        }
        assert_eq!(pm, pr, "{line}");
    }
}

// ---------------------------------------------------------------------------
// THROTTLE.ALL
// ---------------------------------------------------------------------------

#[test]
fn throttle_all_is_all_or_nothing() {
    let server = Server::start();
    let mut c = open(&server.url());
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED n:f 1 1m AT {T}")), (1, 1, 0, 0, 60_000));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN n:t 10 1m COST 4 AT {T}")), (1, 10, 6, 0, 24_000));
    let (f, t) = (digest(&mut c, "n:f"), digest(&mut c, "n:t"));

    // The first limit denies: the others show their state, unchanged.
    let got = all(&mut c, &format!("THROTTLE.ALL AT {} FIXED n:f 1 1m TOKEN n:t 10 1m SLIDING n:s 5 1m", T + SECOND));
    assert_eq!(got, (0, vec![(0, 1, 0, 59_000, 59_000), (1, 10, 6, 0, 23_000), (1, 5, 5, 0, 0)]));
    // The last limit denies: the first, which would admit, does not consume.
    let got = all(&mut c, &format!("THROTTLE.ALL COST 7 AT {T} FIXED n:f2 10 1m TOKEN n:t 10 1m"));
    assert_eq!(got, (0, vec![(1, 10, 10, 0, 0), (0, 10, 6, 6_000, 24_000)]));
    // One spec can never admit: -1, and nothing changes.
    let got = all(&mut c, &format!("THROTTLE.ALL COST 5 AT {T} FIXED n:f3 10 1m FIXED n:f4 3 1m"));
    assert_eq!(got, (0, vec![(1, 10, 10, 0, 0), (0, 3, 3, -1, 0)]));

    assert_eq!((digest(&mut c, "n:f"), digest(&mut c, "n:t")), (f, t), "a denied THROTTLE.ALL changed a key");
    for key in ["n:s", "n:f2", "n:f3", "n:f4"] {
        assert_eq!(exists(&mut c, key), 0, "a denied THROTTLE.ALL created {key}");
    }
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN n:t 10 1m COST 0 AT {T}")), (1, 10, 6, 0, 24_000));
    assert_eq!(counters(&mut c, "all"), stats(3, 0, 3, 0, 0));
    // THROTTLE.ALL does not count as the single commands.
    assert_eq!(counters(&mut c, "fixed"), stats(1, 1, 0, 0, 0));
}

#[test]
fn throttle_all_replies_and_consumes_as_the_single_commands_do() {
    let server = Server::start();
    let mut c = open(&server.url());
    let specs = |p: &str| {
        format!(
            "FIXED {p}:f 10 1m SLIDING {p}:s 10 10m SLIDING {p}:e 10 1m EXACT TOKEN {p}:t 10 1m BURST 20 LEAKY {p}:l 10 1m BURST 3"
        )
    };
    let singles = |p: &str, cost: &str| {
        [
            format!("THROTTLE.FIXED {p}:f 10 1m COST {cost} AT {T}"),
            format!("THROTTLE.SLIDING {p}:s 10 10m COST {cost} AT {T}"),
            format!("THROTTLE.SLIDING {p}:e 10 1m COST {cost} AT {T} EXACT"),
            format!("THROTTLE.TOKEN {p}:t 10 1m COST {cost} AT {T} BURST 20"),
            format!("THROTTLE.LEAKY {p}:l 10 1m COST {cost} AT {T} BURST 3"),
        ]
    };
    let keys = ["f", "s", "e", "t", "l"];

    let got = all(&mut c, &format!("THROTTLE.ALL COST 2 AT {T} {}", specs("x")));
    let want = vec![
        (1, 10, 8, 0, 60_000),
        (1, 10, 8, 0, 1_200_000),
        (1, 10, 8, 0, 60_000),
        (1, 20, 18, 0, 12_000),
        (1, 3, 1, 0, 12_000),
    ];
    assert_eq!(got, (1, want.clone()));
    let single: Vec<Reply> = singles("y", "2").iter().map(|l| throttle(&mut c, l)).collect();
    assert_eq!(single, want, "the single commands answer the same");
    for k in keys {
        let (x, y) = (format!("x:{k}"), format!("y:{k}"));
        assert_eq!(digest(&mut c, &x), digest(&mut c, &y), "{x} and {y} hold the same state");
    }

    // Again: LEAKY (level 2 of 3) cannot take 2 more, so nothing changes.
    let before: Vec<String> = keys.iter().map(|k| digest(&mut c, &format!("x:{k}"))).collect();
    let got = all(&mut c, &format!("THROTTLE.ALL COST 2 AT {T} {}", specs("x")));
    let peeks: Vec<Reply> = singles("y", "0").iter().map(|l| throttle(&mut c, l)).collect();
    let denied = throttle(&mut c, &format!("THROTTLE.LEAKY y:l 10 1m COST 2 AT {T} BURST 3"));
    assert_eq!(denied, (0, 3, 1, 6_000, 12_000));
    let mut want = peeks[..4].to_vec();
    want.push(denied);
    assert_eq!(got, (0, want));
    let after: Vec<String> = keys.iter().map(|k| digest(&mut c, &format!("x:{k}"))).collect();
    assert_eq!(before, after);

    // Options are case-insensitive, spec names too.
    let got = all(&mut c, &format!("throttle.all cost 1 at {T} fixed z:f 10 1s token z:t 10 1s burst 20"));
    assert_eq!(got, (1, vec![(1, 10, 9, 0, 1_000), (1, 20, 19, 0, 100)]));
}

#[test]
fn throttle_all_peeks_and_refunds() {
    let server = Server::start();
    let mut c = open(&server.url());
    // TOKEN: one token per 12 s.
    let specs = "FIXED p:f 3 1m TOKEN p:t 5 1m";
    let at = |us: u64| T + us;

    let got = all(&mut c, &format!("THROTTLE.ALL COST 0 AT {T} {specs}"));
    assert_eq!(got, (1, vec![(1, 3, 3, 0, 0), (1, 5, 5, 0, 0)]));
    assert_eq!((exists(&mut c, "p:f"), exists(&mut c, "p:t")), (0, 0), "a peek created a key");

    let got = all(&mut c, &format!("THROTTLE.ALL COST 3 AT {T} {specs}"));
    assert_eq!(got, (1, vec![(1, 3, 0, 0, 60_000), (1, 5, 2, 0, 36_000)]));
    let before = (digest(&mut c, "p:f"), digest(&mut c, "p:t"));
    // A peek is admitted even where no unit is left.
    let got = all(&mut c, &format!("THROTTLE.ALL COST 0 AT {} {specs}", at(SECOND)));
    assert_eq!(got, (1, vec![(1, 3, 0, 0, 59_000), (1, 5, 2, 0, 35_000)]));
    assert_eq!((digest(&mut c, "p:f"), digest(&mut c, "p:t")), before, "a peek changed a key");

    let got = all(&mut c, &format!("THROTTLE.ALL COST -2 AT {} {specs}", at(SECOND)));
    assert_eq!(got, (1, vec![(1, 3, 2, 0, 59_000), (1, 5, 4, 0, 11_000)]));
    let got = all(&mut c, &format!("THROTTLE.ALL COST -10 AT {} {specs}", at(SECOND)));
    assert_eq!(got, (1, vec![(1, 3, 3, 0, 0), (1, 5, 5, 0, 0)]));
    assert_eq!((exists(&mut c, "p:f"), exists(&mut c, "p:t")), (0, 0), "keys refunded to idle are deleted");
}

#[test]
fn throttle_all_errors_change_nothing() {
    let server = Server::start();
    let mut c = open(&server.url());
    let cases = [
        ("THROTTLE.ALL COST 1 AT 5", "needs at least one"),
        ("THROTTLE.ALL FIXED e:a 1", "wrong number of arguments"),
        ("THROTTLE.ALL FIXED e:a 1 1s TOKEN e:a 1 1s", "same key"),
        ("THROTTLE.ALL FIXED e:a 1 1s COST 2", "COST and AT before its specs"),
        ("THROTTLE.ALL FIXED e:a 1 1s AT 5", "COST and AT before its specs"),
        ("THROTTLE.ALL FIXED e:a 1 1s TOKEN e:b 1 1s COST 2", "COST and AT before its specs"),
        ("THROTTLE.ALL FOO e:a 1 1s", "unknown option 'FOO'"),
        ("THROTTLE.ALL FIXED e:a 1 1s NOPE", "unknown option 'NOPE'"),
        ("THROTTLE.ALL FIXED e:a 1 1s BURST 2", "option BURST is not valid for THROTTLE.FIXED"),
        ("THROTTLE.ALL TOKEN e:a 1 1s EXACT", "option EXACT is not valid for THROTTLE.TOKEN"),
        ("THROTTLE.ALL FIXED e:a 0 1s", "invalid limit"),
        ("THROTTLE.ALL FIXED e:a 1 0", "invalid period"),
        ("THROTTLE.ALL COST x FIXED e:a 1 1s", "invalid COST"),
        ("THROTTLE.ALL AT x FIXED e:a 1 1s", "invalid AT"),
        ("THROTTLE.ALL AT 1 AT 2 FIXED e:a 1 1s", "option AT given more than once"),
        ("THROTTLE.ALL COST 1 COST 2 FIXED e:a 1 1s", "option COST given more than once"),
    ];
    for (line, want) in cases {
        let e = error(&mut c, line);
        assert!(e.starts_with("ERR ") && e.contains(want), "{line}: {e}");
    }
    assert_eq!((exists(&mut c, "e:a"), exists(&mut c, "e:b")), (0, 0));

    // A key of another type anywhere: WRONGTYPE, and no key changes.
    let _: () = call(&mut c, "SET e:str text").expect("SET");
    throttle(&mut c, &format!("THROTTLE.TOKEN e:tok 5 1h COST 2 AT {T}"));
    throttle(&mut c, &format!("THROTTLE.SLIDING e:log 5 1h COST 2 AT {T} EXACT"));
    let tok = digest(&mut c, "e:tok");
    for line in [
        format!("THROTTLE.ALL AT {T} FIXED e:a 1 1s FIXED e:str 1 1s"),
        format!("THROTTLE.ALL AT {T} TOKEN e:tok 5 1h FIXED e:a 1 1s LEAKY e:str 1 1s"),
        format!("THROTTLE.ALL AT {T} TOKEN e:tok 5 1h LEAKY e:log 5 1h"),
        format!("THROTTLE.ALL AT {T} TOKEN e:tok 5 1h SLIDING e:log 5 1h"),
        format!("THROTTLE.ALL AT {T} TOKEN e:tok 5 1h FIXED e:a 1 1s SLIDING e:b 5 1s EXACT FIXED e:tok2 1 1s LEAKY e:tok 1 1s"),
    ] {
        let e = error(&mut c, &line);
        assert!(e.starts_with("WRONGTYPE") || e.contains("same key"), "{line}: {e}");
    }
    assert_eq!(digest(&mut c, "e:tok"), tok);
    for key in ["e:a", "e:b", "e:tok2"] {
        assert_eq!(exists(&mut c, key), 0, "{key}");
    }
}

#[test]
fn throttle_all_takes_no_option_inside_a_spec_even_the_default_cost() {
    let server = Server::start();
    let mut c = open(&server.url());
    // `COST 1` inside a spec is as misplaced as `COST 2`: the call's COST
    // (3 here) applies to every spec, so accepting it silently misleads.
    let line = format!("THROTTLE.ALL COST 3 AT {T} FIXED o:a 10 1s COST 1");
    match call::<Value>(&mut c, &line) {
        Err(e) => assert!(e.to_string().contains("before its specs"), "{line}: {e}"),
        Ok(v) => panic!("{line}: accepted, got {v:?} (the spec's COST 1 was ignored)"),
    }
    assert_eq!(exists(&mut c, "o:a"), 0);
}

#[test]
fn command_getkeys_names_every_key_of_throttle_all() {
    let server = Server::start();
    let mut c = open(&server.url());
    let cases: [(&str, &[&str]); 4] = [
        (
            "THROTTLE.ALL COST 1 AT 5 FIXED k1 1 1s TOKEN k2 2 1s BURST 3 SLIDING k3 1 1 EXACT LEAKY k4 5 1m",
            &["k1", "k2", "k3", "k4"],
        ),
        ("THROTTLE.ALL FIXED TOKEN 1 1 LEAKY FIXED 2 2", &["TOKEN", "FIXED"]),
        ("THROTTLE.ALL SLIDING {user:42}:s 10 1s SLIDING {user:42}:h 1000 1h", &["{user:42}:s", "{user:42}:h"]),
        ("THROTTLE.FIXED single 1 1s", &["single"]),
    ];
    for (line, want) in cases {
        let keys: Vec<String> =
            call(&mut c, &format!("COMMAND GETKEYS {line}")).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(keys, want, "{line}");
    }
}

/// Three masters on loopback, all slots assigned, `cluster_state:ok`.
fn start_cluster() -> Vec<Server> {
    let nodes: Vec<Server> = (0..3)
        .map(|_| {
            let bus = common::free_port().to_string();
            Server::start_with(&["--cluster-enabled", "yes", "--cluster-port", &bus, "--cluster-node-timeout", "5000"])
        })
        .collect();
    let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addresses)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli on PATH");
    assert!(
        out.status.success(),
        "redis-cli --cluster create failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for node in &nodes {
        let mut c = open(&node.url());
        wait_until("cluster_state:ok", Duration::from_secs(20), || {
            call::<String>(&mut c, "CLUSTER INFO").is_ok_and(|s| s.contains("cluster_state:ok"))
        });
    }
    nodes
}

#[test]
fn throttle_all_in_a_cluster_needs_one_slot() {
    let nodes = start_cluster();
    let urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();
    let client = redis::cluster::ClusterClient::new(urls).expect("cluster client");
    let mut cc = client.get_connection().expect("cluster connection");
    cc.set_read_timeout(Some(READ_TIMEOUT)).expect("read timeout");
    let query = |cc: &mut redis::cluster::ClusterConnection, line: &str| command(line).query::<Value>(cc);

    let specs = "FIXED {user:42}:s 10 1m FIXED {user:42}:h 1000 1h";
    let v = query(&mut cc, &format!("THROTTLE.ALL AT {T} {specs}")).expect("THROTTLE.ALL through the cluster client");
    assert_eq!(all_reply(&v), (1, vec![(1, 10, 9, 0, 60_000), (1, 1000, 999, 0, 3_600_000)]));
    let v = query(&mut cc, &format!("THROTTLE.ALL COST 10 AT {T} {specs}")).expect("THROTTLE.ALL");
    assert_eq!(all_reply(&v), (0, vec![(0, 10, 9, 60_000, 60_000), (1, 1000, 999, 0, 3_600_000)]));
    // The single commands reach the same keys.
    let v = query(&mut cc, &format!("THROTTLE.FIXED {{user:42}}:h 1000 1h COST 0 AT {T}")).expect("THROTTLE.FIXED");
    assert_eq!(five(&v), (1, 1000, 999, 0, 3_600_000));
    let v = query(&mut cc, &format!("THROTTLE.INFO {{user:42}}:s AT {T}")).expect("THROTTLE.INFO");
    assert_eq!(pairs(&v).get("used"), Some(&Value::Int(1)));
    // Both keys live on the one node that owns their slot.
    let mut owners = 0;
    for node in &nodes {
        let mut c = open(&node.url());
        if let Ok(2) = call::<i64>(&mut c, "EXISTS {user:42}:s {user:42}:h") {
            owners += 1;
        }
    }
    assert_eq!(owners, 1);

    // Keys in different slots: CROSSSLOT, through the client and on every node.
    let mut c = open(&nodes[0].url());
    let (a, b): (i64, i64) = (
        call(&mut c, "CLUSTER KEYSLOT {user:42}").expect("KEYSLOT"),
        call(&mut c, "CLUSTER KEYSLOT {user:43}").expect("KEYSLOT"),
    );
    assert_ne!(a, b);
    let cross = format!("THROTTLE.ALL AT {T} FIXED {{user:42}}:s 10 1m FIXED {{user:43}}:h 1000 1h");
    let e = query(&mut cc, &cross).expect_err("keys in two slots");
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    for node in &nodes {
        let mut c = open(&node.url());
        let e = call::<Value>(&mut c, &cross).expect_err("keys in two slots");
        assert_eq!(e.code(), Some("CROSSSLOT"), "node {}: {e}", node.port);
    }
    let v = query(&mut cc, &format!("THROTTLE.FIXED {{user:42}}:s 10 1m COST 0 AT {T}")).expect("peek");
    assert_eq!(five(&v).2, 9, "the CROSSSLOT call changed nothing");
}

// ---------------------------------------------------------------------------
// THROTTLE.INFO
// ---------------------------------------------------------------------------

fn describe(c: &mut redis::Connection, line: &str) -> BTreeMap<String, Value> {
    let v: Value = call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    pairs(&v)
}

/// `reset_after` as the key's TTL gives it (FIXED, SLIDING EXACT): the TTL
/// counts down on the server's clock from the `reset_after` the last
/// change answered.
fn ttl_reset_after(got: &BTreeMap<String, Value>, answered: i64) -> bool {
    matches!(got.get("reset_after"), Some(Value::Int(ttl)) if *ttl > answered - 5_000 && *ttl <= answered)
}

#[test]
fn throttle_info_describes_every_algorithm() {
    let server = Server::start();
    let mut c = open(&server.url());
    let s = SECOND as i64;
    let t = T as i64;
    /// The calls, the time INFO looks at, the fields it must show (besides
    /// a `reset_after` read from the TTL, with the one the last call
    /// answered), and the peek that must agree with them.
    type Case = (Vec<String>, u64, BTreeMap<String, Value>, Option<i64>, String);
    let cases: Vec<Case> = vec![
        (
            vec![format!("THROTTLE.FIXED i:f 10 1m COST 3 AT {T}")],
            T + MS,
            info_fields("fixed", &[("window_start", t), ("used", 3)]),
            Some(60_000),
            format!("THROTTLE.FIXED i:f 10 1m COST 0 AT {}", T + MS),
        ),
        (
            vec![format!("THROTTLE.SLIDING i:s 10 1m COST 4 AT {T}")],
            T + 30 * SECOND,
            info_fields(
                "sliding",
                &[
                    ("period_ms", 60_000),
                    ("window_start", t),
                    ("previous", 0),
                    ("current", 4),
                    ("used", 4),
                    ("reset_after", 90_000),
                ],
            ),
            None,
            format!("THROTTLE.SLIDING i:s 10 1m COST 0 AT {}", T + 30 * SECOND),
        ),
        (
            vec![
                format!("THROTTLE.SLIDING i:e 10 1m COST 2 AT {T} EXACT"),
                format!("THROTTLE.SLIDING i:e 10 1m COST 1 AT {} EXACT", T + 10 * SECOND),
                format!("THROTTLE.SLIDING i:e 10 1m COST 1 AT {} EXACT", T + 10 * SECOND),
            ],
            T + 20 * SECOND,
            info_fields("sliding-exact", &[("entries", 2), ("used", 4), ("updated_at", t + 10 * s)]),
            Some(60_000),
            format!("THROTTLE.SLIDING i:e 10 1m COST 0 AT {} EXACT", T + 20 * SECOND),
        ),
        (
            vec![format!("THROTTLE.TOKEN i:t 10 1m BURST 20 COST 15 AT {T}")],
            T + 30 * SECOND,
            info_fields(
                "token",
                &[
                    ("limit", 10),
                    ("period_ms", 60_000),
                    ("burst", 20),
                    ("updated_at", t),
                    ("remaining", 10),
                    ("reset_after", 60_000),
                ],
            ),
            None,
            format!("THROTTLE.TOKEN i:t 10 1m BURST 20 COST 0 AT {}", T + 30 * SECOND),
        ),
        (
            vec![format!("THROTTLE.LEAKY i:l 10 1m BURST 20 COST 15 AT {T}")],
            T + 30 * SECOND,
            info_fields(
                "leaky",
                &[
                    ("limit", 10),
                    ("period_ms", 60_000),
                    ("burst", 20),
                    ("updated_at", t),
                    ("remaining", 10),
                    ("reset_after", 60_000),
                ],
            ),
            None,
            format!("THROTTLE.LEAKY i:l 10 1m BURST 20 COST 0 AT {}", T + 30 * SECOND),
        ),
    ];
    for (calls, at, want, ttl_answered, peek) in cases {
        for line in &calls {
            assert_eq!(throttle(&mut c, line).0, 1, "{line}");
        }
        let key = calls[0].split(' ').nth(1).expect("key");
        let mut got = describe(&mut c, &format!("THROTTLE.INFO {key} AT {at}"));
        if let Some(answered) = ttl_answered {
            assert!(ttl_reset_after(&got, answered), "THROTTLE.INFO {key}: reset_after {:?}", got.get("reset_after"));
            got.remove("reset_after");
        }
        assert_eq!(got, want, "THROTTLE.INFO {key}");
        // The peek's remaining is the limit less what INFO counts as used.
        let p = throttle(&mut c, &peek);
        let counted = match (got.get("remaining"), got.get("used")) {
            (Some(Value::Int(remaining)), _) => *remaining,
            (None, Some(Value::Int(used))) => p.1 - used,
            _ => panic!("THROTTLE.INFO {key}: neither remaining nor used"),
        };
        assert_eq!(counted, p.2, "THROTTLE.INFO {key} agrees with {peek}");
        if ttl_answered.is_none() {
            assert_eq!(got.get("reset_after"), Some(&Value::Int(p.4)), "THROTTLE.INFO {key} agrees with {peek}");
        }
    }
    // Without AT: the server's clock, long after T; every bucket is idle by then.
    let got = describe(&mut c, "THROTTLE.INFO i:t");
    assert_eq!((got.get("remaining"), got.get("reset_after")), (Some(&Value::Int(20)), Some(&Value::Int(0))));
    // AT is case-insensitive.
    assert_eq!(describe(&mut c, &format!("THROTTLE.INFO i:s at {}", T + MS)).get("used"), Some(&Value::Int(4)));
    // A key whose TTL was taken away says so.
    let _: i64 = call(&mut c, "PERSIST i:f").expect("PERSIST");
    assert_eq!(describe(&mut c, "THROTTLE.INFO i:f").get("reset_after"), Some(&Value::Int(-1)));
}

#[test]
fn throttle_info_shows_the_parameters_of_the_last_change() {
    let server = Server::start();
    let mut c = open(&server.url());
    // The buckets keep every parameter; SLIDING its period.
    let info = |c: &mut redis::Connection, key: &str| {
        let m = describe(c, &format!("THROTTLE.INFO {key} AT {}", T + 2 * SECOND));
        (m.get("limit").cloned(), m.get("period_ms").cloned(), m.get("burst").cloned())
    };
    throttle(&mut c, &format!("THROTTLE.TOKEN pc 10 1m AT {T}"));
    assert_eq!(info(&mut c, "pc"), (Some(Value::Int(10)), Some(Value::Int(60_000)), Some(Value::Int(10))));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN pc 20 2m BURST 30 AT {}", T + SECOND)).0, 1);
    assert_eq!(info(&mut c, "pc"), (Some(Value::Int(20)), Some(Value::Int(120_000)), Some(Value::Int(30))));
    // A denied call and a peek change nothing, parameters included.
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN pc 1 1h COST 5 AT {}", T + SECOND)).0, 0);
    assert_eq!(throttle(&mut c, &format!("THROTTLE.TOKEN pc 5 5m COST 0 AT {}", T + SECOND)).0, 1);
    assert_eq!(info(&mut c, "pc"), (Some(Value::Int(20)), Some(Value::Int(120_000)), Some(Value::Int(30))));

    throttle(&mut c, &format!("THROTTLE.SLIDING ps 10 1m AT {T}"));
    assert_eq!(info(&mut c, "ps").1, Some(Value::Int(60_000)));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.SLIDING ps 10 2m AT {}", T + SECOND)).0, 1);
    assert_eq!(info(&mut c, "ps").1, Some(Value::Int(120_000)));
}

#[test]
fn throttle_info_changes_nothing_and_refuses_what_it_cannot_describe() {
    let server = Server::start();
    let mut c = open(&server.url());
    assert_eq!(call::<Value>(&mut c, "THROTTLE.INFO nothing").expect("INFO"), Value::Nil);
    assert_eq!(call::<Value>(&mut c, &format!("THROTTLE.INFO nothing AT {T}")).expect("INFO"), Value::Nil);
    let _: () = call(&mut c, "SET str text").expect("SET");
    assert!(error(&mut c, "THROTTLE.INFO str").starts_with("WRONGTYPE"));
    let _: i64 = call(&mut c, "LPUSH list x").expect("LPUSH");
    assert!(error(&mut c, "THROTTLE.INFO list").starts_with("WRONGTYPE"));

    for line in [
        format!("THROTTLE.FIXED keep:f 10 1h COST 3 AT {T}"),
        format!("THROTTLE.SLIDING keep:s 10 1h COST 3 AT {T}"),
        format!("THROTTLE.SLIDING keep:e 10 1h COST 3 AT {T} EXACT"),
        format!("THROTTLE.SLIDING keep:e 10 1h COST 3 AT {} EXACT", T + SECOND),
        format!("THROTTLE.TOKEN keep:t 10 1h COST 3 AT {T}"),
        format!("THROTTLE.LEAKY keep:l 10 1h COST 3 AT {T}"),
    ] {
        assert_eq!(throttle(&mut c, &line).0, 1, "{line}");
    }
    for key in ["keep:f", "keep:s", "keep:e", "keep:t", "keep:l"] {
        let before = digest(&mut c, key);
        let expiry: i64 = call(&mut c, &format!("PEXPIRETIME {key}")).expect("PEXPIRETIME");
        // Now, at T, long after the window and the log entries: none of it
        // may change the value or its TTL, nor delete it.
        for at in ["", " AT 0", &format!(" AT {T}"), &format!(" AT {}", T + 2 * 3_600 * SECOND)] {
            describe(&mut c, &format!("THROTTLE.INFO {key}{at}"));
        }
        assert_eq!(digest(&mut c, key), before, "THROTTLE.INFO changed {key}");
        let after: i64 = call(&mut c, &format!("PEXPIRETIME {key}")).expect("PEXPIRETIME");
        assert_eq!(after, expiry, "THROTTLE.INFO moved the instant {key} expires at");
    }

    for (line, want) in [
        ("THROTTLE.INFO keep:f AT x", "invalid AT"),
        ("THROTTLE.INFO keep:f AT 10000000000000001", "invalid AT"),
        ("THROTTLE.INFO keep:f FOO 1", "unknown option 'FOO'"),
        ("THROTTLE.INFO keep:f AT", "wrong number of arguments"),
        ("THROTTLE.INFO", "wrong number of arguments"),
    ] {
        let e = error(&mut c, line);
        assert!(e.starts_with("ERR ") && e.contains(want), "{line}: {e}");
    }
}

// ---------------------------------------------------------------------------
// RESP3
// ---------------------------------------------------------------------------

#[test]
fn resp3_clients_get_maps_and_resp2_clients_arrays() {
    let server = Server::start();
    let mut c3 = open(&resp3_url(&server));
    let mut c2 = open(&server.url());
    let map = |c: &mut redis::Connection, line: &str| {
        let v: Value = call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
        map_reply(&v)
    };

    let cases = [
        (format!("THROTTLE.FIXED m:f 2 1m AT {T}"), decision_map(true, 2, 1, 0, 60_000)),
        (format!("THROTTLE.FIXED m:f 2 1m COST 2 AT {T}"), decision_map(false, 2, 1, 60_000, 60_000)),
        (format!("THROTTLE.FIXED m:f 2 1m COST 5 AT {T}"), decision_map(false, 2, 1, -1, 60_000)),
        (format!("THROTTLE.SLIDING m:s 2 1m AT {T}"), decision_map(true, 2, 1, 0, 120_000)),
        (format!("THROTTLE.SLIDING m:e 2 1m AT {T} EXACT"), decision_map(true, 2, 1, 0, 60_000)),
        (format!("THROTTLE.TOKEN m:t 10 1m BURST 20 COST 5 AT {T}"), decision_map(true, 20, 15, 0, 30_000)),
        (format!("THROTTLE.LEAKY m:l 10 1m BURST 3 COST 2 AT {T}"), decision_map(true, 3, 1, 0, 12_000)),
        (format!("THROTTLE.LEAKY m:l 10 1m BURST 3 AT {T}"), decision_map(true, 3, 0, 12_000, 18_000)),
        (format!("THROTTLE.FIXED m:f 2 1m COST -1 AT {T}"), decision_map(true, 2, 2, 0, 0)),
    ];
    for (line, want) in cases {
        assert_eq!(map(&mut c3, &line), want, "{line}");
    }
    // The RESP2 client on the same server still gets five integers.
    assert_eq!(throttle(&mut c2, &format!("THROTTLE.FIXED m:f2 2 1m AT {T}")), (1, 2, 1, 0, 60_000));
    assert_eq!(throttle(&mut c2, &format!("THROTTLE.TOKEN m:t 10 1m BURST 20 AT {T}")), (1, 20, 14, 0, 36_000));

    // THROTTLE.ALL: a boolean, then one map per spec.
    let v: Value = call(&mut c3, &format!("THROTTLE.ALL COST 2 AT {T} FIXED m:a1 3 1m TOKEN m:a2 1 1s")).expect("ALL");
    let Value::Array(items) = &v else { panic!("THROTTLE.ALL in RESP3: {v:?}") };
    assert_eq!(items.len(), 3, "{v:?}");
    assert_eq!(items[0], Value::Boolean(false));
    assert_eq!(map_reply(&items[1]), decision_map(true, 3, 3, 0, 0));
    assert_eq!(map_reply(&items[2]), decision_map(false, 1, 1, -1, 0));
    let v: Value = call(&mut c3, &format!("THROTTLE.ALL AT {T} FIXED m:a1 3 1m")).expect("ALL");
    let Value::Array(items) = &v else { panic!("THROTTLE.ALL in RESP3: {v:?}") };
    assert_eq!(items[0], Value::Boolean(true));
    assert_eq!(map_reply(&items[1]), decision_map(true, 3, 2, 0, 60_000));

    // THROTTLE.INFO: a map; nil stays nil.
    let v: Value = call(&mut c3, &format!("THROTTLE.INFO m:t AT {T}")).expect("INFO");
    assert_eq!(
        map_reply(&v),
        info_fields(
            "token",
            &[
                ("limit", 10),
                ("period_ms", 60_000),
                ("burst", 20),
                ("updated_at", T as i64),
                ("remaining", 14),
                ("reset_after", 36_000)
            ]
        )
    );
    assert_eq!(call::<Value>(&mut c3, "THROTTLE.INFO m:none").expect("INFO"), Value::Nil);

    // Errors stay errors.
    let e = call::<Value>(&mut c3, "THROTTLE.FIXED m:f 0 1m").expect_err("bad limit");
    assert!(e.to_string().contains("invalid limit"), "{e}");
}

#[test]
fn resp3_clients_get_maps_after_waiting_too() {
    let server = Server::start();
    let mut c3 = open(&resp3_url(&server));
    let mut c2 = open(&server.url());
    assert_eq!(throttle(&mut c2, "THROTTLE.FIXED w:ok 1 1h").0, 1);
    assert_eq!(throttle(&mut c2, "THROTTLE.FIXED w:late 1 10s").0, 1);
    // Admitted by the timer, once the key is gone.
    let waiter = std::thread::spawn(move || {
        let v: Value = call(&mut c3, "THROTTLE.FIXED w:ok 1 1h BLOCK 60000").expect("BLOCK");
        (v, c3)
    });
    wait_until("the RESP3 client to wait", Duration::from_secs(5), || waiting(&mut c2) == 1);
    assert_eq!(call::<i64>(&mut c2, "DEL w:ok").expect("DEL"), 1);
    let (v, mut c3) = waiter.join().expect("the RESP3 waiter");
    assert_eq!(map_reply(&v), decision_map(true, 1, 0, 0, 3_600_000));
    // Timed out.
    let v: Value = call(&mut c3, "THROTTLE.FIXED w:late 1 10s BLOCK 100").expect("BLOCK");
    let m = map_reply(&v);
    assert_eq!(m.get("allowed"), Some(&Value::Boolean(false)), "{m:?}");
    assert_eq!(m.len(), 5, "{m:?}");
    assert_eq!(counters(&mut c2, "fixed"), stats(4, 3, 0, 2, 1));
}

// ---------------------------------------------------------------------------
// INFO throttle
// ---------------------------------------------------------------------------

#[test]
fn info_counts_each_command_s_calls() {
    let server = Server::start();
    let mut c = open(&server.url());
    for name in ["fixed", "sliding", "token", "leaky", "all"] {
        assert_eq!(counters(&mut c, name), Counters::default(), "{name} before any call");
    }
    assert_eq!(waiting(&mut c), 0);

    let f = format!("THROTTLE.FIXED s:f 2 1m AT {T}");
    for line in [&f, &f, &f] {
        throttle(&mut c, line); // admitted, admitted, limited
    }
    assert_eq!(counters(&mut c, "fixed"), stats(3, 2, 1, 0, 0));
    throttle(&mut c, "THROTTLE.FIXED s:b 1 1h"); // admitted
    let waiter = Waiter::queued(&server.url(), &mut c, "THROTTLE.FIXED s:b 1 1h BLOCK 60000", 1); // blocked,
    assert_eq!(call::<i64>(&mut c, "DEL s:b").expect("DEL"), 1);
    assert_eq!(waiter.reply().0 .0, 1); // then admitted
    throttle(&mut c, "THROTTLE.FIXED s:t 1 1h"); // admitted
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED s:t 1 1h BLOCK 100").0, 0); // blocked, timed out
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED s:new 1 1h BLOCK 100").0, 1); // admitted at once
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED s:f 2 1m COST 5 AT {T} BLOCK 1000")).3, -1); // limited at once
    assert_eq!(counters(&mut c, "fixed"), stats(9, 6, 2, 2, 1));

    throttle(&mut c, &format!("THROTTLE.SLIDING s:s 1 1m AT {T}"));
    throttle(&mut c, &format!("THROTTLE.SLIDING s:s 1 1m AT {T}"));
    throttle(&mut c, &format!("THROTTLE.SLIDING s:e 1 1m AT {T} EXACT"));
    throttle(&mut c, &format!("THROTTLE.TOKEN s:k 1 1m AT {T}"));
    throttle(&mut c, &format!("THROTTLE.TOKEN s:k 1 1m AT {T}"));
    throttle(&mut c, &format!("THROTTLE.LEAKY s:l 1 1m AT {T}"));
    let specs = "FIXED s:a1 1 1m TOKEN s:a2 1 1m";
    assert_eq!(all(&mut c, &format!("THROTTLE.ALL AT {T} {specs}")).0, 1);
    assert_eq!(all(&mut c, &format!("THROTTLE.ALL AT {T} {specs}")).0, 0);

    assert_eq!(counters(&mut c, "fixed"), stats(9, 6, 2, 2, 1), "THROTTLE.ALL is not counted as FIXED");
    assert_eq!(counters(&mut c, "sliding"), stats(3, 2, 1, 0, 0));
    assert_eq!(counters(&mut c, "token"), stats(2, 1, 1, 0, 0));
    assert_eq!(counters(&mut c, "leaky"), stats(1, 1, 0, 0, 0));
    assert_eq!(counters(&mut c, "all"), stats(2, 1, 1, 0, 0));
    assert_eq!(waiting(&mut c), 0);

    // The section is `throttle_stats`, named by itself or by the module.
    let section: String = call(&mut c, "INFO throttle_stats").expect("INFO");
    assert!(section.contains("# throttle_stats"), "{section}");
    assert!(section.contains("throttle_fixed:calls=9,admitted=6,limited=2,blocked=2,timed_out=1"), "{section}");
    let everything: String = call(&mut c, "INFO everything").expect("INFO");
    assert!(everything.contains("throttle_all:calls=2,admitted=1,limited=1"), "INFO everything lacks the section");
}
