//! The lock-testkit conformance suite on the tokio runtime, against a real redis-server per case.
#![cfg(feature = "tokio")]
// Test setup: a server that cannot start is a failed test.
#![allow(clippy::expect_used)]

use lock_core::Lock;
use lock_redis_rs::RedisStore;
use lock_testkit::{RedisServer, Subject};

async fn subject() -> Subject {
    let server = RedisServer::start().expect("start redis-server");
    let store = RedisStore::connect(&server.url()).await.expect("connect to redis-server");
    // A second process: connections and a release subscription of its own.
    let peer = RedisStore::connect(&server.url()).await.expect("connect to redis-server");
    Subject::new(Lock::new(store)).with_peer(Lock::new(peer)).keep(server)
}

lock_testkit::conformance_tests!(tokio, subject());
