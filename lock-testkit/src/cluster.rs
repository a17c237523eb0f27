//! A Redis Cluster of real `redis-server` processes on free loopback ports, for tests.
//!
//! [`RedisCluster::start`] starts 3 primaries (optionally with replicas), assigns the 16384 slots with
//! `CLUSTER ADDSLOTSRANGE`, joins the nodes with `CLUSTER MEET`, attaches replicas with `CLUSTER REPLICATE`, and
//! returns once every node reports `cluster_state:ok` and sees the whole topology. This is done by hand rather than
//! with `redis-cli --cluster create`, which polls the join once per second. What remains is Redis's own delay:
//! a primary does not report `ok` until 2 s after it started (`CLUSTER_WRITABLE_DELAY`), so a cluster costs about
//! 2 s; share one per test binary ([`RedisCluster::shared`]).
//!
//! Every node is a [`RedisServer`]: killed on drop, and with the test process (`PR_SET_PDEATHSIG`).

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::resp::Reply;
use crate::server::{RedisServer, RedisServerBuilder, ServerError};

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// How long the cluster may take to form (the 2 s writable delay plus gossip).
const FORM_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two polls of the nodes' view of the cluster.
const POLL: Duration = Duration::from_millis(10);

/// Options for [`RedisCluster`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `start()`"]
pub struct RedisClusterBuilder {
    primaries: usize,
    replicas: usize,
    node_timeout: Duration,
    extra: Vec<(String, String)>,
    /// Options every node starts with (TLS, ACL users).
    node: RedisServerBuilder,
}

impl Default for RedisClusterBuilder {
    fn default() -> Self {
        RedisClusterBuilder {
            primaries: 3,
            replicas: 0,
            node_timeout: Duration::from_millis(1_000),
            extra: Vec::new(),
            node: RedisServerBuilder::default(),
        }
    }
}

impl RedisClusterBuilder {
    /// Number of primaries (default 3, at least 1). The slots are split evenly between them.
    pub fn with_primaries(mut self, n: usize) -> Self {
        self.primaries = n.max(1);
        self
    }

    /// Replicas per primary (default 0). Needed for [`RedisCluster::failover`] and
    /// [`RedisCluster::kill_primary_and_wait`].
    pub fn with_replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// `cluster-node-timeout` (default 1 s): how long a node may be unreachable before it is considered failed,
    /// and so the largest part of the time an automatic failover takes. Short values make failover tests fast
    /// but risk spurious failure detection on a loaded machine.
    pub fn with_node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Adds one `--name value` configuration argument to every node.
    pub fn with_config(mut self, name: &str, value: &str) -> Self {
        self.extra.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Every node also listens for TLS with the certificates of `certs` ([`RedisServerBuilder::with_tls`]); the cluster
    /// bus and replication use TLS, and each node gives TLS clients the TLS ports of the others
    /// ([`RedisCluster::tls_urls`]).
    pub fn with_tls(mut self, certs: &crate::TestCertificates) -> Self {
        self.node = self.node.with_tls(certs);
        self
    }

    /// Adds an ACL user to every node ([`RedisServerBuilder::with_acl_user`]).
    pub fn with_acl_user(mut self, name: &str, rules: &str) -> Self {
        self.node = self.node.with_acl_user(name, rules);
        self
    }

    /// Starts the nodes and forms the cluster. Blocks until every node reports `cluster_state:ok` (about 2 s).
    ///
    /// # Errors
    /// [`ServerError::NotInstalled`] without `redis-server`; [`ServerError::Start`] when a node does not come up
    /// or the cluster does not form within 30 s; [`ServerError::Protocol`] when a node rejects a cluster command.
    pub fn start(self) -> Result<RedisCluster, ServerError> {
        let total = self.primaries * (1 + self.replicas);
        let mut server = self
            .node
            .clone()
            .with_cluster(true)
            .with_config("cluster-node-timeout", &self.node_timeout.as_millis().to_string())
            // A replica syncs right away instead of waiting 5 s for more replicas to share the transfer.
            .with_config("repl-diskless-sync-delay", "0")
            // A replica may always take over: failover tests kill primaries whose replicas lag by design.
            .with_config("cluster-replica-validity-factor", "0");
        for (name, value) in &self.extra {
            server = server.with_config(name, value);
        }
        let mut nodes = Vec::with_capacity(total);
        for _ in 0..total {
            let node = server.clone().start()?;
            let id = text(node.command(&["CLUSTER", "MYID"])?)?;
            nodes.push(Node { server: Some(node), id });
        }
        let cluster = RedisCluster { nodes, primaries: self.primaries, replicas: self.replicas };
        cluster.form()?;
        Ok(cluster)
    }
}

#[derive(Debug)]
struct Node {
    /// `None` once killed.
    server: Option<RedisServer>,
    id: String,
}

/// One node as another node sees it (a line of `CLUSTER NODES`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeView {
    /// The node id.
    pub id: String,
    /// The client port.
    pub port: u16,
    /// Whether it is a primary (`master`).
    pub primary: bool,
    /// The primary it replicates, for a replica.
    pub primary_id: Option<String>,
    /// Whether it is flagged as failing (`fail` or `fail?`).
    pub failing: bool,
    /// Whether the handshake with it is still in progress or its address is unknown.
    pub joining: bool,
    /// Slot ranges it serves (inclusive).
    pub slots: Vec<(u16, u16)>,
}

/// A Redis Cluster on loopback: primaries and replicas, each a [`RedisServer`].
///
/// Nodes are numbered in start order: the primaries first (`0..primaries`), then the replicas, replica
/// `primaries + k` following primary `k % primaries`. Numbers stay stable when roles change after a failover.
///
/// ```no_run
/// let cluster = lock_testkit::RedisCluster::start()?;
/// println!("seed nodes: {:?}", cluster.urls());
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
    primaries: usize,
    replicas: usize,
}

impl RedisCluster {
    /// Starts 3 primaries without replicas (about 2 s).
    ///
    /// # Errors
    /// As [`RedisClusterBuilder::start`].
    pub fn start() -> Result<Self, ServerError> {
        RedisClusterBuilder::default().start()
    }

    /// Options for another shape of cluster.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::default()
    }

    /// One 3-primary cluster per test process, started on first use and shared by every test in the binary.
    ///
    /// It is never dropped (it lives in a `static`): its processes die with the test process
    /// (`PR_SET_PDEATHSIG`), and an exit hook kills them and removes their directories when the test binary
    /// exits normally. Do not kill its nodes; start a cluster of your own for that.
    ///
    /// # Errors
    /// As [`RedisClusterBuilder::start`], on every call once the first start failed.
    pub fn shared() -> Result<&'static RedisCluster, ServerError> {
        static SHARED: OnceLock<Result<RedisCluster, String>> = OnceLock::new();
        let shared = SHARED.get_or_init(|| {
            let cluster = RedisCluster::start().map_err(|err| err.to_string())?;
            crate::server::exit_hook::register(cluster.live().map(|(_, s)| s));
            Ok(cluster)
        });
        shared.as_ref().map_err(|reason| ServerError::Start { reason: reason.clone() })
    }

    /// `rediss://127.0.0.1:TLS_PORT` of every live node, when started with [`RedisClusterBuilder::with_tls`].
    pub fn tls_urls(&self) -> Vec<String> {
        self.live().filter_map(|(_, s)| s.tls_url()).collect()
    }

    /// Seed URLs for an ACL user (`rediss://` on the TLS ports with `tls`), one per node still running.
    pub fn urls_for(&self, user: &str, password: &str, tls: bool) -> Vec<String> {
        self.live().map(|(_, s)| s.url_for(user, password, tls)).collect()
    }

    /// `redis://127.0.0.1:PORT` of every live node (seed nodes for a cluster client).
    pub fn urls(&self) -> Vec<String> {
        self.live().map(|(_, s)| s.url()).collect()
    }

    /// Number of nodes, live or killed.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes (never, once started).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`, unless it was killed.
    pub fn node(&self, i: usize) -> Option<&RedisServer> {
        self.nodes.get(i).and_then(|n| n.server.as_ref())
    }

    /// Node `i`, unless it was killed, to pause or resume it.
    pub fn node_mut(&mut self, i: usize) -> Option<&mut RedisServer> {
        self.nodes.get_mut(i).and_then(|n| n.server.as_mut())
    }

    /// The cluster node id of node `i`.
    pub fn node_id(&self, i: usize) -> Option<&str> {
        self.nodes.get(i).map(|n| n.id.as_str())
    }

    /// The node number of a cluster node id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }

    /// The cluster as live node `i` sees it (`CLUSTER NODES`).
    ///
    /// # Errors
    /// [`ServerError::Start`] when node `i` is not running; I/O and protocol errors.
    pub fn view(&self, i: usize) -> Result<Vec<NodeView>, ServerError> {
        let server = self.node(i).ok_or_else(|| not_running(i))?;
        Ok(parse_nodes(&text(server.command(&["CLUSTER", "NODES"])?)?))
    }

    /// The live nodes that are primaries now, as the first live node sees it.
    ///
    /// # Errors
    /// As [`view`](Self::view).
    pub fn primaries(&self) -> Result<Vec<usize>, ServerError> {
        let view = self.first_view()?;
        Ok(view.iter().filter(|v| v.primary && !v.failing).filter_map(|v| self.index_of(&v.id)).collect())
    }

    /// The node serving `key`'s hash slot now.
    ///
    /// # Errors
    /// As [`view`](Self::view); [`ServerError::Protocol`] when no node serves the slot.
    pub fn primary_for_key(&self, key: &str) -> Result<usize, ServerError> {
        let (first, server) = self.live().next().ok_or_else(|| not_running(0))?;
        let slot = server.command(&["CLUSTER", "KEYSLOT", key])?.as_int().and_then(|n| u16::try_from(n).ok());
        let slot = slot.ok_or_else(|| ServerError::Protocol(format!("CLUSTER KEYSLOT {key}")))?;
        self.view(first)?
            .iter()
            .find(|v| v.primary && v.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .and_then(|v| self.index_of(&v.id))
            .ok_or_else(|| ServerError::Protocol(format!("no node serves slot {slot}")))
    }

    /// Sends `args` to every live node and returns the replies in node order (`SCRIPT FLUSH`, say).
    ///
    /// # Errors
    /// The first I/O error.
    pub fn command_all(&self, args: &[&str]) -> Result<Vec<Reply>, ServerError> {
        self.live().map(|(_, s)| s.command(args)).collect()
    }

    /// Kills node `i` with SIGKILL. The other nodes flag it as failed after the node timeout; a replica of a
    /// killed primary takes over after that (see [`kill_primary_and_wait`](Self::kill_primary_and_wait)).
    pub fn kill(&mut self, i: usize) {
        if let Some(node) = self.nodes.get_mut(i) {
            node.server = None;
        }
    }

    /// Kills primary `i` and waits until one of its replicas has been promoted and every live node reports
    /// `cluster_state:ok` again. Returns the new primary's number.
    ///
    /// # Errors
    /// [`ServerError::Start`] when no replica took over within `timeout` (or `i` had none).
    pub fn kill_primary_and_wait(&mut self, i: usize, timeout: Duration) -> Result<usize, ServerError> {
        let id = self.node_id(i).ok_or_else(|| not_running(i))?.to_owned();
        let replicas: Vec<String> = self
            .first_view()?
            .into_iter()
            .filter(|v| v.primary_id.as_deref() == Some(id.as_str()))
            .map(|v| v.id)
            .collect();
        if replicas.is_empty() {
            return Err(ServerError::Start { reason: format!("node {i} has no replica to promote") });
        }
        self.kill(i);
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(view) = self.first_view() {
                let promoted = view.iter().find(|v| v.primary && !v.failing && replicas.contains(&v.id));
                if let Some(promoted) = promoted.and_then(|v| self.index_of(&v.id)) {
                    if self.all_ok().unwrap_or(false) {
                        return Ok(promoted);
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(ServerError::Start { reason: format!("no replica of node {i} promoted in {timeout:?}") });
            }
            poll_pause();
        }
    }

    /// Runs `CLUSTER FAILOVER` on replica `i` (a coordinated switch with its primary, no data lost) and waits
    /// until it is a primary and every live node reports `cluster_state:ok`.
    ///
    /// # Errors
    /// [`ServerError::Protocol`] when the node refuses (it is not a replica); [`ServerError::Start`] when the
    /// switch does not complete within `timeout`.
    pub fn failover(&self, i: usize, timeout: Duration) -> Result<(), ServerError> {
        let server = self.node(i).ok_or_else(|| not_running(i))?;
        expect_ok(server.command(&["CLUSTER", "FAILOVER"])?, "CLUSTER FAILOVER")?;
        let id = self.nodes[i].id.clone();
        let deadline = Instant::now() + timeout;
        loop {
            let me_primary = self.view(i).map(|v| v.iter().any(|n| n.id == id && n.primary)).unwrap_or(false);
            if me_primary && self.agreed().unwrap_or(false) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ServerError::Start { reason: format!("node {i} not promoted in {timeout:?}") });
            }
            poll_pause();
        }
    }

    /// Moves hash slot `slot` with its keys to primary `to` (`CLUSTER SETSLOT … IMPORTING/MIGRATING`, `MIGRATE`,
    /// `CLUSTER SETSLOT … NODE`), as `redis-cli --cluster reshard` does. Clients see `ASK` while the keys move
    /// and `MOVED` afterwards.
    ///
    /// # Errors
    /// [`ServerError::Protocol`] when a node refuses a step.
    pub fn migrate_slot(&self, slot: u16, to: usize) -> Result<(), ServerError> {
        let from = self.owner_of(slot)?;
        if from == to {
            return Ok(());
        }
        let source = self.node(from).ok_or_else(|| not_running(from))?;
        let target = self.node(to).ok_or_else(|| not_running(to))?;
        let (slot_s, from_id, to_id) = (slot.to_string(), self.nodes[from].id.clone(), self.nodes[to].id.clone());
        expect_ok(target.command(&["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id])?, "IMPORTING")?;
        expect_ok(source.command(&["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id])?, "MIGRATING")?;
        let port = target.port().to_string();
        loop {
            let keys = source.command(&["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"])?;
            let Reply::Array(keys) = keys else { return Err(ServerError::Protocol(format!("{keys:?}"))) };
            if keys.is_empty() {
                break;
            }
            let keys: Vec<String> = keys.iter().filter_map(Reply::as_text).collect();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "REPLACE", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            let reply = source.command(&args)?;
            if reply.is_error() {
                return Err(ServerError::Protocol(format!("MIGRATE: {reply:?}")));
            }
        }
        // Target first, then source, then the rest, as redis-cli does: the owner is never left without the slot.
        for node in [to, from].into_iter().chain((0..self.nodes.len()).filter(|&n| n != to && n != from)) {
            if let Some(server) = self.node(node) {
                expect_ok(server.command(&["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id])?, "SETSLOT NODE")?;
            }
        }
        Ok(())
    }

    /// Waits until every live node reports `cluster_state:ok` and they agree on the topology.
    ///
    /// # Errors
    /// [`ServerError::Start`] when that does not happen within `timeout`.
    pub fn wait_ok(&self, timeout: Duration) -> Result<(), ServerError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.agreed().unwrap_or(false) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ServerError::Start { reason: format!("cluster not ok within {timeout:?}") });
            }
            poll_pause();
        }
    }

    fn live(&self) -> impl Iterator<Item = (usize, &RedisServer)> {
        self.nodes.iter().enumerate().filter_map(|(i, n)| n.server.as_ref().map(|s| (i, s)))
    }

    fn first_view(&self) -> Result<Vec<NodeView>, ServerError> {
        let (first, _) = self.live().next().ok_or_else(|| not_running(0))?;
        self.view(first)
    }

    fn owner_of(&self, slot: u16) -> Result<usize, ServerError> {
        self.first_view()?
            .iter()
            .find(|v| v.primary && v.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .and_then(|v| self.index_of(&v.id))
            .ok_or_else(|| ServerError::Protocol(format!("no node serves slot {slot}")))
    }

    /// Assigns slots, joins the nodes, attaches replicas, and waits for agreement.
    fn form(&self) -> Result<(), ServerError> {
        let started = Instant::now();
        let per = usize::from(SLOTS).div_ceil(self.primaries);
        for (i, node) in self.live() {
            // Distinct epochs up front, as redis-cli does, so the nodes need not resolve collisions first.
            let epoch = (i + 1).to_string();
            expect_ok(node.command(&["CLUSTER", "SET-CONFIG-EPOCH", &epoch])?, "SET-CONFIG-EPOCH")?;
            if i < self.primaries {
                let first = (i * per).to_string();
                let last = ((i + 1) * per).min(usize::from(SLOTS)).saturating_sub(1).to_string();
                expect_ok(node.command(&["CLUSTER", "ADDSLOTSRANGE", &first, &last])?, "ADDSLOTSRANGE")?;
            }
        }
        let (_, seed) = self.live().next().ok_or_else(|| not_running(0))?;
        for (_, node) in self.live().skip(1) {
            let (port, bus) = (node.port().to_string(), node.bus_port().unwrap_or_default().to_string());
            expect_ok(seed.command(&["CLUSTER", "MEET", "127.0.0.1", &port, &bus])?, "CLUSTER MEET")?;
        }
        // A replica can only follow a primary it already knows.
        for i in self.primaries..self.nodes.len() {
            let primary_id = self.nodes[i % self.primaries].id.clone();
            let deadline = started + FORM_TIMEOUT;
            loop {
                if self.view(i)?.iter().any(|v| v.id == primary_id && !v.joining) {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(ServerError::Start { reason: format!("node {i} never learned of its primary") });
                }
                poll_pause();
            }
            let server = self.node(i).ok_or_else(|| not_running(i))?;
            expect_ok(server.command(&["CLUSTER", "REPLICATE", &primary_id])?, "CLUSTER REPLICATE")?;
        }
        self.wait_ok(FORM_TIMEOUT.saturating_sub(started.elapsed()))?;
        tracing::debug!(elapsed = ?started.elapsed(), nodes = self.nodes.len(), "cluster formed");
        Ok(())
    }

    /// Every live node reports `cluster_state:ok`, sees every other live node as joined and not failing, and
    /// (before any failover) every replica is attached and in sync.
    fn all_ok(&self) -> Result<bool, ServerError> {
        for (_, server) in self.live() {
            let info = text(server.command(&["CLUSTER", "INFO"])?)?;
            if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn agreed(&self) -> Result<bool, ServerError> {
        if !self.all_ok()? {
            return Ok(false);
        }
        let live: Vec<&str> = self.live().map(|(i, _)| self.nodes[i].id.as_str()).collect();
        let mut replicas_seen = BTreeMap::new();
        for (i, server) in self.live() {
            let view = self.view(i)?;
            let healthy = live.iter().all(|id| view.iter().any(|v| v.id == *id && !v.joining && !v.failing));
            if !healthy {
                return Ok(false);
            }
            replicas_seen.insert(i, view.iter().filter(|v| !v.primary && live.contains(&v.id.as_str())).count());
            if !view.iter().any(|v| v.id == self.nodes[i].id && v.primary) {
                // A replica must be in sync before it can serve a failover.
                let info = text(server.command(&["INFO", "replication"])?)?;
                if !info.lines().any(|l| l.trim() == "master_link_status:up") {
                    return Ok(false);
                }
            }
        }
        let expected = if self.live().count() == self.nodes.len() { self.primaries * self.replicas } else { 0 };
        Ok(replicas_seen.values().all(|&n| n >= expected))
    }
}

/// Waits between polls. Synchronous by design, like all fixture setup; from async code call the waiting methods
/// inside `spawn_blocking` so the runtime's workers keep running.
pub(crate) fn poll_pause() {
    std::thread::park_timeout(POLL);
}

fn not_running(i: usize) -> ServerError {
    ServerError::Start { reason: format!("cluster node {i} is not running") }
}

pub(crate) fn text(reply: Reply) -> Result<String, ServerError> {
    match reply {
        Reply::Error(e) => Err(ServerError::Protocol(e)),
        other => other.as_text().ok_or_else(|| ServerError::Protocol(format!("expected text, got {other:?}"))),
    }
}

pub(crate) fn expect_ok(reply: Reply, what: &str) -> Result<(), ServerError> {
    match reply {
        Reply::Status(s) if s == "OK" => Ok(()),
        other => Err(ServerError::Protocol(format!("{what}: {other:?}"))),
    }
}

/// Parses `CLUSTER NODES`: `id ip:port@bus[,host] flags primary ping pong epoch link slot…`.
fn parse_nodes(text: &str) -> Vec<NodeView> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let port = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let flags: Vec<&str> = f[2].split(',').collect();
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(NodeView {
                id: f[0].to_owned(),
                port,
                primary: flags.contains(&"master"),
                primary_id: (f[3] != "-").then(|| f[3].to_owned()),
                failing: flags.iter().any(|fl| *fl == "fail" || *fl == "fail?"),
                joining: flags.iter().any(|fl| *fl == "handshake" || *fl == "noaddr"),
                slots,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_nodes;

    #[test]
    fn parses_cluster_nodes() {
        let text = "a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 7000 [93->-b2]\n\
                    b2 127.0.0.1:7001@17001,host slave a1 0 0 2 connected\n\
                    c3 :0@0 fail?,handshake,noaddr - 0 0 0 disconnected\n";
        let v = parse_nodes(text);
        assert_eq!(v.len(), 3);
        assert_eq!((v[0].port, v[0].primary, v[0].slots.clone()), (7000, true, vec![(0, 5460), (7000, 7000)]));
        assert_eq!((v[1].primary, v[1].primary_id.as_deref()), (false, Some("a1")));
        assert!(v[2].failing && v[2].joining);
    }
}
