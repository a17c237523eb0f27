//! Lock holders as separate processes, so that pausing one with `SIGSTOP` models a GC pause faithfully (its
//! timers, its runtime and its connections all freeze), and killing one models a crash.
//!
//! A test binary re-runs itself: [`WorkerProcess::spawn`] starts the current test executable with only the named
//! entry test selected and [`WORKER_ENV`] set; that entry test checks [`worker_id`] and, when set, runs the
//! worker's loop instead of returning at once.

use std::io;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Set (to the worker's id) in a worker process's environment.
pub const WORKER_ENV: &str = "LOCK_TESTKIT_WORKER";

/// This process's worker id, when it was started by [`WorkerProcess::spawn`].
pub fn worker_id() -> Option<u32> {
    std::env::var(WORKER_ENV).ok()?.parse().ok()
}

/// One worker process; killed when dropped.
#[derive(Debug)]
pub struct WorkerProcess {
    id: u32,
    child: Option<Child>,
}

impl WorkerProcess {
    /// Starts the current test executable running only test `entry`, as worker `id`, with extra environment.
    ///
    /// # Errors
    /// When the executable cannot be found or started.
    pub fn spawn(entry: &str, id: u32, vars: &[(&str, String)]) -> io::Result<Self> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args([entry, "--exact", "--nocapture", "--test-threads=1", "--quiet"])
            .env(WORKER_ENV, id.to_string())
            .stdin(Stdio::null())
            // Its test harness chatter would read like extra test results in the parent's output.
            .stdout(Stdio::null());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let child = crate::server::spawn_tied_to_process(cmd)?;
        Ok(WorkerProcess { id, child: Some(child) })
    }

    /// The worker's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The process id, while the process has not been killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(child) = &self.child {
            crate::server::signal(child, sig);
        }
    }

    /// Freezes the process (`SIGSTOP`).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Thaws it (`SIGCONT`).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Kills it (`SIGKILL`) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `limit` for the process to exit on its own; kills it if it does not.
    ///
    /// # Errors
    /// When waiting fails, or the worker did not exit in time (it is killed then).
    pub fn wait(&mut self, limit: Duration) -> io::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else {
            return Err(io::Error::other("worker already reaped"));
        };
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(status);
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(io::Error::new(io::ErrorKind::TimedOut, format!("worker {} did not exit", self.id)));
            }
            // Synchronous by design (test orchestration).
            std::thread::park_timeout(Duration::from_millis(10));
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

/// A variable of this worker's environment.
///
/// # Panics
/// When it is not set (the case that spawned the worker forgot it).
pub(crate) fn worker_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker needs {name}"))
}

/// Appends `line` to the file at `path`, one write per line, so a reader never sees half of one (what workers
/// report through; a killed worker loses only what it had not written).
///
/// # Panics
/// When the file cannot be written.
pub(crate) fn append_line(path: &std::path::Path, line: &str) {
    use std::io::Write as _;
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
    let written = file.and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
    written.unwrap_or_else(|err| panic!("writing {}: {err}", path.display()));
}

/// The text of the file at `path` once a worker has written a whole line to it (bounded: 20 s).
///
/// # Panics
/// When no line arrives in time; `what` names what was awaited.
pub(crate) async fn wait_for_line(path: &std::path::Path, what: &str) -> String {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{what} never happened");
        crate::runtime::sleep(Duration::from_millis(2)).await;
    }
}

/// A sleep of the calling thread, for the soaks' chaos loops, which run on a test's own thread outside any runtime.
#[allow(clippy::disallowed_methods)]
pub(crate) fn blocking_sleep(d: Duration) {
    std::thread::sleep(d);
}

/// The chaos of a soak whose workers all do the same thing: every 200–600 ms one worker, picked at random, is
/// SIGKILLed and started again (`respawn(id)`, ids from 1) or SIGSTOPped for 300–1 200 ms, until `secs` have passed;
/// then every worker is killed. Returns the kills and the pauses.
pub(crate) fn kill_and_pause_at_random(
    workers: &mut [WorkerProcess],
    secs: u64,
    rng: &mut impl rand::Rng,
    respawn: impl Fn(u32) -> WorkerProcess,
) -> (u32, u32) {
    use rand::RngExt as _;
    let (mut kills, mut pauses) = (0, 0);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) && !workers.is_empty() {
        blocking_sleep(Duration::from_millis(rng.random_range(200..600)));
        let i = rng.random_range(0..workers.len());
        if rng.random_bool(0.5) {
            workers[i].kill();
            kills += 1;
            workers[i] = respawn(u32::try_from(i + 1).unwrap_or(u32::MAX));
        } else {
            workers[i].pause();
            blocking_sleep(Duration::from_millis(rng.random_range(300..1_200)));
            workers[i].resume();
            pauses += 1;
        }
    }
    for worker in workers.iter_mut() {
        worker.kill();
    }
    (kills, pauses)
}
