//! A call that gets an error changes nothing on any key, and whatever a
//! call changes reaches replicas and the AOF. The multi-key paths are
//! THROTTLE.ALL's charges, peeks and refunds: each must check every key
//! before it changes any. Checked on a master with a replica and an AOF:
//! after every call the master's values are what they must be, the
//! replica holds the same, and so does the server reloaded from its AOF.

mod common;

use common::{call, digest, error, master_and_replica_with, open, same_values_on_replica, sync};

/// The limiters the calls go through, set up with 5 units used each.
const LIMITS: &[(&str, &str)] = &[
    ("FIXED", "a:fixed 10 1h"),
    ("SLIDING", "a:exact 10 1h EXACT"),
    ("SLIDING", "a:sliding 10 1h"),
    ("TOKEN", "a:token 10 1h"),
    ("LEAKY", "a:leaky 10 1h"),
];

/// Specs whose key holds something else: a string, another algorithm's
/// state, the other SLIDING mode.
const WRONG: &[&str] = &["FIXED a:string 10 1h", "TOKEN b:fixed 10 1h", "SLIDING b:exact 10 1h"];

fn digests(c: &mut redis::Connection) -> Vec<(String, String)> {
    let mut keys: Vec<String> = call(c, "KEYS *").expect("KEYS");
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let d = digest(c, &k);
            (k, d)
        })
        .collect()
}

/// `PEXPIRETIME` of every limiter key, by name.
fn expiries(c: &mut redis::Connection) -> Vec<(String, i64)> {
    let mut keys: Vec<String> = call(c, "KEYS a:*").expect("KEYS");
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let at = call(c, &format!("PEXPIRETIME {k}")).expect("PEXPIRETIME");
            (k, at)
        })
        .collect()
}

#[test]
fn a_throttle_all_that_fails_changes_no_key_and_what_succeeds_reaches_replica_and_aof() {
    let (master, replica) =
        master_and_replica_with(&["--appendonly", "yes", "--appendfsync", "always", "--aof-use-rdb-preamble", "no"]);
    let mut m = open(&master.url());
    let mut r = open(&replica.url());
    for (algorithm, spec) in LIMITS {
        let line = format!("THROTTLE.{algorithm} {spec} COST 5");
        let got: Vec<i64> = call(&mut m, &line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(got[0], 1, "{line}");
    }
    let _: () = call(&mut m, "SET a:string text").expect("SET");
    let _: Vec<i64> = call(&mut m, "THROTTLE.FIXED b:fixed 10 1h").expect("FIXED");
    let _: Vec<i64> = call(&mut m, "THROTTLE.SLIDING b:exact 10 1h EXACT").expect("EXACT");
    let specs: Vec<String> = LIMITS.iter().map(|(algorithm, spec)| format!("{algorithm} {spec}")).collect();

    // Refunds, peeks, charges that would be admitted and one that would
    // not: a key of the wrong type anywhere fails the call before it
    // changes anything.
    for cost in ["-3", "-100", "0", "1", "4", "6"] {
        for wrong in WRONG {
            for at in [0, specs.len() / 2, specs.len()] {
                let mut line: Vec<&str> = specs.iter().map(String::as_str).collect();
                line.insert(at, wrong);
                let line = format!("THROTTLE.ALL COST {cost} {}", line.join(" "));
                let before = digests(&mut m);
                let e = error(&mut m, &line);
                assert!(e.starts_with("WRONGTYPE"), "{line}: {e}");
                assert_eq!(digests(&mut m), before, "{line} failed but changed a key");
            }
        }
    }
    sync(&mut m);
    same_values_on_replica(&mut m, &mut r);

    // What succeeds changes every key, and replicas and the AOF get it all.
    let all = format!("THROTTLE.ALL COST -2 {}", specs.join(" "));
    let before = digests(&mut m);
    let got: redis::Value = call(&mut m, &all).expect("refund");
    assert!(matches!(&got, redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(1))), "{all}: {got:?}");
    let after = digests(&mut m);
    for ((key, was), (_, now)) in before.iter().zip(&after) {
        if key.starts_with("a:") && key != "a:string" {
            assert_ne!(was, now, "{all} left {key} as it was");
        }
    }
    let _: redis::Value = call(&mut m, &format!("THROTTLE.ALL COST 3 {}", specs.join(" "))).expect("charge");
    sync(&mut m);
    same_values_on_replica(&mut m, &mut r);
    let (on_master, on_replica) = (expiries(&mut m), expiries(&mut r));
    assert_eq!(on_master, on_replica, "the replica's keys expire at the master's instants");

    let before = digests(&mut m);
    let _: String = call(&mut m, "DEBUG LOADAOF").expect("DEBUG LOADAOF");
    assert_eq!(digests(&mut m), before, "the AOF brings back the values the calls left");
    assert_eq!(expiries(&mut m), on_master, "the AOF brings back the expiry instants");
}
