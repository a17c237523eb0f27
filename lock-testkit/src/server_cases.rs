//! Cases every Redis backend runs against a real single server, for interleavings only a real server produces: a
//! `WAIT` blocking its connection, a `WAIT` the ACL refuses after the grant, a fence counter `INCRBY` refuses.
//!
//! Like the conformance suite, one public async function per case; [`server_tests!`](crate::server_tests) writes
//! one `#[test]` per case for a backend, given an async function that connects its store to a URL. Each case starts
//! its own server.
//!
//! Each case is a test: it panics, naming what broke, when the backend does not keep a promise (so no case has an
//! `# Errors` section), and it is not meant to be cancelled except by ending the test.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Lock, LockError, LockKeys, LockOptions, LockStore, ReleaseOutcome, ReplicaAck, Shortfall};

use crate::or_panic::{ms, OrPanic};
use crate::{RedisServer, Reply};

/// Connects a backend's store to the server at a URL (the argument of every case).
pub type UrlFactory =
    dyn Fn(String) -> Pin<Box<dyn Future<Output = lock_core::Result<Arc<dyn LockStore>>> + Send>> + Send + Sync;

/// Options whose acquire draws the fence with the grant ([`lock_core::Fencing::OnAcquire`]): the cases about the
/// fenced acquire script's own checks.
fn eager(ttl: std::time::Duration) -> LockOptions {
    LockOptions::new(ttl).with_fencing_mode(lock_core::Fencing::OnAcquire)
}

fn start() -> RedisServer {
    RedisServer::start().unwrap_or_else(|err| panic!("redis-server: {err}"))
}

fn blocked_clients(server: &RedisServer) -> u64 {
    let info = server.command(&["INFO", "clients"]).or_panic().as_text().unwrap_or_default();
    info.lines().find_map(|l| l.strip_prefix("blocked_clients:")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// Runs `acquire` (a waiting acquire elsewhere, whose guard is released at once) while `held` is released after
/// `after` (`before_release` runs just before): how long after the release the waiter had the lock.
async fn taken_after_release(
    acquire: impl Future<Output = lock_core::Guard>,
    held: lock_core::Guard,
    after: std::time::Duration,
    before_release: impl FnOnce(),
) -> std::time::Duration {
    let waiter = async {
        let g = acquire.await;
        let took = Instant::now();
        g.release().await.or_panic();
        took
    };
    let release = async {
        crate::runtime::sleep(after).await;
        before_release();
        let released = Instant::now();
        held.release().await.or_panic();
        released
    };
    let (took, released) = futures_util::future::join(Box::pin(waiter), Box::pin(release)).await;
    took.saturating_duration_since(released)
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).or_panic() == Reply::Int(1)
}

/// Finding 3: a grant's `WAIT` for replicas runs on a connection of its own. On the store's shared pipelined
/// connection it held up every other resource's acquire, release and renewal for up to the ack timeout. Here the
/// server has no replica, so the `WAIT` lasts its whole timeout; meanwhile another resource is taken and given
/// back five times, all before that `WAIT` returns.
pub async fn replica_wait_does_not_block_other_resources(connect: &UrlFactory) {
    let server = start();
    let lock = Lock::from_arc(connect(server.url()).await.or_panic());
    let waiting =
        LockOptions::new(ms(30_000)).with_replica_ack(ReplicaAck::new(1, ms(700)).with_on_shortfall(Shortfall::Accept));
    let done = AtomicBool::new(false);
    let slow = async {
        let guard = lock.try_acquire("waits-for-replicas", &waiting).await.or_panic().or_panic();
        done.store(true, Ordering::SeqCst);
        guard
    };
    let others = async {
        let t0 = Instant::now();
        while blocked_clients(&server) == 0 {
            assert!(t0.elapsed() < ms(5_000), "the WAIT never started");
            crate::runtime::sleep(ms(2)).await;
        }
        for _ in 0..5 {
            let g = lock.try_acquire("meanwhile", &LockOptions::new(ms(5_000))).await.or_panic().or_panic();
            assert_eq!(g.release().await.or_panic(), ReleaseOutcome::Released);
        }
        done.load(Ordering::SeqCst)
    };
    let (guard, waited_behind) = futures_util::future::join(slow, others).await;
    assert!(!waited_behind, "another resource's commands waited behind the WAIT");
    assert_eq!(guard.release().await.or_panic(), ReleaseOutcome::Released);
}

/// Finding 8: a `WAIT` the ACL refuses (`NOPERM`) comes after the grant was applied. The acquire fails with a
/// typed `Auth` error, and the grant is given back: no lock key is left behind.
pub async fn a_wait_refused_by_the_acl_gives_the_grant_back(connect: &UrlFactory) {
    let server = start();
    let reply = server.command(&["ACL", "SETUSER", "nowait", "on", ">secret", "~*", "&*", "+@all", "-wait"]).or_panic();
    assert!(!reply.is_error(), "ACL SETUSER: {reply:?}");
    let url = format!("redis://nowait:secret@127.0.0.1:{}", server.port());
    let lock = Lock::from_arc(connect(url).await.or_panic());
    let opts =
        LockOptions::new(ms(30_000)).with_replica_ack(ReplicaAck::new(1, ms(100)).with_on_shortfall(Shortfall::Accept));
    let err = lock.try_acquire("refused-wait", &opts).await.err();
    assert!(matches!(err, Some(LockError::Auth { .. })), "expected Auth, got {err:?}");
    let keys = LockKeys::new(lock_core::DEFAULT_PREFIX, "refused-wait").or_panic();
    let t0 = Instant::now();
    while exists(&server, keys.lock()) {
        assert!(t0.elapsed() < ms(2_000), "the grant whose WAIT was refused was left behind");
        crate::runtime::sleep(ms(5)).await;
    }
}

/// Finding 8: a fence counter that Lua reads as a number but `INCRBY` refuses ("1e3") is a typed `WrongType`
/// naming the counter, raised before the lock key is written.
pub async fn a_fence_counter_incrby_refuses_leaves_no_key(connect: &UrlFactory) {
    let server = start();
    let lock = Lock::from_arc(connect(server.url()).await.or_panic());
    let keys = LockKeys::new(lock_core::DEFAULT_PREFIX, "odd-fence").or_panic();
    server.command(&["SET", keys.fence(), "1e3"]).or_panic();
    let err = lock.try_acquire("odd-fence", &eager(ms(30_000))).await.err();
    match err {
        Some(LockError::WrongType { key, .. }) => assert_eq!(key, keys.fence()),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(!exists(&server, keys.lock()), "the lock key was written before the counter was checked");
}

/// A subscription the hub was told is confirmed is live on the server: a release published right after reaches
/// this process. (fred answers a `SUBSCRIBE` before the server has run it; with three CPU-bound processes beside it,
/// 234 of 2 000 publishes right after that answer reached nobody, and a waiter that had subscribed and looked again
/// slept to its safety poll until its store followed each `SUBSCRIBE` with a `PING`. redis-rs resolves `subscribe`
/// on the server's reply.)
pub async fn a_confirmed_subscription_hears_the_next_release(connect: &UrlFactory) {
    let server = start();
    let store = connect(server.url()).await.or_panic();
    let hub = store.release_hub().unwrap_or_else(|| panic!("the store has no release notifications")).clone();
    for i in 0..500 {
        let channel = format!("wlp:{{probe-{i}}}:released");
        let watch = hub.watch(&channel).await;
        let heard = server.command(&["PUBLISH", &channel, "elsewhere"]).or_panic();
        assert_eq!(heard, Reply::Int(1), "channel {i}: the publish right after the confirmation reached nobody");
        drop(watch);
    }
}

/// The ACL rules of the smallest user a lock needs (the user and password are the tests'; the guide, chapter 10, gives the
/// same line as an `ACL SETUSER` command). Keys and channels are those under the default prefix `wlp:` (and a read of
/// `lock:wire`, the old default prefix's version key, which a lock on the default prefix reads); the
/// commands are what the stores send (`PING`, `INFO` at connect; fred also asks `CLIENT ID`), what the scripts call
/// (`GET`, `SET`, `DEL`, `PEXPIRE`, `INCRBY`, `TIME`, `TYPE`, `PTTL`, `PUBLISH`, `SPUBLISH`; a job's hash commands; a
/// fair lock's sorted-set commands and `PEXPIREAT`, and `ZCARD` for its queue length), pub/sub for waiters
/// (classic and sharded), `WAIT` for replica acknowledgements, and on Cluster the slot map, `ASKING` during a slot
/// migration and `HELLO` for the subscriber's RESP3 connection; behind Sentinel, `ROLE` to confirm the primary.
pub const MINIMAL_ACL_RULES: &str = "on >secret resetkeys ~wlp:* %R~lock:wire resetchannels &wlp:* -@all \
    +ping +info +client|id +role +hello +evalsha +eval +get +set +del +pexpire +incrby +time +type +pttl \
    +hset +hget +hmget +hgetall +hdel +hlen +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zscore +zrank +zcard +pexpireat +publish +spublish +subscribe +unsubscribe +ssubscribe +sunsubscribe +wait +cluster|slots +asking";

/// A server with the user `locker` (password `secret`) holding exactly [`MINIMAL_ACL_RULES`].
///
/// # Panics
/// When the server does not start.
pub fn server_with_minimal_user() -> RedisServer {
    server_with_locker(MINIMAL_ACL_RULES)
}

/// A server with the user `locker` (password `secret`) holding `rules` (a variation of [`MINIMAL_ACL_RULES`]).
fn server_with_locker(rules: &str) -> RedisServer {
    RedisServer::builder().with_acl_user("locker", rules).start().unwrap_or_else(|err| panic!("redis-server: {err}"))
}

/// A user without one permission the scripts need gets a typed `Auth` error naming it. Without `TIME`, the
/// fenced acquire's script fails after its `SET` was applied (it reads the clock for the fence's floor then): the
/// grant is given back, so no key is left.
pub async fn a_missing_acl_permission_is_auth_naming_it_and_leaves_no_key(connect: &UrlFactory) {
    let server = server_with_locker(&MINIMAL_ACL_RULES.replace(" +time", ""));
    let lock = Lock::from_arc(connect(server.url_for("locker", "secret", false)).await.or_panic());
    let err = lock.try_acquire("no-time", &eager(ms(30_000))).await.err();
    match &err {
        Some(LockError::Auth { source, .. }) => {
            let text = format!("{source}");
            assert!(text.to_ascii_lowercase().contains("time"), "the error does not name the command: {text}");
        }
        other => panic!("expected Auth naming TIME, got {other:?}"),
    }
    let keys = LockKeys::new(lock_core::DEFAULT_PREFIX, "no-time").or_panic();
    let t0 = Instant::now();
    while exists(&server, keys.lock()) {
        assert!(t0.elapsed() < ms(2_000), "the grant whose script failed was left behind");
        crate::runtime::sleep(ms(5)).await;
    }
}

/// Fenced writes run as the caller's user, on the caller's keys: a user with only the lock's permissions is refused
/// a data key with a typed `Auth` error and nothing is written, and one given the data keys and the writes' commands
/// (what the `fenced` module's docs list) writes through the guard.
pub async fn a_fenced_write_the_acl_refuses_is_auth_and_writes_nothing(connect: &UrlFactory) {
    let server = server_with_locker(&format!("{MINIMAL_ACL_RULES} ~{{orders}}:* +rpush"));
    let store = connect(server.url_for("locker", "secret", false)).await.or_panic();
    let fence = lock_core::FencingToken::new(7);
    let elsewhere = lock_core::FencedResource::from_arc_with_guard(store.clone(), "{billing}:fence").or_panic();
    match elsewhere.set(fence, "{billing}:total", "1").await {
        Err(LockError::Auth { .. }) => {}
        other => panic!("a fenced write on keys the ACL does not give: {other:?}"),
    }
    assert!(!exists(&server, "{billing}:total") && !exists(&server, "{billing}:fence"), "written past the ACL");
    let orders = lock_core::FencedResource::from_arc_with_guard(store, "{orders}:fence").or_panic();
    assert_eq!(orders.rpush(fence, "{orders}:log", &["a"]).await.or_panic(), 1);
    match orders.set(lock_core::FencingToken::new(6), "{orders}:total", "1").await {
        Err(LockError::StaleFence { presented: 6, current: 7 }) => {}
        other => panic!("a stale fence under an ACL user: {other:?}"),
    }
}

/// One plain command through the backend's store (the first word is the key, the rest arguments): the error it
/// read, if any.
async fn probe(store: &Arc<dyn LockStore>, command: &'static str, words: &[&str]) -> Option<LockError> {
    let (keys, args) = words.split_at(words.len().min(1));
    store.call(lock_core::backend::Call::plain("probe", command, keys, args)).await.err()
}

/// [`probe`] again every 20 ms until the server refuses it (at most 5 s): the error read, if it came.
async fn until_refused(store: &Arc<dyn LockStore>, command: &'static str, words: &[&str]) -> Option<LockError> {
    let t0 = Instant::now();
    loop {
        let err = probe(store, command, words).await;
        if err.is_some() || t0.elapsed() > ms(5_000) {
            return err;
        }
        crate::runtime::sleep(ms(20)).await;
    }
}

/// Every server error the library maps, provoked on a real server (Redis 7.x or Valkey 8.x, whichever the fixtures
/// run) and read through this backend: each is the typed error it means on both servers (issue 40; Valkey words an
/// ACL refusal inside a script without `NOPERM`, which this backend once reported as a generic `Backend` error).
/// `TRYAGAIN`, `ASK` and `LOADING` need a slot migration or a slow load caught mid-way; lock-core's unit tests check
/// both servers' words for them.
pub async fn every_server_error_kind_is_typed(connect: &UrlFactory) {
    let transient = |what: &str, err: Option<LockError>| match err {
        Some(err @ LockError::Unavailable { .. }) => assert!(err.is_retryable(), "{what}"),
        other => panic!("{what}: expected a retryable Unavailable, got {other:?}"),
    };

    // WRONGTYPE from a command (the scripts' own are the conformance suite's), naming the key.
    let server = server_with_locker(MINIMAL_ACL_RULES);
    let store = connect(server.url()).await.or_panic();
    server.command(&["LPUSH", "probe:list", "x"]).or_panic();
    match probe(&store, "GET", &["probe:list"]).await {
        Some(LockError::WrongType { key, .. }) => assert_eq!(key, "probe:list"),
        other => panic!("WRONGTYPE: expected WrongType, got {other:?}"),
    }
    // NOPERM for a command the user may not run, outside a script: Auth naming it.
    let limited = connect(server.url_for("locker", "secret", false)).await.or_panic();
    match probe(&limited, "DBSIZE", &[]).await {
        Some(LockError::Auth { source, .. }) => {
            let refusal = source.downcast_ref::<lock_core::backend::AclRefusal>();
            assert_eq!(refusal.and_then(|r| r.command.as_deref()), Some("DBSIZE"), "{source}");
        }
        other => panic!("NOPERM: expected Auth, got {other:?}"),
    }
    // WRONGPASS: Auth from connect.
    assert!(matches!(connect(server.url_for("locker", "wrong", false)).await.err(), Some(LockError::Auth { .. })));
    // NOSCRIPT never reaches the caller: the body is sent once with EVAL.
    let lock = Lock::from_arc(store.clone());
    server.command(&["SCRIPT", "FLUSH"]).or_panic();
    let guard = lock.try_acquire("after-flush", &LockOptions::new(ms(5_000))).await.or_panic();
    assert_eq!(guard.or_panic().release().await.or_panic(), ReleaseOutcome::Released);
    // OOM: maxmemory reached, nothing to evict.
    server.command(&["CONFIG", "SET", "maxmemory", "1"]).or_panic();
    transient("OOM", probe(&store, "SET", &["probe:oom", "v"]).await);
    server.command(&["CONFIG", "SET", "maxmemory", "0"]).or_panic();
    // BUSY: a script past the busy threshold (run from another connection, then killed).
    server.command(&["CONFIG", "SET", "busy-reply-threshold", "50"]).or_panic();
    let addr = server.addr();
    let spinner = std::thread::spawn(move || {
        // Blocks until the script is killed; its own error is of no interest.
        let _ = crate::resp::command(addr, &["EVAL", "while true do end", "0"], ms(30_000));
    });
    let busy = until_refused(&store, "GET", &["probe:busy"]).await;
    let killed = server.command(&["SCRIPT", "KILL"]);
    transient("BUSY", busy);
    assert!(killed.is_ok(), "SCRIPT KILL: {killed:?}");
    let _ = spinner.join();

    // READONLY: a replica refuses writes; MASTERDOWN: one that serves no stale data while its primary is gone.
    let primary = start();
    let replica = RedisServer::builder().with_replica_of(&primary).start().unwrap_or_else(|e| panic!("replica: {e}"));
    let on_replica = connect(replica.url()).await.or_panic();
    transient("READONLY", probe(&on_replica, "SET", &["probe:ro", "v"]).await);
    let orphan = RedisServer::builder()
        .with_replica_of(&primary)
        .with_config("replica-serve-stale-data", "no")
        .start()
        .unwrap_or_else(|e| panic!("replica: {e}"));
    // In sync first: until then it refuses (nearly) everything with MASTERDOWN, connecting included.
    orphan.wait_for_link(ms(10_000)).or_panic();
    let on_orphan = connect(orphan.url()).await.or_panic();
    drop(primary);
    transient("MASTERDOWN", until_refused(&on_orphan, "GET", &["probe:stale"]).await);

    // CLUSTERDOWN: a Cluster node that serves no slot.
    let node = RedisServer::builder().with_cluster(true).start().unwrap_or_else(|e| panic!("cluster node: {e}"));
    match connect(node.url()).await {
        // fred retries a CLUSTERDOWN itself until the command's timeout: retryable either way.
        Ok(on_node) => match probe(&on_node, "GET", &["probe:slot"]).await {
            Some(err @ LockError::Timeout { .. }) => assert!(err.is_retryable()),
            other => transient("CLUSTERDOWN", other),
        },
        // A backend may refuse a Cluster node behind a single-server URL at connect: typed, not a panic.
        Err(err) => assert!(!matches!(err, LockError::Backend { .. }), "CLUSTERDOWN at connect: {err:?}"),
    }
}

/// Review finding 15, on real servers: each error a user reads from this backend says what failed and why, each
/// cause once (`LockError::report`): a key of another type, a command the ACL refuses inside a script, a wrong
/// password, a server that is down. Before, the cause was dropped ("lock server unavailable") or said twice ("holds a
/// value that is not a lock: … holds a value that is not a lock").
pub async fn every_error_says_its_cause_once(connect: &UrlFactory) {
    let server = server_with_locker(&MINIMAL_ACL_RULES.replace(" +time", ""));
    let mut errors = Vec::new();
    let lock = Lock::from_arc(connect(server.url()).await.or_panic());
    // A fencing counter of another type (a lock key of another type is another library's lock: it holds).
    server.command(&["HSET", "wlp:{foreign}:fence", "f", "v"]).or_panic();
    errors.push(("wrong type", lock.try_acquire("foreign", &eager(ms(5_000))).await.err(), "WRONGTYPE"));
    let limited = Lock::from_arc(connect(server.url_for("locker", "secret", false)).await.or_panic());
    let refused = limited.try_acquire("no-time", &eager(ms(5_000))).await.err();
    errors.push(("ACL refusal", refused, "time"));
    errors.push(("wrong password", connect(server.url_for("locker", "wrong", false)).await.err(), "auth"));
    let down = {
        let gone = start();
        gone.url()
    };
    errors.push(("server down", connect(down).await.err(), "unavailable"));
    for (what, err, names) in errors {
        let err = err.unwrap_or_else(|| panic!("{what}: no error"));
        let line = err.report().to_string();
        assert!(line.len() > err.to_string().len(), "{what}: the report gives no cause: {line}");
        assert!(line.to_ascii_lowercase().contains(&names.to_ascii_lowercase()), "{what}: {line}");
        let clauses: Vec<&str> = line.split(": ").collect();
        for (i, clause) in clauses.iter().enumerate() {
            assert!(!clauses[i + 1..].contains(clause), "{what}: a clause is said twice: {line}");
        }
        assert!(line.matches("not a lock").count() <= 1, "{what}: said twice: {line}");
    }
}

/// A wrong password is a typed `Auth` error from `connect`, within the connect timeout (1 s by default).
pub async fn a_wrong_password_is_auth_within_the_connect_timeout(connect: &UrlFactory) {
    let server = server_with_minimal_user();
    let t0 = Instant::now();
    let err = connect_err(connect, server.url_for("locker", "wrong", false)).await;
    assert!(matches!(err, LockError::Auth { .. }), "expected Auth, got {err:?}");
    assert!(t0.elapsed() < ms(2_000), "took {:?}", t0.elapsed());
}

/// Connects, expecting an error.
async fn connect_err(connect: &UrlFactory, url: String) -> LockError {
    match connect(url).await {
        Ok(store) => panic!("connecting succeeded: {store:?}"),
        Err(err) => err,
    }
}

/// Asserts that `secret` appears in none of `printed` (`Debug` and `Display` output a redaction test collected).
///
/// # Panics
/// When one does, showing it.
pub fn assert_never_printed(secret: &str, printed: &[String]) {
    for text in printed {
        assert!(!text.contains(secret), "a secret was printed: {text}");
    }
}

/// An error's text with every source's `Display` and `Debug`, for [`assert_never_printed`].
pub fn error_text(err: &dyn std::error::Error) -> String {
    let mut text = format!("{err}");
    let mut cause = err.source();
    while let Some(e) = cause {
        text.push_str(&format!(": {e} / {e:?}"));
        cause = e.source();
    }
    text
}

/// Test 4 of the multi-resource study: while a multi-lock on {A, B} is still valid, B is stolen (deleted, then set
/// by another client, as an operator or a failover might). `extend` fails with `Lost` naming B, the lost signal
/// fires, A is not prolonged (its TTL keeps running down), and the release deletes A but leaves the thief's B.
pub async fn multi_extend_names_the_stolen_resource(connect: &UrlFactory) {
    let server = start();
    let lock = Lock::from_arc(connect(server.url()).await.or_panic());
    let both = lock.try_acquire_all(&["steal-a", "steal-b"], &LockOptions::new(ms(30_000))).await.or_panic().or_panic();
    let (a, b) = (LockKeys::new("wlp:", "steal-a").or_panic(), LockKeys::new("wlp:", "steal-b").or_panic());
    server.command(&["DEL", b.lock()]).or_panic();
    server.command(&["SET", b.lock(), "thief", "PX", "30000"]).or_panic();
    let before = server.command(&["PTTL", a.lock()]).or_panic().as_int().or_panic();
    match both.extend(ms(60_000)).await {
        Err(LockError::Lost { resource, .. }) => assert_eq!(resource, "steal-b", "the error names the stolen resource"),
        other => panic!("extend after B was stolen: {other:?}"),
    }
    assert!(both.is_lost(), "the lost signal did not fire");
    let after = server.command(&["PTTL", a.lock()]).or_panic().as_int().or_panic();
    assert!(after <= before && after <= 30_000, "A was prolonged: PTTL {before} → {after}");
    let released = both.release().await.or_panic();
    assert_eq!(released.outcome("steal-a"), Some(ReleaseOutcome::Released));
    assert_eq!(released.outcome("steal-b"), Some(ReleaseOutcome::OwnedByOther));
    assert!(!exists(&server, a.lock()), "A left behind");
    assert_eq!(
        server.command(&["GET", b.lock()]).or_panic(),
        Reply::Bulk(Some(b"thief".to_vec())),
        "B's thief lost it"
    );
}

/// Test 4 of the job-lock study, the finish's owner check (ShedLock's Redis provider deletes the next run's lock by
/// default): a run's lock is deleted and taken by the next run while the first still works (as after an overrun
/// past `at_most_for`); the first run's finish leaves the next run's lock and record alone.
pub async fn job_finish_never_touches_the_next_runs_lock(connect: &UrlFactory) {
    let server = start();
    let jobs = lock_core::JobLock::new(Lock::from_arc(connect(server.url()).await.or_panic()));
    let keys = LockKeys::new("wlp:", "overrun-job").or_panic();
    let info = format!("{}:info", keys.lock());
    let opts = lock_core::JobOptions::new(ms(30_000)).with_holder("first");
    let outcome = jobs
        .run("overrun-job", &opts, |_| async {
            // The next run takes over (its record and lock), as if this one had overrun.
            server.command(&["DEL", keys.lock()]).or_panic();
            server.command(&["SET", keys.lock(), "next-run-token", "PX", "30000"]).or_panic();
            server.command(&["HSET", &info, "token", "next-run-token", "holder", "second"]).or_panic();
        })
        .await
        .or_panic();
    assert!(matches!(outcome, lock_core::JobOutcome::Ran { .. }));
    let value = server.command(&["GET", keys.lock()]).or_panic();
    assert_eq!(value, Reply::Bulk(Some(b"next-run-token".to_vec())), "the finish touched the next run's lock");
    let pttl = server.command(&["PTTL", keys.lock()]).or_panic().as_int().or_panic();
    assert!(pttl > 25_000, "the finish changed the next run's TTL: {pttl} ms");
    let holder = server.command(&["HGET", &info, "holder"]).or_panic();
    assert_eq!(holder, Reply::Bulk(Some(b"second".to_vec())), "the finish rewrote the next run's record");
}

/// Test 2 of the job-lock study, on the server's clock: after a 10 ms run with `at_least_for` = 2 s the lock key's
/// PTTL is `at_least_for` minus the run's duration as the server measured it (the client's clock never enters),
/// and the record's start and finish agree with it.
pub async fn job_at_least_for_is_kept_on_the_server_clock(connect: &UrlFactory) {
    let server = start();
    let jobs = lock_core::JobLock::new(Lock::from_arc(connect(server.url()).await.or_panic()));
    let keys = LockKeys::new("wlp:", "short-job").or_panic();
    let opts = lock_core::JobOptions::new(ms(30_000)).with_at_least_for(ms(2_000));
    jobs.run("short-job", &opts, |_| crate::runtime::sleep(ms(10))).await.or_panic();
    let pttl = server.command(&["PTTL", keys.lock()]).or_panic().as_int().or_panic();
    let info = format!("{}:info", keys.lock());
    let field = |name: &str| -> i64 {
        server.command(&["HGET", &info, name]).or_panic().as_text().and_then(|t| t.parse().ok()).or_panic()
    };
    let server_run = field("finished_ms") - field("started_ms");
    assert!((10..1_000).contains(&server_run), "the server measured a run of {server_run} ms");
    let expected = 2_000 - server_run;
    assert!(pttl <= expected && pttl > expected - 200, "PTTL {pttl} ms, expected about {expected} ms");
}

/// A fair lock's waiters in one process renew their places together: ten waiters queued behind a holder for about
/// twelve heartbeat intervals send about one try per interval between them (not ten), keep their places, and are
/// granted in arrival order.
pub async fn fair_waiters_of_one_process_share_their_heartbeats(connect: &UrlFactory) {
    let server = start();
    let lock = Lock::from_arc(connect(server.url()).await.or_panic());
    let waiter_ttl = ms(300);
    let fair = |wait: u64| LockOptions::new(ms(10_000)).with_wait(ms(wait)).with_fair_queue(waiter_ttl);
    let holder = lock.try_acquire("shared-beats", &fair(0)).await.or_panic().or_panic();
    let order = std::sync::Mutex::new(Vec::new());
    let waiters = (0..10usize).map(|i| {
        let (lock, order, fair) = (&lock, &order, &fair);
        Box::pin(async move {
            while lock.fair_queue_len("shared-beats").await.or_panic() < i {
                crate::runtime::sleep(ms(2)).await;
            }
            let g = lock.acquire("shared-beats", &fair(20_000)).await.or_panic();
            order.lock().unwrap_or_else(|p| p.into_inner()).push(i);
            g.release().await.or_panic();
        })
    });
    let hold = async {
        while lock.fair_queue_len("shared-beats").await.or_panic() < 10 {
            crate::runtime::sleep(ms(2)).await;
        }
        let tries = |server: &RedisServer| server.command_calls().or_panic().get("evalsha").copied().unwrap_or(0);
        let before = tries(&server);
        let window = waiter_ttl * 4;
        crate::runtime::sleep(window).await;
        let sent = tries(&server) - before;
        // A heartbeat is due every waiter_ttl / 3 = 100 ms: about 12 in the window, ten times that if each waiter
        // sent its own. (The queue-length reads above are plain ZCARDs, not scripts.)
        assert!(sent <= 24, "{sent} tries in {window:?} from ten waiters of one process");
        assert_eq!(lock.fair_queue_len("shared-beats").await.or_panic(), 10, "a waiter lost its place");
        holder.release().await.or_panic();
    };
    futures_util::future::join(futures_util::future::join_all(waiters), Box::pin(hold)).await;
    let order = order.into_inner().unwrap_or_else(|p| p.into_inner());
    assert_eq!(order, (0..10).collect::<Vec<_>>(), "granted out of arrival order");
}

/// Issue 19: fair waiters of one process that come back for the lock in turn (four tasks, each taking it, holding it
/// a millisecond and queueing again, ten times) leave their peers' places to the heartbeats: the try that takes a
/// waiter's place renews only its own. Renewing every peer's place with it cost three `ZSCORE`s and three `ZADD`s
/// more per acquisition here, and 200 of each with 200 waiters (the benchmark's handoff-200). Counted on the server:
/// the `ZSCORE`s the fair scripts ran, per acquisition.
pub async fn fair_waiters_coming_back_renew_only_their_own_places(connect: &UrlFactory) {
    const TASKS: usize = 4;
    const ROUNDS: usize = 10;
    let server = start();
    let lock = Lock::from_arc(connect(server.url()).await.or_panic());
    let fair = LockOptions::new(ms(30_000)).with_wait(ms(20_000)).with_fair_queue(ms(30_000));
    // Scripts, connection and subscription exist before counting.
    lock.acquire("coming-back", &fair).await.or_panic().release().await.or_panic();
    let zscores = || server.command_calls().or_panic().get("zscore").copied().unwrap_or(0);
    let before = zscores();
    let tasks = (0..TASKS).map(|_| {
        let (lock, fair) = (&lock, &fair);
        Box::pin(async move {
            for _ in 0..ROUNDS {
                let guard = lock.acquire("coming-back", fair).await.or_panic();
                crate::runtime::sleep(ms(1)).await;
                guard.release().await.or_panic();
            }
        })
    });
    futures_util::future::join_all(tasks).await;
    let per_acquisition = (zscores() - before) as f64 / (TASKS * ROUNDS) as f64;
    // Its own place, read by the try that takes it and by the release that grants it; peers' places are renewed
    // by heartbeats only (none due in a 30 s waiter TTL).
    assert!(per_acquisition <= 3.0, "{per_acquisition:.2} ZSCOREs per acquisition");
}

/// A release announces itself only when someone may wait (issue 21): uncontended cycles publish nothing; a try that
/// found the lock held, from another process (store), makes the next release publish exactly once; and a waiter in
/// another process whose backoff is seconds long is woken by that announcement, not by its timer. Fenced and plain
/// acquires alike (their failed tries run different scripts).
pub async fn a_release_announces_itself_only_when_someone_tried(connect: &UrlFactory) {
    let server = start();
    let here = Lock::from_arc(connect(server.url()).await.or_panic());
    let there = Lock::from_arc(connect(server.url()).await.or_panic());
    let published = || server.command_calls().or_panic().get("publish").copied().unwrap_or(0);
    for fencing in [true, false] {
        let resource = format!("announce-{fencing}");
        let options = LockOptions::new(ms(10_000)).with_fencing_mode(if fencing {
            lock_core::Fencing::OnAcquire
        } else {
            lock_core::Fencing::Off
        });
        let before = published();
        for _ in 0..20 {
            here.try_acquire(&resource, &options).await.or_panic().or_panic().release().await.or_panic();
        }
        assert_eq!(published(), before, "fencing {fencing}: an uncontended release published");

        let guard = here.try_acquire(&resource, &options).await.or_panic().or_panic();
        assert!(there.try_acquire(&resource, &options).await.or_panic().is_none(), "the lock was held");
        guard.release().await.or_panic();
        assert_eq!(published(), before + 1, "fencing {fencing}: a release after a failed try did not announce");
        here.try_acquire(&resource, &options).await.or_panic().or_panic().release().await.or_panic();
        assert_eq!(published(), before + 1, "fencing {fencing}: the mark outlived the release that consumed it");

        // A waiter elsewhere, retrying only every 3 s: only the announcement can wake it sooner.
        let slow = lock_core::RetryPolicy::default().with_min_delay(ms(3_000)).with_max_delay(ms(3_000));
        let waiting = options.clone().with_wait(ms(8_000)).with_retry(slow);
        let guard = here.try_acquire(&resource, &options).await.or_panic().or_panic();
        let waiter = async { there.acquire(&resource, &waiting).await.or_panic() };
        // Released past the waiter's two first tries (before and after it subscribed), well before its next one.
        let delay = taken_after_release(waiter, guard, ms(500), || ()).await;
        assert!(delay < ms(1_500), "fencing {fencing}: the waiter took {delay:?} after the release (its timer)");
    }
}

/// A failed try whose release mark the ACL refuses (a user allowed the lock and fence keys only) reports that
/// refusal as `Auth`, fenced and plain, rather than calling the mark a key of another type. Redis refuses it before
/// the script runs because every script declares the mark in `KEYS`; a script that derived the mark's name itself
/// would fail this case.
pub async fn a_release_mark_the_acl_refuses_is_auth_not_wrongtype(connect: &UrlFactory) {
    let server = server_with_locker(&MINIMAL_ACL_RULES.replace("~wlp:*", "~wlp:{*} ~wlp:{*}:fence"));
    let holder = Lock::from_arc(connect(server.url()).await.or_panic());
    let _held = holder.try_acquire("marked", &LockOptions::new(ms(30_000))).await.or_panic().or_panic();
    let lock = Lock::from_arc(connect(server.url_for("locker", "secret", false)).await.or_panic());
    for fencing in [true, false] {
        let err = lock
            .try_acquire(
                "marked",
                &LockOptions::new(ms(30_000)).with_fencing_mode(if fencing {
                    lock_core::Fencing::OnAcquire
                } else {
                    lock_core::Fencing::Off
                }),
            )
            .await
            .err();
        assert!(matches!(err, Some(LockError::Auth { .. })), "fencing {fencing}: expected Auth, got {err:?}");
    }
}

/// Issue 19: a waiter that listens for releases does not poll the server on its backoff while the lock is held (with
/// eight processes waiting out a 250 ms hold, those polls were two thirds of the default lock's server commands). A
/// waiter in another client, with the default retry policy, waits 900 ms for a holder: its tries are its first one
/// and the look once subscribed (the backoff alone would have sent about a dozen), and the release still reaches it
/// at once. Fenced and unfenced (an unfenced try is `SET NX PX` followed by the `HOLDER` script).
pub async fn a_listening_waiter_does_not_poll_while_the_lock_is_held(connect: &UrlFactory) {
    let server = start();
    let here = Lock::from_arc(connect(server.url()).await.or_panic());
    let there = Lock::from_arc(connect(server.url()).await.or_panic());
    let calls = |name: &str| server.command_calls().or_panic().get(name).copied().unwrap_or(0);
    for fencing in [true, false] {
        let resource = format!("not-polled-{fencing}");
        let options = LockOptions::new(ms(10_000)).with_fencing_mode(if fencing {
            lock_core::Fencing::OnAcquire
        } else {
            lock_core::Fencing::Off
        });
        // Scripts and connections exist before counting.
        there.try_acquire(&resource, &options).await.or_panic().or_panic().release().await.or_panic();
        let guard = here.try_acquire(&resource, &options).await.or_panic().or_panic();
        // Each try of the waiter's runs one script: `ACQUIRE` (fenced) or `HOLDER` (unfenced, after its `SET NX`
        // failed).
        let tries = || calls("evalsha");
        let before = tries();
        let waiting = options.clone().with_wait(ms(10_000));
        let waiter = async { there.acquire(&resource, &waiting).await.or_panic() };
        let delay = taken_after_release(waiter, guard, ms(900), || {
            let polled = tries() - before;
            assert!(polled <= 2, "fencing {fencing}: the waiter tried {polled} times while the lock was held");
        })
        .await;
        assert!(delay < ms(500), "fencing {fencing}: the release was not heard");
    }
}

/// Issue 19: a release wakes one waiting process, not one waiter in every process. Five waiters, each with a client
/// of its own (as in five pods), wait for one lock; it is handed from one to the next five times. Each hand-off
/// costs the server two scripts (the release, and the one try of the process it named), where a herd would have
/// every waiting process try on every release (5 + 4 + 3 + 2 + 1 tries). Under the default user and under the
/// minimal ACL user (the line-up uses only commands that user has); fenced (a try is the `ACQUIRE` script) and not
/// (a try is `SET NX PX`, and the `HOLDER` script when that failed).
pub async fn a_release_wakes_one_waiting_process(connect: &UrlFactory) {
    for (minimal_user, fencing) in [(false, true), (false, false), (true, true)] {
        let server = if minimal_user { server_with_minimal_user() } else { start() };
        let url = if minimal_user { server.url_for("locker", "secret", false) } else { server.url().to_owned() };
        let mut locks = Vec::new();
        for _ in 0..=HANDED_ON {
            locks.push(Lock::from_arc(connect(url.clone()).await.or_panic()));
        }
        let resource = format!("one-process-woken-{minimal_user}-{fencing}");
        let scripts = || server.command_calls().or_panic().get("evalsha").copied().unwrap_or(0);
        hand_on_through_processes(&locks, &resource, fencing, Some(&scripts)).await;
    }
}

/// How many times [`hand_on_through_processes`] hands the lock on.
pub(crate) const HANDED_ON: usize = 5;

/// `locks[0]` takes `resource`, a waiter on each other lock (each over a store of its own: a process) waits for it,
/// and the lock is handed from one to the next [`HANDED_ON`] times: each hand-off comes at once (only a wake-up can
/// do that), and takes one release and one try (when `scripts` counts the scripts the server ran), and the first
/// release an `UNLOCK` before it.
pub(crate) async fn hand_on_through_processes(
    locks: &[Lock],
    resource: &str,
    fencing: bool,
    scripts: Option<&dyn Fn() -> u64>,
) {
    use futures_util::StreamExt;
    assert_eq!(locks.len(), HANDED_ON + 1);
    let options = LockOptions::new(ms(30_000)).with_fencing_mode(if fencing {
        lock_core::Fencing::OnAcquire
    } else {
        lock_core::Fencing::Off
    });
    for lock in locks {
        // Scripts and connections exist before counting.
        lock.try_acquire(resource, &options).await.or_panic().or_panic().release().await.or_panic();
    }
    let mut guard = locks[0].try_acquire(resource, &options).await.or_panic().or_panic();
    // Only a wake-up gets a waiter the lock in time.
    let patient = lock_core::RetryPolicy::default().with_safety_poll(ms(20_000));
    let waiting = options.clone().with_wait(ms(20_000)).with_retry(patient);
    let mut waiters: futures_util::stream::FuturesUnordered<_> =
        locks[1..].iter().map(|lock| Box::pin(lock.acquire(resource, &waiting))).collect();
    // Every waiter tries, subscribes and tries again; none can finish while the lock is held.
    let settled = futures_util::future::select(waiters.next(), Box::pin(crate::runtime::sleep(ms(500)))).await;
    assert!(matches!(settled, futures_util::future::Either::Right(_)), "a waiter finished while the lock was held");
    let channel = LockKeys::new(lock_core::DEFAULT_PREFIX, resource).or_panic();
    for lock in &locks[1..] {
        let hub = lock.stores()[0].release_hub().or_panic();
        assert_eq!(hub.waiters(channel.channel()), 1, "{resource}: a waiter does not listen");
    }
    let before = scripts.map(|count| count());
    for _ in 0..HANDED_ON {
        let released = Instant::now();
        guard.release().await.or_panic();
        guard = waiters.next().await.or_panic().or_panic();
        let waited = released.elapsed();
        assert!(waited < ms(2_000), "{resource}: a hand-off took {waited:?}");
    }
    guard.release().await.or_panic();
    if let (Some(count), Some(before)) = (scripts, before) {
        let ran = count() - before;
        // Every release; and with fencing, every acquire (an unfenced one that succeeds is a plain `SET`). One more:
        // the first holder took the lock with a try and listens for nothing, so its release tries `UNLOCK` first,
        // which leaves the lock the waiters marked to `RELEASE` (WIRE.md 8.3.1); every later holder waited, and
        // still listens, so it releases with `RELEASE` at once.
        let expected = if fencing { 2 * HANDED_ON + 2 } else { HANDED_ON + 2 } as u64;
        assert_eq!(ran, expected, "{resource}: {HANDED_ON} hand-offs ran {ran} scripts");
    }
}

/// How long a waiter under a user whose ACL refuses the lock's release channels (its subscription gets `NOPERM`)
/// takes to get a lock released 500 ms after it started waiting, polling every 50 ms at most on its backoff and
/// `safety_poll` at most while it believes it hears releases.
async fn deaf_waiter_takes_a_released_lock(
    connect: &UrlFactory,
    safety_poll: std::time::Duration,
) -> std::time::Duration {
    let server = server_with_locker(&MINIMAL_ACL_RULES.replace("resetchannels &wlp:* ", "resetchannels "));
    let holder = Lock::from_arc(connect(server.url()).await.or_panic());
    let deaf = Lock::from_arc(connect(server.url_for("locker", "secret", false)).await.or_panic());
    let polling = lock_core::RetryPolicy::default().with_max_delay(ms(50)).with_safety_poll(safety_poll);
    let waiting = LockOptions::new(ms(30_000)).with_wait(ms(20_000)).with_retry(polling);
    let guard = holder.try_acquire("unheard", &LockOptions::new(ms(30_000))).await.or_panic().or_panic();
    let waiter = async { deaf.acquire("unheard", &waiting).await.or_panic() };
    // Released past the waiter's first tries and its refused subscription.
    taken_after_release(waiter, guard, ms(500), || ()).await
}

/// A user whose ACL refuses the lock's release channels still gets a released lock: its waiter hears nothing, and
/// tries again within its safety poll (700 ms here) at the latest.
pub async fn a_waiter_the_acl_keeps_off_the_channels_still_takes_a_released_lock(connect: &UrlFactory) {
    let waited = deaf_waiter_takes_a_released_lock(connect, ms(700)).await;
    assert!(waited < ms(1_000), "a waiter that cannot hear releases slept {waited:?}");
}

/// For a store whose subscription reports the ACL's refusal (lock-redis-rs; fred 10 reports a refused `SUBSCRIBE`
/// as a success): the waiter knows it hears nothing, so it keeps polling on its backoff (50 ms here) and takes a
/// released lock within it, not after its safety poll (20 s here).
pub async fn a_waiter_told_it_cannot_subscribe_polls_on_its_backoff(connect: &UrlFactory) {
    let waited = deaf_waiter_takes_a_released_lock(connect, ms(20_000)).await;
    assert!(waited < ms(1_000), "a waiter that knows it cannot hear releases slept {waited:?}");
}

/// A waiter that only a wake-up can hand a lock in time: its backoff and safety poll are 20 s.
fn woken_only(ttl_ms: u64) -> LockOptions {
    let patient = lock_core::RetryPolicy::default().with_min_delay(ms(20_000)).with_max_delay(ms(20_000));
    LockOptions::new(ms(ttl_ms)).with_wait(ms(30_000)).with_retry(patient.with_safety_poll(ms(20_000)))
}

/// Waits until `hub` has `n` waiters registered on `keys`' channel (they have tried, found the lock held, and listen).
async fn listening(lock: &Lock, keys: &LockKeys, n: usize) {
    let hub = lock.stores()[0].release_hub().or_panic().clone();
    let t0 = Instant::now();
    while hub.waiters(keys.channel()) < n {
        assert!(t0.elapsed() < ms(10_000), "{n} waiters never listened on {}", keys.channel());
        crate::runtime::sleep(ms(5)).await;
    }
    // Their tries are answered and they sleep (a registration precedes the try that finds the lock held).
    crate::runtime::sleep(ms(100)).await;
}

/// Review 4, finding 3: a woken waiter whose try fails for another reason than the lock its wake-up was for (a
/// multi-lock blocked by its other resource) passes the wake-up on: to the next waiter of its process, or, with none
/// left, to the next waiting process. A lock and a semaphore named alike no longer share a release channel, so the
/// release of one never wakes the other's waiter. Each hand-off comes within a round trip (the waiters' backoff and
/// safety poll are 20 s; before the fix, the lock waiter slept to its safety poll in every case).
pub async fn a_woken_waiter_blocked_by_something_else_passes_the_wake_up_on(connect: &UrlFactory) {
    let server = start();
    let process = || async { Lock::from_arc(connect(server.url()).await.or_panic()) };
    let long = LockOptions::new(ms(60_000));
    let (one, two, three) = (process().await, process().await, process().await);
    let x = LockKeys::new(lock_core::DEFAULT_PREFIX, "pass-x").or_panic();
    let mut handoffs = Vec::new();

    // One process: the multi-lock (x and y) waits longest, then a lock waiter for x; y stays held.
    let _y = three.try_acquire("pass-y", &long).await.or_panic().or_panic();
    let held = three.try_acquire("pass-x", &long).await.or_panic().or_panic();
    let multi = async {
        let both = one.acquire_all(&["pass-x", "pass-y"], &woken_only(60_000)).await;
        both.map(|_| ())
    };
    let lock_waiter = async {
        listening(&one, &x, 1).await;
        one.acquire("pass-x", &woken_only(60_000)).await.or_panic()
    };
    let release = async {
        listening(&one, &x, 2).await;
        (Instant::now(), held.release().await.or_panic())
    };
    let watched = futures_util::future::join(lock_waiter, release);
    let raced = futures_util::future::select(Box::pin(multi), Box::pin(watched)).await;
    let futures_util::future::Either::Right(((guard, (released, _)), multi)) = raced else {
        panic!("the multi-lock got both resources while the other was held");
    };
    handoffs.push(("one process: multi-lock woken, lock waiter served", released.elapsed()));
    drop(multi);

    // Two processes: the first holds a multi-lock waiter only, lined up by a lock waiter of its own that has left;
    // the release (by a third process) names it, its multi-lock is woken and blocked by y, and the wake-up goes to
    // the second process.
    guard.release().await.or_panic();
    let held = three.try_acquire("pass-x", &long).await.or_panic().or_panic();
    let multi = async { one.acquire_all(&["pass-x", "pass-y"], &woken_only(60_000)).await.map(|_| ()) };
    let left = async {
        listening(&one, &x, 1).await;
        let waiting = woken_only(60_000).with_wait(ms(400));
        assert!(one.acquire("pass-x", &waiting).await.is_err(), "x was free");
    };
    let other = async {
        left.await;
        two.acquire("pass-x", &woken_only(60_000)).await.or_panic()
    };
    let release = async {
        listening(&two, &x, 1).await;
        (Instant::now(), held.release().await.or_panic())
    };
    let watched = futures_util::future::join(other, release);
    let raced = futures_util::future::select(Box::pin(multi), Box::pin(watched)).await;
    let futures_util::future::Either::Right(((guard, (released, _)), multi)) = raced else {
        panic!("the multi-lock got both resources while the other was held");
    };
    handoffs.push(("two processes: passed on to the next process", released.elapsed()));
    drop(multi);
    guard.release().await.or_panic();

    // A lock and a semaphore named alike, their waiters in one process (the semaphore's waiting longer): the release of
    // either wakes its own waiter, not the other's.
    let sem = lock_core::Semaphore::new(one.clone(), "pass-x", 1).or_panic();
    let permit = sem.try_acquire(1, &long).await.or_panic().or_panic();
    let held = three.try_acquire("pass-x", &long).await.or_panic().or_panic();
    let sem_waiter = async { sem.acquire(1, &woken_only(60_000)).await.or_panic() };
    let lock_waiter = async {
        crate::runtime::sleep(ms(300)).await;
        one.acquire("pass-x", &woken_only(60_000)).await.or_panic()
    };
    let releases = async {
        crate::runtime::sleep(ms(800)).await;
        let lock_released = Instant::now();
        held.release().await.or_panic();
        crate::runtime::sleep(ms(300)).await;
        let permit_released = Instant::now();
        permit.release().await.or_panic();
        (lock_released, permit_released)
    };
    let timed_lock = async {
        let g = lock_waiter.await;
        (g, Instant::now())
    };
    let timed_sem = async {
        let p = sem_waiter.await;
        (p, Instant::now())
    };
    let ((g, lock_at), (p, sem_at), (lock_released, permit_released)) =
        futures_util::future::join3(timed_lock, timed_sem, releases).await;
    handoffs.push(("lock and semaphore alike: the lock's release", lock_at.saturating_duration_since(lock_released)));
    handoffs
        .push(("lock and semaphore alike: the permit's release", sem_at.saturating_duration_since(permit_released)));
    assert!(sem_at > permit_released, "the semaphore waiter got a permit before one was released");
    g.release().await.or_panic();
    p.release().await.or_panic();
    for (case, took) in &handoffs {
        assert!(*took < ms(2_000), "{case}: the hand-off took {took:?}: a wake-up was swallowed");
    }
    tracing::info!(?handoffs, "hand-offs");
}

/// Review 4, finding 6: no owner token is published or printed. A token is a capability (whoever has it can release
/// or extend the hold), yet fair-lock and read-write lock announcements named the waiter by its token, a forced
/// release named the queue's head by its token, and a guard's `Debug` printed its token whole. Here a subscriber
/// reads every announcement of a fair hand-over, a read-write lock's hand-over to a waiting writer and a forced
/// release with a queued head: none carries a token, and the waiters were still woken (each hand-over is prompt).
pub async fn announcements_and_debug_output_never_show_a_token(connect: &UrlFactory) {
    let server = start();
    let process = || async { Lock::from_arc(connect(server.url()).await.or_panic()) };
    let (one, two) = (process().await, process().await);
    let fair = |wait: u64| LockOptions::new(ms(30_000)).with_wait(ms(wait)).with_fair_queue(ms(30_000));
    let rw_one = lock_core::RwLock::new(one.clone(), "shown-rw").or_panic();
    let rw_two = lock_core::RwLock::new(two.clone(), "shown-rw").or_panic();
    let fair_keys = LockKeys::new(lock_core::DEFAULT_PREFIX, "shown-fair").or_panic();
    let mut subscriber = crate::resp::Connection::open(server.addr(), ms(200)).or_panic();
    for channel in [fair_keys.channel(), rw_one.keys().channel()] {
        subscriber.command(&["SUBSCRIBE", channel]).or_panic();
    }
    let mut tokens: Vec<String> = Vec::new();

    // A fair hand-over: the release grants the queued head and announces it.
    let holder = one.try_acquire("shown-fair", &fair(0)).await.or_panic().or_panic();
    tokens.push(holder.token().as_str().to_owned());
    assert!(!format!("{holder:?}").contains(holder.token().as_str()), "a guard's Debug shows its token: {holder:?}");
    let waiter = async { two.acquire("shown-fair", &fair(10_000)).await.or_panic() };
    let release = async {
        listening(&two, &fair_keys, 1).await;
        holder.release().await.or_panic();
    };
    let (granted, ()) = futures_util::future::join(waiter, release).await;
    tokens.push(granted.token().as_str().to_owned());

    // A forced release while a waiter is queued: it names the head.
    let queued = async { one.acquire("shown-fair", &fair(10_000)).await.or_panic() };
    let forced = async {
        listening(&one, &fair_keys, 1).await;
        one.force_release("shown-fair").await.or_panic();
    };
    let (next, ()) = futures_util::future::join(queued, forced).await;
    tokens.push(next.token().as_str().to_owned());
    next.release().await.or_panic();
    drop(granted);

    // A read-write lock: the last reader's release names the waiting writer.
    let reader = rw_one.read(&LockOptions::new(ms(30_000))).await.or_panic();
    tokens.push(reader.token().as_str().to_owned());
    let writer = async { rw_two.write(&LockOptions::new(ms(30_000)).with_wait(ms(10_000))).await.or_panic() };
    let release = async {
        listening(&two, rw_one.keys(), 1).await;
        reader.release().await.or_panic();
    };
    let (writer, ()) = futures_util::future::join(writer, release).await;
    tokens.push(writer.token().as_str().to_owned());
    assert!(!format!("{writer:?}").contains(writer.token().as_str()), "a write guard's Debug shows its token");
    writer.release().await.or_panic();

    let mut messages = Vec::new();
    while let Ok(Reply::Array(parts)) = subscriber.read() {
        messages.push(parts.iter().filter_map(Reply::as_text).collect::<Vec<_>>().join(" "));
    }
    let announced = messages.iter().filter(|m| m.starts_with("message ")).count();
    assert!(announced >= 3, "the hand-overs were not announced: {messages:?}");
    for token in &tokens {
        let hex = &token[..32];
        assert!(!messages.iter().any(|m| m.contains(hex)), "a token was published: {hex} in {messages:?}");
    }
}

/// Review 4, finding 14: a malformed URL is refused naming the part that is wrong (scheme, host, port), not "did not
/// parse" or a parser's internal kind, and never with its password; a server that does not speak RESP (an HTTP
/// server on that port) is one line naming it, not a multi-line parse error.
pub async fn a_bad_url_names_its_part_and_a_server_that_is_not_redis_says_so(connect: &UrlFactory) {
    for (url, part) in [
        ("redis//localhost", "scheme"),
        ("http://localhost", "scheme \"http\""),
        ("redis://localhost:notaport", "port notaport"),
        ("redis://:hunter2@:6379", "host is missing"),
        ("redis://h:99999", "port 99999"),
        ("redis://[::1", "host"),
    ] {
        let err = connect(url.to_owned()).await.err();
        let message = err.as_ref().map(|e| e.report().to_string()).unwrap_or_default();
        assert!(matches!(err, Some(LockError::InvalidArgument(_))), "{url}: {err:?}");
        assert!(message.contains(part), "{url}: the message does not name the {part}: {message}");
        assert!(!message.contains("hunter2") && !message.contains("did not parse"), "{url}: {message}");
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").or_panic();
    let server = listener.local_addr().or_panic().to_string();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            use std::io::Write;
            let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let err = connect(format!("redis://{server}")).await.err();
    let message = err.as_ref().map(|e| e.report().to_string()).unwrap_or_default();
    assert!(message.contains(&format!("the server at {server} does not speak the Redis protocol")), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
}

/// The margin on a time bound a loaded runner survives: a bound is the lock's own parameter (its operation bound,
/// its wait budget) plus this.
const MARGIN: Duration = Duration::from_millis(1_500);

/// Issue 54 §3, the same failure is the same error on every backend: connecting to a port where nothing listens is
/// `Unavailable` within one operation bound, and its text names the operation and the server.
pub async fn a_refused_connection_is_unavailable_naming_the_server(connect: &UrlFactory) {
    use std::error::Error as _;
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").or_panic();
        listener.local_addr().or_panic().port()
    };
    let t0 = Instant::now();
    let err = connect_err(connect, format!("redis://127.0.0.1:{port}")).await;
    assert!(matches!(err, LockError::Unavailable { .. }), "expected Unavailable, got {err:?}");
    assert!(t0.elapsed() < lock_core::DEFAULT_OPERATION_TIMEOUT + MARGIN, "took {:?}", t0.elapsed());
    let text = err.to_string();
    assert!(text.contains("connect") && text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(err.source().is_some(), "the cause is not kept: {err:?}");
}

/// Issue 54 §3: a server that goes away while a lock is held: its extension and its release fail with
/// `Unavailable` within one operation bound, a waiting acquire with `Unavailable` within its budget and one bound,
/// and each error's text names the operation and the server.
pub async fn a_server_gone_is_unavailable_within_one_bound(connect: &UrlFactory) {
    use std::error::Error as _;
    let mut server = start();
    let addr = server.addr().to_string();
    let lock = Lock::from_arc(connect(server.url()).await.or_panic());
    let guard = lock.acquire("held", &LockOptions::new(ms(30_000))).await.or_panic();
    server.kill();
    let bound = lock.operation_timeout() + MARGIN;
    let t0 = Instant::now();
    let err = guard.extend(ms(30_000)).await.err().or_panic();
    assert!(matches!(err, LockError::Unavailable { .. }), "extend: expected Unavailable, got {err:?}");
    assert!(t0.elapsed() < bound, "extend took {:?}", t0.elapsed());
    let text = err.to_string();
    assert!(text.contains("extend") && text.contains(&addr), "extend: {text}");
    assert!(err.source().is_some(), "extend: the cause is not kept: {err:?}");
    let t0 = Instant::now();
    let err = guard.release().await.err().or_panic();
    assert!(matches!(err, LockError::Unavailable { .. }), "release: expected Unavailable, got {err:?}");
    assert!(t0.elapsed() < bound, "release took {:?}", t0.elapsed());
    assert!(err.to_string().contains("release") && err.to_string().contains(&addr), "release: {err}");
    let budget = ms(2_000);
    let t0 = Instant::now();
    let err = lock.acquire("other", &LockOptions::new(ms(30_000)).with_wait(budget)).await.err().or_panic();
    assert!(matches!(err, LockError::Unavailable { .. }), "a waiting acquire: expected Unavailable, got {err:?}");
    assert!(t0.elapsed() < budget + bound, "a waiting acquire took {:?}", t0.elapsed());
    assert!(err.to_string().contains("acquire") && err.to_string().contains(&addr), "acquire: {err}");
}

/// Issue 54 §3: a password sent to a server that has none is `Auth` on every backend (one accepted it silently).
pub async fn a_password_to_a_server_without_one_is_auth(connect: &UrlFactory) {
    let server = start();
    let t0 = Instant::now();
    let err = connect_err(connect, format!("redis://:not-needed@{}", server.addr())).await;
    assert!(matches!(err, LockError::Auth { .. }), "expected Auth, got {err:?}");
    assert!(t0.elapsed() < lock_core::DEFAULT_OPERATION_TIMEOUT + MARGIN, "took {:?}", t0.elapsed());
    let text = error_text(&err);
    assert!(!text.contains("not-needed"), "the password was printed: {text}");
}

/// Issue 54 §3: a `LockError` returned from `main` (printed with `Debug`) is one readable line: what failed, where,
/// and why, not the variant's fields.
pub async fn an_error_returned_from_main_prints_one_readable_line(connect: &UrlFactory) {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").or_panic();
        listener.local_addr().or_panic().port()
    };
    let err = connect_err(connect, format!("redis://user:hunter2@127.0.0.1:{port}")).await;
    let printed = format!("Error: {err:?}");
    assert_eq!(printed.lines().count(), 1, "{printed}");
    assert!(printed.contains("unavailable") && printed.contains(&format!("127.0.0.1:{port}")), "{printed}");
    assert!(!printed.contains("source:") && !printed.contains("hunter2"), "{printed}");
}

/// Issue 54 §4: a value no lock writes at a lock key (a list another program keeps there) is said to be one when a
/// wait gives up ("a list sits at \"wlp:{customer:9}\""), for the plain lock under each layout, the fair lock and a
/// read-write writer, not "held by another owner … a holder that crashed blocks it"; it still holds the lock (the
/// error is `Contended`, as for any holder), and the key is left as it was. A try asks nothing more.
pub async fn a_key_of_another_type_at_a_lock_key_is_said_to_be_one(connect: &UrlFactory) {
    use lock_core::KeyLayout;
    let server = start();
    let store = connect(server.url()).await.or_panic();
    let waiting = || LockOptions::new(ms(10_000)).with_wait(ms(200));
    let said = |what: &str, key: &str, kind: &str, err: LockError| {
        let text = err.report().to_string();
        let named = matches!(&err, LockError::Contended { found: Some((k, at)), .. } if k == kind && at == key);
        assert!(named, "{what}: {err:?}");
        assert!(text.contains(&format!("{kind} sits at {key:?}")), "{what}: {text}");
        assert!(!text.contains("held by another owner") && !text.contains("crashed"), "{what}: {text}");
    };
    let key_of = |layout: &KeyLayout| {
        LockKeys::for_layout(layout, lock_core::DEFAULT_PREFIX, "customer:9").or_panic().lock().to_owned()
    };
    for (layout, kind, push) in [
        (KeyLayout::native(), "list", "RPUSH"),
        (KeyLayout::plain(), "list", "RPUSH"),
        (KeyLayout::python_redis_lock(), "set", "SADD"),
        (KeyLayout::redisson(), "list", "RPUSH"),
    ] {
        let key = key_of(&layout);
        server.command(&[push, &key, "job-1"]).or_panic();
        let lock = Lock::from_arc(store.clone()).with_layout(layout.clone());
        let err = lock.acquire("customer:9", &waiting()).await.err().or_panic();
        said(&format!("{layout:?}"), &key, kind, err);
        assert_eq!(server.command(&["TYPE", &key]).or_panic(), Reply::Status(kind.into()), "the key was touched");
        server.command(&["DEL", &key]).or_panic();
    }
    // A string or a hash is another library's holder (a token; a Redisson `RLock`): no such words.
    let key = key_of(&KeyLayout::redisson());
    server.command(&["SET", &key, "a-plain-token", "PX", "60000"]).or_panic();
    let redisson = Lock::from_arc(store.clone()).with_layout(KeyLayout::redisson());
    let err = redisson.acquire("customer:9", &waiting()).await.err().or_panic();
    assert!(matches!(err, LockError::Contended { found: None, .. }), "{err:?}");
    server.command(&["DEL", &key]).or_panic();

    let lock = Lock::from_arc(store.clone());
    let key = key_of(&KeyLayout::native());
    server.command(&["RPUSH", &key, "job-1"]).or_panic();
    let fair = waiting().with_fair_queue(ms(5_000));
    said("fair", &key, "list", lock.acquire("customer:9", &fair).await.err().or_panic());
    let rw = lock_core::RwLock::new(lock.clone(), "customer:9").or_panic();
    let rw_key = rw.keys().lock().to_owned();
    server.command(&["RPUSH", &rw_key, "job-1"]).or_panic();
    said("rw write", &rw_key, "list", rw.write(&waiting()).await.err().or_panic());
    let tried =
        lock.acquire("customer:9", &LockOptions::new(ms(10_000)).with_wait(Duration::ZERO)).await.err().or_panic();
    assert!(matches!(tried, LockError::Contended { found: None, .. }), "a try asks nothing more: {tried:?}");
    assert_eq!(server.command(&["LLEN", &key]).or_panic(), Reply::Int(1));
}
