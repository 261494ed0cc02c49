//! A panic never takes the server down. Debug builds of the module have
//! `THROTTLE._PANIC` (panics in the command handler) and `THROTTLE._PANIC
//! CALLBACK` (the next data-type callback panics); this test builds the
//! debug module when needed (`cargo build` with the same
//! `CARGO_TARGET_DIR`), or takes `THROTTLE_DEBUG_MODULE`, and checks that
//! each panic ends as an error reply or a refused value with the server up.
//! Release builds must not have the command at all.

mod common;

use common::{call, debug_module, error, throttle, Server};

const INTERNAL: &str = "internal error in the throttle module";

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
        let _: redis::Value =
            call(&mut c, &format!("DEBUG DIGEST-VALUE {key}")).unwrap_or_else(|e| panic!("DIGEST-VALUE {key}: {e}"));
        alive(&mut server, &mut c);

        // A panic in mem_usage and in copy.
        let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
        let _: redis::Value =
            call(&mut c, &format!("MEMORY USAGE {key}")).unwrap_or_else(|e| panic!("MEMORY USAGE {key}: {e}"));
        alive(&mut server, &mut c);
        let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
        let copied: redis::RedisResult<redis::Value> = call(&mut c, &format!("COPY {key} {key}:copy2"));
        alive(&mut server, &mut c);
        let _ = copied;

        // A panic in the rdb_load of RESTORE: refused.
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut c).unwrap();
        let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
        let restored: redis::RedisResult<()> =
            redis::cmd("RESTORE").arg(format!("{key}:copy3")).arg(0).arg(payload).query(&mut c);
        assert!(restored.is_err(), "RESTORE with a panicking rdb_load must be refused");
        alive(&mut server, &mut c);

        // The key itself is untouched, and the module still works on it.
        assert_eq!(common::digest(&mut c, key), digest_before, "{key} after the panics");
    }
    // The trigger is spent: callbacks run normally again.
    for key in keys {
        let _: redis::Value = call(&mut c, &format!("DEBUG DIGEST-VALUE {key}")).unwrap();
    }
    let reload: String =
        call(&mut c, "DEBUG RELOAD").unwrap_or_else(|e| panic!("DEBUG RELOAD: {e}; log:\n{}", server.log()));
    assert_eq!(reload, "OK");
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED k:fixed 10 1h").2, 6);
    alive(&mut server, &mut c);
}

/// A panic while a value is written out (rdb_save, aof_rewrite) would
/// leave half a value in the file with nothing to tell Redis: the writer
/// aborts instead. In BGSAVE and BGREWRITEAOF that is the forked child:
/// Redis reports the failed save and keeps the last good file. In DUMP it
/// is the server itself.
#[test]
fn a_panic_while_writing_a_value_aborts_the_writer() {
    let module = debug_module();
    let mut server = Server::start_with_module(&module, &["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    server.expect_crash();
    let mut c = server.conn();
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED k 10 1h COST 3").0, 1);
    common::wait_aof_rewrite_done(&mut c);
    let done =
        |c: &mut redis::Connection, field: &str| common::info_field(c, "persistence", field).as_deref() == Some("0");

    for (command, in_progress, status) in [
        ("BGSAVE", "rdb_bgsave_in_progress", "rdb_last_bgsave_status"),
        ("BGREWRITEAOF", "aof_rewrite_in_progress", "aof_last_bgrewrite_status"),
    ] {
        let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
        let _: String = call(&mut c, command).unwrap_or_else(|e| panic!("{command}: {e}"));
        common::wait_until(command, std::time::Duration::from_secs(20), || done(&mut c, in_progress));
        assert_eq!(
            common::info_field(&mut c, "persistence", status).as_deref(),
            Some("err"),
            "{command} wrote a half value"
        );
        // The trigger is still armed in the server itself: spend it.
        let _: redis::Value = call(&mut c, "DEBUG DIGEST-VALUE k").unwrap();
        alive(&mut server, &mut c);
    }

    let _: () = call(&mut c, "THROTTLE._PANIC CALLBACK").unwrap();
    let dump: redis::RedisResult<Vec<u8>> = redis::cmd("DUMP").arg("k").query(&mut c);
    assert!(dump.is_err(), "DUMP returned a payload written by a panicking callback");
    common::wait_until("the server to abort", std::time::Duration::from_secs(10), || !server.alive());
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
