//! The protocol version check a lock makes before its first acquisition under its prefix on each instance (see
//! [`wire`](crate::wire)): once per instance and prefix, in that instance's branch of the fan-out, and again at most
//! every [`RETRY_AFTER`] on an instance that did not answer, so an instance that is down costs its branch one bounded
//! call now and then, and the others nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{LockError, Result};
use crate::seam::store::LockStore;
use crate::seam::transport::{Call, Reply};
use crate::wire;

/// How long an instance whose check failed (unreachable, timed out) goes unasked.
const RETRY_AFTER: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
enum Checked {
    Not,
    /// The check failed then (not a version mismatch: that fails the acquisition and is asked again every time).
    Failed(Instant),
    Done,
}

/// Which instances have been checked under which prefix (shared by every clone of a lock and by locks on the same
/// instances).
#[derive(Debug, Default)]
pub(crate) struct WireChecks {
    by_prefix: Mutex<HashMap<Arc<str>, Vec<Checked>>>,
}

impl WireChecks {
    /// Whether instance `i` of `n` is to be asked now under `prefix`.
    fn due(&self, prefix: &Arc<str>, i: usize, n: usize) -> bool {
        let mut by_prefix = self.by_prefix.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let states = by_prefix.entry(prefix.clone()).or_insert_with(|| vec![Checked::Not; n]);
        match states.get(i) {
            Some(Checked::Not) => true,
            Some(Checked::Failed(at)) => at.elapsed() >= RETRY_AFTER,
            Some(Checked::Done) | None => false,
        }
    }

    fn record(&self, prefix: &Arc<str>, i: usize, checked: Checked) {
        let mut by_prefix = self.by_prefix.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(state) = by_prefix.get_mut(prefix).and_then(|states| states.get_mut(i)) {
            *state = checked;
        }
    }

    /// Whether every instance has been checked under `prefix`.
    pub(crate) fn all_checked(&self, prefix: &Arc<str>) -> bool {
        let by_prefix = self.by_prefix.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        by_prefix.get(prefix).is_some_and(|states| states.iter().all(|s| matches!(s, Checked::Done)))
    }

    /// Asks instance `i` of `n` (bounded by `timeout`), when due, for the protocol version of the keys under
    /// `prefix`, writing ours where there is none. Run in that instance's branch of an acquisition's fan-out, so an
    /// instance that does not answer delays only its own branch.
    ///
    /// # Errors
    /// [`LockError::WireVersion`] when the instance holds another major version; [`LockError::WrongType`] when the
    /// version key holds another type. Any other error of the instance (unreachable, timed out), which is then
    /// asked again after [`RETRY_AFTER`], the acquisition going straight on meanwhile.
    pub(crate) async fn check(
        &self,
        i: usize,
        store: &dyn LockStore,
        prefix: &Arc<str>,
        n: usize,
        timeout: Duration,
    ) -> Result<()> {
        if !self.due(prefix, i, n) {
            return Ok(());
        }
        let key = wire::key(prefix);
        let keys = [key.as_str()];
        // Named as the acquisition it is part of: to the caller, a timeout here is the acquire's.
        let call = Call::script("acquire", &crate::seam::scripts::WIRE_VERSION, &keys, &[wire::VERSION]);
        let reply = crate::rt::timeout("acquire", timeout, store.call(call)).await.and_then(|r| r);
        let checked = match reply.map(|ran| ran.reply) {
            Ok(Reply::Nil) => Checked::Done,
            Ok(Reply::Bulk(found)) => {
                let found = String::from_utf8_lossy(&found).into_owned();
                if !wire::compatible(&found) {
                    return Err(LockError::WireVersion { key, found, ours: wire::VERSION });
                }
                Checked::Done
            }
            Ok(other) => {
                tracing::debug!(instance = i, reply = ?other, "the wire version key answered oddly");
                Checked::Failed(Instant::now())
            }
            Err(err @ LockError::WrongType { .. }) => return Err(err),
            Err(LockError::Unsupported(_)) => {
                // A store that runs no scripts (a backend of its own, a test double) keeps no versioned keys: its
                // acquire, release and extend are its own protocol, so there is nothing to compare.
                Checked::Done
            }
            Err(LockError::Auth { .. }) => {
                // An ACL that refuses the version key: not ours to insist on.
                tracing::debug!(instance = i, key, "the server's ACL refuses the wire version key; not checked");
                Checked::Done
            }
            Err(err) => {
                // The instance did not answer: neither would the acquisition, which is not sent (a frozen server
                // costs one bound, not two). Asked again after RETRY_AFTER; tries meanwhile go straight on.
                tracing::debug!(instance = i, error = %err.report(), "wire version check failed; asked again later");
                self.record(prefix, i, Checked::Failed(Instant::now()));
                return Err(err);
            }
        };
        self.record(prefix, i, checked);
        Ok(())
    }
}
