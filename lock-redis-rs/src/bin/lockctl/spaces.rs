//! Where each primitive keeps its keys under the prefix, and what a name's keys say it is.
//!
//! A lock, a fair lock, a multi-lock's resources, a job's runs and an election live under the prefix itself
//! (`wlp:{name}`); a read-write lock under the prefix and `rw:`, a semaphore under the prefix and `sem:`. An operator
//! names a resource without knowing which it is: every space is looked at.

use lock_redis_rs::lock_core::{Inspection, Lock, LockKeys};

/// One of the spaces primitives keep their keys in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Space {
    /// The lock key's own: a lock, a fair lock, a multi-lock's resource, a job, an election.
    Plain,
    /// A read-write lock's.
    Rw,
    /// A semaphore's.
    Sem,
}

impl Space {
    /// Every space, in the order they are shown.
    pub(crate) const ALL: [Space; 3] = [Space::Plain, Space::Rw, Space::Sem];

    /// The key prefix of this space under `base`.
    pub(crate) fn prefix(self, base: &str) -> String {
        match self {
            Space::Plain => base.to_owned(),
            Space::Rw => format!("{base}rw:"),
            Space::Sem => format!("{base}sem:"),
        }
    }

    /// `lock` looking at this space.
    pub(crate) fn lock(self, lock: &Lock, base: &str) -> Lock {
        lock.clone().with_key_prefix(self.prefix(base))
    }

    /// The key that records a holder of a name in this space, and the name, if `key` is one: the lock key (a
    /// read-write lock's writer too), a read-write lock's readers, a semaphore's permits. Other keys of a name
    /// (fence, channel, queue …) name nothing new.
    pub(crate) fn name_of(base: &str, key: &str) -> Option<(Space, String)> {
        // The longer prefixes first: `wlp:rw:{x}` also starts with `lock:`, but is no plain lock key (`rw:` is not
        // a tag).
        for space in [Space::Rw, Space::Sem, Space::Plain] {
            let prefix = space.prefix(base);
            let candidates = match space {
                Space::Plain => [Some(key), None],
                Space::Rw => [Some(key), key.strip_suffix(":readers")],
                Space::Sem => [key.strip_suffix(":permits"), None],
            };
            if let Some(name) = candidates.into_iter().flatten().find_map(|k| LockKeys::resource_of(&prefix, k)) {
                return Some((space, name));
            }
        }
        None
    }
}

/// What a name in `space` is, from what its keys hold (`lock` when nothing tells it apart).
pub(crate) fn kind(space: Space, seen: &Inspection) -> &'static str {
    match space {
        Space::Rw => "rwlock",
        Space::Sem => "semaphore",
        Space::Plain if seen.record_field("term").is_some() => "election",
        Space::Plain if seen.record_field("outcome").is_some() || seen.record_field("started_ms").is_some() => "job",
        Space::Plain if seen.queued() > 0 => "fair_lock",
        Space::Plain => "lock",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_holder_key_names_its_space_and_name() {
        let cases = [
            ("wlp:{a}", Some((Space::Plain, "a"))),
            ("wlp:rw:{a}", Some((Space::Rw, "a"))),
            ("wlp:rw:{a}:readers", Some((Space::Rw, "a"))),
            ("wlp:sem:{a}:permits", Some((Space::Sem, "a"))),
            ("wlp:{a}:fence", None),
            ("wlp:sem:{a}", None),
            ("wlp:{rw:x}", Some((Space::Plain, "rw:x"))),
            ("other:{a}", None),
        ];
        for (key, want) in cases {
            let got = Space::name_of("wlp:", key);
            assert_eq!(got, want.map(|(s, n)| (s, n.to_owned())), "{key}");
        }
    }
}
