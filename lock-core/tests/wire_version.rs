//! The protocol version key (`lock_core::wire`, WIRE.md "Protocol version key"): written by the first acquisition
//! under a prefix, asked once per instance, another major version refused before anything else is written.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

use std::time::Duration;

use lock_core::{KeyLayout, Lock, LockError, LockOptions, MemoryStore, Reply, Semaphore};

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
    assert_eq!(text(&memory, "lock:wire").as_deref(), Some(lock_core::wire::VERSION));
    assert_eq!(memory.command(&["PTTL", "lock:wire"]), Some(Reply::Int(-1)), "the version key has no expiry");
    // Asked once: deleted, it is not written again by this lock or its clones.
    memory.command(&["DEL", "lock:wire"]);
    lock.clone().acquire("b", &options()).await.unwrap().release().await.unwrap();
    assert_eq!(text(&memory, "lock:wire"), None);
    // Another prefix is asked on its own.
    let billing = lock.clone().with_key_prefix("billing:");
    billing.acquire("a", &options()).await.unwrap().release().await.unwrap();
    assert_eq!(text(&memory, "billing:wire").as_deref(), Some(lock_core::wire::VERSION));
}

#[tokio::test]
async fn another_major_version_is_refused_before_anything_is_written() {
    let memory = MemoryStore::new();
    memory.command(&["SET", "lock:wire", "2.0"]);
    let lock = Lock::new(memory.clone());
    let err = lock.acquire("a", &options()).await.unwrap_err();
    let LockError::WireVersion { key, found, ours } = &err else { panic!("{err:?}") };
    assert_eq!((key.as_str(), found.as_str(), *ours), ("lock:wire", "2.0", lock_core::wire::VERSION));
    assert!(err.to_string().contains("2.0") && err.to_string().contains(lock_core::wire::VERSION), "{err}");
    assert!(!err.is_retryable());
    let semaphore = Semaphore::new(lock.clone(), "pool", 2).unwrap();
    assert!(matches!(semaphore.acquire(1, &options()).await, Err(LockError::WireVersion { .. })));
    assert_eq!(memory.held_count(), 0);
    assert_eq!(memory.command(&["EXISTS", "lock:{a}", "lock:{a}:fence"]), Some(Reply::Int(0)), "a key was written");
    // Asked again each time, so the lock works once the prefix is ours again.
    memory.command(&["SET", "lock:wire", "1.4"]);
    lock.acquire("a", &options()).await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn another_type_at_the_version_key_is_a_typed_error_and_another_layout_writes_none() {
    let memory = MemoryStore::new();
    memory.command(&["HSET", "lock:wire", "f", "v"]);
    let err = Lock::new(memory.clone()).acquire("a", &options()).await.unwrap_err();
    assert!(matches!(err, LockError::WrongType { .. }), "{err:?}");

    let memory = MemoryStore::new();
    let plain = Lock::new(memory.clone()).with_layout(KeyLayout::plain());
    plain.acquire("a", &options()).await.unwrap().release().await.unwrap();
    assert_eq!(memory.command(&["EXISTS", "lock:wire"]), Some(Reply::Int(0)), "another library's keys are not marked");
}

/// Over Redlock an instance of another version is never written and counts as failed: a majority of this version
/// still decides; a majority of another fails the acquisition with that error.
#[tokio::test]
async fn over_redlock_an_instance_of_another_version_is_never_written() {
    let stores: Vec<MemoryStore> = (0..3).map(|_| MemoryStore::new()).collect();
    let dyn_stores =
        || stores.iter().map(|s| std::sync::Arc::new(s.clone()) as std::sync::Arc<dyn lock_core::LockStore>);
    stores[1].command(&["SET", "lock:wire", "2.0"]);
    let lock = Lock::redlock(dyn_stores().collect()).build().unwrap();
    let guard = lock.acquire("a", &options()).await.unwrap();
    assert_eq!(guard.held_instances(), &[0, 2]);
    assert_eq!(
        stores[1].command(&["EXISTS", "lock:{a}"]),
        Some(Reply::Int(0)),
        "the other version's instance was written"
    );
    guard.release().await.unwrap();

    stores[2].command(&["SET", "lock:wire", "2.1"]);
    let lock = Lock::redlock(dyn_stores().collect()).build().unwrap();
    let err = lock.acquire("b", &options()).await.unwrap_err();
    assert!(matches!(err, LockError::WireVersion { .. }), "{err:?}");
    assert!(stores.iter().all(|s| s.held_count() == 0), "a key was left");
}
