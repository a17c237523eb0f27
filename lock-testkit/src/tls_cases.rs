//! Cases every Redis backend with TLS runs against real TLS servers: mutual TLS, and the certificates a client
//! must refuse (an unknown CA, an expired certificate, one for another host, a missing client certificate), each a
//! typed [`LockError::Tls`] within the connect timeout.
//!
//! [`tls_tests!`](crate::tls_tests) writes one `#[test]` per case for a backend, given an async function that
//! connects its store as a [`TlsConnect`] says.
//!
//! Each case is a test: it panics, naming what broke, when the backend does not keep a promise (so no case has an
//! `# Errors` section), and it is not meant to be cancelled except by ending the test.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Lock, LockError, LockOptions, LockStore, ReleaseOutcome};

use crate::or_panic::OrPanic;
use crate::{RedisServer, ServerCertificate, TestCertificates};

/// How a case asks a backend to connect.
#[derive(Clone, Debug)]
pub struct TlsConnect {
    /// A `rediss://` URL.
    pub url: String,
    /// The CA certificate to trust (PEM), `None` for the platform's roots.
    pub ca_pem: Option<String>,
    /// A client certificate and key (PEM), for mutual TLS.
    pub client: Option<(String, String)>,
}

/// Connects a backend's store as a [`TlsConnect`] says (the argument of every case).
pub type TlsFactory =
    dyn Fn(TlsConnect) -> Pin<Box<dyn Future<Output = lock_core::Result<Arc<dyn LockStore>>> + Send>> + Send + Sync;

/// How long a refused handshake may take to be reported: the backends' default connect timeout (1 s) and slack.
const PROMPT: Duration = Duration::from_millis(2_500);

fn server(certs: &TestCertificates, client_certificates: bool) -> RedisServer {
    let builder = RedisServer::builder().with_tls(certs);
    let builder = if client_certificates { builder.with_client_certificates_required() } else { builder };
    builder.start().unwrap_or_else(|err| panic!("redis-server with TLS: {err}"))
}

fn tls_url(server: &RedisServer) -> String {
    server.tls_url().unwrap_or_else(|| panic!("the server has no TLS port"))
}

/// Expects `connect` to fail with [`LockError::Tls`], promptly.
async fn refused(connect: &TlsFactory, how: TlsConnect, what: &str) {
    let t0 = Instant::now();
    let outcome = connect(how).await;
    let took = t0.elapsed();
    match outcome {
        Err(LockError::Tls { .. }) => {}
        Err(other) => panic!("{what}: expected a Tls error, got {other:?}"),
        Ok(store) => panic!("{what}: the connection was accepted ({store:?})"),
    }
    assert!(took < PROMPT, "{what}: reported after {took:?}");
}

/// A store trusting the server's CA locks and releases over TLS; with a client certificate it also passes a server
/// that requires one.
pub async fn mutual_tls_with_a_client_certificate_works(connect: &TlsFactory) {
    if crate::skip_without_tls("mutual_tls_with_a_client_certificate_works") {
        return;
    }
    let certs = TestCertificates::generate().or_panic();
    let server = server(&certs, true);
    let how = TlsConnect {
        url: tls_url(&server),
        ca_pem: Some(certs.ca_pem().to_owned()),
        client: Some((certs.client_cert_pem().to_owned(), certs.client_key_pem().to_owned())),
    };
    let lock = Lock::from_arc(connect(how).await.or_panic());
    let guard = lock.try_acquire("over-mtls", &LockOptions::new(Duration::from_secs(5))).await.or_panic().or_panic();
    assert!(guard.fence().await.ok().is_some());
    assert_eq!(guard.release().await.or_panic(), ReleaseOutcome::Released);
}

/// Each certificate a client must refuse gives a typed `Tls` error within the connect timeout: a CA it does not
/// trust (its own, or the platform's roots), an expired server certificate, one for another host, and no client
/// certificate where the server requires one.
pub async fn refused_certificates_are_typed_errors_within_the_connect_timeout(connect: &TlsFactory) {
    if crate::skip_without_tls("refused_certificates_are_typed_errors_within_the_connect_timeout") {
        return;
    }
    let certs = TestCertificates::generate().or_panic();
    let other_ca = TestCertificates::generate().or_panic();
    let good = server(&certs, false);
    let trusting = |ca: &TestCertificates, server: &RedisServer| TlsConnect {
        url: tls_url(server),
        ca_pem: Some(ca.ca_pem().to_owned()),
        client: None,
    };
    refused(connect, trusting(&other_ca, &good), "another CA").await;
    refused(connect, TlsConnect { url: tls_url(&good), ca_pem: None, client: None }, "the platform's roots").await;
    for kind in [ServerCertificate::Expired, ServerCertificate::WrongHost] {
        let bad = TestCertificates::with_server(kind).or_panic();
        let server = server(&bad, false);
        refused(connect, trusting(&bad, &server), &format!("{kind:?}")).await;
    }
    let strict = server(&certs, true);
    refused(connect, trusting(&certs, &strict), "no client certificate").await;
}

/// Review finding 16: a `rediss://` URL that points at a server without TLS is a TLS error that says so, not a
/// retryable timeout: typed [`LockError::Tls`], not retryable, within the connect timeout, with a hint that the
/// server speaks plain TCP.
pub async fn a_tls_url_to_a_plain_server_is_a_tls_error(connect: &TlsFactory) {
    let certs = TestCertificates::generate().or_panic();
    let plain = RedisServer::start().or_panic();
    let how = TlsConnect {
        url: format!("rediss://127.0.0.1:{}", plain.port()),
        ca_pem: Some(certs.ca_pem().to_owned()),
        client: None,
    };
    let t0 = Instant::now();
    let outcome = connect(how).await;
    let took = t0.elapsed();
    match outcome {
        Err(err @ LockError::Tls { .. }) => {
            assert!(!err.is_retryable(), "a TLS mismatch is retryable: {err:?}");
            let line = err.report().to_string();
            assert!(line.contains("without TLS"), "no hint that the server speaks plain TCP: {line}");
        }
        Err(other) => panic!("a TLS URL to a plain server: expected a Tls error, got {:?} ({})", other, other.report()),
        Ok(store) => panic!("a TLS URL to a plain server connected ({store:?})"),
    }
    assert!(took < PROMPT, "reported after {took:?}");
}

/// Issue 54 §3, the reverse of [`a_tls_url_to_a_plain_server_is_a_tls_error`]: a plain `redis://` URL to a port where
/// the server speaks TLS is a typed [`LockError::Tls`] saying so, within the connect timeout, on every backend (it
/// was a dropped connection, `Unavailable`, retried as if the server would come back).
pub async fn a_plain_url_to_a_tls_server_is_a_tls_error(connect: &TlsFactory) {
    let certs = TestCertificates::generate().or_panic();
    let tls = server(&certs, false);
    let port = tls.tls_port().or_panic();
    let how = TlsConnect { url: format!("redis://127.0.0.1:{port}"), ca_pem: None, client: None };
    let t0 = Instant::now();
    let outcome = connect(how).await;
    let took = t0.elapsed();
    match outcome {
        Err(err @ LockError::Tls { .. }) => {
            assert!(!err.is_retryable(), "a TLS mismatch is retryable: {err:?}");
            let line = err.report().to_string();
            assert!(line.contains("speaks TLS") && line.contains(&format!("127.0.0.1:{port}")), "{line}");
        }
        Err(other) => panic!("a plain URL to a TLS server: expected a Tls error, got {other:?}"),
        Ok(store) => panic!("a plain URL to a TLS server connected ({store:?})"),
    }
    assert!(took < PROMPT, "reported after {took:?}");
}

/// Review finding 2: one rule for TLS settings on every deployment and both backends. Certificates given with a
/// plain `redis://` URL are refused before any I/O (a typed `InvalidArgument`), rather than ignored (a cluster's
/// password then went out in clear) or turning TLS on behind the URL's back.
pub async fn certificates_with_a_plain_url_are_refused(connect: &TlsFactory) {
    let certs = TestCertificates::generate().or_panic();
    let server = RedisServer::start().or_panic();
    let before = server.command(&["INFO", "stats"]).or_panic().as_text().unwrap_or_default();
    let connections = |info: &str| {
        info.lines().find_map(|line| line.strip_prefix("total_connections_received:")?.trim().parse::<u64>().ok())
    };
    for client in [None, Some((certs.client_cert_pem().to_owned(), certs.client_key_pem().to_owned()))] {
        let how = TlsConnect { url: server.url(), ca_pem: Some(certs.ca_pem().to_owned()), client };
        match connect(how).await {
            Err(LockError::InvalidArgument(message)) => {
                assert!(message.contains("rediss://"), "the refusal does not say what to do: {message}");
            }
            other => panic!("certificates with a redis:// URL: expected InvalidArgument, got {other:?}"),
        }
    }
    let after = server.command(&["INFO", "stats"]).or_panic().as_text().unwrap_or_default();
    // The INFO probes themselves are two connections.
    assert_eq!(connections(&after), connections(&before).map(|n| n + 1), "a refused store connected first");
}
