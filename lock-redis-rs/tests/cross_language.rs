//! Rust and Python processes on one lock, one semaphore, one read-write lock and one election: this library beside
//! the Python client written from WIRE.md alone (`clients/python`, its `soak_worker.py`), on one redis-server, with
//! processes frozen past their TTL (`SIGSTOP`/`SIGCONT`) and killed while they run. Every exclusive holder writes
//! to the protected resource through the guarded write (WIRE.md 16) with its fence, appending `"<worker> <fence>"`
//! to one list, so the list is the order the guard accepted fences in.
//!
//! The history (every hold, both languages, stamped with `CLOCK_MONOTONIC`) is checked by
//! [`lock_testkit::primitive_checker`]: no two exclusive holds overlap (a hold lasts from its acquire's reply to its
//! release or its validity deadline, whichever came first), no more holders than permits, one leader per term and at
//! a time, fences increasing with every grant; and the list shows no fence going backwards (no stale write
//! accepted). Rust workers also freeze themselves between their acquire and their write now and then, so that
//! stale writes are tried, and refused, in every run.
//!
//! `LOCK_SOAK_SECS` sets the seconds per primitive (default 6 in the test command; FAULTS.md's figures come from
//! `LOCK_SOAK_SECS=120`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // tests fail by panicking; figures are printed

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_core::fenced::FencedResource;
use lock_core::{
    Election, ElectionOptions, FencingToken, Lock, LockError, LockOptions, ReleaseOutcome, RwLock, Semaphore,
};
use lock_redis_rs::RedisStore;
use lock_testkit::history::monotonic_nanos;
use lock_testkit::primitive_checker;
use lock_testkit::worker::{worker_id, WorkerProcess};
use lock_testkit::{Hold, RedisServer};
use rand::RngExt;
use serde_json::{json, Value};

const TTL_MS: u64 = 400;
const WORKER_ENTRY: &str = "rust_soak_worker";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python/.venv/bin/python")
}

fn python_worker_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python/soak_worker.py")
}

// ---- the Rust worker (this test binary, re-run as a worker process) ------------------------------------------------

/// The Rust worker's loop, when this process is one (see [`WorkerProcess`]); otherwise nothing.
#[test]
fn rust_soak_worker() {
    let Some(id) = worker_id() else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(work(format!("rust-{id}")));
}

enum Held {
    Lock(lock_core::Guard),
    Permit(lock_core::Permit),
    Read(lock_core::ReadGuard),
    Write(lock_core::WriteGuard),
    Leader(Box<lock_core::Leadership>),
}

impl Held {
    async fn fence(&self) -> Option<FencingToken> {
        match self {
            Held::Lock(g) => g.fence().await.ok(),
            Held::Permit(p) => p.fence().await.ok(),
            Held::Read(_) => None,
            Held::Write(w) => w.fence().await.ok(),
            Held::Leader(l) => Some(l.term()),
        }
    }

    fn valid_until(&self) -> Instant {
        match self {
            Held::Lock(g) => g.valid_until(),
            Held::Permit(p) => p.valid_until(),
            Held::Read(r) => r.valid_until(),
            Held::Write(w) => w.valid_until(),
            Held::Leader(l) => l.valid_until(),
        }
    }

    async fn release(self) -> lock_core::Result<ReleaseOutcome> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Permit(p) => p.release().await,
            Held::Read(r) => r.release().await,
            Held::Write(w) => w.release().await,
            Held::Leader(l) => l.resign().await,
        }
    }
}

/// The monotonic nanoseconds of `at` (the same clock as [`monotonic_nanos`] and Python's `time.monotonic_ns`).
fn nanos_of(at: Instant) -> u64 {
    let (now, now_ns) = (Instant::now(), monotonic_nanos());
    match at.checked_duration_since(now) {
        Some(ahead) => now_ns.saturating_add(u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX)),
        None => now_ns.saturating_sub(u64::try_from(now.duration_since(at).as_nanos()).unwrap_or(u64::MAX)),
    }
}

async fn work(worker: String) {
    let (url, primitive, resource) = (env("LOCK_SOAK_URL"), env("LOCK_SOAK_PRIMITIVE"), env("LOCK_SOAK_RESOURCE"));
    let freeze_every: u64 = env("LOCK_SOAK_FREEZE_EVERY").parse().unwrap();
    let store = RedisStore::connect(&url).await.unwrap();
    let lock = Lock::new(store.clone());
    let guard = FencedResource::with_guard(store, &format!("{resource}:data:fence")).unwrap();
    let data = format!("{resource}:data");
    let mut events = std::fs::OpenOptions::new().append(true).create(true).open(env("LOCK_SOAK_EVENTS")).unwrap();
    let options = LockOptions::new(ms(TTL_MS)).with_wait(ms(10_000));
    let limit: Option<u32> = primitive.strip_prefix("semaphore:").map(|l| l.parse().unwrap());
    let semaphore = limit.map(|limit| Semaphore::new(lock.clone(), &resource, limit).unwrap());
    let rwlock = RwLock::new(lock.clone(), &resource).unwrap();
    let election_options = ElectionOptions::default()
        .with_lease(ms(TTL_MS))
        .with_renew_deadline(ms(TTL_MS * 3 / 4))
        .with_retry_period(ms(TTL_MS / 8));
    let election = Election::new(lock.clone(), &resource, election_options).unwrap();
    let mut holds = 0_u64;
    loop {
        let writer = rand::rng().random_range(0..3) == 0;
        let acquired = match (primitive.as_str(), &semaphore) {
            ("mutex", _) => lock.acquire(&resource, &options).await.map(|g| ("exclusive", Held::Lock(g))),
            (_, Some(semaphore)) => {
                let mode = if limit == Some(1) { "exclusive" } else { "shared" };
                semaphore.acquire(1, &options).await.map(|p| (mode, Held::Permit(p)))
            }
            ("rwlock", _) if writer => rwlock.write(&options).await.map(|w| ("exclusive", Held::Write(w))),
            ("rwlock", _) => rwlock.read(&options).await.map(|r| ("shared", Held::Read(r))),
            _ => match tokio::time::timeout(ms(10_000), election.campaign(&worker, &worker)).await {
                Ok(elected) => elected.map(|l| ("exclusive", Held::Leader(Box::new(l)))),
                Err(_) => continue,
            },
        };
        let (mode, held) = match acquired {
            Ok(acquired) => acquired,
            Err(err) => {
                eprintln!("{worker}: acquire: {err}");
                tokio::time::sleep(ms(50)).await;
                continue;
            }
        };
        let acquired_ns = monotonic_nanos();
        holds += 1;
        let fence = held.fence().await;
        let mut write = "none".to_owned();
        if mode == "exclusive" {
            if let Some(fence) = fence {
                if holds.is_multiple_of(freeze_every) {
                    // Frozen between its acquire and its write, as by a GC pause: the controller thaws it after its
                    // TTL has passed, and the guard must refuse the write if a newer holder wrote meanwhile.
                    let status = Command::new("kill").args(["-STOP", &std::process::id().to_string()]).status();
                    assert!(status.is_ok_and(|s| s.success()), "kill -STOP");
                }
                write = match guard.rpush(fence, &data, &[&format!("{worker} {}", fence.get())]).await {
                    Ok(_) => "accepted".to_owned(),
                    Err(LockError::StaleFence { .. }) => "stale".to_owned(),
                    Err(err) => format!("error: {err}"),
                };
            }
        }
        let hold_ms = rand::rng().random_range(5..50);
        tokio::time::sleep(ms(hold_ms)).await;
        let released_ns = monotonic_nanos();
        let valid_until_ns = nanos_of(held.valid_until());
        let release = match held.release().await {
            Ok(ReleaseOutcome::Released) => "released".to_owned(),
            Ok(ReleaseOutcome::AlreadyExpired) => "expired".to_owned(),
            Ok(ReleaseOutcome::OwnedByOther) => "owned_by_other".to_owned(),
            Ok(other) => format!("{other:?}"),
            Err(err) => format!("error: {err}"),
        };
        let event = json!({
            "worker": worker, "lang": "rust", "primitive": primitive, "mode": mode,
            "acquired_ns": acquired_ns, "released_ns": released_ns, "valid_until_ns": valid_until_ns,
            "fence": fence.map(|f| f.get()), "write": write, "release": release,
        });
        events.write_all(format!("{event}\n").as_bytes()).unwrap();
        // As the Python worker: a short pause, so a releaser looping back does not always beat the waiter it woke.
        tokio::time::sleep(ms(rand::rng().random_range(1..4))).await;
    }
}

// ---- the controller -----------------------------------------------------------------------------------------------

/// One worker process of either language.
enum Process {
    Rust(WorkerProcess),
    Python(Child),
}

impl Process {
    fn pid(&self) -> Option<u32> {
        match self {
            Process::Rust(w) => w.pid(),
            Process::Python(c) => Some(c.id()),
        }
    }

    fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").args([signal, &pid.to_string()]).status();
        }
    }

    fn stopped(&self) -> bool {
        let Some(pid) = self.pid() else { return false };
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
            .unwrap_or(false)
    }

    fn kill(&mut self) {
        match self {
            Process::Rust(w) => w.kill(),
            Process::Python(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

struct Setup<'a> {
    url: String,
    primitive: &'a str,
    resource: String,
    events: PathBuf,
}

fn spawn(setup: &Setup<'_>, python: bool, id: u32) -> Process {
    if python {
        let child = Command::new(python_path())
            .arg(python_worker_script())
            .args([&setup.url, setup.primitive, &setup.resource, &format!("python-{id}"), &TTL_MS.to_string()])
            .arg(&setup.events)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the Python worker (clients/python/setup.sh makes its virtual environment)");
        Process::Python(child)
    } else {
        let vars = [
            ("LOCK_SOAK_URL", setup.url.clone()),
            ("LOCK_SOAK_PRIMITIVE", setup.primitive.to_owned()),
            ("LOCK_SOAK_RESOURCE", setup.resource.clone()),
            ("LOCK_SOAK_EVENTS", setup.events.display().to_string()),
            ("LOCK_SOAK_FREEZE_EVERY", "7".to_owned()),
        ];
        Process::Rust(WorkerProcess::spawn(WORKER_ENTRY, id, &vars).unwrap())
    }
}

fn python_path() -> PathBuf {
    let path = python();
    assert!(path.exists(), "{} is missing: run clients/python/setup.sh (scripts/test.sh does)", path.display());
    path
}

/// What one primitive's run did and found.
#[derive(Debug, Default)]
struct Figures {
    holds: HashMap<&'static str, usize>,
    pauses: usize,
    self_freezes: usize,
    kills: usize,
    accepted: usize,
    stale_refused: usize,
    violations: Vec<String>,
}

fn hold_of(event: &Value, base: (Instant, u64)) -> Hold {
    let at = |ns: u64| {
        let (instant, base_ns) = base;
        if ns >= base_ns {
            instant + Duration::from_nanos(ns - base_ns)
        } else {
            instant.checked_sub(Duration::from_nanos(base_ns - ns)).unwrap_or(instant)
        }
    };
    let acquired = event["acquired_ns"].as_u64().unwrap();
    let end = event["released_ns"].as_u64().unwrap().min(event["valid_until_ns"].as_u64().unwrap());
    Hold {
        owner: event["worker"].as_str().unwrap().to_owned(),
        fence: event["fence"].as_u64(),
        start: at(acquired),
        end: at(end),
    }
}

/// The most holds alive at one instant.
fn most_at_once(holds: &[Hold]) -> usize {
    let mut edges: Vec<(Instant, i32)> =
        holds.iter().filter(|h| h.end > h.start).flat_map(|h| [(h.start, 1), (h.end, -1)]).collect();
    // At one instant an end comes before a start: a hold that ends where another starts does not overlap it.
    edges.sort_by_key(|(at, delta)| (*at, *delta));
    let (mut now, mut most) = (0_i32, 0_i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

#[allow(clippy::disallowed_methods)] // the controller is a plain thread: no async runtime to block
fn run_primitive(server: &RedisServer, primitive: &'static str, secs: u64, dir: &Path) -> Figures {
    let setup = Setup {
        url: server.url(),
        primitive,
        resource: format!("soak-{}", primitive.replace(':', "-")),
        events: dir.join(format!("{}.jsonl", primitive.replace(':', "-"))),
    };
    let mut figures = Figures::default();
    let mut workers: Vec<(bool, u32, Process)> =
        (0..4).map(|i| (i % 2 == 0, i, spawn(&setup, i % 2 == 0, i))).collect();
    let mut rng = rand::rng();
    let ttl = ms(TTL_MS);
    // A worker we froze, or one that froze itself, and when it is to be thawed.
    let mut frozen: HashMap<u32, Instant> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut next_fault = Instant::now() + ms(500);
    while Instant::now() < deadline {
        std::thread::sleep(ms(20));
        let now = Instant::now();
        for (_, id, process) in &workers {
            if !frozen.contains_key(id) && process.stopped() {
                // A Rust worker froze itself between its acquire and its write.
                figures.self_freezes += 1;
                frozen.insert(*id, now + ttl * 2);
            }
        }
        frozen.retain(|id, thaw| {
            if now < *thaw {
                return true;
            }
            if let Some((_, _, process)) = workers.iter().find(|(_, w, _)| w == id) {
                process.signal("-CONT");
            }
            false
        });
        if now < next_fault {
            continue;
        }
        next_fault = now + ms(rng.random_range(300..700));
        let pick = rng.random_range(0..workers.len());
        let (python, id, process) = &mut workers[pick];
        if frozen.contains_key(id) {
            continue;
        }
        if rng.random_range(0..5) == 0 {
            // Killed, and a new process takes its place (a crashed replica restarted).
            process.kill();
            *process = spawn(&setup, *python, *id + 10);
            *id += 10;
            figures.kills += 1;
        } else {
            process.signal("-STOP");
            frozen.insert(*id, now + ttl + ms(rng.random_range(TTL_MS / 2..TTL_MS * 2)));
            figures.pauses += 1;
        }
    }
    for (_, _, process) in &mut workers {
        process.signal("-CONT");
        process.kill();
    }

    let text = std::fs::read_to_string(&setup.events).unwrap_or_default();
    // A worker killed mid-write leaves a partial last line: skipped.
    let events: Vec<Value> = text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let base = (Instant::now(), monotonic_nanos());
    let (mut exclusive, mut shared) = (Vec::new(), Vec::new());
    for event in &events {
        let lang = if event["lang"] == "python" { "python" } else { "rust" };
        *figures.holds.entry(lang).or_default() += 1;
        match event["write"].as_str() {
            Some("accepted") => figures.accepted += 1,
            Some("stale") => figures.stale_refused += 1,
            Some("none") => {}
            other => figures.violations.push(format!("a guarded write failed otherwise: {other:?} in {event}")),
        }
        if event["mode"] == "exclusive" {
            exclusive.push(hold_of(event, base));
        } else {
            shared.push(hold_of(event, base));
        }
    }
    let findings = match primitive {
        "mutex" => primitive_checker::mutex(&exclusive),
        "election" => primitive_checker::election(&exclusive),
        "rwlock" => primitive_checker::rwlock(&shared, &exclusive),
        _ => {
            let limit: usize = primitive.trim_start_matches("semaphore:").parse().unwrap();
            let most = most_at_once(&shared);
            let mut findings = primitive_checker::Findings::default();
            if most > limit {
                findings.problems.push(format!("{most} permits held at once, limit {limit}"));
            }
            findings
        }
    };
    figures.violations.extend(findings.problems);

    // The guard's order: every accepted write appended its fence; a fence below an earlier one is a stale write
    // accepted.
    let log = server.command(&["LRANGE", &format!("{}:data", setup.resource), "0", "-1"]).unwrap();
    let lock_testkit::Reply::Array(entries) = log else { panic!("LRANGE: {log:?}") };
    let fences: Vec<u64> = entries
        .iter()
        .filter_map(lock_testkit::Reply::as_text)
        .filter_map(|entry| entry.rsplit_once(' ').and_then(|(_, f)| f.parse().ok()))
        .collect();
    for pair in fences.windows(2) {
        if pair[1] <= pair[0] {
            figures.violations.push(format!("the guard accepted fence {} after {}", pair[1], pair[0]));
        }
    }
    if fences.len() < figures.accepted {
        figures.violations.push(format!("{} writes acknowledged, {} in the list", figures.accepted, fences.len()));
    }
    figures
}

#[test]
fn rust_and_python_processes_share_every_primitive_under_pauses_and_kills() {
    if worker_id().is_some() {
        return;
    }
    let _ = python_path();
    let secs: u64 = std::env::var("LOCK_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut stale_refused = 0;
    for primitive in ["mutex", "semaphore:2", "rwlock", "election"] {
        let figures = run_primitive(&server, primitive, secs, dir.path());
        println!(
            "cross-language soak, {primitive}, {secs} s: holds {:?}, pauses {}, self-freezes {}, kills {}, guarded writes \
             accepted {}, stale refused {}, violations {}",
            figures.holds,
            figures.pauses,
            figures.self_freezes,
            figures.kills,
            figures.accepted,
            figures.stale_refused,
            figures.violations.len()
        );
        assert!(figures.violations.is_empty(), "{primitive}: {:#?}", figures.violations);
        for lang in ["python", "rust"] {
            assert!(figures.holds.get(lang).copied().unwrap_or(0) > 0, "{primitive}: no {lang} hold: {figures:?}");
        }
        stale_refused += figures.stale_refused;
    }
    // The workload bites: writers frozen between acquire and write came back after a newer holder wrote.
    assert!(stale_refused > 0, "no stale write was tried: the run proves nothing about the guard");
}
