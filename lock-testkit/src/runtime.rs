//! Runs a test body on one of the runtimes the suite supports; the macro picks one by name.
//!
//! These are the roots of synchronous `#[test]` functions (what `conformance_tests!` writes): each blocks the test's
//! thread on its future. They must never be called from async code.

use std::future::Future;
use std::time::Duration;

/// Every conformance case ends within this bound or fails.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `fut` on a fresh multi-threaded tokio runtime (2 workers, timers and I/O enabled).
///
/// # Panics
/// When the runtime cannot be built, or `fut` runs past [`CASE_TIMEOUT`].
pub fn tokio<F: Future>(fut: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|err| panic!("cannot build a tokio runtime: {err}"));
    runtime.block_on(bounded(fut))
}

/// Runs `fut` on async-std's executor (feature `async-std`).
///
/// # Panics
/// When `fut` runs past [`CASE_TIMEOUT`].
#[cfg(feature = "async-std")]
pub fn async_std<F: Future>(fut: F) -> F::Output {
    async_std::task::block_on(bounded(fut))
}

/// Runs `fut` with `smol::block_on`.
///
/// # Panics
/// When `fut` runs past [`CASE_TIMEOUT`].
pub fn smol<F: Future>(fut: F) -> F::Output {
    smol::block_on(bounded(fut))
}

async fn bounded<F: Future>(fut: F) -> F::Output {
    use futures_util::future::{select, Either};
    match select(std::pin::pin!(fut), async_io::Timer::after(CASE_TIMEOUT)).await {
        Either::Left((out, _)) => out,
        Either::Right(_) => panic!("test case did not finish within {CASE_TIMEOUT:?}"),
    }
}

/// Sleeps on any runtime (an `async-io` timer, which runs without a reactor of its own).
///
/// # Errors
/// None.
///
/// # Cancel safety
/// Cancel-safe.
pub async fn sleep(d: Duration) {
    async_io::Timer::after(d).await;
}
