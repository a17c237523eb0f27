//! A TCP fault proxy between a client and one server, controlled from the test.
//!
//! Point the client at [`FaultProxy::addr`] instead of the server, then inject faults while it runs: added
//! latency per direction (with jitter), dropped replies (requests still reach the server and are applied),
//! a blackhole (nothing gets through, connections stay open), reset of every open connection, and cut/heal
//! (refuse and close everything until healed). The proxy runs on its own thread and runtime, so it works under
//! any runtime the test uses, and stops when dropped.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Faults applied to one direction of traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionFaults {
    /// Added to every chunk.
    pub latency: Duration,
    /// Up to this much more, uniformly random per chunk.
    pub jitter: Duration,
    /// Discard what arrives and close the connection (the reply was lost, the connection with it).
    pub drop: bool,
    /// Hold what arrives until healed (a silent network; nothing is lost).
    pub stall: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    to_server: DirectionFaults,
    to_client: DirectionFaults,
    cut: bool,
}

/// Which way bytes flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client → server (requests).
    ToServer,
    /// Server → client (replies).
    ToClient,
}

struct Shared {
    faults: Mutex<Faults>,
    /// Bumped to close every open connection.
    generation: watch::Sender<u64>,
    connections: AtomicU64,
}

/// A running proxy; see the [module docs](self).
///
/// ```no_run
/// # fn demo(server: &lock_testkit::RedisServer) -> std::io::Result<()> {
/// use lock_testkit::FaultProxy;
/// use std::time::Duration;
///
/// let proxy = FaultProxy::start(server.addr())?;
/// // connect the client to proxy.url() ...
/// proxy.set_latency(lock_testkit::Direction::ToClient, Duration::from_millis(50), Duration::ZERO);
/// proxy.drop_replies(true); // the server applies requests, the client never hears back
/// proxy.heal();
/// # Ok(()) }
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of `upstream`. Callable from synchronous and async code
    /// alike: the proxy runs on a thread and runtime of its own, and nothing here blocks on a future.
    ///
    /// # Errors
    /// When no port can be bound or the proxy's thread cannot start.
    pub fn start(upstream: SocketAddr) -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        // Bound here with std (the port must be known before returning); handed to tokio on the proxy's thread.
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (generation, _) = watch::channel(0u64);
        let shared =
            Arc::new(Shared { faults: Mutex::new(Faults::default()), generation, connections: AtomicU64::new(0) });
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let accept_shared = shared.clone();
        let thread = std::thread::Builder::new().name(format!("fault-proxy-{}", addr.port())).spawn(move || {
            // The proxy thread's own runtime: this block_on is the thread's root, never inside async code.
            runtime.block_on(async move {
                let listener = match TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(err) => {
                        tracing::warn!(error = %err, "fault proxy cannot listen");
                        return;
                    }
                };
                tokio::select! {
                    _ = stop => {}
                    _ = accept_loop(listener, upstream, accept_shared) => {}
                }
            });
        })?;
        Ok(FaultProxy { addr, upstream, shared, shutdown: Some(shutdown), thread: Some(thread) })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.addr.port())
    }

    /// The server behind the proxy.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Connections accepted so far.
    pub fn connections_accepted(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    fn update(&self, f: impl FnOnce(&mut Faults)) {
        let mut faults = self.shared.faults.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut faults);
    }

    /// Adds `latency` (plus up to `jitter`) to every chunk flowing in `direction`.
    pub fn set_latency(&self, direction: Direction, latency: Duration, jitter: Duration) {
        self.update(|f| {
            let d = match direction {
                Direction::ToServer => &mut f.to_server,
                Direction::ToClient => &mut f.to_client,
            };
            d.latency = latency;
            d.jitter = jitter;
        });
    }

    /// Discards replies and closes the connection each was on (the server still receives and applies every request).
    pub fn drop_replies(&self, on: bool) {
        self.update(|f| f.to_client.drop = on);
    }

    /// Holds traffic both ways until healed; connections stay open (a silent network).
    pub fn blackhole(&self, on: bool) {
        self.update(|f| {
            f.to_server.stall = on;
            f.to_client.stall = on;
        });
    }

    /// Closes every open connection (clients see a reset) without changing the faults.
    pub fn reset_connections(&self) {
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// Closes every connection and refuses new ones until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.update(|f| f.cut = true);
        self.reset_connections();
    }

    /// Removes every fault.
    pub fn heal(&self) {
        self.update(|f| *f = Faults::default());
    }

    fn faults(shared: &Shared) -> Faults {
        *shared.faults.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.shutdown.take() {
            let _ = stop.send(());
        }
        self.reset_connections();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy").field("addr", &self.addr).field("upstream", &self.upstream).finish()
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else { continue };
        if FaultProxy::faults(&shared).cut {
            drop(client);
            continue;
        }
        shared.connections.fetch_add(1, Ordering::SeqCst);
        let shared = shared.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else { return };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let mut closed = shared.generation.subscribe();
            closed.mark_unchanged();
            let (client_r, client_w) = client.into_split();
            let (server_r, server_w) = server.into_split();
            let up = pump(client_r, server_w, shared.clone(), Direction::ToServer);
            let down = pump(server_r, client_w, shared.clone(), Direction::ToClient);
            tokio::select! {
                _ = async { tokio::join!(up, down) } => {}
                _ = closed.changed() => {}
            }
        });
    }
}

/// Forwards one direction. Latency is applied per chunk from the moment it was read, so chunks pipeline like on
/// a real slow link (a reader task stamps them, a writer task delivers each at its due time, in order).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Shared>,
    direction: Direction,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer_shared = shared.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let faults = FaultProxy::faults(&shared);
            let d = match direction {
                Direction::ToServer => faults.to_server,
                Direction::ToClient => faults.to_client,
            };
            if d.drop {
                // Lost bytes take their connection with them.
                break;
            }
            let jitter = if d.jitter.is_zero() {
                Duration::ZERO
            } else {
                Duration::from_nanos(rand::random::<u64>() % d.jitter.as_nanos().max(1) as u64)
            };
            let due = tokio::time::Instant::now() + d.latency + jitter;
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            while stalled(&writer_shared, direction) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

fn stalled(shared: &Shared, direction: Direction) -> bool {
    let faults = FaultProxy::faults(shared);
    match direction {
        Direction::ToServer => faults.to_server.stall,
        Direction::ToClient => faults.to_client.stall,
    }
}
