//! fred errors → [`LockError`], keeping the fred error as the source.

use std::time::Duration;

use fred::error::{Error, ErrorKind};
use lock_core::backend::server_error::ServerErrorKind;
use lock_core::backend::Call;
use lock_core::LockError;

/// fred 10.1 reports a command it could not write because no connection was up with `ErrorKind::Unknown` and one
/// of these messages (seen right after a server restart, while the client reconnects).
const NOT_CONNECTED: [&str; 2] = ["Failed to route command.", "Too many failed write attempts."];

/// A command timed out while fred had no connection to the server (it queues commands and reconnects in the
/// background, so a server that is down looks like a slow one): the same failure the redis-rs store reports at
/// once, [`LockError::Unavailable`].
pub(crate) fn not_connected(err: LockError, client: &impl fred::interfaces::ClientLike) -> LockError {
    match err {
        LockError::Timeout { operation, after, .. } if !client.is_connected() => {
            LockError::unavailable(NotConnected { operation, after })
        }
        other => other,
    }
}

/// The source of [`not_connected`]'s error.
#[derive(Debug)]
struct NotConnected {
    operation: &'static str,
    after: Duration,
}

impl std::fmt::Display for NotConnected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no connection to the server ({} waited {:?} while fred reconnects)", self.operation, self.after)
    }
}

impl std::error::Error for NotConnected {}

/// Maps the error of `call`.
pub(crate) fn from_call(err: Error, call: &Call<'_>, after: Duration) -> LockError {
    map(err, Some(call), call.operation, after)
}

/// Whether an error text is a failed TLS handshake (a certificate one side refused).
fn is_tls_failure(details: &str) -> bool {
    let text = details.to_ascii_lowercase();
    text.contains("certificate") || text.contains("handshake") || text.contains("tls alert")
}

/// Maps an error that is not about a particular key (connecting, subscribing).
pub(crate) fn from_fred(err: Error, operation: &'static str, after: Duration) -> LockError {
    map(err, None, operation, after)
}

fn map(err: Error, call: Option<&Call<'_>>, operation: &'static str, after: Duration) -> LockError {
    // What the server said means the same on Redis and Valkey, whichever client read it: lock-core classifies it.
    // fred reports server errors with its own kinds (`Auth`, `Unknown`, …) and the server's words as the details.
    let kind = ServerErrorKind::of(err.details());
    if kind != ServerErrorKind::Other {
        let details = err.details().to_owned();
        return kind.into_lock_error(&details, call, Box::new(err));
    }
    match err.kind() {
        ErrorKind::Timeout => {
            // `LockError::Timeout` carries no source; keep fred's text in the logs.
            tracing::debug!(operation, error = %err, "fred command timed out");
            LockError::timeout(operation, after)
        }
        // No connection to write to, a connection that broke, or a command dropped with its connection: all
        // transient from the lock's point of view. `Backpressure` (only with `max_command_buffer_len`) is an
        // overloaded client, equally worth retrying.
        // A refused certificate reaches fred as an I/O error on the handshake.
        ErrorKind::IO if is_tls_failure(err.details()) => LockError::tls(err),
        ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Routing | ErrorKind::Backpressure => {
            LockError::unavailable(err)
        }
        ErrorKind::Unknown if NOT_CONNECTED.contains(&err.details()) => LockError::unavailable(err),
        // No Sentinel reachable, or none names a primary that answers as one: during a failover.
        ErrorKind::Sentinel => LockError::unavailable(err),
        ErrorKind::Auth => LockError::auth(err),
        #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
        ErrorKind::Tls => LockError::tls(err),
        // A URL or configuration fred rejects before any I/O is the caller's input, not a server failure.
        ErrorKind::Url | ErrorKind::Config => {
            LockError::invalid(format!("fred rejected the configuration: {}", err.details()))
        }
        _ => LockError::backend(err),
    }
}
