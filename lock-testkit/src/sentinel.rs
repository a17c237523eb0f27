//! A Sentinel-managed Redis on loopback, for tests: one primary, one replica, three Sentinels.
//!
//! [`RedisSentinel::start`] starts the primary, a replica that has synchronised with it, and three Sentinels
//! monitoring it with quorum 2, and returns once every Sentinel names the primary, sees the replica in sync and
//! knows the two other Sentinels. Sentinels find each other through hello messages, which they publish every 2 s
//! by default; the fixture sets that period (and the one of their `INFO` polls) shorter with `SENTINEL DEBUG`, so
//! a deployment is ready in a fraction of a second and a failover of a killed primary takes about 2 s
//! (`down-after-milliseconds` 1 s, then the election and the promotion).
//!
//! Every process is a [`RedisServer`]: killed on drop, and with the test process (`PR_SET_PDEATHSIG`). The
//! Sentinels run `redis-server sentinel.conf --sentinel` (Debian's `redis-server` package is enough; the separate
//! `redis-sentinel` binary is the same program).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::cluster::{expect_ok, poll_pause, text};
use crate::resp::Reply;
use crate::server::{RedisServer, RedisServerBuilder, ServerError};

/// Sentinels in a deployment; a majority (the quorum) of them must agree that the primary is down.
const SENTINELS: usize = 3;
/// Sentinels that must agree the primary is down before a failover starts.
const QUORUM: usize = 2;
/// How long a deployment may take to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Between two hello messages of a Sentinel (default 2 s), which is how Sentinels discover each other.
const PUBLISH_PERIOD_MS: &str = "100";
/// Between two `INFO` polls of the primary and replicas (default 10 s, 1 s during a failover).
const INFO_PERIOD_MS: &str = "250";

/// Options for [`RedisSentinel`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `start()`"]
pub struct RedisSentinelBuilder {
    service_name: String,
    down_after: Duration,
    failover_timeout: Duration,
    /// Options the primary and the replica start with (a password, ACL users).
    data: RedisServerBuilder,
    /// The data nodes' `requirepass`, which the Sentinels use too (`sentinel auth-pass`).
    password: Option<String>,
}

impl Default for RedisSentinelBuilder {
    fn default() -> Self {
        RedisSentinelBuilder {
            service_name: "mymaster".to_owned(),
            down_after: Duration::from_millis(1_000),
            failover_timeout: Duration::from_millis(3_000),
            data: RedisServerBuilder::default(),
            password: None,
        }
    }
}

impl RedisSentinelBuilder {
    /// The name the Sentinels monitor the primary under (default `mymaster`): what clients ask them for.
    pub fn with_service_name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.service_name);
        self
    }

    /// `down-after-milliseconds` (default 1 s): how long the primary may not answer before a Sentinel considers
    /// it down, the largest part of a failover's duration.
    pub fn with_down_after(mut self, after: Duration) -> Self {
        self.down_after = after;
        self
    }

    /// `failover-timeout` (default 3 s): how long one failover attempt may take, and (doubled) how long the
    /// Sentinels wait before they fail the same service over again.
    pub fn with_failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Sets `requirepass` on the primary and the replica (the replica and the Sentinels authenticate with it, as
    /// must every client of the data nodes).
    pub fn with_data_password(mut self, password: &str) -> Self {
        self.data = self.data.with_requirepass(password);
        self.password = Some(password.to_owned());
        self
    }

    /// Adds an ACL user to the primary and the replica ([`RedisServerBuilder::with_acl_user`]).
    pub fn with_data_acl_user(mut self, name: &str, rules: &str) -> Self {
        self.data = self.data.with_acl_user(name, rules);
        self
    }

    /// Starts the primary, the replica and the Sentinels. Blocks until the deployment is ready (a few hundred
    /// milliseconds).
    ///
    /// # Errors
    /// [`ServerError::NotInstalled`] without `redis-server`; [`ServerError::Start`] when a process does not come up
    /// or the Sentinels do not agree on the deployment within 20 s; [`ServerError::Protocol`] when a server rejects
    /// a command.
    pub fn start(self) -> Result<RedisSentinel, ServerError> {
        let started = Instant::now();
        // A replica syncs right away instead of waiting 5 s for more replicas to share the transfer.
        let data = self.data.clone().with_config("repl-diskless-sync-delay", "0");
        let primary = data.clone().start()?;
        let replica = data.with_replica_of(&primary).start()?;
        replica.wait_for_link(START_TIMEOUT)?;
        let config = self.monitor_lines(primary.port());
        let mut sentinels = Vec::with_capacity(SENTINELS);
        for _ in 0..SENTINELS {
            let sentinel = RedisServerBuilder::default().with_sentinel(&config).start()?;
            let periods = ["SENTINEL", "DEBUG", "publish-period", PUBLISH_PERIOD_MS, "info-period", INFO_PERIOD_MS];
            expect_ok(sentinel.command(&periods)?, "SENTINEL DEBUG")?;
            sentinels.push(sentinel);
        }
        let deployment = RedisSentinel { options: self, nodes: [Some(primary), Some(replica)], primary: 0, sentinels };
        deployment.wait_ready(START_TIMEOUT.saturating_sub(started.elapsed()))?;
        tracing::debug!(elapsed = ?started.elapsed(), "sentinel deployment ready");
        Ok(deployment)
    }

    /// The `sentinel …` configuration lines for a primary on `port`.
    fn monitor_lines(&self, port: u16) -> String {
        let name = &self.service_name;
        let auth = self.password.as_ref().map(|p| format!("sentinel auth-pass {name} {p}\n")).unwrap_or_default();
        format!(
            "sentinel monitor {name} 127.0.0.1 {port} {QUORUM}\n\
             sentinel down-after-milliseconds {name} {}\n\
             sentinel failover-timeout {name} {}\n{auth}",
            self.down_after.as_millis(),
            self.failover_timeout.as_millis(),
        )
    }
}

/// A Sentinel-managed primary with one replica and three Sentinels on loopback, each a [`RedisServer`].
///
/// The two data nodes keep their numbers (0 started as the primary, 1 as its replica) while their roles change;
/// [`primary`](Self::primary) and [`replica`](Self::replica) follow the roles.
///
/// ```no_run
/// use std::time::Duration;
///
/// let mut deployment = lock_testkit::RedisSentinel::start()?;
/// println!("ask {:?} for {:?}", deployment.sentinel_urls(), deployment.service_name());
/// let promoted = deployment.kill_primary_and_wait_for_promotion(Duration::from_secs(30))?;
/// assert_eq!(Some(promoted), deployment.primary().map(|p| p.addr()));
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
#[derive(Debug)]
pub struct RedisSentinel {
    options: RedisSentinelBuilder,
    /// The data nodes; `None` once killed.
    nodes: [Option<RedisServer>; 2],
    /// Which of `nodes` is the primary now.
    primary: usize,
    sentinels: Vec<RedisServer>,
}

impl RedisSentinel {
    /// Starts a deployment with the default options (service `mymaster`, `down-after-milliseconds` 1 s).
    ///
    /// # Errors
    /// As [`RedisSentinelBuilder::start`].
    pub fn start() -> Result<Self, ServerError> {
        RedisSentinelBuilder::default().start()
    }

    /// Options for another deployment.
    pub fn builder() -> RedisSentinelBuilder {
        RedisSentinelBuilder::default()
    }

    /// One deployment per test process, started on first use and shared by every test in the binary.
    ///
    /// It is never dropped (it lives in a `static`): its processes die with the test process
    /// (`PR_SET_PDEATHSIG`), and an exit hook kills them and removes their directories when the test binary
    /// exits normally. Do not kill its primary; start a deployment of your own for that.
    ///
    /// # Errors
    /// As [`RedisSentinelBuilder::start`], on every call once the first start failed.
    pub fn shared() -> Result<&'static RedisSentinel, ServerError> {
        static SHARED: OnceLock<Result<RedisSentinel, String>> = OnceLock::new();
        let shared = SHARED.get_or_init(|| {
            let deployment = RedisSentinel::start().map_err(|err| err.to_string())?;
            crate::server::exit_hook::register(deployment.nodes.iter().flatten().chain(&deployment.sentinels));
            Ok(deployment)
        });
        shared.as_ref().map_err(|reason| ServerError::Start { reason: reason.clone() })
    }

    /// The name the Sentinels monitor the primary under.
    pub fn service_name(&self) -> &str {
        &self.options.service_name
    }

    /// `redis://127.0.0.1:PORT` of every Sentinel (what a Sentinel-aware client is given).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The address of every Sentinel.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(RedisServer::addr).collect()
    }

    /// The Sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The primary, unless it was killed and nothing has been promoted since.
    pub fn primary(&self) -> Option<&RedisServer> {
        self.nodes[self.primary].as_ref()
    }

    /// The replica (the node a failover promotes), unless it was killed or promoted.
    pub fn replica(&self) -> Option<&RedisServer> {
        self.nodes[1 - self.primary].as_ref()
    }

    /// Data node `i` (0 started as the primary, 1 as the replica), unless it was killed.
    pub fn node(&self, i: usize) -> Option<&RedisServer> {
        self.nodes.get(i).and_then(Option::as_ref)
    }

    /// The primary's address as each Sentinel reports it now (`SENTINEL GET-MASTER-ADDR-BY-NAME`), in Sentinel
    /// order; `None` for a Sentinel that names none.
    ///
    /// # Errors
    /// I/O errors talking to a Sentinel.
    pub fn reported_primaries(&self) -> Result<Vec<Option<SocketAddr>>, ServerError> {
        let ask = ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name()];
        self.sentinels
            .iter()
            .map(|s| {
                let Reply::Array(addr) = s.command(&ask)? else { return Ok(None) };
                let port = addr.get(1).and_then(Reply::as_text).and_then(|p| p.parse::<u16>().ok());
                Ok(port.map(|p| SocketAddr::from(([127, 0, 0, 1], p))))
            })
            .collect()
    }

    /// Kills the primary with SIGKILL and waits until every Sentinel names the replica as the primary and the
    /// replica reports `role:master`. Returns the new primary's address; [`primary`](Self::primary) is that node
    /// from then on, and there is no replica left.
    ///
    /// # Errors
    /// [`ServerError::Start`] when there is no replica to promote, or the promotion does not complete within
    /// `timeout`.
    pub fn kill_primary_and_wait_for_promotion(&mut self, timeout: Duration) -> Result<SocketAddr, ServerError> {
        let candidate = 1 - self.primary;
        let promoted = self.nodes[candidate]
            .as_ref()
            .map(RedisServer::addr)
            .ok_or_else(|| ServerError::Start { reason: "no replica to promote".to_owned() })?;
        self.nodes[self.primary] = None;
        self.primary = candidate;
        let started = Instant::now();
        self.wait_for(timeout, "replica promoted", |d| {
            let named = d.reported_primaries()?.iter().all(|p| *p == Some(promoted));
            Ok(named && d.role(candidate)?.as_deref() == Some("master"))
        })?;
        tracing::debug!(elapsed = ?started.elapsed(), "replica promoted");
        Ok(promoted)
    }

    /// Swaps the roles of primary and replica by hand, without a Sentinel failover: once the replica has caught up
    /// with the primary's writes so far, `REPLICAOF NO ONE` on the replica, `REPLICAOF` the new primary on the old one, and every Sentinel re-pointed at the new primary
    /// (`SENTINEL REMOVE`, `SENTINEL MONITOR`). Unlike a failover, nothing disconnects the old primary's clients,
    /// so a client still connected there gets `READONLY` for its next write: the case a client must recover from
    /// by asking the Sentinels again. Returns the new primary's address once the deployment is ready again.
    ///
    /// # Errors
    /// [`ServerError::Start`] when a node was killed or the deployment is not ready within `timeout`;
    /// [`ServerError::Protocol`] when a server rejects a step.
    pub fn swap_roles_by_hand(&mut self, timeout: Duration) -> Result<SocketAddr, ServerError> {
        let (old, new) = match (self.primary(), self.replica()) {
            (Some(old), Some(new)) => (old, new),
            _ => return Err(ServerError::Start { reason: "both data nodes must be running".to_owned() }),
        };
        // Like a coordinated failover, the replica first catches up with what the primary has written so far.
        let written = repl_offset(old)?;
        self.wait_for(timeout, "replica caught up", |_| Ok(repl_offset(new)? >= written))?;
        let name = self.service_name().to_owned();
        for sentinel in &self.sentinels {
            expect_ok(sentinel.command(&["SENTINEL", "REMOVE", &name])?, "SENTINEL REMOVE")?;
        }
        expect_ok(new.command(&["REPLICAOF", "NO", "ONE"])?, "REPLICAOF NO ONE")?;
        let port = new.port().to_string();
        expect_ok(old.command(&["REPLICAOF", "127.0.0.1", &port])?, "REPLICAOF")?;
        let promoted = new.addr();
        for sentinel in &self.sentinels {
            for line in self.options.monitor_lines(new.port()).lines() {
                let args: Vec<&str> = line.split_whitespace().collect();
                // `sentinel monitor …` as a command is `SENTINEL MONITOR …`; the other lines become `SENTINEL SET`.
                let args = match args.as_slice() {
                    ["sentinel", "monitor", rest @ ..] => [&["SENTINEL", "MONITOR"][..], rest].concat(),
                    ["sentinel", option, name, value] => vec!["SENTINEL", "SET", name, option, value],
                    _ => return Err(ServerError::Protocol(format!("unexpected sentinel line {line}"))),
                };
                expect_ok(sentinel.command(&args)?, "SENTINEL MONITOR/SET")?;
            }
        }
        self.primary = 1 - self.primary;
        self.wait_ready(timeout)?;
        Ok(promoted)
    }

    /// Waits until every Sentinel names the primary, sees the replica (if one is running) in sync and knows the
    /// other Sentinels.
    ///
    /// # Errors
    /// [`ServerError::Start`] when that does not happen within `timeout`.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), ServerError> {
        let primary = self.primary().map(RedisServer::port);
        let replica = self.replica().map(|r| r.port().to_string());
        let others = (self.sentinels.len() - 1).to_string();
        self.wait_for(timeout, "sentinels ready", |d| {
            for sentinel in &d.sentinels {
                let master = fields(&sentinel.command(&["SENTINEL", "MASTER", d.service_name()])?);
                let ready = master.get("flags").map(String::as_str) == Some("master")
                    && master.get("port").and_then(|p| p.parse().ok()) == primary
                    && master.get("num-other-sentinels") == Some(&others);
                if !ready {
                    return Ok(false);
                }
                if let Some(replica) = &replica {
                    let Reply::Array(replicas) = sentinel.command(&["SENTINEL", "REPLICAS", d.service_name()])? else {
                        return Ok(false);
                    };
                    let synced = replicas.iter().map(fields).any(|r| {
                        r.get("port") == Some(replica)
                            && r.get("flags").map(String::as_str) == Some("slave")
                            && r.get("master-link-status").map(String::as_str) == Some("ok")
                    });
                    if !synced {
                        return Ok(false);
                    }
                }
            }
            Ok(true)
        })
    }

    /// The first element of `ROLE` on data node `i` (`master` or `slave`).
    fn role(&self, i: usize) -> Result<Option<String>, ServerError> {
        let Some(node) = self.node(i) else { return Ok(None) };
        Ok(match node.command(&["ROLE"])? {
            Reply::Array(items) => items.first().and_then(Reply::as_text),
            _ => None,
        })
    }

    /// Polls `check` until it says yes, for at most `timeout`; errors of a poll count as "not yet".
    fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&Self) -> Result<bool, ServerError>,
    ) -> Result<(), ServerError> {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            match check(self) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(err) => last = Some(err.to_string()),
            }
            if Instant::now() > deadline {
                let reason = format!("{what}: not within {timeout:?} (last error: {last:?})");
                return Err(ServerError::Start { reason });
            }
            poll_pause();
        }
    }
}

/// `master_repl_offset` of a primary or replica: how far into the replication stream it is.
fn repl_offset(server: &RedisServer) -> Result<u64, ServerError> {
    let info = text(server.command(&["INFO", "replication"])?)?;
    info.lines()
        .find_map(|l| l.trim().strip_prefix("master_repl_offset:").and_then(|v| v.parse().ok()))
        .ok_or_else(|| ServerError::Protocol(format!("no master_repl_offset in {info}")))
}

/// The field/value pairs of a Sentinel reply such as `SENTINEL MASTER` (a flat array of bulk strings).
fn fields(reply: &Reply) -> BTreeMap<String, String> {
    let Reply::Array(items) = reply else { return BTreeMap::new() };
    items.chunks_exact(2).filter_map(|pair| Some((text(pair[0].clone()).ok()?, text(pair[1].clone()).ok()?))).collect()
}

#[cfg(test)]
mod tests {
    use super::{fields, Reply};

    #[test]
    fn parses_sentinel_fields() {
        let bulk = |s: &str| Reply::Bulk(Some(s.as_bytes().to_vec()));
        let reply = Reply::Array(vec![bulk("name"), bulk("mymaster"), bulk("flags"), bulk("master"), bulk("odd")]);
        let f = fields(&reply);
        assert_eq!(f.len(), 2);
        assert_eq!(f["flags"], "master");
        assert!(fields(&Reply::Int(1)).is_empty());
    }
}
