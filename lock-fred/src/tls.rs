//! TLS beyond what a `rediss://` URL says: a custom CA, and a client certificate for mutual TLS, turned into the
//! TLS connector fred takes (rustls with its `ring` provider under `tls-rustls`, the platform's library under
//! `tls-native-tls`; rustls when both are on).

use std::fmt;
use std::time::Duration;

use lock_core::{LockError, Result};

/// Whether this build can connect over TLS (a feature of this crate's turned fred's TLS on).
pub(crate) const BUILT_WITH_TLS: bool = cfg!(any(feature = "tls-rustls", feature = "tls-native-tls"));

/// Every scheme fred reads: redis, rediss, valkey or valkeys, alone or with `-cluster`, `-sentinel` or `+unix`.
pub(crate) const SCHEMES: [&str; 16] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis-cluster",
    "rediss-cluster",
    "valkey-cluster",
    "valkeys-cluster",
    "redis-sentinel",
    "rediss-sentinel",
    "valkey-sentinel",
    "valkeys-sentinel",
    "redis+unix",
    "rediss+unix",
    "valkey+unix",
    "valkeys+unix",
];

/// Whether `url` asks for TLS, decided as fred decides it (`fred::utils::url_uses_tls`, private to fred: a scheme
/// that starts with `rediss` or `valkeys`, so `valkeys-cluster://` and `rediss+unix://` too; the scheme compared in
/// lower case, as the URL parser fred uses stores it). A narrower list here let `valkeys://` through (review 4).
fn asks_for_tls(url: &str) -> bool {
    let url = url.trim_start();
    let scheme = url.find("://").and_then(|at| url.get(..at)).unwrap_or_default().to_ascii_lowercase();
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

/// Refuses a URL that asks for TLS when the build has none (`tls_built` false). Without its TLS features fred
/// parses such a URL, logs a warning (which an application that only listens to `tracing` never sees), and connects
/// over plain TCP, sending the password in clear.
///
/// # Errors
/// [`LockError::InvalidArgument`] naming the features to enable.
pub(crate) fn refuse_tls_url_without_tls(url: &str, tls_built: bool) -> Result<()> {
    let trimmed = url.trim_start();
    let scheme = trimmed.get(..trimmed.find("://").map_or(0, |at| at + 3)).unwrap_or_default();
    if !tls_built && asks_for_tls(url) {
        return Err(LockError::invalid(format!(
            "{scheme} asks for TLS, and this build of lock-fred has none: enable its feature tls-rustls or \
             tls-native-tls (without it the password would be sent in clear)"
        )));
    }
    Ok(())
}

/// The `host:port` a TLS configuration connects to, when it is one server (centralized) over TLS.
#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
pub(crate) fn tls_endpoint(config: &fred::prelude::Config) -> Option<(String, u16)> {
    config.tls.as_ref()?;
    match &config.server {
        fred::prelude::ServerConfig::Centralized { server } => Some((server.host.to_string(), server.port)),
        _ => None,
    }
}

/// No TLS in this build, so no TLS endpoint.
#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
pub(crate) fn tls_endpoint(_config: &fred::prelude::Config) -> Option<(String, u16)> {
    None
}

/// After a TLS connection to `host:port` failed without a TLS error (a server without TLS on that port never
/// answers the handshake, which looked like a retryable timeout): the [`LockError::Tls`] to report instead when the
/// server answers a plain-text `PING` there, else `None`. The probe sends no credentials and is bounded by `bound`.
pub(crate) async fn plain_text_server(host: &str, port: u16, bound: Duration) -> Option<LockError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").await.ok()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.ok()?;
        // A simple string (`+PONG`) or an error (`-NOAUTH …`): a Redis server speaking plain text.
        matches!(first[0], b'+' | b'-').then_some(())
    };
    tokio::time::timeout(bound, probe).await.ok().flatten()?;
    let server = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    Some(LockError::tls(lock_core::backend::PlainTextServer { server }))
}

/// PEM material for TLS connections.
#[derive(Clone, Default)]
pub(crate) struct TlsOptions {
    /// The CA certificate(s) that signed the server's certificate, instead of the platform's roots.
    pub(crate) ca: Option<Vec<u8>>,
    /// The client certificate and its private key, for servers that require one.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
fn invalid(what: &str, err: impl fmt::Display) -> LockError {
    LockError::invalid(format!("{what}: {err}"))
}

impl TlsOptions {
    pub(crate) fn is_set(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }

    /// The connector for fred's `Config::tls`.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for PEM that does not parse, or in a build without a TLS feature.
    #[cfg(feature = "tls-rustls")]
    pub(crate) fn connector(&self) -> Result<fred::types::config::TlsConfig> {
        use fred::rustls::pki_types::pem::PemObject;
        use fred::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use fred::rustls::{ClientConfig, RootCertStore};

        let mut roots = RootCertStore::empty();
        match &self.ca {
            Some(ca) => {
                for cert in CertificateDer::pem_slice_iter(ca) {
                    roots.add(cert.map_err(|err| invalid("CA certificate", err))?).map_err(|err| invalid("CA", err))?;
                }
            }
            None => {
                let native = fred::rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
            }
        }
        let provider = std::sync::Arc::new(fred::rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|err| invalid("TLS versions", err))?
            .with_root_certificates(roots);
        let config = match &self.client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|err| invalid("client certificate", err))?;
                let key = PrivateKeyDer::from_pem_slice(key).map_err(|err| invalid("client key", err))?;
                builder.with_client_auth_cert(chain, key).map_err(|err| invalid("client certificate", err))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(fred::types::config::TlsConnector::from(config).into())
    }

    /// The connector for fred's `Config::tls`.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for PEM that does not parse.
    #[cfg(all(feature = "tls-native-tls", not(feature = "tls-rustls")))]
    pub(crate) fn connector(&self) -> Result<fred::types::config::TlsConfig> {
        use fred::native_tls::{Certificate, Identity, TlsConnector};

        let mut builder = TlsConnector::builder();
        if let Some(ca) = &self.ca {
            builder.disable_built_in_roots(true);
            builder.add_root_certificate(Certificate::from_pem(ca).map_err(|err| invalid("CA certificate", err))?);
        }
        if let Some((cert, key)) = &self.client {
            builder.identity(Identity::from_pkcs8(cert, key).map_err(|err| invalid("client certificate", err))?);
        }
        let connector = fred::types::config::TlsConnector::try_from(builder).map_err(|err| invalid("TLS", err))?;
        Ok(connector.into())
    }

    /// Sets the connector on `config` (when certificates were given).
    ///
    /// One rule for every deployment and both backends: certificates apply to a configuration that asks for TLS
    /// (a `rediss://`, `rediss-cluster://` or `rediss-sentinel://` URL, or a [`Config`](fred::prelude::Config) with
    /// `tls` set); given for one that does not, they are refused rather than turning TLS on behind the URL's back.
    ///
    /// # Errors
    /// As `connector`; [`LockError::InvalidArgument`] for certificates with a configuration without TLS.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    pub(crate) fn apply(&self, config: &mut fred::prelude::Config) -> Result<()> {
        if self.is_set() {
            if config.tls.is_none() {
                return Err(LockError::invalid(
                    "TLS certificates were given, but the URL does not ask for TLS: use a rediss:// or valkeys:// \
                     (or -cluster, -sentinel) URL, set Config::tls, or drop the certificates",
                ));
            }
            config.tls = Some(self.connector()?);
        }
        Ok(())
    }

    /// Refuses certificates in a build without TLS.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when certificates were given.
    #[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
    pub(crate) fn apply(&self, _config: &mut fred::prelude::Config) -> Result<()> {
        if self.is_set() {
            return Err(LockError::invalid("TLS needs lock-fred's feature tls-rustls or tls-native-tls"));
        }
        Ok(())
    }
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca.as_ref().map(|_| "<set>"))
            .field("client_certificate", &self.client.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_urls_are_refused_by_a_build_without_tls() {
        let tls = [
            "rediss://:pw@host:6380",
            "REDISS://host",
            "rediss-cluster://h:1",
            " rediss-sentinel://h:1/svc",
            "valkeys://:pw@host:6380",
            "Valkeys://host",
            "valkeys-cluster://h:1",
            "valkeys-sentinel://h:1/svc",
            "rediss+unix:///tmp/r.sock",
        ];
        for url in tls {
            let err = refuse_tls_url_without_tls(url, false).expect_err(url);
            assert!(matches!(err, LockError::InvalidArgument(_)), "{url}: {err:?}");
            assert!(err.to_string().contains("tls-rustls") && !err.to_string().contains("pw"), "{err}");
            assert!(refuse_tls_url_without_tls(url, true).is_ok(), "{url} refused by a TLS build");
        }
        let plain = [
            "redis://:pw@host",
            "redis-cluster://h:1",
            "redis-sentinel://h:1/svc",
            "valkey://h",
            "unix:///tmp/r.sock",
            "",
        ];
        for url in plain {
            assert!(refuse_tls_url_without_tls(url, false).is_ok(), "{url}");
        }
    }
}
