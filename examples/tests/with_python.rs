//! The Python-and-Rust example: redis-py's lock, or python-redis-lock's, in a Python process and ours on one counter
//! lose no update.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use examples::with_python::Peer;
use lock_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_on_one_lock_lose_no_update() {
    assert!(examples::with_python::python().exists(), "run interop/setup.sh (scripts/test.sh does)");
    let server = RedisServer::start().unwrap();
    let shared = examples::with_python::run(&server.url(), Peer::RedisPy, "orders", 300).await.unwrap();
    assert_eq!(shared.counter, 600, "{shared:?}");
    assert!(shared.contended > 0, "the two sides never contended, so nothing was shown: {shared:?}");
}

/// The package most easily confused with redis-py's lock (issue 56): python-redis-lock, key `lock:<name>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_redis_lock_and_rust_on_one_lock_lose_no_update() {
    assert!(examples::with_python::python().exists(), "run interop/setup.sh (scripts/test.sh does)");
    let server = RedisServer::start().unwrap();
    let shared = examples::with_python::run(&server.url(), Peer::PythonRedisLock, "orders", 300).await.unwrap();
    assert_eq!(shared.counter, 600, "{shared:?}");
    assert!(shared.contended > 0, "the two sides never contended, so nothing was shown: {shared:?}");
}
