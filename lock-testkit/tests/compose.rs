//! The composition explorer (see `lock_testkit::composition`): primitives and key layouts on shared names, in one
//! process and across processes, with the oracle that nobody stays idle while what they wait for is free.
//!
//! `LOCK_COMPOSE_SCHEDULES=N` runs N schedules (default 240, about 30 s on a 2-core machine), from seed
//! `LOCK_COMPOSE_FIRST_SEED` (default: a fixed seed, so CI is repeatable; `random` for fresh ones);
//! `LOCK_COMPOSE_SEED=S` replays one schedule.
#![allow(clippy::print_stdout)] // the summary is the point

use lock_testkit::composition::Composition;

const DEFAULT_SCHEDULES: u64 = 240;
const DEFAULT_FIRST_SEED: u64 = 0xc0_0000;
const CONCURRENCY: usize = 12;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn composed_schedules_leave_nobody_idle_while_their_resource_is_free() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let outcome = runtime.unwrap_or_else(|err| panic!("runtime: {err}")).block_on(async {
        if let Some(seed) = env_u64("LOCK_COMPOSE_SEED") {
            // A replay is for reading: RUST_LOG=lock_core=trace shows what each waiter did.
            let _ =
                tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).try_init();
            return Composition::replay(seed).await;
        }
        let first = match std::env::var("LOCK_COMPOSE_FIRST_SEED").as_deref() {
            Ok("random") => rand::random(),
            _ => env_u64("LOCK_COMPOSE_FIRST_SEED").unwrap_or(DEFAULT_FIRST_SEED),
        };
        let schedules = env_u64("LOCK_COMPOSE_SCHEDULES").unwrap_or(DEFAULT_SCHEDULES);
        Composition::new(first, schedules, CONCURRENCY).run().await
    });
    match outcome {
        Ok(tally) => println!("{tally:?}"),
        Err(finding) => {
            panic!("{finding}\nreplay: LOCK_COMPOSE_SEED={} cargo test -p lock-testkit --test compose", finding.seed)
        }
    }
}
