//! The protocol version check a lock makes before its first acquisition under its prefix on each instance (see
//! [`wire`](crate::wire)): once per instance and prefix (and again after [`wire::RECHECK_AFTER`]), in that instance's
//! branch of the fan-out, and again at most every [`RETRY_AFTER`] on an instance that did not answer, so an instance
//! that is down costs its branch one bounded call now and then, and the others nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{LockError, Result};
use crate::resource::{DEFAULT_PREFIX, LEGACY_PREFIX};
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
    /// The check passed then; it is made again after [`wire::RECHECK_AFTER`].
    Done(Instant),
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
            Some(Checked::Done(at)) => at.elapsed() >= wire::RECHECK_AFTER,
            None => false,
        }
    }

    fn record(&self, prefix: &Arc<str>, i: usize, checked: Checked) {
        let mut by_prefix = self.by_prefix.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(state) = by_prefix.get_mut(prefix).and_then(|states| states.get_mut(i)) {
            *state = checked;
        }
    }

    /// When the earliest of the checks of every instance under `prefix` runs out, if every instance has been
    /// checked.
    pub(crate) fn checked_until(&self, prefix: &Arc<str>) -> Option<Instant> {
        let by_prefix = self.by_prefix.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let states = by_prefix.get(prefix)?;
        let mut until: Option<Instant> = None;
        for state in states {
            let Checked::Done(at) = state else { return None };
            let end = *at + wire::RECHECK_AFTER;
            until = Some(until.map_or(end, |u| u.min(end)));
        }
        until
    }

    /// Asks instance `i` of `n` (bounded by `timeout`), when due, for the protocol version of the keys under
    /// `prefix`, writing ours where there is none; on the default prefix, also reads the old default prefix's
    /// version key (see [`wire`](crate::wire)). Run in that instance's branch of an acquisition's fan-out, so an
    /// instance that does not answer delays only its own branch.
    ///
    /// # Errors
    /// [`LockError::WireVersion`] when the instance holds another major version; [`LockError::ForeignKey`] when the
    /// version key holds something that is not a version; [`LockError::OldPrefixInUse`] when processes of an older
    /// release hold their locks under the old default prefix; [`LockError::WrongType`] when the version key holds
    /// another type. Any other error of the instance (unreachable, timed out), which is then asked again after
    /// [`RETRY_AFTER`], the acquisition going straight on meanwhile.
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
        let checked = match self.ask(i, store, prefix, timeout).await {
            Ok(checked) => checked,
            Err(err) if is_verdict(&err) => return Err(err),
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

    /// One check of instance `i`: the old default prefix's key first (read only), then ours.
    async fn ask(&self, i: usize, store: &dyn LockStore, prefix: &Arc<str>, timeout: Duration) -> Result<Checked> {
        if &**prefix == DEFAULT_PREFIX {
            let legacy = wire::key(LEGACY_PREFIX);
            let keys = [legacy.as_str()];
            let call = Call::plain("acquire", "GET", &keys, &[]);
            match crate::rt::timeout("acquire", timeout, store.call(call)).await.and_then(|r| r) {
                Ok(ran) => {
                    if let Reply::Bulk(found) = ran.reply {
                        let found = String::from_utf8_lossy(&found).into_owned();
                        // A version there was written by a process of an older release; anything else is another
                        // library's key (python-redis-lock's lock `wire`), not ours to read.
                        if wire::is_version(&found) {
                            return Err(LockError::OldPrefixInUse { key: legacy, found, prefix: LEGACY_PREFIX });
                        }
                    }
                }
                // Another library's key of another type, or an ACL without that key: nothing of ours is there.
                Err(LockError::WrongType { .. } | LockError::Auth { .. } | LockError::Unsupported(_)) => {}
                Err(err) => return Err(err),
            }
        }
        let key = wire::key(prefix);
        let keys = [key.as_str()];
        // Named as the acquisition it is part of: to the caller, a timeout here is the acquire's.
        let call = Call::script("acquire", &crate::seam::scripts::WIRE_VERSION, &keys, &[wire::VERSION]);
        let reply = crate::rt::timeout("acquire", timeout, store.call(call)).await.and_then(|r| r);
        match reply.map(|ran| ran.reply) {
            Ok(Reply::Nil) => Ok(Checked::Done(Instant::now())),
            Ok(Reply::Bulk(found)) => {
                let holds = match std::str::from_utf8(&found) {
                    Ok(found) if wire::is_version(found) => {
                        if !wire::compatible(found) {
                            return Err(LockError::WireVersion { key, found: found.to_owned(), ours: wire::VERSION });
                        }
                        return Ok(Checked::Done(Instant::now()));
                    }
                    // Never the value itself: another library's value at a key may be its holder's token.
                    _ => format!("a string of {} bytes that is not a protocol version", found.len()),
                };
                Err(LockError::ForeignKey { key, holds })
            }
            Ok(other) => {
                tracing::debug!(instance = i, reply = ?other, "the wire version key answered oddly");
                Ok(Checked::Failed(Instant::now()))
            }
            Err(LockError::Unsupported(_)) => {
                // A store that runs no scripts (a backend of its own, a test double) keeps no versioned keys: its
                // acquire, release and extend are its own protocol, so there is nothing to compare.
                Ok(Checked::Done(Instant::now()))
            }
            Err(LockError::Auth { source, .. }) if source.downcast_ref::<crate::error::AclRefusal>().is_some() => {
                // An ACL that refuses the version key: not ours to insist on.
                tracing::debug!(instance = i, key, "the server's ACL refuses the wire version key; not checked");
                Ok(Checked::Done(Instant::now()))
            }
            Err(err) => Err(err),
        }
    }
}

/// Whether a check's error is its verdict on the keys (which fails the acquisition, and is asked again next time)
/// rather than the instance not answering.
fn is_verdict(err: &LockError) -> bool {
    matches!(
        err,
        LockError::WireVersion { .. }
            | LockError::ForeignKey { .. }
            | LockError::OldPrefixInUse { .. }
            | LockError::WrongType { .. }
            // Credentials the server refuses (an ACL's refusal of the key was taken as "not checked" above): the
            // acquisition would be refused as well.
            | LockError::Auth { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 54 §4: a check holds for `wire::RECHECK_AFTER`, then the next acquisition asks again (a version key lost
    /// to a `FLUSHALL`, a failover or an eviction is written again).
    #[test]
    fn a_check_is_made_again_after_it_runs_out() {
        let checks = WireChecks::default();
        let prefix: Arc<str> = "p:".into();
        assert!(checks.due(&prefix, 0, 1));
        checks.record(&prefix, 0, Checked::Done(Instant::now()));
        assert!(!checks.due(&prefix, 0, 1));
        assert!(checks.checked_until(&prefix).is_some_and(|until| until > Instant::now()));
        let Some(long_ago) = Instant::now().checked_sub(wire::RECHECK_AFTER + Duration::from_secs(1)) else {
            return; // a monotonic clock this young cannot show it
        };
        checks.record(&prefix, 0, Checked::Done(long_ago));
        assert!(checks.due(&prefix, 0, 1));
    }
}
