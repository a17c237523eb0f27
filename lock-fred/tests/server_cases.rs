//! The testkit's single-server cases (a `WAIT` on its own connection, a `WAIT` refused after the grant, a fence
//! counter `INCRBY` refuses) on the fred backend.

use lock_fred::FredStore;

async fn store(url: &str) -> lock_fred::lock_core::Result<FredStore> {
    FredStore::connect(url).await
}

lock_testkit::server_tests!(store);
