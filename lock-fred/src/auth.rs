//! A password sent to a server that has none, which fred accepts silently (it drops the server's refusal as a
//! warning): this store reports it as [`LockError::Auth`](lock_core::LockError::Auth), as the redis-rs store does.

use std::time::Duration;

/// The source of the [`LockError::Auth`](lock_core::LockError::Auth) for a password the server does not need.
#[derive(Debug)]
pub(crate) struct UnneededPassword {
    /// The server's `host:port`.
    pub(crate) server: String,
}

impl std::fmt::Display for UnneededPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server at {} has no password, and this one was configured: is it the right server? (remove the \
             password from the URL if it is)",
            self.server
        )
    }
}

impl std::error::Error for UnneededPassword {}

/// Whether the server at `host:port` refuses `AUTH <password>` because it has no password (Redis and Valkey say
/// `ERR AUTH <password> called without any password configured…`, older servers `ERR Client sent AUTH, but no
/// password is set`): one plain-text connection, bounded by `bound`; any other outcome is `false`.
pub(crate) async fn password_unneeded(host: &str, port: u16, password: &str, bound: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        let command = format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{password}\r\n", password.len());
        stream.write_all(command.as_bytes()).await.ok()?;
        let mut reply = [0u8; 96];
        let n = stream.read(&mut reply).await.ok()?;
        let reply = String::from_utf8_lossy(reply.get(..n)?).into_owned();
        Some(reply.contains("called without any password configured") || reply.contains("no password is set"))
    };
    tokio::time::timeout(bound, probe).await.ok().flatten().unwrap_or(false)
}
