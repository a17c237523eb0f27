//! Conformance cases for what another library leaves at a lock's key: whatever sits there (another client's token, a
//! Redisson hash, a value of any other type) holds the lock. A try answers "held", a waiting acquire waits (bounded
//! by its budget) and takes the lock once the foreign holder is gone, and a release or extension that finds a foreign
//! holder reports the typed outcome (`OwnedByOther`, `Lost`), never a backend error.
//!
//! Every case writes the foreign holder with plain commands through the store ([`Call::plain`]): it is skipped for a
//! subject whose user may not touch data keys of its own choosing ([`Subject::data_keys`]).
//!
//! Each case is a test: it panics, naming what broke, when the backend does not keep a promise (so no case has an
//! `# Errors` section), and it is not meant to be cancelled except by ending the test.

use std::time::Duration;

use lock_core::backend::Call;
use lock_core::{Fencing, JobOptions, Lock, LockError, LockKeys, LockOptions, ReleaseOutcome};

use crate::conformance::ok;
use crate::runtime::sleep;
use crate::Subject;

fn fresh(case: &str) -> String {
    format!("foreign:{case}:{:016x}", rand::random::<u64>())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A foreign holder of each kind another library writes: a string token (redis-py, node-redlock, python-redis-lock,
/// ShedLock), a hash (Redisson and its ports), and the other types: the command that writes it, and its arguments
/// after the key.
const FOREIGN: &[(&str, &str, &[&str])] = &[
    ("string", "SET", &["7f3a9c41e2b0d8f6"]),
    ("hash", "HSET", &["9b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e:1", "1"]),
    ("list", "RPUSH", &["x"]),
    ("stream", "XADD", &["*", "f", "v"]),
    ("zset", "ZADD", &["1", "x"]),
];

/// Runs `name key args…` on every store of `lock` (each Redlock instance holds what the others do).
async fn command(lock: &Lock, name: &'static str, key: &str, args: &[&str]) {
    for store in lock.stores() {
        let keys = [key];
        ok(store.call(Call::plain("foreign", name, &keys, args)).await, &format!("{name} {key} {args:?}"));
    }
}

/// Writes a foreign holder (`name key args…`) at `key`, living `ttl_ms`.
async fn plant(lock: &Lock, key: &str, name: &'static str, args: &[&str], ttl_ms: u64) {
    command(lock, name, key, args).await;
    command(lock, "PEXPIRE", key, &[&ttl_ms.to_string()]).await;
}

/// Whatever holds the lock key holds the lock: a try of every fencing mode, a multi-lock over it, a job's run, a
/// fair lock's try and a campaign are all refused, and a waiting acquire waits out its budget as `Contended` (never
/// `WrongType`, which a key of another type gave before: review 4's Redisson hash), and a value no lock writes (a list, a
/// set, a sorted set, a stream) is named with its key (issue 54 §4).
pub async fn a_foreign_holder_of_any_type_holds_the_lock(s: &Subject) {
    if !s.data_keys() {
        return;
    }
    let lock = s.engine();
    for (kind, name, args) in FOREIGN {
        let r = fresh(kind);
        let keys = ok(LockKeys::new(lock.key_prefix(), &r), "keys");
        plant(lock, keys.lock(), name, args, 60_000).await;
        for mode in [Fencing::OnAcquire, Fencing::Off, Fencing::OnDemand] {
            let opts = LockOptions::new(ms(5_000)).with_fencing_mode(mode);
            let tried = ok(lock.try_acquire(&r, &opts).await, &format!("{kind}: try_acquire, {mode:?}"));
            assert!(tried.is_none(), "{kind}: a try with {mode:?} took a lock a foreign {kind} holds");
        }
        let waited = lock.acquire(&r, &LockOptions::new(ms(5_000)).with_wait(ms(150))).await;
        assert!(matches!(waited, Err(LockError::Contended { .. })), "{kind}: a waiting acquire: {waited:?}");
        // A value no lock writes is named with its key (issue 54 §4); a token or a Redisson hash is a holder.
        let named = matches!(&waited, Err(LockError::Contended { found: Some((k, _)), .. }) if k == kind);
        assert_eq!(named, !["string", "hash"].contains(kind), "{kind}: {waited:?}");
        // On Redis Cluster two names are in two slots, which a multi-lock refuses before any I/O.
        if lock.stores().iter().all(|store| store.topology() != lock_core::backend::Topology::Cluster) {
            let both = ok(lock.try_acquire_all(&[&r, &fresh("other")], &LockOptions::new(ms(5_000))).await, "multi");
            assert!(both.is_none(), "{kind}: a multi-lock took a resource a foreign {kind} holds");
        }
        // A fair queue needs one instance (over Redlock each would order the waiters on its own).
        if lock.stores().len() == 1 {
            let fair = LockOptions::new(ms(5_000)).with_fair_queue(ms(3_000));
            assert!(ok(lock.try_acquire(&r, &fair).await, "fair").is_none(), "{kind}: a fair try took it");
        }
        let job = lock_core::JobLock::new(lock.clone());
        let ran = ok(job.run(&r, &JobOptions::new(ms(5_000)), |_| async {}).await, "job");
        assert!(
            !matches!(ran, lock_core::JobOutcome::Ran { .. }),
            "{kind}: a job ran while a foreign {kind} held its lock"
        );
        if lock.stores().len() == 1 {
            let election =
                ok(lock_core::Election::new(lock.clone(), &r, lock_core::ElectionOptions::default()), "election");
            assert!(
                ok(election.try_campaign("c", "").await, "campaign").is_none(),
                "{kind}: elected over a foreign {kind}"
            );
        }
        let seen = ok(lock.inspect(&r).await, "inspect");
        let holder = seen.holder().unwrap_or_else(|| panic!("{kind}: inspect shows no holder: {seen:?}"));
        assert!(holder.foreign, "{kind}: the holder is not shown as foreign: {holder:?}");
        command(lock, "DEL", keys.lock(), &[]).await;
        let taken = ok(lock.try_acquire(&r, &LockOptions::new(ms(5_000))).await, "after the foreign holder left");
        ok(ok_some(taken, kind).release().await, "release");
    }
}

fn ok_some<T>(guard: Option<T>, kind: &str) -> T {
    guard.unwrap_or_else(|| panic!("{kind}: the lock was not free once the foreign holder left"))
}

/// A waiter takes the lock once a foreign holder's key expires (no announcement comes from it: the waiter wakes at
/// the holder's TTL, which the server reported).
pub async fn a_waiter_takes_the_lock_when_the_foreign_holder_expires(s: &Subject) {
    if !s.data_keys() {
        return;
    }
    let lock = s.engine();
    let r = fresh("expires");
    let keys = ok(LockKeys::new(lock.key_prefix(), &r), "keys");
    plant(lock, keys.lock(), "HSET", &["redisson-like:1", "1"], 300).await;
    let guard = ok(lock.acquire(&r, &LockOptions::new(ms(5_000)).with_wait(ms(10_000))).await, "acquire");
    ok(guard.release().await, "release");
}

/// A holder whose lock expired and was taken by another library's client (here a Redisson-style hash, or another
/// client's token) finds out typed: its extension is `Lost`, its release `OwnedByOther`; the foreign holder is
/// left untouched. Never a backend error (review 4: `WRONGTYPE` surfaced from the release).
pub async fn a_release_or_extension_that_finds_a_foreign_holder_is_typed(s: &Subject) {
    if !s.data_keys() {
        return;
    }
    let lock = s.engine();
    for (kind, name, args) in FOREIGN {
        let r = fresh(kind);
        let keys = ok(LockKeys::new(lock.key_prefix(), &r), "keys");
        let guard = ok(lock.acquire(&r, &LockOptions::new(ms(200))).await, "acquire");
        // The lock expires, and another library's client takes the key.
        sleep(ms(250)).await;
        plant(lock, keys.lock(), name, args, 60_000).await;
        let extended = guard.extend(ms(5_000)).await;
        assert!(matches!(extended, Err(LockError::Lost { .. })), "{kind}: extend: {extended:?}");
        let released = guard.release().await;
        assert!(
            matches!(released, Ok(ReleaseOutcome::OwnedByOther | ReleaseOutcome::AlreadyExpired)),
            "{kind}: release: {released:?}"
        );
        let seen = ok(lock.inspect(&r).await, "inspect");
        assert!(seen.holder().is_some_and(|h| h.foreign), "{kind}: the foreign holder was touched: {seen:?}");
        command(lock, "DEL", keys.lock(), &[]).await;

        // The same for a multi-lock, one of whose keys another library's client took (Cluster: two names are in two
        // slots, which a multi-lock refuses before any I/O).
        if lock.stores().iter().any(|store| store.topology() == lock_core::backend::Topology::Cluster) {
            continue;
        }
        let (a, b) = (fresh(kind), fresh(kind));
        let guard = ok(lock.acquire_all(&[&a, &b], &LockOptions::new(ms(200))).await, "multi acquire");
        sleep(ms(250)).await;
        let b_keys = ok(LockKeys::new(lock.key_prefix(), &b), "keys");
        plant(lock, b_keys.lock(), name, args, 60_000).await;
        let extended = guard.extend(ms(5_000)).await;
        assert!(matches!(extended, Err(LockError::Lost { .. })), "{kind}: multi extend: {extended:?}");
        let released = ok(guard.release().await, &format!("{kind}: multi release"));
        assert!(
            matches!(released.outcome(&b), Some(ReleaseOutcome::OwnedByOther | ReleaseOutcome::AlreadyExpired)),
            "{kind}: multi release: {:?}",
            released.outcomes()
        );
        let seen = ok(lock.inspect(&b).await, "inspect");
        assert!(seen.holder().is_some_and(|h| h.foreign), "{kind}: the multi-lock touched the foreign holder");
        command(lock, "DEL", b_keys.lock(), &[]).await;
    }
}
