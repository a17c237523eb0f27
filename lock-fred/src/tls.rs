//! TLS beyond what a `rediss://` URL says: a custom CA, and a client certificate for mutual TLS, turned into the
//! TLS connector fred takes (rustls with its `ring` provider under `tls-rustls`, the platform's library under
//! `tls-native-tls`; rustls when both are on).

use std::fmt;

use lock_core::{LockError, Result};

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
    /// # Errors
    /// As `connector`.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    pub(crate) fn apply(&self, config: &mut fred::prelude::Config) -> Result<()> {
        if self.is_set() {
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
