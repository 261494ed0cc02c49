//! Out of memory: with `maxmemory` low and `noeviction`, a big string fills
//! the server until Redis refuses writes. Then a THROTTLE call that would
//! create a key gets Redis's OOM error, reads (THROTTLE.INFO) and peeks
//! (`COST 0`, which change nothing) still answer, nothing crashes, and once
//! memory is freed everything works again.

mod common;

use common::{call, throttle, Server};

const OOM: &str = "OOM command not allowed";

/// The error text of `line`, which must fail.
fn err(c: &mut redis::Connection, line: &str) -> String {
    match call::<redis::Value>(c, line) {
        Ok(v) => panic!("{line}: expected an error, got {v:?}"),
        Err(e) => text(&e),
    }
}

/// An error as the server sent it: code, then detail.
fn text(e: &redis::RedisError) -> String {
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")).trim().to_string()
}

/// A server with one key of each type, then filled until OOM.
fn full_server() -> (Server, redis::Connection) {
    let server = Server::start();
    let mut c = server.conn();
    for line in [
        "THROTTLE.FIXED o:fixed 10 1h COST 3",
        "THROTTLE.SLIDING o:sliding 10 1h COST 3",
        "THROTTLE.SLIDING o:exact 10 1h COST 3 EXACT",
        "THROTTLE.TOKEN o:token 10 1h COST 3",
        "THROTTLE.LEAKY o:leaky 10 1h COST 3",
    ] {
        assert_eq!(throttle(&mut c, line).0, 1, "{line}");
    }
    let used: i64 =
        common::info_field(&mut c, "memory", "used_memory").and_then(|v| v.parse().ok()).expect("used_memory");
    let limit = used + 8 * 1024 * 1024;
    let _: () = call(&mut c, &format!("CONFIG SET maxmemory {limit}")).expect("maxmemory");
    let _: () = call(&mut c, "CONFIG SET maxmemory-policy noeviction").expect("policy");
    let chunk = "x".repeat(1024 * 1024);
    let mut filled = false;
    for _ in 0..64 {
        match redis::cmd("APPEND").arg("o:big").arg(&chunk).query::<i64>(&mut c) {
            Ok(_) => continue,
            Err(e) => {
                assert!(text(&e).starts_with(OOM), "APPEND failed otherwise: {e}");
                filled = true;
                break;
            }
        }
    }
    assert!(filled, "64 MB appended without reaching maxmemory {limit}");
    // Redis counts the refused command's own 1 MB argument against the
    // limit, so the data may sit just under it, and buffers come and go:
    // move the limit well under the data, so every write is refused from
    // now on, big or small.
    let used: i64 =
        common::info_field(&mut c, "memory", "used_memory").and_then(|v| v.parse().ok()).expect("used_memory");
    assert!(used > limit - 2 * 1024 * 1024, "only {used} of {limit} bytes used");
    let _: () = call(&mut c, &format!("CONFIG SET maxmemory {}", used - 4 * 1024 * 1024)).expect("maxmemory");
    let e = err(&mut c, "SET o:probe x");
    assert!(e.starts_with(OOM), "a small write must be refused now: {e}");
    (server, c)
}

#[test]
fn calls_that_would_create_keys_get_the_oom_error_and_reads_answer() {
    let (mut server, mut c) = full_server();
    for line in [
        "THROTTLE.FIXED o:new 10 1h",
        "THROTTLE.SLIDING o:new 10 1h",
        "THROTTLE.SLIDING o:new 10 1h EXACT",
        "THROTTLE.TOKEN o:new 10 1h",
        "THROTTLE.LEAKY o:new 10 1h",
        "THROTTLE.ALL FIXED o:new 10 1h TOKEN o:new2 10 1h",
        "THROTTLE._LOAD o:new thr-fixed 1 5 3 5 10 1000000",
    ] {
        let e = err(&mut c, line);
        assert!(e.starts_with(OOM), "{line}: {e}");
    }
    let exists: i64 = call(&mut c, "EXISTS o:new o:new2").unwrap();
    assert_eq!(exists, 0);
    // Read-only: THROTTLE.INFO answers on every type, and on a missing key.
    for key in ["o:fixed", "o:sliding", "o:exact", "o:token", "o:leaky"] {
        let info: Vec<String> =
            call(&mut c, &format!("THROTTLE.INFO {key}")).unwrap_or_else(|e| panic!("INFO {key}: {e}"));
        assert_eq!(info.len() % 2, 0, "{key}: {info:?}");
        assert!(info.len() >= 8, "{key}: {info:?}");
    }
    let missing: redis::Value = call(&mut c, "THROTTLE.INFO o:new").unwrap();
    assert_eq!(missing, redis::Value::Nil);
    let pong: String = call(&mut c, "PING").unwrap();
    assert_eq!(pong, "PONG");
    assert!(server.alive());
    // Memory back: everything works again.
    let _: i64 = call(&mut c, "DEL o:big").unwrap();
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED o:new 10 1h").0, 1);
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED o:fixed 10 1h").2, 6);
}

/// Under maxmemory the THROTTLE commands answer Redis's OOM error even for
/// a peek: COMMANDS.md has them flagged `deny-oom`, and Redis refuses such
/// a command before the module sees it. THROTTLE.INFO (read-only) is the
/// way to read a limiter then, as docs/operations.md says; this pins both halves.
#[test]
fn peeks_get_the_oom_error_and_throttle_info_reads_instead() {
    let (_server, mut c) = full_server();
    for line in [
        "THROTTLE.FIXED o:fixed 10 1h COST 0",
        "THROTTLE.SLIDING o:sliding 10 1h COST 0",
        "THROTTLE.SLIDING o:exact 10 1h COST 0 EXACT",
        "THROTTLE.TOKEN o:token 10 1h COST 0",
        "THROTTLE.LEAKY o:leaky 10 1h COST 0",
        "THROTTLE.ALL COST 0 FIXED o:fixed 10 1h TOKEN o:token 10 1h",
    ] {
        let e = err(&mut c, line);
        assert!(e.starts_with(OOM), "{line}: {e}");
    }
    for key in ["o:fixed", "o:sliding", "o:exact", "o:token", "o:leaky"] {
        let info: Vec<redis::Value> = call(&mut c, &format!("THROTTLE.INFO {key}")).expect("THROTTLE.INFO");
        assert!(info.len() >= 8, "{key}: {info:?}");
    }
}
