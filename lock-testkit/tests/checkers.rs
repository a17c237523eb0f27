//! The history checkers have teeth: the real engine runs each primitive's workload on a healthy store, where its
//! checker finds nothing, and on a [`BrokenStore`] that breaks the rule, where its checker must find the breach.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking, and say what they caught

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lock_core::{
    Election, ElectionOptions, JobLock, JobOptions, JobOutcome, Lock, LockOptions, LockStore, MemoryStore, RwLock,
    Semaphore,
};
use lock_testkit::broken::{Breakage, BrokenStore};
use lock_testkit::primitive_checker::{self, Findings};
use lock_testkit::runtime::sleep;
use lock_testkit::Hold;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Fences drawn with the grant: the broken stores break the grant's reply.
fn opts() -> LockOptions {
    LockOptions::new(ms(5_000)).with_wait(ms(10_000)).with_fencing_mode(lock_core::Fencing::OnAcquire)
}

fn hold(owner: String, fence: Option<u64>, start: Instant, valid_until: Instant) -> Hold {
    Hold { owner, fence, start, end: Instant::now().min(valid_until) }
}

/// Runs `workload` on a healthy store and on one with `breakage`: clean, then caught.
fn check<F, Fut>(breakage: Breakage, workload: F)
where
    F: Fn(Lock) -> Fut,
    Fut: std::future::Future<Output = Findings>,
{
    lock_testkit::runtime::tokio(async {
        let healthy = workload(Lock::new(MemoryStore::new())).await;
        assert!(healthy.is_clean(), "a healthy store breached the rule: {healthy}");
        let broken = workload(Lock::new(BrokenStore::new(breakage))).await;
        assert!(!broken.is_clean(), "the checker missed the store that {breakage:?}");
        println!("{breakage:?}: {broken}");
    });
}

/// Four tasks, five holds each, 3 ms of work per hold.
async fn mutex_workload(lock: Lock) -> Findings {
    let holds = Arc::new(Mutex::new(Vec::new()));
    join_all((0..4).map(|task| {
        let (lock, holds) = (lock.clone(), holds.clone());
        async move {
            for round in 0..5 {
                let g = lock.acquire("checked", &opts()).await.unwrap();
                let start = Instant::now();
                sleep(ms(3)).await;
                let h = hold(format!("t{task}.{round}"), g.fence().await.ok().map(|f| f.get()), start, g.valid_until());
                holds.lock().unwrap().push(h);
                let _ = g.release().await;
            }
        }
    }))
    .await;
    let holds = holds.lock().unwrap().clone();
    primitive_checker::mutex(&holds)
}

#[test]
fn the_mutex_checker_catches_a_store_that_grants_twice() {
    check(Breakage::GrantsTwice, mutex_workload);
}

#[test]
fn the_mutex_checker_catches_a_store_that_reuses_a_fence() {
    check(Breakage::ReusesFences, mutex_workload);
}

async fn semaphore_workload(lock: Lock) -> Findings {
    let sem = Semaphore::new(lock, "checked", 2).unwrap();
    let permits = Arc::new(Mutex::new(Vec::new()));
    join_all((0..5).map(|task| {
        let (sem, permits) = (&sem, permits.clone());
        async move {
            for round in 0..4 {
                let p = sem.acquire(1, &opts()).await.unwrap();
                let start = Instant::now();
                sleep(ms(3)).await;
                let h = hold(format!("t{task}.{round}"), p.fence().await.ok().map(|f| f.get()), start, p.valid_until());
                permits.lock().unwrap().push((p.slots().to_vec(), h));
                let _ = p.release().await;
            }
        }
    }))
    .await;
    let permits = permits.lock().unwrap().clone();
    primitive_checker::semaphore(2, &permits)
}

#[test]
fn the_semaphore_checker_catches_a_store_that_grants_beyond_the_limit() {
    check(Breakage::GrantsTwice, semaphore_workload);
}

#[test]
fn the_semaphore_checker_catches_a_store_that_reuses_a_fence() {
    check(Breakage::ReusesFences, semaphore_workload);
}

/// A reader holds until a writer that asked once the reader was in is granted (or 300 ms); then a second writer.
/// Waits on events, not on sleeps, so a loaded machine changes nothing: the writer is either kept out until the
/// reader leaves (healthy) or granted beside it (broken).
async fn rwlock_workload(lock: Lock) -> Findings {
    let rw = RwLock::new(lock, "checked").unwrap();
    let (reads, writes) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let (reading, written) = (AtomicBool::new(false), AtomicBool::new(false));
    let reader = async {
        let r = rw.read(&opts()).await.unwrap();
        let start = Instant::now();
        reading.store(true, Ordering::SeqCst);
        while !written.load(Ordering::SeqCst) && start.elapsed() < ms(300) {
            sleep(ms(2)).await;
        }
        reads.lock().unwrap().push(hold("reader".into(), None, start, r.valid_until()));
        let _ = r.release().await;
    };
    let writer = |name: &'static str| {
        let (rw, writes, reading, written) = (&rw, &writes, &reading, &written);
        async move {
            while !reading.load(Ordering::SeqCst) {
                sleep(ms(1)).await;
            }
            let w = rw.write(&opts()).await.unwrap();
            let start = Instant::now();
            written.store(true, Ordering::SeqCst);
            sleep(ms(3)).await;
            let fence = w.fence().await.ok().map(|f| f.get());
            writes.lock().unwrap().push(hold(name.into(), fence, start, w.valid_until()));
            let _ = w.release().await;
        }
    };
    futures_util::future::join3(reader, writer("w1"), writer("w2")).await;
    let (reads, writes) = (reads.into_inner().unwrap(), writes.into_inner().unwrap());
    primitive_checker::rwlock(&reads, &writes)
}

#[test]
fn the_rwlock_checker_catches_a_store_that_forgets_a_reader() {
    check(Breakage::ForgetsReaders, rwlock_workload);
}

/// Three candidates campaign twice each, leading 3 ms and resigning.
async fn election_workload(lock: Lock) -> Findings {
    let timing =
        ElectionOptions::default().with_lease(ms(3_000)).with_renew_deadline(ms(2_000)).with_retry_period(ms(20));
    let election = Election::new(lock, "checked", timing).unwrap();
    let terms = Arc::new(Mutex::new(Vec::new()));
    join_all((0..3).map(|task| {
        let (election, terms) = (&election, terms.clone());
        async move {
            for round in 0..2 {
                let leader = election.campaign(&format!("c{task}"), "").await.unwrap();
                let start = Instant::now();
                sleep(ms(3)).await;
                let h = hold(format!("c{task}.{round}"), Some(leader.term().get()), start, leader.valid_until());
                terms.lock().unwrap().push(h);
                let _ = leader.resign().await;
            }
        }
    }))
    .await;
    let terms = terms.lock().unwrap().clone();
    primitive_checker::election(&terms)
}

#[test]
fn the_election_checker_catches_a_store_that_elects_twice() {
    check(Breakage::GrantsTwice, election_workload);
}

#[test]
fn the_election_checker_catches_a_store_that_reuses_a_term() {
    check(Breakage::ReusesFences, election_workload);
}

/// Three replicas each run ticks 1 to 4 of one job, one after the other.
async fn job_workload(lock: Lock) -> Findings {
    let jobs = JobLock::new(lock);
    let runs = Arc::new(Mutex::new(Vec::new()));
    for tick in 1..=4u64 {
        for replica in 0..3 {
            let start = Instant::now();
            let outcome = jobs
                .run_tick("checked", tick, &JobOptions::new(ms(5_000)), |_| async { sleep(ms(2)).await })
                .await
                .unwrap();
            if let JobOutcome::Ran { fencing_token, .. } = outcome {
                let h = Hold {
                    owner: format!("r{replica}"),
                    fence: fencing_token.map(|f| f.get()),
                    start,
                    end: Instant::now(),
                };
                runs.lock().unwrap().push((tick, h));
            }
        }
    }
    let runs = runs.lock().unwrap().clone();
    primitive_checker::job_ticks(&runs)
}

#[test]
fn the_job_checker_catches_a_store_that_forgets_a_tick() {
    check(Breakage::ForgetsTicks, job_workload);
}

#[test]
fn a_broken_store_says_so_in_its_deployment() {
    assert_eq!(BrokenStore::new(Breakage::GrantsTwice).deployment(), "broken");
    assert_eq!(LockStore::deployment(&MemoryStore::new()), "memory");
}
