//! Finding 9 and 10: input that used to panic or to guarantee a lost lock gets a typed answer instead.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_core::{Lock, LockError, LockOptions, MemoryStore, ReleaseOutcome, RenewPolicy};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A maximum hold too far out to represent (`Duration::MAX`) is no limit: the watchdog neither overflows nor
/// leaves the key behind.
#[tokio::test]
async fn an_unbounded_max_hold_renews_and_releases() {
    let store = MemoryStore::new();
    let lock = Lock::new(store.clone());
    let opts = LockOptions::new(ms(60)).with_auto_renew(RenewPolicy::default().with_max_hold(Duration::MAX));
    let guard = lock.try_acquire("forever", &opts).await.unwrap().expect("free");
    tokio::time::sleep(ms(200)).await;
    assert!(!guard.is_lost(), "renewal stopped: {:?}", guard.lost_signal().reason());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(store.held_count(), 0);
    // The watchdog ends at its next poll after the release cancelled it.
    let t0 = std::time::Instant::now();
    while lock_core::backend::live_renewal_tasks() > 0 {
        assert!(t0.elapsed() < ms(2_000), "the watchdog outlived its guard");
        tokio::time::sleep(ms(5)).await;
    }
}

/// A direct caller of the in-memory store with an absurd TTL gets a lock, not an overflow.
#[tokio::test]
async fn the_memory_store_takes_any_ttl_from_a_direct_caller() {
    use lock_core::backend::{AcquireReply, AcquireRequest};
    use lock_core::{LockKeys, LockStore, Token};
    let store = MemoryStore::new();
    let keys = LockKeys::new("wlp:", "direct").unwrap();
    let token = Token::generate();
    let request = AcquireRequest {
        keys: &keys,
        token: &token,
        ttl: Duration::MAX,
        fencing: false,
        fence_floor: None,
        replicas: None,
        waiting_as: None,
    };
    assert!(matches!(store.acquire(request).await.unwrap(), AcquireReply::Acquired { .. }));
    assert!(matches!(
        store.extend(&keys, &token, Duration::MAX).await.unwrap(),
        lock_core::backend::ExtendReply::Extended
    ));
}

/// Finding 10: a renewal interval at or past the lock's validity (`ttl − drift`) would wake the watchdog after the
/// holder must already consider the lock lost; it is rejected before any I/O.
#[test]
fn a_renewal_interval_past_the_validity_is_rejected() {
    let ttl = Duration::from_secs(1); // validity: 1000 − (10 + 2) = 988 ms
    for interval in [ms(988), ms(990), ms(999)] {
        let opts = LockOptions::new(ttl).with_auto_renew(RenewPolicy::default().with_interval(interval));
        assert!(matches!(opts.validate(), Err(LockError::InvalidArgument(_))), "interval {interval:?} accepted");
    }
    let fine = LockOptions::new(ttl).with_auto_renew(RenewPolicy::default().with_interval(ms(987)));
    assert!(fine.validate().is_ok());
}

/// Finding 9: on a tokio runtime built without `enable_time()`, every operation that needs a timer answers
/// `NoRuntime` instead of panicking (tokio panics when a timer is created there), and nothing is left behind.
#[test]
fn a_tokio_runtime_without_timers_gets_no_runtime_not_a_panic() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let store = MemoryStore::new();
    let lock = Lock::new(store.clone());
    let outcome = runtime.block_on(async {
        let tried = lock.try_acquire("no-timers", &LockOptions::new(ms(5_000))).await.err();
        let waited = lock.acquire("no-timers", &LockOptions::new(ms(5_000)).with_wait(ms(100))).await.err();
        (tried, waited)
    });
    assert!(matches!(outcome.0, Some(LockError::NoRuntime(_))), "try_acquire: {:?}", outcome.0);
    assert!(matches!(outcome.1, Some(LockError::NoRuntime(_))), "acquire: {:?}", outcome.1);
    assert_eq!(store.held_count(), 0);
}
