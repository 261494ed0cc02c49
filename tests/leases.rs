//! Leases on a live server: THROTTLE.ACQUIRE, THROTTLE.RELEASE and
//! THROTTLE.RENEW, their waiters, persistence and replication. `make test`
//! runs this file on every server it tests (`THROTTLE_REDIS_SERVER`).
//!
//! Time is driven with `AT` wherever the point is a reply's numbers. Where
//! waiting is the point, the waits that something else must end are long
//! (a minute), so a waiter left waiting shows as a read time-out, never as
//! a lucky pass; no test asserts how long anything took.

mod common;

use std::time::{Duration, Instant};

use common::dump::{Dump, ModuleValue};
use common::{
    call, digest, error, info_field, info_number, master_and_replica, master_and_replica_with, open, sync,
    wait_aof_rewrite_done, wait_until, waiting, Rng, Server,
};
use redis::Value;

/// A fixed instant for `AT` (2023-11-14).
const T: u64 = 1_700_000_000_000_000;
const S: u64 = 1_000_000;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// An ACQUIRE reply in RESP2: the five integers, and the token when
/// admitted.
#[derive(Debug, PartialEq, Eq)]
struct Acquired {
    fields: [i64; 5],
    token: Option<String>,
}

fn acquired(line: &str, v: Value) -> Acquired {
    let Value::Array(items) = v else { panic!("{line}: not an array: {v:?}") };
    assert!(items.len() == 5 || items.len() == 6, "{line}: {items:?}");
    let mut fields = [0; 5];
    for (slot, item) in fields.iter_mut().zip(&items) {
        let Value::Int(n) = item else { panic!("{line}: not an integer: {item:?}") };
        *slot = *n;
    }
    let token = items.get(5).map(|t| match t {
        Value::BulkString(b) => String::from_utf8(b.clone()).expect("UTF-8 token"),
        other => panic!("{line}: the token is not a string: {other:?}"),
    });
    assert_eq!(token.is_some(), fields[0] == 1, "{line}: a token exactly when admitted: {items:?}");
    Acquired { fields, token }
}

fn acquire(c: &mut redis::Connection, line: &str) -> Acquired {
    let v: Value = call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    acquired(line, v)
}

fn int(c: &mut redis::Connection, line: &str) -> i64 {
    call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// `THROTTLE.INFO key [AT]` as (name, value) pairs, the leases apart as
/// (token, ends at µs, ms left).
#[derive(Debug, Default)]
struct Info {
    fields: Vec<(String, i64)>,
    algorithm: String,
    leases: Vec<(String, i64, i64)>,
}

impl Info {
    fn get(&self, name: &str) -> i64 {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("no {name}: {self:?}"))
    }

    fn tokens(&self) -> Vec<String> {
        self.leases.iter().map(|(t, _, _)| t.clone()).collect()
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

fn info(c: &mut redis::Connection, line: &str) -> Info {
    let v: Value = call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    parse_info(line, v)
}

fn parse_info(line: &str, v: Value) -> Info {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            items.chunks(2).map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or(Value::Nil))).collect()
        }
        other => panic!("{line}: {other:?}"),
    };
    let mut out = Info::default();
    for (name, value) in pairs {
        let name = text(&name);
        match (name.as_str(), value) {
            ("algorithm", v) => out.algorithm = text(&v),
            ("leases", Value::Array(leases)) => {
                for lease in leases {
                    let Value::Array(parts) = lease else { panic!("{line}: a lease: {lease:?}") };
                    let [token, Value::Int(at), Value::Int(left)] = parts.as_slice() else {
                        panic!("{line}: a lease: {parts:?}")
                    };
                    out.leases.push((text(token), *at, *left));
                }
            }
            (_, Value::Int(n)) => out.fields.push((name, n)),
            (_, other) => panic!("{line}: field {name} = {other:?}"),
        }
    }
    out
}

/// One command's line of the `throttle_stats` section:
/// (calls, admitted, limited, blocked, timed_out).
fn counters(c: &mut redis::Connection, command: &str) -> [u64; 5] {
    let field = format!("throttle_{command}");
    let line = info_field(c, "throttle", &field).unwrap_or_else(|| panic!("no {field} in INFO throttle"));
    let mut out = [0; 5];
    for pair in line.split(',') {
        let (name, value) = pair.split_once('=').unwrap_or_else(|| panic!("{field}:{line}"));
        let at = ["calls", "admitted", "limited", "blocked", "timed_out"].iter().position(|n| *n == name);
        if let Some(at) = at {
            out[at] = value.parse().unwrap_or_else(|_| panic!("{field}:{line}"));
        }
    }
    out
}

/// An ACQUIRE on its own connection in its own thread.
struct Waiter {
    line: String,
    handle: std::thread::JoinHandle<(redis::RedisResult<Value>, Instant)>,
}

impl Waiter {
    fn start(url: &str, line: &str) -> Waiter {
        let (url, owned) = (url.to_string(), line.to_string());
        let handle = std::thread::spawn(move || {
            let mut c = open(&url);
            let result = call::<Value>(&mut c, &owned);
            (result, Instant::now())
        });
        Waiter { line: line.to_string(), handle }
    }

    /// Starts the call and returns once the server has it waiting, `n`
    /// waiters in all: callers started one after another arrive in order.
    fn queued(url: &str, c: &mut redis::Connection, line: &str, n: i64) -> Waiter {
        let waiter = Waiter::start(url, line);
        wait_until(&format!("`{line}` to wait ({n} waiting)"), Duration::from_secs(5), || waiting(c) == n);
        waiter
    }

    fn reply(self) -> (Acquired, Instant) {
        let (result, at) = self.handle.join().expect("waiter thread");
        let v = result.unwrap_or_else(|e| panic!("{}: {e}", self.line));
        (acquired(&self.line, v), at)
    }

    fn error(self) -> redis::RedisError {
        match self.handle.join().expect("waiter thread").0 {
            Ok(v) => panic!("{}: expected an error, got {v:?}", self.line),
            Err(e) => e,
        }
    }
}

// ---------------------------------------------------------------------------
// 1. The commands
// ---------------------------------------------------------------------------

/// A semaphore of two, driven by `AT`: admissions, a renewal by `ID`, a
/// refusal with the time until the earliest lease ends, releases and
/// renewals that are token-safe, and a lease that ends by itself.
#[test]
fn acquire_release_and_renew_at_fixed_times() {
    let server = Server::start();
    let mut c = server.conn();
    let at = |s: u64| T + s * S;
    let a = acquire(&mut c, &format!("THROTTLE.ACQUIRE s 2 10s ID a AT {}", at(0)));
    assert_eq!(a, Acquired { fields: [1, 2, 1, 0, 10_000], token: Some("a".into()) });
    // Without ID the master makes the token: 32 hex digits.
    let b = acquire(&mut c, &format!("THROTTLE.ACQUIRE s 2 10s AT {}", at(1)));
    assert_eq!(b.fields, [1, 2, 0, 0, 10_000]);
    let b = b.token.expect("a token");
    assert!(b.len() == 32 && b.bytes().all(|x| x.is_ascii_hexdigit()), "{b}");
    // Full: a slot frees when `a` ends, at 10 s; the last lease ends at 11 s.
    let refused = acquire(&mut c, &format!("THROTTLE.ACQUIRE s 2 10s ID c AT {}", at(2)));
    assert_eq!(refused, Acquired { fields: [0, 2, 0, 8_000, 9_000], token: None });
    // `a` again renews its own lease: no slot needed.
    let again = acquire(&mut c, &format!("THROTTLE.ACQUIRE s 2 10s ID a AT {}", at(3)));
    assert_eq!(again, Acquired { fields: [1, 2, 0, 0, 10_000], token: Some("a".into()) });
    // Token-safe: a token not held changes nothing.
    let digest_before = digest(&mut c, "s");
    assert_eq!(int(&mut c, &format!("THROTTLE.RELEASE s c AT {}", at(3))), 0);
    assert_eq!(int(&mut c, &format!("THROTTLE.RENEW s c 5s AT {}", at(3))), 0);
    assert_eq!(int(&mut c, &format!("THROTTLE.RELEASE s {} AT {}", b.to_uppercase(), at(3))), 0);
    assert_eq!(digest(&mut c, "s"), digest_before);
    assert_eq!(int(&mut c, &format!("THROTTLE.RELEASE s a AT {}", at(4))), 1);
    assert_eq!(int(&mut c, &format!("THROTTLE.RELEASE s a AT {}", at(4))), 0, "released once");
    let c_in = acquire(&mut c, &format!("THROTTLE.ACQUIRE s 2 10s ID c AT {}", at(4)));
    assert_eq!(c_in.fields, [1, 2, 0, 0, 10_000]);
    assert_eq!(int(&mut c, &format!("THROTTLE.RENEW s {b} 30s AT {}", at(5))), 1);
    let i = info(&mut c, &format!("THROTTLE.INFO s AT {}", at(5)));
    assert_eq!(i.algorithm, "lease");
    assert_eq!((i.get("limit"), i.get("holders"), i.get("remaining")), (2, 2, 0));
    assert_eq!((i.get("updated_at"), i.get("reset_after")), (at(5) as i64, 30_000));
    assert_eq!(i.leases, vec![("c".into(), at(14) as i64, 9_000), (b.clone(), at(35) as i64, 30_000)]);
    // A call earlier than the key's last change counts at that change.
    let early = acquire(&mut c, &format!("THROTTLE.ACQUIRE s 2 10s ID d AT {}", at(0)));
    assert_eq!(early.fields, [0, 2, 0, 9_000, 30_000]);
    // `c` ends by itself at 14 s: its release is then refused, its slot free.
    assert_eq!(int(&mut c, &format!("THROTTLE.RELEASE s c AT {}", at(14))), 0);
    let d = acquire(&mut c, &format!("THROTTLE.ACQUIRE s 2 10s ID d AT {}", at(14)));
    assert_eq!(d.fields, [1, 2, 0, 0, 21_000]);
    let i = info(&mut c, &format!("THROTTLE.INFO s AT {}", at(14)));
    assert_eq!(i.tokens(), vec!["d".to_string(), b.clone()]);
    let kind: String = call(&mut c, "TYPE s").expect("TYPE");
    assert_eq!(kind, "thr-lease");
    // The key's TTL is reset_after, counted from the server's clock.
    let pttl = int(&mut c, "PTTL s");
    assert!((20_000..=21_000).contains(&pttl), "PTTL {pttl}");
}

/// The key goes with its last lease, whether released or ended; its PTTL
/// is the time until its last lease ends.
#[test]
fn the_key_vanishes_with_its_last_lease() {
    let server = Server::start();
    let mut c = server.conn();
    let a = acquire(&mut c, "THROTTLE.ACQUIRE k 3 5s ID a");
    assert_eq!(a.fields, [1, 3, 2, 0, 5_000]);
    let pttl = int(&mut c, "PTTL k");
    assert!((4_000..=5_000).contains(&pttl), "PTTL {pttl}");
    assert_eq!(int(&mut c, "THROTTLE.RELEASE k a"), 1);
    assert_eq!(int(&mut c, "EXISTS k"), 0);
    let nil: Value = call(&mut c, "THROTTLE.INFO k").expect("INFO");
    assert_eq!(nil, Value::Nil);
    // A lease of 1 ms: the key expires with it.
    acquire(&mut c, "THROTTLE.ACQUIRE k 3 1ms ID a");
    wait_until("the last lease to end", Duration::from_secs(5), || int(&mut c, "EXISTS k") == 0);
    assert_eq!(int(&mut c, "THROTTLE.RELEASE k a"), 0);
    assert_eq!(int(&mut c, "THROTTLE.RENEW k a 1s"), 0);
    assert_eq!(int(&mut c, "EXISTS k"), 0, "a refused release or renewal creates nothing");
}

#[test]
fn errors_name_the_argument_and_wrong_types_are_refused() {
    let server = Server::start();
    let mut c = server.conn();
    let long = "x".repeat(65);
    let cases: Vec<(String, &str)> = vec![
        ("THROTTLE.ACQUIRE k 0 1s".into(), "ERR invalid limit: expected the most holders, an integer from 1 to 100000"),
        ("THROTTLE.ACQUIRE k 100001 1s".into(), "ERR invalid limit: expected the most holders, an integer from 1 to 100000"),
        (
            "THROTTLE.ACQUIRE k 1 0".into(),
            "ERR invalid lease: expected a period, a positive integer with an optional unit ms, s, m, h or d (bare numbers are seconds), from 1ms to 3650d",
        ),
        ("THROTTLE.ACQUIRE k 1 3651d".into(), "ERR invalid lease"),
        (format!("THROTTLE.ACQUIRE k 1 1s ID {long}"), "ERR invalid ID: expected a token of 1 to 64 bytes"),
        ("THROTTLE.ACQUIRE k 1 1s ID".into(), "ERR option ID needs a value"),
        ("THROTTLE.ACQUIRE k 1 1s ID a ID b".into(), "ERR option ID given more than once"),
        ("THROTTLE.ACQUIRE k 1 1s BLOCK -1".into(), "ERR invalid BLOCK"),
        ("THROTTLE.ACQUIRE k 1 1s AT x".into(), "ERR invalid AT"),
        ("THROTTLE.ACQUIRE k 1 1s COST 2".into(), "ERR option COST is not valid for THROTTLE.ACQUIRE"),
        ("THROTTLE.ACQUIRE k 1 1s FOO".into(), "ERR unknown option 'FOO'"),
        (format!("THROTTLE.RELEASE k {long}"), "ERR invalid token: expected a token of 1 to 64 bytes"),
        ("THROTTLE.RELEASE k a BLOCK 1".into(), "ERR option BLOCK is not valid for THROTTLE.RELEASE"),
        ("THROTTLE.RENEW k a 0".into(), "ERR invalid lease"),
        ("THROTTLE.RENEW k a 1s ID b".into(), "ERR option ID is not valid for THROTTLE.RENEW"),
        ("THROTTLE.ACQUIRE k 1".into(), "ERR wrong number of arguments"),
        ("THROTTLE.RELEASE k".into(), "ERR wrong number of arguments"),
        ("THROTTLE.RENEW k a".into(), "ERR wrong number of arguments"),
    ];
    for (line, want) in cases {
        let got = error(&mut c, &line);
        assert!(got.starts_with(want), "{line}: {got}");
    }
    assert_eq!(int(&mut c, "EXISTS k"), 0, "no error created the key");
    let _: Vec<i64> = call(&mut c, "THROTTLE.FIXED f 1 1s").expect("FIXED");
    let _: () = call(&mut c, "SET str x").expect("SET");
    acquire(&mut c, "THROTTLE.ACQUIRE l 1 1m ID a");
    for line in [
        "THROTTLE.ACQUIRE f 1 1s",
        "THROTTLE.ACQUIRE str 1 1s",
        "THROTTLE.RELEASE f a",
        "THROTTLE.RENEW str a 1s",
        "THROTTLE.FIXED l 1 1s",
        "THROTTLE.TOKEN l 1 1s",
        "GET l",
    ] {
        assert!(error(&mut c, line).starts_with("WRONGTYPE"), "{line}");
    }
}

/// RESP3 clients get a map with a `token` field when admitted; RELEASE and
/// RENEW answer integers in both protocols.
#[test]
fn resp3_replies_are_maps_with_the_token() {
    let server = Server::start();
    let mut c3 = open(&format!("{}?protocol=resp3", server.url()));
    let map = |v: Value| -> Vec<(String, Value)> {
        let Value::Map(pairs) = v else { panic!("a map: {v:?}") };
        pairs.into_iter().map(|(k, v)| (text(&k), v)).collect()
    };
    let got = map(call(&mut c3, &format!("THROTTLE.ACQUIRE m 1 1m ID me AT {T}")).expect("ACQUIRE"));
    assert_eq!(
        got,
        vec![
            ("allowed".into(), Value::Boolean(true)),
            ("limit".into(), Value::Int(1)),
            ("remaining".into(), Value::Int(0)),
            ("retry_after".into(), Value::Int(0)),
            ("reset_after".into(), Value::Int(60_000)),
            ("token".into(), Value::BulkString(b"me".to_vec())),
        ]
    );
    let got = map(call(&mut c3, &format!("THROTTLE.ACQUIRE m 1 1m AT {}", T + S)).expect("ACQUIRE"));
    assert_eq!(
        got,
        vec![
            ("allowed".into(), Value::Boolean(false)),
            ("limit".into(), Value::Int(1)),
            ("remaining".into(), Value::Int(0)),
            ("retry_after".into(), Value::Int(59_000)),
            ("reset_after".into(), Value::Int(59_000)),
        ],
        "refused: the five fields, no token"
    );
    let i = info(&mut c3, &format!("THROTTLE.INFO m AT {T}"));
    assert_eq!(i.leases, vec![("me".into(), (T + 60 * S) as i64, 60_000)]);
    assert_eq!(int(&mut c3, &format!("THROTTLE.RENEW m me 2m AT {T}")), 1);
    assert_eq!(int(&mut c3, &format!("THROTTLE.RELEASE m me AT {T}")), 1);
    // RESP2: six elements when admitted, five when refused.
    let mut c2 = server.conn();
    let v: Value = call(&mut c2, &format!("THROTTLE.ACQUIRE m2 1 1m ID me AT {T}")).expect("ACQUIRE");
    assert_eq!(
        v,
        Value::Array(vec![
            Value::Int(1),
            Value::Int(1),
            Value::Int(0),
            Value::Int(0),
            Value::Int(60_000),
            Value::BulkString(b"me".to_vec())
        ])
    );
    let v: Value = call(&mut c2, &format!("THROTTLE.ACQUIRE m2 1 1m AT {T}")).expect("ACQUIRE");
    assert_eq!(v, Value::Array([0, 1, 0, 60_000, 60_000].map(Value::Int).to_vec()));
}

/// Only a change touches the key: refused calls, releases and renewals of
/// tokens not held, and THROTTLE.INFO leave a WATCH alone and emit no
/// event; each change emits its command's event, and `del` with the last
/// lease.
#[test]
fn only_changes_touch_the_key_and_each_emits_an_event() {
    let server = Server::start();
    let mut c = server.conn();
    let mut other = server.conn();
    let _: () = call(&mut c, "CONFIG SET notify-keyspace-events KEA").expect("CONFIG SET");
    let mut listener = server.conn();
    let mut pubsub = listener.as_pubsub();
    pubsub.psubscribe("__keyevent@0__:*").expect("PSUBSCRIBE");
    pubsub.set_read_timeout(Some(Duration::from_secs(2))).expect("read timeout");
    // (line, the transaction watching `k` still runs, events)
    let steps: &[(&str, bool, &[&str])] = &[
        ("THROTTLE.ACQUIRE k 1 1m ID a", false, &["throttle.acquire"]),
        ("THROTTLE.ACQUIRE k 1 1m ID b", true, &[]),
        ("THROTTLE.ACQUIRE k 1 1m ID b BLOCK 1", true, &[]),
        ("THROTTLE.RELEASE k b", true, &[]),
        ("THROTTLE.RENEW k b 1m", true, &[]),
        ("THROTTLE.INFO k", true, &[]),
        ("THROTTLE.RENEW k a 2m", false, &["throttle.renew"]),
        ("THROTTLE.ACQUIRE k 1 1m ID a", false, &["throttle.acquire"]),
        ("THROTTLE.RELEASE k a", false, &["throttle.release", "del"]),
        ("SET marker 1", true, &["set"]),
    ];
    for (line, untouched, _) in steps {
        let _: () = call(&mut c, "WATCH k").expect("WATCH");
        let _: Value = call(&mut other, line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let _: () = call(&mut c, "MULTI").expect("MULTI");
        let _: Value = call(&mut c, "PING").expect("queued");
        let exec: Value = call(&mut c, "EXEC").expect("EXEC");
        assert_eq!(exec != Value::Nil, *untouched, "`{line}`: WATCH");
    }
    let mut events = Vec::new();
    while let Ok(message) = pubsub.get_message() {
        let key: String = message.get_payload().expect("payload");
        let event = message.get_channel_name().trim_start_matches("__keyevent@0__:").to_string();
        events.push(format!("{event} {key}"));
        if key == "marker" {
            break;
        }
    }
    let want: Vec<String> = steps
        .iter()
        .flat_map(|(line, _, names)| {
            let key = line.split(' ').nth(1).unwrap_or_default();
            names.iter().map(move |name| format!("{name} {key}"))
        })
        .collect();
    assert_eq!(events, want);
}

// ---------------------------------------------------------------------------
// 2. Waiting
// ---------------------------------------------------------------------------

/// Waiters are admitted in arrival order, each when the holder before it
/// releases its slot; a waiter learns its own token.
#[test]
fn waiters_are_admitted_in_arrival_order_as_holders_release() {
    let server = Server::start();
    let mut c = server.conn();
    let mut holder = acquire(&mut c, "THROTTLE.ACQUIRE q 1 1m ID h").token.expect("token");
    let waiters: Vec<Waiter> = (0..4)
        .map(|i| Waiter::queued(&server.url(), &mut c, &format!("THROTTLE.ACQUIRE q 1 1m ID w{i} BLOCK 60000"), i + 1))
        .collect();
    assert_eq!(counters(&mut c, "acquire")[3], 4, "four blocked");
    for (i, waiter) in waiters.into_iter().enumerate() {
        assert_eq!(int(&mut c, &format!("THROTTLE.RELEASE q {holder}")), 1);
        let (got, _) = waiter.reply();
        assert_eq!(got.fields[..3], [1, 1, 0]);
        assert_eq!(got.token.as_deref(), Some(format!("w{i}").as_str()), "arrival order");
        let i_now = info(&mut c, "THROTTLE.INFO q");
        assert_eq!(i_now.tokens(), vec![format!("w{i}")]);
        holder = format!("w{i}");
    }
    assert_eq!(waiting(&mut c), 0);
}

/// Without `ID` a waiter gets a token the master made when its turn came;
/// a lease that ends by itself wakes the next waiter, and the waiters are
/// served by a timer at each end, not by polling: the server's write
/// check (THROTTLE._GATE) runs a few times, not once a millisecond.
#[test]
fn a_lease_ending_wakes_the_next_waiter() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "THROTTLE.ACQUIRE e 1 300ms ID h");
    let first = Waiter::queued(&server.url(), &mut c, "THROTTLE.ACQUIRE e 1 300ms BLOCK 20000", 1);
    let second = Waiter::queued(&server.url(), &mut c, "THROTTLE.ACQUIRE e 1 300ms ID b BLOCK 20000", 2);
    let (a, a_at) = first.reply();
    let (b, b_at) = second.reply();
    assert_eq!((a.fields[0], b.fields[0]), (1, 1));
    let token = a.token.expect("a made token");
    assert!(token.len() == 32 && token != "h", "{token}");
    assert!(a_at <= b_at, "the first waiter was admitted first");
    // Module commands keep their case in INFO commandstats.
    let stats: String = call(&mut c, "INFO commandstats").expect("INFO");
    let gates = stats
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("cmdstat_throttle._gate:calls=").map(str::to_string))
        .and_then(|rest| rest.split(',').next().and_then(|n| n.parse::<u64>().ok()))
        .unwrap_or(0);
    assert!((1..=8).contains(&gates), "{gates} write checks for two waits: polling?");
}

/// Commands that remove or replace a waited key let its waiters in at once.
#[test]
fn del_flushall_and_rename_wake_waiters_at_once() {
    for command in ["DEL w", "UNLINK w", "FLUSHALL", "FLUSHDB", "RENAME w elsewhere", "SET w string"] {
        let server = Server::start();
        let mut c = server.conn();
        acquire(&mut c, "THROTTLE.ACQUIRE w 1 1m ID h");
        let waiter = Waiter::queued(&server.url(), &mut c, "THROTTLE.ACQUIRE w 1 1m ID next BLOCK 60000", 1);
        let _: Value = call(&mut c, command).unwrap_or_else(|e| panic!("{command}: {e}"));
        if command.starts_with("SET") {
            let e = waiter.error();
            assert_eq!(e.code(), Some("WRONGTYPE"), "{command}: {e}");
        } else {
            let (got, _) = waiter.reply();
            assert_eq!(got, Acquired { fields: [1, 1, 0, 0, 60_000], token: Some("next".into()) }, "{command}");
            assert_eq!(info(&mut c, "THROTTLE.INFO w").tokens(), vec!["next".to_string()], "{command}");
        }
        assert_eq!(waiting(&mut c), 0, "{command}");
    }
}

/// A waiter whose time is up gets the refused reply; a holder's own
/// `BLOCK` call renews at once, ahead of the queue; the counters say so.
#[test]
fn a_waiter_times_out_and_a_holder_renews_past_the_queue() {
    let server = Server::start();
    let mut c = server.conn();
    acquire(&mut c, "THROTTLE.ACQUIRE t 1 1m ID h");
    let long = Waiter::queued(&server.url(), &mut c, "THROTTLE.ACQUIRE t 1 1m ID x BLOCK 60000", 1);
    let short = Waiter::queued(&server.url(), &mut c, "THROTTLE.ACQUIRE t 1 1m ID y BLOCK 100", 2);
    let (got, _) = short.reply();
    assert_eq!(got.fields[..3], [0, 1, 0]);
    assert!(got.fields[3] > 0 && got.token.is_none(), "{got:?}");
    let renewed = acquire(&mut c, "THROTTLE.ACQUIRE t 1 1m ID h BLOCK 60000");
    assert_eq!(renewed.token.as_deref(), Some("h"));
    assert_eq!(waiting(&mut c), 1, "x still waits");
    // 4 calls: h, x and y blocked, y timed out, h renewed.
    assert_eq!(counters(&mut c, "acquire"), [4, 2, 0, 2, 1]);
    assert_eq!(int(&mut c, "THROTTLE.RELEASE t h"), 1);
    assert_eq!(long.reply().0.token.as_deref(), Some("x"));
    assert_eq!(counters(&mut c, "acquire"), [4, 3, 0, 2, 1]);
    assert_eq!(counters(&mut c, "release"), [1, 1, 0, 0, 0]);
    assert_eq!(int(&mut c, "THROTTLE.RELEASE t h"), 0);
    assert_eq!(int(&mut c, "THROTTLE.RENEW t x 1m"), 1);
    assert_eq!(counters(&mut c, "release"), [2, 1, 1, 0, 0]);
    assert_eq!(counters(&mut c, "renew"), [1, 1, 0, 0, 0]);
    // Inside MULTI a call does not wait.
    let _: () = call(&mut c, "MULTI").expect("MULTI");
    let _: Value = call(&mut c, "THROTTLE.ACQUIRE t 1 1m ID z BLOCK 60000").expect("queued");
    let v: Value = call(&mut c, "EXEC").expect("EXEC");
    let Value::Array(replies) = v else { panic!("{v:?}") };
    assert_eq!(acquired("MULTI", replies[0].clone()).fields[0], 0);
}

/// A waiter whose slot frees while writes are paused is admitted after
/// the pause, and nothing is written or propagated during it.
#[test]
fn a_waiter_waits_out_a_write_pause() {
    let (master, replica) = master_and_replica();
    let mut c = open(&master.url());
    acquire(&mut c, "THROTTLE.ACQUIRE p 1 500ms ID h");
    let waiter = Waiter::queued(&master.url(), &mut c, "THROTTLE.ACQUIRE p 1 1m ID next BLOCK 20000", 1);
    let pause = Duration::from_millis(2500);
    let paused_at = Instant::now();
    let _: () = call(&mut c, &format!("CLIENT PAUSE {} WRITE", pause.as_millis())).expect("CLIENT PAUSE");
    // Reads go on: the lease ends, and still nothing is written.
    wait_until("the lease to end during the pause", Duration::from_secs(2), || holders(&mut c, "p").is_empty());
    let offset = info_number(&mut c, "replication", "master_repl_offset");
    while paused_at.elapsed() < pause - Duration::from_millis(400) {
        assert_eq!(waiting(&mut c), 1, "admitted during the pause");
        assert_eq!(info_number(&mut c, "replication", "master_repl_offset"), offset, "propagated during the pause");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (got, _) = waiter.reply();
    assert_eq!(got.token.as_deref(), Some("next"));
    sync(&mut c);
    let mut r = open(&replica.url());
    common::same_values_on_replica(&mut c, &mut r);
    assert_eq!(info(&mut r, "THROTTLE.INFO p").tokens(), vec!["next".to_string()]);
}

/// A read-only replica refuses the call as Redis refuses writes; on a
/// writable replica a waiter is served as a command is.
#[test]
fn on_a_replica_waiters_follow_the_write_rules() {
    let (_master, replica) = master_and_replica();
    let mut r = open(&replica.url());
    let e = error(&mut r, "THROTTLE.ACQUIRE w 1 1s");
    assert!(e.starts_with("READONLY"), "a read-only replica: {e}");
    let _: () = call(&mut r, "CONFIG SET replica-read-only no").expect("CONFIG SET");
    acquire(&mut r, "THROTTLE.ACQUIRE w 1 1m ID h");
    let waiter = Waiter::queued(&replica.url(), &mut r, "THROTTLE.ACQUIRE w 1 1m ID next BLOCK 60000", 1);
    assert_eq!(int(&mut r, "THROTTLE.RELEASE w h"), 1);
    let (got, _) = waiter.reply();
    assert_eq!(got, Acquired { fields: [1, 1, 0, 0, 60_000], token: Some("next".into()) });
    assert_eq!(waiting(&mut r), 0);
}

// ---------------------------------------------------------------------------
// 3. Replication, the AOF, failover
// ---------------------------------------------------------------------------

/// A random workload of acquisitions (named and made tokens, with and
/// without `AT`), releases, renewals (of held tokens and others) and
/// waiters; then the replica holds exactly the master's values, and so
/// does the master restarted from its AOF, as commands and rewritten.
#[test]
fn replica_and_aof_hold_the_masters_leases_after_a_workload() {
    let (mut master, replica) = master_and_replica_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut c = open(&master.url());
    wait_aof_rewrite_done(&mut c);
    let mut rng = Rng(7);
    let mut tokens: Vec<(String, String)> = Vec::new();
    let base = common::now_us();
    let mut waiters = Vec::new();
    for step in 0..600u64 {
        let key = format!("lease:{}", rng.below(12));
        let lease = ["1h", "30m", "2h"][rng.below(3) as usize];
        match rng.below(10) {
            0..=3 => {
                let id = if rng.below(2) == 0 { format!(" ID t{}", rng.below(40)) } else { String::new() };
                let at = if rng.below(3) == 0 { format!(" AT {}", base + step * 1000) } else { String::new() };
                let got = acquire(&mut c, &format!("THROTTLE.ACQUIRE {key} {} {lease}{id}{at}", 1 + rng.below(4)));
                if let Some(token) = got.token {
                    tokens.push((key, token));
                }
            }
            4..=5 if !tokens.is_empty() => {
                let (key, token) = tokens.swap_remove(rng.below(tokens.len() as u64) as usize);
                let _ = int(&mut c, &format!("THROTTLE.RELEASE {key} {token}"));
            }
            6 if !tokens.is_empty() => {
                let (key, token) = &tokens[rng.below(tokens.len() as u64) as usize];
                let _ = int(&mut c, &format!("THROTTLE.RENEW {key} {token} {lease}"));
            }
            7 => {
                let _ = int(&mut c, &format!("THROTTLE.RELEASE {key} t{}", rng.below(40)));
            }
            8 if waiters.len() < 4 => {
                let n = waiting(&mut c) + 1;
                let line = format!("THROTTLE.ACQUIRE {key} 1 1h BLOCK 60000");
                let full = acquire(&mut c, &format!("THROTTLE.ACQUIRE {key} 1 1h ID filler{step}"));
                if let Some(token) = full.token {
                    tokens.push((key.clone(), token));
                }
                waiters.push((key.clone(), Waiter::queued(&master.url(), &mut c, &line, n)));
            }
            _ => {}
        }
    }
    // Release every holder of the waited keys: the waiters are admitted
    // by timers, and their leases reach the replica and the AOF too.
    for (key, waiter) in waiters {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !waiter.handle.is_finished() && Instant::now() < deadline {
            for token in holders(&mut c, &key) {
                let _ = int(&mut c, &format!("THROTTLE.RELEASE {key} {token}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let (got, _) = waiter.reply();
        assert_eq!(got.fields[0], 1, "{key}");
    }
    sync(&mut c);
    let mut r = open(&replica.url());
    // Same values, expiring at the same instants.
    common::same_values_on_replica(&mut c, &mut r);
    let keys: Vec<String> = call(&mut c, "KEYS *").expect("KEYS");
    assert!(keys.len() >= 6, "the workload left keys: {keys:?}");
    let before: Vec<(String, String)> = keys.iter().map(|k| (k.clone(), digest(&mut c, k))).collect();
    // The AOF as the commands wrote it: lease changes, never the calls.
    master.restart("NOSAVE");
    let mut c = master.conn();
    for (key, want) in &before {
        assert_eq!(&digest(&mut c, key), want, "{key} after replaying the AOF");
    }
    // Rewritten as THROTTLE._LOAD calls.
    let _: String = call(&mut c, "BGREWRITEAOF").expect("BGREWRITEAOF");
    wait_aof_rewrite_done(&mut c);
    master.restart("NOSAVE");
    let mut c = master.conn();
    for (key, want) in &before {
        assert_eq!(&digest(&mut c, key), want, "{key} after the rewritten AOF");
    }
    let _ = replica;
}

/// The tokens holding leases on `key` now (none for a missing key).
fn holders(c: &mut redis::Connection, key: &str) -> Vec<String> {
    let line = format!("THROTTLE.INFO {key}");
    match call::<Value>(c, &line) {
        Ok(Value::Nil) => Vec::new(),
        Ok(v) => parse_info(&line, v).tokens(),
        Err(e) => panic!("{line}: {e}"),
    }
}

/// The AOF and the replication stream carry lease changes, never the
/// commands that a replay would decide again.
#[test]
fn the_aof_holds_lease_changes_not_calls() {
    // Every write reaches the file before the reply (everysec may hold a
    // write back while a background fsync runs).
    let server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.conn();
    wait_aof_rewrite_done(&mut c);
    acquire(&mut c, "THROTTLE.ACQUIRE a 2 1h");
    acquire(&mut c, "THROTTLE.ACQUIRE a 2 1h ID x");
    assert_eq!(int(&mut c, "THROTTLE.RENEW a x 2h"), 1);
    assert_eq!(int(&mut c, "THROTTLE.RELEASE a x"), 1);
    let dir = server.dir.path().join("appendonlydir");
    let mut incr = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("appendonlydir") {
        let path = entry.expect("entry").path();
        if path.to_string_lossy().contains(".incr.") {
            incr.extend(std::fs::read(&path).expect("read"));
        }
    }
    let text = String::from_utf8_lossy(&incr);
    assert_eq!(text.matches("THROTTLE._LEASE").count(), 4, "{text}");
    for command in ["THROTTLE.ACQUIRE", "THROTTLE.RENEW", "THROTTLE.RELEASE"] {
        assert!(!text.contains(command), "the AOF replays {command}");
    }
}

/// After FAILOVER the new master holds the same leases: the same holders
/// keep their slots, and their tokens still release them.
#[test]
fn failover_keeps_the_holders() {
    let (mut master, mut replica) = master_and_replica();
    let mut c = open(&master.url());
    acquire(&mut c, "THROTTLE.ACQUIRE f 3 1h ID a");
    let made = acquire(&mut c, "THROTTLE.ACQUIRE f 3 1h").token.expect("token");
    acquire(&mut c, "THROTTLE.ACQUIRE f 3 1h ID c");
    let waiter = Waiter::queued(&master.url(), &mut c, "THROTTLE.ACQUIRE f 3 1h ID d BLOCK 30000", 1);
    let before = info(&mut c, "THROTTLE.INFO f");
    let mut r = common::fail_over(&mut c, &replica);
    let e = waiter.error();
    assert!(e.to_string().contains("UNBLOCKED"), "{e}");
    let after = info(&mut r, "THROTTLE.INFO f");
    let ends = |i: &Info| i.leases.iter().map(|(token, end, _)| (token.clone(), *end)).collect::<Vec<_>>();
    assert_eq!(ends(&after), ends(&before), "the same holders, ending at the same instants");
    assert_eq!(acquire(&mut r, "THROTTLE.ACQUIRE f 3 1h ID d").fields[0], 0, "still full");
    assert_eq!(int(&mut r, &format!("THROTTLE.RELEASE f {made}")), 1);
    assert_eq!(acquire(&mut r, "THROTTLE.ACQUIRE f 3 1h ID d").fields[0], 1);
    assert!(master.alive() && replica.alive());
}

// ---------------------------------------------------------------------------
// 4. The type: DUMP/RESTORE, COPY, RENAME, MEMORY USAGE, hostile payloads
// ---------------------------------------------------------------------------

#[test]
fn dump_restore_copy_rename_and_memory_usage_keep_the_leases() {
    let server = Server::start();
    let mut c = server.conn();
    for id in ["a", "b"] {
        acquire(&mut c, &format!("THROTTLE.ACQUIRE k 100 1h ID {id}"));
    }
    let want = digest(&mut c, "k");
    let small = int(&mut c, "MEMORY USAGE k");
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut c).expect("DUMP");
    let _: () = redis::cmd("RESTORE").arg("r").arg(3_600_000).arg(&payload).query(&mut c).expect("RESTORE");
    assert_eq!(digest(&mut c, "r"), want);
    assert_eq!(int(&mut c, "COPY k copy"), 1);
    assert_eq!(digest(&mut c, "copy"), want);
    let _: () = call(&mut c, "RENAME copy moved").expect("RENAME");
    assert_eq!(digest(&mut c, "moved"), want);
    assert_eq!(info(&mut c, "THROTTLE.INFO moved").tokens(), vec!["a".to_string(), "b".to_string()]);
    assert_eq!(int(&mut c, "THROTTLE.RELEASE moved a"), 1);
    assert_eq!(digest(&mut c, "k"), want, "the copy is a copy");
    for i in 0..50 {
        acquire(&mut c, &format!("THROTTLE.ACQUIRE k 100 1h ID holder-with-a-longer-token-{i}"));
    }
    let large = int(&mut c, "MEMORY USAGE k");
    assert!(large > small + 50 * 40, "MEMORY USAGE {small} -> {large}");
    let ok: String = call(&mut c, "DEBUG RELOAD").expect("DEBUG RELOAD");
    assert_eq!(ok, "OK");
    assert_eq!(info(&mut c, "THROTTLE.INFO k").get("holders"), 52);
}

/// RESTORE of truncated, bit-flipped and rewritten lease payloads (with a
/// valid checksum, so the module's decoder sees them) either fails with an
/// error or leaves leases the commands run on; the server stays up.
#[test]
fn hostile_restore_payloads_of_leases_are_refused_or_sound() {
    let mut server = Server::start_with(&["--sanitize-dump-payload", "yes"]);
    let mut c = server.conn();
    let at = |s: u64| T + s * S;
    acquire(&mut c, &format!("THROTTLE.ACQUIRE k 3 1m ID a AT {}", at(0)));
    acquire(&mut c, &format!("THROTTLE.ACQUIRE k 3 1m ID a-token-of-more-than-8-bytes AT {}", at(1)));
    acquire(&mut c, &format!("THROTTLE.ACQUIRE k 3 1m AT {}", at(2)));
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut c).expect("DUMP");
    let dump = Dump::parse(&payload);
    let value = ModuleValue::parse(&dump.body);
    assert_eq!(value.words[..3], [3, at(2), 3], "limit, time, count");
    let mut accepted = 0;
    let mut restore = |server: &mut Server, c: &mut redis::Connection, body: &[u8], what: &str| -> bool {
        let result: redis::RedisResult<String> =
            redis::cmd("RESTORE").arg("victim").arg(0).arg(dump.seal(body)).arg("REPLACE").query(c);
        assert!(server.alive(), "{what}: the server died on RESTORE; log:\n{}", server.log());
        let ok = match result {
            Ok(_) => {
                exercise(c, what);
                true
            }
            Err(e) => {
                assert!(e.code().is_some(), "{what}: {e}");
                false
            }
        };
        let _: redis::RedisResult<i64> = call(c, "DEL victim");
        accepted += usize::from(ok);
        ok
    };
    assert!(restore(&mut server, &mut c, &dump.body, "intact"));
    for cut in 0..dump.body.len() {
        restore(&mut server, &mut c, &dump.body[..cut], &format!("cut to {cut} bytes"));
    }
    for n in 0..value.words.len() {
        let what = format!("only {n} words");
        assert!(!restore(&mut server, &mut c, &value.encode(&value.words[..n], true), &what), "{what}");
    }
    for bit in 0..dump.body.len() * 8 {
        let mut body = dump.body.clone();
        body[bit / 8] ^= 1 << (bit % 8);
        restore(&mut server, &mut c, &body, &format!("bit {bit} flipped"));
    }
    let edges = [0, 1, 2, 3, 4, 8, 64, 65, 100_000, 100_001, u64::MAX, 1 << 63, at(0), at(2), at(62), at(63)];
    for i in 0..value.words.len() {
        for w in edges {
            let mut words = value.words.clone();
            words[i] = w;
            restore(&mut server, &mut c, &value.encode(&words, true), &format!("word {i} = {w}"));
        }
    }
    assert!(accepted > 1, "some damage leaves a valid value");
    let pong: String = call(&mut c, "PING").expect("PING");
    assert_eq!(pong, "PONG");
    let log = server.log();
    assert!(!log.contains("REDIS BUG REPORT") && !log.contains("panicked"), "log:\n{log}");
}

/// Runs the lease commands on whatever RESTORE left in `victim`.
fn exercise(c: &mut redis::Connection, what: &str) {
    let kind: String = call(c, "TYPE victim").unwrap_or_else(|e| panic!("{what}: TYPE: {e}"));
    if kind != "thr-lease" {
        return;
    }
    let later = T + 30 * S;
    for line in [
        format!("THROTTLE.INFO victim AT {later}"),
        format!("THROTTLE.ACQUIRE victim 3 1m AT {later}"),
        format!("THROTTLE.ACQUIRE victim 100000 3650d ID a AT {later}"),
        format!("THROTTLE.RENEW victim a 1ms AT {later}"),
        format!("THROTTLE.RELEASE victim a-token-of-more-than-8-bytes AT {later}"),
        "THROTTLE.ACQUIRE victim 1 1s".to_string(),
    ] {
        let _: Value = call(c, &line).unwrap_or_else(|e| panic!("{what}: {line}: {e}"));
    }
    if int(c, "EXISTS victim") == 1 {
        let _: Vec<String> = call(c, "DEBUG DIGEST-VALUE victim").unwrap_or_else(|e| panic!("{what}: {e}"));
        let _ = int(c, "MEMORY USAGE victim");
        let payload: Vec<u8> = redis::cmd("DUMP").arg("victim").query(c).unwrap_or_else(|e| panic!("{what}: {e}"));
        Dump::parse(&payload);
    }
}

/// `THROTTLE._LEASE` applies only changes the master could have sent.
#[test]
fn hand_made_lease_changes_are_validated() {
    let server = Server::start();
    let mut c = server.conn();
    let change = |op: u8, at: u64, limit: u64, until: u64, clock: u64, token: &[u8]| {
        let mut b = vec![1, op];
        for w in [at, limit, until, clock] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(token);
        b
    };
    let send = |c: &mut redis::Connection, key: &str, bytes: Vec<u8>| -> redis::RedisResult<String> {
        redis::cmd("THROTTLE._LEASE").arg(key).arg(bytes).query(c)
    };
    let now = common::now_us();
    assert_eq!(send(&mut c, "h", change(b'p', now, 2, now + 60 * S, now, b"x")).expect("_LEASE"), "OK");
    assert_eq!(info(&mut c, "THROTTLE.INFO h").tokens(), vec!["x".to_string()]);
    let pttl = int(&mut c, "PTTL h");
    assert!((58_000..=60_000).contains(&pttl), "PTTL {pttl}");
    let bad = [
        change(b'p', now, 0, now + S, now, b"y"),
        change(b'p', now, 1, now + S, now, b"y"), // a second lease over limit 1
        change(b'p', now, 2, now, now, b"y"),
        change(b'r', now, 2, 5, now, b"y"),
        change(b'p', now, 2, now + S, now, b""),
        change(b'x', now, 2, now + S, now, b"y"),
        vec![1, b'p'],
    ];
    for bytes in bad {
        let e = send(&mut c, "h", bytes.clone()).expect_err("refused");
        assert!(e.to_string().contains("invalid lease change"), "{bytes:?}: {e}");
    }
    assert_eq!(info(&mut c, "THROTTLE.INFO h").tokens(), vec!["x".to_string()], "nothing changed");
    assert_eq!(send(&mut c, "h", change(b'r', now, 2, 0, now, b"x")).expect("_LEASE"), "OK");
    assert_eq!(int(&mut c, "EXISTS h"), 0, "the last lease removed");
    let _: () = call(&mut c, "SET s x").expect("SET");
    let e = send(&mut c, "s", change(b'p', now, 2, now + S, now, b"y")).expect_err("WRONGTYPE");
    assert_eq!(e.code(), Some("WRONGTYPE"));
}

// ---------------------------------------------------------------------------
// 5. Metadata
// ---------------------------------------------------------------------------

/// COMMAND DOCS, key specs (COMMAND GETKEYS) and, where modules may add
/// ACL categories, `@throttle`.
#[test]
fn command_docs_key_specs_and_categories() {
    let server = Server::start();
    let mut c = server.conn();
    for (line, key) in [
        ("COMMAND GETKEYS THROTTLE.ACQUIRE sem 1 1s ID a", "sem"),
        ("COMMAND GETKEYS THROTTLE.RELEASE sem a", "sem"),
        ("COMMAND GETKEYS THROTTLE.RENEW sem a 1s", "sem"),
    ] {
        let keys: Vec<String> = call(&mut c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(keys, vec![key.to_string()], "{line}");
    }
    let docs: Value = call(&mut c, "COMMAND DOCS THROTTLE.ACQUIRE THROTTLE.RELEASE THROTTLE.RENEW").expect("DOCS");
    let text = format!("{docs:?}");
    for word in ["lease", "token", "ID", "BLOCK", "AT", "summary"] {
        assert!(text.contains(word), "COMMAND DOCS lacks {word}: {text}");
    }
    let info: Value = call(&mut c, "COMMAND INFO THROTTLE.ACQUIRE THROTTLE.RELEASE").expect("INFO");
    let text = format!("{info:?}");
    assert!(text.contains("denyoom") && text.contains("fast"), "{text}");
    let categories: redis::RedisResult<Vec<String>> = call(&mut c, "ACL CAT throttle");
    if let Ok(commands) = categories {
        for name in ["throttle.acquire", "throttle.release", "throttle.renew"] {
            assert!(commands.iter().any(|c| c.eq_ignore_ascii_case(name)), "@throttle lacks {name}: {commands:?}");
        }
        assert!(!commands.iter().any(|c| c.eq_ignore_ascii_case("throttle._lease")), "internal commands stay out");
    }
}
