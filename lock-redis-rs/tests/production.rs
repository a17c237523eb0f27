//! The redis-rs backend as production deployments reach Redis: the conformance suite as the smallest ACL user a
//! lock needs and over TLS, mutual TLS, and the certificates it must refuse (`lock_testkit::tls_cases`).
#![cfg(feature = "tokio")]

use lock_redis_rs::lock_core::Lock;
use lock_redis_rs::{RedisStore, RedisStoreBuilder};
use lock_testkit::{server_cases, Subject};

mod minimal_acl {
    use super::*;

    async fn subject() -> Subject {
        let server = server_cases::server_with_minimal_user();
        let store = RedisStore::connect(&server.url_for("locker", "secret", false))
            .await
            .unwrap_or_else(|err| panic!("connect as the minimal ACL user: {err:?}"));
        Subject::new(Lock::new(store)).keep(server).without_data_keys()
    }

    lock_testkit::conformance_tests!(tokio, subject());
}

#[cfg(feature = "tls-rustls")]
mod tls {
    use super::*;
    use lock_testkit::tls_cases::TlsConnect;
    use lock_testkit::{RedisServer, TestCertificates};

    async fn connect(how: TlsConnect) -> lock_redis_rs::lock_core::Result<RedisStore> {
        let mut config = RedisStoreBuilder::new(&how.url);
        if let Some(ca) = how.ca_pem {
            config = config.with_ca_certificate(ca);
        }
        if let Some((cert, key)) = how.client {
            config = config.with_client_certificate(cert, key);
        }
        config.connect().await
    }

    lock_testkit::tls_tests!(connect);

    mod conformance {
        use super::*;

        async fn subject() -> Subject {
            if !lock_testkit::server_supports_tls() {
                let binary = lock_testkit::redis_server_binary().unwrap_or_default();
                return Subject::skipped(format!("{} was built without TLS", binary.display()));
            }
            let certs = TestCertificates::generate().unwrap_or_else(|err| panic!("certificates: {err}"));
            let server =
                RedisServer::builder().with_tls(&certs).start().unwrap_or_else(|err| panic!("redis-server: {err}"));
            let url = server.tls_url().unwrap_or_default();
            let store = RedisStoreBuilder::new(&url)
                .with_ca_certificate(certs.ca_pem())
                .connect()
                .await
                .unwrap_or_else(|err| panic!("connect over TLS: {err:?}"));
            Subject::new(Lock::new(store)).keep((server, certs))
        }

        lock_testkit::conformance_tests!(tokio, subject());
    }
}

/// No password reaches `Debug` output or an error's text: configurations of every deployment, the store, the
/// lock, a guard, and the error of a refused login.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_appear_in_debug_output_or_errors() {
    const PASSWORD: &str = "Hunter2-never-printed";
    let server = lock_testkit::RedisServer::builder()
        .with_acl_user("locker", &format!("on >{PASSWORD} ~* &* +@all"))
        .start()
        .unwrap_or_else(|err| panic!("redis-server: {err}"));
    let url = server.url_for("locker", PASSWORD, false);
    let tls_url = format!("rediss://locker:{PASSWORD}@127.0.0.1:{}", server.port());
    let configs = [
        RedisStoreBuilder::new(&url),
        RedisStoreBuilder::new(&tls_url).with_client_certificate("CERTIFICATE", format!("KEY {PASSWORD}")),
        RedisStoreBuilder::cluster([&url, &tls_url]),
        RedisStoreBuilder::sentinel("mymaster", [&url]).with_primary_credentials(Some("locker"), PASSWORD),
    ];
    let mut printed: Vec<String> = configs.iter().map(|c| format!("{c:?}")).collect();
    let store = RedisStore::connect(&url).await.unwrap_or_else(|err| panic!("connect: {err:?}"));
    let lock = Lock::new(store.clone());
    let guard = lock
        .try_acquire("secret-free", &lock_redis_rs::lock_core::LockOptions::default())
        .await
        .unwrap_or_else(|err| panic!("acquire: {err:?}"))
        .unwrap_or_else(|| panic!("free"));
    printed.extend([format!("{store:?}"), format!("{lock:?}"), format!("{guard:?}")]);
    let wrong = server.url_for("locker", &format!("{PASSWORD}-wrong"), false);
    let err = RedisStore::connect(&wrong).await.err().unwrap_or_else(|| panic!("a wrong password was accepted"));
    printed.extend([format!("{err:?}"), server_cases::error_text(&err)]);
    server_cases::assert_never_printed(PASSWORD, &printed);
    guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
}

/// A Redis Cluster over TLS (client connections, cluster bus and replication) as the minimal ACL user: locks on
/// every shard, a waiter woken by a release through sharded pub/sub, no key left.
#[cfg(feature = "tls-rustls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_over_tls_as_the_minimal_acl_user() {
    if lock_testkit::skip_without_tls("cluster_over_tls_as_the_minimal_acl_user") {
        return;
    }
    use lock_redis_rs::lock_core::{LockOptions, ReleaseOutcome};
    use std::time::Duration;
    let certs = lock_testkit::TestCertificates::generate().unwrap_or_else(|err| panic!("certificates: {err}"));
    let cluster = lock_testkit::RedisCluster::builder()
        .with_tls(&certs)
        .with_acl_user("locker", server_cases::MINIMAL_ACL_RULES)
        .start()
        .unwrap_or_else(|err| panic!("cluster: {err}"));
    // Review finding 2: certificates with plain redis:// seeds were ignored (redis-rs takes the TLS mode from the
    // first seed's scheme) and the password went out in clear; seeds that mix schemes were as ambiguous. Both are
    // refused before any I/O.
    let plain = cluster.urls_for("locker", "secret", false);
    let mut mixed = cluster.urls_for("locker", "secret", true);
    mixed[1] = plain[1].clone();
    for (what, seeds) in [("plain seeds", plain.clone()), ("mixed seeds", mixed)] {
        let refused = RedisStoreBuilder::cluster(seeds).with_ca_certificate(certs.ca_pem()).connect().await;
        match refused {
            Err(lock_redis_rs::lock_core::LockError::InvalidArgument(message)) => {
                assert!(message.contains("rediss://"), "{what}: {message}");
            }
            other => panic!("certificates with {what}: expected InvalidArgument, got {other:?}"),
        }
    }
    let store = RedisStoreBuilder::cluster(cluster.urls_for("locker", "secret", true))
        .with_ca_certificate(certs.ca_pem())
        .with_command_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connect to the cluster over TLS: {err:?}"));
    let lock = Lock::new(store);
    let mut shards = std::collections::BTreeSet::new();
    for i in 0..24 {
        let resource = format!("tls-cluster-{i}");
        let keys = lock_redis_rs::lock_core::LockKeys::new("wlp:", &resource).unwrap_or_else(|err| panic!("{err}"));
        shards.insert(cluster.primary_for_key(keys.lock()).unwrap_or_else(|err| panic!("{err}")));
        let guard = lock.try_acquire(&resource, &LockOptions::default()).await;
        let guard = guard.unwrap_or_else(|err| panic!("acquire {resource}: {err:?}")).unwrap_or_else(|| panic!("free"));
        assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("{err:?}")), ReleaseOutcome::Released);
    }
    assert_eq!(shards.len(), 3, "the resources did not cover every shard");
    // A waiter is woken by the holder's release (SPUBLISH/SSUBSCRIBE over TLS), well before its 5 s backoff.
    let slow = lock_redis_rs::lock_core::RetryPolicy::default()
        .with_min_delay(Duration::from_secs(5))
        .with_max_delay(Duration::from_secs(5));
    let holder = lock.try_acquire("tls-cluster-wake", &LockOptions::default()).await.ok().flatten();
    let holder = holder.unwrap_or_else(|| panic!("free"));
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let opts = LockOptions::default().with_wait(Duration::from_secs(10)).with_retry(slow);
            let t0 = std::time::Instant::now();
            let guard = lock.acquire("tls-cluster-wake", &opts).await;
            (guard, t0.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.release().await.unwrap_or_else(|err| panic!("{err:?}"));
    let (guard, waited) = waiter.await.unwrap_or_else(|err| panic!("{err}"));
    let guard = guard.unwrap_or_else(|err| panic!("waiter: {err:?}"));
    assert!(waited < Duration::from_secs(3), "the waiter slept {waited:?}: no notification over TLS");
    guard.release().await.unwrap_or_else(|err| panic!("{err:?}"));
}

/// Behind Sentinel, the data nodes require a password and the lock runs as an ACL user there: the store reaches
/// the primary with `primary_credentials` (redis-rs reached it without any before), and without them connecting
/// is a typed `Auth` error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_data_nodes_with_an_acl_user() {
    use lock_redis_rs::lock_core::{LockError, LockOptions, ReleaseOutcome};
    let deployment = lock_testkit::RedisSentinel::builder()
        .with_data_password("data-secret")
        .with_data_acl_user("locker", server_cases::MINIMAL_ACL_RULES)
        .start()
        .unwrap_or_else(|err| panic!("sentinel deployment: {err}"));
    let service = deployment.service_name().to_owned();
    let err = RedisStoreBuilder::sentinel(&service, deployment.sentinel_urls()).connect().await.err();
    assert!(matches!(err, Some(LockError::Auth { .. })), "without credentials: {err:?}");
    let store = RedisStoreBuilder::sentinel(&service, deployment.sentinel_urls())
        .with_primary_credentials(Some("locker"), "secret")
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connect as the ACL user behind Sentinel: {err:?}"));
    let lock = Lock::new(store);
    let guard = lock.try_acquire("behind-sentinel", &LockOptions::default()).await;
    let guard = guard.unwrap_or_else(|err| panic!("acquire: {err:?}")).unwrap_or_else(|| panic!("free"));
    assert!(guard.fence().await.ok().is_some());
    assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("{err:?}")), ReleaseOutcome::Released);
}
