//! THROTTLE in Redis Cluster: a cluster client routes the commands by their
//! key, each key lives on the node that owns its slot, and a replica that
//! takes over by CLUSTER FAILOVER serves the same states.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::time::Duration;

use common::{call, free_cluster_port, info_field, now_us, wait_until, Reply, Server};
use redis::cluster::{ClusterClient, ClusterConnection};

const KEYS: usize = 200;

fn start_node(port: u16) -> Server {
    Server::start_prepared(
        port,
        |_| {},
        &[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
            "--repl-diskless-sync-delay",
            "0",
        ],
    )
}

fn role(c: &mut redis::Connection) -> String {
    info_field(c, "replication", "role").unwrap_or_default()
}

fn cluster_ok(node: &Server) -> bool {
    let Ok(mut c) = redis::Client::open(node.url()).and_then(|c| c.get_connection()) else {
        return false;
    };
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap_or_default();
    if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
        return false;
    }
    // Every node sees the same shape: three masters, three replicas, each
    // replica attached to a master, nobody failing or handshaking.
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap_or_default();
    let lines: Vec<Vec<&str>> = nodes.lines().map(|l| l.split(' ').collect()).collect();
    let flags = |line: &Vec<&str>, flag: &str| line.get(2).is_some_and(|f| f.split(',').any(|x| x == flag));
    let masters = lines.iter().filter(|l| flags(l, "master")).count();
    let replicas = lines.iter().filter(|l| flags(l, "slave") && l.get(3).is_some_and(|m| *m != "-")).count();
    let troubled = lines.iter().any(|l| ["fail", "fail?", "handshake", "noaddr"].iter().any(|f| flags(l, f)));
    lines.len() == 6 && masters == 3 && replicas == 3 && !troubled
}

/// The slot ranges each master serves: (first, last, port).
fn slot_owners(c: &mut redis::Connection) -> Vec<(i64, i64, u16)> {
    let slots: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(c).expect("CLUSTER SLOTS");
    slots
        .into_iter()
        .map(|range| {
            // [first, last, [ip, port, id, metadata], replicas...]
            let parts: Vec<redis::Value> = redis::from_redis_value(range).expect("a slot range");
            let number = |v: &redis::Value| redis::from_redis_value::<i64>(v.clone()).expect("a number");
            let node: Vec<redis::Value> = redis::from_redis_value(parts[2].clone()).expect("a node");
            (number(&parts[0]), number(&parts[1]), number(&node[1]) as u16)
        })
        .collect()
}

fn owner(owners: &[(i64, i64, u16)], slot: i64) -> u16 {
    owners.iter().find(|(a, b, _)| (*a..=*b).contains(&slot)).map(|o| o.2).expect("every slot is served")
}

/// A key, its command without COST and AT, and the options after them.
struct Limit {
    key: String,
    head: String,
    tail: &'static str,
}

fn limits() -> Vec<Limit> {
    (0..KEYS)
        .map(|i| {
            let key = format!("ck:{i}");
            let (head, tail) = match i % 5 {
                0 => (format!("THROTTLE.FIXED {key} 10 1h"), ""),
                1 => (format!("THROTTLE.SLIDING {key} 10 1h"), ""),
                2 => (format!("THROTTLE.SLIDING {key} 10 1h"), " EXACT"),
                3 => (format!("THROTTLE.TOKEN {key} 10 1h"), " BURST 20"),
                _ => (format!("THROTTLE.LEAKY {key} 10 1h"), " BURST 20"),
            };
            Limit { key, head, tail }
        })
        .collect()
}

fn throttle_cluster(c: &mut ClusterConnection, line: &str) -> Reply {
    let mut parts = line.split(' ');
    let mut cmd = redis::cmd(parts.next().unwrap_or_default());
    for arg in parts {
        cmd.arg(arg);
    }
    let v: Vec<i64> = cmd.query(c).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(v.len(), 5, "{line}: {v:?}");
    (v[0], v[1], v[2], v[3], v[4])
}

fn peeks(c: &mut ClusterConnection, limits: &[Limit], at: u64) -> Vec<Reply> {
    limits.iter().map(|l| throttle_cluster(c, &format!("{} COST 0 AT {at}{}", l.head, l.tail))).collect()
}

#[test]
fn cluster_routes_keys_and_survives_a_failover() {
    let mut ports = BTreeSet::new();
    while ports.len() < 6 {
        ports.insert(free_cluster_port());
    }
    let nodes: Vec<Server> = ports.iter().map(|&p| start_node(p)).collect();
    let by_port: HashMap<u16, &Server> = nodes.iter().map(|n| (n.port, n)).collect();

    let mut create = Command::new("redis-cli");
    create.arg("--cluster").arg("create");
    for node in &nodes {
        create.arg(format!("127.0.0.1:{}", node.port));
    }
    let out = create.args(["--cluster-replicas", "1", "--cluster-yes"]).output().expect("redis-cli on PATH");
    assert!(
        out.status.success(),
        "redis-cli --cluster create: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for node in &nodes {
        wait_until("cluster_state:ok and 3 masters + 3 replicas", Duration::from_secs(30), || cluster_ok(node));
    }

    // Commands through a cluster client, routed by their key.
    let urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();
    let client = ClusterClient::new(urls.clone()).expect("cluster client");
    let mut cc = client.get_connection().expect("cluster connection");
    let limits = limits();
    let t0 = now_us();
    for (i, l) in limits.iter().enumerate() {
        for (cost, dt) in [(1 + i as u64 % 4, 0), (3, 1_000), (50, 2_000), (2, 3_000)] {
            throttle_cluster(&mut cc, &format!("{} COST {cost} AT {}{}", l.head, t0 + dt, l.tail));
        }
    }
    let peek_at = t0 + 10_000;
    let before = peeks(&mut cc, &limits, peek_at);
    assert!(before.iter().all(|r| r.0 == 1 && r.4 > 0), "every key holds units");

    // Each key is on the master that owns its slot, and only there.
    let mut any = nodes[0].conn();
    let owners = slot_owners(&mut any);
    let masters: BTreeSet<u16> = owners.iter().map(|o| o.2).collect();
    assert_eq!(masters.len(), 3, "three masters: {owners:?}");
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    let mut master_conns: HashMap<u16, redis::Connection> = masters.iter().map(|p| (*p, by_port[p].conn())).collect();
    for l in &limits {
        let slot: i64 = call(&mut any, &format!("CLUSTER KEYSLOT {}", l.key)).expect("CLUSTER KEYSLOT");
        let port = owner(&owners, slot);
        *per_master.entry(port).or_default() += 1;
        for (p, c) in master_conns.iter_mut() {
            let exists: redis::RedisResult<i64> = call(c, &format!("EXISTS {}", l.key));
            if *p == port {
                assert_eq!(exists.expect("EXISTS on the owner"), 1, "{} on its owner {port}", l.key);
            } else {
                let e = exists.expect_err("another master redirects");
                assert!(e.to_string().to_uppercase().contains("MOVED"), "{}: {e}", l.key);
            }
        }
    }
    for (&port, c) in master_conns.iter_mut() {
        let size: i64 = call(c, "DBSIZE").expect("DBSIZE");
        assert!(size > 0, "master {port} holds keys");
        assert_eq!(size as usize, per_master.get(&port).copied().unwrap_or(0), "master {port}: DBSIZE");
    }

    // Key specs name the key, so cluster clients and proxies find it.
    for line in [
        "THROTTLE.FIXED k 1 1",
        "THROTTLE.SLIDING k 1 1 EXACT",
        "THROTTLE.TOKEN k 1 1 BURST 2 COST 0",
        "THROTTLE.LEAKY k 1 1 AT 5",
        "THROTTLE._LOAD k thr-fixed 1 1 1 1 1 1000",
    ] {
        let keys: Vec<String> = call(&mut any, &format!("COMMAND GETKEYS {line}")).expect("COMMAND GETKEYS");
        assert_eq!(keys, vec!["k".to_string()], "{line}");
    }

    // A replica takes over its master's slots, coordinated, and serves the
    // same states.
    let replica = nodes.iter().find(|n| role(&mut n.conn()) == "slave").expect("a replica");
    let mut rc = replica.conn();
    let old_master: u16 =
        info_field(&mut rc, "replication", "master_port").and_then(|p| p.parse().ok()).expect("master_port");
    wait_until("the replica's link", Duration::from_secs(20), || {
        info_field(&mut rc, "replication", "master_link_status").as_deref() == Some("up")
    });
    let ok: String = call(&mut rc, "CLUSTER FAILOVER").expect("CLUSTER FAILOVER");
    assert_eq!(ok, "OK");
    let promoted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until("the replica to become master", Duration::from_secs(30), || role(&mut rc) == "master")
    }));
    if promoted.is_err() {
        panic!("no failover; replica log:\n{}\nmaster log:\n{}", replica.log(), by_port[&old_master].log());
    }
    wait_until("the old master to follow", Duration::from_secs(30), || {
        role(&mut by_port[&old_master].conn()) == "slave"
    });
    for node in &nodes {
        wait_until("cluster_state:ok after the failover", Duration::from_secs(30), || cluster_ok(node));
    }
    wait_until("the new master to own the slots", Duration::from_secs(30), || {
        slot_owners(&mut rc).iter().any(|o| o.2 == replica.port)
    });
    let moved = per_master.get(&old_master).copied().unwrap_or(0);
    let size: i64 = call(&mut rc, "DBSIZE").expect("DBSIZE");
    assert_eq!(size as usize, moved, "the new master holds its old master's keys");

    let client = ClusterClient::new(urls).expect("cluster client");
    let mut cc = client.get_connection().expect("cluster connection");
    let after = peeks(&mut cc, &limits, peek_at);
    for ((l, b), a) in limits.iter().zip(&before).zip(&after) {
        assert_eq!(a, b, "{} after the failover", l.key);
    }
    // The promoted node takes writes for its keys.
    let owners = slot_owners(&mut rc);
    let mine = limits
        .iter()
        .find(|l| {
            let slot: i64 = call(&mut rc, &format!("CLUSTER KEYSLOT {}", l.key)).expect("CLUSTER KEYSLOT");
            owner(&owners, slot) == replica.port
        })
        .expect("a key on the promoted node");
    let reply = throttle_cluster(&mut cc, &format!("{} COST 1 AT {peek_at}{}", mine.head, mine.tail));
    assert_eq!(reply.0, 1, "{}: {reply:?}", mine.key);
}
