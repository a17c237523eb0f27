//! The Lua scripts every Redis backend runs, and the meaning of their replies: one copy for all clients.
//!
//! Redis 7.0 has no compare-and-delete command, so release and extend are scripts; acquire is a script so that
//! setting the lock and advancing the fencing counter are one atomic step and one round trip. Every key a script
//! touches is passed in `KEYS[]` (all share the `{resource}` hash tag, see [`LockKeys`](crate::LockKeys)), so the
//! scripts run unchanged on Redis Cluster.
//!
//! Backends send them by `EVALSHA` and, when the server answers `NOSCRIPT` (after a restart, a failover or
//! `SCRIPT FLUSH`), send the body once with `EVAL`, which caches it again. (`SCRIPT LOAD` + `EVALSHA` can lose a race
//! with a second flush; `EVAL` cannot.)

use std::time::Duration;

use crate::error::{LockError, Result};
use crate::seam::store::{AcquireReply, ExtendReply, ReleaseOutcome};
pub use crate::seam::transport::Script;

/// What every script that advances a fencing counter starts with: `read_counter(key)` reads the counter and checks
/// it as `INCRBY` would (returning `nil, error` for a foreign value), and `advance(key, current, floor)` sets it to
/// `max(current + 1, floor)` and returns it. The one copy of the fencing rule (see [`ACQUIRE`]).
macro_rules! fencing_prelude {
    () => {
        include_str!("fencing.lua")
    };
}

/// What every script whose try can find the lock held starts with: `awaited(key, pttl)` leaves the mark that makes
/// the release announce itself (see [`RELEASE`]). It lives for the holder's PTTL and one second more: a waiter
/// tries again by the holder's PTTL at the latest (and marks the lock again if it is still held), so a mark never
/// runs out while someone waits for this holder. A key of another type at the mark's name is refused as `WRONGTYPE`
/// (`SET … GET`, Redis 6.2+, reads before it writes; `redis.REDIS_VERSION_NUM` exists from 7.0) rather than
/// overwritten.
macro_rules! awaited_prelude {
    () => {
        include_str!("awaited.lua")
    };
}

/// What a mutex's try that can find the lock held starts with (after [`awaited_prelude`]): `line_up(waiting, mark,
/// origin, pttl)` marks the lock as awaited and, when `origin` (the trying process's hub) is not empty, adds the
/// process to the lock's waiting processes (a sorted set, by arrival on the server's clock; a process already in it
/// keeps its place: a try of a process already in line costs one `ZSCORE`), whose TTL is set, to the mark's, when a
/// process joins (a process that joins later may so shorten it; waiters try again by the holder's PTTL anyway). A
/// release wakes the first of them only (see [`RELEASE`]). A key of another type at either name is refused as
/// `WRONGTYPE` before anything is written.
macro_rules! waiting_prelude {
    () => {
        include_str!("waiting.lua")
    };
}

/// What a script that wakes a waiting process starts with: `next_waiting(waiting, origin)`, see [`RELEASE`].
macro_rules! next_waiting_prelude {
    () => {
        include_str!("next_waiting.lua")
    };
}

/// What every script that reads a lock key of any holder starts with: `lock_value(key)` is the key's value (`false`
/// when absent), or `'type:<type>'` when the key holds another type (another library's lock, a Redisson hash say:
/// it holds the lock, and no token equals that value), or `nil` and the server's refusal (an ACL's).
macro_rules! lock_prelude {
    () => {
        include_str!("lock.lua")
    };
}

/// Acquire: `SET lock token NX PX ttl`; with fencing, advance the counter in the same step.
///
/// `KEYS[1]` lock key, `KEYS[2]` fence key, `KEYS[3]` the release mark, `KEYS[4]` the waiting processes;
/// `ARGV[1]` token, `ARGV[2]` TTL in ms, `ARGV[3]` `"1"` for fencing, `ARGV[4]` (decimal, may be empty) the
/// counter's floor in place of the server's clock (see
/// [`AcquireRequest::fence_floor`](crate::backend::AcquireRequest::fence_floor)), `ARGV[5]` (optional) how long
/// the counter may stay unused before it expires, in ms (WIRE.md 5.5; absent or empty: the counter keeps no
/// expiry), `ARGV[6]` (optional, with `KEYS[4]`) the trying process's origin, to be woken when the lock is released
/// (empty: the process cannot hear releases, and is not lined up). Reply: `{1, fence}` (acquired, fencing), `{1}` (acquired, no fencing), `{0, pttl}` (held; pttl < 0 when the
/// server reports none; the lock is marked as awaited and the process lined up, see `line_up`). A lock key of another
/// type (another library's lock) is held like any other; the fence, mark or waiting key of another type is refused
/// with `WRONGTYPE` before any write.
///
/// The fencing counter becomes `max(counter + 1, server time in µs)`. The time floor keeps tokens increasing
/// when a server restarts without persistence and the counter key is gone: the next token starts above every
/// token handed out before, as long as the server's clock does not step back and fewer than a million tokens per
/// second are issued for one resource. The counter key has no TTL (one small string per resource). Values stay
/// exact below 2^53 (Lua numbers are doubles); the time floor is about 1.8·10^15 (2^51) in 2026, which leaves
/// centuries of headroom.
///
/// Why this step and not a cheaper one (issue 21; server CPU per acquire + release cycle on one key, `redis-cli
/// --pipe`, 300 000 cycles, Redis 7.0.15, the release without `PUBLISH`): `SET NX PX` + compare-and-delete 3.0 µs;
/// this script 8.0–8.6 µs; the same script reading and writing the counter with one `SET … KEEPTTL GET` (Redis
/// 6.2+, with the undo a refused counter then needs) 7.9–8.4 µs, within the noise; `SET NX` + `INCR` with the clock
/// read only when `INCR` returns 1 5.6 µs; `MULTI`/`SET NX`/`INCR`/`EXEC` 3.7 µs. Lua costs about 2 µs per call
/// and 0.8 µs per `redis.call`, so only dropping the time floor from the common path (or Lua altogether) would pay
/// off, and that gives up what the floor is for: a counter restored from an older RDB snapshot, or promoted from
/// a lagging replica, would hand out the lost tokens again (with the floor, the next token is above them while the
/// clocks agree). Kept, at one more command than the minimum; with fencing off, acquire is the plain `SET NX PX`,
/// and so it is with [`Fencing::OnDemand`](crate::Fencing::OnDemand), which draws the token by [`FENCE`] only when
/// the holder asks: the issue's other candidate, and the one that makes fencing free for a holder that never uses
/// its token.
pub static ACQUIRE: Script = Script::new(
    "acquire",
    concat!(fencing_prelude!(), awaited_prelude!(), waiting_prelude!(), include_str!("mutex/acquire.lua")),
);

/// What holds the lock key, after a plain `SET key token NX PX ttl` (the acquire of a lock without fencing) found
/// it taken: the holder's remaining TTL (a key of another type, another library's lock, holds it too).
///
/// `KEYS[1]` lock key, `KEYS[2]` the release mark, `KEYS[3]` the waiting processes; `ARGV[1]` (optional) the
/// trying process's origin. Reply: the PTTL in ms (the lock is marked as awaited and the process lined up, as by
/// [`ACQUIRE`]); -1 for a key without expiry; -2 when the key is gone (it expired or was released between the `SET`
/// and this script: the lock is free, and [`parse_holder`] says "try again at once"). Backends acquiring without
/// fencing send `SET NX PX` first (one round trip, the same command a hand-written client would send) and this
/// script only when that failed, so an uncontended lock without fencing costs no Lua on the server.
pub static HOLDER: Script =
    Script::new("holder", concat!(awaited_prelude!(), waiting_prelude!(), include_str!("mutex/holder.lua")));

/// Release: delete the lock key only if it holds our token, and announce the release when someone may wait.
///
/// `KEYS[1]` lock key, `KEYS[2]` release channel, `KEYS[3]` the release mark, `KEYS[4]` the waiting processes;
/// `ARGV[1]` token, `ARGV[2]` the releasing store's origin, `ARGV[3]` `"1"` to announce with `SPUBLISH` (sharded
/// pub/sub, Redis 7.0+) instead of `PUBLISH`. Reply: `1` released, `0` absent, `-1` held by another token.
///
/// Under another library's [`KeyLayout`](crate::KeyLayout), what its waiters need, as data: `KEYS[5]` (optional) a
/// list their waiters block on, signalled as that library's release does (`DEL`, `LPUSH 1`, `PEXPIRE 1000`:
/// python-redis-lock); `ARGV[4]` (optional) the message their waiters listen for on the channel, published on every
/// release instead of ours (Spring's lock key). Without them (this library's layout) nothing changes.
///
/// **One process is woken, not all** (issue 19). A try that found the lock held lined its process up in the waiting
/// processes (`line_up` in [`ACQUIRE`] and [`HOLDER`]); the release takes the first of them (skipping itself: its
/// own waiters it wakes locally) and announces `<origin>><first>`, which only that process's hub acts on (it wakes
/// its longest-waiting waiter, or passes the wake-up on with [`PASS_ON`] when it has none left). With one waiter in
/// each of K processes, a release so costs one try instead of K. When nobody is lined up (the waiters could not
/// hear releases, or they wait through a script that does not line up: a fair try), the release announces
/// `<origin>` to every process as before. (A multi-resource try lines up in each resource's waiting processes, but
/// [`MULTI_RELEASE`] announces `<origin>` to all and leaves the lines as they are: a later single release may name
/// a process whose waiter left, which then passes the wake-up on.) While processes not woken remain lined up, the release leaves
/// the mark in place (with the set's TTL), so that the next release announces itself too.
///
/// A release announces itself only when it deletes the mark a try left that found this lock held (see
/// `awaited` in [`ACQUIRE`], [`HOLDER`], [`MULTI_ACQUIRE`] and [`FAIR_ACQUIRE`]): every waiter, in any process,
/// tried and failed after the previous release deleted the mark, so the mark is there whenever a waiter is.
/// An uncontended cycle therefore publishes nothing: measured with `redis-cli --pipe` (200 000 cycles, server CPU
/// from `INFO cpu`), a release with a `PUBLISH` nobody hears costs the server 0.6–0.8 µs more than one without,
/// a fifth of the plain `SET NX PX` + compare-and-delete cycle (3.0 µs).
///
/// On Redis Cluster a classic `PUBLISH` is broadcast over the cluster bus to every node, whether anyone listens or
/// not; `SPUBLISH` stays within the shard that owns the channel's slot (the lock's slot: the channel shares its hash
/// tag). Measured on a 3-primary 7.0 cluster: about 6 µs of server CPU per release summed over the nodes with
/// `PUBLISH`, 1–1.7 µs with `SPUBLISH`, and the `PUBLISH` cost grows with the number of nodes. Cluster stores
/// therefore announce with `SPUBLISH` and listen with `SSUBSCRIBE`; single servers keep `PUBLISH`.
pub static RELEASE: Script =
    Script::new("release", concat!(lock_prelude!(), next_waiting_prelude!(), include_str!("mutex/release.lua")));

/// Release when nobody waits: delete the lock key only if it holds our token and no waiter left the release mark.
///
/// `KEYS[1]` lock key, `KEYS[2]` the release mark; `ARGV[1]` token. Reply: `1` released, `0` absent, `-1` held by
/// another token (or a key of another type), `2` ours but the mark is there: nothing done, and the client releases
/// with [`RELEASE`], which wakes the waiters.
///
/// An uncontended release so costs the server what a hand-written compare-and-delete costs, plus one key and one
/// `EXISTS`: the four keys and three arguments [`RELEASE`] needs for the wake-up cost Redis 7.0 about a microsecond
/// even when the script never reads them (issue 58, target 2; `bench/server-cost/release_candidates.py`). A
/// contended release costs one round trip more, while the lock is still held: a call lost between the two (a
/// dropped future, a broken connection, a crash) leaves the lock held, as a release never sent does, and loses no
/// wake-up. A client that knows a waiter of its own waits sends [`RELEASE`] at once.
pub static UNLOCK: Script = Script::new("unlock", include_str!("mutex/unlock.lua"));

/// Pass on a wake-up: a process that a release (or another pass) woke, but that has no waiter left for the lock
/// (they gave up, were cancelled, or took the lock another way), leaves the line and wakes the next waiting process
/// instead, if the lock is still free. Also what a process runs when it stops listening on the lock's channel.
///
/// `KEYS[1]` lock key, `KEYS[2]` release channel, `KEYS[3]` the waiting processes, `KEYS[4]` (optional) an
/// election's promise (see [`ELECT`]): when it names the passing process it moves to the next one, with the time it
/// had left; `ARGV[1]` the passing process's origin, `ARGV[2]` `"1"` for `SPUBLISH`. Reply: `1` passed on, `0` the
/// lock is held (its release wakes the next one) or nobody else is lined up (then any waiters that could not line up
/// are told, as a release tells them). Each pass takes a process out of the set, so passes end.
pub static PASS_ON: Script =
    Script::new("pass-on", concat!(next_waiting_prelude!(), include_str!("mutex/pass_on.lua")));

/// Extend: set the lock key's TTL only if it holds our token (never recreates it).
///
/// `KEYS[1]` lock key; `ARGV[1]` token, `ARGV[2]` TTL in ms. Reply: `1` extended, `0` absent, `-1` held by
/// another token.
pub static EXTEND: Script = Script::new("extend", concat!(lock_prelude!(), include_str!("mutex/extend.lua")));

/// Raise the fencing counter to at least `ARGV[2]`, only while the lock key holds our token (Redlock).
///
/// `KEYS[1]` lock key, `KEYS[2]` fence key, `KEYS[3]` (an election's) the leader record; `ARGV[1]` token, `ARGV[2]`
/// the floor (decimal), `ARGV[3]` (optional) the counter's idle expiry in ms, set when it raises. Reply: `1` done, `0` not our lock. With a leader record that is this token's, its term
/// becomes the floor too: the term the leader was elected with is the highest over its quorum, and each instance's
/// record must name that one, or observers reading a quorum find records that disagree and see no leader.
pub static RAISE_FENCE: Script =
    Script::new("raise-fence", concat!(lock_prelude!(), include_str!("mutex/raise_fence.lua")));

/// Draw a fencing token for a lock already held ([`Fencing::OnDemand`](crate::Fencing::OnDemand)): advance the
/// counter as [`ACQUIRE`] does, only while the lock key holds our token.
///
/// `KEYS[1]` lock key, `KEYS[2]` fence key; `ARGV[1]` token, `ARGV[2]` (optional) the counter's idle expiry in ms
/// (as in [`ACQUIRE`]). Reply: the new counter value (≥ 1), `0` when the lock
/// key is gone, `-1` when it holds another token (or a value of another type). Errors with `WRONGTYPE` for a counter
/// of another type, before any write.
///
/// The same rule as a token drawn with the grant: the check and the increment are one step, holds of a resource
/// never overlap on the server, so a token drawn during a hold is above every token drawn during an earlier one
/// and below every token of a later one, and a holder whose lock is gone gets none. A draw whose reply was lost
/// and is asked again advances the counter twice: both values lie within the same hold, so the order still holds.
/// Server commands: `EVALSHA`, `GET` ×2, `TIME`, `INCRBY` (5, against the 4 a fenced `ACQUIRE` adds to a plain
/// `SET NX PX`).
pub static FENCE: Script =
    Script::new("fence", concat!(fencing_prelude!(), lock_prelude!(), include_str!("mutex/fence.lua")));

/// Multi-resource acquire: all of the locks or none, with a fencing token per resource (see
/// [`Lock::acquire_all`](crate::Lock::acquire_all)).
///
/// `KEYS` = lock₁, fence₁, lock₂, fence₂, …, then mark₁, mark₂, …, then (with `ARGV[6]`) the waiting processes₁,
/// ₂, … (the single lock's keys of each resource, so a multi-lock and a single lock on one resource exclude each
/// other; on Cluster all in one slot); `ARGV[1]` token, `ARGV[2]` TTL in ms, `ARGV[3]` `"1"` for fencing, `ARGV[4]`
/// (may be empty) the counters' floor in place of the server's clock, `ARGV[5]` (optional) the counters' idle expiry
/// in ms (as in [`ACQUIRE`]), `ARGV[6]` (optional) the trying process's origin. Reply: `{1, fence₁, …}` (acquired; no fences without fencing), `{0, i, pttl}` (resource `i`, 1-based,
/// is held by another token; its PTTL; that lock is marked as awaited and the process lined up on it, as by
/// [`ACQUIRE`]). Every key's type is checked before any write (one `GET` per key, which refuses
/// other types). Idempotent: a retry with the same token finds its own value, refreshes the TTL and replies the
/// fences the first call set (a counter that expired since is drawn anew, within the same hold). Server commands for
/// a free set of n resources with fencing: 4n + 2 (`EVALSHA`, `TIME`, and per resource `GET` ×2, `SET`, `INCRBY`),
/// and a `PEXPIRE` per resource with an idle expiry.
pub static MULTI_ACQUIRE: Script = Script::new(
    "multi-acquire",
    concat!(
        lock_prelude!(),
        fencing_prelude!(),
        awaited_prelude!(),
        waiting_prelude!(),
        include_str!("../../multi/acquire.lua")
    ),
);

/// Multi-resource release: compare-and-delete each lock key, and announce each release on its channel.
///
/// `KEYS` = lock₁, channel₁, lock₂, channel₂, …, then mark₁, mark₂, …; `ARGV` as [`RELEASE`]'s. Reply: one code
/// per resource, as [`RELEASE`]'s (`1` released, `0` absent, `-1` held by another token or a key of another type).
/// Each release announces
/// itself only when it deletes its mark, as [`RELEASE`]'s.
pub static MULTI_RELEASE: Script =
    Script::new("multi-release", concat!(lock_prelude!(), include_str!("../../multi/release.lua")));

/// [`MULTI_RELEASE`]'s `KEYS` for `keys`, in the order it reads them: lock₁, channel₁, …, then mark₁, ….
pub fn multi_release_keys(keys: &[crate::LockKeys]) -> Vec<&str> {
    let pairs = keys.iter().flat_map(|k| [k.lock(), k.channel()]);
    pairs.chain(keys.iter().map(crate::LockKeys::awaited)).collect()
}

/// Multi-resource extend, all or nothing: sets every lock key's TTL only if every one still holds our token.
///
/// `KEYS` = lock₁, lock₂, …; `ARGV` as [`EXTEND`]'s. Reply: one code per resource, as [`EXTEND`]'s (`1` ours, `0`
/// absent, `-1` held by another token or a key of another type); the TTLs were set only when every code is `1`.
pub static MULTI_EXTEND: Script =
    Script::new("multi-extend", concat!(lock_prelude!(), include_str!("../../multi/extend.lua")));

/// Job start (see [`JobLock`](crate::JobLock)): the mutex acquire of the job's lock key, plus the "last run"
/// record, on the server's clock.
///
/// `KEYS[1]` lock key, `KEYS[2]` fence key, `KEYS[3]` info hash, `KEYS[4]` (tick mode) the tick key; `ARGV[1]`
/// token, `ARGV[2]` `at_most_for` in ms (the lock's TTL), `ARGV[3]` `"1"` for fencing, `ARGV[4]` the holder label,
/// `ARGV[5]` `at_least_for` in ms, `ARGV[6]` (tick mode) the tick key's TTL in ms, `ARGV[7]` (optional) the counter's
/// idle expiry in ms (as in [`ACQUIRE`]).
/// Reply: `{1, fence or -1, started_ms}` (started; `started_ms` is the server's clock), `{0, pttl, holder}` (another
/// run holds the job; `holder` is its label, `false` when unknown), `{0, pttl, holder, 'tick'}` (this tick already
/// ran or runs; `pttl` is the tick key's). Every key's type is checked before any write. Idempotent: a retry with
/// the same token replies the first call's start.
///
/// The record is `{holder, token, started_ms, at_least_ms, finished_ms, outcome}`; it has no TTL (one small hash per
/// job, like the fencing counter), so the last run stays readable.
pub static JOB_START: Script =
    Script::new("job-start", concat!(lock_prelude!(), fencing_prelude!(), include_str!("../../job/start.lua")));

/// Job finish: owner-checked; keeps the lock until `at_least_for` after the start (on the server's clock), else
/// releases it, and records the outcome.
///
/// `KEYS[1]` lock key, `KEYS[2]` info hash, `KEYS[3]` release channel, `KEYS[4]` (tick mode) the tick key; `ARGV[1]`
/// token, `ARGV[2]` outcome (`finished`, `cancelled`, `lost`, or `given_back` for a start whose work never ran: its
/// reply was lost, came too late, or its caller was cancelled before it), `ARGV[3]` the releasing store's origin,
/// `ARGV[4]` `"1"` for `SPUBLISH`. Reply: `1` released, `2` kept until `at_least_for` has passed since the start, `0`
/// absent, `-1` held by another token (a run that overran: the next run's lock is never touched). The record is
/// updated only while it is this run's (same token), whatever the lock key holds. A give-back keeps nothing: the
/// lock is released at once (no `at_least_for`) and the tick, if this start claimed it, is forgotten, so the firing
/// is not burned by a run that never ran.
pub static JOB_FINISH: Script =
    Script::new("job-finish", concat!(lock_prelude!(), include_str!("../../job/finish.lua")));

/// Acquire under Redisson's layout ([`KeyLayout::redisson`](crate::KeyLayout::redisson)): the hash `KEYS[1]`, field
/// `ARGV[1]` → hold count, `PEXPIRE` the lease `ARGV[2]` ms, granted only when the key is absent (or our field is
/// there: a retry, the same grant with its lease from the retry); with fencing (`ARGV[3]` `"1"`) the token is
/// advanced in `KEYS[2]` as [`ACQUIRE`] does, the counter Redisson's `RFencedLock` increments. Reply: as
/// [`ACQUIRE`].
pub static REDISSON_ACQUIRE: Script =
    Script::new("redisson-acquire", concat!(fencing_prelude!(), include_str!("../../redisson/acquire.lua")));

/// Extend under Redisson's layout: `PEXPIRE KEYS[1] ARGV[2]` while its field `ARGV[1]` is there, as Redisson's
/// watchdog does. Reply: as [`EXTEND`].
pub static REDISSON_EXTEND: Script = Script::new("redisson-extend", include_str!("../../redisson/extend.lua"));

/// Release under Redisson's layout: deletes the hash `KEYS[1]` while its field `ARGV[1]` is there and publishes `0`
/// on `KEYS[2]` (`SPUBLISH` when `ARGV[2]` is `"1"`), as Redisson's unlock does. Reply: as [`RELEASE`].
pub static REDISSON_RELEASE: Script = Script::new("redisson-release", include_str!("../../redisson/release.lua"));

/// What both fair-lock scripts start with: `refused`, the reply to a read the server refused (a key of another
/// type gets our message; anything else, an ACL refusal say, goes back as it came); and `waiter_id`, the id an
/// announcement names a queued waiter by (the first 16 hex digits of the SHA-1 of its token: the token itself is
/// never published).
macro_rules! fair_prelude {
    () => {
        concat!(include_str!("fair.lua"), include_str!("waiter_id.lua"))
    };
}

/// Fair acquire (see [`LockOptions::with_fair_queue`](crate::LockOptions::with_fair_queue)): take the lock only
/// when it is free and nobody is queued ahead; otherwise, when waiting, hold a place in the queue.
///
/// `KEYS[1]` lock key, `KEYS[2]` fence key, `KEYS[3]` queue (zset: token → ticket, never re-scored), `KEYS[4]`
/// heartbeats (zset: token → expiry in server ms), `KEYS[5]` release channel, `KEYS[6]` the release mark (set
/// when the lock is held, as by [`ACQUIRE`], so a plain holder's release announces itself); `ARGV[1]` token, `ARGV[2]` TTL in
/// ms, `ARGV[3]` `"1"` for fencing, `ARGV[4]` (optional) the fencing floor, `ARGV[5]` waiter TTL in ms, `ARGV[6]`
/// `"1"` to take or keep a place (a waiting acquire; also its heartbeat), `"0"` for a try, `ARGV[7]` the caller's
/// origin, `ARGV[8]` `"1"` to announce with `SPUBLISH`, `ARGV[9]` how a release may grant the lock to this waiter
/// when it is the head (`"<lease ms> <1 to draw a fencing token>"`, noted in the grants hash when the place is
/// taken; `""`: never, only tell it, as for a read-write lock's writer), `ARGV[10]` the counter's idle expiry in ms (as
/// in [`ACQUIRE`]; empty: none), `ARGV[11…]` (waiting only) the tokens of the
/// caller's peers: other waiters of its process with the same waiter TTL, whose places this call renews too (one
/// heartbeat per process and resource), never re-creating a place that is gone. `KEYS[7]` the grants (hash: token
/// → `ARGV[9]`, see [`FAIR_RELEASE`]), `KEYS[8]` (optional) a read-write lock's readers (zset: token → expiry in
/// server ms): the lock is then also busy while a reader's expiry lies ahead (a [`RwLock`](crate::RwLock) writer;
/// see [`RW_READ`]).
///
/// Reply: `{1, fence}` / `{1}` acquired (as [`ACQUIRE`]); `{0, pttl, place, lost…}` not acquired: the holder's PTTL
/// (-2 when the lock is free but someone is queued ahead), our 0-based place in the queue (-1 for a try), and the
/// peers that had no place left (they take a new one with a try of their own). When the lock is free and its head is
/// one of the peers, the head is told again.
///
/// Steps, all on the server clock (`TIME`): (1) type checks, reads only; (2) waiters whose heartbeat expired are
/// removed from both sets, so a dead waiter costs at most its waiter TTL; when that leaves a free lock with a new
/// head, the head is told (`<origin> <token>` on the channel); (3) a retry of a grant whose reply was lost finds
/// its own token and gets the same grant (the counter has not moved while we held), its TTL set again from now (the
/// caller's validity runs from the retry); (4) a free lock goes to the
/// head of the queue, or to anyone when the queue is empty; (5) a waiter that did not get it takes a ticket once
/// (`max(now µs, last ticket + 1)`, so a clock step back never reorders the queue) and refreshes its heartbeat. The
/// sets and the grants expire with their last heartbeat, so nothing outlives the last waiter by more than its
/// waiter TTL.
pub static FAIR_ACQUIRE: Script = Script::new(
    "fair-acquire",
    concat!(
        lock_prelude!(),
        fair_prelude!(),
        fencing_prelude!(),
        awaited_prelude!(),
        include_str!("../../engine/fair/acquire.lua")
    ),
);

/// Fair release, and a waiter leaving the queue: delete the lock key only if it holds our token (a holder has no
/// place: the grant or the try that gave it the lock removed it), or else take our token out of the queue, and hand
/// a free lock to the live head of the queue (a release that grants overwrites its own token with the head's).
///
/// `KEYS[1]` lock key, `KEYS[2]` queue, `KEYS[3]` heartbeats, `KEYS[4]` release channel, `KEYS[5]` the release
/// mark, `KEYS[6]` fence key, `KEYS[7]` grants (see [`FAIR_ACQUIRE`]); `ARGV[1]` token, `ARGV[2]` origin, `ARGV[3]`
/// `"1"` to announce with `SPUBLISH`, `ARGV[4]` (optional) the counter's idle expiry in ms for a grant's fence (as in
/// [`ACQUIRE`]). Reply: as [`RELEASE`] (`1` released, `0` absent, `-1` held by another token).
///
/// When the lock is free afterwards (we released it, or we left the queue of a free lock), places whose heartbeat
/// expired are removed from the front of the queue (`TIME`), and the live head, if its place noted how to grant it
/// (a fair mutex's waiter, `"<lease> <draw>"`), **gets the lock in this step**: `SET lock head PX lease`, its
/// fencing token drawn as [`ACQUIRE`] draws one when `draw` is `1`, its place removed, and
/// `<origin>+<fence> <head token>` announced (`<origin>+ <head token>` without a token). The head's process
/// returns the grant without another round trip. Why that is safe:
/// - *The grantee's validity.* The lease is `min(ttl, waiter TTL)` of the head's own request, applied at the grant.
///   The head counts it from the send time of its first try, which took its place: any grant to its token came
///   after it (a later try is no bound, since a try that finds its place gone takes a new one). So the head's
///   deadline lies before the key's expiry, as for any acquire. It then extends to its full TTL in the background when that is longer (see
///   [`LockOptions::with_fair_queue`](crate::LockOptions::with_fair_queue)).
/// - *A dead head.* Its heartbeat was live (at most a waiter TTL old), and the lease is at most a waiter TTL: a head
///   that died just before its turn holds the lock for at most its waiter TTL, as its place would have held up the
///   queue. When the lease runs out, the next head's try (due at the holder's PTTL) takes the lock.
/// - *A lost announcement* costs the head one heartbeat: its next try finds its own token in the lock key (the retry
///   path of [`FAIR_ACQUIRE`]) and gets the grant, with the key's TTL set to its full TTL from then.
/// - *A head whose place vanished* (its heartbeat gone, not expired), a read-write lock's writer and a head whose
///   counter [`ACQUIRE`] would refuse are told (`<origin> <head's waiter id>`, the first 16 hex digits of the SHA-1
///   of its token: see `waiter_id.lua`) and try, as before grants existed.
///
/// With nobody queued the announcement is `<origin>` alone, as [`RELEASE`]'s, which wakes one waiter per process
/// (plain waiters on the same resource), and only when a try marked the lock as awaited (as [`RELEASE`]). A grant
/// keeps the mark: plain waiters now wait for the grantee's release.
pub static FAIR_RELEASE: Script = Script::new(
    "fair-release",
    concat!(lock_prelude!(), fair_prelude!(), fencing_prelude!(), include_str!("../../engine/fair/release.lua")),
);

/// Inspect (see [`Lock::inspect`](crate::Lock::inspect)): what an operator may know about one name, read in one
/// atomic step, writing nothing: the lock key's holder (a lock's, a fair lock's, a job's, an election's or a
/// read-write lock's writer) and the holders that share the name, each with its own expiry (a read-write lock's
/// readers, a semaphore's permits).
///
/// `KEYS[1]` lock key, `KEYS[2]` fence key, `KEYS[3]` the release mark, `KEYS[4]` a fair lock's queue, `KEYS[5]` a
/// read-write lock's readers, `KEYS[6]` a semaphore's permits (token → expiry), `KEYS[7]` its permits' grants
/// (token → `fence;slot,slot…`), `KEYS[8]` the name's record (an election's leader, a job's last run). Reply:
/// `{value, pttl, fence, mark_pttl, queued, n, field₁, value₁, …, field_n, value_n, …}`: the lock key's value (`''`
/// when free) and PTTL, the fencing counter (`''` when never advanced), the release mark's PTTL (positive while a
/// try that found the lock held may still wait), how many waiters a fair queue holds, the record's field count and
/// its fields (never the holder's token); then four items per live shared holder
/// (at most 1000 of each kind): `'r'` or `'p'`, its token, its time left in ms and a permit's slots (comma
/// separated). A lock key of another type reads as the value `type:<type>` (a foreign holder); any other key of
/// another type is `WRONGTYPE`, as in every script; the counter's content is checked by the client.
pub static INSPECT: Script = Script::new(
    "inspect",
    concat!(
        lock_prelude!(),
        include_str!("../../engine/admin/shared.lua"),
        include_str!("../../engine/admin/inspect.lua")
    ),
);

/// Force release (see [`Lock::force_release`](crate::Lock::force_release)): deletes what holds the name if it is
/// the holder the operator expects (compare-and-delete on what was shown): the lock key's holder, a read-write
/// lock's readers, a semaphore's permits (their slots freed). It keeps the fencing counter (the next grant's token
/// still increases) and announces the release, to a fair queue's head when there is one, so that a waiter in any
/// process tries at once.
///
/// `KEYS[1]` lock key, `KEYS[2]` release channel, `KEYS[3]` the release mark, `KEYS[4]` a fair lock's queue,
/// `KEYS[5]` a read-write lock's readers, `KEYS[6..9]` a semaphore's permits, grants, slots and limit; `ARGV[1]`
/// the announcement's origin (one no store uses, so every process's subscriber wakes a waiter), `ARGV[2]` `"1"` to
/// announce with `SPUBLISH`, `ARGV[3]` whom to expect: `*` (or absent) anyone, `""` nobody (the operator saw the
/// name free), else the owner ids the operator was shown, separated by spaces: each the first hex digits of a
/// holder's token, or `~` and the first hex digits of the SHA-1 of a value another client wrote. Reply: `{code,
/// deleted, …}`, then four items per holder (`'x'` the lock key's holder, `'r'` a reader or `'p'` a permit; its
/// value; its time left; a permit's slots), first the `deleted` holders deleted, then those kept (not expected);
/// `code` is `1` when something was deleted, `0` when nobody held the name, `2` when only others than expected hold
/// it (nothing deleted, nothing announced). A lock key of another type is a holder (value `type:<type>`); any other
/// key of another type is `WRONGTYPE` and kept.
pub static FORCE_RELEASE: Script = Script::new(
    "force-release",
    concat!(
        lock_prelude!(),
        include_str!("waiter_id.lua"),
        include_str!("../../engine/admin/shared.lua"),
        include_str!("../../engine/admin/force_release.lua")
    ),
);

/// Elect (see [`Election`](crate::Election)): the mutex's acquire of the election's key, the new term from the
/// fencing counter (same rule as [`ACQUIRE`]), and the leader's record, in one step; announced to observers.
///
/// `KEYS[1]` lock key, `KEYS[2]` term counter, `KEYS[3]` the release mark, `KEYS[4]` the leader record (hash),
/// `KEYS[5]` the leader channel, `KEYS[6]` (optional) the candidacies given back (see [`RESIGN`]), `KEYS[7]`
/// (optional) the waiting processes, `KEYS[8]` (optional) the promise, `KEYS[9]` (optional) the release channel;
/// `ARGV[1]` token, `ARGV[2]` lease in ms, `ARGV[3]` (optional, decimal) the term's floor in place of the server's
/// clock (Redlock), `ARGV[4]` candidate id, `ARGV[5]` value, `ARGV[6]` origin, `ARGV[7]` `"1"` for `SPUBLISH`,
/// `ARGV[8]` (optional) the candidate's process to line up (empty: it cannot hear releases, and is not lined up),
/// `ARGV[9]` (optional) the hand-over grace in ms (empty: no promises, as over Redlock), `ARGV[10]` (optional) the
/// counter's idle expiry in ms (as in [`ACQUIRE`]). Reply: `{1, term}` (elected; a retry with the same token replies
/// the same term, or, once the counter expired, a term drawn anew and recorded), `{0, pttl}` (another candidate leads, or the election is
/// promised to another process for `pttl` ms; the key is marked as awaited and the process lined up),
/// `{0, -2}` (this candidacy was given back before the request arrived: nothing written). Every key's type is
/// checked before any write. The record `{id, value, term, token}` lives exactly as long as the lock key (set and
/// renewed together).
///
/// **Candidates take turns by process** (review finding 10). A candidate that finds the election held lines its
/// process up (`line_up`, as a mutex's try). A resignation names the first waiting process and promises it the
/// election for the grace (see [`RESIGN`]); a free election found while the first waiting process is another one
/// (the leader's lease ran out) is handed over the same way by whichever try finds it. While a promise lives, only
/// the promised process is elected; the others, the one that resigned included, line up behind. The turn is the
/// process's (`ARGV[6]`), whichever of its tries takes it: one that does not line up, or one made after the
/// candidate that lined the process up was cut off. So the process
/// that waited longest is elected at the next hand-over, and one with k processes ahead of it within k + 1.
pub static ELECT: Script = Script::new(
    "elect",
    concat!(
        lock_prelude!(),
        fencing_prelude!(),
        awaited_prelude!(),
        waiting_prelude!(),
        include_str!("../../election/elect.lua")
    ),
);

/// Renew a leadership: compare-and-`PEXPIRE` of the lock key and the leader record together.
///
/// `KEYS[1]` lock key, `KEYS[2]` leader record; `ARGV[1]` token, `ARGV[2]` lease in ms. Reply: as [`EXTEND`].
pub static ELECTION_RENEW: Script =
    Script::new("election-renew", concat!(lock_prelude!(), include_str!("../../election/renew.lua")));

/// Resign: compare-and-delete of the lock key and the leader record; wakes a waiting candidate (only when one
/// marked the key, as [`RELEASE`]) and always tells observers.
///
/// `KEYS[1]` lock key, `KEYS[2]` leader record, `KEYS[3]` release channel, `KEYS[4]` release mark, `KEYS[5]` leader
/// channel, `KEYS[6]` (optional) the candidacies given back, `KEYS[7]` (optional) the waiting processes, `KEYS[8]`
/// (optional) the promise; `ARGV[1]` token, `ARGV[2]` origin, `ARGV[3]` `"1"` for `SPUBLISH`, `ARGV[4]` (with
/// `KEYS[6]`) the lease in ms, `ARGV[5]` (optional) the hand-over grace in ms. Reply: as [`RELEASE`].
///
/// A resignation with candidates lined up names the first waiting process other than its own, as [`RELEASE`] does,
/// and (with a grace) promises it the election for that long: see [`ELECT`].
///
/// A resignation that finds the key not ours (a candidate giving back a grant whose request has not arrived yet, a
/// delayed `ELECT` on another connection, say) notes the token in `KEYS[6]` for one lease: should that `ELECT`
/// arrive later, [`ELECT`] refuses it, so observers never see a leader that gave its candidacy up.
pub static RESIGN: Script =
    Script::new("resign", concat!(lock_prelude!(), next_waiting_prelude!(), include_str!("../../election/resign.lua")));

/// Proclaim: replace the leader's value, only while the lock key holds our token; tells observers.
///
/// `KEYS[1]` lock key, `KEYS[2]` leader record, `KEYS[3]` leader channel; `ARGV[1]` token, `ARGV[2]` the value,
/// `ARGV[3]` origin, `ARGV[4]` `"1"` for `SPUBLISH`. Reply: `1` done, `0` not the leader.
pub static PROCLAIM: Script =
    Script::new("proclaim", concat!(lock_prelude!(), include_str!("../../election/proclaim.lua")));

/// The current leader, read in one step: its record only while the lock key still holds the record's token (a
/// plain lock on the same name, or a record outliving its leader, is no leader).
///
/// `KEYS[1]` lock key, `KEYS[2]` leader record. Reply: `{id, value, term, pttl}`, or `{}` with no leader.
pub static LEADER: Script = Script::new("leader", concat!(lock_prelude!(), include_str!("../../election/leader.lua")));

/// What every semaphore script starts with: `sem_now()` is the server's clock in ms; `purge(now)` drops every permit
/// whose expiry has passed (its slots, its grant and its expiry), so a dead holder costs at most its TTL whoever
/// else renews; `gc()` sets every semaphore key to expire a second after the last permit's expiry (the keys never
/// outlive their permits); `sem_types()` refuses foreign keys before any write. `KEYS[1]` expiries (zset, token →
/// server ms), `KEYS[2]` slots (hash, slot → token), `KEYS[3]` grants (hash, token → `"fence;s1,s2…"`), `KEYS[4]`
/// the limit (string).
macro_rules! semaphore_prelude {
    () => {
        include_str!("semaphore.lua")
    };
}

/// Semaphore acquire (see [`Semaphore`](crate::Semaphore)): `n` of `limit` numbered slots for one token, with its
/// own expiry on the server clock, in one step.
///
/// `KEYS[1..4]` the expiries (zset), slots (hash), grants (hash) and limit (string), `KEYS[5]` the fencing counter, `KEYS[6]` the release mark; `ARGV[1]`
/// token, `ARGV[2]` n, `ARGV[3]` TTL in ms, `ARGV[4]` limit, `ARGV[5]` `"1"` for fencing, `ARGV[6]` (optional) the
/// counter's floor, `ARGV[7]` (optional) the counter's idle expiry in ms (as in [`ACQUIRE`]). Reply: `{1, fence, slot…}` (granted the lowest free slots; fence `-1` without fencing; a retry
/// with the same token renews and replies the same grant), `{0, wait_ms, free}` (too few free: the earliest expiry
/// is `wait_ms` away, `-1` when none, and `free` slots are free, which a smaller request could take; the semaphore
/// is marked as awaited), `{-1, limit}` (another client uses the
/// semaphore with this other limit: nothing written). The fence follows the lock's rule, so the tokens one slot
/// sees strictly increase.
pub static SEM_ACQUIRE: Script = Script::new(
    "sem-acquire",
    concat!(semaphore_prelude!(), fencing_prelude!(), awaited_prelude!(), include_str!("../../semaphore/acquire.lua")),
);

/// Semaphore extend: pushes the token's own expiry, only while it holds a permit that has not expired.
///
/// `KEYS[1..4]` the expiries (zset), slots (hash), grants (hash) and limit (string); `ARGV[1]` token, `ARGV[2]` TTL in ms. Reply: `1` extended, `0` not held
/// (expired, purged, or never granted): never recreated.
pub static SEM_EXTEND: Script =
    Script::new("sem-extend", concat!(semaphore_prelude!(), include_str!("../../semaphore/extend.lua")));

/// Semaphore release: frees the token's slots; announces (only when a try marked the semaphore as awaited).
///
/// `KEYS[1..4]` the expiries (zset), slots (hash), grants (hash) and limit (string), `KEYS[5]` release channel, `KEYS[6]` the release mark; `ARGV[1]` token,
/// `ARGV[2]` origin, `ARGV[3]` `"1"` for `SPUBLISH`. Reply: `1` released, `2` released though its expiry had passed
/// (nobody had taken its slots yet), `0` not held: the count is never raised by an unknown or purged token.
pub static SEM_RELEASE: Script =
    Script::new("sem-release", concat!(semaphore_prelude!(), include_str!("../../semaphore/release.lua")));

/// Semaphore state, read without writing: the limit stored by the holders, and how many slots live permits hold
/// (expired ones not counted).
///
/// `KEYS[1..4]` the expiries (zset), slots (hash), grants (hash) and limit (string). Reply: `{limit or -1, held}`.
pub static SEM_STATE: Script =
    Script::new("sem-state", concat!(semaphore_prelude!(), include_str!("../../semaphore/state.lua")));

/// What every read-write lock script starts with (see [`RwLock`](crate::RwLock)): `rw_now()` is the server's clock in
/// ms; `rw_read(command, what, key, …)` runs a read that doubles as the type check of `key` (a key of another type
/// gets our `WRONGTYPE` message; anything else, an ACL refusal say, goes back as it came), so every check precedes
/// the first write; `rw_expire_readers()` sets the readers' set to expire with its last reader. The keys, in every
/// script: `KEYS[1]` the writer (string, token, PX), `KEYS[2]` readers (zset: token → expiry, server ms), `KEYS[3]`
/// waiting writers (zset: token → ticket), `KEYS[4]` their heartbeats (zset: token → expiry of the place).
macro_rules! rw_prelude {
    () => {
        include_str!("rw.lua")
    };
}

/// Read acquire (see [`RwLock::read`](crate::RwLock::read)): join the readers when no writer holds and no live writer
/// waits (writer preference), with this reader's own expiry on the server clock.
///
/// `KEYS[1..4]` as in every read-write lock script (writer, readers, waiting writers, their heartbeats), `KEYS[5]`
/// the writers' fencing counter, `KEYS[6]` the release mark; `ARGV[1]` token, `ARGV[2]` TTL in ms, `ARGV[3]` `"1"`
/// to return the epoch. Reply: `{1, epoch}` / `{1}` joined (the epoch is the counter now, the last writer's token, 0
/// before any; not advanced); `{0, wait_ms}` not joined: a writer holds for `wait_ms` (its PTTL), or a writer waits
/// and the earliest waiting writer's place expires in `wait_ms` unless renewed (the mark is set, so the release that
/// lets readers in announces itself). A retry with the same token renews and replies the same epoch (no writer can
/// be granted while a live reader holds). Expired readers and dead waiting writers are purged, after every check.
pub static RW_READ: Script = Script::new(
    "rw-read",
    concat!(
        rw_prelude!(),
        lock_prelude!(),
        fencing_prelude!(),
        awaited_prelude!(),
        include_str!("../../rwlock/read.lua")
    ),
);

/// Read-write lock release, whatever the token holds: the write lock (compare-and-delete), a read hold, or a
/// waiting writer's place (a writer that stops waiting). Announces when that lets someone in: `<origin> <head's
/// waiter id>` (16 hex digits, see `waiter_id.lua`) to the head waiting writer when neither a writer nor a live reader holds any more, `<origin>` to waiting
/// readers when no writer waits (only when a try marked the lock as awaited).
///
/// `KEYS[1..4]` as in every read-write lock script, `KEYS[5]` release channel, `KEYS[6]` the release mark;
/// `ARGV[1]` token, `ARGV[2]` origin, `ARGV[3]` `"1"` for `SPUBLISH`. Reply: `1` released (a hold, or a waiting
/// writer's place), `2` a read hold released after its expiry had passed (not purged yet), `0` nothing of ours held,
/// `-1` another writer holds.
pub static RW_RELEASE: Script = Script::new(
    "rw-release",
    concat!(rw_prelude!(), lock_prelude!(), include_str!("waiter_id.lua"), include_str!("../../rwlock/release.lua")),
);

/// Read-write lock extend, and the writer's atomic downgrade: pushes the token's own expiry (the writer key's PTTL,
/// or its reader expiry while that lies ahead); never recreates a hold that is gone. With `ARGV[3]` `"1"`, a writer
/// becomes a reader in the same step (no other writer can be granted in between) and waiting readers are told when
/// no writer waits.
///
/// `KEYS[1..4]` as in every read-write lock script, `KEYS[5]` release channel, `KEYS[6]` the release mark;
/// `ARGV[1]` token, `ARGV[2]` TTL in ms, `ARGV[3]` `"1"` to downgrade, `ARGV[4]` origin, `ARGV[5]` `"1"` for
/// `SPUBLISH`. Reply: `1` extended (or downgraded; a retried downgrade finds the reader and renews it), `0` not held.
pub static RW_EXTEND: Script =
    Script::new("rw-extend", concat!(rw_prelude!(), lock_prelude!(), include_str!("../../rwlock/extend.lua")));

/// Read-write lock state, read without writing: `{writer, readers, waiting}`: `1` when a writer holds, the readers
/// whose expiry lies ahead, and the waiting writers whose place has not expired.
///
/// `KEYS[1..4]` as in every read-write lock script.
pub static RW_STATE: Script =
    Script::new("rw-state", concat!(rw_prelude!(), lock_prelude!(), include_str!("../../rwlock/state.lua")));

/// The script of every fenced write ([`FencedResource`](crate::FencedResource)): check the guard, apply the write,
/// move the guard (see `fenced/write.lua`).
pub static FENCED_WRITE: Script = Script::new("fenced-write", include_str!("../../fenced/write.lua"));

/// The protocol version of the keys under a prefix (see [`wire`](crate::wire)): `KEYS[1]` `<prefix>wire`,
/// `ARGV[1]` our version. Reply: nil when it wrote ours (there was none), else the version found there.
pub static WIRE_VERSION: Script = Script::new("wire-version", include_str!("wire_version.lua"));

/// Every script of lock-core (to name the command an ACL refused inside one, from its SHA-1).
pub static ALL: &[&Script] = &[
    &WIRE_VERSION,
    &ACQUIRE,
    &HOLDER,
    &RELEASE,
    &UNLOCK,
    &PASS_ON,
    &EXTEND,
    &RAISE_FENCE,
    &FENCE,
    &MULTI_ACQUIRE,
    &MULTI_RELEASE,
    &MULTI_EXTEND,
    &JOB_START,
    &JOB_FINISH,
    &FAIR_ACQUIRE,
    &FAIR_RELEASE,
    &REDISSON_ACQUIRE,
    &REDISSON_EXTEND,
    &REDISSON_RELEASE,
    &INSPECT,
    &FORCE_RELEASE,
    &ELECT,
    &ELECTION_RENEW,
    &RESIGN,
    &PROCLAIM,
    &LEADER,
    &SEM_ACQUIRE,
    &SEM_EXTEND,
    &SEM_RELEASE,
    &SEM_STATE,
    &RW_READ,
    &RW_RELEASE,
    &RW_EXTEND,
    &RW_STATE,
    &FENCED_WRITE,
];

/// The script of lock-core whose SHA-1 is `sha1`.
pub fn by_sha1(sha1: &str) -> Option<&'static Script> {
    ALL.iter().copied().find(|script| script.sha1() == sha1)
}

/// The TTL argument of [`ACQUIRE`] and [`EXTEND`]: whole milliseconds, at least 1 and at most
/// [`MAX_TTL`](crate::MAX_TTL) (a direct caller's `Duration::MAX` would overflow the server's 64-bit expiry).
pub fn ttl_millis(ttl: Duration) -> u64 {
    let max = u64::try_from(crate::MAX_TTL.as_millis()).unwrap_or(u64::MAX);
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).clamp(1, max)
}

fn unexpected(what: &str, reply: &[i64]) -> LockError {
    LockError::backend(format!("unexpected reply to the {what} script: {reply:?}"))
}

/// Interprets the integers [`ACQUIRE`] returned.
///
/// # Errors
/// [`LockError::Backend`] for a reply of another shape.
pub fn parse_acquire(reply: &[i64], fencing: bool) -> Result<AcquireReply> {
    match (reply, fencing) {
        ([1, fence], true) => {
            let fence = u64::try_from(*fence).map_err(|_| unexpected("acquire", reply))?;
            Ok(AcquireReply::Acquired { fence: Some(fence) })
        }
        ([1], false) => Ok(AcquireReply::Acquired { fence: None }),
        ([0, pttl], _) => {
            let ttl = u64::try_from(*pttl).ok().map(Duration::from_millis);
            Ok(AcquireReply::Held { ttl })
        }
        _ => Err(unexpected("acquire", reply)),
    }
}

/// Interprets the integer [`HOLDER`] returned: the lock is held, for this long if known. A key that vanished since
/// the `SET` (-2) is reported as held for zero time, so a waiting acquire tries again at once and a single try
/// reports what it saw when it tried.
pub fn parse_holder(pttl: i64) -> AcquireReply {
    let ttl = match pttl {
        -2 => Some(Duration::ZERO),
        ms => u64::try_from(ms).ok().map(Duration::from_millis),
    };
    AcquireReply::Held { ttl }
}

/// Interprets the integer [`RELEASE`] returned.
///
/// # Errors
/// [`LockError::Backend`] for any other value.
pub fn parse_release(reply: i64) -> Result<ReleaseOutcome> {
    match reply {
        1 => Ok(ReleaseOutcome::Released),
        0 => Ok(ReleaseOutcome::AlreadyExpired),
        -1 => Ok(ReleaseOutcome::OwnedByOther),
        _ => Err(unexpected("release", &[reply])),
    }
}

/// Interprets the integer [`UNLOCK`] returned: `None` when the mark says someone waits (release with [`RELEASE`]).
///
/// # Errors
/// [`LockError::Backend`] for any other value.
pub fn parse_unlock(reply: i64) -> Result<Option<ReleaseOutcome>> {
    match reply {
        2 => Ok(None),
        other => parse_release(other).map(Some),
    }
}

/// Interprets the integer [`EXTEND`] returned.
///
/// # Errors
/// [`LockError::Backend`] for any other value.
pub fn parse_extend(reply: i64) -> Result<ExtendReply> {
    match reply {
        1 => Ok(ExtendReply::Extended),
        0 => Ok(ExtendReply::Absent),
        -1 => Ok(ExtendReply::OwnedByOther),
        _ => Err(unexpected("extend", &[reply])),
    }
}

/// Interprets the integer [`RAISE_FENCE`] returned.
///
/// # Errors
/// [`LockError::Backend`] for any other value.
pub fn parse_raise_fence(reply: i64) -> Result<bool> {
    match reply {
        1 => Ok(true),
        0 => Ok(false),
        _ => Err(unexpected("raise-fence", &[reply])),
    }
}

/// The oldest Redis a single server (or a Sentinel-managed primary) may run: the scripts call `TIME` before they
/// write, which needs effects replication, the default since 5.0.
pub const MIN_VERSION: (u32, u32) = (5, 0);

/// The oldest Redis a cluster node may run: releases are announced with `SPUBLISH` and heard with `SSUBSCRIBE`
/// (sharded pub/sub), new in 7.0.
pub const MIN_CLUSTER_VERSION: (u32, u32) = (7, 0);

/// Checks the `redis_version` in an `INFO server` reply against [`MIN_VERSION`] (or, for a cluster,
/// [`MIN_CLUSTER_VERSION`]). Backends call it once when they connect, so an old server is a clear error then, not a
/// script error at the first lock.
///
/// ```
/// use lock_core::backend::scripts::require_version;
/// assert!(require_version("# Server\r\nredis_version:7.0.15\r\n", true).is_ok());
/// assert!(require_version("redis_version:6.2.14\r\n", true).is_err());
/// assert!(require_version("redis_version:6.2.14\r\n", false).is_ok());
/// ```
///
/// # Errors
/// [`LockError::Unsupported`] naming the version found and the one needed; an `INFO` reply without a version
/// passes (some proxies hide it; the scripts' own errors remain typed).
pub fn require_version(info: &str, cluster: bool) -> Result<()> {
    let Some(version) = info.lines().find_map(|l| l.trim().strip_prefix("redis_version:")) else {
        return Ok(());
    };
    let mut parts = version.trim().split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let (needed, why) = if cluster {
        (MIN_CLUSTER_VERSION, "sharded pub/sub (SPUBLISH, SSUBSCRIBE) on Cluster")
    } else {
        (MIN_VERSION, "effects replication for the scripts")
    };
    if found < needed {
        return Err(LockError::Unsupported(
            format!("redis {} is too old: the lock needs {}.{} or newer ({why})", version.trim(), needed.0, needed.1)
                .into(),
        ));
    }
    Ok(())
}

/// Whether a server error is an ACL refusal, on Redis and Valkey alike (see
/// [`ServerErrorKind::of`](crate::backend::server_error::ServerErrorKind::of)).
pub fn is_acl_refusal(message: &str) -> bool {
    crate::seam::server_error::ServerErrorKind::of(message) == crate::seam::server_error::ServerErrorKind::AclRefused
}

/// The SHA-1 of the script an error came from (`… script: <sha>, on @user_script:<line>.`).
pub fn script_sha(message: &str) -> Option<&str> {
    let start = message.find("script: ")? + "script: ".len();
    message.get(start..start + 40).filter(|sha| sha.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The command a script called on the line an error names (`@user_script:<line>`), given the script's body: what a
/// script's ACL refusal was about, since Redis names only the line.
///
/// ```
/// let message = "ERR The user executing the script can't run this command or subcommand script: \
///                0123456789012345678901234567890123456789, on @user_script:3.";
/// let body = "\nlocal x = 1\nreturn redis.call('INCRBY', KEYS[1], 1)\n";
/// assert_eq!(lock_core::backend::scripts::refused_command(body, message).as_deref(), Some("INCRBY"));
/// ```
pub fn refused_command(body: &str, message: &str) -> Option<String> {
    let at = message.find("@user_script:")? + "@user_script:".len();
    let line: usize = message[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()?;
    let text = body.lines().nth(line.checked_sub(1)?)?;
    let call = text
        .find("redis.call('")
        .map(|i| i + "redis.call('".len())
        .or_else(|| text.find("redis.pcall('").map(|i| i + "redis.pcall('".len()))?;
    let name: String = text[call..].chars().take_while(|c| c.is_ascii_alphabetic()).collect();
    (!name.is_empty()).then_some(name)
}

/// The [`AclRefusal`](crate::backend::AclRefusal) an ACL error message describes (see
/// [`server_error::acl_refusal`](crate::backend::server_error::acl_refusal)).
pub fn acl_refusal(message: &str) -> crate::error::AclRefusal {
    crate::seam::server_error::acl_refusal(message)
}

/// Whether a server error message is `WRONGTYPE` (from a command or from our scripts; see
/// [`ServerErrorKind::of`](crate::backend::server_error::ServerErrorKind::of)).
pub fn is_wrongtype(message: &str) -> bool {
    crate::seam::server_error::ServerErrorKind::of(message) == crate::seam::server_error::ServerErrorKind::WrongType
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        assert_eq!(parse_acquire(&[1, 7], true).unwrap(), AcquireReply::Acquired { fence: Some(7) });
        assert_eq!(parse_acquire(&[1], false).unwrap(), AcquireReply::Acquired { fence: None });
        assert_eq!(
            parse_acquire(&[0, 1500], true).unwrap(),
            AcquireReply::Held { ttl: Some(Duration::from_millis(1500)) }
        );
        assert_eq!(parse_acquire(&[0, -1], false).unwrap(), AcquireReply::Held { ttl: None });
        assert!(parse_acquire(&[1], true).is_err());
        assert!(parse_acquire(&[2, 1], true).is_err());
        assert_eq!(parse_release(-1).unwrap(), ReleaseOutcome::OwnedByOther);
        assert!(parse_release(5).is_err());
        assert_eq!(parse_extend(0).unwrap(), ExtendReply::Absent);
        assert_eq!(ttl_millis(Duration::from_micros(10)), 1);
        assert_eq!(ttl_millis(Duration::from_millis(1500)), 1500);
    }
}
