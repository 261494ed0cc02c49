//! CL.THROTTLE on a real server: every input redis-cell 0.5.0 answers gets
//! its reply, beyond the native commands' bounds too; bad input gets an
//! error naming the argument and changes nothing; the state a call leaves
//! reaches replicas and the AOF exactly and survives every way a value is
//! saved and loaded; THROTTLE.TOKEN and THROTTLE.INFO read it.
//!
//! CL.THROTTLE has no `AT` (redis-cell's arguments are fixed), so these
//! calls run on the server's clock: each is a first call on its key, or a
//! quota slow enough (a unit per minute or more) that the microseconds
//! between calls cannot change a reply in whole seconds.

mod common;

use std::collections::BTreeMap;

use common::{call, digest, error, Server};

type CellReply = [i64; 5];

fn cl(c: &mut redis::Connection, line: &str) -> CellReply {
    let v: Vec<i64> = call(c, &format!("CL.THROTTLE {line}")).unwrap_or_else(|e| panic!("CL.THROTTLE {line}: {e}"));
    v.try_into().unwrap_or_else(|v| panic!("CL.THROTTLE {line}: {v:?}"))
}

/// Each call, in order, and the reply redis-cell 0.5.0 gave it (on Redis
/// 7.0, each key fresh before its first call, the calls of a key well
/// within a second).
const REDIS_CELL_REPLIES: &[(&str, CellReply)] = &[
    // redis-cell's README.
    ("readme 15 30 60", [0, 16, 15, -1, 2]),
    // 1 per 30 days with a burst of 1000: the full bucket takes 82 years.
    ("monthly 1000 1 2592000", [0, 1001, 1000, -1, 2_592_000]),
    ("monthly 1000 1 2592000", [0, 1001, 999, -1, 5_184_000]),
    ("monthly 1000 1 2592000 998", [0, 1001, 1, -1, 2_592_000_000]),
    ("monthly 1000 1 2592000 2", [1, 1001, 1, 2_592_000, 2_592_000_000]),
    // A period above 3650 days.
    ("decade 0 1 315360001", [0, 1, 0, -1, 315_360_001]),
    ("decade 0 1 315360001", [1, 1, 0, 315_360_001, 315_360_001]),
    // A count above 10^15: 1 ns per unit.
    ("fast 5 1000000000000001 2000000", [0, 6, 0, -1, 0]),
    // Under 1 µs per unit redis-cell's `remaining` divides by zero.
    ("sub-us 9 2000000 1", [0, 10, i64::MAX, -1, 0]),
    // A max_burst of 10^15 and more.
    ("huge 1000000000000000 1000000 1", [0, 1_000_000_000_000_001, 1_000_000_000_000_000, -1, 0]),
    // The largest max_burst at 1 µs per unit: τ = 2^63 ns less 807.
    ("huger 9223372036854774 1000000 1", [0, 9_223_372_036_854_775, 9_223_372_036_854_774, -1, 0]),
    // Negative max_burst: limited, but a peek is admitted.
    ("negative -1 1 1", [1, 0, 0, -1, 0]),
    ("negative -1 1 1 0", [0, 0, 0, -1, 0]),
    ("negative-5 -5 1 60", [1, -4, 0, -1, 0]),
    // A negative rate, and a refund under it with a negative burst, which
    // redis-cell stores as 180 s of debt.
    ("negative-rate 5 -1 60", [1, 6, 0, -1, 0]),
    ("negative-rate 5 -1 60 -3", [1, 6, 0, -1, 0]),
    ("both-negative -5 1 -60 -3", [0, -4, 0, -1, 180]),
    // A period of 3170 years: the emission interval saturates at 2^63 ns.
    ("saturated 0 1 100000000000", [0, 1, 0, -1, 9_223_372_037]),
    // Both signs negative: the same rate.
    ("same-rate 15 -30 -60", [0, 16, 15, -1, 2]),
    // More than the bucket holds.
    ("big 4 1 60 6", [1, 5, 5, -1, 0]),
];

#[test]
fn every_input_redis_cell_answers_gets_its_reply() {
    let server = Server::start();
    let mut c = server.conn();
    for &(line, want) in REDIS_CELL_REPLIES {
        assert_eq!(cl(&mut c, line), want, "CL.THROTTLE {line}");
    }
    // The keys the admitted calls left hold what redis-cell would: a
    // thr-token key expiring when its bucket is full again.
    for (key, ttl_s) in [
        ("readme", 2),
        ("monthly", 1000 * 2_592_000),
        ("decade", 315_360_001),
        ("both-negative", 180),
        ("saturated", 9_223_372_037),
    ] {
        let kind: String = call(&mut c, &format!("TYPE {key}")).expect("TYPE");
        assert_eq!(kind, "thr-token", "{key}");
        let pttl: i64 = call(&mut c, &format!("PTTL {key}")).expect("PTTL");
        assert!((ttl_s * 1000 - 1_000..=ttl_s * 1000).contains(&pttl), "{key}: PTTL {pttl}");
    }
    // Peeks and limited calls leave nothing.
    for key in ["negative", "negative-5", "negative-rate", "big"] {
        let exists: i64 = call(&mut c, &format!("EXISTS {key}")).expect("EXISTS");
        assert_eq!(exists, 0, "{key}");
    }
}

#[test]
fn bad_input_gets_an_error_naming_the_argument_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(cl(&mut c, "k 4 1 60 2"), [0, 5, 3, -1, 120]);
    let before = digest(&mut c, "k");
    let cases: &[(&str, &str)] = &[
        ("k x 1 60", "ERR Cell error: Store error: Couldn't parse as integer: x"),
        ("k 4 1.5 60", "ERR Cell error: Store error: Couldn't parse as integer: 1.5"),
        ("k 4 1 60s", "ERR Cell error: Store error: Couldn't parse as integer: 60s"),
        ("k 4 1 60 9223372036854775808", "ERR Cell error: Store error: Couldn't parse as integer: 9223372036854775808"),
        ("k 4 0 60", "ERR Cell error: Store error: Zero rates are not supported"),
        ("k 4 1 0", "ERR Cell error: Store error: Zero rates are not supported"),
        ("k 4 2000000000 1", "ERR Cell error: Store error: Zero rates are not supported"),
        ("k 4 1 60 1 extra", "ERR Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"),
        // A refund past the idle state: redis-cell's TTL error.
        ("k 4 1 60 -3", "ERR Cell error: Store error: Error while setting key expire"),
        // Where redis-cell's T * quantity wraps (to 0 here: a peek), the
        // exact product, a refund far past the idle state.
        ("k 4 1 1 -9223372036854775808", "ERR Cell error: Store error: Error while setting key expire"),
    ];
    for &(line, want) in cases {
        assert_eq!(error(&mut c, &format!("CL.THROTTLE {line}")), want, "CL.THROTTLE {line}");
        assert_eq!(digest(&mut c, "k"), before, "CL.THROTTLE {line} changed the key");
    }
    // Where redis-cell's 64-bit arithmetic wraps: max_burst named.
    for line in ["k 9223372036854775807 1 1", "k 1000000000000000 1 1", "k 1 1 100000000000", "k -3 1 100000000000"] {
        let e = error(&mut c, &format!("CL.THROTTLE {line}"));
        assert!(e.starts_with("ERR invalid max_burst: "), "CL.THROTTLE {line}: {e}");
        assert_eq!(digest(&mut c, "k"), before, "CL.THROTTLE {line} changed the key");
    }
    for line in ["fresh x 1 1", "fresh 9223372036854775807 1 1", "fresh 4 1 60 -3"] {
        let _ = error(&mut c, &format!("CL.THROTTLE {line}"));
    }
    let exists: i64 = call(&mut c, "EXISTS fresh").expect("EXISTS");
    assert_eq!(exists, 0);
    // Too few arguments: the server's arity error. A key of another type:
    // WRONGTYPE (redis-cell crashes the server).
    assert!(error(&mut c, "CL.THROTTLE k 4 1").contains("wrong number of arguments"));
    let _: () = call(&mut c, "SET s 1").expect("SET");
    assert!(error(&mut c, "CL.THROTTLE s 4 1 60").starts_with("WRONGTYPE"));
    let _: () = call(&mut c, "THROTTLE.FIXED f 10 1m").map(|_: Vec<i64>| ()).expect("FIXED");
    assert!(error(&mut c, "CL.THROTTLE f 4 1 60").starts_with("WRONGTYPE"));
}

/// The state CL.THROTTLE keeps, read by THROTTLE.TOKEN and THROTTLE.INFO,
/// and the other way round.
#[test]
fn throttle_token_and_info_read_the_same_bucket() {
    let server = Server::start();
    let mut c = server.conn();
    // 1 per minute, 16 units; 5 taken: 5 minutes of debt.
    assert_eq!(cl(&mut c, "k 15 1 60 5"), [0, 16, 11, -1, 300]);
    let info: Vec<redis::Value> = call(&mut c, "THROTTLE.INFO k").expect("INFO");
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    assert_eq!(info.get(1).and_then(text).as_deref(), Some("token"), "{info:?}");
    let fields: BTreeMap<String, i64> = info
        .chunks(2)
        .skip(1)
        .filter_map(|pair| match pair {
            [name, redis::Value::Int(v)] => Some((text(name)?, *v)),
            _ => None,
        })
        .collect();
    let names: Vec<&str> = fields.keys().map(String::as_str).collect();
    assert_eq!(names, ["count_per_period", "max_burst", "period", "remaining", "reset_after", "tat"]);
    assert_eq!((fields["max_burst"], fields["count_per_period"], fields["period"]), (15, 1, 60));
    assert_eq!(fields["remaining"], 11);
    assert!((299_000..=300_000).contains(&fields["reset_after"]), "{fields:?}");
    let now_us = common::now_us() as i64;
    assert!((fields["tat"] - now_us - 300_000_000).abs() < 1_000_000, "{fields:?}");
    // THROTTLE.TOKEN with the same parameters sees 11 units and takes one.
    let reply = common::throttle(&mut c, "THROTTLE.TOKEN k 1 60s BURST 16 COST 0");
    assert_eq!((reply.0, reply.1, reply.2), (1, 16, 11));
    assert!((299_000..=300_000).contains(&reply.4), "{reply:?}");
    let reply = common::throttle(&mut c, "THROTTLE.TOKEN k 1 60s BURST 16");
    assert_eq!((reply.0, reply.2), (1, 10));
    let kind: String = call(&mut c, "TYPE k").expect("TYPE");
    assert_eq!(kind, "thr-token");
    // CL.THROTTLE then sees the bucket THROTTLE.TOKEN left: 6 minutes.
    assert_eq!(cl(&mut c, "k 15 1 60 0"), [0, 16, 10, -1, 360]);
    assert_eq!(cl(&mut c, "k 15 1 60 11"), [1, 16, 10, 60, 360]);
    // A refund gives the time back.
    assert_eq!(cl(&mut c, "k 15 1 60 -5"), [0, 16, 15, -1, 60]);
    let pttl: i64 = call(&mut c, "PTTL k").expect("PTTL");
    assert!((59_000..=60_000).contains(&pttl), "PTTL {pttl}");
    // THROTTLE.TOKEN's refund of everything empties the key.
    let reply = common::throttle(&mut c, "THROTTLE.TOKEN k 1 60s BURST 16 COST -16");
    assert_eq!(reply, (1, 16, 16, 0, 0));
    let exists: i64 = call(&mut c, "EXISTS k").expect("EXISTS");
    assert_eq!(exists, 0);
}

/// Every key's digest and expiry instant.
fn values(c: &mut redis::Connection) -> BTreeMap<String, (String, i64)> {
    let names: Vec<String> = call(c, "KEYS *").expect("KEYS");
    names
        .into_iter()
        .map(|name| {
            let at: i64 = call(c, &format!("PEXPIRETIME {name}")).expect("PEXPIRETIME");
            (name.clone(), (digest(c, &name), at))
        })
        .collect()
}

/// Calls on every kind of argument redis-cell accepts, on shared keys, with
/// THROTTLE.TOKEN calls in between and refunds.
/// Only keys that live for minutes at least, so that none expires during
/// the test.
fn workload(c: &mut redis::Connection) {
    for &(line, _) in REDIS_CELL_REPLIES {
        if ["monthly", "decade", "both-negative", "saturated", "negative"].iter().any(|k| line.starts_with(k)) {
            let _ = cl(c, line);
        }
    }
    let mut rng = common::Rng(11);
    let configs = ["1000 1 2592000", "0 1 315360001", "15 1 60", "-5 1 -60", "4 1 60", "99 7 3600", "0 1 100000000000"];
    for i in 0..400 {
        let key = format!("w{}", rng.below(12));
        let config = configs[rng.below(configs.len() as u64) as usize];
        let quantity = rng.below(8) as i64 - 3;
        let line = format!("{key} {config} {quantity}");
        // Errors too (a refund past the idle state).
        let _: redis::RedisResult<redis::Value> = call(c, &format!("CL.THROTTLE {line}"));
        if i % 9 == 0 {
            let _: Vec<i64> = call(c, &format!("THROTTLE.TOKEN {key} 1 60s BURST 5")).expect("THROTTLE.TOKEN");
        }
    }
}

#[test]
fn replica_and_aof_hold_the_masters_values() {
    let (mut master, replica) =
        common::master_and_replica_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut m = master.conn();
    let mut r = replica.conn();
    common::wait_aof_rewrite_done(&mut m);
    workload(&mut m);
    common::sync(&mut m);
    let on_master = values(&mut m);
    assert!(on_master.len() >= 12, "{on_master:?}");
    let cell_keys = on_master.keys().filter(|k| k.starts_with('w')).count();
    assert!(cell_keys >= 6, "{on_master:?}");
    assert_eq!(values(&mut r), on_master, "the replica");
    drop(m);
    // The AOF as written (each change as THROTTLE._SET or DEL).
    master.restart("NOSAVE");
    let mut m = master.conn();
    assert_eq!(values(&mut m), on_master, "restarted from the AOF");
    // Rewritten (each key as THROTTLE._LOAD, version 4 words).
    let _: String = call(&mut m, "BGREWRITEAOF").expect("BGREWRITEAOF");
    common::wait_aof_rewrite_done(&mut m);
    drop(m);
    master.restart("NOSAVE");
    let mut m = master.conn();
    assert_eq!(values(&mut m), on_master, "restarted from the rewritten AOF");
    // RDB: DEBUG RELOAD, and DUMP/RESTORE of each key.
    let ok: String = call(&mut m, "DEBUG RELOAD").expect("DEBUG RELOAD");
    assert_eq!(ok, "OK");
    assert_eq!(values(&mut m), on_master, "DEBUG RELOAD");
    for (key, (value, at_ms)) in &on_master {
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut m).expect("DUMP");
        let copy = format!("copy:{key}");
        // The digest counts the expiry in: the same absolute one.
        let restore = redis::cmd("RESTORE").arg(&copy).arg((*at_ms).max(0)).arg(&payload).arg("ABSTTL").query(&mut m);
        let ok: String = restore.expect("RESTORE");
        assert_eq!(ok, "OK");
        assert_eq!(&digest(&mut m, &copy), value, "RESTORE {key}");
    }
}

/// A refund through CL.THROTTLE serves a THROTTLE.TOKEN call waiting on
/// the key at once.
#[test]
fn a_refund_serves_a_waiting_throttle_token_call() {
    let server = Server::start();
    let mut c = server.conn();
    // 1 per hour, 2 units, both taken.
    assert_eq!(cl(&mut c, "k 1 1 3600 2"), [0, 2, 0, -1, 7200]);
    let waiter = common::Waiter::queued(&server.url(), &mut c, "THROTTLE.TOKEN k 1 1h BURST 2 BLOCK 60000", 1);
    assert_eq!(cl(&mut c, "k 1 1 3600 -1"), [0, 2, 1, -1, 3600]);
    let (reply, _) = waiter.reply();
    assert_eq!((reply.0, reply.1, reply.2), (1, 2, 0), "{reply:?}");
    assert_eq!(common::waiting(&mut c), 0);
    // The waiter took the unit: CL.THROTTLE sees two hours of debt again.
    assert_eq!(cl(&mut c, "k 1 1 3600 0"), [0, 2, 0, -1, 7200]);
}
