//! The fred backend as production deployments reach Redis: the conformance suite as the smallest ACL user a lock
//! needs and over TLS, mutual TLS, and the certificates it must refuse (`lock_testkit::tls_cases`).

use lock_fred::lock_core::Lock;
use lock_fred::{FredStore, FredStoreBuilder};
use lock_testkit::{server_cases, Subject};

mod minimal_acl {
    use super::*;

    async fn subject() -> Subject {
        let server = server_cases::server_with_minimal_user();
        let store = FredStore::connect(&server.url_for("locker", "secret", false))
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

    async fn connect(how: TlsConnect) -> lock_fred::lock_core::Result<FredStore> {
        let mut builder = FredStoreBuilder::from_url(&how.url)?;
        if let Some(ca) = how.ca_pem {
            builder = builder.with_ca_certificate(ca);
        }
        if let Some((cert, key)) = how.client {
            builder = builder.with_client_certificate(cert, key);
        }
        builder.connect().await
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
            let store = FredStoreBuilder::from_url(&url)
                .map(|b| b.with_ca_certificate(certs.ca_pem()))
                .unwrap_or_else(|err| panic!("url: {err:?}"))
                .connect()
                .await
                .unwrap_or_else(|err| panic!("connect over TLS: {err:?}"));
            Subject::new(Lock::new(store)).keep((server, certs))
        }

        lock_testkit::conformance_tests!(tokio, subject());
    }
}

/// Review finding 2 on fred: a Redis Cluster over TLS (`rediss-cluster://`, client connections, cluster bus and
/// replication) with the CA given to the builder locks on every shard; the same certificates with a
/// `redis-cluster://` URL are refused before any I/O, instead of turning TLS on behind the URL's back.
#[cfg(feature = "tls-rustls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_over_tls_and_certificates_without_a_tls_url() {
    if lock_testkit::skip_without_tls("cluster_over_tls_and_certificates_without_a_tls_url") {
        return;
    }
    use lock_fred::lock_core::{LockError, LockOptions, ReleaseOutcome};
    let certs = lock_testkit::TestCertificates::generate().unwrap_or_else(|err| panic!("certificates: {err}"));
    // The default user: fred also asks `CLUSTER INFO`, which the minimal ACL (redis-rs's cluster needs) leaves out.
    let cluster =
        lock_testkit::RedisCluster::builder().with_tls(&certs).start().unwrap_or_else(|err| panic!("cluster: {err}"));
    let url = |scheme: &str, urls: Vec<String>| {
        let nodes: Vec<String> = urls.iter().map(|u| u.rsplit('/').next().unwrap_or_default().to_owned()).collect();
        let rest: Vec<String> = nodes.iter().skip(1).map(|node| format!("node={node}")).collect();
        format!("{scheme}://{}?{}", nodes[0], rest.join("&"))
    };
    let plain = url("redis-cluster", cluster.urls());
    let refused = FredStoreBuilder::from_url(&plain)
        .unwrap_or_else(|err| panic!("url: {err:?}"))
        .with_ca_certificate(certs.ca_pem())
        .connect()
        .await;
    match refused {
        Err(LockError::InvalidArgument(message)) => assert!(message.contains("rediss"), "{message}"),
        other => panic!("certificates with a redis-cluster:// URL: expected InvalidArgument, got {other:?}"),
    }
    let tls = url("rediss-cluster", cluster.tls_urls());
    let store = FredStoreBuilder::from_url(&tls)
        .unwrap_or_else(|err| panic!("url: {err:?}"))
        .with_ca_certificate(certs.ca_pem())
        .with_command_timeout(std::time::Duration::from_secs(3))
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connect to the cluster over TLS: {err:?}"));
    let lock = Lock::new(store);
    for i in 0..12 {
        let resource = format!("tls-cluster-{i}");
        let guard = lock.try_acquire(&resource, &LockOptions::default()).await;
        let guard = guard.unwrap_or_else(|err| panic!("acquire {resource}: {err:?}")).unwrap_or_else(|| panic!("free"));
        assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("{err:?}")), ReleaseOutcome::Released);
    }
}

/// No password reaches `Debug` output or an error's text: the builder, the store, the lock, a guard, and the
/// error of a refused login.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_appear_in_debug_output_or_errors() {
    const PASSWORD: &str = "Hunter2-never-printed";
    let server = lock_testkit::RedisServer::builder()
        .with_acl_user("locker", &format!("on >{PASSWORD} ~* &* +@all"))
        .start()
        .unwrap_or_else(|err| panic!("redis-server: {err}"));
    let url = server.url_for("locker", PASSWORD, false);
    let builder = FredStoreBuilder::from_url(&url)
        .unwrap_or_else(|err| panic!("url: {err:?}"))
        .with_client_certificate("CERTIFICATE", format!("KEY {PASSWORD}"));
    let mut printed = vec![format!("{builder:?}")];
    let store = FredStore::connect(&url).await.unwrap_or_else(|err| panic!("connect: {err:?}"));
    let lock = Lock::new(store.clone());
    let guard = lock
        .try_acquire("secret-free", &lock_fred::lock_core::LockOptions::default())
        .await
        .unwrap_or_else(|err| panic!("acquire: {err:?}"))
        .unwrap_or_else(|| panic!("free"));
    printed.extend([format!("{store:?}"), format!("{lock:?}"), format!("{guard:?}")]);
    let wrong = server.url_for("locker", &format!("{PASSWORD}-wrong"), false);
    let err = FredStore::connect(&wrong).await.err().unwrap_or_else(|| panic!("a wrong password was accepted"));
    printed.extend([format!("{err:?}"), server_cases::error_text(&err)]);
    server_cases::assert_never_printed(PASSWORD, &printed);
    guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
}
