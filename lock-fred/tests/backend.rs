//! Behaviour specific to the fred backend, each against its own real `redis-server`: script reloading, restarts,
//! foreign key types, unreachable servers, round trips per lock cycle, and release notifications.

// The tests print what they measure (timings, INFO commandstats) for the record.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::error::Error as _;
use std::time::{Duration, Instant};

use lock_fred::lock_core::{Lock, LockError, LockKeys, LockOptions, LockStore, ReleaseOutcome, RetryPolicy, Token};
use lock_fred::{FredStore, FredStoreBuilder};
use lock_testkit::{RedisServer, Reply};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|err| panic!("redis-server: {err}"))
}

async fn store(server: &RedisServer) -> FredStore {
    FredStore::connect(&server.url()).await.unwrap_or_else(|err| panic!("connect: {err:?}"))
}

#[track_caller]
fn command(server: &RedisServer, args: &[&str]) -> Reply {
    match server.command(args) {
        Ok(reply) if !reply.is_error() => reply,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// `INFO commandstats` as command name → calls.
fn command_calls(server: &RedisServer) -> BTreeMap<String, u64> {
    server.command_calls().unwrap_or_else(|err| panic!("INFO commandstats: {err}"))
}

fn keys(name: &str) -> LockKeys {
    LockKeys::new("wlp:", name).unwrap_or_else(|err| panic!("keys: {err}"))
}

async fn fence_of(guard: &lock_fred::lock_core::Guard) -> u64 {
    guard.fence().await.map(|f| f.get()).unwrap_or_else(|err| panic!("no fence: {err}"))
}

fn is_fred_source(err: &LockError) -> bool {
    err.source().is_some_and(|source| source.downcast_ref::<lock_fred::fred::error::Error>().is_some())
}

/// `SCRIPT FLUSH` between acquire, extend and release is invisible to the caller: every call reloads its script.
#[tokio::test]
async fn noscript_after_script_flush_is_invisible() {
    let server = server();
    let lock = Lock::new(store(&server).await);
    let opts = LockOptions::new(ms(5_000)).with_wait(Duration::ZERO);

    command(&server, &["SCRIPT", "FLUSH"]);
    let guard = lock.acquire("flush", &opts).await.unwrap_or_else(|err| panic!("acquire after flush: {err:?}"));
    let first = fence_of(&guard).await;
    command(&server, &["SCRIPT", "FLUSH"]);
    guard.extend(ms(5_000)).await.unwrap_or_else(|err| panic!("extend after flush: {err:?}"));
    command(&server, &["SCRIPT", "FLUSH"]);
    assert_eq!(
        guard.release().await.unwrap_or_else(|err| panic!("release after flush: {err:?}")),
        ReleaseOutcome::Released
    );
    command(&server, &["SCRIPT", "FLUSH"]);
    let again = lock.acquire("flush", &opts).await.unwrap_or_else(|err| panic!("second acquire after flush: {err:?}"));
    assert!(fence_of(&again).await > first);
    again.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));

    // Proof that the flushes bit: each of the four script calls after a flush had to send its body with EVAL.
    let calls = command_calls(&server);
    assert!(calls.get("eval").copied().unwrap_or(0) >= 4, "{calls:?}");
}

/// A restart without persistence loses the fencing counter; the next token is still larger than every earlier one
/// (the counter's floor is the server's clock), and the store reconnects by itself.
#[tokio::test]
async fn fence_after_restart_exceeds_fence_before() {
    let mut server = server();
    let lock = Lock::new(store(&server).await);
    let opts = LockOptions::new(ms(5_000)).with_wait(ms(5_000));
    let mut before = 0;
    for _ in 0..3 {
        let guard = lock.acquire("restart", &opts).await.unwrap_or_else(|err| panic!("acquire: {err:?}"));
        before = before.max(fence_of(&guard).await);
        guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
    }

    server.restart().unwrap_or_else(|err| panic!("restart: {err}"));
    assert_eq!(command(&server, &["EXISTS", keys("restart").fence()]).as_int(), Some(0), "data survived");

    // The wait budget covers the reconnect: transient errors are retried like contention.
    let started = Instant::now();
    let guard = lock.acquire("restart", &opts).await.unwrap_or_else(|err| panic!("acquire after restart: {err:?}"));
    let after = fence_of(&guard).await;
    println!("fence before restart {before}, after {after}, reconnected in {:?}", started.elapsed());
    assert!(after > before, "fence went back from {before} to {after}");
    guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
}

/// A lock key of another type (another library's lock: a Redisson hash) holds the lock: acquire finds it held, and
/// extend, release and raise-fence find it another owner's, typed, never a backend error (issue 48). A fencing
/// counter of another type is `WrongType` naming that key, with fred's error as source.
#[tokio::test]
async fn wrongtype_is_typed_and_names_the_key() {
    let server = server();
    let store = store(&server).await;
    let lock = Lock::new(store.clone());
    // Drawn with the grant: the fenced acquire script reads the counter.
    let opts = LockOptions::new(ms(5_000))
        .with_wait(Duration::ZERO)
        .with_fencing_mode(lock_fred::lock_core::Fencing::OnAcquire);
    let token = Token::generate();

    let hash = keys("hash");
    command(&server, &["HSET", hash.lock(), "field", "value"]);
    assert!(lock.try_acquire("hash", &opts).await.expect("acquire over a hash").is_none(), "a hash holds the lock");
    let extended = store.extend(&hash, &token, ms(1_000)).await.expect("extend over a hash");
    assert_eq!(extended, lock_core::backend::ExtendReply::OwnedByOther);
    assert_eq!(store.release(&hash, &token).await.expect("release over a hash"), ReleaseOutcome::OwnedByOther);
    assert!(!store.raise_fence(&hash, &token, 7).await.expect("raise-fence over a hash"));
    assert_eq!(command(&server, &["TYPE", hash.lock()]).as_text().as_deref(), Some("hash"), "the hash was touched");

    let counter = keys("counter");
    command(&server, &["SET", counter.fence(), "not-a-number"]);
    match lock.try_acquire("counter", &opts).await {
        Err(ref err @ LockError::WrongType { ref key, .. }) => {
            assert_eq!(key, counter.fence());
            assert!(is_fred_source(err), "the source is not fred's error: {err:?}");
        }
        other => panic!("expected WrongType on the fencing counter, got {other:?}"),
    }
    // The check runs before any write: the lock key was not set.
    assert_eq!(command(&server, &["EXISTS", counter.lock()]).as_int(), Some(0));
    // Without fencing the counter is not read, so the lock works.
    let guard = lock
        .try_acquire("counter", &opts.clone().with_fencing(false))
        .await
        .unwrap_or_else(|err| panic!("acquire without fencing: {err:?}"))
        .unwrap_or_else(|| panic!("lock should be free"));
    guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
}

/// A killed server makes every call fail as `Unavailable` or `Timeout` within the store's bound, never a hang; a
/// store cannot be created against it either.
#[tokio::test]
async fn killed_server_is_unavailable_within_bound() {
    let mut server = server();
    let timeout = ms(300);
    let store = FredStoreBuilder::from_url(&server.url())
        .unwrap_or_else(|err| panic!("url: {err:?}"))
        .with_command_timeout(timeout)
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connect: {err:?}"));
    // The lock's own bound is far away, so what ends the calls below is the store's.
    let lock = Lock::new(store.clone()).with_operation_timeout(ms(30_000));
    let url = server.url();
    server.kill();

    let bound = timeout * 3;
    let keys = keys("down");
    let token = Token::generate();
    for what in ["acquire", "extend", "release"] {
        let started = Instant::now();
        let result = match what {
            "acquire" => lock.try_acquire("down", &LockOptions::new(ms(5_000))).await.map(|_| ()),
            "extend" => store.extend(&keys, &token, ms(1_000)).await.map(|_| ()),
            _ => store.release(&keys, &token).await.map(|_| ()),
        };
        let elapsed = started.elapsed();
        println!("{what} against a dead server: {result:?} after {elapsed:?}");
        assert!(matches!(result, Err(LockError::Unavailable { .. } | LockError::Timeout { .. })), "{what}: {result:?}");
        assert!(elapsed < bound, "{what} took {elapsed:?}");
    }

    let started = Instant::now();
    let result = FredStoreBuilder::from_url(&url)
        .unwrap_or_else(|err| panic!("url: {err:?}"))
        .with_command_timeout(timeout)
        .connect()
        .await;
    println!("connect to a dead server: {result:?} after {:?}", started.elapsed());
    assert!(matches!(result, Err(LockError::Unavailable { .. } | LockError::Timeout { .. })), "{result:?}");
    assert!(started.elapsed() < bound);
}

/// A frozen server (SIGSTOP: the connection stays open, nothing answers) is a `Timeout` at the store's bound; the
/// store works again once it thaws.
#[tokio::test]
async fn paused_server_times_out_then_recovers() {
    let mut server = server();
    let timeout = ms(300);
    let store = FredStoreBuilder::from_url(&server.url())
        .unwrap_or_else(|err| panic!("url: {err:?}"))
        .with_command_timeout(timeout)
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connect: {err:?}"));
    let lock = Lock::new(store).with_operation_timeout(ms(30_000));
    let opts = LockOptions::new(ms(5_000)).with_wait(Duration::ZERO);

    server.pause();
    let started = Instant::now();
    let result = lock.try_acquire("paused", &opts).await;
    let elapsed = started.elapsed();
    server.resume();
    println!("acquire against a paused server: {result:?} after {elapsed:?}");
    assert!(matches!(result, Err(LockError::Timeout { operation: "acquire", .. })), "{result:?}");
    // The timed-out acquire is followed by lock-core's release by token, bounded as well.
    assert!(elapsed < timeout * 3, "took {elapsed:?}");

    let guard = lock
        .try_acquire("after-pause", &opts)
        .await
        .unwrap_or_else(|err| panic!("acquire after resume: {err:?}"))
        .unwrap_or_else(|| panic!("fresh lock should be free"));
    guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
}

/// 100 acquire+release cycles with fencing: exactly 200 `EVALSHA` reach the server, and no other command from the
/// client (the scripts' own `GET`/`SET`/`DEL`/… are listed by Redis under their names too, and allowed).
#[tokio::test]
async fn one_lock_cycle_is_two_evalsha() {
    const CYCLES: u64 = 100;
    // Commands the scripts run inside the server; they are not round trips.
    const INSIDE_SCRIPTS: [&str; 8] = ["get", "set", "del", "publish", "incrby", "time", "type", "pttl"];
    // The probe's own commands.
    const PROBE: [&str; 2] = ["config|resetstat", "info"];

    let server = server();
    let lock = Lock::new(store(&server).await);
    // Warm up: the first call on a fresh server loads the scripts. The fence drawn with the grant: two scripts.
    let opts = LockOptions::new(ms(5_000))
        .with_wait(Duration::ZERO)
        .with_fencing_mode(lock_fred::lock_core::Fencing::OnAcquire);
    for name in ["warm", "warm"] {
        let guard = lock.acquire(name, &opts).await.unwrap_or_else(|err| panic!("acquire: {err:?}"));
        guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
    }

    command(&server, &["CONFIG", "RESETSTAT"]);
    for i in 0..CYCLES {
        let guard = lock.acquire(&format!("cycle-{i}"), &opts).await.unwrap_or_else(|err| panic!("acquire: {err:?}"));
        assert!(guard.fence().await.ok().is_some());
        assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}")), ReleaseOutcome::Released);
    }
    let calls = command_calls(&server);
    assert_eq!(calls.get("evalsha").copied(), Some(2 * CYCLES), "{calls:?}");
    let ours: Vec<_> = calls
        .keys()
        .filter(|name| {
            *name != "evalsha" && !INSIDE_SCRIPTS.contains(&name.as_str()) && !PROBE.contains(&name.as_str())
        })
        .collect();
    assert!(ours.is_empty(), "unexpected client commands: {ours:?}");
    println!("round trips per lock cycle (try_acquire + release): {}", calls["evalsha"] / CYCLES);
}

/// The same cycles through `acquire` with a wait budget (uncontended). Reports what lock-core's waiting adds on
/// the subscriber connection; the pool side must still be exactly two `EVALSHA` per cycle.
#[tokio::test]
async fn waiting_acquire_cycle_round_trips() {
    const CYCLES: u64 = 100;
    let server = server();
    let lock = Lock::new(store(&server).await);
    let opts =
        LockOptions::new(ms(5_000)).with_wait(ms(5_000)).with_fencing_mode(lock_fred::lock_core::Fencing::OnAcquire);
    let warm = lock.acquire("warm", &opts).await.unwrap_or_else(|err| panic!("acquire: {err:?}"));
    warm.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));

    command(&server, &["CONFIG", "RESETSTAT"]);
    for i in 0..CYCLES {
        let guard = lock.acquire(&format!("cycle-{i}"), &opts).await.unwrap_or_else(|err| panic!("acquire: {err:?}"));
        guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
    }
    // Unsubscribes are fire-and-forget; give the last one time to land before reading the stats.
    tokio::time::sleep(ms(100)).await;
    let calls = command_calls(&server);
    assert_eq!(calls.get("evalsha").copied(), Some(2 * CYCLES), "{calls:?}");
    assert_eq!(calls.get("script|load"), None, "{calls:?}");
    let subscribe = calls.get("subscribe").copied().unwrap_or(0);
    let unsubscribe = calls.get("unsubscribe").copied().unwrap_or(0);
    println!("per waiting acquire+release cycle: 2 EVALSHA, {subscribe} SUBSCRIBE and {unsubscribe} UNSUBSCRIBE in {CYCLES} cycles");
    // An uncontended acquire never subscribes: waiters subscribe only once they found the lock held.
    assert_eq!((subscribe, unsubscribe), (0, 0), "{calls:?}");
}

/// Holder and waiter on different stores (different processes, in effect): the release's notification wakes the
/// waiter long before its next backoff try.
#[tokio::test]
async fn release_wakes_a_waiter_on_another_store_promptly() {
    let server = server();
    let holder = Lock::new(store(&server).await);
    let waiter = Lock::new(store(&server).await);
    let guard = holder
        .acquire("wake", &LockOptions::new(ms(10_000)).with_wait(Duration::ZERO))
        .await
        .unwrap_or_else(|err| panic!("holder: {err:?}"));

    // With the backoff pinned at 500 ms, only a notification can wake the waiter within 200 ms of the release.
    let slow = RetryPolicy::default().with_min_delay(ms(500)).with_max_delay(ms(500));
    let opts = LockOptions::new(ms(10_000)).with_wait(ms(5_000)).with_retry(slow);
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire("wake", &opts).await.unwrap_or_else(|err| panic!("waiter: {err:?}"));
        let acquired = Instant::now();
        guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
        acquired
    });
    // Let the waiter subscribe, try once and go to sleep.
    tokio::time::sleep(ms(150)).await;
    let released = Instant::now();
    assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}")), ReleaseOutcome::Released);
    let acquired = waiting.await.unwrap_or_else(|err| panic!("waiter task: {err}"));
    let delay = acquired.saturating_duration_since(released);
    println!("waiter acquired {delay:?} after the release");
    assert!(delay < ms(200), "waiter took {delay:?}: the notification did not wake it");
}

/// After the subscriber connection is killed, the store reconnects it and resubscribes the channels waiters are
/// watching, so a later release still wakes them promptly.
#[tokio::test]
async fn notifications_survive_a_subscriber_reconnect() {
    let server = server();
    let holder = Lock::new(store(&server).await);
    let waiter = Lock::new(store(&server).await);
    let channel = keys("resub").channel().to_owned();
    let guard = holder
        .acquire("resub", &LockOptions::new(ms(10_000)).with_wait(Duration::ZERO))
        .await
        .unwrap_or_else(|err| panic!("holder: {err:?}"));

    let slow = RetryPolicy::default().with_min_delay(ms(1_500)).with_max_delay(ms(1_500));
    let opts = LockOptions::new(ms(10_000)).with_wait(ms(8_000)).with_retry(slow);
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire("resub", &opts).await.unwrap_or_else(|err| panic!("waiter: {err:?}"));
        let acquired = Instant::now();
        guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}"));
        acquired
    });
    let subscribers = || {
        match command(&server, &["PUBSUB", "NUMSUB", &channel]) {
            Reply::Array(items) => items.get(1).and_then(Reply::as_int),
            _ => None,
        }
        .unwrap_or(0)
    };
    let deadline = Instant::now() + ms(1_000);
    while subscribers() != 1 {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(ms(10)).await;
    }

    let killed = command(&server, &["CLIENT", "KILL", "TYPE", "pubsub"]).as_int();
    assert!(killed.unwrap_or(0) >= 1, "no subscriber connection to kill: {killed:?}");
    let deadline = Instant::now() + ms(1_000);
    while subscribers() != 1 {
        assert!(Instant::now() < deadline, "the channel was not resubscribed after the reconnect");
        tokio::time::sleep(ms(10)).await;
    }

    let released = Instant::now();
    assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}")), ReleaseOutcome::Released);
    let acquired = waiting.await.unwrap_or_else(|err| panic!("waiter task: {err}"));
    let delay = acquired.saturating_duration_since(released);
    println!("after a subscriber reconnect, the waiter acquired {delay:?} after the release");
    assert!(delay < ms(200), "waiter took {delay:?}: the resubscribed channel did not wake it");
}

/// A store over a pool the caller built and connected works like one built from a URL, and leaves that pool
/// connected when dropped.
#[tokio::test]
async fn store_over_an_existing_pool() {
    use lock_fred::fred::prelude::{Builder, ClientLike, Config, KeysInterface};

    let server = server();
    let config = Config::from_url(&server.url()).unwrap_or_else(|err| panic!("url: {err}"));
    let pool = Builder::from_config(config).build_pool(2).unwrap_or_else(|err| panic!("pool: {err}"));
    pool.init().await.unwrap_or_else(|err| panic!("init: {err}"));

    let store = FredStore::from_pool(pool.clone()).await.unwrap_or_else(|err| panic!("from_pool: {err:?}"));
    let lock = Lock::new(store);
    let guard = lock
        .try_acquire("pooled", &LockOptions::new(ms(5_000)))
        .await
        .unwrap_or_else(|err| panic!("acquire: {err:?}"))
        .unwrap_or_else(|| panic!("free lock"));
    let holder: Option<String> = pool.get(guard.keys().lock()).await.unwrap_or_else(|err| panic!("get: {err}"));
    assert_eq!(holder.as_deref(), Some(guard.token().as_str()));
    assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}")), ReleaseOutcome::Released);
    drop(lock);

    tokio::time::sleep(ms(50)).await;
    let still: Option<String> = pool.get("anything").await.unwrap_or_else(|err| panic!("pool after drop: {err}"));
    assert_eq!(still, None);
}

/// A store from a fred `Builder` keeps the builder's settings, applies the command timeout and the pool size.
#[tokio::test]
async fn store_from_a_fred_builder() {
    use lock_fred::fred::prelude::{Builder, ClientLike, Config, ReconnectPolicy};

    let server = server();
    let config = Config::from_url(&server.url()).unwrap_or_else(|err| panic!("url: {err}"));
    let mut builder = Builder::from_config(config);
    builder.set_policy(ReconnectPolicy::new_constant(0, 50));
    let store = FredStoreBuilder::from_builder(builder)
        .with_pool_size(3)
        .with_command_timeout(ms(700))
        .connect()
        .await
        .unwrap_or_else(|err| panic!("build: {err:?}"));
    assert_eq!(store.pool().size(), 3);
    let client = store.pool().next();
    assert_eq!(client.perf_config().default_command_timeout, ms(700));
    assert_eq!(client.client_reconnect_policy(), Some(ReconnectPolicy::new_constant(0, 50)));
    assert_eq!(store.command_timeout(), ms(700));

    let lock = Lock::new(store);
    let guard = lock
        .try_acquire("built", &LockOptions::new(ms(5_000)))
        .await
        .unwrap_or_else(|err| panic!("acquire: {err:?}"))
        .unwrap_or_else(|| panic!("free lock"));
    assert_eq!(guard.release().await.unwrap_or_else(|err| panic!("release: {err:?}")), ReleaseOutcome::Released);

    let invalid = FredStoreBuilder::from_url("not a url");
    assert!(matches!(invalid, Err(LockError::InvalidArgument(_))), "{invalid:?}");
}

/// Finding 9: an absurd command timeout is a typed `InvalidArgument` (it overflowed when a replica wait was added
/// to it).
#[tokio::test]
async fn an_absurd_command_timeout_is_a_typed_error() {
    let server = server();
    let err = FredStoreBuilder::from_url(&server.url())
        .expect("url")
        .with_command_timeout(Duration::MAX)
        .connect()
        .await
        .err();
    assert!(matches!(err, Some(LockError::InvalidArgument(_))), "{err:?}");
}

/// The store's bound also holds on a pool the caller built without a command timeout of fred's own: each command
/// carries the time the call has left (scripts included: fred 10.1's `evalsha` on a client with options drops
/// them). Against a silent network, a call fails within the store's 300 ms, with fencing (a script) and without
/// (a plain `SET`).
#[tokio::test]
async fn a_callers_pool_without_a_timeout_keeps_the_stores_bound() {
    use lock_fred::fred::interfaces::ClientLike as _;
    use lock_fred::fred::types::config::Config;
    use lock_fred::fred::types::Builder;
    let server = RedisServer::start().expect("redis-server");
    let proxy = lock_testkit::FaultProxy::start(server.addr()).expect("proxy");
    let mut builder = Builder::from_config(Config::from_url(&proxy.url()).expect("url"));
    builder.with_performance_config(|p| p.default_command_timeout = Duration::ZERO);
    let pool = builder.build_pool(1).expect("pool");
    pool.init().await.expect("connect");
    let store = FredStoreBuilder::from_pool(pool).with_command_timeout(ms(300)).connect().await.expect("store");
    let lock = Lock::new(store).with_operation_timeout(Duration::from_secs(30));
    for fencing in [true, false] {
        proxy.blackhole(false);
        let opts = LockOptions::new(ms(5_000)).with_wait(Duration::ZERO).with_fencing_mode(if fencing {
            lock_fred::lock_core::Fencing::OnAcquire
        } else {
            lock_fred::lock_core::Fencing::Off
        });
        let warm = lock.try_acquire("unbounded-warm", &opts).await.expect("acquire").expect("free");
        assert_eq!(warm.release().await.expect("release"), ReleaseOutcome::Released);
        proxy.blackhole(true);
        let started = Instant::now();
        // An outer bound far above the store's, so that a store that ignores its bound fails rather than hangs.
        let result = tokio::time::timeout(Duration::from_secs(5), lock.try_acquire("unbounded", &opts))
            .await
            .unwrap_or_else(|_| panic!("fencing {fencing}: the call did not return within 5 s"));
        let took = started.elapsed();
        assert!(matches!(result, Err(LockError::Timeout { .. })), "fencing {fencing}: {result:?}");
        // The acquire's 300 ms, then the give-back of a grant that may have happened, another 300 ms at most.
        assert!(took < ms(900), "fencing {fencing}: the call returned after {took:?}; the store's bound is 300 ms");
    }
}

/// The store promises every call within its command timeout (`LockStore::call_bound`), and the engine then sets no
/// timer of its own around it. Eight calls at once against a silent network (connections accepted, nothing
/// answered), command timeout 300 ms, the lock's operation timeout 30 s: each call fails within the store's bound.
#[tokio::test]
async fn calls_through_a_silent_network_keep_the_stores_bound() {
    let server = RedisServer::start().expect("redis-server");
    let proxy = lock_testkit::FaultProxy::start(server.addr()).expect("proxy");
    let store = FredStoreBuilder::from_url(&proxy.url())
        .expect("url")
        .with_command_timeout(ms(300))
        .connect()
        .await
        .expect("connect");
    assert_eq!(store.call_bound(), Some(ms(300)));
    let lock = Lock::new(store).with_operation_timeout(Duration::from_secs(30));
    let opts = LockOptions::new(ms(5_000)).with_wait(Duration::ZERO);
    let warm = lock.try_acquire("silent-warm", &opts).await.expect("acquire").expect("free");
    assert_eq!(warm.release().await.expect("release"), ReleaseOutcome::Released);
    proxy.blackhole(true);
    let started = Instant::now();
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let (lock, opts) = (lock.clone(), opts.clone());
            tokio::spawn(async move {
                let result = lock.try_acquire(&format!("silent-{i}"), &opts).await;
                (result.is_err(), started.elapsed())
            })
        })
        .collect();
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await.expect("the call's task"));
    }
    for (i, (failed, took)) in results.iter().enumerate() {
        assert!(*failed, "call {i} succeeded through a silent network");
        assert!(*took < ms(900), "call {i} returned after {took:?}: the store's bound is 300 ms");
    }
}

/// Review finding 1: a `rediss://` URL never sends its password in clear. The "server" is a listener that records
/// what it receives; whatever this build is (with a TLS feature: a TLS handshake that fails; without: refused before
/// any I/O), the password never reaches it. Without a TLS feature the refusal is typed and names the feature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_url_never_sends_its_password_in_clear() {
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let recorder = tokio::spawn(async move {
        let mut seen = Vec::new();
        let record = async {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else { return };
                let mut buf = [0u8; 4096];
                while let Ok(Ok(n @ 1..)) = tokio::time::timeout(ms(300), conn.read(&mut buf)).await {
                    seen.extend_from_slice(&buf[..n]);
                }
            }
        };
        let _ = tokio::time::timeout(ms(3_000), record).await;
        seen
    });
    // Every scheme fred reads as TLS (its `url_uses_tls`: a scheme starting with `rediss` or `valkeys`). Review 4,
    // finding 4: `valkeys://` went out in plain text, with its password, from a build without TLS.
    for scheme in ["rediss", "rediss-cluster", "valkeys", "valkeys-cluster", "VALKEYS", "valkeys-sentinel"] {
        let query = if scheme.ends_with("sentinel") { "?sentinelServiceName=s" } else { "" };
        let url = format!("{scheme}://:hunter2secret@127.0.0.1:{port}{query}");
        let connected = tokio::time::timeout(ms(5_000), async {
            FredStoreBuilder::from_url(&url)?.with_command_timeout(ms(500)).connect().await
        })
        .await;
        match connected {
            Ok(Err(LockError::InvalidArgument(message))) => {
                assert!(message.contains("tls-rustls"), "the refusal does not name the feature: {message}");
            }
            Ok(Err(_)) | Err(_) => {}
            Ok(Ok(store)) => panic!("{scheme}: connected to a listener that never answers: {store:?}"),
        }
    }
    let seen = recorder.await.expect("recorder");
    let text = String::from_utf8_lossy(&seen);
    assert!(!text.contains("hunter2secret"), "the password went out in clear: {text:?}");
}
