mod common;

use common::{error, throttle, Server};

#[test]
fn module_loads_and_answers() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED k 2 1s AT 1000000"), (1, 2, 1, 0, 1000));
    assert!(error(&mut c, "THROTTLE.FIXED k 0 1s").contains("limit"));
}

/// `redis-server redis.conf.example`, started from the repository root
/// after `make build`, loads the module by itself.
#[test]
fn the_example_configuration_loads_the_module() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if common::module_path() != root.join("target/release/libredis_throttle.so") {
        // The example names the default build directory only.
        return;
    }
    let port = common::free_port();
    let binary = std::env::var("THROTTLE_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let mut child = std::process::Command::new(binary)
        .current_dir(root)
        .args(["redis.conf.example", "--port", &port.to_string(), "--logfile", ""])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server");
    let url = format!("redis://127.0.0.1:{port}/");
    let mut connection = None;
    common::wait_until("the example server", std::time::Duration::from_secs(20), || {
        connection = redis::Client::open(url.as_str()).and_then(|c| c.get_connection()).ok();
        connection.is_some() || child.try_wait().ok().flatten().is_some()
    });
    let result = connection.map(|mut c| throttle(&mut c, "THROTTLE.FIXED k 2 1s AT 1000000"));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(result, Some((1, 2, 1, 0, 1000)));
}
