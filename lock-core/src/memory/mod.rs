//! An in-process backend: the same scripts as the Redis backends, run in this process over an in-memory keyspace,
//! for single-process programs and for framework authors' unit tests.

mod keyspace;
mod lua;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::error::{LockError, Result};
use crate::resource::LockKeys;
use crate::seam::notify::ReleaseHub;
use crate::seam::transport::{Call, Command, Ran, Reply, ScriptStore};
use crate::token::Token;

use lua::Engine;

/// A [`ScriptStore`] (and so a [`LockStore`](crate::LockStore)) in this process's memory.
///
/// It runs lock-core's Lua scripts, the very ones the Redis backends send, in an embedded Lua 5.1 (the version
/// Redis embeds) over an in-memory keyspace that answers the commands they call as Redis does. Every primitive
/// therefore behaves here as it does on a server, and a new one needs no in-memory twin.
///
/// Expiry uses the monotonic clock; `TIME` is the wall clock when the store was created plus monotonic time since,
/// so it never steps back. Fencing counters live as long as the store: they are meaningful only inside this
/// process, which is also the only place the lock is. Releases wake local waiters directly. A clone is the same
/// client; [`peer`](Self::peer) is another client of the same keyspace, as a second process would be.
///
/// ```
/// use lock_core::{Lock, LockOptions, MemoryStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let store = MemoryStore::new();
/// let lock = Lock::new(store.clone());
/// let g = lock.acquire("job", &LockOptions::new(Duration::from_secs(1))).await?;
/// assert_eq!(store.held_count(), 1);
/// g.release().await?;
/// assert_eq!(store.held_count(), 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    engine: Arc<Mutex<std::result::Result<Engine, String>>>,
    hub: Arc<ReleaseHub>,
    /// The hubs of every client of this keyspace (this one and its peers): each published message reaches all.
    hubs: Arc<Mutex<Vec<Weak<ReleaseHub>>>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

/// A script's or command's error reply, kept as the source of the [`LockError`] it maps to.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ServerError(String);

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        let engine = Engine::new().map_err(|err| format!("the in-memory store's Lua state failed to start: {err}"));
        let hub = ReleaseHub::local();
        let hubs = Arc::new(Mutex::new(vec![Arc::downgrade(&hub)]));
        MemoryStore { engine: Arc::new(Mutex::new(engine)), hub, hubs }
    }

    /// Another client of this store's keyspace, with release notifications of its own: what a second process
    /// connected to the same server is. A lock on it waits, lines up and is woken as another process's would be
    /// (a release that names one process wakes that one only), so what crosses processes can be tested without a
    /// server.
    ///
    /// ```
    /// use lock_core::{Lock, LockOptions, MemoryStore};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let here = MemoryStore::new();
    /// let (a, b) = (Lock::new(here.clone()), Lock::new(here.peer()));
    /// let opts = LockOptions::new(Duration::from_secs(5));
    /// let held = a.acquire("shared", &opts).await?;
    /// assert!(b.try_acquire("shared", &opts).await?.is_none(), "one keyspace, one holder");
    /// held.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn peer(&self) -> MemoryStore {
        let hub = ReleaseHub::local();
        let mut hubs = self.hubs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Peers come and go in tests: forget the hubs of those gone.
        hubs.retain(|hub| hub.strong_count() > 0);
        hubs.push(Arc::downgrade(&hub));
        MemoryStore { engine: self.engine.clone(), hub, hubs: self.hubs.clone() }
    }

    /// The hubs of every live client of the keyspace.
    fn live_hubs(&self) -> Vec<Arc<ReleaseHub>> {
        let hubs = self.hubs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        hubs.iter().filter_map(Weak::upgrade).collect()
    }

    fn engine(&self) -> MutexGuard<'_, std::result::Result<Engine, String>> {
        // Every call leaves the keyspace consistent (a script error aborts before its next write), so a poisoned
        // lock is still usable.
        self.engine.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn inspect<T>(&self, f: impl FnOnce(&mut keyspace::Keyspace, Instant) -> Option<T>) -> Option<T> {
        let engine = self.engine();
        let now = Instant::now();
        engine.as_ref().ok()?.with_keyspace(|keyspace| f(keyspace, now)).flatten()
    }

    /// Number of live keys with a time-to-live: the locks held, and whatever else a primitive keeps with one
    /// (for tests: "no keys left behind"). Fencing counters (keys ending `:fence`) are not counted: they outlive
    /// every hold by their idle expiry (a week by default, see
    /// [`Lock::with_fence_counter_expiry`](crate::Lock::with_fence_counter_expiry)), or never expire.
    pub fn held_count(&self) -> usize {
        self.inspect(|keyspace, now| Some(keyspace.expiring_count(now))).unwrap_or(0)
    }

    /// The owner token the lock on `keys` holds, if held (for tests: whose key was left behind).
    pub fn holder(&self, keys: &LockKeys) -> Option<Token> {
        self.inspect(|keyspace, now| {
            let value = keyspace.exec(&[b"GET".to_vec(), keys.lock().as_bytes().to_vec()], now).ok()?;
            Token::from_hex(value.as_text()?)
        })
    }

    /// Remaining TTL of the lock on `keys`, if held (for tests).
    pub fn ttl_of(&self, keys: &LockKeys) -> Option<Duration> {
        self.inspect(|keyspace, now| keyspace.ttl(keys.lock().as_bytes(), now))
    }

    /// Runs `call` like [`ScriptStore::run`], but hands back the messages its scripts published instead of
    /// delivering them to this store's hub: for a test store that routes them to clients of its own (with faults).
    ///
    /// # Errors
    /// As [`ScriptStore::run`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it runs to completion before its first await point.
    #[doc(hidden)]
    pub async fn run_observed(&self, call: Call<'_>) -> Result<(Ran, Vec<(String, Vec<u8>)>)> {
        let (ran, published) = self.execute(call);
        Ok((ran?, published))
    }

    /// One call under the engine's lock: its reply and the messages it published.
    fn execute(&self, call: Call<'_>) -> (Result<Ran>, Vec<(String, Vec<u8>)>) {
        let (reply, published) = {
            let mut engine = self.engine();
            // Read under the lock: calls run in the order they take it, and `TIME` (the fences' floor) must never go
            // back from one call to the next, as a server's clock read when the script runs does not. Read before
            // the lock, a call that waited for it ran with an older clock than the call before it (found by the
            // explorer once fencing counters could expire: an expired counter's fence came out below the last).
            let now = Instant::now();
            let engine = match engine.as_mut() {
                Ok(engine) => engine,
                Err(err) => return (Err(LockError::backend(ServerError(err.clone()))), Vec::new()),
            };
            let reply = match call.command {
                Command::Script(script) => engine.eval(script, call.keys, call.args, now),
                Command::Plain(name) => {
                    let args = std::iter::once(name)
                        .chain(call.keys.iter().copied())
                        .chain(call.args.iter().copied())
                        .map(|a| a.as_bytes().to_vec())
                        .collect::<Vec<_>>();
                    engine
                        .with_keyspace(|keyspace| keyspace.exec(&args, now))
                        .unwrap_or_else(|| Err("ERR the in-memory keyspace is missing".to_owned()))
                }
            };
            let published = engine.with_keyspace(keyspace::Keyspace::take_published).unwrap_or_default();
            (reply, published)
        };
        let ran = match reply {
            // An in-process store has no replicas: a grant that asked for some counts none.
            Ok(reply) => {
                let replicas = call.wait_after(&reply).map(|_| 0);
                Ok(Ran::acknowledged(reply, replicas))
            }
            // Its scripts' errors mean what a server's would (see `server_error`).
            Err(message) => {
                let kind = crate::seam::server_error::ServerErrorKind::of(&message);
                Err(kind.into_lock_error(&message.clone(), Some(&call), Box::new(ServerError(message))))
            }
        };
        (ran, published)
    }

    /// Runs one command on the keyspace now (for tests and monitors that look at a primitive's keys): its reply, or
    /// `None` when the command failed.
    #[doc(hidden)]
    pub fn command(&self, args: &[&str]) -> Option<Reply> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        self.inspect(|keyspace, now| keyspace.exec(&args, now).ok())
    }

    /// Steps the keyspace's `TIME` back by `by`, as a server whose clock was set back reports it (for tests of what
    /// the fencing counter's time floor assumes); expiries run on the monotonic clock and are unaffected.
    #[doc(hidden)]
    pub fn step_clock_back(&self, by: Duration) {
        if let Ok(engine) = self.engine().as_ref() {
            engine.with_keyspace(|keyspace| keyspace.step_clock_back(by));
        }
    }
}

#[async_trait]
impl ScriptStore for MemoryStore {
    async fn run(&self, call: Call<'_>) -> Result<Ran> {
        let (ran, published) = self.execute(call);
        // Outside the engine's lock: a woken waiter may call straight back in.
        if !published.is_empty() {
            let hubs = self.live_hubs();
            for (channel, payload) in published {
                for hub in &hubs {
                    hub.deliver(&channel, &payload);
                }
            }
        }
        ran
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        Some(&self.hub)
    }

    fn deployment(&self) -> &'static str {
        "memory"
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").field("held", &self.held_count()).finish()
    }
}
