//! What a server's error reply means, on Redis 7.x and Valkey 8.x alike: the one classification both backends use.
//!
//! The code word a reply starts with (`WRONGTYPE`, `READONLY`, …) is the same on both servers, but some refusals
//! are worded differently, and one carries no code of its own: an ACL refusal inside a script is a plain `ERR`,
//! `ERR The user executing the script can't run this command or subcommand script: …` on Redis 7.0 and
//! `ERR ACL failure in script: User … has no permissions to run the 'incrby' command script: …` on Valkey 8 (and
//! Redis 7.2). A backend hands the server's words (as its client renders them) to [`ServerErrorKind::of`] and
//! maps the error by [`ServerErrorKind::into_lock_error`]; what the client itself reports (I/O, timeouts, TLS, its
//! configuration) stays the backend's to map.
//!
//! ```
//! use lock_core::backend::server_error::ServerErrorKind;
//!
//! let valkey = "ERR ACL failure in script: User locker has no permissions to run the 'incrby' command script: \
//!               e4b630ca3f4eca507701b11eb4f233603551fa65, on @user_script:1.";
//! assert_eq!(ServerErrorKind::of(valkey), ServerErrorKind::AclRefused);
//! assert_eq!(ServerErrorKind::of("READONLY You can't write against a read only replica."), ServerErrorKind::ReadOnly);
//! assert!(ServerErrorKind::ReadOnly.is_transient());
//! ```

use crate::error::{AclRefusal, BoxError, LockError};
use crate::seam::transport::Call;

/// What a server's error reply means. `#[non_exhaustive]`: servers add codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerErrorKind {
    /// The user's ACL refuses a command, key or channel: `NOPERM`, or inside a script an `ERR` that says so.
    AclRefused,
    /// The connection is not authenticated, or the credentials are wrong: `NOAUTH`, `WRONGPASS`.
    AuthFailed,
    /// A key holds a value of another type: `WRONGTYPE` (the server's, or one of our scripts').
    WrongType,
    /// The script cache lacks the script: `NOSCRIPT` (a backend sends the body with `EVAL` then; never the
    /// caller's to see).
    NoScript,
    /// The node is a replica (a primary demoted by a failover): `READONLY`.
    ReadOnly,
    /// A replica whose link to its primary is down refuses to serve stale data: `MASTERDOWN`.
    PrimaryDown,
    /// The server is loading its dataset into memory: `LOADING`.
    Loading,
    /// A script has run past the busy threshold; the server answers nothing else until it ends: `BUSY`.
    Busy,
    /// A multi-key command during a slot migration, its keys split between nodes: `TRYAGAIN`.
    TryAgain,
    /// The cluster cannot serve the slot (nodes down, or the slot unassigned): `CLUSTERDOWN`.
    ClusterDown,
    /// The slot lives on another node: `MOVED` (a Cluster client follows it; reaching the lock, the topology changed
    /// under the client, or a single-server URL names a Cluster node).
    Moved,
    /// The key is migrating to another node: `ASK` (as `MOVED`).
    Ask,
    /// `maxmemory` is reached and the eviction policy frees nothing for the write: `OOM`.
    OutOfMemory,
    /// Any other error.
    Other,
}

/// The code words, in the order a reply's first one is looked for.
const CODES: [(&str, ServerErrorKind); 14] = [
    ("NOPERM", ServerErrorKind::AclRefused),
    ("NOAUTH", ServerErrorKind::AuthFailed),
    ("WRONGPASS", ServerErrorKind::AuthFailed),
    ("WRONGTYPE", ServerErrorKind::WrongType),
    ("NOSCRIPT", ServerErrorKind::NoScript),
    ("READONLY", ServerErrorKind::ReadOnly),
    ("MASTERDOWN", ServerErrorKind::PrimaryDown),
    ("LOADING", ServerErrorKind::Loading),
    ("BUSY", ServerErrorKind::Busy),
    ("TRYAGAIN", ServerErrorKind::TryAgain),
    ("CLUSTERDOWN", ServerErrorKind::ClusterDown),
    ("MOVED", ServerErrorKind::Moved),
    ("ASK", ServerErrorKind::Ask),
    ("OOM", ServerErrorKind::OutOfMemory),
];

/// The words of an ACL refusal inside a script, which comes as a plain `ERR`: Redis 7.0's, then Valkey 8's (and
/// Redis 7.2's) two parts.
const SCRIPT_ACL_PHRASES: [&str; 3] =
    ["can't run this command or subcommand", "ACL failure in script", "has no permissions to run the '"];

impl ServerErrorKind {
    /// Classifies an error by its text: the server's reply, or a client's rendering of it that keeps the server's
    /// words (`NOPERM: this user …`, `"WRONGTYPE": Operation …`). The reply's code is the first code word in the text
    /// standing as a word of its own (so a key named `lock:{OOM}` in a message is not taken for one).
    pub fn of(message: &str) -> Self {
        if SCRIPT_ACL_PHRASES.iter().any(|phrase| message.contains(phrase)) {
            return ServerErrorKind::AclRefused;
        }
        // A password sent to a server that has none: `ERR AUTH <password> called without any password configured for
        // the default user` (Redis and Valkey). The credentials are wrong for this server, whichever client sent them.
        if message.contains("called without any password configured") {
            return ServerErrorKind::AuthFailed;
        }
        // A request of more than ten parts from a client that has not authenticated: Redis and Valkey refuse it with
        // `Protocol error: unauthenticated multibulk length` (and close the connection) instead of `NOAUTH`. It
        // says the same: the connection has no credentials.
        if message.contains("unauthenticated multibulk") || message.contains("unauthenticated bulk") {
            return ServerErrorKind::AuthFailed;
        }
        let first = message
            .split(|c: char| c.is_whitespace() || matches!(c, ':' | '-' | '(' | ',' | '"' | '`'))
            .find_map(|word| CODES.iter().find(|(code, _)| *code == word).map(|(_, kind)| *kind));
        first.unwrap_or(ServerErrorKind::Other)
    }

    /// The [`LockError`] a reply of this kind means: `message` is the reply's text (see [`of`](Self::of)),
    /// `call` the call that got it (its keys name the key of a `WRONGTYPE`), `source` the client's error, kept as
    /// the source.
    ///
    /// - an ACL refusal: [`LockError::Auth`] with an [`AclRefusal`] naming the command when it can be known;
    /// - failed authentication: [`LockError::Auth`];
    /// - `WRONGTYPE` on a call: [`LockError::WrongType`] naming the key;
    /// - a transient condition ([`is_transient`](Self::is_transient)): [`LockError::Unavailable`];
    /// - `NOSCRIPT` (a backend that failed to send the body), [`Other`](Self::Other), and `WRONGTYPE` without a
    ///   call: [`LockError::Backend`]. A backend that knows more about an `Other` error (its client's own kinds)
    ///   maps it itself instead.
    pub fn into_lock_error(self, message: &str, call: Option<&Call<'_>>, source: BoxError) -> LockError {
        match self {
            ServerErrorKind::AclRefused => LockError::auth(acl_refusal(message)),
            ServerErrorKind::AuthFailed => LockError::Auth { source, at: None },
            ServerErrorKind::WrongType => match call {
                Some(call) => LockError::WrongType { key: call.key_named_in(message).to_owned(), source },
                None => LockError::Backend { source, at: None },
            },
            kind if kind.is_transient() => LockError::Unavailable { source, at: None },
            _ => LockError::Backend { source, at: None },
        }
    }

    /// Whether the condition passes by itself and the same call can succeed later: a replica or loading node during
    /// a failover or restart, a busy script, a slot moving or unserved, memory full. Such errors are
    /// [`LockError::Unavailable`], retried within a wait budget like contention.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ServerErrorKind::ReadOnly
                | ServerErrorKind::PrimaryDown
                | ServerErrorKind::Loading
                | ServerErrorKind::Busy
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::OutOfMemory
        )
    }
}

/// The [`AclRefusal`] an ACL error message describes: the command it names (`… run the 'incrby' command`, on both
/// servers, inside scripts too on Valkey), or else the one on the line the message names of the lock-core script
/// whose SHA-1 it names (Redis 7.0 names only the line).
pub fn acl_refusal(message: &str) -> AclRefusal {
    let quoted = message
        .split_once("to run the '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command.to_ascii_uppercase())
        .filter(|command| !command.is_empty());
    let scripted = || {
        crate::seam::scripts::script_sha(message)
            .and_then(crate::seam::scripts::by_sha1)
            .and_then(|script| crate::seam::scripts::refused_command(script.body(), message))
    };
    AclRefusal { command: quoted.or_else(scripted), message: message.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The replies Redis 7.0.15 and Valkey 8.1.8 sent (captured from real servers; the server cases of
    /// lock-testkit provoke them live through both backends).
    #[test]
    fn both_servers_replies_mean_the_same() {
        use ServerErrorKind::*;
        let cases: &[(&str, ServerErrorKind)] = &[
            ("NOPERM this user has no permissions to run the 'incrby' command", AclRefused),
            ("NOPERM User locker has no permissions to run the 'incrby' command", AclRefused),
            (
                "ERR The user executing the script can't run this command or subcommand script: \
                 e4b630ca3f4eca507701b11eb4f233603551fa65, on @user_script:1.",
                AclRefused,
            ),
            (
                "ERR ACL failure in script: User locker has no permissions to run the 'incrby' command script: \
                 e4b630ca3f4eca507701b11eb4f233603551fa65, on @user_script:1.",
                AclRefused,
            ),
            ("NOPERM No permissions to access a key", AclRefused),
            ("NOAUTH Authentication required.", AuthFailed),
            ("Protocol error: unauthenticated multibulk length", AuthFailed),
            ("Protocol error: unauthenticated bulk length", AuthFailed),
            ("WRONGPASS invalid username-password pair or user is disabled.", AuthFailed),
            ("WRONGTYPE Operation against a key holding the wrong kind of value", WrongType),
            ("WRONGTYPE lock key lock:{orders} holds a value that is not a lock", WrongType),
            ("NOSCRIPT No matching script. Please use EVAL.", NoScript),
            ("NOSCRIPT No matching script.", NoScript),
            ("READONLY You can't write against a read only replica.", ReadOnly),
            ("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", PrimaryDown),
            ("LOADING Redis is loading the dataset in memory", Loading),
            ("LOADING Valkey is loading the dataset in memory", Loading),
            ("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", Busy),
            ("BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", Busy),
            ("TRYAGAIN Multiple keys request during rehashing of slot", TryAgain),
            ("CLUSTERDOWN Hash slot not served", ClusterDown),
            ("CLUSTERDOWN The cluster is down", ClusterDown),
            ("MOVED 3999 127.0.0.1:6381", Moved),
            ("ASK 3999 127.0.0.1:6381", Ask),
            ("OOM command not allowed when used memory > 'maxmemory'.", OutOfMemory),
            (
                "OOM command not allowed when used memory > 'maxmemory'. script: \
                 0a9f75e991483d02789696e4c90d26c10395863e, on @user_script:1.",
                OutOfMemory,
            ),
            ("ERR unknown command 'FOO'", Other),
            // Clients' renderings keep the server's words.
            ("NOPERM: this user has no permissions to run the 'wait' command", AclRefused),
            ("An error was signalled by the server - ResponseError: WRONGTYPE Operation", WrongType),
            ("AUTH failed: WRONGPASS invalid username-password pair", AuthFailed),
            // redis-rs 1.x quotes the code.
            ("\"WRONGTYPE\": Operation against a key holding the wrong kind of value", WrongType),
            // A code word inside a key name is not the reply's code; the reply's own comes first.
            ("WRONGTYPE lock key lock:{x OOM y} holds a value that is not a lock", WrongType),
            ("ERR something about lock:{BUSY}", Other),
        ];
        for (message, kind) in cases {
            assert_eq!(ServerErrorKind::of(message), *kind, "{message}");
        }
    }

    #[test]
    fn refusals_name_the_command_on_both_servers() {
        let redis = acl_refusal("NOPERM this user has no permissions to run the 'incrby' command");
        let valkey = acl_refusal(
            "ERR ACL failure in script: User locker has no permissions to run the 'incrby' command script: \
             e4b630ca3f4eca507701b11eb4f233603551fa65, on @user_script:1.",
        );
        assert_eq!(redis.command.as_deref(), Some("INCRBY"));
        assert_eq!(valkey.command.as_deref(), Some("INCRBY"));
        assert_eq!(acl_refusal("NOPERM No permissions to access a key").command, None);
    }

    #[test]
    fn each_kind_is_the_typed_error_it_means() {
        let source = || -> BoxError { "client error".into() };
        let keys = ["lock:{a}"];
        let call = Call::plain("acquire", "SET", &keys, &[]);
        let typed = |message: &str| ServerErrorKind::of(message).into_lock_error(message, Some(&call), source());
        assert!(matches!(typed("NOPERM x"), LockError::Auth { .. }));
        assert!(matches!(typed("WRONGPASS x"), LockError::Auth { .. }));
        assert!(matches!(typed("WRONGTYPE x lock:{a}"), LockError::WrongType { key, .. } if key == "lock:{a}"));
        for transient in ["READONLY x", "MASTERDOWN x", "LOADING x", "BUSY x", "TRYAGAIN x", "CLUSTERDOWN x"] {
            let err = typed(transient);
            assert!(matches!(&err, LockError::Unavailable { .. }), "{transient}: {err:?}");
            assert!(err.is_retryable());
        }
        for transient in ["MOVED 1 h:1", "ASK 1 h:1", "OOM x"] {
            assert!(matches!(typed(transient), LockError::Unavailable { .. }), "{transient}");
        }
        assert!(matches!(typed("NOSCRIPT x"), LockError::Backend { .. }));
        assert!(matches!(typed("ERR other"), LockError::Backend { .. }));
        let without_call = ServerErrorKind::WrongType.into_lock_error("WRONGTYPE x", None, source());
        assert!(matches!(without_call, LockError::Backend { .. }));
    }
}
