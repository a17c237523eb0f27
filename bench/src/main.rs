//! `lock-bench`: the lock backends against the floor (the same Redis commands with no lock library around them)
//! and against rslock, side by side in one run (issue 8). BENCHMARKS.md has the command and explains every number.
//!
//! A run starts its own `redis-server`s on loopback, runs the scenarios with the contenders interleaved in rounds,
//! and prints one `row …` line per scenario and contender, `ratio …` lines computed from this run's rows, and
//! `target …` lines that hold those ratios against the bars of issue 8. `lock-bench summarize FILE…` turns the
//! output of several runs into the tables of BENCHMARKS.md (median and min–max per number).

// Printing results is this program's whole job, so the workspace's `print_stdout` lint does not apply here.
#![allow(clippy::print_stdout)]

mod alloc;
mod args;
mod contender;
mod cpu;
mod floor;
mod floor_fred;
mod measure;
mod peers;
mod plot;
mod report;
mod scenarios;
mod server;
mod summary;

use anyhow::Context as _;

use crate::args::{Command, Runtime};

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

fn main() -> anyhow::Result<()> {
    match args::parse(std::env::args().skip(1))? {
        Command::Help => {
            println!("{}", args::USAGE);
            Ok(())
        }
        Command::Summarize(files) => summary::run(&files),
        Command::Run(settings) => {
            // One worker per CPU this process may run on: with `taskset -c 0` that is one, so the client side of
            // every contender gets the same single core.
            let workers = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
            for flavour in settings.runtimes.clone() {
                // Each runtime gets servers, connections and contenders of its own: a connection's driver task
                // lives on the runtime that made it.
                let runtime = match flavour {
                    Runtime::MultiThread => {
                        let mut builder = tokio::runtime::Builder::new_multi_thread();
                        builder.worker_threads(workers);
                        builder
                    }
                    Runtime::CurrentThread => tokio::runtime::Builder::new_current_thread(),
                }
                .enable_all()
                .build()
                .context("building the tokio runtime")?;
                runtime.block_on(scenarios::run_all(settings.clone(), workers, flavour))?;
            }
            Ok(())
        }
    }
}
