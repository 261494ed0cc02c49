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

/// The short, bounded version of the campaign that `make test` runs without
/// the fuzzer: the same checks on inputs from a seeded generator (random
/// bytes, and the saved inputs with random bytes changed), a fixed number
/// of times. `make fuzz` is the coverage-guided campaign.
fn random_inputs(target: &str, check: fn(&[u8]), runs: usize) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
    let seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).filter_map(|e| std::fs::read(e.path()).ok()).collect())
        .unwrap_or_default();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15 ^ target.len() as u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for run in 0..runs {
        let mut data: Vec<u8> = match seeds.get(run % (seeds.len() + 1)) {
            Some(seed) if run % 2 == 0 => seed.clone(),
            _ => (0..next() % 512).map(|_| next() as u8).collect(),
        };
        for _ in 0..(next() % 8) {
            if data.is_empty() {
                break;
            }
            let at = (next() as usize) % data.len();
            data[at] = next() as u8;
        }
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{target}: run {run} panicked on {data:?}");
    }
}

#[test]
fn parse_call_random_inputs() {
    random_inputs("parse_call", checks::parse_call, 20_000);
}

#[test]
fn decode_state_random_inputs() {
    random_inputs("decode_state", checks::decode_state, 20_000);
}

#[test]
fn algorithms_random_inputs() {
    random_inputs("algorithms", checks::algorithms, 5_000);
}
