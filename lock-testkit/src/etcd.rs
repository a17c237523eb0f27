//! Real `etcd` processes (Debian's `etcd-server`) on free loopback ports: one member, or a cluster of three, for
//! the tests of `lock-etcd`.
//!
//! Each member gets its own data directory, on a RAM-backed filesystem (`/dev/shm`) where there is one, and runs
//! with `--unsafe-no-fsync` (a killed member's writes are in the page cache, which only a machine crash loses).
//! The election timeout is raised for a cluster ([`EtcdBuilder::members`]) so that a loaded 2-core runner does not
//! flap between leaders. Members are killed when the [`EtcdServer`] is dropped, and with the test
//! process (`PR_SET_PDEATHSIG`).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::server::{find_binary, spawn_tied_to_process, ServerError};

/// How long a member (or a cluster) may take to report healthy.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Tries with new ports when another process took one we picked.
const PORT_ATTEMPTS: usize = 5;

/// The `etcd` binary the fixtures start: `ETCD_SERVER` if it names a file, else `etcd` on `PATH`.
pub fn etcd_binary() -> Option<PathBuf> {
    match std::env::var_os("ETCD_SERVER") {
        Some(path) => Some(PathBuf::from(path)).filter(|p| p.is_file()),
        None => find_binary("etcd"),
    }
}

/// The `etcdctl` binary (Debian's `etcd-client`): `ETCDCTL` if it names a file, else `etcdctl` on `PATH`.
pub fn etcdctl_binary() -> Option<PathBuf> {
    match std::env::var_os("ETCDCTL") {
        Some(path) => Some(PathBuf::from(path)).filter(|p| p.is_file()),
        None => find_binary("etcdctl"),
    }
}

fn not_installed() -> ServerError {
    ServerError::Start {
        reason:
            "etcd is not installed: run `scripts/test.sh`, which installs Debian's etcd-server and etcd-client, or \
                 set ETCD_SERVER"
                .into(),
    }
}

/// Options for [`EtcdServer`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `start()`"]
pub struct EtcdBuilder {
    members: usize,
    heartbeat: Duration,
    election: Duration,
    quota_bytes: Option<u64>,
}

impl Default for EtcdBuilder {
    fn default() -> Self {
        EtcdBuilder {
            members: 1,
            // One member never holds an election after it starts: short timeouts only make its smallest lease 1 s.
            heartbeat: Duration::from_millis(50),
            election: Duration::from_millis(500),
            quota_bytes: None,
        }
    }
}

impl EtcdBuilder {
    /// `n` members (1 or 3, say). With more than one, the heartbeat is etcd's default (100 ms) and the election
    /// timeout is raised above it to 1.3 s, so that a member starved of CPU for a second on a loaded runner does not
    /// start an election; the smallest lease is then 2 s (one member: 50 ms, 500 ms and 1 s).
    pub fn members(mut self, n: usize) -> Self {
        self.members = n.max(1);
        if n > 1 {
            self.heartbeat = Duration::from_millis(100);
            self.election = Duration::from_millis(1_300);
        }
        self
    }

    /// Sets the backend quota (`--quota-backend-bytes`): a small one raises the `NOSPACE` alarm soon.
    pub fn quota_bytes(mut self, bytes: u64) -> Self {
        self.quota_bytes = Some(bytes);
        self
    }

    /// Starts the members and waits until each reports healthy.
    ///
    /// # Errors
    /// [`ServerError::Start`] when `etcd` is not installed or the cluster does not come up.
    pub fn start(self) -> Result<EtcdServer, ServerError> {
        let binary = etcd_binary().ok_or_else(not_installed)?;
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let root = tempdir()?;
            let mut members = Vec::new();
            for i in 0..self.members {
                members.push(Member {
                    name: format!("m{i}"),
                    client_port: free_port()?,
                    peer_port: free_port()?,
                    data: root.path().join(format!("m{i}")),
                    child: None,
                    paused: false,
                });
            }
            let token = format!("lock-testkit-{:016x}", rand::random::<u64>());
            let mut server = EtcdServer { binary: binary.clone(), options: self.clone(), members, root, token };
            match server.launch_all() {
                Ok(()) => return Ok(server),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or(ServerError::Start { reason: "no free ports for etcd".into() }))
    }
}

/// A data directory root: on `/dev/shm` when it exists (RAM-backed), else the system's temporary directory.
fn tempdir() -> io::Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let builder = {
        let mut b = tempfile::Builder::new();
        b.prefix("lock-testkit-etcd-");
        b
    };
    if shm.is_dir() {
        if let Ok(dir) = builder.tempdir_in(shm) {
            return Ok(dir);
        }
    }
    builder.tempdir()
}

fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data: PathBuf,
    child: Option<Child>,
    paused: bool,
}

impl Member {
    fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }
}

/// One etcd member, or a cluster, on loopback.
///
/// ```no_run
/// let etcd = lock_testkit::EtcdServer::start()?;
/// println!("connect to {}", etcd.endpoints().join(","));
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
#[derive(Debug)]
pub struct EtcdServer {
    binary: PathBuf,
    options: EtcdBuilder,
    members: Vec<Member>,
    root: tempfile::TempDir,
    token: String,
}

impl EtcdServer {
    /// One member (its smallest lease is 1 s).
    ///
    /// # Errors
    /// As [`EtcdBuilder::start`].
    pub fn start() -> Result<Self, ServerError> {
        EtcdBuilder::default().start()
    }

    /// One member shared by every test of the test binary (started once): for the cases that need a store, not
    /// its faults. Its process is killed with the test process (`PR_SET_PDEATHSIG`), and an exit hook kills it and
    /// removes its directory when the test binary exits normally. Do not kill it; start one of your own for that.
    ///
    /// # Errors
    /// As [`EtcdBuilder::start`], on every call once the first start failed.
    pub fn shared() -> Result<&'static EtcdServer, ServerError> {
        static SHARED: std::sync::OnceLock<Result<EtcdServer, String>> = std::sync::OnceLock::new();
        shared(&SHARED, EtcdBuilder::default())
    }

    /// Three members shared by every test of the test binary, as [`shared`](Self::shared).
    ///
    /// # Errors
    /// As [`EtcdBuilder::start`].
    pub fn shared_cluster() -> Result<&'static EtcdServer, ServerError> {
        static SHARED: std::sync::OnceLock<Result<EtcdServer, String>> = std::sync::OnceLock::new();
        shared(&SHARED, EtcdBuilder::default().members(3))
    }

    /// Options for other deployments.
    pub fn builder() -> EtcdBuilder {
        EtcdBuilder::default()
    }

    /// Every member's client endpoint, `127.0.0.1:PORT`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| format!("127.0.0.1:{}", m.client_port)).collect()
    }

    /// Member `i`'s client endpoint.
    pub fn endpoint(&self, i: usize) -> Option<String> {
        self.members.get(i).map(|m| format!("127.0.0.1:{}", m.client_port))
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there are no members (never: a cluster has at least one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The smallest lease the members keep: `ceil(1.5 × election timeout)`, in whole seconds, as etcd computes it.
    pub fn min_lease_ttl(&self) -> Duration {
        let ms = self.options.election.as_millis().saturating_mul(3) / 2;
        Duration::from_secs(u64::try_from(ms.div_ceil(1000)).unwrap_or(u64::MAX))
    }

    /// Runs `etcdctl` against every member's endpoint, and waits for it: its output.
    ///
    /// # Errors
    /// I/O errors, and `etcdctl` not installed.
    pub fn etcdctl(&self, args: &[&str]) -> io::Result<Output> {
        let mut cmd = self.etcdctl_command(args)?;
        cmd.stdin(Stdio::null()).output()
    }

    /// An `etcdctl` command against every member, not started (for a process the test drives: `etcdctl lock`).
    ///
    /// # Errors
    /// `etcdctl` not installed.
    pub fn etcdctl_command(&self, args: &[&str]) -> io::Result<Command> {
        let binary =
            etcdctl_binary().ok_or_else(|| io::Error::other("etcdctl is not installed (Debian: etcd-client)"))?;
        let mut cmd = Command::new(binary);
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoints().join(",")))
            .arg("--dial-timeout=5s")
            .arg("--command-timeout=10s")
            .args(args);
        Ok(cmd)
    }

    /// Kills member `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(member) = self.members.get_mut(i) {
            kill(member);
        }
    }

    /// Starts member `i` again on its data directory, and waits until it reports healthy.
    ///
    /// # Errors
    /// [`ServerError::Start`] when it does not come up.
    pub fn restart(&mut self, i: usize) -> Result<(), ServerError> {
        self.kill(i);
        self.launch(i, "existing")?;
        self.wait_healthy(&[i])
    }

    /// Kills member `i`, empties its data directory, and starts it as a new one-member cluster: what a single
    /// member restarted on an emptied disk is (its revisions start again at 1). One-member deployments only.
    ///
    /// # Errors
    /// [`ServerError::Start`] when it does not come up, or the deployment has several members.
    pub fn restart_empty(&mut self) -> Result<(), ServerError> {
        if self.members.len() != 1 {
            return Err(ServerError::Start { reason: "restart_empty is for a one-member deployment".into() });
        }
        self.kill(0);
        let data = self.members[0].data.clone();
        let _ = std::fs::remove_dir_all(&data);
        self.token = format!("lock-testkit-{:016x}", rand::random::<u64>());
        self.launch(0, "new")?;
        self.wait_healthy(&[0])
    }

    /// Freezes member `i` (SIGSTOP): its connections stay open, it answers nothing.
    #[cfg(unix)]
    pub fn pause(&mut self, i: usize) {
        if let Some(member) = self.members.get_mut(i) {
            if let Some(child) = &member.child {
                crate::server::signal(child, libc::SIGSTOP);
                member.paused = true;
            }
        }
    }

    /// Thaws a paused member (SIGCONT).
    #[cfg(unix)]
    pub fn resume(&mut self, i: usize) {
        if let Some(member) = self.members.get_mut(i) {
            if let Some(child) = &member.child {
                crate::server::signal(child, libc::SIGCONT);
                member.paused = false;
            }
        }
    }

    /// The index of the member that leads now, as the members report it (`etcdctl endpoint status`).
    pub fn leader(&self) -> Option<usize> {
        for (i, member) in self.members.iter().enumerate() {
            if member.child.is_none() || member.paused {
                continue;
            }
            let body = http_get(member.client_port, "/v3/maintenance/status", "{}").ok()?;
            // {"header":{…,"member_id":"…"},…,"leader":"…"}: the member that answers is the leader when they match.
            let field = |name: &str| {
                let start = body.find(&format!("\"{name}\":\""))? + name.len() + 4;
                let end = body.get(start..)?.find('"')? + start;
                body.get(start..end).map(str::to_owned)
            };
            if let (Some(me), Some(leader)) = (field("member_id"), field("leader")) {
                if me == leader {
                    return Some(i);
                }
            }
        }
        None
    }

    fn launch_all(&mut self) -> Result<(), ServerError> {
        for i in 0..self.members.len() {
            self.launch(i, "new")?;
        }
        let all: Vec<usize> = (0..self.members.len()).collect();
        self.wait_healthy(&all)
    }

    fn launch(&mut self, i: usize, state: &str) -> Result<(), ServerError> {
        let cluster: Vec<String> = self.members.iter().map(|m| format!("{}={}", m.name, m.peer_url())).collect();
        let options = &self.options;
        let Some(member) = self.members.get_mut(i) else {
            return Err(ServerError::Start { reason: format!("no member {i}") });
        };
        std::fs::create_dir_all(&member.data)?;
        let log = std::fs::File::create(member.data.with_extension("log"))?;
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&member.data)
            .arg("--listen-client-urls")
            .arg(member.client_url())
            .arg("--advertise-client-urls")
            .arg(member.client_url())
            .arg("--listen-peer-urls")
            .arg(member.peer_url())
            .arg("--initial-advertise-peer-urls")
            .arg(member.peer_url())
            .arg("--initial-cluster")
            .arg(cluster.join(","))
            .arg("--initial-cluster-state")
            .arg(state)
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .arg("--heartbeat-interval")
            .arg(options.heartbeat.as_millis().to_string())
            .arg("--election-timeout")
            .arg(options.election.as_millis().to_string())
            .args(["--unsafe-no-fsync", "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"]);
        if let Some(bytes) = options.quota_bytes {
            cmd.arg("--quota-backend-bytes").arg(bytes.to_string());
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(log));
        member.child = Some(spawn_tied_to_process(cmd)?);
        member.paused = false;
        Ok(())
    }

    fn wait_healthy(&mut self, members: &[usize]) -> Result<(), ServerError> {
        let started = Instant::now();
        loop {
            let mut healthy = true;
            for &i in members {
                let Some(member) = self.members.get_mut(i) else { continue };
                if let Some(child) = member.child.as_mut() {
                    if child.try_wait()?.is_some() {
                        let log = std::fs::read_to_string(member.data.with_extension("log")).unwrap_or_default();
                        let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                        return Err(ServerError::Start { reason: format!("etcd member {i} exited: {tail}") });
                    }
                }
                let body = http_get(member.client_port, "/health", "").unwrap_or_default();
                healthy &= body.contains("\"health\":\"true\"");
            }
            if healthy {
                return Ok(());
            }
            if started.elapsed() > STARTUP_TIMEOUT {
                return Err(ServerError::Start { reason: format!("etcd not healthy after {STARTUP_TIMEOUT:?}") });
            }
            std::thread::park_timeout(Duration::from_millis(20));
        }
    }

    /// The root of the members' data directories.
    pub fn dir(&self) -> &Path {
        self.root.path()
    }
}

fn shared(
    cell: &'static std::sync::OnceLock<Result<EtcdServer, String>>,
    options: EtcdBuilder,
) -> Result<&'static EtcdServer, ServerError> {
    let started = cell.get_or_init(|| {
        let server = options.start().map_err(|err| err.to_string())?;
        let processes = server.members.iter().filter_map(|m| Some((m.child.as_ref()?.id(), m.data.clone())));
        crate::server::exit_hook::register_processes(processes);
        Ok(server)
    });
    started.as_ref().map_err(|reason| ServerError::Start { reason: reason.clone() })
}

fn kill(member: &mut Member) {
    if let Some(mut child) = member.child.take() {
        #[cfg(unix)]
        if member.paused {
            crate::server::signal(&child, libc::SIGCONT);
        }
        member.paused = false;
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        for member in &mut self.members {
            kill(member);
        }
    }
}

/// A small HTTP request to a member's client port (etcd serves `/health` and its JSON gateway there): the body.
fn http_get(port: u16, path: &str, post: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let request = if post.is_empty() {
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    } else {
        format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{post}",
            post.len()
        )
    };
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.take(64 * 1024).read_to_string(&mut response)?;
    Ok(response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default())
}
