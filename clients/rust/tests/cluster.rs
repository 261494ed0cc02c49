//! A real three-node Redis Cluster with the module, on every server of
//! `THROTTLE_SERVERS`: the client routes each command by its key (for
//! THROTTLE.ALL, whose keys follow its options, by the first spec's key),
//! every key lands on the node that owns its slot (lease keys too), and
//! the layer's keys of one request share a slot.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::process::Command;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use common::{free_port, n, serve, servers, t0, Server};
use redis::cluster_async::ClusterConnection;
use redis_throttle_client::layer::{Global, ManualClock, RateLimitConfig, RateLimitLayer};
use redis_throttle_client::{AcquireOptions, Admission, AllOptions, Limit, Options, Quota, Spec, Throttle};

/// A free port whose cluster bus port (`port + 10000`) is free too.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port <= 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

fn cluster_ok(node: &Server) -> bool {
    let Ok(mut c) = redis::Client::open(node.url()).and_then(|c| c.get_connection()) else { return false };
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap_or_default();
    info.lines().any(|l| l.trim() == "cluster_state:ok")
}

/// Three masters, no replicas, every slot served.
fn start_cluster(binary: &str) -> Vec<Server> {
    let mut ports = BTreeSet::new();
    while ports.len() < 3 {
        ports.insert(free_cluster_port());
    }
    let args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"];
    let nodes: Vec<Server> = ports.iter().map(|&p| Server::start_on(binary, p, &args)).collect();
    let mut create = Command::new("redis-cli");
    create.args(["--cluster", "create"]);
    for node in &nodes {
        create.arg(format!("127.0.0.1:{}", node.port));
    }
    let out = create.args(["--cluster-replicas", "0", "--cluster-yes"]).output().expect("redis-cli on PATH");
    assert!(out.status.success(), "{binary}: redis-cli --cluster create: {}", String::from_utf8_lossy(&out.stdout));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !nodes.iter().all(cluster_ok) {
        assert!(Instant::now() < deadline, "{binary}: no cluster_state:ok after 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    nodes
}

#[tokio::test]
async fn a_three_node_cluster_routes_every_command() {
    let http = reqwest::Client::new();
    for binary in servers() {
        let nodes = start_cluster(&binary);
        let urls: Vec<String> = nodes.iter().map(Server::url).collect();
        let client = redis::cluster::ClusterClientBuilder::new(urls).build().expect("a cluster client");
        let conn: ClusterConnection = client.get_async_connection().await.expect("a cluster connection");
        let t = Throttle::new(conn);

        // Keys all over the slots: each command reaches its key's owner.
        let quota = Quota::per_hour(n(10));
        for i in 0..60 {
            let d = t.fixed(&format!("ck:{i}"), quota, &Options::new().cost(3).at(t0())).await.unwrap();
            assert_eq!((d.allowed, d.remaining), (true, 7), "{binary}: ck:{i}");
        }
        let mut per_node: HashMap<u16, i64> = HashMap::new();
        for node in &nodes {
            let mut c = redis::Client::open(node.url()).unwrap().get_connection().unwrap();
            let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
            per_node.insert(node.port, size);
        }
        assert_eq!(per_node.values().sum::<i64>(), 60, "{binary}: {per_node:?}");
        assert!(per_node.values().all(|&s| s > 0), "{binary}: every master holds keys: {per_node:?}");

        // Leases: ACQUIRE, RENEW, INFO and RELEASE each go to the key's
        // owner; a lease's own release too.
        let two = NonZeroU32::new(2).unwrap();
        let mut leases = Vec::new();
        for i in 0..30 {
            let key = format!("lk:{i}");
            let a = t.acquire(&key, two, Duration::from_secs(60), &AcquireOptions::new().at(t0())).await.unwrap();
            let Admission::Admitted(lease) = a else { panic!("{binary}: {key} refused: {a:?}") };
            assert_eq!(lease.remaining(), 1, "{binary}: {key}");
            assert!(t.renew(&key, lease.token(), Duration::from_secs(90)).await.unwrap(), "{binary}: {key}");
            let info = t.info(&key).await.unwrap().expect("the lease key");
            assert_eq!(info.leases.len(), 1, "{binary}: {key}");
            leases.push(lease);
        }
        let mut owners = BTreeSet::new();
        for lease in &leases {
            let mut on = Vec::new();
            for node in &nodes {
                let mut c = redis::Client::open(node.url()).unwrap().get_connection().unwrap();
                // Another node answers MOVED.
                let exists: redis::RedisResult<i64> = redis::cmd("EXISTS").arg(lease.key()).query(&mut c);
                if exists.ok() == Some(1) {
                    on.push(node.port);
                }
            }
            assert_eq!(on.len(), 1, "{binary}: {} on {on:?}", lease.key());
            owners.extend(on);
        }
        assert_eq!(owners.len(), 3, "{binary}: lease keys on every master");
        for lease in leases {
            let key = lease.key().to_string();
            assert!(lease.release().await.unwrap(), "{binary}: {key}");
            assert_eq!(t.info(&key).await.unwrap(), None, "{binary}: {key}");
        }

        // THROTTLE.ALL goes to the slot of its hash tag, whatever comes first.
        for user in 0..20 {
            let specs = [
                Spec::new(format!("{{user:{user}}}:s"), Limit::fixed(Quota::per_second(n(2)))),
                Spec::new(format!("{{user:{user}}}:h"), Limit::token(Quota::per_hour(n(100)))),
            ];
            let opts = AllOptions::new().at(t0()).detail();
            let results = [t.all(&specs, &opts).await, t.all(&specs, &opts).await, t.all(&specs, &opts).await];
            let allowed: Vec<bool> = results.into_iter().map(|r| r.unwrap().allowed).collect();
            assert_eq!(allowed, [true, true, false], "{binary}: user {user}");
            let info = t.info_at(&specs[1].key, Some(t0())).await.unwrap().expect("the hourly key");
            assert_eq!(info.get("remaining"), Some(98), "{binary}");
        }
        let cross = [
            Spec::new("a", Limit::fixed(Quota::per_second(n(2)))),
            Spec::new("b", Limit::fixed(Quota::per_second(n(2)))),
        ];
        let e = t.all(&cross, &AllOptions::new()).await.unwrap_err();
        assert!(e.to_string().contains("CROSSSLOT"), "{binary}: {e}");

        // The layer on the cluster: two limits per request, one round trip.
        let clock = ManualClock::at(t0());
        let config = RateLimitConfig::builder(t.clone())
            .clock(clock.clone())
            .key_extractor(Global)
            .limit("second", Limit::fixed(Quota::per_second(n(2))))
            .limit("hour", Limit::fixed(Quota::per_hour(n(3))))
            .finish()
            .unwrap();
        let app = Router::new().route("/", get(|| async { "ok" })).layer(RateLimitLayer::new(config));
        let (addr, _task) = serve(app).await;
        let mut statuses = Vec::new();
        for step in 0..5 {
            if step == 3 {
                clock.advance(Duration::from_secs(1));
            }
            statuses.push(http.get(format!("http://{addr}/")).send().await.unwrap().status().as_u16());
        }
        assert_eq!(statuses, [200, 200, 429, 200, 429], "{binary}");
    }
}
