//! Every guard type answers every `LockGuard` method as an inherent method, so calling one never needs the trait in
//! scope (this file does not import it), and every guard type is a `LockGuard` a framework can box (issue 56).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_core::{Lock, LockOptions, MemoryStore, RwLock, Semaphore};

/// Calls each method of the trait on `$guard`, inherently, and checks what a hold of `$resource` says.
macro_rules! every_method {
    ($guard:expr, $resource:expr, fenced = $fenced:expr) => {{
        let guard = $guard;
        assert_eq!(guard.resource(), $resource);
        assert_eq!(guard.token().as_str().len() >= 32, true);
        assert!(!guard.is_lost());
        assert!(guard.remaining() > Duration::ZERO);
        assert!(guard.valid_until() > std::time::Instant::now());
        assert!(!guard.lost_signal().is_lost());
        let fence = guard.fence().await;
        assert_eq!(fence.is_ok(), $fenced, "{fence:?}");
        if $fenced {
            assert_eq!(guard.drawn_fence(), fence.ok(), "a fence, once drawn, is the drawn one");
        } else {
            assert_eq!(guard.drawn_fence(), None);
        }
        guard.extend(Duration::from_secs(5)).await.unwrap();
        guard
    }};
}

fn options() -> LockOptions {
    LockOptions::new(Duration::from_secs(5))
}

/// The same guard through the trait object a framework holds.
fn boxed(guard: impl lock_core::LockGuard + 'static) -> Box<dyn lock_core::LockGuard> {
    Box::new(guard)
}

#[tokio::test]
async fn every_guard_type_has_every_lock_guard_method_inherently() {
    let lock = Lock::new(MemoryStore::new());

    let guard = every_method!(lock.acquire("one", &options()).await.unwrap(), "one", fenced = true);
    guard.release().await.unwrap();

    let multi = every_method!(lock.acquire_all(&["solo"], &options()).await.unwrap(), "solo", fenced = true);
    multi.release().await.unwrap();
    let several = lock.acquire_all(&["a", "b"], &options()).await.unwrap();
    assert!(several.fence().await.is_err(), "one fence per resource: fence_of, fences");
    assert!(several.fence_of("a").is_some() && several.fence_of("b").is_some());
    boxed(several).release().await.unwrap();

    let rw = RwLock::new(lock.clone(), "config").unwrap();
    let write = every_method!(rw.write(&options()).await.unwrap(), "config", fenced = true);
    write.release().await.unwrap();
    let read = every_method!(rw.read(&options()).await.unwrap(), "config", fenced = false);
    assert!(read.epoch().is_some(), "a reader's epoch is the last write's token");
    boxed(read).release().await.unwrap();

    let semaphore = Semaphore::new(lock.clone(), "pool", 2).unwrap();
    let permit = every_method!(semaphore.acquire(1, &options()).await.unwrap(), "pool", fenced = true);
    boxed(permit).release().await.unwrap();
}

/// The default fence is drawn on demand: `drawn_fence` is `None` until `fence()` draws it, and the first `fence()`
/// never answers "off". Code written for tokens drawn with the grant (`fencing_token().expect(…)`) no longer
/// compiles (`LockGuard::fence`'s docs hold that example as a `compile_fail` test).
#[tokio::test]
async fn a_default_guard_draws_its_fence_when_asked_never_silently_none() {
    let lock = Lock::new(MemoryStore::new());
    let guard = lock.acquire("report", &options()).await.unwrap();
    assert_eq!(guard.drawn_fence(), None, "the default acquire drew nothing");
    let fence = guard.fence().await.expect("a default guard has a fence to draw");
    assert_eq!(guard.drawn_fence(), Some(fence));
    let boxed = boxed(guard);
    assert_eq!(boxed.fence().await.unwrap(), fence, "the trait object answers the same fence");
    boxed.release().await.unwrap();
    let off = lock.acquire("report", &options().with_fencing(false)).await.unwrap();
    assert!(matches!(off.fence().await, Err(lock_core::LockError::InvalidArgument(_))), "off is said, typed");
    off.release().await.unwrap();
}
