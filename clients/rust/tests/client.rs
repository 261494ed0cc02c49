//! The typed client against real servers with the module, on every server
//! of `THROTTLE_SERVERS`, in RESP2 and RESP3: the replies of every command
//! (time driven by `AT`), penalties and DETAIL, THROTTLE.ALL and INFO,
//! errors, and a server without the module.

mod common;

use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{n, servers, t0, Server};
use redis_throttle_client::{
    AcquireOptions, AllOptions, Ban, Decision, Detail, Error, Lease, Limit, Options, Penalty, Plain, Quota, Sliding,
    Spec, Throttle, Token,
};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn at_ms(v: u64) -> SystemTime {
    UNIX_EPOCH + ms(v)
}

/// The five fields: allowed, limit, remaining, retry_after (ms, -1 never),
/// reset_after (ms).
fn five(d: &Decision) -> (bool, u64, u64, i64, u64) {
    let retry = d.retry_after.map_or(-1, |r| r.as_millis() as i64);
    (d.allowed, d.limit, d.remaining, retry, d.reset_after.as_millis() as u64)
}

/// The README's examples, through the typed methods, in both protocols.
#[tokio::test]
async fn every_algorithm_answers_as_the_module_documents() {
    for binary in servers() {
        let server = Server::start(&binary);
        for resp3 in [false, true] {
            let t = server.throttle(resp3).await;
            let k = |name: &str| format!("{name}:{resp3}");
            let ctx = format!("{binary}, resp3 {resp3}");

            let three = Quota::per_minute(n(3));
            let base = 1_700_000_000_000;
            let d = t.fixed(&k("login"), three, &Options::new().at(at_ms(base))).await.unwrap();
            assert_eq!(five(&d), (true, 3, 2, 0, 60_000), "{ctx}");
            let d = t.fixed(&k("login"), three, &Options::new().cost(2).at(at_ms(base + 30_000))).await.unwrap();
            assert_eq!(five(&d), (true, 3, 0, 0, 30_000), "{ctx}");
            let d = t.fixed(&k("login"), three, &Options::new().at(at_ms(base + 45_000))).await.unwrap();
            assert_eq!(five(&d), (false, 3, 0, 15_000, 15_000), "{ctx}");
            assert_eq!(d.detail, None);

            let ten = Quota::new(n(10), Duration::from_secs(10)).unwrap();
            let d = t.sliding(&k("bob"), ten, Sliding::Estimate, &Options::new().cost(10).at(at_ms(9_000))).await;
            assert_eq!(five(&d.unwrap()), (true, 10, 0, 0, 11_000), "{ctx}");
            let d = t.sliding(&k("bob"), ten, Sliding::Estimate, &Options::new().at(at_ms(12_000))).await.unwrap();
            assert_eq!(five(&d), (true, 10, 1, 0, 18_000), "{ctx}");
            let d = t.sliding(&k("sms"), Quota::per_hour(n(3)), Sliding::Exact, &Options::new().at(t0())).await;
            assert_eq!(five(&d.unwrap()), (true, 3, 2, 0, 3_600_000), "{ctx}");
            // At 12.5 s the previous window's 10 units weigh 7.5: the
            // estimate has no room for 3 more, FLOOR (7) has.
            for (mode, admitted) in [(Sliding::Estimate, false), (Sliding::Floor, true)] {
                let key = k(&format!("{mode:?}"));
                assert!(t.sliding(&key, ten, mode, &Options::new().cost(10).at(at_ms(9_000))).await.unwrap().allowed);
                let d = t.sliding(&key, ten, mode, &Options::new().cost(3).at(at_ms(12_500))).await.unwrap();
                assert_eq!(d.allowed, admitted, "{ctx}: {mode:?} {d:?}");
            }
            let e = t.sliding(&k("bob"), ten, Sliding::Exact, &Options::new().at(at_ms(12_000))).await.unwrap_err();
            assert!(e.to_string().contains("WRONGTYPE"), "{ctx}: {e}");

            let rate = Quota::per_second(n(10));
            let d = t.token(&k("carol"), rate, Some(n(20)), &Options::new().cost(20).at(at_ms(0))).await.unwrap();
            assert_eq!(five(&d), (true, 20, 0, 0, 2_000), "{ctx}");
            let d = t.token(&k("carol"), rate, Some(n(20)), &Options::new().at(at_ms(50))).await.unwrap();
            assert_eq!(five(&d), (false, 20, 0, 50, 1_950), "{ctx}");
            let d = t.token(&k("carol"), rate, Some(n(20)), &Options::new().at(at_ms(100))).await.unwrap();
            assert_eq!(five(&d), (true, 20, 0, 0, 2_000), "{ctx}");

            let mut leaks = Vec::new();
            for _ in 0..4 {
                let d = t.leaky(&k("gateway"), rate, Some(n(3)), &Options::new().at(at_ms(0))).await.unwrap();
                leaks.push(five(&d));
            }
            assert_eq!(
                leaks,
                [(true, 3, 2, 0, 100), (true, 3, 1, 100, 200), (true, 3, 0, 200, 300), (false, 3, 0, 100, 300)],
                "{ctx}"
            );

            // A cost above the burst can never pass: retry_after is None.
            let d = t.token(&k("never"), rate, None, &Options::new().cost(11).at(t0())).await.unwrap();
            assert_eq!(five(&d), (false, 10, 10, -1, 0), "{ctx}");
            // A peek changes nothing; a refund gives units back.
            let limit = Limit::fixed(Quota::per_hour(n(5)));
            t.check(&k("refund"), &limit, &Options::new().cost(4).at(t0())).await.unwrap();
            assert_eq!(t.check(&k("refund"), &limit, &Options::new().peek().at(t0())).await.unwrap().remaining, 1);
            let d = t.check(&k("refund"), &limit, &Options::new().cost(-3).at(t0())).await.unwrap();
            assert_eq!((d.allowed, d.remaining), (true, 4), "{ctx}");
        }
    }
}

/// Bans (plain, renewing, escalating, set directly), counted refusals,
/// forced units and DETAIL, the same in both protocols.
#[tokio::test]
async fn penalties_and_detail() {
    for binary in servers() {
        let server = Server::start(&binary);
        for resp3 in [false, true] {
            let t = server.throttle(resp3).await;
            let k = |name: &str| format!("{name}:{resp3}");
            let ctx = format!("{binary}, resp3 {resp3}");
            let at = |s: u64| t0() + Duration::from_secs(s);
            let two = Quota::per_hour(n(2));
            let ban = Options::new().ban(Ban::Plain(Duration::from_secs(600)));

            // A plain ban, on every algorithm.
            for (i, limit) in [
                Limit::fixed(two),
                Limit::sliding(two),
                Limit::sliding_exact(two),
                Limit::token(two),
                Limit::leaky(two),
            ]
            .iter()
            .enumerate()
            {
                let key = k(&format!("ban:{i}"));
                assert!(t.check(&key, limit, &ban.cost(2).at(at(0))).await.unwrap().allowed, "{ctx} {limit:?}");
                let d = t.check(&key, limit, &ban.at(at(1)).detail()).await.unwrap();
                assert_eq!(five(&d), (false, 2, 0, 600_000, 600_000), "{ctx} {limit:?}");
                let detail = Detail { hits: 2, banned: Some(ms(600_000)), next_free: ms(600_000) };
                assert_eq!(d.detail, Some(detail), "{ctx} {limit:?}");
                let d = t.check(&key, limit, &Options::new().at(at(61))).await.unwrap();
                assert_eq!(five(&d), (false, 2, 0, 540_000, 540_000), "{ctx}: a call without BAN is refused too");
                let info = t.info_at(&key, Some(at(61))).await.unwrap().expect("the key");
                assert_eq!((info.get("banned"), info.get("ban_length")), (Some(540_000), Some(600_000)), "{ctx}");
                let d = t.check(&key, limit, &Options::new().peek().at(at(601))).await.unwrap();
                assert_eq!(five(&d), (true, 2, 2, 0, 0), "{ctx}: idle after the ban");
            }

            // RENEW restarts the ban; BACKOFF doubles it up to its cap.
            let one = Quota::per_minute(n(1));
            let renew = Options::new().ban(Ban::Renew(Duration::from_secs(30)));
            t.fixed(&k("renew"), one, &renew.at(at(0))).await.unwrap();
            for s in [1, 20, 45] {
                let d = t.fixed(&k("renew"), one, &renew.at(at(s))).await.unwrap();
                assert_eq!(d.retry_after, Some(Duration::from_secs(30)), "{ctx} at {s}");
            }
            assert!(t.fixed(&k("renew"), one, &renew.at(at(76))).await.unwrap().allowed, "{ctx}");
            let backoff =
                Options::new().ban(Ban::Backoff { first: Duration::from_secs(10), max: Duration::from_secs(35) });
            t.token(&k("backoff"), one, None, &backoff.at(at(0))).await.unwrap();
            let mut waits = Vec::new();
            for s in 1..=5 {
                waits.push(t.token(&k("backoff"), one, None, &backoff.at(at(s))).await.unwrap().retry_after);
            }
            let secs = |s: u64| Some(Duration::from_secs(s));
            assert_eq!(waits, [secs(10), secs(20), secs(35), secs(35), secs(35)], "{ctx}");

            // TALLY: refused units count; DETAIL reports them.
            let tally = Options::new().cost(2).tally(n(100)).detail();
            let three = Quota::per_minute(n(3));
            let d = t.fixed(&k("tally"), three, &tally.at(at(0))).await.unwrap();
            assert_eq!((five(&d), d.detail.map(|x| x.hits)), ((true, 3, 1, 0, 60_000), Some(2)), "{ctx}");
            let d = t.fixed(&k("tally"), three, &tally.at(at(1))).await.unwrap();
            let detail = Detail { hits: 4, banned: None, next_free: ms(59_000) };
            assert_eq!((five(&d), d.detail), ((false, 3, 0, 59_000, 59_000), Some(detail)), "{ctx}");

            // FORCE takes units past the limit; a ban set NOW refuses at once.
            let force = Options::new().cost(8).force().detail().at(at(0));
            let d = t.fixed(&k("force"), Quota::per_minute(n(5)), &force).await.unwrap();
            assert_eq!((d.allowed, d.remaining, d.detail.map(|x| x.hits)), (false, 0, Some(8)), "{ctx}");
            let now = Options::new().peek().ban_now(Ban::Plain(Duration::from_secs(900))).detail().at(at(0));
            let d = t.token(&k("now"), Quota::per_minute(n(5)), None, &now).await.unwrap();
            assert_eq!((d.allowed, d.retry_after, d.detail.and_then(|x| x.banned)), (false, secs(900), secs(900)));
        }
    }
}

/// THROTTLE.ALL: all or nothing, the refusing limit's penalty, DETAIL,
/// `retry_after()` the longest wait; INFO in both protocols.
#[tokio::test]
async fn all_and_info() {
    for binary in servers() {
        let server = Server::start(&binary);
        for resp3 in [false, true] {
            let t = server.throttle(resp3).await;
            let ctx = format!("{binary}, resp3 {resp3}");
            let specs = [
                Spec::new(format!("{{u{resp3}}}:s"), Limit::fixed(Quota::per_second(n(2))))
                    .penalty(Penalty::none().ban(Ban::Plain(Duration::from_secs(60)))),
                Spec::new(format!("{{u{resp3}}}:h"), Limit::token(Quota::per_hour(n(100))))
                    .penalty(Penalty::none().tally(n(500))),
            ];
            let opts = AllOptions::new().at(t0());
            for _ in 0..2 {
                let d = t.all(&specs, &opts).await.unwrap();
                assert!(d.allowed && d.limits.len() == 2, "{ctx}: {d:?}");
            }
            let d = t.all(&specs, &opts.detail()).await.unwrap();
            assert!(!d.allowed, "{ctx}");
            assert_eq!(five(&d.limits[0]), (false, 2, 0, 60_000, 60_000), "{ctx}: the per-second limit bans");
            assert_eq!(d.limits[1].detail.map(|x| x.hits), Some(2), "{ctx}: the hourly limit changed nothing");
            assert_eq!(d.retry_after(), Some(Duration::from_secs(60)), "{ctx}");
            let later = t.all(&specs, &AllOptions::new().at(t0() + Duration::from_secs(2))).await.unwrap();
            assert_eq!(later.retry_after(), Some(Duration::from_secs(58)), "{ctx}: banned although its window moved");
            let peek = t.all(&specs[1..], &AllOptions::new().cost(0).at(t0())).await.unwrap();
            assert_eq!(five(&peek.limits[0]).2, 98, "{ctx}");

            let info = t.info_at(&specs[1].key, Some(t0())).await.unwrap().expect("a token key");
            assert_eq!(info.algorithm, "token", "{ctx}");
            assert_eq!((info.get("limit"), info.get("burst"), info.get("remaining")), (Some(100), Some(100), Some(98)));
            assert_eq!(t.info("missing").await.unwrap(), None, "{ctx}");
            let e = t.all(&[], &AllOptions::new()).await.unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { argument: "spec", .. }), "{e}");
        }
    }
}

/// Bad input: the server's errors name the argument; what the client can
/// check it refuses before sending, naming the argument too.
#[tokio::test]
async fn errors_name_the_argument() {
    for binary in servers() {
        let server = Server::start(&binary);
        let t = server.throttle(false).await;
        let too_many = Quota::per_second(n(Quota::MAX_LIMIT + 1));
        let e = t.fixed("k", too_many, &Options::new()).await.unwrap_err();
        assert!(matches!(&e, Error::Redis(_)) && e.to_string().contains("invalid limit"), "{binary}: {e}");
        let e = t.token("k", Quota::per_second(n(1)), Some(n(Quota::MAX_LIMIT + 1)), &Options::new()).await;
        assert!(e.unwrap_err().to_string().contains("invalid BURST"), "{binary}");
        let cases: [(Options, &str); 4] = [
            (Options::new().ban(Ban::Plain(Duration::from_micros(1500))), "BAN"),
            (Options::new().ban(Ban::Renew(Duration::ZERO)), "BAN"),
            (
                Options::new().ban(Ban::Backoff { first: Duration::from_secs(60), max: Duration::from_secs(30) }),
                "BACKOFF",
            ),
            (Options::new().at(UNIX_EPOCH - Duration::from_secs(1)), "AT"),
        ];
        for (opts, name) in cases {
            match t.fixed("k", Quota::per_second(n(1)), &opts).await {
                Err(Error::InvalidArgument { argument, .. }) => assert_eq!(argument, name, "{binary}"),
                other => panic!("{binary}: {opts:?} gave {other:?}"),
            }
        }
        let mut c = server.connection(false).await;
        let _: () = redis::cmd("SET").arg("plain").arg("1").query_async(&mut c).await.unwrap();
        let e = t.fixed("plain", Quota::per_second(n(1)), &Options::new()).await.unwrap_err();
        assert!(e.to_string().starts_with("WRONGTYPE"), "{binary}: {e}");
        assert!(!e.is_unavailable());
    }
}

/// A server without the module: every method fails at once with
/// ModuleMissing, whose message says how to load the module (with_lease
/// without running its work).
#[tokio::test]
async fn a_server_without_the_module_says_how_to_load_it() {
    for binary in servers() {
        let server = Server::without_module(&binary);
        for resp3 in [false, true] {
            let t = server.throttle(resp3).await;
            let q = Quota::per_second(n(1));
            let o = Options::new();
            let (one, lease, token) = (NonZeroU32::MIN, Duration::from_secs(1), Token::new("t").unwrap());
            let work = async |_: &Lease<_>| panic!("the work ran without the module");
            let results = [
                ("THROTTLE.FIXED", t.fixed("k", q, &o).await.map(|_| ())),
                ("THROTTLE.SLIDING", t.sliding("k", q, Sliding::Exact, &o).await.map(|_| ())),
                ("THROTTLE.TOKEN", t.token("k", q, None, &o).await.map(|_| ())),
                ("THROTTLE.LEAKY", t.leaky("k", q, None, &o).await.map(|_| ())),
                ("THROTTLE.ALL", t.all(&[Spec::new("k", Limit::fixed(q))], &AllOptions::new()).await.map(|_| ())),
                ("THROTTLE.INFO", t.info("k").await.map(|_| ())),
                ("THROTTLE.ACQUIRE", t.acquire("k", one, lease, &AcquireOptions::new()).await.map(|_| ())),
                ("THROTTLE.RELEASE", t.release("k", &token).await.map(|_| ())),
                ("THROTTLE.RENEW", t.renew("k", &token, lease).await.map(|_| ())),
                ("THROTTLE.ACQUIRE", t.with_lease("k", one, lease, &AcquireOptions::new(), work).await.map(|_| ())),
            ];
            for (command, result) in results {
                let e = result.expect_err(command);
                assert!(matches!(e, Error::ModuleMissing { command: c, .. } if c == command), "{binary}: {e:?}");
                let text = e.to_string();
                for hint in ["loadmodule /path/to/libredis_throttle.so", "--loadmodule", "MODULE LOAD", command] {
                    assert!(text.contains(hint), "{binary}: no {hint:?} in {text}");
                }
                assert!(!e.is_unavailable(), "a missing module is no outage");
            }
        }
    }
}

/// The same calls through a ConnectionManager and through Plain; BLOCK
/// waits on the server until the call is admitted.
#[tokio::test]
async fn connection_manager_and_block() {
    for binary in servers() {
        let server = Server::start(&binary);
        let client = redis::Client::open(server.url()).unwrap();
        let config = redis::aio::ConnectionManagerConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
        let t = Throttle::new(client.get_connection_manager_with_config(config).await.unwrap());
        let rate = Quota::per_second(n(1));
        assert!(t.token("b", rate, None, &Options::new()).await.unwrap().allowed, "{binary}");
        // The bucket is empty: the call waits on the server until it
        // refills, and is admitted (nothing here measures how long).
        let admitted = t.token("b", rate, None, &Options::new().block(Duration::from_secs(20))).await.unwrap();
        assert!(admitted.allowed, "{binary}: {admitted:?}");
        // Any other cheap-to-clone ConnectionLike, wrapped in Plain.
        let plain = Throttle::new(Plain(t.connection().clone()));
        let d = plain.fixed("plain", Quota::per_minute(n(2)), &Options::new().at(t0())).await.unwrap();
        assert_eq!(five(&d), (true, 2, 1, 0, 60_000), "{binary}");
    }
}
