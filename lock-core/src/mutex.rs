//! The lock itself as a [`Primitive`]: one resource, or several taken all or nothing
//! ([`Lock::acquire_all`](crate::Lock::acquire_all)), through the store's mutex calls.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::distributed_lock::{Capabilities, DistributedLock, LockGuard};
use crate::engine::lock::{Guard, Lock};
use crate::engine::primitive::{grant, one, waiting_as, Ask, Grant, Kind, Pending, Primitive};
use crate::engine::wait::Attempt;
use crate::error::{LockError, Result};
use crate::options::CrossSlot;
use crate::options::LockOptions;
use crate::resource::{slot, LockKeys, PerResource};
use crate::seam::store::{
    AcquireAllReply, AcquireAllRequest, AcquireReply, AcquireRequest, ExtendReply, LockStore, ReleaseOutcome,
};
use crate::seam::transport::Topology;
use crate::token::Token;

/// The most resources one [`Lock::acquire_all`](crate::Lock::acquire_all) takes (one script's keys stay small,
/// and a lock over more resources than this is better modelled as a coarser resource).
pub const MAX_RESOURCES: usize = 256;

/// The lock's keys for one acquisition: one resource, or several all or nothing.
#[derive(Debug)]
pub(crate) struct MutexTarget {
    /// Deduplicated and sorted by lock key; never empty.
    resources: PerResource<LockKeys>,
    /// The groups acquired one after another (ranges of `resources`): one, unless resources in different Cluster
    /// slots are taken in [`CrossSlot::Ordered`] mode, where each group is one slot, in slot order.
    groups: PerResource<Range<usize>>,
    /// What errors and traces call an acquisition of several resources: their names joined by `", "` (empty for
    /// one resource, whose name is its label: no copy per acquisition).
    label: String,
    /// Taken by [`Lock::acquire_all`](crate::Lock::acquire_all): its guard reads each resource's token from the
    /// grant and has no way to draw one later, so its tokens are drawn with the grant even when the list named
    /// one resource (`["a", "a"]`, or a computed list of one).
    bundle: bool,
}

impl MutexTarget {
    /// One resource.
    pub(crate) fn one(keys: LockKeys) -> Self {
        MutexTarget {
            resources: smallvec::smallvec![keys],
            groups: smallvec::smallvec![0..1],
            label: String::new(),
            bundle: false,
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
        Ok(MutexTarget { resources: resources.into(), groups: groups.into(), label, bundle: true })
    }

    /// Whether this is the single lock (one resource): then the mutex's own calls are used.
    fn is_one(&self) -> bool {
        self.resources.len() == 1
    }

    /// Acquires several resources on `store`, all or nothing. In ordered mode the groups are taken one after another;
    /// a group found held gives the earlier ones back before this returns, so nobody holds while waiting.
    async fn acquire_all_on(&self, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let mut fences = Vec::with_capacity(self.resources.len());
        // A multi-resource waiter listens on every resource's channel, so any of them tells whether it lines up.
        let waiting_as = self.resources.first().and_then(|keys| waiting_as(store, keys));
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
        Ok(Grant::Acquired { fences: fences.into() })
    }

    /// Compare-and-delete of every resource on `store`: one outcome per resource.
    async fn release_all_on(&self, store: &dyn LockStore, token: &Token) -> Result<PerResource<ReleaseOutcome>> {
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
            None => Ok(outcomes.into()),
        }
    }

    /// Compare-and-extend of every resource on `store`, all or nothing per group: what each resource held.
    async fn extend_all_on(
        &self,
        store: &dyn LockStore,
        token: &Token,
        ttl: Duration,
    ) -> Result<PerResource<ExtendReply>> {
        let mut replies = Vec::with_capacity(self.resources.len());
        for group in &self.groups {
            replies.extend(store.extend_all(&self.resources[group.clone()], token, ttl).await?);
        }
        Ok(replies.into())
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
}

#[async_trait]
impl Primitive for MutexTarget {
    fn kind(&self) -> Kind {
        if self.bundle {
            Kind::MultiLock
        } else {
            Kind::Lock
        }
    }

    fn resources(&self) -> &[LockKeys] {
        &self.resources
    }

    fn label(&self) -> &str {
        match self.resources.as_slice() {
            [one] => one.resource(),
            _ => &self.label,
        }
    }

    fn is_one_call(&self) -> bool {
        self.groups.len() == 1
    }

    /// A single resource taken by `acquire`: a multi-lock's guard has no later draw.
    fn draws_fence_later(&self) -> bool {
        self.is_one() && !self.bundle
    }

    fn acquire<'a>(&'a self, store: &'a dyn LockStore, ask: Ask<'a>) -> Pending<'a, AcquireReply, Grant> {
        match self.resources.as_slice() {
            [keys] => {
                let request = AcquireRequest {
                    keys,
                    token: ask.token,
                    ttl: ask.ttl,
                    fencing: ask.fencing,
                    fence_floor: ask.fence_floor,
                    replicas: ask.replicas,
                    waiting_as: waiting_as(store, keys),
                };
                Pending::Store(store.acquire(request), grant)
            }
            _ => Pending::Boxed(Box::pin(self.acquire_all_on(store, ask))),
        }
    }

    fn extend<'a>(
        &'a self,
        store: &'a dyn LockStore,
        token: &'a Token,
        ttl: Duration,
    ) -> Pending<'a, ExtendReply, PerResource<ExtendReply>> {
        match self.resources.as_slice() {
            [keys] => Pending::Store(store.extend(keys, token, ttl), one),
            _ => Pending::Boxed(Box::pin(self.extend_all_on(store, token, ttl))),
        }
    }

    fn release<'a>(
        &'a self,
        store: &'a dyn LockStore,
        token: &'a Token,
    ) -> Pending<'a, ReleaseOutcome, PerResource<ReleaseOutcome>> {
        match self.resources.as_slice() {
            [keys] => Pending::Store(store.release(keys, token), one),
            _ => Pending::Boxed(Box::pin(self.release_all_on(store, token))),
        }
    }
}

/// The lock's user API: one resource, waiting or not ([`DistributedLock`] for [`Lock`] is this).
impl Lock {
    /// The lock on `resource` (a fair lock with a fair-queue option), after checking the options, before any I/O.
    fn prepare(&self, resource: &str, options: &LockOptions) -> Result<Arc<dyn Primitive>> {
        self.check(options)?;
        let keys = self.keys(resource)?;
        if self.layout().kind == crate::layout::LayoutKind::Redisson {
            if options.fair_queue().is_some() || self.stores().len() > 1 {
                return Err(LockError::invalid("Redisson's layout is for a lock on one store, without a fair queue"));
            }
            return Ok(Arc::new(crate::redisson::RedissonTarget::new(keys)));
        }
        Ok(match options.fair_queue() {
            None => Arc::new(MutexTarget::one(keys)),
            Some(_) if self.stores().len() > 1 => {
                return Err(LockError::invalid(
                    "a fair queue needs one instance: over Redlock each instance would order the waiters on its own",
                ))
            }
            Some(waiter_ttl) => {
                let keys = self.keys_without_peer_release("a fair lock", resource)?;
                Arc::new(crate::engine::fair::FairTarget::new(keys, waiter_ttl))
            }
        })
    }

    /// Tries once, without waiting. See [`DistributedLock::try_acquire`].
    ///
    /// # Errors
    /// As [`DistributedLock::try_acquire`]; with several instances, [`LockError::Quorum`] when too few answered.
    ///
    /// # Cancel safety
    /// As [`DistributedLock::try_acquire`]: a grant the dropped future may have made is released in the background.
    pub async fn try_acquire(&self, resource: &str, options: &LockOptions) -> Result<Option<Guard>> {
        let target = self.prepare(resource, options)?;
        match self.try_take(&target, options).await? {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Held { .. } => Ok(None),
        }
    }

    /// Acquires, waiting up to the options' wait budget. See [`DistributedLock::acquire`].
    ///
    /// # Errors
    /// As [`DistributedLock::acquire`].
    ///
    /// # Cancel safety
    /// As [`DistributedLock::acquire`]: a grant the dropped future may have made is released in the background, and
    /// a release notification it had consumed is passed to the next waiter.
    pub async fn acquire(&self, resource: &str, options: &LockOptions) -> Result<Guard> {
        let target = self.prepare(resource, options)?;
        self.take(&target, options).await
    }
}

#[async_trait]
impl DistributedLock for Lock {
    async fn try_acquire(&self, resource: &str, options: &LockOptions) -> Result<Option<Box<dyn LockGuard>>> {
        Ok(Lock::try_acquire(self, resource, options).await?.map(|g| Box::new(g) as Box<dyn LockGuard>))
    }

    async fn acquire(&self, resource: &str, options: &LockOptions) -> Result<Box<dyn LockGuard>> {
        Ok(Box::new(Lock::acquire(self, resource, options).await?))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(true, true).with_election(true)
    }

    fn election(&self, name: &str, options: crate::ElectionOptions) -> Result<Box<dyn crate::DistributedElection>> {
        Ok(Box::new(crate::Election::new(self.clone(), name, options)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<LockKeys> {
        names.iter().map(|n| LockKeys::new("wlp:", n).unwrap_or_else(|e| panic!("{e}"))).collect()
    }

    #[test]
    fn resources_are_deduplicated_sorted_and_capped() {
        let t = MutexTarget::all(keys(&["b", "a", "b", "c", "a"]), Topology::Single, CrossSlot::Reject).unwrap();
        let names: Vec<_> = t.resources().iter().map(LockKeys::resource).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(t.label(), "a, b, c");
        assert!(matches!(
            MutexTarget::all(vec![], Topology::Single, CrossSlot::Reject),
            Err(LockError::InvalidArgument(_))
        ));
        let many: Vec<String> = (0..=MAX_RESOURCES).map(|i| format!("r{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(matches!(
            MutexTarget::all(keys(&many), Topology::Single, CrossSlot::Reject),
            Err(LockError::InvalidArgument(_))
        ));
        assert!(MutexTarget::all(keys(&many[..MAX_RESOURCES]), Topology::Single, CrossSlot::Reject).is_ok());
    }

    #[test]
    fn cluster_groups_by_slot_in_a_fixed_order() {
        let names = ["a", "b", "c", "d", "e"];
        assert!(matches!(
            MutexTarget::all(keys(&names), Topology::Cluster, CrossSlot::Reject),
            Err(LockError::CrossSlot { slots: 5, .. })
        ));
        let forward = MutexTarget::all(keys(&names), Topology::Cluster, CrossSlot::Ordered).unwrap();
        let mut reversed = names;
        reversed.reverse();
        let backward = MutexTarget::all(keys(&reversed), Topology::Cluster, CrossSlot::Ordered).unwrap();
        assert_eq!(forward.resources(), backward.resources());
        assert_eq!(forward.groups.len(), 5);
        let slots: Vec<u16> = forward.resources().iter().map(|k| slot(k.lock())).collect();
        assert!(slots.windows(2).all(|w| w[0] < w[1]), "{slots:?}");
    }
}
