//! The version of the wire protocol this library speaks ([WIRE.md]), and where a client finds the version of the
//! keys under a prefix: so that a client of another major version refuses them instead of corrupting them.
//!
//! Before its first acquisition under a key prefix on a server, a [`Lock`](crate::Lock) runs the script
//! [`WIRE_VERSION`](crate::scripts::WIRE_VERSION) on `<prefix>wire` (`GET`, and `SET` to its version when there is
//! none): nil means it wrote its version; otherwise the reply is the version already there, and a different major
//! version fails the acquisition with [`LockError::WireVersion`](crate::LockError::WireVersion)
//! before any other key is written. A different minor version is compatible. A server whose ACL refuses the command
//! (`NOPERM`) is not checked. Only the native layout checks: another library's keys are not ours to mark. Over
//! Redlock each instance is asked in its own branch of the fan-out: an instance of another version is never written
//! and counts as failed, so a majority of this version still decides (and one that does not answer is asked again
//! ten seconds later, delaying nothing but its own branch).
//!
//! [WIRE.md]: https://github.com/redis-lock/redis-lock/blob/main/WIRE.md
//!
//! ```
//! assert_eq!(lock_core::wire::key("lock:"), "lock:wire");
//! assert!(lock_core::wire::compatible("1.7"));
//! assert!(!lock_core::wire::compatible("2.0"));
//! ```

/// The protocol version this library speaks: `<major>.<minor>`.
pub const VERSION: &str = "1.0";

/// The key that holds the protocol version of the keys under `prefix`: `<prefix>wire` (no lock key, which always has
/// a `{…}` hash tag, has this name).
pub fn key(prefix: &str) -> String {
    format!("{prefix}wire")
}

/// Whether keys of protocol version `found` may be used by this library: the same major version.
pub fn compatible(found: &str) -> bool {
    major(found).is_some() && major(found) == major(VERSION)
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
