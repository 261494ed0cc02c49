//! Replays every saved fuzz input (`fuzz/regressions/<target>/*`) through
//! the very function its fuzz target calls, so inputs that once crashed stay
//! fixed in plain `cargo test`, without the fuzzer or a nightly compiler.
//! `make fuzz` runs the campaign itself.

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod checks;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no saved inputs in {}", dir.display());
    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{} fails again (replay: cargo fuzz run {target} {})", path.display(), path.display());
    }
    eprintln!("{target}: {} saved inputs replayed", files.len());
}

#[test]
fn parse_call_regressions() {
    replay("parse_call", checks::parse_call);
}

#[test]
fn decode_state_regressions() {
    replay("decode_state", checks::decode_state);
}

#[test]
fn algorithms_regressions() {
    replay("algorithms", checks::algorithms);
}
