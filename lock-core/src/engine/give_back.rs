//! Every give-back of a token the engine sends (an acquire in flight that cannot be used, a waiter leaving its
//! queue) and every resend of a give-back or release, and the one rule that decides whether such a give-back may
//! run: [`may_give_back`].
//!
//! From the moment an acquire request is sent until its reply is read, the server may hold our token. If the
//! caller's future is dropped in that window (a `select!`, a timeout), or the reply is lost, or it arrives too late
//! to use, the library still knows the token and releases it by compare-and-delete instead of leaving the lock to
//! its TTL. A give-back that got no definite answer is sent again in the background. Compare-and-delete is safe to
//! send late only while nothing can be granted under the same token in between: the rule says when that is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::instances::Instances;
use crate::engine::primitive::Primitive;
use crate::seam::store::LockStore;
use crate::token::Token;

/// Who sends a token, which decides whether a give-back of it may run (see [`may_give_back`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenScope {
    /// A try whose token was drawn for it alone: no other acquire ever sends it.
    Try,
    /// One try of a waiter that sends the same token with every try (a fair queue's waiter, a read-write lock's
    /// writer: the token is its place in the queue).
    WaitersTry,
    /// Such a waiter itself, giving its token back when it stops waiting (out of budget, failed, dropped).
    Waiter,
    /// A guard's token: acquired, so no acquire sends it again.
    Guard,
}

/// Whether a give-back of a token sent in `scope` may run, now or resent later: only if no later grant can carry
/// that token. Compare-and-delete cannot tell a grant it was meant for from a later grant under the same token, so a
/// give-back that lands after such a grant deletes it while its guard believes it holds (review 4: a fair waiter's
/// late grant, given back under the token its next try was granted with, let the next waiter in).
///
/// The one place this rule lives: every give-back and resend the engine sends asks it, through [`InFlight`] and
/// [`resend`]. A new way to acquire picks its scope; it cannot skip the question.
pub(crate) fn may_give_back(scope: TokenScope) -> bool {
    match scope {
        // No other acquire sends the token.
        TokenScope::Try | TokenScope::Guard => true,
        // The waiter's next try sends the same token: what this try may hold is the waiter's, kept for that try (a
        // retry with the token returns the same grant) and given back by the waiter when it stops.
        TokenScope::WaitersTry => false,
        // The waiter has stopped: nothing sends its token again.
        TokenScope::Waiter => true,
    }
}

/// An acquire in flight on one or more stores. Releases on drop unless [`disarm`](Self::disarm)ed, if its scope
/// [may give back](may_give_back).
pub(crate) struct InFlight {
    instances: Arc<Instances>,
    target: Arc<dyn Primitive>,
    token: Token,
    scope: TokenScope,
    timeout: Duration,
    /// The TTL the requests ask for: whatever they acquired has expired on every server `ttl` after the last of
    /// them was applied, and each is applied within `timeout` of being sent.
    ttl: Duration,
    armed: bool,
    /// Where a release on drop runs (the runtime the request was sent from).
    runtime: Option<crate::rt::Runtime>,
}

impl InFlight {
    /// An acquire of `token` for `ttl` about to be sent in `scope`, each call bounded by `timeout`.
    pub(crate) fn new(
        instances: Arc<Instances>,
        target: Arc<dyn Primitive>,
        token: Token,
        scope: TokenScope,
        ttl: Duration,
        timeout: Duration,
    ) -> Self {
        let armed = may_give_back(scope);
        InFlight { instances, target, token, scope, timeout, ttl, armed, runtime: crate::rt::current() }
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
    ///
    /// Gives nothing back in a scope that [may not](may_give_back).
    pub(crate) async fn release_now(mut self) {
        if !self.armed {
            return;
        }
        let given = release_all(&self.instances.stores, &*self.target, &self.token, self.timeout, None).await;
        self.armed = false;
        if !given.settled() {
            let resend = Resend {
                instances: self.instances.clone(),
                target: self.target.clone(),
                token: self.token.clone(),
                scope: self.scope,
                timeout: self.timeout,
            };
            resend.spawn(self.runtime.as_ref(), given, self.expires());
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let resend = Resend {
            instances: self.instances.clone(),
            target: self.target.clone(),
            token: self.token.clone(),
            scope: self.scope,
            timeout: self.timeout,
        };
        let expires = self.expires();
        let label = resend.target.label().to_owned();
        let release = async move {
            let given = release_all(&resend.instances.stores, &*resend.target, &resend.token, resend.timeout, None);
            let given = given.await;
            resend.run(given, expires).await;
        };
        spawn_detached(self.runtime.as_ref(), &label, release);
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
        None => tracing::warn!(resource, "no runtime to send a give-back or release on; the lock expires at its TTL"),
    }
}

/// First pause before a release is sent again to an instance that gave no definite answer.
const RESEND_PAUSE: Duration = Duration::from_millis(10);
/// Longest pause between such resends.
const RESEND_PAUSE_MAX: Duration = Duration::from_secs(1);

/// A give-back or release of `token` on `instances` that may have to be sent again (see [`run`](Self::run)).
pub(crate) struct Resend {
    pub(crate) instances: Arc<Instances>,
    pub(crate) target: Arc<dyn Primitive>,
    pub(crate) token: Token,
    pub(crate) scope: TokenScope,
    /// Bound on each call.
    pub(crate) timeout: Duration,
}

impl Resend {
    /// [`run`](Self::run) in the background on `runtime` (else on the current one).
    pub(crate) fn spawn(self, runtime: Option<&crate::rt::Runtime>, given: GivenBack, until: Instant) {
        let label = self.target.label().to_owned();
        spawn_detached(runtime, &label, async move { self.run(given, until).await });
    }

    /// Sends the release of the token again where the first give-back left a doubt ([`GivenBack`]): to the
    /// instances that gave no definite answer, until each answers definitely or `until` passes (the key has expired
    /// by then anyway); and once more, after the acquire's own call bound, to the instances that found nothing to
    /// delete but do not order commands (the acquire may have been behind the give-back, on another connection).
    /// Compare-and-delete on a token nobody else has is idempotent, so a release that did reach the server finds
    /// nothing to delete. Sends nothing in a scope that [may not give back](may_give_back).
    pub(crate) async fn run(self, given: GivenBack, until: Instant) {
        if !may_give_back(self.scope) {
            return;
        }
        let Resend { instances, target, token, timeout, .. } = self;
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
async fn release_all(
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
