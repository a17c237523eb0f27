//! The testkit's cross-process semaphore cases (a killed and a paused holder, a retried acquire, a soak of 6
//! holders in 3 processes) on the fred backend.

use std::time::Duration;

use lock_fred::{FredStore, FredStoreBuilder};

async fn store(url: &str) -> lock_fred::lock_core::Result<FredStore> {
    FredStoreBuilder::from_url(url)?.with_command_timeout(Duration::from_millis(300)).connect().await
}

lock_testkit::semaphore_fault_tests!(store);
