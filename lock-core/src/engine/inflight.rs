//! Cancel safety for acquire: the token of a request that may have been applied is released, never forgotten.
//!
//! From the moment an acquire request is sent until its reply is read, the server may hold our token. If the
//! caller's future is dropped in that window (a `select!`, a timeout), or the reply is lost, the library still knows
//! the token and releases it by compare-and-delete instead of leaving the lock to its TTL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::lock::Instances;
use crate::engine::primitive::Primitive;
use crate::seam::store::LockStore;
use crate::token::Token;

/// An acquire in flight on one or more stores. Releases on drop unless [`disarm`](Self::disarm)ed.
pub(crate) struct InFlight {
    instances: Arc<Instances>,
    target: Arc<dyn Primitive>,
    token: Token,
    timeout: Duration,
    /// The TTL the requests ask for: whatever they acquired has expired on every server `ttl` after the last of
    /// them was applied, and each is applied within `timeout` of being sent.
    ttl: Duration,
    armed: bool,
    /// Where a release on drop runs (the runtime the request was sent from).
    runtime: Option<crate::rt::Runtime>,
}

impl InFlight {
    /// An acquire of `token` for `ttl` about to be sent, each call bounded by `timeout`.
    pub(crate) fn new(
        instances: Arc<Instances>,
        target: Arc<dyn Primitive>,
        token: Token,
        ttl: Duration,
        timeout: Duration,
    ) -> Self {
        InFlight { instances, target, token, timeout, ttl, armed: true, runtime: crate::rt::current() }
    }

    /// When whatever the requests sent so far acquired has expired at the latest.
    fn expires(&self) -> Instant {
        let now = Instant::now();
        now.checked_add(self.ttl.saturating_add(self.timeout)).unwrap_or(now)
    }

    pub(crate) fn token(&self) -> &Token {
        &self.token
    }

    /// The outcome is known: nothing to clean up.
    pub(crate) fn disarm(mut self) -> Token {
        self.armed = false;
        self.token.clone()
    }

    /// Releases what may have been acquired, waiting for it (bounded), so the next try does not find our own key.
    ///
    /// Stays armed until the release has completed: if this future is dropped first (the caller was cancelled),
    /// the release may never have been sent (a client drops a request whose caller is gone), so `Drop` sends
    /// it again in the background.
    ///
    /// A give-back that got no definite answer from an instance (its call timed out, the connection broke: it may
    /// never have reached the server) is sent again there in the background until the key would have expired
    /// anyway, so a grant nobody holds does not keep others out for its whole TTL.
    pub(crate) async fn release_now(mut self) {
        let given = release_all(&self.instances.stores, &*self.target, &self.token, self.timeout, None).await;
        self.armed = false;
        if !given.settled() {
            let (instances, target, token, timeout) =
                (self.instances.clone(), self.target.clone(), self.token.clone(), self.timeout);
            let resend = resend(instances, target, token, timeout, given, self.expires());
            spawn_detached(self.runtime.as_ref(), self.target.label(), resend);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (instances, target, token) = (self.instances.clone(), self.target.clone(), self.token.clone());
        let (timeout, expires) = (self.timeout, self.expires());
        let release = async move {
            let given = release_all(&instances.stores, &*target, &token, timeout, None).await;
            resend(instances, target, token, timeout, given, expires).await;
        };
        spawn_detached(self.runtime.as_ref(), self.target.label(), release);
    }
}

/// Runs `task` in the background on `runtime` (else on the current one), or says why it cannot.
fn spawn_detached(
    runtime: Option<&crate::rt::Runtime>,
    resource: &str,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let spawned = match runtime {
        Some(runtime) => Some(crate::rt::spawn_on(runtime, task)),
        None => crate::rt::spawn_background(task),
    };
    match spawned {
        Some(task) => task.detach(),
        None => tracing::warn!(resource, "no runtime to give an acquire back on; the lock expires at its TTL"),
    }
}

/// First pause before a release is sent again to an instance that gave no definite answer.
const RESEND_PAUSE: Duration = Duration::from_millis(10);
/// Longest pause between such resends.
const RESEND_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Sends the release of `token` again where the first give-back left a doubt ([`GivenBack`]): to the instances
/// that gave no definite answer, until each answers definitely or `until` passes (the key has expired by then
/// anyway); and once more, after the acquire's own call bound, to the instances that found nothing to delete but
/// do not order commands (the acquire may have been behind the give-back, on another connection). Compare-and-
/// delete on a token nobody else has is idempotent, so a release that did reach the server finds nothing to delete.
pub(crate) async fn resend(
    instances: Arc<Instances>,
    target: Arc<dyn Primitive>,
    token: Token,
    timeout: Duration,
    given: GivenBack,
    until: Instant,
) {
    let GivenBack { mut failed, unsure } = given;
    let recheck = async {
        if unsure.is_empty() || crate::rt::sleep(timeout).await.is_err() {
            return;
        }
        let again = release_all(&instances.stores, &*target, &token, timeout, Some(&unsure)).await;
        if !again.failed.is_empty() {
            tracing::debug!(resource = target.label(), instances = ?again.failed, "give-back not confirmed; TTL applies");
        }
    };
    let retry = async {
        let mut pause = RESEND_PAUSE;
        while !failed.is_empty() {
            let Some(resume) = Instant::now().checked_add(pause).filter(|at| *at < until) else {
                tracing::debug!(resource = target.label(), instances = ?failed, "release not confirmed; TTL applies");
                return;
            };
            if crate::rt::sleep(resume.saturating_duration_since(Instant::now())).await.is_err() {
                return;
            }
            failed = release_all(&instances.stores, &*target, &token, timeout, Some(&failed)).await.failed;
            pause = pause.saturating_mul(2).min(RESEND_PAUSE_MAX);
        }
    };
    futures_util::future::join(recheck, retry).await;
}

/// What a give-back ([`release_all`]) could not settle, by index into the stores.
#[derive(Debug, Default)]
pub(crate) struct GivenBack {
    /// No definite answer (a retryable error: a timeout, a broken connection): the release may not have reached
    /// the server.
    pub(crate) failed: Vec<usize>,
    /// Nothing to delete, on a store that does not keep one caller's commands in order
    /// ([`LockStore::orders_commands`]): the acquire being given back may still be on its way on another
    /// connection, and apply after the release.
    pub(crate) unsure: Vec<usize>,
}

impl GivenBack {
    /// Whether nothing is left in doubt.
    pub(crate) fn settled(&self) -> bool {
        self.failed.is_empty() && self.unsure.is_empty()
    }
}

/// Compare-and-delete `token` on every store (or those at `only`) concurrently; returns what it could not settle
/// ([`GivenBack`]). Errors are logged.
///
/// On one instance the key it deletes was the lock itself, which waiters may have seen held: the next local waiter
/// is woken. Over Redlock it is at most a minority grant, which held nobody back (the lock as a whole was never
/// ours), and waking would only send a waiter (often the caller itself, listening while it tries) into a try that
/// the real holder still blocks.
pub(crate) async fn release_all(
    stores: &[Arc<dyn LockStore>],
    target: &dyn Primitive,
    token: &Token,
    timeout: Duration,
    only: Option<&[usize]>,
) -> GivenBack {
    let single = stores.len() == 1;
    let chosen = stores.iter().enumerate().filter(|(i, _)| only.is_none_or(|only| only.contains(i)));
    let releases = chosen.map(|(i, store)| async move {
        match crate::rt::timeout("release", timeout, target.release(store.as_ref(), token)).await {
            Ok(Ok(outcomes)) => {
                let hub = store.release_hub().filter(|_| single);
                let mut deleted = false;
                for (keys, outcome) in target.resources().iter().zip(outcomes) {
                    deleted |= outcome == crate::ReleaseOutcome::Released;
                    if let (Some(hub), crate::ReleaseOutcome::Released) = (hub, outcome) {
                        hub.wake_one(keys.channel());
                    }
                }
                (!deleted && !store.orders_commands()).then_some((i, false))
            }
            Ok(Err(err)) | Err(err) => {
                tracing::debug!(resource = target.label(), error = %err.report(), "giving an acquire back failed");
                err.is_retryable().then_some((i, true))
            }
        }
    });
    let mut given = GivenBack::default();
    for (i, failed) in futures_util::future::join_all(releases).await.into_iter().flatten() {
        if failed {
            given.failed.push(i);
        } else {
            given.unsure.push(i);
        }
    }
    given
}
