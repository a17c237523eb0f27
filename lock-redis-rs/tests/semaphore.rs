//! The testkit's cross-process semaphore cases (a killed and a paused holder, a retried acquire, a soak of 6
//! holders in 3 processes) on the redis-rs backend.
#![cfg(feature = "tokio")]

use std::time::Duration;

use lock_redis_rs::{RedisStore, RedisStoreBuilder};

async fn store(url: &str) -> lock_redis_rs::lock_core::Result<RedisStore> {
    RedisStoreBuilder::new(url).with_command_timeout(Duration::from_millis(300)).connect().await
}

lock_testkit::semaphore_fault_tests!(store);
