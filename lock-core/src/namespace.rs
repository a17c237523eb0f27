//! Which keys are whose on a Redis shared with other libraries: every key shape this library writes, and the rule
//! that keeps a lock key (under any [`KeyLayout`](crate::KeyLayout)) off every key of ours that is not a lock key.
//!
//! Under this library's own layout every key of a prefix `P` has one of four shapes, none of which another library's
//! lock key can take under the default prefix ([`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX), chosen so that no shipped
//! peer's layout or bulk cleanup reaches it):
//!
//! | shape | what |
//! |---|---|
//! | `P{N}`, `P{N}:<part>` | a lock (mutex, fair lock, multi-lock member, job, election) and the keys beside it |
//! | `Psem:{N}…` | a semaphore's keys |
//! | `Prw:{N}…` | a read-write lock's keys |
//! | `Pwire` | the protocol version of the keys under `P` (see [`wire`](crate::wire)) |
//!
//! Under another library's layout the lock key is that library's (`lock:N`, `redlock:N`, the raw `N`, …), and the
//! keys beside it are named after it: `<base>:<part>`, where the base is the lock key when it has a hash tag (or a
//! `}`), else `{<lock key>}`. A few keys belong to a peer that our releases also write (python-redis-lock's signal
//! lists, Redisson's fencing counters).
//!
//! A name whose lock key would land on any key of ours that is not a lock key (the version key, a fencing counter,
//! a queue, the native key space under the lock's prefix, a peer's signal list) is refused with
//! [`LockError::InvalidArgument`] naming the clash, before any I/O: two structures sharing one key corrupt each
//! other silently.
//!
//! ```
//! use lock_core::{KeyLayout, Lock, LockOptions, MemoryStore};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let lock = Lock::new(MemoryStore::new()).with_layout(KeyLayout::plain());
//! let err = lock.try_acquire("wlp:wire", &LockOptions::new(Duration::from_secs(1))).await.unwrap_err();
//! assert!(err.to_string().contains("protocol version key"), "{err}");
//! let err = lock.try_acquire("{orders}:fence", &LockOptions::new(Duration::from_secs(1))).await.unwrap_err();
//! assert!(err.to_string().contains("fencing counter"), "{err}");
//! # }
//! ```

use std::fmt;

use crate::error::{LockError, Result};

/// The part of a semaphore's keys that follows the lock's prefix (`Psem:{N}`).
pub(crate) const SEMAPHORE: &str = "sem:";
/// The part of a read-write lock's keys that follows the lock's prefix (`Prw:{N}`).
pub(crate) const RWLOCK: &str = "rw:";
/// The name of the protocol version key after the prefix (`Pwire`).
pub(crate) const VERSION: &str = "wire";

/// A key beside a lock key: `<base>:<suffix>` (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Aux {
    /// The fencing counter.
    Fence,
    /// The release channel (a channel, not a key; listed so that no lock key is named like one).
    Released,
    /// The mark a waiting try leaves.
    Awaited,
    /// The processes waiting, in arrival order.
    Waiting,
    /// A fair lock's queue.
    Queue,
    /// A fair lock's waiters' heartbeats.
    Heartbeats,
    /// A fair lock's grants.
    Grants,
    /// A job's or an election's record.
    Info,
    /// An election's channel.
    Leader,
    /// An election's given-back terms.
    GivenBack,
    /// A read-write lock's readers.
    Readers,
    /// A semaphore's permits.
    Permits,
    /// A semaphore's slots.
    Slots,
    /// A semaphore's permits' grants.
    PermitGrants,
    /// A semaphore's limit.
    Limit,
    /// The process an election's hand-over promised it to.
    Promised,
    /// A job's record of one tick: `tick:<n>`.
    Tick(u64),
}

impl Aux {
    /// Every suffix without an argument, in the order the keys are listed.
    pub(crate) const FIXED: [Aux; 16] = [
        Aux::Fence,
        Aux::Released,
        Aux::Awaited,
        Aux::Waiting,
        Aux::Queue,
        Aux::Heartbeats,
        Aux::Grants,
        Aux::Info,
        Aux::Leader,
        Aux::GivenBack,
        Aux::Readers,
        Aux::Permits,
        Aux::Slots,
        Aux::PermitGrants,
        Aux::Limit,
        Aux::Promised,
    ];

    /// The suffix's text, without its `:` (`tick:<n>` for a tick).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Aux::Fence => "fence",
            Aux::Released => "released",
            Aux::Awaited => "awaited",
            Aux::Waiting => "waiting",
            Aux::Queue => "queue",
            Aux::Heartbeats => "heartbeats",
            Aux::Grants => "grants",
            Aux::Info => "info",
            Aux::Leader => "leader",
            Aux::GivenBack => "given-back",
            Aux::Readers => "readers",
            Aux::Permits => "permits",
            Aux::Slots => "slots",
            Aux::PermitGrants => "permit-grants",
            Aux::Limit => "limit",
            Aux::Promised => "promised",
            Aux::Tick(_) => "tick",
        }
    }

    /// What the key holds, for an error or an audit row.
    pub(crate) fn what(self) -> &'static str {
        match self {
            Aux::Fence => "the fencing counter",
            Aux::Released => "the release channel",
            Aux::Awaited => "the release mark",
            Aux::Waiting => "the waiting processes",
            Aux::Queue => "a fair lock's queue",
            Aux::Heartbeats => "a fair lock's waiter heartbeats",
            Aux::Grants => "a fair lock's grants",
            Aux::Info => "a job's or an election's record",
            Aux::Leader => "an election's channel",
            Aux::GivenBack => "an election's given-back terms",
            Aux::Readers => "a read-write lock's readers",
            Aux::Permits => "a semaphore's permits",
            Aux::Slots => "a semaphore's slots",
            Aux::PermitGrants => "a semaphore's grants",
            Aux::Limit => "a semaphore's limit",
            Aux::Promised => "an election's promise",
            Aux::Tick(_) => "a job's tick record",
        }
    }

    /// `<base>:<suffix>`.
    pub(crate) fn key(self, base: &str) -> String {
        match self {
            Aux::Tick(tick) => format!("{base}:tick:{tick}"),
            other => format!("{base}:{}", other.name()),
        }
    }

    /// The suffix `key` ends with and the base before it, if `key` is `<base>:<suffix>` for some suffix.
    pub(crate) fn split(key: &str) -> Option<(&str, Aux)> {
        if let Some((base, tick)) = key.rsplit_once(":tick:") {
            if !tick.is_empty() && tick.bytes().all(|b| b.is_ascii_digit()) {
                return Some((base, Aux::Tick(tick.parse().unwrap_or(u64::MAX))));
            }
        }
        let (base, suffix) = key.rsplit_once(':')?;
        Aux::FIXED.into_iter().find(|aux| aux.name() == suffix).map(|aux| (base, aux))
    }
}

/// Keys of another library that this library's releases write under its layout (see
/// [`KeyLayout`](crate::KeyLayout)): no lock key may be one of them.
pub(crate) const PEER_WRITTEN: [(&str, &str); 2] = [
    (crate::layout::PYTHON_REDIS_LOCK_SIGNAL, "python-redis-lock's release signal list"),
    (crate::layout::REDISSON_TOKEN_KEYS, "Redisson's fencing counter"),
];

/// Why a key cannot be a lock key: it is (or may be) a key of this library that is not a lock key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Clash {
    /// The protocol version key of a prefix.
    VersionKey {
        /// The prefix.
        prefix: String,
    },
    /// A key of this library's own layout under a prefix.
    NativeSpace {
        /// The prefix.
        prefix: String,
    },
    /// A key beside another lock key.
    Beside {
        /// What it holds.
        what: &'static str,
    },
    /// A key another library owns that this library's releases write.
    PeerKey {
        /// What it holds.
        what: &'static str,
    },
}

impl fmt::Display for Clash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Clash::VersionKey { prefix } => write!(f, "the protocol version key of prefix {prefix:?}"),
            Clash::NativeSpace { prefix } => write!(f, "inside this library's own key space under prefix {prefix:?}"),
            Clash::Beside { what } => write!(f, "{what} of another lock (a key this library writes beside a lock key)"),
            Clash::PeerKey { what } => write!(f, "{what}, which this library's releases write"),
        }
    }
}

/// Whether `key` lies in the native key space of `prefix` (see the [module docs](self)), and how.
fn native_space(prefix: &str, key: &str) -> Option<Clash> {
    let rest = key.strip_prefix(prefix)?;
    if rest == VERSION {
        return Some(Clash::VersionKey { prefix: prefix.to_owned() });
    }
    let tagged = [SEMAPHORE, RWLOCK].iter().find_map(|sub| rest.strip_prefix(sub)).unwrap_or(rest);
    tagged.starts_with('{').then(|| Clash::NativeSpace { prefix: prefix.to_owned() })
}

/// Why `key`, the lock key of a name under another library's layout (the lock's native prefix being
/// `native_prefix`), cannot be one; `None` when it can.
///
/// One rule for every layout: the key must not be in the native key space of the lock's prefix, nor a key that
/// this library writes beside some lock key (`<base>:<suffix>` whose base has a `}`: bases are lock keys with a
/// hash tag or a `}`, or `{<lock key>}`), nor a peer's key that our releases write.
pub fn lock_key_clash(native_prefix: &str, key: &str) -> Option<Clash> {
    if let Some(clash) = native_space(native_prefix, key) {
        return Some(clash);
    }
    if let Some((base, aux)) = Aux::split(key) {
        if base.contains('}') {
            return Some(Clash::Beside { what: aux.what() });
        }
    }
    PEER_WRITTEN.iter().find(|(prefix, _)| key.starts_with(prefix)).map(|(_, what)| Clash::PeerKey { what })
}

/// Which of this library's structures a native key belongs to (see [`decode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Space {
    /// `P{N}`: a lock, a fair lock, a multi-lock's resource, a job, an election.
    Lock,
    /// `Psem:{N}`: a semaphore.
    Semaphore,
    /// `Prw:{N}`: a read-write lock.
    RwLock,
}

/// A key of this library's own layout under a prefix, decoded (see [`decode`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NativeKey {
    /// `Pwire`: the protocol version key.
    Version,
    /// A key of one resource.
    Resource {
        /// Whose.
        space: Space,
        /// The resource name, as the application gives it.
        resource: String,
        /// Which key beside the lock key (`"fence"`, `"queue"`, `"tick"`, …), or `None` for the lock key itself.
        part: Option<&'static str>,
    },
}

/// The native key `key` under `prefix`, decoded: what a tool that scans a shared server (`lockctl audit`) needs to
/// tell this library's keys from a neighbour's. `None` for a key of another shape, including a key inside the native
/// key space that no primitive of this library writes (see [`in_native_space`]).
///
/// ```
/// use lock_core::namespace::{decode, NativeKey, Space};
/// assert_eq!(decode("wlp:", "wlp:wire"), Some(NativeKey::Version));
/// let fence = decode("wlp:", "wlp:sem:{pool}:permits");
/// assert_eq!(fence, Some(NativeKey::Resource { space: Space::Semaphore, resource: "pool".into(), part: Some("permits") }));
/// assert_eq!(decode("wlp:", "wlp:{a%7Db}"), Some(NativeKey::Resource { space: Space::Lock, resource: "a}b".into(), part: None }));
/// assert_eq!(decode("wlp:", "wlp:{a}:nonsense"), None);
/// assert_eq!(decode("wlp:", "lock:{a}"), None);
/// ```
pub fn decode(prefix: &str, key: &str) -> Option<NativeKey> {
    let rest = key.strip_prefix(prefix)?;
    if rest == VERSION {
        return Some(NativeKey::Version);
    }
    let (space, sub) = match rest {
        _ if rest.starts_with(SEMAPHORE) => (Space::Semaphore, SEMAPHORE),
        _ if rest.starts_with(RWLOCK) => (Space::RwLock, RWLOCK),
        _ => (Space::Lock, ""),
    };
    let space_prefix = format!("{prefix}{sub}");
    if let Some(resource) = crate::LockKeys::resource_of(&space_prefix, key) {
        return Some(NativeKey::Resource { space, resource, part: None });
    }
    let (base, aux) = Aux::split(key)?;
    let resource = crate::LockKeys::resource_of(&space_prefix, base)?;
    Some(NativeKey::Resource { space, resource, part: Some(aux.name()) })
}

/// Whether `key` lies inside the native key space of `prefix` (`P{…`, `Psem:{…`, `Prw:{…`, `Pwire`): a key there
/// that [`decode`] does not know was written by something else.
///
/// ```
/// assert!(lock_core::namespace::in_native_space("wlp:", "wlp:{a}:nonsense"));
/// assert!(!lock_core::namespace::in_native_space("wlp:", "wlp:plain"));
/// ```
pub fn in_native_space(prefix: &str, key: &str) -> bool {
    native_space(prefix, key).is_some()
}

/// Refuses `key` as the lock key of `resource` when [`lock_key_clash`] finds a clash.
pub(crate) fn check_lock_key(native_prefix: &str, resource: &str, key: &str) -> Result<()> {
    match lock_key_clash(native_prefix, key) {
        None => Ok(()),
        Some(clash) => Err(LockError::invalid(format!(
            "the name {resource:?} would make the lock key {key:?}, which is {clash}: two structures on one key \
             corrupt each other, so pick another name"
        ))),
    }
}

/// Refuses a native prefix whose keys would be another library's keys that our releases write.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    // A prefix that is itself a peer's prefix, or starts with one: every native key would be that peer's key.
    for (peer, what) in PEER_WRITTEN {
        if prefix.starts_with(peer) {
            return Err(LockError::invalid(format!(
                "key prefix {prefix:?} would put this library's keys among {what}s ({peer}…)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;
    use crate::resource::{LockKeys, DEFAULT_PREFIX, MAX_RESOURCE_NAME};
    use crate::KeyLayout;

    /// Every shipped layout, and raw prefixes a user may give (the default native prefix's own among them).
    fn layouts() -> Vec<KeyLayout> {
        vec![
            KeyLayout::native(),
            KeyLayout::plain(),
            KeyLayout::prefixed(""),
            KeyLayout::prefixed("app:"),
            KeyLayout::prefixed(DEFAULT_PREFIX),
            KeyLayout::prefixed("wlp:sem:"),
            KeyLayout::python_redis_lock(),
            KeyLayout::pottery(),
            KeyLayout::spring("registry", true),
            KeyLayout::spring("registry", false),
            KeyLayout::spring("wlp", true),
            KeyLayout::spring("lock", false),
            KeyLayout::shedlock("default"),
            KeyLayout::redisson(),
        ]
    }

    /// The peers' layouts of property (ii).
    fn peer_layouts() -> Vec<KeyLayout> {
        vec![
            KeyLayout::python_redis_lock(),
            KeyLayout::pottery(),
            KeyLayout::spring("registry", true),
            KeyLayout::spring("lock", false),
            KeyLayout::shedlock("default"),
            KeyLayout::redisson(),
        ]
    }

    /// The native key space of `prefix`, restated from WIRE.md §2 (not computed by the code under test).
    fn is_native_key(prefix: &str, key: &str) -> bool {
        let Some(rest) = key.strip_prefix(prefix) else { return false };
        let rest = rest.strip_prefix("sem:").or_else(|| rest.strip_prefix("rw:")).unwrap_or(rest);
        rest == "wire" || rest.starts_with('{')
    }

    /// Every key (not channel) `name` writes under `layout` with native prefix `prefix`: `(key, is a lock key)`.
    fn written(layout: &KeyLayout, prefix: &str, name: &str) -> Option<Vec<(String, bool)>> {
        let keys = LockKeys::for_layout(layout, prefix, name).ok()?;
        let mut out = vec![(keys.lock().to_owned(), true)];
        out.extend([keys.fence(), keys.awaited(), keys.waiting()].map(|k| (k.to_owned(), false)));
        for aux in Aux::FIXED.into_iter().chain([Aux::Tick(7)]) {
            if !matches!(aux, Aux::Released | Aux::Leader) {
                out.push((keys.aux(aux), false));
            }
        }
        if let Some(signal) = keys.peer_release().and_then(|peer| peer.signal.clone()) {
            out.push((signal, false));
        }
        if layout.is_native() {
            out.push((crate::wire::key(prefix), false));
            for sub in [SEMAPHORE, RWLOCK] {
                let keys = LockKeys::new(&format!("{prefix}{sub}"), name).ok()?;
                out.push((keys.lock().to_owned(), false));
                out.extend(
                    keys.semaphore().into_iter().chain([keys.readers(), keys.fence().to_owned()]).map(|k| (k, false)),
                );
            }
        }
        Some(out)
    }

    /// The name whose lock key under `layout` would be `key`, if there is one.
    fn name_for(layout: &KeyLayout, prefix: &str, key: &str) -> Option<String> {
        use crate::layout::LayoutKind;
        match &layout.kind {
            LayoutKind::Native => LockKeys::resource_of(prefix, key),
            LayoutKind::Raw(raw) => key.strip_prefix(raw.prefix.as_str()).map(str::to_owned),
            LayoutKind::Redisson => Some(key.to_owned()),
        }
    }

    #[derive(Default, Debug)]
    struct Counts {
        names: usize,
        accepted: usize,
        refused: usize,
        inversions: usize,
    }

    /// Properties (i) and (ii) over one set of names; returns what it checked.
    fn check(names: &[String], prefix: &str) -> std::result::Result<Counts, TestCaseError> {
        let mut counts = Counts { names: names.len(), ..Counts::default() };
        let mut not_lock_keys = Vec::new();
        let mut native_keys = Vec::new();
        for name in names {
            for layout in layouts() {
                match written(&layout, prefix, name) {
                    Some(keys) => {
                        counts.accepted += 1;
                        for (key, is_lock) in keys {
                            if layout.is_native() {
                                native_keys.push(key.clone());
                            } else if peer_layouts().contains(&layout) && prefix == DEFAULT_PREFIX {
                                // (ii) A peer's key never lands in the default native key space.
                                prop_assert!(
                                    !is_native_key(prefix, &key),
                                    "{layout:?} {name:?} writes native key {key:?}"
                                );
                            }
                            if !is_lock {
                                not_lock_keys.push(key);
                            }
                        }
                    }
                    None => counts.refused += 1,
                }
            }
        }
        // (i) No accepted name's lock key, under any layout, is a key written that is not a lock key; (ii) no peer's
        // lock key is a native key. Each such key is turned back into the name that would reach it.
        for (key, native) in not_lock_keys.iter().map(|k| (k, false)).chain(native_keys.iter().map(|k| (k, true))) {
            for layout in layouts() {
                if native && layout.is_native() {
                    continue;
                }
                let Some(name) = name_for(&layout, prefix, key) else { continue };
                counts.inversions += 1;
                if let Ok(keys) = LockKeys::for_layout(&layout, prefix, &name) {
                    prop_assert_ne!(keys.lock(), key.as_str(), "{:?}: the name {:?} reaches {:?}", layout, name, key);
                }
            }
        }
        Ok(counts)
    }

    /// The names the issue lists, and the longest.
    fn named() -> Vec<String> {
        let mut names: Vec<String> = [
            "wire",
            "lock:wire",
            "wlp:wire",
            "{wire}",
            "{}",
            "}",
            "{",
            "a b",
            "a>b",
            ":",
            "é🦀",
            "orders/42",
            "{x}:fence",
            "sem:{x}",
            "rw:{x}",
            "lock-signal:x",
            "redisson_lock_token:{x}",
            "x}:queue",
            "{lock:x}:fence",
            "%7D",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        names.push("n".repeat(MAX_RESOURCE_NAME));
        names.push(format!("{}:fence", "}".repeat(MAX_RESOURCE_NAME - 6)));
        names
    }

    #[test]
    fn no_name_reaches_a_key_that_is_not_a_lock_key() {
        for prefix in [DEFAULT_PREFIX, "app:"] {
            let counts = check(&named(), prefix).unwrap();
            // Shown with --nocapture: what one run checked.
            eprintln!("prefix {prefix:?}: {counts:?}");
            assert!(counts.names > 0 && counts.refused > 0 && counts.inversions > 0, "{counts:?}");
        }
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "wire",
                "lock:",
                "wlp:",
                "{",
                "}",
                "{}",
                " ",
                ">",
                ":",
                "é",
                "🦀",
                "sem:",
                "rw:",
                ":fence",
                ":queue",
                ":tick:7",
                ":permit-grants",
                ":given-back",
                "lock-signal:",
                "redisson_lock_token:",
                "redlock:",
                "job-lock:default:",
                "registry:",
                "x",
                "%",
                "%7D",
                "{wire}",
            ])
            .prop_map(str::to_owned),
            "[a-z{}%: >é]{1,4}",
        ]
    }

    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec(fragment(), 1..6).prop_map(|parts| parts.concat())
    }

    /// The property over generated names (512 cases of 1 to 7 names, each built from fragments that reach keys of
    /// ours: `wire`, braces, suffixes, prefixes of every layout); the totals are shown with --nocapture.
    #[test]
    fn generated_names_reach_no_key_that_is_not_a_lock_key() {
        let mut runner =
            proptest::test_runner::TestRunner::new(ProptestConfig { cases: 512, ..ProptestConfig::default() });
        let total = std::cell::RefCell::new(Counts::default());
        runner
            .run(&prop::collection::vec(name(), 1..8), |names| {
                let counts = check(&names, DEFAULT_PREFIX)?;
                let mut total = total.borrow_mut();
                total.names += counts.names;
                total.accepted += counts.accepted;
                total.refused += counts.refused;
                total.inversions += counts.inversions;
                Ok(())
            })
            .unwrap();
        let total = total.into_inner();
        eprintln!("512 generated cases: {total:?}");
        assert!(total.refused > 0 && total.inversions > total.names, "{total:?}");
    }
}
