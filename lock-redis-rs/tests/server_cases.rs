//! The testkit's single-server cases (a `WAIT` on its own connection, a `WAIT` refused after the grant, a fence
//! counter `INCRBY` refuses) on the redis-rs backend.
#![cfg(feature = "tokio")]

use lock_redis_rs::RedisStore;

async fn store(url: &str) -> lock_redis_rs::lock_core::Result<RedisStore> {
    RedisStore::connect(url).await
}

lock_testkit::server_tests!(store);
