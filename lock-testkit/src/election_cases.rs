//! Elections across processes and under faults, on real redis-servers: the election study's tests 1–6 (section
//! 5.4) that need more than one process (the in-process cases are in [`election_conformance`](crate::election_conformance),
//! run by every backend). Candidates in worker processes are killed (`SIGKILL`) and paused (`SIGSTOP`); candidates on
//! separate connections stand for separate processes where only the server connects them. Each case prints its
//! measured figures (`--nocapture`).
//!
//! [`election_fault_tests!`](crate::election_fault_tests) writes the cases and the worker entry for a backend.
//! `ELECTION_SOAK_SECS` sets the soak's length (default 6 s); `ELECTION_SEED` replays its schedule.
#![allow(clippy::print_stdout)] // each case reports what it measured

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::{Election, ElectionOptions, Lock, LockError};
use rand::{RngExt, SeedableRng};

use crate::checker::{Checker, Hold};
use crate::history::{instant_nanos, monotonic_nanos, nanos_instant};
use crate::or_panic::ms;
use crate::or_panic::OrPanic;
use crate::server_cases::UrlFactory;
use crate::worker::{append_line, blocking_sleep, wait_for_line, worker_id, worker_var, WorkerProcess};
use crate::{CounterClient, FaultProxy, FencedCounter, RedisServer, WriteOutcome};

async fn lock_at(connect: &UrlFactory, url: &str) -> Lock {
    Lock::from_arc(connect(url.to_owned()).await.or_panic())
}

/// Lease 800 ms, renew deadline 500 ms, retry period 100 ms.
fn fast() -> ElectionOptions {
    ElectionOptions::default().with_lease(ms(800)).with_renew_deadline(ms(500)).with_retry_period(ms(100))
}

const NAME: &str = "election:faults";

/// The worker processes' entry: call it from a `#[test] fn election_worker()` at the root of the test binary (what
/// [`election_fault_tests!`](crate::election_fault_tests) writes); it does nothing in a normal test run.
///
/// # Panics
/// When the worker's environment is incomplete or a call fails (the worker's failure shows in the case).
pub fn worker(connect: &UrlFactory) {
    let Some(id) = worker_id() else { return };
    let dir = PathBuf::from(worker_var("ELECTION_DIR"));
    let url = worker_var("ELECTION_URL");
    let role = worker_var("ELECTION_ROLE");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().or_panic();
    rt.block_on(async move {
        let election = Election::new(lock_at(connect, &url).await, NAME, fast()).or_panic();
        match role.as_str() {
            // Elected, then hangs until killed or paused; after a pause, reports what it finds.
            "lead-and-wait" => {
                let leadership = election.campaign(&format!("worker-{id}"), "").await.or_panic();
                append_line(&dir.join("elected"), &format!("{} {}", leadership.term().get(), monotonic_nanos()));
                tokio::time::sleep(ms(3_000)).await;
                let lost = leadership.is_lost();
                let until = instant_nanos(leadership.valid_until());
                let proclaim = match leadership.proclaim("after the pause").await {
                    Ok(()) => "ok".to_owned(),
                    Err(LockError::NotLeader { .. }) => "not_leader".to_owned(),
                    Err(other) => format!("{other}"),
                };
                append_line(&dir.join("after"), &format!("{lost} {until} {proclaim}"));
            }
            // The soak: candidates that lead for ever, writing to the fenced counter with their term.
            "soak" => {
                let oracle: SocketAddr = worker_var("ELECTION_ORACLE").parse().or_panic();
                let candidates = worker_var("ELECTION_CANDIDATES").parse::<u32>().or_panic();
                let runs = (0..candidates).map(|c| {
                    let (election, dir) = (election.clone(), dir.clone());
                    async move {
                        let me = format!("w{id}c{c}");
                        let log = dir.join(format!("soak-{me}"));
                        let _ = election
                            .lead(&me, "", |ctx| {
                                let log = log.clone();
                                async move { soak_term(&log, oracle, ctx).await }
                            })
                            .await;
                    }
                });
                futures_util::future::join_all(runs).await;
            }
            other => panic!("unknown role {other}"),
        }
    });
}

/// One term of a soak candidate: records its belief (term, elected at, valid until) and writes with its term
/// while it may act (checked before every write, as a leader must).
async fn soak_term(log: &Path, oracle: SocketAddr, ctx: lock_core::LeaderContext) {
    let term = ctx.term.get();
    let start = monotonic_nanos();
    let mut counter = tokio::task::spawn_blocking(move || CounterClient::connect(oracle)).await.or_panic().or_panic();
    let mut last = Instant::now();
    loop {
        let until = ctx.lost.valid_until();
        append_line(log, &format!("belief {term} {start} {}", instant_nanos(until)));
        // A gap this long between two turns of a 20 ms loop: the process was paused.
        let paused = last.elapsed() > ms(300);
        last = Instant::now();
        if ctx.lost.is_lost() || Instant::now() >= until {
            if paused {
                // What a leader that does not check before writing would do after a pause (the bug fencing is
                // for): the resource must refuse it whenever a newer term has written.
                let sent = monotonic_nanos();
                let outcome = write(&mut counter, term);
                append_line(log, &format!("stale {term} {sent} {} {outcome}", monotonic_nanos()));
            }
            return;
        }
        let sent = monotonic_nanos();
        let outcome = write(&mut counter, term);
        append_line(log, &format!("write {term} {sent} {} {outcome}", monotonic_nanos()));
        tokio::time::sleep(ms(20)).await;
    }
}

/// One read-modify-write of the fenced counter with `term`; what the counter said.
fn write(counter: &mut CounterClient, term: u64) -> &'static str {
    let value = counter.read().or_panic();
    match counter.write(term, value, value + 1).or_panic() {
        WriteOutcome::Accepted => "accepted",
        WriteOutcome::Rejected => "rejected",
        WriteOutcome::LostUpdate => "lost-update",
    }
}

fn spawn(role: &str, id: u32, url: &str, dir: &Path, extra: &[(&str, String)]) -> WorkerProcess {
    let mut vars = vec![
        ("ELECTION_ROLE", role.to_owned()),
        ("ELECTION_URL", url.to_owned()),
        ("ELECTION_DIR", dir.display().to_string()),
    ];
    vars.extend(extra.iter().cloned());
    WorkerProcess::spawn("election_worker", id, &vars).or_panic()
}

/// Test 3 across connections: a resignation elects a candidate that only the server connects (its own client
/// and subscriber), and an observer on a third connection sees it, both far sooner than their 5 s retry period.
pub async fn resign_hands_over_across_processes_in_about_one_round_trip(connect: &UrlFactory) {
    let server = RedisServer::start().or_panic();
    let slow =
        ElectionOptions::default().with_lease(ms(30_000)).with_renew_deadline(ms(20_000)).with_retry_period(ms(5_000));
    let leader_side = Election::new(lock_at(connect, &server.url()).await, NAME, slow.clone()).or_panic();
    let candidate_side = Election::new(lock_at(connect, &server.url()).await, NAME, slow.clone()).or_panic();
    let observer_side = Election::new(lock_at(connect, &server.url()).await, NAME, slow).or_panic();
    let first = leader_side.campaign("first", "").await.or_panic();
    let mut observed = Box::pin(observer_side.observe());
    assert_eq!(observed.next().await.or_panic().or_panic().map(|l| l.id), Some("first".to_owned()));
    let candidate = tokio::spawn(async move {
        let leadership = candidate_side.campaign("second", "").await.or_panic();
        (leadership, Instant::now())
    });
    let started = Instant::now();
    while !leader_side.lock().inspect(NAME).await.or_panic().awaited() {
        assert!(started.elapsed() < ms(5_000), "the candidate never tried");
        tokio::time::sleep(ms(2)).await;
    }
    let resigned = Instant::now();
    first.resign().await.or_panic();
    let (second, elected) = candidate.await.or_panic();
    let mut seen_second = None;
    while seen_second.is_none() {
        let item = tokio::time::timeout(ms(2_000), observed.next())
            .await
            .unwrap_or_else(|_| panic!("the observer saw nothing within 2 s"));
        seen_second = item.or_panic().or_panic().filter(|l| l.id == "second").map(|_| Instant::now());
    }
    let (handover, observed_after) = (elected - resigned, seen_second.or_panic() - resigned);
    println!(
        "resign → new leader elected on another connection: {:.2} ms; → observer on a third saw it: {:.2} ms \
         (retry period 5 s)",
        handover.as_secs_f64() * 1e3,
        observed_after.as_secs_f64() * 1e3
    );
    assert!(handover < ms(1_000) && observed_after < ms(1_000), "not announced: {handover:?}, {observed_after:?}");
    second.resign().await.or_panic();
}

/// Test 2: the leader's process is SIGKILLed; a candidate in this process is elected within lease + retry period
/// (+ slack for a loaded machine), with a higher term.
pub async fn a_killed_leader_is_replaced_within_lease_and_retry_period(connect: &UrlFactory) {
    let server = RedisServer::start().or_panic();
    let dir = tempfile::tempdir().or_panic();
    let mut worker = spawn("lead-and-wait", 1, &server.url(), dir.path(), &[]);
    let elected = wait_for_line(&dir.path().join("elected"), "the worker's election").await;
    let old_term: u64 = elected.split_whitespace().next().or_panic().parse().or_panic();
    let election = Election::new(lock_at(connect, &server.url()).await, NAME, fast()).or_panic();
    let candidate = tokio::spawn(async move {
        let leadership = election.campaign("survivor", "").await.or_panic();
        (leadership, Instant::now())
    });
    tokio::time::sleep(ms(200)).await;
    let killed = Instant::now();
    worker.kill();
    let (leadership, at) = candidate.await.or_panic();
    let took = at - killed;
    let (lease, retry) = (fast().lease(), fast().retry_period());
    println!(
        "SIGKILL of the leader → new leader: {:.0} ms (lease {lease:?}, retry period {retry:?})",
        took.as_secs_f64() * 1e3
    );
    assert!(leadership.term().get() > old_term);
    assert!(took < lease + retry + ms(700), "replaced after {took:?}");
    leadership.resign().await.or_panic();
}

/// Test 2 (pause): the leader's process is SIGSTOPped for longer than its lease; a candidate here is elected; when
/// the leader resumes, its leadership is already lost (its deadline, by its own clock, was before the new leader's
/// election) and `proclaim` is `NotLeader`.
pub async fn a_paused_leader_stopped_before_another_was_elected(connect: &UrlFactory) {
    let server = RedisServer::start().or_panic();
    let dir = tempfile::tempdir().or_panic();
    let mut worker = spawn("lead-and-wait", 1, &server.url(), dir.path(), &[]);
    wait_for_line(&dir.path().join("elected"), "the worker's election").await;
    let election = Election::new(lock_at(connect, &server.url()).await, NAME, fast()).or_panic();
    worker.pause();
    let paused = Instant::now();
    let leadership = tokio::time::timeout(ms(5_000), election.campaign("while-paused", "")).await.or_panic().or_panic();
    let elected = Instant::now();
    worker.resume();
    let after = wait_for_line(&dir.path().join("after"), "the resumed worker's report").await;
    let mut fields = after.split_whitespace();
    let (lost, until, proclaim) = (fields.next().or_panic(), fields.next().or_panic(), fields.next().or_panic());
    let old_deadline = nanos_instant(until.parse().or_panic());
    println!(
        "SIGSTOP of the leader → new leader after {:.0} ms; the old leader's deadline was {:.0} ms before that",
        (elected - paused).as_secs_f64() * 1e3,
        elected.saturating_duration_since(old_deadline).as_secs_f64() * 1e3
    );
    assert_eq!(lost, "true", "the resumed leader still trusted its leadership");
    assert!(old_deadline < elected, "the old leader could act until after the new one was elected");
    assert_eq!(proclaim, "not_leader");
    worker.kill();
    leadership.resign().await.or_panic();
}

/// Test 6: terms keep increasing across a restart of a Redis without persistence (the counter is gone; the time
/// floor keeps the next term above every earlier one).
pub async fn terms_increase_across_a_restart_without_persistence(connect: &UrlFactory) {
    let mut server = RedisServer::start().or_panic();
    let election = Election::new(lock_at(connect, &server.url()).await, NAME, fast()).or_panic();
    let mut before = 0;
    for i in 0..3 {
        let leadership = election.campaign(&format!("before-{i}"), "").await.or_panic();
        before = before.max(leadership.term().get());
        leadership.resign().await.or_panic();
    }
    server.restart().or_panic();
    let started = Instant::now();
    let after = loop {
        match election.campaign("after", "").await {
            Ok(leadership) => break leadership,
            Err(err) => assert!(started.elapsed() < ms(10_000), "no election after the restart: {err}"),
        }
        tokio::time::sleep(ms(20)).await;
    };
    assert!(after.term().get() > before, "term {} after a restart, {before} before", after.term().get());
    after.resign().await.or_panic();
}

/// Test 4: a candidate cut off from the server (a black-holing proxy) never returns `Ok` while the leader's key
/// expires and another candidate takes it; once healed it is elected only when it really holds the key.
pub async fn a_partitioned_candidate_never_returns_ok_without_the_key(connect: &UrlFactory) {
    let server = RedisServer::start().or_panic();
    let proxy = FaultProxy::start(server.addr()).or_panic();
    let direct = Election::new(lock_at(connect, &server.url()).await, NAME, fast()).or_panic();
    let cut_off = Election::new(lock_at(connect, &proxy.url()).await, NAME, fast()).or_panic();
    let leader = direct.campaign("leader", "").await.or_panic();
    let campaign = tokio::spawn(async move { cut_off.campaign("cut-off", "").await });
    tokio::time::sleep(ms(100)).await;
    proxy.blackhole(true);
    // The leader resigns; a third candidate (connected) takes the key while the cut-off one cannot reach it.
    leader.resign().await.or_panic();
    let third = direct.campaign("third", "").await.or_panic();
    tokio::time::sleep(ms(1_500)).await;
    assert!(!campaign.is_finished(), "the cut-off candidate returned while partitioned: {:?}", campaign.await);
    assert_eq!(direct.leader().await.or_panic().map(|l| l.id), Some("third".to_owned()));
    proxy.blackhole(false);
    third.resign().await.or_panic();
    let elected = tokio::time::timeout(ms(10_000), campaign)
        .await
        .unwrap_or_else(|_| panic!("never elected after healing"))
        .or_panic();
    let elected = elected.unwrap_or_else(|e| panic!("elected after healing: {e}"));
    assert_eq!(direct.leader().await.or_panic().map(|l| (l.id, l.term)), Some(("cut-off".to_owned(), elected.term())));
    elected.resign().await.or_panic();
}

/// Test 1: 5 candidates in 3 processes run `lead()` for a bounded time while processes are SIGKILLed (and
/// restarted) and SIGSTOPped at random; every term writes to a fenced counter while it may act. No two beliefs of
/// leadership overlap, terms strictly increase in the order leaders were elected, no write was lost and the
/// counter accepted writes in term order.
pub fn soak_five_candidates_in_three_processes_under_kills_and_pauses(connect: &UrlFactory) {
    let secs: u64 = std::env::var("ELECTION_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let seed: u64 = std::env::var("ELECTION_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("election soak: {secs} s, ELECTION_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let server = RedisServer::start().or_panic();
    let oracle = FencedCounter::start().or_panic();
    let dir = tempfile::tempdir().or_panic();
    let candidates = [2u32, 2, 1];
    let start_worker = |id: u32| {
        let extra = [
            ("ELECTION_ORACLE", oracle.addr().to_string()),
            ("ELECTION_CANDIDATES", candidates[id as usize - 1].to_string()),
        ];
        spawn("soak", id, &server.url(), dir.path(), &extra)
    };
    let mut workers: Vec<WorkerProcess> = (1..=3).map(start_worker).collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().or_panic();
    let observer = rt.block_on(async { Election::new(lock_at(connect, &server.url()).await, NAME, fast()).or_panic() });
    let (mut kills, mut pauses, mut handovers) = (0, 0, 0);
    let started = Instant::now();
    let leader_now = |what: &str| {
        let waited = Instant::now();
        loop {
            if let Ok(Some(leader)) = rt.block_on(observer.leader()) {
                return leader;
            }
            assert!(waited.elapsed() < ms(5_000), "no leader for 5 s ({what})");
            blocking_sleep(ms(10));
        }
    };
    // Every round takes the leader's process down (ids are `w<worker>c<candidate>`), killed or paused, and waits
    // for another leader (which must come within the lease and a retry period, plus slack) before the paused one
    // resumes; now and then another process is disturbed too. At least three hand-overs, whatever the timing.
    while started.elapsed() < Duration::from_secs(secs) || handovers < 3 {
        assert!(started.elapsed() < Duration::from_secs(secs * 4 + 30), "the soak made too little progress");
        blocking_sleep(ms(rng.random_range(100..400)));
        if rng.random_bool(0.25) {
            let i = rng.random_range(0..workers.len());
            workers[i].kill();
            kills += 1;
            workers[i] = start_worker(u32::try_from(i).or_panic() + 1);
            continue;
        }
        let leader = leader_now("before a round");
        let worker = leader.id.strip_prefix('w').and_then(|w| w.split('c').next()?.parse::<usize>().ok());
        let i = worker.unwrap_or_else(|| panic!("a leader id this soak never gave: {}", leader.id)) - 1;
        let kill = rng.random_bool(0.5);
        if kill {
            workers[i].kill();
            kills += 1;
        } else {
            workers[i].pause();
            pauses += 1;
        }
        let down = Instant::now();
        loop {
            let next = leader_now("after the leader went down");
            if next.term > leader.term {
                break;
            }
            assert!(down.elapsed() < ms(5_000), "nobody replaced the leader {} within 5 s", leader.id);
            blocking_sleep(ms(10));
        }
        handovers += 1;
        if kill {
            workers[i] = start_worker(u32::try_from(i).or_panic() + 1);
        } else {
            blocking_sleep(ms(rng.random_range(0..300)));
            workers[i].resume();
        }
    }
    for worker in &mut workers {
        worker.kill();
    }

    // Each (candidate, term): elected at, last deadline seen. Writes: (sent, answered, term, outcome).
    let mut beliefs: BTreeMap<(String, u64), (u64, u64)> = BTreeMap::new();
    let mut writes: Vec<(u64, u64, u64, String)> = Vec::new();
    let mut stale = 0;
    for entry in std::fs::read_dir(dir.path()).or_panic() {
        let path = entry.or_panic().path();
        let name = path.file_name().or_panic().to_string_lossy().into_owned();
        let Some(candidate) = name.strip_prefix("soak-") else { continue };
        for line in std::fs::read_to_string(&path).or_panic().lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["belief", term, start, until] => {
                    let (term, start, until) =
                        (term.parse().or_panic(), start.parse().or_panic(), until.parse().or_panic());
                    let b = beliefs.entry((candidate.to_owned(), term)).or_insert((start, until));
                    b.1 = b.1.max(until);
                }
                [kind @ ("write" | "stale"), term, sent, answered, outcome] => {
                    stale += usize::from(*kind == "stale");
                    let (sent, answered) = (sent.parse().or_panic(), answered.parse().or_panic());
                    writes.push((sent, answered, term.parse().or_panic(), (*outcome).to_owned()));
                }
                // A line cut short by a kill.
                _ => {}
            }
        }
    }
    let checker = Checker::new();
    for ((candidate, term), (start, until)) in &beliefs {
        checker.record(Hold {
            owner: format!("{candidate}:{term}"),
            fence: Some(*term),
            start: nanos_instant(*start),
            end: nanos_instant((*until).max(*start)),
        });
    }
    let report = checker.report();
    let accepted: Vec<&(u64, u64, u64, String)> = writes.iter().filter(|w| w.3 != "rejected").collect();
    let lost_updates = writes.iter().filter(|w| w.3 == "lost-update").count();
    // In real-time order: an accepted write answered before another was sent has no higher term. (A write's own
    // moment lies between its two stamps; a process paused between the counter's answer and its stamp once made
    // a single stamp order two writes wrongly.)
    let out_of_order =
        accepted.iter().any(|earlier| accepted.iter().any(|later| earlier.1 < later.0 && earlier.2 > later.2));
    println!(
        "election soak: {} terms, {handovers} forced hand-overs, {} writes ({} accepted, {} rejected; {stale} by \
         paused leaders that did not check), {kills} kills, {pauses} pauses",
        beliefs.len(),
        writes.len(),
        accepted.len(),
        writes.len() - accepted.len()
    );
    assert!(report.overlaps.is_empty(), "leaderships overlapped: {:?}", report.overlaps);
    assert!(report.fence_regressions.is_empty(), "terms went back: {:?}", report.fence_regressions);
    assert_eq!(lost_updates, 0, "a write was lost");
    assert!(!out_of_order, "the counter accepted writes out of term order");
    assert!(beliefs.len() >= 3, "too few elections to mean anything: {}", beliefs.len());
}
