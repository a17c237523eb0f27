//! Run-at-most-once job lock: three "replicas" fire the same scheduled job on their own timers, a little apart
//! (as pods of one deployment do); each tick runs exactly once, whichever replica fires first, and the others are
//! told who ran it. The last run's record (holder, start, finish on the server's clock) stays readable.
//!
//! ```text
//! cargo run -p examples --example scheduled_job
//! ```
//!
//! Backend choice, as the quickstart: `REDIS_URL` set → that server; else a throwaway local `redis-server` if one is
//! installed; else the in-memory backend. The program says which it used.
#![allow(clippy::print_stdout)] // an example talks to its user

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{JobLock, JobOptions, JobOutcome};

const REPLICAS: u64 = 3;
const TICKS: u64 = 5;
const PERIOD: Duration = Duration::from_millis(200);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = examples::Backend::choose();
    println!("backend: {}", backend.description());
    let lock = backend.lock().await?;
    let jobs = JobLock::new(lock);
    let runs = Arc::new(AtomicU64::new(0));
    let replicas = (0..REPLICAS).map(|replica| {
        let (jobs, runs) = (jobs.clone(), runs.clone());
        tokio::spawn(async move {
            // Each replica's timer fires a little later than the previous one's.
            tokio::time::sleep(Duration::from_millis(15 * replica)).await;
            let opts = JobOptions::new(Duration::from_secs(10)).with_holder(format!("replica-{replica}"));
            for tick in 0..TICKS {
                // The tick id comes from the scheduled time, so every replica names the same tick.
                let outcome = jobs
                    .run_tick("compact-logs", tick, &opts, |ctx| async move {
                        tokio::time::sleep(Duration::from_millis(20)).await; // the job's work
                        ctx.fencing_token
                    })
                    .await?;
                match outcome {
                    JobOutcome::Ran { fencing_token, held, .. } => {
                        runs.fetch_add(1, Ordering::SeqCst);
                        println!("tick {tick}: replica-{replica} ran it ({held:?}, token {fencing_token:?})");
                    }
                    JobOutcome::Skipped { holder, .. } => {
                        println!(
                            "tick {tick}: replica-{replica} skipped it ({} has it)",
                            holder.as_deref().unwrap_or("?")
                        );
                    }
                    _ => {}
                }
                tokio::time::sleep(PERIOD).await;
            }
            Ok::<_, lock_core::LockError>(())
        })
    });
    for replica in replicas.collect::<Vec<_>>() {
        replica.await??;
    }
    let ran = runs.load(Ordering::SeqCst);
    println!("{TICKS} ticks, {ran} runs");
    assert_eq!(ran, TICKS, "a tick ran twice or not at all");
    if let Some(last) = jobs.last_run("compact-logs").await? {
        println!(
            "last run: {} {:?}, started {:?}, finished {:?}",
            last.holder, last.outcome, last.started, last.finished
        );
    }
    Ok(())
}
