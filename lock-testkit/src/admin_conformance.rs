//! The operator's cases: [`Lock::inspect`] and [`Lock::force_release`], and the holder label they read back; and
//! the cases every primitive shares, run over each of them alike (seen and freed by an operator, its next waiter
//! woken at release). One public async function per case, each taking the [`Subject`] under test, which must wrap a [`lock_core::Lock`]
//! ([`Subject::engine`]).
//!
//! [`conformance_tests!`](crate::conformance_tests) runs them (through [`admin_tests!`](crate::admin_tests)), so
//! every backend, deployment and Redlock proves them. Each case is a test: it panics, naming what broke.

use std::time::Instant;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use lock_core::{
    Election, ElectionOptions, ExpectedHolder, Fencing, FencingToken, ForcedRelease, Holder, HolderLabel, HolderRole,
    Inspection, JobLock, JobOptions, JobOutcome, Lock, LockError, LockOptions, ReleaseOutcome, RenewPolicy,
    RetryPolicy, RwLock, Semaphore, OWNER_ID_LEN,
};

use crate::conformance::{ok, some};
use crate::or_panic::ms;
use crate::runtime::sleep;
use crate::Subject;

fn fresh(case: &str) -> String {
    format!("admin:{case}:{:016x}", rand::random::<u64>())
}

fn label(text: &str) -> HolderLabel {
    ok(HolderLabel::new(text), "HolderLabel::new")
}

/// A waiter that only a release notification can wake quickly: its retries are 5 s apart, and the holder's TTL is
/// longer than the case.
fn slow_poller(ttl_ms: u64, wait_ms: u64) -> LockOptions {
    let retry = RetryPolicy::default().with_min_delay(ms(5_000)).with_max_delay(ms(5_000));
    LockOptions::new(ms(ttl_ms)).with_wait(ms(wait_ms)).with_retry(retry)
}

/// A free resource inspects as free; a held one shows its holder's label, an owner id that is a prefix of the
/// guard's token, a TTL no longer than the lock's, and the fencing counter the guard got; a release leaves the
/// counter in place.
pub async fn inspect_shows_holder_ttl_fence_and_label(s: &Subject) {
    let lock = s.engine();
    let r = fresh("inspect");
    let before = ok(lock.inspect(&r).await, "inspect a free lock");
    assert!(!before.is_held(), "a resource nobody locked inspects as held: {before:?}");
    assert_eq!(before.instances.len(), lock.stores().len(), "one view per instance");

    let opts = LockOptions::new(ms(5_000)).with_holder_label(label("worker 7 pid 12"));
    let guard = ok(lock.acquire(&r, &opts).await, "acquire");
    // Drawn on demand (the default) before the inspection, which reads the counter.
    let fence = guard.fence().await.ok().map(|f| f.get());
    let seen = ok(lock.inspect(&r).await, "inspect a held lock");
    let holder = some(seen.holder().cloned(), "inspect a held lock");
    assert_eq!(holder.label.as_deref(), Some("worker 7 pid 12"));
    let owner = some(holder.owner.clone(), "owner id of a lock this library set");
    assert_eq!(owner.len(), OWNER_ID_LEN);
    assert!(guard.token().as_str().starts_with(&owner), "owner id {owner} is not a prefix of {}", guard.token());
    let ttl = some(holder.ttl, "the holder's TTL");
    assert!(ttl <= ms(5_000) && ttl > ms(3_000), "remaining TTL {ttl:?} of a lock taken for 5 s");
    assert!(fence.is_some(), "fencing is on by default");
    assert_eq!(seen.fence(), fence, "the counter an inspection reads is the token the guard got");

    assert_eq!(ok(guard.release().await, "release"), ReleaseOutcome::Released);
    let after = ok(lock.inspect(&r).await, "inspect after release");
    assert!(!after.is_held(), "released, yet inspected as held: {after:?}");
    assert_eq!(after.fence(), fence, "a release keeps the fencing counter");
}

/// A labelled lock keeps the lock's semantics: extend and release compare the whole value, and a holder whose
/// lock expired and was taken (by a holder with the same label) neither releases nor extends the new one.
pub async fn labelled_locks_keep_release_and_extend_semantics(s: &Subject) {
    let lock = s.engine();
    let r = fresh("labelled");
    // A TTL whose calls' bounds (a fraction of it over Redlock) a starved scheduler survives: 150 ms timed out.
    let opts = LockOptions::new(ms(1_000)).with_holder_label(label("same label"));
    let first = ok(lock.acquire(&r, &opts).await, "acquire");
    ok(first.extend(ms(1_000)).await, "extend a labelled lock");
    sleep(ms(1_300)).await;
    let second = ok(lock.acquire(&r, &opts.clone().with_ttl(ms(5_000))).await, "acquire after expiry");
    assert_ne!(first.token(), second.token(), "two acquisitions shared a token");
    assert!(first.extend(ms(5_000)).await.is_err(), "an expired holder extended the next holder's lock");
    assert_eq!(ok(first.release().await, "stale release"), ReleaseOutcome::OwnedByOther);
    let seen = ok(lock.inspect(&r).await, "inspect");
    let owner = seen.holder().and_then(|h| h.owner.clone());
    assert!(owner.is_some_and(|o| second.token().as_str().starts_with(&o)), "the stale release touched the lock");
    assert_eq!(ok(second.release().await, "release"), ReleaseOutcome::Released);
}

/// A try that finds the lock held marks it as awaited, which inspection reports; the release clears the mark.
pub async fn inspect_reports_that_someone_waits(s: &Subject) {
    let lock = s.engine();
    let r = fresh("awaited");
    let guard = ok(lock.acquire(&r, &LockOptions::new(ms(5_000))).await, "acquire");
    assert!(!ok(lock.inspect(&r).await, "inspect").awaited(), "nobody tried, yet the lock is marked as awaited");
    let tried = ok(lock.try_acquire(&r, &LockOptions::new(ms(5_000))).await, "try_acquire");
    assert!(tried.is_none(), "a held lock was granted");
    assert!(ok(lock.inspect(&r).await, "inspect").awaited(), "a failed try did not mark the lock as awaited");
    ok(guard.release().await, "release");
    assert!(!ok(lock.inspect(&r).await, "inspect").awaited(), "the release left the mark behind");
}

/// A forced release frees a lock whoever holds it, says whom it freed, keeps the fencing counter (the next token
/// is higher), wakes a waiting acquirer at once (it retries only every 5 s otherwise), and the old holder finds its
/// lock gone: its release reports it, its extend fails.
pub async fn force_release_frees_wakes_and_keeps_the_fence(s: &Subject) {
    let lock = s.engine();
    let r = fresh("forced");
    let opts = LockOptions::new(ms(30_000)).with_holder_label(label("stuck job"));
    let stuck = ok(lock.acquire(&r, &opts).await, "acquire");
    let waiting = slow_poller(30_000, 10_000);
    let waiter = lock.acquire(&r, &waiting);
    let force = async {
        // Let the waiter try once, find the lock held and wait for a release.
        until_awaited(lock, &r).await;
        let started = Instant::now();
        let forced = ok(lock.force_release(&r).await, "force_release");
        (forced, started)
    };
    let (next, (forced, started)) = futures_util::future::join(waiter, force).await;
    let woke_after = started.elapsed();
    let next = ok(next, "the waiter's acquire");
    assert!(woke_after < ms(2_000), "the waiter got the lock {woke_after:?} after the forced release: not woken");
    assert!(forced.released(), "the forced release found nothing to free: {forced:?}");
    let previous = some(forced.previous().next().cloned(), "the freed holder");
    assert_eq!(previous.label.as_deref(), Some("stuck job"));
    assert!(next.fence().await.ok() > stuck.fence().await.ok(), "the next holder's fencing token is not higher");
    assert!(stuck.extend(ms(30_000)).await.is_err(), "the freed holder extended the next holder's lock");
    assert_eq!(ok(stuck.release().await, "the freed holder's release"), ReleaseOutcome::OwnedByOther);
    assert!(ok(lock.inspect(&r).await, "inspect").is_held(), "the freed holder's release touched the next lock");
    ok(next.release().await, "release");
}

/// A forced release that names the holder the operator was shown (compare-and-delete) leaves a lock that changed
/// hands alone: A was shown, A released, B acquired; forcing with A's owner id deletes nothing, says the holder
/// changed, and B keeps its lock. Forcing with B's id then frees it; expecting nobody leaves a held lock alone.
pub async fn force_release_spares_a_holder_other_than_the_one_shown(s: &Subject) {
    let lock = s.engine();
    let r = fresh("shown");
    let opts = LockOptions::new(ms(30_000));
    let first = ok(lock.acquire(&r, &opts).await, "acquire A");
    let shown = ok(lock.inspect(&r).await, "inspect");
    let shown = some(shown.holder().and_then(|h| h.owner.clone()), "A's owner id");
    ok(first.release().await, "A releases while the operator reads the prompt");
    let second = ok(lock.acquire(&r, &opts).await, "acquire B");
    let forced = ok(lock.force_release_expecting(&r, &ExpectedHolder::Owner(shown)).await, "force_release A");
    assert!(forced.holder_changed() && !forced.released(), "B's lock was not spared: {forced:?}");
    assert_eq!(forced.previous().count(), 0, "a lock was deleted: {forced:?}");
    let kept = some(forced.kept().next().and_then(|h| h.owner.clone()), "the holder left in place");
    assert!(second.token().as_str().starts_with(&kept), "kept {kept}, B is {}", second.token());
    assert!(ok(lock.inspect(&r).await, "inspect").is_held(), "B lost its lock to a forced release of A");
    let untouched = ok(lock.force_release_expecting(&r, &ExpectedHolder::Nobody).await, "force_release nobody");
    assert!(untouched.holder_changed(), "expecting a free lock, a held one was not reported: {untouched:?}");
    ok(second.extend(ms(30_000)).await, "B extends its lock after both forced releases");

    let forced = ok(lock.force_release_expecting(&r, &ExpectedHolder::Owner(kept)).await, "force_release B");
    assert!(forced.released() && forced.is_free(), "the holder shown was not freed: {forced:?}");
    assert!(!ok(lock.inspect(&r).await, "inspect").is_held());
    assert_eq!(ok(second.release().await, "B's release"), ReleaseOutcome::AlreadyExpired);
    let bad = lock.force_release_expecting(&r, &ExpectedHolder::Owner("not hex!".into())).await;
    assert!(matches!(bad, Err(LockError::InvalidArgument(_))), "a malformed owner id: {bad:?}");
}

/// Forcing the release of a free lock reports that nothing was freed and leaves the resource free.
pub async fn force_release_of_a_free_lock_frees_nothing(s: &Subject) {
    let lock = s.engine();
    let r = fresh("free");
    let forced = ok(lock.force_release(&r).await, "force_release");
    assert!(!forced.released(), "freed a lock nobody held: {forced:?}");
    assert_eq!(forced.instances.len(), lock.stores().len());
    let guard = ok(lock.try_acquire(&r, &LockOptions::new(ms(1_000))).await, "try_acquire");
    ok(some(guard, "try_acquire after a forced release of a free lock").release().await, "release");
}

/// On a fair lock, a forced release hands the lock to the queue's head: the head, which only a notification can
/// wake quickly, gets it, and the queue's length shows in the inspection while it waits. (Single instance only:
/// a fair queue is refused over Redlock.) Its heartbeats are 5 s apart, so the next heartbeat cannot be what grants it.
pub async fn force_release_hands_a_fair_lock_to_the_head(s: &Subject) {
    let lock = s.engine();
    if lock.stores().len() > 1 {
        return;
    }
    let r = fresh("fair");
    let fair = |ttl| slow_poller(ttl, 10_000).with_fair_queue(ms(15_000));
    let stuck = ok(lock.acquire(&r, &fair(30_000)).await, "acquire");
    let queued = fair(30_000);
    let head = lock.acquire(&r, &queued);
    let force = async {
        let started = Instant::now();
        loop {
            if ok(lock.inspect(&r).await, "inspect").queued() == 1 {
                break;
            }
            assert!(started.elapsed() < ms(5_000), "the fair waiter never showed in the inspection");
            sleep(ms(2)).await;
        }
        let forced_at = Instant::now();
        ok(lock.force_release(&r).await, "force_release");
        forced_at
    };
    let (head, forced_at) = futures_util::future::join(head, force).await;
    let head = ok(head, "the head's acquire");
    assert!(forced_at.elapsed() < ms(2_000), "the head was not woken by the forced release");
    assert!(head.fence().await.ok() > stuck.fence().await.ok());
    ok(head.release().await, "release");
    drop(stuck);
}

/// Inspecting and forcing need a valid name, as every other call: an empty one is refused before any I/O.
pub async fn admin_calls_refuse_an_empty_name(s: &Subject) {
    let lock: &Lock = s.engine();
    assert!(matches!(lock.inspect("").await, Err(lock_core::LockError::InvalidArgument(_))));
    assert!(matches!(lock.force_release("").await, Err(lock_core::LockError::InvalidArgument(_))));
}

/// Every primitive takes names by one rule, checked before any I/O: 1 to [`MAX_RESOURCE_NAME`](lock_core::MAX_RESOURCE_NAME) bytes without
/// control characters (a newline would forge rows in `lockctl list`). Each bad name is `InvalidArgument` from the
/// lock, the multi-lock, the operator's calls, the job lock, the semaphore, the election and the read-write lock;
/// and no key is left behind.
pub async fn every_primitive_refuses_a_name_outside_the_rule(s: &Subject) {
    use lock_core::{Election, ElectionOptions, JobLock, JobOptions, RwLock, Semaphore, MAX_RESOURCE_NAME};
    let lock: &Lock = s.engine();
    let too_long = "n".repeat(MAX_RESOURCE_NAME + 1);
    let opts = LockOptions::new(ms(5_000));
    let fine = fresh("rule");
    let invalid = |what: &str, name: &str, err: Option<LockError>| match err {
        Some(LockError::InvalidArgument(_)) => {}
        other => panic!("{what} with the name {name:?}: {other:?}, expected InvalidArgument"),
    };
    for name in ["", "line\nbreak", "tab\t", "nul\0", too_long.as_str()] {
        invalid("acquire", name, lock.acquire(name, &opts).await.err());
        invalid("try_acquire", name, lock.try_acquire(name, &opts).await.err());
        invalid("acquire_all", name, lock.acquire_all(&[fine.as_str(), name], &opts).await.err());
        invalid("inspect", name, lock.inspect(name).await.err());
        invalid("force_release", name, lock.force_release(name).await.err());
        let jobs = JobLock::new(lock.clone());
        let job = JobOptions::new(ms(5_000));
        invalid("job run", name, jobs.run(name, &job, |_| async {}).await.err());
        invalid("job run_tick", name, jobs.run_tick(name, 1, &job, |_| async {}).await.err());
        invalid("job last_run", name, jobs.last_run(name).await.err());
        invalid("semaphore", name, Semaphore::new(lock.clone(), name, 2).err());
        invalid("election", name, Election::new(lock.clone(), name, ElectionOptions::default()).err());
        invalid("read-write lock", name, RwLock::new(lock.clone(), name).err());
    }
    let seen = ok(lock.inspect(&fine).await, "inspect");
    assert!(!seen.is_held(), "a refused acquire_all left {fine:?} held: {seen:?}");
}

/// The owner id of the one holder `seen` shows in `role` (the lock key's holder, or the only shared one).
fn shown(seen: &Inspection, role: HolderRole, what: &str) -> String {
    let holder: Option<&Holder> = match role {
        HolderRole::Exclusive => seen.holder(),
        _ => match seen.shared() {
            [one] => Some(one),
            other => panic!("{what}: expected one shared holder, inspect showed {other:?}"),
        },
    };
    let holder = some(holder.cloned(), what);
    assert_eq!(holder.role, role, "{what}: the holder's role");
    assert!(holder.ttl.is_some_and(|ttl| ttl > ms(5_000)), "{what}: the holder's time left {:?}", holder.ttl);
    some(holder.owner, what)
}

/// How many waiters of this process wait on `keys`' channel (on the first store's hub; 0 without one): a waiter
/// that lines up behind another of its process waits for a wake-up without trying, so it leaves no mark.
fn local_waiters(lock: &Lock, keys: &lock_core::LockKeys) -> usize {
    let hub = lock.stores().first().and_then(|store| store.release_hub());
    hub.map_or(0, |hub| hub.waiters(keys.channel()))
}

/// Runs `release` once `waiting` (polled) says the waiter waits, beside `waiter`; checks that the waiter got in
/// within a round trip of it, not at its next poll (5 s or more away): the waiter and what `release` returned.
async fn release_while_waiting<W, T, P, PF, R>(what: &str, waiter: W, waiting: P, release: R) -> (T, R::Output)
where
    W: Future<Output = lock_core::Result<T>>,
    T: std::fmt::Debug,
    P: Fn() -> PF,
    PF: Future<Output = bool>,
    R: Future,
{
    let sent = AtomicBool::new(false);
    let releasing = async {
        let started = Instant::now();
        while !waiting().await {
            assert!(started.elapsed() < ms(5_000), "{what}: the waiter never waited");
            sleep(ms(2)).await;
        }
        let started = Instant::now();
        sent.store(true, Ordering::SeqCst);
        (release.await, started)
    };
    let (waiter, releasing) = (std::pin::pin!(waiter), std::pin::pin!(releasing));
    // The waiter's grant and the release's reply may arrive in one poll: only a grant before the release was sent
    // is early.
    let ((released, started), next) = match futures_util::future::select(waiter, releasing).await {
        futures_util::future::Either::Left((next, releasing)) => {
            assert!(sent.load(Ordering::SeqCst), "{what}: the waiter was done before the release: {next:?}");
            (releasing.await, next)
        }
        futures_util::future::Either::Right((released, waiter)) => (released, waiter.await),
    };
    let next = ok(next, what);
    let woke_after = started.elapsed();
    assert!(woke_after < ms(2_000), "{what}: the waiter got in {woke_after:?} after the release: not woken");
    (next, released)
}

/// [`release_while_waiting`] with a forced release, which must have freed the one holder shown.
async fn force_while_waiting<W, T, P, PF, F>(what: &str, waiter: W, waiting: P, force: F) -> T
where
    W: Future<Output = lock_core::Result<T>>,
    T: std::fmt::Debug,
    P: Fn() -> PF,
    PF: Future<Output = bool>,
    F: Future<Output = lock_core::Result<ForcedRelease>>,
{
    let (next, forced) = release_while_waiting(what, waiter, waiting, force).await;
    let forced = ok(forced, "force_release");
    assert!(forced.released(), "{what}: the forced release freed nothing: {forced:?}");
    let owners: std::collections::HashSet<_> = forced.previous().map(|holder| holder.owner.clone()).collect();
    assert_eq!(owners.len(), 1, "{what}: freed one holder (on each instance), not {forced:?}");
    next
}

/// Every primitive's hold is seen and freed by an operator alike: inspection shows the holder with its role (a
/// permit with its slots), a forced release that names the holder shown frees it, a waiter (which otherwise polls
/// every 5 s or more) gets in within a round trip, and the freed holder finds its hold gone at its next extension.
/// The primitives that need one store (semaphore, read-write lock) are skipped over Redlock.
pub async fn every_primitive_is_inspected_and_force_released_alike(s: &Subject) {
    let lock = s.engine();
    let long = LockOptions::new(ms(30_000));
    let waiting = slow_poller(30_000, 10_000);

    let r = fresh("every-lock");
    let held = ok(lock.acquire(&r, &long).await, "lock");
    let owner = shown(&ok(lock.inspect(&r).await, "inspect"), HolderRole::Exclusive, "lock");
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), &r), "LockKeys");
    let before = local_waiters(lock, &keys);
    let awaited = || async { ok(lock.inspect(&r).await, "inspect").awaited() || local_waiters(lock, &keys) > before };
    let expected = ExpectedHolder::Owner(owner);
    let forced = lock.force_release_expecting(&r, &expected);
    let next = force_while_waiting("lock", lock.acquire(&r, &waiting), awaited, forced).await;
    assert!(held.extend(ms(30_000)).await.is_err(), "lock: the freed holder extended");
    ok(next.release().await, "release");

    let r = fresh("every-election");
    let timing =
        ElectionOptions::default().with_lease(ms(30_000)).with_renew_deadline(ms(20_000)).with_retry_period(ms(5_000));
    let election = ok(Election::new(lock.clone(), &r, timing), "Election::new");
    let leader = ok(election.campaign("a", "1").await, "campaign");
    let seen = ok(lock.inspect(&r).await, "inspect");
    let term = leader.term().get().to_string();
    let record = [("id", "a"), ("value", "1"), ("term", term.as_str())];
    for (field, value) in record {
        assert_eq!(seen.record_field(field), Some(value), "election: the leader's record: {seen:?}");
    }
    assert_eq!(seen.record_field("token"), None, "election: a holder's token is never shown");
    let owner = shown(&seen, HolderRole::Exclusive, "election");
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), &r), "LockKeys");
    let before = local_waiters(lock, &keys);
    let awaited = || async { ok(lock.inspect(&r).await, "inspect").awaited() || local_waiters(lock, &keys) > before };
    let expected = ExpectedHolder::Owner(owner);
    let forced = lock.force_release_expecting(&r, &expected);
    let next = force_while_waiting("election", election.campaign("b", "2"), awaited, forced).await;
    assert!(next.term() > leader.term(), "election: the next term is not higher");
    let resigned = ok(leader.resign().await, "the freed leader's resignation");
    assert_ne!(resigned, ReleaseOutcome::Released, "election: the freed leader resigned the next one's term");
    ok(next.resign().await, "resign");

    let r = fresh("every-job");
    let jobs = JobLock::new(lock.clone());
    let options = JobOptions::new(ms(30_000))
        .with_holder("nightly on host 1")
        .with_keep_alive(RenewPolicy::default().with_interval(ms(100)));
    let started = AtomicBool::new(false);
    let running = jobs.run(&r, &options, |_| {
        started.store(true, Ordering::SeqCst);
        // Works until the run is cancelled: by its lost signal, once the keep-alive finds the lock gone.
        std::future::pending::<()>()
    });
    let operate = async {
        let began = Instant::now();
        while !started.load(Ordering::SeqCst) {
            assert!(began.elapsed() < ms(5_000), "job: the run never started");
            sleep(ms(2)).await;
        }
        let seen = ok(lock.inspect(&r).await, "inspect");
        assert_eq!(seen.holder().and_then(|h| h.label.as_deref()), Some("nightly on host 1"), "job: {seen:?}");
        let running = [("holder", "nightly on host 1"), ("outcome", "running")];
        assert!(running.iter().all(|(f, v)| seen.record_field(f) == Some(v)), "job: the run's record: {seen:?}");
        let owner = shown(&seen, HolderRole::Exclusive, "job");
        let forced = ok(lock.force_release_expecting(&r, &ExpectedHolder::Owner(owner)).await, "force_release");
        assert!(forced.released(), "job: {forced:?}");
    };
    let (ran, ()) = futures_util::future::join(running, operate).await;
    assert!(matches!(ran, Err(LockError::Lost { .. })), "job: the freed run did not learn it lost its lock: {ran:?}");
    let again = ok(jobs.run(&r, &JobOptions::new(ms(5_000)), |_| async {}).await, "the next run");
    assert!(matches!(again, lock_core::JobOutcome::Ran { .. }), "job: the next run after a forced release: {again:?}");
    let seen = ok(lock.inspect(&r).await, "inspect");
    assert_eq!(seen.record_field("outcome"), Some("finished"), "job: the last run's record: {seen:?}");

    if lock.stores().len() > 1 {
        return;
    }

    let r = fresh("every-semaphore");
    let pool = ok(Semaphore::new(lock.clone(), &r, 1), "Semaphore::new");
    let permit = ok(pool.acquire(1, &long).await, "permit");
    let seen = ok(pool.inspect().await, "inspect");
    assert_eq!(seen.shared().first().map(|h| h.slots.clone()), Some(permit.slots().to_vec()), "semaphore: slots");
    let expected = ExpectedHolder::Owner(shown(&seen, HolderRole::Permit, "semaphore"));
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), &r), "LockKeys");
    let before = local_waiters(lock, &keys);
    let awaited = || async { ok(pool.inspect().await, "inspect").awaited() || local_waiters(lock, &keys) > before };
    let forced = pool.force_release(&expected);
    let next = force_while_waiting("semaphore", pool.acquire(1, &waiting), awaited, forced).await;
    assert!(permit.extend(ms(30_000)).await.is_err(), "semaphore: the freed permit extended");
    ok(next.release().await, "release");

    // The writers' heartbeats are tries: 10 s apart here, so only a wake-up lets the writer in sooner.
    let rw = ok(ok(RwLock::new(lock.clone(), &r), "RwLock::new").with_waiter_ttl(ms(30_000)), "with_waiter_ttl");
    let reader = ok(rw.read(&long).await, "read");
    let expected = ExpectedHolder::Owner(shown(&ok(rw.inspect().await, "inspect"), HolderRole::Reader, "reader"));
    let keys = rw.keys().clone();
    let before = local_waiters(lock, &keys);
    let queued = || async { ok(rw.inspect().await, "inspect").queued() > 0 || local_waiters(lock, &keys) > before };
    let forced = rw.force_release(&expected);
    let writer = force_while_waiting("reader", rw.write(&waiting), queued, forced).await;
    assert!(reader.extend(ms(30_000)).await.is_err(), "reader: the freed reader extended");
    let expected = ExpectedHolder::Owner(shown(&ok(rw.inspect().await, "inspect"), HolderRole::Exclusive, "writer"));
    let keys = rw.keys().clone();
    let before = local_waiters(lock, &keys);
    let awaited = || async { ok(rw.inspect().await, "inspect").awaited() || local_waiters(lock, &keys) > before };
    let forced = rw.force_release(&expected);
    let reader = force_while_waiting("writer", rw.read(&waiting), awaited, forced).await;
    assert!(writer.extend(ms(30_000)).await.is_err(), "writer: the freed writer extended");
    ok(reader.release().await, "release");
}

/// Every primitive's release wakes its next waiter at once, the same way: a waiter (which otherwise polls every 5 s
/// or more) gets in within a round trip of the release of a lock, a fair lock, a multi-lock, a leadership, a
/// permit, a reader (the writer waiting) and a writer (a reader waiting). The primitives that need one store
/// (fair lock, semaphore, read-write lock) are skipped over Redlock.
pub async fn every_primitive_wakes_its_next_waiter_at_release(s: &Subject) {
    wakes_the_next_waiter(s.engine(), s.engine()).await;
}

/// As [`every_primitive_wakes_its_next_waiter_at_release`], with the waiter in another process (the subject's
/// [peer](Subject::with_peer): its own connections and release subscription): the release must reach that
/// process's waiter through the server, within a round trip. Skipped, saying why, for a subject without a peer.
pub async fn every_primitive_wakes_a_waiter_of_another_process_at_release(s: &Subject) {
    let Some(peer) = s.peer() else {
        crate::report_skip("every_primitive_wakes_a_waiter_of_another_process_at_release", "the subject has no peer");
        return;
    };
    wakes_the_next_waiter(s.engine(), peer).await;
}

/// Each primitive held through `lock`, released while a waiter waits through `waiting_lock` (the same lock, or a
/// second process's): the waiter gets in within a round trip. The read-write lock's second step runs the other way.
async fn wakes_the_next_waiter(lock: &Lock, waiting_lock: &Lock) {
    let long = LockOptions::new(ms(30_000));
    let waiting = slow_poller(30_000, 10_000);
    let released = |outcome: lock_core::Result<ReleaseOutcome>, what: &str| {
        assert_eq!(ok(outcome, what), ReleaseOutcome::Released, "{what}: the release");
    };
    // A waiter waits once a try marked the name awaited, or once its own process registered it.

    let r = fresh("wake-lock");
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), &r), "LockKeys");
    let held = ok(lock.acquire(&r, &long).await, "lock");
    let before = local_waiters(waiting_lock, &keys);
    let awaited =
        || async { ok(lock.inspect(&r).await, "inspect").awaited() || local_waiters(waiting_lock, &keys) > before };
    let (next, outcome) =
        release_while_waiting("lock", waiting_lock.acquire(&r, &waiting), awaited, held.release()).await;
    released(outcome, "lock");
    ok(next.release().await, "release");

    let names = [fresh("wake-multi-a"), fresh("wake-multi-b")];
    let names = [names[0].as_str(), names[1].as_str()];
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), names[1]), "LockKeys");
    let held = ok(lock.acquire(names[1], &long).await, "one of the multi-lock's resources");
    let before = local_waiters(waiting_lock, &keys);
    let awaited = || async {
        ok(lock.inspect(names[1]).await, "inspect").awaited() || local_waiters(waiting_lock, &keys) > before
    };
    // On Redis Cluster the two names are in two slots: taken one slot after the other.
    let ordered = waiting.clone().with_cross_slot(lock_core::CrossSlot::Ordered);
    let waiter = waiting_lock.acquire_all(&names, &ordered);
    let (next, outcome) = release_while_waiting("multi-lock", waiter, awaited, held.release()).await;
    released(outcome, "multi-lock");
    assert!(ok(next.release().await, "release").all_released());

    let r = fresh("wake-election");
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), &r), "LockKeys");
    let timing =
        ElectionOptions::default().with_lease(ms(30_000)).with_renew_deadline(ms(20_000)).with_retry_period(ms(5_000));
    let election = ok(Election::new(lock.clone(), &r, timing.clone()), "Election::new");
    let candidates = ok(Election::new(waiting_lock.clone(), &r, timing), "Election::new");
    let leader = ok(election.campaign("a", "1").await, "campaign");
    let before = local_waiters(waiting_lock, &keys);
    let awaited =
        || async { ok(lock.inspect(&r).await, "inspect").awaited() || local_waiters(waiting_lock, &keys) > before };
    let (next, outcome) =
        release_while_waiting("election", candidates.campaign("b", "2"), awaited, leader.resign()).await;
    released(outcome, "election");
    ok(next.resign().await, "resign");

    if lock.stores().len() > 1 {
        return;
    }

    let r = fresh("wake-fair");
    // Heartbeats are tries: 10 s apart here, so only the release's hand-over lets the waiter in sooner.
    let fair = |opts: &LockOptions| opts.clone().with_fair_queue(ms(30_000));
    let held = ok(lock.acquire(&r, &fair(&long)).await, "fair lock");
    let queued = || async { ok(lock.inspect(&r).await, "inspect").queued() > 0 };
    let (next, outcome) =
        release_while_waiting("fair lock", waiting_lock.acquire(&r, &fair(&waiting)), queued, held.release()).await;
    released(outcome, "fair lock");
    ok(next.release().await, "release");

    let r = fresh("wake-semaphore");
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), &r), "LockKeys");
    let pool = ok(Semaphore::new(lock.clone(), &r, 1), "Semaphore::new");
    let waiting_pool = ok(Semaphore::new(waiting_lock.clone(), &r, 1), "Semaphore::new");
    let permit = ok(pool.acquire(1, &long).await, "permit");
    let before = local_waiters(waiting_lock, &keys);
    let awaited =
        || async { ok(pool.inspect().await, "inspect").awaited() || local_waiters(waiting_lock, &keys) > before };
    let (next, outcome) =
        release_while_waiting("semaphore", waiting_pool.acquire(1, &waiting), awaited, permit.release()).await;
    released(outcome, "semaphore");
    ok(next.release().await, "release");

    let rw_of = |lock: &Lock| ok(ok(RwLock::new(lock.clone(), &r), "RwLock::new").with_waiter_ttl(ms(30_000)), "ttl");
    let (rw, waiting_rw) = (rw_of(lock), rw_of(waiting_lock));
    let keys = rw.keys().clone();
    let reader = ok(rw.read(&long).await, "read");
    let before = local_waiters(waiting_lock, &keys);
    let queued =
        || async { ok(rw.inspect().await, "inspect").queued() > 0 || local_waiters(waiting_lock, &keys) > before };
    let (writer, outcome) = release_while_waiting("reader", waiting_rw.write(&waiting), queued, reader.release()).await;
    released(outcome, "reader");
    // The writer's process releases now, and the first one waits to read.
    let before = local_waiters(lock, &keys);
    let awaited = || async { ok(rw.inspect().await, "inspect").awaited() || local_waiters(lock, &keys) > before };
    let (reader, outcome) = release_while_waiting("writer", rw.read(&waiting), awaited, writer.release()).await;
    released(outcome, "writer");
    ok(reader.release().await, "release");
}

/// Fencing means one thing in every primitive that has it, whichever way the token is drawn. Each primitive takes
/// its name once per mode, in turn: with [`Fencing::OnAcquire`] and [`Fencing::OnDemand`] every hold gets a token
/// (on demand: the lock's [`Guard::fence`](lock_core::Guard::fence) draws it after the grant; every other primitive
/// draws it with the grant), strictly above the tokens of every earlier hold of that name, from one counter per
/// name (a multi-lock's resources and a lock on one of them share it; a semaphore's is per slot); with
/// [`Fencing::Off`] a hold has none. An election's term is its token whatever the lock's mode, and a job's run
/// has one exactly when [`JobOptions::with_fencing`] asks.
pub async fn every_primitive_fences_alike(s: &Subject) {
    let lock = s.engine();
    let modes = [Fencing::OnAcquire, Fencing::OnDemand, Fencing::Off, Fencing::OnDemand, Fencing::OnAcquire];
    let opts = |mode: Fencing| LockOptions::new(ms(30_000)).with_fencing_mode(mode);
    // What one hold's token says, against the last token the name gave.
    let check = |what: &str, mode: Fencing, token: Option<FencingToken>, last: &mut u64| match (mode, token) {
        (Fencing::Off, None) => {}
        (Fencing::Off, Some(token)) => panic!("{what}: a token ({token}) with fencing off"),
        (_, None) => panic!("{what}: no token with fencing {mode:?}"),
        (_, Some(token)) => {
            assert!(token.get() > *last, "{what}: token {token} with fencing {mode:?}, not above {last}");
            *last = token.get();
        }
    };

    for fair in [false, true] {
        if fair && lock.stores().len() > 1 {
            continue;
        }
        let r = fresh("fence-lock");
        let mut last = 0;
        for mode in modes {
            let o = if fair { opts(mode).with_fair_queue(ms(30_000)) } else { opts(mode) };
            let what = if fair { "fair lock" } else { "lock" };
            let guard = ok(lock.acquire(&r, &o).await, what);
            let token = match mode {
                Fencing::Off => {
                    let drawn = guard.fence().await;
                    assert!(matches!(drawn, Err(LockError::InvalidArgument { .. })), "{what}: fence() off: {drawn:?}");
                    guard.fence().await.ok()
                }
                _ => {
                    let drawn = ok(guard.fence().await, "fence");
                    assert_eq!(guard.fence().await.ok(), Some(drawn), "{what}: the guard keeps the token it drew");
                    Some(drawn)
                }
            };
            check(what, mode, token, &mut last);
            ok(guard.release().await, "release");
        }
    }

    // A multi-lock's resources, then a lock on one of them: one counter per name.
    let names = [fresh("fence-multi-a"), fresh("fence-multi-b")];
    let names = [names[0].as_str(), names[1].as_str()];
    let mut last = [0, 0];
    for mode in modes {
        let o = opts(mode).with_cross_slot(lock_core::CrossSlot::Ordered);
        let guard = ok(lock.acquire_all(&names, &o).await, "acquire_all");
        for (name, last) in names.iter().zip(&mut last) {
            check("multi-lock", mode, guard.fence_of(name), last);
        }
        assert!(ok(guard.release().await, "release").all_released());
    }
    let guard = ok(lock.acquire(names[0], &opts(Fencing::OnAcquire)).await, "lock on a multi-lock's resource");
    check("lock after the multi-lock", Fencing::OnAcquire, guard.fence().await.ok(), &mut last[0]);
    ok(guard.release().await, "release");

    // An election's terms, then a lock on its name.
    let r = fresh("fence-election");
    let timing =
        ElectionOptions::default().with_lease(ms(30_000)).with_renew_deadline(ms(20_000)).with_retry_period(ms(5_000));
    let election = ok(Election::new(lock.clone(), &r, timing), "Election::new");
    let mut last = 0;
    for _ in modes {
        let leader = ok(election.campaign("a", "1").await, "campaign");
        check("election", Fencing::OnAcquire, Some(leader.term()), &mut last);
        ok(leader.resign().await, "resign");
    }
    let guard = ok(lock.acquire(&r, &opts(Fencing::OnAcquire)).await, "lock on an election's name");
    check("lock after the election", Fencing::OnAcquire, guard.fence().await.ok(), &mut last);
    ok(guard.release().await, "release");

    // A job's runs: fencing on or off, by its options.
    let jobs = JobLock::new(lock.clone());
    let r = fresh("fence-job");
    let mut last = 0;
    for mode in modes {
        let on = mode != Fencing::Off;
        let job_options = JobOptions::new(ms(30_000)).with_fencing(on);
        let run = jobs.run(&r, &job_options, |ctx| async move { ctx.fencing_token });
        match ok(run.await, "job run") {
            JobOutcome::Ran { value, fencing_token, .. } => {
                assert_eq!(value, fencing_token, "the work and the outcome name one token");
                check("job", if on { Fencing::OnAcquire } else { Fencing::Off }, fencing_token, &mut last);
            }
            other => panic!("job run: {other:?}"),
        }
    }

    if lock.stores().len() > 1 {
        return;
    }

    // A semaphore of one slot, and a read-write lock's writers.
    let r = fresh("fence-semaphore");
    let pool = ok(Semaphore::new(lock.clone(), &r, 1), "Semaphore::new");
    let mut last = 0;
    for mode in modes {
        let permit = ok(pool.acquire(1, &opts(mode)).await, "permit");
        check("semaphore", mode, permit.fence().await.ok(), &mut last);
        ok(permit.release().await, "release");
    }
    let rw = ok(RwLock::new(lock.clone(), &r), "RwLock::new");
    let mut last = 0;
    for mode in modes {
        let writer = ok(rw.write(&opts(mode)).await, "write");
        check("writer", mode, writer.fence().await.ok(), &mut last);
        ok(writer.release().await, "release");
    }
}

/// One waiter of [`serves_every_waiter`]: takes the primitive (waiting), holds it a moment, gives it back.
type Waiter<'a> = std::pin::Pin<Box<dyn Future<Output = ()> + 'a>>;

/// Every primitive bounds the wait of its worst-off waiter: three waiters of one process line up behind a holder,
/// one after another, and once the holder releases each gets in within a round trip of the release before it, the
/// last within 2 s of the first release (each holds 10 ms; the waiters otherwise poll every 5 s), so no wake-up is
/// lost on the way down the line. The order they get in is not checked: on an idle machine the lock, the election,
/// the fair lock and the read-write lock's writers serve them in the order they came, but a waiter that registered
/// first and is still subscribing, or whose try raced a release, can be passed by one behind it; and the
/// multi-lock and the semaphore wake several waiters at once (one per resource, each that fits).
pub async fn every_primitive_bounds_the_wait_of_its_last_waiter(s: &Subject) {
    let lock = s.engine();
    let long = LockOptions::new(ms(30_000));
    let waiting = slow_poller(30_000, 10_000);
    let got_in = std::sync::Mutex::new(Vec::new());
    // Each waiter says when it got in, holds a moment, and releases through `release`.
    let served = |i: usize| {
        got_in.lock().unwrap_or_else(|p| p.into_inner()).push(i);
        sleep(ms(10))
    };

    let r = fresh("order-lock");
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), &r), "LockKeys");
    let held = ok(lock.acquire(&r, &long).await, "lock");
    let waiter = |i: usize| -> Waiter<'_> {
        let (r, waiting, served) = (&r, &waiting, &served);
        Box::pin(async move {
            let guard = ok(lock.acquire(r, waiting).await, "lock waiter");
            served(i).await;
            ok(guard.release().await, "release");
        })
    };
    let lined_up = |n: usize| {
        let keys = &keys;
        async move { local_waiters(lock, keys) >= n }
    };
    serves_every_waiter("lock", &got_in, waiter, lined_up, async { ok(held.release().await, "release") }).await;

    let names = [fresh("order-multi-a"), fresh("order-multi-b")];
    let names = [names[0].as_str(), names[1].as_str()];
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), names[0]), "LockKeys");
    let ordered = waiting.clone().with_cross_slot(lock_core::CrossSlot::Ordered);
    let held = ok(lock.acquire_all(&names, &long.clone().with_cross_slot(lock_core::CrossSlot::Ordered)).await, "all");
    let waiter = |i: usize| -> Waiter<'_> {
        let (names, ordered, served) = (&names, &ordered, &served);
        Box::pin(async move {
            let guard = ok(lock.acquire_all(names, ordered).await, "multi-lock waiter");
            served(i).await;
            assert!(ok(guard.release().await, "release").all_released());
        })
    };
    let lined_up = |n: usize| {
        let keys = &keys;
        async move { local_waiters(lock, keys) >= n }
    };
    let release = async { assert!(ok(held.release().await, "release").all_released()) };
    serves_every_waiter("multi-lock", &got_in, waiter, lined_up, release).await;

    let r = fresh("order-election");
    let keys = ok(lock_core::LockKeys::new(lock.key_prefix(), &r), "LockKeys");
    let timing =
        ElectionOptions::default().with_lease(ms(30_000)).with_renew_deadline(ms(20_000)).with_retry_period(ms(5_000));
    let election = ok(Election::new(lock.clone(), &r, timing), "Election::new");
    let leader = ok(election.campaign("leader", "0").await, "campaign");
    let waiter = |i: usize| -> Waiter<'_> {
        let (election, served) = (&election, &served);
        Box::pin(async move {
            let next = ok(election.campaign(&format!("candidate {i}"), "1").await, "campaign");
            served(i).await;
            ok(next.resign().await, "resign");
        })
    };
    let lined_up = |n: usize| {
        let keys = &keys;
        async move { local_waiters(lock, keys) >= n }
    };
    let release = async { ok(leader.resign().await, "resign") };
    serves_every_waiter("election", &got_in, waiter, lined_up, release).await;

    if lock.stores().len() > 1 {
        return;
    }

    let r = fresh("order-fair");
    let fair = |opts: &LockOptions| opts.clone().with_fair_queue(ms(30_000));
    let (fair_long, fair_waiting) = (fair(&long), fair(&waiting));
    let held = ok(lock.acquire(&r, &fair_long).await, "fair lock");
    let waiter = |i: usize| -> Waiter<'_> {
        let (r, fair_waiting, served) = (&r, &fair_waiting, &served);
        Box::pin(async move {
            let guard = ok(lock.acquire(r, fair_waiting).await, "fair lock waiter");
            served(i).await;
            ok(guard.release().await, "release");
        })
    };
    let lined_up = |n: usize| {
        let r = &r;
        async move { ok(lock.inspect(r).await, "inspect").queued() >= n as u64 }
    };
    serves_every_waiter("fair lock", &got_in, waiter, lined_up, async { ok(held.release().await, "release") }).await;

    let r = fresh("order-semaphore");
    let pool = ok(Semaphore::new(lock.clone(), &r, 1), "Semaphore::new");
    let keys = pool.keys().clone();
    let permit = ok(pool.acquire(1, &long).await, "permit");
    let waiter = |i: usize| -> Waiter<'_> {
        let (pool, waiting, served) = (&pool, &waiting, &served);
        Box::pin(async move {
            let next = ok(pool.acquire(1, waiting).await, "semaphore waiter");
            served(i).await;
            ok(next.release().await, "release");
        })
    };
    let lined_up = |n: usize| {
        let keys = &keys;
        async move { local_waiters(lock, keys) >= n }
    };
    serves_every_waiter("semaphore", &got_in, waiter, lined_up, async { ok(permit.release().await, "release") }).await;

    let rw = ok(ok(RwLock::new(lock.clone(), &r), "RwLock::new").with_waiter_ttl(ms(30_000)), "with_waiter_ttl");
    let reader = ok(rw.read(&long).await, "read");
    let waiter = |i: usize| -> Waiter<'_> {
        let (rw, waiting, served) = (&rw, &waiting, &served);
        Box::pin(async move {
            let writer = ok(rw.write(waiting).await, "writer");
            served(i).await;
            ok(writer.release().await, "release");
        })
    };
    let lined_up = |n: usize| {
        let rw = &rw;
        async move { ok(rw.inspect().await, "inspect").queued() >= n as u64 }
    };
    let release = async { ok(reader.release().await, "release") };
    serves_every_waiter("writers behind a reader", &got_in, waiter, lined_up, release).await;
}

/// Lines up three waiters (`waiter(i)`), each once `lined_up(i + 1)` says the one before it waits, then runs
/// `release`, and checks that each got in once (as they record in `got_in`), the last within 2 s.
async fn serves_every_waiter<'a, W, L, LF, R>(
    what: &str,
    got_in: &std::sync::Mutex<Vec<usize>>,
    waiter: W,
    lined_up: L,
    release: R,
) where
    W: Fn(usize) -> Waiter<'a>,
    L: Fn(usize) -> LF,
    LF: Future<Output = bool>,
    R: Future,
{
    use futures_util::stream::{FuturesUnordered, StreamExt};
    const WAITERS: usize = 3;
    got_in.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let mut waiters = FuturesUnordered::new();
    for i in 0..WAITERS {
        waiters.push(waiter(i));
        let started = Instant::now();
        loop {
            // The waiters run meanwhile: they must be polled to line up.
            let look = std::pin::pin!(async {
                sleep(ms(2)).await;
                lined_up(i + 1).await
            });
            match futures_util::future::select(look, waiters.next()).await {
                futures_util::future::Either::Left((true, _)) => break,
                futures_util::future::Either::Left((false, _)) => {}
                futures_util::future::Either::Right(_) => panic!("{what}: a waiter got in while the holder held"),
            }
            assert!(started.elapsed() < ms(5_000), "{what}: waiter {i} never lined up");
        }
    }
    let released = Instant::now();
    futures_util::future::join(waiters.collect::<Vec<()>>(), release).await;
    let took = released.elapsed();
    let mut served = got_in.lock().unwrap_or_else(|p| p.into_inner()).clone();
    served.sort_unstable();
    assert_eq!(served, (0..WAITERS).collect::<Vec<_>>(), "{what}: not every waiter got in once");
    assert!(took < ms(2_000), "{what}: the last waiter got in {took:?} after the release: a wake-up was lost");
}

/// Waits (bounded) until a try has marked `resource` as awaited.
async fn until_awaited(lock: &Lock, resource: &str) {
    let started = Instant::now();
    let deadline = ms(5_000);
    loop {
        let marked = ok(lock.inspect(resource).await, "inspect").awaited();
        if marked {
            return;
        }
        assert!(started.elapsed() < deadline, "no try marked {resource} as awaited");
        sleep(ms(2)).await;
    }
}
