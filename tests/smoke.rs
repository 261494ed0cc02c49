mod common;

use common::{error, throttle, Server};

#[test]
fn module_loads_and_answers() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(throttle(&mut c, "THROTTLE.FIXED k 2 1s AT 1000000"), (1, 2, 1, 0, 1000));
    assert!(error(&mut c, "THROTTLE.FIXED k 0 1s").contains("limit"));
}
