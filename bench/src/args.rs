//! The command line: `lock-bench [--server-cpu N] [--only LIST] [--quick]` or `lock-bench summarize FILE…`.

use std::path::PathBuf;

use anyhow::{bail, Context as _};

use crate::contender::Contender;

pub(crate) const USAGE: &str = "\
usage: lock-bench [--server-cpu N] [--only SCENARIO[,SCENARIO…]] [--contenders NAME[,NAME…]]
                  [--runtime multi-thread|current-thread|both] [--fence-expiry SECONDS] [--diagnostics] [--quick]
       lock-bench summarize RUN_OUTPUT…

  --server-cpu N  pin every redis-server this run starts to CPU N (taskset -a -p); pin the bench itself with
                  `taskset -c M` so client and servers each get one core
  --only LIST     run only these scenarios: engine, uncontended, concurrent-distinct, handoff, procs, procs-hold,
                  redlock, renewal, idle (idle while free, per primitive), primitives, semaphore, rwlock;
                  and the cost curves, run only when
                  named here: renewal-curve (1 000 to 100 000 renewing guards, minutes long),
                  waiter-curve (10 to 1 000 waiters over 1 to 50 processes), multi-curve (1, 8, 64
                  resources per multi-lock), cores-curve (1, 2, 4, … client worker threads, up to the
                  CPUs this process may use: run it without taskset), backends (etcd, one member and
                  three, beside Redis through `dyn DistributedLock`; needs etcd installed), fence-memory
                  (1 000 000 names locked once each with a fence: the server's memory with counters kept for
                  ever and with counters that expire, before and after they did)
  --contenders L  measure only these contenders (for profiling one of them; targets need the full set)
  --runtime R     the tokio runtime of the client side: multi-thread (one worker per CPU this process may use),
                  current-thread (every task on the calling thread, as `#[tokio::main(flavor = \"current_thread\")]`
                  runs them), or both (the default): the in-process scenarios run once on each, and the rows of
                  the current-thread runtime carry `@current-thread` after the scenario's name
  --fence-expiry S  the fencing counters' idle expiry in fence-memory, in seconds (default 60: longer than locking
                  a million names takes; the library's default is a week, which a benchmark cannot wait for)
  --diagnostics   add rows that explain gaps (our backends with a pool of one connection)
  --quick         a tenth of every time bound (a smoke test; the numbers are noisy)
  summarize       print median and min-max of every row, ratio and target over several runs' output";

/// What to do.
pub(crate) enum Command {
    Help,
    Run(Settings),
    Summarize(Vec<PathBuf>),
}

/// Settings of one run.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// CPU to pin the spawned servers to.
    pub(crate) server_cpu: Option<u32>,
    /// Scenario groups to run (all when `None`).
    pub(crate) only: Option<Vec<String>>,
    /// Contenders to measure (all when `None`).
    pub(crate) contenders: Option<Vec<String>>,
    /// Whether to add the diagnostic contenders.
    pub(crate) diagnostics: bool,
    /// Multiplier on every time bound (1.0, or 0.1 with `--quick`).
    pub(crate) scale: f64,
    /// The runtimes to measure on, in order.
    pub(crate) runtimes: Vec<Runtime>,
    /// The fencing counters' idle expiry in the fence-memory scenario.
    pub(crate) fence_expiry: std::time::Duration,
}

/// A tokio runtime flavour the client side runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runtime {
    /// One worker thread per CPU this process may use (one under `taskset -c 0`).
    MultiThread,
    /// Every task on the thread that runs the scenarios.
    CurrentThread,
}

impl Runtime {
    /// What the rows measured on this runtime append to their scenario's name.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Runtime::MultiThread => "",
            Runtime::CurrentThread => "@current-thread",
        }
    }
}

impl Settings {
    /// Whether the scenario group `name` is selected.
    pub(crate) fn wants(&self, name: &str) -> bool {
        self.only.as_ref().is_none_or(|only| only.iter().any(|o| o == name))
    }

    /// Whether `group` was named in `--only` (the groups that run only then).
    pub(crate) fn named(&self, group: &str) -> bool {
        self.only.as_ref().is_some_and(|only| only.iter().any(|o| o == group))
    }

    /// Drops the contenders `--contenders` did not name.
    pub(crate) fn keep(&self, contenders: &mut Vec<Contender>) {
        if let Some(names) = &self.contenders {
            contenders.retain(|c| names.contains(&c.name));
        }
    }
}

pub(crate) const GROUPS: [&str; 18] = [
    "backends",
    "fence-memory",
    "engine",
    "idle",
    "uncontended",
    "concurrent-distinct",
    "handoff",
    "procs",
    "procs-hold",
    "redlock",
    "renewal",
    "renewal-curve",
    "waiter-curve",
    "multi-curve",
    "cores-curve",
    "primitives",
    "semaphore",
    "rwlock",
];

pub(crate) fn parse(mut args: impl Iterator<Item = String>) -> anyhow::Result<Command> {
    let mut settings = Settings {
        server_cpu: None,
        only: None,
        contenders: None,
        diagnostics: false,
        scale: 1.0,
        runtimes: vec![Runtime::MultiThread, Runtime::CurrentThread],
        fence_expiry: std::time::Duration::from_secs(60),
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "summarize" => {
                let files: Vec<PathBuf> = args.map(PathBuf::from).collect();
                if files.is_empty() {
                    bail!("summarize needs at least one file\n{USAGE}");
                }
                return Ok(Command::Summarize(files));
            }
            "--server-cpu" => {
                let value = args.next().context("--server-cpu needs a CPU number")?;
                settings.server_cpu = Some(value.parse().with_context(|| format!("bad CPU number {value:?}"))?);
            }
            "--only" => {
                let value = args.next().context("--only needs a list of scenarios")?;
                let only: Vec<String> = value.split(',').map(str::to_owned).collect();
                if let Some(bad) = only.iter().find(|o| !GROUPS.contains(&o.as_str())) {
                    bail!("unknown scenario {bad:?}; known: {}", GROUPS.join(", "));
                }
                settings.only = Some(only);
            }
            "--contenders" => {
                let value = args.next().context("--contenders needs a list of names")?;
                settings.contenders = Some(value.split(',').map(str::to_owned).collect());
            }
            "--runtime" => {
                settings.runtimes = match args.next().as_deref() {
                    Some("multi-thread") => vec![Runtime::MultiThread],
                    Some("current-thread") => vec![Runtime::CurrentThread],
                    Some("both") => vec![Runtime::MultiThread, Runtime::CurrentThread],
                    other => bail!("--runtime needs multi-thread, current-thread or both, not {other:?}"),
                }
            }
            "--fence-expiry" => {
                let value = args.next().context("--fence-expiry needs a number of seconds")?;
                let seconds: f64 = value.parse().with_context(|| format!("bad number of seconds {value:?}"))?;
                settings.fence_expiry = std::time::Duration::try_from_secs_f64(seconds)
                    .with_context(|| format!("bad number of seconds {value:?}"))?;
            }
            "--diagnostics" => settings.diagnostics = true,
            "--quick" => settings.scale = 0.1,
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(Command::Run(settings))
}
