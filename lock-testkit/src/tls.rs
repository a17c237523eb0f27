//! Certificates for TLS test servers, generated at test time: a CA, a server certificate for `127.0.0.1` and
//! `localhost`, and a client certificate for mutual TLS, written as PEM files a `redis-server` can load.
//!
//! ```no_run
//! use lock_testkit::{RedisServer, TestCertificates};
//!
//! let certs = TestCertificates::generate()?;
//! let server = RedisServer::builder().with_tls(&certs).start()?;
//! // Clients trust `certs.ca_pem()` and connect to `server.tls_url()`.
//! # let _ = server;
//! # Ok::<(), lock_testkit::ServerError>(())
//! ```

use std::fmt;
use std::path::Path;

use rcgen::{
    date_time_ymd, BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::server::ServerError;

/// What the server's certificate claims, for the tests that a client must refuse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerCertificate {
    /// Valid now, for `127.0.0.1` and `localhost`, signed by the CA.
    #[default]
    Valid,
    /// Signed by the CA, for the right names, but expired in 2001.
    Expired,
    /// Signed by the CA and valid, but for `wrong.host.invalid` only.
    WrongHost,
}

/// A CA and the certificates it signed, as PEM text and as files in a temporary directory (removed on drop).
pub struct TestCertificates {
    dir: tempfile::TempDir,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

fn cert_error(err: rcgen::Error) -> ServerError {
    ServerError::Start { reason: format!("generating a test certificate failed: {err}") }
}

fn ca() -> Result<(Certificate, KeyPair), ServerError> {
    let key = KeyPair::generate().map_err(cert_error)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_error)?;
    params.distinguished_name.push(DnType::CommonName, "lock-testkit CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let cert = params.self_signed(&key).map_err(cert_error)?;
    Ok((cert, key))
}

fn leaf(
    names: &[&str],
    usage: &[ExtendedKeyUsagePurpose],
    issuer: &(Certificate, KeyPair),
    expired: bool,
) -> Result<(String, String), ServerError> {
    let key = KeyPair::generate().map_err(cert_error)?;
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).map_err(cert_error)?;
    params.distinguished_name.push(DnType::CommonName, "lock-testkit");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = usage.to_vec();
    if expired {
        params.not_before = date_time_ymd(2000, 1, 1);
        params.not_after = date_time_ymd(2001, 1, 1);
    }
    let cert = params.signed_by(&key, &issuer.0, &issuer.1).map_err(cert_error)?;
    Ok((cert.pem(), key.serialize_pem()))
}

impl TestCertificates {
    /// A fresh CA with a valid server certificate and a client certificate.
    ///
    /// # Errors
    /// [`ServerError::Start`] when a key or certificate cannot be generated, [`ServerError::Io`] when the files
    /// cannot be written.
    pub fn generate() -> Result<Self, ServerError> {
        Self::with_server(ServerCertificate::Valid)
    }

    /// A fresh CA whose server certificate is of the given kind (and a valid client certificate).
    ///
    /// # Errors
    /// As [`generate`](Self::generate).
    pub fn with_server(server: ServerCertificate) -> Result<Self, ServerError> {
        let ca = ca()?;
        let (names, expired): (&[&str], bool) = match server {
            ServerCertificate::Valid => (&["127.0.0.1", "localhost"], false),
            ServerCertificate::Expired => (&["127.0.0.1", "localhost"], true),
            ServerCertificate::WrongHost => (&["wrong.host.invalid"], false),
        };
        // A server presents its certificate as a client too, on the cluster bus and to its primary.
        let server_usage = [ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let (server_cert, server_key) = leaf(names, &server_usage, &ca, expired)?;
        let (client_cert_pem, client_key_pem) =
            leaf(&["lock-testkit-client"], &[ExtendedKeyUsagePurpose::ClientAuth], &ca, false)?;
        let dir = tempfile::Builder::new().prefix("lock-testkit-tls-").tempdir()?;
        let ca_pem = ca.0.pem();
        for (name, pem) in [
            ("ca.crt", &ca_pem),
            ("server.crt", &server_cert),
            ("server.key", &server_key),
            ("client.crt", &client_cert_pem),
            ("client.key", &client_key_pem),
        ] {
            std::fs::write(dir.path().join(name), pem)?;
        }
        Ok(TestCertificates { dir, ca_pem, client_cert_pem, client_key_pem })
    }

    /// The CA certificate (PEM) a client must trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The client certificate (PEM), for mutual TLS.
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert_pem
    }

    /// The client certificate's private key (PEM).
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    /// The directory holding `ca.crt`, `server.crt`, `server.key`, `client.crt` and `client.key`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl fmt::Debug for TestCertificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys stay out of logs, even test keys.
        f.debug_struct("TestCertificates").field("dir", &self.dir.path()).finish_non_exhaustive()
    }
}
