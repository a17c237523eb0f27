//! The fred floor: the floor's lock cycle (`SET key token NX PX ttl`, then the compare-and-delete script by
//! `EVALSHA`) as bare fred commands, on a fred pool configured as `lock_fred::FredStore::connect` configures its
//! own (one client, the same command timeout). Not a target: it tells how much of the fred backend's gap to the
//! floor is fred's own cost, which no lock library on fred can avoid, and how much is ours.

use anyhow::Context as _;
use lock_fred::fred::clients::Pool;
use lock_fred::fred::interfaces::{ClientLike as _, KeysInterface as _, LuaInterface as _};
use lock_fred::fred::types::config::Config;
use lock_fred::fred::types::{Builder, Expiration, SetOptions, Value};

use crate::floor::FloorHeld;

/// A fred pool of the store's default size and the SHA-1 of the floor's release script.
#[derive(Clone)]
pub(crate) struct FredFloor {
    pool: Pool,
    release_sha: String,
    ttl_ms: i64,
}

impl FredFloor {
    pub(crate) async fn connect(url: &str, ttl: std::time::Duration) -> anyhow::Result<Self> {
        let config = Config::from_url(url).context("fred URL")?;
        let mut builder = Builder::from_config(config);
        builder.with_performance_config(|p| p.default_command_timeout = lock_fred::DEFAULT_COMMAND_TIMEOUT);
        let pool = builder.build_pool(lock_fred::DEFAULT_POOL_SIZE).context("fred pool")?;
        pool.init().await.context("connecting fred")?;
        let release_sha: String = pool.next().script_load(crate::floor::RELEASE_BODY).await.context("SCRIPT LOAD")?;
        let ttl_ms = i64::try_from(ttl.as_millis()).context("ttl too large")?;
        Ok(FredFloor { pool, release_sha, ttl_ms })
    }

    pub(crate) async fn try_lock(&self, key: &str) -> anyhow::Result<Option<FloorHeld>> {
        let token = crate::floor::new_token();
        let reply: Value = self
            .pool
            .next()
            .set(key, token.as_str(), Some(Expiration::PX(self.ttl_ms)), Some(SetOptions::NX), false)
            .await
            .context("SET NX PX")?;
        Ok((!reply.is_null()).then(|| FloorHeld::new(key, token)))
    }

    pub(crate) async fn unlock(&self, held: FloorHeld) -> anyhow::Result<bool> {
        let (key, token) = held.parts();
        let deleted: i64 =
            self.pool.next().evalsha(self.release_sha.as_str(), key, token).await.context("release script")?;
        Ok(deleted == 1)
    }
}
