//! The fenced writes' conformance cases ([`FencedResource`]): one public async function per case, each taking the
//! [`Subject`] under test, which must wrap a [`lock_core::Lock`] ([`Subject::engine`]). The protected keys live on
//! the lock's first store (over Redlock, instance 0: the data's own server).
//!
//! [`conformance_tests!`](crate::conformance_tests) runs them (through [`fenced_tests!`](crate::fenced_tests)). A
//! holder paused past its lease in another process is in the backends' fault suites.

use std::collections::BTreeSet;

use futures_util::future::join_all;
use lock_core::backend::Reply;
use lock_core::fenced::FencedResource;
use lock_core::{
    Election, ElectionOptions, FencingToken, JobLock, JobOptions, JobOutcome, LockError, LockOptions, RwLock, Semaphore,
};

use crate::conformance::{ok, some};
use crate::or_panic::ms;
use crate::scripted::CancelAfter;
use crate::Subject;

/// A fresh resource name, and its guard and data keys under one hash tag (so the case also runs on Cluster).
fn fresh(case: &str) -> (String, String, String) {
    let name = format!("fenced-{case}-{:016x}", rand::random::<u64>());
    (format!("{{{name}}}:guard"), format!("{{{name}}}:data"), name)
}

fn resource(s: &Subject, guard: &str) -> FencedResource {
    let store = some(s.engine().stores().first().cloned(), "the lock's first store");
    ok(FencedResource::from_arc_with_guard(store, guard), "FencedResource::from_arc")
}

async fn raw(s: &Subject, command: &'static str, keys: &[&str], args: &[&str]) -> Reply {
    let store = some(s.engine().stores().first().cloned(), "the lock's first store");
    ok(store.call(lock_core::backend::Call::plain("test", command, keys, args)).await, command).reply
}

async fn remove(s: &Subject, keys: &[&str]) {
    raw(s, "DEL", keys, &[]).await;
}

/// Whether the case cannot run on `s` (its user may not touch data keys), said on the terminal.
fn skipped(s: &Subject, case: &str) -> bool {
    if s.data_keys() {
        return false;
    }
    crate::report_skip(case, "the lock's user may touch only the lock's keys; fenced writes need data permissions");
    true
}

fn expect_stale<T: std::fmt::Debug>(result: lock_core::Result<T>, presented: FencingToken, current: FencingToken) {
    match result {
        Err(LockError::StaleFence { presented: p, current: c }) => {
            assert_eq!((p, c), (presented.get(), current.get()), "the refusal names the wrong fences")
        }
        other => panic!("fence {presented} after {current} was not refused as stale: {other:?}"),
    }
}

/// The case the guard exists for: a holder whose lease ran out while it paused writes after the next holder read;
/// its write is refused, names both fences, and changes nothing.
pub async fn fenced_write_refuses_a_holder_whose_lease_ran_out(s: &Subject) {
    if skipped(s, "fenced_write_refuses_a_holder_whose_lease_ran_out") {
        return;
    }
    let lock = s.engine();
    let (guard, data, name) = fresh("lease");
    let r = resource(s, &guard);
    let old = ok(lock.acquire(&name, &LockOptions::new(ms(300))).await, "the first holder");
    let old_fence = some(old.fence().await.ok(), "fencing is on by default");
    ok(r.set(old_fence, &data, "old-1").await, "a write while the lease lasts");
    // The holder pauses here; its lease runs out and the next holder takes the lock.
    let next = LockOptions::new(ms(10_000)).with_wait(ms(30_000));
    let new = ok(lock.acquire(&name, &next).await, "the next holder");
    let new_fence = some(new.fence().await.ok(), "fencing is on by default");
    assert!(new_fence > old_fence, "fence {new_fence} after {old_fence}");
    assert_eq!(ok(r.get(new_fence, &data).await, "the next holder reads").as_deref(), Some("old-1"));
    expect_stale(r.set(old_fence, &data, "old-2").await, old_fence, new_fence);
    expect_stale(r.observe(old_fence).await, old_fence, new_fence);
    ok(r.set(new_fence, &data, "new-1").await, "the next holder writes");
    assert_eq!(raw(s, "GET", &[&data], &[]).await, Reply::Bulk(b"new-1".to_vec()));
    assert_eq!(ok(r.current().await, "current"), Some(new_fence));
    ok(new.release().await, "release");
    drop(old);
    remove(s, &[&guard, &data]).await;
}

/// One holder's read-modify-write of a shared set, as the Jepsen `lock-set` workload does it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Read,
    Write,
}

/// Every interleaving of three overlapping holders' read-modify-writes (each believes it holds: the older ones
/// paused past their leases), all 90 of them: with the guard no acknowledged add is ever lost; without it (plain
/// `GET` and `SET`) some interleaving loses one, so the workload bites.
pub async fn fenced_read_modify_write_loses_no_update_in_any_interleaving(s: &Subject) {
    if skipped(s, "fenced_read_modify_write_loses_no_update_in_any_interleaving") {
        return;
    }
    let lock = s.engine();
    let (guard, data, name) = fresh("rmw");
    let mut fences = Vec::new();
    for holder in 0..3 {
        let g = ok(lock.acquire(&name, &LockOptions::new(ms(5_000))).await, "acquire");
        fences.push(some(g.fence().await.ok(), "fencing is on by default"));
        ok(g.release().await, "release");
        assert!(holder == 0 || fences[holder - 1] < fences[holder], "fences out of order: {fences:?}");
    }
    let orders = interleavings(&[2, 2, 2]);
    assert_eq!(orders.len(), 90);
    let (mut refused, mut unguarded_losses) = (0, 0);
    for order in &orders {
        for guarded in [true, false] {
            remove(s, &[&guard, &data]).await;
            let r = resource(s, &guard);
            let mut read: [Option<String>; 3] = Default::default();
            let mut next = [Step::Read; 3];
            let mut acknowledged = BTreeSet::new();
            for &holder in order {
                let fence = fences[holder];
                match next[holder] {
                    Step::Read => {
                        read[holder] = Some(if guarded {
                            r.get(fence, &data).await.ok().flatten().unwrap_or_default()
                        } else {
                            raw(s, "GET", &[&data], &[]).await.to_text_lossy().unwrap_or_default()
                        });
                        next[holder] = Step::Write;
                    }
                    Step::Write => {
                        let before = read[holder].take().unwrap_or_default();
                        let value = if before.is_empty() { holder.to_string() } else { format!("{before},{holder}") };
                        let written = if guarded {
                            match r.set(fence, &data, &value).await {
                                Ok(()) => true,
                                Err(LockError::StaleFence { .. }) => false,
                                Err(err) => panic!("{order:?}: a fenced write failed: {err:?}"),
                            }
                        } else {
                            raw(s, "SET", &[&data], &[&value]).await;
                            true
                        };
                        if written {
                            acknowledged.insert(holder.to_string());
                        } else {
                            refused += 1;
                        }
                    }
                }
            }
            let end = raw(s, "GET", &[&data], &[]).await.to_text_lossy().unwrap_or_default();
            let present: BTreeSet<String> = end.split(',').filter(|e| !e.is_empty()).map(str::to_owned).collect();
            let lost: Vec<&String> = acknowledged.difference(&present).collect();
            if guarded {
                assert!(lost.is_empty(), "order {order:?}: acknowledged adds {lost:?} are lost from {end:?}");
            } else if !lost.is_empty() {
                unguarded_losses += 1;
            }
        }
    }
    assert!(refused > 0, "no interleaving had a stale write: the case proves nothing");
    assert!(unguarded_losses > 0, "no interleaving lost an update without the guard: the workload does not bite");
    remove(s, &[&guard, &data]).await;
}

/// Every order of `counts[i]` steps of each actor `i` (each actor's steps in their own order): how a test walks
/// every interleaving of a few holders' operations against a resource that is not Redis.
///
/// ```
/// let orders = lock_testkit::fenced_conformance::interleavings(&[2, 1]);
/// assert_eq!(orders, vec![vec![0, 0, 1], vec![0, 1, 0], vec![1, 0, 0]]);
/// ```
pub fn interleavings(counts: &[usize]) -> Vec<Vec<usize>> {
    fn go(left: &mut Vec<usize>, prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if left.iter().all(|n| *n == 0) {
            out.push(prefix.clone());
            return;
        }
        for actor in 0..left.len() {
            if left[actor] > 0 {
                left[actor] -= 1;
                prefix.push(actor);
                go(left, prefix, out);
                prefix.pop();
                left[actor] += 1;
            }
        }
    }
    let mut out = Vec::new();
    go(&mut counts.to_vec(), &mut Vec::new(), &mut out);
    out
}

/// Older and newer fences of one primitive: the newer one's write makes the older one's stale.
async fn newer_fence_wins(s: &Subject, what: &str, older: Option<FencingToken>, newer: Option<FencingToken>) {
    let older = some(older, what);
    let newer = some(newer, what);
    assert!(older < newer, "{what}: fence {newer} after {older}");
    let (guard, data, _) = fresh("primitive");
    let r = resource(s, &guard);
    ok(r.set(older, &data, "older").await, what);
    ok(r.incr_by(newer, &format!("{data}:n"), 1).await.map(drop), what);
    expect_stale(r.set(older, &data, "late").await, older, newer);
    assert_eq!(raw(s, "GET", &[&data], &[]).await, Reply::Bulk(b"older".to_vec()), "{what}");
    remove(s, &[&guard, &data, &format!("{data}:n")]).await;
}

/// Every primitive's fence guards a write: a lock's, a multi-lock's per resource, a write lock's, a permit's, an
/// election's term, a job run's. (The read-write lock and the semaphore need one store; over Redlock only the
/// others run.)
pub async fn fenced_writes_take_every_primitives_fence(s: &Subject) {
    if skipped(s, "fenced_writes_take_every_primitives_fence") {
        return;
    }
    let lock = s.engine().clone();
    let opts = LockOptions::new(ms(5_000)).with_wait(ms(10_000));
    let (_, _, name) = fresh("lock");
    let mut fences = Vec::new();
    for _ in 0..2 {
        let g = ok(lock.acquire(&name, &opts).await, "lock");
        fences.push(g.fence().await.ok());
        ok(g.release().await, "release");
    }
    newer_fence_wins(s, "a lock's fence", fences[0], fences[1]).await;

    let (_, _, a) = fresh("multi-a");
    let (_, _, b) = fresh("multi-b");
    let opts_all = opts.clone().with_cross_slot(lock_core::CrossSlot::Ordered);
    let mut fences = Vec::new();
    for _ in 0..2 {
        let g = ok(lock.acquire_all(&[a.as_str(), b.as_str()], &opts_all).await, "acquire_all");
        fences.push((g.fence_of(&a), g.fence_of(&b)));
        ok(g.release().await, "release all");
    }
    newer_fence_wins(s, "a multi-lock's first resource", fences[0].0, fences[1].0).await;
    newer_fence_wins(s, "a multi-lock's second resource", fences[0].1, fences[1].1).await;

    if lock.stores().len() == 1 {
        let (_, _, name) = fresh("rw");
        let rw = ok(RwLock::new(lock.clone(), &name), "RwLock::new");
        let mut fences = Vec::new();
        for _ in 0..2 {
            let w = ok(rw.write(&opts).await, "write");
            fences.push(w.fence().await.ok());
            ok(w.release().await, "release the write lock");
        }
        newer_fence_wins(s, "a write lock's fence", fences[0], fences[1]).await;

        let (_, _, name) = fresh("sem");
        let sem = ok(Semaphore::new(lock.clone(), &name, 1), "Semaphore::new");
        let mut fences = Vec::new();
        for _ in 0..2 {
            let p = ok(sem.acquire(1, &opts).await, "permit");
            fences.push(p.fence().await.ok());
            ok(p.release().await, "release the permit");
        }
        newer_fence_wins(s, "a permit's fence (one slot)", fences[0], fences[1]).await;
    }

    let (_, _, name) = fresh("election");
    let timing =
        ElectionOptions::default().with_lease(ms(3_000)).with_renew_deadline(ms(2_000)).with_retry_period(ms(50));
    let election = ok(Election::new(lock.clone(), &name, timing), "Election::new");
    let mut terms = Vec::new();
    for id in ["first", "second"] {
        let leadership = ok(election.campaign(id, "").await, "campaign");
        terms.push(Some(leadership.term()));
        ok(leadership.resign().await, "resign");
    }
    newer_fence_wins(s, "an election's term", terms[0], terms[1]).await;

    let (_, _, name) = fresh("job");
    let jobs = JobLock::new(lock.clone());
    let mut fences = Vec::new();
    for _ in 0..2 {
        match ok(jobs.run(&name, &JobOptions::new(ms(5_000)), |ctx| async move { ctx.fencing_token }).await, "run") {
            JobOutcome::Ran { value, fencing_token, .. } => {
                assert_eq!(value, fencing_token, "the work saw another fence than the run reports");
                fences.push(value);
            }
            other => panic!("the job did not run: {other:?}"),
        }
    }
    newer_fence_wins(s, "a job run's fence", fences[0], fences[1]).await;
}

/// A cancellation storm: 96 writers with fences 1 to 16 append their fence to one list, each cut off at a random
/// await point (before it was sent, in flight, or not at all). Whatever was applied, the list reads in fence order
/// (the resource never accepted a fence below one it had accepted), every write that returned is in it, and the
/// guard's fence is one of it.
pub async fn fenced_writes_cancelled_anywhere_keep_the_fence_order(s: &Subject) {
    if skipped(s, "fenced_writes_cancelled_anywhere_keep_the_fence_order") {
        return;
    }
    let (guard, data, _) = fresh("storm");
    let r = resource(s, &guard);
    for round in 0..3u64 {
        let writes = (0..32u64).map(|i| {
            let r = r.clone();
            let data = data.clone();
            let fence = FencingToken::new(1 + (rand::random::<u64>() % 16));
            let polls = u32::try_from(rand::random::<u64>() % 5).unwrap_or(0);
            async move {
                let text = fence.get().to_string();
                let cut = if (round + i) % 4 == 0 { u32::MAX } else { polls };
                let out = CancelAfter::new(r.rpush(fence, &data, &[text.as_str()]), cut).await;
                (fence, out)
            }
        });
        let outcomes = join_all(writes).await;
        // The guard first, then the list: a cut-off write may still reach the server between the two reads (on
        // another connection), and then only adds fences at or above the guard's to the list's end.
        let current = ok(r.current().await, "current").map(FencingToken::get);
        let list = raw(s, "LRANGE", &[&data], &["0", "-1"]).await;
        let Reply::Array(items) = list else { panic!("LRANGE: {list:?}") };
        let applied: Vec<u64> =
            items.iter().map(|i| some(i.to_text_lossy().and_then(|t| t.parse().ok()), "a fence in the list")).collect();
        assert!(applied.windows(2).all(|w| w[0] <= w[1]), "round {round}: fences out of order: {applied:?}");
        if let Some(current) = current {
            assert!(applied.contains(&current), "round {round}: the guard's {current} was never written");
            assert!(applied.last() >= Some(&current), "round {round}: the guard is above every fence written");
        }
        for (fence, out) in outcomes {
            match out {
                Some(Ok(_)) => assert!(applied.contains(&fence.get()), "an acknowledged {fence} is missing"),
                Some(Err(LockError::StaleFence { presented, current })) => {
                    assert!(presented < current && presented == fence.get(), "{presented} refused by {current}")
                }
                Some(Err(err)) => panic!("round {round}: fence {fence}: {err:?}"),
                None => {}
            }
        }
    }
    remove(s, &[&guard, &data]).await;
}

/// A guard or data key of another type is a typed error naming it, and changes nothing; fences beyond 2^53 (which
/// Lua's doubles cannot tell apart) compare exactly on the server.
pub async fn fenced_write_of_another_type_is_typed_and_fences_compare_exactly(s: &Subject) {
    if skipped(s, "fenced_write_of_another_type_is_typed_and_fences_compare_exactly") {
        return;
    }
    let (guard, data, _) = fresh("types");
    raw(s, "HSET", &[&guard], &["f", "v"]).await;
    let r = resource(s, &guard);
    match r.set(FencingToken::new(1), &data, "x").await {
        Err(LockError::WrongType { key, .. }) => assert_eq!(key, guard),
        other => panic!("a hash as the guard: {other:?}"),
    }
    assert_eq!(raw(s, "GET", &[&data], &[]).await, Reply::Nil, "written past a broken guard");
    remove(s, &[&guard]).await;

    raw(s, "HSET", &[&data], &["f", "v"]).await;
    ok(r.set(FencingToken::new(5), &format!("{data}:s"), "x").await, "set");
    match r.rpush(FencingToken::new(6), &data, &["x"]).await {
        Err(LockError::WrongType { key, .. }) => assert_eq!(key, data),
        other => panic!("RPUSH on a hash: {other:?}"),
    }
    assert_eq!(ok(r.current().await, "current"), Some(FencingToken::new(5)), "a refused write moved the guard");

    let big = 1u64 << 53;
    ok(r.set(FencingToken::new(big + 1), &format!("{data}:s"), "new").await, "2^53 + 1");
    expect_stale(
        r.set(FencingToken::new(big), &format!("{data}:s"), "old").await,
        FencingToken::new(big),
        FencingToken::new(big + 1),
    );
    ok(r.set(FencingToken::new(u64::MAX), &format!("{data}:s"), "max").await, "u64::MAX");
    let below = FencingToken::new(u64::MAX - 1);
    expect_stale(r.set(below, &format!("{data}:s"), "old").await, below, FencingToken::new(u64::MAX));
    remove(s, &[&guard, &data, &format!("{data}:s")]).await;
}

/// A stream as the resource's event log: each holder in turn appends with its fence, a holder whose lease ran out
/// is refused and appends nothing, and the stream holds exactly the acknowledged entries, in fence order, under
/// the IDs their appends returned. A stream key of another type is a typed error naming it.
pub async fn fenced_stream_appends_only_current_holders_in_fence_order(s: &Subject) {
    if skipped(s, "fenced_stream_appends_only_current_holders_in_fence_order") {
        return;
    }
    let lock = s.engine();
    let (guard, data, name) = fresh("stream");
    let r = resource(s, &guard);
    let mut appended: Vec<(String, u64)> = Vec::new();
    let mut previous: Option<FencingToken> = None;
    for round in 0..3 {
        // Each holder's lease runs out (it "paused"); the next one takes the lock and appends.
        let next = LockOptions::new(ms(300)).with_wait(ms(30_000));
        let holder = ok(lock.acquire(&name, &next).await, "a holder");
        let fence = some(holder.fence().await.ok(), "fencing is on by default");
        let text = fence.get().to_string();
        let id = ok(r.xadd(fence, &data, &[("round", &round.to_string()), ("fence", &text)]).await, "append");
        appended.push((id, fence.get()));
        if let Some(old) = previous {
            expect_stale(r.xadd(old, &data, &[("fence", &old.get().to_string())]).await, old, fence);
        }
        previous = Some(fence);
        drop(holder);
    }
    let Reply::Array(entries) = raw(s, "XRANGE", &[&data], &["-", "+"]).await else { panic!("XRANGE") };
    let read: Vec<(String, u64)> = entries
        .iter()
        .map(|entry| {
            let Reply::Array(parts) = entry else { panic!("an entry: {entry:?}") };
            let id = some(parts.first().and_then(Reply::to_text_lossy), "an entry's ID");
            let Some(Reply::Array(fields)) = parts.get(1) else { panic!("an entry's fields: {entry:?}") };
            let fence = some(fields.get(3).and_then(Reply::to_text_lossy).and_then(|t| t.parse().ok()), "a fence");
            (id, fence)
        })
        .collect();
    assert_eq!(read, appended, "the stream is not the acknowledged appends in order");
    assert!(appended.windows(2).all(|w| w[0].1 < w[1].1), "fences out of order: {appended:?}");

    let other = format!("{data}:list");
    raw(s, "RPUSH", &[&other], &["x"]).await;
    let last = some(previous, "a last holder's fence");
    match r.xadd(last, &other, &[("f", "v")]).await {
        Err(LockError::WrongType { key, .. }) => assert_eq!(key, other),
        result => panic!("XADD on a list: {result:?}"),
    }
    remove(s, &[&guard, &data, &other]).await;
}
