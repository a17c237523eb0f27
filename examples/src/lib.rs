//! Examples live in `examples/examples/`; this library holds what they share: [`Backend`], the choice of server.
//!
//! It also compiles the workspace README's examples as doc tests, so they cannot rot.

pub mod fenced_sql;
pub mod rustis_store;
pub mod with_python;

use lock_core::{Lock, MemoryStore};
use lock_redis_rs::RedisStore;
use lock_testkit::RedisServer;

/// Where an example's locks live: `REDIS_URL` when set; else a throwaway local `redis-server` when one is
/// installed (kept running as long as this value lives); else the in-memory backend.
pub struct Backend {
    url: Option<String>,
    memory: Lock,
    description: String,
    _server: Option<RedisServer>,
}

impl Backend {
    /// Picks the backend as the type docs say (starting a `redis-server` when it picks one).
    pub fn choose() -> Self {
        let memory = Lock::new(MemoryStore::new());
        let in_memory = |why: String| Backend {
            url: None,
            memory: memory.clone(),
            description: format!("the in-memory backend ({why}; set REDIS_URL to use a Redis server)"),
            _server: None,
        };
        if let Ok(url) = std::env::var("REDIS_URL") {
            let description = format!("Redis at {url} (from REDIS_URL)");
            return Backend { url: Some(url), memory, description, _server: None };
        }
        if lock_testkit::redis_server_binary().is_none() {
            return in_memory("no redis-server is installed".to_owned());
        }
        match RedisServer::start() {
            Ok(server) => Backend {
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
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may carry a password.
        let kind = match (&self.url, &self._server) {
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
