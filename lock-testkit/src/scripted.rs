//! A scripted store: a [`LockStore`] whose every call can be held at a gate, delayed, failed before it applies or
//! failed after it applied, and whose release notifications can be dropped, delayed or reordered.
//!
//! Interleavings that a real server produces only by chance (a reply lost after the server applied a write, a
//! release that reaches the server after the waiter it woke, a notification that never arrives) become one line
//! each, so a test can force them every time. A [`ScriptedServer`] is one in-memory "server" (a
//! [`MemoryStore`] plus pub/sub); each [`ScriptedServer::client`] is one client of it (one process, say), with its
//! own release hub and subscriptions, exactly as two stores of a Redis backend share one `redis-server`.
//!
//! ```
//! use lock_core::{Lock, LockOptions};
//! use lock_testkit::scripted::{Fault, Op, ScriptedServer};
//! use std::time::Duration;
//!
//! # lock_testkit::runtime::tokio(async {
//! let server = ScriptedServer::new();
//! let lock = Lock::new(server.client());
//! // The next release is applied by the server, but its reply is lost.
//! server.once(Op::Release, Fault::fail_after_unavailable());
//! let guard = lock.try_acquire("job", &LockOptions::new(Duration::from_secs(5))).await?.expect("free");
//! assert!(guard.release().await.is_err());
//! assert_eq!(server.memory().held_count(), 0, "the release was applied all the same");
//! # Ok::<(), lock_core::LockError>(())
//! # }).unwrap();
//! ```
//!
//! A backend author can run the same scenarios over their own store: wrap it with [`ScriptedServer::over`]
//! (faults and gates then apply to calls on the real store; notifications still come from the store's own hub).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use event_listener::Event;
use lock_core::backend::{
    AcquireAllReply, AcquireAllRequest, AcquireReply, AcquireRequest, Confirmation, ExtendReply, ReleaseHub,
    SubscriptionControl,
};
use lock_core::{LockError, LockKeys, LockStore, MemoryStore, ReleaseOutcome, Result, Token};

use crate::runtime::sleep;

/// The store operation a call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// [`LockStore::acquire`].
    Acquire,
    /// [`LockStore::release`].
    Release,
    /// [`LockStore::extend`].
    Extend,
    /// [`LockStore::raise_fence`].
    RaiseFence,
    /// Drawing a fencing token on demand (the `fence` call, [`lock_core::Fencing::OnDemand`]).
    Fence,
}

/// One call a client made, as a rule sees it (before the call runs).
#[derive(Clone, Debug)]
pub struct Call {
    /// Which client of the server made it (0 for the first [`ScriptedServer::client`]).
    pub client: usize,
    /// The operation.
    pub op: Op,
    /// The resource of the lock.
    pub resource: String,
    /// The owner token the call carries.
    pub token: Token,
    /// Position among all calls this server received (from 0).
    pub seq: usize,
}

/// The error an injected fault returns. Each carries a source whose text contains `"injected"`, so a test can
/// tell an injected error from one the code under test made up ([`is_injected`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Injected {
    /// [`LockError::Unavailable`]: the connection broke.
    Unavailable,
    /// [`LockError::Timeout`]: no reply in time.
    Timeout,
    /// [`LockError::Backend`]: a server error (non-retryable).
    Backend,
    /// [`LockError::Auth`]: refused by the server's ACL (non-retryable), like `NOPERM` on a `WAIT`.
    Auth,
}

impl Injected {
    /// The error this stands for.
    pub fn error(self) -> LockError {
        let source = || std::io::Error::other("injected by the scripted store");
        match self {
            Injected::Unavailable => LockError::unavailable(source()),
            Injected::Timeout => LockError::timeout("injected", Duration::ZERO),
            Injected::Backend => LockError::backend(source()),
            Injected::Auth => LockError::auth(source()),
        }
    }
}

/// Whether `err` came from a fault the scripted store injected.
pub fn is_injected(err: &LockError) -> bool {
    use std::error::Error as _;
    match err {
        LockError::Timeout { operation, .. } => *operation == "injected",
        other => other.source().is_some_and(|s| s.to_string().contains("injected")),
    }
}

/// What a scripted call does instead of (or besides) running normally.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Fault {
    /// Wait at the gate until it opens, then run.
    Gate(Gate),
    /// Run, then wait at the gate before replying.
    GateReply(Gate),
    /// Sleep, then run.
    Delay(Duration),
    /// Run, then sleep before replying.
    DelayReply(Duration),
    /// Yield to the executor this many times, then run (cancellation points that cost no time).
    Yield(u32),
    /// Return the error without running: nothing was applied.
    FailBefore(Injected),
    /// Run, then return the error instead of the reply: the server applied the call.
    FailAfter(Injected),
    /// Run, then never reply (the caller's timeout fires).
    Hang,
    /// A request and its reply as separate steps, each held at its own gate (a model checker's schedule drives
    /// them one at a time): wait at `request`; then, if `applied`, run and wait at `reply`; then answer with the
    /// reply, or with `lost` instead (after the call applied, or without running it when not `applied`).
    Staged {
        /// Where the request waits before it reaches the server.
        request: Gate,
        /// Whether the server applies it.
        applied: bool,
        /// Where the reply waits (after the call applied).
        reply: Gate,
        /// The error the caller sees instead of the reply, if the request or reply is lost.
        lost: Option<Injected>,
    },
}

impl Fault {
    /// The call is applied, and its caller sees the connection break.
    pub fn fail_after_unavailable() -> Self {
        Fault::FailAfter(Injected::Unavailable)
    }
}

/// What happens to one release notification on its way to one subscribed client.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Delivery {
    /// Delivered at once (inside the release, before its reply).
    Now,
    /// Lost.
    Drop,
    /// Delivered after this long (later notifications may overtake it).
    After(Duration),
    /// Delivered when the gate opens.
    Gate(Gate),
}

/// One notification about to be delivered, as a notification rule sees it.
#[derive(Clone, Debug)]
pub struct Notification {
    /// The channel.
    pub channel: String,
    /// The client that released.
    pub from: usize,
    /// The client it goes to.
    pub to: usize,
}

type CallRule = Box<dyn FnMut(&Call) -> Option<Fault> + Send>;
type NoteRule = Box<dyn FnMut(&Notification) -> Option<Delivery> + Send>;

/// What became of one call, for [`ScriptedServer::log`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Logged {
    /// The call.
    pub call: Call,
    /// The fault applied to it, if any.
    pub fault: Option<Fault>,
    /// Whether the server applied it (ran it against the data).
    pub applied: bool,
    /// When it started.
    pub at: Instant,
    /// How its caller's future ended, and when: `None` while it is still pending.
    pub ended: Option<(Ended, Instant)>,
    /// The fencing floor an acquire carried (a Redlock's, after this client's
    /// [`clock_lag`](ScriptedStore::with_clock_lag)): what a request still on its way, once its caller gave up, would
    /// apply with.
    pub fence_floor: Option<u64>,
}

/// How a scripted call's future ended (see [`Logged::ended`]): what tells a call the caller gave up on (its own
/// bound passed, or it was cancelled) from one that answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended {
    /// It returned the server's reply.
    Replied,
    /// It returned an error (an injected one, or the store's).
    Failed,
    /// Its future was dropped before it returned: the caller timed out or was cancelled.
    Dropped,
}

impl Logged {
    /// One line for a trace: when (from `origin`), who, what, the fault, whether the server applied it, and how it
    /// ended.
    pub fn line(&self, origin: Instant) -> String {
        let since = |at: Instant| at.saturating_duration_since(origin).as_secs_f64() * 1e3;
        let ended = match self.ended {
            Some((how, at)) => format!("{how:?} at {:.1} ms", since(at)),
            None => "pending".to_owned(),
        };
        let token = self.call.token.as_str();
        format!(
            "{:>9.1} ms  #{:<4} client {} {:?} {} token {} fault {:?} applied {} {}",
            since(self.at),
            self.call.seq,
            self.call.client,
            self.call.op,
            self.call.resource,
            token.get(..8).unwrap_or(token),
            self.fault,
            self.applied,
            ended
        )
    }
}

/// Marks how a logged call's future ended; a drop before [`finish`](Self::finish) is [`Ended::Dropped`].
struct EndOnDrop<'s> {
    server: &'s ScriptedServer,
    index: usize,
    ended: Option<Ended>,
}

impl EndOnDrop<'_> {
    fn finish<T>(mut self, reply: Result<T>) -> Result<T> {
        self.ended = Some(if reply.is_ok() { Ended::Replied } else { Ended::Failed });
        reply
    }
}

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        let how = self.ended.unwrap_or(Ended::Dropped);
        if let Some(entry) = self.server.state().log.get_mut(self.index) {
            entry.ended = Some((how, Instant::now()));
        }
    }
}

/// A hold point for scripted calls: each call that reaches it waits until it is opened.
///
/// ```
/// use lock_testkit::scripted::Gate;
/// use std::time::Duration;
///
/// # lock_testkit::runtime::tokio(async {
/// let gate = Gate::new();
/// let g = gate.clone();
/// let passer = async move { g.pass().await; "passed" };
/// let opener = async {
///     assert!(gate.wait_arrivals(1, Duration::from_secs(5)).await);
///     gate.open();
/// };
/// let (passed, ()) = futures_util::future::join(passer, opener).await;
/// assert_eq!(passed, "passed");
/// # });
/// ```
#[derive(Clone, Default)]
pub struct Gate {
    inner: Arc<GateInner>,
}

#[derive(Default)]
struct GateInner {
    state: Mutex<GateState>,
    event: Event,
}

#[derive(Default)]
struct GateState {
    arrived: usize,
    open: bool,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, GateState> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the gate: every call waiting there goes on, and later ones pass straight through.
    pub fn open(&self) {
        self.state().open = true;
        self.inner.event.notify(usize::MAX);
    }

    /// How many calls have reached the gate so far.
    pub fn arrivals(&self) -> usize {
        self.state().arrived
    }

    /// Waits until `n` calls have reached the gate; `false` if that did not happen `within`.
    ///
    /// # Errors
    /// None: `false` says the calls did not arrive in time.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn wait_arrivals(&self, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let listener = self.inner.event.listen();
            if self.arrivals() >= n {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let pause = std::pin::pin!(sleep(left));
            futures_util::future::select(listener, pause).await;
        }
    }

    /// Arrives at the gate and waits until it is open.
    ///
    /// # Errors
    /// None.
    ///
    /// # Cancel safety
    /// Cancel-safe; the arrival is counted either way.
    pub async fn pass(&self) {
        {
            let mut st = self.state();
            st.arrived += 1;
        }
        self.inner.event.notify(usize::MAX);
        loop {
            let listener = self.inner.event.listen();
            if self.state().open {
                return;
            }
            listener.await;
        }
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state();
        f.debug_struct("Gate").field("arrived", &st.arrived).field("open", &st.open).finish()
    }
}

/// What a [`ScriptedServer`] keeps: the data, the subscriptions, the rules and the log.
struct Shared {
    data: Arc<dyn LockStore>,
    /// The in-memory data, when the server is not wrapping another store.
    memory: Option<MemoryStore>,
    state: Mutex<ServerState>,
    seq: AtomicUsize,
}

#[derive(Default)]
struct ServerState {
    call_rules: Vec<CallRule>,
    note_rules: Vec<NoteRule>,
    /// Per client: its hub (weak: the client owns it) and the channels the server has it subscribed to.
    clients: Vec<ClientEntry>,
    log: Vec<Logged>,
    /// Extra time spent inside every unsubscribe request (widens the window between a hub's decision and the
    /// request, where ordering bugs live).
    slow_unsubscribe: Duration,
    /// Holds every subscription's confirmation at this gate (the request itself is applied at once).
    subscription_gate: Option<Gate>,
    /// Refuses every subscription request (as a server whose ACL forbids the channel would): nothing is
    /// subscribed, and the confirmation is an injected `Auth` error.
    refuse_subscriptions: bool,
}

struct ClientEntry {
    hub: Weak<ReleaseHub>,
    subscribed: BTreeSet<String>,
    /// Every subscription request in the order the server received it: `(channel, subscribe?)`.
    requests: Vec<(String, bool)>,
}

/// An in-memory "server" whose clients' calls and notifications follow a script. See the [module docs](self).
#[derive(Clone)]
pub struct ScriptedServer {
    shared: Arc<Shared>,
}

impl Default for ScriptedServer {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptedServer {
    /// A server over a fresh [`MemoryStore`], with pub/sub between its clients.
    pub fn new() -> Self {
        let memory = MemoryStore::new();
        Self::build(Arc::new(memory.clone()), Some(memory))
    }

    /// A server whose data is `store` (a real backend, say): faults and gates apply to its calls. Notifications
    /// are the store's own; clients of such a server use the store's hub.
    pub fn over(store: Arc<dyn LockStore>) -> Self {
        Self::build(store, None)
    }

    fn build(data: Arc<dyn LockStore>, memory: Option<MemoryStore>) -> Self {
        ScriptedServer { shared: Arc::new(Shared { data, memory, state: Mutex::default(), seq: AtomicUsize::new(0) }) }
    }

    fn state(&self) -> MutexGuard<'_, ServerState> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new client with release notifications (its own hub, subscribed through this server's pub/sub).
    pub fn client(&self) -> ScriptedStore {
        let id = {
            let mut st = self.state();
            st.clients.push(ClientEntry { hub: Weak::new(), subscribed: BTreeSet::new(), requests: Vec::new() });
            st.clients.len() - 1
        };
        let hub = match &self.shared.memory {
            Some(_) => Some(ReleaseHub::new(ClientControl { id, server: Arc::downgrade(&self.shared) })),
            None => self.shared.data.release_hub().cloned(),
        };
        if let Some(hub) = &hub {
            if let Some(entry) = self.state().clients.get_mut(id) {
                entry.hub = Arc::downgrade(hub);
            }
        }
        ScriptedStore { server: self.clone(), id, hub, ordered: false, clock_lag: Duration::ZERO }
    }

    /// The in-memory data (for assertions such as "no key left").
    ///
    /// # Panics
    /// For a server built with [`over`](Self::over), which has none.
    pub fn memory(&self) -> &MemoryStore {
        match &self.shared.memory {
            Some(memory) => memory,
            None => panic!("a ScriptedServer over another store has no in-memory data"),
        }
    }

    /// Adds a rule for calls: the first rule that returns a fault decides a call; calls no rule claims run
    /// normally. Rules run in the order they were added, under the server's lock (keep them quick).
    pub fn rule(&self, rule: impl FnMut(&Call) -> Option<Fault> + Send + 'static) {
        self.state().call_rules.push(Box::new(rule));
    }

    /// Applies `fault` to the next call of `op` (any client, any resource), once.
    pub fn once(&self, op: Op, fault: Fault) {
        self.once_where(move |call| call.op == op, fault);
    }

    /// Applies `fault` to the next call that `matches`, once.
    pub fn once_where(&self, mut matches: impl FnMut(&Call) -> bool + Send + 'static, fault: Fault) {
        let mut fault = Some(fault);
        self.rule(move |call| if fault.is_some() && matches(call) { fault.take() } else { None });
    }

    /// Adds a rule for notifications: the first rule that returns a delivery decides; others are delivered at
    /// once.
    pub fn notification_rule(&self, rule: impl FnMut(&Notification) -> Option<Delivery> + Send + 'static) {
        self.state().note_rules.push(Box::new(rule));
    }

    /// Removes every call and notification rule.
    pub fn clear_rules(&self) {
        let mut st = self.state();
        st.call_rules.clear();
        st.note_rules.clear();
    }

    /// Refuses every subscription request from now on (`true`), as a server whose ACL forbids the channels would:
    /// nothing is subscribed and each confirmation is an injected [`Injected::Auth`] error.
    pub fn refuse_subscriptions(&self, refuse: bool) {
        self.state().refuse_subscriptions = refuse;
    }

    /// Makes every unsubscribe request take `extra` longer (spent inside the hub's call, on its thread), which
    /// widens the window in which a concurrent subscribe could overtake it.
    pub fn slow_unsubscribe(&self, extra: Duration) {
        self.state().slow_unsubscribe = extra;
    }

    /// Holds the confirmation of every subscription request at `gate` (the server applies the request at once):
    /// the waiter is registered with its hub but not listening yet while it waits there.
    pub fn gate_subscriptions(&self, gate: Gate) {
        self.state().subscription_gate = Some(gate);
    }

    /// Every call so far, in order.
    pub fn log(&self) -> Vec<Logged> {
        self.state().log.clone()
    }

    /// The channels the server has `client` subscribed to now.
    pub fn subscriptions(&self, client: usize) -> BTreeSet<String> {
        self.state().clients.get(client).map(|c| c.subscribed.clone()).unwrap_or_default()
    }

    /// The subscription requests `client` sent, in the order the server received them: `(channel, subscribe?)`.
    pub fn subscription_requests(&self, client: usize) -> Vec<(String, bool)> {
        self.state().clients.get(client).map(|c| c.requests.clone()).unwrap_or_default()
    }

    /// How many clients this server has.
    pub fn clients(&self) -> usize {
        self.state().clients.len()
    }

    fn decide(&self, call: &Call) -> Option<Fault> {
        let mut st = self.state();
        st.call_rules.iter_mut().find_map(|rule| rule(call))
    }

    fn record(&self, call: Call, fault: Option<Fault>, fence_floor: Option<u64>) -> usize {
        let mut st = self.state();
        st.log.push(Logged { call, fault, applied: false, at: Instant::now(), ended: None, fence_floor });
        st.log.len() - 1
    }

    fn mark_applied(&self, index: usize) {
        if let Some(entry) = self.state().log.get_mut(index) {
            entry.applied = true;
        }
    }

    /// Publishes a release of `channel` by client `from` to every subscribed client (the releasing one included:
    /// its hub skips its own echo, as with a real server).
    fn publish(&self, channel: &str, from: usize) {
        self.publish_payload(channel, None, from);
    }

    /// Notifies the clients subscribed to `channel` of a message from client `from`: `payload` as a script
    /// published it, or (`None`) the sender's origin, as a release announces itself.
    fn publish_payload(&self, channel: &str, payload: Option<Vec<u8>>, from: usize) {
        let targets: Vec<(usize, Arc<ReleaseHub>, Delivery)> = {
            let mut st = self.state();
            let subscribed: Vec<(usize, Arc<ReleaseHub>)> = st
                .clients
                .iter()
                .enumerate()
                .filter(|(_, c)| c.subscribed.contains(channel))
                .filter_map(|(i, c)| c.hub.upgrade().map(|hub| (i, hub)))
                .collect();
            subscribed
                .into_iter()
                .map(|(to, hub)| {
                    let note = Notification { channel: channel.to_owned(), from, to };
                    let delivery = st.note_rules.iter_mut().find_map(|rule| rule(&note)).unwrap_or(Delivery::Now);
                    (to, hub, delivery)
                })
                .collect()
        };
        let origin = payload.unwrap_or_else(|| {
            let st = self.state();
            let origin = st.clients.get(from).and_then(|c| c.hub.upgrade()).map(|hub| hub.origin().to_owned());
            origin.unwrap_or_default().into_bytes()
        });
        let origin = String::from_utf8_lossy(&origin).into_owned();
        for (_, hub, delivery) in targets {
            let channel = channel.to_owned();
            let origin = origin.clone();
            match delivery {
                Delivery::Now => hub.deliver(&channel, origin.as_bytes()),
                Delivery::Drop => {}
                Delivery::After(d) => spawn(async move {
                    sleep(d).await;
                    hub.deliver(&channel, origin.as_bytes());
                }),
                Delivery::Gate(gate) => spawn(async move {
                    gate.pass().await;
                    hub.deliver(&channel, origin.as_bytes());
                }),
            }
        }
    }
}

fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    if let Some(task) = lock_core::backend::spawn_background(fut) {
        task.detach();
    }
}

impl fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state();
        f.debug_struct("ScriptedServer")
            .field("data", &self.shared.data)
            .field("clients", &st.clients.len())
            .field("calls", &st.log.len())
            .finish()
    }
}

/// The subscription control of one client's hub: the server applies each request the moment it is made, so the
/// server's view ([`ScriptedServer::subscriptions`]) is exactly the order in which the hub asked.
struct ClientControl {
    id: usize,
    server: Weak<Shared>,
}

impl ClientControl {
    fn apply(&self, channel: &str, subscribe: bool) {
        let Some(shared) = self.server.upgrade() else { return };
        let slow = {
            let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.slow_unsubscribe
        };
        if !subscribe && !slow.is_zero() {
            // On the hub's thread, on purpose: this is the window between the hub's decision and the request.
            let until = Instant::now() + slow;
            while Instant::now() < until {
                std::thread::yield_now();
            }
        }
        let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = st.clients.get_mut(self.id) {
            client.requests.push((channel.to_owned(), subscribe));
            if subscribe {
                client.subscribed.insert(channel.to_owned());
            } else {
                client.subscribed.remove(channel);
            }
        }
    }
}

impl fmt::Debug for ClientControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientControl").field("client", &self.id).finish()
    }
}

impl SubscriptionControl for ClientControl {
    fn subscribe(&self, channel: &str) -> Confirmation {
        let refused = self.server.upgrade().is_some_and(|shared| {
            let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.refuse_subscriptions
        });
        if refused {
            return Box::pin(async { Err(Injected::Auth.error()) });
        }
        self.apply(channel, true);
        let gate = self.server.upgrade().and_then(|shared| {
            let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.subscription_gate.clone()
        });
        Box::pin(async move {
            if let Some(gate) = gate {
                gate.pass().await;
            }
            Ok(())
        })
    }

    fn unsubscribe(&self, channel: &str) {
        self.apply(channel, false);
    }
}

/// One client of a [`ScriptedServer`]: a [`LockStore`] whose calls follow the server's rules.
#[derive(Clone)]
pub struct ScriptedStore {
    server: ScriptedServer,
    id: usize,
    hub: Option<Arc<ReleaseHub>>,
    ordered: bool,
    /// How far this client's wall clock lags: its acquires' fencing floors are this much lower.
    clock_lag: Duration,
}

impl ScriptedStore {
    /// This client's number on its server.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The server.
    pub fn server(&self) -> &ScriptedServer {
        &self.server
    }

    /// Claims (or not) that commands reach the server in call order ([`LockStore::orders_commands`]), as a
    /// single pipelined connection does. Off by default. With it on, a release that is held at a gate on its first
    /// poll models a command that was not queued yet when the engine woke the next waiter.
    pub fn ordered(mut self, ordered: bool) -> Self {
        self.ordered = ordered;
        self
    }

    /// Makes this client's wall clock lag real time by `lag`: the fencing floor its acquires carry (a Redlock's, see
    /// [`AcquireRequest::fence_floor`]) is `lag` lower, as a host whose clock is behind would send. The floor is the
    /// only use lock-core makes of the wall clock, so this is the whole of a lagging client clock.
    pub fn with_clock_lag(mut self, lag: Duration) -> Self {
        self.clock_lag = lag;
        self
    }

    /// Drops this client's release hub: its waiters poll.
    pub fn without_notifications(mut self) -> Self {
        self.hub = None;
        self
    }

    /// `floor` as this client's lagging clock would have it (see [`with_clock_lag`](Self::with_clock_lag)).
    fn lagging(&self, floor: Option<u64>) -> Option<u64> {
        let lag = u64::try_from(self.clock_lag.as_micros()).unwrap_or(u64::MAX);
        floor.map(|floor| floor.saturating_sub(lag))
    }

    /// This client's release hub, if it has one.
    pub fn hub(&self) -> Option<&Arc<ReleaseHub>> {
        self.hub.as_ref()
    }

    async fn run<T, F>(&self, op: Op, keys: &LockKeys, token: &Token, apply: F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        self.run_as(op, keys.resource(), token, None, apply).await
    }

    /// [`run`](Self::run) for a call named by `resource` (a primitive's first key), logged with the fencing floor an
    /// acquire carries.
    async fn run_as<T, F>(&self, op: Op, resource: &str, token: &Token, floor: Option<u64>, apply: F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let call = Call {
            client: self.id,
            op,
            resource: resource.to_owned(),
            token: token.clone(),
            seq: self.server.shared.seq.fetch_add(1, Ordering::SeqCst),
        };
        let fault = self.server.decide(&call);
        let index = self.server.record(call, fault.clone(), floor);
        let end = EndOnDrop { server: &self.server, index, ended: None };
        let applied = async {
            let reply = apply.await;
            self.server.mark_applied(index);
            reply
        };
        let reply = match fault {
            None => applied.await,
            Some(Fault::Gate(gate)) => {
                gate.pass().await;
                applied.await
            }
            Some(Fault::GateReply(gate)) => {
                let reply = applied.await;
                gate.pass().await;
                reply
            }
            Some(Fault::Delay(d)) => {
                sleep(d).await;
                applied.await
            }
            Some(Fault::DelayReply(d)) => {
                let reply = applied.await;
                sleep(d).await;
                reply
            }
            Some(Fault::Yield(n)) => {
                for _ in 0..n {
                    yield_now().await;
                }
                applied.await
            }
            Some(Fault::FailBefore(err)) => Err(err.error()),
            Some(Fault::FailAfter(err)) => {
                let _ = applied.await;
                Err(err.error())
            }
            Some(Fault::Hang) => {
                let _ = applied.await;
                std::future::pending().await
            }
            Some(Fault::Staged { request, applied: run, reply, lost }) => {
                request.pass().await;
                if run {
                    let answer = applied.await;
                    reply.pass().await;
                    lost.map_or(answer, |err| Err(err.error()))
                } else {
                    Err(lost.unwrap_or(Injected::Unavailable).error())
                }
            }
        };
        end.finish(reply)
    }
}

impl fmt::Debug for ScriptedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedStore")
            .field("client", &self.id)
            .field("ordered", &self.ordered)
            .field("notifications", &self.hub.is_some())
            .finish()
    }
}

#[async_trait]
impl LockStore for ScriptedStore {
    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply> {
        let request = AcquireRequest { fence_floor: self.lagging(request.fence_floor), ..request };
        let (resource, floor) = (request.keys.resource(), request.fence_floor);
        self.run_as(Op::Acquire, resource, request.token, floor, self.server.shared.data.acquire(request)).await
    }

    async fn release(&self, keys: &LockKeys, token: &Token) -> Result<ReleaseOutcome> {
        let apply = async {
            let Some(memory) = &self.server.shared.memory else {
                return self.server.shared.data.release(keys, token).await;
            };
            // lock-core's release as a Redis backend sends it, with this client's origin: UNLOCK first unless this client
            // listens on the lock's channel (WIRE.md 8.3.1), and RELEASE when UNLOCK finds the mark. What RELEASE publishes
            // (nothing, an announcement for every process, or one naming the first waiting process) reaches the
            // clients through the notification rules, inside the release.
            let origin = self.hub.as_ref().map(|hub| hub.origin()).unwrap_or_default();
            let contended = self.hub.as_ref().is_some_and(|hub| hub.listens_on(keys.channel()));
            if !contended {
                let (call_keys, args) = ([keys.lock(), keys.awaited()], [token.as_str()]);
                let call =
                    lock_core::backend::Call::script("unlock", &lock_core::backend::scripts::UNLOCK, &call_keys, &args);
                let (ran, _) = memory.run_observed(call).await?;
                let code = ran.reply.as_int().ok_or_else(|| LockError::backend("no unlock reply"))?;
                if let Some(outcome) = lock_core::backend::scripts::parse_unlock(code)? {
                    return Ok(outcome);
                }
            }
            let call_keys = [keys.lock(), keys.channel(), keys.awaited(), keys.waiting()];
            let args = [token.as_str(), origin, "0"];
            let call =
                lock_core::backend::Call::script("release", &lock_core::backend::scripts::RELEASE, &call_keys, &args);
            let (ran, published) = memory.run_observed(call).await?;
            for (channel, payload) in published {
                self.server.publish_payload(&channel, Some(payload), self.id);
            }
            let code = ran.reply.as_int().ok_or_else(|| LockError::backend("no release reply"))?;
            lock_core::backend::scripts::parse_release(code)
        };
        self.run(Op::Release, keys, token, apply).await
    }

    async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> Result<ExtendReply> {
        self.run(Op::Extend, keys, token, self.server.shared.data.extend(keys, token, ttl)).await
    }

    async fn raise_fence(&self, keys: &LockKeys, token: &Token, at_least: u64) -> Result<bool> {
        self.run(Op::RaiseFence, keys, token, self.server.shared.data.raise_fence(keys, token, at_least)).await
    }

    // The multi-resource calls are scripted as the single calls of their first resource (an acquire of a set is
    // an `Op::Acquire`, and so on), so every fault applies to them too.
    async fn acquire_all(&self, request: AcquireAllRequest<'_>) -> Result<AcquireAllReply> {
        let first = request.keys.first().ok_or_else(|| LockError::invalid("acquire_all of no keys"))?;
        let request = AcquireAllRequest { fence_floor: self.lagging(request.fence_floor), ..request };
        let (resource, floor) = (first.resource(), request.fence_floor);
        self.run_as(Op::Acquire, resource, request.token, floor, self.server.shared.data.acquire_all(request)).await
    }

    async fn release_all(&self, keys: &[LockKeys], token: &Token) -> Result<Vec<ReleaseOutcome>> {
        let first = keys.first().ok_or_else(|| LockError::invalid("release_all of no keys"))?;
        let apply = async {
            let Some(memory) = &self.server.shared.memory else {
                return self.server.shared.data.release_all(keys, token).await;
            };
            let mut outcomes = Vec::with_capacity(keys.len());
            for (keys, (outcome, announced)) in keys.iter().zip(observed_release(memory, keys, token).await?) {
                if announced {
                    self.server.publish(keys.channel(), self.id);
                }
                outcomes.push(outcome);
            }
            Ok(outcomes)
        };
        self.run(Op::Release, first, token, apply).await
    }

    async fn extend_all(&self, keys: &[LockKeys], token: &Token, ttl: Duration) -> Result<Vec<ExtendReply>> {
        let first = keys.first().ok_or_else(|| LockError::invalid("extend_all of no keys"))?;
        self.run(Op::Extend, first, token, self.server.shared.data.extend_all(keys, token, ttl)).await
    }

    /// The calls of the other primitives (a fair lock's, a read-write lock's, …): an `acquire`, `release`,
    /// `extend` or `fence` of a token (the first argument) gets the same faults as the mutex's calls, and the messages its
    /// script publishes reach the subscribed clients through the notification rules, as a `RELEASE`'s do. Other
    /// calls (reads: `inspect`, states) run as they are.
    async fn call(&self, call: lock_core::backend::Call<'_>) -> Result<lock_core::backend::Ran> {
        let op = match call.operation {
            "acquire" => Some(Op::Acquire),
            "release" => Some(Op::Release),
            "extend" => Some(Op::Extend),
            "fence" => Some(Op::Fence),
            "raise-fence" => Some(Op::RaiseFence),
            _ => None,
        };
        if let (true, Some(memory)) = (call.operation == "pass-on", &self.server.shared.memory) {
            // A wake-up passed on to another process: what the script publishes reaches it as a release's does.
            let (ran, published) = memory.run_observed(call).await?;
            for (channel, payload) in published {
                self.server.publish_payload(&channel, Some(payload), self.id);
            }
            return Ok(ran);
        }
        let token = call.args.first().and_then(|arg| Token::parse(arg));
        let (Some(op), Some(token), Some(memory), Some(first)) =
            (op, token, &self.server.shared.memory, call.keys.first().copied())
        else {
            return self.server.shared.data.call(call).await;
        };
        let apply = async {
            let (ran, published) = memory.run_observed(call).await?;
            for (channel, payload) in published {
                self.server.publish_payload(&channel, Some(payload), self.id);
            }
            Ok(ran)
        };
        self.run_as(op, first, &token, None, apply).await
    }

    fn topology(&self) -> lock_core::backend::Topology {
        self.server.shared.data.topology()
    }

    fn release_hub(&self) -> Option<&Arc<ReleaseHub>> {
        self.hub.as_ref()
    }

    fn orders_commands(&self) -> bool {
        self.ordered
    }
}

/// lock-core's `MULTI_RELEASE` (for one resource, the same steps as `RELEASE`), run unchanged on the in-memory data
/// inside one atomic script that also tells, per resource, whether it announced the release (it deleted the mark a
/// try left that found the lock held): the scripted server then notifies its clients exactly when Redis would
/// publish.
async fn observed_release(
    memory: &MemoryStore,
    keys: &[LockKeys],
    token: &Token,
) -> Result<Vec<(ReleaseOutcome, bool)>> {
    static OBSERVED: std::sync::OnceLock<lock_core::backend::scripts::Script> = std::sync::OnceLock::new();
    let script = OBSERVED.get_or_init(|| {
        let body = format!(
            "local n = #KEYS / 3\nlocal marked = {{}}\nfor i = 1, n do\n  marked[i] = redis.call('EXISTS', KEYS[2 * n + i])\n\
             end\nlocal function release()\n{}\nend\nlocal codes = release()\nlocal reply = {{}}\nfor i = 1, n do\n  \
             reply[2 * i - 1] = codes[i]\n  reply[2 * i] = (codes[i] == 1 and marked[i] == 1) and 1 or 0\nend\n\
             return reply\n",
            lock_core::backend::scripts::MULTI_RELEASE.body()
        );
        lock_core::backend::scripts::Script::new("observed-release", Box::leak(body.into_boxed_str()))
    });
    let call_keys = lock_core::backend::scripts::multi_release_keys(keys);
    let args = [token.as_str(), "scripted", "0"];
    let ran = memory.call(lock_core::backend::Call::script("release", script, &call_keys, &args)).await?;
    let ints = ran.reply.as_ints().filter(|i| i.len() == 2 * keys.len());
    let ints = ints.ok_or_else(|| LockError::backend(format!("observed release replied {:?}", ran.reply)))?;
    ints.chunks(2).map(|pair| Ok((lock_core::backend::scripts::parse_release(pair[0])?, pair[1] == 1))).collect()
}

/// Yields once to the executor (any runtime).
///
/// # Errors
/// None.
///
/// # Cancel safety
/// Cancel-safe.
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

/// Counts of what a server's log holds per operation (for assertions on how many calls a scenario made).
pub fn count_ops(log: &[Logged]) -> BTreeMap<Op, usize> {
    let mut counts = BTreeMap::new();
    for entry in log {
        *counts.entry(entry.call.op).or_insert(0) += 1;
    }
    counts
}

/// A future that is dropped after it returned `Pending` `polls` times: a cancellation at its `polls`-th await
/// point. Resolves to `None` when it was cut off.
pub struct CancelAfter<F> {
    fut: Option<Pin<Box<F>>>,
    polls: u32,
}

impl<F: Future> CancelAfter<F> {
    /// Wraps `fut`; it is dropped once it has returned `Pending` `polls` times (0: dropped before its first poll).
    pub fn new(fut: F, polls: u32) -> Self {
        CancelAfter { fut: Some(Box::pin(fut)), polls }
    }
}

impl<F: Future> Future for CancelAfter<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        if this.polls == 0 {
            this.fut = None;
            return std::task::Poll::Ready(None);
        }
        let Some(fut) = this.fut.as_mut() else { return std::task::Poll::Ready(None) };
        match fut.as_mut().poll(cx) {
            std::task::Poll::Ready(out) => {
                this.fut = None;
                std::task::Poll::Ready(Some(out))
            }
            std::task::Poll::Pending => {
                this.polls -= 1;
                if this.polls == 0 {
                    // Cancelled here: drop the future now, at this await point.
                    this.fut = None;
                    return std::task::Poll::Ready(None);
                }
                std::task::Poll::Pending
            }
        }
    }
}

impl<F> fmt::Debug for CancelAfter<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelAfter").field("polls_left", &self.polls).field("done", &self.fut.is_none()).finish()
    }
}
