//! The testkit's cross-process read-write lock cases (a killed reader, a killed waiting writer, a paused writer,
//! retried acquires, 10 000 cancelled acquires, a soak of 6 readers and writers in 3 processes) on the redis-rs backend.
#![cfg(feature = "tokio")]

use std::time::Duration;

use lock_redis_rs::{RedisStore, RedisStoreBuilder};

async fn store(url: &str) -> lock_redis_rs::lock_core::Result<RedisStore> {
    RedisStoreBuilder::new(url).with_command_timeout(Duration::from_millis(300)).connect().await
}

lock_testkit::rwlock_fault_tests!(store);
