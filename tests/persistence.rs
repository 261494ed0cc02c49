//! Every THROTTLE type survives whatever Redis does with a value: DEBUG
//! RELOAD, a restart from the RDB, from the AOF (RDB preamble, rewritten as
//! `THROTTLE._LOAD` calls, or replayed as the propagated commands), COPY,
//! RENAME, DUMP/RESTORE; MEMORY USAGE sees the value's size.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{call, digest, now_us, throttle, wait_aof_rewrite_done, Reply, Server};

/// A key the test created, with the peek that reads it back.
struct Spec {
    key: String,
    kind: &'static str,
    /// The call with `COST 0` at the last time used on the key.
    peek: String,
}

/// What a key looked like at one instant: its type, value, the instant
/// (Unix ms) it expires at, and what a peek answers.
struct Snapshot {
    kind: String,
    digest: String,
    expire_at: i64,
    peek: Reply,
}

const HOUR: &str = "1h";

/// Creates one key of each of the five types, each with a few admitted and
/// limited calls, at times near now (period 1h: nothing expires during the
/// test).
fn populate(c: &mut redis::Connection, suffix: &str) -> Vec<Spec> {
    let t0 = now_us();
    let last = t0 + 5_000;
    let mut specs = Vec::new();
    let mut run = |key: String, kind: &'static str, head: String, tail: &str, calls: &[(u64, u64)]| {
        for &(cost, dt) in calls {
            throttle(c, &format!("{head} COST {cost} AT {}{tail}", t0 + dt));
        }
        let peek = format!("{head} COST 0 AT {last}{tail}");
        specs.push(Spec { key, kind, peek });
    };
    let calls = [(3, 0), (2, 1_000), (500, 2_000), (1, 3_000)];
    let k = format!("fx{suffix}");
    run(k.clone(), "thr-fixed", format!("THROTTLE.FIXED {k} 100 {HOUR}"), "", &calls);
    let k = format!("sl{suffix}");
    run(k.clone(), "thr-slide", format!("THROTTLE.SLIDING {k} 100 {HOUR}"), "", &calls);
    let k = format!("ex{suffix}");
    run(
        k.clone(),
        "thr-exact",
        format!("THROTTLE.SLIDING {k} 100 {HOUR}"),
        " EXACT",
        &[(1, 0), (5, 1_000), (1, 1_000), (500, 2_000), (2, 2_500), (1, 4_000)],
    );
    let bucket_calls = [(7, 0), (3, 1_000), (500, 2_000), (1, 3_000)];
    let k = format!("tk{suffix}");
    run(k.clone(), "thr-token", format!("THROTTLE.TOKEN {k} 10 {HOUR}"), " BURST 50", &bucket_calls);
    let k = format!("lk{suffix}");
    run(k.clone(), "thr-leaky", format!("THROTTLE.LEAKY {k} 10 {HOUR}"), " BURST 50", &bucket_calls);
    specs
}

fn snapshot(c: &mut redis::Connection, key: &str, peek: &str) -> Snapshot {
    let kind: String = call(c, &format!("TYPE {key}")).expect("TYPE");
    let digest = digest(c, key);
    let expire_at: i64 = call(c, &format!("PEXPIRETIME {key}")).expect("PEXPIRETIME");
    Snapshot { kind, digest, expire_at, peek: throttle(c, peek) }
}

/// The snapshots of the keys [`populate`] made from `populated` (Unix ms,
/// read before): each expires an hour or more after that.
fn snapshots(c: &mut redis::Connection, specs: &[Spec], populated: i64) -> Vec<Snapshot> {
    specs
        .iter()
        .map(|s| {
            let snap = snapshot(c, &s.key, &s.peek);
            assert_eq!(snap.kind, s.kind, "{}", s.key);
            assert!(snap.expire_at > populated + 3_000_000, "{}: expires at {}", s.key, snap.expire_at);
            snap
        })
        .collect()
}

/// The key `key` holds what `before` recorded for the original: the same
/// type, value and peek, and it expires at the same instant (what the
/// server keeps is that instant, not a TTL).
fn assert_same(c: &mut redis::Connection, what: &str, key: &str, peek: &str, before: &Snapshot) {
    let now = snapshot(c, key, peek);
    assert_eq!(now.kind, before.kind, "{what}: type of {key}");
    assert_eq!(now.digest, before.digest, "{what}: digest of {key}");
    assert_eq!(now.peek, before.peek, "{what}: peek of {key}");
    assert_eq!(now.expire_at, before.expire_at, "{what}: the instant {key} expires at");
}

fn assert_all_same(c: &mut redis::Connection, what: &str, specs: &[Spec], before: &[Snapshot]) {
    for (spec, snap) in specs.iter().zip(before) {
        assert_same(c, what, &spec.key, &spec.peek, snap);
    }
    let size: i64 = call(c, "DBSIZE").expect("DBSIZE");
    assert_eq!(size, specs.len() as i64, "{what}: DBSIZE");
}

/// The AOF files the manifest names, as (name, type letter).
fn aof_files(dir: &Path) -> Vec<(String, String)> {
    let manifest = std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest")).expect("AOF manifest");
    manifest
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = f.iter().position(|w| *w == "file").and_then(|i| f.get(i + 1))?;
            let kind = f.iter().position(|w| *w == "type").and_then(|i| f.get(i + 1))?;
            Some((name.to_string(), kind.to_string()))
        })
        .collect()
}

fn aof_file(dir: &Path, kind: &str) -> (String, Vec<u8>) {
    let (name, _) =
        aof_files(dir).into_iter().find(|(_, k)| k == kind).unwrap_or_else(|| panic!("no AOF file of type {kind}"));
    let bytes = std::fs::read(dir.join("appendonlydir").join(&name)).expect("AOF file");
    (name, bytes)
}

/// The RDB version an RDB file's header names: `REDIS` and four digits
/// (Redis; Valkey before 9), or `VALKEY` and three (Valkey 9: RDB 80 and
/// later). None for anything else.
fn rdb_file_version(file: &[u8]) -> Option<u16> {
    let (digits, rest) = if let Some(rest) = file.strip_prefix(b"REDIS") {
        (4, rest)
    } else if let Some(rest) = file.strip_prefix(b"VALKEY") {
        (3, rest)
    } else {
        return None;
    };
    let digits = rest.get(..digits)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The RDB version this server writes: the two bytes before the CRC that
/// end a DUMP payload.
fn server_rdb_version(c: &mut redis::Connection, key: &str) -> u16 {
    let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(c).expect("DUMP");
    let at = payload.len().checked_sub(10).unwrap_or_else(|| panic!("a DUMP payload: {payload:?}"));
    u16::from_le_bytes([payload[at], payload[at + 1]])
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A server started with `extra` holding the keys of [`populate`] (after
/// the first AOF rewrite, when AOF is on), with their snapshots.
fn server_with_keys(extra: &[&str]) -> (Server, redis::Connection, Vec<Spec>, Vec<Snapshot>) {
    let server = Server::start_with(extra);
    let mut c = server.conn();
    wait_aof_rewrite_done(&mut c);
    let populated = (now_us() / 1000) as i64;
    let specs = populate(&mut c, "");
    let before = snapshots(&mut c, &specs, populated);
    (server, c, specs, before)
}

/// BGREWRITEAOF, waited for.
fn rewrite_aof(c: &mut redis::Connection) {
    let _: String = call(c, "BGREWRITEAOF").expect("BGREWRITEAOF");
    wait_aof_rewrite_done(c);
}

#[test]
fn debug_reload_keeps_every_type() {
    let (_server, mut c, specs, before) = server_with_keys(&[]);
    let ok: String = call(&mut c, "DEBUG RELOAD").expect("DEBUG RELOAD");
    assert_eq!(ok, "OK");
    assert_all_same(&mut c, "DEBUG RELOAD", &specs, &before);
}

#[test]
fn restart_from_rdb_keeps_every_type() {
    let (mut server, _, specs, before) = server_with_keys(&[]);
    server.restart("SAVE");
    assert!(server.dir.path().join("dump.rdb").exists());
    let mut c = server.conn();
    assert_all_same(&mut c, "RDB restart", &specs, &before);
}

#[test]
fn restart_from_aof_with_rdb_preamble_keeps_every_type() {
    let (mut server, mut c, specs, before) = server_with_keys(&["--appendonly", "yes"]);
    rewrite_aof(&mut c);
    let (name, base) = aof_file(server.dir.path(), "b");
    let version = server_rdb_version(&mut c, &specs[0].key);
    let head = String::from_utf8_lossy(&base[..base.len().min(9)]).into_owned();
    assert!(name.ends_with(".rdb"), "the base {name} is an RDB");
    assert_eq!(
        rdb_file_version(&base),
        Some(version),
        "the base {name} starts {head:?}: not an RDB of version {version}"
    );
    assert!(!contains(&base, "THROTTLE._LOAD"), "{name} holds the values in RDB form");
    server.restart("NOSAVE");
    assert!(!server.dir.path().join("dump.rdb").exists(), "loaded from the AOF, not an RDB");
    let mut c = server.conn();
    assert_all_same(&mut c, "AOF (RDB preamble) restart", &specs, &before);
}

#[test]
fn restart_from_rewritten_aof_without_preamble_keeps_every_type() {
    let (mut server, mut c, specs, before) = server_with_keys(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    rewrite_aof(&mut c);
    let (name, base) = aof_file(server.dir.path(), "b");
    assert!(name.ends_with(".aof"), "{name}");
    for spec in &specs {
        // The rewrite wrote each key as one THROTTLE._LOAD call naming its type.
        assert!(contains(&base, &spec.key) && contains(&base, spec.kind), "{name} lacks {}", spec.key);
    }
    assert!(contains(&base, "THROTTLE._LOAD") && contains(&base, "PEXPIREAT"), "{name}");
    assert!(!contains(&base, "THROTTLE.FIXED"), "{name} holds the rewritten form only");
    server.restart("NOSAVE");
    let mut c = server.conn();
    assert_all_same(&mut c, "AOF (THROTTLE._LOAD) restart", &specs, &before);
}

#[test]
fn restart_replaying_aof_commands_keeps_every_type() {
    // Every write reaches the file before the reply (everysec may hold a
    // write back while a background fsync runs).
    let (mut server, _, specs, before) = server_with_keys(&["--appendonly", "yes", "--appendfsync", "always"]);
    let (name, incr) = aof_file(server.dir.path(), "i");
    // Each change as its effect (the state and its expiry instant), and the
    // SLIDING EXACT log's changes as the calls, packed with their time.
    for command in ["THROTTLE._SET", "THROTTLE._CALL"] {
        assert!(contains(&incr, command), "{name} lacks {command}");
    }
    for command in ["THROTTLE.FIXED", "THROTTLE.SLIDING", "THROTTLE.TOKEN", "THROTTLE.LEAKY"] {
        assert!(!contains(&incr, command), "{name} replays {command}: its effect is enough");
    }
    server.restart("NOSAVE");
    let mut c = server.conn();
    // Replaying sets each state exactly, or recomputes it at its AT, with
    // the instant it expires at that the master set.
    assert_all_same(&mut c, "AOF (commands) restart", &specs, &before);
}

#[test]
fn copy_rename_and_dump_restore_keep_the_value() {
    let (_server, mut c, specs, before) = server_with_keys(&[]);
    for (spec, snap) in specs.iter().zip(&before) {
        let key = &spec.key;
        let on = |name: &str| spec.peek.replacen(&format!(" {key} "), &format!(" {name} "), 1);

        let copied: i64 = call(&mut c, &format!("COPY {key} {key}-copy")).expect("COPY");
        assert_eq!(copied, 1);
        assert_same(&mut c, "COPY", &format!("{key}-copy"), &on(&format!("{key}-copy")), snap);

        // RESTORE takes the instant the original expires at (ABSTTL).
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut c).expect("DUMP");
        let at = snap.expire_at;
        let restored = format!("{key}-restored");
        let ok: String =
            redis::cmd("RESTORE").arg(&restored).arg(at).arg(&payload).arg("ABSTTL").query(&mut c).expect("RESTORE");
        assert_eq!(ok, "OK");
        assert_same(&mut c, "DUMP/RESTORE", &restored, &on(&restored), snap);
        // RESTORE refuses an existing key unless told to replace it.
        let busy: redis::RedisResult<String> = redis::cmd("RESTORE").arg(&restored).arg(0).arg(&payload).query(&mut c);
        assert!(busy.is_err_and(|e| e.to_string().contains("BUSYKEY")));
        let ok: String = redis::cmd("RESTORE")
            .arg(&restored)
            .arg(at)
            .arg(&payload)
            .arg("REPLACE")
            .arg("ABSTTL")
            .query(&mut c)
            .expect("RESTORE REPLACE");
        assert_eq!(ok, "OK");
        assert_same(&mut c, "RESTORE REPLACE", &restored, &on(&restored), snap);

        let renamed = format!("{key}-renamed");
        let ok: String = call(&mut c, &format!("RENAME {key} {renamed}")).expect("RENAME");
        assert_eq!(ok, "OK");
        let gone: i64 = call(&mut c, &format!("EXISTS {key}")).expect("EXISTS");
        assert_eq!(gone, 0);
        assert_same(&mut c, "RENAME", &renamed, &on(&renamed), snap);
        // The copy is independent of the original: using it changes only it.
        throttle(&mut c, &on(&format!("{key}-copy")).replace("COST 0", "COST 1"));
        assert_eq!(digest(&mut c, &renamed), snap.digest);
    }
}

#[test]
fn memory_usage_grows_with_an_exact_log() {
    let server = Server::start();
    let mut c = server.conn();
    let specs = populate(&mut c, "");
    for spec in &specs {
        let bytes: i64 = call(&mut c, &format!("MEMORY USAGE {}", spec.key)).expect("MEMORY USAGE");
        assert!(bytes > 0, "{}: {bytes}", spec.key);
    }
    let t0 = now_us();
    throttle(&mut c, &format!("THROTTLE.SLIDING small 10000 {HOUR} EXACT AT {t0}"));
    for i in 0..2_000 {
        throttle(&mut c, &format!("THROTTLE.SLIDING big 10000 {HOUR} EXACT AT {}", t0 + i));
    }
    let small: i64 = call(&mut c, "MEMORY USAGE small").expect("MEMORY USAGE");
    let big: i64 = call(&mut c, "MEMORY USAGE big").expect("MEMORY USAGE");
    // 2000 entries of one 4-byte word each, and room to grow.
    assert!(big >= small + 8_000, "small {small}, big {big}");
    let fixed: i64 = call(&mut c, "MEMORY USAGE fx").expect("MEMORY USAGE");
    assert!(big > fixed, "fixed {fixed}, big {big}");
}

/// A key's expiry is a point in time: replaying the AOF after a pause must
/// not push it later by the pause (Redis itself writes PEXPIREAT for that).
#[test]
fn aof_replay_keeps_absolute_expiry() {
    let (mut server, _, specs, before) = server_with_keys(&["--appendonly", "yes"]);
    // The downtime the replay must not add to the TTLs.
    let pause = Instant::now() + Duration::from_millis(1_000);
    common::wait_until("a measurable downtime", Duration::from_secs(5), || Instant::now() >= pause);
    server.restart("NOSAVE");
    let mut c = server.conn();
    assert_all_same(&mut c, "AOF (commands) restart after a pause", &specs, &before);
}

/// `THROTTLE._SET` as earlier versions wrote it into AOF files, with the
/// expiry as a third argument in decimal, still applies, and sets the same
/// value and expiry as today's form (the expiry inside the snapshot) and as
/// `THROTTLE._LOAD` plus `PEXPIREAT`, on a new key or over one of its type.
/// The states are in encoding version 1.
#[test]
fn both_forms_of_throttle_set_apply() {
    let server = Server::start();
    let mut c = server.conn();
    let relative_expiry_only =
        common::info_field(&mut c, "server", "redis_version").is_some_and(|v| v.starts_with("7.0."));
    let t = now_us();
    let at_ms = t / 1000 + 3_600_000;
    let hour = 3_600_000_000;
    let states: [(u8, &str, Vec<u64>); 5] = [
        (1, "thr-fixed", vec![t, 3, t + 10, 10, hour]),
        (2, "thr-slide", vec![t - t % hour, 4, 3, t, 10, hour]),
        (3, "thr-exact", vec![1, t, 10, hour, 1, t, 1]),
        (4, "thr-token", vec![0, hour, t, 10, hour, 20]),
        (5, "thr-leaky", vec![0, 2 * hour, t, 10, hour, 20]),
    ];
    for (tag, kind, words) in states {
        let mut state = vec![tag, 1];
        state.extend(words.iter().flat_map(|w| w.to_le_bytes()));
        let snapshot = [&state[..], &at_ms.to_le_bytes()].concat();
        let (old, new, loaded) = (format!("old-{kind}"), format!("new-{kind}"), format!("loaded-{kind}"));
        let ok: String = redis::cmd("THROTTLE._SET").arg(&old).arg(&state).arg(at_ms).query(&mut c).expect("old _SET");
        assert_eq!(ok, "OK");
        // Twice: the second replaces the first's value and expiry in place.
        let later = [&state[..], &(at_ms + 5_000).to_le_bytes()].concat();
        for snapshot in [&later, &snapshot] {
            let ok: String = redis::cmd("THROTTLE._SET").arg(&new).arg(snapshot).query(&mut c).expect("new _SET");
            assert_eq!(ok, "OK");
        }
        let words: Vec<String> = words.iter().map(u64::to_string).collect();
        let _: () = call(&mut c, &format!("THROTTLE._LOAD {loaded} {kind} 1 {}", words.join(" "))).expect("_LOAD");
        let _: () = call(&mut c, &format!("PEXPIREAT {loaded} {at_ms}")).expect("PEXPIREAT");
        for key in [&old, &new] {
            assert_eq!(digest(&mut c, key), digest(&mut c, &loaded), "{key}");
            let expire: u64 = call(&mut c, &format!("PEXPIRETIME {key}")).expect("PEXPIRETIME");
            // Exact where modules set absolute expiries (7.2 and later);
            // Redis 7.0 takes a TTL, which its clock can land 1 ms late.
            let late_ms = if relative_expiry_only { 1 } else { 0 };
            assert!((at_ms..=at_ms + late_ms).contains(&expire), "{key}: expires at {expire}, not {at_ms}");
        }
        // A snapshot cut short of its expiry, or of a word, is refused.
        for bad in [&snapshot[..snapshot.len() - 8], &snapshot[..snapshot.len() - 1], &snapshot[..7]] {
            let e = redis::cmd("THROTTLE._SET").arg("bad").arg(bad).query::<()>(&mut c).expect_err("a cut snapshot");
            let e = e.to_string();
            assert!(e.contains("invalid THROTTLE state") || e.contains("invalid expiry"), "{kind}: {e}");
        }
        // An expiry no master sends, which the server's clock would wrap
        // into the past (Valkey asserted on it), is refused too.
        let far = u64::MAX / 2;
        let e =
            redis::cmd("THROTTLE._SET").arg("bad").arg(&state).arg(far).query::<()>(&mut c).expect_err("far expiry");
        assert!(e.to_string().contains("invalid expiry"), "{kind}: {e}");
        let far_snapshot = [&state[..], &far.to_le_bytes()].concat();
        let e = redis::cmd("THROTTLE._SET").arg("bad").arg(&far_snapshot).query::<()>(&mut c).expect_err("far expiry");
        assert!(e.to_string().contains("invalid expiry"), "{kind}: {e}");
        let exists: i64 = call(&mut c, "EXISTS bad").expect("EXISTS");
        assert_eq!(exists, 0);
    }
}
