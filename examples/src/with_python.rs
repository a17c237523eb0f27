//! A Python process (redis-py's own `Lock`, or python-redis-lock's) and this library on one lock and one counter:
//! each adds to the counter under the lock, and no update is lost. The Rust side names the lock as the Python
//! package does, with the [`KeyLayout`] of that [`Peer`]: two packages easy to confuse, two different keys
//! (`orders` and `lock:orders`).
//!
//! Run by `cargo run -p examples --example with_python` (see there for the Python it needs).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use lock_core::{KeyLayout, Lock, LockOptions};
use lock_redis_rs::redis::AsyncCommands;
use lock_redis_rs::RedisStore;
use tokio::io::AsyncBufReadExt;

/// The Python interpreter with redis-py: `PYTHON` when set, else the virtual environment `interop/setup.sh` makes
/// (the README's test command runs it).
pub fn python() -> PathBuf {
    std::env::var_os("PYTHON")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/python/.venv/bin/python"), PathBuf::from)
}

/// The Python package on the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// redis-py's own `Lock` (`client.lock(name)`, PyPI `redis`): the raw name is the key, [`KeyLayout::plain`].
    RedisPy,
    /// python-redis-lock's `Lock` (PyPI `python-redis-lock`): key `lock:<name>`, [`KeyLayout::python_redis_lock`];
    /// our release pushes its signal list, so its waiters wake at once.
    PythonRedisLock,
}

impl Peer {
    /// The name `shared_counter.py` takes and the example's `--peer` flag.
    pub fn name(self) -> &'static str {
        match self {
            Peer::RedisPy => "redis-py",
            Peer::PythonRedisLock => "python-redis-lock",
        }
    }

    /// The layout that takes this package's key.
    pub fn layout(self) -> KeyLayout {
        match self {
            Peer::RedisPy => KeyLayout::plain(),
            Peer::PythonRedisLock => KeyLayout::python_redis_lock(),
        }
    }
}

/// What both sides did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    /// Updates the Rust side made.
    pub rust: u64,
    /// Updates the Python side made.
    pub python: u64,
    /// The counter at the end: `rust + python` when no update was lost.
    pub counter: u64,
    /// Rust acquisitions that found the lock held (by the Python side: the two really contended).
    pub contended: u64,
    /// What the Python side printed after it started.
    pub python_said: Vec<String>,
}

/// Runs `n` updates on each side at once against the Redis at `url`, on `resource`, with `peer` on the Python side.
///
/// # Errors
/// The Python process could not start or failed; the lock or the connection failed.
pub async fn run(url: &str, peer: Peer, resource: &str, n: u64) -> Result<Shared, Box<dyn std::error::Error>> {
    let counter = format!("{resource}:count");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/shared_counter.py");
    let mut python = tokio::process::Command::new(python())
        .arg(script)
        .args([url, resource, &counter, &n.to_string(), peer.name()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("start Python ({}; set PYTHON to one with redis-py): {e}", python().display()))?;
    // Both sides start together: the Python side says when it is connected.
    let mut lines = python.stdout.take().map(|out| tokio::io::BufReader::new(out).lines()).ok_or("no stdout")?;
    match lines.next_line().await? {
        Some(line) if line == "ready" => {}
        other => return Err(format!("the Python side did not start: {other:?}").into()),
    }

    // The same key the Python package uses (redis-py: the raw name; python-redis-lock: `lock:<name>`).
    let lock = Lock::new(RedisStore::connect(url).await?).with_layout(peer.layout());
    let mut conn = lock_redis_rs::redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    let options = LockOptions::new(Duration::from_secs(10)).with_wait(Duration::from_secs(30));
    let mut contended = 0;
    for _ in 0..n {
        let guard = match lock.try_acquire(resource, &options).await? {
            Some(guard) => guard,
            None => {
                contended += 1;
                lock.acquire(resource, &options).await?
            }
        };
        let value: Option<u64> = conn.get(&counter).await?;
        let () = conn.set(&counter, value.unwrap_or(0) + 1).await?;
        guard.release().await?;
    }
    let mut python_said = Vec::new();
    while let Some(line) = lines.next_line().await? {
        python_said.push(line);
    }
    let status = python.wait().await?;
    if !status.success() {
        return Err(format!("the Python side failed: {status}").into());
    }
    let counter: Option<u64> = conn.get(&counter).await?;
    Ok(Shared { rust: n, python: n, counter: counter.unwrap_or(0), contended, python_said })
}
