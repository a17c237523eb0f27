//! Sleep, time out and spawn on whichever enabled runtime is current: the runtime abstraction of lock-core, public
//! so that backends time out and spawn exactly as the engine does.
//!
//! tokio is used when a tokio runtime is current on this thread. Otherwise, with `rt-async-std` or `rt-smol`,
//! timers come from `async-io` (the reactor async-std and smol share, which also runs outside their executors)
//! and tasks go to async-std's or smol's global executor. With none of these, operations that need a runtime
//! return [`LockError::NoRuntime`] instead of panicking; so do timers on a tokio runtime built without
//! `enable_time()` (tokio itself would panic there).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::{AbortHandle, Abortable};

use crate::error::{LockError, Result};

/// What a timer on a tokio runtime without its time driver reports.
#[cfg(feature = "rt-tokio")]
const TOKIO_WITHOUT_TIME: LockError =
    LockError::NoRuntime("timers: the current tokio runtime was built without `enable_time()`");

/// Builds a tokio timer, which panics at creation when the runtime has no time driver; that panic becomes
/// [`LockError::NoRuntime`] (the panic hook still prints it once per attempt).
#[cfg(feature = "rt-tokio")]
fn tokio_timer<T>(make: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(make)).map_err(|_| TOKIO_WITHOUT_TIME)
}

#[derive(Clone, Debug)]
pub(crate) enum Runtime {
    #[cfg(feature = "rt-tokio")]
    Tokio(tokio::runtime::Handle),
    #[cfg(feature = "rt-async-std")]
    AsyncStd,
    // Unused when async-std is also enabled: its executor is preferred then.
    #[cfg(feature = "rt-smol")]
    #[allow(dead_code)]
    Smol,
}

/// The runtime to use from this thread, if any.
pub(crate) fn current() -> Option<Runtime> {
    #[cfg(feature = "rt-tokio")]
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        return Some(Runtime::Tokio(handle));
    }
    #[cfg(feature = "rt-async-std")]
    {
        Some(Runtime::AsyncStd)
    }
    #[cfg(all(feature = "rt-smol", not(feature = "rt-async-std")))]
    {
        Some(Runtime::Smol)
    }
    #[cfg(not(any(feature = "rt-async-std", feature = "rt-smol")))]
    {
        None
    }
}

/// Sleeps for `d` on the current runtime.
///
/// # Errors
/// [`LockError::NoRuntime`] when no enabled runtime is available (or tokio's has no timers).
///
/// # Cancel safety
/// Cancel-safe: dropping it just stops the sleep.
#[cfg_attr(
    not(any(feature = "rt-tokio", feature = "rt-async-std", feature = "rt-smol")),
    allow(unreachable_code, unused_variables)
)]
pub async fn sleep(d: Duration) -> Result<()> {
    let Some(runtime) = current() else {
        return Err(LockError::NoRuntime("sleep"));
    };
    match runtime {
        #[cfg(feature = "rt-tokio")]
        Runtime::Tokio(_) => tokio_timer(|| tokio::time::sleep(d))?.await,
        #[cfg(any(feature = "rt-async-std", feature = "rt-smol"))]
        _ => {
            async_io::Timer::after(d).await;
        }
    }
    Ok(())
}

/// Runs `fut` for at most `after` on the current runtime's timer.
///
/// The returned [`Timed`] holds `fut` and the timer side by side and polls `fut` where it lies: an engine call's
/// state is a few kB, and a future that is moved is copied whole.
///
/// # Errors
/// [`LockError::Timeout`] naming `operation` when the deadline passes first (the future is dropped), or
/// [`LockError::NoRuntime`].
///
/// # Cancel safety
/// As cancel-safe as `fut`: dropping this drops `fut`.
#[cfg_attr(not(any(feature = "rt-tokio", feature = "rt-async-std", feature = "rt-smol")), allow(unused_variables))]
pub fn timeout<F: Future>(operation: &'static str, after: Duration, fut: F) -> Timed<F> {
    let state = match current() {
        #[cfg(feature = "rt-tokio")]
        Some(Runtime::Tokio(_)) => match tokio_timer(|| tokio::time::timeout(after, fut)) {
            Ok(inner) => TimedState::Tokio { inner, operation, after },
            Err(err) => TimedState::Failed { error: Some(err) },
        },
        #[cfg(any(feature = "rt-async-std", feature = "rt-smol"))]
        Some(_) => TimedState::Io { fut, timer: async_io::Timer::after(after), operation, after },
        #[allow(unreachable_patterns)]
        _ => TimedState::Failed { error: Some(LockError::NoRuntime(operation)) },
    };
    Timed { state }
}

/// `fut` with no timer of this crate: for a call whose store bounds it itself, within the caller's bound (see
/// [`LockStore::call_bound`](crate::LockStore::call_bound)).
pub(crate) fn untimed<F: Future>(fut: F) -> Timed<F> {
    Timed { state: TimedState::Untimed { fut } }
}

/// tokio's timeout, or a type that is never built when the `rt-tokio` feature is off.
#[cfg(feature = "rt-tokio")]
type TokioTimeout<F> = tokio::time::Timeout<F>;
#[cfg(not(feature = "rt-tokio"))]
type TokioTimeout<F> = Never<F>;

/// async-io's timer, or a type that is never built without `rt-async-std` and `rt-smol`.
#[cfg(any(feature = "rt-async-std", feature = "rt-smol"))]
type IoTimer = async_io::Timer;
#[cfg(not(any(feature = "rt-async-std", feature = "rt-smol")))]
type IoTimer = Never<std::time::Instant>;

/// A future of a runtime this build does not have: it cannot be built.
#[allow(dead_code)]
#[derive(Debug)]
struct Never<T>(std::convert::Infallible, std::marker::PhantomData<T>);

impl<T> Future for Never<T> {
    type Output = T;
    fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<T> {
        match self.0 {}
    }
}

pin_project_lite::pin_project! {
    /// A future bounded by the current runtime's timer: what [`timeout`] returns.
    #[must_use = "futures do nothing unless polled"]
    pub struct Timed<F> {
        #[pin]
        state: TimedState<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = TimedProj]
    enum TimedState<F> {
        // On tokio: its own timeout combinator.
        Tokio { #[pin] inner: TokioTimeout<F>, operation: &'static str, after: Duration },
        // On async-std or smol: the future raced against an async-io timer.
        Io { #[pin] fut: F, timer: IoTimer, operation: &'static str, after: Duration },
        // No timer to run on: the error, once.
        Failed { error: Option<LockError> },
        // Bounded by the store itself (see `untimed`).
        Untimed { #[pin] fut: F },
    }
}

impl<F> std::fmt::Debug for Timed<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.state {
            TimedState::Tokio { operation, after, .. } | TimedState::Io { operation, after, .. } => {
                f.debug_struct("Timed").field("operation", operation).field("after", after).finish_non_exhaustive()
            }
            TimedState::Failed { error } => f.debug_struct("Timed").field("error", error).finish(),
            TimedState::Untimed { .. } => f.debug_struct("Timed").finish_non_exhaustive(),
        }
    }
}

#[cfg(feature = "rt-tokio")]
fn tokio_poll<F: Future>(
    inner: std::pin::Pin<&mut TokioTimeout<F>>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<std::result::Result<F::Output, ()>> {
    inner.poll(cx).map(|out| out.map_err(|_elapsed| ()))
}

#[cfg(not(feature = "rt-tokio"))]
fn tokio_poll<F: Future>(
    inner: std::pin::Pin<&mut TokioTimeout<F>>,
    _: &mut std::task::Context<'_>,
) -> std::task::Poll<std::result::Result<F::Output, ()>> {
    match inner.as_ref().get_ref().0 {}
}

impl<F: Future> Future for Timed<F> {
    type Output = Result<F::Output>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        match self.project().state.project() {
            TimedProj::Tokio { inner, operation, after } => {
                tokio_poll(inner, cx).map(|out| out.map_err(|()| LockError::timeout(operation, *after)))
            }
            TimedProj::Io { fut, timer, operation, after } => {
                if let Poll::Ready(out) = fut.poll(cx) {
                    return Poll::Ready(Ok(out));
                }
                match std::pin::Pin::new(timer).poll(cx) {
                    Poll::Ready(_) => Poll::Ready(Err(LockError::timeout(operation, *after))),
                    Poll::Pending => Poll::Pending,
                }
            }
            TimedProj::Untimed { fut } => fut.poll(cx).map(Ok),
            TimedProj::Failed { error } => match error.take() {
                Some(err) => Poll::Ready(Err(err)),
                None => Poll::Pending,
            },
        }
    }
}

/// The runtimes this build of lock-core can sleep and spawn on (its `rt-*` features), in the order it prefers
/// them when several could serve: `"tokio"` when a tokio runtime is current, then `"async-std"`, then `"smol"`.
pub fn compiled() -> &'static [&'static str] {
    &[
        #[cfg(feature = "rt-tokio")]
        "tokio",
        #[cfg(feature = "rt-async-std")]
        "async-std",
        #[cfg(feature = "rt-smol")]
        "smol",
    ]
}

static LIVE_TASKS: AtomicUsize = AtomicUsize::new(0);
static LIVE_WATCHDOGS: AtomicUsize = AtomicUsize::new(0);

/// Number of renewal watchdogs running now (one per auto-renewed guard that is neither released nor dropped).
pub fn live_renewal_tasks() -> usize {
    LIVE_WATCHDOGS.load(Ordering::SeqCst)
}

/// Counts one running watchdog from creation until drop.
pub(crate) struct WatchdogCount;

impl WatchdogCount {
    pub(crate) fn new() -> Self {
        LIVE_WATCHDOGS.fetch_add(1, Ordering::SeqCst);
        WatchdogCount
    }
}

impl Drop for WatchdogCount {
    fn drop(&mut self) {
        LIVE_WATCHDOGS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Number of background tasks spawned through lock-core (best-effort releases, renewals, backends' subscribers)
/// that have not yet finished or been cancelled. Tests use it to prove nothing leaks.
pub fn live_background_tasks() -> usize {
    LIVE_TASKS.load(Ordering::SeqCst)
}

/// Counts one live background task from creation until drop.
struct LiveTask;

impl LiveTask {
    fn new() -> Self {
        LIVE_TASKS.fetch_add(1, Ordering::SeqCst);
        LiveTask
    }
}

impl Drop for LiveTask {
    fn drop(&mut self) {
        LIVE_TASKS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A task spawned by [`spawn_background`]; cancelled when this handle is dropped (unless
/// [`detach`](BackgroundTask::detach)ed).
#[derive(Debug)]
pub struct BackgroundTask {
    abort: Option<AbortHandle>,
}

impl BackgroundTask {
    /// Lets the task run to completion on its own.
    pub fn detach(mut self) {
        self.abort = None;
    }
}

impl Drop for BackgroundTask {
    fn drop(&mut self) {
        if let Some(abort) = self.abort.take() {
            abort.abort();
        }
    }
}

/// Spawns `fut` on the current runtime (see the crate docs on runtimes); `None` when there is none.
///
/// For backends that need a background task (a subscriber connection, say) on whatever runtime the caller uses.
/// The task counts in [`live_background_tasks`] until it ends or is cancelled.
#[cfg_attr(
    not(any(feature = "rt-tokio", feature = "rt-async-std", feature = "rt-smol")),
    allow(unreachable_code, unused_variables)
)]
pub fn spawn_background<F>(fut: F) -> Option<BackgroundTask>
where
    F: Future<Output = ()> + Send + 'static,
{
    Some(spawn_on(&current()?, fut))
}

/// Spawns `fut` on `runtime` (one captured earlier, so that work started on a tokio runtime is finished there even
/// when the trigger, a guard's `Drop` say, runs on another thread).
#[cfg_attr(
    not(any(feature = "rt-tokio", feature = "rt-async-std", feature = "rt-smol")),
    allow(unreachable_code, unused_variables)
)]
pub(crate) fn spawn_on<F>(runtime: &Runtime, fut: F) -> BackgroundTask
where
    F: Future<Output = ()> + Send + 'static,
{
    let (handle, registration) = AbortHandle::new_pair();
    let live = LiveTask::new();
    let task = async move {
        let _live = live;
        // An aborted task ends at its next poll; the abort wakes it.
        let _ = Abortable::new(fut, registration).await;
    };
    match *runtime {
        #[cfg(feature = "rt-tokio")]
        Runtime::Tokio(ref h) => drop(h.spawn(task)),
        #[cfg(feature = "rt-async-std")]
        Runtime::AsyncStd => drop(async_std::task::spawn(task)),
        #[cfg(feature = "rt-smol")]
        Runtime::Smol => smol::spawn(task).detach(),
    }
    BackgroundTask { abort: Some(handle) }
}
