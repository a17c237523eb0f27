//! TLS settings beyond what a `rediss://` URL says: a custom CA, and a client certificate for mutual TLS.
//!
//! A `rediss://` URL alone connects over TLS and trusts the platform's root certificates (with the
//! `tls-rustls-webpki-roots` feature, also Mozilla's bundled roots). A private CA or a client certificate is given
//! through [`RedisStoreBuilder::ca_certificate`](crate::RedisStoreBuilder::ca_certificate) and
//! [`client_certificate`](crate::RedisStoreBuilder::client_certificate), in PEM. Without a TLS feature, a store that
//! needs TLS fails at `connect` with [`InvalidArgument`](lock_core::LockError::InvalidArgument) naming the
//! features, rather than at its first command.

use std::fmt;
use std::time::Duration;

use lock_core::{LockError, Result};

/// PEM material for TLS connections (see the [module docs](self)).
#[derive(Clone, Default)]
pub(crate) struct TlsOptions {
    /// The CA certificate(s) that signed the server's certificate, instead of the platform's roots.
    pub(crate) ca: Option<Vec<u8>>,
    /// The client certificate and its private key, for servers that require one.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

/// The features that give this crate TLS, for error messages.
pub(crate) const FEATURES: &str = "tls-rustls, smol-tls-rustls or tls-native-tls";

impl TlsOptions {
    pub(crate) fn is_set(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }

    /// The certificates in redis-rs's form, `None` when neither is set.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when they are set but this build has no TLS feature.
    #[cfg(any(feature = "tls-rustls", feature = "smol-tls-rustls", feature = "tls-native-tls"))]
    pub(crate) fn certificates(&self) -> Result<Option<redis::TlsCertificates>> {
        if !self.is_set() {
            return Ok(None);
        }
        Ok(Some(redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
            root_cert: self.ca.clone(),
        }))
    }

    /// Refuses certificates in a build without TLS.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when certificates are set.
    #[cfg(not(any(feature = "tls-rustls", feature = "smol-tls-rustls", feature = "tls-native-tls")))]
    pub(crate) fn certificates(&self) -> Result<Option<std::convert::Infallible>> {
        if self.is_set() {
            return Err(without_tls());
        }
        Ok(None)
    }
}

/// The one rule for TLS settings on every deployment: certificates apply to connections a `rediss://` URL (or
/// [`with_primary_tls`](crate::RedisStoreBuilder::with_primary_tls) behind Sentinel) asks to encrypt, and a
/// deployment whose addresses mix TLS and plain TCP is refused. Certificates given with plain `redis://` addresses
/// were ignored on a cluster (redis-rs takes the TLS mode from the first seed's scheme), and a password then went out
/// in clear: refused before any I/O instead. `tls` says which of the deployment's addresses ask for TLS.
///
/// # Errors
/// [`LockError::InvalidArgument`] naming the rule.
pub(crate) fn check_tls_intent(options: &TlsOptions, tls: &[bool]) -> Result<()> {
    let encrypted = tls.iter().filter(|tls| **tls).count();
    if encrypted != 0 && encrypted != tls.len() {
        return Err(LockError::invalid(
            "the URLs mix rediss:// (TLS) and redis:// (plain TCP): use one scheme for every node of a deployment",
        ));
    }
    if options.is_set() && encrypted == 0 {
        return Err(LockError::invalid(
            "TLS certificates were given, but no URL asks for TLS: use rediss:// URLs (with_primary_tls behind \
             Sentinel), or drop the certificates",
        ));
    }
    Ok(())
}

/// Whether `addr` is reached over TLS.
pub(crate) fn is_tls(addr: &redis::ConnectionAddr) -> bool {
    matches!(addr, redis::ConnectionAddr::TcpTls { .. })
}

/// The error for TLS settings in a build without a TLS feature.
#[cfg(not(any(feature = "tls-rustls", feature = "smol-tls-rustls", feature = "tls-native-tls")))]
pub(crate) fn without_tls() -> lock_core::LockError {
    lock_core::LockError::invalid(format!("TLS needs one of lock-redis-rs's features {FEATURES}"))
}

/// Makes ring the process's rustls crypto provider unless one is installed already: redis-rs builds its rustls
/// configurations with the process default, and rustls cannot pick one by itself when a build enables two.
#[cfg(any(feature = "tls-rustls", feature = "smol-tls-rustls"))]
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Nothing to install without rustls.
#[cfg(not(any(feature = "tls-rustls", feature = "smol-tls-rustls")))]
pub(crate) fn install_crypto_provider() {}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Certificates are not secret but long; the key is secret. Say only what is set.
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca.as_ref().map(|_| "<set>"))
            .field("client_certificate", &self.client.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// After a TLS connection to `addr` failed without a TLS error (no answer in time, a broken handshake): the
/// [`LockError::Tls`] to report instead when the server answers a plain-text `PING` there (it has no TLS on that
/// port), else `None`. The probe sends no credentials and is bounded by `bound`.
pub(crate) async fn plain_text_server(addr: &redis::ConnectionAddr, bound: Duration) -> Option<LockError> {
    let redis::ConnectionAddr::TcpTls { host, port, .. } = addr else { return None };
    let bracketed = if host.contains(':') { format!("[{host}]") } else { host.clone() };
    let client = redis::Client::open(format!("redis://{bracketed}:{port}/")).ok()?;
    let config =
        redis::AsyncConnectionConfig::new().set_connection_timeout(Some(bound)).set_response_timeout(Some(bound));
    let probe = async {
        let mut conn = client.get_multiplexed_async_connection_with_config(&config).await.ok()?;
        // Any Redis reply says the server speaks plain text here: `PONG`, or an error such as `NOAUTH`.
        match redis::cmd("PING").query_async::<String>(&mut conn).await {
            Ok(_) => Some(()),
            Err(err) => err.code().map(|_| ()),
        }
    };
    lock_core::backend::rt::timeout("connect", bound, probe).await.ok().flatten()?;
    let server = format!("{bracketed}:{port}");
    Some(LockError::tls(lock_core::backend::PlainTextServer { server }))
}
