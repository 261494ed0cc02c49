//! Real servers for the client's tests: `redis-server` (or Valkey) with the
//! freshly built module on a free loopback port, stopped by its child
//! handle when the guard drops; and axum apps served on loopback.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis_throttle_client::Throttle;

/// A time far from the server's clock, so keys set at it (whose TTLs run
/// on that clock) outlive the test; tests move from it with `AT`.
pub fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(4_000_000_000)
}

pub fn n(v: u64) -> std::num::NonZeroU64 {
    std::num::NonZeroU64::new(v).expect("not zero")
}

/// The server binaries to run every test on: `THROTTLE_REDIS_SERVER` (one),
/// else `THROTTLE_SERVERS` (space-separated, as the Makefile exports it),
/// else `redis-server` on PATH.
pub fn servers() -> Vec<String> {
    if let Ok(one) = std::env::var("THROTTLE_REDIS_SERVER") {
        return vec![one];
    }
    let listed = std::env::var("THROTTLE_SERVERS").unwrap_or_default();
    let listed: Vec<String> = listed.split_whitespace().map(str::to_owned).collect();
    if listed.is_empty() {
        vec!["redis-server".into()]
    } else {
        listed
    }
}

/// The module under test: `THROTTLE_MODULE`, or the workspace's release
/// build (`cargo build --release` at the top).
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("THROTTLE_MODULE") {
        return PathBuf::from(path);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = target.join("release/libredis_throttle.so");
    assert!(path.exists(), "{} is missing: run `cargo build --release` at the top (make test does)", path.display());
    path
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A running server, stopped (SHUTDOWN NOSAVE, then by its child handle)
/// when dropped.
pub struct Server {
    pub port: u16,
    pub binary: String,
    dir: PathBuf,
    child: Option<Child>,
}

impl Server {
    /// `binary` with the module loaded.
    pub fn start(binary: &str) -> Server {
        Server::launch(binary, free_port(), true, &[])
    }

    /// `binary` without the module.
    pub fn without_module(binary: &str) -> Server {
        Server::launch(binary, free_port(), false, &[])
    }

    /// `binary` with the module and more arguments, on `port`.
    pub fn start_on(binary: &str, port: u16, extra: &[&str]) -> Server {
        Server::launch(binary, port, true, extra)
    }

    fn launch(binary: &str, port: u16, module: bool, extra: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!("throttle-client-test-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let mut command = Command::new(binary);
        command.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
        command.arg("--dir").arg(&dir).args(["--logfile", "server.log"]);
        if module {
            command.arg("--loadmodule").arg(module_path());
        }
        command.args(extra);
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {binary}: {e}"));
        let mut server = Server { port, binary: binary.into(), dir, child: Some(child) };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ping = redis::Client::open(self.url())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if ping.is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("{} exited with {status}; log:\n{}", self.binary, self.log());
            }
            assert!(Instant::now() < deadline, "{} did not answer; log:\n{}", self.binary, self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// A multiplexed connection, RESP3 when `resp3`.
    pub async fn connection(&self, resp3: bool) -> MultiplexedConnection {
        let url = if resp3 { format!("{}?protocol=resp3", self.url()) } else { self.url() };
        let client = redis::Client::open(url).expect("a client");
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
        client.get_multiplexed_async_connection_with_config(&config).await.expect("connect")
    }

    pub async fn throttle(&self, resp3: bool) -> Throttle<MultiplexedConnection> {
        Throttle::new(self.connection(resp3).await)
    }

    /// Stops the server now, waiting for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(mut c) = redis::Client::open(self.url()).and_then(|c| c.get_connection()) {
                let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut c);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Serves `app` on a free loopback port (with the peer's address in
/// `ConnectInfo`) until the returned handle is dropped or aborted.
pub async fn serve(app: axum::Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let task = tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.expect("serve");
    });
    (addr, task)
}
