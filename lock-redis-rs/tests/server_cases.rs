//! The testkit's single-server cases (a `WAIT` on its own connection, a `WAIT` refused after the grant, a fence
//! counter `INCRBY` refuses) on the redis-rs backend.
#![cfg(feature = "tokio")]

use lock_redis_rs::RedisStore;

async fn store(url: &str) -> lock_redis_rs::lock_core::Result<RedisStore> {
    RedisStore::connect(url).await
}

lock_testkit::server_tests!(store);

/// redis-rs reports a `SUBSCRIBE` the ACL refuses as an error, so its waiters know they hear nothing and poll on their
/// backoff rather than their safety poll (not in `server_tests!`: fred 10 reports such a `SUBSCRIBE` as a success).
#[test]
fn a_waiter_told_it_cannot_subscribe_polls_on_its_backoff() {
    lock_testkit::runtime::tokio(async {
        lock_testkit::server_cases::a_waiter_told_it_cannot_subscribe_polls_on_its_backoff(&|url: String| {
            Box::pin(async move {
                store(&url)
                    .await
                    .map(|s| std::sync::Arc::new(s) as std::sync::Arc<dyn lock_testkit::__private::LockStore>)
            })
        })
        .await;
    });
}
