//! The `redis-server`s a run starts (through lock-testkit, on free loopback ports) and what the benchmark reads
//! from them: `INFO commandstats` after `CONFIG RESETSTAT`, command totals and the server's own CPU time.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{bail, Context as _};
use lock_testkit::{RedisServer, Reply};

/// One server, killed when dropped.
#[derive(Debug)]
pub(crate) struct Server {
    inner: RedisServer,
}

impl Server {
    /// Starts a server on loopback; with `cpu`, pins all of its threads to that CPU.
    pub(crate) fn start(cpu: Option<u32>) -> anyhow::Result<Self> {
        let inner = RedisServer::start().context("starting redis-server (is it installed?)")?;
        if let Some(cpu) = cpu {
            let pid = inner.pid().context("redis-server has no pid")?;
            // `-a`: every thread of the server, not only its main thread.
            let status = Command::new("taskset")
                .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
                .stdout(std::process::Stdio::null())
                .status()
                .context("running taskset to pin redis-server")?;
            if !status.success() {
                bail!("taskset could not pin redis-server {pid} to CPU {cpu}");
            }
        }
        Ok(Server { inner })
    }

    pub(crate) fn url(&self) -> String {
        self.inner.url()
    }

    /// The server's loopback address (for a fault proxy in front of it).
    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        self.inner.addr()
    }

    fn text(&self, args: &[&str]) -> anyhow::Result<String> {
        let reply = self.inner.command(args).with_context(|| format!("sending {args:?} to redis-server"))?;
        match reply {
            Reply::Error(e) => bail!("redis-server answered {args:?} with {e}"),
            other => other.as_text().with_context(|| format!("unexpected reply to {args:?}: {other:?}")),
        }
    }

    /// `CONFIG RESETSTAT`: zeroes the command counters before a segment.
    pub(crate) fn reset_stats(&self) -> anyhow::Result<()> {
        self.text(&["CONFIG", "RESETSTAT"]).map(drop)
    }

    /// `DBSIZE`: how many keys the server holds.
    pub(crate) fn keys(&self) -> anyhow::Result<u64> {
        match self.inner.command(&["DBSIZE"]).context("sending DBSIZE to redis-server")? {
            Reply::Int(n) => u64::try_from(n).context("a negative DBSIZE"),
            other => bail!("unexpected reply to DBSIZE: {other:?}"),
        }
    }

    /// `FLUSHALL`: forgets the keys of earlier scenarios (lock keys, fencing counters).
    pub(crate) fn flush(&self) -> anyhow::Result<()> {
        self.text(&["FLUSHALL"]).map(drop)
    }

    /// Calls per command since the last reset (`INFO commandstats`).
    pub(crate) fn command_stats(&self) -> anyhow::Result<CommandStats> {
        let text = self.text(&["INFO", "commandstats"])?;
        let mut calls = BTreeMap::new();
        for line in text.lines() {
            let Some((name, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
                continue;
            };
            let n = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|v| v.parse::<u64>().ok())
                .with_context(|| format!("no call count in {line:?}"))?;
            calls.insert(name.to_owned(), n);
        }
        Ok(CommandStats(calls))
    }

    /// One numeric field of `INFO section` (for example `stats` / `total_commands_processed`).
    pub(crate) fn info_number(&self, section: &str, field: &str) -> anyhow::Result<f64> {
        let text = self.text(&["INFO", section])?;
        text.lines()
            .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .with_context(|| format!("INFO {section} has no numeric {field}"))
    }

    /// CPU seconds the server has used (user + system, as it reports in `INFO cpu`).
    pub(crate) fn cpu_seconds(&self) -> anyhow::Result<f64> {
        Ok(self.info_number("cpu", "used_cpu_user")? + self.info_number("cpu", "used_cpu_sys")?)
    }
}

/// Calls per command name, as `INFO commandstats` reports them.
#[derive(Clone, Debug, Default)]
pub(crate) struct CommandStats(BTreeMap<String, u64>);

impl CommandStats {
    /// Whether a command is the benchmark's own bookkeeping (`INFO`, `CONFIG RESETSTAT`), not the contender's.
    fn is_ours(name: &str) -> bool {
        name == "info" || name.starts_with("config")
    }

    /// Every command the server executed for the contender, including those run inside Lua scripts (Redis counts
    /// a `redis.call` like a command).
    pub(crate) fn executed(&self) -> u64 {
        self.0.iter().filter(|(name, _)| !Self::is_ours(name)).map(|(_, n)| n).sum()
    }

    /// The commands the contender sent: everything except the commands that, for this contender, only ever run
    /// inside its scripts (`nested`).
    pub(crate) fn sent(&self, nested: &[&str]) -> u64 {
        self.0.iter().filter(|(name, _)| !Self::is_ours(name) && !nested.contains(&name.as_str())).map(|(_, n)| n).sum()
    }

    /// Each command's calls divided by `n` (for example per acquisition), most called first: where a row's
    /// commands go (printed with `LOCK_BENCH_COMMANDS=1`).
    pub(crate) fn per(&self, n: f64) -> String {
        let mut calls: Vec<_> = self.0.iter().filter(|(name, _)| !Self::is_ours(name)).collect();
        calls.sort_by(|a, b| b.1.cmp(a.1));
        calls.iter().map(|(name, c)| format!("{name} {:.2}", **c as f64 / n)).collect::<Vec<_>>().join(", ")
    }

    pub(crate) fn add(&mut self, other: &CommandStats) {
        for (name, n) in &other.0 {
            *self.0.entry(name.clone()).or_default() += n;
        }
    }
}
