//! The whole conformance suite (every primitive) on the rustis backend of `examples/src/rustis_store.rs`, against a
//! real `redis-server` per case: the seam proved by a backend written from the docs alone.

use examples::rustis_store::RustisStore;
use lock_core::Lock;
use lock_testkit::{conformance_tests, RedisServer, Subject};

async fn subject() -> Subject {
    let server = RedisServer::start().unwrap_or_else(|err| panic!("redis-server: {err}"));
    let connect = || async { RustisStore::connect(&server.url()).await.unwrap_or_else(|err| panic!("connect: {err}")) };
    // The peer is a second process: its own connections and release subscription.
    let (store, peer) = (connect().await, connect().await);
    Subject::new(Lock::new(store)).with_peer(Lock::new(peer)).keep(server)
}

conformance_tests!(tokio, subject());

/// The error-parity cases (issue 54 §3): the same failure is the same error, within the same bound, on this backend
/// as on the library's own.
mod parity {
    async fn store(url: &str) -> lock_core::Result<examples::rustis_store::RustisStore> {
        examples::rustis_store::RustisStore::connect(url).await
    }

    lock_testkit::parity_tests!(store);
}
