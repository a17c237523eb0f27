//! The lost-lock signal: how a holder (and any work it handed the signal to) learns that the lock is gone.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use event_listener::Event;

pub use crate::error::LostReason;

/// A cheap, cloneable view of whether a lock is still held.
///
/// It turns lost when the lock's local validity deadline passes (checked against the monotonic clock on every
/// look, so it is never late), when an extension or renewal finds the key gone or taken, when renewal gives up,
/// or when the holder releases. Once lost it stays lost. Pass clones into the work the lock protects and have it
/// check [`is_lost`](Self::is_lost) before each externally visible step, or race it against
/// [`lost`](Self::lost).
///
/// The type exposes no runtime types; [`lost`](Self::lost) wakes at the deadline through the lock's runtime
/// abstraction.
///
/// ```
/// # async fn demo(guard: &dyn lock_core::LockGuard) {
/// let signal = guard.lost_signal();
/// if !signal.is_lost() {
///     // do one step of work
/// }
/// let reason = signal.lost().await; // resolves when the lock is gone
/// # let _ = reason;
/// # }
/// ```
#[derive(Clone)]
pub struct LostSignal {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    event: Event,
}

struct State {
    valid_until: Instant,
    reason: Option<LostReason>,
    /// What passing the deadline means: `Expired`, or `RenewalFailed` while a watchdog renews the lock.
    on_deadline: LostReason,
}

impl LostSignal {
    pub(crate) fn new(valid_until: Instant) -> Self {
        LostSignal {
            shared: Arc::new(Shared {
                state: Mutex::new(State { valid_until, reason: None, on_deadline: LostReason::Expired }),
                event: Event::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is two plain fields; a panic elsewhere cannot leave it half-written.
        self.shared.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether the lock is lost (never returns `false` after the validity deadline).
    pub fn is_lost(&self) -> bool {
        self.reason().is_some()
    }

    /// Why the lock is lost, or `None` while it is held.
    pub fn reason(&self) -> Option<LostReason> {
        let mut st = self.state();
        check(&mut st, Instant::now()).err()
    }

    /// The current local validity deadline (moves forward with each successful extension).
    pub fn valid_until(&self) -> Instant {
        self.state().valid_until
    }

    /// Resolves when the lock is lost, with the reason; immediately if it already is.
    ///
    /// Without a runtime to sleep on (see the crate's runtime features) it still resolves on every explicit loss,
    /// but only notices the validity deadline when something else wakes it; [`is_lost`](Self::is_lost) is exact
    /// either way.
    ///
    /// # Errors
    /// None: the future resolves with the reason.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only observes the signal.
    pub async fn lost(&self) -> LostReason {
        loop {
            let listener = self.shared.event.listen();
            let deadline = {
                let mut st = self.state();
                match check(&mut st, Instant::now()) {
                    Err(reason) => return reason,
                    Ok(deadline) => deadline,
                }
            };
            let wait = deadline.saturating_duration_since(Instant::now());
            let sleep = async {
                if crate::rt::sleep(wait).await.is_err() {
                    // No runtime to sleep on: wait for an explicit loss only.
                    std::future::pending::<()>().await;
                }
            };
            futures_util::future::select(listener, std::pin::pin!(sleep)).await;
        }
    }

    /// Runs `work` until it completes or the lock is lost, whichever comes first; a lost lock drops `work` at its
    /// current await point.
    pub(crate) async fn guard<F: std::future::Future>(&self, work: F) -> Result<F::Output, LostReason> {
        let work = std::pin::pin!(work);
        let lost = std::pin::pin!(self.lost());
        match futures_util::future::select(work, lost).await {
            futures_util::future::Either::Left((output, _)) => Ok(output),
            futures_util::future::Either::Right((reason, _)) => Err(reason),
        }
    }

    /// Reports a passed deadline as a failed renewal (a watchdog is responsible for this lock).
    pub(crate) fn renewed_by_watchdog(&self) {
        self.state().on_deadline = LostReason::RenewalFailed;
    }

    /// Reports a passed deadline as an expiry again (the watchdog stopped extending the lock).
    pub(crate) fn left_unrenewed(&self) {
        self.state().on_deadline = LostReason::Expired;
    }

    /// Wakes every [`lost`](Self::lost) future, after a change of the state. Only when one listens: an event notified
    /// for the first time allocates its list of listeners, and a guard released by its holder (the common case)
    /// is watched by nobody. No wake-up is missed: a listener registers before it reads the state, this reads the
    /// count after the state was written, and the state's mutex orders the two.
    fn wake(&self) {
        if self.shared.event.total_listeners() > 0 {
            self.shared.event.notify(usize::MAX);
        }
    }

    /// Marks the lock lost; the first reason sticks. Returns whether this call was the one that marked it.
    pub(crate) fn mark(&self, reason: LostReason) -> bool {
        let marked = {
            let mut st = self.state();
            if st.reason.is_none() {
                st.reason = Some(reason);
                true
            } else {
                false
            }
        };
        self.wake();
        marked
    }

    /// Moves the deadline to `until` if that is earlier (an extension to a shorter TTL is on its way).
    pub(crate) fn shorten(&self, until: Instant) {
        {
            let mut st = self.state();
            if until < st.valid_until {
                st.valid_until = until;
            }
        }
        self.wake();
    }

    /// Sets the deadline to `until` (the validity of the latest successful extension) if the lock is not lost by
    /// now. A lock whose deadline already passed stays lost: a holder may have acted on that.
    pub(crate) fn prolong(&self, until: Instant) -> Result<(), LostReason> {
        let result = {
            let mut st = self.state();
            check(&mut st, Instant::now()).map(|_| st.valid_until = until)
        };
        self.wake();
        result
    }
}

/// `Ok(deadline)` while held; latches `Expired` once the deadline passed.
fn check(st: &mut State, now: Instant) -> Result<Instant, LostReason> {
    if let Some(reason) = st.reason {
        return Err(reason);
    }
    if now >= st.valid_until {
        st.reason = Some(st.on_deadline);
        return Err(st.on_deadline);
    }
    Ok(st.valid_until)
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state();
        f.debug_struct("LostSignal").field("valid_until", &st.valid_until).field("reason", &st.reason).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn expires_at_deadline_and_stays_lost() {
        let s = LostSignal::new(Instant::now() + Duration::from_millis(20));
        assert!(!s.is_lost());
        assert!(s.prolong(Instant::now() + Duration::from_millis(40)).is_ok());
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(s.reason(), Some(LostReason::Expired));
        assert_eq!(s.prolong(Instant::now() + Duration::from_secs(10)), Err(LostReason::Expired));
        assert!(s.is_lost());
    }

    #[test]
    fn first_reason_wins() {
        let s = LostSignal::new(Instant::now() + Duration::from_secs(10));
        assert!(s.mark(LostReason::NotHeld));
        assert!(!s.mark(LostReason::Released));
        assert_eq!(s.clone().reason(), Some(LostReason::NotHeld));
    }

    #[tokio::test]
    async fn future_resolves_at_deadline_not_before() {
        let until = Instant::now() + Duration::from_millis(50);
        let s = LostSignal::new(until);
        assert_eq!(s.lost().await, LostReason::Expired);
        assert!(Instant::now() >= until);
    }

    #[tokio::test]
    async fn future_resolves_on_mark() {
        let s = LostSignal::new(Instant::now() + Duration::from_secs(30));
        let s2 = s.clone();
        let t = tokio::spawn(async move { s2.lost().await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        s.mark(LostReason::NotHeld);
        assert_eq!(t.await.unwrap(), LostReason::NotHeld);
    }
}
