//! The Python-and-Rust example: redis-py's lock in a Python process and ours on one counter lose no update.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use lock_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_on_one_lock_lose_no_update() {
    assert!(examples::with_python::python().exists(), "run interop/setup.sh (scripts/test.sh does)");
    let server = RedisServer::start().unwrap();
    let shared = examples::with_python::run(&server.url(), "orders", 300).await.unwrap();
    assert_eq!(shared.counter, 600, "{shared:?}");
    assert!(shared.contended > 0, "the two sides never contended, so nothing was shown: {shared:?}");
}
