//! Mapping redis-rs and deadpool errors to [`LockError`], keeping the client error as the source.

use std::time::Duration;

use deadpool::managed::TimeoutType;
use lock_core::backend::server_error::ServerErrorKind;
use lock_core::backend::Call;
use lock_core::LockError;
use redis::{ErrorKind, RedisError};

use crate::pool::PoolError;

/// The deadlines an error may report as passed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    /// Bound on one command's reply.
    pub(crate) command: Duration,
    /// Bound on opening a connection. A store call as a whole is bounded by [`call`](Self::call).
    pub(crate) connect: Duration,
}

impl Deadlines {
    /// Bound on one store call as a whole: opening a connection, then one command.
    pub(crate) fn call(&self) -> Duration {
        self.connect.saturating_add(self.command)
    }
}

/// Maps a redis error from `operation`; `call` has the keys a `WRONGTYPE` may refer to, and `after` is
/// the deadline a timeout of this step missed.
pub(crate) fn from_redis(
    err: RedisError,
    operation: &'static str,
    call: Option<&Call<'_>>,
    after: Duration,
) -> LockError {
    // What the server said means the same on Redis and Valkey, whichever client read it: lock-core classifies it
    // (also the connection setup's AUTH/HELLO errors, whose text carries the server's code).
    let words = server_words(&err);
    let kind = ServerErrorKind::of(&words);
    if kind != ServerErrorKind::Other {
        return kind.into_lock_error(&words, call, Box::new(err));
    }
    if is_auth(&err) {
        return LockError::auth(err);
    }
    if is_tls_failure(&err) {
        return LockError::tls(err);
    }
    if err.is_timeout() {
        // redis-rs reports its response and connection timeouts as I/O `TimedOut`.
        return LockError::timeout(operation, after);
    }
    if is_unavailable(&err) {
        return LockError::unavailable(err);
    }
    if matches!(err.kind(), ErrorKind::InvalidClientConfig | ErrorKind::EmptySentinelList) {
        if err.to_string().contains("TLS") {
            // redis-rs says its own feature is missing; ours are what the user can turn on.
            return LockError::invalid(format!(
                "{err} (enable one of lock-redis-rs's features {})",
                crate::tls::FEATURES
            ));
        }
        return LockError::invalid(format!("invalid redis connection settings: {err}"));
    }

    LockError::backend(err)
}

/// The error to report instead of `err` when the first command to the server at `addr` could not read the reply
/// as the Redis protocol (an HTTP server, say, on that port): one line naming the server, not redis-rs's parse error.
pub(crate) fn not_redis(err: &LockError, addr: &redis::ConnectionAddr) -> Option<LockError> {
    let LockError::Backend { source, .. } = err else { return None };
    let redis = source.downcast_ref::<RedisError>()?;
    (redis.kind() == ErrorKind::Parse)
        .then(|| LockError::backend(lock_core::backend::NotRedis { server: addr.to_string() }))
}

/// Whether the error is a failed TLS handshake (a certificate the client or the server refused), rather than a
/// transport failure that may heal. The TLS libraries report it as an I/O error whose text names the certificate.
fn is_tls_failure(err: &RedisError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("certificate") || text.contains("handshake") || text.contains("tls alert") {
            return true;
        }
        cause = e.source();
    }
    false
}

/// The server's words as it sent them: redis-rs renders a known code in its own spelling (`NoPerm: …`,
/// `ReadOnly: …`, `"WRONGTYPE": …`), so the code and the detail are put back together; an error without a code
/// (the connection setup's, whose text quotes the server) as redis-rs renders it.
fn server_words(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        (None, _) => err.to_string(),
    }
}

/// redis-rs's own word for failed authentication (the server's codes are classified by lock-core, above).
fn is_auth(err: &RedisError) -> bool {
    err.kind() == ErrorKind::AuthenticationFailed
}

fn is_unavailable(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_refusal()
        || err.is_connection_dropped()
        || matches!(
            err.kind(),
            ErrorKind::ClusterConnectionNotFound
                // No Sentinel names a primary that is up: during a failover, until the replica is promoted.
                | ErrorKind::MasterNameNotFoundBySentinel
        )
}

/// Whether the connection that returned `err` may be broken or out of step, so it must not be reused.
pub(crate) fn breaks_connection(err: &RedisError) -> bool {
    // I/O errors other than a timeout (see `Pooled::timed_out`), what redis-rs says needs a reconnect (parse
    // errors, failed auth), and a node that is no longer the primary.
    (err.is_io_error() && !err.is_timeout())
        || err.is_unrecoverable_error()
        || err.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

/// Maps a failure to check a connection out of the pool.
pub(crate) fn from_pool(err: PoolError, operation: &'static str, d: Deadlines) -> LockError {
    match err {
        // Only opening a connection reports backend errors (a failed recycle just drops the connection).
        PoolError::Backend(err) => from_redis(err, operation, None, d.connect),
        PoolError::Timeout(TimeoutType::Create) => LockError::timeout(operation, d.connect),
        PoolError::Timeout(_) => LockError::timeout(operation, d.command),
        PoolError::NoRuntimeSpecified => LockError::NoRuntime(operation),
        err @ PoolError::Closed => LockError::unavailable(err),
        err @ PoolError::PostCreateHook(_) => LockError::backend(err),
    }
}
