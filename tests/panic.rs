//! A panic never takes the server down. Debug builds of the module have
//! `THROTTLE._PANIC` (panics in the command handler) and `THROTTLE._PANIC
//! CALLBACK` (the next data-type callback panics); this test builds the
//! debug module when needed (`cargo build` with the same
//! `CARGO_TARGET_DIR`), or takes `THROTTLE_DEBUG_MODULE`, and checks that
//! each panic ends as an error reply or a refused value with the server up.
//! Release builds must not have the command at all.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{call, error, throttle, Server};

const INTERNAL: &str = "internal error in the throttle module";

/// The debug build of the module, built now if needed (a no-op when it is
/// up to date).
fn debug_module() -> PathBuf {
    if let Ok(path) = std::env::var("THROTTLE_DEBUG_MODULE") {
        return PathBuf::from(path);
    }
    let manifest = env!("CARGO_MANIFEST_DIR");
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(manifest).join("target"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--lib", "--manifest-path"])
        .arg(PathBuf::from(manifest).join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("run cargo build for the debug module");
    assert!(status.success(), "cargo build (debug module) failed: {status}");
    let path = target.join("debug/libredis_throttle.so");
    assert!(path.exists(), "{} missing after cargo build", path.display());
    path
}

fn alive(server: &mut Server, c: &mut redis::Connection) {
    let pong: String = call(c, "PING").unwrap_or_else(|e| panic!("PING: {e}; log:\n{}", server.log()));
    assert_eq!(pong, "PONG");
    assert!(server.alive());
}

#[test]
fn panics_are_contained() {
    let module = debug_module();
    let mut server = Server::start_with_module(&module, &[]);
    let mut c = server.conn();
    let keys = ["k:fixed", "k:sliding", "k:exact", "k:token", "k:leaky"];
    for line in [
        "THROTTLE.FIXED k:fixed 10 1h COST 3",
        "THROTTLE.SLIDING k:sliding 10 1h COST 3",
        "THROTTLE.SLIDING k:exact 10 1h COST 3 EXACT",
        "THROTTLE.TOKEN k:token 10 1h COST 3",
        "THROTTLE.LEAKY k:leaky 10 1h COST 3",
    ] {
        assert_eq!(throttle(&mut c, line).0, 1, "{line}");
    }

    // A panic in a command handler: an ERR reply, the server goes on.
    for _ in 0..3 {
        let e = error(&mut c, "THROTTLE._PANIC");
        assert!(e.starts_with("ERR ") && e.contains(INTERNAL), "{e}");
        alive(&mut server, &mut c);
    }

    for key in keys {
        let digest_before = common::digest(&mut c, key);

        // A panic in the digest callback: the server answers and lives.
        let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
        let _: redis::Value = call(&mut c, &format!("DEBUG DIGEST-VALUE {key}")).unwrap_or_else(|e| panic!("DIGEST-VALUE {key}: {e}"));
        alive(&mut server, &mut c);

        // A panic in rdb_save (DUMP): whatever payload comes out, RESTORE
        // either refuses it or loads a valid value, never crashes.
        let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
        let dump: redis::RedisResult<Vec<u8>> = redis::cmd("DUMP").arg(key).query(&mut c);
        alive(&mut server, &mut c);
        if let Ok(payload) = dump {
            let restored: redis::RedisResult<()> = redis::cmd("RESTORE").arg(format!("{key}:copy")).arg(0).arg(payload).query(&mut c);
            if let Err(e) = restored {
                assert!(e.to_string().contains("Bad data format") || e.to_string().contains("payload"), "RESTORE: {e}");
            }
            alive(&mut server, &mut c);
        }

        // A panic in mem_usage and in copy.
        let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
        let _: redis::Value = call(&mut c, &format!("MEMORY USAGE {key}")).unwrap_or_else(|e| panic!("MEMORY USAGE {key}: {e}"));
        alive(&mut server, &mut c);
        let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
        let copied: redis::RedisResult<redis::Value> = call(&mut c, &format!("COPY {key} {key}:copy2"));
        alive(&mut server, &mut c);
        let _ = copied;

        // A panic in the rdb_load of RESTORE: refused.
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut c).unwrap();
        let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
        let restored: redis::RedisResult<()> = redis::cmd("RESTORE").arg(format!("{key}:copy3")).arg(0).arg(payload).query(&mut c);
        assert!(restored.is_err(), "RESTORE with a panicking rdb_load must be refused");
        alive(&mut server, &mut c);

        // The key itself is untouched, and the module still works on it.
        assert_eq!(common::digest(&mut c, key), digest_before, "{key} after the panics");
    }
    // The trigger is spent: callbacks run normally again.
    for key in keys {
        let _: redis::Value = call(&mut c, &format!("DEBUG DIGEST-VALUE {key}")).unwrap();
    }
    let reload: String = call(&mut c, "DEBUG RELOAD").unwrap_or_else(|e| panic!("DEBUG RELOAD: {e}; log:\n{}", server.log()));
    assert_eq!(reload, "OK");
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED k:fixed 10 1h").2, 6);
    alive(&mut server, &mut c);
}

#[test]
fn release_builds_have_no_panic_command() {
    let mut server = Server::start();
    let mut c = server.conn();
    for line in ["THROTTLE._PANIC", "THROTTLE._PANIC CALLBACK"] {
        let e = error(&mut c, line);
        assert!(e.contains("unknown command"), "{line}: {e}");
    }
    alive(&mut server, &mut c);
}
