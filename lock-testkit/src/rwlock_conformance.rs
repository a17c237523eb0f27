//! The read-write lock's conformance cases ([`RwLock`]): one public async function per case, each taking the
//! [`Subject`] under test, which must wrap a [`lock_core::Lock`] ([`Subject::engine`]).
//!
//! [`conformance_tests!`](crate::conformance_tests) runs them (through [`rwlock_tests!`](crate::rwlock_tests)). They
//! follow the test list of the read-write lock study (`shared/research/primitives.md`, section 2.5) within one
//! process; killed and paused holders and a killed waiting writer are in the backends' fault suites.
//! Over Redlock a read-write lock is refused, and these cases check only that.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use futures_util::future::{join, join_all, select, Either};
use lock_core::backend::Call;
use lock_core::{LockError, LockOptions, ReleaseOutcome, RenewPolicy, RetryPolicy, RwLock, RwState};

use crate::conformance::{ok, some};
use crate::or_panic::ms;
use crate::runtime::sleep;
use crate::scripted::CancelAfter;
use crate::Subject;

fn fresh(case: &str) -> String {
    format!("rw:{case}:{:016x}", rand::random::<u64>())
}

/// The read-write lock under test, or `None` over Redlock (where it is refused: see
/// [`rw_is_refused_where_it_cannot_hold`]).
fn rwlock(s: &Subject, case: &str) -> Option<RwLock> {
    (s.engine().stores().len() == 1).then(|| ok(RwLock::new(s.engine().clone(), &fresh(case)), "RwLock::new"))
}

fn opts(ttl_ms: u64, wait_ms: u64) -> LockOptions {
    LockOptions::new(ms(ttl_ms)).with_wait(ms(wait_ms))
}

/// Options whose retries are `backoff_ms` apart: a waiter that gets in sooner was woken.
fn slow(ttl_ms: u64, wait_ms: u64, backoff_ms: u64) -> LockOptions {
    opts(ttl_ms, wait_ms)
        .with_retry(RetryPolicy::default().with_min_delay(ms(backoff_ms)).with_max_delay(ms(backoff_ms)))
}

fn is_free(st: &RwState) -> bool {
    !st.writer && st.readers == 0 && st.waiting_writers == 0
}

async fn state(rw: &RwLock) -> RwState {
    ok(rw.state().await, "state")
}

/// Polls the state until `done` holds (5 s at most).
async fn until(rw: &RwLock, what: &str, done: impl Fn(&RwState) -> bool) {
    let started = Instant::now();
    loop {
        let now = state(rw).await;
        if done(&now) {
            return;
        }
        assert!(started.elapsed() < ms(5_000), "{what}: still {now:?} after 5 s");
        sleep(ms(2)).await;
    }
}

/// How many of the lock's keys exist (writer, readers, queue, heartbeats, release mark), asked with `PTTL` (-2 for a
/// missing key), which the minimal ACL user may run.
async fn keys_left(s: &Subject, rw: &RwLock) -> usize {
    let writer = rw.keys().lock();
    let names = [
        writer.to_owned(),
        format!("{writer}:readers"),
        format!("{writer}:queue"),
        format!("{writer}:heartbeats"),
        rw.keys().awaited().to_owned(),
    ];
    let mut left = 0;
    for name in &names {
        let keys = [name.as_str()];
        let ran = ok(s.engine().stores()[0].call(Call::plain("inspect", "PTTL", &keys, &[])).await, "PTTL");
        if some(ran.reply.as_int(), "PTTL answers an integer") != -2 {
            left += 1;
        }
    }
    left
}

/// Who holds, counted by the holders themselves: a writer never with readers, never two writers.
#[derive(Default)]
struct Holders {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    writes: AtomicUsize,
}

impl Holders {
    fn read(&self) -> Held<'_> {
        let readers = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(readers, Ordering::SeqCst);
        assert_eq!(self.writers.load(Ordering::SeqCst), 0, "a reader got in while a writer held");
        Held { holders: self, writer: false }
    }

    fn write(&self) -> Held<'_> {
        assert_eq!(self.writers.fetch_add(1, Ordering::SeqCst), 0, "two writers at once");
        assert_eq!(self.readers.load(Ordering::SeqCst), 0, "a writer got in while readers held");
        self.writes.fetch_add(1, Ordering::SeqCst);
        Held { holders: self, writer: true }
    }
}

/// Counted out on drop, before the release is sent (once it completed on the server the next holder may be told
/// before this future is polled again).
struct Held<'a> {
    holders: &'a Holders,
    writer: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let count = if self.writer { &self.holders.writers } else { &self.holders.readers };
        count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Test 1: 8 tasks loop random reads and writes (3 reads per write): never a writer with readers, never two
/// writers; several readers hold at once at some point, every write happens, and nothing is left afterwards.
pub async fn rw_never_mixes_readers_and_a_writer(s: &Subject) {
    let Some(rw) = rwlock(s, "exclusion") else { return };
    let holders = Holders::default();
    let tasks = (0..8u32).map(|t| {
        let (rw, holders) = (&rw, &holders);
        async move {
            for i in 0..8u32 {
                if (t + i) % 4 == 0 {
                    let w = ok(rw.write(&opts(5_000, 20_000)).await, "write");
                    let held = holders.write();
                    sleep(ms(3)).await;
                    drop(held);
                    assert_eq!(ok(w.release().await, "write release"), ReleaseOutcome::Released);
                } else {
                    let r = ok(rw.read(&opts(5_000, 20_000)).await, "read");
                    let held = holders.read();
                    sleep(ms(8)).await;
                    drop(held);
                    assert_eq!(ok(r.release().await, "read release"), ReleaseOutcome::Released);
                }
            }
        }
    });
    join_all(tasks).await;
    assert_eq!(holders.writes.load(Ordering::SeqCst), 16, "every write ran");
    assert!(holders.most_readers.load(Ordering::SeqCst) >= 2, "readers never held together");
    let st = state(&rw).await;
    assert!(is_free(&st), "held after every release: {st:?}");
    assert_eq!(keys_left(s, &rw).await, 0, "keys left after every release");
}

/// Test 2: a writer that waits keeps new readers out, however many keep arriving: a reader arrives every 10 ms and
/// holds 50 ms; the writer is granted once the readers that held when it queued are gone, and no reader that tried
/// after it queued got in before it.
pub async fn rw_waiting_writer_is_not_starved_by_readers(s: &Subject) {
    let Some(rw) = rwlock(s, "starve") else { return };
    let queued_at: Mutex<Option<Instant>> = Mutex::new(None);
    let granted = AtomicBool::new(false);
    // Readers that tried after the writer queued and got in before it was granted.
    let overtook = AtomicUsize::new(0);
    // One reader every 10 ms for 600 ms, each holding 50 ms: without writer preference they overlap throughout.
    let readers = join_all((0..60u64).map(|i| {
        let (rw, queued_at, granted, overtook) = (&rw, &queued_at, &granted, &overtook);
        async move {
            sleep(ms(i * 10)).await;
            let asked = Instant::now();
            let r = ok(rw.read(&opts(5_000, 20_000)).await, "read");
            let queued = *queued_at.lock().unwrap_or_else(|p| p.into_inner());
            if queued.is_some_and(|q| asked > q) && !granted.load(Ordering::SeqCst) {
                overtook.fetch_add(1, Ordering::SeqCst);
            }
            sleep(ms(50)).await;
            ok(r.release().await, "read release");
        }
    }));
    let writer = async {
        sleep(ms(120)).await;
        until(&rw, "readers hold", |st| st.readers >= 2).await;
        let wait = opts(5_000, 20_000);
        let mut write = Box::pin(rw.write(&wait));
        let w = match select(write.as_mut(), Box::pin(until(&rw, "the writer queued", |st| st.waiting_writers == 1)))
            .await
        {
            Either::Left((w, _)) => w,
            Either::Right(((), _)) => {
                *queued_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                write.await
            }
        };
        let w = ok(w, "write");
        granted.store(true, Ordering::SeqCst);
        assert_eq!(state(&rw).await.readers, 0, "the writer was granted while readers held");
        sleep(ms(20)).await;
        ok(w.release().await, "write release");
    };
    join(Box::pin(readers), Box::pin(writer)).await;
    assert_eq!(overtook.load(Ordering::SeqCst), 0, "readers that came after a waiting writer got in before it");
    until(&rw, "everyone gone", is_free).await;
}

/// Test 4 in one process: a reader that died (its guard leaked: never released, never renewed) costs its own TTL
/// while another reader keeps renewing: the dead one is gone from the count within its TTL, and a writer gets in
/// as soon as the live reader leaves.
pub async fn rw_dead_reader_costs_its_own_ttl_while_others_renew(s: &Subject) {
    let Some(rw) = rwlock(s, "dead-reader") else { return };
    let dead = ok(rw.read(&opts(300, 0)).await, "the reader that dies");
    std::mem::forget(dead);
    let live = ok(rw.read(&opts(300, 0).with_auto_renew(RenewPolicy::default())).await, "the renewing reader");
    assert_eq!(state(&rw).await.readers, 2);
    let started = Instant::now();
    until(&rw, "the dead reader's expiry", |st| st.readers == 1).await;
    let gone = started.elapsed();
    assert!(gone < ms(1_500), "a renewing reader kept a dead one for {gone:?} (its TTL is 300 ms)");
    assert!(!live.is_lost(), "the renewing reader lost its hold");
    let wait = opts(5_000, 10_000);
    let writer = rw.write(&wait);
    let release = async {
        until(&rw, "the writer queued", |st| st.waiting_writers == 1).await;
        ok(live.release().await, "live release")
    };
    let (w, released) = join(writer, release).await;
    assert_eq!(released, ReleaseOutcome::Released);
    ok(ok(w, "write").release().await, "write release");
}

/// Test 5: a downgrade is atomic: a writer waiting since before it is not granted while the downgraded hold is
/// held; with no writer waiting, a reader waiting since the write is let in (woken: its retries are 5 s apart).
pub async fn rw_downgrade_is_atomic_and_lets_readers_in(s: &Subject) {
    let Some(rw) = rwlock(s, "downgrade") else { return };
    let w = ok(rw.write(&opts(10_000, 0)).await, "write");
    let token = some(w.fence().await.ok(), "a writer's token");
    let reader = async {
        let r = ok(rw.read(&slow(10_000, 10_000, 5_000)).await, "the waiting reader");
        (Instant::now(), r)
    };
    let downgrade = async {
        // The reader's first try finds the write held; its next retry is 5 s away.
        sleep(ms(100)).await;
        let at = Instant::now();
        (at, ok(w.downgrade().await, "downgrade"))
    };
    let ((joined, r), (downgraded, d)) = join(Box::pin(reader), Box::pin(downgrade)).await;
    assert!(joined.saturating_duration_since(downgraded) < ms(2_000), "the downgrade did not wake the reader");
    assert_eq!(d.epoch(), Some(token), "a downgraded hold's epoch is its own write's token");
    assert_eq!(r.epoch(), Some(token), "the reader's epoch is the last write's token");
    let st = state(&rw).await;
    assert_eq!((st.writer, st.readers, st.waiting_writers), (false, 2, 0), "after the downgrade");
    ok(r.release().await, "reader release");

    // A writer queued behind the downgrading writer waits for the downgraded hold.
    ok(d.release().await, "the first downgraded hold's release");
    let w = ok(rw.write(&opts(10_000, 0)).await, "write again");
    let wait = opts(10_000, 10_000);
    let next = rw.write(&wait);
    let hold = async {
        until(&rw, "the second writer queued", |st| st.waiting_writers == 1).await;
        let d = ok(w.downgrade().await, "downgrade");
        assert!(ok(rw.try_read(&opts(1_000, 0)).await, "try_read").is_none(), "a reader overtook a waiting writer");
        let st = state(&rw).await;
        assert_eq!((st.writer, st.readers), (false, 1), "the waiting writer got in between: {st:?}");
        sleep(ms(50)).await;
        assert_eq!(state(&rw).await.readers, 1, "the waiting writer was granted beside a reader");
        ok(d.release().await, "downgraded release")
    };
    let (next, released) = join(Box::pin(next), Box::pin(hold)).await;
    assert_eq!(released, ReleaseOutcome::Released);
    let next = ok(next, "the queued writer");
    assert!(next.fence().await.ok() > Some(token));
    ok(next.release().await, "release");
}

/// Test 6: writers' tokens strictly increase; a reader's epoch is the last writer's token (0 before any write); a
/// resource that keeps the token of its last write rejects a reader whose epoch is older.
pub async fn rw_writers_are_fenced_and_readers_get_the_epoch(s: &Subject) {
    let Some(rw) = rwlock(s, "fence") else { return };
    let first = ok(rw.read(&opts(5_000, 0)).await, "read before any write");
    assert_eq!(first.epoch().map(|e| e.get()), Some(0), "the epoch before any write");
    ok(first.release().await, "release");
    let mut last = 0;
    // The resource: the token of its last write.
    let mut stored = 0;
    let mut stale = None;
    for round in 0..6 {
        let w = ok(rw.write(&opts(5_000, 0)).await, "write");
        let token = some(w.fence().await.ok(), "fencing is on by default").get();
        assert!(token > last, "round {round}: token {token} after {last}");
        last = token;
        stored = token;
        ok(w.release().await, "release");
        let r = ok(rw.read(&opts(5_000, 0)).await, "read");
        assert_eq!(r.epoch().map(|e| e.get()), Some(token), "round {round}: the epoch is the last write's token");
        ok(r.release().await, "release");
        if round == 2 {
            stale = Some(token);
        }
    }
    let stale = some(stale, "an old epoch");
    assert!(stale < stored, "a resource that checks epochs rejects the stale read");
    let plain = ok(rw.read(&opts(5_000, 0).with_fencing(false)).await, "read without fencing");
    assert_eq!(plain.epoch(), None);
    ok(plain.release().await, "release");
}

/// A writer's release wakes every reader waiting in this process (their retries are 5 s apart), and they hold
/// together.
pub async fn rw_write_release_lets_every_waiting_reader_in(s: &Subject) {
    let Some(rw) = rwlock(s, "wake") else { return };
    let w = ok(rw.write(&opts(30_000, 0)).await, "write");
    let readers = (0..4).map(|_| async {
        let r = ok(rw.read(&slow(30_000, 20_000, 5_000)).await, "read");
        (Instant::now(), r)
    });
    let release = async {
        sleep(ms(100)).await;
        let at = Instant::now();
        ok(w.release().await, "release");
        at
    };
    let (joined, released) = join(join_all(readers), release).await;
    for (at, _) in &joined {
        let gap = at.saturating_duration_since(released);
        assert!(gap < ms(2_000), "a waiting reader was not woken by the release ({gap:?})");
    }
    assert_eq!(state(&rw).await.readers, 4);
    for (_, r) in joined {
        ok(r.release().await, "release");
    }
}

/// A waiting writer that is cancelled gives its place back and wakes the readers it held back in its own process
/// (their retries are 5 s apart): found by the schedule explorer, where such a reader slept its whole backoff.
pub async fn rw_cancelled_waiting_writer_lets_held_back_readers_in(s: &Subject) {
    let Some(rw) = rwlock(s, "cancelled-writer") else { return };
    let holder = ok(rw.read(&opts(30_000, 0)).await, "a reader that makes the writer queue");
    let wait = opts(30_000, 30_000);
    let mut writer = Box::pin(rw.write(&wait));
    if let Either::Left((w, _)) =
        select(writer.as_mut(), Box::pin(until(&rw, "the writer queued", |st| st.waiting_writers == 1))).await
    {
        panic!("the writer was granted beside a reader: {:?}", w.map(drop));
    }
    let reader = async {
        let r = ok(rw.read(&slow(30_000, 20_000, 5_000)).await, "the held-back reader");
        (Instant::now(), r)
    };
    let cancel = async {
        // The reader's first try finds the writer queued; its next retry is 5 s away.
        sleep(ms(100)).await;
        let at = Instant::now();
        drop(writer);
        at
    };
    let ((joined, r), cancelled) = join(Box::pin(reader), Box::pin(cancel)).await;
    let gap = joined.saturating_duration_since(cancelled);
    assert!(gap < ms(2_000), "the cancelled writer's give-back did not wake the reader ({gap:?})");
    ok(r.release().await, "release");
    ok(holder.release().await, "release");
}

/// An expired hold cannot be extended (lost), and its release says so without touching the next holder.
pub async fn rw_expired_holds_are_lost_and_never_free_others(s: &Subject) {
    let Some(rw) = rwlock(s, "expired") else { return };
    let r = ok(rw.read(&opts(80, 0)).await, "read");
    sleep(ms(150)).await;
    let w = some(ok(rw.try_write(&opts(5_000, 0)).await, "try_write"), "the expired reader's lock");
    assert!(matches!(r.extend(ms(5_000)).await, Err(LockError::Lost { .. })), "an expired read hold was extended");
    // Expired, and a writer took the lock since: `AlreadyExpired` or `OwnedByOther`, never `Released`.
    assert_ne!(ok(r.release().await, "stale read release"), ReleaseOutcome::Released);
    assert!(state(&rw).await.writer, "a stale reader's release freed the writer");
    let old = w;
    ok(old.extend(ms(80)).await, "shorten");
    sleep(ms(150)).await;
    let r2 = some(ok(rw.try_read(&opts(5_000, 0)).await, "try_read"), "the expired writer's lock");
    assert!(matches!(old.extend(ms(5_000)).await, Err(LockError::Lost { .. })), "an expired write was extended");
    assert_ne!(ok(old.release().await, "stale write release"), ReleaseOutcome::Released);
    assert_eq!(state(&rw).await.readers, 1, "a stale writer's release removed a reader");
    ok(r2.release().await, "release");
}

/// Test 8: 2 000 reads and writes cancelled at every point (after 1 to 6 polls, or 2 ms), with a reader holding
/// so writers queue, leave no reader, writer or queue entry once their TTL and waiter TTL have passed; the lock
/// is then free for a writer and no key is left after its release.
pub async fn rw_cancelled_acquires_leave_nothing_behind(s: &Subject) {
    let Some(rw) = rwlock(s, "storm") else { return };
    let Ok(rw) = rw.with_waiter_ttl(ms(500)) else { panic!("waiter TTL") };
    let options = opts(300, 50);
    let holder = ok(rw.read(&opts(2_000, 0)).await, "a reader that makes writers queue");
    for i in 0..2_000u32 {
        let polls = 1 + i % 6;
        let cut = Box::pin(sleep(ms(2)));
        if i % 2 == 0 {
            let _ = select(Box::pin(CancelAfter::new(rw.write(&options), polls)), cut).await;
        } else {
            let _ = select(Box::pin(CancelAfter::new(rw.read(&options), polls)), cut).await;
        }
    }
    ok(holder.release().await, "release");
    until(&rw, "the storm's holds and places expired", is_free).await;
    let w = some(ok(rw.try_write(&opts(1_000, 0)).await, "try_write"), "the lock after the storm");
    ok(w.release().await, "release");
    let started = Instant::now();
    while keys_left(s, &rw).await > 0 {
        assert!(started.elapsed() < ms(3_000), "keys outlived the storm's holders and waiters");
        sleep(ms(20)).await;
    }
}

/// Over Redlock a read-write lock cannot be built; an empty name, a fair-queue option and a waiter TTL below the
/// minimum are refused before any I/O.
pub async fn rw_is_refused_where_it_cannot_hold(s: &Subject) {
    let lock = s.engine().clone();
    let invalid = |r: Result<(), LockError>, what: &str| {
        assert!(matches!(r, Err(LockError::InvalidArgument(_))), "{what}: expected InvalidArgument, got {r:?}");
    };
    if lock.stores().len() > 1 {
        invalid(RwLock::new(lock, "x").map(drop), "a read-write lock over Redlock");
        return;
    }
    invalid(RwLock::new(lock.clone(), "").map(drop), "an empty name");
    let rw = ok(RwLock::new(lock, &fresh("input")), "RwLock::new");
    invalid(rw.clone().with_waiter_ttl(ms(10)).map(drop), "a waiter TTL below the minimum");
    let fair = opts(1_000, 0).with_fair_queue(ms(1_000));
    invalid(rw.try_read(&fair).await.map(drop), "a reader with a fair queue");
    invalid(rw.try_write(&fair).await.map(drop), "a writer with a fair queue");
    let ok_state = ok(rw.state().await, "state");
    assert!(is_free(&ok_state), "refused calls wrote something: {ok_state:?}");
}
