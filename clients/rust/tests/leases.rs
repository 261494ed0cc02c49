//! Leases through the typed client against real servers with the module,
//! on every server of `THROTTLE_SERVERS`, in RESP2 and RESP3: ACQUIRE's
//! admissions and refusals (time driven by `AT`), token safety, renewals,
//! `ID` idempotence, INFO's holders, `BLOCK` waiters let in in arrival
//! order, `with_lease` giving the slot back however its work ends, and the
//! arguments refused before sending.
//!
//! Where waiting is the point, nothing measures how long anything took:
//! a waiter's turn comes from a release the test makes, and the test
//! counts the server's waiters before going on.

mod common;

use std::num::NonZeroU32;
use std::time::{Duration, Instant, UNIX_EPOCH};

use common::{t0, Server};
use redis::aio::MultiplexedConnection;
use redis_throttle_client::{
    AcquireOptions, Admission, Error, Holder, Lease, Options, Quota, Refused, Throttle, Token,
};

fn slots(v: u32) -> NonZeroU32 {
    NonZeroU32::new(v).expect("not zero")
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn token(s: &str) -> Token {
    Token::new(s).expect("a valid token")
}

fn admitted<C>(a: Admission<Lease<C>>, ctx: &str) -> Lease<C> {
    match a {
        Admission::Admitted(lease) => lease,
        Admission::Refused(r) => panic!("{ctx}: refused: {r:?}"),
    }
}

/// `INFO throttle`'s count of clients waiting on a THROTTLE command.
async fn waiting(conn: &mut MultiplexedConnection) -> i64 {
    let info: String = redis::cmd("INFO").arg("throttle").query_async(conn).await.expect("INFO throttle");
    info.lines()
        .find_map(|l| l.strip_prefix("throttle_waiting_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no throttle_waiting_clients in {info}"))
}

/// Waits until `check` holds, failing after a deadline (a guard against a
/// hang, not a measurement).
async fn eventually<F: AsyncFnMut() -> bool>(what: &str, mut check: F) {
    let deadline = Instant::now() + secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not after 20 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A connection of its own for a waiting call, whose response timeout is
/// longer than any wait here.
async fn waiter_connection(server: &Server, resp3: bool) -> MultiplexedConnection {
    let url = if resp3 { format!("{}?protocol=resp3", server.url()) } else { server.url() };
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(secs(120)));
    redis::Client::open(url).unwrap().get_multiplexed_async_connection_with_config(&config).await.expect("connect")
}

/// A semaphore of two driven by `AT`: admissions with a named and a made
/// token, a refusal with the time until the earliest lease ends, `ID`
/// acquiring again renews without a second slot, releases and renewals of
/// tokens not held change nothing, INFO lists the holders, a lease ends by
/// itself, and the key goes with its last lease.
#[tokio::test]
async fn acquire_release_and_renew_at_fixed_times() {
    for binary in common::servers() {
        let server = Server::start(&binary);
        for resp3 in [false, true] {
            let t = server.throttle(resp3).await;
            let ctx = format!("{binary}, resp3 {resp3}");
            let key = format!("s:{resp3}");
            let at = |s: u64| t0() + secs(s);
            let opts = |s: u64| AcquireOptions::new().at(at(s));
            let two = slots(2);

            let a = admitted(t.acquire(&key, two, secs(10), &opts(0).id(token("a"))).await.unwrap(), &ctx);
            assert_eq!((a.key(), a.token(), a.limit(), a.remaining()), (key.as_str(), &token("a"), 2, 1), "{ctx}");
            assert_eq!(a.reset_after(), secs(10), "{ctx}");
            // Without ID the server makes the token: 32 hex digits.
            let b = admitted(t.acquire(&key, two, secs(10), &opts(1)).await.unwrap(), &ctx);
            let b_token = b.token().as_str().expect("hex").to_string();
            assert!(b_token.len() == 32 && b_token.bytes().all(|x| x.is_ascii_hexdigit()), "{ctx}: {b_token}");
            assert_eq!((b.remaining(), b.reset_after()), (0, secs(10)), "{ctx}");

            // Full: a slot frees when `a` ends at 10 s; the last lease ends at 11 s.
            let refused = t.acquire(&key, two, secs(10), &opts(2).id(token("c"))).await.unwrap();
            let want = Refused { limit: 2, remaining: 0, retry_after: secs(8), reset_after: secs(9) };
            assert_eq!(refused.refused(), Some(&want), "{ctx}");
            assert!(!refused.is_admitted());

            // `a` acquiring again renews its own lease: no second slot.
            let again = admitted(t.acquire(&key, two, secs(10), &opts(3).id(token("a"))).await.unwrap(), &ctx);
            assert_eq!((again.token(), again.remaining(), again.reset_after()), (&token("a"), 0, secs(10)), "{ctx}");
            let info = t.info_at(&key, Some(at(3))).await.unwrap().expect("the key");
            assert_eq!(info.get("holders"), Some(2), "{ctx}");

            // Token-safe: a token that holds no lease changes nothing.
            let before = t.info_at(&key, Some(at(3))).await.unwrap();
            assert!(!t.release_at(&key, &token("c"), Some(at(3))).await.unwrap(), "{ctx}");
            assert!(!t.renew_at(&key, &token("c"), secs(5), Some(at(3))).await.unwrap(), "{ctx}");
            let upper = Token::new(b_token.to_uppercase()).unwrap();
            assert!(!t.release_at(&key, &upper, Some(at(3))).await.unwrap(), "{ctx}: tokens are bytes");
            assert!(!t.release_at("missing", &token("a"), Some(at(3))).await.unwrap(), "{ctx}");
            assert_eq!(t.info_at(&key, Some(at(3))).await.unwrap(), before, "{ctx}: nothing changed");
            assert_eq!(t.info("missing").await.unwrap(), None, "{ctx}: nothing created");

            assert!(t.release_at(&key, a.token(), Some(at(4))).await.unwrap(), "{ctx}");
            assert!(!t.release_at(&key, a.token(), Some(at(4))).await.unwrap(), "{ctx}: released once");
            assert!(t.renew_at(&key, b.token(), secs(30), Some(at(5))).await.unwrap(), "{ctx}");
            let info = t.info_at(&key, Some(at(5))).await.unwrap().expect("the key");
            assert_eq!(info.algorithm, "lease", "{ctx}");
            let fields = ["limit", "holders", "remaining", "reset_after"].map(|f| info.get(f));
            assert_eq!(fields, [Some(2), Some(1), Some(1), Some(30_000)], "{ctx}");
            assert_eq!(info.get("updated_at"), Some(at(5).duration_since(UNIX_EPOCH).unwrap().as_micros() as i64));
            let holder = Holder { token: b.token().clone(), ends_at: at(35), left: secs(30) };
            assert_eq!(info.leases, vec![holder], "{ctx}");
            // A rate limiter's key lists no leases.
            t.fixed(&format!("rate:{resp3}"), Quota::per_minute(common::n(3)), &Options::new()).await.unwrap();
            assert_eq!(t.info(&format!("rate:{resp3}")).await.unwrap().expect("rate key").leases, vec![]);

            // Lease::release sends no AT: a call earlier than the key's
            // last change counts at that change, when `b` still holds.
            assert!(b.release().await.unwrap(), "{ctx}");
            assert_eq!(t.info(&key).await.unwrap(), None, "{ctx}: the key went with its last lease");

            // `c` ends by itself at 15 s (a lease is held strictly before its
            // end): its release and renewal then say so, and INFO lists none.
            let c = admitted(t.acquire(&key, two, secs(10), &opts(5).id(token("c"))).await.unwrap(), &ctx);
            assert!(t.renew_at(&key, c.token(), secs(10), Some(at(5))).await.unwrap(), "{ctx}: held");
            assert!(!t.release_at(&key, c.token(), Some(at(15))).await.unwrap(), "{ctx}: ended");
            assert!(!t.renew_at(&key, c.token(), secs(10), Some(at(15))).await.unwrap(), "{ctx}: ended");
            let info = t.info_at(&key, Some(at(15))).await.unwrap().expect("the key, until its TTL");
            assert_eq!((info.get("holders"), info.leases), (Some(0), vec![]), "{ctx}");
            assert!(c.release().await.unwrap(), "{ctx}: held at the key's last change");
            let _ = (a, again);
        }
    }
}

/// What the module would refuse is refused before sending, naming the
/// argument (a server without the module shows that nothing was sent);
/// keys of another type are WRONGTYPE both ways.
#[tokio::test]
async fn arguments_are_checked_and_wrong_types_refused() {
    let too_long = "x".repeat(65);
    for (result, name) in [(Token::new(""), "token"), (Token::new(too_long.as_str()), "token")] {
        assert!(matches!(result, Err(Error::InvalidArgument { argument, .. }) if argument == name));
    }
    assert_eq!(Token::new("x".repeat(64)).map(|t| t.as_bytes().len()).ok(), Some(64));
    for binary in common::servers() {
        let bare = Server::without_module(&binary);
        let t = bare.throttle(false).await;
        let new = AcquireOptions::new;
        let cases: [(u32, Duration, AcquireOptions, &str); 7] = [
            (1, Duration::ZERO, new(), "lease"),
            (1, Duration::from_micros(1500), new(), "lease"),
            (1, secs(3651 * 86_400), new(), "lease"),
            (AcquireOptions::MAX_HOLDERS + 1, secs(1), new(), "limit"),
            (1, secs(1), new().block(AcquireOptions::MAX_BLOCK + Duration::from_millis(1)), "BLOCK"),
            (1, secs(1), new().at(UNIX_EPOCH - secs(1)), "AT"),
            (1, secs(3650 * 86_400 + 1), new().block(AcquireOptions::MAX_BLOCK), "lease"),
        ];
        for (limit, lease, opts, name) in cases {
            match t.acquire("k", slots(limit), lease, &opts).await {
                Err(Error::InvalidArgument { argument, .. }) => assert_eq!(argument, name, "{binary}"),
                other => panic!("{binary}: {limit} {lease:?} {opts:?} gave {other:?}"),
            }
        }
        let e = t.renew("k", &token("a"), Duration::ZERO).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { argument: "lease", .. }), "{binary}: {e:?}");
        let e = t.release_at("k", &token("a"), Some(UNIX_EPOCH - secs(1))).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { argument: "AT", .. }), "{binary}: {e:?}");
        let e = t.with_lease("k", slots(1), Duration::ZERO, &new(), async |_: &Lease<_>| ()).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { argument: "lease", .. }), "{binary}: {e:?}");
        // The largest of each is sent (and refused only for the missing module).
        let e = t.acquire("k", slots(100_000), secs(3650 * 86_400), &new().block(AcquireOptions::MAX_BLOCK)).await;
        assert!(matches!(e, Err(Error::ModuleMissing { .. })), "{binary}: {e:?}");
        drop(bare);

        let server = Server::start(&binary);
        let t = server.throttle(false).await;
        t.fixed("rate", Quota::per_second(common::n(1)), &Options::new()).await.unwrap();
        let lease = admitted(t.acquire("lease", slots(1), secs(60), &new()).await.unwrap(), &binary);
        let wrong = [
            t.acquire("rate", slots(1), secs(1), &new()).await.map(|_| ()),
            t.release("rate", &token("a")).await.map(|_| ()),
            t.renew("rate", &token("a"), secs(1)).await.map(|_| ()),
            t.fixed("lease", Quota::per_second(common::n(1)), &Options::new()).await.map(|_| ()),
        ];
        for result in wrong {
            let e = result.unwrap_err();
            assert!(e.to_string().starts_with("WRONGTYPE") && !e.is_unavailable(), "{binary}: {e}");
        }
        assert!(lease.release().await.unwrap(), "{binary}");
    }
}

/// BLOCK: waiters on their own connections are let in one by one, in
/// arrival order, each when the holder before it releases; a waiter
/// without ID gets a token made when its turn comes; a waiter whose time
/// runs out gets the refusal; the holder's own ID renews past the queue.
#[tokio::test]
async fn waiters_are_admitted_in_arrival_order() {
    for binary in common::servers() {
        let server = Server::start(&binary);
        for resp3 in [false, true] {
            let t = server.throttle(resp3).await;
            let mut probe = server.connection(false).await;
            let ctx = format!("{binary}, resp3 {resp3}");
            let key = format!("q:{resp3}");
            let one = slots(1);
            let lease = secs(60);
            let mut holder =
                admitted(t.acquire(&key, one, lease, &AcquireOptions::new().id(token("h"))).await.unwrap(), &ctx);

            // w0, w1 name their leases, the third does not.
            let mut waiters = Vec::new();
            for i in 0..3 {
                let w = Throttle::new(waiter_connection(&server, resp3).await);
                let mut opts = AcquireOptions::new().block(secs(60));
                if i < 2 {
                    opts = opts.id(token(&format!("w{i}")));
                }
                let key = key.clone();
                waiters.push(tokio::spawn(async move { w.acquire(&key, one, lease, &opts).await }));
                eventually(&format!("{ctx}: waiter {i} to wait"), async || waiting(&mut probe).await == i + 1).await;
            }
            // A short waiter behind them times out with the refusal.
            let short = Throttle::new(waiter_connection(&server, resp3).await);
            let refused =
                short.acquire(&key, one, lease, &AcquireOptions::new().block(Duration::from_millis(50))).await;
            let refused = refused.unwrap().refused().copied().expect("refused when its time ran out");
            assert!(refused.retry_after > Duration::ZERO && refused.retry_after <= lease, "{ctx}: {refused:?}");
            // The holder's own ID renews at once, ahead of the queue.
            let opts = AcquireOptions::new().id(token("h")).block(secs(60));
            let renewed = admitted(t.acquire(&key, one, lease, &opts).await.unwrap(), &ctx);
            assert_eq!(renewed.token(), &token("h"), "{ctx}");
            assert_eq!(waiting(&mut probe).await, 3, "{ctx}");

            let mut made = None;
            for (i, waiter) in waiters.into_iter().enumerate() {
                assert!(holder.release().await.unwrap(), "{ctx}: the holder before waiter {i}");
                let lease = admitted(waiter.await.unwrap().unwrap(), &ctx);
                let held = t.info(&key).await.unwrap().expect("the key").leases;
                assert_eq!(held.iter().map(|h| &h.token).collect::<Vec<_>>(), [lease.token()], "{ctx}: one holder");
                assert_eq!(waiting(&mut probe).await, 2 - i as i64, "{ctx}: the others still wait");
                if i < 2 {
                    assert_eq!(lease.token(), &token(&format!("w{i}")), "{ctx}: arrival order");
                } else {
                    made = Some(lease.token().clone());
                }
                holder = lease;
            }
            let made = made.expect("the third waiter's token");
            assert!(made.as_bytes().len() == 32 && made.as_bytes().iter().all(u8::is_ascii_hexdigit), "{ctx}: {made}");
            assert!(holder.release().await.unwrap(), "{ctx}");
            assert_eq!(t.info(&key).await.unwrap(), None, "{ctx}");
            let _ = renewed;
        }
    }
}

/// with_lease holds the slot while its work runs and gives it back when
/// the work returns (a value or an error), panics, or is dropped before it
/// is done; refused, the work does not run. A BLOCK with_lease waits its
/// turn like any waiter.
#[tokio::test]
async fn with_lease_always_gives_the_slot_back() {
    for binary in common::servers() {
        let server = Server::start(&binary);
        for resp3 in [false, true] {
            let t = server.throttle(resp3).await;
            let ctx = format!("{binary}, resp3 {resp3}");
            let key = format!("w:{resp3}");
            let one = slots(1);
            let opts = AcquireOptions::new().at(t0());
            let holders = async |t: &Throttle<MultiplexedConnection>| {
                let info = t.info(&key).await.unwrap();
                info.map(|i| i.leases.into_iter().map(|h| h.token).collect::<Vec<_>>()).unwrap_or_default()
            };

            // The work sees its lease held and can renew it; its value comes back.
            let got = t
                .with_lease(&key, one, secs(60), &opts, async |lease: &Lease<_>| {
                    let held = holders(&t).await;
                    let renewed = lease.renew(secs(120)).await.unwrap();
                    (held == [lease.token().clone()], renewed)
                })
                .await
                .unwrap();
            assert_eq!(got, Admission::Admitted((true, true)), "{ctx}");
            assert_eq!(holders(&t).await, Vec::<Token>::new(), "{ctx}: released after the work");

            // An error of the work is its value; the slot is free again.
            let got = t.with_lease(&key, one, secs(60), &opts, async |_: &Lease<_>| Err::<(), _>("failed")).await;
            assert_eq!(got.unwrap(), Admission::Admitted(Err("failed")), "{ctx}");
            assert_eq!(holders(&t).await, Vec::<Token>::new(), "{ctx}");

            // Refused: the work does not run.
            let other = admitted(t.acquire(&key, one, secs(60), &opts.clone().id(token("other"))).await.unwrap(), &ctx);
            let mut ran = false;
            let got = t.with_lease(&key, one, secs(60), &opts, async |_: &Lease<_>| ran = true).await.unwrap();
            assert_eq!(got.refused().map(|r| r.retry_after), Some(secs(60)), "{ctx}");
            assert!(!ran, "{ctx}");
            assert!(other.release().await.unwrap(), "{ctx}");

            // A panic in the work: the guard sends the release.
            let (t2, key2, opts2) = (t.clone(), key.clone(), opts.clone());
            let task = tokio::spawn(async move {
                t2.with_lease(&key2, one, secs(60), &opts2, async |_: &Lease<_>| -> () { panic!("the work failed") })
                    .await
            });
            assert!(task.await.unwrap_err().is_panic(), "{ctx}");
            eventually(&format!("{ctx}: the release after a panic"), async || holders(&t).await.is_empty()).await;

            // Dropped while its work waits: the guard sends the release.
            let (entered, mut inside) = tokio::sync::mpsc::channel::<Token>(1);
            let work = t.with_lease(&key, one, secs(60), &opts, async move |lease: &Lease<_>| {
                entered.send(lease.token().clone()).await.unwrap();
                std::future::pending::<()>().await
            });
            let held = tokio::select! {
                _ = work => panic!("{ctx}: pending work finished"),
                held = inside.recv() => held.expect("the work's token"),
            };
            assert_eq!(holders(&t).await, vec![held], "{ctx}: held until the drop");
            eventually(&format!("{ctx}: the release after a drop"), async || holders(&t).await.is_empty()).await;

            // BLOCK: with_lease waits for the slot and runs when it frees.
            let mut probe = server.connection(false).await;
            let blocking = format!("wb:{resp3}");
            let holder = admitted(t.acquire(&blocking, one, secs(60), &AcquireOptions::new()).await.unwrap(), &ctx);
            let w = Throttle::new(waiter_connection(&server, resp3).await);
            let block_key = blocking.clone();
            let task = tokio::spawn(async move {
                let opts = AcquireOptions::new().block(secs(60));
                w.with_lease(&block_key, one, secs(60), &opts, async |lease: &Lease<_>| lease.token().clone()).await
            });
            eventually(&format!("{ctx}: with_lease to wait"), async || waiting(&mut probe).await == 1).await;
            assert!(holder.release().await.unwrap(), "{ctx}");
            let ran_with = task.await.unwrap().unwrap().admitted().expect("admitted once the slot freed");
            assert_eq!(ran_with.as_bytes().len(), 32, "{ctx}");
            assert_eq!(t.info(&blocking).await.unwrap(), None, "{ctx}: and released");
        }
    }
}
