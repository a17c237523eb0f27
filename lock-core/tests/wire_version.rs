//! The protocol version key (`lock_core::wire`, WIRE.md "Protocol version key"): written by the first acquisition
//! under a prefix, asked once per instance, another major version refused before anything else is written, a value
//! that is not a version reported as a foreign key, and the old default prefix's version key refusing a lock on the
//! new default until the old prefix is set.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_core::backend::Reply;
use lock_core::{KeyLayout, Lock, LockError, LockOptions, MemoryStore, Semaphore};

fn options() -> LockOptions {
    LockOptions::new(Duration::from_secs(5)).with_wait(Duration::ZERO)
}

fn text(memory: &MemoryStore, key: &str) -> Option<String> {
    memory.command(&["GET", key]).and_then(|reply| reply.as_text().map(str::to_owned))
}

#[tokio::test]
async fn the_first_acquisition_writes_the_version_once_per_prefix() {
    let memory = MemoryStore::new();
    let lock = Lock::new(memory.clone());
    lock.acquire("a", &options()).await.unwrap().release().await.unwrap();
    assert_eq!(text(&memory, "wlp:wire").as_deref(), Some(lock_core::wire::VERSION));
    assert_eq!(memory.command(&["PTTL", "wlp:wire"]), Some(Reply::Int(-1)), "the version key has no expiry");
    // Asked once (until `wire::RECHECK_AFTER`): deleted, it is not written again by this lock or its clones.
    memory.command(&["DEL", "wlp:wire"]);
    lock.clone().acquire("b", &options()).await.unwrap().release().await.unwrap();
    assert_eq!(text(&memory, "wlp:wire"), None);
    // Another prefix is asked on its own.
    let billing = lock.clone().with_key_prefix("billing:");
    billing.acquire("a", &options()).await.unwrap().release().await.unwrap();
    assert_eq!(text(&memory, "billing:wire").as_deref(), Some(lock_core::wire::VERSION));
}

#[tokio::test]
async fn another_major_version_is_refused_before_anything_is_written() {
    let memory = MemoryStore::new();
    memory.command(&["SET", "wlp:wire", "2.0"]);
    let lock = Lock::new(memory.clone());
    let err = lock.acquire("a", &options()).await.unwrap_err();
    let LockError::WireVersion { key, found, ours } = &err else { panic!("{err:?}") };
    assert_eq!((key.as_str(), found.as_str(), *ours), ("wlp:wire", "2.0", lock_core::wire::VERSION));
    assert!(err.to_string().contains("2.0") && err.to_string().contains(lock_core::wire::VERSION), "{err}");
    assert!(!err.is_retryable());
    let semaphore = Semaphore::new(lock.clone(), "pool", 2).unwrap();
    assert!(matches!(semaphore.acquire(1, &options()).await, Err(LockError::WireVersion { .. })));
    assert_eq!(memory.held_count(), 0);
    assert_eq!(memory.command(&["EXISTS", "wlp:{a}", "wlp:{a}:fence"]), Some(Reply::Int(0)), "a key was written");
    // Asked again each time, so the lock works once the prefix is ours again.
    memory.command(&["SET", "wlp:wire", "1.4"]);
    lock.acquire("a", &options()).await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn another_type_at_the_version_key_is_a_typed_error_and_another_layout_writes_none() {
    let memory = MemoryStore::new();
    memory.command(&["HSET", "wlp:wire", "f", "v"]);
    let err = Lock::new(memory.clone()).acquire("a", &options()).await.unwrap_err();
    assert!(matches!(err, LockError::WrongType { .. }), "{err:?}");

    let memory = MemoryStore::new();
    let plain = Lock::new(memory.clone()).with_layout(KeyLayout::plain());
    plain.acquire("a", &options()).await.unwrap().release().await.unwrap();
    assert_eq!(memory.command(&["EXISTS", "wlp:wire"]), Some(Reply::Int(0)), "another library's keys are not marked");
}

/// Over Redlock an instance of another version is never written and counts as failed: a majority of this version
/// still decides; a majority of another fails the acquisition with that error.
#[tokio::test]
async fn over_redlock_an_instance_of_another_version_is_never_written() {
    let stores: Vec<MemoryStore> = (0..3).map(|_| MemoryStore::new()).collect();
    let dyn_stores =
        || stores.iter().map(|s| std::sync::Arc::new(s.clone()) as std::sync::Arc<dyn lock_core::LockStore>);
    stores[1].command(&["SET", "wlp:wire", "2.0"]);
    let lock = Lock::redlock(dyn_stores().collect()).build().unwrap();
    let guard = lock.acquire("a", &options()).await.unwrap();
    assert_eq!(guard.held_instances(), &[0, 2]);
    assert_eq!(
        stores[1].command(&["EXISTS", "wlp:{a}"]),
        Some(Reply::Int(0)),
        "the other version's instance was written"
    );
    guard.release().await.unwrap();

    stores[2].command(&["SET", "wlp:wire", "2.1"]);
    let lock = Lock::redlock(dyn_stores().collect()).build().unwrap();
    let err = lock.acquire("b", &options()).await.unwrap_err();
    assert!(matches!(err, LockError::WireVersion { .. }), "{err:?}");
    assert!(stores.iter().all(|s| s.held_count() == 0), "a key was left");
}

/// Issue 54 (a): a value at the version key that is not a version (another library's lock of that name) is said to be
/// a foreign key, never "protocol version <its token>", and the value itself (maybe a token) is not shown.
#[tokio::test]
async fn a_value_that_is_not_a_version_is_a_foreign_key() {
    let memory = MemoryStore::new();
    let token = "dG9rZW4tb2YtYW5vdGhlcg==";
    memory.command(&["SET", "wlp:wire", token]);
    let err = Lock::new(memory.clone()).acquire("a", &options()).await.unwrap_err();
    let LockError::ForeignKey { key, .. } = &err else { panic!("{err:?}") };
    assert_eq!(key, "wlp:wire");
    let text = err.to_string();
    assert!(text.contains("a key that is not this library's sits at \"wlp:wire\""), "{text}");
    assert!(!text.contains(token) && !text.contains("protocol version dG"), "{text}");
    assert_eq!((err.kind(), err.is_retryable()), ("foreign_key", false));
    assert_eq!(memory.held_count(), 0);
}

/// Issue 54 (a) and (b): python-redis-lock's lock `wire` is `lock:wire`. On the new default prefix our locks neither
/// write it (its lock stays free) nor fail while it is held.
#[tokio::test]
async fn python_redis_locks_lock_named_wire_and_ours_leave_each_other_alone() {
    let memory = MemoryStore::new();
    // python-redis-lock holds `wire` without expiry (its default), with its token.
    memory.command(&["SET", "lock:wire", "dG9rZW4tb2YtYW5vdGhlcg=="]);
    let lock = Lock::new(memory.clone());
    lock.acquire("a", &options()).await.unwrap().release().await.unwrap();
    let semaphore = Semaphore::new(lock.clone(), "pool", 2).unwrap();
    semaphore.acquire(1, &options()).await.unwrap().release().await.unwrap();
    assert_eq!(text(&memory, "lock:wire").as_deref(), Some("dG9rZW4tb2YtYW5vdGhlcg=="));
    // And once it is released, nothing of ours sits at its key.
    memory.command(&["DEL", "lock:wire"]);
    lock.clone().acquire("b", &options()).await.unwrap().release().await.unwrap();
    assert_eq!(text(&memory, "lock:wire"), None);
}

/// Issue 54: processes of an older release hold their locks under `lock:` (their version key there holds a version):
/// a lock on the new default refuses, naming the fix; set explicitly, the old prefix works beside them.
#[tokio::test]
async fn a_lock_on_the_new_default_refuses_while_the_old_prefix_is_in_use() {
    let memory = MemoryStore::new();
    let old = Lock::new(memory.clone()).with_key_prefix(lock_core::LEGACY_PREFIX);
    let held = old.acquire("invoice", &options()).await.unwrap();
    assert_eq!(text(&memory, "lock:wire").as_deref(), Some(lock_core::wire::VERSION));

    let new = Lock::new(memory.clone());
    let err = new.acquire("invoice", &options()).await.unwrap_err();
    let LockError::OldPrefixInUse { key, found, prefix } = &err else { panic!("{err:?}") };
    assert_eq!((key.as_str(), found.as_str(), *prefix), ("lock:wire", lock_core::wire::VERSION, "lock:"));
    assert!(err.to_string().contains("with_key_prefix(\"lock:\")"), "{err}");
    assert_eq!(memory.command(&["EXISTS", "wlp:wire", "wlp:{invoice}"]), Some(Reply::Int(0)), "a key was written");
    // Every primitive on the default prefix refuses alike.
    let semaphore = Semaphore::new(new.clone(), "pool", 2).unwrap();
    assert!(matches!(semaphore.acquire(1, &options()).await, Err(LockError::OldPrefixInUse { .. })));
    // The old prefix set explicitly: one namespace, so the two exclude each other.
    let configured = Lock::new(memory.clone()).with_key_prefix("lock:");
    assert!(configured.try_acquire("invoice", &options()).await.unwrap().is_none());
    held.release().await.unwrap();
    configured.acquire("invoice", &options()).await.unwrap().release().await.unwrap();
}

/// An explicit prefix is the operator's choice: no look at the old default's version key.
#[tokio::test]
async fn another_explicit_prefix_does_not_look_at_the_old_default() {
    let memory = MemoryStore::new();
    memory.command(&["SET", "lock:wire", "1.0"]);
    let lock = Lock::new(memory.clone()).with_key_prefix("billing:");
    lock.acquire("a", &options()).await.unwrap().release().await.unwrap();
}
