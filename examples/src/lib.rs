//! Examples live in `examples/examples/`; this library holds what they share: [`Backend`], the choice of server.
//!
//! It also compiles the workspace README's examples as doc tests, so they cannot rot.

pub mod fenced_sql;
pub mod rustis_store;
pub mod with_python;

use std::sync::Arc;

use lock_core::{DistributedLock, Lock, MemoryStore};
use lock_redis_rs::RedisStore;
use lock_testkit::RedisServer;

/// Where an example's locks live: `REDIS_URL` when set; else a throwaway local `redis-server` when one is
/// installed (kept running as long as this value lives); else the in-memory backend. Built with `--features etcd`,
/// [`distributed_lock`](Self::distributed_lock) takes etcd at `ETCD_ENDPOINTS` (comma-separated) first.
pub struct Backend {
    /// `ETCD_ENDPOINTS`, when set and this build has etcd.
    etcd: Option<Vec<String>>,
    url: Option<String>,
    memory: Lock,
    description: String,
    _server: Option<RedisServer>,
}

impl Backend {
    /// Picks the backend as the type docs say (starting a `redis-server` when it picks one).
    pub fn choose() -> Self {
        let mut chosen = Self::choose_redis();
        match std::env::var("ETCD_ENDPOINTS") {
            Ok(list) if cfg!(feature = "etcd") => {
                chosen.description = format!("etcd at {list} (from ETCD_ENDPOINTS)");
                chosen.etcd = Some(list.split(',').map(|e| e.trim().to_owned()).collect());
            }
            Ok(_) => chosen.description.push_str(" (ETCD_ENDPOINTS is set: build with --features etcd to use it)"),
            Err(_) => {}
        }
        chosen
    }

    fn choose_redis() -> Self {
        let memory = Lock::new(MemoryStore::new());
        let in_memory = |why: String| Backend {
            etcd: None,
            url: None,
            memory: memory.clone(),
            description: format!("the in-memory backend ({why}; set REDIS_URL to use a Redis server)"),
            _server: None,
        };
        if let Ok(url) = std::env::var("REDIS_URL") {
            let description = format!("Redis at {url} (from REDIS_URL)");
            return Backend { etcd: None, url: Some(url), memory, description, _server: None };
        }
        if lock_testkit::redis_server_binary().is_none() {
            return in_memory("no redis-server is installed".to_owned());
        }
        match RedisServer::start() {
            Ok(server) => Backend {
                etcd: None,
                url: Some(server.url()),
                description: format!("a throwaway redis-server at {} (set REDIS_URL to use yours)", server.url()),
                memory,
                _server: Some(server),
            },
            Err(err) => in_memory(format!("redis-server did not start: {err}")),
        }
    }

    /// What was picked, for the example to print.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// A lock on the picked backend: each call against Redis is a client of its own (as a separate process would
    /// have); in memory, every call shares one store.
    ///
    /// # Errors
    /// When the Redis server cannot be reached.
    pub async fn lock(&self) -> lock_core::Result<Lock> {
        match &self.url {
            Some(url) => Ok(Lock::new(RedisStore::connect(url).await?)),
            None => Ok(self.memory.clone()),
        }
    }

    /// A lock behind the trait a framework holds: etcd when picked (see the type's docs), else [`lock`](Self::lock)'s.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub async fn distributed_lock(&self) -> lock_core::Result<Arc<dyn DistributedLock>> {
        #[cfg(feature = "etcd")]
        if let Some(endpoints) = &self.etcd {
            return Ok(Arc::new(lock_etcd::connect(endpoints).await?));
        }
        Ok(Arc::new(self.lock().await?))
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may carry a password.
        let kind = match (&self.url, &self._server) {
            _ if self.etcd.is_some() => "ETCD_ENDPOINTS",
            (None, _) => "memory",
            (Some(_), Some(_)) => "throwaway redis-server",
            (Some(_), None) => "REDIS_URL",
        };
        f.debug_struct("Backend").field("kind", &kind).finish()
    }
}

/// The workspace README's examples.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;
