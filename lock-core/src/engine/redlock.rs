//! Redlock: one lock over N independent Redis instances, with fencing tokens that stay monotonic across quorums.
//!
//! # Algorithm
//! Follows the published Redlock description, with the fixes its critics asked for:
//!
//! 1. Start a monotonic clock, then send the acquire (same random token, same TTL) to **all N instances
//!    concurrently**, each bounded by a per-instance timeout that is a small fraction of the TTL (default 5 %, at
//!    least 10 ms, at most half the TTL), so a slow or paused instance cannot stall the attempt.
//! 2. Decide as soon as the outcome is known: held once a quorum (default ⌊N/2⌋+1, never less than a majority)
//!    granted; failed once a quorum is impossible. The slowest instance is never waited for.
//! 3. Validity = `ttl − elapsed − drift`, elapsed from before the first request. A grant with no validity left is
//!    released and reported as [`ValidityExhausted`](crate::LockError::ValidityExhausted).
//! 4. On failure, release on **all N** instances, including those that did not answer (a SET can be applied while
//!    its reply is lost), then retry after a jittered delay inside the caller's wait budget.
//! 5. Extend on all instances (compare-and-extend, which never recreates a key); it succeeds only with a quorum and
//!    only inside the current validity. When the key is gone from enough instances that no quorum can confirm it,
//!    the guard turns lost. Release goes to all instances; [`Guard::release_report`](crate::Guard::release_report)
//!    says what each found.
//!
//! # Fencing tokens across quorums
//! Per-instance counters are not monotonic across quorums: two successive holders may be granted by different
//! majorities whose counters differ. This implementation makes them monotonic:
//!
//! - The acquire script advances each instance's counter, `counter := max(counter + 1, floor)`, and returns it.
//!   The client takes `t = max(counters of its quorum)`.
//! - Before reporting success it writes `t` back (`counter := max(counter, t)`) to the granting instances whose
//!   counter is below `t`, **only where the key still holds its token**, and requires that a quorum of instances
//!   holds `t`: those that returned it plus those whose write-back succeeded.
//! - The floor is the same for every instance of one attempt: the client's wall clock in µs (a single server uses
//!   its own clock instead). Instances whose counters are in step, the normal case when every instance granted the
//!   previous acquisitions too, therefore all return the floor, and the attempt needs no write-back: one round
//!   trip, like Redlock without fencing. Instances that missed acquisitions (down, slow, or held by someone else)
//!   return smaller values and are written back.
//!
//! Why a later holder H₂ gets a larger token than an earlier holder H₁: the instances holding `t₁` after H₁'s
//! acquire (W₁) and H₂'s grant quorum Q₂ are both majorities, so they share an instance j. On j, `t₁` was set while
//! H₁'s key was present (by H₁'s own acquire, or by its write-back, which checks the key); H₂'s SET succeeded only
//! once that key was gone (expired or released, and never recreated, since extension cannot recreate a key). So
//! H₂'s acquire advanced j's counter to at least `t₁ + 1`; hence `t₂ = max(Q₂) > t₁`. The floor and the clocks play
//! no part in this argument: they only decide how often a write-back is needed.
//!
//! # Assumptions and limits (read these)
//! - Instances keep their counters and keys across restarts (`appendonly yes` with `appendfsync always`), **or**
//!   a restarted instance stays down for longer than the longest TTL in use. An instance that restarts empty inside
//!   a holder's quorum can grant the same lock to a second client (the published Redlock limit). The floor of the
//!   counter (the acquiring client's wall clock when its attempt *started*) keeps fencing tokens from going
//!   backwards even then for attempts that start after the earlier grant, as long as the clients' clocks do not
//!   lag the tokens already issued; a fenced resource then still rejects the stale holder. An attempt that started
//!   *before* the earlier grant and is decided after it, with the restarted instance in its quorum, can get a
//!   lower token (found by `lock-model`'s Redlock model): the resource then refuses that later holder's writes
//!   instead, which is safe for the data but is a refusal the holder must handle.
//! - Clocks: for mutual exclusion only the rate of each instance's clock matters (TTL expiry), bounded by the drift
//!   allowance (1 % + 2 ms); the client times validity with a monotonic clock. Wall clocks only set the fencing
//!   floor above: a client whose clock is behind still gets increasing tokens (the write-back sees to it), at the
//!   cost of a write-back.
//! - Like every lease lock, a client that pauses past its validity may act on a lock it lost; fencing tokens
//!   checked by the protected resource are the defence.

use std::sync::Arc;
use std::time::Duration;

use std::time::{SystemTime, UNIX_EPOCH};

use crate::engine::instances::Instances;
use crate::engine::lock::Lock;
use crate::error::{LockError, Result};
use crate::seam::store::LockStore;

/// Builds a [`Lock`] over N independent instances ([`Lock::redlock`]) (see the [module docs](self) for the algorithm and its limits).
///
/// ```
/// use lock_core::{Lock, LockOptions, LockStore, MemoryStore};
/// use std::{sync::Arc, time::Duration};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let stores: Vec<Arc<dyn LockStore>> = (0..3).map(|_| Arc::new(MemoryStore::new()) as Arc<dyn LockStore>).collect();
/// let lock = Lock::redlock(stores).build()?;
/// let guard = lock.acquire("payments", &LockOptions::new(Duration::from_secs(5))).await?;
/// assert!(guard.held_instances().len() >= 2);
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build()`"]
pub struct RedlockBuilder {
    stores: Vec<Arc<dyn LockStore>>,
    quorum: Option<usize>,
    instance_timeout: Option<Duration>,
}

impl RedlockBuilder {
    /// Redlock over `stores` (independent servers, in any mix of backends). The same as [`Lock::redlock`].
    pub fn new(stores: Vec<Arc<dyn LockStore>>) -> Self {
        RedlockBuilder { stores, quorum: None, instance_timeout: None }
    }

    /// Requires `quorum` instances instead of ⌊N/2⌋+1 (it may be larger, never smaller than a majority).
    pub fn with_quorum(mut self, quorum: usize) -> Self {
        self.quorum = Some(quorum);
        self
    }

    /// Bounds each call to one instance (default: 5 % of the TTL, at least 10 ms, at most half the TTL).
    pub fn with_instance_timeout(mut self, timeout: Duration) -> Self {
        self.instance_timeout = Some(timeout);
        self
    }

    /// The lock.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] without instances, with a quorum below a majority or above N, or with a zero
    /// instance timeout.
    pub fn build(self) -> Result<Lock> {
        let n = self.stores.len();
        if n == 0 {
            return Err(LockError::invalid("Redlock needs at least one instance"));
        }
        let majority = n / 2 + 1;
        let quorum = self.quorum.unwrap_or(majority);
        if quorum < majority || quorum > n {
            return Err(LockError::invalid(format!("quorum {quorum} must be between a majority ({majority}) and {n}")));
        }
        if self.instance_timeout.is_some_and(|t| t.is_zero()) {
            return Err(LockError::invalid("instance timeout must be positive"));
        }
        Ok(Lock::with_instances(Instances {
            stores: self.stores,
            quorum,
            instance_timeout: self.instance_timeout,
            wire: Default::default(),
        }))
    }
}

/// The fencing floor one Redlock attempt sends to every instance: the client's wall clock in µs (see the module
/// docs). `None` when the clock reads before 1970 or past 2^52 µs (year 2112), where Lua's doubles would lose
/// exactness; each instance then uses its own clock, and the write-back keeps tokens monotonic as before.
pub(crate) fn fence_floor() -> Option<u64> {
    // Wall-clock time is the point here (a floor shared by the instances), not a duration.
    #[allow(clippy::disallowed_methods)]
    let now = SystemTime::now();
    let micros = now.duration_since(UNIX_EPOCH).ok()?.as_micros();
    u64::try_from(micros).ok().filter(|&m| m < 1 << 52)
}
