//! Where a lock's keys live, so that a lock can be shared with another library's on the same Redis: this library's
//! own layout, or the one a Python, Node or Java lock uses, under which the two exclude each other and, where the
//! other library announces its releases, wake each other.
//!
//! | layout | lock key for name `N` | shared with | our release also | our waiters hear the peer's release |
//! |---|---|---|---|---|
//! | [`KeyLayout::native`] (default) | `wlp:{N}` (the [`Lock`](crate::Lock)'s prefix, `N` escaped inside a hash tag) | this library, in any language that follows WIRE.md | — | yes (pub/sub) |
//! | [`KeyLayout::plain`] | `N` | redis-py `Lock`, node-redlock 4 and 5 (and `@sesamecare-oss/redlock`), go-redsync, bsm/redislock | — | no: they announce nothing; our waiters poll on their backoff |
//! | [`KeyLayout::python_redis_lock`] | `lock:N` | python-redis-lock | `DEL`, `LPUSH`, `PEXPIRE 1000` its `lock-signal:N` list, as its own release does, so its waiters (blocked on that list) wake at once | by polling every 10 ms: it signals through a list that only a blocking pop waits on |
//! | [`KeyLayout::pottery`] | `redlock:N` (over the same masters: [`Lock::redlock`](crate::Lock::redlock) for several) | pottery `Redlock` | — | no: our waiters poll on their backoff |
//! | [`KeyLayout::spring`] | `<registryKey>:N` | Spring Integration `RedisLockRegistry` | in its `PUB_SUB` mode, publishes the key on `<registryKey>-channel:<key>`, where its waiters listen | in `PUB_SUB` mode, yes (that channel); otherwise by polling |
//! | [`KeyLayout::shedlock`] | `job-lock:<env>:N` (for a [`JobLock`](crate::JobLock)) | ShedLock's Redis provider, which must run with `safeUpdate=true`: its default unlock is a blind `DEL` | — | a job lock does not wait |
//! | [`KeyLayout::redisson`] | the hash `N`, field `<token>:1` → hold count | Redisson `RLock` and `RFencedLock` (and node-redisson, for names that have no `{` or start with one: it names the channel otherwise) | publishes `0` on `redisson_lock__channel:{N}` (`SPUBLISH` on Cluster) | yes (that channel) |
//!
//! Which primitives run under which layout: another library's lock is a lock, so a primitive that keeps more than a
//! lock key (a semaphore's permits, a read-write lock's readers, an election's record) keeps this library's own
//! layout; and where the other library's waiters must be told of a release (python-redis-lock's signal list,
//! Spring's `PUB_SUB` channel, Redisson's channel), only the plain lock's release tells them, so the primitives
//! whose release is another script refuse such a layout. Each refusal is
//! [`LockError::InvalidArgument`](crate::LockError::InvalidArgument) naming the
//! primitive, before any I/O.
//!
//! | primitive | native | plain, pottery, shedlock, prefixed, spring without `PUB_SUB` | python_redis_lock, spring with `PUB_SUB`, redisson |
//! |---|---|---|---|
//! | [`Lock::acquire`](crate::Lock::acquire) and its kin | yes | yes | yes |
//! | fair lock ([`LockOptions::with_fair_queue`](crate::LockOptions::with_fair_queue)) | yes | yes | refused |
//! | [`Lock::acquire_all`](crate::Lock::acquire_all) (a multi-lock) | yes | yes | refused |
//! | [`JobLock`](crate::JobLock) | yes | yes | refused |
//! | [`Semaphore`](crate::Semaphore), [`RwLock`](crate::RwLock), [`Election`](crate::Election) | yes | refused | refused |
//!
//! //! Under every layout the lock keeps this library's rules: a fresh token per acquisition, compare-and-delete and
//! compare-and-extend, a TTL on every grant, validity from before the request; whatever sits at the lock key (the
//! other library's token, or a key of another type) holds the lock. Fencing tokens come from a counter beside the
//! lock key that only this library's acquisitions advance (Redisson's `RFencedLock` shares it: see
//! [`KeyLayout::redisson`]); a resource fenced by our tokens does not fence out another library's unfenced writes.
//!
//! The keys beside the lock key (the fencing counter, the release channel and mark, a fair queue's) share its Redis
//! Cluster slot: they are named after the lock key's own hash tag when it has one, else after `{<lock key>}`. A raw
//! name that has no hash tag but contains `}` has none to share; on Cluster such a lock fails with
//! [`LockError::CrossSlot`](crate::LockError::CrossSlot).
//!
//! ```
//! use lock_core::{KeyLayout, Lock, LockOptions, MemoryStore};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! // The same lock a Python service takes with `redis.lock("invoice-7", timeout=10)`.
//! let lock = Lock::new(MemoryStore::new()).with_layout(KeyLayout::plain());
//! let guard = lock.acquire("invoice-7", &LockOptions::new(Duration::from_secs(10))).await?;
//! assert_eq!(guard.keys().lock(), "invoice-7");
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

/// Where a lock's keys live (see the [module docs](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyLayout {
    pub(crate) kind: LayoutKind,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum LayoutKind {
    /// `prefix{escaped name}`.
    #[default]
    Native,
    /// The raw name after a fixed prefix, and what a peer's waiters need from our release.
    Raw(Arc<Raw>),
    /// Redisson's hash.
    Redisson,
}

/// A layout whose lock key is the raw name after a fixed prefix (the string family of locks: `SET NX PX`, a random
/// token, compare-and-delete).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Raw {
    /// Prepended to the name to make the lock key.
    pub(crate) prefix: String,
    /// python-redis-lock's signal list: prepended to the name (`lock-signal:`).
    pub(crate) signal: Option<String>,
    /// Spring's pub/sub channel: prepended to the lock key (`<registryKey>-channel:`); the message is the lock key.
    pub(crate) channel: Option<String>,
    /// How often our waiters look again when the peer's releases reach them through nothing they can listen to.
    pub(crate) poll: Option<Duration>,
}

/// What a release under a peer's layout does besides deleting the key, and how our waiters learn of the peer's
/// releases (see [`LockKeys`](crate::LockKeys)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    /// A list to signal (`DEL`, `LPUSH 1`, `PEXPIRE 1000`), as python-redis-lock's release does.
    pub(crate) signal: Option<String>,
    /// The message our release publishes on the channel instead of ours, every time (the peer's waiters leave no
    /// mark for us to find).
    pub(crate) message: Option<String>,
    /// Whether the peer's releases are published where our waiters listen.
    pub(crate) heard: bool,
    /// The longest our waiters sleep between tries.
    pub(crate) poll: Option<Duration>,
    /// Whether the fencing counter is the peer's own, which its clients count from 1: ours never let it expire
    /// (WIRE.md 5.5).
    pub(crate) owns_counter: bool,
}

/// python-redis-lock's signal lists: `lock-signal:<name>`, which our release under its layout writes.
pub(crate) const PYTHON_REDIS_LOCK_SIGNAL: &str = "lock-signal:";

/// Redisson's fencing counters, `redisson_lock_token:{<name>}` (see [`redisson_prefix_name`]), which our acquire
/// under its layout increments; [`REDISSON_TOKEN`] is what Redisson's name rule prefixes.
pub(crate) const REDISSON_TOKEN_KEYS: &str = "redisson_lock_token:";
pub(crate) const REDISSON_TOKEN: &str = "redisson_lock_token";

/// How often a waiter looks again under python-redis-lock's layout: its releases signal a list, which only a
/// blocking pop (a connection of its own per waiter) could wait on. Well within the 50 ms a hand-off may take.
const LIST_SIGNAL_POLL: Duration = Duration::from_millis(10);

impl KeyLayout {
    /// This library's own layout (the default): `prefix{name}`, every key under the name's hash tag.
    pub fn native() -> Self {
        KeyLayout { kind: LayoutKind::Native }
    }

    /// The raw name is the lock key: redis-py's `Lock`, node-redlock (4 and 5, and `@sesamecare-oss/redlock`),
    /// go-redsync, bsm/redislock. None of them announces a release, so our waiters poll on their backoff.
    pub fn plain() -> Self {
        Self::prefixed("")
    }

    /// The raw name after `prefix` is the lock key (a peer this crate has no constructor for).
    pub fn prefixed(prefix: impl Into<String>) -> Self {
        Self::raw(Raw { prefix: prefix.into(), signal: None, channel: None, poll: None })
    }

    /// python-redis-lock's: `lock:<name>`. Our release also signals its list `lock-signal:<name>` as its own release
    /// does (`DEL`, `LPUSH 1`, `PEXPIRE 1000`), so its waiters, which block on that list (for ever with its default
    /// `expire=None`), wake at once; our waiters look again every 10 ms. Its default holders have no expiry: a
    /// crashed one blocks everyone (`lockctl` flags such keys).
    pub fn python_redis_lock() -> Self {
        Self::raw(Raw {
            prefix: "lock:".to_owned(),
            signal: Some(PYTHON_REDIS_LOCK_SIGNAL.to_owned()),
            channel: None,
            poll: Some(LIST_SIGNAL_POLL),
        })
    }

    /// pottery's `Redlock`: `redlock:<name>` (on several masters, with [`Lock::redlock`](crate::Lock::redlock) over
    /// the same ones: both take a majority, `⌊N/2⌋ + 1`).
    pub fn pottery() -> Self {
        Self::prefixed("redlock:")
    }

    /// Spring Integration's `RedisLockRegistry` with `registry_key`: `<registry_key>:<name>`. In its `PUB_SUB` mode
    /// (`pub_sub`) its waiters listen on `<registry_key>-channel:<lock key>` for the lock key as message: our release
    /// publishes it there, and our waiters hear its releases there; in its default `SPIN_LOCK` mode nobody announces.
    /// Its value is one id per registry, not per acquisition: its holders in one JVM share it.
    pub fn spring(registry_key: &str, pub_sub: bool) -> Self {
        Self::raw(Raw {
            prefix: format!("{registry_key}:"),
            signal: None,
            channel: pub_sub.then(|| format!("{registry_key}-channel:")),
            poll: None,
        })
    }

    /// ShedLock's Redis provider in environment `env` (its default is `default`): `job-lock:<env>:<name>`, for a
    /// [`JobLock`](crate::JobLock). ShedLock must run with `safeUpdate=true`: its default unlock is a blind `DEL`
    /// (or `SET XX`) that deletes whatever holds the key, ours included.
    pub fn shedlock(env: &str) -> Self {
        Self::prefixed(format!("job-lock:{env}:"))
    }

    /// Redisson's `RLock` and `RFencedLock`: the hash `<name>` whose field `<token>:1` holds the hold count (always
    /// 1 for ours: this library does not re-enter), with the lease as its TTL. Our release publishes `0` on
    /// `redisson_lock__channel:{<name>}` (Redisson's name rule: no braces added when the name contains `{`), where
    /// Redisson's waiters listen, and our waiters hear its releases there. Fencing tokens come from
    /// `redisson_lock_token:{<name>}`, the counter `RFencedLock` increments, so its tokens and ours are one
    /// increasing sequence (Redisson also bumps it on re-entry; after a restart without persistence, Redisson's
    /// next token starts again at 1 where ours start above the server's clock in µs). One instance, and a lock of one
    /// resource only: not a fair lock, not a multi-lock, and tokens drawn with the grant.
    pub fn redisson() -> Self {
        KeyLayout { kind: LayoutKind::Redisson }
    }

    fn raw(raw: Raw) -> Self {
        KeyLayout { kind: LayoutKind::Raw(Arc::new(raw)) }
    }

    /// Whether this is the native layout.
    pub fn is_native(&self) -> bool {
        self.kind == LayoutKind::Native
    }
}

/// Redisson's `prefixName(prefix, name)`: `prefix:name` when the name contains `{` anywhere, else
/// `prefix:{name}` (`RedissonObject.prefixName`, Redisson 3.52 and 4.x).
pub(crate) fn redisson_prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The hash tag Redis Cluster hashes `key` by: the text between its first `{` and the first `}` after it, when
/// that is not empty (the Cluster specification).
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = key.get(open + 1..)?;
    let close = rest.find('}')?;
    (close > 0).then(|| rest.get(..close)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tags_follow_the_cluster_rule() {
        assert_eq!(hash_tag("a{b}c"), Some("b"));
        assert_eq!(hash_tag("{}x{y}"), None, "an empty first tag means the whole key");
        assert_eq!(hash_tag("x{"), None);
        assert_eq!(hash_tag("}y{z}"), Some("z"));
        assert_eq!(hash_tag("plain"), None);
    }

    #[test]
    fn redisson_names_follow_its_rule() {
        assert_eq!(redisson_prefix_name("redisson_lock__channel", "orders"), "redisson_lock__channel:{orders}");
        assert_eq!(redisson_prefix_name("redisson_lock__channel", "a{b}"), "redisson_lock__channel:a{b}");
        assert_eq!(redisson_prefix_name("redisson_lock_token", "}y"), "redisson_lock_token:{}y}");
    }
}
