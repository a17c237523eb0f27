//! etcd's errors as lock-core's: one mapping, by gRPC status code and etcd's words, for every request.

use etcd_client::Error;
use lock_core::LockError;

/// The source of the [`LockError::Backend`] for etcd's `NOSPACE` alarm: the database reached its quota, and etcd
/// refuses every write (and every lease grant) until an operator compacts, defragments and disarms the alarm
/// (`etcdctl compact`, `etcdctl defrag`, `etcdctl alarm disarm`). Not retried: it does not pass by itself.
#[derive(Debug)]
#[non_exhaustive]
pub struct NoSpace {
    /// etcd's message.
    pub message: String,
}

impl std::fmt::Display for NoSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "etcd's database is full (the NOSPACE alarm: {}); it refuses every write until an operator compacts, \
             defragments and disarms the alarm",
            self.message
        )
    }
}

impl std::error::Error for NoSpace {}

/// `err` as a [`LockError`]:
///
/// - `Unavailable` for what passes (no leader, a member restarting, a request the server timed out, a connection
///   refused or lost): retried within a wait budget;
/// - `Auth` for refused credentials, a missing permission, an expired token;
/// - `Backend` with [`NoSpace`] for the `NOSPACE` alarm;
/// - `InvalidArgument` for what the client refused before sending;
/// - `Backend` for the rest.
pub(crate) fn mapped(err: Error) -> LockError {
    use etcd_client::Error as E;
    match err {
        E::GRpcStatus(status) => {
            use tonic::Code;
            let message = status.message().to_owned();
            let auth = ["authentication failed", "user name is empty", "invalid auth token", "permission denied"]
                .iter()
                .any(|words| message.contains(words));
            match status.code() {
                _ if auth => LockError::auth(E::GRpcStatus(status)),
                Code::Unauthenticated | Code::PermissionDenied => LockError::auth(E::GRpcStatus(status)),
                Code::ResourceExhausted if message.contains("space exceeded") => {
                    LockError::backend(NoSpace { message })
                }
                Code::Unavailable | Code::DeadlineExceeded | Code::Aborted => {
                    LockError::unavailable(E::GRpcStatus(status))
                }
                // etcd's own "request timed out", "leader changed", "no leader" come as Unknown through some paths;
                // a connection broken under a request (a member restarting) is a status with the transport's error
                // as its source ("h2 protocol error: … broken pipe").
                Code::Unknown | Code::Internal | Code::Cancelled
                    if std::error::Error::source(&status).is_some()
                        || ["timed out", "leader changed", "no leader", "h2 protocol error", "connection"]
                            .iter()
                            .any(|w| message.contains(w)) =>
                {
                    LockError::unavailable(E::GRpcStatus(status))
                }
                _ => LockError::backend(E::GRpcStatus(status)),
            }
        }
        err @ (E::TransportError(_) | E::IoError(_)) => LockError::unavailable(err),
        E::InvalidArgs(words) => LockError::invalid(format!("etcd client: {words}")),
        E::InvalidUri(err) => LockError::invalid(format!("an etcd endpoint is not a URI: {err}")),
        E::EndpointError(words) => LockError::invalid(format!("etcd endpoint: {words}")),
        other => LockError::backend(other),
    }
}
