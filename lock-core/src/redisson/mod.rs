//! The lock under Redisson's layout ([`KeyLayout::redisson`](crate::KeyLayout::redisson)): a hash whose field holds
//! the hold count, so that this library's locks and Redisson's `RLock`/`RFencedLock` on the same name exclude and
//! wake each other and draw fencing tokens from one counter. Only the calls differ from the lock's (its scripts
//! beside this file); waiting, validity, renewal, the lost signal and cancel safety are the engine's.

use std::time::Duration;

use async_trait::async_trait;

use crate::engine::primitive::{announcer, Ask, Grant, Kind, Primitive};
use crate::error::{LockError, Result};
use crate::resource::LockKeys;
use crate::resource::PerResource;
use crate::seam::scripts;
use crate::seam::store::{ExtendReply, LockStore, ReleaseOutcome};
use crate::seam::transport::{Call, Reply};
use crate::token::Token;

/// One acquisition of a lock under Redisson's layout.
#[derive(Debug)]
pub(crate) struct RedissonTarget {
    keys: [LockKeys; 1],
}

impl RedissonTarget {
    /// The lock `keys` (derived under [`KeyLayout::redisson`](crate::KeyLayout::redisson)).
    pub(crate) fn new(keys: LockKeys) -> Self {
        RedissonTarget { keys: [keys] }
    }

    /// Our hold's field: the token, then `:1` (Redisson's fields are `<client id>:<thread id>`).
    fn field(token: &Token) -> String {
        format!("{}:1", token.as_str())
    }

    async fn acquire_on(&self, store: &dyn LockStore, ask: Ask<'_>) -> Result<Grant> {
        let keys = &self.keys[0];
        let field = Self::field(ask.token);
        let ttl = scripts::ttl_millis(ask.ttl).to_string();
        let call_keys = [keys.lock(), keys.fence()];
        let args = [field.as_str(), &ttl, ask.fencing_flag()];
        let call = Call::script("acquire", &scripts::REDISSON_ACQUIRE, &call_keys, &args).with_replicas(ask.replicas);
        let ran = store.call(call).await?;
        let ints = ran.reply.as_ints().ok_or_else(|| unexpected(&ran.reply))?;
        let grant = crate::engine::primitive::grant(scripts::parse_acquire(&ints, ask.fencing)?);
        ask.check_replicas(&ran, &grant)?;
        Ok(grant)
    }

    async fn extend_on(&self, store: &dyn LockStore, token: &Token, ttl: Duration) -> Result<PerResource<ExtendReply>> {
        let keys = &self.keys[0];
        let field = Self::field(token);
        let ttl = scripts::ttl_millis(ttl).to_string();
        let (call_keys, args) = ([keys.lock()], [field.as_str(), &ttl]);
        let ran = store.call(Call::script("extend", &scripts::REDISSON_EXTEND, &call_keys, &args)).await?;
        Ok(smallvec::smallvec![scripts::parse_extend(ran.reply.as_int().ok_or_else(|| unexpected(&ran.reply))?)?])
    }

    async fn release_on(&self, store: &dyn LockStore, token: &Token) -> Result<PerResource<ReleaseOutcome>> {
        let keys = &self.keys[0];
        let field = Self::field(token);
        let (_, sharded) = announcer(store);
        let (call_keys, args) = ([keys.lock(), keys.channel()], [field.as_str(), sharded]);
        let ran = store.call(Call::script("release", &scripts::REDISSON_RELEASE, &call_keys, &args)).await?;
        Ok(smallvec::smallvec![scripts::parse_release(ran.reply.as_int().ok_or_else(|| unexpected(&ran.reply))?)?])
    }
}

fn unexpected(reply: &Reply) -> LockError {
    LockError::backend(format!("unexpected reply to a Redisson-layout script: {reply:?}"))
}

#[async_trait]
impl Primitive for RedissonTarget {
    crate::engine::primitive::scripted_calls!(acquire, extend, release);

    fn kind(&self) -> Kind {
        Kind::Lock
    }

    fn resources(&self) -> &[LockKeys] {
        &self.keys
    }
}
