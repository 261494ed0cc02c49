//! The throttle module from Rust with the `redis` crate: a typed reply,
//! traffic shaping with THROTTLE.LEAKY (each job runs at the time the reply
//! says), a reservation refunded with a negative COST, a pipelined batch and
//! an error. Time is driven with AT, so every value is exact.
//!
//!     REDIS_PORT=6399 cargo run --release --example rust      (after `make run`)
//!
//! Exits 1 on the first reply that differs from the expected one.

use std::process::ExitCode;

/// The five integers every THROTTLE command answers.
#[derive(Debug, PartialEq, Eq)]
struct Reply {
    allowed: bool,
    limit: i64,
    remaining: i64,
    retry_after_ms: i64,
    reset_after_ms: i64,
}

impl Reply {
    fn from_vec(v: Vec<i64>) -> Reply {
        assert_eq!(v.len(), 5, "a THROTTLE reply has five integers: {v:?}");
        Reply { allowed: v[0] == 1, limit: v[1], remaining: v[2], retry_after_ms: v[3], reset_after_ms: v[4] }
    }
}

const fn reply(allowed: bool, limit: i64, remaining: i64, retry_after_ms: i64, reset_after_ms: i64) -> Reply {
    Reply { allowed, limit, remaining, retry_after_ms, reset_after_ms }
}

/// `THROTTLE.<algorithm> key limit period` plus options, e.g. `&["COST", "3"]`.
fn throttle(
    con: &mut redis::Connection,
    algorithm: &str,
    key: &str,
    limit: u64,
    period: &str,
    options: &[&str],
) -> redis::RedisResult<Reply> {
    let mut cmd = redis::cmd(&format!("THROTTLE.{algorithm}"));
    cmd.arg(key).arg(limit).arg(period).arg(options);
    cmd.query::<Vec<i64>>(con).map(Reply::from_vec)
}

struct Checks(u32);

impl Checks {
    fn check<T: std::fmt::Debug + PartialEq>(&mut self, what: &str, got: T, want: T) {
        if got == want {
            println!("ok  {what}: {got:?}");
        } else {
            println!("MISMATCH {what}: {got:?}, expected {want:?}");
            self.0 += 1;
        }
    }
}

fn run(con: &mut redis::Connection) -> redis::RedisResult<u32> {
    let mut c = Checks(0);
    let p = "example:rust:";
    let keys = [format!("{p}sms"), format!("{p}report"), format!("{p}batch"), format!("{p}str")];
    redis::cmd("DEL").arg(&keys).query::<i64>(con)?;
    let t0: u64 = 1_700_000_000_000_000;
    let at = |ms: u64| (t0 + ms * 1000).to_string();

    // Traffic shaping: an SMS gateway takes 10 a second, 3 may queue. Five
    // jobs arrive at once; each admitted job waits its retry_after before
    // sending, so they go out 100 ms apart. The fourth and fifth are refused.
    let mut sends = Vec::new();
    for _ in 0..5 {
        let r = throttle(con, "LEAKY", &keys[0], 10, "1s", &["BURST", "3", "AT", &at(0)])?;
        sends.push(r.allowed.then_some(r.retry_after_ms));
    }
    c.check("5 jobs at once: send after (ms)", sends, vec![Some(0), Some(100), Some(200), None, None]);
    c.check(
        "150 ms later, one more fits",
        throttle(con, "LEAKY", &keys[0], 10, "1s", &["BURST", "3", "AT", &at(150)])?,
        reply(true, 3, 0, 150, 250),
    );

    // Reserve 50 units of a 100-an-hour quota, use 20, give 30 back.
    // SLIDING's windows are aligned on the Unix epoch: t0 is 800 s into its
    // hour, and the units still weigh on the next hour, so the key is idle
    // again 2800 + 3600 s later.
    c.check(
        "reserve 50",
        throttle(con, "SLIDING", &keys[1], 100, "1h", &["COST", "50", "AT", &at(0)])?,
        reply(true, 100, 50, 0, 6_400_000),
    );
    c.check(
        "refund 30",
        throttle(con, "SLIDING", &keys[1], 100, "1h", &["COST", "-30", "AT", &at(1000)])?,
        reply(true, 100, 80, 0, 6_399_000),
    );

    // A batch in one round trip: each call is atomic on its own.
    let mut pipe = redis::pipe();
    for i in 0..4 {
        pipe.cmd("THROTTLE.FIXED").arg(&keys[2]).arg(3).arg("1s").arg("AT").arg(at(i * 100));
    }
    let batch: Vec<Vec<i64>> = pipe.query(con)?;
    let allowed: Vec<i64> = batch.iter().map(|r| r[0]).collect();
    c.check("pipelined 4 calls, 3 a second", allowed, vec![1, 1, 1, 0]);
    c.check("the refused one waits for the window's end", batch[3][3], 700);

    // Bad input and wrong types are errors; being limited is not.
    redis::cmd("SET").arg(&keys[3]).arg("x").query::<()>(con)?;
    let err = throttle(con, "FIXED", &keys[3], 1, "1s", &[]).unwrap_err();
    c.check("a string key", err.code(), Some("WRONGTYPE"));
    let err = throttle(con, "TOKEN", &keys[1], 1, "1s", &["EXACT"]).unwrap_err();
    c.check("EXACT on TOKEN", err.to_string().contains("option EXACT is not valid for THROTTLE.TOKEN"), true);

    redis::cmd("DEL").arg(&keys).query::<i64>(con)?;
    Ok(c.0)
}

fn main() -> ExitCode {
    let host = std::env::var("REDIS_HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port = std::env::var("REDIS_PORT").unwrap_or_else(|_| "6399".into());
    let result = redis::Client::open(format!("redis://{host}:{port}/"))
        .and_then(|client| client.get_connection())
        .and_then(|mut con| run(&mut con));
    match result {
        Ok(0) => {
            println!("rust example: every reply as expected");
            ExitCode::SUCCESS
        }
        Ok(n) => {
            println!("rust example: {n} mismatches");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("rust example: {e}");
            ExitCode::FAILURE
        }
    }
}
