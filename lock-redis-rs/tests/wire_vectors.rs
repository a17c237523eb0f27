//! The wire protocol's test vectors (`wire/vectors/`) on a real server through this backend: Redis here, Valkey in
//! `scripts/test.sh --valkey` (which `.ci/run` runs), the in-memory store in lock-testkit.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::path::Path;
use std::sync::Arc;

use lock_redis_rs::RedisStore;
use lock_testkit::RedisServer;

#[tokio::test]
async fn every_vector_passes_on_a_real_server() {
    let server = RedisServer::start().unwrap();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wire/vectors");
    let outcome = lock_testkit::wire_vectors::run_dir(&dir, Arc::new(store)).await;
    assert!(outcome.cases >= 100, "only {} cases found", outcome.cases);
    assert!(
        outcome.failures.is_empty(),
        "{} of {} cases failed: {:#?}",
        outcome.failures.len(),
        outcome.cases,
        outcome.failures
    );
}
