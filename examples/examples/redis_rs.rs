//! Take, extend and release a lock through lock-redis-rs while a second store waits for it.
//!
//! ```text
//! cargo run -p examples --example redis_rs                         # starts a throwaway redis-server
//! REDIS_URL=redis://HOST:PORT cargo run -p examples --example redis_rs
//! RUST_LOG=lock_core=debug cargo run -p examples --example redis_rs # and watch the lock's own logs
//! ```
// A demo narrates what it does.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use lock_redis_rs::lock_core::{Lock, LockError, LockOptions};
use lock_redis_rs::{RedisStore, RedisStoreBuilder};
use lock_testkit::RedisServer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();

    // Keep the throwaway server (if any) alive until the end of `main`.
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = RedisServer::start()?;
            println!("REDIS_URL not set; started redis-server on port {}", server.port());
            (server.url(), Some(server))
        }
    };

    // A pool of two multiplexed connections; every call is bounded by connect + command timeout.
    let store = RedisStoreBuilder::new(&url)
        .with_pool_size(2)
        .with_command_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_secs(1))
        .connect()
        .await?;
    println!("connected to {url}; pool: {:?}", store.pool_status());
    let lock = Lock::new(store);

    let opts = LockOptions::new(Duration::from_secs(5)).with_wait(Duration::from_secs(3));
    let guard = lock.acquire("example:daily-report", &opts).await?;
    let fence = guard.fence().await?; // drawn now: one round trip that checks the hold
    println!("acquired {:?} (fencing token {fence}); pass the token to whatever the lock protects", guard.resource());

    // Another store stands in for another process; it waits and is woken by the release notification.
    let other = Lock::new(RedisStore::connect(&url).await?);
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = other.acquire("example:daily-report", &opts).await?;
        println!(
            "the other store got the lock after waiting {:?}, with fencing token {}",
            started.elapsed(),
            guard.fence().await?
        );
        guard.release().await?;
        Ok::<_, LockError>(())
    });

    tokio::time::sleep(Duration::from_millis(300)).await;
    let until = guard.extend(Duration::from_secs(5)).await?;
    println!("still working: extended, valid for another {:?}", until.saturating_duration_since(Instant::now()));
    tokio::time::sleep(Duration::from_millis(200)).await;

    println!("done: release -> {:?}", guard.release().await?);
    waiter.await??;

    // Without fencing, acquire is a plain SET NX PX and no per-resource counter key is created.
    let opts = LockOptions::new(Duration::from_secs(5)).with_fencing(false);
    let guard = lock.try_acquire("example:cache-refresh", &opts).await?.ok_or("cache-refresh is held")?;
    println!(
        "fencing off: fence() says {:?}; release -> {:?}",
        guard.fence().await.err().map(|e| e.to_string()),
        guard.release().await?
    );
    Ok(())
}
