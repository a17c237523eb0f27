//! The mutex's operations as calls on a [`ScriptStore`]: every Redis backend's [`LockStore`], written once.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{LockError, Result};
use crate::resource::LockKeys;
use crate::seam::notify::ReleaseHub;
use crate::seam::scripts;
use crate::seam::store::{
    AcquireAllReply, AcquireAllRequest, AcquireReply, AcquireRequest, ExtendReply, LockStore, ReleaseOutcome,
};
use crate::seam::transport::{Call, Ran, Reply, ScriptStore, Topology};
use crate::telemetry;
use crate::token::Token;

fn unexpected(what: &str, reply: &Reply) -> LockError {
    LockError::backend(format!("unexpected reply to the {what} call: {reply:?}"))
}

fn int(what: &str, reply: &Reply) -> Result<i64> {
    reply.as_int().ok_or_else(|| unexpected(what, reply))
}

/// Runs `call`, recording its latency (`lock_command_duration_seconds`) when the `metrics` feature is on.
async fn timed<S: ScriptStore + ?Sized>(store: &S, call: Call<'_>) -> Result<Ran> {
    if !telemetry::RECORDS {
        return store.run(call).await;
    }
    let operation = call.operation;
    let started = std::time::Instant::now();
    let ran = store.run(call).await;
    let outcome = ran.as_ref().map_or_else(LockError::kind, |_| "ok");
    telemetry::command(telemetry::backend_name::<S>(), operation, outcome, started.elapsed());
    ran
}

#[async_trait]
impl<S: ScriptStore + ?Sized> LockStore for S {
    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply> {
        let keys = request.keys;
        let mut ttl = itoa::Buffer::new();
        let ttl = ttl.format(scripts::ttl_millis(request.ttl));
        // A try that does not line its process up (see `AcquireRequest::waiting_as`) leaves out the waiting
        // processes' key and the origin, and a counter without expiry its expiry: a shorter request, and one a
        // server still takes from a client that has not authenticated yet (Redis refuses a request of more than ten
        // parts from such a client, rather than answer `NOAUTH`; a fenced try is ten).
        let (origin, lines_up) = (request.waiting_as.unwrap_or_default(), usize::from(request.waiting_as.is_some()));
        let (reply, acknowledged) = if request.fencing {
            let floor = request.fence_floor.map(|f| f.to_string()).unwrap_or_default();
            let all_keys = [keys.lock(), keys.fence(), keys.awaited(), keys.waiting()];
            let idle = keys.fence_idle();
            let all_args = [request.token.as_str(), ttl, "1", &floor, idle, origin];
            let sent = if lines_up == 1 { 6 } else { 4 + usize::from(!idle.is_empty()) };
            let (call_keys, args) = (&all_keys[..3 + lines_up], &all_args[..sent]);
            let call = Call::script("acquire", &scripts::ACQUIRE, call_keys, args).with_replicas(request.replicas);
            let ran = timed(self, call).await?;
            let ints = ran.reply.as_ints().ok_or_else(|| unexpected("acquire", &ran.reply))?;
            (scripts::parse_acquire(&ints, true)?, ran.replicas)
        } else {
            // Without fencing, the plain command a hand-written client would send (no Lua on the server); the
            // holder's TTL, and a key of a foreign type, only when it is taken.
            let call_keys = [keys.lock()];
            let args = [request.token.as_str(), "NX", "PX", ttl];
            let call = Call::plain("acquire", "SET", &call_keys, &args).with_replicas(request.replicas);
            let ran = timed(self, call).await?;
            match ran.reply {
                Reply::Nil => {
                    let all_keys = [keys.lock(), keys.awaited(), keys.waiting()];
                    let all_args = [origin];
                    let call =
                        Call::script("acquire", &scripts::HOLDER, &all_keys[..2 + lines_up], &all_args[..lines_up]);
                    let holder = timed(self, call).await?;
                    (scripts::parse_holder(int("holder", &holder.reply)?), None)
                }
                ref granted if granted.is_grant() => (AcquireReply::Acquired { fence: None }, ran.replicas),
                other => return Err(unexpected("acquire", &other)),
            }
        };
        if let (Some(ack), AcquireReply::Acquired { .. }) = (request.replicas, reply) {
            // A backend that ran no WAIT has no replicas to count.
            ack.check(acknowledged.unwrap_or(0))?;
        }
        Ok(reply)
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<ReleaseOutcome> {
        // Unless this process waits, or waited a short while ago, for the lock (then it is contended, and its
        // waiters' mark is most likely there), first the release of an uncontended lock, without what a wake-up
        // needs: when a waiter elsewhere left the mark, `UNLOCK` leaves the lock to `RELEASE`. Another library's
        // layout always takes `RELEASE`, which signals its waiters.
        let contended = || self.release_hub().is_some_and(|hub| hub.listens_on(keys.channel()));
        if keys.peer_release().is_none() && !contended() {
            let (call_keys, args) = ([keys.lock(), keys.awaited()], [token.as_str()]);
            let unlocked = timed(self, Call::script("unlock", &scripts::UNLOCK, &call_keys, &args)).await?;
            if let Some(outcome) = scripts::parse_unlock(int("unlock", &unlocked.reply)?)? {
                return Ok(outcome);
            }
        }
        // The payload is our hub's origin, so our own subscriber ignores the echo of a release we woke locally. A
        // cluster store announces on its shard only (`SPUBLISH`; see the RELEASE script's docs).
        let origin = self.release_hub().map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if self.topology() == Topology::Cluster { "1" } else { "0" };
        let call = match keys.peer_release() {
            None => {
                let call_keys = [keys.lock(), keys.channel(), keys.awaited(), keys.waiting()];
                let args = [token.as_str(), origin, sharded];
                timed(self, Call::script("release", &scripts::RELEASE, &call_keys, &args)).await?
            }
            // Another library's layout: its signal list and its message, as data (see `KeyLayout`).
            Some(peer) => {
                let mut call_keys = vec![keys.lock(), keys.channel(), keys.awaited(), keys.waiting()];
                call_keys.extend(peer.signal.as_deref());
                let mut args = vec![token.as_str(), origin, sharded];
                args.extend(peer.message.as_deref());
                timed(self, Call::script("release", &scripts::RELEASE, &call_keys, &args)).await?
            }
        };
        scripts::parse_release(int("release", &call.reply)?)
    }

    async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> Result<ExtendReply> {
        let ttl = scripts::ttl_millis(ttl).to_string();
        let call_keys = [keys.lock()];
        let args = [token.as_str(), &ttl];
        let ran = timed(self, Call::script("extend", &scripts::EXTEND, &call_keys, &args)).await?;
        scripts::parse_extend(int("extend", &ran.reply)?)
    }

    async fn raise_fence(&self, keys: &LockKeys, token: &Token, at_least: u64) -> Result<bool> {
        let floor = at_least.to_string();
        let call_keys = [keys.lock(), keys.fence()];
        let args = [token.as_str(), &floor, keys.fence_idle()];
        let ran = timed(self, Call::script("raise-fence", &scripts::RAISE_FENCE, &call_keys, &args)).await?;
        scripts::parse_raise_fence(int("raise-fence", &ran.reply)?)
    }

    async fn acquire_all(&self, request: AcquireAllRequest<'_>) -> Result<AcquireAllReply> {
        let ttl = scripts::ttl_millis(request.ttl).to_string();
        let floor = request.fence_floor.map(|f| f.to_string()).unwrap_or_default();
        let mut call_keys: Vec<&str> = request.keys.iter().flat_map(|k| [k.lock(), k.fence()]).collect();
        call_keys.extend(request.keys.iter().map(LockKeys::awaited));
        if request.waiting_as.is_some() {
            call_keys.extend(request.keys.iter().map(LockKeys::waiting));
        }
        let fencing = if request.fencing { "1" } else { "0" };
        // Every resource's counter takes the first one's expiry: the keys come from one lock.
        let idle = request.keys.first().map(LockKeys::fence_idle).unwrap_or_default();
        let all_args = [request.token.as_str(), &ttl, fencing, &floor, idle, request.waiting_as.unwrap_or_default()];
        let sent = if request.waiting_as.is_some() { 6 } else { 4 + usize::from(!idle.is_empty()) };
        let args = &all_args[..sent];
        let call = Call::script("acquire", &scripts::MULTI_ACQUIRE, &call_keys, args).with_replicas(request.replicas);
        let ran = timed(self, call).await?;
        let ints = ran.reply.as_ints().ok_or_else(|| unexpected("multi-acquire", &ran.reply))?;
        let n = request.keys.len();
        let reply = match ints.as_slice() {
            [1, fences @ ..] if request.fencing && fences.len() == n => {
                AcquireAllReply::Acquired { fences: fences.iter().map(|f| u64::try_from(*f).ok()).collect() }
            }
            [1] if !request.fencing => AcquireAllReply::Acquired { fences: vec![None; n] },
            [0, index, pttl] => AcquireAllReply::Held {
                index: usize::try_from(*index - 1)
                    .ok()
                    .filter(|i| *i < n)
                    .ok_or_else(|| unexpected("multi-acquire", &ran.reply))?,
                ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            },
            _ => return Err(unexpected("multi-acquire", &ran.reply)),
        };
        if let (Some(ack), AcquireAllReply::Acquired { .. }) = (request.replicas, &reply) {
            ack.check(ran.replicas.unwrap_or(0))?;
        }
        Ok(reply)
    }

    async fn release_all(&self, keys: &[LockKeys], token: &Token) -> Result<Vec<ReleaseOutcome>> {
        let origin = self.release_hub().map(|hub| hub.origin()).unwrap_or_default();
        let sharded = if self.topology() == Topology::Cluster { "1" } else { "0" };
        let call_keys = scripts::multi_release_keys(keys);
        let args = [token.as_str(), origin, sharded];
        let ran = timed(self, Call::script("release", &scripts::MULTI_RELEASE, &call_keys, &args)).await?;
        let ints = ran.reply.as_ints().filter(|i| i.len() == keys.len());
        ints.ok_or_else(|| unexpected("multi-release", &ran.reply))?.into_iter().map(scripts::parse_release).collect()
    }

    async fn extend_all(&self, keys: &[LockKeys], token: &Token, ttl: Duration) -> Result<Vec<ExtendReply>> {
        let ttl = scripts::ttl_millis(ttl).to_string();
        let call_keys: Vec<&str> = keys.iter().map(LockKeys::lock).collect();
        let args = [token.as_str(), &ttl];
        let ran = timed(self, Call::script("extend", &scripts::MULTI_EXTEND, &call_keys, &args)).await?;
        let ints = ran.reply.as_ints().filter(|i| i.len() == keys.len());
        ints.ok_or_else(|| unexpected("multi-extend", &ran.reply))?.into_iter().map(scripts::parse_extend).collect()
    }

    async fn call(&self, call: Call<'_>) -> Result<Ran> {
        timed(self, call).await
    }

    fn topology(&self) -> Topology {
        ScriptStore::topology(self)
    }

    fn deployment(&self) -> &'static str {
        ScriptStore::deployment(self)
    }

    fn server(&self) -> Option<&str> {
        ScriptStore::server(self)
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        ScriptStore::release_hub(self)
    }

    fn orders_commands(&self) -> bool {
        ScriptStore::orders_commands(self)
    }

    fn call_bound(&self) -> Option<std::time::Duration> {
        ScriptStore::call_bound(self)
    }
}
