//! The wire protocol's test vectors (`wire/vectors/`) on the in-memory store, which runs the same scripts: the
//! engine's own store behaves as WIRE.md says (the same vectors run on Redis and Valkey in lock-redis-rs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::path::Path;
use std::sync::Arc;

use lock_core::MemoryStore;

#[tokio::test]
async fn every_vector_passes_on_the_in_memory_store() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wire/vectors");
    let outcome = lock_testkit::wire_vectors::run_dir(&dir, Arc::new(MemoryStore::new())).await;
    assert!(outcome.cases >= 100, "only {} cases found", outcome.cases);
    assert!(
        outcome.failures.is_empty(),
        "{} of {} cases failed: {:#?}",
        outcome.failures.len(),
        outcome.cases,
        outcome.failures
    );
}
