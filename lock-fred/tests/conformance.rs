//! The whole lock-testkit conformance suite against a real `redis-server`, one server per case.

use lock_fred::lock_core::Lock;
use lock_fred::FredStore;
use lock_testkit::{conformance_tests, RedisServer, Subject};

async fn subject() -> Subject {
    let server = RedisServer::start().unwrap_or_else(|err| panic!("redis-server: {err}"));
    let store = FredStore::connect(&server.url()).await.unwrap_or_else(|err| panic!("connect: {err:?}"));
    // A second process: connections and a release subscription of its own.
    let peer = FredStore::connect(&server.url()).await.unwrap_or_else(|err| panic!("connect: {err:?}"));
    // The lock is dropped before the server (field order in `Subject`), so the store disconnects first.
    Subject::new(Lock::new(store)).with_peer(Lock::new(peer)).keep(server)
}

conformance_tests!(tokio, subject());
