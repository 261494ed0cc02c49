#![no_main]

// The check lives in src/lib.rs, shared with tests/fuzz_regressions.rs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| throttle_fuzz::algorithms(data));
