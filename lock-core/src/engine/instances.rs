//! The lock server(s) a [`Lock`](crate::Lock) runs on, and how many must agree.

use std::sync::Arc;
use std::time::Duration;

use crate::seam::store::LockStore;

/// One value per instance (the instances that granted a lock, their replies): held inline for the one instance nearly
/// every lock runs on.
pub(crate) type PerInstance<T> = smallvec::SmallVec<[T; 1]>;

/// The lock server(s) a [`Lock`](crate::Lock) runs on, and how many must agree.
pub(crate) struct Instances {
    pub(crate) stores: Vec<Arc<dyn LockStore>>,
    pub(crate) quorum: usize,
    /// Bound on one call to one instance when there are several (default: a fraction of the TTL).
    pub(crate) instance_timeout: Option<Duration>,
    /// Which instances have been asked for the protocol version of the keys under which prefix.
    pub(crate) wire: crate::engine::wire_check::WireChecks,
}

impl Instances {
    pub(crate) fn n(&self) -> usize {
        self.stores.len()
    }

    /// How long one call to one instance may take for a lock with `ttl`.
    pub(crate) fn call_timeout(&self, ttl: Duration, operation_timeout: Duration) -> Duration {
        if self.n() == 1 {
            return operation_timeout;
        }
        let default = (ttl / 20).max(Duration::from_millis(10)).min(ttl / 2);
        self.instance_timeout.unwrap_or(default).min(operation_timeout)
    }
}
