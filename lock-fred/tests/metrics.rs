//! This backend's metrics, read from a process-wide debugging recorder (a test binary of its own).
#![allow(clippy::expect_used)] // test setup

use lock_fred::lock_core::Lock;
use lock_fred::FredStore;
use lock_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_reconnects_and_commands_are_counted() {
    let server = RedisServer::start().expect("redis-server");
    let lock = Lock::new(FredStore::connect(&server.url()).await.expect("connect"));
    lock_testkit::metrics_cases::subscriber_reconnects_and_commands_are_counted(&lock, &server, "FredStore").await;
}
