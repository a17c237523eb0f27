//! The testkit's cross-process read-write lock cases (a killed reader, a killed waiting writer, a paused writer,
//! retried acquires, 10 000 cancelled acquires, a soak of 6 readers and writers in 3 processes) on the fred backend.

use std::time::Duration;

use lock_fred::{FredStore, FredStoreBuilder};

async fn store(url: &str) -> lock_fred::lock_core::Result<FredStore> {
    FredStoreBuilder::from_url(url)?.with_command_timeout(Duration::from_millis(300)).connect().await
}

lock_testkit::rwlock_fault_tests!(store);
