//! What the engine asks of a primitive: how one acquisition is taken, extended and given back on one store, read
//! from its scripts' replies. The engine in [`lock`](crate::engine::lock) (waiting, validity, Redlock quorums and fence
//! write-back, renewal, the lost signal, cancel safety, telemetry) is written once over [`Primitive`]; a primitive
//! is a type in its own module that implements it:
//!
//! | kind | implemented by |
//! |---|---|
//! | the lock, one resource or several all or nothing | [`MutexTarget`](crate::mutex::MutexTarget) |
//! | a fair lock | [`FairTarget`](crate::engine::fair::FairTarget) |
//! | a semaphore's permit | [`PermitTarget`](crate::semaphore::PermitTarget) |
//! | an election's leadership | [`ElectionTarget`](crate::election::ElectionTarget) |
//! | a job's run | [`JobTarget`](crate::job::JobTarget) |
//! | a read-write lock's read or write hold | [`RwTarget`](crate::rwlock::RwTarget) |
//!
//! A primitive only translates: it names its keys (all under one hash tag), sends its scripts and reads their
//! replies. Everything that holds for every primitive lives in the engine, so it cannot differ between them.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::BoxFuture;

use crate::error::Result;
use crate::options::ReplicaAck;
use crate::resource::LockKeys;
use crate::resource::PerResource;
use crate::seam::store::{AcquireReply, ExtendReply, LockStore, ReleaseOutcome};
use crate::seam::transport::{Ran, Topology};
use crate::token::Token;

/// Which primitive an acquisition belongs to: the `primitive` label of its spans and metrics (a small fixed set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// [`Lock::acquire`](crate::Lock::acquire) of one resource.
    Lock,
    /// A fair lock ([`LockOptions::with_fair_queue`](crate::LockOptions::with_fair_queue)).
    FairLock,
    /// [`Lock::acquire_all`](crate::Lock::acquire_all).
    MultiLock,
    /// A [`Semaphore`](crate::Semaphore)'s permit.
    Semaphore,
    /// An [`Election`](crate::Election)'s leadership.
    Election,
    /// A [`JobLock`](crate::JobLock)'s run.
    Job,
    /// A [`RwLock`](crate::RwLock)'s read hold.
    Read,
    /// A [`RwLock`](crate::RwLock)'s write hold.
    Write,
}

impl Kind {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::FairLock => "fair_lock",
            Kind::MultiLock => "multi_lock",
            Kind::Semaphore => "semaphore",
            Kind::Election => "election",
            Kind::Job => "job",
            Kind::Read => "rwlock_read",
            Kind::Write => "rwlock_write",
        }
    }
}

/// One store's answer to an acquire.
#[derive(Debug)]
pub(crate) enum Grant {
    /// Every resource is ours; each one's fencing counter when fencing.
    Acquired { fences: PerResource<Option<u64>> },
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
    /// renew these peers' places (see [`Queued`](crate::engine::fair::Queued)).
    pub(crate) queued: Option<&'a [String]>,
}

impl Ask<'_> {
    /// `"1"` when the grant draws a fence, `"0"` otherwise (the scripts' flag).
    pub(crate) fn fencing_flag(&self) -> &'static str {
        if self.fencing {
            "1"
        } else {
            "0"
        }
    }

    /// The Redlock fence floor as a script argument (empty for none).
    pub(crate) fn floor_arg(&self) -> String {
        self.fence_floor.map(|f| f.to_string()).unwrap_or_default()
    }

    /// Fails a grant that `ran` did not get the asked replicas' acknowledgements for (the engine gives it back).
    pub(crate) fn check_replicas(&self, ran: &Ran, grant: &Grant) -> Result<()> {
        match (self.replicas, grant) {
            (Some(ack), Grant::Acquired { .. }) => ack.check(ran.replicas.unwrap_or(0)),
            _ => Ok(()),
        }
    }
}

/// What every script that wakes a waiter is told about the store it runs on: the process's hub id, so its own
/// subscriber skips the echo (empty without a hub), and `"1"` on Redis Cluster (publish to the shard channel).
pub(crate) fn announcer(store: &dyn LockStore) -> (&str, &'static str) {
    let origin = store.release_hub().map(|hub| hub.origin()).unwrap_or_default();
    let sharded = if store.topology() == Topology::Cluster { "1" } else { "0" };
    (origin, sharded)
}

/// One call of a primitive on one store, in flight: the store's own mutex call with its reply mapped (the lock's
/// hot path: no allocation of ours around the store's), or any other future of the primitive's.
pub(crate) enum Pending<'a, S, T> {
    /// A [`LockStore`] mutex call and how its reply reads as the primitive's.
    Store(BoxFuture<'a, Result<S>>, fn(S) -> T),
    /// A primitive's own call (its scripts, or several store calls).
    Boxed(BoxFuture<'a, Result<T>>),
}

impl<S, T> Future for Pending<'_, S, T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match self.get_mut() {
            Pending::Store(call, read) => call.as_mut().poll(cx).map(|reply| reply.map(*read)),
            Pending::Boxed(call) => call.as_mut().poll(cx),
        }
    }
}

/// The [`Primitive`] calls of a primitive that runs its own scripts: each is its inherent `acquire_on`,
/// `extend_on` or `release_on` future, boxed. `scripted_calls!(acquire, extend, release)`, or the ones it has;
/// `mutex_extend` extends its one key (`self.keys[0]`) with the store's own mutex call, as a lock's.
macro_rules! scripted_calls {
    ($($call:ident),+) => {
        $($crate::engine::primitive::scripted_calls!(@ $call);)+
    };
    (@ acquire) => {
        fn acquire<'a>(
            &'a self,
            store: &'a dyn $crate::seam::store::LockStore,
            ask: $crate::engine::primitive::Ask<'a>,
        ) -> $crate::engine::primitive::Pending<'a, $crate::seam::store::AcquireReply, $crate::engine::primitive::Grant> {
            $crate::engine::primitive::Pending::Boxed(Box::pin(self.acquire_on(store, ask)))
        }
    };
    (@ extend) => {
        fn extend<'a>(
            &'a self,
            store: &'a dyn $crate::seam::store::LockStore,
            token: &'a $crate::token::Token,
            ttl: std::time::Duration,
        ) -> $crate::engine::primitive::Pending<'a, $crate::seam::store::ExtendReply, $crate::resource::PerResource<$crate::seam::store::ExtendReply>> {
            $crate::engine::primitive::Pending::Boxed(Box::pin(self.extend_on(store, token, ttl)))
        }
    };
    (@ mutex_extend) => {
        fn extend<'a>(
            &'a self,
            store: &'a dyn $crate::seam::store::LockStore,
            token: &'a $crate::token::Token,
            ttl: std::time::Duration,
        ) -> $crate::engine::primitive::Pending<'a, $crate::seam::store::ExtendReply, $crate::resource::PerResource<$crate::seam::store::ExtendReply>> {
            $crate::engine::primitive::Pending::Store(store.extend(&self.keys[0], token, ttl), $crate::engine::primitive::one)
        }
    };
    (@ release) => {
        fn release<'a>(
            &'a self,
            store: &'a dyn $crate::seam::store::LockStore,
            token: &'a $crate::token::Token,
        ) -> $crate::engine::primitive::Pending<'a, $crate::seam::store::ReleaseOutcome, $crate::resource::PerResource<$crate::seam::store::ReleaseOutcome>> {
            $crate::engine::primitive::Pending::Boxed(Box::pin(self.release_on(store, token)))
        }
    };
}
pub(crate) use scripted_calls;

/// A mutex grant as the engine reads grants.
pub(crate) fn grant(reply: AcquireReply) -> Grant {
    match reply {
        AcquireReply::Acquired { fence } => Grant::Acquired { fences: smallvec::smallvec![fence] },
        AcquireReply::Held { ttl } => Grant::Held { index: 0, ttl, holder: None, place: None },
    }
}

/// One resource's reply as the list every primitive answers with.
pub(crate) fn one<T>(reply: T) -> PerResource<T> {
    smallvec::smallvec![reply]
}

/// The process a try of `keys` lines up as (its hub's id), when the process hears `keys`' releases: the waiting
/// processes a release wakes in turn. `None` otherwise (a try that lines nobody up).
pub(crate) fn waiting_as<'a>(store: &'a dyn LockStore, keys: &LockKeys) -> Option<&'a str> {
    store.release_hub().filter(|hub| hub.lines_up(keys.channel())).map(|hub| hub.origin())
}

/// One primitive's acquisition as the engine takes, keeps and gives it back on each store (see the module docs).
///
/// An implementation holds what one acquisition needs beyond its token and TTL (its keys, its limit, its candidate
/// id …) and is shared by the acquisition's guard, its renewal and its cancel-safety tasks.
#[async_trait]
pub(crate) trait Primitive: Debug + Send + Sync + 'static {
    /// Which primitive this is.
    fn kind(&self) -> Kind;

    /// The resources held, in the order every reply and fence list follows; never empty.
    fn resources(&self) -> &[LockKeys];

    /// What errors and traces call this acquisition: the resource's name (a multi-lock's names joined by `", "`).
    /// How much of the resource one acquisition asks for: a semaphore's permits, 1 for everything else. A newcomer
    /// queues only behind local waiters asking for no more (see `ReleaseHub::ahead`).
    fn demand(&self) -> u32 {
        1
    }

    /// Whether holders share the resource (a semaphore's permits, read holds): such a holder holds no newcomer back.
    fn shared(&self) -> bool {
        false
    }

    fn label(&self) -> &str {
        self.resources().first().map(LockKeys::resource).unwrap_or_default()
    }

    /// Takes the hold on `store` (all or nothing).
    fn acquire<'a>(&'a self, store: &'a dyn LockStore, ask: Ask<'a>) -> Pending<'a, AcquireReply, Grant>;

    /// Compare-and-extend on `store`: what each resource held.
    fn extend<'a>(
        &'a self,
        store: &'a dyn LockStore,
        token: &'a Token,
        ttl: Duration,
    ) -> Pending<'a, ExtendReply, PerResource<ExtendReply>>;

    /// Compare-and-delete on `store`: one outcome per resource.
    fn release<'a>(
        &'a self,
        store: &'a dyn LockStore,
        token: &'a Token,
    ) -> Pending<'a, ReleaseOutcome, PerResource<ReleaseOutcome>>;

    /// Raises `keys`' fencing counter to `want` on `store` while it holds `token` (the Redlock write-back).
    async fn raise_fence(&self, store: &dyn LockStore, keys: &LockKeys, token: &Token, want: u64) -> Result<bool> {
        store.raise_fence(keys, token, want).await
    }

    /// Until when a grant (or extension) whose request started at `started` may be trusted: the lease's validity
    /// unless the primitive promises less.
    fn valid_until(&self, started: Instant, ttl: Duration) -> Instant {
        crate::lease::valid_until(started, ttl)
    }

    /// Whether taking, extending or releasing is one store call (not several groups one after another).
    fn is_one_call(&self) -> bool {
        true
    }

    /// Whether a [`Fencing::OnDemand`](crate::Fencing::OnDemand) token may be drawn after the grant by
    /// [`FENCE`](crate::backend::scripts::FENCE), which reads the plain lock key. Otherwise the token is drawn with the
    /// grant.
    fn draws_fence_later(&self) -> bool {
        false
    }

    /// Whether its waiters line up in a queue on the server (then the engine waits in it: see
    /// [`fair`](crate::engine::fair)).
    fn queued(&self) -> bool {
        false
    }

    /// The lease a queue's release grants a waiter acquiring with `ttl`, when a release hands the hold over
    /// (`None` when a release only tells the head, which then tries).
    fn fair_lease(&self, ttl: Duration) -> Option<Duration> {
        let _ = ttl;
        None
    }

    /// Whether a release tells only the head of a queue, so the engine must not wake a local waiter itself.
    fn wakes_head_only(&self) -> bool {
        false
    }
}
