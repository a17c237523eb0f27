//! Interleavings that the lock engine must survive, each forced with the scripted store (no timing luck): a
//! cancelled give-back, a wake-up swallowed by a waiter that leaves, an early hand-off wake that overtakes its
//! release, Redlock waiters listening on every instance, subscription requests kept in order, and errors after a
//! write was applied. Each test names the finding of the interleavings issue it guards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Lock, LockError, LockOptions, LockStore, ReleaseOutcome, RetryPolicy};
use lock_testkit::scripted::{Fault, Gate, Injected, Op, ScriptedServer};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits until `cond` holds, at most `within`; panics naming `what` otherwise.
async fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(ms(2)).await;
    }
}

/// A waiter whose backoff and safety poll are far longer than any test here: only a wake-up gets it the lock in
/// time.
fn patient() -> LockOptions {
    let slow = RetryPolicy::default().with_min_delay(ms(20_000)).with_max_delay(ms(20_000));
    LockOptions::new(ms(30_000)).with_wait(ms(60_000)).with_retry(slow)
}

/// A task acquiring `resource` through `lock` with `options`.
fn spawn_acquire(
    lock: &Lock,
    resource: &'static str,
    options: LockOptions,
) -> tokio::task::JoinHandle<Result<lock_core::Guard, LockError>> {
    let lock = lock.clone();
    tokio::spawn(async move { lock.acquire(resource, &options).await })
}

/// Lets a release held at `gate` complete, checks it released, and waits for `waiter`: its guard, and how long it
/// took after the release completed (a wake-up gets it in within a round trip; `patient()` polls 20 s later).
async fn release_completes(
    gate: Gate,
    release: tokio::task::JoinHandle<Result<ReleaseOutcome, LockError>>,
    waiter: tokio::task::JoinHandle<Result<lock_core::Guard, LockError>>,
) -> (lock_core::Guard, Duration) {
    gate.open();
    assert_eq!(release.await.unwrap().unwrap(), ReleaseOutcome::Released);
    let (acquired, waited) = timed(waiter).await;
    (acquired.unwrap().unwrap(), waited)
}

async fn timed<T>(fut: impl Future<Output = T>) -> (T, Duration) {
    let t0 = Instant::now();
    let out = fut.await;
    (out, t0.elapsed())
}

/// Finding 1: a give-back (the release of a grant the acquire cannot use: here a reply lost after the server
/// applied the acquire) whose caller is cancelled before the release reached the server is still sent. The
/// in-flight token stays armed until the release has completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_give_back_still_releases() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client());
    server.once(Op::Acquire, Fault::FailAfter(Injected::Timeout));
    let gate = Gate::new();
    server.once(Op::Release, Fault::Gate(gate.clone()));
    let attempt = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire("give-back", &LockOptions::new(ms(30_000))).await.map(|g| g.is_some()) }
    });
    assert!(gate.wait_arrivals(1, ms(5_000)).await, "the give-back never started");
    assert_eq!(server.memory().held_count(), 1, "the acquire was applied");
    // Cancel the caller while its give-back waits to be sent; that release never reaches the server.
    attempt.abort();
    assert!(attempt.await.unwrap_err().is_cancelled());
    gate.open();
    eventually("the cancelled give-back released the key", ms(2_000), || server.memory().held_count() == 0).await;
}

/// Finding 8 (engine part): an error raised after the server applied the acquire (an `INCRBY` failing after the
/// `SET`, a `WAIT` refused by the ACL) is not "nothing of ours exists": the grant is given back at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_the_grant_was_applied_gives_it_back() {
    for injected in [Injected::Auth, Injected::Backend] {
        let server = ScriptedServer::new();
        let lock = Lock::new(server.client());
        server.once(Op::Acquire, Fault::FailAfter(injected));
        let err = lock.try_acquire("applied", &LockOptions::new(ms(30_000))).await.err();
        assert!(err.as_ref().is_some_and(lock_testkit::scripted::is_injected), "{injected:?}: got {err:?}");
        eventually("the applied grant was given back", ms(2_000), || server.memory().held_count() == 0).await;
        // And the lock is usable at once.
        let g = lock.try_acquire("applied", &LockOptions::new(ms(30_000))).await.unwrap().expect("free");
        assert_eq!(g.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

/// Finding 5: a waiter that was woken by a release and then leaves before its try tells it anything (cancelled
/// while its acquire is on the way) passes its wake-up on: the next waiter gets the lock at once, not at its
/// backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_that_is_cancelled_passes_its_wake_up_on() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client());
    let holder = lock.try_acquire("pass-on", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let first = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("pass-on", &patient()).await.map(|_| ()) }
    });
    eventually("the first waiter sleeps", ms(5_000), || count(&server, Op::Acquire) >= 3).await;
    let second = spawn_acquire(&lock, "pass-on", patient());
    eventually("the second waiter queues", ms(5_000), || {
        lock.stores()[0].release_hub().is_some_and(|hub| hub.waiters(&keys("pass-on")) >= 2)
    })
    .await;
    tokio::time::sleep(ms(20)).await;
    let acquires = count(&server, Op::Acquire);
    let gate = Gate::new();
    server.once(Op::Acquire, Fault::Gate(gate.clone()));
    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    // The release woke the longest waiter, the first; its try is held at the gate. Cancel it there.
    assert!(gate.wait_arrivals(1, ms(5_000)).await, "nobody was woken");
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    gate.open();
    let (second, waited) = timed(second).await;
    let guard = second.unwrap().unwrap();
    assert!(waited < ms(5_000), "the second waiter slept {waited:?}: the wake-up was swallowed");
    assert!(count(&server, Op::Acquire) > acquires + 1);
    guard.release().await.unwrap();
}

/// Releases `holder` with its release held at a gate on its first poll (not queued yet, see
/// `ScriptedStore::ordered`) until the waiter its early wake woke has tried and found the lock still held, then lets
/// the release complete.
async fn release_overtaken_by_its_early_wake(server: &ScriptedServer, holder: lock_core::Guard) {
    let acquires = count(server, Op::Acquire);
    let gate = Gate::new();
    server.once(Op::Release, Fault::Gate(gate.clone()));
    let release = tokio::spawn(async move { holder.release().await });
    assert!(gate.wait_arrivals(1, ms(5_000)).await);
    // The early wake made the waiter try while the release is held back: it found the lock held.
    eventually("the woken waiter tried", ms(5_000), || count(server, Op::Acquire) > acquires).await;
    tokio::time::sleep(ms(20)).await;
    gate.open();
    assert_eq!(release.await.unwrap().unwrap(), ReleaseOutcome::Released);
}

/// Finding 7: with a store that orders commands, the engine wakes the next waiter as soon as the release call is
/// pending. When the release was not queued yet (a busy channel, a coop budget), the woken waiter's try finds
/// the lock still held; it must get the lock once the release completes, not at its backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_wake_that_overtakes_its_release_still_hands_off() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client().ordered(true));
    let holder = lock.try_acquire("early", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let waiter = spawn_acquire(&lock, "early", patient());
    eventually("the waiter sleeps", ms(5_000), || count(&server, Op::Acquire) >= 3).await;
    tokio::time::sleep(ms(20)).await;
    release_overtaken_by_its_early_wake(&server, holder).await;
    let (acquired, waited) = timed(waiter).await;
    let guard = acquired.unwrap().unwrap();
    assert!(waited < ms(5_000), "the waiter slept {waited:?} after the release completed");
    guard.release().await.unwrap();
}

/// The waiter whose try overtook the early release that woke it keeps its turn: the release's completion wakes it
/// again, not the waiter queued behind it (which by then has listened longer). Before the fix the second waiter got
/// the lock and the first slept its whole poll: three waiters of one process got in as [1, 2, 0] on every Redis
/// backend (`every_primitive_bounds_the_wait_of_its_last_waiter`, on an idle machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_woken_waiter_whose_try_overtook_the_release_keeps_its_turn() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client().ordered(true));
    let holder = lock.try_acquire("turn", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let first = spawn_acquire(&lock, "turn", patient());
    eventually("the first waiter sleeps", ms(5_000), || count(&server, Op::Acquire) >= 3).await;
    tokio::time::sleep(ms(20)).await;
    // The second queues behind the first without trying (a newcomer does not barge past local waiters).
    let second = spawn_acquire(&lock, "turn", patient());
    let hub = lock.stores()[0].release_hub().cloned().unwrap();
    eventually("the second waiter queues", ms(5_000), || hub.waiters(&keys("turn")) == 2).await;
    tokio::time::sleep(ms(20)).await;
    release_overtaken_by_its_early_wake(&server, holder).await;
    let (acquired, waited) = timed(first).await;
    let guard = acquired.unwrap().unwrap();
    assert!(waited < ms(5_000), "the first waiter slept {waited:?} after the release completed");
    assert!(!second.is_finished(), "the waiter queued behind got the lock first");
    guard.release().await.unwrap();
    let (next, waited) = timed(second).await;
    next.unwrap().unwrap().release().await.unwrap();
    assert!(waited < ms(5_000), "the second waiter slept {waited:?} after the first released");
}

/// Found by the waiter curve (issue 38): only the try a wake-up started has the turn. A waiter whose try was not
/// woken (a newcomer's first, a safety poll) and met an early release on its way used to wait for that release's
/// completion and try again beside the woken one; with every waiter doing so at every release, 1 000 waiters in one
/// process sent 55 tries per acquisition. Now the release's completion makes only the woken waiter try again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_woken_waiter_tries_again_when_an_early_release_completes() {
    let server = ScriptedServer::new();
    // The release waits at its gate until the newcomer's safety poll: longer than the default call bound.
    let lock = Lock::new(server.client().ordered(true)).with_operation_timeout(ms(60_000));
    let holder = lock.try_acquire("turns", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let first = spawn_acquire(&lock, "turns", patient());
    eventually("the first waiter sleeps", ms(5_000), || count(&server, Op::Acquire) >= 3).await;
    tokio::time::sleep(ms(20)).await;
    let gate = Gate::new();
    server.once(Op::Release, Fault::Gate(gate.clone()));
    let acquires = count(&server, Op::Acquire);
    let release = tokio::spawn(async move { holder.release().await });
    assert!(gate.wait_arrivals(1, ms(5_000)).await);
    // The early wake makes the first waiter try; held (the release waits at the gate), it waits for the completion.
    eventually("the woken waiter tried", ms(5_000), || count(&server, Op::Acquire) > acquires).await;
    // A newcomer queues behind it, tries at its safety poll (not woken), and finds the lock held too. Its next poll
    // comes a safety poll later, far beyond the window below.
    let acquires = count(&server, Op::Acquire);
    let poll = RetryPolicy::default().with_min_delay(ms(50)).with_max_delay(ms(50)).with_safety_poll(ms(5_000));
    let second = spawn_acquire(&lock, "turns", LockOptions::new(ms(30_000)).with_wait(ms(60_000)).with_retry(poll));
    eventually("the newcomer tried", ms(30_000), || count(&server, Op::Acquire) > acquires).await;
    tokio::time::sleep(ms(100)).await;
    let before = count(&server, Op::Acquire);
    let (guard, waited) = release_completes(gate, release, first).await;
    assert!(waited < ms(5_000), "the woken waiter slept {waited:?} after the release completed");
    // Time for a wrong retry to show (it would follow the completion at once).
    tokio::time::sleep(ms(200)).await;
    assert_eq!(
        count(&server, Op::Acquire) - before,
        1,
        "only the woken waiter may try at the release's completion; the newcomer tried too"
    );
    assert!(!second.is_finished());
    guard.release().await.unwrap();
    let (next, waited) = timed(second).await;
    next.unwrap().unwrap().release().await.unwrap();
    assert!(waited < ms(5_000), "the newcomer slept {waited:?} after the first released");
}

/// Finding 4: a Redlock waiter hears releases on every instance, not only the first: with instance 0 down, the
/// holder's release on instances 1 and 2 wakes a waiter in another process at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_waiters_hear_every_instance() {
    let servers = three_servers();
    servers[0].rule(|_| Some(Fault::FailBefore(Injected::Unavailable)));
    let process = || redlock_over(&servers);
    let (holder_process, waiter_process) = (process(), process());
    let holder = holder_process.try_acquire("redlock", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    assert_eq!(holder.held_instances(), vec![1, 2]);
    let waiter = tokio::spawn(async move { waiter_process.acquire("redlock", &patient()).await });
    // The waiter's tries reach whichever instances answer first; let it settle into its sleep.
    tokio::time::sleep(ms(300)).await;
    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    let (acquired, waited) = timed(waiter).await;
    let guard = acquired.unwrap().unwrap();
    assert!(waited < ms(5_000), "the waiter slept {waited:?}: it heard only instance 0");
    guard.release().await.unwrap();
}

/// Finding 6: a subscribe and an unsubscribe of one channel reach the server in the order the hub decided them.
/// The hub gives up an idle channel (no waiter left) once more channels went idle than it keeps subscribed (32),
/// while a new waiter arrives on it (subscribe); whatever the timing, the server ends up subscribed exactly when the
/// hub has the channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_requests_reach_the_server_in_order() {
    let server = ScriptedServer::new();
    let client = server.client();
    let hub = client.hub().unwrap().clone();
    // The window between the hub's decision to unsubscribe and the request reaching the server.
    server.slow_unsubscribe(ms(100));
    let first = hub.watch("channel").await;
    assert!(server.subscriptions(client.id()).contains("channel"));
    let mut others = Vec::new();
    for i in 0..64 {
        others.push(hub.watch(&format!("other-{i}")).await);
    }
    // Idle first, then given up as the others go idle after it.
    let leaving = std::thread::spawn(move || {
        drop(first);
        drop(others);
    });
    tokio::time::sleep(ms(30)).await;
    let second = hub.watch("channel").await;
    leaving.join().unwrap();
    assert_eq!(hub.waiters("channel"), 1);
    assert!(
        server.subscriptions(client.id()).contains("channel"),
        "the hub has a waiter but the server is unsubscribed; requests: {:?}",
        server.subscription_requests(client.id())
    );
    drop(second);
    // Idle again, and among the most recent: still subscribed, so a waiter coming back needs no new SUBSCRIBE.
    assert!(server.subscriptions(client.id()).contains("channel"));
}

/// Three scripted servers, the instances of a Redlock.
fn three_servers() -> Vec<ScriptedServer> {
    (0..3).map(|_| ScriptedServer::new()).collect()
}

/// A Redlock over `servers`, through a new client of each (one process).
fn redlock_over(servers: &[ScriptedServer]) -> Lock {
    let stores = servers.iter().map(|s| Arc::new(s.client()) as Arc<dyn LockStore>).collect();
    Lock::redlock(stores).build().unwrap()
}

/// The errors the scripted store injects are told apart from errors the engine makes up.
#[tokio::test]
async fn injected_errors_are_recognisable() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client());
    server.once(Op::Acquire, Fault::FailBefore(Injected::Unavailable));
    let err = lock.try_acquire("x", &LockOptions::new(ms(1_000))).await.unwrap_err();
    assert!(lock_testkit::scripted::is_injected(&err), "{err:?}");
    assert!(!lock_testkit::scripted::is_injected(&LockError::unavailable(std::io::Error::other("real"))));
}

fn count(server: &ScriptedServer, op: Op) -> usize {
    server.log().iter().filter(|c| c.call.op == op).count()
}

fn keys(resource: &str) -> String {
    lock_core::LockKeys::new(lock_core::DEFAULT_PREFIX, resource).unwrap().channel().to_owned()
}

/// Finding 12 (`attempt_limit_is_respected` flaked on Redlock): a Redlock waiter whose try was granted on a
/// minority gives that grant back, and the give-back woke the waiter itself (its listener is registered before
/// the try), so its next try came at once instead of after the pause. A give-back of a minority grant is no
/// release of the lock and wakes nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_give_back_wakes_nobody() {
    let servers = three_servers();
    let lock = redlock_over(&servers);
    // The holder holds instances 1 and 2 only; instance 0 is free, so every try of the waiter is granted there
    // and given back.
    servers[0].once(Op::Acquire, Fault::FailBefore(Injected::Unavailable));
    let holder = lock.try_acquire("give-back", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    assert_eq!(holder.held_instances(), vec![1, 2]);
    let policy = RetryPolicy::default().with_min_delay(ms(20)).with_max_delay(ms(20)).with_max_attempts(Some(3));
    let opts = LockOptions::new(ms(30_000)).with_wait(ms(10_000)).with_retry(policy);
    let (err, took) = timed(lock.acquire("give-back", &opts)).await;
    assert!(matches!(err, Err(LockError::Contended { .. })), "{err:?}");
    // Three tries: the first, one right after subscribing, one after a 20 ms pause.
    assert!(took >= ms(19), "3 tries with a 20 ms pause took only {took:?}");
    assert_eq!(count(&servers[0], Op::Release), 3, "each try's grant on instance 0 was given back");
    holder.release().await.unwrap();
}

/// Found by the schedule explorer (seed 1592592276): an early-woken release is on its way when the last waiter
/// leaves; a waiter arriving before the release completes must still be woken by its completion (the hub kept the
/// channel's state for it instead of starting a fresh one the completion does not know).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_arriving_while_an_early_release_is_on_its_way_is_woken() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client().ordered(true));
    let holder = lock.try_acquire("arrives", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let first = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("arrives", &patient()).await.map(|_| ()) }
    });
    eventually("the first waiter sleeps", ms(5_000), || count(&server, Op::Acquire) >= 3).await;
    tokio::time::sleep(ms(20)).await;
    let acquires = count(&server, Op::Acquire);
    let gate = Gate::new();
    server.once(Op::Release, Fault::Gate(gate.clone()));
    let release = tokio::spawn(async move { holder.release().await });
    assert!(gate.wait_arrivals(1, ms(5_000)).await);
    // The early wake made the first waiter try (held: the release waits at the gate); then it leaves.
    eventually("the woken waiter tried", ms(5_000), || count(&server, Op::Acquire) > acquires).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    // A newcomer finds the lock held and goes to sleep while the release is still on its way.
    let acquires = count(&server, Op::Acquire);
    let second = spawn_acquire(&lock, "arrives", patient());
    // Registered (the process still listens on the channel, so before its try) and tried once at least.
    let hub = lock.stores()[0].release_hub().cloned().unwrap();
    let channel = keys("arrives");
    eventually("the newcomer sleeps", ms(5_000), || {
        hub.waiters(&channel) == 1 && count(&server, Op::Acquire) > acquires
    })
    .await;
    tokio::time::sleep(ms(20)).await;
    let (guard, waited) = release_completes(gate, release, second).await;
    assert!(waited < ms(5_000), "the newcomer slept {waited:?} after the release completed");
    guard.release().await.unwrap();
}

/// Found by the schedule explorer (seed 1592590360): a release that started when nobody waited (so nobody was
/// woken early) is overtaken by a newcomer's tries; its completion wakes the newcomer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_arriving_while_an_unwatched_release_is_on_its_way_is_woken() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client().ordered(true));
    let holder = lock.try_acquire("unwatched", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let gate = Gate::new();
    server.once(Op::Release, Fault::Gate(gate.clone()));
    let release = tokio::spawn(async move { holder.release().await });
    assert!(gate.wait_arrivals(1, ms(5_000)).await);
    let acquires = count(&server, Op::Acquire);
    let waiter = spawn_acquire(&lock, "unwatched", patient());
    eventually("the newcomer sleeps", ms(5_000), || count(&server, Op::Acquire) >= acquires + 2).await;
    tokio::time::sleep(ms(20)).await;
    let (guard, waited) = release_completes(gate, release, waiter).await;
    assert!(waited < ms(5_000), "the newcomer slept {waited:?} after the release completed");
    guard.release().await.unwrap();
}

/// Found by the schedule explorer (seeds 1010757, 1030568): the waiter an early release woke finds the lock still
/// held (the release is not through yet) and then runs out of budget. Its wake-up is not lost with it: the
/// release's completion wakes the next waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_woken_waiter_that_runs_out_of_budget_leaves_the_wake_up_behind() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client().ordered(true));
    let holder = lock.try_acquire("budget", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let short = patient().with_wait(ms(300));
    let first = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("budget", &short).await.map(|_| ()) }
    });
    eventually("the first waiter sleeps", ms(5_000), || count(&server, Op::Acquire) >= 3).await;
    let second = spawn_acquire(&lock, "budget", patient());
    eventually("the second waiter queues", ms(5_000), || {
        lock.stores()[0].release_hub().is_some_and(|hub| hub.waiters(&keys("budget")) >= 2)
    })
    .await;
    let (release_gate, try_gate) = (Gate::new(), Gate::new());
    server.once(Op::Release, Fault::Gate(release_gate.clone()));
    server.once(Op::Acquire, Fault::Gate(try_gate.clone()));
    let release = tokio::spawn(async move { holder.release().await });
    // The early wake reached the first waiter; its try waits at the gate until its budget is gone.
    assert!(try_gate.wait_arrivals(1, ms(5_000)).await, "nobody was woken early");
    tokio::time::sleep(ms(350)).await;
    try_gate.open();
    let first = first.await.unwrap();
    assert!(matches!(first, Err(LockError::Contended { .. })), "{first:?}");
    let (guard, waited) = release_completes(release_gate, release, second).await;
    assert!(waited < ms(5_000), "the second waiter slept {waited:?}: the early wake-up left with the first");
    guard.release().await.unwrap();
}

/// Found by the schedule explorer (seed 2012315, an overlap on Redlock): an extension to a shorter TTL that fails
/// after the server applied it (a lost reply) shortened the lock there, while the holder kept its old, later
/// deadline; after the short TTL another owner got the lock. A failed extension that may have applied now moves
/// the holder's deadline to the earlier of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_extension_that_may_have_shortened_the_lock_shortens_the_holders_deadline() {
    for instances in [1usize, 3] {
        let servers: Vec<ScriptedServer> = (0..instances).map(|_| ScriptedServer::new()).collect();
        let lock = if instances == 1 {
            Lock::new(servers[0].client())
        } else {
            let stores = servers.iter().map(|s| Arc::new(s.client()) as Arc<dyn LockStore>).collect();
            Lock::redlock(stores).build().unwrap()
        };
        let holder = lock.try_acquire("shortened", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
        for server in &servers {
            server.once(Op::Extend, Fault::FailAfter(Injected::Timeout));
        }
        let before = Instant::now();
        assert!(holder.extend(ms(50)).await.is_err(), "{instances}: the extension was reported as failed");
        assert!(
            holder.valid_until() <= before + ms(50),
            "{instances} instance(s): the servers may hold the lock for 50 ms only, the holder believes {:?} more",
            holder.valid_until().saturating_duration_since(Instant::now())
        );
        tokio::time::sleep(ms(80)).await;
        assert!(holder.is_lost());
        let other = lock.try_acquire("shortened", &LockOptions::new(ms(30_000))).await.unwrap();
        assert!(other.is_some(), "the lock did expire on the servers");
    }
}

/// Found by the schedule explorer (seed 4026646): a release whose wake-up finds nobody listening (the only
/// waiter is registered but still subscribing, or left after it was woken) was lost, and a newcomer queued behind
/// that waiter (fairness: no barging past local waiters) slept its whole backoff with the lock free. Such a wake-up
/// is kept for the next newcomer, which tries at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_nobody_heard_lets_the_next_newcomer_try_at_once() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client());
    let holder = lock.try_acquire("unheard", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let subscribing = Gate::new();
    server.gate_subscriptions(subscribing.clone());
    // The first waiter tries, finds the lock held, and registers; its subscription waits at the gate, so it is
    // registered without listening.
    let first = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire("unheard", &patient()).await.map(|_| ()) }
    });
    assert!(subscribing.wait_arrivals(1, ms(5_000)).await);
    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    let (second, waited) = timed(lock.acquire("unheard", &patient())).await;
    let guard = second.unwrap();
    assert!(waited < ms(5_000), "the newcomer queued behind a waiter that never heard the release: {waited:?}");
    subscribing.open();
    guard.release().await.unwrap();
    first.abort();
}

/// Found by the conformance suite on CI (a semaphore waiter woken 5 s late, after 2d87f36): a waiter registers
/// after its first try, and a release of its process starts while its subscription is still being confirmed. The
/// release's early wake finds nobody listening and is kept; the waiter's next try overtakes the release and finds
/// the lock held. That try was not started by a wake-up, so it did not count as the waiter's turn, and the kept
/// wake-up, meant for a newcomer, was never used: the waiter slept until its safety poll with the lock free. A
/// registered waiter now takes a kept wake-up before its try, which makes that try its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_kept_while_the_waiter_subscribed_is_its_turn() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client().ordered(true));
    let holder = lock.try_acquire("kept", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let subscribing = Gate::new();
    server.gate_subscriptions(subscribing.clone());
    let waiter = spawn_acquire(&lock, "kept", patient());
    // Tried once, registered, and waits for its subscription's confirmation: registered, not listening.
    assert!(subscribing.wait_arrivals(1, ms(5_000)).await);
    let releasing = Gate::new();
    server.once(Op::Release, Fault::Gate(releasing.clone()));
    let release = tokio::spawn(async move { holder.release().await });
    assert!(releasing.wait_arrivals(1, ms(5_000)).await);
    // The release is on its way (its early wake kept); the waiter's next try overtakes it.
    let acquires = count(&server, Op::Acquire);
    subscribing.open();
    eventually("the waiter tried again", ms(5_000), || count(&server, Op::Acquire) > acquires).await;
    tokio::time::sleep(ms(20)).await;
    let (guard, waited) = release_completes(releasing, release, waiter).await;
    assert!(waited < ms(5_000), "the waiter slept {waited:?} after the release completed: its wake-up was lost");
    guard.release().await.unwrap();
}

/// A fair lock's holder (client 0 of `server`) and a head waiter (client 1, in a task), polled until the head
/// listens for its turn: `(holder, the head's acquire)`.
async fn holder_and_listening_head(
    server: &ScriptedServer,
    resource: &'static str,
    fair: impl Fn(Duration) -> LockOptions + Send + 'static,
) -> (lock_core::Guard, tokio::task::JoinHandle<Result<lock_core::Guard, LockError>>) {
    let (a, b) = (Lock::new(server.client()), Lock::new(server.client()));
    let holder = a.try_acquire(resource, &fair(ms(0))).await.unwrap().unwrap();
    let hub = b.stores()[0].release_hub().cloned().unwrap();
    let head = tokio::spawn(async move { b.acquire(resource, &fair(ms(10_000))).await });
    let channel = keys(resource);
    eventually("the head listens for its turn", ms(5_000), || hub.waiters(&channel) == 1).await;
    (holder, head)
}

/// When the head (client 1) sent its tries.
fn head_tries(server: &ScriptedServer) -> Vec<Instant> {
    server.log().iter().filter(|c| c.call.op == Op::Acquire && c.call.client == 1).map(|c| c.at).collect()
}

/// Whether `guard` holds `resource`'s key on `server`.
fn holds(server: &ScriptedServer, resource: &str, guard: &lock_core::Guard) -> bool {
    let lock_keys = lock_core::LockKeys::new(lock_core::DEFAULT_PREFIX, resource).unwrap();
    server.memory().holder(&lock_keys).as_ref() == Some(guard.token())
}

/// Issue 19: a waiter that a fair release granted the lock (see `FAIR_RELEASE`) trusts it for the grant's lease only
/// (its waiter TTL here, shorter than its TTL), counted from a try that ran before the grant (its first). When the
/// extension to its TTL never gets through, the guard is lost at the lease's end: it never trusts the key longer
/// than the key lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_waiter_trusts_only_its_lease_until_extended() {
    let server = ScriptedServer::new();
    let waiter_ttl = ms(1_500);
    let fair = move |wait| LockOptions::new(ms(30_000)).with_wait(wait).with_fair_queue(waiter_ttl);
    // Every extension fails before it reaches the server.
    server.rule(|call| (call.op == Op::Extend).then_some(Fault::FailBefore(Injected::Unavailable)));
    let (holder, head) = holder_and_listening_head(&server, "granted", fair).await;
    // Released a while after one of the head's heartbeats (every 500 ms) and well before the next: its last try is
    // then well before the grant, and the grant's lease runs from the grant.
    let seen = head_tries(&server).len();
    eventually("a heartbeat of the head's", ms(5_000), || head_tries(&server).len() > seen).await;
    tokio::time::sleep(ms(40)).await;
    let last_try = head_tries(&server).last().copied().unwrap();
    holder.release().await.unwrap();
    let g = head.await.unwrap().unwrap();
    assert!(holds(&server, "granted", &g), "granted to someone else");
    assert_eq!(head_tries(&server).last().copied(), Some(last_try), "the head tried for its grant");
    assert!(g.valid_until() <= last_try + waiter_ttl, "the grantee trusts the lock past its last try's lease");
    // A holder that checks before each write (`is_lost`) reads the signal the moment the lease ends, before the
    // watchdog's timer for the same deadline fires: the reason must already say that renewal failed.
    let reason = async {
        loop {
            if let Some(reason) = g.lost_signal().reason() {
                return reason;
            }
            tokio::task::yield_now().await;
        }
    };
    let reason = tokio::time::timeout(waiter_ttl + ms(1_000), reason).await;
    assert_eq!(reason, Ok(lock_core::LostReason::RenewalFailed));
    assert!(count(&server, Op::Extend) > 0, "the grantee never tried to extend its lease");
}

/// The other side of the test above: once the grantee's one extension got through, nobody renews the lock (no
/// renewal policy), and the end of its TTL is an expiry, not a failed renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_waiter_extended_once_expires_at_its_ttl() {
    let server = ScriptedServer::new();
    let ttl = ms(2_500);
    let fair = move |wait| LockOptions::new(ttl).with_wait(wait).with_fair_queue(ms(1_500));
    let (holder, head) = holder_and_listening_head(&server, "extended", fair).await;
    holder.release().await.unwrap();
    let g = head.await.unwrap().unwrap();
    eventually("the grantee's extension", ms(5_000), || count(&server, Op::Extend) > 0).await;
    let reason = tokio::time::timeout(ttl + ms(1_000), g.lost_signal().lost()).await;
    assert_eq!(reason, Ok(lock_core::LostReason::Expired));
    assert_eq!(count(&server, Op::Extend), 1, "extended more than once without a renewal policy");
}

/// Issue 19: a fair release's grant is a write no replica acknowledged. A waiter that asked for replica
/// acknowledgement (`with_replica_ack`) therefore claims its grant with a try of its own, whose acknowledgement covers
/// the grant written before it, instead of returning it from the announcement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_is_claimed_with_a_try_when_replica_acks_were_asked_for() {
    let server = ScriptedServer::new();
    let acked = |wait| {
        let ack = lock_core::ReplicaAck::new(1, ms(100)).with_on_shortfall(lock_core::Shortfall::Accept);
        LockOptions::new(ms(30_000)).with_wait(wait).with_fair_queue(ms(1_500)).with_replica_ack(ack)
    };
    let (holder, head) = holder_and_listening_head(&server, "acked", acked).await;
    let before = head_tries(&server).len();
    holder.release().await.unwrap();
    let g = head.await.unwrap().unwrap();
    assert!(holds(&server, "acked", &g), "granted to someone else");
    assert!(head_tries(&server).len() > before, "returned the grant from the announcement, unacknowledged by replicas");
}

/// A holder of `resource` (client 0 of `server`) and a waiter for it (client 1, in a task, with `waiting`), polled
/// until the waiter listens for the release.
async fn holder_and_listening_waiter(
    server: &ScriptedServer,
    resource: &'static str,
    waiting: LockOptions,
) -> (lock_core::Guard, tokio::task::JoinHandle<Result<lock_core::Guard, LockError>>) {
    let (a, b) = (Lock::new(server.client()), Lock::new(server.client()));
    let holder = a.try_acquire(resource, &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let hub = b.stores()[0].release_hub().cloned().unwrap();
    let waiter = tokio::spawn(async move { b.acquire(resource, &waiting).await });
    let channel = keys(resource);
    eventually("the waiter listens", ms(5_000), || hub.waiters(&channel) == 1).await;
    (holder, waiter)
}

/// Releases `holder`, then awaits the waiter's acquire: its guard, and how long that took.
async fn released_then_taken(
    holder: lock_core::Guard,
    waiter: tokio::task::JoinHandle<Result<lock_core::Guard, LockError>>,
) -> (lock_core::Guard, Duration) {
    timed(async {
        holder.release().await.unwrap();
        waiter.await.unwrap().unwrap()
    })
    .await
}

/// When the waiter (client 1) sent its tries.
fn tries_of(server: &ScriptedServer, client: usize) -> usize {
    server.log().iter().filter(|c| c.call.op == Op::Acquire && c.call.client == client).count()
}

/// Issue 19: a waiter that listens for releases does not poll the server on its backoff while the holder holds (with
/// a 250 ms hold and eight waiting processes, the backoff's tries were two thirds of the default lock's server
/// commands): it tries once, listens, and sleeps until a release is announced, the holder's key expires, or its
/// safety poll passes. A release is then heard at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listening_waiter_does_not_poll_while_the_lock_is_held() {
    let server = ScriptedServer::new();
    // The default retry policy: its backoff alone would try about a dozen times in the 800 ms below.
    let waiting = LockOptions::new(ms(30_000)).with_wait(ms(20_000));
    let (holder, waiter) = holder_and_listening_waiter(&server, "held-long", waiting).await;
    tokio::time::sleep(ms(800)).await;
    // Its first try, and the look again once subscribed (a release may have landed before the subscription).
    let tries = tries_of(&server, 1);
    assert!(tries <= 2, "the waiter polled {tries} times while listening");
    let (guard, waited) = released_then_taken(holder, waiter).await;
    assert!(waited < ms(500), "the release was not heard: {waited:?}");
    guard.release().await.unwrap();
}

/// The other half of the trade: a lost announcement costs a listening waiter at most its safety poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_announcement_costs_a_listening_waiter_its_safety_poll() {
    let server = ScriptedServer::new();
    let poll = ms(600);
    let waiting =
        LockOptions::new(ms(30_000)).with_wait(ms(20_000)).with_retry(RetryPolicy::default().with_safety_poll(poll));
    let (holder, waiter) = holder_and_listening_waiter(&server, "unannounced", waiting).await;
    server.notification_rule(|_| Some(lock_testkit::scripted::Delivery::Drop));
    let (guard, waited) = released_then_taken(holder, waiter).await;
    assert!(waited <= poll + ms(300), "a lost announcement cost more than the safety poll: {waited:?}");
    guard.release().await.unwrap();
}

/// The safety poll is for waiters that hear releases: a waiter whose subscription the server refused (an ACL without
/// the channel, say) hears nothing, so it keeps polling on its backoff and takes a released lock within the
/// backoff's cap, not its safety poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_subscription_was_refused_polls_on_its_backoff() {
    let server = ScriptedServer::new();
    server.refuse_subscriptions(true);
    let (a, b) = (Lock::new(server.client()), Lock::new(server.client()));
    let holder = a.try_acquire("deaf", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    let polling = RetryPolicy::default().with_max_delay(ms(50)).with_safety_poll(ms(20_000));
    let waiting = LockOptions::new(ms(30_000)).with_wait(ms(20_000)).with_retry(polling);
    let waiter = tokio::spawn(async move { b.acquire("deaf", &waiting).await });
    eventually("the waiter tried twice", ms(5_000), || tries_of(&server, 1) >= 2).await;
    let (guard, waited) = released_then_taken(holder, waiter).await;
    assert!(waited < ms(1_000), "a waiter that hears nothing slept its safety poll: {waited:?}");
    guard.release().await.unwrap();
}

/// A Redlock waiter keeps its backoff, not its safety poll: a quorum can become reachable without any release to
/// announce it. Here instance 2 is down and another owner holds instance 1, so every try is granted on instance 0
/// only and given back (which announces nothing to its own process); when instance 2 comes back, the waiter's next
/// backoff step (50 ms at most) takes the lock, not its safety poll (20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_waiter_retries_on_its_backoff_when_an_instance_comes_back() {
    let servers = three_servers();
    let lock = redlock_over(&servers);
    let other = Lock::new(servers[1].client());
    let _held = other.try_acquire("comes-back", &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    servers[2].rule(|_| Some(Fault::FailBefore(Injected::Unavailable)));
    let policy = RetryPolicy::default().with_max_delay(ms(50)).with_safety_poll(ms(20_000));
    let opts = LockOptions::new(ms(30_000)).with_wait(ms(20_000)).with_retry(policy);
    let waiter = tokio::spawn(async move { lock.acquire("comes-back", &opts).await });
    eventually("the waiter gave a minority grant back", ms(5_000), || count(&servers[0], Op::Release) >= 2).await;
    servers[2].clear_rules();
    let (guard, took) = timed(async { waiter.await.unwrap().unwrap() }).await;
    assert!(took < ms(1_000), "the waiter slept {took:?} after the quorum became reachable");
    assert_eq!(guard.held_instances(), vec![0, 2]);
    guard.release().await.unwrap();
}

/// A process (client 0) holding `resource` for 30 s: its lock, to keep the process alive, and its guard.
async fn held_by_first_process(server: &ScriptedServer, resource: &str) -> (Lock, lock_core::Guard) {
    let first = Lock::new(server.client());
    let guard = first.try_acquire(resource, &LockOptions::new(ms(30_000))).await.unwrap().unwrap();
    (first, guard)
}

/// `k` waiters on `resource`, each in its own process (its own client and hub), patient (only a wake-up gets them
/// the lock in time), each having tried and listening; started in order, each once the one before has tried.
async fn waiting_processes(
    server: &ScriptedServer,
    resource: &'static str,
    k: usize,
) -> Vec<tokio::task::JoinHandle<Result<lock_core::Guard, LockError>>> {
    let mut waiters = Vec::new();
    for _ in 0..k {
        let lock = Lock::new(server.client());
        let (client, hub) = (server.clients() - 1, lock.stores()[0].release_hub().cloned().unwrap());
        waiters.push(tokio::spawn(async move { lock.acquire(resource, &patient()).await }));
        let channel = keys(resource);
        eventually("the waiter listens", ms(5_000), || hub.waiters(&channel) == 1).await;
        // Its first try, and the look again once subscribed.
        eventually("the waiter tried", ms(5_000), || tries_of(server, client) >= 2).await;
    }
    waiters
}

/// Issue 19: a release wakes one waiting process, not one waiter in every process. With one waiter in each of K
/// processes (the usual shape: one per pod), the release names the first process its waiters lined up on the
/// server, and only that one tries: K hand-offs cost K tries. A herd (every process's hub waking its own waiter on
/// each release) costs K + (K − 1) + … + 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiting_process_not_every_one() {
    const K: usize = 6;
    let server = ScriptedServer::new();
    let (_first, mut guard) = held_by_first_process(&server, "herd").await;
    let mut waiters = waiting_processes(&server, "herd", K).await;
    let tries = || (1..=K).map(|c| tries_of(&server, c)).sum::<usize>();
    let before = tries();
    let mut order = Vec::new();
    while !waiters.is_empty() {
        let ((next, at, rest), waited) = timed(async {
            guard.release().await.unwrap();
            futures_util::future::select_all(waiters).await
        })
        .await;
        assert!(waited < ms(2_000), "a hand-off took {waited:?}: the release woke nobody who could take the lock");
        guard = next.unwrap().unwrap();
        order.push(at);
        waiters = rest;
    }
    guard.release().await.unwrap();
    let per_client: Vec<usize> = (1..=K).map(|c| tries_of(&server, c)).collect();
    assert_eq!(tries() - before, K, "{K} hand-offs, tries per process {per_client:?}");
}

/// Issue 19: a process that waits for a lock again (every competitor of a contended lock, looping) still listens on
/// its channel (the hub keeps a few idle channels subscribed), so its waiter registers before its first try, and
/// that try lines the process up: one failed try per wait, not two (a first try that cannot line up, then the look
/// again once registered; with eight processes that second try was a third of the default lock's server commands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_waits_again_lines_up_with_its_first_try() {
    let server = ScriptedServer::new();
    let (_first, guard) = held_by_first_process(&server, "again").await;
    let process = Lock::new(server.client());
    let waiting = |process: &Lock| {
        let process = process.clone();
        tokio::spawn(async move { process.acquire("again", &patient()).await })
    };
    // The first wait subscribes: a try that cannot line the process up, then the look again once subscribed.
    let waiter = waiting(&process);
    eventually("the waiter tried", ms(5_000), || tries_of(&server, 1) >= 2).await;
    let (mine, _) = released_then_taken(guard, waiter).await;
    assert_eq!(tries_of(&server, 1), 3);
    mine.release().await.unwrap();
    let (_first, guard) = held_by_first_process(&server, "again").await;
    let waiter = waiting(&process);
    eventually("the waiter tried", ms(5_000), || tries_of(&server, 1) >= 4).await;
    // Long enough for a look again (it needs no network wait: the subscription is there).
    tokio::time::sleep(ms(200)).await;
    assert_eq!(tries_of(&server, 1), 4, "the waiter tried again before anything was released");
    let (mine, waited) = released_then_taken(guard, waiter).await;
    assert!(waited < ms(2_000), "the release did not reach the lined-up process: {waited:?}");
    assert_eq!(tries_of(&server, 1), 5, "one failed try and the one that took the lock");
    mine.release().await.unwrap();
}

/// The same for a fair lock's waiter: a process that queues again, still listening on the channel, registers
/// before its first try, which takes its place. Next in line, it no longer tries a second time (the look again for
/// a grant announced before it listened): a release grants it the lock, and the announcement returns it. With one
/// waiter in each of two processes, that second try was a third of the fair lock's server commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_process_that_queues_again_takes_its_place_with_its_first_try() {
    let server = ScriptedServer::new();
    let fair = |wait| LockOptions::new(ms(30_000)).with_wait(wait).with_fair_queue(ms(30_000));
    let (holding, process) = (Lock::new(server.client()), Lock::new(server.client()));
    let hub = process.stores()[0].release_hub().cloned().unwrap();
    let channel = keys("queues-again");
    for round in 0..2 {
        let holder = holding.try_acquire("queues-again", &fair(ms(0))).await.unwrap().unwrap();
        let before = tries_of(&server, 1);
        let waiter = {
            let process = process.clone();
            tokio::spawn(async move { process.acquire("queues-again", &fair(ms(10_000))).await })
        };
        // The first wait subscribes: the place-taking try, then the look again as the head. The grant needs none.
        let expected = if round == 0 { (2, 2) } else { (1, 1) };
        eventually("the waiter queues", ms(5_000), || {
            hub.waiters(&channel) == 1 && tries_of(&server, 1) >= before + expected.0
        })
        .await;
        // Long enough for a look again (it needs no network wait: the subscription is there).
        tokio::time::sleep(ms(200)).await;
        let queued = tries_of(&server, 1) - before;
        let (mine, waited) = released_then_taken(holder, waiter).await;
        assert!(waited < ms(2_000), "round {round}: the grant did not reach the head: {waited:?}");
        assert!(holds(&server, "queues-again", &mine), "round {round}: granted to someone else");
        let tries = (queued, tries_of(&server, 1) - before);
        mine.release().await.unwrap();
        assert_eq!(tries, expected, "round {round}: tries while queued, and in all");
    }
}

/// Cancellation storm on the path above: waiters of a process that still listens on the lock's channel (so each
/// registers before its first try), one after another, are dropped at each of their first ten await points while
/// another process holds the lock, plain and fair. None leaves a registration, a place or a wake-up behind: the
/// process's next waiter is woken by the release at once, and a fair queue ends empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_register_before_their_first_try_survive_being_dropped_at_every_await() {
    for fair in [false, true] {
        let server = ScriptedServer::new();
        let resource = if fair { "storm-again-fair" } else { "storm-again" };
        let options = if fair { patient().with_fair_queue(ms(30_000)) } else { patient() };
        let holder = Lock::new(server.client()).try_acquire(resource, &options.clone().with_wait(ms(0))).await;
        let holder = holder.unwrap().unwrap();
        let process = Lock::new(server.client());
        let hub = process.stores()[0].release_hub().cloned().unwrap();
        let channel = keys(resource);
        // A first waiter subscribes the process, then leaves: the channel stays subscribed.
        let first = {
            let (process, options) = (process.clone(), options.clone());
            tokio::spawn(async move { process.acquire(resource, &options).await })
        };
        eventually("the first waiter listens", ms(5_000), || hub.waiters(&channel) == 1).await;
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        for polls in 0..10 {
            // Cut off after `polls` polls, or (once it sleeps until a release) dropped where it sleeps.
            let waiter = lock_testkit::scripted::CancelAfter::new(process.acquire(resource, &options), polls);
            let cut = tokio::time::timeout(ms(100), waiter).await;
            assert!(!matches!(cut, Ok(Some(_))), "fair: {fair}: a waiter finished while the lock was held: {cut:?}");
            eventually("the dropped waiter unregistered", ms(5_000), || hub.waiters(&channel) == 0).await;
        }
        if fair {
            // Dropped waiters give their places back in the background.
            let t0 = Instant::now();
            while process.fair_queue_len(resource).await.unwrap() > 0 {
                assert!(t0.elapsed() < ms(5_000), "a dropped fair waiter kept its place");
                tokio::time::sleep(ms(5)).await;
            }
        }
        let waiter = {
            let (process, options) = (process.clone(), options.clone());
            tokio::spawn(async move { process.acquire(resource, &options).await })
        };
        eventually("the last waiter listens", ms(5_000), || hub.waiters(&channel) == 1).await;
        let (guard, waited) = released_then_taken(holder, waiter).await;
        assert!(waited < ms(2_000), "fair: {fair}: the waiter after the storm waited {waited:?}");
        guard.release().await.unwrap();
    }
}

/// A release names a process whose waiter has left (it ran out of budget, or was cancelled, after its try lined the
/// process up): that process passes the wake-up on to the next waiting process, which takes the lock at once, not
/// at its safety poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_for_a_process_whose_waiter_left_is_passed_on() {
    for cancelled in [false, true] {
        let server = ScriptedServer::new();
        let resource = if cancelled { "left-cancelled" } else { "left-out-of-budget" };
        let (_first, guard) = held_by_first_process(&server, resource).await;
        // Lined up first, then gone.
        // The process lives on (its lock, store and subscriber); only its waiter leaves.
        let process = Lock::new(server.client());
        let leaving = process.clone();
        let budget = if cancelled { ms(60_000) } else { ms(300) };
        let left = tokio::spawn(async move { leaving.acquire(resource, &patient().with_wait(budget)).await });
        eventually("the leaving waiter tried", ms(5_000), || tries_of(&server, 1) >= 2).await;
        let mut rest = waiting_processes(&server, resource, 1).await;
        if cancelled {
            left.abort();
            assert!(left.await.unwrap_err().is_cancelled());
        } else {
            assert!(matches!(left.await.unwrap(), Err(LockError::Contended { .. })));
        }
        let (next, waited) = released_then_taken(guard, rest.pop().unwrap()).await;
        assert!(waited < ms(2_000), "cancelled: {cancelled}: the next process waited {waited:?}");
        next.release().await.unwrap();
        drop(process);
    }
}

/// What the one-process wake-up costs: a process that dies while it is lined up (here: its waiter is gone and
/// nothing reaches it any more) swallows the release that names it. The other processes' waiters then take the lock
/// at their safety poll, once: the release took the dead process out of the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_dies_lined_up_costs_the_others_one_safety_poll() {
    let server = ScriptedServer::new();
    let (_first, guard) = held_by_first_process(&server, "died").await;
    let dead = Lock::new(server.client());
    let dying = dead.clone();
    let gone = tokio::spawn(async move { dying.acquire("died", &patient()).await });
    eventually("the dying waiter lined up", ms(5_000), || tries_of(&server, 1) >= 2).await;
    let poll = ms(600);
    let waiting = LockOptions::new(ms(30_000))
        .with_wait(ms(20_000))
        .with_retry(RetryPolicy::default().with_max_delay(ms(100)).with_safety_poll(poll));
    let survivor = Lock::new(server.client());
    let hub = survivor.stores()[0].release_hub().cloned().unwrap();
    let waiter = tokio::spawn(async move { survivor.acquire("died", &waiting).await });
    eventually("the survivor lined up", ms(5_000), || tries_of(&server, 2) >= 2 && hub.waiters(&keys("died")) == 1)
        .await;
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    server.notification_rule(|note| (note.to == 1).then_some(lock_testkit::scripted::Delivery::Drop));
    let (taken, waited) = released_then_taken(guard, waiter).await;
    assert!(waited <= poll + ms(300), "the survivor waited {waited:?}, beyond its safety poll");
    assert!(waited >= poll / 2, "the survivor took the lock after {waited:?}: was the dead process named at all?");
    taken.release().await.unwrap();
    drop(dead);
}

/// A multi-resource waiter lines its process up too: it takes its turn among single-lock waiters of other processes
/// instead of waiting for a release that names nobody (a waiter that did not line up is woken only when nobody who
/// did is left, or at its safety poll). Lined up in the order single, multi, single, the lock goes to them in that
/// order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_resource_waiter_takes_its_turn_among_other_processes() {
    let server = ScriptedServer::new();
    let (_first, guard) = held_by_first_process(&server, "shared").await;
    let mut single = waiting_processes(&server, "shared", 1).await;
    let multi = Lock::new(server.client());
    let hub = multi.stores()[0].release_hub().cloned().unwrap();
    let both = tokio::spawn(async move { multi.acquire_all(&["shared", "other"], &patient()).await });
    eventually("the multi-resource waiter lined up", ms(5_000), || {
        tries_of(&server, 2) >= 2 && hub.waiters(&keys("shared")) == 1
    })
    .await;
    single.extend(waiting_processes(&server, "shared", 1).await);
    let last = single.pop().unwrap();
    guard.release().await.unwrap();
    let next = tokio::time::timeout(ms(2_000), single.pop().unwrap()).await.unwrap().unwrap().unwrap();
    let (both, waited) = timed(async {
        next.release().await.unwrap();
        both.await.unwrap().unwrap()
    })
    .await;
    assert!(waited < ms(2_000), "the multi-resource waiter waited {waited:?} for its turn");
    assert!(!last.is_finished(), "the single-lock waiter lined up after the multi-resource one went first");
    let (last, waited) = timed(async {
        both.release().await.unwrap();
        last.await.unwrap().unwrap()
    })
    .await;
    assert!(waited < ms(2_000), "the last waiter waited {waited:?}");
    last.release().await.unwrap();
}

/// Review finding 8: a job start that the server applied but whose reply was lost is given back, and a give-back
/// of a start whose work never ran keeps nothing: the same tick runs on the next try (it was not burned), a plain
/// run's `at_least_for` does not hold the job, and the record says the start was given back. The same for a start
/// whose caller was cancelled while its reply was on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_start_given_back_burns_neither_its_tick_nor_at_least_for() {
    use lock_core::{JobLock, JobOptions, JobOutcome, RunOutcome};
    let server = ScriptedServer::new();
    let jobs = JobLock::new(Lock::new(server.client()));
    let opts = JobOptions::new(ms(30_000)).with_at_least_for(ms(30_000));
    let ran = |outcome: &JobOutcome<bool>| matches!(outcome, JobOutcome::Ran { value: true, .. });

    server.once(Op::Acquire, Fault::fail_after_unavailable());
    let lost_reply = jobs.run_tick("report", 7, &opts, |_| async { true }).await;
    assert!(lost_reply.as_ref().is_err_and(lock_testkit::scripted::is_injected), "{lost_reply:?}");
    let last = jobs.last_run("report").await.unwrap().expect("a record of the start");
    let again = jobs.run_tick("report", 7, &opts, |_| async { true }).await.unwrap();
    assert!(ran(&again), "tick 7 was burned by a start that never ran: {again:?}");
    assert_eq!(last.outcome, RunOutcome::GivenBack, "{last:?}");

    server.once(Op::Acquire, Fault::fail_after_unavailable());
    assert!(jobs.run("nightly", &opts, |_| async { true }).await.is_err());
    let again = jobs.run("nightly", &opts, |_| async { true }).await.unwrap();
    assert!(ran(&again), "at_least_for held the job after a start that never ran: {again:?}");

    // Cancelled while the start's reply is on its way: the start was applied, the work never begins.
    let gate = Gate::new();
    server.once(Op::Acquire, Fault::GateReply(gate.clone()));
    let started = jobs.run_tick("weekly", 8, &opts, |_| async { true });
    let outcome = tokio::time::timeout(ms(300), started).await;
    assert!(outcome.is_err(), "the gated start returned: {outcome:?}");
    gate.open();
    let exists = |key: &str| server.memory().command(&["EXISTS", key]).and_then(|r| r.as_int()) == Some(1);
    eventually("the cancelled start was given back", ms(5_000), || {
        !exists("wlp:{weekly}") && !exists("wlp:{weekly}:tick:8")
    })
    .await;
    let again = jobs.run_tick("weekly", 8, &opts, |_| async { true }).await.unwrap();
    assert!(ran(&again), "tick 8 was burned by a cancelled start: {again:?}");
}

/// Review finding 14 (the explorer's "key left behind"): a give-back that the engine's own call bound drops before
/// it reached the server (the call waits at a gate that never opens, past the 40 ms operation timeout) is sent
/// again in the background, so the grant nobody holds does not keep the lock for its 30 s TTL. The same for a
/// guard's release that timed out before it was applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_by_its_own_timeout_is_sent_again() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client()).with_operation_timeout(ms(40));
    // The SET is applied, its reply lost; the give-back never reaches the server the first time.
    server.once(Op::Acquire, Fault::FailAfter(Injected::Timeout));
    server.once(Op::Release, Fault::Gate(Gate::new()));
    let err = lock.try_acquire("give-back", &LockOptions::new(ms(30_000))).await.err();
    assert!(err.as_ref().is_some_and(lock_testkit::scripted::is_injected), "{err:?}");
    // The event record says what happened to the first give-back: never applied, its future dropped (timed out).
    let dropped = server.log().into_iter().find(|c| c.call.op == Op::Release).expect("a give-back");
    assert!(!dropped.applied, "the first give-back applied");
    assert!(matches!(dropped.ended, Some((lock_testkit::scripted::Ended::Dropped, _))), "{dropped:?}");
    assert!(dropped.line(dropped.at).contains("Dropped"), "{}", dropped.line(dropped.at));
    eventually("the give-back was sent again", ms(5_000), || server.memory().held_count() == 0).await;

    // A holder's release that times out before it reaches the server: the caller hears the timeout, and the
    // release is sent again all the same.
    let guard = lock.try_acquire("released", &LockOptions::new(ms(30_000))).await.unwrap().expect("free");
    server.once(Op::Release, Fault::Gate(Gate::new()));
    let released = guard.release().await;
    assert!(matches!(released, Err(LockError::Timeout { .. })), "{released:?}");
    eventually("the release was sent again", ms(5_000), || server.memory().held_count() == 0).await;
    let next = lock.try_acquire("released", &LockOptions::new(ms(30_000))).await.unwrap();
    assert!(next.is_some(), "the lock stayed held after its holder's release timed out");
}

/// Review finding 11: over Redlock, a leader elected from counters that disagree (a candidate with a fast clock
/// left higher counters on two instances) has its term written back to the records of the instances that granted a
/// lower one, with the counters: observers reading a quorum agree on (leader, term) instead of seeing no leader for
/// the whole term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_leaders_term_is_written_back_to_its_records() {
    use lock_core::{Election, ElectionOptions};
    let servers = three_servers();
    let lock = redlock_over(&servers);
    let fence = lock_core::LockKeys::new(lock.key_prefix(), "primary").unwrap().fence().to_owned();
    // The server's clock (the counters' time floor) in µs, and a million seconds more.
    let time = match servers[0].memory().command(&["TIME"]) {
        Some(lock_core::backend::Reply::Array(parts)) => {
            parts.iter().map(|p| p.to_text_lossy().unwrap()).collect::<Vec<_>>()
        }
        other => panic!("TIME: {other:?}"),
    };
    let now_us = time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap();
    let ahead = now_us + 1_000_000_000_000;
    for (server, counter) in servers.iter().zip([ahead, ahead + 1_000]) {
        assert!(server.memory().command(&["SET", &fence, &counter.to_string()]).is_some());
    }
    let election = Election::new(lock, "primary", ElectionOptions::default()).unwrap();
    let leadership = election.try_campaign("a", "v").await.unwrap().expect("elected");
    let seen = election.leader().await.unwrap();
    let seen = seen.map(|info| (info.id, info.term));
    assert_eq!(seen, Some(("a".to_owned(), leadership.term())), "observers disagree with the leader's term");
    leadership.resign().await.unwrap();
}

/// Review finding 10: leadership goes to the candidate processes in the order they started waiting, also when a
/// later candidate's tries are faster and the one who resigned campaigns again at once. Four processes (clients of
/// one server); candidates 1, 2, 3 start waiting in that order; candidate 1's tries take 100 ms more; each leader
/// resigns and campaigns again right away. Before, every resignation woke every candidate and the fastest try won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resignations_hand_the_election_to_candidates_in_their_order() {
    use lock_core::{Election, ElectionOptions};
    let server = ScriptedServer::new();
    let options =
        ElectionOptions::default().with_lease(ms(30_000)).with_renew_deadline(ms(20_000)).with_retry_period(ms(5_000));
    let elections: Vec<Election> =
        (0..4).map(|_| Election::new(Lock::new(server.client()), "ordered", options.clone()).unwrap()).collect();
    let waiting = || {
        let reply = server.memory().command(&["ZCARD", "wlp:{ordered}:waiting"]);
        reply.and_then(|r| r.as_int()).unwrap_or(0)
    };
    let mut leader = Some(elections[0].try_campaign("c0", "v").await.unwrap().expect("c0 elected"));
    server.rule(|call| (call.client == 1 && call.op == Op::Acquire).then(|| Fault::Delay(ms(100))));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut candidates = Vec::new();
    for (i, election) in elections.iter().enumerate().skip(1) {
        let (election, tx) = (election.clone(), tx.clone());
        candidates.push(tokio::spawn(async move {
            let leadership = election.campaign(&format!("c{i}"), "v").await.unwrap();
            tx.send((i, leadership)).unwrap();
        }));
        let lined_up = i as i64;
        eventually("the candidate lined up", ms(5_000), || waiting() >= lined_up).await;
    }
    let mut order = Vec::new();
    let mut resigned = 0;
    while order.len() < 3 {
        let previous = leader.take().expect("a leader");
        previous.resign().await.unwrap();
        // The one who resigned campaigns again at once (as `lead` does after its work): it must not barge in.
        let barged = elections[resigned].try_campaign("again", "v").await.unwrap();
        assert!(barged.is_none(), "the candidate who resigned was elected again past the waiting ones");
        let (next, leadership) = tokio::time::timeout(ms(3_000), rx.recv()).await.expect("nobody elected").unwrap();
        order.push(next);
        resigned = next;
        leader = Some(leadership);
    }
    assert_eq!(order, [1, 2, 3], "leadership did not follow the candidates' order");
    leader.unwrap().resign().await.unwrap();
    for candidate in candidates {
        candidate.await.unwrap();
    }
}

/// Review finding 10, the other hand-over: a leader whose lease runs out (its renewals fail) is succeeded by the
/// candidate process that waited longest, although the others' tries are faster: the first try that finds the
/// election free promises it to the head of the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_leader_is_succeeded_by_the_longest_waiting_candidate() {
    use lock_core::{Election, ElectionOptions};
    let server = ScriptedServer::new();
    let options =
        ElectionOptions::default().with_lease(ms(2_000)).with_renew_deadline(ms(1_400)).with_retry_period(ms(500));
    let elections: Vec<Election> =
        (0..4).map(|_| Election::new(Lock::new(server.client()), "expiring", options.clone()).unwrap()).collect();
    let waiting = || {
        let reply = server.memory().command(&["ZCARD", "wlp:{expiring}:waiting"]);
        reply.and_then(|r| r.as_int()).unwrap_or(0)
    };
    let leader = elections[0].try_campaign("c0", "v").await.unwrap().expect("c0 elected");
    server.rule(|call| match (call.client, call.op) {
        (0, Op::Extend) => Some(Fault::FailBefore(Injected::Unavailable)),
        (1, Op::Acquire) => Some(Fault::Delay(ms(100))),
        _ => None,
    });
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut candidates = Vec::new();
    for (i, election) in elections.iter().enumerate().skip(1) {
        let (election, tx) = (election.clone(), tx.clone());
        candidates.push(tokio::spawn(async move {
            let leadership = election.campaign(&format!("c{i}"), "v").await.unwrap();
            tx.send((i, leadership)).unwrap();
        }));
        let lined_up = i as i64;
        eventually("the candidate lined up", ms(1_500), || waiting() >= lined_up).await;
    }
    let (first, leadership) = tokio::time::timeout(ms(10_000), rx.recv()).await.expect("nobody elected").unwrap();
    assert_eq!(first, 1, "the longest-waiting candidate was passed over at the leader's expiry");
    drop(leader);
    leadership.resign().await.unwrap();
    for _ in 0..2 {
        let (_, next) = tokio::time::timeout(ms(10_000), rx.recv()).await.expect("nobody elected").unwrap();
        next.resign().await.unwrap();
    }
    for candidate in candidates {
        candidate.await.unwrap();
    }
}

/// Explorer seed 1592592368 (failed once on a loaded machine): a release that times out is sent again until the
/// key's TTL on the server runs out, not the holder's validity. An extension that was applied but whose reply was
/// lost (or came after the deadline) is not counted in the validity, yet the server keeps the key for its TTL; the
/// resend gave up at the validity and left the key for that whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_release_is_resent_until_an_uncounted_extension_expires() {
    let server = ScriptedServer::new();
    let lock = Lock::new(server.client()).with_operation_timeout(ms(40));
    let guard = lock.try_acquire("uncounted", &LockOptions::new(ms(100))).await.unwrap().expect("free");
    // Applied (the key now lives 5 s), its reply lost: the holder still trusts it for the first 100 ms only.
    server.once(Op::Extend, Fault::FailAfter(Injected::Timeout));
    assert!(guard.extend(ms(5_000)).await.is_err());
    // Past the validity and the resend's margin, the release times out before it reaches the server.
    tokio::time::sleep(ms(200)).await;
    server.once(Op::Release, Fault::Gate(Gate::new()));
    let released = guard.release().await;
    assert!(matches!(released, Err(LockError::Timeout { .. })), "{released:?}");
    eventually("the release was sent again", ms(2_000), || server.memory().held_count() == 0).await;
}

/// Explorer seed 1592592649 (current-thread, loaded machine: overlapping holds): a fair release granted the head a
/// lease and announced it, the announcement came late, and meanwhile the lease ran out, another client took the free
/// lock, and a heartbeat of the head's re-created its place (a try that finds its place gone takes a new one). The
/// late announcement was counted from that heartbeat, sent after the grant, so the head believed it held a lease
/// that had ended: two holders. A grant is now counted from the waiter's first try, which always precedes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_grant_announcement_is_not_counted_from_a_try_after_the_grant() {
    use lock_testkit::scripted::Delivery;
    let server = ScriptedServer::new();
    // Holder and taker: 30 s. The head: a TTL of 200 ms, so a 200 ms lease; its heartbeat every 500 ms.
    let fair = |wait: Duration| {
        let ttl = if wait.is_zero() { ms(30_000) } else { ms(200) };
        LockOptions::new(ttl).with_wait(wait).with_fair_queue(ms(1_500))
    };
    let (holder, mut head) = holder_and_listening_head(&server, "late-grant", fair).await;
    let seen = head_tries(&server).len();
    eventually("a heartbeat", ms(5_000), || head_tries(&server).len() > seen).await;
    tokio::time::sleep(ms(40)).await;
    let gate = Gate::new();
    let held = gate.clone();
    server.notification_rule(move |note| (note.to == 1).then(|| Delivery::Gate(held.clone())));
    // Grants the head a 200 ms lease; its announcement waits at the gate.
    holder.release().await.unwrap();
    tokio::time::sleep(ms(250)).await;
    // The lease ran out on the server: another client takes the free lock.
    let taker = Lock::new(server.client()).try_acquire("late-grant", &fair(ms(0))).await.unwrap().expect("free");
    // The head's next heartbeat takes a new place behind the taker, and is answered.
    let tries = head_tries(&server).len();
    eventually("a heartbeat answered", ms(5_000), || {
        let log = server.log();
        let mine: Vec<_> = log.iter().filter(|c| c.call.op == Op::Acquire && c.call.client == 1).collect();
        mine.len() > tries && mine.last().is_some_and(|c| c.ended.is_some())
    })
    .await;
    gate.open();
    if let Ok(joined) = tokio::time::timeout(ms(200), &mut head).await {
        let guard = joined.unwrap().unwrap();
        assert!(
            holds(&server, "late-grant", &guard) || guard.valid_until() <= Instant::now(),
            "two holders: a spent lease counted from a try after the grant"
        );
    }
    head.abort();
    drop(taker);
}

/// Review 4, finding 1 (safety): a queued try (a fair lock's waiter, a read-write lock's writer) sends the token its
/// waiter keeps for every try. When its grant arrives after the grant's validity, nothing may be given back under
/// that token, now or by a resend later: the waiter's next try is granted with the same token, and a give-back that
/// lands after it deletes that grant while its guard believes it holds (the next waiter, or the readers, get in).
/// Both ways a give-back is sent again: on one connection, a reset breaks the first give-back (resent 10 ms later);
/// on a pool, the first finds nothing to delete (the late grant expired) and is checked again a call bound later
/// (the waiter's renewal keeps its next grant alive that long). That second give-back is held at a gate until the
/// waiter holds again; then nobody else may take the lock while the waiter's guard is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_grant_of_a_queued_try_is_never_given_back_under_the_waiters_token() {
    let (ttl, late, call_bound) = (ms(200), ms(230), ms(300));
    for (case, writer, ordered) in [
        ("fair lock, one connection, reset after the late reply", false, true),
        ("fair lock, pool: the late grant expired before its give-back", false, false),
        ("read-write lock's writer, one connection, reset", true, true),
        ("read-write lock's writer, pool", true, false),
    ] {
        let server = ScriptedServer::new();
        let waiter = Lock::new(server.client().ordered(ordered)).with_operation_timeout(call_bound);
        let other = Lock::new(server.client());
        // The waiter's first try is applied; its reply comes after the grant's validity (and its TTL) ran out.
        server.once_where(|c| c.client == 0 && c.op == Op::Acquire, Fault::DelayReply(late));
        let gate = Gate::new();
        let first = if ordered { Fault::FailBefore(Injected::Unavailable) } else { Fault::Yield(0) };
        let mut releases = vec![Fault::Gate(gate.clone()), first];
        server.rule(move |c| (c.client == 0 && c.op == Op::Release).then(|| releases.pop()).flatten());
        let quick = RetryPolicy::default().with_min_delay(ms(1)).with_max_delay(ms(1));
        let opts = LockOptions::new(ttl)
            .with_wait(ms(5_000))
            .with_retry(quick)
            .with_auto_renew(lock_core::RenewPolicy::default());
        let name = "late-queued-grant";
        let (keys, guard): (lock_core::LockKeys, Box<dyn std::any::Any>) = if writer {
            let rw = lock_core::RwLock::new(waiter.clone(), name).unwrap().with_waiter_ttl(ms(1_500)).unwrap();
            let w = rw.write(&opts).await.unwrap_or_else(|e| panic!("{case}: {e}"));
            (rw.keys().clone(), Box::new(w))
        } else {
            let g = waiter.acquire(name, &opts.clone().with_fair_queue(ms(1_500))).await;
            let keys = lock_core::LockKeys::new(lock_core::DEFAULT_PREFIX, name).unwrap();
            (keys, Box::new(g.unwrap_or_else(|e| panic!("{case}: {e}"))))
        };
        let signal = match guard.downcast_ref::<lock_core::Guard>() {
            Some(g) => g.lost_signal(),
            None => guard.downcast_ref::<lock_core::WriteGuard>().unwrap().lost_signal(),
        };
        let first_try = server.log().into_iter().find(|c| c.call.client == 0 && c.call.op == Op::Acquire).unwrap();
        let token = first_try.call.token;
        assert_eq!(server.memory().holder(&keys), Some(token.clone()), "{case}: the waiter holds again");
        // A give-back of the waiter's token still to come is sent by now; let it through and wait for its answer.
        let resent = gate.wait_arrivals(1, call_bound + ms(200)).await;
        gate.open();
        if resent {
            let answered = |c: &lock_testkit::scripted::Logged| c.call.client == 0 && c.call.op == Op::Release;
            eventually("the resent give-back answered", ms(2_000), || {
                server.log().iter().filter(|c| answered(c)).all(|c| c.ended.is_some())
            })
            .await;
        }
        let sent = Instant::now();
        let probe = LockOptions::new(ms(30_000));
        let taken = if writer {
            let rw = lock_core::RwLock::new(other.clone(), name).unwrap();
            rw.try_write(&probe).await.unwrap().is_some()
        } else {
            other.try_acquire(name, &probe).await.unwrap().is_some()
        };
        let valid = !signal.is_lost() && sent < signal.valid_until();
        assert!(!(taken && valid), "{case}: two holders: the waiter's grant was given back under its token");
        drop(guard);
    }
}

/// Issue 58 (WIRE.md 5.5): a Redlock acquire whose requests reach the servers after its counters expired carries a
/// floor its client read before another holder drew. Taken as sent on the expired counters, that floor would draw
/// below the other holder's fence (and the late grant is still valid: its TTL is long). The scripts take a sent
/// floor on an absent counter no lower than half the expiry below the server's clock, so the late fence is above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_floor_delayed_past_a_counter_expiry_still_draws_above_the_fences_before() {
    use lock_core::{Fencing, LockKeys};
    let servers = three_servers();
    let expiry = ms(40);
    let lock = || redlock_over(&servers).with_fence_counter_expiry(Some(expiry));
    let (late, early) = (lock(), lock());
    let eager = LockOptions::new(ms(10_000)).with_fencing_mode(Fencing::OnAcquire);
    let gate = Gate::new();
    for server in &servers {
        server.once(Op::Acquire, Fault::Gate(gate.clone()));
    }
    let late_acquire = tokio::spawn({
        let eager = eager.clone();
        async move { late.try_acquire("ledger", &eager).await }
    });
    eventually("the late requests at the gate", ms(5_000), || servers.iter().all(|s| !s.log().is_empty())).await;
    let first = early.try_acquire("ledger", &eager).await.unwrap().expect("the lock is free");
    let fence = first.drawn_fence().unwrap();
    first.release().await.unwrap();
    let counter = LockKeys::new(lock_core::DEFAULT_PREFIX, "ledger").unwrap().fence().to_owned();
    eventually("every counter expired", ms(5_000), || {
        servers.iter().all(|s| s.memory().command(&["EXISTS", &counter]) == Some(lock_core::backend::Reply::Int(0)))
    })
    .await;
    gate.open();
    let late = late_acquire.await.unwrap().unwrap().expect("the late requests find the lock free");
    let late_fence = late.drawn_fence().unwrap();
    assert!(late_fence > fence, "the late grant's fence {late_fence} is below the one drawn before it, {fence}");
    late.release().await.unwrap();
}
