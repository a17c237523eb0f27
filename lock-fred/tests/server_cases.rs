//! The testkit's single-server cases (a `WAIT` on its own connection, a `WAIT` refused after the grant, a fence
//! counter `INCRBY` refuses) on the fred backend.

use lock_fred::FredStore;

async fn store(url: &str) -> FredStore {
    FredStore::connect(url).await.unwrap_or_else(|err| panic!("connect: {err:?}"))
}

lock_testkit::server_tests!(store);
