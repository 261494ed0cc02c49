//! At most two exports at once, however many workers run them: each export
//! holds a lease on a slot, gives it back when done, and loses it by itself
//! if its worker dies.
//!
//!     cargo run -p redis-throttle-client --example leases
//!
//! REDIS_URL (default redis://127.0.0.1:6379/) names a server with the
//! module loaded.

use std::num::NonZeroU32;
use std::time::Duration;

use redis_throttle_client::{AcquireOptions, Admission, Lease, Throttle, Token};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // A BLOCK call waits on the server: its connection's response timeout
    // must outlast the wait (redis' default is 500 ms).
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(15)));
    let conn = redis::Client::open(url)?.get_multiplexed_async_connection_with_config(&config).await?;
    let throttle = Throttle::new(conn);
    let two = NonZeroU32::new(2).expect("not zero");
    let lease = Duration::from_secs(30);

    // By hand: acquire, work, release.
    match throttle.acquire("exports", two, lease, &AcquireOptions::new()).await? {
        Admission::Admitted(held) => {
            println!("holding {} ({} slot(s) free)", held.token(), held.remaining());
            // ... the export ...
            held.release().await?;
        }
        Admission::Refused(refused) => println!("two exports run; a slot frees in {:?}", refused.retry_after),
    }

    // with_lease: waits up to 10 s for a slot, renews the lease as the work
    // goes on, and gives the slot back however the work ends (a panic and
    // a dropped future included). A named lease (ID) acquired again, after
    // a restart say, renews instead of taking a second slot.
    let opts = AcquireOptions::new().id(Token::new("worker-7")?).block(Duration::from_secs(10));
    let outcome = throttle
        .with_lease("exports", two, lease, &opts, async |held: &Lease<_>| {
            for step in 1..=3 {
                tokio::time::sleep(Duration::from_millis(100)).await; // a step of the export
                if !held.renew(lease).await? {
                    return Err::<(), BoxError>("the lease ended: another worker may hold the slot".into());
                }
                println!("step {step} done");
            }
            Ok(())
        })
        .await?;
    match outcome {
        Admission::Admitted(result) => result?,
        Admission::Refused(refused) => println!("no slot within 10 s; one frees in {:?}", refused.retry_after),
    }
    Ok(())
}
