//! Resource names and the Redis key layout derived from them.

use crate::error::{LockError, Result};

/// The key prefix locks use unless told otherwise.
pub const DEFAULT_PREFIX: &str = "lock:";

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
///
/// ```
/// let keys = lock_core::LockKeys::new("lock:", "orders/42")?;
/// assert_eq!(keys.lock(), "lock:{orders/42}");
/// assert_eq!(keys.fence(), "lock:{orders/42}:fence");
/// assert_eq!(keys.channel(), "lock:{orders/42}:released");
/// assert_eq!(keys.awaited(), "lock:{orders/42}:awaited");
/// assert_eq!(lock_core::LockKeys::new("lock:", "a}b")?.lock(), "lock:{a%7Db}");
/// assert!(lock_core::LockKeys::new("lock:", "").is_err());
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LockKeys {
    resource: String,
    lock: String,
    fence: String,
    channel: String,
    awaited: String,
}

impl LockKeys {
    /// Derives the keys for `resource` under `prefix`.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] when the resource name is empty or the prefix contains `{` or `}` (which
    /// would move the hash tag).
    pub fn new(prefix: &str, resource: &str) -> Result<Self> {
        if resource.is_empty() {
            return Err(LockError::invalid("resource name must not be empty"));
        }
        validate_prefix(prefix)?;
        let mut lock = String::with_capacity(prefix.len() + resource.len() + 2);
        lock.push_str(prefix);
        lock.push('{');
        for c in resource.chars() {
            match c {
                '%' => lock.push_str("%25"),
                '{' => lock.push_str("%7B"),
                '}' => lock.push_str("%7D"),
                c => lock.push(c),
            }
        }
        lock.push('}');
        Ok(LockKeys {
            resource: resource.to_owned(),
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:released"),
            awaited: format!("{lock}:awaited"),
            lock,
        })
    }

    /// The resource name as the caller gave it.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The key that holds the owner token.
    pub fn lock(&self) -> &str {
        &self.lock
    }

    /// The key that holds the fencing counter.
    pub fn fence(&self) -> &str {
        &self.fence
    }

    /// The channel a release publishes on.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The mark a try that found the lock held leaves, so that the release announces itself (see
    /// [`RELEASE`](crate::scripts::RELEASE)); with nobody waiting, a release publishes nothing.
    pub fn awaited(&self) -> &str {
        &self.awaited
    }
}

/// Checks a key prefix.
///
/// # Errors
/// [`LockError::InvalidArgument`] when it contains `{` or `}`.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.contains(['{', '}']) {
        return Err(LockError::invalid("key prefix must not contain '{' or '}' (it would move the hash tag)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bad_prefix_rejected() {
        assert!(LockKeys::new("{p}:", "x").is_err());
        assert!(LockKeys::new("", "x").is_ok());
    }
}
