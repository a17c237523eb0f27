//! Leader election: one leader among candidates, with a **term** that fences, a leader that stops trusting itself
//! before anyone else can win, observers that also see "no leader", and a [`lead`](Election::lead) loop that never
//! gives up.
//!
//! ```
//! use lock_core::{Election, ElectionOptions, Lock, MemoryStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! let election = Election::new(Lock::new(MemoryStore::new()), "compactor", ElectionOptions::default())?;
//! let leadership = election.campaign("replica-a", "10.0.0.7:9000").await?;
//! let term = leadership.term(); // pass it with every write the leader makes
//! let seen = election.leader().await?;
//! assert_eq!(seen.map(|l| (l.id, l.term)), Some(("replica-a".to_owned(), term)));
//! leadership.resign().await?;
//! assert!(election.leader().await?.is_none());
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//! The election is a lock on its name ([`Lock`]'s engine: waiting with release notifications, cancel safety,
//! Redlock) whose grant also writes the leader's record (`prefix{name}:info`: id, value, term) with the same
//! lease and announces it on `prefix{name}:leader`. The term is the name's fencing counter, `max(counter + 1,
//! server µs)`: it strictly increases per election, also across a Redis restart without persistence.
//!
//! Timing follows client-go's three knobs ([`ElectionOptions`]): the lease is the key's TTL on the server; the
//! leader renews every retry period; and its [`LostSignal`] fires when no renewal has succeeded for the renew
//! deadline, measured on its own monotonic clock from the start of the last successful request. Since
//! `lease > renew_deadline`, the leader has stopped (by its clock) at least `lease − renew_deadline` before the
//! server lets anyone else win. Waiting candidates retry at least every retry period, at once when the leader
//! resigns (a release notification), and when its key expires (they wait for its remaining TTL at most), so a
//! dead leader is replaced within about `lease + retry_period`.
//!
//! Candidates take turns by process: a candidate that finds the election held lines its process up, a resignation
//! (or the first try after a leader's lease ran out) promises the election to the process that waited longest for
//! a short grace, and only that process is elected meanwhile; the others, the one that just resigned included,
//! wait behind it. A process with k processes ahead of it is elected within k + 1 hand-overs (over Redlock the
//! line-up wakes the first process, without promises: each instance keeps its own line).
//!
//! Terms do not make a paused leader stop writing; they let the resource it writes reject the writes of a leader
//! that lost its term. Pass [`Leadership::term`] with every write, and have the resource refuse terms below the
//! highest it has seen (client-go's elector "does not guarantee that only one client is acting as a leader").
//!
//! # Given-back candidacies
//! A candidate that cannot use its grant (its reply was lost, came after its validity, or its campaign was
//! cancelled) gives it back. A give-back that reaches the server after the grant deletes the key and the record and
//! tells observers at once: they see no leader. One that arrives before the grant (the election request delayed on
//! another connection, say) notes the candidacy as given back for one lease (`prefix{name}:given-back`), and the
//! late grant is refused: nobody is elected, no record is written. A give-back that gets no answer is sent again
//! until the lease has run out. What remains: a grant that reaches the server more than a lease after its
//! give-back, or a give-back that never reaches it, leaves a record naming a candidate that does not act, for at
//! most one lease; its term is burned, and the next leader's is higher.
//!
//! # Over Redlock
//! A candidate is elected when a majority of instances grant it, with the term made monotonic across quorums by
//! the lock's write-back; [`leader`](Election::leader) and [`observe`](Election::observe) name a leader only when a
//! majority agrees on it. What the quorum does not give: an instance that restarts empty inside the leader's
//! majority can let a second candidate win while the first still trusts its renew deadline, exactly as for the
//! lock; the second's term is higher, so fencing still rejects the first one's writes.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use futures_util::future::{join_all, select, Either};
use futures_util::stream::Stream;
use tracing::Instrument;

use crate::engine::lock::{Guard, Lock};
use crate::engine::primitive::{announcer, Ask, Grant, Kind, Primitive};
use crate::engine::wait::Attempt;
use crate::error::{LockError, Result};
use crate::holder::HolderLabel;
use crate::lost::{LostReason, LostSignal};
use crate::options::{validate_ttl, LockOptions, RenewPolicy, RetryPolicy, MAX_WAIT};
use crate::resource::LockKeys;
use crate::resource::PerResource;
use crate::rt;
use crate::seam::notify::ReleaseWatch;
use crate::seam::scripts;
use crate::seam::store::ReleaseOutcome;
use crate::seam::store::{ExtendReply, LockStore};
use crate::seam::transport::{Call, Reply, Topology};
use crate::token::FencingToken;
use crate::token::Token;

/// The largest value a leader may publish ([`Election::campaign`], [`Leadership::proclaim`]): it is read by every
/// observer on every change.
pub const MAX_LEADER_VALUE: usize = 64 * 1024;

/// The shortest retry period (the renewal and polling interval).
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(10);

/// An election's timing: lease, renew deadline and retry period (client-go's knobs and defaults: 15 s, 10 s, 2 s).
///
/// ```
/// use lock_core::ElectionOptions;
/// use std::time::Duration;
///
/// let fast = ElectionOptions::default()
///     .with_lease(Duration::from_secs(3))
///     .with_renew_deadline(Duration::from_secs(2))
///     .with_retry_period(Duration::from_millis(500));
/// assert!(fast.validate().is_ok());
/// // The leader must stop before its lease ends, and renew several times before it stops.
/// assert!(ElectionOptions::default().with_renew_deadline(Duration::from_secs(15)).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "options do nothing until passed to Election::new"]
pub struct ElectionOptions {
    lease: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl Default for ElectionOptions {
    fn default() -> Self {
        ElectionOptions {
            lease: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl ElectionOptions {
    /// How long the server keeps a leadership without renewal (the key's TTL): a dead leader is replaced after at
    /// most this plus a retry period.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long the leader trusts its leadership without a successful renewal (its own monotonic clock, from the
    /// start of the last successful request); then its lost signal fires.
    pub fn with_renew_deadline(mut self, deadline: Duration) -> Self {
        self.renew_deadline = deadline;
        self
    }

    /// How often the leader renews and a waiting candidate (or an observer) looks again at the latest.
    pub fn with_retry_period(mut self, period: Duration) -> Self {
        self.retry_period = period;
        self
    }

    /// The lease.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The renew deadline.
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// The retry period.
    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }

    /// Checks `lease > renew_deadline > 1.2 × retry_period ≥` [`MIN_RETRY_PERIOD`], and the lease against the
    /// lock's TTL bounds.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming the rule broken.
    pub fn validate(&self) -> Result<()> {
        validate_ttl(self.lease)?;
        if self.renew_deadline >= self.lease {
            return Err(LockError::invalid(format!(
                "the renew deadline {:?} must be shorter than the lease {:?} (the leader stops before anyone can win)",
                self.renew_deadline, self.lease
            )));
        }
        if self.retry_period < MIN_RETRY_PERIOD {
            return Err(LockError::invalid(format!("the retry period must be at least {MIN_RETRY_PERIOD:?}")));
        }
        // 1.2 × retry period, as client-go's JitterFactor: at least one retry after a failed renewal.
        if self.retry_period.saturating_mul(6) / 5 >= self.renew_deadline {
            return Err(LockError::invalid(format!(
                "the renew deadline {:?} must exceed 1.2 × the retry period {:?}",
                self.renew_deadline, self.retry_period
            )));
        }
        Ok(())
    }
}

/// Who leads, as an observer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The leader's candidate id.
    pub id: String,
    /// The value it published (at its campaign, or its latest [`proclaim`](Leadership::proclaim)).
    pub value: String,
    /// Its term.
    pub term: FencingToken,
    /// Its lease's remaining time on the server's clock.
    pub remaining: Duration,
}

/// What [`Election::lead`]'s work gets: the term to fence its writes with, and the signal that ends it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LeaderContext {
    /// This leadership's term.
    pub term: FencingToken,
    /// Fires when the leadership is lost (the work is also dropped at its next await point).
    pub lost: LostSignal,
}

/// One election, on one name. Cheap to clone.
#[derive(Clone)]
pub struct Election {
    lock: Lock,
    options: ElectionOptions,
    keys: LockKeys,
    info: String,
    channel: String,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election").field("name", &self.name()).field("options", &self.options).finish()
    }
}

impl Election {
    /// The election `name` on `lock`'s stores (its key prefix applies), with `options`.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name, a bad prefix or options that
    /// [`ElectionOptions::validate`] refuses, before any I/O.
    pub fn new(lock: Lock, name: &str, options: ElectionOptions) -> Result<Self> {
        options.validate()?;
        lock.native_only("an election")?;
        let keys = LockKeys::new(lock.key_prefix(), name)?.with_fence_idle(lock.fence_idle()?);
        let info = keys.aux(crate::namespace::Aux::Info);
        let channel = keys.aux(crate::namespace::Aux::Leader);
        Ok(Election { lock, options, keys, info, channel })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.keys.resource()
    }

    /// The lock the election runs on (its stores and key prefix; [`Lock::inspect`] and
    /// [`Lock::force_release`] take the election's name).
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The timing.
    pub fn options(&self) -> &ElectionOptions {
        &self.options
    }

    fn prepare(&self, id: &str, value: &str, wait: Duration) -> Result<(Arc<dyn Primitive>, LockOptions)> {
        let label = check_id(id)?;
        check_value(value)?;
        let target = ElectionTarget {
            keys: [self.keys.clone()],
            info: self.info.clone(),
            channel: self.channel.clone(),
            id: id.to_owned(),
            value: value.to_owned(),
            renew_deadline: self.options.renew_deadline,
            given_back: self.keys.aux(crate::namespace::Aux::GivenBack),
            lease_ms: scripts::ttl_millis(self.options.lease).to_string(),
            promised: self.keys.promised(),
            grace_ms: self.hand_over_grace().map(|grace| scripts::ttl_millis(grace).to_string()).unwrap_or_default(),
        };
        let retry = RetryPolicy::default().with_max_delay(self.options.retry_period);
        let options = LockOptions::new(self.options.lease)
            .with_wait(wait)
            .with_retry(retry)
            .with_auto_renew(RenewPolicy::default().with_interval(self.options.retry_period))
            .with_holder_label(label);
        self.lock.check(&options)?;
        Ok((Arc::new(target), options))
    }

    /// Campaigns as `id` with `value` until elected: returns the [`Leadership`] only with a grant from the server
    /// (never because a wait ended), waiting for the leader to resign or expire (a release notification, its
    /// remaining lease, and at least every retry period). A day without being elected ends in
    /// [`LockError::Contended`]; [`lead`](Self::lead) campaigns for ever.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty or too long id, a too long value, or either with control
    /// characters (before any I/O); the lock's errors
    /// (`Unavailable`, `Timeout`, `WrongType`, `Auth`, `Quorum` …) when the servers fail.
    ///
    /// # Cancel safety
    /// Cancel-safe, as [`Lock::acquire`]: a grant the dropped future may have made is given back in the background
    /// (resigned). See [Given-back candidacies](crate::election#given-back-candidacies) for what observers see
    /// meanwhile.
    pub async fn campaign(&self, id: &str, value: &str) -> Result<Leadership> {
        let (target, options) = self.prepare(id, value, MAX_WAIT)?;
        let span = tracing::debug_span!("election.campaign", election = self.name(), id);
        let guard = Box::pin(self.lock.take(&target, &options)).instrument(span).await?;
        tracing::info!(election = self.name(), id, term = guard.drawn_fence().map(|t| t.get()), "elected");
        Ok(Leadership { guard, election: self.clone() })
    }

    /// Campaigns once: the [`Leadership`] if elected now, `None` if another candidate leads, or a hand-over has
    /// promised the election to another candidate's process for a moment (see the [module docs](crate::election)).
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    /// As [`campaign`](Self::campaign).
    pub async fn try_campaign(&self, id: &str, value: &str) -> Result<Option<Leadership>> {
        let (target, options) = self.prepare(id, value, Duration::ZERO)?;
        match self.lock.try_take(&target, &options).await? {
            Attempt::Acquired(guard) => Ok(Some(Leadership { guard, election: self.clone() })),
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// The current leader, `None` when there is none. Over Redlock, the leader a majority of instances agrees on.
    ///
    /// # Errors
    /// The store's error when no instance answered; over Redlock, [`LockError::Quorum`] when fewer than a
    /// majority answered (too few to say there is no leader).
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn leader(&self) -> Result<Option<LeaderInfo>> {
        let call_keys = [self.keys.lock(), self.info.as_str()];
        let reads = self.lock.stores().iter().map(|store| {
            let call = Call::script("leader", &scripts::LEADER, &call_keys, &[]);
            async move { parse_leader(&self.lock.call_bounded(store.as_ref(), call).await?) }
        });
        let answers = join_all(reads).await;
        let quorum = self.lock.quorum();
        let total = answers.len();
        let (answered, errors): (Vec<_>, Vec<_>) = answers.into_iter().partition(Result::is_ok);
        let answered: Vec<Option<LeaderInfo>> = answered.into_iter().filter_map(Result::ok).collect();
        if answered.len() < quorum {
            return Err(match errors.into_iter().find_map(Result::err) {
                Some(err) if total == 1 => err,
                _ => LockError::Quorum { granted: answered.len(), required: quorum, total },
            });
        }
        let leaders: Vec<&LeaderInfo> = answered.iter().filter_map(|a| a.as_ref()).collect();
        let agreed = leaders.iter().copied().find(|candidate| {
            leaders.iter().filter(|other| other.id == candidate.id && other.term == candidate.term).count() >= quorum
        });
        Ok(agreed.map(|info| {
            let remaining = leaders
                .iter()
                .filter(|other| other.id == info.id && other.term == info.term)
                .map(|other| other.remaining)
                .min()
                .unwrap_or(info.remaining);
            LeaderInfo { remaining, ..info.clone() }
        }))
    }

    /// A stream of leaders: the current one first (or `None`), then each change of leader, term or value, and
    /// each time there is none, never going back to a lower term. It listens to the election's channel (a grant,
    /// a proclaim and a resignation announce themselves) and reads again at least every retry period and when the
    /// leader's lease runs out, so a leader that died without a word shows as `None` within about its remaining
    /// lease. A failed read is an `Err` item, and the stream goes on after a retry period; it ends only when there
    /// is no runtime to wait on. No keyspace notifications are needed.
    pub fn observe(&self) -> impl Stream<Item = Result<Option<LeaderInfo>>> + Send + 'static {
        let state = Observer { election: self.clone(), watch: None, last: None, last_term: 0, rest: false };
        futures_util::stream::unfold(state, Observer::next)
    }

    /// Leads for as long as the caller lets it: campaigns as `id`, runs `work` with the term and the lost signal,
    /// drops it when the leadership is lost, and campaigns again; when `work` returns, resigns and campaigns again
    /// after a retry period. Store errors are logged and retried after a retry period: one failed renewal never
    /// ends the loop (client-go's `Run` stops for good).
    ///
    /// ```
    /// use lock_core::{Election, ElectionOptions, Lock, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let election = Election::new(Lock::new(MemoryStore::new()), "scheduler", ElectionOptions::default())?;
    /// let leading = election.lead("replica-b", "", |ctx| async move {
    ///     // ... act as the leader, passing ctx.term with every write ...
    ///     ctx.lost.lost().await; // or return to step down
    /// });
    /// // Run it alongside the service; dropping the future resigns.
    /// let _ = tokio::time::timeout(Duration::from_millis(50), leading).await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Only what retrying cannot fix: [`LockError::InvalidArgument`] (the id or value) and
    /// [`LockError::Unsupported`]. It never returns otherwise.
    ///
    /// # Cancel safety
    /// Dropping the future drops the work at its current await point and resigns in the background.
    pub async fn lead<F, Fut>(&self, id: &str, value: &str, mut work: F) -> Result<Infallible>
    where
        F: FnMut(LeaderContext) -> Fut,
        Fut: Future<Output = ()>,
    {
        let pause = self.options.retry_period;
        loop {
            let leadership = match self.campaign(id, value).await {
                Ok(leadership) => leadership,
                Err(err @ (LockError::InvalidArgument(_) | LockError::Unsupported(_) | LockError::NoRuntime(_))) => {
                    return Err(err)
                }
                Err(err) => {
                    tracing::warn!(election = self.name(), id, error = %err.report(), "campaign failed; campaigning again");
                    rt::sleep(pause).await?;
                    continue;
                }
            };
            let lost = leadership.lost_signal();
            let ctx = LeaderContext { term: leadership.term(), lost: lost.clone() };
            match lost.guard(work(ctx)).await {
                Ok(()) => {
                    if let Err(err) = leadership.resign().await {
                        tracing::warn!(election = self.name(), id, error = %err.report(), "resigning failed; the lease ends it");
                    }
                    rt::sleep(pause).await?;
                }
                Err(reason) => {
                    tracing::warn!(election = self.name(), id, %reason, "leadership lost; work cancelled, campaigning again");
                    drop(leadership);
                }
            }
        }
    }
}

impl Election {
    /// How long a hand-over promises the election to the process it names (see [`ELECT`](scripts::ELECT)): long
    /// enough for a process that was woken to try (its wake-up, and a try within the operation timeout; a second at
    /// least, or a retry period when that is longer), short enough that a dead or deaf process costs little. `None`
    /// over Redlock, whose instances may each name another process.
    fn hand_over_grace(&self) -> Option<Duration> {
        (self.lock.stores().len() == 1).then(|| {
            self.options.retry_period.max(Duration::from_secs(1)).saturating_add(self.lock.operation_timeout())
        })
    }
}

/// One candidacy's acquisition: the leadership, elected, renewed and resigned by the election's scripts.
#[derive(Debug)]
pub(crate) struct ElectionTarget {
    keys: [LockKeys; 1],
    /// The leader record (`prefix{name}:info`).
    info: String,
    /// The channel observers listen on (`prefix{name}:leader`).
    channel: String,
    /// The candidate's id and initial value.
    id: String,
    value: String,
    /// How long a leader trusts its leadership after the start of its last successful renewal.
    renew_deadline: Duration,
    /// The candidacies given back before their `ELECT` arrived (`prefix{name}:given-back`), and how long each is
    /// remembered there (the lease, in ms).
    given_back: String,
    lease_ms: String,
    /// The process a hand-over promised the election to (`prefix{name}:promised`), and for how long (ms; empty
    /// over Redlock, where each instance's line could name another process and promises would split the vote).
    promised: String,
    grace_ms: String,
}

impl ElectionTarget {
    /// [`ELECT`](scripts::ELECT).
    async fn acquire_on(&self, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.keys[0];
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let floor = ask.floor_arg();
        let (origin, sharded) = announcer(store);
        // The candidate's process lines up when it hears releases (as a mutex's waiter does).
        let waiting_as = crate::engine::primitive::waiting_as(store, keys).unwrap_or_default();
        let call_keys = [
            keys.lock(),
            keys.fence(),
            keys.awaited(),
            &self.info,
            &self.channel,
            &self.given_back,
            keys.waiting(),
            &self.promised,
            keys.channel(),
        ];
        let args = [
            ask.token.as_str(),
            &ttl,
            &floor,
            &self.id,
            &self.value,
            origin,
            sharded,
            waiting_as,
            &self.grace_ms,
            keys.fence_idle(),
        ];
        let call = Call::script("acquire", &scripts::ELECT, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let ints = ran.reply.as_ints().unwrap_or_default();
        let grant = match ints.as_slice() {
            [1, term] => Grant::Acquired { fences: smallvec::smallvec![u64::try_from(*term).ok()] },
            [0, pttl] => Grant::Held {
                index: 0,
                ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                holder: None,
                place: None,
            },
            _ => return Err(LockError::backend(format!("unexpected reply to the elect script: {:?}", ran.reply))),
        };
        ask.check_replicas(&ran, &grant)?;
        Ok(grant)
    }

    /// [`ELECTION_RENEW`](scripts::ELECTION_RENEW).
    async fn extend_on(&self, store: &dyn LockStore, token: &Token, ttl: Duration) -> Result<PerResource<ExtendReply>> {
        let ttl = scripts::ttl_millis(ttl).to_string();
        let call_keys = [self.keys[0].lock(), self.info.as_str()];
        let args = [token.as_str(), &ttl];
        let ran = store.call(Call::script("extend", &scripts::ELECTION_RENEW, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(code) => Ok(smallvec::smallvec![scripts::parse_extend(code)?]),
            None => Err(LockError::backend(format!("unexpected reply to the renew script: {:?}", ran.reply))),
        }
    }

    /// [`RESIGN`](scripts::RESIGN).
    async fn release_on(&self, store: &dyn LockStore, token: &Token) -> Result<PerResource<ReleaseOutcome>> {
        let keys = &self.keys[0];
        let (origin, sharded) = announcer(store);
        let call_keys = [
            keys.lock(),
            &self.info,
            keys.channel(),
            keys.awaited(),
            &self.channel,
            &self.given_back,
            keys.waiting(),
            &self.promised,
        ];
        let args = [token.as_str(), origin, sharded, &self.lease_ms, &self.grace_ms];
        let ran = store.call(Call::script("release", &scripts::RESIGN, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(code) => Ok(smallvec::smallvec![scripts::parse_release(code)?]),
            None => Err(LockError::backend(format!("unexpected reply to the resign script: {:?}", ran.reply))),
        }
    }
}

#[async_trait]
impl Primitive for ElectionTarget {
    crate::engine::primitive::scripted_calls!(acquire, extend, release);

    fn kind(&self) -> Kind {
        Kind::Election
    }

    fn resources(&self) -> &[LockKeys] {
        &self.keys
    }

    /// No later than the renew deadline: the leader stops acting before anyone else can win.
    fn valid_until(&self, started: Instant, ttl: Duration) -> Instant {
        let lease = crate::lease::valid_until(started, ttl);
        started.checked_add(self.renew_deadline).map_or(lease, |deadline| deadline.min(lease))
    }

    /// The term is the fence: [`RAISE_FENCE`](scripts::RAISE_FENCE) raises the leader record's term with it.
    async fn raise_fence(&self, store: &dyn LockStore, keys: &LockKeys, token: &Token, want: u64) -> Result<bool> {
        let want = want.to_string();
        let call_keys = [keys.lock(), keys.fence(), self.info.as_str()];
        let args = [token.as_str(), want.as_str(), keys.fence_idle()];
        let ran = store.call(Call::script("raise-fence", &scripts::RAISE_FENCE, &call_keys, &args)).await?;
        match ran.reply.as_int() {
            Some(1) => Ok(true),
            Some(0) => Ok(false),
            _ => Err(LockError::backend(format!("unexpected reply to the raise-fence script: {:?}", ran.reply))),
        }
    }
}

/// The id rule every backend's candidates follow (a holder label's): 1 to [`MAX_HOLDER_LABEL`](crate::MAX_HOLDER_LABEL)
/// bytes without control characters.
pub(crate) fn check_id(id: &str) -> Result<HolderLabel> {
    HolderLabel::new(id).map_err(|_| {
        LockError::invalid(format!(
            "a candidate id must be 1 to {} bytes without control characters",
            crate::MAX_HOLDER_LABEL
        ))
    })
}

/// The value rule every backend's leaders follow.
pub(crate) fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_LEADER_VALUE {
        return Err(LockError::invalid(format!("a leader's value is at most {MAX_LEADER_VALUE} bytes")));
    }
    // Operators read it in `lockctl inspect` and in logs: a newline would forge lines, an escape sequence hide them.
    if value.chars().any(char::is_control) {
        return Err(LockError::invalid("a leader's value must not contain control characters"));
    }
    Ok(())
}

fn parse_leader(reply: &Reply) -> Result<Option<LeaderInfo>> {
    let unexpected = || LockError::backend(format!("unexpected reply to the leader script: {reply:?}"));
    let Reply::Array(items) = reply else { return Err(unexpected()) };
    match items.as_slice() {
        [] => Ok(None),
        [id, value, term, pttl] => {
            let term = term.to_text_lossy().and_then(|t| t.parse::<u64>().ok()).ok_or_else(unexpected)?;
            Ok(Some(LeaderInfo {
                id: id.to_text_lossy().ok_or_else(unexpected)?,
                value: value.to_text_lossy().unwrap_or_default(),
                term: FencingToken::new(term),
                remaining: pttl
                    .as_int()
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis)
                    .unwrap_or_default(),
            }))
        }
        _ => Err(unexpected()),
    }
}

/// The state of one [`Election::observe`] stream.
struct Observer {
    election: Election,
    watch: Option<ReleaseWatch>,
    /// What was emitted last: `Some(None)` for "no leader".
    last: Option<Option<(u64, String, String)>>,
    last_term: u64,
    /// Wait a retry period before the next read (after an error).
    rest: bool,
}

impl Observer {
    async fn next(mut self) -> Option<(Result<Option<LeaderInfo>>, Self)> {
        let period = self.election.options.retry_period;
        loop {
            if std::mem::take(&mut self.rest) && rt::sleep(period).await.is_err() {
                return None;
            }
            if self.watch.is_none() {
                if let Some(hub) = self.election.lock.stores().first().and_then(|store| store.release_hub()) {
                    self.watch = Some(hub.watch(&self.election.channel).await);
                }
            }
            // Listening before the read: an announcement between the read and the wait is not missed.
            let listener = self.watch.as_ref().map(ReleaseWatch::listen_any);
            let info = match self.election.leader().await {
                Ok(info) => info,
                Err(err) => {
                    self.rest = true;
                    return Some((Err(err), self));
                }
            };
            let seen = info.as_ref().map(|i| (i.term.get(), i.id.clone(), i.value.clone()));
            let stale = info.as_ref().is_some_and(|i| i.term.get() < self.last_term);
            if !stale && self.last.as_ref() != Some(&seen) {
                if let Some(i) = &info {
                    self.last_term = i.term.get();
                }
                self.last = Some(seen);
                return Some((Ok(info), self));
            }
            let mut pause = period;
            if let Some(i) = &info {
                // Just past the lease's end: a leader that died shows as gone at once.
                pause = pause.min(i.remaining.saturating_add(Duration::from_millis(1)));
            }
            let sleep = std::pin::pin!(rt::sleep(pause));
            match listener {
                Some(listener) => {
                    if let Either::Left((Err(_), _)) = select(sleep, listener).await {
                        return None;
                    }
                }
                None => {
                    if sleep.await.is_err() {
                        return None;
                    }
                }
            }
        }
    }
}

/// A won election: the term, the lost signal, and the way out ([`resign`](Self::resign)). Renewed in the
/// background every retry period while it lives; dropping it resigns in the background.
#[must_use = "dropping a leadership resigns it"]
#[derive(Debug)]
pub struct Leadership {
    guard: Guard,
    election: Election,
}

impl Leadership {
    /// This leadership's term: strictly greater than every earlier leader's of this election. Pass it with every
    /// write the leader makes.
    pub fn term(&self) -> FencingToken {
        // Elections always advance the counter; 0 would only come from a store that returned no term.
        self.guard.drawn_fence().unwrap_or(FencingToken::new(0))
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        self.election.name()
    }

    /// Fires when the leadership is lost: no renewal succeeded for the renew deadline, or the server no longer
    /// holds it.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// Whether the leadership is lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Until when this leader may act: the start of its last successful renewal plus the renew deadline (earlier
    /// than the server's lease). Moves forward with each renewal; after a loss it stays where the loss left it.
    pub fn valid_until(&self) -> std::time::Instant {
        self.guard.valid_until()
    }

    /// Replaces the leader's value (what [`Election::leader`] and observers see), only while still the leader.
    ///
    /// # Errors
    /// [`LockError::NotLeader`] when the leadership is lost (then its lost signal fires too);
    /// [`LockError::InvalidArgument`] for a value over [`MAX_LEADER_VALUE`] or with control characters; the store's
    /// errors otherwise (over Redlock, [`LockError::Quorum`] when too few instances answered).
    ///
    /// # Cancel safety
    /// The value may have been replaced on some instances; proclaim again.
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        check_value(value)?;
        let not_leader = || LockError::NotLeader { election: self.election.name().to_owned() };
        if self.guard.is_lost() {
            return Err(not_leader());
        }
        let election = &self.election;
        let call_keys = [election.keys.lock(), election.info.as_str(), election.channel.as_str()];
        let token = self.guard.token().as_str();
        let calls = election.lock.stores().iter().map(|store| {
            let call_keys = &call_keys;
            async move {
                let origin = store.release_hub().map(|hub| hub.origin()).unwrap_or_default();
                let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
                let args = [token, value, origin, sharded];
                let call = Call::script("proclaim", &scripts::PROCLAIM, call_keys, &args);
                let reply = election.lock.call_bounded(store.as_ref(), call).await?;
                Ok::<bool, LockError>(reply.as_int() == Some(1))
            }
        });
        let replies = join_all(calls).await;
        let (n, quorum) = (replies.len(), election.lock.quorum());
        let done = replies.iter().filter(|r| matches!(r, Ok(true))).count();
        let refused = replies.iter().filter(|r| matches!(r, Ok(false))).count();
        if done >= quorum {
            return Ok(());
        }
        if refused > n - quorum {
            self.guard.mark_lost(LostReason::NotHeld);
            return Err(not_leader());
        }
        let mut errors = replies.into_iter().filter_map(Result::err);
        Err(match errors.next() {
            Some(err) if n == 1 => err,
            _ => LockError::Quorum { granted: done, required: quorum, total: n },
        })
    }

    /// Stops renewing and resigns: observers see the resignation, and a waiting candidate is elected at once.
    ///
    /// # Errors
    /// As [`Guard::release`].
    ///
    /// # Cancel safety
    /// As [`Guard::release`].
    pub async fn resign(self) -> Result<ReleaseOutcome> {
        self.guard.release().await
    }
}
