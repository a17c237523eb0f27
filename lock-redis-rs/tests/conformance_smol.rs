//! The lock-testkit conformance suite on the smol runtime, against a real redis-server per case.
#![cfg(feature = "smol")]
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

lock_testkit::conformance_tests!(smol, subject());

/// Without this crate's `async-std` feature, lock-core spawns on smol's executor, not async-std's: the smol path is
/// what the cases above exercised (`scripts/test.sh` runs them so; the workspace-wide run merges in async-std).
#[cfg(not(feature = "async-std"))]
#[test]
fn the_smol_path_is_the_one_tested() {
    assert!(!lock_core::backend::rt::compiled().contains(&"async-std"), "{:?}", lock_core::backend::rt::compiled());
    assert!(lock_core::backend::rt::compiled().contains(&"smol"));
}
