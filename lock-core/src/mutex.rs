//! What one guard holds: one resource, or several taken all or nothing; and the calls that take, extend and give
//! them back on one store. The engine in [`lock`](crate::lock) is written once over this, so a multi-resource lock
//! shares every line of waiting, validity, Redlock, renewal and cancel safety with the single lock.

use std::ops::Range;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{LockError, Result};
use crate::job::Ending;
use crate::options::{CrossSlot, ReplicaAck};
use crate::resource::LockKeys;
use crate::scripts;
use crate::store::{
    AcquireAllReply, AcquireAllRequest, AcquireReply, AcquireRequest, ExtendReply, LockStore, ReleaseOutcome,
};
use crate::token::Token;
use crate::transport::{Call, Reply, Topology};

/// The most resources one [`Lock::acquire_all`](crate::Lock::acquire_all) takes (one script's keys stay small,
/// and a lock over more resources than this is better modelled as a coarser resource).
pub const MAX_RESOURCES: usize = 256;

/// Redis Cluster's slot count.
const SLOTS: u16 = 16384;

/// The keys one acquisition holds.
#[derive(Debug)]
pub(crate) struct Target {
    /// Deduplicated and sorted by lock key; never empty.
    resources: Vec<LockKeys>,
    /// The groups acquired one after another (ranges of `resources`): one, unless resources in different Cluster
    /// slots are taken in [`CrossSlot::Ordered`] mode, where each group is one slot, in slot order.
    groups: Vec<Range<usize>>,
    /// What errors and traces call an acquisition of several resources: their names joined by `", "` (empty for
    /// one resource, whose name is its label: no copy per acquisition).
    label: String,
    /// Taken by [`Lock::acquire_all`](crate::Lock::acquire_all): its guard reads each resource's token from the
    /// grant and has no way to draw one later, so its tokens are drawn with the grant even when the list named
    /// one resource (`["a", "a"]`, or a computed list of one).
    bundle: bool,
    /// A job's run ([`JobLock`](crate::JobLock)): started and finished by the job scripts instead of the mutex's.
    job: Option<JobSpec>,
    /// An election's leadership: elected, renewed and resigned by the election scripts.
    election: Option<ElectionSpec>,
    /// A semaphore's permit: acquired, extended and released by the semaphore scripts.
    semaphore: Option<SemaphoreSpec>,
    /// A fair lock's queue: acquired and released by the fair scripts (and a read-write lock's writers' queue).
    fair: Option<FairSpec>,
    /// A read-write lock's hold: read by the read scripts, written by the fair ones with the readers' key; extended
    /// and released by the read-write lock's own.
    rw: Option<RwSpec>,
}

/// What a read-write lock's scripts need beyond the writer's keys (see [`RwLock`](crate::RwLock)).
#[derive(Debug)]
pub(crate) struct RwSpec {
    /// `prefix:rw:{name}:readers`: token → expiry, server ms.
    pub(crate) readers: String,
    /// The writers' queue and its heartbeats (as a fair lock's).
    pub(crate) queue: String,
    pub(crate) heartbeats: String,
    /// A reader's hold (the writer's goes through the fair scripts).
    pub(crate) reader: bool,
    /// Set by a downgrade: the next extension turns the write hold into a read hold in one step.
    pub(crate) downgrade: std::sync::atomic::AtomicBool,
}

/// The queue of a fair lock (see [`LockOptions::with_fair_queue`](crate::LockOptions::with_fair_queue)).
#[derive(Debug)]
pub(crate) struct FairSpec {
    /// `prefix{resource}:queue`: token → ticket.
    queue: String,
    /// `prefix{resource}:heartbeats`: token → expiry of its place, server ms.
    heartbeats: String,
    /// `prefix{resource}:grants`: token → how a release grants it the lock (see
    /// [`FAIR_RELEASE`](crate::scripts::FAIR_RELEASE)).
    grants: String,
    /// The waiter TTL, and in ms.
    waiter_ttl: Duration,
    waiter_ttl_ms: String,
}

impl FairSpec {
    /// The lease a release grants a waiter of this queue acquiring with `ttl` (see
    /// [`FAIR_RELEASE`](crate::scripts::FAIR_RELEASE)): never longer than its waiter TTL, so a head that died just
    /// before its turn holds the lock no longer than its place would have held up the queue.
    pub(crate) fn lease(&self, ttl: Duration) -> Duration {
        ttl.min(self.waiter_ttl)
    }
}

/// What an election's scripts need beyond the lock key (see [`Election`](crate::Election)).
#[derive(Debug)]
pub(crate) struct ElectionSpec {
    /// The leader record (`prefix{name}:info`).
    pub(crate) info: String,
    /// The channel observers listen on (`prefix{name}:leader`).
    pub(crate) channel: String,
    /// The candidate's id and initial value.
    pub(crate) id: String,
    pub(crate) value: String,
    /// How long a leader trusts its leadership after the start of its last successful renewal.
    pub(crate) renew_deadline: Duration,
    /// The candidacies given back before their `ELECT` arrived (`prefix{name}:given-back`), and how long each is
    /// remembered there (the lease, in ms).
    pub(crate) given_back: String,
    pub(crate) lease_ms: String,
    /// The process a hand-over promised the election to (`prefix{name}:promised`), and for how long (ms; empty
    /// over Redlock, where each instance's line could name another process and promises would split the vote).
    pub(crate) promised: String,
    pub(crate) grace_ms: String,
}

/// What a semaphore's scripts need (see [`Semaphore`](crate::Semaphore)).
#[derive(Debug)]
pub(crate) struct SemaphoreSpec {
    /// Expiries, slots, grants, limit (`prefix{name}:sem:…`).
    pub(crate) keys: std::sync::Arc<[String; 4]>,
    pub(crate) limit: String,
    /// How many slots this permit takes.
    pub(crate) permits: String,
    /// The slots granted (set by the grant).
    pub(crate) granted: Mutex<Vec<u32>>,
}

/// What a job's start and finish need beyond the lock key.
#[derive(Debug)]
pub(crate) struct JobSpec {
    /// The key of the job's record (`prefix{job}:info`).
    pub(crate) info: String,
    /// Tick mode: the tick's key and its TTL in ms.
    pub(crate) tick: Option<(String, u64)>,
    /// This run's holder label.
    pub(crate) holder: String,
    /// `at_least_for` in ms.
    pub(crate) at_least_ms: u64,
    /// How the run ends, as its record will say (a run dropped before it set this was cancelled).
    pub(crate) ending: Mutex<Ending>,
}

/// One store's answer to an acquire of a [`Target`].
#[derive(Debug)]
pub(crate) enum Grant {
    /// Every resource is ours; each one's fencing counter when fencing.
    Acquired { fences: Vec<Option<u64>> },
    /// Resource `index` is held by someone else (nothing of ours is left on this store, but a place in a fair lock's
    /// queue); `holder` is its label, when the primitive records one; `place` our 0-based place in a fair lock's
    /// queue.
    Held { index: usize, ttl: Option<Duration>, holder: Option<String>, place: Option<u64> },
}

/// The fixed part of one acquire request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask<'a> {
    pub(crate) token: &'a Token,
    pub(crate) ttl: Duration,
    pub(crate) fencing: bool,
    pub(crate) fence_floor: Option<u64>,
    pub(crate) replicas: Option<ReplicaAck>,
    /// A fair lock's waiting acquire: take (or keep, as a heartbeat) a place in the queue when not granted, and
    /// renew these peers' places (see [`Queued`](crate::fair::Queued)).
    pub(crate) queued: Option<&'a [String]>,
}

/// The Cluster hash slot of `key` (CRC16/XMODEM of its hash tag, or of the whole key without one).
pub(crate) fn slot(key: &str) -> u16 {
    const CRC: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|b| *b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    CRC.checksum(tagged.unwrap_or(bytes)) % SLOTS
}

impl Target {
    /// One resource.
    pub(crate) fn one(keys: LockKeys) -> Self {
        Target {
            resources: vec![keys],
            groups: std::iter::once(0..1).collect(),
            label: String::new(),
            bundle: false,
            job: None,
            election: None,
            semaphore: None,
            fair: None,
            rw: None,
        }
    }

    /// One resource, acquired in the order of a queue of waiters that hold their place for `waiter_ttl` per
    /// heartbeat.
    pub(crate) fn fair(keys: LockKeys, waiter_ttl: Duration) -> Self {
        let fair = FairSpec {
            queue: crate::fair::queue_key(&keys),
            heartbeats: crate::fair::heartbeats_key(&keys),
            grants: crate::fair::grants_key(&keys),
            waiter_ttl,
            waiter_ttl_ms: scripts::ttl_millis(waiter_ttl).to_string(),
        };
        Target { fair: Some(fair), ..Self::one(keys) }
    }

    /// One permit of a semaphore.
    pub(crate) fn semaphore(keys: LockKeys, spec: SemaphoreSpec) -> Self {
        Target { semaphore: Some(spec), ..Self::one(keys) }
    }

    /// The slots a semaphore permit was granted (empty for anything else).
    pub(crate) fn semaphore_slots(&self) -> Vec<u32> {
        self.semaphore
            .as_ref()
            .map(|spec| spec.granted.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone())
            .unwrap_or_default()
    }

    /// One leadership of an election.
    pub(crate) fn election(keys: LockKeys, spec: ElectionSpec) -> Self {
        Target { election: Some(spec), ..Self::one(keys) }
    }

    /// Until when a grant (or extension) whose request started at `started` may be trusted: the lease's validity,
    /// and for a leadership no later than its renew deadline (the leader stops acting before anyone else can win).
    pub(crate) fn valid_until(&self, started: std::time::Instant, ttl: Duration) -> std::time::Instant {
        let lease = crate::lease::valid_until(started, ttl);
        match &self.election {
            Some(election) => {
                started.checked_add(election.renew_deadline).map_or(lease, |deadline| deadline.min(lease))
            }
            None => lease,
        }
    }

    /// Whether this is a fair lock's target (a read-write lock's writer is one too).
    pub(crate) fn is_fair(&self) -> bool {
        self.fair.is_some()
    }

    /// Whether taking, extending or releasing this target is one store call (not several groups one after another).
    pub(crate) fn is_one_call(&self) -> bool {
        self.groups.len() == 1
    }

    /// Whether a [`Fencing::OnDemand`](crate::Fencing::OnDemand) token may be drawn after the grant (by
    /// [`FENCE`](scripts::FENCE), which reads the plain lock key): a single resource, plain or fair, taken by
    /// `acquire`. The other primitives keep their holds in keys of their own, and a multi-lock's guard has no later
    /// draw: they draw at the grant.
    pub(crate) fn draws_fence_later(&self) -> bool {
        self.resources.len() == 1
            && !self.bundle
            && self.job.is_none()
            && self.election.is_none()
            && self.semaphore.is_none()
            && self.rw.is_none()
    }

    /// The lease a fair queue's release grants a waiter of this target acquiring with `ttl` (a fair mutex's
    /// waiter; `None` for anything else, a read-write lock's writer included, which is only told).
    pub(crate) fn fair_lease(&self, ttl: Duration) -> Option<Duration> {
        match (&self.fair, &self.rw) {
            (Some(fair), None) => Some(fair.lease(ttl)),
            _ => None,
        }
    }

    /// Whether a release tells only the head of a queue, so a release must not wake a local waiter itself (a fair
    /// lock's). A read-write lock's release may let readers in, which its announcement (an echo the local hub skips)
    /// would not wake in this process.
    pub(crate) fn wakes_head_only(&self) -> bool {
        self.fair.is_some() && self.rw.is_none()
    }

    /// A read-write lock's reader (`reader`) or writer, whose writers queue with `waiter_ttl` per heartbeat.
    pub(crate) fn rw(keys: LockKeys, reader: bool, waiter_ttl: Duration) -> Self {
        let queue = crate::fair::queue_key(&keys);
        let heartbeats = crate::fair::heartbeats_key(&keys);
        let rw = RwSpec {
            readers: format!("{}:readers", keys.lock()),
            queue: queue.clone(),
            heartbeats: heartbeats.clone(),
            reader,
            downgrade: std::sync::atomic::AtomicBool::new(false),
        };
        let fair = (!reader).then(|| FairSpec {
            queue,
            heartbeats,
            grants: crate::fair::grants_key(&keys),
            waiter_ttl,
            waiter_ttl_ms: scripts::ttl_millis(waiter_ttl).to_string(),
        });
        Target { rw: Some(rw), fair, ..Self::one(keys) }
    }

    /// Makes the next extension of a read-write lock's write hold a downgrade (no effect on anything else).
    pub(crate) fn downgrade_next_extension(&self) {
        if let Some(rw) = &self.rw {
            rw.downgrade.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// One run of a job.
    pub(crate) fn job(keys: LockKeys, spec: JobSpec) -> Self {
        Target { job: Some(spec), ..Self::one(keys) }
    }

    /// Sets how a job's run ends (what its finish records); no effect on a lock.
    pub(crate) fn end_as(&self, ending: Ending) {
        if let Some(job) = &self.job {
            *job.ending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = ending;
        }
    }

    /// Several resources, all or nothing: deduplicated and sorted, and on Redis Cluster grouped by slot.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for no resources or more than [`MAX_RESOURCES`];
    /// [`LockError::CrossSlot`] when `topology` is a cluster, the resources span several slots, and `cross_slot`
    /// is [`CrossSlot::Reject`].
    pub(crate) fn all(mut resources: Vec<LockKeys>, topology: Topology, cross_slot: CrossSlot) -> Result<Self> {
        resources.sort_by(|a, b| a.lock().cmp(b.lock()));
        resources.dedup_by(|a, b| a.lock() == b.lock());
        if resources.is_empty() {
            return Err(LockError::invalid("acquire_all needs at least one resource"));
        }
        if resources.len() > MAX_RESOURCES {
            return Err(LockError::invalid(format!("acquire_all takes at most {MAX_RESOURCES} resources")));
        }
        let mut groups: Vec<Range<usize>> = std::iter::once(0..resources.len()).collect();
        if topology == Topology::Cluster {
            // Fixed order: by slot, then by key (already sorted), so two callers always take groups in one order.
            resources.sort_by_key(|k| slot(k.lock()));
            groups.clear();
            let mut start = 0;
            for i in 1..=resources.len() {
                if i == resources.len() || slot(resources[i].lock()) != slot(resources[start].lock()) {
                    groups.push(start..i);
                    start = i;
                }
            }
            if groups.len() > 1 && cross_slot == CrossSlot::Reject {
                return Err(LockError::CrossSlot {
                    resources: resources.iter().map(|k| k.resource().to_owned()).collect(),
                    slots: groups.len(),
                });
            }
        }
        let label = if resources.len() > 1 {
            resources.iter().map(LockKeys::resource).collect::<Vec<_>>().join(", ")
        } else {
            String::new()
        };
        Ok(Target {
            resources,
            groups,
            label,
            bundle: true,
            job: None,
            election: None,
            semaphore: None,
            fair: None,
            rw: None,
        })
    }

    /// The resources, in the order every reply and fence list follows.
    pub(crate) fn resources(&self) -> &[LockKeys] {
        &self.resources
    }

    /// The resource, or the resources joined by `", "`.
    pub(crate) fn label(&self) -> &str {
        match self.resources.as_slice() {
            [one] => one.resource(),
            _ => &self.label,
        }
    }

    /// Whether this is the single lock (one resource): then the mutex's own calls are used.
    fn is_one(&self) -> bool {
        self.resources.len() == 1
    }

    /// Acquires every resource on `store`, all or nothing. In ordered mode the groups are taken one after another;
    /// a group found held gives the earlier ones back before this returns, so nobody holds while waiting.
    pub(crate) async fn acquire(&self, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        if let Some(election) = &self.election {
            return self.elect(election, store, ask).await;
        }
        if let Some(semaphore) = &self.semaphore {
            return self.acquire_permit(semaphore, store, ask).await;
        }
        if let Some(job) = &self.job {
            return self.start_job(job, store, ask).await;
        }
        if let Some(rw) = self.rw.as_ref().filter(|rw| rw.reader) {
            return self.acquire_read(rw, store, ask).await;
        }
        if let Some(fair) = &self.fair {
            return self.acquire_fair(fair, store, ask).await;
        }
        if self.is_one() {
            let keys = &self.resources[0];
            let waiting_as = store.release_hub().filter(|hub| hub.lines_up(keys.channel())).map(|hub| hub.origin());
            let request = AcquireRequest {
                keys,
                token: ask.token,
                ttl: ask.ttl,
                fencing: ask.fencing,
                fence_floor: ask.fence_floor,
                replicas: ask.replicas,
                waiting_as,
            };
            return Ok(match store.acquire(request).await? {
                AcquireReply::Acquired { fence } => Grant::Acquired { fences: vec![fence] },
                AcquireReply::Held { ttl } => Grant::Held { index: 0, ttl, holder: None, place: None },
            });
        }
        let mut fences = Vec::with_capacity(self.resources.len());
        // A multi-resource waiter listens on every resource's channel, so any of them tells whether it lines up.
        let waiting_as = store
            .release_hub()
            .filter(|hub| self.resources.first().is_some_and(|keys| hub.lines_up(keys.channel())))
            .map(|hub| hub.origin());
        for (g, group) in self.groups.iter().enumerate() {
            let request = AcquireAllRequest {
                keys: &self.resources[group.clone()],
                token: ask.token,
                ttl: ask.ttl,
                fencing: ask.fencing,
                fence_floor: ask.fence_floor,
                replicas: ask.replicas,
                waiting_as,
            };
            let reply = match store.acquire_all(request).await {
                Ok(reply) => reply,
                Err(err) => {
                    if g > 0 {
                        // The engine releases everything by token when an error may follow a write; an error
                        // raised before sending would not, and the earlier groups are ours.
                        self.release_groups(store, ask.token, 0..g).await;
                    }
                    return Err(err);
                }
            };
            match reply {
                AcquireAllReply::Acquired { fences: group_fences } if group_fences.len() == group.len() => {
                    fences.extend(group_fences);
                }
                AcquireAllReply::Held { index, ttl } => {
                    self.release_groups(store, ask.token, 0..g).await;
                    return Ok(Grant::Held { index: group.start + index, ttl, holder: None, place: None });
                }
                other => {
                    self.release_groups(store, ask.token, 0..g + 1).await;
                    return Err(LockError::backend(format!("unexpected multi-acquire reply: {other:?}")));
                }
            }
        }
        Ok(Grant::Acquired { fences })
    }

    /// Gives back groups `range` (best effort: what fails expires at its TTL, and the engine's cancel safety
    /// releases by token again).
    async fn release_groups(&self, store: &dyn LockStore, token: &Token, range: Range<usize>) {
        for group in &self.groups[range] {
            if let Err(err) = store.release_all(&self.resources[group.clone()], token).await {
                tracing::debug!(resources = self.label(), error = %err.report(), "giving back a slot group failed; TTL applies");
            }
        }
    }

    /// Compare-and-delete of every resource on `store`: one outcome per resource.
    pub(crate) async fn release(&self, store: &dyn LockStore, token: &Token) -> Result<Vec<ReleaseOutcome>> {
        if let Some(election) = &self.election {
            return Ok(vec![self.resign(election, store, token).await?]);
        }
        if let Some(semaphore) = &self.semaphore {
            return Ok(vec![self.release_permit(semaphore, store, token).await?]);
        }
        if let Some(job) = &self.job {
            return Ok(vec![self.finish_job(job, store, token).await?]);
        }
        if let Some(rw) = &self.rw {
            return Ok(vec![self.release_rw(rw, store, token).await?]);
        }
        if let Some(fair) = &self.fair {
            return Ok(vec![self.release_fair(fair, store, token).await?]);
        }
        if self.is_one() {
            return Ok(vec![store.release(&self.resources[0], token).await?]);
        }
        let mut outcomes = Vec::with_capacity(self.resources.len());
        let mut first_error = None;
        for group in &self.groups {
            match store.release_all(&self.resources[group.clone()], token).await {
                Ok(group_outcomes) => outcomes.extend(group_outcomes),
                // The other groups are still released; this one expires at its TTL.
                Err(err) => drop(first_error.get_or_insert(err)),
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(outcomes),
        }
    }

    /// Compare-and-extend of every resource on `store`, all or nothing per group: what each resource held.
    pub(crate) async fn extend(&self, store: &dyn LockStore, token: &Token, ttl: Duration) -> Result<Vec<ExtendReply>> {
        if let Some(election) = &self.election {
            return Ok(vec![self.renew_leadership(election, store, token, ttl).await?]);
        }
        if let Some(semaphore) = &self.semaphore {
            return Ok(vec![self.extend_permit(semaphore, store, token, ttl).await?]);
        }
        if let Some(rw) = &self.rw {
            return Ok(vec![self.extend_rw(rw, store, token, ttl).await?]);
        }
        if self.is_one() {
            return Ok(vec![store.extend(&self.resources[0], token, ttl).await?]);
        }
        let mut replies = Vec::with_capacity(self.resources.len());
        for group in &self.groups {
            replies.extend(store.extend_all(&self.resources[group.clone()], token, ttl).await?);
        }
        Ok(replies)
    }
}

impl Target {
    /// [`JOB_START`](crate::scripts::JOB_START) on one store.
    async fn start_job(&self, job: &JobSpec, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.resources[0];
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let at_least = job.at_least_ms.to_string();
        let fencing = if ask.fencing { "1" } else { "0" };
        let tick_ttl = job.tick.as_ref().map(|(_, ttl)| ttl.to_string()).unwrap_or_default();
        let mut call_keys = vec![keys.lock(), keys.fence(), job.info.as_str()];
        call_keys.extend(job.tick.as_ref().map(|(key, _)| key.as_str()));
        let args = [ask.token.as_str(), &ttl, fencing, &job.holder, &at_least, &tick_ttl];
        let call = Call::script("acquire", &scripts::JOB_START, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let unexpected = || LockError::backend(format!("unexpected reply to the job-start script: {:?}", ran.reply));
        let Reply::Array(items) = &ran.reply else { return Err(unexpected()) };
        let int = |i: usize| items.get(i).and_then(Reply::as_int);
        let grant = match int(0) {
            Some(1) => Grant::Acquired { fences: vec![int(1).and_then(|f| u64::try_from(f).ok())] },
            Some(0) => Grant::Held {
                index: 0,
                ttl: int(1).and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis),
                holder: items.get(2).and_then(Reply::as_text).map(str::to_owned),
                place: None,
            },
            _ => return Err(unexpected()),
        };
        if let (Some(ack), Grant::Acquired { .. }) = (ask.replicas, &grant) {
            ack.check(ran.replicas.unwrap_or(0))?;
        }
        Ok(grant)
    }

    /// [`JOB_FINISH`](crate::scripts::JOB_FINISH) on one store: owner-checked, keeping the lock for `at_least_for`.
    async fn finish_job(&self, job: &JobSpec, store: &dyn LockStore, token: &Token) -> Result<ReleaseOutcome> {
        let keys = &self.resources[0];
        let ending = *job.ending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let origin = store.release_hub().map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
        let mut call_keys = vec![keys.lock(), job.info.as_str(), keys.channel()];
        call_keys.extend(job.tick.as_ref().map(|(key, _)| key.as_str()));
        let args = [token.as_str(), ending.as_str(), origin, sharded];
        let ran = store.call(Call::script("release", &scripts::JOB_FINISH, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            // Kept until `at_least_for` has passed: released, as far as this run is concerned.
            Some(2) => Ok(ReleaseOutcome::Released),
            Some(code) => scripts::parse_release(code),
            None => Err(LockError::backend(format!("unexpected reply to the job-finish script: {:?}", ran.reply))),
        }
    }
}

impl Target {
    /// [`FAIR_ACQUIRE`](crate::scripts::FAIR_ACQUIRE) on one store.
    async fn acquire_fair(&self, fair: &FairSpec, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.resources[0];
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let fencing = if ask.fencing { "1" } else { "0" };
        let floor = ask.fence_floor.map(|f| f.to_string()).unwrap_or_default();
        let queue = if ask.queued.is_some() { "1" } else { "0" };
        let hub = store.release_hub();
        let origin = hub.map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
        let mut call_keys = vec![
            keys.lock(),
            keys.fence(),
            &fair.queue,
            &fair.heartbeats,
            keys.channel(),
            keys.awaited(),
            &fair.grants,
        ];
        call_keys.extend(self.rw.as_ref().map(|rw| rw.readers.as_str()));
        // How a release grants us the lock when we are the head: a lease of our TTL, or our waiter TTL when that is
        // shorter (see `FAIR_RELEASE`). A read-write lock's writer is only told (its grant depends on readers).
        let grant = match (&self.rw, ask.queued) {
            (None, Some(_)) => {
                let lease = scripts::ttl_millis(fair.lease(ask.ttl));
                format!("{lease} {fencing}")
            }
            _ => String::new(),
        };
        let mut args =
            vec![ask.token.as_str(), &ttl, fencing, &floor, &fair.waiter_ttl_ms, queue, origin, sharded, &grant];
        args.extend(ask.queued.unwrap_or_default().iter().map(String::as_str));
        let call = Call::script("acquire", &scripts::FAIR_ACQUIRE, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let Reply::Array(items) = &ran.reply else { return Err(unexpected_fair(&ran.reply)) };
        let int = |i: usize| items.get(i).and_then(Reply::as_int);
        let grant = match (int(0), items.len(), ask.fencing) {
            (Some(1), 2, true) => Grant::Acquired { fences: vec![int(1).and_then(|f| u64::try_from(f).ok())] },
            (Some(1), 1, false) => Grant::Acquired { fences: vec![None] },
            (Some(0), 3.., _) => {
                // Peers whose place was gone: they take a new one with a try of their own.
                for lost in items.iter().skip(3).filter_map(Reply::as_text) {
                    if let Some(hub) = hub {
                        hub.place_lost(keys.channel(), lost);
                    }
                }
                Grant::Held {
                    index: 0,
                    // -2: free, but someone is queued ahead of us.
                    ttl: int(1).and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis),
                    holder: None,
                    place: int(2).and_then(|p| u64::try_from(p).ok()),
                }
            }
            _ => return Err(unexpected_fair(&ran.reply)),
        };
        if let (Some(ack), Grant::Acquired { .. }) = (ask.replicas, &grant) {
            ack.check(ran.replicas.unwrap_or(0))?;
        }
        Ok(grant)
    }

    /// [`FAIR_RELEASE`](crate::scripts::FAIR_RELEASE) on one store: the release of a fair lock, and a waiter
    /// leaving its queue.
    async fn release_fair(&self, fair: &FairSpec, store: &dyn LockStore, token: &Token) -> Result<ReleaseOutcome> {
        let keys = &self.resources[0];
        let origin = store.release_hub().map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
        let call_keys =
            [keys.lock(), &fair.queue, &fair.heartbeats, keys.channel(), keys.awaited(), keys.fence(), &fair.grants];
        let args = [token.as_str(), origin, sharded];
        let ran = store.call(Call::script("release", &scripts::FAIR_RELEASE, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(code) => scripts::parse_release(code),
            None => Err(unexpected_fair(&ran.reply)),
        }
    }
}

fn unexpected_fair(reply: &Reply) -> LockError {
    LockError::backend(format!("unexpected reply to a fair-lock script: {reply:?}"))
}

impl Target {
    /// [`ELECT`](crate::scripts::ELECT) on one store.
    async fn elect(&self, election: &ElectionSpec, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.resources[0];
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let floor = ask.fence_floor.map(|f| f.to_string()).unwrap_or_default();
        let origin = store.release_hub().map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
        // The candidate's process lines up when it hears releases (as a mutex's waiter does, see `acquire`).
        let waiting_as =
            store.release_hub().filter(|hub| hub.lines_up(keys.channel())).map(|hub| hub.origin()).unwrap_or_default();
        let call_keys = [
            keys.lock(),
            keys.fence(),
            keys.awaited(),
            &election.info,
            &election.channel,
            &election.given_back,
            keys.waiting(),
            &election.promised,
            keys.channel(),
        ];
        let args = [
            ask.token.as_str(),
            &ttl,
            &floor,
            &election.id,
            &election.value,
            origin,
            sharded,
            waiting_as,
            &election.grace_ms,
        ];
        let call = Call::script("acquire", &scripts::ELECT, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let ints = ran.reply.as_ints().unwrap_or_default();
        let grant = match ints.as_slice() {
            [1, term] => Grant::Acquired { fences: vec![u64::try_from(*term).ok()] },
            [0, pttl] => Grant::Held {
                index: 0,
                ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                holder: None,
                place: None,
            },
            _ => return Err(LockError::backend(format!("unexpected reply to the elect script: {:?}", ran.reply))),
        };
        if let (Some(ack), Grant::Acquired { .. }) = (ask.replicas, &grant) {
            ack.check(ran.replicas.unwrap_or(0))?;
        }
        Ok(grant)
    }

    /// [`ELECTION_RENEW`](crate::scripts::ELECTION_RENEW) on one store.
    async fn renew_leadership(
        &self,
        election: &ElectionSpec,
        store: &dyn LockStore,
        token: &Token,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        let ttl = scripts::ttl_millis(ttl).to_string();
        let call_keys = [self.resources[0].lock(), election.info.as_str()];
        let args = [token.as_str(), &ttl];
        let ran = store.call(Call::script("extend", &scripts::ELECTION_RENEW, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(code) => scripts::parse_extend(code),
            None => Err(LockError::backend(format!("unexpected reply to the renew script: {:?}", ran.reply))),
        }
    }

    /// Raises `keys`' fencing counter to `want` on one store while it holds `token` (the Redlock write-back), and
    /// an election's leader record's term with it (see [`RAISE_FENCE`](crate::scripts::RAISE_FENCE)).
    pub(crate) async fn raise_fence(
        &self,
        store: &dyn LockStore,
        keys: &LockKeys,
        token: &Token,
        want: u64,
    ) -> Result<bool> {
        let Some(election) = &self.election else { return store.raise_fence(keys, token, want).await };
        let want = want.to_string();
        let call_keys = [keys.lock(), keys.fence(), election.info.as_str()];
        let args = [token.as_str(), want.as_str()];
        let ran = store.call(Call::script("raise-fence", &scripts::RAISE_FENCE, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(true),
            Some(0) => Ok(false),
            _ => Err(LockError::backend(format!("unexpected reply to the raise-fence script: {:?}", ran.reply))),
        }
    }

    /// [`RESIGN`](crate::scripts::RESIGN) on one store.
    async fn resign(&self, election: &ElectionSpec, store: &dyn LockStore, token: &Token) -> Result<ReleaseOutcome> {
        let keys = &self.resources[0];
        let origin = store.release_hub().map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
        let call_keys = [
            keys.lock(),
            &election.info,
            keys.channel(),
            keys.awaited(),
            &election.channel,
            &election.given_back,
            keys.waiting(),
            &election.promised,
        ];
        let args = [token.as_str(), origin, sharded, &election.lease_ms, &election.grace_ms];
        let ran = store.call(Call::script("release", &scripts::RESIGN, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(code) => scripts::parse_release(code),
            None => Err(LockError::backend(format!("unexpected reply to the resign script: {:?}", ran.reply))),
        }
    }
}

impl Target {
    /// [`SEM_ACQUIRE`](crate::scripts::SEM_ACQUIRE) on one store.
    async fn acquire_permit(&self, semaphore: &SemaphoreSpec, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.resources[0];
        let [exp, slots, grants, limit] = &*semaphore.keys;
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let fencing = if ask.fencing { "1" } else { "0" };
        let floor = ask.fence_floor.map(|f| f.to_string()).unwrap_or_default();
        let call_keys = [exp.as_str(), slots, grants, limit, keys.fence(), keys.awaited()];
        let args = [ask.token.as_str(), &semaphore.permits, &ttl, &semaphore.limit, fencing, &floor];
        let call = Call::script("acquire", &scripts::SEM_ACQUIRE, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let grant = match crate::semaphore::parse_acquire(&ran.reply, keys.resource(), &semaphore.limit)? {
            crate::semaphore::Try::Granted { fence, slots } => {
                *semaphore.granted.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = slots;
                Grant::Acquired { fences: vec![fence.filter(|_| ask.fencing)] }
            }
            crate::semaphore::Try::Full { wait, room } => {
                // Free slots too few for this request may fit a smaller one: the next local waiter tries.
                if room {
                    if let Some(hub) = store.release_hub() {
                        hub.pass_room_on(keys.channel());
                    }
                }
                Grant::Held { index: 0, ttl: wait, holder: None, place: None }
            }
        };
        if let (Some(ack), Grant::Acquired { .. }) = (ask.replicas, &grant) {
            ack.check(ran.replicas.unwrap_or(0))?;
        }
        Ok(grant)
    }

    /// [`SEM_EXTEND`](crate::scripts::SEM_EXTEND) on one store.
    async fn extend_permit(
        &self,
        semaphore: &SemaphoreSpec,
        store: &dyn LockStore,
        token: &Token,
        ttl: Duration,
    ) -> Result<ExtendReply> {
        let [exp, slots, grants, limit] = &*semaphore.keys;
        let ttl = scripts::ttl_millis(ttl).to_string();
        let call_keys = [exp.as_str(), slots, grants, limit];
        let args = [token.as_str(), &ttl];
        let ran = store.call(Call::script("extend", &scripts::SEM_EXTEND, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(ExtendReply::Extended),
            Some(0) => Ok(ExtendReply::Absent),
            _ => Err(LockError::backend(format!("unexpected reply to the semaphore-extend script: {:?}", ran.reply))),
        }
    }

    /// [`SEM_RELEASE`](crate::scripts::SEM_RELEASE) on one store.
    async fn release_permit(
        &self,
        semaphore: &SemaphoreSpec,
        store: &dyn LockStore,
        token: &Token,
    ) -> Result<ReleaseOutcome> {
        let keys = &self.resources[0];
        let [exp, slots, grants, limit] = &*semaphore.keys;
        let origin = store.release_hub().map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
        let call_keys = [exp.as_str(), slots, grants, limit, keys.channel(), keys.awaited()];
        let args = [token.as_str(), origin, sharded];
        let ran = store.call(Call::script("release", &scripts::SEM_RELEASE, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(ReleaseOutcome::Released),
            // Past its expiry (2), or purged already (0): the holder overran its TTL.
            Some(0 | 2) => Ok(ReleaseOutcome::AlreadyExpired),
            _ => Err(LockError::backend(format!("unexpected reply to the semaphore-release script: {:?}", ran.reply))),
        }
    }
}

impl Target {
    /// The keys every read-write lock script takes first: writer, readers, waiting writers, their heartbeats.
    fn rw_keys<'a>(&'a self, rw: &'a RwSpec) -> [&'a str; 4] {
        [self.resources[0].lock(), &rw.readers, &rw.queue, &rw.heartbeats]
    }

    /// [`RW_READ`](crate::scripts::RW_READ) on one store.
    async fn acquire_read(&self, rw: &RwSpec, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.resources[0];
        let [writer, readers, queue, heartbeats] = self.rw_keys(rw);
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let fencing = if ask.fencing { "1" } else { "0" };
        let call_keys = [writer, readers, queue, heartbeats, keys.fence(), keys.awaited()];
        let args = [ask.token.as_str(), &ttl, fencing];
        let call = Call::script("acquire", &scripts::RW_READ, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let ints = ran.reply.as_ints().unwrap_or_default();
        let grant = match (ints.as_slice(), ask.fencing) {
            ([1, epoch], true) => Grant::Acquired { fences: vec![u64::try_from(*epoch).ok()] },
            ([1], false) => Grant::Acquired { fences: vec![None] },
            ([0, wait], _) => Grant::Held {
                index: 0,
                ttl: u64::try_from(*wait).ok().map(Duration::from_millis),
                holder: None,
                place: None,
            },
            _ => return Err(LockError::backend(format!("unexpected reply to the rw-read script: {:?}", ran.reply))),
        };
        if let (Some(ack), Grant::Acquired { .. }) = (ask.replicas, &grant) {
            ack.check(ran.replicas.unwrap_or(0))?;
        }
        Ok(grant)
    }

    /// [`RW_EXTEND`](crate::scripts::RW_EXTEND) on one store (a downgrade when one was asked for).
    async fn extend_rw(&self, rw: &RwSpec, store: &dyn LockStore, token: &Token, ttl: Duration) -> Result<ExtendReply> {
        let keys = &self.resources[0];
        let [writer, readers, queue, heartbeats] = self.rw_keys(rw);
        let ttl = scripts::ttl_millis(ttl).to_string();
        let downgrade = if rw.downgrade.load(std::sync::atomic::Ordering::SeqCst) { "1" } else { "0" };
        let origin = store.release_hub().map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
        let call_keys = [writer, readers, queue, heartbeats, keys.channel(), keys.awaited()];
        let args = [token.as_str(), &ttl, downgrade, origin, sharded];
        let ran = store.call(Call::script("extend", &scripts::RW_EXTEND, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(ExtendReply::Extended),
            Some(0) => Ok(ExtendReply::Absent),
            _ => Err(LockError::backend(format!("unexpected reply to the rw-extend script: {:?}", ran.reply))),
        }
    }

    /// [`RW_RELEASE`](crate::scripts::RW_RELEASE) on one store: a read or write hold, or a waiting writer's place.
    async fn release_rw(&self, rw: &RwSpec, store: &dyn LockStore, token: &Token) -> Result<ReleaseOutcome> {
        let keys = &self.resources[0];
        let [writer, readers, queue, heartbeats] = self.rw_keys(rw);
        let origin = store.release_hub().map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
        let call_keys = [writer, readers, queue, heartbeats, keys.channel(), keys.awaited()];
        let args = [token.as_str(), origin, sharded];
        let ran = store.call(Call::script("release", &scripts::RW_RELEASE, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(ReleaseOutcome::Released),
            Some(0 | 2) => Ok(ReleaseOutcome::AlreadyExpired),
            Some(-1) => Ok(ReleaseOutcome::OwnedByOther),
            _ => Err(LockError::backend(format!("unexpected reply to the rw-release script: {:?}", ran.reply))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<LockKeys> {
        names.iter().map(|n| LockKeys::new("lock:", n).unwrap_or_else(|e| panic!("{e}"))).collect()
    }

    #[test]
    fn slots_follow_redis_cluster() {
        // What `CLUSTER KEYSLOT` answers (the examples of its documentation); a key with an empty tag hashes whole.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("somekey"), 11058);
        assert_eq!(slot("{user1000}.following"), 3443);
        assert_eq!(slot("{user1000}.followers"), 3443);
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
    }

    #[test]
    fn resources_are_deduplicated_sorted_and_capped() {
        let t = Target::all(keys(&["b", "a", "b", "c", "a"]), Topology::Single, CrossSlot::Reject).unwrap();
        let names: Vec<_> = t.resources().iter().map(LockKeys::resource).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(t.label(), "a, b, c");
        assert!(matches!(Target::all(vec![], Topology::Single, CrossSlot::Reject), Err(LockError::InvalidArgument(_))));
        let many: Vec<String> = (0..=MAX_RESOURCES).map(|i| format!("r{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(matches!(
            Target::all(keys(&many), Topology::Single, CrossSlot::Reject),
            Err(LockError::InvalidArgument(_))
        ));
        assert!(Target::all(keys(&many[..MAX_RESOURCES]), Topology::Single, CrossSlot::Reject).is_ok());
    }

    #[test]
    fn cluster_groups_by_slot_in_a_fixed_order() {
        let names = ["a", "b", "c", "d", "e"];
        assert!(matches!(
            Target::all(keys(&names), Topology::Cluster, CrossSlot::Reject),
            Err(LockError::CrossSlot { slots: 5, .. })
        ));
        let forward = Target::all(keys(&names), Topology::Cluster, CrossSlot::Ordered).unwrap();
        let mut reversed = names;
        reversed.reverse();
        let backward = Target::all(keys(&reversed), Topology::Cluster, CrossSlot::Ordered).unwrap();
        assert_eq!(forward.resources(), backward.resources());
        assert_eq!(forward.groups.len(), 5);
        let slots: Vec<u16> = forward.resources().iter().map(|k| slot(k.lock())).collect();
        assert!(slots.windows(2).all(|w| w[0] < w[1]), "{slots:?}");
    }
}
