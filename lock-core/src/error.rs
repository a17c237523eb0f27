//! The one error type of the workspace and its `Result` alias.

use std::borrow::Cow;
use std::time::Duration;

/// A boxed error from a backend's client, kept as the [`source`](std::error::Error::source) of a [`LockError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`LockError`] as its error.
pub type Result<T, E = LockError> = std::result::Result<T, E>;

/// Everything that can go wrong while taking, holding or giving back a lock.
///
/// The client error that caused a variant is kept as its [`source`](std::error::Error::source) and is not
/// repeated in the `Display` text, so error reporters that walk the chain print each cause once.
///
/// ```
/// use lock_core::LockError;
/// use std::time::Duration;
///
/// let err = LockError::contended("orders", Duration::from_millis(250));
/// assert!(err.is_retryable());
/// assert!(!LockError::invalid("ttl must be positive").is_retryable());
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The caller passed something the lock cannot work with (empty resource name, zero or absurd TTL, …).
    /// Raised before any I/O.
    #[error("invalid argument: {0}")]
    InvalidArgument(Cow<'static, str>),

    /// Another owner held the lock for the whole wait budget.
    #[error("{}", HeldWords { resource, waited, never_expires: *never_expires, found })]
    #[non_exhaustive]
    Contended {
        /// The resource name as the caller gave it.
        resource: String,
        /// How long this call waited before giving up.
        waited: Duration,
        /// The key still had no expiry when the wait ended: another library's lock taken without a TTL (redis-py's
        /// and python-redis-lock's default), whose holder, if it crashed, blocks the lock until someone deletes the
        /// key (`lockctl force-release`). Asked once, when a wait on one resource gives up.
        never_expires: bool,
        /// What sits at the lock key, when it is a value no lock of any library writes (a list, a set, a sorted
        /// set, a stream: `TYPE`'s answer) and the key it sits at: another program writes that key, and no lock
        /// holder's release frees it. Asked once, when a wait on one resource gives up.
        found: Option<(String, String)>,
    },

    /// The server granted the lock, but its validity (`ttl − elapsed − drift`) was used up by the time the reply
    /// arrived. The lock was released again.
    #[error("lock {resource:?} was granted too late to be valid (the request took {elapsed:?})")]
    ValidityExhausted {
        /// The resource name as the caller gave it.
        resource: String,
        /// Time from before the request until the reply.
        elapsed: Duration,
    },

    /// The lock is no longer held by this owner (expired, taken over, released, or renewal gave up).
    #[error("lock {resource:?} is no longer held: {reason}")]
    Lost {
        /// The resource name as the caller gave it.
        resource: String,
        /// Why the holder lost it.
        reason: LostReason,
    },

    /// An election's call that needs the leadership ([`Leadership::proclaim`](crate::Leadership::proclaim)) found
    /// it lost: the lost signal had fired, or the server no longer holds this leader's token.
    #[error("not the leader of election {election:?}")]
    NotLeader {
        /// The election's name.
        election: String,
    },

    /// A key the lock needs holds a value of another type (the server answered `WRONGTYPE`; its words, the
    /// source, say what the key should hold).
    #[error("key {key:?} holds a value of another type")]
    WrongType {
        /// The key that holds the foreign value.
        key: String,
        /// The client's error.
        #[source]
        source: BoxError,
    },
    /// A network call did not complete within its deadline. A command may still have been applied; the lock
    /// released what it may have acquired.
    #[error("{operation} timed out after {after:?}{}", Site::of(at))]
    Timeout {
        /// The operation that timed out (`"acquire"`, `"release"`, `"extend"`, …).
        operation: &'static str,
        /// The deadline that passed.
        after: Duration,
        /// The server(s) it was sent to, when known.
        at: Option<Box<Site>>,
    },

    /// The server could not be reached, or the connection broke.
    #[error("lock server unavailable{}", Site::of(at))]
    Unavailable {
        /// The client's error.
        #[source]
        source: BoxError,
        /// The operation and the server(s), when known.
        at: Option<Box<Site>>,
    },

    /// The server refused our credentials, or its ACL refused a command to this user.
    #[error("authentication with the lock server failed{}", Site::of(at))]
    Auth {
        /// The client's error.
        #[source]
        source: BoxError,
        /// The operation and the server(s), when known.
        at: Option<Box<Site>>,
    },

    /// The TLS handshake failed: the server's certificate is not signed by a trusted CA, has expired or names
    /// another host, the server refused the client's certificate, or one side spoke TLS and the other did not. Not
    /// retryable: the settings must change.
    #[error("TLS handshake with the lock server failed{}", Site::of(at))]
    Tls {
        /// The client's error.
        #[source]
        source: BoxError,
        /// The operation and the server(s), when known.
        at: Option<Box<Site>>,
    },

    /// The server lacks something the lock needs (too old a version, say). Raised when connecting.
    #[error("unsupported lock server: {0}")]
    Unsupported(Cow<'static, str>),

    /// Fewer instances than the quorum granted the lock (Redlock).
    #[error("quorum not reached: {granted} of {total} instances granted, {required} required")]
    Quorum {
        /// Instances that granted the lock.
        granted: usize,
        /// Instances needed.
        required: usize,
        /// Instances asked.
        total: usize,
    },

    /// Fewer replicas than required acknowledged a grant (see
    /// [`LockOptions::with_replica_ack`](crate::LockOptions::with_replica_ack)); the grant was given back.
    #[error("grant acknowledged by {acknowledged} replicas, {required} required")]
    ReplicasShort {
        /// Replicas that acknowledged.
        acknowledged: u32,
        /// Replicas required.
        required: u32,
    },

    /// A multi-resource acquire on Redis Cluster named resources in several hash slots, which one atomic step cannot
    /// take, and [`CrossSlot::Reject`](crate::CrossSlot::Reject) (the default) was asked for. Raised before any
    /// I/O. Take them with [`CrossSlot::Ordered`](crate::CrossSlot::Ordered), or name resources that share a slot.
    #[error("resources {resources:?} span {slots} cluster slots; one atomic step cannot take them (see CrossSlot)")]
    CrossSlot {
        /// The resources, deduplicated, in slot order.
        resources: Vec<String>,
        /// How many slots they span.
        slots: usize,
    },

    /// A [fenced write](crate::fenced) presented a fence below the highest its resource has accepted: a newer
    /// holder has written, so this holder's lock was lost (its lease ran out, another process took it) whether or
    /// not it has noticed yet. Nothing was written. Stop working on the resource; a retry with the same fence is
    /// refused again.
    #[error("fence {presented} is stale: the resource has accepted fence {current} from a newer holder")]
    StaleFence {
        /// The fence the write presented.
        presented: u64,
        /// The highest fence the resource has accepted.
        current: u64,
    },

    /// The keys under this lock's prefix belong to another major version of the wire protocol (see
    /// [`wire`](crate::wire)): a client of that version wrote its version at `key`. Nothing was written. Run one
    /// version per prefix (or give the new one its own prefix while the old one drains).
    #[error("the keys under {key:?} are protocol version {found}; this library speaks {ours} and leaves them alone")]
    WireVersion {
        /// The key that holds the version (`<prefix>wire`).
        key: String,
        /// The version found there.
        found: String,
        /// The version this library speaks ([`wire::VERSION`](crate::wire::VERSION)).
        ours: &'static str,
    },

    /// A key this library keeps for itself holds something it did not write: another library's key sits where this
    /// library keeps one of its own (its protocol version key, say, under a prefix shared with another library).
    /// Nothing was written. Give this library a key prefix of its own.
    #[error("a key that is not this library's sits at {key:?} ({holds}); give this library a key prefix of its own")]
    ForeignKey {
        /// The key.
        key: String,
        /// What sits there, without its value (which may be another library's token: a capability).
        holds: String,
    },

    /// Processes of an older release of this library hold their locks under the old default prefix
    /// ([`LEGACY_PREFIX`](crate::LEGACY_PREFIX), whose version key holds a version) on this server, and this lock,
    /// on the new default prefix, would not exclude them. Nothing was written. Set the old prefix explicitly
    /// ([`Lock::with_key_prefix`](crate::Lock::with_key_prefix)) on every process until all are upgraded, then
    /// remove it everywhere at once (or drain the old processes first).
    #[error(
        "processes of an older release hold their locks under the old default prefix {prefix:?} on this server (its \
         version key {key:?} holds {found}), where this lock would not exclude them: set with_key_prefix({prefix:?}) \
         until every process is upgraded"
    )]
    OldPrefixInUse {
        /// The old prefix's version key.
        key: String,
        /// The version found there.
        found: String,
        /// The old default prefix.
        prefix: &'static str,
    },

    /// An operation needed an async runtime (to sleep, time out or spawn) and none of the enabled ones was
    /// running on this thread.
    #[error("no async runtime available for {0} (enable a lock-core runtime feature that matches your executor)")]
    NoRuntime(&'static str),

    /// Any other error the server or client reported.
    #[error("lock server error{}", Site::of(at))]
    Backend {
        /// The client's error.
        #[source]
        source: BoxError,
        /// The operation and the server(s), when known.
        at: Option<Box<Site>>,
    },
}

/// Where an I/O error happened: the operation and the server (`host:port`; every instance of a Redlock or node of a
/// Cluster, comma-separated), never a credential. Part of the error's `Display`: `lock server unavailable (release
/// on 127.0.0.1:6379)`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Site {
    /// The operation (`"connect"`, `"acquire"`, `"release"`, `"extend"`, …).
    pub operation: &'static str,
    /// The server(s), as `host:port`, when the store knows them.
    pub server: Option<String>,
}

impl Site {
    /// ` (operation on server)`, or nothing.
    fn of(at: &Option<Box<Site>>) -> String {
        match at.as_deref() {
            Some(Site { operation, server: Some(server) }) => format!(" ({operation} on {server})"),
            Some(Site { operation, server: None }) => format!(" ({operation})"),
            None => String::new(),
        }
    }
}

impl std::fmt::Debug for LockError {
    /// The kind and the one-line [`report`](LockError::report): what `main` prints for a `LockError` it returns
    /// (`Error: unavailable: lock server unavailable (connect on 127.0.0.1:6379): Connection refused (os error 111)`).
    /// The variant's fields are public for a program that needs them; `{:#?}` prints them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            return self.fields(f);
        }
        write!(f, "{}: {}", self.kind(), self.report())
    }
}

/// The source of an [`LockError::Auth`] for a command the server's ACL refused: which command, when known (inside
/// a script Redis names only the line; the backends find the command there), and the server's words.
#[derive(Debug)]
pub struct AclRefusal {
    /// The refused command (`INCRBY`, `WAIT`, …), when known.
    pub command: Option<String>,
    /// The server's error message.
    pub message: String,
}

impl std::fmt::Display for AclRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.command {
            Some(command) => write!(f, "the server's ACL refused {command} to this user ({})", self.message),
            None => write!(f, "the server's ACL refused a command to this user ({})", self.message),
        }
    }
}

impl std::error::Error for AclRefusal {}

/// The source of a [`LockError::Tls`] when a TLS URL points at a server that speaks plain TCP on that port: the
/// handshake got no TLS answer, and a plain-text `PING` (without credentials) did get a Redis answer.
#[derive(Debug)]
pub struct PlainTextServer {
    /// The server's `host:port`.
    pub server: String,
}

impl std::fmt::Display for PlainTextServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server at {} answers without TLS on that port: use a redis:// URL for it, or turn TLS on at the \
             server (tls-port)",
            self.server
        )
    }
}

impl std::error::Error for PlainTextServer {}

/// The source of a [`LockError::Tls`] when a plain-text URL points at a port where the server speaks TLS: the
/// connection was dropped at the first command, and a TLS `ClientHello` ([`TLS_PROBE`]) got a TLS answer.
#[derive(Debug)]
pub struct TlsOnlyServer {
    /// The server's `host:port`.
    pub server: String,
}

impl std::fmt::Display for TlsOnlyServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server at {} speaks TLS on that port: use a rediss:// URL for it", self.server)
    }
}

impl std::error::Error for TlsOnlyServer {}

/// A minimal TLS 1.2 `ClientHello` (two cipher suites, no extension): what a backend sends to a port that dropped its
/// plain-text connection, to tell a server speaking TLS there (it answers with a TLS record: see
/// [`is_tls_answer`]) from one that is down. A plain Redis server reads it as an incomplete command and waits.
pub const TLS_PROBE: [u8; 54] = [
    0x16, 0x03, 0x01, 0x00, 0x31, // handshake record, 49 bytes
    0x01, 0x00, 0x00, 0x2d, // ClientHello, 45 bytes
    0x03, 0x03, // TLS 1.2
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,    // random
    0x00, // no session id
    0x00, 0x04, 0xc0, 0x2f, 0x00, 0x2f, // ECDHE-RSA-AES128-GCM-SHA256, AES128-SHA
    0x01, 0x00, // no compression
    0x00, 0x00, // no extension
];

/// Whether `answer` (the first bytes a server sent back to [`TLS_PROBE`]) is a TLS record: a handshake (`0x16`) or an
/// alert (`0x15`, what OpenSSL answers to this hello), of version 3.x.
///
/// ```
/// assert!(lock_core::backend::is_tls_answer(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]));
/// assert!(!lock_core::backend::is_tls_answer(b"-ERR unknown command"));
/// ```
pub fn is_tls_answer(answer: &[u8]) -> bool {
    matches!(answer, [0x15 | 0x16, 0x03, ..])
}

/// The source of a [`LockError::Backend`] when the server a store connected to answered with something that is not
/// the Redis protocol (an HTTP server, say, on the wrong port): one line, not the client's parse error.
#[derive(Debug)]
pub struct NotRedis {
    /// The server's `host:port`.
    pub server: String,
}

impl std::fmt::Display for NotRedis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server at {} does not speak the Redis protocol (is it the right port?)", self.server)
    }
}

impl std::error::Error for NotRedis {}

/// An error with its causes on one line, each said once ([`LockError::report`]).
#[derive(Clone, Copy, Debug)]
pub struct Report<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Report<'_> {
    /// `what failed: why: why that`: the error's text, then each [`source`](std::error::Error::source) in turn,
    /// leaving out a cause whose text is already in the line (a client error that repeats its own cause, say).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut line = self.0.to_string();
        let mut cause = self.0.source();
        // Bounded: a cycle of sources is a bug elsewhere, but must not hang a log line.
        for _ in 0..16 {
            let Some(error) = cause else { break };
            let text = error.to_string();
            if !text.is_empty() && !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            cause = error.source();
        }
        f.write_str(&line)
    }
}

impl LockError {
    /// The error and its causes on one line, each cause once: `lock server unavailable: Connection refused (os
    /// error 111)`. `Display` says what failed and [`source`](std::error::Error::source) chains the causes (the
    /// convention error reporters such as `anyhow` walk); this is the line for a log or a terminal that prints
    /// errors without walking the chain. The library's own warnings use it.
    ///
    /// ```
    /// use lock_core::LockError;
    /// let err = LockError::unavailable(std::io::Error::other("connection refused"));
    /// assert_eq!(err.to_string(), "lock server unavailable");
    /// assert_eq!(err.report().to_string(), "lock server unavailable: connection refused");
    /// ```
    pub fn report(&self) -> Report<'_> {
        Report(self)
    }

    /// Builds [`LockError::InvalidArgument`].
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        LockError::InvalidArgument(message.into())
    }

    /// Wraps a client error as [`LockError::Backend`].
    pub fn backend(source: impl Into<BoxError>) -> Self {
        LockError::Backend { source: source.into(), at: None }
    }

    /// Wraps a client error as [`LockError::Unavailable`].
    pub fn unavailable(source: impl Into<BoxError>) -> Self {
        LockError::Unavailable { source: source.into(), at: None }
    }

    /// Wraps a client error as [`LockError::Auth`].
    pub fn auth(source: impl Into<BoxError>) -> Self {
        LockError::Auth { source: source.into(), at: None }
    }

    /// Wraps a client error as [`LockError::Tls`].
    pub fn tls(source: impl Into<BoxError>) -> Self {
        LockError::Tls { source: source.into(), at: None }
    }

    /// [`LockError::Timeout`] of `operation` after `after`.
    pub fn timeout(operation: &'static str, after: Duration) -> Self {
        LockError::Timeout { operation, after, at: None }
    }

    /// [`LockError::Contended`]: `resource` was held for the whole `waited`.
    pub fn contended(resource: impl Into<String>, waited: Duration) -> Self {
        LockError::Contended { resource: resource.into(), waited, never_expires: false, found: None }
    }

    /// The same error, saying where it happened (see [`Site`]) unless it already does: what a store does with every
    /// error it returns, and the engine with every store's.
    ///
    /// ```
    /// use lock_core::LockError;
    /// let err = LockError::unavailable(std::io::Error::other("connection refused")).at("release", Some("10.0.0.7:6379"));
    /// assert_eq!(err.to_string(), "lock server unavailable (release on 10.0.0.7:6379)");
    /// ```
    #[must_use]
    pub fn at(mut self, operation: &'static str, server: Option<&str>) -> Self {
        let site = match &mut self {
            LockError::Timeout { at, .. }
            | LockError::Unavailable { at, .. }
            | LockError::Auth { at, .. }
            | LockError::Tls { at, .. }
            | LockError::Backend { at, .. } => at,
            _ => return self,
        };
        if site.is_none() {
            *site = Some(Box::new(Site { operation, server: server.map(str::to_owned) }));
        }
        self
    }

    /// Where this error happened, when it says.
    pub fn site(&self) -> Option<&Site> {
        match self {
            LockError::Timeout { at, .. }
            | LockError::Unavailable { at, .. }
            | LockError::Auth { at, .. }
            | LockError::Tls { at, .. }
            | LockError::Backend { at, .. } => at.as_deref(),
            _ => None,
        }
    }

    /// The variant and its fields (`{:#?}`).
    fn fields(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct(self.kind());
        d.field("display", &self.to_string());
        if let Some(site) = self.site() {
            d.field("site", site);
        }
        if let Some(source) = std::error::Error::source(self) {
            d.field("source", &source);
        }
        d.finish()
    }

    /// Whether trying the same operation again later can succeed: contention, a too-slow grant, timeouts, an
    /// unreachable server and a missed quorum are transient; bad input, foreign keys, failed authentication,
    /// a lost lock and a missing runtime are not.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LockError::Contended { .. }
                | LockError::ValidityExhausted { .. }
                | LockError::Timeout { .. }
                | LockError::Unavailable { .. }
                | LockError::Quorum { .. }
                | LockError::ReplicasShort { .. }
        )
    }

    /// A short, fixed name of the variant (`"contended"`, `"timeout"`, `"wrong_type"`, …): the `outcome` that
    /// traces and metrics record, so a dashboard can group errors without parsing messages.
    ///
    /// ```
    /// use lock_core::LockError;
    /// assert_eq!(LockError::invalid("empty").kind(), "invalid_argument");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            LockError::InvalidArgument(_) => "invalid_argument",
            LockError::Contended { .. } => "contended",
            LockError::ValidityExhausted { .. } => "validity_exhausted",
            LockError::Lost { .. } => "lost",
            LockError::NotLeader { .. } => "not_leader",
            LockError::WrongType { .. } => "wrong_type",
            LockError::Timeout { .. } => "timeout",
            LockError::Unavailable { .. } => "unavailable",
            LockError::Auth { .. } => "auth",
            LockError::Tls { .. } => "tls",
            LockError::Unsupported(_) => "unsupported",
            LockError::Quorum { .. } => "quorum",
            LockError::ReplicasShort { .. } => "replicas_short",
            LockError::CrossSlot { .. } => "cross_slot",
            LockError::StaleFence { .. } => "stale_fence",
            LockError::WireVersion { .. } => "wire_version",
            LockError::ForeignKey { .. } => "foreign_key",
            LockError::OldPrefixInUse { .. } => "old_prefix_in_use",
            LockError::NoRuntime(_) => "no_runtime",
            LockError::Backend { .. } => "backend",
        }
    }

    /// Whether this error may come from a request the server applied, so that whatever it may have acquired must
    /// be released by token. Only errors raised before a request left (bad input, no runtime) are known to leave
    /// nothing behind: a server error can follow a write in the same script (an `INCRBY` after the `SET`), a `WAIT`
    /// refused by the ACL follows the grant, and a timeout or a broken connection hides whether it was applied.
    pub(crate) fn may_follow_a_write(&self) -> bool {
        !matches!(
            self,
            LockError::InvalidArgument(_)
                | LockError::NoRuntime(_)
                | LockError::Unsupported(_)
                | LockError::CrossSlot { .. }
                | LockError::StaleFence { .. }
                | LockError::WireVersion { .. }
                | LockError::ForeignKey { .. }
                | LockError::OldPrefixInUse { .. }
        )
    }
}

/// Why a lock is no longer held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The local validity deadline passed without a successful extension.
    Expired,
    /// The server no longer holds our token (the key expired and was taken, or was deleted).
    NotHeld,
    /// Renewal failed (network) until the validity deadline was about to pass.
    RenewalFailed,
    /// Renewal stopped because the configured maximum hold time or renewal count was reached.
    MaxHoldReached,
    /// The holder released the lock (or dropped its guard).
    Released,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "its validity deadline passed",
            LostReason::NotHeld => "the server no longer holds our token",
            LostReason::RenewalFailed => "renewal failed until the validity deadline",
            LostReason::MaxHoldReached => "the maximum hold time was reached",
            LostReason::Released => "it was released",
        })
    }
}

/// [`LockError::Contended`]'s words: who holds it, and why nobody will free it when that is known.
struct HeldWords<'a> {
    resource: &'a str,
    waited: &'a Duration,
    never_expires: bool,
    found: &'a Option<(String, String)>,
}

impl std::fmt::Display for HeldWords<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (resource, waited) = (self.resource, self.waited);
        match self.found {
            Some((kind, key)) => {
                let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
                write!(
                    f,
                    "lock {resource:?} is not free (waited {waited:?}): {article} {kind} sits at {key:?}, its key; \
                     another program writes that key, and no lock holder's release frees it (`lockctl audit` lists \
                     such keys)"
                )
            }
            None if self.never_expires => write!(
                f,
                "lock {resource:?} is held by another owner (waited {waited:?}); its key has no expiry, so a holder \
                 that crashed blocks it until the key is deleted"
            ),
            None => write!(f, "lock {resource:?} is held by another owner (waited {waited:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// A client error as backends wrap them: its own text, and a cause of its own.
    #[derive(Debug)]
    struct ClientError(&'static str, Option<std::io::Error>);

    impl std::fmt::Display for ClientError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for ClientError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_ref().map(|e| e as _)
        }
    }

    fn client(text: &'static str) -> BoxError {
        Box::new(ClientError(text, Some(std::io::Error::other("Connection refused (os error 111)"))))
    }

    /// One of every variant, as the library and its backends build them (the match below fails to compile when a
    /// variant is added without a case here).
    fn every_variant() -> Vec<LockError> {
        let all = vec![
            LockError::invalid("ttl must be positive"),
            LockError::contended("r", Duration::from_millis(250)),
            LockError::Contended {
                resource: "r".into(),
                waited: Duration::from_millis(250),
                never_expires: true,
                found: None,
            },
            LockError::Contended {
                resource: "r".into(),
                waited: Duration::from_millis(250),
                never_expires: true,
                found: Some(("list".into(), "wlp:{r}".into())),
            },
            LockError::ValidityExhausted { resource: "r".into(), elapsed: Duration::from_millis(12) },
            LockError::Lost { resource: "r".into(), reason: LostReason::Expired },
            LockError::NotLeader { election: "e".into() },
            LockError::WrongType {
                key: "lock:{r}".into(),
                source: client("WRONGTYPE lock key lock:{r} holds a value that is not a lock"),
            },
            LockError::timeout("acquire", Duration::from_secs(1)),
            LockError::timeout("release", Duration::from_secs(1)).at("release", Some("127.0.0.1:6379")),
            LockError::unavailable(client("connection to 127.0.0.1:6379 failed")),
            LockError::auth(Box::new(AclRefusal {
                command: Some("INCRBY".into()),
                message: "NOPERM this user has no permissions to run the 'incrby' command".into(),
            }) as BoxError),
            LockError::tls(Box::new(PlainTextServer { server: "127.0.0.1:6379".into() }) as BoxError),
            LockError::unavailable(client("could not connect")).at("extend", Some("127.0.0.1:6379")),
            LockError::Unsupported("Redis 7.0 or newer is needed".into()),
            LockError::Quorum { granted: 1, required: 2, total: 3 },
            LockError::ReplicasShort { acknowledged: 0, required: 1 },
            LockError::CrossSlot { resources: vec!["a".into(), "b".into()], slots: 2 },
            LockError::StaleFence { presented: 7, current: 9 },
            LockError::WireVersion { key: "wlp:wire".into(), found: "2.0".into(), ours: crate::wire::VERSION },
            LockError::ForeignKey { key: "wlp:wire".into(), holds: "a string that is not a protocol version".into() },
            LockError::OldPrefixInUse { key: "lock:wire".into(), found: "1.0".into(), prefix: crate::LEGACY_PREFIX },
            LockError::NoRuntime("sleep"),
            LockError::backend(client("ERR unknown command")),
        ];
        for err in &all {
            match err {
                LockError::InvalidArgument(_)
                | LockError::Contended { .. }
                | LockError::ValidityExhausted { .. }
                | LockError::Lost { .. }
                | LockError::NotLeader { .. }
                | LockError::WrongType { .. }
                | LockError::Timeout { .. }
                | LockError::Unavailable { .. }
                | LockError::Auth { .. }
                | LockError::Tls { .. }
                | LockError::Unsupported(_)
                | LockError::Quorum { .. }
                | LockError::ReplicasShort { .. }
                | LockError::CrossSlot { .. }
                | LockError::StaleFence { .. }
                | LockError::WireVersion { .. }
                | LockError::ForeignKey { .. }
                | LockError::OldPrefixInUse { .. }
                | LockError::NoRuntime(_)
                | LockError::Backend { .. } => {}
            }
        }
        all
    }

    /// Review finding 15: every variant's `Display` says what failed without repeating its cause; `source()`
    /// chains the causes; the one-line report says what failed and why, each cause exactly once, no clause twice.
    #[test]
    fn every_variant_says_what_failed_and_why_once() {
        for err in every_variant() {
            let display = err.to_string();
            let line = err.report().to_string();
            assert!(!display.is_empty() && line.starts_with(&display), "{err:?}: {line}");
            let mut cause = err.source();
            while let Some(source) = cause {
                let text = source.to_string();
                assert!(!display.contains(&text), "Display repeats its cause: {display}");
                assert_eq!(line.matches(&text).count(), 1, "the cause is not said exactly once: {line}");
                cause = source.source();
            }
            if err.source().is_some() {
                assert!(line.len() > display.len(), "the report says no why: {line}");
            }
            let clauses: Vec<&str> = line.split(": ").collect();
            for (i, clause) in clauses.iter().enumerate() {
                assert!(!clauses[i + 1..].contains(clause), "a clause is said twice: {line}");
            }
            for phrase in ["not a lock", "unavailable", "refused", "failed"] {
                assert!(line.matches(phrase).count() <= 1, "{phrase:?} said twice: {line}");
            }
        }
    }
}
