//! No stored value crashes the server: RESTORE of truncated, bit-flipped
//! and rewritten payloads (with a valid checksum, so the module's decoder is
//! what sees them) and hand-made `THROTTLE._LOAD` calls either fail with an
//! error or leave a state the commands run on.

mod common;

use common::dump::{crc64, Dump, ModuleValue};
use common::{call, error, throttle, Rng, Server};

const T0: u64 = 1_700_000_000_000_000;
const PEEK_AT: u64 = T0 + 10_000_000;

/// A key of one type: type, name, command without COST and AT, options
/// after them, calls as (cost, µs after T0).
type KeySpec = (&'static str, &'static str, &'static str, &'static str, &'static [(u64, u64)]);

const KEYS: &[KeySpec] = &[
    ("thr-fixed", "fx", "THROTTLE.FIXED fx 10 1m", "", &[(3, 0), (2, 1_000)]),
    ("thr-slide", "sl", "THROTTLE.SLIDING sl 10 1m", "", &[(3, 0), (2, 61_000_000)]),
    ("thr-exact", "ex", "THROTTLE.SLIDING ex 10 1m", " EXACT", &[(1, 0), (3, 1_000), (2, 2_000)]),
    ("thr-token", "tk", "THROTTLE.TOKEN tk 10 1m", " BURST 20", &[(7, 0), (5, 1_000)]),
    ("thr-leaky", "lk", "THROTTLE.LEAKY lk 10 1m", " BURST 20", &[(7, 0), (5, 1_000)]),
];

/// The command for a type, to run on a restored key.
fn command_for(kind: &str) -> Option<(&'static str, &'static str)> {
    KEYS.iter().find(|k| k.0 == kind).map(|k| (k.2.split(' ').next().unwrap_or_default(), k.3))
}

/// Runs the commands on whatever RESTORE left in `key`: none may fail other
/// than with an error reply, and on our types they must answer.
fn exercise(c: &mut redis::Connection, key: &str, what: &str) {
    let kind: String = call(c, &format!("TYPE {key}")).unwrap_or_else(|e| panic!("{what}: TYPE: {e}"));
    let Some((command, tail)) = command_for(&kind) else {
        return; // Redis's own type, decoded by Redis.
    };
    for line in [
        format!("{command} {key} 10 1m COST 0 AT {PEEK_AT}{tail}"),
        format!("{command} {key} 10 1m COST 0{tail}"),
        format!("{command} {key} 1000000 1d COST 0 AT {PEEK_AT}{tail}"),
    ] {
        let reply: Vec<i64> = call(c, &line).unwrap_or_else(|e| panic!("{what}: {line}: {e}"));
        assert_eq!(reply.len(), 5, "{what}: {line}");
    }
    for line in [
        format!("{command} {key} 10 1m COST 1 AT {PEEK_AT}{tail}"),
        format!("{command} {key} 3 1s COST 2 AT {}{tail}", PEEK_AT + 1),
        format!("{command} {key} 10 1m COST -1 AT {}{tail}", PEEK_AT + 2),
    ] {
        // A refund may be refused by a build without refunds; no crash is
        // what counts.
        let _: redis::RedisResult<redis::Value> = call(c, &line);
    }
    if kind == "thr-token" {
        for quantity in [0, 1, -1, 100] {
            let line = format!("CL.THROTTLE {key} 15 30 60 {quantity}");
            match call::<redis::Value>(c, &line) {
                Ok(redis::Value::Array(v)) => assert_eq!(v.len(), 5, "{what}: {line}"),
                Ok(other) => panic!("{what}: {line}: {other:?}"),
                Err(e) => assert!(e.code().is_some(), "{what}: {line}: {e}"),
            }
        }
    }
    let _: redis::RedisResult<redis::Value> = call(c, &format!("THROTTLE.INFO {key}"));
    if let Ok(1) = call::<i64>(c, &format!("EXISTS {key}")) {
        let _: Vec<String> =
            call(c, &format!("DEBUG DIGEST-VALUE {key}")).unwrap_or_else(|e| panic!("{what}: digest: {e}"));
        let _: i64 = call(c, &format!("MEMORY USAGE {key}")).unwrap_or_else(|e| panic!("{what}: MEMORY USAGE: {e}"));
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(c).unwrap_or_else(|e| panic!("{what}: DUMP: {e}"));
        Dump::parse(&payload);
    }
}

/// RESTOREs a payload into a fresh key; returns whether it was accepted.
fn restore(server: &mut Server, c: &mut redis::Connection, payload: &[u8], what: &str) -> bool {
    let result: redis::RedisResult<String> =
        redis::cmd("RESTORE").arg("victim").arg(0).arg(payload).arg("REPLACE").query(c);
    assert!(server.alive(), "{what}: the server died on RESTORE of {payload:02x?}; log:\n{}", server.log());
    let accepted = match result {
        Ok(ok) => {
            assert_eq!(ok, "OK", "{what}");
            exercise(c, "victim", what);
            true
        }
        Err(e) => {
            assert!(e.code().is_some(), "{what}: an error reply, not {e}");
            false
        }
    };
    let _: redis::RedisResult<i64> = call(c, "DEL victim");
    assert!(server.alive(), "{what}: the server died after RESTORE of {payload:02x?}; log:\n{}", server.log());
    accepted
}

/// Values a field should be tried with.
fn interesting(original: u64) -> Vec<u64> {
    let mut v = vec![
        0,
        1,
        2,
        original.wrapping_sub(1),
        original.wrapping_add(1),
        original.wrapping_mul(2),
        original / 2,
        u64::from(u32::MAX),
        1 << 53,
        1 << 63,
        u64::MAX,
        u64::MAX - 1,
        10_000_000_000_000_000,
        10_000_000_000_000_001,
        1_000_000_000_000_000,
        1_000_000_000_000_001,
        3650 * 86_400 * 1_000_000,
        3650 * 86_400 * 1_000_000 + 1,
        999,
        T0,
        T0 + 60_000_000,
    ];
    v.retain(|&x| x != original);
    v
}

#[test]
fn crc64_matches_redis() {
    // The check value of CRC-64/Jones as Redis's crc64.c tests it.
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}

#[test]
fn corrupt_restore_payloads_never_crash_the_server() {
    // Redis checks its own types deeply, so a flip that turns the value into
    // another Redis type cannot crash Redis either.
    let mut server = Server::start_with(&["--sanitize-dump-payload", "yes"]);
    let mut c = server.conn();
    let pid: i64 = common::info_field(&mut c, "server", "process_id").and_then(|p| p.parse().ok()).expect("pid");
    let mut rng = Rng(42);
    let mut accepted_flips = 0;
    for &(_, _, head, tail, calls) in KEYS {
        for &(cost, dt) in calls {
            throttle(&mut c, &format!("{head} COST {cost} AT {}{tail}", T0 + dt));
        }
    }
    // A TOKEN key in CL.THROTTLE's form (on the server's clock: an hour of
    // debt).
    let _: Vec<i64> = call(&mut c, "CL.THROTTLE cl 99 1 60 60").expect("CL.THROTTLE");
    let keys = KEYS.iter().map(|k| (k.0, k.1)).chain([("thr-token (CL.THROTTLE)", "cl")]);
    for (kind, key) in keys {
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut c).expect("DUMP");
        let dump = Dump::parse(&payload);
        let value = ModuleValue::parse(&dump.body);
        assert!(value.words.len() >= 2, "{kind}: {:?}", value.words);

        // The test's own encoding round-trips.
        assert_eq!(value.encode(&value.words, true), dump.body, "{kind}: re-encoding");
        assert!(restore(&mut server, &mut c, &dump.seal(&dump.body), &format!("{kind}: intact")));
        // The digest covers whether the key has a TTL: restore it with one.
        let ok: String = redis::cmd("RESTORE").arg("copy").arg(3_600_000).arg(&payload).query(&mut c).expect("RESTORE");
        assert_eq!(ok, "OK");
        assert_eq!(common::digest(&mut c, "copy"), common::digest(&mut c, key), "{kind}");
        let _: i64 = call(&mut c, "DEL copy").expect("DEL");

        // Truncated: with a valid checksum the decoder sees the short value
        // (Redis reads on into the payload's footer, so a cut value can even
        // complete into a valid one: then it must work); without one
        // RESTORE refuses the payload.
        for cut in 0..dump.body.len() {
            restore(&mut server, &mut c, &dump.seal(&dump.body[..cut]), &format!("{kind}: body cut to {cut} bytes"));
        }
        for cut in 0..payload.len() {
            let what = format!("{kind}: payload cut to {cut} bytes");
            assert!(!restore(&mut server, &mut c, &payload[..cut], &what), "{what} was accepted");
        }
        // Missing or extra words, and a value that does not end at EOF.
        for n in 0..value.words.len() {
            let what = format!("{kind}: only {n} words");
            assert!(!restore(&mut server, &mut c, &dump.seal(&value.encode(&value.words[..n], true)), &what), "{what}");
        }
        let mut longer = value.words.clone();
        longer.push(1);
        let what = format!("{kind}: one word too many");
        assert!(!restore(&mut server, &mut c, &dump.seal(&value.encode(&longer, true)), &what), "{what}");
        let what = format!("{kind}: no EOF");
        assert!(!restore(&mut server, &mut c, &dump.seal(&value.encode(&value.words, false)), &what), "{what}");

        // Every single-bit flip.
        for bit in 0..dump.body.len() * 8 {
            let mut body = dump.body.clone();
            body[bit / 8] ^= 1 << (bit % 8);
            let what = format!("{kind}: bit {bit} flipped");
            accepted_flips += usize::from(restore(&mut server, &mut c, &dump.seal(&body), &what));
        }
        // Random multi-bit flips and byte overwrites.
        for round in 0..300 {
            let mut body = dump.body.clone();
            for _ in 0..1 + rng.next() % 6 {
                let at = (rng.next() % body.len() as u64) as usize;
                if round % 2 == 0 {
                    body[at] ^= 1 << (rng.next() % 8);
                } else {
                    body[at] = rng.next() as u8;
                }
            }
            restore(&mut server, &mut c, &dump.seal(&body), &format!("{kind}: random damage round {round}"));
        }
        // Every word replaced by values at and past the edges.
        for i in 0..value.words.len() {
            for w in interesting(value.words[i]) {
                let mut words = value.words.clone();
                words[i] = w;
                let what = format!("{kind}: word {i} = {w}");
                restore(&mut server, &mut c, &dump.seal(&value.encode(&words, true)), &what);
            }
        }
        // A future encoding version is refused: the id's low 10 bits, one
        // past today's.
        let mut head = value.head.clone();
        if let Some(last) = head.last_mut() {
            *last = last.wrapping_add(1);
        }
        let future = ModuleValue { head, words: value.words.clone() };
        let what = format!("{kind}: another encoding version");
        assert!(!restore(&mut server, &mut c, &dump.seal(&future.encode(&value.words, true)), &what), "{what}");
    }
    assert!(accepted_flips > 0, "some flips land on fields that stay valid");
    let pong: String = call(&mut c, "PING").expect("PING");
    assert_eq!(pong, "PONG");
    let same_pid: i64 = common::info_field(&mut c, "server", "process_id").and_then(|p| p.parse().ok()).expect("pid");
    assert_eq!(same_pid, pid, "the server never restarted");
    let log = server.log();
    // "=== REDIS BUG REPORT START", "=== VALKEY BUG REPORT START" on Valkey.
    assert!(!log.contains("BUG REPORT START") && !log.contains("panicked"), "log:\n{log}");
    // The original keys were never touched.
    for &(_, key, _, _, _) in KEYS {
        let exists: i64 = call(&mut c, &format!("EXISTS {key}")).expect("EXISTS");
        assert_eq!(exists, 1, "{key}");
    }
}

#[test]
fn hand_made_load_calls_are_validated() {
    let mut server = Server::start();
    let mut c = server.conn();
    let t = T0;
    // A sliding window starts at a multiple of its period.
    let w = T0 - T0 % 60_000_000;
    let ok = |c: &mut redis::Connection, line: &str| {
        let reply: String = call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(reply, "OK", "{line}");
    };
    // Well-formed states load and run.
    ok(&mut c, &format!("THROTTLE._LOAD good:fixed thr-fixed 1 {t} 3 {} 10 60000000", t + 5));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.FIXED good:fixed 10 1m COST 0 AT {}", t + 5)).2, 7);
    ok(&mut c, &format!("THROTTLE._LOAD good:slide thr-slide 1 {w} 4 3 {} 10 60000000", w + 5));
    ok(&mut c, &format!("THROTTLE._LOAD good:exact thr-exact 1 3 {} 10 60000000 2 {t} 1 {} 2", t + 5, t + 5));
    assert_eq!(throttle(&mut c, &format!("THROTTLE.SLIDING good:exact 10 1m COST 0 AT {} EXACT", t + 5)).2, 7);
    ok(&mut c, &format!("THROTTLE._LOAD good:token thr-token 1 0 60000000 {t} 10 60000000 20"));
    ok(&mut c, &format!("THROTTLE._LOAD good:leaky thr-leaky 1 0 0 {t} 10 60000000 20"));
    // CL.THROTTLE's form of a TOKEN value (version 5): no ban, then the
    // marker, tat (ns) high and low, max_burst, count, period; negative
    // arguments as i64 bits.
    let m = u64::MAX;
    let tat = (t + 20_000_000) * 1_000;
    ok(&mut c, &format!("THROTTLE._LOAD good:cell thr-token 5 0 {m} 0 {tat} 15 30 60"));
    ok(&mut c, &format!("THROTTLE._LOAD good:cell2 thr-token 5 0 {m} 0 {tat} {} 1 {}", -5i64 as u64, -60i64 as u64));
    let token = throttle(&mut c, &format!("THROTTLE.TOKEN good:cell 30 60s BURST 16 COST 0 AT {t}"));
    assert_eq!(token, (1, 16, 6, 0, 20_000), "20 s of debt at 2 s a token, 16 tokens");

    let bad = [
        // Unknown type or version.
        format!("THROTTLE._LOAD k thr-nope 1 {t} 3 {t} 10 60000000"),
        format!("THROTTLE._LOAD k THR-FIXED 1 {t} 3 {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 0 {t} 3 {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 6 {t} 3 {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed -1 {t} 3 {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed one {t} 3 {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 4294967297 {t} 3 {t} 10 60000000"),
        // CL.THROTTLE's form: not before version 4, a tat in range, a rate
        // redis-cell runs without wrapping, six words.
        format!("THROTTLE._LOAD k thr-token 3 {} 0 {} 15 30 60", u64::MAX, t * 1_000),
        format!("THROTTLE._LOAD k thr-token 4 0 {} 0 {} 15 30 60", u64::MAX, t * 1_000),
        format!("THROTTLE._LOAD k thr-token 5 0 {} 0 0 15 30 60", u64::MAX),
        format!("THROTTLE._LOAD k thr-token 5 0 {} 2 0 15 30 60", u64::MAX),
        format!("THROTTLE._LOAD k thr-token 5 0 {} 0 {} 15 0 60", u64::MAX, t * 1_000),
        format!("THROTTLE._LOAD k thr-token 5 0 {} 0 {} 15 30 0", u64::MAX, t * 1_000),
        format!("THROTTLE._LOAD k thr-token 5 0 {} 0 {} {} 30 60", u64::MAX, t * 1_000, i64::MAX),
        format!("THROTTLE._LOAD k thr-token 5 0 {} 0 {} 15 30", u64::MAX, t * 1_000),
        format!("THROTTLE._LOAD k thr-token 5 0 {} 0 {} 15 30 60 1", u64::MAX, t * 1_000),
        // Fixed window: count, limit, period, times, window, word count, numbers.
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 1000000000000001 {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 0 {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 0 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 1000000000000000001 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 10 0"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 10 999"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 10 315360000000001"),
        "THROTTLE._LOAD k thr-fixed 1 10000000000000001 3 10000000000000001 10 60000000".to_string(),
        format!("THROTTLE._LOAD k thr-fixed 1 {} 3 {t} 10 60000000", t + 1),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {} 10 60000000", t + 60_000_000),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 10"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 10 60000000 7"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 10 60000000 x"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 10 60000000 -1"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} -3 {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3x {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 18446744073709551616 {t} 10 60000000"),
        format!("THROTTLE._LOAD k thr-fixed 1 {t} 3 {t} 10 60000000 18446744073709551616"),
        // Sliding counter: window alignment, counts, window.
        format!("THROTTLE._LOAD k thr-slide 1 {} 4 3 {} 10 60000000", w + 1, w + 5),
        format!("THROTTLE._LOAD k thr-slide 1 {w} 4 1000000000000001 {} 10 60000000", w + 5),
        format!("THROTTLE._LOAD k thr-slide 1 {w} 1000000000000000001 3 {} 10 60000000", w + 5),
        format!("THROTTLE._LOAD k thr-slide 1 {w} 4 3 {} 10 60000000", w + 60_000_000),
        format!("THROTTLE._LOAD k thr-slide 1 {w} 4 3 {} 10 60000000", w - 1),
        // Sliding log: entry count, order, times, units, total.
        format!("THROTTLE._LOAD k thr-exact 1 3 {} 10 60000000 4 {t} 1 {} 2", t + 5, t + 5),
        format!("THROTTLE._LOAD k thr-exact 1 3 {} 10 60000000 2 {} 1 {t} 2", t + 5, t + 5),
        format!("THROTTLE._LOAD k thr-exact 1 3 {} 10 60000000 2 {t} 1 {t} 2", t + 5),
        format!("THROTTLE._LOAD k thr-exact 1 3 {} 10 60000000 2 {t} 1 {} 2", t + 5, t + 6),
        format!("THROTTLE._LOAD k thr-exact 1 3 {} 10 60000000 2 {t} 0 {} 3", t + 5, t + 5),
        format!("THROTTLE._LOAD k thr-exact 1 4 {} 10 60000000 2 {t} 1 {} 2", t + 5, t + 5),
        format!("THROTTLE._LOAD k thr-exact 1 3 {} 60000000 60000000 2 {t} 1 {} 2", t + 70_000_000, t + 5),
        format!("THROTTLE._LOAD k thr-exact 1 1000000000000001 {} 10 60000000 1 {t} 1000000000000001", t + 5),
        format!("THROTTLE._LOAD k thr-exact 1 10 {} 10 60000000 10 {t} 1", t + 5),
        format!("THROTTLE._LOAD k thr-exact 1 3 {} 10 60000000 18446744073709551615 {t} 3", t + 5),
        // Buckets: level above the burst, burst 0, burst too slow to refill.
        format!("THROTTLE._LOAD k thr-token 1 0 1200000001 {t} 10 60000000 20"),
        format!("THROTTLE._LOAD k thr-token 1 1 0 {t} 10 60000000 20"),
        format!("THROTTLE._LOAD k thr-token 1 0 0 {t} 10 60000000 0"),
        format!("THROTTLE._LOAD k thr-leaky 1 0 0 {t} 1 315360000000000 2"),
        format!("THROTTLE._LOAD k thr-leaky 1 18446744073709551615 18446744073709551615 {t} 10 60000000 20"),
    ];
    for line in &bad {
        let e = error(&mut c, line);
        assert!(e.starts_with("ERR"), "{line}: {e}");
        let exists: i64 = call(&mut c, "EXISTS k").expect("EXISTS");
        assert_eq!(exists, 0, "{line} created the key");
        assert!(server.alive(), "{line}: the server died");
    }
    // Arity.
    assert!(error(&mut c, "THROTTLE._LOAD k thr-fixed").contains("wrong number of arguments"));
    let pong: String = call(&mut c, "PING").expect("PING");
    assert_eq!(pong, "PONG");
}
