//! What an operator asks of a name: who holds it and for how long ([`Lock::inspect`]), and "free it now"
//! ([`Lock::force_release`]), for every primitive: the lock key's holder (a lock, a fair lock, a job's run, an
//! election's leader, a read-write lock's writer) and the holders that share a name (a read-write lock's readers, a
//! semaphore's permits with their slots).
//!
//! Both run one script per instance (read-only for the inspection), so they work on every store that runs
//! lock-core's scripts, on Cluster, and on a Redlock (per instance, since each instance has its own view).

use std::time::Duration;

use futures_util::future::join_all;
use tracing::Instrument;

use crate::engine::fair;
use crate::engine::lock::Lock;
use crate::error::{LockError, Result};
use crate::resource::LockKeys;
use crate::rt;
use crate::seam::scripts;
use crate::seam::store::LockStore;
use crate::seam::transport::{Call, Reply, Topology};
use crate::token::Token;

/// Who holds a lock on one instance, as far as an operator may know.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// An id naming this holder, far too short to release or extend the lock with: the first
    /// [`OWNER_ID_LEN`](crate::OWNER_ID_LEN) hex digits of the owner token; for a value this library did not write
    /// (another library's token), `~` and the first hex digits of the value's SHA-1 ([`foreign`](Self::foreign)).
    /// It tells one acquisition from the next (and two instances held by one acquisition from two held by
    /// different ones), and a forced release deletes only the holders whose ids it is given.
    pub owner: Option<String>,
    /// Whether the value was written by another client than this library (another language's lock, say).
    pub foreign: bool,
    /// The label the holder stored ([`LockOptions::with_holder_label`](crate::LockOptions::with_holder_label)).
    pub label: Option<String>,
    /// The lock's remaining time-to-live on the server's clock; `None` when the key has no TTL (set by another
    /// client: it will never expire by itself).
    pub ttl: Option<Duration>,
    /// What it holds: the name alone, or a share of it.
    pub role: HolderRole,
    /// A semaphore permit's slots (empty for every other holder).
    pub slots: Vec<u32>,
}

/// What a [`Holder`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HolderRole {
    /// The name alone: a lock's holder, a fair lock's, a job's run, an election's leader, a read-write lock's writer.
    Exclusive,
    /// A share, as one of a read-write lock's readers.
    Reader,
    /// A share, as one of a semaphore's permits.
    Permit,
}

impl HolderRole {
    /// `exclusive`, `reader` or `permit`.
    pub fn as_str(self) -> &'static str {
        match self {
            HolderRole::Exclusive => "exclusive",
            HolderRole::Reader => "reader",
            HolderRole::Permit => "permit",
        }
    }
}

/// One instance's view of a resource.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// The holder, when the lock is held.
    pub holder: Option<Holder>,
    /// The fencing counter: the last fencing token granted (`None` before the first fenced acquisition).
    pub fence: Option<u64>,
    /// Whether a try found the lock held since it was last released: someone may be waiting for it (a cheap
    /// contention signal, kept by the release mark; see [`LockKeys::awaited`]).
    pub awaited: bool,
    /// Waiters in the resource's fair queue ([`LockOptions::with_fair_queue`](crate::LockOptions::with_fair_queue)),
    /// including any whose heartbeats stopped and that the next fair try will drop.
    pub queued: u64,
    /// The live holders that share the name, each with its own expiry: a read-write lock's readers, a semaphore's
    /// permits (at most 1000 of each, soonest to expire first).
    pub shared: Vec<Holder>,
    /// The name's record, when a primitive keeps one (`prefix{name}:info`), as field and value: an election's
    /// leader (`id`, `value`, `term`), a job's last run (`holder`, `started_ms`, `at_least_ms`, `finished_ms`,
    /// `outcome`; times in ms of the server's clock). The holder's token is never in it. Empty for the others.
    pub record: Vec<(String, String)>,
}

/// What [`Lock::inspect`] found: each instance's view, and the summary a single-instance lock needs.
#[derive(Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// The resource inspected.
    pub resource: String,
    /// Each instance's view, in the order of [`Lock::stores`] (one entry for a single-instance lock).
    pub instances: Vec<Result<LockState>>,
    /// How many instances must agree for a holder to hold the lock.
    pub quorum: usize,
}

impl LockState {
    /// Whether its record is a job's start given back before its work began (`outcome` `given_back`).
    fn given_back(&self) -> bool {
        self.record.iter().any(|(field, value)| field == "outcome" && value == "given_back")
    }
}

impl Inspection {
    /// The holder of the lock: the one whose owner token holds a quorum of instances (the one instance of a
    /// single-instance lock). `None` when the lock is free, or (Redlock) when no owner has a quorum.
    pub fn holder(&self) -> Option<&Holder> {
        let holders: Vec<&Holder> = self.states().filter_map(|state| state.holder.as_ref()).collect();
        holders.iter().copied().find(|candidate| {
            let agreeing = holders.iter().filter(|other| other.owner == candidate.owner).count();
            agreeing >= self.quorum && (candidate.owner.is_some() || self.quorum == 1)
        })
    }

    /// Whether the name is held: by a [`holder`](Self::holder), or by [`shared`](Self::shared) holders.
    pub fn is_held(&self) -> bool {
        self.holder().is_some() || !self.shared().is_empty()
    }

    /// The live holders that share the name (readers, permits), as the first instance that answered sees them
    /// (the primitives that share a name run on one store).
    pub fn shared(&self) -> &[Holder] {
        self.states().next().map(|state| state.shared.as_slice()).unwrap_or_default()
    }

    /// The name's record (see [`LockState::record`]): an election's leader and term, a job's last run. Over
    /// Redlock, as the holder's instances keep it, or with nobody holding, as kept where the latest grant was made,
    /// leaving out starts given back (a replica that lost a split vote records its start on the instances it got,
    /// and gives it back at once: that is not a run); [`instances`](Self::instances) holds every instance's own.
    ///
    /// ```
    /// use lock_core::{JobLock, JobOptions, Lock, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let opts = JobOptions::new(Duration::from_secs(60)).with_holder("replica-2");
    /// JobLock::new(lock.clone()).run("nightly", &opts, |_| async {}).await?;
    /// let seen = lock.inspect("nightly").await?;
    /// assert_eq!(seen.record_field("holder"), Some("replica-2"));
    /// assert_eq!(seen.record_field("outcome"), Some("finished"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn record(&self) -> &[(String, String)] {
        // Over Redlock, an instance outside the holder's quorum may keep no record or an older one: read the record
        // where the holder holds; with nobody holding, where the latest grant was made (the highest fence: a
        // minority instance that missed the last run keeps the run before it) that was not given back (a split
        // vote's loser records its start, given back at once, under that instance's counter, which may be the
        // highest, though it never ran); else the first that keeps one.
        let owner = self.holder().and_then(|holder| holder.owner.as_deref());
        let holds = |state: &&LockState| state.holder.as_ref().and_then(|h| h.owner.as_deref()) == owner;
        let kept = |state: &&LockState| !state.record.is_empty();
        let state = match owner {
            Some(_) => self.states().filter(kept).find(holds),
            None => None,
        };
        // `max_by_key` keeps the last of equals; reversed, the first instance wins a tie.
        let answered = self.instances.iter().rev().filter_map(|state| state.as_ref().ok());
        let latest = |ran: bool| {
            let answered = answered.clone().filter(kept).filter(|state| state.fence.is_some());
            answered.filter(|state| !ran || !state.given_back()).max_by_key(|state| state.fence)
        };
        state
            .or_else(|| latest(true))
            .or_else(|| latest(false))
            .or_else(|| self.states().find(kept))
            .map(|state| state.record.as_slice())
            .unwrap_or_default()
    }

    /// One field of the [`record`](Self::record).
    pub fn record_field(&self, field: &str) -> Option<&str> {
        self.record().iter().find(|(name, _)| name == field).map(|(_, value)| value.as_str())
    }

    /// The highest fencing counter any instance reported: the next fenced grant's token is above it.
    pub fn fence(&self) -> Option<u64> {
        self.states().filter_map(|state| state.fence).max()
    }

    /// Whether any instance saw a try find the lock held since its last release.
    pub fn awaited(&self) -> bool {
        self.states().any(|state| state.awaited)
    }

    /// The longest fair queue any instance holds.
    pub fn queued(&self) -> u64 {
        self.states().map(|state| state.queued).max().unwrap_or(0)
    }

    /// The instances that answered.
    pub fn states(&self) -> impl Iterator<Item = &LockState> {
        self.instances.iter().filter_map(|state| state.as_ref().ok())
    }
}

/// Whose lock a forced release may delete ([`Lock::force_release_expecting`]): the holders the operator was shown,
/// so that a lock that changed hands while the operator read the prompt, or a share (a permit, a reader) taken
/// meanwhile, is left alone (compare-and-delete, per holder).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExpectedHolder {
    /// Whoever holds it ([`Lock::force_release`]).
    Anyone,
    /// Only the holder whose owner id ([`Holder::owner`]) is this one.
    Owner(String),
    /// Only the holders whose owner ids are these: every holder an operator was shown (a lock key's holder and the
    /// shares of a semaphore or read-write lock, on every instance); any other is kept.
    Owners(Vec<String>),
    /// Nobody: the operator saw the lock free and only wants its waiters told to try again; a lock someone took
    /// meanwhile is left alone.
    Nobody,
}

impl ExpectedHolder {
    /// The script's argument for it, after checking every owner id (before any I/O).
    fn argument(&self) -> Result<String> {
        match self {
            ExpectedHolder::Anyone => Ok("*".to_owned()),
            ExpectedHolder::Nobody => Ok(String::new()),
            ExpectedHolder::Owner(id) => owner_id(id),
            ExpectedHolder::Owners(ids) if ids.is_empty() => Ok(String::new()),
            ExpectedHolder::Owners(ids) => Ok(ids.iter().map(|id| owner_id(id)).collect::<Result<Vec<_>>>()?.join(" ")),
        }
    }
}

/// An owner id as a forced release compares it: 8 to 32 hex digits (a token's first), or `~` and 8 to 40 (a foreign
/// value's SHA-1's first), lowercased.
fn owner_id(id: &str) -> Result<String> {
    let id = id.to_ascii_lowercase();
    let (digits, most) = match id.strip_prefix('~') {
        Some(digits) => (digits, SHA1_HEX_DIGITS),
        None => (id.as_str(), TOKEN_HEX_DIGITS),
    };
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) || digits.len() < crate::OWNER_ID_LEN || digits.len() > most {
        return Err(LockError::invalid(format!(
            "an owner id is {} to {TOKEN_HEX_DIGITS} hex digits, or ~ and {} to {SHA1_HEX_DIGITS} (as inspect shows it), not {id:?}",
            crate::OWNER_ID_LEN,
            crate::OWNER_ID_LEN,
        )));
    }
    Ok(id)
}

/// How many hex digits an owner token has (an owner id is a prefix of them).
const TOKEN_HEX_DIGITS: usize = 32;
/// How many hex digits a SHA-1 has (a foreign holder's id is `~` and a prefix of its value's).
const SHA1_HEX_DIGITS: usize = 40;

/// What a forced release found on one instance: the holders it deleted and those it left alone (not expected: taken
/// since the operator looked). Both empty: the name was free.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Forced {
    /// The holders deleted (the lock key's holder first, then shares).
    pub deleted: Vec<Holder>,
    /// The holders left alone: they still hold the name here.
    pub kept: Vec<Holder>,
}

impl Forced {
    /// Whether nothing holds the name on this instance now.
    pub fn is_free(&self) -> bool {
        self.kept.is_empty()
    }
}

/// What [`Lock::force_release`] did.
#[derive(Debug)]
#[non_exhaustive]
pub struct ForcedRelease {
    /// The resource released.
    pub resource: String,
    /// Per instance, in the order of [`Lock::stores`]: what the forced release found and did there.
    pub instances: Vec<Result<Forced>>,
    /// How many instances must be free for the lock to be free (1 on a single instance; a majority on a Redlock).
    pub quorum: usize,
}

impl ForcedRelease {
    /// Whether the lock is free now and a holder's lock was deleted to make it so: deleted on some instance, and
    /// free on a quorum. Over Redlock, deleting on a minority while the holder keeps a majority is not a release.
    pub fn released(&self) -> bool {
        self.is_free() && self.previous().next().is_some()
    }

    /// Whether the name is free on a quorum of instances now: nothing left holding it there (deleted, or found
    /// free). A share left alone (a permit taken since the operator looked) means not free.
    pub fn is_free(&self) -> bool {
        let free = self.instances.iter().filter(|outcome| outcome.as_ref().is_ok_and(Forced::is_free));
        free.count() >= self.quorum
    }

    /// The holders whose locks were deleted.
    pub fn previous(&self) -> impl Iterator<Item = &Holder> {
        self.instances.iter().flat_map(|outcome| outcome.as_ref().map(|f| f.deleted.as_slice()).unwrap_or_default())
    }

    /// The holders other than the expected ones, left in place.
    pub fn kept(&self) -> impl Iterator<Item = &Holder> {
        self.instances.iter().flat_map(|outcome| outcome.as_ref().map(|f| f.kept.as_slice()).unwrap_or_default())
    }

    /// Whether the lock changed hands: someone other than the expected holder holds it on some instance, and
    /// nothing was deleted.
    pub fn holder_changed(&self) -> bool {
        self.kept().next().is_some() && self.previous().next().is_none()
    }
}

/// The origin a forced release announces with: no store's hub uses it (theirs are 16 hex digits), so the
/// subscriber of every process, including the caller's, wakes a waiter.
const FORCED_ORIGIN: &str = "force-release";

impl Lock {
    /// Reads what an operator may know about `resource`, on every instance: holder (owner id, label, remaining
    /// TTL), fencing counter, whether someone waits, and the length of a fair queue. Writes nothing.
    ///
    /// ```
    /// use lock_core::{HolderLabel, Lock, LockOptions, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// assert!(!lock.inspect("reports").await?.is_held());
    /// let opts = LockOptions::new(Duration::from_secs(5)).with_holder_label(HolderLabel::new("cron 1")?);
    /// let guard = lock.acquire("reports", &opts).await?;
    /// let fence = guard.fence().await?;
    /// let seen = lock.inspect("reports").await?;
    /// let holder = seen.holder();
    /// assert_eq!(holder.and_then(|h| h.label.as_deref()), Some("cron 1"));
    /// assert!(holder.and_then(|h| h.ttl).is_some_and(|ttl| ttl <= Duration::from_secs(5)));
    /// assert_eq!(seen.fence(), Some(fence.get()));
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name or a bad prefix (before any I/O); when no instance answers,
    /// the first instance's error ([`Unavailable`](LockError::Unavailable), [`Timeout`](LockError::Timeout),
    /// [`WrongType`](LockError::WrongType) for a key of another type beside the lock key (a lock key of another type
    /// is another library's lock, shown as a [foreign](Holder::foreign) holder), [`Auth`](LockError::Auth) when an ACL
    /// refuses, [`Unsupported`](LockError::Unsupported) for a store that runs no scripts). With several instances,
    /// each one's error is in [`Inspection::instances`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it writes nothing.
    pub async fn inspect(&self, resource: &str) -> Result<Inspection> {
        self.inspect_keys(&self.keys(resource)?).await
    }

    /// [`inspect`](Self::inspect) of the name `keys` are for (a read-write lock's are under a prefix of its own).
    pub(crate) async fn inspect_keys(&self, keys: &LockKeys) -> Result<Inspection> {
        let resource = keys.resource();
        let queue = fair::queue_key(keys);
        let readers = keys.readers();
        let [permits, _, grants, _] = keys.semaphore();
        let record = keys.aux(crate::namespace::Aux::Info);
        let call_keys = [keys.lock(), keys.fence(), keys.awaited(), &queue, &readers, &permits, &grants, &record];
        let span = tracing::debug_span!("lock.inspect", resource, deployment = self.deployment());
        let calls = self.stores().iter().map(|store| {
            let call = Call::script("inspect", &scripts::INSPECT, &call_keys, &[]);
            async move { parse_state(&self.call_bounded(store.as_ref(), call).await?) }
        });
        let instances = first_error_if_all_failed(join_all(calls).instrument(span).await)?;
        Ok(Inspection { resource: resource.to_owned(), instances, quorum: self.quorum() })
    }

    /// Deletes the lock on `resource` whoever holds it, on every instance, and announces the release so that a
    /// waiter (in any process; a fair queue's head) tries at once. The fencing counter is kept, so the next grant's
    /// token is still higher than the deleted holder's. Logged as a warning naming the resource and the holder.
    /// The same as [`force_release_expecting`](Self::force_release_expecting) with [`ExpectedHolder::Anyone`]:
    /// after showing a holder to an operator, prefer that form with the holder shown.
    ///
    /// For administrators: the holder is not told. Its next extend or renewal finds the lock gone and fires its
    /// [`LostSignal`](crate::LostSignal); until then it may still act, which only fencing tokens make safe.
    ///
    /// ```
    /// use lock_core::{Lock, LockOptions, MemoryStore, ReleaseOutcome};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let stuck = lock.acquire("nightly", &LockOptions::new(Duration::from_secs(60))).await?;
    /// let stuck_fence = stuck.fence().await?;
    /// assert!(lock.force_release("nightly").await?.released());
    /// let next = lock.acquire("nightly", &LockOptions::new(Duration::from_secs(60))).await?;
    /// assert!(next.fence().await? > stuck_fence);
    /// assert_eq!(stuck.release().await?, ReleaseOutcome::OwnedByOther);
    /// # next.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`inspect`](Self::inspect).
    ///
    /// # Cancel safety
    /// A dropped call may have deleted the lock on some instances and not on others; calling it again finishes
    /// the job (it is idempotent).
    pub async fn force_release(&self, resource: &str) -> Result<ForcedRelease> {
        self.force_release_expecting(resource, &ExpectedHolder::Anyone).await
    }

    /// Deletes the lock on `resource` only where `expected` holds it (compare-and-delete, per instance, in one
    /// script), otherwise as [`force_release`](Self::force_release). An operator who was shown a holder passes its
    /// owner id: if that holder released and another acquired while the operator decided, the new holder's lock is
    /// left alone and [`ForcedRelease::holder_changed`] says so.
    ///
    /// ```
    /// use lock_core::{ExpectedHolder, Lock, LockOptions, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let opts = LockOptions::new(Duration::from_secs(60));
    /// let first = lock.acquire("nightly", &opts).await?;
    /// let shown = lock.inspect("nightly").await?.holder().and_then(|h| h.owner.clone()).expect("held");
    /// // While the operator reads the prompt, the holder finishes and another one takes the lock.
    /// first.release().await?;
    /// let second = lock.acquire("nightly", &opts).await?;
    /// let forced = lock.force_release_expecting("nightly", &ExpectedHolder::Owner(shown)).await?;
    /// assert!(forced.holder_changed() && !forced.released());
    /// assert!(lock.inspect("nightly").await?.is_held(), "the new holder keeps its lock");
    /// # second.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`inspect`](Self::inspect); [`LockError::InvalidArgument`] for an owner id that is not 8 to 32 hex digits.
    ///
    /// # Cancel safety
    /// As [`force_release`](Self::force_release).
    pub async fn force_release_expecting(&self, resource: &str, expected: &ExpectedHolder) -> Result<ForcedRelease> {
        self.force_release_keys(&self.keys(resource)?, expected).await
    }

    /// [`force_release_expecting`](Self::force_release_expecting) of the name `keys` are for.
    pub(crate) async fn force_release_keys(&self, keys: &LockKeys, expected: &ExpectedHolder) -> Result<ForcedRelease> {
        let resource = keys.resource();
        let expect = expected.argument()?;
        let queue = fair::queue_key(keys);
        let readers = keys.readers();
        let [permits, slots, grants, limit] = keys.semaphore();
        let call_keys =
            [keys.lock(), keys.channel(), keys.awaited(), &queue, &readers, &permits, &grants, &slots, &limit];
        let span = tracing::debug_span!("lock.force_release", resource, deployment = self.deployment());
        let calls = self.stores().iter().map(|store| {
            let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
            let (call_keys, expect) = (&call_keys, expect.as_str());
            async move {
                let args = [FORCED_ORIGIN, sharded, expect];
                let call = Call::script("force-release", &scripts::FORCE_RELEASE, call_keys, &args);
                parse_forced(&self.call_bounded(store.as_ref(), call).await?)
            }
        });
        let instances = first_error_if_all_failed(join_all(calls).instrument(span).await)?;
        let forced = ForcedRelease { resource: resource.to_owned(), instances, quorum: self.quorum() };
        let failed = forced.instances.iter().filter(|outcome| outcome.is_err()).count();
        crate::telemetry::force_release(forced.released());
        match (forced.previous().next(), forced.kept().next()) {
            (Some(holder), _) => tracing::warn!(
                resource,
                owner = holder.owner.as_deref().unwrap_or("foreign"),
                label = holder.label.as_deref().unwrap_or(""),
                ttl_left = ?holder.ttl,
                free = forced.is_free(),
                failed_instances = failed,
                "lock force-released by an administrator; its holder is not told until it extends"
            ),
            (None, Some(holder)) => tracing::info!(
                resource,
                owner = holder.owner.as_deref().unwrap_or("foreign"),
                failed_instances = failed,
                "force-release left the lock alone: another holder than the one expected holds it"
            ),
            (None, None) => tracing::info!(resource, failed_instances = failed, "force-release found the lock free"),
        }
        Ok(forced)
    }

    /// Runs one call on one store within the operation timeout: what the operator's, the election's and the
    /// semaphore's reads and writes outside the engine use.
    pub(crate) async fn call_bounded(&self, store: &dyn LockStore, call: Call<'_>) -> Result<Reply> {
        let operation = call.operation;
        let ran = rt::timeout(operation, self.operation_timeout(), store.call(call))
            .await
            .and_then(|r| r)
            .map_err(|err| err.at(operation, store.server()))?;
        Ok(ran.reply)
    }
}

/// Every instance's outcome, unless every one failed: then the first error (a single-instance lock's only one).
fn first_error_if_all_failed<T>(outcomes: Vec<Result<T>>) -> Result<Vec<Result<T>>> {
    if outcomes.iter().any(Result::is_ok) || outcomes.is_empty() {
        return Ok(outcomes);
    }
    match outcomes.into_iter().next() {
        Some(Err(err)) => Err(err),
        _ => Err(LockError::backend("no instance answered")),
    }
}

fn unexpected(what: &str, reply: &Reply) -> LockError {
    LockError::backend(format!("unexpected reply to the {what} script: {reply:?}"))
}

fn millis(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

fn holder(value: &str, pttl: i64) -> Holder {
    let stored = StoredValue::parse(value);
    let foreign = stored.owner.is_none();
    let owner = stored.owner.or_else(|| Some(foreign_id(value)));
    Holder { owner, foreign, label: stored.label, ttl: millis(pttl), role: HolderRole::Exclusive, slots: vec![] }
}

/// The id of a holder whose value another client wrote: `~` and the first [`OWNER_ID_LEN`](crate::OWNER_ID_LEN) hex
/// digits of the value's SHA-1 (the value itself, that client's token, is never shown).
fn foreign_id(value: &str) -> String {
    let digest = sha1_smol::Sha1::from(value.as_bytes()).digest().to_string();
    format!("~{}", digest.get(..crate::OWNER_ID_LEN).unwrap_or_default())
}

/// The holders of a reply's tail: four items each (`'x'`, `'r'` or `'p'`; value; time left in ms; slots).
fn holders(items: &[Reply]) -> Option<Vec<Holder>> {
    items
        .chunks(4)
        .map(|chunk| {
            let [kind, value, pttl, slots] = chunk else { return None };
            let role = match kind.to_text_lossy()?.as_str() {
                "x" => HolderRole::Exclusive,
                "r" => HolderRole::Reader,
                "p" => HolderRole::Permit,
                _ => return None,
            };
            let mut found = holder(&value.to_text_lossy()?, pttl.as_int()?);
            found.role = role;
            found.slots = slots.to_text_lossy()?.split(',').filter_map(|s| s.trim().parse().ok()).collect();
            Some(found)
        })
        .collect()
}

fn parse_state(reply: &Reply) -> Result<LockState> {
    let Reply::Array(items) = reply else { return Err(unexpected("inspect", reply)) };
    let [value, pttl, fence, mark, queued, fields, tail @ ..] = items.as_slice() else {
        return Err(unexpected("inspect", reply));
    };
    let fields = fields.as_int().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| unexpected("inspect", reply))?;
    let (record, tail) = tail.split_at_checked(fields.saturating_mul(2)).ok_or_else(|| unexpected("inspect", reply))?;
    let record = record
        .chunks(2)
        .map(|pair| match pair {
            [field, value] => field.to_text_lossy().zip(value.to_text_lossy()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| unexpected("inspect", reply))?;
    let shared = holders(tail).ok_or_else(|| unexpected("inspect", reply))?;
    let value = value.to_text_lossy().ok_or_else(|| unexpected("inspect", reply))?;
    let pttl = pttl.as_int().ok_or_else(|| unexpected("inspect", reply))?;
    let fence = fence.to_text_lossy().ok_or_else(|| unexpected("inspect", reply))?;
    let fence = match fence.as_str() {
        "" => None,
        digits => Some(digits.parse::<u64>().map_err(|_| LockError::WrongType {
            key: "fencing counter".to_owned(),
            source: format!("the fencing counter holds {digits:?}, not a non-negative integer").into(),
        })?),
    };
    let mark = mark.as_int().ok_or_else(|| unexpected("inspect", reply))?;
    let queued = queued.as_int().ok_or_else(|| unexpected("inspect", reply))?;
    Ok(LockState {
        holder: (!value.is_empty()).then(|| holder(&value, pttl)),
        fence,
        awaited: mark > 0,
        queued: u64::try_from(queued).unwrap_or(0),
        shared,
        record,
    })
}

fn parse_forced(reply: &Reply) -> Result<Forced> {
    let Reply::Array(items) = reply else { return Err(unexpected("force-release", reply)) };
    let unexpected = || unexpected("force-release", reply);
    let [code, deleted, tail @ ..] = items.as_slice() else { return Err(unexpected()) };
    let mut kept = holders(tail).ok_or_else(unexpected)?;
    let deleted = deleted.as_int().and_then(|n| usize::try_from(n).ok()).filter(|n| *n <= kept.len());
    let deleted = deleted.ok_or_else(unexpected)?;
    let forced = Forced { deleted: kept.drain(..deleted).collect(), kept };
    match (code.as_int(), forced.deleted.is_empty(), forced.kept.is_empty()) {
        (Some(0), true, true) | (Some(1), false, _) | (Some(2), true, false) => Ok(forced),
        _ => Err(unexpected()),
    }
}

/// A lock value read back from the server, split into what an operator may see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoredValue {
    /// The first [`OWNER_ID_LEN`](crate::OWNER_ID_LEN) digits of the owner token; `None` when the value is not one of this library's
    /// tokens (a key set by another client).
    pub(crate) owner: Option<String>,
    /// The holder label, when the acquirer set one.
    pub(crate) label: Option<String>,
}

impl StoredValue {
    /// Splits `value` (`<32 hex digits>` or `<32 hex digits> <label>`).
    pub(crate) fn parse(value: &str) -> Self {
        if Token::from_hex(value).is_none() {
            return StoredValue { owner: None, label: None };
        }
        let label = value.split_once(' ').map(|(_, label)| label.to_owned());
        StoredValue { owner: value.get(..crate::OWNER_ID_LEN).map(str::to_owned), label }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn stored_values_split_into_owner_and_label() {
        let token = "0123456789abcdef0123456789abcdef";
        assert_eq!(StoredValue::parse(token), StoredValue { owner: Some("01234567".into()), label: None });
        assert_eq!(
            StoredValue::parse(&format!("{token} web 7 pid 12")),
            StoredValue { owner: Some("01234567".into()), label: Some("web 7 pid 12".into()) }
        );
        assert_eq!(StoredValue::parse("set-by-someone-else"), StoredValue { owner: None, label: None });
        let foreign = holder("set-by-someone-else", 5);
        assert!(foreign.foreign, "{foreign:?}");
        let digest = sha1_smol::Sha1::from("set-by-someone-else").digest().to_string();
        assert_eq!(foreign.owner, Some(format!("~{}", &digest[..8])), "a foreign holder's id is its value's SHA-1's");
        assert_eq!(StoredValue::parse("0123456789ABCDEF0123456789ABCDEF").owner, None);
    }

    #[test]
    fn a_state_is_parsed_from_the_inspect_reply() {
        let token = "0123456789abcdef0123456789abcdef";
        let reply = Reply::Array(vec![
            bulk(&format!("{token} web 1")),
            Reply::Int(900),
            bulk("17"),
            Reply::Int(5),
            Reply::Int(2),
            Reply::Int(0),
        ]);
        let state = parse_state(&reply).unwrap();
        let holder = state.holder.unwrap();
        assert_eq!(holder.owner.as_deref(), Some("01234567"));
        assert_eq!(holder.label.as_deref(), Some("web 1"));
        assert_eq!(holder.ttl, Some(Duration::from_millis(900)));
        assert_eq!((state.fence, state.awaited, state.queued), (Some(17), true, 2));

        let free = Reply::Array(vec![bulk(""), Reply::Int(-2), bulk(""), Reply::Int(-2), Reply::Int(0), Reply::Int(0)]);
        let state = parse_state(&free).unwrap();
        assert_eq!((state.holder, state.fence, state.awaited), (None, None, false));

        let foreign =
            Reply::Array(vec![bulk("x"), Reply::Int(-1), bulk("nope"), Reply::Int(-2), Reply::Int(0), Reply::Int(0)]);
        assert!(matches!(parse_state(&foreign), Err(LockError::WrongType { .. })));
        assert!(parse_state(&Reply::Int(1)).is_err());

        let mut with_readers = free.clone();
        if let Reply::Array(items) = &mut with_readers {
            items.extend([bulk("r"), bulk("0123456789abcdef0123456789abcdef"), Reply::Int(40), bulk("")]);
        }
        let state = parse_state(&with_readers).unwrap();
        assert_eq!(state.shared.len(), 1);
        assert_eq!((state.shared[0].role, state.shared[0].ttl), (HolderRole::Reader, Some(Duration::from_millis(40))));
        if let Reply::Array(items) = &mut with_readers {
            items.push(bulk("r"));
        }
        assert!(parse_state(&with_readers).is_err(), "a holder cut short");

        let recorded = Reply::Array(vec![
            bulk(""),
            Reply::Int(-2),
            bulk("4"),
            Reply::Int(-2),
            Reply::Int(0),
            Reply::Int(2),
            bulk("holder"),
            bulk("cron"),
            bulk("outcome"),
            bulk("finished"),
            bulk("r"),
            bulk("0123456789abcdef0123456789abcdef"),
            Reply::Int(40),
            bulk(""),
        ]);
        let state = parse_state(&recorded).unwrap();
        let record = [("holder".to_owned(), "cron".to_owned()), ("outcome".to_owned(), "finished".to_owned())];
        assert_eq!(state.record, record);
        assert_eq!(state.shared.len(), 1, "the holders after the record");
        let mut cut = recorded.clone();
        if let Reply::Array(items) = &mut cut {
            items[5] = Reply::Int(9);
        }
        assert!(parse_state(&cut).is_err(), "a record longer than the reply");
    }

    #[test]
    fn a_forced_release_is_parsed_and_counts_a_quorum() {
        let value = bulk("0123456789abcdef0123456789abcdef ops");
        let free = parse_forced(&Reply::Array(vec![Reply::Int(0), Reply::Int(0)])).unwrap();
        assert!(free.is_free() && free.deleted.is_empty());
        let one = |code: i64, deleted: i64| {
            Reply::Array(vec![Reply::Int(code), Reply::Int(deleted), bulk("x"), value.clone(), Reply::Int(5), bulk("")])
        };
        let deleted = parse_forced(&one(1, 1)).unwrap();
        assert_eq!(deleted.deleted.len(), 1, "{deleted:?}");
        assert_eq!(deleted.deleted[0].owner.as_deref(), Some("01234567"));
        let kept = parse_forced(&one(2, 0)).unwrap();
        assert!(kept.deleted.is_empty() && kept.kept.len() == 1 && !kept.is_free(), "{kept:?}");
        assert!(parse_forced(&one(3, 0)).is_err());
        assert!(parse_forced(&one(1, 0)).is_err(), "code 1 deletes something");
        assert!(parse_forced(&one(1, 2)).is_err(), "more deleted than listed");
        // Two permits shown and freed, a third taken since then and kept: the semaphore is not free.
        let permits = Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(2),
            bulk("p"),
            bulk("0123456789abcdef0123456789abcdef"),
            Reply::Int(9),
            bulk("0,2"),
            bulk("p"),
            bulk("fedcba9876543210fedcba9876543210"),
            Reply::Int(7),
            bulk("1"),
            bulk("p"),
            bulk("aaaaaaaa76543210fedcba9876543210"),
            Reply::Int(8),
            bulk("3"),
        ]);
        let forced = parse_forced(&permits).unwrap();
        assert_eq!(
            forced.deleted.iter().map(|h| (h.role, h.slots.clone())).collect::<Vec<_>>(),
            [(HolderRole::Permit, vec![0, 2]), (HolderRole::Permit, vec![1])]
        );
        assert_eq!(forced.kept.iter().map(|h| h.slots.clone()).collect::<Vec<_>>(), [vec![3]]);
        let report = ForcedRelease { resource: "r".into(), instances: vec![Ok(forced)], quorum: 1 };
        assert!(!report.is_free() && !report.released() && !report.holder_changed(), "{report:?}");

        let holder = Holder {
            owner: Some("01234567".into()),
            foreign: false,
            label: None,
            ttl: None,
            role: HolderRole::Exclusive,
            slots: vec![],
        };
        let gone = Forced { deleted: vec![holder.clone()], kept: vec![] };
        let minority = ForcedRelease {
            resource: "r".into(),
            instances: vec![Ok(gone), Err(LockError::backend("refused")), Err(LockError::backend("refused"))],
            quorum: 2,
        };
        assert!(!minority.released() && !minority.is_free() && !minority.holder_changed(), "{minority:?}");
        let taken = Forced { deleted: vec![], kept: vec![holder] };
        let changed = ForcedRelease { resource: "r".into(), instances: vec![Ok(taken)], quorum: 1 };
        assert!(changed.holder_changed() && !changed.released());
    }

    #[test]
    fn an_owner_id_is_checked_before_any_io() {
        assert_eq!(ExpectedHolder::Owner("0123ABCD".into()).argument().unwrap(), "0123abcd");
        assert_eq!(ExpectedHolder::Owner("~0123ABCD".into()).argument().unwrap(), "~0123abcd");
        for bad in
            ["", "0123abc", "0123abcg", "0123abcd 1", &"a".repeat(33), "~0123abc", &format!("~{}", "a".repeat(41))]
        {
            assert!(ExpectedHolder::Owner(bad.into()).argument().is_err(), "{bad:?}");
        }
        let shown = ExpectedHolder::Owners(vec!["0123abcd".into(), "~89abcdef".into()]);
        assert_eq!(shown.argument().unwrap(), "0123abcd ~89abcdef");
        assert!(ExpectedHolder::Owners(vec!["0123abcd".into(), "x".into()]).argument().is_err());
        assert_eq!(ExpectedHolder::Owners(vec![]).argument().unwrap(), "", "nobody shown: nobody expected");
        assert_eq!(ExpectedHolder::Anyone.argument().unwrap(), "*");
        assert_eq!(ExpectedHolder::Nobody.argument().unwrap(), "");
    }

    #[test]
    fn a_redlock_holder_needs_a_quorum_of_one_owner() {
        let held = |owner: &str| {
            Ok(LockState {
                holder: Some(Holder {
                    owner: Some(owner.into()),
                    foreign: false,
                    label: None,
                    ttl: None,
                    role: HolderRole::Exclusive,
                    slots: vec![],
                }),
                fence: Some(3),
                awaited: false,
                queued: 0,
                shared: vec![],
                record: vec![],
            })
        };
        let split = Inspection {
            resource: "r".into(),
            instances: vec![held("a"), held("b"), Err(LockError::backend("down"))],
            quorum: 2,
        };
        assert!(!split.is_held());
        assert_eq!(split.fence(), Some(3));
        let majority = Inspection { resource: "r".into(), instances: vec![held("a"), held("b"), held("a")], quorum: 2 };
        assert_eq!(majority.holder().and_then(|h| h.owner.as_deref()), Some("a"));
    }

    /// Over Redlock, an instance outside the last run's quorum keeps an older run's record (found by the admin
    /// conformance case under load: a job's next run granted on instances 1 and 2 only, and the inspection showed
    /// the run before it, from instance 0). With nobody holding, the record shown is the one kept where the
    /// latest grant was made: the highest fence.
    #[test]
    fn a_free_redlock_name_shows_the_record_of_its_latest_grant() {
        let kept = |fence: Option<u64>, outcome: &str| {
            Ok(LockState {
                holder: None,
                fence,
                awaited: false,
                queued: 0,
                shared: vec![],
                record: vec![("outcome".into(), outcome.into())],
            })
        };
        let stale_first = Inspection {
            resource: "r".into(),
            instances: vec![kept(Some(10), "lost"), kept(Some(20), "finished"), kept(Some(20), "finished")],
            quorum: 2,
        };
        assert_eq!(stale_first.record_field("outcome"), Some("finished"));
        let unfenced = Inspection {
            resource: "r".into(),
            instances: vec![Err(LockError::backend("down")), kept(None, "lost"), kept(None, "finished")],
            quorum: 2,
        };
        assert_eq!(unfenced.record_field("outcome"), Some("lost"), "without fences: the first that keeps one");
    }

    /// Issue 54 §4: after a split vote, a losing replica's start, given back at once, sits on one instance with
    /// that instance's (higher) counter; it never ran its work, so it is not the last run. With nobody holding, the
    /// record shown is the latest start that was not given back; only when every instance keeps a given-back one is
    /// that shown.
    #[test]
    fn a_split_votes_given_back_start_is_not_the_last_run() {
        let kept = |fence: u64, outcome: &str| {
            Ok(LockState {
                holder: None,
                fence: Some(fence),
                awaited: false,
                queued: 0,
                shared: vec![],
                record: vec![("outcome".into(), outcome.into())],
            })
        };
        let split = Inspection {
            resource: "r".into(),
            instances: vec![kept(30, "given_back"), kept(20, "finished"), kept(21, "finished")],
            quorum: 2,
        };
        assert_eq!(split.record_field("outcome"), Some("finished"));
        let nothing_ran = Inspection {
            resource: "r".into(),
            instances: vec![kept(30, "given_back"), kept(31, "given_back"), Err(LockError::backend("down"))],
            quorum: 2,
        };
        assert_eq!(nothing_ran.record_field("outcome"), Some("given_back"));
    }
}
