//! Resource names and the Redis key layout derived from them.

use crate::error::{LockError, Result};

/// One value per resource of an acquisition, in the order of its resources: held inline for the one resource nearly
/// every lock has (a `Vec` was an allocation of every acquire and release).
pub(crate) type PerResource<T> = smallvec::SmallVec<[T; 1]>;
use crate::namespace::{self, Aux};

/// The key prefix locks use unless told otherwise: `wlp:` ("wire lock protocol"), a prefix no shipped peer's layout
/// or bulk cleanup reaches (python-redis-lock's `reset_all` deletes every `lock:*` key, which was this library's
/// default before protocol version 1.1; see [`LEGACY_PREFIX`]).
pub const DEFAULT_PREFIX: &str = "wlp:";

/// The default key prefix before protocol version 1.1. A lock on the default prefix that finds the protocol version
/// key of this prefix (`lock:wire`) holding a version refuses to acquire with
/// [`LockError::OldPrefixInUse`](crate::LockError::OldPrefixInUse): processes of an older release hold their locks
/// there, and the two prefixes would not exclude each other. Set it explicitly with
/// [`Lock::with_key_prefix`](crate::Lock::with_key_prefix) until every process is upgraded.
pub const LEGACY_PREFIX: &str = "lock:";

/// The longest resource name (lock, semaphore, election, job, read-write lock, …) in bytes.
///
/// A name becomes part of five keys and of every log line and `lockctl` row about it; a bound keeps a name that
/// was built by mistake (a whole request body, say) from turning into megabytes of keys.
pub const MAX_RESOURCE_NAME: usize = 1024;

/// The keys and channel that one lock on one resource touches.
///
/// All of them share one hash tag, `{resource}`, so on Redis Cluster they live in one slot and one script may name
/// them all in `KEYS[]`. Inside the tag, `%`, `{` and `}` are percent-encoded: that keeps the tag intact for any
/// resource name (Redis ends a tag at the first `}`) and keeps the encoding injective, so two different names never
/// share keys.
///
/// | key | holds |
/// |---|---|
/// | `{prefix}{resource}` | the owner token, with the lock's TTL |
/// | `{prefix}{resource}:fence` | the fencing counter; no TTL (one small key per resource) |
/// | `{prefix}{resource}:released` | pub/sub channel a release publishes on |
/// | `{prefix}{resource}:awaited` | `"1"` while a try that found the lock held may still be waiting, with a TTL (the holder's remaining TTL and one second): a release announces itself only when it deletes this mark |
/// | `{prefix}{resource}:waiting` | sorted set of the processes (their hubs' origins, by arrival on the server clock) whose waiters found the lock held, with the mark's TTL: a release wakes the first of them only |
///
/// ```
/// let keys = lock_core::LockKeys::new("lock:", "orders/42")?;
/// assert_eq!(keys.lock(), "lock:{orders/42}");
/// assert_eq!(keys.fence(), "lock:{orders/42}:fence");
/// assert_eq!(keys.channel(), "lock:{orders/42}:released");
/// assert_eq!(keys.awaited(), "lock:{orders/42}:awaited");
/// assert_eq!(keys.waiting(), "lock:{orders/42}:waiting");
/// assert_eq!(lock_core::LockKeys::new("lock:", "a}b")?.lock(), "lock:{a%7Db}");
/// assert!(lock_core::LockKeys::new("lock:", "").is_err());
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LockKeys {
    /// The resource name, then each key in full, back to back: one allocation per resource (an acquire derives
    /// its keys every time, so four separate strings were four allocations of every lock cycle).
    text: String,
    /// Where each part of `text` ends: resource, lock, fence, channel, mark (the waiting processes end `text`).
    ends: [usize; 5],
    /// Under another library's layout: what the keys beside the lock key are named after (the lock key itself when
    /// it has a hash tag, else `{<lock key>}`, so they share its Cluster slot), and what its releases need. `None`
    /// under the native layout, where that is the lock key (no allocation on the default path).
    peer: Option<std::sync::Arc<PeerKeys>>,
    /// How long the fencing counter lives unused, in ms as the scripts take it (WIRE.md 5.5); `None` keeps it for
    /// ever (a peer's counter, a read-write lock's, or a lock that asked so). Shared with the [`Lock`](crate::Lock)
    /// that derived these keys: no allocation per acquire.
    fence_idle: Option<std::sync::Arc<str>>,
}

/// The parts of a lock's keys another library's layout adds (see [`LockKeys::for_layout`]).
#[derive(Debug, PartialEq, Eq, Hash)]
struct PeerKeys {
    /// The name the keys beside the lock key are derived from.
    base: String,
    /// What a release does for the peer's waiters, and how ours hear the peer.
    release: crate::layout::Peer,
}

impl std::hash::Hash for crate::layout::Peer {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (&self.signal, &self.message, self.heard, self.poll, self.owns_counter).hash(state);
    }
}

/// The keys derived from the lock key, in the order `text` holds them.
const SUFFIXES: [Aux; 4] = [Aux::Fence, Aux::Released, Aux::Awaited, Aux::Waiting];

impl LockKeys {
    /// Derives the keys for `resource` under `prefix`.
    ///
    /// The rule for names, the same for every primitive and checked before any I/O: 1 to [`MAX_RESOURCE_NAME`]
    /// bytes of UTF-8 without control characters (a newline in a name would forge lines in logs and rows in
    /// `lockctl list`). Any other character is fine, `{`, `}` and `%` included.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when the resource name breaks that rule, or the prefix contains `{` or `}`
    /// (which would move the hash tag) or a control character.
    pub fn new(prefix: &str, resource: &str) -> Result<Self> {
        validate_name(resource)?;
        validate_prefix(prefix)?;
        // The characters escaped are ASCII, so bytes count them; a name without any is copied in one go.
        let specials = resource.bytes().filter(|b| matches!(b, b'%' | b'{' | b'}')).count();
        let escaped = resource.len().saturating_add(specials.saturating_mul(2));
        let lock_len = prefix.len().saturating_add(escaped).saturating_add(2);
        let suffixes: usize = SUFFIXES.iter().map(|s| s.name().len() + 1).sum();
        let capacity = resource.len().saturating_add(lock_len.saturating_mul(5)).saturating_add(suffixes);
        let mut text = String::with_capacity(capacity);
        text.push_str(resource);
        let resource_end = text.len();
        text.push_str(prefix);
        text.push('{');
        if specials == 0 {
            text.push_str(resource);
        } else {
            for c in resource.chars() {
                match c {
                    '%' => text.push_str("%25"),
                    '{' => text.push_str("%7B"),
                    '}' => text.push_str("%7D"),
                    c => text.push(c),
                }
            }
        }
        text.push('}');
        let lock_end = text.len();
        let mut ends = [resource_end, lock_end, 0, 0, 0];
        for (i, suffix) in SUFFIXES.iter().enumerate() {
            text.extend_from_within(resource_end..lock_end);
            text.push(':');
            text.push_str(suffix.name());
            if let Some(end) = ends.get_mut(i + 2) {
                *end = text.len();
            }
        }
        Ok(LockKeys { text, ends, peer: None, fence_idle: None })
    }

    /// Derives the keys for `resource` under `layout` (see [`KeyLayout`](crate::KeyLayout)); `prefix` applies to the
    /// native layout only (another library's layout has its own).
    ///
    /// ```
    /// use lock_core::{KeyLayout, LockKeys};
    /// let keys = LockKeys::for_layout(&KeyLayout::python_redis_lock(), "lock:", "orders/42")?;
    /// assert_eq!(keys.lock(), "lock:orders/42");
    /// assert_eq!(keys.fence(), "{lock:orders/42}:fence"); // the lock key's Cluster slot
    /// let keys = LockKeys::for_layout(&KeyLayout::redisson(), "lock:", "orders")?;
    /// assert_eq!((keys.lock(), keys.channel()), ("orders", "redisson_lock__channel:{orders}"));
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a name that breaks the rule of [`new`](Self::new), a bad prefix, or a name
    /// whose lock key under another library's layout would be a key of this library that is not a lock key (see
    /// [`namespace`](crate::namespace)).
    pub fn for_layout(layout: &crate::KeyLayout, prefix: &str, resource: &str) -> Result<Self> {
        use crate::layout::{redisson_prefix_name, LayoutKind, Peer};
        let raw = match &layout.kind {
            LayoutKind::Native => return Self::new(prefix, resource),
            LayoutKind::Raw(raw) => raw,
            LayoutKind::Redisson => {
                validate_name(resource)?;
                validate_prefix(prefix)?;
                namespace::check_lock_key(prefix, resource, resource)?;
                let release =
                    Peer { signal: None, message: Some("0".to_owned()), heard: true, poll: None, owns_counter: true };
                let base = Self::base_of(resource);
                let fence = redisson_prefix_name(crate::layout::REDISSON_TOKEN, resource);
                let channel = redisson_prefix_name("redisson_lock__channel", resource);
                return Ok(Self::packed(resource, resource, base, &fence, &channel, release));
            }
        };
        validate_name(resource)?;
        if raw.prefix.chars().any(char::is_control) {
            return Err(LockError::invalid("key prefix must not contain control characters"));
        }
        let lock = format!("{}{resource}", raw.prefix);
        // The lock's own prefix still names its native key space (and its version key), which another library's
        // lock key must stay out of.
        validate_prefix(prefix)?;
        namespace::check_lock_key(prefix, resource, &lock)?;
        let base = Self::base_of(&lock);
        let channel = match &raw.channel {
            Some(channel) => format!("{channel}{lock}"),
            None => format!("{base}:released"),
        };
        let release = Peer {
            signal: raw.signal.as_ref().map(|signal| format!("{signal}{resource}")),
            message: raw.channel.as_ref().map(|_| lock.clone()),
            heard: raw.channel.is_some(),
            poll: raw.poll,
            owns_counter: false,
        };
        let fence = format!("{base}:fence");
        Ok(Self::packed(resource, &lock, base, &fence, &channel, release))
    }

    /// The name the keys beside `lock` are derived from, in its Cluster slot: `lock` when it has a hash tag (a suffix
    /// keeps it), `{lock}` otherwise (whose tag is all of `lock`, which is what `lock` hashes by, unless it
    /// contains `}`: then nothing shares its slot, and Cluster refuses the script).
    fn base_of(lock: &str) -> String {
        if crate::layout::hash_tag(lock).is_some() || lock.contains('}') {
            lock.to_owned()
        } else {
            format!("{{{lock}}}")
        }
    }

    fn packed(
        resource: &str,
        lock: &str,
        base: String,
        fence: &str,
        channel: &str,
        release: crate::layout::Peer,
    ) -> Self {
        let awaited = format!("{base}:awaited");
        let waiting = format!("{base}:waiting");
        let mut text = String::new();
        let mut ends = [0; 5];
        for (i, part) in [resource, lock, fence, channel, &awaited, &waiting].iter().enumerate() {
            text.push_str(part);
            if let Some(end) = ends.get_mut(i) {
                *end = text.len();
            }
        }
        LockKeys { text, ends, peer: Some(std::sync::Arc::new(PeerKeys { base, release })), fence_idle: None }
    }

    /// A key beside the lock key, `<base>:<suffix>`, in the lock key's Cluster slot: `<lock key>:<suffix>` under
    /// the native layout (see [`for_layout`](Self::for_layout) for another library's).
    pub(crate) fn aux(&self, aux: Aux) -> String {
        let base = self.peer.as_ref().map_or(self.lock(), |peer| peer.base.as_str());
        aux.key(base)
    }

    /// What a release under another library's layout does for that library's waiters (`None`: native).
    pub(crate) fn peer_release(&self) -> Option<&crate::layout::Peer> {
        self.peer.as_ref().map(|peer| &peer.release)
    }

    /// Whether a release must do something for another library's waiters (signal its list, publish its message),
    /// which only the lock's own release does: the multi-lock's, a fair lock's and a job's do not, and refuse such a
    /// layout.
    pub(crate) fn announces_for_a_peer(&self) -> bool {
        self.peer_release().is_some_and(|peer| peer.signal.is_some() || peer.message.is_some())
    }

    /// Whether every release of this lock is published where this library's waiters listen: not under a layout
    /// whose library announces nothing (or signals a list), where waiters poll on their backoff.
    pub(crate) fn releases_heard(&self) -> bool {
        self.peer_release().is_none_or(|peer| peer.heard)
    }

    /// The longest a waiter sleeps between tries under this lock's layout, if it caps it.
    pub(crate) fn poll(&self) -> Option<std::time::Duration> {
        self.peer_release().and_then(|peer| peer.poll)
    }

    /// The resource whose lock key is `key` under `prefix`, if `key` is one (the inverse of
    /// [`lock`](Self::lock)): how a tool that scans the keyspace names what it finds. The fence, channel, mark and
    /// queue keys are not lock keys.
    ///
    /// ```
    /// use lock_core::LockKeys;
    /// let keys = LockKeys::new("lock:", "a{b}%c")?;
    /// assert_eq!(LockKeys::resource_of("lock:", keys.lock()).as_deref(), Some("a{b}%c"));
    /// assert_eq!(LockKeys::resource_of("lock:", keys.fence()), None);
    /// assert_eq!(LockKeys::resource_of("other:", keys.lock()), None);
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn resource_of(prefix: &str, key: &str) -> Option<String> {
        let tagged = key.strip_prefix(prefix)?.strip_prefix('{')?.strip_suffix('}')?;
        // Only a name the rule admits is a lock's: a key someone else wrote with a newline in its name must not
        // forge a row where it is listed.
        if tagged.len() > MAX_RESOURCE_NAME.saturating_mul(3) || tagged.chars().any(char::is_control) {
            return None;
        }
        // Inside the tag every `{`, `}` and `%` is escaped, so a `}` there means this is not a lock key.
        if tagged.is_empty() || tagged.contains(['{', '}']) {
            return None;
        }
        let mut name = String::with_capacity(tagged.len());
        let mut rest = tagged;
        while let Some(at) = rest.find('%') {
            name.push_str(rest.get(..at)?);
            let escape = rest.get(at..at + 3)?;
            name.push(match escape {
                "%25" => '%',
                "%7B" => '{',
                "%7D" => '}',
                _ => return None,
            });
            rest = rest.get(at + 3..)?;
        }
        name.push_str(rest);
        validate_name(&name).is_ok().then_some(name)
    }

    /// The keys whose release channel is `channel`, if it is one (the inverse of [`channel`](Self::channel)): how
    /// a process that was asked to wake a waiter it no longer has finds the lock to pass the wake-up on for.
    ///
    /// ```
    /// use lock_core::LockKeys;
    /// let keys = LockKeys::new("app:", "a{b}")?;
    /// assert_eq!(LockKeys::of_channel(keys.channel()), Some(keys));
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn of_channel(channel: &str) -> Option<LockKeys> {
        let lock = channel.strip_suffix(":released")?;
        let prefix = lock.get(..lock.find('{')?)?;
        let resource = Self::resource_of(prefix, lock)?;
        LockKeys::new(prefix, &resource).ok()
    }

    fn part(&self, i: usize) -> &str {
        let start = i.checked_sub(1).and_then(|j| self.ends.get(j).copied()).unwrap_or(0);
        let end = self.ends.get(i).copied().unwrap_or(self.text.len());
        self.text.get(start..end).unwrap_or_default()
    }

    /// The resource name as the caller gave it.
    pub fn resource(&self) -> &str {
        self.part(0)
    }

    /// The key that holds the owner token.
    pub fn lock(&self) -> &str {
        self.part(1)
    }

    /// The key that holds the fencing counter.
    pub fn fence(&self) -> &str {
        self.part(2)
    }

    /// The channel a release publishes on.
    pub fn channel(&self) -> &str {
        self.part(3)
    }

    /// The mark a try that found the lock held leaves, so that the release announces itself (see
    /// [`RELEASE`](crate::backend::scripts::RELEASE)); with nobody waiting, a release publishes nothing.
    pub fn awaited(&self) -> &str {
        self.part(4)
    }

    /// The processes waiting for the lock, in arrival order: a release wakes the first one only (see
    /// [`RELEASE`](crate::backend::scripts::RELEASE)), so a lock awaited in many processes costs one retry per release,
    /// not one per process.
    pub fn waiting(&self) -> &str {
        self.part(5)
    }

    /// How long the fencing counter may stay unused before it expires, in ms as the fenced scripts take it; `""`
    /// keeps it for ever (see [`Lock::with_fence_counter_expiry`](crate::Lock::with_fence_counter_expiry)).
    pub(crate) fn fence_idle(&self) -> &str {
        self.fence_idle.as_deref().unwrap_or_default()
    }

    /// These keys with the counter's idle expiry `idle` (ms), unless the counter is another library's, which its own
    /// clients count from 1 (an expired one would hand out fences below earlier ones).
    pub(crate) fn with_fence_idle(mut self, idle: Option<&std::sync::Arc<str>>) -> Self {
        let peers_counter = self.peer.as_ref().is_some_and(|peer| peer.release.owns_counter);
        self.fence_idle = idle.filter(|_| !peers_counter).cloned();
        self
    }
}

impl std::fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockKeys")
            .field("resource", &self.resource())
            .field("lock", &self.lock())
            .field("fence", &self.fence())
            .field("channel", &self.channel())
            .field("awaited", &self.awaited())
            .field("waiting", &self.waiting())
            .field("peer", &self.peer)
            .field("fence_idle", &self.fence_idle)
            .finish()
    }
}

/// Checks a key prefix.
///
/// # Errors
/// [`LockError::InvalidArgument`] when it contains `{` or `}`, or a control character, or puts the keys among
/// another library's that this library's releases write (see [`namespace`](crate::namespace)).
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.contains(['{', '}']) {
        return Err(LockError::invalid("key prefix must not contain '{' or '}' (it would move the hash tag)"));
    }
    if prefix.chars().any(char::is_control) {
        return Err(LockError::invalid("key prefix must not contain control characters"));
    }
    namespace::check_prefix(prefix)
}

/// Checks a resource name against the rule of [`LockKeys::new`].
pub(crate) fn validate_name(resource: &str) -> Result<()> {
    if resource.is_empty() {
        return Err(LockError::invalid("resource name must not be empty"));
    }
    if resource.len() > MAX_RESOURCE_NAME {
        return Err(LockError::invalid(format!(
            "resource name is {} bytes; at most {MAX_RESOURCE_NAME} are allowed",
            resource.len()
        )));
    }
    if resource.chars().any(char::is_control) {
        return Err(LockError::invalid("resource name must not contain control characters (newline, tab, …)"));
    }
    Ok(())
}

/// The keys beside a name's lock key that some primitives keep (every one under the name's hash tag).
impl LockKeys {
    /// A read-write lock's readers: token → expiry, server ms.
    pub(crate) fn readers(&self) -> String {
        self.aux(Aux::Readers)
    }

    /// A semaphore's keys: its permits' expiries (token → expiry, server ms), its slots (slot → token), its
    /// permits' grants (token → `fence;slot,slot…`) and its limit. Named apart from the fair queue's `grants`: the
    /// admin scripts, given a name's keys, read both.
    pub(crate) fn semaphore(&self) -> [String; 4] {
        [self.aux(Aux::Permits), self.aux(Aux::Slots), self.aux(Aux::PermitGrants), self.aux(Aux::Limit)]
    }

    /// The process an election's hand-over promised the election to.
    pub(crate) fn promised(&self) -> String {
        self.aux(Aux::Promised)
    }
}

/// Redis Cluster's slot count.
const SLOTS: u16 = 16384;

/// The Cluster hash slot of `key` (CRC16/XMODEM of its hash tag, or of the whole key without one).
pub(crate) fn slot(key: &str) -> u16 {
    const CRC: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|b| *b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    CRC.checksum(tagged.unwrap_or(bytes)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_redis_cluster() {
        // What `CLUSTER KEYSLOT` answers (the examples of its documentation); a key with an empty tag hashes whole.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("somekey"), 11058);
        assert_eq!(slot("{user1000}.following"), 3443);
        assert_eq!(slot("{user1000}.followers"), 3443);
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
    }

    fn tag(key: &str) -> &str {
        // Redis Cluster's rule: the tag is between the first '{' and the first '}' after it.
        let open = key.find('{').unwrap_or(0);
        let close = key[open + 1..].find('}').map(|i| open + 1 + i).unwrap_or(key.len());
        &key[open + 1..close]
    }

    #[test]
    fn every_key_shares_one_nonempty_tag() {
        for name in ["x", "}", "{", "{}", "}{", "a{b}c", "%7D", "🦀 spaced: name", "lock:{x}:fence"] {
            let k = LockKeys::new("p:", name).unwrap();
            assert!(!tag(k.lock()).is_empty(), "{name}");
            assert_eq!(tag(k.lock()), tag(k.fence()), "{name}");
            assert_eq!(tag(k.lock()), tag(k.channel()), "{name}");
            assert_eq!(tag(k.lock()), tag(k.awaited()), "{name}");
            assert_eq!(tag(k.lock()), tag(k.waiting()), "{name}");
            assert_eq!(k.resource(), name);
            assert_eq!(k.fence(), format!("{}:fence", k.lock()));
            assert_eq!(k.channel(), format!("{}:released", k.lock()));
            assert_eq!(k.awaited(), format!("{}:awaited", k.lock()));
            assert_eq!(k.waiting(), format!("{}:waiting", k.lock()));
            assert_eq!(LockKeys::of_channel(k.channel()).as_ref(), Some(&k), "{name}");
        }
        for not_a_channel in ["p:{x}", "p:{x}:fence", "p:x:released", "p:{a}b}:released", "{x}:released:released"] {
            assert_eq!(LockKeys::of_channel(not_a_channel), None, "{not_a_channel}");
        }
    }

    #[test]
    fn encoding_is_injective() {
        let names = ["a}b", "a%7Db", "a%7db", "a{b", "a%7Bb", "a%b", "a%25b"];
        let keys: std::collections::HashSet<String> =
            names.iter().map(|n| LockKeys::new("p:", n).unwrap().lock().to_owned()).collect();
        assert_eq!(keys.len(), names.len());
    }

    #[test]
    fn lock_keys_decode_back_to_their_resource() {
        for name in ["x", "}", "{", "{}", "%", "%7D", "a{b}c", "🦀 spaced: name", "lock:{x}:fence", "100%"] {
            let k = LockKeys::new("p:", name).unwrap();
            assert_eq!(LockKeys::resource_of("p:", k.lock()).as_deref(), Some(name));
            for other in [k.fence(), k.channel(), k.awaited(), k.waiting()] {
                assert_eq!(LockKeys::resource_of("p:", other), None, "{other}");
            }
        }
        for not_ours in ["p:{}", "p:{a%zz}", "p:{a%7}", "p:x", "q:{x}", "p:{a}b}"] {
            assert_eq!(LockKeys::resource_of("p:", not_ours), None, "{not_ours}");
        }
    }

    #[test]
    fn bad_prefix_rejected() {
        assert!(LockKeys::new("{p}:", "x").is_err());
        assert!(LockKeys::new("a\nb:", "x").is_err());
        assert!(LockKeys::new("", "x").is_ok());
    }

    #[test]
    fn names_have_one_rule() {
        let longest = "n".repeat(MAX_RESOURCE_NAME);
        assert!(LockKeys::new("p:", &longest).is_ok());
        let too_long = "n".repeat(MAX_RESOURCE_NAME + 1);
        let err = LockKeys::new("p:", &too_long).unwrap_err();
        assert!(matches!(err, LockError::InvalidArgument(_)) && err.to_string().contains("1025 bytes"), "{err}");
        for bad in ["", "a\nb", "a\rb", "tab\there", "nul\0", "del\u{7f}", "c1\u{85}"] {
            assert!(matches!(LockKeys::new("p:", bad), Err(LockError::InvalidArgument(_))), "{bad:?} accepted");
        }
        // The inverse admits only what the rule admits: a planted key with a newline is nobody's lock.
        assert_eq!(LockKeys::resource_of("p:", "p:{a\nb}"), None);
        assert_eq!(LockKeys::resource_of("p:", &format!("p:{{{too_long}}}")), None);
        assert_eq!(LockKeys::resource_of("p:", &format!("p:{{{longest}}}")).as_deref(), Some(longest.as_str()));
    }
}
