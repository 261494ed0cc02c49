//! Penalties ("Penalties" in COMMANDS.md): bans and their variants, refused
//! units that count, forced units, bans set directly, DETAIL's fields, on
//! every algorithm and in THROTTLE.ALL, against a live server: the replies,
//! what INFO shows, what reaches replicas and the AOF, WATCH and keyspace
//! events, BLOCK on a banned key, and bad input.
//!
//! Time is driven with `AT` except where a waiter needs the server's clock.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{call, digest, error, same_values_on_replica, sync, throttle, wait_until, Server, Waiter};
use redis::Value;

const S: u64 = 1_000_000;
const MS: u64 = 1_000;
/// Far in the future of the server's clock, so keys set at these times
/// (which expire on that clock) outlive the test.
const T: u64 = 4_000_000_000 * S;

fn ints(c: &mut redis::Connection, line: &str) -> Vec<i64> {
    call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn map(c: &mut redis::Connection, line: &str) -> BTreeMap<String, Value> {
    let v: Value = call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    let pairs: Vec<(Value, Value)> = match v {
        Value::Map(pairs) => pairs,
        Value::Array(items) => items.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect(),
        other => panic!("{line}: {other:?}"),
    };
    pairs
        .into_iter()
        .map(|(k, v)| match k {
            Value::SimpleString(s) => (s, v),
            Value::BulkString(b) => (String::from_utf8(b).unwrap(), v),
            other => panic!("{line}: key {other:?}"),
        })
        .collect()
}

fn int(fields: &BTreeMap<String, Value>, name: &str) -> i64 {
    match fields.get(name) {
        Some(Value::Int(i)) => *i,
        other => panic!("{name}: {other:?} in {fields:?}"),
    }
}

/// The commands of the four algorithms, SLIDING in both modes.
const COMMANDS: [(&str, &str); 5] = [
    ("THROTTLE.FIXED", ""),
    ("THROTTLE.SLIDING", ""),
    ("THROTTLE.SLIDING", " EXACT"),
    ("THROTTLE.TOKEN", ""),
    ("THROTTLE.LEAKY", ""),
];

/// On every algorithm: the refusal that starts a ban answers with the
/// ban's length, every call during it is refused with what is left of it
/// (peeks too, and the key's PTTL is the ban's end), and when it ends the
/// key is idle. The five-field reply is unchanged.
#[test]
fn a_ban_refuses_every_call_until_it_ends_on_every_algorithm() {
    let server = Server::start();
    let mut c = server.conn();
    for (i, (command, mode)) in COMMANDS.iter().enumerate() {
        let key = format!("ban:{i}");
        let line = |cost: i64, at: u64| format!("{command} {key} 2 1h COST {cost} AT {at} BAN 10m{mode}");
        assert_eq!(throttle(&mut c, &line(2, T)).0, 1, "{command}{mode}");
        assert_eq!(throttle(&mut c, &line(1, T + S)), (0, 2, 0, 600_000, 600_000), "{command}{mode}");
        assert_eq!(throttle(&mut c, &line(1, T + 61 * S)), (0, 2, 0, 540_000, 540_000), "{command}{mode}");
        assert_eq!(throttle(&mut c, &line(0, T + 61 * S)), (0, 2, 0, 540_000, 540_000), "{command}{mode}: a peek");
        let plain = format!("{command} {key} 2 1h AT {}{mode}", T + 61 * S);
        assert_eq!(throttle(&mut c, &plain).0, 0, "{command}{mode}: a call without BAN is refused too");
        let info = map(&mut c, &format!("THROTTLE.INFO {key} AT {}", T + 61 * S));
        assert_eq!((int(&info, "banned"), int(&info, "ban_length"), int(&info, "hits")), (540_000, 600_000, 2));
        // Over: idle again, whatever the window or bucket held.
        assert_eq!(throttle(&mut c, &line(0, T + 601 * S)), (1, 2, 2, 0, 0), "{command}{mode}: idle after the ban");
        assert_eq!(throttle(&mut c, &line(2, T + 601 * S)).0, 1, "{command}{mode}");
    }
}

/// RENEW restarts the ban with each refusal; BACKOFF doubles it up to its
/// cap; a plain ban stays as it is.
#[test]
fn renewing_and_escalating_bans() {
    let server = Server::start();
    let mut c = server.conn();
    let at = |s: u64| T + s * S;
    let renew = |at: u64| format!("THROTTLE.FIXED r 1 1m AT {at} BAN 30s RENEW");
    throttle(&mut c, &renew(at(0)));
    assert_eq!(throttle(&mut c, &renew(at(1))).3, 30_000);
    assert_eq!(throttle(&mut c, &renew(at(20))).3, 30_000);
    assert_eq!(throttle(&mut c, &renew(at(45))).3, 30_000);
    assert_eq!(throttle(&mut c, &renew(at(76))).0, 1);
    let backoff = |at: u64| format!("THROTTLE.TOKEN b 1 1m AT {at} BAN 10s BACKOFF 35s");
    throttle(&mut c, &backoff(at(0)));
    let waits: Vec<i64> = [1, 2, 3, 4, 5].iter().map(|&s| throttle(&mut c, &backoff(at(s))).3).collect();
    assert_eq!(waits, [10_000, 20_000, 35_000, 35_000, 35_000]);
    let plain = |at: u64| format!("THROTTLE.LEAKY p 1 1m AT {at} BAN 10s");
    throttle(&mut c, &plain(at(0)));
    let waits: Vec<i64> = [1, 2, 3].iter().map(|&s| throttle(&mut c, &plain(at(s))).3).collect();
    assert_eq!(waits, [10_000, 9_000, 8_000]);
}

/// DETAIL adds hits, banned and next_free, as an array in RESP2 and as map
/// fields in RESP3; without it the reply is the five fields.
#[test]
fn detail_adds_three_fields_in_both_protocols() {
    let server = Server::start();
    let mut c = server.conn();
    let line = |at: u64| format!("THROTTLE.FIXED d 3 1m COST 2 AT {at} TALLY 100 DETAIL");
    assert_eq!(ints(&mut c, &line(T)), [1, 3, 1, 0, 60_000, 2, 0, 60_000]);
    // Refused, and counted: 4 of 3.
    assert_eq!(ints(&mut c, &line(T + S)), [0, 3, 0, 59_000, 59_000, 4, 0, 59_000]);
    assert_eq!(ints(&mut c, &format!("THROTTLE.FIXED d 3 1m AT {}", T + S)).len(), 5);
    let mut c3 = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap().get_connection().unwrap();
    let fields = map(&mut c3, &format!("THROTTLE.FIXED d 3 1m COST 0 AT {} DETAIL", T + 2 * S));
    let names: Vec<&str> = fields.keys().map(String::as_str).collect();
    assert_eq!(names, ["allowed", "banned", "hits", "limit", "next_free", "remaining", "reset_after", "retry_after"]);
    assert_eq!((int(&fields, "hits"), int(&fields, "banned"), int(&fields, "next_free")), (4, 0, 58_000));
    // SLIDING EXACT: next_free is when the oldest entry leaves the window.
    for at in [T, T + 10 * S, T + 20 * S] {
        ints(&mut c, &format!("THROTTLE.SLIDING e 5 1m AT {at} EXACT"));
    }
    let v = ints(&mut c, &format!("THROTTLE.SLIDING e 5 1m COST 0 AT {} EXACT DETAIL", T + 30 * S));
    assert_eq!((v[2], v[5], v[7]), (2, 3, 30_000));
}

/// FORCE takes units past the limit (and, with BAN, into the ban); NOW bans
/// at once; a refund under a ban takes units off its count, not the ban.
#[test]
fn forced_units_bans_set_directly_and_refunds() {
    let server = Server::start();
    let mut c = server.conn();
    let v = ints(&mut c, &format!("THROTTLE.FIXED f 5 1m COST 8 AT {T} FORCE DETAIL"));
    assert_eq!((v[0], v[2], v[5]), (0, 0, 8));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED f 5 1m AT {}", T + S)).0, 0);
    let v = ints(&mut c, &format!("THROTTLE.FIXED f 5 1m COST -4 AT {} DETAIL", T + S));
    assert_eq!((v[0], v[2], v[5]), (1, 1, 4));
    let v = ints(&mut c, &format!("THROTTLE.TOKEN n 5 1m COST 0 AT {T} BAN 15m NOW DETAIL"));
    assert_eq!((v[0], v[3], v[5], v[6]), (0, 900_000, 0, 900_000));
    let v = ints(&mut c, &format!("THROTTLE.TOKEN n 5 1m COST 3 AT {} FORCE DETAIL", T + S));
    assert_eq!((v[0], v[5]), (0, 3));
    let v = ints(&mut c, &format!("THROTTLE.TOKEN n 5 1m COST -2 AT {} DETAIL", T + S));
    assert_eq!((v[0], v[3], v[5], v[6]), (1, 0, 1, 899_000));
    // A manual ban on a missing key creates it banned.
    assert_eq!(throttle(&mut c, &format!("THROTTLE.SLIDING m 5 1m COST 0 AT {T} BAN 1m NOW")).3, 60_000);
    let kind: String = call(&mut c, "TYPE m").unwrap();
    assert_eq!(kind, "thr-slide");
}

/// THROTTLE.ALL: a limit that refuses applies its own penalties, the others
/// change nothing; a banned limit refuses the whole call; DETAIL comes
/// before the specs.
#[test]
fn throttle_all_applies_the_penalties_of_the_limits_that_refuse() {
    let server = Server::start();
    let mut c = server.conn();
    let all = |c: &mut redis::Connection, at: u64| -> Vec<Vec<i64>> {
        let line = format!("THROTTLE.ALL AT {at} DETAIL FIXED {{u}}:s 2 1s BAN 1m FIXED {{u}}:h 100 1h TALLY 500");
        let v: Vec<Value> = call(c, &line).unwrap_or_else(|e| panic!("{line}: {e}"));
        v.into_iter()
            .skip(1)
            .map(|r| match r {
                Value::Array(items) => items.into_iter().map(|i| if let Value::Int(n) = i { n } else { -99 }).collect(),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    all(&mut c, T);
    all(&mut c, T);
    let refused = all(&mut c, T);
    assert_eq!((refused[0][0], refused[0][3], refused[0][6]), (0, 60_000, 60_000), "the per-second limit bans");
    assert_eq!((refused[1][0], refused[1][5]), (1, 2), "the hourly limit changed nothing");
    let later = all(&mut c, T + 2 * S);
    assert_eq!((later[0][0], later[0][3]), (0, 58_000), "banned although its window moved on");
    let e = error(&mut c, "THROTTLE.ALL FIXED a 1 1s FORCE");
    assert!(e.contains("FORCE"), "{e}");
    let e = error(&mut c, "THROTTLE.ALL FIXED a 1 1s BAN 1s NOW");
    assert!(e.contains("NOW"), "{e}");
}

/// Replicas and the AOF receive each penalty's effect: after a workload of
/// bans (all three variants), counted refusals, forced units, manual bans
/// and refunds on every algorithm and through THROTTLE.ALL, the replica and
/// a server reloaded from the AOF hold exactly the master's values.
#[test]
fn penalties_reach_the_replica_and_the_aof_exactly() {
    let (master, replica) = common::master_and_replica_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut m = master.conn();
    let mut r = replica.conn();
    let options =
        ["BAN 1m", "BAN 1m RENEW", "BAN 10s BACKOFF 5m", "TALLY 50", "FORCE", "BAN 2m NOW", "", "TALLY 9 BAN 30s"];
    let mut step = 0u64;
    for round in 0..6u64 {
        for (i, (command, mode)) in COMMANDS.iter().enumerate() {
            for (j, option) in options.iter().enumerate() {
                step += 1;
                let cost = [1, 2, 3, -1, 0][(step % 5) as usize];
                let at = T + round * 7 * S + step * 100 * MS;
                let line = format!("{command} pen:{i}:{j} 3 1m COST {cost} AT {at}{mode} {option}");
                let _: Value = call(&mut m, line.trim_end()).unwrap_or_else(|e| panic!("{line}: {e}"));
            }
        }
        let line =
            format!("THROTTLE.ALL AT {} SLIDING {{a}}:x 2 1m EXACT BAN 1m FIXED {{a}}:y 3 1m TALLY 10", T + round * S);
        let _: Value = call(&mut m, &line).unwrap();
    }
    sync(&mut m);
    let ttls = same_values_on_replica(&mut m, &mut r);
    assert!(ttls.len() >= 20, "{} keys", ttls.len());
    let keys: Vec<String> = ttls.iter().map(|(name, _)| name.clone()).collect();
    let before: Vec<String> = keys.iter().map(|k| digest(&mut m, k)).collect();
    let _: String = call(&mut m, "DEBUG LOADAOF").expect("DEBUG LOADAOF");
    let after: Vec<String> = keys.iter().map(|k| digest(&mut m, k)).collect();
    assert_eq!(before, after, "values after reloading the AOF");
    let with_bans =
        keys.iter().filter(|k| map(&mut m, &format!("THROTTLE.INFO {k} AT {T}")).contains_key("banned")).count();
    assert!(with_bans > 5, "{with_bans} keys hold a ban");
}

/// A refused call that counts or bans changes the key (WATCH fails, a
/// keyspace event goes out); one without penalties changes nothing.
#[test]
fn a_penalty_is_a_change_for_watch_and_keyspace_events() {
    let server = Server::start_with(&["--notify-keyspace-events", "KEA"]);
    let mut c = server.conn();
    throttle(&mut c, &format!("THROTTLE.FIXED w 1 1h AT {T}"));
    let watched = |c: &mut redis::Connection, line: &str| -> bool {
        let _: () = call(c, "WATCH w").unwrap();
        let _: Value = call(c, line).unwrap();
        let _: () = call(c, "MULTI").unwrap();
        let _: () = call(c, "PING").unwrap();
        let exec: Value = call(c, "EXEC").unwrap();
        exec != Value::Nil
    };
    assert!(watched(&mut c, &format!("THROTTLE.FIXED w 1 1h AT {T}")), "a plain refusal touches nothing");
    let mut pubsub = redis::Client::open(server.url()).unwrap().get_connection().unwrap();
    let _: () = call(&mut pubsub, "PSUBSCRIBE __keyevent@0__:*").unwrap();
    assert!(!watched(&mut c, &format!("THROTTLE.FIXED w 1 1h AT {T} TALLY 10")), "a counted refusal is a change");
    assert!(!watched(&mut c, &format!("THROTTLE.FIXED w 1 1h AT {T} BAN 1m")), "a ban is a change");
    pubsub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut events = Vec::new();
    while events.len() < 2 {
        let msg = pubsub.recv_response().unwrap();
        if let Value::Array(parts) = msg {
            if let Some(Value::BulkString(channel)) = parts.get(2) {
                events.push(String::from_utf8_lossy(channel).into_owned());
            }
        }
    }
    assert_eq!(events, ["__keyevent@0__:throttle.fixed", "__keyevent@0__:throttle.fixed"]);
}

/// A BLOCK waiter on a banned key waits for the ban's end, then is admitted
/// (the key is fresh); one whose time-out comes first gets the ban's
/// refusal.
#[test]
fn a_waiter_on_a_banned_key_waits_for_the_ban_to_end() {
    let server = Server::start();
    let mut c = server.conn();
    throttle(&mut c, "THROTTLE.FIXED wb 1 1h");
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED wb 1 1h BAN 400ms").0, 0);
    let early = Waiter::queued(&server.url(), &mut c, "THROTTLE.FIXED wb 1 1h BLOCK 50", 1);
    let (reply, _) = early.reply();
    assert_eq!((reply.0, reply.2), (0, 0), "timed out inside the ban: {reply:?}");
    assert!(reply.3 > 0 && reply.3 <= 400, "retry_after is what is left of the ban: {reply:?}");
    let waiter = Waiter::queued(&server.url(), &mut c, "THROTTLE.FIXED wb 1 1h BLOCK 0", 1);
    let (reply, _) = waiter.reply();
    assert_eq!((reply.0, reply.2), (1, 0), "admitted once the ban is over: {reply:?}");
    let info = map(&mut c, "THROTTLE.INFO wb");
    assert!(!info.contains_key("banned"), "{info:?}");
    wait_until("the waiter to be gone", Duration::from_secs(5), || common::waiting(&mut c) == 0);
}

/// Bad penalty options get an ERR that names them, and change nothing.
#[test]
fn bad_penalty_options_are_errors_naming_them() {
    let server = Server::start();
    let mut c = server.conn();
    let cases = [
        ("BAN 0", "invalid BAN"),
        ("BAN 3651d", "invalid BAN"),
        ("BAN 1.5s", "invalid BAN"),
        ("BAN", "option BAN needs a value"),
        ("BAN 1s BAN 2s", "option BAN given more than once"),
        ("RENEW", "option RENEW needs BAN"),
        ("NOW", "option NOW needs BAN"),
        ("BACKOFF 1m", "option BACKOFF needs BAN"),
        ("BAN 1m BACKOFF 30s", "invalid BACKOFF"),
        ("BAN 1m BACKOFF 3651d", "invalid BACKOFF"),
        ("BAN 1m RENEW BACKOFF 2m", "RENEW and BACKOFF exclude each other"),
        ("BAN 1m RENEW RENEW", "option RENEW given more than once"),
        ("TALLY 0", "invalid TALLY"),
        ("TALLY 1000000000000001", "invalid TALLY"),
        ("TALLY -1", "invalid TALLY"),
        ("FORCE FORCE", "option FORCE given more than once"),
        ("DETAIL DETAIL", "option DETAIL given more than once"),
    ];
    for (option, want) in cases {
        for (command, mode) in COMMANDS {
            let line = format!("{command} bad 5 1m{mode} {option}");
            let e = error(&mut c, &line);
            assert!(e.starts_with("ERR ") && e.contains(want), "{line}: {e}");
        }
    }
    let size: i64 = call(&mut c, "DBSIZE").unwrap();
    assert_eq!(size, 0);
}

/// A key under a ban stores and loads back whole (RDB, DUMP/RESTORE).
#[test]
fn a_banned_key_survives_reload_and_restore() {
    let server = Server::start();
    let mut c = server.conn();
    for (i, (command, mode)) in COMMANDS.iter().enumerate() {
        throttle(&mut c, &format!("{command} s:{i} 1 1h AT {T}{mode} BAN 1h"));
        throttle(&mut c, &format!("{command} s:{i} 1 1h AT {T}{mode} BAN 1h"));
    }
    let keys: Vec<String> = (0..COMMANDS.len()).map(|i| format!("s:{i}")).collect();
    let before: Vec<String> = keys.iter().map(|k| digest(&mut c, k)).collect();
    let _: String = call(&mut c, "DEBUG RELOAD").unwrap();
    let after: Vec<String> = keys.iter().map(|k| digest(&mut c, k)).collect();
    assert_eq!(before, after);
    for key in &keys {
        let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut c).unwrap();
        // With a TTL, as the original has one (a digest counts whether a key expires).
        let _: () = redis::cmd("RESTORE").arg(format!("{key}:copy")).arg(3_600_000).arg(dump).query(&mut c).unwrap();
        assert_eq!(digest(&mut c, &format!("{key}:copy")), digest(&mut c, key));
    }
}

/// COMMAND DOCS names every penalty option of each command.
#[test]
fn command_docs_name_the_penalty_options() {
    let server = Server::start();
    let mut c = server.conn();
    for command in ["THROTTLE.FIXED", "THROTTLE.SLIDING", "THROTTLE.TOKEN", "THROTTLE.LEAKY"] {
        let docs: Value = call(&mut c, &format!("COMMAND DOCS {command}")).unwrap();
        let text = format!("{docs:?}");
        for token in ["BAN", "RENEW", "BACKOFF", "TALLY", "FORCE", "NOW", "DETAIL", "BLOCK"] {
            assert!(text.contains(&format!("\"{token}\"")), "{command}: no {token} in {text}");
        }
    }
}
