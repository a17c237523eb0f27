//! Whether a port that dropped a plain-text connection has a server speaking TLS there: the probe a backend runs
//! after its first connection failed, so that a `redis://` URL to a TLS port is a typed
//! [`LockError::Tls`](crate::LockError::Tls) saying so, not an `Unavailable` retried as if the server would come back.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{is_tls_answer, LockError, TlsOnlyServer, TLS_PROBE};

/// Sends [`TLS_PROBE`] to `host:port` and reads the first bytes back, within `bound`: a
/// [`LockError::Tls`](crate::LockError::Tls) naming the server when it answers as TLS does, else `None` (nothing
/// listens, a plain server waits for the rest of a command, the bound passed). Runs on a thread of its own (the probe
/// is a few blocking socket calls on an error path, and no runtime's socket type is assumed), awaited without
/// blocking the caller's.
///
/// # Cancel safety
/// Cancel-safe: the thread finishes on its own within `bound`.
pub async fn tls_only_server(host: &str, port: u16, bound: Duration) -> Option<LockError> {
    let server = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let answer: Arc<Mutex<Option<bool>>> = Arc::default();
    let done = Arc::new(event_listener::Event::new());
    let listener = done.listen();
    {
        let (answer, done, target) = (answer.clone(), done.clone(), server.clone());
        let spawned = std::thread::Builder::new().name("lock-tls-probe".into()).spawn(move || {
            let tls = probe(&target, bound).unwrap_or(false);
            *answer.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tls);
            done.notify(usize::MAX);
        });
        spawned.ok()?;
    }
    crate::rt::timeout("connect", bound.saturating_add(Duration::from_millis(100)), listener).await.ok()?;
    let tls = answer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).unwrap_or(false);
    tls.then(|| LockError::tls(TlsOnlyServer { server }))
}

fn probe(server: &str, bound: Duration) -> std::io::Result<bool> {
    use std::net::ToSocketAddrs;
    let addr = server.to_socket_addrs()?.next().ok_or_else(|| std::io::Error::other("no address"))?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, bound)?;
    stream.set_read_timeout(Some(bound))?;
    stream.set_write_timeout(Some(bound))?;
    stream.write_all(&TLS_PROBE)?;
    let mut answer = [0u8; 5];
    let n = stream.read(&mut answer)?;
    Ok(is_tls_answer(answer.get(..n).unwrap_or_default()))
}
