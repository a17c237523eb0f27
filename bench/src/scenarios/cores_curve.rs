//! The cores curve (issue 51): throughput as the client gets more cores. The other scenarios pin the client to one
//! core (`taskset -c 0`), so contention inside the library (its shared maps and mutexes, the wake-up hub, the
//! connection's queue) never shows: here each point is a runtime of `w` worker threads, 64 tasks on distinct keys,
//! for `w` = 1, 2, 4, … up to the CPUs this process may use (run without `taskset`, the servers pinned or not, on a
//! machine with more cores than this 2-core VM to see the curve bend). Each contender's cycles per second at each
//! point, and its ratio to the floor at that point: a library that scales as the bare commands keeps its ratio.
//!
//! Run only when named: `lock-bench --only cores-curve`.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::Ctx;
use crate::contender::{Backend, Contender};
use crate::report::Row;

/// Concurrent tasks at every point: enough to keep every worker busy.
const TASKS: usize = 64;
/// Measured time per contender and point (after a warm-up of a tenth of it).
const SEGMENT: Duration = Duration::from_secs(4);

pub(crate) async fn run(ctx: &mut Ctx) -> anyhow::Result<()> {
    let servers = ctx.servers(1)?;
    let url = servers[0].url();
    let cpus = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    let points: Vec<usize> = std::iter::successors(Some(1_usize), |w| Some(w * 2)).take_while(|w| *w <= cpus).collect();
    let segment = SEGMENT.mul_f64(ctx.settings.scale);
    let names = ctx.settings.contenders.clone();
    for workers in points {
        let url = url.clone();
        let names = names.clone();
        // A runtime of its own per point, on a thread of its own: its connections are made and driven there.
        let rows = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build()?;
            runtime.block_on(point(&url, workers, segment, names.as_deref()))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the cores-curve point panicked"))??;
        for row in rows {
            ctx.report.row(row);
        }
    }
    Ok(())
}

async fn point(url: &str, workers: usize, segment: Duration, names: Option<&[String]>) -> anyhow::Result<Vec<Row>> {
    let urls = vec![url.to_owned()];
    let mut contenders = vec![
        Contender::floor("floor", &urls).await?,
        Contender::rslock("rslock", &urls, None)?,
        Contender::core("redis-rs", Backend::RedisRs, &urls, true).await?,
        Contender::core("redis-rs-nofence", Backend::RedisRs, &urls, false).await?,
        Contender::core("fred", Backend::Fred, &urls, true).await?,
    ];
    if let Some(names) = names {
        contenders.retain(|c| names.contains(&c.name) || c.name == "floor");
    }
    let mut rows = Vec::new();
    let mut floor = None;
    for contender in &contenders {
        cycles(contender, &format!("cores:{workers}:{}:warm", contender.name), segment / 10).await?;
        let rate = cycles(contender, &format!("cores:{workers}:{}", contender.name), segment).await?;
        let floor_rate = *floor.get_or_insert(rate);
        rows.push(
            Row::new("cores-curve", &format!("{}-{workers}", contender.name))
                .field("workers", workers as f64)
                .field("tasks", TASKS as f64)
                .field("cycles_per_s", rate)
                .field("of_floor", rate / floor_rate.max(f64::MIN_POSITIVE)),
        );
    }
    Ok(rows)
}

/// Lock + release cycles on fresh keys by [`TASKS`] tasks for `time`: cycles per second.
async fn cycles(contender: &Contender, tag: &str, time: Duration) -> anyhow::Result<f64> {
    let started = Instant::now();
    let deadline = started + time;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let contender = contender.clone();
            let prefix = format!("{tag}:{t}");
            tokio::spawn(async move {
                let mut i = 0_u64;
                while Instant::now() < deadline {
                    let held = contender.lock(&format!("{prefix}:{i}")).await?;
                    contender.unlock(held).await?;
                    i += 1;
                }
                anyhow::Ok(i)
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.context("a cycle task panicked")??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
