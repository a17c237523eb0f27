//! etcd beside Redis (issue 57): what consensus costs a lock, through the one trait a framework holds
//! (`Arc<dyn DistributedLock>`), on the same machine and in the same run.
//!
//! Contenders: **redis** (one `redis-server`, the redis-rs backend, the default lock: fence on demand), **etcd-1**
//! (one etcd member) and **etcd-3** (three members on this machine; every write is committed by two). The etcd
//! members are started as the test fixture starts them (`--unsafe-no-fsync`, data on `/dev/shm`): a production
//! member fsyncs its log on every write, which this measures without, so the etcd rows are a best case for etcd.
//!
//! - **uncontended**: one task, `acquire` + `fence().await` + `release` on a fresh name each cycle (a fencing
//!   holder's whole life), cycles per second and the cycle's p50 and p99.
//! - **handoff**: 8 tasks on one name, each holding 1 ms; acquisitions per second and the p99 of a wait.
//!
//! Rounds interleave the contenders ([`super::order`]); the ratio lines are etcd's over Redis's, per round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use lock_core::{DistributedLock, Lock, LockOptions};
use lock_testkit::EtcdServer;

use super::{order, Ctx, ROUNDS};
use crate::contender::Backend;
use crate::measure::{Bound, Latency};
use crate::report::Row;

const SCENARIO_UNCONTENDED: &str = "backends-uncontended";
const SCENARIO_HANDOFF: &str = "backends-handoff";
/// Tasks contending for one name in the hand-off.
const TASKS: usize = 8;
/// How long each hand-off holder keeps the name.
const HOLD: Duration = Duration::from_millis(1);

struct Subject {
    name: &'static str,
    lock: Arc<dyn DistributedLock>,
}

/// Runs both scenarios (only when `--only backends` names them: they need etcd installed).
pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let redis_store = Backend::RedisRs.store(&servers[0].url()).await?;
    let one = EtcdServer::builder().start().context("starting one etcd member")?;
    let three = EtcdServer::builder().members(3).start().context("starting three etcd members")?;
    let subjects = [
        Subject { name: "redis", lock: Arc::new(Lock::from_arc(redis_store)) },
        Subject { name: "etcd-1", lock: Arc::new(lock_etcd::connect(&one.endpoints()).await?) },
        Subject { name: "etcd-3", lock: Arc::new(lock_etcd::connect(&three.endpoints()).await?) },
    ];
    let bound = Bound::new(2.0, 20_000, ctx.settings.scale);

    let mut cycles = vec![(Vec::new(), Latency::new()?); subjects.len()];
    let mut handoff = vec![(Vec::new(), Latency::new()?); subjects.len()];
    for round in 0..ROUNDS {
        for i in order(round, subjects.len()) {
            let (rate, latency) = uncontended(&subjects[i], round, bound).await?;
            cycles[i].0.push(rate);
            cycles[i].1.merge(&latency)?;
            let (rate, waits) = contended(&subjects[i], round, bound).await?;
            handoff[i].0.push(rate);
            handoff[i].1.merge(&waits)?;
        }
    }
    for (subject, (rates, latency)) in subjects.iter().zip(&cycles) {
        let total = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
        ctx.report.row(
            Row::new(SCENARIO_UNCONTENDED, subject.name)
                .field("cycles_per_s", total)
                .field("p50_us", latency.quantile_us(0.5))
                .field("p99_us", latency.quantile_us(0.99))
                .slices("cycles_per_s", rates.clone()),
        );
    }
    for (subject, (rates, waits)) in subjects.iter().zip(&handoff) {
        let total = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
        ctx.report.row(
            Row::new(SCENARIO_HANDOFF, subject.name)
                .field("acquisitions_per_s", total)
                .field("wait_p50_us", waits.quantile_us(0.5))
                .field("wait_p99_us", waits.quantile_us(0.99))
                .slices("acquisitions_per_s", rates.clone()),
        );
    }
    for etcd in ["etcd-1", "etcd-3"] {
        ctx.report.ratio(SCENARIO_UNCONTENDED, "cycles_per_s", etcd, "redis");
        ctx.report.ratio(SCENARIO_HANDOFF, "acquisitions_per_s", etcd, "redis");
    }
    Ok(())
}

/// One task: acquire, draw the fence, release, on a fresh name each cycle.
async fn uncontended(subject: &Subject, round: usize, bound: Bound) -> anyhow::Result<(f64, Latency)> {
    let options = LockOptions::new(Duration::from_secs(10));
    let mut latency = Latency::new()?;
    let started = Instant::now();
    let mut done = 0_u64;
    while done < bound.count && started.elapsed() < bound.time {
        let name = format!("bench-{}-{round}-{done}", subject.name);
        let t0 = Instant::now();
        let guard = subject.lock.acquire(&name, &options).await?;
        guard.fence().await?;
        guard.release().await?;
        latency.record(t0.elapsed());
        done += 1;
    }
    Ok((done as f64 / started.elapsed().as_secs_f64(), latency))
}

/// [`TASKS`] tasks on one name, each holding [`HOLD`], until the round's time is spent.
async fn contended(subject: &Subject, round: usize, bound: Bound) -> anyhow::Result<(f64, Latency)> {
    let name = format!("bench-{}-handoff-{round}", subject.name);
    let deadline = Instant::now() + bound.time;
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (lock, name) = (subject.lock.clone(), name.clone());
            tokio::spawn(async move {
                let options = LockOptions::new(Duration::from_secs(10)).with_wait(Duration::from_secs(30));
                let mut waits = Latency::new()?;
                let mut count = 0_u64;
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    let guard = lock.acquire(&name, &options).await?;
                    waits.record(t0.elapsed());
                    tokio::time::sleep(HOLD).await;
                    guard.release().await?;
                    count += 1;
                }
                anyhow::Ok((count, waits))
            })
        })
        .collect();
    let (mut total, mut waits) = (0_u64, Latency::new()?);
    for task in tasks {
        let (count, task_waits) = task.await.context("a hand-off task panicked")??;
        total += count;
        waits.merge(&task_waits)?;
    }
    Ok((total as f64 / started.elapsed().as_secs_f64(), waits))
}
