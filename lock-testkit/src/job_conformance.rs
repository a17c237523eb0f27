//! The job lock's conformance cases ([`JobLock`]): one public async function per case, each taking the
//! [`Subject`] under test, which must wrap a [`lock_core::Lock`] ([`Subject::engine`]).
//!
//! [`conformance_tests!`](crate::conformance_tests) runs them (through [`job_tests!`](crate::job_tests)). The cases
//! follow the test list of the job-lock study (`shared/research/primitives.md`, section 6.4); what needs a look at
//! the server's keys (the finish's owner check, `at_least_for` on the server clock) is in
//! [`server_cases`](crate::server_cases). Each case is a test: it panics, naming what broke.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{join, join_all, select};
use lock_core::{JobLock, JobOptions, JobOutcome, LockError, LockOptions, RenewPolicy, RunOutcome, MAX_HOLDER_LABEL};

use crate::conformance::ok;
use crate::or_panic::ms;
use crate::runtime::sleep;
use crate::scripted::CancelAfter;
use crate::Subject;

fn fresh(case: &str) -> String {
    format!("job:{case}:{:016x}", rand::random::<u64>())
}

fn jobs(s: &Subject) -> JobLock {
    JobLock::new(s.engine().clone())
}

fn ran<T: Debug>(outcome: &JobOutcome<T>) -> bool {
    matches!(outcome, JobOutcome::Ran { .. })
}

/// Test 1: ten replicas fire the same job at once: exactly one runs it, the nine others skip it and are told the
/// runner's holder label.
pub async fn job_runs_once_among_concurrent_replicas(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("once");
    let replicas = (0..10).map(|i| {
        let (jobs, job) = (&jobs, &job);
        async move {
            let opts = JobOptions::new(ms(5_000)).with_holder(format!("replica-{i}"));
            let outcome = ok(jobs.run(job, &opts, |_| async { sleep(ms(50)).await }).await, "run");
            (i, outcome)
        }
    });
    let outcomes = join_all(replicas).await;
    let runners: Vec<usize> = outcomes.iter().filter(|(_, o)| ran(o)).map(|(i, _)| *i).collect();
    if jobs.lock().stores().len() > 1 {
        // Redlock: replicas firing at one instant can split the instances so that none has a majority; then all
        // skip (the module docs say so). Never two.
        assert!(runners.len() <= 1, "replicas that ran the job: {runners:?}");
        return;
    }
    assert_eq!(runners.len(), 1, "replicas that ran the job: {runners:?}");
    let runner = format!("replica-{}", runners[0]);
    for (i, outcome) in &outcomes {
        if let JobOutcome::Skipped { holder, locked_for } = outcome {
            // A replica that looked after the run finished (at_least_for is zero) would find nobody; none did.
            assert_eq!(holder.as_deref(), Some(runner.as_str()), "replica {i} was told another holder");
            assert!(locked_for.is_some_and(|d| d <= ms(5_000)), "replica {i}: {locked_for:?}");
        }
    }
}

/// Test 2: a 10 ms run with `at_least_for` = 600 ms keeps the job: a replica firing 300 ms after the start skips
/// it (locked for at most the rest of the 600 ms), one firing after 700 ms runs it.
pub async fn job_at_least_for_keeps_the_job_after_a_short_run(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("atleast");
    let opts = JobOptions::new(ms(5_000)).with_at_least_for(ms(600));
    let t0 = Instant::now();
    assert!(ran(&ok(jobs.run(&job, &opts, |_| sleep(ms(10))).await, "first run")));
    sleep(ms(300).saturating_sub(t0.elapsed())).await;
    match ok(jobs.run(&job, &opts, |_| async {}).await, "run at +300 ms") {
        JobOutcome::Skipped { locked_for: Some(left), .. } => assert!(left <= ms(600), "kept for {left:?}"),
        other => panic!("a run inside at_least_for was not skipped: {other:?}"),
    }
    sleep(ms(700).saturating_sub(t0.elapsed())).await;
    assert!(ran(&ok(jobs.run(&job, &opts, |_| async {}).await, "run at +700 ms")), "the job stayed locked");
}

/// Test 3: a run whose process dies (here: its future is leaked while the work runs, so nothing ever finishes it)
/// keeps the job until `at_most_for` and no longer.
pub async fn job_whose_process_died_runs_again_after_at_most_for(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("died");
    let opts = JobOptions::new(ms(400));
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    let mut run = Box::pin(jobs.run(&job, &opts, move |_| async move {
        flag.store(true, Ordering::SeqCst);
        std::future::pending::<()>().await;
    }));
    let t0 = Instant::now();
    // Poll the run until its work has started, then "kill" it: never poll or drop it again.
    while !started.load(Ordering::SeqCst) {
        assert!(t0.elapsed() < ms(5_000), "the job never started");
        let _ = select(run.as_mut(), Box::pin(sleep(ms(1)))).await;
    }
    std::mem::forget(run);
    assert!(!ran(&ok(jobs.run(&job, &opts, |_| async {}).await, "run while the dead one holds")), "ran twice");
    loop {
        if ran(&ok(jobs.run(&job, &opts, |_| async {}).await, "run after at_most_for")) {
            break;
        }
        assert!(t0.elapsed() < ms(3_000), "the dead run's job stayed locked past at_most_for");
        sleep(ms(20)).await;
    }
    assert!(t0.elapsed() >= ms(300), "the job was free {:?} after a run that never finished", t0.elapsed());
}

/// Test 4: without keep-alive, a run longer than `at_most_for` is cancelled when its lock is lost (`Lost`, the
/// work never completes), its record says `lost`, and the next run starts cleanly. `at_most_for` is 1 s: over
/// Redlock each instance's call is bounded by a share of it, and 200 ms left calls of a few ms that a loaded machine
/// timed out on every instance (`Quorum`, beside two CPU burners and three test lanes).
pub async fn job_overrun_without_keep_alive_is_cancelled(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("overrun");
    let completed = Arc::new(AtomicBool::new(false));
    let done = completed.clone();
    let t0 = Instant::now();
    let result = jobs
        .run(&job, &JobOptions::new(ms(1_000)), move |_| async move {
            sleep(ms(8_000)).await;
            done.store(true, Ordering::SeqCst);
        })
        .await;
    assert!(matches!(result, Err(LockError::Lost { .. })), "an overrun run: {result:?}");
    let took = t0.elapsed();
    assert!(took < ms(1_000) + crate::conformance::STARVED, "the overrun was cancelled after {took:?}");
    assert!(!completed.load(Ordering::SeqCst), "the overrunning work completed");
    let last = ok(jobs.last_run(&job).await, "last_run").unwrap_or_else(|| panic!("no record"));
    assert_eq!(last.outcome, RunOutcome::Lost);
    assert!(ran(&ok(jobs.run(&job, &JobOptions::new(ms(2_000)), |_| async {}).await, "the next run")));
}

/// Test 5: with keep-alive, a run three times as long as `at_most_for` keeps the job the whole time: a replica
/// firing every 40 ms meanwhile always skips it, and the run completes.
pub async fn job_keep_alive_holds_a_long_run(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("keepalive");
    // An `at_most_for` a starved scheduler's renewals survive (200 ms timed out on all five Redlock instances
    // beside two CPU burners), and a run three times as long.
    let opts = JobOptions::new(ms(1_000)).with_keep_alive(RenewPolicy::default());
    let running = AtomicBool::new(true);
    let skips = AtomicUsize::new(0);
    let long = async {
        let outcome = ok(jobs.run(&job, &opts, |_| sleep(ms(3_000))).await, "the long run");
        running.store(false, Ordering::SeqCst);
        outcome
    };
    let other = async {
        sleep(ms(20)).await;
        while running.load(Ordering::SeqCst) {
            let outcome = ok(jobs.run(&job, &JobOptions::new(ms(1_000)), |_| async {}).await, "the other replica");
            if running.load(Ordering::SeqCst) {
                assert!(!ran(&outcome), "the job ran twice while kept alive");
                skips.fetch_add(1, Ordering::SeqCst);
            }
            sleep(ms(40)).await;
        }
    };
    let (outcome, ()) = join(long, other).await;
    assert!(ran(&outcome), "the kept-alive run did not complete: {outcome:?}");
    assert!(skips.load(Ordering::SeqCst) >= 5, "the other replica barely tried");
}

/// Test 6: tick mode: tick 42 runs once even though its first run finished in 5 ms and `at_least_for` is zero; a
/// replica firing the same tick later skips it; tick 43 runs.
pub async fn job_tick_runs_once_per_tick(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("tick");
    let opts = JobOptions::new(ms(2_000)).with_holder("first");
    assert!(ran(&ok(jobs.run_tick(&job, 42, &opts, |_| sleep(ms(5))).await, "tick 42")));
    sleep(ms(50)).await;
    match ok(jobs.run_tick(&job, 42, &opts.clone().with_holder("late"), |_| async {}).await, "tick 42 again") {
        JobOutcome::Skipped { holder, locked_for } => {
            assert_eq!(holder.as_deref(), Some("first"));
            assert!(locked_for.is_some_and(|d| d > ms(0)), "{locked_for:?}");
        }
        other => panic!("a tick ran twice: {other:?}"),
    }
    assert!(ran(&ok(jobs.run_tick(&job, 43, &opts, |_| async {}).await, "tick 43")));
    // Without tick mode the job itself is free.
    assert!(ran(&ok(jobs.run(&job, &opts, |_| async {}).await, "plain run")));
}

/// Test 7: fencing tokens strictly increase across consecutive runs, and agree with a single lock on the job's
/// name (one counter); a job held by a plain lock is skipped without a holder label.
pub async fn job_fencing_tokens_increase_and_agree_with_the_lock(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("fence");
    let mut last = 0;
    for round in 0..4 {
        let outcome =
            ok(jobs.run(&job, &JobOptions::new(ms(2_000)), |ctx| async move { ctx.fencing_token }).await, "run");
        let JobOutcome::Ran { value, fencing_token, .. } = outcome else { panic!("round {round} skipped") };
        assert_eq!(value, fencing_token, "the context and the outcome disagree");
        let fence = fencing_token.map(|f| f.get()).unwrap_or_else(|| panic!("no token"));
        assert!(fence > last, "round {round}: {fence} after {last}");
        last = fence;
        let guard = ok(s.engine().acquire(&job, &LockOptions::new(ms(2_000))).await, "single lock");
        let single = guard.fence().await.ok().map(|f| f.get()).unwrap_or(0);
        assert!(single > last, "single lock {single} after job {last}");
        last = single;
        match ok(jobs.run(&job, &JobOptions::new(ms(2_000)), |_| async {}).await, "run beside the lock") {
            JobOutcome::Skipped { holder, .. } => assert_eq!(holder, None, "a plain lock has no job label"),
            other => panic!("a job ran beside a lock on its name: {other:?}"),
        }
        ok(guard.release().await, "release");
    }
}

/// Test 8: bad input is `InvalidArgument` before any I/O.
pub async fn job_bad_options_are_rejected(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("bad");
    let bad = [
        JobOptions::new(ms(1_000)).with_at_least_for(ms(1_001)),
        JobOptions::new(Duration::ZERO),
        JobOptions::new(ms(1_000)).with_holder(""),
        JobOptions::new(ms(1_000)).with_holder("x".repeat(MAX_HOLDER_LABEL + 1)),
        // Review 4, finding 5: a label with control characters forged `lockctl inspect`'s lines.
        JobOptions::new(ms(1_000)).with_holder("cron\nstate     free"),
        JobOptions::new(ms(1_000)).with_holder("cron \u{1b}[8m"),
        JobOptions::new(ms(1_000)).with_tick_retention(ms(10)),
    ];
    for opts in &bad {
        let result = jobs.run(&job, opts, |_| async {}).await;
        assert!(matches!(result, Err(LockError::InvalidArgument(_))), "{opts:?}: {result:?}");
    }
    let result = jobs.run("", &JobOptions::new(ms(1_000)), |_| async {}).await;
    assert!(matches!(result, Err(LockError::InvalidArgument(_))), "an empty name: {result:?}");
    assert_eq!(ok(jobs.last_run(&job).await, "last_run"), None, "a refused run left a record");
}

/// The last-run record: none before any run; `finished` with the holder label and start ≤ finish after a run;
/// `cancelled` after a run whose future was dropped (finished in the background).
pub async fn job_last_run_records_each_ending(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("record");
    assert_eq!(ok(jobs.last_run(&job).await, "last_run"), None);
    let opts = JobOptions::new(ms(5_000)).with_holder("reporter");
    assert!(ran(&ok(jobs.run(&job, &opts, |_| sleep(ms(5))).await, "run")));
    let last = ok(jobs.last_run(&job).await, "last_run").unwrap_or_else(|| panic!("no record"));
    assert_eq!((last.holder.as_str(), &last.outcome), ("reporter", &RunOutcome::Finished));
    let finished = last.finished.unwrap_or_else(|| panic!("no finish time"));
    assert!(finished >= last.started, "finished {finished:?} before it started {:?}", last.started);
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    let mut run = Box::pin(jobs.run(&job, &opts, move |_| async move {
        flag.store(true, Ordering::SeqCst);
        sleep(ms(10_000)).await;
    }));
    let t0 = Instant::now();
    while !started.load(Ordering::SeqCst) {
        assert!(t0.elapsed() < ms(5_000), "the job never started");
        let _ = select(run.as_mut(), Box::pin(sleep(ms(1)))).await;
    }
    drop(run);
    loop {
        let last = ok(jobs.last_run(&job).await, "last_run").unwrap_or_else(|| panic!("no record"));
        if last.outcome == RunOutcome::Cancelled {
            break;
        }
        assert!(t0.elapsed() < ms(3_000), "a dropped run was not recorded as cancelled: {last:?}");
        sleep(ms(10)).await;
    }
    assert!(ran(&ok(jobs.run(&job, &opts, |_| async {}).await, "run after the cancelled one")));
}

/// Cancellation storm: 300 runs, each dropped at a random await point of its start or its work (or left to finish),
/// never leave the job locked: afterwards it runs at once, far within its 30 s `at_most_for`.
pub async fn job_cancelled_run_storm_leaves_the_job_free(s: &Subject) {
    let jobs = jobs(s);
    let job = fresh("storm");
    let opts = JobOptions::new(ms(30_000));
    let mut cancelled = 0;
    for _ in 0..30 {
        let runs = (0..10).map(|_| {
            let polls = u32::try_from(rand::random::<u64>() % 6).unwrap_or(1);
            let work = Duration::from_micros(rand::random::<u64>() % 3_000);
            CancelAfter::new(jobs.run(&job, &opts, move |_| sleep(work)), polls)
        });
        cancelled += join_all(runs).await.iter().filter(|r| r.is_none()).count();
    }
    assert!(cancelled > 0, "no run was cancelled; the case proved nothing");
    let t0 = Instant::now();
    loop {
        match ok(jobs.run(&job, &opts, |_| async {}).await, "run after the storm") {
            JobOutcome::Ran { .. } => break,
            skipped => assert!(t0.elapsed() < ms(3_000), "the job stayed locked after the storm: {skipped:?}"),
        }
        sleep(ms(10)).await;
    }
    let last = ok(jobs.last_run(&job).await, "last_run").unwrap_or_else(|| panic!("no record"));
    assert_eq!(last.outcome, RunOutcome::Finished);
}
