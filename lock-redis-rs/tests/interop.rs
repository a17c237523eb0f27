//! This library and the real lock packages of other languages on one redis-server, in both directions: each peer runs
//! in a driver process (`interop/`: the packages from PyPI and npm, installed by `interop/setup.sh`, which
//! `scripts/test.sh` runs) that speaks JSON lines, and contends with our lock under that peer's `KeyLayout`.
//!
//! Per peer:
//! - **exclusion**: both sides run read-modify-write cycles on one counter under the lock at once; no update is lost
//!   and no two holds overlap (both sides stamp their holds with `CLOCK_MONOTONIC`, one clock for the machine);
//! - **hand-off, both ways**: from one side's release to the other side's waiter holding the lock (p50/p99 printed;
//!   within 50 ms at the median and 200 ms at p99 where the peer publishes or signals: python-redis-lock, Redisson);
//! - **typed after expiry, both ways**: a holder whose lock expired and was taken by the other side gets its own
//!   library's typed answer (ours: `Lost` from extend, `OwnedByOther` from release), never a backend error or a hang.
//!
//! `LOCK_INTEROP_CYCLES` (default 500 per side) and `LOCK_INTEROP_HANDOFFS` (default 30 each way) set the sizes;
//! BENCHMARKS.md's table was made with `LOCK_INTEROP_HANDOFFS=200`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking; figures are printed

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use lock_core::{KeyLayout, Lock, LockError, LockOptions, ReleaseOutcome, RetryPolicy};
use lock_redis_rs::redis::AsyncCommands;
use lock_redis_rs::RedisStore;
use lock_testkit::history::monotonic_nanos;
use lock_testkit::RedisServer;
use serde_json::{json, Value};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The `interop/` folder of the workspace.
fn interop_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop")
}

/// How one peer is reached and what it promises.
#[derive(Clone)]
struct PeerSpec {
    id: &'static str,
    /// `true`: the Python driver; `false`: the Node driver.
    python: bool,
    layout: fn() -> KeyLayout,
    /// Whether a release on one side reaches the other side's waiter at once (the peer publishes or signals, and our
    /// release does what its waiters listen for): the hand-off bounds apply.
    prompt: bool,
    /// The peer's TTL granularity in ms (python-redis-lock: whole seconds).
    ttl_unit: u64,
    /// Whether the peer's waiter may give up before its budget (node-redisson: see interop/README.md).
    gives_up: bool,
    /// Whether the peer's lock has no expiry unless given one (redis-py's `timeout=None`, python-redis-lock's
    /// `expire=None`).
    no_expiry_default: bool,
}

const PEERS: &[PeerSpec] = &[
    PeerSpec {
        id: "redis-py",
        python: true,
        layout: KeyLayout::plain,
        prompt: false,
        ttl_unit: 1,
        gives_up: false,
        no_expiry_default: true,
    },
    PeerSpec {
        id: "python-redis-lock",
        python: true,
        layout: KeyLayout::python_redis_lock,
        prompt: true,
        ttl_unit: 1_000,
        gives_up: false,
        no_expiry_default: true,
    },
    PeerSpec {
        id: "pottery",
        python: true,
        layout: KeyLayout::pottery,
        prompt: false,
        ttl_unit: 1,
        gives_up: false,
        no_expiry_default: false,
    },
    PeerSpec {
        id: "redlock",
        python: false,
        layout: KeyLayout::plain,
        prompt: false,
        ttl_unit: 1,
        gives_up: false,
        no_expiry_default: false,
    },
    PeerSpec {
        id: "sesame",
        python: false,
        layout: KeyLayout::plain,
        prompt: false,
        ttl_unit: 1,
        gives_up: false,
        no_expiry_default: false,
    },
    PeerSpec {
        id: "node-redisson",
        python: false,
        layout: KeyLayout::redisson,
        prompt: true,
        ttl_unit: 1,
        gives_up: true,
        no_expiry_default: false,
    },
];

/// A driver process of one peer.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    id: &'static str,
}

impl Driver {
    fn spawn(spec: &PeerSpec, url: &str) -> Driver {
        let dir = interop_dir();
        let mut command = if spec.python {
            let python = dir.join("python/.venv/bin/python");
            assert!(python.exists(), "{} is missing: run interop/setup.sh (scripts/test.sh does)", python.display());
            let mut c = Command::new(python);
            c.arg(dir.join("python/peer_driver.py"));
            c
        } else {
            assert!(dir.join("node/node_modules").exists(), "the npm peers are missing: run interop/setup.sh");
            let mut c = Command::new("node");
            c.arg(dir.join("node/peer-driver.js"));
            c
        };
        let mut child = command
            .arg(spec.id)
            .arg(url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: spawn the driver: {e}", spec.id));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut driver = Driver { child, stdin, lines, id: spec.id };
        let ready = driver.read(ms(60_000));
        assert_eq!(ready["ready"], true, "{}: {ready}", spec.id);
        println!("{}: {} {}", spec.id, ready["peer"], ready["version"]);
        driver
    }

    fn send(&mut self, request: &Value) {
        writeln!(self.stdin, "{request}").unwrap_or_else(|e| panic!("{}: write: {e}", self.id));
        self.stdin.flush().unwrap();
    }

    fn read(&mut self, within: Duration) -> Value {
        let line =
            self.lines.recv_timeout(within).unwrap_or_else(|e| panic!("{}: no reply within {within:?}: {e}", self.id));
        let reply: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{}: {e}: {line}", self.id));
        assert!(reply.get("ok") != Some(&json!(false)), "{}: {reply}", self.id);
        reply
    }

    fn request(&mut self, request: Value) -> Value {
        self.send(&request);
        self.read(ms(120_000))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ns(value: &Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("not a ns timestamp: {value}"))
}

/// Our lock for `spec` on `server`, under the peer's layout.
async fn our_lock(spec: &PeerSpec, server: &RedisServer) -> Lock {
    let store = RedisStore::connect(&server.url()).await.unwrap();
    Lock::new(store).with_layout((spec.layout)())
}

/// Contention in the exclusion runs: both sides retry every few ms, so holds follow each other closely.
fn waiting(ttl_ms: u64, wait_ms: u64) -> LockOptions {
    let retry = RetryPolicy::default().with_min_delay(ms(2)).with_max_delay(ms(10));
    LockOptions::new(ms(ttl_ms)).with_wait(ms(wait_ms)).with_retry(retry)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).copied().unwrap_or(f64::NAN)
}

/// Both sides run `n` read-modify-write cycles on one counter under the lock at once: the counter ends at the number
/// of cycles both completed, and no hold of one side overlaps one of the other.
async fn exclusion(spec: &PeerSpec, server: &RedisServer, lock: &Lock, name: &str) {
    let n = env_usize("LOCK_INTEROP_CYCLES", 500);
    let counter = format!("interop-counter:{name}");
    let mut driver = Driver::spawn(spec, &server.url());
    // python-redis-lock refuses a wait longer than the TTL.
    let request = json!({"op":"cycles","name":name,"ttl_ms":10_000,"wait_ms":10_000,"counter":counter,"n":n,"retry_ms":2,"jitter_ms":2});
    let peer = tokio::task::spawn_blocking(move || {
        let reply = driver.request(request);
        (reply, driver)
    });
    let client = lock_redis_rs::redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut ours = Vec::new();
    for _ in 0..n {
        let guard = lock.acquire(name, &waiting(10_000, 30_000)).await.unwrap_or_else(|e| panic!("{}: {e}", spec.id));
        let acquired = monotonic_nanos();
        let value: Option<i64> = conn.get(&counter).await.unwrap();
        let () = conn.set(&counter, value.unwrap_or(0) + 1).await.unwrap();
        let released = monotonic_nanos();
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released, "{}", spec.id);
        ours.push((acquired, released));
    }
    let (reply, _driver) = peer.await.unwrap();
    let done = reply["done"].as_u64().unwrap() as usize;
    let theirs: Vec<(u64, u64)> = reply["events"].as_array().unwrap().iter().map(|e| (ns(&e[0]), ns(&e[1]))).collect();
    let total: Option<i64> = conn.get(&counter).await.unwrap();
    assert_eq!(total, Some((n + done) as i64), "{}: lost updates ({n} ours, {done} theirs)", spec.id);
    for (a, b) in &ours {
        if let Some((c, d)) = theirs.iter().find(|(c, d)| c < b && a < d) {
            panic!("{}: our hold {a}..{b} overlaps theirs {c}..{d}", spec.id);
        }
    }
    assert!(done as f64 >= n as f64 * 0.9, "{}: the peer completed {done} of {n} cycles: {reply}", spec.id);
    println!("{}: exclusion: {} cycles ours, {done} theirs, counter exact, no overlap", spec.id, n);
}

/// From one side's release to the other side's waiter holding it, `handoffs` times each way: (ours → theirs,
/// theirs → ours), in ms, sorted.
async fn handoffs(spec: &PeerSpec, server: &RedisServer, lock: &Lock, name: &str) -> (Vec<f64>, Vec<f64>) {
    let rounds = env_usize("LOCK_INTEROP_HANDOFFS", 30);
    let mut driver = Driver::spawn(spec, &server.url());
    let mut to_them = Vec::new();
    let mut given_up = 0;
    for _ in 0..rounds {
        let guard = lock.acquire(name, &LockOptions::new(ms(30_000))).await.unwrap();
        // The peer's own retry settings: the figure is what its users get.
        driver.send(&json!({"op":"acquire","name":name,"ttl_ms":30_000,"wait_ms":10_000}));
        // The peer is waiting by now (it tried, found the lock held, and polls or listens).
        tokio::time::sleep(ms(60)).await;
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        let released = monotonic_nanos();
        let reply = tokio::task::block_in_place(|| driver.read(ms(30_000)));
        if reply["acquired"] != true {
            assert!(spec.gives_up, "{}: the peer's waiter did not get a released lock: {reply}", spec.id);
            given_up += 1;
            continue;
        }
        to_them.push(ns(&reply["at_ns"]).saturating_sub(released) as f64 / 1e6);
        let freed = driver.request(json!({"op":"release","name":name}));
        assert_eq!(freed["released"], true, "{}: {freed}", spec.id);
    }
    assert!(given_up * 5 <= rounds, "{}: the peer's waiter gave up {given_up} times in {rounds}", spec.id);
    let mut to_us = Vec::new();
    for _ in 0..rounds {
        driver.send(&json!({"op":"hold","name":name,"ttl_ms":30_000,"wait_ms":10_000,"hold_ms":60}));
        let held = tokio::task::block_in_place(|| driver.read(ms(30_000)));
        assert_eq!(held["acquired"], true, "{}: {held}", spec.id);
        // Our default retry policy: a waiter hears a peer's release where the layout lets it, polls where not.
        let guard = lock.acquire(name, &LockOptions::new(ms(30_000)).with_wait(ms(10_000))).await.unwrap();
        let acquired = monotonic_nanos();
        let released = tokio::task::block_in_place(|| driver.read(ms(30_000)));
        assert_eq!(released["released"], true, "{}: {released}", spec.id);
        to_us.push(acquired.saturating_sub(ns(&released["release_done_ns"])) as f64 / 1e6);
        guard.release().await.unwrap();
    }
    to_them.sort_by(f64::total_cmp);
    to_us.sort_by(f64::total_cmp);
    (to_them, to_us)
}

/// A holder whose lock expired and was taken by the other side: ours gets `Lost` from extend and `OwnedByOther` from
/// release; theirs gets its own "not owned" answer (never a crash or a hang).
async fn typed_after_expiry(spec: &PeerSpec, server: &RedisServer, lock: &Lock, name: &str) {
    let mut driver = Driver::spawn(spec, &server.url());
    let short = spec.ttl_unit.max(300);
    let guard = lock.acquire(name, &LockOptions::new(ms(300))).await.unwrap();
    tokio::time::sleep(ms(400)).await;
    let taken = driver.request(json!({"op":"acquire","name":name,"ttl_ms":30_000,"wait_ms":0}));
    assert_eq!(taken["acquired"], true, "{}: the expired lock was not free: {taken}", spec.id);
    let extended = guard.extend(ms(30_000)).await;
    assert!(matches!(extended, Err(LockError::Lost { .. })), "{}: our extend: {extended:?}", spec.id);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::OwnedByOther, "{}", spec.id);
    let freed = driver.request(json!({"op":"release","name":name}));
    assert_eq!(freed["released"], true, "{}: {freed}", spec.id);

    let held = driver.request(json!({"op":"acquire","name":name,"ttl_ms":short,"wait_ms":0}));
    assert_eq!(held["acquired"], true, "{}: {held}", spec.id);
    let ours = lock.acquire(name, &waiting(30_000, 10_000)).await.unwrap();
    let stale = driver.request(json!({"op":"release","name":name}));
    assert_eq!(stale["released"], false, "{}: the peer released our lock: {stale}", spec.id);
    let error = stale["error"].as_str().unwrap_or_default();
    assert!(!error.contains("WRONGTYPE") && !error.is_empty(), "{}: the peer's answer: {stale}", spec.id);
    assert!(ours.extend(ms(30_000)).await.is_ok(), "{}: the peer's stale release touched our lock", spec.id);
    assert_eq!(ours.release().await.unwrap(), ReleaseOutcome::Released);
    println!("{}: after expiry: ours Lost / OwnedByOther, theirs {error:?}", spec.id);
}

/// redis-py and python-redis-lock take a lock with no expiry by default: our waiter that gives up on one says that a
/// crashed holder would block it forever, and not otherwise.
async fn without_expiry(spec: &PeerSpec, server: &RedisServer, lock: &Lock, name: &str) {
    let mut driver = Driver::spawn(spec, &server.url());
    let held = driver.request(json!({"op":"acquire","name":name,"ttl_ms":0,"wait_ms":0}));
    assert_eq!(held["acquired"], true, "{}: {held}", spec.id);
    let waited = lock.acquire(name, &LockOptions::new(ms(5_000)).with_wait(ms(200))).await;
    let Err(error @ LockError::Contended { never_expires: true, .. }) = waited else {
        panic!("{}: a waiter on a holder without expiry: {waited:?}", spec.id)
    };
    assert!(error.to_string().contains("no expiry"), "{}: {error}", spec.id);
    let freed = driver.request(json!({"op":"release","name":name}));
    assert_eq!(freed["released"], true, "{}: {freed}", spec.id);
    let held = driver.request(json!({"op":"acquire","name":name,"ttl_ms":10_000,"wait_ms":0}));
    assert_eq!(held["acquired"], true, "{}: {held}", spec.id);
    let waited = lock.acquire(name, &LockOptions::new(ms(5_000)).with_wait(ms(200))).await;
    assert!(matches!(waited, Err(LockError::Contended { never_expires: false, .. })), "{}: {waited:?}", spec.id);
    println!("{}: a waiter on its lock without expiry: {error}", spec.id);
}

async fn exercise(spec: &PeerSpec) {
    let server = RedisServer::start().expect("redis-server");
    let lock = our_lock(spec, &server).await;
    let name = format!("interop-{}-{:08x}", spec.id, rand::random::<u32>());
    exclusion(spec, &server, &lock, &format!("{name}-x")).await;
    let (to_them, to_us) = handoffs(spec, &server, &lock, &format!("{name}-h")).await;
    println!(
        "{}: hand-off ms, ours to theirs p50 {:.2} p99 {:.2}; theirs to ours p50 {:.2} p99 {:.2} ({} rounds)",
        spec.id,
        percentile(&to_them, 0.5),
        percentile(&to_them, 0.99),
        percentile(&to_us, 0.5),
        percentile(&to_us, 0.99),
        to_us.len()
    );
    if spec.prompt {
        for (way, times) in [("ours to theirs", &to_them), ("theirs to ours", &to_us)] {
            let (p50, p99) = (percentile(times, 0.5), percentile(times, 0.99));
            assert!(p50 <= 50.0 && p99 <= 200.0, "{}: hand-off {way}: p50 {p50:.1} ms, p99 {p99:.1} ms", spec.id);
        }
    }
    typed_after_expiry(spec, &server, &lock, &format!("{name}-t")).await;
    if spec.no_expiry_default {
        without_expiry(spec, &server, &lock, &format!("{name}-n")).await;
    }
}

macro_rules! peer_tests {
    ($($test:ident => $id:literal),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let spec = PEERS.iter().find(|p| p.id == $id).unwrap();
                exercise(spec).await;
            }
        )*
    };
}

peer_tests! {
    redis_py => "redis-py",
    python_redis_lock => "python-redis-lock",
    pottery => "pottery",
    node_redlock => "redlock",
    sesamecare_redlock => "sesame",
    node_redisson => "node-redisson",
}

/// Every key on `server` under `prefix`, sorted (a test server holds few keys: `KEYS` is fine here).
async fn keys_under(server: &RedisServer, prefix: &str) -> Vec<String> {
    let client = lock_redis_rs::redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut keys: Vec<String> = conn.keys(format!("{prefix}*")).await.unwrap();
    keys.sort();
    keys
}

/// Issue 54: each peer's own bulk cleanup, run for real from its package (python-redis-lock's `reset_all`, which some
/// services call at start-up; the others have none), leaves every key of ours under the default prefix alone: a held
/// lock stays held (nobody else gets it), its fencing counter and the version key stay. Under the old default prefix
/// `lock:` (set explicitly here) the same `reset_all` deletes our held lock, and a second process takes it while the
/// first still holds: the two holders the old default made.
#[tokio::test]
async fn no_peers_cleanup_reaches_this_librarys_keys() {
    let server = RedisServer::start().expect("redis-server");
    let lock = Lock::new(RedisStore::connect(&server.url()).await.unwrap());
    let other = Lock::new(RedisStore::connect(&server.url()).await.unwrap());
    let guard = lock.acquire("invoice", &LockOptions::new(ms(60_000))).await.unwrap();
    lock.acquire("released", &LockOptions::new(ms(60_000))).await.unwrap().release().await.unwrap();
    let before = keys_under(&server, lock_core::DEFAULT_PREFIX).await;
    assert!(before.contains(&"wlp:wire".to_owned()) && before.contains(&"wlp:{invoice}".to_owned()), "{before:?}");
    for spec in PEERS {
        let mut driver = Driver::spawn(spec, &server.url());
        let reply = driver.request(json!({"op":"cleanup"}));
        assert_eq!(reply["ok"], true, "{}: {reply}", spec.id);
        println!("{}: cleanup {}", spec.id, reply["cleanup"]);
        let after = keys_under(&server, lock_core::DEFAULT_PREFIX).await;
        // A try that found the lock held adds its release mark; nothing of ours goes.
        assert!(
            before.iter().all(|k| after.contains(k)),
            "{}'s cleanup deleted our keys: {before:?} -> {after:?}",
            spec.id
        );
        assert!(other.try_acquire("invoice", &LockOptions::new(ms(60_000))).await.unwrap().is_none(), "{}", spec.id);
    }
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);

    // The old default: python-redis-lock's reset_all sweeps `lock:*`, ours included.
    let old = lock.clone().with_key_prefix(lock_core::LEGACY_PREFIX);
    let old_other = other.clone().with_key_prefix(lock_core::LEGACY_PREFIX);
    let held = old.acquire("invoice", &LockOptions::new(ms(60_000))).await.unwrap();
    let python = PEERS.iter().find(|p| p.id == "python-redis-lock").unwrap();
    let mut driver = Driver::spawn(python, &server.url());
    assert_eq!(driver.request(json!({"op":"cleanup"}))["cleanup"], "redis_lock.reset_all");
    assert!(keys_under(&server, "lock:").await.is_empty(), "reset_all left keys under lock:");
    let second = old_other.try_acquire("invoice", &LockOptions::new(ms(60_000))).await.unwrap();
    assert!(second.is_some(), "under lock: the swept lock is free for a second holder");
    assert!(!held.is_lost(), "the first holder is not told (without renewal it learns at its release)");
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::OwnedByOther);
    second.unwrap().release().await.unwrap();
}
