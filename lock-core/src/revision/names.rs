//! Where a name's queue lives: `<prefix><name>/`, the prefix etcd's `concurrency` package (and `etcdctl lock`,
//! `etcdctl elect`, the server's lock service) puts its keys under, one key per contender: `<prefix><name>/<lease id
//! in lowercase hex>`.
//!
//! A `/` in a name is written `%2F` (and a `%` as `%25`): etcd's recipe reads a queue as every key under its prefix,
//! so the queue of `a` would otherwise hold the contenders of `a/b` (`a/b/<lease>`), and one of them could be taken
//! for its holder. Names without `/` or `%` are kept as they are, so our lock `N` under the prefix `P` is
//! `etcdctl lock PN`.

use std::borrow::Cow;

use crate::error::{LockError, Result};
use crate::resource::validate_name;

/// The default prefix of every queue (our Redis keys' `wlp:`, with etcd's separator).
pub const DEFAULT_PREFIX: &str = "wlp/";

/// `name` as it appears in a key: `/` as `%2F`, `%` as `%25`.
pub(crate) fn escaped(name: &str) -> Cow<'_, str> {
    if !name.contains(['/', '%']) {
        return Cow::Borrowed(name);
    }
    Cow::Owned(name.replace('%', "%25").replace('/', "%2F"))
}

/// The queue prefix of `name` under `prefix`: `<prefix><escaped name>/`.
///
/// # Errors
/// [`LockError::InvalidArgument`] for a name the library refuses everywhere (empty, too long, control characters),
/// or a prefix with control characters.
pub(crate) fn queue(prefix: &str, name: &str) -> Result<String> {
    validate_name(name)?;
    if prefix.chars().any(char::is_control) {
        return Err(LockError::invalid("key prefix must not contain control characters"));
    }
    Ok(format!("{prefix}{}/", escaped(name)))
}

/// A contender's key in `queue`: the queue prefix and the lease id in lowercase hex, as Go's `%x` writes it.
pub(crate) fn contender(queue: &str, lease: i64) -> String {
    format!("{queue}{lease:x}")
}

/// The key beside an election's queue that keeps a candidate's id (`<prefix><escaped name>%ids/<lease hex>`): no
/// escaped name ends in `%ids`, so it is under no queue.
pub(crate) fn id_key(queue: &str, lease: i64) -> String {
    let base = queue.strip_suffix('/').unwrap_or(queue);
    format!("{base}%ids/{lease:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_etcds_prefixes_and_never_nest() {
        assert_eq!(queue("wlp/", "orders").unwrap(), "wlp/orders/");
        assert_eq!(queue("", "mylock").unwrap(), "mylock/", "our lock N without a prefix is `etcdctl lock N`");
        assert_eq!(contender("mylock/", 0x32bf_a250_8113_c106), "mylock/32bfa2508113c106");
        assert_eq!(queue("wlp/", "a/b").unwrap(), "wlp/a%2Fb/");
        assert_eq!(queue("wlp/", "100%/x").unwrap(), "wlp/100%25%2Fx/");
        // No queue's prefix is a prefix of another name's queue or of any id key.
        let names = ["a", "a/b", "a%2Fb", "a%ids", "a/", "%", "a%"];
        for x in names {
            for y in names {
                let (qx, qy) = (queue("p/", x).unwrap(), queue("p/", y).unwrap());
                if x != y {
                    assert!(!qy.starts_with(&qx), "{x:?} would see {y:?}'s contenders");
                }
                assert!(!id_key(&qy, 7).starts_with(&qx), "{x:?} would see {y:?}'s ids");
            }
        }
        assert!(queue("p/", "").is_err());
        assert!(queue("p/", "a\nb").is_err());
    }
}
