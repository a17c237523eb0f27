//! The version of the wire protocol this library speaks ([WIRE.md]), and where a client finds the version of the
//! keys under a prefix: so that a client of another major version refuses them instead of corrupting them.
//!
//! Before its first acquisition under a key prefix on a server, a [`Lock`](crate::Lock) runs the script
//! [`WIRE_VERSION`](crate::backend::scripts::WIRE_VERSION) on `<prefix>wire` (`GET`, and `SET` to its version when there is
//! none): nil means it wrote its version; otherwise the reply is the value already there. A different major version
//! fails the acquisition with [`LockError::WireVersion`](crate::LockError::WireVersion), and a value that is not a
//! version at all ([`is_version`]) with [`LockError::ForeignKey`](crate::LockError::ForeignKey), before any other
//! key is written. A different minor version is compatible. A server whose ACL refuses the command (`NOPERM`) is not
//! checked. Only the native layout checks: another library's keys are not ours to mark. Over Redlock each instance
//! is asked in its own branch of the fan-out: an instance of another version is never written and counts as failed,
//! so a majority of this version still decides (and one that does not answer is asked again ten seconds later,
//! delaying nothing but its own branch).
//!
//! The check is made again at the first acquisition after [`RECHECK_AFTER`] (five minutes), so a version key lost
//! to a `FLUSHALL`, a failover to a replica that had not seen it or an eviction is written again, and a process of
//! another version that appeared meanwhile is noticed.
//!
//! On the default prefix ([`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX)) the same check also reads the version key of
//! the old default prefix ([`LEGACY_PREFIX`](crate::LEGACY_PREFIX): `lock:wire`, read, never written): a version
//! there means processes of an older release hold their locks under `lock:`, which this process would not exclude,
//! and the acquisition fails with [`LockError::OldPrefixInUse`](crate::LockError::OldPrefixInUse) until the old
//! prefix is set explicitly. A rolling upgrade is safe in that order (old processes first, new ones refusing until
//! configured); an old process started *after* new ones have checked is noticed at their next check only, so a
//! rollback keeps the old prefix set explicitly.
//!
//! [WIRE.md]: https://github.com/redis-lock/redis-lock/blob/main/WIRE.md
//!
//! ```
//! assert_eq!(lock_core::wire::key("wlp:"), "wlp:wire");
//! assert!(lock_core::wire::compatible("1.7"));
//! assert!(!lock_core::wire::compatible("2.0"));
//! ```

/// How long a check of the version key holds before the next acquisition makes it again.
pub const RECHECK_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// The protocol version this library speaks: `<major>.<minor>`.
pub const VERSION: &str = "1.2";

/// The key that holds the protocol version of the keys under `prefix`: `<prefix>wire` (no native lock key, which
/// always has a `{…}` hash tag, has this name, and a name whose lock key under another library's layout would be it
/// is refused: see [`namespace`](crate::namespace)).
pub fn key(prefix: &str) -> String {
    format!("{prefix}{}", crate::namespace::VERSION)
}

/// Whether keys of protocol version `found` may be used by this library: the same major version.
pub fn compatible(found: &str) -> bool {
    major(found).is_some() && major(found) == major(VERSION)
}

/// Whether `found` is a protocol version at all (`<digits>.<digits>`): a value of any other form at a version key
/// was written by someone else (another library's lock of that name, say), and is reported as what it is
/// ([`LockError::ForeignKey`](crate::LockError::ForeignKey)), never as another version.
///
/// ```
/// assert!(lock_core::wire::is_version("1.0") && lock_core::wire::is_version("2.13"));
/// assert!(!lock_core::wire::is_version("ZmFrZS10b2tlbg==") && !lock_core::wire::is_version("1"));
/// ```
pub fn is_version(found: &str) -> bool {
    major(found).is_some()
}

fn major(version: &str) -> Option<&str> {
    let (major, minor) = version.split_once('.')?;
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    (digits(major) && digits(minor)).then_some(major)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_major_version_is_compatible() {
        assert!(compatible(VERSION));
        assert!(compatible("1.0") && compatible("1.12"));
        for other in ["2.0", "0.9", "10.0", "1", "1.", ".0", "one.zero", "", "1.0.1", " 1.0"] {
            assert!(!compatible(other), "{other:?}");
        }
    }
}
