//! Per-acquisition options (TTL, wait budget, retry policy, fencing) and their validation.

use std::time::Duration;

use crate::error::{LockError, Result};
use crate::holder::HolderLabel;

/// The shortest TTL a lock accepts. Below it the drift allowance (`ttl·1% + 2 ms`) and one round trip leave no
/// useful validity.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// The longest TTL a lock accepts. A lock meant to outlive its holder's crash by more than a day is a bug; hold
/// long work with renewal instead.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest wait budget a lock accepts.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// How one acquisition behaves: how long the lock lives, how long to wait for it, how to retry, and whether it
/// carries a fencing token.
///
/// ```
/// use lock_core::LockOptions;
/// use std::time::Duration;
///
/// let opts = LockOptions::new(Duration::from_secs(5)).with_wait(Duration::from_millis(500));
/// assert_eq!(opts.ttl(), Duration::from_secs(5));
/// assert!(opts.validate().is_ok());
/// assert!(LockOptions::new(Duration::ZERO).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq)]
#[must_use = "options do nothing until passed to an acquire"]
pub struct LockOptions {
    ttl: Duration,
    wait: Duration,
    retry: RetryPolicy,
    fencing: Fencing,
    renew: Option<RenewPolicy>,
    replicas: Option<ReplicaAck>,
    cross_slot: CrossSlot,
    fair: Option<Duration>,
    label: Option<HolderLabel>,
}

/// The shortest waiter TTL a fair lock accepts (see [`LockOptions::with_fair_queue`]): a waiter renews its place
/// every third of it, and a heartbeat must have time to arrive.
pub const MIN_WAITER_TTL: Duration = Duration::from_millis(100);

/// When an acquisition's fencing token is drawn from the resource's counter (see
/// [`LockOptions::with_fencing_mode`]).
///
/// Either way the token is drawn while the lock is held, in one atomic step with a check that it is: holds of a
/// resource never overlap on the server, so tokens follow the order of the holds and strictly increase per
/// resource (also after a restart without persistence: the counter's floor is the server's clock in µs, see
/// [`scripts::ACQUIRE`](crate::backend::scripts::ACQUIRE)). A holder whose lock expired and was taken can no longer draw
/// one, so a token in hand was drawn before any later holder's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fencing {
    /// No token: acquire is a plain `SET NX PX`, and no counter is kept.
    Off,
    /// Drawn by the acquire itself, in the same atomic step and round trip as the grant: the guard has its token at
    /// once ([`LockGuard::fence`](crate::LockGuard::fence) answers without I/O). The grant then costs a script with
    /// the counter's read, the clock and the increment on the server (about 8 µs of server CPU per cycle against 3
    /// µs for `SET NX PX`; see BENCHMARKS.md).
    OnAcquire,
    /// Drawn only when the holder asks ([`Guard::fence`](crate::Guard::fence), or
    /// [`LockGuard::fence`](crate::LockGuard::fence)), by one more round trip that checks the lock still holds this
    /// acquisition's owner token and advances the counter in the same step; later calls return the same token
    /// without I/O (the default). It is as safe as a token drawn with the grant: a fence is only drawn while the
    /// token still holds the key, so it exceeds every earlier holder's. The acquire is the plain `SET NX PX` of a lock
    /// without fencing: a holder that never asks pays nothing for fencing, one that asks pays a round trip more than
    /// with [`OnAcquire`](Self::OnAcquire). For a single resource on one server (single, Sentinel or Cluster), plain
    /// or fair; over Redlock, and for the primitives built on the lock (several resources, job, election,
    /// semaphore, read-write), the token is drawn with the grant as in [`OnAcquire`](Self::OnAcquire), and asking
    /// for it returns it at once.
    #[default]
    OnDemand,
}

/// What [`Lock::acquire_all`](crate::Lock::acquire_all) does on Redis Cluster with resources in different hash
/// slots (one script may only touch keys of one slot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CrossSlot {
    /// Fail with [`LockError::CrossSlot`] before any I/O (the default): the caller learns at once that the
    /// resources cannot be taken in one atomic step, instead of seeing what looks like contention.
    #[default]
    Reject,
    /// Take the slot groups one after another, in a fixed order (by slot), each group all or nothing. A group found
    /// held gives the earlier groups back before waiting, so no caller ever holds while it waits: two callers that
    /// list the same resources in opposite orders never deadlock. Not one atomic step: another client may briefly
    /// see some of the resources held by an acquire that then gives them back.
    Ordered,
}

impl Default for LockOptions {
    /// TTL 10 s, wait budget 10 s, default retry policy, fencing on.
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(10),
            wait: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            fencing: Fencing::OnDemand,
            renew: None,
            replicas: None,
            cross_slot: CrossSlot::Reject,
            fair: None,
            label: None,
        }
    }
}

impl LockOptions {
    /// Options with the given TTL and the other defaults.
    pub fn new(ttl: Duration) -> Self {
        LockOptions { ttl, ..Self::default() }
    }

    /// Sets the time-to-live of the lock on the server.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets how long [`acquire`](crate::DistributedLock::acquire) may wait for a held lock. Zero means one try.
    pub fn with_wait(mut self, budget: Duration) -> Self {
        self.wait = budget;
        self
    }

    /// Sets the retry policy used while waiting.
    pub fn with_retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Turns fencing tokens on (the default, [`Fencing::OnDemand`]) or off. Off, no token can be drawn and the
    /// backend keeps no per-resource counter.
    pub fn with_fencing(mut self, on: bool) -> Self {
        self.fencing = if on { Fencing::OnDemand } else { Fencing::Off };
        self
    }

    /// Chooses when the fencing token is drawn (see [`Fencing`]): when the holder asks for it (the default), with
    /// the grant, or never.
    ///
    /// ```
    /// use lock_core::{Fencing, LockOptions};
    /// use std::time::Duration;
    ///
    /// assert_eq!(LockOptions::new(Duration::from_secs(5)).fencing_mode(), Fencing::OnDemand);
    /// let opts = LockOptions::new(Duration::from_secs(5)).with_fencing_mode(Fencing::OnAcquire);
    /// assert_eq!(opts.fencing_mode(), Fencing::OnAcquire);
    /// assert!(opts.fencing());
    /// ```
    pub fn with_fencing_mode(mut self, mode: Fencing) -> Self {
        self.fencing = mode;
        self
    }

    /// Keeps the lock alive in the background while the guard lives: a watchdog owned by the guard extends it by
    /// the TTL every [`RenewPolicy::interval`] (default TTL/3), stops before release, and turns the guard's
    /// [`LostSignal`](crate::LostSignal) lost when renewal finds the lock gone, cannot reach the server before the
    /// validity deadline, or reaches the policy's maximum hold. Off by default.
    pub fn with_auto_renew(mut self, policy: RenewPolicy) -> Self {
        self.renew = Some(policy);
        self
    }

    /// After each grant, waits (Redis `WAIT`, on the connection that made the grant) until `ack.replicas()` replicas
    /// have the lock key, at most `ack.timeout()`, and applies `ack`'s [`Shortfall`] policy when fewer did. The time
    /// spent waiting comes out of the lock's validity (the clock started before the grant was requested).
    ///
    /// This narrows the window in which a failover (asynchronous replication) loses a just-granted lock; it cannot
    /// close it (a replica that acknowledged may still not be the one promoted, and the grant is in the primary's
    /// memory before any replica has it). Fencing tokens are the protection against that double grant.
    pub fn with_replica_ack(mut self, ack: ReplicaAck) -> Self {
        self.replicas = Some(ack);
        self
    }

    /// Sets what a multi-resource acquire does on Redis Cluster when the resources span several slots (default
    /// [`CrossSlot::Reject`]). A single-resource lock ignores it.
    pub fn with_cross_slot(mut self, mode: CrossSlot) -> Self {
        self.cross_slot = mode;
        self
    }

    /// Serves waiters in arrival order across every process (a fair lock), each holding its place in a queue on the
    /// server by a heartbeat every `waiter_ttl / 3`.
    ///
    /// Without it, each process wakes its own next waiter when the lock is released, and whoever's try reaches the
    /// server first wins. With it, an acquire that finds the lock held takes a ticket in a queue kept next to the
    /// lock (`prefix{resource}:queue`, `:heartbeats` and `:grants`); a release hands the lock to the head of the
    /// queue itself, in the same server step, and tells only the process whose waiter that is (one message, no herd
    /// of tries, and no try of the head's: the hand-off costs the release and the message). A newcomer never takes a
    /// free lock while someone is queued. A waiter that stops renewing its place (its process died) loses it after
    /// `waiter_ttl`; a waiter that gives up or is cancelled leaves at once; a lost message costs at most one
    /// heartbeat, since the head's heartbeat is itself a try (which finds the lock granted to it). All queue keys
    /// expire with the last waiter's place.
    ///
    /// A grant by a release is a lease of `min(ttl, waiter_ttl)`: a head that died just before its turn holds the
    /// lock no longer than its place would have held up the queue. The head counts that lease from its first try
    /// (which took its place, so ran before any grant to it), and when its TTL is longer, extends the lock to it at
    /// once in the background (with [`with_auto_renew`](Self::with_auto_renew), that is its first renewal); until
    /// that extension lands, [`Guard::valid_until`](crate::Guard::valid_until) reports the lease. An extension that
    /// keeps failing until the lease ends turns the guard lost, as a failed renewal does. A waiter that asks for
    /// replica acknowledgement ([`with_replica_ack`](Self::with_replica_ack)) claims its grant with a try instead
    /// (one round trip more), since no replica acknowledged the release's write.
    ///
    /// **When to choose it.** Without it, a release wakes one waiting process (the first its waiters' tries lined up
    /// on the server; see [`RELEASE`](crate::backend::scripts::RELEASE)), and that process's next waiter tries: the server's
    /// work per acquisition does not grow with the number of waiting processes, but whoever's try reaches the
    /// server first wins (a releaser looping straight back, a newcomer), so some processes may wait long. The queue
    /// serves them in order and hands the lock over inside the release, at a price of its own: about 30 server
    /// commands per contended acquisition, a heartbeat per waiting process every `waiter_ttl / 3`, and a crashed
    /// waiter holding up those behind it for up to `waiter_ttl`. Measured (BENCHMARKS.md, issue 19; one waiter per
    /// process, 1 ms holds): server commands per acquisition 29 against the default's 21 with two processes, 30
    /// against 23 with eight, 31 against 24 with 32, and 32 against 10.5 with eight waiters in one process;
    /// fairness 0.93–1 against 0.34–0.88, and a tail wait (p99) 1.7–26× shorter. Take it when arrival order or the
    /// tail wait matters.
    ///
    /// A `try_acquire` takes no place and succeeds only when the lock is free and nobody is queued. Every heartbeat
    /// is a try, so it counts toward a retry policy's attempt limit
    /// ([`RetryPolicy::with_max_attempts`]); the wait budget is the usual bound. Acquirers on
    /// the same resource without this option keep mutual exclusion with fair ones (the same lock key), but do not
    /// queue: fairness holds among fair acquirers. One instance only (a single server, a Sentinel primary or a
    /// Cluster): over Redlock each instance would keep its own queue, and instances that order two waiters
    /// differently would let neither win a majority, so [`Lock::redlock`](crate::Lock::redlock) refuses it with
    /// [`LockError::InvalidArgument`], as does [`Lock::acquire_all`](crate::Lock::acquire_all). `waiter_ttl` must
    /// be at least [`MIN_WAITER_TTL`]; a few seconds suits most uses (it is how long a crashed waiter can hold up
    /// the queue).
    ///
    /// ```
    /// use lock_core::{Lock, LockOptions, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let fair = LockOptions::new(Duration::from_secs(5)).with_fair_queue(Duration::from_secs(3));
    /// let guard = lock.acquire("ledger", &fair).await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_fair_queue(mut self, waiter_ttl: Duration) -> Self {
        self.fair = Some(waiter_ttl);
        self
    }

    /// Stores `label` with the lock (after the owner token, in the same key), so that
    /// [`Lock::inspect`](crate::Lock::inspect) and `lockctl` can say who holds it. None by default.
    ///
    /// ```
    /// use lock_core::{HolderLabel, Lock, LockOptions, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let lock = Lock::new(MemoryStore::new());
    /// let opts = LockOptions::new(Duration::from_secs(5)).with_holder_label(HolderLabel::new("compactor 2")?);
    /// let guard = lock.acquire("segments", &opts).await?;
    /// let seen = lock.inspect("segments").await?;
    /// assert_eq!(seen.holder().and_then(|h| h.label.as_deref()), Some("compactor 2"));
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_holder_label(mut self, label: HolderLabel) -> Self {
        self.label = Some(label);
        self
    }

    /// The holder label stored with each acquisition, if any.
    pub fn holder_label(&self) -> Option<&HolderLabel> {
        self.label.as_ref()
    }

    /// The waiter TTL of a fair lock (see [`with_fair_queue`](Self::with_fair_queue)); `None` for the default lock.
    pub fn fair_queue(&self) -> Option<Duration> {
        self.fair
    }

    /// What a multi-resource acquire does with resources in several Cluster slots.
    pub fn cross_slot(&self) -> CrossSlot {
        self.cross_slot
    }

    /// The replica acknowledgement asked for, if any.
    pub fn replica_ack(&self) -> Option<ReplicaAck> {
        self.replicas
    }

    /// The renewal policy, when auto-renewal is on.
    pub fn auto_renew(&self) -> Option<&RenewPolicy> {
        self.renew.as_ref()
    }

    /// The time-to-live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The wait budget.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The retry policy.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Whether acquisitions carry fencing tokens (drawn with the grant or on demand).
    pub fn fencing(&self) -> bool {
        self.fencing != Fencing::Off
    }

    /// When fencing tokens are drawn.
    pub fn fencing_mode(&self) -> Fencing {
        self.fencing
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming the first field out of range.
    pub fn validate(&self) -> Result<()> {
        validate_ttl(self.ttl)?;
        if self.wait > MAX_WAIT {
            return Err(LockError::invalid(format!("wait budget {:?} exceeds the maximum {MAX_WAIT:?}", self.wait)));
        }
        if let Some(renew) = &self.renew {
            renew.validate(self.ttl)?;
        }
        if let Some(waiter_ttl) = self.fair {
            if waiter_ttl < MIN_WAITER_TTL {
                return Err(LockError::invalid(format!(
                    "fair-queue waiter TTL {waiter_ttl:?} is below the minimum {MIN_WAITER_TTL:?}"
                )));
            }
            validate_ttl(waiter_ttl)?;
        }
        if let Some(ack) = &self.replicas {
            if ack.replicas == 0 || ack.timeout.is_zero() || ack.timeout >= self.ttl {
                return Err(LockError::invalid("replica_ack needs at least one replica and a timeout in (0, ttl)"));
            }
        }
        self.retry.validate()
    }
}

/// How the watchdog of an auto-renewed lock behaves (see [`LockOptions::with_auto_renew`]).
///
/// ```
/// use lock_core::{LockOptions, RenewPolicy};
/// use std::time::Duration;
///
/// let opts = LockOptions::new(Duration::from_secs(30))
///     .with_auto_renew(RenewPolicy::default().with_max_hold(Duration::from_secs(600)));
/// assert!(opts.validate().is_ok());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "a policy does nothing until set with `LockOptions::with_auto_renew`"]
pub struct RenewPolicy {
    interval: Option<Duration>,
    max_hold: Option<Duration>,
    max_renewals: Option<u32>,
}

impl RenewPolicy {
    /// Sets how often to extend (default: TTL/3, so two renewals can fail before the lock expires).
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Stops renewing, and turns the guard lost, this long after the acquisition. A limit too far out to
    /// represent (`Duration::MAX`, say) means no limit.
    pub fn with_max_hold(mut self, limit: Duration) -> Self {
        self.max_hold = Some(limit);
        self
    }

    /// Stops renewing, and turns the guard lost, after this many renewals.
    pub fn with_max_renewals(mut self, limit: u32) -> Self {
        self.max_renewals = Some(limit);
        self
    }

    /// The renewal interval for a lock with `ttl`.
    pub fn interval(&self, ttl: Duration) -> Duration {
        self.interval.unwrap_or(ttl / 3)
    }

    /// The maximum hold, if any.
    pub fn max_hold(&self) -> Option<Duration> {
        self.max_hold
    }

    /// The maximum number of renewals, if any.
    pub fn max_renewals(&self) -> Option<u32> {
        self.max_renewals
    }

    /// Checks the policy against the lock's TTL.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when the interval is zero or not shorter than the lock's validity
    /// (`ttl − drift`, see [`lease`](crate::lease)): the first renewal would then be due when the holder must
    /// already consider the lock lost. Also when the maximum hold is zero.
    pub fn validate(&self, ttl: Duration) -> Result<()> {
        let interval = self.interval(ttl);
        let validity = ttl.saturating_sub(crate::lease::drift(ttl));
        if interval.is_zero() || interval >= validity {
            return Err(LockError::invalid(format!(
                "renewal interval {interval:?} must be in (0, validity {validity:?}) for ttl {ttl:?}"
            )));
        }
        if self.max_hold.is_some_and(|h| h.is_zero()) {
            return Err(LockError::invalid("max_hold must be positive"));
        }
        Ok(())
    }
}

/// What to do when fewer replicas than asked acknowledged a grant (see [`LockOptions::with_replica_ack`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shortfall {
    /// Give the grant back and fail with [`LockError::ReplicasShort`] (retryable, so a waiting acquire retries).
    Fail,
    /// Keep the grant and log the shortfall.
    Accept,
}

/// How many replicas must acknowledge a grant, for how long to wait, and what a shortfall means.
///
/// ```
/// use lock_core::{LockOptions, ReplicaAck, Shortfall};
/// use std::time::Duration;
///
/// let opts = LockOptions::new(Duration::from_secs(10))
///     .with_replica_ack(ReplicaAck::new(1, Duration::from_millis(50)).with_on_shortfall(Shortfall::Fail));
/// assert!(opts.validate().is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a policy does nothing until set with `LockOptions::with_replica_ack`"]
pub struct ReplicaAck {
    replicas: u32,
    timeout: Duration,
    on_shortfall: Shortfall,
}

impl ReplicaAck {
    /// Wait for `replicas` acknowledgements, at most `timeout`; a shortfall fails the acquisition.
    pub fn new(replicas: u32, timeout: Duration) -> Self {
        ReplicaAck { replicas, timeout, on_shortfall: Shortfall::Fail }
    }

    /// Sets the shortfall policy.
    pub fn with_on_shortfall(mut self, policy: Shortfall) -> Self {
        self.on_shortfall = policy;
        self
    }

    /// Replicas required.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// Longest wait.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What a shortfall means.
    pub fn on_shortfall(&self) -> Shortfall {
        self.on_shortfall
    }

    /// Applies the policy to the count the server reported (backends call this after `WAIT`).
    ///
    /// # Errors
    /// [`LockError::ReplicasShort`] when fewer acknowledged and the policy is [`Shortfall::Fail`].
    pub fn check(&self, acknowledged: i64) -> Result<()> {
        let acknowledged = u32::try_from(acknowledged.max(0)).unwrap_or(u32::MAX);
        if acknowledged >= self.replicas {
            return Ok(());
        }
        match self.on_shortfall {
            Shortfall::Fail => Err(LockError::ReplicasShort { acknowledged, required: self.replicas }),
            Shortfall::Accept => {
                tracing::warn!(
                    acknowledged,
                    required = self.replicas,
                    "grant acknowledged by fewer replicas than asked"
                );
                Ok(())
            }
        }
    }
}

/// Checks a TTL against [`MIN_TTL`] and [`MAX_TTL`].
///
/// # Errors
/// [`LockError::InvalidArgument`] when the TTL is zero, below the floor or above the ceiling.
pub fn validate_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() {
        return Err(LockError::invalid("ttl must be positive"));
    }
    if ttl < MIN_TTL {
        return Err(LockError::invalid(format!("ttl {ttl:?} is below the minimum {MIN_TTL:?}")));
    }
    if ttl > MAX_TTL {
        return Err(LockError::invalid(format!("ttl {ttl:?} exceeds the maximum {MAX_TTL:?}")));
    }
    Ok(())
}

/// How a waiting acquire spaces its tries: exponential backoff with full jitter between `min_delay` and
/// `max_delay`, never sleeping past the wait deadline, and never sleeping after the last try.
///
/// The delays come from [`backon`]'s exponential builder. They space the tries of a waiter that hears no release
/// notifications (a store without them, a subscription that failed), of a Redlock waiter (a quorum can become
/// reachable with nothing announced: an instance back up, a split vote given back) and the tries after a transient
/// error. A waiter on one instance that listens for releases (the usual
/// case, once its first try found the lock held) does not poll on the backoff:
/// it sleeps until a release is announced, the holder's key expires, or its [safety
/// poll](Self::with_safety_poll) passes (1 s, or `max_delay` when that is longer), whichever comes first. The safety
/// poll is what a lost notification can cost it.
///
/// ```
/// use lock_core::RetryPolicy;
/// use std::time::Duration;
///
/// let p = RetryPolicy::default().with_max_delay(Duration::from_millis(20)).with_max_attempts(Some(50));
/// assert!(p.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq)]
#[must_use = "a policy does nothing until set with `LockOptions::with_retry`"]
pub struct RetryPolicy {
    min_delay: Duration,
    max_delay: Duration,
    factor: f32,
    max_attempts: Option<u32>,
    safety_poll: Duration,
}

impl Default for RetryPolicy {
    /// 5 ms doubling up to 100 ms, jittered, attempts bounded only by the wait budget; a safety poll of 1 s.
    fn default() -> Self {
        RetryPolicy {
            min_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(100),
            factor: 2.0,
            max_attempts: None,
            safety_poll: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// Sets the first delay.
    pub fn with_min_delay(mut self, d: Duration) -> Self {
        self.min_delay = d;
        self
    }

    /// Sets the cap on one delay.
    pub fn with_max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Sets the growth factor (≥ 1).
    pub fn with_factor(mut self, f: f32) -> Self {
        self.factor = f;
        self
    }

    /// Sets how long a waiter on one instance that listens for release notifications sleeps at most before trying
    /// again without one (default 1 s; `max_delay` applies instead when it is longer; Redlock waiters keep the
    /// backoff). It bounds what a lost notification costs (a
    /// subscriber reconnecting, a Cluster slot moving), and it is how often each such waiter polls the server while
    /// a holder keeps the lock: with the backoff instead, eight processes waiting out a 250 ms hold sent two thirds
    /// of the default lock's server commands as polls (issue 19, `procs-8-hold250` in BENCHMARKS.md).
    ///
    /// ```
    /// use lock_core::RetryPolicy;
    /// use std::time::Duration;
    ///
    /// let quick_to_recover = RetryPolicy::default().with_safety_poll(Duration::from_millis(250));
    /// assert!(quick_to_recover.validate().is_ok());
    /// ```
    pub fn with_safety_poll(mut self, d: Duration) -> Self {
        self.safety_poll = d;
        self
    }

    /// How long a listening waiter sleeps at most without a notification: the safety poll, or `max_delay` when that
    /// is longer (see [`with_safety_poll`](Self::with_safety_poll)).
    pub fn safety_poll(&self) -> Duration {
        self.safety_poll.max(self.max_delay)
    }

    /// Limits the number of tries (the first one included); `None` leaves only the wait budget as a bound. A waiter
    /// that listens for releases tries when it is woken or at its safety poll, not on the backoff, so a limit of
    /// tries is no bound on time: the wait budget ([`LockOptions::with_wait`]) is.
    pub fn with_max_attempts(mut self, n: Option<u32>) -> Self {
        self.max_attempts = n;
        self
    }

    /// The limit on tries, if any.
    pub fn max_attempts(&self) -> Option<u32> {
        self.max_attempts
    }

    /// The first delay.
    pub fn min_delay(&self) -> Duration {
        self.min_delay
    }

    /// The cap on one delay.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The growth factor.
    pub fn factor(&self) -> f32 {
        self.factor
    }

    /// Checks the fields.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a zero delay, `min_delay > max_delay`, a factor below 1 or not finite,
    /// a limit of zero attempts, or a zero or absurd safety poll.
    pub fn validate(&self) -> Result<()> {
        if self.min_delay.is_zero() || self.min_delay > self.max_delay {
            return Err(LockError::invalid("retry delays must satisfy 0 < min_delay <= max_delay"));
        }
        if self.max_delay > MAX_WAIT {
            return Err(LockError::invalid("retry max_delay is absurdly large"));
        }
        if self.safety_poll.is_zero() || self.safety_poll > MAX_WAIT {
            return Err(LockError::invalid("retry safety_poll must be above zero and not absurdly large"));
        }
        if !self.factor.is_finite() || self.factor < 1.0 {
            return Err(LockError::invalid("retry factor must be a finite number >= 1"));
        }
        if self.max_attempts == Some(0) {
            return Err(LockError::invalid("max_attempts must be at least 1"));
        }
        Ok(())
    }

    /// The sequence of jittered delays (validated policies only).
    pub(crate) fn delays(&self) -> impl Iterator<Item = std::time::Duration> {
        use backon::BackoffBuilder;
        backon::ExponentialBuilder::new()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_factor(self.factor)
            .with_jitter()
            .without_max_times()
            .build()
            // backon's jitter adds up to one more delay; keep the cap a cap.
            .map({
                let cap = self.max_delay;
                move |d| d.min(cap)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_bounds() {
        assert!(validate_ttl(Duration::ZERO).is_err());
        assert!(validate_ttl(Duration::from_millis(9)).is_err());
        assert!(validate_ttl(MIN_TTL).is_ok());
        assert!(validate_ttl(MAX_TTL).is_ok());
        assert!(validate_ttl(MAX_TTL + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn delays_grow_and_stay_capped() {
        let p =
            RetryPolicy::default().with_min_delay(Duration::from_millis(2)).with_max_delay(Duration::from_millis(40));
        let d: Vec<Duration> = p.delays().take(20).collect();
        assert_eq!(d.len(), 20);
        assert!(d.iter().all(|x| *x >= Duration::from_millis(2) && *x <= Duration::from_millis(40)));
        assert!(d[10..].iter().any(|x| *x >= Duration::from_millis(20)), "{d:?}");
    }

    #[test]
    fn bad_policies_rejected() {
        assert!(RetryPolicy::default().with_min_delay(Duration::ZERO).validate().is_err());
        assert!(RetryPolicy::default().with_factor(0.5).validate().is_err());
        assert!(RetryPolicy::default().with_factor(f32::NAN).validate().is_err());
        assert!(RetryPolicy::default().with_max_attempts(Some(0)).validate().is_err());
        assert!(LockOptions::default().with_wait(MAX_WAIT * 2).validate().is_err());
    }
}
