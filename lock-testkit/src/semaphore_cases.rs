//! The semaphore across processes and under faults, on real redis-servers: the study's tests 1–4 and 8 (section
//! 1.7) that need more than one process or a real server (the in-process cases are in
//! [`semaphore_conformance`](crate::semaphore_conformance), run by every backend). Holders in worker processes are
//! killed (`SIGKILL`) and paused (`SIGSTOP`). Each case prints its measured figures (`--nocapture`).
//!
//! [`semaphore_fault_tests!`](crate::semaphore_fault_tests) writes the cases and the worker entry for a backend.
//! `SEMAPHORE_SOAK_SECS` sets the soak's length (default 6 s); `SEMAPHORE_SEED` replays its schedule.
#![allow(clippy::print_stdout)] // each case reports what it measured

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use futures_util::future::select;
use lock_core::backend::Call;
use lock_core::{Lock, LockError, LockOptions, ReleaseOutcome, RenewPolicy, Semaphore};
use rand::SeedableRng;

use crate::checker::{Checker, Hold};
use crate::history::{instant_nanos, monotonic_nanos, nanos_instant};
use crate::or_panic::ms;
use crate::or_panic::OrPanic;
use crate::scripted::CancelAfter;
use crate::server_cases::UrlFactory;
use crate::worker::{append_line, kill_and_pause_at_random, wait_for_line, worker_id, worker_var, WorkerProcess};
use crate::RedisServer;

const NAME: &str = "sem:faults";
const TTL_MS: u64 = 600;

async fn semaphore(connect: &UrlFactory, url: &str, limit: u32) -> Semaphore {
    let lock = Lock::from_arc(connect(url.to_owned()).await.or_panic());
    Semaphore::new(lock, NAME, limit).or_panic()
}

fn renewed() -> LockOptions {
    LockOptions::new(ms(TTL_MS)).with_wait(ms(10_000)).with_auto_renew(RenewPolicy::default())
}

/// The worker processes' entry: call it from a `#[test] fn semaphore_worker()` at the root of the test binary (what
/// [`semaphore_fault_tests!`](crate::semaphore_fault_tests) writes); it does nothing in a normal test run.
///
/// # Panics
/// When the worker's environment is incomplete or a call fails (the worker's failure shows in the case).
pub fn worker(connect: &UrlFactory) {
    let Some(id) = worker_id() else { return };
    let dir = PathBuf::from(worker_var("SEMAPHORE_DIR"));
    let url = worker_var("SEMAPHORE_URL");
    let role = worker_var("SEMAPHORE_ROLE");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().or_panic();
    rt.block_on(async move {
        // The hold cases use a limit of 3, the soak 2.
        let limit = if role == "soak" { 2 } else { 3 };
        let sem = semaphore(connect, &url, limit).await;
        match role.as_str() {
            // Holds 2 of 3 (renewed), then waits to be killed or paused; after a pause, reports what it finds.
            "hold" => {
                let permit = sem.acquire(2, &renewed()).await.or_panic();
                append_line(&dir.join("held"), &format!("{}", monotonic_nanos()));
                tokio::time::sleep(ms(3_000)).await;
                let lost = permit.is_lost();
                let extend = match permit.extend(ms(TTL_MS)).await {
                    Ok(_) => "extended".to_owned(),
                    Err(LockError::Lost { .. }) => "lost".to_owned(),
                    Err(other) => format!("{other}"),
                };
                let release = match permit.release().await {
                    Ok(ReleaseOutcome::Released) => "released".to_owned(),
                    Ok(ReleaseOutcome::AlreadyExpired) => "expired".to_owned(),
                    other => format!("{other:?}"),
                };
                append_line(&dir.join("after"), &format!("{lost} {extend} {release}"));
            }
            // The soak: two tasks take one permit at a time, record what they believe per slot, and give it back.
            "soak" => {
                let tasks = (0..2).map(|t| {
                    let (sem, dir) = (sem.clone(), dir.clone());
                    async move {
                        let log = dir.join(format!("soak-{id}-{t}"));
                        loop {
                            let Ok(permit) = sem.acquire(1, &renewed()).await else { continue };
                            let start = monotonic_nanos();
                            let fence = permit.fence().await.ok().map_or(0, |f| f.get());
                            let slot = permit.slots().first().copied().unwrap_or(u32::MAX);
                            for _ in 0..3 {
                                let until = instant_nanos(permit.valid_until());
                                append_line(&log, &format!("belief {slot} {fence} {start} {until}"));
                                if permit.is_lost() {
                                    break;
                                }
                                tokio::time::sleep(ms(15)).await;
                            }
                            // Stops believing before the release is sent.
                            append_line(&log, &format!("end {slot} {fence} {}", monotonic_nanos()));
                            let _ = permit.release().await;
                        }
                    }
                });
                futures_util::future::join_all(tasks).await;
            }
            other => panic!("unknown role {other}"),
        }
    });
}

fn spawn(role: &str, id: u32, url: &str, dir: &Path) -> WorkerProcess {
    let vars = [
        ("SEMAPHORE_ROLE", role.to_owned()),
        ("SEMAPHORE_URL", url.to_owned()),
        ("SEMAPHORE_DIR", dir.display().to_string()),
    ];
    WorkerProcess::spawn("semaphore_worker", id, &vars).or_panic()
}

/// Test 2: a process holding 2 of 3 permits (renewed) is SIGKILLed; an acquirer here waiting for 2 gets them
/// within the TTL (+ slack for a loaded machine), and never more than the limit is held meanwhile.
pub async fn a_killed_holder_s_permits_return_within_its_ttl(connect: &UrlFactory) {
    let server = RedisServer::start().or_panic();
    let dir = tempfile::tempdir().or_panic();
    let mut worker = spawn("hold", 1, &server.url(), dir.path());
    wait_for_line(&dir.path().join("held"), "the worker's acquire").await;
    let sem = semaphore(connect, &server.url(), 3).await;
    assert!(sem.try_acquire(2, &renewed()).await.or_panic().is_none(), "2 more of 3 while 2 are held");
    let one = sem.try_acquire(1, &renewed()).await.or_panic().or_panic();
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move {
            let permit = sem.acquire(2, &renewed()).await;
            (permit, Instant::now())
        })
    };
    tokio::time::sleep(ms(100)).await;
    let killed = Instant::now();
    worker.kill();
    let (permit, at) = waiter.await.or_panic();
    let permit = permit.or_panic();
    let took = at - killed;
    println!(
        "SIGKILL of a holder of 2 of 3 → its permits re-granted after {:.0} ms (TTL {TTL_MS} ms)",
        took.as_secs_f64() * 1e3
    );
    assert!(took < ms(TTL_MS + 500), "re-granted after {took:?}");
    assert_eq!(sem.state().await.or_panic().held, 3);
    permit.release().await.or_panic();
    one.release().await.or_panic();
}

/// Test 3: a holder paused past its TTL has its permits re-granted; when it resumes its permit is lost, its extend
/// is `Lost`, its release says it had expired, and the count is unchanged (no double free).
pub async fn a_paused_holder_never_frees_twice(connect: &UrlFactory) {
    let server = RedisServer::start().or_panic();
    let dir = tempfile::tempdir().or_panic();
    let mut worker = spawn("hold", 1, &server.url(), dir.path());
    wait_for_line(&dir.path().join("held"), "the worker's acquire").await;
    let sem = semaphore(connect, &server.url(), 3).await;
    worker.pause();
    let paused = Instant::now();
    let taken = tokio::time::timeout(ms(5_000), sem.acquire(3, &renewed())).await.or_panic().or_panic();
    println!("SIGSTOP of a holder → all 3 permits re-granted after {:.0} ms", paused.elapsed().as_secs_f64() * 1e3);
    worker.resume();
    let after = wait_for_line(&dir.path().join("after"), "the resumed worker's report").await;
    assert_eq!(after.trim(), "true lost expired", "what the resumed holder found");
    assert_eq!(sem.state().await.or_panic().held, 3, "the stale release changed the count");
    worker.kill();
    taken.release().await.or_panic();
}

/// Test 4: the acquire script run twice with one token (a lost reply, retried) grants once: the same slots and the
/// same fence, and only those slots are held.
pub async fn a_retried_acquire_returns_the_same_grant(connect: &UrlFactory) {
    let server = RedisServer::start().or_panic();
    let store = connect(server.url()).await.or_panic();
    let base = format!("wlp:sem:{{{NAME}}}");
    let keys = [
        format!("{base}:permits"),
        format!("{base}:slots"),
        format!("{base}:permit-grants"),
        format!("{base}:limit"),
        format!("{base}:fence"),
        format!("{base}:awaited"),
    ];
    let call_keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let token = lock_core::Token::generate();
    let args = [token.as_str(), "2", "30000", "3", "1", ""];
    let mut replies = Vec::new();
    for _ in 0..2 {
        let call = Call::script("acquire", &lock_core::backend::scripts::SEM_ACQUIRE, &call_keys, &args);
        replies.push(store.call(call).await.or_panic().reply);
    }
    assert_eq!(replies[0], replies[1], "a retry with the same token granted again");
    let sem = semaphore(connect, &server.url(), 3).await;
    assert_eq!(sem.state().await.or_panic().held, 2, "a retry took more slots");
}

/// Test 7 at full size: 10 000 acquires of 1 or 2 permits cancelled at every point (after 1 to 6 polls, or 2 ms)
/// while another holder keeps the semaphore nearly full leave no permit behind once their TTL has passed, and no key
/// but the fencing counter once the last permit is released.
pub async fn ten_thousand_cancelled_acquires_leave_nothing_behind(connect: &UrlFactory) {
    let server = RedisServer::start().or_panic();
    let sem = semaphore(connect, &server.url(), 3).await;
    let options = LockOptions::new(ms(300)).with_wait(ms(50));
    let holder = sem.acquire(1, &LockOptions::new(ms(5_000))).await.or_panic();
    let started = Instant::now();
    for i in 0..10_000u32 {
        let acquire = CancelAfter::new(sem.acquire(1 + i % 2, &options), 1 + i % 6);
        let _ = select(Box::pin(acquire), Box::pin(tokio::time::sleep(ms(2)))).await;
    }
    let stormed = started.elapsed();
    holder.release().await.or_panic();
    let released = Instant::now();
    while sem.state().await.or_panic().held > 0 {
        assert!(released.elapsed() < ms(3_000), "cancelled acquires left permits behind past their TTL");
        tokio::time::sleep(ms(10)).await;
    }
    let free = released.elapsed();
    loop {
        // The fencing counter stays (one small string per name, as the lock's).
        let left = server.command(&["EVAL", crate::server::KEYS_BUT_COUNTERS, "0", "wlp:*"]).or_panic();
        if matches!(&left, crate::Reply::Array(items) if items.is_empty()) {
            break;
        }
        assert!(released.elapsed() < ms(5_000), "keys outlived the storm: {left:?}");
        tokio::time::sleep(ms(20)).await;
    }
    println!(
        "10 000 cancelled acquires in {:.1} s → no permit held {:.0} ms after the last release, no key left {:.0} ms after",
        stormed.as_secs_f64(),
        free.as_secs_f64() * 1e3,
        released.elapsed().as_secs_f64() * 1e3
    );
}

/// Tests 1 and 8: 6 holders in 3 processes take one permit of 2 at a time for a bounded
/// time while processes are SIGKILLed (and restarted) and SIGSTOPped at random. Per slot, no two beliefs overlap
/// and the fencing tokens strictly increase; after a restart of the server without persistence the tokens stay
/// above every earlier one.
pub fn soak_holders_in_three_processes_under_kills_and_pauses(connect: &UrlFactory) {
    let secs: u64 = std::env::var("SEMAPHORE_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let seed: u64 = std::env::var("SEMAPHORE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("semaphore soak: {secs} s, SEMAPHORE_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let server = RedisServer::start().or_panic();
    let dir = tempfile::tempdir().or_panic();
    let mut workers: Vec<WorkerProcess> = (1..=3).map(|id| spawn("soak", id, &server.url(), dir.path())).collect();
    let url = server.url();
    let (kills, pauses) =
        kill_and_pause_at_random(&mut workers, secs, &mut rng, |id| spawn("soak", id, &url, dir.path()));
    // Per (slot, fence): believed from `start` until the earlier of its last deadline and its end.
    let mut beliefs: BTreeMap<(u32, u64), (u64, u64, Option<u64>)> = BTreeMap::new();
    for entry in std::fs::read_dir(dir.path()).or_panic() {
        let path = entry.or_panic().path();
        if !path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("soak-")) {
            continue;
        }
        for line in std::fs::read_to_string(&path).or_panic().lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["belief", slot, fence, start, until] => {
                    let key = (slot.parse().or_panic(), fence.parse().or_panic());
                    let (start, until): (u64, u64) = (start.parse().or_panic(), until.parse().or_panic());
                    let b = beliefs.entry(key).or_insert((start, until, None));
                    b.1 = b.1.max(until);
                }
                ["end", slot, fence, at] => {
                    if let Some(b) = beliefs.get_mut(&(slot.parse().or_panic(), fence.parse().or_panic())) {
                        b.2 = Some(at.parse().or_panic());
                    }
                }
                _ => {}
            }
        }
    }
    let mut per_slot: BTreeMap<u32, Checker> = BTreeMap::new();
    for ((slot, fence), (start, until, end)) in &beliefs {
        let end = end.map_or(*until, |e| e.min(*until)).max(*start);
        per_slot.entry(*slot).or_default().record(Hold {
            owner: format!("{slot}:{fence}"),
            fence: Some(*fence),
            start: nanos_instant(*start),
            end: nanos_instant(end),
        });
    }
    println!("semaphore soak: {} grants over {} slots, {kills} kills, {pauses} pauses", beliefs.len(), per_slot.len());
    assert!(per_slot.keys().all(|slot| *slot < 2), "a slot outside the limit: {:?}", per_slot.keys());
    for (slot, checker) in &per_slot {
        let report = checker.report();
        assert!(report.overlaps.is_empty(), "slot {slot}: two holders at once: {:?}", report.overlaps);
        assert!(report.fence_regressions.is_empty(), "slot {slot}: tokens went back: {:?}", report.fence_regressions);
    }
    assert!(beliefs.len() >= 20, "too few grants to mean anything: {}", beliefs.len());

    // Test 8's second half: a restart without persistence loses the counter; the time floor keeps tokens above.
    let highest = beliefs.keys().map(|(_, fence)| *fence).max().unwrap_or(0);
    let mut server = server;
    server.restart().or_panic();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().or_panic();
    rt.block_on(async {
        let sem = semaphore(connect, &server.url(), 2).await;
        let permit = sem.acquire(1, &renewed()).await.or_panic();
        let fence = permit.fence().await.ok().map_or(0, |f| f.get());
        assert!(fence > highest, "token {fence} after a restart, {highest} before");
        permit.release().await.or_panic();
    });
}
