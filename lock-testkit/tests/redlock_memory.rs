//! Redlock's quorum logic over in-memory instances that can be switched to failing or hanging. (The same
//! properties are checked against real redis-server processes in the backend crates.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::Command;
use lock_core::backend::{scripts, AcquireReply, AcquireRequest, Call, Ran, ReleaseHub, ScriptStore};
use lock_core::{Lock, LockError, LockKeys, LockOptions, LockStore, MemoryStore, ReleaseOutcome, Token};
use lock_testkit::{conformance_tests, Checker, Hold, Subject};

const UP: u8 = 0;
const DOWN: u8 = 1;
const PAUSED: u8 = 2;

/// An instance that answers, refuses connections, or hangs (like a SIGSTOPped server).
#[derive(Debug)]
struct Instance {
    inner: MemoryStore,
    mode: AtomicU8,
    /// Fence write-backs this instance was sent.
    raises: AtomicU64,
}

impl Instance {
    async fn gate(&self) -> lock_core::Result<()> {
        match self.mode.load(Ordering::SeqCst) {
            DOWN => Err(LockError::unavailable(std::io::Error::other("connection refused"))),
            PAUSED => std::future::pending().await,
            _ => Ok(()),
        }
    }
}

/// A wrapper over the transport: every lock-core call, the multi-resource ones included, passes the gate.
#[async_trait]
impl ScriptStore for Instance {
    async fn run(&self, call: Call<'_>) -> lock_core::Result<Ran> {
        if matches!(call.command, Command::Script(script) if std::ptr::eq(script, &scripts::RAISE_FENCE)) {
            self.raises.fetch_add(1, Ordering::SeqCst);
        }
        self.gate().await?;
        self.inner.run(call).await
    }
    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        ScriptStore::release_hub(&self.inner)
    }
}

fn cluster(n: usize) -> (Lock, Vec<Arc<Instance>>) {
    let instances: Vec<Arc<Instance>> = (0..n)
        .map(|_| Arc::new(Instance { inner: MemoryStore::new(), mode: AtomicU8::new(UP), raises: AtomicU64::new(0) }))
        .collect();
    let stores = instances.iter().map(|i| i.clone() as Arc<dyn LockStore>).collect();
    (Lock::redlock(stores).build().unwrap(), instances)
}

/// The subject of a Redlock over `instances`, with a second process's lock over peers of the same instances.
fn with_peer((lock, instances): (Lock, Vec<Arc<Instance>>)) -> Subject {
    let peers = instances
        .iter()
        .map(|i| {
            let peer = Instance { inner: i.inner.peer(), mode: AtomicU8::new(UP), raises: AtomicU64::new(0) };
            Arc::new(peer) as Arc<dyn LockStore>
        })
        .collect();
    Subject::new(lock).with_peer(Lock::redlock(peers).build().unwrap())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

mod conformance_redlock3 {
    use super::*;
    async fn subject() -> Subject {
        with_peer(cluster(3))
    }
    conformance_tests!(tokio, subject());
}

mod conformance_redlock5 {
    use super::*;
    async fn subject() -> Subject {
        with_peer(cluster(5))
    }
    conformance_tests!(tokio, subject());
}

#[test]
fn quorum_must_be_a_majority() {
    let stores = |n: usize| (0..n).map(|_| Arc::new(MemoryStore::new()) as Arc<dyn LockStore>).collect::<Vec<_>>();
    assert!(Lock::redlock(stores(0)).build().is_err());
    assert!(Lock::redlock(stores(3)).with_quorum(1).build().is_err());
    assert!(Lock::redlock(stores(3)).with_quorum(4).build().is_err());
    assert_eq!(Lock::redlock(stores(5)).build().unwrap().quorum(), 3);
    assert_eq!(Lock::redlock(stores(4)).build().unwrap().quorum(), 3);
    assert_eq!(Lock::redlock(stores(5)).with_quorum(5).build().unwrap().quorum(), 5);
}

#[tokio::test]
async fn a_paused_or_dead_minority_does_not_stall_acquire_extend_or_release() {
    for (n, bad) in [(3, vec![0]), (5, vec![1, 3])] {
        let (lock, instances) = cluster(n);
        for (k, i) in bad.iter().enumerate() {
            instances[*i].mode.store(if k % 2 == 0 { PAUSED } else { DOWN }, Ordering::SeqCst);
        }
        // TTL 1 s → per-instance timeout 50 ms.
        let opts = LockOptions::new(ms(1_000));
        let t0 = Instant::now();
        let g = lock.try_acquire("minority", &opts).await.unwrap().expect("a majority is up");
        assert!(t0.elapsed() < ms(50), "acquire waited for the paused instance: {:?}", t0.elapsed());
        assert!(bad.iter().all(|b| !g.held_instances().contains(b)));
        let t0 = Instant::now();
        g.extend(ms(1_000)).await.unwrap();
        assert!(t0.elapsed() < ms(50), "extend waited for the paused instance");
        let t0 = Instant::now();
        assert_eq!(g.release().await.unwrap(), ReleaseOutcome::Released);
        assert!(t0.elapsed() < ms(200), "release took {:?}", t0.elapsed());
    }
}

#[tokio::test]
async fn a_dead_majority_gives_a_typed_quorum_error_and_leaves_nothing_behind() {
    let (lock, instances) = cluster(3);
    instances[0].mode.store(DOWN, Ordering::SeqCst);
    instances[2].mode.store(PAUSED, Ordering::SeqCst);
    let err = lock.try_acquire("majority", &LockOptions::new(ms(1_000))).await.err();
    match err {
        Some(LockError::Quorum { granted, required, total }) => {
            assert_eq!((granted, required, total), (1, 2, 3));
        }
        other => panic!("expected a quorum error, got {other:?}"),
    }
    assert_eq!(instances[1].inner.held_count(), 0, "the one grant must be released");
    // With a wait budget the error is the same, after the budget.
    let err = lock.acquire("majority", &LockOptions::new(ms(1_000)).with_wait(ms(200))).await.err();
    assert!(matches!(err, Some(LockError::Quorum { .. })), "{err:?}");
    assert_eq!(instances[1].inner.held_count(), 0);
}

/// Every subset of instances held by another owner: acquire succeeds exactly when a quorum is free, and a failed
/// attempt leaves none of its keys behind.
#[tokio::test]
async fn every_subset_of_blocked_instances() {
    for n in [3usize, 5] {
        let (lock, instances) = cluster(n);
        let quorum = n / 2 + 1;
        for mask in 0u32..(1 << n) {
            let resource = format!("mask-{n}-{mask}");
            let keys = LockKeys::new("wlp:", &resource).unwrap();
            let other = Token::generate();
            for (i, inst) in instances.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    let req = AcquireRequest {
                        keys: &keys,
                        token: &other,
                        ttl: ms(10_000),
                        fencing: true,
                        fence_floor: None,
                        replicas: None,
                        waiting_as: None,
                    };
                    assert!(matches!(inst.inner.acquire(req).await.unwrap(), AcquireReply::Acquired { .. }));
                }
            }
            let free = n - mask.count_ones() as usize;
            let got = lock.try_acquire(&resource, &LockOptions::new(ms(10_000))).await;
            match got {
                Ok(Some(g)) => {
                    assert!(free >= quorum, "n={n} mask={mask:b}: acquired with only {free} free");
                    assert_eq!(g.release().await.unwrap(), ReleaseOutcome::Released);
                }
                Ok(None) | Err(LockError::Quorum { .. }) => {
                    assert!(free < quorum, "n={n} mask={mask:b}: refused with {free} free")
                }
                Err(e) => panic!("n={n} mask={mask:b}: {e:?}"),
            }
            let ours_left: usize = instances
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) == 0)
                .map(|(_, inst)| inst.inner.ttl_of(&keys).is_some() as usize)
                .sum();
            assert_eq!(ours_left, 0, "n={n} mask={mask:b}: keys left behind on free instances");
        }
    }
}

/// Thousands of acquisitions under contention while instances randomly go down and come back: no two holds
/// overlap and fencing tokens never go backwards, although each acquisition's quorum differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_stay_monotonic_across_changing_quorums() {
    const WORKERS: usize = 8;
    const PER_WORKER: usize = 300;
    let (lock, instances) = cluster(5);
    let checker = Arc::new(Checker::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Chaos: every few ms, one random instance changes state; never more than two are out at once.
    let chaos = {
        let (instances, stop) = (instances.clone(), stop.clone());
        tokio::spawn(async move {
            let mut flips = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let i = rand::random::<u64>() as usize % instances.len();
                let out = instances.iter().filter(|x| x.mode.load(Ordering::SeqCst) != UP).count();
                let next = if instances[i].mode.load(Ordering::SeqCst) != UP || out >= 2 { UP } else { DOWN };
                instances[i].mode.store(next, Ordering::SeqCst);
                flips += 1;
                tokio::time::sleep(ms(3)).await;
            }
            flips
        })
    };
    let workers = (0..WORKERS).map(|_| {
        let (lock, checker) = (lock.clone(), checker.clone());
        tokio::spawn(async move {
            let opts = LockOptions::new(ms(2_000)).with_wait(ms(20_000));
            for _ in 0..PER_WORKER {
                let g = lock.acquire("fencing-chaos", &opts).await.unwrap();
                let start = Instant::now();
                tokio::task::yield_now().await;
                checker.record(Hold::of(&g, start).await);
                // A release may miss a down instance; that key then expires, which only delays the next holder.
                let _ = g.release().await;
            }
        })
    });
    for w in futures_util::future::join_all(workers).await {
        w.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let flips = chaos.await.unwrap();
    let report = checker.report();
    println!("redlock-5 fencing: {} acquisitions, {flips} instance failures/recoveries", report.holds);
    assert_eq!(report.holds, WORKERS * PER_WORKER);
    assert!(report.overlaps.is_empty(), "overlaps: {:?}", &report.overlaps[..report.overlaps.len().min(3)]);
    assert!(report.fence_regressions.is_empty(), "regressions: {:?}", &report.fence_regressions[..1]);
    assert!(flips > 10, "the chaos never ran");
}

fn raises(instances: &[Arc<Instance>]) -> u64 {
    instances.iter().map(|i| i.raises.load(Ordering::SeqCst)).sum()
}

/// The quorum's fencing token needs a write-back only when the granting instances' counters disagree. With the
/// counters in step (every instance granted every acquisition, or lagged behind the shared floor), an acquisition
/// is one round trip: no write-back at all, tokens still increasing. An instance whose counter ran ahead (here: set
/// directly, as another client with a fast clock would) makes the quorum's token its value, and the others are
/// raised to it; after that they are in step again.
#[tokio::test]
async fn fence_write_back_only_when_counters_disagree() {
    let (lock, instances) = cluster(3);
    let opts = LockOptions::new(ms(10_000));
    let mut last = 0u64;
    let cycle = |expect_raises: std::ops::RangeInclusive<u64>| {
        let (lock, instances, opts) = (lock.clone(), instances.clone(), opts.clone());
        async move {
            let before = raises(&instances);
            let g = lock.acquire("in-step", &opts).await.unwrap();
            let t = g.fence().await.ok().unwrap().get();
            g.release().await.unwrap();
            let sent = raises(&instances) - before;
            assert!(expect_raises.contains(&sent), "{sent} write-backs for token {t}, expected {expect_raises:?}");
            t
        }
    };
    for _ in 0..20 {
        let t = cycle(0..=0).await;
        assert!(t > last, "{t} after {last}");
        last = t;
    }
    // Instance 1 misses acquisitions: it lags, and the shared floor catches it up without a write-back.
    instances[1].mode.store(DOWN, Ordering::SeqCst);
    for _ in 0..3 {
        let t = cycle(0..=0).await;
        assert!(t > last);
        last = t;
    }
    instances[1].mode.store(UP, Ordering::SeqCst);
    let t = cycle(0..=0).await;
    assert!(t > last);
    last = t;
    // Instance 0's counter runs far ahead of the floor.
    let keys = LockKeys::new("wlp:", "in-step").unwrap();
    let ahead = last + 1_000_000_000;
    let req = AcquireRequest {
        keys: &keys,
        token: &Token::generate(),
        ttl: ms(1),
        fencing: true,
        fence_floor: Some(ahead),
        replicas: None,
        waiting_as: None,
    };
    assert!(
        matches!(instances[0].inner.acquire(req).await.unwrap(), AcquireReply::Acquired { fence: Some(f) } if f == ahead)
    );
    tokio::time::sleep(ms(5)).await;
    // The attempt decides on the first quorum: instance 0 and one or both others, which are raised.
    let t = cycle(1..=2).await;
    assert_eq!(t, ahead + 1, "the quorum's token is the highest counter");
    // Without instance 0, the next quorum is the raised ones: its token is above t only through the write-back.
    instances[0].mode.store(DOWN, Ordering::SeqCst);
    let t2 = cycle(0..=1).await;
    assert!(t2 > t, "{t2} after {t}: the write-back must carry t to the other instances");
    instances[0].mode.store(UP, Ordering::SeqCst);
}
