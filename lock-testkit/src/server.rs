//! Real `redis-server` processes on free loopback ports, for tests and benchmarks.
//!
//! Each server gets its own temporary directory and port, is killed when its [`RedisServer`] is dropped (also
//! when the test panics), and on Linux also when the test process dies (`PR_SET_PDEATHSIG`), so a SIGKILLed
//! test run leaves no server behind.

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::resp::{self, Reply};
use crate::tls::TestCertificates;

/// How long a server may take to answer its first PING.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on each [`RedisServer::command`].
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries with a new port when another process took the one we picked.
const PORT_ATTEMPTS: usize = 8;

/// Why a server could not be started or reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// `redis-server` is not on `PATH` (nor in `/usr/bin`, `/usr/local/bin`, `/usr/sbin`), and `REDIS_SERVER` does
    /// not name it.
    #[error("redis-server is not installed: run `scripts/test.sh`, which installs it, or set REDIS_SERVER")]
    NotInstalled,
    /// The process could not be started, or did not answer PING in time.
    #[error("redis-server did not start: {reason}")]
    Start {
        /// What went wrong, with the tail of the server's log.
        reason: String,
    },
    /// I/O with the server failed.
    #[error("I/O with redis-server failed")]
    Io(#[from] io::Error),
    /// The server answered something unexpected.
    #[error("unexpected reply from redis-server: {0}")]
    Protocol(String),
}

/// Durability settings of a test server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Persistence {
    /// `--save "" --appendonly no`: a restart loses everything (the default).
    #[default]
    None,
    /// `--appendonly yes --appendfsync always`: a restart keeps every acknowledged write.
    AppendFsyncAlways,
}

/// Options for [`RedisServer`].
#[derive(Clone, Debug, Default)]
#[must_use = "a builder does nothing until `start()`"]
pub struct RedisServerBuilder {
    persistence: Persistence,
    extra: Vec<String>,
    cluster: bool,
    /// The initial configuration file of a Sentinel.
    sentinel: Option<String>,
    /// The directory with `ca.crt`, `server.crt` and `server.key` (see [`TestCertificates`]), for a TLS port.
    tls: Option<PathBuf>,
    /// Whether TLS clients must present a certificate the CA signed.
    tls_client_certificates: bool,
    /// `requirepass`: the default user's password (the fixture's own commands authenticate with it).
    password: Option<String>,
}

impl RedisServerBuilder {
    /// Sets the durability.
    pub fn with_persistence(mut self, p: Persistence) -> Self {
        self.persistence = p;
        self
    }

    /// Adds one `--name value` configuration argument.
    pub fn with_config(mut self, name: &str, value: &str) -> Self {
        self.extra.push(format!("--{name}"));
        self.extra.push(value.to_owned());
        self
    }

    /// Makes the server a replica of `primary` (`--replicaof 127.0.0.1 PORT`). [`RedisServer::wait_for_link`] waits
    /// until it has synchronised.
    pub fn with_replica_of(mut self, primary: &RedisServer) -> Self {
        self.extra.extend(["--replicaof".to_owned(), "127.0.0.1".to_owned(), primary.port().to_string()]);
        self
    }

    /// Runs the server as a Redis Cluster node (`cluster-enabled yes`) with its cluster bus on a second free port.
    ///
    /// The bus port is picked here rather than left at Redis's default of port + 10000, which overflows for
    /// ephemeral ports above 55535 and may collide with another process. The node starts with no slots; see
    /// [`RedisCluster`](crate::RedisCluster) for a whole cluster.
    pub fn with_cluster(mut self, enabled: bool) -> Self {
        self.cluster = enabled;
        self
    }

    /// Runs the process as a Redis Sentinel (`redis-server sentinel.conf --sentinel`), with `config` (lines such as
    /// `sentinel monitor …`) as its configuration file. The file lives in the server's own directory and is written
    /// only when absent, because a Sentinel rewrites it with what it learns (its id, the replicas and other
    /// Sentinels it found) and must find that again after a [`restart`](RedisServer::restart). See
    /// [`RedisSentinel`](crate::RedisSentinel) for a whole deployment.
    pub fn with_sentinel(mut self, config: &str) -> Self {
        self.sentinel = Some(config.to_owned());
        self
    }

    /// Also listens for TLS on a second free port ([`RedisServer::tls_url`]), with the server certificate and CA of
    /// `certs`; clients may present a certificate ([`require_client_certificates`](Self::with_client_certificates_required)
    /// makes it mandatory). The plain port stays open for the fixture's own commands.
    pub fn with_tls(mut self, certs: &TestCertificates) -> Self {
        self.tls = Some(certs.dir().to_owned());
        self
    }

    /// TLS clients must present a certificate signed by the CA (mutual TLS, `tls-auth-clients yes`).
    pub fn with_client_certificates_required(mut self) -> Self {
        self.tls_client_certificates = true;
        self
    }

    /// Adds an ACL user, as a `user` configuration line: `rules` such as `on >password ~wlp:* &wlp:* +@all`.
    pub fn with_acl_user(mut self, name: &str, rules: &str) -> Self {
        self.extra.push("--user".to_owned());
        self.extra.push(name.to_owned());
        // One argument per rule: redis-server quotes an argument with spaces as one token.
        self.extra.extend(rules.split_whitespace().map(str::to_owned));
        self
    }

    /// Sets `requirepass` (the `default` user's password). The fixture's own commands authenticate with it.
    pub fn with_requirepass(mut self, password: &str) -> Self {
        self.password = Some(password.to_owned());
        self
    }

    /// Starts the server.
    ///
    /// # Errors
    /// [`ServerError::NotInstalled`] without `redis-server`; [`ServerError::Start`] when it does not come up.
    pub fn start(self) -> Result<RedisServer, ServerError> {
        let binary = redis_server_binary().ok_or_else(not_installed)?;
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let dir = tempfile::Builder::new().prefix("lock-testkit-redis-").tempdir()?;
            let port = free_port()?;
            let bus_port = if self.cluster { Some(free_port()?) } else { None };
            let tls_port = if self.tls.is_some() { Some(free_port()?) } else { None };
            let mut server = RedisServer {
                binary: binary.clone(),
                options: self.clone(),
                port,
                bus_port,
                tls_port,
                dir,
                child: None,
                paused: false,
            };
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or(ServerError::Start { reason: "no free port".into() }))
    }
}

/// One `redis-server` process on `127.0.0.1` and a free port.
///
/// ```no_run
/// let server = lock_testkit::RedisServer::start()?;
/// println!("connect to {}", server.url());
/// assert_eq!(server.command(&["PING"])?.as_text().as_deref(), Some("PONG"));
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    options: RedisServerBuilder,
    port: u16,
    /// The cluster bus port of a cluster node.
    bus_port: Option<u16>,
    /// The TLS port, when started with [`RedisServerBuilder::with_tls`].
    tls_port: Option<u16>,
    dir: tempfile::TempDir,
    child: Option<Child>,
    paused: bool,
}

impl RedisServer {
    /// Starts a server without persistence. Blocks the calling thread until the server answers PING (a few
    /// milliseconds).
    ///
    /// # Errors
    /// As [`RedisServerBuilder::start`].
    pub fn start() -> Result<Self, ServerError> {
        RedisServerBuilder::default().start()
    }

    /// Options for a server with other settings.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://127.0.0.1:TLS_PORT`, when started with [`RedisServerBuilder::with_tls`].
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port.map(|port| format!("rediss://127.0.0.1:{port}"))
    }

    /// The TLS port, when started with [`RedisServerBuilder::with_tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The URL for an ACL user: `redis://user:password@127.0.0.1:PORT`, or `rediss://…` on the TLS port with `tls`.
    pub fn url_for(&self, user: &str, password: &str, tls: bool) -> String {
        match (tls, self.tls_port) {
            (true, Some(port)) => format!("rediss://{user}:{password}@127.0.0.1:{port}"),
            _ => format!("redis://{user}:{password}@127.0.0.1:{}", self.port),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster bus port, when started with [`RedisServerBuilder::with_cluster`].
    pub fn bus_port(&self) -> Option<u16> {
        self.bus_port
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The server's working directory (where an append-only file lives).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends one command on a fresh connection and returns the reply.
    ///
    /// # Errors
    /// [`ServerError::Io`] when the server cannot be reached within 5 s.
    pub fn command(&self, args: &[&str]) -> Result<Reply, ServerError> {
        Ok(self.probe(args, COMMAND_TIMEOUT)?)
    }

    /// One command on a fresh connection, authenticated first when the server has a `requirepass`.
    fn probe(&self, args: &[&str], timeout: Duration) -> io::Result<Reply> {
        let mut conn = resp::Connection::open(self.addr(), timeout)?;
        if let Some(password) = &self.options.password {
            let reply = conn.command(&["AUTH", password])?;
            if reply.is_error() {
                return Err(io::Error::other(format!("AUTH refused: {reply:?}")));
            }
        }
        conn.command(args)
    }

    /// `INFO commandstats` as command name → calls (`script|load` for subcommands). A `redis.call` inside a script
    /// counts as a call of its command.
    ///
    /// # Errors
    /// As [`command`](Self::command); [`ServerError::Protocol`] for a reply that is not text.
    pub fn command_calls(&self) -> Result<BTreeMap<String, u64>, ServerError> {
        let reply = self.command(&["INFO", "commandstats"])?;
        let text = reply.as_text().ok_or_else(|| ServerError::Protocol(format!("INFO commandstats: {reply:?}")))?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
                Some((name.to_owned(), calls))
            })
            .collect())
    }

    /// Waits (at most `limit`) until this replica reports `master_link_status:up`.
    ///
    /// # Errors
    /// [`ServerError::Start`] when the link is not up in time.
    pub fn wait_for_link(&self, limit: Duration) -> Result<(), ServerError> {
        let started = Instant::now();
        loop {
            // A replica busy with its first sync may drop a probe: that is "not yet", until the limit.
            let info = match self.command(&["INFO", "replication"]) {
                Ok(reply) => reply.as_text().unwrap_or_default(),
                Err(err) if started.elapsed() <= limit => err.to_string(),
                Err(err) => return Err(err),
            };
            if info.contains("master_link_status:up") {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(ServerError::Start { reason: format!("replica link not up after {limit:?}: {info}") });
            }
            std::thread::park_timeout(Duration::from_millis(5));
        }
    }

    /// Kills the process with SIGKILL (no shutdown, no final save).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            #[cfg(unix)]
            if self.paused {
                signal(&child, libc::SIGCONT);
            }
            self.paused = false;
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing is answered. Unix only.
    #[cfg(unix)]
    #[cfg_attr(docsrs, doc(cfg(unix)))]
    pub fn pause(&mut self) {
        if let Some(child) = &self.child {
            signal(child, libc::SIGSTOP);
            self.paused = true;
        }
    }

    /// Thaws a paused process (SIGCONT). Unix only.
    #[cfg(unix)]
    #[cfg_attr(docsrs, doc(cfg(unix)))]
    pub fn resume(&mut self) {
        if let Some(child) = &self.child {
            signal(child, libc::SIGCONT);
            self.paused = false;
        }
    }

    /// Kills the process and starts a new one on the same port and directory. Without persistence the data is
    /// gone; with [`Persistence::AppendFsyncAlways`] it is reloaded.
    ///
    /// # Errors
    /// [`ServerError::Start`] when the new process does not come up (for example, the port was taken meanwhile).
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        self.launch()
    }

    fn launch(&mut self) -> Result<(), ServerError> {
        let dir = self.dir.path().to_owned();
        let log = dir.join("redis.log");
        let mut cmd = Command::new(&self.binary);
        if let Some(config) = &self.options.sentinel {
            // The file must come first on the command line; the options after it still apply.
            let file = dir.join("sentinel.conf");
            if !file.exists() {
                std::fs::write(&file, config)?;
            }
            cmd.arg(&file).arg("--sentinel");
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "yes", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(&log)
            .args(["--save", ""]);
        match self.options.persistence {
            Persistence::None => cmd.args(["--appendonly", "no"]),
            Persistence::AppendFsyncAlways => cmd.args(["--appendonly", "yes", "--appendfsync", "always"]),
        };
        if let Some(bus) = self.bus_port {
            // `nodes.conf` lives in the server's own directory, so a restart rejoins with the same node id.
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port"])
                .arg(bus.to_string());
        }
        if let (Some(dir), Some(port)) = (&self.options.tls, self.tls_port) {
            cmd.arg("--tls-port").arg(port.to_string());
            cmd.arg("--tls-cert-file").arg(dir.join("server.crt"));
            cmd.arg("--tls-key-file").arg(dir.join("server.key"));
            cmd.arg("--tls-ca-cert-file").arg(dir.join("ca.crt"));
            let clients = if self.options.tls_client_certificates { "yes" } else { "optional" };
            cmd.args(["--tls-auth-clients", clients]);
            if self.bus_port.is_some() {
                // The cluster bus and replication speak TLS too; clients get each node's TLS port.
                cmd.args(["--tls-cluster", "yes", "--tls-replication", "yes"]);
            }
        }
        if let Some(password) = &self.options.password {
            cmd.args(["--requirepass", password]);
            // A replica of this server (a cluster's, say) authenticates with the same password.
            cmd.args(["--masterauth", password]);
        }
        cmd.args(&self.options.extra).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let mut child = spawn_tied_to_process(cmd)?;
        let started = Instant::now();
        loop {
            if let Ok(reply) = self.probe(&["PING"], Duration::from_millis(200)) {
                if reply == Reply::Status("PONG".into()) {
                    // Between `free_port` and our bind another test's server may have taken the port (many start
                    // at once): then it answered, ours failed to bind, and the caller must try another port.
                    if self.process_id() == Some(child.id()) {
                        self.child = Some(child);
                        return Ok(());
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(ServerError::Start { reason: format!("port {} taken by another server", self.port) });
                }
            }
            let exited = child.try_wait()?.is_some();
            if exited || started.elapsed() > STARTUP_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                return Err(ServerError::Start { reason: format!("port {}: {tail}", self.port) });
            }
            // Synchronous by design (test setup); the server is up within a few milliseconds.
            std::thread::park_timeout(Duration::from_millis(2));
        }
    }
}

impl RedisServer {
    /// The `process_id` the server on our port reports.
    fn process_id(&self) -> Option<u32> {
        let info = self.probe(&["INFO", "server"], Duration::from_millis(500)).ok()?.as_text()?;
        info.lines().find_map(|line| line.strip_prefix("process_id:")?.trim().parse().ok())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(unix)]
pub(crate) fn signal(child: &Child, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: sending a signal to our own child process, which we have not reaped yet.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

/// The `redis-server` the fixtures start: `REDIS_SERVER` if it names a file, else the first on `PATH` (or in the
/// usual system directories).
pub fn redis_server_binary() -> Option<PathBuf> {
    match std::env::var_os("REDIS_SERVER") {
        Some(path) => Some(PathBuf::from(path)).filter(|p| p.is_file()),
        None => find_binary("redis-server"),
    }
}

/// [`ServerError::NotInstalled`], after telling the reader once per test binary what to do (the tests that need a
/// server fail; the in-memory and unit tests still run).
fn not_installed() -> ServerError {
    static TOLD: std::sync::Once = std::sync::Once::new();
    TOLD.call_once(|| {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "lock-testkit: redis-server is not installed (not on PATH, nor in /usr/bin, /usr/local/bin or \
                 /usr/sbin, and REDIS_SERVER is not set).\n\
                 lock-testkit: every fixture that needs a real server fails with NotInstalled (so does each test \
                 using one); the in-memory and unit tests still run.\n\
                 lock-testkit: run the whole suite with `scripts/test.sh` from the workspace root: it installs \
                 redis-server from the system's packages first (apt-get, dnf, yum, apk, pacman or brew)."
            );
        }
    });
    ServerError::NotInstalled
}

/// Looks `name` up on `PATH`, then in the usual system directories (`/usr/bin`, `/usr/local/bin`, `/usr/sbin`).
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/local/bin", "/usr/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns from one long-lived thread: `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, and
/// test threads exit early; this thread lives as long as the process.
pub(crate) fn spawn_tied_to_process(cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("lock-testkit-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    set_parent_death_signal(&mut cmd);
                    let _ = reply.send(cmd.spawn());
                }
            })
            .map(|_| ())
            .unwrap_or_else(|err| tracing::warn!(%err, "no spawner thread"));
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let sent = spawner.lock().unwrap_or_else(|p| p.into_inner()).send((cmd, reply_tx));
    if let Err(mpsc::SendError((mut cmd, _))) = sent {
        // No spawner thread: spawn here, without the death signal.
        return cmd.spawn();
    }
    reply_rx.recv().map_err(|_| io::Error::other("spawner thread gone"))?
}

/// Cleans up the servers of a shared fixture ([`RedisCluster::shared`](crate::RedisCluster::shared),
/// [`RedisSentinel::shared`](crate::RedisSentinel::shared)) when the test binary exits normally. Statics are never
/// dropped, so without this the processes would die only by `PR_SET_PDEATHSIG` and their directories would stay.
pub(crate) mod exit_hook {
    use std::path::PathBuf;
    use std::sync::Mutex;

    use super::RedisServer;

    static STATE: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

    pub(crate) fn register<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) {
        register_processes(servers.into_iter().filter_map(|s| Some((s.pid()?, s.dir().to_owned()))));
    }

    /// Registers processes (and their directories) of a shared fixture by id.
    pub(crate) fn register_processes(processes: impl IntoIterator<Item = (u32, PathBuf)>) {
        let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        let first = state.is_empty();
        state.extend(processes);
        #[cfg(unix)]
        if first {
            // SAFETY: registers a plain `extern "C"` function with the C runtime; it runs once, at `exit`.
            #[allow(unsafe_code)]
            unsafe {
                libc::atexit(at_exit);
            }
        }
        // Elsewhere the shared fixtures' processes outlive the test binary (no atexit hook, no parent-death
        // signal): a platform limit, documented on the shared fixtures.
        #[cfg(not(unix))]
        let _ = first;
    }

    #[cfg(unix)]
    extern "C" fn at_exit() {
        let state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        for (pid, dir) in state.iter() {
            if let Ok(pid) = libc::pid_t::try_from(*pid) {
                // SAFETY: kills a child we started and never reaped (the static owning it is never dropped).
                #[allow(unsafe_code)]
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(target_os = "linux")]
fn set_parent_death_signal(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child's own process attributes.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn set_parent_death_signal(_cmd: &mut Command) {}

/// A script listing the keys matching `ARGV[1]` but those a lock keeps on purpose, without a TTL: fencing counters
/// and the wire version key (the rule of [`lasting_key`](crate::lasting_key), in Lua).
pub(crate) const KEYS_BUT_COUNTERS: &str = "local left = {} for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
     local lasting = string.find(k, ':fence$') or (string.sub(k, -4) == 'wire' and not string.find(k, '{', 1, true)) \
     if not lasting then table.insert(left, k) end end return left";
