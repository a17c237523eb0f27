//! The backend seam: a Redis client runs lock-core's calls (a script by SHA, or one plain command) and hands back
//! the reply in lock-core's own type. Every primitive's keys, scripts and reply parsing live in lock-core, so a new
//! primitive needs no backend code.
//!
//! A backend implements [`ScriptStore`] and gets [`LockStore`](crate::LockStore) (the mutex) from lock-core; the
//! conformance suites of `lock-testkit` prove it.

use std::fmt::{self, Debug};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;

use crate::error::Result;
use crate::options::ReplicaAck;
use crate::seam::notify::ReleaseHub;

/// A Lua script of lock-core, with its SHA-1 digest (computed once).
///
/// ```
/// let script = &lock_core::backend::scripts::EXTEND;
/// assert_eq!(script.name(), "extend");
/// assert_eq!(script.sha1().len(), 40);
/// assert!(script.body().contains("PEXPIRE"));
/// ```
pub struct Script {
    name: &'static str,
    body: &'static str,
    sha1: OnceLock<String>,
}

impl Script {
    /// A script called `name` (for errors and traces) with the Lua source `body`.
    pub const fn new(name: &'static str, body: &'static str) -> Self {
        Script { name, body, sha1: OnceLock::new() }
    }

    /// The script's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source, sent with `EVAL` after the server answered `NOSCRIPT`.
    pub fn body(&self) -> &'static str {
        self.body
    }

    /// The lowercase hex SHA-1 of the body, sent with `EVALSHA`.
    pub fn sha1(&self) -> &str {
        self.sha1.get_or_init(|| sha1_smol::Sha1::from(self.body).digest().to_string())
    }
}

impl Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script").field("name", &self.name).finish_non_exhaustive()
    }
}

/// What a [`Call`] sends.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Command {
    /// `EVALSHA sha numkeys keys… args…`, and once `EVAL body …` if the server answers `NOSCRIPT` (after a restart,
    /// a failover or `SCRIPT FLUSH`; `EVAL` also caches it again, and unlike `SCRIPT LOAD` + `EVALSHA` it cannot
    /// lose a race with a second flush).
    Script(&'static Script),
    /// One plain command: `name keys… args…` (for instance `SET key token NX PX ttl`, the acquire of a lock without
    /// fencing, which costs the server less than any script).
    Plain(&'static str),
}

/// One call lock-core asks a backend to run: a script or a command over keys that share one hash tag.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Call<'a> {
    /// The operation, for typed errors and traces (`"acquire"`, `"release"`, …).
    pub operation: &'static str,
    /// What to send.
    pub command: Command,
    /// The keys; all share one `{tag}`, and `keys[0]` routes the call on Redis Cluster.
    pub keys: &'a [&'a str],
    /// The arguments: durations and tokens, never instants (scripts read the server's `TIME`).
    pub args: &'a [&'a str],
    /// After a reply that is a grant ([`Reply::is_grant`]), `WAIT` for this many replicas on the connection that
    /// made the write (`WAIT` covers one connection's writes only), and report the count.
    pub replicas: Option<ReplicaAck>,
}

impl<'a> Call<'a> {
    /// A call of `script`.
    pub fn script(operation: &'static str, script: &'static Script, keys: &'a [&'a str], args: &'a [&'a str]) -> Self {
        Call { operation, command: Command::Script(script), keys, args, replicas: None }
    }

    /// A plain command `name keys… args…`.
    pub fn plain(operation: &'static str, name: &'static str, keys: &'a [&'a str], args: &'a [&'a str]) -> Self {
        Call { operation, command: Command::Plain(name), keys, args, replicas: None }
    }

    /// The same call, followed by a `WAIT` after a grant.
    pub fn with_replicas(mut self, replicas: Option<ReplicaAck>) -> Self {
        self.replicas = replicas;
        self
    }

    /// The key a call is routed by on Redis Cluster (its first; every key shares its slot).
    pub fn route_key(&self) -> Option<&'a str> {
        self.keys.first().copied()
    }

    /// The `WAIT` a backend sends after `reply`, if any: only after a grant, so a refused acquire never blocks on a
    /// missing replica.
    pub fn wait_after(&self, reply: &Reply) -> Option<ReplicaAck> {
        self.replicas.filter(|_| reply.is_grant())
    }

    /// The key of this call that a `WRONGTYPE` message names (scripts name the key they refuse), else the first.
    pub fn key_named_in(&self, message: &str) -> &'a str {
        // The longest match: a fence key contains its lock key.
        let named = self.keys.iter().copied().filter(|k| message.contains(k)).max_by_key(|k| k.len());
        named.or_else(|| self.route_key()).unwrap_or_default()
    }
}

/// What a call returned, in lock-core's own type: no client type crosses the seam.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// Redis nil (a script's `false`, a `SET NX` that found the key).
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// A simple status such as `OK`.
    Status(String),
    /// An array (a script's table).
    Array(Vec<Reply>),
}

impl Reply {
    /// Whether the reply reports a write that replicas should acknowledge: `OK`, a positive integer, or an array
    /// whose first element is a positive integer (every lock-core script that grants replies so). `OK` counts as a
    /// status or as a bulk string, since some clients do not tell the two apart.
    pub fn is_grant(&self) -> bool {
        match self {
            Reply::Status(s) => s == "OK",
            Reply::Bulk(b) if b.as_slice() == b"OK" => true,
            Reply::Int(n) => *n > 0,
            Reply::Array(items) => items.first().is_some_and(Reply::is_grant),
            Reply::Nil | Reply::Bulk(_) => false,
        }
    }

    /// The integer, if the reply is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The integers of an array of integers (how most lock-core scripts reply).
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        match self {
            Reply::Array(items) => items.iter().map(Reply::as_int).collect(),
            _ => None,
        }
    }

    /// The text of a bulk string or status.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Reply::Bulk(bytes) => std::str::from_utf8(bytes).ok(),
            Reply::Status(s) => Some(s),
            _ => None,
        }
    }

    /// A string, status or integer reply as text, invalid UTF-8 replaced (a value another client wrote is shown,
    /// not refused): clients differ in which of these a script's string becomes.
    pub fn to_text_lossy(&self) -> Option<String> {
        match self {
            Reply::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Reply::Status(text) => Some(text.clone()),
            Reply::Int(n) => Some(n.to_string()),
            Reply::Nil | Reply::Array(_) => None,
        }
    }
}

/// What a backend ran: the reply, and how many replicas acknowledged the write when the call asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ran {
    /// The script's or command's reply.
    pub reply: Reply,
    /// The count `WAIT` returned, when [`Call::wait_after`] asked for one.
    pub replicas: Option<i64>,
}

impl Ran {
    /// A reply without a `WAIT`.
    pub fn reply(reply: Reply) -> Self {
        Ran { reply, replicas: None }
    }

    /// A reply and the count its `WAIT` returned.
    pub fn acknowledged(reply: Reply, replicas: Option<i64>) -> Self {
        Ran { reply, replicas }
    }
}

/// How a backend's keys are spread: it decides how releases are announced and which multi-key calls are possible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Topology {
    /// One server (or one primary behind Sentinel, or an in-process store): any keys may meet in one call.
    Single,
    /// Redis Cluster: one call's keys must share a slot, and releases are announced with `SPUBLISH` on the
    /// shard that owns the lock's slot.
    Cluster,
}

/// A Redis client as lock-core needs it: run one [`Call`], and hear releases.
///
/// Implementations must:
/// - send a [`Command::Script`] by `EVALSHA`, and once by `EVAL` after `NOSCRIPT`;
/// - route by [`Call::route_key`] on Redis Cluster (following `MOVED`/`ASK`, retrying `TRYAGAIN` within the bound);
/// - after a grant, `WAIT` on the same connection when [`Call::wait_after`] says so (a connection nothing else
///   writes on meanwhile), and refuse before any I/O a [`ReplicaAck`] whose timeout the connection cannot wait for;
/// - bound every call with their own timeout and map client errors to [`LockError`](crate::LockError) with the
///   client error as source: `WRONGTYPE` → [`WrongType`](crate::LockError::WrongType) naming
///   [`Call::key_named_in`], unreachable → [`Unavailable`](crate::LockError::Unavailable), an ACL refusal →
///   [`Auth`](crate::LockError::Auth), … (an error raised before the request left must be
///   [`InvalidArgument`](crate::LockError::InvalidArgument): the engine then knows nothing was applied);
/// - never hand a connection whose command was cancelled mid-flight back to a pool in an unknown state.
///
/// Every `ScriptStore` is a [`LockStore`](crate::LockStore): lock-core's mutex runs on it.
#[async_trait]
pub trait ScriptStore: Send + Sync + Debug + 'static {
    /// Runs `call` and returns its reply.
    ///
    /// # Errors
    /// Typed as the trait docs say.
    ///
    /// # Cancel safety
    /// Must be cancel-safe for the connection: a dropped call may have been applied (lock-core cleans up by
    /// token), but must never leave a connection out of step (a later call reading this call's reply).
    async fn run(&self, call: Call<'_>) -> Result<Ran>;

    /// How the backend's keys are spread.
    fn topology(&self) -> Topology {
        Topology::Single
    }

    /// What kind of deployment this store talks to, for traces and metrics. See
    /// [`LockStore::deployment`](crate::LockStore::deployment).
    fn deployment(&self) -> &'static str {
        match self.topology() {
            Topology::Cluster => "cluster",
            Topology::Single => "single",
        }
    }

    /// The server(s) this store talks to, as `host:port`, never a credential. See
    /// [`LockStore::server`](crate::LockStore::server).
    fn server(&self) -> Option<&str> {
        None
    }

    /// The hub that turns this backend's release notifications into wake-ups, if the backend has notifications.
    /// See [`LockStore::release_hub`](crate::LockStore::release_hub).
    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        None
    }

    /// Whether the server executes this store's calls in the order they were first polled, across tasks. See
    /// [`LockStore::orders_commands`](crate::LockStore::orders_commands).
    fn orders_commands(&self) -> bool {
        false
    }

    /// The longest any call of this store that waits for no replicas takes to return (a reply or an error), when
    /// the store enforces that bound itself. See [`LockStore::call_bound`](crate::LockStore::call_bound).
    fn call_bound(&self) -> Option<std::time::Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_recognised() {
        assert!(Reply::Status("OK".into()).is_grant());
        assert!(Reply::Array(vec![Reply::Int(1), Reply::Int(7)]).is_grant());
        assert!(Reply::Int(1).is_grant());
        assert!(!Reply::Nil.is_grant());
        assert!(!Reply::Array(vec![Reply::Int(0), Reply::Int(700)]).is_grant());
        assert!(!Reply::Int(-1).is_grant());
    }

    #[test]
    fn wrongtype_names_the_longest_matching_key() {
        let keys = ["lock:{a}", "lock:{a}:fence"];
        let call = Call::script("acquire", &crate::seam::scripts::ACQUIRE, &keys, &[]);
        assert_eq!(call.key_named_in("WRONGTYPE fencing counter lock:{a}:fence does not"), "lock:{a}:fence");
        assert_eq!(call.key_named_in("WRONGTYPE lock key lock:{a} holds"), "lock:{a}");
        assert_eq!(call.key_named_in("WRONGTYPE Operation against a key"), "lock:{a}");
    }

    #[test]
    fn sha1_matches_redis() {
        // `redis-cli SCRIPT LOAD "return 1"` answers this digest.
        static ONE: Script = Script::new("one", "return 1");
        assert_eq!(ONE.sha1(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }
}
