//! The floor: a lock cycle as bare commands on redis-rs multiplexed connections, with no lock library around
//! them. `SET key token NX PX ttl` to acquire, a compare-and-delete script (sent by `EVALSHA`) to release. Over N
//! servers it is the same fan-out, sent to all N concurrently, held when a majority said OK.
//!
//! [`PubSubWaiter`] is the hand-written waiter of the contended scenarios: every waiter subscribes to the
//! lock's channel, the release script publishes on it, and every published release wakes every waiter, which
//! then retries `SET NX` (the thundering herd the lock library is meant to avoid).

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::{bail, Context as _};
use futures_util::future::join_all;
use futures_util::{FutureExt as _, StreamExt as _};
use redis::aio::{MultiplexedConnection, PubSubStream};
use redis::{AsyncConnectionConfig, Client, Script, Value};

/// Compare-and-delete: the release every lock library sends.
pub(crate) const RELEASE_BODY: &str = r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0";

/// [`RELEASE_BODY`], sent by `EVALSHA`.
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_BODY));

/// Compare-and-delete that also announces the release on `KEYS[2]` (for [`PubSubWaiter`]).
static RELEASE_PUBLISH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], '1')
  return 1
end
return 0",
    )
});

/// Compare-and-`PEXPIRE`: what a hand-written renewal sends.
static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0",
    )
});

/// lock-core's fenced acquire script, for the `floor-fenced` contender: the server-side cost of fencing, without
/// the library around it.
static ACQUIRE_FENCED: LazyLock<Script> = LazyLock::new(|| Script::new(lock_core::backend::scripts::ACQUIRE.body()));

/// Commands that only ever run inside the floor's scripts (see `CommandStats::sent`).
pub(crate) const NESTED: &[&str] = &["get", "del", "publish", "pexpire"];

/// How long a [`PubSubWaiter`] waits for a release message before it polls anyway (a message can be lost).
const PUBSUB_FALLBACK: Duration = Duration::from_millis(100);

/// The same connection timeouts as the redis-rs backend's defaults, so neither side has an advantage there.
fn connection_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(1)))
}

pub(crate) fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// One multiplexed connection per server; a single-server floor has one.
#[derive(Clone)]
pub(crate) struct Floor {
    clients: Vec<Client>,
    conns: Vec<MultiplexedConnection>,
    ttl_ms: u64,
    quorum: usize,
    /// Acquire with lock-core's fenced script instead of `SET NX PX` (a diagnostic: the cost of fencing itself).
    fenced: bool,
}

/// A lock the floor holds: its key and token.
pub(crate) struct FloorHeld {
    key: String,
    token: String,
}

impl FloorHeld {
    pub(crate) fn new(key: &str, token: String) -> Self {
        FloorHeld { key: key.to_owned(), token }
    }

    pub(crate) fn parts(&self) -> (&str, &str) {
        (&self.key, &self.token)
    }
}

impl Floor {
    pub(crate) async fn connect(urls: &[String], ttl: Duration) -> anyhow::Result<Self> {
        Self::connect_with(urls, ttl, &connection_config()).await
    }

    /// The floor without a response timeout (a diagnostic: redis-rs then arms no timer per command, as rslock's
    /// connection does; a hung server would hang every call).
    pub(crate) async fn connect_unbounded(urls: &[String], ttl: Duration) -> anyhow::Result<Self> {
        let config = AsyncConnectionConfig::new().set_connection_timeout(Some(Duration::from_secs(1)));
        Self::connect_with(urls, ttl, &config.set_response_timeout(None)).await
    }

    async fn connect_with(urls: &[String], ttl: Duration, config: &AsyncConnectionConfig) -> anyhow::Result<Self> {
        let mut clients = Vec::new();
        let mut conns = Vec::new();
        for url in urls {
            let client = Client::open(url.as_str()).with_context(|| format!("bad URL {url}"))?;
            let conn = client
                .get_multiplexed_async_connection_with_config(config)
                .await
                .with_context(|| format!("connecting to {url}"))?;
            clients.push(client);
            conns.push(conn);
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).context("ttl too large")?;
        Ok(Floor { quorum: conns.len() / 2 + 1, clients, conns, ttl_ms, fenced: false })
    }

    /// This floor, acquiring with lock-core's fenced acquire script (the reply's fence is read and dropped).
    pub(crate) fn fenced(mut self) -> Self {
        self.fenced = true;
        self
    }

    /// `SET key token NX PX ttl` on every server at once; `None` when fewer than a majority granted (anything
    /// granted is released again).
    pub(crate) async fn try_lock(&self, key: &str) -> anyhow::Result<Option<FloorHeld>> {
        let token = new_token();
        let fence_key = format!("{key}:fence");
        let sets = self.conns.iter().map(|conn| {
            let mut conn = conn.clone();
            let cmd = set_nx(key, &token, self.ttl_ms);
            let mut fenced = ACQUIRE_FENCED.key(key);
            fenced.key(&fence_key).arg(&token).arg(self.ttl_ms).arg("1");
            let fenced_mode = self.fenced;
            async move {
                if fenced_mode {
                    let reply: Vec<i64> = fenced.invoke_async(&mut conn).await?;
                    Ok(reply.first() == Some(&1))
                } else {
                    Ok(matches!(cmd.query_async::<Value>(&mut conn).await?, Value::Okay))
                }
            }
        });
        let mut granted = 0;
        for reply in join_all(sets).await {
            let reply: redis::RedisResult<bool> = reply;
            if reply.context("acquire")? {
                granted += 1;
            }
        }
        let held = FloorHeld { key: key.to_owned(), token };
        if granted >= self.quorum {
            return Ok(Some(held));
        }
        if granted > 0 {
            self.unlock(held).await?;
        }
        Ok(None)
    }

    /// The compare-and-delete script on every server at once; whether a majority deleted our key.
    pub(crate) async fn unlock(&self, held: FloorHeld) -> anyhow::Result<bool> {
        let dels = self.conns.iter().map(|conn| {
            let mut conn = conn.clone();
            let mut invocation = RELEASE.key(&held.key);
            invocation.arg(&held.token);
            async move { invocation.invoke_async::<i64>(&mut conn).await }
        });
        let mut deleted = 0;
        for reply in join_all(dels).await {
            if reply.context("release script")? == 1 {
                deleted += 1;
            }
        }
        Ok(deleted >= self.quorum)
    }

    /// The compare-and-`PEXPIRE` script on the first server: whether the key was still ours.
    pub(crate) async fn extend(&self, held: &FloorHeld) -> anyhow::Result<bool> {
        let mut conn = self.conns.first().context("a floor without servers")?.clone();
        let mut invocation = EXTEND.key(&held.key);
        invocation.arg(&held.token).arg(self.ttl_ms);
        Ok(invocation.invoke_async::<i64>(&mut conn).await.context("extend script")? == 1)
    }

    /// A waiter with its own subscription to `channel` (single-server floors only).
    pub(crate) async fn pubsub_waiter(&self, channel: &str) -> anyhow::Result<PubSubWaiter> {
        let (Some(client), Some(conn)) = (self.clients.first(), self.conns.first()) else {
            bail!("a floor without servers");
        };
        let mut pubsub = client.get_async_pubsub().await.context("opening a pub/sub connection")?;
        pubsub.subscribe(channel).await.context("SUBSCRIBE")?;
        Ok(PubSubWaiter {
            conn: conn.clone(),
            messages: pubsub.into_on_message(),
            channel: channel.to_owned(),
            ttl_ms: self.ttl_ms,
        })
    }
}

fn set_nx(key: &str, token: &str, ttl_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
    cmd
}

/// A hand-written pub/sub waiter: `SET NX`; when held, sleep until any release message (or a fallback poll), and
/// try again.
pub(crate) struct PubSubWaiter {
    conn: MultiplexedConnection,
    messages: PubSubStream,
    channel: String,
    ttl_ms: u64,
}

impl PubSubWaiter {
    pub(crate) async fn acquire(&mut self, key: &str) -> anyhow::Result<FloorHeld> {
        loop {
            // Messages that arrived before this try are answered by the try itself.
            while let Some(Some(_)) = self.messages.next().now_or_never() {}
            let token = new_token();
            let reply: Value =
                set_nx(key, &token, self.ttl_ms).query_async(&mut self.conn).await.context("SET NX PX")?;
            if matches!(reply, Value::Okay) {
                return Ok(FloorHeld { key: key.to_owned(), token });
            }
            // Woken by any release message, or by the fallback timeout.
            if let Ok(None) = tokio::time::timeout(PUBSUB_FALLBACK, self.messages.next()).await {
                bail!("pub/sub connection closed");
            }
        }
    }

    pub(crate) async fn release(&mut self, held: FloorHeld) -> anyhow::Result<bool> {
        let mut invocation = RELEASE_PUBLISH.key(&held.key);
        invocation.key(&self.channel).arg(&held.token);
        Ok(invocation.invoke_async::<i64>(&mut self.conn).await.context("release script")? == 1)
    }
}
