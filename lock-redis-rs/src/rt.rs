//! Timers on the caller's runtime: tokio's when a tokio runtime is current, otherwise async-io's (smol, and
//! async-std, which shares that reactor). This is the choice redis-rs and lock-core make too.
//!
//! lock-core has the same helpers but keeps them private; `deadpool-runtime` provides the timers.

use std::future::Future;
use std::time::Duration;

use deadpool_runtime::Runtime;
use lock_core::{LockError, Result};

fn current() -> Option<Runtime> {
    #[cfg(feature = "tokio")]
    if tokio::runtime::Handle::try_current().is_ok() {
        return Some(Runtime::Tokio1);
    }
    #[cfg(feature = "smol")]
    {
        Some(Runtime::Smol2)
    }
    #[cfg(not(feature = "smol"))]
    {
        None
    }
}

/// Runs `fut` for at most `after`.
///
/// # Errors
/// [`LockError::Timeout`] naming `operation` when the deadline passes first (`fut` is dropped), or
/// [`LockError::NoRuntime`].
pub(crate) async fn timeout<F: Future>(operation: &'static str, after: Duration, fut: F) -> Result<F::Output> {
    let runtime = current().ok_or(LockError::NoRuntime(operation))?;
    deadpool_runtime::timeout(runtime, after, fut).await.ok_or(LockError::Timeout { operation, after })
}

/// Sleeps for `d`.
///
/// # Errors
/// [`LockError::NoRuntime`] (at once) when no enabled runtime is current.
pub(crate) async fn sleep(operation: &'static str, d: Duration) -> Result<()> {
    match timeout(operation, d, std::future::pending::<std::convert::Infallible>()).await {
        Err(LockError::Timeout { .. }) => Ok(()),
        Err(err) => Err(err),
        Ok(never) => match never {},
    }
}
