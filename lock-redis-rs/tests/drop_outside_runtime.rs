//! A guard dropped where no runtime is current (after `block_on` returned, on another thread) is still released
//! promptly, on the runtime it was acquired on (the store's connections only work there).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)] // sync test; fails by panicking

use std::time::{Duration, Instant};

use lock_core::{Lock, LockOptions};
use lock_redis_rs::RedisStore;
use lock_testkit::{RedisServer, Reply};

#[test]
fn a_guard_dropped_outside_its_runtime_is_released_on_that_runtime() {
    let server = RedisServer::start().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (lock, guard) = rt.block_on(async {
        let lock = Lock::new(RedisStore::connect(&server.url()).await.unwrap());
        let guard = lock.try_acquire("outside", &LockOptions::new(Duration::from_secs(30))).await.unwrap();
        (lock, guard.expect("free"))
    });
    let key = guard.keys().lock().to_owned();
    std::thread::spawn(move || drop(guard)).join().unwrap();
    let t0 = Instant::now();
    while server.command(&["EXISTS", &key]).unwrap() != Reply::Int(0) {
        assert!(t0.elapsed() < Duration::from_secs(2), "the dropped guard was not released (TTL 30 s)");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(lock);
}
