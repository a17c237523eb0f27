//! The whole conformance suite against the in-memory backend, on each supported runtime.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking

use lock_core::{Lock, MemoryStore};
use lock_testkit::{conformance_tests, Subject};

async fn subject() -> Subject {
    let store = MemoryStore::new();
    Subject::new(Lock::new(store.clone())).with_peer(Lock::new(store.peer()))
}

mod tokio_runtime {
    use super::*;
    conformance_tests!(tokio, subject());
}

#[cfg(feature = "async-std")]
mod async_std_runtime {
    use super::*;
    conformance_tests!(async_std, subject());
}

mod smol_runtime {
    use super::*;
    conformance_tests!(smol, subject());
}
