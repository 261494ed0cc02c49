//! A real `redis-server` with the freshly built module, on a free loopback
//! port, stopped when the guard drops.

#![allow(dead_code)]

pub mod dump;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The module under test: `THROTTLE_MODULE` or the release build.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("THROTTLE_MODULE") {
        return PathBuf::from(path);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let path = target.join("release/libredis_throttle.so");
    assert!(path.exists(), "{} is missing: run `cargo build --release` (make test does)", path.display());
    path
}

/// The debug build of the module (it has the test commands
/// `THROTTLE._PANIC` and `THROTTLE._CLOCK`), built now if needed (a no-op
/// when it is up to date), or `THROTTLE_DEBUG_MODULE`.
pub fn debug_module() -> PathBuf {
    if let Ok(path) = std::env::var("THROTTLE_DEBUG_MODULE") {
        return PathBuf::from(path);
    }
    let manifest = env!("CARGO_MANIFEST_DIR");
    let target =
        std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(manifest).join("target"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--lib", "--manifest-path"])
        .arg(PathBuf::from(manifest).join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("run cargo build for the debug module");
    assert!(status.success(), "cargo build (debug module) failed: {status}");
    let path = target.join("debug/libredis_throttle.so");
    assert!(path.exists(), "{} missing after cargo build", path.display());
    path
}

/// `THROTTLE_SERVER_WRAPPER`: a command line that runs the server, e.g.
/// `valgrind --leak-check=full --log-file=/tmp/vg-%p.log` (split on
/// whitespace); `THROTTLE_REDIS_SERVER`: the server binary (default
/// `redis-server` on PATH), e.g. one built with libc malloc for valgrind.
fn server_command() -> Command {
    let binary = std::env::var("THROTTLE_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let wrapper = std::env::var("THROTTLE_SERVER_WRAPPER").unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(words).arg(binary);
            command
        }
        None => Command::new(binary),
    }
}

/// How much slower than usual the server runs: 30 under a wrapper
/// (valgrind), else 1. Readiness, shutdown and [`wait_until`] time-outs
/// are multiplied by it.
pub fn slowdown() -> u32 {
    if std::env::var("THROTTLE_SERVER_WRAPPER").is_ok_and(|w| !w.trim().is_empty()) {
        30
    } else {
        1
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

pub struct Server {
    pub port: u16,
    pub dir: tempdir::Dir,
    child: Option<Child>,
    extra: Vec<String>,
    module: PathBuf,
    /// The test makes the server (or a fork of it) crash on purpose.
    crash_expected: bool,
}

impl Server {
    /// A server with no persistence, the DEBUG command enabled, the module
    /// loaded.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Like [`Server::start`], with more `redis-server` arguments (`--name value` pairs).
    pub fn start_with(extra: &[&str]) -> Server {
        Server::start_prepared(free_port(), |_| {}, extra)
    }

    /// Like [`Server::start_with`], on a given port, after `prepare` has
    /// filled the server's (empty) directory: for fixtures and for cluster
    /// nodes, whose bus port is `port + 10000`.
    pub fn start_prepared(port: u16, prepare: impl FnOnce(&Path), extra: &[&str]) -> Server {
        Server::start_full(port, prepare, extra, module_path())
    }

    /// Like [`Server::start_with`], loading `module` instead of the module
    /// under test (e.g. the debug build).
    pub fn start_with_module(module: &Path, extra: &[&str]) -> Server {
        Server::start_full(free_port(), |_| {}, extra, module.to_path_buf())
    }

    fn start_full(port: u16, prepare: impl FnOnce(&Path), extra: &[&str], module: PathBuf) -> Server {
        let dir = tempdir::Dir::new();
        prepare(dir.path());
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut server = Server { port: 0, dir, child: None, extra, module, crash_expected: false };
        server.launch(port);
        server
    }

    fn launch(&mut self, port: u16) {
        let mut args: Vec<String> = vec![
            "--port".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            "--enable-debug-command".into(),
            "local".into(),
            "--dir".into(),
            self.dir.path().display().to_string(),
            "--logfile".into(),
            "redis.log".into(),
            "--loadmodule".into(),
            self.module.display().to_string(),
        ];
        // Later arguments win, so callers can override the defaults.
        args.extend(self.extra.iter().cloned());
        let child = server_command()
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (make test installs it)");
        self.port = port;
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20) * slowdown();
        loop {
            if let Ok(mut c) = redis::Client::open(self.url()).and_then(|c| c.get_connection()) {
                let loading: redis::RedisResult<String> = redis::cmd("PING").query(&mut c);
                if loading.is_ok() {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("redis-server exited with {status}; log:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "redis-server did not answer; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url()).and_then(|c| c.get_connection()).expect("connect")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// Stops the server (SHUTDOWN with `how`, e.g. "NOSAVE" or "SAVE") and
    /// waits for it to exit.
    pub fn stop(&mut self, how: &str) {
        if let Some(mut child) = self.child.take() {
            if let Ok(mut c) = redis::Client::open(self.url()).and_then(|c| c.get_connection()) {
                let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg(how).query(&mut c);
            }
            // Under valgrind the exit includes the leak check: give it time
            // rather than kill it before it reports.
            let deadline = Instant::now() + Duration::from_secs(20) * slowdown();
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.check_log();
    }

    /// Lets the test crash the server, or a child it forks, on purpose.
    pub fn expect_crash(&mut self) {
        self.crash_expected = true;
    }

    /// No test may leave a crash report in a server's log, unless it said
    /// it would.
    fn check_log(&self) {
        if self.crash_expected || std::thread::panicking() {
            return;
        }
        let log = self.log();
        let markers = ["BUG REPORT START", "crashed by signal", "ASSERTION FAILED", "Guru Meditation"];
        if let Some(marker) = markers.iter().find(|m| log.contains(*m)) {
            panic!("the server on port {} crashed ({marker}); log:\n{log}", self.port);
        }
    }

    /// Stops and starts again on the same port and directory, with the same
    /// arguments: for persistence tests.
    pub fn restart(&mut self, how: &str) {
        self.stop(how);
        let port = self.port;
        self.launch(port);
    }

    /// True while the server process is running.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop("NOSAVE");
    }
}

/// A free port whose cluster bus port (`port + 10000`) is free too.
pub fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port <= 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// The wall clock in Unix microseconds, for `AT` values near real time.
pub fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_micros() as u64
}

/// Polls `condition` until it holds, failing after `timeout` with `what`.
pub fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let timeout = timeout * slowdown();
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One `field:value` line of `INFO section`.
pub fn info_field(c: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(c).ok()?;
    let prefix = format!("{field}:");
    info.lines().find_map(|l| l.strip_prefix(&prefix)).map(|v| v.trim().to_string())
}

/// One command's line of `INFO commandstats` (`cmdstat_<name>`, the name as
/// the server spells it, e.g. `THROTTLE.ALL`, `command|getkeys`): its
/// calls and the server's time in them, in µs, since the last
/// `CONFIG RESETSTAT`. (0, 0) for a command not called yet.
pub fn command_stats(c: &mut redis::Connection, name: &str) -> (u64, u64) {
    let Some(line) = info_field(c, "commandstats", &format!("cmdstat_{name}")) else { return (0, 0) };
    let field = |key: &str| -> u64 {
        let value = line.split(',').find_map(|f| f.strip_prefix(key)).unwrap_or_else(|| panic!("no {key} in {line}"));
        value.parse().unwrap_or_else(|_| panic!("{key}{value} in {line}"))
    };
    (field("calls="), field("usec="))
}

/// The CPU time the server's main thread has used, in µs (`INFO cpu`,
/// user and system): unlike the wall time a command takes, it does not
/// grow while the machine runs other processes.
pub fn main_thread_cpu_us(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(c).expect("INFO cpu");
    let seconds = |field: &str| -> f64 {
        let prefix = format!("{field}:");
        let value =
            info.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {field} in {info}"));
        value.trim().parse().unwrap_or_else(|_| panic!("{field}:{value}"))
    };
    let total = seconds("used_cpu_user_main_thread") + seconds("used_cpu_sys_main_thread");
    (total * 1e6).round() as u64
}

/// Waits until no AOF rewrite runs or is scheduled.
pub fn wait_aof_rewrite_done(c: &mut redis::Connection) {
    wait_until("the AOF rewrite to finish", Duration::from_secs(20), || {
        info_field(c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(c, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
}

/// `DEBUG DIGEST-VALUE key`: the value's digest as hex.
pub fn digest(c: &mut redis::Connection, key: &str) -> String {
    let v: Vec<String> =
        redis::cmd("DEBUG").arg("DIGEST-VALUE").arg(key).query(c).unwrap_or_else(|e| panic!("digest {key}: {e}"));
    assert_eq!(v.len(), 1, "digest {key}: {v:?}");
    v.into_iter().next().unwrap_or_default()
}

/// Checks that the replica holds every key of the master (equal DBSIZE)
/// with the same value (DEBUG DIGEST-VALUE), expiring at the same instant
/// (PEXPIRETIME: the master sets the instant and sends it, so a replica's
/// keys expire when the master's do, however late it applied them).
/// Returns each key's name and that instant (-1 for none). Call after
/// `WAIT`.
pub fn same_values_on_replica(m: &mut redis::Connection, r: &mut redis::Connection) -> Vec<(String, i64)> {
    let names: Vec<String> = call(m, "KEYS *").expect("KEYS");
    let master_size: i64 = call(m, "DBSIZE").expect("DBSIZE");
    let replica_size: i64 = call(r, "DBSIZE").expect("DBSIZE");
    assert_eq!(master_size, replica_size, "DBSIZE on master and replica");
    names
        .into_iter()
        .map(|name| {
            assert_eq!(digest(m, &name), digest(r, &name), "value of {name}");
            let on_master: i64 = call(m, &format!("PEXPIRETIME {name}")).expect("PEXPIRETIME");
            let on_replica: i64 = call(r, &format!("PEXPIRETIME {name}")).expect("PEXPIRETIME");
            assert_eq!(on_master, on_replica, "the instant {name} expires at, on the master and on the replica");
            (name, on_master)
        })
        .collect()
}

/// The five-integer reply.
pub type Reply = (i64, i64, i64, i64, i64);

/// Runs a raw command given as one space-separated line.
pub fn call<T: redis::FromRedisValue>(c: &mut redis::Connection, line: &str) -> redis::RedisResult<T> {
    let mut cmd = redis::cmd(line.split(' ').next().unwrap_or_default());
    for arg in line.split(' ').skip(1) {
        cmd.arg(arg);
    }
    cmd.query(c)
}

pub fn throttle(c: &mut redis::Connection, line: &str) -> Reply {
    let v: Vec<i64> = call(c, line).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(v.len(), 5, "{line}: {v:?}");
    (v[0], v[1], v[2], v[3], v[4])
}

/// The error text of a call that must fail.
pub fn error(c: &mut redis::Connection, line: &str) -> String {
    match call::<redis::Value>(c, line) {
        Ok(v) => panic!("{line}: expected an error, got {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or("")).trim().to_string(),
    }
}

pub mod tempdir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A directory removed on drop.
    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let path = std::env::temp_dir().join(format!(
                "throttle-test-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&path).expect("temp dir");
            Dir(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// SplitMix64: a small seeded generator for workloads and random inputs,
/// so the tests need no extra crate and every run is reproducible.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform enough in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// No reply a test waits for should take this long.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection whose reads give up after [`READ_TIMEOUT`].
pub fn open(url: &str) -> redis::Connection {
    let c = redis::Client::open(url).and_then(|c| c.get_connection()).unwrap_or_else(|e| panic!("connect {url}: {e}"));
    c.set_read_timeout(Some(READ_TIMEOUT * slowdown())).expect("read timeout");
    c
}

/// A command given as one space-separated line.
pub fn command(line: &str) -> redis::Cmd {
    let mut words = line.split(' ');
    let mut cmd = redis::cmd(words.next().unwrap_or_default());
    for word in words {
        cmd.arg(word);
    }
    cmd
}

pub fn info_number(c: &mut redis::Connection, section: &str, field: &str) -> i64 {
    let value = info_field(c, section, field).unwrap_or_else(|| panic!("no {field} in INFO {section}"));
    value.parse().unwrap_or_else(|_| panic!("{field}:{value} is not a number"))
}

/// Clients waiting in the module (`INFO throttle`).
pub fn waiting(c: &mut redis::Connection) -> i64 {
    info_number(c, "throttle", "throttle_waiting_clients")
}

/// Clients Redis counts as blocked (`INFO clients`).
pub fn blocked_clients(c: &mut redis::Connection) -> i64 {
    info_number(c, "clients", "blocked_clients")
}

/// The RESP form of a command given as one space-separated line.
pub fn resp(line: &str) -> Vec<u8> {
    let words: Vec<&str> = line.split(' ').collect();
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    out
}

/// A raw connection that sent `line` and will never read the reply.
pub fn send_raw(port: u16, line: &str) -> std::net::TcpStream {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.write_all(&resp(line)).expect("send");
    s
}

/// A call on its own connection in its own thread: its result, and when
/// the reply came.
pub struct Waiter {
    line: String,
    handle: std::thread::JoinHandle<(redis::RedisResult<Vec<i64>>, Instant)>,
}

impl Waiter {
    pub fn start(url: &str, line: &str) -> Waiter {
        let (url, owned) = (url.to_string(), line.to_string());
        let handle = std::thread::spawn(move || {
            let mut c = open(&url);
            let result = call::<Vec<i64>>(&mut c, &owned);
            (result, Instant::now())
        });
        Waiter { line: line.to_string(), handle }
    }

    /// Starts the call and returns once the server has it waiting, `n`
    /// waiters in all: callers started one after another arrive in order.
    pub fn queued(url: &str, c: &mut redis::Connection, line: &str, n: i64) -> Waiter {
        let waiter = Waiter::start(url, line);
        wait_until(&format!("`{line}` to wait ({n} waiting)"), Duration::from_secs(5), || {
            waiting(c) == n && blocked_clients(c) == n
        });
        waiter
    }

    pub fn result(self) -> (redis::RedisResult<Vec<i64>>, Instant) {
        self.handle.join().expect("waiter thread")
    }

    pub fn reply(self) -> (Reply, Instant) {
        let line = self.line.clone();
        let (result, at) = self.result();
        let v = result.unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(v.len(), 5, "{line}: {v:?}");
        ((v[0], v[1], v[2], v[3], v[4]), at)
    }

    /// The error the call was answered with.
    pub fn error(self) -> redis::RedisError {
        let line = self.line.clone();
        match self.result().0 {
            Ok(v) => panic!("{line}: expected an error, got {v:?}"),
            Err(e) => e,
        }
    }
}

/// A master and a replica that has synced with it (more `redis-server`
/// arguments for the master in `extra`).
pub fn master_and_replica_with(extra: &[&str]) -> (Server, Server) {
    // No 5 s wait for more replicas before the first full sync.
    let mut args = vec!["--repl-diskless-sync-delay", "0"];
    args.extend_from_slice(extra);
    let master = Server::start_with(&args);
    let port = master.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut r = open(&replica.url());
    wait_until("the replica to sync", Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    (master, replica)
}

pub fn master_and_replica() -> (Server, Server) {
    master_and_replica_with(&[])
}

/// `FAILOVER` from the master `c` talks to (once the replica has every
/// change), then waits until `replica` has taken over; returns a
/// connection to it.
pub fn fail_over(c: &mut redis::Connection, replica: &Server) -> redis::Connection {
    sync(c);
    let _: () = call(c, "FAILOVER").expect("FAILOVER");
    let mut r = open(&replica.url());
    wait_until("the replica to take over", Duration::from_secs(20), || {
        info_field(&mut r, "replication", "role").as_deref() == Some("master")
    });
    r
}

/// Waits until the replica has everything the master sent, whichever
/// connection wrote it. `WAIT` waits only for its own client's last
/// propagated write, so this connection first propagates one of its own
/// that touches no key (`PUBLISH` reaches replicas too).
pub fn sync(master: &mut redis::Connection) {
    let _: i64 = call(master, "PUBLISH throttle-test-sync 1").expect("PUBLISH");
    let acked: i64 = call(master, "WAIT 1 10000").expect("WAIT");
    assert_eq!(acked, 1, "the replica did not acknowledge");
}
