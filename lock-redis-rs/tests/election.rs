//! Elections across processes and under faults, on real redis-servers (the election study's tests 1–6, section 5.4;
//! the in-process cases are in lock-testkit's `election_conformance`, run by every backend). Candidates in worker
//! processes are killed (`SIGKILL`) and paused (`SIGSTOP`); candidates on separate connections stand for separate
//! processes where only the server connects them. Each case prints its measured figures (`--nocapture`).
//!
//! `ELECTION_SOAK_SECS` sets the multi-process soak's length (default 6 s).
#![cfg(feature = "tokio")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::disallowed_methods)] // tests fail by panicking; figures are printed

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::{Election, ElectionOptions, Lock, LockError};
use lock_redis_rs::RedisStoreBuilder;
use lock_testkit::history::{instant_nanos, monotonic_nanos, nanos_instant};
use lock_testkit::worker::{worker_id, WorkerProcess};
use lock_testkit::{Checker, CounterClient, FaultProxy, FencedCounter, Hold, RedisServer, WriteOutcome};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn lock_at(url: &str) -> Lock {
    Lock::new(RedisStoreBuilder::new(url).with_command_timeout(ms(300)).connect().await.unwrap())
}

/// Lease 800 ms, renew deadline 500 ms, retry period 100 ms.
fn fast() -> ElectionOptions {
    ElectionOptions::default().with_lease(ms(800)).with_renew_deadline(ms(500)).with_retry_period(ms(100))
}

const NAME: &str = "election:faults";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker needs {name}"))
}

fn append(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    writeln!(file, "{line}").unwrap();
}

/// Entry point of the worker processes (does nothing in a normal test run).
#[test]
fn election_worker() {
    let Some(id) = worker_id() else { return };
    let dir = PathBuf::from(var("ELECTION_DIR"));
    let url = var("ELECTION_URL");
    let role = var("ELECTION_ROLE");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let election = Election::new(lock_at(&url).await, NAME, fast()).unwrap();
        match role.as_str() {
            // Elected, then hangs until killed or paused; after a pause, reports what it finds.
            "lead-and-wait" => {
                let leadership = election.campaign(&format!("worker-{id}"), "").await.unwrap();
                append(&dir.join("elected"), &format!("{} {}", leadership.term().get(), monotonic_nanos()));
                tokio::time::sleep(ms(3_000)).await;
                let lost = leadership.is_lost();
                let until = instant_nanos(leadership.valid_until());
                let proclaim = match leadership.proclaim("after the pause").await {
                    Ok(()) => "ok".to_owned(),
                    Err(LockError::NotLeader { .. }) => "not_leader".to_owned(),
                    Err(other) => format!("{other}"),
                };
                append(&dir.join("after"), &format!("{lost} {until} {proclaim}"));
            }
            // The soak: candidates that lead for ever, writing to the fenced counter with their term.
            "soak" => {
                let oracle: SocketAddr = var("ELECTION_ORACLE").parse().unwrap();
                let candidates = var("ELECTION_CANDIDATES").parse::<u32>().unwrap();
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
    let mut counter = tokio::task::spawn_blocking(move || CounterClient::connect(oracle)).await.unwrap().unwrap();
    loop {
        let until = ctx.lost.valid_until();
        append(log, &format!("belief {term} {start} {}", instant_nanos(until)));
        if ctx.lost.is_lost() || Instant::now() >= until {
            return;
        }
        let value = counter.read().unwrap();
        let outcome = counter.write(term, value, value + 1).unwrap();
        let outcome = match outcome {
            WriteOutcome::Accepted => "accepted",
            WriteOutcome::Rejected => "rejected",
            WriteOutcome::LostUpdate => "lost-update",
        };
        append(log, &format!("write {term} {} {outcome}", monotonic_nanos()));
        tokio::time::sleep(ms(20)).await;
    }
}

fn spawn(role: &str, id: u32, url: &str, dir: &Path, extra: &[(&str, String)]) -> WorkerProcess {
    let mut vars = vec![
        ("ELECTION_ROLE", role.to_owned()),
        ("ELECTION_URL", url.to_owned()),
        ("ELECTION_DIR", dir.display().to_string()),
    ];
    vars.extend(extra.iter().cloned());
    WorkerProcess::spawn("election_worker", id, &vars).unwrap()
}

fn wait_for_file(path: &Path, what: &str) -> String {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(started.elapsed() < ms(20_000), "{what} never happened");
        std::thread::sleep(ms(2));
    }
}

/// Test 3 across connections: a resignation elects a candidate that only the server connects (its own client
/// and subscriber), and an observer on a third connection sees it, both far sooner than their 5 s retry period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_hands_over_across_processes_in_about_one_round_trip() {
    let server = RedisServer::start().unwrap();
    let slow =
        ElectionOptions::default().with_lease(ms(30_000)).with_renew_deadline(ms(20_000)).with_retry_period(ms(5_000));
    let leader_side = Election::new(lock_at(&server.url()).await, NAME, slow.clone()).unwrap();
    let candidate_side = Election::new(lock_at(&server.url()).await, NAME, slow.clone()).unwrap();
    let observer_side = Election::new(lock_at(&server.url()).await, NAME, slow).unwrap();
    let first = leader_side.campaign("first", "").await.unwrap();
    let mut observed = Box::pin(observer_side.observe());
    assert_eq!(observed.next().await.unwrap().unwrap().map(|l| l.id), Some("first".to_owned()));
    let candidate = tokio::spawn(async move {
        let leadership = candidate_side.campaign("second", "").await.unwrap();
        (leadership, Instant::now())
    });
    let started = Instant::now();
    while !leader_side.lock().inspect(NAME).await.unwrap().awaited() {
        assert!(started.elapsed() < ms(5_000), "the candidate never tried");
        tokio::time::sleep(ms(2)).await;
    }
    let resigned = Instant::now();
    first.resign().await.unwrap();
    let (second, elected) = candidate.await.unwrap();
    let mut seen_second = None;
    while seen_second.is_none() {
        let item = tokio::time::timeout(ms(2_000), observed.next()).await.expect("the observer saw nothing within 2 s");
        seen_second = item.unwrap().unwrap().filter(|l| l.id == "second").map(|_| Instant::now());
    }
    let (handover, observed_after) = (elected - resigned, seen_second.unwrap() - resigned);
    println!(
        "resign → new leader elected on another connection: {:.2} ms; → observer on a third saw it: {:.2} ms \
         (retry period 5 s)",
        handover.as_secs_f64() * 1e3,
        observed_after.as_secs_f64() * 1e3
    );
    assert!(handover < ms(1_000) && observed_after < ms(1_000), "not announced: {handover:?}, {observed_after:?}");
    second.resign().await.unwrap();
}

/// Test 2: the leader's process is SIGKILLed; a candidate in this process is elected within lease + retry period
/// (+ slack for a loaded machine), with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_lease_and_retry_period() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut worker = spawn("lead-and-wait", 1, &server.url(), dir.path(), &[]);
    let elected = wait_for_file(&dir.path().join("elected"), "the worker's election");
    let old_term: u64 = elected.split_whitespace().next().unwrap().parse().unwrap();
    let election = Election::new(lock_at(&server.url()).await, NAME, fast()).unwrap();
    let candidate = tokio::spawn(async move {
        let leadership = election.campaign("survivor", "").await.unwrap();
        (leadership, Instant::now())
    });
    tokio::time::sleep(ms(200)).await;
    let killed = Instant::now();
    worker.kill();
    let (leadership, at) = candidate.await.unwrap();
    let took = at - killed;
    let (lease, retry) = (fast().lease(), fast().retry_period());
    println!(
        "SIGKILL of the leader → new leader: {:.0} ms (lease {lease:?}, retry period {retry:?})",
        took.as_secs_f64() * 1e3
    );
    assert!(leadership.term().get() > old_term);
    assert!(took < lease + retry + ms(700), "replaced after {took:?}");
    leadership.resign().await.unwrap();
}

/// Test 2 (pause): the leader's process is SIGSTOPped for longer than its lease; a candidate here is elected; when
/// the leader resumes, its leadership is already lost (its deadline, by its own clock, was before the new leader's
/// election) and `proclaim` is `NotLeader`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_stopped_before_another_was_elected() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut worker = spawn("lead-and-wait", 1, &server.url(), dir.path(), &[]);
    wait_for_file(&dir.path().join("elected"), "the worker's election");
    let election = Election::new(lock_at(&server.url()).await, NAME, fast()).unwrap();
    worker.pause();
    let paused = Instant::now();
    let leadership = tokio::time::timeout(ms(5_000), election.campaign("while-paused", "")).await.unwrap().unwrap();
    let elected = Instant::now();
    worker.resume();
    let after = wait_for_file(&dir.path().join("after"), "the resumed worker's report");
    let mut fields = after.split_whitespace();
    let (lost, until, proclaim) = (fields.next().unwrap(), fields.next().unwrap(), fields.next().unwrap());
    let old_deadline = nanos_instant(until.parse().unwrap());
    println!(
        "SIGSTOP of the leader → new leader after {:.0} ms; the old leader's deadline was {:.0} ms before that",
        (elected - paused).as_secs_f64() * 1e3,
        elected.saturating_duration_since(old_deadline).as_secs_f64() * 1e3
    );
    assert_eq!(lost, "true", "the resumed leader still trusted its leadership");
    assert!(old_deadline < elected, "the old leader could act until after the new one was elected");
    assert_eq!(proclaim, "not_leader");
    worker.kill();
    leadership.resign().await.unwrap();
}

/// Test 6: terms keep increasing across a restart of a Redis without persistence (the counter is gone; the time
/// floor keeps the next term above every earlier one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_increase_across_a_restart_without_persistence() {
    let mut server = RedisServer::start().unwrap();
    let election = Election::new(lock_at(&server.url()).await, NAME, fast()).unwrap();
    let mut before = 0;
    for i in 0..3 {
        let leadership = election.campaign(&format!("before-{i}"), "").await.unwrap();
        before = before.max(leadership.term().get());
        leadership.resign().await.unwrap();
    }
    server.restart().unwrap();
    let started = Instant::now();
    let after = loop {
        match election.campaign("after", "").await {
            Ok(leadership) => break leadership,
            Err(err) => assert!(started.elapsed() < ms(10_000), "no election after the restart: {err}"),
        }
        tokio::time::sleep(ms(20)).await;
    };
    assert!(after.term().get() > before, "term {} after a restart, {before} before", after.term().get());
    after.resign().await.unwrap();
}

/// Test 4: a candidate cut off from the server (a black-holing proxy) never returns `Ok` while the leader's key
/// expires and another candidate takes it; once healed it is elected only when it really holds the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_candidate_never_returns_ok_without_the_key() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let direct = Election::new(lock_at(&server.url()).await, NAME, fast()).unwrap();
    let cut_off = Election::new(lock_at(&proxy.url()).await, NAME, fast()).unwrap();
    let leader = direct.campaign("leader", "").await.unwrap();
    let campaign = tokio::spawn(async move { cut_off.campaign("cut-off", "").await });
    tokio::time::sleep(ms(100)).await;
    proxy.blackhole(true);
    // The leader resigns; a third candidate (connected) takes the key while the cut-off one cannot reach it.
    leader.resign().await.unwrap();
    let third = direct.campaign("third", "").await.unwrap();
    tokio::time::sleep(ms(1_500)).await;
    assert!(!campaign.is_finished(), "the cut-off candidate returned while partitioned: {:?}", campaign.await);
    assert_eq!(direct.leader().await.unwrap().map(|l| l.id), Some("third".to_owned()));
    proxy.blackhole(false);
    third.resign().await.unwrap();
    let elected = tokio::time::timeout(ms(10_000), campaign).await.expect("never elected after healing").unwrap();
    let elected = elected.expect("elected after healing");
    assert_eq!(direct.leader().await.unwrap().map(|l| (l.id, l.term)), Some(("cut-off".to_owned(), elected.term())));
    elected.resign().await.unwrap();
}

/// Test 1: 5 candidates in 3 processes run `lead()` for a bounded time while processes are SIGKILLed (and
/// restarted) and SIGSTOPped at random; every term writes to a fenced counter while it may act. No two beliefs of
/// leadership overlap, terms strictly increase in the order leaders were elected, no write was lost and the
/// counter accepted writes in term order.
#[test]
fn soak_five_candidates_in_three_processes_under_kills_and_pauses() {
    let secs: u64 = std::env::var("ELECTION_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    let seed: u64 = std::env::var("ELECTION_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("election soak: {secs} s, ELECTION_SEED={seed}");
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let server = RedisServer::start().unwrap();
    let oracle = FencedCounter::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let candidates = [2u32, 2, 1];
    let start_worker = |id: u32| {
        let extra = [
            ("ELECTION_ORACLE", oracle.addr().to_string()),
            ("ELECTION_CANDIDATES", candidates[id as usize - 1].to_string()),
        ];
        spawn("soak", id, &server.url(), dir.path(), &extra)
    };
    let mut workers: Vec<WorkerProcess> = (1..=3).map(start_worker).collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let observer = rt.block_on(async { Election::new(lock_at(&server.url()).await, NAME, fast()).unwrap() });
    let (mut kills, mut pauses) = (0, 0);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(ms(rng.random_range(300..800)));
        // Mostly the leader's process (ids are `w<worker>c<candidate>`), sometimes any.
        let leader = rt.block_on(observer.leader()).ok().flatten();
        let leading = leader.and_then(|l| l.id.strip_prefix('w')?.split('c').next()?.parse::<usize>().ok());
        let i = match leading {
            Some(worker) if rng.random_bool(0.75) => worker - 1,
            _ => rng.random_range(0..workers.len()),
        };
        if rng.random_bool(0.5) {
            workers[i].kill();
            kills += 1;
            workers[i] = start_worker(u32::try_from(i).unwrap() + 1);
        } else {
            workers[i].pause();
            std::thread::sleep(ms(rng.random_range(400..1_400)));
            workers[i].resume();
            pauses += 1;
        }
    }
    for worker in &mut workers {
        worker.kill();
    }

    // Each (candidate, term): elected at, last deadline seen. Writes: (at, term, outcome).
    let mut beliefs: BTreeMap<(String, u64), (u64, u64)> = BTreeMap::new();
    let mut writes: Vec<(u64, u64, String)> = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(candidate) = name.strip_prefix("soak-") else { continue };
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["belief", term, start, until] => {
                    let (term, start, until) = (term.parse().unwrap(), start.parse().unwrap(), until.parse().unwrap());
                    let b = beliefs.entry((candidate.to_owned(), term)).or_insert((start, until));
                    b.1 = b.1.max(until);
                }
                ["write", term, at, outcome] => {
                    writes.push((at.parse().unwrap(), term.parse().unwrap(), (*outcome).to_owned()))
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
    writes.sort();
    let accepted: Vec<u64> = writes.iter().filter(|w| w.2 != "rejected").map(|w| w.1).collect();
    let lost_updates = writes.iter().filter(|w| w.2 == "lost-update").count();
    println!(
        "election soak: {} terms, {} writes ({} accepted, {} rejected), {kills} kills, {pauses} pauses",
        beliefs.len(),
        writes.len(),
        accepted.len(),
        writes.len() - accepted.len()
    );
    assert!(report.overlaps.is_empty(), "leaderships overlapped: {:?}", report.overlaps);
    assert!(report.fence_regressions.is_empty(), "terms went back: {:?}", report.fence_regressions);
    assert_eq!(lost_updates, 0, "a write was lost");
    assert!(accepted.windows(2).all(|w| w[0] <= w[1]), "the counter accepted writes out of term order");
    assert!(beliefs.len() >= 3, "too few elections to mean anything: {}", beliefs.len());
}
